//! Render nodes driven by vgpu: finding them ([`devices`]), opening one
//! ([`Device`]), its identity (`IDENTIFY` through `GET_PARAM`), a `PING`
//! round trip and a `QUERY_STATS` sample; the formatting of identity fields.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::ioctl::ioctl;
use crate::stats::Stats;
use crate::uapi;

/// The DRM driver name the KMD registers.
pub const DRIVER_NAME: &str = "vgpu";

/// An open vgpu render node.
#[derive(Debug)]
pub struct Device {
    file: File,
    path: PathBuf,
}

/// The device's identity, as reported by `IDENTIFY` through the KMD.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// Hardware generation.
    pub generation: u32,
    /// Protocol version `(major << 16) | minor`.
    pub protocol_version: u32,
    /// Firmware version `(major << 16) | (minor << 8) | patch`.
    pub firmware_version: u32,
    /// Bit `i`: engine `i` present.
    pub engine_mask: u64,
    /// GPU VA width.
    pub va_bits: u32,
    /// Bitmask of page sizes in bytes.
    pub page_sizes: u64,
    /// Contexts.
    pub max_contexts: u32,
    /// Smallest ring in bytes.
    pub min_ring_size: u64,
    /// Largest ring in bytes.
    pub max_ring_size: u64,
    /// Compute units.
    pub compute_units: u32,
    /// PCI device id.
    pub device_id: u32,
    /// The KMD's compiled hwif layout fingerprint.
    pub kmd_fingerprint: u64,
    /// The device's hwif layout fingerprint.
    pub device_fingerprint: u64,
    /// Bytes of device memory (VRAM); 0: an integrated GPU.
    pub vram_size: u64,
    /// Bytes of VRAM the CPU reaches through the aperture (0: none).
    pub vram_visible: u64,
    /// 0: the whole device; `n`: virtual function `n` of a partitioned
    /// GPU (0 from a driver without the parameter).
    pub virtual_function: u32,
}

/// The result of a `PING` round trip.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pong {
    /// Sequence number of the device's event record.
    pub event_seq: u64,
    /// Time from command to event, measured by the KMD.
    pub latency: Duration,
}

/// Issues ioctl `req` (`call` in errors) on the node with `arg`.
///
/// # Safety
///
/// `req` takes exactly one `T` (the uAPI mirror pairs each number with its
/// struct, checked against the C header), and every pointer inside `arg`
/// the kernel writes through is valid for those writes.
unsafe fn device_ioctl<T>(file: &File, call: &'static str, req: u32, arg: &mut T) -> Result<()> {
    // SAFETY: this function's contract.
    unsafe { ioctl(file.as_raw_fd(), req, call, arg) }.map_err(|e| Error::Ioctl {
        call,
        source: e.os_error(),
    })
}

/// The DRM driver name behind an open node.
pub fn driver_name(file: &File) -> Result<String> {
    let mut name = [0u8; 64];
    let mut date = [0u8; 64];
    let mut desc = [0u8; 128];
    let mut v = uapi::DrmVersion {
        version_major: 0,
        version_minor: 0,
        version_patchlevel: 0,
        name_len: name.len(),
        name: name.as_mut_ptr(),
        date_len: date.len(),
        date: date.as_mut_ptr(),
        desc_len: desc.len(),
        desc: desc.as_mut_ptr(),
    };
    // SAFETY: `DRM_IOCTL_VERSION` takes a `drm_version`; the kernel writes
    // at most `name_len`, `date_len` and `desc_len` bytes through `name`,
    // `date` and `desc`, the arrays above, which outlive the call.
    unsafe { device_ioctl(file, "DRM_IOCTL_VERSION", uapi::DRM_IOCTL_VERSION, &mut v) }?;
    let n = v.name_len.min(name.len());
    Ok(String::from_utf8_lossy(&name[..n]).into_owned())
}

/// Every render node driven by vgpu, in name order.
pub fn devices() -> Vec<Device> {
    let mut nodes: Vec<PathBuf> = match std::fs::read_dir("/dev/dri") {
        Ok(d) => d.filter_map(|e| e.ok().map(|e| e.path())).collect(),
        Err(_) => return Vec::new(),
    };
    nodes.retain(|p| {
        p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("renderD"))
    });
    nodes.sort();
    nodes.iter().filter_map(|p| Device::open(p).ok()).collect()
}

impl Device {
    /// The open file (for the library's own KMD wrappers).
    pub fn into_file(self) -> File {
        self.file
    }

