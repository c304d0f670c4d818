// SPDX-License-Identifier: GPL-2.0

//! The GPU: contexts, KMD-owned rings, submission, fences, page faults,
//! hangs and resets — the driver-side twin of the device's `core/`.
//!
//! One block per file, each opening with what it owns:
//!
//! | file | block |
//! |------|-------|
//! | [`ring`] | KMD ring memory per device slot, the job list, ring space, the packets the driver writes (no I/O) |
//! | [`dump`] | the hang dump (no I/O) |
//! | [`state`] | the contexts table and a context's state machine, counters, logs; the block's locks |
//! | [`context`] | `CTX_CREATE`, `CTX_DESTROY`, `CTX_QUERY`, closing a file's contexts, TLB invalidation after unbind |
//! | [`submit`] | `SUBMIT` |
//! | [`fence`] | `WAIT`, `FENCE_EXPORT`, `FENCE` events |
//! | [`fault`] | `FAULT` and `ENGINE_ERROR` events |
//! | [`reset`] | the hang check and the reset ladder (engine → device → wedged), bans |
//!
//! Dependencies point down that table (and to the transport, the address
//! spaces and the hardware interface); this file, on top, dispatches the
//! device's events to the blocks.
//!
//! # Lock order
//!
//! Outer to inner; a lock is only taken while holding locks above it:
//!
//! 1. [`Gpu::ops`](state::Gpu::ops): context creation and destruction and
//!    the reset ladder, across their device commands. The hang check only
//!    try-locks it (a check that finds it held is skipped: the watchdog
//!    comes back); the interrupt threads never take it.
//! 2. [`Gpu::state`](state::Gpu::state): contexts, rings, jobs, fences,
//!    counters. **Never held across a control-queue round trip**: every
//!    operation decides under it, drops it, talks to the device, and takes
//!    it again to record. The one command issued under it is a posted
//!    doorbell in a control slot reserved before the lock was taken, which
//!    never waits.
//! 3. A file's address space (`Client::vm`): taken under the state lock
//!    only by `SUBMIT` to check command buffers; otherwise alone.
//! 4. The transport's locks (control: command serialisation, then queue
//!    state; events: event state), innermost.
//!
//! While a reset runs (`GpuState::resetting`), `SUBMIT` sleeps instead of
//! writing rings: the reset writes every unfinished job again itself.

pub(crate) mod context;
pub(crate) mod dump;
pub(crate) mod fault;
pub(crate) mod fence;
pub(crate) mod reset;
pub(crate) mod ring;
pub(crate) mod state;
pub(crate) mod submit;

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
                va, info, fault_id, ..
            } => self.on_fault(va, info, fault_id),
            Event::EngineError {
                ctx_id,
                engine,
                code,
                ..
            } => self.on_engine_error(ctx_id, engine, code),
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
        self.wake();
    }
}
