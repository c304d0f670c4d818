//! Modules (`vgpu-as` images or source), kernels and launches.

use std::ffi::{c_char, c_void, CStr};

use super::handles::*;
use super::*;
use crate::module::{Arg, Module};

fn add_module(ctx: u64, r: crate::error::Result<Module>, out: *mut u64) -> Status {
    match r {
        Ok(m) => {
            let h = insert(T_MODULE, Obj::Module(m), ctx);
            // SAFETY: callers checked `out` is non-null and writable.
            unsafe { *out = h };
            VGPU_SUCCESS
        }
        Err(e) => err(e),
    }
}

/// `vgpu_module_load`.
///
/// # Safety
/// `image` points to `size` readable bytes; `out` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn vgpu_module_load(
    ctx: u64,
    image: *const c_void,
    size: usize,
    out: *mut u64,
) -> Status {
    let call = "vgpu_module_load";
    let out = out!(call, out);
    let (c, _) = get!(call, ctx, Context);
    let bytes = match host_slice(call, image, size as u64) {
        Ok(b) => b,
        Err(st) => return st,
    };
    add_module(ctx, Module::load(&c, bytes), out)
}

/// `vgpu_module_assemble`.
///
/// # Safety
/// `source` is null or a NUL-terminated string; `out` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn vgpu_module_assemble(
    ctx: u64,
    source: *const c_char,
    out: *mut u64,
) -> Status {
    let call = "vgpu_module_assemble";
    let out = out!(call, out);
    let (c, _) = get!(call, ctx, Context);
    if source.is_null() {
        return fail(call, VGPU_ERROR_INVALID_ARGUMENT, "null source".into());
    }
    // SAFETY: non-null, NUL-terminated per the contract.
    let src = unsafe { CStr::from_ptr(source) }.to_string_lossy();
    add_module(ctx, Module::assemble(&c, &src), out)
}

/// `vgpu_module_unload`.
#[no_mangle]
pub extern "C" fn vgpu_module_unload(m: u64) -> Status {
    match remove("vgpu_module_unload", m, T_MODULE) {
        Ok(o) => {
            drop(o);
            VGPU_SUCCESS
        }
        Err(s) => s,
    }
}

/// `vgpu_module_kernel`.
///
/// # Safety
/// `name` is null or NUL-terminated; `kernel` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn vgpu_module_kernel(
    m: u64,
    name: *const c_char,
    kernel: *mut u32,
) -> Status {
    let call = "vgpu_module_kernel";
    let kernel = out!(call, kernel);
    let (m, _) = get!(call, m, Module);
    if name.is_null() {
        return fail(call, VGPU_ERROR_INVALID_ARGUMENT, "null name".into());
    }
    // SAFETY: non-null, NUL-terminated per the contract.
    let n = unsafe { CStr::from_ptr(name) }.to_string_lossy();
    match m.kernel(&n) {
        Ok(k) => {
            let idx = m
                .kernel_names()
                .iter()
                .position(|x| *x == k.info().name)
                .unwrap_or(0);
            // SAFETY: non-null and writable per the contract.
            unsafe { *kernel = idx as u32 };
            VGPU_SUCCESS
        }
        Err(e) => err(e),
    }
}

/// Converts C arguments.
pub fn convert_args(args: &[VgpuArg]) -> Result<Vec<Arg>, String> {
    args.iter()
        .enumerate()
        .map(|(i, a)| {
            if a.pad != 0 {
                return Err(format!("argument {i}: pad must be zero"));
            }
            let lo = a.bits as u32;
            Ok(match a.kind {
                1 => Arg::U32(lo),
                2 => Arg::I32(lo as i32),
                3 => Arg::F32(f32::from_bits(lo)),
                4 => Arg::U64(a.bits),
                5 => Arg::Ptr(a.bits),
                k => return Err(format!("argument {i}: unknown kind {k}")),
            })
        })
        .collect()
}

/// `vgpu_launch`.
///
/// # Safety
/// `grid` points to 3 values; `wg` is null or points to 3; `args` points to
/// `num_args` values (or is null with `num_args` 0).
#[no_mangle]
pub unsafe extern "C" fn vgpu_launch(
    s: u64,
    m: u64,
    kernel: u32,
    grid: *const u32,
    wg: *const u32,
    args: *const VgpuArg,
    num_args: u32,
) -> Status {
    let call = "vgpu_launch";
    let (s, _) = get!(call, s, Stream);
    let (m, _) = get!(call, m, Module);
    if grid.is_null() || (args.is_null() && num_args > 0) {
        return fail(
            call,
            VGPU_ERROR_INVALID_ARGUMENT,
            "null grid or arguments".into(),
        );
    }
    let names = m.kernel_names();
    let Some(name) = names.get(kernel as usize) else {
        return fail(
            call,
            VGPU_ERROR_NOT_FOUND,
            format!("kernel index {kernel} (module has {})", names.len()),
        );
    };
    let k = match m.kernel(name) {
        Ok(k) => k,
        Err(e) => return err(e),
    };
    // SAFETY: `grid` points to 3 values per the contract.
    let g = unsafe { [*grid, *grid.add(1), *grid.add(2)] };
    // SAFETY: `wg` is null or points to 3 values per the contract.
    let w = (!wg.is_null()).then(|| unsafe { [*wg, *wg.add(1), *wg.add(2)] });
    let a = if num_args == 0 {
        &[][..]
    } else {
        // SAFETY: non-null, `num_args` values per the contract.
        unsafe { std::slice::from_raw_parts(args, num_args as usize) }
    };
    let a = match convert_args(a) {
        Ok(a) => a,
        Err(msg) => return fail(call, VGPU_ERROR_INVALID_ARGUMENT, msg),
    };
    done(s.launch(&k, g, w, &a))
}
