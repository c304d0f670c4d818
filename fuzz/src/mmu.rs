//! `mmu`: the page-table walker and the TLB over page tables made of the
//! input's bytes, checked against a reference walk written from the
//! format's specification (`vgpu_hwif::mmu`) with raw bit operations.
//!
//! Input: byte 0 picks the VA width (bit 0: 48 bits, else 40) and whether
//! the root lies outside guest RAM (bit 1); byte 1 the root page; byte 2
//! the number of VAs (at most 16), which follow as 8-byte little-endian
//! values; the rest fills guest RAM from address 0 (two 32 KiB regions with
//! a gap between them, and a zeroed 2 MiB region at 4 MiB for huge pages).
//! Every VA is walked by both walkers, whose results must agree, and then
//! translated through a TLB for each access type, twice (a miss, then a
//! hit or a fault), which must agree with the walk and the permission
//! check while the tables do not change.

use vgpu_device::core::mmu::{walk, AddressSpace, Mem, Mmu, PageMapping, Tlb};
use vgpu_hwif::mmu::{Access, FaultReason};
use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryRegion};

const REGIONS: [(u64, usize); 3] = [(0, 0x8000), (0x1_0000, 0x8000), (0x40_0000, 0x20_0000)];

pub fn run(data: &[u8]) {
    let [cfg, root, nva, rest @ ..] = data else {
        return;
    };
    let va_bits = if cfg & 1 != 0 { 48 } else { 40 };
    let root = if cfg & 2 != 0 {
        1 << 40
    } else {
        // A page of the first two regions.
        let page = u64::from(*root % 16);
        if page < 8 {
            page << 12
        } else {
            0x1_0000 + ((page - 8) << 12)
        }
    };
    let nva = usize::from(*nva % 17).min(rest.len() / 8);
    let (vas, ram) = rest.split_at(8 * nva);
    let vas: Vec<u64> = vas
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect();
    let regions: Vec<(GuestAddress, usize)> =
        REGIONS.iter().map(|&(a, n)| (GuestAddress(a), n)).collect();
    let mem = Mem::from_ranges(&regions).expect("guest memory");
    // The input fills the first two regions in order.
    let (first, second) = ram.split_at(ram.len().min(0x8000));
    mem.write_slice(first, GuestAddress(0)).expect("region 0");
    mem.write_slice(&second[..second.len().min(0x8000)], GuestAddress(0x1_0000))
        .expect("region 1");
    let space = AddressSpace {
        asid: 3,
        root,
        va_bits,
    };
    let mut tlb = Tlb::new();
    for &va in &vas {
        let got = walk(&mem, &space, va, Access::Read);
        let want = reference(&mem, root, va_bits, va);
        match (&got, &want) {
            (Ok(m), Ok(r)) => assert_eq!(
                (m.va_base, m.pa_base, m.shift, m.perms, m.cache),
                (r.va_base, r.pa_base, r.shift, r.perms, r.cache),
                "va {va:#x}"
            ),
            (Err(f), Err((reason, level))) => {
                assert_eq!((f.reason, f.level), (*reason, *level), "va {va:#x}")
            }
            _ => panic!("va {va:#x}: walker {got:?}, reference {want:?}"),
        }
        for access in [Access::Read, Access::Write, Access::Execute, Access::Atomic] {
            let expect = got.and_then(|m| m.check(va, access).map(|()| m));
            for _ in 0..2 {
                let mut mmu = Mmu {
                    mem: &mem,
                    tlb: &mut tlb,
                    space,
                    tap: None,
                };
                let t = mmu.translate(va, access);
                match (&t, &expect) {
                    (Ok(a), Ok(b)) => assert_eq!(a, b, "va {va:#x} {access:?}"),
                    (Err(a), Err(b)) => assert_eq!(
                        (a.reason, a.level),
                        (b.reason, b.level),
                        "va {va:#x} {access:?}"
                    ),
                    _ => panic!("va {va:#x} {access:?}: TLB {t:?}, walk {expect:?}"),
                }
            }
        }
    }
}

/// Whether `len` bytes at `pa` lie in one region.
fn in_one_region(mem: &Mem, pa: u64, len: u64) -> bool {
    mem.iter().any(|r| {
        let start = r.start_addr().0;
        pa >= start
            && pa
                .checked_add(len)
                .is_some_and(|end| end <= start + r.len())
    })
}

/// The walk as the format specifies it, bit by bit.
fn reference(
    mem: &Mem,
    root: u64,
    va_bits: u32,
    va: u64,
) -> Result<PageMapping, (FaultReason, u8)> {
    if va >> va_bits != 0 {
        return Err((FaultReason::OutOfRange, 0xff));
    }
    let mut table = root;
    let mut seen = Vec::new();
    for level in (0..4u32).rev() {
        let fail = |r| Err((r, level as u8));
        if !in_one_region(mem, table, 4096) {
            return fail(FaultReason::BadPhysical);
        }
        seen.push(table);
        let index = (va >> (12 + 9 * level)) & 0x1ff;
        let e: u64 = mem
            .read_obj::<u64>(GuestAddress(table + 8 * index))
            .expect("inside the table");
        let e = u64::from_le(e);
        let valid = e & 1 != 0;
        let huge = e & (1 << 4) != 0;
        // Bit 7 says the address is a VRAM offset: device-physical address
        // 2^52 + offset, which no region of this guest RAM holds.
        let vram = if e & (1 << 7) != 0 { 1u64 << 52 } else { 0 };
        let addr = (e & 0x000f_ffff_ffff_f000) | vram;
        if !valid {
            return fail(FaultReason::NotPresent);
        }
        // Bits 63..52 and 11..8 are reserved.
        if e & 0xfff0_0000_0000_0f00 != 0 || (huge && level != 1) {
            return fail(FaultReason::Malformed);
        }
        if level > 0 && !huge {
            // A table entry: R, W, X, HUGE and the cache field are zero.
            if e & 0x7e != 0 || seen.contains(&addr) {
                return fail(FaultReason::Malformed);
            }
            table = addr;
            continue;
        }
        let cache = ((e >> 5) & 3) as u8;
        let shift = if huge { 21 } else { 12 };
        if cache == 3 || addr & ((1 << shift) - 1) != 0 {
            return fail(FaultReason::Malformed);
        }
        if !in_one_region(mem, addr, 1 << shift) {
            return fail(FaultReason::BadPhysical);
        }
        return Ok(PageMapping {
            va_base: va & !((1u64 << shift) - 1),
            pa_base: addr,
            shift,
            perms: e & 0xe,
            cache,
        });
    }
    unreachable!("level 0 always ends the walk")
}
