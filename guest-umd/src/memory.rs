//! GPU memory: buffer objects bound into the context's GPU VM and mapped
//! for the CPU, a VA allocator, and the size-class pool with fence-tagged
//! reuse.
//!
//! Size classes: small (< 1 KiB) blocks carved from 64 KiB slabs in
//! power-of-two slots of 64..=1024 bytes; medium (1..=64 KiB) one BO per
//! block rounded up to a power of two; large (> 64 KiB) one BO rounded up
//! to 64 KiB. A freed block is tagged with the fences of the work that may
//! still use it and handed out again only once all of them signalled.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::kmd::{Kmd, KmdError};
use crate::uapi;

/// Memory errors.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum MemError {
    /// Size zero or above the largest BO.
    #[error("invalid size {0} (1..={max})", max = uapi::GEM_MAX_SIZE)]
    BadSize(u64),
    /// The GPU VA range is exhausted.
    #[error("GPU virtual address space exhausted ({0} bytes requested)")]
    NoVa(u64),
    /// A range outside the buffer.
    #[error("range {offset}+{len} outside a buffer of {size} bytes")]
    OutOfRange {
        /// Offset.
        offset: u64,
        /// Length.
        len: u64,
        /// Buffer size.
        size: u64,
    },
    /// The buffer is device-local: it has no CPU mapping.
    #[error("buffer is device-local (no CPU mapping)")]
    NotHostVisible,
    /// The KMD refused.
    #[error(transparent)]
    Kmd(#[from] KmdError),
}

/// First-fit allocator of GPU VA ranges (4 KiB granularity, 64 KiB aligned
/// for ranges of 64 KiB and more, 2 MiB for 2 MiB and more).
#[derive(Debug)]
pub struct VaAllocator {
    free: BTreeMap<u64, u64>,
}

impl VaAllocator {
    /// `[start, end)`.
    pub fn new(start: u64, end: u64) -> VaAllocator {
        let start = start.next_multiple_of(4096);
        let mut free = BTreeMap::new();
        if end > start {
            free.insert(start, end - start);
        }
        VaAllocator { free }
    }

    /// Allocates `size` bytes (a multiple of 4 KiB).
    pub fn alloc(&mut self, size: u64) -> Option<u64> {
        let align = if size >= 2 << 20 {
            2 << 20
        } else if size >= 64 << 10 {
            64 << 10
        } else {
            4096
        };
        let (&s, &len, va) = self.free.iter().find_map(|(s, len)| {
            let va = s.next_multiple_of(align);
            (va + size <= s + len).then_some((s, len, va))
        })?;
        self.free.remove(&s);
        if va > s {
            self.free.insert(s, va - s);
        }
        if va + size < s + len {
            self.free.insert(va + size, s + len - (va + size));
        }
        Some(va)
    }

    /// Returns `[va, va + size)`, merging with neighbours.
    pub fn free(&mut self, mut va: u64, mut size: u64) {
        if let Some((&s, &l)) = self.free.range(..va).next_back() {
            if s + l == va {
                self.free.remove(&s);
                va = s;
                size += l;
            }
        }
        if let Some(&l) = self.free.get(&(va + size)) {
            self.free.remove(&(va + size));
            size += l;
        }
        self.free.insert(va, size);
    }
}

/// A buffer object bound at a GPU VA and mapped for the CPU. Dropping it
/// unmaps, unbinds, frees the VA and closes the handle.
#[derive(Debug)]
pub struct Bo {
    /// `None`: anonymous host memory standing in for a BO (pool tests).
    kmd: Option<Arc<Kmd>>,
    vas: Arc<Mutex<VaAllocator>>,
    handle: u32,
    va: u64,
    size: u64,
    ptr: *mut u8,
    /// Every page of the mapping was faulted in for reading
    /// ([`Bo::populate_read`]).
    populated: std::sync::atomic::AtomicBool,
}

// SAFETY: the mapping is plain shared memory; `Bo` hands out only raw
// pointers and bounds-checked copies, and the KMD calls are thread-safe.
unsafe impl Send for Bo {}
// SAFETY: as above; concurrent CPU access to the bytes is the caller's
// contract (the same as for device memory in any GPU API).
unsafe impl Sync for Bo {}

