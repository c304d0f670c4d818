//! Where the VRAM manager puts an object (`vgpu-kmd-test vram-alloc`, lab 9
//! step 1): an object the CPU does not map goes top down, above the
//! CPU-visible part; a CPU-access one inside it, as large as all of it
//! without evicting anything; the manager's counters (debugfs `vram_mm`:
//! `used`, `visible_used`, `failed`) and the file's fdinfo
//! (`drm-memory-vram`) follow each object from its creation to its close.

use std::path::Path;

use vgpu_umd::uapi::{param, GEM_CREATE_CPU_ACCESS as CPU, GEM_CREATE_VRAM as VRAM};

use crate::debugfs::debugfs;
use crate::fdinfo::{fdinfo, number};
use crate::node::{open, PAGE};
use crate::report::T;
use crate::vram::vram_field;

const MIB: u64 = 1 << 20;

/// One object debugfs `vram_mm` lists in VRAM: whether it has visible
/// bytes, and its blocks (offset, length).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Placed {
    visible: bool,
    blocks: Vec<(u64, u64)>,
}

fn hex(s: &str) -> Option<u64> {
    u64::from_str_radix(s.strip_prefix("0x")?, 16).ok()
}

/// Every object in VRAM, in `vram_mm`'s order (`bo ID gen G evicted E:
/// size S visible|vram: OFF+LEN ...`).
fn placed() -> Vec<Placed> {
    debugfs("vram_mm")
        .lines()
        .filter(|l| l.starts_with("bo ") && l.contains(": size "))
        .filter_map(|l| {
            let (visible, rest) = match (l.split_once(" visible:"), l.split_once(" vram:")) {
                (Some((_, r)), _) => (true, r),
                (None, Some((_, r))) => (false, r),
                _ => return None,
            };
            let blocks = rest
                .split_whitespace()
                .filter_map(|b| {
                    let (o, n) = b.split_once('+')?;
                    Some((hex(o)?, hex(n)?))
                })
                .collect();
            Some(Placed { visible, blocks })
        })
        .collect()
}

/// The objects in `now` that were not in `before`.
fn new_ones(before: &[Placed], now: Vec<Placed>) -> Vec<Placed> {
    now.into_iter().filter(|p| !before.contains(p)).collect()
}

/// The file's VRAM in fdinfo, bytes.
fn fd_vram(n: &vgpu_umd::kmd::Kmd) -> Option<u64> {
    number(&fdinfo(n), "drm-memory-vram").map(|kib| kib * 1024)
}

