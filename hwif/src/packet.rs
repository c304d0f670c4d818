//! Ring and command-buffer packets.
//!
//! Work reaches an engine as a stream of packets: 32-bit little-endian words
//! in a ring buffer (and in command buffers the ring points to with
//! `INDIRECT`), all in guest memory and fetched through the context's GPU MMU.
//! A packet is one header word followed by its payload words; the header
//! gives the opcode and the packet's total length in words.
//!
//! # Header encoding (differs between generations)
//!
//! ```text
//! gen 1:  31      24 23                 8 7        0
//!        ┌──────────┬────────────────────┬──────────┐
//!        │ flags=0  │ length (words)     │ opcode   │
//!        └──────────┴────────────────────┴──────────┘
//! gen 2:  31  28 27 24 23      16 15                0
//!        ┌──────┬─────┬──────────┬──────────────────┐
//!        │ 0xA  │flags│ opcode   │ length (words)   │
//!        └──────┴─────┴──────────┴──────────────────┘
//! ```
//!
//! Flags must be zero. A gen-1 header read by a gen-2 engine (or the reverse)
//! is rejected as [`EngineError::BadHeader`] rather than misread.
//!
//! Gen 2 also requires the engine packets `COPY`, `COPY_2D` and `FILL` to
//! start at a 64-byte aligned GPU VA ([`GEN2_ENGINE_PACKET_ALIGN`]); drivers pad
//! with `NOP`s. A misaligned one is [`EngineError::Misaligned`].
//!
//! Packets may wrap around the end of a ring.

/// `NOP`, any length ≥ 1: skipped (padding).
pub const OP_NOP: u8 = 0x00;
/// `INDIRECT va:u64 size_bytes:u32`: execute the command buffer at `va`.
pub const OP_INDIRECT: u8 = 0x01;
/// `FENCE va:u64 seqno:u64 flags:u32`: write `seqno` (8 bytes) at `va` once
/// all earlier work on this ring is complete, then post a `FENCE` event unless
/// [`FENCE_NO_EVENT`] is set.
pub const OP_FENCE: u8 = 0x02;
/// `SEM_WAIT va:u64 value:u64 op:u32`: stall this ring until the 64-bit
/// value at `va` satisfies `op` against `value` ([`SEM_WAIT_GEQ`],
/// [`SEM_WAIT_EQ`], [`SEM_WAIT_NEQ`]). Other contexts keep the engine.
pub const OP_SEM_WAIT: u8 = 0x03;
/// `SEM_SIGNAL va:u64 value:u64 op:u32`: write ([`SEM_SIGNAL_WRITE`]) or
/// atomically add ([`SEM_SIGNAL_ADD`]) `value` at `va`.
pub const OP_SEM_SIGNAL: u8 = 0x04;
/// `TIMESTAMP va:u64`: write the device clock (ns, 8 bytes) at `va`.
pub const OP_TIMESTAMP: u8 = 0x05;
/// `COPY src:u64 dst:u64 size:u64` (copy engine): linear copy.
pub const OP_COPY: u8 = 0x10;
/// `COPY_2D src:u64 dst:u64 src_pitch:u32 dst_pitch:u32 width:u32
/// height:u32` (copy engine): `height` rows of `width` bytes.
pub const OP_COPY_2D: u8 = 0x11;
/// `FILL dst:u64 size:u64 pattern:u32` (copy engine): repeat the 4-byte
/// little-endian `pattern` over `size` bytes (a partial last word gets its
/// first bytes).
pub const OP_FILL: u8 = 0x12;
/// `DISPATCH module_va:u64 module_size:u32 kernel:u32 args_va:u64
/// args_size:u32 grid_x:u32 grid_y:u32 grid_z:u32 wg_x:u32 wg_y:u32 wg_z:u32
/// shared_size:u32` (compute engine): run kernel number `kernel` of the
/// module image (the `vgpu-as` container format, see docs/isa.md) at
/// `module_va` over `grid` workgroups of `wg` threads, with the argument
/// buffer at `args_va`. The module is fetched with execute access, the
/// arguments with read access; each workgroup gets
/// `max(shared_size, the kernel's declared size)` bytes of shared memory.
pub const OP_DISPATCH: u8 = 0x20;
/// Largest module image a `DISPATCH` may name, in bytes.
pub const MAX_MODULE_SIZE: u32 = 1 << 20;
/// Largest `DISPATCH` argument buffer, in bytes.
pub const MAX_ARGS_SIZE: u32 = 4096;
/// Largest `DISPATCH` shared-memory size per workgroup, in bytes.
pub const MAX_SHARED_SIZE: u32 = 64 * 1024;
/// Most threads in one workgroup.
pub const MAX_WORKGROUP_THREADS: u32 = 1024;

