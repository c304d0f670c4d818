//! The KMD's job queue: a job depending on another file's fence runs only
//! after it; 1,000 jobs queued behind a blocked one on a 16 KiB ring all
//! complete, in order, with no `EAGAIN`; a job whose dependency never
//! signals (a sw_sync fence) waits in the queue and is cancelled when its
//! context goes; debugfs `queues` shows what waits.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::time::Duration;

use vgpu_hwif::packet::{self, Packet};
use vgpu_umd::kmd::Kmd;
use vgpu_umd::sync::sync_file_status;
use vgpu_umd::uapi;

use crate::debugfs::debugfs;
use crate::node::{fence, fill, open, scratch, sem_wait_eq, Cmds, Map, Scratch, MS, PAGE};
use crate::report::T;
use crate::syncobj::{held_job, in_ms, submit_s, sync, sync_file_of};

/// `struct sw_sync_create_fence_data` (drivers/dma-buf/sw_sync.c).
#[repr(C)]
struct SwSyncCreateFence {
    value: u32,
    name: [u8; 32],
    fence: i32,
}

/// `SW_SYNC_IOC_CREATE_FENCE` = `_IOWR('W', 0, struct sw_sync_create_fence_data)`.
const SW_SYNC_IOC_CREATE_FENCE: u32 = uapi::ioc(3, b'W' as u32, 0, size_of::<SwSyncCreateFence>());
/// `SW_SYNC_IOC_INC` = `_IOW('W', 1, __u32)`.
const SW_SYNC_IOC_INC: u32 = uapi::ioc(1, b'W' as u32, 1, 4);

/// A sw_sync timeline (debugfs `sync/sw_sync`): fences the test signals.
pub struct SwSync(OwnedFd);

