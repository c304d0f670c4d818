//! The handle table (a handle's top byte names its object type), the
//! thread's last error message, the mapping of library errors to
//! `vgpu_status`, and the argument checks every call shares.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{c_int, c_void, CString};
use std::sync::{Arc, Mutex, OnceLock};

use super::*;
use crate::context::{Buffer, Context, LostReason};
use crate::error::Error;
use crate::module::Module;
use crate::stream::{Event, Stream};
use crate::sync::Timeline;

pub(super) enum Obj {
    Context(Context),
    Buffer(Arc<Buffer>),
    Stream(Stream),
    Event(Arc<Event>),
    Module(Module),
    Timeline(Arc<Timeline>),
}

pub(super) const T_CONTEXT: u64 = 1;

pub(super) const T_BUFFER: u64 = 2;

pub(super) const T_STREAM: u64 = 3;

pub(super) const T_EVENT: u64 = 4;

pub(super) const T_MODULE: u64 = 5;

pub(super) const T_TIMELINE: u64 = 6;

#[derive(Default)]
pub(super) struct Table {
    next: u64,
    pub(super) objs: HashMap<u64, (Obj, u64)>,
}

pub(super) fn table() -> &'static Mutex<Table> {
    static T: OnceLock<Mutex<Table>> = OnceLock::new();
    T.get_or_init(Mutex::default)
}

pub(super) fn insert(ty: u64, obj: Obj, owner: u64) -> u64 {
    let mut t = table().lock().unwrap();
    t.next += 1;
    let h = (ty << 56) | t.next;
    t.objs.insert(h, (obj, owner));
    h
}

thread_local! {
    pub(super) static LAST: RefCell<CString> = RefCell::new(CString::default());
}

pub(super) fn set_last(msg: String) {
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    LAST.with(|l| *l.borrow_mut() = c);
}

pub(super) fn fail(call: &str, st: Status, msg: String) -> Status {
    set_last(format!("{call}: {msg}"));
    st
}

pub(super) fn status_of(e: &Error) -> Status {
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

pub(super) fn err(e: Error) -> Status {
    let s = status_of(&e);
    set_last(e.to_string());
    s
}

pub(super) fn done(r: crate::error::Result<()>) -> Status {
    match r {
        Ok(()) => VGPU_SUCCESS,
        Err(e) => err(e),
    }
}

macro_rules! get {
    ($call:expr, $h:expr, $variant:ident) => {{
        let t = $crate::capi::handles::table().lock().unwrap();
        match t.objs.get(&$h) {
            Some(($crate::capi::handles::Obj::$variant(o), owner)) => (o.clone(), *owner),
            _ => {
                return $crate::capi::handles::fail(
                    $call,
                    $crate::capi::VGPU_ERROR_INVALID_HANDLE,
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
            return $crate::capi::handles::fail(
                $call,
                $crate::capi::VGPU_ERROR_INVALID_ARGUMENT,
                "null output pointer".into(),
            );
        }
        $p
    }};
}

pub(super) fn remove(call: &str, h: u64, ty: u64) -> Result<Obj, Status> {
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

/// Stores a new object's handle through `out`.
///
/// # Safety
/// `out` is non-null and valid for writes.
pub(super) unsafe fn give(out: *mut u64, ty: u64, obj: Obj, owner: u64) -> Status {
    let h = insert(ty, obj, owner);
    // SAFETY: the caller's contract.
    unsafe { *out = h };
    VGPU_SUCCESS
}

/// Stores an fd through `out`, which takes it over.
///
/// # Safety
/// `out` is non-null and valid for writes.
pub(super) unsafe fn give_fd(out: *mut c_int, fd: std::os::fd::OwnedFd) -> Status {
    use std::os::fd::IntoRawFd;
    // SAFETY: the caller's contract.
    unsafe { *out = fd.into_raw_fd() };
    VGPU_SUCCESS
}

/// A borrowed fd of the caller.
pub(super) fn borrowed<'a>(call: &str, fd: c_int) -> Result<std::os::fd::BorrowedFd<'a>, Status> {
    if fd < 0 {
        return Err(fail(call, VGPU_ERROR_INVALID_ARGUMENT, format!("fd {fd}")));
    }
    // SAFETY: the caller passes an open fd that stays open for the call.
    Ok(unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) })
}

pub(super) fn host_slice<'a>(call: &str, p: *const c_void, len: u64) -> Result<&'a [u8], Status> {
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
