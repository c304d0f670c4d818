//! Command buffers: packet encoding for the device's generation (gen 2's
//! 64-byte alignment of copy packets, padded with `NOP`s), a pool of
//! command buffers recycled once the fence of the batch that used them
//! signalled, and the `VGPU_DUMP` file format.

use std::io::Write;
use std::sync::{Arc, Mutex};

use vgpu_hwif::packet::{self, Packet, GEN2_ENGINE_PACKET_ALIGN};

use crate::config::Config;
use crate::fence::{self, SyncPoint};
use crate::kmd::Kmd;
use crate::memory::{Bo, MemError, VaAllocator};
use crate::uapi;

/// Encoding errors.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum CmdError {
    /// The packet does not fit in the rest of the buffer.
    #[error("command buffer full")]
    Full,
    /// The packet cannot be encoded (operands out of range).
    #[error("packet {0:?} cannot be encoded")]
    Unencodable(Packet),
}

/// Words a packet needs, including gen-2 alignment padding, when the next
/// free word is at GPU VA `va`.
pub fn padding_words(generation: u32, opcode: u8, va: u64) -> u32 {
    if generation >= 2 && packet::is_copy_engine_packet(opcode) {
        let rem = va % GEN2_ENGINE_PACKET_ALIGN;
        if rem != 0 {
            return ((GEN2_ENGINE_PACKET_ALIGN - rem) / 4) as u32;
        }
    }
    0
}

/// Writes packets into a word slice that the device reads at `base_va`.
#[derive(Debug)]
pub struct Writer<'a> {
    generation: u32,
    base_va: u64,
    words: &'a mut [u32],
    len: usize,
}

impl<'a> Writer<'a> {
    /// A writer over `words` (the device sees word 0 at `base_va`), starting
    /// at word `len`.
    pub fn new(generation: u32, base_va: u64, words: &'a mut [u32], len: usize) -> Writer<'a> {
        Writer {
            generation,
            base_va,
            words,
            len,
        }
    }

    /// Words written so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is written.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn nop(&mut self, words: u32) {
        let n = Packet::Nop { words }
            .encode(self.generation, &mut self.words[self.len..])
            .expect("room checked");
        self.len += n;
    }

    /// Appends `p`, preceded by `NOP` padding where gen 2 requires it.
    pub fn push(&mut self, p: &Packet) -> Result<(), CmdError> {
        // LAB(7) BEGIN cmd-push
        let va = self.base_va + 4 * self.len as u64;
        let pad = padding_words(self.generation, p.opcode(), va) as usize;
        let mut tmp = [0u32; 64];
        let n = p
            .encode(self.generation, &mut tmp)
            .ok_or(CmdError::Unencodable(*p))?;
        if self.len + pad + n > self.words.len() {
            return Err(CmdError::Full);
        }
        if pad > 0 {
            self.nop(pad as u32);
        }
        self.words[self.len..self.len + n].copy_from_slice(&tmp[..n]);
        self.len += n;
        Ok(())
        // LAB(7) END cmd-push
    }

    /// Pads to a multiple of 8 bytes (SUBMIT's command-buffer size rule).
    /// There is always room: buffers hold an even number of words.
    pub fn finish(&mut self) -> usize {
        // LAB(7) BEGIN cmd-finish
        if self.len % 2 == 1 {
            self.nop(1);
        }
        self.len
        // LAB(7) END cmd-finish
    }
}

/// One command buffer: a BO bound READ|EXEC. Batches are appended one
/// after another (`start` is where the current one begins), so a buffer
/// serves many small submissions before it is recycled.
#[derive(Debug)]
pub struct CmdBuf {
    pub(crate) bo: Arc<Bo>,
    /// Words written.
    pub(crate) len: usize,
    /// First word of the current batch.
    pub(crate) start: usize,
    /// Fences of the submitted batches in this buffer.
    pub(crate) uses: Vec<SyncPoint>,
}

impl CmdBuf {
    /// The buffer's words.
    fn words(&mut self) -> &mut [u32] {
        let n = (self.bo.size() / 4) as usize;
        // SAFETY: the BO's mapping is `size` bytes, page aligned, and only
        // this `CmdBuf` writes it (the pool hands a buffer to one batch at
        // a time and takes it back only after the device finished it).
        unsafe { std::slice::from_raw_parts_mut(self.bo.ptr(0).cast::<u32>(), n) }
    }

    /// Appends `p`.
    pub fn push(&mut self, generation: u32, p: &Packet) -> Result<(), CmdError> {
        let va = self.bo.va();
        let len = self.len;
        let mut w = Writer::new(generation, va, self.words(), len);
        w.push(p)?;
        self.len = w.len();
        Ok(())
    }

