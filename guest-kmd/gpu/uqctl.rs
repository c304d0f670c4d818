// SPDX-License-Identifier: GPL-2.0

//! User-mode queues, the operations: `UQ_CREATE`, `UQ_KICK`, suspending
//! and resuming the device's watch of their doorbells around resets (the
//! queue's state machine, and whether one of its fences completed, are in
//! [`super::uqueue`]). The watch is this block's implementation of
//! [`UqWatch`], the hook the reset ladder reaches it through
//! ([`super::hooks`]).

use super::{
    hooks::UqWatch,
    ring::ENGINES,
    state::Gpu,
    uqueue::{
        UqHw,
        DOORBELL_BYTES, //
    },
};
use crate::{
    file::Client,
    mmu::{
        PTE_EXEC,
        PTE_READ,
        PTE_WRITE, //
    },
    proto::{
        Command,
        MAX_RING_SIZE,
        MIN_RING_SIZE,
        WATCH_KEEP_POINTERS, //
    },
};
use kernel::{prelude::*, sync::Arc, uapi};

/// Checks that `[va, va + size)` lies in one mapping of `client` with at
/// least `perms`.
fn mapped(client: &Client, va: u64, size: u64, perms: u64) -> Result {
    let end = va.checked_add(size).ok_or(EINVAL)?;
    let m = client.vm.lock().find(va).ok_or(EINVAL)?;
    let m_end = m.va.checked_add(m.size).ok_or(EINVAL)?;
    if end > m_end || m.perms & perms != perms {
        return Err(EINVAL);
    }
    Ok(())
}

impl Gpu {
    /// `UQ_CREATE`: a user-mode queue of `client` on `a.engine`, its ring
    /// and doorbell block at the VAs given; returns its context id.
    ///
    /// # Errors
    ///
    /// `EINVAL` (flags, priority, engine, ring size, alignment, a range not
    /// mapped with the access the device needs), `ENOSPC` (no free slot,
    /// or the file's contexts are all used), `EIO` (wedged), `ENODEV`,
    /// `ENOMEM`, or the errno of a device command.
    pub(crate) fn uq_create(
        &self,
        client: &Arc<Client>,
        a: &uapi::drm_vgpu_uq_create,
    ) -> Result<u32> {
        let id = self.hw.identity.as_ref().ok_or(ENODEV)?;
        let engine = usize::try_from(a.engine).map_err(|_| EINVAL)?;
        if a.flags & !uapi::VGPU_UQ_CREATE_FLAGS != 0
            || a.pad != 0
            || a.priority > uapi::VGPU_CTX_PRIORITY_REALTIME
            || engine >= ENGINES
            || id.engine_mask & (1 << engine) == 0
            || !a.ring_size.is_power_of_two()
            || !(MIN_RING_SIZE..=MAX_RING_SIZE).contains(&a.ring_size)
            || a.ring_va % 4096 != 0
            || a.doorbell_va % DOORBELL_BYTES != 0
        {
            return Err(EINVAL);
        }
        let (lo, hi) = client.vm.lock().user_range();
        let in_user =
            |va: u64, size: u64| va >= lo && va.checked_add(size).is_some_and(|e| e <= hi);
        if !in_user(a.ring_va, u64::from(a.ring_size)) || !in_user(a.doorbell_va, DOORBELL_BYTES) {
            return Err(EINVAL);
        }
        mapped(
            client,
            a.ring_va,
            u64::from(a.ring_size),
            PTE_READ | PTE_EXEC,
        )?;
        mapped(client, a.doorbell_va, DOORBELL_BYTES, PTE_READ | PTE_WRITE)?;
        let uq = UqHw {
            engine,
            ring_va: a.ring_va,
            ring_size: a.ring_size,
            doorbell_va: a.doorbell_va,
            start: 0,
            watch: true,
        };
        self.create_context(client, a.priority, 0, 0, Some(uq))
    }

    /// `UQ_KICK`: the device looks at every watched doorbell block now.
    ///
    /// # Errors
    ///
    /// `EINVAL` (not a user-mode queue, `pad`), `ENOENT`, `ENODEV`, or the
    /// errno of the device command.
    pub(crate) fn uq_kick(&self, client: &Arc<Client>, a: &uapi::drm_vgpu_uq_kick) -> Result {
        if a.pad != 0 {
            return Err(EINVAL);
        }
        {
            let mut g = self.lock()?;
            let (_, c) = g.find(client, a.ctx_id)?;
            if c.uq.is_none() {
                return Err(EINVAL);
            }
        }
        self.cmd(Command::DoorbellKick).map(|_| ())
    }
}

