//! The device capture: what the device froze of one context at the moment
//! something went wrong, as a self-describing binary file.
//!
//! The device takes a capture when a ring stops on a page fault or an
//! engine error (a trap, an uncorrectable memory error, a malformed packet),
//! when a driver declares a hang (`CAPTURE`, [`super::proto::Opcode`]), and
//! on demand from its control socket. A driver reads it in chunks with
//! `CAPTURE_READ` and embeds it in its devcoredump ([`super::coredump`]);
//! `vgpu-dump` decodes it and `vgpu-replay` rebuilds the context from it.
//!
//! # Layout
//!
//! ```text
//!  CaptureHeader (80 bytes)
//!  SectionHeader { kind, flags, size } + size bytes, padded to 8   × sections
//! ```
//!
//! | section | payload |
//! |---|---|
//! | `CONTEXT` | one [`CaptureContext`] |
//! | `RING` | one [`CaptureRing`] per ring of the context |
//! | `INFLIGHT` | one [`CaptureInFlight`]: the failing or in-flight packet of the captured engine's ring |
//! | `ERROR` | one [`super::event::EventRecord`]: the `FAULT` or `ENGINE_ERROR` the device reported (absent for hangs and on-demand captures) |
//! | `TLB` | [`CaptureTlbEntry`] × n: the context's entries in the engine's TLBs |
//! | `MAPPING` | [`CaptureMapping`] × n: the context's mapped VA ranges, from its page tables |
//! | `MEMORY` | one [`CaptureMemory`] then its bytes: guest memory as the engine saw it (rings, page tables, command buffers, operands, data) |
//! | `REGIONS` | [`CaptureRegion`] × n: guest RAM's layout |
//! | `EVENTS` | [`super::event::EventRecord`] × n: the events posted last, oldest first |
//! | `INJECT` | UTF-8 lines: the fault injector's seed, armed faults, log and poisoned pages |
//!
//! Every field is little-endian. Readers skip sections they do not know.
//! Nothing here allocates: [`Capture::parse`] checks the header and
//! [`Capture::sections`] walks the sections of a borrowed buffer.

use super::mmu::{level_index, Pte, PteKind, LEVELS, TABLE_SIZE};
use super::pod::{pod_struct, Pod};

/// `"VGPUCAP1"`: the first eight bytes.
pub const MAGIC: u64 = u64::from_le_bytes(*b"VGPUCAP1");
/// Format version.
pub const VERSION: u32 = 1;

/// Why a capture was taken.
pub mod reason {
    /// A driver declared a hang (`CAPTURE`).
    pub const HANG: u32 = 1;
    /// A page fault stopped the ring.
    pub const FAULT: u32 = 2;
    /// An engine error stopped the ring.
    pub const ENGINE_ERROR: u32 = 3;
    /// The device's control socket asked.
    pub const ON_DEMAND: u32 = 4;
    /// A driver asked for another reason (`CAPTURE`).
    pub const DRIVER: u32 = 5;

    /// The reason's name.
    pub const fn name(r: u32) -> &'static str {
        match r {
            HANG => "hang",
            FAULT => "fault",
            ENGINE_ERROR => "engine-error",
            ON_DEMAND => "on-demand",
            DRIVER => "driver",
            _ => "unknown",
        }
    }
}

/// Section kinds.
pub mod section {
    /// [`super::CaptureContext`].
    pub const CONTEXT: u32 = 1;
    /// [`super::CaptureRing`] (one section per ring).
    pub const RING: u32 = 2;
    /// [`super::CaptureInFlight`].
    pub const INFLIGHT: u32 = 3;
    /// One event record.
    pub const ERROR: u32 = 4;
    /// [`super::CaptureTlbEntry`] array.
    pub const TLB: u32 = 5;
    /// [`super::CaptureMemory`] and bytes.
    pub const MEMORY: u32 = 6;
    /// [`super::CaptureMapping`] array.
    pub const MAPPING: u32 = 7;
    /// [`super::CaptureRegion`] array.
    pub const REGIONS: u32 = 8;
    /// Event records.
    pub const EVENTS: u32 = 9;
    /// Injector text.
    pub const INJECT: u32 = 10;

