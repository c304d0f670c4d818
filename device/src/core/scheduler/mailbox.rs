//! The engine's mailbox: requests that only the engine's thread may carry
//! out, left by the control processor and the resets under the state lock
//! (an engine reset, a TLB invalidation, a capture), served at the top of
//! each pass of the engine loop; and dropping what the command processor
//! keeps for rings that no longer need it (loaded dispatches, the
//! sanitizer's record of command buffers).

use std::sync::PoisonError;

use vgpu_hwif::event::Event;

use crate::core::capture_ctl;
use crate::core::cp::CommandProcessor;
use crate::core::gpu::{Gpu, GpuState, Request};
use crate::core::post;
use crate::core::reset::engine_reset;
use crate::core::ring::{Op, RingState};
use crate::core::telemetry::{TraceKind, TraceRecord};

/// Serves engine `e`'s mailbox (state lock held).
pub fn serve_requests(gpu: &Gpu, st: &mut GpuState, e: u32, cp: &mut CommandProcessor) {
    let ei = e as usize;
    loop {
        let Some(es) = st.engines.get_mut(ei) else {
            return;
        };
        let Some((id, req)) = es.requests.pop_front() else {
            break;
        };
        match req {
            Request::Reset {
                only_ctx,
                hung_ctx,
                silent,
            } => {
                let in_flight = es.interrupted.take();
                let applies = only_ctx.is_none() || only_ctx == in_flight;
                if applies {
                    let report = engine_reset(st, e, in_flight, hung_ctx, !silent);
                    cp.flush_tlbs();
                    gpu.inject.on_reset(gpu.clock.now_ns(), Some(e));
                    if !silent {
                        let now = gpu.clock.now_ns();
                        if let Some(t) = gpu.trace.as_ref() {
                            let rec = TraceRecord {
                                kind: TraceKind::Reset,
                                name: "reset",
                                engine: e,
                                ctx: report.ctx_id,
                                ts_ns: now,
                                dur_ns: 0,
                                packet_va: 0,
                                arg: u64::from(report.rptr),
                            };
                            t.lock()
                                .unwrap_or_else(PoisonError::into_inner)
                                .extend(&[rec]);
                        }
                        post::event(
                            gpu,
                            Event::ResetDone {
                                engine: e,
                                ctx_id: report.ctx_id,
                                rptr: report.rptr,
                            },
                        );
                    }
                    if let Some(es) = st.engines.get_mut(ei) {
                        es.reset_reports.push((id, report));
                    }
                }
            }
            Request::Capture { ctx, reason } => {
                capture_ctl::on_request(gpu, st, cp, e, id, ctx, reason);
            }
            Request::Invalidate { asid, va, size } => {
                // Buffers of rings stopped or reset since are not checked.
                prune_san_frames(st, e, cp);
                let mut san_events = Vec::new();
                gpu.inject
                    .on_invalidate(gpu.clock.now_ns(), e, asid, |pick| match pick {
                        Some(pick) => cp.invalidate_tlbs_keep_one(asid, va, size, pick),
                        None => {
                            san_events = cp.invalidate_tlbs_served(
                                &gpu.memory(),
                                gpu.clock.now_ns(),
                                &gpu.inject,
                                asid,
                                va,
                                size,
                            );
                            None
                        }
                    });
                for ev in san_events {
                    post::event(gpu, ev);
                }
            }
        }
        if let Some(es) = st.engines.get_mut(ei) {
            es.completed = id;
        }
    }
    if let Some(es) = st.engines.get_mut(ei) {
        es.interrupted = None;
    }
    gpu.done.notify_all();
}

/// Drops the command processor's loaded dispatches whose ring no longer
/// holds them (reset, destroyed, or a new context with the same id).
pub fn prune_dispatches(st: &GpuState, e: u32, cp: &mut CommandProcessor) {
    if cp.loaded_dispatches() == 0 {
        return;
    }
    cp.retain_dispatches(|ctx, token| {
        st.contexts
            .get(ctx)
            .ok()
            .and_then(|c| c.ring(e))
            .and_then(|r| r.cursor.pending)
            .is_some_and(|p| matches!(p.op, Op::Dispatch(d) if d.token == token))
    });
}

/// Forgets the sanitizer's record of command buffers that engine `e` no
/// longer executes: their ring was stopped by an error, reset, destroyed,
/// or has moved on.
pub fn prune_san_frames(st: &GpuState, e: u32, cp: &mut CommandProcessor) {
    cp.retain_san_frames(|ctx| {
        st.contexts
            .get(ctx)
            .ok()
            .and_then(|c| c.ring(e))
            .filter(|r| !matches!(r.state, RingState::Stopped { .. }))
            .map(|r| {
                r.cursor
                    .frames
                    .iter()
                    .take(r.cursor.depth as usize)
                    .map(|f| (f.va, f.size))
                    .collect()
            })
            .unwrap_or_default()
    });
}
