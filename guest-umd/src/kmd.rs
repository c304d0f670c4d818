//! Thin, typed wrappers of the KMD's ioctls on one open render-node file.
//!
//! Each uAPI argument struct is paired with its ioctl number once
//! ([`IoctlArg`]). The methods of [`Kmd`] build the struct from typed
//! arguments; [`Kmd::ioctl_raw`] issues an ioctl with a struct the caller
//! built, for tests that pass deliberately bad arguments and want the errno.
//! Every call goes through [`crate::ioctl::ioctl`] (retry, trace, errors).

use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

pub use crate::ioctl::{errno_name, errno_text, KmdError};
use crate::ioctl::{ioctl, last_errno};
use crate::uapi;

/// A uAPI argument struct and the ioctl that takes it.
///
/// # Safety
///
/// `REQUEST` is an ioctl whose argument is exactly one `Self`: the size its
/// number encodes is `size_of::<Self>()` (the tests check it), and `Self`
/// is a `repr(C)` struct of integers, so any value the kernel writes into
/// it is a valid `Self`.
pub unsafe trait IoctlArg {
    /// The ioctl number.
    const REQUEST: u32;
    /// Its name in errors.
    const NAME: &'static str;
}

macro_rules! ioctl_args {
    ($($ty:ident => $req:ident, $name:literal;)*) => {$(
        // SAFETY: `uapi.rs` builds `$req` from `$ty` (`drm_iowr`/`drm_iow`
        // take its size), its layout is checked against the C header by
        // tests/uapi_header.rs, and `$ty` is a `repr(C)` struct of
        // integers.
        unsafe impl IoctlArg for uapi::$ty {
            const REQUEST: u32 = uapi::$req;
            const NAME: &'static str = $name;
        }
    )*};
}

ioctl_args! {
    DrmVgpuGetParam => DRM_IOCTL_VGPU_GET_PARAM, "GET_PARAM";
    DrmVgpuPing => DRM_IOCTL_VGPU_PING, "PING";
    DrmVgpuGemCreate => DRM_IOCTL_VGPU_GEM_CREATE, "GEM_CREATE";
    DrmGemClose => DRM_IOCTL_GEM_CLOSE, "GEM_CLOSE";
    DrmVgpuGemMmapOffset => DRM_IOCTL_VGPU_GEM_MMAP_OFFSET, "GEM_MMAP_OFFSET";
    DrmVgpuVmBind => DRM_IOCTL_VGPU_VM_BIND, "VM_BIND";
    DrmVgpuVmUnbind => DRM_IOCTL_VGPU_VM_UNBIND, "VM_UNBIND";
    DrmVgpuCtxCreate => DRM_IOCTL_VGPU_CTX_CREATE, "CTX_CREATE";
    DrmVgpuCtxDestroy => DRM_IOCTL_VGPU_CTX_DESTROY, "CTX_DESTROY";
    DrmVgpuCtxQuery => DRM_IOCTL_VGPU_CTX_QUERY, "CTX_QUERY";
    DrmVgpuSubmit => DRM_IOCTL_VGPU_SUBMIT, "SUBMIT";
    DrmVgpuWait => DRM_IOCTL_VGPU_WAIT, "WAIT";
    DrmVgpuFenceExport => DRM_IOCTL_VGPU_FENCE_EXPORT, "FENCE_EXPORT";
    DrmVgpuQueryStats => DRM_IOCTL_VGPU_QUERY_STATS, "QUERY_STATS";
    DrmVgpuVmBindOps => DRM_IOCTL_VGPU_VM_BIND_OPS, "VM_BIND_OPS";
    DrmVgpuSanReport => DRM_IOCTL_VGPU_SAN_REPORT, "SAN_REPORT";
    DrmVgpuUqCreate => DRM_IOCTL_VGPU_UQ_CREATE, "UQ_CREATE";
    DrmVgpuUqKick => DRM_IOCTL_VGPU_UQ_KICK, "UQ_KICK";
    DrmVgpuHostMap => DRM_IOCTL_VGPU_HOST_MAP, "HOST_MAP";
    DrmVgpuHostUnmap => DRM_IOCTL_VGPU_HOST_UNMAP, "HOST_UNMAP";
    DrmGetCap => DRM_IOCTL_GET_CAP, "GET_CAP";
    DrmPrimeHandle => DRM_IOCTL_PRIME_HANDLE_TO_FD, "PRIME_HANDLE_TO_FD";
    DrmSyncobjCreate => DRM_IOCTL_SYNCOBJ_CREATE, "SYNCOBJ_CREATE";
    DrmSyncobjDestroy => DRM_IOCTL_SYNCOBJ_DESTROY, "SYNCOBJ_DESTROY";
    DrmSyncobjHandle => DRM_IOCTL_SYNCOBJ_HANDLE_TO_FD, "SYNCOBJ_HANDLE_TO_FD";
    DrmSyncobjWait => DRM_IOCTL_SYNCOBJ_WAIT, "SYNCOBJ_WAIT";
    DrmSyncobjTimelineWait => DRM_IOCTL_SYNCOBJ_TIMELINE_WAIT, "SYNCOBJ_TIMELINE_WAIT";
    DrmSyncobjArray => DRM_IOCTL_SYNCOBJ_SIGNAL, "SYNCOBJ_SIGNAL";
    DrmSyncobjTimelineArray => DRM_IOCTL_SYNCOBJ_TIMELINE_SIGNAL, "SYNCOBJ_TIMELINE_SIGNAL";
    DrmSyncobjTransfer => DRM_IOCTL_SYNCOBJ_TRANSFER, "SYNCOBJ_TRANSFER";
}

