//! The GPU MMU: page-table format, access types and fault reasons.
//!
//! Each context has its own address space: a 4-level page table in guest
//! memory whose root (a guest-physical address) is given at `CONTEXT_CREATE`.
//! A GPU virtual address is 48 bits (gen 2) or 40 bits (gen 1) wide; the
//! remaining upper bits must be zero.
//!
//! ```text
//!  47      39 38      30 29      21 20      12 11          0
//! ┌──────────┬──────────┬──────────┬──────────┬─────────────┐
//! │ L3 index │ L2 index │ L1 index │ L0 index │ page offset │
//! └──────────┴──────────┴──────────┴──────────┴─────────────┘
//! ```
//!
//! Every table is one 4 KiB page of 512 little-endian 64-bit entries. The
//! walk starts at the root (level 3) and descends to level 0, whose entries
//! map 4 KiB pages. A level-1 entry with [`PTE_HUGE`] set maps a 2 MiB page
//! instead of pointing to a level-0 table.
//!
//! # Entry format
//!
//! ```text
//!  63     52 51                              12 11    7 6   5  4   3   2   1   0
//! ┌─────────┬──────────────────────────────────┬───────┬─────┬────┬───┬───┬───┬───┐
//! │reserved │ physical address bits 51..12     │ rsvd  │cache│HUGE│ X │ W │ R │ V │
//! └─────────┴──────────────────────────────────┴───────┴─────┴────┴───┴───┴───┘
//! ```
//!
//! * A **table entry** (levels 3, 2, and level 1 without HUGE) has only V and
//!   the address of the next table; every other bit must be zero.
//! * A **leaf entry** (level 0, or level 1 with HUGE) has V, the permissions
//!   R/W/X, a cache policy and the page address (2 MiB-aligned for HUGE).
//!
//! A walk faults with [`FaultReason::Malformed`] on reserved bits, a HUGE bit
//! outside level 1, a misaligned 2 MiB page, cache policy 3, or a table that
//! appears twice in one walk (a cycle); with [`FaultReason::BadPhysical`] when
//! a table or page lies outside guest RAM. The walk reads at most four entries,
//! whatever the tables contain.

/// Entry is valid.
pub const PTE_VALID: u64 = 1 << 0;
/// Leaf: reads allowed.
pub const PTE_READ: u64 = 1 << 1;
/// Leaf: writes allowed.
pub const PTE_WRITE: u64 = 1 << 2;
/// Leaf: instruction fetch (compute kernels) and command fetch allowed.
pub const PTE_EXEC: u64 = 1 << 3;
/// Level-1 entry maps a 2 MiB page.
pub const PTE_HUGE: u64 = 1 << 4;
/// Cache policy field shift (bits 6..5).
pub const PTE_CACHE_SHIFT: u32 = 5;
/// Cache policy field mask (after shifting).
pub const PTE_CACHE_MASK: u64 = 0x3;
/// Physical address bits 51..12.
pub const PTE_ADDR_MASK: u64 = 0x000f_ffff_ffff_f000;
/// Bits that must be zero in every entry.
pub const PTE_RESERVED_MASK: u64 = 0xfff0_0000_0000_0f80;
/// Bits that must be zero in a table entry besides [`PTE_RESERVED_MASK`].
pub const PTE_TABLE_MUST_BE_ZERO: u64 =
    PTE_READ | PTE_WRITE | PTE_EXEC | PTE_HUGE | (PTE_CACHE_MASK << PTE_CACHE_SHIFT);

/// Number of page-table levels.
pub const LEVELS: u32 = 4;
/// Entries per table.
pub const ENTRIES_PER_TABLE: usize = 512;
/// Size of a table in bytes.
pub const TABLE_SIZE: u64 = 4096;
/// log2 of the small page size.
pub const PAGE_SHIFT: u32 = 12;
/// log2 of the huge page size.
pub const HUGE_PAGE_SHIFT: u32 = 21;

/// Cache policies of a leaf entry.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CachePolicy {
    /// Cached (default).
    Cached = 0,
    /// Uncached: every access goes to memory.
    Uncached = 1,
    /// Write-combined.
    WriteCombined = 2,
}

