// SPDX-License-Identifier: GPL-2.0

//! Process memory mapped for the GPU (`HOST_MAP`, `HOST_UNMAP`): the
//! device copies straight into (or out of) a process's own pages, so a
//! device-to-host read is one copy, made by the device.
//!
//! A host mapping pins the process's pages long-term (`FOLL_LONGTERM`, as
//! for DMA: the pages stay where they are whatever the process does with
//! its mapping), builds a scatter-gather table of them, DMA-maps it and
//! writes its segments into the file's page tables with
//! [`Vm::map_kmd_segs`], in a window of the range the KMD keeps above the
//! user range ([`WINDOW_OFFSET`]: above every context slot's rings). The KMD
//! picks the VA (first fit, at the same offset from a 2 MiB boundary as the
//! memory's first page, so that 2 MiB pages serve where the process's
//! memory is physically contiguous); the user range stays the process's
//! own, managed by GPUVM.
//!
//! Teardown is a `VM_UNBIND`'s order: the entries are cleared, every
//! context of the file has its TLBs invalidated, and only then do the
//! sanitizer declaration, the DMA mapping and the pins go (pages marked
//! dirty unless read-only). When an invalidation fails the mapping is kept
//! aside, pinned, until the file goes ([`HostMaps::retired`]). At unbind the
//! DMA mappings go with the device ([`HostMaps::release_dma`]); the pins
//! stay until the file is closed.
//!
//! Lock order: a file's host mappings (`Client::host`) before its address
//! space (`Client::vm`); no GPU lock is held by either, and no device
//! command is sent under them.

use crate::{
    gem::{
        self,
        MemCharge, //
    },
    mmu::{
        PTE_READ,
        PTE_WRITE, //
    },
    pagetable::{
        PAGE_2M,
        PAGE_4K,
        VA_KMD_RESERVED, //
    },
    sanmem::Declared,
    vm::Vm,
};
use kernel::{
    alloc::kvec::InsertError,
    bindings,
    device::Device,
    prelude::*,
    scatterlist::SGTable,
    sync::{
        aref::ARef,
        atomic::{
            Atomic,
            Relaxed, //
        },
        Arc,
        Mutex, //
    },
    uapi,
};

/// Where the window of host mappings starts, from the end of the user
/// range: above the context slots (`MAX_CONTEXTS` × `SLOT_VA_STRIDE`).
pub(crate) const WINDOW_OFFSET: u64 = 16 << 20;
/// The window's size.
const WINDOW_SIZE: u64 = VA_KMD_RESERVED - WINDOW_OFFSET;

// The largest total fits in the window (`gpu/context.rs` checks that the
// context slots fit below it).
const _: () = assert!(uapi::VGPU_HOST_MAP_MAX_TOTAL as u64 <= WINDOW_SIZE);

/// Pages pinned by host mappings, for debugfs (leak checks).
static PINNED_PAGES: Atomic<i64> = Atomic::new(0);

/// Pages pinned by host mappings of every file.
pub(crate) fn pinned_pages() -> i64 {
    PINNED_PAGES.load(Relaxed)
}

/// The C device of `dev`.
fn raw_dev(dev: &Device) -> *mut bindings::device {
    // `Device` is a transparent wrapper of `struct device`.
    core::ptr::from_ref(dev)
        .cast::<bindings::device>()
        .cast_mut()
}

/// Pages of a process pinned and DMA-mapped for the device.
struct Pinned {
    /// The pinned pages, in address order.
    pages: KVec<*mut bindings::page>,
    /// Their scatter-gather table (owned, heap-allocated: the kernel links
    /// its chunks).
    sgt: KBox<bindings::sg_table>,
    /// The device the table is DMA-mapped for, while it is.
    dma: Option<ARef<Device>>,
    /// Pinned for writing: the pages are marked dirty when unpinned.
    write: bool,
}

