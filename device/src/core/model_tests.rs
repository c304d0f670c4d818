//! Tests of the whole model (control processor, engines, scheduler,
//! resets, telemetry) driven in-process through the testkit driver.

use std::time::Duration;

use vgpu_hwif::event::Event;
use vgpu_hwif::mmu::{PTE_READ, PTE_WRITE};
use vgpu_hwif::packet::Packet;
use vgpu_hwif::pod::Pod;
use vgpu_hwif::proto::{
    ctx_state, engine, ring_state, stats_kind, Command, EngineResetReply, Status, CTX_NONE,
    FAULT_RESUME_ABORT, MAX_CONTEXTS, PRIORITY_REALTIME,
};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use crate::config::{DeviceConfig, Generation};
use crate::testkit::{read_u64, Driver, GpuContext, InProcess, PhysAlloc};

const T: Duration = Duration::from_secs(5);
const RW: u64 = PTE_READ | PTE_WRITE;
const DATA: u64 = 0x20_0000;

fn driver_with(config: DeviceConfig) -> Driver<InProcess> {
    let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 96 << 20)]).unwrap();
    let dev = InProcess::new(config, &mem);
    Driver::new(dev, mem, PhysAlloc::new(0x10_0000, 95 << 20)).unwrap()
}

fn driver(g: Generation) -> Driver<InProcess> {
    driver_with(DeviceConfig::new(g, 4).unwrap())
}

fn setup(d: &mut Driver<InProcess>, id: u32) -> (GpuContext, u64) {
    let mut c = d.context(id, 1, 0).unwrap();
    d.ring(&mut c, engine::COPY).unwrap();
    d.ring(&mut c, engine::COMPUTE).unwrap();
    let pa = d.buffer(&mut c, DATA, 0x1_0000, RW).unwrap();
    (c, pa)
}

