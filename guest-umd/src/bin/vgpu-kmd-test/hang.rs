//! Hangs beyond the `submit` section: a hang in flight (engine reset while
//! a job runs), an innocent job cut off by another context's reset and
//! written again, the watchdog finding a hang nobody waits on, and the
//! wedged device at the bottom of the reset ladder.

use std::path::Path;

use vgpu_hwif::packet::Packet;
use vgpu_umd::kmd::Kmd;
use vgpu_umd::uapi::{self, param};

use crate::debugfs::{debugfs, field, summary_field, uevents_with};
use crate::node::{copy, fence, fill, open, plan, scratch, sem_wait_eq, Cmds, Scratch, MS, PAGE};
use crate::report::{errname, errno, T};

/// `count` aliases of one 2 MiB BO bound one after the other from
/// `VA_START + 4 GiB` (FILLs of up to `count` × 2 MiB with few pages);
/// returns that VA, or `None` if a bind failed.
pub(crate) fn aliases(n: &Kmd, count: u64) -> Option<u64> {
    let start = n.get_param(param::VA_START).unwrap_or(0);
    let rw = uapi::VM_BIND_READ | uapi::VM_BIND_WRITE;
    let hf = n.gem_create(2 << 20, 0).ok()?;
    let base = start + (1 << 32);
    for i in 0..count {
        n.vm_bind(hf, base + i * (2 << 20), 2 << 20, rw).ok()?;
    }
    Some(base)
}

/// `count` times `p` in a 64-byte slot of its own (padded with a NOP).
pub(crate) fn slotted(p: Packet, count: usize) -> Vec<Packet> {
    [p, Packet::Nop { words: 10 }].repeat(count)
}

/// A hang in flight: FILLs of 4 GiB each (one 2 MiB BO bound 2048 times)
/// keep the copy engine busy past the job timeout; the engine reset
/// recovers without a device reset, the hung context is guilty, and both
/// it and another context run again. Needs `pt_pool_kib=16384`.
pub fn test_hang_inflight(t: &mut T, path: &Path) {
    let n = open(path);
    let start = n.get_param(param::VA_START).unwrap_or(0);
    let base = aliases(&n, 2048);
    t.check("inflight: 4 GiB of aliases bound", base.is_some(), || {
        "bind failed".into()
    });
    let Some(base) = base else { return };
    let cva = start + 0x100_0000;
    let cmds = Cmds::new(&n, cva, 16).expect("mmap");
    // 64 FILLs of 4 GiB.
    let big = cmds.put(0, &slotted(fill(base, 1 << 32, 0x5a5a_5a5a), 64));
    let x = n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1, 0).unwrap_or(0);
    let y = n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1, 0).unwrap_or(0);
    let resets_before = debugfs("contexts");
    let t0 = std::time::Instant::now();
    let Some(sx) = t.ok(
        "inflight: submit 256 GiB of fills",
        n.submit(x, 0, &[big], &[]),
    ) else {
        return;
    };
    let r = n.wait(&[fence(x, 0, sx)], true, 60_000 * MS);
    println!(
        "info in-flight hang detected and recovered after {:?}",
        t0.elapsed()
    );
    t.check(
        "inflight: hung job's fence fails",
        errno(&r) == Some(libc::EIO),
        || format!("{r:?}"),
    );
    let q = n.ctx_query(x).unwrap_or_default();
    t.check(
        "inflight: context guilty",
        q.reset_status == uapi::CTX_RESET_GUILTY && q.hangs == 1,
        || format!("{q:?}"),
    );
    let after = debugfs("contexts");
    t.check(
        "inflight: engine reset was enough",
        after.contains("reset engine")
            && after.contains(" ok in ")
            && dev_resets(&after) == dev_resets(&resets_before),
        || after.clone(),
    );
    let resets = |c: &str| summary_field(c, "engine_resets").and_then(|v| v.parse::<u64>().ok());
    let (r0, r1) = (resets(&resets_before), resets(&after));
    t.check(
        "inflight: the driver counted one engine reset",
        r0.is_some() && r1.zip(r0).map(|(a, b)| a.wrapping_sub(b)) == Some(1),
        || format!("debugfs contexts engine_resets {r0:?} before the hang, {r1:?} after one engine reset"),
    );
    let dump = debugfs("hang_dump");
    t.check(
        "inflight: hang dump captured",
        dump.starts_with("hang ctx") && dump.contains("<- rptr"),
        || dump.clone(),
    );
    // A small FILL on the second page.
    let small = cmds.put(512, &[fill(base, 64, 1), Packet::Nop { words: 2 }]);
    let sy = n.submit(y, 0, &[small], &[]).unwrap_or(0);
    t.ok(
        "inflight: other context runs",
        n.wait(&[fence(y, 0, sy)], true, 5_000 * MS),
    );
    let sx2 = n.submit(x, 0, &[small], &[]).unwrap_or(0);
    t.ok(
        "inflight: guilty context runs again",
        n.wait(&[fence(x, 0, sx2)], true, 5_000 * MS),
    );
}

