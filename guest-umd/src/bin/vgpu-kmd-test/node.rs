//! What every area shares: the render node opened as the library's [`Kmd`],
//! CPU mappings of BOs, command buffers written with hwif's packet encoder
//! (through the UMD's [`Writer`]), and the scratch buffers several areas set
//! up.

use std::fs::OpenOptions;
use std::path::Path;
use std::time::Duration;

use vgpu_hwif::packet::{self, Packet};
use vgpu_umd::cmdbuf::Writer;
use vgpu_umd::kmd::{Kmd, KmdError};
use vgpu_umd::uapi::{self, param};

pub const PAGE: u64 = 4096;
/// One millisecond in the nanoseconds of `WAIT` timeouts.
pub const MS: u64 = 1_000_000;

/// The PCI name (`0000:01:00.0`) of the device bound to vgpu.
pub fn pci_name() -> Option<String> {
    std::fs::read_dir("/sys/bus/pci/drivers/vgpu")
        .ok()?
        .flatten()
        .find_map(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.starts_with("0000:").then_some(n)
        })
}

/// Opens the render node at `path` (a file of its own: its own VM).
pub fn open(path: &Path) -> Kmd {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .expect("open render node");
    Kmd::new(file)
}

pub fn fence(ctx_id: u32, engine: u32, seqno: u64) -> uapi::DrmVgpuFence {
    uapi::DrmVgpuFence {
        ctx_id,
        engine,
        seqno,
    }
}

pub fn copy(src: u64, dst: u64, size: u64) -> Packet {
    Packet::Copy { src, dst, size }
}

pub fn fill(dst: u64, size: u64, pattern: u32) -> Packet {
    Packet::Fill { dst, size, pattern }
}

pub fn sem_wait_eq(va: u64, value: u64) -> Packet {
    Packet::SemWait {
        va,
        value,
        op: packet::SEM_WAIT_EQ,
    }
}

/// `packets` encoded for `generation` as the device reads them at `va`
/// (with gen 2's alignment padding), padded with a NOP to a multiple of 8
/// bytes.
pub fn encode(generation: u32, va: u64, packets: &[Packet]) -> Vec<u32> {
    // Room for each packet and the NOPs that may align it, and the final NOP.
    let room: usize = packets
        .iter()
        .map(|p| match *p {
            Packet::Nop { words } => words as usize,
            _ => 32,
        })
        .sum();
    let mut words = vec![0; room + 1];
    let mut w = Writer::new(generation, va, &mut words, 0);
    for p in packets {
        w.push(p).expect("room for the packet");
    }
    let len = w.finish();
    words.truncate(len);
    words
}

/// A CPU mapping of a BO.
pub struct Map {
    ptr: *mut u64,
    len: usize,
}

impl Map {
    /// Maps `size` bytes of BO `handle`.
    pub fn new(n: &Kmd, handle: u32, size: u64) -> Result<Map, KmdError> {
        Ok(Map {
            ptr: n.mmap(handle, size)?.cast(),
            len: size as usize,
        })
    }

    pub fn write(&self, i: usize, v: u64) {
        assert!(i < self.len / 8);
        // SAFETY: In bounds of the live mapping (asserted).
        unsafe { self.ptr.add(i).write_volatile(v) }
    }

    pub fn read(&self, i: usize) -> u64 {
        assert!(i < self.len / 8);
        // SAFETY: In bounds of the live mapping (asserted).
        unsafe { self.ptr.add(i).read_volatile() }
    }

    /// Stores the 32-bit word `k` alone (a word another agent writes next
    /// to it is not rewritten).
    pub fn write_u32(&self, k: usize, v: u32) {
        assert!(k < self.len / 4);
        // SAFETY: In bounds of the live mapping (asserted), 4-byte aligned.
        unsafe { self.ptr.cast::<u32>().add(k).write_volatile(v) }
    }

