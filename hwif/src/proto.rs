//! The control queue: commands the driver sends and the replies it gets.
//!
//! # Transport
//!
//! The device is a virtio device (virtio-gpu, device id 16, PCI 1af4:1050)
//! with two virtqueues:
//!
//! * queue 0, [`QUEUE_CONTROL`]: the driver posts a descriptor chain made of a
//!   device-readable part (one command, at most [`MAX_COMMAND_SIZE`] bytes) and
//!   a device-writable part (room for the reply). The device copies the whole
//!   command out of guest memory first, validates the copy, executes it and
//!   writes exactly one reply. The used length is the reply's size.
//! * queue 1, [`QUEUE_EVENT`]: the driver posts device-writable buffers of
//!   [`super::event::EVENT_RECORD_SIZE`] bytes; the device fills one per event
//!   (see [`super::event`]). Filling a buffer and notifying the used ring is the
//!   device's interrupt.
//!
//! # Command format
//!
//! Every command starts with a [`CommandHeader`]; every reply starts with a
//! [`ReplyHeader`] echoing the opcode and tag. Each opcode has one fixed
//! command size: a shorter command is answered [`Status::Truncated`], a longer
//! one [`Status::Oversized`]; an unknown opcode gets
//! [`Status::UnknownOpcode`]; non-zero reserved fields or flags get
//! [`Status::ReservedNonZero`]. A command whose chain has no writable part,
//! or a writable part smaller than a [`ReplyHeader`], cannot be answered: the
//! device completes it with used length 0 and counts it as a protocol error.

use super::pod::{pod_struct, Pod};

/// Virtqueue index of the control queue.
pub const QUEUE_CONTROL: u16 = 0;
/// Virtqueue index of the event queue.
pub const QUEUE_EVENT: u16 = 1;
/// Number of virtqueues.
pub const NUM_QUEUES: usize = 2;
/// Largest queue size the device accepts for either queue.
pub const MAX_QUEUE_SIZE: u16 = 1024;

/// The virtio device id (virtio-gpu).
pub const VIRTIO_DEVICE_ID: u32 = 16;
/// PCI vendor id of virtio devices.
pub const PCI_VENDOR_ID: u16 = 0x1af4;
/// PCI device id of a modern virtio-gpu function (0x1040 + 16).
pub const PCI_DEVICE_ID: u16 = 0x1050;

/// Largest command the device accepts, in bytes.
pub const MAX_COMMAND_SIZE: usize = 4096;

/// `"VGPU"` in little-endian: the first field of the identify data.
pub const IDENTIFY_MAGIC: u32 = u32::from_le_bytes(*b"VGPU");
/// Protocol major version: incompatible changes bump it.
pub const PROTOCOL_MAJOR: u16 = 0;
/// Protocol minor version: compatible additions bump it.
pub const PROTOCOL_MINOR: u16 = 1;
/// `(major << 16) | minor`.
pub const PROTOCOL_VERSION: u32 = ((PROTOCOL_MAJOR as u32) << 16) | PROTOCOL_MINOR as u32;

/// The widest GPU virtual address of any generation, in bits. A device
/// reports its own width in [`IdentifyReply::va_bits`]
/// ([`super::mmu::va_bits`]: 40 bits on gen 1, 48 on gen 2).
pub const VA_BITS: u32 = 48;
/// 4 KiB pages.
pub const PAGE_SIZE_4K: u64 = 1 << 12;
/// 2 MiB pages.
pub const PAGE_SIZE_2M: u64 = 1 << 21;
/// Number of GPU contexts the device supports.
pub const MAX_CONTEXTS: u32 = 64;
/// Smallest ring buffer, in bytes (a power of two).
pub const MIN_RING_SIZE: u32 = 4096;
/// Largest ring buffer, in bytes (a power of two).
pub const MAX_RING_SIZE: u32 = 1 << 20;

/// Hardware generations (`vgpu-device --gen N`).
pub const GENERATIONS: [u32; 2] = [1, 2];

