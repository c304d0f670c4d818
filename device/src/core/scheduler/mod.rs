//! The scheduler: one thread per engine, sharing the engine between the
//! contexts that have a ring on it.
//!
//! # Rules
//!
//! * A ring is a candidate when it is `READY`, or waits on a semaphore and
//!   either the semaphore epoch moved (some engine executed `SEM_SIGNAL` or
//!   `FENCE`, or the driver rang a doorbell) or [`SEM_POLL`] passed since
//!   its last check (the CPU may write semaphores too). A ring waiting on a
//!   semaphore therefore never holds the engine: other contexts run.
//! * The candidate of the highest context priority wins; among equal
//!   priorities the engine goes round-robin by context id, starting after
//!   the context it ran last. A firmware image with the round-robin policy
//!   makes every priority equal.
//! * The winner runs for one time slice (the running firmware image's for
//!   its priority; [`TIME_SLICE`] before one runs; none when the image
//!   disables preemption) or until it runs
//!   out of packets, blocks, faults or fails. A doorbell or fault retry
//!   that makes a higher-priority ring ready preempts the running ring at
//!   its next packet or chunk boundary.
//!
//! # The engine loop
//!
//! ```text
//!        ┌──────────────────────────── state lock held ───────────────────────────┐
//!  ──▶ serve mailbox ─▶ take doorbells ─▶ write dirty status blocks ─▶ select ring ─┐
//!  ▲     (resets,         (validate wptr,     (then post the events   none: sleep   │
//!  │     invalidations)   stop on errors)      they explain)          until woken   │
//!  │                                                                                ▼
//!  └── retire: cursor back, new ring state, status block, events ◀── run slice (no lock)
//! ```
//!
//!
//! # A device bug
//!
//! A panic while a slice runs — in the command processor, a copy, or a
//! compute unit of a dispatch — is caught (`std::panic::catch_unwind`),
//! logged, and reported like an engine error: the ring in flight stops with
//! `ENGINE_ERROR` `INTERNAL`, the engine's command processor is rebuilt in
//! its power-on state (TLBs and compute-unit TLBs empty, no loaded
//! dispatch), and the engine goes on serving the other rings. Rings that
//! were not running are untouched.
//!
//! # Files
//!
//! This file holds the engine loop and the choice of the next ring;
//! `retire.rs` puts a ring back after its slice and writes status blocks;
//! `mailbox.rs` serves the requests other threads leave for the engine
//! (resets, invalidations, captures).
//!
//! [`SEM_POLL`]: super::gpu::SEM_POLL
//! [`TIME_SLICE`]: super::gpu::TIME_SLICE

use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use vgpu_hwif::event::{EngineErrorRecord, Event};
use vgpu_hwif::packet::EngineError;
use vgpu_hwif::proto::MAX_CONTEXTS;

use super::cp::{CommandProcessor, Host, Job, SliceEnd, SliceOutput};
use super::gpu::{Gpu, GpuConfig, GpuState, ENGINES};
use super::mmu::Mem;
use super::post;
use super::ring::{check_doorbell, RingState};
use super::sanitize_hooks as hooks;
use super::telemetry::Stats;

mod mailbox;
mod retire;

pub use mailbox::{prune_dispatches, prune_san_frames, serve_requests};
pub use retire::{cmd_offset, fault_event, flush_status, retire};

/// How long an idle engine sleeps before looking again on its own.
const IDLE_WAIT: Duration = Duration::from_millis(100);

/// Picks the ring engine `e` runs next: the context id, or `None`.
pub fn select(
    st: &GpuState,
    e: u32,
    epoch: u64,
    now: Instant,
    poll: Duration,
    round_robin: bool,
) -> Option<u32> {
    let rr = st.engines.get(e as usize).map_or(0, |es| es.rr_last);
    let mut best: Option<(u32, u32, u32)> = None; // (priority, distance, ctx)
    for c in st.contexts.iter().filter(|c| !c.dying) {
        let Some(r) = c.ring(e) else { continue };
        let eligible = match r.state {
            RingState::Ready => true,
            RingState::SemWait { epoch: seen, since } => {
                seen != epoch || now.saturating_duration_since(since) >= poll
            }
            _ => false,
        };
        if !eligible {
            continue;
        }
        // The firmware's round-robin policy ignores priorities.
        let prio = if round_robin { 0 } else { c.priority };
        // 0 for the context right after the one that ran last.
        let distance = (c.id + MAX_CONTEXTS - rr - 1) % MAX_CONTEXTS;
        let better = match best {
            None => true,
            Some((p, d, _)) => prio > p || prio == p && distance < d,
        };
        if better {
            best = Some((prio, distance, c.id));
        }
    }
    best.map(|(_, _, id)| id)
}