/// `FENCE` flag: write the value but post no event.
pub const FENCE_NO_EVENT: u32 = 1 << 0;
/// `SEM_WAIT` op: value at va ≥ operand (unsigned).
pub const SEM_WAIT_GEQ: u32 = 0;
/// `SEM_WAIT` op: value at va = operand.
pub const SEM_WAIT_EQ: u32 = 1;
/// `SEM_WAIT` op: value at va ≠ operand.
pub const SEM_WAIT_NEQ: u32 = 2;
/// `SEM_SIGNAL` op: store the operand.
pub const SEM_SIGNAL_WRITE: u32 = 0;
/// `SEM_SIGNAL` op: atomically add the operand.
pub const SEM_SIGNAL_ADD: u32 = 1;

/// Longest packet in words (a `NOP` may be this long).
pub const MAX_PACKET_WORDS: u32 = 1024;
/// Largest command buffer an `INDIRECT` may name, in bytes.
pub const MAX_INDIRECT_SIZE: u32 = 1 << 20;
/// Deepest `INDIRECT` nesting: the ring is depth 0, its command buffers 1 …
pub const MAX_INDIRECT_DEPTH: u32 = 4;
/// Largest `COPY` / `FILL` size, and largest `COPY_2D` total, in bytes.
pub const MAX_TRANSFER_SIZE: u64 = 1 << 32;
/// Gen 2: alignment of `COPY`, `COPY_2D` and `FILL` packets, in bytes.
pub const GEN2_ENGINE_PACKET_ALIGN: u64 = 64;
/// Gen 2 header marker in bits 31..28.
pub const GEN2_MARKER: u32 = 0xA;

/// Why an engine stopped a ring (reported in `ENGINE_ERROR` events).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EngineError {
    /// Header not valid for this generation (marker, flags) or length 0.
    BadHeader = 1,
    /// Unknown opcode.
    BadOpcode = 2,
    /// Length wrong for the opcode, or longer than [`MAX_PACKET_WORDS`].
    BadLength = 3,
    /// Gen 2 engine packet not 64-byte aligned, or an address operand not
    /// naturally aligned (fences, semaphores, timestamps need 8 bytes).
    Misaligned = 4,
    /// Opcode not executable by this engine (e.g. `COPY` on compute).
    WrongEngine = 5,
    /// Operand out of range: zero or oversized sizes, bad semaphore op,
    /// `INDIRECT` size not a multiple of 4 or above [`MAX_INDIRECT_SIZE`].
    BadOperand = 6,
    /// `INDIRECT` nested deeper than [`MAX_INDIRECT_DEPTH`].
    IndirectDepth = 7,
    /// The doorbell's write pointer is more than a ring size ahead of the
    /// read pointer.
    RingOverflow = 8,
    /// The doorbell's write pointer is behind the read pointer or not a
    /// multiple of 4.
    BadPointer = 9,
    /// A packet runs past the end of its command buffer, or (in a ring)
    /// past the write pointer the last doorbell published.
    Truncated = 10,
    /// Reserved opcode not implemented by this device.
    Unsupported = 11,
    /// A compute kernel executed `TRAP`.
    Trap = 12,
    /// A page fault stopped the ring: a fault of a context without
    /// replayable faults, or a replayable fault answered with
    /// `FAULT_RESUME` abort. Only the ring status block carries this code;
    /// the `FAULT` event describes the fault.
    PageFault = 13,
    /// An engine read (copy source, kernel load or atomic, packet or module
    /// fetch) touched a page with an uncorrectable ECC error (poisoned):
    /// the data is not returned and the ring stops.
    EccUncorrectable = 14,
    /// The device failed internally while executing the ring's packet (a
    /// device bug, not a property of the packet): what the packet did is
    /// unspecified and the ring stops. The engine reinitialised itself
    /// (work in progress dropped, TLBs flushed) and serves other rings.
    Internal = 15,
    /// The driver sanitizer stopped the ring on a finding
    /// (`vgpu-device --sanitize-mode stop`; see [`super::sanitize`]).
    Sanitizer = 16,
    /// The ring's watched doorbell block (`DOORBELL_WATCH`) could not be
    /// read or written through the context's page tables: not mapped, not
    /// writable, or outside RAM. The event's packet VA is the block's VA;
    /// the device stops watching it.
    DoorbellFault = 17,
}

