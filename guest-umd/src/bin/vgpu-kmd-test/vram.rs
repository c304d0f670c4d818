//! Device memory: `GEM_CREATE` placements and their errors on a device
//! with VRAM (and without), the CPU mapping of a visible VRAM object
//! through the aperture, the refused mapping of an invisible one, PRIME
//! export refused, VRAM filled up (`ENOSPC`, then the fallback to system
//! memory) and given back, and the VRAM manager's accounting in debugfs
//! `vram_mm`.

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

/// `used` of debugfs `vram_mm`, in bytes (`None` without debugfs).
fn vram_used() -> Option<u64> {
    let text = debugfs("vram_mm");
    let v = field(text.lines().next()?, "used")?;
    u64::from_str_radix(v.trim_start_matches("0x"), 16).ok()
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
    test_full(t, &n, size);
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

/// VRAM-only objects until VRAM is full (`ENOSPC`); then `VRAM | SYSTEM`
/// still succeeds (system memory); one freed, VRAM-only succeeds again.
fn test_full(t: &mut T, n: &Kmd, size: u64) {
    const CHUNK: u64 = 32 * MIB;
    let mut held = Vec::new();
    let mut last = Ok(0);
    for _ in 0..=size / CHUNK {
        last = n.gem_create(CHUNK, VRAM);
        match &last {
            Ok(h) => held.push(*h),
            Err(_) => break,
        }
    }
    t.check(
        "vram: VRAM only until full",
        !held.is_empty() && held.len() as u64 <= size / CHUNK,
        || format!("{} objects of 32 MiB in {} MiB", held.len(), size >> 20),
    );
    t.err("vram: VRAM only, VRAM full", last, libc::ENOSPC);
    if let Some(h) = t.ok(
        "vram: VRAM full, VRAM | SYSTEM falls back",
        n.gem_create(CHUNK, VRAM | SYS),
    ) {
        let _ = n.gem_close(h);
    }
    if let Some(h) = held.pop() {
        let _ = n.gem_close(h);
        if let Some(h) = t.ok("vram: one freed, VRAM only again", n.gem_create(CHUNK, VRAM)) {
            held.push(h);
        }
    }
    for h in held {
        let _ = n.gem_close(h);
    }
    if let Some(u) = vram_used() {
        t.check("vram: all given back", u == 0, || format!("used {u:#x}"));
    }
}
