//! Resets: `ENGINE_RESET`, forced context destroy, `DEVICE_RESET` and the
//! virtio reset.
//!
//! # Engine reset
//!
//! The control side queues a reset request and pokes the engine; the
//! engine stops at its next packet or chunk boundary (at once if idle —
//! there is no point where a reset must wait for guest-controlled work:
//! a chunk is at most 64 KiB, a walk at most four reads) and, on its own
//! thread, applies [`engine_reset`]:
//!
//! 1. the ring it was executing (the job *in flight*) loses all its
//!    unexecuted work — the packet in progress, its command buffers and
//!    everything up to the write pointer: its read pointer jumps to the
//!    write pointer and it becomes `IDLE`;
//! 2. every `STOPPED` or `FAULT_STALLED` ring of the engine is cleared the
//!    same way (pending faults are forgotten), and so is the ring of the
//!    command's `hung_ctx` on this engine whatever its state — a ring the
//!    driver found hung may be blocked in `SEM_WAIT` or waiting its turn
//!    rather than in flight;
//! 3. other rings keep their queued packets and run again after the reset;
//! 4. the engine's TLB is flushed;
//! 5. a `RESET_DONE` event names the engine, the context in flight
//!    (`CTX_NONE` if the engine was idle) and the read pointer where that
//!    ring stopped — the same values as the command's reply.
//!
//! # Device reset
//!
//! Every engine is reset silently (no events, no counts), then every
//! context and ring is removed, fault ids restart at 1, and the event FIFO
//! is emptied with sequence numbers restarting at 1, and the firmware is
//! back in its boot state (the driver loads it again). The `DEVICE_RESET`
//! command then posts `RESET_DONE` for engine `ALL` (event 1); a virtio
//! reset posts nothing. Counters survive both (they count since the device
//! process started).

use vgpu_hwif::event::Event;
use vgpu_hwif::proto::{engine, CTX_NONE};

use super::gpu::{Gpu, GpuState, Request, ResetReport, ENGINES};
use super::ring::RingState;

/// Why a reset could not be carried out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ResetError {
    /// No such engine.
    #[error("engine {0} does not exist")]
    BadEngine(u32),
    /// An engine thread is gone.
    #[error("engine {0} does not respond")]
    EngineLost(usize),
}

/// Applies an engine reset of engine `e` to the shared state (engine
/// thread, state lock held). `in_flight` is the context whose ring the
/// engine was executing. With `count`, the engine's and that context's
/// reset counters move.
pub fn engine_reset(
    st: &mut GpuState,
    e: u32,
    in_flight: Option<u32>,
    hung_ctx: Option<u32>,
    count: bool,
) -> ResetReport {
    let mut report = ResetReport {
        ctx_id: CTX_NONE,
        rptr: 0,
    };
    if let Some(id) = in_flight {
        if let Ok(c) = st.contexts.get_mut(id) {
            if count {
                c.stats.resets += 1;
            }
            if let Some(r) = c.ring_mut(e) {
                report = ResetReport {
                    ctx_id: id,
                    rptr: r.cursor.rptr,
                };
                r.discard_work();
            }
        }
    }
    if let Some(id) = hung_ctx.filter(|&h| Some(h) != in_flight) {
        if let Ok(c) = st.contexts.get_mut(id) {
            if let Some(r) = c.ring_mut(e) {
                r.discard_work();
            }
        }
    }
    for c in st.contexts.iter_mut() {
        if let Some(r) = c.ring_mut(e) {
            if matches!(
                r.state,
                RingState::Stopped { .. } | RingState::FaultStalled { .. }
            ) {
                r.discard_work();
            }
        }
    }
    if count {
        if let Some(es) = st.engines.get_mut(e as usize) {
            es.stats.resets += 1;
        }
    }
    report
}

/// Resets engine `e` on behalf of the control side: queues the request,
/// waits until the engine has applied it, returns what was in flight.
pub fn reset_engine(gpu: &Gpu, e: u32, hung_ctx: Option<u32>) -> Result<ResetReport, ResetError> {
    if e >= engine::COUNT {
        return Err(ResetError::BadEngine(e));
    }
    let ei = e as usize;
    let mut st = gpu.lock();
    let id = gpu.submit(
        &mut st,
        ei,
        Request::Reset {
            only_ctx: None,
            hung_ctx,
            silent: false,
        },
    );
    let (mut st, alive) = gpu.wait_served(st, ei, id);
    if !alive {
        return Err(ResetError::EngineLost(ei));
    }
    let es = st.engines.get_mut(ei).ok_or(ResetError::BadEngine(e))?;
    let report = es
        .reset_reports
        .iter()
        .position(|(rid, _)| *rid == id)
        .map(|i| es.reset_reports.swap_remove(i).1)
        .unwrap_or(ResetReport {
            ctx_id: CTX_NONE,
            rptr: 0,
        });
    Ok(report)
}

