// SPDX-License-Identifier: GPL-2.0

//! The GPU: contexts, KMD-owned rings, submission, fences, page faults,
//! hangs and resets — the driver-side twin of the device's `core/`.
//!
//! One block per file, each opening with what it owns. `impl Gpu` is
//! spread over the files: a block calls the methods of the blocks its row
//! names, and imports only from them, so the order runs one way, from the
//! top down (checked by `scripts/deps`, run by scripts/test). A block that
//! must reach one above it goes through a hook ([`hooks`]): a trait the
//! upper block implements on [`Gpu`].
//!
//! | block | may use |
//! |---|---|
//! | [`fwmon`] | `reset`, `state` |
//! | [`migrate`] | `queue`, `ring`, `sched`, `state`, `tlb`, `uqueue` |
//! | [`uqctl`] | `context`, `hooks`, `ring`, `state`, `uqueue` |
//! | [`submit`] | `hooks`, `power`, `queue`, `ring`, `sanlog`, `sched`, `state` |
//! | [`power`] | `reset`, `state` |
//! | [`reset`] | `coredump`, `dump`, `hooks`, `hwctx`, `ring`, `sched`, `state`, `uqueue` |
//! | [`fence`] | `hooks`, `ring`, `state`, `uqueue` |
//! | [`context`] | `bind`, `hooks`, `hwctx`, `ring`, `state`, `tlb`, `uqueue` |
//! | [`sched`] | `bind`, `queue`, `ring`, `state` |
//! | [`bind`] | `queue`, `state`, `tlb` |
//! | [`fault`] | `coredump`, `records`, `ring`, `state` |
//! | [`ras`] | `state` |
//! | [`sanitizer`] | `sanlog`, `state` |
//! | [`coredump`] | `dump`, `records`, `ring`, `state` |
//! | [`hwctx`] | `ring`, `state`, `uqueue` |
//! | [`tlb`] | `state` |
//! | [`hooks`] | - |
//! | [`dump`] | `records`, `ring`, `state` |
//! | [`state`] | `queue`, `records`, `ring`, `sanlog`, `uqueue` |
//! | [`records`] | `ring` |
//! | [`sanlog`] | - |
//! | [`queue`] | - |
//! | [`uqueue`] | - |
//! | [`ring`] | - |
//!
//! * [`migrate`]: moves of buffer objects on the copy engine (the driver's
//!   own copy context), and a client's jobs held back while one moves.
//! * [`uqctl`]: user-mode queues: `UQ_CREATE`, `UQ_KICK`, the device's watch
//!   of their doorbells suspended and resumed around resets (its hook).
//! * [`reset`]: the hang check (its hook) and the reset ladder (engine →
//!   device → wedged), bans.
//! * [`fence`]: `WAIT`, `FENCE_EXPORT`, `FENCE` events.
//! * [`submit`]: `SUBMIT`, a job onto a context's engine through its queue.
//! * [`context`]: `CTX_CREATE`, `CTX_DESTROY`, `CTX_QUERY`, closing a file's
//!   contexts.
//! * [`sched`]: the job queue's scheduler: queued jobs to their rings when
//!   their dependencies signalled and the ring has room; the queue worker.
//! * [`bind`]: `VM_BIND_OPS` bind jobs and their queue.
//! * [`fault`]: `FAULT` and `ENGINE_ERROR` events.
//! * [`ras`]: `ECC_ERROR` events: retiring the page, the device's table of
//!   retired pages.
//! * [`sanitizer`]: the device sanitizer's reports (dmesg, debugfs,
//!   `SAN_REPORT`), bugs planted on purpose.
//! * [`coredump`]: devcoredumps: the device's capture read in chunks, the
//!   dump published, its history.
//! * [`hwctx`]: a context on the device: `CONTEXT_CREATE` and its rings, for
//!   context creation and the device reset.
//! * [`fwmon`]: the firmware monitor: a crashed or silent firmware
//!   (`FIRMWARE_CRASH`, heartbeats in `FW_STATUS`) recovered by a device
//!   reset and a new boot; repeated failures wedge the device.
//! * [`power`]: runtime power management: an idle device suspended
//!   (`POWER_SET D3HOT`) after `autosuspend_ms`, resumed at its next use.
//! * [`tlb`]: TLB invalidation of a range in every context of a file, after
//!   an unbind or when a slot's memory leaves the address space.
//! * [`hooks`]: the traits the blocks below reach the ones above through:
//!   the hang check, user-mode queues' watch (no I/O).
//! * [`dump`]: the driver's snapshot at a failure, taken under the state
//!   lock, and the devcoredump text (no I/O).
//! * [`state`]: the contexts table and a context's state machine, counters,
//!   logs; the block's locks and its control commands.
//! * [`records`]: what the state keeps of failures and what a snapshot
//!   holds: fault and reset logs, counters, the hang dump, pending and
//!   written devcoredumps (no I/O).
//! * [`sanlog`]: the device sanitizer's reports as the driver keeps them, the
//!   bug planted on purpose (no I/O).
//! * [`queue`]: a ring's job queue: jobs waiting in the KMD, oldest first (no
//!   I/O).
//! * [`uqueue`]: a user-mode queue as the driver keeps it: its ring and
//!   doorbell, watched or suspended, the hang check's view of its progress
//!   (no I/O).
//! * [`ring`]: KMD ring memory per device slot, the job list, ring space, the
//!   packets the driver writes (no I/O).
//!
//! Every block may also use the transport, the address spaces and the
//! hardware interface; this file, on top, dispatches the device's events to
//! the blocks.
//!
//! # Lock order
//!
//! Outer to inner; a lock is only taken while holding locks above it:
//!
//! 1. [`Gpu::ops`](state::Gpu::ops): context creation and destruction and
//!    the reset ladder, across their device commands. The hang check only
//!    try-locks it (a check that finds it held is skipped: the watchdog
//!    comes back); the interrupt threads never take it.
//!    A file's engine time (`Client::engine_time`, DRM fdinfo) comes next:
//!    under `ops` by `CTX_DESTROY`, alone by an fdinfo read; the state
//!    lock and the transport's locks are taken under it, nothing else.
//! 2. [`Gpu::state`](state::Gpu::state): contexts, rings, jobs, fences,
//!    counters. **Never held across a control-queue round trip**: every
//!    operation decides under it, drops it, talks to the device, and takes
//!    it again to record. The one command issued under it is a posted
//!    doorbell in a control slot reserved before the lock was taken, which
//!    never waits.
//! 3. A file's address space (`Client::vm`): taken under the state lock
//!    only by `SUBMIT` to check command buffers; otherwise alone (bind
//!    jobs take it with no GPU lock held, and drop it before their TLB
//!    invalidation).
//! 4. Reservation objects of BOs (`dma_resv`), one at a time: under the
//!    state lock by `SUBMIT`'s implicit synchronisation; GPUVM takes an
//!    address space's own under its `Client::vm`.
//! 5. The transport's locks (control: command serialisation, then queue
//!    state; events: event state), innermost. Fence locks (`dma_fence`
//!    spinlocks: callbacks, signalling) nest inside everything.
//! 6. The trace buffer's spinlock ([`crate::ktrace`]): under any of the
//!    above, only to append a record; nothing is taken under it, and it is
//!    never taken in a fence callback.
//!
//! Fence callbacks of the job queue's dependencies run in any context with
//! the fence's lock held: they only queue the GPU's work item, which runs
//! the scheduler in process context ([`sched`]).
//!
//! [`Gpu::dumping`](state::Gpu::dumping) serialises reads of device
//! captures (`CAPTURE_READ` round trips into one DMA buffer); it is taken
//! with no GPU lock held and only the transport's locks under it.
//!
//! While a reset runs (`GpuState::resetting`), `SUBMIT` sleeps instead of
//! writing rings: the reset writes every unfinished job again itself.

