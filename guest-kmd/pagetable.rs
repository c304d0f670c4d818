// SPDX-License-Identifier: GPL-2.0

//! An address space's page tables in the device's format
//! (`hwif/src/mmu.rs`): 4 levels of [`PtPool`] tables, what maps a range
//! of an object's pages into them ([`Backing`], [`PageTables::populate`]),
//! clears a range, splits a 2 MiB page, and walks them back. The ordering
//! rules (tables before leaves, invalidation before the pages are given
//! back) are in [`crate::vm`], which owns one [`PageTables`] per address
//! space.

use crate::{
    gem::{
        self,
        Seg, //
    },
    mmu::{
        level_index,
        CachePolicy,
        FaultReason,
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
    ras::Retired,
};
use core::fmt;
use kernel::{
    prelude::*,
    sync::Arc, //
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
    pub(crate) fn new(pool: &PtPool, level: u32) -> Result<KBox<Node>> {
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

/// Where a mapping's pages come from: the object's pages from `gem_offset`
/// on at `va`, with `perms`.
#[derive(Clone, Copy)]
pub(crate) struct Backing<'a> {
    pub(crate) va: u64,
    pub(crate) gem_offset: u64,
    pub(crate) segs: &'a [Seg],
    pub(crate) perms: u64,
}

impl Backing<'_> {
    /// The DMA address of `va`, and how many bytes are contiguous from it.
    fn addr(&self, va: u64) -> Option<(u64, u64)> {
        gem::addr_at(self.segs, self.gem_offset + (va - self.va))
    }
}

/// The page tables of an address space, in the device's format.
pub(crate) struct PageTables {
    pub(crate) pool: Arc<PtPool>,
    /// The device's retired pages: never mapped.
    pub(crate) bad_pages: Arc<Retired>,
    root: Option<KBox<Node>>,
    pub(crate) va_bits: u32,
    huge_pages: bool,
    pub(crate) tables: usize,
    /// 4 KiB pages of KMD memory (rings, status pages) mapped.
    pub(crate) kmd_pages: u64,
}

impl PageTables {
    pub(crate) fn new(
        pool: Arc<PtPool>,
        bad_pages: Arc<Retired>,
        va_bits: u32,
        huge_pages: bool,
    ) -> Result<Self> {
        let root = Node::new(&pool, 3)?;
        Ok(PageTables {
            pool,
            bad_pages,
            root: Some(root),
            va_bits,
            huge_pages,
            tables: 1,
            kmd_pages: 0,
        })
    }

    /// Guest-physical address of the root table.
    pub(crate) fn root_addr(&self) -> u64 {
        self.root.as_ref().map_or(0, |r| self.pool.addr(r.id))
    }

    /// The user VA range `[start, end)`.
    pub(crate) fn user_range(&self) -> (u64, u64) {
        (VA_USER_START, va_user_end(self.va_bits))
    }

    /// Maps `[from, to)` of `b` (page aligned, inside the mapping): tables
    /// first, then leaves. Returns the (4 KiB, 2 MiB) pages written.
    pub(crate) fn populate(&mut self, b: &Backing<'_>, from: u64, to: u64) -> Result<(u64, u64)> {
        // The end of the 2 MiB block holding `va`, or `to`: a block that
        // does not start with a 2 MiB page has only 4 KiB pages, all in one
        // level-0 table.
        let block_end = |va: u64| ((va & !(PAGE_2M - 1)) + PAGE_2M).min(to);
        let mut va = from;
        while va < to {
            let huge = self.huge_ok(b, va, to);
            self.ensure(va, if huge { 1 } else { 0 })?;
            va = if huge { va + PAGE_2M } else { block_end(va) };
        }
        let (mut n4, mut n2) = (0, 0);
        let mut va = from;
        while va < to {
            if self.huge_ok(b, va, to) {
                let (pa, _) = b.addr(va).ok_or(EINVAL)?;
                let t = self.lookup(va, 1).ok_or(EINVAL)?;
                let entry = Pte::huge(pa, b.perms, CachePolicy::Cached);
                self.pool.write(t, level_index(va, 1), entry);
                n2 += 1;
                va += PAGE_2M;
                continue;
            }
            let t = self.lookup(va, 0).ok_or(EINVAL)?;
            let end = block_end(va);
            while va < end {
                let (pa, _) = b.addr(va).ok_or(EINVAL)?;
                let entry = Pte::leaf(pa, b.perms, CachePolicy::Cached);
                self.pool.write(t, level_index(va, 0), entry);
                n4 += 1;
                va += PAGE_4K;
            }
        }
        Ok((n4, n2))
    }

    /// Whether `va` can be the start of a 2 MiB page of `b`, ending by `to`.
    fn huge_ok(&self, b: &Backing<'_>, va: u64, to: u64) -> bool {
        if !self.huge_pages || va % PAGE_2M != 0 || to - va < PAGE_2M {
            return false;
        }
        let Some((pa, contig)) = b.addr(va) else {
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
    pub(crate) fn ensure(&mut self, va: u64, target: u32) -> Result<TableId> {
        // LAB(3) BEGIN ensure
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
        // LAB(3) END ensure
    }

    /// The table at `target` level covering `va`, if it exists.
    pub(crate) fn lookup(&self, va: u64, target: u32) -> Option<TableId> {
        // LAB(3) BEGIN lookup
        let mut node: &Node = self.root.as_deref()?;
        let mut level = 3;
        while level > target {
            node = node.children.get(level_index(va, level))?.as_deref()?;
            level -= 1;
        }
        Some(node.id)
        // LAB(3) END lookup
    }

    /// The level-1 node covering `va`, if it exists.
    fn level1_mut(&mut self, va: u64) -> Option<&mut Node> {
        let mut node: &mut Node = self.root.as_deref_mut()?;
        for level in [3, 2] {
            node = node
                .children
                .get_mut(level_index(va, level))?
                .as_deref_mut()?;
        }
        Some(node)
    }

    /// If a 2 MiB page covers `cut` and `cut` is not its start, replaces it
    /// with a level-0 table of 512 entries for the same pages, so that a
    /// range starting or ending at `cut` can be cleared. The translation of
    /// every address stays what it was.
    ///
    /// # Errors
    ///
    /// `ENOMEM` (no table).
    pub(crate) fn split_huge_at(&mut self, cut: u64) -> Result {
        if cut % PAGE_2M == 0 {
            return Ok(());
        }
        let Some(l1) = self.lookup(cut, 1) else {
            return Ok(());
        };
        let i1 = level_index(cut, 1);
        let e = self.pool.read(l1, i1);
        let Ok(PteKind::Leaf(leaf)) = e.decode(1) else {
            return Ok(());
        };
        let pool = self.pool.clone();
        let child = Node::new(&pool, 0)?;
        let cache = e.cache_policy().unwrap_or(CachePolicy::Cached);
        for j in 0..ENTRIES_PER_TABLE {
            let pa = leaf.page + j as u64 * PAGE_4K;
            pool.write(child.id, j, Pte::leaf(pa, leaf.perms, cache));
        }
        let addr = pool.addr(child.id);
        let Some(n1) = self.level1_mut(cut) else {
            // Unreachable: `lookup` found the level-1 table.
            KBox::into_inner(child).free_one(&pool);
            return Err(EINVAL);
        };
        let Some(slot) = n1.children.get_mut(i1) else {
            KBox::into_inner(child).free_one(&pool);
            return Err(EINVAL);
        };
        // The 2 MiB leaf becomes a table of the same pages in one store.
        pool.write(l1, i1, Pte::table(addr));
        *slot = Some(child);
        self.tables += 1;
        Ok(())
    }

    /// Clears every leaf entry in `[from, to)` (2 MiB pages inside the range
    /// whole; a caller cutting one split it first).
    pub(crate) fn clear(&mut self, from: u64, to: u64) {
        let mut va = from;
        while va < to {
            // One 2 MiB block at a time: its level-1 entry, or the entries
            // of its level-0 table (looked up once).
            let block_end = ((va & !(PAGE_2M - 1)) + PAGE_2M).min(to);
            if let Some(l1) = self.lookup(va, 1) {
                let i1 = level_index(va, 1);
                if self.pool.read(l1, i1).is_huge() {
                    self.pool.write(l1, i1, Pte::INVALID);
                    va = (va & !(PAGE_2M - 1)) + PAGE_2M;
                    continue;
                }
            }
            if let Some(l0) = self.lookup(va, 0) {
                while va < block_end {
                    self.pool.write(l0, level_index(va, 0), Pte::INVALID);
                    va += PAGE_4K;
                }
            }
            va = block_end;
        }
    }

    /// Translates `va` by reading the entries from table memory and
    /// decoding them as the device does ([`Pte::decode`]): (physical
    /// address, permissions, page size), or `None` if not present or
    /// malformed (a table entry naming a table this address space does not
    /// own counts as malformed).
    pub(crate) fn walk(&self, va: u64) -> Option<(u64, u64, u64)> {
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

    /// Writes the walk of `va` as the device makes it (debugfs `vms`, after
    /// a mismatch), one line per entry read: level, index, the entry's
    /// bits and what they are. Where the walk stops it adds the driver's own
    /// table for that slot (`driver_table`, or `none`) and the indices of
    /// the table's non-zero entries (`used`, at most 8), which show a table
    /// linked at another index or an entry without its valid bit.
    pub(crate) fn trace(&self, va: u64, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(mut node) = self.root.as_deref() else {
            return Ok(());
        };
        let mut level = 3u32;
        loop {
            let idx = level_index(va, level);
            let e = self.pool.read(node.id, idx);
            let child = node.children.get(idx).and_then(|c| c.as_deref());
            write!(
                f,
                "  walk va {:#x} level {} index {} entry {:#x}",
                va,
                level,
                idx,
                e.bits()
            )?;
            match e.decode(level) {
                Ok(PteKind::Leaf(l)) => {
                    return writeln!(
                        f,
                        " leaf page {:#x} size {} perms {}{}{}",
                        l.page,
                        if l.shift == 12 { "4k" } else { "2m" },
                        if l.perms & PTE_READ != 0 { "r" } else { "-" },
                        if l.perms & PTE_WRITE != 0 { "w" } else { "-" },
                        if l.perms & PTE_EXEC != 0 { "x" } else { "-" },
                    );
                }
                Ok(PteKind::Table(pa)) => match child {
                    Some(c) if self.pool.addr(c.id) == pa && level > 0 => {
                        writeln!(f, " table {:#x}", pa)?;
                        node = c;
                        level -= 1;
                        continue;
                    }
                    _ => write!(f, " table {:#x}", pa)?,
                },
                Err(FaultReason::NotPresent) => write!(f, " not-present")?,
                Err(r) => write!(f, " {}", r.name())?,
            }
            match child {
                Some(c) => write!(f, " driver_table {:#x}", self.pool.addr(c.id))?,
                None => write!(f, " driver_table none")?,
            }
            write!(f, " used")?;
            let mut n = 0;
            for i in 0..ENTRIES_PER_TABLE {
                if self.pool.read(node.id, i) != Pte::INVALID {
                    write!(f, "{}{}", if n == 0 { " " } else { "," }, i)?;
                    n += 1;
                    if n == 8 {
                        break;
                    }
                }
            }
            if n == 0 {
                write!(f, " -")?;
            }
            return writeln!(f);
        }
    }

    /// Walks the real entries for every page of `[va, va + size)` backed by
    /// `b` (`None`: nothing should be mapped yet, a lazy mapping not
    /// faulted in; present pages then still must match the object): returns
    /// the first VA whose translation differs from the object's page, and
    /// the leaves found.
    pub(crate) fn check(
        &self,
        va: u64,
        size: u64,
        b: Option<&Backing<'_>>,
        perms: u64,
        lazy: bool,
    ) -> (Option<u64>, u64, u64) {
        let end = va + size;
        let mut at = va;
        let (mut n4, mut n2) = (0, 0);
        while at < end {
            let want = b.and_then(|b| b.addr(at)).map(|(pa, _)| pa);
            match self.walk(at) {
                Some((pa, p, size)) => {
                    let page_pa = pa & !(size - 1);
                    let want_page = want.map(|w| w & !(size - 1));
                    // A 2 MiB page must lie inside the mapping.
                    let page_va = at & !(size - 1);
                    if Some(page_pa) != want_page
                        || p != perms
                        || page_va < va
                        || page_va + size > end
                    {
                        return (Some(at), n4, n2);
                    }
                    if size == PAGE_2M {
                        n2 += 1;
                    } else {
                        n4 += 1;
                    }
                    at = page_va + size;
                }
                None => {
                    if !lazy {
                        return (Some(at), n4, n2);
                    }
                    at += PAGE_4K;
                }
            }
        }
        (None, n4, n2)
    }
}

impl Node {
    /// Returns a childless table to the pool (a level-0 node).
    fn free_one(self, pool: &PtPool) {
        pool.free(self.id);
    }
}

impl Drop for PageTables {
    fn drop(&mut self) {
        // The owner destroyed every context of this address space first:
        // the device no longer walks these tables.
        if let Some(root) = self.root.take() {
            let n = KBox::into_inner(root).free(&self.pool);
            self.tables = self.tables.saturating_sub(n);
        }
    }
}
