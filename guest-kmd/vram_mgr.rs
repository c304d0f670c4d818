// SPDX-License-Identifier: GPL-2.0

//! The VRAM manager: device memory for buffer objects, on the kernel's
//! buddy allocator (`kernel::gpu::buddy`, drivers/gpu/buddy.c).
//!
//! This is the allocator half of a small TTM-shaped layer of the driver's
//! own (there is no Rust TTM): like `xe_ttm_vram_mgr.c` and
//! `amdgpu_vram_mgr.c` it manages the whole of VRAM as one buddy address
//! space, takes the device's reserved ranges (`MEMORY_LAYOUT`: the
//! firmware carve-out) out of it at start so they are never handed out,
//! allocates the CPU-visible part only for objects that need CPU access
//! (a `Range` allocation below the visible size) and everything else top
//! down, from the part the CPU cannot see, so the aperture stays free for
//! the objects that need it (amdgpu's `TOPDOWN` for invisible buffers).
//!
//! An allocation ([`VramAlloc`]) is a list of buddy blocks returned to the
//! allocator when it is dropped; its blocks are device-physical addresses
//! (`vram::dpa`) that go into page-table entries with the VRAM bit.
//!
//! Retired pages (an uncorrectable memory error, docs/uapi.md "Retired
//! pages") are taken out the same way, one 4 KiB range each, as amdgpu
//! reserves its bad pages ([`VramMgr::retire_page`]); a page still held by an
//! object stays with it (the object is quarantined: it is never freed while
//! the driver is bound) and is taken out at the next probe, from the
//! device's table.
//!
//! Lock order: `retired` is taken before the buddy allocator's own mutex,
//! which is a leaf (taken inside `alloc_blocks`, `avail` and a block list's
//! drop, never around a call out).

use crate::vram::{self, kind, Layout};
use kernel::{
    gpu::buddy::{
        AllocatedBlocks,
        GpuBuddy,
        GpuBuddyAllocFlags,
        GpuBuddyAllocMode,
        GpuBuddyParams, //
    },
    prelude::*,
    ptr::Alignment,
    sync::{
        atomic::{
            Atomic,
            Relaxed, //
        },
        new_mutex,
        Arc,
        Mutex, //
    },
};

/// The allocation unit: one GPU page.
const CHUNK: usize = 4096;

/// How often (ns) evicted objects are looked at for a move back to VRAM.
pub(crate) const RESTORE_PERIOD_NS: u64 = 100_000_000;

/// Counters of the manager, for debugfs `vram_mm` and `QUERY_STATS`.
#[derive(Clone, Copy, Default)]
pub(crate) struct VramCounters {
    /// Bytes allocated to objects now.
    pub(crate) used: u64,
    /// Of which in the CPU-visible part.
    pub(crate) visible_used: u64,
    /// Allocations made since probe.
    pub(crate) allocs: u64,
    /// Allocations refused (no room) since probe.
    pub(crate) failed: u64,
    /// Objects evicted to system memory since probe, and their bytes.
    pub(crate) evictions: u64,
    pub(crate) evicted_bytes: u64,
    /// Moves that failed (the object stayed where it was).
    pub(crate) moves_failed: u64,
    /// Evicted objects moved back to VRAM since probe, and their bytes.
    pub(crate) restores: u64,
    pub(crate) restored_bytes: u64,
}

/// Bytes of VRAM one file's objects hold: charged while an allocation
/// made for the file lives ([`VramMgr::alloc`]).
pub(crate) struct VramUse(Atomic<u64>);

impl VramUse {
    /// Nothing held yet.
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn new() -> Result<Arc<VramUse>> {
        Ok(Arc::new(VramUse(Atomic::new(0)), GFP_KERNEL)?)
    }

    /// Bytes held now.
    pub(crate) fn get(&self) -> u64 {
        self.0.load(Relaxed)
    }
}

/// Where in VRAM an allocation may go.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Region {
    /// Only the CPU-visible part (an object the CPU maps).
    Visible,
    /// Anywhere, the invisible part first.
    Any,
}

