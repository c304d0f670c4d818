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
    /// First GPU VA `VM_BIND` accepts.
    pub const VA_START: u32 = 0x0f;
    /// One past the last GPU VA `VM_BIND` accepts.
    pub const VA_END: u32 = 0x10;
    /// One past the last valid parameter.
    pub const COUNT: u32 = 0x11;
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
/// Every `VGPU_GEM_CREATE_*` flag.
pub const GEM_CREATE_FLAGS: u32 = GEM_CREATE_LAZY;
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
    /// `VGPU_SAN_FLAG_STOPPED`.
    pub const FLAG_STOPPED: u32 = 1 << 0;
    /// `VGPU_SAN_FLAG_PRIOR`.
    pub const FLAG_PRIOR: u32 = 1 << 1;
    /// `VGPU_SAN_FLAG_PACKET`.
    pub const FLAG_PACKET: u32 = 1 << 2;
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

/// `struct drm_vgpu_gem_create`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DrmVgpuGemCreate {
    /// In: bytes.
    pub size: u64,
    /// In: `GEM_CREATE_*`.
    pub flags: u32,
    /// Out: GEM handle.
    pub handle: u32,
}

/// `struct drm_vgpu_gem_mmap_offset`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DrmVgpuGemMmapOffset {
    /// In: GEM handle.
    pub handle: u32,
    /// Must be zero.
    pub pad: u32,
    /// Out: offset for mmap(2).
    pub offset: u64,
}

/// `struct drm_vgpu_vm_bind`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DrmVgpuVmBind {
    /// In: GEM handle.
    pub handle: u32,
    /// In: `VM_BIND_*`.
    pub flags: u32,
    /// In: offset in the BO.
    pub bo_offset: u64,
    /// In: GPU VA.
    pub va: u64,
    /// In: bytes.
    pub size: u64,
}

/// `struct drm_vgpu_vm_unbind`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DrmVgpuVmUnbind {
    /// In: the mapping's GPU VA.
    pub va: u64,
    /// In: the mapping's size.
    pub size: u64,
}

/// `struct drm_vgpu_ctx_create`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DrmVgpuCtxCreate {
    /// In: `CTX_PRIORITY_*`.
    pub priority: u32,
    /// In: engines.
    pub engine_mask: u32,
    /// In: `CTX_CREATE_*`.
    pub flags: u32,
    /// Out: context id.
    pub ctx_id: u32,
}

/// `struct drm_vgpu_ctx_destroy`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DrmVgpuCtxDestroy {
    /// In: context id.
    pub ctx_id: u32,
    /// Must be zero.
    pub pad: u32,
}

/// `struct drm_vgpu_ctx_query`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DrmVgpuCtxQuery {
    /// In: context id.
    pub ctx_id: u32,
    /// Out: `CTX_RESET_*`.
    pub reset_status: u32,
    /// Out: `CTX_STATE_*`.
    pub state: u32,
    /// Out: `ACCESS_*` of the unrecoverable fault.
    pub fault_access: u32,
    /// Out: its VA.
    pub fault_va: u64,
    /// Out: its reason.
    pub fault_reason: u32,
    /// Out: hangs caused.
    pub hangs: u32,
    /// Out: GPU page faults.
    pub faults: u32,
    /// Out: `engine_error::*` of the first engine error (0: none).
    pub engine_error: u32,
    /// Out: GPU VA of the packet the first error stopped at.
    pub error_packet_va: u64,
    /// Out: the SUBMIT (fence seqno) that held it (0: unknown).
    pub error_seqno: u64,
    /// Out: its header word.
    pub error_header: u32,
    /// Out: its engine.
    pub error_engine: u32,
    /// Out: index of the command buffer in that SUBMIT ([`CMD_INDEX_NONE`]:
    /// a KMD packet).
    pub error_cmd_index: u32,
    /// Out: byte offset in that command buffer.
    pub error_cmd_offset: u32,
    /// Out: indirect depth (0 ring, 1 the submitted buffer, 2+ nested).
    pub error_depth: u32,
    /// Out: sanitizer reports about this context.
    pub san_reports: u32,
    /// Out: the latest one's number.
    pub san_last_seq: u64,
}

