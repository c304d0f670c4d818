//! The page-table checks through the whole device, both generations: the
//! testkit `Driver` builds page tables with one mistake each, and the
//! walk of the access through it gets exactly that report (VA, level,
//! entry); the same tables built right get none.

use std::time::Duration;

use vgpu_hwif::mmu::{
    huge_entry, leaf_entry, level_index, table_entry, Access, CachePolicy, PTE_READ, PTE_WRITE,
};
use vgpu_hwif::packet::Packet;
use vgpu_hwif::proto::{engine::COPY, SAN_MEM_OWN_TABLES};
use vgpu_hwif::sanitize::{pt_invalid_table, pt_level, pt_unowned, Check, SanReport};
use vm_memory::{GuestAddress, GuestMemoryMmap};

use super::super::tlb::SanShared;
use super::super::{SanConfig, ALL_CHECKS};
use super::*;
use crate::config::{DeviceConfig, Generation};
use crate::testkit::{Driver, GpuContext, InProcess, PhysAlloc};

type D = Driver<InProcess>;

const T: Duration = Duration::from_secs(10);
const RW: u64 = PTE_READ | PTE_WRITE;
const RAM: u64 = 32 << 20;
const ALLOC: u64 = 0x10_0000;
const SEM: u64 = 0x40_0000;
const SRC: u64 = 0x20_0000;
const DST: u64 = 0x30_0000;
/// A page below the memory the driver allocates from: never declared.
const UNDECLARED: u64 = 0x8000;

/// A device of `generation` with every check on, the driver's memory
/// declared (its page-table pool as tables), and a context with a copy
/// ring that has copied SRC to DST once, cleanly.
fn rig(generation: Generation) -> (D, GpuContext) {
    let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), RAM as usize)]).unwrap();
    let dev = InProcess::new(DeviceConfig::new(generation, 1).unwrap(), &mem);
    dev.device.gpu().sanitizer.configure(&SanConfig {
        checks: ALL_CHECKS,
        fetch_delay: Duration::from_micros(100),
        ..SanConfig::default()
    });
    let mut d = Driver::new(dev, mem, PhysAlloc::new(ALLOC, RAM - ALLOC)).unwrap();
    let all: Vec<(u64, u64)> = (ALLOC..RAM)
        .step_by(1 << 20)
        .map(|p| (p, 1 << 20))
        .collect();
    d.san_mem(true, &all).unwrap();
    let mut c = d.context(1, 1, 0).unwrap();
    d.san_mem_op(SAN_MEM_OWN_TABLES, &[c.pt.pool()]).unwrap();
    d.ring(&mut c, COPY).unwrap();
    d.buffer(&mut c, SEM, 0x1000, RW).unwrap();
    d.buffer(&mut c, SRC, 0x1000, RW).unwrap();
    d.buffer(&mut c, DST, 0x1000, RW).unwrap();
    copy_to(&mut d, &mut c, DST);
    assert_eq!(reports(&d), 0, "the clean start reports nothing");
    (d, c)
}

fn reports(d: &D) -> u64 {
    d.transport.device.gpu().sanitizer.counts().1
}

/// Copies 64 bytes of SRC to `dst` and waits until the ring settles
/// (done, or stopped by the fault the mistake causes).
fn copy_to(d: &mut D, c: &mut GpuContext, dst: u64) {
    d.submit(
        c,
        COPY,
        &[Packet::Copy {
            src: SRC,
            dst,
            size: 64,
        }],
    )
    .unwrap();
    d.settle(c, COPY, T).unwrap();
}

/// The only report made: it is `check` of sub-kind `kind` about the
/// entry at `entry_addr` (index `index` at `level`) for `va`.
fn only_report(
    d: &mut D,
    check: Check,
    kind: u32,
    va: u64,
    level: u32,
    entry_addr: u64,
) -> SanReport {
    assert_eq!(reports(d), 1, "exactly one report");
    let r = d.san_report(1).unwrap();
    assert_eq!(r.check(), Some(check), "{}", r.check);
    assert_eq!(r.kind(), kind);
    assert_eq!((r.ctx_id, r.va, r.access), (1, va, Access::Write as u32));
    let index = level_index(va, level) as u64;
    assert_eq!(r.detail[0], entry_addr, "the entry's address");
    assert_eq!((r.detail[2], r.detail[3]), (u64::from(level), index));
    let rep = d
        .transport
        .device
        .gpu()
        .sanitizer
        .log()
        .get(1)
        .cloned()
        .unwrap();
    let json = rep.json();
    for f in [
        format!("\"va\":{va}"),
        format!("\"level\":{level}"),
        format!("\"entry\":{index}"),
        format!("\"entry_addr\":{entry_addr}"),
        format!("\"value\":{}", r.detail[1]),
    ] {
        assert!(json.contains(&f), "{f} in {json}");
    }
    let line = rep.line();
    assert!(
        line.contains(&format!(
            "your PTE for va {va:#x} at level {level} (entry {index} of table"
        )),
        "{line}"
    );
    if std::env::var_os("VGPU_SAN_PRINT").is_some() {
        eprintln!("sanitizer: {line}");
    }
    r
}