impl Bo {
    /// Creates a BO of `size` (a multiple of 4 KiB) in system memory, maps
    /// it, binds it.
    pub fn new(
        kmd: &Arc<Kmd>,
        vas: &Arc<Mutex<VaAllocator>>,
        size: u64,
        bind_flags: u32,
    ) -> Result<Bo, MemError> {
        Bo::with_flags(kmd, vas, size, 0, bind_flags)
    }

    /// Creates a BO of `size` with `VGPU_GEM_CREATE_*` `gem_flags` (a
    /// placement), binds it, and maps it for the CPU unless it is placed
    /// in VRAM without `GEM_CREATE_CPU_ACCESS` (then [`Bo::ptr`] panics:
    /// such a buffer is device-local).
    pub fn with_flags(
        kmd: &Arc<Kmd>,
        vas: &Arc<Mutex<VaAllocator>>,
        size: u64,
        gem_flags: u32,
        bind_flags: u32,
    ) -> Result<Bo, MemError> {
        if size == 0 || size > uapi::GEM_MAX_SIZE {
            return Err(MemError::BadSize(size));
        }
        let size = size.next_multiple_of(4096);
        let handle = kmd.gem_create(size, gem_flags)?;
        let cpu =
            gem_flags & uapi::GEM_CREATE_VRAM == 0 || gem_flags & uapi::GEM_CREATE_CPU_ACCESS != 0;
        Bo::bind_handle(kmd, vas, handle, size, bind_flags, cpu)
    }

    /// Maps and binds the BO behind `handle` (of `size` bytes, a multiple
    /// of 4 KiB), which the returned value owns (closed on failure too): a
    /// new BO, or one imported from a dma-buf.
    pub fn from_handle(
        kmd: &Arc<Kmd>,
        vas: &Arc<Mutex<VaAllocator>>,
        handle: u32,
        size: u64,
        bind_flags: u32,
    ) -> Result<Bo, MemError> {
        Bo::bind_handle(kmd, vas, handle, size, bind_flags, true)
    }

