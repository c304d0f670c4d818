//! Watched doorbells (user-mode queues), host side: a ring whose doorbell
//! is a block in the context's memory (`DOORBELL_WATCH`) runs work as soon
//! as its `wptr` changes, with no command; the watcher sleeps after its
//! poll window and then needs `DOORBELL_KICK`; the block's translation is a
//! TLB entry; an unmapped block stops the ring with `DOORBELL_FAULT`; the
//! ring restarts where `start` says; destroying the context ends the watch.

use std::time::{Duration, Instant};

use vgpu_device::config::{DeviceConfig, Generation};
use vgpu_device::testkit::{read_u64, Driver, GpuContext, InProcess, PhysAlloc};
use vgpu_hwif::event::{EngineErrorRecord, Event};
use vgpu_hwif::mmu::{PTE_READ, PTE_WRITE};
use vgpu_hwif::packet::{EngineError, Packet};
use vgpu_hwif::proto::{engine, ring_state, Command, Status, PRIORITY_NORMAL};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

const T: Duration = Duration::from_secs(10);
const RW: u64 = PTE_READ | PTE_WRITE;
const COPY: u32 = engine::COPY;
const RAM: u64 = 64 << 20;
const ALLOC: u64 = 0x10_0000;
const DB: u64 = 0x40_0000;
const FENCE_VA: u64 = 0x41_0000;
const SRC: u64 = 0x42_0000;
const DST: u64 = 0x43_0000;
/// The watcher's poll window in these tests.
const POLL: Duration = Duration::from_millis(20);

type D = Driver<InProcess>;

fn rig() -> D {
    let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), RAM as usize)]).unwrap();
    let cfg = DeviceConfig::new(Generation::Gen2, 1)
        .unwrap()
        .with_doorbell_poll(POLL);
    Driver::new(
        InProcess::new(cfg, &mem),
        mem,
        PhysAlloc::new(ALLOC, RAM - ALLOC),
    )
    .unwrap()
}

/// A context with a copy ring, a doorbell block at [`DB`] (returned: its
/// guest-physical address), a fence page, and source and destination
/// buffers; the block is watched from `start` 0.
fn queue(d: &mut D, id: u32) -> (GpuContext, u64) {
    let mut c = d.context(id, PRIORITY_NORMAL, 0).unwrap();
    d.ring(&mut c, COPY).unwrap();
    let db = d.buffer(&mut c, DB, 4096, RW).unwrap();
    d.buffer(&mut c, FENCE_VA, 4096, RW).unwrap();
    d.buffer(&mut c, SRC, 4096, RW).unwrap();
    d.buffer(&mut c, DST, 4096, RW).unwrap();
    d.command(Command::DoorbellWatch {
        ctx_id: id,
        engine: COPY,
        doorbell_va: DB,
        start: 0,
        flags: 0,
    })
    .unwrap();
    (c, db)
}

/// Writes a fence packet into the ring (no doorbell); returns the new
/// write pointer.
fn write_fence(d: &mut D, c: &mut GpuContext, seqno: u64) -> u32 {
    let r = c.ring(COPY).unwrap();
    r.writer
        .packet(
            &d.mem,
            &Packet::Fence {
                va: FENCE_VA,
                seqno,
                flags: 0,
            },
        )
        .unwrap();
    r.writer.wptr()
}

fn publish(d: &D, db: u64, wptr: u32) {
    d.mem.write_obj(wptr, GuestAddress(db)).unwrap();
}

/// Publishes `wptr` as a driver must: store it, a full barrier, then a
/// `DOORBELL_KICK` if the watcher said it sleeps.
fn submit(d: &mut D, db: u64, wptr: u32) {
    publish(d, db, wptr);
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    if sleeping(d, db) == 1 {
        d.command(Command::DoorbellKick).unwrap();
    }
}

fn sleeping(d: &D, db: u64) -> u32 {
    d.mem.read_obj::<u32>(GuestAddress(db + 4)).unwrap()
}

fn seen(d: &D, db: u64) -> u32 {
    d.mem.read_obj::<u32>(GuestAddress(db + 8)).unwrap()
}

