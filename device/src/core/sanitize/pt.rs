//! The page-table checks (`SAN-PT-*`): every entry a page-table walk reads
//! is checked as it is read, against hwif's entry format
//! ([`vgpu_hwif::mmu::Pte`], the same in both generations) and against the
//! memory the driver declared with `SAN_MEM`.
//!
//! | id | the entry | evidence of a mistake |
//! |---|---|---|
//! | `SAN-PT-INVALID-TABLE` | not valid, level 3..1 | its address is a page the driver declared as a page table (`SAN_MEM_OWN_TABLES`); a driver that declares no tables: the entry is an address alone (no other bit) of declared memory |
//! | `SAN-PT-LEVEL` | valid | HUGE outside level 1; leaf bits (R, W, X, cache) in a table entry; at level 0, no permissions and the address of a declared page table |
//! | `SAN-PT-ALIGN` | valid 2 MiB leaf | its page is not 2 MiB aligned |
//! | `SAN-PT-UNOWNED` | valid, well formed | the table or page it names is not declared (or was given back) |
//!
//! An entry that is simply zero, or invalid with an address that is not a
//! page table, is a VA the driver has not mapped (yet): a fault it may
//! serve, not a mistake. Each entry gives at most one finding; findings go
//! through the TLB's buffer ([`super::tlb::Finding::Pt`]) and the report
//! path of the other TLB checks (once per context and entry, suppressed on
//! a context a fault was injected into).
//!
//! The state machine is the ownership one of [`super::tlb`] (pages
//! declared → given back), with a page-table mark per page: the checks
//! keep no state of their own. They run only in walks (a TLB hit does not
//! walk), and only on the TLBs the sanitizer equipped for the slice: off,
//! they cost nothing.
//!
//! With `SAN-PT-UNOWNED` on, `SAN-DMA-UNOWNED` leaves the tables below
//! the root and the page of a walk to it (the same finding, made at the
//! entry); it keeps the root, and data accesses through cached
//! translations whose pages were given back later.

use vgpu_hwif::describe::PteText;
use vgpu_hwif::mmu::{Access, Pte, PteKind, HUGE_PAGE_SHIFT, PTE_HUGE, PTE_TABLE_MUST_BE_ZERO};
use vgpu_hwif::sanitize::{pt_invalid_table, pt_level, pt_unowned, Check};

use super::report::{PteAt, Report, Touch};
use super::tlb::{Finding, PtFinding, SanShared, TlbSan};

const PAGE: u64 = 4096;

/// The page-table checks' bits.
pub const PT_CHECKS: u32 = Check::PtInvalidTable.bit()
    | Check::PtLevel.bit()
    | Check::PtAlign.bit()
    | Check::PtUnowned.bit();

/// Checks entry `index` of the table at `table`, of `level` (3 = root),
/// which holds `bits`, read by a walk of `asid` for `va`. `checks` are the
/// checks on (`Check::bit`s).
#[allow(clippy::too_many_arguments)]
pub fn check_entry(
    shared: &SanShared,
    checks: u32,
    asid: u32,
    va: u64,
    access: Access,
    level: u32,
    table: u64,
    index: usize,
    bits: u64,
) -> Option<PtFinding> {
    let on = |c: Check| checks & c.bit() != 0;
    let pte = Pte::from_bits(bits);
    let addr = pte.address();
    let at = PteAt {
        level: u8::try_from(level).ok()?,
        index: u16::try_from(index).ok()?,
        entry_addr: table.checked_add(8 * u64::try_from(index).ok()?)?,
        value: bits,
    };
    let found = |check, kind, target| PtFinding {
        check,
        kind,
        asid,
        va,
        access,
        at,
        target,
    };
    if !pte.is_valid() {
        // A zero entry, a leaf's level or a 2 MiB leaf without V: an
        // unmapped VA, whatever the driver meant.
        if level == 0 || addr == 0 || pte.is_huge() || !on(Check::PtInvalidTable) {
            return None;
        }
        if !shared.tracked() {
            return None;
        }
        let (is_table, declares_tables) = shared.table_page(addr);
        let kind = if declares_tables {
            is_table.then_some(pt_invalid_table::DECLARED_TABLE)?
        } else {
            (bits == addr && shared.unowned(addr, PAGE).is_none())
                .then_some(pt_invalid_table::BARE_ADDRESS)?
        };
        return Some(found(Check::PtInvalidTable, kind, addr));
    }
    let huge = pte.is_huge();
    let leaf_bits = bits & PTE_TABLE_MUST_BE_ZERO & !PTE_HUGE;
    if on(Check::PtLevel) {
        if huge && level != 1 {
            return Some(found(Check::PtLevel, pt_level::HUGE_OUTSIDE_L1, addr));
        }
        if level > 0 && !huge && leaf_bits != 0 {
            return Some(found(Check::PtLevel, pt_level::LEAF_AT_TABLE_LEVEL, addr));
        }
        if level == 0 && leaf_bits == 0 && shared.tracked() && shared.table_page(addr).0 {
            return Some(found(Check::PtLevel, pt_level::TABLE_AT_L0, addr));
        }
    }
    if on(Check::PtAlign) && level == 1 && huge && addr & ((1 << HUGE_PAGE_SHIFT) - 1) != 0 {
        return Some(found(Check::PtAlign, 0, addr));
    }
    if on(Check::PtUnowned) && shared.tracked() {
        let (page, len, kind) = match pte.decode(level).ok()? {
            PteKind::Table(next) => (next, PAGE, pt_unowned::TABLE),
            PteKind::Leaf(l) => (l.page, 1u64 << l.shift, pt_unowned::LEAF),
        };
        let p = shared.unowned(page, len)?;
        return Some(found(Check::PtUnowned, kind, p));
    }
    None
}