    /// [`Bo::from_handle`], mapping it for the CPU only when `cpu`.
    fn bind_handle(
        kmd: &Arc<Kmd>,
        vas: &Arc<Mutex<VaAllocator>>,
        handle: u32,
        size: u64,
        bind_flags: u32,
        cpu: bool,
    ) -> Result<Bo, MemError> {
        let ptr = if cpu {
            match kmd.mmap(handle, size) {
                Ok(p) => p,
                Err(e) => {
                    let _ = kmd.gem_close(handle);
                    return Err(e.into());
                }
            }
        } else {
            std::ptr::null_mut()
        };
        let unmap = || {
            if !ptr.is_null() {
                // SAFETY: `ptr` is the mapping of `size` bytes created above.
                unsafe { libc::munmap(ptr.cast(), size as usize) };
            }
            let _ = kmd.gem_close(handle);
        };
        let Some(va) = vas.lock().unwrap().alloc(size) else {
            unmap();
            return Err(MemError::NoVa(size));
        };
        if let Err(e) = kmd.vm_bind(handle, va, size, bind_flags) {
            vas.lock().unwrap().free(va, size);
            unmap();
            return Err(e.into());
        }
        Ok(Bo {
            kmd: Some(kmd.clone()),
            vas: vas.clone(),
            handle,
            va,
            size,
            ptr,
            populated: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// The GEM handle.
    pub fn handle(&self) -> u32 {
        self.handle
    }

    /// Anonymous host memory with a VA from `vas` but no BO behind it: lets
    /// the pool's bookkeeping be tested without a device.
    pub fn new_host(vas: &Arc<Mutex<VaAllocator>>, size: u64) -> Result<Bo, MemError> {
        let size = size.next_multiple_of(4096);
        let va = vas
            .lock()
            .unwrap()
            .alloc(size)
            .ok_or(MemError::NoVa(size))?;
        // SAFETY: a fresh private anonymous mapping.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                size as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert!(p != libc::MAP_FAILED, "anonymous mmap failed");
        Ok(Bo {
            kmd: None,
            vas: vas.clone(),
            handle: 0,
            va,
            size,
            ptr: p.cast(),
            populated: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// GPU VA.
    pub fn va(&self) -> u64 {
        self.va
    }

    /// Bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Whether the BO is mapped for the CPU (all but device-local VRAM).
    pub fn is_mapped(&self) -> bool {
        !self.ptr.is_null()
    }

    /// CPU address of byte `off`.
    pub fn ptr(&self, off: u64) -> *mut u8 {
        assert!(
            self.is_mapped(),
            "a device-local VRAM BO has no CPU mapping"
        );
        assert!(off <= self.size);
        // SAFETY: `off` is within the mapping (checked above).
        unsafe { self.ptr.add(off as usize) }
    }

    /// Reads the 64-bit word at `off` (8-byte aligned) as the device wrote it.
    pub fn read_u64(&self, off: u64) -> u64 {
        assert!(off.is_multiple_of(8) && off + 8 <= self.size);
        let p = self.ptr(off);
        // SAFETY: `p` is an 8-byte aligned address inside this live mapping
        // (checked above); the device writes the word with one 64-bit
        // store, so an atomic load sees either value.
        unsafe { (*p.cast::<AtomicU64>()).load(Ordering::Acquire) }
    }

    /// Copies `src` to byte `off`.
    pub fn write(&self, off: u64, src: &[u8]) {
        assert!(off + src.len() as u64 <= self.size);
        let d = self.ptr(off);
        if disjoint(d, src.as_ptr(), src.len()) {
            // SAFETY: the destination range lies inside the mapping
            // (checked) and the ranges do not overlap (checked).
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), d, src.len()) };
        } else {
            // SAFETY: the destination range lies inside the mapping
            // (checked); `copy` allows the overlap (a slice the caller made
            // of this very mapping).
            unsafe { std::ptr::copy(src.as_ptr(), d, src.len()) };
        }
    }

    /// Maps every page of the BO into the process for reading in one
    /// system call (`MADV_POPULATE_READ`), the first time it is asked,
    /// instead of one page fault per 4 KiB page on first touch. Once only:
    /// the call walks every page even when they are all mapped, which
    /// under TCG costs as much as the copy it precedes. Best effort: a
    /// kernel without it leaves the pages to fault in as they are touched.
    pub fn populate_read(&self) {
        use std::sync::atomic::Ordering;
        if self.kmd.is_none() || !self.is_mapped() || self.populated.swap(true, Ordering::AcqRel) {
            return;
        }
        // SAFETY: the whole live mapping (page aligned, `size` bytes);
        // MADV_POPULATE_READ only faults pages in, it changes no contents
        // and no mapping.
        let _ = unsafe {
            libc::madvise(
                self.ptr.cast(),
                self.size as usize,
                libc::MADV_POPULATE_READ,
            )
        };
    }

    /// Copies bytes from `off` into `dst` with `memcpy`.
    pub fn read(&self, off: u64, dst: &mut [u8]) {
        self.read_with(off, dst, std::ptr::copy_nonoverlapping::<u8>);
    }

    /// Copies bytes from `off` into `dst` with a vector loop
    /// ([`read_blocks`]): the direct read path's copy out of a buffer the
    /// device wrote.
    pub fn read_blocks(&self, off: u64, dst: &mut [u8]) {
        self.read_with(off, dst, read_blocks);
    }

    /// Copies bytes from `off` into `dst`: with `copy` when the ranges do
    /// not overlap, with `memmove` when they do. `copy` is called only with
    /// ranges valid for `n` bytes that do not overlap.
    fn read_with(&self, off: u64, dst: &mut [u8], copy: unsafe fn(*const u8, *mut u8, usize)) {
        assert!(off + dst.len() as u64 <= self.size);
        let s = self.ptr(off);
        if disjoint(dst.as_ptr(), s, dst.len()) {
            // SAFETY: the source range lies inside the mapping (checked),
            // `dst` is a live slice of that length, and the ranges do not
            // overlap (checked): `copy`'s contract.
            unsafe { copy(s, dst.as_mut_ptr(), dst.len()) };
        } else {
            // SAFETY: the source range lies inside the mapping (checked);
            // `copy` allows the overlap.
            unsafe { std::ptr::copy(s, dst.as_mut_ptr(), dst.len()) };
        }
    }
}

/// Copies `len` bytes out of a BO's mapping in 64-byte blocks of 16-byte
/// vector loads and stores, the tail with `memcpy`. Reads of memory the
/// device shares are what real UMDs copy with their own vector loop
/// (Mesa's streaming-load memcpy); here, under TCG, the guest's `memcpy`
/// (`rep movsq`) out of a BO ran at 0.4–0.6× its speed between two
/// anonymous buffers while this loop ran about twice as fast
/// (docs/performance.md, device-to-host reads).
///
/// # Safety
/// `src` is valid for reads and `dst` for writes of `len` bytes, and the
/// two ranges do not overlap.
unsafe fn read_blocks(src: *const u8, dst: *mut u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_storeu_si128};
        let blocks = len / 64;
        for b in 0..blocks {
            let o = b * 64;
            // SAFETY: `o + 64 <= len`, so all four 16-byte loads lie in
            // `src`'s range and all four stores in `dst`'s (the caller's
            // contract); the unaligned forms need no alignment, and SSE2
            // is part of every x86-64 CPU.
            unsafe {
                let s = src.add(o).cast::<__m128i>();
                let d = dst.add(o).cast::<__m128i>();
                let (a, b2, c, e) = (
                    _mm_loadu_si128(s),
                    _mm_loadu_si128(s.add(1)),
                    _mm_loadu_si128(s.add(2)),
                    _mm_loadu_si128(s.add(3)),
                );
                _mm_storeu_si128(d, a);
                _mm_storeu_si128(d.add(1), b2);
                _mm_storeu_si128(d.add(2), c);
                _mm_storeu_si128(d.add(3), e);
            }
        }
        let done = blocks * 64;
        // SAFETY: the remaining `len - done` bytes of both ranges (the
        // caller's contract), which do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(src.add(done), dst.add(done), len - done) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: the caller's contract.
    unsafe {
        std::ptr::copy_nonoverlapping(src, dst, len)
    };
}

/// Whether `len` bytes at `a` and at `b` do not overlap. Copies between
/// disjoint ranges take `memcpy`, not `memmove`: under TCG the guest's
/// `memmove` of a BO's mapping into a buffer ran at about half `memcpy`'s
/// speed (docs/performance.md, device-to-host reads).
fn disjoint(a: *const u8, b: *const u8, len: usize) -> bool {
    let (a, b) = (a as usize, b as usize);
    a.checked_add(len).is_some_and(|ae| ae <= b) || b.checked_add(len).is_some_and(|be| be <= a)
}

impl Drop for Bo {
    fn drop(&mut self) {
        if self.is_mapped() {
            // SAFETY: the mapping made in `new`; no reference into it
            // outlives the `Bo` (users hold an `Arc<Bo>` while they access it).
            unsafe { libc::munmap(self.ptr.cast(), self.size as usize) };
        }
        let Some(kmd) = &self.kmd else {
            self.vas.lock().unwrap().free(self.va, self.size);
            return;
        };
        if kmd.vm_unbind(self.va, self.size).is_ok() {
            self.vas.lock().unwrap().free(self.va, self.size);
        }
        let _ = kmd.gem_close(self.handle);
    }
}

/// Size class of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SizeClass {
    /// < 1 KiB.
    Small = 0,
    /// 1 KiB ..= 64 KiB.
    Medium = 1,
    /// > 64 KiB.
    Large = 2,
}

impl SizeClass {
    /// The class of a request of `size` bytes.
    pub fn of(size: u64) -> SizeClass {
        if size < 1024 {
            SizeClass::Small
        } else if size <= 64 << 10 {
            SizeClass::Medium
        } else {
            SizeClass::Large
        }
    }

