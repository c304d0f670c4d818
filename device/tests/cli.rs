//! The `vgpu-device` binary: serves a frontend over its socket and writes
//! the packet trace (`--trace`) when the frontend goes away.

mod common;

use std::process::{Command as Process, Stdio};
use std::time::{Duration, Instant};

use common::{guest_memory_of, VhostTransport, GPU_ALLOC_BASE, GUEST_BASE};
use vgpu_device::testkit::{Driver, PhysAlloc};
use vgpu_hwif::event::Event;
use vgpu_hwif::mmu::{PTE_READ, PTE_WRITE};
use vgpu_hwif::packet::Packet;
use vgpu_hwif::proto::engine;

#[test]
fn trace_flag_writes_a_perfetto_timeline_on_exit() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("vgpu.sock");
    let trace = dir.path().join("trace.json");
    let control = dir.path().join("inject.sock");
    let mut child = Process::new(env!("CARGO_BIN_EXE_vgpu-device"))
        .args(["--gen", "2", "--log-level", "warn", "--socket"])
        .arg(&sock)
        .arg("--trace")
        .arg(&trace)
        .arg("--control")
        .arg(&control)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !sock.exists() {
        assert!(Instant::now() < deadline, "the device never listened");
        std::thread::sleep(Duration::from_millis(10));
    }
    let mem = guest_memory_of(16 << 20);
    let t = VhostTransport::connect(&sock, &mem);
    let mut d = Driver::new(
        t,
        mem,
        PhysAlloc::new(GPU_ALLOC_BASE, (16 << 20) - (GPU_ALLOC_BASE - GUEST_BASE)),
    )
    .unwrap();
    assert_eq!(d.generation(), 2);
    let mut c = d.context(1, 1, 0).unwrap();
    d.ring(&mut c, engine::COPY).unwrap();
    d.buffer(&mut c, 0x20_0000, 0x2000, PTE_READ | PTE_WRITE)
        .unwrap();
    d.submit(
        &mut c,
        engine::COPY,
        &[
            Packet::Fill {
                dst: 0x20_0000,
                size: 4096,
                pattern: 5,
            },
            Packet::Copy {
                src: 0x20_0000,
                dst: 0x20_1000,
                size: 4096,
            },
            Packet::Fence {
                va: 0x20_0000,
                seqno: 1,
                flags: 0,
            },
        ],
    )
    .unwrap();
    assert_eq!(
        d.event(Duration::from_secs(5)).unwrap(),
        Event::Fence {
            ctx_id: 1,
            engine: 0,
            seqno: 1,
            va: 0x20_0000
        }
    );
    d.settle(&c, engine::COPY, Duration::from_secs(5)).unwrap();
    d.transport.disconnect();
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "the device did not exit");
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(status.success(), "{status}");
    let json = std::fs::read_to_string(&trace).unwrap();
    for needle in [
        "\"traceEvents\"",
        "\"name\":\"copy engine\"",
        "\"name\":\"FILL\",\"cat\":\"fetch\"",
        "\"name\":\"COPY\",\"cat\":\"packet\",\"ph\":\"X\"",
        "\"name\":\"fence\",\"cat\":\"fence\"",
    ] {
        assert!(json.contains(needle), "{needle} missing from {json}");
    }
    assert!(!sock.exists(), "socket left behind");
    assert!(!control.exists(), "control socket left behind");
}

#[test]
fn sigterm_removes_both_sockets() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("vgpu.sock");
    let control = dir.path().join("inject.sock");
    let mut child = Process::new(env!("CARGO_BIN_EXE_vgpu-device"))
        .args(["--gen", "2", "--log-level", "warn", "--socket"])
        .arg(&sock)
        .arg("--control")
        .arg(&control)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !(sock.exists() && control.exists()) {
        assert!(Instant::now() < deadline, "the device never listened");
        std::thread::sleep(Duration::from_millis(10));
    }
    let pid = i32::try_from(child.id()).unwrap();
    // SAFETY: kill(2) on our own child.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "the device did not exit");
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(status.success(), "{status}");
    assert!(!sock.exists(), "socket left behind");
    assert!(!control.exists(), "control socket left behind");
}
