//! Global memory as the compute engine sees it: the [`GlobalMemory`] trait the
//! device implements on top of its MMU, the direct pages the JIT reaches
//! without it, [`PagedMemory`] (the one-page warp paths of any paged
//! memory), and [`SparseMemory`], a paged in-memory implementation for
//! tests, benchmarks and `vgpu-as run` (`sparse.rs`).

mod sparse;

pub use sparse::{new_epoch, PageHasher, SparseMemory, SparsePage, PAGE_SHIFT, PAGE_SIZE};

use crate::inst::{AtomOp, WARP_SIZE};
use std::fmt;

/// The kind of access that faulted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    Read,
    Write,
    Atomic,
}

impl fmt::Display for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Access::Read => "read",
            Access::Write => "write",
            Access::Atomic => "atomic",
        })
    }
}

/// Why an access faulted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemFaultReason {
    /// No translation for the address.
    NotMapped,
    /// The translation forbids this access (e.g. a write to a read-only page).
    Permission,
    /// The address is not a multiple of the access size (raised by the
    /// interpreter before the memory is asked).
    Misaligned,
    /// The shared-memory offset is outside the workgroup's allocation, or
    /// (a [`crate::bounds::BufferBounds`] memory) the global access is not
    /// wholly inside one buffer.
    OutOfBounds,
    /// The memory behind the translation failed (device-defined).
    Bus,
}

/// A failed memory access.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MemFault {
    /// The faulting address (a GPU virtual address, or a shared-memory offset).
    pub va: u64,
    pub access: Access,
    /// Access size in bytes.
    pub size: u8,
    pub reason: MemFaultReason,
}

/// A fault of one lane of a warp-wide access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaneFault {
    pub lane: u32,
    pub fault: MemFault,
}

/// GPU virtual memory, 64-bit addresses.
///
/// The interpreter only calls these methods with naturally aligned
/// addresses (misaligned accesses fault before reaching the memory) and sizes
/// 1, 2, 4 or 8. Values are little-endian and zero-extended; sign extension
/// happens in the interpreter.
///
/// The warp-wide methods have default implementations in terms of the
/// per-access ones. A memory organised in pages implements [`PagedMemory`]
/// instead and gets this trait with warp accesses that translate once per
/// warp when the lanes share a page. Warp accesses process active lanes in
/// ascending order and report the lowest faulting lane; what the other
/// lanes of a faulting instruction did to memory is unspecified.
pub trait GlobalMemory {
    /// Reads `size` bytes at `va`.
    fn load(&self, va: u64, size: u8) -> Result<u64, MemFault>;
    /// Writes the low `size` bytes of `value` at `va`.
    fn store(&self, va: u64, size: u8, value: u64) -> Result<(), MemFault>;
    /// Atomically replaces the 32-bit word at `va` by `op(old, b, c)` and
    /// returns `old`.
    fn atomic32(&self, va: u64, op: AtomOp, b: u32, c: u32) -> Result<u32, MemFault>;

    /// Loads for every lane in `mask`: the low 32 bits into `lo`, the high 32
    /// bits (8-byte accesses) into `hi`. Other lanes are left unchanged.
    fn load_warp(
        &self,
        size: u8,
        va: &[u64; WARP_SIZE],
        mask: u32,
        lo: &mut [u32; WARP_SIZE],
        hi: &mut [u32; WARP_SIZE],
    ) -> Result<(), LaneFault> {
        load_lanes(size, va, mask, lo, hi, |va, size| self.load(va, size))
    }

    /// Stores for every lane in `mask` the value `lo | hi << 32`, in ascending
    /// lane order.
    fn store_warp(
        &self,
        size: u8,
        va: &[u64; WARP_SIZE],
        mask: u32,
        lo: &[u32; WARP_SIZE],
        hi: &[u32; WARP_SIZE],
    ) -> Result<(), LaneFault> {
        store_lanes(size, va, mask, lo, hi, |va, size, v| {
            self.store(va, size, v)
        })
    }

    /// The page holding `va` if native code may reach it directly for
    /// `access` (`Read` or `Write`); `None` (the default) sends every
    /// access through the methods above. The JIT caches the answer for
    /// the rest of one `run` call, as the device's compute units cache
    /// translations for one step.
    fn direct_page(&self, va: u64, access: Access) -> Option<DirectPage> {
        let _ = (va, access);
        None
    }

