// SPDX-License-Identifier: GPL-2.0

//! TLB invalidation: a range of a file's address space in the TLB of every
//! context of the file, after its translations changed — a `VM_UNBIND`, a
//! `HOST_UNMAP`, a bind job's unmaps ([`super::bind`]), a context slot's
//! memory leaving the address space ([`super::context`]).
//!
//! One `TLB_INVALIDATE` per context, each answered before the next, with no
//! GPU lock held across them; the caller frees the pages only once every
//! invalidation succeeded.

use super::state::Gpu;
use crate::{
    file::Client,
    proto::Command, //
};
use kernel::{
    prelude::*,
    sync::Arc, //
};

impl Gpu {
    /// Invalidates `[va, va + size)` in every context of `client` but
    /// `skip` (no GPU lock held). Returns whether every invalidation
    /// succeeded; a context the device no longer has (destroyed, or not yet
    /// created again by a reset, which flushed its TLBs) needs none.
    pub(crate) fn invalidate_client(
        &self,
        client: &Arc<Client>,
        skip: Option<u32>,
        va: u64,
        size: u64,
    ) -> bool {
        // LAB(4) BEGIN invalidate
        let mut targets = KVec::new();
        {
            let g = self.state.lock();
            for (i, s) in g.slots.iter().enumerate() {
                let Some(c) = s else { continue };
                if Arc::ptr_eq(&c.client, client)
                    && Some(i as u32) != skip
                    && targets.push(i as u32, GFP_KERNEL).is_err()
                {
                    return false;
                }
            }
        }
        let mut ok = true;
        for hw in targets {
            match self.cmd(Command::TlbInvalidate {
                ctx_id: hw,
                engine_mask: 0,
                va,
                size,
            }) {
                Ok(_) => {}
                Err(e) if e == ENOENT => {}
                Err(_) => ok = false,
            }
        }
        ok
        // LAB(4) END invalidate
    }

    /// TLB invalidation after an unbind (`VM_UNBIND`, `HOST_UNMAP`, a
    /// bind job's unmaps); `false` if any failed (the caller keeps the
    /// pages).
    pub(crate) fn invalidate_after_unbind(&self, client: &Arc<Client>, va: u64, size: u64) -> bool {
        self.invalidate_client(client, None, va, size)
    }
}
