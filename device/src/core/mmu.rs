//! The GPU MMU: the page-table walker and the per-engine TLB.
//!
//! # Walk
//!
//! [`walk`] translates one GPU VA of one address space exactly as
//! `vgpu_hwif::mmu` specifies: the VA must fit the generation's width, then
//! at most four entries are read, one per level, from tables in guest
//! memory. Every table and every mapped page must lie inside one guest RAM
//! region; every entry is validated before it is followed. The walk state
//! machine is
//!
//! ```text
//!  range check ──▶ level 3 ──▶ level 2 ──▶ level 1 ──┬──▶ level 0 ──▶ 4 KiB leaf
//!      │             │           │           │       └──(HUGE)──────▶ 2 MiB leaf
//!      ▼             ▼           ▼           ▼                          │
//!  OUT_OF_RANGE   NOT_PRESENT / MALFORMED / BAD_PHYSICAL             PERMISSION
//! ```
//!
//! and ends after at most four reads whatever the tables contain (a table
//! that reappears in the same walk is a cycle and faults as `MALFORMED`).
//!
//! # TLB
//!
//! Each engine has a [`Tlb`]: set-associative, tagged by address space
//! (ASID = context id), holding successful translations of 4 KiB and 2 MiB
//! pages. It is **not coherent** with page-table writes: once a translation
//! is cached, changing the PTE in guest memory has no effect on that engine
//! until the driver invalidates it (`TLB_INVALIDATE`), the engine is reset or
//! the context destroyed, or the entry is evicted. Failed walks are never
//! cached, and an access that faults on a cached entry drops that entry, so
//! a retried access always walks the tables again.
//!
//! A walk that ends in a level-0 table reads the entry's whole 64-byte line
//! ([`PTE_LINE`] entries) and caches every well-formed valid leaf in it, so
//! the TLB may hold translations of pages that were never accessed: a
//! driver must invalidate after changing any valid entry.
//!
//! A TLB also has one *stale* slot, used only by fault injection
//! (`stale-tlb`): [`Tlb::invalidate_keep_one`] invalidates a range but
//! moves one of its translations to that slot, and the next translation
//! of that page is served from it once (the old physical address) before
//! the page walks again. A later invalidation covering it, or a flush,
//! drops it.
//!
//! [`Mmu::translate`] combines both and counts hits and misses.

use vgpu_hwif::mmu::{
    Access, FaultReason, Leaf, Pte, PteKind, LEVELS, LEVEL_NONE, PAGE_SHIFT, TABLE_SIZE,
};
use vm_memory::{GuestAddress, GuestMemoryBackend, VolatileMemory};

use super::record::Tap;
use super::sanitize::tlb::{EntrySan, TlbSan};

pub use super::memory::{in_ram, Mem};

/// log2 of the 2 MiB page size.
pub const HUGE_SHIFT: u32 = vgpu_hwif::mmu::HUGE_PAGE_SHIFT;

/// A failed translation: what the `FAULT` event reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{} fault ({}) at level {level} on {} of {va:#x}", reason.name(), access.name(), if *level == LEVEL_NONE { "-".to_string() } else { level.to_string() })]
pub struct MmuFault {
    /// The virtual address accessed.
    pub va: u64,
    /// The kind of access.
    pub access: Access,
    /// Why it failed.
    pub reason: FaultReason,
    /// The page-table level where the walk failed (3 = root), or
    /// [`LEVEL_NONE`].
    pub level: u8,
}

/// [`MmuFault::level`] of an access that translated but touched a poisoned
/// page (an uncorrectable ECC error, [`super::poison`]): not a page fault,
/// the command processor reports it as the engine error
/// `ECC_UNCORRECTABLE`.
pub const LEVEL_ECC: u8 = 0xec;

impl MmuFault {
    /// The access to `va` touched a poisoned page.
    pub const fn ecc(va: u64, access: Access) -> MmuFault {
        MmuFault {
            va,
            access,
            reason: FaultReason::BadPhysical,
            level: LEVEL_ECC,
        }
    }

    /// Whether this is an uncorrectable ECC error rather than a fault.
    pub const fn is_ecc(&self) -> bool {
        self.level == LEVEL_ECC
    }
}

/// One address space: a context's page-table root and the VA width of the
/// device's generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AddressSpace {
    /// Address-space id: the context id.
    pub asid: u32,
    /// Guest-physical address of the level-3 table.
    pub root: u64,
    /// VA width in bits.
    pub va_bits: u32,
}

/// A successful translation of one page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageMapping {
    /// First VA of the page.
    pub va_base: u64,
    /// First guest-physical address of the page.
    pub pa_base: u64,
    /// log2 of the page size (12 or 21).
    pub shift: u32,
    /// `PTE_READ | PTE_WRITE | PTE_EXEC` bits of the leaf.
    pub perms: u64,
    /// Cache policy field of the leaf (0..=2).
    pub cache: u8,
}

impl PageMapping {
    /// Size of the page in bytes.
    pub const fn page_size(&self) -> u64 {
        1 << self.shift
    }

    /// Level of the leaf entry (0 for 4 KiB pages, 1 for 2 MiB pages).
    pub const fn level(&self) -> u8 {
        if self.shift == HUGE_SHIFT {
            1
        } else {
            0
        }
    }

