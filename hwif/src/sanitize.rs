//! The device-side driver sanitizer: its checks, the report it sends the
//! driver, and the commands a driver uses with it.
//!
//! With `vgpu-device --sanitize` the device checks the driver's side of the
//! hardware contract as it happens — every doorbell, page-table walk, TLB
//! hit, fence write, semaphore wait and DMA access — and reports each
//! broken rule as a [`SanReport`]: a check id ([`Check`]), the context,
//! engine, ring position and packet (its words, decoded by anyone with
//! [`super::packet::Packet::decode`]), the address and access, the prior
//! access it conflicts with, and check-specific details. Reports go to the
//! device log, a JSON-lines file, and the driver: an
//! [`super::event::EventKind::Sanitizer`] event names the report, and
//! [`super::proto::Opcode::SanReport`] fetches it whole.
//!
//! For [`Check::DmaUnowned`] and the page-table checks (`SAN-PT-*`) the
//! driver declares the guest-physical pages it owns as GPU memory with
//! [`super::proto::Opcode::SanMem`] (like an IOMMU's map and unmap), its
//! page tables as such ([`super::proto::SAN_MEM_OWN_TABLES`]). It does so
//! only when `IDENTIFY` reports [`super::proto::FEATURE_SAN_DMA`].

use super::pod::pod_struct;

/// A sanitizer check. The number is what reports and events carry; the
/// id ([`Check::id`]) is the stable name documented in docs/sanitizer.md.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Check {
    /// Ring words covered by a doorbell changed after it.
    RingUnpublished = 1,
    /// A write pointer backwards, misaligned, past the ring, not on a
    /// packet boundary, or overrunning unread packets.
    RingIndex = 2,
    /// A TLB hit whose page-table entry changed in memory and no
    /// invalidation covered it.
    TlbStale = 3,
    /// A page or page-table page reused before the invalidation covering
    /// its old mapping.
    TlbInvOrder = 4,
    /// A command buffer's pages unmapped or remapped while it executes.
    CmdbufUnmapped = 5,
    /// A fence slot written with a smaller value than before.
    FenceRegress = 6,
    /// Fence seqnos that wrapped or are about to.
    FenceWrap = 7,
    /// Two engines access overlapping memory, one writing, unordered.
    XengineHazard = 8,
    /// A `SEM_WAIT` nothing queued can satisfy, or a cycle of waits.
    WaitUnsatisfiable = 9,
    /// An engine access to a page the driver has not declared.
    DmaUnowned = 10,
    /// Doorbells on destroyed contexts or stopped rings, destroys with
    /// work in flight, event buffers not returned.
    Teardown = 11,
    /// A page-table entry above level 0 without its valid bit whose
    /// address names a page the driver declared as a page table.
    PtInvalidTable = 12,
    /// A page-table entry of a kind its level cannot hold: a 2 MiB leaf
    /// outside level 1, a leaf where a table entry belongs, a table
    /// pointer at level 0.
    PtLevel = 13,
    /// A 2 MiB leaf whose page is not 2 MiB aligned.
    PtAlign = 14,
    /// A valid page-table entry (table pointer or leaf) naming memory the
    /// driver has not declared or already gave back.
    PtUnowned = 15,
    /// `FW_STATUS` polled again sooner than
    /// [`super::firmware::FW_POLL_MIN_US`] while the firmware boots.
    FwPoll = 16,
}

/// Number of checks (the highest [`Check`] number).
pub const CHECKS: usize = 16;

impl Check {
    /// Every check, in number order.
    pub const ALL: [Check; CHECKS] = [
        Check::RingUnpublished,
        Check::RingIndex,
        Check::TlbStale,
        Check::TlbInvOrder,
        Check::CmdbufUnmapped,
        Check::FenceRegress,
        Check::FenceWrap,
        Check::XengineHazard,
        Check::WaitUnsatisfiable,
        Check::DmaUnowned,
        Check::Teardown,
        Check::PtInvalidTable,
        Check::PtLevel,
        Check::PtAlign,
        Check::PtUnowned,
        Check::FwPoll,
    ];

