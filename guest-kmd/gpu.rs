// SPDX-License-Identifier: GPL-2.0

//! Contexts, rings, submission, fences, page faults, hangs and resets.
//!
//! # Contexts and rings
//!
//! A context is a device context (`CONTEXT_CREATE`, id = a device slot) on
//! its file's page table, with one ring per engine it selected. The ring
//! memory is KMD-owned: each device slot has a coherent DMA block allocated
//! at probe ([`SLOT_BYTES`]: a status page, then one [`RING_SIZE`] ring per
//! engine) that is mapped into the file's address space in the KMD range
//! while a context uses the slot: rings read+execute, the status page
//! read+write (the device writes the [`RingStatus`] blocks and the fence
//! values there).
//!
//! # Submission and fences
//!
//! `SUBMIT` writes, at the ring's write pointer, a `SEM_WAIT` per input fence
//! (on that fence's value in its context's status page, `>=` seqno), an
//! `INDIRECT` per command buffer and a `FENCE` writing the job's seqno to
//! the ring's fence slot, then rings the `DOORBELL`. Seqnos count from 1 per
//! ring. A fence is signalled when the `FENCE` event arrives (interrupt
//! thread) or, as a fallback, when the value in the fence slot reaches it.
//! Jobs that a fault, an engine error, a reset or context destruction
//! discards complete with an error: `WAIT` returns `EIO` for them.
//!
//! # Faults
//!
//! A replayable fault (contexts created with `VGPU_CTX_CREATE_REPLAYABLE`)
//! on a not-present page of a lazy BO mapping is served: the page is mapped,
//! the context's TLB invalidated for it, and the job resumed
//! (`FAULT_RESUME` retry). Any other fault aborts: the ring stops, the
//! context is marked errored and guilty, its pending jobs fail, and
//! `CTX_QUERY` reports the address, access and reason.
//!
//! # Hangs and the reset ladder
//!
//! A ring with pending jobs that has not completed one for `job_timeout_ms`
//! is hung. Hang checks run from a periodic watchdog (every tenth of the
//! timeout, see [`crate::watchdog`]), and also whenever a `WAIT` sleeps (at
//! least every quarter timeout), at each `SUBMIT` and `CTX_QUERY`, and on
//! writes to debugfs `hangcheck`. Recovery:
//!
//! 1. `ENGINE_RESET` of the ring's engine: the hung ring's pending jobs
//!    fail, its context is guilty; an innocent context whose job was in
//!    flight on that engine gets its unfinished jobs written again.
//! 2. If the engine reset fails or the hung ring did not drain:
//!    `DEVICE_RESET`, then every context and ring is created again on the
//!    same page tables; the guilty context's jobs fail, innocent contexts'
//!    unfinished jobs are written again (their status becomes innocent).
//! 3. If that fails, the device is wedged: every waiter wakes with `EIO`,
//!    new submissions fail with `EIO`, and a `WEDGED=` uevent is sent.
//!
//! A context that caused `ban_hangs` hangs within `ban_window_ms` is banned
//! (`SUBMIT` fails with `EIO`).

use crate::{
    fence::ExportedFence,
    control::{
        elapsed_ns,
        ns_to_jiffies, //
    },
    drm::Client,
    event::{
        Event,
        FaultInfo,
        FAULT_FLAG_REPLAYABLE, //
    },
    mmu::{
        Access,
        FaultReason,
        PTE_EXEC,
        PTE_READ,
        PTE_WRITE, //
    },
    packet::{
        encode_header,
        EngineError,
        OP_FENCE,
        OP_INDIRECT,
        OP_SEM_WAIT,
        SEM_WAIT_GEQ, //
    },
    proto::{
        engine,
        ring_state,
        Command,
        ContextQueryReply,
        EngineResetReply,
        RingStatus,
        CTX_FLAG_REPLAYABLE_FAULTS,
        CTX_NONE,
        DESTROY_FLAG_FORCE,
        FAULT_RESUME_ABORT,
        FAULT_RESUME_RETRY, //
    },
    vm::{
        self,
        PAGE_4K, //
    },
    Vgpu,
};
use core::fmt;
use kernel::{
    bindings,
    device::{
        Bound,
        Device, //
    },
    dma::Coherent,
    new_condvar,
    new_mutex,
    prelude::*,
    sync::{
        Arc,
        CondVar,
        CondVarTimeoutResult,
        Mutex,
        MutexGuard, //
    },
    time::{
        delay::fsleep,
        Delta,
        Instant,
        Monotonic, //
    },
    uaccess::UserSlice,
    uapi,
};

/// Bytes of one ring.
pub(crate) const RING_SIZE: u32 = 16 << 10;
/// Engines a context can select.
const ENGINES: usize = engine::COUNT as usize;
/// Bytes of a device slot's KMD memory: status page + one ring per engine.
pub(crate) const SLOT_BYTES: usize = 4096 + ENGINES * RING_SIZE as usize;
/// KMD VA stride per device slot inside the KMD range.
const SLOT_VA_STRIDE: u64 = 64 << 10;
/// Offset of engine `e`'s fence value in the status page.
const FENCE_SLOT_OFFSET: usize = 128;
/// Contexts per file.
const MAX_FILE_CONTEXTS: usize = 16;
/// Failed seqno ranges remembered per ring.
const FAILED_RANGES: usize = 16;
/// Entries kept in the fault and reset logs.
const LOG_LEN: usize = 16;
/// `CONTEXT_DESTROY` retries on `BUSY` before forcing.
const DESTROY_RETRIES: u32 = 4;

/// Words written for one `FENCE`, `INDIRECT`, `SEM_WAIT`.
const FENCE_WORDS: usize = 6;
const INDIRECT_WORDS: usize = 4;
const SEM_WAIT_WORDS: usize = 6;

/// KMD memory of every device slot, allocated at probe.
pub(crate) struct SlotMemory {
    slots: KVec<Coherent<[u32]>>,
}

impl SlotMemory {
    /// Allocates `n` slots.
    pub(crate) fn new(dev: &Device<Bound>, n: u32) -> Result<SlotMemory> {
        let mut slots = KVec::new();
        for _ in 0..n {
            slots.push(
                Coherent::<u32>::zeroed_slice(dev, SLOT_BYTES / 4, GFP_KERNEL)?,
                GFP_KERNEL,
            )?;
        }
        Ok(SlotMemory { slots })
    }

    fn slot(&self, hw: u32) -> Option<&Coherent<[u32]>> {
        self.slots.get(usize::try_from(hw).ok()?)
    }

    fn read_u32(&self, hw: u32, word: usize) -> u32 {
        match self.slot(hw) {
            // SAFETY: `word < len` is checked; the device may write the
            // word concurrently: volatile is the kernel's READ_ONCE.
            Some(m) if word < m.len() => u32::from_le(unsafe { m.as_ptr().cast::<u32>().add(word).read_volatile() }),
            _ => 0,
        }
    }

    fn write_u32(&self, hw: u32, word: usize, v: u32) {
        if let Some(m) = self.slot(hw) {
            if word < m.len() {
                // SAFETY: In bounds (checked); WRITE_ONCE semantics for
                // memory the device reads.
                unsafe { m.as_mut_ptr().cast::<u32>().add(word).write_volatile(v.to_le()) }
            }
        }
    }

    /// Writes an 8-byte aligned u64 in one store.
    fn write_u64(&self, hw: u32, byte: usize, v: u64) {
        if let Some(m) = self.slot(hw) {
            if byte % 8 == 0 && byte / 4 + 1 < m.len() {
                // SAFETY: In bounds and 8-byte aligned (the allocation is
                // page aligned); one volatile store, so the device never
                // reads a torn value.
                unsafe { m.as_mut_ptr().cast::<u8>().add(byte).cast::<u64>().write_volatile(v.to_le()) }
            }
        }
    }

    fn read_u64(&self, hw: u32, byte: usize) -> u64 {
        let lo = u64::from(self.read_u32(hw, byte / 4));
        let hi = u64::from(self.read_u32(hw, byte / 4 + 1));
        lo | hi << 32
    }

    fn zero(&self, hw: u32) {
        for w in 0..SLOT_BYTES / 4 {
            self.write_u32(hw, w, 0);
        }
    }

    fn addr(&self, hw: u32) -> u64 {
        self.slot(hw).map_or(0, |m| m.dma_handle())
    }

