//! Command processor tests: one ring, one engine, run synchronously slice
//! by slice against real guest memory.

use std::sync::atomic::Ordering;

use vgpu_hwif::event::Event;
use vgpu_hwif::mmu::{Access, FaultReason, PTE_EXEC, PTE_READ, PTE_WRITE};
use vgpu_hwif::packet::{
    encode_header, DispatchPacket, EngineError, Packet, FENCE_NO_EVENT, MAX_INDIRECT_DEPTH,
    OP_FENCE, OP_NOP, SEM_SIGNAL_ADD, SEM_WAIT_GEQ,
};
use vgpu_hwif::pod::Pod;
use vgpu_hwif::proto::{engine, ring_state, RingStatus};
use vm_memory::{Bytes, GuestAddress};

use super::*;
use crate::core::copy_engine::CopyOp;
use crate::core::ring::{InFlight, Op};
use crate::testkit::{read_u64, write_u64, PacketWriter, PageTables, PhysAlloc};

const RAM: u64 = 8 << 20;
const RING_VA: u64 = 0x1000_0000;
const STATUS_VA: u64 = 0x2000_0000;
const DATA_VA: u64 = 0x3000_0000;
const IB_VA: u64 = 0x4000_0000;
const RING_PA: u64 = 0x20_0000;
const STATUS_PA: u64 = 0x21_0000;
const DATA_PA: u64 = 0x30_0000; // 1 MiB of data
const IB_PA: u64 = 0x28_0000; // 64 KiB of command buffers
const RING_SIZE: u32 = 4096;

struct Rig {
    mem: Mem,
    pt: PageTables,
    ring: PacketWriter,
    cp: CommandProcessor,
    job: Job,
    host: TestHost,
    generation: u32,
}

fn rig_on(generation: u32, eng: u32) -> Rig {
    let mem = Mem::from_ranges(&[(GuestAddress(0), RAM as usize)]).unwrap();
    let mut pt = PageTables::new(&mem, PhysAlloc::new(0x1000, 0x10_0000)).unwrap();
    pt.map_range(
        &mem,
        RING_VA,
        RING_PA,
        u64::from(RING_SIZE),
        PTE_READ | PTE_EXEC,
    )
    .unwrap();
    pt.map_4k(&mem, STATUS_VA, STATUS_PA, PTE_READ | PTE_WRITE)
        .unwrap();
    pt.map_range(&mem, DATA_VA, DATA_PA, 1 << 20, PTE_READ | PTE_WRITE)
        .unwrap();
    pt.map_range(&mem, IB_VA, IB_PA, 64 << 10, PTE_READ | PTE_EXEC)
        .unwrap();
    let job = Job {
        ctx: 5,
        engine: eng,
        priority: 1,
        replayable: false,
        space: AddressSpace {
            asid: 5,
            root: pt.root(),
            va_bits: vgpu_hwif::mmu::va_bits(generation),
        },
        ring_va: RING_VA,
        ring_size: RING_SIZE,
        status_va: STATUS_VA,
        status_broken: false,
        wptr: 0,
        cursor: Cursor::default(),
    };
    Rig {
        mem,
        pt,
        ring: PacketWriter::ring(RING_PA, RING_VA, RING_SIZE, generation),
        cp: CommandProcessor::new(eng, generation, true),
        job,
        host: TestHost::default(),
        generation,
    }
}

fn rig(generation: u32) -> Rig {
    rig_on(generation, engine::COPY)
}

impl Rig {
    fn put(&mut self, p: Packet) -> u64 {
        self.ring.packet(&self.mem, &p).unwrap()
    }

    fn doorbell(&mut self) {
        self.job.wptr = self.ring.wptr();
    }

    fn run(&mut self) -> SliceOutput {
        self.cp.run_slice(&self.host, &self.mem, &mut self.job)
    }

    fn events(&self) -> Vec<Event> {
        std::mem::take(&mut *self.host.events.lock().unwrap())
    }

