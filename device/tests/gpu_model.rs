//! The GPU model over the real vhost-user protocol: page tables, rings,
//! copies, fences and semaphores across engines and contexts, faults,
//! stale TLBs, resets, forced destroys, scheduling, and a table of
//! malformed inputs — each checked in guest memory and on the event queue,
//! with the device still serving afterwards.

mod common;

use std::time::{Duration, Instant};

use vm_memory::{Bytes, GuestAddress};

use common::{rig, Rig};
use vgpu_device::testkit::{read_u64, ring_va, write_u64, GpuContext, PacketWriter, RING_SIZE};
use vgpu_hwif::event::{EngineErrorRecord, Event, FaultInfo, FAULT_FLAG_REPLAYABLE};
use vgpu_hwif::mmu::{table_entry, Access, FaultReason, LEVEL_NONE, PTE_EXEC, PTE_READ, PTE_WRITE};
use vgpu_hwif::packet::{
    encode_header, Copy2dPacket, DispatchPacket, EngineError, Packet, MAX_INDIRECT_DEPTH,
    OP_DISPATCH, OP_FENCE, SEM_SIGNAL_ADD, SEM_WAIT_EQ, SEM_WAIT_GEQ,
};
use vgpu_hwif::pod::Pod;
use vgpu_hwif::proto::{
    ctx_state, engine, ring_state, stats_kind, Command, EngineResetReply, Status,
    CTX_FLAG_REPLAYABLE_FAULTS, CTX_NONE, DESTROY_FLAG_FORCE, FAULT_RESUME_ABORT,
    FAULT_RESUME_RETRY, PRIORITY_HIGH, PRIORITY_LOW, PRIORITY_NORMAL,
};

const T: Duration = Duration::from_secs(5);
const QUIET: Duration = Duration::from_millis(150);
const RW: u64 = PTE_READ | PTE_WRITE;
const RX: u64 = PTE_READ | PTE_EXEC;
/// Per-context data VAs.
const DATA: u64 = 0x20_0000;
const SRC: u64 = 0x100_0000;
const DST: u64 = 0x200_0000;
const SEM: u64 = 0x300_0000;
const BIG: u64 = 0x40_0000_0000;
const UNMAPPED: u64 = 0x5000_0000;

fn fence(va: u64, seqno: u64) -> Packet {
    Packet::Fence {
        va,
        seqno,
        flags: 0,
    }
}

fn fence_event(ctx_id: u32, engine: u32, seqno: u64, va: u64) -> Event {
    Event::Fence {
        ctx_id,
        engine,
        seqno,
        va,
    }
}

/// A context with a ring on `e` and a 64 KiB data buffer at [`DATA`].
fn context(d: &mut Rig, id: u32, priority: u32, flags: u32, e: u32) -> (GpuContext, u64) {
    let mut c = d.context(id, priority, flags).unwrap();
    d.ring(&mut c, e).unwrap();
    let pa = d.buffer(&mut c, DATA, 0x1_0000, RW).unwrap();
    (c, pa)
}

/// Reads `len` bytes at `va` of `c` through its page tables.
fn read_va(d: &Rig, c: &GpuContext, va: u64, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    let mut off = 0;
    while off < len {
        let pa = c.pt.translate(&d.mem, va + off as u64).expect("mapped");
        let n = (4096 - ((va + off as u64) % 4096) as usize).min(len - off);
        d.mem
            .read_slice(&mut out[off..off + n], GuestAddress(pa))
            .unwrap();
        off += n;
    }
    out
}

/// Maps 1 GiB at [`BIG`] onto one 2 MiB physical page (512 aliases), for
/// transfers long enough to be caught in the middle.
fn map_big(d: &mut Rig, c: &mut GpuContext) {
    let pa = d.alloc.alloc(2 << 20, 2 << 20).unwrap();
    for i in 0..512u64 {
        c.pt.map_2m(&d.mem, BIG + (i << 21), pa, RW).unwrap();
    }
}

