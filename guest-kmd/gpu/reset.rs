// SPDX-License-Identifier: GPL-2.0

//! Hangs and the reset ladder.
//!
//! A ring with pending jobs that has not completed one for `job_timeout_ms`
//! is hung. Hang checks run from a periodic watchdog (every tenth of the
//! timeout, see [`crate::watchdog`]), and also whenever a `WAIT` sleeps (at
//! least every quarter timeout), at each `SUBMIT` and `CTX_QUERY`, and on
//! writes to debugfs `hangcheck`. The check also rings refused doorbells
//! again and reports fence values written without their interrupt. It is
//! this block's implementation of [`HangCheck`]: the blocks below reach it
//! through that hook ([`super::hooks`]), as the ladder reaches user-mode
//! queues through [`UqWatch`] (their doorbells are not watched while a
//! rung runs).
//!
//! Recovery, holding [`Gpu::ops`] and with `SUBMIT` held off
//! (`GpuState::resetting`):
//!
//! 1. `ENGINE_RESET` of the ring's engine, naming the hung context: its
//!    ring is cleared whatever its state, its pending jobs fail, it is
//!    guilty; an innocent context whose job was in flight on that engine
//!    gets its unfinished jobs written again.
//! 2. If the engine reset fails: `DEVICE_RESET`, the firmware loaded again
//!    (the device is back in its boot state), then every context and
//!    ring is created again on the same page tables; the guilty context's
//!    jobs fail, innocent contexts' unfinished jobs are written again (their
//!    status becomes innocent).
//! 3. If that fails, the device is wedged: every waiter wakes with `EIO`,
//!    new submissions fail with `EIO`, and a `WEDGED=rebind` uevent is sent
//!    on the DRM nodes.
//!
//! A PCI function reset (`reset_prepare`/`reset_done`, see
//! [`crate::transport`]'s bring-up) runs rung 2 without a guilty context on
//! the restarted device ([`Gpu::finish_function_reset`]); when it succeeds a
//! wedged device is usable again.
//!
//! A context that caused `ban_hangs` hangs within `ban_window_ms` is banned
//! (`SUBMIT` fails with `EIO`).
//!
//! Every rung decides under the state lock, drops it for the device's
//! commands, and takes it again to record what happened.

use super::{
    dump::{
        HangDump,
        HangSite, //
    },
    hooks::{
        HangCheck,
        UqWatch, //
    },
    hwctx::HwCtx,
    ring::{
        Located,
        SlotMemory,
        ENGINES,
        MISSED_EVENT_NS, //
    },
    state::{
        push_log,
        Gpu,
        GpuState,
        ResetLog, //
    },
    uqueue,
};
use crate::{
    dev_info_ratelimited, dev_warn_ratelimited, ffi,
    proto::{
        ctx_state,
        engine,
        ring_state,
        Command,
        ContextQueryReply,
        DeviceResetReply,
        EngineResetReply,
        CTX_NONE, //
    },
    time::elapsed_ns,
    transport::control::{
        DoorbellSlot,
        PostedDoorbell, //
    },
    vram,
};
use kernel::{
    prelude::*,
    sync::atomic::Relaxed,
    time::{
        Instant,
        Monotonic, //
    },
};

/// How often the watchdog runs the hang check: a tenth of
/// `job_timeout_ms`, at least 20 ms.
pub(crate) fn check_period_ms() -> u32 {
    (crate::params::job_timeout_ms() / 10).max(20)
}

/// A hung ring, as the hang check found it.
#[derive(Clone, Copy)]
struct Hung {
    hw: u32,
    engine: usize,
    handle: u32,
    client: u64,
    pt_root: u64,
}

