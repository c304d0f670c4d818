//! GPU memory access: every read and write an engine makes to a GPU
//! virtual address, through its MMU and TLB, with bounds-checked access to
//! guest memory.
//!
//! Each access is translated once per page it touches; within a page the
//! bytes move in one bulk operation on the host mapping of guest memory.
//! Nothing here indexes or allocates by a guest value: lengths are bounded
//! by the caller's buffer or by the page, and every guest-physical range is
//! checked by vm-memory before it is touched (a range that fails that check,
//! for example after the guest memory map changed under a cached
//! translation, faults as `BAD_PHYSICAL`).
//!
//! With a [`Poison`] set attached ([`GpuMemory::with_poison`]), reads that
//! touch a poisoned page fail with an ECC error ([`MmuFault::is_ecc`])
//! before any byte moves, and a write chunk covering a whole poisoned page
//! scrubs it.
//!
//! This is the layer the compute engine's `GlobalMemory` is built on.

use std::sync::atomic::{AtomicU64, Ordering};

use vgpu_hwif::mmu::{Access, FaultReason};
use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend, VolatileMemory};

use super::mmu::{AddressSpace, Mem, Mmu, MmuFault, PageMapping, Tlb};
use super::poison::Poison;
use super::record::Tap;

/// Largest number of bytes one [`GpuMemory::copy_chunk`] or
/// [`GpuMemory::fill_chunk`] call moves.
pub const MAX_CHUNK: u64 = 64 * 1024;

/// Size of the pattern buffer used by fills.
const FILL_BUF: usize = 4096;

/// One engine's view of one address space.
#[derive(Debug)]
pub struct GpuMemory<'a> {
    mmu: Mmu<'a>,
    poison: Option<&'a Poison>,
}

impl<'a> GpuMemory<'a> {
    /// Accesses `space` in `mem` through `tlb`.
    pub fn new(mem: &'a Mem, tlb: &'a mut Tlb, space: AddressSpace) -> Self {
        GpuMemory {
            mmu: Mmu {
                mem,
                tlb,
                space,
                tap: None,
            },
            poison: None,
        }
    }

    /// The same, checking reads against (and scrubbing writes from)
    /// `poison`.
    pub fn with_poison(mut self, poison: Option<&'a Poison>) -> Self {
        self.poison = poison;
        self
    }

    /// The same, telling `tap` (record mode) of every page read.
    pub fn with_tap(mut self, tap: Option<Tap<'a>>) -> Self {
        self.mmu.tap = tap;
        self
    }