/// The device's resets on the first line of debugfs `contexts`.
fn dev_resets(contexts: &str) -> Option<String> {
    summary_field(contexts, "device_resets")
}

/// An innocent context's job in flight when the engine is reset for
/// another context's hung ring (blocked on a semaphore): the innocent job
/// is cut off, written again by the driver and rung, and completes; the
/// verdicts land on the right contexts. Needs `job_timeout_ms=1000`.
pub fn test_hang_innocent(t: &mut T, path: &Path) {
    let n = open(path);
    let start = n.get_param(param::VA_START).unwrap_or(0);
    // 256 MiB of aliases for the innocent fills.
    let Some(base) = aliases(&n, 128) else {
        t.check("inflight-innocent: 256 MiB of aliases bound", false, || {
            "bind failed".into()
        });
        return;
    };
    let cva = start + 0x100_0000;
    let cmds = Cmds::new(&n, cva, 16).expect("mmap");
    let wait_cmd = cmds.put(
        3 * 512,
        &[
            sem_wait_eq(cva + 4 * PAGE, 0xdead),
            Packet::Nop { words: 2 },
        ],
    );
    let w = n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1, 0).unwrap_or(0);
    let z = n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1, 0).unwrap_or(0);
    // Size the innocent jobs: a 256 MiB fill timed warm (the second of
    // two: the first pays for the walks and the device's first touches,
    // and timed alone it made later fills look slow, so the innocent work
    // could end before the hang was found), then jobs of about 150 ms
    // (well inside the job timeout) for about 6 s in all: the hang is
    // found about 1.2 s after the hung ring stopped, and the innocent
    // ring must still have a job in flight then, on a loaded host too.
    let one = cmds.put(2 * 512, &slotted(fill(base, 256 << 20, 0x77), 1));
    let s0 = n.submit(w, 0, &[one], &[]).unwrap_or(0);
    let _ = n.wait(&[fence(w, 0, s0)], true, 10_000 * MS);
    let t1 = std::time::Instant::now();
    let s1 = n.submit(w, 0, &[one], &[]).unwrap_or(0);
    let _ = n.wait(&[fence(w, 0, s1)], true, 10_000 * MS);
    let per_fill = t1.elapsed().max(std::time::Duration::from_millis(1));
    // Where 256 MiB takes longer than 150 ms, smaller fills: a single job
    // must stay far inside the job timeout even if the host slows down
    // several times meanwhile (the read pointer moves only when a job ends).
    let ms = per_fill.as_millis().max(1);
    let mib = if ms > 150 {
        (256 * 150 / ms).clamp(4, 256) as u64
    } else {
        256
    };
    let per_size = (ms * u128::from(mib) / 256).max(1);
    let fills = (150 / per_size).clamp(1, 64) as usize;
    let jobs = (6000 / (per_size * fills as u128)).clamp(4, 400) as usize;
    println!(
        "info inflight-innocent: 256 MiB fill {per_fill:?}, {jobs} jobs of {fills} fills of {mib} MiB"
    );
    let job = cmds.put(2 * 512, &slotted(fill(base, mib << 20, 0x77), fills));
    let mut seqnos = Vec::new();
    for _ in 0..jobs {
        match n.submit(w, 0, &[job], &[]) {
            Ok(s) => seqnos.push(s),
            Err(e) => {
                t.check("inflight-innocent: submit", false, || {
                    errname(e.errno).into()
                });
                return;
            }
        }
    }
    let resets_before = debugfs("contexts");
    let sz = n.submit(z, 0, &[wait_cmd], &[]).unwrap_or(0);
    let rz = n.wait(&[fence(z, 0, sz)], true, 30_000 * MS);
    t.check(
        "inflight-innocent: hung ring's fence fails",
        errno(&rz) == Some(libc::EIO),
        || format!("{rz:?}"),
    );
    let last = *seqnos.last().unwrap_or(&0);
    let rw = n.wait(&[fence(w, 0, last)], true, 60_000 * MS);
    let qw = n.ctx_query(w).unwrap_or_default();
    let qz = n.ctx_query(z).unwrap_or_default();
    t.check(
        "inflight-innocent: every innocent job completes",
        rw.is_ok(),
        || innocent_why(&rw, w, &qw, z, &qz),
    );
    t.check(
        "inflight-innocent: in-flight context reported innocent",
        qw.reset_status == uapi::CTX_RESET_INNOCENT && qw.state == 0 && qw.hangs == 0,
        || verdicts(w, &qw, z, &qz),
    );
    t.check(
        "inflight-innocent: hung context guilty",
        qz.reset_status == uapi::CTX_RESET_GUILTY && qz.hangs == 1,
        || verdicts(w, &qw, z, &qz),
    );
    let after = debugfs("contexts");
    t.check(
        "inflight-innocent: engine reset only",
        dev_resets(&after).is_some() && dev_resets(&after) == dev_resets(&resets_before),
        || after.clone(),
    );
}