    /// Whether `va` lies in this page.
    pub const fn contains(&self, va: u64) -> bool {
        va >> self.shift == self.va_base >> self.shift
    }

    /// The guest-physical address of `va` (which must lie in the page).
    pub const fn pa(&self, va: u64) -> u64 {
        self.pa_base | (va & (self.page_size() - 1))
    }

    /// Bytes from `va` to the end of the page.
    pub const fn bytes_left(&self, va: u64) -> u64 {
        self.page_size() - (va & (self.page_size() - 1))
    }

    /// Checks that the leaf allows `access` to `va`.
    pub fn check(&self, va: u64, access: Access) -> Result<(), MmuFault> {
        let need = access.required_perms();
        if self.perms & need == need {
            Ok(())
        } else {
            Err(MmuFault {
                va,
                access,
                reason: FaultReason::Permission,
                level: self.level(),
            })
        }
    }
}

/// The mapping of the page containing `va` that leaf `l` maps.
fn mapping(l: &Leaf, va: u64) -> PageMapping {
    let size = 1u64 << l.shift;
    PageMapping {
        va_base: va & !(size - 1),
        pa_base: l.page,
        shift: l.shift,
        perms: l.perms,
        cache: l.cache as u8,
    }
}

/// Reads entry `index` of the table at `table` (which must lie in one RAM
/// region).
fn read_entry(mem: &Mem, table: u64, index: usize) -> Option<Pte> {
    let t = mem
        .get_slice(GuestAddress(table), TABLE_SIZE as usize)
        .ok()?;
    let r = t.get_ref::<u64>(index * 8).ok()?;
    Some(Pte::from_bits(u64::from_le(r.load())))
}

/// Walks the page tables of `space` for `va`. The result is not checked
/// against an access type (see [`PageMapping::check`]); `access` only
/// labels a fault.
pub fn walk(
    mem: &Mem,
    space: &AddressSpace,
    va: u64,
    access: Access,
) -> Result<PageMapping, MmuFault> {
    walk_full(mem, space, va, access, None, None).map(|w| w.map)
}

/// Reads up to `n` words at `va` of `space` through software walks (no
/// TLB): the words up to the first that does not translate or read.
pub fn read_words(mem: &Mem, space: &AddressSpace, va: u64, n: usize) -> Vec<u32> {
    use vm_memory::Bytes;
    let mut out = Vec::with_capacity(n);
    let mut cur = va;
    while out.len() < n {
        let Ok(m) = walk(mem, space, cur, Access::Execute) else {
            break;
        };
        let in_page = usize::try_from(m.bytes_left(cur) / 4).unwrap_or(usize::MAX);
        let take = in_page.min(n - out.len());
        let mut buf = vec![0u8; take * 4];
        if mem.read_slice(&mut buf, GuestAddress(m.pa(cur))).is_err() {
            break;
        }
        out.extend(
            buf.chunks_exact(4)
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])),
        );
        let Some(next) = (take as u64)
            .checked_mul(4)
            .and_then(|b| cur.checked_add(b))
        else {
            break;
        };
        cur = next;
    }
    out
}

/// What a successful walk read: the mapping, and where its entries are.
#[derive(Clone, Copy, Debug)]
struct Walked {
    map: PageMapping,
    /// The level-0 table of a 4 KiB page.
    l0_table: Option<u64>,
    /// The tables read, root first, with their levels.
    tables: [(u64, u8); LEVELS as usize],
    /// Valid entries of `tables`.
    ntables: usize,
    /// Guest-physical address of the leaf entry, and its bits.
    leaf: (u64, u64),
}

/// [`walk`], also returning where the entries it read are; every table it
/// reads is told to `tap` (record mode), every entry to `pt` (the
/// sanitizer's page-table checks).
fn walk_full(
    mem: &Mem,
    space: &AddressSpace,
    va: u64,
    access: Access,
    tap: Option<Tap<'_>>,
    mut pt: Option<&mut TlbSan>,
) -> Result<Walked, MmuFault> {
    let fault = |reason, level: u32| MmuFault {
        va,
        access,
        reason,
        level: level as u8,
    };
    if space.va_bits < 64 && va >> space.va_bits != 0 {
        return Err(MmuFault {
            va,
            access,
            reason: FaultReason::OutOfRange,
            level: LEVEL_NONE,
        });
    }
    let mut tables = [(0u64, 0u8); LEVELS as usize];
    let mut seen = 0usize;
    let mut table = space.root;
    let mut level = LEVELS - 1;
    loop {
        // One region lookup per table: the table must lie in one region,
        // and the entry is read from that checked slice.
        let index = vgpu_hwif::mmu::level_index(va, level);
        if let Some(t) = tap {
            t.read(mem, table);
        }
        let Some(pte) = read_entry(mem, table, index) else {
            return Err(fault(FaultReason::BadPhysical, level));
        };
        if let Some(s) = pt.as_deref_mut() {
            s.on_entry(space.asid, va, access, level, table, index, pte.bits());
        }
        if let Some(t) = tap {
            t.walked(space.asid, va, level, table, index, pte.bits());
        }
        if let Some(slot) = tables.get_mut(seen) {
            *slot = (table, level as u8);
            seen += 1;
        }
        let l = match pte.decode(level) {
            Err(reason) => return Err(fault(reason, level)),
            Ok(PteKind::Table(next)) => {
                if tables.iter().take(seen).any(|&(t, _)| t == next) {
                    return Err(fault(FaultReason::Malformed, level));
                }
                table = next;
                level -= 1;
                continue;
            }
            Ok(PteKind::Leaf(l)) => l,
        };
        let map = mapping(&l, va);
        if !in_ram(mem, map.pa_base, map.page_size()) {
            return Err(fault(FaultReason::BadPhysical, level));
        }
        return Ok(Walked {
            map,
            l0_table: (level == 0).then_some(table),
            tables,
            ntables: seen,
            leaf: (table + 8 * index as u64, pte.bits()),
        });
    }
}