/// The sync objects and implicit-sync BOs of a `SUBMIT` (all empty: a
/// plain submit).
#[derive(Clone, Copy, Debug, Default)]
pub struct SubmitSyncs<'a> {
    /// Waited for in the KMD.
    pub ins: &'a [uapi::DrmVgpuSync],
    /// Get the job's fence.
    pub outs: &'a [uapi::DrmVgpuSync],
    /// Implicit synchronisation.
    pub bos: &'a [uapi::DrmVgpuSubmitBo],
}

/// One open render-node file: its GPU VM, BOs and contexts.
#[derive(Debug)]
pub struct Kmd {
    file: File,
}

/// The render node's descriptor (its fdinfo is
/// `/proc/self/fdinfo/<fd>`).
impl AsRawFd for Kmd {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.file.as_raw_fd()
    }
}

impl Kmd {
    /// Wraps an open vgpu render node.
    pub fn new(file: File) -> Kmd {
        Kmd { file }
    }

    /// Issues the ioctl of `arg` with `arg` exactly as the caller built it
    /// (retried on `EINTR`); the errno if the KMD refused it. What the
    /// ioctl creates belongs to the caller (a `FENCE_EXPORT`'s `fd`).
    ///
    /// # Safety
    ///
    /// The kernel writes through the user pointers some arguments carry
    /// (`QUERY_STATS`: `contexts`, as many entries as `num_contexts` allows
    /// and contexts exist). Each such pointer must be valid for those
    /// writes, or an address the kernel cannot write (then it answers
    /// `EFAULT`). Pointers the ioctl only reads (`SUBMIT`'s command and
    /// fence arrays, `WAIT`'s fences) may hold any value.
    pub unsafe fn ioctl_raw<A: IoctlArg>(&self, arg: &mut A) -> Result<(), KmdError> {
        // SAFETY: `A::REQUEST` takes exactly one `A` (the `IoctlArg`
        // contract); pointers inside `arg` that the kernel writes through
        // are valid or unwritable (this function's contract).
        unsafe { ioctl(self.file.as_raw_fd(), A::REQUEST, A::NAME, arg) }
    }

    /// [`Kmd::ioctl_raw`] for the wrappers below, whose arguments carry no
    /// pointer the kernel writes through (`query_stats`, which does, calls
    /// `ioctl_raw` itself).
    fn call<A: IoctlArg>(&self, arg: &mut A) -> Result<(), KmdError> {
        // SAFETY: the callers' arguments carry no pointer the kernel writes
        // through; pointers it only reads may hold any value.
        unsafe { self.ioctl_raw(arg) }
    }

