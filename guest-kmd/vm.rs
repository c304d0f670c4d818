// SPDX-License-Identifier: GPL-2.0

//! Per-file GPU address spaces: the page tables the device's MMU walks.
//!
//! Each open render-node file has one [`Vm`]: a 4-level page table in the
//! device's format (`hwif/src/mmu.rs`) built from [`PtPool`] tables, and the
//! list of `VM_BIND` mappings. Ordering rules:
//!
//! * Bind: every table the range needs is allocated (zeroed) and linked
//!   first; only then are the leaf entries written. A failed allocation
//!   leaves empty tables behind and no leaf entry.
//! * Unbind: the leaf entries are cleared, then the caller invalidates the
//!   TLBs of every context using the address space, and only then drops the
//!   mapping's reference on the buffer object (whose pages the device may
//!   have cached translations for until the invalidation).
//! * Tables are returned to the pool only when the address space is
//!   destroyed, after its contexts are gone.
//!
//! 2 MiB pages are used where the VA and the object's pages are both 2 MiB
//! aligned and physically contiguous over the whole 2 MiB.

use crate::{
    gem::{
        self,
        Bo,
        Seg, //
    },
    mmu::{
        level_index,
        CachePolicy,
        Pte,
        PteKind,
        ENTRIES_PER_TABLE,
        PTE_EXEC,
        PTE_READ,
        PTE_WRITE, //
    },
    ptpool::{
        PtPool,
        TableId, //
    },
};
use core::fmt;
use kernel::{
    drm::gem::BaseObject,
    prelude::*,
    sync::{
        aref::ARef,
        Arc, //
    },
    uapi,
};

/// 4 KiB.
pub(crate) const PAGE_4K: u64 = 1 << 12;
/// 2 MiB.
pub(crate) const PAGE_2M: u64 = 1 << 21;
/// First user VA: the lowest 64 KiB stay unmapped so that a null GPU
/// pointer faults.
pub(crate) const VA_USER_START: u64 = 0x1_0000;
/// Bytes at the top of the address space the KMD keeps for rings and ring
/// status blocks.
pub(crate) const VA_KMD_RESERVED: u64 = 256 << 20;
/// Mappings per address space.
pub(crate) const MAX_MAPPINGS: usize = 4096;

/// The end of the user VA range for a VA width.
pub(crate) const fn va_user_end(va_bits: u32) -> u64 {
    (1u64 << va_bits) - VA_KMD_RESERVED
}

/// One page table and its children (levels 3..1; level 0 has none).
struct Node {
    id: TableId,
    children: KVec<Option<KBox<Node>>>,
}

impl Node {
    /// A node for a new zeroed table of `level`.
    fn new(pool: &PtPool, level: u32) -> Result<KBox<Node>> {
        let mut children = KVec::new();
        if level > 0 {
            children.reserve(ENTRIES_PER_TABLE, GFP_KERNEL)?;
            for _ in 0..ENTRIES_PER_TABLE {
                children.push(None, GFP_KERNEL)?;
            }
        }
        // The box before the table: a failure leaves nothing to give back.
        let b = KBox::<Node>::new_uninit(GFP_KERNEL)?;
        let id = pool.alloc()?;
        Ok(KBox::write(b, Node { id, children }))
    }

    /// Returns this table and its descendants to the pool; returns how many.
    fn free(self, pool: &PtPool) -> usize {
        let mut n = 1;
        for c in self.children.into_iter().flatten() {
            n += KBox::into_inner(c).free(pool);
        }
        pool.free(self.id);
        n
    }
}

/// One `VM_BIND` mapping.
pub(crate) struct Mapping {
    pub(crate) va: u64,
    pub(crate) size: u64,
    pub(crate) bo_offset: u64,
    /// `PTE_READ | PTE_WRITE | PTE_EXEC` subset.
    pub(crate) perms: u64,
    pub(crate) handle: u32,
    pub(crate) lazy: bool,
    /// The object; its reference keeps the pages the entries point to.
    pub(crate) bo: ARef<Bo>,
    /// The object's pages, once pinned (at bind, or at the first fault of a
    /// lazy mapping).
    segs: KVec<Seg>,
    pub(crate) pages_4k: u64,
    pub(crate) pages_2m: u64,
}

