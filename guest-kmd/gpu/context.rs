// SPDX-License-Identifier: GPL-2.0

//! Contexts: `CTX_CREATE`, `CTX_DESTROY`, `CTX_QUERY`, and the teardown of
//! a closing file's contexts.
//!
//! A context is a device context (`CONTEXT_CREATE`, id = a device slot) on
//! its file's page table, with one ring per engine it selected, in the slot's
//! KMD memory ([`super::ring`]), mapped into the file's address space in the
//! KMD range while the context exists.
//!
//! The device side of creation is [`super::hwctx`] (the device reset
//! creates contexts again the same way); unmapping a slot's memory
//! invalidates the TLBs through [`super::tlb`].
//!
//! Creation and destruction hold [`Gpu::ops`] across their device commands
//! and take the state lock only to decide and to record (see the lock order
//! in the [module documentation](super)).

use super::{
    hooks::HangCheck,
    hwctx::HwCtx,
    ring::{
        ENGINES,
        RING_SIZE,
        SLOT_BYTES,
        SLOT_VA_STRIDE, //
    },
    state::{
        Ctx,
        CtxArgs,
        Gpu,
        MAX_FILE_CONTEXTS, //
    },
    uqueue::{
        self,
        UqHw, //
    },
};
use crate::{
    file::{
        current_tgid,
        Client,
        EngineTime, //
    },
    mmu::{
        PTE_EXEC,
        PTE_READ,
        PTE_WRITE, //
    },
    proto::{
        ctx_state,
        stats_kind,
        Command,
        ContextQueryReply,
        StatsReply,
        CTX_FLAG_REPLAYABLE_FAULTS,
        DESTROY_FLAG_FORCE, //
    },
    vm::{
        self,
        PAGE_4K, //
    },
};
use kernel::{
    prelude::*,
    sync::Arc,
    time::{
        delay::fsleep,
        Delta, //
    },
    uapi,
};

/// `CONTEXT_DESTROY` retries on `BUSY` before forcing.
const DESTROY_RETRIES: u32 = 4;

// Every slot's memory fits the KMD range of an address space.
const _: () = assert!(SLOT_VA_STRIDE * crate::proto::MAX_CONTEXTS as u64 <= vm::VA_KMD_RESERVED);
// They fit below the window of host mappings.
const _: () =
    assert!(SLOT_VA_STRIDE * crate::proto::MAX_CONTEXTS as u64 <= crate::hostmem::WINDOW_OFFSET);

/// What `CTX_QUERY` returns.
pub(crate) struct CtxQuery {
    pub(crate) reset_status: u32,
    pub(crate) state: u32,
    pub(crate) fault_access: u32,
    pub(crate) fault_va: u64,
    pub(crate) fault_reason: u32,
    pub(crate) hangs: u32,
    pub(crate) faults: u32,
    pub(crate) engine_error: u32,
    pub(crate) error_at: Option<super::state::ErrorAt>,
    pub(crate) san_reports: u32,
    pub(crate) san_last_seq: u64,
}

impl Gpu {
    /// Where device slot `hw`'s memory is mapped in a client's address
    /// space (the KMD range above the user range).
    fn slot_va(client: &Client, hw: u32) -> u64 {
        let end = client.vm.lock().user_range().1;
        end + u64::from(hw) * SLOT_VA_STRIDE
    }

    /// `CTX_CREATE`: a context of `client` on the engines of `engine_mask`.
    ///
    /// # Errors
    ///
    /// `EINVAL` (flags, priority or engines), `ENOSPC` (no free slot, or the
    /// file's [`MAX_FILE_CONTEXTS`]), `EIO` (wedged or broken), `ENODEV`,
    /// `ENOMEM`, or the errno of a device command.
    pub(crate) fn ctx_create(
        &self,
        client: &Arc<Client>,
        priority: u32,
        engine_mask: u32,
        flags: u32,
    ) -> Result<u32> {
        let id = self.hw.identity.as_ref().ok_or(ENODEV)?;
        if flags & !uapi::VGPU_CTX_CREATE_FLAGS != 0
            || priority > uapi::VGPU_CTX_PRIORITY_REALTIME
            || engine_mask == 0
            || engine_mask & !id.engine_mask != 0
            || engine_mask >> ENGINES != 0
        {
            return Err(EINVAL);
        }
        let hw_flags = if flags & uapi::VGPU_CTX_CREATE_REPLAYABLE != 0 {
            CTX_FLAG_REPLAYABLE_FAULTS
        } else {
            0
        };
        self.create_context(client, priority, engine_mask, hw_flags, None)
    }