    /// Pads to 8 bytes; the `SUBMIT` entry of the current batch.
    pub fn finish(&mut self, generation: u32) -> uapi::DrmVgpuCmd {
        let va = self.bo.va();
        let len = self.len;
        let mut w = Writer::new(generation, va, self.words(), len);
        self.len = w.finish();
        uapi::DrmVgpuCmd {
            va: va + 4 * self.start as u64,
            size: 4 * (self.len - self.start) as u64,
        }
    }

    /// Whether the current batch wrote nothing here.
    pub fn batch_is_empty(&self) -> bool {
        self.len == self.start
    }

    /// Words left.
    pub fn room(&self) -> usize {
        (self.bo.size() / 4) as usize - self.len
    }

    /// The current batch's words.
    pub fn written(&mut self) -> Vec<u32> {
        let (a, n) = (self.start, self.len);
        self.words()[a..n].to_vec()
    }

    /// GPU VA of the current batch.
    pub fn batch_va(&self) -> u64 {
        self.bo.va() + 4 * self.start as u64
    }
}

/// Command-buffer pool statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CmdPoolStats {
    /// Buffers created.
    pub created: u64,
    /// Buffers waiting for their batch's fence.
    pub in_flight: u64,
    /// Buffers ready.
    pub free: u64,
    /// Times a buffer was taken by waiting for the oldest in flight
    /// (`VGPU_CMDBUF_MAX` reached).
    pub waited: u64,
    /// Batches that needed more than one buffer (chained).
    pub chained: u64,
}

/// The pool of command buffers.
#[derive(Debug)]
pub struct CmdPool {
    kmd: Arc<Kmd>,
    vas: Arc<Mutex<VaAllocator>>,
    size: u64,
    /// Most buffers the pool creates.
    max: u64,
    /// Fence-wait thresholds for waiting on a buffer in flight.
    wait_cfg: Config,
    free: Vec<CmdBuf>,
    /// In submission order (oldest first).
    in_flight: Vec<CmdBuf>,
    pub(crate) stats: CmdPoolStats,
}

impl CmdPool {
    /// Buffers of `cfg.cmdbuf_size` bytes, at most `cfg.cmdbuf_max` of them.
    pub fn new(kmd: Arc<Kmd>, vas: Arc<Mutex<VaAllocator>>, cfg: &Config) -> CmdPool {
        CmdPool {
            kmd,
            vas,
            size: cfg.cmdbuf_size,
            max: u64::from(cfg.cmdbuf_max.max(2)),
            wait_cfg: cfg.clone(),
            free: Vec::new(),
            in_flight: Vec::new(),
            stats: CmdPoolStats::default(),
        }
    }

    /// Moves buffers whose batch completed to the free list.
    pub fn reclaim(&mut self) {
        let mut i = 0;
        while i < self.in_flight.len() {
            if self.in_flight[i].uses.iter().all(|s| s.is_done(&self.kmd)) {
                let mut b = self.in_flight.remove(i);
                b.uses.clear();
                self.free.push(b);
            } else {
                i += 1;
            }
        }
        self.stats.in_flight = self.in_flight.len() as u64;
        self.stats.free = self.free.len() as u64;
    }

    /// An empty buffer. At the cap, waits for the buffer submitted longest
    /// ago; a batch that failed (its fence completed with an error) frees
    /// its buffer too, since the device no longer reads it.
    pub fn get(&mut self) -> Result<CmdBuf, MemError> {
        if self.free.is_empty() {
            self.reclaim();
        }
        if self.free.is_empty() && self.stats.created >= self.max && !self.in_flight.is_empty() {
            let uses = self.in_flight[0].uses.clone();
            match fence::wait_all(&self.kmd, &self.wait_cfg, &uses, None) {
                Ok(_) => {}
                Err(e) if e.errno == libc::EIO => {}
                Err(e) => return Err(MemError::Kmd(e)),
            }
            let mut b = self.in_flight.remove(0);
            b.uses.clear();
            self.free.push(b);
            self.stats.waited += 1;
            self.stats.in_flight = self.in_flight.len() as u64;
        }
        let b = match self.free.pop() {
            Some(mut b) => {
                b.len = 0;
                b.start = 0;
                b
            }
            None => {
                let bo = Bo::new(
                    &self.kmd,
                    &self.vas,
                    self.size,
                    uapi::VM_BIND_READ | uapi::VM_BIND_EXEC,
                )?;
                self.stats.created += 1;
                CmdBuf {
                    bo: Arc::new(bo),
                    len: 0,
                    start: 0,
                    uses: Vec::new(),
                }
            }
        };
        self.stats.free = self.free.len() as u64;
        Ok(b)
    }

