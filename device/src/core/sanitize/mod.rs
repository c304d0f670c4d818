//! The driver sanitizer: the device checks the driver's side of the
//! hardware contract as it happens and explains every rule broken.
//!
//! `vgpu-device --sanitize[=CHECKS]` (or `sanitize on` on the control
//! socket) turns checks on; each has a stable id
//! ([`vgpu_hwif::sanitize::Check`]) and is documented with an example
//! report and a fix hint in docs/sanitizer.md. The blocks:
//!
//! | module | checks | state machine |
//! |---|---|---|
//! | [`ring`] | `SAN-RING-UNPUBLISHED`, `SAN-RING-INDEX`, doorbells of `SAN-TEARDOWN` | per ring: published words (snapshot at the doorbell) → fetched (compared) |
//! | [`tlb`] | `SAN-TLB-STALE`, `SAN-TLB-INV-ORDER`, `SAN-DMA-UNOWNED` | per TLB entry: filled (leaf entry and fill recorded) → hit (re-read) → dropped (reuse checked); pages: declared → given back |
//! | [`pt`] | `SAN-PT-INVALID-TABLE`, `SAN-PT-LEVEL`, `SAN-PT-ALIGN`, `SAN-PT-UNOWNED` | per entry a walk reads: checked against its level and the pages declared (as page tables) → given back; no state of its own |
//! | [`cmdbuf`] | `SAN-CMDBUF-UNMAPPED` | per command buffer being executed: pages fetched → checked at its end, at slice ends and at invalidations |
//! | [`fence`] | `SAN-FENCE-REGRESS`, `SAN-FENCE-WRAP` | per fence slot: the last value |
//! | [`hazard`] | `SAN-XENGINE-HAZARD` | per ring: epoch and view (vector clocks); per page: access records |
//! | [`wait`] | `SAN-WAIT-UNSATISFIABLE` | per blocked ring: waiting → analysed (after the grace) → reported or satisfied |
//! | [`hooks`] | the hooks the control processor and the scheduler call over the shared GPU state | |
//! | [`report`] | every report: log line, JSON line, the driver's `SanReport` | numbered, kept, counted |
//!
//! # Hooks
//!
//! The hot paths call the sanitizer through cheap hooks that do nothing
//! when it is off: one relaxed load of the check mask ([`Sanitizer::on`])
//! at a doorbell, a fetch or a packet; the TLBs carry their checks
//! themselves ([`tlb::TlbSan`], installed at each slice only when a TLB
//! check is on). Engine-side state (the TLB checks, command buffers) is
//! the engine's own; shared state sits behind the sanitizer's own lock,
//! always taken after the GPU state lock and released before an event is
//! posted.
//!
//! # Reports
//!
//! A report ([`report::Report`]) goes to the device log (`warn`, one line
//! starting `sanitizer: SAN-…`), to the JSON-lines file of
//! `--sanitize-log`, and to the driver as an
//! [`Event::Sanitizer`] event naming it; the driver fetches the whole
//! report with `SAN_REPORT`. In stop mode (`--sanitize-mode stop`) a
//! finding made while an engine executes a packet also stops that ring
//! with the engine error `SANITIZER` (sticky, like a protocol checker: a
//! `STOPPED` ring until reset or destroyed).
//!
//! Faults the device injects itself (docs/fault-injection.md) are not the
//! driver's: a finding on a context a fault was injected into since it was
//! created is counted as suppressed, not reported.

pub mod cmdbuf;
pub mod fasthash;
pub mod fence;
pub mod hazard;
pub mod owned;
pub mod pt;
pub mod report;
pub mod ring;
pub mod tlb;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use vgpu_hwif::event::Event;
use vgpu_hwif::proto::{engine, CTX_NONE, MAX_CONTEXTS};
use vgpu_hwif::sanitize::{
    Check, CHECKS, SAN_FLAG_MOVED, SAN_FLAG_OBJECT, SAN_FLAG_STOPPED, SAN_KIND_SHIFT,
};

use report::{Report, ReportLog};
use tlb::{SanShared, TlbSan};

/// Every check.
pub const ALL_CHECKS: u32 = (1 << CHECKS) - 1;