impl HangCheck for Gpu {
    /// Looks for a hung ring and recovers from it; rings refused doorbells
    /// again; reports lost fence interrupts. Skipped while another
    /// operation holds [`Gpu::ops`] (the next check looks again).
    fn hang_check(&self) {
        let Some(_ops) = self.ops.try_lock() else {
            return;
        };
        let timeout_ns = u64::from(crate::params::job_timeout_ms()) * 1_000_000;
        let Ok(mem) = self.slots() else { return };
        // User-mode queues that a fault or an engine error stopped take no
        // more work (the event that reported it could not tell the device).
        self.suspend_failed_queues();
        let refused = self.hw.take_failed_doorbells();
        // Slots for ringing them again, before the state lock.
        let mut doorbells = KVec::new();
        for _ in refused.iter() {
            let Ok(s) = self.hw.reserve_doorbell() else {
                break;
            };
            if doorbells.push(s, GFP_KERNEL).is_err() {
                break;
            }
        }
        let mut g = self.state.lock();
        // `resetting` without `ops`: a PCI function reset has the device.
        if g.wedged || g.resetting || self.check_usable().is_err() {
            return;
        }
        self.ring_refused_again(&mut g, &refused, doorbells);
        let mut missed = KVec::new();
        let mut hung = None;
        // Every kernel-mode ring past the timeout and not waiting on a
        // semaphore: several on one engine are one hung ring and others
        // waiting for the engine behind it.
        let mut stuck = KVec::new();
        // The least time (ns) until a ring with work reaches the timeout.
        let mut next: Option<u64> = None;
        let mut soonest = |left: u64| next = Some(next.map_or(left, |n| n.min(left)));
        for (i, s) in g.slots.iter_mut().enumerate() {
            let Some(c) = s else { continue };
            if c.destroying {
                continue;
            }
            for (e, r) in c.rings.iter_mut().enumerate() {
                if !r.present {
                    continue;
                }
                let value = mem.fence_value(i as u32, e);
                // A fence value ahead of the events (and of what the KMD
                // itself wrote for discarded jobs) over two checks: the
                // device wrote the fence but its interrupt never came.
                let announced = r.evt_seqno.max(r.done_upto);
                if value > announced {
                    if r.ahead_of_events == 0 || announced >= r.ahead_of_events {
                        r.ahead_of_events = value;
                        r.ahead_since = Instant::now();
                    } else if elapsed_ns(&r.ahead_since) >= MISSED_EVENT_NS {
                        let _ = missed.push((c.handle, i as u32, e, announced, value), GFP_KERNEL);
                        r.evt_seqno = value;
                        r.ahead_of_events = 0;
                    }
                } else {
                    r.ahead_of_events = 0;
                }
                r.retire(value);
                if r.jobs.is_empty() {
                    continue;
                }
                let state = mem.status(i as u32, e).state;
                if state == ring_state::FAULT_STALLED {
                    continue;
                }
                // A ring waiting on a semaphore is usually waiting on another
                // ring that hung (a copy after a kernel it depends on):
                // recovering the one that runs lets it go. It is the hang
                // only when no running ring is.
                let waiting = state == ring_state::SEM_WAIT;
                let better = match &hung {
                    None => true,
                    Some((_, w)) => *w && !waiting,
                };
                let quiet_ns = elapsed_ns(&r.progress_at);
                let late = quiet_ns > timeout_ns;
                if !late {
                    soonest(timeout_ns - quiet_ns);
                }
                let h = Hung {
                    hw: i as u32,
                    engine: e,
                    handle: c.handle,
                    client: c.client.id,
                    pt_root: c.pt_root,
                };
                if late && !waiting {
                    let _ = stuck.push(h, GFP_KERNEL);
                }
                if late && better {
                    hung = Some((h, waiting));
                }
            }
            // A user-mode queue: no jobs the KMD knows of; its status block
            // says whether it has work and whether that moves.
            let failed = c.errored || c.banned;
            if let Some(q) = c.uq.as_mut().filter(|q| q.watched && !failed) {
                let st = mem.status(i as u32, q.engine);
                let waiting = st.state == ring_state::SEM_WAIT;
                let better = match &hung {
                    None => true,
                    Some((_, w)) => *w && !waiting,
                };
                let q_hung = st.state != ring_state::FAULT_STALLED && q.hung(&st, timeout_ns);
                if let Some(left) = q.left_ns(timeout_ns).filter(|_| !q_hung) {
                    soonest(left);
                }
                if q_hung && better {
                    let h = Hung {
                        hw: i as u32,
                        engine: q.engine,
                        handle: c.handle,
                        client: c.client.id,
                        pt_root: c.pt_root,
                    };
                    hung = Some((h, waiting));
                }
            }
        }
        // The watchdog wakes for the next deadline, just after it.
        let due = next.map_or(0, |left| {
            ffi::monotonic_ns().saturating_add(left).saturating_add(1)
        });
        self.hang_due_ns.store(due, Relaxed);
        g.counters.missed_fence_events += missed.len() as u64;
        let hung = match hung {
            Some((h, false)) if stuck.iter().any(|x| x.engine == h.engine && x.hw != h.hw) => {
                // The device says which one its engine executes (commands
                // go without the state lock; `ops` keeps the rings).
                drop(g);
                let h = self.culprit(h, &stuck);
                g = self.state.lock();
                if g.wedged || g.resetting {
                    return;
                }
                Some(h)
            }
            h => h.map(|(h, _)| h),
        };
        let mut banned = None;
        if let Some(h) = &hung {
            g.counters.hangs += 1;
            g.resetting = true;
            let window_ns = u64::from(crate::params::ban_window_ms()) * 1_000_000;
            let limit = crate::params::ban_hangs() as usize;
            if let Some(c) = g.slot(h.hw) {
                if c.record_hang(limit, window_ns) {
                    banned = Some(c.recent_hangs());
                }
            }
        }
        drop(g);
        for &(handle, hw, e, announced, value) in missed.iter() {
            dev_warn_ratelimited!(
                self.pdev(),
                "missed fence interrupt: context {} (slot {}) engine {} fence value {} written, events announced {}\n",
                handle,
                hw,
                e,
                value,
                announced
            );
        }
        if let Some(h) = hung {
            if let Some(n) = banned {
                dev_warn_ratelimited!(
                    self.pdev(),
                    "context {} (slot {}) banned: {} hangs within {} ms\n",
                    h.handle,
                    h.hw,
                    n,
                    crate::params::ban_window_ms()
                );
            }
            let engine = h.engine;
            self.recover(mem, h);
            // The engine's other rings could not move while it was held:
            // each gets a whole timeout from now before it is suspect.
            for c in self.state.lock().slots.iter_mut().flatten() {
                if let Some(r) = c.rings.get_mut(engine) {
                    r.progress_at = Instant::now();
                }
            }
            self.end_reset();
        } else if !missed.is_empty() {
            self.wake();
        }
    }
}

