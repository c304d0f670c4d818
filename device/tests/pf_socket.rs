//! A partitioned device over the real vhost-user sockets: the daemon
//! serves two VFs on two sockets, this test is two VMMs and their guest
//! drivers. Each VF copies with correct results; one VM vanishes in the
//! middle of its work while the other keeps serving; a new VM attaches to
//! the vanished VF's socket and finds a fresh device; the host's control
//! socket lists both and resets one.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use vhost::vhost_user::VhostUserFrontend;
use vhost::VhostBackend;
use vm_memory::{Bytes, GuestAddress};

use common::*;
use vgpu_device::config::{DeviceConfig, Generation, VramConfig, VramOnReset};
use vgpu_device::daemon::{PfDaemon, PfSummary, StopHandle};
use vgpu_device::pf::{PhysicalFunction, VfSpec};
use vgpu_device::testkit::{Driver, GpuContext, PhysAlloc};
use vgpu_hwif::event::Event;
use vgpu_hwif::mmu::{PTE_READ, PTE_WRITE};
use vgpu_hwif::packet::Packet;
use vgpu_hwif::proto::{
    engine, FEATURE_VIRTUAL_FUNCTION, PRIORITY_NORMAL, QUEUE_CONTROL, QUEUE_EVENT,
};

const RW: u64 = PTE_READ | PTE_WRITE;
const T: Duration = Duration::from_secs(20);
const SRC: u64 = 0x100_0000;
const DST: u64 = 0x110_0000;
const FENCE: u64 = 0x1f_0000;

type Vm = Driver<VhostTransport>;

fn attach(socket: &Path) -> Vm {
    let mem = guest_memory_of(16 << 20);
    let t = VhostTransport::connect(socket, &mem);
    Driver::new(t, mem, PhysAlloc::new(GPU_ALLOC_BASE, 12 << 20)).unwrap()
}

fn context(d: &mut Vm) -> GpuContext {
    let mut c = d.context(1, PRIORITY_NORMAL, 0).unwrap();
    d.ring(&mut c, engine::COPY).unwrap();
    d.buffer(&mut c, FENCE, 4096, RW).unwrap();
    d.buffer(&mut c, SRC, 64 << 10, RW).unwrap();
    d.buffer(&mut c, DST, 64 << 10, RW).unwrap();
    c
}

/// Copies 64 KiB of `byte` and checks the result.
fn copy(d: &mut Vm, c: &mut GpuContext, byte: u8, seqno: u64) {
    let src = c.pt.translate(&d.mem, SRC).unwrap();
    d.mem
        .write_slice(&[byte; 64 << 10], GuestAddress(src))
        .unwrap();
    let p = [
        Packet::Copy {
            src: SRC,
            dst: DST,
            size: 64 << 10,
        },
        Packet::Fence {
            va: FENCE,
            seqno,
            flags: 0,
        },
    ];
    d.submit(c, engine::COPY, &p).unwrap();
    match d.event(T).unwrap() {
        Event::Fence { seqno: s, .. } => assert_eq!(s, seqno),
        other => panic!("fence {seqno}: {other:?}"),
    }
    let dst = c.pt.translate(&d.mem, DST).unwrap();
    let mut back = vec![0u8; 64 << 10];
    d.mem.read_slice(&mut back, GuestAddress(dst)).unwrap();
    assert!(back.iter().all(|&b| b == byte), "copy {seqno}");
}

fn control(path: &Path, line: &str) -> serde_json::Value {
    let mut s = UnixStream::connect(path).unwrap();
    writeln!(s, "{line}").unwrap();
    let mut reply = String::new();
    BufReader::new(&s).read_line(&mut reply).unwrap();
    serde_json::from_str(&reply).unwrap()
}

