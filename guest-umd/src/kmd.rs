//! Thin, typed wrappers of the KMD's ioctls on one open render-node file.

use std::fs::File;
use std::os::fd::AsRawFd;

use crate::uapi;

/// An ioctl the KMD refused.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[error("{call}: {}", errno_text(*errno))]
pub struct KmdError {
    /// The ioctl.
    pub call: &'static str,
    /// The errno it returned.
    pub errno: i32,
}

/// `"EINVAL (Invalid argument)"`.
pub fn errno_text(e: i32) -> String {
    let name = match e {
        libc::EINVAL => "EINVAL",
        libc::ENOENT => "ENOENT",
        libc::EIO => "EIO",
        libc::ENODEV => "ENODEV",
        libc::ENOMEM => "ENOMEM",
        libc::ENOSPC => "ENOSPC",
        libc::EEXIST => "EEXIST",
        libc::EAGAIN => "EAGAIN",
        libc::EBUSY => "EBUSY",
        libc::ETIME => "ETIME",
        libc::ETIMEDOUT => "ETIMEDOUT",
        libc::EFAULT => "EFAULT",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::EPROTO => "EPROTO",
        _ => "errno",
    };
    format!("{name} ({})", std::io::Error::from_raw_os_error(e))
}

/// One open render-node file: its GPU VM, BOs and contexts.
#[derive(Debug)]
pub struct Kmd {
    file: File,
}

fn ioctl<T>(file: &File, call: &'static str, req: u32, arg: &mut T) -> Result<(), KmdError> {
    loop {
        // SAFETY: `req` is the ioctl whose argument is a `T` (uapi.rs pairs
        // them, checked against the C header) and `arg` is a valid,
        // exclusively borrowed `T` for the duration of the call.
        let rc = unsafe {
            libc::ioctl(
                file.as_raw_fd(),
                req as libc::c_ulong,
                std::ptr::from_mut(arg),
            )
        };
        if rc == 0 {
            return Ok(());
        }
        let errno = std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO);
        if errno == libc::EINTR {
            continue;
        }
        return Err(KmdError { call, errno });
    }
}

impl Kmd {
    /// Wraps an open vgpu render node.
    pub fn new(file: File) -> Kmd {
        Kmd { file }
    }

    /// `GET_PARAM`.
    pub fn get_param(&self, param: u32) -> Result<u64, KmdError> {
        let mut a = uapi::DrmVgpuGetParam {
            param,
            ..Default::default()
        };
        ioctl(
            &self.file,
            "GET_PARAM",
            uapi::DRM_IOCTL_VGPU_GET_PARAM,
            &mut a,
        )?;
        Ok(a.value)
    }

    /// `GEM_CREATE`: a BO handle.
    pub fn gem_create(&self, size: u64, flags: u32) -> Result<u32, KmdError> {
        let mut a = uapi::DrmVgpuGemCreate {
            size,
            flags,
            handle: 0,
        };
        ioctl(
            &self.file,
            "GEM_CREATE",
            uapi::DRM_IOCTL_VGPU_GEM_CREATE,
            &mut a,
        )?;
        Ok(a.handle)
    }

    /// `GEM_CLOSE`.
    pub fn gem_close(&self, handle: u32) -> Result<(), KmdError> {
        let mut a = uapi::DrmGemClose { handle, pad: 0 };
        ioctl(&self.file, "GEM_CLOSE", uapi::DRM_IOCTL_GEM_CLOSE, &mut a)
    }

    /// `GEM_MMAP_OFFSET` + `mmap(2)`: a shared read/write CPU mapping.
    pub fn mmap(&self, handle: u32, size: u64) -> Result<*mut u8, KmdError> {
        let mut a = uapi::DrmVgpuGemMmapOffset {
            handle,
            ..Default::default()
        };
        ioctl(
            &self.file,
            "GEM_MMAP_OFFSET",
            uapi::DRM_IOCTL_VGPU_GEM_MMAP_OFFSET,
            &mut a,
        )?;
        // SAFETY: a fresh shared mapping of the node at the BO's fake offset;
        // no Rust object refers to the returned range yet.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                size as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                self.file.as_raw_fd(),
                a.offset as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            let errno = std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO);
            return Err(KmdError {
                call: "mmap",
                errno,
            });
        }
        Ok(p.cast())
    }

    /// `VM_BIND`.
    pub fn vm_bind(&self, handle: u32, va: u64, size: u64, flags: u32) -> Result<(), KmdError> {
        let mut a = uapi::DrmVgpuVmBind {
            handle,
            flags,
            bo_offset: 0,
            va,
            size,
        };
        ioctl(&self.file, "VM_BIND", uapi::DRM_IOCTL_VGPU_VM_BIND, &mut a)
    }

    /// `VM_UNBIND`.
    pub fn vm_unbind(&self, va: u64, size: u64) -> Result<(), KmdError> {
        let mut a = uapi::DrmVgpuVmUnbind { va, size };
        ioctl(
            &self.file,
            "VM_UNBIND",
            uapi::DRM_IOCTL_VGPU_VM_UNBIND,
            &mut a,
        )
    }

    /// `CTX_CREATE`: the context id.
    pub fn ctx_create(&self, priority: u32, engine_mask: u32, flags: u32) -> Result<u32, KmdError> {
        let mut a = uapi::DrmVgpuCtxCreate {
            priority,
            engine_mask,
            flags,
            ctx_id: 0,
        };
        ioctl(
            &self.file,
            "CTX_CREATE",
            uapi::DRM_IOCTL_VGPU_CTX_CREATE,
            &mut a,
        )?;
        Ok(a.ctx_id)
    }

    /// `CTX_DESTROY`.
    pub fn ctx_destroy(&self, ctx_id: u32) -> Result<(), KmdError> {
        let mut a = uapi::DrmVgpuCtxDestroy { ctx_id, pad: 0 };
        ioctl(
            &self.file,
            "CTX_DESTROY",
            uapi::DRM_IOCTL_VGPU_CTX_DESTROY,
            &mut a,
        )
    }

    /// `CTX_QUERY`.
    pub fn ctx_query(&self, ctx_id: u32) -> Result<uapi::DrmVgpuCtxQuery, KmdError> {
        let mut a = uapi::DrmVgpuCtxQuery {
            ctx_id,
            ..Default::default()
        };
        ioctl(
            &self.file,
            "CTX_QUERY",
            uapi::DRM_IOCTL_VGPU_CTX_QUERY,
            &mut a,
        )?;
        Ok(a)
    }

    /// `SUBMIT`: the job's seqno.
    pub fn submit(
        &self,
        ctx_id: u32,
        engine: u32,
        cmds: &[uapi::DrmVgpuCmd],
        in_fences: &[uapi::DrmVgpuFence],
    ) -> Result<u64, KmdError> {
        let mut a = uapi::DrmVgpuSubmit {
            ctx_id,
            engine,
            cmds: cmds.as_ptr() as u64,
            num_cmds: cmds.len() as u32,
            num_in_fences: in_fences.len() as u32,
            in_fences: in_fences.as_ptr() as u64,
            ..Default::default()
        };
        ioctl(&self.file, "SUBMIT", uapi::DRM_IOCTL_VGPU_SUBMIT, &mut a)?;
        Ok(a.seqno)
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
        ioctl(&self.file, "WAIT", uapi::DRM_IOCTL_VGPU_WAIT, &mut a)?;
        Ok(a.first_signaled)
    }
}
