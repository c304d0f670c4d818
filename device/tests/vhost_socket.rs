//! End-to-end over the real vhost-user socket: the daemon runs in a
//! thread, this test is both the VMM (vhost-user frontend: handshake,
//! memory table, vrings) and the guest driver (split virtqueues written
//! into shared memory, kicks, interrupts).

mod common;

use std::io::{Read, Write};
use std::mem::size_of;
use std::os::unix::io::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::mpsc;
use std::thread;

use vm_memory::{Bytes, GuestAddress};

use common::*;
use vgpu_device::config::DeviceConfig;
use vgpu_device::daemon::{Daemon, ExitReason};
use vgpu_hwif::event::{Event, EventKind, EventRecord, EVENT_RECORD_SIZE};
use vgpu_hwif::layout::FINGERPRINT;
use vgpu_hwif::proto::{
    Command, IdentifyReply, Opcode, PingReply, ReplyHeader, Status, QUEUE_CONTROL, QUEUE_EVENT,
};

#[test]
fn identify_ping_and_malformed_commands_over_vhost_user() {
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

    // QEMU hands over its display channel when the driver is ready.
    let (display_ours, display_theirs) = UnixStream::pair().unwrap();
    assert_eq!(gpu_set_socket(&mut s.raw, display_theirs.as_raw_fd()), 0);
    drop(display_theirs);

    // Two event buffers; no event is pending yet, so none is used.
    mem.write_slice(&[0xee; 256], GuestAddress(EVBUF)).unwrap();
    event.add(&[(EVBUF, 64, true)]);
    event.add(&[(EVBUF + 64, 64, true)]);
    event.notify();
    event.assert_idle();

    // IDENTIFY.
    mem.write_slice(&encode(Command::Identify, 0x1d), GuestAddress(CMD))
        .unwrap();
    let head = ctrl.add(&[(CMD, 16, false), (REPLY, 512, true)]);
    ctrl.notify();
    assert_eq!(
        ctrl.wait_used(1),
        vec![(u32::from(head), size_of::<IdentifyReply>() as u32)]
    );
    let id: IdentifyReply = read(&mem, REPLY);
    assert_eq!(
        id.hdr,
        ReplyHeader {
            status: Status::Ok as u32,
            opcode: Opcode::Identify as u32,
            tag: 0x1d
        }
    );
    assert_eq!(id.magic, u32::from_le_bytes(*b"VGPU"));
    assert_eq!(id.generation, 2);
    // In its boot state: no firmware runs yet.
    assert_eq!(id.firmware_version, 0);
    assert_eq!(id.features & vgpu_hwif::proto::FEATURE_FIRMWARE_RUNNING, 0);
    assert_eq!(id.engine_mask, 0b11, "copy and compute engines");
    assert_eq!(id.va_bits, 48);
    assert_eq!(id.compute_units, 8);
    assert_eq!(id.event_record_size, EVENT_RECORD_SIZE as u32);
    assert_eq!(id.layout_fingerprint, FINGERPRINT);

    // PING: reply, then the event lands in the first posted buffer.
    mem.write_slice(
        &encode(
            Command::Ping {
                cookie: 0x5eed_cafe,
            },
            0x2e,
        ),
        GuestAddress(CMD),
    )
    .unwrap();
    let head = ctrl.add(&[(CMD, 24, false), (REPLY, 64, true)]);
    ctrl.notify();
    assert_eq!(
        ctrl.wait_used(1),
        vec![(u32::from(head), size_of::<PingReply>() as u32)]
    );
    let pong: PingReply = read(&mem, REPLY);
    assert_eq!(pong.hdr.status, Status::Ok as u32);
    assert_eq!(pong.hdr.tag, 0x2e);
    assert_eq!(pong.cookie, 0x5eed_cafe);
    assert_eq!(pong.event_seq, 1);
    assert_eq!(event.wait_used(1), vec![(0, EVENT_RECORD_SIZE as u32)]);
    let rec: EventRecord = read(&mem, EVBUF);
    assert_eq!(rec.kind, EventKind::Ping as u32);
    assert_eq!(rec.seq, 1);
    assert_eq!(
        Event::from_record(&rec).unwrap(),
        Event::Ping {
            cookie: 0x5eed_cafe
        }
    );
    assert!(rec.timestamp_ns > 0);
    // The second buffer is still untouched.
    let mut second = [0u8; 64];
    mem.read_slice(&mut second, GuestAddress(EVBUF + 64))
        .unwrap();
    assert_eq!(second, [0xee; 64]);

    // A truncated command gets an error reply echoing nothing it lacks.
    mem.write_slice(&[0xff; 8], GuestAddress(CMD)).unwrap();
    let head = ctrl.add(&[(CMD, 8, false), (REPLY, 64, true)]);
    ctrl.notify();
    assert_eq!(ctrl.wait_used(1), vec![(u32::from(head), 16)]);
    let h: ReplyHeader = read(&mem, REPLY);
    assert_eq!(
        h,
        ReplyHeader {
            status: Status::Truncated as u32,
            opcode: 0,
            tag: 0
        }
    );

    // An unknown opcode echoes opcode and tag.
    let mut unknown = encode(Command::Identify, 0x77);
    unknown[..4].copy_from_slice(&0x0500u32.to_le_bytes());
    mem.write_slice(&unknown, GuestAddress(CMD)).unwrap();
    let head = ctrl.add(&[(CMD, 16, false), (REPLY, 64, true)]);
    ctrl.notify();
    assert_eq!(ctrl.wait_used(1), vec![(u32::from(head), 16)]);
    let h: ReplyHeader = read(&mem, REPLY);
    assert_eq!(
        h,
        ReplyHeader {
            status: Status::UnknownOpcode as u32,
            opcode: 0x0500,
            tag: 0x77
        }
    );

    // A chain without a reply buffer is completed with length 0 ...
    mem.write_slice(&encode(Command::Identify, 1), GuestAddress(CMD))
        .unwrap();
    let head = ctrl.add(&[(CMD, 16, false)]);
    ctrl.notify();
    assert_eq!(ctrl.wait_used(1), vec![(u32::from(head), 0)]);

    // ... and the device keeps working: the next PING is event 2.
    mem.write_slice(&encode(Command::Ping { cookie: 2 }, 3), GuestAddress(CMD))
        .unwrap();
    ctrl.add(&[(CMD, 24, false), (REPLY, 64, true)]);
    ctrl.notify();
    ctrl.wait_used(1);
    let pong: PingReply = read(&mem, REPLY);
    assert_eq!(pong.event_seq, 2);
    assert_eq!(event.wait_used(1), vec![(1, EVENT_RECORD_SIZE as u32)]);
    let rec: EventRecord = read(&mem, EVBUF + 64);
    assert_eq!(rec.seq, 2);
    assert_eq!(Event::from_record(&rec).unwrap(), Event::Ping { cookie: 2 });

    // The frontend goes away: the daemon ends cleanly and removes its
    // socket.
    drop(s);
    drop(display_ours);
    let summary = done
        .recv_timeout(TIMEOUT)
        .expect("daemon did not end after the frontend disconnected")
        .unwrap();
    assert_eq!(summary.reason, ExitReason::Disconnected);
    assert!(summary.served);
    let c = summary.counters;
    assert_eq!(c.commands_for(Opcode::Identify), 1);
    assert_eq!(c.commands_for(Opcode::Ping), 2);
    assert_eq!(c.errors_for(Status::Truncated), 1);
    assert_eq!(c.errors_for(Status::UnknownOpcode), 1);
    assert_eq!(c.protocol_errors, 1);
    assert_eq!(c.events_posted, 2);
    assert_eq!(c.events_delivered, 2);
    assert!(!path.exists(), "socket file left behind");
}