impl Mapping {
    fn end(&self) -> u64 {
        self.va + self.size
    }
}

/// What `VM_BIND` asks for, validated by [`Vm::bind`].
pub(crate) struct BindArgs {
    pub(crate) handle: u32,
    pub(crate) flags: u32,
    pub(crate) bo_offset: u64,
    pub(crate) va: u64,
    pub(crate) size: u64,
}

/// A GPU address space.
pub(crate) struct Vm {
    pool: Arc<PtPool>,
    root: Option<KBox<Node>>,
    va_bits: u32,
    huge_pages: bool,
    mappings: KVec<Mapping>,
    tables: usize,
    /// 4 KiB pages of KMD memory (rings, status pages) mapped.
    kmd_pages: u64,
    /// Objects of mappings whose TLB invalidation failed: the device may
    /// still hold translations to their pages, so they are kept until the
    /// address space is destroyed.
    retired: KVec<ARef<Bo>>,
}

impl Vm {
    /// An empty address space of `va_bits` bits.
    pub(crate) fn new(pool: Arc<PtPool>, va_bits: u32, huge_pages: bool) -> Result<Vm> {
        let root = Node::new(&pool, 3)?;
        Ok(Vm {
            pool,
            root: Some(root),
            va_bits,
            huge_pages,
            mappings: KVec::new(),
            tables: 1,
            kmd_pages: 0,
            retired: KVec::new(),
        })
    }

    /// Guest-physical address of the root table (`CONTEXT_CREATE`'s
    /// `pt_root`).
    pub(crate) fn root_addr(&self) -> u64 {
        self.root.as_ref().map_or(0, |r| self.pool.addr(r.id))
    }

    /// The user VA range `[start, end)`.
    pub(crate) fn user_range(&self) -> (u64, u64) {
        (VA_USER_START, va_user_end(self.va_bits))
    }

    /// Number of mappings.
    pub(crate) fn mapping_count(&self) -> usize {
        self.mappings.len()
    }

    /// Number of page tables.
    pub(crate) fn table_count(&self) -> usize {
        self.tables
    }

    /// The mapping containing `va`, if any.
    pub(crate) fn find(&self, va: u64) -> Option<&Mapping> {
        let i = self.mappings.partition_point(|m| m.end() <= va);
        self.mappings.get(i).filter(|m| m.va <= va)
    }

    /// Checks and maps a range of a buffer object (`VM_BIND`).
    pub(crate) fn bind(&mut self, a: BindArgs, bo: ARef<Bo>) -> Result {
        if a.flags & !uapi::VGPU_VM_BIND_FLAGS != 0 || a.flags == 0 {
            return Err(EINVAL);
        }
        if (a.bo_offset | a.va | a.size) % PAGE_4K != 0 || a.size == 0 {
            return Err(EINVAL);
        }
        let (start, end) = self.user_range();
        let va_end = a.va.checked_add(a.size).ok_or(EINVAL)?;
        if a.va < start || va_end > end {
            return Err(EINVAL);
        }
        let bo_end = a.bo_offset.checked_add(a.size).ok_or(EINVAL)?;
        if bo_end > bo.size() as u64 {
            return Err(EINVAL);
        }
        let i = self.mappings.partition_point(|m| m.end() <= a.va);
        if self.mappings.get(i).is_some_and(|m| m.va < va_end) {
            return Err(EEXIST);
        }
        if self.mappings.len() >= MAX_MAPPINGS {
            return Err(ENOSPC);
        }
        let mut perms = 0;
        if a.flags & uapi::VGPU_VM_BIND_READ != 0 {
            perms |= PTE_READ;
        }
        if a.flags & uapi::VGPU_VM_BIND_WRITE != 0 {
            perms |= PTE_WRITE;
        }
        if a.flags & uapi::VGPU_VM_BIND_EXEC != 0 {
            perms |= PTE_EXEC;
        }
        let lazy = bo.lazy();
        let mut m = Mapping {
            va: a.va,
            size: a.size,
            bo_offset: a.bo_offset,
            perms,
            handle: a.handle,
            lazy,
            bo,
            segs: KVec::new(),
            pages_4k: 0,
            pages_2m: 0,
        };
        // Room for the mapping first: nothing below may fail after the
        // entries are written.
        self.mappings.reserve(1, GFP_KERNEL)?;
        if !lazy {
            m.segs = gem::segments(&m.bo)?;
            self.populate(&mut m, a.va, va_end)?;
        }
        self.mappings
            .insert_within_capacity(i, m)
            .map_err(|_| ENOMEM)?;
        Ok(())
    }

