//! Partitions: one GPU shared by several virtual functions, SR-IOV style
//! (docs/hardware.md section 17). Each VF is a whole device model of its
//! own — contexts, rings, MMU, firmware, injector, sanitizer, resets — over
//! its own guest memory and its own window of the device's VRAM; what the
//! VFs share is engine time, handed out here.
//!
//! # The engine arbiter
//!
//! Each engine (copy, compute) has one owner at a time. A VF's engine
//! thread that has a ring to run asks for its engine ([`Arbiter::acquire`])
//! and gives it back after one slice ([`Arbiter::release`]), with the time
//! it used. The arbiter is weighted fair queueing over virtual time, as
//! CFS and xe's per-VF execution quanta mean it:
//!
//! * a VF's virtual time grows by the engine time it used divided by its
//!   weight; the waiting VF with the least virtual time goes next (ties:
//!   the one waiting longest);
//! * a VF that was idle starts at the least virtual time of those that
//!   want the engine, so it cannot bank idle time and then hold the
//!   engine for long;
//! * while another VF waits, a slice ends at [`VF_SLICE`] at the latest
//!   ([`Arbiter::contended`]), whatever the VF's own firmware allows: a
//!   hostile VF costs the others at most one such slice per turn.
//!
//! ```text
//!   idle ──acquire──▶ waiting ──(least virtual time, engine free)──▶ owner
//!    ▲                   │ interrupted (its mailbox, shutdown)          │
//!    └───────────────────┴──────────────────release(used)───────────────┘
//! ```
//!
//! Lock order: a VF's GPU state lock is never held while a lane's lock is
//! taken (the engine thread drops it before [`Arbiter::acquire`]).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::config::{PartitionConfig, MAX_VFS, MAX_WEIGHT};

/// Engines the arbiter hands out.
const ENGINES: usize = vgpu_hwif::proto::engine::COUNT as usize;
/// VF slots (`vf - 1`).
const SLOTS: usize = MAX_VFS as usize;

/// The longest slice a VF keeps an engine while another VF waits for it.
pub const VF_SLICE: Duration = Duration::from_millis(2);

/// A VF that asks again within this time of giving the engine back is
/// still busy (it keeps its virtual time); later, it was idle.
const IDLE_AFTER: Duration = Duration::from_millis(10);

/// How long a waiting engine thread sleeps before it looks at its own
/// mailbox again.
const WAIT_POLL: Duration = Duration::from_millis(5);

/// One VF's use of one engine.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// Engine time it used.
    pub busy_ns: u64,
    /// Time it waited for the engine while another VF held it.
    pub waited_ns: u64,
    /// Longest single wait.
    pub max_wait_ns: u64,
    /// Times it was given the engine.
    pub grants: u64,
}

#[derive(Debug, Default)]
struct LaneState {
    owner: Option<usize>,
    /// Virtual time per slot: engine ns * MAX_WEIGHT / weight.
    vtime: [u64; SLOTS],
    /// When each waiting slot started waiting.
    waiting: [Option<Instant>; SLOTS],
    usage: [Usage; SLOTS],
    /// The virtual time of the last grant: it only grows, and a VF that
    /// was idle starts no lower (CFS's `min_vruntime`).
    min_vtime: u64,
    /// When each slot last gave the engine back.
    released: [Option<Instant>; SLOTS],
}

impl LaneState {
    /// The slot that goes next: the least virtual time among the waiting,
    /// then the longest wait.
    fn next(&self) -> Option<usize> {
        (0..SLOTS)
            .filter_map(|i| {
                let since = self.waiting.get(i).copied().flatten()?;
                Some((self.vtime.get(i).copied().unwrap_or(u64::MAX), since, i))
            })
            .min()
            .map(|(_, _, i)| i)
    }
}

#[derive(Debug, Default)]
struct Lane {
    st: Mutex<LaneState>,
    cv: Condvar,
    /// Slots waiting (read without the lock by a running slice).
    waiters: AtomicU32,
}