    /// Up to `n` words at GPU VA `va`, if a buffer of the pool holds them
    /// (for naming the packet an error stopped at).
    pub fn read_at(&mut self, va: u64, n: usize) -> Option<Vec<u32>> {
        for b in self.free.iter_mut().chain(self.in_flight.iter_mut()) {
            let base = b.bo.va();
            let size = b.bo.size();
            if va < base || va - base >= size || !va.is_multiple_of(4) {
                continue;
            }
            let first = ((va - base) / 4) as usize;
            let words = b.words();
            let end = first.saturating_add(n).min(words.len());
            return Some(words[first..end].to_vec());
        }
        None
    }

    /// Returns a buffer whose current batch was not submitted; reused once
    /// its earlier batches (if any) completed.
    pub fn put(&mut self, b: CmdBuf) {
        if b.uses.is_empty() {
            self.free.push(b);
        } else {
            self.in_flight.push(b);
        }
    }

    /// Returns a submitted buffer; reused once all its batches completed.
    pub fn retire(&mut self, mut b: CmdBuf, sp: SyncPoint) {
        b.uses.push(sp);
        self.in_flight.push(b);
        self.stats.in_flight = self.in_flight.len() as u64;
    }
}

/// Magic of a dump file.
pub const DUMP_MAGIC: &[u8; 8] = b"VGPUDUMP";
/// Magic of one record.
pub const DUMP_RECORD: u32 = 0x4244_4d43; // "CMDB"

/// One dumped command buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DumpRecord {
    /// Device generation the packets are encoded for.
    pub generation: u32,
    /// KMD context.
    pub ctx_id: u32,
    /// Engine.
    pub engine: u32,
    /// Index of the buffer in its SUBMIT.
    pub index: u32,
    /// GPU VA.
    pub va: u64,
    /// The words.
    pub words: Vec<u32>,
}

impl DumpRecord {
    /// Serialises (little endian): magic, generation, ctx, engine, index,
    /// va, word count (u64), words.
    pub fn write_to(&self, w: &mut impl Write) -> std::io::Result<()> {
        let mut b = Vec::with_capacity(40 + 4 * self.words.len());
        for v in [
            DUMP_RECORD,
            self.generation,
            self.ctx_id,
            self.engine,
            self.index,
        ] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(&[0; 4]);
        b.extend_from_slice(&self.va.to_le_bytes());
        b.extend_from_slice(&(self.words.len() as u64).to_le_bytes());
        for x in &self.words {
            b.extend_from_slice(&x.to_le_bytes());
        }
        w.write_all(&b)
    }

    /// Parses the records following the file magic.
    pub fn parse_all(bytes: &[u8]) -> Result<Vec<DumpRecord>, String> {
        let rest = bytes
            .strip_prefix(DUMP_MAGIC)
            .ok_or("not a vgpu dump (bad magic)")?;
        let mut out = Vec::new();
        let mut p = rest;
        let u32_at = |b: &[u8], i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
        let u64_at = |b: &[u8], i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
        while !p.is_empty() {
            if p.len() < 40 || u32_at(p, 0) != DUMP_RECORD {
                return Err(format!("corrupt record at byte {}", bytes.len() - p.len()));
            }
            let n = u64_at(p, 32) as usize;
            if p.len() < 40 + 4 * n {
                return Err(format!(
                    "truncated record at byte {}",
                    bytes.len() - p.len()
                ));
            }
            out.push(DumpRecord {
                generation: u32_at(p, 4),
                ctx_id: u32_at(p, 8),
                engine: u32_at(p, 12),
                index: u32_at(p, 16),
                va: u64_at(p, 24),
                words: (0..n).map(|i| u32_at(p, 40 + 4 * i)).collect(),
            });
            p = &p[40 + 4 * n..];
        }
        Ok(out)
    }
}

/// Decodes `words` (read by the device at `va`) packet by packet into
/// lines `va: PACKET operands`.
pub fn disassemble(generation: u32, va: u64, words: &[u32]) -> Vec<String> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < words.len() {
        let at = va + 4 * i as u64;
        let hdr = match packet::decode_header(generation, words[i]) {
            Ok(h) => h,
            Err(e) => {
                out.push(format!(
                    "{at:#014x}: {:#010x} invalid header ({})",
                    words[i],
                    e.name()
                ));
                break;
            }
        };
        let end = i + hdr.words as usize;
        if end > words.len() {
            out.push(format!(
                "{at:#014x}: packet of {} words runs past the end (TRUNCATED)",
                hdr.words
            ));
            break;
        }
        match Packet::decode(hdr, &words[i..end]) {
            Ok(p) => out.push(format!("{at:#014x}: {}", describe(&p))),
            Err(e) => out.push(format!(
                "{at:#014x}: opcode {:#04x}: {}",
                hdr.opcode,
                e.name()
            )),
        }
        i = end;
    }
    out
}

