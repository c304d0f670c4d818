//! Fetch and decode: the prefetch buffer the processor copies packet words
//! into, the stream (ring or command buffer) it reads them from, and the
//! decoding of the next packet into an operation in flight (see the
//! module documentation for the order of the checks).

use vgpu_hwif::mmu::Access;
use vgpu_hwif::packet::{
    decode_header, is_copy_engine_packet, opcode_name, EngineError, Packet,
    GEN2_ENGINE_PACKET_ALIGN, MAX_INDIRECT_DEPTH, MAX_PACKET_WORDS,
};
use vgpu_hwif::proto::engine;

use super::{advance, count_packet, CommandProcessor, Host, Job, SliceEnd};
use crate::core::compute_engine::{self, DispatchOp};
use crate::core::copy_engine::{self, CopyOp};
use crate::core::dma::GpuMemory;
use crate::core::inject::Injector;
use crate::core::mmu::{Mem, MmuFault};
use crate::core::ring::{Frame, InFlight, Op};
use crate::core::telemetry::{Stats, TraceKind};

/// Words the prefetch buffer holds (two maximal packets).
pub const PREFETCH_WORDS: usize = 2 * MAX_PACKET_WORDS as usize;

/// Where the next words come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Stream {
    Ring { va: u64, size: u32, wptr: u32 },
    Buffer { va: u64, size: u32 },
}

impl Stream {
    /// The stream `job` reads next, and the position in it.
    pub(super) fn of(job: &Job) -> (Stream, u32) {
        match job.cursor.frame() {
            Some(f) => (
                Stream::Buffer {
                    va: f.va,
                    size: f.size,
                },
                f.offset,
            ),
            None => (
                Stream::Ring {
                    va: job.ring_va,
                    size: job.ring_size,
                    wptr: job.wptr,
                },
                job.cursor.rptr,
            ),
        }
    }

    /// Bytes available from `pos` to the end of the stream.
    pub(super) fn avail(&self, pos: u32) -> u32 {
        match *self {
            Stream::Ring { wptr, .. } => wptr.wrapping_sub(pos),
            Stream::Buffer { size, .. } => size.saturating_sub(pos),
        }
    }

    /// GPU VA of `pos` and the bytes that are contiguous from there.
    pub(super) fn va(&self, pos: u32) -> (u64, u32) {
        match *self {
            Stream::Ring { va, size, .. } => {
                let off = pos & (size - 1);
                (va + u64::from(off), size - off)
            }
            Stream::Buffer { va, size } => {
                (va.wrapping_add(u64::from(pos)), size.saturating_sub(pos))
            }
        }
    }
}

/// The prefetch buffer.
#[derive(Debug)]
pub(super) struct Fetcher {
    pub(super) buf: Vec<u32>,
    head: usize,
    len: usize,
    stream: Option<Stream>,
    pos: u32,
    /// Record the words read from guest memory (for the sanitizer).
    pub(super) track: bool,
    /// Words read since last taken: (stream position, index in `buf`,
    /// count, GPU VA).
    pub(super) reads: Vec<(u32, usize, usize, u64)>,
}

impl Fetcher {
    pub(super) fn new() -> Self {
        Fetcher {
            buf: vec![0; PREFETCH_WORDS],
            head: 0,
            len: 0,
            stream: None,
            pos: 0,
            track: false,
            reads: Vec::new(),
        }
    }

    pub(super) fn reset(&mut self) {
        self.stream = None;
        self.head = 0;
        self.len = 0;
    }

