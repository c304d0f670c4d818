//! `FENCE_EXPORT`: sync_file fds that signal with the job, carry its error,
//! are cancelled with the context or the file, and a table of bad arguments.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;

use vgpu_umd::uapi;

use crate::debugfs::ring_state;
use crate::node::{fence, fill, open, scratch, sem_wait_eq, Map, Scratch, MS, PAGE};
use crate::report::T;

/// A sync_file's status: 1 signalled, 0 active, < 0 the error it
/// completed with (the UMD's reading of `SYNC_IOC_FILE_INFO`; -1000 if the
/// ioctl failed).
fn sync_status(fd: &OwnedFd) -> i32 {
    vgpu_umd::sync::sync_file_status(fd.as_raw_fd())
}

/// Whether `fd` polls readable within `ms`.
fn poll_ready(fd: &OwnedFd, ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut p, 1, ms) == 1 && p.revents & libc::POLLIN != 0 }
}

/// `FENCE_EXPORT`: sync_file fds that signal with the job, carry its error,
/// are cancelled when the context or the file goes, and a table of bad
/// arguments.
pub fn test_fence_export(t: &mut T, path: &Path) {
    let n = open(path);
    let Scratch {
        cmds,
        data: hd,
        dva,
        start,
    } = scratch(&n, 0x500_0000, 1);
    let data = Map::new(&n, hd, PAGE).expect("mmap");
    let export = |ctx: u32, engine: u32, seqno: u64| n.fence_export(fence(ctx, engine, seqno));
    let a = n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1, 0).unwrap_or(0);
    // A job held by a semaphore (in the data BO) the CPU releases later.
    data.write(0, 0);
    // (Gen 2 needs a FILL 64-byte aligned: each packet in its own slot.)
    let held = [
        cmds.program(0, &[sem_wait_eq(dva, 1)]),
        cmds.program(5, &[fill(dva + 64, 8, 0x1234_5678)]),
    ];
    let Some(sa) = t.ok("export: submit held job", n.submit(a, 0, &held, &[])) else {
        return;
    };
    let Some(fa) = t.ok("export: pending fence", export(a, 0, sa)) else {
        return;
    };
    t.check(
        "export: pending fd not ready, status 0",
        !poll_ready(&fa, 0) && sync_status(&fa) == 0,
        || format!("{:?}", sync_status(&fa)),
    );
    // Bad arguments.
    let b = n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1, 0).unwrap_or(0);
    let mut flags = uapi::DrmVgpuFenceExport {
        fence: fence(a, 0, sa),
        flags: 1,
        fd: -1,
    };
    // SAFETY: FENCE_EXPORT carries no user pointers.
    let flags = unsafe { n.ioctl_raw(&mut flags) };
    for (name, r, want) in [
        ("flags 1", flags, libc::EINVAL),
        ("seqno 0", export(a, 0, 0).map(drop), libc::EINVAL),
        (
            "seqno not submitted",
            export(a, 0, sa + 1).map(drop),
            libc::EINVAL,
        ),
        (
            "engine without a ring",
            export(a, 1, sa).map(drop),
            libc::EINVAL,
        ),
        ("engine 7", export(a, 7, sa).map(drop), libc::EINVAL),
        (
            "unknown context",
            export(0xdead, 0, 1).map(drop),
            libc::ENOENT,
        ),
        (
            "context of no submits",
            export(b, 0, 1).map(drop),
            libc::EINVAL,
        ),
    ] {
        t.err(&format!("export: {name}"), r, want);
    }
    // A completed job: a signalled fd.
    let done = cmds.program(1, &[fill(dva + 128, 8, 7)]);
    let sb = n.submit(b, 0, &[done], &[]).unwrap_or(0);
    let _ = n.wait(&[fence(b, 0, sb)], true, 5_000 * MS);
    let left = ring_state(b, 0).map(|(.., jobs)| jobs);
    t.check(
        "export: a completed job leaves the ring's job list",
        left == Some(0),
        || format!("debugfs contexts: {left:?} jobs still on the ring after its fence signalled"),
    );
    if let Some(fb) = t.ok("export: completed fence", export(b, 0, sb)) {
        t.check(
            "export: completed fd ready, status 1",
            poll_ready(&fb, 0) && sync_status(&fb) == 1,
            || format!("{:?}", sync_status(&fb)),
        );
        drop(fb);
    }
    // Release the semaphore: the pending fd signals with the job.
    data.write(0, 1);
    t.check(
        "export: fd signals when the job completes",
        poll_ready(&fa, 5_000) && sync_status(&fa) == 1,
        || format!("{:?}", sync_status(&fa)),
    );
    t.check(
        "export: the job ran",
        data.read(8) == 0x1234_5678_1234_5678,
        || format!("{:#x}", data.read(8)),
    );
    drop(fa);
    // A job that faults (FILL to an unmapped VA): the fd completes with
    // -EIO.
    let c = n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1, 0).unwrap_or(0);
    data.write(0, 0);
    let bad = [
        cmds.program(2, &[sem_wait_eq(dva, 1)]),
        cmds.program(6, &[fill(start + 0x7000_0000, 8, 1)]),
    ];
    let sc = n.submit(c, 0, &bad, &[]).unwrap_or(0);
    if let Some(fc) = t.ok("export: fence of a faulting job", export(c, 0, sc)) {
        data.write(0, 1);
        t.check(
            "export: faulting job's fd completes with EIO",
            poll_ready(&fc, 5_000) && sync_status(&fc) == -libc::EIO,
            || format!("{:?}", sync_status(&fc)),
        );
        drop(fc);
    }
    // Destroying the context cancels its pending fence.
    data.write(0, 0);
    let held = cmds.program(3, &[sem_wait_eq(dva, 2)]);
    let sa2 = n.submit(a, 0, &[held], &[]).unwrap_or(0);
    if let Some(fd) = t.ok("export: another pending fence", export(a, 0, sa2)) {
        let _ = n.ctx_destroy(a);
        t.check(
            "export: context destroy cancels the fd",
            poll_ready(&fd, 1_000) && sync_status(&fd) == -libc::ECANCELED,
            || format!("{:?}", sync_status(&fd)),
        );
        drop(fd);
    }
    // The fd outlives the render node: closing the file cancels the fence,
    // the fd stays usable.
    let held = cmds.program(4, &[sem_wait_eq(dva, 3)]);
    let sb2 = n.submit(b, 0, &[held], &[]).unwrap_or(0);
    let kept = t.ok("export: fence kept past close", export(b, 0, sb2));
    drop(cmds);
    drop(data);
    drop(n);
    if let Some(fd) = kept {
        t.check(
            "export: closing the file cancels the fd, which stays usable",
            poll_ready(&fd, 1_000) && sync_status(&fd) == -libc::ECANCELED,
            || format!("{:?}", sync_status(&fd)),
        );
        drop(fd);
    }
}
