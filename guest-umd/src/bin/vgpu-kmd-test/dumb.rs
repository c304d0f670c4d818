//! Dumb buffers (`DRM_IOCTL_MODE_CREATE_DUMB` on the primary node): vgpu
//! has no display, but a dumb buffer is memory all the same, so it is an
//! ordinary BO charged to the GEM limits (docs/uapi.md, "Dumb buffers").
//! Run by the limits section, with the driver loaded with
//! `gem_limit_mib=64 file_gem_limit_mib=32` and no other object alive.

use std::fs::OpenOptions;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use vgpu_umd::kmd::{Kmd, KmdError};

use crate::fdinfo::fdinfo;
use crate::node::open;
use crate::report::T;

const MIB: u64 = 1 << 20;

/// `struct drm_mode_create_dumb`.
#[repr(C)]
#[derive(Default)]
struct CreateDumb {
    height: u32,
    width: u32,
    bpp: u32,
    flags: u32,
    handle: u32,
    pitch: u32,
    size: u64,
}

/// `struct drm_mode_map_dumb`.
#[repr(C)]
#[derive(Default)]
struct MapDumb {
    handle: u32,
    pad: u32,
    offset: u64,
}

/// `DRM_IOWR(0xB2, struct drm_mode_create_dumb)`.
const IOCTL_CREATE_DUMB: u64 = 0xc020_64b2;
/// `DRM_IOWR(0xB3, struct drm_mode_map_dumb)`.
const IOCTL_MAP_DUMB: u64 = 0xc010_64b3;
/// `DRM_IOWR(0xB4, struct drm_mode_destroy_dumb)`.
const IOCTL_DESTROY_DUMB: u64 = 0xc004_64b4;

fn ioctl<A>(f: &Kmd, req: u64, arg: &mut A) -> Result<(), KmdError> {
    // SAFETY: `arg` is the `repr(C)` argument struct of `req`, which the
    // kernel reads and writes only within its size (encoded in `req`).
    let r = unsafe { libc::ioctl(f.as_raw_fd(), req as _, arg as *mut A) };
    if r == 0 {
        Ok(())
    } else {
        Err(KmdError {
            call: "MODE_*_DUMB",
            errno: std::io::Error::last_os_error().raw_os_error().unwrap_or(0),
        })
    }
}

/// A dumb buffer of `width` x `height` pixels of `bpp` bits.
fn create(f: &Kmd, width: u32, height: u32, bpp: u32) -> Result<CreateDumb, KmdError> {
    let mut a = CreateDumb {
        height,
        width,
        bpp,
        ..Default::default()
    };
    ioctl(f, IOCTL_CREATE_DUMB, &mut a).map(|()| a)
}

fn destroy(f: &Kmd, handle: u32) -> Result<(), KmdError> {
    let mut h = handle;
    ioctl(f, IOCTL_DESTROY_DUMB, &mut h)
}

/// The primary node (`/dev/dri/cardN`) of the device whose render node is
/// `render`.
fn card_of(render: &Path) -> Option<PathBuf> {
    let name = render.file_name()?.to_str()?;
    let dir = std::fs::read_dir(format!("/sys/class/drm/{name}/device/drm")).ok()?;
    dir.filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|n| n.starts_with("card"))
        .map(|n| PathBuf::from("/dev/dri").join(n))
}

fn open_card(path: &Path) -> Option<Kmd> {
    let f = OpenOptions::new().read(true).write(true).open(path).ok()?;
    Some(Kmd::new(f))
}

fn system_kib(f: &Kmd) -> u64 {
    fdinfo(f)
        .get("drm-total-system")
        .and_then(|v| v.trim_end_matches(" KiB").parse().ok())
        .unwrap_or(u64::MAX)
}

