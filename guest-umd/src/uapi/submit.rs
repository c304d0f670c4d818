//! Submission (`SUBMIT`, `VM_BIND_OPS`), waits and fence export.

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
