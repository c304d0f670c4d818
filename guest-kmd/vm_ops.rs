// SPDX-License-Identifier: GPL-2.0

//! VM_BIND on GPUVM: requests checked and turned into GPUVM calls, and the
//! steps GPUVM asks for applied to the page tables.
//!
//! A request is one map (`VM_BIND`, or a `VM_BIND_OPS` map) or one unmap
//! (`VM_UNBIND`, a `VM_BIND_OPS` unmap). [`Vm::prepare_map`] and
//! [`Vm::prepare_unmap`] check it and pin the object's pages before
//! anything changes; [`Vm::apply_ops`] hands it to GPUVM (`sm_map`,
//! `sm_unmap`), which calls back, in order, for every mapping the request
//! touches:
//!
//! * `unmap` (a mapping entirely inside the range): its entries are
//!   cleared, it leaves the tree;
//! * `remap` (a mapping that straddles an end of the range): the part
//!   inside the range is cleared (2 MiB pages cut by it split first), the
//!   parts outside stay mapped, as new mappings of the same object;
//! * `map` (the new mapping, last): entries written, tables first.
//!
//! Every step allocates what it needs before it changes anything, so a
//! step that fails leaves the page tables and GPUVM in agreement; steps
//! before it stay applied. What a request removed ([`Unmapped`]: the
//! mappings with their references on their objects, and the VA range whose
//! translations changed) is dropped by the caller only after the TLBs of
//! the address space's contexts were invalidated.

use crate::{
    gem::{
        self,
        Bo,
        Seg, //
    },
    mmu::{
        PTE_EXEC,
        PTE_READ,
        PTE_WRITE, //
    },
    pr_warn_ratelimited,
    sanmem::Declared,
    vm::{
        Attr,
        Backing,
        BindArgs,
        BoPages,
        Vm,
        VmData,
        MAX_MAPPINGS,
        PAGE_4K, //
    },
};
use kernel::{
    drm::{
        gem::BaseObject,
        gpuvm::{
            GpuVaAlloc,
            GpuVaRemoved,
            OpMap,
            OpMapRequest,
            OpMapped,
            OpRemap,
            OpRemapped,
            OpUnmap,
            OpUnmapped, //
        },
    },
    prelude::*,
    sync::{
        aref::ARef,
        Arc, //
    },
    uapi,
};

/// What requests removed: the mappings (each holding its reference on its
/// object), their sanitizer declarations, and the VA range whose
/// translations changed. Drop it only after the TLBs were invalidated for
/// [`Unmapped::range`]; if that failed, give it to [`Vm::retire`].
pub(crate) struct Unmapped {
    vas: KVec<GpuVaRemoved<VmData>>,
    decls: KVec<Arc<Declared>>,
    lo: u64,
    hi: u64,
}

impl Unmapped {
    /// Nothing removed yet.
    pub(crate) fn new() -> Unmapped {
        Unmapped {
            vas: KVec::new(),
            decls: KVec::new(),
            lo: u64::MAX,
            hi: 0,
        }
    }

    fn note(&mut self, from: u64, to: u64) {
        if from < to {
            self.lo = self.lo.min(from);
            self.hi = self.hi.max(to);
        }
    }

    /// `(va, size)` of the range whose translations changed, if any.
    pub(crate) fn range(&self) -> Option<(u64, u64)> {
        (self.lo < self.hi).then(|| (self.lo, self.hi - self.lo))
    }

    /// Keeps a removed mapping's declaration (room reserved by the step).
    fn keep_decl(&mut self, d: Option<Arc<Declared>>) {
        if let Some(d) = d {
            let _ = self.decls.push_within_capacity(d);
        }
    }
}

/// The map request a [`StepCtx`] carries.
pub(crate) struct MapReq<'a> {
    perms: u64,
    handle: u32,
    /// The object's pages; `None` for a lazy object (mapped on faults).
    segs: Option<&'a [Seg]>,
    /// Those pages declared to the device's sanitizer.
    decl: Option<Arc<Declared>>,
}

