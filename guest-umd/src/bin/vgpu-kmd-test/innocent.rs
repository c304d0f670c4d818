//! Innocent work in flight at another context's engine reset, beyond the
//! copy engine's kernel-mode rings (`inflight-innocent` in hang.rs): a
//! compute dispatch cut off by the compute engine's reset must be written
//! again on the compute ring and rung there; a user-mode queue cut off
//! must restart at the read pointer the reset reported and be told it was
//! innocent. Each needs `job_timeout_ms=1000`: the hang is found about a
//! second after the hung ring stopped, while the innocent work (about 6 s
//! of it, in pieces well inside the timeout) is still running.

use std::path::Path;
use std::time::Instant;

use vgpu_umd::uapi::{self, param};

use crate::debugfs::{debugfs, summary_field};
use crate::hang::{aliases, innocent_why, slotted, verdicts};
use crate::node::{fence, fill, open, plan, scratch, sem_wait_eq, Cmds, Map, Scratch, MS, PAGE};
use crate::report::{errname, errno, T};
use crate::uqueue::{create_queue, fence_packet};

const COPY: u32 = uapi::ENGINE_COPY;
const COMPUTE: u32 = uapi::ENGINE_COMPUTE;

/// One thread counting to its argument `n`: a dispatch whose length the
/// test chooses (about 3 instructions per count).
const COUNT: &str = "\
.kernel count
.arg n u32
.workgroup 1
    ldarg   r1, [n]
    mov     r0, 0
again:
    add     r0, r0, 1
    setp.lt.u32 p0, r0, r1
    @p0 bra again
    exit
.end
";

/// The device's reset count (debugfs `contexts`' summary).
fn device_resets(contexts: &str) -> Option<String> {
    summary_field(contexts, "device_resets")
}

/// A compute context's dispatches in flight when another context's compute
/// ring (blocked on a semaphore nobody writes) is found hung: the compute
/// engine is reset naming the hung context, its reply names the innocent
/// one in flight, whose compute ring must be written again and rung on
/// the compute engine; every innocent dispatch completes, the verdicts
/// land on the right contexts, no device reset.
pub fn test_innocent_compute(t: &mut T, path: &Path) {
    let n = open(path);
    let Scratch {
        cmds,
        data,
        dva,
        start,
    } = scratch(&n, 0x200_0000, 1);
    let code = Cmds::new(&n, start + 0x400_0000, 4).expect("module buffer");
    let module = match code.module(0, COUNT) {
        Ok(m) => m,
        Err(e) => {
            t.check("inflight-compute: assemble the count kernel", false, || e);
            return;
        }
    };
    let args = Map::new(&n, data, PAGE).expect("map data");
    // Word 0 stays zero: the hung ring's semaphore. Arguments at 0x100 on.
    let dispatch = |slot: usize, arg: usize, count: u32| {
        args.write_u32(arg / 4, count);
        cmds.program(slot, &[module.dispatch(dva + arg as u64, 4)])
    };
    let w = n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1 << COMPUTE, 0);
    let z = n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1 << COMPUTE, 0);
    let (Some(w), Some(z)) = (
        t.ok("inflight-compute: the innocent compute context", w),
        t.ok("inflight-compute: the hung compute context", z),
    ) else {
        return;
    };
    // Time a dispatch of a million counts warm (the first pays for the
    // module's compilation).
    const UNIT: u64 = 1_000_000;
    let probe = dispatch(0, 0x100, UNIT as u32);
    let s0 = n.submit(w, COMPUTE, &[probe], &[]).unwrap_or(0);
    let _ = n.wait(&[fence(w, COMPUTE, s0)], true, 10_000 * MS);
    let t1 = Instant::now();
    let s1 = n.submit(w, COMPUTE, &[probe], &[]).unwrap_or(0);
    let r1 = n.wait(&[fence(w, COMPUTE, s1)], true, 10_000 * MS);
    if t.ok("inflight-compute: a counting dispatch runs", r1)
        .is_none()
    {
        return;
    }
    let (units, jobs) = plan(t1.elapsed(), 1, 4000);
    let count = (units * UNIT).min(u64::from(u32::MAX)) as u32;
    println!(
        "info inflight-compute: {UNIT} counts in {:?}; {jobs} dispatches of {count} counts",
        t1.elapsed()
    );
    let job = dispatch(1, 0x200, count);
    let mut seqnos = Vec::new();
    for _ in 0..jobs {
        match n.submit(w, COMPUTE, &[job], &[]) {
            Ok(s) => seqnos.push(s),
            Err(e) => {
                t.check("inflight-compute: submit", false, || {
                    errname(e.errno).into()
                });
                return;
            }
        }
    }
    let before = debugfs("contexts");
    let hang = cmds.program(2, &[sem_wait_eq(dva, 0xdead)]);
    let sz = n.submit(z, COMPUTE, &[hang], &[]).unwrap_or(0);
    let rz = n.wait(&[fence(z, COMPUTE, sz)], true, 30_000 * MS);
    t.check(
        "inflight-compute: the hung compute ring's fence fails",
        errno(&rz) == Some(libc::EIO),
        || format!("{rz:?}"),
    );
    let last = *seqnos.last().unwrap_or(&0);
    let rw = n.wait(&[fence(w, COMPUTE, last)], true, 60_000 * MS);
    let qw = n.ctx_query(w).unwrap_or_default();
    let qz = n.ctx_query(z).unwrap_or_default();
    t.check(
        "inflight-compute: every innocent dispatch completes",
        rw.is_ok(),
        || {
            format!(
                "on the compute engine (engine 1): {}",
                innocent_why(&rw, w, &qw, z, &qz)
            )
        },
    );
    t.check(
        "inflight-compute: the dispatching context reported innocent",
        qw.reset_status == uapi::CTX_RESET_INNOCENT && qw.hangs == 0,
        || verdicts(w, &qw, z, &qz),
    );
    let after = debugfs("contexts");
    t.check(
        "inflight-compute: engine reset only",
        device_resets(&after).is_some() && device_resets(&after) == device_resets(&before),
        || after.clone(),
    );
}

