//! Device memory (VRAM): its layout, the CPU-visible aperture, and what a
//! device reset does to it.
//!
//! A vgpu with VRAM (`IDENTIFY` reports
//! [`FEATURE_VRAM`](super::limits::FEATURE_VRAM) and `vram_size`) has device-local memory of its own, outside guest RAM.
//! Page-table entries name it with the location bit
//! ([`super::mmu::PTE_VRAM`]); in device-physical addresses (DPAs) VRAM
//! offset `o` is [`super::mmu::VRAM_BASE`]` + o` ([`dpa`]).
//!
//! # Layout
//!
//! `MEMORY_LAYOUT` returns the ranges of VRAM, lowest first, at most
//! [`MEM_LAYOUT_RANGES`], covering `0..vram_size` without gaps (as
//! amdgpu's IP discovery or nova-core's `FbLayout` describe a framebuffer):
//!
//! ```text
//!  0                 visible                      vram_size - FIRMWARE_RESERVED   vram_size
//!  ├── usable, CPU-visible ──┼──── usable, GPU only ─────┼── reserved: firmware ──┤
//! ```
//!
//! * [`kind::USABLE`]: the driver may place buffers, rings and page tables
//!   here.
//! * [`kind::RESERVED`]: the device's own (the firmware's carve-out at the
//!   top). A GPU access through a page-table entry into a reserved range
//!   faults with `BAD_PHYSICAL`, as a protected region does on real parts.
//! * [`flags::CPU_VISIBLE`]: the range lies inside the aperture, the first
//!   `visible_vram_size` bytes of VRAM, which the guest CPU reaches through
//!   a PCI BAR (see docs/hardware.md, "Device memory"). The rest of VRAM
//!   only the GPU reaches; a driver moves a buffer into the visible part
//!   (or to system memory) before the CPU touches it.
//!
//! # Resets
//!
//! An engine reset never touches VRAM. A device reset
//! (`DEVICE_RESET`) may lose it, as a deep reset of a discrete GPU does:
//! the device's `--vram-on-reset` policy decides, and the reset's reply
//! says what happened ([`state`]), so that a driver restores what it
//! keeps copies of and marks the rest lost.

/// Most ranges in a `MEMORY_LAYOUT` reply.
pub const MEM_LAYOUT_RANGES: usize = 8;

/// Bytes at the top of VRAM reserved for the device's firmware.
pub const FIRMWARE_RESERVED: u64 = 2 << 20;

/// Smallest VRAM a device has (when it has any): the firmware's
/// carve-out plus 2 MiB for the driver.
pub const MIN_VRAM: u64 = 2 * FIRMWARE_RESERVED;

/// VRAM and aperture sizes are multiples of this (2 MiB: one huge page).
pub const VRAM_GRANULE: u64 = 2 << 20;

/// Default VRAM size of `vgpu-device` (512 MiB).
pub const DEFAULT_VRAM: u64 = 512 << 20;

/// Default size of the CPU-visible aperture (128 MiB).
pub const DEFAULT_VISIBLE: u64 = 128 << 20;

/// Range kinds of a `MEMORY_LAYOUT` reply.
pub mod kind {
    /// Free for the driver.
    pub const USABLE: u32 = 1;
    /// The device's own; GPU accesses through page tables fault.
    pub const RESERVED: u32 = 2;
}

/// Range flags of a `MEMORY_LAYOUT` reply.
pub mod flags {
    /// Inside the CPU-visible aperture.
    pub const CPU_VISIBLE: u32 = 1 << 0;
}

/// What a device reset did to VRAM (`DEVICE_RESET`'s reply), and the
/// device's policy (`MEMORY_LAYOUT.reset_policy`).
pub mod state {
    /// The device has no VRAM.
    pub const NONE: u32 = 0;
    /// Contents kept.
    pub const KEPT: u32 = 1;
    /// Contents lost: VRAM reads as zero.
    pub const ZEROED: u32 = 2;
    /// Contents lost: VRAM holds garbage.
    pub const GARBAGE: u32 = 3;

    /// A short upper-case name.
    pub const fn name(v: u32) -> &'static str {
        match v {
            NONE => "NONE",
            KEPT => "KEPT",
            ZEROED => "ZEROED",
            GARBAGE => "GARBAGE",
            _ => "UNKNOWN",
        }
    }
}

