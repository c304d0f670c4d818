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
//!
//! # One table
//!
//! Each command is declared once, in the `control_commands!` table below:
//! its opcode number and name, its fields in wire order (the
//! struct `XxxCmd` after the header), the rules its fields obey, and its
//! reply. The table generates [`Opcode`], the command structs, [`Command`]
//! (the decoded command, without its reserved fields) and
//! [`Command::decode`] / [`Command::encode`]. A field written `name: u32 =
//! 0` must be zero on the wire and is not part of [`Command`]; a field
//! written `name: u32 where <condition>` is carried but the decoder refuses
//! a command whose condition is false ([`Status::ReservedNonZero`]). The
//! replies are in [`super::reply`], the limits in [`super::limits`]; both
//! are re-exported here, so `proto::X` names everything of the control
//! queue.

pub use super::limits::*;
pub use super::reply::*;

use super::pod::{pod_struct, Pod};
use super::sanitize::SanRange;

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
/// `DOORBELL_WATCH` flag: watch the block without moving the ring's
/// pointers (the ring may have work; the watcher starts from the ring's
/// latest write pointer, so a block that moved on meanwhile rings at once).
pub const WATCH_KEEP_POINTERS: u32 = 1;
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

/// `QUERY_STATS` kinds.
pub mod stats_kind {
    /// One engine (`id` = engine number).
    pub const ENGINE: u32 = 0;
    /// One context (`id` = context id).
    pub const CONTEXT: u32 = 1;
    /// The whole device (`id` = 0).
    pub const DEVICE: u32 = 2;
    /// One engine's share of one context (`id` =
    /// [`context_engine_id`]): what the context's ring on that engine
    /// used, the figures DRM fdinfo's `drm-engine-<name>` keys report.
    pub const CONTEXT_ENGINE: u32 = 3;

    /// The `id` of a [`CONTEXT_ENGINE`] query: the context id in bits
    /// 15..0, the engine number in bits 31..16.
    pub const fn context_engine_id(ctx_id: u32, engine: u32) -> u32 {
        (ctx_id & 0xffff) | (engine << 16)
    }

    /// The context id and engine number a [`CONTEXT_ENGINE`] `id` names.
    pub const fn split_context_engine_id(id: u32) -> (u32, u32) {
        (id & 0xffff, id >> 16)
    }
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
}

