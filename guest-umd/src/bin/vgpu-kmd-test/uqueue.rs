//! User-mode queues (`UQ_CREATE`, `UQ_KICK`): a ring and a doorbell block
//! in the file's own BOs, work published by a store into the block, the
//! device's sleep and kick, fences through `WAIT` and memory, faults, hangs
//! and resets (with `job_timeout_ms=1000`).

use std::path::Path;
use std::time::{Duration, Instant};

use vgpu_hwif::packet::{self, Packet};
use vgpu_umd::kmd::{Kmd, KmdError};
use vgpu_umd::uapi::{self, param};

use crate::debugfs::debugfs_path;
use crate::node::{copy, encode, fence, open, Cmds, Map, MS, PAGE};
use crate::report::T;

const RING_PAGES: u64 = 16;
const RW: u32 = uapi::VM_BIND_READ | uapi::VM_BIND_WRITE;
const COPY: u32 = uapi::ENGINE_COPY;

/// One queue as a process drives it: the ring it writes, the block it
/// publishes through, where its fences land.
pub(crate) struct Queue {
    pub(crate) id: u32,
    ring: Cmds,
    bell: Map,
    wptr: u32,
}

impl Queue {
    /// Appends `packets` to the ring (no wrap in these tests).
    pub(crate) fn write(&mut self, packets: &[Packet]) {
        let va = self.ring.va + u64::from(self.wptr);
        let words = encode(self.ring.generation, va, packets);
        self.ring.map.write_words((self.wptr / 4) as usize, &words);
        self.wptr += 4 * words.len() as u32;
    }

    /// Stores the write pointer into the doorbell block; returns whether
    /// the device said it sleeps (then a kick is due).
    fn publish(&self) -> bool {
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        self.bell.write_u32(0, self.wptr);
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        (self.bell.read(0) >> 32) as u32 == 1
    }

    /// Publishes and kicks if the device sleeps.
    pub(crate) fn submit(&self, n: &Kmd) {
        if self.publish() {
            let _ = n.uq_kick(self.id);
        }
    }

    fn seen(&self) -> u32 {
        self.bell.read(1) as u32
    }
}

pub(crate) fn fence_packet(va: u64, seqno: u64) -> Packet {
    Packet::Fence {
        va,
        seqno,
        flags: packet::FENCE_NO_EVENT,
    }
}

fn until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + timeout;
    while Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    f()
}

/// A ring of 64 KiB (READ|EXEC) at `at`, its doorbell page (READ|WRITE)
/// 1 MiB above it.
fn parts(n: &Kmd, at: u64) -> (Cmds, Map, u64) {
    let ring = Cmds::new(n, at, RING_PAGES).expect("ring");
    let bell_va = at + 0x10_0000;
    let h = n.gem_create(PAGE, 0).expect("doorbell bo");
    n.vm_bind(h, bell_va, PAGE, RW).expect("bind doorbell");
    let bell = Map::new(n, h, PAGE).expect("map doorbell");
    (ring, bell, bell_va)
}

fn args(ring: &Cmds, bell_va: u64) -> uapi::DrmVgpuUqCreate {
    uapi::DrmVgpuUqCreate {
        priority: uapi::CTX_PRIORITY_NORMAL,
        engine: COPY,
        ring_va: ring.va,
        doorbell_va: bell_va,
        ring_size: (RING_PAGES * PAGE) as u32,
        ..Default::default()
    }
}

fn queue(t: &mut T, n: &Kmd, at: u64, what: &str) -> Option<Queue> {
    t.ok(&format!("uq: create {what}"), create_queue(n, at, COPY))
}

/// A queue on `engine` with its ring at `at` (see [`parts`]).
pub(crate) fn create_queue(n: &Kmd, at: u64, engine: u32) -> Result<Queue, KmdError> {
    let (ring, bell, bell_va) = parts(n, at);
    let id = n.uq_create(&uapi::DrmVgpuUqCreate {
        engine,
        ..args(&ring, bell_va)
    })?;
    Ok(Queue {
        id,
        ring,
        bell,
        wptr: 0,
    })
}

