// SPDX-License-Identifier: GPL-2.0

//! A context on the device: its parameters ([`HwCtx`]) and the commands
//! that create it — `CONTEXT_CREATE`, a `RING_CREATE` per ring, a user-mode
//! queue's `DOORBELL_WATCH`. Shared by context creation ([`super::context`])
//! and the device reset ([`super::reset`]), which creates every context
//! again on the same page tables.

use super::{
    ring::{
        ring_va,
        status_va,
        ENGINES,
        RING_SIZE, //
    },
    state::{
        Ctx,
        Gpu, //
    },
    uqueue::UqHw,
};
use crate::proto::{
    Command,
    DESTROY_FLAG_FORCE, //
};
use kernel::prelude::*;

/// A context's device-side parameters (to create it again after a reset).
#[derive(Clone, Copy)]
pub(crate) struct HwCtx {
    pub(crate) hw: u32,
    pub(crate) priority: u32,
    pub(crate) flags: u32,
    pub(crate) pt_root: u64,
    pub(crate) engine_mask: u32,
    pub(crate) kmd_va: u64,
    /// A user-mode queue's ring and doorbell.
    pub(crate) uq: Option<UqHw>,
}

impl HwCtx {
    /// The parameters of `c` in slot `hw`; a user-mode queue restarts at
    /// `uq_start`, watched unless `c` failed.
    pub(crate) fn of(hw: u32, c: &Ctx, uq_start: u32) -> HwCtx {
        HwCtx {
            hw,
            priority: c.priority,
            flags: c.flags,
            pt_root: c.pt_root,
            engine_mask: c.engine_mask,
            kmd_va: c.kmd_va,
            uq: c
                .uq
                .as_ref()
                .map(|q| q.hw(uq_start, !(c.errored || c.banned))),
        }
    }
}

impl Gpu {
    /// `CONTEXT_CREATE` + `RING_CREATE`s on the device (no lock held but
    /// [`Gpu::ops`]). A ring that cannot be created takes the context down
    /// again.
    ///
    /// # Errors
    ///
    /// The errno of the failed command.
    pub(crate) fn hw_create(&self, c: &HwCtx) -> Result {
        self.cmd(Command::ContextCreate {
            ctx_id: c.hw,
            priority: c.priority,
            flags: c.flags,
            pt_root: c.pt_root,
        })?;
        for e in 0..ENGINES {
            if c.engine_mask & (1 << e) == 0 {
                continue;
            }
            let r = self.cmd(Command::RingCreate {
                ctx_id: c.hw,
                engine: e as u32,
                size: RING_SIZE,
                ring_va: ring_va(c.kmd_va, e),
                status_va: status_va(c.kmd_va, e),
            });
            if let Err(err) = r {
                let _ = self.cmd(Command::ContextDestroy {
                    ctx_id: c.hw,
                    flags: DESTROY_FLAG_FORCE,
                });
                return Err(err);
            }
        }
        if let Some(uq) = &c.uq {
            // A user-mode queue's ring is the file's, its status block the
            // slot's; the doorbell is the block the device watches.
            let r = self
                .cmd(Command::RingCreate {
                    ctx_id: c.hw,
                    engine: uq.engine as u32,
                    size: uq.ring_size,
                    ring_va: uq.ring_va,
                    status_va: status_va(c.kmd_va, uq.engine),
                })
                .and_then(|_| {
                    if !uq.watch {
                        return Ok(());
                    }
                    self.cmd(Command::DoorbellWatch {
                        ctx_id: c.hw,
                        engine: uq.engine as u32,
                        doorbell_va: uq.doorbell_va,
                        start: uq.start,
                        flags: 0,
                    })
                    .map(|_| ())
                });
            if let Err(err) = r {
                let _ = self.cmd(Command::ContextDestroy {
                    ctx_id: c.hw,
                    flags: DESTROY_FLAG_FORCE,
                });
                return Err(err);
            }
        }
        Ok(())
    }
}
