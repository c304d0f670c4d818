//! The device's sanitizer naming a moved object: with the planted bug
//! `move-no-invalidate` (debugfs `sanitizer_plant`) the KMD evicts a VRAM
//! object without clearing its mappings or invalidating its owner's TLBs;
//! the owner's next job reaches the old VRAM through its cached
//! translation, and the report names the object (the id debugfs `vram_mm`
//! lists), the move (its generation before and after) and where the object
//! is now. Needs `vgpu-device --sanitize` and a device with VRAM.

use std::path::Path;

use vgpu_umd::uapi::{self, param, GEM_CREATE_VRAM as VRAM};

use crate::debugfs::{debugfs, debugfs_path};
use crate::node::{copy, fence, open, Cmds, MS, PAGE};
use crate::report::T;
use crate::vram::vram_field;

pub fn test_vram_san_moved(t: &mut T, path: &Path) {
    let n = open(path);
    if n.get_param(param::VRAM_SIZE).unwrap_or(0) == 0 {
        t.check("vram-san-moved: the device has VRAM", false, || {
            "no VRAM".into()
        });
        return;
    }
    let start = n.get_param(param::VA_START).unwrap_or(0);
    let rw = uapi::VM_BIND_READ | uapi::VM_BIND_WRITE;
    let Some(ctx) = t.ok(
        "vram-san-moved: create a copy context",
        n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1 << uapi::ENGINE_COPY, 0),
    ) else {
        return;
    };
    let cmds = Cmds::new(&n, start + 0x100_0000, 16).expect("cmds");
    // The object that moves: small, so that the move's own copy leaves the
    // owner's translations in the copy engine's TLB.
    let size = 16 * PAGE;
    let (Some(a), Some(d)) = (
        t.ok("vram-san-moved: object in VRAM", n.gem_create(size, VRAM)),
        t.ok("vram-san-moved: destination", n.gem_create(size, 0)),
    ) else {
        return;
    };
    let (ava, dva) = (start + 0x200_0000, start + 0x300_0000);
    t.ok("vram-san-moved: bind it", n.vm_bind(a, ava, size, rw));
    t.ok(
        "vram-san-moved: bind the destination",
        n.vm_bind(d, dva, size, rw),
    );
    let run = |t: &mut T, slot: usize, what: &str| {
        let c = cmds.program(slot, &[copy(ava, dva, size)]);
        let r = n
            .submit(ctx, 0, &[c], &[])
            .and_then(|s| n.wait(&[fence(ctx, 0, s)], true, 10_000 * MS));
        t.ok(&format!("vram-san-moved: {what}"), r);
    };
    run(t, 0, "a copy out of it caches its translations");
    let before = n.san_report(ctx, 0).ok().flatten();
    t.check("vram-san-moved: no report yet", before.is_none(), || {
        format!("{before:?}")
    });
    // VRAM full but for less than another object of the free size plus
    // the first's: the new object evicts the oldest, the first.
    let free = vram_field("free").unwrap_or(0);
    t.ok(
        "vram-san-moved: plant move-no-invalidate",
        std::fs::write(debugfs_path("sanitizer_plant"), "move-no-invalidate"),
    );
    let big = t.ok(
        "vram-san-moved: a VRAM object one page larger than what is free evicts the first",
        n.gem_create(free + PAGE, VRAM),
    );
    let mm = debugfs("vram_mm");
    t.check(
        "vram-san-moved: the first object was evicted",
        vram_field("evictions").unwrap_or(0) >= 1,
        || mm.clone(),
    );
    run(t, 1, "the next copy out of it");
    // The reports reach the driver by event, after the job's fence may
    // have signalled: wait for both (at most 3 s).
    let mut got = Vec::new();
    let mut seq = 0;
    let t0 = std::time::Instant::now();
    loop {
        while let Ok(Some(r)) = n.san_report(ctx, seq) {
            seq = r.seq;
            got.push(r);
        }
        let both = [uapi::san::DMA_UNOWNED, uapi::san::TLB_STALE]
            .iter()
            .all(|c| got.iter().any(|r| r.check == *c));
        if both || t0.elapsed() > std::time::Duration::from_secs(3) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let flags = uapi::san::FLAG_OBJECT | uapi::san::FLAG_MOVED;
    let named = got
        .iter()
        .find(|r| r.check == uapi::san::DMA_UNOWNED && r.flags & flags == flags);
    t.check(
        "vram-san-moved: the stale translation is SAN-DMA-UNOWNED naming the moved object",
        named.is_some_and(|r| {
            r.va >= ava
                && r.va < ava + size
                && r.object != 0
                && (r.object_gen, r.object_gen_now) == (0, 1)
                && r.object_pa_now != 0
                && r.object_pa_now < vgpu_hwif::mmu::VRAM_BASE
                && r.released_ns <= r.time_ns
        }),
        || format!("{got:?}"),
    );
    t.check(
        "vram-san-moved: and SAN-TLB-STALE (the entry changed, no invalidation)",
        got.iter().any(|r| r.check == uapi::san::TLB_STALE),
        || format!("{got:?}"),
    );
    if let Some(r) = named {
        let line = format!("bo {} gen 1 evicted 1: system", r.object);
        t.check(
            "vram-san-moved: debugfs vram_mm lists the object by the report's id, in system memory",
            mm.lines().any(|l| l == line),
            || format!("want {line:?} in:\n{mm}"),
        );
        let text = debugfs("sanitizer");
        let said = format!("the page was bo {}'s (gen 0) until it moved", r.object);
        t.check(
            "vram-san-moved: debugfs sanitizer says so",
            text.contains(&said),
            || text.clone(),
        );
    }
    if let Some(b) = big {
        let _ = n.gem_close(b);
    }
    let _ = n.ctx_destroy(ctx);
}
