//! Tests of the whole model (control processor, engines, scheduler,
//! resets, telemetry) driven in-process through the testkit driver.

use std::time::Duration;

use vgpu_hwif::event::{EngineErrorRecord, Event};
use vgpu_hwif::mmu::{PTE_READ, PTE_WRITE};
use vgpu_hwif::packet::{Copy2dPacket, Packet};
use vgpu_hwif::pod::Pod;
use vgpu_hwif::proto::{
    ctx_state, engine, ring_state, stats_kind, Command, EngineResetReply, Status, CTX_NONE,
    FAULT_RESUME_ABORT, MAX_CONTEXTS, PRIORITY_REALTIME,
};
use vgpu_hwif::rng::Rng;
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
            Command::EngineReset {
                engine: 2,
                hung_ctx: CTX_NONE,
            },
            Status::InvalidArgument,
        ),
        (
            "stats kind 4",
            Command::QueryStats { kind: 4, id: 0 },
            Status::InvalidArgument,
        ),
        (
            "stats context-engine of an unknown ctx",
            Command::QueryStats {
                kind: stats_kind::CONTEXT_ENGINE,
                id: stats_kind::context_engine_id(8, 0),
            },
            Status::NotFound,
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
            hung_ctx: CTX_NONE,
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

#[test]
fn random_rings_tables_and_commands_never_hurt_the_device() {
    use vgpu_hwif::mmu::{PTE_EXEC, PTE_HUGE};
    use vgpu_hwif::packet::{encode_header, OP_DISPATCH};
    for generation in [Generation::Gen1, Generation::Gen2] {
        let mut d = driver(generation);
        let gen_no = generation.number();
        let mut rng = Rng::from_state(0x0123_4567_89ab_cdef ^ u64::from(gen_no));
        let mut ctxs = Vec::new();
        for id in 0..4 {
            let flags = if id % 2 == 0 {
                vgpu_hwif::proto::CTX_FLAG_REPLAYABLE_FAULTS
            } else {
                0
            };
            let mut c = d.context(id, id % 4, flags).unwrap();
            d.ring(&mut c, engine::COPY).unwrap();
            d.ring(&mut c, engine::COMPUTE).unwrap();
            d.buffer(&mut c, DATA, 0x1_0000, RW).unwrap();
            d.buffer(&mut c, 0x40_0000, 0x1000, PTE_READ | PTE_EXEC)
                .unwrap();
            ctxs.push(c);
        }
        // Mostly good addresses (one in ten hostile).
        let vas = [
            DATA,
            DATA + 0x100,
            DATA + 0x800,
            DATA + 0x4000,
            DATA + 0x8000,
            DATA + 0xff8,
            DATA + 0x2000,
            DATA + 0xc000,
            DATA + 0x1000,
        ];
        let hostile = [
            DATA + 4,
            0x40_0000,
            0x5000_0000,
            1 << 40,
            1 << 47,
            u64::MAX - 7,
            0,
        ];
        let pick = |rng: &mut Rng| {
            if rng.below(10) == 0 {
                hostile[rng.below(hostile.len() as u64) as usize]
            } else {
                vas[rng.below(vas.len() as u64) as usize]
            }
        };
        let mut kinds = [0u64; 8];
        let mut corrupted: Vec<(u32, u64, u64)> = Vec::new();
        for _ in 0..600 {
            let ci = rng.below(ctxs.len() as u64) as usize;
            let e = rng.below(2) as u32;
            let id = ctxs[ci].id;
            match rng.below(30) {
                0..=19 => {
                    // A burst of packets: valid ones with hostile operands,
                    // and raw garbage.
                    for _ in 0..1 + rng.below(6) {
                        let va = pick(&mut rng);
                        let va2 = pick(&mut rng);
                        let size = if rng.below(10) == 0 {
                            [0x1_0001, 1 << 32, 0][rng.below(3) as usize]
                        } else {
                            [1, 8, 64, 100, 4096, 0x2000][rng.below(6) as usize]
                        };
                        let op = |rng: &mut Rng, max: u64| if rng.below(10) == 0 { max + 1 } else { rng.below(max + 1) } as u32;
                        let p = match rng.below(30) {
                            0..=2 => Packet::Copy {
                                src: va,
                                dst: va2,
                                size,
                            },
                            3..=5 => Packet::Fill {
                                dst: va,
                                size,
                                pattern: rng.next_u64() as u32,
                            },
                            6 => Packet::Copy2d(Copy2dPacket {
                                src: va,
                                dst: va2,
                                src_pitch: rng.below(9000) as u32,
                                dst_pitch: rng.below(9000) as u32,
                                width: rng.below(5000) as u32,
                                height: rng.below(4) as u32,
                            }),
                            7..=11 => Packet::Fence {
                                va,
                                seqno: rng.next_u64(),
                                flags: op(&mut rng, 1),
                            },
                            12 | 13 => Packet::SemWait {
                                va,
                                value: rng.below(3),
                                op: op(&mut rng, 2),
                            },
                            14 | 15 => Packet::SemSignal {
                                va,
                                value: 1,
                                op: op(&mut rng, 1),
                            },
                            16 | 17 => Packet::Timestamp { va },
                            18 | 19 => Packet::Indirect {
                                va: [0x40_0000, va][rng.below(2) as usize],
                                size: [16, 64, 4096, 0, 6, 1 << 21][rng.below(6) as usize],
                            },
                            20..=27 => Packet::Nop {
                                words: 1 + rng.below(8) as u32,
                            },
                            _ => {
                                let w = [
                                    rng.next_u64() as u32,
                                    encode_header(gen_no, OP_DISPATCH, 3),
                                    encode_header(3 - gen_no, 2, 6),
                                ];
                                let ring = ctxs[ci].ring(e).unwrap();
                                ring.writer
                                    .words(&d.mem, &w[..1 + rng.below(3) as usize])
                                    .unwrap();
                                continue;
                            }
                        };
                        let ring = ctxs[ci].ring(e).unwrap();
                        ring.writer.packet(&d.mem, &p).unwrap();
                    }
                    // Usually close the burst with a fence a driver would
                    // wait for.
                    if rng.below(2) == 0 {
                        let ring = ctxs[ci].ring(e).unwrap();
                        ring.writer
                            .packet(
                                &d.mem,
                                &Packet::Fence {
                                    va: DATA,
                                    seqno: rng.next_u64(),
                                    flags: 0,
                                },
                            )
                            .unwrap();
                    }
                    // Random command-buffer contents too.
                    if rng.below(4) == 0 {
                        let pa = ctxs[ci].pt.translate(&d.mem, 0x40_0000).unwrap_or(0);
                        for k in 0..16 {
                            let _ = crate::testkit::write_u64(&d.mem, pa + 8 * k, rng.next_u64());
                        }
                    }
                    let ring = ctxs[ci].ring(e).unwrap();
                    let mut wptr = ring.writer.wptr();
                    if rng.below(8) == 0 {
                        wptr = rng.next_u64() as u32;
                    }
                    d.doorbell(id, e, wptr).unwrap();
                }
                20 => {
                    // Corrupt one page-table entry of the context (the
                    // driver repairs it a while later).
                    let va = pick(&mut rng) & ((1 << 47) - 1);
                    let level = rng.below(4) as u32;
                    let junk = match rng.below(4) {
                        0 => rng.next_u64(),
                        1 => rng.next_u64() & !0xfff | 1,
                        2 => ctxs[ci].pt.root() | 1,
                        _ => (rng.next_u64() & 0xffff_f000) | 1 | PTE_HUGE,
                    };
                    if let Some(slot) = ctxs[ci].pt.entry_addr(va, level) {
                        corrupted.push((id, slot, read_u64(&d.mem, slot).unwrap()));
                        crate::testkit::write_u64(&d.mem, slot, junk).unwrap();
                    }
                }
                21 | 22 => {
                    let size = [0, 1, 4096, u64::MAX][rng.below(4) as usize];
                    let _ = d.status(Command::TlbInvalidate {
                        ctx_id: id,
                        engine_mask: rng.below(4) as u32,
                        va: pick(&mut rng),
                        size,
                    });
                }
                23 => {
                    let r = d
                        .command(Command::EngineReset {
                            engine: e,
                            hung_ctx: CTX_NONE,
                        })
                        .unwrap();
                    assert_eq!(EngineResetReply::read_from(&r).unwrap().engine, e);
                    // The driver resumes at the ring's new read pointer
                    // (if this ring was the one reset).
                    let idle = d.wait_status(&ctxs[ci], e, Duration::from_millis(20), |s| {
                        s.state == ring_state::IDLE
                    });
                    if let (Ok(s), Some(ring)) = (idle, ctxs[ci].ring(e)) {
                        ring.writer.set_wptr(s.rptr);
                    }
                }
                24..=26 => {
                    let _ = d.status(Command::FaultResume {
                        ctx_id: id,
                        action: rng.below(3) as u32,
                        fault_id: rng.below(40),
                    });
                }
                _ => {
                    assert_eq!(d.status(Command::ContextQuery { ctx_id: id }), Status::Ok);
                    assert_eq!(
                        d.status(Command::QueryStats {
                            kind: stats_kind::CONTEXT,
                            id
                        }),
                        Status::Ok
                    );
                }
            }
            if !corrupted.is_empty() && rng.below(8) == 0 {
                for (ctx_id, slot, old) in corrupted.drain(..).rev() {
                    crate::testkit::write_u64(&d.mem, slot, old).unwrap();
                    d.command(Command::TlbInvalidate {
                        ctx_id,
                        engine_mask: 0,
                        va: 0,
                        size: 0,
                    })
                    .unwrap();
                }
            }
            // A driver that recovers: it answers replayable faults and
            // resets engines that stopped a ring (not always at once).
            let mut resumes = Vec::new();
            let mut resets = [false; 2];
            while let Ok(rec) = d.event_record(Duration::ZERO) {
                let ev = Event::from_record(&rec);
                assert!(ev.is_ok(), "{rec:?}");
                if let Some(k) = kinds.get_mut(rec.kind as usize) {
                    *k += 1;
                }
                match ev {
                    Ok(Event::Fault { info, fault_id, .. }) if info.flags != 0 => {
                        resumes.push((u32::from(info.ctx_id), fault_id));
                    }
                    Ok(Event::Fault { info, .. }) => resets[usize::from(info.engine & 1)] = true,
                    Ok(Event::EngineError(EngineErrorRecord { engine: e, .. })) => {
                        resets[(e & 1) as usize] = true
                    }
                    _ => {}
                }
            }
            for (ctx_id, fault_id) in resumes {
                let action = rng.below(2) as u32;
                let st = d.status(Command::FaultResume {
                    ctx_id,
                    action,
                    fault_id,
                });
                assert!(matches!(st, Status::Ok | Status::NotFound), "{st:?}");
            }
            for (e, r) in resets.into_iter().enumerate() {
                if r && rng.below(2) == 0 {
                    d.command(Command::EngineReset {
                        engine: e as u32,
                        hung_ctx: CTX_NONE,
                    })
                    .unwrap();
                }
            }
        }
        // Fences, faults, engine errors and resets all happened.
        use vgpu_hwif::event::EventKind as K;
        for k in [K::Fence, K::Fault, K::EngineError, K::ResetDone] {
            assert!(
                kinds[k as usize] > 0,
                "{gen_no}: no {} in {kinds:?}",
                k.name()
            );
        }
        let gpu = d.transport.device.gpu().clone();
        for (e, a) in gpu.alive.iter().enumerate() {
            assert!(
                a.load(std::sync::atomic::Ordering::Acquire),
                "engine {e} died"
            );
        }
        // Back to a clean device: everything works as on the first day.
        d.device_reset().unwrap();
        let (mut c, pa) = setup(&mut d, 9);
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
        loop {
            if let Event::Fence {
                ctx_id: 9,
                seqno: 1,
                ..
            } = d.event(T).unwrap()
            {
                break;
            }
        }
        assert_eq!(read_u64(&d.mem, pa).unwrap(), 1);
    }
}

#[test]
fn virtio_reset_returns_to_power_on_without_an_event() {
    let mut d = driver(Generation::Gen1);
    let (mut c, _) = setup(&mut d, 5);
    d.submit(
        &mut c,
        engine::COMPUTE,
        &[Packet::SemWait {
            va: DATA,
            value: 1,
            op: 0,
        }],
    )
    .unwrap();
    d.settle(&c, engine::COMPUTE, T).unwrap();
    d.transport.device.reset();
    assert_eq!(d.transport.device.pending_events(), 0);
    // The firmware is back in its boot state: it answers nothing else.
    assert_eq!(
        d.status(Command::ContextQuery { ctx_id: 5 }),
        Status::NotReady
    );
    d.boot_default_firmware().unwrap();
    assert_eq!(
        d.status(Command::ContextQuery { ctx_id: 5 }),
        Status::NotFound
    );
    // Event numbering restarted.
    d.command(Command::Ping { cookie: 1 }).unwrap();
    assert_eq!(d.event_record(T).unwrap().seq, 1);
}

#[test]
fn engine_reset_clears_the_hung_ring_blocked_on_a_semaphore() {
    use vgpu_hwif::packet::SEM_WAIT_GEQ;
    let mut d = driver(Generation::Gen2);
    let (mut waiter, wpa) = setup(&mut d, 1);
    let (mut other, _) = setup(&mut d, 2);
    let fence = |seqno| Packet::Fence {
        va: DATA + 0x100,
        seqno,
        flags: 0,
    };
    // Context 1 waits on a semaphore nobody will ever release, then would
    // write a fence; context 2 also has a semaphore wait queued on the same
    // engine, whose semaphore is then released.
    d.submit(
        &mut waiter,
        engine::COPY,
        &[
            Packet::SemWait {
                va: DATA,
                value: 1,
                op: SEM_WAIT_GEQ,
            },
            fence(7),
        ],
    )
    .unwrap();
    assert_eq!(
        d.settle(&waiter, engine::COPY, T).unwrap().state,
        ring_state::SEM_WAIT
    );
    // Without naming it, an engine reset leaves the blocked ring alone: it
    // was not in flight.
    let r = d
        .command(Command::EngineReset {
            engine: engine::COPY,
            hung_ctx: CTX_NONE,
        })
        .unwrap();
    assert_eq!(EngineResetReply::read_from(&r).unwrap().ctx_id, CTX_NONE);
    assert!(matches!(d.event(T).unwrap(), Event::ResetDone { .. }));
    assert_eq!(
        d.settle(&waiter, engine::COPY, T).unwrap().state,
        ring_state::SEM_WAIT
    );
    // A context id out of range is refused.
    assert_eq!(
        d.status(Command::EngineReset {
            engine: engine::COPY,
            hung_ctx: MAX_CONTEXTS,
        }),
        Status::InvalidArgument
    );
    // Naming the hung context clears its ring: read pointer at the write
    // pointer, idle, and the fence behind the wait never written.
    d.command(Command::EngineReset {
        engine: engine::COPY,
        hung_ctx: 1,
    })
    .unwrap();
    assert!(matches!(d.event(T).unwrap(), Event::ResetDone { .. }));
    let st = d.settle(&waiter, engine::COPY, T).unwrap();
    assert_eq!(st.state, ring_state::IDLE);
    assert_eq!(st.rptr, waiter.ring(engine::COPY).unwrap().writer.wptr());
    // Releasing the semaphore now changes nothing for context 1 ...
    crate::testkit::write_u64(&d.mem, wpa, 1).unwrap();
    // ... while context 2 still runs on the engine.
    d.submit(&mut other, engine::COPY, &[fence(9)]).unwrap();
    match d.event(T).unwrap() {
        Event::Fence { ctx_id, seqno, .. } => assert_eq!((ctx_id, seqno), (2, 9)),
        e => panic!("expected context 2's fence, got {e:?}"),
    }
    assert_eq!(read_u64(&d.mem, wpa + 0x100).unwrap(), 0);
}
