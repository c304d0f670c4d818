//! The reset ladder's engine reset beyond the copy engine and kernel-mode
//! rings (`job_timeout_ms=1000`): a hang on the compute engine must reset
//! that engine; user-mode queues on the engine being reset are suspended
//! around it and must run again afterwards; a hung user-mode queue is
//! guilty, errored and takes no more work.

use std::path::Path;
use std::time::Duration;

use vgpu_hwif::packet::{self, Packet};
use vgpu_umd::kmd::Kmd;
use vgpu_umd::uapi::{self, param};

use crate::debugfs::{debugfs, summary_field};
use crate::node::{fence, open, scratch, sem_wait_eq, Map, Scratch, MS, PAGE};
use crate::report::{errno, T};
use crate::uqueue::{create_queue, fence_packet, Queue};

const COPY: u32 = uapi::ENGINE_COPY;
const COMPUTE: u32 = uapi::ENGINE_COMPUTE;
const ENGINE_NAMES: [&str; 2] = ["copy", "compute"];

/// The device's reset count of each engine (`QUERY_STATS`: what the device
/// did, whatever the driver logged).
fn engine_resets(n: &Kmd) -> [u64; 2] {
    let s = n.query_stats(&mut []).unwrap_or_default();
    [s.engines[0].resets, s.engines[1].resets]
}

/// debugfs `contexts`' reset log lines that `after` has beyond `before`.
fn new_resets(before: &str, after: &str) -> String {
    let old = before.lines().filter(|l| l.starts_with("reset ")).count();
    let new: Vec<&str> = after
        .lines()
        .filter(|l| l.starts_with("reset "))
        .skip(old)
        .collect();
    if new.is_empty() {
        "none".into()
    } else {
        new.join("; ")
    }
}

/// A kernel-mode ring on the compute engine blocked on a semaphore nobody
/// writes: the engine reset must be of the compute engine (the device's
/// per-engine reset counters say which one it reset); the hung job fails,
/// the context is guilty, and both it and another context run again on
/// the compute engine.
pub fn test_reset_compute(t: &mut T, path: &Path) {
    let n = open(path);
    let Scratch { cmds, dva, .. } = scratch(&n, 0x200_0000, 1);
    // The data page stays zero: the semaphore is never released.
    let hang = cmds.program(0, &[sem_wait_eq(dva, 0xdead)]);
    let small = cmds.program(
        1,
        &[Packet::SemSignal {
            va: dva + 8,
            value: 1,
            op: packet::SEM_SIGNAL_WRITE,
        }],
    );
    let c = n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1 << COMPUTE, 0);
    let d = n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1 << COMPUTE, 0);
    let (Some(c), Some(d)) = (
        t.ok("reset-compute: a compute context", c),
        t.ok("reset-compute: another compute context", d),
    ) else {
        return;
    };
    let log_before = debugfs("contexts");
    let before = engine_resets(&n);
    let Some(s) = t.ok(
        "reset-compute: submit a hang on the compute engine",
        n.submit(c, COMPUTE, &[hang], &[]),
    ) else {
        return;
    };
    // A job of another context on the copy engine waits on the hung job's
    // fence (written to its ring behind a SEM_WAIT on the fence's value):
    // the reset must release it, not leave it waiting until it is found
    // hung itself. It is submitted 400 ms after the hang, so that it is
    // far from its own timeout when the hang is found.
    std::thread::sleep(Duration::from_millis(400));
    let waiter = n
        .ctx_create(uapi::CTX_PRIORITY_NORMAL, 1 << COPY, 0)
        .unwrap_or(0);
    let sw = n
        .submit(waiter, COPY, &[small], &[fence(c, COMPUTE, s)])
        .unwrap_or(0);
    let r = n.wait(&[fence(c, COMPUTE, s)], true, 30_000 * MS);
    t.check(
        "reset-compute: the hung compute job's fence fails",
        errno(&r) == Some(libc::EIO),
        || format!("{r:?}"),
    );
    let after = engine_resets(&n);
    let moved = [after[0] - before[0], after[1] - before[1]];
    t.check(
        "reset-compute: the compute engine was reset",
        moved[1] >= 1 && moved[0] == 0,
        || {
            let reset: Vec<String> = (0..2)
                .filter(|&e| moved[e] > 0)
                .map(|e| format!("engine {e} ({})", ENGINE_NAMES[e]))
                .collect();
            format!(
                "the hang was on engine 1 (compute), but the device reset {}: its reset \
                 counters moved copy +{} compute +{} (the ENGINE_RESET command names the \
                 engine of the hung ring); the driver's reset log: {}",
                if reset.is_empty() {
                    "no engine".to_string()
                } else {
                    reset.join(" and ")
                },
                moved[0],
                moved[1],
                new_resets(&log_before, &debugfs("contexts"))
            )
        },
    );
    let log = new_resets(&log_before, &debugfs("contexts"));
    t.check(
        "reset-compute: the driver's reset log names the compute engine",
        log.contains("reset engine") && log.contains("engine 0x1"),
        || format!("the reset log's new entries: {log}"),
    );
    let q = n.ctx_query(c).unwrap_or_default();
    t.check(
        "reset-compute: the hung context is guilty",
        q.reset_status == uapi::CTX_RESET_GUILTY,
        || format!("{q:?}"),
    );
    // Well inside the job timeout: a waiter left blocked would only end
    // when found hung itself (its job failed, its context guilty).
    let rw = n.wait(&[fence(waiter, COPY, sw)], true, 600 * MS);
    let qw = n.ctx_query(waiter).unwrap_or_default();
    t.check(
        "reset-compute: a job waiting on the hung job's fence is released",
        rw.is_ok() && qw.hangs == 0,
        || {
            format!(
                "context {waiter}'s copy job, waiting (SEM_WAIT) on the failed compute job's \
                 fence, did not run within 600 ms of the reset (WAIT: {rw:?}; its hangs: {}): \
                 the fence value must move past the jobs the reset discarded (release_failed) \
                 so that jobs waiting on them go on",
                qw.hangs
            )
        },
    );
    let sd = n.submit(d, COMPUTE, &[small], &[]).unwrap_or(0);
    t.ok(
        "reset-compute: another context runs on the compute engine",
        n.wait(&[fence(d, COMPUTE, sd)], true, 5_000 * MS),
    );
    let sc = n.submit(c, COMPUTE, &[small], &[]).unwrap_or(0);
    let r = n.wait(&[fence(c, COMPUTE, sc)], true, 5_000 * MS);
    t.check(
        "reset-compute: the guilty context runs again on the compute engine",
        r.is_ok(),
        || {
            format!(
                "WAIT: {r:?}: its compute ring still holds the hung job if the reset went to \
                 another engine; the driver's reset log: {}",
                new_resets(&log_before, &debugfs("contexts"))
            )
        },
    );
}