    /// Maps `[from, to)` of `m` (page aligned, inside `m`): tables first,
    /// then leaves.
    fn populate(&mut self, m: &mut Mapping, from: u64, to: u64) -> Result {
        let mut va = from;
        while va < to {
            let huge = self.huge_ok(m, va, to);
            self.ensure(va, if huge { 1 } else { 0 })?;
            va += if huge { PAGE_2M } else { PAGE_4K };
        }
        let mut va = from;
        while va < to {
            let huge = self.huge_ok(m, va, to);
            let (pa, _) = gem::addr_at(&m.segs, m.bo_offset + (va - m.va)).ok_or(EINVAL)?;
            let level = if huge { 1 } else { 0 };
            let t = self.lookup(va, level).ok_or(EINVAL)?;
            let entry = if huge {
                Pte::huge(pa, m.perms, CachePolicy::Cached)
            } else {
                Pte::leaf(pa, m.perms, CachePolicy::Cached)
            };
            self.pool.write(t, level_index(va, level), entry);
            if huge {
                m.pages_2m += 1;
                va += PAGE_2M;
            } else {
                m.pages_4k += 1;
                va += PAGE_4K;
            }
        }
        Ok(())
    }

    /// Whether `va` can be the start of a 2 MiB page of `m`, ending by `to`.
    fn huge_ok(&self, m: &Mapping, va: u64, to: u64) -> bool {
        if !self.huge_pages || va % PAGE_2M != 0 || to - va < PAGE_2M {
            return false;
        }
        let Some((pa, contig)) = gem::addr_at(&m.segs, m.bo_offset + (va - m.va)) else {
            return false;
        };
        if pa % PAGE_2M != 0 || contig < PAGE_2M {
            return false;
        }
        // The level-1 slot must not hold a level-0 table already.
        match self.lookup(va, 1) {
            Some(t) => self.pool.read(t, level_index(va, 1)) == Pte::INVALID,
            None => true,
        }
    }

    /// The table at `target` level covering `va`, allocating missing ones.
    fn ensure(&mut self, va: u64, target: u32) -> Result<TableId> {
        let pool = self.pool.clone();
        let mut node: &mut Node = self.root.as_deref_mut().ok_or(ENODEV)?;
        let mut level = 3;
        while level > target {
            let idx = level_index(va, level);
            let parent = node.id;
            let slot = node.children.get_mut(idx).ok_or(EINVAL)?;
            if slot.is_none() {
                if pool.read(parent, idx) != Pte::INVALID {
                    // A 2 MiB leaf occupies the slot.
                    return Err(EEXIST);
                }
                let child = Node::new(&pool, level - 1)?;
                // The child is zeroed; link it.
                pool.write(parent, idx, Pte::table(pool.addr(child.id)));
                *slot = Some(child);
                self.tables += 1;
            }
            node = match slot {
                Some(c) => c,
                None => return Err(EINVAL),
            };
            level -= 1;
        }
        Ok(node.id)
    }

    /// The table at `target` level covering `va`, if it exists.
    fn lookup(&self, va: u64, target: u32) -> Option<TableId> {
        let mut node: &Node = self.root.as_deref()?;
        let mut level = 3;
        while level > target {
            node = node.children.get(level_index(va, level))?.as_deref()?;
            level -= 1;
        }
        Some(node.id)
    }