    /// The section's name.
    pub const fn name(k: u32) -> &'static str {
        match k {
            CONTEXT => "context",
            RING => "ring",
            INFLIGHT => "inflight",
            ERROR => "error",
            TLB => "tlb",
            MEMORY => "memory",
            MAPPING => "mapping",
            REGIONS => "regions",
            EVENTS => "events",
            INJECT => "inject",
            _ => "unknown",
        }
    }
}

/// What a [`CaptureMemory`] range holds.
pub mod memory {
    /// A ring buffer.
    pub const RING: u32 = 1;
    /// A ring status block's page.
    pub const STATUS: u32 = 2;
    /// A page-table page.
    pub const TABLE: u32 = 3;
    /// A command buffer reached by `INDIRECT`.
    pub const CMDBUF: u32 = 4;
    /// What the failing packet reads or writes (copy source and
    /// destination, module, arguments, semaphore, fence).
    pub const OPERAND: u32 = 5;
    /// Other mapped memory of the context (what a kernel may read).
    pub const DATA: u32 = 6;

    /// The kind's name.
    pub const fn name(k: u32) -> &'static str {
        match k {
            RING => "ring",
            STATUS => "status",
            TABLE => "table",
            CMDBUF => "cmdbuf",
            OPERAND => "operand",
            DATA => "data",
            _ => "unknown",
        }
    }
}

/// [`CaptureHeader::flags`]: the memory budget ran out; some memory the job
/// reads is missing.
pub const FLAG_MEMORY_TRUNCATED: u32 = 1 << 0;
/// [`CaptureHeader::flags`]: the page-table walk limit was reached.
pub const FLAG_TABLES_TRUNCATED: u32 = 1 << 1;

/// [`CaptureRing::flags`]: a doorbell is latched that the engine has not
/// taken yet (`doorbell` holds it).
pub const RING_DOORBELL_PENDING: u32 = 1 << 0;
/// [`CaptureRing::flags`]: status-block writes are disabled (one faulted).
pub const RING_STATUS_BROKEN: u32 = 1 << 1;
/// [`CaptureRing::flags`]: the captured engine's ring.
pub const RING_CAPTURED: u32 = 1 << 2;
/// [`CaptureRing::flags`]: the ring was running on its engine when
/// captured: its pointers are as of its last time slice.
pub const RING_RUNNING: u32 = 1 << 3;

/// [`CaptureInFlight::state`]: no packet in progress (the failure came at
/// a packet's fetch or decode, before it started).
pub const INFLIGHT_NONE: u32 = 0;
/// [`CaptureInFlight::state`]: a packet was in progress.
pub const INFLIGHT_ACTIVE: u32 = 1;

/// [`CaptureTlbEntry::unit`] of the engine's own TLB (compute units count
/// from 0).
pub const TLB_ENGINE: u32 = u32::MAX;
/// [`CaptureTlbEntry::unit`] of the stale entry kept by fault injection.
pub const TLB_STALE: u32 = u32::MAX - 1;

/// [`CaptureMemory::va`] of memory not reached through a VA (page tables).
pub const NO_VA: u64 = u64::MAX;