/// What the parts of [`test_uq`] share: the file, the data BO (16 pages)
/// and where it is bound.
struct Uq<'a> {
    n: &'a Kmd,
    start: u64,
    dva: u64,
    data: &'a Map,
}

/// `UQ_CREATE`'s argument checks, submission through the doorbell block,
/// the device's sleep and kick, `WAIT` on a queue's fences, `QUERY_STATS`,
/// a fault, and a doorbell block unbound under the device.
pub fn test_uq(t: &mut T, path: &Path) {
    let n = open(path);
    let start = n.get_param(param::VA_START).unwrap_or(0);
    let (ring, _bell, bell_va) = parts(&n, start + 0x100_0000);
    let dva = start + 0x800_0000;
    let dh = n.gem_create(16 * PAGE, 0).unwrap_or(0);
    t.ok("uq: bind data", n.vm_bind(dh, dva, 16 * PAGE, RW));
    let data = Map::new(&n, dh, 16 * PAGE).expect("map data");
    let f = Uq {
        n: &n,
        start,
        dva,
        data: &data,
    };

    create_refused(t, &f, ring, bell_va);
    let Some(mut q) = queue(t, &n, start + 0x200_0000, "a copy queue") else {
        return;
    };
    let _cmds = not_a_queue(t, &f, &q);
    store_runs_work(t, &f, &mut q);
    sleep_and_kick(t, &f, &mut q);
    many_submissions(t, &f, &mut q);
    stats_list_the_queue(t, &f, &q);
    fault(t, &f, &mut q);
    doorbell_fault(t, &f);
}

/// `UQ_CREATE`'s argument checks, against a good queue of `ring` (dropped
/// after them) and the doorbell block at `bell_va`.
fn create_refused(t: &mut T, f: &Uq, ring: Cmds, bell_va: u64) {
    let (n, start, dva) = (f.n, f.start, f.dva);
    let good = args(&ring, bell_va);
    let bad: [(&str, uapi::DrmVgpuUqCreate, i32); 12] = [
        (
            "flags",
            uapi::DrmVgpuUqCreate { flags: 1, ..good },
            libc::EINVAL,
        ),
        (
            "pad",
            uapi::DrmVgpuUqCreate { pad: 1, ..good },
            libc::EINVAL,
        ),
        (
            "priority",
            uapi::DrmVgpuUqCreate {
                priority: 9,
                ..good
            },
            libc::EINVAL,
        ),
        (
            "engine",
            uapi::DrmVgpuUqCreate { engine: 2, ..good },
            libc::EINVAL,
        ),
        (
            "ring size 0",
            uapi::DrmVgpuUqCreate {
                ring_size: 0,
                ..good
            },
            libc::EINVAL,
        ),
        (
            "ring size not a power of two",
            uapi::DrmVgpuUqCreate {
                ring_size: 12288,
                ..good
            },
            libc::EINVAL,
        ),
        (
            "ring larger than its mapping",
            uapi::DrmVgpuUqCreate {
                ring_size: 128 << 10,
                ..good
            },
            libc::EINVAL,
        ),
        (
            "ring misaligned",
            uapi::DrmVgpuUqCreate {
                ring_va: good.ring_va + 64,
                ..good
            },
            libc::EINVAL,
        ),
        (
            "doorbell misaligned",
            uapi::DrmVgpuUqCreate {
                doorbell_va: good.doorbell_va + 8,
                ..good
            },
            libc::EINVAL,
        ),
        (
            "ring not executable",
            uapi::DrmVgpuUqCreate {
                ring_va: dva,
                ..good
            },
            libc::EINVAL,
        ),
        (
            "doorbell not writable",
            uapi::DrmVgpuUqCreate {
                doorbell_va: ring.va,
                ..good
            },
            libc::EINVAL,
        ),
        (
            "ring not mapped",
            uapi::DrmVgpuUqCreate {
                ring_va: start + 0x4000_0000,
                ..good
            },
            libc::EINVAL,
        ),
    ];
    for (what, a, want) in bad {
        t.err(
            &format!("uq: create refused: {what}"),
            n.uq_create(&a),
            want,
        );
    }
    drop(ring);
}

