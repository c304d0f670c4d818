//! `GEM_CREATE`, `GEM_MMAP_OFFSET`, `GEM_CLOSE`: sizes, flags, CPU
//! mappings, use after close.

use std::path::Path;

use vgpu_umd::uapi;

use crate::node::{open, Map, PAGE};
use crate::report::T;

pub fn test_gem(t: &mut T, path: &Path) {
    let n = open(path);
    let h = t
        .ok("gem: create 4 KiB", n.gem_create(PAGE, 0))
        .unwrap_or(0);
    t.check("gem: handle non-zero", h != 0, || "handle 0".into());
    t.err("gem: size 0", n.gem_create(0, 0), libc::EINVAL);
    t.err(
        "gem: size above max",
        n.gem_create(uapi::GEM_MAX_SIZE + 1, 0),
        libc::EINVAL,
    );
    t.err(
        "gem: size u64::MAX",
        n.gem_create(u64::MAX, 0),
        libc::EINVAL,
    );
    t.err(
        "gem: unknown flag",
        n.gem_create(PAGE, 1 << 5),
        libc::EINVAL,
    );
    t.ok(
        "gem: lazy object",
        n.gem_create(PAGE, uapi::GEM_CREATE_LAZY),
    );
    // 5000 bytes round up to two pages: the second page maps.
    if let Some(h2) = t.ok("gem: create 5000 bytes", n.gem_create(5000, 0)) {
        t.ok(
            "gem: mmap rounded-up size",
            Map::new(&n, h2, 2 * PAGE).map(|_| ()),
        );
    }
    t.err(
        "gem: mmap_offset bad handle",
        n.gem_mmap_offset(0xdead),
        libc::ENOENT,
    );
    let mut pad = uapi::DrmVgpuGemMmapOffset {
        handle: h,
        pad: 1,
        offset: 0,
    };
    // SAFETY: GEM_MMAP_OFFSET carries no user pointers.
    let r = unsafe { n.ioctl_raw(&mut pad) };
    t.err("gem: mmap_offset pad", r, libc::EINVAL);

    // Data written through one mapping is seen through another.
    if let Some(h3) = t.ok("gem: create 64 KiB", n.gem_create(16 * PAGE, 0)) {
        if let Some(m) = t.ok("gem: mmap", Map::new(&n, h3, 16 * PAGE)) {
            let fresh = (0..16 * 512).all(|i| m.read(i) == 0);
            t.check("gem: new object reads zero", fresh, || {
                "non-zero data".into()
            });
            for i in 0..16 * 512 {
                m.write(i, 0x5eed_0000_0000 + i as u64);
            }
        }
        if let Some(m) = t.ok("gem: mmap again", Map::new(&n, h3, 16 * PAGE)) {
            let same = (0..16 * 512).all(|i| m.read(i) == 0x5eed_0000_0000 + i as u64);
            t.check("gem: data persists across mappings", same, || {
                "data differs".into()
            });
        }
        t.ok("gem: close handle", n.gem_close(h3));
        t.err(
            "gem: mmap_offset after close",
            n.gem_mmap_offset(h3),
            libc::ENOENT,
        );
        t.err("gem: close twice", n.gem_close(h3), libc::EINVAL);
    }
}
