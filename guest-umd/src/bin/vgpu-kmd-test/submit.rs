//! Contexts, `SUBMIT`, `WAIT`: copies and fills, bad submissions,
//! cross-context ordering, backpressure, faults (aborted and demand-paged),
//! hangs and the reset ladder, bans, destroy and close with work in flight.

use std::path::Path;

use vgpu_umd::kmd::{IoctlArg, Kmd};
use vgpu_umd::uapi::{self, param};

use crate::debugfs::{debugfs, debugfs_path, field, ring_state, summary_field, vm_line};
use crate::node::{copy, fence, fill, open, sem_wait_eq, Cmds, Map, MS, PAGE};
use crate::report::{errno, T};

/// `struct drm_vgpu_submit` as first published: up to `seqno`, with no
/// sync objects and no BO list.
#[repr(C)]
#[derive(Default)]
struct SubmitV1 {
    ctx_id: u32,
    engine: u32,
    cmds: u64,
    num_cmds: u32,
    num_in_fences: u32,
    in_fences: u64,
    flags: u32,
    pad: u32,
    seqno: u64,
}

const _: () = assert!(core::mem::size_of::<SubmitV1>() == 48);

// SAFETY: the number encodes `size_of::<SubmitV1>()` (`drm_iowr`), and
// `SubmitV1` is a `repr(C)` struct of integers.
unsafe impl IoctlArg for SubmitV1 {
    const REQUEST: u32 = uapi::drm_iowr::<SubmitV1>(uapi::DRM_COMMAND_BASE + uapi::DRM_VGPU_SUBMIT);
    const NAME: &'static str = "SUBMIT (first version)";
}

/// What the parts of [`test_submit`] share: the file, its command buffers,
/// the source, destination and semaphore BOs and where they are bound, the
/// first context.
struct Fx<'a> {
    n: &'a Kmd,
    start: u64,
    copy_only: u32,
    cmds: &'a Cmds,
    cva: u64,
    size: u64,
    sva: u64,
    dva: u64,
    semva: u64,
    src: &'a Map,
    dst: &'a Map,
    sem: &'a Map,
    /// The first copy context.
    a: u32,
}

/// Contexts, submission, fences, faults, hangs and resets (needs the device
/// model; run with a short `job_timeout_ms`).
pub fn test_submit(t: &mut T, path: &Path) {
    let n = open(path);
    let start = n.get_param(param::VA_START).unwrap_or(0);
    let rw = uapi::VM_BIND_READ | uapi::VM_BIND_WRITE;
    let copy_only = 1 << uapi::ENGINE_COPY;

    let Some(a) = contexts(t, &n, copy_only) else {
        return;
    };

    // Memory: cmd buffers (rx), src, dst, semaphore (rw).
    let cva = start + 0x100_0000;
    let cmds = Cmds::new(&n, cva, 16).expect("mmap cmds");
    let size = 16 * PAGE;
    let hs = n.gem_create(size, 0).unwrap_or(0);
    let hd = n.gem_create(size, 0).unwrap_or(0);
    let hsem = n.gem_create(PAGE, 0).unwrap_or(0);
    let (sva, dva, semva) = (start + 0x200_0000, start + 0x300_0000, start + 0x400_0000);
    let _ = n.vm_bind(hs, sva, size, rw);
    let _ = n.vm_bind(hd, dva, size, rw);
    let _ = n.vm_bind(hsem, semva, PAGE, rw);
    let src = Map::new(&n, hs, size).expect("mmap src");
    let dst = Map::new(&n, hd, size).expect("mmap dst");
    let sem = Map::new(&n, hsem, PAGE).expect("mmap sem");
    for i in 0..(size / 8) as usize {
        src.write(i, 0xc0de_0000_0000_0000 | i as u64);
    }
    let f = Fx {
        n: &n,
        start,
        copy_only,
        cmds: &cmds,
        cva,
        size,
        sva,
        dva,
        semva,
        src: &src,
        dst: &dst,
        sem: &sem,
        a,
    };

    copy_and_fill(t, &f);
    let good = cmds.program(2, &[fill(dva, 64, 1)]);
    bad_submissions(t, &f, good);
    let b = ordering(t, &f);
    first_struct_version(t, &f);
    backpressure(t, &f, good);
    ring_to_the_byte(t, &f, good);
    wait_any(t, &f, b, good);
    fault(t, &f, b, good);
    failed_dependency(t, &f, good);
    lazy(t, &f, rw);
    hang(t, &f, b, good);
    destroy(t, &f, b, good);
}

