// SPDX-License-Identifier: GPL-2.0

//! The GEM object operations of a VRAM object: its CPU mapping goes
//! through the aperture, never to shmem pages, and it is not exported.
//!
//! A VRAM object is a shmem object ([`crate::gem::Bo`]) whose
//! `drm_gem_object_funcs` are replaced at creation ([`install`]) by a copy
//! of the shmem helper's with:
//!
//! * `mmap`: the object's VRAM blocks mapped write-combined through the
//!   aperture BAR (`remap_pfn_range`, the whole object at once: a
//!   CPU-mappable object is entirely in the CPU-visible part, so there is
//!   nothing to fault in); `ENXIO` for one that is not;
//! * `vm_ops`: the GEM core's reference counting only (`drm_gem_vm_open`,
//!   `drm_gem_vm_close`), not the shmem helper's, which would allocate
//!   pages;
//! * `export`, `get_sg_table`, `vmap`, `pin`: `EOPNOTSUPP` (a dma-buf of
//!   device memory would need peer-to-peer DMA).
//!
//! The free, open, close and print callbacks stay the helper's, so the
//! object is freed like any other.

use crate::{errno::eopnotsupp, gem::Bo};
use kernel::{
    bindings,
    drm::gem::IntoGEMObject,
    ffi::c_int,
    prelude::*,
    sync::SetOnce, //
};

/// A static operations table (raw pointers: shared read-only).
struct Funcs(bindings::drm_gem_object_funcs);

// SAFETY: The table is written once (populated) and then only read; its
// pointers are to functions and to a static.
unsafe impl Send for Funcs {}
// SAFETY: As above.
unsafe impl Sync for Funcs {}

/// The VRAM objects' operations, made from the first object's.
static VRAM_FUNCS: SetOnce<Funcs> = SetOnce::new();

/// `vm_operations_struct` of a VRAM object's CPU mapping.
struct VmOps(bindings::vm_operations_struct);

// SAFETY: Immutable after compilation; function pointers only.
unsafe impl Sync for VmOps {}

static VRAM_VM_OPS: VmOps = VmOps(bindings::vm_operations_struct {
    open: Some(bindings::drm_gem_vm_open),
    close: Some(bindings::drm_gem_vm_close),
    // SAFETY: All other members are optional callbacks and plain data, for
    // which zero is "none".
    ..unsafe { core::mem::zeroed() }
});

/// `-errno` as a C error pointer.
fn err_ptr<T>(e: Error) -> *mut T {
    // ERR_PTR: a negative errno in the pointer's bits.
    core::ptr::without_provenance_mut(e.to_errno() as isize as usize)
}

/// `export`: refused.
extern "C" fn vram_export(
    _obj: *mut bindings::drm_gem_object,
    _flags: c_int,
) -> *mut bindings::dma_buf {
    err_ptr(eopnotsupp())
}

/// `get_sg_table`: refused (there are no pages).
extern "C" fn vram_get_sg_table(_obj: *mut bindings::drm_gem_object) -> *mut bindings::sg_table {
    err_ptr(eopnotsupp())
}

/// `vmap`: refused.
extern "C" fn vram_vmap(
    _obj: *mut bindings::drm_gem_object,
    _map: *mut bindings::iosys_map,
) -> c_int {
    eopnotsupp().to_errno()
}

/// `pin`: refused (only dma-buf attachments pin).
extern "C" fn vram_pin(_obj: *mut bindings::drm_gem_object) -> c_int {
    eopnotsupp().to_errno()
}

/// `mmap`: the object's blocks through the aperture.
///
/// # Safety
///
/// Called by `drm_gem_mmap_obj` with a live object of this driver that
/// [`install`] made a VRAM object, and a VMA of at most the object's size.
unsafe extern "C" fn vram_mmap(
    obj: *mut bindings::drm_gem_object,
    vma: *mut bindings::vm_area_struct,
) -> c_int {
    // SAFETY: Only VRAM objects, which are `Bo`s, have these operations;
    // the caller holds a reference for the call.
    let bo: &Bo = unsafe { <Bo as IntoGEMObject>::from_raw(obj) };
    if bo.vram().is_none() {
        // Evicted: its shmem pages, mapped as the helper maps any shmem
        // object (with the helper's VMA operations, which hold the pages).
        // SAFETY: `vma` is the VMA being set up (see above); the object is
        // a shmem object with its pages in system memory, and
        // `drm_gem_shmem_vm_ops` is a static of the helper.
        return unsafe {
            (*vma).vm_ops = &raw const bindings::drm_gem_shmem_vm_ops;
            bindings::drm_gem_shmem_object_mmap(obj, vma)
        };
    }
    match map_aperture(bo, vma) {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    }
}

