//! The command processor: fetches, decodes and executes one ring's
//! packets on one engine for one time slice.
//!
//! # Fetch
//!
//! Packet words are copied out of guest memory into the processor's own
//! prefetch buffer (through the MMU, with `Access::Execute`: ring and
//! command-buffer pages need `PTE_READ | PTE_EXEC`) and decoded only from
//! that copy, so each word is read once and the guest cannot change a
//! packet between its validation and its execution. The prefetcher reads
//! ahead at most up to the ring's write pointer or the command buffer's
//! end, and a translation fault ahead of the packet being decoded is only
//! reported if that packet needs the words.
//!
//! # Decode (in this order)
//!
//! 1. the header for the device's generation (`BAD_HEADER`, `BAD_LENGTH`);
//! 2. the packet must end before the ring's write pointer or the command
//!    buffer's end (`TRUNCATED`);
//! 3. `Packet::decode`: opcode, length, operands, operand alignment
//!    (`BAD_OPCODE`, `BAD_LENGTH`, `BAD_OPERAND`, `MISALIGNED`);
//! 4. the engine accepts the packet (`WRONG_ENGINE`, `UNSUPPORTED`);
//! 5. gen 2: `COPY`, `COPY_2D` and `FILL` start on a 64-byte boundary
//!    (`MISALIGNED`);
//! 6. `INDIRECT` nesting stays within `MAX_INDIRECT_DEPTH` (`INDIRECT_DEPTH`).
//!
//! # Execute
//!
//! Packets execute in order, each to completion before the next starts, so
//! a `FENCE` is written only after all earlier work of its ring. A decoded
//! packet becomes an [`InFlight`] operation in the ring's cursor; the
//! processor stops between packets and between copy chunks when its engine
//! needs attention (reset, invalidation, preemption) or its time slice is
//! over, and the operation resumes later from the cursor. The slice ends
//! with a [`SliceEnd`] telling the scheduler what became of the ring.

use std::sync::Arc;
use std::time::Instant;

use vgpu_hwif::event::Event;
use vgpu_hwif::mmu::Access;
use vgpu_hwif::packet::{
    decode_header, is_copy_engine_packet, opcode_name, EngineError, Packet, FENCE_NO_EVENT,
    GEN2_ENGINE_PACKET_ALIGN, MAX_INDIRECT_DEPTH, MAX_PACKET_WORDS, SEM_SIGNAL_ADD, SEM_WAIT_EQ,
    SEM_WAIT_GEQ, SEM_WAIT_NEQ,
};
use vgpu_hwif::pod::Pod;
use vgpu_hwif::proto::{engine, ring_state, RingStatus};

use super::compute_engine::{self, Dispatch, DispatchOp, KernelEngine, LoadError, StepEnd};
use super::copy_engine::{self, CopyOp, Step};
use super::dma::GpuMemory;
use super::inject::{Injector, Site, StepVerdict};
use super::mmu::{AddressSpace, Mem, MmuFault, PageMapping, Tlb};
use super::poison::Poison;
use super::ring::{Cursor, Frame, InFlight, Op};
use super::sanitize::{self, Sanitizer};
use super::telemetry::{Stats, TraceKind, TraceRecord};
use vgpu_isa::jit::JitMode;

/// Words the prefetch buffer holds (two maximal packets).
pub const PREFETCH_WORDS: usize = 2 * MAX_PACKET_WORDS as usize;

/// Boundaries between two looks at the clock.
const CLOCK_EVERY: u32 = 64;

/// What the command processor needs from its surroundings.
pub trait Host {
    /// Device time in ns.
    fn now_ns(&self) -> u64;
    /// Whether the engine must stop at this boundary.
    fn attention(&self) -> bool;
    /// Whether the time slice is over.
    fn slice_over(&self) -> bool;
    /// The current semaphore epoch.
    fn sem_epoch(&self) -> u64;
    /// A semaphore or fence value was written.
    fn semaphores_changed(&self);
    /// Posts an event.
    fn post(&self, event: Event);
    /// Posts `events` one after the other, with nothing of the transport
    /// in between where the host can (an injected flood overflows the
    /// event FIFO whatever the driver's buffers).
    fn post_burst(&self, events: Vec<Event>) {
        events.into_iter().for_each(|ev| self.post(ev));
    }
    /// The fault injector, if faults may be injected.
    fn injector(&self) -> Option<&super::inject::Injector> {
        None
    }
    /// Tests: where the engine is to panic next, taken out.
    #[cfg(test)]
    fn take_test_panic(&self) -> Option<TestPanic> {
        None
    }
}