    /// Opens the first render node whose driver is vgpu.
    pub fn open_first() -> Result<Device> {
        let mut nodes: Vec<PathBuf> = std::fs::read_dir("/dev/dri")
            .map_err(|_| Error::NoDevice)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("renderD"))
            })
            .collect();
        nodes.sort();
        for p in nodes {
            if let Ok(d) = Device::open(&p) {
                return Ok(d);
            }
        }
        Err(Error::NoDevice)
    }

    /// Opens `path` and checks that it is a vgpu node.
    pub fn open(path: &Path) -> Result<Device> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|source| Error::Open {
                path: path.to_owned(),
                source,
            })?;
        if driver_name(&file)? != DRIVER_NAME {
            return Err(Error::NoDevice);
        }
        Ok(Device {
            file,
            path: path.to_owned(),
        })
    }

    /// The node's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads one `VGPU_PARAM_*`.
    pub fn get_param(&self, param: u32) -> Result<u64> {
        let mut p = uapi::DrmVgpuGetParam {
            param,
            pad: 0,
            value: 0,
        };
        // SAFETY: `GET_PARAM` takes a `drm_vgpu_get_param`, which carries no
        // pointer.
        unsafe {
            device_ioctl(
                &self.file,
                "DRM_IOCTL_VGPU_GET_PARAM",
                uapi::DRM_IOCTL_VGPU_GET_PARAM,
                &mut p,
            )
        }?;
        Ok(p.value)
    }

    /// Reads the device's identity.
    pub fn identity(&self) -> Result<Identity> {
        use uapi::param as p;
        let g = |param| self.get_param(param);
        Ok(Identity {
            generation: g(p::GENERATION)? as u32,
            protocol_version: g(p::PROTOCOL_VERSION)? as u32,
            firmware_version: g(p::FIRMWARE_VERSION)? as u32,
            engine_mask: g(p::ENGINE_MASK)?,
            va_bits: g(p::VA_BITS)? as u32,
            page_sizes: g(p::PAGE_SIZES)?,
            max_contexts: g(p::MAX_CONTEXTS)? as u32,
            min_ring_size: g(p::MIN_RING_SIZE)?,
            max_ring_size: g(p::MAX_RING_SIZE)?,
            compute_units: g(p::COMPUTE_UNITS)? as u32,
            device_id: g(p::DEVICE_ID)? as u32,
            kmd_fingerprint: g(p::HWIF_FINGERPRINT)?,
            device_fingerprint: g(p::DEVICE_FINGERPRINT)?,
            vram_size: g(p::VRAM_SIZE)?,
            vram_visible: g(p::VRAM_VISIBLE)?,
            virtual_function: g(p::VIRTUAL_FUNCTION).unwrap_or(0) as u32,
        })
    }

    /// One `QUERY_STATS` sample: device, engine and per-context counters
    /// of the whole GPU (every process), memory in use, resets, hangs,
    /// faults.
    pub fn stats(&self) -> Result<Stats> {
        let mut ctxs = vec![uapi::DrmVgpuCtxStats::default(); uapi::STATS_MAX_CONTEXTS as usize];
        let mut a = uapi::DrmVgpuQueryStats {
            num_contexts: uapi::STATS_MAX_CONTEXTS,
            contexts: ctxs.as_mut_ptr() as u64,
            ..Default::default()
        };
        // SAFETY: `QUERY_STATS` takes a `drm_vgpu_query_stats`; the kernel
        // writes at most `num_contexts` entries at `contexts`, which `ctxs`
        // holds for the call.
        unsafe {
            device_ioctl(
                &self.file,
                "DRM_IOCTL_VGPU_QUERY_STATS",
                uapi::DRM_IOCTL_VGPU_QUERY_STATS,
                &mut a,
            )
        }?;
        let filled = a.num_contexts.min(uapi::STATS_MAX_CONTEXTS) as usize;
        ctxs.truncate(filled);
        Ok(Stats::from_raw(&a, ctxs))
    }

    /// Sends `PING(cookie)` and waits (up to `timeout`, 0 = driver default)
    /// for the device's event.
    pub fn ping(&self, cookie: u64, timeout: Duration) -> Result<Pong> {
        let mut p = uapi::DrmVgpuPing {
            cookie,
            timeout_ns: u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX),
            ..Default::default()
        };
        // SAFETY: `PING` takes a `drm_vgpu_ping`, which carries no pointer.
        unsafe {
            device_ioctl(
                &self.file,
                "DRM_IOCTL_VGPU_PING",
                uapi::DRM_IOCTL_VGPU_PING,
                &mut p,
            )
        }?;
        Ok(Pong {
            event_seq: p.event_seq,
            latency: Duration::from_nanos(p.latency_ns),
        })
    }
}

/// Formats `(major << 16) | minor`.
pub fn fmt_protocol(v: u32) -> String {
    format!("{}.{}", v >> 16, v & 0xffff)
}

/// Formats `(major << 16) | (minor << 8) | patch`.
pub fn fmt_firmware(v: u32) -> String {
    format!("{}.{}.{}", v >> 16, (v >> 8) & 0xff, v & 0xff)
}

/// Formats a page-size bitmask as `4K 2M`.
pub fn fmt_page_sizes(mask: u64) -> String {
    (0..64)
        .filter(|b| mask & (1u64 << b) != 0)
        .map(|b| {
            let s = 1u64 << b;
            match s {
                s if s >= 1 << 30 => format!("{}G", s >> 30),
                s if s >= 1 << 20 => format!("{}M", s >> 20),
                s if s >= 1 << 10 => format!("{}K", s >> 10),
                s => format!("{s}"),
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(fmt_protocol(0x0001_0002), "1.2");
        assert_eq!(fmt_firmware(0x0002_0103), "2.1.3");
        assert_eq!(fmt_page_sizes((1 << 12) | (1 << 21)), "4K 2M");
        assert_eq!(fmt_page_sizes(0), "");
    }
}