impl Gpu {
    /// Doorbells the device refused (posted, so nobody saw the error):
    /// rung again at the ring's current write pointer with the slots
    /// `doorbells` reserved for them. Refused again, they come back at the
    /// next check.
    fn ring_refused_again(
        &self,
        g: &mut GpuState,
        refused: &[PostedDoorbell],
        doorbells: KVec<DoorbellSlot<'_>>,
    ) {
        for (p, slot) in refused.iter().zip(doorbells) {
            let wptr = g
                .slot(p.ctx_id)
                .and_then(|c| c.rings.get(p.engine as usize))
                .filter(|r| r.present && !r.jobs.is_empty())
                .map(|r| r.wptr);
            let Some(wptr) = wptr else {
                dev_info_ratelimited!(
                        self.pdev(),
                        "the device refused a doorbell of context slot {} engine {}: no job left behind it\n",
                        p.ctx_id,
                        p.engine
                    );
                continue;
            };
            dev_info_ratelimited!(
                    self.pdev(),
                    "the device refused a doorbell of context slot {} engine {}: ringing it again at {:#x}\n",
                    p.ctx_id,
                    p.engine,
                    wptr
                );
            g.counters.doorbells_rung_again += 1;
            if let Err(e) = self.hw.post_doorbell(slot, p.ctx_id, p.engine, wptr) {
                dev_warn_ratelimited!(
                    self.pdev(),
                    "doorbell of context slot {} engine {} could not be rung again: error {}\n",
                    p.ctx_id,
                    p.engine,
                    e.to_errno()
                );
            }
        }
    }

    /// Of `h` and the other rings of `stuck` on its engine (all past the
    /// job timeout, none waiting on a semaphore): the one the engine is
    /// executing (`CONTEXT_QUERY`'s `RUNNING`), which holds it; the others
    /// only wait for it and are not to blame. `h` when the device names
    /// none.
    fn culprit(&self, h: Hung, stuck: &[Hung]) -> Hung {
        let running = |x: &Hung| {
            self.cmd(Command::ContextQuery { ctx_id: x.hw })
                .and_then(|r| r.get::<ContextQueryReply>())
                .is_ok_and(|q| q.state & ctx_state::RUNNING != 0)
        };
        if running(&h) {
            return h;
        }
        stuck
            .iter()
            .filter(|x| x.engine == h.engine && x.hw != h.hw)
            .find(|x| running(x))
            .copied()
            .unwrap_or(h)
    }