    /// A context of `client` in a free slot: KMD rings on the engines of
    /// `engine_mask`, or the user-mode queue `uq`; device flags `hw_flags`.
    /// Returns its id.
    ///
    /// # Errors
    ///
    /// `ENOSPC` (no free slot, or the file's [`MAX_FILE_CONTEXTS`]), `EIO`
    /// (wedged or broken), `ENODEV`, `ENOMEM`, or the errno of a device
    /// command.
    pub(crate) fn create_context(
        &self,
        client: &Arc<Client>,
        priority: u32,
        engine_mask: u32,
        hw_flags: u32,
        uq: Option<UqHw>,
    ) -> Result<u32> {
        self.check_usable()?;
        let slots = self.slots()?;
        // No other creation, destruction or reset runs until the context is
        // recorded: the slot chosen below stays free.
        let _ops = self.ops.lock();
        let (hw, handle) = {
            let mut g = self.lock()?;
            if g.wedged {
                return Err(EIO);
            }
            let mine = g
                .slots
                .iter()
                .flatten()
                .filter(|c| Arc::ptr_eq(&c.client, client))
                .count();
            if mine >= MAX_FILE_CONTEXTS {
                return Err(ENOSPC);
            }
            let retired = g.retired_slots;
            let hw = g
                .slots
                .iter()
                .enumerate()
                .position(|(i, s)| s.is_none() && (i >= 64 || retired & (1 << i) == 0))
                .ok_or(ENOSPC)?;
            let hw = u32::try_from(hw).map_err(|_| ENOSPC)?;
            let handle = g.next_handle;
            g.next_handle = g.next_handle.wrapping_add(1).max(1);
            (hw, handle)
        };
        slots.zero(hw);
        let kmd_va = Self::slot_va(client, hw);
        let base = slots.addr(hw);
        let pt_root;
        {
            let mut vm = client.vm.lock();
            pt_root = vm.root_addr();
            vm.map_kmd(kmd_va, base, PAGE_4K, PTE_READ | PTE_WRITE)?;
            if let Err(e) = vm.map_kmd(
                kmd_va + PAGE_4K,
                base + PAGE_4K,
                u64::from(RING_SIZE) * ENGINES as u64,
                PTE_READ | PTE_EXEC,
            ) {
                vm.unmap_kmd(kmd_va, PAGE_4K);
                return Err(e);
            }
        }
        let hc = HwCtx {
            hw,
            priority,
            flags: hw_flags,
            pt_root,
            engine_mask,
            kmd_va,
            uq,
        };
        if let Err(e) = self.hw_create(&hc) {
            self.unmap_slot(client, hw, kmd_va);
            return Err(e);
        }
        let ctx = Ctx::new(CtxArgs {
            client: client.clone(),
            handle,
            engine_mask,
            priority,
            flags: hw_flags,
            pt_root,
            kmd_va,
            pid: current_tgid(),
            uq,
        });
        if let Some(s) = self.state.lock().slots.get_mut(hw as usize) {
            *s = Some(ctx);
        }
        Ok(handle)
    }

    /// Unmaps a slot's memory from its client and invalidates the client's
    /// other contexts' TLBs for it (no GPU lock held).
    fn unmap_slot(&self, client: &Arc<Client>, hw: u32, kmd_va: u64) {
        client.vm.lock().unmap_kmd(kmd_va, SLOT_BYTES as u64);
        self.invalidate_client(client, Some(hw), kmd_va, SLOT_BYTES as u64);
    }

    /// `CTX_DESTROY`.
    ///
    /// # Errors
    ///
    /// `ENOENT` (no such context of this file), `ENODEV`, or the errno of
    /// the device's `CONTEXT_DESTROY`.
    pub(crate) fn ctx_destroy(&self, client: &Arc<Client>, handle: u32) -> Result {
        let _ops = self.ops.lock();
        let (hw, engines) = {
            let mut g = self.lock()?;
            let (hw, ctx) = g.find(client, handle)?;
            ctx.destroying = true;
            (hw, ctx.engine_mask)
        };
        // Its last engine time, before the device forgets it.
        {
            let mut t = client.engine_time.lock();
            self.sample_engine_time(&mut t, handle, hw, engines);
            t.forget(handle);
        }
        self.destroy_hw(hw)
    }

