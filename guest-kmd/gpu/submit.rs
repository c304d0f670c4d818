// SPDX-License-Identifier: GPL-2.0

//! `SUBMIT`: a job onto a context's engine, through the KMD's job queue.
//!
//! The job's packets ([`build_job`]) are a `SEM_WAIT` per input fence (on
//! that fence's value in its context's status page, `>=` seqno: the GPU
//! waits), an `INDIRECT` per command buffer and a `FENCE` writing the job's
//! seqno to the ring's fence slot. Seqnos count from 1 per ring and are
//! assigned at `SUBMIT`, in submission order.
//!
//! Dependencies the KMD waits for — the in_syncs' fences (any driver's),
//! and for the BOs of the implicit-sync list the fences of their
//! reservation objects — keep the job in the ring's queue
//! ([`super::queue`], [`super::sched`]). A job with nothing to wait for,
//! nothing queued before it and room on the ring is written at the ring's
//! write pointer at once and the `DOORBELL` is posted; any other job is
//! queued, and the scheduler writes it when it can. The submitter never
//! waits: a full ring queues, only a full queue (`VGPU_CTX_MAX_PENDING`
//! unsignalled jobs) refuses with `EAGAIN`.
//!
//! The job's fence (a dma_fence, made when something outside the ring needs
//! it: out_syncs, the implicit-sync BOs) is installed in the out_syncs once
//! the job is queued, and added to the BOs' reservation objects.
//!
//! The doorbell is posted under the state lock, so that doorbells of one
//! ring reach the device in write-pointer order; its control slot is
//! reserved before the lock is taken, so posting never waits under it.
//! While a reset runs, submitters wait for it to end: the reset writes the
//! rings itself.

use super::{
    hooks::HangCheck,
    queue::Queued,
    ring::{
        build_job,
        fence_va,
        ring_va,
        CmdBuf,
        Job,
        SlotMemory,
        ENGINES,
        RING_SIZE, //
    },
    sanlog::Plant,
    state::{
        Ctx,
        Gpu,
        GpuState, //
    },
};
use crate::{
    ffi::ExportedFence,
    ffi_sync::{
        implicit_sync,
        Dependency,
        Fence,
        ImplicitUse,
        OutSync, //
    },
    file::Client,
    gem::Bo,
    ktrace::JobAt,
    mmu::{
        PTE_EXEC,
        PTE_READ, //
    },
    packet::MAX_INDIRECT_SIZE,
    uarray::{
        self,
        UCmd,
        UFence, //
    },
};
use kernel::{
    prelude::*,
    sync::{
        aref::ARef,
        atomic::Relaxed,
        Arc,
        CondVarTimeoutResult, //
    },
    time::{
        delay::fsleep,
        Delta,
        Instant, //
    },
    uapi,
};

/// What a job waits for and signals besides its in_fences, resolved by the
/// DRM layer from the file's handles.
pub(crate) struct JobSyncs {
    /// The in_syncs' fences.
    pub(crate) ins: KVec<Fence>,
    /// The out_syncs, ready to receive the job's fence.
    pub(crate) outs: KVec<OutSync>,
    /// The implicit-sync BOs and how the job uses each.
    pub(crate) bos: KVec<(ARef<Bo>, ImplicitUse)>,
}

impl Gpu {
    /// The hang check, if a ring's deadline has passed since the last one
    /// ([`Gpu::hang_due_ns`]). Before that no ring can be late, so a
    /// `SUBMIT` skips it: the watchdog wakes at the deadline, and a check
    /// run at every submission only cost the submission its time.
    fn hang_check_if_due(&self) {
        let due = self.hang_due_ns.load(Relaxed);
        if due != 0 && crate::ffi::monotonic_ns() >= due {
            self.hang_check();
        }
    }

