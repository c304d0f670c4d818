//! Global memory of a compute kernel: the ISA interpreter's
//! [`GlobalMemory`](vgpu_isa::mem::GlobalMemory) over one context's address space, through one compute
//! unit's TLB.
//!
//! Permissions follow `vgpu_hwif::mmu::Access`: loads need `PTE_READ`,
//! stores `PTE_WRITE`, atomics both. Every access is naturally aligned (the
//! interpreter faults misaligned ones before they get here), so an access
//! never crosses a page.
//!
//! The memory is a `vgpu_isa::mem::PagedMemory`: this module supplies the
//! per-access operations (translation, permissions, poison, faults) and
//! the page lookup ([`HostPage`]); the ISA's warp paths do the rest. A
//! warp-wide load or store whose active lanes all fall in one page is
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
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU64, AtomicU8, Ordering};

use vgpu_hwif::mmu::{Access, FaultReason};
use vgpu_isa::inst::{AtomOp, WARP_SIZE};
use vgpu_isa::mem::{DirectPage, MappedPage, MemFault, MemFaultReason, PagedMemory};
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
    /// `direct_epoch`: one per instance (a step of one unit), since
    /// translations may change between steps.
    epoch: u64,
    /// The sanitizer logs accesses (hazard check).
    san: bool,
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
            san: gm.san_on(),
            gm: RefCell::new(gm),
            mem,
            fault: Cell::new(None),
            pages: Cell::new([None; PAGE_CACHE]),
            victim: Cell::new(0),
            epoch: vgpu_isa::mem::new_epoch(),
        }
    }

    /// Logs an access of `len` bytes at `va` (guest-physical `pa`) for the
    /// sanitizer's hazard check.
    #[inline(always)]
    fn san_access(&self, va: u64, pa: u64, len: u64, access: Access) {
        if self.san {
            self.gm
                .borrow_mut()
                .san_access(va, pa, len, access != Access::Read);
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

    /// The page holding `lo..=hi` if that range lies in one page that
    /// allows `access` and touches no poisoned page: from the page cache,
    /// else translated (and cached).
    #[inline(always)]
    fn host_span(&self, lo: u64, hi: u64, size: u8, access: Access) -> Option<HostPage<'a>> {
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
                self.san_access(
                    lo,
                    p.pa_base + (lo - p.va_base),
                    hi - lo + u64::from(size),
                    access,
                );
                return Some(HostPage::new(p.host, p.va_base));
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
        self.san_access(lo, map.pa(lo), hi - lo + u64::from(size), access);
        Some(HostPage::new(host, map.va_base))
    }
}

/// A translated page as the host maps it: what the warp accesses and
/// aligned single accesses reach directly.
#[derive(Clone, Copy, Debug)]
pub struct HostPage<'a> {
    host: NonNull<u8>,
    va_base: u64,
    _mem: PhantomData<&'a Mem>,
}

impl HostPage<'_> {
    /// The page whose first byte, at GPU VA `va_base`, the host maps at
    /// `host` (for the lifetime of the guest memory mapping).
    fn new(host: NonNull<u8>, va_base: u64) -> Self {
        HostPage {
            host,
            va_base,
            _mem: PhantomData,
        }
    }

    /// The host address of `va` (inside the page).
    #[inline(always)]
    fn at(&self, va: u64) -> *mut u8 {
        unsafe_offset(self.host, va - self.va_base).as_ptr()
    }
}