pod_struct! {
    /// The file's header.
    pub struct CaptureHeader {
        /// [`MAGIC`].
        pub magic: u64,
        /// [`VERSION`].
        pub version: u32,
        /// `size_of::<CaptureHeader>()`.
        pub header_size: u32,
        /// Bytes of the whole capture.
        pub total_size: u64,
        /// Id (from 1) as `CAPTURE_READ` names it.
        pub capture_id: u32,
        /// [`reason`].
        pub reason: u32,
        /// Context captured.
        pub ctx_id: u32,
        /// Engine captured.
        pub engine: u32,
        /// Device generation.
        pub generation: u32,
        /// VA width.
        pub va_bits: u32,
        /// Compute units of the device.
        pub compute_units: u32,
        /// `FLAG_*`.
        pub flags: u32,
        /// Device time of the capture (ns).
        pub device_ns: u64,
        /// Host time spent taking the capture (ns).
        pub capture_ns: u64,
        /// Number of sections.
        pub sections: u32,
        /// Zero.
        pub reserved: u32,
    }

    /// A section's header.
    pub struct SectionHeader {
        /// [`section`] kind.
        pub kind: u32,
        /// Zero.
        pub flags: u32,
        /// Payload bytes (the payload is padded to 8 bytes).
        pub size: u64,
    }

    /// The context.
    pub struct CaptureContext {
        /// Id (ASID).
        pub ctx_id: u32,
        /// Priority.
        pub priority: u32,
        /// `CONTEXT_CREATE` flags.
        pub flags: u32,
        /// `CONTEXT_QUERY` state bits.
        pub state: u32,
        /// Page-table root (guest-physical).
        pub pt_root: u64,
        /// Faults since creation.
        pub faults: u64,
        /// Engine errors since creation.
        pub errors: u64,
        /// Packets executed.
        pub packets: u64,
        /// Time holding an engine (ns).
        pub busy_ns: u64,
        /// VA of the last fault.
        pub last_fault_va: u64,
        /// Resets that dropped its work.
        pub resets: u64,
    }

    /// One ring of the context, as the device holds it.
    pub struct CaptureRing {
        /// Engine.
        pub engine: u32,
        /// Size in bytes.
        pub size: u32,
        /// Ring GPU VA.
        pub va: u64,
        /// Status block GPU VA.
        pub status_va: u64,
        /// Accepted write pointer.
        pub wptr: u32,
        /// Read pointer: the ring-level packet in progress or next.
        pub rptr: u32,
        /// `ring_state` as the status block reports it.
        pub state: u32,
        /// Engine error that stopped it, or 0.
        pub error: u32,
        /// `rptr` of the packet that stopped it.
        pub error_rptr: u32,
        /// `INDIRECT` depth.
        pub depth: u32,
        /// The latched doorbell (with [`RING_DOORBELL_PENDING`]).
        pub doorbell: u32,
        /// `RING_*` flags.
        pub flags: u32,
        /// Seqno of the last `FENCE` executed.
        pub last_fence: u64,
        /// Packets executed on the ring.
        pub packets: u64,
        /// Id of the fault it is stalled on, or 0.
        pub fault_id: u64,
        /// `INDIRECT` buffers being executed, outermost first: VA.
        pub frame_va: [u64; 4],
        /// Their sizes.
        pub frame_size: [u32; 4],
        /// Their next-packet offsets.
        pub frame_offset: [u32; 4],
        /// The status block as read from guest memory (zero if unreadable).
        pub status_mem: [u64; 8],
    }

    /// The failing packet of the captured ring, and the operation in
    /// progress if any.
    pub struct CaptureInFlight {
        /// Engine.
        pub engine: u32,
        /// Context.
        pub ctx_id: u32,
        /// GPU VA of the failing (or in-flight) packet's header.
        pub packet_va: u64,
        /// `INFLIGHT_*`.
        pub state: u32,
        /// Its header word (0 if none was read).
        pub header: u32,
        /// Its length in words.
        pub words: u32,
        /// Its opcode.
        pub opcode: u32,
        /// `INDIRECT` depth it executes at.
        pub depth: u32,
        /// Ring read pointer (of the ring-level packet).
        pub rptr: u32,
        /// Device time it started (when tracing), or 0.
        pub started_ns: u64,
        /// The operation as the command processor holds it, encoded back
        /// into packet words for the device's generation (`words` valid).
        pub packet: [u32; 16],
        /// Progress: copy `done`/`size` (or 2D `row`/`col`/`height`/`width`,
        /// fill `done`/`size`), dispatch workgroups started/total.
        pub progress: [u64; 4],
    }

    /// One TLB entry of the context.
    pub struct CaptureTlbEntry {
        /// First VA of the page.
        pub va_base: u64,
        /// First guest-physical address.
        pub pa_base: u64,
        /// log2 of the page size.
        pub shift: u32,
        /// `PTE_READ | PTE_WRITE | PTE_EXEC` bits.
        pub perms: u32,
        /// Cache policy.
        pub cache: u32,
        /// [`TLB_ENGINE`], [`TLB_STALE`] or the compute unit.
        pub unit: u32,
    }

    /// A range of guest memory; `size` bytes follow.
    pub struct CaptureMemory {
        /// Guest-physical address.
        pub pa: u64,
        /// A GPU VA that maps `pa` in the context, or [`NO_VA`].
        pub va: u64,
        /// Bytes that follow.
        pub size: u64,
        /// [`memory`] kind.
        pub what: u32,
        /// Zero.
        pub reserved: u32,
    }

    /// A mapped VA range: consecutive pages with the same permissions and
    /// consecutive physical addresses.
    pub struct CaptureMapping {
        /// First VA.
        pub va: u64,
        /// First guest-physical address.
        pub pa: u64,
        /// Bytes.
        pub size: u64,
        /// Leaf permission bits (`PTE_READ | PTE_WRITE | PTE_EXEC`) | cache
        /// policy << 8.
        pub perms: u32,
        /// Leaf level: 0 (4 KiB pages) or 1 (2 MiB pages).
        pub level: u32,
    }

    /// A guest RAM region.
    pub struct CaptureRegion {
        /// Guest-physical start.
        pub pa: u64,
        /// Bytes.
        pub size: u64,
    }
}

