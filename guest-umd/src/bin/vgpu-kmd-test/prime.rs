//! PRIME (dma-buf) sharing: a BO exported and imported by another file is
//! the same BO; two processes share a buffer and a timeline (the consumer
//! waits on the producer's point and reads its data, by CPU and by GPU);
//! implicit fences on the shared BO (`SUBMIT`'s BO list) are what dma-buf
//! users see (`DMA_BUF_IOCTL_EXPORT_SYNC_FILE`, poll) and what a reading job
//! waits for; a foreign dma-buf (udmabuf) imports but is refused as a vgpu
//! BO.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::time::Duration;

use vgpu_umd::kmd::{Kmd, SubmitSyncs};
use vgpu_umd::sync::sync_file_status;
use vgpu_umd::uapi::{self, param};

use crate::debugfs::object;
use crate::node::{copy, fence, fill, open, sem_wait_eq, Cmds, Map, MS, PAGE};
use crate::report::T;
use crate::syncobj::{in_ms, submit_s, sync};

/// `struct dma_buf_export_sync_file` (linux/dma-buf.h).
#[repr(C)]
struct DmaBufExportSyncFile {
    flags: u32,
    fd: i32,
}

/// `DMA_BUF_IOCTL_EXPORT_SYNC_FILE` = `_IOWR('b', 2, ...)`.
const DMA_BUF_IOCTL_EXPORT_SYNC_FILE: u32 =
    uapi::ioc(3, b'b' as u32, 2, size_of::<DmaBufExportSyncFile>());
/// `DMA_BUF_SYNC_READ`: the fences a reader waits for (the writers').
const DMA_BUF_SYNC_READ: u32 = 1;

/// The implicit fences a reader of dma-buf `fd` waits for, as a sync_file.
fn implicit_fences(fd: &OwnedFd) -> Option<OwnedFd> {
    let mut a = DmaBufExportSyncFile {
        flags: DMA_BUF_SYNC_READ,
        fd: -1,
    };
    // SAFETY: the ioctl fills one struct.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), DMA_BUF_IOCTL_EXPORT_SYNC_FILE as _, &mut a) };
    // SAFETY: on success `fd` is new and ours.
    (r == 0).then(|| unsafe { OwnedFd::from_raw_fd(a.fd) })
}

/// Whether `fd` polls readable within `ms`.
fn readable(fd: &OwnedFd, ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut p, 1, ms) == 1 && p.revents & libc::POLLIN != 0 }
}

/// `struct udmabuf_create` (linux/udmabuf.h).
#[repr(C)]
struct UdmabufCreate {
    memfd: u32,
    flags: u32,
    offset: u64,
    size: u64,
}

/// `UDMABUF_CREATE` = `_IOW('u', 0x42, struct udmabuf_create)`.
const UDMABUF_CREATE: u32 = uapi::ioc(1, b'u' as u32, 0x42, size_of::<UdmabufCreate>());

