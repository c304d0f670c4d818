//! The context commands: `CONTEXT_CREATE`, `CONTEXT_DESTROY` (refused
//! with work in flight unless forced; the sanitizer is told of both, and
//! of a refusal), and `FAULT_RESUME`, which retries or aborts a context's
//! stalled fault.

use vgpu_hwif::packet::EngineError;
use vgpu_hwif::proto::{engine, FAULT_RESUME_ABORT, FAULT_RESUME_RETRY};

use super::CommandError;
use crate::core::context::{Context, ContextError};
use crate::core::gpu::{Gpu, Request, ENGINES};
use crate::core::post;
use crate::core::reset::ResetError;
use crate::core::ring::RingState;
use crate::core::sanitize_hooks as hooks;

/// `CONTEXT_CREATE`.
pub(super) fn create(
    gpu: &Gpu,
    ctx_id: u32,
    priority: u32,
    flags: u32,
    pt_root: u64,
) -> Result<(), CommandError> {
    // A virtual function owns contexts `0..max_contexts()` only.
    if ctx_id >= gpu.max_contexts() {
        return Err(ContextError::BadId(ctx_id).into());
    }
    let ctx = Context::new(ctx_id, priority, flags, pt_root)?;
    gpu.lock().contexts.insert(ctx)?;
    if gpu.sanitizer.enabled() {
        gpu.sanitizer
            .context_changed(ctx_id, true, gpu.clock.now_ns());
    }
    Ok(())
}

/// `CONTEXT_DESTROY` ([`destroy_context`]), with the sanitizer told of
/// the outcome: a destroy refused for work in flight is checked, a done
/// one forgets the context.
pub(super) fn destroy(gpu: &Gpu, ctx_id: u32, force: bool) -> Result<(), CommandError> {
    let r = destroy_context(gpu, ctx_id, force);
    match r {
        Err(CommandError::Context(ContextError::Busy(_))) if gpu.sanitizer.enabled() => {
            let st = gpu.lock();
            let mut evs = Vec::new();
            for e in 0..engine::COUNT {
                evs.extend(hooks::on_destroy_refused(gpu, &st, ctx_id, e, false));
            }
            drop(st);
            evs.into_iter().for_each(|ev| {
                post::event(gpu, ev);
            });
        }
        Ok(()) if gpu.sanitizer.enabled() => {
            gpu.sanitizer
                .context_changed(ctx_id, false, gpu.clock.now_ns());
        }
        _ => {}
    }
    r
}

/// `CONTEXT_DESTROY`: refuses a context with work in flight unless
/// `force`; a forced destroy first resets every engine executing the
/// context. The context's TLB entries are flushed on every engine.
pub fn destroy_context(gpu: &Gpu, id: u32, force: bool) -> Result<(), CommandError> {
    let mut st = gpu.lock();
    let ctx = st.contexts.get_mut(id)?;
    if ctx.has_work() && !force {
        return Err(ContextError::Busy(id).into());
    }
    ctx.dying = true;
    let mut waits = Vec::with_capacity(2 * ENGINES);
    for e in 0..ENGINES {
        let running = st
            .engines
            .get(e)
            .and_then(|es| es.current)
            .is_some_and(|(c, _)| c == id);
        if running {
            let rid = gpu.submit(
                &mut st,
                e,
                Request::Reset {
                    only_ctx: Some(id),
                    hung_ctx: None,
                    silent: false,
                },
            );
            waits.push((e, rid));
        }
        let rid = gpu.submit(
            &mut st,
            e,
            Request::Invalidate {
                asid: id,
                va: 0,
                size: 0,
            },
        );
        waits.push((e, rid));
    }
    let mut lost = None;
    for (e, rid) in waits {
        let (g, alive) = gpu.wait_served(st, e, rid);
        st = g;
        if !alive {
            lost = Some(e);
        }
        if let Some(es) = st.engines.get_mut(e) {
            es.reset_reports.retain(|(r, _)| *r != rid);
        }
    }
    st.contexts.remove(id);
    drop(st);
    gpu.watch.forget(id, None);
    match lost {
        Some(e) => Err(ResetError::EngineLost(e).into()),
        None => Ok(()),
    }
}

/// `FAULT_RESUME`: the ring stalled on fault `fault_id` of context
/// `ctx_id` is made ready again (retry; a higher priority than the
/// engine's running ring preempts it) or stopped with `PAGE_FAULT`
/// (abort).
pub(super) fn fault_resume(
    gpu: &Gpu,
    ctx_id: u32,
    action: u32,
    fault_id: u64,
) -> Result<(), CommandError> {
    if action != FAULT_RESUME_RETRY && action != FAULT_RESUME_ABORT {
        return Err(CommandError::Invalid("unknown FAULT_RESUME action"));
    }
    let mut st = gpu.lock();
    let current: Vec<Option<u32>> = st
        .engines
        .iter()
        .map(|es| es.current.map(|(_, p)| p))
        .collect();
    let ctx = st.contexts.get_mut(ctx_id)?;
    let priority = ctx.priority;
    let found = ctx
        .rings
        .iter_mut()
        .flatten()
        .find(|r| matches!(r.state, RingState::FaultStalled { fault_id: f } if f == fault_id));
    let Some(r) = found else {
        return Err(CommandError::NoSuchFault {
            ctx: ctx_id,
            fault_id,
        });
    };
    let e = r.engine as usize;
    if action == FAULT_RESUME_RETRY {
        r.state = RingState::Ready;
        if current
            .get(e)
            .copied()
            .flatten()
            .is_some_and(|p| priority > p)
        {
            gpu.poke(e);
        }
    } else {
        r.state = RingState::Stopped {
            error: EngineError::PageFault as u32,
            error_rptr: r.cursor.rptr,
        };
    }
    r.status_dirty = true;
    gpu.wake_engine(e);
    Ok(())
}
