//! The sanitizer's side of an engine's MMU: what a TLB checks on its own
//! thread (no lock on a TLB hit), and the state the TLBs share.
//!
//! Each TLB of an engine (the engine's own, and each compute unit's) may
//! carry a [`TlbSan`]. With it, every cached translation remembers where
//! its leaf entry is in guest memory and what it held ([`EntrySan`]), and
//!
//! * a **hit** re-reads the leaf entry (one load): an entry that no longer
//!   maps the page is `SAN-TLB-STALE`;
//! * a **fill** (page-table walk) checks that every table read and the
//!   page itself are declared GPU memory, and a hit checks the page again
//!   when memory was given back since (`SAN-DMA-UNOWNED`, through the
//!   ownership epoch: one load when nothing changed);
//! * with a page-table check on, a walk hands each entry it reads to
//!   [`super::pt`] (`SAN-PT-*`), which also marks the pages declared as
//!   page tables here;
//! * every walk records the latest *use* of each page it read — as a data
//!   page or as a table at a level and position in an address space —
//!   and an **invalidation** that drops a stale entry checks whether its
//!   page or its leaf table was used for something else after the entry
//!   was cached (`SAN-TLB-INV-ORDER`);
//! * copy chunks and kernel accesses are logged (coalesced) for the
//!   cross-engine hazard check.
//!
//! Findings are raw (addresses, no packet): the command processor drains
//! them after each step and turns them into reports with the packet that
//! made the access.
//!
//! This module knows nothing of the MMU's types; the MMU calls it with
//! plain addresses.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use vgpu_hwif::mmu::Access;
use vgpu_hwif::sanitize::Check;

use super::fasthash::FastMap;
use super::owned::{ObjectHistory, OwnError, Owned, Tag};
use super::report::PteAt;

/// Findings a TLB keeps until they are drained (more are counted, not kept).
pub const MAX_FINDINGS: usize = 64;
/// Access records a TLB keeps between two drains.
pub const MAX_ACCESSES: usize = 4096;
/// Pages whose latest use is remembered (a bound on memory; the oldest
/// half is forgotten when it is reached).
pub const MAX_USES: usize = 1 << 20;

const PAGE: u64 = 4096;

/// The role in which a walk used a guest-physical page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// A mapped page (data).
    Data,
    /// A page table at this level (3 = root).
    Table(u8),
}

/// The latest use of a page by a page-table walk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageUse {
    /// Root of the address space walked.
    pub root: u64,
    /// Address space id (context).
    pub asid: u32,
    /// First VA the page covers in that role (the page's VA for data; the
    /// start of the range the table maps for a table).
    pub va: u64,
    /// Role.
    pub role: Role,
    /// Fill sequence number of the walk (device-wide, increasing).
    pub seq: u64,
    /// Device time of the walk (approximate: the engine's last step).
    pub time_ns: u64,
    /// Engine that walked.
    pub engine: u32,
}

/// What every TLB of the device shares with the sanitizer.
#[derive(Debug, Default)]
pub struct SanShared {
    owned: RwLock<Owned>,
    /// Bumped whenever pages are given back.
    epoch: AtomicU64,
    /// The driver declared memory: DMA ownership is checked.
    tracked: AtomicBool,
    uses: Mutex<FastMap<u64, PageUse>>,
    fills: AtomicU64,
}

impl SanShared {
    /// Nothing declared, nothing used.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether the driver declares its memory (it sent `SAN_MEM`).
    pub fn tracked(&self) -> bool {
        self.tracked.load(Ordering::Acquire)
    }

    /// The ownership epoch.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Declares `pa..pa + size` (4 KiB aligned) as GPU memory.
    pub fn own(&self, pa: u64, size: u64) -> Result<(), OwnError> {
        self.own_tagged(pa, size, false, Tag::default())
    }

    /// Declares `pa..pa + size` (4 KiB aligned) as GPU memory holding
    /// page tables.
    pub fn own_tables(&self, pa: u64, size: u64) -> Result<(), OwnError> {
        self.own_tagged(pa, size, true, Tag::default())
    }

    /// Declares `pa..pa + size` (as page tables if `table`), tagged with
    /// the object the pages belong to.
    pub fn own_tagged(&self, pa: u64, size: u64, table: bool, tag: Tag) -> Result<(), OwnError> {
        self.owned_mut().own(pa, size, table, tag)?;
        self.tracked.store(true, Ordering::Release);
        Ok(())
    }