/// A dma-buf of another driver: udmabuf over a sealed memfd.
fn udmabuf(size: u64) -> Option<OwnedFd> {
    // SAFETY: plain syscalls; every fd is owned below.
    unsafe {
        let mfd = libc::memfd_create(c"vgpu-test".as_ptr(), libc::MFD_ALLOW_SEALING);
        if mfd < 0 {
            return None;
        }
        let mfd = OwnedFd::from_raw_fd(mfd);
        if libc::ftruncate(mfd.as_raw_fd(), size as libc::off_t) != 0
            || libc::fcntl(mfd.as_raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_SHRINK) != 0
        {
            return None;
        }
        let dev = libc::open(c"/dev/udmabuf".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
        if dev < 0 {
            return None;
        }
        let dev = OwnedFd::from_raw_fd(dev);
        let mut a = UdmabufCreate {
            memfd: mfd.as_raw_fd() as u32,
            flags: 1, // UDMABUF_FLAGS_CLOEXEC
            offset: 0,
            size,
        };
        let fd = libc::ioctl(dev.as_raw_fd(), UDMABUF_CREATE as _, &mut a);
        (fd >= 0).then(|| OwnedFd::from_raw_fd(fd))
    }
}

/// The consumer process: imports the buffer and the timeline, waits for
/// point 1, reads the data by CPU and by GPU (a job waiting on point 2),
/// signals point 3. Returns the number of failed checks.
fn consumer(path: &Path, buf: &OwnedFd, tl: &OwnedFd, size: u64, pattern: u64) -> i32 {
    let mut failed = 0;
    let mut check = |what: &str, ok: bool| {
        println!("{} prime: consumer: {what}", if ok { "ok" } else { "FAIL" });
        failed += i32::from(!ok);
    };
    let n = open(path);
    let start = n.get_param(param::VA_START).unwrap_or(0);
    let h = n.prime_fd_to_handle(buf.as_raw_fd());
    check("import the producer's buffer", h.is_ok());
    let h = h.unwrap_or(0);
    let t = n.syncobj_fd_to_handle(tl.as_raw_fd(), 0, 0);
    check("import the producer's timeline", t.is_ok());
    let t = t.unwrap_or(0);
    let w = n.syncobj_timeline_wait(
        &[t],
        &[1],
        in_ms(30_000),
        uapi::SYNCOBJ_WAIT_ALL | uapi::SYNCOBJ_WAIT_FOR_SUBMIT,
    );
    check("wait for the producer's point 1", w.is_ok());
    let m = Map::new(&n, h, size);
    check("map the shared buffer", m.is_ok());
    if let Ok(m) = &m {
        let all = (0..(size / 8) as usize).all(|i| m.read(i) == pattern);
        check("the CPU reads the producer's data", all);
    }
    // By GPU: a copy from the shared buffer into one of our own, after
    // point 2 (which the producer signals from the host).
    let sva = start + 0x100_0000;
    let dva = start + 0x200_0000;
    let _ = n.vm_bind(h, sva, size, uapi::VM_BIND_READ);
    let hd = n.gem_create(size, 0).unwrap_or(0);
    let _ = n.vm_bind(hd, dva, size, uapi::VM_BIND_READ | uapi::VM_BIND_WRITE);
    let cmds = Cmds::new(&n, start + 0x300_0000, 1).ok();
    let ctx = n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1, 0).unwrap_or(0);
    if let Some(cmds) = &cmds {
        let job = [cmds.program(0, &[copy(sva, dva, size)])];
        // Point 2 may not be submitted yet: wait until it is.
        let _ = n.syncobj_timeline_wait(
            &[t],
            &[2],
            in_ms(30_000),
            uapi::SYNCOBJ_WAIT_ALL | uapi::SYNCOBJ_WAIT_AVAILABLE,
        );
        let s = submit_s(&n, ctx, &job, &[sync(t, 2)], &[]);
        let done = s.and_then(|s| n.wait(&[fence(ctx, 0, s)], true, 10_000 * MS));
        check("a GPU copy after point 2", done.is_ok());
        if let Ok(d) = Map::new(&n, hd, size) {
            let all = (0..(size / 8) as usize).all(|i| d.read(i) == pattern);
            check("the GPU reads the producer's data", all);
        }
    }
    check(
        "signal point 3",
        n.syncobj_timeline_signal(&[t], &[3]).is_ok(),
    );
    failed
}

/// What the parts of [`test_prime`] share: the exporting file and the
/// importing one, the exported BO (`ha` in the exporter, `hb` in the
/// importer) and its dma-buf.
struct Px<'a> {
    n: &'a Kmd,
    b: &'a Kmd,
    fd: &'a OwnedFd,
    start: u64,
    size: u64,
    ha: u32,
    hb: u32,
}

/// The importer's side: the import bound at `sva`, a BO of its own at
/// `dva` (mapped: `d`), command buffers and a context. (Fields drop in
/// order: the mapping before the command buffers.)
struct Importer {
    d: Map,
    cmds: Cmds,
    sva: u64,
    dva: u64,
    ctx: u32,
}

/// The exporter's side: the exported BO bound at `ava`, a semaphore BO at
/// `semva` (mapped: `sem`), command buffers and a context. (Fields drop in
/// order: the command buffers before the semaphore.)
struct Exporter {
    acmds: Cmds,
    sem: Map,
    semva: u64,
    ava: u64,
    actx: u32,
}

