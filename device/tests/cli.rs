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

/// `vgpu-inject` printing a reply into a pipe whose reader has gone (as
/// after `| head -1`): the reply is dropped and the tool exits as it
/// would have, without a panic. (It keeps SIGPIPE ignored so that a
/// device gone away is an error message, not a kill.)
#[test]
fn inject_cli_into_a_closed_pipe_is_quiet() {
    use std::io::{BufRead, BufReader, Write};
    let dir = tempfile::tempdir().unwrap();
    let control = dir.path().join("inject.sock");
    let listener = std::os::unix::net::UnixListener::bind(&control).unwrap();
    let server = std::thread::spawn(move || {
        let (s, _) = listener.accept().unwrap();
        let mut line = String::new();
        BufReader::new(&s).read_line(&mut line).unwrap();
        (&s).write_all(b"{\"ok\":true,\"armed\":[]}\n").unwrap();
        line
    });
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = Process::new(env!("CARGO_BIN_EXE_vgpu-inject"))
        .arg("--control")
        .arg(&control)
        .arg("status")
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(server.join().unwrap(), "status\n");
    assert!(out.status.success(), "{:?}: {err}", out.status);
    assert!(!err.contains("panicked"), "{err}");
}

/// A device process, killed if a test fails before it exits.
struct DeviceProcess(std::process::Child);