    /// Bytes reserved for a request of `size` bytes.
    pub fn reserve(size: u64) -> u64 {
        match SizeClass::of(size) {
            SizeClass::Small => size.next_power_of_two().max(64),
            SizeClass::Medium => size.next_power_of_two().max(4096),
            SizeClass::Large => size.next_multiple_of(64 << 10),
        }
    }
}

/// Bytes of one small-class slab.
pub const SLAB_SIZE: u64 = 64 << 10;

/// One block of pool memory.
#[derive(Debug)]
pub struct Block {
    pub(crate) bo: Arc<Bo>,
    pub(crate) offset: u64,
    pub(crate) reserved: u64,
    pub(crate) requested: u64,
    pub(crate) class: SizeClass,
}

impl Block {
    /// GPU VA of the block.
    pub fn va(&self) -> u64 {
        self.bo.va() + self.offset
    }
}

/// Per-class statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClassStats {
    /// Blocks handed out and not freed.
    pub live: u64,
    /// Bytes the live blocks' users asked for.
    pub requested: u64,
    /// Bytes the live blocks occupy.
    pub reserved: u64,
    /// Freed blocks waiting for their fences.
    pub pending: u64,
    /// Bytes of pending blocks.
    pub pending_bytes: u64,
    /// Free blocks ready for reuse.
    pub cached: u64,
    /// Bytes of cached blocks.
    pub cached_bytes: u64,
    /// Allocations served from the cache.
    pub reused: u64,
    /// Allocations that needed a new BO (or slab slot never used before).
    pub fresh: u64,
    /// BOs this class holds (slabs for the small class).
    pub bos: u64,
}