    /// Gives `pa..pa + size` back. Pages not declared are counted in the
    /// error (the others are given back).
    pub fn release(&self, pa: u64, size: u64) -> Result<(), OwnError> {
        self.release_tagged(pa, size, Tag::default(), 0)
    }

    /// Gives `pa..pa + size` back at device time `now_ns`, as the object
    /// of `tag` (see [`Owned::release`]).
    pub fn release_tagged(
        &self,
        pa: u64,
        size: u64,
        tag: Tag,
        now_ns: u64,
    ) -> Result<(), OwnError> {
        let r = self.owned_mut().release(pa, size, tag, now_ns);
        self.epoch.fetch_add(1, Ordering::AcqRel);
        r
    }

    fn owned_mut(&self) -> std::sync::RwLockWriteGuard<'_, Owned> {
        self.owned.write().unwrap_or_else(PoisonError::into_inner)
    }

    fn owned_ref(&self) -> std::sync::RwLockReadGuard<'_, Owned> {
        self.owned.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Forgets every declaration (the driver went away: virtio reset).
    pub fn clear_ownership(&self) {
        self.owned_mut().clear();
        self.tracked.store(false, Ordering::Release);
        self.epoch.fetch_add(1, Ordering::AcqRel);
    }

    /// Pages declared.
    pub fn owned_pages(&self) -> usize {
        self.owned_ref().len()
    }

    /// The first page of `pa..pa + len` that is not declared, if any
    /// (`None` also when the driver declares nothing).
    pub fn unowned(&self, pa: u64, len: u64) -> Option<u64> {
        if !self.tracked() || len == 0 {
            return None;
        }
        let first = pa / PAGE;
        let last = pa.saturating_add(len - 1) / PAGE;
        let o = self.owned_ref();
        (first..=last).find(|&p| !o.has(p)).map(|p| p * PAGE)
    }

    /// Whether the page at `pa` is declared as a page table, and whether
    /// the driver declares its page tables at all (`SAN_MEM_OWN_TABLES`).
    pub fn table_page(&self, pa: u64) -> (bool, bool) {
        self.owned_ref().table_page(pa)
    }

    /// The object a tagged declaration of the (undeclared) page at `pa`
    /// belonged to, and where it is now.
    pub fn history(&self, pa: u64) -> Option<ObjectHistory> {
        self.owned_ref().history(pa)
    }

    /// The next fill sequence number.
    pub fn next_fill(&self) -> u64 {
        self.fills.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Records a walk's use of the page at `pa`.
    pub fn record_use(&self, pa: u64, u: PageUse) {
        let mut m = self.uses.lock().unwrap_or_else(PoisonError::into_inner);
        if m.len() >= MAX_USES {
            // Forget the older half: only reuse detection is lost.
            let mut seqs: Vec<u64> = m.values().map(|u| u.seq).collect();
            seqs.sort_unstable();
            let cut = seqs.get(seqs.len() / 2).copied().unwrap_or(0);
            m.retain(|_, u| u.seq > cut);
        }
        m.insert(pa / PAGE, u);
    }

    /// The latest recorded use of the page at `pa`.
    pub fn last_use(&self, pa: u64) -> Option<PageUse> {
        self.uses
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&(pa / PAGE))
            .copied()
    }

    /// Forgets every recorded use (device reset).
    pub fn clear_uses(&self) {
        self.uses
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }
}

/// What a cached translation remembers for the sanitizer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EntrySan {
    /// Guest-physical address of the leaf entry (0: unknown).
    pub pte_pa: u64,
    /// The leaf entry's bits when cached.
    pub pte: u64,
    /// Root of the address space.
    pub root: u64,
    /// Fill sequence number.
    pub fill: u64,
    /// Device time of the fill (approximate).
    pub filled_ns: u64,
    /// Ownership epoch at which the page was last found declared.
    pub epoch: u64,
    /// Level of the leaf entry (0: 4 KiB page, 1: 2 MiB page).
    pub level: u8,
}

/// One entry a walk read that breaks a page-table rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PtFinding {
    /// The check.
    pub check: Check,
    /// Its sub-kind (hwif's `pt_invalid_table`, `pt_level`, `pt_unowned`; 0 for `SAN-PT-ALIGN`).
    pub kind: u32,
    /// Address space.
    pub asid: u32,
    /// VA walked.
    pub va: u64,
    /// The access that walked.
    pub access: Access,
    /// The entry.
    pub at: PteAt,
    /// The page the finding is about: the table or page the entry names,
    /// or its first undeclared page.
    pub target: u64,
}

