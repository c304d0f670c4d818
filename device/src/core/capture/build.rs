//! Building one capture ([`vgpu_hwif::capture`]) from the frozen state of
//! a context: its rings and cursors, the packet in flight, the engine's
//! TLBs, its page tables and mapped ranges, the memory its job reads, the
//! recent events and the injector's state.
//!
//! Memory is collected in priority order under one byte budget, each
//! guest-physical page at most once: the rings and their status blocks,
//! the page tables (every table reachable from the root, up to a table
//! limit), the failing packet's operands, the command buffers reached from
//! the read pointer through `INDIRECT` (to their depth), and — for a
//! compute job, whose kernel may read anything mapped — the context's
//! other readable memory. What did not fit is flagged in the header.
//!
//! Guest memory is read without the engine's TLB (a walk of the tables as
//! they are now), so taking a capture changes nothing the engines see.

use std::collections::HashSet;

use vgpu_hwif::capture::{
    self as fmt, memory, section, CaptureContext, CaptureHeader, CaptureInFlight, CaptureMapping,
    CaptureMemory, CaptureRegion, CaptureRing, CaptureTlbEntry, SectionHeader,
};
use vgpu_hwif::event::EventRecord;
use vgpu_hwif::mmu::{Access, Pte, PteKind, LEVELS, PTE_READ, TABLE_SIZE};
use vgpu_hwif::packet::{decode_header, Copy2dPacket, Packet, MAX_INDIRECT_DEPTH};
use vgpu_hwif::pod::Pod;
use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryRegion};

use crate::core::context::Context;
use crate::core::copy_engine::CopyOp;
use crate::core::cp::CommandProcessor;
use crate::core::inject::Injector;
use crate::core::mmu::{self, AddressSpace, Mem, Tlb};
use crate::core::ring::{InFlight, Op, Ring, RingState};

use super::CaptureLimits;

const PAGE: u64 = 4096;
/// Ring-level packets decoded from the read pointer to find command
/// buffers.
const RING_PACKETS: usize = 64;
/// Packets decoded per command buffer to find nested ones.
const BUFFER_PACKETS: usize = 4096;
/// Bytes of each copy operand captured.
const OPERAND_BYTES: u64 = 256 << 10;
/// Mapped ranges recorded at most.
const MAPPINGS: usize = 4096;

/// What is known about the failure.
#[derive(Debug, Clone, Copy)]
pub struct Failure {
    /// `reason::*`.
    pub reason: u32,
    /// The event the device reports (`FAULT`, `ENGINE_ERROR`), if any.
    pub error: Option<EventRecord>,
    /// GPU VA of the failing packet (the error's, or the one in flight).
    pub packet_va: Option<u64>,
}

/// Everything a capture is built from.
pub struct Frozen<'a> {
    /// Capture id.
    pub id: u32,
    /// Device generation.
    pub generation: u32,
    /// VA width.
    pub va_bits: u32,
    /// Compute units.
    pub compute_units: u32,
    /// The engine captured.
    pub engine: u32,
    /// Device time.
    pub device_ns: u64,
    /// The context (its rings hold their cursors).
    pub ctx: &'a Context,
    /// Whether each engine is running this context right now (its ring's
    /// cursor is out with the engine).
    pub running: [bool; 2],
    /// The captured engine's command processor (TLBs, loaded dispatches).
    pub cp: &'a CommandProcessor,
    /// The failure.
    pub failure: Failure,
    /// Events posted last, oldest first.
    pub recent: Vec<EventRecord>,
    /// The fault injector.
    pub inject: &'a Injector,
}

/// Collects memory ranges under a budget, each page once.
struct Collector<'a> {
    mem: &'a Mem,
    space: AddressSpace,
    budget: u64,
    used: u64,
    pages: HashSet<u64>,
    /// (header, bytes) of each MEMORY section.
    ranges: Vec<(CaptureMemory, Vec<u8>)>,
    truncated: bool,
}