/// What the sanitizer asks of the fault injector: whether a fault it
/// injected explains a report (a report on a context a fault was injected
/// into is suppressed, not shown as the driver's mistake).
pub trait InjectionLog {
    /// Whether a fault was injected at or after `since_ns` into context
    /// `ctx` or into the whole device; with `ctx` `None`, into anything.
    fn injected_since(&self, ctx: Option<u32>, since_ns: u64) -> bool;
}

/// The checks a TLB carries ([`TlbSan`]): made at TLB hits, walks and
/// invalidations.
pub const TLB_CHECKS: u32 = Check::TlbStale.bit()
    | Check::TlbInvOrder.bit()
    | Check::DmaUnowned.bit()
    | Check::XengineHazard.bit()
    | pt::PT_CHECKS;

/// Default time the engine lets a doorbell age before it takes it.
pub const DEFAULT_FETCH_DELAY: Duration = Duration::from_millis(2);
/// Default time a ring waits on a semaphore before its wait is analysed.
pub const DEFAULT_WAIT_GRACE: Duration = Duration::from_millis(500);
/// Default time events may wait for a driver buffer.
pub const DEFAULT_STARVE: Duration = Duration::from_secs(2);

/// Why a sanitizer setting was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SanError {
    /// A name in a check list is neither a check id, a family nor `all`.
    #[error("unknown sanitizer check '{0}' (ids SAN-…, families ring, tlb, fence, hazard, wait, dma, teardown, pt, firmware, or all)")]
    UnknownCheck(String),
    /// A mode other than `report` or `stop`.
    #[error("unknown sanitizer mode '{0}' (report or stop)")]
    UnknownMode(String),
}

/// The sanitizer's settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SanConfig {
    /// Checks on (`Check::bit`s; 0: off).
    pub checks: u32,
    /// Stop the offending ring (else report only).
    pub stop: bool,
    /// How long a doorbell ages before the engine takes it.
    pub fetch_delay: Duration,
    /// How long a ring waits on a semaphore before the wait is analysed.
    pub wait_grace: Duration,
    /// How long events may wait for a driver buffer.
    pub starve: Duration,
}

impl Default for SanConfig {
    fn default() -> Self {
        SanConfig {
            checks: 0,
            stop: false,
            fetch_delay: DEFAULT_FETCH_DELAY,
            wait_grace: DEFAULT_WAIT_GRACE,
            starve: DEFAULT_STARVE,
        }
    }
}

/// Parses a check list: comma-separated check ids (`SAN-TLB-STALE`,
/// `tlb-stale`), families (`ring`, `tlb`, `fence`, `hazard`, `wait`,
/// `dma`, `teardown`, `pt`, `firmware`), `all` or `none`; a leading `-` removes. Empty means
/// all.
pub fn parse_checks(s: &str) -> Result<u32, SanError> {
    let s = s.trim();
    if s.is_empty() {
        return Ok(ALL_CHECKS);
    }
    let mut mask = 0u32;
    for (i, item) in s.split(',').map(str::trim).enumerate() {
        let (remove, name) = match item.strip_prefix('-') {
            Some(n) => (true, n),
            None => (false, item),
        };
        if i == 0 && remove {
            mask = ALL_CHECKS;
        }
        let bits = match name.to_ascii_lowercase().as_str() {
            "all" => ALL_CHECKS,
            "none" | "off" => 0,
            fam => {
                let by_family: u32 = Check::ALL
                    .iter()
                    .filter(|c| c.family() == fam)
                    .map(|c| c.bit())
                    .fold(0, |a, b| a | b);
                if by_family != 0 {
                    by_family
                } else {
                    Check::from_id(name)
                        .ok_or_else(|| SanError::UnknownCheck(name.to_owned()))?
                        .bit()
                }
            }
        };
        if remove {
            mask &= !bits;
        } else {
            mask |= bits;
        }
    }
    Ok(mask)
}

/// The ids of the checks in `mask`.
pub fn check_ids(mask: u32) -> Vec<&'static str> {
    Check::ALL
        .iter()
        .filter(|c| mask & c.bit() != 0)
        .map(|c| c.id())
        .collect()
}