impl EngineError {
    /// The error with this number, if any.
    pub const fn from_u32(v: u32) -> Option<EngineError> {
        Some(match v {
            1 => EngineError::BadHeader,
            2 => EngineError::BadOpcode,
            3 => EngineError::BadLength,
            4 => EngineError::Misaligned,
            5 => EngineError::WrongEngine,
            6 => EngineError::BadOperand,
            7 => EngineError::IndirectDepth,
            8 => EngineError::RingOverflow,
            9 => EngineError::BadPointer,
            10 => EngineError::Truncated,
            11 => EngineError::Unsupported,
            12 => EngineError::Trap,
            13 => EngineError::PageFault,
            14 => EngineError::EccUncorrectable,
            15 => EngineError::Internal,
            16 => EngineError::Sanitizer,
            17 => EngineError::DoorbellFault,
            _ => return None,
        })
    }

    /// A short upper-case name.
    pub const fn name(self) -> &'static str {
        match self {
            EngineError::BadHeader => "BAD_HEADER",
            EngineError::BadOpcode => "BAD_OPCODE",
            EngineError::BadLength => "BAD_LENGTH",
            EngineError::Misaligned => "MISALIGNED",
            EngineError::WrongEngine => "WRONG_ENGINE",
            EngineError::BadOperand => "BAD_OPERAND",
            EngineError::IndirectDepth => "INDIRECT_DEPTH",
            EngineError::RingOverflow => "RING_OVERFLOW",
            EngineError::BadPointer => "BAD_POINTER",
            EngineError::Truncated => "TRUNCATED",
            EngineError::Unsupported => "UNSUPPORTED",
            EngineError::Trap => "TRAP",
            EngineError::PageFault => "PAGE_FAULT",
            EngineError::EccUncorrectable => "ECC_UNCORRECTABLE",
            EngineError::Internal => "INTERNAL",
            EngineError::Sanitizer => "SANITIZER",
            EngineError::DoorbellFault => "DOORBELL_FAULT",
        }
    }
}

/// The name of opcode `opcode` as traces, dumps, logs and fault-injection
/// filters spell it (`COPY_2D`), or `"UNKNOWN"` for an opcode this
/// interface does not define.
pub const fn opcode_name(opcode: u8) -> &'static str {
    match opcode {
        OP_NOP => "NOP",
        OP_INDIRECT => "INDIRECT",
        OP_FENCE => "FENCE",
        OP_SEM_WAIT => "SEM_WAIT",
        OP_SEM_SIGNAL => "SEM_SIGNAL",
        OP_TIMESTAMP => "TIMESTAMP",
        OP_COPY => "COPY",
        OP_COPY_2D => "COPY_2D",
        OP_FILL => "FILL",
        OP_DISPATCH => "DISPATCH",
        _ => "UNKNOWN",
    }
}

