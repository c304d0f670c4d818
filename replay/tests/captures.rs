//! Captures the device model takes of real failures — a page fault, a
//! malformed packet inside a command buffer, an injected hang, a kernel's
//! trap, an injected MMU fault at a random VA — decoded as `vgpu-dump`
//! decodes them and replayed host-side to the same error record.

use std::time::Duration;

use vgpu_device::config::{DeviceConfig, Generation};
use vgpu_device::core::inject::Spec;
use vgpu_device::testkit::{Driver, GpuContext, InProcess, PacketWriter, PhysAlloc};
use vgpu_hwif::capture::{reason, Capture};
use vgpu_hwif::coredump::{base64_encode, base64_len, BASE64_LINE_BYTES};
use vgpu_hwif::event::{EngineErrorRecord, Event};
use vgpu_hwif::mmu::{PTE_EXEC, PTE_READ, PTE_WRITE};
use vgpu_hwif::packet::{encode_header, DispatchPacket, EngineError, Packet};
use vgpu_hwif::proto::engine;
use vgpu_replay::dump::{matches, Expected, Outcome, Replay, ReplayOptions};
use vgpu_umd::coredump::{decode, render_json, render_text, CoreDump, Options};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

const T: Duration = Duration::from_secs(10);
const RW: u64 = PTE_READ | PTE_WRITE;
const RX: u64 = PTE_READ | PTE_EXEC;
const DATA: u64 = 0x20_0000;
const CMDBUF: u64 = 0x60_0000;

fn driver(g: Generation) -> Driver<InProcess> {
    let mem = GuestMemoryMmap::from_ranges(&[
        (GuestAddress(0), 48 << 20),
        (GuestAddress(1 << 32), 16 << 20),
    ])
    .unwrap();
    let dev = InProcess::new(DeviceConfig::new(g, 2).unwrap(), &mem);
    Driver::new(dev, mem, PhysAlloc::new(0x10_0000, 47 << 20)).unwrap()
}

fn context(d: &mut Driver<InProcess>, id: u32) -> GpuContext {
    let mut c = d.context(id, 1, 0).unwrap();
    d.ring(&mut c, engine::COPY).unwrap();
    d.ring(&mut c, engine::COMPUTE).unwrap();
    d.buffer(&mut c, DATA, 0x4_0000, RW).unwrap();
    c
}

/// A command buffer at [`CMDBUF`] holding `packets`; returns the
/// `INDIRECT` calling it and each packet's VA.
fn cmdbuf(d: &mut Driver<InProcess>, c: &mut GpuContext, packets: &[Packet]) -> (Packet, Vec<u64>) {
    let pa = d.buffer(c, CMDBUF, 0x4000, RX).unwrap();
    let mut w = PacketWriter::buffer(pa, CMDBUF, 0x4000, d.generation());
    let vas = packets
        .iter()
        .map(|p| w.packet(&d.mem, p).unwrap())
        .collect();
    (
        Packet::Indirect {
            va: CMDBUF,
            size: w.wptr(),
        },
        vas,
    )
}

/// A devcoredump around `cap` as the KMD writes one (format
/// `vgpu_hwif::coredump`).
fn devcoredump(cap: &[u8]) -> Vec<u8> {
    let mut s = String::from(
        "VGPU DEVCOREDUMP 1\n[dump]\ndump seq=1 reason=fault slot=1 ctx=7 engine=0\n[jobs]\njob slot=1 engine=0 seqno=3 words=24 fence=pending\n[device]\ndevice capture=1 status=ok\n[device-capture]\n",
    );
    for chunk in cap.chunks(BASE64_LINE_BYTES) {
        let mut out = vec![0u8; base64_len(chunk.len())];
        base64_encode(chunk, &mut out).unwrap();
        s.push_str(std::str::from_utf8(&out).unwrap());
        s.push('\n');
    }
    s.push_str("[end]\n");
    s.into_bytes()
}