impl SwSync {
    /// A new timeline at 0, if sw_sync is there.
    pub fn new() -> Option<SwSync> {
        // SAFETY: a plain open(2) of a path; the fd is owned below.
        let fd = unsafe {
            libc::open(
                c"/sys/kernel/debug/sync/sw_sync".as_ptr(),
                libc::O_RDWR | libc::O_CLOEXEC,
            )
        };
        // SAFETY: `fd` is a fresh descriptor nothing else owns.
        (fd >= 0).then(|| SwSync(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// A sync_file that signals when the timeline reaches `value`.
    pub fn fence(&self, value: u32) -> Option<OwnedFd> {
        let mut a = SwSyncCreateFence {
            value,
            name: [0; 32],
            fence: -1,
        };
        // SAFETY: the ioctl fills one `sw_sync_create_fence_data`.
        let r = unsafe { libc::ioctl(self.0.as_raw_fd(), SW_SYNC_IOC_CREATE_FENCE as _, &mut a) };
        // SAFETY: on success `fence` is a new descriptor for us.
        (r == 0).then(|| unsafe { OwnedFd::from_raw_fd(a.fence) })
    }

    /// Advances the timeline by `n`.
    pub fn inc(&self, n: u32) -> bool {
        let v = n;
        // SAFETY: the ioctl reads one u32.
        unsafe { libc::ioctl(self.0.as_raw_fd(), SW_SYNC_IOC_INC as _, &v) == 0 }
    }
}

/// The debugfs `queues` line of (ctx, engine 0).
fn queue_line(ctx: u32) -> String {
    let key = format!("ctx {ctx} ");
    debugfs("queues")
        .lines()
        .find(|l| l.starts_with(&key) && l.contains(" engine 0 "))
        .unwrap_or_default()
        .to_string()
}

/// One file's side: the file, its command buffers, a data BO (mapped) and
/// where it is bound.
struct Side<'a> {
    n: &'a Kmd,
    cmds: &'a Cmds,
    data: &'a Map,
    dva: u64,
}

pub fn test_queue(t: &mut T, path: &Path) {
    let n = open(path);
    let Scratch {
        cmds,
        data: hd,
        dva,
        ..
    } = scratch(&n, 0x800_0000, 1);
    let data = Map::new(&n, hd, PAGE).expect("mmap");
    data.write(0, 0);
    let b = Side {
        n: &n,
        cmds: &cmds,
        data: &data,
        dva,
    };

    // Another file's fence: file A's job is held by a semaphore; file B's
    // job waits for A's out-syncobj (exported, imported into B) in B's
    // queue, and runs only after A's. (A's mappings stay to the end.)
    let a = open(path);
    let Scratch {
        cmds: acmds,
        data: ahd,
        dva: adva,
        ..
    } = scratch(&a, 0x880_0000, 1);
    let adata = Map::new(&a, ahd, PAGE).expect("mmap");
    adata.write(0, 0);
    let a_side = Side {
        n: &a,
        cmds: &acmds,
        data: &adata,
        dva: adva,
    };
    let bctx = another_files_fence(t, &b, &a_side);
    drop(a);

    let (ctx, _big) = in_order(t, &b);

    // A dependency that never signals (a sw_sync fence): the job waits in
    // the queue, is not a hang, and is cancelled with its context.
    let Some(sw) = SwSync::new() else {
        t.check("queue: sw_sync available", false, || {
            "no /sys/kernel/debug/sync/sw_sync".into()
        });
        return;
    };
    never_signals(t, &b, &sw);
    let _sf = closing_the_file(t, &sw, path);
    let _ = in_ms(0);
    let _ = n.ctx_destroy(bctx);
    let _ = n.ctx_destroy(ctx);
}

/// File B's job waits for file A's held job's out-syncobj, imported into
/// B, and runs only after it. Returns B's context.
fn another_files_fence(t: &mut T, b: &Side, a_side: &Side) -> u32 {
    let (n, cmds, data, dva) = (b.n, b.cmds, b.data, b.dva);
    let (a, acmds, adata, adva) = (a_side.n, a_side.cmds, a_side.data, a_side.dva);
    let actx = a.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1, 0).unwrap_or(0);
    let asyn = a.syncobj_create(0).unwrap_or(0);
    let ajob = held_job(acmds, 0, adva, 1, adva + 64, 0xa1a1);
    let sa = submit_s(a, actx, &ajob, &[], &[sync(asyn, 0)]);
    t.ok("queue: file A's held job", sa);
    let bsyn = a
        .syncobj_handle_to_fd(asyn, 0)
        .and_then(|fd| n.syncobj_fd_to_handle(fd.as_raw_fd(), 0, 0));
    let bsyn = t
        .ok("queue: A's syncobj imported into file B", bsyn)
        .unwrap_or(0);
    let bctx = n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1, 0).unwrap_or(0);
    let bjob = [cmds.program(0, &[fill(dva + 64, 8, 0xb2b2)])];
    let sb = submit_s(n, bctx, &bjob, &[sync(bsyn, 0)], &[]);
    if let Some(sb) = t.ok("queue: file B's job depending on A's fence", sb) {
        std::thread::sleep(Duration::from_millis(300));
        t.err(
            "queue: B's job waits while A's is held",
            n.wait(&[fence(bctx, 0, sb)], true, 100 * MS),
            libc::ETIME,
        );
        t.check("queue: B's job did not run", data.read(8) == 0, || {
            format!("{:#x}", data.read(8))
        });
        let l = queue_line(bctx);
        t.check(
            "queue: debugfs shows it queued, waiting for one fence",
            l.contains(" queued 1 ") && l.contains(" head_waits 1 "),
            || l.clone(),
        );
        adata.write(0, 1);
        t.ok(
            "queue: B's job completes after A's",
            n.wait(&[fence(bctx, 0, sb)], true, 5_000 * MS),
        );
        t.check(
            "queue: A's job had completed",
            adata.read(8) == 0xa1a1_0000_a1a1,
            || format!("{:#x}", adata.read(8)),
        );
        t.check(
            "queue: B's job ran",
            data.read(8) == 0xb2b2_0000_b2b2,
            || format!("{:#x}", data.read(8)),
        );
    }
    let _ = a.ctx_destroy(actx);
    bctx
}

/// 1,000 jobs queued behind a blocked one on the 16 KiB ring (which holds
/// a few hundred): no EAGAIN, and they run in submission order — job i
/// waits until the counter is i, then sets it to i + 1 (out of order, one
/// would wait forever). Returns the context and the command buffers (kept
/// to the end).
fn in_order(t: &mut T, b: &Side) -> (u32, Cmds) {
    let (n, cmds, data, dva) = (b.n, b.cmds, b.data, b.dva);
    let jobs = 1000usize;
    let big = Cmds::new(n, dva + 0x100_0000, 64).expect("command buffers");
    let ctx = n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1, 0).unwrap_or(0);
    data.write(0, 0);
    data.write(1, 0);
    let counter = dva + 8;
    let blk = n
        .submit(ctx, 0, &[cmds.program(2, &[sem_wait_eq(dva, 1)])], &[])
        .unwrap_or(0);
    let mut refused = None;
    let mut last = blk;
    for i in 0..jobs {
        let prog = big.program(
            i,
            &[
                sem_wait_eq(counter, i as u64),
                Packet::SemSignal {
                    va: counter,
                    value: i as u64 + 1,
                    op: packet::SEM_SIGNAL_WRITE,
                },
            ],
        );
        match n.submit(ctx, 0, &[prog], &[]) {
            Ok(s) => last = s,
            Err(e) => {
                refused = Some((i, e));
                break;
            }
        }
    }
    t.check(
        "queue: 1000 jobs queued on a small ring, no EAGAIN",
        refused.is_none(),
        || format!("{refused:?}"),
    );
    let l = queue_line(ctx);
    t.check(
        "queue: debugfs shows jobs waiting in the KMD for ring space",
        l.split_whitespace()
            .skip_while(|w| *w != "queued")
            .nth(1)
            .and_then(|v| v.parse::<usize>().ok())
            .is_some_and(|q| q > 0),
        || l.clone(),
    );
    data.write(0, 1);
    t.ok(
        "queue: all 1000 complete",
        n.wait(&[fence(ctx, 0, last)], true, 120_000 * MS),
    );
    t.check(
        "queue: they ran in order",
        data.read(1) == jobs as u64,
        || format!("counter {} of {jobs}", data.read(1)),
    );
    t.check(
        "queue: the last seqno is the 1001st job's",
        last == blk + jobs as u64,
        || format!("{last} after {blk}"),
    );
    (ctx, big)
}