fn fence_event(d: &mut D, ctx: u32, seqno: u64, timeout: Duration) -> bool {
    match d.event(timeout) {
        Ok(Event::Fence {
            ctx_id, seqno: s, ..
        }) => ctx_id == ctx && s == seqno,
        Ok(other) => panic!("unexpected event {other:?}"),
        Err(_) => false,
    }
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + T;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn a_watched_block_is_the_doorbell_and_the_watcher_sleeps_until_kicked() {
    let mut d = rig();
    let (mut c, db) = queue(&mut d, 1);
    // Polling: a new wptr in the block runs the work, no command sent.
    let w = write_fence(&mut d, &mut c, 1);
    publish(&d, db, w);
    assert!(fence_event(&mut d, 1, 1, T), "the fence ran");
    assert_eq!(
        read_u64(&d.mem, c.pt.translate(&d.mem, FENCE_VA).unwrap()).unwrap(),
        1
    );
    wait_until("seen", || seen(&d, db) == w);

    // Past the poll window the watcher announces that it sleeps.
    wait_until("sleeping", || sleeping(&d, db) == 1);
    // After the store of `sleeping` the watcher reads every wptr once more
    // (the protocol's race check): a wptr published in that instant is
    // rightly seen. Give that last read time to happen, on a loaded host
    // too, so that the block below is published to a watcher asleep.
    std::thread::sleep(Duration::from_millis(50));
    let w = write_fence(&mut d, &mut c, 2);
    publish(&d, db, w);
    assert!(
        !fence_event(&mut d, 1, 2, 10 * POLL),
        "a sleeping watcher reads no block"
    );
    // The kick wakes it: the block is read, the work runs, polling again.
    d.command(Command::DoorbellKick).unwrap();
    assert!(fence_event(&mut d, 1, 2, T));
    assert_eq!(sleeping(&d, db), 0, "polling after a kick");
    let s = d.settle(&c, COPY, T).unwrap();
    assert_eq!((s.rptr, s.wptr, s.state), (w, w, ring_state::IDLE));
    // The ordinary doorbell still works on a watched ring.
    let w = write_fence(&mut d, &mut c, 3);
    d.doorbell(1, COPY, w).unwrap();
    assert!(fence_event(&mut d, 1, 3, T));
}

#[test]
fn an_unmapped_block_stops_the_ring_with_doorbell_fault() {
    let mut d = rig();
    let mut c = d.context(2, PRIORITY_NORMAL, 0).unwrap();
    d.ring(&mut c, COPY).unwrap();
    // Mapped read-only: the device cannot write `sleeping`.
    d.buffer(&mut c, DB, 4096, PTE_READ).unwrap();
    d.command(Command::DoorbellWatch {
        ctx_id: 2,
        engine: COPY,
        doorbell_va: DB,
        start: 0,
        flags: 0,
    })
    .unwrap();
    match d.event(T).unwrap() {
        Event::EngineError(EngineErrorRecord {
            ctx_id,
            engine,
            code,
            packet_va,
            ..
        }) => {
            assert_eq!((ctx_id, engine), (2, COPY));
            assert_eq!(code, EngineError::DoorbellFault as u32);
            assert_eq!(packet_va, DB, "the event names the block");
        }
        other => panic!("{other:?}"),
    }
    let s = d.settle(&c, COPY, T).unwrap();
    assert_eq!(
        (s.state, s.error),
        (ring_state::STOPPED, EngineError::DoorbellFault as u32)
    );
    // Operands are checked.
    let watch = |va, start| Command::DoorbellWatch {
        ctx_id: 2,
        engine: COPY,
        doorbell_va: va,
        start,
        flags: 0,
    };
    assert_eq!(d.status(watch(DB + 4, 0)), Status::InvalidArgument);
    assert_eq!(d.status(watch(1 << 50, 0)), Status::InvalidArgument);
    assert_eq!(d.status(watch(0, 8)), Status::InvalidArgument);
    assert_eq!(
        d.status(Command::DoorbellWatch {
            ctx_id: 9,
            engine: COPY,
            doorbell_va: DB,
            start: 0,
            flags: 0,
        }),
        Status::NotFound
    );
    // Keeping the pointers takes no start; unknown flags are refused.
    let keep = |start, flags| Command::DoorbellWatch {
        ctx_id: 2,
        engine: COPY,
        doorbell_va: DB,
        start,
        flags,
    };
    assert_eq!(d.status(keep(8, 1)), Status::InvalidArgument);
    assert_eq!(d.status(keep(0, 2)), Status::ReservedNonZero);
    assert_eq!(
        d.status(watch(0, 0)),
        Status::Ok,
        "stopping is always allowed"
    );
}

#[test]
fn the_ring_restarts_at_start_and_only_later_changes_ring() {
    let mut d = rig();
    let (mut c, db) = queue(&mut d, 3);
    let w = write_fence(&mut d, &mut c, 1);
    publish(&d, db, w);
    assert!(fence_event(&mut d, 3, 1, T));
    d.settle(&c, COPY, T).unwrap();
    // Watching again from `start` 0x100: the ring's pointers move there;
    // the block's current value (w) differs, so it rings at once — and a
    // wptr behind the new start is a bad pointer.
    d.command(Command::DoorbellWatch {
        ctx_id: 3,
        engine: COPY,
        doorbell_va: DB,
        start: 0x100,
        flags: 0,
    })
    .unwrap();
    match d.event(T).unwrap() {
        Event::EngineError(EngineErrorRecord { code, .. }) => {
            assert_eq!(code, EngineError::BadPointer as u32)
        }
        other => panic!("{other:?}"),
    }

    // A fresh queue that restarts where its block already points: nothing
    // runs until the block moves on.
    let mut c = d.context(4, PRIORITY_NORMAL, 0).unwrap();
    d.ring(&mut c, COPY).unwrap();
    let db = d.buffer(&mut c, DB, 4096, RW).unwrap();
    d.buffer(&mut c, FENCE_VA, 4096, RW).unwrap();
    let r = c.ring(COPY).unwrap();
    r.writer.set_wptr(0x200);
    publish(&d, db, 0x200);
    d.command(Command::DoorbellWatch {
        ctx_id: 4,
        engine: COPY,
        doorbell_va: DB,
        start: 0x200,
        flags: 0,
    })
    .unwrap();
    let s = d
        .wait_status(&c, COPY, T, |s| s.rptr == 0x200)
        .expect("the status block shows the new pointers");
    assert_eq!((s.wptr, s.state), (0x200, ring_state::IDLE));
    assert!(
        d.event(5 * POLL).is_err(),
        "no doorbell for the start value"
    );
    let w = write_fence(&mut d, &mut c, 7);
    submit(&mut d, db, w);
    assert!(fence_event(&mut d, 4, 7, T));
    // A ring with work (blocked on a semaphore nobody signals) cannot be
    // moved.
    let w = {
        let r = c.ring(COPY).unwrap();
        r.writer
            .packet(
                &d.mem,
                &Packet::SemWait {
                    va: FENCE_VA + 64,
                    value: 1,
                    op: vgpu_hwif::packet::SEM_WAIT_GEQ,
                },
            )
            .unwrap();
        r.writer.wptr()
    };
    submit(&mut d, db, w);
    d.wait_status(&c, COPY, T, |s| s.state == ring_state::SEM_WAIT)
        .unwrap();
    let watch_again = Command::DoorbellWatch {
        ctx_id: 4,
        engine: COPY,
        doorbell_va: DB,
        start: 0,
        flags: 0,
    };
    assert_eq!(d.status(watch_again), Status::Busy);
}

#[test]
fn the_blocks_translation_is_a_tlb_entry_and_destroy_ends_the_watch() {
    let mut d = rig();
    let (mut c, db) = queue(&mut d, 5);
    let w = write_fence(&mut d, &mut c, 1);
    publish(&d, db, w);
    assert!(fence_event(&mut d, 5, 1, T));
    // The driver moves the block to another page without invalidating:
    // the watcher still reads the old one.
    let new_db = d.alloc.page(&d.mem).unwrap();
    c.pt.map_4k(&d.mem, DB, new_db, RW).unwrap();
    let w = write_fence(&mut d, &mut c, 2);
    publish(&d, new_db, w);
    assert!(!fence_event(&mut d, 5, 2, 5 * POLL), "stale translation");
    // After TLB_INVALIDATE the new page is read.
    d.command(Command::TlbInvalidate {
        ctx_id: 5,
        engine_mask: 0,
        va: DB,
        size: 4096,
    })
    .unwrap();
    d.command(Command::DoorbellKick).unwrap();
    assert!(fence_event(&mut d, 5, 2, T));

    // Destroying the context ends the watch: a new context in the same
    // slot is not rung by the old block.
    d.settle(&c, COPY, T).unwrap();
    d.command(Command::ContextDestroy {
        ctx_id: 5,
        flags: 0,
    })
    .unwrap();
    let mut c2 = d.context(5, PRIORITY_NORMAL, 0).unwrap();
    d.ring(&mut c2, COPY).unwrap();
    d.buffer(&mut c2, FENCE_VA, 4096, RW).unwrap();
    let w2 = write_fence(&mut d, &mut c2, 9);
    publish(&d, new_db, w2.wrapping_add(w));
    d.command(Command::DoorbellKick).unwrap();
    assert!(d.event(5 * POLL).is_err(), "the old block rings nothing");
    d.doorbell(5, COPY, w2).unwrap();
    assert!(fence_event(&mut d, 5, 9, T));
}

/// The sleep/kick protocol loses no doorbell: submissions spaced around the
/// poll window (some while the watcher polls, some just as it goes to
/// sleep, some while it sleeps) all run, each kicked only when the block
/// said the watcher sleeps.
#[test]
fn no_doorbell_is_lost_around_the_poll_window() {
    let mut d = rig();
    let (mut c, db) = queue(&mut d, 6);
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut kicks = 0;
    for seqno in 1..=150u64 {
        vgpu_hwif::rng::xorshift64(&mut rng);
        // 0 to 1.5 poll windows, in 0.5 ms steps.
        let gap = Duration::from_micros(500 * (rng % 61));
        std::thread::sleep(gap);
        let w = write_fence(&mut d, &mut c, seqno);
        publish(&d, db, w);
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        if sleeping(&d, db) == 1 {
            kicks += 1;
            d.command(Command::DoorbellKick).unwrap();
        }
        assert!(fence_event(&mut d, 6, seqno, T), "submission {seqno} ran");
    }
    assert!(kicks > 0, "some submissions found the watcher asleep");
    assert!(kicks < 150, "some found it polling");
}

/// Watching again without moving the pointers: a ring with work keeps it,
/// and a block that moved on while nobody watched rings at once.
#[test]
fn watching_again_with_the_pointers_kept_catches_up() {
    let mut d = rig();
    let (mut c, db) = queue(&mut d, 7);
    let w = write_fence(&mut d, &mut c, 1);
    submit(&mut d, db, w);
    assert!(fence_event(&mut d, 7, 1, T));
    // Suspended: the block moves, nothing runs.
    d.command(Command::DoorbellWatch {
        ctx_id: 7,
        engine: COPY,
        doorbell_va: 0,
        start: 0,
        flags: 0,
    })
    .unwrap();
    let w = write_fence(&mut d, &mut c, 2);
    publish(&d, db, w);
    d.command(Command::DoorbellKick).unwrap();
    assert!(!fence_event(&mut d, 7, 2, 5 * POLL), "not watched");
    // Resumed where the ring is: the new value rings.
    d.command(Command::DoorbellWatch {
        ctx_id: 7,
        engine: COPY,
        doorbell_va: DB,
        start: 0,
        flags: vgpu_hwif::proto::WATCH_KEEP_POINTERS,
    })
    .unwrap();
    assert!(fence_event(&mut d, 7, 2, T));
    let s = d.settle(&c, COPY, T).unwrap();
    assert_eq!((s.rptr, s.wptr), (w, w));
}