/// Maps `bo`'s blocks in `vma` (see [`vram_mmap`]).
///
/// # Errors
///
/// `ENXIO` (not in the CPU-visible part, or no aperture), or the errno of
/// `remap_pfn_range`.
fn map_aperture(bo: &Bo, vma: *mut bindings::vm_area_struct) -> Result {
    let place = bo.vram();
    let v = place.as_ref().ok_or(ENXIO)?;
    let base = v.aperture.filter(|_| v.alloc.is_visible()).ok_or(ENXIO)?;
    // SAFETY: `vma` is the VMA being set up by `mmap`, exclusively ours for
    // the call (the mmap lock is held for writing).
    let (start, end) = unsafe {
        let r = &(*vma).__bindgen_anon_1.__bindgen_anon_1;
        (r.vm_start, r.vm_end)
    };
    let mut left = (end - start) as u64;
    let mut at = start;
    // SAFETY: As above; the protection is the one the core derived from
    // the VMA's flags, made write-combined (the aperture is a prefetchable
    // memory BAR, as a discrete GPU's).
    let prot = unsafe {
        let p = bindings::pgprot_writecombine((*vma).vm_page_prot);
        (*vma).vm_page_prot = p;
        p
    };
    for (off, len) in v.alloc.blocks() {
        if left == 0 {
            break;
        }
        let n = len.min(left);
        let phys = base.checked_add(off).ok_or(ENXIO)?;
        // SAFETY: `[at, at + n)` is inside the VMA (n <= what is left of
        // it); `phys..phys + n` is the aperture's window on this object's
        // own VRAM block (visible: below the BAR's length, checked when
        // the aperture was found); `remap_pfn_range` marks the VMA
        // `VM_IO | VM_PFNMAP | VM_DONTEXPAND | VM_DONTDUMP`.
        let r = unsafe {
            bindings::remap_pfn_range(
                vma,
                at,
                (phys >> bindings::PAGE_SHIFT) as usize,
                n as usize,
                prot,
            )
        };
        if r != 0 {
            return Err(Error::from_errno(r));
        }
        at += n as usize;
        left -= n;
    }
    Ok(())
}

/// Gives `bo`, just created in VRAM and not yet visible to anyone, the
/// VRAM object operations (see the module documentation).
///
/// # Safety
///
/// `bo` has no handle, mapping or export yet: no other thread reads its
/// operations.
pub(crate) unsafe fn install(bo: &Bo) {
    let raw = bo.as_raw();
    // A populate racing on another CPU finishes in a few instructions.
    while VRAM_FUNCS.as_ref().is_none() {
        // SAFETY: `raw` is live; its `funcs` is the shmem helper's static
        // table, copied (identical for every object of this type, so a
        // racing populate stores the same table).
        let mut f = unsafe { *(*raw).funcs };
        f.mmap = Some(vram_mmap);
        f.vm_ops = &raw const VRAM_VM_OPS.0;
        f.export = Some(vram_export);
        f.get_sg_table = Some(vram_get_sg_table);
        f.vmap = Some(vram_vmap);
        f.vunmap = None;
        f.pin = Some(vram_pin);
        f.unpin = None;
        let _ = VRAM_FUNCS.populate(Funcs(f));
        core::hint::spin_loop();
    }
    if let Some(f) = VRAM_FUNCS.as_ref() {
        // SAFETY: The object is not shared yet (the caller's guarantee);
        // the table is static and never changes once populated.
        unsafe { (*raw).funcs = &raw const f.0 };
    }
}
