// SPDX-License-Identifier: GPL-2.0

//! The job queue's scheduler: moves jobs from the KMD's queues to the
//! rings, in the shape of drm_sched (a queue per context and engine — an
//! entity —, jobs held until their dependencies signal, then run in
//! submission order as the ring allows), written here on the driver's own
//! rings and reset ladder rather than driving the C scheduler.
//!
//! A queued job ([`super::queue::Queued`]) goes to its ring when
//!
//! * every job queued before it on that ring went (FIFO per ring),
//! * each of its dependencies signalled (with or without an error: a
//!   failed dependency counts as done, as `SUBMIT`'s in_fences always
//!   have), and
//! * the ring has room for its packets.
//!
//! The worker ([`Gpu::pump`]) runs in process context: from `SUBMIT` after
//! queueing, from the GPU's work item (queued by a dependency's fence
//! callback, which runs in any context and only kicks, and by the event
//! handler when a `FENCE` event made room on a ring with queued jobs), after
//! a reset, and from every hang check (a safety net). It takes a doorbell
//! slot before the state lock, like `SUBMIT`, writes the ready jobs of one
//! ring and posts its doorbell under the lock, and loops.
//!
//! Timeouts: a job's time on the ring is what the hang check measures
//! (`job_timeout_ms`, [`super::reset`]); a job waiting for a dependency is
//! not hung — a dependency that never signals keeps it queued until the
//! context is destroyed or its file closed, which cancels it
//! (`-ECANCELED`). Jobs queued on an errored or banned context fail
//! (`-EIO`) once the jobs before them on the ring are done.

use super::{
    queue::Queued,
    ring::{
        ring_va,
        Job,
        SlotMemory,
        ENGINES,
        RING_SIZE, //
    },
    state::{
        Dep,
        Gpu,
        GpuState, //
    },
};
use crate::{
    dev_warn_ratelimited,
    ffi_sync::Kick,
    ktrace::{
        JobAt,
        Trace, //
    },
};
use core::fmt;
use kernel::{
    bindings,
    prelude::*,
    sync::{
        atomic::Relaxed,
        Arc, //
    },
    time::Instant,
    workqueue::{
        self,
        WorkItem, //
    },
};

impl Kick for Gpu {
    fn kick(this: &Arc<Gpu>) {
        // Already queued: the queued run will see this fence signalled.
        let _ = workqueue::system().enqueue(this.clone());
    }
}

impl WorkItem for Gpu {
    type Pointer = Arc<Gpu>;

    fn run(this: Arc<Gpu>) {
        if this.check_usable().is_err() {
            return;
        }
        this.pump();
        this.run_binds();
    }
}

/// What one pass of the scheduler found for a ring.
enum Ready {
    /// The head job can go: the ring `(slot, engine)`.
    Ring(u32, usize),
    /// Nothing can go now.
    Nothing,
}

impl Gpu {
    /// Kicks the worker if an event asked for it (`pump_wanted`).
    pub(crate) fn kick_if_wanted(self: &Arc<Self>) {
        if self.pump_wanted.xchg(false, Relaxed) {
            Gpu::kick(self);
        }
    }

    /// Moves every ready job from the queues to the rings (see the module
    /// documentation). Returns when nothing more can go now.
    pub(crate) fn pump(&self) {
        let Ok(mem) = self.slots() else { return };
        loop {
            // Decide without a doorbell slot first: most calls find nothing.
            {
                let mut g = self.state.lock();
                let dead = Self::fail_dead_queues(&mut g, mem);
                let idle =
                    g.resetting || g.wedged || matches!(Self::ready(&g, mem), Ready::Nothing);
                drop(g);
                if !dead.is_empty() {
                    drop(dead);
                    self.wake();
                }
                if idle {
                    return;
                }
            };
            // Before the state lock: reserving may wait for the device.
            let Ok(slot) = self.hw.reserve_doorbell() else {
                return;
            };
            let mut g = self.state.lock();
            if g.resetting || g.wedged {
                return;
            }
            let Ready::Ring(hw, e) = Self::ready(&g, mem) else {
                return;
            };
            let Some(c) = g.slot(hw) else { return };
            let wptr = Self::drain_queue(c, hw, e, mem, &self.hw.trace);
            if let Err(err) = self.hw.post_doorbell(slot, hw, e as u32, wptr) {
                // The device state is unknown: the jobs are treated as lost.
                if let Some(c) = g.slot(hw) {
                    c.rings[e].fail_pending();
                }
                if let Ok(mem) = self.slots() {
                    g.release_failed(mem);
                }
                drop(g);
                dev_warn_ratelimited!(
                    self.pdev(),
                    "queue of context slot {} engine {}: doorbell failed (error {}): its jobs are lost\n",
                    hw,
                    e,
                    err.to_errno()
                );
                self.wake();
                return;
            }
        }
    }