/// Decodes and replays capture `bytes`; checks the failing packet is
/// named and the replay reproduces the original.
fn decode_and_replay(bytes: &[u8], failing_name: &str) -> (String, Outcome) {
    // Both forms decode the same.
    let dump = CoreDump::parse(&devcoredump(bytes)).unwrap();
    assert!(dump.complete);
    assert_eq!(dump.capture.as_deref(), Some(bytes));
    assert_eq!(dump.field("jobs", "job", "seqno"), Some("3"));
    let text = render_text(&dump, &Options::default());
    assert!(
        text.contains(&format!("failing packet: {failing_name}")),
        "{text}"
    );
    assert!(text.contains("<== FAILING"), "{text}");
    if std::env::var_os("VGPU_SHOW").is_some() {
        eprintln!("{text}");
    }
    let json = render_json(&dump);
    assert_eq!(json["capture"]["failing_packet"]["name"], failing_name);
    assert!(json["capture"]["ring_packets"]
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p["failing"] == true && p["name"] == failing_name));
    let cap = Capture::parse(bytes).unwrap();
    let mut r = Replay::rebuild(
        &cap,
        ReplayOptions {
            trace: true,
            hang: Duration::from_millis(300),
        },
    )
    .unwrap();
    let o = r.run();
    assert!(
        matches(&r.expected, &o),
        "expected {:?}, replay {}\n{text}",
        r.expected,
        o.text()
    );
    let mut trace = Vec::new();
    r.write_trace(&mut trace).unwrap();
    let t: serde_json::Value = serde_json::from_slice(&trace).unwrap();
    assert!(t["traceEvents"].as_array().unwrap().len() > 3);
    (text, o)
}

#[test]
fn a_page_fault_in_a_command_buffer_replays_to_the_same_record() {
    let mut d = driver(Generation::Gen2);
    let mut c = context(&mut d, 3);
    let hole = 0x80_0000;
    let (ind, vas) = cmdbuf(
        &mut d,
        &mut c,
        &[
            Packet::Fill {
                dst: DATA,
                size: 0x1000,
                pattern: 0x1234_5678,
            },
            Packet::Copy {
                src: DATA,
                dst: hole,
                size: 0x2000,
            },
        ],
    );
    d.submit(&mut c, engine::COPY, &[ind]).unwrap();
    let ev = d.event(T).unwrap();
    assert!(matches!(ev, Event::Fault { va, packet_va, .. } if va == hole && packet_va == vas[1]));
    let held = d.transport.device.gpu().capture.newest(Some(3)).unwrap();
    assert_eq!(held.reason, reason::FAULT);
    let (text, o) = decode_and_replay(&held.bytes, "COPY");
    assert!(text.contains("fault walk (level by level):"), "{text}");
    assert!(text.contains("NOT_PRESENT at level"), "{text}");
    assert!(matches!(o, Outcome::Error(_)));
    // The decoder marks the ring's INDIRECT and follows it.
    let dec = decode(&Capture::parse(&held.bytes).unwrap());
    assert!(dec
        .listing
        .iter()
        .any(|l| l.at_rptr && l.name == "INDIRECT"));
    assert!(dec.listing.iter().any(|l| l.depth == 1 && l.name == "FILL"));
}

#[test]
fn a_malformed_packet_replays_to_the_same_engine_error() {
    let mut d = driver(Generation::Gen1);
    let mut c = context(&mut d, 5);
    let pa = d.buffer(&mut c, CMDBUF, 0x1000, RX).unwrap();
    let mut w = PacketWriter::buffer(pa, CMDBUF, 0x1000, 1);
    w.packet(
        &d.mem,
        &Packet::Fill {
            dst: DATA,
            size: 64,
            pattern: 1,
        },
    )
    .unwrap();
    let bad = encode_header(1, 0x5a, 3);
    let bad_va = w.words(&d.mem, &[bad, 0, 0]).unwrap();
    d.submit(
        &mut c,
        engine::COPY,
        &[
            Packet::Indirect {
                va: CMDBUF,
                size: w.wptr(),
            },
            Packet::Fence {
                va: DATA,
                seqno: 1,
                flags: 0,
            },
        ],
    )
    .unwrap();
    let ev = d.event(T).unwrap();
    assert!(
        matches!(ev, Event::EngineError(EngineErrorRecord { code, packet_va, .. })
        if code == EngineError::BadOpcode as u32 && packet_va == bad_va)
    );
    let held = d.transport.device.gpu().capture.newest(Some(5)).unwrap();
    let (text, _) = decode_and_replay(&held.bytes, "?");
    assert!(text.contains("BAD_OPCODE"), "{text}");
}