    fn status(&self) -> RingStatus {
        let mut b = [0u8; 64];
        self.mem
            .read_slice(&mut b, GuestAddress(STATUS_PA))
            .unwrap();
        RingStatus::read_from(&b).unwrap()
    }

    fn data(&self, off: u64, len: usize) -> Vec<u8> {
        let mut b = vec![0u8; len];
        self.mem
            .read_slice(&mut b, GuestAddress(DATA_PA + off))
            .unwrap();
        b
    }
}

fn error_of(out: &SliceOutput) -> (EngineError, u64, u32) {
    match out.end {
        SliceEnd::Error {
            code,
            packet_va,
            header,
        } => (code, packet_va, header),
        other => panic!("expected an engine error, got {other:?}"),
    }
}

#[test]
fn copy_then_fence_runs_in_order_and_reports() {
    for generation in [1, 2] {
        let mut r = rig(generation);
        let src: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
        r.mem.write_slice(&src, GuestAddress(DATA_PA)).unwrap();
        r.put(Packet::Nop { words: 3 });
        r.put(Packet::Copy {
            src: DATA_VA,
            dst: DATA_VA + 0x8_0000 + 3,
            size: 10_000,
        });
        let fence_va = r.put(Packet::Fence {
            va: DATA_VA + 0xf_0000,
            seqno: 77,
            flags: 0,
        });
        r.put(Packet::Fence {
            va: DATA_VA + 0xf_0008,
            seqno: 78,
            flags: FENCE_NO_EVENT,
        });
        r.doorbell();
        let out = r.run();
        assert_eq!(out.end, SliceEnd::Idle, "gen {generation}");
        assert_eq!(r.data(0x8_0003, 10_000), src);
        assert_eq!(read_u64(&r.mem, DATA_PA + 0xf_0000).unwrap(), 77);
        assert_eq!(read_u64(&r.mem, DATA_PA + 0xf_0008).unwrap(), 78);
        assert_eq!(
            r.events(),
            vec![Event::Fence {
                ctx_id: 5,
                engine: 0,
                seqno: 77,
                va: DATA_VA + 0xf_0000
            }],
            "only the first fence posts an event"
        );
        // 4 packets (+ the gen-2 alignment NOP before the copy).
        let packets = if generation == 2 { 5 } else { 4 };
        assert_eq!(out.stats.packets, packets);
        assert_eq!(out.stats.bytes, 10_000);
        assert_eq!(out.stats.fences, 2);
        assert!(out.stats.tlb_misses > 0 && out.stats.tlb_hits > 0);
        assert_eq!(r.job.cursor.rptr, r.ring.wptr());
        assert_eq!(r.job.cursor.last_fence, 78);
        // The status block was written at each fence.
        let s = r.status();
        assert_eq!(
            (s.rptr, s.state, s.last_fence),
            (r.ring.wptr(), ring_state::RUNNING, 78)
        );
        let trace = r.cp.take_trace();
        assert!(trace
            .iter()
            .any(|t| t.kind == TraceKind::Packet && t.name == "COPY"));
        assert!(trace
            .iter()
            .any(|t| t.kind == TraceKind::Fence && t.arg == 77 && t.packet_va == fence_va));
    }
}

#[test]
fn packets_wrap_around_the_ring_end() {
    let mut r = rig(1);
    r.ring.set_wptr(RING_SIZE - 8);
    r.job.cursor.rptr = RING_SIZE - 8;
    r.put(Packet::Fence {
        va: DATA_VA,
        seqno: 5,
        flags: 0,
    });
    r.doorbell();
    assert_eq!(r.run().end, SliceEnd::Idle);
    assert_eq!(read_u64(&r.mem, DATA_PA).unwrap(), 5);
    assert_eq!(r.job.cursor.rptr, RING_SIZE + 16);
}