// SAFETY: The raw page pointers are references (pins) this object owns;
// pages and their pins are not tied to a thread, and the object is only
// reached through `&mut` or under the owning mutex.
unsafe impl Send for Pinned {}
// SAFETY: As above: no method reads the pointers through `&self`.
unsafe impl Sync for Pinned {}

impl Pinned {
    /// Pins `count` pages of the calling process from `addr` and DMA-maps
    /// them for `dev`.
    ///
    /// # Errors
    ///
    /// `EFAULT` (a page is not mapped, or not writable when `write`),
    /// `ENOMEM`, or the errno of the pin or the DMA mapping.
    fn new(dev: &Device, addr: u64, count: usize, write: bool) -> Result<Pinned> {
        // Every allocation before the pin: once pages are pinned, only
        // `Pinned`'s drop gives them back.
        let mut pages = KVec::with_capacity(count, GFP_KERNEL)?;
        // SAFETY: An all-zero `sg_table` is the empty table the allocation
        // below starts from.
        let sgt = KBox::new(unsafe { core::mem::zeroed() }, GFP_KERNEL)?;
        let flags = bindings::FOLL_LONGTERM | if write { bindings::FOLL_WRITE } else { 0 };
        let n = i32::try_from(count).map_err(|_| EINVAL)?;
        let start = usize::try_from(addr).map_err(|_| EFAULT)?;
        // SAFETY: `pages` has room for `count` pointers; the call writes at
        // most `n` of them and returns how many it pinned (or an errno). It
        // is called from an ioctl, in the process whose memory it pins.
        let got = unsafe { bindings::pin_user_pages_fast(start, n, flags, pages.as_mut_ptr()) };
        let got = usize::try_from(got).map_err(|_| Error::from_errno(got))?;
        // SAFETY: The call initialised the first `got` entries.
        unsafe { pages.inc_len(got) };
        PINNED_PAGES.fetch_add(got as i64, Relaxed);
        // From here on the pins are owned by `this`, released by its drop.
        let mut this = Pinned {
            pages,
            sgt,
            dma: None,
            write,
        };
        if got != count {
            return Err(EFAULT);
        }
        let size = u32::try_from(count * PAGE_4K as usize).map_err(|_| EINVAL)?;
        // SAFETY: `sgt` is an empty table; `pages` holds `count` pinned
        // pages; segments are at most 2 GiB - 4 KiB (page aligned).
        let r = unsafe {
            bindings::sg_alloc_table_from_pages_segment(
                &mut *this.sgt,
                this.pages.as_mut_ptr(),
                count as u32,
                0,
                size as usize,
                0x7fff_f000,
                bindings::GFP_KERNEL,
            )
        };
        kernel::error::to_result(r)?;
        // SAFETY: `dev` is a live device (borrowed for the call) and the
        // table was filled above.
        let r = unsafe {
            bindings::dma_map_sgtable(
                raw_dev(dev),
                &mut *this.sgt,
                bindings::dma_data_direction_DMA_BIDIRECTIONAL,
                0,
            )
        };
        kernel::error::to_result(r)?;
        this.dma = Some(dev.into());
        Ok(this)
    }

    /// The DMA segments, in address order.
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    fn segments(&self) -> Result<KVec<gem::Seg>> {
        // SAFETY: The table is DMA-mapped (by `new`) and neither changed nor
        // freed while `self` is borrowed.
        gem::read_segments(unsafe { SGTable::from_raw(core::ptr::from_ref(&*self.sgt).cast_mut()) })
    }

    /// Gives the DMA mapping back (idempotent).
    fn release_dma(&mut self) {
        if let Some(dev) = self.dma.take() {
            // SAFETY: The table was mapped for `dev` by `new` with the same
            // direction and is unmapped once (`dma` is now `None`).
            unsafe {
                bindings::dma_unmap_sgtable(
                    raw_dev(&dev),
                    &mut *self.sgt,
                    bindings::dma_data_direction_DMA_BIDIRECTIONAL,
                    0,
                )
            };
        }
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        self.release_dma();
        // SAFETY: The table is either empty (all zero, which the kernel
        // frees as nothing) or was allocated by
        // `sg_alloc_table_from_pages_segment`; it is no longer mapped.
        unsafe { bindings::sg_free_table(&mut *self.sgt) };
        // SAFETY: `pages` holds exactly the pages this object pinned, each
        // once; they are unpinned once.
        unsafe {
            bindings::unpin_user_pages_dirty_lock(
                self.pages.as_mut_ptr(),
                self.pages.len(),
                self.write,
            )
        };
        PINNED_PAGES.fetch_sub(self.pages.len() as i64, Relaxed);
    }
}

