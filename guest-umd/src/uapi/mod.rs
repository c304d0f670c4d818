//! Rust mirror of `include/uapi/drm/vgpu_drm.h`, the KMD's ioctl interface.
//!
//! The C header is the source of truth. `tests/uapi_header.rs` compiles a C
//! program against it and checks every size, offset, constant and ioctl
//! number below against what the C compiler computes.
//!
//! Files: this one the parameters, flags, limits and the ioctl numbers;
//! `objects.rs` the structs of BOs, address spaces, contexts, user-mode
//! queues, host mappings and sanitizer reports; `submit.rs` those of
//! submission, waits and fences; `stats.rs` those of `QUERY_STATS`;
//! `drm.rs` the DRM core's (drm.h) that the UMD uses.

mod drm;
mod objects;
mod stats;
mod submit;

pub use drm::*;
pub use objects::*;
pub use stats::*;
pub use submit::*;

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
    /// First GPU VA `VM_BIND` accepts.
    pub const VA_START: u32 = 0x0f;
    /// One past the last GPU VA `VM_BIND` accepts.
    pub const VA_END: u32 = 0x10;
    /// Bytes of device memory (VRAM); 0: none.
    pub const VRAM_SIZE: u32 = 0x11;
    /// Bytes of VRAM the CPU reaches through the aperture; 0: none (no
    /// VRAM, or no aperture function).
    pub const VRAM_VISIBLE: u32 = 0x12;
    /// 0: active; runtime suspended (`autosuspend_ms`): 1 in D3hot, 2 in
    /// D3cold.
    pub const PM_STATE: u32 = 0x13;
    /// Runtime suspensions since probe.
    pub const PM_SUSPENDS: u32 = 0x14;
    /// Runtime resumes since probe.
    pub const PM_RESUMES: u32 = 0x15;
    /// Milliseconds spent runtime suspended since probe.
    pub const PM_SUSPENDED_MS: u32 = 0x16;
    /// System suspend/resume cycles since probe.
    pub const SYSTEM_SLEEPS: u32 = 0x17;
    /// Runtime suspensions to D3cold (VRAM saved first,
    /// `vram_d3cold_threshold_mib`) since probe.
    pub const PM_D3COLD_SUSPENDS: u32 = 0x18;
    /// 0: the whole device; `n`: virtual function `n` of a partitioned GPU
    /// (`MAX_CONTEXTS` and `VRAM_SIZE` are then its partition's).
    pub const VIRTUAL_FUNCTION: u32 = 0x19;
    /// One past the last valid parameter.
    pub const COUNT: u32 = 0x1a;
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

/// `VGPU_GEM_CREATE_LAZY`: demand-paged BO.
pub const GEM_CREATE_LAZY: u32 = 1 << 0;

/// `VGPU_GEM_CREATE_VRAM`: the BO may be placed in device memory.
pub const GEM_CREATE_VRAM: u32 = 1 << 1;

/// `VGPU_GEM_CREATE_SYSTEM`: the BO may be placed in system memory.
pub const GEM_CREATE_SYSTEM: u32 = 1 << 2;

/// `VGPU_GEM_CREATE_CPU_ACCESS`: a VRAM placement in the CPU-visible part.
pub const GEM_CREATE_CPU_ACCESS: u32 = 1 << 3;

/// Every `VGPU_GEM_CREATE_*` flag.
pub const GEM_CREATE_FLAGS: u32 =
    GEM_CREATE_LAZY | GEM_CREATE_VRAM | GEM_CREATE_SYSTEM | GEM_CREATE_CPU_ACCESS;

/// `VGPU_GEM_MAX_SIZE`.
pub const GEM_MAX_SIZE: u64 = 1 << 30;

/// `VGPU_VM_BIND_READ`.
pub const VM_BIND_READ: u32 = 1 << 0;

/// `VGPU_VM_BIND_WRITE`.
pub const VM_BIND_WRITE: u32 = 1 << 1;

/// `VGPU_VM_BIND_EXEC`.
pub const VM_BIND_EXEC: u32 = 1 << 2;

/// Every `VGPU_VM_BIND_*` flag.
pub const VM_BIND_FLAGS: u32 = VM_BIND_READ | VM_BIND_WRITE | VM_BIND_EXEC;

