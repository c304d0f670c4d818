//! DRM sync objects on the vgpu render node, IGT-style (`syncobj_basic`,
//! `syncobj_wait`, `syncobj_timeline`): the node advertises them, the
//! generic ioctls work, and vgpu jobs signal them (`SUBMIT`'s out_syncs) and
//! wait for them (in_syncs) — binary and timeline, waits any/all with
//! timeouts, points signalled out of order, wait-for-submit, transfers
//! between binary and timeline, sync_file export and import, and a job's
//! out-syncobj carrying `-EIO` after an injected hang (section
//! `syncobj-hang`, run with the device's `--inject hang:...`).

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

use vgpu_umd::kmd::{Kmd, KmdError, SubmitSyncs};
use vgpu_umd::sync::sync_file_status;
use vgpu_umd::uapi;

use crate::node::{fence, fill, open, scratch, sem_wait_eq, Cmds, Map, Scratch, MS, PAGE};
use crate::report::T;

/// The host's `CLOCK_MONOTONIC` in ns (the syncobj waits' absolute clock).
pub fn now_ns() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

/// The absolute deadline `ms` from now.
pub fn in_ms(ms: i64) -> i64 {
    now_ns() + ms * 1_000_000
}

/// A binary (`point` 0) or timeline sync object as an in/out sync.
pub fn sync(handle: u32, point: u64) -> uapi::DrmVgpuSync {
    uapi::DrmVgpuSync {
        handle,
        flags: 0,
        point,
    }
}

/// Submits `cmds` on engine 0 of `ctx` with in/out syncs.
pub fn submit_s(
    n: &Kmd,
    ctx: u32,
    cmds: &[uapi::DrmVgpuCmd],
    ins: &[uapi::DrmVgpuSync],
    outs: &[uapi::DrmVgpuSync],
) -> Result<u64, KmdError> {
    n.submit_syncs(
        ctx,
        0,
        cmds,
        &[],
        SubmitSyncs {
            ins,
            outs,
            bos: &[],
        },
    )
}

/// The sync_file of a binary syncobj's fence.
pub fn sync_file_of(n: &Kmd, handle: u32) -> Result<OwnedFd, KmdError> {
    n.syncobj_handle_to_fd(handle, uapi::SYNCOBJ_HANDLE_TO_FD_EXPORT_SYNC_FILE)
}

/// The status of (`handle`, `point`)'s fence through a temporary binary
/// syncobj's sync_file: 1 signalled, 0 pending, < 0 its error.
pub fn point_status(n: &Kmd, handle: u32, point: u64) -> i32 {
    let Ok(tmp) = n.syncobj_create(0) else {
        return -1000;
    };
    let s = match n
        .syncobj_transfer(handle, point, tmp, 0, 0)
        .and_then(|()| sync_file_of(n, tmp))
    {
        Ok(fd) => sync_file_status(fd.as_raw_fd()),
        Err(_) => -1000,
    };
    let _ = n.syncobj_destroy(tmp);
    s
}

/// A job on `ctx` that waits until the word at `semva` equals `value`, then
/// fills 8 bytes at `dst` with `pattern`: slot `slot` of `cmds`.
pub fn held_job(
    cmds: &Cmds,
    slot: usize,
    semva: u64,
    value: u64,
    dst: u64,
    pattern: u32,
) -> [uapi::DrmVgpuCmd; 2] {
    [
        cmds.program(slot, &[sem_wait_eq(semva, value)]),
        cmds.program(slot + 1, &[fill(dst, 8, pattern)]),
    ]
}

/// What the parts of [`test_syncobj`] share: the file, the command
/// buffers, the data BO (word 0 the semaphore the held jobs wait on) and
/// where it is bound, three contexts.
struct Sx<'a> {
    n: &'a Kmd,
    cmds: &'a Cmds,
    data: &'a Map,
    dva: u64,
    ctxs: &'a [u32],
}