/// `struct drm_vgpu_san_record`: one sanitizer report.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DrmVgpuSanRecord {
    /// `san::*` check.
    pub check: u32,
    /// `san::FLAG_*` | sub-kind << 8.
    pub flags: u32,
    /// Report number.
    pub seq: u64,
    /// Device time.
    pub time_ns: u64,
    /// The context (this file's id).
    pub ctx_id: u32,
    /// Engine.
    pub engine: u32,
    /// Ring read pointer.
    pub rptr: u32,
    /// Indirect depth.
    pub depth: u32,
    /// GPU VA of the packet.
    pub packet_va: u64,
    /// Offset in the ring or the ring-level command buffer.
    pub cmd_offset: u32,
    /// Valid words in `packet`.
    pub packet_len: u32,
    /// The packet's words.
    pub packet: [u32; san::PACKET_WORDS],
    /// `ACCESS_*` (0: none).
    pub access: u32,
    /// GPU VA accessed.
    pub va: u64,
    /// Bytes accessed.
    pub size: u64,
    /// Guest-physical address accessed.
    pub pa: u64,
    /// The prior access's context (this file's id; 0: none or another's).
    pub prior_ctx: u32,
    /// Its engine.
    pub prior_engine: u32,
    /// Its packet.
    pub prior_packet_va: u64,
    /// Its packet's header.
    pub prior_header: u32,
    /// Its access.
    pub prior_access: u32,
    /// When.
    pub prior_time_ns: u64,
    /// Check-specific values.
    pub detail: [u64; 4],
    /// The ring's last doorbells.
    pub history: [u32; san::HISTORY],
}

/// `struct drm_vgpu_doorbell`: a user-mode queue's doorbell block.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DrmVgpuDoorbell {
    /// Written by the process: the ring's new write pointer.
    pub wptr: u32,
    /// Written by the device: 1 once it stopped polling the block.
    pub sleeping: u32,
    /// Written by the device: the last `wptr` it took.
    pub seen: u32,
    /// Zero.
    pub reserved: [u32; 13],
}

/// `struct drm_vgpu_uq_create`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DrmVgpuUqCreate {
    /// In: `CTX_PRIORITY_*`.
    pub priority: u32,
    /// In: the engine the queue feeds.
    pub engine: u32,
    /// In: the ring (READ|EXEC mapping).
    pub ring_va: u64,
    /// In: the doorbell block (READ|WRITE mapping).
    pub doorbell_va: u64,
    /// In: a power of two, 4 KiB..=1 MiB.
    pub ring_size: u32,
    /// In: `UQ_CREATE_*`.
    pub flags: u32,
    /// Out: the queue's context id.
    pub ctx_id: u32,
    /// Zero.
    pub pad: u32,
}

/// `struct drm_vgpu_uq_kick`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DrmVgpuUqKick {
    /// In: the queue.
    pub ctx_id: u32,
    /// Zero.
    pub pad: u32,
}

/// `VGPU_HOST_MAP_READ_ONLY`: the device only reads the memory.
pub const HOST_MAP_READ_ONLY: u32 = 1 << 0;
/// `VGPU_HOST_MAP_FLAGS`.
pub const HOST_MAP_FLAGS: u32 = HOST_MAP_READ_ONLY;
/// `VGPU_HOST_MAP_MAX_SIZE`.
pub const HOST_MAP_MAX_SIZE: u64 = 64 << 20;
/// `VGPU_HOST_MAP_MAX_TOTAL`.
pub const HOST_MAP_MAX_TOTAL: u64 = 192 << 20;

/// `struct drm_vgpu_host_map`: process memory mapped for the GPU.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DrmVgpuHostMap {
    /// In: the process address, 4 KiB aligned.
    pub addr: u64,
    /// In: bytes, a multiple of 4 KiB.
    pub size: u64,
    /// In: `HOST_MAP_*`.
    pub flags: u32,
    /// Zero.
    pub pad: u32,
    /// Out: where the file's VM maps it.
    pub gpu_va: u64,
}

/// `struct drm_vgpu_host_unmap`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DrmVgpuHostUnmap {
    /// In: the VA `HOST_MAP` returned.
    pub gpu_va: u64,
}

/// `struct drm_vgpu_san_report`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DrmVgpuSanReport {
    /// In: context.
    pub ctx_id: u32,
    /// Zero.
    pub pad: u32,
    /// In: the oldest report numbered above this.
    pub after_seq: u64,
    /// Out.
    pub report: DrmVgpuSanRecord,
}

/// `struct drm_vgpu_fence`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DrmVgpuFence {
    /// Context id.
    pub ctx_id: u32,
    /// Engine.
    pub engine: u32,
    /// Seqno.
    pub seqno: u64,
}