impl PtFinding {
    /// What makes it the same finding as an earlier one of its context:
    /// the check and the entry.
    pub const fn key(&self) -> (u32, u64, u64) {
        (self.check as u32, self.asid as u64, self.at.entry_addr)
    }
}

/// A raw finding of a TLB, drained by the command processor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finding {
    /// A hit whose leaf entry changed.
    Stale {
        /// Address space.
        asid: u32,
        /// VA accessed.
        va: u64,
        /// The page the TLB still translated to.
        pa: u64,
        /// Where the leaf entry is.
        pte_pa: u64,
        /// The entry when cached.
        cached: u64,
        /// The entry in memory now.
        now: u64,
        /// The access.
        access: Access,
        /// When the translation was cached.
        filled_ns: u64,
    },
    /// An access (or a table read) to memory not declared.
    Unowned {
        /// Address space.
        asid: u32,
        /// VA accessed.
        va: u64,
        /// The undeclared page.
        pa: u64,
        /// The access.
        access: Access,
        /// `Some(level)` if the page is a page table the walk read.
        table: Option<u8>,
    },
    /// A stale entry dropped by an invalidation whose page (or leaf table)
    /// was used for something else after the entry was cached.
    InvOrder {
        /// Address space of the dropped entry.
        asid: u32,
        /// Its VA.
        va: u64,
        /// Its page.
        pa: u64,
        /// Whether the reused page is the leaf table (else the data page).
        table: bool,
        /// The reuse.
        reuse: PageUse,
        /// When the dropped entry was cached.
        filled_ns: u64,
    },
    /// A page-table entry a walk read breaks a page-table rule.
    Pt(PtFinding),
}

impl Finding {
    /// The check this finding belongs to.
    pub const fn check(&self) -> Check {
        match self {
            Finding::Stale { .. } => Check::TlbStale,
            Finding::Unowned { .. } => Check::DmaUnowned,
            Finding::InvOrder { .. } => Check::TlbInvOrder,
            Finding::Pt(p) => p.check,
        }
    }

    /// The context (address space) it is about.
    pub const fn asid(&self) -> u32 {
        match *self {
            Finding::Stale { asid, .. }
            | Finding::Unowned { asid, .. }
            | Finding::InvOrder { asid, .. }
            | Finding::Pt(PtFinding { asid, .. }) => asid,
        }
    }

    /// What makes it the same finding as an earlier one of its context
    /// (reported once): the page for a stale or misordered translation,
    /// the physical page for an undeclared one, the entry for a page-table
    /// finding.
    pub const fn key(&self) -> (u32, u64, u64) {
        match *self {
            Finding::Pt(p) => p.key(),
            Finding::Stale { asid, va, .. } => (3, asid as u64, va >> 12),
            Finding::Unowned { asid, pa, .. } => (10, asid as u64, pa >> 12),
            Finding::InvOrder { asid, va, .. } => (4, asid as u64, va >> 12),
        }
    }
}

/// One data access an engine made, for the hazard check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AccessRec {
    /// VA of the first byte.
    pub va: u64,
    /// Guest-physical address of the first byte.
    pub pa: u64,
    /// Bytes (within one page).
    pub len: u64,
    /// A write (else a read).
    pub write: bool,
}

/// The sanitizer state of one TLB.
#[derive(Debug)]
pub struct TlbSan {
    /// What the TLBs share.
    pub shared: Arc<SanShared>,
    /// Checks on (`Check::bit`s).
    pub checks: u32,
    /// Findings not drained yet.
    pub findings: Vec<Finding>,
    /// Findings dropped because the buffer was full.
    pub dropped: u64,
    /// Data accesses not drained yet (hazard check).
    pub accesses: Vec<AccessRec>,
    /// Device time of the engine's current step.
    pub now_ns: u64,
    /// Engine.
    pub engine: u32,
}

impl TlbSan {
    /// A TLB's sanitizer state for engine `engine`.
    pub fn new(shared: Arc<SanShared>, engine: u32, checks: u32) -> Self {
        TlbSan {
            shared,
            checks,
            findings: Vec::new(),
            dropped: 0,
            accesses: Vec::new(),
            now_ns: 0,
            engine,
        }
    }

