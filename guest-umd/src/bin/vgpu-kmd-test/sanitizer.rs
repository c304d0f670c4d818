//! The device's driver sanitizer catching bugs planted in the KMD
//! (debugfs `sanitizer_plant`, see guest-kmd/gpu/sanitizer.rs): each
//! planted bug gets its report — in dmesg, in debugfs `sanitizer`, through
//! `SAN_REPORT` and `CTX_QUERY` with the file's own context id — and the
//! same work done right gets none. Needs `vgpu-device --sanitize`.

use std::path::Path;

use vgpu_hwif::sanitize::{ring_index, SAN_KIND_SHIFT};
use vgpu_umd::kmd::Kmd;
use vgpu_umd::uapi::{self, param};

use crate::debugfs::{debugfs, debugfs_path};
use crate::node::{copy, fence, open, Cmds, Map, MS, PAGE};
use crate::report::{errno, T};

/// The number on debugfs `sanitizer`'s first line (`reports N ...`).
fn reports() -> u64 {
    debugfs("sanitizer")
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(1).and_then(|n| n.parse().ok()))
        .unwrap_or(0)
}

/// Whether debugfs `sanitizer` says no planted bug is armed.
fn nothing_planted() -> bool {
    debugfs("sanitizer")
        .lines()
        .next()
        .is_some_and(|l| l.ends_with("planted none"))
}

fn plant(name: &str) -> std::io::Result<()> {
    std::fs::write(debugfs_path("sanitizer_plant"), name)
}

/// The reports about `ctx` numbered above `after` (SAN_REPORT).
fn reports_of(n: &Kmd, ctx: u32, after: u64) -> Vec<uapi::DrmVgpuSanRecord> {
    let mut out = Vec::new();
    let mut seq = after;
    while let Ok(Some(r)) = n.san_report(ctx, seq) {
        seq = r.seq;
        out.push(r);
    }
    out
}