impl Lane {
    fn lock(&self) -> MutexGuard<'_, LaneState> {
        self.st.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The engines' arbiter, shared by every VF of one device.
#[derive(Debug)]
pub struct Arbiter {
    lanes: [Lane; ENGINES],
    weights: [AtomicU32; SLOTS],
}

impl Default for Arbiter {
    fn default() -> Self {
        Arbiter {
            lanes: Default::default(),
            weights: std::array::from_fn(|_| AtomicU32::new(1)),
        }
    }
}

/// Errors of this module.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArbiterError {
    /// No such VF slot.
    #[error("no virtual function {0} (1..={MAX_VFS})")]
    NoSuchVf(u32),
    /// A weight outside `1..=MAX_WEIGHT`.
    #[error("weight {0} out of range 1..={MAX_WEIGHT}")]
    Weight(u32),
}

fn slot(vf: u32) -> Result<usize, ArbiterError> {
    let i = vf.checked_sub(1).ok_or(ArbiterError::NoSuchVf(vf))? as usize;
    if i < SLOTS {
        Ok(i)
    } else {
        Err(ArbiterError::NoSuchVf(vf))
    }
}

impl Arbiter {
    /// An arbiter with every weight 1 and no history.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets VF `vf`'s weight (from its next turn on).
    ///
    /// # Errors
    /// [`ArbiterError`] for a VF or weight out of range.
    pub fn set_weight(&self, vf: u32, weight: u32) -> Result<(), ArbiterError> {
        let i = slot(vf)?;
        if !(1..=MAX_WEIGHT).contains(&weight) {
            return Err(ArbiterError::Weight(weight));
        }
        if let Some(w) = self.weights.get(i) {
            w.store(weight, Ordering::Relaxed);
        }
        Ok(())
    }

    /// VF `vf`'s weight.
    pub fn weight(&self, vf: u32) -> u32 {
        slot(vf)
            .ok()
            .and_then(|i| self.weights.get(i))
            .map_or(0, |w| w.load(Ordering::Relaxed))
    }

    /// Forgets VF `vf`'s history (a new VF in that slot).
    pub fn forget(&self, vf: u32) {
        let Ok(i) = slot(vf) else { return };
        for lane in &self.lanes {
            let mut s = lane.lock();
            if let Some(u) = s.usage.get_mut(i) {
                *u = Usage::default();
            }
            if let Some(v) = s.vtime.get_mut(i) {
                *v = 0;
            }
        }
    }

