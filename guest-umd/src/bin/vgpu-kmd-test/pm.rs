//! Runtime power management: with `autosuspend_ms` set, a context that
//! pauses longer than the delay finds the device suspended and its next
//! `SUBMIT` resumes it — 50 times, every copy's bytes checked, the
//! context (and its VRAM object) surviving every suspension.

use std::path::Path;
use std::time::{Duration, Instant};

use vgpu_umd::uapi::{self, param, GEM_CREATE_VRAM as VRAM};

use crate::debugfs::debugfs;
use crate::node::{copy, fence, open, Cmds, Map, MS, PAGE};
use crate::report::T;

/// A counter of debugfs `power` (`suspends 3` ...).
fn power_field(name: &str) -> Option<u64> {
    let text = debugfs("power");
    let mut words = text.split_whitespace();
    while let Some(w) = words.next() {
        if w == name {
            return words.next().and_then(|v| v.parse().ok());
        }
    }
    None
}

pub fn test_pm_pause(t: &mut T, path: &Path) {
    let n = open(path);
    let start = n.get_param(param::VA_START).unwrap_or(0);
    let Some(delay) = debugfs("power")
        .split_whitespace()
        .skip_while(|w| *w != "autosuspend_ms")
        .nth(1)
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|&ms| ms > 0)
    else {
        t.check(
            "pm: autosuspend_ms is set (vgpu.ko autosuspend_ms=N)",
            false,
            || debugfs("power"),
        );
        return;
    };
    let rw = uapi::VM_BIND_READ | uapi::VM_BIND_WRITE;
    let Some(ctx) = t.ok(
        "pm: create a copy context",
        n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1 << uapi::ENGINE_COPY, 0),
    ) else {
        return;
    };
    let cmds = Cmds::new(&n, start + 0x100_0000, 16).expect("cmds");
    let size = 16 * PAGE;
    let vram = n.get_param(param::VRAM_SIZE).unwrap_or(0) > 0;
    let (Some(src), Some(mid), Some(dst)) = (
        t.ok("pm: source", n.gem_create(size, 0)),
        t.ok(
            "pm: middle (in VRAM when the device has it)",
            n.gem_create(size, if vram { VRAM } else { 0 }),
        ),
        t.ok("pm: destination", n.gem_create(size, 0)),
    ) else {
        return;
    };
    let (sva, mva, dva) = (start + 0x200_0000, start + 0x300_0000, start + 0x400_0000);
    for (h, va) in [(src, sva), (mid, mva), (dst, dva)] {
        t.ok("pm: bind", n.vm_bind(h, va, size, rw));
    }
    let (Some(s), Some(d)) = (
        t.ok("pm: map the source", Map::new(&n, src, size)),
        t.ok("pm: map the destination", Map::new(&n, dst, size)),
    ) else {
        return;
    };
    let words = (size / 8) as usize;
    let before = power_field("suspends").unwrap_or(0);
    let mut bad = Vec::new();
    let mut suspended_pauses = 0;
    let mut resume_max = Duration::ZERO;
    for round in 0..50u64 {
        for i in 0..words {
            s.write(i, round << 32 | i as u64);
        }
        // Through the middle object: it keeps round-1's bytes across the
        // suspension in between, which the first copy overwrites.
        let c = cmds.program(
            (round % 16) as usize,
            &[copy(sva, mva, size), copy(mva, dva, size)],
        );
        let t0 = Instant::now();
        let r = n
            .submit(ctx, 0, &[c], &[])
            .and_then(|q| n.wait(&[fence(ctx, 0, q)], true, 10_000 * MS));
        resume_max = resume_max.max(t0.elapsed());
        if let Err(e) = r {
            bad.push(format!("round {round}: {e}"));
            break;
        }
        if let Some(i) = (0..words).find(|&i| d.read(i) != round << 32 | i as u64) {
            bad.push(format!(
                "round {round}: word {i} is {:#x}, want {:#x}",
                d.read(i),
                round << 32 | i as u64
            ));
            break;
        }
        // A pause longer than the delay: the device suspends.
        let seen = power_field("suspends").unwrap_or(0);
        std::thread::sleep(Duration::from_millis(delay * 3 + 300));
        if power_field("suspends").unwrap_or(0) > seen {
            suspended_pauses += 1;
        }
    }
    t.check(
        "pm: 50 rounds of copies across pauses, every byte right",
        bad.is_empty(),
        || bad.join("; "),
    );
    let after = power_field("suspends").unwrap_or(0);
    let resumes = power_field("resumes").unwrap_or(0);
    t.check(
        "pm: the device suspended in every pause and resumed for the next round",
        suspended_pauses == 50 && after >= before + 50 && resumes >= 49,
        || format!("{suspended_pauses} pauses suspended, suspends {before} -> {after}, resumes {resumes}: {}", debugfs("power")),
    );
    println!(
        "info pm: slowest round (resume + copy + wait) {:?}; {}",
        resume_max,
        debugfs("power").trim()
    );
    let _ = n.ctx_destroy(ctx);
}