/// Every opcode this interface defines, in numeric order.
pub const OPCODES: [u8; 10] = [
    OP_NOP,
    OP_INDIRECT,
    OP_FENCE,
    OP_SEM_WAIT,
    OP_SEM_SIGNAL,
    OP_TIMESTAMP,
    OP_COPY,
    OP_COPY_2D,
    OP_FILL,
    OP_DISPATCH,
];

/// A decoded packet header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Opcode.
    pub opcode: u8,
    /// Total length in words, header included (≥ 1).
    pub words: u32,
}

/// Encodes a header for `generation`.
pub const fn encode_header(generation: u32, opcode: u8, words: u32) -> u32 {
    if generation >= 2 {
        (GEN2_MARKER << 28) | ((opcode as u32) << 16) | (words & 0xffff)
    } else {
        ((words & 0xffff) << 8) | opcode as u32
    }
}

/// Decodes a header word for `generation`.
pub const fn decode_header(generation: u32, word: u32) -> Result<Header, EngineError> {
    let (opcode, words) = if generation >= 2 {
        if word >> 28 != GEN2_MARKER || (word >> 24) & 0xf != 0 {
            return Err(EngineError::BadHeader);
        }
        (((word >> 16) & 0xff) as u8, word & 0xffff)
    } else {
        if word >> 24 != 0 {
            return Err(EngineError::BadHeader);
        }
        ((word & 0xff) as u8, (word >> 8) & 0xffff)
    };
    if words == 0 {
        return Err(EngineError::BadHeader);
    }
    if words > MAX_PACKET_WORDS {
        return Err(EngineError::BadLength);
    }
    Ok(Header { opcode, words })
}

/// A decoded, validated packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Packet {
    /// `NOP` of `words` words.
    Nop {
        /// Total length in words.
        words: u32,
    },
    /// `INDIRECT`.
    Indirect {
        /// Command buffer GPU VA (4-byte aligned).
        va: u64,
        /// Size in bytes (multiple of 4, ≤ [`MAX_INDIRECT_SIZE`]).
        size: u32,
    },
    /// `FENCE`.
    Fence {
        /// Where to write the seqno (8-byte aligned).
        va: u64,
        /// The value.
        seqno: u64,
        /// [`FENCE_NO_EVENT`] or 0.
        flags: u32,
    },
    /// `SEM_WAIT`.
    SemWait {
        /// Semaphore address (8-byte aligned).
        va: u64,
        /// Operand.
        value: u64,
        /// `SEM_WAIT_*`.
        op: u32,
    },
    /// `SEM_SIGNAL`.
    SemSignal {
        /// Semaphore address (8-byte aligned).
        va: u64,
        /// Operand.
        value: u64,
        /// `SEM_SIGNAL_*`.
        op: u32,
    },
    /// `TIMESTAMP`.
    Timestamp {
        /// Where to write the time (8-byte aligned).
        va: u64,
    },
    /// `COPY`.
    Copy {
        /// Source VA.
        src: u64,
        /// Destination VA.
        dst: u64,
        /// Bytes (1..=[`MAX_TRANSFER_SIZE`]).
        size: u64,
    },
    /// `COPY_2D`.
    Copy2d(Copy2dPacket),
    /// `FILL`.
    Fill {
        /// Destination VA.
        dst: u64,
        /// Bytes (1..=[`MAX_TRANSFER_SIZE`]).
        size: u64,
        /// 4-byte pattern.
        pattern: u32,
    },
    /// `DISPATCH`.
    Dispatch(DispatchPacket),
}

/// The operands of a `COPY_2D` packet ([`OP_COPY_2D`]): `height` rows of
/// `width` bytes, decoded and validated in one place
/// ([`Copy2dPacket::decode`]) for the device, the drivers and the tools.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Copy2dPacket {
    /// Source VA of the first row.
    pub src: u64,
    /// Destination VA of the first row.
    pub dst: u64,
    /// Bytes between source rows (≥ width).
    pub src_pitch: u32,
    /// Bytes between destination rows (≥ width).
    pub dst_pitch: u32,
    /// Bytes per row (≥ 1).
    pub width: u32,
    /// Rows (≥ 1).
    pub height: u32,
}

