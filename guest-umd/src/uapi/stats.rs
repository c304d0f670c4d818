//! `QUERY_STATS`: device, engine and per-context counters.

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
    /// Bytes of VRAM the objects of its file hold now.
    pub vram_bytes: u64,
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
    /// Out: bytes of VRAM objects hold now.
    pub vram_used: u64,
    /// Out: objects evicted from VRAM to system memory.
    pub vram_evictions: u64,
}
