//! Captures taken by the model: on a fault, an engine error, a declared
//! hang, and read back through `CAPTURE_READ` as a driver does.

use std::time::Duration;

use vgpu_hwif::capture::{
    self, memory, reason, section, Capture, CaptureInFlight, CaptureMapping, CaptureRing, WalkEnd,
};
use vgpu_hwif::event::{EngineErrorRecord, Event, EventRecord, FaultInfo};
use vgpu_hwif::mmu::{Access, FaultReason, PTE_EXEC, PTE_READ, PTE_WRITE};
use vgpu_hwif::packet::{decode_header, encode_header, EngineError, Packet};
use vgpu_hwif::proto::{engine, ring_state, Command, Status, CTX_NONE};
use vm_memory::{GuestAddress, GuestMemoryMmap};

use crate::config::{DeviceConfig, Generation};
use crate::core::inject::Spec;
use crate::testkit::{Driver, InProcess, PacketWriter, PhysAlloc};

const T: Duration = Duration::from_secs(5);
const RW: u64 = PTE_READ | PTE_WRITE;
const DATA: u64 = 0x20_0000;
const HOLE: u64 = 0x40_0000;

fn driver(g: Generation) -> Driver<InProcess> {
    let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 64 << 20)]).unwrap();
    let dev = InProcess::new(DeviceConfig::new(g, 2).unwrap(), &mem);
    Driver::new(dev, mem, PhysAlloc::new(0x10_0000, 63 << 20)).unwrap()
}

fn parse(bytes: &[u8]) -> Capture<'_> {
    Capture::parse(bytes).expect("a capture")
}

fn ring_of(c: &Capture<'_>, e: u32) -> CaptureRing {
    c.of(section::RING)
        .filter_map(|s| s.one::<CaptureRing>())
        .find(|r| r.engine == e)
        .expect("ring section")
}

#[test]
fn a_fault_is_captured_before_its_event_and_reads_back_in_chunks() {
    let mut d = driver(Generation::Gen2);
    let mut c = d.context(1, 1, 0).unwrap();
    d.ring(&mut c, engine::COPY).unwrap();
    d.buffer(&mut c, DATA, 0x1_0000, RW).unwrap();
    let vas = d
        .submit(
            &mut c,
            engine::COPY,
            &[Packet::Copy {
                src: DATA,
                dst: HOLE,
                size: 0x2000,
            }],
        )
        .unwrap();
    let ev = d.event(T).unwrap();
    let Event::Fault {
        va,
        info,
        packet_va,
        ..
    } = ev
    else {
        panic!("{ev:?}")
    };
    assert_eq!((va, packet_va), (HOLE, vas[0]));

    // The device's copy, and the driver's chunked read, are the same file.
    let held = d.transport.device.gpu().capture.newest(Some(1)).unwrap();
    assert_eq!(held.reason, reason::FAULT);
    let (rep, bytes) = d.read_capture(0, 1, 4096).unwrap();
    assert_eq!(&bytes[..], &held.bytes[..]);
    assert!(bytes.len() > 4096, "several chunks: {}", bytes.len());
    assert_eq!((rep.capture_id, rep.ctx_id, rep.engine), (held.id, 1, 0));

    let cap = parse(&bytes);
    let h = cap.header;
    assert_eq!(
        (h.ctx_id, h.engine, h.reason, h.generation),
        (1, 0, reason::FAULT, 2)
    );
    assert!(h.capture_ns > 0);
    // The error record is the event the driver got.
    let rec: EventRecord = cap.first(section::ERROR).unwrap().one().unwrap();
    assert_eq!(Event::from_record(&rec).unwrap(), ev);
    // The copy was in flight, with its progress.
    let fl: CaptureInFlight = cap.first(section::INFLIGHT).unwrap().one().unwrap();
    assert_eq!(fl.state, capture::INFLIGHT_ACTIVE);
    assert_eq!(fl.packet_va, vas[0]);
    let hdr = decode_header(2, fl.packet[0]).unwrap();
    assert_eq!(
        Packet::decode(hdr, &fl.packet[..fl.words as usize]).unwrap(),
        Packet::Copy {
            src: DATA,
            dst: HOLE,
            size: 0x2000
        }
    );
    assert_eq!(fl.progress[..2], [0, 0x2000]);
    let r = ring_of(&cap, 0);
    assert_eq!(r.state, ring_state::STOPPED);
    assert_eq!(r.error, EngineError::PageFault as u32);
    assert!(r.flags & capture::RING_CAPTURED != 0);
    // The mapped ranges, the ring's memory and the walk of the faulting VA
    // level by level, ending where the device said.
    let maps: Vec<CaptureMapping> = cap.first(section::MAPPING).unwrap().records().collect();
    assert!(maps
        .iter()
        .any(|m| m.va == DATA && m.size == 0x1_0000 && m.perms == RW as u32));
    assert!(maps.iter().all(|m| m.va + m.size <= HOLE || m.va > HOLE));
    let kinds: Vec<u32> = cap
        .of(section::MEMORY)
        .filter_map(|s| s.memory())
        .map(|(m, _)| m.what)
        .collect();
    for k in [memory::RING, memory::STATUS, memory::TABLE, memory::OPERAND] {
        assert!(kinds.contains(&k), "memory kind {k} missing: {kinds:?}");
    }
    let ctx: capture::CaptureContext = cap.first(section::CONTEXT).unwrap().one().unwrap();
    let walk = cap.walk(ctx.pt_root, va, h.va_bits);
    assert_eq!(walk.end, WalkEnd::Fault(FaultReason::NotPresent));
    assert_eq!(walk.steps[walk.len - 1].level, u32::from(info.level));
    assert_eq!(
        info,
        FaultInfo {
            ctx_id: 1,
            engine: 0,
            access: Access::Write as u8,
            reason: FaultReason::NotPresent as u8,
            level: info.level,
            flags: 0
        }
    );
    // The recent events are there; the injector's text names its seed.
    let inj = cap.first(section::INJECT).unwrap();
    assert!(std::str::from_utf8(inj.data)
        .unwrap()
        .starts_with("seed 0\n"));
}