    /// The check with this number, if any.
    pub const fn from_u32(v: u32) -> Option<Check> {
        if v == 0 || v as usize > CHECKS {
            return None;
        }
        Some(Check::ALL[v as usize - 1])
    }

    /// Bit of this check in a check mask (`1 << (number - 1)`).
    pub const fn bit(self) -> u32 {
        1 << (self as u32 - 1)
    }

    /// The stable id, e.g. `SAN-TLB-STALE`.
    pub const fn id(self) -> &'static str {
        match self {
            Check::RingUnpublished => "SAN-RING-UNPUBLISHED",
            Check::RingIndex => "SAN-RING-INDEX",
            Check::TlbStale => "SAN-TLB-STALE",
            Check::TlbInvOrder => "SAN-TLB-INV-ORDER",
            Check::CmdbufUnmapped => "SAN-CMDBUF-UNMAPPED",
            Check::FenceRegress => "SAN-FENCE-REGRESS",
            Check::FenceWrap => "SAN-FENCE-WRAP",
            Check::XengineHazard => "SAN-XENGINE-HAZARD",
            Check::WaitUnsatisfiable => "SAN-WAIT-UNSATISFIABLE",
            Check::DmaUnowned => "SAN-DMA-UNOWNED",
            Check::Teardown => "SAN-TEARDOWN",
            Check::PtInvalidTable => "SAN-PT-INVALID-TABLE",
            Check::PtLevel => "SAN-PT-LEVEL",
            Check::PtAlign => "SAN-PT-ALIGN",
            Check::PtUnowned => "SAN-PT-UNOWNED",
            Check::FwPoll => "SAN-FW-POLL",
        }
    }

    /// The check whose id (case-insensitive, with or without the `SAN-`
    /// prefix) is `s`.
    pub fn from_id(s: &str) -> Option<Check> {
        let bare = |c: Check| &c.id()[4..];
        let s = s
            .strip_prefix("SAN-")
            .or_else(|| s.strip_prefix("san-"))
            .unwrap_or(s);
        Check::ALL
            .into_iter()
            .find(|&c| bare(c).eq_ignore_ascii_case(s))
    }

    /// The family the check belongs to (`--sanitize=FAMILY` selects all of
    /// a family's checks): `ring`, `tlb`, `fence`, `hazard`, `wait`, `dma`,
    /// `teardown`, `pt` or `firmware`.
    pub const fn family(self) -> &'static str {
        match self {
            Check::RingUnpublished | Check::RingIndex => "ring",
            Check::TlbStale | Check::TlbInvOrder | Check::CmdbufUnmapped => "tlb",
            Check::FenceRegress | Check::FenceWrap => "fence",
            Check::XengineHazard => "hazard",
            Check::WaitUnsatisfiable => "wait",
            Check::DmaUnowned => "dma",
            Check::Teardown => "teardown",
            Check::PtInvalidTable | Check::PtLevel | Check::PtAlign | Check::PtUnowned => "pt",
            Check::FwPoll => "firmware",
        }
    }

    /// What the check means, in one sentence.
    pub const fn meaning(self) -> &'static str {
        match self {
            Check::RingUnpublished => {
                "ring words covered by a doorbell changed after the doorbell: the driver rang before writing the packets, or without a write barrier"
            }
            Check::RingIndex => {
                "a doorbell's write pointer went backwards, was not a multiple of 4, ran past the ring, ended inside a packet, or overran packets the engine had not read"
            }
            Check::TlbStale => {
                "a TLB hit whose page-table entry changed in memory since it was cached, with no invalidation covering it"
            }
            Check::TlbInvOrder => {
                "a page (or page-table page) was unmapped and reused for another mapping before the TLB invalidation covering the old mapping completed"
            }
            Check::CmdbufUnmapped => {
                "a command buffer's pages were unmapped or remapped while the engine was executing it"
            }
            Check::FenceRegress => "a FENCE wrote a smaller value than the last one to the same slot",
            Check::FenceWrap => "fence seqnos wrapped around (or are about to)",
            Check::XengineHazard => {
                "the copy and the compute engine accessed overlapping memory, at least one writing, with no semaphore or fence ordering the two jobs"
            }
            Check::WaitUnsatisfiable => {
                "a SEM_WAIT that no queued work can satisfy, or a cycle of waits across rings"
            }
            Check::DmaUnowned => {
                "an engine read or wrote a guest-physical page the driver has not declared as GPU memory (or already gave back)"
            }
            Check::Teardown => {
                "a doorbell on a destroyed context or a stopped ring, a destroy with work in flight without FORCE, or event buffers not returned"
            }
            Check::PtInvalidTable => {
                "a page-table entry above level 0 has no valid bit but names a page the driver declared as a page table: the table was linked without its valid bit"
            }
            Check::PtLevel => {
                "a page-table entry holds what its level cannot: a 2 MiB leaf outside level 1, a leaf where a table entry belongs, or a table pointer at level 0"
            }
            Check::PtAlign => "a level-1 entry maps a 2 MiB page whose address is not 2 MiB aligned",
            Check::PtUnowned => {
                "a valid page-table entry points to a table or page the driver has not declared as GPU memory (or already gave back)"
            }
            Check::FwPoll => {
                "FW_STATUS was polled again less than 100 us after the previous poll while the firmware booted: the driver polls without sleeping"
            }
        }
    }

    /// How to fix it, in one sentence.
    pub const fn hint(self) -> &'static str {
        match self {
            Check::RingUnpublished => {
                "write every packet word, then a write barrier (wmb/dma_wmb), then DOORBELL; never publish words you will still change"
            }
            Check::RingIndex => {
                "publish whole packets: wptr = bytes written so far, a multiple of 4, never behind the last doorbell, never more than the ring size ahead of the status block's rptr"
            }
            Check::TlbStale => {
                "after changing or clearing a valid page-table entry, send TLB_INVALIDATE for the range and wait for its reply before the GPU may use it"
            }
            Check::TlbInvOrder => {
                "unmap, then TLB_INVALIDATE and wait for the reply, and only then free or reuse the page or the page table"
            }
            Check::CmdbufUnmapped => {
                "keep a command buffer mapped until the fence of the job that executes it has signalled"
            }
            Check::FenceRegress => {
                "give each fence slot one monotonically increasing seqno counter; reset it only with the context"
            }
            Check::FenceWrap => {
                "use 64-bit seqnos and compare them with wrapping arithmetic, or recreate the context before the counter wraps"
            }
            Check::XengineHazard => {
                "make the consumer wait for the producer: SEM_WAIT on the producer's FENCE or SEM_SIGNAL value (or wait on the CPU before submitting)"
            }
            Check::WaitUnsatisfiable => {
                "submit the job that signals the semaphore before (or with) the job that waits on it, and never wait on a value no queued FENCE or SEM_SIGNAL writes"
            }
            Check::DmaUnowned => {
                "keep pages pinned and declared while any mapping (and TLB entry) may reach them: unmap, invalidate, then release"
            }
            Check::Teardown => {
                "stop submitting to a stopped ring or destroyed context, wait for (or cancel with FORCE) in-flight work before destroying, and repost every event buffer"
            }
            Check::PtInvalidTable => {
                "link a new table with a complete table entry (Pte::table: address | VALID), and clear an entry by writing 0"
            }
            Check::PtLevel => {
                "levels 3 and 2 hold only table entries, level 1 a table entry or a 2 MiB leaf (HUGE), level 0 only 4 KiB leaves (READ/WRITE/EXEC, no HUGE): build each entry for the level it is written at"
            }
            Check::PtAlign => {
                "map a 2 MiB page only when its physical address is 2 MiB aligned (and contiguous); otherwise map it with a level-0 table of 4 KiB leaves"
            }
            Check::PtUnowned => {
                "point entries only at page tables and pages you own and have declared (SAN_MEM); clear the entry and invalidate before giving a table or page back"
            }
            Check::FwPoll => {
                "sleep at least 100 us between FW_STATUS polls (fsleep), with a deadline: the boot ROM answers polls on the processor that boots the image"
            }
        }
    }
}