    /// The ring status block of engine `e`.
    fn status(&self, hw: u32, e: usize) -> RingStatus {
        let b = e * 64;
        RingStatus {
            rptr: self.read_u32(hw, b / 4),
            state: self.read_u32(hw, b / 4 + 1),
            last_fence: self.read_u64(hw, b + 8),
            packets: self.read_u64(hw, b + 16),
            error: self.read_u32(hw, b / 4 + 6),
            error_rptr: self.read_u32(hw, b / 4 + 7),
            reserved: [0; 4],
        }
    }

    fn fence_value(&self, hw: u32, e: usize) -> u64 {
        self.read_u64(hw, FENCE_SLOT_OFFSET + 8 * e)
    }
}

/// How long a written fence value may stay ahead of its `FENCE` event
/// before the interrupt counts as lost.
const MISSED_EVENT_NS: u64 = 200_000_000;

/// One submitted job.
struct Job {
    seqno: u64,
    /// The packets, kept to write them again after a reset.
    words: KVec<u32>,
}

/// Driver-side state of one ring.
struct RingSw {
    present: bool,
    /// Bytes ever written (the device's wptr).
    wptr: u32,
    next_seqno: u64,
    /// Seqnos known complete (events or fence value).
    completed: u64,
    /// Highest seqno a `FENCE` event announced.
    evt_seqno: u64,
    /// A fence value a hang check found ahead of the events (0: none), and
    /// when; events still behind it [`MISSED_EVENT_NS`] later means the
    /// interrupt was lost.
    ahead_of_events: u64,
    ahead_since: Instant<Monotonic>,
    /// Seqnos up to which jobs were discarded or completed.
    done_upto: u64,
    failed: KVec<(u64, u64)>,
    jobs: KVec<Job>,
    progress_at: Instant<Monotonic>,
    /// dma_fence context of the ring's exported fences (0: none yet).
    fence_ctx: u64,
    /// Fences exported as sync_files, unsignalled, by seqno.
    exported: KVec<ExportedFence>,
}

impl RingSw {
    fn new(present: bool) -> RingSw {
        RingSw {
            present,
            wptr: 0,
            next_seqno: 1,
            completed: 0,
            evt_seqno: 0,
            ahead_of_events: 0,
            ahead_since: Instant::now(),
            done_upto: 0,
            failed: KVec::new(),
            jobs: KVec::new(),
            progress_at: Instant::now(),
            fence_ctx: 0,
            exported: KVec::new(),
        }
    }

    /// Drops completed jobs; notes progress.
    fn retire(&mut self, completed: u64) {
        if completed > self.completed {
            self.completed = completed;
            self.progress_at = Instant::now();
        }
        let c = self.completed;
        self.jobs.retain(|j| j.seqno > c);
        self.exported.retain(|f| {
            if f.seqno <= c {
                f.signal(0);
            }
            !f.is_signalled()
        });
    }

    /// Discards every pending job: their fences complete with an error.
    fn fail_pending(&mut self) -> usize {
        let n = self.jobs.len();
        if let (Some(first), Some(last)) = (self.jobs.first(), self.jobs.last()) {
            let r = (first.seqno, last.seqno);
            if self.failed.len() >= FAILED_RANGES {
                let _ = self.failed.remove(0);
            }
            let _ = self.failed.push(r, GFP_KERNEL);
            self.done_upto = self.done_upto.max(r.1);
            self.exported.retain(|f| {
                if (r.0..=r.1).contains(&f.seqno) {
                    f.signal(-(bindings::EIO as i32));
                }
                !f.is_signalled()
            });
        }
        self.jobs.clear();
        self.progress_at = Instant::now();
        n
    }

    /// `Some(Ok)` signalled, `Some(Err)` completed with an error, `None`
    /// pending.
    fn fence_state(&self, seqno: u64) -> Option<Result> {
        if self.failed.iter().any(|&(a, b)| (a..=b).contains(&seqno)) {
            return Some(Err(EIO));
        }
        (seqno <= self.completed || seqno <= self.done_upto).then_some(Ok(()))
    }
}

/// Driver-side state of one context.
struct Ctx {
    client: Arc<Client>,
    handle: u32,
    engine_mask: u32,
    priority: u32,
    flags: u32,
    pt_root: u64,
    kmd_va: u64,
    destroying: bool,
    errored: bool,
    banned: bool,
    reset_status: u32,
    fault_va: u64,
    fault_access: u32,
    fault_reason: u32,
    hangs: u32,
    /// When the most recent hangs (at most `ban_hangs`) happened.
    hang_times: KVec<Instant<Monotonic>>,
    faults: u32,
    rings: [RingSw; ENGINES],
    /// Thread-group id of the creating process.
    pid: u32,
    /// `EngineError` code of the first engine error that stopped it (0: none).
    engine_error: u32,
}

/// A logged fault.
#[derive(Clone, Copy)]
struct FaultLog {
    hw: u32,
    engine: u8,
    va: u64,
    access: u8,
    reason: u8,
    served: bool,
}

/// A logged reset.
#[derive(Clone, Copy)]
struct ResetLog {
    hw: u32,
    engine: u32,
    kind: &'static str,
    ok: bool,
    ms: u64,
}

/// Words of ring contents a hang dump keeps (around the read pointer).
const DUMP_WORDS: usize = 32;

/// What a hang looked like when it was detected.
struct HangDump {
    hw: u32,
    engine: usize,
    handle: u32,
    client: u64,
    pt_root: u64,
    status: RingStatus,
    wptr: u32,
    completed: u64,
    next_seqno: u64,
    pending: usize,
    /// Ring offset of `words[0]`.
    from: u32,
    words: [u32; DUMP_WORDS],
    /// Device context state bits (`CONTEXT_QUERY`), if it answered.
    hw_state: Option<u32>,
    /// Nanoseconds since the ring last completed a job.
    stalled_ns: u64,
}

/// Everything the GPU blocks keep, under one lock.
pub(crate) struct Gpu {
    last_hang: Option<KBox<HangDump>>,
    slots: KVec<Option<Ctx>>,
    next_handle: u32,
    wedged: bool,
    faults_log: KVec<FaultLog>,
    resets_log: KVec<ResetLog>,
    fences_signalled: u64,
    /// Fence values found written with no `FENCE` event (lost interrupts).
    missed_fence_events: u64,
    /// `FENCE` events ahead of the fence value in memory (not believed).
    early_fence_events: u64,
    /// `FENCE` events for seqnos already announced.
    duplicate_fence_events: u64,
    /// Seqnos jumped over by `FENCE` events (lost interrupts or fences
    /// never written, seen when a later fence's event arrives).
    skipped_fence_events: u64,
    /// Refused posted doorbells rung again.
    doorbells_rung_again: u64,
    fault_count: u64,
    hang_count: u64,
    engine_resets: u64,
    device_resets: u64,
}

/// The GPU state of a device and the wait queue of its fences.
#[pin_data]
pub(crate) struct GpuState {
    #[pin]
    pub(crate) state: Mutex<Gpu>,
    #[pin]
    fences: CondVar,
}

impl GpuState {
    pub(crate) fn new() -> impl PinInit<Self> {
        pin_init!(GpuState {
            state <- new_mutex!(Gpu {
                last_hang: None,
                slots: KVec::new(),
                next_handle: 1,
                wedged: false,
                faults_log: KVec::new(),
                resets_log: KVec::new(),
                fences_signalled: 0,
                missed_fence_events: 0,
                early_fence_events: 0,
                duplicate_fence_events: 0,
                skipped_fence_events: 0,
                doorbells_rung_again: 0,
                fault_count: 0,
                hang_count: 0,
                engine_resets: 0,
                device_resets: 0,
            }),
            fences <- new_condvar!(),
        })
    }

    /// Wakes every fence waiter.
    pub(crate) fn wake(&self) {
        self.fences.notify_all();
    }
}

fn push_log<T>(log: &mut KVec<T>, v: T) {
    if log.len() >= LOG_LEN {
        let _ = log.remove(0);
    }
    let _ = log.push(v, GFP_KERNEL);
}

/// Reads an array of `n` `T`s of `size` bytes from user memory.
fn read_user_array(addr: u64, n: usize, size: usize) -> Result<KVec<u8>> {
    let len = n.checked_mul(size).ok_or(EINVAL)?;
    let mut buf = KVec::new();
    if len == 0 {
        return Ok(buf);
    }
    let ptr = UserPtr::from_addr(usize::try_from(addr).map_err(|_| EFAULT)?);
    UserSlice::new(ptr, len).read_all(&mut buf, GFP_KERNEL)?;
    Ok(buf)
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    b.get(off..off + 8)
        .and_then(|s| <[u8; 8]>::try_from(s).ok())
        .map_or(0, u64::from_le_bytes)
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    b.get(off..off + 4)
        .and_then(|s| <[u8; 4]>::try_from(s).ok())
        .map_or(0, u32::from_le_bytes)
}