/// The device-physical address of VRAM offset `offset`.
pub const fn dpa(offset: u64) -> u64 {
    super::mmu::VRAM_BASE + offset
}

/// The VRAM offset of device-physical address `dpa`, if it names VRAM.
pub const fn offset(dpa: u64) -> Option<u64> {
    dpa.checked_sub(super::mmu::VRAM_BASE)
}

/// One range of VRAM, decoded from a `MEMORY_LAYOUT` reply.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemRange {
    /// First VRAM offset.
    pub base: u64,
    /// Bytes.
    pub size: u64,
    /// A [`kind`] value.
    pub kind: u32,
    /// [`flags`] bits.
    pub flags: u32,
}

impl MemRange {
    /// One past the last offset (saturating).
    pub const fn end(&self) -> u64 {
        self.base.saturating_add(self.size)
    }

    /// Whether `offset..offset + len` lies inside this range.
    pub const fn contains(&self, offset: u64, len: u64) -> bool {
        match offset.checked_add(len) {
            Some(end) => offset >= self.base && end <= self.end(),
            None => false,
        }
    }
}

/// Why a VRAM configuration is refused ([`Layout::new`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayoutError {
    /// VRAM smaller than [`MIN_VRAM`] (and not zero).
    TooSmall,
    /// A size that is not a multiple of [`VRAM_GRANULE`].
    Unaligned,
    /// A visible part larger than the usable VRAM.
    VisibleTooLarge,
}

/// The layout of a device's VRAM: what `MEMORY_LAYOUT` reports, computed
/// the same way by the device and by tools.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Total VRAM in bytes (0: none).
    pub size: u64,
    /// CPU-visible bytes from offset 0.
    pub visible: u64,
    /// The ranges, lowest first; `count` are valid.
    pub ranges: [MemRange; MEM_LAYOUT_RANGES],
    /// Valid entries of `ranges`.
    pub count: usize,
}

impl Layout {
    /// No VRAM: no ranges.
    pub const NONE: Layout = Layout {
        size: 0,
        visible: 0,
        ranges: [MemRange {
            base: 0,
            size: 0,
            kind: 0,
            flags: 0,
        }; MEM_LAYOUT_RANGES],
        count: 0,
    };

    /// The layout of `size` bytes of VRAM with `visible` bytes in the
    /// aperture: the usable part split at the aperture's end, the
    /// firmware's carve-out on top. `size == 0`: no VRAM, no ranges.
    ///
    /// # Errors
    ///
    /// [`LayoutError`] for sizes the device refuses.
    pub const fn new(size: u64, visible: u64) -> Result<Layout, LayoutError> {
        let mut l = Layout {
            size,
            visible,
            ..Layout::NONE
        };
        if size == 0 {
            l.visible = 0;
            return Ok(l);
        }
        if size < MIN_VRAM {
            return Err(LayoutError::TooSmall);
        }
        if !size.is_multiple_of(VRAM_GRANULE) || !visible.is_multiple_of(VRAM_GRANULE) {
            return Err(LayoutError::Unaligned);
        }
        let usable = size - FIRMWARE_RESERVED;
        if visible > usable {
            return Err(LayoutError::VisibleTooLarge);
        }
        if visible > 0 {
            l.ranges[0] = MemRange {
                base: 0,
                size: visible,
                kind: kind::USABLE,
                flags: flags::CPU_VISIBLE,
            };
            l.count = 1;
        }
        if usable > visible {
            l.ranges[l.count] = MemRange {
                base: visible,
                size: usable - visible,
                kind: kind::USABLE,
                flags: 0,
            };
            l.count += 1;
        }
        l.ranges[l.count] = MemRange {
            base: usable,
            size: FIRMWARE_RESERVED,
            kind: kind::RESERVED,
            flags: 0,
        };
        l.count += 1;
        Ok(l)
    }

    /// The valid ranges.
    pub fn ranges(&self) -> &[MemRange] {
        let n = if self.count < MEM_LAYOUT_RANGES {
            self.count
        } else {
            MEM_LAYOUT_RANGES
        };
        self.ranges.split_at(n).0
    }