    /// Makes `n` words at `pos` of `stream` available (the caller checked
    /// that the stream has them) and returns them.
    fn words(
        &mut self,
        gm: &mut GpuMemory<'_>,
        stream: Stream,
        pos: u32,
        n: usize,
    ) -> Result<&[u32], MmuFault> {
        if self.stream != Some(stream) || self.pos != pos {
            self.stream = Some(stream);
            self.pos = pos;
            self.head = 0;
            self.len = 0;
        }
        if self.len - self.head < n {
            self.buf.copy_within(self.head..self.len, 0);
            self.len -= self.head;
            self.head = 0;
            let mut fault = None;
            while self.len < self.buf.len() {
                let next = pos.wrapping_add(4 * self.len as u32);
                let avail = (stream.avail(next) / 4) as usize;
                if avail == 0 {
                    break;
                }
                let (va, contiguous) = stream.va(next);
                let want = avail
                    .min((contiguous / 4) as usize)
                    .min(self.buf.len() - self.len);
                let Some(dst) = self.buf.get_mut(self.len..self.len + want) else {
                    break;
                };
                let (got, f) = gm.read_words(va, dst, Access::Execute);
                if self.track && got > 0 {
                    // `head` is 0 while refilling.
                    self.reads.push((next, self.len, got, va));
                }
                self.len += got;
                if f.is_some() {
                    fault = f;
                    break;
                }
            }
            if self.len < n {
                return Err(match fault {
                    Some(f) => f,
                    // The caller checked availability; nothing else stops
                    // a read short.
                    None => MmuFault {
                        va: stream.va(pos.wrapping_add(4 * self.len as u32)).0,
                        access: Access::Execute,
                        reason: vgpu_hwif::mmu::FaultReason::BadPhysical,
                        level: vgpu_hwif::mmu::LEVEL_NONE,
                    },
                });
            }
        }
        Ok(self.buf.get(self.head..self.head + n).unwrap_or(&[]))
    }

    /// The packet at the front was taken: `n` words.
    fn consume(&mut self, n: usize) {
        self.head = (self.head + n).min(self.len);
        self.pos = self.pos.wrapping_add(4 * n as u32);
    }
}