/// Shared state of the checks that are not engine-local.
#[derive(Debug, Default)]
pub(crate) struct State {
    pub(crate) rings: HashMap<(u32, u32), ring::RingSan>,
    pub(crate) fences: fence::Fences,
    pub(crate) hazards: hazard::Hazards,
    /// Blocked rings: (ctx, engine) → (wait's packet VA, blocked since,
    /// last analysed, reported).
    pub(crate) waits: HashMap<(u32, u32), WaitTrack>,
    /// When each context was created (device time), for injected faults.
    pub(crate) born_ns: HashMap<u32, u64>,
    /// Contexts destroyed (not created again since).
    pub(crate) destroyed: Destroyed,
    /// Events starving: reported for the front event with this timestamp.
    pub(crate) starve_reported: Option<u64>,
}

/// Which contexts were destroyed (and not created again).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Destroyed([bool; MAX_CONTEXTS as usize]);

impl Default for Destroyed {
    fn default() -> Self {
        Destroyed([false; MAX_CONTEXTS as usize])
    }
}

impl Destroyed {
    pub(crate) fn get(&self, i: usize) -> Option<&bool> {
        self.0.get(i)
    }

    pub(crate) fn get_mut(&mut self, i: usize) -> Option<&mut bool> {
        self.0.get_mut(i)
    }
}

/// One blocked wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WaitTrack {
    pub(crate) packet_va: u64,
    pub(crate) rptr: u32,
    pub(crate) since_ns: u64,
    pub(crate) analysed_ns: u64,
    pub(crate) reported: bool,
}

/// The sanitizer of one device.
#[derive(Debug)]
pub struct Sanitizer {
    mask: AtomicU32,
    stop: AtomicBool,
    fetch_delay_ns: AtomicU64,
    wait_grace_ns: AtomicU64,
    starve_ns: AtomicU64,
    generation: u32,
    /// What the TLBs share (ownership, page uses).
    pub shared: Arc<SanShared>,
    state: Mutex<State>,
    log: Mutex<ReportLog>,
}

fn unpoison<T>(r: Result<T, PoisonError<T>>) -> T {
    r.unwrap_or_else(PoisonError::into_inner)
}

impl Sanitizer {
    /// An off sanitizer for a device of `generation`.
    pub fn new(generation: u32) -> Self {
        Sanitizer {
            mask: AtomicU32::new(0),
            stop: AtomicBool::new(false),
            fetch_delay_ns: AtomicU64::new(DEFAULT_FETCH_DELAY.as_nanos() as u64),
            wait_grace_ns: AtomicU64::new(DEFAULT_WAIT_GRACE.as_nanos() as u64),
            starve_ns: AtomicU64::new(DEFAULT_STARVE.as_nanos() as u64),
            generation,
            shared: Arc::new(SanShared::new()),
            state: Mutex::new(State::default()),
            log: Mutex::new(ReportLog::new()),
        }
    }

    /// Applies `cfg` (checks, mode, timings).
    pub fn configure(&self, cfg: &SanConfig) {
        let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.fetch_delay_ns
            .store(ns(cfg.fetch_delay), Ordering::Relaxed);
        self.wait_grace_ns
            .store(ns(cfg.wait_grace), Ordering::Relaxed);
        self.starve_ns.store(ns(cfg.starve), Ordering::Relaxed);
        self.stop.store(cfg.stop, Ordering::Relaxed);
        self.set_checks(cfg.checks);
    }

    /// Turns the checks in `mask` on and every other off.
    pub fn set_checks(&self, mask: u32) {
        let old = self.mask.swap(mask & ALL_CHECKS, Ordering::AcqRel);
        if old != mask {
            log::info!(
                "sanitizer: checks {}",
                if mask == 0 {
                    "off".to_owned()
                } else {
                    check_ids(mask).join(",")
                }
            );
        }
    }

    /// Sets report-only (`false`) or stop (`true`) mode.
    pub fn set_stop(&self, stop: bool) {
        self.stop.store(stop, Ordering::Relaxed);
    }