/// `CTX_RESET_*` as a word.
fn status_name(s: u32) -> &'static str {
    match s {
        uapi::CTX_RESET_GUILTY => "guilty",
        uapi::CTX_RESET_INNOCENT => "innocent",
        _ => "neither guilty nor innocent",
    }
}

/// What `CTX_QUERY` says of the hung context `z` and the innocent one `w`.
pub(crate) fn verdicts(
    w: u32,
    qw: &uapi::DrmVgpuCtxQuery,
    z: u32,
    qz: &uapi::DrmVgpuCtxQuery,
) -> String {
    format!(
        "context {z} (the one that hung) reported {} after {} hang(s), context {w} (in flight, \
         cut off by the reset) reported {} after {} hang(s)",
        status_name(qz.reset_status),
        qz.hangs,
        status_name(qw.reset_status),
        qw.hangs
    )
}

/// Why the innocent context `w`'s jobs did not all complete after the
/// engine reset of hung context `z`: from the contexts' hang counts and,
/// when `w` was found hung itself, from the hang dump of its ring (the
/// device's read pointer against the driver's write pointer).
pub(crate) fn innocent_why(
    r: &Result<u32, vgpu_umd::kmd::KmdError>,
    w: u32,
    qw: &uapi::DrmVgpuCtxQuery,
    z: u32,
    qz: &uapi::DrmVgpuCtxQuery,
) -> String {
    let got = match r {
        Ok(_) => "completed".to_string(),
        Err(e) => errname(e.errno).to_string(),
    };
    let dump = debugfs("hang_dump");
    let mut lines = dump.lines();
    let head = lines.next().unwrap_or("");
    let ring = lines.next().unwrap_or("");
    let fences = lines.next().unwrap_or("");
    let hex = |l: &str, k: &str| {
        field(l, k).and_then(|v| u64::from_str_radix(v.trim_start_matches("0x"), 16).ok())
    };
    let w_hung = qw.hangs > 0
        && field(head, "handle").and_then(|h| h.trim_end_matches(')').parse().ok()) == Some(w);
    if w_hung {
        let (rptr, wptr) = (hex(ring, "rptr"), hex(ring, "wptr"));
        let pending = field(fences, "pending").unwrap_or_default();
        let state = field(ring, "state").unwrap_or_default();
        if rptr.is_some() && rptr == wptr {
            return format!(
                "the innocent jobs cut off by the engine reset were not written again: context \
                 {w}'s ring stayed empty (rptr = wptr = {:#x}) with {pending} jobs pending until \
                 it was found hung itself and failed ({got}) (hang dump: {ring})",
                rptr.unwrap_or(0)
            );
        }
        return format!(
            "innocent job rewritten but never ran: context {w}'s ring holds its jobs again up to \
             wptr {:#x}, but the device stayed at rptr {:#x} (state {state}, {pending} jobs \
             pending): its ring's doorbell was not rung after the rewrite, so it was found hung \
             itself and failed ({got}) (hang dump: {ring})",
            wptr.unwrap_or(0),
            rptr.unwrap_or(0)
        );
    }
    if qw.hangs == 0 && qz.hangs >= 2 {
        return format!(
            "the in-flight context's jobs failed ({got}) at the reset of the hung context, as if \
             it were the guilty one, and the hung context's job was written again and hung \
             again: the reply's ctx_id (the job in flight) was taken as the guilty context; \
             {}",
            verdicts(w, qw, z, qz)
        );
    }
    format!("WAIT: {got}; {}", verdicts(w, qw, z, qz))
}