impl<'a> Collector<'a> {
    /// Adds the page at guest-physical `pa` (4 KiB aligned) reached at `va`.
    fn page(&mut self, pa: u64, va: u64, what: u32) {
        if self.pages.contains(&pa) {
            return;
        }
        if self.used + PAGE > self.budget {
            self.truncated = true;
            return;
        }
        let mut buf = vec![0u8; PAGE as usize];
        if self.mem.read_slice(&mut buf, GuestAddress(pa)).is_err() {
            return;
        }
        self.pages.insert(pa);
        self.used += PAGE;
        // Extend the previous range when this page follows it.
        if let Some((h, bytes)) = self.ranges.last_mut() {
            let va_follows = h.va != fmt::NO_VA && va != fmt::NO_VA && h.va + h.size == va;
            let both_none = h.va == fmt::NO_VA && va == fmt::NO_VA;
            if h.what == what && h.pa + h.size == pa && (va_follows || both_none) {
                h.size += PAGE;
                bytes.extend_from_slice(&buf);
                return;
            }
        }
        self.ranges.push((
            CaptureMemory {
                pa,
                va,
                size: PAGE,
                what,
                reserved: 0,
            },
            buf,
        ));
    }

    /// Adds the pages mapped at `va..va + len` (unmapped pages are skipped).
    fn va_range(&mut self, va: u64, len: u64, what: u32) {
        if len == 0 {
            return;
        }
        let first = va & !(PAGE - 1);
        let Some(last) = va.checked_add(len - 1) else {
            return;
        };
        let mut p = first;
        while p <= last {
            if self.used + PAGE > self.budget {
                self.truncated = true;
                return;
            }
            if let Ok(m) = mmu::walk(self.mem, &self.space, p, Access::Read) {
                self.page(m.pa(p) & !(PAGE - 1), p, what);
            }
            match p.checked_add(PAGE) {
                Some(n) => p = n,
                None => break,
            }
        }
    }

    /// The 32-bit word at `va`, through the tables (not the TLB).
    fn word(&self, va: u64) -> Option<u32> {
        let m = mmu::walk(self.mem, &self.space, va, Access::Read).ok()?;
        let v: u32 = self.mem.read_obj(GuestAddress(m.pa(va))).ok()?;
        Some(u32::from_le(v))
    }
}

/// Guest RAM regions.
fn regions(mem: &Mem) -> Vec<CaptureRegion> {
    mem.iter()
        .map(|r| CaptureRegion {
            pa: r.start_addr().0,
            size: r.len(),
        })
        .collect()
}

/// The context's page tables: every table page reachable from `root` (at
/// most `limit`), and its leaves merged into mapped ranges.
fn tables(mem: &Mem, root: u64, limit: usize) -> (Vec<u64>, Vec<CaptureMapping>, bool) {
    let mut found = Vec::new();
    let mut maps: Vec<CaptureMapping> = Vec::new();
    let mut truncated = false;
    let mut seen = HashSet::new();
    // (table pa, level, VA of its first entry)
    let mut stack = vec![(root, LEVELS - 1, 0u64)];
    while let Some((table, level, base)) = stack.pop() {
        if !seen.insert(table) {
            continue;
        }
        if found.len() >= limit {
            truncated = true;
            continue;
        }
        let mut buf = vec![0u8; TABLE_SIZE as usize];
        if mem.read_slice(&mut buf, GuestAddress(table)).is_err() {
            continue;
        }
        found.push(table);
        let span = 1u64 << (12 + 9 * level);
        let mut children = Vec::new();
        for (i, e) in buf.chunks_exact(8).enumerate() {
            let mut b = [0u8; 8];
            b.copy_from_slice(e);
            let pte = Pte::from_bits(u64::from_le_bytes(b));
            if !pte.is_valid() {
                continue;
            }
            let va = base + span * i as u64;
            match pte.decode(level) {
                Ok(PteKind::Table(next)) if level > 0 => children.push((next, level - 1, va)),
                Ok(PteKind::Leaf(l)) => {
                    let perms = l.perms as u32 | (l.cache as u32) << 8;
                    let lvl = if l.shift == 12 { 0 } else { 1 };
                    let size = 1u64 << l.shift;
                    let full = maps.len() >= MAPPINGS;
                    match maps.last_mut() {
                        Some(m)
                            if m.perms == perms
                                && m.level == lvl
                                && m.va + m.size == va
                                && m.pa + m.size == l.page =>
                        {
                            m.size += size
                        }
                        _ if full => truncated = true,
                        _ => maps.push(CaptureMapping {
                            va,
                            pa: l.page,
                            size,
                            perms,
                            level: lvl,
                        }),
                    }
                }
                _ => {}
            }
        }
        // Depth first, lowest VA first: mappings come out in VA order.
        stack.extend(children.into_iter().rev());
    }
    (found, maps, truncated)
}

