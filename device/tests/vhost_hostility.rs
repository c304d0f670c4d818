//! A frontend that breaks its rings on purpose, over the real vhost-user
//! socket: the device stops serving a broken ring (one report, however
//! often it is kicked), keeps serving the other queue, and serves again
//! once the frontend resets the ring — by disabling and re-enabling it, by
//! a new base, by stopping it and giving it a fresh ring elsewhere, or by
//! resetting the device.

mod common;

use std::mem::size_of;

use vhost::vhost_user::VhostUserFrontend;
use vhost::VhostBackend;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use common::*;
use vgpu_device::backend::VIRTIO_FEATURES;
use vgpu_hwif::event::{Event, EventRecord, EVENT_RECORD_SIZE};
use vgpu_hwif::proto::{
    Command, IdentifyReply, Opcode, PingReply, Status, QUEUE_CONTROL, QUEUE_EVENT,
};

/// Where a replacement control ring goes.
const ALT_RING: u64 = GUEST_BASE + 0x8_0000;

/// Posts an IDENTIFY tagged `tag` and kicks.
fn post_identify(ring: &mut DriverRing, mem: &GuestMemoryMmap, tag: u64) -> u16 {
    mem.write_slice(&encode(Command::Identify, tag), GuestAddress(CMD))
        .unwrap();
    let head = ring.add(&[(CMD, 16, false), (REPLY, 512, true)]);
    ring.notify();
    head
}

/// Waits for the IDENTIFY tagged `tag` posted as `head` to be answered.
fn assert_identified(ring: &mut DriverRing, mem: &GuestMemoryMmap, head: u16, tag: u64) {
    let used = ring.wait_collect(1, TIMEOUT);
    assert_eq!(
        used,
        vec![(u32::from(head), size_of::<IdentifyReply>() as u32)],
        "IDENTIFY {tag} not answered"
    );
    let id: IdentifyReply = read(mem, REPLY);
    assert_eq!(id.hdr.status, Status::Ok as u32);
    assert_eq!(id.hdr.tag, tag);
}

fn identify(ring: &mut DriverRing, mem: &GuestMemoryMmap, tag: u64) {
    let head = post_identify(ring, mem, tag);
    assert_identified(ring, mem, head, tag);
}

/// Kicks a few times and checks that nothing is answered.
fn assert_ignored(ring: &DriverRing) {
    for _ in 0..3 {
        ring.notify();
        ring.assert_idle();
    }
}

#[test]
fn a_broken_ring_is_stopped_once_and_a_reset_restores_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("vgpu.sock");
    let done = start_daemon(&path);
    let mem = guest_memory();
    let mut s = handshake(&path, &mem);
    let mut ctrl = DriverRing::new(&mem, CTRL_RING);
    let mut event = DriverRing::new(&mem, EVENT_RING);
    ctrl.init();
    event.init();
    setup_vring(&mut s.frontend, QUEUE_CONTROL, &ctrl);
    setup_vring(&mut s.frontend, QUEUE_EVENT, &event);
    identify(&mut ctrl, &mem, 1);

    // 1. The available index jumps 100 ahead of the 16-entry ring.
    ctrl.write_avail_idx(ctrl.avail_idx().wrapping_add(100));
    assert_ignored(&ctrl);
    // Once broken, a ring that looks sane again is still not served...
    let head = post_identify(&mut ctrl, &mem, 2);
    assert_ignored(&ctrl);
    // ... until the frontend disables and re-enables it.
    s.frontend.set_vring_enable(0, false).unwrap();
    s.frontend.set_vring_enable(0, true).unwrap();
    ctrl.notify();
    assert_identified(&mut ctrl, &mem, head, 2);

    // 2. A descriptor chain that loops: the frontend moves the device past
    // it with a new base.
    let d = ctrl.next_desc();
    let d1 = (d + 1) % QSIZE;
    ctrl.write_desc(d, CMD, 16, VRING_DESC_F_NEXT, d1);
    ctrl.write_desc(d1, REPLY, 64, VRING_DESC_F_NEXT | VRING_DESC_F_WRITE, d);
    ctrl.push_avail(d);
    assert_ignored(&ctrl);
    s.frontend.set_vring_base(0, ctrl.avail_idx()).unwrap();
    identify(&mut ctrl, &mem, 3);

    // 3. An available entry names descriptor 200: the frontend stops the
    // ring, as QEMU does, and gives it a fresh one elsewhere.
    ctrl.push_avail(200);
    assert_ignored(&ctrl);
    let base = s.frontend.get_vring_base(0).unwrap();
    assert_eq!(
        base,
        u32::from(ctrl.avail_idx()),
        "stopped after the bad entry"
    );
    let mut ctrl = DriverRing::new(&mem, ALT_RING);
    ctrl.init();
    setup_vring(&mut s.frontend, QUEUE_CONTROL, &ctrl);
    identify(&mut ctrl, &mem, 4);

    // 4. The event queue's descriptor table is scribbled (a link to
    // descriptor 999): events stay queued, the control queue is served.
    let d = event.next_desc();
    event.write_desc(d, EVBUF, 64, VRING_DESC_F_NEXT | VRING_DESC_F_WRITE, 999);
    event.push_avail(d);
    event.notify();
    mem.write_slice(&encode(Command::Ping { cookie: 7 }, 5), GuestAddress(CMD))
        .unwrap();
    ctrl.add(&[(CMD, 24, false), (REPLY, 64, true)]);
    ctrl.notify();
    assert_eq!(ctrl.wait_collect(1, TIMEOUT).len(), 1);
    let pong: PingReply = read(&mem, REPLY);
    assert_eq!(pong.hdr.status, Status::Ok as u32);
    assert_ignored(&event);
    // A device reset (VHOST_USER_RESET_DEVICE) brings everything back.
    s.frontend.reset_device().unwrap();
    s.frontend.set_features(VIRTIO_FEATURES).unwrap();
    let mut ctrl = DriverRing::new(&mem, CTRL_RING);
    let mut event = DriverRing::new(&mem, EVENT_RING);
    ctrl.init();
    event.init();
    setup_vring(&mut s.frontend, QUEUE_CONTROL, &ctrl);
    setup_vring(&mut s.frontend, QUEUE_EVENT, &event);
    event.add(&[(EVBUF, 64, true)]);
    event.notify();
    mem.write_slice(&encode(Command::Ping { cookie: 8 }, 6), GuestAddress(CMD))
        .unwrap();
    ctrl.add(&[(CMD, 24, false), (REPLY, 64, true)]);
    ctrl.notify();
    assert_eq!(ctrl.wait_collect(1, TIMEOUT).len(), 1);
    let pong: PingReply = read(&mem, REPLY);
    assert_eq!(pong.hdr.status, Status::Ok as u32);
    assert_eq!(pong.event_seq, 1, "the reset restarted the event numbers");
    assert_eq!(
        event.wait_collect(1, TIMEOUT),
        vec![(0, EVENT_RECORD_SIZE as u32)]
    );
    let rec: EventRecord = read(&mem, EVBUF);
    assert_eq!(Event::from_record(&rec).unwrap(), Event::Ping { cookie: 8 });
    identify(&mut ctrl, &mem, 7);

    drop(s);
    let summary = done
        .recv_timeout(TIMEOUT)
        .expect("daemon did not end")
        .unwrap();
    let c = summary.counters;
    assert_eq!(c.rings_broken, 4, "one report per break, not per kick: {c}");
    assert_eq!(c.protocol_errors, 0, "{c}");
    assert_eq!(c.commands_for(Opcode::Identify), 5);
    assert_eq!(c.commands_for(Opcode::Ping), 2);
}