/// Context arguments; the copy context the rest uses.
fn contexts(t: &mut T, n: &Kmd, copy_only: u32) -> Option<u32> {
    for (name, prio, mask, flags) in [
        ("priority 4", 4, copy_only, 0),
        ("engine mask 0", 1, 0, 0),
        ("engine mask 4", 1, 4, 0),
        ("unknown flag", 1, copy_only, 2),
    ] {
        t.err(
            &format!("ctx: create {name}"),
            n.ctx_create(prio, mask, flags),
            libc::EINVAL,
        );
    }
    let a = t.ok(
        "ctx: create copy context",
        n.ctx_create(uapi::CTX_PRIORITY_NORMAL, copy_only, 0),
    )?;
    let q = n.ctx_query(a).unwrap_or_default();
    t.check(
        "ctx: new context clean",
        q.reset_status == uapi::CTX_RESET_NONE && q.state == 0,
        || format!("{q:?}"),
    );
    t.err("ctx: query unknown", n.ctx_query(0xbad), libc::ENOENT);
    Some(a)
}

/// A copy via SUBMIT, verified, then a FILL.
fn copy_and_fill(t: &mut T, f: &Fx) {
    let (n, a, size, dst) = (f.n, f.a, f.size, f.dst);
    let c = f.cmds.program(0, &[copy(f.sva, f.dva, size)]);
    let t0 = std::time::Instant::now();
    if let Some(s1) = t.ok("submit: copy 64 KiB", n.submit(a, 0, &[c], &[])) {
        t.check("submit: first seqno is 1", s1 == 1, || {
            format!("seqno {s1}")
        });
        t.ok(
            "wait: copy fence",
            n.wait(&[fence(a, 0, s1)], true, 5_000 * MS),
        );
        let same =
            (0..(size / 8) as usize).all(|i| dst.read(i) == 0xc0de_0000_0000_0000 | i as u64);
        t.check("submit: copied data matches", same, || "dst differs".into());
        println!("info copy 64 KiB submit-to-signal {:?}", t0.elapsed());
        t.ok(
            "wait: signalled fence again",
            n.wait(&[fence(a, 0, s1)], true, 0),
        );
    }
    // FILL.
    let c = f.cmds.program(1, &[fill(f.dva, PAGE, 0xabcd_1234)]);
    if let Ok(s2) = n.submit(a, 0, &[c], &[]) {
        // docs/uapi.md: a (context, engine)'s seqnos are 1, 2, 3, ...
        t.check("submit: seqnos count up by one", s2 == 2, || {
            format!("the second job's seqno is {s2}")
        });
        t.ok(
            "wait: fill fence",
            n.wait(&[fence(a, 0, s2)], true, 5_000 * MS),
        );
        t.check(
            "submit: fill wrote the pattern",
            dst.read(0) == 0xabcd_1234_abcd_1234,
            || format!("{:#x}", dst.read(0)),
        );
    }
}