/// Why a buffer is not a capture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CaptureError {
    /// Shorter than a header.
    Short,
    /// Wrong magic.
    Magic,
    /// A version this reader does not know.
    Version(u32),
    /// The header's size disagrees with the buffer.
    Size,
}

impl CaptureError {
    /// A short description.
    pub const fn name(self) -> &'static str {
        match self {
            CaptureError::Short => "shorter than a capture header",
            CaptureError::Magic => "not a vgpu capture (magic)",
            CaptureError::Version(_) => "unknown capture version",
            CaptureError::Size => "size in the header disagrees with the data",
        }
    }
}

/// One section of a capture.
#[derive(Clone, Copy, Debug)]
pub struct Section<'a> {
    /// [`section`] kind.
    pub kind: u32,
    /// Its payload.
    pub data: &'a [u8],
}

impl<'a> Section<'a> {
    /// The payload as an array of `T`.
    pub fn records<T: Pod + 'a>(&self) -> impl Iterator<Item = T> + 'a {
        let data = self.data;
        data.chunks_exact(core::mem::size_of::<T>())
            .filter_map(T::read_from)
    }

    /// The payload as one `T`.
    pub fn one<T: Pod>(&self) -> Option<T> {
        T::read_from(self.data)
    }

    /// A `MEMORY` section's range and bytes.
    pub fn memory(&self) -> Option<(CaptureMemory, &'a [u8])> {
        let m = CaptureMemory::read_from(self.data)?;
        let start = core::mem::size_of::<CaptureMemory>();
        let end = start.checked_add(usize::try_from(m.size).ok()?)?;
        Some((m, self.data.get(start..end)?))
    }
}

/// A parsed capture over borrowed bytes.
#[derive(Clone, Copy, Debug)]
pub struct Capture<'a> {
    /// The header.
    pub header: CaptureHeader,
    bytes: &'a [u8],
}

/// Bytes `n` rounded up to 8.
pub const fn pad8(n: usize) -> usize {
    (n + 7) & !7
}

impl<'a> Capture<'a> {
    /// Checks the header of `bytes`.
    pub fn parse(bytes: &'a [u8]) -> Result<Capture<'a>, CaptureError> {
        let header = CaptureHeader::read_from(bytes).ok_or(CaptureError::Short)?;
        if header.magic != MAGIC {
            return Err(CaptureError::Magic);
        }
        if header.version != VERSION {
            return Err(CaptureError::Version(header.version));
        }
        if header.header_size as usize != core::mem::size_of::<CaptureHeader>()
            || header.total_size != bytes.len() as u64
        {
            return Err(CaptureError::Size);
        }
        Ok(Capture { header, bytes })
    }

    /// The capture's bytes.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Every section, in order (a truncated last section ends the walk).
    pub fn sections(&self) -> impl Iterator<Item = Section<'a>> + 'a {
        let bytes = self.bytes;
        let mut at = core::mem::size_of::<CaptureHeader>();
        core::iter::from_fn(move || {
            let h = SectionHeader::read_from(bytes.get(at..)?)?;
            let start = at.checked_add(core::mem::size_of::<SectionHeader>())?;
            let len = usize::try_from(h.size).ok()?;
            let data = bytes.get(start..start.checked_add(len)?)?;
            at = start.checked_add(pad8(len))?;
            Some(Section { kind: h.kind, data })
        })
    }

    /// The sections of `kind`.
    pub fn of(&self, kind: u32) -> impl Iterator<Item = Section<'a>> + 'a {
        self.sections().filter(move |s| s.kind == kind)
    }

    /// The first section of `kind`.
    pub fn first(&self, kind: u32) -> Option<Section<'a>> {
        self.of(kind).next()
    }