/// `VGPU_CTX_PRIORITY_LOW`.
pub const CTX_PRIORITY_LOW: u32 = 0;

/// `VGPU_CTX_PRIORITY_NORMAL`.
pub const CTX_PRIORITY_NORMAL: u32 = 1;

/// `VGPU_CTX_PRIORITY_HIGH`.
pub const CTX_PRIORITY_HIGH: u32 = 2;

/// `VGPU_CTX_PRIORITY_REALTIME`.
pub const CTX_PRIORITY_REALTIME: u32 = 3;

/// `VGPU_ENGINE_COPY`.
pub const ENGINE_COPY: u32 = 0;

/// `VGPU_ENGINE_COMPUTE`.
pub const ENGINE_COMPUTE: u32 = 1;

/// `VGPU_CTX_CREATE_REPLAYABLE`.
pub const CTX_CREATE_REPLAYABLE: u32 = 1 << 0;

/// Every `VGPU_CTX_CREATE_*` flag.
pub const CTX_CREATE_FLAGS: u32 = CTX_CREATE_REPLAYABLE;

/// `VGPU_CTX_RESET_NONE`.
pub const CTX_RESET_NONE: u32 = 0;

/// `VGPU_CTX_RESET_GUILTY`.
pub const CTX_RESET_GUILTY: u32 = 1;

/// `VGPU_CTX_RESET_INNOCENT`.
pub const CTX_RESET_INNOCENT: u32 = 2;

/// `VGPU_CTX_RESET_VRAM_LOST`: a device reset lost the VRAM its file's BOs
/// were in.
pub const CTX_RESET_VRAM_LOST: u32 = 3;

/// `VGPU_CTX_STATE_ERRORED`.
pub const CTX_STATE_ERRORED: u32 = 1 << 0;

/// `VGPU_CTX_STATE_BANNED`.
pub const CTX_STATE_BANNED: u32 = 1 << 1;

/// `VGPU_CTX_STATE_FAULTED`.
pub const CTX_STATE_FAULTED: u32 = 1 << 2;

/// `VGPU_CTX_STATE_DEVICE_LOST`.
pub const CTX_STATE_DEVICE_LOST: u32 = 1 << 3;

/// `VGPU_CTX_STATE_USER_QUEUE`.
pub const CTX_STATE_USER_QUEUE: u32 = 1 << 4;

/// `VGPU_CTX_STATE_SUSPENDED`.
pub const CTX_STATE_SUSPENDED: u32 = 1 << 5;

/// `VGPU_UQ_CREATE_FLAGS`.
pub const UQ_CREATE_FLAGS: u32 = 0;

/// `VGPU_ACCESS_READ`.
pub const ACCESS_READ: u32 = 1;

/// `VGPU_ACCESS_WRITE`.
pub const ACCESS_WRITE: u32 = 2;

/// `VGPU_ACCESS_EXECUTE`.
pub const ACCESS_EXECUTE: u32 = 3;

/// `VGPU_ACCESS_ATOMIC`.
pub const ACCESS_ATOMIC: u32 = 4;

/// `VGPU_FAULT_REASON_*`: CTX_QUERY `fault_reason` (hwif `mmu::FaultReason`).
pub mod fault_reason {
    /// `VGPU_FAULT_REASON_NONE`.
    pub const NONE: u32 = 0;
    /// `VGPU_FAULT_REASON_NOT_PRESENT`.
    pub const NOT_PRESENT: u32 = 1;
    /// `VGPU_FAULT_REASON_PERMISSION`.
    pub const PERMISSION: u32 = 2;
    /// `VGPU_FAULT_REASON_MALFORMED`.
    pub const MALFORMED: u32 = 3;
    /// `VGPU_FAULT_REASON_OUT_OF_RANGE`.
    pub const OUT_OF_RANGE: u32 = 4;
    /// `VGPU_FAULT_REASON_BAD_PHYSICAL`.
    pub const BAD_PHYSICAL: u32 = 5;
    /// Every reason with its header name (after the prefix).
    pub const ALL: [(u32, &str); 6] = [
        (NONE, "NONE"),
        (NOT_PRESENT, "NOT_PRESENT"),
        (PERMISSION, "PERMISSION"),
        (MALFORMED, "MALFORMED"),
        (OUT_OF_RANGE, "OUT_OF_RANGE"),
        (BAD_PHYSICAL, "BAD_PHYSICAL"),
    ];
}

