//! The DRM core's structs and ioctls (drm.h) the UMD uses: version,
//! capabilities, GEM close, PRIME, sync objects.

use super::{drm_iow, drm_iowr};

/// `DRM_IOCTL_GEM_CLOSE` from drm.h.
pub const DRM_IOCTL_GEM_CLOSE: u32 = drm_iow::<DrmGemClose>(0x09);

/// `struct drm_gem_close` from drm.h.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DrmGemClose {
    /// Handle to close.
    pub handle: u32,
    /// Zero.
    pub pad: u32,
}

/// `struct drm_version` from drm.h (64-bit layout).
#[repr(C)]
#[derive(Debug)]
pub struct DrmVersion {
    /// Major version.
    pub version_major: i32,
    /// Minor version.
    pub version_minor: i32,
    /// Patch level.
    pub version_patchlevel: i32,
    /// Length of `name`.
    pub name_len: usize,
    /// Buffer for the driver name.
    pub name: *mut u8,
    /// Length of `date`.
    pub date_len: usize,
    /// Buffer for the date.
    pub date: *mut u8,
    /// Length of `desc`.
    pub desc_len: usize,
    /// Buffer for the description.
    pub desc: *mut u8,
}

/// `DRM_IOCTL_VERSION`.
pub const DRM_IOCTL_VERSION: u32 = drm_iowr::<DrmVersion>(0x00);

/// `struct drm_get_cap` from drm.h.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DrmGetCap {
    /// In: `DRM_CAP_*`.
    pub capability: u64,
    /// Out.
    pub value: u64,
}

/// `DRM_IOCTL_GET_CAP`.
pub const DRM_IOCTL_GET_CAP: u32 = drm_iowr::<DrmGetCap>(0x0c);

/// `DRM_CAP_PRIME`.
pub const DRM_CAP_PRIME: u64 = 0x5;

/// `DRM_PRIME_CAP_IMPORT`.
pub const DRM_PRIME_CAP_IMPORT: u64 = 0x1;

/// `DRM_PRIME_CAP_EXPORT`.
pub const DRM_PRIME_CAP_EXPORT: u64 = 0x2;

/// `DRM_CAP_SYNCOBJ`.
pub const DRM_CAP_SYNCOBJ: u64 = 0x13;

/// `DRM_CAP_SYNCOBJ_TIMELINE`.
pub const DRM_CAP_SYNCOBJ_TIMELINE: u64 = 0x14;

/// `struct drm_prime_handle` from drm.h.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DrmPrimeHandle {
    /// GEM handle.
    pub handle: u32,
    /// `DRM_CLOEXEC | DRM_RDWR` (handle to fd).
    pub flags: u32,
    /// The dma-buf fd.
    pub fd: i32,
}

/// `DRM_IOCTL_PRIME_HANDLE_TO_FD`.
pub const DRM_IOCTL_PRIME_HANDLE_TO_FD: u32 = drm_iowr::<DrmPrimeHandle>(0x2d);

/// `DRM_IOCTL_PRIME_FD_TO_HANDLE`.
pub const DRM_IOCTL_PRIME_FD_TO_HANDLE: u32 = drm_iowr::<DrmPrimeHandle>(0x2e);

/// `DRM_CLOEXEC` (`O_CLOEXEC`).
pub const DRM_CLOEXEC: u32 = 0o2000000;

/// `DRM_RDWR` (`O_RDWR`).
pub const DRM_RDWR: u32 = 0o2;

/// `struct drm_syncobj_create` from drm.h.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DrmSyncobjCreate {
    /// Out: the handle.
    pub handle: u32,
    /// In: `SYNCOBJ_CREATE_SIGNALED`.
    pub flags: u32,
}

/// `DRM_SYNCOBJ_CREATE_SIGNALED`.
pub const SYNCOBJ_CREATE_SIGNALED: u32 = 1 << 0;

/// `struct drm_syncobj_destroy` from drm.h.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DrmSyncobjDestroy {
    /// The handle.
    pub handle: u32,
    /// Zero.
    pub pad: u32,
}

/// `struct drm_syncobj_handle` from drm.h.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DrmSyncobjHandle {
    /// The syncobj handle.
    pub handle: u32,
    /// `SYNCOBJ_*_SYNC_FILE`.
    pub flags: u32,
    /// The fd.
    pub fd: i32,
    /// Zero.
    pub pad: u32,
}

/// `DRM_SYNCOBJ_FD_TO_HANDLE_FLAGS_IMPORT_SYNC_FILE`.
pub const SYNCOBJ_FD_TO_HANDLE_IMPORT_SYNC_FILE: u32 = 1 << 0;

/// `DRM_SYNCOBJ_HANDLE_TO_FD_FLAGS_EXPORT_SYNC_FILE`.
pub const SYNCOBJ_HANDLE_TO_FD_EXPORT_SYNC_FILE: u32 = 1 << 0;

/// `struct drm_syncobj_transfer` from drm.h.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DrmSyncobjTransfer {
    /// Source handle.
    pub src_handle: u32,
    /// Destination handle.
    pub dst_handle: u32,
    /// Source point (0: binary).
    pub src_point: u64,
    /// Destination point (0: binary).
    pub dst_point: u64,
    /// `SYNCOBJ_WAIT_*`.
    pub flags: u32,
    /// Zero.
    pub pad: u32,
}

