//! The commands that look into the device: `QUERY_STATS`, captures
//! (`CAPTURE`, `CAPTURE_READ`), and the driver sanitizer's (`SAN_MEM`
//! declares or gives back the driver's pages, `SAN_REPORT` reads a report).

use vgpu_hwif::proto::{
    stats_kind, CaptureReadReply, CaptureReply, ReplyHeader, SAN_MEM_OWN, SAN_MEM_OWN_TABLES,
    SAN_MEM_RANGES,
};
use vgpu_hwif::sanitize::SanRange;

use super::{CommandError, Reply};
use crate::core::capture_ctl as capture;
use crate::core::gpu::Gpu;
use crate::core::sanitize::owned::{OwnError, Tag};
use crate::core::telemetry::Stats;

/// `QUERY_STATS`: the counters of an engine, a context or the device.
pub(super) fn query_stats(
    gpu: &Gpu,
    kind: u32,
    id: u32,
    ok: ReplyHeader,
) -> Result<Reply, CommandError> {
    let st = gpu.lock();
    let stats = match kind {
        stats_kind::ENGINE => {
            st.engines
                .get(id as usize)
                .ok_or(CommandError::Invalid("no such engine"))?
                .stats
        }
        stats_kind::CONTEXT => st.contexts.get(id)?.stats,
        stats_kind::CONTEXT_ENGINE => {
            let (ctx_id, e) = stats_kind::split_context_engine_id(id);
            st.contexts
                .get(ctx_id)?
                .ring(e)
                .ok_or(CommandError::Invalid(
                    "the context has no ring on that engine",
                ))?
                .stats
        }
        stats_kind::DEVICE => {
            if id != 0 {
                return Err(CommandError::Invalid("device stats take id 0"));
            }
            let mut total = Stats::default();
            for es in &st.engines {
                total.add(&es.stats);
            }
            total.resets = total.resets.saturating_add(st.device_resets);
            total
        }
        _ => return Err(CommandError::Invalid("unknown stats kind")),
    };
    let mut reply = stats.to_reply(kind, id);
    reply.hdr = ok;
    Ok(Reply::from_pod(&reply))
}

/// `CAPTURE`: a capture of engine `e`'s ring of context `ctx_id`.
pub(super) fn capture(
    gpu: &Gpu,
    ctx_id: u32,
    e: u32,
    reason: u32,
    ok: ReplyHeader,
) -> Result<Reply, CommandError> {
    let c = capture::request(gpu, ctx_id, e, reason)?;
    Ok(Reply::from_pod(&CaptureReply {
        hdr: ok,
        capture_id: c.id,
        size: u32::try_from(c.bytes.len()).unwrap_or(u32::MAX),
    }))
}

/// `CAPTURE_READ`: `len` bytes from `offset` of capture `capture_id`
/// into guest memory at `buf_pa`.
pub(super) fn capture_read(
    gpu: &Gpu,
    capture_id: u32,
    ctx_id: u32,
    offset: u32,
    len: u32,
    buf_pa: u64,
    ok: ReplyHeader,
) -> Result<Reply, CommandError> {
    let (c, written) = capture::read_into(gpu, capture_id, ctx_id, offset, len, buf_pa)?;
    Ok(Reply::from_pod(&CaptureReadReply {
        hdr: ok,
        capture_id: c.id,
        size: u32::try_from(c.bytes.len()).unwrap_or(u32::MAX),
        written,
        reason: c.reason,
        ctx_id: c.ctx,
        engine: c.engine,
    }))
}

/// `SAN_MEM`: the first `count` of `ranges` declared as the driver's
/// (`SAN_MEM_OWN`), as its page tables' (`SAN_MEM_OWN_TABLES`), or given
/// back, tagged with the object they belong to (`tag`); every range is
/// checked before any is applied.
pub(super) fn san_mem(
    gpu: &Gpu,
    op: u32,
    count: u32,
    ranges: &[SanRange; SAN_MEM_RANGES],
    tag: Tag,
) -> Result<(), CommandError> {
    if count == 0 || count as usize > SAN_MEM_RANGES {
        return Err(CommandError::Invalid("SAN_MEM count out of range"));
    }
    let mem = gpu.memory();
    for r in ranges.iter().take(count as usize) {
        if r.size == 0 || !crate::core::mmu::in_ram(&mem, r.pa, r.size) {
            return Err(CommandError::Invalid("SAN_MEM range outside guest RAM"));
        }
    }
    for r in ranges.iter().take(count as usize) {
        let shared = &gpu.sanitizer.shared;
        let res = match op {
            SAN_MEM_OWN => shared.own_tagged(r.pa, r.size, false, tag),
            SAN_MEM_OWN_TABLES => shared.own_tagged(r.pa, r.size, true, tag),
            _ => shared.release_tagged(r.pa, r.size, tag, gpu.clock.now_ns()),
        };
        match res {
            Ok(()) => {}
            Err(e @ OwnError::Misaligned { .. }) => {
                log::debug!("SAN_MEM: {e}");
                return Err(CommandError::Invalid("SAN_MEM range not 4 KiB aligned"));
            }
            Err(e @ OwnError::NotOwned { .. }) => {
                log::warn!("sanitizer: SAN_MEM release: {e}");
                return Err(CommandError::NotDeclared);
            }
        }
    }
    Ok(())
}
