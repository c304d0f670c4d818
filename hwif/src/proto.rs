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

/// GPU virtual address width in bits.
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
/// Ranges are reserved for later blocks: `0x01xx` contexts, `0x02xx` rings
/// and doorbells, `0x03xx` the MMU, `0x04xx` resets, `0x05xx` fault injection.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Opcode {
    /// Return the device's identity and limits ([`IdentifyReply`]).
    Identify = 0x0001,
    /// Reply at once and post an [`super::event::EventKind::Ping`] event
    /// carrying the command's cookie ([`PingCmd`], [`PingReply`]).
    Ping = 0x0002,
}

impl Opcode {
    /// Every opcode, for tables and tests.
    pub const ALL: [Opcode; 2] = [Opcode::Identify, Opcode::Ping];

    /// The opcode with this number, if any.
    pub const fn from_u32(v: u32) -> Option<Opcode> {
        match v {
            0x0001 => Some(Opcode::Identify),
            0x0002 => Some(Opcode::Ping),
            _ => None,
        }
    }

    /// The exact size of this opcode's command, header included.
    pub const fn command_size(self) -> usize {
        match self {
            Opcode::Identify => core::mem::size_of::<CommandHeader>(),
            Opcode::Ping => core::mem::size_of::<PingCmd>(),
        }
    }

    /// The size of this opcode's successful reply, header included.
    pub const fn reply_size(self) -> usize {
        match self {
            Opcode::Identify => core::mem::size_of::<IdentifyReply>(),
            Opcode::Ping => core::mem::size_of::<PingReply>(),
        }
    }

    /// A short upper-case name.
    pub const fn name(self) -> &'static str {
        match self {
            Opcode::Identify => "IDENTIFY",
            Opcode::Ping => "PING",
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
        }
    }
}

/// Bit `i` of [`IdentifyReply::engine_mask`]: engine `i` is present.
pub mod engine {
    /// Copy / DMA engine.
    pub const COPY: u32 = 0;
    /// Compute engine.
    pub const COMPUTE: u32 = 1;
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
        /// GPU virtual address width in bits.
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
        /// Zero.
        pub reserved: [u32; 4],
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

/// A decoded, validated control command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    /// `IDENTIFY`.
    Identify,
    /// `PING` with its cookie.
    Ping {
        /// The cookie to echo.
        cookie: u64,
    },
}

impl Command {
    /// Decodes a command from bytes already copied out of guest memory.
    /// Returns the header (if there was one) alongside the result so that
    /// errors can still echo opcode and tag.
    pub fn decode(bytes: &[u8]) -> (Option<CommandHeader>, Result<Command, DecodeError>) {
        let Some(hdr) = CommandHeader::read_from(bytes) else {
            return (None, Err(DecodeError::NoHeader));
        };
        if bytes.len() > MAX_COMMAND_SIZE {
            return (Some(hdr), Err(DecodeError::TooLarge));
        }
        let Some(op) = Opcode::from_u32(hdr.opcode) else {
            return (Some(hdr), Err(DecodeError::UnknownOpcode(hdr.opcode)));
        };
        let want = op.command_size();
        if bytes.len() < want {
            return (Some(hdr), Err(DecodeError::Truncated(op)));
        }
        if bytes.len() > want {
            return (Some(hdr), Err(DecodeError::Oversized(op)));
        }
        if hdr.flags != 0 {
            return (Some(hdr), Err(DecodeError::ReservedNonZero(op)));
        }
        let cmd = match op {
            Opcode::Identify => Command::Identify,
            Opcode::Ping => match PingCmd::read_from(bytes) {
                Some(c) => Command::Ping { cookie: c.cookie },
                None => return (Some(hdr), Err(DecodeError::Truncated(op))),
            },
        };
        (Some(hdr), Ok(cmd))
    }

    /// The command's opcode.
    pub const fn opcode(&self) -> Opcode {
        match self {
            Command::Identify => Opcode::Identify,
            Command::Ping { .. } => Opcode::Ping,
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
            Command::Identify => hdr.write_to(out),
            Command::Ping { cookie } => PingCmd { hdr, cookie }.write_to(out),
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
