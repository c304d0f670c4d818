//! The C ABI declared in `include/vgpu.h`.
//!
//! Objects live in a process-wide handle table: a handle is a 64-bit number
//! whose top byte names the object type, so a stale or mistyped handle is
//! reported (`VGPU_ERROR_INVALID_HANDLE`) instead of dereferenced. Calls copy
//! the object out of the table and release the table's lock before they
//! touch the device, so threads never serialise on it while waiting.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::{Arc, Mutex, OnceLock};

use crate::context::{Buffer, Context, LostReason, MemKind};
use crate::device::devices;
use crate::error::Error;
use crate::module::{Arg, Module};
use crate::stream::{Event, Stream};
use crate::sync::Timeline;

/// `vgpu_status`.
pub type Status = u32;
/// `VGPU_SUCCESS`.
pub const VGPU_SUCCESS: Status = 0;
/// `VGPU_ERROR_INVALID_ARGUMENT`.
pub const VGPU_ERROR_INVALID_ARGUMENT: Status = 1;
/// `VGPU_ERROR_INVALID_HANDLE`.
pub const VGPU_ERROR_INVALID_HANDLE: Status = 2;
/// `VGPU_ERROR_NO_DEVICE`.
pub const VGPU_ERROR_NO_DEVICE: Status = 3;
/// `VGPU_ERROR_OUT_OF_MEMORY`.
pub const VGPU_ERROR_OUT_OF_MEMORY: Status = 4;
/// `VGPU_ERROR_NOT_FOUND`.
pub const VGPU_ERROR_NOT_FOUND: Status = 5;
/// `VGPU_ERROR_NOT_READY`.
pub const VGPU_ERROR_NOT_READY: Status = 6;
/// `VGPU_ERROR_INVALID_MODULE`.
pub const VGPU_ERROR_INVALID_MODULE: Status = 7;
/// `VGPU_ERROR_CONTEXT_LOST`.
pub const VGPU_ERROR_CONTEXT_LOST: Status = 8;
/// `VGPU_ERROR_DEVICE_LOST`.
pub const VGPU_ERROR_DEVICE_LOST: Status = 9;
/// `VGPU_ERROR_KMD`.
pub const VGPU_ERROR_KMD: Status = 10;
/// `VGPU_ERROR_CONFIG`.
pub const VGPU_ERROR_CONFIG: Status = 11;

/// `vgpu_lost_reason` values.
pub mod lost {
    /// `VGPU_LOST_NONE`.
    pub const NONE: u32 = 0;
    /// `VGPU_LOST_PAGE_FAULT`.
    pub const PAGE_FAULT: u32 = 1;
    /// `VGPU_LOST_HANG`.
    pub const HANG: u32 = 2;
    /// `VGPU_LOST_BANNED`.
    pub const BANNED: u32 = 3;
    /// `VGPU_LOST_INNOCENT`.
    pub const INNOCENT: u32 = 4;
    /// `VGPU_LOST_ENGINE_ERROR`.
    pub const ENGINE_ERROR: u32 = 5;
    /// `VGPU_LOST_WEDGED`.
    pub const WEDGED: u32 = 6;
    /// `VGPU_LOST_REMOVED`.
    pub const REMOVED: u32 = 7;
    /// `VGPU_LOST_DEVICE_LOST`.
    pub const DEVICE_LOST: u32 = 8;
}

/// `vgpu_arg`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct VgpuArg {
    /// `vgpu_arg_kind`.
    pub kind: u32,
    /// Zero.
    pub pad: u32,
    /// The value's bits (the union, little endian).
    pub bits: u64,
}

/// `vgpu_device_stats`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct VgpuDeviceStats {
    /// Guest monotonic clock of the sample, ns.
    pub sample_ns: u64,
    /// Busy time per engine, ns.
    pub engine_busy_ns: [u64; 2],
    /// GEM bytes of all processes.
    pub mem_bytes: u64,
    /// GEM objects.
    pub mem_objects: u64,
    /// Page-table bytes.
    pub pt_bytes: u64,
    /// Engine resets.
    pub engine_resets: u64,
    /// Device resets.
    pub device_resets: u64,
    /// Hangs.
    pub hangs: u64,
    /// Faults.
    pub faults: u64,
    /// 1: wedged.
    pub wedged: u32,
    /// Contexts on the device.
    pub num_contexts: u32,
}