/// Control opcodes.
///
/// Ranges: `0x00xx` device, `0x01xx` contexts, `0x02xx` rings and doorbells,
/// `0x03xx` the MMU, `0x04xx` resets and telemetry, `0x05xx` fault injection,
/// `0x06xx` debugging (captures, the device clock), `0x07xx` the driver
/// sanitizer ([`super::sanitize`]).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Opcode {
    /// Return the device's identity and limits ([`IdentifyReply`]).
    Identify = 0x0001,
    /// Reply at once and post an [`super::event::EventKind::Ping`] event
    /// carrying the command's cookie ([`PingCmd`], [`PingReply`]).
    Ping = 0x0002,
    /// Create a context ([`ContextCreateCmd`]).
    ContextCreate = 0x0101,
    /// Destroy a context ([`ContextDestroyCmd`]); `BUSY` while it has work
    /// in flight unless forced.
    ContextDestroy = 0x0102,
    /// Read a context's state ([`ContextQueryCmd`], [`ContextQueryReply`]).
    ContextQuery = 0x0103,
    /// Register a ring for a (context, engine) ([`RingCreateCmd`]).
    RingCreate = 0x0201,
    /// Unregister a ring ([`RingDestroyCmd`]); `BUSY` while it runs.
    RingDestroy = 0x0202,
    /// Publish a ring's new write pointer ([`DoorbellCmd`]).
    Doorbell = 0x0203,
    /// Watch a doorbell block in the context's memory: every change of
    /// its write pointer is a doorbell for the ring, with no command
    /// ([`DoorbellWatchCmd`], [`DoorbellBlock`]); a user-mode queue.
    DoorbellWatch = 0x0204,
    /// Wake the doorbell watcher: look at every watched doorbell now and
    /// poll them again (header only; see [`DoorbellBlock::sleeping`]).
    DoorbellKick = 0x0205,
    /// Drop TLB entries of a context ([`TlbInvalidateCmd`]).
    TlbInvalidate = 0x0301,
    /// Answer a replayable fault ([`FaultResumeCmd`]).
    FaultResume = 0x0302,
    /// Reset one engine ([`EngineResetCmd`], [`EngineResetReply`]).
    EngineReset = 0x0401,
    /// Return the whole device to its power-on state (header only).
    DeviceReset = 0x0402,
    /// Read counters of an engine, a context or the device
    /// ([`QueryStatsCmd`], [`StatsReply`]).
    QueryStats = 0x0403,
    /// Record a guest-physical page in the device's table of retired pages
    /// ([`RasRetireCmd`]): the driver retired it after an uncorrectable
    /// error. The table outlives resets and driver reloads, like a RAS
    /// EEPROM.
    RasRetire = 0x0501,
    /// Read the table of retired pages ([`RasQueryCmd`], [`RasQueryReply`]).
    RasQuery = 0x0502,
    /// Freeze a context's state into a capture now ([`CaptureCmd`],
    /// [`CaptureReply`]): what a driver asks when it declares a hang. The
    /// device also captures by itself when a ring stops on a fault or an
    /// engine error (see [`super::capture`]).
    Capture = 0x0601,
    /// Copy part of a capture into guest memory ([`CaptureReadCmd`],
    /// [`CaptureReadReply`]): a capture is larger than a reply, so the
    /// driver reads it in chunks into a buffer of its own, like a firmware
    /// log.
    CaptureRead = 0x0602,
    /// Read the device clock ([`TimeReply`]): correlates the guest's clock
    /// with event and trace timestamps.
    TimeQuery = 0x0603,
    /// Declare or give back guest-physical pages as GPU memory, for the
    /// sanitizer's DMA-ownership check ([`SanMemCmd`]).
    SanMem = 0x0701,
    /// Fetch a sanitizer report by number ([`SanReportCmd`],
    /// [`SanReportReply`]).
    SanReport = 0x0702,
}

impl Opcode {
    /// Every opcode, for tables and tests.
    pub const ALL: [Opcode; 22] = [
        Opcode::Identify,
        Opcode::Ping,
        Opcode::ContextCreate,
        Opcode::ContextDestroy,
        Opcode::ContextQuery,
        Opcode::RingCreate,
        Opcode::RingDestroy,
        Opcode::Doorbell,
        Opcode::DoorbellWatch,
        Opcode::DoorbellKick,
        Opcode::TlbInvalidate,
        Opcode::FaultResume,
        Opcode::EngineReset,
        Opcode::DeviceReset,
        Opcode::QueryStats,
        Opcode::RasRetire,
        Opcode::RasQuery,
        Opcode::Capture,
        Opcode::CaptureRead,
        Opcode::TimeQuery,
        Opcode::SanMem,
        Opcode::SanReport,
    ];

    /// The opcode with this number, if any.
    pub const fn from_u32(v: u32) -> Option<Opcode> {
        let mut i = 0;
        while i < Opcode::ALL.len() {
            if Opcode::ALL[i] as u32 == v {
                return Some(Opcode::ALL[i]);
            }
            i += 1;
        }
        None
    }

    /// The exact size of this opcode's command, header included.
    pub const fn command_size(self) -> usize {
        use core::mem::size_of;
        match self {
            Opcode::Identify | Opcode::DeviceReset | Opcode::TimeQuery | Opcode::DoorbellKick => {
                size_of::<CommandHeader>()
            }
            Opcode::Ping => size_of::<PingCmd>(),
            Opcode::ContextCreate => size_of::<ContextCreateCmd>(),
            Opcode::ContextDestroy => size_of::<ContextDestroyCmd>(),
            Opcode::ContextQuery => size_of::<ContextQueryCmd>(),
            Opcode::RingCreate => size_of::<RingCreateCmd>(),
            Opcode::RingDestroy => size_of::<RingDestroyCmd>(),
            Opcode::Doorbell => size_of::<DoorbellCmd>(),
            Opcode::DoorbellWatch => size_of::<DoorbellWatchCmd>(),
            Opcode::TlbInvalidate => size_of::<TlbInvalidateCmd>(),
            Opcode::FaultResume => size_of::<FaultResumeCmd>(),
            Opcode::EngineReset => size_of::<EngineResetCmd>(),
            Opcode::QueryStats => size_of::<QueryStatsCmd>(),
            Opcode::RasRetire => size_of::<RasRetireCmd>(),
            Opcode::RasQuery => size_of::<RasQueryCmd>(),
            Opcode::SanMem => size_of::<SanMemCmd>(),
            Opcode::SanReport => size_of::<SanReportCmd>(),
            Opcode::Capture => size_of::<CaptureCmd>(),
            Opcode::CaptureRead => size_of::<CaptureReadCmd>(),
        }
    }

    /// The size of this opcode's successful reply, header included.
    pub const fn reply_size(self) -> usize {
        use core::mem::size_of;
        match self {
            Opcode::Identify => size_of::<IdentifyReply>(),
            Opcode::Ping => size_of::<PingReply>(),
            Opcode::ContextQuery => size_of::<ContextQueryReply>(),
            Opcode::EngineReset => size_of::<EngineResetReply>(),
            Opcode::QueryStats => size_of::<StatsReply>(),
            Opcode::RasQuery => size_of::<RasQueryReply>(),
            Opcode::SanReport => size_of::<SanReportReply>(),
            Opcode::Capture => size_of::<CaptureReply>(),
            Opcode::CaptureRead => size_of::<CaptureReadReply>(),
            Opcode::TimeQuery => size_of::<TimeReply>(),
            _ => size_of::<ReplyHeader>(),
        }
    }

