//! [`SparseMemory`]: global memory in 64 KiB host pages, mapped
//! explicitly, for tests, benchmarks and `vgpu-as run`. It is a
//! [`PagedMemory`], so its warp accesses take the one-page paths and the
//! JIT reaches its pages directly.

use super::{Access, DirectPage, MappedPage, MemFault, MemFaultReason, PagedMemory};
use crate::inst::{AtomOp, WARP_SIZE};
use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU32, Ordering};

/// log2 of the page size of [`SparseMemory`].
pub const PAGE_SHIFT: u32 = 16;
/// Page size of [`SparseMemory`] (64 KiB).
pub const PAGE_SIZE: u64 = 1 << PAGE_SHIFT;
const PAGE_WORDS: usize = (PAGE_SIZE / 4) as usize;
const PAGE_MASK: u64 = PAGE_SIZE - 1;

/// The words of a page, aligned to a host page as guest RAM is: a warp's
/// 128 aligned bytes are two host cache lines, not three. (A plain
/// allocation of 64 KiB sits 16 bytes past a page boundary; saxpy on the
/// JIT ran about 6 % slower on such pages.)
#[repr(C, align(4096))]
struct PageWords([AtomicU32; PAGE_WORDS]);

/// One page of a [`SparseMemory`] (what its warp accesses reach directly).
pub struct SparsePage {
    words: Box<PageWords>,
    writable: bool,
}

impl SparsePage {
    fn new(writable: bool) -> SparsePage {
        let words = Box::new(PageWords(std::array::from_fn(|_| AtomicU32::new(0))));
        SparsePage { words, writable }
    }
    #[inline(always)]
    fn word(&self, va: u64) -> &AtomicU32 {
        &self.words.0[((va & PAGE_MASK) >> 2) as usize]
    }
}

/// Multiplicative hash for page numbers.
#[derive(Default)]
pub struct PageHasher(u64);

impl Hasher for PageHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// Sparse paged memory: 64 KiB pages, mapped explicitly with [`map`], every
/// word an atomic so any number of compute units may share it.
///
/// [`map`]: SparseMemory::map
pub struct SparseMemory {
    pages: HashMap<u64, SparsePage, BuildHasherDefault<PageHasher>>,
    /// [`GlobalMemory::direct_epoch`](super::GlobalMemory::direct_epoch): new at creation and at every change
    /// of the mappings.
    epoch: u64,
}

impl Default for SparseMemory {
    fn default() -> Self {
        SparseMemory {
            pages: HashMap::default(),
            epoch: new_epoch(),
        }
    }
}

/// A value no memory had before: what [`GlobalMemory::direct_epoch`](super::GlobalMemory::direct_epoch)
/// implementations hand out.
pub fn new_epoch() -> u64 {
    use std::sync::atomic::AtomicU64;
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

impl fmt::Debug for SparseMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SparseMemory")
            .field("pages", &self.pages.len())
            .finish()
    }
}

impl SparseMemory {
    pub fn new() -> Self {
        Self::default()
    }

    /// Maps the pages covering `[va, va + len)`, zero-filled (pages already
    /// mapped keep their contents and take the new permission).
    pub fn map(&mut self, va: u64, len: u64, writable: bool) {
        self.epoch = new_epoch();
        if len == 0 {
            return;
        }
        let first = va >> PAGE_SHIFT;
        let last = va.saturating_add(len - 1) >> PAGE_SHIFT;
        for p in first..=last {
            self.pages
                .entry(p)
                .and_modify(|pg| pg.writable = writable)
                .or_insert_with(|| SparsePage::new(writable));
        }
    }

    /// Unmaps the pages covering `[va, va + len)`.
    pub fn unmap(&mut self, va: u64, len: u64) {
        self.epoch = new_epoch();
        if len == 0 {
            return;
        }
        let first = va >> PAGE_SHIFT;
        let last = va.saturating_add(len - 1) >> PAGE_SHIFT;
        for p in first..=last {
            self.pages.remove(&p);
        }
    }