/// The queue is a context: CTX_QUERY says so. What a queue is not: SUBMIT
/// on it, UQ_KICK on a context. Returns the command buffers used (kept to
/// the end).
fn not_a_queue(t: &mut T, f: &Uq, q: &Queue) -> Cmds {
    let (n, start, dva) = (f.n, f.start, f.dva);
    let st = n.ctx_query(q.id).map(|c| c.state).unwrap_or(0);
    t.check(
        "uq: CTX_QUERY says user queue, watched",
        st & uapi::CTX_STATE_USER_QUEUE != 0 && st & uapi::CTX_STATE_SUSPENDED == 0,
        || format!("state {st:#x}"),
    );
    // What a queue is not.
    let cmds = Cmds::new(n, start + 0x600_0000, 4).expect("cmds");
    let c = cmds.program(0, &[fence_packet(dva, 1)]);
    t.err(
        "uq: SUBMIT on a queue",
        n.submit(q.id, COPY, &[c], &[]),
        libc::EINVAL,
    );
    let ctx = n
        .ctx_create(uapi::CTX_PRIORITY_NORMAL, 1 << COPY, 0)
        .unwrap_or(0);
    t.err(
        "uq: UQ_KICK on a context that is not a queue",
        n.uq_kick(ctx),
        libc::EINVAL,
    );
    t.err("uq: UQ_KICK on no context", n.uq_kick(0x7777), libc::ENOENT);
    let _ = n.ctx_destroy(ctx);
    cmds
}

/// Work published by a store: a copy then a fence, no system call.
fn store_runs_work(t: &mut T, f: &Uq, q: &mut Queue) {
    let (n, dva, data) = (f.n, f.dva, f.data);
    for i in 0..PAGE as usize / 8 {
        data.write(i, 0x5151_0000_0000_0000 | i as u64);
    }
    q.write(&[copy(dva, dva + PAGE, PAGE), fence_packet(dva + 8 * PAGE, 1)]);
    let kicked = q.publish();
    if kicked {
        let _ = n.uq_kick(q.id);
    }
    t.check(
        "uq: a store into the doorbell block runs the work",
        until(Duration::from_secs(5), || {
            data.read(8 * PAGE as usize / 8) == 1
        }),
        || format!("fence {}", data.read(8 * PAGE as usize / 8)),
    );
    t.check(
        "uq: the copy landed",
        data.read(PAGE as usize / 8 + 3) == 0x5151_0000_0000_0003,
        || format!("{:#x}", data.read(PAGE as usize / 8 + 3)),
    );
    t.check(
        "uq: the block says what the device took",
        q.seen() == q.wptr,
        || format!("seen {:#x}, wptr {:#x}", q.seen(), q.wptr),
    );
    t.ok(
        "uq: WAIT on the queue's fence",
        n.wait(&[fence(q.id, COPY, 1)], true, 1000 * MS),
    );
    t.err(
        "uq: WAIT on a fence not reached times out",
        n.wait(&[fence(q.id, COPY, 2)], true, 20 * MS),
        libc::ETIME,
    );
    t.err(
        "uq: WAIT on another engine of the queue",
        n.wait(&[fence(q.id, uapi::ENGINE_COMPUTE, 1)], true, 0),
        libc::EINVAL,
    );
}

/// Idle: the device stops polling and says so; a store alone then runs
/// nothing until the kick.
fn sleep_and_kick(t: &mut T, f: &Uq, q: &mut Queue) {
    let (n, dva, data) = (f.n, f.dva, f.data);
    t.check(
        "uq: an idle device sleeps (the block's sleeping = 1)",
        until(Duration::from_secs(2), || (q.bell.read(0) >> 32) == 1),
        || format!("block {:#x}", q.bell.read(0)),
    );
    q.write(&[fence_packet(dva + 8 * PAGE, 2)]);
    let told = q.publish();
    std::thread::sleep(Duration::from_millis(50));
    t.check(
        "uq: a sleeping device reads no block",
        told && data.read(8 * PAGE as usize / 8) == 1,
        || {
            format!(
                "sleeping said {told}, fence {}",
                data.read(8 * PAGE as usize / 8)
            )
        },
    );
    t.ok("uq: UQ_KICK", n.uq_kick(q.id));
    t.ok(
        "uq: the kicked work runs",
        n.wait(&[fence(q.id, COPY, 2)], true, 2000 * MS),
    );
}