pub fn test_vram_alloc(t: &mut T, path: &Path) {
    let n = open(path);
    let visible = n.get_param(param::VRAM_VISIBLE).unwrap_or(0);
    let size = n.get_param(param::VRAM_SIZE).unwrap_or(0);
    if visible == 0 || size < visible + 16 * MIB {
        t.check(
            "vram-alloc: VRAM with a visible part and 16 MiB more",
            false,
            || format!("VRAM {size:#x}, visible {visible:#x}"),
        );
        return;
    }
    let used = vram_field("used");
    t.check(
        "vram-alloc: VRAM empty at the start",
        used == Some(0),
        || format!("debugfs vram_mm used: {used:?}"),
    );
    // debugfs vram_mm's (used, visible_used) against what it should be.
    let counts = |t: &mut T, name: &str, used: u64, visible_used: u64| {
        let now = (vram_field("used"), vram_field("visible_used"));
        t.check(name, now == (Some(used), Some(visible_used)), || {
            format!("debugfs vram_mm (used, visible_used): {now:?}, want ({used:#x}, {visible_used:#x})")
        });
    };

    // Without CPU access: top down, none of it in the visible part.
    let allocs = vram_field("allocs");
    let a = t.ok("vram-alloc: 8 MiB in VRAM", n.gem_create(8 * MIB, VRAM));
    let allocs_now = vram_field("allocs");
    t.check(
        "vram-alloc: one allocation counted (allocs, the eviction order's stamp)",
        matches!((allocs, allocs_now), (Some(x), Some(y)) if y == x + 1),
        || format!("debugfs vram_mm allocs: {allocs:?} -> {allocs_now:?}"),
    );
    let first = placed();
    let low = first.iter().flat_map(|p| &p.blocks).map(|b| b.0).min();
    t.check(
        "vram-alloc: an object the CPU does not map is placed above the visible part",
        first.len() == 1 && low.is_some_and(|l| l >= visible) && !first[0].visible,
        || {
            format!(
                "its blocks {first:?}: below {visible:#x} is the CPU-visible part, kept for objects \
                 the CPU maps (allocate the others top down)"
            )
        },
    );
    let top = first
        .iter()
        .flat_map(|p| &p.blocks)
        .map(|b| b.0 + b.1)
        .max();
    counts(
        t,
        "vram-alloc: counted in used, not in visible_used",
        8 * MIB,
        0,
    );

    // CPU access: inside the visible part, all of it, nothing evicted.
    let evictions = vram_field("evictions");
    let b = t.ok(
        "vram-alloc: a CPU-access object as large as the visible part",
        n.gem_create(visible, VRAM | CPU),
    );
    let second = new_ones(&first, placed());
    let high = second
        .iter()
        .flat_map(|p| &p.blocks)
        .map(|b| b.0 + b.1)
        .max();
    t.check(
        "vram-alloc: the CPU-access object is inside the visible part",
        second.len() == 1 && second[0].visible && high.is_some_and(|h| h <= visible),
        || format!("its blocks {second:?}, the visible part ends at {visible:#x}"),
    );
    t.check(
        "vram-alloc: nothing was evicted for it",
        vram_field("evictions") == evictions,
        || {
            format!(
                "evictions {evictions:?} -> {:?}: the first object took visible VRAM",
                vram_field("evictions")
            )
        },
    );
    counts(
        t,
        "vram-alloc: used and visible_used count both objects",
        8 * MIB + visible,
        visible,
    );
    t.check(
        "vram-alloc: fdinfo drm-memory-vram is the file's VRAM",
        fd_vram(&n) == Some(8 * MIB + visible),
        || format!("drm-memory-vram: {:?} bytes", fd_vram(&n)),
    );

    // The visible part full of a CPU-access object (never evicted): one
    // more is refused, and counted.
    let failed = vram_field("failed");
    let refused = n.gem_create(PAGE, VRAM | CPU);
    t.err(
        "vram-alloc: one more CPU-access page while the visible part is full",
        refused,
        libc::ENOSPC,
    );
    let failed_now = vram_field("failed");
    // Two allocations refused: the first try, and the eviction loop's,
    // which then finds nothing it may evict.
    t.check(
        "vram-alloc: each refused allocation counted once in failed",
        matches!((failed, failed_now), (Some(x), Some(y)) if y == x + 2),
        || format!("debugfs vram_mm failed: {failed:?} -> {failed_now:?} (2 refused: the first try and the eviction loop's)"),
    );

    // Closed: their VRAM and its accounting given back.
    if let Some(b) = b {
        let _ = n.gem_close(b);
    }
    counts(
        t,
        "vram-alloc: the CPU-access object closed, visible_used back to 0",
        8 * MIB,
        0,
    );
    t.check(
        "vram-alloc: and the file's drm-memory-vram with it",
        fd_vram(&n) == Some(8 * MIB),
        || format!("drm-memory-vram: {:?} bytes", fd_vram(&n)),
    );
    // The same size again without CPU access: top down, where the first
    // object ends or below.
    let c = t.ok(
        "vram-alloc: 8 MiB more in VRAM",
        n.gem_create(8 * MIB, VRAM),
    );
    let third = new_ones(&first, placed());
    let low3 = third.iter().flat_map(|p| &p.blocks).map(|b| b.0).min();
    let high3 = third
        .iter()
        .flat_map(|p| &p.blocks)
        .map(|b| b.0 + b.1)
        .max();
    t.check(
        "vram-alloc: the next one goes below the first, still above the visible part",
        third.len() == 1
            && low3.is_some_and(|l| l >= visible)
            && matches!((high3, top), (Some(h), Some(tp)) if h <= tp - 8 * MIB),
        || format!("its blocks {third:?}; the first object's end {top:?}"),
    );
    for h in [a, c].into_iter().flatten() {
        let _ = n.gem_close(h);
    }
    t.check(
        "vram-alloc: all closed, used back to 0",
        vram_field("used") == Some(0),
        || format!("debugfs vram_mm used: {:?}", vram_field("used")),
    );
}