    /// Number of mapped pages.
    pub fn mapped_pages(&self) -> usize {
        self.pages.len()
    }

    #[inline(always)]
    fn page(&self, va: u64, access: Access, size: u8) -> Result<&SparsePage, MemFault> {
        let fault = |reason| MemFault {
            va,
            access,
            size,
            reason,
        };
        let p = self
            .pages
            .get(&(va >> PAGE_SHIFT))
            .ok_or(fault(MemFaultReason::NotMapped))?;
        if access != Access::Read && !p.writable {
            return Err(fault(MemFaultReason::Permission));
        }
        Ok(p)
    }

    /// Host access: writes bytes regardless of page permissions.
    pub fn write_bytes(&self, va: u64, data: &[u8]) -> Result<(), MemFault> {
        for (i, &b) in data.iter().enumerate() {
            let a = va.wrapping_add(i as u64);
            let p = self.page(a, Access::Read, 1)?;
            store_sub(p.word(a), a, 1, b as u32);
        }
        Ok(())
    }

    /// Host access: reads bytes.
    pub fn read_bytes(&self, va: u64, len: usize) -> Result<Vec<u8>, MemFault> {
        let mut out = Vec::with_capacity(len.min(1 << 30));
        for i in 0..len {
            let a = va.wrapping_add(i as u64);
            let p = self.page(a, Access::Read, 1)?;
            let w = p.word(a).load(Ordering::Relaxed);
            out.push((w >> ((a & 3) * 8)) as u8);
        }
        Ok(out)
    }