/// A job on a fence that never signals, and one behind it, wait in the
/// queue and are cancelled when their context is destroyed.
fn never_signals(t: &mut T, b: &Side, sw: &SwSync) {
    let (n, cmds, data, dva) = (b.n, b.cmds, b.data, b.dva);
    let ctx2 = n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1, 0).unwrap_or(0);
    let never = n.syncobj_create(0).unwrap_or(0);
    let out = n.syncobj_create(0).unwrap_or(0);
    let imported = sw.fence(1).map(|f| {
        n.syncobj_fd_to_handle(
            f.as_raw_fd(),
            never,
            uapi::SYNCOBJ_FD_TO_HANDLE_IMPORT_SYNC_FILE,
        )
    });
    t.check(
        "queue: a sw_sync fence in a syncobj",
        matches!(imported, Some(Ok(_))),
        || format!("{imported:?}"),
    );
    data.write(20, 0);
    let job = [cmds.program(4, &[fill(dva + 160, 8, 0xdead)])];
    let s = submit_s(n, ctx2, &job, &[sync(never, 0)], &[sync(out, 0)]);
    if let Some(s) = t.ok("queue: submit depending on a fence that never signals", s) {
        // A job behind it on the same queue waits too (FIFO).
        let behind = [cmds.program(5, &[fill(dva + 168, 8, 0xbeef)])];
        let s_behind = n.submit(ctx2, 0, &behind, &[]).unwrap_or(0);
        let sf = sync_file_of(n, out).ok();
        std::thread::sleep(Duration::from_millis(500));
        t.err(
            "queue: the job and the one behind it wait",
            n.wait(&[fence(ctx2, 0, s_behind)], true, 100 * MS),
            libc::ETIME,
        );
        let l = queue_line(ctx2);
        t.check(
            "queue: debugfs shows both queued",
            l.contains(" queued 2 "),
            || l.clone(),
        );
        t.ok("queue: destroy the context", n.ctx_destroy(ctx2));
        let st = sf.as_ref().map(|f| sync_file_status(f.as_raw_fd()));
        t.check(
            "queue: the cancelled job's out-fence says -ECANCELED",
            st == Some(-libc::ECANCELED),
            || format!("{st:?}"),
        );
        let _ = s;
        t.check(
            "queue: neither job ran",
            data.read(20) == 0 && data.read(21) == 0,
            || format!("{:#x} {:#x}", data.read(20), data.read(21)),
        );
        let l = queue_line(ctx2);
        t.check("queue: the queue is gone", l.is_empty(), || l.clone());
        // Signalling it now reaches nobody.
        t.check("queue: sw_sync signals afterwards", sw.inc(1), String::new);
    }
}

/// The same, closing the file instead. Returns the cancelled job's
/// sync_file (kept to the end).
fn closing_the_file(t: &mut T, sw: &SwSync, path: &Path) -> Option<OwnedFd> {
    let c = open(path);
    let cctx = c.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1, 0).unwrap_or(0);
    let Scratch {
        cmds: ccmds,
        dva: cdva,
        ..
    } = scratch(&c, 0x900_0000, 1);
    let never = c.syncobj_create(0).unwrap_or(0);
    let out = c.syncobj_create(0).unwrap_or(0);
    if let Some(f) = sw.fence(5) {
        let _ = c.syncobj_fd_to_handle(
            f.as_raw_fd(),
            never,
            uapi::SYNCOBJ_FD_TO_HANDLE_IMPORT_SYNC_FILE,
        );
    }
    let job = [ccmds.program(0, &[fill(cdva, 8, 1)])];
    let queued = submit_s(&c, cctx, &job, &[sync(never, 0)], &[sync(out, 0)]);
    t.ok(
        "queue: another file's job on a fence that never signals",
        queued,
    );
    let sf = sync_file_of(&c, out).ok();
    drop(ccmds);
    drop(c);
    let st = sf.as_ref().map(|f| sync_file_status(f.as_raw_fd()));
    t.check(
        "queue: closing the file cancels it (-ECANCELED)",
        st == Some(-libc::ECANCELED),
        || format!("{st:?}"),
    );
    sf
}