/// Device memory of one device, for buffer objects.
#[pin_data]
pub(crate) struct VramMgr {
    buddy: GpuBuddy,
    layout: Layout,
    /// The device's reserved ranges, held for the manager's lifetime.
    _reserved: KVec<Pin<KBox<AllocatedBlocks>>>,
    reserved_bytes: u64,
    /// Retired pages taken out of the allocator (their VRAM offsets, and
    /// the 4 KiB allocation holding each), for the manager's lifetime.
    #[pin]
    retired: Mutex<KVec<(u64, Pin<KBox<AllocatedBlocks>>)>>,
    used: Atomic<u64>,
    visible_used: Atomic<u64>,
    allocs: Atomic<u64>,
    failed: Atomic<u64>,
    evictions: Atomic<u64>,
    evicted_bytes: Atomic<u64>,
    moves_failed: Atomic<u64>,
    restores: Atomic<u64>,
    restored_bytes: Atomic<u64>,
    /// When evicted objects were last looked at for a move back (ns,
    /// monotonic): at most once per [`RESTORE_PERIOD_NS`].
    restore_checked: Atomic<u64>,
    /// The last move's phases, in µs ([`MovePhases`]).
    last_move: [Atomic<u64>; 5],
}

/// Where the time of one move went, in µs: its system pages allocated and
/// mapped, its owner's jobs drained, the copy, its mappings rewritten and
/// the TLBs invalidated; and its size in bytes.
#[derive(Clone, Copy, Default)]
pub(crate) struct MovePhases {
    pub(crate) bytes: u64,
    pub(crate) pages_us: u64,
    pub(crate) drain_us: u64,
    pub(crate) copy_us: u64,
    pub(crate) remap_us: u64,
}

impl VramMgr {
    /// A manager of `layout` (checked by the transport), with its reserved
    /// ranges taken out.
    ///
    /// # Errors
    ///
    /// `EINVAL` (a layout without usable memory, or a reserved range the
    /// allocator cannot take), `ENOMEM`.
    pub(crate) fn new(layout: &Layout) -> Result<Arc<VramMgr>> {
        if layout.usable_bytes() == 0 {
            return Err(EINVAL);
        }
        let buddy = GpuBuddy::new(GpuBuddyParams {
            base_offset: 0,
            size: layout.size,
            chunk_size: Alignment::new::<CHUNK>(),
        })?;
        let mut reserved = KVec::new();
        let mut reserved_bytes = 0u64;
        for r in layout.ranges().iter().filter(|r| r.kind == kind::RESERVED) {
            let blocks = KBox::pin_init(
                buddy.alloc_blocks(
                    GpuBuddyAllocMode::Range(r.base..r.end()),
                    r.size,
                    Alignment::new::<CHUNK>(),
                    GpuBuddyAllocFlags::default(),
                ),
                GFP_KERNEL,
            )
            .map_err(|_| EINVAL)?;
            reserved.push(blocks, GFP_KERNEL)?;
            reserved_bytes += r.size;
        }
        Arc::pin_init(
            pin_init!(VramMgr {
                buddy,
                layout: *layout,
                _reserved: reserved,
                reserved_bytes,
                retired <- new_mutex!(KVec::new()),
                used: Atomic::new(0),
                visible_used: Atomic::new(0),
                allocs: Atomic::new(0),
                failed: Atomic::new(0),
                evictions: Atomic::new(0),
                evicted_bytes: Atomic::new(0),
                moves_failed: Atomic::new(0),
                restores: Atomic::new(0),
                restored_bytes: Atomic::new(0),
                restore_checked: Atomic::new(0),
                last_move: [const { Atomic::new(0) }; 5],
            }),
            GFP_KERNEL,
        )
    }

    /// The layout managed.
    pub(crate) fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Bytes objects can use (VRAM less the reserved ranges).
    pub(crate) fn usable(&self) -> u64 {
        self.layout.size - self.reserved_bytes
    }

    /// Free bytes now.
    pub(crate) fn avail(&self) -> u64 {
        self.buddy.avail()
    }

