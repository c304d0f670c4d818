// SPDX-License-Identifier: GPL-2.0

//! System sleep: suspend to RAM (`echo mem > /sys/power/state`, ACPI S3)
//! and the resume, through the PCI driver's `suspend` and `resume`
//! callbacks (the kernel patch `0009-rust-pci-system-sleep`).
//!
//! A suspend to RAM powers the device off: it loses its contexts, rings,
//! firmware and VRAM. What the driver keeps in guest memory (page tables,
//! rings, status blocks, user-mode queues) survives with the guest; what
//! is in VRAM is saved first, as xe's `xe_bo_evict_all` does before a
//! suspend, but in place: each VRAM object's contents go to its own system
//! pages (its eviction pages) while it keeps its VRAM blocks, its GPU
//! mappings and its CPU mappings through the aperture, and come back to
//! the same blocks at the resume. Nothing is re-mapped, so the objects
//! pinned by an aperture mapping and those of files with user-mode queues
//! survive like the others.
//!
//! * **Suspend** ([`Vgpu::system_suspend`], user space already frozen): a
//!   runtime-suspended device is woken; the driver's copy context is taken
//!   (no eviction or move back runs meanwhile); every file's jobs are held
//!   back and its rings drained, every user-mode queue waited for, within
//!   [`drain_timeout`]: work in flight finishes before the suspend, work
//!   still queued (its dependencies not signalled) stays in the job queue
//!   and runs after the resume. A file whose work does not finish (a job
//!   waiting for a CPU that is frozen) refuses the suspend (`EBUSY`,
//!   logged): the system stays up, nothing lost. Then every VRAM object is
//!   copied to its system pages on the copy engine (`ENOMEM` or a failed
//!   copy refuses the suspend too), and the device quiesced as for a
//!   function reset.
//! * **Resume** ([`Vgpu::system_resume`]): every file's jobs stay held;
//!   the device powered on again as after a function reset (transport,
//!   firmware, every context created again on the same page tables: a
//!   reset of kind `sleep` in the reset log); the VRAM objects saved are
//!   not counted lost; their contents are copied back to their blocks and
//!   their system pages given back; then the jobs go. An object whose
//!   contents cannot be copied back is lost, as in a device reset that
//!   lost VRAM: its files' contexts are told (`VRAM_LOST`).
//!
//! A wedged device saves nothing and is brought back by the resume as a
//! function reset brings it back.
//!
//! Lock order: [`Vgpu::power`] (a system sleep and a runtime suspension's
//! save, one at a time) → the driver's copy context ([`Vgpu::mover`]) →
//! the clients list (briefly) → the GPU state (briefly); as
//! [`crate::placement`]'s.

use crate::{
    device::Vgpu,
    file::Client,
    gem::{
        self,
        Bo, //
    },
    gpu::migrate::Migrator,
    sanmem::{
        ranges_of,
        Tag, //
    },
};
use kernel::{
    device::Core,
    drm::gem::BaseObject,
    pci,
    prelude::*,
    sync::{
        aref::ARef,
        Arc, //
    },
    time::{
        Delta,
        Instant,
        Monotonic, //
    },
};

/// How long a suspend waits for the work in flight: half the job
/// timeout, so that the suspend is refused before the hang detector would
/// find a job that cannot finish (one waiting for the frozen CPU) guilty
/// and fail its context.
fn drain_timeout() -> Delta {
    Delta::from_millis(i64::from(crate::params::job_timeout_ms() / 2))
}

/// How long one copy of a VRAM object may take: the job timeout (a job
/// that runs longer is hung) and a second.
fn copy_timeout() -> Delta {
    Delta::from_millis(i64::from(crate::params::job_timeout_ms()) + 1000)
}

/// The files whose jobs a suspend holds back, let go when it ends.
struct Held<'a> {
    vgpu: &'a Vgpu,
    clients: KVec<Arc<Client>>,
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        for c in self.clients.iter() {
            self.vgpu.gpu.ungate(c);
        }
    }
}