/// Waits until VF `vf` has served `n` frontends: its fresh device then
/// listens again (the loop renews it before it answers the next request).
fn wait_frontends(ctl: &Path, vf: u64, n: u64) {
    for _ in 0..500 {
        let v = control(ctl, "vf list");
        let served = v["vfs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["vf"] == vf)
            .map(|f| f["frontends"].as_u64().unwrap());
        if served == Some(n) {
            return;
        }
        thread::sleep(Duration::from_millis(10));
    }
    panic!("VF {vf} did not serve {n} frontends");
}

type Done = mpsc::Receiver<Result<PfSummary, String>>;

/// A partitioned device with two VFs (`contexts=8`, `weight=2`, 16 MiB of
/// VRAM each of 64) serving in
/// a thread: its VF sockets, control socket, stop handle and result.
fn start(dir: &Path) -> (Vec<PathBuf>, PathBuf, StopHandle, Done) {
    let _ = env_logger::builder().is_test(true).try_init();
    let sockets = vec![dir.join("gpu.vf1"), dir.join("gpu.vf2")];
    let ctl = dir.join("pf.sock");
    let device = DeviceConfig::new(Generation::Gen2, 2)
        .unwrap()
        .with_vram(VramConfig::new(66 << 20, 16 << 20, VramOnReset::Zero).unwrap());
    let specs: Vec<VfSpec> = ["contexts=8,vram=16M", "weight=2,vram=16M"]
        .iter()
        .map(|s| s.parse().unwrap())
        .collect();
    let pf = PhysicalFunction::new(device, &specs).unwrap();
    let mut daemon = PfDaemon::new(pf, sockets.clone(), dir.join("gpu")).unwrap();
    daemon.serve_control(&ctl).unwrap();
    let stop = daemon.stop_handle();
    let (tx, done) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(daemon.run().map_err(|e| e.to_string()));
    });
    for _ in 0..100 {
        if sockets.iter().all(|s| s.exists()) {
            break;
        }
        thread::sleep(Duration::from_millis(10));
    }
    (sockets, ctl, stop, done)
}

/// VM 1 breaks its control ring twice over (an available index 100
/// entries ahead, then after a reset a descriptor chain that loops) while
/// VM 2 copies; VM 2 is served throughout and VM 1's ring stays stopped.
#[test]
fn a_vf_with_broken_rings_leaves_the_other_serving() {
    let dir = tempfile::tempdir().unwrap();
    let (sockets, _ctl, stop, done) = start(dir.path());
    let mem = guest_memory();
    let mut s1 = handshake(&sockets[0], &mem);
    let mut ctrl = DriverRing::new(&mem, CTRL_RING);
    let event = DriverRing::new(&mem, EVENT_RING);
    ctrl.init();
    event.init();
    setup_vring(&mut s1.frontend, QUEUE_CONTROL, &ctrl);
    setup_vring(&mut s1.frontend, QUEUE_EVENT, &event);
    let mut vm2 = attach(&sockets[1]);
    let mut c2 = context(&mut vm2);
    ctrl.write_avail_idx(ctrl.avail_idx().wrapping_add(100));
    ctrl.notify();
    copy(&mut vm2, &mut c2, 0x51, 1);
    s1.frontend.set_vring_enable(0, false).unwrap();
    s1.frontend.set_vring_enable(0, true).unwrap();
    s1.frontend.set_vring_base(0, ctrl.avail_idx()).unwrap();
    let d = ctrl.next_desc();
    let d1 = (d + 1) % QSIZE;
    ctrl.write_desc(d, CMD, 16, VRING_DESC_F_NEXT, d1);
    ctrl.write_desc(d1, REPLY, 64, VRING_DESC_F_NEXT | VRING_DESC_F_WRITE, d);
    ctrl.push_avail(d);
    ctrl.notify();
    for seqno in 2..=4 {
        copy(&mut vm2, &mut c2, seqno as u8, seqno);
    }
    thread::sleep(Duration::from_millis(50));
    ctrl.assert_idle();
    drop(vm2);
    drop(s1);
    stop.stop();
    done.recv_timeout(T).expect("daemon did not stop").unwrap();
}