/// A hang nobody waits on: the watchdog finds and recovers it without any
/// ioctl. Watches debugfs `contexts` (reading it runs no hang check).
pub fn test_watchdog(t: &mut T, path: &Path) {
    let n = open(path);
    let Scratch { cmds, dva, .. } = scratch(&n, 0x200_0000, 1);
    // The data page stays zero: the semaphore is never released.
    let hang = cmds.program(0, &[sem_wait_eq(dva, 0xdead)]);
    let c = n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1, 0).unwrap_or(0);
    let first = debugfs("contexts");
    let hangs = |s: &str| summary_field(s, "hangs").and_then(|v| v.parse::<u64>().ok());
    let wd = |s: &str| {
        s.lines()
            .find(|l| l.starts_with("watchdog "))
            .map(str::to_string)
            .unwrap_or_default()
    };
    t.check(
        "watchdog: running",
        field(&wd(&first), "period_ms").is_some(),
        || first.clone(),
    );
    let before = hangs(&first);
    let t0 = std::time::Instant::now();
    let Some(seq) = t.ok("watchdog: submit a hang", n.submit(c, 0, &[hang], &[])) else {
        return;
    };
    let mut after = before;
    while t0.elapsed() < std::time::Duration::from_secs(20) {
        std::thread::sleep(std::time::Duration::from_millis(10));
        after = hangs(&debugfs("contexts"));
        if after != before {
            break;
        }
    }
    let detected = t0.elapsed();
    println!("info watchdog: hang detected {detected:?} after submit, no ioctl in between");
    t.check(
        "watchdog: hang detected with nobody waiting",
        before.is_some() && after == before.map(|h| h + 1),
        || format!("{before:?} -> {after:?}"),
    );
    // The counter moves when the hang is declared; the job fails when the
    // reset ladder (capture, engine reset) has run, a moment later.
    t.err(
        "watchdog: the hung job failed by the watchdog's reset",
        n.wait(&[fence(c, 0, seq)], true, 5_000_000_000),
        libc::EIO,
    );
    let last = debugfs("contexts");
    t.check(
        "watchdog: checks counted",
        field(&wd(&last), "checks")
            .and_then(|v| v.parse::<u64>().ok())
            .is_some_and(|v| v > 0),
        || wd(&last),
    );
}

/// The bottom of the reset ladder (run with `--inject
/// hang:engine=copy,packet=COPY,count=1 --inject reset-fail:attempts=2`, and
/// a uevent helper writing each uevent's environment to /tmp/uevent.<pid>):
/// the engine reset and the device
/// reset both fail, the device is wedged, every waiter and submitter gets
/// EIO, and a WEDGED= uevent goes out on the DRM device nodes.
pub fn test_wedged(t: &mut T, path: &Path) {
    let n = open(path);
    let Scratch { cmds, dva, .. } = scratch(&n, 0x400_0000, 4);
    let c = n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1, 0).unwrap_or(0);
    let d = n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1, 0).unwrap_or(0);
    let hang = cmds.program(0, &[copy(dva, dva + 2 * PAGE, PAGE)]);
    let other = cmds.program(1, &[fill(dva + PAGE, 64, 5)]);
    let t0 = std::time::Instant::now();
    let sc = n.submit(c, 0, &[hang], &[]).unwrap_or(0);
    let sd = n.submit(d, 0, &[other], &[]).unwrap_or(0);
    let rc = n.wait(&[fence(c, 0, sc)], true, 60_000 * MS);
    println!("info wedged: hang to wedged {:?}", t0.elapsed());
    t.check(
        "wedged: hung job fails with EIO",
        errno(&rc) == Some(libc::EIO),
        || format!("{rc:?}"),
    );
    let first = debugfs("contexts");
    t.check(
        "wedged: debugfs says wedged",
        summary_field(&first, "wedged").as_deref() == Some("1"),
        || first.lines().next().unwrap_or("").to_string(),
    );
    let rd = n.wait(&[fence(d, 0, sd)], true, 0);
    t.check(
        "wedged: the other context's fence reports the loss",
        rd == Ok(0) || errno(&rd) == Some(libc::EIO),
        || format!("{rd:?}"),
    );
    t.err(
        "wedged: new submissions fail with EIO",
        n.submit(d, 0, &[other], &[]),
        libc::EIO,
    );
    t.err(
        "wedged: new contexts fail with EIO",
        n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1, 0),
        libc::EIO,
    );
    let events = uevents_with("WEDGED=rebind");
    let ev = events.join("\n");
    let wedged: Vec<&String> = events
        .iter()
        .filter(|e| e.contains("WEDGED=rebind"))
        .collect();
    t.check(
        "wedged: WEDGED=rebind uevent on the DRM nodes",
        !wedged.is_empty()
            && wedged
                .iter()
                .all(|e| e.contains("ACTION=change") && e.contains("SUBSYSTEM=drm")),
        || ev.clone(),
    );
}

