//! A session of the testkit driver recorded (`Device::start_recording`)
//! and replayed from the record alone, without the driver: the same
//! replies, the same event records (fences, a page fault, an engine
//! error) and the same results in memory.

use std::time::Duration;

use vgpu_device::config::{DeviceConfig, Generation};
use vgpu_device::core::record::{self, kind};
use vgpu_device::core::Device;
use vgpu_device::testkit::{Driver, InProcess, PhysAlloc};
use vgpu_hwif::event::{Event, EventKind};
use vgpu_hwif::mmu::{PTE_READ, PTE_WRITE};
use vgpu_hwif::packet::Packet;
use vgpu_hwif::proto::{engine, Opcode};
use vgpu_replay::record::{RecordOptions, RecordReplay};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

const T: Duration = Duration::from_secs(10);
const DATA: u64 = 0x20_0000;

/// What the recorded session left: where its results are and their bytes.
struct Session {
    results: Vec<(u64, Vec<u8>)>,
    events: usize,
}

fn fenced(
    d: &mut Driver<InProcess>,
    c: &mut vgpu_device::testkit::GpuContext,
    p: Packet,
    seqno: u64,
) {
    d.submit(
        c,
        engine::COPY,
        &[
            p,
            Packet::Fence {
                va: DATA + 0x8000,
                seqno,
                flags: 0,
            },
        ],
    )
    .unwrap();
    loop {
        match d.event(T).unwrap() {
            Event::Fence { seqno: s, .. } if s == seqno => break,
            Event::Fence { .. } => {}
            other => panic!("unexpected {other:?}"),
        }
    }
}

/// The driver's session: copies of guest-written data (the source
/// rewritten between two copies), a fill, a page fault and a malformed
/// packet, each waited for.
fn record_session(path: &std::path::Path) -> Session {
    let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 32 << 20)]).unwrap();
    let dev = Device::new(DeviceConfig::new(Generation::Gen2, 2).unwrap());
    dev.start_recording(path).unwrap();
    let t = InProcess::with_device(dev, &mem);
    let mut d = Driver::new(t, mem.clone(), PhysAlloc::new(0x10_0000, 30 << 20)).unwrap();
    let mut c = d.context(5, 1, 0).unwrap();
    d.ring(&mut c, engine::COPY).unwrap();
    let data_pa = d
        .buffer(&mut c, DATA, 0x1_0000, PTE_READ | PTE_WRITE)
        .unwrap();
    let mut events = 0;

    let v1: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 1) as u8).collect();
    d.mem.write_slice(&v1, GuestAddress(data_pa)).unwrap();
    let copy = |off| Packet::Copy {
        src: DATA,
        dst: DATA + off,
        size: 0x1000,
    };
    fenced(&mut d, &mut c, copy(0x1000), 1);
    events += 1;
    // The guest writes the source again: the second copy reads the new
    // contents.
    let v2: Vec<u8> = (0..4096u32).map(|i| (i * 13 + 5) as u8).collect();
    d.mem.write_slice(&v2, GuestAddress(data_pa)).unwrap();
    fenced(&mut d, &mut c, copy(0x2000), 2);
    events += 1;
    fenced(
        &mut d,
        &mut c,
        Packet::Fill {
            dst: DATA + 0x3000,
            size: 0x800,
            pattern: 0xdead_beef,
        },
        3,
    );
    events += 1;

    // A copy from an unmapped VA: a fault.
    d.submit(
        &mut c,
        engine::COPY,
        &[Packet::Copy {
            src: 0x4000_0000,
            dst: DATA + 0x4000,
            size: 0x1000,
        }],
    )
    .unwrap();
    let ev = d.event(T).unwrap();
    assert!(
        matches!(
            ev,
            Event::Fault {
                va: 0x4000_0000,
                ..
            }
        ),
        "{ev:?}"
    );
    events += 1;
    d.settle(&c, engine::COPY, T).unwrap();
    let stats = d.query(5).unwrap();
    assert!(stats.ctx_id == 5);

    let results = [0x1000u64, 0x2000, 0x3000]
        .iter()
        .map(|off| {
            let mut b = vec![0u8; 0x1000];
            d.mem
                .read_slice(&mut b, GuestAddress(data_pa + off))
                .unwrap();
            (data_pa + off, b)
        })
        .collect::<Vec<_>>();
    assert_eq!(results[0].1, v1);
    assert_eq!(results[1].1, v2);
    drop(d);
    Session { results, events }
}