    /// Whether findings stop their ring.
    pub fn stop_mode(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// The checks on.
    pub fn checks(&self) -> u32 {
        self.mask.load(Ordering::Relaxed)
    }

    /// Whether any check is on.
    #[inline(always)]
    pub fn enabled(&self) -> bool {
        self.mask.load(Ordering::Relaxed) != 0
    }

    /// Whether check `c` is on.
    #[inline(always)]
    pub fn on(&self, c: Check) -> bool {
        self.mask.load(Ordering::Relaxed) & c.bit() != 0
    }

    /// How long doorbells age before the engine takes them (0 when the
    /// ring checks are off).
    pub fn fetch_delay_ns(&self) -> u64 {
        if self.on(Check::RingUnpublished) {
            self.fetch_delay_ns.load(Ordering::Relaxed)
        } else {
            0
        }
    }

    /// How long a wait lasts before it is analysed.
    pub fn wait_grace_ns(&self) -> u64 {
        self.wait_grace_ns.load(Ordering::Relaxed)
    }

    /// How long events may wait for a buffer.
    pub fn starve_ns(&self) -> u64 {
        self.starve_ns.load(Ordering::Relaxed)
    }

    /// The hardware generation (to decode packets).
    pub fn generation(&self) -> u32 {
        self.generation
    }

    /// The `IDENTIFY` feature bits the sanitizer contributes.
    pub fn features(&self) -> u32 {
        let mut f = 0;
        if self.enabled() {
            f |= vgpu_hwif::proto::FEATURE_SANITIZER;
        }
        // The checks that need the driver's memory declared.
        let declared = Check::DmaUnowned.bit()
            | Check::PtInvalidTable.bit()
            | Check::PtLevel.bit()
            | Check::PtUnowned.bit();
        if self.checks() & declared != 0 {
            f |= vgpu_hwif::proto::FEATURE_SAN_DMA;
        }
        f
    }

    /// The TLB checks for a TLB of engine `e`, if any is on.
    pub fn tlb_san(&self, e: u32) -> Option<Box<TlbSan>> {
        let m = self.checks() & TLB_CHECKS;
        (m != 0).then(|| Box::new(TlbSan::new(self.shared.clone(), e, m)))
    }

    pub(crate) fn state(&self) -> MutexGuard<'_, State> {
        unpoison(self.state.lock())
    }