#[test]
fn stop_handle_ends_a_connected_session() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("vgpu.sock");
    let daemon = Daemon::bind(&path, DeviceConfig::default()).unwrap();
    let stop = daemon.stop_handle();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(daemon.run().map_err(|e| e.to_string()));
    });
    let mem = guest_memory();
    let mut s = handshake(&path, &mem);
    stop.stop();
    let summary = rx
        .recv_timeout(TIMEOUT)
        .expect("daemon did not stop")
        .unwrap();
    assert_eq!(summary.reason, ExitReason::Stopped);
    assert!(summary.served);
    assert!(!path.exists());
    // The connection is closed from the device side.
    let mut buf = [0u8; 1];
    s.raw.set_read_timeout(Some(TIMEOUT)).unwrap();
    assert_eq!(s.raw.read(&mut buf).unwrap_or(0), 0);
}

#[test]
fn frontend_that_hangs_up_at_once_ends_the_daemon_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("vgpu.sock");
    let done = start_daemon(&path);
    // Half a message, then gone.
    let mut conn = UnixStream::connect(&path).unwrap();
    conn.write_all(&[1, 0, 0]).unwrap();
    drop(conn);
    let summary = done
        .recv_timeout(TIMEOUT)
        .expect("daemon did not end")
        .unwrap();
    assert_eq!(summary.reason, ExitReason::Disconnected);
    assert!(summary.served);
    assert!(!path.exists());
}