/// `DRM_SYNCOBJ_WAIT_FLAGS_WAIT_ALL`.
pub const SYNCOBJ_WAIT_ALL: u32 = 1 << 0;

/// `DRM_SYNCOBJ_WAIT_FLAGS_WAIT_FOR_SUBMIT`.
pub const SYNCOBJ_WAIT_FOR_SUBMIT: u32 = 1 << 1;

/// `DRM_SYNCOBJ_WAIT_FLAGS_WAIT_AVAILABLE`.
pub const SYNCOBJ_WAIT_AVAILABLE: u32 = 1 << 2;

/// `struct drm_syncobj_wait` from drm.h.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DrmSyncobjWait {
    /// Pointer to handles.
    pub handles: u64,
    /// Absolute `CLOCK_MONOTONIC` timeout.
    pub timeout_nsec: i64,
    /// Number of handles.
    pub count_handles: u32,
    /// `SYNCOBJ_WAIT_*`.
    pub flags: u32,
    /// Out: with "any", the first signalled.
    pub first_signaled: u32,
    /// Zero.
    pub pad: u32,
}

/// `struct drm_syncobj_timeline_wait` from drm.h.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DrmSyncobjTimelineWait {
    /// Pointer to handles.
    pub handles: u64,
    /// Pointer to points.
    pub points: u64,
    /// Absolute `CLOCK_MONOTONIC` timeout.
    pub timeout_nsec: i64,
    /// Number of handles.
    pub count_handles: u32,
    /// `SYNCOBJ_WAIT_*`.
    pub flags: u32,
    /// Out: with "any", the first signalled.
    pub first_signaled: u32,
    /// Zero.
    pub pad: u32,
}

/// `struct drm_syncobj_array` from drm.h.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DrmSyncobjArray {
    /// Pointer to handles.
    pub handles: u64,
    /// Number of handles.
    pub count_handles: u32,
    /// Zero.
    pub pad: u32,
}

/// `struct drm_syncobj_timeline_array` from drm.h.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DrmSyncobjTimelineArray {
    /// Pointer to handles.
    pub handles: u64,
    /// Pointer to points.
    pub points: u64,
    /// Number of handles.
    pub count_handles: u32,
    /// `SYNCOBJ_QUERY_LAST_SUBMITTED` (query), zero (signal).
    pub flags: u32,
}

/// `DRM_SYNCOBJ_QUERY_FLAGS_LAST_SUBMITTED`.
pub const SYNCOBJ_QUERY_LAST_SUBMITTED: u32 = 1 << 0;

/// `DRM_IOCTL_SYNCOBJ_CREATE`.
pub const DRM_IOCTL_SYNCOBJ_CREATE: u32 = drm_iowr::<DrmSyncobjCreate>(0xbf);

/// `DRM_IOCTL_SYNCOBJ_DESTROY`.
pub const DRM_IOCTL_SYNCOBJ_DESTROY: u32 = drm_iowr::<DrmSyncobjDestroy>(0xc0);

/// `DRM_IOCTL_SYNCOBJ_HANDLE_TO_FD`.
pub const DRM_IOCTL_SYNCOBJ_HANDLE_TO_FD: u32 = drm_iowr::<DrmSyncobjHandle>(0xc1);

/// `DRM_IOCTL_SYNCOBJ_FD_TO_HANDLE`.
pub const DRM_IOCTL_SYNCOBJ_FD_TO_HANDLE: u32 = drm_iowr::<DrmSyncobjHandle>(0xc2);

/// `DRM_IOCTL_SYNCOBJ_WAIT`.
pub const DRM_IOCTL_SYNCOBJ_WAIT: u32 = drm_iowr::<DrmSyncobjWait>(0xc3);

/// `DRM_IOCTL_SYNCOBJ_RESET`.
pub const DRM_IOCTL_SYNCOBJ_RESET: u32 = drm_iowr::<DrmSyncobjArray>(0xc4);

/// `DRM_IOCTL_SYNCOBJ_SIGNAL`.
pub const DRM_IOCTL_SYNCOBJ_SIGNAL: u32 = drm_iowr::<DrmSyncobjArray>(0xc5);

/// `DRM_IOCTL_SYNCOBJ_TIMELINE_WAIT`.
pub const DRM_IOCTL_SYNCOBJ_TIMELINE_WAIT: u32 = drm_iowr::<DrmSyncobjTimelineWait>(0xca);

/// `DRM_IOCTL_SYNCOBJ_QUERY`.
pub const DRM_IOCTL_SYNCOBJ_QUERY: u32 = drm_iowr::<DrmSyncobjTimelineArray>(0xcb);

/// `DRM_IOCTL_SYNCOBJ_TRANSFER`.
pub const DRM_IOCTL_SYNCOBJ_TRANSFER: u32 = drm_iowr::<DrmSyncobjTransfer>(0xcc);

/// `DRM_IOCTL_SYNCOBJ_TIMELINE_SIGNAL`.
pub const DRM_IOCTL_SYNCOBJ_TIMELINE_SIGNAL: u32 = drm_iowr::<DrmSyncobjTimelineArray>(0xcd);