/// Progress is not a hang, and no progress is (`job_timeout_ms=1000`): a
/// ring kept busy for about 3 s by jobs of about 150 ms, all queued at
/// once (the ring never empties), is never found hung: the hang check
/// measures the time since the ring's last completed job, not since its
/// first. A ring blocked on a semaphore is found hung and its job fails.
pub fn test_progress(t: &mut T, path: &Path) {
    let n = open(path);
    let Some(base) = aliases(&n, 64) else {
        t.check("progress: 128 MiB of aliases bound", false, || {
            "bind failed".into()
        });
        return;
    };
    let Scratch { cmds, dva, .. } = scratch(&n, 0x200_0000, 1);
    let w = n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1, 0).unwrap_or(0);
    let probe = cmds.put(0, &slotted(fill(base, 16 << 20, 1), 1));
    let s0 = n.submit(w, 0, &[probe], &[]).unwrap_or(0);
    let _ = n.wait(&[fence(w, 0, s0)], true, 10_000 * MS);
    let t1 = std::time::Instant::now();
    let s1 = n.submit(w, 0, &[probe], &[]).unwrap_or(0);
    let _ = n.wait(&[fence(w, 0, s1)], true, 10_000 * MS);
    let (mib, pieces) = plan(t1.elapsed(), 16, 128);
    let jobs = (pieces / 2).max(4);
    println!(
        "info progress: 16 MiB fill {:?}; {jobs} jobs of a {mib} MiB fill",
        t1.elapsed()
    );
    let job = cmds.put(512, &slotted(fill(base, mib << 20, 2), 1));
    let before = debugfs("contexts");
    let t2 = std::time::Instant::now();
    let mut last = 0;
    for _ in 0..jobs {
        last = n.submit(w, 0, &[job], &[]).unwrap_or(0);
    }
    let r = n.wait(&[fence(w, 0, last)], true, 60_000 * MS);
    let busy = t2.elapsed();
    let q = n.ctx_query(w).unwrap_or_default();
    let after = debugfs("contexts");
    let resets = |c: &str| summary_field(c, "engine_resets");
    t.check(
        "progress: a ring busy past the job timeout, its jobs completing, is not hung",
        r.is_ok() && q.hangs == 0 && resets(&after) == resets(&before),
        || {
            format!(
                "{jobs} jobs of about {} ms each, queued at once, ran for {busy:?} (WAIT: {}); \
                 the context was found hung {} time(s): every job that completes is progress, \
                 so the ring's last-progress time must move when its fence value moves (retire), \
                 else a ring busy for longer than the job timeout looks hung",
                busy.as_millis() / jobs as u128,
                match &r {
                    Ok(_) => "completed".to_string(),
                    Err(e) => errname(e.errno).to_string(),
                },
                q.hangs
            )
        },
    );
    let z = n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1, 0).unwrap_or(0);
    let hang = cmds.put(1024, &[sem_wait_eq(dva, 0xdead), Packet::Nop { words: 2 }]);
    let t3 = std::time::Instant::now();
    let sz = n.submit(z, 0, &[hang], &[]).unwrap_or(0);
    let rz = n.wait(&[fence(z, 0, sz)], true, 15_000 * MS);
    t.check(
        "progress: a ring that stops is found hung and its job fails",
        errno(&rz) == Some(libc::EIO),
        || {
            format!(
                "a ring blocked on a semaphore nobody writes: WAIT {} after {:?} (job timeout \
                 1 s): the ring's last-progress time must move only when its fence value \
                 grows, else the hang check never sees it stop",
                match &rz {
                    Ok(_) => "completed".to_string(),
                    Err(e) => errname(e.errno).to_string(),
                },
                t3.elapsed()
            )
        },
    );
}
