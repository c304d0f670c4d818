// SPDX-License-Identifier: GPL-2.0

//! Placement and eviction of buffer objects: the policy half of the
//! driver's small TTM-shaped layer (the allocator half is
//! [`crate::vram_mgr`], the copies are [`crate::gpu::migrate`]).
//!
//! * **Placement** ([`Vgpu::place`], at `GEM_CREATE`): the object's
//!   `VGPU_GEM_CREATE_*` placement flags against the VRAM manager, as
//!   TTM's `ttm_bo_validate` walks a placement list: VRAM first when
//!   allowed; system memory as the "busy" placement of a VRAM-preferred
//!   object (it is not worth evicting anyone for); a VRAM-only object
//!   evicts others to make room.
//! * **Eviction** ([`Vgpu::evict_for`]): victims are VRAM objects in the
//!   order they were placed (least recently placed first, TTM's LRU),
//!   skipping those that cannot move now: CPU-accessed ones (mapped through
//!   the aperture: pinned while they exist; the driver's own objects are
//!   never in VRAM), one whose file has a user-mode queue (its jobs cannot be held back), one already
//!   moving. Like TTM's `eviction_valuable`, a request for the visible part
//!   only takes victims with visible blocks.
//! * **A move** ([`Vgpu::evict`]): the victim's system pages are allocated
//!   and DMA-mapped (and, with the device's sanitizer on, both sides of the
//!   copy declared to it); the owning file's jobs are held back and its
//!   rings drained; the object's mappings are cleared and the file's TLBs
//!   invalidated; the copy engine copies VRAM to the pages; the object's
//!   placement becomes system memory; every mapping of it is written again
//!   onto the pages ([`crate::vm::Vm::rebind_object`], their declarations
//!   with them); the jobs go again; the VRAM is freed. Unmap, invalidate,
//!   then copy and release: no TLB holds the old pages while they move or
//!   once they are free. A move that fails (copy fault, reset, timeout)
//!   leaves the object where it was, in VRAM, mapped again: nothing is
//!   lost. An evicted object moves back to VRAM when its file submits and
//!   there is room ([`crate::restore`]).
//!
//! Lock order: the mover (one move at a time) → the clients list (briefly)
//! → the GPU state (briefly) → an address space → an object's placement.

use crate::{
    device::Vgpu,
    file::Client,
    gem::{
        self,
        Bo,
        MemCharge,
        Seg,
        VramPlacement, //
    },
    gpu::migrate::Migrator,
    sanmem::{
        ranges_of,
        Tag, //
    },
    vm::DrmDev,
    vram_mgr::{
        MovePhases,
        Region,
        VramAlloc,
        VramUse, //
    },
};
use kernel::{
    drm::gem::BaseObject,
    prelude::*,
    sync::{
        aref::ARef,
        Arc,
        MutexGuard, //
    },
    time::{
        Delta,
        Instant,
        Monotonic, //
    },
    uapi,
};

impl Vgpu {
    /// Where a new object of `size` bytes (a multiple of 4 KiB) created
    /// with `VGPU_GEM_CREATE_*` `flags` goes: its VRAM, or `None` for
    /// system memory (see `drm_vgpu_gem_create` in the uAPI header). A
    /// VRAM-only object evicts others when VRAM is full.
    ///
    /// # Errors
    ///
    /// `EINVAL` (`LAZY` or `CPU_ACCESS` with a VRAM placement they do not
    /// go with), `ENXIO` (VRAM only, on a device without VRAM), `E2BIG`
    /// (VRAM only, larger than the usable or, with `CPU_ACCESS`, the
    /// visible VRAM), `ENOSPC` (VRAM only, and nothing could be evicted to
    /// make room), `ENOMEM`.
    pub(crate) fn place(
        &self,
        dev: &DrmDev,
        size: u64,
        flags: u32,
        user: &Arc<VramUse>,
    ) -> Result<Option<VramPlacement>> {
        let vram = flags & uapi::VGPU_GEM_CREATE_VRAM != 0;
        let system = flags & uapi::VGPU_GEM_CREATE_SYSTEM != 0;
        let cpu = flags & uapi::VGPU_GEM_CREATE_CPU_ACCESS != 0;
        if !vram {
            return if cpu { Err(EINVAL) } else { Ok(None) };
        }
        if flags & uapi::VGPU_GEM_CREATE_LAZY != 0 {
            return Err(EINVAL);
        }
        let Some(mgr) = self.vram.as_ref() else {
            return if system { Ok(None) } else { Err(ENXIO) };
        };
        let aperture = self
            .hw
            .memory
            .as_ref()
            .and_then(|m| m.aperture)
            .map(|a| a.start);
        let (region, fits) = if cpu {
            let visible = aperture.map_or(0, |_| mgr.layout().visible);
            (Region::Visible, size <= visible)
        } else {
            (Region::Any, mgr.fits(size, Region::Any))
        };
        if !fits {
            return if system { Ok(None) } else { Err(E2BIG) };
        }
        match mgr.alloc(size, region, Some(user)) {
            Ok(alloc) => return Ok(Some(VramPlacement { alloc, aperture })),
            Err(e) if e == ENOSPC && system => return Ok(None),
            Err(e) if e == ENOSPC => {}
            Err(e) => return Err(e),
        }
        let alloc = self.evict_for(dev, size, region, user)?;
        Ok(Some(VramPlacement { alloc, aperture }))
    }

