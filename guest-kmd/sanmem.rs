// SPDX-License-Identifier: GPL-2.0

//! The memory this driver lets the GPU reach, declared to the device's
//! sanitizer like an IOMMU's map and unmap (`SAN_MEM`).
//!
//! When `IDENTIFY` reports `FEATURE_SAN_DMA` (the device runs with
//! `--sanitize` and its DMA-ownership check), the device reports every
//! engine access to a guest-physical page the driver has not declared
//! (`SAN-DMA-UNOWNED`): a GPU mapping that outlives its pages — a use after
//! free through the GPU, which no CPU-side checker sees — is caught at its
//! first access. The driver declares:
//!
//! * at probe, its own GPU memory: the page-table pool (as page tables,
//!   `SAN_MEM_OWN_TABLES`, for the device's page-table checks) and every
//!   slot's rings and status page (they live until unbind);
//! * for each `VM_BIND` mapping, the object pages it maps, before the
//!   entries are written (for a lazy object, when its pages are pinned at
//!   the first fault), and gives them back when the mapping goes — after
//!   the entries are cleared and the TLBs invalidated ([`Declared`] does it
//!   when dropped).
//!
//! Declarations are counted per page by the device, so a page mapped twice
//! is declared and given back twice. A PCI function reset makes the device
//! forget every declaration: [`SanMem::redeclare`] tells it again what is
//! still declared (the driver's own memory and every live [`Declared`]). Without the feature nothing is sent.
//! Commands go out with no lock of the driver held by the caller (the
//! mapping's object pages are pinned before `VM_BIND` takes the address
//! space's lock); a failure is counted and logged, never fatal: the check
//! is a debugging aid.

use crate::{
    dev_warn_ratelimited,
    gem::Seg,
    proto::{
        Command,
        FEATURE_SAN_DMA,
        SAN_MEM_OWN,
        SAN_MEM_OWN_TABLES,
        SAN_MEM_RANGES,
        SAN_MEM_RELEASE, //
    },
    sanitize::SanRange,
    transport::Hw,
};
use kernel::{
    prelude::*,
    sync::{
        atomic::{
            Atomic,
            Relaxed, //
        },
        new_mutex,
        Arc,
        Mutex,
        UniqueArc, //
    },
};

/// Guest-physical ranges: (address, bytes) each.
pub(crate) type Ranges = KVec<(u64, u64)>;

/// The tag of a declaration: the object the pages belong to and its
/// placement generation ([`Tag::of`]). The device
/// keeps it with the pages and, after they are given back, names the
/// object in a report of an access to them (moved or freed).
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Tag {
    /// The object's id (0: untagged, the driver's own memory).
    pub(crate) object: u64,
    /// Its placement generation.
    pub(crate) gen: u32,
}

impl Tag {
    /// The tag of `bo`'s pages now: its id and placement generation.
    pub(crate) fn of(bo: &crate::gem::Bo) -> Tag {
        Tag {
            object: bo.id(),
            gen: bo.gen(),
        }
    }
}

/// The declarations of one device.
#[pin_data]
pub(crate) struct SanMem {
    hw: Arc<Hw>,
    on: bool,
    /// Pages declared and not given back (for debugfs).
    pages: Atomic<u64>,
    /// Commands the device refused.
    failed: Atomic<u64>,
    /// What is declared now, to tell the device again after a function
    /// reset. Held across `SAN_MEM` round trips by [`SanMem::redeclare`]
    /// only; taken by a [`Declared`] as it goes.
    #[pin]
    kept: Mutex<Kept>,
}

/// The declarations in force.
struct Kept {
    /// The page-table pool's ranges.
    tables: Ranges,
    /// The driver's other memory (rings, status pages).
    own: Ranges,
    /// The address of every live [`Declared`] (in its `Arc`); each removes
    /// itself under the lock before it is freed.
    live: KVec<usize>,
}

impl SanMem {
    /// The declarations to the device behind `hw` (on only if its
    /// `IDENTIFY` asks for them).
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn new(hw: Arc<Hw>) -> Result<Arc<SanMem>> {
        let on = hw
            .identity
            .as_ref()
            .is_some_and(|id| id.features & FEATURE_SAN_DMA != 0);
        Arc::pin_init(
            pin_init!(SanMem {
                hw,
                on,
                pages: Atomic::new(0),
                failed: Atomic::new(0),
                kept <- new_mutex!(Kept {
                    tables: KVec::new(),
                    own: KVec::new(),
                    live: KVec::new(),
                }),
            }),
            GFP_KERNEL,
        )
    }

    /// Whether the driver declares its memory.
    pub(crate) fn on(&self) -> bool {
        self.on
    }

    /// (pages declared, commands refused).
    pub(crate) fn counts(&self) -> (u64, u64) {
        (self.pages.load(Relaxed), self.failed.load(Relaxed))
    }

    fn send(&self, op: u32, ranges: &[(u64, u64)], tag: Tag) {
        if !self.on {
            return;
        }
        self.send_uncounted(op, ranges, tag);
        let pages: u64 = ranges.iter().map(|&(_, s)| s / 4096).sum();
        if op == SAN_MEM_RELEASE {
            self.pages.fetch_sub(pages, Relaxed);
        } else {
            self.pages.add(pages, Relaxed);
        }
    }