/// The context of GPUVM's steps (`DriverGpuVm::SmContext`).
pub(crate) struct StepCtx<'a> {
    map: Option<MapReq<'a>>,
    out: &'a mut Unmapped,
}

/// A map, checked, its object's pages pinned.
pub(crate) struct PreparedMap {
    bo: ARef<Bo>,
    handle: u32,
    perms: u64,
    bo_offset: u64,
    va: u64,
    size: u64,
    segs: Option<KVec<Seg>>,
    decl: Option<Arc<Declared>>,
}

/// A checked request of `VM_BIND_OPS`.
pub(crate) enum PreparedOp {
    Map(PreparedMap),
    Unmap { va: u64, size: u64 },
}

impl VmData {
    fn insert_attr(&mut self, a: Attr) {
        let i = self.attrs.partition_point(|x| x.va < a.va);
        // Room was reserved by the step.
        let _ = self.attrs.insert_within_capacity(i, a);
    }

    fn remove_attr(&mut self, va: u64) -> Option<Attr> {
        let i = self.attrs.partition_point(|x| x.va < va);
        if self.attrs.get(i).is_some_and(|a| a.va == va) {
            self.attrs.remove(i).ok()
        } else {
            None
        }
    }

    /// GPUVM's `map` step: the new mapping's entries (none for a lazy
    /// object), then the mapping.
    pub(crate) fn step_map<'op>(
        &mut self,
        op: OpMap<'op, VmData>,
        c: &mut StepCtx<'_>,
    ) -> Result<OpMapped<'op, VmData>> {
        let req = c.map.as_ref().ok_or(EINVAL)?;
        let alloc = GpuVaAlloc::new(GFP_KERNEL)?;
        self.attrs.reserve(1, GFP_KERNEL)?;
        let (va, len) = (op.addr(), op.length());
        if let Some(segs) = req.segs {
            let b = Backing {
                va,
                gem_offset: op.gem_offset(),
                segs,
                perms: req.perms,
            };
            self.pt.populate(&b, va, va + len)?;
        }
        self.insert_attr(Attr {
            va,
            perms: req.perms,
            handle: req.handle,
            decl: req.decl.clone(),
        });
        let bo: ARef<Bo> = op.obj().into();
        Ok(op.insert(alloc, bo))
    }

    /// GPUVM's `unmap` step: the mapping's entries cleared, the mapping
    /// removed (kept in the context until the TLBs are invalidated).
    pub(crate) fn step_unmap<'op>(
        &mut self,
        op: OpUnmap<'op, VmData>,
        c: &mut StepCtx<'_>,
    ) -> Result<OpUnmapped<'op, VmData>> {
        c.out.vas.reserve(1, GFP_KERNEL)?;
        c.out.decls.reserve(1, GFP_KERNEL)?;
        let (s, e) = (op.va().addr(), op.va().addr() + op.va().length());
        self.pt.clear(s, e);
        c.out.note(s, e);
        let decl = self.remove_attr(s).and_then(|a| a.decl);
        c.out.keep_decl(decl);
        let (done, removed) = op.remove();
        // Room was reserved above.
        let _ = c.out.vas.push(removed, GFP_KERNEL);
        Ok(done)
    }

    /// GPUVM's `remap` step: the part of a mapping inside the request's
    /// range is cleared; the parts before and after it stay mapped where
    /// they were, as new mappings with the same attributes.
    pub(crate) fn step_remap<'op>(
        &mut self,
        op: OpRemap<'op, VmData>,
        c: &mut StepCtx<'_>,
    ) -> Result<OpRemapped<'op, VmData>> {
        let (s, e) = {
            let va = op.va_to_unmap();
            (va.addr(), va.addr() + va.length())
        };
        let prev = op.prev().map(|p| p.addr());
        let next = op.next().map(|n| n.addr());
        let hole_s = op.prev().map_or(s, |p| p.addr() + p.length());
        let hole_e = next.unwrap_or(e);
        let allocs = [GpuVaAlloc::new(GFP_KERNEL)?, GpuVaAlloc::new(GFP_KERNEL)?];
        c.out.vas.reserve(1, GFP_KERNEL)?;
        c.out.decls.reserve(1, GFP_KERNEL)?;
        self.attrs.reserve(2, GFP_KERNEL)?;
        self.attr(s).ok_or(EINVAL)?;
        // Splitting keeps every translation: nothing changed if it fails.
        self.pt.split_huge_at(hole_s)?;
        self.pt.split_huge_at(hole_e)?;
        self.pt.clear(hole_s, hole_e);
        c.out.note(hole_s, hole_e);
        let attr = self.remove_attr(s).ok_or(EINVAL)?;
        // The parts left share the declaration: the pages stay declared
        // while any part maps them.
        for va in [prev, next].into_iter().flatten() {
            self.insert_attr(Attr {
                va,
                decl: attr.decl.clone(),
                ..attr
            });
        }
        c.out.keep_decl(attr.decl);
        let bo: ARef<Bo> = op.obj().into();
        let (done, ret) = op.remap(allocs, bo.clone(), bo);
        // Room was reserved above.
        let _ = c.out.vas.push(ret.unmapped_va, GFP_KERNEL);
        drop(ret.unused_va);
        Ok(done)
    }
}