/// Payload words of a `COPY_2D` packet (header excluded).
pub const COPY_2D_PAYLOAD_WORDS: usize = 8;

impl Copy2dPacket {
    /// Decodes and validates the payload words of a `COPY_2D` (the words
    /// after the header; exactly [`COPY_2D_PAYLOAD_WORDS`]).
    ///
    /// # Errors
    ///
    /// [`EngineError::BadLength`] for a payload of another length,
    /// [`EngineError::BadOperand`] for operands out of range (see
    /// [`Copy2dPacket::validate`]).
    pub fn decode(payload: &[u32]) -> Result<Copy2dPacket, EngineError> {
        let Ok(w) = <&[u32; COPY_2D_PAYLOAD_WORDS]>::try_from(payload) else {
            return Err(EngineError::BadLength);
        };
        let p = Copy2dPacket {
            src: u64_at(w, 0),
            dst: u64_at(w, 2),
            src_pitch: w[4],
            dst_pitch: w[5],
            width: w[6],
            height: w[7],
        };
        p.validate()?;
        Ok(p)
    }

    /// Checks the operands: width and height ≥ 1, both pitches ≥ width,
    /// at most [`MAX_TRANSFER_SIZE`] bytes in all
    /// ([`EngineError::BadOperand`]).
    ///
    /// # Errors
    ///
    /// As listed above.
    pub const fn validate(&self) -> Result<(), EngineError> {
        if self.width == 0
            || self.height == 0
            || self.src_pitch < self.width
            || self.dst_pitch < self.width
            || self.total() > MAX_TRANSFER_SIZE
        {
            return Err(EngineError::BadOperand);
        }
        Ok(())
    }

    /// Bytes the copy moves: `width * height`.
    pub const fn total(&self) -> u64 {
        self.width as u64 * self.height as u64
    }

    /// The payload words (header excluded).
    pub const fn payload(&self) -> [u32; COPY_2D_PAYLOAD_WORDS] {
        [
            self.src as u32,
            (self.src >> 32) as u32,
            self.dst as u32,
            (self.dst >> 32) as u32,
            self.src_pitch,
            self.dst_pitch,
            self.width,
            self.height,
        ]
    }
}

/// The operands of a `DISPATCH` packet ([`OP_DISPATCH`]), decoded and
/// validated in one place ([`DispatchPacket::decode`]) for the device, the
/// drivers and the tools.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DispatchPacket {
    /// GPU VA of the module image (4-byte aligned); fetched with execute
    /// access.
    pub module_va: u64,
    /// Module image size in bytes (1..=[`MAX_MODULE_SIZE`]).
    pub module_size: u32,
    /// Index into the module's kernel table.
    pub kernel: u32,
    /// GPU VA of the argument buffer (4-byte aligned; ignored if
    /// `args_size` is 0); fetched with read access.
    pub args_va: u64,
    /// Argument bytes (0..=[`MAX_ARGS_SIZE`]).
    pub args_size: u32,
    /// Workgroups per dimension x, y, z (each ≥ 1).
    pub grid: [u32; 3],
    /// Threads per workgroup per dimension x, y, z (each ≥ 1, product ≤
    /// [`MAX_WORKGROUP_THREADS`]).
    pub wg: [u32; 3],
    /// Minimum shared memory per workgroup in bytes (≤
    /// [`MAX_SHARED_SIZE`]); the kernel's declared size if larger.
    pub shared_size: u32,
}

/// Payload words of a `DISPATCH` packet (header excluded).
pub const DISPATCH_PAYLOAD_WORDS: usize = 14;

/// The product of three dimensions, or `None` if it does not fit 64 bits.
pub const fn product3(d: [u32; 3]) -> Option<u64> {
    match (d[0] as u64).checked_mul(d[1] as u64) {
        Some(xy) => xy.checked_mul(d[2] as u64),
        None => None,
    }
}

