//! The device's physical memory: what a device-physical address (DPA)
//! reaches. Below [`VRAM_BASE`] a DPA is a guest-physical address in the
//! guest's RAM (the vhost-user memory table); from [`VRAM_BASE`] on it is an
//! offset in the device's own memory, VRAM ([`vgpu_hwif::vram`]).
//!
//! VRAM is a memfd of the device process, never guest RAM. Its usable part
//! is one region of the engines' [`Mem`] at [`VRAM_BASE`] ([`Vram::attach`]),
//! so the MMU's walks, the copy and compute engines and the JIT's direct
//! pages reach it the way they reach guest RAM; the firmware's carve-out is
//! not in it, so a page-table entry into it faults `BAD_PHYSICAL`. The
//! first `visible` bytes are the CPU-visible aperture: the memfd is shared
//! with QEMU, which maps that part as a PCI BAR (docs/hardware.md, "Device
//! memory"; [`Vram::publish`]).
//!
//! ```text
//!   powered on ──(DEVICE_RESET)──▶ kept | zeroed | garbage (--vram-on-reset)
//! ```

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use vgpu_hwif::mmu::VRAM_BASE;
use vgpu_hwif::vram::{state, Layout, FIRMWARE_RESERVED};
use vm_memory::mmap::MmapRegion;
use vm_memory::{
    FileOffset, GuestAddress, GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion,
    GuestRegionMmap,
};

use crate::config::{VramConfig, VramOnReset};

/// Guest memory, and VRAM once attached, as the device sees it.
pub type Mem = GuestMemoryMmap;

/// Whether `len` bytes at device-physical `pa` lie inside one region of
/// memory the device reaches: guest RAM, or usable VRAM.
pub fn in_ram(mem: &Mem, pa: u64, len: u64) -> bool {
    let Some(last) = len.checked_sub(1).and_then(|n| pa.checked_add(n)) else {
        return false;
    };
    mem.find_region(GuestAddress(pa))
        .is_some_and(|r| last <= r.last_addr().0)
}

/// The device's VRAM: its memfd, its mapping and its layout.
#[derive(Debug)]
pub struct Vram {
    cfg: VramConfig,
    /// The memfd (None: no VRAM, or it could not be created).
    file: Option<File>,
    /// Where this VRAM starts in the memfd: 0 for the whole device, the
    /// window's offset for a virtual function's partition.
    file_base: u64,
    /// The usable part, mapped at [`VRAM_BASE`].
    region: Option<Arc<GuestRegionMmap>>,
    /// Device resets so far (seeds the garbage).
    resets: AtomicU64,
}

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum VramError {
    /// The memfd could not be created or sized.
    #[error("VRAM memfd of {size} bytes: {source}")]
    Memfd {
        /// Bytes asked for.
        size: u64,
        /// Why.
        source: io::Error,
    },
    /// The memfd could not be mapped.
    #[error("VRAM mapping: {0}")]
    Map(String),
    /// The aperture link could not be made.
    #[error("VRAM publish at {path}: {source}")]
    Publish {
        /// The link.
        path: std::path::PathBuf,
        /// Why.
        source: io::Error,
    },
}