/// One packet as text: its name and its operands, as hwif writes it
/// ([`vgpu_hwif::describe`]).
pub fn describe(p: &Packet) -> String {
    p.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use vgpu_hwif::packet::DispatchPacket;

    fn fill(dst: u64) -> Packet {
        Packet::Fill {
            dst,
            size: 64,
            pattern: 0xdead_beef,
        }
    }

    #[test]
    fn gen2_pads_copy_packets_to_64_bytes() {
        let mut words = [0u32; 64];
        let base = 0x10_0000;
        let mut w = Writer::new(2, base, &mut words, 0);
        w.push(&Packet::Timestamp { va: 0x2000 }).unwrap(); // 3 words
        w.push(&fill(0x3000)).unwrap();
        // The FILL starts at word 16 (64 bytes), after a 13-word NOP.
        let n = w.finish();
        let lines = disassemble(2, base, &words[..n]);
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert!(lines[1].ends_with("NOP words=13"), "{lines:?}");
        assert!(
            lines[2].starts_with(&format!("{:#014x}: FILL", base + 64)),
            "{lines:?}"
        );
        assert_eq!(n % 2, 0);
    }

    #[test]
    fn gen1_does_not_pad_and_uses_gen1_headers() {
        let mut words = [0u32; 64];
        let mut w = Writer::new(1, 0x10_0000, &mut words, 0);
        w.push(&Packet::Timestamp { va: 0x2000 }).unwrap();
        w.push(&fill(0x3000)).unwrap();
        let n = w.finish();
        assert_eq!(n, 3 + 6 + 1, "no alignment padding, one NOP to 8 bytes");
        assert_eq!(words[0], 0x305);
        assert_eq!(words[3], 0x612);
        assert!(disassemble(2, 0x10_0000, &words[..n])[0].contains("invalid header"));
    }

    #[test]
    fn gen2_already_aligned_needs_no_nop() {
        assert_eq!(padding_words(2, packet::OP_COPY, 0x1000), 0);
        assert_eq!(padding_words(2, packet::OP_COPY, 0x1004), 15);
        assert_eq!(padding_words(2, packet::OP_TIMESTAMP, 0x1004), 0);
        assert_eq!(padding_words(1, packet::OP_COPY, 0x1004), 0);
    }

    #[test]
    fn full_buffer_is_reported_and_left_intact() {
        let mut words = [0u32; 20];
        let mut w = Writer::new(2, 0x1000, &mut words, 0);
        w.push(&Packet::Timestamp { va: 0x2000 }).unwrap();
        // FILL needs 13 padding + 6 words from word 3: 22 > 20.
        assert_eq!(w.push(&fill(0x3000)), Err(CmdError::Full));
        assert_eq!(w.len(), 3);
    }

    #[test]
    fn dispatch_encodes_and_decodes() {
        let d = Packet::Dispatch(DispatchPacket {
            module_va: 0x40_0000,
            module_size: 512,
            kernel: 1,
            args_va: 0x50_0000,
            args_size: 24,
            grid: [4, 1, 1],
            wg: [256, 1, 1],
            shared_size: 0,
        });
        for gen in [1, 2] {
            let mut words = [0u32; 64];
            let mut w = Writer::new(gen, 0x1000, &mut words, 0);
            w.push(&d).unwrap();
            let n = w.finish();
            let l = disassemble(gen, 0x1000, &words[..n]);
            assert_eq!(
                l[0],
                "0x000000001000: DISPATCH module=0x400000+512 kernel=1 args=0x500000+24 grid=4x1x1 wg=256x1x1 shared=0"
            );
        }
    }

    #[test]
    fn dump_round_trip() {
        let r = DumpRecord {
            generation: 2,
            ctx_id: 3,
            engine: 1,
            index: 0,
            va: 0xabc000,
            words: vec![1, 2, 3, 4],
        };
        let mut b = DUMP_MAGIC.to_vec();
        r.write_to(&mut b).unwrap();
        r.write_to(&mut b).unwrap();
        assert_eq!(DumpRecord::parse_all(&b).unwrap(), vec![r.clone(), r]);
        assert!(DumpRecord::parse_all(&b[..b.len() - 1]).is_err());
        assert!(DumpRecord::parse_all(b"nope").is_err());
    }
}