/// Report flag: the offending ring was stopped (stop-the-ring mode).
pub const SAN_FLAG_STOPPED: u32 = 1 << 0;
/// Report flag: the `prior_*` fields describe a conflicting earlier access.
pub const SAN_FLAG_PRIOR: u32 = 1 << 1;
/// Report flag: the `packet` words are valid.
pub const SAN_FLAG_PACKET: u32 = 1 << 2;
/// Report flag: the `object*` fields name the object the accessed page
/// belonged to when the driver gave it back (tagged `SAN_MEM` declarations):
/// a use of a moved or freed object's old pages.
pub const SAN_FLAG_OBJECT: u32 = 1 << 3;
/// Report flag (with [`SAN_FLAG_OBJECT`]): the object moved since (it
/// declares pages under a newer generation, `object_pa_now` the first):
/// the mapping was not updated, or its TLB entry not invalidated, after the
/// move. Without it the object gave the pages back and declares none now
/// (freed or unmapped).
pub const SAN_FLAG_MOVED: u32 = 1 << 4;
/// Shift of the report's sub-kind in `flags` (bits 8..16, check-specific:
/// see docs/sanitizer.md).
pub const SAN_KIND_SHIFT: u32 = 8;

/// [`Check::RingIndex`] sub-kinds.
pub mod ring_index {
    /// The write pointer went backwards.
    pub const BACKWARDS: u32 = 1;
    /// The write pointer is not a multiple of 4.
    pub const MISALIGNED: u32 = 2;
    /// More bytes published than the ring holds.
    pub const PAST_RING: u32 = 3;
    /// The write pointer ends inside a packet.
    pub const MID_PACKET: u32 = 4;
    /// New packets were written over packets the engine had not read.
    pub const OVERRUN: u32 = 5;
}