/// Generates everything of the control commands from the table below.
///
/// A table entry is
///
/// ```text
/// /// What the command does.
/// Name = 0xNNNN, "NAME", NameCmd { fields } -> NameReply;
/// ```
///
/// where `, NameCmd { fields }` is left out for a command that is only a
/// header, and `-> NameReply` for a command answered with a bare
/// [`ReplyHeader`]. Each field is `/// doc` then `name: type,`, `name: type
/// = 0,` (must be zero; not in [`Command`]) or `name: type where condition,`
/// (the condition may name any field of the command).
///
/// It works in two passes. `@next`/`@split` walk the table once and, for
/// each command with fields, collect the fields [`Command`] carries (those
/// without `= 0`); `@emit` then writes the items with plain repetitions,
/// using the `@struct`, `@decode`, `@encode` and `@value` helpers for the
/// parts that differ between header-only commands and the others.
macro_rules! control_commands {
    // Pass 1: every entry seen; generate.
    (@next [$($done:tt)*]) => {
        control_commands!(@emit $($done)*);
    };
    // A header-only command.
    (@next [$($done:tt)*]
        $(#[$doc:meta])* $op:ident = $num:literal, $name:literal $(-> $reply:ident)?;
        $($rest:tt)*
    ) => {
        control_commands!(@next
            [$($done)* {[$(#[$doc])*] $op $num $name [$($reply)?]}] $($rest)*);
    };
    // A command with fields: collect the carried ones first.
    (@next [$($done:tt)*]
        $(#[$doc:meta])* $op:ident = $num:literal, $name:literal,
        $cmd:ident { $($fields:tt)* } $(-> $reply:ident)?;
        $($rest:tt)*
    ) => {
        control_commands!(@split [$($done)*]
            [[$(#[$doc])*] $op $num $name [$($reply)?] $cmd {$($fields)*}]
            [] $($fields)* ; $($rest)*);
    };
    (@split [$($done:tt)*] [$($cur:tt)*] [$($kept:tt)*] ; $($rest:tt)*) => {
        control_commands!(@next [$($done)* {$($cur)* [$($kept)*]}] $($rest)*);
    };
    // A field that must be zero: not carried.
    (@split $done:tt $cur:tt $kept:tt
        $(#[$fdoc:meta])* $f:ident : $t:ty = 0, $($more:tt)*
    ) => {
        control_commands!(@split $done $cur $kept $($more)*);
    };
    // Any other field: carried.
    (@split $done:tt $cur:tt [$($kept:tt)*]
        $(#[$fdoc:meta])* $f:ident : $t:ty $(where $c:expr)?, $($more:tt)*
    ) => {
        control_commands!(@split $done $cur [$($kept)* $(#[$fdoc])* $f: $t,] $($more)*);
    };

    // Pass 2.
    (@emit $({
        [$(#[$doc:meta])*] $op:ident $num:literal $name:literal [$($reply:ident)?]
        $($cmd:ident {$($fields:tt)*} [$($(#[$kdoc:meta])* $kf:ident : $kt:ty,)*])?
    })*) => {
        /// Control opcodes.
        ///
        /// Ranges: `0x00xx` device, `0x01xx` contexts, `0x02xx` rings and
        /// doorbells, `0x03xx` the MMU, `0x04xx` resets and telemetry,
        /// `0x05xx` fault injection, `0x06xx` debugging (captures, the device
        /// clock), `0x07xx` the driver sanitizer ([`super::sanitize`]).
        #[repr(u32)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum Opcode {
            $($(#[$doc])* $op = $num,)*
        }

        impl Opcode {
            /// Every opcode, in table order, for tables and tests.
            pub const ALL: [Opcode; [$(Opcode::$op),*].len()] = [$(Opcode::$op),*];

            /// The exact size of this opcode's command, header included.
            pub const fn command_size(self) -> usize {
                match self {
                    $(Opcode::$op => {
                        core::mem::size_of::<control_commands!(@type CommandHeader $($cmd)?)>()
                    })*
                }
            }

            /// The size of this opcode's successful reply, header included.
            pub const fn reply_size(self) -> usize {
                match self {
                    $(Opcode::$op => {
                        core::mem::size_of::<control_commands!(@type ReplyHeader $($reply)?)>()
                    })*
                }
            }

            /// A short upper-case name.
            pub const fn name(self) -> &'static str {
                match self {
                    $(Opcode::$op => $name,)*
                }
            }
        }

        $($(control_commands!(@struct $op $name $cmd {$($fields)*});)?)*

        /// A decoded control command. Field ranges (context ids, engines,
        /// sizes) are checked when the command executes, against the
        /// device's state; the decoder checks sizes, flags and reserved
        /// fields.
        ///
        /// `SAN_MEM`'s ranges make it the largest variant (about 230
        /// bytes): a command is decoded once into a stack value, and
        /// `no_std` (the KMD) offers no box to move them behind.
        #[allow(clippy::large_enum_variant)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum Command {
            $($(#[$doc])* $op $({$($(#[$kdoc])* $kf: $kt,)*})?,)*
        }

        impl Command {
            /// The command's opcode.
            pub const fn opcode(&self) -> Opcode {
                match self {
                    $(Command::$op { .. } => Opcode::$op,)*
                }
            }

            fn decode_fields(op: Opcode, bytes: &[u8]) -> Result<Command, DecodeError> {
                Ok(match op {
                    $(Opcode::$op => {
                        control_commands!(@decode op, bytes, $op $(, $cmd {$($fields)*} [$($kf)*])?)
                    })*
                })
            }

            /// Encodes the command with `tag` into `out`; returns its length,
            /// or `None` if `out` is too small.
            pub fn encode(&self, tag: u64, out: &mut [u8]) -> Option<usize> {
                let hdr = CommandHeader {
                    opcode: self.opcode() as u32,
                    flags: 0,
                    tag,
                };
                match *self {
                    $(Command::$op $({$($kf),*})? => {
                        control_commands!(@encode hdr, out $(, $cmd {$($fields)*})?)
                    })*
                }
            }
        }
    };

    (@type $default:ident) => { $default };
    (@type $default:ident $t:ident) => { $t };

    (@struct $op:ident $name:literal $cmd:ident {$(
        $(#[$fdoc:meta])* $f:ident : $t:ty $(= $zero:literal)? $(where $c:expr)?,
    )*}) => {
        pod_struct! {
            #[doc = concat!("`", $name, "` as the driver writes it.")]
            pub struct $cmd {
                /// Header: [`Opcode`] `opcode`, zero `flags`, the driver's `tag`.
                pub hdr: CommandHeader,
                $($(#[$fdoc])* pub $f: $t,)*
            }
        }

        impl $cmd {
            /// The command's opcode.
            pub const OPCODE: Opcode = Opcode::$op;
        }
    };

    (@decode $opv:ident, $bytes:ident, $op:ident) => {
        Command::$op
    };
    (@decode $opv:ident, $bytes:ident, $op:ident, $cmd:ident {$(
        $(#[$fdoc:meta])* $f:ident : $t:ty $(= $zero:literal)? $(where $c:expr)?,
    )*} [$($kf:ident)*]) => {{
        let $cmd { hdr: _, $($f),* } = read::<$cmd>($bytes, $opv)?;
        $($(
            if $f != $zero {
                return Err(DecodeError::ReservedNonZero($opv));
            }
        )?)*
        $($(
            let valid: bool = $c;
            if !valid {
                return Err(DecodeError::ReservedNonZero($opv));
            }
        )?)*
        Command::$op { $($kf),* }
    }};

    (@encode $hdr:ident, $out:ident) => {
        $hdr.write_to($out)
    };
    (@encode $hdr:ident, $out:ident, $cmd:ident {$(
        $(#[$fdoc:meta])* $f:ident : $t:ty $(= $zero:literal)? $(where $c:expr)?,
    )*}) => {
        $cmd {
            hdr: $hdr,
            $($f: control_commands!(@value $f $($zero)?),)*
        }
        .write_to($out)
    };

    (@value $f:ident) => { $f };
    (@value $f:ident $zero:literal) => { $zero };

    // The table.
    ($($table:tt)*) => {
        control_commands!(@next [] $($table)*);
    };
}

control_commands! {
    /// Return the device's identity and limits.
    Identify = 0x0001, "IDENTIFY" -> IdentifyReply;

    /// Reply at once and post an [`super::event::EventKind::Ping`] event
    /// carrying the command's cookie.
    Ping = 0x0002, "PING", PingCmd {
        /// Any value; carried by the reply and the event.
        cookie: u64,
    } -> PingReply;

    /// Return the layout of device memory (VRAM): its ranges, the
    /// CPU-visible part and the reset policy ([`super::vram`]). A device
    /// without VRAM answers with no ranges.
    MemoryLayout = 0x0003, "MEMORY_LAYOUT" -> MemoryLayoutReply;

    /// Create a context.
    ContextCreate = 0x0101, "CONTEXT_CREATE", ContextCreateCmd {
        /// Context id chosen by the driver, `0..MAX_CONTEXTS`.
        ctx_id: u32,
        /// `PRIORITY_*`.
        priority: u32,
        /// [`CTX_FLAG_REPLAYABLE_FAULTS`] or 0.
        flags: u32 where flags & !CTX_FLAG_REPLAYABLE_FAULTS == 0,
        /// Zero.
        reserved: u32 = 0,
        /// Device-physical address of the level-3 page table (4 KiB
        /// aligned): guest-physical in system memory, or
        /// [`super::mmu::VRAM_BASE`]` + offset` in VRAM.
        pt_root: u64,
    };

    /// Destroy a context; `BUSY` while it has work in flight unless forced.
    ContextDestroy = 0x0102, "CONTEXT_DESTROY", ContextDestroyCmd {
        /// Context id.
        ctx_id: u32,
        /// [`DESTROY_FLAG_FORCE`] or 0.
        flags: u32 where flags & !DESTROY_FLAG_FORCE == 0,
    };

    /// Read a context's state.
    ContextQuery = 0x0103, "CONTEXT_QUERY", ContextQueryCmd {
        /// Context id.
        ctx_id: u32,
        /// Zero.
        reserved: u32 = 0,
    } -> ContextQueryReply;

    /// Register a ring for a (context, engine).
    RingCreate = 0x0201, "RING_CREATE", RingCreateCmd {
        /// Context id.
        ctx_id: u32,
        /// [`engine`] number.
        engine: u32,
        /// Ring size in bytes: a power of two in
        /// `MIN_RING_SIZE..=MAX_RING_SIZE`.
        size: u32,
        /// Zero.
        flags: u32 = 0,
        /// GPU VA of the ring in the context's address space (4 KiB aligned).
        ring_va: u64,
        /// GPU VA of the ring's [`RingStatus`] block (64-byte aligned).
        status_va: u64,
    };

    /// Unregister a ring; `BUSY` while it runs.
    RingDestroy = 0x0202, "RING_DESTROY", RingDestroyCmd {
        /// Context id.
        ctx_id: u32,
        /// Engine.
        engine: u32,
    };

    /// Publish a ring's new write pointer.
    Doorbell = 0x0203, "DOORBELL", DoorbellCmd {
        /// Context id.
        ctx_id: u32,
        /// Engine.
        engine: u32,
        /// New write pointer: total bytes ever written to the ring (it
        /// wraps at 2^32; the ring offset is `wptr % size`).
        wptr: u32,
        /// Zero.
        reserved: u32 = 0,
    };

    /// Watch a doorbell block in the context's memory: every change of its
    /// write pointer is a doorbell for the ring, with no command
    /// ([`DoorbellBlock`]); a user-mode queue. From now on the write
    /// pointer of the ring's doorbell block at `doorbell_va` is the ring's
    /// doorbell.
    DoorbellWatch = 0x0204, "DOORBELL_WATCH", DoorbellWatchCmd {
        /// Context id.
        ctx_id: u32,
        /// Engine.
        engine: u32,
        /// GPU VA of the [`DoorbellBlock`] in the context's address space
        /// (64-byte aligned, mapped read-write); 0 stops watching.
        doorbell_va: u64,
        /// Where the ring starts: its read and write pointers are set to
        /// this value (the ring must be idle; 0 when `doorbell_va` is 0 or
        /// with [`WATCH_KEEP_POINTERS`]).
        start: u32,
        /// [`WATCH_KEEP_POINTERS`] or 0.
        flags: u32 where flags & !WATCH_KEEP_POINTERS == 0,
    };

    /// Wake the doorbell watcher: look at every watched doorbell now and
    /// poll them again (see [`DoorbellBlock::sleeping`]).
    DoorbellKick = 0x0205, "DOORBELL_KICK";

    /// Drop TLB entries of a context.
    TlbInvalidate = 0x0301, "TLB_INVALIDATE", TlbInvalidateCmd {
        /// Context id.
        ctx_id: u32,
        /// Engines whose TLBs to invalidate (bit per engine; 0 = all).
        engine_mask: u32,
        /// First VA of the range.
        va: u64,
        /// Bytes in the range; 0 = the whole address space.
        size: u64,
    };

    /// Answer a replayable fault.
    FaultResume = 0x0302, "FAULT_RESUME", FaultResumeCmd {
        /// Context id.
        ctx_id: u32,
        /// [`FAULT_RESUME_RETRY`] or [`FAULT_RESUME_ABORT`].
        action: u32,
        /// The fault's id from its event record.
        fault_id: u64,
    };

    /// Reset one engine.
    EngineReset = 0x0401, "ENGINE_RESET", EngineResetCmd {
        /// Engine.
        engine: u32,
        /// A context whose ring on this engine is cleared as well, whatever
        /// its state — the ring the driver found hung, which may be blocked
        /// in `SEM_WAIT` rather than in flight. [`CTX_NONE`]: none.
        hung_ctx: u32,
    } -> EngineResetReply;

    /// Return the whole device to its power-on state. VRAM may be lost
    /// ([`super::vram`]): the reply says what happened to it.
    DeviceReset = 0x0402, "DEVICE_RESET" -> DeviceResetReply;

    /// Read counters of an engine, a context or the device.
    QueryStats = 0x0403, "QUERY_STATS", QueryStatsCmd {
        /// [`stats_kind`].
        kind: u32,
        /// Engine number, context id, or 0.
        id: u32,
    } -> StatsReply;

    /// Record a guest-physical page in the device's table of retired pages:
    /// the driver retired it after an uncorrectable error. The table
    /// outlives resets and driver reloads, like a RAS EEPROM.
    RasRetire = 0x0501, "RAS_RETIRE", RasRetireCmd {
        /// Guest-physical address of the page (4 KiB aligned).
        pa: u64,
    };

    /// Read the table of retired pages.
    RasQuery = 0x0502, "RAS_QUERY", RasQueryCmd {
        /// Index of the first entry wanted.
        start: u32,
        /// Zero.
        reserved: u32 = 0,
    } -> RasQueryReply;

    /// Freeze a context's state into a capture now: what a driver asks
    /// when it declares a hang. The device also captures by itself when a
    /// ring stops on a fault or an engine error (see [`super::capture`]).
    Capture = 0x0601, "CAPTURE", CaptureCmd {
        /// Context to capture.
        ctx_id: u32,
        /// The engine whose ring, TLB and job in flight are captured.
        engine: u32,
        /// Why ([`super::capture::reason`]: `HANG` or `DRIVER`).
        reason: u32,
        /// Zero.
        flags: u32 = 0,
    } -> CaptureReply;

    /// Copy part of a capture into guest memory: a capture is larger than
    /// a reply, so the driver reads it in chunks into a buffer of its own,
    /// like a firmware log.
    CaptureRead = 0x0602, "CAPTURE_READ", CaptureReadCmd {
        /// The capture, or 0: the newest capture of `ctx_id` ([`CTX_NONE`]:
        /// of any context).
        capture_id: u32,
        /// With `capture_id` 0: whose newest capture.
        ctx_id: u32,
        /// First byte wanted.
        offset: u32,
        /// Bytes wanted, at most [`CAPTURE_READ_MAX`].
        len: u32,
        /// Guest-physical address of the driver's buffer: `len` bytes that
        /// must lie in guest RAM.
        buf_pa: u64,
    } -> CaptureReadReply;

    /// Read the device clock: correlates the guest's clock with event and
    /// trace timestamps.
    TimeQuery = 0x0603, "TIME_QUERY" -> TimeReply;

    /// Declare ([`SAN_MEM_OWN`]) or give back ([`SAN_MEM_RELEASE`])
    /// guest-physical ranges as GPU memory, for the sanitizer's
    /// DMA-ownership check.
    SanMem = 0x0701, "SAN_MEM", SanMemCmd {
        /// [`SAN_MEM_OWN`], [`SAN_MEM_OWN_TABLES`] or [`SAN_MEM_RELEASE`].
        op: u32 where op <= SAN_MEM_OWN_TABLES,
        /// Ranges used, 1..=[`SAN_MEM_RANGES`].
        count: u32,
        /// The ranges (entries from `count` on must be zero).
        ranges: [SanRange; SAN_MEM_RANGES] where unused_ranges_zero(count, &ranges),
        /// The driver's name for the object whose pages these are (0:
        /// none). The device keeps it with each page it declares, and when
        /// the pages are given back, so that a later access to them can
        /// name the object ([`super::sanitize::SAN_FLAG_OBJECT`]).
        object: u64,
        /// The object's placement generation: a number the driver raises
        /// each time the object moves (VRAM to system memory and back).
        /// The device tells a page given back by a move (the object
        /// declares pages under a newer generation) from one freed.
        gen: u32,
        reserved: u32 = 0,
    };

    /// Copy a firmware image out of guest memory into the device's firmware
    /// region and check it ([`super::firmware`]): the reply is the boot
    /// status after the check (`LOADED`, or `FAILED` with the error). In
    /// the boot state, or after a failed load; `BUSY` once an image runs.
    FwLoad = 0x0801, "FW_LOAD", FwLoadCmd {
        /// Guest-physical address of the image (contiguous guest RAM).
        pa: u64,
        /// Its size in bytes.
        size: u32,
        /// The driver's interface version ([`PROTOCOL_VERSION`] it was
        /// built with): the image must serve it.
        interface: u32,
    } -> FwStatusReply;

    /// Start the loaded image: the device boots it (`BOOTING`), then it
    /// runs (`RUNNING`) or fails; poll `FW_STATUS`. `NOT_READY` without a
    /// loaded image.
    FwStart = 0x0802, "FW_START" -> FwStatusReply;

    /// Read the boot status.
    FwStatus = 0x0803, "FW_STATUS" -> FwStatusReply;

    /// Copy part of the firmware log (a ring of text lines) into guest
    /// memory.
    FwLogRead = 0x0804, "FW_LOG_READ", FwLogReadCmd {
        /// Log position of the first byte wanted (bytes ever written
        /// before it).
        pos: u64,
        /// Bytes wanted, at most [`FW_LOG_READ_MAX`].
        len: u32,
        /// Zero.
        reserved: u32 = 0,
        /// Guest-physical address of the driver's buffer (`len` bytes in
        /// guest RAM).
        buf_pa: u64,
    } -> FwLogReadReply;

    /// Fetch a sanitizer report by number.
    SanReport = 0x0702, "SAN_REPORT", SanReportCmd {
        /// The report number (from the `SANITIZER` event).
        seq: u64,
    } -> SanReportReply;

    /// Enter a power state ([`power_state`]). Down from `D0` only when no
    /// ring has work (else `BUSY`): the device loses its contexts, rings,
    /// TLBs and firmware (back in its boot state at `D0`), and in `D3COLD`
    /// its VRAM. Back to `D0`: the reply's `vram` says what VRAM kept.
    PowerSet = 0x0901, "POWER_SET", PowerSetCmd {
        /// The state wanted (another number: `INVALID_ARGUMENT`).
        state: u32,
        /// Zero.
        flags: u32 = 0,
    } -> PowerReply;

    /// Read the power state and its counters.
    PowerStatus = 0x0902, "POWER_STATUS" -> PowerReply;
}

/// Power states (`POWER_SET`).
pub mod power_state {
    /// Running.
    pub const D0: u32 = 0;
    /// Suspended, VRAM kept (self-refresh); firmware and contexts lost.
    pub const D3HOT: u32 = 3;
    /// Off: VRAM lost too.
    pub const D3COLD: u32 = 4;

    /// A state's name.
    pub const fn name(s: u32) -> &'static str {
        match s {
            D0 => "D0",
            D3HOT => "D3hot",
            D3COLD => "D3cold",
            _ => "unknown",
        }
    }
}

/// Most bytes one `FW_LOG_READ` copies.
pub const FW_LOG_READ_MAX: u32 = 64 << 10;

/// Whether the `SAN_MEM` ranges past `count` are zero (they are reserved).
fn unused_ranges_zero(count: u32, ranges: &[SanRange; SAN_MEM_RANGES]) -> bool {
    let used = (count as usize).min(SAN_MEM_RANGES);
    ranges.iter().skip(used).all(|r| r.pa == 0 && r.size == 0)
}

impl Opcode {
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

fn read<T: Pod>(bytes: &[u8], op: Opcode) -> Result<T, DecodeError> {
    T::read_from(bytes).ok_or(DecodeError::Truncated(op))
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
        if hdr.flags != 0 {
            return Err(DecodeError::ReservedNonZero(op));
        }
        Command::decode_fields(op, bytes)
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
