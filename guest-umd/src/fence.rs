//! Fences and the adaptive wait: spin on the fence's memory, then poll it
//! with exponential backoff, then block in the KMD's `WAIT`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::Config;
use crate::kmd::{Kmd, KmdError};
use crate::memory::{Bo, Completion};
use crate::uapi::DrmVgpuFence;

/// A point on a stream's timeline: the KMD fence of one submitted batch,
/// plus the 64-bit word the batch's own `FENCE` packet writes when it
/// completes (so a waiter can spin on memory without a system call).
#[derive(Clone, Debug)]
pub struct SyncPoint {
    pub(crate) kmd: DrmVgpuFence,
    pub(crate) mem: Option<(Arc<Bo>, u64, u64)>,
    /// Whether `kmd` is a KMD job fence (`FENCE_EXPORT` makes a sync_file
    /// of it); a user-mode queue's batch has none.
    pub(crate) exportable: bool,
}

impl SyncPoint {
    /// The KMD fence.
    pub fn fence(&self) -> DrmVgpuFence {
        self.kmd
    }

    /// Whether the batch completed, from memory only (no system call).
    /// `None` when the fence has no memory word.
    pub(crate) fn mem_signalled(&self) -> Option<bool> {
        let (bo, off, value) = self.mem.as_ref()?;
        Some(bo.read_u64(*off) >= *value)
    }

    /// Whether the batch completed: from its memory word when it has one
    /// (no system call; a job lost to an error never completes here, so
    /// what waits on it is never reused), else a zero-timeout `WAIT`.
    pub(crate) fn is_done(&self, kmd: &Kmd) -> bool {
        if let Some(done) = self.mem_signalled() {
            return done;
        }
        match kmd.wait(&[self.kmd], true, 0) {
            Ok(_) => true,
            Err(e) => e.errno != libc::ETIME && e.errno != libc::ETIMEDOUT,
        }
    }
}

impl Completion for SyncPoint {
    /// What a freed block waits for: the batch completed (on a host-memory
    /// pool, with no device, at once).
    fn is_complete(&self, kmd: Option<&Kmd>) -> bool {
        kmd.is_none_or(|k| self.is_done(k))
    }
}

/// How a wait ended (for statistics and tests).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitPath {
    /// Done while spinning.
    Spin,
    /// Done while polling with backoff.
    Poll,
    /// Done after blocking in the kernel.
    Block,
}

/// Waits for every sync point: spin for `spin_us`, poll with backoff for
/// `poll_us`, then block in `WAIT` (with `timeout`, or forever). With both
/// 0 the fences' memory is never read: `WAIT` alone decides.
pub fn wait_all(
    kmd: &Kmd,
    cfg: &Config,
    sps: &[SyncPoint],
    timeout: Option<Duration>,
) -> Result<WaitPath, KmdError> {
    if sps.is_empty() {
        return Ok(WaitPath::Spin);
    }
    let mut span = crate::trace::span("wait", "wait");
    if let Some(last) = sps.last() {
        crate::trace::set(&mut span, "fences", sps.len() as u64);
        crate::trace::set(&mut span, "ctx", last.kmd.ctx_id);
        crate::trace::set(&mut span, "engine", last.kmd.engine);
        crate::trace::set(&mut span, "seqno", last.kmd.seqno);
    }
    let r = wait_inner(kmd, cfg, sps, timeout);
    if let Ok(path) = &r {
        crate::trace::set(&mut span, "path", *path as u8);
    }
    r
}

fn wait_inner(
    kmd: &Kmd,
    cfg: &Config,
    sps: &[SyncPoint],
    timeout: Option<Duration>,
) -> Result<WaitPath, KmdError> {
    let all_mem = || sps.iter().all(|s| s.mem_signalled() == Some(true));
    let t0 = Instant::now();
    let spin = Duration::from_micros(cfg.spin_us);
    while t0.elapsed() < spin {
        if all_mem() {
            return Ok(WaitPath::Spin);
        }
        std::hint::spin_loop();
    }
    // With spinning off (`VGPU_SPIN_US=0`) not even one look: the wait is
    // the kernel's alone (what a driver's fence path is tested with).
    if cfg.spin_us > 0 && all_mem() {
        return Ok(WaitPath::Spin);
    }
    let poll_end = spin + Duration::from_micros(cfg.poll_us);
    let mut sleep = Duration::from_micros(1);
    let max_sleep = Duration::from_micros(cfg.poll_max_sleep_us);
    while t0.elapsed() < poll_end && timeout.is_none_or(|t| t0.elapsed() < t) {
        std::thread::sleep(sleep);
        if all_mem() {
            return Ok(WaitPath::Poll);
        }
        sleep = (sleep * 2).min(max_sleep);
    }
    let fences: Vec<DrmVgpuFence> = sps.iter().map(|s| s.kmd).collect();
    for chunk in fences.chunks(crate::uapi::WAIT_MAX_FENCES as usize) {
        let left = match timeout {
            Some(t) => t.saturating_sub(t0.elapsed()).as_nanos() as u64,
            None => 3600 * 1_000_000_000,
        };
        loop {
            match kmd.wait(chunk, true, left) {
                Ok(_) => break,
                Err(e)
                    if timeout.is_none()
                        && (e.errno == libc::ETIME || e.errno == libc::ETIMEDOUT) =>
                {
                    continue
                }
                Err(e) => return Err(e),
            }
        }
    }
    Ok(WaitPath::Block)
}
