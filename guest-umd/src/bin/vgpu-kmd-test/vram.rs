//! Device memory: `GEM_CREATE` placements and their errors on a device
//! with VRAM (and without), the CPU mapping of a visible VRAM object
//! through the aperture, the refused mapping of an invisible one, PRIME
//! export refused, visible VRAM filled with pinned objects (`ENOSPC`, the
//! fallback to system memory), VRAM oversubscribed (older objects evicted),
//! and the VRAM manager's accounting in debugfs `vram_mm`.

use std::path::Path;

use vgpu_umd::kmd::Kmd;
use vgpu_umd::uapi::{
    self, param, GEM_CREATE_CPU_ACCESS as CPU, GEM_CREATE_LAZY as LAZY, GEM_CREATE_SYSTEM as SYS,
    GEM_CREATE_VRAM as VRAM,
};

use crate::debugfs::{debugfs, field};
use crate::node::{open, Map, PAGE};
use crate::report::T;

const MIB: u64 = 1 << 20;

/// Field `name` of debugfs `vram_mm`'s first line (`None` without
/// debugfs).
fn vram_field(name: &str) -> Option<u64> {
    let text = debugfs("vram_mm");
    let v = field(text.lines().next()?, name)?;
    match v.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => v.parse().ok(),
    }
}

/// `used` of debugfs `vram_mm`, in bytes.
fn vram_used() -> Option<u64> {
    vram_field("used")
}

pub fn test_vram(t: &mut T, path: &Path) {
    let n = open(path);
    let size = n.get_param(param::VRAM_SIZE).unwrap_or(0);
    let visible = n.get_param(param::VRAM_VISIBLE).unwrap_or(0);
    t.err("vram: LAZY | VRAM", n.gem_create(PAGE, LAZY | VRAM), libc::EINVAL);
    t.err("vram: CPU_ACCESS alone", n.gem_create(PAGE, CPU), libc::EINVAL);
    if let Some(h) = t.ok("vram: VRAM | SYSTEM", n.gem_create(PAGE, VRAM | SYS)) {
        let _ = n.gem_close(h);
    }
    if size == 0 {
        t.err(
            "vram: VRAM only, device without VRAM",
            n.gem_create(PAGE, VRAM),
            libc::ENXIO,
        );
        return;
    }
    if size <= uapi::GEM_MAX_SIZE {
        // The firmware carve-out makes the whole VRAM size too large.
        t.err(
            "vram: VRAM only, as large as VRAM",
            n.gem_create(size, VRAM),
            libc::E2BIG,
        );
    }
    let before = vram_used();
    let h = t.ok("vram: 16 MiB in VRAM", n.gem_create(16 * MIB, VRAM));
    if let (Some(b), Some(a)) = (before, vram_used()) {
        t.check("vram: vram_mm counts it", a == b + 16 * MIB, || {
            format!("used {b:#x} -> {a:#x}")
        });
    }
    if let Some(h) = h {
        t.err(
            "vram: mmap of invisible VRAM",
            n.gem_mmap_offset(h),
            libc::ENXIO,
        );
        t.err(
            "vram: PRIME export of VRAM",
            n.prime_handle_to_fd(h),
            libc::EOPNOTSUPP,
        );
        let _ = n.gem_close(h);
    }
    if let (Some(b), Some(a)) = (before, vram_used()) {
        t.check("vram: closed, its VRAM given back", a == b, || {
            format!("used {b:#x} -> {a:#x}")
        });
    }
    test_aperture(t, &n, visible);
    test_full(t, &n, size, visible);
}

/// A visible VRAM object mapped by the CPU (through the aperture): what
/// one mapping writes, another reads; too large for the visible part:
/// `E2BIG`, or system memory with `SYSTEM`.
fn test_aperture(t: &mut T, n: &Kmd, visible: u64) {
    if visible == 0 {
        t.err(
            "vram: CPU_ACCESS without an aperture",
            n.gem_create(PAGE, VRAM | CPU),
            libc::E2BIG,
        );
        return;
    }
    if visible < uapi::GEM_MAX_SIZE {
        let over = visible + PAGE;
        t.err(
            "vram: CPU_ACCESS larger than the visible part",
            n.gem_create(over, VRAM | CPU),
            libc::E2BIG,
        );
        if let Some(h) = t.ok(
            "vram: CPU_ACCESS larger than visible, VRAM | SYSTEM",
            n.gem_create(over, VRAM | SYS | CPU),
        ) {
            let _ = n.gem_close(h);
        }
    }
    let Some(h) = t.ok("vram: 1 MiB in visible VRAM", n.gem_create(MIB, VRAM | CPU)) else {
        return;
    };
    let (Some(a), Some(b)) = (
        t.ok("vram: mmap visible VRAM", Map::new(n, h, MIB)),
        t.ok("vram: mmap it again", Map::new(n, h, MIB)),
    ) else {
        return;
    };
    let words = (MIB / 8) as usize;
    for i in 0..words {
        a.write(i, (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    }
    let bad = (0..words)
        .filter(|&i| b.read(i) != (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15))
        .count();
    t.check(
        "vram: one aperture mapping sees the other's writes",
        bad == 0,
        || format!("{bad} of {words} words differ"),
    );
    drop((a, b));
    let _ = n.gem_close(h);
}

/// Visible VRAM filled with CPU-access objects (mapped through the
/// aperture: never evicted) until `ENOSPC`, and the fallback to system
/// memory; then VRAM-only objects of twice VRAM's size: every one is
/// created, the older ones evicted to system memory (debugfs counts the
/// evictions); all given back at the end.
fn test_full(t: &mut T, n: &Kmd, size: u64, visible: u64) {
    if visible > 0 {
        const CHUNK: u64 = 4 * MIB;
        let mut held = Vec::new();
        let mut last = Ok(0);
        for _ in 0..=visible / CHUNK {
            last = n.gem_create(CHUNK, VRAM | CPU);
            match &last {
                Ok(h) => held.push(*h),
                Err(_) => break,
            }
        }
        t.check(
            "vram: visible VRAM filled with CPU-access objects",
            held.len() as u64 == visible / CHUNK,
            || format!("{} objects of 4 MiB in {} MiB", held.len(), visible >> 20),
        );
        t.err(
            "vram: visible VRAM full, CPU-access objects not evicted",
            last,
            libc::ENOSPC,
        );
        if let Some(h) = t.ok(
            "vram: visible VRAM full, VRAM | SYSTEM | CPU_ACCESS falls back",
            n.gem_create(CHUNK, VRAM | SYS | CPU),
        ) {
            let _ = n.gem_close(h);
        }
        for h in held {
            let _ = n.gem_close(h);
        }
    }
    const CHUNK: u64 = 32 * MIB;
    let before = vram_field("evictions");
    let want = 2 * size / CHUNK;
    let mut held = Vec::new();
    for i in 0..want {
        match n.gem_create(CHUNK, VRAM) {
            Ok(h) => held.push(h),
            Err(e) => {
                t.check("vram: VRAM only, twice VRAM's size", false, || {
                    format!("object {i} of {want}: {e}")
                });
                break;
            }
        }
    }
    if held.len() as u64 == want {
        t.check("vram: VRAM only, twice VRAM's size", true, String::new);
    }
    if let (Some(b), Some(a)) = (before, vram_field("evictions")) {
        t.check("vram: older objects evicted", a > b, || {
            format!("evictions {b} -> {a}")
        });
    }
    for h in held {
        let _ = n.gem_close(h);
    }
    if let Some(u) = vram_used() {
        t.check("vram: all given back", u == 0, || format!("used {u:#x}"));
    }
}
