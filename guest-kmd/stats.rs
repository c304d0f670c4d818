// SPDX-License-Identifier: GPL-2.0

//! Status for tools: the snapshots and counters `DRM_IOCTL_VGPU_QUERY_STATS`
//! and debugfs `stats` report, read from the blocks that keep them.
//!
//! * GEM memory: the device's and each file's [`crate::gem::MemAccount`].
//! * Page-table bytes: the tables taken out of the device's pool
//!   ([`crate::ptpool`]), including the KMD's own tables for rings.
//! * The GPU block's counters and every context of every file with its
//!   fence progress ([`snapshot`], read under the GPU state lock).
//! * The device's counters (`QUERY_STATS` control commands: the device,
//!   each engine, each context).
//!
//! A file's fdinfo ([`show_fdinfo`], Documentation/gpu/drm-usage-stats.rst)
//! reads the same sources for one client: its engine time
//! ([`crate::file::EngineTime`]) and its memory.
//!
//! Errors of `QUERY_STATS`: `EINVAL` for non-zero `flags`/`pad` or
//! `num_contexts` above `VGPU_STATS_MAX_CONTEXTS`; `EFAULT` when the context
//! array cannot be written; `ENODEV` once the device is unbound; `EIO` when a
//! usable device does not answer a `QUERY_STATS` command. A wedged (or
//! broken) device is not asked: the call succeeds with `wedged = 1`, the
//! KMD's figures, and the device's counters left zero, so that a status tool
//! can still show what happened.

use crate::{
    device::Vgpu,
    ffi::monotonic_ns,
    file::Client,
    gpu::{
        ring::ENGINES,
        Gpu, //
    },
    proto::{
        stats_kind,
        Command,
        StatsReply, //
    },
    uarray::{
        self,
        UCtxStats, //
    },
};
use kernel::{
    drm::file::FdinfoPrinter,
    prelude::*,
    sync::Arc,
    uapi, //
};

/// A context as `QUERY_STATS` and debugfs `stats` list it.
pub(crate) struct CtxSnapshot {
    /// Device slot.
    pub(crate) hw: u32,
    /// The id `CTX_CREATE` returned.
    pub(crate) handle: u32,
    pub(crate) client: Arc<Client>,
    pub(crate) pid: u32,
    pub(crate) priority: u32,
    pub(crate) engines: u32,
    pub(crate) reset_status: u32,
    pub(crate) state: u32,
    pub(crate) hangs: u32,
    pub(crate) faults: u32,
    pub(crate) engine_error: u32,
    /// Where the first error happened.
    pub(crate) error_at: Option<crate::gpu::state::ErrorAt>,
    /// Sanitizer reports about it.
    pub(crate) san_reports: u32,
    /// Last seqno submitted per engine (0: none).
    pub(crate) submitted: [u64; ENGINES],
    /// Last seqno signalled per engine.
    pub(crate) completed: [u64; ENGINES],
}

/// The KMD's device-wide counters.
pub(crate) struct KmdCounters {
    pub(crate) engine_resets: u64,
    pub(crate) device_resets: u64,
    pub(crate) hangs: u64,
    pub(crate) faults: u64,
    pub(crate) wedged: bool,
}

