//! End-to-end over the real vhost-user socket: the daemon runs in a
//! thread, this test is both the VMM (vhost-user frontend: handshake,
//! memory table, vrings) and the guest driver (split virtqueues written
//! into shared memory, kicks, interrupts).

use std::ffi::CString;
use std::fs::File;
use std::io::{Read, Write};
use std::mem::size_of;
use std::os::unix::io::{AsRawFd, FromRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use vhost::vhost_user::message::{
    FrontendReq, VhostUserConfigFlags, VhostUserHeaderFlag, VhostUserProtocolFeatures,
};
use vhost::vhost_user::{Frontend, VhostUserFrontend};
use vhost::{VhostBackend, VhostUserMemoryRegionInfo, VringConfigData};
use vm_memory::{Bytes, FileOffset, GuestAddress, GuestMemoryBackend, GuestMemoryMmap};
use vmm_sys_util::epoll::{ControlOperation, Epoll, EpollEvent, EventSet};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};
use vmm_sys_util::sock_ctrl_msg::ScmSocket;

use vgpu_device::backend::{protocol_features, VIRTIO_FEATURES};
use vgpu_device::config::{DeviceConfig, Generation};
use vgpu_device::daemon::{Daemon, ExitReason, RunSummary};
use vgpu_hwif::event::{Event, EventKind, EventRecord, EVENT_RECORD_SIZE};
use vgpu_hwif::layout::FINGERPRINT;
use vgpu_hwif::pod::Pod;
use vgpu_hwif::proto::{
    Command, IdentifyReply, Opcode, PingReply, ReplyHeader, Status, QUEUE_CONTROL, QUEUE_EVENT,
};

const GUEST_BASE: u64 = 0x4000_0000;
const GUEST_SIZE: usize = 2 << 20;
const QSIZE: u16 = 16;
const TIMEOUT: Duration = Duration::from_secs(5);

const VRING_DESC_F_NEXT: u16 = 1;
const VRING_DESC_F_WRITE: u16 = 2;

/// Guest physical layout.
const CTRL_RING: u64 = GUEST_BASE;
const EVENT_RING: u64 = GUEST_BASE + 0x1_0000;
const CMD: u64 = GUEST_BASE + 0x2_0000;
const REPLY: u64 = GUEST_BASE + 0x3_0000;
const EVBUF: u64 = GUEST_BASE + 0x4_0000;

/// Shared guest memory, the way QEMU backs it: a memfd mapped shared.
fn guest_memory() -> GuestMemoryMmap {
    let name = CString::new("vgpu-test-guest").unwrap();
    // SAFETY: `name` is a valid NUL-terminated string; memfd_create has no
    // other memory-safety requirements.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
    // SAFETY: `fd` was just returned by memfd_create and is owned by nothing
    // else, so the File becomes its only owner.
    let file = unsafe { File::from_raw_fd(fd) };
    file.set_len(GUEST_SIZE as u64).unwrap();
    GuestMemoryMmap::<()>::from_ranges_with_files(&[(
        GuestAddress(GUEST_BASE),
        GUEST_SIZE,
        Some(FileOffset::new(file, 0)),
    )])
    .unwrap()
}

/// The host (VMM) address of guest physical address `gpa`.
fn host_addr(mem: &GuestMemoryMmap, gpa: u64) -> u64 {
    mem.get_host_address(GuestAddress(gpa)).unwrap() as u64
}

/// The guest driver's side of one split virtqueue.
struct DriverRing<'a> {
    mem: &'a GuestMemoryMmap,
    base: u64,
    next_desc: u16,
    avail_idx: u16,
    last_used: u16,
    kick: EventFd,
    call: EventFd,
}

impl<'a> DriverRing<'a> {
    fn new(mem: &'a GuestMemoryMmap, base: u64) -> Self {
        DriverRing {
            mem,
            base,
            next_desc: 0,
            avail_idx: 0,
            last_used: 0,
            kick: EventFd::new(EFD_NONBLOCK).unwrap(),
            call: EventFd::new(EFD_NONBLOCK).unwrap(),
        }
    }

    /// Zeroes the rings and asks for an interrupt at the first completion.
    fn init(&self) {
        self.mem
            .write_slice(&[0u8; 0x3000], GuestAddress(self.base))
            .unwrap();
        self.arm_interrupt();
    }

    fn desc_table(&self) -> u64 {
        self.base
    }

    fn avail_ring(&self) -> u64 {
        self.base + 0x1000
    }

    fn used_ring(&self) -> u64 {
        self.base + 0x2000
    }

    fn config(&self) -> VringConfigData {
        VringConfigData {
            queue_max_size: QSIZE,
            queue_size: QSIZE,
            flags: 0,
            desc_table_addr: host_addr(self.mem, self.desc_table()),
            used_ring_addr: host_addr(self.mem, self.used_ring()),
            avail_ring_addr: host_addr(self.mem, self.avail_ring()),
            log_addr: None,
        }
    }

