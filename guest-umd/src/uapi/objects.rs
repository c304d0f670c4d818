//! BOs, address spaces, contexts, user-mode queues, host mappings and
//! sanitizer reports.

use super::san;

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
    /// `san::FLAG_OBJECT`: the KMD's id of the object the page belonged to.
    pub object: u64,
    /// Its placement generation then.
    pub object_gen: u32,
    /// `san::FLAG_MOVED`: its generation now.
    pub object_gen_now: u32,
    /// `san::FLAG_MOVED`: the lowest page it has now.
    pub object_pa_now: u64,
    /// When the page was given back (device time).
    pub released_ns: u64,
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