#[test]
fn indirect_buffers_nest_up_to_the_depth_limit() {
    let mut r = rig(1);
    // IB k (k = 1..=4) at IB_VA + k * 0x1000 writes fence k, then (k < 4)
    // calls IB k + 1: a FENCE (24 bytes) and an INDIRECT (16 bytes).
    let depth = u64::from(MAX_INDIRECT_DEPTH);
    let size = |k: u64| if k < depth { 40 } else { 24 };
    for k in 1..=depth {
        let mut ib = PacketWriter::buffer(IB_PA + k * 0x1000, IB_VA + k * 0x1000, 4096, 1);
        ib.packet(
            &r.mem,
            &Packet::Fence {
                va: DATA_VA + 8 * k,
                seqno: k,
                flags: FENCE_NO_EVENT,
            },
        )
        .unwrap();
        if k < depth {
            ib.packet(
                &r.mem,
                &Packet::Indirect {
                    va: IB_VA + (k + 1) * 0x1000,
                    size: size(k + 1),
                },
            )
            .unwrap();
        }
        assert_eq!(u64::from(ib.wptr()), u64::from(size(k)));
    }
    r.put(Packet::Indirect {
        va: IB_VA + 0x1000,
        size: size(1),
    });
    r.put(Packet::Fence {
        va: DATA_VA + 0x100,
        seqno: 100,
        flags: FENCE_NO_EVENT,
    });
    r.doorbell();
    let out = r.run();
    assert_eq!(out.end, SliceEnd::Idle);
    for k in 1..=MAX_INDIRECT_DEPTH as u64 {
        assert_eq!(read_u64(&r.mem, DATA_PA + 8 * k).unwrap(), k);
    }
    assert_eq!(read_u64(&r.mem, DATA_PA + 0x100).unwrap(), 100);
    // 4 fences + 4 INDIRECTs (counted when their buffer ends) + 1 fence.
    assert_eq!(out.stats.packets, 9);
    assert_eq!(r.job.cursor.depth, 0);

    // One more level: the depth bomb is refused at depth 4.
    let mut r = rig(1);
    for k in 1..=MAX_INDIRECT_DEPTH as u64 {
        let mut ib = PacketWriter::buffer(IB_PA + k * 0x1000, IB_VA + k * 0x1000, 4096, 1);
        ib.packet(
            &r.mem,
            &Packet::Indirect {
                va: IB_VA + (k + 1) * 0x1000,
                size: 16,
            },
        )
        .unwrap();
    }
    r.put(Packet::Nop { words: 1 });
    r.put(Packet::Indirect {
        va: IB_VA + 0x1000,
        size: 16,
    });
    r.doorbell();
    let out = r.run();
    let (code, va, header) = error_of(&out);
    assert_eq!(code, EngineError::IndirectDepth);
    assert_eq!(va, IB_VA + u64::from(MAX_INDIRECT_DEPTH) * 0x1000);
    assert_eq!(header, encode_header(1, vgpu_hwif::packet::OP_INDIRECT, 4));
    assert_eq!(r.job.cursor.depth, MAX_INDIRECT_DEPTH);
    assert_eq!(r.job.cursor.rptr, 4, "rptr names the ring-level INDIRECT");
}

#[test]
fn a_self_calling_buffer_is_stopped_by_the_depth_limit() {
    let mut r = rig(2);
    let mut ib = PacketWriter::buffer(IB_PA, IB_VA, 4096, 2);
    ib.packet(
        &r.mem,
        &Packet::Indirect {
            va: IB_VA,
            size: 16,
        },
    )
    .unwrap();
    r.put(Packet::Indirect {
        va: IB_VA,
        size: 16,
    });
    r.doorbell();
    let (code, va, _) = error_of(&r.run());
    assert_eq!((code, va), (EngineError::IndirectDepth, IB_VA));
}