impl TlbSan {
    /// Whether a page-table check is on (a walk then calls
    /// [`TlbSan::on_entry`] with each entry it reads).
    pub fn pt_on(&self) -> bool {
        self.checks & PT_CHECKS != 0
    }

    /// A walk of `asid` for `va` read entry `index` of the table at
    /// `table` of `level`, holding `bits`: the page-table checks
    /// (this module).
    #[allow(clippy::too_many_arguments)]
    pub fn on_entry(
        &mut self,
        asid: u32,
        va: u64,
        access: Access,
        level: u32,
        table: u64,
        index: usize,
        bits: u64,
    ) {
        let f = check_entry(
            &self.shared,
            self.checks,
            asid,
            va,
            access,
            level,
            table,
            index,
            bits,
        );
        if let Some(f) = f {
            self.push(Finding::Pt(f));
        }
    }
}

/// Turns a finding of engine `engine` into its report at device time
/// `now`.
pub fn report(f: &PtFinding, engine: u32, now: u64) -> Report {
    let PteAt {
        level,
        index,
        entry_addr,
        value,
    } = f.at;
    let table = entry_addr.saturating_sub(8 * u64::from(index));
    let target = f.target;
    let what = match (f.check, f.kind) {
        (Check::PtInvalidTable, pt_invalid_table::DECLARED_TABLE) => format!(
            "no valid bit, but its address {target:#x} is a page table you declared (SAN_MEM_OWN_TABLES): the table was linked without its valid bit, and the walk stops here (NOT_PRESENT)"
        ),
        (Check::PtInvalidTable, _) => format!(
            "no valid bit, but it holds the address {target:#x} of memory you declared and nothing else: a table entry without its valid bit, and the walk stops here (NOT_PRESENT)"
        ),
        (Check::PtLevel, pt_level::HUGE_OUTSIDE_L1) => format!(
            "HUGE (a 2 MiB leaf) at level {level}: only level-1 entries map 2 MiB pages (the walk faults MALFORMED)"
        ),
        (Check::PtLevel, pt_level::LEAF_AT_TABLE_LEVEL) => format!(
            "leaf bits (permissions or cache policy) at level {level}, where the entry must be a table entry{} (the walk faults MALFORMED)",
            if level == 1 { " or a 2 MiB leaf with HUGE" } else { "" }
        ),
        (Check::PtLevel, _) => format!(
            "a table pointer at level 0: its address {target:#x} is a page table you declared, but level-0 entries map 4 KiB pages (this one with no permissions)"
        ),
        (Check::PtAlign, _) => format!(
            "a 2 MiB leaf at {target:#x}, which is not 2 MiB aligned (the walk faults MALFORMED)"
        ),
        (_, pt_unowned::TABLE) => format!(
            "it points to a level-{} table at {target:#x} that you have not declared as GPU memory (SAN_MEM) or already gave back",
            level.saturating_sub(1)
        ),
        _ => format!(
            "it maps page {target:#x}, which you have not declared as GPU memory (SAN_MEM) or already gave back"
        ),
    };
    let mut r = Report::new(
        f.check,
        now,
        format!(
            "your PTE for va {:#x} at level {level} (entry {index} of table {table:#x}, at {entry_addr:#x}) holds {value:#x} [{}]: {what}",
            f.va,
            PteText { level, bits: value }
        ),
    )
    .on(f.asid, engine)
    .kind(f.kind);
    r.touch = Some(Touch {
        access: f.access,
        va: f.va,
        size: 0,
        pa: target,
    });
    r.pte = Some(f.at);
    r.detail = [entry_addr, value, u64::from(level), u64::from(index)];
    r
}

#[cfg(test)]
mod tests;
