//! The doorbell watch table: which doorbell blocks are watched for which
//! ring, their cached translations and whether the watcher sleeps. The
//! watcher thread and `DOORBELL_WATCH` that use it are [`super::doorbell`]'s.
//!
//! Per watched block: set → translated (its guest-physical address kept
//! like a TLB entry) → read on every pass → dropped by a covering
//! invalidation (translated again at the next read) or ended by a fault,
//! an unwatch or a device reset.
//!
//! Lock order: the table's lock, then the GPU state lock; nothing takes
//! the table's lock while holding the state lock.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// One watched doorbell block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Watch {
    /// Unique among the watches ever set.
    pub id: u64,
    /// Context.
    pub ctx: u32,
    /// Engine of the ring.
    pub engine: u32,
    /// GPU VA of the block.
    pub va: u64,
    /// The last `wptr` value taken.
    pub last: u32,
    /// Guest-physical address of the block, once translated.
    pub pa: Option<u64>,
}

/// The watcher's state (see the module documentation).
#[derive(Debug, Default)]
pub struct WatchUnit {
    /// Watched blocks, at most one per (context, engine).
    pub watches: Vec<Watch>,
    /// `DOORBELL_KICK` or a changed set of watches not yet noticed by the
    /// watcher thread.
    pub kicked: bool,
    /// Whether the watcher sleeps (every block's `sleeping` written 1).
    pub sleeping: bool,
    /// Doorbells taken from blocks since power-on.
    pub seen: u64,
    /// Times the watcher went to sleep.
    pub sleeps: u64,
    /// The next watch's id.
    pub next_id: u64,
    /// `invalidate` calls since power-on: a scan keeps the translations it
    /// made only if none came while it read (see [`WatchUnit::merge`]).
    pub invalidations: u64,
}

impl WatchUnit {
    /// The watch `seen` as a scan that began at `invalidations` == `gen`
    /// read it, merged into its registered version `now`: the translation
    /// the scan made is kept only if no `invalidate` came meanwhile —
    /// otherwise it may be of a page unmapped since, and the next scan
    /// walks the page tables again.
    pub fn merge(&self, gen: u64, now: Watch, seen: &Watch) -> Watch {
        let mut m = now;
        if self.invalidations == gen {
            m.pa = now.pa.or(seen.pa);
        }
        m
    }
}

/// The watcher: its state and the condition its thread sleeps on.
#[derive(Debug)]
pub struct Watcher {
    unit: Mutex<WatchUnit>,
    wake: Condvar,
    /// How long polling goes on after the last activity.
    pub poll_window: Duration,
}

impl Watcher {
    /// A watcher with nothing to watch.
    pub fn new(poll_window: Duration) -> Watcher {
        Watcher {
            unit: Mutex::new(WatchUnit::default()),
            wake: Condvar::new(),
            poll_window,
        }
    }

    /// Locks the watcher's state.
    pub fn lock(&self) -> MutexGuard<'_, WatchUnit> {
        self.unit.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `DOORBELL_KICK`: look at every block now and poll again.
    pub fn kick(&self) {
        self.lock().kicked = true;
        self.wake.notify_all();
    }

    /// Drops the cached translations of blocks of `ctx` in `va..va + size`
    /// (`size` 0: all of the context's).
    pub fn invalidate(&self, ctx: u32, va: u64, size: u64) {
        let mut u = self.lock();
        u.invalidations += 1;
        for w in u.watches.iter_mut().filter(|w| w.ctx == ctx) {
            let hit = size == 0 || (w.va >= va && w.va - va < size);
            if hit {
                w.pa = None;
            }
        }
    }

    /// Stops watching for context `ctx` (every engine with `engine` None).
    pub fn forget(&self, ctx: u32, engine: Option<u32>) {
        self.lock()
            .watches
            .retain(|w| w.ctx != ctx || engine.is_some_and(|e| e != w.engine));
    }

    /// Stops every watch (device reset).
    pub fn clear(&self) {
        let mut u = self.lock();
        u.watches.clear();
        u.sleeping = false;
    }

    /// Sleeps until a kick, a new or stopped watch, or `shutdown` (the
    /// watcher is marked sleeping meanwhile).
    pub fn sleep(&self, shutdown: &AtomicBool) {
        let mut u = self.lock();
        u.sleeping = true;
        u.sleeps += 1;
        while !u.kicked && !shutdown.load(Ordering::Acquire) {
            u = self.wake.wait(u).unwrap_or_else(PoisonError::into_inner);
        }
        u.sleeping = false;
    }

    /// Wakes the thread for shutdown (the caller set `Gpu::shutdown`).
    pub fn shut_down(&self) {
        drop(self.lock());
        self.wake.notify_all();
    }

    /// Watches `w` (replacing the watch of its ring, if any) and wakes
    /// the thread.
    pub fn set(&self, mut w: Watch) {
        let mut u = self.lock();
        u.next_id += 1;
        w.id = u.next_id;
        u.watches.retain(|o| (o.ctx, o.engine) != (w.ctx, w.engine));
        u.watches.push(w);
        u.kicked = true;
        drop(u);
        self.wake.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A watcher with one untranslated watch, and a scan of it begun: the
    /// invalidation count it began at and the watch as it translated it.
    fn scan_begun() -> (Watcher, u64, Watch) {
        let w = Watcher::new(Duration::from_millis(1));
        w.lock().watches.push(Watch {
            id: 1,
            ctx: 1,
            engine: 0,
            va: 0x40_0000,
            last: 0,
            pa: None,
        });
        let (gen, mut seen) = {
            let u = w.lock();
            (u.invalidations, u.watches[0])
        };
        seen.pa = Some(0x1000);
        (w, gen, seen)
    }

    #[test]
    fn a_translation_made_during_an_invalidation_is_not_kept() {
        let (w, gen, seen) = scan_begun();
        // The driver unmaps the block and invalidates while the scan reads.
        w.invalidate(1, 0x40_0000, 4096);
        let u = w.lock();
        assert_eq!(u.merge(gen, u.watches[0], &seen).pa, None);
    }

    #[test]
    fn a_translation_made_undisturbed_is_kept() {
        let (w, gen, seen) = scan_begun();
        let u = w.lock();
        assert_eq!(u.merge(gen, u.watches[0], &seen).pa, Some(0x1000));
    }
}