    /// `GET_PARAM`.
    pub fn get_param(&self, param: u32) -> Result<u64, KmdError> {
        let mut a = uapi::DrmVgpuGetParam {
            param,
            ..Default::default()
        };
        self.call(&mut a)?;
        Ok(a.value)
    }

    /// `PING`: a round trip through the device's control and event queues;
    /// the filled argument (event sequence number, latency).
    pub fn ping(&self, cookie: u64, timeout_ns: u64) -> Result<uapi::DrmVgpuPing, KmdError> {
        let mut a = uapi::DrmVgpuPing {
            cookie,
            timeout_ns,
            ..Default::default()
        };
        self.call(&mut a)?;
        Ok(a)
    }

    /// `GEM_CREATE`: a BO handle.
    pub fn gem_create(&self, size: u64, flags: u32) -> Result<u32, KmdError> {
        let mut a = uapi::DrmVgpuGemCreate {
            size,
            flags,
            handle: 0,
        };
        self.call(&mut a)?;
        Ok(a.handle)
    }

    /// `GEM_CLOSE`.
    pub fn gem_close(&self, handle: u32) -> Result<(), KmdError> {
        self.call(&mut uapi::DrmGemClose { handle, pad: 0 })
    }

    /// `GEM_MMAP_OFFSET`: the fake offset to `mmap(2)` the BO at.
    pub fn gem_mmap_offset(&self, handle: u32) -> Result<u64, KmdError> {
        let mut a = uapi::DrmVgpuGemMmapOffset {
            handle,
            ..Default::default()
        };
        self.call(&mut a)?;
        Ok(a.offset)
    }

