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
//!
//! # Files
//!
//! | file | holds |
//! |---|---|
//! | `mod.rs` | the [`Job`] a slice runs, how it ended ([`SliceEnd`]), the processor's state, its TLB and dispatch bookkeeping, the trace |
//! | `host.rs` | what the processor needs from its surroundings ([`Host`]), and [`TestHost`] |
//! | `fetch.rs` | the prefetch buffer and the stream it reads, and decoding the next packet |
//! | `exec.rs` | the slice loop and the execution of an in-flight packet, step by step |
//! | `san.rs` | the driver sanitizer's hooks |
//!
//! [`InFlight`]: super::ring::InFlight

use std::sync::Arc;

use vgpu_hwif::event::Event;
use vgpu_hwif::packet::EngineError;
use vgpu_hwif::pod::Pod;
use vgpu_hwif::proto::{ring_state, RingStatus};
use vgpu_isa::jit::JitMode;

use super::compute_engine::{Dispatch, KernelEngine};
use super::dma::GpuMemory;
use super::inject::{Injector, Site};
use super::mmu::{AddressSpace, Mem, MmuFault, PageMapping, Tlb};
use super::ring::Cursor;
use super::sanitize::{self, Sanitizer};
use super::telemetry::{Stats, TraceKind, TraceRecord};

mod exec;
mod fetch;
mod host;
mod san;
#[cfg(test)]
mod tests;

pub use exec::sem_satisfied;
use exec::Exec;
pub use fetch::PREFETCH_WORDS;
use fetch::{Fetcher, Stream};
#[cfg(test)]
pub use host::TestPanic;
pub use host::{Host, TestHost};

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

/// Whether `job` has no packet in progress and nothing left to fetch.
fn drained(job: &Job) -> bool {
    if job.cursor.pending.is_some() || job.cursor.depth != 0 {
        return false;
    }
    let (stream, pos) = Stream::of(job);
    stream.avail(pos) == 0
}
