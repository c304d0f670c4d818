//! Global memory of a compute kernel: the ISA interpreter's
//! [`GlobalMemory`] over one context's address space, through one compute
//! unit's TLB.
//!
//! Permissions follow `vgpu_hwif::mmu::Access`: loads need `PTE_READ`,
//! stores `PTE_WRITE`, atomics both. Every access is naturally aligned (the
//! interpreter faults misaligned ones before they get here), so an access
//! never crosses a page.
//!
//! A warp-wide load or store whose active lanes all fall in one page is
//! translated once and then accesses the page's host mapping directly.
//! Each unit keeps the host mappings of the last [`PAGE_CACHE`] pages it
//! translated for the duration of one step (a small L1 in front of the
//! unit's TLB: like the TLB it is not coherent with page-table writes, and
//! invalidations and resets only happen between steps, when it is gone), so
//! a warp access to a recently used page costs neither a TLB lookup nor a
//! guest-memory region lookup. Warps whose lanes span pages go lane by lane
//! (each translation a TLB hit after the first). Lanes access guest memory
//! with relaxed atomic loads and stores of their own size, so racing compute
//! units never tear a naturally aligned value; atomics are real
//! read-modify-write atomics on guest memory, coherent across compute units
//! and with the guest's CPUs. (Guest memory has no dirty bitmap in this
//! device, so direct stores need no dirty marking.)
//!
//! A failed translation is kept as the [`MmuFault`] the `FAULT` event
//! reports (reason, level); the interpreter sees the matching
//! [`MemFault`].

use std::cell::{Cell, RefCell};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU64, AtomicU8, Ordering};

use vgpu_hwif::mmu::{Access, FaultReason};
use vgpu_isa::inst::{AtomOp, WARP_SIZE};
use vgpu_isa::mem::{lanes, GlobalMemory, LaneFault, MemFault, MemFaultReason};
use vm_memory::{GuestAddress, GuestMemoryBackend, VolatileMemory, VolatileSlice};

use super::dma::GpuMemory;
use super::mmu::{Mem, MmuFault, PageMapping};
use super::poison::Poison;

/// Pages whose host mappings a compute unit keeps during a step.
pub const PAGE_CACHE: usize = 4;

/// A translated page and where it is in the host's mapping of guest memory.
#[derive(Clone, Copy, Debug)]
struct CachedPage {
    va_base: u64,
    pa_base: u64,
    shift: u32,
    perms: u64,
    host: NonNull<u8>,
}

/// One compute unit's view of a context's memory.
#[derive(Debug)]
pub struct KernelMemory<'a> {
    gm: RefCell<GpuMemory<'a>>,
    mem: &'a Mem,
    poison: Option<&'a Poison>,
    fault: Cell<Option<MmuFault>>,
    pages: Cell<[Option<CachedPage>; PAGE_CACHE]>,
    victim: Cell<usize>,
}

fn isa_access(a: Access) -> vgpu_isa::mem::Access {
    match a {
        Access::Write => vgpu_isa::mem::Access::Write,
        Access::Atomic => vgpu_isa::mem::Access::Atomic,
        Access::Read | Access::Execute => vgpu_isa::mem::Access::Read,
    }
}

impl<'a> KernelMemory<'a> {
    /// Kernel accesses through `gm`.
    pub fn new(gm: GpuMemory<'a>, mem: &'a Mem) -> Self {
        KernelMemory {
            poison: gm.poison(),
            gm: RefCell::new(gm),
            mem,
            fault: Cell::new(None),
            pages: Cell::new([None; PAGE_CACHE]),
            victim: Cell::new(0),
        }
    }

    /// The translation fault behind the last [`MemFault`] returned, taken
    /// out.
    pub fn take_fault(&self) -> Option<MmuFault> {
        self.fault.take()
    }

    fn fail(&self, f: MmuFault, size: u8) -> MemFault {
        self.fault.set(Some(f));
        MemFault {
            va: f.va,
            access: isa_access(f.access),
            size,
            reason: match f.reason {
                FaultReason::Permission => MemFaultReason::Permission,
                FaultReason::BadPhysical => MemFaultReason::Bus,
                _ => MemFaultReason::NotMapped,
            },
        }
    }

    fn translate(&self, va: u64, access: Access, size: u8) -> Result<PageMapping, MemFault> {
        let r = self.gm.borrow_mut().translate(va, access);
        r.map_err(|f| self.fail(f, size))
    }