fn ring_record(
    r: &Ring,
    captured: bool,
    running: bool,
    mem: &Mem,
    space: &AddressSpace,
) -> CaptureRing {
    let mut flags = 0;
    if r.doorbell.is_some() {
        flags |= fmt::RING_DOORBELL_PENDING;
    }
    if r.status_broken {
        flags |= fmt::RING_STATUS_BROKEN;
    }
    if captured {
        flags |= fmt::RING_CAPTURED;
    }
    if running {
        flags |= fmt::RING_RUNNING;
    }
    let status = r.status();
    let fault_id = match r.state {
        RingState::FaultStalled { fault_id } => fault_id,
        _ => 0,
    };
    let c = &r.cursor;
    let mut status_mem = [0u64; 8];
    if let Ok(m) = mmu::walk(mem, space, r.status_va, Access::Read) {
        let mut b = [0u8; 64];
        if mem
            .read_slice(&mut b, GuestAddress(m.pa(r.status_va)))
            .is_ok()
        {
            for (w, chunk) in status_mem.iter_mut().zip(b.chunks_exact(8)) {
                let mut x = [0u8; 8];
                x.copy_from_slice(chunk);
                *w = u64::from_le_bytes(x);
            }
        }
    }
    CaptureRing {
        engine: r.engine,
        size: r.size,
        va: r.va,
        status_va: r.status_va,
        wptr: r.wptr,
        rptr: c.rptr,
        state: status.state,
        error: status.error,
        error_rptr: status.error_rptr,
        depth: c.depth,
        doorbell: r.doorbell.unwrap_or(0),
        flags,
        last_fence: c.last_fence,
        packets: c.packets,
        fault_id,
        frame_va: c.frames.map(|f| f.va),
        frame_size: c.frames.map(|f| f.size),
        frame_offset: c.frames.map(|f| f.offset),
        status_mem,
    }
}

/// The packet an operation in flight would be encoded as, and its progress.
fn op_packet(op: &Op, cp: &CommandProcessor, ctx: u32) -> (Packet, [u64; 4]) {
    match *op {
        Op::Fence { va, seqno, flags } => (Packet::Fence { va, seqno, flags }, [0; 4]),
        Op::SemWait { va, value, op } => (Packet::SemWait { va, value, op }, [0; 4]),
        Op::SemSignal { va, value, op } => (Packet::SemSignal { va, value, op }, [0; 4]),
        Op::Timestamp { va } => (Packet::Timestamp { va }, [0; 4]),
        Op::Copy(CopyOp::Linear {
            src,
            dst,
            size,
            done,
        }) => (Packet::Copy { src, dst, size }, [done, size, 0, 0]),
        Op::Copy(CopyOp::TwoD { packet, row, col }) => (
            Packet::Copy2d(packet),
            [
                row.into(),
                col.into(),
                packet.height.into(),
                packet.width.into(),
            ],
        ),
        Op::Copy(CopyOp::Fill {
            dst,
            size,
            pattern,
            done,
        }) => (Packet::Fill { dst, size, pattern }, [done, size, 0, 0]),
        Op::Dispatch(d) => {
            let (started, total) = cp.dispatch_progress(ctx, d.token).unwrap_or((0, 0));
            (Packet::Dispatch(d.packet), [started, total, 0, 0])
        }
    }
}