#[test]
fn command_operands_are_checked() {
    let mut d = driver(Generation::Gen1);
    let (_c, _) = setup(&mut d, 3);
    let cases: Vec<(&str, Command, Status)> = vec![
        (
            "ctx id 64",
            Command::ContextCreate {
                ctx_id: MAX_CONTEXTS,
                priority: 0,
                flags: 0,
                pt_root: 0x1000,
            },
            Status::InvalidArgument,
        ),
        (
            "priority 4",
            Command::ContextCreate {
                ctx_id: 1,
                priority: PRIORITY_REALTIME + 1,
                flags: 0,
                pt_root: 0x1000,
            },
            Status::InvalidArgument,
        ),
        (
            "root unaligned",
            Command::ContextCreate {
                ctx_id: 1,
                priority: 0,
                flags: 0,
                pt_root: 0x1008,
            },
            Status::InvalidArgument,
        ),
        (
            "ctx exists",
            Command::ContextCreate {
                ctx_id: 3,
                priority: 0,
                flags: 0,
                pt_root: 0x1000,
            },
            Status::AlreadyExists,
        ),
        (
            "destroy unknown",
            Command::ContextDestroy {
                ctx_id: 9,
                flags: 0,
            },
            Status::NotFound,
        ),
        (
            "query unknown",
            Command::ContextQuery { ctx_id: 63 },
            Status::NotFound,
        ),
        (
            "query out of range",
            Command::ContextQuery { ctx_id: u32::MAX },
            Status::NotFound,
        ),
        (
            "ring for unknown ctx",
            Command::RingCreate {
                ctx_id: 9,
                engine: 0,
                size: 4096,
                ring_va: 0,
                status_va: 0,
            },
            Status::NotFound,
        ),
        (
            "ring exists",
            Command::RingCreate {
                ctx_id: 3,
                engine: 0,
                size: 4096,
                ring_va: 0,
                status_va: 0,
            },
            Status::AlreadyExists,
        ),
        (
            "ring engine 2",
            Command::RingCreate {
                ctx_id: 3,
                engine: 2,
                size: 4096,
                ring_va: 0,
                status_va: 0,
            },
            Status::InvalidArgument,
        ),
        (
            "destroy ring engine 7",
            Command::RingDestroy {
                ctx_id: 3,
                engine: 7,
            },
            Status::InvalidArgument,
        ),
        (
            "doorbell engine 2",
            Command::Doorbell {
                ctx_id: 3,
                engine: 2,
                wptr: 0,
            },
            Status::InvalidArgument,
        ),
        (
            "doorbell unknown ctx",
            Command::Doorbell {
                ctx_id: 4,
                engine: 0,
                wptr: 0,
            },
            Status::NotFound,
        ),
        (
            "invalidate engine 5",
            Command::TlbInvalidate {
                ctx_id: 3,
                engine_mask: 1 << 5,
                va: 0,
                size: 0,
            },
            Status::InvalidArgument,
        ),
        (
            "invalidate wraps",
            Command::TlbInvalidate {
                ctx_id: 3,
                engine_mask: 0,
                va: u64::MAX,
                size: 2,
            },
            Status::InvalidArgument,
        ),
        (
            "invalidate unknown ctx",
            Command::TlbInvalidate {
                ctx_id: 5,
                engine_mask: 0,
                va: 0,
                size: 0,
            },
            Status::NotFound,
        ),
        (
            "resume action 2",
            Command::FaultResume {
                ctx_id: 3,
                action: 2,
                fault_id: 1,
            },
            Status::InvalidArgument,
        ),
        (
            "resume no fault",
            Command::FaultResume {
                ctx_id: 3,
                action: 0,
                fault_id: 1,
            },
            Status::NotFound,
        ),
        (
            "reset engine 2",
            Command::EngineReset { engine: 2 },
            Status::InvalidArgument,
        ),
        (
            "stats kind 3",
            Command::QueryStats { kind: 3, id: 0 },
            Status::InvalidArgument,
        ),
        (
            "stats engine 2",
            Command::QueryStats {
                kind: stats_kind::ENGINE,
                id: 2,
            },
            Status::InvalidArgument,
        ),
        (
            "stats device id 1",
            Command::QueryStats {
                kind: stats_kind::DEVICE,
                id: 1,
            },
            Status::InvalidArgument,
        ),
        (
            "stats unknown ctx",
            Command::QueryStats {
                kind: stats_kind::CONTEXT,
                id: 8,
            },
            Status::NotFound,
        ),
    ];
    for (name, cmd, want) in cases {
        assert_eq!(d.status(cmd), want, "{name}");
    }
    // Ring operands, one wrong at a time, on a context without rings.
    d.context(4, 0, 0).unwrap();
    let ring = |size, ring_va, status_va| Command::RingCreate {
        ctx_id: 4,
        engine: 1,
        size,
        ring_va,
        status_va,
    };
    for (size, rva, sva) in [
        (4095, 0x1000, 0),
        (1 << 21, 0x1000, 0),
        (4096, 0x1800, 0),
        (4096, 0x1000, 0x20),
        (4096, 1 << 40, 0),
        (4096, 0x1000, 1 << 40),
    ] {
        assert_eq!(
            d.status(ring(size, rva, sva)),
            Status::InvalidArgument,
            "{size} {rva:#x} {sva:#x}"
        );
    }
    assert_eq!(d.status(ring(4096, 0x1000, 0x40)), Status::Ok);
    assert_eq!(
        d.status(Command::RingDestroy {
            ctx_id: 4,
            engine: 1
        }),
        Status::Ok
    );
    assert_eq!(
        d.status(Command::RingDestroy {
            ctx_id: 4,
            engine: 1
        }),
        Status::NotFound
    );
    assert_eq!(
        d.status(Command::ContextDestroy {
            ctx_id: 4,
            flags: 0
        }),
        Status::Ok
    );
    // Every refusal was counted; the device still works.
    assert!(
        d.transport
            .device
            .counters()
            .errors_for(Status::InvalidArgument)
            >= 13
    );
    assert_eq!(
        d.status(Command::QueryStats {
            kind: stats_kind::DEVICE,
            id: 0
        }),
        Status::Ok
    );
}