    /// Whether a read of `pa..pa + len` touches a poisoned page.
    #[inline(always)]
    fn poisoned(&self, access: Access, pa: u64, len: u64) -> bool {
        access != Access::Write && self.poison.is_some_and(|p| p.hit(pa, len).is_some())
    }

    /// Fails a read of `size` bytes at `va` (in `map`) that touches a
    /// poisoned page with an ECC error.
    fn check_poison(
        &self,
        map: &PageMapping,
        va: u64,
        access: Access,
        size: u8,
    ) -> Result<(), MemFault> {
        if self.poisoned(access, map.pa(va), u64::from(size)) {
            return Err(self.fail(MmuFault::ecc(va, access), size));
        }
        Ok(())
    }

    /// The host mapping of `len` bytes at `va` in page `map`.
    fn slice(
        &self,
        map: &PageMapping,
        va: u64,
        len: usize,
        access: Access,
        size: u8,
    ) -> Result<VolatileSlice<'a, vm_memory::bitmap::MS<'a, Mem>>, MemFault> {
        self.mem
            .get_slice(GuestAddress(map.pa(va)), len)
            .map_err(|_| {
                self.fail(
                    MmuFault {
                        va,
                        access,
                        reason: FaultReason::BadPhysical,
                        level: map.level(),
                    },
                    size,
                )
            })
    }

    /// Lowest and highest address of the lanes in `mask` (non-zero).
    #[inline(always)]
    fn span(va: &[u64; WARP_SIZE], mask: u32) -> (u64, u64) {
        let mut lo = u64::MAX;
        let mut hi = 0u64;
        for (l, &a) in va.iter().enumerate() {
            let on = mask >> l & 1 != 0;
            lo = if on { lo.min(a) } else { lo };
            hi = if on { hi.max(a) } else { hi };
        }
        (lo, hi)
    }

    /// Whether the 32 lanes access consecutive 32-bit words from `va[0]`.
    #[inline(always)]
    fn consecutive_words(va: &[u64; WARP_SIZE]) -> bool {
        let mut differ = 0u64;
        for (l, &a) in va.iter().enumerate() {
            differ |= a ^ va[0].wrapping_add(4 * l as u64);
        }
        differ == 0
    }

    /// The host address of `lo` if `lo..=hi` lies in one page that allows
    /// `access`: from the page cache, else translated (and cached).
    #[inline(always)]
    fn host_span(&self, lo: u64, hi: u64, size: u8, access: Access) -> Option<NonNull<u8>> {
        let need = access.required_perms();
        for p in self.pages.get().iter().flatten() {
            if lo >> p.shift == p.va_base >> p.shift
                && hi >> p.shift == p.va_base >> p.shift
                && p.perms & need == need
            {
                if self.poisoned(
                    access,
                    p.pa_base + (lo - p.va_base),
                    hi - lo + u64::from(size),
                ) {
                    // The lane-by-lane path reports it.
                    return None;
                }
                // The offset is below the page size, inside the mapping.
                return Some(unsafe_offset(p.host, lo - p.va_base));
            }
        }
        let map = self.translate(lo, access, size).ok()?;
        if !map.contains(hi) || self.poisoned(access, map.pa(lo), hi - lo + u64::from(size)) {
            return None;
        }
        let len = usize::try_from(map.page_size()).ok()?;
        let page = self.slice(&map, map.va_base, len, access, size).ok()?;
        let host = NonNull::new(page.ptr_guard_mut().as_ptr())?;
        let mut pages = self.pages.get();
        let v = self.victim.get() % PAGE_CACHE;
        if let Some(slot) = pages.get_mut(v) {
            *slot = Some(CachedPage {
                va_base: map.va_base,
                pa_base: map.pa_base,
                shift: map.shift,
                perms: map.perms,
                host,
            });
        }
        self.pages.set(pages);
        self.victim.set(v + 1);
        Some(unsafe_offset(host, lo - map.va_base))
    }

    /// The host address of the lowest active lane's address, and that
    /// address, if every lane of `mask` (non-empty) falls in one page that
    /// allows `access`.
    #[inline(always)]
    fn one_page(
        &self,
        va: &[u64; WARP_SIZE],
        mask: u32,
        size: u8,
        access: Access,
    ) -> Option<(NonNull<u8>, u64)> {
        if mask == 0 {
            return None;
        }
        let (lo, hi) = Self::span(va, mask);
        Some((self.host_span(lo, hi, size, access)?, lo))
    }
}

