// SPDX-License-Identifier: GPL-2.0

//! The module parameters, as the blocks read them.
//!
//! The parameters are not in sysfs (the Rust `module!` registers them with
//! permission 0), so their values are fixed when the module loads: the crate
//! root reads them once ([`set`]) and every block reads them here, clamped
//! to their documented ranges.

use kernel::sync::SetOnce;

/// The raw parameter values.
#[derive(Clone, Copy)]
pub(crate) struct Params {
    pub(crate) cmd_timeout_ms: u32,
    pub(crate) pt_pool_kib: u32,
    pub(crate) job_timeout_ms: u32,
    pub(crate) ban_hangs: u32,
    pub(crate) ban_window_ms: u32,
    pub(crate) force_intx: u32,
    pub(crate) gem_limit_mib: u32,
    pub(crate) file_gem_limit_mib: u32,
    pub(crate) ras_max_pages: u32,
    pub(crate) coredump: u32,
    pub(crate) trace_records: u32,
    pub(crate) fw_boot_timeout_ms: u32,
    pub(crate) autosuspend_ms: u32,
    pub(crate) vram_d3cold_threshold_mib: u32,
}

/// The defaults of the `module!` declaration.
const DEFAULTS: Params = Params {
    cmd_timeout_ms: 2000,
    pt_pool_kib: 8192,
    job_timeout_ms: 5000,
    ban_hangs: 3,
    ban_window_ms: 60000,
    force_intx: 0,
    gem_limit_mib: 0,
    file_gem_limit_mib: 0,
    ras_max_pages: 16,
    coredump: 1,
    trace_records: 0,
    fw_boot_timeout_ms: 1000,
    autosuspend_ms: 0,
    vram_d3cold_threshold_mib: 0,
};

static PARAMS: SetOnce<Params> = SetOnce::new();

/// Records the values read at module load (once).
pub(crate) fn set(p: Params) {
    PARAMS.populate(p);
}

fn get() -> Params {
    PARAMS.as_ref().copied().unwrap_or(DEFAULTS)
}

/// `cmd_timeout_ms`, clamped to 1..=60000: control command timeout.
pub(crate) fn cmd_timeout_ms() -> u32 {
    get().cmd_timeout_ms.clamp(1, 60_000)
}

/// `pt_pool_kib`, clamped to 2048..=262144: page-table memory per device.
pub(crate) fn pt_pool_kib() -> u32 {
    get().pt_pool_kib.clamp(2048, 262_144)
}

/// `job_timeout_ms`, clamped to 100..=600000: a ring that completes no job
/// for this long is hung.
pub(crate) fn job_timeout_ms() -> u32 {
    get().job_timeout_ms.clamp(100, 600_000)
}

/// `ban_hangs`, clamped to 1..=1000.
pub(crate) fn ban_hangs() -> u32 {
    get().ban_hangs.clamp(1, 1000)
}

/// `ban_window_ms`, clamped to 1000..=3600000.
pub(crate) fn ban_window_ms() -> u32 {
    get().ban_window_ms.clamp(1000, 3_600_000)
}

/// `coredump`: publish a devcoredump for every hang, aborted fault and
/// engine error (and ask the device for a capture at a hang).
pub(crate) fn coredump() -> bool {
    get().coredump != 0
}

/// `trace_records`: the driver's trace buffer from probe on, this many
/// records (clamped by [`crate::ktrace`]); 0 (the default): off.
pub(crate) fn trace_records() -> usize {
    get().trace_records as usize
}

/// `force_intx`: use the legacy INTx interrupt even if MSI-X is available.
pub(crate) fn force_intx() -> bool {
    get().force_intx != 0
}

/// The device-wide GEM limit in bytes: `gem_limit_mib`, or 0 for half of
/// the guest's RAM (`total_ram`).
pub(crate) fn gem_limit(total_ram: u64) -> u64 {
    match get().gem_limit_mib {
        0 => total_ram / 2,
        mib => u64::from(mib) << 20,
    }
}

/// The per-file GEM limit in bytes: `file_gem_limit_mib`, or 0 for the
/// device's limit.
pub(crate) fn file_gem_limit(device_limit: u64) -> u64 {
    match get().file_gem_limit_mib {
        0 => device_limit,
        mib => (u64::from(mib) << 20).min(device_limit),
    }
}

/// `ras_max_pages`, clamped to 1..=256: retired pages at which the device is
/// declared bad.
pub(crate) fn ras_max_pages() -> u32 {
    get().ras_max_pages.clamp(1, 256)
}

/// `fw_boot_timeout_ms`, clamped to 10..=60000: how long the driver polls
/// a booting firmware before it gives up (`ETIMEDOUT`).
pub(crate) fn fw_boot_timeout_ms() -> u32 {
    get().fw_boot_timeout_ms.clamp(10, 60_000)
}

/// `autosuspend_ms`: an idle device (no job, no user-mode queue) is
/// suspended after this many ms (0, the default: never), clamped to
/// 10..=600000 otherwise.
pub(crate) fn autosuspend_ms() -> Option<u32> {
    match get().autosuspend_ms {
        0 => None,
        ms => Some(ms.clamp(10, 600_000)),
    }
}

/// `vram_d3cold_threshold_mib`: a runtime suspension goes to `D3COLD`
/// (VRAM powered off, its objects saved to system memory first) when the
/// VRAM objects use at most this many MiB, and none is CPU-mapped; to
/// `D3HOT` otherwise. `None` (0, the default): always `D3HOT`.
pub(crate) fn vram_d3cold_threshold_mib() -> Option<u32> {
    match get().vram_d3cold_threshold_mib {
        0 => None,
        mib => Some(mib),
    }
}