/// `VGPU_VM_BIND_*` flags as page-table permissions.
fn perms_of(flags: u32) -> u64 {
    let mut perms = 0;
    if flags & uapi::VGPU_VM_BIND_READ != 0 {
        perms |= PTE_READ;
    }
    if flags & uapi::VGPU_VM_BIND_WRITE != 0 {
        perms |= PTE_WRITE;
    }
    if flags & uapi::VGPU_VM_BIND_EXEC != 0 {
        perms |= PTE_EXEC;
    }
    perms
}

impl Vm {
    /// Checks a range: 4 KiB aligned, non-zero, inside the user VA range.
    fn check_range(&self, va: u64, size: u64) -> Result {
        if (va | size) % PAGE_4K != 0 || size == 0 {
            return Err(EINVAL);
        }
        let (start, end) = self.user_range();
        let va_end = va.checked_add(size).ok_or(EINVAL)?;
        if va < start || va_end > end {
            return Err(EINVAL);
        }
        Ok(())
    }

    /// Checks the arguments of a map of `bo` (nothing about the VM's
    /// state).
    ///
    /// # Errors
    ///
    /// `EINVAL` (no permission or unknown flags, alignment, a range outside
    /// the object or the user VA range).
    pub(crate) fn check_map(
        &self,
        flags: u32,
        bo_offset: u64,
        va: u64,
        size: u64,
        bo: &Bo,
    ) -> Result {
        if flags & !uapi::VGPU_VM_BIND_FLAGS != 0 || flags == 0 || bo_offset % PAGE_4K != 0 {
            return Err(EINVAL);
        }
        self.check_range(va, size)?;
        let bo_end = bo_offset.checked_add(size).ok_or(EINVAL)?;
        if bo_end > bo.size() as u64 {
            return Err(EINVAL);
        }
        Ok(())
    }

