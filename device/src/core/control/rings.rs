//! The ring commands: `RING_CREATE` (checked against the generation's VA
//! space; the engine writes the first status block) and `RING_DESTROY`
//! (refused while the ring has work, which the sanitizer checks). The
//! doorbell commands are the doorbell block's.

use vgpu_hwif::proto::engine;

use super::CommandError;
use crate::core::gpu::Gpu;
use crate::core::post;
use crate::core::ring::{self, Ring, RingError};
use crate::core::sanitize_hooks as hooks;

/// `RING_CREATE`: engine `e`'s ring of context `ctx_id`.
pub(super) fn create(
    gpu: &Gpu,
    ctx_id: u32,
    e: u32,
    size: u32,
    ring_va: u64,
    status_va: u64,
) -> Result<(), CommandError> {
    let mut st = gpu.lock();
    let ctx = st.contexts.get_mut(ctx_id)?;
    ring::check_create(e, size, ring_va, status_va, gpu.cfg.va_bits)?;
    let slot = ctx
        .rings
        .get_mut(e as usize)
        .ok_or(RingError::BadEngine(e))?;
    if slot.is_some() {
        return Err(RingError::Exists(ctx_id, e).into());
    }
    *slot = Some(Ring::new(e, ring_va, size, status_va));
    if gpu.sanitizer.enabled() {
        gpu.sanitizer.state().rings.remove(&(ctx_id, e));
    }
    // The engine writes the initial status block.
    gpu.wake_engine(e as usize);
    Ok(())
}

/// `RING_DESTROY`: engine `e`'s ring of context `ctx_id`, if idle.
pub(super) fn destroy(gpu: &Gpu, ctx_id: u32, e: u32) -> Result<(), CommandError> {
    let mut st = gpu.lock();
    let ctx = st.contexts.get_mut(ctx_id)?;
    if e >= engine::COUNT {
        return Err(RingError::BadEngine(e).into());
    }
    let slot = ctx
        .rings
        .get_mut(e as usize)
        .ok_or(RingError::BadEngine(e))?;
    match slot {
        None => Err(RingError::NotFound(ctx_id, e).into()),
        Some(r) if r.busy() => {
            let evs = hooks::on_destroy_refused(gpu, &st, ctx_id, e, true);
            drop(st);
            evs.into_iter().for_each(|ev| {
                post::event(gpu, ev);
            });
            Err(RingError::Busy(ctx_id, e).into())
        }
        Some(_) => {
            *slot = None;
            drop(st);
            gpu.watch.forget(ctx_id, Some(e));
            Ok(())
        }
    }
}