impl CommandProcessor {
    /// Fetches and decodes the next packet; starts it or finishes it at
    /// once. Returns how the slice ends, if it does.
    pub(super) fn next_packet(
        &mut self,
        host: &dyn Host,
        mem: &Mem,
        job: &mut Job,
        stats: &mut Stats,
    ) -> Option<SliceEnd> {
        let (stream, pos) = Stream::of(job);
        let avail = stream.avail(pos);
        if avail == 0 {
            if job.cursor.depth == 0 {
                return Some(SliceEnd::Idle);
            }
            // End of a command buffer: the INDIRECT that called it is done.
            if self.fetch.track {
                if let Some(end) = self.san_frame_end(host, mem, job) {
                    return Some(end);
                }
            }
            job.cursor.depth -= 1;
            advance(job, 4);
            count_packet(job, stats);
            let now = self.trace_clock(host);
            self.record_instant(TraceKind::Packet, "INDIRECT", job, now, stream.va(0).0, 0);
            return None;
        }
        let packet_va = stream.va(pos).0;
        let error = |code, header| {
            Some(SliceEnd::Error {
                code,
                packet_va,
                header,
            })
        };
        let poison = host.injector().map(Injector::poison);
        let tap = self.record.as_deref().map(|r| r.tap(self.engine));
        if let Some(r) = self.record.as_deref() {
            r.packet_started(self.engine);
        }
        let mut gm = GpuMemory::new(mem, &mut self.tlb, job.space)
            .with_poison(poison)
            .with_tap(tap);
        let header = match self.fetch.words(&mut gm, stream, pos, 1) {
            Ok(w) => w.first().copied().unwrap_or(0),
            Err(fault) if fault.is_ecc() => return error(EngineError::EccUncorrectable, 0),
            Err(fault) => return Some(SliceEnd::Fault { fault, packet_va }),
        };
        // (`gm`'s borrow of the TLB ends here.)
        if self.fetch.track {
            if let Some(end) = self.san_fetched(host, job) {
                return Some(end);
            }
        }
        let mut gm = GpuMemory::new(mem, &mut self.tlb, job.space).with_poison(poison);
        let hdr = match decode_header(self.generation, header) {
            Ok(h) => h,
            Err(code) => {
                self.record_packet(job, packet_va, &[header]);
                return error(code, header);
            }
        };
        if u64::from(hdr.words) * 4 > u64::from(avail) {
            self.record_packet(job, packet_va, &[header]);
            if self.fetch.track && job.cursor.depth == 0 {
                self.san_mid_packet(host, job, header, hdr.words, avail);
            }
            return error(EngineError::Truncated, header);
        }
        if let Err(fault) = self.fetch.words(&mut gm, stream, pos, hdr.words as usize) {
            return if fault.is_ecc() {
                error(EngineError::EccUncorrectable, header)
            } else {
                Some(SliceEnd::Fault { fault, packet_va })
            };
        }
        if self.fetch.track {
            if let Some(end) = self.san_fetched(host, job) {
                return Some(end);
            }
        }
        let words = self
            .fetch
            .buf
            .get(self.fetch.head..self.fetch.head + hdr.words as usize)
            .unwrap_or(&[]);
        self.record_packet(job, packet_va, words);
        if self.fetch.track {
            let n = words.len().min(vgpu_hwif::sanitize::SAN_PACKET_WORDS);
            let words = words.get(..n).unwrap_or(&[]);
            // The buffer is reused: this runs for every packet.
            match &mut self.san_packet {
                Some((c, va, w)) => {
                    (*c, *va) = (job.ctx, packet_va);
                    w.clear();
                    w.extend_from_slice(words);
                }
                None => self.san_packet = Some((job.ctx, packet_va, words.to_vec())),
            }
        }
        let decoded = Packet::decode(hdr, words);
        self.fetch.consume(hdr.words as usize);
        let packet = match decoded {
            // The running firmware's packet table leaves it out.
            Ok(_) if !host.packet_allowed(u32::from(hdr.opcode)) => {
                return error(EngineError::Unsupported, header)
            }
            Ok(p) => p,
            Err(code) => return error(code, header),
        };
        let suitable = if self.engine == engine::COPY {
            copy_engine::check_packet(&packet)
        } else {
            compute_engine::check_packet(&packet)
        };
        if let Err(code) = suitable {
            return error(code, header);
        }
        if self.generation >= 2
            && is_copy_engine_packet(hdr.opcode)
            && packet_va % GEN2_ENGINE_PACKET_ALIGN != 0
        {
            return error(EngineError::Misaligned, header);
        }
        let now = self.trace_clock(host);
        if self.trace.is_some() {
            let name = opcode_name(hdr.opcode);
            self.record_instant(
                TraceKind::Fetch,
                name,
                job,
                now,
                packet_va,
                u64::from(header),
            );
        }
        let op = match packet {
            Packet::Nop { .. } => {
                advance(job, hdr.words);
                count_packet(job, stats);
                return None;
            }
            Packet::Indirect { va, size } => {
                if job.cursor.depth >= MAX_INDIRECT_DEPTH {
                    return error(EngineError::IndirectDepth, header);
                }
                if let Some(slot) = job.cursor.frames.get_mut(job.cursor.depth as usize) {
                    *slot = Frame {
                        va,
                        size,
                        offset: 0,
                    };
                    job.cursor.depth += 1;
                }
                if self.fetch.track {
                    self.san_sync_frames(job);
                }
                return None;
            }
            Packet::Fence { va, seqno, flags } => Op::Fence { va, seqno, flags },
            Packet::SemWait { va, value, op } => Op::SemWait { va, value, op },
            Packet::SemSignal { va, value, op } => Op::SemSignal { va, value, op },
            Packet::Timestamp { va } => Op::Timestamp { va },
            Packet::Copy { .. } | Packet::Copy2d { .. } | Packet::Fill { .. } => {
                match CopyOp::from_packet(&packet) {
                    Some(c) => Op::Copy(c),
                    None => return error(EngineError::BadOpcode, header),
                }
            }
            Packet::Dispatch(d) => Op::Dispatch(DispatchOp::new(d)),
        };
        job.cursor.pending = Some(InFlight {
            op,
            packet_va,
            header,
            words: hdr.words,
            opcode: hdr.opcode,
            started_ns: now,
        });
        None
    }
}