/// Bad submissions and waits.
fn bad_submissions(t: &mut T, f: &Fx, good: uapi::DrmVgpuCmd) {
    let (n, a, start, cva) = (f.n, f.a, f.start, f.cva);
    let unmapped = uapi::DrmVgpuCmd {
        va: start + 0x7000_0000,
        size: 32,
    };
    let not_exec = uapi::DrmVgpuCmd {
        va: f.sva,
        size: 32,
    };
    let past_end = uapi::DrmVgpuCmd {
        va: cva + 16 * PAGE - 16,
        size: 32,
    };
    let odd = uapi::DrmVgpuCmd { va: cva, size: 12 };
    t.err(
        "submit: cmd not mapped",
        n.submit(a, 0, &[unmapped], &[]),
        libc::EINVAL,
    );
    t.err(
        "submit: cmd not executable",
        n.submit(a, 0, &[not_exec], &[]),
        libc::EINVAL,
    );
    t.err(
        "submit: cmd past its mapping",
        n.submit(a, 0, &[past_end], &[]),
        libc::EINVAL,
    );
    t.err(
        "submit: cmd size not 8-aligned",
        n.submit(a, 0, &[odd], &[]),
        libc::EINVAL,
    );
    t.err("submit: zero cmds", n.submit(a, 0, &[], &[]), libc::EINVAL);
    let many = vec![good; 65];
    t.err("submit: 65 cmds", n.submit(a, 0, &many, &[]), libc::EINVAL);
    t.err(
        "submit: unknown context",
        n.submit(0xbad, 0, &[good], &[]),
        libc::ENOENT,
    );
    t.err(
        "submit: engine not selected",
        n.submit(a, 1, &[good], &[]),
        libc::EINVAL,
    );
    t.err(
        "submit: engine 7",
        n.submit(a, 7, &[good], &[]),
        libc::EINVAL,
    );
    t.err(
        "submit: in-fence never submitted",
        n.submit(a, 0, &[good], &[fence(a, 0, 1 << 40)]),
        libc::EINVAL,
    );
    t.err(
        "submit: in-fence seqno 0",
        n.submit(a, 0, &[good], &[fence(a, 0, 0)]),
        libc::EINVAL,
    );
    let mut raw = uapi::DrmVgpuSubmit {
        ctx_id: a,
        cmds: &good as *const _ as u64,
        num_cmds: 1,
        flags: 4,
        ..Default::default()
    };
    // SAFETY: SUBMIT only reads through its pointers.
    let r = unsafe { n.ioctl_raw(&mut raw) };
    t.err("submit: unknown flag", r, libc::EINVAL);
    let mut raw = uapi::DrmVgpuSubmit {
        ctx_id: a,
        cmds: 8,
        num_cmds: 1,
        ..Default::default()
    };
    // SAFETY: SUBMIT only reads through its pointers.
    let r = unsafe { n.ioctl_raw(&mut raw) };
    t.err("submit: bad cmds pointer", r, libc::EFAULT);
    t.err("wait: no fences", n.wait(&[], true, 0), libc::EINVAL);
    t.err(
        "wait: unknown context",
        n.wait(&[fence(0xbad, 0, 1)], true, 0),
        libc::ENOENT,
    );
    t.err(
        "wait: seqno never submitted",
        n.wait(&[fence(a, 0, 1 << 40)], true, 0),
        libc::EINVAL,
    );
}

/// Cross-context ordering: B's copy waits (input fence) for A's job, which
/// waits on a semaphore the CPU writes later. Returns B (a high-priority
/// copy context).
fn ordering(t: &mut T, f: &Fx) -> u32 {
    let (n, a, dst, sem) = (f.n, f.a, f.dst, f.sem);
    let b = n
        .ctx_create(uapi::CTX_PRIORITY_HIGH, f.copy_only, 0)
        .unwrap_or(0);
    sem.write(0, 0);
    dst.write(8, 0);
    let ca = f.cmds.program(3, &[sem_wait_eq(f.semva, 1)]);
    let cb = f.cmds.program(4, &[fill(f.dva + 64, 8, 0x7777_7777)]);
    let sa = n.submit(a, 0, &[ca], &[]).unwrap_or(0);
    let sb = n.submit(b, 0, &[cb], &[fence(a, 0, sa)]);
    if let Some(sb) = t.ok("ordering: submit with an input fence", sb) {
        t.err(
            "ordering: waiter times out while blocked",
            n.wait(&[fence(b, 0, sb)], true, 200 * MS),
            libc::ETIME,
        );
        t.check(
            "ordering: blocked job did not run",
            dst.read(8) == 0,
            || format!("{:#x}", dst.read(8)),
        );
        sem.write(0, 1);
        t.ok(
            "ordering: both complete after the semaphore",
            n.wait(&[fence(a, 0, sa), fence(b, 0, sb)], true, 5_000 * MS),
        );
        t.check(
            "ordering: dependent job ran",
            dst.read(8) == 0x7777_7777_7777_7777,
            || format!("{:#x}", dst.read(8)),
        );
    }
    b
}