fn lo(v: u64) -> u32 {
    v as u32
}

fn hi(v: u64) -> u32 {
    (v >> 32) as u32
}

/// Appends one packet (header for `generation`, then `payload`).
fn encode(words: &mut KVec<u32>, generation: u32, opcode: u8, payload: &[u32]) -> Result {
    let n = u32::try_from(payload.len() + 1).map_err(|_| EINVAL)?;
    words.push(encode_header(generation, opcode, n), GFP_KERNEL)?;
    for &w in payload {
        words.push(w, GFP_KERNEL)?;
    }
    Ok(())
}

/// A fence as userspace names it.
#[derive(Clone, Copy)]
struct FenceRef {
    handle: u32,
    engine: u32,
    seqno: u64,
}

fn parse_fences(b: &[u8], n: usize) -> KVec<FenceRef> {
    let mut v = KVec::new();
    for i in 0..n {
        let o = i * 16;
        let _ = v.push(
            FenceRef {
                handle: u32_at(b, o),
                engine: u32_at(b, o + 4),
                seqno: u64_at(b, o + 8),
            },
            GFP_KERNEL,
        );
    }
    v
}

impl Ctx {
    /// The `VGPU_CTX_STATE_*` bits of `CTX_QUERY` and `QUERY_STATS`.
    fn state_bits(&self) -> u32 {
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
}

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
}

impl Vgpu {
    fn slots(&self) -> Result<&SlotMemory> {
        self.slot_mem.as_ref().ok_or(ENODEV)
    }

    fn generation(&self) -> u32 {
        self.identity.as_ref().map_or(1, |i| i.generation)
    }

    /// Sends a control command. Fault handling sends commands from the
    /// event interrupt thread: with MSI-X the control queue has its own
    /// vector and thread; with a shared line the waiter finds its reply when
    /// its wait times out (`cmd_timeout_ms`), so faults are served slowly
    /// but correctly.
    fn cmd(&self, c: Command) -> Result<crate::control::Reply> {
        self.command(c)
    }

