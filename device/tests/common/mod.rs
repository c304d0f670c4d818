//! The test harness shared by the vhost-user tests: this process is both
//! the VMM (vhost-user frontend: handshake, memory table, vrings) and the
//! guest driver (split virtqueues written into shared memory, kicks,
//! interrupts). [`VhostTransport`] plugs the virtqueues into the testkit's
//! [`Driver`], so GPU tests program the device exactly as a guest would,
//! over the real protocol.
#![allow(dead_code)] // each test binary uses a different part

use std::collections::VecDeque;
use std::ffi::CString;
use std::fs::File;
use std::io::{Read, Write};
use std::mem::size_of;
use std::os::unix::io::{AsRawFd, FromRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

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
use vgpu_device::daemon::{Daemon, RunSummary};
use vgpu_device::testkit::{Driver, PhysAlloc, Transport};
use vgpu_hwif::event::{EventRecord, EVENT_RECORD_SIZE};
use vgpu_hwif::pod::Pod;
use vgpu_hwif::proto::{Command, QUEUE_CONTROL, QUEUE_EVENT};

pub const GUEST_BASE: u64 = 0x4000_0000;
pub const GUEST_SIZE: usize = 2 << 20;
pub const QSIZE: u16 = 16;
pub const TIMEOUT: Duration = Duration::from_secs(5);

pub const VRING_DESC_F_NEXT: u16 = 1;
pub const VRING_DESC_F_WRITE: u16 = 2;

/// Guest physical layout: the virtqueues and their buffers in the first
/// MiB, GPU objects ([`GPU_ALLOC_BASE`] onwards) after it.
pub const CTRL_RING: u64 = GUEST_BASE;
pub const EVENT_RING: u64 = GUEST_BASE + 0x1_0000;
pub const CMD: u64 = GUEST_BASE + 0x2_0000;
pub const REPLY: u64 = GUEST_BASE + 0x3_0000;
pub const EVBUF: u64 = GUEST_BASE + 0x4_0000;
/// Where the GPU objects of [`Rig`] tests start.
pub const GPU_ALLOC_BASE: u64 = GUEST_BASE + 0x10_0000;

/// Shared guest memory, the way QEMU backs it: a memfd mapped shared.
pub fn guest_memory() -> GuestMemoryMmap {
    guest_memory_of(GUEST_SIZE)
}

/// Shared guest memory of `size` bytes at [`GUEST_BASE`], the way QEMU backs
/// it: a memfd mapped shared.
pub fn guest_memory_of(size: usize) -> GuestMemoryMmap {
    let name = CString::new("vgpu-test-guest").unwrap();
    // SAFETY: `name` is a valid NUL-terminated string; memfd_create has no
    // other memory-safety requirements.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
    // SAFETY: `fd` was just returned by memfd_create and is owned by nothing
    // else, so the File becomes its only owner.
    let file = unsafe { File::from_raw_fd(fd) };
    file.set_len(size as u64).unwrap();
    GuestMemoryMmap::<()>::from_ranges_with_files(&[(
        GuestAddress(GUEST_BASE),
        size,
        Some(FileOffset::new(file, 0)),
    )])
    .unwrap()
}

/// The host (VMM) address of guest physical address `gpa`.
pub fn host_addr(mem: &GuestMemoryMmap, gpa: u64) -> u64 {
    mem.get_host_address(GuestAddress(gpa)).unwrap() as u64
}

/// The guest driver's side of one split virtqueue.
pub struct DriverRing {
    mem: GuestMemoryMmap,
    base: u64,
    next_desc: u16,
    avail_idx: u16,
    last_used: u16,
    pub kick: EventFd,
    pub call: EventFd,
}

impl DriverRing {
    pub fn new(mem: &GuestMemoryMmap, base: u64) -> Self {
        DriverRing {
            mem: mem.clone(),
            base,
            next_desc: 0,
            avail_idx: 0,
            last_used: 0,
            kick: EventFd::new(EFD_NONBLOCK).unwrap(),
            call: EventFd::new(EFD_NONBLOCK).unwrap(),
        }
    }

    /// Zeroes the rings and asks for an interrupt at the first completion.
    pub fn init(&self) {
        self.mem
            .write_slice(&[0u8; 0x3000], GuestAddress(self.base))
            .unwrap();
        self.arm_interrupt();
    }

    pub fn desc_table(&self) -> u64 {
        self.base
    }

    pub fn avail_ring(&self) -> u64 {
        self.base + 0x1000
    }

    pub fn used_ring(&self) -> u64 {
        self.base + 0x2000
    }

    pub fn config(&self) -> VringConfigData {
        VringConfigData {
            queue_max_size: QSIZE,
            queue_size: QSIZE,
            flags: 0,
            desc_table_addr: host_addr(&self.mem, self.desc_table()),
            used_ring_addr: host_addr(&self.mem, self.used_ring()),
            avail_ring_addr: host_addr(&self.mem, self.avail_ring()),
            log_addr: None,
        }
    }

    /// Writes a chain of (address, length, device-writable) parts and
    /// makes it available; returns its head.
    pub fn add(&mut self, parts: &[(u64, u32, bool)]) -> u16 {
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

    pub fn notify(&self) {
        self.kick.write(1).unwrap();
    }

    pub fn used_idx(&self) -> u16 {
        u16::from_le(
            self.mem
                .read_obj(GuestAddress(self.used_ring() + 2))
                .unwrap(),
        )
    }

    /// Asks for an interrupt as soon as the next element is used
    /// (`used_event`, `VIRTIO_RING_F_EVENT_IDX`).
    pub fn arm_interrupt(&self) {
        let used_event = self.avail_ring() + 4 + 2 * u64::from(QSIZE);
        self.mem
            .write_obj(self.last_used.to_le(), GuestAddress(used_event))
            .unwrap();
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    }

    /// Waits for the device's interrupt (the call eventfd) until `want`
    /// new elements are used; returns them as (head, length). Every wait
    /// must end with an interrupt: used elements without one fail.
    pub fn wait_used(&mut self, want: u16) -> Vec<(u32, u32)> {
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

    /// Takes the used elements that are there, without waiting.
    pub fn collect(&mut self) -> Vec<(u32, u32)> {
        let mut out = Vec::new();
        while self.last_used != self.used_idx() {
            let e = self.used_ring() + 4 + 8 * u64::from(self.last_used % QSIZE);
            let id: u32 = self.mem.read_obj(GuestAddress(e)).unwrap();
            let len: u32 = self.mem.read_obj(GuestAddress(e + 4)).unwrap();
            out.push((u32::from_le(id), u32::from_le(len)));
            self.last_used = self.last_used.wrapping_add(1);
        }
        out
    }

    /// Waits up to `timeout` for `want` used elements, re-arming the
    /// interrupt and looking again before every sleep (an element used
    /// while the interrupt was not armed raises none).
    pub fn wait_collect(&mut self, want: usize, timeout: Duration) -> Vec<(u32, u32)> {
        let deadline = Instant::now() + timeout;
        let epoll = Epoll::new().unwrap();
        epoll
            .ctl(
                ControlOperation::Add,
                self.call.as_raw_fd(),
                EpollEvent::new(EventSet::IN, 0),
            )
            .unwrap();
        let mut out = self.collect();
        while out.len() < want {
            self.arm_interrupt();
            out.extend(self.collect());
            if out.len() >= want {
                break;
            }
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                break;
            };
            let mut ev = [EpollEvent::default(); 1];
            let ms = i32::try_from(left.as_millis()).unwrap_or(i32::MAX).max(1);
            if epoll.wait(ms, &mut ev).unwrap() == 1 {
                let _ = self.call.read();
            }
            out.extend(self.collect());
        }
        self.arm_interrupt();
        out
    }

    /// The descriptor index the next chain starts at.
    pub fn next_desc(&self) -> u16 {
        self.next_desc
    }

    /// The driver's available index (what it has published).
    pub fn avail_idx(&self) -> u16 {
        self.avail_idx
    }

    /// Writes `idx` as the available index in guest memory, whatever the
    /// driver has published (a scribbled ring); [`DriverRing::add`]
    /// publishes the driver's own index again.
    pub fn write_avail_idx(&self, idx: u16) {
        self.mem
            .write_obj(idx.to_le(), GuestAddress(self.avail_ring() + 2))
            .unwrap();
    }

    /// Writes descriptor `index` as given, links and all.
    pub fn write_desc(&self, index: u16, addr: u64, len: u32, flags: u16, next: u16) {
        let d = self.desc_table() + 16 * u64::from(index);
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

    /// Publishes `head` (any value) as the next available entry.
    pub fn push_avail(&mut self, head: u16) {
        let slot = self.avail_ring() + 4 + 2 * u64::from(self.avail_idx % QSIZE);
        self.mem
            .write_obj(head.to_le(), GuestAddress(slot))
            .unwrap();
        self.avail_idx = self.avail_idx.wrapping_add(1);
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        self.write_avail_idx(self.avail_idx);
    }

    /// Asserts that nothing is used within a short while.
    pub fn assert_idle(&self) {
        thread::sleep(Duration::from_millis(100));
        assert_eq!(self.used_idx(), self.last_used, "unexpected completion");
    }
}

pub fn read<T: Pod>(mem: &GuestMemoryMmap, gpa: u64) -> T {
    let mut b = vec![0u8; size_of::<T>()];
    mem.read_slice(&mut b, GuestAddress(gpa)).unwrap();
    T::read_from(&b).unwrap()
}

pub fn encode(cmd: Command, tag: u64) -> Vec<u8> {
    let mut b = [0u8; 64];
    let n = cmd.encode(tag, &mut b).unwrap();
    b[..n].to_vec()
}

/// Sends `VHOST_USER_GPU_SET_SOCKET` (not in the frontend API) on the raw
/// connection with `NEED_REPLY`, and returns the acknowledgement value.
pub fn gpu_set_socket(conn: &mut UnixStream, fd: RawFd) -> u64 {
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
pub fn raw_get_config(conn: &mut UnixStream, offset: u32, size: u32) -> (u32, u32) {
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

pub fn start_daemon(path: &Path) -> mpsc::Receiver<Result<RunSummary, String>> {
    start_daemon_with(path, DeviceConfig::new(Generation::Gen2, 8).unwrap())
}

/// Runs a daemon for a device configured as `config` in a thread; the
/// receiver gets its result.
pub fn start_daemon_with(
    path: &Path,
    config: DeviceConfig,
) -> mpsc::Receiver<Result<RunSummary, String>> {
    let daemon = Daemon::bind(path, config).unwrap();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(daemon.run().map_err(|e| e.to_string()));
    });
    rx
}

pub struct Session {
    pub frontend: Frontend,
    pub raw: UnixStream,
}

/// The vhost-user handshake as QEMU performs it, up to (not including)
/// the vrings.
pub fn handshake(path: &Path, mem: &GuestMemoryMmap) -> Session {
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

pub fn setup_vring(frontend: &mut Frontend, index: u16, ring: &DriverRing) {
    let i = usize::from(index);
    frontend.set_vring_num(i, QSIZE).unwrap();
    frontend.set_vring_addr(i, &ring.config()).unwrap();
    frontend.set_vring_base(i, 0).unwrap();
    frontend.set_vring_call(i, &ring.call).unwrap();
    frontend.set_vring_kick(i, &ring.kick).unwrap();
    frontend.set_vring_enable(i, true).unwrap();
}

/// Event buffers kept posted by [`VhostTransport`].
pub const EVENT_BUFFERS: usize = 8;

/// The testkit transport over the real virtqueues of a connected daemon.
pub struct VhostTransport {
    mem: GuestMemoryMmap,
    ctrl: DriverRing,
    event: DriverRing,
    received: VecDeque<EventRecord>,
    session: Option<Session>,
    done: mpsc::Receiver<Result<RunSummary, String>>,
    _dir: tempfile::TempDir,
}

impl VhostTransport {
    /// Starts a daemon for `config`, connects, sets up both queues over
    /// `mem` and posts [`EVENT_BUFFERS`] event buffers.
    pub fn start(config: DeviceConfig, mem: &GuestMemoryMmap) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("vgpu.sock");
        let done = start_daemon_with(&path, config);
        Self::connect_with(&path, mem, done, dir)
    }

    /// Connects to a device already listening on `path` (e.g. the
    /// `vgpu-device` binary) and sets it up as [`VhostTransport::start`]
    /// does.
    pub fn connect(path: &Path, mem: &GuestMemoryMmap) -> Self {
        let (_tx, done) = mpsc::channel();
        Self::connect_with(path, mem, done, tempfile::tempdir().unwrap())
    }

    fn connect_with(
        path: &Path,
        mem: &GuestMemoryMmap,
        done: mpsc::Receiver<Result<RunSummary, String>>,
        dir: tempfile::TempDir,
    ) -> Self {
        let mut session = handshake(path, mem);
        let ctrl = DriverRing::new(mem, CTRL_RING);
        let mut event = DriverRing::new(mem, EVENT_RING);
        ctrl.init();
        event.init();
        setup_vring(&mut session.frontend, QUEUE_CONTROL, &ctrl);
        setup_vring(&mut session.frontend, QUEUE_EVENT, &event);
        for _ in 0..EVENT_BUFFERS {
            let d = event.next_desc();
            event.add(&[(EVBUF + 64 * u64::from(d), 64, true)]);
        }
        event.notify();
        VhostTransport {
            mem: mem.clone(),
            ctrl,
            event,
            received: VecDeque::new(),
            session: Some(session),
            done,
            _dir: dir,
        }
    }

    /// Closes the connection, like a VMM going away.
    pub fn disconnect(mut self) {
        self.session.take();
    }

    /// Disconnects like a VMM going away and returns the daemon's summary.
    pub fn finish(mut self) -> RunSummary {
        self.session.take();
        self.done
            .recv_timeout(TIMEOUT)
            .expect("daemon did not end after the frontend disconnected")
            .unwrap()
    }
}

impl Transport for VhostTransport {
    fn command(&mut self, cmd: &[u8]) -> Vec<u8> {
        self.mem.write_slice(cmd, GuestAddress(CMD)).unwrap();
        let len = u32::try_from(cmd.len()).unwrap();
        let head = self.ctrl.add(&[(CMD, len, false), (REPLY, 256, true)]);
        self.ctrl.notify();
        let used = self.ctrl.wait_collect(1, TIMEOUT);
        assert_eq!(used.len(), 1, "no reply within {TIMEOUT:?}");
        assert_eq!(used[0].0, u32::from(head));
        let mut reply = vec![0u8; used[0].1 as usize];
        self.mem
            .read_slice(&mut reply, GuestAddress(REPLY))
            .unwrap();
        reply
    }

    fn event(&mut self, timeout: Duration) -> Option<EventRecord> {
        if self.received.is_empty() {
            for (head, len) in self.event.wait_collect(1, timeout) {
                assert_eq!(len as usize, EVENT_RECORD_SIZE);
                self.received
                    .push_back(read(&self.mem, EVBUF + 64 * u64::from(head)));
                // Give the buffer back.
                let d = self.event.next_desc();
                self.event.add(&[(EVBUF + 64 * u64::from(d), 64, true)]);
                self.event.notify();
            }
        }
        self.received.pop_front()
    }
}

/// A GPU test rig: guest memory, a daemon serving it over vhost-user, and
/// a driver on top.
pub type Rig = Driver<VhostTransport>;

/// Starts a rig for a generation-`generation` device with `mib` MiB of
/// guest memory.
pub fn rig(generation: u32, mib: usize) -> Rig {
    rig_with(
        DeviceConfig::new(Generation::from_number(generation).unwrap(), 4).unwrap(),
        mib,
    )
}

/// The kernel engine the tests run with: `VGPU_JIT=off|on|auto` (default
/// auto), so the same tests cover the interpreter and the JIT
/// (`VGPU_JIT=off cargo test -p vgpu-device --test compute`).
pub fn jit_from_env() -> vgpu_device::config::JitMode {
    match std::env::var("VGPU_JIT") {
        Ok(v) => v.parse().unwrap_or_else(|e| panic!("VGPU_JIT: {e}")),
        Err(_) => vgpu_device::config::JitMode::Auto,
    }
}

/// Starts a rig for a device configured as `config` (kernel engine from
/// [`jit_from_env`]).
pub fn rig_with(config: DeviceConfig, mib: usize) -> Rig {
    let config = config.with_jit(jit_from_env());
    let mem = guest_memory_of(mib << 20);
    let t = VhostTransport::start(config, &mem);
    let size = ((mib as u64) << 20) - (GPU_ALLOC_BASE - GUEST_BASE);
    Driver::new(t, mem, PhysAlloc::new(GPU_ALLOC_BASE, size)).unwrap()
}
