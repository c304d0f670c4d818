//! Timelines: DRM timeline sync objects shared between processes.

use std::ffi::c_int;
use std::sync::Arc;

use super::handles::*;
use super::*;
use crate::error::Error;
use crate::sync::Timeline;

/// `vgpu_timeline_create`.
///
/// # Safety
/// `out` is null or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn vgpu_timeline_create(ctx: u64, out: *mut u64) -> Status {
    let call = "vgpu_timeline_create";
    let out = out!(call, out);
    let (c, _) = get!(call, ctx, Context);
    match Timeline::new(&c) {
        // SAFETY: `out` is non-null and valid per the contract.
        Ok(t) => unsafe { give(out, T_TIMELINE, Obj::Timeline(Arc::new(t)), ctx) },
        Err(e) => err(e),
    }
}

/// `vgpu_timeline_destroy`.
#[no_mangle]
pub extern "C" fn vgpu_timeline_destroy(tl: u64) -> Status {
    match remove("vgpu_timeline_destroy", tl, T_TIMELINE) {
        Ok(o) => {
            drop(o);
            VGPU_SUCCESS
        }
        Err(s) => s,
    }
}

/// `vgpu_timeline_export_fd`.
///
/// # Safety
/// `fd` is null or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn vgpu_timeline_export_fd(tl: u64, fd: *mut c_int) -> Status {
    let call = "vgpu_timeline_export_fd";
    let fd = out!(call, fd);
    let (t, _) = get!(call, tl, Timeline);
    match t.export_fd() {
        // SAFETY: `fd` is non-null and valid per the contract.
        Ok(f) => unsafe { give_fd(fd, f) },
        Err(e) => err(e),
    }
}

/// `vgpu_timeline_import_fd`.
///
/// # Safety
/// `out` is null or valid for writes; `fd` is an open fd of the caller.
#[no_mangle]
pub unsafe extern "C" fn vgpu_timeline_import_fd(ctx: u64, fd: c_int, out: *mut u64) -> Status {
    let call = "vgpu_timeline_import_fd";
    let out = out!(call, out);
    let (c, _) = get!(call, ctx, Context);
    let fd = match borrowed(call, fd) {
        Ok(f) => f,
        Err(s) => return s,
    };
    match Timeline::import_fd(&c, fd) {
        // SAFETY: `out` is non-null and valid per the contract.
        Ok(t) => unsafe { give(out, T_TIMELINE, Obj::Timeline(Arc::new(t)), ctx) },
        Err(e) => err(e),
    }
}

/// `vgpu_timeline_signal`.
#[no_mangle]
pub extern "C" fn vgpu_timeline_signal(tl: u64, point: u64) -> Status {
    let (t, _) = get!("vgpu_timeline_signal", tl, Timeline);
    done(t.signal(point))
}

/// `vgpu_timeline_wait`: `VGPU_ERROR_NOT_READY` on timeout.
#[no_mangle]
pub extern "C" fn vgpu_timeline_wait(tl: u64, point: u64, timeout_ns: u64) -> Status {
    let (t, _) = get!("vgpu_timeline_wait", tl, Timeline);
    let timeout = (timeout_ns != u64::MAX).then(|| std::time::Duration::from_nanos(timeout_ns));
    match t.wait(point, timeout) {
        Ok(()) => VGPU_SUCCESS,
        Err(Error::Kmd { source, .. })
            if source.errno == libc::ETIME || source.errno == libc::ETIMEDOUT =>
        {
            VGPU_ERROR_NOT_READY
        }
        Err(e) => err(e),
    }
}

/// `vgpu_timeline_value`.
///
/// # Safety
/// `point` is null or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn vgpu_timeline_value(tl: u64, point: *mut u64) -> Status {
    let call = "vgpu_timeline_value";
    let point = out!(call, point);
    let (t, _) = get!(call, tl, Timeline);
    match t.value() {
        Ok(v) => {
            // SAFETY: non-null and valid for writes per the contract.
            unsafe { *point = v };
            VGPU_SUCCESS
        }
        Err(e) => err(e),
    }
}