fn inflight_record(
    f: &Frozen<'_>,
    r: &Ring,
    fl: Option<&InFlight>,
    failing_va: Option<u64>,
    header_at_va: Option<u32>,
) -> CaptureInFlight {
    let (generation, ctx, engine, cp) = (f.generation, f.ctx.id, f.engine, f.cp);
    let mut rec = CaptureInFlight {
        engine,
        ctx_id: ctx,
        packet_va: failing_va.unwrap_or_else(|| r.va_of(r.cursor.rptr)),
        state: fmt::INFLIGHT_NONE,
        header: header_at_va.unwrap_or(0),
        words: 0,
        opcode: 0,
        depth: r.cursor.depth,
        rptr: r.cursor.rptr,
        started_ns: 0,
        packet: [0; 16],
        progress: [0; 4],
    };
    if let Some(h) = header_at_va.and_then(|h| decode_header(generation, h).ok()) {
        rec.opcode = h.opcode.into();
        rec.words = h.words;
    }
    if let Some(fl) = fl {
        let (p, progress) = op_packet(&fl.op, cp, ctx);
        let n = p.encode(generation, &mut rec.packet).unwrap_or(0);
        rec.state = fmt::INFLIGHT_ACTIVE;
        rec.packet_va = fl.packet_va;
        rec.header = fl.header;
        rec.words = n as u32;
        rec.opcode = fl.opcode.into();
        rec.started_ns = fl.started_ns;
        rec.progress = progress;
    }
    rec
}

fn tlb_records(tlb: &Tlb, asid: u32, unit: u32, out: &mut Vec<CaptureTlbEntry>) {
    for m in tlb.cached_in(asid, 0, 0) {
        out.push(CaptureTlbEntry {
            va_base: m.va_base,
            pa_base: m.pa_base,
            shift: m.shift,
            perms: m.perms as u32,
            cache: m.cache.into(),
            unit,
        });
    }
}

/// The injector's state as text lines.
fn inject_text(inj: &Injector) -> String {
    let mut s = format!("seed {}\n", inj.seed());
    for a in inj.status() {
        s += &format!(
            "armed {} {} seen={} fired={}\n",
            a.id, a.spec, a.seen, a.fired
        );
    }
    let log = inj.log(0);
    let skip = log.len().saturating_sub(64);
    for e in log.iter().skip(skip) {
        s += &format!(
            "log {} fault={} kind={} what={} device_ns={} ctx={} engine={} {}\n",
            e.seq, e.fault, e.kind, e.what, e.device_ns, e.ctx as i64, e.engine as i64, e.detail
        );
    }
    for pa in inj.poison().pages() {
        s += &format!("poisoned {pa:#x}\n");
    }
    s
}

/// Packets from `pos` of a stream (ring or buffer), for their `INDIRECT`s.
fn indirects(
    col: &Collector<'_>,
    generation: u32,
    at: impl Fn(u32) -> Option<u64>,
    avail: u32,
    limit: usize,
) -> Vec<(u64, u32)> {
    let mut out = Vec::new();
    let mut off = 0u32;
    for _ in 0..limit {
        if off >= avail {
            break;
        }
        let Some(hdr) = at(off).and_then(|va| col.word(va)) else {
            break;
        };
        let Ok(h) = decode_header(generation, hdr) else {
            break;
        };
        let mut words = [0u32; 16];
        let n = (h.words as usize).min(words.len());
        let mut ok = true;
        for (i, w) in words.iter_mut().enumerate().take(n) {
            match at(off + 4 * i as u32).and_then(|va| col.word(va)) {
                Some(v) => *w = v,
                None => ok = false,
            }
        }
        if ok && h.words as usize <= words.len() {
            if let Ok(Packet::Indirect { va, size }) = Packet::decode(h, &words[..n]) {
                out.push((va, size));
            }
        }
        off = off.saturating_add(4 * h.words);
    }
    out
}

/// Adds the command buffers reached from `bufs`, following nested
/// `INDIRECT`s down to the maximal depth.
fn command_buffers(col: &mut Collector<'_>, generation: u32, bufs: Vec<(u64, u32)>, depth: u32) {
    if depth > MAX_INDIRECT_DEPTH {
        return;
    }
    for (va, size) in bufs {
        col.va_range(va, u64::from(size), memory::CMDBUF);
        let nested = indirects(
            col,
            generation,
            |off| va.checked_add(off.into()),
            size,
            BUFFER_PACKETS,
        );
        command_buffers(col, generation, nested, depth + 1);
    }
}