    /// Writes a chain of (address, length, device-writable) parts and
    /// makes it available; returns its head.
    fn add(&mut self, parts: &[(u64, u32, bool)]) -> u16 {
        let head = self.next_desc;
        for (i, &(addr, len, writable)) in parts.iter().enumerate() {
            let idx = (head + i as u16) % QSIZE;
            let mut flags = if writable { VRING_DESC_F_WRITE } else { 0 };
            let mut next = 0u16;
            if i + 1 < parts.len() {
                flags |= VRING_DESC_F_NEXT;
                next = (idx + 1) % QSIZE;
            }
            let d = self.desc_table() + 16 * u64::from(idx);
            self.mem.write_obj(addr.to_le(), GuestAddress(d)).unwrap();
            self.mem
                .write_obj(len.to_le(), GuestAddress(d + 8))
                .unwrap();
            self.mem
                .write_obj(flags.to_le(), GuestAddress(d + 12))
                .unwrap();
            self.mem
                .write_obj(next.to_le(), GuestAddress(d + 14))
                .unwrap();
        }
        self.next_desc = (head + parts.len() as u16) % QSIZE;
        let slot = self.avail_ring() + 4 + 2 * u64::from(self.avail_idx % QSIZE);
        self.mem
            .write_obj(head.to_le(), GuestAddress(slot))
            .unwrap();
        self.avail_idx = self.avail_idx.wrapping_add(1);
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        self.mem
            .write_obj(self.avail_idx.to_le(), GuestAddress(self.avail_ring() + 2))
            .unwrap();
        head
    }

    fn notify(&self) {
        self.kick.write(1).unwrap();
    }

    fn used_idx(&self) -> u16 {
        u16::from_le(
            self.mem
                .read_obj(GuestAddress(self.used_ring() + 2))
                .unwrap(),
        )
    }

    /// Asks for an interrupt as soon as the next element is used
    /// (`used_event`, `VIRTIO_RING_F_EVENT_IDX`).
    fn arm_interrupt(&self) {
        let used_event = self.avail_ring() + 4 + 2 * u64::from(QSIZE);
        self.mem
            .write_obj(self.last_used.to_le(), GuestAddress(used_event))
            .unwrap();
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    }

    /// Waits for the device's interrupt (the call eventfd) until `want`
    /// new elements are used; returns them as (head, length). Every wait
    /// must end with an interrupt: used elements without one fail.
    fn wait_used(&mut self, want: u16) -> Vec<(u32, u32)> {
        let epoll = Epoll::new().unwrap();
        epoll
            .ctl(
                ControlOperation::Add,
                self.call.as_raw_fd(),
                EpollEvent::new(EventSet::IN, 0),
            )
            .unwrap();
        while self.used_idx().wrapping_sub(self.last_used) < want {
            let mut ev = [EpollEvent::default(); 1];
            let n = epoll.wait(TIMEOUT.as_millis() as i32, &mut ev).unwrap();
            assert_eq!(
                n,
                1,
                "no interrupt within {TIMEOUT:?} for ring {:#x} (used idx {}, expected {} more)",
                self.base,
                self.used_idx(),
                want
            );
            self.call.read().unwrap();
        }
        let mut out = Vec::new();
        while self.last_used != self.used_idx() {
            let e = self.used_ring() + 4 + 8 * u64::from(self.last_used % QSIZE);
            let id: u32 = self.mem.read_obj(GuestAddress(e)).unwrap();
            let len: u32 = self.mem.read_obj(GuestAddress(e + 4)).unwrap();
            out.push((u32::from_le(id), u32::from_le(len)));
            self.last_used = self.last_used.wrapping_add(1);
        }
        self.arm_interrupt();
        out
    }

    /// Asserts that nothing is used within a short while.
    fn assert_idle(&self) {
        thread::sleep(Duration::from_millis(100));
        assert_eq!(self.used_idx(), self.last_used, "unexpected completion");
    }
}

fn read<T: Pod>(mem: &GuestMemoryMmap, gpa: u64) -> T {
    let mut b = vec![0u8; size_of::<T>()];
    mem.read_slice(&mut b, GuestAddress(gpa)).unwrap();
    T::read_from(&b).unwrap()
}

fn encode(cmd: Command, tag: u64) -> Vec<u8> {
    let mut b = [0u8; 64];
    let n = cmd.encode(tag, &mut b).unwrap();
    b[..n].to_vec()
}

