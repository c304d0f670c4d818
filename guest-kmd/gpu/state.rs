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

pub(crate) use super::records::{
    FaultLog,
    GpuCounters,
    ResetLog, //
};
use super::{
    queue::{
        BindJob,
        JobQueue, //
    },
    records::{
        DumpLog,
        HangDump,
        PendingDump,
        CAPTURE_BUF_BYTES, //
    },
    ring::{
        RingSw,
        SlotMemory,
        ENGINES, //
    },
    uqueue::{
        UqHw,
        UserQueue, //
    },
};
use crate::{
    ffi::DumpSlot,
    ffi_sync::Dependency,
    file::Client,
    gem::BoRegistry,
    proto::Command,
    ptpool::PtPool,
    ras::Retired,
    time::elapsed_ns,
    transport::{control::Reply, Hw},
    vram_mgr::VramMgr,
};
use kernel::{
    device::{
        Bound,
        Device, //
    },
    dma::Coherent,
    new_condvar, new_mutex, new_work, pci,
    prelude::*,
    sync::atomic::{
        Atomic,
        AtomicFlag,
        Relaxed, //
    },
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
    workqueue::{
        impl_has_work,
        Work, //
    },
};

/// A job's dependency in the KMD: a fence whose callback kicks the GPU's
/// queue worker ([`super::sched`]).
pub(crate) type Dep = Dependency<Gpu>;

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
    /// Jobs accepted but not yet on the ring, per engine.
    pub(crate) queues: [JobQueue<Dep>; ENGINES],
    /// Thread-group id of the creating process.
    pub(crate) pid: u32,
    /// `EngineError` code of the first engine error that stopped it (0: none).
    pub(crate) engine_error: u32,
    /// Where the first engine error or unrecoverable fault happened.
    pub(crate) error_at: Option<ErrorAt>,
    /// Sanitizer reports about it, and the latest one's number.
    pub(crate) san_reports: u32,
    pub(crate) san_last_seq: u64,
    /// A user-mode queue: its ring and doorbell are the file's.
    pub(crate) uq: Option<UserQueue>,
}

