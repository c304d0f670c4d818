//! Device loss: the device process dies while a job runs (the e2e case arms
//! the injector's `crash` class on the first FILL; a uevent helper records
//! uevents in /tmp/uevent.<pid>). The driver must notice within a bounded
//! time, fail the job, declare the device lost, fail every later call at
//! once instead of each waiting for a command timeout, send the WEDGED
//! uevent, and say "lost" in QUERY_STATS and CTX_QUERY; the user-mode
//! library must report the device lost.

use std::path::Path;
use std::time::{Duration, Instant};

use vgpu_umd::uapi;

use crate::debugfs::uevents_with;
use crate::node::{fence, fill, open, scratch, Scratch, MS};
use crate::report::{errno, T};

/// A call on a lost device must fail at least this fast (no command
/// timeout in between).
const AT_ONCE: Duration = Duration::from_millis(100);

pub fn test_device_lost(t: &mut T, path: &Path) {
    let n = open(path);
    let Scratch { cmds, dva, .. } = scratch(&n, 0x400_0000, 4);
    let c = n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1, 0).unwrap_or(0);
    let job = cmds.program(0, &[fill(dva, 64, 7)]);
    let t0 = Instant::now();
    let Some(s) = t.ok(
        "lost: submit the job the device dies on",
        n.submit(c, 0, &[job], &[]),
    ) else {
        return;
    };
    let r = n.wait(&[fence(c, 0, s)], true, 120_000 * MS);
    let detect = t0.elapsed();
    println!(
        "info lost: device loss detected {} ms after the submit",
        detect.as_millis()
    );
    t.check(
        "lost: the job's fence fails with EIO (not a timeout)",
        errno(&r) == Some(libc::EIO),
        || format!("{r:?}"),
    );

    let at_once = |what: &str, f: &dyn Fn() -> Option<i32>, t: &mut T| {
        let t1 = Instant::now();
        let e = f();
        let took = t1.elapsed();
        t.check(
            &format!("lost: {what} fails with EIO at once"),
            e == Some(libc::EIO) && took < AT_ONCE,
            || format!("{e:?} after {took:?}"),
        );
    };
    at_once(
        "SUBMIT",
        &|| n.submit(c, 0, &[job], &[]).err().map(|e| e.errno),
        t,
    );
    at_once(
        "CTX_CREATE",
        &|| {
            n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1, 0)
                .err()
                .map(|e| e.errno)
        },
        t,
    );
    at_once("PING", &|| n.ping(1, 1_000 * MS).err().map(|e| e.errno), t);
    at_once(
        "WAIT",
        &|| {
            n.wait(&[fence(c, 0, s)], true, 10_000 * MS)
                .err()
                .map(|e| e.errno)
        },
        t,
    );

    let q = n.ctx_query(c).unwrap_or_default();
    t.check(
        "lost: CTX_QUERY says the device is lost",
        q.state & uapi::CTX_STATE_DEVICE_LOST != 0,
        || format!("{q:?}"),
    );
    match n.query_stats(&mut []) {
        Ok(a) => t.check("lost: QUERY_STATS says lost", a.lost == 1, || {
            format!("{a:?}")
        }),
        Err(e) => t.check("lost: QUERY_STATS answers", false, || e.to_string()),
    }
    let dmesg = std::process::Command::new("dmesg")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    t.check(
        "lost: the kernel log says why",
        dmesg.contains("device lost:") && dmesg.contains("unanswered"),
        || dmesg.lines().rev().take(8).collect::<Vec<_>>().join("\n"),
    );
    let events = uevents_with("WEDGED=rebind");
    t.check(
        "lost: WEDGED=rebind uevent on the DRM nodes",
        events
            .iter()
            .any(|e| e.contains("WEDGED=rebind") && e.contains("SUBSYSTEM=drm")),
        || events.join("\n"),
    );

    // The user-mode library, as an application meets it.
    let umd = vgpu_umd::Context::new().and_then(|c| vgpu_umd::Stream::new(&c));
    let text = match &umd {
        Ok(_) => "a stream was created on a lost device".to_string(),
        Err(e) => e.to_string(),
    };
    t.check(
        "lost: the library reports the device lost",
        text.contains("device lost"),
        || text.clone(),
    );
}
