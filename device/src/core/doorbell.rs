//! Doorbells: `DOORBELL` (a register write) and the doorbell watcher,
//! doorbells that are memory, not commands.
//!
//! `DOORBELL_WATCH` makes a ring's doorbell a [`DoorbellBlock`] in the
//! context's own address space: whoever can write that block — typically a
//! user-mode driver that has it mapped into its process next to the ring —
//! publishes work by storing the new write pointer there, with no command
//! and no system call. The watcher reads every watched block and turns each
//! change of its `wptr` into a doorbell, exactly as `DOORBELL` would ring it
//! ([`ring_doorbell`]: the same rules, the same sanitizer checks).
//!
//! # State machine
//!
//! ```text
//!            activity (a change seen, a kick, a new watch)
//!   ┌─────────────────────────────────────────────────┐
//!   ▼                                                 │
//! POLLING ── no change for the poll window ──▶ SLEEPING (every block's
//!   (every block re-read continuously)           `sleeping` = 1; nothing read
//!                                                until DOORBELL_KICK, a new or
//!                                                stopped watch, or shutdown)
//! ```
//!
//! Going to sleep is race-free with a driver that follows the protocol
//! (docs/hardware.md §6.6): the watcher writes `sleeping = 1` into every
//! block, issues a full barrier and reads every `wptr` once more before it
//! sleeps; the driver stores its `wptr`, issues a full barrier and reads
//! `sleeping`. One of the two sees the other's store, so either the watcher
//! finds the new `wptr` or the driver kicks.
//!
//! Each watch keeps the guest-physical address of its block once
//! translated, like a TLB entry: `TLB_INVALIDATE` of a range covering the
//! block drops it, and the next read walks the page tables again — also
//! when the invalidation comes while a scan is reading the blocks (that
//! scan's new translations are not kept, [`WatchUnit::merge`]; the watch
//! table is [`super::watch`]). A block
//! that cannot be translated, is not writable or is outside RAM stops the
//! ring with the engine error `DOORBELL_FAULT` (reported by the engine, see
//! [`super::scheduler::take_doorbells`]) and its watch ends.
//!
//! Lock order: the watcher's lock, then the GPU state lock (ringing a
//! doorbell under it); nothing takes the watcher's lock while holding the
//! state lock.
//!
//! On replay ([`super::record`]) the watcher reads nothing: the doorbells it
//! saw are in the record and are rung from there.

use std::sync::atomic::{fence, Ordering};
use std::time::{Duration, Instant};

use vgpu_hwif::mmu::Access;
use vgpu_hwif::proto::{engine, DoorbellBlock};
use vm_memory::{Bytes, GuestAddress};

use super::context::ContextError;
use super::gpu::Gpu;
use super::mmu::{self, Mem};
use super::post;
use super::ring::{RingError, RingState};
use super::sanitize_hooks as hooks;
use super::watch::Watch;

/// Byte offset of [`DoorbellBlock::wptr`].
const WPTR: u64 = std::mem::offset_of!(DoorbellBlock, wptr) as u64;
/// Byte offset of [`DoorbellBlock::sleeping`].
const SLEEPING: u64 = std::mem::offset_of!(DoorbellBlock, sleeping) as u64;
/// Byte offset of [`DoorbellBlock::seen`].
const SEEN: u64 = std::mem::offset_of!(DoorbellBlock, seen) as u64;