impl DispatchPacket {
    /// Decodes and validates the payload words of a `DISPATCH` (the words
    /// after the header; exactly [`DISPATCH_PAYLOAD_WORDS`]).
    ///
    /// # Errors
    ///
    /// [`EngineError::BadLength`] for a payload of another length,
    /// [`EngineError::Misaligned`] for a module or argument VA that is not
    /// 4-byte aligned, [`EngineError::BadOperand`] for operands out of range
    /// (see [`DispatchPacket::validate`]).
    pub fn decode(payload: &[u32]) -> Result<DispatchPacket, EngineError> {
        let Ok(w) = <&[u32; DISPATCH_PAYLOAD_WORDS]>::try_from(payload) else {
            return Err(EngineError::BadLength);
        };
        let d = DispatchPacket {
            module_va: u64_at(w, 0),
            module_size: w[2],
            kernel: w[3],
            args_va: u64_at(w, 4),
            args_size: w[6],
            grid: [w[7], w[8], w[9]],
            wg: [w[10], w[11], w[12]],
            shared_size: w[13],
        };
        d.validate()?;
        Ok(d)
    }

    /// Checks the operands: module and argument VAs 4-byte aligned
    /// ([`EngineError::Misaligned`]); module size 1..=[`MAX_MODULE_SIZE`],
    /// argument size ≤ [`MAX_ARGS_SIZE`], every grid and workgroup
    /// dimension ≥ 1, at most [`MAX_WORKGROUP_THREADS`] threads per
    /// workgroup (the product computed without wrapping), shared size ≤
    /// [`MAX_SHARED_SIZE`] ([`EngineError::BadOperand`]).
    ///
    /// # Errors
    ///
    /// As listed above.
    pub const fn validate(&self) -> Result<(), EngineError> {
        if !self.module_va.is_multiple_of(4)
            || (self.args_size != 0 && !self.args_va.is_multiple_of(4))
        {
            return Err(EngineError::Misaligned);
        }
        let threads_ok = match self.workgroup_threads() {
            Some(t) => t <= MAX_WORKGROUP_THREADS as u64,
            None => false,
        };
        if self.module_size == 0
            || self.module_size > MAX_MODULE_SIZE
            || self.args_size > MAX_ARGS_SIZE
            || self.grid[0] == 0
            || self.grid[1] == 0
            || self.grid[2] == 0
            || self.wg[0] == 0
            || self.wg[1] == 0
            || self.wg[2] == 0
            || !threads_ok
            || self.shared_size > MAX_SHARED_SIZE
        {
            return Err(EngineError::BadOperand);
        }
        Ok(())
    }

    /// Threads per workgroup, or `None` if the product does not fit 64 bits.
    pub const fn workgroup_threads(&self) -> Option<u64> {
        product3(self.wg)
    }

    /// Workgroups in the grid, or `None` if the product does not fit 64
    /// bits (such a dispatch is refused when it is loaded).
    pub const fn workgroups(&self) -> Option<u64> {
        product3(self.grid)
    }

    /// The payload words (header excluded).
    pub const fn payload(&self) -> [u32; DISPATCH_PAYLOAD_WORDS] {
        [
            self.module_va as u32,
            (self.module_va >> 32) as u32,
            self.module_size,
            self.kernel,
            self.args_va as u32,
            (self.args_va >> 32) as u32,
            self.args_size,
            self.grid[0],
            self.grid[1],
            self.grid[2],
            self.wg[0],
            self.wg[1],
            self.wg[2],
            self.shared_size,
        ]
    }
}

/// Payload words (header excluded) of each fixed-length opcode.
pub const fn payload_words(opcode: u8) -> Option<u32> {
    match opcode {
        OP_INDIRECT => Some(3),
        OP_FENCE | OP_SEM_WAIT | OP_SEM_SIGNAL => Some(5),
        OP_TIMESTAMP => Some(2),
        OP_COPY => Some(6),
        OP_COPY_2D => Some(COPY_2D_PAYLOAD_WORDS as u32),
        OP_FILL => Some(5),
        OP_DISPATCH => Some(DISPATCH_PAYLOAD_WORDS as u32),
        _ => None,
    }
}