impl Vgpu {
    /// The PCI driver's `suspend` (see the module documentation).
    ///
    /// # Errors
    ///
    /// `EBUSY` (work did not finish in time: the suspend is refused and
    /// the device keeps running), `ENOMEM` (no system pages to save VRAM
    /// in), `EIO` (a copy failed), `ETIMEDOUT`.
    pub(crate) fn system_suspend(&self, pdev: &pci::Device<Core<'_>>) -> Result {
        if self.hw.link.is_unbound() {
            return Ok(());
        }
        let start = Instant::<Monotonic>::now();
        // No runtime suspension saves VRAM meanwhile.
        let _power = self.power.lock();
        // Awake, and kept awake until it is quiesced (a device that could
        // not wake is wedged: nothing to save).
        let awake = self.gpu.pm_get(self);
        let (saved, held) = match &awake {
            Ok(_) if self.gpu.check_usable().is_ok() => self.save_vram(pdev)?,
            _ => (0, None),
        };
        // The files' jobs are let go once the device holds them off.
        self.quiesce("system suspend");
        drop(held);
        drop(awake);
        dev_info!(
            pdev,
            "system suspend: device quiesced in {} ms, {} VRAM objects ({} KiB) saved\n",
            crate::time::elapsed_ns(&start) / 1_000_000,
            saved,
            self.saved_bytes() / 1024
        );
        Ok(())
    }

    /// The PCI driver's `resume` (see the module documentation).
    ///
    /// # Errors
    ///
    /// `EIO` when the device did not come back (it is then wedged: the
    /// system resumes, the GPU does not).
    pub(crate) fn system_resume(&self, pdev: &pci::Device<Core<'_>>) -> Result {
        if self.hw.link.is_unbound() {
            return Ok(());
        }
        let start = Instant::<Monotonic>::now();
        let _power = self.power.lock();
        let held = self.hold_all()?;
        let ok = self.power_on_again(pdev, "sleep", "system resume");
        let (restored, lost) = self.restore_vram(ok);
        drop(held);
        self.gpu.count_sleep(crate::time::elapsed_ns(&start));
        dev_info!(
            pdev,
            "system resume: device back in {} ms, {} VRAM objects restored, {} lost\n",
            crate::time::elapsed_ns(&start) / 1_000_000,
            restored,
            lost
        );
        if ok {
            Ok(())
        } else {
            Err(EIO)
        }
    }