/// Takes ring (`ctx`, `e`) out to run: it becomes `RUNNING` and its cursor
/// goes with the job.
pub fn checkout(st: &mut GpuState, e: u32, ctx: u32, cfg: &GpuConfig) -> Option<Job> {
    let c = st.contexts.get_mut(ctx).ok()?;
    let (priority, replayable, space) = (c.priority, c.replayable, c.space(cfg.va_bits));
    let r = c.ring_mut(e)?;
    r.state = RingState::Running;
    let job = Job {
        ctx,
        engine: e,
        priority,
        replayable,
        space,
        ring_va: r.va,
        ring_size: r.size,
        status_va: r.status_va,
        status_broken: r.status_broken,
        wptr: r.wptr,
        cursor: r.cursor,
    };
    let es = st.engines.get_mut(e as usize)?;
    es.current = Some((ctx, priority));
    es.rr_last = ctx;
    Some(job)
}

/// Takes the doorbell values rung since the engine last looked and checks
/// them; a bad one stops its ring with an `ENGINE_ERROR` event.
pub fn take_doorbells(st: &mut GpuState, e: u32, events: &mut Vec<Event>) {
    let mut errors = 0;
    for c in st.contexts.iter_mut().filter(|c| !c.dying) {
        let id = c.id;
        let Some(r) = c.ring_mut(e) else { continue };
        if r.state == RingState::Running {
            continue;
        }
        let bell_fault = r.doorbell_fault.take();
        let Some(new) = r.doorbell.take().or(bell_fault.map(|_| r.wptr)) else {
            continue;
        };
        if matches!(r.state, RingState::Stopped { .. }) {
            continue;
        }
        let checked = match bell_fault {
            // The watched block could not be read: the ring stops, the
            // event names the block.
            Some(_) => Err(EngineError::DoorbellFault),
            None => check_doorbell(new, r.wptr, r.cursor.rptr, r.size),
        };
        match checked {
            Ok(w) => {
                r.wptr = w;
                if r.state == RingState::Idle && r.has_packets() {
                    r.state = RingState::Ready;
                }
            }
            Err(code) => {
                let rptr = r.cursor.rptr;
                r.state = RingState::Stopped {
                    error: code as u32,
                    error_rptr: rptr,
                };
                r.status_dirty = true;
                r.stats.errors += 1;
                c.stats.errors += 1;
                errors += 1;
                let r = c.ring(e);
                events.push(Event::EngineError(EngineErrorRecord {
                    ctx_id: id,
                    engine: e,
                    code: code as u32,
                    packet_va: bell_fault.unwrap_or_else(|| r.map_or(0, |r| r.va_of(rptr))),
                    rptr,
                    depth: r.map_or(0, |r| r.cursor.depth),
                    cmd_offset: r.map_or(0, |r| cmd_offset(&r.cursor)),
                    header: 0,
                }));
            }
        }
    }
    if let Some(es) = st.engines.get_mut(e as usize) {
        es.stats.errors += errors;
    }
}

/// Moves the command processor's trace records to the device's trace.
fn flush_trace(gpu: &Gpu, cp: &mut CommandProcessor) {
    if let Some(t) = gpu.trace.as_ref() {
        let recs = cp.take_trace();
        if !recs.is_empty() {
            t.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .extend(&recs);
        }
    }
}

/// The command processor's view of engine `e` of `gpu`.
struct EngineHost<'a> {
    gpu: &'a Gpu,
    e: usize,
    /// End of the slice; `None`: no time slicing (the running image
    /// disables preemption).
    deadline: Option<Instant>,
    /// A virtual function's slice also ends here when another VF waits
    /// for the engine (`partition::VF_SLICE`).
    shared_deadline: Option<Instant>,
}