/// Syncobjs: creation, waits, timelines, transfers, sync_files, and vgpu
/// jobs as their signallers and waiters.
pub fn test_syncobj(t: &mut T, path: &Path) {
    let n = open(path);
    caps(t, &n);
    let Some((sig, empty)) = create_destroy(t, &n) else {
        return;
    };

    let Scratch {
        cmds,
        data: hd,
        dva,
        ..
    } = scratch(&n, 0x700_0000, 1);
    let data = Map::new(&n, hd, PAGE).expect("mmap");
    data.write(0, 0);
    let ctxs: Vec<u32> = (0..3)
        .map(|_| n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1, 0).unwrap_or(0))
        .collect();
    let good = cmds.program(30, &[fill(dva + 512, 8, 7)]);
    let f = Sx {
        n: &n,
        cmds: &cmds,
        data: &data,
        dva,
        ctxs: &ctxs,
    };

    binary_out_sync(t, &f, sig);
    let tl = timeline_out_of_order(t, &f);
    wait_for_submit(t, &f, path);
    transfers(t, &f);
    sync_file_import(t, &f);
    bad_syncs(t, &f, good, [sig, empty, tl]);
    for c in ctxs {
        let _ = n.ctx_destroy(c);
    }
    let _ = cmds;
}

/// The node advertises sync objects and PRIME.
fn caps(t: &mut T, n: &Kmd) {
    t.check(
        "syncobj: DRM_CAP_SYNCOBJ",
        n.get_cap(uapi::DRM_CAP_SYNCOBJ) == Ok(1),
        || format!("{:?}", n.get_cap(uapi::DRM_CAP_SYNCOBJ)),
    );
    t.check(
        "syncobj: DRM_CAP_SYNCOBJ_TIMELINE",
        n.get_cap(uapi::DRM_CAP_SYNCOBJ_TIMELINE) == Ok(1),
        || format!("{:?}", n.get_cap(uapi::DRM_CAP_SYNCOBJ_TIMELINE)),
    );
    let prime = uapi::DRM_PRIME_CAP_IMPORT | uapi::DRM_PRIME_CAP_EXPORT;
    t.check(
        "syncobj: DRM_CAP_PRIME import and export",
        n.get_cap(uapi::DRM_CAP_PRIME)
            .is_ok_and(|v| v & prime == prime),
        || format!("{:?}", n.get_cap(uapi::DRM_CAP_PRIME)),
    );
}

/// Create and destroy; a syncobj created signalled and one with no fence
/// (returned, for the later checks).
fn create_destroy(t: &mut T, n: &Kmd) -> Option<(u32, u32)> {
    let a = t.ok("syncobj: create", n.syncobj_create(0))?;
    t.ok("syncobj: destroy", n.syncobj_destroy(a));
    t.err("syncobj: destroy twice", n.syncobj_destroy(a), libc::EINVAL);
    let sig = n.syncobj_create(uapi::SYNCOBJ_CREATE_SIGNALED).unwrap_or(0);
    t.ok(
        "syncobj: created signalled waits at once",
        n.syncobj_wait(&[sig], in_ms(0), uapi::SYNCOBJ_WAIT_ALL),
    );
    let empty = n.syncobj_create(0).unwrap_or(0);
    t.err(
        "syncobj: wait on no fence without WAIT_FOR_SUBMIT",
        n.syncobj_wait(&[empty], in_ms(10), 0),
        libc::EINVAL,
    );
    Some((sig, empty))
}

/// A job's out-syncobj: binary, signalled when the job completes.
fn binary_out_sync(t: &mut T, f: &Sx, sig: u32) {
    let (n, cmds, data, dva, ctxs) = (f.n, f.cmds, f.data, f.dva, f.ctxs);
    let b = n.syncobj_create(0).unwrap_or(0);
    let job = held_job(cmds, 0, dva, 1, dva + 64, 0x1111_1111);
    let r = submit_s(n, ctxs[0], &job, &[], &[sync(b, 0)]);
    if t.ok("syncobj: submit with a binary out-sync", r).is_some() {
        t.err(
            "syncobj: wait all times out while the job is held",
            n.syncobj_wait(&[b, sig], in_ms(100), uapi::SYNCOBJ_WAIT_ALL),
            libc::ETIME,
        );
        t.check(
            "syncobj: wait any returns the signalled one",
            n.syncobj_wait(&[b, sig], in_ms(100), 0) == Ok(1),
            || format!("{:?}", n.syncobj_wait(&[b, sig], in_ms(100), 0)),
        );
        data.write(0, 1);
        t.ok(
            "syncobj: wait all after the job ran",
            n.syncobj_wait(&[b, sig], in_ms(5000), uapi::SYNCOBJ_WAIT_ALL),
        );
        t.check(
            "syncobj: the job wrote before its syncobj signalled",
            data.read(8) == 0x1111_1111_1111_1111,
            || format!("{:#x}", data.read(8)),
        );
        t.check(
            "syncobj: its sync_file says signalled",
            sync_file_of(n, b).map(|f| sync_file_status(f.as_raw_fd())) == Ok(1),
            String::new,
        );
    }
}