/// Whether `opcode` is an engine packet that gen 2 wants 64-byte aligned.
pub const fn is_copy_engine_packet(opcode: u8) -> bool {
    matches!(opcode, OP_COPY | OP_COPY_2D | OP_FILL)
}

const fn u64_at(w: &[u32], i: usize) -> u64 {
    (w[i] as u64) | ((w[i + 1] as u64) << 32)
}

impl Packet {
    /// Decodes a packet from its words (`words[0]` is the header, already
    /// decoded as `hdr`; `words.len() == hdr.words`). Checks lengths, operand
    /// ranges and natural alignment of address operands; engine suitability
    /// and gen-2 packet alignment are the engine's checks.
    pub fn decode(hdr: Header, words: &[u32]) -> Result<Packet, EngineError> {
        if words.len() != hdr.words as usize {
            return Err(EngineError::Truncated);
        }
        if hdr.opcode == OP_NOP {
            return Ok(Packet::Nop { words: hdr.words });
        }
        let Some(n) = payload_words(hdr.opcode) else {
            return Err(EngineError::BadOpcode);
        };
        if hdr.words != n + 1 {
            return Err(EngineError::BadLength);
        }
        let w = words;
        let aligned8 = |va: u64| va.is_multiple_of(8);
        let pkt = match hdr.opcode {
            OP_INDIRECT => {
                let va = u64_at(w, 1);
                let size = w[3];
                if !va.is_multiple_of(4) {
                    return Err(EngineError::Misaligned);
                }
                if size == 0 || !size.is_multiple_of(4) || size > MAX_INDIRECT_SIZE {
                    return Err(EngineError::BadOperand);
                }
                Packet::Indirect { va, size }
            }
            OP_FENCE => {
                let va = u64_at(w, 1);
                if !aligned8(va) {
                    return Err(EngineError::Misaligned);
                }
                if w[5] & !FENCE_NO_EVENT != 0 {
                    return Err(EngineError::BadOperand);
                }
                Packet::Fence {
                    va,
                    seqno: u64_at(w, 3),
                    flags: w[5],
                }
            }
            OP_SEM_WAIT | OP_SEM_SIGNAL => {
                let va = u64_at(w, 1);
                if !aligned8(va) {
                    return Err(EngineError::Misaligned);
                }
                let value = u64_at(w, 3);
                let op = w[5];
                if hdr.opcode == OP_SEM_WAIT {
                    if op > SEM_WAIT_NEQ {
                        return Err(EngineError::BadOperand);
                    }
                    Packet::SemWait { va, value, op }
                } else {
                    if op > SEM_SIGNAL_ADD {
                        return Err(EngineError::BadOperand);
                    }
                    Packet::SemSignal { va, value, op }
                }
            }
            OP_TIMESTAMP => {
                let va = u64_at(w, 1);
                if !aligned8(va) {
                    return Err(EngineError::Misaligned);
                }
                Packet::Timestamp { va }
            }
            OP_COPY => {
                let size = u64_at(w, 5);
                if size == 0 || size > MAX_TRANSFER_SIZE {
                    return Err(EngineError::BadOperand);
                }
                Packet::Copy {
                    src: u64_at(w, 1),
                    dst: u64_at(w, 3),
                    size,
                }
            }
            OP_COPY_2D => Packet::Copy2d(Copy2dPacket::decode(&w[1..])?),
            OP_FILL => {
                let size = u64_at(w, 3);
                if size == 0 || size > MAX_TRANSFER_SIZE {
                    return Err(EngineError::BadOperand);
                }
                Packet::Fill {
                    dst: u64_at(w, 1),
                    size,
                    pattern: w[5],
                }
            }
            OP_DISPATCH => Packet::Dispatch(DispatchPacket::decode(&w[1..])?),
            _ => return Err(EngineError::BadOpcode),
        };
        Ok(pkt)
    }