/// `VGPU_ENGINE_ERROR_*`: CTX_QUERY `engine_error` (hwif
/// `packet::EngineError`).
pub mod engine_error {
    /// `VGPU_ENGINE_ERROR_NONE`.
    pub const NONE: u32 = 0;
    /// `VGPU_ENGINE_ERROR_BAD_HEADER`.
    pub const BAD_HEADER: u32 = 1;
    /// `VGPU_ENGINE_ERROR_BAD_OPCODE`.
    pub const BAD_OPCODE: u32 = 2;
    /// `VGPU_ENGINE_ERROR_BAD_LENGTH`.
    pub const BAD_LENGTH: u32 = 3;
    /// `VGPU_ENGINE_ERROR_MISALIGNED`.
    pub const MISALIGNED: u32 = 4;
    /// `VGPU_ENGINE_ERROR_WRONG_ENGINE`.
    pub const WRONG_ENGINE: u32 = 5;
    /// `VGPU_ENGINE_ERROR_BAD_OPERAND`.
    pub const BAD_OPERAND: u32 = 6;
    /// `VGPU_ENGINE_ERROR_INDIRECT_DEPTH`.
    pub const INDIRECT_DEPTH: u32 = 7;
    /// `VGPU_ENGINE_ERROR_RING_OVERFLOW`.
    pub const RING_OVERFLOW: u32 = 8;
    /// `VGPU_ENGINE_ERROR_BAD_POINTER`.
    pub const BAD_POINTER: u32 = 9;
    /// `VGPU_ENGINE_ERROR_TRUNCATED`.
    pub const TRUNCATED: u32 = 10;
    /// `VGPU_ENGINE_ERROR_UNSUPPORTED`.
    pub const UNSUPPORTED: u32 = 11;
    /// `VGPU_ENGINE_ERROR_TRAP`.
    pub const TRAP: u32 = 12;
    /// `VGPU_ENGINE_ERROR_PAGE_FAULT`.
    pub const PAGE_FAULT: u32 = 13;
    /// `VGPU_ENGINE_ERROR_ECC_UNCORRECTABLE`.
    pub const ECC_UNCORRECTABLE: u32 = 14;
    /// `VGPU_ENGINE_ERROR_INTERNAL`.
    pub const INTERNAL: u32 = 15;
    /// `VGPU_ENGINE_ERROR_SANITIZER`.
    pub const SANITIZER: u32 = 16;
    /// `VGPU_ENGINE_ERROR_DOORBELL_FAULT`.
    pub const DOORBELL_FAULT: u32 = 17;
}

/// `VGPU_CMD_INDEX_NONE`: CTX_QUERY `error_cmd_index` of a KMD packet.
pub const CMD_INDEX_NONE: u32 = 0xffff_ffff;