    /// The contexts of `client` as (handle, device slot, engine mask), for
    /// [`Gpu::sample_engine_time`].
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn client_contexts(&self, client: &Arc<Client>) -> Result<KVec<(u32, u32, u32)>> {
        let g = self.state.lock();
        let mut out = KVec::new();
        for (hw, c) in g.slots.iter().enumerate() {
            if let Some(c) = c {
                if Arc::ptr_eq(&c.client, client) && !c.destroying {
                    out.push((c.handle, hw as u32, c.engine_mask), GFP_KERNEL)?;
                }
            }
        }
        Ok(out)
    }

    /// Adds what context `handle` (device slot `hw`) used of each engine in
    /// `engines` since its last sample to its file's engine time
    /// (`QUERY_STATS` `CONTEXT_ENGINE`). A device that cannot answer adds
    /// nothing: fdinfo shows the time known so far.
    pub(crate) fn sample_engine_time(
        &self,
        t: &mut EngineTime,
        handle: u32,
        hw: u32,
        engines: u32,
    ) {
        if self.check_usable().is_err() {
            return;
        }
        for e in 0..ENGINES {
            if engines & (1 << e) == 0 {
                continue;
            }
            let id = stats_kind::context_engine_id(hw, e as u32);
            let Ok(reply) = self.cmd(Command::QueryStats {
                kind: stats_kind::CONTEXT_ENGINE,
                id,
            }) else {
                continue;
            };
            match reply.get::<StatsReply>() {
                Ok(r) if r.kind == stats_kind::CONTEXT_ENGINE && r.id == id => {
                    // Not kept (ENOMEM): counted at the next sample.
                    let _ = t.sample(handle, e, r.busy_ns);
                }
                _ => {}
            }
        }
    }

    /// Destroys device slot `hw` (already marked destroying; the caller
    /// holds [`Gpu::ops`]): `BUSY` is retried with backoff, then forced.
    /// The slot is freed only when the device confirmed (or is gone);
    /// otherwise it stays reserved so that its memory and tables are never
    /// reused under a live context.
    fn destroy_hw(&self, hw: u32) -> Result {
        let mut result = Ok(());
        // Work the driver knows is pending is cancelled: the destroy is
        // forced at once (a destroy without FORCE of a context with work in
        // flight is refused, and the device's sanitizer reports it as a
        // teardown mistake). BUSY is retried for the work the driver
        // could not know of (a slice finishing after its last fence).
        // A user-mode queue's work is in its status block: accepted and not
        // yet executed, or running, or waiting on a semaphore.
        let mem = self.slots().ok();
        let pending = self.state.lock().slot(hw).is_some_and(|c| {
            c.rings.iter().any(|r| !r.jobs.is_empty())
                || c.uq
                    .as_ref()
                    .zip(mem)
                    .is_some_and(|(q, m)| uqueue::has_work(&m.status(hw, q.engine)))
        });
        if self.check_usable().is_ok() {
            let mut delay = 5;
            let mut done = false;
            if pending {
                match self.cmd(Command::ContextDestroy {
                    ctx_id: hw,
                    flags: DESTROY_FLAG_FORCE,
                }) {
                    Ok(_) => done = true,
                    Err(e) => result = Err(e),
                }
            }
            for _ in 0..DESTROY_RETRIES {
                if done || result.is_err() {
                    break;
                }
                match self.cmd(Command::ContextDestroy {
                    ctx_id: hw,
                    flags: 0,
                }) {
                    Ok(_) => {
                        done = true;
                        break;
                    }
                    Err(e) if e == EBUSY => {
                        fsleep(Delta::from_millis(delay));
                        delay *= 2;
                    }
                    Err(e) => {
                        result = Err(e);
                        break;
                    }
                }
            }
            if !done && result.is_ok() {
                result = self
                    .cmd(Command::ContextDestroy {
                        ctx_id: hw,
                        flags: DESTROY_FLAG_FORCE,
                    })
                    .map(|_| ());
            }
        }
        let gone = result.is_ok() || self.check_usable().is_err();
        let mut dropped = KVec::new();
        let taken = {
            let mut g = self.state.lock();
            let Some(slot) = g.slots.get_mut(hw as usize) else {
                return result;
            };
            if let Some(c) = slot.as_mut() {
                for e in 0..ENGINES {
                    // Destroyed, not failed: exported fences say cancelled,
                    // queued jobs too (their dependencies may never signal).
                    c.rings[e].exported.clear();
                    for j in c.fail_ring(e, -(kernel::bindings::ECANCELED as i32)) {
                        let _ = dropped.push(j, GFP_KERNEL);
                    }
                }
            }
            if gone {
                slot.take()
            } else {
                None
            }
        };
        drop(dropped);
        match taken {
            Some(c) => self.unmap_slot(&c.client, hw, c.kmd_va),
            None if !gone => crate::dev_err_ratelimited!(
                self.pdev(),
                "context slot {} could not be destroyed: slot kept\n",
                hw
            ),
            None => {}
        }
        self.wake();
        result
    }

