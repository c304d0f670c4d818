//! Events: record, query, synchronize, timing, sync_file export and
//! import.

use std::ffi::c_int;
use std::sync::Arc;

use super::handles::*;
use super::*;
use crate::stream::Event;

/// `vgpu_event_create`.
///
/// # Safety
/// `out` is null or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn vgpu_event_create(ctx: u64, out: *mut u64) -> Status {
    let call = "vgpu_event_create";
    let out = out!(call, out);
    let (c, _) = get!(call, ctx, Context);
    match Event::new(&c) {
        Ok(e) => {
            let h = insert(T_EVENT, Obj::Event(Arc::new(e)), ctx);
            // SAFETY: non-null and valid for writes per the contract.
            unsafe { *out = h };
            VGPU_SUCCESS
        }
        Err(e) => err(e),
    }
}

/// `vgpu_event_destroy`.
#[no_mangle]
pub extern "C" fn vgpu_event_destroy(ev: u64) -> Status {
    match remove("vgpu_event_destroy", ev, T_EVENT) {
        Ok(o) => {
            drop(o);
            VGPU_SUCCESS
        }
        Err(s) => s,
    }
}

/// `vgpu_event_record`.
#[no_mangle]
pub extern "C" fn vgpu_event_record(ev: u64, s: u64) -> Status {
    let call = "vgpu_event_record";
    let (e, _) = get!(call, ev, Event);
    let (s, _) = get!(call, s, Stream);
    done(s.record(&e))
}

/// `vgpu_event_query`.
#[no_mangle]
pub extern "C" fn vgpu_event_query(ev: u64) -> Status {
    let (e, _) = get!("vgpu_event_query", ev, Event);
    match e.query() {
        Ok(true) => VGPU_SUCCESS,
        Ok(false) => VGPU_ERROR_NOT_READY,
        Err(e) => err(e),
    }
}

/// `vgpu_event_synchronize`.
#[no_mangle]
pub extern "C" fn vgpu_event_synchronize(ev: u64) -> Status {
    let (e, _) = get!("vgpu_event_synchronize", ev, Event);
    done(e.synchronize())
}

/// `vgpu_event_elapsed_ns`.
///
/// # Safety
/// `ns` is null or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn vgpu_event_elapsed_ns(start: u64, end: u64, ns: *mut u64) -> Status {
    let call = "vgpu_event_elapsed_ns";
    let ns = out!(call, ns);
    let (a, _) = get!(call, start, Event);
    let (b, _) = get!(call, end, Event);
    match b.elapsed_since(&a) {
        Ok(d) => {
            // SAFETY: non-null and valid for writes per the contract.
            unsafe { *ns = d.as_nanos() as u64 };
            VGPU_SUCCESS
        }
        Err(e) => err(e),
    }
}

/// `vgpu_event_export_fd`.
///
/// # Safety
/// `fd` is null or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn vgpu_event_export_fd(ev: u64, fd: *mut c_int) -> Status {
    let call = "vgpu_event_export_fd";
    let fd = out!(call, fd);
    let (e, _) = get!(call, ev, Event);
    match e.export_fd() {
        // SAFETY: `fd` is non-null and valid per the contract.
        Ok(f) => unsafe { give_fd(fd, f) },
        Err(e) => err(e),
    }
}

/// `vgpu_event_import_fd`.
///
/// # Safety
/// `out` is null or valid for writes; `fd` is an open fd of the caller.
#[no_mangle]
pub unsafe extern "C" fn vgpu_event_import_fd(ctx: u64, fd: c_int, out: *mut u64) -> Status {
    let call = "vgpu_event_import_fd";
    let out = out!(call, out);
    let (c, _) = get!(call, ctx, Context);
    let fd = match borrowed(call, fd) {
        Ok(f) => f,
        Err(s) => return s,
    };
    match Event::import_fd(&c, fd) {
        // SAFETY: `out` is non-null and valid per the contract.
        Ok(e) => unsafe { give(out, T_EVENT, Obj::Event(Arc::new(e)), ctx) },
        Err(e) => err(e),
    }
}
