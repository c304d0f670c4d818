//! What the device answers on the control queue: the reply status, the
//! reply structs, and the blocks it keeps in guest memory for a ring (its
//! status block, a watched doorbell block).
//!
//! Every reply starts with a [`ReplyHeader`] echoing the command's opcode
//! and tag; [`super::proto::Opcode::reply_size`] gives each command's reply.

use super::limits::RAS_QUERY_PAGES;
use super::pod::pod_struct;
use super::vram::{MemRange, MEM_LAYOUT_RANGES};

/// Status codes of a reply.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Success.
    Ok = 0,
    /// The opcode is not one the device knows.
    UnknownOpcode = 1,
    /// The command is shorter than its opcode requires (or than a header).
    Truncated = 2,
    /// The command is longer than its opcode allows, or than
    /// [`MAX_COMMAND_SIZE`](super::limits::MAX_COMMAND_SIZE).
    Oversized = 3,
    /// A field has a value outside its documented range.
    InvalidArgument = 4,
    /// Flags or reserved fields are not zero.
    ReservedNonZero = 5,
    /// The device cannot do it now; retry later.
    Busy = 6,
    /// The descriptor chain is malformed (for example readable after
    /// writable parts, or an address outside guest memory).
    BadDescriptor = 7,
    /// The device is lost or being reset and does not execute commands.
    DeviceLost = 8,
    /// The context, ring or fault named does not exist.
    NotFound = 9,
    /// The context or ring already exists.
    AlreadyExists = 10,
    /// The firmware is not running: in its boot state the device answers
    /// only `IDENTIFY`, `PING`, `MEMORY_LAYOUT`, `TIME_QUERY`,
    /// `DEVICE_RESET` and the `FW_*` commands. Also `FW_START` without a
    /// loaded image.
    NotReady = 11,
    /// The running firmware does not enable this feature.
    Unsupported = 12,
}

impl Status {
    /// The status with this number, if any.
    pub const fn from_u32(v: u32) -> Option<Status> {
        match v {
            0 => Some(Status::Ok),
            1 => Some(Status::UnknownOpcode),
            2 => Some(Status::Truncated),
            3 => Some(Status::Oversized),
            4 => Some(Status::InvalidArgument),
            5 => Some(Status::ReservedNonZero),
            6 => Some(Status::Busy),
            7 => Some(Status::BadDescriptor),
            8 => Some(Status::DeviceLost),
            9 => Some(Status::NotFound),
            10 => Some(Status::AlreadyExists),
            11 => Some(Status::NotReady),
            12 => Some(Status::Unsupported),
            _ => None,
        }
    }

    /// A short upper-case name.
    pub const fn name(self) -> &'static str {
        match self {
            Status::Ok => "OK",
            Status::UnknownOpcode => "UNKNOWN_OPCODE",
            Status::Truncated => "TRUNCATED",
            Status::Oversized => "OVERSIZED",
            Status::InvalidArgument => "INVALID_ARGUMENT",
            Status::ReservedNonZero => "RESERVED_NONZERO",
            Status::Busy => "BUSY",
            Status::BadDescriptor => "BAD_DESCRIPTOR",
            Status::DeviceLost => "DEVICE_LOST",
            Status::NotFound => "NOT_FOUND",
            Status::AlreadyExists => "ALREADY_EXISTS",
            Status::NotReady => "NOT_READY",
            Status::Unsupported => "UNSUPPORTED",
        }
    }
}

/// Context state bits in [`ContextQueryReply::state`].
pub mod ctx_state {
    /// A ring of the context stopped on an error or fault.
    pub const ERRORED: u32 = 1 << 0;
    /// A replayable fault of the context waits for `FAULT_RESUME`.
    pub const FAULT_STALLED: u32 = 1 << 1;
    /// Some ring of the context has unexecuted packets.
    pub const BUSY: u32 = 1 << 2;
    /// A ring of the context waits on a semaphore.
    pub const SEM_WAIT: u32 = 1 << 3;
    /// A ring of the context is the one its engine is executing now (in
    /// flight); a ring with work that is not is waiting for its engine.
    pub const RUNNING: u32 = 1 << 4;
}