#[test]
fn a_malformed_packet_in_a_command_buffer_is_captured_with_the_buffer() {
    let mut d = driver(Generation::Gen1);
    let mut c = d.context(2, 1, 0).unwrap();
    d.ring(&mut c, engine::COPY).unwrap();
    let cb_va = 0x60_0000;
    let cb_pa = d
        .buffer(&mut c, cb_va, 0x1000, PTE_READ | PTE_EXEC)
        .unwrap();
    let mut cb = PacketWriter::buffer(cb_pa, cb_va, 0x1000, 1);
    cb.nop(&d.mem, 3).unwrap();
    let bad = encode_header(1, 0x7e, 2);
    let bad_va = cb.words(&d.mem, &[bad, 0]).unwrap();
    d.submit(
        &mut c,
        engine::COPY,
        &[Packet::Indirect {
            va: cb_va,
            size: cb.wptr(),
        }],
    )
    .unwrap();
    let ev = d.event(T).unwrap();
    assert!(matches!(
        ev,
        Event::EngineError(EngineErrorRecord { code, packet_va, header, .. })
            if code == EngineError::BadOpcode as u32 && packet_va == bad_va && header == bad
    ));
    let (_, bytes) = d.read_capture(0, 2, 64 << 10).unwrap();
    let cap = parse(&bytes);
    assert_eq!(cap.header.reason, reason::ENGINE_ERROR);
    let fl: CaptureInFlight = cap.first(section::INFLIGHT).unwrap().one().unwrap();
    assert_eq!(
        (fl.state, fl.packet_va, fl.header, fl.depth),
        (capture::INFLIGHT_NONE, bad_va, bad, 1)
    );
    // The command buffer was followed and captured, with the bad word.
    let cmdbuf = cap
        .of(section::MEMORY)
        .filter_map(|s| s.memory())
        .find(|(m, _)| m.what == memory::CMDBUF)
        .expect("command buffer captured");
    assert_eq!(cmdbuf.0.va, cb_va);
    assert_eq!(
        u32::from_le_bytes(cmdbuf.1[12..16].try_into().unwrap()),
        bad
    );
    assert_eq!(ring_of(&cap, 0).frame_va[0], cb_va);
}