/// Why user-mode queue `q` did not run its new work: what `CTX_QUERY`
/// says of it.
fn not_resumed(n: &Kmd, q: &Queue, engine: u32, when: &str) -> String {
    let st = n.ctx_query(q.id).map(|c| c.state).unwrap_or(0);
    format!(
        "user-mode queue {} on engine {engine} ({}) not resumed after the engine reset {when}: \
         its new work did not run within 3 s; CTX_QUERY state {st:#x}{}",
        q.id,
        ENGINE_NAMES[engine as usize],
        if st & uapi::CTX_STATE_SUSPENDED != 0 {
            " (SUSPENDED: the device no longer watches its doorbell; the queues suspended \
             before the reset are watched again after it)"
        } else {
            ""
        }
    )
}

/// User-mode queues and the engine reset, on the copy engine: an innocent
/// queue of another context keeps working after a kernel-mode ring's hang
/// is reset, and after a hung queue's; the hung queue is guilty, errored,
/// suspended, and takes no more work.
pub fn test_reset_uq(t: &mut T, path: &Path) {
    let n = open(path);
    let start = n.get_param(param::VA_START).unwrap_or(0);
    let dva = start + 0x800_0000;
    let dh = n.gem_create(4 * PAGE, 0).unwrap_or(0);
    let rw = uapi::VM_BIND_READ | uapi::VM_BIND_WRITE;
    t.ok("reset-uq: bind data", n.vm_bind(dh, dva, 4 * PAGE, rw));
    let data = Map::new(&n, dh, 4 * PAGE).expect("map data");
    let Some(mut u) = t.ok(
        "reset-uq: an innocent user-mode queue on the copy engine",
        create_queue(&n, start + 0x100_0000, COPY),
    ) else {
        return;
    };
    u.write(&[fence_packet(dva + 16, 1)]);
    u.submit(&n);
    t.ok(
        "reset-uq: the queue runs",
        n.wait(&[fence(u.id, COPY, 1)], true, 2000 * MS),
    );

    // A kernel-mode ring of another context hangs on the same engine.
    let Scratch { cmds, dva: hva, .. } = scratch(&n, 0x600_0000, 1);
    let hang = cmds.program(0, &[sem_wait_eq(hva, 0xdead)]);
    let h = n
        .ctx_create(uapi::CTX_PRIORITY_NORMAL, 1 << COPY, 0)
        .unwrap_or(0);
    let s = n.submit(h, COPY, &[hang], &[]).unwrap_or(0);
    let r = n.wait(&[fence(h, COPY, s)], true, 10_000 * MS);
    t.check(
        "reset-uq: the hung kernel-mode job fails",
        errno(&r) == Some(libc::EIO),
        || format!("{r:?}"),
    );
    u.write(&[fence_packet(dva + 16, 2)]);
    u.submit(&n);
    let r = n.wait(&[fence(u.id, COPY, 2)], true, 3000 * MS);
    t.check(
        "reset-uq: the queue on the reset engine runs after the reset",
        r.is_ok(),
        || not_resumed(&n, &u, COPY, "of another context's ring"),
    );

    // A user-mode queue hangs: guilty, errored, suspended.
    let Some(mut g) = t.ok(
        "reset-uq: a user-mode queue that hangs",
        create_queue(&n, start + 0x300_0000, COPY),
    ) else {
        return;
    };
    g.write(&[
        Packet::SemWait {
            va: dva + 0x100,
            value: 1,
            op: packet::SEM_WAIT_GEQ,
        },
        fence_packet(dva, 1),
    ]);
    g.submit(&n);
    t.err(
        "reset-uq: the hung queue's fence fails",
        n.wait(&[fence(g.id, COPY, 1)], true, 10_000 * MS),
        libc::EIO,
    );
    let q = n.ctx_query(g.id).unwrap_or_default();
    let want = uapi::CTX_STATE_ERRORED | uapi::CTX_STATE_SUSPENDED;
    t.check(
        "reset-uq: the hung queue is guilty, errored and suspended",
        q.reset_status == uapi::CTX_RESET_GUILTY && q.state & want == want,
        || {
            format!(
                "user-mode queue {} after its hang: reset status {}, state {:#x}: a hung \
                 user-mode queue lost its work to the reset and must be marked errored (it \
                 takes no more work)",
                g.id, q.reset_status, q.state
            )
        },
    );
    g.write(&[fence_packet(dva + 8, 7)]);
    g.submit(&n);
    std::thread::sleep(Duration::from_millis(100));
    t.check(
        "reset-uq: the hung queue takes no more work",
        data.read(1) != 7,
        || "its new work ran: the reset left it watched".into(),
    );
    u.write(&[fence_packet(dva + 16, 3)]);
    u.submit(&n);
    let r = n.wait(&[fence(u.id, COPY, 3)], true, 3000 * MS);
    t.check(
        "reset-uq: the innocent queue runs after the hung queue's reset",
        r.is_ok(),
        || not_resumed(&n, &u, COPY, "of a hung queue"),
    );
    t.ok("reset-uq: destroy the hung queue", n.ctx_destroy(g.id));
    t.ok("reset-uq: destroy the innocent queue", n.ctx_destroy(u.id));
}

