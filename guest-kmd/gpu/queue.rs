// SPDX-License-Identifier: GPL-2.0

//! The job queue of one ring: jobs `SUBMIT` accepted that are not on the
//! ring yet, oldest first — a FIFO like a drm_sched entity's — each with the
//! fences it still waits for in the KMD. A data structure only (no I/O, no
//! locks): [`super::sched`] moves jobs from here to the ring.
//!
//! Also the bind jobs of `VM_BIND_OPS` waiting in the KMD ([`BindJob`]).
//!
//! Generic over the dependency type, so that it sits below the GPU block's
//! state (which names the dependency, a fence callback that kicks the GPU).

use crate::{ffi::ExportedFence, file::Client, vm_ops::PreparedOp};
use kernel::{
    prelude::*,
    sync::Arc,
    time::{
        Instant,
        Monotonic, //
    },
};

/// A bind job not yet done ([`super::bind`]).
pub(crate) struct BindJob<D> {
    pub(crate) client: Arc<Client>,
    /// The requests (taken when the job starts).
    pub(crate) ops: KVec<PreparedOp>,
    pub(crate) deps: KVec<D>,
    /// The job's fence (signalled when done; cancelled if dropped first).
    pub(crate) fence: ExportedFence,
    /// A worker took it and runs it.
    pub(crate) running: bool,
}

/// A job waiting in the KMD.
pub(crate) struct Queued<D> {
    /// The job's fence seqno on its ring (assigned at `SUBMIT`).
    pub(crate) seqno: u64,
    /// Its packets, ready for the ring.
    pub(crate) words: KVec<u32>,
    /// Fences it waits for (`SUBMIT`'s in_syncs and implicit BO fences).
    pub(crate) deps: KVec<D>,
    /// When it was queued.
    pub(crate) at: Instant<Monotonic>,
}

/// A FIFO of queued jobs (a ring buffer that grows).
pub(crate) struct JobQueue<D> {
    slots: KVec<Option<Queued<D>>>,
    head: usize,
    len: usize,
    /// Jobs that waited here, ever.
    pub(crate) queued_total: u64,
    /// The most that were queued at once.
    pub(crate) high_water: usize,
}

impl<D> JobQueue<D> {
    /// An empty queue.
    pub(crate) fn new() -> JobQueue<D> {
        JobQueue {
            slots: KVec::new(),
            head: 0,
            len: 0,
            queued_total: 0,
            high_water: 0,
        }
    }

    /// Jobs queued.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether no job is queued.
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Makes room for one more job (so that [`JobQueue::push`] cannot fail).
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn reserve(&mut self) -> Result {
        if self.len < self.slots.len() {
            return Ok(());
        }
        let cap = (self.slots.len() * 2).max(16);
        let mut slots = KVec::with_capacity(cap, GFP_KERNEL)?;
        for i in 0..self.len {
            let j = (self.head + i) % self.slots.len();
            slots.push(self.slots[j].take(), GFP_KERNEL)?;
        }
        while slots.len() < cap {
            slots.push(None, GFP_KERNEL)?;
        }
        self.slots = slots;
        self.head = 0;
        Ok(())
    }

    /// Appends a job; [`JobQueue::reserve`] made room.
    ///
    /// # Errors
    ///
    /// `ENOMEM` if no room was reserved (the job is handed back).
    pub(crate) fn push(&mut self, j: Queued<D>) -> core::result::Result<(), Queued<D>> {
        if self.len >= self.slots.len() {
            return Err(j);
        }
        let i = (self.head + self.len) % self.slots.len();
        self.slots[i] = Some(j);
        self.len += 1;
        self.queued_total += 1;
        self.high_water = self.high_water.max(self.len);
        Ok(())
    }

    /// The oldest job.
    pub(crate) fn front(&self) -> Option<&Queued<D>> {
        if self.len == 0 {
            return None;
        }
        self.slots.get(self.head)?.as_ref()
    }

    /// Removes the oldest job.
    pub(crate) fn pop(&mut self) -> Option<Queued<D>> {
        if self.len == 0 {
            return None;
        }
        let j = self.slots.get_mut(self.head)?.take();
        self.head = (self.head + 1) % self.slots.len();
        self.len -= 1;
        j
    }

    /// The jobs, oldest first.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Queued<D>> {
        (0..self.len).filter_map(move |i| self.slots[(self.head + i) % self.slots.len()].as_ref())
    }

    /// The first and last queued seqnos.
    pub(crate) fn seqno_range(&self) -> Option<(u64, u64)> {
        let first = self.front()?.seqno;
        let last = self.iter().last()?.seqno;
        Some((first, last))
    }

    /// Takes every job out, oldest first (to fail or cancel them outside
    /// the caller's locks).
    pub(crate) fn take_all(&mut self) -> KVec<Queued<D>> {
        let mut out = KVec::new();
        // Without memory for the list the jobs are dropped here instead.
        let ok = out.reserve(self.len, GFP_KERNEL).is_ok();
        while let Some(j) = self.pop() {
            if ok {
                let _ = out.push(j, GFP_KERNEL);
            }
        }
        out
    }
}
