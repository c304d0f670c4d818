// SPDX-License-Identifier: GPL-2.0

//! The GPU block's state: the table of device context slots and what each
//! holds ([`Ctx`]), the device-wide counters and logs ([`GpuState`]), and
//! the block itself ([`Gpu`]: the transport it talks through, the slots'
//! ring memory, its locks and its wait queue).
//!
//! The state transitions of a context live here as methods on [`Ctx`]; the
//! operations that talk to the device are in the sibling modules.
//!
//! # A context's states
//!
//! ```text
//!  CTX_CREATE ─▶ live ──fault / engine error / device says errored──▶ errored (SUBMIT: EIO)
//!                 │  └──ban_hangs hangs within ban_window_ms─────────▶ banned  (SUBMIT: EIO)
//!                 └──CTX_DESTROY / file closed──▶ destroying ──device released it──▶ (free slot)
//! ```
//!
//! Independently, `reset_status` says what the last reset made of it: none,
//! guilty (it hung, faulted or broke a packet) or innocent (its work was
//! lost to another context's reset and written again).

use super::{
    dump::HangDump,
    ring::{
        RingSw,
        SlotMemory,
        ENGINES, //
    },
};
use crate::{
    file::Client,
    proto::Command,
    time::elapsed_ns,
    transport::{control::Reply, Hw},
};
use kernel::{
    device::{
        Bound,
        Device, //
    },
    new_condvar, new_mutex, pci,
    prelude::*,
    sync::{
        Arc,
        CondVar,
        Mutex,
        MutexGuard,
        SetOnce, //
    },
    time::{
        Instant,
        Monotonic, //
    },
    uapi,
};

/// Contexts per file.
pub(crate) const MAX_FILE_CONTEXTS: usize = 16;
/// Entries kept in the fault and reset logs.
pub(crate) const LOG_LEN: usize = 16;

/// Driver-side state of one context.
pub(crate) struct Ctx {
    /// The file that created it (its address space).
    pub(crate) client: Arc<Client>,
    /// The id `CTX_CREATE` returned.
    pub(crate) handle: u32,
    /// Engines it selected.
    pub(crate) engine_mask: u32,
    pub(crate) priority: u32,
    /// Device context flags (`CTX_FLAG_*`).
    pub(crate) flags: u32,
    /// Page-table root of its address space.
    pub(crate) pt_root: u64,
    /// Where its slot's memory is mapped in its address space.
    pub(crate) kmd_va: u64,
    pub(crate) destroying: bool,
    pub(crate) errored: bool,
    pub(crate) banned: bool,
    /// `VGPU_CTX_RESET_*`.
    pub(crate) reset_status: u32,
    pub(crate) fault_va: u64,
    pub(crate) fault_access: u32,
    pub(crate) fault_reason: u32,
    pub(crate) hangs: u32,
    /// When the most recent hangs (at most `ban_hangs`) happened.
    hang_times: KVec<Instant<Monotonic>>,
    pub(crate) faults: u32,
    pub(crate) rings: [RingSw; ENGINES],
    /// Thread-group id of the creating process.
    pub(crate) pid: u32,
    /// `EngineError` code of the first engine error that stopped it (0: none).
    pub(crate) engine_error: u32,
}

/// What a new context is made of.
pub(crate) struct CtxArgs {
    pub(crate) client: Arc<Client>,
    pub(crate) handle: u32,
    pub(crate) engine_mask: u32,
    pub(crate) priority: u32,
    pub(crate) flags: u32,
    pub(crate) pt_root: u64,
    pub(crate) kmd_va: u64,
    pub(crate) pid: u32,
}

impl Ctx {
    /// A live context.
    pub(crate) fn new(a: CtxArgs) -> Ctx {
        Ctx {
            client: a.client,
            handle: a.handle,
            engine_mask: a.engine_mask,
            priority: a.priority,
            flags: a.flags,
            pt_root: a.pt_root,
            kmd_va: a.kmd_va,
            destroying: false,
            errored: false,
            banned: false,
            reset_status: uapi::VGPU_CTX_RESET_NONE,
            fault_va: 0,
            fault_access: 0,
            fault_reason: 0,
            hangs: 0,
            hang_times: KVec::new(),
            faults: 0,
            rings: [
                RingSw::new(a.engine_mask & 1 != 0),
                RingSw::new(a.engine_mask & 2 != 0),
            ],
            pid: a.pid,
            engine_error: 0,
        }
    }

    /// The `VGPU_CTX_STATE_*` bits of `CTX_QUERY` and `QUERY_STATS`.
    pub(crate) fn state_bits(&self) -> u32 {
        let mut state = 0;
        if self.errored {
            state |= uapi::VGPU_CTX_STATE_ERRORED;
        }
        if self.banned {
            state |= uapi::VGPU_CTX_STATE_BANNED;
        }
        if self.fault_access != 0 {
            state |= uapi::VGPU_CTX_STATE_FAULTED;
        }
        state
    }

