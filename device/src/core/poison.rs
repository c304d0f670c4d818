//! Poisoned memory: guest-physical 4 KiB pages with an uncorrectable ECC
//! error, as a memory controller would track them.
//!
//! The `ecc` fault class poisons a page. From then on every engine *read*
//! that touches it — a copy source, a kernel load or atomic, a packet or
//! module fetch, a semaphore or timestamp read — fails instead of returning
//! data, and the job stops with the engine error `ECC_UNCORRECTABLE`. A
//! single write that covers the whole page (a `COPY` or `FILL` chunk)
//! rewrites its ECC and scrubs the poison; a partial write leaves it
//! poisoned. Resets do not clear poison: memory is not reset.
//!
//! The set is small and bounded ([`POISON_MAX`] pages, the oldest dropped
//! first); an empty set costs one atomic load per access.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// Pages held at most; poisoning one more forgets the oldest.
pub const POISON_MAX: usize = 64;

const PAGE: u64 = 4096;

/// The poisoned pages of guest memory.
#[derive(Debug, Default)]
pub struct Poison {
    len: AtomicUsize,
    pages: Mutex<Vec<u64>>,
}

impl Poison {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Vec<u64>> {
        self.pages.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether no page is poisoned (one atomic load).
    pub fn is_empty(&self) -> bool {
        self.len.load(Ordering::Acquire) == 0
    }

    /// Poisons the 4 KiB page holding `pa`; returns the page's address.
    pub fn poison(&self, pa: u64) -> u64 {
        let page = pa & !(PAGE - 1);
        let mut g = self.lock();
        if !g.contains(&page) {
            if g.len() >= POISON_MAX {
                g.remove(0);
            }
            g.push(page);
        }
        self.len.store(g.len(), Ordering::Release);
        page
    }

    /// The first poisoned page overlapping `pa..pa + len`, if any.
    pub fn hit(&self, pa: u64, len: u64) -> Option<u64> {
        if self.is_empty() || len == 0 {
            return None;
        }
        let end = pa.saturating_add(len);
        self.lock()
            .iter()
            .copied()
            .filter(|&p| p < end && p.saturating_add(PAGE) > pa)
            .min()
    }

    /// A write of `pa..pa + len`: poisoned pages it covers entirely are
    /// scrubbed. Returns how many.
    pub fn written(&self, pa: u64, len: u64) -> usize {
        if self.is_empty() || len < PAGE {
            return 0;
        }
        let end = pa.saturating_add(len);
        let mut g = self.lock();
        let before = g.len();
        g.retain(|&p| !(p >= pa && p.saturating_add(PAGE) <= end));
        self.len.store(g.len(), Ordering::Release);
        before - g.len()
    }

    /// Forgets the poison of the page holding `pa` (`None`: of every
    /// page), as if the memory had been replaced; returns how many pages.
    pub fn clear(&self, pa: Option<u64>) -> usize {
        let mut g = self.lock();
        let before = g.len();
        match pa {
            Some(pa) => g.retain(|&p| p != pa & !(PAGE - 1)),
            None => g.clear(),
        }
        self.len.store(g.len(), Ordering::Release);
        before - g.len()
    }

    /// The poisoned pages, oldest first.
    pub fn pages(&self) -> Vec<u64> {
        self.lock().clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hit_scrub_and_bound() {
        let p = Poison::new();
        assert!(p.is_empty() && p.hit(0, u64::MAX).is_none());
        assert_eq!(p.poison(0x5123), 0x5000);
        assert_eq!(p.hit(0x4ff8, 8), None);
        assert_eq!(p.hit(0x4ffc, 8), Some(0x5000));
        assert_eq!(p.hit(0x5fff, 1), Some(0x5000));
        assert_eq!(p.hit(0x6000, 4096), None);
        // Partial writes keep the poison; a covering one scrubs it.
        assert_eq!(p.written(0x5000, 4095), 0);
        assert_eq!(p.written(0x5008, 4096), 0);
        assert_eq!(p.written(0x4000, 0x3000), 1);
        assert!(p.is_empty());
        for i in 0..(POISON_MAX as u64 + 3) {
            p.poison(i * PAGE);
        }
        let pages = p.pages();
        assert_eq!(pages.len(), POISON_MAX);
        assert_eq!(pages[0], 3 * PAGE, "the oldest are forgotten");
        assert_eq!(p.clear(Some(3 * PAGE + 8)), 1);
        assert_eq!(p.clear(None), POISON_MAX - 1);
        assert!(p.is_empty());
    }
}