/// Where an error happened: the packet, and the SUBMIT and command buffer
/// the application gave it in (`CTX_QUERY`'s `error_*`).
#[derive(Clone, Copy, Default)]
pub(crate) struct ErrorAt {
    pub(crate) packet_va: u64,
    pub(crate) header: u32,
    pub(crate) engine: u32,
    pub(crate) depth: u32,
    /// The job's seqno (0: unknown).
    pub(crate) seqno: u64,
    /// Index of the command buffer in the SUBMIT (`None`: a KMD packet).
    pub(crate) cmd_index: Option<u32>,
    /// Offset in that command buffer.
    pub(crate) cmd_offset: u32,
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
    pub(crate) uq: Option<UqHw>,
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
            queues: [JobQueue::new(), JobQueue::new()],
            pid: a.pid,
            engine_error: 0,
            error_at: None,
            san_reports: 0,
            san_last_seq: 0,
            uq: a.uq.as_ref().map(UserQueue::new),
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
        if let Some(q) = &self.uq {
            state |= uapi::VGPU_CTX_STATE_USER_QUEUE;
            if !q.watched {
                state |= uapi::VGPU_CTX_STATE_SUSPENDED;
            }
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

    /// Records the first engine error that stopped it, and where.
    pub(crate) fn record_engine_error(&mut self, code: u32, at: ErrorAt) {
        self.set_errored();
        if self.engine_error == 0 {
            self.engine_error = code;
        }
        self.error_at.get_or_insert(at);
    }

    /// Records where the first unrecoverable fault happened.
    pub(crate) fn record_fault_at(&mut self, at: ErrorAt) {
        self.error_at.get_or_insert(at);
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

    /// A device reset lost VRAM its file's objects were in: its pending
    /// jobs fail and it takes no more.
    pub(crate) fn set_vram_lost(&mut self) {
        self.errored = true;
        self.reset_status = uapi::VGPU_CTX_RESET_VRAM_LOST;
        for r in self.rings.iter_mut() {
            r.fail_pending();
        }
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

    /// Every unfinished job of engine `e` fails with `errno`, on the ring
    /// and in the queue (the context is errored, banned or gone). Returns
    /// the queued jobs, to be dropped once the state lock is released.
    pub(crate) fn fail_ring(&mut self, e: usize, errno: i32) -> KVec<super::queue::Queued<Dep>> {
        let (Some(r), Some(q)) = (self.rings.get_mut(e), self.queues.get_mut(e)) else {
            return KVec::new();
        };
        r.fail_pending();
        if let Some((first, last)) = q.seqno_range() {
            r.fail_range(first, last, errno);
        }
        q.take_all()
    }
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
    /// Device slots whose KMD memory holds a retired page (bit per slot):
    /// never used for a context again.
    pub(crate) retired_slots: u64,
    pub(crate) last_hang: Option<KBox<HangDump>>,
    /// Devcoredumps waiting for the watchdog to write them.
    pub(crate) pending_dumps: KVec<PendingDump>,
    /// Devcoredumps taken off `pending_dumps` and being written (their
    /// capture read, `dev_coredumpm` not returned yet): still pending for
    /// debugfs `coredumps`, so that a reader waiting for `pending 0` sees
    /// them in `/sys/class/devcoredump` afterwards.
    pub(crate) publishing_dumps: u32,
    /// The last devcoredumps (debugfs `coredumps`).
    pub(crate) dumps_log: KVec<DumpLog>,
    /// Devcoredumps numbered so far.
    pub(crate) dumps_seq: u64,
    pub(crate) faults_log: KVec<FaultLog>,
    pub(crate) resets_log: KVec<ResetLog>,
    pub(crate) counters: GpuCounters,
    /// `VM_BIND_OPS` jobs not yet done, in submission order (each file's
    /// run in order; [`super::bind`]).
    pub(crate) binds: KVec<BindJob<Dep>>,
    /// The device sanitizer's reports, and a planted bug.
    pub(crate) san: super::sanlog::SanLog,
    /// The firmware went down (its `FIRMWARE_CRASH` event, or what the
    /// firmware monitor saw): why, for the next check to recover it.
    pub(crate) fw_down: Option<FwDown>,
    /// The firmware's boot and heartbeat counts last read, and when they
    /// last moved (ns, `monotonic_ns`): a new boot starts its heartbeats
    /// again from 0.
    pub(crate) fw_beats: (u32, u64, u64),
    /// When the last firmware failures were recovered (ns), oldest first.
    pub(crate) fw_failures: [u64; 3],
    /// Runtime power management ([`super::power`]).
    pub(crate) pm: RuntimePm,
}

/// Runtime power management's state and counters.
#[derive(Clone, Copy, Default)]
pub(crate) struct RuntimePm {
    /// Suspended since this time (ns, `monotonic_ns`).
    pub(crate) suspended_at: Option<u64>,
    /// The current suspension is `D3COLD` (VRAM saved, restored at the
    /// resume); `D3HOT` otherwise.
    pub(crate) cold: bool,
    /// Suspensions to `D3COLD`, and those that went to `D3HOT` because
    /// VRAM could not go off (over the threshold, CPU-mapped objects).
    pub(crate) cold_suspends: u64,
    pub(crate) hot_fallbacks: u64,
    /// The last return from `D3COLD`: objects and bytes copied back to
    /// VRAM, and the copy's time, ns.
    pub(crate) last_restored: u64,
    pub(crate) last_restored_bytes: u64,
    pub(crate) last_restore_ns: u64,
    /// Idle (no work, no user-mode queue) since this time (0: busy).
    pub(crate) idle_since: u64,
    pub(crate) suspends: u64,
    pub(crate) resumes: u64,
    /// Power-state changes the device refused.
    pub(crate) failures: u64,
    /// Time suspended, ns, before the current suspension.
    pub(crate) suspended_ns: u64,
    /// The last resume's time (the power-up, the firmware and the
    /// contexts), and the longest, ns.
    pub(crate) last_resume_ns: u64,
    pub(crate) max_resume_ns: u64,
    /// System suspend/resume cycles the device went through, and the
    /// last system resume's time (power-on to VRAM restored), ns.
    pub(crate) sleeps: u64,
    pub(crate) last_sleep_resume_ns: u64,
}

/// Why the firmware is down.
#[derive(Clone, Copy)]
pub(crate) enum FwDown {
    /// It crashed with this code (`FIRMWARE_CRASH`, or `CRASHED` in
    /// `FW_STATUS`).
    Crashed(u32),
    /// Its heartbeats stopped for this many ms.
    Silent(u64),
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

    /// Every pending job fails, on the rings and in the queues (the device
    /// is wedged or lost). Returns the queued jobs taken out, to be dropped
    /// once the state lock is released.
    pub(crate) fn fail_all(&mut self) -> KVec<super::queue::Queued<Dep>> {
        let mut gone = KVec::new();
        for c in self.slots.iter_mut().flatten() {
            for e in 0..ENGINES {
                for j in c.fail_ring(e, -(kernel::bindings::EIO as i32)) {
                    // Without memory the job is dropped here, under the lock.
                    let _ = gone.push(j, GFP_KERNEL);
                }
            }
        }
        gone
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
    /// The device's retired pages (set at probe).
    pub(crate) ras: SetOnce<Arc<Retired>>,
    /// The page-table pool, for retiring table pages (set at probe).
    pub(crate) pt_pool: SetOnce<Arc<PtPool>>,
    /// Whether a published devcoredump is still unread (set at probe).
    pub(crate) dump_slot: SetOnce<Arc<DumpSlot>>,
    /// The device's buffer objects, for what a reset that loses VRAM does
    /// to them (set at probe).
    pub(crate) bos: SetOnce<Arc<BoRegistry>>,
    /// The VRAM manager, on a device with VRAM (set at probe): retired VRAM
    /// pages are taken out of it ([`super::ras`]).
    pub(crate) vram: SetOnce<Arc<VramMgr>>,
    /// Device resets that lost VRAM contents.
    pub(crate) vram_losses: Atomic<u32>,
    /// 1 while runtime power management suspends or has suspended the
    /// device (the ioctls' fast check; the state is `GpuState::pm`).
    pub(crate) pm_suspended: Atomic<u32>,
    /// Ioctls using the device now ([`super::power::PmRef`]): no
    /// suspension while there is one.
    pub(crate) pm_users: Atomic<u32>,
    /// The buffer `CAPTURE_READ` writes device captures into (set at
    /// probe, freed at unbind). Its lock serialises reads of device
    /// captures; held across `CAPTURE_READ` round trips, never with the
    /// state lock.
    #[pin]
    pub(crate) dumping: Mutex<Option<Coherent<[u32]>>>,
    /// Serialises the operations that change which contexts and rings the
    /// device has, and their pointers: context creation and destruction,
    /// the reset ladder. Held across control-queue round trips.
    #[pin]
    pub(crate) ops: Mutex<()>,
    /// Serialises runtime resumes, held from the power-up to the end of
    /// VRAM's restoration (before [`Gpu::ops`] and the driver's copy
    /// context).
    #[pin]
    pub(crate) pm_resume: Mutex<()>,
    /// Contexts, rings, jobs, fences, counters, logs. Never held across a
    /// control-queue round trip.
    #[pin]
    pub(crate) state: Mutex<GpuState>,
    /// Fence waiters (and submitters waiting for a reset to end).
    #[pin]
    pub(crate) fences: CondVar,
    /// The loss of the device has been handled (jobs failed).
    lost_handled: AtomicFlag,
    /// The queue worker: moves ready jobs to their rings and runs ready
    /// bind jobs ([`super::sched`]).
    #[pin]
    pub(crate) work: Work<Gpu>,
    /// An event found a ring with queued jobs making room: the event
    /// handler's caller kicks the worker.
    pub(crate) pump_wanted: AtomicFlag,
    /// When the last hang check found the earliest ring deadline (a ring
    /// with work reaches the job timeout without progress), in
    /// [`crate::ffi::monotonic_ns`] time; 0: none. The watchdog wakes for
    /// it rather than at its next period.
    pub(crate) hang_due_ns: Atomic<u64>,
}

impl_has_work! {
    impl HasWork<Gpu> for Gpu { self.work }
}

impl Gpu {
    /// The GPU block of the device behind `hw`, without slots yet.
    pub(crate) fn new(hw: Arc<Hw>) -> impl PinInit<Self> {
        pin_init!(Gpu {
            hw,
            mem: SetOnce::new(),
            ras: SetOnce::new(),
            pt_pool: SetOnce::new(),
            dump_slot: SetOnce::new(),
            bos: SetOnce::new(),
            vram: SetOnce::new(),
            vram_losses: Atomic::new(0),
            hang_due_ns: Atomic::new(0),
            pm_suspended: Atomic::new(0),
            pm_users: Atomic::new(0),
            dumping <- new_mutex!(None),
            ops <- new_mutex!(()),
            pm_resume <- new_mutex!(()),
            state <- new_mutex!(GpuState {
                slots: KVec::new(),
                next_handle: 1,
                wedged: false,
                resetting: false,
                retired_slots: 0,
                last_hang: None,
                pending_dumps: KVec::new(),
                publishing_dumps: 0,
                dumps_log: KVec::new(),
                dumps_seq: 0,
                faults_log: KVec::new(),
                resets_log: KVec::new(),
                counters: GpuCounters::default(),
                binds: KVec::new(),
                san: super::sanlog::SanLog::new(),
                fw_down: None,
                fw_beats: (0, 0, 0),
                fw_failures: [0; 3],
                pm: RuntimePm::default(),
            }),
            fences <- new_condvar!(),
            lost_handled: AtomicFlag::new(false),
            work <- new_work!("vgpu::queue"),
            pump_wanted: AtomicFlag::new(false),
        })
    }

    /// Allocates the ring memory of `n` device slots (probe), and records
    /// the device's retired pages and page-table pool.
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn init(
        &self,
        dev: &Device<Bound>,
        n: u32,
        ras: Arc<Retired>,
        pool: Arc<PtPool>,
    ) -> Result {
        self.ras.populate(ras);
        self.pt_pool.populate(pool);
        *self.dumping.lock() = Some(Coherent::<u32>::zeroed_slice(
            dev,
            CAPTURE_BUF_BYTES / 4,
            GFP_KERNEL,
        )?);
        self.dump_slot
            .populate(Arc::new(DumpSlot::new(), GFP_KERNEL)?);
        self.mem.populate(SlotMemory::new(dev, n)?);
        let mut g = self.state.lock();
        for _ in 0..n {
            g.slots.push(None, GFP_KERNEL)?;
        }
        Ok(())
    }

    /// Frees the DMA memory the device used (at unbind, once it is
    /// quiesced): the slots' rings and status pages, and the capture
    /// buffer (waiting for a capture read in progress). Contexts of files
    /// still open keep their bookkeeping until they are destroyed.
    pub(crate) fn release_dma(&self) {
        if let Some(m) = self.mem.as_ref() {
            m.release();
        }
        *self.dumping.lock() = None;
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
            self.device_gone();
        }
        r
    }

    /// The device broke or was declared lost: a lost device will never
    /// complete the jobs it holds, so they fail (exported fences signal
    /// `-EIO`); every waiter wakes.
    pub(crate) fn device_gone(&self) {
        if self.hw.link.is_lost() && !self.lost_handled.xchg(true, Relaxed) {
            let gone = self.state.lock().fail_all();
            drop(gone);
        }
        self.wake();
    }

    /// A function reset brought a lost device back: a later loss is
    /// handled again ([`Gpu::device_gone`]).
    pub(crate) fn revived(&self) {
        self.lost_handled.store(false, Relaxed);
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

    /// Pages retired after uncorrectable ECC errors.
    pub(crate) fn retired_pages(&self) -> u32 {
        self.ras.as_ref().map_or(0, |r| r.count())
    }

    /// Contexts alive (for leak checks).
    pub(crate) fn context_count(&self) -> usize {
        self.state.lock().slots.iter().flatten().count()
    }
}
