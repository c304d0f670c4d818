//! Global memory as the compute engine sees it: the [`GlobalMemory`] trait the
//! device implements on top of its MMU, and [`SparseMemory`], a paged
//! in-memory implementation for tests, benchmarks and `vgpu-as run`.

use crate::inst::{AtomOp, WARP_SIZE};
use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU32, Ordering};

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
    /// The shared-memory offset is outside the workgroup's allocation.
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
/// per-access ones; an implementation overrides them to translate once per
/// page instead of once per lane. They process active lanes in ascending
/// order and report the lowest faulting lane; what the other lanes of a
/// faulting instruction did to memory is unspecified.
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
        for lane in lanes(mask) {
            let v = lo[lane] as u64 | (hi[lane] as u64) << 32;
            self.store(va[lane], size, v).map_err(|fault| LaneFault {
                lane: lane as u32,
                fault,
            })?;
        }
        Ok(())
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

/// log2 of the page size of [`SparseMemory`].
pub const PAGE_SHIFT: u32 = 16;
/// Page size of [`SparseMemory`] (64 KiB).
pub const PAGE_SIZE: u64 = 1 << PAGE_SHIFT;
const PAGE_WORDS: usize = (PAGE_SIZE / 4) as usize;
const PAGE_MASK: u64 = PAGE_SIZE - 1;

struct Page {
    words: Box<[AtomicU32; PAGE_WORDS]>,
    writable: bool,
}

impl Page {
    fn new(writable: bool) -> Page {
        let v: Vec<AtomicU32> = (0..PAGE_WORDS).map(|_| AtomicU32::new(0)).collect();
        let words = match v.into_boxed_slice().try_into() {
            Ok(b) => b,
            Err(_) => unreachable!("the vector has PAGE_WORDS elements"),
        };
        Page { words, writable }
    }
    #[inline(always)]
    fn word(&self, va: u64) -> &AtomicU32 {
        &self.words[((va & PAGE_MASK) >> 2) as usize]
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
#[derive(Default)]
pub struct SparseMemory {
    pages: HashMap<u64, Page, BuildHasherDefault<PageHasher>>,
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
        if len == 0 {
            return;
        }
        let first = va >> PAGE_SHIFT;
        let last = va.saturating_add(len - 1) >> PAGE_SHIFT;
        for p in first..=last {
            self.pages
                .entry(p)
                .and_modify(|pg| pg.writable = writable)
                .or_insert_with(|| Page::new(writable));
        }
    }

    /// Unmaps the pages covering `[va, va + len)`.
    pub fn unmap(&mut self, va: u64, len: u64) {
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
    fn page(&self, va: u64, access: Access, size: u8) -> Result<&Page, MemFault> {
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

    /// The page all lanes of `mask` fall in, if they share one.
    #[inline(always)]
    fn common_page(va: &[u64; WARP_SIZE], mask: u32) -> Option<u64> {
        if mask == 0 {
            return None;
        }
        let first = va[mask.trailing_zeros() as usize];
        let mut differ = 0u64;
        for l in 0..WARP_SIZE {
            let active = if mask & (1u32 << l) != 0 { u64::MAX } else { 0 };
            differ |= (va[l] ^ first) & active;
        }
        if differ >> PAGE_SHIFT == 0 {
            Some(first >> PAGE_SHIFT << PAGE_SHIFT)
        } else {
            None
        }
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
fn load_in_page(p: &Page, va: u64, size: u8) -> u64 {
    let w = p.word(va).load(Ordering::Relaxed);
    match size {
        1 => ((w >> ((va & 3) * 8)) & 0xff) as u64,
        2 => ((w >> ((va & 2) * 8)) & 0xffff) as u64,
        4 => w as u64,
        _ => w as u64 | (p.word(va + 4).load(Ordering::Relaxed) as u64) << 32,
    }
}

#[inline(always)]
fn store_in_page(p: &Page, va: u64, size: u8, value: u64) {
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

impl GlobalMemory for SparseMemory {
    fn load(&self, va: u64, size: u8) -> Result<u64, MemFault> {
        let p = self.page(va, Access::Read, size)?;
        Ok(load_in_page(p, va, size))
    }

    fn store(&self, va: u64, size: u8, value: u64) -> Result<(), MemFault> {
        let p = self.page(va, Access::Write, size)?;
        store_in_page(p, va, size, value);
        Ok(())
    }

    fn atomic32(&self, va: u64, op: AtomOp, b: u32, c: u32) -> Result<u32, MemFault> {
        let w = self.page(va, Access::Atomic, 4)?.word(va);
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
        if let Some(base) = Self::common_page(va, mask) {
            if let Ok(p) = self.page(base, Access::Read, size) {
                if size == 4 && mask == u32::MAX {
                    for l in 0..WARP_SIZE {
                        lo[l] = p.word(va[l]).load(Ordering::Relaxed);
                    }
                } else if size == 4 {
                    for l in 0..WARP_SIZE {
                        if mask >> l & 1 != 0 {
                            lo[l] = p.word(va[l]).load(Ordering::Relaxed);
                        }
                    }
                } else {
                    for l in lanes(mask) {
                        let v = load_in_page(p, va[l], size);
                        lo[l] = v as u32;
                        hi[l] = (v >> 32) as u32;
                    }
                }
                return Ok(());
            }
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
        if let Some(base) = Self::common_page(va, mask) {
            if let Ok(p) = self.page(base, Access::Write, size) {
                if size == 4 && mask == u32::MAX {
                    for l in 0..WARP_SIZE {
                        p.word(va[l]).store(lo[l], Ordering::Relaxed);
                    }
                } else if size == 4 {
                    for l in 0..WARP_SIZE {
                        if mask >> l & 1 != 0 {
                            p.word(va[l]).store(lo[l], Ordering::Relaxed);
                        }
                    }
                } else {
                    for l in lanes(mask) {
                        store_in_page(p, va[l], size, lo[l] as u64 | (hi[l] as u64) << 32);
                    }
                }
                return Ok(());
            }
        }
        for lane in lanes(mask) {
            let v = lo[lane] as u64 | (hi[lane] as u64) << 32;
            self.store(va[lane], size, v).map_err(|fault| LaneFault {
                lane: lane as u32,
                fault,
            })?;
        }
        Ok(())
    }
}