pub fn test_prime(t: &mut T, path: &Path) {
    let n = open(path);
    let start = n.get_param(param::VA_START).unwrap_or(0);
    let size = 4 * PAGE;
    let ha = n.gem_create(size, 0).unwrap_or(0);
    let ma = Map::new(&n, ha, size).expect("mmap");
    for i in 0..(size / 8) as usize {
        ma.write(i, 0x5a5a_0000_0000_0000 | i as u64);
    }

    // Another file imports the same BO.
    let Some(fd) = t.ok("prime: export a BO", n.prime_handle_to_fd(ha)) else {
        return;
    };
    // Counted after the open: a file's VM has a BO of its own (the
    // GPUVM's reservation object).
    let b = open(path);
    let hb = import_same_bo(t, &b, &fd);
    let p = Px {
        n: &n,
        b: &b,
        fd: &fd,
        start,
        size,
        ha,
        hb,
    };
    let im = importer_copies(t, &p);
    let ex = exporter(&p);
    let (write, _imp) = implicit_sync(t, &p, &im, &ex);
    bo_list_refused(t, &p, &ex, &write);
    let Some(_shared) = two_processes(t, &p, &ex, path) else {
        return;
    };
    foreign(t, &p);
    let _ = (n.ctx_destroy(ex.actx), b.ctx_destroy(im.ctx));
    let _: &Kmd = &b;
}

/// File `b` imports dma-buf `fd`: the same BO, the same handle twice.
/// Returns the handle.
fn import_same_bo(t: &mut T, b: &Kmd, fd: &OwnedFd) -> u32 {
    let bos = object("bos");
    let hb = b.prime_fd_to_handle(fd.as_raw_fd());
    let hb = t.ok("prime: another file imports it", hb).unwrap_or(0);
    t.check(
        "prime: the import is the same BO",
        object("bos") == bos,
        || format!("bos {bos} -> {}", object("bos")),
    );
    t.check(
        "prime: importing twice gives the same handle",
        b.prime_fd_to_handle(fd.as_raw_fd()) == Ok(hb),
        String::new,
    );
    hb
}

/// The importer binds the import and copies from it with its GPU: it reads
/// the exporter's data.
fn importer_copies(t: &mut T, p: &Px) -> Importer {
    let (b, hb, size) = (p.b, p.hb, p.size);
    let bstart = b.get_param(param::VA_START).unwrap_or(0);
    let sva = bstart + 0x100_0000;
    let dva = bstart + 0x200_0000;
    t.ok(
        "prime: bind the import",
        b.vm_bind(hb, sva, size, uapi::VM_BIND_READ),
    );
    let hd = b.gem_create(size, 0).unwrap_or(0);
    let _ = b.vm_bind(hd, dva, size, uapi::VM_BIND_READ | uapi::VM_BIND_WRITE);
    let bcmds = Cmds::new(b, bstart + 0x300_0000, 4).expect("cmds");
    let bctx = b.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1, 0).unwrap_or(0);
    let job = [bcmds.program(0, &[copy(sva, dva, size)])];
    let r = b
        .submit(bctx, 0, &job, &[])
        .and_then(|s| b.wait(&[fence(bctx, 0, s)], true, 5_000 * MS));
    t.ok("prime: the importer's GPU copies from it", r);
    let d = Map::new(b, hd, size).expect("mmap");
    t.check(
        "prime: and reads the exporter's data",
        (0..(size / 8) as usize).all(|i| d.read(i) == 0x5a5a_0000_0000_0000 | i as u64),
        || format!("{:#x}", d.read(0)),
    );
    Importer {
        d,
        cmds: bcmds,
        sva,
        dva,
        ctx: bctx,
    }
}

/// The exporter's semaphore, command buffers and context, the exported BO
/// bound.
fn exporter(p: &Px) -> Exporter {
    let (n, start, size, ha) = (p.n, p.start, p.size, p.ha);
    let hs = n.gem_create(PAGE, 0).unwrap_or(0);
    let semva = start + 0x400_0000;
    let ava = start + 0x500_0000;
    let _ = n.vm_bind(hs, semva, PAGE, uapi::VM_BIND_READ | uapi::VM_BIND_WRITE);
    let _ = n.vm_bind(ha, ava, size, uapi::VM_BIND_READ | uapi::VM_BIND_WRITE);
    let sem = Map::new(n, hs, PAGE).expect("mmap");
    sem.write(0, 0);
    let acmds = Cmds::new(n, start + 0x600_0000, 4).expect("cmds");
    let actx = n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1, 0).unwrap_or(0);
    Exporter {
        acmds,
        sem,
        semva,
        ava,
        actx,
    }
}