    /// A reset rung ended: `SUBMIT` may write rings again, and so may the
    /// scheduler (jobs queued meanwhile).
    fn end_reset(&self) {
        self.state.lock().resetting = false;
        self.wake();
        self.pump();
    }

    /// The reset ladder for hung ring `h` (see the module documentation).
    /// The caller holds [`Gpu::ops`] and has set `resetting`.
    fn recover(&self, mem: &SlotMemory, h: Hung) {
        let start = Instant::<Monotonic>::now();
        // The dump: the device's view of the context, then the ring.
        let hw_state = self
            .cmd(Command::ContextQuery { ctx_id: h.hw })
            .and_then(|r| r.get::<ContextQueryReply>())
            .ok()
            .map(|q| q.state);
        let st = mem.status(h.hw, h.engine);
        let generation = self.hw.generation();
        let mut loc = None;
        {
            let mut g = self.state.lock();
            let dump = g.slot_of(h.hw, h.handle).map(|c| {
                // Where the ring stopped in the work the application
                // submitted: the INDIRECT of one of its command buffers, or
                // one of the KMD's packets (a wait for an input fence).
                loc = c.rings[h.engine].locate(generation, st.rptr, 1, 0);
                let site = HangSite {
                    hw: h.hw,
                    engine: h.engine,
                    handle: h.handle,
                    client: h.client,
                    pt_root: h.pt_root,
                };
                HangDump::capture(mem, site, &c.rings[h.engine], hw_state)
            });
            if let Some(d) = dump {
                if let Ok(b) = KBox::new(d, GFP_KERNEL) {
                    g.last_hang = Some(b);
                }
            }
        }
        // The devcoredump's part that must be taken before the reset: the
        // driver's state and the device's capture of the job in flight. It
        // is written by the watchdog once recovery is over.
        let dump = self.capture_hang(mem, h.hw, h.engine, h.handle);
        if let Some(d) = dump {
            let _ = self.state.lock().pending_dumps.push(d, GFP_KERNEL);
        }
        let st = mem.status(h.hw, h.engine);
        dev_warn_ratelimited!(
            self.pdev(),
            "hang: context {} (slot {}) engine {} (rptr {:#x}, state {}, last fence {}), {}: resetting the engine\n",
            h.handle,
            h.hw,
            h.engine,
            st.rptr,
            st.state,
            st.last_fence,
            format_args!("{}", HangAt(loc))
        );
        self.hw.trace.hang(h.hw, h.engine, h.handle);
        // User-mode queues on the engine stop being watched while it resets,
        // so that no doorbell reaches a ring the reset is clearing.
        let suspended = self.suspend_queues(Some(h.engine));
        // LAB(6) BEGIN reset-ladder
        // 1. Engine reset. One that names the hung context clears its ring
        // on that engine whatever the ring's state, so success means
        // drained. (The context's other rings may legitimately be busy or
        // waiting — e.g. a copy ring in SEM_WAIT on the hung compute job's
        // fence, which `release_failed` lets go.)
        let reply = self
            .cmd(Command::EngineReset {
                engine: h.engine as u32,
                hung_ctx: h.hw,
            })
            .and_then(|r| r.get::<EngineResetReply>());
        let drained = reply.is_ok();
        let in_flight = reply.as_ref().ok().map(|r| (r.ctx_id, r.rptr));
        // An innocent context that lost its job in flight.
        let innocent = reply
            .ok()
            .map(|r| r.ctx_id)
            .filter(|&i| i != CTX_NONE && i != h.hw);
        let rewritten = {
            let mut g = self.state.lock();
            g.counters.engine_resets += 1;
            if drained {
                if let Some(c) = g.slot(h.hw) {
                    c.rings[h.engine].fail_pending();
                    // A hung user-mode queue lost its work: it takes no more.
                    if c.uq.is_some() {
                        c.set_errored();
                    }
                }
            }
            let w = innocent
                .and_then(|i| Self::rewrite_ring(&mut g, mem, i, h.engine, true).map(|w| (i, w)));
            push_log(
                &mut g.resets_log,
                ResetLog {
                    hw: h.hw,
                    engine: h.engine as u32,
                    kind: "engine",
                    ok: drained,
                    ms: elapsed_ns(&start) / 1_000_000,
                },
            );
            g.release_failed(mem);
            w
        };
        if let Some((i, w)) = rewritten {
            let _ = self.cmd(Command::Doorbell {
                ctx_id: i,
                engine: h.engine as u32,
                wptr: w,
            });
        }
        if drained {
            // Queues watched again; an innocent one in flight restarts
            // where the reset stopped it.
            self.resume_queues(&suspended, in_flight.filter(|&(i, _)| i != h.hw));
            return;
        }
        // 2. Device reset.
        dev_warn_ratelimited!(
            self.pdev(),
            "engine reset did not recover context {} (slot {}): resetting the device\n",
            h.handle,
            h.hw
        );
        let ok = self.device_reset(mem, h.hw);
        self.record_device_reset(mem, h.hw, ok, &start, "device");
        // LAB(6) END reset-ladder
    }

