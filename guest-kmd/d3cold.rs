// SPDX-License-Identifier: GPL-2.0

//! Runtime suspension with VRAM off (`D3COLD`): the [`VramKeeper`] of the
//! GPU's runtime power management ([`crate::gpu::power`]).
//!
//! With `vram_d3cold_threshold_mib` set, an idle device whose VRAM objects
//! use at most that many MiB, none of them CPU-mapped, is suspended to
//! `D3COLD` rather than `D3HOT`, as xe lets a device go to D3cold under its
//! `vram_d3cold_threshold` (`xe_pm_d3cold_allowed_toggle`). VRAM is then
//! powered off and loses its contents, so they are saved first, in place
//! as for a system sleep ([`crate::sleep`]): each object's contents go to
//! its own system pages while it keeps its VRAM blocks and its GPU
//! mappings, and come back to the same blocks at the resume, before any
//! ioctl goes on.
//!
//! * **Not allowed** (`D3HOT` instead, counted as a fallback): over the
//!   threshold (the save and the copy back take time in proportion), or a
//!   VRAM object the CPU asked to map (`GEM_MMAP_OFFSET`): its aperture
//!   mapping would show VRAM that is off, and a write through it would be
//!   lost (xe zaps such mappings and faults them back after the resume;
//!   vgpu keeps that device in `D3HOT`).
//! * **Save** ([`VramKeeper::save_for_cold`]): every open file's jobs held
//!   back (none reaches a ring until the power-down, or the save is given
//!   up), the device checked idle again, each object copied on the copy
//!   engine. Anything an ioctl does after the save (an object created in
//!   VRAM, moved, CPU-mapped) is found once the suspension is announced
//!   ([`VramKeeper::save_still_whole`]): the save is then discarded and
//!   the device stays up.
//! * **Resume** ([`VramKeeper::restore_after_cold`]): the objects copied
//!   back and their system pages given back; one that cannot be copied is
//!   lost as in a device reset that lost VRAM (`VRAM_LOST` on its file's
//!   contexts).
//!
//! Lock order: [`Vgpu::power`] (held by the watchdog's tick around a
//! suspension) → the copy context ([`Vgpu::mover`]) → the GPU's `ops`
//! (the suspension) → [`Vgpu::cold`] → the clients list and the GPU state
//! (briefly). The save is made with no lock of the suspension held and
//! stored in [`Vgpu::cold`] once made; the copy back takes it out first.

use crate::{
    device::{
        ColdSave,
        Vgpu, //
    },
    gem::{
        self,
        Bo, //
    },
    gpu::power::VramKeeper,
    params,
};
use kernel::{
    drm::gem::BaseObject,
    prelude::*,
    sync::aref::ARef, //
};

impl Vgpu {
    /// Lets the held files go; `keep` false also discards the save (flags
    /// cleared, system pages given back).
    fn release_cold(&self, cold: &mut ColdSave, keep: bool) {
        for c in cold.held.drain_all() {
            self.gpu.ungate(&c);
        }
        if !keep {
            for bo in cold.objects.drain_all() {
                bo.set_saved(false);
                // Busy pages stay until the object goes: memory held
                // longer, nothing wrong.
                let _ = gem::release_system_pages(&bo);
            }
            cold.gens.clear();
        }
    }

    /// Holds every file's jobs back, then copies `objects` to their system
    /// pages (see the module documentation).
    ///
    /// # Errors
    ///
    /// `EBUSY` (work on the device, an object moving), `ENOMEM`, `EIO`,
    /// `ETIMEDOUT`; `cold` is then as before, to be released.
    fn save_cold(&self, cold: &mut ColdSave, objects: KVec<ARef<Bo>>) -> Result {
        let mut mover = match objects.first() {
            Some(bo) => Some(self.mover(bo.dev())?),
            None => None,
        };
        for c in self.clients_now()? {
            self.gpu.hold(&c);
            if let Err(e) = cold.held.push(c.clone(), GFP_KERNEL) {
                self.gpu.ungate(&c);
                return Err(e.into());
            }
        }
        // A job that reached a ring before the files were held.
        if !self.gpu.idle() {
            return Err(EBUSY);
        }
        let Some(m) = mover.as_deref_mut().and_then(Option::as_mut) else {
            return Ok(());
        };
        for bo in objects {
            let gen = bo.gen();
            self.save_one(m, &bo)?;
            bo.set_saved(true);
            cold.gens.push(gen, GFP_KERNEL)?;
            if let Err(e) = cold.objects.push(bo.clone(), GFP_KERNEL) {
                bo.set_saved(false);
                return Err(e.into());
            }
        }
        Ok(())
    }
}

impl VramKeeper for Vgpu {
    fn save_for_cold(&self) -> Result<bool> {
        let Some(threshold) = params::vram_d3cold_threshold_mib() else {
            return Ok(false);
        };
        let objects = self.vram_objects()?;
        let bytes: u64 = objects.iter().map(|b| b.size() as u64).sum();
        if bytes > u64::from(threshold) << 20 || objects.iter().any(|b| b.cpu_mapped()) {
            return Ok(false);
        }
        // Made without [`Vgpu::cold`] held (the copy context takes
        // [`crate::gpu::state::Gpu::ops`] when it creates its context,
        // which the suspension holds when it looks at the save).
        let mut save = ColdSave::default();
        match self.save_cold(&mut save, objects) {
            Ok(()) => {
                *self.cold.lock() = save;
                Ok(true)
            }
            Err(e) => {
                self.release_cold(&mut save, false);
                Err(e)
            }
        }
    }

    fn save_still_whole(&self) -> bool {
        let cold = self.cold.lock();
        let Ok(now) = self.vram_objects() else {
            return false;
        };
        // Every object in VRAM now is one saved (as many, and each saved
        // one still in VRAM, unmoved and not CPU-mapped).
        now.len() == cold.objects.len()
            && cold.objects.iter().zip(cold.gens.iter()).all(|(bo, &gen)| {
                bo.vram().is_some() && !bo.is_lost() && bo.gen() == gen && !bo.cpu_mapped()
            })
    }

    fn end_save(&self, entered: bool) {
        let mut cold = self.cold.lock();
        self.release_cold(&mut cold, entered);
    }

    fn restore_after_cold(&self, up: bool) -> (u64, u64) {
        let objects = {
            let mut cold = self.cold.lock();
            cold.gens.clear();
            core::mem::take(&mut cold.objects)
        };
        let bytes: u64 = objects.iter().map(|b| b.size() as u64).sum();
        let (restored, lost) = self.restore_list(&objects, up);
        if lost > 0 {
            crate::dev_warn_ratelimited!(
                self.gpu.pdev(),
                "runtime resume from D3cold: {} VRAM objects restored, {} lost\n",
                restored,
                lost
            );
        }
        (restored as u64, if lost == 0 { bytes } else { 0 })
    }
}