    /// Whether the head job of queue `(c, e)` can go to its ring now.
    fn head_ready(g: &GpuState, hw: u32, e: usize, mem: &SlotMemory) -> bool {
        let Some(c) = g.slots.get(hw as usize).and_then(|s| s.as_ref()) else {
            return false;
        };
        if c.destroying || c.errored || c.banned || !c.rings[e].present || c.client.gated() {
            return false;
        }
        let Some(j) = c.queues[e].front() else {
            return false;
        };
        if !j.deps.iter().all(|d| d.is_signalled()) {
            return false;
        }
        let bytes = (j.words.len() * 4) as u32;
        mem.has_room(hw, e, c.rings[e].wptr, bytes)
    }

    /// The first ring whose head job can go.
    fn ready(g: &GpuState, mem: &SlotMemory) -> Ready {
        for hw in 0..g.slots.len() as u32 {
            for e in 0..ENGINES {
                if Self::head_ready(g, hw, e, mem) {
                    return Ready::Ring(hw, e);
                }
            }
        }
        Ready::Nothing
    }

    /// Writes the ready jobs at the head of queue `e` of `c` (slot `hw`)
    /// to the ring, in order, as long as they fit (each traced); returns
    /// the new write pointer.
    fn drain_queue(
        c: &mut super::state::Ctx,
        hw: u32,
        e: usize,
        mem: &SlotMemory,
        trace: &Trace,
    ) -> u32 {
        loop {
            let ring = &c.rings[e];
            let Some(j) = c.queues[e].front() else { break };
            let bytes = (j.words.len() * 4) as u32;
            if !j.deps.iter().all(|d| d.is_signalled()) || !mem.has_room(hw, e, ring.wptr, bytes) {
                break;
            }
            if c.rings[e].jobs.reserve(1, GFP_KERNEL).is_err() {
                break;
            }
            let Some(j) = c.queues[e].pop() else { break };
            let ring = &mut c.rings[e];
            if ring.jobs.is_empty() {
                ring.progress_at = Instant::now();
            }
            let at = ring.wptr;
            trace.ring_write(
                hw,
                e,
                j.seqno,
                JobAt {
                    ring_va: ring_va(c.kmd_va, e),
                    size: RING_SIZE,
                    wptr: at,
                    bytes: j.words.len() * 4,
                },
            );
            let ring = &mut c.rings[e];
            ring.wptr = mem.write_ring(hw, e, at, &j.words);
            // The dependencies signalled: dropping them only unlinks their
            // callbacks, which ran.
            let Queued { seqno, words, .. } = j;
            // Room was reserved above.
            let _ = ring.jobs.push(Job { seqno, words, at }, GFP_KERNEL);
        }
        c.rings[e].wptr
    }

    /// Fails the queued jobs of errored or banned contexts whose rings have
    /// drained (earlier jobs on the ring must be done first, so that fences
    /// complete in order). Returns them, to be dropped outside the lock.
    fn fail_dead_queues(g: &mut GpuState, mem: &SlotMemory) -> KVec<Queued<Dep>> {
        let mut gone = KVec::new();
        for c in g.slots.iter_mut().flatten() {
            if !(c.errored || c.banned) {
                continue;
            }
            for e in 0..ENGINES {
                if c.queues[e].is_empty() || !c.rings[e].jobs.is_empty() {
                    continue;
                }
                for j in c.fail_ring(e, -(bindings::EIO as i32)) {
                    let _ = gone.push(j, GFP_KERNEL);
                }
            }
        }
        if !gone.is_empty() {
            g.release_failed(mem);
        }
        gone
    }

    /// debugfs `queues`: every ring's queue and the bind jobs.
    pub(crate) fn show_queues(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let g = self.state.lock();
        writeln!(
            f,
            "queues max_pending {} job_timeout_ms {} resetting {} wedged {}",
            kernel::uapi::VGPU_CTX_MAX_PENDING,
            crate::params::job_timeout_ms(),
            u8::from(g.resetting),
            u8::from(g.wedged)
        )?;
        for (hw, s) in g.slots.iter().enumerate() {
            let Some(c) = s else { continue };
            for e in 0..ENGINES {
                let (r, q) = (&c.rings[e], &c.queues[e]);
                if !r.present {
                    continue;
                }
                let head = q.front();
                let (waiting, age_ms) = head.map_or((0, 0), |j| {
                    (
                        j.deps.iter().filter(|d| !d.is_signalled()).count(),
                        crate::time::elapsed_ns(&j.at) / 1_000_000,
                    )
                });
                writeln!(
                    f,
                    "ctx {} slot {} engine {} queued {} on_ring {} next_seqno {} completed {} head {} head_waits {} head_age_ms {} queued_total {} high_water {}",
                    c.handle,
                    hw,
                    e,
                    q.len(),
                    r.jobs.len(),
                    r.next_seqno,
                    r.completed.max(r.done_upto),
                    head.map_or(0, |j| j.seqno),
                    waiting,
                    age_ms,
                    q.queued_total,
                    q.high_water
                )?;
                if let Some(j) = head {
                    for d in j.deps.iter() {
                        let (ctx, seqno) = d.fence().id();
                        writeln!(
                            f,
                            "  waits fence context {} seqno {} status {}",
                            ctx,
                            seqno,
                            d.fence().status()
                        )?;
                    }
                }
            }
        }
        self.show_binds(&g, f)
    }
}