/// A caller built for the first version of the SUBMIT struct (48 bytes, up
/// to `seqno`): the KMD reads the fields after it as zero.
fn first_struct_version(t: &mut T, f: &Fx) {
    let (n, a, dst) = (f.n, f.a, f.dst);
    let job = [f.cmds.program(10, &[fill(f.dva + 192, 8, 0x0102_0304)])];
    let mut v1 = SubmitV1 {
        ctx_id: a,
        cmds: job.as_ptr() as u64,
        num_cmds: 1,
        ..Default::default()
    };
    // SAFETY: SUBMIT only reads through its pointers; `job` outlives
    // the call.
    let r = unsafe { n.ioctl_raw(&mut v1) };
    let done = r.and_then(|()| n.wait(&[fence(a, 0, v1.seqno)], true, 5_000 * MS));
    t.ok("submit: the first struct version still works", done);
    t.check(
        "submit: and its job ran",
        dst.read(24) == 0x0102_0304_0102_0304,
        || format!("{:#x}", dst.read(24)),
    );
}

/// Backpressure: jobs queue in the KMD behind a blocked one (the ring
/// fills, the queue takes the rest) until VGPU_CTX_MAX_PENDING, then
/// EAGAIN.
fn backpressure(t: &mut T, f: &Fx, good: uapi::DrmVgpuCmd) {
    let (n, a, sem, semva) = (f.n, f.a, f.sem, f.semva);
    // `queue(job, tries, blk)` submits `job` on A until the KMD refuses one
    // (at most `tries` times): the jobs queued, the last answer, the last
    // seqno queued (`blk` if none).
    let queue = |job: &[uapi::DrmVgpuCmd], tries: usize, blk: u64| {
        let mut queued = 0;
        let mut last = Ok(0);
        let mut seq_last = blk;
        for _ in 0..tries {
            last = n.submit(a, 0, job, &[]);
            match last {
                Ok(s) => {
                    queued += 1;
                    seq_last = s;
                }
                Err(_) => break,
            }
        }
        (queued, last, seq_last)
    };
    sem.write(0, 0);
    let blk = n
        .submit(a, 0, &[f.cmds.program(5, &[sem_wait_eq(semva, 2)])], &[])
        .unwrap_or(0);
    let max = uapi::CTX_MAX_PENDING as usize;
    let (queued, last, seq_last) = queue(&[good], max + 10, blk);
    t.check(
        "backpressure: a full queue gives EAGAIN",
        errno(&last) == Some(libc::EAGAIN) && queued + 1 == max,
        || format!("{last:?} after {queued} (+1 blocked), max {max}"),
    );
    let mut raw = uapi::DrmVgpuSubmit {
        ctx_id: a,
        cmds: &good as *const _ as u64,
        num_cmds: 1,
        flags: uapi::SUBMIT_BUSY_IS_EBUSY,
        ..Default::default()
    };
    // SAFETY: SUBMIT only reads through its pointers.
    let r = unsafe { n.ioctl_raw(&mut raw) };
    t.err("backpressure: EBUSY on request", r, libc::EBUSY);
    sem.write(0, 2);
    t.ok(
        "backpressure: queue drains",
        n.wait(&[fence(a, 0, seq_last)], true, 60_000 * MS),
    );
    println!("info backpressure: {queued} jobs queued");
    // Ring space: jobs of 64 command buffers fill the ring after a few;
    // the rest wait in the KMD's queue instead of failing.
    sem.write(0, 0);
    let blk = n
        .submit(a, 0, &[f.cmds.program(5, &[sem_wait_eq(semva, 4)])], &[])
        .unwrap_or(0);
    let (queued, last, seq_last) = queue(&[good; 64], 100, blk);
    t.check(
        "backpressure: a full ring queues in the KMD (no EAGAIN)",
        last.is_ok() && queued == 100,
        || format!("{last:?} after {queued}"),
    );
    sem.write(0, 4);
    t.ok(
        "backpressure: full ring drains",
        n.wait(&[fence(a, 0, seq_last)], true, 30_000 * MS),
    );
}