    /// A short upper-case name.
    pub const fn name(self) -> &'static str {
        match self {
            Opcode::Identify => "IDENTIFY",
            Opcode::Ping => "PING",
            Opcode::ContextCreate => "CONTEXT_CREATE",
            Opcode::ContextDestroy => "CONTEXT_DESTROY",
            Opcode::ContextQuery => "CONTEXT_QUERY",
            Opcode::RingCreate => "RING_CREATE",
            Opcode::RingDestroy => "RING_DESTROY",
            Opcode::Doorbell => "DOORBELL",
            Opcode::DoorbellWatch => "DOORBELL_WATCH",
            Opcode::DoorbellKick => "DOORBELL_KICK",
            Opcode::TlbInvalidate => "TLB_INVALIDATE",
            Opcode::FaultResume => "FAULT_RESUME",
            Opcode::EngineReset => "ENGINE_RESET",
            Opcode::DeviceReset => "DEVICE_RESET",
            Opcode::QueryStats => "QUERY_STATS",
            Opcode::RasRetire => "RAS_RETIRE",
            Opcode::RasQuery => "RAS_QUERY",
            Opcode::SanMem => "SAN_MEM",
            Opcode::SanReport => "SAN_REPORT",
            Opcode::Capture => "CAPTURE",
            Opcode::CaptureRead => "CAPTURE_READ",
            Opcode::TimeQuery => "TIME_QUERY",
        }
    }
}

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
    /// [`MAX_COMMAND_SIZE`].
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
        }
    }
}

/// Engines. Bit `i` of [`IdentifyReply::engine_mask`] set: engine `i` is
/// present.
pub mod engine {
    /// Copy / DMA engine: `COPY`, `COPY_2D`, `FILL` and the common packets.
    pub const COPY: u32 = 0;
    /// Compute engine: `DISPATCH` and the common packets.
    pub const COMPUTE: u32 = 1;
    /// Number of engines.
    pub const COUNT: u32 = 2;
    /// "Every engine" / "the whole device" in reset events.
    pub const ALL: u32 = 0xffff_ffff;
}

/// `IDENTIFY` feature: the driver sanitizer is on (some check runs; the
/// device posts `SANITIZER` events).
pub const FEATURE_SANITIZER: u32 = 1 << 0;
/// `IDENTIFY` feature: the sanitizer checks DMA ownership or page tables;
/// a driver that wants them checked declares the pages it owns with
/// `SAN_MEM` (its page tables with [`SAN_MEM_OWN_TABLES`]).
pub const FEATURE_SAN_DMA: u32 = 1 << 1;

/// `SAN_MEM` operation: the ranges become GPU memory (counted: a page
/// declared twice must be given back twice).
pub const SAN_MEM_OWN: u32 = 0;
/// `SAN_MEM` operation: the ranges are given back.
pub const SAN_MEM_RELEASE: u32 = 1;
/// `SAN_MEM` operation: as [`SAN_MEM_OWN`], and the pages hold page
/// tables (the page-table checks, `SAN-PT-*`, tell a table linked without
/// its valid bit by its address naming such a page). Given back with
/// [`SAN_MEM_RELEASE`].
pub const SAN_MEM_OWN_TABLES: u32 = 2;
/// Ranges one `SAN_MEM` command carries.
pub const SAN_MEM_RANGES: usize = 14;

/// "No context" in replies and events.
pub const CTX_NONE: u32 = 0xffff_ffff;

/// Context priorities (`CONTEXT_CREATE`), lowest first. Higher priorities
/// are scheduled first; equal priorities share an engine round-robin.
pub const PRIORITY_LOW: u32 = 0;
/// Normal priority.
pub const PRIORITY_NORMAL: u32 = 1;
/// High priority.
pub const PRIORITY_HIGH: u32 = 2;
/// Real-time priority.
pub const PRIORITY_REALTIME: u32 = 3;

/// `CONTEXT_CREATE` flag: page faults of this context are replayable (the
/// job stalls until `FAULT_RESUME`) instead of stopping its ring.
pub const CTX_FLAG_REPLAYABLE_FAULTS: u32 = 1 << 0;
/// `CONTEXT_DESTROY` flag: destroy even with work in flight (the engines
/// running it are reset first).
pub const DESTROY_FLAG_FORCE: u32 = 1 << 0;
/// `FAULT_RESUME` action: retry the faulting access (the driver fixed the
/// mapping and invalidated the TLB).
pub const FAULT_RESUME_RETRY: u32 = 0;
/// `FAULT_RESUME` action: abort the job; the ring stops as for a
/// non-replayable fault.
pub const FAULT_RESUME_ABORT: u32 = 1;

/// Entries of the device's table of retired pages.
pub const RAS_TABLE_SIZE: u32 = 256;
/// Largest chunk one `CAPTURE_READ` copies.
pub const CAPTURE_READ_MAX: u32 = 1 << 20;

/// Entries one `RAS_QUERY` reply carries.
pub const RAS_QUERY_PAGES: usize = 16;

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

/// `DOORBELL_WATCH` flag: watch the block without moving the ring's
/// pointers (the ring may have work; the watcher starts from the ring's
/// latest write pointer, so a block that moved on meanwhile rings at once).
pub const WATCH_KEEP_POINTERS: u32 = 1;