/// `struct drm_vgpu_cmd`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DrmVgpuCmd {
    /// GPU VA of the packets.
    pub va: u64,
    /// Bytes.
    pub size: u64,
}

/// `struct drm_vgpu_submit`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DrmVgpuSubmit {
    /// In: context id.
    pub ctx_id: u32,
    /// In: engine.
    pub engine: u32,
    /// In: pointer to [`DrmVgpuCmd`]s.
    pub cmds: u64,
    /// In: number of commands.
    pub num_cmds: u32,
    /// In: number of input fences.
    pub num_in_fences: u32,
    /// In: pointer to [`DrmVgpuFence`]s.
    pub in_fences: u64,
    /// In: `SUBMIT_*`.
    pub flags: u32,
    /// Zero.
    pub pad: u32,
    /// Out: the job's seqno.
    pub seqno: u64,
    /// In: pointer to [`DrmVgpuSync`]s the job waits for in the KMD.
    pub in_syncs: u64,
    /// In: pointer to [`DrmVgpuSync`]s that get the job's fence.
    pub out_syncs: u64,
    /// In: number of in_syncs.
    pub num_in_syncs: u32,
    /// In: number of out_syncs.
    pub num_out_syncs: u32,
    /// In: pointer to [`DrmVgpuSubmitBo`]s (implicit sync).
    pub bos: u64,
    /// In: number of BOs.
    pub num_bos: u32,
    /// Zero.
    pub pad2: u32,
}

/// `struct drm_vgpu_sync`: a sync object as an input or an output.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DrmVgpuSync {
    /// Syncobj handle.
    pub handle: u32,
    /// Zero.
    pub flags: u32,
    /// 0: binary; else a timeline point.
    pub point: u64,
}

/// `struct drm_vgpu_submit_bo`: a BO for implicit synchronisation.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DrmVgpuSubmitBo {
    /// GEM handle.
    pub handle: u32,
    /// `SUBMIT_BO_*`.
    pub flags: u32,
}

/// `struct drm_vgpu_vm_op`: one operation of `VM_BIND_OPS`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DrmVgpuVmOp {
    /// `VM_OP_MAP` or `VM_OP_UNMAP`.
    pub op: u32,
    /// MAP: `VM_BIND_*` permissions; UNMAP: zero.
    pub flags: u32,
    /// MAP: the BO; UNMAP: zero.
    pub handle: u32,
    /// Zero.
    pub pad: u32,
    /// MAP: offset into the BO; UNMAP: zero.
    pub bo_offset: u64,
    /// GPU VA.
    pub va: u64,
    /// Bytes.
    pub size: u64,
}

/// `struct drm_vgpu_vm_bind_ops`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DrmVgpuVmBindOps {
    /// In: pointer to [`DrmVgpuVmOp`]s.
    pub ops: u64,
    /// In: number of operations.
    pub num_ops: u32,
    /// In: zero.
    pub flags: u32,
    /// In: pointer to [`DrmVgpuSync`]s to wait for.
    pub in_syncs: u64,
    /// In: pointer to [`DrmVgpuSync`]s to signal.
    pub out_syncs: u64,
    /// In: number of in_syncs.
    pub num_in_syncs: u32,
    /// In: number of out_syncs.
    pub num_out_syncs: u32,
}

/// `struct drm_vgpu_wait`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DrmVgpuWait {
    /// In: pointer to [`DrmVgpuFence`]s.
    pub fences: u64,
    /// In: number of fences.
    pub num_fences: u32,
    /// In: `WAIT_*`.
    pub flags: u32,
    /// In: relative timeout.
    pub timeout_ns: u64,
    /// Out: a signalled fence's index (any).
    pub first_signaled: u32,
    /// Zero.
    pub pad: u32,
}

/// `VGPU_STATS_ENGINES`: engines `QUERY_STATS` reports (indexed by engine).
pub const STATS_ENGINES: usize = 2;
/// `VGPU_STATS_MAX_CONTEXTS`: largest context array a `QUERY_STATS` fills.
pub const STATS_MAX_CONTEXTS: u32 = 64;