/// Reads the 64-bit entry at guest-physical `pa` (0 if unreadable).
fn read_pte_at(mem: &Mem, pa: u64) -> u64 {
    mem.get_slice(GuestAddress(pa), 8)
        .ok()
        .and_then(|s| s.get_ref::<u64>(0).ok().map(|r| u64::from_le(r.load())))
        .unwrap_or(0)
}

/// Whether leaf entry `now` (read at level `level`) still maps the page
/// `cached` mapped, with at least its permissions and the same cache
/// policy.
fn still_maps(now: u64, level: u8, cached: &PageMapping) -> bool {
    match Pte::from_bits(now).decode(u32::from(level)) {
        Ok(PteKind::Leaf(l)) => {
            l.page == cached.pa_base
                && l.shift == cached.shift
                && l.perms & cached.perms == cached.perms
                && l.cache as u8 == cached.cache
        }
        _ => false,
    }
}

/// Entries a walk reads together from a level-0 table: one 64-byte line.
pub const PTE_LINE: usize = 8;

/// Calls `found` with each well-formed 4 KiB leaf in the same 64-byte
/// line of the level-0 table at `table` as the entry for `va` (that entry
/// excluded), with the entry's address and bits: what the walker caches
/// alongside the page it was asked for.
fn line_neighbours(mem: &Mem, table: u64, va: u64, mut found: impl FnMut(PageMapping, u64, u64)) {
    let Ok(t) = mem.get_slice(GuestAddress(table), TABLE_SIZE as usize) else {
        return;
    };
    let index = vgpu_hwif::mmu::level_index(va, 0);
    let first = index & !(PTE_LINE - 1);
    let base = va & !((1u64 << (PAGE_SHIFT + 9)) - 1);
    for i in (first..first + PTE_LINE).filter(|&i| i != index) {
        let Ok(r) = t.get_ref::<u64>(i * 8) else {
            continue;
        };
        let pte = Pte::from_bits(u64::from_le(r.load()));
        if let Ok(PteKind::Leaf(l)) = pte.decode(0) {
            let map = mapping(&l, base + ((i as u64) << PAGE_SHIFT));
            if in_ram(mem, map.pa_base, map.page_size()) {
                found(map, table + 8 * i as u64, pte.bits());
            }
        }
    }
}

/// Sets of the 4 KiB part of a TLB.
pub const TLB_SETS: usize = 512;
/// Sets of the 2 MiB part of a TLB.
pub const TLB_HUGE_SETS: usize = 32;
/// Ways per set.
pub const TLB_WAYS: usize = 4;

#[derive(Clone, Copy, Debug)]
struct Entry {
    asid: u32,
    map: PageMapping,
    /// What the sanitizer remembers of the fill (zero without one).
    san: EntrySan,
}

#[derive(Debug)]
struct Array {
    entries: Vec<Option<Entry>>,
    victim: Vec<u8>,
    sets: usize,
    shift: u32,
}

impl Array {
    fn new(sets: usize, shift: u32) -> Self {
        Array {
            entries: vec![None; sets * TLB_WAYS],
            victim: vec![0; sets],
            sets,
            shift,
        }
    }

    fn set_of(&self, asid: u32, va: u64) -> usize {
        // Multiplicative hashing spreads aligned and strided page numbers
        // over all sets (sets is a power of two).
        let key = (va >> self.shift) ^ (u64::from(asid) << 40);
        let h = key.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        (h >> (64 - self.sets.trailing_zeros())) as usize & (self.sets - 1)
    }

    fn ways(&self, set: usize) -> std::ops::Range<usize> {
        set * TLB_WAYS..(set + 1) * TLB_WAYS
    }

    fn lookup(&self, asid: u32, va: u64) -> Option<PageMapping> {
        let set = self.set_of(asid, va);
        self.entries
            .get(self.ways(set))?
            .iter()
            .flatten()
            .find(|e| e.asid == asid && e.map.contains(va))
            .map(|e| e.map)
    }

    fn lookup_mut(&mut self, asid: u32, va: u64) -> Option<&mut Entry> {
        let set = self.set_of(asid, va);
        let ways = self.ways(set);
        self.entries
            .get_mut(ways)?
            .iter_mut()
            .flatten()
            .find(|e| e.asid == asid && e.map.contains(va))
    }