    /// Writes `words` from 32-bit word `first` on, leaving the words around
    /// them as they are.
    pub fn write_words(&self, first: usize, words: &[u32]) {
        for (i, w) in words.iter().enumerate() {
            let k = first + i;
            let old = self.read(k / 2);
            let v = if k.is_multiple_of(2) {
                (old & !0xffff_ffff) | u64::from(*w)
            } else {
                (old & 0xffff_ffff) | (u64::from(*w) << 32)
            };
            self.write(k / 2, v);
        }
    }
}

impl Drop for Map {
    fn drop(&mut self) {
        // SAFETY: Unmaps exactly the range `mmap` returned.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// Words of one program slot: 256 bytes, so every program starts 64-byte
/// aligned, as gen 2 engine packets require.
const SLOT_WORDS: usize = 64;

/// A command-buffer BO bound READ|EXEC and mapped for the CPU: programs at
/// 256-byte slots, or packets at any word.
pub struct Cmds {
    pub map: Map,
    pub va: u64,
    pub generation: u32,
    /// The BO.
    pub handle: u32,
}

impl Cmds {
    /// A BO of `pages` pages bound READ|EXEC at `va`.
    pub fn new(n: &Kmd, va: u64, pages: u64) -> Result<Cmds, KmdError> {
        let generation = n.get_param(param::GENERATION)? as u32;
        let handle = n.gem_create(pages * PAGE, 0)?;
        n.vm_bind(
            handle,
            va,
            pages * PAGE,
            uapi::VM_BIND_READ | uapi::VM_BIND_EXEC,
        )?;
        Ok(Cmds {
            map: Map::new(n, handle, pages * PAGE)?,
            va,
            generation,
            handle,
        })
    }

    /// Assembles `src` for the device's generation and writes the module
    /// image from word `first` on (the BO is bound EXEC): the `DISPATCH`
    /// of its first kernel, one thread, with `args_size` argument bytes at
    /// `args_va`.
    ///
    /// # Errors
    /// The assembler's or the image writer's message.
    pub fn module(&self, first: usize, src: &str) -> Result<Module, String> {
        let bytes = vgpu_isa::asm::assemble(src, self.generation)
            .map_err(|e| format!("{e:?}"))?
            .to_bytes()
            .map_err(|e| format!("{e:?}"))?;
        let words: Vec<u32> = bytes
            .chunks(4)
            .map(|c| {
                let mut w = [0u8; 4];
                w[..c.len()].copy_from_slice(c);
                u32::from_le_bytes(w)
            })
            .collect();
        self.map.write_words(first, &words);
        Ok(Module {
            va: self.va + 4 * first as u64,
            size: bytes.len() as u32,
        })
    }

    /// Writes `packets` at slot `slot`, padded with a NOP to a multiple of 8
    /// bytes; returns the command buffer.
    pub fn program(&self, slot: usize, packets: &[Packet]) -> uapi::DrmVgpuCmd {
        let first = slot * SLOT_WORDS;
        let words = encode(self.generation, self.va + 4 * first as u64, packets);
        assert!(words.len() <= SLOT_WORDS);
        self.write(first, &words)
    }

    /// Writes `packets` from word `first` on (any length); returns the
    /// command buffer.
    pub fn put(&self, first: usize, packets: &[Packet]) -> uapi::DrmVgpuCmd {
        let words = encode(self.generation, self.va + 4 * first as u64, packets);
        self.write(first, &words)
    }

    fn write(&self, first: usize, words: &[u32]) -> uapi::DrmVgpuCmd {
        self.map.write_words(first, words);
        uapi::DrmVgpuCmd {
            va: self.va + 4 * first as u64,
            size: 4 * words.len() as u64,
        }
    }
}

/// A 4-page command-buffer BO bound READ|EXEC at `VA_START + at` and a
/// data BO of `data_pages` pages bound READ|WRITE 1 MiB above it.
/// A compute module written into a command BO ([`Cmds::module`]).
#[derive(Clone, Copy, Debug)]
pub struct Module {
    pub va: u64,
    pub size: u32,
}

impl Module {
    /// A `DISPATCH` of the module's first kernel: one workgroup of one
    /// thread, with `args_size` argument bytes at `args_va`.
    pub fn dispatch(&self, args_va: u64, args_size: u32) -> Packet {
        Packet::Dispatch(packet::DispatchPacket {
            module_va: self.va,
            module_size: self.size,
            kernel: 0,
            args_va,
            args_size,
            grid: [1, 1, 1],
            wg: [1, 1, 1],
            shared_size: 0,
        })
    }
}

pub struct Scratch {
    pub cmds: Cmds,
    pub data: u32,
    pub dva: u64,
    pub start: u64,
}

pub fn scratch(n: &Kmd, at: u64, data_pages: u64) -> Scratch {
    let start = n.get_param(param::VA_START).unwrap_or(0);
    let cva = start + at;
    let dva = cva + 0x10_0000;
    let cmds = Cmds::new(n, cva, 4).expect("command buffer");
    let data = n.gem_create(data_pages * PAGE, 0).unwrap_or(0);
    let _ = n.vm_bind(
        data,
        dva,
        data_pages * PAGE,
        uapi::VM_BIND_READ | uapi::VM_BIND_WRITE,
    );
    Scratch {
        cmds,
        data,
        dva,
        start,
    }
}

/// About 6 s of work in pieces of about 150 ms, from `one`, the time of a
/// piece of `unit` measured warm: how many units per piece, and pieces.
pub fn plan(one: Duration, unit: u64, max_units: u64) -> (u64, usize) {
    let ms = one.as_millis().max(1) as u64;
    let units = (unit * 150 / ms).clamp(1, max_units);
    let piece = (ms * units / unit).max(1);
    let pieces = (6000 / piece).clamp(4, 400) as usize;
    (units, pieces)
}

#[cfg(test)]
mod tests {
    use super::*;
    use vgpu_hwif::packet::{encode_header, OP_COPY, OP_FILL, OP_NOP, OP_SEM_WAIT};

    #[test]
    fn programs_hold_the_packets_and_an_even_number_of_words() {
        for generation in [1, 2] {
            // COPY is 7 words: a one-word NOP makes it a multiple of 8 bytes.
            let w = encode(generation, 0x10_0000, &[copy(0x1_0000_2000, 0x3000, 0x40)]);
            let want = [
                encode_header(generation, OP_COPY, 7),
                0x2000,
                1,
                0x3000,
                0,
                0x40,
                0,
                encode_header(generation, OP_NOP, 1),
            ];
            assert_eq!(w, want);
            // SEM_WAIT is 6 words: nothing added.
            let w = encode(generation, 0x10_0000, &[sem_wait_eq(0x2000, 3)]);
            let want = [
                encode_header(generation, OP_SEM_WAIT, 6),
                0x2000,
                0,
                3,
                0,
                packet::SEM_WAIT_EQ,
            ];
            assert_eq!(w, want);
            // FILLs padded to 64-byte slots by explicit NOPs.
            let slots = [fill(0x3000, 8, 5), Packet::Nop { words: 10 }].repeat(3);
            let w = encode(generation, 0x10_0000, &slots);
            assert_eq!(w.len(), 48);
            for slot in w.chunks(16) {
                assert_eq!(slot[0], encode_header(generation, OP_FILL, 6));
                assert_eq!(slot[6], encode_header(generation, OP_NOP, 10));
            }
        }
    }

    #[test]
    fn gen2_aligns_copy_engine_packets_that_follow_others() {
        // A FILL after a SEM_WAIT starts at the next 64-byte boundary.
        let w = encode(2, 0x10_0000, &[sem_wait_eq(0x2000, 1), fill(0x3000, 8, 5)]);
        assert_eq!(w.len(), 22);
        assert_eq!(w[6], encode_header(2, OP_NOP, 10));
        assert_eq!(w[16], encode_header(2, OP_FILL, 6));
    }
}
