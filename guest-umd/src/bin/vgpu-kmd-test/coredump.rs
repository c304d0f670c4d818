//! Devcoredumps: an injected hang (run with `--inject
//! hang:engine=copy,packet=COPY`), an aborted page fault and a malformed
//! packet each publish one in `/sys/class/devcoredump/devcdN/data`. Each
//! dump is printed between `=== devcoredump KIND begin ===` and `=== …
//! end ===` lines, so the host can copy it out, decode and replay it, and
//! then cleared (written to), as a developer's tool would.
//!
//! `coredump-off` (with `coredump=0`): the same hang publishes nothing; it
//! gives the hang-to-recovered time without a capture, to compare.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use vgpu_hwif::packet::encode_header;
use vgpu_umd::uapi;

use crate::debugfs::debugfs;
use crate::node::{copy, fence, fill, open, scratch, Scratch, MS};
use crate::report::T;

const DEVCD: &str = "/sys/class/devcoredump";

/// The `data` files of the devcoredumps present (in this guest only
/// vgpu.ko publishes them).
fn dumps() -> Vec<PathBuf> {
    let Ok(dir) = std::fs::read_dir(DEVCD) else {
        return vec![];
    };
    // `devcdN` directories; the class also holds the `disabled` switch.
    let mut v: Vec<PathBuf> = dir
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("devcd"))
        .map(|e| e.path().join("data"))
        .collect();
    v.sort();
    v
}

/// Waits up to `limit` for a devcoredump; returns its data file and how
/// long it took to appear.
fn wait_dump(limit: Duration) -> Option<(PathBuf, Duration)> {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        if let Some(p) = dumps().into_iter().next() {
            return Some((p, t0.elapsed()));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    None
}

/// The first line of the `dump` section.
fn dump_line(text: &str) -> &str {
    text.lines().find(|l| l.starts_with("dump ")).unwrap_or("")
}

/// Reads, prints and clears the devcoredump a failure of `kind` left;
/// checks its reason and that the device's capture is in it.
fn take_dump(t: &mut T, kind: &str, reason: &str, ctx: u32) {
    let Some((path, after)) = wait_dump(Duration::from_secs(10)) else {
        t.check(&format!("{kind}: devcoredump published"), false, || {
            format!("nothing in {DEVCD} after 10 s; {}", debugfs("coredumps"))
        });
        return;
    };
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    println!(
        "info coredump {kind}: published {after:?} after the failure was seen, {} bytes",
        text.len()
    );
    println!("=== devcoredump {kind} begin ===");
    print!("{text}");
    println!("=== devcoredump {kind} end ===");
    let line = dump_line(&text);
    t.check(
        &format!("{kind}: devcoredump of the failing context"),
        text.starts_with(vgpu_hwif::coredump::BANNER)
            && line.contains(&format!(" reason={reason} "))
            && line.contains(&format!(" ctx={ctx} "))
            && text.trim_end().ends_with("[end]"),
        || format!("{path:?}: {line}"),
    );
    t.check(
        &format!("{kind}: device capture included"),
        text.lines()
            .any(|l| l.starts_with("device ") && l.contains(" status=ok"))
            && text.contains("\n[device-capture]\n"),
        || {
            text.lines()
                .find(|l| l.starts_with("device "))
                .unwrap_or("no device record")
                .to_string()
        },
    );
    // Cleared by a write, as the devcoredump core documents.
    let _ = std::fs::write(&path, "1");
    let t0 = Instant::now();
    while path.exists() && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(10));
    }
    t.check(
        &format!("{kind}: cleared by a write"),
        !path.exists(),
        || format!("{path:?} still there"),
    );
}

/// A COPY the injector hangs: the fence fails after the hang check's
/// reset. Returns the hang-to-recovered time (submit to the failed wait).
fn injected_hang(
    t: &mut T,
    n: &vgpu_umd::kmd::Kmd,
    s: &Scratch,
    kind: &str,
) -> Option<(u32, Duration)> {
    let c = n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1, 0).unwrap_or(0);
    let cmd = s.cmds.program(0, &[copy(s.dva, s.dva + 4096, 4096)]);
    let t0 = Instant::now();
    let seq = t.ok(
        &format!("{kind}: submit a COPY that hangs"),
        n.submit(c, 0, &[cmd], &[]),
    )?;
    t.err(
        &format!("{kind}: the hung job's fence fails"),
        n.wait(&[fence(c, 0, seq)], true, 20_000 * MS),
        libc::EIO,
    );
    let took = t0.elapsed();
    println!(
        "info coredump {kind}: hang recovered {} ms after submit",
        took.as_millis()
    );
    Some((c, took))
}

/// Needs `--inject hang:engine=copy,packet=COPY` and `coredump=1`.
pub fn test_coredump(t: &mut T, path: &Path) {
    t.check("coredump: none before", dumps().is_empty(), || {
        format!("{:?}", dumps())
    });
    let n = open(path);
    let s = scratch(&n, 0x600_0000, 4);

    // An injected hang: captured before the reset, published after it.
    if let Some((c, _)) = injected_hang(t, &n, &s, "hang") {
        take_dump(t, "hang", "hang", c);
    }

    // An aborted page fault: a FILL to a VA nothing is bound at.
    let c = n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1, 0).unwrap_or(0);
    let cmd = s.cmds.program(1, &[fill(s.start + 0x7000_0000, 64, 7)]);
    if let Some(seq) = t.ok(
        "fault: submit a FILL to an unmapped VA",
        n.submit(c, 0, &[cmd], &[]),
    ) {
        t.err(
            "fault: the job's fence fails",
            n.wait(&[fence(c, 0, seq)], true, 5_000 * MS),
            libc::EIO,
        );
        take_dump(t, "fault", "fault", c);
    }

    // A malformed packet: opcode 0x5a does not exist.
    let c = n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1, 0).unwrap_or(0);
    let ok = s.cmds.program(2, &[fill(s.dva, 64, 1)]);
    let bad_at = 2 * 64 + (ok.size / 4) as usize;
    let g = s.cmds.generation;
    s.cmds
        .map
        .write_words(bad_at, &[encode_header(g, 0x5a, 3), 0, 0, 0]);
    let cmd = uapi::DrmVgpuCmd {
        va: ok.va,
        size: ok.size + 16,
    };
    if let Some(seq) = t.ok(
        "bad-packet: submit an unknown opcode",
        n.submit(c, 0, &[cmd], &[]),
    ) {
        t.err(
            "bad-packet: the job's fence fails",
            n.wait(&[fence(c, 0, seq)], true, 5_000 * MS),
            libc::EIO,
        );
        take_dump(t, "bad-packet", "engine-error", c);
    }

    let hist = debugfs("coredumps");
    println!("{}", hist.trim_end());
    t.check(
        "coredump: debugfs history lists the three",
        hist.lines()
            .filter(|l| l.starts_with("dump ") && l.ends_with(" published"))
            .count()
            == 3,
        || hist.clone(),
    );
}

/// Needs `--inject hang:engine=copy,packet=COPY` and `coredump=0`.
pub fn test_coredump_off(t: &mut T, path: &Path) {
    let n = open(path);
    let s = scratch(&n, 0x680_0000, 4);
    let _ = injected_hang(t, &n, &s, "hang-no-capture");
    std::thread::sleep(Duration::from_millis(500));
    t.check("coredump=0: nothing published", dumps().is_empty(), || {
        format!("{:?}", dumps())
    });
}