    /// It broke its own work (fault, engine error): errored and guilty.
    pub(crate) fn set_errored(&mut self) {
        self.errored = true;
        self.reset_status = uapi::VGPU_CTX_RESET_GUILTY;
    }

    /// Records the first fault that stopped it.
    pub(crate) fn record_fault(&mut self, va: u64, access: u32, reason: u32) {
        self.set_errored();
        if self.fault_access == 0 {
            self.fault_va = va;
            self.fault_access = access;
            self.fault_reason = reason;
        }
    }

    /// Records the first engine error that stopped it.
    pub(crate) fn record_engine_error(&mut self, code: u32) {
        self.set_errored();
        if self.engine_error == 0 {
            self.engine_error = code;
        }
    }

    /// It hung: guilty; banned once `limit` hangs fall within `window_ns`.
    /// Returns whether this hang banned it.
    pub(crate) fn record_hang(&mut self, limit: usize, window_ns: u64) -> bool {
        self.hangs = self.hangs.saturating_add(1);
        self.reset_status = uapi::VGPU_CTX_RESET_GUILTY;
        self.hang_times.retain(|t| elapsed_ns(t) <= window_ns);
        if self.hang_times.len() >= limit {
            let _ = self.hang_times.remove(0);
        }
        let _ = self.hang_times.push(Instant::now(), GFP_KERNEL);
        let banned = !self.banned && self.hang_times.len() >= limit;
        self.banned |= banned;
        banned
    }

    /// Its work was lost to another context's reset and is written again.
    pub(crate) fn set_innocent(&mut self) {
        if self.reset_status == uapi::VGPU_CTX_RESET_NONE {
            self.reset_status = uapi::VGPU_CTX_RESET_INNOCENT;
        }
    }

    /// Hang times kept for the ban window.
    pub(crate) fn recent_hangs(&self) -> usize {
        self.hang_times.len()
    }
}

/// A logged fault.
#[derive(Clone, Copy)]
pub(crate) struct FaultLog {
    pub(crate) hw: u32,
    pub(crate) engine: u8,
    pub(crate) va: u64,
    pub(crate) access: u8,
    pub(crate) reason: u8,
    pub(crate) served: bool,
}

/// A logged reset.
#[derive(Clone, Copy)]
pub(crate) struct ResetLog {
    pub(crate) hw: u32,
    pub(crate) engine: u32,
    pub(crate) kind: &'static str,
    pub(crate) ok: bool,
    pub(crate) ms: u64,
}

/// Device-wide counters of the GPU block.
#[derive(Clone, Copy, Default)]
pub(crate) struct GpuCounters {
    pub(crate) fences_signalled: u64,
    /// Fence values found written with no `FENCE` event (lost interrupts).
    pub(crate) missed_fence_events: u64,
    /// `FENCE` events ahead of the fence value in memory (not believed).
    pub(crate) early_fence_events: u64,
    /// `FENCE` events for seqnos already announced.
    pub(crate) duplicate_fence_events: u64,
    /// Seqnos jumped over by `FENCE` events (lost interrupts or fences
    /// never written, seen when a later fence's event arrives).
    pub(crate) skipped_fence_events: u64,
    /// Refused posted doorbells rung again.
    pub(crate) doorbells_rung_again: u64,
    pub(crate) faults: u64,
    pub(crate) hangs: u64,
    pub(crate) engine_resets: u64,
    pub(crate) device_resets: u64,
}

/// Everything behind the GPU state lock.
pub(crate) struct GpuState {
    /// One entry per device context slot.
    pub(crate) slots: KVec<Option<Ctx>>,
    pub(crate) next_handle: u32,
    /// Recovery failed: nothing more runs until a rebind.
    pub(crate) wedged: bool,
    /// A reset is running: `SUBMIT` waits until it ends (the reset writes
    /// the rings itself).
    pub(crate) resetting: bool,
    pub(crate) last_hang: Option<KBox<HangDump>>,
    pub(crate) faults_log: KVec<FaultLog>,
    pub(crate) resets_log: KVec<ResetLog>,
    pub(crate) counters: GpuCounters,
}

impl GpuState {
    /// The context of `client` with id `handle` (not being destroyed), and
    /// its device slot.
    ///
    /// # Errors
    ///
    /// `ENOENT`.
    pub(crate) fn find(&mut self, client: &Arc<Client>, handle: u32) -> Result<(u32, &mut Ctx)> {
        for (i, s) in self.slots.iter_mut().enumerate() {
            if let Some(c) = s {
                if c.handle == handle && Arc::ptr_eq(&c.client, client) && !c.destroying {
                    return Ok((i as u32, c));
                }
            }
        }
        Err(ENOENT)
    }

    /// The context in device slot `hw`, if any.
    pub(crate) fn slot(&mut self, hw: u32) -> Option<&mut Ctx> {
        self.slots.get_mut(usize::try_from(hw).ok()?)?.as_mut()
    }