/// The ladder's second rung, with the device armed to refuse the first
/// reset command (`--inject reset-fail`, attempts 1): the engine reset of
/// a hang fails, so the driver resets the device, counts and logs it
/// (debugfs `contexts`: `device_resets`, a `reset device` line); the hung
/// job fails, its context is guilty, and both it and another context run
/// again.
pub fn test_reset_device(t: &mut T, path: &Path) {
    let n = open(path);
    let Scratch { cmds, dva, .. } = scratch(&n, 0x200_0000, 1);
    let hang = cmds.program(0, &[sem_wait_eq(dva, 0xdead)]);
    let small = cmds.program(
        1,
        &[Packet::SemSignal {
            va: dva + 8,
            value: 1,
            op: packet::SEM_SIGNAL_WRITE,
        }],
    );
    let c = n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1 << COPY, 0);
    let d = n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1 << COPY, 0);
    let (Some(c), Some(d)) = (
        t.ok("reset-device: a context", c),
        t.ok("reset-device: another context", d),
    ) else {
        return;
    };
    let before = debugfs("contexts");
    let Some(s) = t.ok(
        "reset-device: submit a hang",
        n.submit(c, COPY, &[hang], &[]),
    ) else {
        return;
    };
    let r = n.wait(&[fence(c, COPY, s)], true, 30_000 * MS);
    t.check(
        "reset-device: the hung job's fence fails",
        errno(&r) == Some(libc::EIO),
        || format!("{r:?}"),
    );
    // The hung job fails before the device reset is done (and counted):
    // the count is read once the reset is over, within 3 s.
    let count = |s: &str| summary_field(s, "device_resets").and_then(|v| v.parse::<u64>().ok());
    let end = std::time::Instant::now() + Duration::from_secs(3);
    let mut after = debugfs("contexts");
    while count(&after) == count(&before) && std::time::Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
        after = debugfs("contexts");
    }
    let log = new_resets(&before, &after);
    t.check(
        "reset-device: the driver counted one device reset",
        matches!((count(&before), count(&after)), (Some(b), Some(a)) if a == b + 1),
        || {
            format!(
                "debugfs contexts: device_resets {:?} before the hang, {:?} after it (the \
                 engine reset was refused, so the device was reset: count it and log it, \
                 record_device_reset); the reset log's new entries: {log}",
                count(&before),
                count(&after)
            )
        },
    );
    t.check(
        "reset-device: the reset log shows the refused engine reset, then the device reset",
        log.contains("reset engine") && log.contains("reset device"),
        || format!("the reset log's new entries: {log}"),
    );
    let q = n.ctx_query(c).unwrap_or_default();
    t.check(
        "reset-device: the hung context is guilty",
        q.reset_status == uapi::CTX_RESET_GUILTY,
        || format!("{q:?}"),
    );
    let sd = n.submit(d, COPY, &[small], &[]).unwrap_or(0);
    t.ok(
        "reset-device: another context runs after the device reset",
        n.wait(&[fence(d, COPY, sd)], true, 5_000 * MS),
    );
    let sc = n.submit(c, COPY, &[small], &[]).unwrap_or(0);
    t.ok(
        "reset-device: the guilty context runs again after the device reset",
        n.wait(&[fence(c, COPY, sc)], true, 5_000 * MS),
    );
}