/// `struct drm_vgpu_counters`: device activity counters.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DrmVgpuCounters {
    /// Nanoseconds an engine ran work (device clock).
    pub busy_ns: u64,
    /// Packets executed.
    pub packets: u64,
    /// Bytes copied or filled.
    pub bytes: u64,
    /// GPU page faults.
    pub faults: u64,
    /// Engine errors.
    pub errors: u64,
    /// Resets.
    pub resets: u64,
    /// Fences written.
    pub fences: u64,
    /// TLB hits.
    pub tlb_hits: u64,
    /// TLB misses (page-table walks).
    pub tlb_misses: u64,
    /// Kernel workgroups completed.
    pub workgroups: u64,
    /// Kernel lane operations (instructions times the lanes executing them).
    pub lane_ops: u64,
    /// Modelled time of the completed workgroups, in compute-unit cycles
    /// (docs/isa.md, "Performance model"): independent of the host.
    pub cycles: u64,
}

/// `struct drm_vgpu_ctx_stats`: one context as `QUERY_STATS` lists it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DrmVgpuCtxStats {
    /// The context's id (as `CTX_CREATE` returned it).
    pub ctx_id: u32,
    /// Thread-group id of the creating process.
    pub pid: u32,
    /// `CTX_PRIORITY_*`.
    pub priority: u32,
    /// Bit `ENGINE_*` set: the context has a ring on that engine.
    pub engines: u32,
    /// `CTX_RESET_*`.
    pub reset_status: u32,
    /// `CTX_STATE_*` bits.
    pub state: u32,
    /// Hangs it caused.
    pub hangs: u32,
    /// GPU page faults it took.
    pub faults: u32,
    /// Bytes of GEM objects of the file that owns it.
    pub mem_bytes: u64,
    /// Last seqno submitted per engine (0: none).
    pub submitted: [u64; STATS_ENGINES],
    /// Last seqno signalled per engine.
    pub completed: [u64; STATS_ENGINES],
    /// The device's counters for this context.
    pub counters: DrmVgpuCounters,
    /// `engine_error::*` of the first engine error (0: none).
    pub engine_error: u32,
    /// Engine of the first error's ring.
    pub error_engine: u32,
    /// Header word of the packet the first error stopped at.
    pub error_header: u32,
    /// Command buffer of its SUBMIT ([`CMD_INDEX_NONE`]: a KMD packet).
    pub error_cmd_index: u32,
    /// GPU VA of that packet (0: no error).
    pub error_packet_va: u64,
    /// The SUBMIT (fence seqno) that held it (0: unknown).
    pub error_seqno: u64,
    /// Its byte offset in that command buffer.
    pub error_cmd_offset: u32,
    /// Device sanitizer reports about this context.
    pub san_reports: u32,
}

/// `struct drm_vgpu_query_stats`: device-wide status for tools.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DrmVgpuQueryStats {
    /// Out: guest monotonic clock when sampled.
    pub sample_ns: u64,
    /// Out: the whole device's counters.
    pub device: DrmVgpuCounters,
    /// Out: each engine's counters.
    pub engines: [DrmVgpuCounters; STATS_ENGINES],
    /// Out: bytes of all GEM objects.
    pub mem_bytes: u64,
    /// Out: number of GEM objects.
    pub mem_objects: u64,
    /// Out: bytes of GPU page tables in use.
    pub pt_bytes: u64,
    /// Out: engine resets the KMD performed.
    pub engine_resets: u64,
    /// Out: device resets the KMD performed.
    pub device_resets: u64,
    /// Out: hangs detected.
    pub hangs: u64,
    /// Out: fault events received.
    pub faults: u64,
    /// Out: 1 when the device is wedged.
    pub wedged: u32,
    /// In: capacity of `contexts`; out: contexts that exist.
    pub num_contexts: u32,
    /// In: pointer to `num_contexts` [`DrmVgpuCtxStats`].
    pub contexts: u64,
    /// In: zero.
    pub flags: u32,
    /// Zero.
    pub pad: u32,
    /// Out: the device-wide GEM limit in bytes.
    pub mem_limit: u64,
    /// Out: the per-file GEM limit in bytes.
    pub file_mem_limit: u64,
    /// Out: `GEM_CREATE` calls refused at a limit.
    pub mem_refused: u64,
    /// Out: pages retired after uncorrectable ECC errors.
    pub retired_pages: u32,
    /// Out: 1 when the driver declared the device lost.
    pub lost: u32,
}

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

/// `struct drm_vgpu_fence_export`: a fence as a sync_file fd.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DrmVgpuFenceExport {
    /// In: the fence.
    pub fence: DrmVgpuFence,
    /// In: zero.
    pub flags: u32,
    /// Out: the sync_file fd.
    pub fd: i32,
}

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