    /// A checked map of `bo` with its pages pinned (none for a lazy object).
    ///
    /// # Errors
    ///
    /// As [`Vm::check_map`]; `EIO` (a bad object, or one holding a retired
    /// page), `ENOMEM` (its pages). `decl` is the declaration of the pages
    /// to the device's sanitizer, made before the address space was locked
    /// ([`crate::device::Vgpu::declare_pages`]).
    #[expect(clippy::too_many_arguments)]
    pub(crate) fn prepare_map(
        &self,
        handle: u32,
        flags: u32,
        bo_offset: u64,
        va: u64,
        size: u64,
        bo: ARef<Bo>,
        decl: Option<Arc<Declared>>,
    ) -> Result<PreparedMap> {
        self.check_map(flags, bo_offset, va, size, &bo)?;
        if bo.is_bad() || bo.is_lost() {
            return Err(EIO);
        }
        let segs = if bo.lazy() {
            None
        } else {
            let segs = gem::segments(&bo)?;
            Vm::check_retired(&self.pt().bad_pages, &bo, &segs, handle)?;
            Some(segs)
        };
        Ok(PreparedMap {
            bo,
            handle,
            perms: perms_of(flags),
            bo_offset,
            va,
            size,
            segs,
            decl,
        })
    }

    /// A checked unmap.
    ///
    /// # Errors
    ///
    /// `EINVAL` (alignment, range).
    pub(crate) fn prepare_unmap(&self, va: u64, size: u64) -> Result<PreparedOp> {
        self.check_range(va, size)?;
        Ok(PreparedOp::Unmap { va, size })
    }

    /// The number of mappings after a map (`map`) or an unmap of
    /// `[va, va + size)`.
    fn count_after(&self, va: u64, size: u64, map: bool) -> usize {
        let end = va + size;
        let mut inside = 0;
        let mut kept = 0;
        for m in crate::ffi_gpuvm::mappings(&self.gpuvm, va, end) {
            inside += 1;
            kept += usize::from(m.addr() < va) + usize::from(m.addr() + m.length() > end);
        }
        self.mapping_count() - inside + kept + usize::from(map)
    }

    /// Applies a checked map: whatever was mapped in its range is unmapped
    /// (split where needed) into `out`.
    ///
    /// # Errors
    ///
    /// `ENOSPC` (mappings), `ENOMEM` (tables, bookkeeping).
    pub(crate) fn apply_map(&mut self, p: PreparedMap, out: &mut Unmapped) -> Result {
        if self.count_after(p.va, p.size, true) > MAX_MAPPINGS {
            return Err(ENOSPC);
        }
        let vm_bo = self.gpuvm.obtain(&p.bo, BoPages::new())?;
        let lazy = p.segs.is_none();
        // A VRAM object can move (crate::placement): its pages are read
        // again now, under this address space's lock, which a move takes to
        // rewrite the object's mappings, and never cached.
        let fresh = match !lazy && p.bo.is_vram_object() {
            true => Some(gem::segments(&p.bo)?),
            false => None,
        };
        if let (Some(segs), None) = (p.segs, &fresh) {
            vm_bo.data().set_segs(segs);
        }
        let segs = match (lazy, &fresh) {
            (true, _) => None,
            (false, Some(f)) => Some(&f[..]),
            (false, None) => Some(vm_bo.data().segs().ok_or(EINVAL)?),
        };
        let mut ctx = StepCtx {
            map: Some(MapReq {
                perms: p.perms,
                handle: p.handle,
                segs,
                decl: p.decl,
            }),
            out,
        };
        let r = self.gpuvm.sm_map(OpMapRequest {
            addr: p.va,
            range: p.size,
            gem_offset: p.bo_offset,
            vm_bo: &vm_bo,
            context: &mut ctx,
        });
        drop(vm_bo);
        self.gpuvm.deferred_cleanup();
        r
    }

    /// Unmaps whatever is mapped in `[va, va + size)` into `out`.
    ///
    /// # Errors
    ///
    /// `ENOSPC` (a split would pass the mapping limit), `ENOMEM`.
    pub(crate) fn apply_unmap(&mut self, va: u64, size: u64, out: &mut Unmapped) -> Result {
        if self.count_after(va, size, false) > MAX_MAPPINGS {
            return Err(ENOSPC);
        }
        let mut ctx = StepCtx { map: None, out };
        let r = self.gpuvm.sm_unmap(va, size, &mut ctx);
        self.gpuvm.deferred_cleanup();
        r
    }

