//! Streams, copies and fills, and a stream's waits for and signals of
//! timeline points.

use std::ffi::c_void;

use super::handles::*;
use super::*;
use crate::stream::Stream;

/// `vgpu_stream_create`.
///
/// # Safety
/// `out` is null or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn vgpu_stream_create(ctx: u64, out: *mut u64) -> Status {
    let call = "vgpu_stream_create";
    let out = out!(call, out);
    let (c, _) = get!(call, ctx, Context);
    match Stream::new(&c) {
        Ok(s) => {
            let h = insert(T_STREAM, Obj::Stream(s), ctx);
            // SAFETY: non-null and valid for writes per the contract.
            unsafe { *out = h };
            VGPU_SUCCESS
        }
        Err(e) => err(e),
    }
}

/// `vgpu_stream_destroy`.
#[no_mangle]
pub extern "C" fn vgpu_stream_destroy(s: u64) -> Status {
    match remove("vgpu_stream_destroy", s, T_STREAM) {
        Ok(Obj::Stream(s)) => done(s.destroy()),
        Ok(_) => unreachable!("typed handle"),
        Err(st) => st,
    }
}

/// `vgpu_stream_synchronize`.
#[no_mangle]
pub extern "C" fn vgpu_stream_synchronize(s: u64) -> Status {
    let (s, _) = get!("vgpu_stream_synchronize", s, Stream);
    done(s.synchronize())
}

/// `vgpu_stream_wait_event`.
#[no_mangle]
pub extern "C" fn vgpu_stream_wait_event(s: u64, ev: u64) -> Status {
    let call = "vgpu_stream_wait_event";
    let (s, _) = get!(call, s, Stream);
    let (e, _) = get!(call, ev, Event);
    done(s.wait_event(&e))
}

/// `vgpu_memset_async`.
#[no_mangle]
pub extern "C" fn vgpu_memset_async(s: u64, dst: u64, offset: u64, value: u8, len: u64) -> Status {
    let call = "vgpu_memset_async";
    let (s, _) = get!(call, s, Stream);
    let (b, _) = get!(call, dst, Buffer);
    done(s.memset(&b, offset, value, len))
}

/// `vgpu_memcpy_htod_async`.
///
/// # Safety
/// `src` points to `len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn vgpu_memcpy_htod_async(
    s: u64,
    dst: u64,
    offset: u64,
    src: *const c_void,
    len: u64,
) -> Status {
    let call = "vgpu_memcpy_htod_async";
    let (s, _) = get!(call, s, Stream);
    let (b, _) = get!(call, dst, Buffer);
    let data = match host_slice(call, src, len) {
        Ok(d) => d,
        Err(st) => return st,
    };
    done(s.write(&b, offset, data))
}

/// `vgpu_memcpy_htod`.
///
/// # Safety
/// `src` points to `len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn vgpu_memcpy_htod(
    s: u64,
    dst: u64,
    offset: u64,
    src: *const c_void,
    len: u64,
) -> Status {
    // SAFETY: forwarded contract.
    let st = unsafe { vgpu_memcpy_htod_async(s, dst, offset, src, len) };
    if st != VGPU_SUCCESS {
        return st;
    }
    vgpu_stream_synchronize(s)
}

/// `vgpu_memcpy_dtoh`.
///
/// # Safety
/// `dst` points to `len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn vgpu_memcpy_dtoh(
    s: u64,
    dst: *mut c_void,
    src: u64,
    offset: u64,
    len: u64,
) -> Status {
    let call = "vgpu_memcpy_dtoh";
    let (s, _) = get!(call, s, Stream);
    let (b, _) = get!(call, src, Buffer);
    if dst.is_null() || len > isize::MAX as u64 {
        return fail(
            call,
            VGPU_ERROR_INVALID_ARGUMENT,
            "null host pointer".into(),
        );
    }
    // SAFETY: the caller passes `len` writable bytes at `dst`.
    let out = unsafe { std::slice::from_raw_parts_mut(dst.cast::<u8>(), len as usize) };
    done(s.read(&b, offset, out))
}

/// `vgpu_memcpy_dtod_async`.
#[no_mangle]
pub extern "C" fn vgpu_memcpy_dtod_async(
    s: u64,
    dst: u64,
    dst_offset: u64,
    src: u64,
    src_offset: u64,
    len: u64,
) -> Status {
    let call = "vgpu_memcpy_dtod_async";
    let (s, _) = get!(call, s, Stream);
    let (d, _) = get!(call, dst, Buffer);
    let (sb, _) = get!(call, src, Buffer);
    done(s.copy(&d, dst_offset, &sb, src_offset, len))
}

/// `vgpu_stream_signal_timeline`.
#[no_mangle]
pub extern "C" fn vgpu_stream_signal_timeline(s: u64, tl: u64, point: u64) -> Status {
    let call = "vgpu_stream_signal_timeline";
    let (s, _) = get!(call, s, Stream);
    let (t, _) = get!(call, tl, Timeline);
    done(s.signal(&t, point))
}

/// `vgpu_stream_wait_timeline`.
#[no_mangle]
pub extern "C" fn vgpu_stream_wait_timeline(s: u64, tl: u64, point: u64) -> Status {
    let call = "vgpu_stream_wait_timeline";
    let (s, _) = get!(call, s, Stream);
    let (t, _) = get!(call, tl, Timeline);
    done(s.wait(&t, point))
}