impl Host for EngineHost<'_> {
    fn now_ns(&self) -> u64 {
        self.gpu.clock.now_ns()
    }
    fn attention(&self) -> bool {
        self.gpu
            .attention
            .get(self.e)
            .is_some_and(|a| a.load(Ordering::Acquire))
    }
    fn slice_over(&self) -> bool {
        self.deadline.is_some_and(|d| Instant::now() >= d) || self.function_slice_over()
    }
    fn function_slice_over(&self) -> bool {
        self.shared_deadline.is_some_and(|d| {
            Instant::now() >= d
                && self
                    .gpu
                    .partition
                    .as_ref()
                    .is_some_and(|p| p.arbiter.contended(self.e))
        })
    }
    fn sem_epoch(&self) -> u64 {
        self.gpu.sem_epoch.load(Ordering::Acquire)
    }
    fn semaphores_changed(&self) {
        self.gpu.semaphores_changed();
    }
    fn post(&self, event: Event) {
        post::event(self.gpu, event);
    }
    fn post_burst(&self, events: Vec<Event>) {
        post::burst(self.gpu, &events);
    }
    fn injector(&self) -> Option<&super::inject::Injector> {
        Some(&self.gpu.inject)
    }
    fn packet_allowed(&self, opcode: u32) -> bool {
        self.gpu.firmware.packet_allowed(opcode)
    }
    fn firmware_down(&self, class: super::inject::Class, ctx: u32, engine: u32, packet_va: u64) {
        let now = self.gpu.clock.now_ns();
        if class == super::inject::Class::FwCrash {
            let code = vgpu_hwif::firmware::crash::EXCEPTION;
            self.gpu.firmware.crash(now, code, ctx, engine);
            post::event(
                self.gpu,
                Event::FirmwareCrash {
                    code,
                    ctx_id: ctx,
                    engine,
                    packet_va,
                },
            );
        } else {
            self.gpu.firmware.hang(now);
        }
    }
    #[cfg(test)]
    fn take_test_panic(&self) -> Option<super::cp::TestPanic> {
        self.gpu
            .test_panic
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_mut(self.e)
            .and_then(Option::take)
    }
}

/// Runs `job`'s slice on `cp`, containing a panic (a device bug): the
/// command processor is rebuilt (its TLBs, its compute units' TLBs and
/// loaded dispatches start empty, as after power-on) and the slice ends
/// with the engine error `INTERNAL` for the job's ring, so that the
/// driver hears of it and the engine goes on serving the other rings.
fn run_slice_contained(
    gpu: &Gpu,
    e: usize,
    cp: &mut CommandProcessor,
    host: &EngineHost<'_>,
    mem: &Mem,
    job: &mut Job,
) -> SliceOutput {
    let run = std::panic::AssertUnwindSafe(|| cp.run_slice(host, mem, job));
    match std::panic::catch_unwind(run) {
        Ok(out) => out,
        Err(payload) => {
            let msg = super::compute_engine::panic_message(payload.as_ref());
            log::error!(
                "engine {e}: internal error in context {}'s ring: {msg}; engine reinitialised",
                job.ctx
            );
            // What the slice traced before the panic is kept.
            flush_trace(gpu, cp);
            *cp = new_command_processor(gpu, e);
            let (packet_va, header) = match job.cursor.pending {
                Some(fl) => (fl.packet_va, fl.header),
                None => (
                    job.ring_va
                        .wrapping_add(u64::from(job.cursor.rptr & job.ring_size.wrapping_sub(1))),
                    0,
                ),
            };
            SliceOutput {
                end: SliceEnd::Error {
                    code: EngineError::Internal,
                    packet_va,
                    header,
                },
                stats: Stats::default(),
            }
        }
    }
}

/// Engine `e`'s command processor in its power-on state.
fn new_command_processor(gpu: &Gpu, e: usize) -> CommandProcessor {
    let eu = e as u32;
    let mut cp = CommandProcessor::new(eu, gpu.cfg.generation, gpu.trace.is_some());
    if eu == vgpu_hwif::proto::engine::COMPUTE {
        cp.set_compute_units(gpu.cfg.compute_units as usize);
        cp.set_jit(gpu.cfg.jit);
    }
    cp.set_sanitizer(gpu.sanitizer.clone());
    cp.record = gpu.record.get().cloned();
    cp
}

/// Gives a virtual function's turn on engine `e` back; with `again` it
/// stays in line for its next slice, without it it leaves the line.
fn release(gpu: &Gpu, e: usize, grant: &mut Option<super::partition::Grant>, again: bool) {
    let Some(p) = &gpu.partition else { return };
    if let Some(g) = grant.take() {
        p.arbiter.release(g, again);
    }
    if !again {
        p.arbiter.withdraw(e, p.cfg.vf);
    }
}

/// Marks engine `e` dead when its thread ends (normally or by a panic),
/// so that nobody waits for it forever.
struct AliveGuard<'a>(&'a Gpu, usize);