#[test]
fn an_injected_hang_replays_to_a_hang_on_the_same_packet() {
    let mut d = driver(Generation::Gen2);
    let gpu = d.transport.device.gpu().clone();
    gpu.inject.set_seed(7);
    // The second COPY of the job hangs.
    gpu.inject.arm(
        Spec::parse("hang:engine=copy,packet=COPY,after=2").unwrap(),
        0,
    );
    let mut c = context(&mut d, 2);
    let copy = |off| Packet::Copy {
        src: DATA,
        dst: DATA + off,
        size: 0x1000,
    };
    let (ind, vas) = cmdbuf(&mut d, &mut c, &[copy(0x1000), copy(0x2000), copy(0x3000)]);
    d.submit(&mut c, engine::COPY, &[ind]).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let rep = d.capture(2, engine::COPY, reason::HANG).unwrap();
    let (_, bytes) = d.read_capture(rep.capture_id, 2, 64 << 10).unwrap();
    let (text, o) = decode_and_replay(&bytes, "COPY");
    assert!(
        matches!(o, Outcome::Hang { packet_va: Some(v), .. } if v == vas[1]),
        "{text}"
    );
    assert!(text.contains("what=hang"), "{text}");
}

#[test]
fn a_kernel_trap_replays_to_the_same_pc() {
    let mut d = driver(Generation::Gen2);
    let mut c = context(&mut d, 9);
    let m = vgpu_isa::assemble(
        ".kernel t\n.arg out ptr\n    ldarg d0, [out]\n    mov r2, 9\n    st.32 [d0], r2\n    trap 5\n.end\n",
        2,
    )
    .unwrap();
    let image = m.to_bytes().unwrap();
    let code = 0x70_0000;
    let args = 0x78_0000;
    let cpa = d.buffer(&mut c, code, 0x1000, RX).unwrap();
    let apa = d.buffer(&mut c, args, 0x1000, PTE_READ).unwrap();
    d.mem.write_slice(&image, GuestAddress(cpa)).unwrap();
    d.mem
        .write_slice(&DATA.to_le_bytes(), GuestAddress(apa))
        .unwrap();
    let p = Packet::Dispatch(DispatchPacket {
        module_va: code,
        module_size: image.len() as u32,
        kernel: 0,
        args_va: args,
        args_size: 8,
        grid: [2, 1, 1],
        wg: [32, 1, 1],
        shared_size: 0,
    });
    d.submit(&mut c, engine::COMPUTE, &[p]).unwrap();
    let ev = d.event(T).unwrap();
    assert!(
        matches!(ev, Event::EngineError(EngineErrorRecord { code, header: 3, .. }) if code == EngineError::Trap as u32)
    );
    let held = d.transport.device.gpu().capture.newest(Some(9)).unwrap();
    let (text, _) = decode_and_replay(&held.bytes, "DISPATCH");
    assert!(text.contains("TRAP"), "{text}");
}

#[test]
fn an_injected_fault_at_a_random_va_replays_at_the_same_va() {
    let mut d = driver(Generation::Gen1);
    let gpu = d.transport.device.gpu().clone();
    gpu.inject.set_seed(1234);
    gpu.inject.arm(
        Spec::parse("mmu-fault:engine=copy,packet=FILL,after=3").unwrap(),
        0,
    );
    let mut c = context(&mut d, 4);
    let fill = |off| Packet::Fill {
        dst: DATA + off,
        size: 256,
        pattern: 3,
    };
    let (ind, vas) = cmdbuf(
        &mut d,
        &mut c,
        &[fill(0), fill(0x100), fill(0x200), fill(0x300)],
    );
    d.submit(&mut c, engine::COPY, &[ind]).unwrap();
    let ev = d.event(T).unwrap();
    let Event::Fault { packet_va, va, .. } = ev else {
        panic!("{ev:?}")
    };
    assert_eq!(packet_va, vas[2]);
    let held = d.transport.device.gpu().capture.newest(Some(4)).unwrap();
    let cap = Capture::parse(&held.bytes).unwrap();
    let mut r = Replay::rebuild(&cap, ReplayOptions::default()).unwrap();
    assert_eq!(r.rearmed.len(), 1, "{:?}", r.rearmed);
    assert!(
        r.rearmed[0].contains(&format!("va={va:#x}")),
        "{:?}",
        r.rearmed
    );
    let o = r.run();
    assert!(matches!(r.expected, Expected::Error(_)));
    assert!(matches(&r.expected, &o), "{}", o.text());
}