/// `VGPU_SAN_*`: sanitizer checks (hwif `sanitize::Check` numbers).
pub mod san {
    /// `VGPU_SAN_RING_UNPUBLISHED`.
    pub const RING_UNPUBLISHED: u32 = 1;
    /// `VGPU_SAN_RING_INDEX`.
    pub const RING_INDEX: u32 = 2;
    /// `VGPU_SAN_TLB_STALE`.
    pub const TLB_STALE: u32 = 3;
    /// `VGPU_SAN_TLB_INV_ORDER`.
    pub const TLB_INV_ORDER: u32 = 4;
    /// `VGPU_SAN_CMDBUF_UNMAPPED`.
    pub const CMDBUF_UNMAPPED: u32 = 5;
    /// `VGPU_SAN_FENCE_REGRESS`.
    pub const FENCE_REGRESS: u32 = 6;
    /// `VGPU_SAN_FENCE_WRAP`.
    pub const FENCE_WRAP: u32 = 7;
    /// `VGPU_SAN_XENGINE_HAZARD`.
    pub const XENGINE_HAZARD: u32 = 8;
    /// `VGPU_SAN_WAIT_UNSATISFIABLE`.
    pub const WAIT_UNSATISFIABLE: u32 = 9;
    /// `VGPU_SAN_DMA_UNOWNED`.
    pub const DMA_UNOWNED: u32 = 10;
    /// `VGPU_SAN_TEARDOWN`.
    pub const TEARDOWN: u32 = 11;
    /// `VGPU_SAN_PT_INVALID_TABLE`.
    pub const PT_INVALID_TABLE: u32 = 12;
    /// `VGPU_SAN_PT_LEVEL`.
    pub const PT_LEVEL: u32 = 13;
    /// `VGPU_SAN_PT_ALIGN`.
    pub const PT_ALIGN: u32 = 14;
    /// `VGPU_SAN_PT_UNOWNED`.
    pub const PT_UNOWNED: u32 = 15;
    /// `VGPU_SAN_FW_POLL`.
    pub const FW_POLL: u32 = 16;
    /// `VGPU_SAN_FLAG_STOPPED`.
    pub const FLAG_STOPPED: u32 = 1 << 0;
    /// `VGPU_SAN_FLAG_PRIOR`.
    pub const FLAG_PRIOR: u32 = 1 << 1;
    /// `VGPU_SAN_FLAG_PACKET`.
    pub const FLAG_PACKET: u32 = 1 << 2;
    /// `VGPU_SAN_FLAG_OBJECT`.
    pub const FLAG_OBJECT: u32 = 1 << 3;
    /// `VGPU_SAN_FLAG_MOVED`.
    pub const FLAG_MOVED: u32 = 1 << 4;
    /// `VGPU_SAN_PACKET_WORDS`.
    pub const PACKET_WORDS: usize = 15;
    /// `VGPU_SAN_HISTORY`.
    pub const HISTORY: usize = 8;
}

/// `VGPU_SUBMIT_MAX_CMDS`.
pub const SUBMIT_MAX_CMDS: u32 = 64;

/// `VGPU_SUBMIT_MAX_IN_FENCES`.
pub const SUBMIT_MAX_IN_FENCES: u32 = 64;

/// `VGPU_CTX_MAX_PENDING`: unsignalled jobs per (context, engine), queued
/// in the KMD or on the ring.
pub const CTX_MAX_PENDING: u32 = 2048;

/// `VGPU_SUBMIT_MAX_SYNCS`: in_syncs, and out_syncs, per `SUBMIT`.
pub const SUBMIT_MAX_SYNCS: u32 = 64;

/// `VGPU_SUBMIT_MAX_BOS`: implicit-sync BOs per `SUBMIT`.
pub const SUBMIT_MAX_BOS: u32 = 64;

/// `VGPU_SUBMIT_BO_READ`.
pub const SUBMIT_BO_READ: u32 = 1 << 0;

/// `VGPU_SUBMIT_BO_WRITE`.
pub const SUBMIT_BO_WRITE: u32 = 1 << 1;

/// `VGPU_SUBMIT_BO_FLAGS`.
pub const SUBMIT_BO_FLAGS: u32 = SUBMIT_BO_READ | SUBMIT_BO_WRITE;

/// `VGPU_VM_OP_MAP`.
pub const VM_OP_MAP: u32 = 1;

/// `VGPU_VM_OP_UNMAP`.
pub const VM_OP_UNMAP: u32 = 2;

/// `VGPU_VM_BIND_MAX_OPS`.
pub const VM_BIND_MAX_OPS: u32 = 256;

/// `VGPU_VM_BIND_MAX_SYNCS`.
pub const VM_BIND_MAX_SYNCS: u32 = 64;

/// `VGPU_SUBMIT_BUSY_IS_EBUSY`.
pub const SUBMIT_BUSY_IS_EBUSY: u32 = 1 << 0;

/// Every `VGPU_SUBMIT_*` flag.
pub const SUBMIT_FLAGS: u32 = SUBMIT_BUSY_IS_EBUSY;

/// `VGPU_WAIT_ALL`.
pub const WAIT_ALL: u32 = 1 << 0;

/// Every `VGPU_WAIT_*` flag.
pub const WAIT_FLAGS: u32 = WAIT_ALL;

/// `VGPU_WAIT_MAX_FENCES`.
pub const WAIT_MAX_FENCES: u32 = 256;

