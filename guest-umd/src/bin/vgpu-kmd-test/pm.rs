//! Runtime power management: with `autosuspend_ms` set, a context that
//! pauses longer than the delay finds the device suspended and its next
//! `SUBMIT` resumes it — 50 times, every copy's bytes checked, the
//! context and its VRAM objects surviving every suspension (one of them
//! written once before the first pause and read back after every one).
//! With `vram_d3cold_threshold_mib` set as well the suspensions are to
//! D3cold (VRAM off, its objects saved and copied back), and the two cases
//! that must stay in D3hot are checked: a CPU-mapped VRAM object, and
//! VRAM objects over the threshold.

use std::path::Path;
use std::time::{Duration, Instant};

use vgpu_umd::uapi::{self, param, GEM_CREATE_VRAM as VRAM};

use crate::debugfs::debugfs;
use vgpu_umd::kmd::Kmd;

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
    // Written once, read back after every pause.
    let (Some(keep), Some(chk)) = (
        t.ok(
            "pm: kept object (in VRAM when the device has it)",
            n.gem_create(size, if vram { VRAM } else { 0 }),
        ),
        t.ok("pm: check object", n.gem_create(size, 0)),
    ) else {
        return;
    };
    let (sva, mva, dva) = (start + 0x200_0000, start + 0x300_0000, start + 0x400_0000);
    let (kva, cva) = (start + 0x500_0000, start + 0x600_0000);
    for (h, va) in [(src, sva), (mid, mva), (dst, dva), (keep, kva), (chk, cva)] {
        t.ok("pm: bind", n.vm_bind(h, va, size, rw));
    }
    let (Some(s), Some(d), Some(k)) = (
        t.ok("pm: map the source", Map::new(&n, src, size)),
        t.ok("pm: map the destination", Map::new(&n, dst, size)),
        t.ok("pm: map the check object", Map::new(&n, chk, size)),
    ) else {
        return;
    };
    let words = (size / 8) as usize;
    let kept = |i: usize| 0xC0FF_EE00u64 << 32 | i as u64;
    for i in 0..words {
        s.write(i, kept(i));
    }
    let c = cmds.program(0, &[copy(sva, kva, size)]);
    let filled = n
        .submit(ctx, 0, &[c], &[])
        .and_then(|q| n.wait(&[fence(ctx, 0, q)], true, 10_000 * MS));
    t.ok("pm: fill the kept object", filled);
    let threshold = power_field("d3cold_threshold_mib").unwrap_or(0);
    let cold_before = n.get_param(param::PM_D3COLD_SUSPENDS).unwrap_or(0);
    let mut states = [0u32; 3];
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
            &[
                copy(sva, mva, size),
                copy(mva, dva, size),
                copy(kva, cva, size),
            ],
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
        if let Some(i) = (0..words).find(|&i| k.read(i) != kept(i)) {
            bad.push(format!(
                "round {round}: the kept object's word {i} is {:#x}, want {:#x}",
                k.read(i),
                kept(i)
            ));
            break;
        }
        // A pause longer than the delay: the device suspends.
        let seen = power_field("suspends").unwrap_or(0);
        std::thread::sleep(Duration::from_millis(delay * 3 + 300));
        if power_field("suspends").unwrap_or(0) > seen {
            suspended_pauses += 1;
        }
        let state = n.get_param(param::PM_STATE).unwrap_or(0).min(2) as usize;
        states[state] += 1;
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
    let cold = n.get_param(param::PM_D3COLD_SUSPENDS).unwrap_or(0) - cold_before;
    if threshold == 0 {
        t.check(
            "pm: every pause in D3hot (VGPU_PARAM_PM_STATE 1), none in D3cold",
            states[1] == 50 && cold == 0,
            || format!("states after the pauses (active, D3hot, D3cold): {states:?}, {cold} D3cold suspensions"),
        );
    } else {
        t.check(
            "pm: every pause in D3cold (VGPU_PARAM_PM_STATE 2), VRAM saved and copied back",
            states[2] == 50 && cold >= 50 && power_field("last_restored_objects").unwrap_or(0) >= 2,
            || format!("states after the pauses (active, D3hot, D3cold): {states:?}, {cold} D3cold suspensions: {}", debugfs("power")),
        );
    }
    println!(
        "info pm: slowest round (resume + copy + wait) {:?}; {}",
        resume_max,
        debugfs("power").trim()
    );
    if threshold > 0 && vram {
        let ring = Ring {
            n: &n,
            ctx,
            cmds: &cmds,
        };
        hot_fallbacks(t, &ring, threshold, delay, (kva, cva, &k));
    }
    let _ = n.ctx_destroy(ctx);
}