    /// The `SAN_MEM` commands of `ranges`, without counting their pages.
    fn send_uncounted(&self, op: u32, ranges: &[(u64, u64)], tag: Tag) {
        for chunk in ranges.chunks(SAN_MEM_RANGES) {
            let mut rs = [SanRange { pa: 0, size: 0 }; SAN_MEM_RANGES];
            for (d, &(pa, size)) in rs.iter_mut().zip(chunk) {
                *d = SanRange { pa, size };
            }
            let cmd = Command::SanMem {
                op,
                count: chunk.len() as u32,
                ranges: rs,
                object: tag.object,
                gen: tag.gen,
            };
            if self.hw.command(cmd).is_err() && self.hw.check_usable().is_ok() {
                self.failed.add(1, Relaxed);
                let what = if op == SAN_MEM_RELEASE {
                    "release"
                } else {
                    "declare"
                };
                dev_warn_ratelimited!(
                    self.hw.pdev(),
                    "SAN_MEM {} of {} ranges refused\n",
                    what,
                    chunk.len()
                );
            }
        }
    }

    /// Declares `ranges` (guest-physical, 4 KiB aligned) for as long as
    /// the returned value lives.
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn declare(self: &Arc<Self>, ranges: KVec<(u64, u64)>) -> Result<Arc<Declared>> {
        self.declare_tagged(ranges, Tag::default())
    }

    /// [`SanMem::declare`] of an object's pages, tagged with its `tag`.
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn declare_tagged(
        self: &Arc<Self>,
        ranges: KVec<(u64, u64)>,
        tag: Tag,
    ) -> Result<Arc<Declared>> {
        // Room first: a declaration is only made when its give-back is sure.
        let slot = UniqueArc::new_uninit(GFP_KERNEL)?;
        let mut kept = self.kept.lock();
        kept.live.reserve(1, GFP_KERNEL)?;
        self.send(SAN_MEM_OWN, &ranges, tag);
        let d: Arc<Declared> = slot
            .write(Declared {
                mem: self.clone(),
                ranges,
                tag,
            })
            .into();
        // Cannot fail: room was reserved above.
        let _ = kept.live.push(Arc::as_ptr(&d) as usize, GFP_NOWAIT);
        Ok(d)
    }

    /// Declares `ranges` for the device's lifetime (the driver's own
    /// memory, given back by the reset at unbind).
    pub(crate) fn declare_forever(&self, ranges: &[(u64, u64)]) {
        self.send(SAN_MEM_OWN, ranges, Tag::default());
        let mut kept = self.kept.lock();
        if kept.own.extend_from_slice(ranges, GFP_KERNEL).is_err() {
            self.failed.add(1, Relaxed);
        }
    }

    /// Declares `ranges` as page-table memory for the device's lifetime:
    /// the device then tells a table linked without its valid bit
    /// (`SAN-PT-INVALID-TABLE`) by its address.
    pub(crate) fn declare_tables_forever(&self, ranges: &[(u64, u64)]) {
        self.send(SAN_MEM_OWN_TABLES, ranges, Tag::default());
        let mut kept = self.kept.lock();
        if kept.tables.extend_from_slice(ranges, GFP_KERNEL).is_err() {
            self.failed.add(1, Relaxed);
        }
    }

    /// After a PCI function reset (the device forgot every declaration):
    /// declares again everything declared now. Returns the number of
    /// mappings declared again.
    pub(crate) fn redeclare(&self) -> usize {
        if !self.on {
            return 0;
        }
        let kept = self.kept.lock();
        self.send_uncounted(SAN_MEM_OWN_TABLES, &kept.tables, Tag::default());
        self.send_uncounted(SAN_MEM_OWN, &kept.own, Tag::default());
        for &addr in kept.live.iter() {
            // SAFETY: Every address in `live` is that of a live `Declared`:
            // each removes its own under this lock before it is freed, and
            // the lock is held.
            let d = unsafe { &*(addr as *const Declared) };
            self.send_uncounted(SAN_MEM_OWN, &d.ranges, d.tag);
        }
        kept.live.len()
    }
}

/// Pages declared for one mapping (shared by the parts a split leaves);
/// given back when the last reference is dropped.
pub(crate) struct Declared {
    mem: Arc<SanMem>,
    ranges: KVec<(u64, u64)>,
    tag: Tag,
}

impl Drop for Declared {
    fn drop(&mut self) {
        let me = core::ptr::from_ref(self) as usize;
        self.mem.kept.lock().live.retain(|a| *a != me);
        self.mem.send(SAN_MEM_RELEASE, &self.ranges, self.tag);
    }
}

/// The guest-physical ranges of bytes `offset..offset + size` of an object
/// whose pages are `segs` (merged where contiguous).
///
/// # Errors
///
/// `EINVAL` if the range leaves the object, `ENOMEM`.
pub(crate) fn ranges_of(segs: &[Seg], offset: u64, size: u64) -> Result<Ranges> {
    let mut out: Ranges = KVec::new();
    let end = offset.checked_add(size).ok_or(EINVAL)?;
    let mut at = offset;
    while at < end {
        let (pa, contig) = crate::gem::addr_at(segs, at).ok_or(EINVAL)?;
        let n = contig.min(end - at);
        match out.last_mut() {
            Some((p, s)) if *p + *s == pa => *s += n,
            _ => out.push((pa, n), GFP_KERNEL)?,
        }
        at += n;
    }
    Ok(out)
}