/// Timeline points signalled out of order by three jobs (three contexts, so
/// no ring orders them), released 3, 1, 2: a point is signalled only once
/// it and every point before it are. Returns the timeline.
fn timeline_out_of_order(t: &mut T, f: &Sx) -> u32 {
    let (n, cmds, data, dva, ctxs) = (f.n, f.cmds, f.data, f.dva, f.ctxs);
    let tl = n.syncobj_create(0).unwrap_or(0);
    data.write(0, 0);
    for (i, (&ctx, v)) in ctxs.iter().zip([11u64, 12, 13]).enumerate() {
        let job = held_job(
            cmds,
            2 + 2 * i,
            dva,
            v,
            dva + 128 + 8 * i as u64,
            0x2000 + i as u32,
        );
        t.ok(
            &format!("syncobj: timeline point {} by a held job", i + 1),
            submit_s(n, ctx, &job, &[], &[sync(tl, i as u64 + 1)]),
        );
    }
    let query = |n: &Kmd| n.syncobj_query(&[tl], 0).map(|v| v[0]).unwrap_or(u64::MAX);
    t.check("syncobj: timeline at 0 while held", query(n) == 0, || {
        format!("{}", query(n))
    });
    data.write(0, 13);
    std::thread::sleep(Duration::from_millis(300));
    t.check(
        "syncobj: point 3 alone leaves the timeline at 0",
        query(n) == 0,
        || format!("{}", query(n)),
    );
    t.err(
        "syncobj: waiting for point 3 times out before 1 and 2",
        n.syncobj_timeline_wait(&[tl], &[3], in_ms(100), uapi::SYNCOBJ_WAIT_ALL),
        libc::ETIME,
    );
    data.write(0, 11);
    t.ok(
        "syncobj: point 1 signals",
        n.syncobj_timeline_wait(&[tl], &[1], in_ms(5000), uapi::SYNCOBJ_WAIT_ALL),
    );
    t.check("syncobj: timeline at 1", query(n) == 1, || {
        format!("{}", query(n))
    });
    data.write(0, 12);
    t.ok(
        "syncobj: point 3 signals after 2",
        n.syncobj_timeline_wait(&[tl], &[3], in_ms(5000), uapi::SYNCOBJ_WAIT_ALL),
    );
    t.check("syncobj: timeline at 3", query(n) == 3, || {
        format!("{}", query(n))
    });
    tl
}