pub(crate) mod bind;
pub(crate) mod context;
pub(crate) mod coredump;
pub(crate) mod dump;
pub(crate) mod fault;
pub(crate) mod fence;
pub(crate) mod fwmon;
pub(crate) mod hooks;
pub(crate) mod hwctx;
pub(crate) mod migrate;
pub(crate) mod power;
pub(crate) mod queue;
pub(crate) mod ras;
pub(crate) mod records;
pub(crate) mod reset;
pub(crate) mod ring;
pub(crate) mod sanitizer;
pub(crate) mod sanlog;
pub(crate) mod sched;
pub(crate) mod state;
pub(crate) mod submit;
pub(crate) mod tlb;
pub(crate) mod uqctl;
pub(crate) mod uqueue;

pub(crate) use state::Gpu;

use crate::{event::Event, transport::events::EventSink};

impl EventSink for Gpu {
    fn event(&self, ev: Event) {
        match ev {
            Event::Fence {
                ctx_id,
                engine,
                seqno,
                va,
            } => self.on_fence_event(ctx_id, engine, seqno, va),
            Event::Fault {
                va,
                info,
                fault_id,
                packet_va,
                ..
            } => self.on_fault(va, info, fault_id, packet_va),
            Event::EngineError(e) => self.on_engine_error(&e),
            Event::Sanitizer {
                ctx_id,
                engine,
                check,
                packet_va,
                seq,
                va,
                ..
            } => self.on_sanitizer(seq, ctx_id, engine, check, packet_va, va),
            Event::EccError { ctx_id, va, pa, .. } => self.on_ecc_error(ctx_id, va, pa),
            Event::FirmwareCrash {
                code,
                ctx_id,
                engine,
                ..
            } => self.on_firmware_crash(code, ctx_id, engine),
            // Lost records may have been fences: waiters re-read the fence
            // values now rather than at their next periodic check.
            Event::EventsLost { .. } => self.wake(),
            // Recovery reads the reset results from the command replies.
            Event::ResetDone { .. } => {}
            // Kinds this driver does not act on: counted (debugfs
            // `status`, "unhandled").
            _ => self.hw.events.count_unhandled(),
        }
    }

    fn device_broken(&self) {
        self.device_gone();
    }
}