    /// Reads `out.len()` bytes at guest-physical `pa` from the captured
    /// memory; false if any byte was not captured.
    pub fn read_pa(&self, pa: u64, out: &mut [u8]) -> bool {
        let mut filled = 0usize;
        while filled < out.len() {
            let want = pa.wrapping_add(filled as u64);
            let hit = self.of(section::MEMORY).find_map(|s| {
                let (m, data) = s.memory()?;
                let off = want.checked_sub(m.pa)?;
                (off < m.size).then_some((data, off as usize))
            });
            let Some((data, off)) = hit else {
                return false;
            };
            let Some(src) = data.get(off..) else {
                return false;
            };
            let n = src.len().min(out.len() - filled);
            if let (Some(d), Some(s)) = (out.get_mut(filled..filled + n), src.get(..n)) {
                d.copy_from_slice(s);
            }
            filled += n;
        }
        true
    }

    /// The 64-bit value at guest-physical `pa`, if captured.
    pub fn read_u64(&self, pa: u64) -> Option<u64> {
        let mut b = [0u8; 8];
        self.read_pa(pa, &mut b).then(|| u64::from_le_bytes(b))
    }

    /// The page-table walk of `va` from `root` over the captured tables,
    /// level by level (see [`walk`]).
    pub fn walk(&self, root: u64, va: u64, va_bits: u32) -> Walk {
        walk(|pa| self.read_u64(pa), root, va, va_bits)
    }
}

/// One level of a page-table walk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WalkStep {
    /// Level (3 = root).
    pub level: u32,
    /// Guest-physical address of the table.
    pub table: u64,
    /// Index of the entry in it.
    pub index: usize,
    /// The entry, if it could be read.
    pub pte: Option<Pte>,
}

/// How a walk ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WalkEnd {
    /// A leaf: page address and size shift.
    Leaf {
        /// Page's guest-physical address.
        page: u64,
        /// log2 of its size.
        shift: u32,
        /// Its permission bits.
        perms: u64,
    },
    /// The entry at the last step is invalid for this reason.
    Fault(super::mmu::FaultReason),
    /// The VA is wider than the address space.
    OutOfRange,
    /// A table was not captured (its entry is unknown).
    Unknown,
}

/// A walk: at most four steps and how it ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Walk {
    /// The steps, root first (`len` valid).
    pub steps: [WalkStep; LEVELS as usize],
    /// Valid steps.
    pub len: usize,
    /// The end.
    pub end: WalkEnd,
}

/// Walks `va` from `root` as the device does, reading entries through
/// `read` (guest-physical address → value), with every entry decoded by
/// [`Pte::decode`]. A table that reappears is a cycle (`MALFORMED`).
pub fn walk(read: impl Fn(u64) -> Option<u64>, root: u64, va: u64, va_bits: u32) -> Walk {
    let empty = WalkStep {
        level: 0,
        table: 0,
        index: 0,
        pte: None,
    };
    let mut w = Walk {
        steps: [empty; LEVELS as usize],
        len: 0,
        end: WalkEnd::Unknown,
    };
    if va_bits < 64 && va >> va_bits != 0 {
        w.end = WalkEnd::OutOfRange;
        return w;
    }
    let mut table = root;
    let mut level = LEVELS - 1;
    loop {
        let index = level_index(va, level);
        let pte = read(table.wrapping_add(8 * index as u64)).map(Pte::from_bits);
        if let Some(s) = w.steps.get_mut(w.len) {
            *s = WalkStep {
                level,
                table,
                index,
                pte,
            };
        }
        w.len += 1;
        let Some(pte) = pte else {
            w.end = WalkEnd::Unknown;
            return w;
        };
        match pte.decode(level) {
            Err(reason) => {
                w.end = WalkEnd::Fault(reason);
                return w;
            }
            Ok(PteKind::Table(next)) => {
                let seen = w.steps.iter().take(w.len).any(|s| s.table == next);
                if seen || level == 0 {
                    w.end = WalkEnd::Fault(super::mmu::FaultReason::Malformed);
                    return w;
                }
                table = next;
                level -= 1;
            }
            Ok(PteKind::Leaf(l)) => {
                w.end = WalkEnd::Leaf {
                    page: l.page,
                    shift: l.shift,
                    perms: l.perms,
                };
                return w;
            }
        }
    }
}

/// Entries per page table.
pub const TABLE_ENTRIES: usize = TABLE_SIZE as usize / 8;