pub fn test_dumb_limits(t: &mut T, render: &Path) {
    let Some(card) = card_of(render) else {
        t.check("dumb: the device's primary node", false, || {
            format!(
                "no card* under /sys/class/drm/{}/device/drm",
                render.display()
            )
        });
        return;
    };
    let (Some(c), Some(d)) = (open_card(&card), open_card(&card)) else {
        t.check("dumb: open the primary node twice", false, || {
            format!("cannot open {}", card.display())
        });
        return;
    };
    let e = open(render);
    let before = e.query_stats(&mut []).unwrap_or_default();
    let big = t.ok(
        "dumb: file C, a 4096x2048 32-bpp dumb buffer (32 MiB, its limit)",
        create(&c, 4096, 2048, 32),
    );
    if let Some(b) = &big {
        t.check(
            "dumb: its pitch and size",
            b.pitch == 16384 && b.size == 32 * MIB,
            || format!("pitch {} size {}", b.pitch, b.size),
        );
        t.check(
            "dumb: file C's fdinfo counts it (drm-total-system 32768 KiB)",
            system_kib(&c) == 32 * 1024,
            || format!("drm-total-system {} KiB", system_kib(&c)),
        );
        // Mapped through MAP_DUMB and written by the CPU.
        let mut m = MapDumb {
            handle: b.handle,
            ..Default::default()
        };
        if t.ok("dumb: MAP_DUMB", ioctl(&c, IOCTL_MAP_DUMB, &mut m))
            .is_some()
        {
            // SAFETY: A fresh shared mapping of the object's fake offset on
            // its own file; nothing else maps that range of this process.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    b.size as usize,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    c.as_raw_fd(),
                    m.offset as libc::off_t,
                )
            };
            if p == libc::MAP_FAILED {
                t.check("dumb: mmap of the dumb buffer", false, || {
                    std::io::Error::last_os_error().to_string()
                });
            } else {
                let words = (b.size / 4) as usize;
                // SAFETY: `p` maps `b.size` bytes, readable and writable,
                // until the munmap below.
                let s = unsafe { std::slice::from_raw_parts_mut(p.cast::<u32>(), words) };
                s[0] = 0xd00d_f00d;
                s[words - 1] = 0x5ca1_ab1e;
                t.check(
                    "dumb: written and read back through the CPU mapping",
                    s[0] == 0xd00d_f00d && s[words - 1] == 0x5ca1_ab1e && s[words / 2] == 0,
                    || format!("{:#x} {:#x} {:#x}", s[0], s[words / 2], s[words - 1]),
                );
                // SAFETY: `p` is the mapping made above, not used after.
                unsafe { libc::munmap(p, b.size as usize) };
            }
        }
    }
    t.err(
        "dumb: file C past its limit: ENOSPC",
        create(&c, 64, 64, 32),
        libc::ENOSPC,
    );
    let other = t.ok(
        "dumb: file D, 32 MiB more (the device's limit)",
        create(&d, 2048, 4096, 32),
    );
    t.err(
        "dumb: past the device's limit, a dumb buffer: ENOMEM",
        create(&d, 64, 64, 32),
        libc::ENOMEM,
    );
    t.err(
        "dumb: past the device's limit, a render-node BO: ENOMEM",
        e.gem_create(4096, 0),
        libc::ENOMEM,
    );
    let after = e.query_stats(&mut []).unwrap_or_default();
    t.check(
        "dumb: the refusals are counted, the dumb buffers in the device's memory",
        after.mem_refused == before.mem_refused + 3
            && after.mem_bytes >= before.mem_bytes + 64 * MIB,
        || {
            format!(
                "refused {} -> {}, mem_bytes {} -> {}",
                before.mem_refused, after.mem_refused, before.mem_bytes, after.mem_bytes
            )
        },
    );
    if let Some(b) = other {
        t.ok(
            "dumb: DESTROY_DUMB frees file D's buffer",
            destroy(&d, b.handle),
        );
        t.ok(
            "dumb: the room is there again for a render-node BO",
            e.gem_create(16 * MIB, 0),
        );
    }
    // Over VGPU_GEM_MAX_SIZE (1 GiB) but within DRM's own 4 GiB check: the
    // driver refuses it as GEM_CREATE would.
    t.err(
        "dumb: a 16384x16400 32-bpp buffer (over VGPU_GEM_MAX_SIZE): EINVAL",
        create(&c, 16384, 16400, 32),
        libc::EINVAL,
    );
}
