// SPDX-License-Identifier: GPL-2.0

//! Status for tools: memory accounting and `DRM_IOCTL_VGPU_QUERY_STATS`.
//!
//! * GEM memory is counted twice: per device (every object of every file)
//!   and per file (objects created through that file). An object is counted
//!   from `GEM_CREATE` until it is freed, whether or not its file is still
//!   open ([`MemCharge`]).
//! * Page-table bytes are the tables taken out of the device's pool
//!   ([`crate::ptpool`]), including the KMD's own tables for rings.
//! * `QUERY_STATS` combines the KMD's figures (memory, reset, hang and fault
//!   counters, every context of every file with its fence progress) with
//!   the device's counters (`QUERY_STATS` control commands: the device, each
//!   engine, each context).
//!
//! Errors: `EINVAL` for non-zero `flags`/`pad` or `num_contexts` above
//! `VGPU_STATS_MAX_CONTEXTS`; `EFAULT` when the context array cannot be
//! written; `ENODEV` once the device is unbound; `EIO` when a usable device
//! does not answer a `QUERY_STATS` command. A wedged (or broken) device is
//! not asked: the call succeeds with `wedged = 1`, the KMD's figures, and
//! the device's counters left zero, so that a status tool can still show
//! what happened.

use crate::{
    gpu::CtxSnapshot,
    proto::{
        stats_kind,
        Command,
        StatsReply, //
    },
    Vgpu,
};
use kernel::{
    bindings,
    prelude::*,
    sync::{
        atomic::{
            Atomic,
            Relaxed, //
        },
        Arc,
    },
    uaccess::UserSlice,
    uapi,
};

/// Bytes and number of GEM objects alive.
pub(crate) struct MemAccount {
    bytes: Atomic<u64>,
    objects: Atomic<u64>,
}

impl MemAccount {
    /// A new, empty account.
    pub(crate) fn new() -> Result<Arc<MemAccount>> {
        Ok(Arc::new(
            MemAccount {
                bytes: Atomic::new(0),
                objects: Atomic::new(0),
            },
            GFP_KERNEL,
        )?)
    }

    /// (bytes, objects).
    pub(crate) fn get(&self) -> (u64, u64) {
        (self.bytes.load(Relaxed), self.objects.load(Relaxed))
    }
}

/// What one object is charged: held by the object from creation to free.
pub(crate) struct MemCharge {
    size: u64,
    accounts: [Arc<MemAccount>; 2],
}

impl MemCharge {
    /// Charges `size` bytes and one object to the device's and the file's
    /// accounts.
    pub(crate) fn new(size: usize, device: Arc<MemAccount>, file: Arc<MemAccount>) -> MemCharge {
        let size = size as u64;
        let accounts = [device, file];
        for a in accounts.iter() {
            a.bytes.fetch_add(size, Relaxed);
            a.objects.fetch_add(1u64, Relaxed);
        }
        MemCharge { size, accounts }
    }
}

impl Drop for MemCharge {
    fn drop(&mut self) {
        for a in self.accounts.iter() {
            a.bytes.fetch_sub(self.size, Relaxed);
            a.objects.fetch_sub(1u64, Relaxed);
        }
    }
}

/// Thread-group id of the calling process, in its own pid namespace.
pub(crate) fn current_tgid() -> u32 {
    u32::try_from(kernel::current!().tgid_nr_ns(None)).unwrap_or(0)
}

/// The guest's monotonic clock, in nanoseconds.
fn monotonic_ns() -> u64 {
    // SAFETY: `ktime_get` may be called from any context but NMI.
    u64::try_from(unsafe { bindings::ktime_get() }).unwrap_or(0)
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
};

/// Bytes of one `struct drm_vgpu_ctx_stats`.
const CTX_STATS_SIZE: usize = core::mem::size_of::<uapi::drm_vgpu_ctx_stats>();
const _: () = assert!(CTX_STATS_SIZE == 32 + 8 + 16 + 16 + 72);

/// Appends `c` in the uAPI layout (little-endian, no padding).
fn put_ctx(out: &mut KVec<u8>, c: &CtxSnapshot, mem_bytes: u64, k: &uapi::drm_vgpu_counters) -> Result {
    for v in [c.handle, c.pid, c.priority, c.engines, c.reset_status, c.state, c.hangs, c.faults] {
        out.extend_from_slice(&v.to_le_bytes(), GFP_KERNEL)?;
    }
    let words = [mem_bytes, c.submitted[0], c.submitted[1], c.completed[0], c.completed[1]];
    let cnt = [
        k.busy_ns,
        k.packets,
        k.bytes,
        k.faults,
        k.errors,
        k.resets,
        k.fences,
        k.tlb_hits,
        k.tlb_misses,
    ];
    for v in Iterator::chain(words.iter(), cnt.iter()) {
        out.extend_from_slice(&v.to_le_bytes(), GFP_KERNEL)?;
    }
    Ok(())
}