    /// Removes the mapping `[va, va + size)` (`VM_UNBIND`) and clears its
    /// entries. The caller invalidates the TLBs and then drops (or, if that
    /// failed, [`Vm::retire`]s) the returned mapping.
    pub(crate) fn unbind(&mut self, va: u64, size: u64) -> Result<Mapping> {
        let i = self.mappings.partition_point(|m| m.va < va);
        match self.mappings.get(i) {
            Some(m) if m.va == va && m.size == size => {}
            _ => return Err(ENOENT),
        }
        let m = self.mappings.remove(i).map_err(|_| ENOENT)?;
        self.clear(m.va, m.end());
        Ok(m)
    }

    /// Clears every leaf entry in `[from, to)`.
    fn clear(&mut self, from: u64, to: u64) {
        let mut va = from;
        while va < to {
            if let Some(l1) = self.lookup(va, 1) {
                let i1 = level_index(va, 1);
                if self.pool.read(l1, i1).is_huge() {
                    self.pool.write(l1, i1, Pte::INVALID);
                    va += PAGE_2M;
                    continue;
                }
            }
            if let Some(l0) = self.lookup(va, 0) {
                self.pool.write(l0, level_index(va, 0), Pte::INVALID);
            }
            va += PAGE_4K;
        }
    }

    /// Keeps a mapping's object alive until the address space goes, after a
    /// failed TLB invalidation.
    pub(crate) fn retire(&mut self, m: Mapping) {
        // If even this allocation fails the reference is leaked, never
        // dropped early.
        if self.retired.push(m.bo.clone(), GFP_KERNEL).is_err() {
            core::mem::forget(m.bo);
        }
    }

    /// Maps the page containing `va` of a lazy mapping (a GPU fault).
    /// Returns the page-aligned VA mapped; `ENOENT` if `va` is not in a lazy
    /// mapping.
    pub(crate) fn fault_in(&mut self, va: u64) -> Result<u64> {
        let page = va & !(PAGE_4K - 1);
        let i = self.mappings.partition_point(|m| m.end() <= page);
        let mut m = match self.mappings.get(i) {
            Some(m) if m.va <= page && m.lazy => self.mappings.remove(i).map_err(|_| ENOENT)?,
            _ => return Err(ENOENT),
        };
        let r = (|| {
            if m.segs.is_empty() {
                m.segs = gem::segments(&m.bo)?;
            }
            self.populate(&mut m, page, page + PAGE_4K)
        })();
        // Put it back where it was (capacity is still there).
        let _ = self.mappings.insert_within_capacity(i, m);
        r.map(|()| page)
    }

    /// Maps `size` bytes of KMD memory at DMA address `pa` (contiguous) at
    /// `va` in the KMD range. Tables first, then leaves.
    pub(crate) fn map_kmd(&mut self, va: u64, pa: u64, size: u64, perms: u64) -> Result {
        let end = va.checked_add(size).ok_or(EINVAL)?;
        if va < self.user_range().1 || end > 1u64 << self.va_bits || (va | pa | size) % PAGE_4K != 0
        {
            return Err(EINVAL);
        }
        let mut v = va;
        while v < end {
            self.ensure(v, 0)?;
            v += PAGE_4K;
        }
        let mut v = va;
        while v < end {
            let t = self.lookup(v, 0).ok_or(EINVAL)?;
            self.pool.write(
                t,
                level_index(v, 0),
                Pte::leaf(pa + (v - va), perms, CachePolicy::Cached),
            );
            v += PAGE_4K;
        }
        self.kmd_pages += size / PAGE_4K;
        Ok(())
    }

    /// Clears a range mapped with [`Vm::map_kmd`]. The caller invalidates
    /// the TLBs of the address space's remaining contexts.
    pub(crate) fn unmap_kmd(&mut self, va: u64, size: u64) {
        self.clear(va, va.saturating_add(size));
        self.kmd_pages = self.kmd_pages.saturating_sub(size / PAGE_4K);
    }