    /// Whether `c` is on.
    pub fn on(&self, c: Check) -> bool {
        self.checks & c.bit() != 0
    }

    /// Keeps a finding.
    pub fn push(&mut self, f: Finding) {
        if self.findings.len() < MAX_FINDINGS {
            self.findings.push(f);
        } else {
            self.dropped += 1;
        }
    }

    /// Logs a data access, merged with the previous one when it continues
    /// it (same page, same direction, adjacent or overlapping).
    pub fn access(&mut self, va: u64, pa: u64, len: u64, write: bool) {
        if !self.on(Check::XengineHazard) || len == 0 {
            return;
        }
        if let Some(last) = self.accesses.last_mut() {
            let same_page = last.pa / PAGE == pa / PAGE;
            let last_end = last.pa + last.len;
            if same_page && last.write == write && pa >= last.pa && pa <= last_end {
                let end = (pa + len).max(last_end);
                last.len = end - last.pa;
                return;
            }
        }
        if self.accesses.len() < MAX_ACCESSES {
            self.accesses.push(AccessRec { va, pa, len, write });
        }
    }

    /// Checks a walk's table reads and page for ownership and records
    /// their use. `tables` are (table PA, level); `page`/`page_len` the
    /// mapped page. Returns the entry metadata to cache.
    #[allow(clippy::too_many_arguments)]
    pub fn on_fill(
        &mut self,
        asid: u32,
        root: u64,
        va: u64,
        access: Access,
        tables: &[(u64, u8)],
        page: u64,
        page_len: u64,
        pte_pa: u64,
        pte: u64,
        level: u8,
    ) -> EntrySan {
        let fill = self.shared.next_fill();
        if self.on(Check::DmaUnowned) {
            // The entries naming the other tables and the page were
            // checked at the walk (SAN-PT-UNOWNED): the root is left.
            let at_walk = self.on(Check::PtUnowned);
            for &(t, level) in tables {
                if at_walk && u32::from(level) + 1 < vgpu_hwif::mmu::LEVELS {
                    continue;
                }
                if let Some(p) = self.shared.unowned(t, PAGE) {
                    self.push(Finding::Unowned {
                        asid,
                        va,
                        pa: p,
                        access,
                        table: Some(level),
                    });
                }
            }
            if let Some(p) = self.shared.unowned(page, page_len).filter(|_| !at_walk) {
                self.push(Finding::Unowned {
                    asid,
                    va,
                    pa: p,
                    access,
                    table: None,
                });
            }
        }
        if self.on(Check::TlbInvOrder) {
            for &(t, level) in tables {
                let span_shift = 12 + 9 * (u32::from(level) + 1);
                let base = if span_shift >= 64 {
                    0
                } else {
                    va >> span_shift << span_shift
                };
                self.shared.record_use(
                    t,
                    PageUse {
                        root,
                        asid,
                        va: base,
                        role: Role::Table(level),
                        seq: fill,
                        time_ns: self.now_ns,
                        engine: self.engine,
                    },
                );
            }
            self.shared.record_use(
                page,
                PageUse {
                    root,
                    asid,
                    va: va & !(page_len.max(1) - 1),
                    role: Role::Data,
                    seq: fill,
                    time_ns: self.now_ns,
                    engine: self.engine,
                },
            );
        }
        EntrySan {
            pte_pa,
            pte,
            root,
            fill,
            filled_ns: self.now_ns,
            epoch: self.shared.epoch(),
            level,
        }
    }

    /// Checks a hit: `now` is the leaf entry as it is in memory, `same`
    /// whether it still maps the cached page with at least the cached
    /// permissions. Updates the entry's ownership epoch.
    #[allow(clippy::too_many_arguments)]
    pub fn on_hit(
        &mut self,
        asid: u32,
        va: u64,
        access: Access,
        e: &mut EntrySan,
        page: u64,
        page_len: u64,
        now: u64,
        same: bool,
    ) {
        if e.pte_pa != 0 && !same && self.on(Check::TlbStale) {
            self.push(Finding::Stale {
                asid,
                va,
                pa: page,
                pte_pa: e.pte_pa,
                cached: e.pte,
                now,
                access,
                filled_ns: e.filled_ns,
            });
            // Reported once per cached entry.
            e.pte_pa = 0;
        }
        if self.on(Check::DmaUnowned) && self.shared.tracked() {
            let epoch = self.shared.epoch();
            if e.epoch != epoch {
                if let Some(p) = self.shared.unowned(page, page_len) {
                    self.push(Finding::Unowned {
                        asid,
                        va,
                        pa: p,
                        access,
                        table: None,
                    });
                } else {
                    e.epoch = epoch;
                }
            }
        }
    }