/// Tests: a panic to provoke inside an engine (what a device bug would
/// do), to check that the engine contains it.
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TestPanic {
    /// The command processor panics before its next packet step.
    Slice,
    /// The last compute unit panics at the next dispatch step.
    ComputeUnit,
}

/// A ring checked out to an engine for one slice.
#[derive(Debug, Clone, Copy)]
pub struct Job {
    /// Context.
    pub ctx: u32,
    /// Engine.
    pub engine: u32,
    /// Context priority.
    pub priority: u32,
    /// Context fault mode.
    pub replayable: bool,
    /// Context address space.
    pub space: AddressSpace,
    /// Ring GPU VA.
    pub ring_va: u64,
    /// Ring size.
    pub ring_size: u32,
    /// Status block GPU VA.
    pub status_va: u64,
    /// Whether status writes are disabled after a fault on one.
    pub status_broken: bool,
    /// Accepted write pointer.
    pub wptr: u32,
    /// Where the ring stands; updated by the slice.
    pub cursor: Cursor,
}

impl Job {
    /// The fault injector's view of the ring.
    pub fn site(&self) -> Site {
        Site {
            ctx: self.ctx,
            engine: self.engine,
            ring_packets: self.cursor.packets,
        }
    }

    /// The status block for a running ring.
    pub fn status(&self) -> RingStatus {
        RingStatus {
            rptr: self.cursor.rptr,
            state: ring_state::RUNNING,
            last_fence: self.cursor.last_fence,
            packets: self.cursor.packets,
            error: 0,
            error_rptr: 0,
            wptr: self.wptr,
            reserved0: 0,
            reserved: [0; 3],
        }
    }
}

/// How a slice ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SliceEnd {
    /// The ring caught up with its write pointer.
    Idle,
    /// The time slice is over; work remains.
    Yield,
    /// The engine needs attention; work may remain.
    Interrupted,
    /// A `SEM_WAIT` is not satisfied; `epoch` was read before the
    /// semaphore.
    SemWait {
        /// Semaphore epoch.
        epoch: u64,
    },
    /// A translation failed.
    Fault {
        /// The fault.
        fault: MmuFault,
        /// GPU VA of the packet.
        packet_va: u64,
    },
    /// A kernel's global memory access failed (never replayable).
    KernelFault {
        /// The fault.
        fault: MmuFault,
        /// GPU VA of the `DISPATCH` packet.
        packet_va: u64,
        /// `lane | pc << 32`.
        lane_pc: u64,
    },
    /// A bad packet or pointer.
    Error {
        /// What was wrong.
        code: EngineError,
        /// GPU VA of the packet.
        packet_va: u64,
        /// Its header word (0 if none was read).
        header: u32,
    },
    /// Writing the status block faulted.
    StatusFault(MmuFault),
}

/// What a slice did.
#[derive(Debug)]
pub struct SliceOutput {
    /// How it ended.
    pub end: SliceEnd,
    /// Counters to add to the engine's and the context's.
    pub stats: Stats,
}

/// Where the next words come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stream {
    Ring { va: u64, size: u32, wptr: u32 },
    Buffer { va: u64, size: u32 },
}