/// `DRM_COMMAND_BASE` from drm.h.
pub const DRM_COMMAND_BASE: u32 = 0x40;

/// `DRM_VGPU_GET_PARAM`.
pub const DRM_VGPU_GET_PARAM: u32 = 0x00;

/// `DRM_VGPU_PING`.
pub const DRM_VGPU_PING: u32 = 0x01;

/// `DRM_VGPU_GEM_CREATE`.
pub const DRM_VGPU_GEM_CREATE: u32 = 0x02;

/// `DRM_VGPU_GEM_MMAP_OFFSET`.
pub const DRM_VGPU_GEM_MMAP_OFFSET: u32 = 0x03;

/// `DRM_VGPU_VM_BIND`.
pub const DRM_VGPU_VM_BIND: u32 = 0x04;

/// `DRM_VGPU_VM_UNBIND`.
pub const DRM_VGPU_VM_UNBIND: u32 = 0x05;

/// `DRM_VGPU_CTX_CREATE`.
pub const DRM_VGPU_CTX_CREATE: u32 = 0x06;

/// `DRM_VGPU_CTX_DESTROY`.
pub const DRM_VGPU_CTX_DESTROY: u32 = 0x07;

/// `DRM_VGPU_CTX_QUERY`.
pub const DRM_VGPU_CTX_QUERY: u32 = 0x08;

/// `DRM_VGPU_SUBMIT`.
pub const DRM_VGPU_SUBMIT: u32 = 0x09;

/// `DRM_VGPU_WAIT`.
pub const DRM_VGPU_WAIT: u32 = 0x0a;

/// `DRM_VGPU_QUERY_STATS`.
pub const DRM_VGPU_QUERY_STATS: u32 = 0x0b;

/// `DRM_VGPU_FENCE_EXPORT`.
pub const DRM_VGPU_FENCE_EXPORT: u32 = 0x0c;

/// `DRM_VGPU_VM_BIND_OPS`.
pub const DRM_VGPU_VM_BIND_OPS: u32 = 0x0d;

/// `DRM_VGPU_SAN_REPORT`.
pub const DRM_VGPU_SAN_REPORT: u32 = 0x0e;

/// `DRM_VGPU_UQ_CREATE`.
pub const DRM_VGPU_UQ_CREATE: u32 = 0x0f;

/// `DRM_VGPU_UQ_KICK`.
pub const DRM_VGPU_UQ_KICK: u32 = 0x10;

/// `DRM_VGPU_HOST_MAP`.
pub const DRM_VGPU_HOST_MAP: u32 = 0x11;

/// `DRM_VGPU_HOST_UNMAP`.
pub const DRM_VGPU_HOST_UNMAP: u32 = 0x12;

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

/// `DRM_IOW(nr, T)`.
pub const fn drm_iow<T>(nr: u32) -> u32 {
    ioc(IOC_WRITE, DRM_IOCTL_BASE, nr, core::mem::size_of::<T>())
}

/// `DRM_IOCTL_VGPU_GEM_CREATE`.
pub const DRM_IOCTL_VGPU_GEM_CREATE: u32 =
    drm_iowr::<DrmVgpuGemCreate>(DRM_COMMAND_BASE + DRM_VGPU_GEM_CREATE);

/// `DRM_IOCTL_VGPU_GEM_MMAP_OFFSET`.
pub const DRM_IOCTL_VGPU_GEM_MMAP_OFFSET: u32 =
    drm_iowr::<DrmVgpuGemMmapOffset>(DRM_COMMAND_BASE + DRM_VGPU_GEM_MMAP_OFFSET);

/// `DRM_IOCTL_VGPU_VM_BIND`.
pub const DRM_IOCTL_VGPU_VM_BIND: u32 =
    drm_iow::<DrmVgpuVmBind>(DRM_COMMAND_BASE + DRM_VGPU_VM_BIND);

/// `DRM_IOCTL_VGPU_VM_UNBIND`.
pub const DRM_IOCTL_VGPU_VM_UNBIND: u32 =
    drm_iow::<DrmVgpuVmUnbind>(DRM_COMMAND_BASE + DRM_VGPU_VM_UNBIND);