impl Vram {
    /// VRAM as `cfg` says (none if its size is 0).
    ///
    /// # Errors
    ///
    /// [`VramError`] if the memfd cannot be created, sized or mapped.
    pub fn new(cfg: VramConfig) -> Result<Vram, VramError> {
        let size = cfg.layout.size;
        if size == 0 {
            return Ok(Vram::none(cfg));
        }
        let memfd_err = |source| VramError::Memfd { size, source };
        // SAFETY: the name is a NUL-terminated string; the flags are valid;
        // the call has no other memory effects.
        let fd = unsafe { libc::memfd_create(c"vgpu-vram".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(memfd_err(io::Error::last_os_error()));
        }
        // SAFETY: `fd` was just returned by memfd_create and is owned by
        // nothing else.
        let file = unsafe { File::from_raw_fd(fd) };
        file.set_len(size).map_err(memfd_err)?;
        Self::map(file, 0, cfg)
    }

    /// A partition's VRAM: `cfg.layout.size` bytes of the device's memfd
    /// `file` from `offset` on, seen by its function from VRAM offset 0 (as
    /// xe's LMTT translates a VF's local memory). The function's MMU,
    /// engines and resets reach nothing outside the window.
    ///
    /// # Errors
    ///
    /// [`VramError`] if the window leaves the memfd or cannot be mapped.
    pub fn window(file: &File, offset: u64, cfg: VramConfig) -> Result<Vram, VramError> {
        let size = cfg.layout.size;
        if size == 0 {
            return Ok(Vram::none(cfg));
        }
        let memfd_err = |source| VramError::Memfd { size, source };
        let len = file.metadata().map_err(memfd_err)?.len();
        if offset.checked_add(size).is_none_or(|end| end > len) {
            return Err(VramError::Map(format!(
                "window {offset:#x}+{size:#x} leaves the device's {len:#x} bytes"
            )));
        }
        Self::map(file.try_clone().map_err(memfd_err)?, offset, cfg)
    }

    /// Maps the usable part of `cfg`'s VRAM from `base` in `file`.
    fn map(file: File, base: u64, cfg: VramConfig) -> Result<Vram, VramError> {
        let size = cfg.layout.size;
        let memfd_err = |source| VramError::Memfd { size, source };
        let usable = size.saturating_sub(FIRMWARE_RESERVED);
        let len = usize::try_from(usable).map_err(|e| VramError::Map(e.to_string()))?;
        let fo = FileOffset::new(file.try_clone().map_err(memfd_err)?, base);
        let mapping = MmapRegion::from_file(fo, len).map_err(|e| VramError::Map(e.to_string()))?;
        let region = GuestRegionMmap::new(mapping, GuestAddress(VRAM_BASE))
            .ok_or_else(|| VramError::Map("region overflows".into()))?;
        Ok(Vram {
            cfg,
            file: Some(file),
            file_base: base,
            region: Some(Arc::new(region)),
            resets: AtomicU64::new(0),
        })
    }

    /// The memfd (shared with the partitions cut from it), if any.
    pub fn file(&self) -> Option<&File> {
        self.file.as_ref()
    }

    /// Where this VRAM starts in its memfd (the offset QEMU maps a
    /// partition's aperture from).
    pub fn file_base(&self) -> u64 {
        self.file_base
    }

    /// No VRAM (an integrated GPU), reporting `cfg`'s policy.
    pub fn none(cfg: VramConfig) -> Vram {
        Vram {
            cfg: VramConfig {
                layout: VramConfig::none().layout,
                ..cfg
            },
            file: None,
            file_base: 0,
            region: None,
            resets: AtomicU64::new(0),
        }
    }

    /// The layout `IDENTIFY` and `MEMORY_LAYOUT` report.
    pub fn layout(&self) -> &Layout {
        &self.cfg.layout
    }

    /// The reset policy as `MEMORY_LAYOUT` reports it.
    pub fn reset_policy(&self) -> u32 {
        if self.region.is_none() {
            state::NONE
        } else {
            self.cfg.on_reset.state()
        }
    }

    /// `guest` with the usable VRAM added at [`VRAM_BASE`]: the memory the
    /// engines use.
    pub fn attach(&self, guest: &Mem) -> Mem {
        let Some(r) = &self.region else {
            return guest.clone();
        };
        match guest.clone().insert_region(r.clone()) {
            Ok(m) => m,
            Err(e) => {
                // Guest RAM above 2^52 cannot be described by a memory
                // table QEMU sends; keep the device usable without VRAM.
                log::error!("VRAM not attached: {e}");
                guest.clone()
            }
        }
    }

    /// Makes `path` a symbolic link to the memfd (`/proc/PID/fd/N`), so
    /// that QEMU can map the aperture with
    /// `memory-backend-file,mem-path=PATH,share=on,size=VISIBLE`. A stale
    /// link at `path` is replaced.
    ///
    /// # Errors
    ///
    /// [`VramError::Publish`] if the link cannot be made (or there is no
    /// VRAM).
    pub fn publish(&self, path: &std::path::Path) -> Result<(), VramError> {
        let err = |source| VramError::Publish {
            path: path.to_owned(),
            source,
        };
        let file = self
            .file
            .as_ref()
            .ok_or_else(|| err(io::Error::other("the device has no VRAM")))?;
        let target = format!("/proc/{}/fd/{}", std::process::id(), file.as_raw_fd());
        match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(err(e)),
        }
        std::os::unix::fs::symlink(target, path).map_err(err)
    }

    /// A device reset: applies the policy; returns what happened
    /// ([`state`]).
    pub fn on_device_reset(&self) -> u32 {
        self.apply(self.cfg.on_reset)
    }

    /// What a power-on does to VRAM when it keeps or loses it whatever the
    /// reset policy (the power states): returns what happened.
    pub fn apply(&self, policy: VramOnReset) -> u32 {
        let (Some(file), Some(region)) = (&self.file, &self.region) else {
            return state::NONE;
        };
        let n = self.resets.fetch_add(1, Ordering::Relaxed) + 1;
        match policy {
            VramOnReset::Keep => state::KEPT,
            VramOnReset::Zero => {
                punch(file, self.file_base, self.cfg.layout.size);
                state::ZEROED
            }
            VramOnReset::Garbage => {
                let touched = resident_pages(region);
                punch(file, self.file_base, self.cfg.layout.size);
                scribble(region, &touched, n);
                state::GARBAGE
            }
        }
    }
}

/// Frees the `size` bytes of the memfd from `base`: they read as zero
/// afterwards.
fn punch(file: &File, base: u64, size: u64) {
    let (Ok(off), Ok(len)) = (libc::off_t::try_from(base), libc::off_t::try_from(size)) else {
        return;
    };
    // SAFETY: a valid fd owned by `file`; the range is inside the file; the
    // call has no memory effects in this process beyond the file's pages.
    let rc = unsafe {
        libc::fallocate(
            file.as_raw_fd(),
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            off,
            len,
        )
    };
    if rc != 0 {
        log::warn!("VRAM reset: {}", io::Error::last_os_error());
    }
}