    fn insert(&mut self, asid: u32, map: PageMapping, san: EntrySan) {
        let set = self.set_of(asid, map.va_base);
        let ways = self.ways(set);
        let Some(slots) = self.entries.get_mut(ways) else {
            return;
        };
        // Replace an entry for the same page, else a free way, else the
        // set's round-robin victim.
        let way = slots
            .iter()
            .position(|e| e.is_some_and(|e| e.asid == asid && e.map.contains(map.va_base)))
            .or_else(|| slots.iter().position(Option::is_none));
        let way = match way {
            Some(w) => w,
            None => {
                let Some(v) = self.victim.get_mut(set) else {
                    return;
                };
                let w = usize::from(*v) % TLB_WAYS;
                *v = ((w + 1) % TLB_WAYS) as u8;
                w
            }
        };
        if let Some(slot) = slots.get_mut(way) {
            *slot = Some(Entry { asid, map, san });
        }
    }

    fn retain(&mut self, mut keep: impl FnMut(&Entry) -> bool) -> u64 {
        let mut dropped = 0;
        for slot in &mut self.entries {
            if slot.as_ref().is_some_and(|e| !keep(e)) {
                *slot = None;
                dropped += 1;
            }
        }
        dropped
    }
}

/// TLB statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TlbStats {
    /// Translations served from the TLB.
    pub hits: u64,
    /// Translations that walked the page tables.
    pub misses: u64,
    /// Entries dropped by invalidations, flushes and faults.
    pub invalidated: u64,
}

/// One engine's TLB (see the module documentation).
#[derive(Debug)]
pub struct Tlb {
    small: Array,
    huge: Array,
    stats: TlbStats,
    /// A translation kept past its invalidation (fault injection), served
    /// once.
    stale: Option<Entry>,
    /// The sanitizer's checks of this TLB, when it is on.
    san: Option<Box<TlbSan>>,
}

impl Default for Tlb {
    fn default() -> Self {
        Self::new()
    }
}

impl Tlb {
    /// An empty TLB.
    pub fn new() -> Self {
        Tlb {
            small: Array::new(TLB_SETS, PAGE_SHIFT),
            huge: Array::new(TLB_HUGE_SETS, HUGE_SHIFT),
            stats: TlbStats::default(),
            stale: None,
            san: None,
        }
    }

    /// Turns the sanitizer's checks of this TLB on (with its state) or off.
    /// Entries cached before it was on carry no fill record: they are not
    /// checked for staleness.
    pub fn set_san(&mut self, san: Option<Box<TlbSan>>) {
        self.san = san;
    }

    /// The sanitizer state, when on.
    pub fn san_mut(&mut self) -> Option<&mut TlbSan> {
        self.san.as_deref_mut()
    }

    /// Whether the sanitizer's checks are on for this TLB.
    pub fn san_on(&self) -> bool {
        self.san.is_some()
    }

    /// The cached translation of `va` with what the sanitizer recorded of
    /// its fill.
    pub fn san_entry(&self, asid: u32, va: u64) -> Option<(PageMapping, EntrySan)> {
        let find = |a: &Array| {
            let set = a.set_of(asid, va);
            a.entries
                .get(a.ways(set))?
                .iter()
                .flatten()
                .find(|e| e.asid == asid && e.map.contains(va))
                .map(|e| (e.map, e.san))
        };
        find(&self.small).or_else(|| find(&self.huge))
    }

    /// Logs a data access for the sanitizer's hazard check (nothing when
    /// the sanitizer is off).
    pub fn san_access(&mut self, va: u64, pa: u64, len: u64, write: bool) {
        if let Some(s) = self.san.as_deref_mut() {
            s.access(va, pa, len, write);
        }
    }

    /// [`Tlb::invalidate`], and with the sanitizer on, a check of every
    /// dropped translation against the page tables in `mem`: one that no
    /// longer maps its page and whose page or leaf table was used for
    /// something else since it was cached is a `SAN-TLB-INV-ORDER`
    /// finding.
    pub fn invalidate_checked(&mut self, mem: &Mem, asid: u32, va: u64, size: u64) -> u64 {
        let Some(mut san) = self.san.take() else {
            return self.invalidate(asid, va, size);
        };
        if san.on(vgpu_hwif::sanitize::Check::TlbInvOrder) {
            let dropped: Vec<Entry> = self
                .small
                .entries
                .iter()
                .chain(self.huge.entries.iter())
                .flatten()
                .filter(|e| in_range(e, asid, va, size))
                .copied()
                .collect();
            for e in dropped {
                if e.san.pte_pa == 0 {
                    continue;
                }
                let now = read_pte_at(mem, e.san.pte_pa);
                let stale = !still_maps(now, e.san.level, &e.map);
                san.on_drop(e.asid, e.map.va_base, e.map.pa_base, &e.san, stale);
            }
        }
        self.san = Some(san);
        self.invalidate(asid, va, size)
    }

    /// The cached translation of `va` in address space `asid`, if any.
    /// Does not count as a hit or miss.
    pub fn lookup(&self, asid: u32, va: u64) -> Option<PageMapping> {
        self.small
            .lookup(asid, va)
            .or_else(|| self.huge.lookup(asid, va))
    }