impl Drop for AliveGuard<'_> {
    fn drop(&mut self) {
        if let Some(a) = self.0.alive.get(self.1) {
            a.store(false, Ordering::Release);
        }
        self.0.done.notify_all();
    }
}

/// The body of engine `e`'s thread; returns when `gpu.shutdown` is set.
pub fn engine_main(gpu: Arc<Gpu>, e: usize) {
    let _alive = AliveGuard(&gpu, e);
    if e >= ENGINES {
        return;
    }
    let eu = e as u32;
    let mut cp = new_command_processor(&gpu, e);
    let mut grant: Option<super::partition::Grant> = None;
    let mut st = gpu.lock();
    loop {
        if gpu.shutdown.load(Ordering::Acquire) {
            break;
        }
        if cp.record.is_none() {
            cp.record = gpu.record.get().cloned();
        }
        if let Some(a) = gpu.attention.get(e) {
            a.store(false, Ordering::Release);
        }
        serve_requests(&gpu, &mut st, eu, &mut cp);
        prune_dispatches(&st, eu, &mut cp);
        let mem = gpu.memory();
        let (san_wait, mut events) = hooks::before_take_doorbells(&gpu, &mut st, eu);
        take_doorbells(&mut st, eu, &mut events);
        hooks::after_take_doorbells(&gpu, &mut st, eu);
        flush_status(&mut st, eu, gpu.cfg.va_bits, &mut cp, &mem, &mut events);
        for ev in events {
            post::event(&gpu, ev);
        }
        flush_trace(&gpu, &mut cp);
        let now = Instant::now();
        let epoch = gpu.sem_epoch.load(Ordering::Acquire);
        let rr = gpu.firmware.round_robin();
        let candidate = select(&st, eu, epoch, now, gpu.cfg.sem_poll, rr);
        // A virtual function first waits for its turn on the shared
        // engine, then looks again (its mailbox may have moved meanwhile).
        if let (Some(_), Some(p), None) = (candidate, &gpu.partition, &grant) {
            drop(st);
            grant = p.arbiter.acquire(e, p.cfg.vf, &|| {
                gpu.shutdown.load(Ordering::Acquire)
                    || gpu
                        .attention
                        .get(e)
                        .is_some_and(|a| a.load(Ordering::Acquire))
            });
            st = gpu.lock();
            continue;
        }
        let picked = candidate.and_then(|ctx| checkout(&mut st, eu, ctx, &gpu.cfg));
        match picked {
            Some(mut job) => {
                drop(st);
                let host = EngineHost {
                    gpu: &gpu,
                    e,
                    deadline: gpu.firmware.slice(job.priority).map(|d| now + d),
                    shared_deadline: grant
                        .as_ref()
                        .map(|g| g.since() + super::partition::VF_SLICE),
                };
                let out = run_slice_contained(&gpu, e, &mut cp, &host, &mem, &mut job);
                // The slice's records reach the trace before its status
                // block and events can tell anyone the slice is over.
                flush_trace(&gpu, &mut cp);
                st = gpu.lock();
                let (ctx, end) = (job.ctx, out.end);
                let mut events = retire(&gpu, &mut st, &mut cp, &mem, job, out);
                events.extend(hooks::after_retire(&gpu, &mut st, ctx, eu, &end));
                // A stopped ring is captured before its event goes out.
                super::capture_ctl::on_retire(&gpu, &st, &cp, &mem, &job, &end, &events);
                flush_trace(&gpu, &mut cp);
                for ev in events {
                    post::event(&gpu, ev);
                }
                release(&gpu, e, &mut grant, true);
            }
            None => {
                release(&gpu, e, &mut grant, false);
                let waiting = st.contexts.iter().any(|c| {
                    c.ring(eu)
                        .is_some_and(|r| matches!(r.state, RingState::SemWait { .. }))
                });
                let timeout = if waiting { gpu.cfg.sem_poll } else { IDLE_WAIT };
                // A doorbell the sanitizer holds back is taken when it is
                // old enough.
                let timeout = san_wait.map_or(timeout, |ns| timeout.min(Duration::from_nanos(ns)));
                let Some(cv) = gpu.wake.get(e) else { break };
                st = cv
                    .wait_timeout(st, timeout)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
            }
        }
    }
    drop(st);
    release(&gpu, e, &mut grant, false);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::context::Context;
    use crate::core::ring::Ring;
    use vgpu_hwif::proto::{PRIORITY_HIGH, PRIORITY_LOW, PRIORITY_NORMAL};

    fn state(specs: &[(u32, u32, RingState)]) -> GpuState {
        let mut st = GpuState::new();
        for &(id, prio, s) in specs {
            let mut c = Context::new(id, prio, 0, 0).unwrap();
            let mut r = Ring::new(0, 0, 4096, 0);
            r.state = s;
            c.rings[0] = Some(r);
            st.contexts.insert(c).unwrap();
        }
        st
    }

    #[test]
    fn highest_priority_first_then_round_robin() {
        let mut st = state(&[
            (1, PRIORITY_NORMAL, RingState::Ready),
            (5, PRIORITY_NORMAL, RingState::Ready),
            (9, PRIORITY_NORMAL, RingState::Ready),
            (3, PRIORITY_LOW, RingState::Ready),
            (7, PRIORITY_HIGH, RingState::Idle),
        ]);
        let now = Instant::now();
        let poll = Duration::from_millis(1);
        let mut order = Vec::new();
        for _ in 0..6 {
            let id = select(&st, 0, 0, now, poll, false).unwrap();
            order.push(id);
            st.engines[0].rr_last = id;
        }
        assert_eq!(order, vec![1, 5, 9, 1, 5, 9]);
        // A high-priority ring that becomes ready wins at once.
        st.contexts.get_mut(7).unwrap().ring_mut(0).unwrap().state = RingState::Ready;
        assert_eq!(select(&st, 0, 0, now, poll, false), Some(7));
        // Only low priority left: it runs.
        for id in [1, 5, 9, 7] {
            st.contexts.get_mut(id).unwrap().ring_mut(0).unwrap().state = RingState::Idle;
        }
        assert_eq!(select(&st, 0, 0, now, poll, false), Some(3));
        // Dying contexts and other engines never run.
        st.contexts.get_mut(3).unwrap().dying = true;
        assert_eq!(select(&st, 0, 0, now, poll, false), None);
        assert_eq!(select(&st, 1, 0, now, poll, false), None);
    }

    #[test]
    fn semaphore_waiters_are_rechecked_on_epoch_or_poll() {
        let t0 = Instant::now();
        let st = state(&[(
            2,
            PRIORITY_NORMAL,
            RingState::SemWait {
                epoch: 4,
                since: t0,
            },
        )]);
        let poll = Duration::from_millis(1);
        assert_eq!(select(&st, 0, 4, t0, poll, false), None);
        assert_eq!(select(&st, 0, 5, t0, poll, false), Some(2));
        assert_eq!(select(&st, 0, 4, t0 + poll, poll, false), Some(2));
    }

    #[test]
    fn doorbells_are_checked_by_the_engine() {
        let mut st = state(&[
            (0, 1, RingState::Idle),
            (1, 1, RingState::Idle),
            (2, 1, RingState::Idle),
            (
                3,
                1,
                RingState::Stopped {
                    error: 2,
                    error_rptr: 0,
                },
            ),
            (4, 1, RingState::Running),
        ]);
        let ring = |st: &mut GpuState, id| {
            st.contexts
                .get_mut(id)
                .unwrap()
                .ring_mut(0)
                .unwrap()
                .doorbell = Some(match id {
                0 => 64,
                1 => 8192,
                2 => 6,
                _ => 64,
            })
        };
        for id in 0..5 {
            ring(&mut st, id);
        }
        let mut ev = Vec::new();
        take_doorbells(&mut st, 0, &mut ev);
        let r = |st: &GpuState, id| st.contexts.get(id).unwrap().ring(0).unwrap().clone();
        assert_eq!((r(&st, 0).state, r(&st, 0).wptr), (RingState::Ready, 64));
        assert_eq!(
            r(&st, 1).state,
            RingState::Stopped {
                error: EngineError::RingOverflow as u32,
                error_rptr: 0
            }
        );
        assert_eq!(
            r(&st, 2).state,
            RingState::Stopped {
                error: EngineError::BadPointer as u32,
                error_rptr: 0
            }
        );
        assert_eq!(r(&st, 3).doorbell, None, "a stopped ring ignores doorbells");
        assert_eq!(
            r(&st, 4).doorbell,
            Some(64),
            "a running ring sees it after its slice"
        );
        assert_eq!(ev.len(), 2);
        assert!(matches!(
            ev[0],
            Event::EngineError(EngineErrorRecord {
                ctx_id: 1,
                code: 8,
                header: 0,
                ..
            })
        ));
        assert_eq!(st.engines[0].stats.errors, 2);
    }
}