impl MappedPage for HostPage<'_> {
    #[inline(always)]
    unsafe fn read(&self, va: u64, size: u8) -> u64 {
        // SAFETY: the caller passes a `va` of the span this page was
        // returned for (inside the page), aligned to `size`; the host
        // mapping of the page is live for the memory's lifetime.
        unsafe { read_at(self.at(va), size) }
    }

    #[inline(always)]
    unsafe fn write(&self, va: u64, size: u8, value: u64) {
        // SAFETY: as in `read`.
        unsafe { write_at(self.at(va), size, value) }
    }

    #[inline(always)]
    unsafe fn read_words(&self, va: u64, out: &mut [u32; WARP_SIZE]) {
        let p = self.at(va).cast_const();
        for (l, w) in out.iter_mut().enumerate() {
            // SAFETY: the caller passes 32 aligned words of this page's
            // span from `va`.
            *w = unsafe { read_at(p.add(4 * l), 4) } as u32;
        }
    }

    #[inline(always)]
    unsafe fn write_words(&self, va: u64, words: &[u32; WARP_SIZE]) {
        let p = self.at(va);
        for (l, &w) in words.iter().enumerate() {
            // SAFETY: as in `read_words`.
            unsafe { write_at(p.add(4 * l), 4, u64::from(w)) };
        }
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

/// Reads the `size`-byte value (1, 2, 4 or 8 bytes) at `p`.
///
/// # Safety
/// `p` must be valid for a `size`-byte read of guest memory for the
/// duration of the call and aligned to `size`.
#[inline(always)]
unsafe fn read_at(p: *const u8, size: u8) -> u64 {
    // SAFETY: the caller guarantees validity and alignment; guest memory is
    // shared, so it is only accessed atomically.
    unsafe {
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

/// Writes the low `size` bytes of `v` at `p`.
///
/// # Safety
/// As [`read_at`], for a write.
#[inline(always)]
unsafe fn write_at(p: *mut u8, size: u8, v: u64) {
    // SAFETY: see `read_at`.
    unsafe {
        match size {
            1 => AtomicU8::from_ptr(p).store(v as u8, Ordering::Relaxed),
            2 => AtomicU16::from_ptr(p.cast()).store((v as u16).to_le(), Ordering::Relaxed),
            4 => AtomicU32::from_ptr(p.cast()).store((v as u32).to_le(), Ordering::Relaxed),
            _ => AtomicU64::from_ptr(p.cast()).store(v.to_le(), Ordering::Relaxed),
        }
    }
}

/// A fault for an access the interpreter never makes: misaligned, or of
/// a size other than 1, 2, 4 or 8 (nothing is translated).
fn misaligned(va: u64, access: Access, size: u8) -> Option<MemFault> {
    let ok = matches!(size, 1 | 2 | 4 | 8) && va.is_multiple_of(u64::from(size));
    (!ok).then_some(MemFault {
        va,
        access: isa_access(access),
        size,
        reason: MemFaultReason::Misaligned,
    })
}

impl<'a> PagedMemory for KernelMemory<'a> {
    type Page<'p>
        = HostPage<'a>
    where
        Self: 'p;

    fn lane_load(&self, va: u64, size: u8) -> Result<u64, MemFault> {
        if let Some(f) = misaligned(va, Access::Read, size) {
            return Err(f);
        }
        if let Some(p) = self.host_span(va, va, size, Access::Read) {
            // SAFETY: `host_span` returned the page holding the aligned
            // `va`.
            return Ok(unsafe { p.read(va, size) });
        }
        let map = self.translate(va, Access::Read, size)?;
        self.check_poison(&map, va, Access::Read, size)?;
        self.san_access(va, map.pa(va), u64::from(size), Access::Read);
        let s = self.slice(&map, va, usize::from(size), Access::Read, size)?;
        let g = s.ptr_guard();
        // SAFETY: the slice covers `size` bytes at `va`, which is naturally
        // aligned (checked above), and so is its host address (guest pages
        // are page-aligned in the host mapping).
        Ok(unsafe { read_at(g.as_ptr(), size) })
    }

    fn lane_store(&self, va: u64, size: u8, value: u64) -> Result<(), MemFault> {
        if let Some(f) = misaligned(va, Access::Write, size) {
            return Err(f);
        }
        if let Some(p) = self.host_span(va, va, size, Access::Write) {
            // SAFETY: as in `lane_load`.
            unsafe { p.write(va, size, value) };
            return Ok(());
        }
        let map = self.translate(va, Access::Write, size)?;
        self.san_access(va, map.pa(va), u64::from(size), Access::Write);
        let s = self.slice(&map, va, usize::from(size), Access::Write, size)?;
        let g = s.ptr_guard_mut();
        // SAFETY: as in `lane_load`.
        unsafe { write_at(g.as_ptr(), size, value) };
        Ok(())
    }

    fn lane_atomic32(&self, va: u64, op: AtomOp, b: u32, c: u32) -> Result<u32, MemFault> {
        let map = self.translate(va, Access::Atomic, 4)?;
        self.check_poison(&map, va, Access::Atomic, 4)?;
        self.san_access(va, map.pa(va), 4, Access::Atomic);
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

    #[inline(always)]
    fn page_span(
        &self,
        lo: u64,
        hi: u64,
        size: u8,
        access: vgpu_isa::mem::Access,
    ) -> Option<HostPage<'a>> {
        let access = match access {
            vgpu_isa::mem::Access::Read => Access::Read,
            vgpu_isa::mem::Access::Write => Access::Write,
            vgpu_isa::mem::Access::Atomic => Access::Atomic,
        };
        self.host_span(lo, hi, size, access)
    }

    /// A page of the unit's page cache (where every access that just
    /// succeeded left its page) that allows `access`, while no page is
    /// poisoned: the JIT's inline accesses then skip the poison check for
    /// the rest of its `run` call, so a page poisoned during a step is
    /// seen by native code from the next step on. None while the sanitizer
    /// logs accesses.
    fn direct_page(&self, va: u64, access: vgpu_isa::mem::Access) -> Option<DirectPage> {
        let need = match access {
            vgpu_isa::mem::Access::Read => Access::Read,
            vgpu_isa::mem::Access::Write => Access::Write,
            vgpu_isa::mem::Access::Atomic => return None,
        }
        .required_perms();
        // The sanitizer sees every access: no native shortcut past it.
        if self.san || self.poison.is_some_and(|p| !p.is_empty()) {
            return None;
        }
        let p = self
            .pages
            .get()
            .into_iter()
            .flatten()
            .find(|p| va >> p.shift == p.va_base >> p.shift && p.perms & need == need)?;
        // SAFETY: `host` is the host mapping of the whole translated page
        // (`host_span` took it from a slice of `1 << shift` bytes of guest
        // memory), valid for the memory's lifetime `'a`, which outlives
        // every borrow of `self`; the translation grants `access`; guest
        // memory is shared and only accessed with aligned single-copy
        // atomic accesses, as `read_at`/`write_at` do; no page is poisoned.
        unsafe { DirectPage::new(p.va_base, 1u64 << p.shift, p.host) }
    }

    fn direct_epoch(&self) -> u64 {
        // This instance lives for one step of one unit and its pages for
        // the guest memory's lifetime; translations only change between
        // steps, when the next instance has a new epoch.
        self.epoch
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::mmu::{AddressSpace, Tlb};
    use vgpu_hwif::mmu::{leaf_entry, level_index, table_entry, CachePolicy, PTE_READ, PTE_WRITE};
    use vgpu_isa::mem::GlobalMemory;
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

    /// The interpreter never issues misaligned accesses; called directly,
    /// they fault instead of touching guest memory unaligned.
    #[test]
    fn misaligned_accesses_fault_without_touching_memory() {
        let (mem, space) = setup();
        let mut tlb = Tlb::new();
        let km = KernelMemory::new(GpuMemory::new(&mem, &mut tlb, space), &mem);
        for (va, size) in [(BASE + 2, 4), (BASE + 4, 8), (BASE + 1, 2), (BASE, 3)] {
            let f = km.load(va, size).unwrap_err();
            assert_eq!((f.va, f.reason), (va, MemFaultReason::Misaligned));
            let f = km.store(va, size, 1).unwrap_err();
            assert_eq!(f.reason, MemFaultReason::Misaligned);
        }
        assert!(km.take_fault().is_none(), "nothing was translated");
        // A warp with one misaligned lane goes lane by lane and reports it.
        let mut va: [u64; WARP_SIZE] = std::array::from_fn(|l| BASE + 4 * l as u64);
        va[7] += 1;
        let (mut lo, mut hi) = ([0u32; WARP_SIZE], [0u32; WARP_SIZE]);
        let f = km
            .load_warp(4, &va, u32::MAX, &mut lo, &mut hi)
            .unwrap_err();
        assert_eq!((f.lane, f.fault.reason), (7, MemFaultReason::Misaligned));
    }
}