/// One host mapping.
pub(crate) struct HostMap {
    va: u64,
    size: u64,
    /// The sanitizer's declaration of its pages (given back first).
    _decl: Option<Arc<Declared>>,
    pinned: Pinned,
    _charge: MemCharge,
}

/// A file's host mappings, in VA order.
pub(crate) struct HostMaps {
    maps: KVec<HostMap>,
    /// Mappings whose TLB invalidation failed: unmapped, still pinned, until
    /// the file goes.
    retired: KVec<HostMap>,
}

impl HostMaps {
    /// No mapping.
    pub(crate) fn new() -> HostMaps {
        HostMaps {
            maps: KVec::new(),
            retired: KVec::new(),
        }
    }

    /// Bytes mapped (retired mappings included: they are still pinned).
    pub(crate) fn bytes(&self) -> u64 {
        Iterator::chain(self.maps.iter(), self.retired.iter())
            .map(|m| m.size)
            .sum()
    }

    /// Mappings, for debugfs.
    pub(crate) fn count(&self) -> usize {
        self.maps.len()
    }

    /// The first free VA of `size` bytes in the window starting at `base`
    /// (2 MiB aligned) that is `phase` bytes past a 2 MiB boundary, so that
    /// memory `phase` bytes past one can use 2 MiB pages.
    fn place(&self, base: u64, size: u64, phase: u64) -> Option<(usize, u64)> {
        let fit = |at: u64| (at - phase).next_multiple_of(PAGE_2M) + phase;
        let mut at = base;
        for (i, m) in self.maps.iter().enumerate() {
            let va = fit(at);
            if va.checked_add(size)? <= m.va {
                return Some((i, va));
            }
            at = m.va + m.size;
        }
        let va = fit(at);
        (va.checked_add(size)? <= base + WINDOW_SIZE).then_some((self.maps.len(), va))
    }

    /// Gives every mapping's DMA mapping back (unbind: the device is gone).
    pub(crate) fn release_dma(&mut self) {
        for m in Iterator::chain(self.maps.iter_mut(), self.retired.iter_mut()) {
            m.pinned.release_dma();
        }
    }

    /// Keeps a mapping whose invalidation failed (or that may have been
    /// reached half-written) until the file goes.
    pub(crate) fn retire(&mut self, m: HostMap) {
        if self.retired.reserve(1, GFP_KERNEL).is_err() {
            // If even this allocation fails the mapping is leaked, its pages
            // pinned for good: never given back while a stale translation
            // may still reach them.
            core::mem::forget(m);
            return;
        }
        // Room was reserved: this push does not fail.
        let _ = self.retired.push_within_capacity(m);
    }
}

/// What [`map`] needs from its caller: the device and one file.
pub(crate) struct MapArgs<'a> {
    /// The device, for DMA.
    pub(crate) dev: &'a Device,
    /// The device's GEM memory account.
    pub(crate) device_mem: Arc<gem::MemAccount>,
    /// The file's GEM memory account.
    pub(crate) file_mem: Arc<gem::MemAccount>,
    /// The file's host mappings.
    pub(crate) host: &'a Mutex<HostMaps>,
    /// The file's address space.
    pub(crate) vm: &'a Mutex<Vm>,
}

