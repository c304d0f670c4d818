// SPDX-License-Identifier: GPL-2.0

//! Per-file GPU address spaces: the page tables the device's MMU walks, and
//! the mappings, managed by DRM GPUVM.
//!
//! Each open render-node file has one [`Vm`]: a DRM GPUVM (the kernel's VA
//! manager, through its Rust abstraction) over the user VA range, whose
//! driver data ([`VmData`]) is a 4-level page table in the device's format
//! (`hwif/src/mmu.rs`) built from [`PtPool`] tables, plus each mapping's
//! permissions. GPUVM keeps the mappings (an interval tree, and per BO the
//! list of its mappings) and turns every map and unmap request into steps —
//! map, unmap, remap (split) — which [`crate::vm_ops`] applies to the page
//! tables; this file has the page tables and what reads the address space.
//! Ordering rules:
//!
//! * Map: every table the range needs is allocated (zeroed) and linked
//!   first; only then are the leaf entries written. A failed allocation
//!   leaves empty tables behind and no leaf entry.
//! * Unmap (and the hole a split cuts): the leaf entries are cleared, then
//!   the caller invalidates the TLBs of every context using the address
//!   space, and only then drops the removed mappings' references on their
//!   buffer objects (whose pages the device may have cached translations for
//!   until the invalidation).
//! * A split that cuts through a 2 MiB page first replaces it with a table of
//!   512 4 KiB entries for the same pages (the translation does not change),
//!   then clears the cut part.
//! * Tables are returned to the pool only when the address space is
//!   destroyed, after its contexts are gone.
//!
//! 2 MiB pages are used where the VA and the object's pages are both 2 MiB
//! aligned and physically contiguous over the whole 2 MiB.

pub(crate) use crate::pagetable::{
    va_user_end,
    Backing,
    PageTables,
    PAGE_2M,
    PAGE_4K,
    VA_KMD_RESERVED,
    VA_USER_START, //
};
use crate::{
    ffi_gpuvm,
    gem::{
        self,
        Bo,
        BoArgs,
        Seg, //
    },
    mmu::{
        level_index,
        CachePolicy,
        Pte,
        PTE_EXEC,
        PTE_READ,
        PTE_WRITE, //
    },
    pr_warn_ratelimited,
    ptpool::PtPool,
    ras::Retired,
    sanmem::{
        Declared,
        SanMem, //
    },
};
use core::fmt;
use kernel::{
    drm::{
        gem::{
            shmem::ObjectConfig,
            DriverObject, //
        },
        gpuvm::{
            GpuVa,
            GpuVm,
            GpuVmBo,
            UniqueRefGpuVm, //
        },
    },
    prelude::*,
    sync::{
        aref::ARef,
        Arc,
        SetOnce, //
    },
};

/// Mappings per address space.
pub(crate) const MAX_MAPPINGS: usize = 4096;

/// The DRM device type BOs and address spaces belong to.
pub(crate) type DrmDev = kernel::drm::Device<<gem::VgpuObject as DriverObject>::Driver>;

/// A mapping's attributes GPUVM does not keep.
#[derive(Clone)]
pub(crate) struct Attr {
    /// Start VA of the mapping.
    pub(crate) va: u64,
    /// `PTE_READ | PTE_WRITE | PTE_EXEC` subset.
    pub(crate) perms: u64,
    /// The GEM handle it was mapped through (for debugfs).
    pub(crate) handle: u32,
    /// Its pages declared to the device's sanitizer, shared by the parts a
    /// split leaves (given back when the last part is unmapped, after the
    /// TLB invalidation).
    pub(crate) decl: Option<Arc<Declared>>,
}

/// The GPUVM's driver data: page tables and mapping attributes. The
/// `DriverGpuVm` implementation (which names the DRM driver) is in
/// `drm.rs`; its steps are in [`crate::vm_ops`].
pub(crate) struct VmData {
    pub(crate) pt: PageTables,
    /// One entry per mapping, by start VA; changed only by the steps.
    pub(crate) attrs: KVec<Attr>,
}

impl VmData {
    /// The attributes of the mapping starting at `va`.
    pub(crate) fn attr(&self, va: u64) -> Option<&Attr> {
        let i = self.attrs.partition_point(|a| a.va < va);
        self.attrs.get(i).filter(|a| a.va == va)
    }
}

/// A mapping, as [`Vm::find`] and [`Vm::lookup_va`] report it.
pub(crate) struct MapInfo {
    pub(crate) va: u64,
    pub(crate) size: u64,
    /// `PTE_READ | PTE_WRITE | PTE_EXEC` subset.
    pub(crate) perms: u64,
}