/// Why `DOORBELL_WATCH` or a doorbell was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WatchError {
    /// The context.
    #[error(transparent)]
    Context(#[from] ContextError),
    /// The ring.
    #[error(transparent)]
    Ring(#[from] RingError),
    /// The block's VA is not 64-byte aligned or outside the address space.
    #[error("doorbell block VA {0:#x} is not 64-byte aligned or outside the address space")]
    BadVa(u64),
    /// `start` given without a block to watch, or with the pointers kept.
    #[error("a start pointer without a doorbell block or with the pointers kept")]
    StartWithoutBlock,
    /// Moving the ring's pointers needs it idle and empty.
    #[error("ring of context {0} on engine {1} is not idle")]
    NotIdle(u32, u32),
}

/// Rings ring `e` of context `ctx` with write pointer `wptr`: what
/// `DOORBELL` does, and what a watched block's new `wptr` does. The value
/// is latched for the engine, which checks it the next time it schedules
/// the ring; a stopped ring ignores it.
///
/// # Errors
///
/// No such context, engine or ring.
pub fn ring_doorbell(gpu: &Gpu, ctx: u32, e: u32, wptr: u32) -> Result<(), WatchError> {
    let mut st = gpu.lock();
    let san_events = hooks::on_doorbell(gpu, &mut st, ctx, e, wptr);
    for ev in san_events {
        post::event(gpu, ev);
    }
    let current = st
        .engines
        .get(e as usize)
        .and_then(|es| es.current)
        .map(|(_, prio)| prio);
    let c = st.contexts.get_mut(ctx)?;
    if e >= engine::COUNT {
        return Err(RingError::BadEngine(e).into());
    }
    let priority = c.priority;
    let ring = c.ring_mut(e).ok_or(RingError::NotFound(ctx, e))?;
    if ring.ring_doorbell(wptr) && current.is_some_and(|p| priority > p) {
        gpu.poke(e as usize);
    }
    drop(st);
    // Wakes the engine; rings waiting on semaphores (which the driver may
    // just have written) look again.
    gpu.semaphores_changed();
    Ok(())
}

/// `DOORBELL_WATCH`: watch the block at `va` for ring `e` of `ctx`, the
/// ring restarting at pointer `start` — or, with `keep`, where it is; `va`
/// 0 stops watching.
///
/// # Errors
///
/// No such context, engine or ring; a misaligned or out-of-range VA; a
/// start pointer without a block or with `keep`; a ring that is not idle
/// (without `keep`).
pub fn watch(
    gpu: &Gpu,
    ctx: u32,
    e: u32,
    va: u64,
    start: u32,
    keep: bool,
) -> Result<(), WatchError> {
    let mut st = gpu.lock();
    let c = st.contexts.get_mut(ctx)?;
    if e >= engine::COUNT {
        return Err(RingError::BadEngine(e).into());
    }
    let ring = c.ring_mut(e).ok_or(RingError::NotFound(ctx, e))?;
    if (va == 0 || keep) && start != 0 {
        return Err(WatchError::StartWithoutBlock);
    }
    if va == 0 {
        drop(st);
        gpu.watch.forget(ctx, Some(e));
        return Ok(());
    }
    if !va.is_multiple_of(64) || va >= 1u64 << gpu.cfg.va_bits {
        return Err(WatchError::BadVa(va));
    }
    let last = if keep {
        // The newest value the ring was given: a block that moved past it
        // while nobody watched rings at once.
        ring.doorbell.unwrap_or(ring.wptr)
    } else {
        if ring.state != RingState::Idle || ring.busy() || ring.has_packets() {
            return Err(WatchError::NotIdle(ctx, e));
        }
        ring.wptr = start;
        ring.cursor = ring.cursor.restart_at(start);
        ring.doorbell = None;
        ring.status_dirty = true;
        start
    };
    ring.doorbell_fault = None;
    drop(st);
    gpu.watch.set(Watch {
        id: 0,
        ctx,
        engine: e,
        va,
        last,
        pa: None,
    });
    // The engine writes the status block with the new pointers.
    gpu.semaphores_changed();
    Ok(())
}

/// What one look at a block found.
enum Look {
    Same,
    Changed(u32),
    Fault,
}

/// Reads the block of `w` (translating it if needed) and, when writable
/// and `sleeping` is given, stores that value into its `sleeping` word.
fn look(gpu: &Gpu, mem: &Mem, w: &mut Watch, sleeping: Option<u32>) -> Look {
    let pa = match w.pa {
        Some(pa) => pa,
        None => {
            let space = {
                let st = gpu.lock();
                match st.contexts.get(w.ctx) {
                    Ok(c) => c.space(gpu.cfg.va_bits),
                    Err(_) => return Look::Same,
                }
            };
            let size = std::mem::size_of::<DoorbellBlock>() as u64;
            let ok = mmu::walk(mem, &space, w.va, Access::Write)
                .ok()
                .filter(|m| m.check(w.va, Access::Write).is_ok())
                .map(|m| m.pa(w.va))
                .filter(|&pa| mmu::in_ram(mem, pa, size));
            match ok {
                Some(pa) => {
                    w.pa = Some(pa);
                    pa
                }
                None => return Look::Fault,
            }
        }
    };
    if let Some(v) = sleeping {
        if mem
            .store(v, GuestAddress(pa + SLEEPING), Ordering::Release)
            .is_err()
        {
            return Look::Fault;
        }
        // The store of `sleeping` must be visible before `wptr` is read:
        // the other half of the driver's store `wptr`, barrier, read
        // `sleeping` (see the module documentation).
        fence(Ordering::SeqCst);
    }
    match mem.load::<u32>(GuestAddress(pa + WPTR), Ordering::Acquire) {
        Ok(v) if v != w.last => Look::Changed(v),
        Ok(_) => Look::Same,
        Err(_) => Look::Fault,
    }
}

/// One pass over every watch: rings the changed ones, stops the faulted
/// ones; `sleeping` is written into every block when given. Returns
/// whether anything changed.
///
/// Blocks are read without the watcher's lock (a read may walk page
/// tables); what they showed is acted on under it, and only for watches
/// still registered as they were read (a watch set again meanwhile — the
/// ring restarted elsewhere — is not rung with the old block's value).
fn scan(gpu: &Gpu, sleeping: Option<u32>) -> bool {
    let mem = gpu.memory();
    let (mut watches, gen) = {
        let u = gpu.watch.lock();
        (u.watches.clone(), u.invalidations)
    };
    let looks: Vec<Look> = watches
        .iter_mut()
        .map(|w| look(gpu, &mem, w, sleeping))
        .collect();
    let mut u = gpu.watch.lock();
    let mut any = false;
    for (w, l) in watches.iter().zip(looks) {
        let Some(i) = u.watches.iter().position(|o| o.id == w.id) else {
            continue;
        };
        let mut now = u.merge(gen, u.watches[i], w);
        match l {
            Look::Same => u.watches[i] = now,
            Look::Changed(v) => {
                any = true;
                now.last = v;
                u.watches[i] = now;
                u.seen += 1;
                if let Some(pa) = now.pa {
                    let _ = mem.store(v, GuestAddress(pa + SEEN), Ordering::Release);
                }
                if let Some(r) = gpu.record.get() {
                    r.watched_doorbell(gpu.clock.now_ns(), now.ctx, now.engine, v);
                }
                if let Err(e) = ring_doorbell(gpu, now.ctx, now.engine, v) {
                    log::debug!("doorbell watch: {e}");
                }
            }
            Look::Fault => {
                any = true;
                u.watches.remove(i);
                log::warn!(
                    "doorbell watch: context {} engine {}: block at {:#x} is not mapped writable",
                    now.ctx,
                    now.engine,
                    now.va
                );
                let mut st = gpu.lock();
                if let Some(r) = st
                    .contexts
                    .get_mut(now.ctx)
                    .ok()
                    .and_then(|c| c.ring_mut(now.engine))
                {
                    r.doorbell_fault = Some(now.va);
                }
                drop(st);
                gpu.semaphores_changed();
            }
        }
    }
    any
}

/// How long the watcher spins after the last change it saw, before it
/// polls with sleeps.
const SPIN: Duration = Duration::from_micros(50);
/// The watcher's period while it polls with sleeps.
const PERIOD: Duration = Duration::from_micros(20);

/// The watcher thread: spins right after activity, then polls every
/// [`PERIOD`] until the poll window has passed, then sleeps until kicked.
/// Spinning for the whole window would take a host core from the very
/// threads that run the guest and the engines on a machine with few.
pub fn watcher_main(gpu: std::sync::Arc<Gpu>) {
    // Sleeps of tens of microseconds need a timer slack below the default
    // 50 µs.
    // SAFETY: PR_SET_TIMERSLACK only sets this thread's timer slack (in
    // ns); it takes no pointer and affects no other thread.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1_000u64, 0u64, 0u64, 0u64) };
    // Whether the device replays a record (then nothing is read); asked at
    // every use: replay starts after the thread does.
    let replay = || gpu.record.get().is_some_and(|r| r.is_replay());
    let mut active_until = Instant::now();
    let mut spin_until = Instant::now();
    loop {
        if gpu.shutdown.load(Ordering::Acquire) {
            return;
        }
        let kicked = std::mem::take(&mut gpu.watch.lock().kicked);
        let changed = !replay() && scan(&gpu, None);
        let now = Instant::now();
        if changed || kicked {
            active_until = now + gpu.watch.poll_window;
            spin_until = now + SPIN;
        }
        if now < spin_until {
            std::hint::spin_loop();
            continue;
        }
        if now < active_until {
            std::thread::sleep(PERIOD);
            continue;
        }
        // Going to sleep: announce it in every block, then look once more
        // (see the module documentation).
        if !replay() && !gpu.watch.lock().watches.is_empty() {
            gpu.watch.lock().sleeping = true;
            if scan(&gpu, Some(1)) {
                gpu.watch.lock().sleeping = false;
                scan(&gpu, Some(0));
                active_until = Instant::now() + gpu.watch.poll_window;
                continue;
            }
        }
        gpu.watch.sleep(&gpu.shutdown);
        if !replay() {
            scan(&gpu, Some(0));
        }
        active_until = Instant::now() + gpu.watch.poll_window;
    }
}