    fn find_ctx<'a>(g: &'a mut Gpu, client: &Arc<Client>, handle: u32) -> Result<(u32, &'a mut Ctx)> {
        for (i, s) in g.slots.iter_mut().enumerate() {
            if let Some(c) = s {
                if c.handle == handle && Arc::ptr_eq(&c.client, client) && !c.destroying {
                    return Ok((i as u32, c));
                }
            }
        }
        Err(ENOENT)
    }

    fn lock_gpu(&self) -> Result<MutexGuard<'_, Gpu>> {
        let g = self.gpu.state.lock();
        if g.slots.is_empty() {
            return Err(ENODEV);
        }
        Ok(g)
    }

    /// Sizes the slot table (probe).
    pub(crate) fn init_gpu(&self, n: u32) -> Result {
        let mut g = self.gpu.state.lock();
        for _ in 0..n {
            g.slots.push(None, GFP_KERNEL)?;
        }
        Ok(())
    }

    /// Where device slot `hw`'s memory is mapped in a client's address
    /// space (the KMD range above the user range).
    fn slot_va(client: &Client, hw: u32) -> u64 {
        let end = client.vm.lock().user_range().1;
        end + u64::from(hw) * SLOT_VA_STRIDE
    }

    /// `CTX_CREATE`.
    pub(crate) fn ctx_create(
        &self,
        client: &Arc<Client>,
        priority: u32,
        engine_mask: u32,
        flags: u32,
    ) -> Result<u32> {
        let id = self.identity.as_ref().ok_or(ENODEV)?;
        if flags & !uapi::VGPU_CTX_CREATE_FLAGS != 0
            || priority > uapi::VGPU_CTX_PRIORITY_REALTIME
            || engine_mask == 0
            || engine_mask & !id.engine_mask != 0
            || engine_mask >> ENGINES != 0
        {
            return Err(EINVAL);
        }
        self.check_usable()?;
        let slots = self.slots()?;
        let mut g = self.lock_gpu()?;
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
        let hw = g.slots.iter().position(Option::is_none).ok_or(ENOSPC)?;
        let hw = u32::try_from(hw).map_err(|_| ENOSPC)?;
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
        let hw_flags = if flags & uapi::VGPU_CTX_CREATE_REPLAYABLE != 0 {
            CTX_FLAG_REPLAYABLE_FAULTS
        } else {
            0
        };
        let r = self.hw_create(hw, priority, hw_flags, pt_root, engine_mask, kmd_va);
        if let Err(e) = r {
            self.unmap_slot(&mut g, client, hw, kmd_va);
            return Err(e);
        }
        let handle = g.next_handle;
        g.next_handle = g.next_handle.wrapping_add(1).max(1);
        let ctx = Ctx {
            client: client.clone(),
            handle,
            engine_mask,
            priority,
            flags: hw_flags,
            pt_root,
            kmd_va,
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
            rings: [RingSw::new(engine_mask & 1 != 0), RingSw::new(engine_mask & 2 != 0)],
            pid: crate::stats::current_tgid(),
            engine_error: 0,
        };
        if let Some(s) = g.slots.get_mut(hw as usize) {
            *s = Some(ctx);
        }
        Ok(handle)
    }

    /// `CONTEXT_CREATE` + `RING_CREATE`s on the device.
    fn hw_create(&self, hw: u32, priority: u32, flags: u32, pt_root: u64, mask: u32, kmd_va: u64) -> Result {
        self.cmd(Command::ContextCreate {
            ctx_id: hw,
            priority,
            flags,
            pt_root,
        })?;
        for e in 0..ENGINES as u32 {
            if mask & (1 << e) == 0 {
                continue;
            }
            let r = self.cmd(Command::RingCreate {
                ctx_id: hw,
                engine: e,
                size: RING_SIZE,
                ring_va: kmd_va + PAGE_4K + u64::from(e) * u64::from(RING_SIZE),
                status_va: kmd_va + u64::from(e) * 64,
            });
            if let Err(err) = r {
                let _ = self.cmd(Command::ContextDestroy {
                    ctx_id: hw,
                    flags: DESTROY_FLAG_FORCE,
                });
                return Err(err);
            }
        }
        Ok(())
    }

    /// Unmaps a slot's memory from its client and invalidates the client's
    /// other contexts' TLBs for it.
    fn unmap_slot(&self, g: &mut Gpu, client: &Arc<Client>, hw: u32, kmd_va: u64) {
        client.vm.lock().unmap_kmd(kmd_va, SLOT_BYTES as u64);
        self.invalidate_client(g, client, Some(hw), kmd_va, SLOT_BYTES as u64);
    }

    /// Invalidates `[va, va + size)` in every context of `client` but
    /// `skip`. Returns whether every invalidation succeeded.
    fn invalidate_client(&self, g: &mut Gpu, client: &Arc<Client>, skip: Option<u32>, va: u64, size: u64) -> bool {
        let mut ok = true;
        for (i, s) in g.slots.iter().enumerate() {
            let Some(c) = s else { continue };
            if !Arc::ptr_eq(&c.client, client) || Some(i as u32) == skip {
                continue;
            }
            if self
                .cmd(Command::TlbInvalidate {
                    ctx_id: i as u32,
                    engine_mask: 0,
                    va,
                    size,
                })
                .is_err()
            {
                ok = false;
            }
        }
        ok
    }

    /// TLB invalidation after `VM_UNBIND`; `false` if any failed (the
    /// caller keeps the pages).
    pub(crate) fn invalidate_after_unbind(&self, client: &Arc<Client>, va: u64, size: u64) -> bool {
        let mut g = self.gpu.state.lock();
        self.invalidate_client(&mut g, client, None, va, size)
    }

    /// `CTX_DESTROY`.
    pub(crate) fn ctx_destroy(&self, client: &Arc<Client>, handle: u32) -> Result {
        let mut g = self.lock_gpu()?;
        let (hw, ctx) = Self::find_ctx(&mut g, client, handle)?;
        ctx.destroying = true;
        drop(g);
        self.destroy_hw(hw)
    }

    /// Destroys device slot `hw` (already marked destroying): `BUSY` is
    /// retried with backoff, then forced. The slot is freed only when the
    /// device confirmed (or is gone); otherwise it stays reserved so that
    /// its memory and tables are never reused under a live context.
    fn destroy_hw(&self, hw: u32) -> Result {
        let mut result = Ok(());
        if self.check_usable().is_ok() {
            let mut delay = 5;
            let mut done = false;
            for _ in 0..DESTROY_RETRIES {
                match self.cmd(Command::ContextDestroy { ctx_id: hw, flags: 0 }) {
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
        let mut g = self.gpu.state.lock();
        let Some(slot) = g.slots.get_mut(hw as usize) else {
            return result;
        };
        if let Some(c) = slot.as_mut() {
            for r in c.rings.iter_mut() {
                // Destroyed, not failed: exported fences say cancelled.
                r.exported.clear();
                r.fail_pending();
            }
        }
        if gone {
            if let Some(c) = slot.take() {
                self.unmap_slot(&mut g, &c.client, hw, c.kmd_va);
            }
        } else {
            dev_err!(self.pdev, "context {} could not be destroyed: slot kept\n", hw);
        }
        drop(g);
        self.gpu.wake();
        result
    }

    /// Destroys every context of a closing file. Returns `false` if one
    /// could not be destroyed (the file's address space must then be kept).
    pub(crate) fn destroy_client(&self, client: &Arc<Client>) -> bool {
        let mut todo = KVec::new();
        {
            let mut g = self.gpu.state.lock();
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
        let mut ok = true;
        for hw in todo {
            let _ = self.destroy_hw(hw);
        }
        let g = self.gpu.state.lock();
        for c in g.slots.iter().flatten() {
            if Arc::ptr_eq(&c.client, client) {
                ok = false;
            }
        }
        ok
    }

    /// `CTX_QUERY`.
    pub(crate) fn ctx_query(&self, client: &Arc<Client>, handle: u32) -> Result<CtxQuery> {
        self.hang_check();
        self.refresh_query(client, handle);
        let mut g = self.lock_gpu()?;
        let (_, c) = Self::find_ctx(&mut g, client, handle)?;
        Ok(CtxQuery {
            reset_status: c.reset_status,
            state: c.state_bits(),
            fault_access: c.fault_access,
            fault_va: c.fault_va,
            fault_reason: c.fault_reason,
            hangs: c.hangs,
            faults: c.faults,
            engine_error: c.engine_error,
        })
    }

    /// Reads the device's view of a context (`CONTEXT_QUERY`): an errored
    /// context the events did not report (lost events) is marked.
    fn refresh_query(&self, client: &Arc<Client>, handle: u32) {
        let hw = {
            let mut g = self.gpu.state.lock();
            match Self::find_ctx(&mut g, client, handle) {
                Ok((hw, _)) => hw,
                Err(_) => return,
            }
        };
        let Ok(reply) = self.cmd(Command::ContextQuery { ctx_id: hw }) else {
            return;
        };
        let Ok(q) = reply.get::<ContextQueryReply>() else {
            return;
        };
        let mut g = self.gpu.state.lock();
        if let Ok((_, c)) = Self::find_ctx(&mut g, client, handle) {
            if q.state & crate::proto::ctx_state::ERRORED != 0 && !c.errored {
                c.errored = true;
                c.reset_status = uapi::VGPU_CTX_RESET_GUILTY;
                for r in c.rings.iter_mut() {
                    r.fail_pending();
                }
            }
        }
        if let Ok(slots) = self.slots() {
            Self::release_failed(&g, slots);
        }
    }

    /// `SUBMIT`.
    pub(crate) fn submit(&self, client: &Arc<Client>, a: &mut uapi::drm_vgpu_submit) -> Result {
        if a.pad != 0 || a.flags & !uapi::VGPU_SUBMIT_FLAGS != 0 {
            return Err(EINVAL);
        }
        if a.num_cmds == 0 || a.num_cmds > uapi::VGPU_SUBMIT_MAX_CMDS || a.num_in_fences > uapi::VGPU_SUBMIT_MAX_IN_FENCES {
            return Err(EINVAL);
        }
        let e = usize::try_from(a.engine).map_err(|_| EINVAL)?;
        if e >= ENGINES {
            return Err(EINVAL);
        }
        let ncmd = a.num_cmds as usize;
        let nin = a.num_in_fences as usize;
        let cmds = read_user_array(a.cmds, ncmd, 16)?;
        let fin = parse_fences(&read_user_array(a.in_fences, nin, 16)?, nin);
        self.check_usable()?;
        self.hang_check();
        let busy = if a.flags & uapi::VGPU_SUBMIT_BUSY_IS_EBUSY != 0 {
            EBUSY
        } else {
            EAGAIN
        };
        let slots = self.slots()?;
        let generation = self.generation();

        let mut g = self.lock_gpu()?;
        if g.wedged {
            return Err(EIO);
        }
        // Input fences: same file, existing ring, submitted seqno.
        let mut waits = KVec::new();
        for f in fin.iter() {
            let (fhw, fc) = Self::find_ctx(&mut g, client, f.handle)?;
            let fe = usize::try_from(f.engine).map_err(|_| EINVAL)?;
            let r = fc.rings.get(fe).filter(|r| r.present).ok_or(EINVAL)?;
            if f.seqno == 0 || f.seqno >= r.next_seqno {
                return Err(EINVAL);
            }
            if r.fence_state(f.seqno).is_none() && slots.fence_value(fhw, fe) < f.seqno {
                waits.push((fc.kmd_va + (FENCE_SLOT_OFFSET + 8 * fe) as u64, f.seqno), GFP_KERNEL)?;
            }
        }
        let (hw, c) = Self::find_ctx(&mut g, client, a.ctx_id)?;
        if c.errored || c.banned {
            return Err(EIO);
        }
        if !c.rings[e].present {
            return Err(EINVAL);
        }
        // Command buffers: inside one READ|EXEC mapping each.
        {
            let vm = client.vm.lock();
            for i in 0..ncmd {
                let va = u64_at(&cmds, i * 16);
                let size = u64_at(&cmds, i * 16 + 8);
                if size == 0 || size % 8 != 0 || va % 8 != 0 || size > u64::from(crate::packet::MAX_INDIRECT_SIZE) {
                    return Err(EINVAL);
                }
                let end = va.checked_add(size).ok_or(EINVAL)?;
                let m = vm.find(va).ok_or(EINVAL)?;
                if end > m.va + m.size || m.perms & (PTE_READ | PTE_EXEC) != (PTE_READ | PTE_EXEC) {
                    return Err(EINVAL);
                }
            }
        }
        let ring = &mut c.rings[e];
        let fresh = slots.fence_value(hw, e);
        ring.retire(fresh);
        if ring.jobs.len() >= uapi::VGPU_CTX_MAX_PENDING as usize {
            return Err(busy);
        }
        // Packets.
        let seqno = ring.next_seqno;
        let nwords = waits.len() * SEM_WAIT_WORDS + ncmd * INDIRECT_WORDS + FENCE_WORDS;
        let mut words = KVec::with_capacity(nwords, GFP_KERNEL)?;
        for &(va, value) in waits.iter() {
            encode(&mut words, generation, OP_SEM_WAIT, &[lo(va), hi(va), lo(value), hi(value), SEM_WAIT_GEQ])?;
        }
        for i in 0..ncmd {
            let va = u64_at(&cmds, i * 16);
            let size = u32::try_from(u64_at(&cmds, i * 16 + 8)).map_err(|_| EINVAL)?;
            encode(&mut words, generation, OP_INDIRECT, &[lo(va), hi(va), size])?;
        }
        let fence_va = c.kmd_va + (FENCE_SLOT_OFFSET + 8 * e) as u64;
        encode(&mut words, generation, OP_FENCE, &[lo(fence_va), hi(fence_va), lo(seqno), hi(seqno), 0])?;
        let bytes = u32::try_from(words.len() * 4).map_err(|_| EINVAL)?;
        let rptr = slots.status(hw, e).rptr;
        let used = ring.wptr.wrapping_sub(rptr);
        if used > RING_SIZE || RING_SIZE - used < bytes {
            return Err(busy);
        }
        if ring.jobs.is_empty() {
            ring.progress_at = Instant::now();
        }
        let wptr = Self::write_ring(slots, hw, e, ring.wptr, &words);
        ring.jobs.push(Job { seqno, words }, GFP_KERNEL)?;
        ring.next_seqno += 1;
        ring.wptr = wptr;
        // Posted: the submitter does not wait for the device to take it; a
        // doorbell the device refuses is rung again by the hang check.
        let r = self.post_doorbell(hw, a.engine, wptr);
        if let Err(err) = r {
            // The device state is unknown: the job is treated as lost.
            if let Some(c) = g.slots.get_mut(hw as usize).and_then(Option::as_mut) {
                c.rings[e].fail_pending();
            }
            return Err(err);
        }
        a.seqno = seqno;
        Ok(())
    }

    /// Copies packet words into ring `e` of slot `hw` at `wptr`; returns the
    /// new write pointer.
    fn write_ring(slots: &SlotMemory, hw: u32, e: usize, wptr: u32, words: &[u32]) -> u32 {
        let base = (4096 + e * RING_SIZE as usize) / 4;
        let mut w = wptr;
        for &x in words {
            let off = (w % RING_SIZE) as usize / 4;
            slots.write_u32(hw, base + off, x);
            w = w.wrapping_add(4);
        }
        w
    }

    /// Cancels every exported fence (device going away): sync_file users
    /// see `-ECANCELED` rather than waiting for the files to close.
    pub(crate) fn cancel_exported(&self) {
        let mut g = self.gpu.state.lock();
        for c in g.slots.iter_mut().flatten() {
            for r in c.rings.iter_mut() {
                r.exported.clear();
            }
        }
    }

    /// `FENCE_EXPORT`: a sync_file fd for a fence of one of the file's
    /// contexts.
    pub(crate) fn fence_export(&self, client: &Arc<Client>, a: &mut uapi::drm_vgpu_fence_export) -> Result {
        if a.flags != 0 {
            return Err(EINVAL);
        }
        let slots = self.slots()?;
        let mut g = self.lock_gpu()?;
        let (hw, c) = Self::find_ctx(&mut g, client, a.fence.ctx_id)?;
        let e = a.fence.engine as usize;
        let r = c.rings.get_mut(e).filter(|r| r.present).ok_or(EINVAL)?;
        let seqno = a.fence.seqno;
        if seqno == 0 || seqno >= r.next_seqno {
            return Err(EINVAL);
        }
        r.retire(slots.fence_value(hw, e));
        if r.fence_ctx == 0 {
            r.fence_ctx = crate::fence::new_context();
        }
        let mut f = ExportedFence::new(r.fence_ctx, seqno)?;
        match r.fence_state(seqno) {
            Some(Ok(())) => f.signal(0),
            Some(Err(_)) => f.signal(-(bindings::EIO as i32)),
            None => {}
        }
        if !f.is_signalled() {
            r.exported.reserve(1, GFP_KERNEL)?;
        }
        a.fd = f.export_fd()?;
        if !f.is_signalled() {
            // Room was reserved above: this push does not fail.
            let _ = r.exported.push(f, GFP_KERNEL);
        }
        Ok(())
    }

    /// `WAIT`.
    pub(crate) fn wait(&self, client: &Arc<Client>, a: &mut uapi::drm_vgpu_wait) -> Result {
        if a.pad != 0 || a.flags & !uapi::VGPU_WAIT_FLAGS != 0 {
            return Err(EINVAL);
        }
        if a.num_fences == 0 || a.num_fences > uapi::VGPU_WAIT_MAX_FENCES {
            return Err(EINVAL);
        }
        let n = a.num_fences as usize;
        let fences = parse_fences(&read_user_array(a.fences, n, 16)?, n);
        let all = a.flags & uapi::VGPU_WAIT_ALL != 0;
        let start = Instant::<Monotonic>::now();
        let slots = self.slots()?;
        let step_ns = u64::from(crate::param_job_timeout_ms()) * 250_000;
        let mut g = self.lock_gpu()?;
        loop {
            let mut done = 0;
            let mut failed = false;
            let mut first = None;
            for (i, f) in fences.iter().enumerate() {
                let (hw, c) = Self::find_ctx(&mut g, client, f.handle)?;
                let e = usize::try_from(f.engine).map_err(|_| EINVAL)?;
                let r = c.rings.get_mut(e).filter(|r| r.present).ok_or(EINVAL)?;
                if f.seqno == 0 || f.seqno >= r.next_seqno {
                    return Err(EINVAL);
                }
                r.retire(slots.fence_value(hw, e));
                match r.fence_state(f.seqno) {
                    Some(Ok(())) => {
                        done += 1;
                        first.get_or_insert(i);
                    }
                    Some(Err(_)) => {
                        done += 1;
                        failed = true;
                        first.get_or_insert(i);
                    }
                    None => {}
                }
            }
            if (all && done == n) || (!all && done > 0) {
                a.first_signaled = first.unwrap_or(0) as u32;
                return if failed { Err(EIO) } else { Ok(()) };
            }
            if g.wedged {
                return Err(EIO);
            }
            self.check_usable()?;
            let spent = elapsed_ns(&start);
            if spent >= a.timeout_ns {
                return Err(crate::errno::etime());
            }
            let sleep = (a.timeout_ns - spent).min(step_ns.max(1_000_000));
            let res = self
                .gpu
                .fences
                .wait_interruptible_timeout(&mut g, ns_to_jiffies(sleep));
            if let CondVarTimeoutResult::Signal { .. } = res {
                return Err(ERESTARTSYS);
            }
            if let CondVarTimeoutResult::Timeout = res {
                drop(g);
                self.hang_check();
                g = self.lock_gpu()?;
            }
        }
    }

    /// Handles a GPU event (interrupt thread, no lock held): fences,
    /// faults, engine errors, and lost events (which may have been fences).
    pub(crate) fn gpu_event(&self, ev: Event) {
        match ev {
            Event::Fence { ctx_id, engine, seqno, va } => self.on_fence_event(ctx_id, engine, seqno, va),
            Event::Fault { va, info, fault_id, .. } => self.on_fault(va, info, fault_id),
            Event::EngineError { ctx_id, engine, code, .. } => {
                let name = EngineError::from_u32(code).map_or("?", |c| c.name());
                dev_warn!(self.pdev, "engine {} stopped context {}: {}\n", engine, ctx_id, name);
                let mut g = self.gpu.state.lock();
                if let Some(c) = g.slots.get_mut(ctx_id as usize).and_then(Option::as_mut) {
                    c.errored = true;
                    c.reset_status = uapi::VGPU_CTX_RESET_GUILTY;
                    if c.engine_error == 0 {
                        c.engine_error = code;
                    }
                    if let Some(r) = c.rings.get_mut(engine as usize) {
                        r.fail_pending();
                    }
                }
                if let Ok(slots) = self.slots() {
                    Self::release_failed(&g, slots);
                }
                drop(g);
                self.gpu.wake();
            }
            // Lost records may have been fences: waiters re-read the fence
            // values now rather than at their next periodic check.
            Event::EventsLost { .. } => self.gpu.wake(),
            // Recovery reads the reset results from the command replies.
            Event::ResetDone { .. } => {}
            // Kinds this driver does not act on: counted (debugfs
            // `status`, "unhandled").
            _ => self.events.count_unhandled(),
        }
    }

    /// A `FENCE` event. Only the KMD's own fence slot of the ring counts
    /// (fences a command buffer writes elsewhere, with an event, just wake
    /// waiters). The value in memory is the truth — the device writes it
    /// before posting the event — and the event a wake-up: an event ahead
    /// of memory is not believed, a repeated one is counted, and a jump over
    /// seqnos the driver did not discard means their events were lost or
    /// their fences never written.
    fn on_fence_event(&self, ctx_id: u32, engine: u32, seqno: u64, va: u64) {
        enum Verdict {
            New,
            Early(u64),
            Duplicate,
            Skipped(u64, u64),
        }
        let Ok(slots) = self.slots() else { return };
        let e = engine as usize;
        let mut g = self.gpu.state.lock();
        let Some(c) = g.slots.get_mut(ctx_id as usize).and_then(Option::as_mut) else {
            drop(g);
            self.gpu.wake();
            return;
        };
        let own = c.kmd_va + (FENCE_SLOT_OFFSET + 8 * e) as u64;
        let Some(r) = c.rings.get_mut(e).filter(|r| r.present && va == own) else {
            drop(g);
            self.gpu.wake();
            return;
        };
        let mem = slots.fence_value(ctx_id, e);
        let verdict = if seqno > mem {
            Verdict::Early(mem)
        } else if seqno <= r.evt_seqno {
            Verdict::Duplicate
        } else {
            let expected = r.evt_seqno.max(r.done_upto) + 1;
            r.evt_seqno = seqno;
            if seqno > expected {
                Verdict::Skipped(expected, seqno - 1)
            } else {
                Verdict::New
            }
        };
        r.retire(seqno.min(mem));
        match verdict {
            Verdict::New => g.fences_signalled += 1,
            Verdict::Early(_) => g.early_fence_events += 1,
            Verdict::Duplicate => g.duplicate_fence_events += 1,
            Verdict::Skipped(a, b) => {
                g.fences_signalled += 1;
                g.skipped_fence_events += b - a + 1;
            }
        }
        let duplicates = g.duplicate_fence_events;
        drop(g);
        match verdict {
            Verdict::New => {}
            Verdict::Early(mem) => dev_warn!(
                self.pdev,
                "FENCE event context {} engine {} seqno {} ahead of the fence value in memory: not believed (memory {})\n",
                ctx_id,
                engine,
                seqno,
                mem
            ),
            Verdict::Duplicate => {
                if duplicates <= 10 || duplicates.is_power_of_two() {
                    dev_info!(
                        self.pdev,
                        "duplicate FENCE event: context {} engine {} seqno {} ({} so far)\n",
                        ctx_id,
                        engine,
                        seqno,
                        duplicates
                    );
                }
            }
            Verdict::Skipped(a, b) => dev_warn!(
                self.pdev,
                "FENCE events skipped: context {} engine {} seqno {}..={} never announced (interrupts lost or fences not written); seqno {} covers them\n",
                ctx_id,
                engine,
                a,
                b,
                seqno
            ),
        }
        self.gpu.wake();
    }

    /// A `FAULT` event: serve a replayable fault on a lazy mapping, abort
    /// anything else.
    fn on_fault(&self, va: u64, info: FaultInfo, fault_id: u64) {
        let hw = u32::from(info.ctx_id);
        let access = Access::from_u8(info.access).map_or("?", |a| a.name());
        let reason = FaultReason::from_u8(info.reason);
        let replayable = info.flags & FAULT_FLAG_REPLAYABLE != 0;
        let mut g = self.gpu.state.lock();
        g.fault_count += 1;
        let Some(c) = g.slots.get_mut(hw as usize).and_then(Option::as_mut) else {
            drop(g);
            dev_warn!(self.pdev, "fault of unknown context {} at {:#x}\n", hw, va);
            if replayable {
                let _ = self.cmd(Command::FaultResume { ctx_id: hw, action: FAULT_RESUME_ABORT, fault_id });
            }
            return;
        };
        c.faults = c.faults.saturating_add(1);
        let mut served = false;
        if replayable && reason == Some(FaultReason::NotPresent) {
            let page = c.client.vm.lock().fault_in(va);
            if let Ok(page) = page {
                served = self
                    .cmd(Command::TlbInvalidate { ctx_id: hw, engine_mask: 0, va: page, size: PAGE_4K })
                    .is_ok()
                    && self
                        .cmd(Command::FaultResume { ctx_id: hw, action: FAULT_RESUME_RETRY, fault_id })
                        .is_ok();
            }
        }
        dev_info!(
            self.pdev,
            "GPU fault: context {} engine {} va {:#x} access {} reason {} level {}: {}\n",
            hw,
            info.engine,
            va,
            access,
            reason.map_or("?", |r| r.name()),
            info.level,
            if served { "mapped lazily, retrying" } else { "job aborted, context errored" }
        );
        if !served {
            if replayable {
                let _ = self.cmd(Command::FaultResume { ctx_id: hw, action: FAULT_RESUME_ABORT, fault_id });
            }
            if let Some(c) = g.slots.get_mut(hw as usize).and_then(Option::as_mut) {
                c.errored = true;
                c.reset_status = uapi::VGPU_CTX_RESET_GUILTY;
                if c.fault_access == 0 {
                    c.fault_va = va;
                    c.fault_access = u32::from(info.access);
                    c.fault_reason = u32::from(info.reason);
                }
                if let Some(r) = c.rings.get_mut(usize::from(info.engine)) {
                    r.fail_pending();
                }
            }
        }
        push_log(
            &mut g.faults_log,
            FaultLog { hw, engine: info.engine, va, access: info.access, reason: info.reason, served },
        );
        if let Ok(slots) = self.slots() {
            Self::release_failed(&g, slots);
        }
        drop(g);
        self.gpu.wake();
    }

    /// Moves the fence value of every ring past its discarded jobs, so that
    /// jobs of other contexts waiting on them (`SEM_WAIT` for an input
    /// fence) are released instead of hanging. `WAIT` still reports the
    /// discarded fences as failed.
    fn release_failed(g: &Gpu, slots: &SlotMemory) {
        for (hw, s) in g.slots.iter().enumerate() {
            let Some(c) = s else { continue };
            for (e, r) in c.rings.iter().enumerate() {
                if r.present && r.done_upto > slots.fence_value(hw as u32, e) {
                    slots.write_u64(hw as u32, FENCE_SLOT_OFFSET + 8 * e, r.done_upto);
                }
            }
        }
    }

    /// Looks for a hung ring and recovers from it.
    pub(crate) fn hang_check(&self) {
        let timeout_ns = u64::from(crate::param_job_timeout_ms()) * 1_000_000;
        let Ok(slots) = self.slots() else { return };
        let refused = self.take_failed_doorbells();
        let mut g = self.gpu.state.lock();
        if g.wedged || self.check_usable().is_err() {
            return;
        }
        // Doorbells the device refused (posted, so nobody saw the error):
        // ring them again at the ring's current write pointer.
        for p in refused.iter() {
            let Some(r) = g
                .slots
                .get(p.ctx_id as usize)
                .and_then(Option::as_ref)
                .and_then(|c| c.rings.get(p.engine as usize))
                .filter(|r| r.present && !r.jobs.is_empty())
            else {
                dev_info!(
                    self.pdev,
                    "the device refused a doorbell of context {} engine {}: no job left behind it\n",
                    p.ctx_id,
                    p.engine
                );
                continue;
            };
            let wptr = r.wptr;
            dev_info!(
                self.pdev,
                "the device refused a doorbell of context {} engine {}: ringing it again at {:#x}\n",
                p.ctx_id,
                p.engine,
                wptr
            );
            g.doorbells_rung_again += 1;
            // Posted again: refused again, it comes back at the next check.
            if let Err(e) = self.post_doorbell(p.ctx_id, p.engine, wptr) {
                dev_warn!(
                    self.pdev,
                    "doorbell of context {} engine {} could not be rung again: error {}\n",
                    p.ctx_id,
                    p.engine,
                    e.to_errno()
                );
            }
        }
        let mut missed = KVec::new();
        let mut hung = None;
        for (i, s) in g.slots.iter_mut().enumerate() {
            let Some(c) = s else { continue };
            if c.destroying {
                continue;
            }
            for (e, r) in c.rings.iter_mut().enumerate() {
                if !r.present {
                    continue;
                }
                let mem = slots.fence_value(i as u32, e);
                // A fence value ahead of the events (and of what the KMD
                // itself wrote for discarded jobs) over two checks: the
                // device wrote the fence but its interrupt never came.
                let announced = r.evt_seqno.max(r.done_upto);
                if mem > announced {
                    if r.ahead_of_events == 0 || announced >= r.ahead_of_events {
                        r.ahead_of_events = mem;
                        r.ahead_since = Instant::now();
                    } else if elapsed_ns(&r.ahead_since) >= MISSED_EVENT_NS {
                        let _ = missed.push((i as u32, e, announced, mem), GFP_KERNEL);
                        r.evt_seqno = mem;
                        r.ahead_of_events = 0;
                    }
                } else {
                    r.ahead_of_events = 0;
                }
                r.retire(mem);
                if r.jobs.is_empty() {
                    continue;
                }
                let st = slots.status(i as u32, e);
                if st.state == ring_state::FAULT_STALLED {
                    continue;
                }
                if elapsed_ns(&r.progress_at) > timeout_ns && hung.is_none() {
                    hung = Some((i as u32, e));
                }
            }
        }
        g.missed_fence_events += missed.len() as u64;
        if let Some((hw, e)) = hung {
            self.recover(&mut g, slots, hw, e);
            Self::release_failed(&g, slots);
        }
        drop(g);
        for &(hw, e, announced, mem) in missed.iter() {
            dev_warn!(
                self.pdev,
                "missed fence interrupt: context {} engine {} fence value {} written, events announced {}\n",
                hw,
                e,
                mem,
                announced
            );
        }
        if hung.is_some() || !missed.is_empty() {
            self.gpu.wake();
        }
    }

    /// debugfs `reset_device`: the ladder's device reset with no guilty
    /// context. `EIO` if it failed (the device is then wedged).
    pub(crate) fn reset_device_now(&self) -> Result {
        let slots = self.slots()?;
        self.check_usable()?;
        let start = Instant::<Monotonic>::now();
        let mut g = self.gpu.state.lock();
        if g.wedged {
            return Err(EIO);
        }
        dev_warn!(self.pdev, "device reset requested through debugfs\n");
        g.device_resets += 1;
        let ok = self.device_reset(&mut g, slots, CTX_NONE);
        push_log(
            &mut g.resets_log,
            ResetLog { hw: CTX_NONE, engine: engine::ALL, kind: "device", ok, ms: elapsed_ns(&start) / 1_000_000 },
        );
        if !ok {
            self.wedge(&mut g);
        }
        Self::release_failed(&g, slots);
        drop(g);
        self.gpu.wake();
        if ok {
            Ok(())
        } else {
            Err(EIO)
        }
    }

    /// Captures ring `e` of slot `hw` for debugfs `hang_dump`.
    fn capture(&self, g: &mut Gpu, slots: &SlotMemory, hw: u32, e: usize) {
        let status = slots.status(hw, e);
        let hw_state = self
            .cmd(Command::ContextQuery { ctx_id: hw })
            .and_then(|r| r.get::<ContextQueryReply>())
            .ok()
            .map(|q| q.state);
        let Some(c) = g.slots.get(hw as usize).and_then(Option::as_ref) else { return };
        let r = &c.rings[e];
        let from = status.rptr.wrapping_sub(8 * 4) % RING_SIZE;
        let base = (4096 + e * RING_SIZE as usize) / 4;
        let mut words = [0u32; DUMP_WORDS];
        for (i, w) in words.iter_mut().enumerate() {
            let off = (from as usize / 4 + i) % (RING_SIZE as usize / 4);
            *w = slots.read_u32(hw, base + off);
        }
        let dump = HangDump {
            hw,
            engine: e,
            handle: c.handle,
            client: c.client.id,
            pt_root: c.pt_root,
            status,
            wptr: r.wptr,
            completed: r.completed,
            next_seqno: r.next_seqno,
            pending: r.jobs.len(),
            from,
            words,
            hw_state,
            stalled_ns: elapsed_ns(&r.progress_at),
        };
        if let Ok(b) = KBox::new(dump, GFP_KERNEL) {
            g.last_hang = Some(b);
        }
    }

    /// debugfs `hang_dump`: the last hang, as captured when detected.
    pub(crate) fn show_hang(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let g = self.gpu.state.lock();
        let Some(d) = g.last_hang.as_ref() else {
            return writeln!(f, "no hang");
        };
        writeln!(
            f,
            "hang ctx {} (client {} handle {}) engine {} pt_root {:#x} stalled {} ms",
            d.hw,
            d.client,
            d.handle,
            d.engine,
            d.pt_root,
            d.stalled_ns / 1_000_000
        )?;
        writeln!(
            f,
            "ring rptr {:#x} wptr {:#x} state {} error {} error_rptr {:#x} last_fence {} packets {}",
            d.status.rptr, d.wptr, d.status.state, d.status.error, d.status.error_rptr, d.status.last_fence, d.status.packets
        )?;
        writeln!(
            f,
            "fences completed {} next {} pending {} device_state {}",
            d.completed,
            d.next_seqno,
            d.pending,
            d.hw_state.map_or(-1, i64::from)
        )?;
        for (i, chunk) in d.words.chunks(4).enumerate() {
            let off = (d.from + (i * 16) as u32) % RING_SIZE;
            write!(f, "{:05x}:", off)?;
            for w in chunk {
                write!(f, " {:08x}", w)?;
            }
            let at = d.status.rptr % RING_SIZE;
            if (off..off + 16).contains(&at) {
                write!(f, "  <- rptr")?;
            }
            writeln!(f)?;
        }
        Ok(())
    }

    /// The reset ladder for hung ring `e` of slot `hw`.
    fn recover(&self, g: &mut Gpu, slots: &SlotMemory, hw: u32, e: usize) {
        let start = Instant::<Monotonic>::now();
        g.hang_count += 1;
        self.capture(g, slots, hw, e);
        let st = slots.status(hw, e);
        dev_warn!(
            self.pdev,
            "hang: context {} engine {} (rptr {:#x}, state {}, last fence {}): resetting the engine\n",
            hw,
            e,
            st.rptr,
            st.state,
            st.last_fence
        );
        // Guilty.
        if let Some(c) = g.slots.get_mut(hw as usize).and_then(Option::as_mut) {
            c.hangs += 1;
            c.reset_status = uapi::VGPU_CTX_RESET_GUILTY;
            // Banned after `ban_hangs` hangs within `ban_window_ms`.
            let window_ns = u64::from(crate::param_ban_window_ms()) * 1_000_000;
            let limit = crate::param_ban_hangs() as usize;
            c.hang_times.retain(|t| elapsed_ns(t) <= window_ns);
            if c.hang_times.len() >= limit {
                let _ = c.hang_times.remove(0);
            }
            let _ = c.hang_times.push(Instant::now(), GFP_KERNEL);
            if c.hang_times.len() >= limit {
                c.banned = true;
                dev_warn!(
                    self.pdev,
                    "context {} banned: {} hangs within {} ms\n",
                    hw,
                    c.hang_times.len(),
                    window_ns / 1_000_000
                );
            }
        }
        // 1. Engine reset.
        let reply = self
            .cmd(Command::EngineReset {
                engine: e as u32,
                hung_ctx: hw,
            })
            .and_then(|r| r.get::<EngineResetReply>());
        g.engine_resets += 1;
        // An engine reset that names the hung context clears its ring on
        // that engine whatever the ring's state, so success means drained.
        // (The context's other rings may legitimately be busy or waiting —
        // e.g. a copy ring in SEM_WAIT on the hung compute job's fence,
        // which `release_failed` lets go.)
        let drained = reply.is_ok();
        if let Ok(r) = &reply {
            if let Some(c) = g.slots.get_mut(hw as usize).and_then(Option::as_mut) {
                c.rings[e].fail_pending();
            }
            // An innocent context that lost its job in flight: write its
            // unfinished jobs again.
            if r.ctx_id != CTX_NONE && r.ctx_id != hw {
                let _ = self.resubmit(g, slots, r.ctx_id, e, true);
            }
        }
        push_log(
            &mut g.resets_log,
            ResetLog { hw, engine: e as u32, kind: "engine", ok: drained, ms: elapsed_ns(&start) / 1_000_000 },
        );
        if drained {
            return;
        }
        // 2. Device reset.
        dev_warn!(self.pdev, "engine reset did not recover context {}: resetting the device\n", hw);
        g.device_resets += 1;
        let ok = self.device_reset(g, slots, hw);
        push_log(
            &mut g.resets_log,
            ResetLog { hw, engine: engine::ALL, kind: "device", ok, ms: elapsed_ns(&start) / 1_000_000 },
        );
        if !ok {
            self.wedge(g);
        }
    }

    /// Writes ring `e` of slot `hw`'s unfinished jobs again at its write
    /// pointer and rings the doorbell.
    fn resubmit(&self, g: &mut Gpu, slots: &SlotMemory, hw: u32, e: usize, innocent: bool) -> Result {
        let Some(c) = g.slots.get_mut(hw as usize).and_then(Option::as_mut) else {
            return Ok(());
        };
        if innocent && !c.rings[e].jobs.is_empty() && c.reset_status == uapi::VGPU_CTX_RESET_NONE {
            c.reset_status = uapi::VGPU_CTX_RESET_INNOCENT;
        }
        let r = &mut c.rings[e];
        if r.jobs.is_empty() {
            return Ok(());
        }
        let mut w = r.wptr;
        for j in r.jobs.iter() {
            w = Self::write_ring(slots, hw, e, w, &j.words);
        }
        r.wptr = w;
        r.progress_at = Instant::now();
        self.cmd(Command::Doorbell { ctx_id: hw, engine: e as u32, wptr: w }).map(|_| ())
    }

    /// `DEVICE_RESET` and re-creation of every context; `guilty`'s jobs
    /// are discarded, the others' written again.
    fn device_reset(&self, g: &mut Gpu, slots: &SlotMemory, guilty: u32) -> bool {
        self.events.expect_restart();
        if self.cmd(Command::DeviceReset).is_err() {
            return false;
        }
        for hw in 0..g.slots.len() as u32 {
            let Some(c) = g.slots.get_mut(hw as usize).and_then(Option::as_mut) else { continue };
            let args = (c.priority, c.flags, c.pt_root, c.engine_mask, c.kmd_va);
            for r in c.rings.iter_mut() {
                if hw == guilty {
                    r.fail_pending();
                }
                // A new device ring starts at 0.
                r.wptr = 0;
            }
            for e in 0..ENGINES {
                slots.write_u32(hw, e * 16, 0);
            }
            if self.hw_create(hw, args.0, args.1, args.2, args.3, args.4).is_err() {
                return false;
            }
            for e in 0..ENGINES {
                if self.resubmit(g, slots, hw, e, hw != guilty).is_err() {
                    return false;
                }
            }
        }
        true
    }

    /// The device cannot be recovered.
    fn wedge(&self, g: &mut Gpu) {
        g.wedged = true;
        for c in g.slots.iter_mut().flatten() {
            for r in c.rings.iter_mut() {
                r.fail_pending();
            }
        }
        dev_err!(self.pdev, "device wedged: recovery failed; rebind the driver\n");
        // DRM's convention: a KOBJ_CHANGE uevent with WEDGED=<recovery> on
        // the DRM device nodes, which are children of the PCI device.
        let dev: &kernel::device::Device = self.pdev.as_ref();
        // `Device` is a transparent wrapper of `struct device`.
        let raw = core::ptr::from_ref(dev).cast::<bindings::device>().cast_mut();
        // SAFETY: `raw` is the PCI device's `struct device`, alive while
        // `self.pdev` is; `device_for_each_child` holds the children while
        // it calls `wedged_uevent`, which takes no data.
        unsafe { bindings::device_for_each_child(raw, core::ptr::null_mut(), Some(wedged_uevent)) };
    }

    /// debugfs `contexts`: every context, its rings and fences, and the
    /// fault and reset logs.
    pub(crate) fn show_gpu(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Ok(slots) = self.slots() else { return Ok(()) };
        // Before the state lock: stopping the watchdog waits for a hang
        // check, which takes the state lock.
        let watchdog = self.watchdog_counts();
        let g = self.gpu.state.lock();
        writeln!(
            f,
            "wedged {} fences_signalled {} faults {} hangs {} engine_resets {} device_resets {} missed_fence_events {} early_fence_events {} duplicate_fence_events {} skipped_fence_events {} doorbells_rung_again {}",
            u8::from(g.wedged),
            g.fences_signalled,
            g.fault_count,
            g.hang_count,
            g.engine_resets,
            g.device_resets,
            g.missed_fence_events,
            g.early_fence_events,
            g.duplicate_fence_events,
            g.skipped_fence_events,
            g.doorbells_rung_again
        )?;
        if let Some((ticks, checks, period)) = watchdog {
            writeln!(f, "watchdog period_ms {} ticks {} checks {}", period, ticks, checks)?;
        }
        for (i, s) in g.slots.iter().enumerate() {
            let Some(c) = s else { continue };
            writeln!(
                f,
                "ctx {} client {} handle {} prio {} flags {:#x} root {:#x} errored {} banned {} reset {} hangs {} faults {} fault_va {:#x} fault_access {}",
                i, c.client.id, c.handle, c.priority, c.flags, c.pt_root, u8::from(c.errored), u8::from(c.banned),
                c.reset_status, c.hangs, c.faults, c.fault_va, c.fault_access
            )?;
            for (e, r) in c.rings.iter().enumerate() {
                if !r.present {
                    continue;
                }
                let st = slots.status(i as u32, e);
                writeln!(
                    f,
                    "  ring {} wptr {:#x} rptr {:#x} state {} error {} last_fence {} fence_slot {} completed {} next_seqno {} pending {}",
                    e, r.wptr, st.rptr, st.state, st.error, st.last_fence, slots.fence_value(i as u32, e),
                    r.completed, r.next_seqno, r.jobs.len()
                )?;
            }
        }
        for l in g.faults_log.iter() {
            writeln!(
                f,
                "fault ctx {} engine {} va {:#x} access {} reason {} {}",
                l.hw,
                l.engine,
                l.va,
                Access::from_u8(l.access).map_or("?", |a| a.name()),
                FaultReason::from_u8(l.reason).map_or("?", |r| r.name()),
                if l.served { "served" } else { "aborted" }
            )?;
        }
        for l in g.resets_log.iter() {
            writeln!(f, "reset {} ctx {} engine {:#x} {} in {} ms", l.kind, l.hw, l.engine, if l.ok { "ok" } else { "failed" }, l.ms)?;
        }
        Ok(())
    }

    /// Contexts alive (for leak checks).
    pub(crate) fn context_count(&self) -> usize {
        self.gpu.state.lock().slots.iter().flatten().count()
    }
}

// Every slot's memory fits the KMD range of an address space.
const _: () = assert!(SLOT_VA_STRIDE * crate::proto::MAX_CONTEXTS as u64 <= vm::VA_KMD_RESERVED);
const _: () = assert!(SLOT_BYTES as u64 <= SLOT_VA_STRIDE);

/// Sends `WEDGED=rebind` on a DRM device node (`card*`, `renderD*`).
///
/// # Safety
///
/// `dev` is a live `struct device` (as `device_for_each_child` passes).
unsafe extern "C" fn wedged_uevent(dev: *mut bindings::device, _data: *mut kernel::ffi::c_void) -> kernel::ffi::c_int {
    // SAFETY: the caller passes a live device; its kobject name is a
    // NUL-terminated string or NULL.
    let name = unsafe { (*dev).kobj.name };
    if name.is_null() {
        return 0;
    }
    // SAFETY: `name` is non-NULL and NUL-terminated (see above).
    let name = unsafe { kernel::str::CStr::from_char_ptr(name) };
    let n = name.to_bytes();
    if n.starts_with(b"card") || n.starts_with(b"renderD") {
        let mut env: [*mut kernel::ffi::c_char; 2] = [c"WEDGED=rebind".as_char_ptr().cast_mut(), core::ptr::null_mut()];
        // SAFETY: `dev` is live (see above); `env` is a NULL-terminated
        // array of C strings that outlives the call (the kernel copies them).
        unsafe { bindings::kobject_uevent_env(&raw mut (*dev).kobj, bindings::kobject_action_KOBJ_CHANGE, env.as_mut_ptr()) };
    }
    0
}

/// A context as `QUERY_STATS` and debugfs `stats` list it ([`crate::stats`]).
pub(crate) struct CtxSnapshot {
    /// Device slot.
    pub(crate) hw: u32,
    /// The id `CTX_CREATE` returned.
    pub(crate) handle: u32,
    pub(crate) client: Arc<Client>,
    pub(crate) pid: u32,
    pub(crate) priority: u32,
    pub(crate) engines: u32,
    pub(crate) reset_status: u32,
    pub(crate) state: u32,
    pub(crate) hangs: u32,
    pub(crate) faults: u32,
    pub(crate) engine_error: u32,
    /// Last seqno submitted per engine (0: none).
    pub(crate) submitted: [u64; ENGINES],
    /// Last seqno signalled per engine.
    pub(crate) completed: [u64; ENGINES],
}

/// The KMD's device-wide counters.
pub(crate) struct KmdCounters {
    pub(crate) engine_resets: u64,
    pub(crate) device_resets: u64,
    pub(crate) hangs: u64,
    pub(crate) faults: u64,
    pub(crate) wedged: bool,
}

impl Vgpu {
    /// Every context of every file (appended to `out`, by device slot) and
    /// the KMD's counters, read under the GPU lock.
    pub(crate) fn stats_snapshot(&self, out: &mut KVec<CtxSnapshot>) -> Result<KmdCounters> {
        let slots = self.slots().ok();
        let g = self.gpu.state.lock();
        for (i, s) in g.slots.iter().enumerate() {
            let Some(c) = s else { continue };
            if c.destroying {
                continue;
            }
            let state = c.state_bits();
            let mut submitted = [0; ENGINES];
            let mut completed = [0; ENGINES];
            for (e, r) in c.rings.iter().enumerate() {
                if !r.present {
                    continue;
                }
                let fence = slots.map_or(0, |m| m.fence_value(i as u32, e));
                submitted[e] = r.next_seqno - 1;
                completed[e] = r.completed.max(fence.min(submitted[e]));
            }
            out.push(
                CtxSnapshot {
                    hw: i as u32,
                    handle: c.handle,
                    client: c.client.clone(),
                    pid: c.pid,
                    priority: c.priority,
                    engines: c.engine_mask,
                    reset_status: c.reset_status,
                    state,
                    hangs: c.hangs,
                    faults: c.faults,
                    engine_error: c.engine_error,
                    submitted,
                    completed,
                },
                GFP_KERNEL,
            )?;
        }
        Ok(KmdCounters {
            engine_resets: g.engine_resets,
            device_resets: g.device_resets,
            hangs: g.hang_count,
            faults: g.fault_count,
            wedged: g.wedged,
        })
    }
}