#[test]
fn sixty_four_contexts_each_with_a_ring() {
    let mut d = driver(Generation::Gen2);
    let mut ctxs = Vec::new();
    for id in 0..MAX_CONTEXTS {
        let mut c = d.context(id, id % 4, 0).unwrap();
        d.ring(&mut c, engine::COPY).unwrap();
        d.buffer(&mut c, DATA, 4096, RW).unwrap();
        ctxs.push(c);
    }
    for c in &mut ctxs {
        let id = c.id;
        d.submit(
            c,
            engine::COPY,
            &[Packet::Fence {
                va: DATA,
                seqno: u64::from(id) + 100,
                flags: 0,
            }],
        )
        .unwrap();
    }
    let mut seen = vec![false; MAX_CONTEXTS as usize];
    for _ in 0..MAX_CONTEXTS {
        match d.event(T).unwrap() {
            Event::Fence { ctx_id, seqno, .. } => {
                assert_eq!(seqno, u64::from(ctx_id) + 100);
                assert!(!seen[ctx_id as usize]);
                seen[ctx_id as usize] = true;
            }
            other => panic!("{other:?}"),
        }
    }
    for c in &ctxs {
        let s = d.settle(c, engine::COPY, T).unwrap();
        assert_eq!(
            (s.state, s.last_fence, s.packets),
            (ring_state::IDLE, u64::from(c.id) + 100, 1)
        );
    }
    let st = d.engine_stats(engine::COPY).unwrap();
    assert_eq!((st.fences, st.packets), (64, 64));
}

#[test]
fn status_block_and_counters_track_a_copy() {
    let mut d = driver(Generation::Gen1);
    let (mut c, pa) = setup(&mut d, 2);
    let src: Vec<u8> = (0..3000u32).map(|i| i as u8 ^ 0x5a).collect();
    d.mem.write_slice(&src, GuestAddress(pa)).unwrap();
    d.submit(
        &mut c,
        engine::COPY,
        &[
            Packet::Copy {
                src: DATA,
                dst: DATA + 0x8000,
                size: 3000,
            },
            Packet::Fill {
                dst: DATA + 0xc000,
                size: 10,
                pattern: 0x0403_0201,
            },
            Packet::Timestamp { va: DATA + 0xf000 },
            Packet::Fence {
                va: DATA + 0xf008,
                seqno: 9,
                flags: 0,
            },
        ],
    )
    .unwrap();
    assert_eq!(
        d.event(T).unwrap(),
        Event::Fence {
            ctx_id: 2,
            engine: 0,
            seqno: 9,
            va: DATA + 0xf008
        }
    );
    let mut out = vec![0u8; 3000];
    d.mem
        .read_slice(&mut out, GuestAddress(pa + 0x8000))
        .unwrap();
    assert_eq!(out, src);
    let mut fill = [0u8; 12];
    d.mem
        .read_slice(&mut fill, GuestAddress(pa + 0xc000))
        .unwrap();
    assert_eq!(fill, [1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 0, 0]);
    assert!(read_u64(&d.mem, pa + 0xf000).unwrap() > 0);
    let wptr = c.ring(0).unwrap().writer.wptr();
    // The ring goes idle right after the fence.
    let s = d.settle(&c, engine::COPY, T).unwrap();
    assert_eq!(
        (s.state, s.rptr, s.last_fence, s.packets, s.error),
        (ring_state::IDLE, wptr, 9, 4, 0)
    );
    let q = d.query(2).unwrap();
    assert_eq!((q.state, q.packets, q.faults, q.errors), (0, 4, 0, 0));
    let s = d.stats(stats_kind::CONTEXT, 2).unwrap();
    assert_eq!((s.packets, s.bytes, s.fences), (4, 3010, 1));
    assert!(s.tlb_misses > 0);
    let dev = d.stats(stats_kind::DEVICE, 0).unwrap();
    assert_eq!((dev.packets, dev.bytes), (4, 3010));
    assert_eq!(d.engine_stats(engine::COMPUTE).unwrap().packets, 0);
}

#[test]
fn faults_fill_context_counters_and_abort_stops_the_ring() {
    let mut d = driver(Generation::Gen2);
    let mut c = d
        .context(6, 1, vgpu_hwif::proto::CTX_FLAG_REPLAYABLE_FAULTS)
        .unwrap();
    d.ring(&mut c, engine::COMPUTE).unwrap();
    let vas = d
        .submit(
            &mut c,
            engine::COMPUTE,
            &[Packet::Fence {
                va: 0x7000_0000,
                seqno: 1,
                flags: 0,
            }],
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
        panic!("no fault")
    };
    assert_eq!(
        (va, packet_va, info.ctx_id, info.engine, info.flags),
        (0x7000_0000, vas[0], 6, 1, 1)
    );
    let q = d.query(6).unwrap();
    assert_eq!(q.state, ctx_state::FAULT_STALLED | ctx_state::BUSY);
    assert_eq!((q.faults, q.last_fault_va), (1, 0x7000_0000));
    assert_eq!(
        d.status(Command::ContextDestroy {
            ctx_id: 6,
            flags: 0
        }),
        Status::Busy
    );
    assert_eq!(
        d.status(Command::FaultResume {
            ctx_id: 6,
            action: FAULT_RESUME_ABORT,
            fault_id
        }),
        Status::Ok
    );
    let q = d.query(6).unwrap();
    assert_eq!(q.state, ctx_state::ERRORED);
    // The abort was the last word on that fault.
    assert_eq!(
        d.status(Command::FaultResume {
            ctx_id: 6,
            action: 0,
            fault_id
        }),
        Status::NotFound
    );
    assert_eq!(
        d.status(Command::ContextDestroy {
            ctx_id: 6,
            flags: 0
        }),
        Status::Ok
    );
}