/// `base + off` for an offset inside the page `base` maps.
#[inline(always)]
fn unsafe_offset(base: NonNull<u8>, off: u64) -> NonNull<u8> {
    // SAFETY: callers pass an offset below the size of the page whose host
    // mapping starts at `base`, so the result stays inside that mapping
    // (and is not null).
    unsafe { base.add(off as usize) }
}

/// Reads the `size`-byte value at byte `off` of `base`.
///
/// # Safety
/// `base + off` must be valid for a `size`-byte read of guest memory for
/// the duration of the call and aligned to `size`.
#[inline(always)]
unsafe fn read_at(base: *const u8, off: usize, size: u8) -> u64 {
    // SAFETY: the caller guarantees validity and alignment; guest memory is
    // shared, so it is only accessed atomically.
    unsafe {
        let p = base.add(off);
        match size {
            1 => u64::from(AtomicU8::from_ptr(p.cast_mut()).load(Ordering::Relaxed)),
            2 => u64::from(u16::from_le(
                AtomicU16::from_ptr(p.cast_mut().cast()).load(Ordering::Relaxed),
            )),
            4 => u64::from(u32::from_le(
                AtomicU32::from_ptr(p.cast_mut().cast()).load(Ordering::Relaxed),
            )),
            _ => u64::from_le(AtomicU64::from_ptr(p.cast_mut().cast()).load(Ordering::Relaxed)),
        }
    }
}

/// Writes the low `size` bytes of `v` at byte `off` of `base`.
///
/// # Safety
/// As [`read_at`], for a write.
#[inline(always)]
unsafe fn write_at(base: *mut u8, off: usize, size: u8, v: u64) {
    // SAFETY: see `read_at`.
    unsafe {
        let p = base.add(off);
        match size {
            1 => AtomicU8::from_ptr(p).store(v as u8, Ordering::Relaxed),
            2 => AtomicU16::from_ptr(p.cast()).store((v as u16).to_le(), Ordering::Relaxed),
            4 => AtomicU32::from_ptr(p.cast()).store((v as u32).to_le(), Ordering::Relaxed),
            _ => AtomicU64::from_ptr(p.cast()).store(v.to_le(), Ordering::Relaxed),
        }
    }
}