/// Ring states in [`RingStatus::state`].
pub mod ring_state {
    /// Nothing to do (read pointer = write pointer).
    pub const IDLE: u32 = 0;
    /// Executing or runnable.
    pub const RUNNING: u32 = 1;
    /// Waiting on a semaphore.
    pub const SEM_WAIT: u32 = 2;
    /// Stalled on a replayable fault.
    pub const FAULT_STALLED: u32 = 3;
    /// Stopped on an error or non-replayable fault: the doorbell is ignored
    /// until the ring is destroyed and created again (or the engine reset).
    pub const STOPPED: u32 = 4;
}

pod_struct! {
    /// The first 16 bytes of every reply.
    pub struct ReplyHeader {
        /// A [`Status`].
        pub status: u32,
        /// The command's opcode (0 if the command was too short to have one).
        pub opcode: u32,
        /// The command's tag (0 if the command was too short to have one).
        pub tag: u64,
    }

    /// Reply to `PING`.
    pub struct PingReply {
        /// Header.
        pub hdr: ReplyHeader,
        /// The command's cookie.
        pub cookie: u64,
        /// Sequence number of the event the device queued for this ping.
        pub event_seq: u64,
    }

    /// Reply to `IDENTIFY`: the device's identity and limits.
    pub struct IdentifyReply {
        /// Header.
        pub hdr: ReplyHeader,
        /// [`IDENTIFY_MAGIC`](super::limits::IDENTIFY_MAGIC).
        pub magic: u32,
        /// [`PROTOCOL_VERSION`](super::limits::PROTOCOL_VERSION) of the device.
        pub protocol_version: u32,
        /// Device firmware version, `(major << 16) | (minor << 8) | patch`.
        pub firmware_version: u32,
        /// Hardware generation, one of [`GENERATIONS`](super::limits::GENERATIONS).
        pub generation: u32,
        /// Supported page sizes: bit `n` set means pages of `1 << n` bytes.
        pub page_sizes: u64,
        /// Bit `i` set: engine `i` (see [`engine`](super::limits::engine)) is present.
        pub engine_mask: u32,
        /// GPU virtual address width in bits of this generation
        /// ([`super::mmu::va_bits`]).
        pub va_bits: u32,
        /// Number of contexts.
        pub max_contexts: u32,
        /// Smallest ring in bytes.
        pub min_ring_size: u32,
        /// Largest ring in bytes.
        pub max_ring_size: u32,
        /// Compute units of the compute engine (0 without one).
        pub compute_units: u32,
        /// Size of one event record in bytes.
        pub event_record_size: u32,
        /// [`MAX_COMMAND_SIZE`](super::limits::MAX_COMMAND_SIZE).
        pub max_command_size: u32,
        /// The device's [`super::layout::FINGERPRINT`]: a driver compares it
        /// with its own to detect a mismatched interface.
        pub layout_fingerprint: u64,
        /// `FEATURE_*` bits.
        pub features: u32,
        /// 0: the whole device; `n`: virtual function `n` of a partitioned
        /// device (with [`FEATURE_VIRTUAL_FUNCTION`](super::limits::FEATURE_VIRTUAL_FUNCTION);
        /// `max_contexts` and the VRAM sizes are then its partition's).
        pub function: u32,
        /// Bytes of device memory (VRAM); 0: none ([`super::vram`]).
        pub vram_size: u64,
        /// Bytes of VRAM the CPU reaches through the aperture, from
        /// offset 0.
        pub visible_vram_size: u64,
    }

    /// Reply to `MEMORY_LAYOUT`: the ranges of VRAM, lowest first
    /// ([`super::vram::Layout`]); entry `i < count` of each array is
    /// range `i`.
    pub struct MemoryLayoutReply {
        /// Header.
        pub hdr: ReplyHeader,
        /// Valid ranges.
        pub count: u32,
        /// What a device reset does to VRAM ([`super::vram::state`]).
        pub reset_policy: u32,
        /// Bytes of VRAM.
        pub vram_size: u64,
        /// Bytes CPU-visible from offset 0.
        pub visible_vram_size: u64,
        /// First offset of each range.
        pub base: [u64; MEM_LAYOUT_RANGES],
        /// Bytes of each range.
        pub size: [u64; MEM_LAYOUT_RANGES],
        /// [`super::vram::kind`] of each range.
        pub kind: [u32; MEM_LAYOUT_RANGES],
        /// [`super::vram::flags`] of each range.
        pub flags: [u32; MEM_LAYOUT_RANGES],
    }

    /// Reply to `DEVICE_RESET`.
    pub struct DeviceResetReply {
        /// Header.
        pub hdr: ReplyHeader,
        /// What the reset did to VRAM ([`super::vram::state`]).
        pub vram: u32,
        /// Zero.
        pub reserved: u32,
    }

    /// Reply to `CONTEXT_QUERY`.
    pub struct ContextQueryReply {
        /// Header.
        pub hdr: ReplyHeader,
        /// Context id.
        pub ctx_id: u32,
        /// [`ctx_state`] bits.
        pub state: u32,
        /// Page faults of this context since creation.
        pub faults: u32,
        /// Engine errors of this context since creation.
        pub errors: u32,
        /// VA of the last fault (0 if none).
        pub last_fault_va: u64,
        /// Nanoseconds this context has held an engine.
        pub busy_ns: u64,
        /// Packets executed.
        pub packets: u64,
    }

    /// Reply to `ENGINE_RESET`.
    pub struct EngineResetReply {
        /// Header.
        pub hdr: ReplyHeader,
        /// Engine.
        pub engine: u32,
        /// Context whose job was in flight ([`CTX_NONE`](super::limits::CTX_NONE) if idle).
        pub ctx_id: u32,
        /// That ring's read pointer where the engine stopped.
        pub rptr: u32,
        /// Zero.
        pub reserved: u32,
    }

    /// Reply to `QUERY_STATS`. Counters since power-on (device, engines) or
    /// creation (contexts).
    pub struct StatsReply {
        /// Header.
        pub hdr: ReplyHeader,
        /// Kind queried.
        pub kind: u32,
        /// Id queried.
        pub id: u32,
        /// Nanoseconds busy.
        pub busy_ns: u64,
        /// Packets executed.
        pub packets: u64,
        /// Bytes copied or filled.
        pub bytes: u64,
        /// Page faults.
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
        /// Kernel lane operations: instructions times the lanes that
        /// executed them.
        pub lane_ops: u64,
        /// Modelled time of the completed workgroups, in compute-unit
        /// cycles: per workgroup, the larger of its longest warp's issued
        /// instructions and all its warps' issued instructions / 4. The
        /// same for the same kernels whatever the host does.
        pub cycles: u64,
    }

    /// Reply to `RAS_QUERY`: entries `start..start + count` of the table.
    pub struct RasQueryReply {
        /// Header.
        pub hdr: ReplyHeader,
        /// Entries in the table.
        pub total: u32,
        /// Entries in `pages` (at most [`RAS_QUERY_PAGES`]).
        pub count: u32,
        /// Guest-physical addresses of retired pages, oldest first.
        pub pages: [u64; RAS_QUERY_PAGES],
    }

    /// Reply to `CAPTURE`.
    pub struct CaptureReply {
        /// Header.
        pub hdr: ReplyHeader,
        /// The capture's id (from 1), for `CAPTURE_READ`.
        pub capture_id: u32,
        /// Its size in bytes.
        pub size: u32,
    }

    /// Reply to `CAPTURE_READ`.
    pub struct CaptureReadReply {
        /// Header.
        pub hdr: ReplyHeader,
        /// The capture read.
        pub capture_id: u32,
        /// Its size in bytes.
        pub size: u32,
        /// Bytes written into the buffer (0 at or past the end).
        pub written: u32,
        /// [`super::capture::reason`].
        pub reason: u32,
        /// Its context.
        pub ctx_id: u32,
        /// Its engine.
        pub engine: u32,
    }

    /// Reply to `FW_LOAD`, `FW_START` and `FW_STATUS`: the boot status.
    pub struct FwStatusReply {
        /// Header.
        pub hdr: ReplyHeader,
        /// [`super::firmware::fw_state`].
        pub state: u32,
        /// In `FAILED`: the [`super::firmware::FwError`] code; in
        /// `CRASHED`: the crash code; else 0.
        pub error: u32,
        /// The loaded image's version (0 before a load).
        pub version: u32,
        /// The [`super::firmware::feature`] bits it enables.
        pub features: u32,
        /// Its build id.
        pub build: [u32; 4],
        /// µs from `FW_START` to running (0 until it runs).
        pub boot_us: u32,
        /// The heartbeat period in ms (0: none).
        pub heartbeat_ms: u32,
        /// Heartbeats since the firmware started: it stops counting when
        /// the firmware stops.
        pub heartbeats: u64,
        /// Bytes ever written to the firmware log (its next position).
        pub log_head: u64,
        /// Bytes the log keeps (older ones are overwritten).
        pub log_size: u32,
        /// Images started since the device process started.
        pub boots: u32,
    }

    /// Reply to `FW_LOG_READ`.
    pub struct FwLogReadReply {
        /// Header.
        pub hdr: ReplyHeader,
        /// Log position of the first byte written (later than the one
        /// asked when that was overwritten).
        pub start: u64,
        /// Bytes written into the buffer (0 at the head).
        pub written: u32,
        /// Zero.
        pub reserved: u32,
        /// Bytes ever written to the log.
        pub head: u64,
    }

    /// Reply to `POWER_SET` and `POWER_STATUS`.
    pub struct PowerReply {
        /// Header.
        pub hdr: ReplyHeader,
        /// [`super::proto::power_state`] now.
        pub state: u32,
        /// What VRAM kept at the last return to `D0`
        /// ([`super::vram::state`]; `NONE` before one).
        pub vram: u32,
        /// Entries into `D3HOT` and `D3COLD` since the device started.
        pub entries: [u64; 2],
        /// Time spent in `D0`, `D3HOT`, `D3COLD`, ns of device time.
        pub residency_ns: [u64; 3],
        /// Device time of the last return to `D0` (0: none yet).
        pub woke_ns: u64,
    }

    /// Reply to `TIME_QUERY`.
    pub struct TimeReply {
        /// Header.
        pub hdr: ReplyHeader,
        /// Device clock (ns since the device started): the clock of event
        /// records, `TIMESTAMP` packets and the device's trace.
        pub device_ns: u64,
    }

    /// Reply to `SAN_REPORT`.
    pub struct SanReportReply {
        /// Header.
        pub hdr: ReplyHeader,
        /// The report.
        pub report: super::sanitize::SanReport,
    }
}

