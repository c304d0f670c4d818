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
//! [`Pte`] builds and decodes entries ([`Pte::decode`] is the walk's check
//! of one entry); [`table_entry`], [`leaf_entry`] and [`huge_entry`] are
//! the same constructors returning bits.
//!
//! A walk faults with [`FaultReason::Malformed`] on reserved bits, a HUGE bit
//! outside level 1, a misaligned 2 MiB page, cache policy 3, or a table that
//! appears twice in one walk (a cycle); with [`FaultReason::BadPhysical`] when
//! a table or page lies outside guest RAM (a system entry) or outside the
//! usable VRAM ranges (a VRAM entry). The walk reads at most four entries,
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
/// Location: the address field is an offset in VRAM (set) or a
/// guest-physical address in system memory (clear). Table and leaf
/// entries.
pub const PTE_VRAM: u64 = 1 << 7;
/// The device-physical address of VRAM offset 0: just above every address
/// a page-table entry's address field can hold, so a system address never
/// names VRAM. `dpa >= VRAM_BASE` is VRAM offset `dpa - VRAM_BASE`.
pub const VRAM_BASE: u64 = 1 << 52;
/// The permission bits of a leaf.
pub const PTE_PERMS_MASK: u64 = PTE_READ | PTE_WRITE | PTE_EXEC;
/// Cache policy field shift (bits 6..5).
pub const PTE_CACHE_SHIFT: u32 = 5;
/// Cache policy field mask (after shifting).
pub const PTE_CACHE_MASK: u64 = 0x3;
/// Physical address bits 51..12.
pub const PTE_ADDR_MASK: u64 = 0x000f_ffff_ffff_f000;
/// Bits that must be zero in every entry.
pub const PTE_RESERVED_MASK: u64 = 0xfff0_0000_0000_0f00;
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

impl CachePolicy {
    /// The policy with this field value, if any (3 is malformed).
    pub const fn from_u8(v: u8) -> Option<CachePolicy> {
        match v {
            0 => Some(CachePolicy::Cached),
            1 => Some(CachePolicy::Uncached),
            2 => Some(CachePolicy::WriteCombined),
            _ => None,
        }
    }
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

/// A table entry pointing to the table at `table_pa` ([`Pte::table`] as
/// bits).
pub const fn table_entry(table_pa: u64) -> u64 {
    Pte::table(table_pa).bits()
}

/// A leaf entry mapping the page at `page_pa` with permission bits
/// (`PTE_READ | PTE_WRITE | PTE_EXEC` subset) and a cache policy
/// ([`Pte::leaf`] as bits).
pub const fn leaf_entry(page_pa: u64, perms: u64, cache: CachePolicy) -> u64 {
    Pte::leaf(page_pa, perms, cache).bits()
}

/// A level-1 leaf entry mapping the 2 MiB page at `page_pa` ([`Pte::huge`]
/// as bits).
pub const fn huge_entry(page_pa: u64, perms: u64, cache: CachePolicy) -> u64 {
    Pte::huge(page_pa, perms, cache).bits()
}

/// One page-table entry: the 64-bit format above as a type, so that the
/// device's walker and the driver's table builder build and decode entries
/// the same way. Any bit pattern is a `Pte`; [`Pte::decode`] says what it
/// means at a level.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pte(u64);

/// What a valid, well-formed entry is at its level ([`Pte::decode`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PteKind {
    /// A table entry: the device-physical address of the next-level table.
    Table(u64),
    /// A leaf entry: a mapped page.
    Leaf(Leaf),
}

/// A leaf entry, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Leaf {
    /// Device-physical address of the page (aligned to its size).
    pub page: u64,
    /// log2 of the page size: [`PAGE_SHIFT`] or [`HUGE_PAGE_SHIFT`].
    pub shift: u32,
    /// `PTE_READ | PTE_WRITE | PTE_EXEC` bits.
    pub perms: u64,
    /// The cache policy.
    pub cache: CachePolicy,
}

impl Pte {
    /// The all-zero entry: not present.
    pub const INVALID: Pte = Pte(0);

    /// The entry with these bits (as read from a table).
    pub const fn from_bits(bits: u64) -> Pte {
        Pte(bits)
    }

    /// The entry's bits (as written to a table, little-endian).
    pub const fn bits(self) -> u64 {
        self.0
    }

    /// The address field and location bit naming device-physical address
    /// `dpa` (lower 12 bits dropped).
    const fn locate(dpa: u64) -> u64 {
        let vram = if dpa >= VRAM_BASE { PTE_VRAM } else { 0 };
        (dpa & PTE_ADDR_MASK) | vram
    }

    /// A table entry pointing to the table at device-physical address
    /// `table_pa` (4 KiB aligned; lower bits are dropped; at or above
    /// [`VRAM_BASE`]: in VRAM).
    pub const fn table(table_pa: u64) -> Pte {
        Pte(Pte::locate(table_pa) | PTE_VALID)
    }