/// Implicit sync: the exporter's job writes the BO (BO list: WRITE), held
/// by a semaphore; dma-buf users see its fence; a job of the importer
/// reading the BO (BO list: READ) waits for it in the KMD. Returns the
/// writer's job and the dma-buf's implicit fence (kept to the end).
fn implicit_sync(
    t: &mut T,
    p: &Px,
    im: &Importer,
    ex: &Exporter,
) -> ([uapi::DrmVgpuCmd; 2], Option<OwnedFd>) {
    let (n, b, fd, size, ha, hb) = (p.n, p.b, p.fd, p.size, p.ha, p.hb);
    let (acmds, sem, semva, ava, actx) = (&ex.acmds, &ex.sem, ex.semva, ex.ava, ex.actx);
    let (bcmds, d, sva, dva, bctx) = (&im.cmds, &im.d, im.sva, im.dva, im.ctx);
    let write = [
        acmds.program(0, &[sem_wait_eq(semva, 1)]),
        acmds.program(1, &[fill(ava, size, 0x7777_7777)]),
    ];
    let wbo = [uapi::DrmVgpuSubmitBo {
        handle: ha,
        flags: uapi::SUBMIT_BO_WRITE,
    }];
    let sw = n.submit_syncs(
        actx,
        0,
        &write,
        &[],
        SubmitSyncs {
            bos: &wbo,
            ..Default::default()
        },
    );
    t.ok("prime: a held job writing the BO (implicit sync)", sw);
    let imp = implicit_fences(fd);
    t.check(
        "prime: the dma-buf's implicit fence is pending",
        imp.as_ref().map(|f| sync_file_status(f.as_raw_fd())) == Some(0),
        || {
            format!(
                "{:?}",
                imp.as_ref().map(|f| sync_file_status(f.as_raw_fd()))
            )
        },
    );
    t.check(
        "prime: poll on the dma-buf blocks",
        !readable(fd, 100),
        String::new,
    );
    let rbo = [uapi::DrmVgpuSubmitBo {
        handle: hb,
        flags: uapi::SUBMIT_BO_READ,
    }];
    d.write(0, 0);
    let read = [bcmds.program(2, &[copy(sva, dva, size)])];
    let sr = b.submit_syncs(
        bctx,
        0,
        &read,
        &[],
        SubmitSyncs {
            bos: &rbo,
            ..Default::default()
        },
    );
    if let Some(sr) = t.ok("prime: the importer's job reading the BO", sr) {
        std::thread::sleep(Duration::from_millis(300));
        t.err(
            "prime: it waits for the writer's implicit fence",
            b.wait(&[fence(bctx, 0, sr)], true, 100 * MS),
            libc::ETIME,
        );
        sem.write(0, 1);
        t.ok(
            "prime: it runs after the writer",
            b.wait(&[fence(bctx, 0, sr)], true, 5_000 * MS),
        );
        t.check(
            "prime: and reads what the writer wrote",
            (0..(size / 8) as usize).all(|i| d.read(i) == 0x7777_7777_7777_7777),
            || format!("{:#x}", d.read(0)),
        );
        t.check(
            "prime: the implicit fence signalled, poll is ready",
            imp.as_ref().map(|f| sync_file_status(f.as_raw_fd())) == Some(1) && readable(fd, 1000),
            String::new,
        );
    }
    (write, imp)
}

/// The BO list's bad entries: flags 0, an unknown handle (`write`: the
/// writer's job).
fn bo_list_refused(t: &mut T, p: &Px, ex: &Exporter, write: &[uapi::DrmVgpuCmd]) {
    let (n, ha, actx) = (p.n, p.ha, ex.actx);
    let bad = [uapi::DrmVgpuSubmitBo {
        handle: ha,
        flags: 0,
    }];
    t.err(
        "prime: BO list flags 0",
        n.submit_syncs(
            actx,
            0,
            &write[1..],
            &[],
            SubmitSyncs {
                bos: &bad,
                ..Default::default()
            },
        ),
        libc::EINVAL,
    );
    let bad = [uapi::DrmVgpuSubmitBo {
        handle: 0xdead,
        flags: uapi::SUBMIT_BO_READ,
    }];
    t.err(
        "prime: BO list unknown handle",
        n.submit_syncs(
            actx,
            0,
            &write[1..],
            &[],
            SubmitSyncs {
                bos: &bad,
                ..Default::default()
            },
        ),
        libc::ENOENT,
    );
}

