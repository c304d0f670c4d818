//! The per-engine TLB (see the MMU's documentation): a set-associative
//! array of 4 KiB and one of 2 MiB translations, tagged by address space.

use super::*;

/// Sets of the 4 KiB part of a TLB.
pub const TLB_SETS: usize = 512;
/// Sets of the 2 MiB part of a TLB.
pub const TLB_HUGE_SETS: usize = 32;
/// Ways per set.
pub const TLB_WAYS: usize = 4;

#[derive(Clone, Copy, Debug)]
pub(super) struct Entry {
    pub(super) asid: u32,
    pub(super) map: PageMapping,
    /// What the sanitizer remembers of the fill (zero without one).
    pub(super) san: EntrySan,
}

#[derive(Debug)]
pub(super) struct Array {
    pub(super) entries: Vec<Option<Entry>>,
    pub(super) victim: Vec<u8>,
    pub(super) sets: usize,
    pub(super) shift: u32,
}

impl Array {
    pub(super) fn new(sets: usize, shift: u32) -> Self {
        Array {
            entries: vec![None; sets * TLB_WAYS],
            victim: vec![0; sets],
            sets,
            shift,
        }
    }

    pub(super) fn set_of(&self, asid: u32, va: u64) -> usize {
        // Multiplicative hashing spreads aligned and strided page numbers
        // over all sets (sets is a power of two).
        let key = (va >> self.shift) ^ (u64::from(asid) << 40);
        let h = key.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        (h >> (64 - self.sets.trailing_zeros())) as usize & (self.sets - 1)
    }

    pub(super) fn ways(&self, set: usize) -> std::ops::Range<usize> {
        set * TLB_WAYS..(set + 1) * TLB_WAYS
    }

    pub(super) fn lookup(&self, asid: u32, va: u64) -> Option<PageMapping> {
        let set = self.set_of(asid, va);
        self.entries
            .get(self.ways(set))?
            .iter()
            .flatten()
            .find(|e| e.asid == asid && e.map.contains(va))
            .map(|e| e.map)
    }

    pub(super) fn lookup_mut(&mut self, asid: u32, va: u64) -> Option<&mut Entry> {
        let set = self.set_of(asid, va);
        let ways = self.ways(set);
        self.entries
            .get_mut(ways)?
            .iter_mut()
            .flatten()
            .find(|e| e.asid == asid && e.map.contains(va))
    }

    pub(super) fn insert(&mut self, asid: u32, map: PageMapping, san: EntrySan) {
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

    pub(super) fn retain(&mut self, mut keep: impl FnMut(&Entry) -> bool) -> u64 {
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
    pub(super) small: Array,
    pub(super) huge: Array,
    pub(super) stats: TlbStats,
    /// A translation kept past its invalidation (fault injection), served
    /// once.
    pub(super) stale: Option<Entry>,
    /// The sanitizer's checks of this TLB, when it is on.
    pub(super) san: Option<Box<TlbSan>>,
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

    pub(super) fn insert_with(&mut self, asid: u32, map: PageMapping, san: EntrySan) {
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
    pub(super) fn take_stale(&mut self, asid: u32, va: u64) -> Option<PageMapping> {
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

    pub(super) fn retain_all(&mut self, mut keep: impl FnMut(&Entry) -> bool) -> u64 {
        let n = self.small.retain(&mut keep) + self.huge.retain(&mut keep);
        self.stats.invalidated += n;
        n
    }
}

/// Whether `e` is a translation of `asid` overlapping `va..va + size`
/// (`size` 0: any page of `asid`).
pub(super) fn in_range(e: &Entry, asid: u32, va: u64, size: u64) -> bool {
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