    /// Takes the page at VRAM offset `offset` out of the allocator for the
    /// manager's lifetime (an uncorrectable memory error). Returns `true`
    /// if it was taken out now, `false` if it already was.
    ///
    /// # Errors
    ///
    /// `EBUSY` while an allocation holds it (its object keeps it; it is
    /// taken out at the next probe), `EINVAL` for an offset outside the
    /// usable VRAM, `ENOMEM`.
    pub(crate) fn retire_page(&self, offset: u64) -> Result<bool> {
        let page = offset & !(CHUNK as u64 - 1);
        let end = page.checked_add(CHUNK as u64).ok_or(EINVAL)?;
        if end > self.layout.size {
            return Err(EINVAL);
        }
        let mut retired = self.retired.lock();
        if retired.iter().any(|(p, _)| *p == page) {
            return Ok(false);
        }
        retired.reserve(1, GFP_KERNEL)?;
        let blocks = KBox::pin_init(
            self.buddy.alloc_blocks(
                GpuBuddyAllocMode::Range(page..end),
                CHUNK as u64,
                Alignment::new::<CHUNK>(),
                GpuBuddyAllocFlags::default(),
            ),
            GFP_KERNEL,
        )
        .map_err(|e| if e == ENOMEM { ENOMEM } else { EBUSY })?;
        retired.push((page, blocks), GFP_KERNEL)?;
        Ok(true)
    }

    /// Pages retired (taken out of the allocator).
    pub(crate) fn retired_pages(&self) -> usize {
        self.retired.lock().len()
    }

    /// The counters.
    pub(crate) fn counters(&self) -> VramCounters {
        VramCounters {
            used: self.used.load(Relaxed),
            visible_used: self.visible_used.load(Relaxed),
            allocs: self.allocs.load(Relaxed),
            failed: self.failed.load(Relaxed),
            evictions: self.evictions.load(Relaxed),
            evicted_bytes: self.evicted_bytes.load(Relaxed),
            moves_failed: self.moves_failed.load(Relaxed),
            restores: self.restores.load(Relaxed),
            restored_bytes: self.restored_bytes.load(Relaxed),
        }
    }

    /// Counts an evicted object of `bytes` moved back to VRAM.
    pub(crate) fn count_restore(&self, bytes: u64) {
        self.restores.add(1u64, Relaxed);
        self.restored_bytes.add(bytes, Relaxed);
    }

    /// Whether it is time (`now_ns`, monotonic) to look at evicted objects
    /// for a move back: at most once per [`RESTORE_PERIOD_NS`] device-wide
    /// (the claim is taken by the caller that gets `true`).
    pub(crate) fn restore_due(&self, now_ns: u64) -> bool {
        let last = self.restore_checked.load(Relaxed);
        now_ns.saturating_sub(last) >= RESTORE_PERIOD_NS
            && self.restore_checked.cmpxchg(last, now_ns, Relaxed).is_ok()
    }

    /// Counts an eviction of `bytes`.
    pub(crate) fn count_eviction(&self, bytes: u64) {
        self.evictions.add(1u64, Relaxed);
        self.evicted_bytes.add(bytes, Relaxed);
    }

    /// Records the phases of the last move.
    pub(crate) fn record_move(&self, p: &MovePhases) {
        for (a, v) in self
            .last_move
            .iter()
            .zip([p.bytes, p.pages_us, p.drain_us, p.copy_us, p.remap_us])
        {
            a.store(v, Relaxed);
        }
    }

    /// The phases of the last move.
    pub(crate) fn last_move(&self) -> MovePhases {
        let v = |i: usize| self.last_move[i].load(Relaxed);
        MovePhases {
            bytes: v(0),
            pages_us: v(1),
            drain_us: v(2),
            copy_us: v(3),
            remap_us: v(4),
        }
    }

    /// Counts a failed move.
    pub(crate) fn count_move_failed(&self) {
        self.moves_failed.add(1u64, Relaxed);
    }

    /// Whether `size` bytes could ever fit in `region` (with nothing else
    /// allocated).
    pub(crate) fn fits(&self, size: u64, region: Region) -> bool {
        match region {
            Region::Visible => size <= self.layout.visible,
            Region::Any => size <= self.usable(),
        }
    }