    /// Applies checked requests in order; stops at the first that fails
    /// (the ones before it stay applied). What they removed goes to `out`.
    ///
    /// # Errors
    ///
    /// The failing request's errno (`ENOSPC`, `ENOMEM`).
    pub(crate) fn apply_ops(&mut self, ops: KVec<PreparedOp>, out: &mut Unmapped) -> Result {
        for op in ops {
            match op {
                PreparedOp::Map(p) => self.apply_map(p, out)?,
                PreparedOp::Unmap { va, size } => self.apply_unmap(va, size, out)?,
            }
        }
        Ok(())
    }

    /// Checks and maps a range of a buffer object (`VM_BIND`): a range
    /// overlapping a mapping is refused.
    ///
    /// # Errors
    ///
    /// `EINVAL` (flags, alignment, range), `EEXIST` (overlap), `ENOSPC`
    /// (mappings), `EIO` (a bad object), `ENOMEM`. `decl`: as
    /// [`Vm::prepare_map`].
    pub(crate) fn bind(
        &mut self,
        a: BindArgs,
        bo: ARef<Bo>,
        decl: Option<Arc<Declared>>,
    ) -> Result {
        self.check_map(a.flags, a.bo_offset, a.va, a.size, &bo)?;
        if self.va_overlapping(a.va, a.size) {
            return Err(EEXIST);
        }
        if self.mapping_count() >= MAX_MAPPINGS {
            return Err(ENOSPC);
        }
        let op = self.prepare_map(a.handle, a.flags, a.bo_offset, a.va, a.size, bo, decl)?;
        // Nothing overlaps: nothing is unmapped.
        let mut out = Unmapped::new();
        self.apply_map(op, &mut out)
    }

    /// Removes the mapping `[va, va + size)` (`VM_UNBIND`: exactly one
    /// mapping with exactly this range) and clears its entries. The caller
    /// invalidates the TLBs and then drops (or, if that failed,
    /// [`Vm::retire`]s) what was unmapped.
    ///
    /// # Errors
    ///
    /// `ENOENT` (no such mapping), `ENOMEM`.
    pub(crate) fn unbind(&mut self, va: u64, size: u64) -> Result<Unmapped> {
        match self.va_at(va) {
            Some(m) if m.addr() == va && m.length() == size => {}
            _ => return Err(ENOENT),
        }
        let mut out = Unmapped::new();
        self.apply_unmap(va, size, &mut out)?;
        Ok(out)
    }

    /// Keeps what was unmapped alive until the address space goes, after a
    /// failed TLB invalidation.
    pub(crate) fn retire(&mut self, u: Unmapped) {
        for d in u.decls {
            // If even this allocation fails the declaration is leaked: its
            // pages stay declared, never given back early.
            if self.retired_decls.reserve(1, GFP_KERNEL).is_err() {
                core::mem::forget(d);
                continue;
            }
            // Room was reserved: this push does not fail.
            let _ = self.retired_decls.push_within_capacity(d);
        }
        for bo in u.vas.into_iter().map(GpuVaRemoved::into_inner) {
            // If even this allocation fails the reference is leaked, never
            // dropped early.
            if self.retired.push(bo.clone(), GFP_KERNEL).is_err() {
                core::mem::forget(bo);
            }
        }
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        // The owner destroyed every context of this address space first:
        // the device no longer walks these tables, so nothing needs an
        // invalidation. Every mapping goes (GPUVM must be empty when it is
        // freed), with its reference on its object.
        let (start, end) = self.user_range();
        let mut out = Unmapped::new();
        if self.apply_unmap(start, end - start, &mut out).is_err() {
            pr_warn_ratelimited!("vgpu: an address space could not be emptied at destruction\n");
        }
        drop(out);
        self.gpuvm.deferred_cleanup();
    }
}
