// SPDX-License-Identifier: GPL-2.0

//! User-mode queues: contexts whose ring and doorbell block live in the
//! file's own memory — what the driver keeps of one (no I/O; the
//! operations are in [`super::uqctl`]).
//!
//! A user-mode queue is a context in a device slot like any other (its id
//! works with `CTX_QUERY`, `CTX_DESTROY`, `WAIT`), with no KMD ring: its one
//! ring is at a VA of the process's choosing, and its doorbell is a block the
//! device watches (`DOORBELL_WATCH`, docs/hardware.md §6.6). The process
//! writes packets and stores the new write pointer in the block — no ioctl
//! per submission; `UQ_KICK` only when the block says the device sleeps.
//! The ring's status block is in the slot's KMD memory, where the hang
//! check reads it.
//!
//! # A queue's states
//!
//! ```text
//!  UQ_CREATE ─▶ watched ──hang / fault / engine error──▶ errored: suspended (not watched)
//!                 │   └──engine reset of its engine──▶ suspended ─▶ watched again
//!                 │                                   (innocent: from the read pointer
//!                 │                                    where the reset stopped it)
//!                 └──CTX_DESTROY / file closed──▶ (free slot)
//! ```
//!
//! The KMD never writes a queue's ring; recovery moves its pointers instead:
//! after a reset that dropped an innocent queue's work, the watch starts
//! again at the read pointer the reset reported (or, after a device reset,
//! the one the status block showed), so the packets still in the ring run
//! again, as the KMD writes its own innocent jobs again.

use crate::{
    proto::{
        ring_state,
        RingStatus, //
    },
    time::elapsed_ns,
};
use kernel::time::{
    Instant,
    Monotonic, //
};

/// Bytes of a doorbell block.
pub(crate) const DOORBELL_BYTES: u64 = 64;

/// The driver's side of a user-mode queue.
pub(crate) struct UserQueue {
    /// The engine its ring feeds.
    pub(crate) engine: usize,
    pub(crate) ring_va: u64,
    pub(crate) ring_size: u32,
    pub(crate) doorbell_va: u64,
    /// Whether the device watches its doorbell block.
    pub(crate) watched: bool,
    /// What the status block showed at the last hang check, and since when.
    seen: Progress,
    progress_at: Instant<Monotonic>,
}

/// The parts of a ring's status block that move while it makes progress.
#[derive(Clone, Copy, PartialEq, Eq, Default)]
struct Progress {
    rptr: u32,
    wptr: u32,
    state: u32,
    packets: u64,
    last_fence: u64,
}

impl Progress {
    fn of(s: &RingStatus) -> Progress {
        Progress {
            rptr: s.rptr,
            wptr: s.wptr,
            state: s.state,
            packets: s.packets,
            last_fence: s.last_fence,
        }
    }

    /// Whether the ring has work it has not finished: accepted packets
    /// not executed, or a packet in progress or blocked.
    fn pending(&self) -> bool {
        self.rptr != self.wptr
            || self.state == ring_state::RUNNING
            || self.state == ring_state::SEM_WAIT
    }
}

/// Whether a queue's ring, as its status block `s` shows it, has work it
/// has not finished.
pub(crate) fn has_work(s: &RingStatus) -> bool {
    Progress::of(s).pending()
}

/// Whether fence `seqno` of a queue completed, as its ring's status block
/// `s` shows it: a `FENCE` with that seqno or a later one executed on it.
pub(crate) fn fence_done(s: &RingStatus, seqno: u64) -> bool {
    s.last_fence >= seqno
}

/// How a queue's ring is (re)created on the device.
#[derive(Clone, Copy)]
pub(crate) struct UqHw {
    pub(crate) engine: usize,
    pub(crate) ring_va: u64,
    pub(crate) ring_size: u32,
    pub(crate) doorbell_va: u64,
    /// The ring's read and write pointer when it is (re)created.
    pub(crate) start: u32,
    /// Watch the doorbell (not for an errored queue).
    pub(crate) watch: bool,
}

impl UserQueue {
    /// A queue as `UQ_CREATE` made it (watched, from pointer 0).
    pub(crate) fn new(hw: &UqHw) -> UserQueue {
        UserQueue {
            engine: hw.engine,
            ring_va: hw.ring_va,
            ring_size: hw.ring_size,
            doorbell_va: hw.doorbell_va,
            watched: hw.watch,
            seen: Progress::default(),
            progress_at: Instant::now(),
        }
    }

    /// Its device parameters, restarting at `start`.
    pub(crate) fn hw(&self, start: u32, watch: bool) -> UqHw {
        UqHw {
            engine: self.engine,
            ring_va: self.ring_va,
            ring_size: self.ring_size,
            doorbell_va: self.doorbell_va,
            start,
            watch,
        }
    }

    /// One look of the hang check at its status block `s`: whether it has
    /// had work without progress for `timeout_ns`.
    pub(crate) fn hung(&mut self, s: &RingStatus, timeout_ns: u64) -> bool {
        let now = Progress::of(s);
        if now != self.seen || !now.pending() {
            self.seen = now;
            self.progress_at = Instant::now();
            return false;
        }
        elapsed_ns(&self.progress_at) > timeout_ns
    }

    /// Nanoseconds left before [`UserQueue::hung`] would find it hung, if it
    /// has work (as of its last look).
    pub(crate) fn left_ns(&self, timeout_ns: u64) -> Option<u64> {
        self.seen
            .pending()
            .then(|| timeout_ns.saturating_sub(elapsed_ns(&self.progress_at)))
    }

    /// Progress starts counting again (after a reset).
    pub(crate) fn restart_clock(&mut self) {
        self.seen = Progress::default();
        self.progress_at = Instant::now();
    }
}