impl UqWatch for Gpu {
    /// Stops watching the doorbell of every watched queue on `engine`
    /// (`None`: every engine) before a reset, so that no doorbell reaches a
    /// ring while the reset runs. Returns the slots suspended. The caller
    /// holds [`Gpu::ops`].
    fn suspend_queues(&self, engine: Option<usize>) -> KVec<u32> {
        let mut todo = KVec::new();
        {
            let g = self.state.lock();
            for (i, s) in g.slots.iter().enumerate() {
                let Some(c) = s else { continue };
                let Some(q) = &c.uq else { continue };
                if q.watched && !c.destroying && engine.is_none_or(|e| e == q.engine) {
                    let _ = todo.push((i as u32, q.engine), GFP_KERNEL);
                }
            }
        }
        let mut done = KVec::new();
        for (hw, e) in todo {
            let r = self.cmd(Command::DoorbellWatch {
                ctx_id: hw,
                engine: e as u32,
                doorbell_va: 0,
                start: 0,
                flags: 0,
            });
            if r.is_ok() {
                if let Some(q) = self.state.lock().slot(hw).and_then(|c| c.uq.as_mut()) {
                    q.watched = false;
                }
                let _ = done.push(hw, GFP_KERNEL);
            }
        }
        done
    }

    /// Watches the queues `slots` suspended again, unless errored or
    /// banned: the one the reset reported in flight (`innocent`, with the
    /// read pointer where it stopped) restarts there, the others keep
    /// their pointers. The caller holds [`Gpu::ops`].
    fn resume_queues(&self, slots: &[u32], innocent: Option<(u32, u32)>) {
        for &hw in slots {
            let q = {
                let mut g = self.state.lock();
                let Some(c) = g.slot(hw) else { continue };
                if c.errored || c.banned || c.destroying {
                    continue;
                }
                let restart = innocent.filter(|&(i, _)| i == hw).map(|(_, rptr)| rptr);
                if restart.is_some() {
                    c.set_innocent();
                }
                let Some(q) = c.uq.as_mut() else { continue };
                q.restart_clock();
                (q.engine, q.doorbell_va, restart)
            };
            let (engine, va, restart) = q;
            let cmd = match restart {
                Some(start) => Command::DoorbellWatch {
                    ctx_id: hw,
                    engine: engine as u32,
                    doorbell_va: va,
                    start,
                    flags: 0,
                },
                None => Command::DoorbellWatch {
                    ctx_id: hw,
                    engine: engine as u32,
                    doorbell_va: va,
                    start: 0,
                    flags: WATCH_KEEP_POINTERS,
                },
            };
            match self.cmd(cmd) {
                Ok(_) => {
                    if let Some(q) = self.state.lock().slot(hw).and_then(|c| c.uq.as_mut()) {
                        q.watched = true;
                    }
                }
                Err(e) => crate::dev_warn_ratelimited!(
                    self.pdev(),
                    "user queue in slot {} not watched again after the reset: error {}\n",
                    hw,
                    e.to_errno()
                ),
            }
        }
    }

    /// Stops watching the doorbells of queues that errored or were banned
    /// (a fault or engine error reported by an event, which cannot talk to
    /// the device itself): their rings take no more work. From the hang
    /// check; the caller holds [`Gpu::ops`].
    fn suspend_failed_queues(&self) {
        let mut todo = KVec::new();
        {
            let g = self.state.lock();
            for (i, s) in g.slots.iter().enumerate() {
                let Some(c) = s else { continue };
                let Some(q) = &c.uq else { continue };
                if q.watched && (c.errored || c.banned) && !c.destroying {
                    let _ = todo.push((i as u32, q.engine), GFP_KERNEL);
                }
            }
        }
        for (hw, e) in todo {
            if self
                .cmd(Command::DoorbellWatch {
                    ctx_id: hw,
                    engine: e as u32,
                    doorbell_va: 0,
                    start: 0,
                    flags: 0,
                })
                .is_ok()
            {
                if let Some(q) = self.state.lock().slot(hw).and_then(|c| c.uq.as_mut()) {
                    q.watched = false;
                }
            }
        }
    }
}