    /// The poisoned-page set checked, if any.
    pub fn poison(&self) -> Option<&'a Poison> {
        self.poison
    }

    /// Fails with an ECC error if `len` bytes at `va` (in `map`) touch a
    /// poisoned page.
    fn check_poison(
        &self,
        map: &PageMapping,
        va: u64,
        len: u64,
        access: Access,
    ) -> Result<(), MmuFault> {
        match self.poison {
            Some(p) if p.hit(map.pa(va), len).is_some() => Err(MmuFault::ecc(va, access)),
            _ => Ok(()),
        }
    }

    /// `len` bytes were written at `va` (in `map`): scrubs the poisoned
    /// pages they cover.
    fn scrub(&self, map: &PageMapping, va: u64, len: u64) {
        if let Some(p) = self.poison {
            p.written(map.pa(va), len);
        }
    }

    /// The address space accessed.
    pub fn space(&self) -> AddressSpace {
        self.mmu.space
    }

    /// Whether the sanitizer checks this memory's accesses.
    pub fn san_on(&self) -> bool {
        self.mmu.tlb.san_on()
    }

    /// Logs a data access for the sanitizer's hazard check.
    pub fn san_access(&mut self, va: u64, pa: u64, len: u64, write: bool) {
        self.mmu.tlb.san_access(va, pa, len, write);
    }

    /// Translates `va` for `access`.
    pub fn translate(&mut self, va: u64, access: Access) -> Result<PageMapping, MmuFault> {
        self.mmu.translate(va, access)
    }

    fn bad_physical(map: &PageMapping, va: u64, access: Access) -> MmuFault {
        MmuFault {
            va,
            access,
            reason: FaultReason::BadPhysical,
            level: map.level(),
        }
    }

    /// The guest-physical address of the naturally aligned 8 bytes at `va`.
    fn pa8(&mut self, va: u64, access: Access) -> Result<(PageMapping, GuestAddress), MmuFault> {
        let map = self.mmu.translate(va, access)?;
        Ok((map, GuestAddress(map.pa(va))))
    }

    /// Reads the 64-bit value at the 8-byte aligned `va` (one atomic load).
    pub fn read_u64(&mut self, va: u64, access: Access) -> Result<u64, MmuFault> {
        let (map, pa) = self.pa8(va, access)?;
        self.check_poison(&map, va, 8, access)?;
        self.mmu
            .mem
            .load::<u64>(pa, Ordering::Acquire)
            .map(u64::from_le)
            .map_err(|_| Self::bad_physical(&map, va, access))
    }

    /// Writes `value` at the 8-byte aligned `va` (one atomic store).
    pub fn write_u64(&mut self, va: u64, value: u64) -> Result<(), MmuFault> {
        let (map, pa) = self.pa8(va, Access::Write)?;
        self.mmu
            .mem
            .store(value.to_le(), pa, Ordering::Release)
            .map_err(|_| Self::bad_physical(&map, va, Access::Write))
    }

    /// Atomically adds `value` to the 64-bit value at the 8-byte aligned
    /// `va`; returns the old value.
    pub fn atomic_add_u64(&mut self, va: u64, value: u64) -> Result<u64, MmuFault> {
        let (map, pa) = self.pa8(va, Access::Atomic)?;
        self.check_poison(&map, va, 8, Access::Atomic)?;
        let bad = || Self::bad_physical(&map, va, Access::Atomic);
        let slice = self.mmu.mem.get_slice(pa, 8).map_err(|_| bad())?;
        let cell = slice.get_atomic_ref::<AtomicU64>(0).map_err(|_| bad())?;
        // Little-endian host: the in-memory value is the integer value.
        Ok(cell.fetch_add(value, Ordering::AcqRel))
    }

    /// Writes `bytes` at `va`; they must not cross a 4 KiB page boundary
    /// (status blocks are 64 bytes, 64-byte aligned).
    pub fn write_small(&mut self, va: u64, bytes: &[u8]) -> Result<(), MmuFault> {
        let map = self.mmu.translate(va, Access::Write)?;
        if (bytes.len() as u64) > map.bytes_left(va) {
            let end = va.saturating_add(map.bytes_left(va));
            let next = self.mmu.translate(end, Access::Write)?;
            return Err(Self::bad_physical(&next, end, Access::Write));
        }
        self.mmu
            .mem
            .write_slice(bytes, GuestAddress(map.pa(va)))
            .map_err(|_| Self::bad_physical(&map, va, Access::Write))
    }

    /// Reads up to `out.len()` little-endian words starting at the 4-byte
    /// aligned `va`, page by page with `access`. Returns how many words were
    /// read before the first fault, and that fault if one stopped the read.
    pub fn read_words(
        &mut self,
        va: u64,
        out: &mut [u32],
        access: Access,
    ) -> (usize, Option<MmuFault>) {
        let mut done = 0usize;
        while done < out.len() {
            let cur = va.wrapping_add(4 * done as u64);
            let map = match self.mmu.translate(cur, access) {
                Ok(m) => m,
                Err(f) => return (done, Some(f)),
            };
            let n = ((map.bytes_left(cur) / 4) as usize).min(out.len() - done);
            if let Err(f) = self.check_poison(&map, cur, n as u64 * 4, access) {
                return (done, Some(f));
            }
            let Some(dst) = out.get_mut(done..done + n) else {
                break;
            };
            let read = self
                .mmu
                .mem
                .get_slice(GuestAddress(map.pa(cur)), n * 4)
                .map(|s| s.copy_to(dst));
            match read {
                Ok(got) if got == n => {}
                _ => return (done, Some(Self::bad_physical(&map, cur, access))),
            }
            for w in dst.iter_mut() {
                *w = u32::from_le(*w);
            }
            if access == Access::Read {
                self.mmu
                    .tlb
                    .san_access(cur, map.pa(cur), n as u64 * 4, false);
            }
            done += n;
        }
        (done, None)
    }

    /// Copies the first chunk of `src..src + len` to `dst..dst + len`: at
    /// most [`MAX_CHUNK`] bytes, and no further than the end of the source
    /// or destination page. Returns the bytes copied (≥ 1 when `len` ≥ 1).
    pub fn copy_chunk(&mut self, src: u64, dst: u64, len: u64) -> Result<u64, MmuFault> {
        let s = self.mmu.translate(src, Access::Read)?;
        let d = self.mmu.translate(dst, Access::Write)?;
        let n = len
            .min(MAX_CHUNK)
            .min(s.bytes_left(src))
            .min(d.bytes_left(dst));
        self.check_poison(&s, src, n, Access::Read)?;
        let mem = self.mmu.mem;
        let from = mem
            .get_slice(GuestAddress(s.pa(src)), n as usize)
            .map_err(|_| Self::bad_physical(&s, src, Access::Read))?;
        let to = mem
            .get_slice(GuestAddress(d.pa(dst)), n as usize)
            .map_err(|_| Self::bad_physical(&d, dst, Access::Write))?;
        from.copy_to_volatile_slice(to);
        self.scrub(&d, dst, n);
        self.mmu.tlb.san_access(src, s.pa(src), n, false);
        self.mmu.tlb.san_access(dst, d.pa(dst), n, true);
        Ok(n)
    }

    /// Fills the first chunk of `dst..dst + len` with the 4-byte
    /// little-endian `pattern`, where `phase` is the byte offset of `dst`
    /// from the start of the fill (so the pattern continues across chunks).
    /// Same chunk limits as [`GpuMemory::copy_chunk`].
    pub fn fill_chunk(
        &mut self,
        dst: u64,
        len: u64,
        pattern: u32,
        phase: u64,
    ) -> Result<u64, MmuFault> {
        let d = self.mmu.translate(dst, Access::Write)?;
        let n = len.min(MAX_CHUNK).min(d.bytes_left(dst));
        let pat = pattern.to_le_bytes();
        let mut buf = [0u8; FILL_BUF + 4];
        for (i, b) in buf.iter_mut().enumerate() {
            *b = pat[(i + (phase % 4) as usize) % 4];
        }
        let mem = self.mmu.mem;
        let to = mem
            .get_slice(GuestAddress(d.pa(dst)), n as usize)
            .map_err(|_| Self::bad_physical(&d, dst, Access::Write))?;
        let mut off = 0usize;
        let n_usize = n as usize;
        while off < n_usize {
            let m = (n_usize - off).min(FILL_BUF);
            // `off` advances by multiples of FILL_BUF (a multiple of 4), so
            // the buffer's phase stays right.
            let part = to
                .subslice(off, m)
                .map_err(|_| Self::bad_physical(&d, dst, Access::Write))?;
            part.copy_from(buf.get(..m).unwrap_or(&[]));
            off += m;
        }
        self.scrub(&d, dst, n);
        self.mmu.tlb.san_access(dst, d.pa(dst), n, true);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vgpu_hwif::mmu::{leaf_entry, table_entry, CachePolicy, PTE_READ, PTE_WRITE};

    const RW: u64 = PTE_READ | PTE_WRITE;

    /// 1 MiB of RAM; VA page i (i < 16) of 0x10_0000.. maps PA 0x10000 +
    /// 0x1000 * perm[i], i.e. scattered.
    fn setup() -> (Mem, AddressSpace) {
        let mem = Mem::from_ranges(&[(GuestAddress(0), 0x10_0000)]).unwrap();
        let w = |pa: u64, v: u64| mem.write_obj(v, GuestAddress(pa)).unwrap();
        let base = 0x10_0000u64;
        w(
            0x1000 + 8 * vgpu_hwif::mmu::level_index(base, 3) as u64,
            table_entry(0x2000),
        );
        w(
            0x2000 + 8 * vgpu_hwif::mmu::level_index(base, 2) as u64,
            table_entry(0x3000),
        );
        w(
            0x3000 + 8 * vgpu_hwif::mmu::level_index(base, 1) as u64,
            table_entry(0x4000),
        );
        for i in 0..16u64 {
            let va = base + i * 0x1000;
            let pa = 0x10000 + ((i * 7) % 16) * 0x1000;
            w(
                0x4000 + 8 * vgpu_hwif::mmu::level_index(va, 0) as u64,
                leaf_entry(pa, RW, CachePolicy::Cached),
            );
        }
        (
            mem,
            AddressSpace {
                asid: 3,
                root: 0x1000,
                va_bits: 48,
            },
        )
    }

    fn pa_of(i: u64) -> u64 {
        0x10000 + ((i * 7) % 16) * 0x1000
    }

    #[test]
    fn chunks_stop_at_page_boundaries_and_land_scattered() {
        let (mem, space) = setup();
        let mut tlb = Tlb::new();
        let mut gm = GpuMemory::new(&mem, &mut tlb, space);
        let pattern: Vec<u8> = (0..0x2000u32).map(|i| (i % 251) as u8).collect();
        mem.write_slice(&pattern[..0x1000], GuestAddress(pa_of(0)))
            .unwrap();
        mem.write_slice(&pattern[0x1000..], GuestAddress(pa_of(1)))
            .unwrap();
        // Copy VA 0x100800..+0x1800 to VA 0x105400..: chunks end at every
        // source or destination page end.
        let (mut src, mut dst, mut left) = (0x10_0800u64, 0x10_5400u64, 0x1800u64);
        let mut chunks = Vec::new();
        while left > 0 {
            let n = gm.copy_chunk(src, dst, left).unwrap();
            chunks.push(n);
            src += n;
            dst += n;
            left -= n;
        }
        assert_eq!(chunks, vec![0x800, 0x400, 0xc00]);
        let mut got = vec![0u8; 0x1800];
        let mut read = 0usize;
        for (i, off) in [(5u64, 0x400usize), (6, 0), (7, 0)] {
            let n = (0x1000 - off).min(0x1800 - read);
            mem.read_slice(
                &mut got[read..read + n],
                GuestAddress(pa_of(i) + off as u64),
            )
            .unwrap();
            read += n;
        }
        assert_eq!(got, pattern[0x800..0x2000]);
    }

    #[test]
    fn fill_keeps_the_pattern_phase_across_chunks() {
        let (mem, space) = setup();
        let mut tlb = Tlb::new();
        let mut gm = GpuMemory::new(&mem, &mut tlb, space);
        let (mut dst, mut left, mut phase) = (0x10_0ffdu64, 7u64, 0u64);
        while left > 0 {
            let n = gm.fill_chunk(dst, left, 0x4433_2211, phase).unwrap();
            dst += n;
            left -= n;
            phase += n;
        }
        let mut a = [0u8; 3];
        let mut b = [0u8; 4];
        mem.read_slice(&mut a, GuestAddress(pa_of(0) + 0xffd))
            .unwrap();
        mem.read_slice(&mut b, GuestAddress(pa_of(1))).unwrap();
        assert_eq!(a, [0x11, 0x22, 0x33]);
        assert_eq!(b, [0x44, 0x11, 0x22, 0x33]);
    }

    #[test]
    fn words_read_up_to_the_first_fault() {
        let (mem, space) = setup();
        let mut tlb = Tlb::new();
        let mut gm = GpuMemory::new(&mem, &mut tlb, space);
        mem.write_obj(0xa5a5_0001u32.to_le(), GuestAddress(pa_of(15) + 0xffc))
            .unwrap();
        let mut out = [0u32; 4];
        let (n, f) = gm.read_words(0x10_fffc, &mut out, Access::Read);
        assert_eq!(n, 1);
        assert_eq!(out[0], 0xa5a5_0001);
        let f = f.unwrap();
        assert_eq!(
            (f.va, f.reason, f.level),
            (0x11_0000, FaultReason::NotPresent, 0)
        );
        // Execute needs PTE_EXEC.
        let (n, f) = gm.read_words(0x10_0000, &mut out, Access::Execute);
        assert_eq!((n, f.map(|f| f.reason)), (0, Some(FaultReason::Permission)));
    }

    #[test]
    fn u64_accesses_and_atomic_add() {
        let (mem, space) = setup();
        let mut tlb = Tlb::new();
        let mut gm = GpuMemory::new(&mem, &mut tlb, space);
        gm.write_u64(0x10_2008, 40).unwrap();
        assert_eq!(gm.atomic_add_u64(0x10_2008, 2).unwrap(), 40);
        assert_eq!(gm.read_u64(0x10_2008, Access::Read).unwrap(), 42);
        assert_eq!(mem.read_obj::<u64>(GuestAddress(pa_of(2) + 8)).unwrap(), 42);
        assert_eq!(
            gm.write_u64(0x20_0000, 1).unwrap_err().reason,
            FaultReason::NotPresent
        );
    }
}