    /// Counts and logs a device reset (`kind`: `device`, `function` for a
    /// PCI function reset, `sleep` for a system resume, `firmware`,
    /// `resume`); wedges the device if it failed.
    fn record_device_reset(
        &self,
        mem: &SlotMemory,
        guilty: u32,
        ok: bool,
        start: &Instant<Monotonic>,
        kind: &'static str,
    ) {
        self.hw.trace.device_reset(guilty, ok);
        let mut g = self.state.lock();
        g.counters.device_resets += 1;
        push_log(
            &mut g.resets_log,
            ResetLog {
                hw: guilty,
                engine: engine::ALL,
                kind,
                ok,
                ms: elapsed_ns(start) / 1_000_000,
            },
        );
        let mut gone = KVec::new();
        if !ok {
            g.wedged = true;
            gone = g.fail_all();
        }
        g.release_failed(mem);
        drop(g);
        drop(gone);
        if !ok {
            crate::dev_err_ratelimited!(
                self.pdev(),
                "device wedged: recovery failed; rebind the driver\n"
            );
            // DRM's convention: a KOBJ_CHANGE uevent with WEDGED=<recovery>
            // on the DRM device nodes, which are children of the PCI device.
            ffi::send_wedged_uevent(self.pdev().as_ref());
        }
    }

    /// Writes ring `e` of slot `hw`'s unfinished jobs again at its write
    /// pointer (under the state lock); returns the new write pointer for
    /// the doorbell, or `None` if the ring has no job. `innocent`: the
    /// context lost its work to another's reset.
    fn rewrite_ring(
        g: &mut GpuState,
        mem: &SlotMemory,
        hw: u32,
        e: usize,
        innocent: bool,
    ) -> Option<u32> {
        let c = g.slot(hw)?;
        if innocent && !c.rings[e].jobs.is_empty() {
            c.set_innocent();
        }
        let r = &mut c.rings[e];
        if r.jobs.is_empty() {
            return None;
        }
        let mut w = r.wptr;
        for j in r.jobs.iter_mut() {
            j.at = w;
            w = mem.write_ring(hw, e, w, &j.words);
        }
        r.wptr = w;
        r.progress_at = Instant::now();
        Some(w)
    }

    /// `DEVICE_RESET` and re-creation of every context; `guilty`'s jobs are
    /// discarded, the others' written again. The caller holds [`Gpu::ops`]
    /// and has set `resetting`. Returns whether every step succeeded.
    fn device_reset(&self, mem: &SlotMemory, guilty: u32) -> bool {
        self.restart_device(mem, guilty, &|| {
            self.hw.events.expect_restart();
            self.cmd(Command::DeviceReset)?
                .get::<DeviceResetReply>()
                .map(|r| r.vram)
        })
    }