/// [`Check::Teardown`] sub-kinds.
pub mod teardown {
    /// A doorbell for a context that does not exist (destroyed).
    pub const DOORBELL_DESTROYED: u32 = 1;
    /// A doorbell for a stopped ring.
    pub const DOORBELL_STOPPED: u32 = 2;
    /// `CONTEXT_DESTROY` without `FORCE` (or `RING_DESTROY`) while the
    /// ring had unexecuted packets.
    pub const DESTROY_BUSY: u32 = 3;
    /// Events waited for a driver buffer for too long.
    pub const EVENTS_STARVED: u32 = 4;
}

/// [`Check::PtInvalidTable`] sub-kinds: the evidence.
pub mod pt_invalid_table {
    /// The address is a page the driver declared as a page table.
    pub const DECLARED_TABLE: u32 = 1;
    /// The driver declares no page tables, and the entry is an address
    /// alone (no other bit set) of memory it declared.
    pub const BARE_ADDRESS: u32 = 2;
}

/// [`Check::PtLevel`] sub-kinds.
pub mod pt_level {
    /// A valid entry with HUGE outside level 1.
    pub const HUGE_OUTSIDE_L1: u32 = 1;
    /// A valid entry with leaf bits (READ, WRITE, EXEC, cache policy) at a
    /// table level (3, 2, or 1 without HUGE).
    pub const LEAF_AT_TABLE_LEVEL: u32 = 2;
    /// A valid level-0 entry with no permissions whose address is a
    /// declared page table: a table pointer one level too deep.
    pub const TABLE_AT_L0: u32 = 3;
}

/// [`Check::PtUnowned`] sub-kinds.
pub mod pt_unowned {
    /// A table entry naming an undeclared page.
    pub const TABLE: u32 = 1;
    /// A leaf naming an undeclared page.
    pub const LEAF: u32 = 2;
}

/// [`Check::WaitUnsatisfiable`] sub-kinds.
pub mod wait {
    /// Nothing queued writes the semaphore.
    pub const NOTHING_QUEUED: u32 = 1;
    /// The waits form a cycle.
    pub const CYCLE: u32 = 2;
}

