//! Rings and doorbells: `SAN-RING-UNPUBLISHED`, `SAN-RING-INDEX`, and the
//! doorbell side of `SAN-TEARDOWN`.
//!
//! # State machine, per ring
//!
//! ```text
//!   DOORBELL (control side) ──▶ snapshot the newly published words
//!        │                       [old end, wptr) of the ring; history += wptr
//!        ▼
//!   published, not fetched ──── engine fetches word p ──▶ compare with the
//!        │                                                 snapshot, drop it
//!        └── engine reset / ring gone ──▶ dropped up to the new read pointer
//! ```
//!
//! A fetched word that differs from its snapshot changed after the doorbell
//! that published it: `SAN-RING-UNPUBLISHED`. A doorbell whose write
//! pointer would overwrite snapshot words not fetched yet is an overrun;
//! the engine's own pointer checks (backwards, misaligned, past the ring)
//! and a packet that ends past the write pointer are `SAN-RING-INDEX`,
//! each with the ring's last [`SAN_HISTORY`] doorbells.
//!
//! With the sanitizer on the engine also takes a doorbell only once it is
//! [`super::SanConfig::fetch_delay`] old: on x86 a missing write barrier
//! rarely shows, so the device gives a driver that rang early time to
//! finish its writes, which the comparison then sees.

use std::collections::VecDeque;

use vgpu_hwif::sanitize::SAN_HISTORY;

/// Snapshot words kept per ring (the largest ring).
const MAX_SNAPSHOT_WORDS: usize = (vgpu_hwif::proto::MAX_RING_SIZE / 4) as usize;

/// The sanitizer's view of one ring.
#[derive(Debug, Default, Clone)]
pub struct RingSan {
    /// Ring pointer of the first snapshot word.
    pub snap_start: u32,
    /// Words published and not fetched yet, as they were at their doorbell
    /// (`None`: not readable then).
    pub snap: VecDeque<Option<u32>>,
    /// The doorbell that published the oldest snapshot word and when.
    pub snap_doorbells: VecDeque<(u32, u64)>,
    /// The last doorbells: (write pointer, device time), oldest first.
    pub history: VecDeque<(u32, u64)>,
    /// Device time of the newest doorbell.
    pub last_doorbell_ns: u64,
    /// A doorbell held back by the fetch delay.
    pub held: Option<u32>,
    /// Device time of the last stop of this ring the driver was told of
    /// (the `ENGINE_ERROR` or `FAULT` event delivered).
    pub stop_seen_ns: Option<u64>,
    /// A `CONTEXT_DESTROY`/`RING_DESTROY` refused while the ring ran:
    /// checked when the slice ends (device time of the destroy).
    pub destroy_refused_ns: Option<u64>,
    /// A doorbell value already reported as an overrun (no second report
    /// when the engine then refuses it).
    pub overrun_reported: Option<u32>,
}

/// A word that changed after its doorbell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Changed {
    /// Ring pointer of the word.
    pub ptr: u32,
    /// The word at the doorbell (`None`: unreadable).
    pub then: Option<u32>,
    /// The word fetched.
    pub now: u32,
    /// The doorbell that published it and when.
    pub doorbell: (u32, u64),
}

impl RingSan {
    /// Appends a doorbell to the history.
    pub fn note_doorbell(&mut self, wptr: u32, now_ns: u64) {
        if self.history.len() >= SAN_HISTORY {
            self.history.pop_front();
        }
        self.history.push_back((wptr, now_ns));
        self.last_doorbell_ns = now_ns;
    }

    /// The history's write pointers, oldest first.
    pub fn history_ptrs(&self) -> Vec<u32> {
        self.history.iter().map(|&(w, _)| w).collect()
    }

    /// One past the last snapshot word.
    pub fn snap_end(&self) -> u32 {
        self.snap_start
            .wrapping_add((self.snap.len() as u32).wrapping_mul(4))
    }

    /// Where new words of a doorbell to `wptr` start, and how many bytes
    /// are new (0 if the doorbell publishes nothing new: a repeat, or a
    /// pointer behind).
    pub fn new_range(&self, wptr: u32, rptr: u32) -> (u32, u32) {
        let start = if self.snap.is_empty() {
            rptr.max_wrapping(self.snap_end())
        } else {
            self.snap_end()
        };
        let n = wptr.wrapping_sub(start);
        if (n as i32) <= 0 {
            (start, 0)
        } else {
            (start, n)
        }
    }

    /// Whether a doorbell to `wptr` would overrun words not fetched yet in
    /// a ring of `size` bytes.
    pub fn overruns(&self, wptr: u32, size: u32) -> bool {
        !self.snap.is_empty() && wptr.wrapping_sub(self.snap_start) > size
    }

