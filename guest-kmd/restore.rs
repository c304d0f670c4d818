// SPDX-License-Identifier: GPL-2.0

//! Evicted objects moved back to VRAM: the other direction of
//! [`crate::placement`]'s eviction, as TTM's validation moves a buffer
//! back to its preferred placement when it is used (xe validates a VM's
//! objects at each exec).
//!
//! At `SUBMIT` ([`Vgpu::restore_evicted`]), when some VRAM object is in
//! system memory and at most once per
//! [`crate::vram_mgr::RESTORE_PERIOD_NS`], the submitting file's evicted
//! objects move back, newest first, while VRAM keeps free
//! at least an eighth of its usable size after each (the headroom keeps a
//! move back from evicting at the next allocation: no ping-pong) and up to
//! [`BUDGET`] bytes per `SUBMIT`. A move back never evicts, never waits
//! for a move in progress (the mover is taken only if free) and never fails
//! the `SUBMIT`: an object that cannot move stays in system memory, where
//! it works.
//!
//! An object moves back only if nothing but its GPU mappings uses its
//! system pages: not one the CPU asked to map (`GEM_MMAP_OFFSET`: its CPU
//! mapping shows those pages), not a lost or bad one, not one of a file
//! with user-mode queues (its jobs cannot be held back). The move: VRAM
//! allocated; the file's jobs held back and its rings drained; its
//! mappings cleared and TLBs invalidated; the copy engine copies the pages
//! to VRAM; the placement becomes VRAM, every mapping is written again onto
//! it (its sanitizer declarations under the object's next generation); the
//! jobs go; the system pages are given back (DMA mapping, page references,
//! a hole punched in the shmem file) and so is the object's guest-memory
//! charge. A failure before the placement changes leaves the object in
//! system memory, mapped there.
//!
//! Lock order: as [`crate::placement`]'s.

use crate::{
    device::Vgpu,
    file::Client,
    gem::{
        self,
        Bo,
        VramPlacement, //
    },
    gpu::migrate::Migrator,
    sanmem::{
        ranges_of,
        Tag, //
    },
    vram_mgr::Region,
};
use kernel::{
    drm::gem::BaseObject,
    prelude::*,
    sync::{
        aref::ARef,
        Arc, //
    },
    time::Delta,
};

/// Bytes moved back per `SUBMIT` at most (the time a `SUBMIT` may spend).
pub(crate) const BUDGET: u64 = 64 << 20;

impl Vgpu {
    /// Moves the evicted objects of `client` back to VRAM where there is
    /// room (see the module documentation). Never fails: what cannot move
    /// stays in system memory.
    pub(crate) fn restore_evicted(&self, client: &Arc<Client>) {
        let Some(mgr) = self.vram.as_ref() else {
            return;
        };
        if gem::evicted_objects() <= 0 || !mgr.restore_due(crate::ffi::monotonic_ns()) {
            return;
        }
        let headroom = mgr.usable() / 8;
        if mgr.avail() <= headroom {
            return;
        }
        // An eviction or another move back in progress: next time.
        let Some(mut mover) = self.mover.try_lock() else {
            return;
        };
        let Some(m) = &mut *mover else {
            return;
        };
        let Ok(candidates) = self.restorable(client) else {
            return;
        };
        let mut moved = 0u64;
        for bo in candidates.iter() {
            let size = bo.size() as u64;
            if moved + size > BUDGET || mgr.avail() < size.saturating_add(headroom) {
                continue;
            }
            if !bo.begin_move() {
                continue;
            }
            let r = self.restore_one(m, client, bo);
            bo.end_move();
            match r {
                Ok(()) => {
                    moved += size;
                    mgr.count_restore(size);
                }
                Err(e) if e == EBUSY || e == ENOSPC => {}
                Err(e) => {
                    mgr.count_move_failed();
                    crate::pr_warn_ratelimited!(
                        "vgpu: move back to VRAM failed (error {})\n",
                        e.to_errno()
                    );
                    if e == EIO {
                        // The copy context was stopped: replaced at the
                        // next move.
                        if let Some(m) = mover.take() {
                            self.retire_mover(m);
                        }
                        return;
                    }
                }
            }
        }
    }

