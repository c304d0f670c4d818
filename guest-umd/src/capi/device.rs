//! `vgpu_status_string`, `vgpu_last_error`, devices and contexts.

use std::ffi::{c_char, CStr};

use super::handles::*;
use super::*;
use crate::context::{Context, LostReason};
use crate::device::devices;
use crate::error::Error;

/// `vgpu_status_string`.
#[no_mangle]
pub extern "C" fn vgpu_status_string(status: Status) -> *const c_char {
    let s: &'static CStr = match status {
        VGPU_SUCCESS => c"success",
        VGPU_ERROR_INVALID_ARGUMENT => c"invalid argument",
        VGPU_ERROR_INVALID_HANDLE => c"invalid handle (destroyed, or of another type)",
        VGPU_ERROR_NO_DEVICE => c"no vgpu device",
        VGPU_ERROR_OUT_OF_MEMORY => c"out of GPU memory or address space",
        VGPU_ERROR_NOT_FOUND => c"not found",
        VGPU_ERROR_NOT_READY => c"not ready",
        VGPU_ERROR_INVALID_MODULE => c"invalid module",
        VGPU_ERROR_CONTEXT_LOST => c"context lost (fault, hang or reset)",
        VGPU_ERROR_DEVICE_LOST => c"device lost",
        VGPU_ERROR_KMD => c"the kernel driver refused the request",
        VGPU_ERROR_CONFIG => c"malformed VGPU_* environment variable",
        _ => c"unknown status",
    };
    s.as_ptr()
}

/// `vgpu_last_error`.
#[no_mangle]
pub extern "C" fn vgpu_last_error() -> *const c_char {
    LAST.with(|l| l.borrow().as_ptr())
}

/// `vgpu_device_count`.
///
/// # Safety
/// `count` is null or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn vgpu_device_count(count: *mut u32) -> Status {
    let count = out!("vgpu_device_count", count);
    // SAFETY: non-null and valid for writes per the contract.
    unsafe { *count = devices().len() as u32 };
    VGPU_SUCCESS
}

/// `vgpu_device_properties_get`.
///
/// # Safety
/// `out` is null or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn vgpu_device_properties_get(
    index: u32,
    out: *mut VgpuDeviceProperties,
) -> Status {
    let call = "vgpu_device_properties_get";
    let out = out!(call, out);
    let Some(d) = devices().into_iter().nth(index as usize) else {
        return fail(
            call,
            VGPU_ERROR_NO_DEVICE,
            format!("no vgpu device {index}"),
        );
    };
    match d.identity() {
        Ok(id) => {
            let p = VgpuDeviceProperties {
                generation: id.generation,
                compute_units: id.compute_units,
                engine_mask: id.engine_mask,
                page_sizes: id.page_sizes,
                va_bits: id.va_bits,
                max_contexts: id.max_contexts,
                protocol_version: id.protocol_version,
                firmware_version: id.firmware_version,
                device_id: id.device_id,
                pad: 0,
            };
            // SAFETY: non-null and valid for writes per the contract.
            unsafe { *out = p };
            VGPU_SUCCESS
        }
        Err(e) => err(e),
    }
}

/// `vgpu_device_stats_get`.
///
/// # Safety
/// `out` is null or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn vgpu_device_stats_get(index: u32, out: *mut VgpuDeviceStats) -> Status {
    let call = "vgpu_device_stats_get";
    let out = out!(call, out);
    let Some(d) = devices().into_iter().nth(index as usize) else {
        return fail(
            call,
            VGPU_ERROR_NO_DEVICE,
            format!("no vgpu device {index}"),
        );
    };
    match d.stats() {
        Ok(s) => {
            let p = VgpuDeviceStats {
                sample_ns: s.sample_ns,
                engine_busy_ns: [s.engines[0].busy_ns, s.engines[1].busy_ns],
                mem_bytes: s.mem_bytes,
                mem_objects: s.mem_objects,
                pt_bytes: s.pt_bytes,
                engine_resets: s.engine_resets,
                device_resets: s.device_resets,
                hangs: s.hangs,
                faults: s.faults,
                wedged: u32::from(s.wedged),
                num_contexts: s.total_contexts,
            };
            // SAFETY: non-null and valid for writes per the contract.
            unsafe { *out = p };
            VGPU_SUCCESS
        }
        Err(e) => err(e),
    }
}

/// `vgpu_context_create`.
///
/// # Safety
/// `out` is null or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn vgpu_context_create(device_index: u32, out: *mut u64) -> Status {
    let call = "vgpu_context_create";
    let out = out!(call, out);
    let Some(d) = devices().into_iter().nth(device_index as usize) else {
        return fail(
            call,
            VGPU_ERROR_NO_DEVICE,
            format!("no vgpu device {device_index}"),
        );
    };
    match Context::on(&d) {
        Ok(c) => {
            let h = insert(T_CONTEXT, Obj::Context(c), 0);
            // SAFETY: non-null and valid for writes per the contract.
            unsafe { *out = h };
            VGPU_SUCCESS
        }
        Err(e) => err(e),
    }
}

/// `vgpu_context_destroy`: also destroys every object of the context.
#[no_mangle]
pub extern "C" fn vgpu_context_destroy(ctx: u64) -> Status {
    let call = "vgpu_context_destroy";
    let (c, _) = get!(call, ctx, Context);
    let r = c.synchronize();
    let removed: Vec<(Obj, u64)> = {
        let mut t = table().lock().unwrap();
        let ids: Vec<u64> = t
            .objs
            .iter()
            .filter(|(_, (_, o))| *o == ctx)
            .map(|(h, _)| *h)
            .collect();
        let mut v: Vec<(Obj, u64)> = ids.iter().filter_map(|h| t.objs.remove(h)).collect();
        v.extend(t.objs.remove(&ctx));
        v
    };
    drop(removed);
    match r {
        Ok(()) | Err(Error::Lost { .. }) => VGPU_SUCCESS,
        Err(e) => err(e),
    }
}

/// `vgpu_context_synchronize`.
#[no_mangle]
pub extern "C" fn vgpu_context_synchronize(ctx: u64) -> Status {
    let (c, _) = get!("vgpu_context_synchronize", ctx, Context);
    done(c.synchronize())
}

/// `vgpu_context_status`.
///
/// # Safety
/// `out` is null or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn vgpu_context_status(ctx: u64, out: *mut VgpuContextState) -> Status {
    let call = "vgpu_context_status";
    let out = out!(call, out);
    let (c, _) = get!(call, ctx, Context);
    let mut s = VgpuContextState::default();
    if let Some((kctx, r)) = c.status() {
        s.kmd_context = kctx;
        s.reason = match r {
            LostReason::PageFault { va, access, .. } => {
                s.fault_va = va;
                s.fault_access = access;
                lost::PAGE_FAULT
            }
            LostReason::Hang { hangs } => {
                s.hangs = hangs;
                lost::HANG
            }
            LostReason::Banned => lost::BANNED,
            LostReason::Innocent => lost::INNOCENT,
            LostReason::EngineError { .. } => lost::ENGINE_ERROR,
            LostReason::Wedged => lost::WEDGED,
            LostReason::Removed => lost::REMOVED,
            LostReason::DeviceLost => lost::DEVICE_LOST,
        };
    }
    // SAFETY: non-null and valid for writes per the contract.
    unsafe { *out = s };
    VGPU_SUCCESS
}