/// Every context of every file (appended to `out`, by device slot) and the
/// GPU block's counters, read under its state lock.
///
/// # Errors
///
/// `ENOMEM`.
pub(crate) fn snapshot(gpu: &Gpu, out: &mut KVec<CtxSnapshot>) -> Result<KmdCounters> {
    let mem = gpu.slots().ok();
    let g = gpu.state.lock();
    for (i, s) in g.slots.iter().enumerate() {
        let Some(c) = s else { continue };
        if c.destroying {
            continue;
        }
        let mut submitted = [0; ENGINES];
        let mut completed = [0; ENGINES];
        for (e, r) in c.rings.iter().enumerate() {
            if !r.present {
                continue;
            }
            let fence = mem.map_or(0, |m| m.fence_value(i as u32, e));
            submitted[e] = r.next_seqno - 1;
            completed[e] = r.completed.max(fence.min(submitted[e]));
        }
        // A user-mode queue: the KMD submits nothing; its ring's last fence.
        if let Some(q) = &c.uq {
            if let (Some(m), Some(done)) = (mem, completed.get_mut(q.engine)) {
                *done = m.status(i as u32, q.engine).last_fence;
            }
        }
        out.push(
            CtxSnapshot {
                hw: i as u32,
                handle: c.handle,
                client: c.client.clone(),
                pid: c.pid,
                priority: c.priority,
                engines: c.engine_mask | c.uq.as_ref().map_or(0, |q| 1 << q.engine),
                reset_status: c.reset_status,
                state: c.state_bits(),
                hangs: c.hangs,
                faults: c.faults,
                engine_error: c.engine_error,
                error_at: c.error_at,
                san_reports: c.san_reports,
                submitted,
                completed,
            },
            GFP_KERNEL,
        )?;
    }
    let k = &g.counters;
    Ok(KmdCounters {
        engine_resets: k.engine_resets,
        device_resets: k.device_resets,
        hangs: k.hangs,
        faults: k.faults,
        wedged: g.wedged,
    })
}

fn counters(r: &StatsReply) -> uapi::drm_vgpu_counters {
    uapi::drm_vgpu_counters {
        busy_ns: r.busy_ns,
        packets: r.packets,
        bytes: r.bytes,
        faults: r.faults,
        errors: r.errors,
        resets: r.resets,
        fences: r.fences,
        tlb_hits: r.tlb_hits,
        tlb_misses: r.tlb_misses,
        workgroups: r.workgroups,
        lane_ops: r.lane_ops,
        cycles: r.cycles,
    }
}

const ZERO: uapi::drm_vgpu_counters = uapi::drm_vgpu_counters {
    busy_ns: 0,
    packets: 0,
    bytes: 0,
    faults: 0,
    errors: 0,
    resets: 0,
    fences: 0,
    tlb_hits: 0,
    tlb_misses: 0,
    workgroups: 0,
    lane_ops: 0,
    cycles: 0,
};

/// `c` as the uAPI's `struct drm_vgpu_ctx_stats`.
fn ctx_stats(
    c: &CtxSnapshot,
    mem_bytes: u64,
    vram_bytes: u64,
    counters: uapi::drm_vgpu_counters,
) -> UCtxStats {
    let at = c.error_at.unwrap_or_default();
    UCtxStats(uapi::drm_vgpu_ctx_stats {
        ctx_id: c.handle,
        pid: c.pid,
        priority: c.priority,
        engines: c.engines,
        reset_status: c.reset_status,
        state: c.state,
        hangs: c.hangs,
        faults: c.faults,
        mem_bytes,
        submitted: c.submitted,
        completed: c.completed,
        counters,
        engine_error: c.engine_error,
        error_engine: at.engine,
        error_header: at.header,
        error_cmd_index: at.cmd_index.unwrap_or(uapi::VGPU_CMD_INDEX_NONE),
        error_packet_va: at.packet_va,
        error_seqno: at.seqno,
        error_cmd_offset: at.cmd_offset,
        san_reports: c.san_reports,
        vram_bytes,
    })
}

/// One `QUERY_STATS` control command.
fn device_stats(v: &Vgpu, kind: u32, id: u32) -> Result<uapi::drm_vgpu_counters> {
    let r: StatsReply = v.hw.command(Command::QueryStats { kind, id })?.get()?;
    if r.kind != kind || r.id != id {
        return Err(crate::errno::eproto());
    }
    Ok(counters(&r))
}

