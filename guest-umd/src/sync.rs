//! Sync objects: timelines shared between streams, processes and the host.
//!
//! A [`Timeline`] is a DRM timeline sync object of the context's render
//! node: points on it are signalled by GPU work ([`crate::Stream::signal`]),
//! or by the host ([`Timeline::signal`]), and waited for by GPU work
//! ([`crate::Stream::wait`], the KMD holds the batch back, the CPU does not
//! block) or by the host ([`Timeline::wait`]). Exported as an fd
//! ([`Timeline::export_fd`]) it is the same timeline in another process
//! ([`Timeline::import_fd`]), which is how a producer and a consumer order
//! their work on a shared buffer ([`crate::Buffer::export_fd`]).
//!
//! Waiting for a point that nobody has submitted yet is allowed: the host
//! wait blocks until it is submitted and signalled; a stream's wait holds
//! its next batch in the UMD until the point is submitted (the KMD wants
//! the fence to exist), then in the KMD until it signals.

use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

use crate::context::{Context, CtxInner};
use crate::error::{Error, Result};
use crate::ioctl::ioctl;
use crate::kmd::{Kmd, KmdError};
use crate::uapi;

/// The host's monotonic clock in nanoseconds (`CLOCK_MONOTONIC`, the clock
/// of the syncobj waits' absolute timeouts).
pub(crate) fn monotonic_ns() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec)
}

/// The absolute deadline `timeout` from now (`None`: never).
pub(crate) fn deadline(timeout: Option<Duration>) -> i64 {
    match timeout {
        None => i64::MAX,
        Some(t) => monotonic_ns().saturating_add(i64::try_from(t.as_nanos()).unwrap_or(i64::MAX)),
    }
}

/// Waits until every (syncobj, point) has a fence (submitted, maybe not
/// signalled): what the KMD needs before a job may depend on it.
pub(crate) fn wait_submitted(
    kmd: &Kmd,
    syncs: &[uapi::DrmVgpuSync],
) -> std::result::Result<(), KmdError> {
    if syncs.is_empty() {
        return Ok(());
    }
    let handles: Vec<u32> = syncs.iter().map(|s| s.handle).collect();
    let points: Vec<u64> = syncs.iter().map(|s| s.point).collect();
    kmd.syncobj_timeline_wait(
        &handles,
        &points,
        i64::MAX,
        uapi::SYNCOBJ_WAIT_ALL | uapi::SYNCOBJ_WAIT_AVAILABLE,
    )
    .map(|_| ())
}

/// A timeline sync object of a context.
pub struct Timeline {
    pub(crate) ctx: Arc<CtxInner>,
    pub(crate) handle: u32,
}

impl std::fmt::Debug for Timeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Timeline")
            .field("handle", &self.handle)
            .finish()
    }
}

impl Timeline {
    /// A new timeline at point 0.
    pub fn new(ctx: &Context) -> Result<Timeline> {
        let call = "Timeline::new";
        ctx.inner.check(call)?;
        let handle = ctx
            .inner
            .kmd
            .syncobj_create(0)
            .map_err(|source| Error::Kmd {
                call,
                ctx: 0,
                source,
            })?;
        Ok(Timeline {
            ctx: ctx.inner.clone(),
            handle,
        })
    }

    /// The timeline as an fd another process imports with
    /// [`Timeline::import_fd`] (close-on-exec; pass it over a Unix socket or with
    /// `pidfd_getfd(2)`).
    pub fn export_fd(&self) -> Result<OwnedFd> {
        self.ctx
            .kmd
            .syncobj_handle_to_fd(self.handle, 0)
            .map_err(|source| Error::Kmd {
                call: "Timeline::export_fd",
                ctx: 0,
                source,
            })
    }

    /// The timeline another process exported (the fd stays the caller's).
    pub fn import_fd(ctx: &Context, fd: BorrowedFd<'_>) -> Result<Timeline> {
        let call = "Timeline::import_fd";
        ctx.inner.check(call)?;
        let handle = ctx
            .inner
            .kmd
            .syncobj_fd_to_handle(fd.as_raw_fd(), 0, 0)
            .map_err(|source| Error::Kmd {
                call,
                ctx: 0,
                source,
            })?;
        Ok(Timeline {
            ctx: ctx.inner.clone(),
            handle,
        })
    }

    /// The syncobj handle (for raw KMD calls).
    pub fn handle(&self) -> u32 {
        self.handle
    }

    /// Signals `point` from the host.
    pub fn signal(&self, point: u64) -> Result<()> {
        self.ctx
            .kmd
            .syncobj_timeline_signal(&[self.handle], &[point])
            .map_err(|source| Error::Kmd {
                call: "Timeline::signal",
                ctx: 0,
                source,
            })
    }