    /// The device back from its power-on state: `power_on` brings it there
    /// (a `DEVICE_RESET`, or the return to `D0` of a power state) and says
    /// what VRAM kept; then the firmware is booted, VRAM loss reported, and
    /// every context and ring created again on the same page tables with
    /// the unfinished jobs written again (`guilty`'s discarded). The caller
    /// holds [`Gpu::ops`] and has set `resetting`. Returns whether every
    /// step succeeded.
    pub(crate) fn restart_device(
        &self,
        mem: &SlotMemory,
        guilty: u32,
        power_on: &dyn Fn() -> Result<u32>,
    ) -> bool {
        let mut ctxs = KVec::new();
        {
            let mut g = self.state.lock();
            for hw in 0..g.slots.len() as u32 {
                let Some(c) = g.slot(hw) else { continue };
                if hw == guilty && c.uq.is_some() {
                    c.set_errored();
                }
                // A user-mode queue restarts where its status block shows
                // its read pointer: the work not yet done runs again.
                let status = c.uq.as_ref().map(|q| mem.status(hw, q.engine));
                let start = status.as_ref().map_or(0, |st| st.rptr);
                let had_work = status.as_ref().is_some_and(uqueue::has_work);
                if let Some(q) = c.uq.as_mut() {
                    q.restart_clock();
                }
                if had_work && hw != guilty {
                    c.set_innocent();
                }
                if ctxs.push(HwCtx::of(hw, c, start), GFP_KERNEL).is_err() {
                    return false;
                }
                for (e, r) in c.rings.iter_mut().enumerate() {
                    if hw == guilty {
                        r.fail_pending();
                    }
                    // A new device ring starts at 0.
                    r.wptr = 0;
                    mem.zero_status(hw, e);
                }
            }
        }
        let Ok(kept) = power_on() else {
            return false;
        };
        // The device is back in its boot state: its firmware first.
        if self.hw.boot_firmware(&|c| self.cmd(c)).is_err() {
            return false;
        }
        // VRAM lost: the objects that were in it are lost, and the files
        // that own them told through their contexts (nothing of the
        // driver's own lives in VRAM).
        if matches!(kept, vram::state::ZEROED | vram::state::GARBAGE) {
            let owners = self.mark_vram_lost();
            let files = self.report_vram_lost(&owners);
            dev_info_ratelimited!(
                self.pdev(),
                "device reset: VRAM contents lost ({}): {} objects of {} contexts lost\n",
                vram::state::name(kept),
                owners.len(),
                files
            );
        }
        for c in ctxs.iter() {
            if self.hw_create(c).is_err() {
                return false;
            }
            let watched = c.uq.as_ref().is_some_and(|q| q.watch);
            if let Some(q) = self.state.lock().slot(c.hw).and_then(|x| x.uq.as_mut()) {
                q.watched = watched;
            }
        }
        for c in ctxs.iter() {
            for e in 0..ENGINES {
                let w = Self::rewrite_ring(&mut self.state.lock(), mem, c.hw, e, c.hw != guilty);
                if let Some(w) = w {
                    if self
                        .cmd(Command::Doorbell {
                            ctx_id: c.hw,
                            engine: e as u32,
                            wptr: w,
                        })
                        .is_err()
                    {
                        return false;
                    }
                }
            }
        }
        true
    }

    /// VRAM contents were lost: counted, and the contexts of the clients
    /// `owners` (the owners of the objects lost, marked lost already) told
    /// (`VRAM_LOST`). Returns how many contexts were told.
    pub(crate) fn report_vram_lost(&self, owners: &[u64]) -> usize {
        self.vram_losses.add(1, Relaxed);
        let mut files = 0;
        let mut g = self.state.lock();
        for c in g.slots.iter_mut().flatten() {
            if owners.contains(&c.client.id) {
                c.set_vram_lost();
                files += 1;
            }
        }
        files
    }

    /// Marks every object in VRAM lost (a device reset lost its
    /// contents) but those whose contents a system suspend saved (restored
    /// after the resume); returns the ids of their owners' clients, one
    /// per object (an allocation failure leaves an owner out: its objects
    /// are still marked).
    fn mark_vram_lost(&self) -> KVec<u64> {
        let mut owners = KVec::new();
        let Some(bos) = self.bos.as_ref() else {
            return owners;
        };
        bos.visit(|bo| {
            if bo.is_vram_object() && !bo.is_saved() && bo.vram().is_some() {
                bo.mark_lost();
                let _ = owners.push(bo.owner(), GFP_KERNEL);
            }
        });
        owners
    }

    /// Before a PCI function reset: waits for a running rung of the ladder
    /// (it holds [`Gpu::ops`]), then holds `SUBMIT` and the scheduler off
    /// (`resetting`) until [`Gpu::finish_function_reset`]. The hang check
    /// leaves the GPU alone meanwhile.
    pub(crate) fn begin_function_reset(&self) {
        let _ops = self.ops.lock();
        self.state.lock().resetting = true;
    }