/// `DRM_IOCTL_VGPU_QUERY_STATS` (see the module documentation for errors).
pub(crate) fn query_stats(v: &Vgpu, a: &mut uapi::drm_vgpu_query_stats) -> Result {
    if a.flags != 0 || a.pad != 0 || a.num_contexts > uapi::VGPU_STATS_MAX_CONTEXTS {
        return Err(EINVAL);
    }
    let cap = a.num_contexts as usize;
    if v.hw.link.is_unbound() {
        return Err(ENODEV);
    }
    let mut ctxs = KVec::new();
    let kmd = snapshot(&v.gpu, &mut ctxs)?;
    let wedged = kmd.wedged || v.check_usable().is_err();

    let ne = uapi::VGPU_STATS_ENGINES as usize;
    let mut engines = [ZERO; uapi::VGPU_STATS_ENGINES as usize];
    let mut device = ZERO;
    let mut per_ctx = KVec::with_capacity(ctxs.len().min(cap), GFP_KERNEL)?;
    if !wedged {
        let mask = v.hw.identity.as_ref().map_or(0, |i| i.engine_mask);
        for (e, slot) in engines.iter_mut().enumerate().take(ne) {
            if mask & (1 << e) != 0 {
                *slot =
                    device_stats(v, stats_kind::ENGINE, e as u32).map_err(|e| stats_errno(v, e))?;
            }
        }
        device = device_stats(v, stats_kind::DEVICE, 0).map_err(|e| stats_errno(v, e))?;
    }
    let sample_ns = monotonic_ns();
    for c in ctxs.iter().take(cap) {
        let k = if wedged {
            ZERO
        } else {
            match device_stats(v, stats_kind::CONTEXT, c.hw) {
                Ok(k) => k,
                // Destroyed since the snapshot.
                Err(e) if e == ENOENT => ZERO,
                Err(e) => return Err(stats_errno(v, e)),
            }
        };
        per_ctx.push(k, GFP_KERNEL)?;
    }

    if cap > 0 {
        let mut out = KVec::with_capacity(cap.min(ctxs.len()), GFP_KERNEL)?;
        for (c, k) in ctxs.iter().zip(per_ctx.iter()) {
            out.push(
                ctx_stats(c, c.client.mem.get().0, c.client.vram.get(), *k),
                GFP_KERNEL,
            )?;
        }
        uarray::write(a.contexts, &out)?;
    }

    let (mem_bytes, mem_objects) = v.mem.get();
    let pt_bytes = v.pt_pool.as_ref().map_or(0, |p| {
        let (total, free) = p.usage();
        (total - free) as u64 * crate::mmu::TABLE_SIZE
    });
    a.sample_ns = sample_ns;
    a.device = device;
    a.engines = engines;
    a.mem_bytes = mem_bytes;
    a.mem_objects = mem_objects;
    a.pt_bytes = pt_bytes;
    a.engine_resets = kmd.engine_resets;
    a.device_resets = kmd.device_resets;
    a.hangs = kmd.hangs;
    a.faults = kmd.faults;
    a.wedged = u32::from(wedged);
    a.num_contexts = u32::try_from(ctxs.len()).unwrap_or(u32::MAX);
    a.mem_limit = v.mem.limit();
    a.file_mem_limit = crate::params::file_gem_limit(v.mem.limit());
    a.mem_refused = v.mem.refused();
    a.retired_pages = v.gpu.retired_pages();
    a.lost = u32::from(v.hw.link.is_lost());
    let vram = v.vram.as_ref().map(|m| m.counters()).unwrap_or_default();
    a.vram_used = vram.used;
    a.vram_evictions = vram.evictions;
    Ok(())
}

/// A failed `QUERY_STATS` command: `ENODEV` once unbound, `EIO` otherwise
/// (the device did not answer as it should).
fn stats_errno(v: &Vgpu, e: Error) -> Error {
    if v.hw.link.is_unbound() {
        ENODEV
    } else if e == ERESTARTSYS {
        e
    } else {
        EIO
    }
}