/// `DRM_IOCTL_VGPU_CTX_CREATE`.
pub const DRM_IOCTL_VGPU_CTX_CREATE: u32 =
    drm_iowr::<DrmVgpuCtxCreate>(DRM_COMMAND_BASE + DRM_VGPU_CTX_CREATE);

/// `DRM_IOCTL_VGPU_CTX_DESTROY`.
pub const DRM_IOCTL_VGPU_CTX_DESTROY: u32 =
    drm_iow::<DrmVgpuCtxDestroy>(DRM_COMMAND_BASE + DRM_VGPU_CTX_DESTROY);

/// `DRM_IOCTL_VGPU_CTX_QUERY`.
pub const DRM_IOCTL_VGPU_CTX_QUERY: u32 =
    drm_iowr::<DrmVgpuCtxQuery>(DRM_COMMAND_BASE + DRM_VGPU_CTX_QUERY);

/// `DRM_IOCTL_VGPU_SUBMIT`.
pub const DRM_IOCTL_VGPU_SUBMIT: u32 =
    drm_iowr::<DrmVgpuSubmit>(DRM_COMMAND_BASE + DRM_VGPU_SUBMIT);

/// `DRM_IOCTL_VGPU_WAIT`.
pub const DRM_IOCTL_VGPU_WAIT: u32 = drm_iowr::<DrmVgpuWait>(DRM_COMMAND_BASE + DRM_VGPU_WAIT);

/// `DRM_IOCTL_VGPU_FENCE_EXPORT`.
pub const DRM_IOCTL_VGPU_FENCE_EXPORT: u32 =
    drm_iowr::<DrmVgpuFenceExport>(DRM_COMMAND_BASE + DRM_VGPU_FENCE_EXPORT);

/// `DRM_IOCTL_VGPU_QUERY_STATS`.
pub const DRM_IOCTL_VGPU_QUERY_STATS: u32 =
    drm_iowr::<DrmVgpuQueryStats>(DRM_COMMAND_BASE + DRM_VGPU_QUERY_STATS);

/// `DRM_IOCTL_VGPU_VM_BIND_OPS`.
pub const DRM_IOCTL_VGPU_VM_BIND_OPS: u32 =
    drm_iow::<DrmVgpuVmBindOps>(DRM_COMMAND_BASE + DRM_VGPU_VM_BIND_OPS);

/// `DRM_IOCTL_VGPU_SAN_REPORT`.
pub const DRM_IOCTL_VGPU_SAN_REPORT: u32 =
    drm_iowr::<DrmVgpuSanReport>(DRM_COMMAND_BASE + DRM_VGPU_SAN_REPORT);

/// `DRM_IOCTL_VGPU_UQ_CREATE`.
pub const DRM_IOCTL_VGPU_UQ_CREATE: u32 =
    drm_iowr::<DrmVgpuUqCreate>(DRM_COMMAND_BASE + DRM_VGPU_UQ_CREATE);

/// `DRM_IOCTL_VGPU_UQ_KICK`.
pub const DRM_IOCTL_VGPU_UQ_KICK: u32 =
    drm_iow::<DrmVgpuUqKick>(DRM_COMMAND_BASE + DRM_VGPU_UQ_KICK);

/// `DRM_IOCTL_VGPU_HOST_MAP`.
pub const DRM_IOCTL_VGPU_HOST_MAP: u32 =
    drm_iowr::<DrmVgpuHostMap>(DRM_COMMAND_BASE + DRM_VGPU_HOST_MAP);

/// `DRM_IOCTL_VGPU_HOST_UNMAP`.
pub const DRM_IOCTL_VGPU_HOST_UNMAP: u32 =
    drm_iow::<DrmVgpuHostUnmap>(DRM_COMMAND_BASE + DRM_VGPU_HOST_UNMAP);

/// `DRM_IOCTL_VGPU_GET_PARAM`.
pub const DRM_IOCTL_VGPU_GET_PARAM: u32 =
    drm_iowr::<DrmVgpuGetParam>(DRM_COMMAND_BASE + DRM_VGPU_GET_PARAM);

/// `DRM_IOCTL_VGPU_PING`.
pub const DRM_IOCTL_VGPU_PING: u32 = drm_iowr::<DrmVgpuPing>(DRM_COMMAND_BASE + DRM_VGPU_PING);