    /// Caches a translation.
    pub fn insert(&mut self, asid: u32, map: PageMapping) {
        self.insert_with(asid, map, EntrySan::default());
    }

    fn insert_with(&mut self, asid: u32, map: PageMapping, san: EntrySan) {
        if map.shift == HUGE_SHIFT {
            self.huge.insert(asid, map, san);
        } else {
            self.small.insert(asid, map, san);
        }
    }

    /// Drops the entries of `asid` for pages overlapping
    /// `va..va + size` (`size` 0: the whole address space). Returns how
    /// many were dropped.
    pub fn invalidate(&mut self, asid: u32, va: u64, size: u64) -> u64 {
        if self.stale.is_some_and(|e| in_range(&e, asid, va, size)) {
            self.stale = None;
        }
        self.retain_all(|e| !in_range(e, asid, va, size))
    }

    /// Translations of `asid` cached for pages overlapping `va..va + size`
    /// (`size` 0: the whole address space), in a fixed order.
    pub fn cached_in(&self, asid: u32, va: u64, size: u64) -> Vec<PageMapping> {
        self.small
            .entries
            .iter()
            .chain(self.huge.entries.iter())
            .flatten()
            .filter(|e| in_range(e, asid, va, size))
            .map(|e| e.map)
            .collect()
    }

    /// [`Tlb::invalidate`], except that the `pick % n`-th of the `n`
    /// translations in the range (in [`Tlb::cached_in`] order) is kept as
    /// the stale entry, served once by the next translation of its page.
    /// Returns it, or `None` (and invalidates normally) if the range holds
    /// no translation.
    pub fn invalidate_keep_one(
        &mut self,
        asid: u32,
        va: u64,
        size: u64,
        pick: u64,
    ) -> Option<PageMapping> {
        let found = self.cached_in(asid, va, size);
        self.invalidate(asid, va, size);
        let n = found.len() as u64;
        let map = *found.get(usize::try_from(pick % n.max(1)).ok()?)?;
        self.stale = Some(Entry {
            asid,
            map,
            san: EntrySan::default(),
        });
        Some(map)
    }

    /// The stale entry for `va` of `asid`, taken out.
    fn take_stale(&mut self, asid: u32, va: u64) -> Option<PageMapping> {
        let e = self.stale?;
        if e.asid != asid || !e.map.contains(va) {
            return None;
        }
        self.stale = None;
        Some(e.map)
    }

    /// Drops every entry.
    pub fn flush(&mut self) -> u64 {
        self.stale = None;
        self.retain_all(|_| false)
    }

    /// Entries currently cached.
    pub fn len(&self) -> usize {
        self.small
            .entries
            .iter()
            .chain(self.huge.entries.iter())
            .filter(|e| e.is_some())
            .count()
    }

    /// Whether the TLB holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Hit, miss and invalidation counts since creation.
    pub fn stats(&self) -> TlbStats {
        self.stats
    }

    fn retain_all(&mut self, mut keep: impl FnMut(&Entry) -> bool) -> u64 {
        let n = self.small.retain(&mut keep) + self.huge.retain(&mut keep);
        self.stats.invalidated += n;
        n
    }
}

/// Whether `e` is a translation of `asid` overlapping `va..va + size`
/// (`size` 0: any page of `asid`).
fn in_range(e: &Entry, asid: u32, va: u64, size: u64) -> bool {
    if e.asid != asid {
        return false;
    }
    if size == 0 {
        return true;
    }
    let end = va.saturating_add(size);
    let page_end = e.map.va_base.saturating_add(e.map.page_size());
    page_end > va && e.map.va_base < end
}

/// Translation through a TLB: what an engine's memory accesses use.
#[derive(Debug)]
pub struct Mmu<'a> {
    /// Guest memory holding the page tables and pages.
    pub mem: &'a Mem,
    /// The engine's TLB.
    pub tlb: &'a mut Tlb,
    /// The address space translated.
    pub space: AddressSpace,
    /// Record mode: told of every page read and page-table page walked.
    pub tap: Option<Tap<'a>>,
}

