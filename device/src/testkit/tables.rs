//! [`PageTables`]: a context's four-level page tables built in guest
//! memory the way a driver builds them (see `docs/hardware.md`), with the
//! means to corrupt them on purpose and to translate in software.

use std::collections::HashMap;

use vgpu_hwif::mmu::{level_index, CachePolicy, Pte, LEVELS};
use vm_memory::GuestMemoryMmap;

use super::{read_u64, write_u64, KitError, PhysAlloc};

/// A context's page tables in guest memory.
#[derive(Debug)]
pub struct PageTables {
    root: u64,
    /// The memory tables are allocated from: (first byte, bytes).
    pool: (u64, u64),
    /// Table for (level, VA bits above that level's range).
    tables: HashMap<(u32, u64), u64>,
    alloc: PhysAlloc,
}

impl PageTables {
    /// Empty tables; tables are allocated from `alloc` (the root at once).
    pub fn new(mem: &GuestMemoryMmap, mut alloc: PhysAlloc) -> Result<Self, KitError> {
        let pool = (alloc.next, alloc.end.saturating_sub(alloc.next));
        let root = alloc.page(mem)?;
        let mut tables = HashMap::new();
        tables.insert((LEVELS - 1, 0), root);
        Ok(PageTables {
            root,
            pool,
            tables,
            alloc,
        })
    }

    /// Guest-physical address of the root table (for `CONTEXT_CREATE`).
    pub fn root(&self) -> u64 {
        self.root
    }

    /// The memory the tables are allocated from: (first byte, bytes).
    pub fn pool(&self) -> (u64, u64) {
        self.pool
    }

    /// A new zeroed table page from the pool, linked nowhere.
    pub fn new_table(&mut self, mem: &GuestMemoryMmap) -> Result<u64, KitError> {
        self.alloc.page(mem)
    }

    fn key(va: u64, level: u32) -> (u32, u64) {
        (level, va >> (12 + 9 * (level + 1)))
    }

    /// The table of `level` covering `va`, created if missing.
    fn table(&mut self, mem: &GuestMemoryMmap, va: u64, level: u32) -> Result<u64, KitError> {
        if let Some(&t) = self.tables.get(&Self::key(va, level)) {
            return Ok(t);
        }
        let parent = self.table(mem, va, level + 1)?;
        let slot = parent + 8 * level_index(va, level + 1) as u64;
        let old = Pte::from_bits(read_u64(mem, slot)?);
        if old.is_huge() {
            return Err(KitError::Conflict(va));
        }
        let t = self.alloc.page(mem)?;
        write_u64(mem, slot, Pte::table(t).bits())?;
        self.tables.insert(Self::key(va, level), t);
        Ok(t)
    }

    /// Guest-physical address of the entry for `va` at `level` (3 = root),
    /// if its table exists.
    pub fn entry_addr(&self, va: u64, level: u32) -> Option<u64> {
        let t = self.tables.get(&Self::key(va, level))?;
        Some(t + 8 * level_index(va, level) as u64)
    }

    /// Maps the 4 KiB page at `va` to `pa` with `perms`
    /// (`PTE_READ | PTE_WRITE | PTE_EXEC` subset).
    pub fn map_4k(
        &mut self,
        mem: &GuestMemoryMmap,
        va: u64,
        pa: u64,
        perms: u64,
    ) -> Result<(), KitError> {
        let t = self.table(mem, va, 0)?;
        write_u64(
            mem,
            t + 8 * level_index(va, 0) as u64,
            Pte::leaf(pa, perms, CachePolicy::Cached).bits(),
        )
    }

    /// Maps the 2 MiB page at `va` to `pa`.
    pub fn map_2m(
        &mut self,
        mem: &GuestMemoryMmap,
        va: u64,
        pa: u64,
        perms: u64,
    ) -> Result<(), KitError> {
        if self.tables.contains_key(&Self::key(va, 0)) {
            return Err(KitError::Conflict(va));
        }
        let t = self.table(mem, va, 1)?;
        write_u64(
            mem,
            t + 8 * level_index(va, 1) as u64,
            Pte::huge(pa, perms, CachePolicy::Cached).bits(),
        )
    }

    /// Maps `len` bytes (rounded up to pages) of contiguous physical
    /// memory at `pa` to `va` with 4 KiB pages.
    pub fn map_range(
        &mut self,
        mem: &GuestMemoryMmap,
        va: u64,
        pa: u64,
        len: u64,
        perms: u64,
    ) -> Result<(), KitError> {
        let mut off = 0;
        while off < len {
            self.map_4k(mem, va + off, pa + off, perms)?;
            off += 4096;
        }
        Ok(())
    }

    /// Clears the leaf entry of `va` (4 KiB or 2 MiB), if mapped.
    pub fn unmap(&mut self, mem: &GuestMemoryMmap, va: u64) -> Result<(), KitError> {
        for level in [0, 1] {
            if let Some(slot) = self.entry_addr(va, level) {
                let e = Pte::from_bits(read_u64(mem, slot)?);
                if level == 0 || e.is_huge() {
                    write_u64(mem, slot, 0)?;
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// Overwrites the entry for `va` at `level` with `value` (for tests of
    /// malformed tables). Returns the entry's address.
    pub fn set_entry(
        &mut self,
        mem: &GuestMemoryMmap,
        va: u64,
        level: u32,
        value: u64,
    ) -> Result<u64, KitError> {
        let t = self.table(mem, va, level)?;
        let slot = t + 8 * level_index(va, level) as u64;
        write_u64(mem, slot, value)?;
        Ok(slot)
    }

    /// Translates `va` in software (valid entries only, no checks beyond
    /// that): what a correct walk returns.
    pub fn translate(&self, mem: &GuestMemoryMmap, va: u64) -> Option<u64> {
        let mut table = self.root;
        for level in (0..LEVELS).rev() {
            let e = Pte::from_bits(read_u64(mem, table + 8 * level_index(va, level) as u64).ok()?);
            if !e.is_valid() {
                return None;
            }
            let addr = e.address();
            if level == 0 {
                return Some(addr | (va & 0xfff));
            }
            if level == 1 && e.is_huge() {
                return Some(addr | (va & 0x1f_ffff));
            }
            table = addr;
        }
        None
    }
}