/// `vgpu_device_properties`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct VgpuDeviceProperties {
    /// Generation.
    pub generation: u32,
    /// Compute units.
    pub compute_units: u32,
    /// Engines.
    pub engine_mask: u64,
    /// Page sizes.
    pub page_sizes: u64,
    /// VA bits.
    pub va_bits: u32,
    /// Contexts.
    pub max_contexts: u32,
    /// Protocol.
    pub protocol_version: u32,
    /// Firmware.
    pub firmware_version: u32,
    /// PCI device id.
    pub device_id: u32,
    /// Zero.
    pub pad: u32,
}

/// `vgpu_context_state`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct VgpuContextState {
    /// `vgpu_lost_reason`.
    pub reason: u32,
    /// KMD context.
    pub kmd_context: u32,
    /// Fault VA.
    pub fault_va: u64,
    /// Fault access.
    pub fault_access: u32,
    /// Hangs.
    pub hangs: u32,
}

enum Obj {
    Context(Context),
    Buffer(Arc<Buffer>),
    Stream(Stream),
    Event(Arc<Event>),
    Module(Module),
    Timeline(Arc<Timeline>),
}

const T_CONTEXT: u64 = 1;
const T_BUFFER: u64 = 2;
const T_STREAM: u64 = 3;
const T_EVENT: u64 = 4;
const T_MODULE: u64 = 5;
const T_TIMELINE: u64 = 6;

#[derive(Default)]
struct Table {
    next: u64,
    objs: HashMap<u64, (Obj, u64)>,
}

fn table() -> &'static Mutex<Table> {
    static T: OnceLock<Mutex<Table>> = OnceLock::new();
    T.get_or_init(Mutex::default)
}

fn insert(ty: u64, obj: Obj, owner: u64) -> u64 {
    let mut t = table().lock().unwrap();
    t.next += 1;
    let h = (ty << 56) | t.next;
    t.objs.insert(h, (obj, owner));
    h
}