/// Many submissions in a row, each waited for by memory only.
fn many_submissions(t: &mut T, f: &Uq, q: &mut Queue) {
    let (n, dva, data) = (f.n, f.dva, f.data);
    let mut lost = 0;
    for s in 3..=200u64 {
        q.write(&[fence_packet(dva + 8 * PAGE, s)]);
        q.submit(n);
        if !until(Duration::from_secs(2), || {
            data.read(8 * PAGE as usize / 8) == s
        }) {
            lost += 1;
        }
    }
    t.check("uq: 198 submissions in a row, none lost", lost == 0, || {
        format!("{lost} lost")
    });
}

/// `QUERY_STATS` lists the queue with its ring's progress.
fn stats_list_the_queue(t: &mut T, f: &Uq, q: &Queue) {
    let n = f.n;
    let mut cs = vec![uapi::DrmVgpuCtxStats::default(); 64];
    let listed = n.query_stats(&mut cs).ok().and_then(|s| {
        cs.iter()
            .take(s.num_contexts as usize)
            .find(|c| c.ctx_id == q.id)
            .copied()
    });
    t.check(
        "uq: QUERY_STATS lists the queue with its ring's progress",
        listed.is_some_and(|c| {
            c.state & uapi::CTX_STATE_USER_QUEUE != 0
                && c.engines == 1 << COPY
                && c.completed[COPY as usize] == 200
        }),
        || format!("{listed:?}"),
    );
}

/// A fault: the queue errors (guilty), its WAIT fails, and the hang check
/// stops watching its doorbell.
fn fault(t: &mut T, f: &Uq, q: &mut Queue) {
    let (n, start, dva) = (f.n, f.start, f.dva);
    q.write(&[
        copy(start + 0x4000_0000, dva, PAGE),
        fence_packet(dva + 8 * PAGE, 201),
    ]);
    q.submit(n);
    t.err(
        "uq: a faulting queue's fence fails",
        n.wait(&[fence(q.id, COPY, 201)], true, 3000 * MS),
        libc::EIO,
    );
    let errored = until(Duration::from_secs(3), || {
        n.ctx_query(q.id).is_ok_and(|c| {
            c.state & uapi::CTX_STATE_ERRORED != 0
                && c.state & uapi::CTX_STATE_FAULTED != 0
                && c.state & uapi::CTX_STATE_SUSPENDED != 0
                && c.reset_status == uapi::CTX_RESET_GUILTY
        })
    });
    t.check(
        "uq: the faulting queue is errored, guilty, suspended",
        errored,
        || format!("{:?}", n.ctx_query(q.id)),
    );
    t.ok("uq: destroy the queue", n.ctx_destroy(q.id));
    t.err(
        "uq: a destroyed queue is gone",
        n.ctx_query(q.id),
        libc::ENOENT,
    );
}

/// The doorbell block unbound under the device: DOORBELL_FAULT.
fn doorbell_fault(t: &mut T, f: &Uq) {
    let (n, start) = (f.n, f.start);
    let Some(q2) = queue(t, n, start + 0x400_0000, "a second queue") else {
        return;
    };
    t.ok(
        "uq: unbind the doorbell block",
        n.vm_unbind(q2.ring.va + 0x10_0000, PAGE),
    );
    let _ = n.uq_kick(q2.id);
    let faulted = until(Duration::from_secs(3), || {
        n.ctx_query(q2.id)
            .is_ok_and(|c| c.engine_error == uapi::engine_error::DOORBELL_FAULT)
    });
    t.check(
        "uq: an unbound doorbell block stops the queue: DOORBELL_FAULT",
        faulted,
        || format!("{:?}", n.ctx_query(q2.id)),
    );
    t.ok("uq: destroy the second queue", n.ctx_destroy(q2.id));
}