/// Waits until context `id` has moved at least one byte.
fn wait_for_bytes(d: &mut Rig, id: u32) -> u64 {
    let deadline = Instant::now() + T;
    loop {
        let b = d.stats(stats_kind::CONTEXT, id).unwrap().bytes;
        if b > 0 {
            return b;
        }
        assert!(Instant::now() < deadline, "context {id} never ran");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The healthy context proves the device still serves.
fn still_serving(d: &mut Rig, healthy: &mut GpuContext, seqno: u64) {
    d.submit(healthy, engine::COPY, &[fence(DATA, seqno)])
        .unwrap();
    assert_eq!(d.event(T).unwrap(), fence_event(healthy.id, 0, seqno, DATA));
}

#[test]
fn copies_through_scattered_pages_on_both_generations() {
    for generation in [1, 2] {
        let mut d = rig(generation, 16);
        let (mut c, _) = context(&mut d, 1, PRIORITY_NORMAL, 0, engine::COPY);
        // 16 source pages allocated one by one and mapped in reverse order.
        let mut pages = Vec::new();
        for _ in 0..16 {
            pages.push(d.alloc.alloc(4096, 4096).unwrap());
        }
        for (i, pa) in pages.iter().rev().enumerate() {
            c.pt.map_4k(&d.mem, SRC + 4096 * i as u64, *pa, PTE_READ)
                .unwrap();
        }
        let src: Vec<u8> = (0..65536u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for i in 0..16u64 {
            let pa = c.pt.translate(&d.mem, SRC + 4096 * i).unwrap();
            d.mem
                .write_slice(
                    &src[4096 * i as usize..4096 * (i as usize + 1)],
                    GuestAddress(pa),
                )
                .unwrap();
        }
        // Gen 2 can address above 2^40; gen 1 cannot.
        let dst = if generation == 2 {
            (1 << 40) + DST
        } else {
            DST
        };
        d.buffer(&mut c, dst, 0x2_0000, RW).unwrap();
        let vas = d
            .submit(
                &mut c,
                engine::COPY,
                &[
                    Packet::Copy {
                        src: SRC + 3,
                        dst: dst + 1,
                        size: 65536 - 5,
                    },
                    Packet::Copy2d(Copy2dPacket {
                        src: SRC,
                        dst: dst + 0x1_0000,
                        src_pitch: 4096,
                        dst_pitch: 100,
                        width: 60,
                        height: 16,
                    }),
                    Packet::Fill {
                        dst: dst + 0x1_8000,
                        size: 6,
                        pattern: 0xddcc_bbaa,
                    },
                    fence(DATA, 7),
                ],
            )
            .unwrap();
        assert_eq!(
            d.event(T).unwrap(),
            fence_event(1, 0, 7, DATA),
            "gen {generation}"
        );
        assert_eq!(read_va(&d, &c, dst + 1, 65536 - 5), src[3..65536 - 2]);
        for row in 0..16usize {
            let got = read_va(&d, &c, dst + 0x1_0000 + 100 * row as u64, 60);
            assert_eq!(
                got,
                src[4096 * row..4096 * row + 60],
                "gen {generation} row {row}"
            );
        }
        assert_eq!(
            read_va(&d, &c, dst + 0x1_8000, 8),
            [0xaa, 0xbb, 0xcc, 0xdd, 0xaa, 0xbb, 0, 0]
        );
        if generation == 2 {
            // Every copy-engine packet starts on a 64-byte boundary.
            assert!(vas[..3].iter().all(|va| va % 64 == 0), "{vas:x?}");
        }
        let s = d.settle(&c, engine::COPY, T).unwrap();
        let wptr = c.ring(0).unwrap().writer.wptr();
        assert_eq!(
            (s.state, s.rptr, s.last_fence, s.error),
            (ring_state::IDLE, wptr, 7, 0)
        );
        let st = d.stats(stats_kind::CONTEXT, 1).unwrap();
        assert_eq!(st.bytes, 65536 - 5 + 960 + 6);
        assert_eq!(st.fences, 1);
        assert!(st.tlb_misses > 0 && st.tlb_hits > st.tlb_misses, "{st:?}");
        // The context's only ring holds all of its counters; it has no
        // ring on the compute engine to ask about.
        let ce = stats_kind::context_engine_id(1, engine::COPY);
        let rs = d.stats(stats_kind::CONTEXT_ENGINE, ce).unwrap();
        assert_eq!(
            (
                rs.busy_ns,
                rs.bytes,
                rs.fences,
                rs.tlb_misses,
                rs.kind,
                rs.id
            ),
            (
                st.busy_ns,
                st.bytes,
                st.fences,
                st.tlb_misses,
                stats_kind::CONTEXT_ENGINE,
                ce
            )
        );
        assert!(rs.busy_ns > 0, "{rs:?}");
        let none = stats_kind::context_engine_id(1, engine::COMPUTE);
        assert!(d.stats(stats_kind::CONTEXT_ENGINE, none).is_err());
        assert!(d
            .stats(
                stats_kind::CONTEXT_ENGINE,
                stats_kind::context_engine_id(1, 9)
            )
            .is_err());
        let id = d.identity;
        assert_eq!(
            (id.generation, id.va_bits, id.engine_mask),
            (generation, if generation == 2 { 48 } else { 40 }, 3)
        );
        let summary = d.transport.finish();
        assert_eq!(summary.counters.events_delivered, 1);
    }
}

#[test]
fn semaphores_order_work_across_engines_and_contexts() {
    let mut d = rig(2, 16);
    let (mut a, _) = context(&mut d, 1, PRIORITY_NORMAL, 0, engine::COMPUTE);
    let (mut b, _) = context(&mut d, 2, PRIORITY_NORMAL, 0, engine::COPY);
    let (mut w, _) = context(&mut d, 3, PRIORITY_NORMAL, 0, engine::COPY);
    // One physical page shared by all three contexts.
    let sem_pa = d.alloc.page(&d.mem).unwrap();
    for c in [&mut a, &mut b, &mut w] {
        c.pt.map_4k(&d.mem, SEM, sem_pa, RW).unwrap();
    }
    // Compute waits for the copy engine.
    d.submit(
        &mut a,
        engine::COMPUTE,
        &[
            Packet::SemWait {
                va: SEM,
                value: 1,
                op: SEM_WAIT_GEQ,
            },
            fence(SEM + 8, 10),
        ],
    )
    .unwrap();
    let s = d.settle(&a, engine::COMPUTE, T).unwrap();
    assert_eq!(s.state, ring_state::SEM_WAIT);
    assert_eq!(
        d.query(1).unwrap().state,
        ctx_state::SEM_WAIT | ctx_state::BUSY
    );
    // Context 3 waits on the copy engine; context 2 must still get it.
    d.submit(
        &mut w,
        engine::COPY,
        &[
            Packet::SemWait {
                va: SEM + 24,
                value: 5,
                op: SEM_WAIT_EQ,
            },
            fence(SEM + 32, 30),
        ],
    )
    .unwrap();
    assert_eq!(
        d.settle(&w, engine::COPY, T).unwrap().state,
        ring_state::SEM_WAIT
    );
    d.submit(&mut b, engine::COPY, &[fence(DATA, 20)]).unwrap();
    assert_eq!(d.event(T).unwrap(), fence_event(2, 0, 20, DATA));
    // Now the copy engine signals the compute engine.
    d.submit(
        &mut b,
        engine::COPY,
        &[
            Packet::SemSignal {
                va: SEM,
                value: 1,
                op: SEM_SIGNAL_ADD,
            },
            fence(DATA, 21),
        ],
    )
    .unwrap();
    let mut got = vec![d.event(T).unwrap(), d.event(T).unwrap()];
    got.sort_by_key(|e| match e {
        Event::Fence { seqno, .. } => *seqno,
        _ => 0,
    });
    assert_eq!(
        got,
        vec![fence_event(1, 1, 10, SEM + 8), fence_event(2, 0, 21, DATA)]
    );
    assert_eq!(read_u64(&d.mem, sem_pa).unwrap(), 1);
    // The CPU releases context 3 by writing its semaphore: the device
    // notices without any doorbell.
    assert!(d.event(QUIET).is_err(), "context 3 must still wait");
    write_u64(&d.mem, sem_pa + 24, 5).unwrap();
    assert_eq!(d.event(T).unwrap(), fence_event(3, 0, 30, SEM + 32));
    assert_eq!(
        d.settle(&w, engine::COPY, T).unwrap().state,
        ring_state::IDLE
    );
    assert_eq!(d.query(3).unwrap().state, 0);
}

#[test]
fn non_replayable_fault_stops_the_ring_and_others_keep_running() {
    let mut d = rig(1, 16);
    let (mut c, _) = context(&mut d, 1, PRIORITY_NORMAL, 0, engine::COPY);
    let (mut h, _) = context(&mut d, 2, PRIORITY_NORMAL, 0, engine::COPY);
    let vas = d
        .submit(
            &mut c,
            engine::COPY,
            &[
                Packet::Nop { words: 2 },
                Packet::Copy {
                    src: DATA,
                    dst: UNMAPPED,
                    size: 8192,
                },
                fence(DATA, 1),
            ],
        )
        .unwrap();
    let Event::Fault {
        va,
        info,
        packet_va,
        fault_id,
        lane_pc,
    } = d.event(T).unwrap()
    else {
        panic!("expected a fault")
    };
    assert_eq!((va, packet_va, lane_pc), (UNMAPPED, vas[1], u64::MAX));
    assert_eq!(
        info,
        FaultInfo {
            ctx_id: 1,
            engine: 0,
            access: Access::Write as u8,
            reason: FaultReason::NotPresent as u8,
            level: 2,
            flags: 0
        }
    );
    assert!(fault_id > 0);
    let s = d.settle(&c, engine::COPY, T).unwrap();
    assert_eq!(
        (s.state, s.error, s.error_rptr, s.rptr),
        (ring_state::STOPPED, EngineError::PageFault as u32, 8, 8)
    );
    let q = d.query(1).unwrap();
    assert_eq!(
        (q.state, q.faults, q.last_fault_va),
        (ctx_state::ERRORED, 1, UNMAPPED)
    );
    assert_eq!(
        read_u64(&d.mem, c.pt.translate(&d.mem, DATA).unwrap()).unwrap(),
        0
    );
    // Not replayable: resuming is refused, the doorbell is ignored.
    assert_eq!(
        d.status(Command::FaultResume {
            ctx_id: 1,
            action: FAULT_RESUME_RETRY,
            fault_id
        }),
        Status::NotFound
    );
    let published = c.ring(0).unwrap().writer.wptr();
    d.submit(&mut c, engine::COPY, &[fence(DATA, 2)]).unwrap();
    assert!(d.event(QUIET).is_err(), "a stopped ring runs nothing");
    still_serving(&mut d, &mut h, 5);
    // An engine reset clears the stopped ring; new work runs.
    let r = d
        .command(Command::EngineReset {
            engine: engine::COPY,
            hung_ctx: CTX_NONE,
        })
        .unwrap();
    let r = EngineResetReply::read_from(&r).unwrap();
    assert_eq!((r.ctx_id, r.rptr), (CTX_NONE, 0));
    assert_eq!(
        d.event(T).unwrap(),
        Event::ResetDone {
            engine: 0,
            ctx_id: CTX_NONE,
            rptr: 0
        }
    );
    // The ring restarts at the last write pointer it accepted; what was
    // written after it stopped was never published. The driver continues
    // from the status block's read pointer.
    let s = d
        .wait_status(&c, engine::COPY, T, |s| s.state == ring_state::IDLE)
        .unwrap();
    assert_eq!((s.rptr, s.error), (published, 0));
    c.ring(0).unwrap().writer.set_wptr(s.rptr);
    d.submit(&mut c, engine::COPY, &[fence(DATA, 3)]).unwrap();
    assert_eq!(d.event(T).unwrap(), fence_event(1, 0, 3, DATA));
    let es = d.engine_stats(engine::COPY).unwrap();
    assert_eq!((es.faults, es.resets), (1, 1));
}

#[test]
fn replayable_fault_stalls_until_resumed() {
    let mut d = rig(2, 16);
    let (mut c, _) = context(
        &mut d,
        4,
        PRIORITY_NORMAL,
        CTX_FLAG_REPLAYABLE_FAULTS,
        engine::COPY,
    );
    let (mut h, _) = context(&mut d, 5, PRIORITY_NORMAL, 0, engine::COPY);
    // First page of the fill mapped, second not.
    let first = d.buffer(&mut c, UNMAPPED, 4096, RW).unwrap();
    let vas = d
        .submit(
            &mut c,
            engine::COPY,
            &[
                Packet::Fill {
                    dst: UNMAPPED + 100,
                    size: 8000,
                    pattern: 0x0101_0101,
                },
                fence(DATA, 1),
            ],
        )
        .unwrap();
    let Event::Fault {
        va,
        info,
        packet_va,
        fault_id,
        ..
    } = d.event(T).unwrap()
    else {
        panic!("expected a fault")
    };
    assert_eq!((va, packet_va), (UNMAPPED + 4096, vas[0]));
    assert_eq!(
        (info.access, info.reason, info.level, info.flags),
        (
            Access::Write as u8,
            FaultReason::NotPresent as u8,
            0,
            FAULT_FLAG_REPLAYABLE
        )
    );
    assert_eq!(
        d.settle(&c, engine::COPY, T).unwrap().state,
        ring_state::FAULT_STALLED
    );
    assert_eq!(
        d.query(4).unwrap().state,
        ctx_state::FAULT_STALLED | ctx_state::BUSY
    );
    // The stalled job does not hold the engine.
    still_serving(&mut d, &mut h, 9);
    assert_eq!(
        d.status(Command::FaultResume {
            ctx_id: 4,
            action: FAULT_RESUME_RETRY,
            fault_id: fault_id + 1
        }),
        Status::NotFound
    );
    assert_eq!(
        d.status(Command::FaultResume {
            ctx_id: 5,
            action: FAULT_RESUME_RETRY,
            fault_id
        }),
        Status::NotFound
    );
    // The driver maps the missing page and retries: the fill completes.
    let second = d.alloc.page(&d.mem).unwrap();
    c.pt.map_4k(&d.mem, UNMAPPED + 4096, second, RW).unwrap();
    d.command(Command::FaultResume {
        ctx_id: 4,
        action: FAULT_RESUME_RETRY,
        fault_id,
    })
    .unwrap();
    assert_eq!(d.event(T).unwrap(), fence_event(4, 0, 1, DATA));
    assert_eq!(read_va(&d, &c, UNMAPPED + 100, 8000), vec![1u8; 8000]);
    let mut before = [0u8; 100];
    d.mem.read_slice(&mut before, GuestAddress(first)).unwrap();
    assert_eq!(before, [0u8; 100]);
    // A second fault, aborted: the ring stops as for a non-replayable one.
    d.submit(
        &mut c,
        engine::COPY,
        &[
            Packet::Fill {
                dst: UNMAPPED + 0x10_0000,
                size: 4,
                pattern: 1,
            },
            fence(DATA, 2),
        ],
    )
    .unwrap();
    let Event::Fault {
        fault_id: f2, info, ..
    } = d.event(T).unwrap()
    else {
        panic!("expected a fault")
    };
    assert_eq!(info.flags, FAULT_FLAG_REPLAYABLE);
    assert!(f2 > fault_id);
    d.command(Command::FaultResume {
        ctx_id: 4,
        action: FAULT_RESUME_ABORT,
        fault_id: f2,
    })
    .unwrap();
    let s = d
        .wait_status(&c, engine::COPY, T, |s| {
            s.state != ring_state::FAULT_STALLED
        })
        .unwrap();
    assert_eq!(
        (s.state, s.error),
        (ring_state::STOPPED, EngineError::PageFault as u32)
    );
    assert!(
        d.event(QUIET).is_err(),
        "the aborted job's fence never runs"
    );
    assert_eq!(d.query(4).unwrap().faults, 2);
}

#[test]
fn stale_tlb_translation_is_used_until_invalidated() {
    let mut d = rig(1, 16);
    let (mut c, _) = context(&mut d, 1, PRIORITY_NORMAL, 0, engine::COPY);
    let p1 = d.alloc.page(&d.mem).unwrap();
    let p2 = d.alloc.page(&d.mem).unwrap();
    d.mem.write_slice(&[0x11; 4096], GuestAddress(p1)).unwrap();
    d.mem.write_slice(&[0x22; 4096], GuestAddress(p2)).unwrap();
    c.pt.map_4k(&d.mem, SRC, p1, PTE_READ).unwrap();
    d.buffer(&mut c, DST, 5 * 4096, RW).unwrap();
    let mut seq = 0;
    let mut copy_to = |d: &mut Rig, c: &mut GpuContext, slot: u64| -> u8 {
        seq += 1;
        d.submit(
            c,
            engine::COPY,
            &[
                Packet::Copy {
                    src: SRC,
                    dst: DST + 4096 * slot,
                    size: 4096,
                },
                fence(DATA, seq),
            ],
        )
        .unwrap();
        assert_eq!(d.event(T).unwrap(), fence_event(1, 0, seq, DATA));
        let got = read_va(d, c, DST + 4096 * slot, 4096);
        assert!(got.iter().all(|&b| b == got[0]));
        got[0]
    };
    assert_eq!(copy_to(&mut d, &mut c, 0), 0x11);
    // Remap without telling the device: the copy engine keeps using the
    // translation it cached.
    c.pt.map_4k(&d.mem, SRC, p2, PTE_READ).unwrap();
    assert_eq!(copy_to(&mut d, &mut c, 1), 0x11, "stale translation");
    // Invalidating another engine's TLB does not help.
    d.command(Command::TlbInvalidate {
        ctx_id: 1,
        engine_mask: 1 << engine::COMPUTE,
        va: SRC,
        size: 4096,
    })
    .unwrap();
    assert_eq!(copy_to(&mut d, &mut c, 2), 0x11);
    // Nor does invalidating another page.
    d.command(Command::TlbInvalidate {
        ctx_id: 1,
        engine_mask: 0,
        va: SRC + 4096,
        size: 4096,
    })
    .unwrap();
    assert_eq!(copy_to(&mut d, &mut c, 3), 0x11);
    d.command(Command::TlbInvalidate {
        ctx_id: 1,
        engine_mask: 1 << engine::COPY,
        va: SRC,
        size: 1,
    })
    .unwrap();
    assert_eq!(
        copy_to(&mut d, &mut c, 4),
        0x22,
        "fresh walk after TLB_INVALIDATE"
    );
    let st = d.engine_stats(engine::COPY).unwrap();
    assert!(st.tlb_hits >= 3 && st.tlb_misses >= 2, "{st:?}");
}

#[test]
fn engine_reset_in_the_middle_of_a_copy() {
    let mut d = rig(2, 16);
    let (mut c, data_pa) = context(&mut d, 1, PRIORITY_NORMAL, 0, engine::COPY);
    let (mut h, _) = context(&mut d, 2, PRIORITY_NORMAL, 0, engine::COMPUTE);
    map_big(&mut d, &mut c);
    let vas = d
        .submit(
            &mut c,
            engine::COPY,
            &[
                Packet::Fill {
                    dst: BIG,
                    size: 1 << 30,
                    pattern: 7,
                },
                fence(DATA, 1),
            ],
        )
        .unwrap();
    wait_for_bytes(&mut d, 1);
    let r = d
        .command(Command::EngineReset {
            engine: engine::COPY,
            hung_ctx: CTX_NONE,
        })
        .unwrap();
    let r = EngineResetReply::read_from(&r).unwrap();
    let fill_rptr = (vas[0] - ring_va(0)) as u32;
    assert_eq!((r.engine, r.ctx_id, r.rptr), (0, 1, fill_rptr));
    assert_eq!(
        d.event(T).unwrap(),
        Event::ResetDone {
            engine: 0,
            ctx_id: 1,
            rptr: fill_rptr
        }
    );
    let s = d.settle(&c, engine::COPY, T).unwrap();
    assert_eq!(
        (s.state, s.rptr),
        (ring_state::IDLE, c.ring(0).unwrap().writer.wptr())
    );
    let st = d.stats(stats_kind::CONTEXT, 1).unwrap();
    assert!(st.bytes > 0 && st.bytes < 1 << 30, "{st:?}");
    assert_eq!(st.resets, 1);
    assert_eq!(
        read_u64(&d.mem, data_pa).unwrap(),
        0,
        "the fence was dropped with the job"
    );
    // Both engines still work, and so does the reset ring.
    d.submit(&mut h, engine::COMPUTE, &[fence(DATA, 4)])
        .unwrap();
    assert_eq!(d.event(T).unwrap(), fence_event(2, 1, 4, DATA));
    d.submit(&mut c, engine::COPY, &[fence(DATA, 2)]).unwrap();
    assert_eq!(d.event(T).unwrap(), fence_event(1, 0, 2, DATA));
}

#[test]
fn destroying_a_busy_context_needs_force() {
    let mut d = rig(1, 16);
    let (mut c, _) = context(&mut d, 1, PRIORITY_NORMAL, 0, engine::COPY);
    let (mut waiter, _) = context(&mut d, 3, PRIORITY_NORMAL, 0, engine::COMPUTE);
    let (mut h, _) = context(&mut d, 2, PRIORITY_NORMAL, 0, engine::COPY);
    map_big(&mut d, &mut c);
    let vas = d
        .submit(
            &mut c,
            engine::COPY,
            &[Packet::Fill {
                dst: BIG,
                size: 1 << 30,
                pattern: 7,
            }],
        )
        .unwrap();
    wait_for_bytes(&mut d, 1);
    assert_eq!(
        d.status(Command::ContextDestroy {
            ctx_id: 1,
            flags: 0
        }),
        Status::Busy
    );
    assert_eq!(
        d.status(Command::RingDestroy {
            ctx_id: 1,
            engine: 0
        }),
        Status::Busy
    );
    d.command(Command::ContextDestroy {
        ctx_id: 1,
        flags: DESTROY_FLAG_FORCE,
    })
    .unwrap();
    let rptr = (vas[0] - ring_va(0)) as u32;
    assert_eq!(
        d.event(T).unwrap(),
        Event::ResetDone {
            engine: 0,
            ctx_id: 1,
            rptr
        }
    );
    assert_eq!(
        d.status(Command::ContextQuery { ctx_id: 1 }),
        Status::NotFound
    );
    // A context blocked on a semaphore is busy too, but not running: a
    // forced destroy resets nothing.
    d.submit(
        &mut waiter,
        engine::COMPUTE,
        &[Packet::SemWait {
            va: DATA,
            value: 1,
            op: SEM_WAIT_GEQ,
        }],
    )
    .unwrap();
    assert_eq!(
        d.settle(&waiter, engine::COMPUTE, T).unwrap().state,
        ring_state::SEM_WAIT
    );
    assert_eq!(
        d.status(Command::ContextDestroy {
            ctx_id: 3,
            flags: 0
        }),
        Status::Busy
    );
    d.command(Command::ContextDestroy {
        ctx_id: 3,
        flags: DESTROY_FLAG_FORCE,
    })
    .unwrap();
    still_serving(&mut d, &mut h, 1);
    // The id is free again.
    let (mut again, _) = context(&mut d, 1, PRIORITY_NORMAL, 0, engine::COPY);
    d.submit(&mut again, engine::COPY, &[fence(DATA, 8)])
        .unwrap();
    assert_eq!(d.event(T).unwrap(), fence_event(1, 0, 8, DATA));
    assert_eq!(d.engine_stats(engine::COPY).unwrap().resets, 1);
}

#[test]
fn priorities_preempt_and_equal_priorities_share_the_engine() {
    let mut d = rig(2, 24);
    let (mut low1, _) = context(&mut d, 1, PRIORITY_LOW, 0, engine::COPY);
    let (mut low2, _) = context(&mut d, 2, PRIORITY_LOW, 0, engine::COPY);
    let (mut high, _) = context(&mut d, 3, PRIORITY_HIGH, 0, engine::COPY);
    map_big(&mut d, &mut low1);
    map_big(&mut d, &mut low2);
    let fill = Packet::Fill {
        dst: BIG,
        size: 1 << 30,
        pattern: 3,
    };
    d.submit(&mut low1, engine::COPY, &[fill, fence(DATA, 1)])
        .unwrap();
    wait_for_bytes(&mut d, 1);
    // A high-priority fence overtakes the long fill.
    d.submit(&mut high, engine::COPY, &[fence(DATA, 30)])
        .unwrap();
    assert_eq!(d.event(T).unwrap(), fence_event(3, 0, 30, DATA));
    assert_ne!(
        d.query(1).unwrap().state & ctx_state::BUSY,
        0,
        "the fill is still going"
    );
    // An equal-priority context gets time slices too.
    d.submit(&mut low2, engine::COPY, &[fill, fence(DATA, 2)])
        .unwrap();
    wait_for_bytes(&mut d, 2);
    let a = d.stats(stats_kind::CONTEXT, 1).unwrap().bytes;
    let deadline = Instant::now() + T;
    while d.stats(stats_kind::CONTEXT, 1).unwrap().bytes == a {
        assert!(Instant::now() < deadline, "context 1 starved");
        std::thread::sleep(Duration::from_millis(1));
    }
    // Power-on state again: both fills are gone.
    d.device_reset().unwrap();
    loop {
        let rec = d.event_record(T).unwrap();
        if let Ok(Event::ResetDone { engine, ctx_id, .. }) = Event::from_record(&rec) {
            assert_eq!((engine, ctx_id, rec.seq), (engine::ALL, CTX_NONE, 1));
            break;
        }
    }
    for id in 1..=3 {
        assert_eq!(
            d.status(Command::ContextQuery { ctx_id: id }),
            Status::NotFound
        );
    }
    assert!(d.stats(stats_kind::DEVICE, 0).unwrap().resets >= 1);
    let (mut fresh, _) = context(&mut d, 1, PRIORITY_NORMAL, 0, engine::COPY);
    d.submit(&mut fresh, engine::COPY, &[fence(DATA, 9)])
        .unwrap();
    let rec = d.event_record(T).unwrap();
    assert_eq!(
        (Event::from_record(&rec).unwrap(), rec.seq),
        (fence_event(1, 0, 9, DATA), 2)
    );
}

/// What a malformed input must produce.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Want {
    Error {
        code: EngineError,
        depth: u32,
    },
    Fault {
        reason: FaultReason,
        access: Access,
        level: u8,
    },
}

type Case = (
    &'static str,
    u32,
    fn(&mut Rig, &mut GpuContext) -> (u64, u32),
    Want,
);

fn raw(d: &mut Rig, c: &mut GpuContext, e: u32, words: &[u32]) -> (u64, u32) {
    let ring = c.ring(e).unwrap();
    let va = ring.writer.words(&d.mem, words).unwrap();
    (va, words[0])
}

fn put(d: &mut Rig, c: &mut GpuContext, e: u32, p: Packet) -> (u64, u32) {
    let ring = c.ring(e).unwrap();
    let va = ring.writer.packet(&d.mem, &p).unwrap();
    let header: u32 = d
        .mem
        .read_obj(GuestAddress(ring.pa + (va - ring_va(e))))
        .unwrap();
    (va, header)
}

#[test]
fn malformed_inputs_each_stop_one_ring_and_the_device_keeps_serving() {
    let cases: &[Case] = &[
        (
            "cyclic page tables",
            0,
            |d, c| {
                let root = c.pt.root();
                c.pt.set_entry(&d.mem, SRC, 2, table_entry(root)).unwrap();
                put(
                    d,
                    c,
                    0,
                    Packet::Copy {
                        src: SRC,
                        dst: DATA,
                        size: 8,
                    },
                )
            },
            Want::Fault {
                reason: FaultReason::Malformed,
                access: Access::Read,
                level: 2,
            },
        ),
        (
            "PTE outside RAM",
            0,
            |d, c| {
                c.pt.map_4k(&d.mem, SRC, 0x10_0000_0000, PTE_READ).unwrap();
                put(
                    d,
                    c,
                    0,
                    Packet::Copy {
                        src: SRC,
                        dst: DATA,
                        size: 8,
                    },
                )
            },
            Want::Fault {
                reason: FaultReason::BadPhysical,
                access: Access::Read,
                level: 0,
            },
        ),
        (
            "table outside RAM",
            0,
            |d, c| {
                c.pt.set_entry(&d.mem, SRC, 1, table_entry(0x10_0000_0000))
                    .unwrap();
                put(
                    d,
                    c,
                    0,
                    Packet::Copy {
                        src: SRC,
                        dst: DATA,
                        size: 8,
                    },
                )
            },
            Want::Fault {
                reason: FaultReason::BadPhysical,
                access: Access::Read,
                level: 0,
            },
        ),
        (
            "reserved PTE bits",
            0,
            |d, c| {
                let pa = d.alloc.page(&d.mem).unwrap();
                c.pt.map_4k(&d.mem, SRC, pa, PTE_READ).unwrap();
                let slot = c.pt.entry_addr(SRC, 0).unwrap();
                write_u64(&d.mem, slot, read_u64(&d.mem, slot).unwrap() | 1 << 62).unwrap();
                put(
                    d,
                    c,
                    0,
                    Packet::Copy {
                        src: SRC,
                        dst: DATA,
                        size: 8,
                    },
                )
            },
            Want::Fault {
                reason: FaultReason::Malformed,
                access: Access::Read,
                level: 0,
            },
        ),
        (
            "VA beyond 40 bits (gen 1)",
            0,
            |d, c| {
                put(
                    d,
                    c,
                    0,
                    Packet::Fill {
                        dst: 1 << 40,
                        size: 4,
                        pattern: 0,
                    },
                )
            },
            Want::Fault {
                reason: FaultReason::OutOfRange,
                access: Access::Write,
                level: LEVEL_NONE,
            },
        ),
        (
            "command buffer not mapped",
            0,
            |d, c| {
                put(
                    d,
                    c,
                    0,
                    Packet::Indirect {
                        va: UNMAPPED,
                        size: 64,
                    },
                );
                // The fault names the packet being fetched: the buffer's first.
                (UNMAPPED, 0)
            },
            Want::Fault {
                reason: FaultReason::NotPresent,
                access: Access::Execute,
                level: 2,
            },
        ),
        (
            "semaphore not readable",
            1,
            |d, c| {
                c.pt.map_4k(&d.mem, SEM, d.alloc.alloc(4096, 4096).unwrap(), PTE_WRITE)
                    .unwrap();
                put(
                    d,
                    c,
                    1,
                    Packet::SemWait {
                        va: SEM,
                        value: 0,
                        op: SEM_WAIT_GEQ,
                    },
                )
            },
            Want::Fault {
                reason: FaultReason::Permission,
                access: Access::Read,
                level: 0,
            },
        ),
        (
            "oversized copy",
            0,
            |d, c| {
                put(
                    d,
                    c,
                    0,
                    Packet::Copy {
                        src: SRC,
                        dst: DATA,
                        size: (1 << 32) + 1,
                    },
                )
            },
            Want::Error {
                code: EngineError::BadOperand,
                depth: 0,
            },
        ),
        (
            "unknown opcode",
            0,
            |d, c| raw(d, c, 0, &[encode_header(1, 0x7f, 1)]),
            Want::Error {
                code: EngineError::BadOpcode,
                depth: 0,
            },
        ),
        (
            "gen-2 header on gen 1",
            1,
            |d, c| raw(d, c, 1, &[encode_header(2, OP_FENCE, 6), 0, 0, 0, 0, 0]),
            Want::Error {
                code: EngineError::BadHeader,
                depth: 0,
            },
        ),
        (
            "packet past the write pointer",
            0,
            |d, c| raw(d, c, 0, &[encode_header(1, OP_FENCE, 6), DATA as u32]),
            Want::Error {
                code: EngineError::Truncated,
                depth: 0,
            },
        ),
        (
            "copy on the compute engine",
            1,
            |d, c| {
                put(
                    d,
                    c,
                    1,
                    Packet::Copy {
                        src: SRC,
                        dst: DATA,
                        size: 4,
                    },
                )
            },
            Want::Error {
                code: EngineError::WrongEngine,
                depth: 0,
            },
        ),
        (
            "DISPATCH of a module without execute permission",
            1,
            |d, c| {
                put(
                    d,
                    c,
                    1,
                    Packet::Dispatch(DispatchPacket {
                        module_va: DATA,
                        module_size: 64,
                        kernel: 0,
                        args_va: 0,
                        args_size: 0,
                        grid: [1; 3],
                        wg: [32, 1, 1],
                        shared_size: 0,
                    }),
                )
            },
            Want::Fault {
                reason: FaultReason::Permission,
                access: Access::Execute,
                level: 0,
            },
        ),
        (
            "DISPATCH with a short payload",
            1,
            |d, c| raw(d, c, 1, &[encode_header(1, OP_DISPATCH, 4), 0, 0, 0]),
            Want::Error {
                code: EngineError::BadLength,
                depth: 0,
            },
        ),
        (
            "misaligned fence",
            1,
            |d, c| {
                put(
                    d,
                    c,
                    1,
                    Packet::Fence {
                        va: DATA + 4,
                        seqno: 1,
                        flags: 0,
                    },
                )
            },
            Want::Error {
                code: EngineError::Misaligned,
                depth: 0,
            },
        ),
        (
            "chained command-buffer depth bomb",
            0,
            |d, c| {
                let pa = d.buffer(c, SRC, 4096, RX).unwrap();
                let mut ib = PacketWriter::buffer(pa, SRC, 4096, 1);
                ib.packet(&d.mem, &Packet::Indirect { va: SRC, size: 16 })
                    .unwrap();
                put(d, c, 0, Packet::Indirect { va: SRC, size: 16 });
                (SRC, encode_header(1, vgpu_hwif::packet::OP_INDIRECT, 4))
            },
            Want::Error {
                code: EngineError::IndirectDepth,
                depth: MAX_INDIRECT_DEPTH,
            },
        ),
        (
            "bad packet inside a command buffer",
            0,
            |d, c| {
                let pa = d.buffer(c, SRC, 4096, RX).unwrap();
                let mut ib = PacketWriter::buffer(pa, SRC, 4096, 1);
                ib.nop(&d.mem, 3).unwrap();
                ib.words(&d.mem, &[encode_header(1, 0x66, 1)]).unwrap();
                put(d, c, 0, Packet::Indirect { va: SRC, size: 16 });
                (SRC + 12, encode_header(1, 0x66, 1))
            },
            Want::Error {
                code: EngineError::BadOpcode,
                depth: 1,
            },
        ),
    ];
    let mut d = rig(1, 32);
    let (mut healthy, _) = context(&mut d, 0, PRIORITY_NORMAL, 0, engine::COPY);
    let mut seq = 0;
    for (i, (name, e, build, want)) in cases.iter().enumerate() {
        let id = i as u32 + 1;
        let (mut c, _) = context(&mut d, id, PRIORITY_NORMAL, 0, *e);
        // A good packet first: the error must name the second one.
        put(&mut d, &mut c, *e, Packet::Nop { words: 1 });
        let (bad_va, header) = build(&mut d, &mut c);
        let wptr = c.ring(*e).unwrap().writer.wptr();
        d.doorbell(id, *e, wptr).unwrap();
        let ev = d.event(T).unwrap_or_else(|err| panic!("{name}: {err}"));
        match *want {
            Want::Error { code, depth } => {
                let rptr = if depth == 0 {
                    (bad_va - ring_va(*e)) as u32
                } else {
                    4
                };
                assert_eq!(
                    ev,
                    Event::EngineError(EngineErrorRecord {
                        ctx_id: id,
                        engine: *e,
                        code: code as u32,
                        packet_va: bad_va,
                        rptr,
                        depth,
                        // The offset in the ring's command buffer: the
                        // packet's own at depth 1; deeper, of the INDIRECT
                        // at its start that leads on.
                        cmd_offset: if depth == 1 { (bad_va - SRC) as u32 } else { 0 },
                        header
                    }),
                    "{name}"
                );
                let s = d.settle(&c, *e, T).unwrap();
                assert_eq!(
                    (s.state, s.error, s.error_rptr),
                    (ring_state::STOPPED, code as u32, rptr),
                    "{name}"
                );
            }
            Want::Fault {
                reason,
                access,
                level,
            } => {
                let Event::Fault {
                    info, packet_va, ..
                } = ev
                else {
                    panic!("{name}: {ev:?}")
                };
                assert_eq!(
                    (
                        info.reason,
                        info.access,
                        info.level,
                        info.ctx_id,
                        info.engine
                    ),
                    (reason as u8, access as u8, level, id as u8, *e as u8),
                    "{name}"
                );
                assert_eq!(packet_va, bad_va, "{name}");
                let s = d.settle(&c, *e, T).unwrap();
                assert_eq!(
                    (s.state, s.error),
                    (ring_state::STOPPED, EngineError::PageFault as u32),
                    "{name}"
                );
            }
        }
        assert_ne!(d.query(id).unwrap().state & ctx_state::ERRORED, 0, "{name}");
        seq += 1;
        still_serving(&mut d, &mut healthy, seq);
    }
    // Doorbells: overflow, backwards, unaligned.
    type Bell = (&'static str, fn(u32) -> u32, EngineError);
    let bells: &[Bell] = &[
        (
            "ring overflow",
            |w| w + RING_SIZE + 4,
            EngineError::RingOverflow,
        ),
        (
            "write pointer backwards",
            |w| w - 4,
            EngineError::BadPointer,
        ),
        (
            "unaligned write pointer",
            |w| w + 2,
            EngineError::BadPointer,
        ),
    ];
    for (i, (name, bad, code)) in bells.iter().enumerate() {
        let id = 40 + i as u32;
        let (mut c, _) = context(&mut d, id, PRIORITY_NORMAL, 0, engine::COPY);
        d.submit(
            &mut c,
            engine::COPY,
            &[Packet::Nop { words: 2 }, Packet::Nop { words: 2 }],
        )
        .unwrap();
        let s = d.settle(&c, engine::COPY, T).unwrap();
        assert_eq!((s.state, s.rptr), (ring_state::IDLE, 16), "{name}");
        d.doorbell(id, engine::COPY, bad(16)).unwrap();
        assert_eq!(
            d.event(T).unwrap(),
            Event::EngineError(EngineErrorRecord {
                ctx_id: id,
                engine: 0,
                code: *code as u32,
                packet_va: ring_va(0) + 16,
                rptr: 16,
                depth: 0,
                cmd_offset: 0,
                header: 0
            }),
            "{name}"
        );
        seq += 1;
        still_serving(&mut d, &mut healthy, seq);
    }
    let dev = d.stats(stats_kind::DEVICE, 0).unwrap();
    assert_eq!(dev.errors + dev.faults, (cases.len() + bells.len()) as u64);
    let summary = d.transport.finish();
    assert_eq!(summary.counters.protocol_errors, 0);
}
