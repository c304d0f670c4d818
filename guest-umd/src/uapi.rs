//! Rust mirror of `include/uapi/drm/vgpu_drm.h`, the KMD's ioctl interface.
//!
//! The C header is the source of truth. `tests/uapi_header.rs` compiles a C
//! program against it and checks every size, offset, constant and ioctl
//! number below against what the C compiler computes.

/// `VGPU_PARAM_*`: parameters of [`DrmVgpuGetParam`].
pub mod param {
    /// Hardware generation: 1 or 2.
    pub const GENERATION: u32 = 0x01;
    /// `(major << 16) | minor`.
    pub const PROTOCOL_VERSION: u32 = 0x02;
    /// `(major << 16) | (minor << 8) | patch`.
    pub const FIRMWARE_VERSION: u32 = 0x03;
    /// Bit `i` set: engine `i` present.
    pub const ENGINE_MASK: u32 = 0x04;
    /// GPU virtual address width.
    pub const VA_BITS: u32 = 0x05;
    /// Bitmask of supported page sizes in bytes.
    pub const PAGE_SIZES: u32 = 0x06;
    /// Number of contexts.
    pub const MAX_CONTEXTS: u32 = 0x07;
    /// Largest ring, bytes.
    pub const MAX_RING_SIZE: u32 = 0x08;
    /// Smallest ring, bytes.
    pub const MIN_RING_SIZE: u32 = 0x09;
    /// Compute units.
    pub const COMPUTE_UNITS: u32 = 0x0a;
    /// PCI device id of the function.
    pub const DEVICE_ID: u32 = 0x0b;
    /// Event records the KMD has consumed.
    pub const EVENTS_RECEIVED: u32 = 0x0c;
    /// Layout fingerprint of the KMD's hwif build.
    pub const HWIF_FINGERPRINT: u32 = 0x0d;
    /// Layout fingerprint the device reported.
    pub const DEVICE_FINGERPRINT: u32 = 0x0e;
    /// One past the last valid parameter.
    pub const COUNT: u32 = 0x0f;
}

/// `struct drm_vgpu_get_param`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DrmVgpuGetParam {
    /// In: one of [`param`].
    pub param: u32,
    /// Must be zero.
    pub pad: u32,
    /// Out.
    pub value: u64,
}

/// `struct drm_vgpu_ping`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DrmVgpuPing {
    /// In: echoed by the device.
    pub cookie: u64,
    /// In: 0 = driver default (1 s).
    pub timeout_ns: u64,
    /// Out: sequence number of the event record.
    pub event_seq: u64,
    /// Out: nanoseconds from sending PING to receiving its event.
    pub latency_ns: u64,
}

/// `DRM_COMMAND_BASE` from drm.h.
pub const DRM_COMMAND_BASE: u32 = 0x40;
/// `DRM_VGPU_GET_PARAM`.
pub const DRM_VGPU_GET_PARAM: u32 = 0x00;
/// `DRM_VGPU_PING`.
pub const DRM_VGPU_PING: u32 = 0x01;

const IOC_WRITE: u32 = 1;
const IOC_READ: u32 = 2;
const DRM_IOCTL_BASE: u32 = b'd' as u32;

/// Linux `_IOC(dir, type, nr, size)` on x86.
pub const fn ioc(dir: u32, ty: u32, nr: u32, size: usize) -> u32 {
    (dir << 30) | ((size as u32) << 16) | (ty << 8) | nr
}

/// `DRM_IOWR(nr, T)`.
pub const fn drm_iowr<T>(nr: u32) -> u32 {
    ioc(
        IOC_READ | IOC_WRITE,
        DRM_IOCTL_BASE,
        nr,
        core::mem::size_of::<T>(),
    )
}

/// `DRM_IOCTL_VGPU_GET_PARAM`.
pub const DRM_IOCTL_VGPU_GET_PARAM: u32 =
    drm_iowr::<DrmVgpuGetParam>(DRM_COMMAND_BASE + DRM_VGPU_GET_PARAM);
/// `DRM_IOCTL_VGPU_PING`.
pub const DRM_IOCTL_VGPU_PING: u32 = drm_iowr::<DrmVgpuPing>(DRM_COMMAND_BASE + DRM_VGPU_PING);

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