    /// `SUBMIT`: queues the job (or writes it to the ring and posts the
    /// doorbell); returns its seqno in `a.seqno`.
    ///
    /// # Errors
    ///
    /// `EINVAL` (flags, counts, engine, a command buffer outside one
    /// READ|EXEC mapping, an input fence never submitted), `ENOENT` (a
    /// context of this file does not exist), `EFAULT` (arrays), `EAGAIN` or
    /// with `VGPU_SUBMIT_BUSY_IS_EBUSY` `EBUSY` (`VGPU_CTX_MAX_PENDING`
    /// unsignalled jobs on the ring and in its queue), `EIO` (context
    /// errored or banned, device wedged or broken), `ERESTARTSYS` (signal
    /// while a reset runs), `ENODEV`, `ENOMEM`, `ETIMEDOUT` (the device
    /// held every control slot).
    pub(crate) fn submit(
        self: &Arc<Self>,
        client: &Arc<Client>,
        a: &mut uapi::drm_vgpu_submit,
        syncs: JobSyncs,
    ) -> Result {
        let e = check_args(a)?;
        let cmds: KVec<UCmd> = uarray::read(a.cmds, a.num_cmds as usize)?;
        let fin: KVec<UFence> = uarray::read(a.in_fences, a.num_in_fences as usize)?;
        self.check_usable()?;
        self.hang_check_if_due();
        let busy = if a.flags & uapi::VGPU_SUBMIT_BUSY_IS_EBUSY != 0 {
            EBUSY
        } else {
            EAGAIN
        };
        let mem = self.slots()?;
        let generation = self.hw.generation();
        let JobSyncs { mut ins, outs, bos } = syncs;
        let need_fence = !outs.is_empty() || !bos.is_empty();

        loop {
            self.wait_for_reset()?;
            // Before the state lock: reserving may wait for the device.
            let doorbell = self.hw.reserve_doorbell()?;
            let mut g = self.lock()?;
            if g.resetting {
                // A reset started meanwhile: wait again, with the slot
                // given back (the reset needs control slots).
                continue;
            }
            if g.wedged {
                return Err(EIO);
            }
            let waits = input_waits(&mut g, client, &fin, mem)?;
            let (hw, c) = g.find(client, a.ctx_id)?;
            if c.errored || c.banned {
                return Err(EIO);
            }
            if !c.rings[e].present {
                return Err(EINVAL);
            }
            let bufs = command_buffers(client, &cmds)?;
            let fence_at = fence_va(c.kmd_va, e);
            c.rings[e].retire(mem.fence_value(hw, e));
            if c.rings[e].jobs.len() + c.queues[e].len() >= uapi::VGPU_CTX_MAX_PENDING as usize {
                return Err(busy);
            }
            // LAB(2) BEGIN job-seqno
            let seqno = c.rings[e].next_seqno;
            // LAB(2) END job-seqno
            // A bug planted for the device's sanitizer (debugfs
            // `sanitizer_plant`), committed once.
            let backwards = seqno
                .checked_sub(2)
                .filter(|_| g.san.take(Plant::FenceBackwards));
            let Ok((_, c)) = g.find(client, a.ctx_id) else {
                return Err(ENOENT);
            };
            let words = build_job(generation, &waits, &bufs, fence_at, seqno, backwards)?;
            let bytes = u32::try_from(words.len() * 4).map_err(|_| EINVAL)?;
            // The job's fence, when anything outside the ring needs it.
            let job_fence = if need_fence {
                Some(c.rings[e].new_fence(seqno)?)
            } else {
                None
            };
            let shared = job_fence.as_ref().map(ExportedFence::fence);
            let deps = dependencies(core::mem::take(&mut ins), &bos, shared.as_ref())?;
            // A move of one of the client's objects holds its jobs back.
            let fast = deps.is_empty()
                && !client.gated()
                && c.queues[e].is_empty()
                && mem.has_room(hw, e, c.rings[e].wptr, bytes);
            // The other planted bug: the doorbell first, the packets after.
            let early = fast && g.san.take(Plant::DoorbellEarly);
            // And a doorbell that publishes part of the last packet.
            let short = fast && !early && g.san.take(Plant::DoorbellMidPacket);
            let Ok((_, c)) = g.find(client, a.ctx_id) else {
                return Err(ENOENT);
            };
            let trace = &self.hw.trace;
            trace.submit(a.ctx_id, hw, e, seqno, !fast);
            if fast {
                trace.ring_write(
                    hw,
                    e,
                    seqno,
                    JobAt {
                        ring_va: ring_va(c.kmd_va, e),
                        size: RING_SIZE,
                        wptr: c.rings[e].wptr,
                        bytes: bytes as usize,
                    },
                );
            }
            if fast {
                let ring = &mut c.rings[e];
                ring.jobs.reserve(1, GFP_KERNEL)?;
                if ring.jobs.is_empty() {
                    ring.progress_at = Instant::now();
                }
                if let Some(f) = job_fence {
                    // Room was reserved above: this push does not fail.
                    let _ = ring.exported.push(f, GFP_KERNEL);
                }
                let at = ring.wptr;
                if early {
                    let wptr = at.wrapping_add(bytes);
                    let posted = self.hw.post_doorbell(doorbell, hw, a.engine, wptr);
                    fsleep(Delta::from_millis(1));
                    mem.write_ring(hw, e, at, &words);
                    let _ = ring.jobs.push(Job { seqno, words, at }, GFP_KERNEL);
                    ring.next_seqno += 1;
                    ring.wptr = wptr;
                    if let Err(err) = posted {
                        ring.fail_pending();
                        return Err(err);
                    }
                } else if short {
                    let wptr = mem.write_ring(hw, e, at, &words);
                    let _ = ring.jobs.push(Job { seqno, words, at }, GFP_KERNEL);
                    ring.next_seqno += 1;
                    ring.wptr = wptr;
                    // One word short: the engine finds its last packet cut
                    // and stops the ring (TRUNCATED).
                    if let Err(err) =
                        self.hw
                            .post_doorbell(doorbell, hw, a.engine, wptr.wrapping_sub(4))
                    {
                        ring.fail_pending();
                        return Err(err);
                    }
                } else {
                    // LAB(1) BEGIN publish
                    let wptr = mem.write_ring(hw, e, at, &words);
                    // Room was reserved above: this push does not fail.
                    let _ = ring.jobs.push(Job { seqno, words, at }, GFP_KERNEL);
                    ring.next_seqno += 1;
                    ring.wptr = wptr;
                    if let Err(err) = self.hw.post_doorbell(doorbell, hw, a.engine, wptr) {
                        // The device state is unknown: the job is treated as lost.
                        ring.fail_pending();
                        return Err(err);
                    }
                    // LAB(1) END publish
                }
            } else {
                self.enqueue(c, e, seqno, words, deps, job_fence)?;
                drop(doorbell);
            }
            drop(g);
            a.seqno = seqno;
            if let Some(f) = &shared {
                for o in outs {
                    o.install(f);
                }
            }
            if !fast {
                // Its dependencies may have signalled before their callbacks
                // were armed.
                self.pump();
            }
            return Ok(());
        }
    }