impl std::ops::Deref for DeviceProcess {
    type Target = std::process::Child;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for DeviceProcess {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl Drop for DeviceProcess {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

fn spawn_device(args: &[&std::ffi::OsStr]) -> DeviceProcess {
    DeviceProcess(
        Process::new(env!("CARGO_BIN_EXE_vgpu-device"))
            .args(["--gen", "2", "--log-level", "warn"])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn wait_exit(child: &mut std::process::Child, within: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + within;
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        assert!(Instant::now() < deadline, "the device did not exit");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn sigterm(child: &std::process::Child) {
    let pid = i32::try_from(child.id()).unwrap();
    // SAFETY: kill(2) on our own child; no memory is involved.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
}

/// One control connection: requests in, reply lines out.
struct Control {
    out: std::os::unix::net::UnixStream,
    replies: std::io::BufReader<std::os::unix::net::UnixStream>,
}

impl Control {
    fn connect(path: &std::path::Path) -> Self {
        let out = std::os::unix::net::UnixStream::connect(path).unwrap();
        out.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let replies = std::io::BufReader::new(out.try_clone().unwrap());
        Control { out, replies }
    }

    fn send(&mut self, requests: &str) {
        std::io::Write::write_all(&mut self.out, requests.as_bytes()).unwrap();
    }

    fn reply(&mut self) -> String {
        let mut line = String::new();
        std::io::BufRead::read_line(&mut self.replies, &mut line).unwrap_or(0);
        line
    }
}

#[test]
fn control_socket_frontend_and_sigterm_share_one_event_loop() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("vgpu.sock");
    let control = dir.path().join("inject.sock");
    let mut child = spawn_device(&[
        "--socket".as_ref(),
        sock.as_os_str(),
        "--control".as_ref(),
        control.as_os_str(),
    ]);
    wait_for("both sockets", || sock.exists() && control.exists());

    // Requests sent in one write are answered in order.
    let mut a = Control::connect(&control);
    a.send("seed 3\narm control-busy:packet=PING\n");
    assert_eq!(a.reply(), "{\"ok\":true}\n");
    assert_eq!(a.reply(), "{\"ok\":true,\"id\":1}\n");
    // A second client is served while the first stays connected.
    let mut b = Control::connect(&control);
    b.send("status\n");
    let st = b.reply();
    assert!(
        st.contains("\"seed\":3") && st.contains("control-busy"),
        "{st}"
    );

    // The frontend is served by the same process meanwhile, and the fault
    // armed over the control socket reaches it.
    let mem = guest_memory_of(16 << 20);
    let t = VhostTransport::connect(&sock, &mem);
    let mut d = Driver::new(
        t,
        mem,
        PhysAlloc::new(GPU_ALLOC_BASE, (16 << 20) - (GPU_ALLOC_BASE - GUEST_BASE)),
    )
    .unwrap();
    assert_eq!(d.generation(), 2);
    assert_eq!(
        d.status(vgpu_hwif::proto::Command::Ping { cookie: 1 }),
        vgpu_hwif::proto::Status::Busy
    );
    assert_eq!(
        d.status(vgpu_hwif::proto::Command::Ping { cookie: 2 }),
        vgpu_hwif::proto::Status::Ok
    );
    b.send("log\n");
    let log = b.reply();
    assert!(log.contains("\"what\":\"control-busy\""), "{log}");

    // SIGTERM with a frontend and two control clients connected: the
    // device closes them all, removes both sockets and exits 0.
    sigterm(&child);
    let status = wait_exit(&mut child, Duration::from_secs(10));
    assert!(status.success(), "{status}");
    assert!(!sock.exists(), "socket left behind");
    assert!(!control.exists(), "control socket left behind");
    assert_eq!(a.reply(), "", "control connection left open");
    assert_eq!(b.reply(), "", "control connection left open");
    drop(d);
}

#[test]
fn a_second_signal_leaves_at_once_while_the_teardown_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("vgpu.sock");
    let control = dir.path().join("inject.sock");
    // The trace goes to a FIFO nobody reads: writing it at exit blocks.
    let trace = dir.path().join("trace.fifo");
    assert!(Process::new("mkfifo")
        .arg(&trace)
        .status()
        .unwrap()
        .success());
    let mut child = spawn_device(&[
        "--socket".as_ref(),
        sock.as_os_str(),
        "--control".as_ref(),
        control.as_os_str(),
        "--trace".as_ref(),
        trace.as_os_str(),
    ]);
    wait_for("both sockets", || sock.exists() && control.exists());
    sigterm(&child);
    // The loop ends and removes the sockets, then the process blocks on
    // the trace.
    wait_for("the sockets removed", || {
        !sock.exists() && !control.exists()
    });
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        child.try_wait().unwrap().is_none(),
        "the device did not block on its trace"
    );
    let t0 = Instant::now();
    sigterm(&child);
    let status = wait_exit(&mut child, Duration::from_secs(5));
    assert!(status.success(), "{status}");
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
}

/// `--vf`: one socket per VF, `vgpu-pf` over the control socket, a VM on
/// VF 2, quotas beyond the device refused by name, SIGTERM removes every
/// socket.
#[test]
fn partitioned_device_serves_vf_sockets_and_vgpu_pf_sees_them() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("gpu.sock");
    let ctl = dir.path().join("pf.sock");
    let bad = Process::new(env!("CARGO_BIN_EXE_vgpu-device"))
        .args(["--vram", "64M", "--visible-vram", "16M"])
        .args(["--vf", "vram=48M", "--vf", "vram=32M"])
        .arg("--socket")
        .arg(&sock)
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("virtual function 2: 32 MiB of VRAM: 14 MiB are left"),
        "{err}"
    );

    let mut child = spawn_device(&[
        "--vram".as_ref(),
        "64M".as_ref(),
        "--visible-vram".as_ref(),
        "16M".as_ref(),
        "--vf".as_ref(),
        "contexts=8,weight=3".as_ref(),
        "--vf".as_ref(),
        "".as_ref(),
        "--socket".as_ref(),
        sock.as_os_str(),
        "--control".as_ref(),
        ctl.as_os_str(),
    ]);
    let vf = |n: u32| dir.path().join(format!("gpu.sock.vf{n}"));
    wait_for("VF sockets", || {
        vf(1).exists() && vf(2).exists() && ctl.exists()
    });
    let mem = guest_memory_of(8 << 20);
    let d = Driver::new(
        VhostTransport::connect(&vf(2), &mem),
        mem,
        PhysAlloc::new(GPU_ALLOC_BASE, 4 << 20),
    )
    .unwrap();
    assert_eq!(d.identity.function, 2);
    let pf = |args: &[&str]| {
        Process::new(env!("CARGO_BIN_EXE_vgpu-pf"))
            .arg("--control")
            .arg(&ctl)
            .args(args)
            .output()
            .unwrap()
    };
    let out = pf(&["list"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let row = |n: &str| {
        text.lines()
            .find(|l| l.split_whitespace().next() == Some(n))
            .unwrap_or_else(|| panic!("no row for VF {n}:\n{text}"))
            .split_whitespace()
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    // vf ctx vram vis weight vm ...
    assert_eq!(row("1")[1..6], ["8", "30", "4", "3", "no"], "{text}");
    assert_eq!(row("2")[1..6], ["32", "30", "4", "1", "yes"], "{text}");
    assert_eq!(pf(&["weight", "2", "0"]).status.code(), Some(1));
    assert_eq!(pf(&["reset", "9"]).status.code(), Some(1));
    let out = pf(&["--json", "vf", "2", "status"]);
    assert!(out.status.success(), "{out:?}");
    drop(d);
    sigterm(&child);
    assert!(wait_exit(&mut child, Duration::from_secs(10)).success());
    assert!(!vf(1).exists() && !vf(2).exists() && !ctl.exists());
}
