//! Device-wide status (`DRM_IOCTL_VGPU_QUERY_STATS`): what `vgpu-smi` shows.
//!
//! [`Device::stats`](crate::Device::stats) takes one sample; utilisation is
//! the growth of busy time between two samples over the growth of the
//! sampling clock ([`Stats::engine_utilisation`], [`Stats::ctx_utilisation`]).

use crate::uapi::{self, DrmVgpuCounters, DrmVgpuCtxStats};

/// One `QUERY_STATS` sample.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Guest monotonic clock of the sample, ns.
    pub sample_ns: u64,
    /// The whole device's counters (since power-on).
    pub device: DrmVgpuCounters,
    /// Each engine's counters (index: `ENGINE_COPY`, `ENGINE_COMPUTE`).
    pub engines: [DrmVgpuCounters; uapi::STATS_ENGINES],
    /// Bytes of all GEM objects of all files.
    pub mem_bytes: u64,
    /// Number of GEM objects.
    pub mem_objects: u64,
    /// Bytes of GPU page tables in use.
    pub pt_bytes: u64,
    /// Engine resets the KMD performed.
    pub engine_resets: u64,
    /// Device resets the KMD performed.
    pub device_resets: u64,
    /// Hangs detected.
    pub hangs: u64,
    /// Fault events received.
    pub faults: u64,
    /// The device is wedged (device counters are then zero).
    pub wedged: bool,
    /// The driver declared the device lost (it stopped answering).
    pub lost: bool,
    /// The device-wide GEM limit in bytes (`GEM_CREATE` past it: `ENOMEM`).
    pub mem_limit: u64,
    /// The per-file GEM limit in bytes (`GEM_CREATE` past it: `ENOSPC`).
    pub file_mem_limit: u64,
    /// `GEM_CREATE` calls refused at a limit.
    pub mem_refused: u64,
    /// Pages the driver retired after uncorrectable ECC errors.
    pub retired_pages: u32,
    /// Bytes of VRAM objects hold now.
    pub vram_used: u64,
    /// Objects evicted from VRAM to system memory.
    pub vram_evictions: u64,
    /// Contexts that exist on the device (may exceed `contexts.len()`).
    pub total_contexts: u32,
    /// Every context of every file (at most `STATS_MAX_CONTEXTS`).
    pub contexts: Vec<DrmVgpuCtxStats>,
}

/// Percent of `dt_ns` that busy time grew by (0..=100).
pub fn utilisation(busy_before: u64, busy_after: u64, dt_ns: u64) -> f64 {
    if dt_ns == 0 {
        return 0.0;
    }
    let busy = busy_after.saturating_sub(busy_before) as f64;
    (100.0 * busy / dt_ns as f64).clamp(0.0, 100.0)
}

impl Stats {
    /// From a filled `QUERY_STATS` argument and its context array.
    pub fn from_raw(a: &uapi::DrmVgpuQueryStats, mut contexts: Vec<DrmVgpuCtxStats>) -> Stats {
        contexts.truncate(a.num_contexts as usize);
        Stats {
            sample_ns: a.sample_ns,
            device: a.device,
            engines: a.engines,
            mem_bytes: a.mem_bytes,
            mem_objects: a.mem_objects,
            pt_bytes: a.pt_bytes,
            engine_resets: a.engine_resets,
            device_resets: a.device_resets,
            hangs: a.hangs,
            faults: a.faults,
            wedged: a.wedged != 0,
            lost: a.lost != 0,
            mem_limit: a.mem_limit,
            file_mem_limit: a.file_mem_limit,
            mem_refused: a.mem_refused,
            retired_pages: a.retired_pages,
            vram_used: a.vram_used,
            vram_evictions: a.vram_evictions,
            total_contexts: a.num_contexts,
            contexts,
        }
    }

    /// Utilisation of engine `e` in percent between `earlier` and `self`.
    pub fn engine_utilisation(&self, earlier: &Stats, e: usize) -> f64 {
        let (Some(a), Some(b)) = (earlier.engines.get(e), self.engines.get(e)) else {
            return 0.0;
        };
        utilisation(
            a.busy_ns,
            b.busy_ns,
            self.sample_ns.saturating_sub(earlier.sample_ns),
        )
    }

    /// Utilisation of context `ctx_id` (all its engines) in percent between
    /// `earlier` and `self`; a context new since `earlier` counts from 0.
    pub fn ctx_utilisation(&self, earlier: &Stats, ctx_id: u32) -> f64 {
        let Some(now) = self.contexts.iter().find(|c| c.ctx_id == ctx_id) else {
            return 0.0;
        };
        let before = earlier
            .contexts
            .iter()
            .find(|c| c.ctx_id == ctx_id)
            .map_or(0, |c| c.counters.busy_ns);
        utilisation(
            before,
            now.counters.busy_ns,
            self.sample_ns.saturating_sub(earlier.sample_ns),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utilisation_is_busy_growth_over_interval() {
        assert_eq!(utilisation(100, 600, 1000), 50.0);
        assert_eq!(utilisation(0, 5000, 1000), 100.0);
        assert_eq!(utilisation(500, 100, 1000), 0.0);
        assert_eq!(utilisation(0, 10, 0), 0.0);
    }

    #[test]
    fn from_raw_keeps_only_filled_contexts() {
        let a = uapi::DrmVgpuQueryStats {
            num_contexts: 1,
            wedged: 1,
            ..Default::default()
        };
        let s = Stats::from_raw(&a, vec![DrmVgpuCtxStats::default(); 4]);
        assert_eq!(s.contexts.len(), 1);
        assert!(s.wedged);
    }

    #[test]
    fn ctx_utilisation_counts_new_contexts_from_zero() {
        let mut a = Stats::default();
        let mut b = Stats {
            sample_ns: 1000,
            ..Default::default()
        };
        b.contexts.push(DrmVgpuCtxStats {
            ctx_id: 7,
            counters: DrmVgpuCounters {
                busy_ns: 250,
                ..Default::default()
            },
            ..Default::default()
        });
        assert_eq!(b.ctx_utilisation(&a, 7), 25.0);
        a.contexts = b.contexts.clone();
        assert_eq!(b.ctx_utilisation(&a, 7), 0.0);
        assert_eq!(b.ctx_utilisation(&a, 8), 0.0);
    }
}