/// A mapping as a devcoredump lists it ([`Vm::mappings`]).
pub(crate) struct MapSummary {
    pub(crate) va: u64,
    pub(crate) size: u64,
    /// The GEM handle it was mapped through.
    pub(crate) handle: u32,
    pub(crate) bo_offset: u64,
    /// `PTE_READ | PTE_WRITE | PTE_EXEC` subset.
    pub(crate) perms: u64,
    /// Pages filled in on first fault.
    pub(crate) lazy: bool,
}

/// A mapping and its object (for retiring a page).
pub(crate) struct Mapping {
    /// The object; the mapping holds a reference on it.
    pub(crate) bo: ARef<Bo>,
}

/// What `VM_BIND` asks for, validated by [`Vm::bind`].
pub(crate) struct BindArgs {
    pub(crate) handle: u32,
    pub(crate) flags: u32,
    pub(crate) bo_offset: u64,
    pub(crate) va: u64,
    pub(crate) size: u64,
}

/// A GPU address space.
pub(crate) struct Vm {
    pub(crate) gpuvm: UniqueRefGpuVm<VmData>,
    /// Objects of mappings whose TLB invalidation failed: the device may
    /// still hold translations to their pages, so they are kept (and stay
    /// declared to the sanitizer) until the address space is destroyed.
    pub(crate) retired: KVec<ARef<Bo>>,
    /// The sanitizer declarations of those objects' mappings.
    pub(crate) retired_decls: KVec<Arc<Declared>>,
    /// The device sanitizer's declarations, when it asks for them.
    san: Option<Arc<SanMem>>,
}

impl Vm {
    /// An empty address space of `va_bits` bits on DRM device `dev`.
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn new(
        dev: &DrmDev,
        pool: Arc<PtPool>,
        retired: Arc<Retired>,
        va_bits: u32,
        huge_pages: bool,
        san: Option<Arc<SanMem>>,
    ) -> Result<Vm> {
        let pt = PageTables::new(pool, retired, va_bits, huge_pages)?;
        let (start, end) = pt.user_range();
        // GPUVM's reservation object: a page-sized BO that is never
        // populated or charged (the shared dma_resv of the address space).
        let resv = Bo::new(
            dev,
            PAGE_4K as usize,
            ObjectConfig {
                map_wc: false,
                parent_resv_obj: None,
            },
            BoArgs {
                flags: 0,
                charge: None,
                vram: None,
                owner: 0,
            },
        )?;
        let data = VmData {
            pt,
            attrs: KVec::new(),
        };
        let gpuvm = GpuVm::new::<Error, _>(c"vgpu", dev, &*resv, start..end, 0..0, data)?;
        Ok(Vm {
            gpuvm,
            retired: KVec::new(),
            retired_decls: KVec::new(),
            san: san.filter(|s| s.on()),
        })
    }

    /// The sanitizer's declarations, when the device asks for them.
    pub(crate) fn san(&self) -> Option<Arc<SanMem>> {
        self.san.clone()
    }

    /// Gives the mapping containing `va` the declaration of its pages (a
    /// lazy mapping's, made after its first fault pinned them); a mapping
    /// declared already keeps its own.
    pub(crate) fn attach(&mut self, va: u64, d: Arc<Declared>) {
        let Some(start) = self.va_at(va).map(|m| m.addr()) else {
            return;
        };
        let attrs = &mut self.gpuvm.data().attrs;
        let i = attrs.partition_point(|a| a.va < start);
        if let Some(a) = attrs.get_mut(i).filter(|a| a.va == start) {
            a.decl.get_or_insert(d);
        }
    }

    /// The page tables.
    pub(crate) fn pt(&self) -> &PageTables {
        &self.gpuvm.data_ref().pt
    }

    /// Guest-physical address of the root table (`CONTEXT_CREATE`'s
    /// `pt_root`).
    pub(crate) fn root_addr(&self) -> u64 {
        self.pt().root_addr()
    }

    /// The user VA range `[start, end)`.
    pub(crate) fn user_range(&self) -> (u64, u64) {
        self.pt().user_range()
    }

    /// Number of mappings.
    pub(crate) fn mapping_count(&self) -> usize {
        self.gpuvm.data_ref().attrs.len()
    }

    /// Number of page tables.
    pub(crate) fn table_count(&self) -> usize {
        self.pt().tables
    }