    /// Waits until VF `vf` owns engine `e`; `None` (not owning it) when
    /// `interrupted` says so first (the VF's own mailbox or shutdown),
    /// checked at least every few milliseconds.
    pub fn acquire(&self, e: usize, vf: u32, interrupted: &dyn Fn() -> bool) -> Option<Grant> {
        let (Some(lane), Ok(i)) = (self.lanes.get(e), slot(vf)) else {
            return None;
        };
        let mut s = lane.lock();
        let start = Instant::now();
        if s.waiting.get(i).is_some_and(Option::is_none) {
            // Back within IDLE_AFTER of its last slice: still busy, its
            // virtual time stands. Otherwise it was idle.
            let busy = s
                .released
                .get(i)
                .copied()
                .flatten()
                .is_some_and(|t| start.saturating_duration_since(t) < IDLE_AFTER);
            let floor = s.min_vtime;
            if let (false, Some(v)) = (busy, s.vtime.get_mut(i)) {
                *v = (*v).max(floor);
            }
            if let Some(w) = s.waiting.get_mut(i) {
                *w = Some(start);
            }
            lane.waiters.fetch_add(1, Ordering::AcqRel);
        }
        loop {
            if s.owner.is_none() && s.next() == Some(i) {
                let since = s.waiting.get_mut(i).and_then(Option::take).unwrap_or(start);
                lane.waiters.fetch_sub(1, Ordering::AcqRel);
                s.owner = Some(i);
                s.min_vtime = s.min_vtime.max(s.vtime.get(i).copied().unwrap_or(0));
                let now = Instant::now();
                let waited = u64::try_from(now.saturating_duration_since(since).as_nanos())
                    .unwrap_or(u64::MAX);
                if let Some(u) = s.usage.get_mut(i) {
                    u.grants = u.grants.saturating_add(1);
                    u.waited_ns = u.waited_ns.saturating_add(waited);
                    u.max_wait_ns = u.max_wait_ns.max(waited);
                }
                return Some(Grant {
                    engine: e,
                    slot: i,
                    since: now,
                });
            }
            if interrupted() {
                if let Some(w) = s.waiting.get_mut(i) {
                    if w.take().is_some() {
                        lane.waiters.fetch_sub(1, Ordering::AcqRel);
                    }
                }
                lane.cv.notify_all();
                return None;
            }
            s = lane
                .cv
                .wait_timeout(s, WAIT_POLL)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Gives the engine back after a slice; its time counts for the VF.
    /// With `again` (the VF has more to run) the VF stays in line at once,
    /// so that the next owner is chosen with it among the waiting.
    pub fn release(&self, grant: Grant, again: bool) {
        let Some(lane) = self.lanes.get(grant.engine) else {
            return;
        };
        let used = u64::try_from(grant.since.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let weight = self
            .weights
            .get(grant.slot)
            .map_or(1, |w| w.load(Ordering::Relaxed).max(1));
        let mut s = lane.lock();
        if s.owner == Some(grant.slot) {
            s.owner = None;
        }
        if let Some(v) = s.vtime.get_mut(grant.slot) {
            *v = v.saturating_add(used.saturating_mul(u64::from(MAX_WEIGHT)) / u64::from(weight));
        }
        if let Some(u) = s.usage.get_mut(grant.slot) {
            u.busy_ns = u.busy_ns.saturating_add(used);
        }
        let now = Instant::now();
        if let Some(r) = s.released.get_mut(grant.slot) {
            *r = Some(now);
        }
        if let (true, Some(w @ None)) = (again, s.waiting.get_mut(grant.slot)) {
            *w = Some(now);
            lane.waiters.fetch_add(1, Ordering::AcqRel);
        }
        drop(s);
        lane.cv.notify_all();
    }

    /// VF `vf` no longer wants engine `e` (it found nothing to run after
    /// [`Arbiter::release`] with `again`).
    pub fn withdraw(&self, e: usize, vf: u32) {
        let (Some(lane), Ok(i)) = (self.lanes.get(e), slot(vf)) else {
            return;
        };
        let mut s = lane.lock();
        if s.waiting.get_mut(i).and_then(Option::take).is_some() {
            lane.waiters.fetch_sub(1, Ordering::AcqRel);
            drop(s);
            lane.cv.notify_all();
        }
    }

    /// Whether a VF waits for engine `e` (the owner's slice then ends at
    /// [`VF_SLICE`]).
    pub fn contended(&self, e: usize) -> bool {
        self.lanes
            .get(e)
            .is_some_and(|l| l.waiters.load(Ordering::Acquire) > 0)
    }

    /// VF `vf`'s use of engine `e` so far.
    pub fn usage(&self, e: usize, vf: u32) -> Usage {
        let (Some(lane), Ok(i)) = (self.lanes.get(e), slot(vf)) else {
            return Usage::default();
        };
        lane.lock().usage.get(i).copied().unwrap_or_default()
    }
}

/// What the VFs of one device share: the engines' arbiter and the
/// device's VRAM memfd their windows are cut from.
#[derive(Debug, Clone)]
pub struct Shared {
    /// The engines' arbiter.
    pub arbiter: Arc<Arbiter>,
    /// The device's VRAM (none: the VFs have no VRAM).
    pub vram: Option<Arc<std::fs::File>>,
}

/// A VF's place in its device: its partition and the shared arbiter.
#[derive(Debug, Clone)]
pub struct Partition {
    /// Its partition.
    pub cfg: PartitionConfig,
    /// The arbiter it shares with the other VFs.
    pub arbiter: Arc<Arbiter>,
}

/// Ownership of one engine by one VF, from [`Arbiter::acquire`] to
/// [`Arbiter::release`].
#[derive(Debug)]
#[must_use = "the engine stays taken until the grant is released"]
pub struct Grant {
    engine: usize,
    slot: usize,
    since: Instant,
}

impl Grant {
    /// When the VF got the engine.
    pub fn since(&self) -> Instant {
        self.since
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_and_vfs_are_checked() {
        let a = Arbiter::new();
        assert_eq!(a.set_weight(0, 1), Err(ArbiterError::NoSuchVf(0)));
        assert_eq!(a.set_weight(MAX_VFS + 1, 1), Err(ArbiterError::NoSuchVf(9)));
        assert_eq!(a.set_weight(1, 0), Err(ArbiterError::Weight(0)));
        assert_eq!(
            a.set_weight(1, MAX_WEIGHT + 1),
            Err(ArbiterError::Weight(101))
        );
        a.set_weight(2, 3).unwrap();
        assert_eq!(a.weight(2), 3);
        assert!(a.acquire(5, 1, &|| false).is_none(), "no such engine");
        assert!(a.acquire(0, 0, &|| false).is_none(), "no such VF");
    }

    #[test]
    fn an_uncontended_vf_gets_the_engine_at_once_and_its_time_counts() {
        let a = Arbiter::new();
        let g = a.acquire(0, 1, &|| false).unwrap();
        assert!(!a.contended(0));
        std::thread::sleep(Duration::from_millis(3));
        a.release(g, false);
        let u = a.usage(0, 1);
        assert_eq!(u.grants, 1);
        assert!(u.busy_ns >= 3_000_000, "{u:?}");
        assert_eq!(
            a.usage(1, 1),
            Usage::default(),
            "the other engine is untouched"
        );
    }

    #[test]
    fn a_waiting_vf_is_interrupted_by_its_own_mailbox() {
        let a = Arc::new(Arbiter::new());
        let g = a.acquire(0, 1, &|| false).unwrap();
        let t0 = Instant::now();
        assert!(a
            .acquire(0, 2, &|| t0.elapsed() > Duration::from_millis(20))
            .is_none());
        assert!(!a.contended(0), "the interrupted VF no longer waits");
        a.release(g, false);
        assert!(a.acquire(0, 2, &|| false).is_some());
    }

    /// A VF idle while another ran (never served, or back after more than
    /// `IDLE_AFTER`) starts at the last grant's virtual
    /// time, not at its own old one.
    #[test]
    fn an_idle_vf_banks_no_credit() {
        let a = Arbiter::new();
        for _ in 0..3 {
            let g = a.acquire(0, 1, &|| false).unwrap();
            std::thread::sleep(Duration::from_millis(2));
            a.release(g, false);
        }
        let g = a.acquire(0, 1, &|| false).unwrap();
        let before = a.lanes[0].lock().min_vtime;
        assert!(before >= 4_000_000 * u64::from(MAX_WEIGHT), "{before}");
        a.release(g, false);
        std::thread::sleep(IDLE_AFTER);
        let g = a.acquire(0, 2, &|| false).unwrap();
        assert_eq!(
            a.lanes[0].lock().vtime[1],
            before,
            "VF 2 starts at VF 1's last grant"
        );
        a.release(g, false);
    }

    /// Virtual time in isolation: who goes next after given use.
    #[test]
    fn the_least_virtual_time_goes_next() {
        let mut s = LaneState::default();
        let now = Instant::now();
        s.vtime = [50, 10, 30, 0, 0, 0, 0, 0];
        s.waiting[0] = Some(now);
        s.waiting[2] = Some(now);
        assert_eq!(s.next(), Some(2));
        s.waiting[1] = Some(now + Duration::from_millis(1));
        assert_eq!(s.next(), Some(1));
    }

    /// Two VFs, weights 1 and 3, each looping on 1 ms slices: the engine
    /// time splits about 1:3.
    #[test]
    fn busy_vfs_share_an_engine_by_weight() {
        let a = Arc::new(Arbiter::new());
        a.set_weight(1, 1).unwrap();
        a.set_weight(2, 3).unwrap();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let threads: Vec<_> = [1u32, 2]
            .into_iter()
            .map(|vf| {
                let (a, stop) = (a.clone(), stop.clone());
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        if let Some(g) = a.acquire(0, vf, &|| false) {
                            let end = Instant::now() + Duration::from_millis(1);
                            while Instant::now() < end {
                                std::hint::spin_loop();
                            }
                            a.release(g, true);
                        }
                    }
                    a.withdraw(0, vf);
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(600));
        stop.store(true, Ordering::Relaxed);
        for t in threads {
            t.join().unwrap();
        }
        assert!(!a.contended(0));
        let (u1, u2) = (a.usage(0, 1), a.usage(0, 2));
        let ratio = u2.busy_ns as f64 / u1.busy_ns.max(1) as f64;
        assert!(
            (2.0..4.5).contains(&ratio),
            "weights 1:3 gave {ratio:.2} ({u1:?} {u2:?})"
        );
        assert!(u1.grants > 10 && u2.grants > 10);
    }
}
