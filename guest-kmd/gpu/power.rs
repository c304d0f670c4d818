// SPDX-License-Identifier: GPL-2.0

//! Runtime power management: an idle device is suspended and resumed at
//! its next use, transparently to applications.
//!
//! * **Idle**: no job on a ring or in a job queue, no `VM_BIND_OPS` job,
//!   no user-mode queue (its doorbell is written without an ioctl, which
//!   could not wake the device), not wedged, no reset running.
//! * **Suspend** (the watchdog's tick, idle for `autosuspend_ms`): the
//!   driver's state is what the device loses (contexts, rings, page-table
//!   roots, the firmware), so nothing of it is saved but the event
//!   numbering's restart. The target is `D3HOT` (VRAM kept in
//!   self-refresh) or, when `vram_d3cold_threshold_mib` allows it,
//!   `D3COLD` (VRAM off): then the owner of the VRAM objects (a
//!   [`VramKeeper`], [`crate::d3cold`]) first holds every file's jobs back
//!   and copies each object's contents to its system pages, as xe evicts
//!   VRAM before a D3cold (`xe_pm_runtime_suspend`, `xe_bo_evict_all`).
//!   `SUBMIT` and the other device users wait (`resetting`) until a
//!   resume.
//! * **Resume** (the entry of every ioctl that uses the device,
//!   [`Gpu::runtime_resume`]): `POWER_SET D0`, then what a device reset
//!   does after its power-on ([`Gpu::restart_device`]): the firmware
//!   booted, every context created again on the same page tables, VRAM
//!   loss reported for what was not saved; after a `D3COLD` the saved
//!   contents are copied back before any user goes on.
//!
//! An ioctl holds a [`PmRef`] while it runs: no suspension starts then.
//! The suspension announces itself (`pm_suspended`, a full barrier) before
//! it counts the users, and a user counts itself (a full barrier) before
//! it looks at `pm_suspended`: one of the two always sees the other. What
//! an ioctl did between a D3cold's save and that announcement (an object
//! created, moved or CPU-mapped) the keeper finds
//! ([`VramKeeper::save_still_whole`]): the suspension is then given up.
//!
//! Lock order: [`Gpu::pm_resume`] → [`Gpu::ops`] → the state lock
//! (briefly); a resume lets [`Gpu::ops`] go before the copy back takes the
//! driver's copy context, and a suspension takes [`Gpu::ops`] only after
//! its save has let the copy context go (which takes [`Gpu::ops`] under it
//! when it creates its context). Commands are sent without the state
//! lock.

use super::state::Gpu;
use crate::{
    ffi::monotonic_ns,
    params,
    proto::{power_state, Command, PowerReply, CTX_NONE},
};
use kernel::{
    prelude::*,
    sync::atomic::{
        Acquire,
        Full,
        Release, //
    },
    uapi,
};

/// A user of the device (an ioctl): the device is awake and stays so
/// while this lives.
pub(crate) struct PmRef<'a>(&'a Gpu);

impl Drop for PmRef<'_> {
    fn drop(&mut self) {
        self.0.pm_users.fetch_sub(1, Release);
    }
}

/// What a suspension to `D3COLD` needs from the owner of the VRAM objects:
/// their contents saved before the power goes, copied back after it
/// returns (implemented by [`crate::device::Vgpu`] in [`crate::d3cold`]).
pub(crate) trait VramKeeper {
    /// On an idle device, before the suspension is announced: holds every
    /// file's jobs back and copies every VRAM object to its system pages.
    /// `Ok(true)`: saved, `D3COLD` may go; `Ok(false)`: VRAM may not go
    /// off now (`D3HOT`), nothing held.
    ///
    /// # Errors
    ///
    /// `EBUSY` (work arrived, an object is moving), `ENOMEM`, `EIO`: no
    /// suspension now; nothing held or saved.
    fn save_for_cold(&self) -> Result<bool>;
    /// After the announcement (no user, idle): whether what was saved is
    /// still every VRAM object's contents.
    fn save_still_whole(&self) -> bool;
    /// The save's end: the files let go; `entered` false (the device did
    /// not go to `D3COLD`) also discards what was saved.
    fn end_save(&self, entered: bool);
    /// After the return from `D3COLD` (`up`: the device is back; if not,
    /// the saved objects are lost): the contents copied back. Returns the
    /// objects restored and their bytes.
    fn restore_after_cold(&self, up: bool) -> (u64, u64);
}

impl Gpu {
    /// Whether nothing in the driver is waiting for the device.
    pub(crate) fn idle(&self) -> bool {
        let g = self.state.lock();
        !g.wedged
            && !g.resetting
            && g.binds.is_empty()
            && g.slots.iter().flatten().all(|c| {
                c.uq.is_none()
                    && c.rings.iter().all(|r| r.jobs.is_empty())
                    && c.queues.iter().all(|q| q.is_empty())
            })
    }