    /// Allocates `size` bytes (a multiple of 4 KiB) in `region`, in as
    /// few blocks as the free space allows (blocks of at least 4 KiB; a
    /// 2 MiB-aligned 2 MiB block can be mapped with one huge entry).
    ///
    /// # Errors
    ///
    /// `EINVAL` (size not a multiple of 4 KiB, or 0), `ENOSPC` (no room
    /// in `region` now), `ENOMEM`.
    pub(crate) fn alloc(
        self: &Arc<Self>,
        size: u64,
        region: Region,
        user: Option<&Arc<VramUse>>,
    ) -> Result<VramAlloc> {
        if size == 0 || size % CHUNK as u64 != 0 {
            return Err(EINVAL);
        }
        if crate::inject::should_fail(crate::inject::Point::VramAlloc) {
            // As if VRAM were full (debugfs vgpu_fail/vram_alloc).
            self.failed.add(1u64, Relaxed);
            return Err(ENOSPC);
        }
        // LAB(9) BEGIN alloc
        let mode = match region {
            Region::Visible => GpuBuddyAllocMode::Range(0..self.layout.visible),
            Region::Any => GpuBuddyAllocMode::TopDown,
        };
        let blocks = KBox::pin_init(
            self.buddy.alloc_blocks(
                mode,
                size,
                Alignment::new::<CHUNK>(),
                GpuBuddyAllocFlags::default(),
            ),
            GFP_KERNEL,
        );
        let blocks = match blocks {
            Ok(b) => b,
            Err(e) => {
                self.failed.add(1u64, Relaxed);
                return Err(if e == ENOMEM { ENOMEM } else { ENOSPC });
            }
        };
        let visible = blocks
            .iter()
            .map(|b| {
                let end = b.offset().saturating_add(b.size()).min(self.layout.visible);
                end.saturating_sub(b.offset())
            })
            .sum::<u64>();
        self.used.add(size, Relaxed);
        self.visible_used.add(visible, Relaxed);
        if let Some(u) = user {
            u.0.add(size, Relaxed);
        }
        let stamp = self.allocs.fetch_add(1u64, Relaxed);
        Ok(VramAlloc {
            blocks,
            size,
            visible,
            stamp,
            user: user.cloned(),
            mgr: self.clone(),
        })
        // LAB(9) END alloc
    }
}

/// A VRAM allocation: its blocks go back to the manager when it is
/// dropped.
pub(crate) struct VramAlloc {
    blocks: Pin<KBox<AllocatedBlocks>>,
    size: u64,
    /// Bytes of it in the CPU-visible part.
    visible: u64,
    /// Allocation order: the eviction order (least recently placed first).
    stamp: u64,
    /// The file charged for it.
    user: Option<Arc<VramUse>>,
    mgr: Arc<VramMgr>,
}

impl VramAlloc {
    /// Bytes allocated.
    pub(crate) fn size(&self) -> u64 {
        self.size
    }

    /// Whether all of it is CPU-visible.
    pub(crate) fn is_visible(&self) -> bool {
        self.visible == self.size
    }

    /// Bytes of it in the CPU-visible part.
    pub(crate) fn visible_bytes(&self) -> u64 {
        self.visible
    }

    /// When it was made, in allocation order (older first).
    pub(crate) fn stamp(&self) -> u64 {
        self.stamp
    }

    /// Its blocks in allocation order as (VRAM offset, bytes); an object's
    /// bytes follow this order.
    pub(crate) fn blocks(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.blocks.iter().map(|b| (b.offset(), b.size()))
    }

    /// Whether VRAM offset `offset` lies in it.
    pub(crate) fn holds(&self, offset: u64) -> bool {
        self.blocks()
            .any(|(off, len)| offset >= off && offset - off < len)
    }

    /// Its blocks as (device-physical address, bytes), adjacent blocks
    /// merged, in object order.
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn dpa_runs(&self) -> Result<KVec<(u64, u64)>> {
        let mut runs: KVec<(u64, u64)> = KVec::new();
        for (off, len) in self.blocks() {
            let dpa = vram::dpa(off);
            match runs.last_mut() {
                Some((a, l)) if *a + *l == dpa => *l += len,
                _ => runs.push((dpa, len), GFP_KERNEL)?,
            }
        }
        Ok(runs)
    }
}

impl Drop for VramAlloc {
    fn drop(&mut self) {
        let _ = self.mgr.used.fetch_sub(self.size, Relaxed);
        let _ = self.mgr.visible_used.fetch_sub(self.visible, Relaxed);
        if let Some(u) = &self.user {
            let _ = u.0.fetch_sub(self.size, Relaxed);
        }
    }
}
