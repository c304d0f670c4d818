// SPDX-License-Identifier: GPL-2.0

//! Moves of buffer objects on the copy engine (the role of xe's
//! `xe_migrate.c`), and holding a client's jobs back while one of its
//! objects moves.
//!
//! The driver has a context of its own on the copy engine, in an address
//! space of its own ([`Migrator`], made by [`crate::placement`] on first
//! use). A move maps its source and destination pages in two windows of
//! that address space's KMD range (the source in VRAM, with the page
//! tables' VRAM bit, the destination in system memory, or the other way
//! round), queues a job of `COPY` packets on the context's copy ring
//! through the job queue like any other job (so the hang check, engine
//! resets and the device reset cover it), waits for its fence, and unmaps
//! the windows. Objects larger than a window move in window-sized chunks.
//!
//! While an object moves, no job of the file that owns it may run: the
//! move gates the client ([`Gpu::gate_and_drain`]: its new jobs stay in the
//! job queue, under the GPU state lock so no `SUBMIT` slips past) and waits
//! until none of its jobs is on a ring; [`Gpu::ungate`] lets the queue go.

use super::{
    queue::Queued,
    ring::{
        fence_va,
        ENGINES, //
    },
    state::{
        Gpu,
        GpuState, //
    },
    uqueue,
};
use crate::{
    ffi_sync::add_kernel_fence,
    file::Client,
    gem::{
        Bo,
        Seg, //
    },
    mmu::{
        PTE_READ,
        PTE_WRITE, //
    },
    packet::Packet,
};
use kernel::{
    prelude::*,
    sync::Arc,
    time::{
        delay::fsleep,
        Delta,
        Instant,
        Monotonic, //
    },
    uapi,
};

/// Bytes one window maps (an object moves in chunks of at most this).
pub(crate) const WINDOW: u64 = 64 << 20;

/// Words of one packet slot of a copy job (64 bytes).
const SLOT_WORDS: usize = 16;

/// Where the windows start above the user range of the migration address
/// space (past the context slots' mappings).
const WINDOW_BASE: u64 = 16 << 20;

/// The driver's copy context: its client (its address space) and the
/// context's handle.
pub(crate) struct Migrator {
    pub(crate) client: Arc<Client>,
    pub(crate) ctx: u32,
}

/// `segs` (an object's, in object order) cut to `[off, off + len)`, as
/// segments from offset 0.
///
/// # Errors
///
/// `EINVAL` (the range is not covered), `ENOMEM`.
fn cut(segs: &[Seg], off: u64, len: u64) -> Result<KVec<Seg>> {
    let mut out = KVec::new();
    let end = off.checked_add(len).ok_or(EINVAL)?;
    for s in segs {
        let (a, b) = (s.offset.max(off), (s.offset + s.len).min(end));
        if a < b {
            out.push(
                Seg {
                    offset: a - off,
                    addr: s.addr + (a - s.offset),
                    len: b - a,
                },
                GFP_KERNEL,
            )?;
        }
    }
    let covered: u64 = out.iter().map(|s| s.len).sum();
    if covered != len {
        return Err(EINVAL);
    }
    Ok(out)
}

impl Gpu {
    /// Holds `client`'s jobs back (new ones stay queued) and waits until
    /// none of them is on a ring, `timeout` at most. On an error the
    /// client is not gated.
    ///
    /// # Errors
    ///
    /// `EBUSY` (the client has a user-mode queue, whose jobs the driver
    /// cannot hold back), `ETIMEDOUT`, `EIO` (wedged), `ENODEV`.
    pub(crate) fn gate_and_drain(&self, client: &Arc<Client>, timeout: Delta) -> Result {
        {
            let g = self.lock()?;
            let uq = g
                .slots
                .iter()
                .flatten()
                .any(|c| Arc::ptr_eq(&c.client, client) && c.uq.is_some());
            if uq {
                return Err(EBUSY);
            }
            client.gate();
        }
        let r = self.drain(client, timeout);
        if r.is_err() {
            self.ungate(client);
        }
        r
    }