impl GlobalMemory for KernelMemory<'_> {
    fn load(&self, va: u64, size: u8) -> Result<u64, MemFault> {
        if let Some(h) = self.host_span(va, va, size, Access::Read) {
            // SAFETY: `host_span` maps the naturally aligned `va` inside
            // one page.
            return Ok(unsafe { read_at(h.as_ptr(), 0, size) });
        }
        let map = self.translate(va, Access::Read, size)?;
        self.check_poison(&map, va, Access::Read, size)?;
        let s = self.slice(&map, va, usize::from(size), Access::Read, size)?;
        let g = s.ptr_guard();
        // SAFETY: the slice covers `size` bytes at `va`, which is naturally
        // aligned (the interpreter checks), and so is its host address
        // (guest pages are page-aligned in the host mapping).
        Ok(unsafe { read_at(g.as_ptr(), 0, size) })
    }

    fn store(&self, va: u64, size: u8, value: u64) -> Result<(), MemFault> {
        if let Some(h) = self.host_span(va, va, size, Access::Write) {
            // SAFETY: as in `load`.
            unsafe { write_at(h.as_ptr(), 0, size, value) };
            return Ok(());
        }
        let map = self.translate(va, Access::Write, size)?;
        let s = self.slice(&map, va, usize::from(size), Access::Write, size)?;
        let g = s.ptr_guard_mut();
        // SAFETY: as in `load`.
        unsafe { write_at(g.as_ptr(), 0, size, value) };
        Ok(())
    }

    fn atomic32(&self, va: u64, op: AtomOp, b: u32, c: u32) -> Result<u32, MemFault> {
        let map = self.translate(va, Access::Atomic, 4)?;
        self.check_poison(&map, va, Access::Atomic, 4)?;
        let s = self.slice(&map, va, 4, Access::Atomic, 4)?;
        let bad = MmuFault {
            va,
            access: Access::Atomic,
            reason: FaultReason::BadPhysical,
            level: map.level(),
        };
        let w = s
            .get_atomic_ref::<AtomicU32>(0)
            .map_err(|_| self.fail(bad, 4))?;
        // Little-endian host: the word's value is the integer's.
        Ok(op.apply_atomic(w, b, c))
    }

    fn load_warp(
        &self,
        size: u8,
        va: &[u64; WARP_SIZE],
        mask: u32,
        lo: &mut [u32; WARP_SIZE],
        hi: &mut [u32; WARP_SIZE],
    ) -> Result<(), LaneFault> {
        if size == 4 && mask == u32::MAX && Self::consecutive_words(va) {
            let last = va[0].wrapping_add(4 * (WARP_SIZE as u64 - 1));
            if last > va[0] {
                if let Some(host) = self.host_span(va[0], last, 4, Access::Read) {
                    let p = host.as_ptr().cast_const();
                    for (l, out) in lo.iter_mut().enumerate() {
                        // SAFETY: the 32 words lie in one page
                        // (`host_span` checked the first and the last),
                        // naturally aligned.
                        *out = unsafe { read_at(p, 4 * l, 4) } as u32;
                    }
                    return Ok(());
                }
            }
        } else if let Some((host, base)) = self.one_page(va, mask, size, Access::Read) {
            let p = host.as_ptr().cast_const();
            for l in lanes(mask) {
                // SAFETY: every active lane lies in the page (`one_page`
                // checked the lowest and highest address) and is naturally
                // aligned.
                let v = unsafe { read_at(p, (va[l] - base) as usize, size) };
                lo[l] = v as u32;
                hi[l] = (v >> 32) as u32;
            }
            return Ok(());
        }
        for lane in lanes(mask) {
            let v = self.load(va[lane], size).map_err(|fault| LaneFault {
                lane: lane as u32,
                fault,
            })?;
            lo[lane] = v as u32;
            hi[lane] = (v >> 32) as u32;
        }
        Ok(())
    }

    fn store_warp(
        &self,
        size: u8,
        va: &[u64; WARP_SIZE],
        mask: u32,
        lo: &[u32; WARP_SIZE],
        hi: &[u32; WARP_SIZE],
    ) -> Result<(), LaneFault> {
        if size == 4 && mask == u32::MAX && Self::consecutive_words(va) {
            let last = va[0].wrapping_add(4 * (WARP_SIZE as u64 - 1));
            if last > va[0] {
                if let Some(host) = self.host_span(va[0], last, 4, Access::Write) {
                    let p = host.as_ptr();
                    for (l, &v) in lo.iter().enumerate() {
                        // SAFETY: as in `load_warp`.
                        unsafe { write_at(p, 4 * l, 4, u64::from(v)) };
                    }
                    return Ok(());
                }
            }
        } else if let Some((host, base)) = self.one_page(va, mask, size, Access::Write) {
            let p = host.as_ptr();
            for l in lanes(mask) {
                let v = u64::from(lo[l]) | u64::from(hi[l]) << 32;
                // SAFETY: as in `load_warp`.
                unsafe { write_at(p, (va[l] - base) as usize, size, v) };
            }
            return Ok(());
        }
        for lane in lanes(mask) {
            let v = u64::from(lo[lane]) | u64::from(hi[lane]) << 32;
            self.store(va[lane], size, v).map_err(|fault| LaneFault {
                lane: lane as u32,
                fault,
            })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::mmu::{AddressSpace, Tlb};
    use vgpu_hwif::mmu::{leaf_entry, level_index, table_entry, CachePolicy, PTE_READ, PTE_WRITE};
    use vm_memory::Bytes;

    const BASE: u64 = 0x10_0000;

    /// 1 MiB of RAM; VA pages BASE + i (i < 4) map scattered physical
    /// pages; page 2 is read-only, page 3 is not mapped.
    fn setup() -> (Mem, AddressSpace) {
        let mem = Mem::from_ranges(&[(GuestAddress(0), 0x10_0000)]).unwrap();
        let w = |pa: u64, v: u64| mem.write_obj(v, GuestAddress(pa)).unwrap();
        w(
            0x1000 + 8 * level_index(BASE, 3) as u64,
            table_entry(0x2000),
        );
        w(
            0x2000 + 8 * level_index(BASE, 2) as u64,
            table_entry(0x3000),
        );
        w(
            0x3000 + 8 * level_index(BASE, 1) as u64,
            table_entry(0x4000),
        );
        for (i, perms) in [
            (0u64, PTE_READ | PTE_WRITE),
            (1, PTE_READ | PTE_WRITE),
            (2, PTE_READ),
        ] {
            let va = BASE + i * 0x1000;
            w(
                0x4000 + 8 * level_index(va, 0) as u64,
                leaf_entry(pa_of(i), perms, CachePolicy::Cached),
            );
        }
        let space = AddressSpace {
            asid: 1,
            root: 0x1000,
            va_bits: 48,
        };
        (mem, space)
    }

    fn pa_of(i: u64) -> u64 {
        0x20000 + (3 - i) * 0x1000
    }

    #[test]
    fn warps_within_across_and_off_pages() {
        let (mem, space) = setup();
        let mut tlb = Tlb::new();
        let km = KernelMemory::new(GpuMemory::new(&mem, &mut tlb, space), &mem);
        // 32 consecutive words straddling pages 0 and 1 (physically apart).
        let va: [u64; WARP_SIZE] = std::array::from_fn(|l| BASE + 0xfc0 + 4 * l as u64);
        let lo: [u32; WARP_SIZE] = std::array::from_fn(|l| 100 + l as u32);
        km.store_warp(4, &va, u32::MAX, &lo, &[0; WARP_SIZE])
            .unwrap();
        assert_eq!(
            mem.read_obj::<u32>(GuestAddress(pa_of(0) + 0xfc0)).unwrap(),
            100
        );
        assert_eq!(mem.read_obj::<u32>(GuestAddress(pa_of(1))).unwrap(), 116);
        let (mut got, mut hi) = ([0u32; WARP_SIZE], [0u32; WARP_SIZE]);
        km.load_warp(4, &va, u32::MAX, &mut got, &mut hi).unwrap();
        assert_eq!(got, lo);
        // Bytes and 64-bit values inside one page, some lanes inactive.
        let va8: [u64; WARP_SIZE] = std::array::from_fn(|l| BASE + 0x100 + 8 * l as u64);
        let hi8: [u32; WARP_SIZE] = std::array::from_fn(|l| l as u32);
        km.store_warp(8, &va8, 0x5555_5555, &lo, &hi8).unwrap();
        km.load_warp(8, &va8, u32::MAX, &mut got, &mut hi).unwrap();
        assert_eq!((got[2], hi[2], got[3], hi[3]), (102, 2, 0, 0));
        km.store(BASE + 0x1003, 1, 0xab).unwrap();
        assert_eq!(km.load(BASE + 0x1000, 4).unwrap(), 0xab00_0000 | 116);
        // A store to the read-only page faults at its first lane there.
        let f = km
            .store_warp(4, &va.map(|a| a + 0x1000), u32::MAX, &lo, &[0; WARP_SIZE])
            .unwrap_err();
        assert_eq!((f.lane, f.fault.va), (16, BASE + 0x2000));
        assert_eq!(f.fault.reason, MemFaultReason::Permission);
        let m = km.take_fault().unwrap();
        assert_eq!(
            (m.va, m.access, m.reason),
            (BASE + 0x2000, Access::Write, FaultReason::Permission)
        );
        // Loads from it work; past it nothing is mapped.
        km.load_warp(4, &va.map(|a| a + 0x1040), 1, &mut got, &mut hi)
            .unwrap();
        let f = km
            .load_warp(4, &va.map(|a| a + 0x2000), u32::MAX, &mut got, &mut hi)
            .unwrap_err();
        assert_eq!((f.lane, f.fault.va), (16, BASE + 0x3000));
        assert_eq!(km.take_fault().unwrap().reason, FaultReason::NotPresent);
        // Atomics need read and write; they are real read-modify-writes.
        assert_eq!(
            km.atomic32(BASE + 0x1000, AtomOp::Add, 5, 0).unwrap(),
            0xab00_0000 | 116
        );
        assert_eq!(km.load(BASE + 0x1000, 4).unwrap(), 0xab00_0000 | 121);
        assert_eq!(
            km.atomic32(BASE + 0x2000, AtomOp::Add, 1, 0)
                .unwrap_err()
                .reason,
            MemFaultReason::Permission
        );
    }
}
