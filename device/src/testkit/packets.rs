//! [`PacketWriter`]: packets written into a ring (wrapping, tracking the
//! write pointer) or a command buffer, gen-2 copy-engine packets aligned
//! to 64 bytes with `NOP`s.

use vgpu_hwif::packet::{
    encode_header, is_copy_engine_packet, Packet, GEN2_ENGINE_PACKET_ALIGN, OP_NOP,
};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use super::KitError;

/// Writes packets into a ring or a command buffer that is contiguous in
/// guest-physical memory at `pa` and mapped at GPU VA `va`.
#[derive(Debug, Clone)]
pub struct PacketWriter {
    pa: u64,
    va: u64,
    size: u32,
    ring: bool,
    generation: u32,
    wptr: u32,
}

impl PacketWriter {
    /// A ring of `size` bytes (a power of two).
    pub fn ring(pa: u64, va: u64, size: u32, generation: u32) -> Self {
        PacketWriter {
            pa,
            va,
            size,
            ring: true,
            generation,
            wptr: 0,
        }
    }

    /// A command buffer of at most `size` bytes.
    pub fn buffer(pa: u64, va: u64, size: u32, generation: u32) -> Self {
        PacketWriter {
            pa,
            va,
            size,
            ring: false,
            generation,
            wptr: 0,
        }
    }

    /// Bytes written so far: the ring's write pointer to publish with
    /// `DOORBELL`, or the command buffer's size for `INDIRECT`.
    pub fn wptr(&self) -> u32 {
        self.wptr
    }

    /// Continues at write pointer `wptr` (e.g. after an engine reset moved
    /// the read pointer there).
    pub fn set_wptr(&mut self, wptr: u32) {
        self.wptr = wptr;
    }

    /// GPU VA of the next word.
    pub fn next_va(&self) -> u64 {
        self.va + u64::from(self.offset(self.wptr))
    }

    /// GPU VA of the buffer.
    pub fn va(&self) -> u64 {
        self.va
    }

    fn offset(&self, ptr: u32) -> u32 {
        if self.ring {
            ptr & (self.size - 1)
        } else {
            ptr
        }
    }

    /// Writes raw words (wrapping in a ring).
    pub fn words(&mut self, mem: &GuestMemoryMmap, words: &[u32]) -> Result<u64, KitError> {
        let at = self.next_va();
        if !self.ring && (self.wptr as usize + 4 * words.len()) > self.size as usize {
            return Err(KitError::BufferFull);
        }
        for w in words {
            let off = self.offset(self.wptr);
            mem.write_obj(w.to_le(), GuestAddress(self.pa + u64::from(off)))?;
            self.wptr = self.wptr.wrapping_add(4);
        }
        Ok(at)
    }

    /// A `NOP` of `words` words.
    pub fn nop(&mut self, mem: &GuestMemoryMmap, words: u32) -> Result<u64, KitError> {
        let mut w = vec![0u32; words as usize];
        if let Some(h) = w.first_mut() {
            *h = encode_header(self.generation, OP_NOP, words);
        }
        self.words(mem, &w)
    }

    /// Writes `p` encoded for the writer's generation (on gen 2, copy-engine
    /// packets are first aligned to 64 bytes with a `NOP`). Returns the
    /// packet's GPU VA.
    pub fn packet(&mut self, mem: &GuestMemoryMmap, p: &Packet) -> Result<u64, KitError> {
        if let Packet::Nop { words } = *p {
            return self.nop(mem, words.clamp(1, vgpu_hwif::packet::MAX_PACKET_WORDS));
        }
        if self.generation >= 2 && is_copy_engine_packet(p.opcode()) {
            let misalign = self.next_va() % GEN2_ENGINE_PACKET_ALIGN;
            if misalign != 0 {
                self.nop(mem, ((GEN2_ENGINE_PACKET_ALIGN - misalign) / 4) as u32)?;
            }
        }
        let mut buf = [0u32; 16];
        let n = p.encode(self.generation, &mut buf).unwrap_or(0);
        self.words(mem, buf.get(..n).unwrap_or(&[]))
    }
}