    /// Holds `client`'s jobs back (new ones stay queued) without waiting:
    /// for a device whose rings are empty anyway (a system resume, until
    /// VRAM is restored). Let go by [`Gpu::ungate`].
    pub(crate) fn hold(&self, client: &Arc<Client>) {
        let _g = self.state.lock();
        client.gate();
    }

    /// Waits until no user-mode queue of `client` has unfinished work, as
    /// its status block shows it (a queue's jobs cannot be held back: the
    /// doorbell is the application's), `timeout` at most.
    ///
    /// # Errors
    ///
    /// `ETIMEDOUT`, `EIO` (wedged), `ENODEV`.
    pub(crate) fn wait_uq_idle(&self, client: &Arc<Client>, timeout: Delta) -> Result {
        let mem = self.slots()?;
        self.poll(timeout, |g| {
            let busy = g.slots.iter().enumerate().any(|(hw, s)| {
                s.as_ref().is_some_and(|c| {
                    Arc::ptr_eq(&c.client, client)
                        && !c.errored
                        && !c.banned
                        && c.uq
                            .as_ref()
                            .is_some_and(|q| uqueue::has_work(&mem.status(hw as u32, q.engine)))
                })
            });
            (!busy).then_some(Ok(()))
        })
    }

    /// Waits until no job of `client` is on a ring (contexts stopped by an
    /// error or a ban count as idle: their rings run no more).
    fn drain(&self, client: &Arc<Client>, timeout: Delta) -> Result {
        let mem = self.slots()?;
        self.poll(timeout, |g| {
            let mut busy = g.resetting;
            for (hw, s) in g.slots.iter_mut().enumerate() {
                let Some(c) = s else { continue };
                if !Arc::ptr_eq(&c.client, client) || c.errored || c.banned {
                    continue;
                }
                for (e, r) in c.rings.iter_mut().enumerate().take(ENGINES) {
                    if r.present {
                        r.retire(mem.fence_value(hw as u32, e));
                        busy |= !r.jobs.is_empty();
                    }
                }
            }
            (!busy).then_some(Ok(()))
        })
    }

    /// Calls `done` under the state lock every 100 µs until it has an
    /// answer, `timeout` at most.
    ///
    /// # Errors
    ///
    /// `done`'s error, `ETIMEDOUT`, `EIO` (wedged), `ENODEV`.
    fn poll(
        &self,
        timeout: Delta,
        mut done: impl FnMut(&mut GpuState) -> Option<Result>,
    ) -> Result {
        let start = Instant::<Monotonic>::now();
        loop {
            {
                let mut g = self.lock()?;
                if g.wedged {
                    return Err(EIO);
                }
                if let Some(r) = done(&mut g) {
                    return r;
                }
            }
            if start.elapsed() > timeout {
                return Err(ETIMEDOUT);
            }
            fsleep(Delta::from_micros(100));
        }
    }

    /// Lets `client`'s queued jobs go again (after
    /// [`Gpu::gate_and_drain`]).
    pub(crate) fn ungate(&self, client: &Arc<Client>) {
        {
            let _g = self.state.lock();
            client.ungate();
        }
        self.pump();
    }