    /// An invalidation dropped a cached entry of `asid` for `va` → `pa`
    /// whose leaf entry in memory is now `now` (`stale`: it no longer maps
    /// the page). Checks whether the page or its leaf table was reused.
    pub fn on_drop(&mut self, asid: u32, va: u64, pa: u64, e: &EntrySan, stale: bool) {
        if !stale || !self.on(Check::TlbInvOrder) || e.fill == 0 {
            return;
        }
        let data_reused = self
            .shared
            .last_use(pa)
            .filter(|u| u.seq > e.fill && (u.root != e.root || matches!(u.role, Role::Table(_))));
        // The leaf table is reused unless its latest use is the same table
        // in the same place (contexts sharing an address space walk it
        // too).
        let level = e.level;
        let span = 12 + 9 * (u32::from(level) + 1);
        let table_va = va >> span << span;
        let table_reused = if e.pte_pa == 0 {
            None
        } else {
            self.shared.last_use(e.pte_pa).filter(|u| {
                u.seq > e.fill
                    && (u.root != e.root || u.role != Role::Table(level) || u.va != table_va)
            })
        };
        if let Some(reuse) = table_reused {
            self.push(Finding::InvOrder {
                asid,
                va,
                pa,
                table: true,
                reuse,
                filled_ns: e.filled_ns,
            });
        } else if let Some(reuse) = data_reused {
            self.push(Finding::InvOrder {
                asid,
                va,
                pa,
                table: false,
                reuse,
                filled_ns: e.filled_ns,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ownership_is_counted_per_page() {
        let s = SanShared::new();
        assert!(!s.tracked());
        assert_eq!(s.unowned(0x1000, 1), None, "untracked: nothing checked");
        s.own(0x10_0000, 0x2000).unwrap();
        s.own(0x10_1000, 0x1000).unwrap();
        assert!(s.tracked());
        assert_eq!(s.unowned(0x10_0000, 0x2000), None);
        assert_eq!(s.unowned(0x10_1ff0, 0x20), Some(0x10_2000));
        let e0 = s.epoch();
        s.release(0x10_0000, 0x2000).unwrap();
        assert!(s.epoch() > e0);
        assert_eq!(s.unowned(0x10_0000, 1), Some(0x10_0000));
        assert_eq!(s.unowned(0x10_1000, 0x1000), None, "declared twice");
        assert_eq!(
            s.release(0x10_1000, 0x3000),
            Err(OwnError::NotOwned {
                pa: 0x10_2000,
                pages: 2
            })
        );
        assert_eq!(s.unowned(0x10_1000, 1), Some(0x10_1000));
        assert!(matches!(
            s.own(0x1001, 0x1000),
            Err(OwnError::Misaligned { .. })
        ));
        assert!(matches!(
            s.own(!0xfff, 0x2000),
            Err(OwnError::Misaligned { .. })
        ));
        s.clear_ownership();
        assert!(!s.tracked());
        assert_eq!(s.owned_pages(), 0);
    }

    #[test]
    fn accesses_coalesce_per_page_and_direction() {
        let mut t = TlbSan::new(Arc::new(SanShared::new()), 0, Check::XengineHazard.bit());
        t.access(0x1000, 0x8000, 32, false);
        t.access(0x1020, 0x8020, 32, false);
        t.access(0x1040, 0x8040, 32, true);
        t.access(0x2000, 0x9000, 64, true);
        t.access(0x2040, 0x9040, 64, true);
        assert_eq!(
            t.accesses,
            vec![
                AccessRec {
                    va: 0x1000,
                    pa: 0x8000,
                    len: 64,
                    write: false
                },
                AccessRec {
                    va: 0x1040,
                    pa: 0x8040,
                    len: 32,
                    write: true
                },
                AccessRec {
                    va: 0x2000,
                    pa: 0x9000,
                    len: 128,
                    write: true
                },
            ]
        );
        let mut off = TlbSan::new(Arc::new(SanShared::new()), 0, 0);
        off.access(0, 0, 4, true);
        assert!(off.accesses.is_empty(), "hazard check off: nothing logged");
    }
}