#[test]
fn engine_reset_of_an_idle_engine_reports_no_context() {
    let mut d = driver(Generation::Gen1);
    let r = d
        .command(Command::EngineReset {
            engine: engine::COMPUTE,
        })
        .unwrap();
    let r = EngineResetReply::read_from(&r).unwrap();
    assert_eq!((r.engine, r.ctx_id, r.rptr), (1, CTX_NONE, 0));
    assert_eq!(
        d.event(T).unwrap(),
        Event::ResetDone {
            engine: 1,
            ctx_id: CTX_NONE,
            rptr: 0
        }
    );
    assert_eq!(d.engine_stats(engine::COMPUTE).unwrap().resets, 1);
}

#[test]
fn destroy_flushes_the_contexts_translations() {
    // A context destroyed and created again with other tables must not see
    // the old context's cached translations.
    let mut d = driver(Generation::Gen2);
    let (mut c, pa) = setup(&mut d, 1);
    d.submit(
        &mut c,
        engine::COPY,
        &[Packet::Fence {
            va: DATA,
            seqno: 1,
            flags: 0,
        }],
    )
    .unwrap();
    d.event(T).unwrap();
    assert_eq!(read_u64(&d.mem, pa).unwrap(), 1);
    d.settle(&c, engine::COPY, T).unwrap();
    d.command(Command::ContextDestroy {
        ctx_id: 1,
        flags: 0,
    })
    .unwrap();
    let (mut c2, pa2) = setup(&mut d, 1);
    assert_ne!(pa, pa2);
    d.submit(
        &mut c2,
        engine::COPY,
        &[Packet::Fence {
            va: DATA,
            seqno: 2,
            flags: 0,
        }],
    )
    .unwrap();
    d.event(T).unwrap();
    assert_eq!(read_u64(&d.mem, pa2).unwrap(), 2);
    assert_eq!(read_u64(&d.mem, pa).unwrap(), 1, "old page untouched");
}

#[test]
fn trace_records_packets_and_is_written_as_json() {
    let mut d = driver_with(
        DeviceConfig::new(Generation::Gen1, 2)
            .unwrap()
            .with_trace(true),
    );
    let (mut c, _) = setup(&mut d, 0);
    d.submit(
        &mut c,
        engine::COPY,
        &[
            Packet::Fill {
                dst: DATA,
                size: 4096,
                pattern: 1,
            },
            Packet::Fence {
                va: DATA + 8,
                seqno: 3,
                flags: 0,
            },
        ],
    )
    .unwrap();
    d.event(T).unwrap();
    // The trace reaches the device-wide buffer when the slice retires.
    let deadline = std::time::Instant::now() + T;
    let json = loop {
        let mut out = Vec::new();
        d.transport.device.write_trace(&mut out).unwrap();
        let s = String::from_utf8(out).unwrap();
        if s.contains("\"name\":\"FENCE\",\"cat\":\"packet\"")
            || std::time::Instant::now() > deadline
        {
            break s;
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    for needle in [
        "\"name\":\"FILL\",\"cat\":\"fetch\"",
        "\"name\":\"FILL\",\"cat\":\"packet\",\"ph\":\"X\"",
        "\"name\":\"fence\",\"cat\":\"fence\"",
        "\"name\":\"FENCE\",\"cat\":\"packet\"",
        "\"thread_name\"",
    ] {
        assert!(json.contains(needle), "{needle} missing in {json}");
    }
    // Without --trace the file is an empty timeline.
    let d2 = driver(Generation::Gen1);
    let mut out = Vec::new();
    d2.transport.device.write_trace(&mut out).unwrap();
    assert!(String::from_utf8(out).unwrap().contains("\"records\":0"));
}