/// The ring fills to its last byte: with the engine blocked, jobs of one
/// and two command buffers whose sizes add up to exactly the room left all
/// land on the ring (a job that fits exactly is written, not held back),
/// and the next one waits in the KMD's queue.
fn ring_to_the_byte(t: &mut T, f: &Fx, good: uapi::DrmVgpuCmd) {
    let (n, a, sem, semva) = (f.n, f.a, f.sem, f.semva);
    sem.write(0, 0);
    let blk = n
        .submit(a, 0, &[f.cmds.program(7, &[sem_wait_eq(semva, 6)])], &[])
        .unwrap_or(0);
    // The engine has taken the blocker: its read pointer stays put.
    let mut last = None;
    for _ in 0..100 {
        std::thread::sleep(std::time::Duration::from_millis(20));
        let now = ring_state(a, 0);
        if now.is_some() && now == last {
            break;
        }
        last = now;
    }
    let mut seq = blk;
    let mut land = |cmds: &[uapi::DrmVgpuCmd]| -> Option<u32> {
        let (w0, ..) = ring_state(a, 0)?;
        seq = n.submit(a, 0, cmds, &[]).ok()?;
        let (w1, ..) = ring_state(a, 0)?;
        Some(w1.wrapping_sub(w0))
    };
    // The two job sizes, measured on the ring.
    let (s1, s2) = (land(&[good]).unwrap_or(0), land(&[good, good]).unwrap_or(0));
    let Some((w, r, size, _)) = ring_state(a, 0) else {
        t.check("ring-full: the ring's state in debugfs", false, || {
            "no ring 0 line for the context in debugfs contexts".into()
        });
        return;
    };
    let free = size.wrapping_sub(w.wrapping_sub(r));
    // a jobs of one command buffer and b of two fill `free` exactly.
    let tiling = (s1 > 0 && s2 > 0)
        .then(|| (0..=free / s2.max(1)).find(|b| (free - b * s2) % s1 == 0))
        .flatten()
        .map(|b| ((free - b * s2) / s1, b));
    let Some((na, nb)) = tiling else {
        t.check(
            "ring-full: the room left is a sum of job sizes",
            false,
            || format!("{free} bytes free, jobs of {s1} and {s2} bytes"),
        );
        return;
    };
    let mut landed = true;
    for _ in 0..nb {
        landed &= land(&[good, good]) == Some(s2);
    }
    for _ in 0..na {
        landed &= land(&[good]) == Some(s1);
    }
    let full = ring_state(a, 0);
    t.check(
        "ring-full: a job that fits exactly is written (the ring fills to the last byte)",
        landed && full.is_some_and(|(w, r, size, _)| w.wrapping_sub(r) == size),
        || {
            format!(
                "{free} bytes were free for {nb} jobs of {s2} bytes and {na} of {s1}; \
                 now (wptr, rptr, size, jobs on the ring) = {full:x?}: a job that fits the room \
                 left exactly must be written to the ring"
            )
        },
    );
    let after = land(&[good]);
    t.check(
        "ring-full: the next job waits in the KMD",
        after == Some(0),
        || format!("the ring's wptr moved by {after:?} bytes on a full ring"),
    );
    sem.write(0, 6);
    t.ok(
        "ring-full: the ring drains",
        n.wait(&[fence(a, 0, seq)], true, 30_000 * MS),
    );
}

/// Wait any: one fence of two.
fn wait_any(t: &mut T, f: &Fx, b: u32, good: uapi::DrmVgpuCmd) {
    let (n, a, sem) = (f.n, f.a, f.sem);
    sem.write(0, 0);
    let s_block = n
        .submit(a, 0, &[f.cmds.program(6, &[sem_wait_eq(f.semva, 3)])], &[])
        .unwrap_or(0);
    let s_free = n.submit(b, 0, &[good], &[]).unwrap_or(0);
    let r = n.wait(
        &[fence(a, 0, s_block), fence(b, 0, s_free)],
        false,
        5_000 * MS,
    );
    t.check("wait: any returns the signalled one", r == Ok(1), || {
        format!("{r:?}")
    });
    sem.write(0, 3);
    let _ = n.wait(&[fence(a, 0, s_block)], true, 5_000 * MS);
}

/// Non-replayable fault: A errors, B unaffected.
fn fault(t: &mut T, f: &Fx, b: u32, good: uapi::DrmVgpuCmd) {
    let (n, a, start) = (f.n, f.a, f.start);
    let cf = f.cmds.program(7, &[copy(start + 0x7000_0000, f.dva, 64)]);
    if let Ok(sf) = n.submit(a, 0, &[cf], &[]) {
        t.err(
            "fault: faulting job's fence fails",
            n.wait(&[fence(a, 0, sf)], true, 5_000 * MS),
            libc::EIO,
        );
        let q = n.ctx_query(a).unwrap_or_default();
        t.check(
            "fault: context errored, guilty, address and access reported",
            q.state & uapi::CTX_STATE_ERRORED != 0
                && q.state & uapi::CTX_STATE_FAULTED != 0
                && q.reset_status == uapi::CTX_RESET_GUILTY
                && q.fault_va == start + 0x7000_0000
                && q.fault_access == uapi::ACCESS_READ,
            || format!("{q:?}"),
        );
        t.err(
            "fault: errored context refuses submits",
            n.submit(a, 0, &[good], &[]),
            libc::EIO,
        );
        let sb = n.submit(b, 0, &[good], &[]).unwrap_or(0);
        t.ok(
            "fault: other context unaffected",
            n.wait(&[fence(b, 0, sb)], true, 5_000 * MS),
        );
        let q = n.ctx_query(b).unwrap_or_default();
        t.check(
            "fault: other context clean",
            q.state == 0 && q.reset_status == uapi::CTX_RESET_NONE,
            || format!("{q:?}"),
        );
    }
}