/// A context and its command buffers.
struct Ring<'a> {
    n: &'a Kmd,
    ctx: u32,
    cmds: &'a Cmds,
}

impl Ring<'_> {
    /// Runs one copy and waits for it.
    fn copy(&self, slot: usize, src: u64, dst: u64, size: u64) -> Result<(), String> {
        let c = self.cmds.program(slot, &[copy(src, dst, size)]);
        self.n
            .submit(self.ctx, 0, &[c], &[])
            .and_then(|q| self.n.wait(&[fence(self.ctx, 0, q)], true, 10_000 * MS))
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}

/// Pauses past the delay; returns the power state then (debugfs `power`'s
/// `level`: 0 D0, 1 D3hot, 2 D3cold).
fn pause(delay: u64) -> u64 {
    std::thread::sleep(Duration::from_millis(delay * 3 + 300));
    let text = debugfs("power");
    match text.split_whitespace().skip_while(|w| *w != "level").nth(1) {
        Some("D3hot") => 1,
        Some("D3cold") => 2,
        _ => 0,
    }
}

/// With D3cold allowed: a CPU-mapped VRAM object, then VRAM objects over
/// the threshold, keep the device in D3hot (counted as fallbacks), and the
/// kept object (`kept`: its VA, a check object's VA and mapping) still
/// reads back.
fn hot_fallbacks(t: &mut T, ring: &Ring, threshold: u64, delay: u64, kept: (u64, u64, &Map)) {
    let n = ring.n;
    let size = 16 * PAGE;
    let (kva, cva, k) = kept;
    let check_kept = |t: &mut T, what: &str| {
        let r = ring.copy(1, kva, cva, size);
        let bad = (0..(size / 8) as usize).find(|&i| k.read(i) != 0xC0FF_EE00u64 << 32 | i as u64);
        t.check(what, r.is_ok() && bad.is_none(), || {
            format!("{r:?}, first bad word {bad:?}")
        });
    };
    let before = power_field("d3hot_fallbacks").unwrap_or(0);
    // A CPU-visible VRAM object, mapped and written by the CPU.
    let Some(vis) = t.ok(
        "pm: a CPU-visible VRAM object",
        n.gem_create(size, VRAM | uapi::GEM_CREATE_CPU_ACCESS),
    ) else {
        return;
    };
    let Some(m) = t.ok("pm: map it through the aperture", Map::new(n, vis, size)) else {
        return;
    };
    for i in 0..(size / 8) as usize {
        m.write(i, 0xA9E7_0000u64 << 32 | i as u64);
    }
    let level = pause(delay);
    let bad = (0..(size / 8) as usize).find(|&i| m.read(i) != 0xA9E7_0000u64 << 32 | i as u64);
    t.check(
        "pm: a CPU-mapped VRAM object keeps the device in D3hot, its bytes intact",
        level == 1 && bad.is_none(),
        || {
            format!(
                "level {level}, first bad word {bad:?}: {}",
                debugfs("power")
            )
        },
    );
    check_kept(t, "pm: the kept object after the D3hot pause");
    drop(m);
    let _ = n.gem_close(vis);
    // VRAM objects over the threshold.
    let big = (threshold + 1) << 20;
    let Some(h) = t.ok(
        "pm: a VRAM object over the threshold",
        n.gem_create(big, VRAM),
    ) else {
        return;
    };
    let level = pause(delay);
    t.check(
        "pm: VRAM in use over vram_d3cold_threshold_mib keeps the device in D3hot",
        level == 1,
        || format!("level {level}: {}", debugfs("power")),
    );
    check_kept(t, "pm: the kept object after the second D3hot pause");
    let _ = n.gem_close(h);
    let level = pause(delay);
    t.check(
        "pm: with both gone the device goes to D3cold again",
        level == 2,
        || format!("level {level}: {}", debugfs("power")),
    );
    check_kept(t, "pm: the kept object after the last D3cold pause");
    let after = power_field("d3hot_fallbacks").unwrap_or(0);
    t.check(
        "pm: the two D3hot suspensions counted as fallbacks",
        after >= before + 2,
        || format!("d3hot_fallbacks {before} -> {after}"),
    );
}