    /// Adds the words a doorbell to `doorbell` published from `start`.
    pub fn push_words(&mut self, start: u32, words: &[Option<u32>], doorbell: (u32, u64)) {
        if self.snap.is_empty() {
            self.snap_start = start;
        }
        for w in words {
            if self.snap.len() >= MAX_SNAPSHOT_WORDS {
                self.snap.pop_front();
                self.snap_start = self.snap_start.wrapping_add(4);
            }
            self.snap.push_back(*w);
        }
        self.snap_doorbells.push_back(doorbell);
        while self.snap_doorbells.len() > SAN_HISTORY {
            self.snap_doorbells.pop_front();
        }
    }

    /// The doorbell that published the word at `ptr` (the first doorbell
    /// at or after it).
    fn doorbell_of(&self, ptr: u32) -> (u32, u64) {
        self.snap_doorbells
            .iter()
            .copied()
            .find(|&(w, _)| (w.wrapping_sub(ptr) as i32) > 0)
            .or_else(|| self.snap_doorbells.back().copied())
            .unwrap_or((0, 0))
    }

    /// Drops snapshot words before `ptr` (fetched, or discarded by a reset).
    pub fn drop_before(&mut self, ptr: u32) {
        while !self.snap.is_empty() && (ptr.wrapping_sub(self.snap_start) as i32) > 0 {
            self.snap.pop_front();
            self.snap_start = self.snap_start.wrapping_add(4);
        }
        if self.snap.is_empty() {
            self.snap_start = ptr;
            self.snap_doorbells.clear();
        }
    }

    /// The engine fetched `words` from ring pointer `ptr`: compares them
    /// with the snapshot and drops them from it. Returns the first word
    /// that changed.
    pub fn fetched(&mut self, ptr: u32, words: &[u32]) -> Option<Changed> {
        self.drop_before(ptr);
        let mut changed = None;
        for (i, &now) in words.iter().enumerate() {
            let p = ptr.wrapping_add(4 * i as u32);
            if self.snap.is_empty() || p != self.snap_start {
                break;
            }
            let then = self.snap.front().copied().flatten();
            if changed.is_none() && then != Some(now) {
                changed = Some(Changed {
                    ptr: p,
                    then,
                    now,
                    doorbell: self.doorbell_of(p),
                });
            }
            self.snap.pop_front();
            self.snap_start = self.snap_start.wrapping_add(4);
        }
        if self.snap.is_empty() {
            self.snap_doorbells.clear();
        }
        changed
    }

    /// Forgets everything but the history (the ring was reset or created
    /// again): the engine restarts at `rptr`.
    pub fn restart(&mut self, rptr: u32) {
        self.snap.clear();
        self.snap_doorbells.clear();
        self.snap_start = rptr;
        self.held = None;
        self.overrun_reported = None;
        self.destroy_refused_ns = None;
    }
}

/// `max` of two ring pointers in wrapping order.
trait MaxWrapping {
    fn max_wrapping(self, other: u32) -> u32;
}

impl MaxWrapping for u32 {
    fn max_wrapping(self, other: u32) -> u32 {
        if (other.wrapping_sub(self) as i32) > 0 {
            other
        } else {
            self
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_changed_after_their_doorbell_are_found() {
        let mut r = RingSan::default();
        let (start, n) = r.new_range(16, 0);
        assert_eq!((start, n), (0, 16));
        r.push_words(0, &[Some(1), Some(2), Some(3), Some(4)], (16, 100));
        assert_eq!(r.snap_end(), 16);
        assert_eq!(r.fetched(0, &[1, 2]), None);
        let c = r.fetched(8, &[3, 9]).unwrap();
        assert_eq!(
            c,
            Changed {
                ptr: 12,
                then: Some(4),
                now: 9,
                doorbell: (16, 100)
            }
        );
        assert!(r.snap.is_empty());
        // A word fetched again (prefetch reset) is not compared twice.
        assert_eq!(r.fetched(8, &[7, 7]), None);
    }

    #[test]
    fn overruns_and_resets() {
        let mut r = RingSan::default();
        r.push_words(0, &[Some(0); 8], (32, 1));
        assert!(!r.overruns(4096, 4096));
        assert!(r.overruns(4100, 4096), "would overwrite word 0, unread");
        r.restart(32);
        assert!(!r.overruns(4100, 4096));
        assert_eq!(r.new_range(64, 32), (32, 32));
        // Across the 2^32 wrap.
        let near = u32::MAX - 7;
        r.restart(near);
        assert_eq!(r.new_range(near.wrapping_add(16), near), (near, 16));
        r.push_words(near, &[Some(5); 4], (near.wrapping_add(16), 2));
        assert_eq!(r.fetched(near, &[5, 5, 5, 5]), None);
        assert_eq!(r.snap_start, near.wrapping_add(16));
    }

    #[test]
    fn history_keeps_the_last_doorbells() {
        let mut r = RingSan::default();
        for i in 0..12u32 {
            r.note_doorbell(i * 4, u64::from(i));
        }
        assert_eq!(r.history_ptrs(), (4..12).map(|i| i * 4).collect::<Vec<_>>());
    }
}