    /// Whether `offset..offset + len` lies inside one usable range.
    pub fn usable(&self, offset: u64, len: u64) -> bool {
        self.ranges()
            .iter()
            .any(|r| r.kind == kind::USABLE && r.contains(offset, len))
    }

    /// Bytes of usable VRAM.
    pub fn usable_bytes(&self) -> u64 {
        self.ranges()
            .iter()
            .filter(|r| r.kind == kind::USABLE)
            .fold(0u64, |a, r| a.saturating_add(r.size))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_layout_splits_at_the_aperture_and_reserves_the_top() {
        let l = Layout::new(DEFAULT_VRAM, DEFAULT_VISIBLE).unwrap();
        let r = l.ranges();
        assert_eq!(r.len(), 3);
        assert_eq!(
            (r[0].base, r[0].size, r[0].flags),
            (0, 128 << 20, flags::CPU_VISIBLE)
        );
        assert_eq!(
            (r[1].base, r[1].size, r[1].flags),
            (128 << 20, (382) << 20, 0)
        );
        assert_eq!((r[2].base, r[2].kind), ((510) << 20, kind::RESERVED));
        assert_eq!(r[2].end(), DEFAULT_VRAM);
        assert_eq!(l.usable_bytes(), 510 << 20);
        assert!(l.usable(0, 4096));
        assert!(l.usable((128 << 20) - 4096, 4096));
        // A page straddling the split is in no single range.
        assert!(!l.usable((128 << 20) - 2048, 4096));
        assert!(!l.usable(510 << 20, 4096), "the carve-out is not usable");
        assert!(!l.usable(u64::MAX - 10, 4096), "no overflow");
    }

    #[test]
    fn sizes_the_device_refuses() {
        assert_eq!(Layout::new(2 << 20, 0), Err(LayoutError::TooSmall));
        assert_eq!(
            Layout::new((64 << 20) + 4096, 0),
            Err(LayoutError::Unaligned)
        );
        assert_eq!(Layout::new(64 << 20, 4096), Err(LayoutError::Unaligned));
        assert_eq!(
            Layout::new(64 << 20, 64 << 20),
            Err(LayoutError::VisibleTooLarge)
        );
        assert_eq!(Layout::new(0, 128 << 20).unwrap().ranges().len(), 0);
        // All visible: one usable range, then the carve-out.
        assert_eq!(Layout::new(64 << 20, 62 << 20).unwrap().ranges().len(), 2);
        // Nothing visible.
        let l = Layout::new(64 << 20, 0).unwrap();
        assert_eq!(l.ranges()[0].flags, 0);
    }

    #[test]
    fn page_table_entries_carry_the_location_bit() {
        use super::super::mmu::{CachePolicy, Pte, PteKind, PTE_READ, PTE_VRAM};
        let v = Pte::leaf(dpa(0x40_3000), PTE_READ, CachePolicy::Cached);
        assert_eq!(v.bits() & PTE_VRAM, PTE_VRAM);
        assert_eq!(v.address(), 0x40_3000);
        match v.decode(0) {
            Ok(PteKind::Leaf(l)) => assert_eq!(l.page, dpa(0x40_3000)),
            other => panic!("{other:?}"),
        }
        let s = Pte::leaf(0x40_3000, PTE_READ, CachePolicy::Cached);
        assert_eq!(s.bits() & PTE_VRAM, 0);
        // Tables may live in VRAM; a huge VRAM page must be 2 MiB aligned
        // in VRAM.
        assert_eq!(
            Pte::table(dpa(0x2000)).decode(2),
            Ok(PteKind::Table(dpa(0x2000)))
        );
        assert!(Pte::huge(dpa(0x20_0000), PTE_READ, CachePolicy::Cached)
            .decode(1)
            .is_ok());
        assert!(Pte::huge(dpa(0x20_1000), PTE_READ, CachePolicy::Cached)
            .decode(1)
            .is_err());
    }

    #[test]
    fn dpas_round_trip() {
        assert_eq!(offset(dpa(0x1234_5000)), Some(0x1234_5000));
        assert_eq!(offset(0x1000), None);
    }
}