const PAGE: usize = 4096;

/// Indices of the region's pages that are resident (were touched).
fn resident_pages(region: &GuestRegionMmap) -> Vec<usize> {
    let len = region.len() as usize;
    let pages = len / PAGE;
    let mut vec = vec![0u8; pages];
    let Ok(ptr) = region.get_host_address(vm_memory::MemoryRegionAddress(0)) else {
        return Vec::new();
    };
    // SAFETY: `ptr..ptr + len` is this region's live mapping (page
    // aligned, kept alive by `region`); `vec` has one byte per page.
    let rc = unsafe { libc::mincore(ptr.cast(), len, vec.as_mut_ptr()) };
    if rc != 0 {
        return Vec::new();
    }
    vec.iter()
        .enumerate()
        .filter_map(|(i, &v)| (v & 1 != 0).then_some(i))
        .collect()
}

/// Writes garbage (seeded by the reset number `n`) over `pages`.
fn scribble(region: &GuestRegionMmap, pages: &[usize], n: u64) {
    use vm_memory::Bytes;
    let mut rng = vgpu_hwif::rng::SplitMix64::new(n ^ 0x5652_414d_u64);
    let mut buf = [0u8; PAGE];
    for &p in pages {
        for w in buf.chunks_exact_mut(8) {
            w.copy_from_slice(&rng.next_u64().to_le_bytes());
        }
        let at = vm_memory::MemoryRegionAddress((p * PAGE) as u64);
        if region.write_slice(&buf, at).is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vm_memory::Bytes;

    fn vram(policy: VramOnReset) -> (Vram, Mem) {
        let cfg = VramConfig::new(8 << 20, 4 << 20, policy).unwrap();
        let v = Vram::new(cfg).unwrap();
        let guest = Mem::from_ranges(&[(GuestAddress(0), 1 << 20)]).unwrap();
        let m = v.attach(&guest);
        (v, m)
    }

    #[test]
    fn vram_is_reached_at_vram_base_and_the_carve_out_is_not() {
        let (v, m) = vram(VramOnReset::Keep);
        assert!(in_ram(&m, 0, 4096));
        assert!(in_ram(&m, VRAM_BASE, 4096));
        assert!(in_ram(&m, VRAM_BASE + (6 << 20) - 4096, 4096));
        assert!(
            !in_ram(&m, VRAM_BASE + (6 << 20), 4096),
            "firmware carve-out"
        );
        assert!(!in_ram(&m, (1 << 20) - 8, 16), "across the end of RAM");
        m.write_obj(0xdead_beef_u32, GuestAddress(VRAM_BASE + 0x1000))
            .unwrap();
        assert_eq!(v.on_device_reset(), state::KEPT);
        assert_eq!(
            m.read_obj::<u32>(GuestAddress(VRAM_BASE + 0x1000)).unwrap(),
            0xdead_beef
        );
    }

    #[test]
    fn a_device_reset_zeroes_or_scribbles_as_configured() {
        let (v, m) = vram(VramOnReset::Zero);
        m.write_obj(0x1234_u32, GuestAddress(VRAM_BASE + 0x2000))
            .unwrap();
        assert_eq!(v.on_device_reset(), state::ZEROED);
        assert_eq!(
            m.read_obj::<u32>(GuestAddress(VRAM_BASE + 0x2000)).unwrap(),
            0
        );

        let (v, m) = vram(VramOnReset::Garbage);
        let page = [0x5au8; PAGE];
        m.write_slice(&page, GuestAddress(VRAM_BASE + 0x3000))
            .unwrap();
        assert_eq!(v.on_device_reset(), state::GARBAGE);
        let mut back = [0u8; PAGE];
        m.read_slice(&mut back, GuestAddress(VRAM_BASE + 0x3000))
            .unwrap();
        assert_ne!(back, page, "the touched page lost its contents");
        assert_ne!(back, [0u8; PAGE], "and holds garbage, not zeroes");
        // An untouched page stays unpopulated (reads zero): a reset does
        // not commit the whole VRAM.
        assert_eq!(
            m.read_obj::<u64>(GuestAddress(VRAM_BASE + (5 << 20)))
                .unwrap(),
            0
        );
    }

    #[test]
    fn publish_links_the_memfd_for_qemu() {
        let (v, m) = vram(VramOnReset::Keep);
        m.write_obj(0x77_u32, GuestAddress(VRAM_BASE + 8)).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("vram");
        v.publish(&link).unwrap();
        v.publish(&link).unwrap(); // a stale link is replaced
        let bytes = std::fs::read(&link).unwrap();
        assert_eq!(bytes.len(), 8 << 20);
        assert_eq!(bytes[8], 0x77);
        assert!(Vram::none(VramConfig::none()).publish(&link).is_err());
    }
}