const GENS: [Generation; 2] = [Generation::Gen1, Generation::Gen2];

#[test]
fn table_linked_without_its_valid_bit_is_reported() {
    for g in GENS {
        let (mut d, mut c) = rig(g);
        // The mistake: a new level-0 table, filled right, linked by its
        // bare address.
        let va = 0x60_0000;
        let l0 = c.pt.new_table(&d.mem).unwrap();
        let page = d.alloc.page(&d.mem).unwrap();
        let leaf = leaf_entry(page, RW, CachePolicy::Cached);
        crate::testkit::write_u64(&d.mem, l0 + 8 * level_index(va, 0) as u64, leaf).unwrap();
        let at = c.pt.set_entry(&d.mem, va, 1, l0).unwrap();
        copy_to(&mut d, &mut c, va);
        let r = only_report(
            &mut d,
            Check::PtInvalidTable,
            pt_invalid_table::DECLARED_TABLE,
            va,
            1,
            at,
        );
        assert_eq!((r.detail[1], r.pa), (l0, l0));
    }
}

#[test]
fn mistakes_on_the_walk_of_a_command_fetch_are_reported() {
    for g in GENS {
        // The command buffer's table linked without its valid bit: the
        // engine faults fetching it, before any packet step.
        let (mut d, mut c) = rig(g);
        let va = 0x60_0000;
        let l0 = c.pt.new_table(&d.mem).unwrap();
        let page = d.alloc.page(&d.mem).unwrap();
        let leaf = leaf_entry(
            page,
            PTE_READ | vgpu_hwif::mmu::PTE_EXEC,
            CachePolicy::Cached,
        );
        crate::testkit::write_u64(&d.mem, l0 + 8 * level_index(va, 0) as u64, leaf).unwrap();
        let at = c.pt.set_entry(&d.mem, va, 1, l0).unwrap();
        d.submit(&mut c, COPY, &[Packet::Indirect { va, size: 8 }])
            .unwrap();
        d.settle(&c, COPY, T).unwrap();
        assert_eq!(reports(&d), 1, "exactly one report");
        let r = d.san_report(1).unwrap();
        assert_eq!(r.check(), Some(Check::PtInvalidTable));
        assert_eq!(
            (r.va, r.access, r.detail[0], r.detail[2]),
            (va, Access::Execute as u32, at, 1)
        );
    }
}

#[test]
fn entries_of_the_wrong_level_are_reported() {
    for g in GENS {
        // A 2 MiB leaf at level 2.
        let (mut d, mut c) = rig(g);
        let va = 0x4000_0000;
        let page = d.alloc.alloc(2 << 20, 2 << 20).unwrap();
        let at =
            c.pt.set_entry(&d.mem, va, 2, huge_entry(page, RW, CachePolicy::Cached))
                .unwrap();
        copy_to(&mut d, &mut c, va);
        only_report(&mut d, Check::PtLevel, pt_level::HUGE_OUTSIDE_L1, va, 2, at);

        // A 4 KiB leaf in the root.
        let (mut d, mut c) = rig(g);
        let va = 0x80_0000_0000;
        let page = d.alloc.page(&d.mem).unwrap();
        let at =
            c.pt.set_entry(&d.mem, va, 3, leaf_entry(page, RW, CachePolicy::Cached))
                .unwrap();
        copy_to(&mut d, &mut c, va);
        only_report(
            &mut d,
            Check::PtLevel,
            pt_level::LEAF_AT_TABLE_LEVEL,
            va,
            3,
            at,
        );

        // A table pointer at level 0.
        let (mut d, mut c) = rig(g);
        let va = DST + 0x1_0000;
        let t = c.pt.new_table(&d.mem).unwrap();
        let at = c.pt.set_entry(&d.mem, va, 0, table_entry(t)).unwrap();
        copy_to(&mut d, &mut c, va);
        only_report(&mut d, Check::PtLevel, pt_level::TABLE_AT_L0, va, 0, at);
    }
}

#[test]
fn misaligned_2m_leaf_is_reported() {
    for g in GENS {
        let (mut d, mut c) = rig(g);
        let va = 0x80_0000;
        let page = d.alloc.alloc(4 << 20, 2 << 20).unwrap() + 0x1000;
        let at =
            c.pt.set_entry(&d.mem, va, 1, huge_entry(page, RW, CachePolicy::Cached))
                .unwrap();
        copy_to(&mut d, &mut c, va);
        let r = only_report(&mut d, Check::PtAlign, 0, va, 1, at);
        assert_eq!(r.pa, page);
    }
}