    /// `GEM_MMAP_OFFSET` + `mmap(2)`: a shared read/write CPU mapping of
    /// `size` bytes; the caller unmaps it (`munmap`).
    pub fn mmap(&self, handle: u32, size: u64) -> Result<*mut u8, KmdError> {
        let offset = self.gem_mmap_offset(handle)?;
        // SAFETY: a fresh shared mapping of the node at the BO's fake offset;
        // no Rust object refers to the returned range yet.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                size as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                self.file.as_raw_fd(),
                offset as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(KmdError {
                call: "mmap",
                errno: last_errno(),
            });
        }
        Ok(p.cast())
    }

    /// `VM_BIND` of the BO from its start.
    pub fn vm_bind(&self, handle: u32, va: u64, size: u64, flags: u32) -> Result<(), KmdError> {
        self.vm_bind_range(handle, 0, va, size, flags)
    }

    /// `VM_BIND` of `size` bytes of the BO from `bo_offset` at `va`.
    pub fn vm_bind_range(
        &self,
        handle: u32,
        bo_offset: u64,
        va: u64,
        size: u64,
        flags: u32,
    ) -> Result<(), KmdError> {
        self.call(&mut uapi::DrmVgpuVmBind {
            handle,
            flags,
            bo_offset,
            va,
            size,
        })
    }

    /// `VM_UNBIND`.
    pub fn vm_unbind(&self, va: u64, size: u64) -> Result<(), KmdError> {
        self.call(&mut uapi::DrmVgpuVmUnbind { va, size })
    }

    /// `CTX_CREATE`: the context id.
    pub fn ctx_create(&self, priority: u32, engine_mask: u32, flags: u32) -> Result<u32, KmdError> {
        let mut a = uapi::DrmVgpuCtxCreate {
            priority,
            engine_mask,
            flags,
            ctx_id: 0,
        };
        self.call(&mut a)?;
        Ok(a.ctx_id)
    }

    /// `UQ_CREATE`: a user-mode queue as `a` describes it; returns its
    /// context id.
    pub fn uq_create(&self, a: &uapi::DrmVgpuUqCreate) -> Result<u32, KmdError> {
        let mut a = *a;
        self.call(&mut a)?;
        Ok(a.ctx_id)
    }

    /// `UQ_KICK`.
    pub fn uq_kick(&self, ctx_id: u32) -> Result<(), KmdError> {
        self.call(&mut uapi::DrmVgpuUqKick { ctx_id, pad: 0 })
    }

    /// `HOST_MAP`: pins `size` bytes of this process's memory at `addr`
    /// (both 4 KiB aligned) and maps them in the file's VM; returns the GPU
    /// VA.
    pub fn host_map(&self, addr: u64, size: u64, flags: u32) -> Result<u64, KmdError> {
        let mut a = uapi::DrmVgpuHostMap {
            addr,
            size,
            flags,
            ..Default::default()
        };
        self.call(&mut a)?;
        Ok(a.gpu_va)
    }

    /// `HOST_UNMAP`.
    pub fn host_unmap(&self, gpu_va: u64) -> Result<(), KmdError> {
        self.call(&mut uapi::DrmVgpuHostUnmap { gpu_va })
    }

    /// `CTX_DESTROY`.
    pub fn ctx_destroy(&self, ctx_id: u32) -> Result<(), KmdError> {
        self.call(&mut uapi::DrmVgpuCtxDestroy { ctx_id, pad: 0 })
    }

    /// `CTX_QUERY`.
    pub fn ctx_query(&self, ctx_id: u32) -> Result<uapi::DrmVgpuCtxQuery, KmdError> {
        let mut a = uapi::DrmVgpuCtxQuery {
            ctx_id,
            ..Default::default()
        };
        self.call(&mut a)?;
        Ok(a)
    }

    /// `SAN_REPORT`: the oldest sanitizer report about context `ctx_id`
    /// numbered above `after_seq` (`None`: there is none).
    pub fn san_report(
        &self,
        ctx_id: u32,
        after_seq: u64,
    ) -> Result<Option<uapi::DrmVgpuSanRecord>, KmdError> {
        let mut a = uapi::DrmVgpuSanReport {
            ctx_id,
            after_seq,
            ..Default::default()
        };
        match self.call(&mut a) {
            Ok(()) => Ok(Some(a.report)),
            Err(e) if e.errno == libc::ENODATA => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `SUBMIT`: the job's seqno.
    pub fn submit(
        &self,
        ctx_id: u32,
        engine: u32,
        cmds: &[uapi::DrmVgpuCmd],
        in_fences: &[uapi::DrmVgpuFence],
    ) -> Result<u64, KmdError> {
        self.submit_syncs(ctx_id, engine, cmds, in_fences, SubmitSyncs::default())
    }

    /// `SUBMIT` with sync objects and implicit-sync BOs: the job's seqno.
    pub fn submit_syncs(
        &self,
        ctx_id: u32,
        engine: u32,
        cmds: &[uapi::DrmVgpuCmd],
        in_fences: &[uapi::DrmVgpuFence],
        syncs: SubmitSyncs<'_>,
    ) -> Result<u64, KmdError> {
        let mut a = uapi::DrmVgpuSubmit {
            ctx_id,
            engine,
            cmds: cmds.as_ptr() as u64,
            num_cmds: cmds.len() as u32,
            num_in_fences: in_fences.len() as u32,
            in_fences: in_fences.as_ptr() as u64,
            in_syncs: syncs.ins.as_ptr() as u64,
            num_in_syncs: syncs.ins.len() as u32,
            out_syncs: syncs.outs.as_ptr() as u64,
            num_out_syncs: syncs.outs.len() as u32,
            bos: syncs.bos.as_ptr() as u64,
            num_bos: syncs.bos.len() as u32,
            ..Default::default()
        };
        self.call(&mut a)?;
        Ok(a.seqno)
    }

    /// `VM_BIND_OPS`: `ops` as one bind job, after `ins`, signalling `outs`.
    pub fn vm_bind_ops(
        &self,
        ops: &[uapi::DrmVgpuVmOp],
        ins: &[uapi::DrmVgpuSync],
        outs: &[uapi::DrmVgpuSync],
    ) -> Result<(), KmdError> {
        self.call(&mut uapi::DrmVgpuVmBindOps {
            ops: ops.as_ptr() as u64,
            num_ops: ops.len() as u32,
            flags: 0,
            in_syncs: ins.as_ptr() as u64,
            out_syncs: outs.as_ptr() as u64,
            num_in_syncs: ins.len() as u32,
            num_out_syncs: outs.len() as u32,
        })
    }

    /// `DRM_IOCTL_GET_CAP`.
    pub fn get_cap(&self, capability: u64) -> Result<u64, KmdError> {
        let mut a = uapi::DrmGetCap {
            capability,
            value: 0,
        };
        self.call(&mut a)?;
        Ok(a.value)
    }

    /// Issues `request` (an ioctl taking an `A`, which need not be `A`'s
    /// usual one: drm.h shares structs between ioctls).
    fn call_as<A: IoctlArg>(
        &self,
        request: u32,
        name: &'static str,
        arg: &mut A,
    ) -> Result<(), KmdError> {
        // SAFETY: `request` takes exactly one `A` (the callers pair them as
        // drm.h does; the sizes match because the number encodes
        // `size_of::<A>()` through `drm_iowr`), `arg` is exclusively
        // borrowed, and the pointers inside are only read by the kernel.
        unsafe { ioctl(self.file.as_raw_fd(), request, name, arg) }
    }

    /// `DRM_IOCTL_PRIME_HANDLE_TO_FD`: the BO as a dma-buf fd
    /// (close-on-exec, read-write mappable).
    pub fn prime_handle_to_fd(&self, handle: u32) -> Result<OwnedFd, KmdError> {
        let mut a = uapi::DrmPrimeHandle {
            handle,
            flags: uapi::DRM_CLOEXEC | uapi::DRM_RDWR,
            fd: -1,
        };
        self.call(&mut a)?;
        // SAFETY: on success the kernel installed `fd` for the caller.
        Ok(unsafe { OwnedFd::from_raw_fd(a.fd) })
    }

    /// `DRM_IOCTL_PRIME_FD_TO_HANDLE`: a GEM handle of this file for the
    /// dma-buf `fd` (the same BO when it is this device's).
    pub fn prime_fd_to_handle(&self, fd: i32) -> Result<u32, KmdError> {
        let mut a = uapi::DrmPrimeHandle {
            handle: 0,
            flags: 0,
            fd,
        };
        self.call_as(
            uapi::DRM_IOCTL_PRIME_FD_TO_HANDLE,
            "PRIME_FD_TO_HANDLE",
            &mut a,
        )?;
        Ok(a.handle)
    }

    /// `DRM_IOCTL_SYNCOBJ_CREATE`.
    pub fn syncobj_create(&self, flags: u32) -> Result<u32, KmdError> {
        let mut a = uapi::DrmSyncobjCreate { handle: 0, flags };
        self.call(&mut a)?;
        Ok(a.handle)
    }

    /// `DRM_IOCTL_SYNCOBJ_DESTROY`.
    pub fn syncobj_destroy(&self, handle: u32) -> Result<(), KmdError> {
        self.call(&mut uapi::DrmSyncobjDestroy { handle, pad: 0 })
    }

    /// `DRM_IOCTL_SYNCOBJ_HANDLE_TO_FD`: the syncobj as an fd, or with
    /// `SYNCOBJ_HANDLE_TO_FD_EXPORT_SYNC_FILE` its fence as a sync_file.
    pub fn syncobj_handle_to_fd(&self, handle: u32, flags: u32) -> Result<OwnedFd, KmdError> {
        let mut a = uapi::DrmSyncobjHandle {
            handle,
            flags,
            fd: -1,
            pad: 0,
        };
        self.call(&mut a)?;
        // SAFETY: on success the kernel installed `fd` for the caller.
        Ok(unsafe { OwnedFd::from_raw_fd(a.fd) })
    }

    /// `DRM_IOCTL_SYNCOBJ_FD_TO_HANDLE`: a syncobj fd as a new handle; with
    /// `SYNCOBJ_FD_TO_HANDLE_IMPORT_SYNC_FILE`, a sync_file's fence into
    /// the existing syncobj `handle` (returned).
    pub fn syncobj_fd_to_handle(&self, fd: i32, handle: u32, flags: u32) -> Result<u32, KmdError> {
        let mut a = uapi::DrmSyncobjHandle {
            handle,
            flags,
            fd,
            pad: 0,
        };
        self.call_as(
            uapi::DRM_IOCTL_SYNCOBJ_FD_TO_HANDLE,
            "SYNCOBJ_FD_TO_HANDLE",
            &mut a,
        )?;
        Ok(a.handle)
    }

    /// `DRM_IOCTL_SYNCOBJ_WAIT` until `deadline_ns` (absolute
    /// `CLOCK_MONOTONIC`): the first signalled (with "any").
    pub fn syncobj_wait(
        &self,
        handles: &[u32],
        deadline_ns: i64,
        flags: u32,
    ) -> Result<u32, KmdError> {
        let mut a = uapi::DrmSyncobjWait {
            handles: handles.as_ptr() as u64,
            timeout_nsec: deadline_ns,
            count_handles: handles.len() as u32,
            flags,
            ..Default::default()
        };
        self.call(&mut a)?;
        Ok(a.first_signaled)
    }

    /// `DRM_IOCTL_SYNCOBJ_TIMELINE_WAIT` until `deadline_ns`.
    pub fn syncobj_timeline_wait(
        &self,
        handles: &[u32],
        points: &[u64],
        deadline_ns: i64,
        flags: u32,
    ) -> Result<u32, KmdError> {
        let mut a = uapi::DrmSyncobjTimelineWait {
            handles: handles.as_ptr() as u64,
            points: points.as_ptr() as u64,
            timeout_nsec: deadline_ns,
            count_handles: handles.len().min(points.len()) as u32,
            flags,
            ..Default::default()
        };
        self.call(&mut a)?;
        Ok(a.first_signaled)
    }

    fn syncobj_array(
        &self,
        request: u32,
        name: &'static str,
        handles: &[u32],
    ) -> Result<(), KmdError> {
        let mut a = uapi::DrmSyncobjArray {
            handles: handles.as_ptr() as u64,
            count_handles: handles.len() as u32,
            pad: 0,
        };
        self.call_as(request, name, &mut a)
    }

    /// `DRM_IOCTL_SYNCOBJ_RESET`.
    pub fn syncobj_reset(&self, handles: &[u32]) -> Result<(), KmdError> {
        self.syncobj_array(uapi::DRM_IOCTL_SYNCOBJ_RESET, "SYNCOBJ_RESET", handles)
    }

    /// `DRM_IOCTL_SYNCOBJ_SIGNAL`.
    pub fn syncobj_signal(&self, handles: &[u32]) -> Result<(), KmdError> {
        self.syncobj_array(uapi::DRM_IOCTL_SYNCOBJ_SIGNAL, "SYNCOBJ_SIGNAL", handles)
    }

    /// `DRM_IOCTL_SYNCOBJ_TIMELINE_SIGNAL`: signals each point.
    pub fn syncobj_timeline_signal(&self, handles: &[u32], points: &[u64]) -> Result<(), KmdError> {
        let mut a = uapi::DrmSyncobjTimelineArray {
            handles: handles.as_ptr() as u64,
            points: points.as_ptr() as u64,
            count_handles: handles.len().min(points.len()) as u32,
            flags: 0,
        };
        self.call(&mut a)
    }

    /// `DRM_IOCTL_SYNCOBJ_QUERY`: each timeline's signalled point (with
    /// `SYNCOBJ_QUERY_LAST_SUBMITTED`, its last submitted one).
    pub fn syncobj_query(&self, handles: &[u32], flags: u32) -> Result<Vec<u64>, KmdError> {
        let mut points = vec![0u64; handles.len()];
        let mut a = uapi::DrmSyncobjTimelineArray {
            handles: handles.as_ptr() as u64,
            points: points.as_mut_ptr() as u64,
            count_handles: handles.len() as u32,
            flags,
        };
        self.call_as(uapi::DRM_IOCTL_SYNCOBJ_QUERY, "SYNCOBJ_QUERY", &mut a)?;
        Ok(points)
    }

    /// `DRM_IOCTL_SYNCOBJ_TRANSFER`: the fence of (`src`, `src_point`) to
    /// (`dst`, `dst_point`) (point 0: binary).
    pub fn syncobj_transfer(
        &self,
        src: u32,
        src_point: u64,
        dst: u32,
        dst_point: u64,
        flags: u32,
    ) -> Result<(), KmdError> {
        self.call(&mut uapi::DrmSyncobjTransfer {
            src_handle: src,
            dst_handle: dst,
            src_point,
            dst_point,
            flags,
            pad: 0,
        })
    }

    /// `WAIT` for all (or any) of `fences`: the index of a signalled one.
    pub fn wait(
        &self,
        fences: &[uapi::DrmVgpuFence],
        all: bool,
        timeout_ns: u64,
    ) -> Result<u32, KmdError> {
        let mut a = uapi::DrmVgpuWait {
            fences: fences.as_ptr() as u64,
            num_fences: fences.len() as u32,
            flags: if all { uapi::WAIT_ALL } else { 0 },
            timeout_ns,
            ..Default::default()
        };
        self.call(&mut a)?;
        Ok(a.first_signaled)
    }

    /// `FENCE_EXPORT`: a sync_file fd (close-on-exec) that signals with the
    /// fence.
    pub fn fence_export(&self, fence: uapi::DrmVgpuFence) -> Result<OwnedFd, KmdError> {
        let mut a = uapi::DrmVgpuFenceExport {
            fence,
            flags: 0,
            fd: -1,
        };
        self.call(&mut a)?;
        // SAFETY: on success the KMD installed `fd` in this process's table
        // for the caller; nothing else owns it.
        Ok(unsafe { OwnedFd::from_raw_fd(a.fd) })
    }

    /// `QUERY_STATS` with room for `contexts.len()` contexts (at most
    /// `STATS_MAX_CONTEXTS`): the filled summary, whose `num_contexts` is
    /// the number of contexts that exist (the first that fit are written
    /// to `contexts`). An empty slice passes no array.
    pub fn query_stats(
        &self,
        contexts: &mut [uapi::DrmVgpuCtxStats],
    ) -> Result<uapi::DrmVgpuQueryStats, KmdError> {
        let mut a = uapi::DrmVgpuQueryStats {
            num_contexts: contexts.len().min(uapi::STATS_MAX_CONTEXTS as usize) as u32,
            contexts: if contexts.is_empty() {
                0
            } else {
                contexts.as_mut_ptr() as u64
            },
            ..Default::default()
        };
        // SAFETY: `a.contexts` is 0 (no array) or the start of `contexts`,
        // exclusively borrowed for the call, which holds `a.num_contexts`
        // entries: the kernel writes at most that many.
        unsafe { self.ioctl_raw(&mut a) }?;
        Ok(a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The size an ioctl number encodes (`_IOC_SIZE`).
    fn encoded_size(req: u32) -> usize {
        ((req >> 16) & 0x3fff) as usize
    }

    fn check<A: IoctlArg>() {
        assert_eq!(
            encoded_size(A::REQUEST),
            size_of::<A>(),
            "{} takes a {}",
            A::NAME,
            std::any::type_name::<A>()
        );
    }

    #[test]
    fn every_ioctl_is_paired_with_its_struct() {
        check::<uapi::DrmVgpuGetParam>();
        check::<uapi::DrmVgpuPing>();
        check::<uapi::DrmVgpuGemCreate>();
        check::<uapi::DrmGemClose>();
        check::<uapi::DrmVgpuGemMmapOffset>();
        check::<uapi::DrmVgpuVmBind>();
        check::<uapi::DrmVgpuVmUnbind>();
        check::<uapi::DrmVgpuCtxCreate>();
        check::<uapi::DrmVgpuCtxDestroy>();
        check::<uapi::DrmVgpuCtxQuery>();
        check::<uapi::DrmVgpuSubmit>();
        check::<uapi::DrmVgpuWait>();
        check::<uapi::DrmVgpuFenceExport>();
        check::<uapi::DrmVgpuQueryStats>();
        check::<uapi::DrmVgpuVmBindOps>();
        check::<uapi::DrmVgpuUqCreate>();
        check::<uapi::DrmVgpuUqKick>();
        check::<uapi::DrmGetCap>();
        check::<uapi::DrmPrimeHandle>();
        check::<uapi::DrmSyncobjCreate>();
        check::<uapi::DrmSyncobjDestroy>();
        check::<uapi::DrmSyncobjHandle>();
        check::<uapi::DrmSyncobjWait>();
        check::<uapi::DrmSyncobjTimelineWait>();
        check::<uapi::DrmSyncobjArray>();
        check::<uapi::DrmSyncobjTimelineArray>();
        check::<uapi::DrmSyncobjTransfer>();
    }
}