    /// The report log.
    pub fn log(&self) -> MutexGuard<'_, ReportLog> {
        unpoison(self.log.lock())
    }

    /// Whether a fault was injected into `ctx` since it was created (or
    /// into the whole device meanwhile).
    fn tainted(&self, ctx: Option<u32>, inject: &dyn InjectionLog) -> bool {
        let Some(ctx) = ctx.filter(|&c| c != CTX_NONE) else {
            return false;
        };
        let born = self.state().born_ns.get(&ctx).copied().unwrap_or(0);
        inject.injected_since(Some(ctx), born)
    }

    /// Whether any fault was injected (into any context) since context
    /// `ctx` was created.
    fn injected_since(&self, ctx: Option<u32>, inject: &dyn InjectionLog) -> bool {
        let born = ctx
            .and_then(|c| self.state().born_ns.get(&c).copied())
            .unwrap_or(0);
        inject.injected_since(None, born)
    }

    /// Records `r` unless an injected fault explains it; returns the event
    /// that tells the driver. `r.stopped` says whether the caller stops
    /// the ring.
    pub fn emit(&self, mut r: Report, inject: &dyn InjectionLog) -> Option<Event> {
        let prior_ctx = r.prior.as_ref().map(|p| p.ctx);
        // A wait can be left unsatisfiable by a fault injected into
        // whichever context was to signal it (a hung or dropped job): any
        // injection since the waiter was created explains it.
        let wait_tainted =
            r.check == Check::WaitUnsatisfiable && self.injected_since(r.ctx, inject);
        if wait_tainted || self.tainted(r.ctx, inject) || self.tainted(prior_ctx, inject) {
            self.log().suppress(&r);
            return None;
        }
        r.generation = self.generation;
        // An undeclared page a tagged declaration gave back: name its
        // object (moved or freed).
        let unowned = matches!(r.check, Check::DmaUnowned | Check::PtUnowned);
        if let Some(h) = r
            .touch
            .as_ref()
            .filter(|t| unowned && t.pa != 0)
            .and_then(|t| self.shared.history(t.pa))
        {
            r = r.object(h);
        }
        let r = self.log().record(r);
        let mut flags = r.kind << SAN_KIND_SHIFT;
        if r.stopped {
            flags |= SAN_FLAG_STOPPED;
        }
        if let Some(h) = &r.object {
            flags |= SAN_FLAG_OBJECT | if h.moved() { SAN_FLAG_MOVED } else { 0 };
        }
        Some(Event::Sanitizer {
            ctx_id: r.ctx.unwrap_or(CTX_NONE),
            engine: r.engine.unwrap_or(engine::ALL),
            check: r.check as u32,
            flags,
            packet_va: r.at.as_ref().map_or(0, |a| a.packet_va),
            seq: r.seq,
            va: r.touch.as_ref().map_or(0, |t| t.va),
        })
    }

    /// Whether a finding about context `ctx` with `key` is new (each is
    /// reported once per context).
    pub fn first_time(&self, ctx: u32, key: (u32, u64, u64)) -> bool {
        self.log().first_time(ctx, key)
    }

    /// Forgets the shared state of context `ctx` (created or destroyed).
    pub fn context_changed(&self, ctx: u32, created: bool, now_ns: u64) {
        let mut st = self.state();
        st.rings.retain(|(c, _), _| *c != ctx);
        st.waits.retain(|(c, _), _| *c != ctx);
        st.fences.forget(ctx);
        for e in 0..engine::COUNT {
            if let Some(r) = hazard::ring_index(ctx, e) {
                st.hazards.release(r, None);
            }
        }
        let was_destroyed = st.destroyed.get(ctx as usize).copied().unwrap_or(true);
        if let Some(d) = st.destroyed.get_mut(ctx as usize) {
            *d = !created;
        }
        // A context created again by the driver's recovery after a device
        // reset is the same context: faults injected before still explain
        // what happens to it.
        if created && (was_destroyed || !st.born_ns.contains_key(&ctx)) {
            st.born_ns.insert(ctx, now_ns);
        }
        drop(st);
        if !created {
            self.log().forget_context(ctx);
        }
    }

    /// Forgets everything about the driver's work (device reset); with
    /// `driver_gone` (virtio reset) also its memory declarations.
    pub fn device_reset(&self, driver_gone: bool) {
        let mut st = self.state();
        let born = std::mem::take(&mut st.born_ns);
        *st = State::default();
        if !driver_gone {
            st.born_ns = born;
        }
        drop(st);
        self.shared.clear_uses();
        if driver_gone {
            self.shared.clear_ownership();
        }
    }

    /// An event was posted with `pending` events waiting for a driver
    /// buffer, the oldest raised at `front_ts`: waiting longer than the
    /// starvation limit means the driver does not return its event buffers
    /// (`SAN-TEARDOWN`, once per oldest event).
    pub fn events_posted(
        &self,
        now: u64,
        front_ts: Option<u64>,
        pending: usize,
        inject: &dyn InjectionLog,
    ) -> Option<Event> {
        if !self.on(Check::Teardown) {
            return None;
        }
        let front = front_ts?;
        let age = now.saturating_sub(front);
        if age < self.starve_ns() {
            return None;
        }
        {
            let mut st = self.state();
            if st.starve_reported == Some(front) {
                return None;
            }
            st.starve_reported = Some(front);
        }
        let mut rep = Report::new(
            Check::Teardown,
            now,
            format!(
                "{pending} events have waited for an event-queue buffer, the oldest for {:.0} ms: the driver is not returning (reposting) its event buffers",
                age as f64 / 1e6
            ),
        )
        .kind(vgpu_hwif::sanitize::teardown::EVENTS_STARVED);
        rep.detail = [pending as u64, age, 0, 0];
        self.emit(rep, inject)
    }

    /// Reports per check (index = check number − 1), total, suppressed.
    pub fn counts(&self) -> ([u64; CHECKS], u64, u64) {
        let l = self.log();
        (l.counts(), l.total(), l.suppressed())
    }
}

#[cfg(test)]
mod tests;