/// A dependent job is released when its input fence fails.
fn failed_dependency(t: &mut T, f: &Fx, good: uapi::DrmVgpuCmd) {
    let (n, sem, semva) = (f.n, f.sem, f.semva);
    let x = n
        .ctx_create(uapi::CTX_PRIORITY_NORMAL, f.copy_only, 0)
        .unwrap_or(0);
    let y = n
        .ctx_create(uapi::CTX_PRIORITY_NORMAL, f.copy_only, 0)
        .unwrap_or(0);
    sem.write(0, 0);
    let xf = [
        f.cmds.program(14, &[sem_wait_eq(semva, 6)]),
        f.cmds
            .program(15, &[copy(f.start + 0x7100_0000, f.dva, 64)]),
    ];
    if let (Ok(sx), Ok(sy)) = (
        n.submit(x, 0, &xf, &[]),
        n.submit(y, 0, &[good], &[fence(x, 0, 1)]),
    ) {
        sem.write(0, 6);
        t.err(
            "deps: failing input fence fails its own waiters",
            n.wait(&[fence(x, 0, sx)], true, 5_000 * MS),
            libc::EIO,
        );
        t.ok(
            "deps: dependent job released when its input fence fails",
            n.wait(&[fence(y, 0, sy)], true, 5_000 * MS),
        );
    }
}

/// Replayable fault on a lazy BO: mapped on demand, job completes.
fn lazy(t: &mut T, f: &Fx, rw: u32) {
    let (n, start, sva) = (f.n, f.start, f.sva);
    let r = n
        .ctx_create(
            uapi::CTX_PRIORITY_NORMAL,
            f.copy_only,
            uapi::CTX_CREATE_REPLAYABLE,
        )
        .unwrap_or(0);
    let hl = n.gem_create(4 * PAGE, uapi::GEM_CREATE_LAZY).unwrap_or(0);
    let lva = start + 0x500_0000;
    let _ = n.vm_bind(hl, lva, 4 * PAGE, rw);
    let cl = f.cmds.program(8, &[copy(sva, lva + PAGE, PAGE)]);
    if let Some(sl) = t.ok(
        "lazy: submit copy into a lazy BO",
        n.submit(r, 0, &[cl], &[]),
    ) {
        t.ok(
            "lazy: job completes after demand paging",
            n.wait(&[fence(r, 0, sl)], true, 10_000 * MS),
        );
        let q = n.ctx_query(r).unwrap_or_default();
        t.check(
            "lazy: fault served, context clean",
            q.faults >= 1 && q.state == 0,
            || format!("{q:?}"),
        );
        let l = vm_line(lva).unwrap_or_default();
        t.check(
            "lazy: one page mapped",
            field(&l, "walk_4k").as_deref() == Some("1")
                && field(&l, "check").as_deref() == Some("ok"),
            || l.clone(),
        );
        if let Ok(m) = Map::new(n, hl, 4 * PAGE) {
            t.check("lazy: data landed", m.read(512) == f.src.read(0), || {
                format!("{:#x}", m.read(512))
            });
        }
        // Only a lazy mapping is paged in: the same context's copy into a
        // VA nothing is bound at is not served, and the job fails.
        let bad = f.cmds.program(15, &[copy(sva, start + 0x7200_0000, PAGE)]);
        if let Some(sb) = t.ok(
            "lazy: submit a copy into an unbound VA",
            n.submit(r, 0, &[bad], &[]),
        ) {
            t.err(
                "lazy: a fault outside every mapping is not served",
                n.wait(&[fence(r, 0, sb)], true, 10_000 * MS),
                libc::EIO,
            );
        }
    }
    lazy_read_only(t, f);
}