impl Stream {
    fn of(job: &Job) -> (Stream, u32) {
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
    fn avail(&self, pos: u32) -> u32 {
        match *self {
            Stream::Ring { wptr, .. } => wptr.wrapping_sub(pos),
            Stream::Buffer { size, .. } => size.saturating_sub(pos),
        }
    }

    /// GPU VA of `pos` and the bytes that are contiguous from there.
    fn va(&self, pos: u32) -> (u64, u32) {
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
struct Fetcher {
    buf: Vec<u32>,
    head: usize,
    len: usize,
    stream: Option<Stream>,
    pos: u32,
    /// Record the words read from guest memory (for the sanitizer).
    track: bool,
    /// Words read since last taken: (stream position, index in `buf`,
    /// count, GPU VA).
    reads: Vec<(u32, usize, usize, u64)>,
}

impl Fetcher {
    fn new() -> Self {
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

    fn reset(&mut self) {
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

/// What executing one step of an in-flight operation did.
enum Exec {
    Done,
    Progress,
    Blocked(u64),
    Fault(MmuFault),
    KernelFault(MmuFault, u64),
    /// An engine error; with the PC of a kernel instruction, reported in
    /// the event's `header` field instead of the packet header.
    Error(EngineError, Option<u32>),
}

/// One engine's command processor; owns the engine's TLB.
#[derive(Debug)]
pub struct CommandProcessor {
    engine: u32,
    generation: u32,
    /// The engine's TLB.
    pub tlb: Tlb,
    /// Record mode (or a replay of a record): told of every page read.
    pub record: Option<std::sync::Arc<super::record::Recorder>>,
    fetch: Fetcher,
    trace: Option<Vec<TraceRecord>>,
    /// One TLB per compute unit (compute engine).
    cu_tlbs: Vec<Tlb>,
    /// Loaded dispatches: (context, token, state), at most one per context.
    dispatches: Vec<(u32, u64, Dispatch)>,
    next_token: u64,
    /// The driver sanitizer, and this engine's own part of its state.
    san: Option<Arc<Sanitizer>>,
    san_frames: sanitize::cmdbuf::Frames,
    /// The words of the packet in flight: (context, packet VA, words).
    san_packet: Option<(u32, u64, Vec<u32>)>,
    /// Tests: a compute unit panics at the next dispatch step.
    #[cfg(test)]
    test_panic_unit: bool,
    /// How kernels run (interpreter or JIT) and the compiled modules.
    kernels: KernelEngine,
}

impl CommandProcessor {
    /// The processor of engine `engine` of a generation-`generation` device,
    /// recording a trace if `trace`.
    pub fn new(engine: u32, generation: u32, trace: bool) -> Self {
        CommandProcessor {
            engine,
            generation,
            tlb: Tlb::new(),
            record: None,
            fetch: Fetcher::new(),
            trace: trace.then(Vec::new),
            cu_tlbs: vec![Tlb::new()],
            dispatches: Vec::new(),
            next_token: 1,
            san: None,
            san_frames: sanitize::cmdbuf::Frames::default(),
            san_packet: None,
            #[cfg(test)]
            test_panic_unit: false,
            kernels: KernelEngine::new(JitMode::Auto),
        }
    }

    /// Runs kernels as `mode` says (loaded dispatches keep their engine).
    pub fn set_jit(&mut self, mode: JitMode) {
        self.kernels = KernelEngine::new(mode);
    }

    /// Reports this engine's findings to `san` (checks run while it is
    /// enabled).
    pub fn set_sanitizer(&mut self, san: Arc<Sanitizer>) {
        self.san = Some(san);
    }

    /// Gives the engine `n` compute units (at least 1).
    pub fn set_compute_units(&mut self, n: usize) {
        self.cu_tlbs = (0..n.max(1)).map(|_| Tlb::new()).collect();
        self.dispatches.clear();
    }

    /// Flushes the engine's TLB and its compute units'.
    pub fn flush_tlbs(&mut self) {
        self.tlb.flush();
        for t in &mut self.cu_tlbs {
            t.flush();
        }
    }

    /// [`CommandProcessor::invalidate_tlbs`] as the engine serves a
    /// `TLB_INVALIDATE` (or a destroy): with the sanitizer on, the dropped
    /// translations and the command buffers in execution are checked
    /// against the page tables in `mem` first. Returns the sanitizer's
    /// events to post.
    pub fn invalidate_tlbs_served(
        &mut self,
        mem: &Mem,
        now_ns: u64,
        inject: &Injector,
        asid: u32,
        va: u64,
        size: u64,
    ) -> Vec<Event> {
        if !self.san.as_ref().is_some_and(|s| s.enabled()) {
            self.invalidate_tlbs(asid, va, size);
            return Vec::new();
        }
        self.tlb.invalidate_checked(mem, asid, va, size);
        for t in &mut self.cu_tlbs {
            t.invalidate_checked(mem, asid, va, size);
        }
        self.san_served(mem, now_ns, inject, asid)
    }

    /// Invalidates `[va, va + size)` of `asid` in every TLB of the engine.
    pub fn invalidate_tlbs(&mut self, asid: u32, va: u64, size: u64) {
        self.tlb.invalidate(asid, va, size);
        for t in &mut self.cu_tlbs {
            t.invalidate(asid, va, size);
        }
    }

    /// [`CommandProcessor::invalidate_tlbs`], except that one translation
    /// in the range survives as a stale entry served once (fault
    /// injection): the `pick`-th of the engine TLB's translations in the
    /// range, else of the first compute unit's TLB that has one. Returns
    /// it, or `None` if no TLB of the engine held a translation there.
    pub fn invalidate_tlbs_keep_one(
        &mut self,
        asid: u32,
        va: u64,
        size: u64,
        pick: u64,
    ) -> Option<PageMapping> {
        let mut kept = self.tlb.invalidate_keep_one(asid, va, size, pick);
        for t in &mut self.cu_tlbs {
            if kept.is_none() {
                kept = t.invalidate_keep_one(asid, va, size, pick);
            } else {
                t.invalidate(asid, va, size);
            }
        }
        kept
    }

    /// Drops the loaded dispatches for which `live(ctx, token)` is false
    /// (their ring was reset, destroyed or moved on).
    pub fn retain_dispatches(&mut self, mut live: impl FnMut(u32, u64) -> bool) {
        self.dispatches.retain(|(c, t, _)| live(*c, *t));
    }

    /// Matches the command buffers the sanitizer recorded with the rings':
    /// `frames(ctx)` gives the buffers context `ctx`'s ring on this engine
    /// executes, outermost first (none for a ring stopped, reset or
    /// destroyed); a recorded buffer that is no longer among them is
    /// forgotten.
    pub fn retain_san_frames(&mut self, mut frames: impl FnMut(u32) -> Vec<(u64, u32)>) {
        for ctx in self.san_frames.contexts() {
            let now = frames(ctx);
            self.san_frames.sync(ctx, &now);
        }
    }

    /// Number of loaded dispatches.
    pub fn loaded_dispatches(&self) -> usize {
        self.dispatches.len()
    }

    /// Workgroups started and in total of `ctx`'s loaded dispatch
    /// `token` (for captures).
    pub fn dispatch_progress(&self, ctx: u32, token: u64) -> Option<(u64, u64)> {
        self.dispatches
            .iter()
            .find(|(c, t, _)| *c == ctx && *t == token)
            .map(|(_, _, d)| (d.started(), d.workgroups()))
    }

    /// The compute units' TLBs (for captures).
    pub fn unit_tlbs(&self) -> &[Tlb] {
        &self.cu_tlbs
    }

    /// One step of a dispatch of `job`'s ring: loads it first if needed.
    fn dispatch_step(
        &mut self,
        mem: &Mem,
        poison: Option<&Poison>,
        job: &Job,
        op: &mut DispatchOp,
        stats: &mut Stats,
    ) -> Exec {
        let ctx = job.ctx;
        let found = self
            .dispatches
            .iter()
            .position(|(c, t, _)| *c == ctx && *t == op.token && op.token != 0);
        let idx = match found {
            Some(i) => i,
            None => {
                let tap = self.record.as_deref().map(|r| r.tap(self.engine));
                let mut gm = GpuMemory::new(mem, &mut self.tlb, job.space)
                    .with_poison(poison)
                    .with_tap(tap);
                let units = self.cu_tlbs.len();
                let d = match Dispatch::load(op, &mut gm, self.generation, units, &self.kernels) {
                    Ok(d) => d,
                    Err(LoadError::Fault(f)) => return Exec::Fault(f),
                    Err(LoadError::Invalid(code)) => return Exec::Error(code, None),
                };
                op.token = self.next_token;
                self.next_token = self.next_token.wrapping_add(1).max(1);
                self.dispatches.retain(|(c, _, _)| *c != ctx);
                self.dispatches.push((ctx, op.token, d));
                self.dispatches.len() - 1
            }
        };
        let Some((_, _, d)) = self.dispatches.get_mut(idx) else {
            return Exec::Error(EngineError::BadOperand, None);
        };
        #[cfg(test)]
        {
            d.test_panic = std::mem::take(&mut self.test_panic_unit);
        }
        let tap = self.record.as_deref().map(|r| r.tap(self.engine));
        let (end, st) = d.step(mem, job.space, &mut self.cu_tlbs, poison, tap);
        stats.workgroups += st.workgroups;
        stats.lane_ops += st.lane_ops;
        stats.cycles += st.cycles;
        let r = match end {
            StepEnd::Progress => return Exec::Progress,
            StepEnd::Done => Exec::Done,
            StepEnd::Error { code, pc } => Exec::Error(code, Some(pc)),
            StepEnd::Fault { fault, lane_pc } => Exec::KernelFault(fault, lane_pc),
            StepEnd::Internal => {
                // The units start again from nothing.
                for t in &mut self.cu_tlbs {
                    t.flush();
                }
                Exec::Error(EngineError::Internal, None)
            }
        };
        self.dispatches.swap_remove(idx);
        r
    }

    /// Record mode: the packet at `packet_va` of `job` was fetched
    /// (`words`, header first).
    fn record_packet(&self, job: &Job, packet_va: u64, words: &[u32]) {
        if let Some(r) = self.record.as_deref() {
            r.packet(self.engine, job.ctx, job.cursor.depth, packet_va, words);
        }
    }

    /// Trace records of the last slices, taken out.
    pub fn take_trace(&mut self) -> Vec<TraceRecord> {
        self.trace.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// Device time for trace records; the clock is only read when tracing
    /// (reading it per packet would cost more than a `NOP`).
    fn trace_clock(&self, host: &dyn Host) -> u64 {
        if self.trace.is_some() {
            host.now_ns()
        } else {
            0
        }
    }

    fn record(&mut self, rec: TraceRecord) {
        if let Some(t) = self.trace.as_mut() {
            t.push(rec);
        }
    }

    fn trace_base(
        &self,
        kind: TraceKind,
        name: &'static str,
        job: &Job,
        ts_ns: u64,
    ) -> TraceRecord {
        TraceRecord {
            kind,
            name,
            engine: self.engine,
            ctx: job.ctx,
            ts_ns,
            dur_ns: 0,
            packet_va: 0,
            arg: 0,
        }
    }

    /// Records an instant event of `kind` for `job` (faults, errors,
    /// resets found by the scheduler).
    pub fn record_instant(
        &mut self,
        kind: TraceKind,
        name: &'static str,
        job: &Job,
        ts_ns: u64,
        packet_va: u64,
        arg: u64,
    ) {
        let base = self.trace_base(kind, name, job, ts_ns);
        self.record(TraceRecord {
            packet_va,
            arg,
            ..base
        });
    }

    /// Writes a ring status block through this engine's TLB.
    pub fn write_status(
        &mut self,
        mem: &Mem,
        space: AddressSpace,
        status_va: u64,
        status: &RingStatus,
    ) -> Result<(), MmuFault> {
        let tap = self.record.as_deref().map(|r| r.tap(self.engine));
        GpuMemory::new(mem, &mut self.tlb, space)
            .with_tap(tap)
            .write_small(status_va, status.as_bytes())
    }

    /// Runs `job` until its slice ends.
    pub fn run_slice(&mut self, host: &dyn Host, mem: &Mem, job: &mut Job) -> SliceOutput {
        let t0 = host.now_ns();
        let tlb0 = self.tlb.stats();
        self.fetch.reset();
        let san = self.san_begin(host, job);
        let mut stats = Stats::default();
        let mut end = self.run(host, mem, job, &mut stats);
        if san {
            end = self.san_end(host, mem, job, end);
        }
        let tlb1 = self.tlb.stats();
        stats.tlb_hits = tlb1.hits - tlb0.hits;
        stats.tlb_misses = tlb1.misses - tlb0.misses;
        stats.busy_ns = host.now_ns().saturating_sub(t0);
        SliceOutput { end, stats }
    }

    fn run(&mut self, host: &dyn Host, mem: &Mem, job: &mut Job, stats: &mut Stats) -> SliceEnd {
        let mut until_clock = CLOCK_EVERY;
        loop {
            if host.attention() {
                // A ring with nothing left was not interrupted: a reset
                // arriving right after its last packet finds the engine idle.
                return if drained(job) {
                    SliceEnd::Idle
                } else {
                    SliceEnd::Interrupted
                };
            }
            until_clock -= 1;
            if until_clock == 0 {
                until_clock = CLOCK_EVERY;
                if host.slice_over() {
                    return SliceEnd::Yield;
                }
            }
            if let Some(mut fl) = job.cursor.pending {
                #[cfg(test)]
                match host.take_test_panic() {
                    Some(TestPanic::Slice) => {
                        panic!("engine {}: panic requested by a test", self.engine)
                    }
                    Some(TestPanic::ComputeUnit) => self.test_panic_unit = true,
                    None => {}
                }
                match self.inject_step(host, mem, job, &mut fl, stats) {
                    Injected::Go => {}
                    Injected::Again => continue,
                    Injected::Stall => {
                        // A held packet owns its engine: no slice end.
                        until_clock = CLOCK_EVERY;
                        continue;
                    }
                    Injected::End(end) => return end,
                }
                let poison = host.injector().map(Injector::poison);
                let r = if let Op::Dispatch(d) = &mut fl.op {
                    // A step is long next to a packet: look at the clock
                    // after each.
                    until_clock = 1;
                    self.dispatch_step(mem, poison, job, d, stats)
                } else {
                    let tap = self.record.as_deref().map(|r| r.tap(self.engine));
                    let mut gm = GpuMemory::new(mem, &mut self.tlb, job.space)
                        .with_poison(poison)
                        .with_tap(tap);
                    execute(host, &mut gm, &mut fl.op, stats)
                };
                job.cursor.pending = Some(fl);
                if self.fetch.track {
                    if let Some(end) = self.san_step(host, mem, job, &fl, &r) {
                        return end;
                    }
                }
                match r {
                    Exec::Progress => {}
                    Exec::Done => {
                        if let Some(inj) = host.injector() {
                            let mut post = Vec::new();
                            let mut gm = GpuMemory::new(mem, &mut self.tlb, job.space);
                            inj.on_done(host.now_ns(), &job.site(), &fl, &mut gm, &mut post);
                            host.post_burst(post);
                        }
                        if let Some(end) = self.complete(host, mem, job, stats) {
                            return end;
                        }
                    }
                    Exec::Blocked(epoch) => return SliceEnd::SemWait { epoch },
                    Exec::Fault(fault) if fault.is_ecc() => {
                        return SliceEnd::Error {
                            code: EngineError::EccUncorrectable,
                            packet_va: fl.packet_va,
                            header: fl.header,
                        }
                    }
                    Exec::KernelFault(fault, lane_pc) if fault.is_ecc() => {
                        // As for other errors of a kernel instruction: its pc.
                        return SliceEnd::Error {
                            code: EngineError::EccUncorrectable,
                            packet_va: fl.packet_va,
                            header: (lane_pc >> 32) as u32,
                        };
                    }
                    Exec::Fault(fault) => {
                        return SliceEnd::Fault {
                            fault,
                            packet_va: fl.packet_va,
                        }
                    }
                    Exec::KernelFault(fault, lane_pc) => {
                        return SliceEnd::KernelFault {
                            fault,
                            packet_va: fl.packet_va,
                            lane_pc,
                        }
                    }
                    Exec::Error(code, pc) => {
                        return SliceEnd::Error {
                            code,
                            packet_va: fl.packet_va,
                            header: pc.unwrap_or(fl.header),
                        }
                    }
                }
                continue;
            }
            if let Some(end) = self.next_packet(host, mem, job, stats) {
                return end;
            }
        }
    }

    /// Asks the fault injector about the next step of `fl`. A held packet
    /// keeps the engine busy (the slice goes on until a mailbox request
    /// interrupts it, as a stuck engine would); a skipped packet is retired without executing; an injected
    /// fault ends the slice.
    fn inject_step(
        &mut self,
        host: &dyn Host,
        mem: &Mem,
        job: &mut Job,
        fl: &mut InFlight,
        stats: &mut Stats,
    ) -> Injected {
        let Some(inj) = host.injector() else {
            return Injected::Go;
        };
        let mut post = Vec::new();
        // A walk that leaves the TLB as it is: the injector's own look-up.
        let space = job.space;
        let translate = |va: u64| {
            super::mmu::walk(mem, &space, va, Access::Read)
                .ok()
                .map(|m| m.pa(va))
        };
        let verdict = inj.on_step(host.now_ns(), &job.site(), fl, &translate, &mut post);
        host.post_burst(post);
        match verdict {
            StepVerdict::Go => Injected::Go,
            StepVerdict::Hold => Injected::Stall,
            StepVerdict::Skip => {
                job.cursor.pending = None;
                advance(job, fl.words);
                count_packet(job, stats);
                Injected::Again
            }
            StepVerdict::Fault(fault) => Injected::End(SliceEnd::Fault {
                fault,
                packet_va: fl.packet_va,
            }),
        }
    }

    /// The in-flight packet finished: advance past it, count it, and for a
    /// fence update the status block and post the event.
    fn complete(
        &mut self,
        host: &dyn Host,
        mem: &Mem,
        job: &mut Job,
        stats: &mut Stats,
    ) -> Option<SliceEnd> {
        let fl = job.cursor.pending?;
        // Before the cursor moves past the packet: its reports name it.
        if self.fetch.track {
            if let Some(end) = self.san_complete(host, mem, job, &fl) {
                job.cursor.pending = None;
                advance(job, fl.words);
                count_packet(job, stats);
                return Some(end);
            }
        }
        job.cursor.pending = None;
        advance(job, fl.words);
        count_packet(job, stats);
        let now = self.trace_clock(host);
        if self.trace.is_some() {
            let base = self.trace_base(
                TraceKind::Packet,
                opcode_name(fl.opcode),
                job,
                fl.started_ns,
            );
            self.record(TraceRecord {
                dur_ns: now.saturating_sub(fl.started_ns),
                packet_va: fl.packet_va,
                ..base
            });
        }
        if let Op::Fence { va, seqno, flags } = fl.op {
            job.cursor.last_fence = seqno;
            if let Some(inj) = host.injector() {
                inj.on_fence(host.now_ns(), job.ctx, job.engine, seqno);
            }
            stats.fences += 1;
            self.record_instant(TraceKind::Fence, "fence", job, now, fl.packet_va, seqno);
            if !job.status_broken {
                let status = job.status();
                if let Err(f) = self.write_status(mem, job.space, job.status_va, &status) {
                    return Some(SliceEnd::StatusFault(f));
                }
            }
            if flags & FENCE_NO_EVENT == 0 {
                host.post(Event::Fence {
                    ctx_id: job.ctx,
                    engine: job.engine,
                    seqno,
                    va,
                });
            }
            host.semaphores_changed();
        }
        if matches!(fl.op, Op::SemSignal { .. }) {
            host.semaphores_changed();
        }
        None
    }

    /// Fetches and decodes the next packet; starts it or finishes it at
    /// once. Returns how the slice ends, if it does.
    fn next_packet(
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

/// What the fault injector made of a step.
enum Injected {
    /// Execute the step.
    Go,
    /// Back to the top of the loop (attention and slice checks first).
    Again,
    /// Held: back to the top of the loop without ending the slice.
    Stall,
    /// The slice ends.
    End(SliceEnd),
}

/// Counts a completed packet on the ring and in the slice's counters.
fn count_packet(job: &mut Job, stats: &mut Stats) {
    job.cursor.packets = job.cursor.packets.wrapping_add(1);
    stats.packets += 1;
}

/// Moves the innermost stream past `words` words.
fn advance(job: &mut Job, words: u32) {
    let bytes = words.wrapping_mul(4);
    match job.cursor.frame_mut() {
        Some(f) => f.offset = f.offset.saturating_add(bytes),
        None => job.cursor.rptr = job.cursor.rptr.wrapping_add(bytes),
    }
}

/// Whether a `SEM_WAIT` with `op` and operand `value` is satisfied by the
/// semaphore value `cur`.
pub fn sem_satisfied(op: u32, cur: u64, value: u64) -> bool {
    match op {
        SEM_WAIT_GEQ => cur >= value,
        SEM_WAIT_EQ => cur == value,
        SEM_WAIT_NEQ => cur != value,
        _ => false,
    }
}

/// One step of an in-flight operation.
fn execute(host: &dyn Host, gm: &mut GpuMemory<'_>, op: &mut Op, stats: &mut Stats) -> Exec {
    let r = match op {
        Op::Fence { va, seqno, .. } => gm.write_u64(*va, *seqno).map(|()| Exec::Done),
        Op::Timestamp { va } => gm.write_u64(*va, host.now_ns()).map(|()| Exec::Done),
        Op::SemSignal { va, value, op } => {
            if *op == SEM_SIGNAL_ADD {
                gm.atomic_add_u64(*va, *value).map(|_| Exec::Done)
            } else {
                gm.write_u64(*va, *value).map(|()| Exec::Done)
            }
        }
        Op::SemWait { va, value, op } => {
            let epoch = host.sem_epoch();
            gm.read_u64(*va, Access::Read).map(|cur| {
                if sem_satisfied(*op, cur, *value) {
                    Exec::Done
                } else {
                    Exec::Blocked(epoch)
                }
            })
        }
        // Run by `CommandProcessor::dispatch_step`.
        Op::Dispatch(_) => Ok(Exec::Done),
        Op::Copy(c) => c.step(gm).map(|s| match s {
            Step::Progress(n) => {
                stats.bytes += n;
                Exec::Progress
            }
            Step::Done(n) => {
                stats.bytes += n;
                Exec::Done
            }
        }),
    };
    r.unwrap_or_else(Exec::Fault)
}

/// A host for tests and benchmarks: a manual clock, an attention flag, a
/// slice that never ends, and a list of posted events.
#[derive(Debug, Default)]
pub struct TestHost {
    /// Device time.
    pub now: std::sync::atomic::AtomicU64,
    /// Attention flag.
    pub attention: std::sync::atomic::AtomicBool,
    /// Semaphore epoch.
    pub epoch: std::sync::atomic::AtomicU64,
    /// Events posted.
    pub events: std::sync::Mutex<Vec<Event>>,
    /// The slice ends at this instant, if set.
    pub deadline: Option<Instant>,
}

impl Host for TestHost {
    fn now_ns(&self) -> u64 {
        self.now.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }
    fn attention(&self) -> bool {
        self.attention.load(std::sync::atomic::Ordering::Relaxed)
    }
    fn slice_over(&self) -> bool {
        self.deadline.is_some_and(|d| Instant::now() >= d)
    }
    fn sem_epoch(&self) -> u64 {
        self.epoch.load(std::sync::atomic::Ordering::Relaxed)
    }
    fn semaphores_changed(&self) {
        self.epoch
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    fn post(&self, event: Event) {
        self.events
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(event);
    }
}

mod san;
#[cfg(test)]
mod tests;

/// Whether `job` has no packet in progress and nothing left to fetch.
fn drained(job: &Job) -> bool {
    if job.cursor.pending.is_some() || job.cursor.depth != 0 {
        return false;
    }
    let (stream, pos) = Stream::of(job);
    stream.avail(pos) == 0
}
