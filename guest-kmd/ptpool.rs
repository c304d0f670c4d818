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
//! address space holds it, so table memory outlives the device binding for
//! as long as an open file still owns tables.

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
}

/// The page-table pool of one device.
#[pin_data]
pub(crate) struct PtPool {
    chunks: KVec<Coherent<[u64]>>,
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
        // Hand out low indices first (pop from the end).
        for i in (0..total).rev() {
            free.push(u32::try_from(i).map_err(|_| EINVAL)?, GFP_KERNEL)?;
        }
        Arc::pin_init(
            pin_init!(PtPool {
                chunks,
                state <- new_spinlock!(FreeList { free }),
                total,
            }),
            GFP_KERNEL,
        )
    }

    /// Tables in the pool and tables free.
    pub(crate) fn usage(&self) -> (usize, usize) {
        (self.total, self.state.lock().free.len())
    }

    /// Takes a zeroed table out of the pool; `ENOMEM` when none is left.
    pub(crate) fn alloc(&self) -> Result<TableId> {
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
        // The free list has room for every table: the push cannot fail.
        let _ = self.state.lock().free.push(t.0, GFP_ATOMIC);
    }

    /// Where entry `index` of table `t` lives: (chunk, element).
    fn locate(&self, t: TableId, index: usize) -> Option<(&Coherent<[u64]>, usize)> {
        let t = usize::try_from(t.0).ok()?;
        let chunk = self.chunks.get(t / TABLES_PER_CHUNK)?;
        let elem = (t % TABLES_PER_CHUNK) * ENTRIES_PER_TABLE + (index % ENTRIES_PER_TABLE);
        (elem < chunk.len()).then_some((chunk, elem))
    }

    /// The DMA (guest-physical) address of table `t`.
    pub(crate) fn addr(&self, t: TableId) -> u64 {
        match self.locate(t, 0) {
            Some((chunk, elem)) => chunk.dma_handle() + (elem * 8) as u64,
            None => 0,
        }
    }

    /// Reads entry `index` (modulo 512) of table `t`.
    pub(crate) fn read(&self, t: TableId, index: usize) -> Pte {
        let Some((chunk, elem)) = self.locate(t, index) else {
            return Pte::INVALID;
        };
        // SAFETY: `elem < chunk.len()` (checked by `locate`), so the pointer
        // is inside the allocation. The device may read the entry
        // concurrently; a volatile read of an aligned u64 is the kernel's
        // READ_ONCE for memory shared with a device.
        Pte::from_bits(u64::from_le(unsafe {
            chunk.as_ptr().cast::<u64>().add(elem).read_volatile()
        }))
    }

    /// Writes entry `index` (modulo 512) of table `t`.
    pub(crate) fn write(&self, t: TableId, index: usize, v: Pte) {
        let Some((chunk, elem)) = self.locate(t, index) else {
            return;
        };
        // SAFETY: As in `read`: in bounds; a volatile aligned u64 store is
        // the kernel's WRITE_ONCE, so the device never sees a torn entry.
        // Each table has one owner, which serialises writes to it.
        unsafe {
            chunk
                .as_mut_ptr()
                .cast::<u64>()
                .add(elem)
                .write_volatile(v.bits().to_le())
        }
    }
}
