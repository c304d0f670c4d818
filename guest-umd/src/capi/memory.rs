//! Buffers: allocation, freeing, their addresses, sharing as dma-bufs.

use std::ffi::{c_int, c_void};
use std::sync::Arc;

use super::handles::*;
use super::*;
use crate::context::{MemKind, Placement};

/// `vgpu_mem_alloc`.
///
/// # Safety
/// `out` is null or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn vgpu_mem_alloc(ctx: u64, size: u64, kind: u32, out: *mut u64) -> Status {
    let call = "vgpu_mem_alloc";
    let out = out!(call, out);
    let (c, _) = get!(call, ctx, Context);
    let kind = match kind {
        0 => MemKind::DeviceLocal,
        1 => MemKind::HostVisible,
        k => {
            return fail(
                call,
                VGPU_ERROR_INVALID_ARGUMENT,
                format!("memory kind {k}"),
            )
        }
    };
    match c.alloc(size, kind) {
        Ok(b) => {
            let h = insert(T_BUFFER, Obj::Buffer(Arc::new(b)), ctx);
            // SAFETY: non-null and valid for writes per the contract.
            unsafe { *out = h };
            VGPU_SUCCESS
        }
        Err(e) => err(e),
    }
}

/// `vgpu_mem_free`.
#[no_mangle]
pub extern "C" fn vgpu_mem_free(buf: u64) -> Status {
    match remove("vgpu_mem_free", buf, T_BUFFER) {
        Ok(o) => {
            drop(o);
            VGPU_SUCCESS
        }
        Err(s) => s,
    }
}

/// `vgpu_mem_va`.
///
/// # Safety
/// `va` is null or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn vgpu_mem_va(buf: u64, va: *mut u64) -> Status {
    let call = "vgpu_mem_va";
    let va = out!(call, va);
    let (b, _) = get!(call, buf, Buffer);
    // SAFETY: non-null and valid for writes per the contract.
    unsafe { *va = b.va() };
    VGPU_SUCCESS
}

/// `vgpu_mem_host_ptr`.
///
/// # Safety
/// `ptr` is null or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn vgpu_mem_host_ptr(buf: u64, ptr: *mut *mut c_void) -> Status {
    let call = "vgpu_mem_host_ptr";
    let ptr = out!(call, ptr);
    let (b, _) = get!(call, buf, Buffer);
    match b.host_ptr() {
        Ok(p) => {
            // SAFETY: non-null and valid for writes per the contract.
            unsafe { *ptr = p.cast() };
            VGPU_SUCCESS
        }
        Err(e) => err(e),
    }
}

/// `kind` as a [`MemKind`].
fn mem_kind(call: &str, kind: u32) -> Result<MemKind, Status> {
    match kind {
        0 => Ok(MemKind::DeviceLocal),
        1 => Ok(MemKind::HostVisible),
        k => Err(fail(
            call,
            VGPU_ERROR_INVALID_ARGUMENT,
            format!("memory kind {k}"),
        )),
    }
}

/// `vgpu_mem_alloc_shared`.
///
/// # Safety
/// `out` is null or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn vgpu_mem_alloc_shared(
    ctx: u64,
    size: u64,
    kind: u32,
    out: *mut u64,
) -> Status {
    let call = "vgpu_mem_alloc_shared";
    let out = out!(call, out);
    let (c, _) = get!(call, ctx, Context);
    let kind = match mem_kind(call, kind) {
        Ok(k) => k,
        Err(s) => return s,
    };
    match c.alloc_shared(size, kind) {
        // SAFETY: `out` is non-null and valid per the contract.
        Ok(b) => unsafe { give(out, T_BUFFER, Obj::Buffer(Arc::new(b)), ctx) },
        Err(e) => err(e),
    }
}

/// `vgpu_mem_alloc_placed`.
///
/// # Safety
/// `out` is null or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn vgpu_mem_alloc_placed(
    ctx: u64,
    size: u64,
    kind: u32,
    placement: u32,
    out: *mut u64,
) -> Status {
    let call = "vgpu_mem_alloc_placed";
    let out = out!(call, out);
    let (c, _) = get!(call, ctx, Context);
    let kind = match mem_kind(call, kind) {
        Ok(k) => k,
        Err(s) => return s,
    };
    let placement = match placement {
        0 => Placement::System,
        1 => Placement::Vram,
        2 => Placement::VramPreferred,
        p => return fail(call, VGPU_ERROR_INVALID_ARGUMENT, format!("placement {p}")),
    };
    match c.alloc_placed(size, kind, placement) {
        // SAFETY: `out` is non-null and valid per the contract.
        Ok(b) => unsafe { give(out, T_BUFFER, Obj::Buffer(Arc::new(b)), ctx) },
        Err(e) => err(e),
    }
}

/// `vgpu_mem_export_fd`.
///
/// # Safety
/// `fd` is null or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn vgpu_mem_export_fd(buf: u64, fd: *mut c_int) -> Status {
    let call = "vgpu_mem_export_fd";
    let fd = out!(call, fd);
    let (b, _) = get!(call, buf, Buffer);
    match b.export_fd() {
        // SAFETY: `fd` is non-null and valid per the contract.
        Ok(f) => unsafe { give_fd(fd, f) },
        Err(e) => err(e),
    }
}

/// `vgpu_mem_import_fd`.
///
/// # Safety
/// `out` is null or valid for writes; `fd` is an open fd of the caller.
#[no_mangle]
pub unsafe extern "C" fn vgpu_mem_import_fd(
    ctx: u64,
    fd: c_int,
    kind: u32,
    out: *mut u64,
) -> Status {
    let call = "vgpu_mem_import_fd";
    let out = out!(call, out);
    let (c, _) = get!(call, ctx, Context);
    let kind = match mem_kind(call, kind) {
        Ok(k) => k,
        Err(s) => return s,
    };
    let fd = match borrowed(call, fd) {
        Ok(f) => f,
        Err(s) => return s,
    };
    match c.import_buffer(fd, kind) {
        // SAFETY: `out` is non-null and valid per the contract.
        Ok(b) => unsafe { give(out, T_BUFFER, Obj::Buffer(Arc::new(b)), ctx) },
        Err(e) => err(e),
    }
}