/// `HOST_MAP`: pins and maps `args.size` bytes at `args.addr` of the
/// calling process in the file's VM; returns the GPU VA.
///
/// # Errors
///
/// `EINVAL` (flags, pad, alignment, size), `EFAULT` (pages not mapped or
/// not writable), `ENOMEM` (the device's GEM memory, or allocations),
/// `ENOSPC` (the file's GEM memory, or [`uapi::VGPU_HOST_MAP_MAX_TOTAL`]).
pub(crate) fn map(ma: MapArgs<'_>, args: &uapi::drm_vgpu_host_map) -> Result<u64> {
    let size = args.size;
    if args.flags & !uapi::VGPU_HOST_MAP_FLAGS != 0
        || args.pad != 0
        || size == 0
        || size > u64::from(uapi::VGPU_HOST_MAP_MAX_SIZE)
        || (args.addr | size) % PAGE_4K != 0
        || args.addr.checked_add(size).is_none()
    {
        return Err(EINVAL);
    }
    let write = args.flags & uapi::VGPU_HOST_MAP_READ_ONLY == 0;
    let perms = if write {
        PTE_READ | PTE_WRITE
    } else {
        PTE_READ
    };
    let count = usize::try_from(size / PAGE_4K).map_err(|_| EINVAL)?;
    let bytes = usize::try_from(size).map_err(|_| EINVAL)?;
    let charge = MemCharge::new(bytes, ma.device_mem, ma.file_mem)?;
    let pinned = Pinned::new(ma.dev, args.addr, count, write)?;
    let segs = pinned.segments()?;
    // Declared before any entry is written, with no lock held.
    let san = ma.vm.lock().san();
    let decl = match san {
        Some(s) => Some(s.declare(crate::sanmem::ranges_of(&segs, 0, size)?)?),
        None => None,
    };
    let mut host = ma.host.lock();
    if host.bytes().saturating_add(size) > u64::from(uapi::VGPU_HOST_MAP_MAX_TOTAL) {
        return Err(ENOSPC);
    }
    // Room first, so that nothing can fail once entries are written.
    host.maps.reserve(1, GFP_KERNEL)?;
    let mut vm = ma.vm.lock();
    let base = vm.user_range().1 + WINDOW_OFFSET;
    let phase = segs.first().map_or(0, |s| s.addr % PAGE_2M);
    let (i, va) = host.place(base, size, phase).ok_or(ENOSPC)?;
    let m = HostMap {
        va,
        size,
        _decl: decl,
        pinned,
        _charge: charge,
    };
    if let Err(e) = vm.map_kmd_segs(va, &segs, size, perms) {
        // Entries written so far are cleared; no job has been told this VA,
        // but a context may have reached it meanwhile: the pages stay
        // pinned with the file ([`HostMaps::retire`]).
        vm.unmap_kmd(va, size);
        drop(vm);
        host.retire(m);
        return Err(e);
    }
    drop(vm);
    if let Err(e) = host.maps.insert_within_capacity(i, m) {
        // Not reached: room was reserved and `i` is at most the length. The
        // entries are written: cleared, the pages kept as after a failure.
        let (InsertError::IndexOutOfBounds(m) | InsertError::OutOfCapacity(m)) = e;
        ma.vm.lock().unmap_kmd(va, size);
        host.retire(m);
        return Err(ENOMEM);
    }
    Ok(va)
}

/// `HOST_UNMAP`: clears the mapping at `va` from the file's VM and
/// returns it; the caller invalidates the TLBs, then drops it (or retires
/// it if an invalidation failed).
///
/// # Errors
///
/// `ENOENT` (no host mapping starts at `va`).
pub(crate) fn unmap(host: &Mutex<HostMaps>, vm: &Mutex<Vm>, va: u64) -> Result<HostMap> {
    let mut host = host.lock();
    let i = host.maps.iter().position(|m| m.va == va).ok_or(ENOENT)?;
    let m = host.maps.remove(i).map_err(|_| ENOENT)?;
    vm.lock().unmap_kmd(m.va, m.size);
    Ok(m)
}

impl HostMap {
    /// Its VA range.
    pub(crate) fn range(&self) -> (u64, u64) {
        (self.va, self.size)
    }
}