/// debugfs `stats`: the `QUERY_STATS` summary in text.
pub(crate) fn show(v: &Vgpu, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
    let mut a = uapi::drm_vgpu_query_stats {
        sample_ns: 0,
        device: ZERO,
        engines: [ZERO; uapi::VGPU_STATS_ENGINES as usize],
        mem_bytes: 0,
        mem_objects: 0,
        pt_bytes: 0,
        engine_resets: 0,
        device_resets: 0,
        hangs: 0,
        faults: 0,
        wedged: 0,
        num_contexts: 0,
        contexts: 0,
        flags: 0,
        pad: 0,
        mem_limit: 0,
        file_mem_limit: 0,
        mem_refused: 0,
        retired_pages: 0,
        lost: 0,
        vram_used: 0,
        vram_evictions: 0,
    };
    if let Err(e) = query_stats(v, &mut a) {
        return writeln!(f, "error {}", e.to_errno());
    }
    writeln!(
            f,
            "wedged {} mem_bytes {} mem_objects {} pt_bytes {} engine_resets {} device_resets {} hangs {} faults {} contexts {} lost {} mem_limit {} file_mem_limit {} mem_refused {} retired_pages {}",
            a.wedged, a.mem_bytes, a.mem_objects, a.pt_bytes, a.engine_resets, a.device_resets, a.hangs, a.faults, a.num_contexts,
            a.lost, a.mem_limit, a.file_mem_limit, a.mem_refused, a.retired_pages
        )?;
    let rows = [
        ("device", &a.device),
        ("engine0", &a.engines[0]),
        ("engine1", &a.engines[1]),
    ];
    for (name, k) in rows {
        writeln!(
                f,
                "{} busy_ns {} packets {} bytes {} faults {} errors {} resets {} fences {} tlb_hits {} tlb_misses {} workgroups {} lane_ops {} cycles {}",
                name, k.busy_ns, k.packets, k.bytes, k.faults, k.errors, k.resets, k.fences, k.tlb_hits, k.tlb_misses,
                k.workgroups, k.lane_ops, k.cycles
            )?;
    }
    let mut ctxs = KVec::new();
    if snapshot(&v.gpu, &mut ctxs).is_ok() {
        for c in ctxs.iter() {
            writeln!(
                    f,
                    "ctx {} slot {} pid {} prio {} engines {:#x} reset {} state {:#x} hangs {} faults {} engine_error {} mem_bytes {} submitted {}/{} completed {}/{}",
                    c.handle, c.hw, c.pid, c.priority, c.engines, c.reset_status, c.state, c.hangs, c.faults,
                    c.engine_error, c.client.mem.get().0, c.submitted[0], c.submitted[1], c.completed[0], c.completed[1]
                )?;
        }
    }
    Ok(())
}

/// The fdinfo name of each engine (`drm-engine-<name>`), by engine number.
const ENGINE_NAMES: [&str; ENGINES] = ["copy", "compute"];

/// The driver's keys of a file's fdinfo, after the DRM core's
/// `drm-driver`, `drm-client-id` and `drm-pdev`:
///
/// * `drm-engine-copy`, `drm-engine-compute`: nanoseconds the file's
///   contexts held each engine (the device's per-ring counters, sampled now
///   for every live context; a destroyed context's time stays counted);
/// * `drm-total-system`, `drm-memory-system`: its GEM objects in system
///   memory (what its GEM limit counts);
/// * `drm-total-vram`, `drm-resident-vram`, `drm-memory-vram`: its objects in
///   VRAM, on a device with VRAM.
///
/// A device that is wedged, lost or unbound is not asked: the engine time
/// known so far is shown.
pub(crate) fn show_fdinfo(v: &Vgpu, client: &Arc<Client>, p: &mut FdinfoPrinter<'_>) {
    let busy = {
        let mut t = client.engine_time.lock();
        if let Ok(ctxs) = v.gpu.client_contexts(client) {
            for &(handle, hw, engines) in ctxs.iter() {
                v.gpu.sample_engine_time(&mut t, handle, hw, engines);
            }
        }
        t.totals()
    };
    let mask = v.hw.identity.as_ref().map_or(0, |i| i.engine_mask);
    for (e, (name, ns)) in ENGINE_NAMES.iter().zip(busy).enumerate() {
        if mask & (1 << e) != 0 {
            p.print(fmt!("drm-engine-{}:\t{} ns\n", name, ns));
        }
    }
    let kib = |bytes: u64| bytes / 1024;
    let system = kib(client.mem.get().0);
    p.print(fmt!("drm-total-system:\t{} KiB\n", system));
    p.print(fmt!("drm-memory-system:\t{} KiB\n", system));
    if v.vram.as_ref().is_some() {
        let vram = kib(client.vram.get());
        p.print(fmt!("drm-total-vram:\t{} KiB\n", vram));
        p.print(fmt!("drm-resident-vram:\t{} KiB\n", vram));
        p.print(fmt!("drm-memory-vram:\t{} KiB\n", vram));
    }
}