    /// Evicts objects, least recently placed first, one at a time, until
    /// `size` bytes of `region` can be allocated; returns the allocation.
    /// Room another file takes meanwhile is made again by the next
    /// eviction: the loop ends when it allocates or nothing is left to
    /// evict. A copy context stopped under a move (an engine fault, a ban)
    /// is replaced once and the eviction tried again; the object it was
    /// moving stayed in VRAM, intact.
    ///
    /// # Errors
    ///
    /// `ENOSPC` (nothing more can be evicted, or the copy context was
    /// stopped twice), `ENOMEM`, `ENODEV`, or the errno of making the copy
    /// context.
    fn evict_for(
        &self,
        dev: &DrmDev,
        size: u64,
        region: Region,
        user: &Arc<VramUse>,
    ) -> Result<VramAlloc> {
        let mgr = self.vram.as_ref().ok_or(ENODEV)?;
        let mut mover = self.mover(dev)?;
        // A copy context stopped under a move is replaced once: the object
        // stayed in VRAM, intact, and the eviction is tried again.
        let mut replaced = false;
        loop {
            match mgr.alloc(size, region, Some(user)) {
                Ok(a) => return Ok(a),
                Err(e) if e == ENOSPC => {}
                Err(e) => return Err(e),
            }
            let Some(m) = &mut *mover else {
                return Err(ENODEV);
            };
            let mut evicted = false;
            let mut stopped = false;
            // An object holding a retired page stays where it is: moving
            // it would read the bad page.
            for bo in self.victims(region)?.iter().filter(|b| !b.is_bad()) {
                match self.evict(m, bo) {
                    Ok(()) => {
                        evicted = true;
                        break;
                    }
                    // Skipped: moving, its file gone or holding a
                    // user-mode queue, or no guest memory left for it
                    // under the GEM limits.
                    Err(e) if e == EBUSY || e == ENOENT || e == ENOSPC => {}
                    Err(e) => {
                        mgr.count_move_failed();
                        crate::pr_warn_ratelimited!("eviction failed (error {})\n", e.to_errno());
                        if e == EIO {
                            // The copy context was stopped (an engine
                            // error, a ban).
                            stopped = true;
                            break;
                        }
                    }
                }
            }
            if stopped {
                if let Some(m) = mover.take() {
                    self.retire_mover(m);
                }
                if replaced {
                    return Err(ENOSPC);
                }
                replaced = true;
                drop(mover);
                mover = self.mover(dev)?;
                continue;
            }
            if !evicted {
                return Err(ENOSPC);
            }
        }
    }

    /// Moves `bo` (a VRAM object the CPU cannot see) to system memory, for
    /// a CPU mapping of it (`GEM_MMAP_OFFSET`): an eviction of that one
    /// object. Nothing to do for one already in system memory.
    ///
    /// # Errors
    ///
    /// `EBUSY` (its file has a user-mode queue), `ENOSPC` (the GEM limits
    /// leave no guest memory for it), `ETIMEDOUT`, `EIO` (the copy failed:
    /// the object stays in VRAM), `ENOMEM`, `ENODEV`.
    pub(crate) fn migrate_to_system(&self, dev: &DrmDev, bo: &Bo) -> Result {
        let mgr = self.vram.as_ref().ok_or(ENODEV)?;
        let mut mover = self.mover(dev)?;
        let Some(m) = &mut *mover else {
            return Err(ENODEV);
        };
        match self.evict(m, bo) {
            Ok(()) => Ok(()),
            Err(e) if e == ENOENT && bo.vram().is_none() => Ok(()),
            Err(e) if e == ENOSPC || e == EBUSY => Err(e),
            Err(e) => {
                mgr.count_move_failed();
                if e == EIO {
                    if let Some(m) = mover.take() {
                        self.retire_mover(m);
                    }
                }
                Err(e)
            }
        }
    }