    /// The evicted objects of `client` that may move back, newest first
    /// (by id: a heuristic, not a contract).
    fn restorable(&self, client: &Arc<Client>) -> Result<KVec<ARef<Bo>>> {
        let mut v: KVec<ARef<Bo>> = KVec::new();
        let mut err = Ok(());
        self.bos.visit(|bo| {
            if err.is_err()
                || bo.owner() != client.id
                || !bo.is_vram_object()
                || bo.cpu_access()
                || bo.cpu_mapped()
                || bo.is_lost()
                || bo.is_bad()
                || !bo.is_evicted()
            {
                return;
            }
            if let Err(e) = v.push(bo.into(), GFP_KERNEL) {
                err = Err(Error::from(e));
            }
        });
        err?;
        v.sort_unstable_by_key(|bo| core::cmp::Reverse(bo.id()));
        Ok(v)
    }

    /// Moves `bo`, evicted and claimed, back to VRAM.
    ///
    /// # Errors
    ///
    /// `ENOSPC` (no VRAM free for it: it stays), `EBUSY` (its file has a
    /// user-mode queue, or its pages are in use), `ETIMEDOUT` (its jobs or
    /// the copy did not finish), `EIO` (the invalidation or the copy
    /// failed), `ENOMEM`. On an error it stays in system memory, mapped
    /// there.
    fn restore_one(&self, m: &Migrator, owner: &Arc<Client>, bo: &Bo) -> Result {
        let mgr = self.vram.as_ref().ok_or(ENODEV)?;
        if bo.vram().is_some() {
            return Err(EBUSY);
        }
        let size = bo.size() as u64;
        let aperture = self
            .hw
            .memory
            .as_ref()
            .and_then(|mem| mem.aperture)
            .map(|a| a.start);
        let alloc = mgr.alloc(size, Region::Any, Some(&owner.vram))?;
        let src = gem::shmem_segments(bo)?;
        let dst = gem::vram_segments(&alloc)?;
        let old_tag = Tag::of(bo);
        bo.next_gen();
        let san = self.san_mem.as_ref().filter(|s| s.on()).cloned();
        let _copy_decl = match &san {
            Some(s) => Some((
                s.declare_tagged(ranges_of(&src, 0, size)?, old_tag)?,
                s.declare_tagged(ranges_of(&dst, 0, size)?, Tag::of(bo))?,
            )),
            None => None,
        };
        let timeout = Self::restore_timeout();
        self.gpu.gate_and_drain(owner, timeout)?;
        let r = self.move_in(m, owner, bo, &src, &dst, VramPlacement { alloc, aperture });
        self.gpu.ungate(owner);
        r?;
        bo.drop_evicted_charge();
        // The pages: nothing maps them any more. Held by a CPU mapping
        // made meanwhile, they stay until the object goes.
        let _ = gem::release_system_pages(bo);
        Ok(())
    }

    /// The move itself, the owner's jobs held back: unmap and invalidate,
    /// copy, switch the placement and map the object onto its VRAM.
    ///
    /// # Errors
    ///
    /// As [`Vgpu::restore_one`].
    fn move_in(
        &self,
        m: &Migrator,
        owner: &Arc<Client>,
        bo: &Bo,
        src: &[gem::Seg],
        dst: &[gem::Seg],
        place: VramPlacement,
    ) -> Result {
        owner.vm.lock().clear_object(bo);
        let (start, end) = owner.vm.lock().user_range();
        if !self.gpu.invalidate_client(owner, None, start, end - start) {
            // Still in system memory: mapped there again; the old
            // declarations are kept until the address space goes (the
            // device may still translate to those pages).
            let rebound = owner.vm.lock().rebind_object(bo);
            if let Ok(decls) = rebound {
                let mut vm = owner.vm.lock();
                for d in decls {
                    vm.retired_decls.push(d, GFP_KERNEL)?;
                }
            }
            return Err(EIO);
        }
        let size = bo.size() as u64;
        if let Err(e) = self
            .gpu
            .migrate_copy(m, bo, src, dst, size, Self::restore_timeout())
        {
            owner.vm.lock().rebind_object(bo)?;
            return Err(e);
        }
        *bo.vram() = Some(place);
        let rebound = owner.vm.lock().rebind_object(bo);
        match rebound {
            Ok(decls) => {
                drop(decls);
                Ok(())
            }
            Err(e) => {
                // Not mapped onto VRAM: back to system memory (its pages
                // were never given back), mapped there again; the VRAM
                // goes with the placement.
                let vram = bo.vram().take();
                owner.vm.lock().rebind_object(bo)?;
                drop(vram);
                Err(e)
            }
        }
    }

    /// How long a move back waits for the owner's jobs, and for the copy.
    fn restore_timeout() -> Delta {
        Delta::from_millis(i64::from(crate::params::job_timeout_ms()) * 2 + 1000)
    }
}
