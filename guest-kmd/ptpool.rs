// SPDX-License-Identifier: GPL-2.0

//! The page-table pool: coherent DMA memory the GPU MMU walks.
//!
//! Page tables are 4 KiB pages of 512 little-endian entries in guest memory
//! (`hwif/src/mmu.rs`). The device reads them by guest-physical address; the
//! pool is coherent DMA memory allocated at probe (when the device is bound),
//! so its DMA addresses are what the device is given. The vgpu model has no
//! IOMMU: DMA addresses are guest-physical addresses.
//!
//! The pool is a few 2 MiB chunks carved into tables with a free list. Its
//! size is the `pt_pool_kib` module parameter; a bind that needs more tables
//! than are free fails with `ENOMEM`. The pool is reference-counted: every
//! address space holds it, so its bookkeeping outlives the device binding
//! for as long as an open file still owns tables. Its memory does not: at
//! unbind, once the device is quiesced, [`PtPool::release`] frees the chunks
//! (the DMA API must see no allocation of a device whose driver is gone);
//! afterwards entries read as invalid and writes are dropped, so the address
//! spaces of files still open tear down without touching freed memory.

use crate::mmu::{
    Pte,
    ENTRIES_PER_TABLE,
    TABLE_SIZE, //
};
use kernel::{
    device::{
        Bound,
        Device, //
    },
    dma::Coherent,
    new_spinlock,
    prelude::*,
    revocable::Revocable,
    sync::{
        Arc,
        SpinLock, //
    },
};

/// Bytes per chunk of the pool (one coherent allocation).
const CHUNK_BYTES: usize = 2 << 20;
/// Tables per chunk.
const TABLES_PER_CHUNK: usize = CHUNK_BYTES / TABLE_SIZE as usize;
/// Entries per chunk.
const ENTRIES_PER_CHUNK: usize = TABLES_PER_CHUNK * ENTRIES_PER_TABLE;

/// A page table of the pool, by index. Owned by exactly one address space
/// from [`PtPool::alloc`] to [`PtPool::free`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TableId(u32);

/// Allocation state of the pool.
struct FreeList {
    free: KVec<u32>,
    /// Tables retired after an uncorrectable memory error: never handed
    /// out again.
    retired: KVec<u32>,
}

/// The page-table pool of one device.
#[pin_data]
pub(crate) struct PtPool {
    /// The table memory; revoked (freed) at unbind.
    #[pin]
    chunks: Revocable<KVec<Coherent<[u64]>>>,
    #[pin]
    state: SpinLock<FreeList>,
    total: usize,
}

impl PtPool {
    /// Allocates `kib` KiB of table memory (rounded up to whole 2 MiB chunks).
    pub(crate) fn new(dev: &Device<Bound>, kib: u32) -> Result<Arc<PtPool>> {
        let bytes = usize::try_from(kib)
            .map_err(|_| EINVAL)?
            .saturating_mul(1024)
            .max(CHUNK_BYTES);
        let nchunks = bytes.div_ceil(CHUNK_BYTES);
        let mut chunks = KVec::with_capacity(nchunks, GFP_KERNEL)?;
        for _ in 0..nchunks {
            chunks.push(
                Coherent::<u64>::zeroed_slice(dev, ENTRIES_PER_CHUNK, GFP_KERNEL)?,
                GFP_KERNEL,
            )?;
        }
        let total = nchunks * TABLES_PER_CHUNK;
        let mut free = KVec::with_capacity(total, GFP_KERNEL)?;
        let retired = KVec::with_capacity(total, GFP_KERNEL)?;
        // Hand out low indices first (pop from the end).
        for i in (0..total).rev() {
            free.push(u32::try_from(i).map_err(|_| EINVAL)?, GFP_KERNEL)?;
        }
        Arc::pin_init(
            pin_init!(PtPool {
                chunks <- Revocable::new(chunks),
                state <- new_spinlock!(FreeList { free, retired }),
                total,
            }),
            GFP_KERNEL,
        )
    }

    /// The pool's chunks: (DMA address, bytes) each.
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn chunk_ranges(&self) -> Result<KVec<(u64, u64)>> {
        let chunks = self.chunks.try_access().ok_or(ENODEV)?;
        let mut v = KVec::with_capacity(chunks.len(), GFP_ATOMIC)?;
        for c in chunks.iter() {
            v.push((c.dma_handle(), CHUNK_BYTES as u64), GFP_ATOMIC)?;
        }
        Ok(v)
    }

    /// Frees the table memory (at unbind, after the device is quiesced: it
    /// walks no table any more). Waits for readers and writers in flight
    /// (an RCU grace period); afterwards reads return [`Pte::INVALID`] and
    /// writes are dropped. The free list is kept, so tables owned by files
    /// still open are returned to it as their address spaces go.
    pub(crate) fn release(&self) {
        self.chunks.revoke();
    }