    /// Sleeps while a reset runs. The caller (an ioctl) holds a
    /// [`super::power::PmRef`]: no runtime suspension completes meanwhile.
    ///
    /// # Errors
    ///
    /// `ERESTARTSYS` (signal), `ENODEV`.
    pub(crate) fn wait_for_reset(&self) -> Result {
        loop {
            let mut g = self.lock()?;
            if !g.resetting {
                return Ok(());
            }
            let res = self
                .fences
                .wait_interruptible_timeout(&mut g, crate::time::ns_to_jiffies(10_000_000));
            if let CondVarTimeoutResult::Signal { .. } = res {
                return Err(ERESTARTSYS);
            }
        }
    }

    /// Queues job `seqno` (`words`) on `c`'s ring `e`, behind what is
    /// queued there: a callback armed on each of `deps`, its fence (if
    /// any) among the ring's exported ones, the ring's next seqno taken.
    /// The scheduler writes it to the ring when it can.
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    fn enqueue(
        self: &Arc<Self>,
        c: &mut Ctx,
        e: usize,
        seqno: u64,
        words: KVec<u32>,
        deps: KVec<Fence>,
        job_fence: Option<ExportedFence>,
    ) -> Result {
        c.queues[e].reserve()?;
        let mut waiting = KVec::with_capacity(deps.len(), GFP_KERNEL)?;
        for f in deps {
            waiting.push(Dependency::new(f, self.clone())?, GFP_KERNEL)?;
        }
        let job = Queued {
            seqno,
            words,
            deps: waiting,
            at: Instant::now(),
        };
        // Room was reserved above: these pushes do not fail.
        if c.queues[e].push(job).is_err() {
            return Err(ENOMEM);
        }
        let ring = &mut c.rings[e];
        if let Some(f) = job_fence {
            let _ = ring.exported.push(f, GFP_KERNEL);
        }
        ring.next_seqno += 1;
        Ok(())
    }
}