/// The host creates VF 3 while the device runs, a VM uses it, and the host
/// destroys it while a VM is attached: that VM's connection closes, the
/// socket goes, VM 2 is served throughout.
#[test]
fn vfs_created_and_destroyed_while_the_device_runs() {
    let dir = tempfile::tempdir().unwrap();
    let (sockets, ctl, stop, done) = start(dir.path());
    let mut vm2 = attach(&sockets[1]);
    let mut c2 = context(&mut vm2);
    let r = control(&ctl, "vf create contexts=4 vram=8M weight=5");
    assert_eq!(r["vf"], 3, "{r}");
    let vf3 = PathBuf::from(r["socket"].as_str().unwrap());
    assert_eq!(vf3, dir.path().join("gpu.vf3"));
    for _ in 0..100 {
        if vf3.exists() {
            break;
        }
        thread::sleep(Duration::from_millis(10));
    }
    let mut vm3 = attach(&vf3);
    assert_eq!((vm3.identity.function, vm3.identity.max_contexts), (3, 4));
    assert_eq!(vm3.identity.vram_size, 8 << 20);
    let mut c3 = context(&mut vm3);
    copy(&mut vm3, &mut c3, 0x61, 1);
    copy(&mut vm2, &mut c2, 0x62, 1);
    drop(vm3);
    // A VM attached when its VF is destroyed is disconnected.
    let mem = guest_memory();
    wait_frontends(&ctl, 3, 1);
    let mut s3 = handshake(&vf3, &mem);
    let r = control(&ctl, "vf destroy 3");
    assert_eq!(r["ok"], true, "{r}");
    s3.raw.set_read_timeout(Some(T)).unwrap();
    let mut byte = [0u8; 1];
    assert_eq!(
        std::io::Read::read(&mut s3.raw, &mut byte).unwrap_or(0),
        0,
        "VM 3 disconnected"
    );
    for _ in 0..100 {
        if !vf3.exists() {
            break;
        }
        thread::sleep(Duration::from_millis(10));
    }
    assert!(!vf3.exists(), "VF 3's socket removed");
    copy(&mut vm2, &mut c2, 0x63, 2);
    let v = control(&ctl, "vf list");
    assert_eq!(v["vfs"].as_array().unwrap().len(), 2, "{v}");
    drop(vm2);
    stop.stop();
    done.recv_timeout(T).expect("daemon did not stop").unwrap();
}

#[test]
fn two_vms_share_one_device_and_one_vanishing_leaves_the_other_serving() {
    let dir = tempfile::tempdir().unwrap();
    let (sockets, ctl, stop, done) = start(dir.path());

    let mut vm1 = attach(&sockets[0]);
    let mut vm2 = attach(&sockets[1]);
    assert_eq!(vm1.identity.function, 1);
    assert_eq!(vm2.identity.function, 2);
    assert_ne!(vm2.identity.features & FEATURE_VIRTUAL_FUNCTION, 0);
    assert_eq!(
        (vm1.identity.max_contexts, vm2.identity.max_contexts),
        (8, 32)
    );
    let mut c1 = context(&mut vm1);
    let mut c2 = context(&mut vm2);
    copy(&mut vm1, &mut c1, 0x11, 1);
    copy(&mut vm2, &mut c2, 0x22, 1);

    // A second frontend on VF 2's socket is closed at once; VM 2 goes on.
    let mut second = UnixStream::connect(&sockets[1]).unwrap();
    second.set_read_timeout(Some(T)).unwrap();
    let mut byte = [0u8; 1];
    assert_eq!(
        std::io::Read::read(&mut second, &mut byte).unwrap(),
        0,
        "closed"
    );
    copy(&mut vm2, &mut c2, 0x23, 2);

    let v = control(&ctl, "vf list");
    assert_eq!(v["vfs"][0]["connected"], true, "{v}");
    assert_eq!(v["vfs"][1]["weight"], 2);
    assert!(v["vfs"][0]["engines"]["copy"]["busy_ns"].as_u64().unwrap() > 0);

    // VM 1 vanishes with a copy queued; VM 2 goes on.
    let p = [Packet::Copy {
        src: SRC,
        dst: DST,
        size: 64 << 10,
    }];
    vm1.submit(&mut c1, engine::COPY, &p).unwrap();
    drop(vm1);
    for seqno in 3..=6 {
        copy(&mut vm2, &mut c2, seqno as u8, seqno);
    }
    // A new VM on VF 1's socket finds a fresh device: context 1 is free.
    wait_frontends(&ctl, 1, 1);
    let mut vm1 = attach(&sockets[0]);
    let mut c1 = context(&mut vm1);
    copy(&mut vm1, &mut c1, 0x33, 1);

    // The host resets VF 2: VM 2 hears it, VM 1 does not.
    let r = control(&ctl, "vf reset 2");
    assert_eq!(r["ok"], true, "{r}");
    match vm2.event(T).unwrap() {
        Event::ResetDone { engine, .. } => assert_eq!(engine, u32::MAX),
        other => panic!("VM 2 saw {other:?}"),
    }
    copy(&mut vm1, &mut c1, 0x44, 2);
    let f = control(&ctl, "vf fairness");
    assert_eq!(f["ok"], true, "{f}");

    drop(vm1);
    drop(vm2);
    stop.stop();
    let summary = done.recv_timeout(T).expect("daemon did not stop").unwrap();
    assert_eq!(summary.frontends, 3);
    assert!(
        sockets.iter().all(|s| !s.exists()),
        "socket files left behind"
    );
}