    /// Waits until `point` signalled (submitted meanwhile if it was not
    /// yet); `timeout` `None` waits forever. A point whose work failed
    /// reports the failure (`EIO`, `ECANCELED` in [`Error::Kmd`]).
    pub fn wait(&self, point: u64, timeout: Option<Duration>) -> Result<()> {
        let call = "Timeline::wait";
        self.ctx
            .kmd
            .syncobj_timeline_wait(
                &[self.handle],
                &[point],
                deadline(timeout),
                uapi::SYNCOBJ_WAIT_ALL | uapi::SYNCOBJ_WAIT_FOR_SUBMIT,
            )
            .map_err(|source| Error::Kmd {
                call,
                ctx: 0,
                source,
            })?;
        // The syncobj wait does not report a fence's error: export the
        // point's fence and ask it.
        match self.status(point)? {
            s if s < 0 => Err(Error::Kmd {
                call,
                ctx: 0,
                source: KmdError {
                    call: "SYNC_IOC_FILE_INFO",
                    errno: -s,
                },
            }),
            _ => Ok(()),
        }
    }

    /// The highest signalled point.
    pub fn value(&self) -> Result<u64> {
        let v = self
            .ctx
            .kmd
            .syncobj_query(&[self.handle], 0)
            .map_err(|source| Error::Kmd {
                call: "Timeline::value",
                ctx: 0,
                source,
            })?;
        Ok(v.first().copied().unwrap_or(0))
    }

    /// The status of `point`'s fence as its sync_file reports it: 1
    /// signalled, 0 pending, a negative errno when its work failed.
    pub fn status(&self, point: u64) -> Result<i32> {
        let fd =
            export_sync_file(&self.ctx.kmd, self.handle, point).map_err(|source| Error::Kmd {
                call: "Timeline::status",
                ctx: 0,
                source,
            })?;
        Ok(sync_file_status(fd.as_raw_fd()))
    }
}

impl Drop for Timeline {
    fn drop(&mut self) {
        let _ = self.ctx.kmd.syncobj_destroy(self.handle);
    }
}

/// The fence of (`handle`, `point`) as a sync_file (through a temporary
/// binary syncobj: only those export sync_files).
pub(crate) fn export_sync_file(
    kmd: &Kmd,
    handle: u32,
    point: u64,
) -> std::result::Result<OwnedFd, KmdError> {
    let tmp = kmd.syncobj_create(0)?;
    let r = kmd
        .syncobj_transfer(handle, point, tmp, 0, 0)
        .and_then(|()| kmd.syncobj_handle_to_fd(tmp, uapi::SYNCOBJ_HANDLE_TO_FD_EXPORT_SYNC_FILE));
    let _ = kmd.syncobj_destroy(tmp);
    r
}

/// `struct sync_file_info` (linux/sync_file.h), the part the status needs.
#[repr(C)]
#[derive(Default)]
struct SyncFileInfo {
    name: [u8; 32],
    status: i32,
    flags: u32,
    num_fences: u32,
    pad: u32,
    sync_fence_info: u64,
}

/// `SYNC_IOC_FILE_INFO`: `_IOWR('>', 4, struct sync_file_info)`.
const SYNC_IOC_FILE_INFO: u32 = uapi::ioc(3, b'>' as u32, 4, std::mem::size_of::<SyncFileInfo>());

/// `struct sync_fence_info` (linux/sync_file.h): one fence of a sync_file.
#[repr(C)]
#[derive(Clone, Copy)]
struct SyncFenceInfo {
    obj_name: [u8; 32],
    driver_name: [u8; 32],
    status: i32,
    flags: u32,
    timestamp_ns: u64,
}

const _: () = assert!(std::mem::size_of::<SyncFenceInfo>() == 80);

/// `SYNC_IOC_FILE_INFO` on `fd` with room for `fences` (empty: the count
/// and the top-level status only).
fn file_info(fd: i32, fences: &mut [SyncFenceInfo]) -> Option<SyncFileInfo> {
    let mut info = SyncFileInfo {
        num_fences: fences.len() as u32,
        sync_fence_info: if fences.is_empty() {
            0
        } else {
            fences.as_mut_ptr() as u64
        },
        ..Default::default()
    };
    // SAFETY: `SYNC_IOC_FILE_INFO` takes one `sync_file_info` (its number
    // encodes that size), writes it and at most `num_fences` entries at
    // `sync_fence_info`, which `fences` (exclusively borrowed for the call)
    // holds.
    let r = unsafe { ioctl(fd, SYNC_IOC_FILE_INFO, "SYNC_IOC_FILE_INFO", &mut info) };
    r.ok().map(|()| info)
}

/// A sync_file's status: 1 signalled, 0 pending, a negative errno when it
/// or a fence inside it signalled with an error (-1000 if the fd is not a
/// sync_file).
///
/// The fences inside count because a timeline point is a `dma_fence_chain`
/// node, which signals without an error when the job's fence it contains
/// fails (the chain does not propagate errors): the job's error is only
/// seen in the per-fence information, which the kernel unwraps from chains
/// and arrays.
pub fn sync_file_status(fd: i32) -> i32 {
    let Some(top) = file_info(fd, &mut []) else {
        return -1000;
    };
    if top.status != 1 || top.num_fences == 0 {
        return top.status;
    }
    let empty = SyncFenceInfo {
        obj_name: [0; 32],
        driver_name: [0; 32],
        status: 0,
        flags: 0,
        timestamp_ns: 0,
    };
    // The count only shrinks (signalled chain links are dropped), so this
    // much room is enough.
    let mut fences = vec![empty; top.num_fences as usize];
    match file_info(fd, &mut fences) {
        Some(all) => all.status,
        None => -1000,
    }
}