/// Wait-for-submit: a waiter blocks on a syncobj with no fence until a job
/// is submitted with it as an out-sync, then until the job ran.
fn wait_for_submit(t: &mut T, f: &Sx, path: &Path) {
    let (n, cmds, data, dva, ctxs) = (f.n, f.cmds, f.data, f.dva, f.ctxs);
    let w = n.syncobj_create(0).unwrap_or(0);
    let wt = n.syncobj_create(0).unwrap_or(0);
    data.write(0, 0);
    // Set just before the submit: a wait that returns sees it set, unless
    // it returned before the submit.
    let submitted = Arc::new(AtomicBool::new(false));
    let waiter = {
        let path = path.to_path_buf();
        let submitted = submitted.clone();
        let fd = n.syncobj_handle_to_fd(w, 0).ok();
        let fdt = n.syncobj_handle_to_fd(wt, 0).ok();
        std::thread::spawn(move || {
            let m = open(&path);
            let (Some(fd), Some(fdt)) = (fd, fdt) else {
                return Err("export".to_string());
            };
            let h = m
                .syncobj_fd_to_handle(fd.as_raw_fd(), 0, 0)
                .map_err(|e| e.to_string())?;
            let ht = m
                .syncobj_fd_to_handle(fdt.as_raw_fd(), 0, 0)
                .map_err(|e| e.to_string())?;
            m.syncobj_wait(
                &[h],
                in_ms(10_000),
                uapi::SYNCOBJ_WAIT_ALL | uapi::SYNCOBJ_WAIT_FOR_SUBMIT,
            )
            .map_err(|e| e.to_string())?;
            m.syncobj_timeline_wait(
                &[ht],
                &[4],
                in_ms(10_000),
                uapi::SYNCOBJ_WAIT_ALL | uapi::SYNCOBJ_WAIT_AVAILABLE,
            )
            .map_err(|e| e.to_string())?;
            Ok(submitted.load(SeqCst))
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    let job = held_job(cmds, 8, dva, 1, dva + 192, 0x3333);
    submitted.store(true, SeqCst);
    t.ok(
        "syncobj: submit signalling the awaited syncobjs",
        submit_s(n, ctxs[1], &job, &[], &[sync(w, 0), sync(wt, 4)]),
    );
    std::thread::sleep(Duration::from_millis(100));
    data.write(0, 1);
    match waiter.join() {
        Ok(Ok(after)) => t.check(
            "syncobj: wait-for-submit returned after the submit",
            after,
            || "before it".into(),
        ),
        Ok(Err(e)) => t.check(
            "syncobj: wait-for-submit returned after the submit",
            false,
            || e,
        ),
        Err(_) => t.check(
            "syncobj: wait-for-submit returned after the submit",
            false,
            || "waiter panicked".into(),
        ),
    }
}

/// Transfers: binary -> timeline point, timeline point -> binary.
fn transfers(t: &mut T, f: &Sx) {
    let (n, cmds, data, dva, ctxs) = (f.n, f.cmds, f.data, f.dva, f.ctxs);
    let bin = n.syncobj_create(0).unwrap_or(0);
    let tl2 = n.syncobj_create(0).unwrap_or(0);
    let bin2 = n.syncobj_create(0).unwrap_or(0);
    data.write(0, 0);
    let job = held_job(cmds, 10, dva, 1, dva + 256, 0x4444);
    let _ = submit_s(n, ctxs[2], &job, &[], &[sync(bin, 0)]);
    t.ok(
        "syncobj: transfer binary to timeline point 5",
        n.syncobj_transfer(bin, 0, tl2, 5, 0),
    );
    t.ok(
        "syncobj: transfer timeline point 5 to binary",
        n.syncobj_transfer(tl2, 5, bin2, 0, 0),
    );
    t.err(
        "syncobj: transferred points wait for the job",
        n.syncobj_wait(&[bin2], in_ms(100), uapi::SYNCOBJ_WAIT_ALL),
        libc::ETIME,
    );
    data.write(0, 1);
    t.ok(
        "syncobj: both transfers signal with the job",
        n.syncobj_timeline_wait(&[tl2], &[5], in_ms(5000), uapi::SYNCOBJ_WAIT_ALL)
            .and_then(|_| n.syncobj_wait(&[bin2], in_ms(5000), uapi::SYNCOBJ_WAIT_ALL)),
    );
}

/// sync_file import: a FENCE_EXPORT sync_file into a syncobj, as a job's
/// in-sync; and a job's out-syncobj exported as a sync_file.
fn sync_file_import(t: &mut T, f: &Sx) {
    let (n, cmds, data, dva, ctxs) = (f.n, f.cmds, f.data, f.dva, f.ctxs);
    data.write(0, 0);
    let job = held_job(cmds, 12, dva, 1, dva + 320, 0x5555);
    let s1 = n.submit(ctxs[0], 0, &job, &[]).unwrap_or(0);
    let imp = n.syncobj_create(0).unwrap_or(0);
    if let Some(sf) = t.ok(
        "syncobj: FENCE_EXPORT sync_file",
        n.fence_export(fence(ctxs[0], 0, s1)),
    ) {
        t.ok(
            "syncobj: import the sync_file into a syncobj",
            n.syncobj_fd_to_handle(
                sf.as_raw_fd(),
                imp,
                uapi::SYNCOBJ_FD_TO_HANDLE_IMPORT_SYNC_FILE,
            ),
        );
    }
    let out = n.syncobj_create(0).unwrap_or(0);
    data.write(8 * 50, 0);
    let dep = [cmds.program(14, &[fill(dva + 400, 8, 0x6666)])];
    let s2 = submit_s(n, ctxs[1], &dep, &[sync(imp, 0)], &[sync(out, 0)]);
    if t.ok("syncobj: submit waiting on the imported sync_file", s2)
        .is_some()
    {
        std::thread::sleep(Duration::from_millis(200));
        t.check(
            "syncobj: the dependent job waits in the KMD",
            data.read(50) == 0,
            || format!("{:#x}", data.read(50)),
        );
        let sf = sync_file_of(n, out);
        t.check(
            "syncobj: its exported sync_file is pending",
            sf.as_ref().map(|f| sync_file_status(f.as_raw_fd())) == Ok(0),
            String::new,
        );
        data.write(0, 1);
        t.ok(
            "syncobj: it runs after the imported fence",
            n.syncobj_wait(&[out], in_ms(5000), uapi::SYNCOBJ_WAIT_ALL),
        );
        t.check(
            "syncobj: the exported sync_file signalled",
            sf.as_ref().map(|f| sync_file_status(f.as_raw_fd())) == Ok(1),
            String::new,
        );
        t.check(
            "syncobj: the dependent job wrote",
            data.read(50) == 0x6666_0000_6666,
            || format!("{:#x}", data.read(50)),
        );
    }
}

/// Bad syncs: an unknown handle, flags, a point not submitted (`good` a
/// valid job; the syncobjs created signalled, with no fence, the timeline).
fn bad_syncs(t: &mut T, f: &Sx, good: uapi::DrmVgpuCmd, [sig, empty, tl]: [u32; 3]) {
    let (n, ctxs) = (f.n, f.ctxs);
    t.err(
        "syncobj: in-sync of an unknown handle",
        submit_s(n, ctxs[0], &[good], &[sync(0xdead, 0)], &[]),
        libc::ENOENT,
    );
    t.err(
        "syncobj: out-sync of an unknown handle",
        submit_s(n, ctxs[0], &[good], &[], &[sync(0xdead, 0)]),
        libc::ENOENT,
    );
    t.err(
        "syncobj: in-sync with no fence",
        submit_s(n, ctxs[0], &[good], &[sync(empty, 0)], &[]),
        libc::EINVAL,
    );
    t.err(
        "syncobj: in-sync on a point not submitted",
        submit_s(n, ctxs[0], &[good], &[sync(tl, 99)], &[]),
        libc::EINVAL,
    );
    let mut bad = sync(sig, 0);
    bad.flags = 1;
    t.err(
        "syncobj: sync flags",
        submit_s(n, ctxs[0], &[good], &[bad], &[]),
        libc::EINVAL,
    );
    let many = vec![sync(sig, 0); uapi::SUBMIT_MAX_SYNCS as usize + 1];
    t.err(
        "syncobj: too many in-syncs",
        submit_s(n, ctxs[0], &[good], &many, &[]),
        libc::EINVAL,
    );
}

/// A job's out-syncobj after an injected hang (`--inject hang:...` on the
/// copy engine, `job_timeout_ms` short): the hang check resets the engine
/// and the syncobj's fence signals with `-EIO`, which its waiters see.
pub fn test_syncobj_hang(t: &mut T, path: &Path) {
    let n = open(path);
    let Scratch { cmds, dva, .. } = scratch(&n, 0x780_0000, 1);
    let ctx = n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1, 0).unwrap_or(0);
    let out = n.syncobj_create(0).unwrap_or(0);
    let tl = n.syncobj_create(0).unwrap_or(0);
    let job = [cmds.program(0, &[crate::node::copy(dva, dva + 2048, 64)])];
    let r = submit_s(&n, ctx, &job, &[], &[sync(out, 0), sync(tl, 1)]);
    if t.ok("syncobj-hang: submit the job that hangs", r).is_none() {
        return;
    }
    t.ok(
        "syncobj-hang: the out-syncobj signals after the reset",
        n.syncobj_wait(&[out], in_ms(30_000), uapi::SYNCOBJ_WAIT_ALL),
    );
    let st = sync_file_of(&n, out).map(|f| sync_file_status(f.as_raw_fd()));
    t.check(
        "syncobj-hang: its fence carries -EIO",
        st == Ok(-libc::EIO),
        || format!("{st:?}"),
    );
    let pt = point_status(&n, tl, 1);
    t.check(
        "syncobj-hang: the timeline point carries -EIO",
        pt == -libc::EIO,
        || format!("{pt}"),
    );
    let q = n.ctx_query(ctx).map(|q| (q.reset_status, q.hangs));
    t.check(
        "syncobj-hang: the context is guilty of one hang",
        q == Ok((uapi::CTX_RESET_GUILTY, 1)),
        || format!("{q:?}"),
    );
    let _ = n.wait(&[fence(ctx, 0, 1)], true, 100 * MS);
}