/// `SUBMIT`'s arguments that need no state: padding, flags, the counts of
/// command buffers and input fences, the engine. Returns the engine.
///
/// # Errors
///
/// `EINVAL`.
fn check_args(a: &uapi::drm_vgpu_submit) -> Result<usize> {
    if a.pad != 0 || a.pad2 != 0 || a.flags & !uapi::VGPU_SUBMIT_FLAGS != 0 {
        return Err(EINVAL);
    }
    if a.num_cmds == 0
        || a.num_cmds > uapi::VGPU_SUBMIT_MAX_CMDS
        || a.num_in_fences > uapi::VGPU_SUBMIT_MAX_IN_FENCES
    {
        return Err(EINVAL);
    }
    let e = usize::try_from(a.engine).map_err(|_| EINVAL)?;
    if e >= ENGINES {
        return Err(EINVAL);
    }
    Ok(e)
}

/// Input fences: same file, existing ring, submitted seqno. Returns the
/// `SEM_WAIT`s of those not yet signalled: the fence slot's address and
/// the seqno to wait for.
///
/// # Errors
///
/// `ENOENT` (a context of this file does not exist), `EINVAL`, `ENOMEM`.
fn input_waits(
    g: &mut GpuState,
    client: &Arc<Client>,
    fin: &[UFence],
    mem: &SlotMemory,
) -> Result<KVec<(u64, u64)>> {
    let mut waits = KVec::new();
    for f in fin.iter().map(|f| f.0) {
        let (fhw, fc) = g.find(client, f.ctx_id)?;
        let fe = usize::try_from(f.engine).map_err(|_| EINVAL)?;
        let r = fc.rings.get(fe).filter(|r| r.present).ok_or(EINVAL)?;
        if !r.submitted(f.seqno) {
            return Err(EINVAL);
        }
        if r.fence_state(f.seqno).is_none() && mem.fence_value(fhw, fe) < f.seqno {
            waits.push((fence_va(fc.kmd_va, fe), f.seqno), GFP_KERNEL)?;
        }
    }
    Ok(waits)
}

/// Command buffers: inside one READ|EXEC mapping of `client`'s address
/// space each, 8-byte aligned, at most [`MAX_INDIRECT_SIZE`] bytes.
///
/// # Errors
///
/// `EINVAL`, `ENOMEM`.
fn command_buffers(client: &Client, cmds: &[UCmd]) -> Result<KVec<CmdBuf>> {
    let mut bufs = KVec::with_capacity(cmds.len(), GFP_KERNEL)?;
    let vm = client.vm.lock();
    for cmd in cmds.iter().map(|c| c.0) {
        let (va, size) = (cmd.va, cmd.size);
        if size == 0 || size % 8 != 0 || va % 8 != 0 || size > u64::from(MAX_INDIRECT_SIZE) {
            return Err(EINVAL);
        }
        let end = va.checked_add(size).ok_or(EINVAL)?;
        let m = vm.find(va).ok_or(EINVAL)?;
        if end > m.va + m.size || m.perms & (PTE_READ | PTE_EXEC) != (PTE_READ | PTE_EXEC) {
            return Err(EINVAL);
        }
        let size = u32::try_from(size).map_err(|_| EINVAL)?;
        bufs.push(CmdBuf { va, size }, GFP_KERNEL)?;
    }
    Ok(bufs)
}

/// Implicit synchronisation: the BOs' fences become dependencies (with
/// `ins`, the in_syncs' fences), the job's fence (`shared`, if it has one)
/// joins their reservations. Returns the dependencies not yet signalled.
///
/// # Errors
///
/// `ENOMEM`, or the errno of a reservation lock.
fn dependencies(
    mut deps: KVec<Fence>,
    bos: &[(ARef<Bo>, ImplicitUse)],
    shared: Option<&Fence>,
) -> Result<KVec<Fence>> {
    if let Some(f) = shared {
        for (bo, usage) in bos.iter() {
            if let Some(d) = implicit_sync(&**bo, *usage, f)? {
                deps.push(d, GFP_KERNEL)?;
            }
        }
    }
    deps.retain(|f| !f.is_signalled());
    Ok(deps)
}
