use super::*;
use vgpu_hwif::mmu::{
    huge_entry, leaf_entry, table_entry, CachePolicy, PTE_ADDR_MASK, PTE_EXEC, PTE_HUGE, PTE_READ,
    PTE_WRITE,
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
                    leaf_entry(0x8000, RW, CachePolicy::Cached) | 1 << 8,
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
    let out =
        |va_bits, va| walk(&m, &space(va_bits), va, Access::Write).map_err(|f| (f.reason, f.level));
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