    /// Wakes the device if it is suspended and keeps it awake while the
    /// returned reference lives.
    ///
    /// # Errors
    ///
    /// As [`Gpu::runtime_resume`].
    pub(crate) fn pm_get(&self, keeper: &dyn VramKeeper) -> Result<PmRef<'_>> {
        self.pm_users.fetch_add(1, Full);
        let r = PmRef(self);
        self.runtime_resume(keeper)?;
        Ok(r)
    }

    /// The watchdog's tick: suspends the device once it has been idle for
    /// `autosuspend_ms`, to `D3COLD` when `keeper` saved VRAM, else to
    /// `D3HOT`. Skipped while another operation holds [`Gpu::ops`].
    pub(crate) fn runtime_suspend_check(&self, keeper: &dyn VramKeeper) {
        let Some(delay_ms) = params::autosuspend_ms() else {
            return;
        };
        // A virtual function's power states are the host's.
        if self.virtual_function() {
            return;
        }
        let now = monotonic_ns();
        let idle = self.idle();
        {
            let mut g = self.state.lock();
            if g.pm.suspended_at.is_some() {
                return;
            }
            if !idle {
                g.pm.idle_since = 0;
                return;
            }
            if g.pm.idle_since == 0 {
                g.pm.idle_since = now;
            }
            if now.saturating_sub(g.pm.idle_since) < u64::from(delay_ms) * 1_000_000 {
                return;
            }
        }
        let cold = match keeper.save_for_cold() {
            Ok(cold) => cold,
            // Work arrived or an object is moving: another delay.
            Err(_) => {
                self.state.lock().pm.idle_since = 0;
                return;
            }
        };
        let entered = self.power_down(cold, keeper);
        if cold {
            keeper.end_save(entered);
        }
    }

    /// The suspension proper, after the save (`cold`: VRAM saved, the
    /// files held back): announced, the users counted, `POWER_SET`.
    /// Returns whether the device went down.
    fn power_down(&self, cold: bool, keeper: &dyn VramKeeper) -> bool {
        let Some(_ops) = self.ops.try_lock() else {
            return false;
        };
        // Announced before the users are counted (see the module
        // documentation); SUBMIT may have queued a job since the look
        // above.
        self.pm_suspended.xchg(1, Full);
        let whole = !cold || keeper.save_still_whole();
        if self.pm_users.load(Acquire) != 0 || !self.idle() || !whole {
            self.pm_suspended.store(0, Release);
            self.state.lock().pm.idle_since = 0;
            return false;
        }
        self.state.lock().resetting = true;
        // The power-down resets the event numbering with the rest.
        self.hw.events.expect_restart();
        let state = if cold {
            power_state::D3COLD
        } else {
            power_state::D3HOT
        };
        let r = self
            .cmd(Command::PowerSet { state })
            .and_then(|r| r.get::<PowerReply>());
        let mut g = self.state.lock();
        match r {
            Ok(_) => {
                g.pm.suspended_at = Some(monotonic_ns());
                g.pm.cold = cold;
                g.pm.suspends = g.pm.suspends.saturating_add(1);
                if cold {
                    g.pm.cold_suspends = g.pm.cold_suspends.saturating_add(1);
                } else if params::vram_d3cold_threshold_mib().is_some() {
                    g.pm.hot_fallbacks = g.pm.hot_fallbacks.saturating_add(1);
                }
                true
            }
            Err(e) => {
                // Refused (busy, or the device failed to enter the state):
                // still running as it was; try again after another delay.
                g.pm.failures = g.pm.failures.saturating_add(1);
                g.pm.idle_since = 0;
                g.resetting = false;
                self.pm_suspended.store(0, Release);
                drop(g);
                crate::dev_warn_ratelimited!(
                    self.pdev(),
                    "runtime suspend refused by the device (error {}): staying up\n",
                    e.to_errno()
                );
                false
            }
        }
    }

    /// Resumes a suspended device (a no-op when it is up): what every
    /// ioctl that uses the device calls first. After a `D3COLD`, `keeper`
    /// copies VRAM back before anyone goes on.
    ///
    /// # Errors
    ///
    /// `EIO` when the device could not be brought back (it is then
    /// wedged), `ENODEV`.
    pub(crate) fn runtime_resume(&self, keeper: &dyn VramKeeper) -> Result {
        if self.pm_suspended.load(Acquire) == 0 {
            return Ok(());
        }
        let mem = self.slots()?;
        let _resume = self.pm_resume.lock();
        // Under `ops`: a suspension still going down has finished.
        let ops = self.ops.lock();
        let (since, cold) = {
            let g = self.state.lock();
            match g.pm.suspended_at {
                Some(t) => (t, g.pm.cold),
                // Another caller resumed it meanwhile, or the suspension
                // gave up.
                None => return Ok(()),
            }
        };
        let t0 = monotonic_ns();
        let ok = self.restart_device(mem, CTX_NONE, &|| self.power_up());
        if ok {
            // Rings may run again (the kernel's copies first: the files'
            // jobs need `pm_suspended` clear to be submitted).
            self.end_runtime_resume();
        } else {
            let start = kernel::time::Instant::<kernel::time::Monotonic>::now();
            self.record_resume_failure(mem, &start);
        }
        drop(ops);
        let t1 = monotonic_ns();
        let restored = cold.then(|| keeper.restore_after_cold(ok));
        let now = monotonic_ns();
        {
            let mut g = self.state.lock();
            g.pm.suspended_at = None;
            g.pm.cold = false;
            self.pm_suspended.store(0, Release);
            g.pm.idle_since = 0;
            g.pm.resumes = g.pm.resumes.saturating_add(1);
            g.pm.suspended_ns = g.pm.suspended_ns.saturating_add(t0.saturating_sub(since));
            g.pm.last_resume_ns = now.saturating_sub(t0);
            g.pm.max_resume_ns = g.pm.max_resume_ns.max(g.pm.last_resume_ns);
            if let Some((objects, bytes)) = restored {
                g.pm.last_restored = objects;
                g.pm.last_restored_bytes = bytes;
                g.pm.last_restore_ns = now.saturating_sub(t1);
            }
        }
        if ok {
            Ok(())
        } else {
            Err(EIO)
        }
    }

    /// `POWER_SET D0`, asked twice if the device does not wake the first
    /// time; returns what VRAM kept.
    fn power_up(&self) -> Result<u32> {
        let up = Command::PowerSet {
            state: power_state::D0,
        };
        let r = match self.cmd(up) {
            Ok(r) => r,
            Err(e) => {
                {
                    let mut g = self.state.lock();
                    g.pm.failures = g.pm.failures.saturating_add(1);
                }
                crate::dev_warn_ratelimited!(
                    self.pdev(),
                    "runtime resume: the device did not wake (error {}): asking again\n",
                    e.to_errno()
                );
                self.cmd(up)?
            }
        };
        Ok(r.get::<PowerReply>()?.vram)
    }

    /// A system resume took `ns` (power-on to VRAM restored): counted.
    pub(crate) fn count_sleep(&self, ns: u64) {
        let mut g = self.state.lock();
        g.pm.sleeps += 1;
        g.pm.last_sleep_resume_ns = ns;
    }

    /// Whether the device is a virtual function of a partitioned GPU
    /// (`IDENTIFY`): its power states are then the host's, and the driver
    /// never asks for one.
    pub(crate) fn virtual_function(&self) -> bool {
        self.hw
            .identity
            .as_ref()
            .is_some_and(|id| id.features & crate::proto::FEATURE_VIRTUAL_FUNCTION != 0)
    }

    /// The counters of `GET_PARAM`: `VGPU_PARAM_PM_STATE` (1: runtime
    /// suspended in `D3HOT`, 2: in `D3COLD`), `PM_SUSPENDS`, `PM_RESUMES`, `PM_SUSPENDED_MS` (the
    /// residency, the current suspension included), `SYSTEM_SLEEPS`,
    /// `PM_D3COLD_SUSPENDS`.
    pub(crate) fn pm_param(&self, param: u32) -> Option<u64> {
        let pm = self.state.lock().pm;
        let current = pm
            .suspended_at
            .map_or(0, |t| monotonic_ns().saturating_sub(t));
        Some(match param {
            uapi::VGPU_PARAM_PM_STATE => match (pm.suspended_at, pm.cold) {
                (None, _) => 0,
                (Some(_), false) => 1,
                (Some(_), true) => 2,
            },
            uapi::VGPU_PARAM_PM_SUSPENDS => pm.suspends,
            uapi::VGPU_PARAM_PM_RESUMES => pm.resumes,
            uapi::VGPU_PARAM_PM_SUSPENDED_MS => pm.suspended_ns.saturating_add(current) / 1_000_000,
            uapi::VGPU_PARAM_SYSTEM_SLEEPS => pm.sleeps,
            uapi::VGPU_PARAM_PM_D3COLD_SUSPENDS => pm.cold_suspends,
            _ => return None,
        })
    }

    /// debugfs `power`.
    pub(crate) fn show_power(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let pm = self.state.lock().pm;
        let now = monotonic_ns();
        let current = pm.suspended_at.map_or(0, |t| now.saturating_sub(t));
        writeln!(
            f,
            "state {} autosuspend_ms {} suspends {} resumes {} failures {} suspended_ms {} last_resume_us {} max_resume_us {} system_sleeps {} last_system_resume_us {} level {} d3cold_threshold_mib {} d3cold_suspends {} d3hot_fallbacks {} last_restored_objects {} last_restored_kib {} last_restore_us {}",
            if pm.suspended_at.is_some() { "suspended" } else { "active" },
            params::autosuspend_ms().unwrap_or(0),
            pm.suspends,
            pm.resumes,
            pm.failures,
            pm.suspended_ns.saturating_add(current) / 1_000_000,
            pm.last_resume_ns / 1000,
            pm.max_resume_ns / 1000,
            pm.sleeps,
            pm.last_sleep_resume_ns / 1000,
            match (pm.suspended_at, pm.cold) {
                (None, _) => "D0",
                (Some(_), false) => "D3hot",
                (Some(_), true) => "D3cold",
            },
            params::vram_d3cold_threshold_mib().unwrap_or(0),
            pm.cold_suspends,
            pm.hot_fallbacks,
            pm.last_restored,
            pm.last_restored_bytes / 1024,
            pm.last_restore_ns / 1000
        )
    }
}
