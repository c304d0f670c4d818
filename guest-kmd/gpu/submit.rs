// SPDX-License-Identifier: GPL-2.0

//! `SUBMIT`: a job onto a context's ring.
//!
//! The job's packets ([`build_job`]) are a `SEM_WAIT` per input fence (on
//! that fence's value in its context's status page, `>=` seqno), an
//! `INDIRECT` per command buffer and a `FENCE` writing the job's seqno to the
//! ring's fence slot. They are written at the ring's write pointer and the
//! `DOORBELL` is posted: the submitter does not wait for the device to take
//! it (a doorbell it refuses is rung again by the hang check). Seqnos count
//! from 1 per ring.
//!
//! The doorbell is posted under the state lock, so that doorbells of one
//! ring reach the device in write-pointer order; its control slot is
//! reserved before the lock is taken, so posting never waits under it.
//! While a reset runs, submitters wait for it to end: the reset writes the
//! rings itself.

use super::{
    ring::{
        build_job,
        fence_va,
        CmdBuf,
        Job,
        ENGINES, //
    },
    state::Gpu,
};
use crate::{
    file::Client,
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
        Arc,
        CondVarTimeoutResult, //
    },
    time::Instant,
    uapi,
};

impl Gpu {
    /// `SUBMIT`: writes the job and posts the doorbell; returns its seqno in
    /// `a.seqno`.
    ///
    /// # Errors
    ///
    /// `EINVAL` (flags, counts, engine, a command buffer outside one
    /// READ|EXEC mapping, an input fence never submitted), `ENOENT` (a
    /// context of this file does not exist), `EFAULT` (arrays), `EAGAIN` or
    /// with `VGPU_SUBMIT_BUSY_IS_EBUSY` `EBUSY` (ring or pending-job list
    /// full), `EIO` (context errored or banned, device wedged or broken),
    /// `ERESTARTSYS` (signal while a reset runs), `ENODEV`, `ENOMEM`,
    /// `ETIMEDOUT` (the device held every control slot).
    pub(crate) fn submit(&self, client: &Arc<Client>, a: &mut uapi::drm_vgpu_submit) -> Result {
        if a.pad != 0 || a.flags & !uapi::VGPU_SUBMIT_FLAGS != 0 {
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
        let cmds: KVec<UCmd> = uarray::read(a.cmds, a.num_cmds as usize)?;
        let fin: KVec<UFence> = uarray::read(a.in_fences, a.num_in_fences as usize)?;
        self.check_usable()?;
        self.hang_check();
        let busy = if a.flags & uapi::VGPU_SUBMIT_BUSY_IS_EBUSY != 0 {
            EBUSY
        } else {
            EAGAIN
        };
        let mem = self.slots()?;
        let generation = self.hw.generation();

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
            // Input fences: same file, existing ring, submitted seqno.
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
            let (hw, c) = g.find(client, a.ctx_id)?;
            if c.errored || c.banned {
                return Err(EIO);
            }
            if !c.rings[e].present {
                return Err(EINVAL);
            }
            // Command buffers: inside one READ|EXEC mapping each.
            let mut bufs = KVec::with_capacity(cmds.len(), GFP_KERNEL)?;
            {
                let vm = client.vm.lock();
                for cmd in cmds.iter().map(|c| c.0) {
                    let (va, size) = (cmd.va, cmd.size);
                    if size == 0
                        || size % 8 != 0
                        || va % 8 != 0
                        || size > u64::from(MAX_INDIRECT_SIZE)
                    {
                        return Err(EINVAL);
                    }
                    let end = va.checked_add(size).ok_or(EINVAL)?;
                    let m = vm.find(va).ok_or(EINVAL)?;
                    if end > m.va + m.size
                        || m.perms & (PTE_READ | PTE_EXEC) != (PTE_READ | PTE_EXEC)
                    {
                        return Err(EINVAL);
                    }
                    let size = u32::try_from(size).map_err(|_| EINVAL)?;
                    bufs.push(CmdBuf { va, size }, GFP_KERNEL)?;
                }
            }
            let fence_at = fence_va(c.kmd_va, e);
            let ring = &mut c.rings[e];
            ring.retire(mem.fence_value(hw, e));
            if ring.jobs.len() >= uapi::VGPU_CTX_MAX_PENDING as usize {
                return Err(busy);
            }
            let seqno = ring.next_seqno;
            let words = build_job(generation, &waits, &bufs, fence_at, seqno)?;
            let bytes = u32::try_from(words.len() * 4).map_err(|_| EINVAL)?;
            if !mem.has_room(hw, e, ring.wptr, bytes) {
                return Err(busy);
            }
            ring.jobs.reserve(1, GFP_KERNEL)?;
            if ring.jobs.is_empty() {
                ring.progress_at = Instant::now();
            }
            let wptr = mem.write_ring(hw, e, ring.wptr, &words);
            // Room was reserved above: this push does not fail.
            let _ = ring.jobs.push(Job { seqno, words }, GFP_KERNEL);
            ring.next_seqno += 1;
            ring.wptr = wptr;
            if let Err(err) = self.hw.post_doorbell(doorbell, hw, a.engine, wptr) {
                // The device state is unknown: the job is treated as lost.
                ring.fail_pending();
                return Err(err);
            }
            a.seqno = seqno;
            return Ok(());
        }
    }

    /// Sleeps while a reset runs.
    ///
    /// # Errors
    ///
    /// `ERESTARTSYS` (signal), `ENODEV`.
    pub(crate) fn wait_for_reset(&self) -> Result {
        let mut g = self.lock()?;
        while g.resetting {
            let res = self
                .fences
                .wait_interruptible_timeout(&mut g, crate::time::ns_to_jiffies(10_000_000));
            if let CondVarTimeoutResult::Signal { .. } = res {
                return Err(ERESTARTSYS);
            }
        }
        Ok(())
    }
}