    /// Destroys every context of a closing file. Returns `false` if one
    /// could not be destroyed (the file's address space must then be kept).
    pub(crate) fn destroy_client(&self, client: &Arc<Client>) -> bool {
        self.cancel_binds(client);
        let _ops = self.ops.lock();
        let mut todo = KVec::new();
        {
            let mut g = self.state.lock();
            for (i, s) in g.slots.iter_mut().enumerate() {
                if let Some(c) = s {
                    if Arc::ptr_eq(&c.client, client) && !c.destroying {
                        c.destroying = true;
                        if todo.push(i as u32, GFP_KERNEL).is_err() {
                            return false;
                        }
                    }
                }
            }
        }
        for hw in todo {
            let _ = self.destroy_hw(hw);
        }
        let g = self.state.lock();
        !g.slots
            .iter()
            .flatten()
            .any(|c| Arc::ptr_eq(&c.client, client))
    }

    /// `CTX_QUERY`.
    ///
    /// # Errors
    ///
    /// `ENOENT` (no such context of this file), `ENODEV`.
    pub(crate) fn ctx_query(&self, client: &Arc<Client>, handle: u32) -> Result<CtxQuery> {
        self.hang_check();
        self.refresh_query(client, handle);
        let lost = if self.hw.link.is_lost() {
            uapi::VGPU_CTX_STATE_DEVICE_LOST
        } else {
            0
        };
        let mut g = self.lock()?;
        let (_, c) = g.find(client, handle)?;
        Ok(CtxQuery {
            reset_status: c.reset_status,
            state: c.state_bits() | lost,
            fault_access: c.fault_access,
            fault_va: c.fault_va,
            fault_reason: c.fault_reason,
            hangs: c.hangs,
            faults: c.faults,
            engine_error: c.engine_error,
            error_at: c.error_at,
            san_reports: c.san_reports,
            san_last_seq: c.san_last_seq,
        })
    }

    /// Reads the device's view of a context (`CONTEXT_QUERY`): an errored
    /// context the events did not report (lost events) is marked.
    fn refresh_query(&self, client: &Arc<Client>, handle: u32) {
        let hw = match self.state.lock().find(client, handle) {
            Ok((hw, _)) => hw,
            Err(_) => return,
        };
        let Ok(reply) = self.cmd(Command::ContextQuery { ctx_id: hw }) else {
            return;
        };
        let Ok(q) = reply.get::<ContextQueryReply>() else {
            return;
        };
        let mut g = self.state.lock();
        let mut gone = KVec::new();
        if let Ok((_, c)) = g.find(client, handle) {
            if q.state & ctx_state::ERRORED != 0 && !c.errored {
                c.set_errored();
                for e in 0..ENGINES {
                    for j in c.fail_ring(e, -(kernel::bindings::EIO as i32)) {
                        let _ = gone.push(j, GFP_KERNEL);
                    }
                }
            }
        }
        if let Ok(mem) = self.slots() {
            g.release_failed(mem);
        }
        drop(g);
        drop(gone);
    }

    /// Cancels every exported fence (device going away): sync_file users
    /// see `-ECANCELED` rather than waiting for the files to close.
    pub(crate) fn cancel_exported(&self) {
        let mut dropped = KVec::new();
        let binds = {
            let mut g = self.state.lock();
            for c in g.slots.iter_mut().flatten() {
                for e in 0..ENGINES {
                    c.rings[e].exported.clear();
                    // Queued jobs will never reach a ring. Not recorded as
                    // failed: their `WAIT`ers, like those of the jobs on the
                    // ring, see the device gone (`ENODEV`).
                    if let Some(q) = c.queues.get_mut(e) {
                        for j in q.take_all() {
                            let _ = dropped.push(j, GFP_KERNEL);
                        }
                    }
                }
            }
            core::mem::take(&mut g.binds)
        };
        // Outside the lock: cancelled fences, dependencies removed, objects
        // and clients released.
        drop(dropped);
        drop(binds);
    }
}
