// SPDX-License-Identifier: GPL-2.0

//! Uncorrectable memory errors: retiring the page an `ECC_ERROR` names.
//!
//! The engine that read the page already stopped the job (`ENGINE_ERROR`
//! `ECC_UNCORRECTABLE`: the context is errored, see [`super::fault`]). Here
//! the page is retired so the GPU never uses it again:
//!
//! * the page joins the device's retired set ([`crate::ras`]); the buffer
//!   object holding it is quarantined and marked bad (never mapped again,
//!   never evicted); a page-table page is taken out of the pool, a ring
//!   page's device slot out of use; a VRAM page is taken out of the VRAM
//!   manager ([`crate::vram_mgr::VramMgr::retire_page`]), at once when it is
//!   free, else at the next probe (its object holds it meanwhile);
//! * the device records it in its table (`RAS_RETIRE`), which outlives
//!   driver reloads;
//! * at `ras_max_pages` retired pages the device is declared bad: wedged,
//!   as when recovery fails.
//!
//! Decide under the state lock, then the address space and the device
//! without it (see the lock order in [`super`]).

use super::state::Gpu;
use crate::{
    dev_err_ratelimited, dev_warn_ratelimited,
    event::ECC_PA_UNKNOWN,
    ffi,
    gem::Bo,
    mmu::VRAM_BASE,
    proto::{
        Command,
        RasQueryReply, //
    },
};
use kernel::prelude::*;
use kernel::sync::aref::ARef;

impl Gpu {
    /// An `ECC_ERROR` event: the page at `pa` (or, if the device did not
    /// know it, the one `va` of context slot `ctx_id` translates to) is
    /// retired.
    pub(crate) fn on_ecc_error(&self, ctx_id: u32, va: u64, pa: u64) {
        let Some(ras) = self.ras.as_ref() else { return };
        let client = self
            .state
            .lock()
            .slot(ctx_id)
            .map(|c| (c.handle, c.client.clone()));
        // The object holding the page, through the context's address space.
        let (bo, handle_pa) = match &client {
            Some((_, c)) => {
                let vm = c.vm.lock();
                match vm.lookup_va(va) {
                    Some((m, at)) => (Some(m.bo.clone()), at),
                    None => (None, None),
                }
            }
            None => (None, None),
        };
        let pa = if pa == ECC_PA_UNKNOWN {
            handle_pa.unwrap_or(ECC_PA_UNKNOWN)
        } else {
            pa
        };
        // A VRAM page the context's mapping did not name: the object whose
        // VRAM holds it.
        let bo = match bo {
            None if pa != ECC_PA_UNKNOWN && pa >= VRAM_BASE => self.vram_holder(pa - VRAM_BASE),
            bo => bo,
        };
        let ctx = client.as_ref().map_or(0, |(h, _)| *h);
        if pa == ECC_PA_UNKNOWN {
            dev_warn_ratelimited!(
                self.pdev(),
                "ECC error at va {:#x} of context {} (slot {}): no guest-physical page to retire\n",
                va,
                ctx,
                ctx_id
            );
            return;
        }
        // A VRAM page leaves the VRAM manager (now if free, else with its
        // object at the next probe).
        let vram_note = if pa >= VRAM_BASE && pa != ECC_PA_UNKNOWN {
            self.retire_vram_page(pa - VRAM_BASE)
        } else {
            ""
        };
        // KMD memory: page tables and ring pages.
        let what = if bo.is_some() {
            "buffer object quarantined"
        } else if self.pt_pool.as_ref().is_some_and(|p| p.retire_at(pa)) {
            "page-table page taken out of the pool"
        } else if let Some(slot) = self.slots().ok().and_then(|m| m.slot_at(pa)) {
            self.state.lock().retired_slots |= 1u64 << (slot % 64);
            "device slot taken out of use"
        } else {
            "no driver object holds it"
        };
        let new = match ras.retire(pa, bo) {
            Ok(new) => new,
            Err(_) => {
                dev_err_ratelimited!(
                    self.pdev(),
                    "ECC error: page {:#x} could not be retired (no memory)\n",
                    pa
                );
                return;
            }
        };
        if !new {
            return;
        }
        let recorded = self.cmd(Command::RasRetire { pa: pa & !0xfff }).is_ok();
        let count = ras.count();
        dev_warn_ratelimited!(
            self.pdev(),
            "ECC error: page {:#x} (va {:#x}, context {} slot {}) retired: {}{}; {} retired{}\n",
            pa & !0xfff,
            va,
            ctx,
            ctx_id,
            what,
            vram_note,
            count,
            if recorded {
                ""
            } else {
                " (the device did not record it)"
            }
        );
        self.check_retired_limit();
    }

    /// At `ras_max_pages` retired pages the device is bad: wedged, with the
    /// `WEDGED` uevent, as when recovery fails.
    pub(crate) fn check_retired_limit(&self) {
        let Some(ras) = self.ras.as_ref() else { return };
        let count = ras.count();
        let max = crate::params::ras_max_pages();
        if count < max {
            return;
        }
        let (newly, gone) = {
            let mut g = self.state.lock();
            let newly = !g.wedged;
            g.wedged = true;
            (newly, g.fail_all())
        };
        drop(gone);
        if newly {
            dev_err!(
                self.pdev(),
                "device wedged: {} pages retired (ras_max_pages {}); the device is bad\n",
                count,
                max
            );
            ffi::send_wedged_uevent(self.pdev().as_ref());
        }
        self.wake();
    }

    /// Reads the device's table of retired pages into the driver's set
    /// (probe): pages retired by an earlier driver stay retired.
    ///
    /// # Errors
    ///
    /// The errno of a failed `RAS_QUERY`, `ENOMEM`.
    pub(crate) fn load_retired(&self) -> Result<u32> {
        let Some(ras) = self.ras.as_ref() else {
            return Ok(0);
        };
        let mut start = 0u32;
        loop {
            let r: RasQueryReply = self.cmd(Command::RasQuery { start })?.get()?;
            let n = r.count.min(r.pages.len() as u32);
            for &pa in r.pages.iter().take(n as usize) {
                ras.retire(pa, None)?;
                if pa >= VRAM_BASE {
                    self.retire_vram_page(pa - VRAM_BASE);
                }
                if let Some(p) = self.pt_pool.as_ref() {
                    p.retire_at(pa);
                }
                if let Some(slot) = self.slots().ok().and_then(|m| m.slot_at(pa)) {
                    self.state.lock().retired_slots |= 1u64 << (slot % 64);
                }
            }
            start = start.saturating_add(n);
            if n == 0 || start >= r.total {
                return Ok(r.total);
            }
        }
    }

    /// The object whose VRAM holds VRAM offset `offset`, if any.
    fn vram_holder(&self, offset: u64) -> Option<ARef<Bo>> {
        let bos = self.bos.as_ref()?;
        let mut found = None;
        bos.visit(|bo| {
            if found.is_none()
                && bo.is_vram_object()
                && bo.vram().as_ref().is_some_and(|p| p.alloc.holds(offset))
            {
                found = Some(bo.into());
            }
        });
        found
    }

    /// Takes the VRAM page at `offset` out of the VRAM manager; returns
    /// what the log says about it.
    fn retire_vram_page(&self, offset: u64) -> &'static str {
        let Some(mgr) = self.vram.as_ref() else {
            return "";
        };
        match mgr.retire_page(offset) {
            Ok(_) => ", VRAM page taken out of the allocator",
            Err(e) if e == EBUSY => {
                ", VRAM page kept by its object, out of the allocator from the next probe"
            }
            Err(_) => ", VRAM page could not be taken out of the allocator",
        }
    }
}