/// GPU virtual address width of a generation.
pub const fn va_bits(generation: u32) -> u32 {
    if generation >= 2 {
        48
    } else {
        40
    }
}

/// Index into the table of `level` (3 = root) for `va`.
pub const fn level_index(va: u64, level: u32) -> usize {
    ((va >> (PAGE_SHIFT + 9 * level)) & 0x1ff) as usize
}

/// A table entry pointing to the table at `table_pa`.
pub const fn table_entry(table_pa: u64) -> u64 {
    (table_pa & PTE_ADDR_MASK) | PTE_VALID
}

/// A leaf entry mapping the page at `page_pa` with permission bits
/// (`PTE_READ | PTE_WRITE | PTE_EXEC` subset) and a cache policy.
pub const fn leaf_entry(page_pa: u64, perms: u64, cache: CachePolicy) -> u64 {
    (page_pa & PTE_ADDR_MASK)
        | PTE_VALID
        | (perms & (PTE_READ | PTE_WRITE | PTE_EXEC))
        | ((cache as u64) << PTE_CACHE_SHIFT)
}

/// A level-1 leaf entry mapping the 2 MiB page at `page_pa`.
pub const fn huge_entry(page_pa: u64, perms: u64, cache: CachePolicy) -> u64 {
    leaf_entry(page_pa, perms, cache) | PTE_HUGE
}

/// Kinds of memory access, as reported in fault records.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Read (copy source, semaphore read, kernel load).
    Read = 1,
    /// Write (copy destination, fence, kernel store).
    Write = 2,
    /// Command or instruction fetch: needs [`PTE_EXEC`] as well as
    /// [`PTE_READ`].
    Execute = 3,
    /// Read-modify-write (semaphore add, atomics): needs read and write.
    Atomic = 4,
}

impl Access {
    /// The access with this number, if any.
    pub const fn from_u8(v: u8) -> Option<Access> {
        match v {
            1 => Some(Access::Read),
            2 => Some(Access::Write),
            3 => Some(Access::Execute),
            4 => Some(Access::Atomic),
            _ => None,
        }
    }

    /// Permission bits a leaf must have for this access.
    pub const fn required_perms(self) -> u64 {
        match self {
            Access::Read => PTE_READ,
            Access::Write => PTE_WRITE,
            Access::Execute => PTE_READ | PTE_EXEC,
            Access::Atomic => PTE_READ | PTE_WRITE,
        }
    }

    /// A short upper-case name.
    pub const fn name(self) -> &'static str {
        match self {
            Access::Read => "READ",
            Access::Write => "WRITE",
            Access::Execute => "EXECUTE",
            Access::Atomic => "ATOMIC",
        }
    }
}

/// Why a translation failed.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultReason {
    /// An entry on the walk has V clear.
    NotPresent = 1,
    /// The leaf lacks a permission the access needs.
    Permission = 2,
    /// An entry has reserved bits set, a misplaced HUGE bit, a misaligned
    /// huge page, cache policy 3, or the walk visits a table twice.
    Malformed = 3,
    /// The virtual address has bits set above the generation's VA width.
    OutOfRange = 4,
    /// A table or page lies outside guest RAM.
    BadPhysical = 5,
}

impl FaultReason {
    /// The reason with this number, if any.
    pub const fn from_u8(v: u8) -> Option<FaultReason> {
        match v {
            1 => Some(FaultReason::NotPresent),
            2 => Some(FaultReason::Permission),
            3 => Some(FaultReason::Malformed),
            4 => Some(FaultReason::OutOfRange),
            5 => Some(FaultReason::BadPhysical),
            _ => None,
        }
    }

    /// A short upper-case name.
    pub const fn name(self) -> &'static str {
        match self {
            FaultReason::NotPresent => "NOT_PRESENT",
            FaultReason::Permission => "PERMISSION",
            FaultReason::Malformed => "MALFORMED",
            FaultReason::OutOfRange => "OUT_OF_RANGE",
            FaultReason::BadPhysical => "BAD_PHYSICAL",
        }
    }
}

/// "No level": the fault happened before the walk (e.g. out of range).
pub const LEVEL_NONE: u8 = 0xff;
