// SPDX-License-Identifier: GPL-2.0

//! `VM_BIND_OPS`: bind jobs — a file's map and unmap requests as one job
//! with input and output fences — and their queue.
//!
//! A bind job whose input fences all signalled, of a file with no bind job
//! still queued, runs in the ioctl. Otherwise it waits in the device's bind
//! queue ([`super::state::GpuState::binds`]); the GPU's worker runs the
//! ready ones, one file's in submission order ([`Gpu::run_binds`]). Running
//! a job: the requests are applied to the file's VM ([`crate::vm_ops`]),
//! the TLBs of the file's contexts invalidated for the range whose
//! translations changed (a control round trip: no GPU lock held), and only
//! then are the removed mappings' objects released and the job's fence
//! signalled (with the errno of the request that failed, or of the
//! invalidation). A job waiting on the fence of the last job that used a
//! range therefore unmaps it after that job, with no CPU waiting for it.
//!
//! Closing the file cancels its queued bind jobs (their fences signal
//! `-ECANCELED`).

use super::{
    queue::BindJob,
    state::{
        Gpu,
        GpuState, //
    },
};
use crate::{
    ffi::ExportedFence,
    ffi_sync::{
        Dependency,
        Fence,
        OutSync, //
    },
    file::Client,
    vm_ops::{
        PreparedOp,
        Unmapped, //
    },
};
use core::fmt;
use kernel::{
    prelude::*,
    sync::Arc, //
};

impl Gpu {
    /// `VM_BIND_OPS`: a bind job of `client`'s VM made of `ops` (checked),
    /// after `ins`, signalling `outs`.
    ///
    /// # Errors
    ///
    /// A job run in the call: the errno of the request that failed
    /// (`ENOSPC`, `ENOMEM`) or `EIO` (a TLB invalidation failed). A queued
    /// job: `ENOMEM`.
    pub(crate) fn vm_bind_ops(
        self: &Arc<Self>,
        client: &Arc<Client>,
        ops: KVec<PreparedOp>,
        ins: KVec<Fence>,
        outs: KVec<OutSync>,
    ) -> Result {
        let mut fence = ExportedFence::new(client.bind_fence_ctx, client.next_bind_seqno())?;
        let waits = ins.iter().any(|f| !f.is_signalled());
        let queued = self.binds_queued(client);
        if !waits && !queued {
            let r = self.run_bind(client, ops);
            fence.signal(r.err().map_or(0, |e| e.to_errno()));
            let f = fence.fence();
            for o in outs {
                o.install(&f);
            }
            return r;
        }
        let mut deps = KVec::with_capacity(ins.len(), GFP_KERNEL)?;
        for f in ins {
            if !f.is_signalled() {
                deps.push(Dependency::new(f, self.clone())?, GFP_KERNEL)?;
            }
        }
        let f = fence.fence();
        {
            let mut g = self.lock()?;
            g.binds.reserve(1, GFP_KERNEL)?;
            // Room was reserved above.
            let _ = g.binds.push(
                BindJob {
                    client: client.clone(),
                    ops,
                    deps,
                    fence,
                    running: false,
                },
                GFP_KERNEL,
            );
        }
        for o in outs {
            o.install(&f);
        }
        // Its fences may have signalled before the callbacks were armed.
        self.run_binds();
        Ok(())
    }

    /// Whether `client` has bind jobs not yet done.
    pub(crate) fn binds_queued(&self, client: &Arc<Client>) -> bool {
        self.state
            .lock()
            .binds
            .iter()
            .any(|b| Arc::ptr_eq(&b.client, client))
    }

    /// Applies `ops` to `client`'s VM, invalidates the TLBs, then releases
    /// what was unmapped (no GPU lock held).
    ///
    /// # Errors
    ///
    /// The failing request's errno, or `EIO` if the invalidation failed
    /// (the unmapped objects then stay until the file closes).
    fn run_bind(&self, client: &Arc<Client>, ops: KVec<PreparedOp>) -> Result {
        let mut out = Unmapped::new();
        let r = client.vm.lock().apply_ops(ops, &mut out);
        let invalidated = match out.range() {
            Some((va, size)) => self.invalidate_after_unbind(client, va, size),
            None => true,
        };
        if invalidated {
            drop(out);
        } else {
            client.vm.lock().retire(out);
        }
        r?;
        if invalidated {
            Ok(())
        } else {
            Err(EIO)
        }
    }

    /// The first queued bind job that can run: its file has no earlier job
    /// queued or running, and its fences signalled.
    fn ready_bind(g: &GpuState) -> Option<usize> {
        for (i, b) in g.binds.iter().enumerate() {
            let earlier = g.binds[..i]
                .iter()
                .any(|x| Arc::ptr_eq(&x.client, &b.client));
            if !earlier && !b.running && b.deps.iter().all(|d| d.is_signalled()) {
                return Some(i);
            }
        }
        None
    }

    /// Runs every bind job that is ready, in order per file.
    pub(crate) fn run_binds(&self) {
        loop {
            let job = {
                let mut g = self.state.lock();
                let Some(i) = Self::ready_bind(&g) else {
                    return;
                };
                let b = &mut g.binds[i];
                b.running = true;
                (b.client.clone(), core::mem::take(&mut b.ops))
            };
            let (client, ops) = job;
            let r = self.run_bind(&client, ops);
            let done = {
                let mut g = self.state.lock();
                let i = g
                    .binds
                    .iter()
                    .position(|b| b.running && Arc::ptr_eq(&b.client, &client));
                i.and_then(|i| g.binds.remove(i).ok())
            };
            if let Some(mut b) = done {
                b.fence.signal(r.err().map_or(0, |e| e.to_errno()));
            }
        }
    }

    /// Cancels `client`'s queued bind jobs (its file closes); one running
    /// finishes.
    pub(crate) fn cancel_binds(&self, client: &Arc<Client>) {
        let mut gone = KVec::new();
        {
            let mut g = self.state.lock();
            let mut i = 0;
            while i < g.binds.len() {
                if Arc::ptr_eq(&g.binds[i].client, client) && !g.binds[i].running {
                    if let Ok(b) = g.binds.remove(i) {
                        let _ = gone.push(b, GFP_KERNEL);
                    }
                } else {
                    i += 1;
                }
            }
        }
        // Outside the lock: the fences signal -ECANCELED, the objects and
        // the client are released.
        drop(gone);
    }

    /// debugfs `queues`: the bind jobs.
    pub(crate) fn show_binds(&self, g: &GpuState, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "binds {}", g.binds.len())?;
        for b in g.binds.iter() {
            writeln!(
                f,
                "  bind client {} seqno {} ops {} waits {} running {}",
                b.client.id,
                b.fence.seqno,
                b.ops.len(),
                b.deps.iter().filter(|d| !d.is_signalled()).count(),
                u8::from(b.running)
            )?;
        }
        Ok(())
    }
}