    /// Tables in the pool and tables free.
    pub(crate) fn usage(&self) -> (usize, usize) {
        (self.total, self.state.lock().free.len())
    }

    /// Takes a zeroed table out of the pool; `ENOMEM` when none is left.
    pub(crate) fn alloc(&self) -> Result<TableId> {
        if crate::inject::should_fail(crate::inject::Point::PtAlloc) {
            return Err(ENOMEM);
        }
        let id = self.state.lock().free.pop().ok_or(ENOMEM)?;
        Ok(TableId(id))
    }

    /// Returns a table to the pool, zeroing it.
    ///
    /// The caller guarantees the device can no longer reach the table: it is
    /// unlinked and every context that used it was destroyed or had its TLB
    /// invalidated.
    pub(crate) fn free(&self, t: TableId) {
        for i in 0..ENTRIES_PER_TABLE {
            self.write(t, i, Pte::INVALID);
        }
        let mut st = self.state.lock();
        if st.retired.contains(&t.0) {
            return;
        }
        // The free list has room for every table: the push cannot fail.
        let _ = st.free.push(t.0, GFP_ATOMIC);
    }

    /// Retires the table holding guest-physical address `pa`, if the pool
    /// has one there: it is never handed out again (if it is in use, its
    /// owner keeps it until it frees it). Returns whether `pa` is in the
    /// pool.
    pub(crate) fn retire_at(&self, pa: u64) -> bool {
        let per_chunk = TABLES_PER_CHUNK as u64;
        let found = self.chunks.try_access_with(|chunks| {
            chunks.iter().enumerate().find_map(|(c, chunk)| {
                let base = chunk.dma_handle();
                let off = pa.checked_sub(base)?;
                (off < CHUNK_BYTES as u64).then(|| c as u64 * per_chunk + off / TABLE_SIZE)
            })
        });
        let Some(t) = found.flatten().and_then(|t| u32::try_from(t).ok()) else {
            return false;
        };
        let mut st = self.state.lock();
        st.free.retain(|f| *f != t);
        if !st.retired.contains(&t) {
            // Room for every table was reserved: this push does not fail.
            let _ = st.retired.push(t, GFP_ATOMIC);
        }
        true
    }

    /// Runs `f` on the chunk holding entry `index` (modulo 512) of table
    /// `t` and that entry's element index in it; `None` once the memory is
    /// released or for a table outside the pool.
    fn with_entry<R>(
        &self,
        t: TableId,
        index: usize,
        f: impl FnOnce(&Coherent<[u64]>, usize) -> R,
    ) -> Option<R> {
        let t = usize::try_from(t.0).ok()?;
        let chunks = self.chunks.try_access()?;
        let chunk = chunks.get(t / TABLES_PER_CHUNK)?;
        let elem = (t % TABLES_PER_CHUNK) * ENTRIES_PER_TABLE + (index % ENTRIES_PER_TABLE);
        (elem < chunk.len()).then(|| f(chunk, elem))
    }

    /// The DMA (guest-physical) address of table `t` (0 once released).
    pub(crate) fn addr(&self, t: TableId) -> u64 {
        self.with_entry(t, 0, |chunk, elem| chunk.dma_handle() + (elem * 8) as u64)
            .unwrap_or(0)
    }

    /// Reads entry `index` (modulo 512) of table `t`.
    pub(crate) fn read(&self, t: TableId, index: usize) -> Pte {
        self.with_entry(t, index, |chunk, elem| {
            // SAFETY: `elem < chunk.len()` (checked by `with_entry`), so the
            // pointer is inside the allocation, which the access guard keeps
            // alive. The device may read the entry concurrently; a volatile
            // read of an aligned u64 is the kernel's READ_ONCE for memory
            // shared with a device.
            Pte::from_bits(u64::from_le(unsafe {
                chunk.as_ptr().cast::<u64>().add(elem).read_volatile()
            }))
        })
        .unwrap_or(Pte::INVALID)
    }

    /// Writes entry `index` (modulo 512) of table `t`.
    pub(crate) fn write(&self, t: TableId, index: usize, v: Pte) {
        self.with_entry(t, index, |chunk, elem| {
            // SAFETY: As in `read`: in bounds and alive; a volatile aligned
            // u64 store is the kernel's WRITE_ONCE, so the device never sees
            // a torn entry. Each table has one owner, which serialises
            // writes to it.
            unsafe {
                chunk
                    .as_mut_ptr()
                    .cast::<u64>()
                    .add(elem)
                    .write_volatile(v.bits().to_le())
            }
        });
    }
}