thread_local! {
    static LAST: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last(msg: String) {
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    LAST.with(|l| *l.borrow_mut() = c);
}

fn fail(call: &str, st: Status, msg: String) -> Status {
    set_last(format!("{call}: {msg}"));
    st
}

fn status_of(e: &Error) -> Status {
    match e {
        Error::NoDevice | Error::Open { .. } => VGPU_ERROR_NO_DEVICE,
        Error::Config(_) => VGPU_ERROR_CONFIG,
        Error::Lost { reason, .. } => match reason {
            LostReason::Wedged | LostReason::Removed | LostReason::DeviceLost => {
                VGPU_ERROR_DEVICE_LOST
            }
            _ => VGPU_ERROR_CONTEXT_LOST,
        },
        Error::Mem { source, .. } => match source {
            crate::memory::MemError::NoVa(_) => VGPU_ERROR_OUT_OF_MEMORY,
            crate::memory::MemError::Kmd(k) if k.errno == libc::ENOMEM => VGPU_ERROR_OUT_OF_MEMORY,
            crate::memory::MemError::Kmd(_) => VGPU_ERROR_KMD,
            _ => VGPU_ERROR_INVALID_ARGUMENT,
        },
        Error::Launch { source, .. } => match source {
            crate::module::LaunchError::BadModule(_) => VGPU_ERROR_INVALID_MODULE,
            crate::module::LaunchError::NoKernel(_) => VGPU_ERROR_NOT_FOUND,
            _ => VGPU_ERROR_INVALID_ARGUMENT,
        },
        Error::Invalid { .. } | Error::Cmd { .. } => VGPU_ERROR_INVALID_ARGUMENT,
        Error::Kmd { .. } | Error::Ioctl { .. } => VGPU_ERROR_KMD,
    }
}

fn err(e: Error) -> Status {
    let s = status_of(&e);
    set_last(e.to_string());
    s
}

fn done(r: crate::error::Result<()>) -> Status {
    match r {
        Ok(()) => VGPU_SUCCESS,
        Err(e) => err(e),
    }
}

macro_rules! get {
    ($call:expr, $h:expr, $variant:ident) => {{
        let t = table().lock().unwrap();
        match t.objs.get(&$h) {
            Some((Obj::$variant(o), owner)) => (o.clone(), *owner),
            _ => {
                return fail(
                    $call,
                    VGPU_ERROR_INVALID_HANDLE,
                    format!(
                        "handle {:#x} is not a live {}",
                        $h,
                        stringify!($variant).to_lowercase()
                    ),
                )
            }
        }
    }};
}

macro_rules! out {
    ($call:expr, $p:expr) => {{
        if $p.is_null() {
            return fail(
                $call,
                VGPU_ERROR_INVALID_ARGUMENT,
                "null output pointer".into(),
            );
        }
        $p
    }};
}

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

fn remove(call: &str, h: u64, ty: u64) -> Result<Obj, Status> {
    let mut t = table().lock().unwrap();
    if h >> 56 != ty || !t.objs.contains_key(&h) {
        drop(t);
        return Err(fail(
            call,
            VGPU_ERROR_INVALID_HANDLE,
            format!("handle {h:#x} is not live"),
        ));
    }
    Ok(t.objs.remove(&h).expect("checked").0)
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

fn host_slice<'a>(call: &str, p: *const c_void, len: u64) -> Result<&'a [u8], Status> {
    if p.is_null() || len > isize::MAX as u64 {
        return Err(fail(
            call,
            VGPU_ERROR_INVALID_ARGUMENT,
            "null host pointer".into(),
        ));
    }
    // SAFETY: the caller passes `len` readable bytes at `p` (the API
    // contract of every copy function); null was rejected above.
    Ok(unsafe { std::slice::from_raw_parts(p.cast(), len as usize) })
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

/// Stores a new object's handle through `out`.
///
/// # Safety
/// `out` is non-null and valid for writes.
unsafe fn give(out: *mut u64, ty: u64, obj: Obj, owner: u64) -> Status {
    let h = insert(ty, obj, owner);
    // SAFETY: the caller's contract.
    unsafe { *out = h };
    VGPU_SUCCESS
}

/// Stores an fd through `out`, which takes it over.
///
/// # Safety
/// `out` is non-null and valid for writes.
unsafe fn give_fd(out: *mut c_int, fd: std::os::fd::OwnedFd) -> Status {
    use std::os::fd::IntoRawFd;
    // SAFETY: the caller's contract.
    unsafe { *out = fd.into_raw_fd() };
    VGPU_SUCCESS
}

/// A borrowed fd of the caller.
fn borrowed<'a>(call: &str, fd: c_int) -> Result<std::os::fd::BorrowedFd<'a>, Status> {
    if fd < 0 {
        return Err(fail(call, VGPU_ERROR_INVALID_ARGUMENT, format!("fd {fd}")));
    }
    // SAFETY: the caller passes an open fd that stays open for the call.
    Ok(unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_and_mistyped_handles_are_rejected() {
        assert_eq!(vgpu_mem_free(0), VGPU_ERROR_INVALID_HANDLE);
        assert_eq!(
            vgpu_stream_synchronize(T_BUFFER << 56 | 1),
            VGPU_ERROR_INVALID_HANDLE
        );
        // SAFETY: reads the thread's NUL-terminated message.
        let msg = unsafe { CStr::from_ptr(vgpu_last_error()) }
            .to_string_lossy()
            .into_owned();
        assert!(
            msg.starts_with("vgpu_stream_synchronize: handle 0x200000000000001"),
            "{msg}"
        );
        let mut x = 0u64;
        // SAFETY: `x` is writable.
        let st = unsafe { vgpu_mem_alloc(12345, 64, 0, &mut x) };
        assert_eq!(st, VGPU_ERROR_INVALID_HANDLE);
        // SAFETY: a null output pointer is allowed and rejected.
        let st = unsafe { vgpu_mem_va(1, std::ptr::null_mut()) };
        assert_eq!(st, VGPU_ERROR_INVALID_ARGUMENT);
    }

    #[test]
    fn c_arguments_convert() {
        let a = [
            VgpuArg {
                kind: 1,
                pad: 0,
                bits: 7,
            },
            VgpuArg {
                kind: 3,
                pad: 0,
                bits: u64::from(2.5f32.to_bits()),
            },
            VgpuArg {
                kind: 2,
                pad: 0,
                bits: u64::from((-3i32) as u32),
            },
            VgpuArg {
                kind: 5,
                pad: 0,
                bits: 0x1234_5678_9abc,
            },
        ];
        assert_eq!(
            convert_args(&a).unwrap(),
            vec![
                Arg::U32(7),
                Arg::F32(2.5),
                Arg::I32(-3),
                Arg::Ptr(0x1234_5678_9abc)
            ]
        );
        assert!(convert_args(&[VgpuArg {
            kind: 9,
            pad: 0,
            bits: 0
        }])
        .is_err());
        assert!(convert_args(&[VgpuArg {
            kind: 1,
            pad: 1,
            bits: 0
        }])
        .is_err());
    }

    #[test]
    fn every_status_has_a_string() {
        for s in 0..=VGPU_ERROR_CONFIG {
            // SAFETY: static NUL-terminated strings.
            let t = unsafe { CStr::from_ptr(vgpu_status_string(s)) };
            assert_ne!(t.to_str().unwrap(), "unknown status", "status {s}");
        }
    }
}