/// A write into a read-only lazy mapping, on a context of its own: the
/// page is paged in for the not-present fault, and the write's permission
/// fault that follows is not served (paging in cannot grant a write): the
/// job fails after those two faults instead of retrying.
fn lazy_read_only(t: &mut T, f: &Fx) {
    let (n, start, sva) = (f.n, f.start, f.sva);
    let r = n
        .ctx_create(
            uapi::CTX_PRIORITY_NORMAL,
            f.copy_only,
            uapi::CTX_CREATE_REPLAYABLE,
        )
        .unwrap_or(0);
    let h = n.gem_create(PAGE, uapi::GEM_CREATE_LAZY).unwrap_or(0);
    let va = start + 0x580_0000;
    let _ = n.vm_bind(h, va, PAGE, uapi::VM_BIND_READ);
    let c = f.cmds.program(9, &[copy(sva, va, 64)]);
    if let Some(s) = t.ok(
        "lazy: submit a copy into a read-only lazy BO",
        n.submit(r, 0, &[c], &[]),
    ) {
        t.err(
            "lazy: a write into a read-only lazy page is not served",
            n.wait(&[fence(r, 0, s)], true, 10_000 * MS),
            libc::EIO,
        );
        let q = n.ctx_query(r).unwrap_or_default();
        t.check(
            "lazy: the permission fault ended the job (no retry of it)",
            (1..=2).contains(&q.faults),
            || {
                format!(
                    "{} faults on the context: a permission fault was answered RETRY",
                    q.faults
                )
            },
        );
    }
    let _ = n.ctx_destroy(r);
}

/// Hang: a semaphore never written. Timeout, reset, guilty/innocent.
fn hang(t: &mut T, f: &Fx, b: u32, good: uapi::DrmVgpuCmd) {
    let (n, sem, semva, dst) = (f.n, f.sem, f.semva, f.dst);
    let h = n
        .ctx_create(uapi::CTX_PRIORITY_NORMAL, f.copy_only, 0)
        .unwrap_or(0);
    sem.write(1, 0);
    let hang = f.cmds.program(9, &[sem_wait_eq(semva + 8, 0xdead)]);
    let t0 = std::time::Instant::now();
    // An innocent context with a job still queued (behind a semaphore the
    // CPU releases after the reset) when the device is reset.
    let inno = n
        .ctx_create(uapi::CTX_PRIORITY_NORMAL, f.copy_only, 0)
        .unwrap_or(0);
    sem.write(3, 0);
    dst.write(16, 0);
    let Ok(sh) = n.submit(h, 0, &[hang], &[]) else {
        return;
    };
    let sb = n.submit(b, 0, &[good], &[]).unwrap_or(0);
    t.ok(
        "hang: innocent context's fence signals",
        n.wait(&[fence(b, 0, sb)], true, 5_000 * MS),
    );
    let before = debugfs("contexts");
    let r = n.wait(&[fence(h, 0, sh)], true, 30_000 * MS);
    println!("info hang detected and recovered after {:?}", t0.elapsed());
    // The engine reset names the hung ring, so a ring blocked in
    // SEM_WAIT is cleared without a device reset.
    let after = debugfs("contexts");
    let dev_resets = |s: &str| summary_field(s, "device_resets");
    t.check(
        "hang: engine reset clears a ring blocked on a semaphore",
        dev_resets(&after).is_some() && dev_resets(&after) == dev_resets(&before),
        || after.clone(),
    );
    // A job queued (behind a semaphore the CPU releases later) when the
    // device is reset: the ladder's device-reset rung, here with no
    // guilty context, writes it again on the new rings and its context
    // becomes innocent.
    let queued = [
        f.cmds.program(12, &[sem_wait_eq(semva + 24, 1)]),
        f.cmds.program(13, &[fill(f.dva + 128, 8, 0x1111_2222)]),
    ];
    let si = n.submit(inno, 0, &queued, &[]).unwrap_or(0);
    t.err(
        "hang: queued job pending",
        n.wait(&[fence(inno, 0, si)], true, 0),
        libc::ETIME,
    );
    let reset = std::fs::write(debugfs_path("reset_device"), "1");
    t.check("hang: device reset through debugfs", reset.is_ok(), || {
        format!("{reset:?}")
    });
    sem.write(3, 1);
    t.ok(
        "hang: innocent queued job resubmitted and completes",
        n.wait(&[fence(inno, 0, si)], true, 5_000 * MS),
    );
    t.check(
        "hang: resubmitted job ran",
        dst.read(16) == 0x1111_2222_1111_2222,
        || format!("{:#x}", dst.read(16)),
    );
    let q = n.ctx_query(inno).unwrap_or_default();
    t.check(
        "hang: queued context reported innocent",
        q.reset_status == uapi::CTX_RESET_INNOCENT && q.state == 0,
        || format!("{q:?}"),
    );
    t.check(
        "hang: hung job's fence fails with EIO",
        errno(&r) == Some(libc::EIO),
        || format!("{r:?}"),
    );
    let q = n.ctx_query(h).unwrap_or_default();
    t.check(
        "hang: hung context guilty, 1 hang",
        q.reset_status == uapi::CTX_RESET_GUILTY && q.hangs == 1,
        || format!("{q:?}"),
    );
    let sb = n.submit(b, 0, &[good], &[]).unwrap_or(0);
    t.ok(
        "hang: device works after recovery",
        n.wait(&[fence(b, 0, sb)], true, 5_000 * MS),
    );
    let q = n.ctx_query(b).unwrap_or_default();
    t.check(
        "hang: other context not guilty",
        q.reset_status != uapi::CTX_RESET_GUILTY,
        || format!("{q:?}"),
    );
    // Repeated hangs ban.
    let mut banned = false;
    for _ in 0..4 {
        match n.submit(h, 0, &[hang], &[]) {
            Ok(s) => {
                let _ = n.wait(&[fence(h, 0, s)], true, 30_000 * MS);
            }
            Err(e) => {
                banned = e.errno == libc::EIO;
                break;
            }
        }
    }
    let q = n.ctx_query(h).unwrap_or_default();
    t.check(
        "hang: repeated hangs ban the context",
        banned && q.state & uapi::CTX_STATE_BANNED != 0,
        || format!("{q:?}"),
    );
}