/// Returns the device to its power-on state (see the module
/// documentation); posts `RESET_DONE` for engine `ALL` if `announce`.
/// Returns what the reset did to VRAM ([`vgpu_hwif::vram::state`]).
pub fn reset_device(gpu: &Gpu, announce: bool) -> Result<u32, ResetError> {
    reset_device_with(gpu, announce, None)
}

/// [`reset_device`] with VRAM kept or lost as `vram` says instead of the
/// configured policy (a power state's power-on).
pub fn reset_device_with(
    gpu: &Gpu,
    announce: bool,
    vram: Option<crate::config::VramOnReset>,
) -> Result<u32, ResetError> {
    // Watches end with their contexts (taken before the state lock: see
    // the watcher's lock order).
    gpu.watch.clear();
    let mut st = gpu.lock();
    for c in st.contexts.iter_mut() {
        c.dying = true;
    }
    let mut ids = [0u64; ENGINES];
    for (e, id) in ids.iter_mut().enumerate() {
        *id = gpu.submit(
            &mut st,
            e,
            Request::Reset {
                only_ctx: None,
                hung_ctx: None,
                silent: true,
            },
        );
    }
    let mut lost = None;
    for (e, id) in ids.into_iter().enumerate() {
        let (g, alive) = gpu.wait_served(st, e, id);
        st = g;
        if !alive {
            lost = Some(e);
        }
    }
    st.contexts.clear();
    st.next_fault_id = 1;
    st.device_resets += 1;
    for es in st.engines.iter_mut() {
        es.reset_reports.clear();
        es.rr_last = 0;
        es.interrupted = None;
    }
    gpu.events().reset();
    gpu.inject.on_reset(gpu.clock.now_ns(), None);
    // The driver's work is gone; its memory declarations stay (the
    // virtio reset, the driver leaving, clears those too).
    gpu.sanitizer.device_reset(false);
    // The engines are stopped: nothing writes VRAM while it is lost.
    let vram = match vram {
        Some(policy) => gpu.vram.apply(policy),
        None => gpu.vram.on_device_reset(),
    };
    // The firmware is gone with the power-on state: the driver loads it
    // again (a preloaded device runs its image again).
    gpu.firmware.power_on(gpu.clock.now_ns());
    if announce {
        gpu.events().post(
            Event::ResetDone {
                engine: engine::ALL,
                ctx_id: CTX_NONE,
                rptr: 0,
            },
            gpu.clock.now_ns(),
        );
    }
    drop(st);
    gpu.kick_transport();
    match lost {
        Some(e) => Err(ResetError::EngineLost(e)),
        None => Ok(vram),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::context::Context;
    use crate::core::ring::Ring;

    fn state_with_rings() -> GpuState {
        let mut st = GpuState::new();
        for id in 0..4 {
            let mut c = Context::new(id, 1, 0, 0x1000).unwrap();
            let mut r = Ring::new(0, 0x10_0000, 4096, 0x20_0000);
            r.wptr = 256;
            r.cursor.rptr = 64;
            r.state = match id {
                0 => RingState::Running,
                1 => RingState::Stopped {
                    error: 2,
                    error_rptr: 64,
                },
                2 => RingState::FaultStalled { fault_id: 7 },
                _ => RingState::Ready,
            };
            c.rings[0] = Some(r);
            st.contexts.insert(c).unwrap();
        }
        st
    }

    #[test]
    fn engine_reset_drops_in_flight_and_clears_stopped_rings() {
        let mut st = state_with_rings();
        let rep = engine_reset(&mut st, 0, Some(0), None, true);
        assert_eq!(
            rep,
            ResetReport {
                ctx_id: 0,
                rptr: 64
            }
        );
        for id in 0..3 {
            let r = st.contexts.get(id).unwrap().ring(0).unwrap();
            assert_eq!((r.state, r.cursor.rptr), (RingState::Idle, 256), "ctx {id}");
            assert!(r.status_dirty);
        }
        let innocent = st.contexts.get(3).unwrap().ring(0).unwrap();
        assert_eq!(
            (innocent.state, innocent.cursor.rptr),
            (RingState::Ready, 64)
        );
        assert_eq!(st.engines[0].stats.resets, 1);
        assert_eq!(st.contexts.get(0).unwrap().stats.resets, 1);
        assert_eq!(st.contexts.get(3).unwrap().stats.resets, 0);
    }

    #[test]
    fn idle_engine_reset_reports_no_context() {
        let mut st = state_with_rings();
        let rep = engine_reset(&mut st, 1, None, None, false);
        assert_eq!(
            rep,
            ResetReport {
                ctx_id: CTX_NONE,
                rptr: 0
            }
        );
        assert_eq!(st.engines[1].stats.resets, 0);
        // Engine 1 has no rings: engine 0's stopped ring is untouched.
        assert!(matches!(
            st.contexts.get(1).unwrap().ring(0).unwrap().state,
            RingState::Stopped { .. }
        ));
    }
}