#[test]
fn malformed_packets_stop_with_the_right_error() {
    type Build = fn(&mut Rig) -> u64;
    let cases: &[(&str, u32, u32, Build, EngineError)] = &[
        (
            "unknown opcode",
            1,
            0,
            |r| r.ring.words(&r.mem, &[encode_header(1, 0x7e, 1)]).unwrap(),
            EngineError::BadOpcode,
        ),
        (
            "zero length",
            1,
            0,
            |r| {
                r.ring
                    .words(&r.mem, &[encode_header(1, OP_NOP, 0)])
                    .unwrap()
            },
            EngineError::BadHeader,
        ),
        (
            "gen-1 flags",
            1,
            0,
            |r| r.ring.words(&r.mem, &[0x0100_0100]).unwrap(),
            EngineError::BadHeader,
        ),
        (
            "gen-2 header on gen 1",
            1,
            0,
            |r| {
                r.ring
                    .words(&r.mem, &[encode_header(2, OP_NOP, 1)])
                    .unwrap()
            },
            EngineError::BadHeader,
        ),
        (
            "gen-1 header on gen 2",
            2,
            0,
            |r| {
                r.ring
                    .words(&r.mem, &[encode_header(1, OP_NOP, 1)])
                    .unwrap()
            },
            EngineError::BadHeader,
        ),
        (
            "too long",
            1,
            0,
            |r| {
                r.ring
                    .words(&r.mem, &[encode_header(1, OP_NOP, 1025)])
                    .unwrap()
            },
            EngineError::BadLength,
        ),
        (
            "fence of 5 words",
            1,
            0,
            |r| {
                r.ring
                    .words(&r.mem, &[encode_header(1, OP_FENCE, 5), 0, 0, 0, 0])
                    .unwrap()
            },
            EngineError::BadLength,
        ),
        (
            "packet past wptr",
            1,
            0,
            |r| {
                r.ring
                    .words(&r.mem, &[encode_header(1, OP_NOP, 4), 0])
                    .unwrap()
            },
            EngineError::Truncated,
        ),
        (
            "copy size 0",
            1,
            0,
            |r| {
                r.put(Packet::Copy {
                    src: DATA_VA,
                    dst: DATA_VA,
                    size: 0,
                })
            },
            EngineError::BadOperand,
        ),
        (
            "copy over 4 GiB",
            1,
            0,
            |r| {
                r.put(Packet::Copy {
                    src: DATA_VA,
                    dst: DATA_VA,
                    size: (1 << 32) + 1,
                })
            },
            EngineError::BadOperand,
        ),
        (
            "misaligned fence",
            1,
            0,
            |r| {
                r.put(Packet::Fence {
                    va: DATA_VA + 4,
                    seqno: 1,
                    flags: 0,
                })
            },
            EngineError::Misaligned,
        ),
        (
            "bad fence flags",
            1,
            0,
            |r| {
                r.put(Packet::Fence {
                    va: DATA_VA,
                    seqno: 1,
                    flags: 2,
                })
            },
            EngineError::BadOperand,
        ),
        (
            "bad semaphore op",
            1,
            0,
            |r| {
                r.put(Packet::SemWait {
                    va: DATA_VA,
                    value: 1,
                    op: 3,
                })
            },
            EngineError::BadOperand,
        ),
        (
            "indirect size 0",
            1,
            0,
            |r| {
                r.ring
                    .words(&r.mem, &[encode_header(1, 1, 4), IB_VA as u32, 0, 0])
                    .unwrap()
            },
            EngineError::BadOperand,
        ),
        (
            "indirect over 1 MiB",
            1,
            0,
            |r| {
                r.put(Packet::Indirect {
                    va: IB_VA,
                    size: (1 << 20) + 4,
                })
            },
            EngineError::BadOperand,
        ),
        (
            "copy on compute",
            1,
            1,
            |r| {
                r.put(Packet::Copy {
                    src: DATA_VA,
                    dst: DATA_VA,
                    size: 4,
                })
            },
            EngineError::WrongEngine,
        ),
        (
            "dispatch on copy",
            1,
            0,
            |r| {
                let mut w = [0u32; 15];
                Packet::Dispatch(DispatchPacket {
                    module_va: 0x1000,
                    module_size: 64,
                    kernel: 0,
                    args_va: 0,
                    args_size: 0,
                    grid: [1; 3],
                    wg: [32, 1, 1],
                    shared_size: 0,
                })
                .encode(1, &mut w)
                .unwrap();
                r.ring.words(&r.mem, &w).unwrap()
            },
            EngineError::WrongEngine,
        ),
        (
            "dispatch of a malformed module (zeroed, executable)",
            2,
            1,
            |r| {
                let mut w = [0u32; 15];
                Packet::Dispatch(DispatchPacket {
                    module_va: IB_VA,
                    module_size: 64,
                    kernel: 0,
                    args_va: 0,
                    args_size: 0,
                    grid: [1; 3],
                    wg: [32, 1, 1],
                    shared_size: 0,
                })
                .encode(2, &mut w)
                .unwrap();
                r.ring.words(&r.mem, &w).unwrap()
            },
            EngineError::BadOperand,
        ),
        (
            "gen-2 misaligned copy",
            2,
            0,
            |r| {
                r.ring.nop(&r.mem, 1).unwrap();
                let mut w = [0u32; 7];
                Packet::Copy {
                    src: DATA_VA,
                    dst: DATA_VA,
                    size: 4,
                }
                .encode(2, &mut w)
                .unwrap();
                r.ring.words(&r.mem, &w).unwrap()
            },
            EngineError::Misaligned,
        ),
    ];
    for (name, generation, eng, build, want) in cases {
        let mut r = rig_on(*generation, *eng);
        let bad_va = build(&mut r);
        r.doorbell();
        let out = r.run();
        let (code, va, header) = error_of(&out);
        assert_eq!(code, *want, "{name}");
        assert_eq!(va, bad_va, "{name}: packet VA");
        let first: u32 = r
            .mem
            .read_obj(GuestAddress(RING_PA + (bad_va - RING_VA)))
            .unwrap();
        assert_eq!(header, first, "{name}: header word");
        assert!(r.host.events.lock().unwrap().is_empty(), "{name}");
    }
    // A gen-1 copy needs no alignment.
    let mut r = rig(1);
    r.ring.nop(&r.mem, 1).unwrap();
    r.put(Packet::Copy {
        src: DATA_VA,
        dst: DATA_VA + 64,
        size: 4,
    });
    r.doorbell();
    assert_eq!(r.run().end, SliceEnd::Idle);
}

