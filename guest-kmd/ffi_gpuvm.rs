// SPDX-License-Identifier: GPL-2.0

//! Lookups in a GPUVM's interval tree, which the pinned kernel's Rust GPUVM
//! abstraction does not offer (it changes the tree through `sm_map` and
//! `sm_unmap` only): the first mapping overlapping a range
//! (`drm_gpuva_find_first`), and an iterator over a range built on it;
//! and the GEM side's list of mappings, which the DRM core initialises only
//! for drivers with `DRIVER_GEM_GPUVA` — a feature bit the abstraction
//! never sets ([`gem_gpuva_init`]).

use kernel::{
    bindings,
    drm::gem::IntoGEMObject,
    drm::gpuvm::{
        DriverGpuVm,
        GpuVa,
        UniqueRefGpuVm, //
    },
};

/// The first mapping of `vm` that overlaps `[addr, addr + len)` (`len` > 0,
/// no overflow).
///
/// The reference lives as long as the borrow of the unique VM reference:
/// mappings are removed only through `&mut` of it.
pub(crate) fn find_first<T: DriverGpuVm>(
    vm: &UniqueRefGpuVm<T>,
    addr: u64,
    len: u64,
) -> Option<&GpuVa<T>> {
    if len == 0 || addr.checked_add(len).is_none() {
        return None;
    }
    let raw = vm.as_raw();
    // SAFETY: `raw` is the live GPUVM of the unique reference we borrow, so
    // nobody changes its tree meanwhile; the lookup only reads it.
    let va = unsafe { bindings::drm_gpuva_find_first(raw, addr, len) };
    if va.is_null() {
        return None;
    }
    // SAFETY: `raw` is live; this only takes the address of a field.
    let reserved = unsafe { &raw mut (*raw).kernel_alloc_node };
    // SAFETY: `va` is in the tree, so it is a live `drm_gpuva`.
    let sparse = unsafe { (*va).flags } & bindings::drm_gpuva_flags_DRM_GPUVA_SPARSE != 0;
    if va == reserved || sparse {
        return None;
    }
    // SAFETY:
    // - `va` is a live mapping of `vm`, neither its reserved node nor
    //   sparse (checked), so the abstraction inserted it through `OpMap` or
    //   `OpRemap` with a `GpuVmBo<T>`, which keeps it in the GEM list;
    // - it stays in the tree while `vm` is borrowed (removals need `&mut`).
    Some(unsafe { GpuVa::<T>::from_raw(va) })
}

/// The mappings of `vm` overlapping `[from, to)`, in address order.
pub(crate) fn mappings<T: DriverGpuVm>(
    vm: &UniqueRefGpuVm<T>,
    from: u64,
    to: u64,
) -> impl Iterator<Item = &GpuVa<T>> {
    let mut at = from;
    core::iter::from_fn(move || {
        if at >= to {
            return None;
        }
        let va = find_first(vm, at, to - at)?;
        at = va.addr().saturating_add(va.length()).max(at + 1);
        Some(va)
    })
}

/// `drm_gem_gpuva_init()` for a new GEM object: an empty list of the
/// GPUVM mappings of the object (`obj->gpuva.list`), which
/// `drm_gpuvm_bo_obtain_prealloc` walks and links into. The DRM core does
/// this in `drm_gem_private_object_init` only for drivers with
/// `DRIVER_GEM_GPUVA`, which the pinned kernel's Rust `drm::Driver` never
/// sets; without it the first `obtain` follows a NULL list pointer.
///
/// # Safety
///
/// `obj` was just created: no GPUVM has seen it (no `GpuVmBo` of it exists)
/// and no other thread can reach it yet (it has no handle, no dma-buf).
pub(crate) unsafe fn gem_gpuva_init<O: IntoGEMObject>(obj: &O) {
    let raw = obj.as_raw();
    // SAFETY: `raw` is the live GEM object `obj` borrows; nothing else
    // reads or writes its gpuva list meanwhile (the caller's contract), so
    // plain writes initialise the list head as `INIT_LIST_HEAD` does.
    unsafe {
        let head = &raw mut (*raw).gpuva.list;
        (*head).next = head;
        (*head).prev = head;
    }
}