    /// How long the pages [`GlobalMemory::direct_page`] returns stay valid:
    /// 0 (the default), for one `run` call; otherwise for as long as this
    /// memory returns the same value, which it must change (to a value no
    /// memory returned before, see [`new_epoch`]) before any of those pages
    /// stops being valid as [`DirectPage::new`] describes — its mappings or
    /// permissions change, or it is dropped.
    fn direct_epoch(&self) -> u64 {
        0
    }
}

/// A page of global memory that native code may access directly: GPU VAs
/// `va_base .. va_base + len` are the host bytes `host .. host + len`.
/// Built only through the `unsafe` [`DirectPage::new`], whose caller
/// vouches for the mapping.
/// A memory seen through a sized reference, so that any memory, sized or
/// not, can be passed on as `&dyn GlobalMemory`: every method is the
/// memory's own.
pub(crate) struct Forward<'a, M: ?Sized>(pub(crate) &'a M);

impl<M: GlobalMemory + ?Sized> GlobalMemory for Forward<'_, M> {
    #[inline]
    fn load(&self, va: u64, size: u8) -> Result<u64, MemFault> {
        self.0.load(va, size)
    }

    #[inline]
    fn store(&self, va: u64, size: u8, value: u64) -> Result<(), MemFault> {
        self.0.store(va, size, value)
    }

    #[inline]
    fn atomic32(&self, va: u64, op: AtomOp, b: u32, c: u32) -> Result<u32, MemFault> {
        self.0.atomic32(va, op, b, c)
    }

    #[inline]
    fn load_warp(
        &self,
        size: u8,
        va: &[u64; WARP_SIZE],
        mask: u32,
        lo: &mut [u32; WARP_SIZE],
        hi: &mut [u32; WARP_SIZE],
    ) -> Result<(), LaneFault> {
        self.0.load_warp(size, va, mask, lo, hi)
    }

    #[inline]
    fn store_warp(
        &self,
        size: u8,
        va: &[u64; WARP_SIZE],
        mask: u32,
        lo: &[u32; WARP_SIZE],
        hi: &[u32; WARP_SIZE],
    ) -> Result<(), LaneFault> {
        self.0.store_warp(size, va, mask, lo, hi)
    }

    #[inline]
    fn direct_page(&self, va: u64, access: Access) -> Option<DirectPage> {
        self.0.direct_page(va, access)
    }

    #[inline]
    fn direct_epoch(&self) -> u64 {
        self.0.direct_epoch()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirectPage {
    va_base: u64,
    len: u64,
    host: std::ptr::NonNull<u8>,
}

impl DirectPage {
    /// The page `va_base .. va_base + len` (`len` a multiple of 4096,
    /// `va_base` aligned to it) at host address `host`.
    ///
    /// # Safety
    ///
    /// For as long as the memory that returns this page is borrowed, and
    /// beyond while its [`GlobalMemory::direct_epoch`] stays the same
    /// non-zero value:
    /// `host .. host + len` stays mapped, every naturally aligned access of
    /// 1, 2, 4 (and, as two or four such words, 8 or 16) bytes to it is
    /// allowed for the access kind the page was asked for (reads for
    /// `Read`, writes for `Write`), may race with other threads (the memory
    /// is shared: only single-copy atomic accesses happen there), and has
    /// exactly the effect of the memory's own `load`/`store` at the same VA
    /// (same permissions, no poison, no fault).
    pub unsafe fn new(va_base: u64, len: u64, host: std::ptr::NonNull<u8>) -> Option<DirectPage> {
        let ok = len >= 4096
            && len.is_power_of_two()
            && va_base.is_multiple_of(len)
            && va_base.checked_add(len).is_some();
        ok.then_some(DirectPage { va_base, len, host })
    }
    /// The first GPU VA of the page.
    pub fn va_base(&self) -> u64 {
        self.va_base
    }
    /// The page's size in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }
    /// Never empty (pages are at least 4 KiB).
    pub fn is_empty(&self) -> bool {
        false
    }
    /// The host address of `va_base`.
    pub fn host(&self) -> std::ptr::NonNull<u8> {
        self.host
    }
}

/// The lane-by-lane load: `load` for every lane of `mask`, in ascending
/// order, stopping at the first fault.
#[inline]
fn load_lanes(
    size: u8,
    va: &[u64; WARP_SIZE],
    mask: u32,
    lo: &mut [u32; WARP_SIZE],
    hi: &mut [u32; WARP_SIZE],
    load: impl Fn(u64, u8) -> Result<u64, MemFault>,
) -> Result<(), LaneFault> {
    for lane in lanes(mask) {
        let v = load(va[lane], size).map_err(|fault| LaneFault {
            lane: lane as u32,
            fault,
        })?;
        lo[lane] = v as u32;
        hi[lane] = (v >> 32) as u32;
    }
    Ok(())
}

/// The lane-by-lane store: `store` for every lane of `mask`, in ascending
/// order, stopping at the first fault.
#[inline]
fn store_lanes(
    size: u8,
    va: &[u64; WARP_SIZE],
    mask: u32,
    lo: &[u32; WARP_SIZE],
    hi: &[u32; WARP_SIZE],
    store: impl Fn(u64, u8, u64) -> Result<(), MemFault>,
) -> Result<(), LaneFault> {
    for lane in lanes(mask) {
        let v = lo[lane] as u64 | (hi[lane] as u64) << 32;
        store(va[lane], size, v).map_err(|fault| LaneFault {
            lane: lane as u32,
            fault,
        })?;
    }
    Ok(())
}

/// One page of a [`PagedMemory`], reachable without translation, as
/// [`PagedMemory::page_span`] hands it out.
pub trait MappedPage {
    /// Reads `size` bytes at `va`.
    ///
    /// # Safety
    ///
    /// `va` lies in `lo..=hi` of the [`PagedMemory::page_span`] call that
    /// returned this page and is aligned to that call's `size`, which
    /// `size` equals.
    unsafe fn read(&self, va: u64, size: u8) -> u64;

    /// Writes the low `size` bytes of `value` at `va`.
    ///
    /// # Safety
    ///
    /// As for [`MappedPage::read`].
    unsafe fn write(&self, va: u64, size: u8, value: u64);

    /// Reads the 32 consecutive 32-bit words from `va` into `out`.
    ///
    /// # Safety
    ///
    /// As for [`MappedPage::read`], for every word.
    #[inline(always)]
    unsafe fn read_words(&self, va: u64, out: &mut [u32; WARP_SIZE]) {
        for (l, w) in out.iter_mut().enumerate() {
            // SAFETY: the caller's guarantee, word by word.
            *w = unsafe { self.read(va + 4 * l as u64, 4) } as u32;
        }
    }

    /// Writes the 32 consecutive 32-bit words of `words` from `va`.
    ///
    /// # Safety
    ///
    /// As for [`MappedPage::read`], for every word.
    #[inline(always)]
    unsafe fn write_words(&self, va: u64, words: &[u32; WARP_SIZE]) {
        for (l, &w) in words.iter().enumerate() {
            // SAFETY: the caller's guarantee, word by word.
            unsafe { self.write(va + 4 * l as u64, 4, w as u64) };
        }
    }
}

/// Memory organised in pages: the per-access operations (translation and
/// faults) and a lookup of the page a whole warp's access falls in. Every
/// `PagedMemory` is a [`GlobalMemory`] whose warp accesses look the page up
/// once and access it directly when all active lanes share a page that
/// allows the access, and fall back to the per-access operations lane by
/// lane otherwise (lanes spanning pages, a fault, misaligned lanes), which
/// then report the fault.
pub trait PagedMemory {
    /// A page handed out by [`PagedMemory::page_span`].
    type Page<'p>: MappedPage
    where
        Self: 'p;

    /// Reads `size` bytes at `va` (one lane's load).
    fn lane_load(&self, va: u64, size: u8) -> Result<u64, MemFault>;
    /// Writes the low `size` bytes of `value` at `va` (one lane's store).
    fn lane_store(&self, va: u64, size: u8, value: u64) -> Result<(), MemFault>;
    /// [`GlobalMemory::atomic32`].
    fn lane_atomic32(&self, va: u64, op: AtomOp, b: u32, c: u32) -> Result<u32, MemFault>;

    /// The page holding `lo..hi + size` if that range lies in one page
    /// that allows `access` and can be reached directly; `None` sends the
    /// warp lane by lane. Called with `lo <= hi`, both aligned to `size`,
    /// and `size` 1, 2, 4 or 8.
    fn page_span(&self, lo: u64, hi: u64, size: u8, access: Access) -> Option<Self::Page<'_>>;

    /// [`GlobalMemory::direct_page`].
    fn direct_page(&self, va: u64, access: Access) -> Option<DirectPage> {
        let _ = (va, access);
        None
    }

    /// [`GlobalMemory::direct_epoch`].
    fn direct_epoch(&self) -> u64 {
        0
    }
}

/// `va[0]` if the access is the common one: a full warp of 32-bit words at
/// consecutive, aligned addresses from `va[0]` upwards (no wrap).
#[inline(always)]
fn consecutive_words(size: u8, va: &[u64; WARP_SIZE], mask: u32) -> Option<u64> {
    if size != 4 || mask != u32::MAX {
        return None;
    }
    let first = va[0];
    let mut differ = 0u64;
    for (l, &a) in va.iter().enumerate() {
        differ |= a ^ first.wrapping_add(4 * l as u64);
    }
    (differ == 0 && first.is_multiple_of(4) && first <= u64::MAX - 4 * 31).then_some(first)
}

/// Lowest and highest address of the lanes in `mask` (non-zero), if every
/// one is aligned to `size` (1, 2, 4 or 8).
#[inline(always)]
fn aligned_span(va: &[u64; WARP_SIZE], mask: u32, size: u8) -> Option<(u64, u64)> {
    if mask == 0 || !matches!(size, 1 | 2 | 4 | 8) {
        return None;
    }
    let mut lo = u64::MAX;
    let mut hi = 0u64;
    let mut low_bits = 0u64;
    for (l, &a) in va.iter().enumerate() {
        let on = mask >> l & 1 != 0;
        lo = if on { lo.min(a) } else { lo };
        hi = if on { hi.max(a) } else { hi };
        low_bits |= if on { a } else { 0 };
    }
    (low_bits & (size as u64 - 1) == 0).then_some((lo, hi))
}

impl<M: PagedMemory + ?Sized> GlobalMemory for M {
    #[inline]
    fn load(&self, va: u64, size: u8) -> Result<u64, MemFault> {
        self.lane_load(va, size)
    }

    #[inline]
    fn store(&self, va: u64, size: u8, value: u64) -> Result<(), MemFault> {
        self.lane_store(va, size, value)
    }

    #[inline]
    fn atomic32(&self, va: u64, op: AtomOp, b: u32, c: u32) -> Result<u32, MemFault> {
        self.lane_atomic32(va, op, b, c)
    }

    fn load_warp(
        &self,
        size: u8,
        va: &[u64; WARP_SIZE],
        mask: u32,
        lo: &mut [u32; WARP_SIZE],
        hi: &mut [u32; WARP_SIZE],
    ) -> Result<(), LaneFault> {
        if let Some(first) = consecutive_words(size, va, mask) {
            if let Some(p) = self.page_span(first, first + 4 * 31, 4, Access::Read) {
                // SAFETY: the 32 words `first + 4 * l` lie in
                // `first..=first + 124` and are aligned to 4, the span `p`
                // was returned for.
                unsafe { p.read_words(first, lo) };
                return Ok(());
            }
        } else if let Some((first, last)) = aligned_span(va, mask, size) {
            if let Some(p) = self.page_span(first, last, size, Access::Read) {
                for l in lanes(mask) {
                    // SAFETY: every active lane's address lies in
                    // `first..=last` and is aligned to `size` (checked by
                    // `aligned_span`), the span `p` was returned for.
                    let v = unsafe { p.read(va[l], size) };
                    lo[l] = v as u32;
                    hi[l] = (v >> 32) as u32;
                }
                return Ok(());
            }
        }
        load_lanes(size, va, mask, lo, hi, |va, size| self.lane_load(va, size))
    }

    fn store_warp(
        &self,
        size: u8,
        va: &[u64; WARP_SIZE],
        mask: u32,
        lo: &[u32; WARP_SIZE],
        hi: &[u32; WARP_SIZE],
    ) -> Result<(), LaneFault> {
        if let Some(first) = consecutive_words(size, va, mask) {
            if let Some(p) = self.page_span(first, first + 4 * 31, 4, Access::Write) {
                // SAFETY: as in `load_warp`.
                unsafe { p.write_words(first, lo) };
                return Ok(());
            }
        } else if let Some((first, last)) = aligned_span(va, mask, size) {
            if let Some(p) = self.page_span(first, last, size, Access::Write) {
                for l in lanes(mask) {
                    let v = lo[l] as u64 | (hi[l] as u64) << 32;
                    // SAFETY: as in `load_warp`.
                    unsafe { p.write(va[l], size, v) };
                }
                return Ok(());
            }
        }
        store_lanes(size, va, mask, lo, hi, |va, size, v| {
            self.lane_store(va, size, v)
        })
    }

    #[inline]
    fn direct_page(&self, va: u64, access: Access) -> Option<DirectPage> {
        PagedMemory::direct_page(self, va, access)
    }

    #[inline]
    fn direct_epoch(&self) -> u64 {
        PagedMemory::direct_epoch(self)
    }
}

/// Iterates over the set bits of a lane mask, lowest first.
#[inline]
pub fn lanes(mut mask: u32) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        if mask == 0 {
            None
        } else {
            let l = mask.trailing_zeros() as usize;
            mask &= mask - 1;
            Some(l)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const RO: u64 = 3 * PAGE_SIZE;

    /// Pages 1 and 2 writable, page 3 read-only, page 4 unmapped.
    fn mem() -> SparseMemory {
        let mut m = SparseMemory::new();
        m.map(PAGE_SIZE, 2 * PAGE_SIZE, true);
        m.map(RO, PAGE_SIZE, false);
        m
    }

    fn warp(base: u64, stride: u64) -> [u64; WARP_SIZE] {
        std::array::from_fn(|l| base + stride * l as u64)
    }

    #[test]
    fn warp_accesses_in_one_page_across_pages_and_faulting() {
        let m = mem();
        let lo: [u32; WARP_SIZE] = std::array::from_fn(|l| 0x100 + l as u32);
        let hi: [u32; WARP_SIZE] = std::array::from_fn(|l| 0x200 + l as u32);
        let (mut a, mut b) = ([0u32; WARP_SIZE], [0u32; WARP_SIZE]);
        // One page, full warp, words.
        let va = warp(PAGE_SIZE + 0x40, 4);
        m.store_warp(4, &va, u32::MAX, &lo, &hi).unwrap();
        m.load_warp(4, &va, u32::MAX, &mut a, &mut b).unwrap();
        assert_eq!(a, lo);
        // Straddling pages 1 and 2 (the lane-by-lane path), 8 bytes, half
        // the lanes.
        let va = warp(2 * PAGE_SIZE - 64, 8);
        m.store_warp(8, &va, 0x5555_5555, &lo, &hi).unwrap();
        let (mut a, mut b) = ([0u32; WARP_SIZE], [0u32; WARP_SIZE]);
        m.load_warp(8, &va, u32::MAX, &mut a, &mut b).unwrap();
        for l in 0..WARP_SIZE {
            let want = if l % 2 == 0 { (lo[l], hi[l]) } else { (0, 0) };
            assert_eq!((a[l], b[l]), want, "lane {l}");
        }
        // Bytes and halves land in their word.
        let bytes: [u32; WARP_SIZE] = std::array::from_fn(|l| 0xaa + 0x11 * l as u32);
        m.store_warp(1, &warp(PAGE_SIZE + 0x1000, 1), 0b11, &bytes, &hi)
            .unwrap();
        m.store_warp(2, &[PAGE_SIZE + 0x1002; WARP_SIZE], 1, &[0xbeef; 32], &hi)
            .unwrap();
        assert_eq!(m.load(PAGE_SIZE + 0x1000, 4).unwrap(), 0xbeef_bbaa);
        // A store reaching the read-only page faults at its first lane
        // there; loads from it work; past it nothing is mapped.
        let va = warp(RO - 64, 4);
        let f = m.store_warp(4, &va, u32::MAX, &lo, &hi).unwrap_err();
        assert_eq!((f.lane, f.fault.va), (16, RO));
        assert_eq!(f.fault.reason, MemFaultReason::Permission);
        m.load_warp(4, &va, u32::MAX, &mut a, &mut b).unwrap();
        let f = m
            .load_warp(4, &warp(4 * PAGE_SIZE - 8, 4), u32::MAX, &mut a, &mut b)
            .unwrap_err();
        assert_eq!((f.lane, f.fault.reason), (2, MemFaultReason::NotMapped));
        // No active lane: nothing happens.
        m.load_warp(4, &warp(0, 4), 0, &mut a, &mut b).unwrap();
    }

    #[test]
    fn misaligned_lanes_go_lane_by_lane() {
        let m = mem();
        let mut va = warp(PAGE_SIZE, 4);
        va[5] += 2;
        let (mut a, mut b) = ([0u32; WARP_SIZE], [0u32; WARP_SIZE]);
        let lo: [u32; WARP_SIZE] = std::array::from_fn(|l| l as u32);
        m.store_warp(4, &va, u32::MAX, &lo, &lo).unwrap();
        m.load_warp(4, &va, u32::MAX, &mut a, &mut b).unwrap();
        assert_eq!(a[6], 6);
        assert_eq!(aligned_span(&va, u32::MAX, 4), None);
        assert_eq!(aligned_span(&va, !(1 << 5), 4), Some((va[0], va[31])));
        assert_eq!(aligned_span(&va, 1, 3), None, "size 3");
    }
}