#[test]
fn a_declared_hang_is_captured_through_the_engine_and_reset_after() {
    let mut d = driver(Generation::Gen2);
    let gpu = d.transport.device.gpu().clone();
    gpu.inject
        .arm(Spec::parse("hang:engine=copy,packet=FILL").unwrap(), 0);
    let mut c = d.context(3, 1, 0).unwrap();
    d.ring(&mut c, engine::COPY).unwrap();
    d.buffer(&mut c, DATA, 0x1_0000, RW).unwrap();
    let vas = d
        .submit(
            &mut c,
            engine::COPY,
            &[
                Packet::Fill {
                    dst: DATA,
                    size: 64,
                    pattern: 7,
                },
                Packet::Fence {
                    va: DATA + 0x8000,
                    seqno: 1,
                    flags: 0,
                },
            ],
        )
        .unwrap();
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(
        d.status(Command::Capture {
            ctx_id: 3,
            engine: 0,
            reason: 77
        }),
        Status::InvalidArgument
    );
    assert_eq!(
        d.status(Command::Capture {
            ctx_id: 9,
            engine: 0,
            reason: reason::HANG
        }),
        Status::NotFound
    );
    let rep = d.capture(3, engine::COPY, reason::HANG).unwrap();
    let (_, bytes) = d.read_capture(rep.capture_id, CTX_NONE, 1 << 20).unwrap();
    assert_eq!(bytes.len(), rep.size as usize);
    let cap = parse(&bytes);
    assert_eq!(cap.header.reason, reason::HANG);
    assert!(cap.first(section::ERROR).is_none());
    let fl: CaptureInFlight = cap.first(section::INFLIGHT).unwrap().one().unwrap();
    assert_eq!((fl.state, fl.packet_va), (capture::INFLIGHT_ACTIVE, vas[0]));
    let log = std::str::from_utf8(cap.first(section::INJECT).unwrap().data).unwrap();
    assert!(log.contains("what=hang"), "{log}");
    assert!(log.contains(&format!("packet_va={:#x}", vas[0])), "{log}");
    // Recovery goes on as before.
    d.command(Command::EngineReset {
        engine: 0,
        hung_ctx: 3,
    })
    .unwrap();
    assert!(matches!(
        d.event(T).unwrap(),
        Event::ResetDone { ctx_id: 3, .. }
    ));
}

#[test]
fn reads_are_checked_and_old_captures_go() {
    let mut d = driver(Generation::Gen1);
    let mut c = d.context(4, 1, 0).unwrap();
    d.ring(&mut c, engine::COPY).unwrap();
    let gpu = d.transport.device.gpu().clone();
    gpu.capture.set_limits(crate::core::capture::CaptureLimits {
        keep: 3,
        ..Default::default()
    });
    let read = |d: &mut Driver<InProcess>, id, pa| {
        d.status(Command::CaptureRead {
            capture_id: id,
            ctx_id: CTX_NONE,
            offset: 0,
            len: 64,
            buf_pa: pa,
        })
    };
    assert_eq!(read(&mut d, 0, 0x1000), Status::NotFound);
    let mut ids = Vec::new();
    for _ in 0..5 {
        ids.push(d.capture(4, 0, reason::DRIVER).unwrap().capture_id);
    }
    assert_eq!(ids, [1, 2, 3, 4, 5]);
    assert_eq!(read(&mut d, 2, 0x1000), Status::NotFound, "dropped");
    assert_eq!(read(&mut d, 5, 0x1000), Status::Ok);
    assert_eq!(
        read(&mut d, 5, (64 << 20) - 32),
        Status::InvalidArgument,
        "past RAM"
    );
    assert_eq!(
        d.status(Command::CaptureRead {
            capture_id: 5,
            ctx_id: 0,
            offset: 0,
            len: (1 << 20) + 4,
            buf_pa: 0x1000
        }),
        Status::InvalidArgument,
        "too long"
    );
    // Past the end: nothing written.
    let r = d
        .command(Command::CaptureRead {
            capture_id: 5,
            ctx_id: 0,
            offset: u32::MAX,
            len: 64,
            buf_pa: 0x1000,
        })
        .unwrap();
    let rep = <vgpu_hwif::proto::CaptureReadReply as vgpu_hwif::pod::Pod>::read_from(&r).unwrap();
    assert_eq!(rep.written, 0);
    assert_eq!(gpu.capture.list().len(), 3);
}