/// Hangs and resets (`job_timeout_ms=1000`): a queue blocked on a
/// semaphore nobody writes is found hung, reset, guilty and suspended,
/// while another queue on the engine goes on; a device reset restarts an
/// innocent queue's pending work where its status block stood.
pub fn test_uq_hang(t: &mut T, path: &Path) {
    let n = open(path);
    let start = n.get_param(param::VA_START).unwrap_or(0);
    let dva = start + 0x800_0000;
    let dh = n.gem_create(4 * PAGE, 0).unwrap_or(0);
    t.ok("uq-hang: bind data", n.vm_bind(dh, dva, 4 * PAGE, RW));
    let data = Map::new(&n, dh, 4 * PAGE).expect("map data");
    let (Some(mut hung), Some(mut other)) = (
        queue(t, &n, start + 0x100_0000, "the queue that hangs"),
        queue(t, &n, start + 0x300_0000, "an innocent queue"),
    ) else {
        return;
    };
    let sem = dva + 0x100;
    hung.write(&[
        Packet::SemWait {
            va: sem,
            value: 1,
            op: packet::SEM_WAIT_GEQ,
        },
        fence_packet(dva, 1),
    ]);
    hung.submit(&n);
    let t0 = Instant::now();
    t.err(
        "uq-hang: the hung queue's fence fails",
        n.wait(&[fence(hung.id, COPY, 1)], true, 5000 * MS),
        libc::EIO,
    );
    let took = t0.elapsed();
    let q = n.ctx_query(hung.id);
    t.check(
        "uq-hang: found hung within the timeout: guilty, errored, suspended",
        q.as_ref().is_ok_and(|c| {
            c.reset_status == uapi::CTX_RESET_GUILTY
                && c.hangs == 1
                && c.state & uapi::CTX_STATE_ERRORED != 0
                && c.state & uapi::CTX_STATE_SUSPENDED != 0
        }) && took < Duration::from_secs(4),
        || format!("{q:?} after {took:?}"),
    );
    // Its doorbell is no longer watched: new work does not run.
    hung.write(&[fence_packet(dva + 8, 7)]);
    hung.submit(&n);
    std::thread::sleep(Duration::from_millis(100));
    t.check(
        "uq-hang: the hung queue takes no more work",
        data.read(1) != 7,
        || format!("{}", data.read(1)),
    );
    other.write(&[fence_packet(dva + 16, 1)]);
    other.submit(&n);
    t.ok(
        "uq-hang: another queue on the engine runs",
        n.wait(&[fence(other.id, COPY, 1)], true, 2000 * MS),
    );

    // A device reset with the innocent queue's work pending: blocked on a
    // semaphore, it restarts where it stood and completes once released.
    other.write(&[
        Packet::SemWait {
            va: sem + 8,
            value: 1,
            op: packet::SEM_WAIT_GEQ,
        },
        fence_packet(dva + 16, 2),
    ]);
    other.submit(&n);
    std::thread::sleep(Duration::from_millis(50));
    t.ok(
        "uq-hang: device reset (debugfs reset_device)",
        std::fs::write(debugfs_path("reset_device"), "1"),
    );
    data.write((sem + 8 - dva) as usize / 8, 1);
    t.ok(
        "uq-hang: the innocent queue's pending work completes after the reset",
        n.wait(&[fence(other.id, COPY, 2)], true, 3000 * MS),
    );
    let q = n.ctx_query(other.id);
    t.check(
        "uq-hang: the innocent queue is innocent and watched",
        q.as_ref().is_ok_and(|c| {
            c.reset_status == uapi::CTX_RESET_INNOCENT
                && c.state & (uapi::CTX_STATE_ERRORED | uapi::CTX_STATE_SUSPENDED) == 0
        }),
        || format!("{q:?}"),
    );
    other.write(&[fence_packet(dva + 16, 3)]);
    other.submit(&n);
    t.ok(
        "uq-hang: and runs new work",
        n.wait(&[fence(other.id, COPY, 3)], true, 2000 * MS),
    );
    t.ok("uq-hang: destroy the hung queue", n.ctx_destroy(hung.id));
    t.ok(
        "uq-hang: destroy the innocent queue",
        n.ctx_destroy(other.id),
    );
}
