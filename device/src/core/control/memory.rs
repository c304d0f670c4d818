//! The memory commands: `TLB_INVALIDATE`, served by every engine it names
//! before the reply (no stale translation survives an acknowledged
//! invalidation), and the retired pages (`RAS_RETIRE`, `RAS_QUERY`).

use vgpu_hwif::proto::{engine, RasQueryReply, ReplyHeader};

use super::{CommandError, Reply};
use crate::core::gpu::{Gpu, Request, ENGINES};
use crate::core::ras::RasTable;
use crate::core::reset::ResetError;

/// `TLB_INVALIDATE`: `[va, va + size)` of context `ctx_id` on the engines
/// of `engine_mask` (0: every engine) and in the doorbell watcher.
pub(super) fn tlb_invalidate(
    gpu: &Gpu,
    ctx_id: u32,
    engine_mask: u32,
    va: u64,
    size: u64,
) -> Result<(), CommandError> {
    let all = (1u32 << engine::COUNT) - 1;
    if engine_mask & !all != 0 {
        return Err(CommandError::Invalid("engine mask names a missing engine"));
    }
    if va.checked_add(size).is_none() {
        return Err(CommandError::Invalid("invalidation range wraps"));
    }
    let mask = if engine_mask == 0 { all } else { engine_mask };
    // The watcher's translations are TLB entries of every
    // engine (its lock is never taken under the state lock).
    gpu.watch.invalidate(ctx_id, va, size);
    let mut st = gpu.lock();
    st.contexts.get(ctx_id)?;
    let mut ids = [0u64; ENGINES];
    for (e, id) in ids.iter_mut().enumerate() {
        if mask & (1 << e) != 0 {
            *id = gpu.submit(
                &mut st,
                e,
                Request::Invalidate {
                    asid: ctx_id,
                    va,
                    size,
                },
            );
        }
    }
    for (e, id) in ids.into_iter().enumerate() {
        let (g, alive) = gpu.wait_served(st, e, id);
        st = g;
        if !alive {
            return Err(ResetError::EngineLost(e).into());
        }
    }
    Ok(())
}

/// `RAS_RETIRE`: the driver retires page `pa`.
pub(super) fn ras_retire(ras: &mut RasTable, pa: u64) -> Result<(), CommandError> {
    ras.retire(pa)?;
    log::warn!("page {pa:#x} retired by the driver ({} retired)", ras.len());
    Ok(())
}

/// `RAS_QUERY`: the retired pages from the `start`-th on.
pub(super) fn ras_query(ras: &RasTable, start: u32, ok: ReplyHeader) -> Reply {
    let (pages, count) = ras.query(start);
    Reply::from_pod(&RasQueryReply {
        hdr: ok,
        total: ras.len(),
        count,
        pages,
    })
}
