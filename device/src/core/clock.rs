//! The device clock: nanoseconds since the device started, never going
//! backwards. Event records carry its readings.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// A source of device time.
pub trait Clock: Send + Sync {
    /// Nanoseconds since the device started. Never decreases.
    fn now_ns(&self) -> u64;
}

/// The host's monotonic clock, counted from the moment of construction.
#[derive(Debug, Clone, Copy)]
pub struct MonotonicClock {
    start: Instant,
}

impl MonotonicClock {
    /// A clock reading 0 now.
    pub fn new() -> Self {
        MonotonicClock {
            start: Instant::now(),
        }
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for MonotonicClock {
    fn now_ns(&self) -> u64 {
        // u64 nanoseconds last 584 years; saturate rather than wrap.
        u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

/// A clock that only moves when told to: deterministic time for tests and
/// simulations. Clones share the same time.
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    now: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock reading `start_ns`.
    pub fn new(start_ns: u64) -> Self {
        ManualClock {
            now: Arc::new(AtomicU64::new(start_ns)),
        }
    }

    /// Moves the clock forward by `delta_ns` (saturating).
    pub fn advance(&self, delta_ns: u64) {
        let _ = self
            .now
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |t| {
                Some(t.saturating_add(delta_ns))
            });
    }
}

impl Clock for ManualClock {
    fn now_ns(&self) -> u64 {
        self.now.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_clock_never_goes_back() {
        let c = MonotonicClock::new();
        let mut last = c.now_ns();
        for _ in 0..1000 {
            let t = c.now_ns();
            assert!(t >= last);
            last = t;
        }
    }

    #[test]
    fn manual_clock_moves_only_when_advanced() {
        let c = ManualClock::new(10);
        let shared = c.clone();
        assert_eq!(c.now_ns(), 10);
        shared.advance(5);
        assert_eq!(c.now_ns(), 15);
        c.advance(u64::MAX);
        assert_eq!(shared.now_ns(), u64::MAX);
    }
}