    /// Host access: writes 32-bit words (`va` 4-byte aligned).
    pub fn write_u32s(&self, va: u64, data: &[u32]) -> Result<(), MemFault> {
        for (i, &w) in data.iter().enumerate() {
            let a = va.wrapping_add(4 * i as u64);
            if !a.is_multiple_of(4) {
                return Err(MemFault {
                    va: a,
                    access: Access::Write,
                    size: 4,
                    reason: MemFaultReason::Misaligned,
                });
            }
            self.page(a, Access::Read, 4)?
                .word(a)
                .store(w, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Host access: reads 32-bit words (`va` 4-byte aligned).
    pub fn read_u32s(&self, va: u64, n: usize) -> Result<Vec<u32>, MemFault> {
        let mut out = Vec::with_capacity(n.min(1 << 28));
        for i in 0..n {
            let a = va.wrapping_add(4 * i as u64);
            if !a.is_multiple_of(4) {
                return Err(MemFault {
                    va: a,
                    access: Access::Read,
                    size: 4,
                    reason: MemFaultReason::Misaligned,
                });
            }
            out.push(
                self.page(a, Access::Read, 4)?
                    .word(a)
                    .load(Ordering::Relaxed),
            );
        }
        Ok(out)
    }

    /// Host access: writes f32 values.
    pub fn write_f32s(&self, va: u64, data: &[f32]) -> Result<(), MemFault> {
        let words: Vec<u32> = data.iter().map(|f| f.to_bits()).collect();
        self.write_u32s(va, &words)
    }

    /// Host access: reads f32 values.
    pub fn read_f32s(&self, va: u64, n: usize) -> Result<Vec<f32>, MemFault> {
        Ok(self
            .read_u32s(va, n)?
            .into_iter()
            .map(f32::from_bits)
            .collect())
    }
}

#[inline(always)]
fn store_sub(word: &AtomicU32, va: u64, size: u8, value: u32) {
    let shift = (va & 3) * 8;
    let m: u32 = if size == 1 { 0xff } else { 0xffff };
    let mask = m << shift;
    let bits = (value & m) << shift;
    let _ = word.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| {
        Some((old & !mask) | bits)
    });
}

#[inline(always)]
fn load_in_page(p: &SparsePage, va: u64, size: u8) -> u64 {
    let w = p.word(va).load(Ordering::Relaxed);
    match size {
        1 => ((w >> ((va & 3) * 8)) & 0xff) as u64,
        2 => ((w >> ((va & 2) * 8)) & 0xffff) as u64,
        4 => w as u64,
        _ => w as u64 | (p.word(va + 4).load(Ordering::Relaxed) as u64) << 32,
    }
}

#[inline(always)]
fn store_in_page(p: &SparsePage, va: u64, size: u8, value: u64) {
    match size {
        1 | 2 => store_sub(p.word(va), va, size, value as u32),
        4 => p.word(va).store(value as u32, Ordering::Relaxed),
        _ => {
            p.word(va).store(value as u32, Ordering::Relaxed);
            p.word(va + 4)
                .store((value >> 32) as u32, Ordering::Relaxed);
        }
    }
}

impl MappedPage for &SparsePage {
    #[inline(always)]
    unsafe fn read(&self, va: u64, size: u8) -> u64 {
        load_in_page(self, va, size)
    }

    #[inline(always)]
    unsafe fn write(&self, va: u64, size: u8, value: u64) {
        store_in_page(self, va, size, value);
    }

    #[inline(always)]
    unsafe fn read_words(&self, va: u64, out: &mut [u32; WARP_SIZE]) {
        let first = ((va & PAGE_MASK) >> 2) as usize;
        for (o, w) in out.iter_mut().zip(&self.words.0[first..first + WARP_SIZE]) {
            *o = w.load(Ordering::Relaxed);
        }
    }

    #[inline(always)]
    unsafe fn write_words(&self, va: u64, words: &[u32; WARP_SIZE]) {
        let first = ((va & PAGE_MASK) >> 2) as usize;
        for (&v, w) in words.iter().zip(&self.words.0[first..first + WARP_SIZE]) {
            w.store(v, Ordering::Relaxed);
        }
    }
}

impl PagedMemory for SparseMemory {
    type Page<'p> = &'p SparsePage;

    fn lane_load(&self, va: u64, size: u8) -> Result<u64, MemFault> {
        let p = self.page(va, Access::Read, size)?;
        Ok(load_in_page(p, va, size))
    }

    fn lane_store(&self, va: u64, size: u8, value: u64) -> Result<(), MemFault> {
        let p = self.page(va, Access::Write, size)?;
        store_in_page(p, va, size, value);
        Ok(())
    }

    fn lane_atomic32(&self, va: u64, op: AtomOp, b: u32, c: u32) -> Result<u32, MemFault> {
        let w = self.page(va, Access::Atomic, 4)?.word(va);
        Ok(op.apply_atomic(w, b, c))
    }

    #[inline(always)]
    fn page_span(&self, lo: u64, hi: u64, size: u8, access: Access) -> Option<&SparsePage> {
        if lo >> PAGE_SHIFT != hi >> PAGE_SHIFT {
            return None;
        }
        self.page(lo, access, size).ok()
    }

    fn direct_page(&self, va: u64, access: Access) -> Option<DirectPage> {
        if access == Access::Atomic {
            return None;
        }
        let p = self.page(va & !3, access, 4).ok()?;
        let host = std::ptr::NonNull::new(p.words.0.as_ptr().cast_mut().cast::<u8>())?;
        // SAFETY: the page's words live in a box that stays in the map for
        // as long as `self` is borrowed (unmapping needs `&mut self`); they
        // are `AtomicU32`s, so shared aligned accesses of any thread are
        // allowed and are what `load_in_page`/`store_in_page` do; `page`
        // checked the permission for `access`; there is no poison here.
        unsafe { DirectPage::new(va & !PAGE_MASK, PAGE_SIZE, host) }
    }

    fn direct_epoch(&self) -> u64 {
        // Renewed by `map` and `unmap`, the only changes of the pages and
        // their permissions (both need `&mut self`, as dropping does).
        self.epoch
    }
}
