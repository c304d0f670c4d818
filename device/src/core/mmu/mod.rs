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
mod tlb;

pub use tlb::{Tlb, TlbStats, TLB_HUGE_SETS, TLB_SETS, TLB_WAYS};

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
mod tests;