impl ClassStats {
    /// Internal fragmentation of live blocks: 1 - requested / reserved.
    pub fn fragmentation(&self) -> f64 {
        if self.reserved == 0 {
            0.0
        } else {
            1.0 - self.requested as f64 / self.reserved as f64
        }
    }
}

/// Pool statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Small, medium, large.
    pub classes: [ClassStats; 3],
}

/// What a freed block waits for before it is reused: the completion of
/// work submitted while the block was in use (the UMD's fences). The pool
/// asks; it knows nothing else about them.
pub trait Completion {
    /// Whether the work completed. `kmd` is the pool's device (`None` for
    /// a pool over host memory).
    fn is_complete(&self, kmd: Option<&Kmd>) -> bool;
}

/// The size-class pool; freed blocks wait for completions of type `C`.
#[derive(Debug)]
pub struct Pool<C> {
    /// `None`: host memory stands in for BOs (tests).
    kmd: Option<Arc<Kmd>>,
    vas: Arc<Mutex<VaAllocator>>,
    bind_flags: u32,
    cache_limit: u64,
    /// Free blocks by reserved size.
    free: BTreeMap<u64, Vec<Block>>,
    /// Freed blocks with the completions they wait for.
    pending: Vec<(Block, Vec<C>)>,
    stats: PoolStats,
}

impl<C: Completion> Pool<C> {
    /// A pool binding its BOs with `bind_flags`, keeping up to
    /// `cache_limit` bytes of freed large blocks.
    pub fn new(
        kmd: Arc<Kmd>,
        vas: Arc<Mutex<VaAllocator>>,
        bind_flags: u32,
        cache_limit: u64,
    ) -> Self {
        Pool {
            kmd: Some(kmd),
            vas,
            bind_flags,
            cache_limit,
            free: BTreeMap::new(),
            pending: Vec::new(),
            stats: PoolStats::default(),
        }
    }

    /// Statistics.
    pub fn stats(&self) -> PoolStats {
        self.stats
    }

    /// Moves pending blocks whose completions all happened to the free
    /// lists.
    pub fn reclaim(&mut self) {
        let mut i = 0;
        while i < self.pending.len() {
            if self.pending[i]
                .1
                .iter()
                .all(|c| c.is_complete(self.kmd.as_deref()))
            {
                let (b, _) = self.pending.swap_remove(i);
                let c = &mut self.stats.classes[b.class as usize];
                c.pending -= 1;
                c.pending_bytes -= b.reserved;
                self.cache(b);
            } else {
                i += 1;
            }
        }
    }

    fn new_bo(&self, size: u64) -> Result<Arc<Bo>, MemError> {
        Ok(Arc::new(match &self.kmd {
            Some(k) => Bo::new(k, &self.vas, size, self.bind_flags)?,
            None => Bo::new_host(&self.vas, size)?,
        }))
    }

    fn cache(&mut self, b: Block) {
        let class = b.class;
        let c = &mut self.stats.classes[class as usize];
        if class == SizeClass::Large && c.cached_bytes + b.reserved > self.cache_limit {
            c.bos -= 1;
            return; // dropping the block releases its BO
        }
        c.cached += 1;
        c.cached_bytes += b.reserved;
        self.free.entry(b.reserved).or_default().push(b);
    }