    /// Copies `size` bytes from the pages `src` to the pages `dst` (each
    /// in object order, device-physical addresses) on the copy engine of
    /// `m`, and waits for it (`timeout` per window).
    ///
    /// # Errors
    ///
    /// `EINVAL` (segments shorter than `size`), `EIO` (the copy failed: an
    /// engine error, a fault, a reset that did not let it finish),
    /// `ETIMEDOUT`, `ENOMEM`, `ENODEV`.
    pub(crate) fn migrate_copy(
        &self,
        m: &Migrator,
        obj: &Bo,
        src: &[Seg],
        dst: &[Seg],
        size: u64,
        timeout: Delta,
    ) -> Result {
        let (src_va, dst_va) = {
            let end = m.client.vm.lock().user_range().1;
            (end + WINDOW_BASE, end + WINDOW_BASE + WINDOW)
        };
        let mut off = 0;
        while off < size {
            let len = (size - off).min(WINDOW);
            let s = cut(src, off, len)?;
            let d = cut(dst, off, len)?;
            {
                let mut vm = m.client.vm.lock();
                vm.map_kmd_segs(src_va, &s, len, PTE_READ)?;
                if let Err(e) = vm.map_kmd_segs(dst_va, &d, len, PTE_READ | PTE_WRITE) {
                    vm.unmap_kmd(src_va, len);
                    return Err(e);
                }
            }
            let r = self.copy_job(m, obj, src_va, dst_va, len, timeout);
            {
                let mut vm = m.client.vm.lock();
                vm.unmap_kmd(src_va, len);
                vm.unmap_kmd(dst_va, len);
            }
            let flushed = self.invalidate_client(&m.client, None, src_va, 2 * WINDOW);
            r?;
            if !flushed {
                return Err(EIO);
            }
            off += len;
        }
        Ok(())
    }

    /// One `COPY` job of `len` bytes on `m`'s copy ring, its fence added to
    /// `obj`'s reservation object as a kernel fence (what implicit sync
    /// waits for), waited for.
    fn copy_job(
        &self,
        m: &Migrator,
        obj: &Bo,
        src: u64,
        dst: u64,
        len: u64,
        timeout: Delta,
    ) -> Result {
        let e = uapi::VGPU_ENGINE_COPY as usize;
        let generation = self.hw.generation();
        let queued = {
            let mut g = self.lock()?;
            if g.wedged {
                return Err(EIO);
            }
            let (_, c) = g.find(&m.client, m.ctx)?;
            if c.errored || c.banned || !c.rings[e].present {
                return Err(EIO);
            }
            let seqno = c.rings[e].next_seqno;
            let fence_at = fence_va(c.kmd_va, e);
            let mut words = KVec::new();
            for p in [
                Packet::Copy {
                    src,
                    dst,
                    size: len,
                },
                Packet::Fence {
                    va: fence_at,
                    seqno,
                    flags: 0,
                },
            ] {
                let mut buf = [0u32; 16];
                let n = p.encode(generation, &mut buf).ok_or(EINVAL)?;
                words.extend_from_slice(&buf[..n], GFP_KERNEL)?;
                // Each packet fills a 64-byte slot, so every job is a
                // whole number of slots and, the ring starting on a page,
                // every `COPY` starts 64-byte aligned (what generation 2
                // requires of copy-engine packets).
                let pad = (SLOT_WORDS - words.len() % SLOT_WORDS) % SLOT_WORDS;
                if pad > 0 {
                    let n = Packet::Nop { words: pad as u32 }
                        .encode(generation, &mut buf)
                        .ok_or(EINVAL)?;
                    words.extend_from_slice(&buf[..n], GFP_KERNEL)?;
                }
            }
            c.queues[e].reserve()?;
            let fence = c.rings[e].new_fence(seqno)?;
            let shared = fence.fence();
            let job = Queued {
                seqno,
                words,
                deps: KVec::new(),
                at: Instant::now(),
            };
            if c.queues[e].push(job).is_err() {
                return Err(ENOMEM);
            }
            // Room was reserved by `new_fence`.
            let _ = c.rings[e].exported.push(fence, GFP_KERNEL);
            c.rings[e].next_seqno += 1;
            (seqno, shared)
        };
        let (seqno, shared) = queued;
        // Later users of the object wait for the move (the owner's jobs
        // are also held back meanwhile). The job is queued: its fence
        // signals, with an error if the job fails.
        add_kernel_fence(obj, &shared)?;
        self.pump();
        let mem = self.slots()?;
        self.poll(timeout, |g| {
            let (hw, c) = match g.find(&m.client, m.ctx) {
                Ok(x) => x,
                Err(e) => return Some(Err(e)),
            };
            let r = &mut c.rings[e];
            r.retire(mem.fence_value(hw, e));
            match r.fence_state(seqno) {
                None if c.errored || c.banned => Some(Err(EIO)),
                state => state,
            }
        })
    }
}