/// The failing packet's operands.
fn operands(col: &mut Collector<'_>, p: &Packet) {
    let op = memory::OPERAND;
    match *p {
        Packet::Copy { src, dst, size } => {
            col.va_range(src, size.min(OPERAND_BYTES), op);
            col.va_range(dst, size.min(OPERAND_BYTES), op);
        }
        Packet::Copy2d(Copy2dPacket {
            src,
            dst,
            src_pitch,
            dst_pitch,
            width,
            height,
        }) => {
            let rows = |pitch: u32| {
                (u64::from(pitch) * u64::from(height.saturating_sub(1)) + u64::from(width))
                    .min(OPERAND_BYTES)
            };
            col.va_range(src, rows(src_pitch), op);
            col.va_range(dst, rows(dst_pitch), op);
        }
        Packet::Fill { dst, size, .. } => col.va_range(dst, size.min(OPERAND_BYTES), op),
        Packet::Dispatch(d) => {
            col.va_range(d.module_va, d.module_size.into(), op);
            col.va_range(d.args_va, d.args_size.into(), op);
        }
        Packet::Fence { va, .. }
        | Packet::SemWait { va, .. }
        | Packet::SemSignal { va, .. }
        | Packet::Timestamp { va } => col.va_range(va, 8, op),
        Packet::Nop { .. } | Packet::Indirect { .. } => {}
    }
}

struct Writer {
    out: Vec<u8>,
    sections: u32,
}

impl Writer {
    fn section(&mut self, kind: u32, parts: &[&[u8]]) {
        let size: usize = parts.iter().map(|p| p.len()).sum();
        let h = SectionHeader {
            kind,
            flags: 0,
            size: size as u64,
        };
        self.out.extend_from_slice(h.as_bytes());
        for p in parts {
            self.out.extend_from_slice(p);
        }
        self.out.resize(fmt::pad8(self.out.len()), 0);
        self.sections += 1;
    }

    fn records<T: Pod>(&mut self, kind: u32, recs: &[T]) {
        let bytes: Vec<u8> = recs.iter().flat_map(|r| r.as_bytes().to_vec()).collect();
        self.section(kind, &[&bytes]);
    }
}