/// Two processes: a producer (this one) and a consumer (a child) share a
/// buffer and a timeline. Returns their dma-buf and syncobj fds (kept to
/// the end), `None` if they could not be exported.
fn two_processes(t: &mut T, p: &Px, ex: &Exporter, path: &Path) -> Option<(OwnedFd, OwnedFd)> {
    let (n, start, size) = (p.n, p.start, p.size);
    let (acmds, sem, semva, actx) = (&ex.acmds, &ex.sem, ex.semva, ex.actx);
    let hp = n.gem_create(size, 0).unwrap_or(0);
    let pva = start + 0x700_0000;
    let _ = n.vm_bind(hp, pva, size, uapi::VM_BIND_READ | uapi::VM_BIND_WRITE);
    let tl = n.syncobj_create(0).unwrap_or(0);
    let (Ok(pfd), Ok(tfd)) = (n.prime_handle_to_fd(hp), n.syncobj_handle_to_fd(tl, 0)) else {
        t.check(
            "prime: export the buffer and the timeline",
            false,
            String::new,
        );
        return None;
    };
    let pattern = 0x1357_9bdf_1357_9bdfu64;
    sem.write(0, 0);
    // SAFETY: fork in a single-threaded process; the child only uses its
    // own new file and exits without returning.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let failed = consumer(path, &pfd, &tfd, size, pattern);
        // SAFETY: leave the child at once (no atexit handlers, no unwinding
        // into the parent's state).
        unsafe { libc::_exit(failed.min(100)) };
    }
    t.check("prime: fork the consumer", pid > 0, String::new);
    // The producer's job writes the buffer, held so that the consumer
    // surely waits, and signals point 1.
    let prod = [
        acmds.program(4, &[sem_wait_eq(semva, 1)]),
        acmds.program(5, &[fill(pva, size, pattern as u32)]),
    ];
    let sp = submit_s(n, actx, &prod, &[], &[sync(tl, 1)]);
    t.ok("prime: the producer's job signals point 1", sp);
    std::thread::sleep(Duration::from_millis(500));
    sem.write(0, 1);
    let _ = n.syncobj_timeline_wait(&[tl], &[1], in_ms(10_000), uapi::SYNCOBJ_WAIT_ALL);
    t.ok(
        "prime: the producer signals point 2",
        n.syncobj_timeline_signal(&[tl], &[2]),
    );
    t.ok(
        "prime: the consumer signals point 3",
        n.syncobj_timeline_wait(
            &[tl],
            &[3],
            in_ms(30_000),
            uapi::SYNCOBJ_WAIT_ALL | uapi::SYNCOBJ_WAIT_FOR_SUBMIT,
        ),
    );
    let mut status = 0;
    // SAFETY: waits for our own child.
    let w = unsafe { libc::waitpid(pid, &mut status, 0) };
    t.check(
        "prime: the consumer saw the producer's data",
        w == pid && libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        || format!("status {status:#x}"),
    );
    Some((pfd, tfd))
}

/// A foreign dma-buf: it imports (the DRM core makes a GEM object of it),
/// but no vgpu ioctl takes it as a BO.
fn foreign(t: &mut T, p: &Px) {
    let (n, start, size) = (p.n, p.start, p.size);
    match udmabuf(size) {
        Some(u) => {
            let h = n.prime_fd_to_handle(u.as_raw_fd());
            if let Some(h) = t.ok("prime: import a udmabuf", h) {
                t.err(
                    "prime: VM_BIND of the foreign object",
                    n.vm_bind(h, start + 0x800_0000, size, uapi::VM_BIND_READ),
                    libc::EINVAL,
                );
                t.err(
                    "prime: GEM_MMAP_OFFSET of the foreign object",
                    n.gem_mmap_offset(h),
                    libc::EINVAL,
                );
                let _ = n.gem_close(h);
            }
        }
        None => t.check("prime: udmabuf available", false, || {
            "no /dev/udmabuf".into()
        }),
    }
}