impl Mmu<'_> {
    /// Translates `va` for `access`: from the TLB if cached, else by a walk
    /// whose result is then cached. A fault drops any cached entry for the
    /// page, so that a retry walks again. In record mode a read's page is
    /// told to the tap.
    pub fn translate(&mut self, va: u64, access: Access) -> Result<PageMapping, MmuFault> {
        let map = self.lookup_or_walk(va, access)?;
        if let (Some(t), false) = (self.tap, access == Access::Write) {
            t.read(self.mem, map.pa(va));
        }
        Ok(map)
    }

    fn lookup_or_walk(&mut self, va: u64, access: Access) -> Result<PageMapping, MmuFault> {
        let asid = self.space.asid;
        if let Some(map) = self.tlb.take_stale(asid, va) {
            // Served once from before an invalidation (fault injection; the
            // sanitizer does not blame the driver for it).
            self.tlb.stats.hits += 1;
            return map.check(va, access).map(|()| map);
        }
        if self.tlb.san.is_some() {
            return self.translate_checked(va, access);
        }
        if let Some(map) = self.tlb.lookup(asid, va) {
            self.tlb.stats.hits += 1;
            return match map.check(va, access) {
                Ok(()) => Ok(map),
                Err(f) => {
                    self.tlb.invalidate(asid, va, 1);
                    Err(f)
                }
            };
        }
        self.tlb.stats.misses += 1;
        let w = walk_full(self.mem, &self.space, va, access, self.tap, None)?;
        let map = w.map;
        map.check(va, access)?;
        self.tlb.insert(asid, map);
        // The walker fetched the entry's whole 64-byte line: the other
        // valid leaves in it are cached too.
        if let Some(table) = w.l0_table {
            let tlb = &mut *self.tlb;
            line_neighbours(self.mem, table, va, |n, _, _| tlb.insert(asid, n));
        }
        Ok(map)
    }

    /// [`Mmu::translate`] with the sanitizer's checks (see
    /// [`super::sanitize::tlb`]): every hit re-reads its leaf entry, every
    /// fill records where its entries are.
    fn translate_checked(&mut self, va: u64, access: Access) -> Result<PageMapping, MmuFault> {
        let asid = self.space.asid;
        let mem = self.mem;
        let tap = self.tap;
        let Tlb {
            small, huge, san, ..
        } = &mut *self.tlb;
        let hit = small
            .lookup_mut(asid, va)
            .or_else(|| huge.lookup_mut(asid, va));
        if let Some(e) = hit {
            let map = e.map;
            if let Some(s) = san.as_deref_mut() {
                let now = if e.san.pte_pa != 0 {
                    read_pte_at(mem, e.san.pte_pa)
                } else {
                    0
                };
                let same = e.san.pte_pa == 0 || still_maps(now, e.san.level, &map);
                s.on_hit(
                    asid,
                    va,
                    access,
                    &mut e.san,
                    map.pa_base,
                    map.page_size(),
                    now,
                    same,
                );
            }
            self.tlb.stats.hits += 1;
            return match map.check(va, access) {
                Ok(()) => Ok(map),
                Err(f) => {
                    self.tlb.invalidate(asid, va, 1);
                    Err(f)
                }
            };
        }
        self.tlb.stats.misses += 1;
        let pt = self.tlb.san.as_deref_mut().filter(|s| s.pt_on());
        let w = walk_full(mem, &self.space, va, access, tap, pt)?;
        let map = w.map;
        map.check(va, access)?;
        let root = self.space.root;
        let tables = w.tables.get(..w.ntables).unwrap_or(&[]);
        let es = match self.tlb.san.as_deref_mut() {
            Some(s) => s.on_fill(
                asid,
                root,
                va,
                access,
                tables,
                map.pa_base,
                map.page_size(),
                w.leaf.0,
                w.leaf.1,
                map.level(),
            ),
            None => EntrySan::default(),
        };
        self.tlb.insert_with(asid, map, es);
        if let Some(table) = w.l0_table {
            let tlb = &mut *self.tlb;
            line_neighbours(mem, table, va, |n, pte_pa, pte| {
                // Not accessed yet: its page's ownership is checked at its
                // first hit.
                let es = EntrySan {
                    pte_pa,
                    pte,
                    epoch: u64::MAX,
                    ..es
                };
                tlb.insert_with(asid, n, es);
            });
        }
        Ok(map)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vgpu_hwif::mmu::{
        huge_entry, leaf_entry, table_entry, CachePolicy, PTE_ADDR_MASK, PTE_EXEC, PTE_HUGE,
        PTE_READ, PTE_WRITE,
    };
    use vm_memory::Bytes;

    const RAM: u64 = 0x40_0000; // 4 MiB at 0
    const ROOT: u64 = 0x1000;
    const RW: u64 = PTE_READ | PTE_WRITE;

    fn mem() -> Mem {
        Mem::from_ranges(&[(GuestAddress(0), RAM as usize)]).unwrap()
    }

    fn set(mem: &Mem, pa: u64, v: u64) {
        mem.write_obj(v.to_le(), GuestAddress(pa)).unwrap();
    }

    fn space(va_bits: u32) -> AddressSpace {
        AddressSpace {
            asid: 1,
            root: ROOT,
            va_bits,
        }
    }

    /// Maps VA 0x1234_5000 → PA 0x8000 through tables at 0x1000 (L3),
    /// 0x2000 (L2), 0x3000 (L1), 0x4000 (L0).
    const VA: u64 = 0x1234_5000;

    fn idx(va: u64, level: u32) -> u64 {
        vgpu_hwif::mmu::level_index(va, level) as u64 * 8
    }

    fn build(mem: &Mem) {
        set(mem, 0x1000 + idx(VA, 3), table_entry(0x2000));
        set(mem, 0x2000 + idx(VA, 2), table_entry(0x3000));
        set(mem, 0x3000 + idx(VA, 1), table_entry(0x4000));
        set(
            mem,
            0x4000 + idx(VA, 0),
            leaf_entry(0x8000, RW, CachePolicy::Cached),
        );
    }

    fn fault(reason: FaultReason, level: u8) -> MmuFault {
        MmuFault {
            va: VA + 0x10,
            access: Access::Read,
            reason,
            level,
        }
    }

    #[test]
    fn four_level_walk_maps_a_4k_page() {
        let m = mem();
        build(&m);
        let map = walk(&m, &space(48), VA + 0x10, Access::Read).unwrap();
        assert_eq!(
            map,
            PageMapping {
                va_base: VA,
                pa_base: 0x8000,
                shift: 12,
                perms: RW,
                cache: 0
            }
        );
        assert_eq!(map.pa(VA + 0x10), 0x8010);
        assert_eq!(map.bytes_left(VA + 0x10), 0xff0);
        assert_eq!(map.check(VA, Access::Write), Ok(()));
        assert_eq!(
            map.check(VA, Access::Execute).unwrap_err().reason,
            FaultReason::Permission
        );
    }

    #[test]
    fn huge_page_at_level_1() {
        let m = mem();
        build(&m);
        set(
            &m,
            0x3000 + idx(VA, 1),
            huge_entry(0x20_0000, PTE_READ | PTE_EXEC, CachePolicy::WriteCombined),
        );
        let map = walk(&m, &space(48), VA, Access::Execute).unwrap();
        assert_eq!(map.shift, 21);
        assert_eq!(map.pa_base, 0x20_0000);
        assert_eq!(map.va_base, VA & !0x1f_ffff);
        assert_eq!(map.pa(VA), 0x20_0000 + (VA & 0x1f_ffff));
        assert_eq!(map.cache, 2);
        assert_eq!(map.level(), 1);
    }

    #[test]
    fn malformed_tables_fault_and_never_panic() {
        type Case = (&'static str, fn(&Mem), FaultReason, u8);
        let cases: &[Case] = &[
            (
                "not present at L2",
                |m| set(m, 0x2000 + idx(VA, 2), 0),
                FaultReason::NotPresent,
                2,
            ),
            (
                "not present leaf",
                |m| set(m, 0x4000 + idx(VA, 0), 0x8000),
                FaultReason::NotPresent,
                0,
            ),
            (
                "reserved high bit",
                |m| set(m, 0x1000 + idx(VA, 3), table_entry(0x2000) | 1 << 60),
                FaultReason::Malformed,
                3,
            ),
            (
                "reserved low bit",
                |m| {
                    set(
                        m,
                        0x4000 + idx(VA, 0),
                        leaf_entry(0x8000, RW, CachePolicy::Cached) | 1 << 7,
                    )
                },
                FaultReason::Malformed,
                0,
            ),
            (
                "HUGE at L2",
                |m| set(m, 0x2000 + idx(VA, 2), table_entry(0x3000) | PTE_HUGE),
                FaultReason::Malformed,
                2,
            ),
            (
                "HUGE at L0",
                |m| {
                    set(
                        m,
                        0x4000 + idx(VA, 0),
                        leaf_entry(0x8000, RW, CachePolicy::Cached) | PTE_HUGE,
                    )
                },
                FaultReason::Malformed,
                0,
            ),
            (
                "misaligned 2 MiB",
                |m| {
                    set(
                        m,
                        0x3000 + idx(VA, 1),
                        huge_entry(0x10_1000, RW, CachePolicy::Cached),
                    )
                },
                FaultReason::Malformed,
                1,
            ),
            (
                "cache policy 3",
                |m| {
                    set(
                        m,
                        0x4000 + idx(VA, 0),
                        leaf_entry(0x8000, RW, CachePolicy::Cached) | 3 << 5,
                    )
                },
                FaultReason::Malformed,
                0,
            ),
            (
                "perms in table entry",
                |m| set(m, 0x2000 + idx(VA, 2), table_entry(0x3000) | PTE_READ),
                FaultReason::Malformed,
                2,
            ),
            (
                "cycle to root",
                |m| set(m, 0x2000 + idx(VA, 2), table_entry(ROOT)),
                FaultReason::Malformed,
                2,
            ),
            (
                "self loop",
                |m| set(m, 0x3000 + idx(VA, 1), table_entry(0x3000)),
                FaultReason::Malformed,
                1,
            ),
            (
                "table outside RAM",
                |m| set(m, 0x2000 + idx(VA, 2), table_entry(RAM)),
                FaultReason::BadPhysical,
                1,
            ),
            (
                "table far outside RAM",
                |m| set(m, 0x1000 + idx(VA, 3), table_entry(PTE_ADDR_MASK)),
                FaultReason::BadPhysical,
                2,
            ),
            (
                "page outside RAM",
                |m| {
                    set(
                        m,
                        0x4000 + idx(VA, 0),
                        leaf_entry(RAM + 0x1000, RW, CachePolicy::Cached),
                    )
                },
                FaultReason::BadPhysical,
                0,
            ),
            (
                "huge page past RAM end",
                |m| {
                    set(
                        m,
                        0x3000 + idx(VA, 1),
                        huge_entry(0x40_0000, RW, CachePolicy::Cached),
                    )
                },
                FaultReason::BadPhysical,
                1,
            ),
            (
                "no read permission",
                |m| {
                    set(
                        m,
                        0x4000 + idx(VA, 0),
                        leaf_entry(0x8000, PTE_WRITE, CachePolicy::Cached),
                    )
                },
                FaultReason::Permission,
                0,
            ),
        ];
        for (name, corrupt, reason, level) in cases {
            let m = mem();
            build(&m);
            corrupt(&m);
            let mut tlb = Tlb::new();
            let mut mmu = Mmu {
                mem: &m,
                tlb: &mut tlb,
                space: space(48),
                tap: None,
            };
            assert_eq!(
                mmu.translate(VA + 0x10, Access::Read),
                Err(fault(*reason, *level)),
                "{name}"
            );
            assert!(tlb.is_empty(), "{name}: a fault must not be cached");
        }
    }

    #[test]
    fn root_outside_ram_and_va_out_of_range() {
        let m = mem();
        build(&m);
        let mut s = space(48);
        s.root = RAM - 0x800; // table straddles the end of RAM
        assert_eq!(
            walk(&m, &s, VA + 0x10, Access::Read),
            Err(fault(FaultReason::BadPhysical, 3))
        );
        let out = |va_bits, va| {
            walk(&m, &space(va_bits), va, Access::Write).map_err(|f| (f.reason, f.level))
        };
        assert_eq!(out(40, 1 << 40), Err((FaultReason::OutOfRange, LEVEL_NONE)));
        assert_eq!(out(48, 1 << 48), Err((FaultReason::OutOfRange, LEVEL_NONE)));
        assert_eq!(
            out(48, u64::MAX),
            Err((FaultReason::OutOfRange, LEVEL_NONE))
        );
        // Inside gen 2's range but unmapped: a walk happens.
        assert_eq!(out(48, 1 << 40), Err((FaultReason::NotPresent, 3)));
    }

    #[test]
    fn tlb_is_not_coherent_until_invalidated() {
        let m = mem();
        build(&m);
        let mut tlb = Tlb::new();
        let s = space(48);
        let pa = |tlb: &mut Tlb| {
            Mmu {
                mem: &m,
                tlb,
                space: s,
                tap: None,
            }
            .translate(VA, Access::Read)
            .map(|p| p.pa(VA))
        };
        assert_eq!(pa(&mut tlb), Ok(0x8000));
        // Remap: the TLB keeps the old page.
        set(
            &m,
            0x4000 + idx(VA, 0),
            leaf_entry(0x9000, RW, CachePolicy::Cached),
        );
        assert_eq!(pa(&mut tlb), Ok(0x8000));
        assert_eq!(tlb.stats().hits, 1);
        // An invalidation of another context or range changes nothing.
        assert_eq!(tlb.invalidate(2, 0, 0), 0);
        assert_eq!(tlb.invalidate(1, VA + 0x1000, 0x1000), 0);
        assert_eq!(pa(&mut tlb), Ok(0x8000));
        assert_eq!(tlb.invalidate(1, VA + 0xfff, 1), 1);
        assert_eq!(pa(&mut tlb), Ok(0x9000));
        // Unmap: still cached until a full flush of the context.
        set(&m, 0x4000 + idx(VA, 0), 0);
        assert_eq!(pa(&mut tlb), Ok(0x9000));
        tlb.invalidate(1, 0, 0);
        assert_eq!(
            pa(&mut tlb).map_err(|f| f.reason),
            Err(FaultReason::NotPresent)
        );
        assert_eq!(
            tlb.stats(),
            TlbStats {
                hits: 3,
                misses: 3,
                invalidated: 2
            }
        );
    }

    #[test]
    fn permission_fault_on_a_cached_entry_drops_it() {
        let m = mem();
        build(&m);
        set(
            &m,
            0x4000 + idx(VA, 0),
            leaf_entry(0x8000, PTE_READ, CachePolicy::Cached),
        );
        let mut tlb = Tlb::new();
        let mut mmu = Mmu {
            mem: &m,
            tlb: &mut tlb,
            space: space(48),
            tap: None,
        };
        mmu.translate(VA, Access::Read).unwrap();
        assert_eq!(
            mmu.translate(VA, Access::Write).unwrap_err().reason,
            FaultReason::Permission
        );
        // The driver grants write: the retry walks again and succeeds.
        set(
            &m,
            0x4000 + idx(VA, 0),
            leaf_entry(0x8000, RW, CachePolicy::Cached),
        );
        assert!(mmu.translate(VA, Access::Write).is_ok());
        assert_eq!(tlb.stats().misses, 2);
    }

    #[test]
    fn tlb_capacity_is_bounded_and_sets_evict_round_robin() {
        let m = mem();
        let mut tlb = Tlb::new();
        let map = |va: u64| PageMapping {
            va_base: va,
            pa_base: 0,
            shift: 12,
            perms: RW,
            cache: 0,
        };
        for i in 0..(TLB_SETS * TLB_WAYS * 3) as u64 {
            tlb.insert(1, map(i << 12));
        }
        assert_eq!(tlb.len(), TLB_SETS * TLB_WAYS);
        // The newest entries of each set survive.
        let last = (TLB_SETS * TLB_WAYS * 3) as u64 - 1;
        assert!(tlb.lookup(1, last << 12).is_some());
        assert!(tlb.lookup(1, 0).is_none());
        assert!(tlb.lookup(2, last << 12).is_none(), "tagged by ASID");
        drop(m);
        assert_eq!(tlb.flush(), (TLB_SETS * TLB_WAYS) as u64);
        assert!(tlb.is_empty());
    }
}