    /// The context in slot `hw` if it is still the one with id `handle`
    /// (it may have been destroyed, and the slot reused, meanwhile).
    pub(crate) fn slot_of(&mut self, hw: u32, handle: u32) -> Option<&mut Ctx> {
        self.slot(hw).filter(|c| c.handle == handle)
    }

    /// Moves the fence value of every ring past its discarded jobs, so that
    /// jobs of other contexts waiting on them (`SEM_WAIT` for an input
    /// fence) are released instead of hanging. `WAIT` still reports the
    /// discarded fences as failed.
    pub(crate) fn release_failed(&self, mem: &SlotMemory) {
        for (hw, s) in self.slots.iter().enumerate() {
            let Some(c) = s else { continue };
            for (e, r) in c.rings.iter().enumerate() {
                if r.present && r.done_upto > mem.fence_value(hw as u32, e) {
                    mem.set_fence_value(hw as u32, e, r.done_upto);
                }
            }
        }
    }

    /// Every pending job fails (the device is wedged).
    pub(crate) fn fail_all(&mut self) {
        for c in self.slots.iter_mut().flatten() {
            for r in c.rings.iter_mut() {
                r.fail_pending();
            }
        }
    }
}

/// Appends to a bounded log, dropping the oldest entry.
pub(crate) fn push_log<T>(log: &mut KVec<T>, v: T) {
    if log.len() >= LOG_LEN {
        let _ = log.remove(0);
    }
    let _ = log.push(v, GFP_KERNEL);
}

/// The GPU block of one device.
///
/// See the lock order in the [module documentation](super).
#[pin_data]
pub(crate) struct Gpu {
    /// The transport.
    pub(crate) hw: Arc<Hw>,
    /// Ring memory of every device slot (set at probe).
    pub(crate) mem: SetOnce<SlotMemory>,
    /// Serialises the operations that change which contexts and rings the
    /// device has, and their pointers: context creation and destruction,
    /// the reset ladder. Held across control-queue round trips.
    #[pin]
    pub(crate) ops: Mutex<()>,
    /// Contexts, rings, jobs, fences, counters, logs. Never held across a
    /// control-queue round trip.
    #[pin]
    pub(crate) state: Mutex<GpuState>,
    /// Fence waiters (and submitters waiting for a reset to end).
    #[pin]
    pub(crate) fences: CondVar,
}

impl Gpu {
    /// The GPU block of the device behind `hw`, without slots yet.
    pub(crate) fn new(hw: Arc<Hw>) -> impl PinInit<Self> {
        pin_init!(Gpu {
            hw,
            mem: SetOnce::new(),
            ops <- new_mutex!(()),
            state <- new_mutex!(GpuState {
                slots: KVec::new(),
                next_handle: 1,
                wedged: false,
                resetting: false,
                last_hang: None,
                faults_log: KVec::new(),
                resets_log: KVec::new(),
                counters: GpuCounters::default(),
            }),
            fences <- new_condvar!(),
        })
    }

    /// Allocates the ring memory of `n` device slots (probe).
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn init(&self, dev: &Device<Bound>, n: u32) -> Result {
        self.mem.populate(SlotMemory::new(dev, n)?);
        let mut g = self.state.lock();
        for _ in 0..n {
            g.slots.push(None, GFP_KERNEL)?;
        }
        Ok(())
    }

    /// The PCI function (for log messages).
    pub(crate) fn pdev(&self) -> &pci::Device {
        self.hw.pdev()
    }

    /// The slots' ring memory.
    ///
    /// # Errors
    ///
    /// `ENODEV` before probe allocated it.
    pub(crate) fn slots(&self) -> Result<&SlotMemory> {
        self.mem.as_ref().ok_or(ENODEV)
    }

    /// The state lock, once the slot table exists.
    ///
    /// # Errors
    ///
    /// `ENODEV` before probe sized the slot table.
    pub(crate) fn lock(&self) -> Result<MutexGuard<'_, GpuState>> {
        let g = self.state.lock();
        if g.slots.is_empty() {
            return Err(ENODEV);
        }
        Ok(g)
    }

    /// Sends a control command (no GPU lock may be held). A device found
    /// broken wakes the fence waiters.
    ///
    /// # Errors
    ///
    /// The command's errno (see `Control::command_locked`).
    pub(crate) fn cmd(&self, c: Command) -> Result<Reply> {
        let r = self.hw.command(c);
        if r.is_err() && self.hw.check_usable().is_err() {
            self.wake();
        }
        r
    }

    /// Wakes every fence waiter (and submitters waiting for a reset).
    pub(crate) fn wake(&self) {
        self.fences.notify_all();
    }

    /// Whether the device can be used.
    ///
    /// # Errors
    ///
    /// `ENODEV` once unbound, `EIO` once broken.
    pub(crate) fn check_usable(&self) -> Result {
        self.hw.check_usable()
    }

    /// Contexts alive (for leak checks).
    pub(crate) fn context_count(&self) -> usize {
        self.state.lock().slots.iter().flatten().count()
    }
}