    /// Allocates a block of at least `size` bytes.
    pub fn alloc(&mut self, size: u64) -> Result<Block, MemError> {
        if size == 0 || size > uapi::GEM_MAX_SIZE {
            return Err(MemError::BadSize(size));
        }
        self.reclaim();
        let reserved = SizeClass::reserve(size);
        let class = SizeClass::of(size);
        let reuse = self.free.get_mut(&reserved).and_then(Vec::pop);
        let mut block = match reuse {
            Some(b) => {
                let c = &mut self.stats.classes[class as usize];
                c.cached -= 1;
                c.cached_bytes -= b.reserved;
                c.reused += 1;
                b
            }
            None => {
                let b = if class == SizeClass::Small {
                    // A new slab: one block is handed out, the rest cached.
                    let bo = self.new_bo(SLAB_SIZE)?;
                    let n = SLAB_SIZE / reserved;
                    let c = &mut self.stats.classes[0];
                    c.bos += 1;
                    for i in 1..n {
                        c.cached += 1;
                        c.cached_bytes += reserved;
                        self.free.entry(reserved).or_default().push(Block {
                            bo: bo.clone(),
                            offset: i * reserved,
                            reserved,
                            requested: reserved,
                            class,
                        });
                    }
                    Block {
                        bo,
                        offset: 0,
                        reserved,
                        requested: size,
                        class,
                    }
                } else {
                    let bo = self.new_bo(reserved)?;
                    self.stats.classes[class as usize].bos += 1;
                    Block {
                        bo,
                        offset: 0,
                        reserved,
                        requested: size,
                        class,
                    }
                };
                self.stats.classes[class as usize].fresh += 1;
                b
            }
        };
        block.requested = size;
        let c = &mut self.stats.classes[class as usize];
        c.live += 1;
        c.requested += size;
        c.reserved += block.reserved;
        Ok(block)
    }

    /// Frees `b`; it is reused only after every completion in `after`
    /// happened.
    pub fn free(&mut self, b: Block, after: Vec<C>) {
        let class = b.class;
        let c = &mut self.stats.classes[class as usize];
        c.live -= 1;
        c.requested -= b.requested;
        c.reserved -= b.reserved;
        if after.is_empty() {
            self.cache(b);
        } else {
            c.pending += 1;
            c.pending_bytes += b.reserved;
            self.pending.push((b, after));
        }
    }