#[test]
fn entries_naming_undeclared_memory_are_reported_at_the_walk() {
    for g in GENS {
        // A leaf naming a page never declared.
        let (mut d, mut c) = rig(g);
        let va = DST + 0x2_0000;
        c.pt.map_4k(&d.mem, va, UNDECLARED, RW).unwrap();
        let at = c.pt.entry_addr(va, 0).unwrap();
        copy_to(&mut d, &mut c, va);
        let r = only_report(&mut d, Check::PtUnowned, pt_unowned::LEAF, va, 0, at);
        assert_eq!(r.pa, UNDECLARED, "and no SAN-DMA-UNOWNED for the same page");

        // A table given back while an entry still links it.
        let (mut d, mut c) = rig(g);
        let va = 0xa0_0000;
        d.buffer(&mut c, va, 0x1000, RW).unwrap();
        let l0 = c.pt.entry_addr(va, 0).unwrap() & !0xfff;
        d.san_mem(false, &[(l0, 0x1000)]).unwrap();
        d.san_mem(false, &[(l0, 0x1000)]).unwrap();
        let at = c.pt.entry_addr(va, 1).unwrap();
        copy_to(&mut d, &mut c, va);
        let r = only_report(&mut d, Check::PtUnowned, pt_unowned::TABLE, va, 1, at);
        assert_eq!(r.pa, l0);
    }
}

#[test]
fn correct_tables_and_unmapped_addresses_are_clean() {
    for g in GENS {
        let (mut d, mut c) = rig(g);
        // A 2 MiB page, and 4 KiB pages in a new table.
        let huge = d.alloc.alloc(2 << 20, 2 << 20).unwrap();
        c.pt.map_2m(&d.mem, 0x4000_0000, huge, RW).unwrap();
        copy_to(&mut d, &mut c, 0x4000_0000);
        d.buffer(&mut c, 0x60_0000, 0x2000, RW).unwrap();
        copy_to(&mut d, &mut c, 0x60_1000);
        assert_eq!(reports(&d), 0);
        // Never mapped: a zero entry in an existing table, and one whose
        // tables do not exist: faults the driver may serve, no report.
        copy_to(&mut d, &mut c, DST + 0x3_0000);
        let (mut d, mut c) = rig(g);
        copy_to(&mut d, &mut c, 0x80_0000_0000);
        assert_eq!(reports(&d), 0);
    }
}

#[test]
fn entry_checks_need_their_evidence() {
    let s = SanShared::new();
    let check = |s: &SanShared, level, bits| {
        check_entry(
            s,
            ALL_CHECKS,
            1,
            0x1000,
            Access::Read,
            level,
            0x10_0000,
            1,
            bits,
        )
    };
    // Nothing declared: an invalid entry is an unmapped VA, whatever it
    // holds; a misplaced HUGE bit needs no declaration.
    assert_eq!(check(&s, 2, 0x20_0000), None);
    assert_eq!(
        check(&s, 0, 0x20_0000 | PTE_HUGE | 1).map(|f| (f.check, f.kind)),
        Some((Check::PtLevel, pt_level::HUGE_OUTSIDE_L1))
    );
    // Declared memory but no table declared: an address alone is a table
    // without its valid bit; with another bit it is not evidence enough.
    s.own(0x20_0000, 0x1000).unwrap();
    let f = check(&s, 2, 0x20_0000).unwrap();
    assert_eq!(
        (f.check, f.kind),
        (Check::PtInvalidTable, pt_invalid_table::BARE_ADDRESS)
    );
    assert_eq!((f.at.level, f.at.index, f.at.entry_addr), (2, 1, 0x10_0008));
    assert_eq!(check(&s, 2, 0x20_0000 | PTE_READ), None);
    assert_eq!(
        check(&s, 0, 0x20_0000),
        None,
        "level 0: a page, not a table"
    );
    // Tables declared: only a declared table is evidence.
    s.own_tables(0x30_0000, 0x1000).unwrap();
    assert_eq!(check(&s, 2, 0x20_0000), None);
    assert!(check(&s, 1, 0x30_0000 | PTE_READ).is_some());
    s.release(0x30_0000, 0x1000).unwrap();
    assert_eq!(check(&s, 1, 0x30_0000), None, "given back");
    // A well-formed table entry to declared memory, a leaf to undeclared.
    assert_eq!(check(&s, 2, table_entry(0x20_0000)), None);
    assert_eq!(
        check(&s, 0, leaf_entry(0x50_0000, RW, CachePolicy::Cached)).map(|f| (f.check, f.target)),
        Some((Check::PtUnowned, 0x50_0000))
    );
    // The entry's bits, decoded.
    let text = |level, bits| PteText { level, bits }.to_string();
    assert_eq!(
        text(1, huge_entry(0x20_1000, RW, CachePolicy::Cached)),
        "valid, 2 MiB leaf (HUGE), perms rw-, cache 0, address 0x201000"
    );
    assert_eq!(text(2, 0x30_0000), "not valid, table, address 0x300000");
    assert_eq!(
        text(3, leaf_entry(0x30_0000, PTE_READ, CachePolicy::Uncached) | 1 << 60),
        "valid, leaf bits without HUGE, perms r--, cache 1, address 0x300000, reserved bits 0x1000000000000000"
    );
    assert_eq!(
        text(
            0,
            leaf_entry(vgpu_hwif::vram::dpa(0x4000), RW, CachePolicy::Cached)
        ),
        "valid, 4 KiB leaf, perms rw-, cache 0, VRAM offset 0x4000"
    );
}