    /// After a PCI function reset (`transport_ok`: the device came back):
    /// the ladder's device reset with no guilty context, on the restarted
    /// device (the function reset removed every context): every context
    /// and ring created again on the same page tables, their unfinished
    /// jobs written again (they are innocent), VRAM loss reported. Counted
    /// as a reset of kind `kind` (`function`, or `sleep` after a system
    /// resume); the device is wedged if it failed. Returns whether it
    /// succeeded.
    pub(crate) fn finish_function_reset(&self, transport_ok: bool, kind: &'static str) -> bool {
        let start = Instant::<Monotonic>::now();
        let Ok(mem) = self.slots() else {
            self.end_reset();
            return false;
        };
        let _ops = self.ops.lock();
        let ok = transport_ok && self.device_reset(mem, CTX_NONE);
        if ok {
            // A wedged or lost device that came back is usable again (the
            // jobs failed when it wedged stay failed).
            let was_wedged = core::mem::replace(&mut self.state.lock().wedged, false);
            self.revived();
            if was_wedged {
                dev_info!(self.pdev(), "function reset: the wedged device recovered\n");
            }
        }
        self.record_device_reset(mem, CTX_NONE, ok, &start, kind);
        self.end_reset();
        ok
    }

    /// The firmware went down ([`super::fwmon`]): the ladder's device
    /// reset with no guilty context (the firmware booted again, every
    /// context created again, unfinished jobs written again), counted as a
    /// reset of kind `firmware`; `wedge` instead wedges the device (the
    /// firmware keeps failing). The caller holds [`Gpu::ops`]. Returns
    /// whether the device serves again.
    pub(crate) fn reset_for_firmware(&self, mem: &SlotMemory, wedge: bool) -> bool {
        let start = Instant::<Monotonic>::now();
        {
            let mut g = self.state.lock();
            if g.wedged || g.resetting {
                return false;
            }
            g.resetting = true;
        }
        let ok = !wedge && self.device_reset(mem, CTX_NONE);
        self.record_device_reset(mem, CTX_NONE, ok, &start, "firmware");
        self.end_reset();
        ok
    }

    /// A runtime resume ([`super::power`]) brought the device back:
    /// `SUBMIT` may write rings again.
    pub(crate) fn end_runtime_resume(&self) {
        self.end_reset();
    }

    /// A runtime resume failed: counted as a failed reset of kind
    /// `resume`, which wedges the device.
    pub(crate) fn record_resume_failure(&self, mem: &SlotMemory, start: &Instant<Monotonic>) {
        self.record_device_reset(mem, CTX_NONE, false, start, "resume");
        self.end_reset();
    }

    /// debugfs `reset_device`: the ladder's device reset with no guilty
    /// context.
    ///
    /// # Errors
    ///
    /// `EIO` if it failed (the device is then wedged) or the device is
    /// wedged already; `ENODEV`.
    pub(crate) fn reset_device_now(&self) -> Result {
        let mem = self.slots()?;
        self.check_usable()?;
        let start = Instant::<Monotonic>::now();
        let _ops = self.ops.lock();
        {
            let mut g = self.state.lock();
            if g.wedged {
                return Err(EIO);
            }
            // A PCI function reset holds the device (it sets `resetting`
            // without holding `ops`).
            if g.resetting {
                return Err(EBUSY);
            }
            g.resetting = true;
        }
        dev_warn_ratelimited!(self.pdev(), "device reset requested through debugfs\n");
        let ok = self.device_reset(mem, CTX_NONE);
        self.record_device_reset(mem, CTX_NONE, ok, &start, "device");
        self.end_reset();
        if ok {
            Ok(())
        } else {
            Err(EIO)
        }
    }
}

/// Where a hung ring stopped, as text: `in SUBMIT seqno 5 command buffer
/// 1`, `in SUBMIT seqno 5, a KMD packet` (a `SEM_WAIT` for an input fence,
/// or its `FENCE`), or `no pending SUBMIT at rptr`.
struct HangAt(Option<Located>);

impl core::fmt::Display for HangAt {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.0 {
            Some(Located {
                seqno,
                cmd_index: Some(i),
                ..
            }) => write!(f, "in SUBMIT seqno {} command buffer {}", seqno, i),
            Some(Located { seqno, .. }) => write!(f, "in SUBMIT seqno {}, a KMD packet", seqno),
            None => write!(f, "no pending SUBMIT at rptr"),
        }
    }
}