impl Vgpu {
    /// One `QUERY_STATS` control command.
    fn device_stats(&self, kind: u32, id: u32) -> Result<uapi::drm_vgpu_counters> {
        let r: StatsReply = self.command(Command::QueryStats { kind, id })?.get()?;
        if r.kind != kind || r.id != id {
            return Err(crate::errno::eproto());
        }
        Ok(counters(&r))
    }

    /// `DRM_IOCTL_VGPU_QUERY_STATS` (see the module documentation).
    pub(crate) fn query_stats(&self, a: &mut uapi::drm_vgpu_query_stats) -> Result {
        if a.flags != 0 || a.pad != 0 || a.num_contexts > uapi::VGPU_STATS_MAX_CONTEXTS {
            return Err(EINVAL);
        }
        let cap = a.num_contexts as usize;
        if self.unbound() {
            return Err(ENODEV);
        }
        let mut ctxs = KVec::new();
        let kmd = self.stats_snapshot(&mut ctxs)?;
        let wedged = kmd.wedged || self.check_usable().is_err();

        let ne = uapi::VGPU_STATS_ENGINES as usize;
        let mut engines = [ZERO; uapi::VGPU_STATS_ENGINES as usize];
        let mut device = ZERO;
        let mut per_ctx = KVec::with_capacity(ctxs.len().min(cap), GFP_KERNEL)?;
        if !wedged {
            let mask = self.identity.as_ref().map_or(0, |i| i.engine_mask);
            for (e, slot) in engines.iter_mut().enumerate().take(ne) {
                if mask & (1 << e) != 0 {
                    *slot = self.device_stats(stats_kind::ENGINE, e as u32).map_err(|e| self.stats_errno(e))?;
                }
            }
            device = self.device_stats(stats_kind::DEVICE, 0).map_err(|e| self.stats_errno(e))?;
        }
        let sample_ns = monotonic_ns();
        for c in ctxs.iter().take(cap) {
            let k = if wedged {
                ZERO
            } else {
                match self.device_stats(stats_kind::CONTEXT, c.hw) {
                    Ok(k) => k,
                    // Destroyed since the snapshot.
                    Err(e) if e == ENOENT => ZERO,
                    Err(e) => return Err(self.stats_errno(e)),
                }
            };
            per_ctx.push(k, GFP_KERNEL)?;
        }

        if cap > 0 {
            let mut buf = KVec::with_capacity(cap.min(ctxs.len()) * CTX_STATS_SIZE, GFP_KERNEL)?;
            for (c, k) in ctxs.iter().zip(per_ctx.iter()) {
                put_ctx(&mut buf, c, c.client.mem.get().0, k)?;
            }
            if !buf.is_empty() {
                let ptr = UserPtr::from_addr(usize::try_from(a.contexts).map_err(|_| EFAULT)?);
                UserSlice::new(ptr, buf.len()).writer().write_slice(&buf)?;
            }
        }

        let (mem_bytes, mem_objects) = self.mem.as_ref().map_or((0, 0), |m| m.get());
        let pt_bytes = self.pt_pool.as_ref().map_or(0, |p| {
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
        Ok(())
    }

    /// Whether the device is unbound (removed).
    fn unbound(&self) -> bool {
        matches!(self.check_usable(), Err(e) if e == ENODEV)
    }

    /// A failed `QUERY_STATS` command: `ENODEV` once unbound, `EIO`
    /// otherwise (the device did not answer as it should).
    fn stats_errno(&self, e: Error) -> Error {
        if self.unbound() {
            ENODEV
        } else if e == ERESTARTSYS {
            e
        } else {
            EIO
        }
    }

    /// debugfs `stats`: the `QUERY_STATS` summary in text.
    pub(crate) fn show_stats(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
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
        };
        if let Err(e) = self.query_stats(&mut a) {
            return writeln!(f, "error {}", e.to_errno());
        }
        writeln!(
            f,
            "wedged {} mem_bytes {} mem_objects {} pt_bytes {} engine_resets {} device_resets {} hangs {} faults {} contexts {}",
            a.wedged, a.mem_bytes, a.mem_objects, a.pt_bytes, a.engine_resets, a.device_resets, a.hangs, a.faults, a.num_contexts
        )?;
        let rows = [("device", &a.device), ("engine0", &a.engines[0]), ("engine1", &a.engines[1])];
        for (name, k) in rows {
            writeln!(
                f,
                "{} busy_ns {} packets {} bytes {} faults {} errors {} resets {} fences {} tlb_hits {} tlb_misses {}",
                name, k.busy_ns, k.packets, k.bytes, k.faults, k.errors, k.resets, k.fences, k.tlb_hits, k.tlb_misses
            )?;
        }
        let mut ctxs = KVec::new();
        if self.stats_snapshot(&mut ctxs).is_ok() {
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
}