    /// Writes the address space for debugfs: every mapping, checked by
    /// walking the tables' real entries as the device would.
    pub(crate) fn dump(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (start, end) = self.user_range();
        writeln!(
            f,
            "vm root {:#x} va_bits {} user {:#x}..{:#x} tables {} mappings {} retired {} kmd_pages {}",
            self.root_addr(),
            self.va_bits,
            start,
            end,
            self.tables,
            self.mappings.len(),
            self.retired.len(),
            self.kmd_pages
        )?;
        for m in self.mappings.iter() {
            let (bad, walked_4k, walked_2m) = self.check(m);
            writeln!(
                f,
                "  map va {:#x} size {:#x} handle {} bo_offset {:#x} perms {}{}{} lazy {} pages_4k {} pages_2m {} walk_4k {} walk_2m {} check {}",
                m.va,
                m.size,
                m.handle,
                m.bo_offset,
                if m.perms & PTE_READ != 0 { "r" } else { "-" },
                if m.perms & PTE_WRITE != 0 { "w" } else { "-" },
                if m.perms & PTE_EXEC != 0 { "x" } else { "-" },
                u8::from(m.lazy),
                m.pages_4k,
                m.pages_2m,
                walked_4k,
                walked_2m,
                match bad {
                    None => "ok",
                    Some(_) => "MISMATCH",
                }
            )?;
            if let Some(va) = bad {
                writeln!(f, "  mismatch at va {:#x}", va)?;
            }
        }
        Ok(())
    }

    /// Walks the real entries for every page of `m`: returns the first VA
    /// whose translation differs from the object's page (or is present in
    /// a lazy mapping's unpopulated part), and the leaves found.
    fn check(&self, m: &Mapping) -> (Option<u64>, u64, u64) {
        let mut va = m.va;
        let (mut n4, mut n2) = (0, 0);
        while va < m.end() {
            let want = gem::addr_at(&m.segs, m.bo_offset + (va - m.va)).map(|(pa, _)| pa);
            match self.walk(va) {
                Some((pa, perms, size)) => {
                    let page_pa = pa & !(size - 1);
                    let want_page = want.map(|w| w & !(size - 1));
                    if Some(page_pa) != want_page || perms != m.perms {
                        return (Some(va), n4, n2);
                    }
                    if size == PAGE_2M {
                        n2 += 1;
                    } else {
                        n4 += 1;
                    }
                    va = (va & !(size - 1)) + size;
                }
                None => {
                    if !m.lazy {
                        return (Some(va), n4, n2);
                    }
                    va += PAGE_4K;
                }
            }
        }
        (None, n4, n2)
    }

    /// Translates `va` by reading the entries from table memory and
    /// decoding them as the device does ([`Pte::decode`]): (physical
    /// address, permissions, page size), or `None` if not present or
    /// malformed (a table entry naming a table this address space does not
    /// own counts as malformed).
    fn walk(&self, va: u64) -> Option<(u64, u64, u64)> {
        let mut node: &Node = self.root.as_deref()?;
        let mut level = 3u32;
        loop {
            let idx = level_index(va, level);
            match self.pool.read(node.id, idx).decode(level).ok()? {
                PteKind::Leaf(l) => {
                    let size = 1u64 << l.shift;
                    return Some((l.page + (va & (size - 1)), l.perms, size));
                }
                PteKind::Table(pa) => {
                    let child = node.children.get(idx)?.as_deref()?;
                    if self.pool.addr(child.id) != pa {
                        return None;
                    }
                    node = child;
                    level = level.checked_sub(1)?;
                }
            }
        }
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        // The owner destroyed every context of this address space first:
        // the device no longer walks these tables.
        if let Some(root) = self.root.take() {
            let n = KBox::into_inner(root).free(&self.pool);
            self.tables = self.tables.saturating_sub(n);
        }
    }
}