    /// A 4 KiB leaf entry mapping the page at device-physical address
    /// `page_pa` (at or above [`VRAM_BASE`]: in VRAM) with the
    /// permission bits of `perms` (`PTE_READ | PTE_WRITE | PTE_EXEC`
    /// subset; other bits are dropped) and `cache`.
    pub const fn leaf(page_pa: u64, perms: u64, cache: CachePolicy) -> Pte {
        Pte(Pte::locate(page_pa)
            | PTE_VALID
            | (perms & PTE_PERMS_MASK)
            | ((cache as u64) << PTE_CACHE_SHIFT))
    }

    /// A level-1 leaf entry mapping the 2 MiB page at `page_pa` (which
    /// must be 2 MiB aligned for the entry to be well formed).
    pub const fn huge(page_pa: u64, perms: u64, cache: CachePolicy) -> Pte {
        Pte(Pte::leaf(page_pa, perms, cache).0 | PTE_HUGE)
    }

    /// V: the entry is valid.
    pub const fn is_valid(self) -> bool {
        self.0 & PTE_VALID != 0
    }

    /// HUGE: a level-1 entry mapping a 2 MiB page.
    pub const fn is_huge(self) -> bool {
        self.0 & PTE_HUGE != 0
    }

    /// The physical address field (bits 51..12): the next table or the
    /// page, in system memory or VRAM as [`Pte::is_vram`] says.
    pub const fn address(self) -> u64 {
        self.0 & PTE_ADDR_MASK
    }

    /// The location bit: the address is a VRAM offset.
    pub const fn is_vram(self) -> bool {
        self.0 & PTE_VRAM != 0
    }

    /// The device-physical address the entry points to: the address
    /// field, plus [`VRAM_BASE`] for a VRAM entry.
    pub const fn dpa(self) -> u64 {
        if self.is_vram() {
            VRAM_BASE | self.address()
        } else {
            self.address()
        }
    }

    /// The permission bits (`PTE_READ | PTE_WRITE | PTE_EXEC` subset).
    pub const fn permissions(self) -> u64 {
        self.0 & PTE_PERMS_MASK
    }

    /// Whether the permission bits allow `access`.
    pub const fn allows(self, access: Access) -> bool {
        let need = access.required_perms();
        self.0 & need == need
    }

    /// The raw cache-policy field (0..=3; 3 is malformed).
    pub const fn cache_bits(self) -> u8 {
        ((self.0 >> PTE_CACHE_SHIFT) & PTE_CACHE_MASK) as u8
    }

    /// The cache policy, or `None` for the malformed value 3.
    pub const fn cache_policy(self) -> Option<CachePolicy> {
        CachePolicy::from_u8(self.cache_bits())
    }

    /// Bits set that must be zero in every entry ([`PTE_RESERVED_MASK`]).
    pub const fn reserved_bits(self) -> u64 {
        self.0 & PTE_RESERVED_MASK
    }

    /// What the entry means at `level` (3 = root, 0 = 4 KiB pages), checked
    /// as the walk checks it: [`FaultReason::NotPresent`] if V is clear;
    /// [`FaultReason::Malformed`] for reserved bits, HUGE outside level 1,
    /// a table entry with leaf bits (R, W, X, cache), a leaf with cache
    /// policy 3, or a 2 MiB page that is not 2 MiB aligned. A level above
    /// 3 is malformed too. Whether the address lies in guest RAM (or in
    /// usable VRAM) is the walker's check.
    ///
    /// # Errors
    ///
    /// As listed above.
    pub const fn decode(self, level: u32) -> Result<PteKind, FaultReason> {
        if !self.is_valid() {
            return Err(FaultReason::NotPresent);
        }
        if self.reserved_bits() != 0 || level >= LEVELS {
            return Err(FaultReason::Malformed);
        }
        let huge = self.is_huge();
        if huge && level != 1 {
            return Err(FaultReason::Malformed);
        }
        if level > 0 && !huge {
            if self.0 & PTE_TABLE_MUST_BE_ZERO != 0 {
                return Err(FaultReason::Malformed);
            }
            return Ok(PteKind::Table(self.dpa()));
        }
        let Some(cache) = self.cache_policy() else {
            return Err(FaultReason::Malformed);
        };
        let shift = if huge { HUGE_PAGE_SHIFT } else { PAGE_SHIFT };
        let page = self.dpa();
        if page & ((1u64 << shift) - 1) != 0 {
            return Err(FaultReason::Malformed);
        }
        Ok(PteKind::Leaf(Leaf {
            page,
            shift,
            perms: self.permissions(),
            cache,
        }))
    }
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
    /// A table or page lies outside guest RAM, or (a VRAM entry) outside
    /// the usable VRAM ranges.
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