/// Builds the capture of `f` over guest memory `mem` within `limits`.
pub fn build(f: &Frozen<'_>, mem: &Mem, limits: &CaptureLimits) -> Vec<u8> {
    let t0 = std::time::Instant::now();
    let ctx = f.ctx;
    let space = ctx.space(f.va_bits);
    let mut flags = 0;
    let mut col = Collector {
        mem,
        space,
        budget: limits.memory,
        used: 0,
        pages: HashSet::new(),
        ranges: Vec::new(),
        truncated: false,
    };
    let captured_ring = ctx.ring(f.engine);

    // 1. Rings and status blocks.
    for r in ctx.rings.iter().flatten() {
        col.va_range(r.va, r.size.into(), memory::RING);
        col.va_range(r.status_va & !(PAGE - 1), PAGE, memory::STATUS);
    }
    // 2. Page tables.
    let (tables, maps, tables_cut) = tables(mem, ctx.pt_root, limits.tables);
    if tables_cut {
        flags |= fmt::FLAG_TABLES_TRUNCATED;
    }
    for t in &tables {
        col.page(*t, fmt::NO_VA, memory::TABLE);
    }
    // 3. The failing packet: in flight, else decoded at its VA.
    let fl = captured_ring.and_then(|r| r.cursor.pending);
    let failing_va = f.failure.packet_va.or(fl.map(|p| p.packet_va));
    let header_at_va = failing_va.and_then(|va| col.word(va));
    let failing_packet = match fl {
        Some(fl) => Some(op_packet(&fl.op, f.cp, ctx.id).0),
        None => failing_va.and_then(|va| {
            let h = decode_header(f.generation, col.word(va)?).ok()?;
            let words: Option<Vec<u32>> = (0..h.words.min(16))
                .map(|i| col.word(va.checked_add(4 * u64::from(i))?))
                .collect();
            Packet::decode(h, &words?).ok()
        }),
    };
    if let Some(p) = &failing_packet {
        operands(&mut col, p);
    }
    // 4. Command buffers: those being executed, and those the ring calls
    // from its read pointer on.
    if let Some(r) = captured_ring {
        let c = &r.cursor;
        let mut bufs: Vec<(u64, u32)> = c
            .frames
            .iter()
            .take(c.depth as usize)
            .map(|fr| (fr.va, fr.size))
            .collect();
        let avail = r.wptr.wrapping_sub(c.rptr).min(r.size);
        bufs.extend(indirects(
            &col,
            f.generation,
            |off| Some(r.va_of(c.rptr.wrapping_add(off))),
            avail,
            RING_PACKETS,
        ));
        command_buffers(&mut col, f.generation, bufs, 1);
    }
    // 5. What a kernel may read: the rest of the readable mappings.
    if matches!(failing_packet, Some(Packet::Dispatch(_))) {
        for m in &maps {
            if u64::from(m.perms) & PTE_READ != 0 {
                col.va_range(m.va, m.size, memory::DATA);
            }
        }
    }
    if col.truncated {
        flags |= fmt::FLAG_MEMORY_TRUNCATED;
    }

    let mut w = Writer {
        out: vec![0u8; std::mem::size_of::<CaptureHeader>()],
        sections: 0,
    };
    let cc = CaptureContext {
        ctx_id: ctx.id,
        priority: ctx.priority,
        flags: u32::from(ctx.replayable),
        state: ctx.state_bits(),
        pt_root: ctx.pt_root,
        faults: ctx.stats.faults,
        errors: ctx.stats.errors,
        packets: ctx.stats.packets,
        busy_ns: ctx.stats.busy_ns,
        last_fault_va: ctx.last_fault_va,
        resets: ctx.stats.resets,
    };
    w.section(section::CONTEXT, &[cc.as_bytes()]);
    for r in ctx.rings.iter().flatten() {
        let running = f.running.get(r.engine as usize).copied().unwrap_or(false);
        let rec = ring_record(r, r.engine == f.engine, running, mem, &space);
        w.section(section::RING, &[rec.as_bytes()]);
    }
    if let Some(r) = captured_ring {
        let rec = inflight_record(f, r, fl.as_ref(), failing_va, header_at_va);
        w.section(section::INFLIGHT, &[rec.as_bytes()]);
    }
    if let Some(e) = &f.failure.error {
        w.section(section::ERROR, &[e.as_bytes()]);
    }
    let mut tlb = Vec::new();
    tlb_records(&f.cp.tlb, ctx.id, fmt::TLB_ENGINE, &mut tlb);
    for (i, t) in f.cp.unit_tlbs().iter().enumerate() {
        if f.engine == vgpu_hwif::proto::engine::COMPUTE {
            tlb_records(t, ctx.id, i as u32, &mut tlb);
        }
    }
    w.records(section::TLB, &tlb);
    w.records(section::MAPPING, &maps);
    w.records(section::REGIONS, &regions(mem));
    w.records(section::EVENTS, &f.recent);
    let text = inject_text(f.inject);
    w.section(section::INJECT, &[text.as_bytes()]);
    for (h, bytes) in &col.ranges {
        w.section(section::MEMORY, &[h.as_bytes(), bytes]);
    }

    let header = CaptureHeader {
        magic: fmt::MAGIC,
        version: fmt::VERSION,
        header_size: std::mem::size_of::<CaptureHeader>() as u32,
        total_size: w.out.len() as u64,
        capture_id: f.id,
        reason: f.failure.reason,
        ctx_id: ctx.id,
        engine: f.engine,
        generation: f.generation,
        va_bits: f.va_bits,
        compute_units: f.compute_units,
        flags,
        device_ns: f.device_ns,
        capture_ns: u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX),
        sections: w.sections,
        reserved: 0,
    };
    let mut out = w.out;
    header.write_to(&mut out);
    out
}