/// Sends `VHOST_USER_GPU_SET_SOCKET` (not in the frontend API) on the raw
/// connection with `NEED_REPLY`, and returns the acknowledgement value.
fn gpu_set_socket(conn: &mut UnixStream, fd: RawFd) -> u64 {
    let mut msg = Vec::new();
    msg.extend_from_slice(&(FrontendReq::GPU_SET_SOCKET as u32).to_le_bytes());
    msg.extend_from_slice(&(0x1 | VhostUserHeaderFlag::NEED_REPLY.bits()).to_le_bytes());
    msg.extend_from_slice(&0u32.to_le_bytes());
    conn.send_with_fd(&msg[..], fd).unwrap();
    let mut reply = [0u8; 20];
    conn.read_exact(&mut reply).unwrap();
    let request = u32::from_le_bytes(reply[0..4].try_into().unwrap());
    let flags = u32::from_le_bytes(reply[4..8].try_into().unwrap());
    let size = u32::from_le_bytes(reply[8..12].try_into().unwrap());
    assert_eq!(request, FrontendReq::GPU_SET_SOCKET as u32);
    assert_ne!(flags & VhostUserHeaderFlag::REPLY.bits(), 0);
    assert_eq!(size, 8);
    u64::from_le_bytes(reply[12..20].try_into().unwrap())
}

/// Sends `VHOST_USER_GET_CONFIG` on the raw connection; returns the
/// reply's (offset, size). (The frontend API cannot read an empty reply.)
fn raw_get_config(conn: &mut UnixStream, offset: u32, size: u32) -> (u32, u32) {
    let mut msg = Vec::new();
    msg.extend_from_slice(&(FrontendReq::GET_CONFIG as u32).to_le_bytes());
    msg.extend_from_slice(&0x1u32.to_le_bytes());
    msg.extend_from_slice(&(12 + size).to_le_bytes());
    msg.extend_from_slice(&offset.to_le_bytes());
    msg.extend_from_slice(&size.to_le_bytes());
    msg.extend_from_slice(&0u32.to_le_bytes());
    msg.extend(std::iter::repeat_n(0u8, size as usize));
    conn.write_all(&msg).unwrap();
    let mut hdr = [0u8; 12];
    conn.read_exact(&mut hdr).unwrap();
    let len = u32::from_le_bytes(hdr[8..12].try_into().unwrap()) as usize;
    assert_eq!(
        u32::from_le_bytes(hdr[0..4].try_into().unwrap()),
        FrontendReq::GET_CONFIG as u32
    );
    let mut body = vec![0u8; len];
    conn.read_exact(&mut body).unwrap();
    assert!(len >= 12);
    (
        u32::from_le_bytes(body[0..4].try_into().unwrap()),
        u32::from_le_bytes(body[4..8].try_into().unwrap()),
    )
}

fn start_daemon(path: &Path) -> mpsc::Receiver<Result<RunSummary, String>> {
    let daemon = Daemon::bind(path, DeviceConfig::new(Generation::Gen2, 8).unwrap()).unwrap();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(daemon.run().map_err(|e| e.to_string()));
    });
    rx
}

struct Session {
    frontend: Frontend,
    raw: UnixStream,
}

/// The vhost-user handshake as QEMU performs it, up to (not including)
/// the vrings.
fn handshake(path: &Path, mem: &GuestMemoryMmap) -> Session {
    let _ = env_logger::builder().is_test(true).try_init();
    let stream = UnixStream::connect(path).unwrap();
    let mut raw = stream.try_clone().unwrap();
    let mut frontend = Frontend::from_stream(stream, 2);

    let features = frontend.get_features().unwrap();
    assert_eq!(features, VIRTIO_FEATURES);
    let proto = frontend.get_protocol_features().unwrap();
    assert_eq!(proto, protocol_features());
    assert!(proto.contains(VhostUserProtocolFeatures::CONFIG));
    frontend.set_protocol_features(proto).unwrap();
    frontend.set_hdr_flags(VhostUserHeaderFlag::NEED_REPLY);
    assert_eq!(frontend.get_queue_num().unwrap(), 2);
    frontend.set_owner().unwrap();
    frontend.set_features(features).unwrap();

    let (_, config) = frontend
        .get_config(0, 16, VhostUserConfigFlags::empty(), &[0u8; 16])
        .unwrap();
    // events_read, events_clear, num_scanouts, num_capsets: all 0.
    assert_eq!(config, vec![0u8; 16]);
    // A config read past the end is answered with an empty payload (what
    // QEMU treats as an error).
    assert_eq!(raw_get_config(&mut raw, 12, 8), (12, 0));

    let region = mem.find_region(GuestAddress(GUEST_BASE)).unwrap();
    let info = VhostUserMemoryRegionInfo::from_guest_region(region).unwrap();
    frontend.set_mem_table(&[info]).unwrap();
    Session { frontend, raw }
}

fn setup_vring(frontend: &mut Frontend, index: u16, ring: &DriverRing<'_>) {
    let i = usize::from(index);
    frontend.set_vring_num(i, QSIZE).unwrap();
    frontend.set_vring_addr(i, &ring.config()).unwrap();
    frontend.set_vring_base(i, 0).unwrap();
    frontend.set_vring_call(i, &ring.call).unwrap();
    frontend.set_vring_kick(i, &ring.kick).unwrap();
    frontend.set_vring_enable(i, true).unwrap();
}

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
    assert_eq!(id.firmware_version, 0x02_00_01);
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