/// `QUERY_STATS` kinds.
pub mod stats_kind {
    /// One engine (`id` = engine number).
    pub const ENGINE: u32 = 0;
    /// One context (`id` = context id).
    pub const CONTEXT: u32 = 1;
    /// The whole device (`id` = 0).
    pub const DEVICE: u32 = 2;
}

pod_struct! {
    /// The first 16 bytes of every command.
    pub struct CommandHeader {
        /// An [`Opcode`].
        pub opcode: u32,
        /// Must be zero.
        pub flags: u32,
        /// Chosen by the driver, echoed in the reply.
        pub tag: u64,
    }

    /// The first 16 bytes of every reply.
    pub struct ReplyHeader {
        /// A [`Status`].
        pub status: u32,
        /// The command's opcode (0 if the command was too short to have one).
        pub opcode: u32,
        /// The command's tag (0 if the command was too short to have one).
        pub tag: u64,
    }

    /// `PING`: ask for a [`super::event::EventKind::Ping`] event.
    pub struct PingCmd {
        /// Header, opcode [`Opcode::Ping`].
        pub hdr: CommandHeader,
        /// Any value; carried by the reply and the event.
        pub cookie: u64,
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
        /// [`IDENTIFY_MAGIC`].
        pub magic: u32,
        /// [`PROTOCOL_VERSION`] of the device.
        pub protocol_version: u32,
        /// Device firmware version, `(major << 16) | (minor << 8) | patch`.
        pub firmware_version: u32,
        /// Hardware generation, one of [`GENERATIONS`].
        pub generation: u32,
        /// Supported page sizes: bit `n` set means pages of `1 << n` bytes.
        pub page_sizes: u64,
        /// Bit `i` set: engine `i` (see [`engine`]) is present.
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
        /// [`MAX_COMMAND_SIZE`].
        pub max_command_size: u32,
        /// The device's [`super::layout::FINGERPRINT`]: a driver compares it
        /// with its own to detect a mismatched interface.
        pub layout_fingerprint: u64,
        /// `FEATURE_*` bits.
        pub features: u32,
        /// Zero.
        pub reserved: [u32; 3],
    }

    /// `CONTEXT_CREATE`.
    pub struct ContextCreateCmd {
        /// Header.
        pub hdr: CommandHeader,
        /// Context id chosen by the driver, `0..MAX_CONTEXTS`.
        pub ctx_id: u32,
        /// `PRIORITY_*`.
        pub priority: u32,
        /// [`CTX_FLAG_REPLAYABLE_FAULTS`] or 0.
        pub flags: u32,
        /// Zero.
        pub reserved: u32,
        /// Guest-physical address of the level-3 page table (4 KiB aligned).
        pub pt_root: u64,
    }

    /// `CONTEXT_DESTROY`.
    pub struct ContextDestroyCmd {
        /// Header.
        pub hdr: CommandHeader,
        /// Context id.
        pub ctx_id: u32,
        /// [`DESTROY_FLAG_FORCE`] or 0.
        pub flags: u32,
    }

    /// `CONTEXT_QUERY`.
    pub struct ContextQueryCmd {
        /// Header.
        pub hdr: CommandHeader,
        /// Context id.
        pub ctx_id: u32,
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

    /// `RING_CREATE`.
    pub struct RingCreateCmd {
        /// Header.
        pub hdr: CommandHeader,
        /// Context id.
        pub ctx_id: u32,
        /// [`engine`] number.
        pub engine: u32,
        /// Ring size in bytes: a power of two in
        /// `MIN_RING_SIZE..=MAX_RING_SIZE`.
        pub size: u32,
        /// Zero.
        pub flags: u32,
        /// GPU VA of the ring in the context's address space (4 KiB aligned).
        pub ring_va: u64,
        /// GPU VA of the ring's [`RingStatus`] block (64-byte aligned).
        pub status_va: u64,
    }

    /// `RING_DESTROY`.
    pub struct RingDestroyCmd {
        /// Header.
        pub hdr: CommandHeader,
        /// Context id.
        pub ctx_id: u32,
        /// Engine.
        pub engine: u32,
    }

    /// `DOORBELL`.
    pub struct DoorbellCmd {
        /// Header.
        pub hdr: CommandHeader,
        /// Context id.
        pub ctx_id: u32,
        /// Engine.
        pub engine: u32,
        /// New write pointer: total bytes ever written to the ring (it
        /// wraps at 2^32; the ring offset is `wptr % size`).
        pub wptr: u32,
        /// Zero.
        pub reserved: u32,
    }

    /// `DOORBELL_WATCH`: from now on the write pointer of the ring's
    /// doorbell block at `doorbell_va` is the ring's doorbell.
    pub struct DoorbellWatchCmd {
        /// Header.
        pub hdr: CommandHeader,
        /// Context id.
        pub ctx_id: u32,
        /// Engine.
        pub engine: u32,
        /// GPU VA of the [`DoorbellBlock`] in the context's address space
        /// (64-byte aligned, mapped read-write); 0 stops watching.
        pub doorbell_va: u64,
        /// Where the ring starts: its read and write pointers are set to
        /// this value (the ring must be idle; 0 when `doorbell_va` is 0 or
        /// with [`WATCH_KEEP_POINTERS`]).
        pub start: u32,
        /// [`WATCH_KEEP_POINTERS`] or 0.
        pub flags: u32,
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

    /// `TLB_INVALIDATE`.
    pub struct TlbInvalidateCmd {
        /// Header.
        pub hdr: CommandHeader,
        /// Context id.
        pub ctx_id: u32,
        /// Engines whose TLBs to invalidate (bit per engine; 0 = all).
        pub engine_mask: u32,
        /// First VA of the range.
        pub va: u64,
        /// Bytes in the range; 0 = the whole address space.
        pub size: u64,
    }

    /// `FAULT_RESUME`.
    pub struct FaultResumeCmd {
        /// Header.
        pub hdr: CommandHeader,
        /// Context id.
        pub ctx_id: u32,
        /// [`FAULT_RESUME_RETRY`] or [`FAULT_RESUME_ABORT`].
        pub action: u32,
        /// The fault's id from its event record.
        pub fault_id: u64,
    }

    /// `ENGINE_RESET`.
    pub struct EngineResetCmd {
        /// Header.
        pub hdr: CommandHeader,
        /// Engine.
        pub engine: u32,
        /// A context whose ring on this engine is cleared as well, whatever
        /// its state — the ring the driver found hung, which may be blocked
        /// in `SEM_WAIT` rather than in flight. [`CTX_NONE`]: none.
        pub hung_ctx: u32,
    }

    /// Reply to `ENGINE_RESET`.
    pub struct EngineResetReply {
        /// Header.
        pub hdr: ReplyHeader,
        /// Engine.
        pub engine: u32,
        /// Context whose job was in flight ([`CTX_NONE`] if idle).
        pub ctx_id: u32,
        /// That ring's read pointer where the engine stopped.
        pub rptr: u32,
        /// Zero.
        pub reserved: u32,
    }

    /// `QUERY_STATS`.
    pub struct QueryStatsCmd {
        /// Header.
        pub hdr: CommandHeader,
        /// [`stats_kind`].
        pub kind: u32,
        /// Engine number, context id, or 0.
        pub id: u32,
    }

    /// `RAS_RETIRE`.
    pub struct RasRetireCmd {
        /// Header.
        pub hdr: CommandHeader,
        /// Guest-physical address of the page (4 KiB aligned).
        pub pa: u64,
    }

    /// `RAS_QUERY`.
    pub struct RasQueryCmd {
        /// Header.
        pub hdr: CommandHeader,
        /// Index of the first entry wanted.
        pub start: u32,
        /// Zero.
        pub reserved: u32,
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

    /// `CAPTURE`.
    pub struct CaptureCmd {
        /// Header.
        pub hdr: CommandHeader,
        /// Context to capture.
        pub ctx_id: u32,
        /// The engine whose ring, TLB and job in flight are captured.
        pub engine: u32,
        /// Why ([`super::capture::reason`]: `HANG` or `DRIVER`).
        pub reason: u32,
        /// Zero.
        pub flags: u32,
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

    /// `CAPTURE_READ`.
    pub struct CaptureReadCmd {
        /// Header.
        pub hdr: CommandHeader,
        /// The capture, or 0: the newest capture of `ctx_id` ([`CTX_NONE`]:
        /// of any context).
        pub capture_id: u32,
        /// With `capture_id` 0: whose newest capture.
        pub ctx_id: u32,
        /// First byte wanted.
        pub offset: u32,
        /// Bytes wanted, at most [`CAPTURE_READ_MAX`].
        pub len: u32,
        /// Guest-physical address of the driver's buffer: `len` bytes that
        /// must lie in guest RAM.
        pub buf_pa: u64,
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

    /// Reply to `TIME_QUERY`.
    pub struct TimeReply {
        /// Header.
        pub hdr: ReplyHeader,
        /// Device clock (ns since the device started): the clock of event
        /// records, `TIMESTAMP` packets and the device's trace.
        pub device_ns: u64,
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

    /// `SAN_MEM`: declare ([`SAN_MEM_OWN`]) or give back
    /// ([`SAN_MEM_RELEASE`]) guest-physical ranges as GPU memory.
    pub struct SanMemCmd {
        /// Header.
        pub hdr: CommandHeader,
        /// [`SAN_MEM_OWN`], [`SAN_MEM_OWN_TABLES`] or [`SAN_MEM_RELEASE`].
        pub op: u32,
        /// Ranges used, 1..=[`SAN_MEM_RANGES`].
        pub count: u32,
        /// The ranges (entries from `count` on must be zero).
        pub ranges: [super::sanitize::SanRange; SAN_MEM_RANGES],
    }

    /// `SAN_REPORT`: fetch sanitizer report `seq`.
    pub struct SanReportCmd {
        /// Header.
        pub hdr: CommandHeader,
        /// The report number (from the `SANITIZER` event).
        pub seq: u64,
    }

    /// Reply to `SAN_REPORT`.
    pub struct SanReportReply {
        /// Header.
        pub hdr: ReplyHeader,
        /// The report.
        pub report: super::sanitize::SanReport,
    }

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
}

/// Why a command could not be decoded; each maps to a reply [`Status`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// Fewer bytes than a [`CommandHeader`].
    NoHeader,
    /// More than [`MAX_COMMAND_SIZE`] bytes.
    TooLarge,
    /// The opcode number is unknown.
    UnknownOpcode(u32),
    /// Shorter than the opcode's command size.
    Truncated(Opcode),
    /// Longer than the opcode's command size.
    Oversized(Opcode),
    /// Flags or reserved fields are not zero.
    ReservedNonZero(Opcode),
}

impl DecodeError {
    /// The reply status for this error.
    pub const fn status(self) -> Status {
        match self {
            DecodeError::NoHeader | DecodeError::Truncated(_) => Status::Truncated,
            DecodeError::TooLarge | DecodeError::Oversized(_) => Status::Oversized,
            DecodeError::UnknownOpcode(_) => Status::UnknownOpcode,
            DecodeError::ReservedNonZero(_) => Status::ReservedNonZero,
        }
    }
}

/// A decoded control command. Field ranges (context ids, engines, sizes)
/// are checked when the command executes, against the device's state; the
/// decoder checks sizes, flags and reserved fields.
///
/// `SAN_MEM`'s ranges make it the largest variant (about 230 bytes): a
/// command is decoded once into a stack value, and `no_std` (the KMD)
/// offers no box to move them behind.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    /// `IDENTIFY`.
    Identify,
    /// `PING` with its cookie.
    Ping {
        /// The cookie to echo.
        cookie: u64,
    },
    /// `CONTEXT_CREATE`.
    ContextCreate {
        /// Context id.
        ctx_id: u32,
        /// Priority.
        priority: u32,
        /// Flags.
        flags: u32,
        /// Page-table root (guest-physical).
        pt_root: u64,
    },
    /// `CONTEXT_DESTROY`.
    ContextDestroy {
        /// Context id.
        ctx_id: u32,
        /// Flags.
        flags: u32,
    },
    /// `CONTEXT_QUERY`.
    ContextQuery {
        /// Context id.
        ctx_id: u32,
    },
    /// `RING_CREATE`.
    RingCreate {
        /// Context id.
        ctx_id: u32,
        /// Engine.
        engine: u32,
        /// Size in bytes.
        size: u32,
        /// Ring GPU VA.
        ring_va: u64,
        /// Status block GPU VA.
        status_va: u64,
    },
    /// `RING_DESTROY`.
    RingDestroy {
        /// Context id.
        ctx_id: u32,
        /// Engine.
        engine: u32,
    },
    /// `DOORBELL`.
    Doorbell {
        /// Context id.
        ctx_id: u32,
        /// Engine.
        engine: u32,
        /// Write pointer.
        wptr: u32,
    },
    /// `DOORBELL_WATCH`.
    DoorbellWatch {
        /// Context id.
        ctx_id: u32,
        /// Engine.
        engine: u32,
        /// Doorbell block VA (0: stop watching).
        doorbell_va: u64,
        /// The ring's new read and write pointer.
        start: u32,
        /// [`WATCH_KEEP_POINTERS`] or 0.
        flags: u32,
    },
    /// `DOORBELL_KICK`.
    DoorbellKick,
    /// `TLB_INVALIDATE`.
    TlbInvalidate {
        /// Context id.
        ctx_id: u32,
        /// Engine mask (0 = all).
        engine_mask: u32,
        /// Range start.
        va: u64,
        /// Range size (0 = all).
        size: u64,
    },
    /// `FAULT_RESUME`.
    FaultResume {
        /// Context id.
        ctx_id: u32,
        /// Action.
        action: u32,
        /// Fault id.
        fault_id: u64,
    },
    /// `ENGINE_RESET`.
    EngineReset {
        /// Engine.
        engine: u32,
        /// Context whose ring on the engine is cleared too (`CTX_NONE`:
        /// none).
        hung_ctx: u32,
    },
    /// `DEVICE_RESET`.
    DeviceReset,
    /// `QUERY_STATS`.
    QueryStats {
        /// Kind.
        kind: u32,
        /// Id.
        id: u32,
    },
    /// `RAS_RETIRE`.
    RasRetire {
        /// Guest-physical page address.
        pa: u64,
    },
    /// `RAS_QUERY`.
    RasQuery {
        /// First entry wanted.
        start: u32,
    },
    /// `SAN_MEM`.
    SanMem {
        /// [`SAN_MEM_OWN`], [`SAN_MEM_OWN_TABLES`] or [`SAN_MEM_RELEASE`].
        op: u32,
        /// Ranges used.
        count: u32,
        /// The ranges.
        ranges: [super::sanitize::SanRange; SAN_MEM_RANGES],
    },
    /// `SAN_REPORT`.
    SanReport {
        /// Report number.
        seq: u64,
    },
    /// `CAPTURE`.
    Capture {
        /// Context.
        ctx_id: u32,
        /// Engine.
        engine: u32,
        /// Why.
        reason: u32,
    },
    /// `CAPTURE_READ`.
    CaptureRead {
        /// Capture id, or 0 for the newest of `ctx_id`.
        capture_id: u32,
        /// Context (with `capture_id` 0).
        ctx_id: u32,
        /// First byte.
        offset: u32,
        /// Bytes wanted.
        len: u32,
        /// Guest-physical buffer.
        buf_pa: u64,
    },
    /// `TIME_QUERY`.
    TimeQuery,
}

fn read<T: Pod>(bytes: &[u8], op: Opcode) -> Result<T, DecodeError> {
    T::read_from(bytes).ok_or(DecodeError::Truncated(op))
}

fn zero(v: u32, op: Opcode) -> Result<(), DecodeError> {
    if v == 0 {
        Ok(())
    } else {
        Err(DecodeError::ReservedNonZero(op))
    }
}

impl Command {
    /// Decodes a command from bytes already copied out of guest memory.
    /// Returns the header (if there was one) alongside the result so that
    /// errors can still echo opcode and tag.
    pub fn decode(bytes: &[u8]) -> (Option<CommandHeader>, Result<Command, DecodeError>) {
        let Some(hdr) = CommandHeader::read_from(bytes) else {
            return (None, Err(DecodeError::NoHeader));
        };
        (Some(hdr), Command::decode_body(&hdr, bytes))
    }

    fn decode_body(hdr: &CommandHeader, bytes: &[u8]) -> Result<Command, DecodeError> {
        if bytes.len() > MAX_COMMAND_SIZE {
            return Err(DecodeError::TooLarge);
        }
        let op = Opcode::from_u32(hdr.opcode).ok_or(DecodeError::UnknownOpcode(hdr.opcode))?;
        let want = op.command_size();
        if bytes.len() < want {
            return Err(DecodeError::Truncated(op));
        }
        if bytes.len() > want {
            return Err(DecodeError::Oversized(op));
        }
        zero(hdr.flags, op)?;
        Ok(match op {
            Opcode::Identify => Command::Identify,
            Opcode::DeviceReset => Command::DeviceReset,
            Opcode::TimeQuery => Command::TimeQuery,
            Opcode::DoorbellKick => Command::DoorbellKick,
            Opcode::Capture => {
                let c: CaptureCmd = read(bytes, op)?;
                zero(c.flags, op)?;
                Command::Capture {
                    ctx_id: c.ctx_id,
                    engine: c.engine,
                    reason: c.reason,
                }
            }
            Opcode::CaptureRead => {
                let c: CaptureReadCmd = read(bytes, op)?;
                Command::CaptureRead {
                    capture_id: c.capture_id,
                    ctx_id: c.ctx_id,
                    offset: c.offset,
                    len: c.len,
                    buf_pa: c.buf_pa,
                }
            }
            Opcode::Ping => Command::Ping {
                cookie: read::<PingCmd>(bytes, op)?.cookie,
            },
            Opcode::ContextCreate => {
                let c: ContextCreateCmd = read(bytes, op)?;
                zero(c.reserved, op)?;
                zero(c.flags & !CTX_FLAG_REPLAYABLE_FAULTS, op)?;
                Command::ContextCreate {
                    ctx_id: c.ctx_id,
                    priority: c.priority,
                    flags: c.flags,
                    pt_root: c.pt_root,
                }
            }
            Opcode::ContextDestroy => {
                let c: ContextDestroyCmd = read(bytes, op)?;
                zero(c.flags & !DESTROY_FLAG_FORCE, op)?;
                Command::ContextDestroy {
                    ctx_id: c.ctx_id,
                    flags: c.flags,
                }
            }
            Opcode::ContextQuery => {
                let c: ContextQueryCmd = read(bytes, op)?;
                zero(c.reserved, op)?;
                Command::ContextQuery { ctx_id: c.ctx_id }
            }
            Opcode::RingCreate => {
                let c: RingCreateCmd = read(bytes, op)?;
                zero(c.flags, op)?;
                Command::RingCreate {
                    ctx_id: c.ctx_id,
                    engine: c.engine,
                    size: c.size,
                    ring_va: c.ring_va,
                    status_va: c.status_va,
                }
            }
            Opcode::RingDestroy => {
                let c: RingDestroyCmd = read(bytes, op)?;
                Command::RingDestroy {
                    ctx_id: c.ctx_id,
                    engine: c.engine,
                }
            }
            Opcode::Doorbell => {
                let c: DoorbellCmd = read(bytes, op)?;
                zero(c.reserved, op)?;
                Command::Doorbell {
                    ctx_id: c.ctx_id,
                    engine: c.engine,
                    wptr: c.wptr,
                }
            }
            Opcode::DoorbellWatch => {
                let c: DoorbellWatchCmd = read(bytes, op)?;
                zero(c.flags & !WATCH_KEEP_POINTERS, op)?;
                Command::DoorbellWatch {
                    ctx_id: c.ctx_id,
                    engine: c.engine,
                    doorbell_va: c.doorbell_va,
                    start: c.start,
                    flags: c.flags,
                }
            }
            Opcode::TlbInvalidate => {
                let c: TlbInvalidateCmd = read(bytes, op)?;
                Command::TlbInvalidate {
                    ctx_id: c.ctx_id,
                    engine_mask: c.engine_mask,
                    va: c.va,
                    size: c.size,
                }
            }
            Opcode::FaultResume => {
                let c: FaultResumeCmd = read(bytes, op)?;
                Command::FaultResume {
                    ctx_id: c.ctx_id,
                    action: c.action,
                    fault_id: c.fault_id,
                }
            }
            Opcode::EngineReset => {
                let c: EngineResetCmd = read(bytes, op)?;
                Command::EngineReset {
                    engine: c.engine,
                    hung_ctx: c.hung_ctx,
                }
            }
            Opcode::QueryStats => {
                let c: QueryStatsCmd = read(bytes, op)?;
                Command::QueryStats {
                    kind: c.kind,
                    id: c.id,
                }
            }
            Opcode::RasRetire => {
                let c: RasRetireCmd = read(bytes, op)?;
                Command::RasRetire { pa: c.pa }
            }
            Opcode::RasQuery => {
                let c: RasQueryCmd = read(bytes, op)?;
                if c.reserved != 0 {
                    return Err(DecodeError::ReservedNonZero(op));
                }
                Command::RasQuery { start: c.start }
            }
            Opcode::SanMem => {
                let c: SanMemCmd = read(bytes, op)?;
                if c.op > SAN_MEM_OWN_TABLES {
                    return Err(DecodeError::ReservedNonZero(op));
                }
                // Entries past `count` are reserved.
                let used = (c.count as usize).min(SAN_MEM_RANGES);
                for r in c.ranges.iter().skip(used) {
                    if r.pa != 0 || r.size != 0 {
                        return Err(DecodeError::ReservedNonZero(op));
                    }
                }
                Command::SanMem {
                    op: c.op,
                    count: c.count,
                    ranges: c.ranges,
                }
            }
            Opcode::SanReport => Command::SanReport {
                seq: read::<SanReportCmd>(bytes, op)?.seq,
            },
        })
    }

    /// The command's opcode.
    pub const fn opcode(&self) -> Opcode {
        match self {
            Command::Identify => Opcode::Identify,
            Command::Ping { .. } => Opcode::Ping,
            Command::ContextCreate { .. } => Opcode::ContextCreate,
            Command::ContextDestroy { .. } => Opcode::ContextDestroy,
            Command::ContextQuery { .. } => Opcode::ContextQuery,
            Command::RingCreate { .. } => Opcode::RingCreate,
            Command::RingDestroy { .. } => Opcode::RingDestroy,
            Command::Doorbell { .. } => Opcode::Doorbell,
            Command::DoorbellWatch { .. } => Opcode::DoorbellWatch,
            Command::DoorbellKick => Opcode::DoorbellKick,
            Command::TlbInvalidate { .. } => Opcode::TlbInvalidate,
            Command::FaultResume { .. } => Opcode::FaultResume,
            Command::EngineReset { .. } => Opcode::EngineReset,
            Command::DeviceReset => Opcode::DeviceReset,
            Command::QueryStats { .. } => Opcode::QueryStats,
            Command::RasRetire { .. } => Opcode::RasRetire,
            Command::RasQuery { .. } => Opcode::RasQuery,
            Command::SanMem { .. } => Opcode::SanMem,
            Command::SanReport { .. } => Opcode::SanReport,
            Command::Capture { .. } => Opcode::Capture,
            Command::CaptureRead { .. } => Opcode::CaptureRead,
            Command::TimeQuery => Opcode::TimeQuery,
        }
    }

    /// Encodes the command with `tag` into `out`; returns its length, or
    /// `None` if `out` is too small.
    pub fn encode(&self, tag: u64, out: &mut [u8]) -> Option<usize> {
        let hdr = CommandHeader {
            opcode: self.opcode() as u32,
            flags: 0,
            tag,
        };
        match *self {
            Command::Identify
            | Command::DeviceReset
            | Command::TimeQuery
            | Command::DoorbellKick => hdr.write_to(out),
            Command::Capture {
                ctx_id,
                engine,
                reason,
            } => CaptureCmd {
                hdr,
                ctx_id,
                engine,
                reason,
                flags: 0,
            }
            .write_to(out),
            Command::CaptureRead {
                capture_id,
                ctx_id,
                offset,
                len,
                buf_pa,
            } => CaptureReadCmd {
                hdr,
                capture_id,
                ctx_id,
                offset,
                len,
                buf_pa,
            }
            .write_to(out),
            Command::Ping { cookie } => PingCmd { hdr, cookie }.write_to(out),
            Command::ContextCreate {
                ctx_id,
                priority,
                flags,
                pt_root,
            } => ContextCreateCmd {
                hdr,
                ctx_id,
                priority,
                flags,
                reserved: 0,
                pt_root,
            }
            .write_to(out),
            Command::ContextDestroy { ctx_id, flags } => {
                ContextDestroyCmd { hdr, ctx_id, flags }.write_to(out)
            }
            Command::ContextQuery { ctx_id } => ContextQueryCmd {
                hdr,
                ctx_id,
                reserved: 0,
            }
            .write_to(out),
            Command::RingCreate {
                ctx_id,
                engine,
                size,
                ring_va,
                status_va,
            } => RingCreateCmd {
                hdr,
                ctx_id,
                engine,
                size,
                flags: 0,
                ring_va,
                status_va,
            }
            .write_to(out),
            Command::RingDestroy { ctx_id, engine } => RingDestroyCmd {
                hdr,
                ctx_id,
                engine,
            }
            .write_to(out),
            Command::Doorbell {
                ctx_id,
                engine,
                wptr,
            } => DoorbellCmd {
                hdr,
                ctx_id,
                engine,
                wptr,
                reserved: 0,
            }
            .write_to(out),
            Command::DoorbellWatch {
                ctx_id,
                engine,
                doorbell_va,
                start,
                flags,
            } => DoorbellWatchCmd {
                hdr,
                ctx_id,
                engine,
                doorbell_va,
                start,
                flags,
            }
            .write_to(out),
            Command::TlbInvalidate {
                ctx_id,
                engine_mask,
                va,
                size,
            } => TlbInvalidateCmd {
                hdr,
                ctx_id,
                engine_mask,
                va,
                size,
            }
            .write_to(out),
            Command::FaultResume {
                ctx_id,
                action,
                fault_id,
            } => FaultResumeCmd {
                hdr,
                ctx_id,
                action,
                fault_id,
            }
            .write_to(out),
            Command::EngineReset { engine, hung_ctx } => EngineResetCmd {
                hdr,
                engine,
                hung_ctx,
            }
            .write_to(out),
            Command::QueryStats { kind, id } => QueryStatsCmd { hdr, kind, id }.write_to(out),
            Command::RasRetire { pa } => RasRetireCmd { hdr, pa }.write_to(out),
            Command::RasQuery { start } => RasQueryCmd {
                hdr,
                start,
                reserved: 0,
            }
            .write_to(out),
            Command::SanMem { op, count, ranges } => SanMemCmd {
                hdr,
                op,
                count,
                ranges,
            }
            .write_to(out),
            Command::SanReport { seq } => SanReportCmd { hdr, seq }.write_to(out),
        }
    }
}

impl ReplyHeader {
    /// A reply header for `status`, echoing `cmd` when there was one.
    pub fn for_command(cmd: Option<&CommandHeader>, status: Status) -> ReplyHeader {
        ReplyHeader {
            status: status as u32,
            opcode: cmd.map_or(0, |c| c.opcode),
            tag: cmd.map_or(0, |c| c.tag),
        }
    }
}