pod_struct! {
    /// The ring status block the device keeps up to date in guest memory at
    /// `status_va` (64 bytes).
    pub struct RingStatus {
        /// Read pointer: total bytes of packets consumed (wraps at 2^32).
        pub rptr: u32,
        /// [`ring_state`].
        pub state: u32,
        /// Seqno of the last `FENCE` this ring executed.
        pub last_fence: u64,
        /// Packets executed.
        pub packets: u64,
        /// [`super::packet::EngineError`] that stopped the ring, or 0.
        pub error: u32,
        /// Read pointer of the packet that stopped the ring.
        pub error_rptr: u32,
        /// The write pointer the engine accepted (the last valid
        /// doorbell it took): the ring has work while it differs from
        /// `rptr`.
        pub wptr: u32,
        /// Zero.
        pub reserved0: u32,
        /// Zero.
        pub reserved: [u64; 3],
    }

    /// A doorbell block (64 bytes in guest memory): the driver's side of a
    /// watched doorbell, shared by the driver (usually a user-mode driver
    /// with the block mapped into its process) and the device.
    pub struct DoorbellBlock {
        /// Written by the driver: the ring's new write pointer, as in
        /// `DOORBELL` (total bytes ever written, wrapping at 2^32). Every
        /// change the device sees is a doorbell.
        pub wptr: u32,
        /// Written by the device: 0 while it polls the block, 1 once it
        /// stopped polling. A driver that published a new `wptr` and then
        /// reads 1 here (after a full memory barrier) sends
        /// `DOORBELL_KICK`.
        pub sleeping: u32,
        /// Written by the device: the last write pointer it took from
        /// `wptr`.
        pub seen: u32,
        /// Zero.
        pub reserved0: u32,
        /// Zero.
        pub reserved: [u64; 6],
    }
}

impl MemoryLayoutReply {
    /// Range `i`, if `i < count`.
    pub fn range(&self, i: usize) -> Option<MemRange> {
        if i >= self.count as usize {
            return None;
        }
        Some(MemRange {
            base: *self.base.get(i)?,
            size: *self.size.get(i)?,
            kind: *self.kind.get(i)?,
            flags: *self.flags.get(i)?,
        })
    }
}