    /// Every open file's jobs held back (the files of a resume: their rings
    /// are empty).
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    fn hold_all(&self) -> Result<Held<'_>> {
        let mut held = Held {
            vgpu: self,
            clients: KVec::new(),
        };
        for c in self.clients_now()? {
            self.gpu.hold(&c);
            held.clients.push(c, GFP_KERNEL)?;
        }
        Ok(held)
    }

    /// The open files' clients now.
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn clients_now(&self) -> Result<KVec<Arc<Client>>> {
        let list = self.clients.lock();
        let mut v = KVec::with_capacity(list.len(), GFP_KERNEL)?;
        for c in list.iter() {
            v.push(c.clone(), GFP_KERNEL)?;
        }
        Ok(v)
    }

    /// The suspend's work: the copy context taken, every file's work
    /// finished and held back, every VRAM object's contents copied to its
    /// system pages. Returns how many objects were saved, and the files
    /// held back; on an error none is marked saved and none held.
    ///
    /// # Errors
    ///
    /// As [`Vgpu::system_suspend`].
    fn save_vram(&self, pdev: &pci::Device<Core<'_>>) -> Result<(usize, Option<Held<'_>>)> {
        let objects = self.vram_objects()?;
        // The copy context (made with the first object's DRM device), held
        // to the end: no eviction or move back runs meanwhile.
        let mut mover = match objects.first() {
            Some(bo) => self.mover(bo.dev())?,
            None => self.mover.lock(),
        };
        let mut held = Held {
            vgpu: self,
            clients: KVec::new(),
        };
        let timeout = drain_timeout();
        for c in self.clients_now()? {
            let r = match self.gpu.gate_and_drain(&c, timeout) {
                Ok(()) => held
                    .clients
                    .push(c.clone(), GFP_KERNEL)
                    .map_err(Error::from),
                Err(e) if e == EBUSY => self.gpu.wait_uq_idle(&c, timeout),
                Err(e) => Err(e),
            };
            if let Err(e) = r {
                crate::dev_warn_ratelimited!(
                    pdev,
                    "system suspend refused: the work of file {} did not finish in {} ms (error {})\n",
                    c.id,
                    timeout.as_millis(),
                    e.to_errno()
                );
                return Err(if e == ETIMEDOUT { EBUSY } else { e });
            }
        }
        let Some(m) = &mut *mover else {
            return Ok((0, Some(held)));
        };
        let mut list = self.saved.lock();
        list.clear();
        for bo in objects {
            if let Err(e) = self.save_one(m, &bo) {
                for b in list.iter() {
                    b.set_saved(false);
                }
                list.clear();
                crate::dev_warn_ratelimited!(
                    pdev,
                    "system suspend refused: saving a VRAM object of {} KiB failed (error {})\n",
                    bo.size() / 1024,
                    e.to_errno()
                );
                return Err(e);
            }
            bo.set_saved(true);
            list.push(bo, GFP_KERNEL)?;
        }
        Ok((list.len(), Some(held)))
    }

    /// The objects in VRAM now, lost ones left out.
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn vram_objects(&self) -> Result<KVec<ARef<Bo>>> {
        let mut v = KVec::new();
        let mut err = Ok(());
        self.bos.visit(|bo| {
            if bo.is_vram_object() && !bo.is_lost() && bo.vram().is_some() {
                if let Err(e) = v.push(bo.into(), GFP_KERNEL) {
                    err = Err(Error::from(e));
                }
            }
        });
        err.map(|()| v)
    }

    /// Copies `bo`'s VRAM to its system pages (`to_vram` false) or back.
    ///
    /// # Errors
    ///
    /// `ENOENT` (no longer in VRAM), `ENOMEM`, `EIO`, `ETIMEDOUT`.
    fn copy_object(&self, m: &Migrator, bo: &Bo, to_vram: bool) -> Result {
        let vram = {
            let p = bo.vram();
            gem::vram_segments(&p.as_ref().ok_or(ENOENT)?.alloc)?
        };
        let pages = gem::shmem_segments(bo)?;
        let size = bo.size() as u64;
        // The device's sanitizer is told of both sides of the copy for its
        // duration, under the object's current generation.
        let san = self.san_mem.as_ref().filter(|s| s.on()).cloned();
        let _decl = match &san {
            Some(s) => Some((
                s.declare_tagged(ranges_of(&vram, 0, size)?, Tag::of(bo))?,
                s.declare_tagged(ranges_of(&pages, 0, size)?, Tag::of(bo))?,
            )),
            None => None,
        };
        let timeout = copy_timeout();
        match to_vram {
            false => self.gpu.migrate_copy(m, bo, &vram, &pages, size, timeout),
            true => self.gpu.migrate_copy(m, bo, &pages, &vram, size, timeout),
        }
    }

    /// Saves one object (claimed as moving for the copy).
    ///
    /// # Errors
    ///
    /// `EBUSY` (being moved), as [`Vgpu::copy_object`].
    pub(crate) fn save_one(&self, m: &Migrator, bo: &Bo) -> Result {
        if !bo.begin_move() {
            return Err(EBUSY);
        }
        let r = self.copy_object(m, bo, false);
        bo.end_move();
        r
    }

    /// Bytes of the objects saved by the last suspend.
    fn saved_bytes(&self) -> u64 {
        self.saved.lock().iter().map(|b| b.size() as u64).sum()
    }

    /// The resume's work: every saved object's contents copied back to its
    /// blocks (`up`: the device came back; if not, they are lost) and its
    /// system pages given back. Returns the objects restored and lost.
    fn restore_vram(&self, up: bool) -> (usize, usize) {
        let list = core::mem::take(&mut *self.saved.lock());
        self.restore_list(&list, up)
    }

    /// Copies the contents of the objects of `list`, saved in their system
    /// pages, back to their VRAM blocks (`up`: the device is back; if not,
    /// they are lost), their system pages given back; the owners of those
    /// that could not be copied told. Returns the objects restored and
    /// lost.
    pub(crate) fn restore_list(&self, list: &[ARef<Bo>], up: bool) -> (usize, usize) {
        let Some(first) = list.first() else {
            return (0, 0);
        };
        let mut mover = self.mover(first.dev()).ok();
        let (mut restored, mut lost) = (0, 0);
        let mut owners: KVec<u64> = KVec::new();
        for bo in list.iter() {
            let copied = match mover.as_deref_mut().and_then(Option::as_mut) {
                Some(m) if up => {
                    bo.begin_move();
                    let r = self.copy_object(m, bo, true);
                    bo.end_move();
                    r
                }
                _ => Err(EIO),
            };
            bo.set_saved(false);
            match copied {
                Ok(()) => {
                    restored += 1;
                    // The pages held the contents only across the sleep
                    // (busy ones stay until the object goes: memory held
                    // longer, nothing wrong).
                    let _ = gem::release_system_pages(bo);
                }
                Err(_) => {
                    lost += 1;
                    bo.mark_lost();
                    let _ = owners.push(bo.owner(), GFP_KERNEL);
                }
            }
        }
        drop(mover);
        if !owners.is_empty() {
            self.gpu.report_vram_lost(&owners);
        }
        (restored, lost)
    }
}