/// A user-mode queue's FILLs in flight on the copy engine when a
/// kernel-mode ring of another context (blocked on a semaphore) is found
/// hung: the queue was suspended around the engine reset, whose reply names
/// it as the context in flight and the read pointer where it stopped; it
/// must be watched again from that pointer and told it was innocent; all
/// its work completes.
pub fn test_innocent_uq(t: &mut T, path: &Path) {
    let n = open(path);
    let start = n.get_param(param::VA_START).unwrap_or(0);
    let Some(base) = aliases(&n, 128) else {
        t.check("inflight-uq: 256 MiB of aliases bound", false, || {
            "bind failed".into()
        });
        return;
    };
    let Scratch { cmds, dva, .. } = scratch(&n, 0x200_0000, 1);
    // The FILLs' size, timed warm on a kernel-mode ring of the same engine.
    let k = n
        .ctx_create(uapi::CTX_PRIORITY_NORMAL, 1 << COPY, 0)
        .unwrap_or(0);
    let one = cmds.put(0, &slotted(fill(base, 16 << 20, 0x77), 1));
    let s0 = n.submit(k, COPY, &[one], &[]).unwrap_or(0);
    let _ = n.wait(&[fence(k, COPY, s0)], true, 10_000 * MS);
    let t1 = Instant::now();
    let s1 = n.submit(k, COPY, &[one], &[]).unwrap_or(0);
    let _ = n.wait(&[fence(k, COPY, s1)], true, 10_000 * MS);
    // In MiB (a FILL of up to 256 MiB: the aliases).
    let (mib, fills) = plan(t1.elapsed(), 16, 256);
    println!(
        "info inflight-uq: 16 MiB fill {:?}; {fills} fills of {mib} MiB",
        t1.elapsed()
    );
    let Some(mut u) = t.ok(
        "inflight-uq: a user-mode queue on the copy engine",
        create_queue(&n, start + 0x100_0000, COPY),
    ) else {
        return;
    };
    // The queue's ring is 64 KiB: each FILL in a 64-byte slot.
    let mut work = slotted(fill(base, mib << 20, 0x99), fills.min(900));
    work.push(fence_packet(dva + 16, 1));
    u.write(&work);
    u.submit(&n);
    let before = debugfs("contexts");
    // The hung ring has a lower priority than the queue: its semaphore
    // checks never take the engine from the queue's FILLs, so the reset
    // lands while the queue is in flight (with equal priorities it may
    // land during one of those checks, naming the hung ring in flight and
    // leaving the queue alone, rightly).
    let h = n
        .ctx_create(uapi::CTX_PRIORITY_LOW, 1 << COPY, 0)
        .unwrap_or(0);
    let hang = cmds.program(1, &[sem_wait_eq(dva, 0xdead)]);
    let sh = n.submit(h, COPY, &[hang], &[]).unwrap_or(0);
    let rh = n.wait(&[fence(h, COPY, sh)], true, 30_000 * MS);
    t.check(
        "inflight-uq: the hung ring's fence fails",
        errno(&rh) == Some(libc::EIO),
        || format!("{rh:?}"),
    );
    let ru = n.wait(&[fence(u.id, COPY, 1)], true, 60_000 * MS);
    let qu = n.ctx_query(u.id).unwrap_or_default();
    let qh = n.ctx_query(h).unwrap_or_default();
    t.check(
        "inflight-uq: the queue's work completes",
        ru.is_ok(),
        || {
            format!(
                "WAIT: {ru:?}; {}; CTX_QUERY state {:#x}",
                verdicts(u.id, &qu, h, &qh),
                qu.state
            )
        },
    );
    t.check(
        "inflight-uq: the queue in flight restarts where the reset stopped it, innocent",
        qu.reset_status == uapi::CTX_RESET_INNOCENT && qu.hangs == 0,
        || {
            format!(
                "{}: the engine reset's reply named user-mode queue {} as the context in flight \
                 (ctx_id) and the read pointer where it stopped (rptr); resuming it must pass \
                 that (ctx_id, rptr) on (resume_queues' innocent), so that it restarts there \
                 and is reported innocent",
                verdicts(u.id, &qu, h, &qh),
                u.id
            )
        },
    );
    let after = debugfs("contexts");
    t.check(
        "inflight-uq: engine reset only",
        device_resets(&after).is_some() && device_resets(&after) == device_resets(&before),
        || after.clone(),
    );
    t.ok("inflight-uq: destroy the queue", n.ctx_destroy(u.id));
}