/// Destroy, with work in flight too; an unbind under live contexts; a
/// context left with work in flight for the file's close.
fn destroy(t: &mut T, f: &Fx, b: u32, good: uapi::DrmVgpuCmd) {
    let (n, a, sem, semva) = (f.n, f.a, f.sem, f.semva);
    t.ok("ctx: destroy", n.ctx_destroy(b));
    t.err("ctx: destroy twice", n.ctx_destroy(b), libc::ENOENT);
    t.err(
        "ctx: submit after destroy",
        n.submit(b, 0, &[good], &[]),
        libc::ENOENT,
    );
    t.err(
        "ctx: wait after destroy",
        n.wait(&[fence(b, 0, 1)], true, 0),
        libc::ENOENT,
    );
    t.err("ctx: query after destroy", n.ctx_query(b), libc::ENOENT);
    let mut raw = uapi::DrmVgpuCtxDestroy { ctx_id: a, pad: 1 };
    // SAFETY: CTX_DESTROY carries no user pointers.
    let r = unsafe { n.ioctl_raw(&mut raw) };
    t.err("ctx: destroy pad", r, libc::EINVAL);
    // Destroy with work in flight: blocked job, then destroy (BUSY path).
    let d = n
        .ctx_create(uapi::CTX_PRIORITY_LOW, f.copy_only, 0)
        .unwrap_or(0);
    sem.write(2, 0);
    if let Ok(sd) = n.submit(
        d,
        0,
        &[f.cmds.program(10, &[sem_wait_eq(semva + 16, 5)])],
        &[],
    ) {
        t.ok("ctx: destroy with work in flight", n.ctx_destroy(d));
        t.err(
            "ctx: its fence is gone with it",
            n.wait(&[fence(d, 0, sd)], true, 0),
            libc::ENOENT,
        );
    }
    // Unbind a buffer a context uses: the TLB is invalidated.
    t.ok("vm: unbind with live contexts", n.vm_unbind(f.dva, f.size));
    // File closes (in the caller) with contexts and work in flight.
    let e = n
        .ctx_create(uapi::CTX_PRIORITY_LOW, f.copy_only, 0)
        .unwrap_or(0);
    let _ = n.submit(
        e,
        0,
        &[f.cmds.program(11, &[sem_wait_eq(semva + 24, 9)])],
        &[],
    );
}