/// Words of a packet a report carries (the longest packet, `DISPATCH`).
pub const SAN_PACKET_WORDS: usize = 15;
/// Doorbells a [`Check::RingIndex`] report lists.
pub const SAN_HISTORY: usize = 8;

pod_struct! {
    /// One sanitizer report (the payload of the `SAN_REPORT` reply).
    pub struct SanReport {
        /// [`Check`] number.
        pub check: u32,
        /// `SAN_FLAG_*`, and the sub-kind at [`SAN_KIND_SHIFT`].
        pub flags: u32,
        /// Report number: device-wide, from 1.
        pub seq: u64,
        /// Device time of the finding (the clock of event records).
        pub time_ns: u64,
        /// Context (`CTX_NONE` if none).
        pub ctx_id: u32,
        /// Engine (`engine::ALL` if none).
        pub engine: u32,
        /// Ring read pointer of the ring-level packet.
        pub rptr: u32,
        /// Indirect depth of the packet (0: the ring itself).
        pub depth: u32,
        /// GPU VA of the packet (0 if none).
        pub packet_va: u64,
        /// Byte offset of the packet in its ring (depth 0) or in the
        /// command buffer the ring's `INDIRECT` called (depth 1; for deeper
        /// packets, of the `INDIRECT` that leads to them).
        pub cmd_offset: u32,
        /// Valid words in `packet`.
        pub packet_len: u32,
        /// The packet's words as the engine fetched them (header first).
        pub packet: [u32; SAN_PACKET_WORDS],
        /// [`super::mmu::Access`] of the access (0: none).
        pub access: u32,
        /// GPU VA accessed (0: none).
        pub va: u64,
        /// Bytes accessed.
        pub size: u64,
        /// Guest-physical address accessed (0: unknown).
        pub pa: u64,
        /// Context of the prior, conflicting access.
        pub prior_ctx: u32,
        /// Its engine.
        pub prior_engine: u32,
        /// Its packet's GPU VA.
        pub prior_packet_va: u64,
        /// Its packet's header word.
        pub prior_header: u32,
        /// Its access.
        pub prior_access: u32,
        /// When it happened (device time).
        pub prior_time_ns: u64,
        /// Check-specific values (docs/sanitizer.md).
        pub detail: [u64; 4],
        /// Check-specific history: the last doorbells of the ring, oldest
        /// first, for [`Check::RingIndex`].
        pub history: [u32; SAN_HISTORY],
        /// The object the page belonged to ([`SAN_FLAG_OBJECT`]; 0: none):
        /// the driver's tag of its `SAN_MEM` declaration.
        pub object: u64,
        /// Its generation when it gave the page back.
        pub object_gen: u32,
        /// Its generation now ([`SAN_FLAG_MOVED`]; else equal).
        pub object_gen_now: u32,
        /// The first page it declares now ([`SAN_FLAG_MOVED`]; 0: none).
        pub object_pa_now: u64,
        /// When the page was given back (device time).
        pub released_ns: u64,
    }

    /// A guest-physical range in a `SAN_MEM` command.
    pub struct SanRange {
        /// First byte (4 KiB aligned).
        pub pa: u64,
        /// Bytes (a multiple of 4 KiB; 0: unused entry).
        pub size: u64,
    }
}

impl SanReport {
    /// The report's sub-kind (check-specific, 0 if none).
    pub const fn kind(&self) -> u32 {
        (self.flags >> SAN_KIND_SHIFT) & 0xff
    }

    /// The report's check, if known.
    pub const fn check(&self) -> Option<Check> {
        Check::from_u32(self.check)
    }

    /// The packet words (at most [`SAN_PACKET_WORDS`]).
    pub fn packet_words(&self) -> &[u32] {
        let n = (self.packet_len as usize).min(SAN_PACKET_WORDS);
        self.packet.get(..n).unwrap_or(&[])
    }
}

const _: () = assert!(core::mem::size_of::<SanReport>() == 272);
const _: () = assert!(core::mem::size_of::<SanRange>() == 16);