#[test]
fn fetch_needs_execute_permission_and_faults_point_at_the_packet() {
    let mut r = rig(1);
    r.put(Packet::Nop { words: 1 });
    r.doorbell();
    // Make the ring page read-only (no EXEC) and invalidate it.
    r.pt.map_4k(&r.mem, RING_VA, RING_PA, PTE_READ).unwrap();
    r.cp.tlb.flush();
    match r.run().end {
        SliceEnd::Fault { fault, packet_va } => {
            assert_eq!(packet_va, RING_VA);
            assert_eq!(
                (fault.va, fault.access, fault.reason),
                (RING_VA, Access::Execute, FaultReason::Permission)
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(r.job.cursor.rptr, 0, "nothing consumed");
}

#[test]
fn a_faulting_copy_resumes_where_it_stopped() {
    let mut r = rig(1);
    let src: Vec<u8> = (0..0x3000u32).map(|i| (i % 253) as u8).collect();
    r.mem.write_slice(&src, GuestAddress(DATA_PA)).unwrap();
    let unmapped = 0x5000_0000u64;
    r.pt.map_4k(&r.mem, unmapped, DATA_PA + 0x8_0000, PTE_READ | PTE_WRITE)
        .unwrap();
    r.pt.map_4k(
        &r.mem,
        unmapped + 0x2000,
        DATA_PA + 0x8_2000,
        PTE_READ | PTE_WRITE,
    )
    .unwrap();
    let copy_va = r.put(Packet::Copy {
        src: DATA_VA,
        dst: unmapped,
        size: 0x3000,
    });
    r.put(Packet::Fence {
        va: DATA_VA + 0x1_0000,
        seqno: 1,
        flags: 0,
    });
    r.doorbell();
    let out = r.run();
    let SliceEnd::Fault { fault, packet_va } = out.end else {
        panic!("{:?}", out.end)
    };
    assert_eq!(packet_va, copy_va);
    assert_eq!(
        (fault.va, fault.access, fault.reason, fault.level),
        (unmapped + 0x1000, Access::Write, FaultReason::NotPresent, 0)
    );
    assert_eq!(out.stats.bytes, 0x1000);
    // The driver maps the page; the retry continues from byte 0x1000.
    r.pt.map_4k(
        &r.mem,
        unmapped + 0x1000,
        DATA_PA + 0x8_1000,
        PTE_READ | PTE_WRITE,
    )
    .unwrap();
    let out = r.run();
    assert_eq!(out.end, SliceEnd::Idle);
    assert_eq!(out.stats.bytes, 0x2000);
    assert_eq!(r.data(0x8_0000, 0x3000), src);
    assert_eq!(read_u64(&r.mem, DATA_PA + 0x1_0000).unwrap(), 1);
}

#[test]
fn attention_interrupts_a_long_copy_between_chunks() {
    let mut r = rig(1);
    r.put(Packet::Copy {
        src: DATA_VA,
        dst: DATA_VA + 0x8_0000,
        size: 0x8_0000,
    });
    r.doorbell();
    r.host.attention.store(true, Ordering::Relaxed);
    assert_eq!(r.run().end, SliceEnd::Interrupted);
    assert!(
        r.job.cursor.pending.is_none(),
        "stopped before the first packet"
    );
    // Let it take one step: run until the first chunk, then interrupt.
    r.host.attention.store(false, Ordering::Relaxed);
    struct OneStep<'a>(&'a TestHost, std::cell::Cell<u32>);
    impl Host for OneStep<'_> {
        fn now_ns(&self) -> u64 {
            self.0.now_ns()
        }
        fn attention(&self) -> bool {
            let n = self.1.get() + 1;
            self.1.set(n);
            n > 2
        }
        fn slice_over(&self) -> bool {
            false
        }
        fn sem_epoch(&self) -> u64 {
            0
        }
        fn semaphores_changed(&self) {}
        fn post(&self, e: Event) {
            self.0.post(e)
        }
    }
    let host = OneStep(&r.host, std::cell::Cell::new(0));
    let out = r.cp.run_slice(&host, &r.mem, &mut r.job);
    assert_eq!(out.end, SliceEnd::Interrupted);
    assert_eq!(out.stats.bytes, 0x1000, "one page-sized chunk");
    let Some(InFlight {
        op: Op::Copy(CopyOp::Linear { done, .. }),
        ..
    }) = r.job.cursor.pending
    else {
        panic!("copy not in flight: {:?}", r.job.cursor.pending)
    };
    assert_eq!(done, 0x1000);
    let out = r.run();
    assert_eq!(out.end, SliceEnd::Idle);
    assert_eq!(out.stats.bytes, 0x7_f000);
    assert_eq!(r.data(0x8_0000, 0x8_0000), r.data(0, 0x8_0000));
}

#[test]
fn semaphores_block_the_ring_until_satisfied() {
    let mut r = rig(1);
    let sem = DATA_VA + 0x2_0000;
    r.put(Packet::SemWait {
        va: sem,
        value: 3,
        op: SEM_WAIT_GEQ,
    });
    r.put(Packet::SemSignal {
        va: sem + 8,
        value: 5,
        op: SEM_SIGNAL_ADD,
    });
    r.put(Packet::Timestamp { va: sem + 16 });
    r.doorbell();
    r.host.epoch.store(9, Ordering::Relaxed);
    assert_eq!(r.run().end, SliceEnd::SemWait { epoch: 9 });
    assert_eq!(r.run().end, SliceEnd::SemWait { epoch: 9 }, "still 0");
    write_u64(&r.mem, DATA_PA + 0x2_0000, 2).unwrap();
    assert!(matches!(r.run().end, SliceEnd::SemWait { .. }));
    write_u64(&r.mem, DATA_PA + 0x2_0000, 3).unwrap();
    write_u64(&r.mem, DATA_PA + 0x2_0008, 10).unwrap();
    r.host.now.store(123_456, Ordering::Relaxed);
    assert_eq!(r.run().end, SliceEnd::Idle);
    assert_eq!(read_u64(&r.mem, DATA_PA + 0x2_0008).unwrap(), 15);
    assert!(read_u64(&r.mem, DATA_PA + 0x2_0010).unwrap() >= 123_456);
    assert!(
        r.host.epoch.load(Ordering::Relaxed) > 9,
        "the signal bumped the epoch"
    );
}

#[test]
fn status_block_fault_is_reported() {
    let mut r = rig(1);
    r.pt.unmap(&r.mem, STATUS_VA).unwrap();
    r.put(Packet::Fence {
        va: DATA_VA,
        seqno: 1,
        flags: 0,
    });
    r.doorbell();
    match r.run().end {
        SliceEnd::StatusFault(f) => assert_eq!((f.va, f.access), (STATUS_VA, Access::Write)),
        other => panic!("{other:?}"),
    }
    // The fence value itself was written before the status block.
    assert_eq!(read_u64(&r.mem, DATA_PA).unwrap(), 1);
    assert!(
        r.events().is_empty(),
        "no fence event without a status block"
    );
}

#[test]
fn packets_are_decoded_from_one_copy_of_their_words() {
    // A packet in flight is resumed from its decoded copy: rewriting it in
    // guest memory after the device fetched it changes nothing.
    let mut r = rig(1);
    r.put(Packet::Fence {
        va: DATA_VA,
        seqno: 1,
        flags: FENCE_NO_EVENT,
    });
    r.put(Packet::SemWait {
        va: DATA_VA + 8,
        value: 1,
        op: SEM_WAIT_GEQ,
    });
    let third = r.put(Packet::Fence {
        va: DATA_VA + 16,
        seqno: 3,
        flags: FENCE_NO_EVENT,
    });
    r.doorbell();
    // Blocks on the wait after having prefetched the whole ring.
    assert!(matches!(r.run().end, SliceEnd::SemWait { .. }));
    assert_eq!(r.generation, 1);
    assert_eq!(r.job.cursor.rptr, 24);
    // The wait (in flight) is resumed from its decoded form even if the
    // guest overwrites it.
    r.mem
        .write_slice(&[0xffu8; 24], GuestAddress(RING_PA + 24))
        .unwrap();
    write_u64(&r.mem, DATA_PA + 8, 1).unwrap();
    assert_eq!(r.run().end, SliceEnd::Idle);
    assert_eq!(read_u64(&r.mem, DATA_PA + 16).unwrap(), 3);
    assert_eq!(third, RING_VA + 48);
}

#[test]
fn semaphore_comparisons() {
    use vgpu_hwif::packet::{SEM_WAIT_EQ, SEM_WAIT_NEQ};
    assert!(sem_satisfied(SEM_WAIT_GEQ, 5, 5) && sem_satisfied(SEM_WAIT_GEQ, u64::MAX, 5));
    assert!(!sem_satisfied(SEM_WAIT_GEQ, 4, 5));
    assert!(sem_satisfied(SEM_WAIT_EQ, 5, 5) && !sem_satisfied(SEM_WAIT_EQ, 6, 5));
    assert!(sem_satisfied(SEM_WAIT_NEQ, 6, 5) && !sem_satisfied(SEM_WAIT_NEQ, 5, 5));
    assert!(!sem_satisfied(3, 5, 5), "unknown ops never pass");
}