    /// The mappings of the user range, by VA.
    pub(crate) fn mappings(&self) -> impl Iterator<Item = MapSummary> + '_ {
        let (start, end) = self.pt().user_range();
        ffi_gpuvm::mappings(&self.gpuvm, start, end).map(move |m| {
            let attr = self.gpuvm.data_ref().attr(m.addr());
            MapSummary {
                va: m.addr(),
                size: m.length(),
                handle: attr.map_or(0, |a| a.handle),
                bo_offset: m.gem_offset(),
                perms: attr.map_or(0, |a| a.perms),
                lazy: m.obj().lazy(),
            }
        })
    }

    /// The GPUVM mapping containing `va`, if any.
    pub(crate) fn va_at(&self, va: u64) -> Option<&GpuVa<VmData>> {
        ffi_gpuvm::find_first(&self.gpuvm, va, 1)
    }

    /// The mapping containing `va`, if any.
    pub(crate) fn find(&self, va: u64) -> Option<MapInfo> {
        let m = self.va_at(va)?;
        let perms = self.gpuvm.data_ref().attr(m.addr()).map_or(0, |a| a.perms);
        Some(MapInfo {
            va: m.addr(),
            size: m.length(),
            perms,
        })
    }

    /// The mapping holding `va`, and the guest-physical address `va`
    /// translates to through it (if its pages are pinned).
    pub(crate) fn lookup_va(&self, va: u64) -> Option<(Mapping, Option<u64>)> {
        let m = self.va_at(va)?;
        let fresh = object_segs(m.obj());
        let pa = fresh
            .as_deref()
            .or(m.vm_bo().data().segs())
            .and_then(|segs| gem::addr_at(segs, m.gem_offset() + (va - m.addr())))
            .map(|(pa, _)| pa);
        Some((Mapping { bo: m.obj().into() }, pa))
    }

    /// Refuses an object that is bad or holds a retired page: no GPU mapping
    /// points at a retired page.
    ///
    /// # Errors
    ///
    /// `EIO`.
    pub(crate) fn check_retired(bad: &Retired, bo: &Bo, segs: &[Seg], handle: u32) -> Result {
        if bo.is_bad() {
            return Err(EIO);
        }
        if let Some(p) = bad.first_in(segs) {
            pr_warn_ratelimited!(
                "vgpu: BO handle {} holds retired page {:#x}: not mapped\n",
                handle,
                p
            );
            return Err(EIO);
        }
        Ok(())
    }

    /// Whether a mapping overlaps `[va, va + size)`.
    pub(crate) fn va_overlapping(&self, va: u64, size: u64) -> bool {
        ffi_gpuvm::find_first(&self.gpuvm, va, size).is_some()
    }

    /// Maps the page containing `va` of a lazy mapping (a GPU fault).
    /// Returns the page-aligned VA mapped, and when the device's sanitizer
    /// wants the mapping's pages declared and they are not yet, the ranges
    /// to declare (then [`Vm::attach`] the declaration); `ENOENT` if `va` is
    /// not in a lazy mapping.
    pub(crate) fn fault_in(&mut self, va: u64) -> Result<(u64, Option<crate::sanmem::Ranges>)> {
        let page = va & !(PAGE_4K - 1);
        let (start, len, gem_offset, bo, vm_bo) = {
            let m = self.va_at(page).ok_or(ENOENT)?;
            if !m.obj().lazy() {
                return Err(ENOENT);
            }
            let bo: ARef<Bo> = m.obj().into();
            let vm_bo: ARef<GpuVmBo<VmData>> = m.vm_bo().into();
            (m.addr(), m.length(), m.gem_offset(), bo, vm_bo)
        };
        let attr = self.gpuvm.data_ref().attr(start).ok_or(ENOENT)?;
        let (perms, handle, declared) = (attr.perms, attr.handle, attr.decl.is_some());
        if vm_bo.data().segs().is_none() {
            vm_bo.data().set_segs(gem::segments(&bo)?);
        }
        // The mapping's vm_bo (a reference of our own) holds the pages.
        let segs = vm_bo.data().segs().ok_or(ENOMEM)?;
        let backing = Backing {
            va: start,
            gem_offset,
            segs,
            perms,
        };
        let declare = match self.san.is_some() && !declared {
            true => Some(crate::sanmem::ranges_of(segs, gem_offset, len)?),
            false => None,
        };
        let pt = &mut self.gpuvm.data().pt;
        Self::check_retired(&pt.bad_pages, &bo, segs, handle)?;
        pt.populate(&backing, page, page + PAGE_4K)?;
        Ok((page, declare))
    }

    /// Clears the entries of every mapping of `bo` (before it moves); the
    /// caller invalidates the TLBs, then [`Vm::rebind_object`] maps it
    /// where it is. Returns the number of mappings cleared.
    pub(crate) fn clear_object(&mut self, bo: &Bo) -> usize {
        let (start, end) = self.pt().user_range();
        let mut n = 0;
        let mut ranges: KVec<(u64, u64)> = KVec::new();
        for m in ffi_gpuvm::mappings(&self.gpuvm, start, end) {
            if core::ptr::eq(m.obj(), bo) && ranges.push((m.addr(), m.length()), GFP_KERNEL).is_ok()
            {
                n += 1;
            }
        }
        let pt = &mut self.gpuvm.data().pt;
        for &(va, len) in ranges.iter() {
            pt.clear(va, va + len);
        }
        n
    }

    /// Rewrites every mapping of `bo` (a VRAM object that moved) to where
    /// its pages are now ([`gem::segments`]), each with its new pages
    /// declared to the device's sanitizer when the mapping had a
    /// declaration. Returns the old declarations: the caller invalidates
    /// the TLBs, then drops them (unmap, invalidate, then release).
    ///
    /// # Errors
    ///
    /// `ENOMEM` (tables, declarations, or the object's pages): the
    /// mappings not yet rewritten are left cleared (a GPU access faults, no
    /// stale translation is left).
    pub(crate) fn rebind_object(&mut self, bo: &Bo) -> Result<KVec<Arc<Declared>>> {
        let (start, end) = self.pt().user_range();
        let mut maps = KVec::new();
        for m in ffi_gpuvm::mappings(&self.gpuvm, start, end) {
            if core::ptr::eq(m.obj(), bo) {
                let attr = self.gpuvm.data_ref().attr(m.addr());
                let perms = attr.map_or(0, |a| a.perms);
                let declared = attr.is_some_and(|a| a.decl.is_some());
                maps.push(
                    (m.addr(), m.length(), m.gem_offset(), perms, declared),
                    GFP_KERNEL,
                )?;
            }
        }
        let segs = gem::segments(bo)?;
        let mut old = KVec::with_capacity(maps.len(), GFP_KERNEL)?;
        let san = self.san.clone();
        for &(va, len, gem_offset, _, declared) in maps.iter() {
            let (Some(san), true) = (&san, declared) else {
                continue;
            };
            let ranges = crate::sanmem::ranges_of(&segs, gem_offset, len)?;
            let d = san.declare_tagged(ranges, crate::sanmem::Tag::of(bo))?;
            let attrs = &mut self.gpuvm.data().attrs;
            let i = attrs.partition_point(|a| a.va < va);
            if let Some(a) = attrs.get_mut(i).filter(|a| a.va == va) {
                if let Some(prev) = a.decl.replace(d) {
                    // Room was reserved above.
                    let _ = old.push(prev, GFP_KERNEL);
                }
            }
        }
        let pt = &mut self.gpuvm.data().pt;
        for &(va, len, _, _, _) in maps.iter() {
            pt.clear(va, va + len);
        }
        for &(va, len, gem_offset, perms, _) in maps.iter() {
            let b = Backing {
                va,
                gem_offset,
                segs: &segs,
                perms,
            };
            pt.populate(&b, va, va + len)?;
        }
        Ok(old)
    }

    /// Maps `size` bytes of KMD memory at DMA address `pa` (contiguous) at
    /// `va` in the KMD range. Tables first, then leaves.
    pub(crate) fn map_kmd(&mut self, va: u64, pa: u64, size: u64, perms: u64) -> Result {
        let pt = &mut self.gpuvm.data().pt;
        let end = va.checked_add(size).ok_or(EINVAL)?;
        if va < pt.user_range().1 || end > 1u64 << pt.va_bits || (va | pa | size) % PAGE_4K != 0 {
            return Err(EINVAL);
        }
        let mut v = va;
        while v < end {
            pt.ensure(v, 0)?;
            v += PAGE_4K;
        }
        let mut v = va;
        while v < end {
            let t = pt.lookup(v, 0).ok_or(EINVAL)?;
            pt.pool.write(
                t,
                level_index(v, 0),
                Pte::leaf(pa + (v - va), perms, CachePolicy::Cached),
            );
            v += PAGE_4K;
        }
        pt.kmd_pages += size / PAGE_4K;
        Ok(())
    }

    /// Maps `size` bytes at `va` in the KMD range onto memory whose pages
    /// are `segs` (in order, from offset 0): 2 MiB pages where the VA and the
    /// memory are both 2 MiB aligned and contiguous, 4 KiB pages elsewhere.
    /// Tables first, then leaves.
    ///
    /// # Errors
    ///
    /// `EINVAL` (a range outside the KMD range, alignment, `segs` shorter
    /// than `size`), `ENOMEM` (tables).
    pub(crate) fn map_kmd_segs(&mut self, va: u64, segs: &[Seg], size: u64, perms: u64) -> Result {
        let pt = &mut self.gpuvm.data().pt;
        let end = va.checked_add(size).ok_or(EINVAL)?;
        if va < pt.user_range().1 || end > 1u64 << pt.va_bits || (va | size) % PAGE_4K != 0 {
            return Err(EINVAL);
        }
        let backing = Backing {
            va,
            gem_offset: 0,
            segs,
            perms,
        };
        pt.populate(&backing, va, end)?;
        pt.kmd_pages += size / PAGE_4K;
        Ok(())
    }

    /// Clears a range mapped with [`Vm::map_kmd`] or [`Vm::map_kmd_segs`].
    /// The caller invalidates
    /// the TLBs of the address space's remaining contexts.
    pub(crate) fn unmap_kmd(&mut self, va: u64, size: u64) {
        let pt = &mut self.gpuvm.data().pt;
        pt.clear(va, va.saturating_add(size));
        pt.kmd_pages = pt.kmd_pages.saturating_sub(size / PAGE_4K);
    }

    /// Writes the address space for debugfs: every mapping, checked by
    /// walking the tables' real entries as the device would.
    pub(crate) fn dump(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pt = self.pt();
        let (start, end) = pt.user_range();
        writeln!(
            f,
            "vm root {:#x} va_bits {} user {:#x}..{:#x} tables {} mappings {} retired {} kmd_pages {} san_declared {}",
            pt.root_addr(),
            pt.va_bits,
            start,
            end,
            pt.tables,
            self.mapping_count(),
            self.retired.len(),
            pt.kmd_pages,
            self.gpuvm.data_ref().attrs.iter().filter(|a| a.decl.is_some()).count()
        )?;
        for m in ffi_gpuvm::mappings(&self.gpuvm, start, end) {
            let attr = self.gpuvm.data_ref().attr(m.addr());
            let perms = attr.map_or(0, |a| a.perms);
            let lazy = m.obj().lazy();
            let fresh = object_segs(m.obj());
            let segs = fresh.as_deref().or(m.vm_bo().data().segs());
            let backing = segs.map(|segs| Backing {
                va: m.addr(),
                gem_offset: m.gem_offset(),
                segs,
                perms,
            });
            let (bad, walked_4k, walked_2m) =
                pt.check(m.addr(), m.length(), backing.as_ref(), perms, lazy);
            writeln!(
                f,
                "  map va {:#x} size {:#x} handle {} bo_offset {:#x} perms {}{}{} lazy {} pages_4k {} pages_2m {} walk_4k {} walk_2m {} check {}",
                m.addr(),
                m.length(),
                attr.map_or(0, |a| a.handle),
                m.gem_offset(),
                if perms & PTE_READ != 0 { "r" } else { "-" },
                if perms & PTE_WRITE != 0 { "w" } else { "-" },
                if perms & PTE_EXEC != 0 { "x" } else { "-" },
                u8::from(lazy),
                walked_4k,
                walked_2m,
                walked_4k,
                walked_2m,
                match bad {
                    None => "ok",
                    Some(_) => "MISMATCH",
                }
            )?;
            if let Some(va) = bad {
                writeln!(f, "  mismatch at va {:#x}", va)?;
                pt.trace(va, f)?;
            }
        }
        Ok(())
    }
}

/// A VRAM object's pages now (it can move: they are not cached in its
/// [`BoPages`]); `None` for other objects, or if they cannot be read.
fn object_segs(bo: &Bo) -> Option<KVec<Seg>> {
    bo.is_vram_object()
        .then(|| gem::segments(bo).ok())
        .flatten()
}

/// The driver data of a (VM, object) pair (`drm_gpuvm_bo`): the object's
/// pages, once pinned (at the first non-lazy map, or the first fault of a
/// lazy one); they stay where they are until the object is freed.
pub(crate) struct BoPages {
    segs: SetOnce<KVec<Seg>>,
}

impl BoPages {
    /// No pages yet.
    pub(crate) fn new() -> BoPages {
        BoPages {
            segs: SetOnce::new(),
        }
    }

    /// The object's pages, once pinned.
    pub(crate) fn segs(&self) -> Option<&[Seg]> {
        self.segs.as_ref().map(|v| &v[..])
    }

    /// Records the object's pages (the first caller wins; every caller
    /// found the same pages: they stay pinned until the object is freed).
    pub(crate) fn set_segs(&self, segs: KVec<Seg>) {
        let _ = self.segs.populate(segs);
    }
}