    /// A pool over host memory.
    #[cfg(test)]
    fn host(cache_limit: u64) -> Self {
        Pool {
            kmd: None,
            vas: Arc::new(Mutex::new(VaAllocator::new(1 << 20, 1 << 40))),
            bind_flags: 0,
            cache_limit,
            free: BTreeMap::new(),
            pending: Vec::new(),
            stats: PoolStats::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes() {
        assert_eq!(SizeClass::of(1), SizeClass::Small);
        assert_eq!(SizeClass::of(1023), SizeClass::Small);
        assert_eq!(SizeClass::of(1024), SizeClass::Medium);
        assert_eq!(SizeClass::of(64 << 10), SizeClass::Medium);
        assert_eq!(SizeClass::of((64 << 10) + 1), SizeClass::Large);
        assert_eq!(SizeClass::reserve(1), 64);
        assert_eq!(SizeClass::reserve(100), 128);
        assert_eq!(SizeClass::reserve(1500), 4096);
        assert_eq!(SizeClass::reserve(5000), 8192);
        assert_eq!(SizeClass::reserve((64 << 10) + 1), 128 << 10);
    }

    #[test]
    fn block_reads_copy_every_byte_and_no_more() {
        let src: Vec<u8> = (0..1000u32).map(|i| (i * 7 + 3) as u8).collect();
        for start in [0usize, 1, 15, 64] {
            for len in [0usize, 1, 63, 64, 65, 127, 128, 200, 900] {
                let mut dst = vec![0xeeu8; len + 2];
                // SAFETY: `src[start..start + len]` and `dst[1..len + 1]`
                // are in bounds (start + len <= 964 < 1000) and distinct.
                unsafe { read_blocks(src.as_ptr().add(start), dst.as_mut_ptr().add(1), len) };
                assert_eq!(
                    &dst[1..len + 1],
                    &src[start..start + len],
                    "start {start} len {len}"
                );
                assert_eq!(
                    (dst[0], dst[len + 1]),
                    (0xee, 0xee),
                    "start {start} len {len}"
                );
            }
        }
    }

    #[test]
    fn va_allocator_aligns_and_merges() {
        let mut v = VaAllocator::new(0x10000, 0x1000_0000);
        let a = v.alloc(4096).unwrap();
        assert_eq!(a, 0x10000);
        let b = v.alloc(64 << 10).unwrap();
        assert_eq!(b % (64 << 10), 0);
        assert!(b >= a + 4096);
        let c = v.alloc(2 << 20).unwrap();
        assert_eq!(c % (2 << 20), 0);
        v.free(a, 4096);
        v.free(b, 64 << 10);
        v.free(c, 2 << 20);
        assert_eq!(v.free.len(), 1, "all ranges merged: {:?}", v.free);
        assert!(v.alloc(0x1000_0000).is_none());
    }

    /// A completion that happened once `SIGNALLED` reached its seqno.
    #[derive(Debug)]
    struct Seq(u64);

    static SIGNALLED: AtomicU64 = AtomicU64::new(0);

    impl Completion for Seq {
        fn is_complete(&self, _: Option<&Kmd>) -> bool {
            self.0 <= SIGNALLED.load(Ordering::SeqCst)
        }
    }

    fn sp(seqno: u64) -> Seq {
        Seq(seqno)
    }

    #[test]
    fn freed_block_waits_for_its_fence() {
        let mut pool = Pool::host(1 << 20);
        for size in [100u64, 4096, 200 << 10] {
            let class = SizeClass::of(size) as usize;
            SIGNALLED.store(0, Ordering::SeqCst);
            let a = pool.alloc(size).unwrap();
            let a_va = a.va();
            pool.free(a, vec![sp(5), sp(3)]);
            assert_eq!(pool.stats().classes[class].pending, 1);
            let b = pool.alloc(size).unwrap();
            assert_ne!(
                b.va(),
                a_va,
                "size {size}: in-use block handed out before its fence"
            );
            SIGNALLED.store(4, Ordering::SeqCst);
            let c = pool.alloc(size).unwrap();
            assert_ne!(
                c.va(),
                a_va,
                "size {size}: handed out with one fence unsignalled"
            );
            SIGNALLED.store(5, Ordering::SeqCst);
            let d = pool.alloc(size).unwrap();
            assert_eq!(
                d.va(),
                a_va,
                "size {size}: block not reused after its fences"
            );
            assert_eq!(pool.stats().classes[class].pending, 0);
            for x in [b, c, d] {
                pool.free(x, vec![]);
            }
        }
    }

    #[test]
    fn small_blocks_share_slabs_and_stats_add_up() {
        let mut pool = Pool::<Seq>::host(1 << 20);
        let blocks: Vec<Block> = (0..10).map(|_| pool.alloc(100).unwrap()).collect();
        let s = pool.stats().classes[0];
        assert_eq!(s.bos, 1, "ten 128-byte blocks fit one slab");
        assert_eq!(s.live, 10);
        assert_eq!(s.requested, 1000);
        assert_eq!(s.reserved, 1280);
        assert!((s.fragmentation() - (1.0 - 1000.0 / 1280.0)).abs() < 1e-9);
        let mut vas: Vec<u64> = blocks.iter().map(Block::va).collect();
        vas.sort();
        vas.dedup();
        assert_eq!(vas.len(), 10, "distinct blocks");
        for b in blocks {
            pool.free(b, vec![]);
        }
        assert_eq!(pool.stats().classes[0].live, 0);
        assert_eq!(pool.stats().classes[0].reserved, 0);
    }

    #[test]
    fn large_cache_is_bounded() {
        let mut pool = Pool::<Seq>::host(256 << 10);
        let a = pool.alloc(200 << 10).unwrap();
        let b = pool.alloc(200 << 10).unwrap();
        pool.free(a, vec![]);
        pool.free(b, vec![]);
        let s = pool.stats().classes[2];
        assert_eq!(
            s.cached, 1,
            "second 256 KiB block exceeds the 256 KiB cache"
        );
        assert_eq!(s.bos, 1, "the block beyond the cache was released");
    }

    #[test]
    fn zero_and_oversized_are_rejected() {
        let mut pool = Pool::<Seq>::host(0);
        assert_eq!(pool.alloc(0).unwrap_err(), MemError::BadSize(0));
        assert!(pool.alloc(uapi::GEM_MAX_SIZE + 1).is_err());
    }
}
