// SPDX-License-Identifier: GPL-2.0

//! Retired pages: guest-physical pages with an uncorrectable memory error,
//! which the GPU must never use again (as amdgpu retires bad VRAM pages).
//!
//! The invariant, enforced by the address spaces ([`crate::vm`]): **no GPU
//! mapping points at a retired page.** Binding (or demand-paging) a buffer
//! object that holds one fails with `EIO`. To keep the pages out of new
//! buffer objects too, the object that held a page when it was retired is
//! *quarantined*: this set keeps a reference to it, so its pages are never
//! returned to the kernel while the driver is loaded, and it is marked bad.
//! The device keeps the list across driver reloads (`RAS_RETIRE`,
//! `RAS_QUERY`: its "EEPROM"), so a driver that loads later knows them; a
//! quarantined object is let go when the driver unbinds, but its retired
//! pages are not: they keep a reference that is never dropped, so they
//! never go back to the kernel's allocator, and the next driver's objects
//! never meet them (the bind check would refuse those).
//!
//! The GPU block (`gpu/ras.rs`) decides what to retire when an `ECC_ERROR`
//! event arrives; this block only keeps the set.

use crate::gem::{
    Bo,
    Seg, //
};
use core::fmt;
use kernel::{
    drm::gem::{
        BaseObject,
        IntoGEMObject, //
    },
    new_mutex,
    prelude::*,
    sync::{
        aref::ARef,
        Arc,
        Mutex, //
    },
};

/// 4 KiB.
const PAGE: u64 = 4096;

/// What the set holds, behind its lock.
struct Inner {
    /// Retired page addresses (4 KiB aligned), in retirement order.
    pages: KVec<u64>,
    /// Objects that held a page when it was retired.
    quarantine: KVec<ARef<Bo>>,
}

/// The retired pages of one device.
#[pin_data]
pub(crate) struct Retired {
    #[pin]
    inner: Mutex<Inner>,
}

impl Retired {
    /// An empty set.
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn new() -> Result<Arc<Retired>> {
        Arc::pin_init(
            pin_init!(Retired {
                inner <- new_mutex!(Inner {
                    pages: KVec::new(),
                    quarantine: KVec::new(),
                }),
            }),
            GFP_KERNEL,
        )
    }

    /// Retires the page at `pa` (rounded down to its page), and quarantines
    /// `bo`, the object holding it, if any. Returns whether the page was
    /// not retired before.
    ///
    /// # Errors
    ///
    /// `ENOMEM` (the page is then not retired).
    pub(crate) fn retire(&self, pa: u64, bo: Option<ARef<Bo>>) -> Result<bool> {
        let page = pa & !(PAGE - 1);
        let mut g = self.inner.lock();
        if let Some(bo) = bo {
            bo.mark_bad();
            let known = g
                .quarantine
                .iter()
                .any(|b| core::ptr::eq(b.as_raw(), bo.as_raw()));
            if !known {
                g.quarantine.push(bo, GFP_KERNEL)?;
            }
        }
        if g.pages.contains(&page) {
            return Ok(false);
        }
        g.pages.push(page, GFP_KERNEL)?;
        Ok(true)
    }

    /// Lets the quarantined objects go (unbind: they hold the DRM device,
    /// which holds the device state that holds this set), keeping each
    /// retired system-memory page they hold out of the kernel's allocator
    /// for good ([`crate::gem::keep_page_forever`]): a driver loaded later
    /// reads the device's table, and a page that went back to the kernel
    /// would reach a new object it then refuses to bind. Returns how many
    /// pages were kept and how many could not be (already logged).
    pub(crate) fn release_quarantine(&self) -> (u32, u32) {
        let (quarantine, pages) = {
            let mut g = self.inner.lock();
            let mut pages = KVec::new();
            if pages.extend_from_slice(&g.pages, GFP_KERNEL).is_err() {
                pages.clear();
            }
            (core::mem::take(&mut g.quarantine), pages)
        };
        let (mut kept, mut lost) = (0u32, 0u32);
        for bo in quarantine.iter().filter(|b| b.vram().is_none()) {
            for &pa in pages.iter() {
                match crate::gem::keep_page_forever(bo, pa) {
                    Ok(true) => kept += 1,
                    Ok(false) => {}
                    Err(e) => {
                        pr_warn!(
                            "vgpu: retired page {:#x} not kept out of use ({:?})\n",
                            pa,
                            e
                        );
                        lost += 1;
                    }
                }
            }
        }
        if pages.is_empty() && !quarantine.is_empty() {
            pr_warn!("vgpu: retired pages not kept out of use (no memory to list them)\n");
            lost += 1;
        }
        drop(quarantine);
        (kept, lost)
    }

    /// Pages retired.
    pub(crate) fn count(&self) -> u32 {
        u32::try_from(self.inner.lock().pages.len()).unwrap_or(u32::MAX)
    }

    /// The first retired page inside any of `segs`, if one is.
    pub(crate) fn first_in(&self, segs: &[Seg]) -> Option<u64> {
        let g = self.inner.lock();
        g.pages
            .iter()
            .copied()
            .find(|&p| segs.iter().any(|s| p >= s.addr && p - s.addr < s.len))
    }

    /// debugfs `ras`: the retired pages and the quarantined objects.
    pub(crate) fn show(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let g = self.inner.lock();
        let bytes: usize = g.quarantine.iter().map(|b| b.size()).sum();
        writeln!(
            f,
            "retired_pages {} quarantined_objects {} quarantined_bytes {}",
            g.pages.len(),
            g.quarantine.len(),
            bytes
        )?;
        for p in g.pages.iter() {
            writeln!(f, "page {:#x}", p)?;
        }
        Ok(())
    }
}