    /// The packet's opcode.
    pub const fn opcode(&self) -> u8 {
        match self {
            Packet::Nop { .. } => OP_NOP,
            Packet::Indirect { .. } => OP_INDIRECT,
            Packet::Fence { .. } => OP_FENCE,
            Packet::SemWait { .. } => OP_SEM_WAIT,
            Packet::SemSignal { .. } => OP_SEM_SIGNAL,
            Packet::Timestamp { .. } => OP_TIMESTAMP,
            Packet::Copy { .. } => OP_COPY,
            Packet::Copy2d { .. } => OP_COPY_2D,
            Packet::Fill { .. } => OP_FILL,
            Packet::Dispatch(_) => OP_DISPATCH,
        }
    }

    /// The packet's name ([`opcode_name`] of its opcode).
    pub const fn name(&self) -> &'static str {
        opcode_name(self.opcode())
    }

    /// The packet's length in words, header included: what
    /// [`Packet::encode`] writes.
    pub const fn words(&self) -> usize {
        match *self {
            Packet::Nop { words } => {
                if words == 0 {
                    1
                } else if words > MAX_PACKET_WORDS {
                    MAX_PACKET_WORDS as usize
                } else {
                    words as usize
                }
            }
            _ => match payload_words(self.opcode()) {
                Some(n) => 1 + n as usize,
                None => 1,
            },
        }
    }

    /// Encodes the packet for `generation` into the start of `out` (a ring
    /// or command buffer's words; no allocation, usable in the kernel);
    /// returns the number of words written ([`Packet::words`]), or `None`
    /// (nothing written) if `out` is shorter. A `NOP`'s length is clamped
    /// to 1..=[`MAX_PACKET_WORDS`] and its payload zeroed. Operands are not
    /// validated: [`Packet::decode`] refuses what the device would.
    pub fn encode(&self, generation: u32, out: &mut [u32]) -> Option<usize> {
        let lo = |v: u64| v as u32;
        let hi = |v: u64| (v >> 32) as u32;
        const N: usize = 1 + DISPATCH_PAYLOAD_WORDS;
        let mut buf = [0u32; N];
        // The payload after the header word.
        fn fill(buf: &mut [u32; N], payload: &[u32]) {
            for (b, w) in buf.iter_mut().skip(1).zip(payload) {
                *b = *w;
            }
        }
        let n: usize = match *self {
            Packet::Nop { .. } => {
                let words = self.words();
                let o = out.get_mut(..words)?;
                o.fill(0);
                o[0] = encode_header(generation, OP_NOP, words as u32);
                return Some(words);
            }
            Packet::Indirect { va, size } => {
                fill(&mut buf, &[lo(va), hi(va), size]);
                4
            }
            Packet::Fence { va, seqno, flags } => {
                fill(&mut buf, &[lo(va), hi(va), lo(seqno), hi(seqno), flags]);
                6
            }
            Packet::SemWait { va, value, op } | Packet::SemSignal { va, value, op } => {
                fill(&mut buf, &[lo(va), hi(va), lo(value), hi(value), op]);
                6
            }
            Packet::Timestamp { va } => {
                fill(&mut buf, &[lo(va), hi(va)]);
                3
            }
            Packet::Copy { src, dst, size } => {
                fill(
                    &mut buf,
                    &[lo(src), hi(src), lo(dst), hi(dst), lo(size), hi(size)],
                );
                7
            }
            Packet::Copy2d(p) => {
                fill(&mut buf, &p.payload());
                1 + COPY_2D_PAYLOAD_WORDS
            }
            Packet::Fill { dst, size, pattern } => {
                fill(&mut buf, &[lo(dst), hi(dst), lo(size), hi(size), pattern]);
                6
            }
            Packet::Dispatch(d) => {
                fill(&mut buf, &d.payload());
                N
            }
        };
        buf[0] = encode_header(generation, self.opcode(), n as u32);
        // Element by element rather than `copy_from_slice`: this file is
        // compiled into the kernel driver too, where a slice-length panic
        // path is best not generated at all.
        let out = out.get_mut(..n)?;
        for (o, w) in out.iter_mut().zip(buf.iter()) {
            *o = *w;
        }
        Some(n)
    }
}