fn dmesg() -> String {
    std::process::Command::new("dmesg")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

pub fn test_sanitizer(t: &mut T, path: &Path) {
    t.check(
        "sanitizer: debugfs sanitizer exists",
        debugfs("sanitizer").starts_with("reports "),
        || "no debugfs sanitizer (debugfs not mounted?)".into(),
    );
    let n = open(path);
    let start = n.get_param(param::VA_START).unwrap_or(0);
    let rw = uapi::VM_BIND_READ | uapi::VM_BIND_WRITE;
    let Some(ctx) = t.ok(
        "sanitizer: create copy context",
        n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1 << uapi::ENGINE_COPY, 0),
    ) else {
        return;
    };
    let cmds = Cmds::new(&n, start + 0x100_0000, 16).expect("cmds");
    let size = 4 * PAGE;
    let (hs, hd) = (
        n.gem_create(size, 0).unwrap_or(0),
        n.gem_create(size, 0).unwrap_or(0),
    );
    let (sva, dva) = (start + 0x200_0000, start + 0x300_0000);
    let _ = n.vm_bind(hs, sva, size, rw);
    let _ = n.vm_bind(hd, dva, size, rw);
    let src = Map::new(&n, hs, size).expect("mmap src");
    for i in 0..(size / 8) as usize {
        src.write(i, i as u64);
    }
    let run = |t: &mut T, slot: usize, what: &str| -> u64 {
        let c = cmds.program(slot, &[copy(sva, dva, size)]);
        match n.submit(ctx, 0, &[c], &[]) {
            Ok(s) => {
                t.ok(
                    &format!("sanitizer: {what} completes"),
                    n.wait(&[fence(ctx, 0, s)], true, 10_000 * MS),
                );
                s
            }
            Err(e) => {
                t.check(&format!("sanitizer: submit {what}"), false, || {
                    e.to_string()
                });
                0
            }
        }
    };

    // Done right: no report.
    let before = reports();
    for i in 0..4 {
        run(t, i, "clean job");
    }
    t.check(
        "sanitizer: the driver's own work reports nothing",
        reports() == before && reports_of(&n, ctx, 0).is_empty(),
        || debugfs("sanitizer"),
    );

    // Planted: the doorbell before the packets.
    t.ok("sanitizer: plant doorbell-early", plant("doorbell-early"));
    run(t, 4, "job rung early");
    let got = reports_of(&n, ctx, 0);
    let r = got.iter().find(|r| r.check == uapi::san::RING_UNPUBLISHED);
    t.check(
        "sanitizer: doorbell before the packet write is SAN-RING-UNPUBLISHED",
        r.is_some_and(|r| r.ctx_id == ctx && r.engine == uapi::ENGINE_COPY && r.depth == 0),
        || format!("{got:?}"),
    );
    let last = got.last().map_or(0, |r| r.seq);
    let q = n.ctx_query(ctx).unwrap_or_default();
    t.check(
        "sanitizer: CTX_QUERY counts the context's reports",
        q.san_reports as usize == got.len() && q.san_last_seq == last,
        || format!("{q:?}, {} reports", got.len()),
    );
    let text = debugfs("sanitizer");
    t.check(
        "sanitizer: debugfs keeps it with the file's context id",
        text.contains("SAN-RING-UNPUBLISHED #") && text.contains(&format!("context {ctx} (slot")),
        || text.clone(),
    );
    t.check(
        "sanitizer: dmesg prints it",
        dmesg().contains("sanitizer: SAN-RING-UNPUBLISHED"),
        || "no dmesg line".into(),
    );

    // Planted: a fence slot written backwards.
    t.ok("sanitizer: plant fence-backwards", plant("fence-backwards"));
    let s = run(t, 5, "job with a backwards fence");
    let got = reports_of(&n, ctx, last);
    let r = got.iter().find(|r| r.check == uapi::san::FENCE_REGRESS);
    t.check(
        "sanitizer: a fence written backwards is SAN-FENCE-REGRESS",
        r.is_some_and(|r| r.detail[0] == s - 2 && r.detail[1] == s - 1),
        || format!("seqno {s}: {got:?}"),
    );
    let last = got.last().map_or(last, |r| r.seq);

    // Planted: VM_UNBIND without the TLB invalidation, then the GPU reads
    // through its cached translation.
    t.ok(
        "sanitizer: plant skip-tlb-invalidate",
        plant("skip-tlb-invalidate"),
    );
    t.ok("sanitizer: unbind the source", n.vm_unbind(sva, size));
    run(t, 6, "copy through the stale translation");
    let got = reports_of(&n, ctx, last);
    let r = got.iter().find(|r| r.check == uapi::san::TLB_STALE);
    t.check(
        "sanitizer: a skipped TLB invalidation is SAN-TLB-STALE",
        r.is_some_and(|r| r.va >= sva && r.va < sva + size && r.access == uapi::ACCESS_READ),
        || format!("{got:?}"),
    );
    t.check(
        "sanitizer: nothing planted any more",
        nothing_planted(),
        || debugfs("sanitizer"),
    );
    // The stale translations go with the context.
    let _ = n.ctx_destroy(ctx);

    // Planted: a doorbell one word short, inside the last packet; on a
    // context of its own (the engine stops its ring).
    let Some(cut) = t.ok(
        "sanitizer: create a context for the short doorbell",
        n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1 << uapi::ENGINE_COPY, 0),
    ) else {
        return;
    };
    let src = start + 0x400_0000;
    let _ = n.vm_bind(hs, src, size, rw);
    t.ok(
        "sanitizer: plant doorbell-mid-packet",
        plant("doorbell-mid-packet"),
    );
    let c = cmds.program(7, &[copy(src, dva, size)]);
    let r = n
        .submit(cut, 0, &[c], &[])
        .and_then(|s| n.wait(&[fence(cut, 0, s)], true, 10_000 * MS));
    t.check(
        "sanitizer: the job rung short fails (the engine stops the ring)",
        errno(&r) == Some(libc::EIO),
        || format!("{r:?}"),
    );
    let got = reports_of(&n, cut, 0);
    let r = got.iter().find(|r| r.check == uapi::san::RING_INDEX);
    t.check(
        "sanitizer: a doorbell inside a packet is SAN-RING-INDEX (mid-packet)",
        r.is_some_and(|r| {
            // detail: the doorbell's write pointer, the packet's read
            // pointer and length in words: the packet ends past the pointer.
            r.ctx_id == cut
                && r.flags >> SAN_KIND_SHIFT == ring_index::MID_PACKET
                && r.history.contains(&(r.detail[0] as u32))
                && r.detail[1] + 4 * r.detail[2] > r.detail[0]
        }),
        || format!("{got:?}"),
    );
    t.check(
        "sanitizer: nothing planted after the short doorbell",
        nothing_planted(),
        || debugfs("sanitizer"),
    );
    let _ = n.ctx_destroy(cut);
}
