// SPDX-License-Identifier: GPL-2.0

//! Runtime power management: an idle device is suspended and resumed at
//! its next use, transparently to applications.
//!
//! * **Idle**: no job on a ring or in a job queue, no `VM_BIND_OPS` job,
//!   no user-mode queue (its doorbell is written without an ioctl, which
//!   could not wake the device), not wedged, no reset running.
//! * **Suspend** (the watchdog's tick, idle for `autosuspend_ms`): the
//!   driver's state is what the device loses (contexts, rings, page-table
//!   roots, the firmware), so nothing is saved but the event numbering's
//!   restart; `POWER_SET D3HOT` (VRAM kept in self-refresh). `SUBMIT` and
//!   the other device users wait (`resetting`) until a resume.
//! * **Resume** (the entry of every ioctl that uses the device,
//!   [`Gpu::runtime_resume`]): `POWER_SET D0`, then what a device reset
//!   does after its power-on ([`Gpu::restart_device`]): the firmware
//!   booted, every context created again on the same page tables, VRAM
//!   loss reported if the device lost it anyway.
//!
//! An ioctl holds a [`PmRef`] while it runs: no suspension starts then.
//! The suspension announces itself (`pm_suspended`, a full barrier) before
//! it counts the users, and a user counts itself (a full barrier) before
//! it looks at `pm_suspended`: one of the two always sees the other.
//!
//! Lock order: [`Gpu::ops`] across a suspend or a resume, the state lock
//! briefly under it; commands are sent without the state lock.

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

impl Gpu {
    /// Whether nothing in the driver is waiting for the device.
    fn idle(&self) -> bool {
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
    pub(crate) fn pm_get(&self) -> Result<PmRef<'_>> {
        self.pm_users.fetch_add(1, Full);
        let r = PmRef(self);
        self.runtime_resume()?;
        Ok(r)
    }

    /// The watchdog's tick: suspends the device once it has been idle for
    /// `autosuspend_ms`. Skipped while another operation holds
    /// [`Gpu::ops`].
    pub(crate) fn runtime_suspend_check(&self) {
        let Some(delay_ms) = params::autosuspend_ms() else {
            return;
        };
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
        let Some(_ops) = self.ops.try_lock() else {
            return;
        };
        // Announced before the users are counted (see the module
        // documentation); SUBMIT may have queued a job since the look
        // above.
        self.pm_suspended.xchg(1, Full);
        if self.pm_users.load(Acquire) != 0 || !self.idle() {
            self.pm_suspended.store(0, Release);
            return;
        }
        self.state.lock().resetting = true;
        // The power-down resets the event numbering with the rest.
        self.hw.events.expect_restart();
        let r = self
            .cmd(Command::PowerSet {
                state: power_state::D3HOT,
            })
            .and_then(|r| r.get::<PowerReply>());
        let mut g = self.state.lock();
        match r {
            Ok(_) => {
                g.pm.suspended_at = Some(monotonic_ns());
                g.pm.suspends += 1;
            }
            Err(e) => {
                // Refused (busy, or the device failed to enter the state):
                // still running as it was; try again after another delay.
                g.pm.failures += 1;
                g.pm.idle_since = 0;
                g.resetting = false;
                self.pm_suspended.store(0, Release);
                drop(g);
                crate::dev_warn_ratelimited!(
                    self.pdev(),
                    "runtime suspend refused by the device (error {}): staying up\n",
                    e.to_errno()
                );
            }
        }
    }

    /// Resumes a suspended device (a no-op when it is up): what every
    /// ioctl that uses the device calls first.
    ///
    /// # Errors
    ///
    /// `EIO` when the device could not be brought back (it is then
    /// wedged), `ENODEV`.
    pub(crate) fn runtime_resume(&self) -> Result {
        if self.pm_suspended.load(Acquire) == 0 {
            return Ok(());
        }
        let mem = self.slots()?;
        let _ops = self.ops.lock();
        let Some(since) = self.state.lock().pm.suspended_at else {
            // Another caller resumed it meanwhile, or the suspension gave
            // up.
            return Ok(());
        };
        let t0 = monotonic_ns();
        let wake = || -> Result<u32> {
            let up = Command::PowerSet {
                state: power_state::D0,
            };
            // A device that failed to wake gets a second request.
            let r = match self.cmd(up) {
                Ok(r) => r,
                Err(e) => {
                    self.state.lock().pm.failures += 1;
                    crate::dev_warn_ratelimited!(
                        self.pdev(),
                        "runtime resume: the device did not wake (error {}): asking again\n",
                        e.to_errno()
                    );
                    self.cmd(up)?
                }
            };
            Ok(r.get::<PowerReply>()?.vram)
        };
        let ok = self.restart_device(mem, CTX_NONE, &wake);
        let now = monotonic_ns();
        {
            let mut g = self.state.lock();
            g.pm.suspended_at = None;
            self.pm_suspended.store(0, Release);
            g.pm.idle_since = 0;
            g.pm.resumes += 1;
            g.pm.suspended_ns = g.pm.suspended_ns.saturating_add(t0.saturating_sub(since));
            g.pm.last_resume_ns = now.saturating_sub(t0);
            g.pm.max_resume_ns = g.pm.max_resume_ns.max(g.pm.last_resume_ns);
        }
        if !ok {
            let start = kernel::time::Instant::<kernel::time::Monotonic>::now();
            self.record_resume_failure(mem, &start);
            return Err(EIO);
        }
        self.end_runtime_resume();
        Ok(())
    }

    /// A system resume took `ns` (power-on to VRAM restored): counted.
    pub(crate) fn count_sleep(&self, ns: u64) {
        let mut g = self.state.lock();
        g.pm.sleeps += 1;
        g.pm.last_sleep_resume_ns = ns;
    }

    /// The counters of `GET_PARAM`: `VGPU_PARAM_PM_STATE` (1: runtime
    /// suspended), `PM_SUSPENDS`, `PM_RESUMES`, `PM_SUSPENDED_MS` (the
    /// residency, the current suspension included), `SYSTEM_SLEEPS`.
    pub(crate) fn pm_param(&self, param: u32) -> Option<u64> {
        let pm = self.state.lock().pm;
        let current = pm
            .suspended_at
            .map_or(0, |t| monotonic_ns().saturating_sub(t));
        Some(match param {
            uapi::VGPU_PARAM_PM_STATE => u64::from(pm.suspended_at.is_some()),
            uapi::VGPU_PARAM_PM_SUSPENDS => pm.suspends,
            uapi::VGPU_PARAM_PM_RESUMES => pm.resumes,
            uapi::VGPU_PARAM_PM_SUSPENDED_MS => pm.suspended_ns.saturating_add(current) / 1_000_000,
            uapi::VGPU_PARAM_SYSTEM_SLEEPS => pm.sleeps,
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
            "state {} autosuspend_ms {} suspends {} resumes {} failures {} suspended_ms {} last_resume_us {} max_resume_us {} system_sleeps {} last_system_resume_us {}",
            if pm.suspended_at.is_some() { "suspended" } else { "active" },
            params::autosuspend_ms().unwrap_or(0),
            pm.suspends,
            pm.resumes,
            pm.failures,
            pm.suspended_ns.saturating_add(current) / 1_000_000,
            pm.last_resume_ns / 1000,
            pm.max_resume_ns / 1000,
            pm.sleeps,
            pm.last_sleep_resume_ns / 1000
        )
    }
}