#[test]
fn a_recorded_driver_session_replays_to_the_same_replies_events_and_results() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("session.vgrec");
    let s = record_session(&path);

    let bytes = std::fs::read(&path).unwrap();
    let entries = record::parse(&bytes).unwrap();
    let count = |k| entries.iter().filter(|e| e.kind == k).count();
    assert_eq!(count(kind::CONFIG), 1);
    assert_eq!(count(kind::MEMORY_MAP), 1);
    // The firmware boot: IDENTIFY, FW_LOAD (whose image read is logged),
    // FW_START, FW_STATUS polls as many as the boot took, IDENTIFY again;
    // then the session's 7 commands.
    let opcode = |e: &record::Entry| u32::from_le_bytes(e.payload[20..24].try_into().unwrap());
    let boot = [
        Opcode::Identify,
        Opcode::FwLoad,
        Opcode::FwStart,
        Opcode::FwStatus,
    ];
    let session = entries
        .iter()
        .filter(|e| e.kind == kind::COMMAND)
        .filter(|e| !boot.iter().any(|&o| o as u32 == opcode(e)))
        .count();
    assert_eq!(session, 7);
    assert_eq!(count(kind::DMA_READ), 1);
    assert_eq!(count(kind::COMMAND), count(kind::REPLY));
    assert_eq!(count(kind::EVENT), s.events);
    // The ring, the page tables, the status page and both versions of the
    // copy source were read.
    assert!(count(kind::PAGE) >= 5, "{} pages", count(kind::PAGE));

    let mut r = RecordReplay::open(&path, RecordOptions::default()).unwrap();
    let rep = r.run();
    assert!(rep.matched(), "{:#?}", rep.divergences);
    assert_eq!(rep.events_replayed.len(), s.events);
    // Every reply but CONTEXT_QUERY's (it carries busy times) compared.
    assert_eq!(rep.commands as usize, count(kind::COMMAND));
    assert_eq!(rep.replies_uncompared, 1);
    assert_eq!(rep.replies_equal + 1, rep.commands);
    assert!(rep
        .events_replayed
        .iter()
        .any(|e| e.kind == EventKind::Fault as u32));
    let mem = r.dev.gpu().memory();
    for (pa, want) in &s.results {
        let mut got = vec![0u8; want.len()];
        mem.read_slice(&mut got, GuestAddress(*pa)).unwrap();
        assert!(got == *want, "result at {pa:#x} differs");
    }
}

#[test]
fn a_record_whose_memory_differs_is_reported_as_diverging() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("session.vgrec");
    record_session(&path);
    // Remove the pages the engines read: the replay's engines find zeros
    // (no packets, no page tables) and cannot reach the recorded events.
    let bytes = std::fs::read(&path).unwrap();
    let mut out = bytes[..16].to_vec();
    let mut at = 16;
    while at < bytes.len() {
        let len = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap()) as usize;
        let k = u16::from_le_bytes([bytes[at], bytes[at + 1]]);
        if k != kind::PAGE {
            out.extend_from_slice(&bytes[at..at + record::ENTRY_HEADER + len]);
        }
        at += record::ENTRY_HEADER + len;
    }
    let opts = RecordOptions {
        catch_up: Duration::from_millis(300),
        ..RecordOptions::default()
    };
    let mut r = RecordReplay::from_bytes(&out, opts).unwrap();
    let rep = r.run();
    assert!(!rep.matched());
    assert!(
        rep.divergences.iter().any(|d| d.contains("event")),
        "{:#?}",
        rep.divergences
    );
}

/// A user-mode queue's session: the doorbells the watcher took from the
/// block are in the record and rung again by the replay, which reaches the
/// same events and results without reading any block.
#[test]
fn a_session_with_a_watched_doorbell_replays_its_doorbells() {
    use vgpu_hwif::proto::Command;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("uq.vgrec");
    let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 32 << 20)]).unwrap();
    let dev = Device::new(DeviceConfig::new(Generation::Gen2, 1).unwrap());
    dev.start_recording(&path).unwrap();
    let t = InProcess::with_device(dev, &mem);
    let mut d = Driver::new(t, mem.clone(), PhysAlloc::new(0x10_0000, 30 << 20)).unwrap();
    let mut c = d.context(3, 1, 0).unwrap();
    d.ring(&mut c, engine::COPY).unwrap();
    let data_pa = d
        .buffer(&mut c, DATA, 0x1_0000, PTE_READ | PTE_WRITE)
        .unwrap();
    let db = 0x40_0000;
    let db_pa = d.buffer(&mut c, db, 4096, PTE_READ | PTE_WRITE).unwrap();
    d.command(Command::DoorbellWatch {
        ctx_id: 3,
        engine: engine::COPY,
        doorbell_va: db,
        start: 0,
        flags: 0,
    })
    .unwrap();
    let v: Vec<u8> = (0..4096u32).map(|i| (i * 3 + 7) as u8).collect();
    d.mem.write_slice(&v, GuestAddress(data_pa)).unwrap();
    for seqno in 1..=3u64 {
        let r = c.ring(engine::COPY).unwrap();
        for p in [
            Packet::Copy {
                src: DATA,
                dst: DATA + 0x1000 * seqno,
                size: 0x1000,
            },
            Packet::Fence {
                va: DATA + 0x8000,
                seqno,
                flags: 0,
            },
        ] {
            r.writer.packet(&d.mem, &p).unwrap();
        }
        let w = r.writer.wptr();
        d.mem.write_obj(w, GuestAddress(db_pa)).unwrap();
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        if d.mem.read_obj::<u32>(GuestAddress(db_pa + 4)).unwrap() == 1 {
            d.command(Command::DoorbellKick).unwrap();
        }
        match d.event(T).unwrap() {
            Event::Fence { seqno: s, .. } => assert_eq!(s, seqno),
            other => panic!("{other:?}"),
        }
    }
    drop(d);
    let entries = record::parse(&std::fs::read(&path).unwrap()).unwrap();
    let bells = entries
        .iter()
        .filter(|e| e.kind == kind::WATCHED_DOORBELL)
        .count();
    assert_eq!(bells, 3, "each doorbell the watcher took is recorded");

    let mut r = RecordReplay::open(&path, RecordOptions::default()).unwrap();
    let rep = r.run();
    assert!(rep.matched(), "{:#?}", rep.divergences);
    assert_eq!(rep.watched_doorbells, 3);
    assert_eq!(rep.events_replayed.len(), 3);
    let mem = r.dev.gpu().memory();
    for seqno in 1..=3u64 {
        let mut got = vec![0u8; 4096];
        mem.read_slice(&mut got, GuestAddress(data_pa + 0x1000 * seqno))
            .unwrap();
        assert!(got == v, "copy {seqno}");
    }
}