    /// The objects that could be evicted for `region`, least recently
    /// placed first.
    fn victims(&self, region: Region) -> Result<KVec<ARef<Bo>>> {
        // LAB(9) BEGIN victims
        let mut v: KVec<(u64, ARef<Bo>)> = KVec::new();
        let mut err = Ok(());
        self.bos.visit(|bo| {
            // A CPU-access object is pinned by its aperture mapping.
            if bo.cpu_access() {
                return;
            }
            let stamp = {
                let p = bo.vram();
                match p.as_ref() {
                    Some(p) if region == Region::Any || p.alloc.visible_bytes() > 0 => {
                        p.alloc.stamp()
                    }
                    // Not in VRAM (never, or no more), or no visible bytes
                    // for a visible request.
                    _ => return,
                }
            };
            if let Err(e) = v.push((stamp, bo.into()), GFP_KERNEL) {
                err = Err(Error::from(e));
            }
        });
        err?;
        v.sort_unstable_by_key(|(stamp, _)| *stamp);
        let mut out = KVec::with_capacity(v.len(), GFP_KERNEL)?;
        for (_, bo) in v {
            out.push(bo, GFP_KERNEL)?;
        }
        Ok(out)
        // LAB(9) END victims
    }

    /// The driver's copy context, made on first use.
    ///
    /// # Errors
    ///
    /// `ENOSPC` (no context slot), `ENOMEM`, or the errno of the device's
    /// `CONTEXT_CREATE`.
    pub(crate) fn mover(&self, dev: &DrmDev) -> Result<MutexGuard<'_, Option<Migrator>>> {
        let mut g = self.mover.lock();
        if g.is_none() {
            let client = crate::file::Client::new(self.new_vm(dev)?, 0)?;
            let ctx = self.gpu.create_context(
                &client,
                uapi::VGPU_CTX_PRIORITY_HIGH,
                1 << uapi::VGPU_ENGINE_COPY,
                0,
                None,
            )?;
            *g = Some(Migrator { client, ctx });
        }
        Ok(g)
    }

    /// Moves `bo` from VRAM to its system pages `dst` (`src`: its VRAM
    /// blocks), its owner's jobs held back and drained: unmap, invalidate,
    /// then copy and map again, so that no TLB of the owner's holds the old
    /// pages while they move or once they are free. Returns the copy's
    /// time in µs. On an error the object stays in VRAM, mapped there.
    ///
    /// # Errors
    ///
    /// `EIO` (the TLB invalidation or the copy failed), `ETIMEDOUT`,
    /// `ENOMEM`.
    fn move_out(
        &self,
        m: &Migrator,
        owner: &Arc<Client>,
        bo: &Bo,
        src: &[Seg],
        dst: &[Seg],
    ) -> Result<u64> {
        // LAB(9) BEGIN move
        owner.vm.lock().clear_object(bo);
        let (start, end) = owner.vm.lock().user_range();
        if !self.gpu.invalidate_client(owner, None, start, end - start) {
            // The device may still translate to the old pages: the object
            // stays where it is, mapped again. (The address space's lock is
            // taken once per statement: a guard in an `if let` scrutinee
            // lives through its body.)
            let rebound = owner.vm.lock().rebind_object(bo);
            if let Ok(decls) = rebound {
                let mut vm = owner.vm.lock();
                for d in decls {
                    vm.retired_decls.push(d, GFP_KERNEL)?;
                }
            }
            return Err(EIO);
        }
        let t = Instant::<Monotonic>::now();
        let size = bo.size() as u64;
        if let Err(e) = self
            .gpu
            .migrate_copy(m, bo, src, dst, size, Self::move_timeout())
        {
            // Still in VRAM: mapped there again.
            owner.vm.lock().rebind_object(bo)?;
            return Err(e);
        }
        let copy_us = t.elapsed().as_micros_ceil() as u64;
        let old = bo.vram().take();
        // The entries were invalid: mapping the pages needs no
        // invalidation. The old pages' declarations go, then the blocks.
        let rebound = owner.vm.lock().rebind_object(bo);
        match rebound {
            Ok(decls) => {
                drop(decls);
                drop(old);
                Ok(copy_us)
            }
            Err(e) => {
                // Not mapped onto its new pages: back in VRAM (its blocks
                // were never freed), mapped there again.
                *bo.vram() = old;
                owner.vm.lock().rebind_object(bo)?;
                Err(e)
            }
        }
        // LAB(9) END move
    }

    /// The planted bug `move-no-invalidate` (debugfs `sanitizer_plant`):
    /// [`Self::move_out`] without clearing the object's mappings or
    /// invalidating its owner's TLBs first. The owner's cached
    /// translations keep reaching the old VRAM after the move; the device's
    /// sanitizer reports the access and names the object and its move.
    ///
    /// # Errors
    ///
    /// As [`Self::move_out`].
    fn move_out_planted(
        &self,
        m: &Migrator,
        owner: &Arc<Client>,
        bo: &Bo,
        src: &[Seg],
        dst: &[Seg],
    ) -> Result<u64> {
        let t = Instant::<Monotonic>::now();
        self.gpu
            .migrate_copy(m, bo, src, dst, bo.size() as u64, Self::move_timeout())?;
        let copy_us = t.elapsed().as_micros_ceil() as u64;
        let old = bo.vram().take();
        match owner.vm.lock().rebind_object(bo) {
            Ok(decls) => {
                drop(decls);
                drop(old);
                Ok(copy_us)
            }
            Err(e) => {
                *bo.vram() = old;
                Err(e)
            }
        }
    }

    /// How long a move waits for the owner's jobs, and for each copy.
    fn move_timeout() -> Delta {
        Delta::from_millis(i64::from(crate::params::job_timeout_ms()) * 2 + 1000)
    }

    /// Moves `bo` from VRAM to system memory (see the module
    /// documentation).
    ///
    /// # Errors
    ///
    /// `EBUSY` (already moving, or its file has a user-mode queue),
    /// `ENOENT` (not in VRAM, or its file is gone), `ENOSPC` (the GEM
    /// limits leave no guest memory for it), `ETIMEDOUT` (its jobs or the
    /// copy did not finish), `EIO` (the copy failed), `ENOMEM`.
    fn evict(&self, m: &Migrator, bo: &Bo) -> Result {
        if !bo.begin_move() {
            return Err(EBUSY);
        }
        let r = self.evict_claimed(m, bo);
        bo.end_move();
        r
    }

    fn evict_claimed(&self, m: &Migrator, bo: &Bo) -> Result {
        let owner = self
            .clients
            .lock()
            .iter()
            .find(|c| c.id == bo.owner())
            .cloned()
            .ok_or(ENOENT)?;
        let src = {
            let p = bo.vram();
            gem::vram_segments(&p.as_ref().ok_or(ENOENT)?.alloc)?
        };
        let size = bo.size() as u64;
        // Evicted, the object is guest memory: charged to the device's and
        // its file's GEM limits, or not evicted.
        let charge = MemCharge::new(size as usize, self.mem.clone(), owner.mem.clone())
            .map_err(|_| ENOSPC)?;
        let mut phases = MovePhases {
            bytes: size,
            ..MovePhases::default()
        };
        let mut t = Instant::<Monotonic>::now();
        let lap = |t: &mut Instant<Monotonic>| {
            let us = t.elapsed().as_micros_ceil() as u64;
            *t = Instant::now();
            us
        };
        let dst = gem::shmem_segments(bo)?;
        phases.pages_us = lap(&mut t);
        // The object's next placement generation starts: its new pages are
        // declared under it, and the device names the object (moved) if
        // the GPU reaches the old ones after the move.
        let old_tag = Tag::of(bo);
        bo.next_gen();
        // The device's sanitizer is told of both sides of the copy for its
        // duration (the object may have no mapping that declares them).
        let san = self.san_mem.as_ref().filter(|s| s.on()).cloned();
        let _copy_decl = match &san {
            Some(s) => Some((
                s.declare_tagged(ranges_of(&src, 0, size)?, old_tag)?,
                s.declare_tagged(ranges_of(&dst, 0, size)?, Tag::of(bo))?,
            )),
            None => None,
        };
        let timeout = Self::move_timeout();
        self.gpu.gate_and_drain(&owner, timeout)?;
        phases.drain_us = lap(&mut t);
        let moved = match self.gpu.planted_move_no_invalidate() {
            true => self.move_out_planted(m, &owner, bo, &src, &dst),
            false => self.move_out(m, &owner, bo, &src, &dst),
        };
        let r = moved.map(|copy_us| {
            bo.keep_evicted_charge(charge);
            phases.copy_us = copy_us;
            phases.remap_us = lap(&mut t).saturating_sub(copy_us);
            bo.count_eviction();
            if let Some(mgr) = self.vram.as_ref() {
                mgr.count_eviction(size);
                mgr.record_move(&phases);
            }
        });
        self.gpu.ungate(&owner);
        r
    }
}
