//! Virtqueue layer tests, driven from the driver's side with virtio-queue's
//! mock split queue over real guest memory.

use std::mem::size_of;

use vgpu_hwif::rng::Rng;

use virtio_bindings::bindings::virtio_ring::{
    VRING_DESC_F_INDIRECT, VRING_DESC_F_NEXT, VRING_DESC_F_WRITE,
};
use virtio_queue::desc::{split::Descriptor as SplitDescriptor, RawDescriptor};
use virtio_queue::mock::MockSplitQueue;
use virtio_queue::{Queue, QueueT};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use vgpu_hwif::event::{Event, EventRecord, EVENT_FIFO_DEPTH, EVENT_RECORD_SIZE};
use vgpu_hwif::pod::Pod;
use vgpu_hwif::proto::{Command, IdentifyReply, Opcode, PingReply, ReplyHeader, Status};

use super::*;
use crate::config::{DeviceConfig, Generation};
use crate::core::clock::ManualClock;

const MEM_SIZE: u64 = 0x10_0000;
const CTRL_QUEUE: u64 = 0x0;
const EVENT_QUEUE: u64 = 0x4000;
const CMD: u64 = 0x1_0000;
const REPLY: u64 = 0x2_0000;
const EVBUF: u64 = 0x3_0000;
const INDIRECT: u64 = 0x8_0000;
const OUTSIDE: u64 = 0x20_0000;
const QSIZE: u16 = 16;
const FILL: u8 = 0x5a;

fn memory() -> GuestMemoryMmap {
    GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), MEM_SIZE as usize)]).unwrap()
}

fn device() -> (Device, ManualClock) {
    let clock = ManualClock::new(1_000);
    let dev = Device::with_clock(
        DeviceConfig::new(Generation::Gen2, 4).unwrap(),
        Box::new(clock.clone()),
    );
    (dev, clock)
}

/// A descriptor part of a chain: (address, length, device-writable).
type Part = (u64, u32, bool);

/// The driver's side of one split queue: virtio-queue's mock lays out the
/// descriptor table and available ring; the used ring is placed apart
/// (the mock's own used ring overlaps its available ring) and the
/// available ring wraps at the queue size.
struct DriverQueue<'a> {
    mock: MockSplitQueue<'a, GuestMemoryMmap>,
    mem: &'a GuestMemoryMmap,
    used_addr: u64,
    avail_idx: u16,
}

impl<'a> DriverQueue<'a> {
    fn new(mem: &'a GuestMemoryMmap, base: u64) -> (Self, Queue) {
        let mock = MockSplitQueue::create(mem, GuestAddress(base), QSIZE);
        let used_addr = base + 0x800;
        let mut q = mock.create_queue::<Queue>().unwrap();
        q.try_set_used_ring_address(GuestAddress(used_addr))
            .unwrap();
        (
            DriverQueue {
                mock,
                mem,
                used_addr,
                avail_idx: 0,
            },
            q,
        )
    }

    /// Writes a chain at descriptor index `at` and makes it available.
    fn add_chain(&mut self, at: u16, parts: &[Part]) {
        for (i, &(addr, len, w)) in parts.iter().enumerate() {
            let mut flags = if w { VRING_DESC_F_WRITE as u16 } else { 0 };
            let next = if i + 1 < parts.len() {
                flags |= VRING_DESC_F_NEXT as u16;
                at + i as u16 + 1
            } else {
                0
            };
            let d = SplitDescriptor::new(addr, len, flags, next);
            self.mock
                .desc_table()
                .store(at + i as u16, d.into())
                .unwrap();
        }
        self.push_avail(at);
    }

    /// Puts `head` on the available ring.
    fn push_avail(&mut self, head: u16) {
        let avail = self.mock.avail_addr().0;
        let slot = u64::from(self.avail_idx % QSIZE);
        self.mem
            .write_obj(head.to_le(), GuestAddress(avail + 4 + 2 * slot))
            .unwrap();
        self.avail_idx = self.avail_idx.wrapping_add(1);
        self.set_avail_idx(self.avail_idx);
    }

    fn set_avail_idx(&self, idx: u16) {
        let avail = self.mock.avail_addr().0;
        self.mem
            .write_obj(idx.to_le(), GuestAddress(avail + 2))
            .unwrap();
    }

    /// Used ring element `i`: (descriptor id, length).
    fn used(&self, i: u16) -> (u32, u32) {
        let addr = self.used_addr + 4 + 8 * u64::from(i % QSIZE);
        let id: u32 = self.mem.read_obj(GuestAddress(addr)).unwrap();
        let len: u32 = self.mem.read_obj(GuestAddress(addr + 4)).unwrap();
        (u32::from_le(id), u32::from_le(len))
    }

    fn used_idx(&self) -> u16 {
        u16::from_le(self.mem.read_obj(GuestAddress(self.used_addr + 2)).unwrap())
    }

    /// The driver asks for an interrupt once the used index passes `v`.
    fn set_used_event(&self, v: u16) {
        let addr = self.mock.avail_addr().0 + 4 + 2 * u64::from(QSIZE);
        self.mem.write_obj(v.to_le(), GuestAddress(addr)).unwrap();
    }

    /// Where the device asks to be kicked next.
    fn avail_event(&self) -> u16 {
        let addr = self.used_addr + 4 + 8 * u64::from(QSIZE);
        u16::from_le(self.mem.read_obj(GuestAddress(addr)).unwrap())
    }
}

fn cmd_bytes(cmd: Command, tag: u64) -> Vec<u8> {
    let mut buf = [0u8; 64];
    let n = cmd.encode(tag, &mut buf).unwrap();
    buf[..n].to_vec()
}

fn read<T: Pod>(mem: &GuestMemoryMmap, addr: u64) -> T {
    let mut buf = vec![0u8; size_of::<T>()];
    mem.read_slice(&mut buf, GuestAddress(addr)).unwrap();
    T::read_from(&buf).unwrap()
}

fn fill(mem: &GuestMemoryMmap, addr: u64, len: usize) {
    mem.write_slice(&vec![FILL; len], GuestAddress(addr))
        .unwrap();
}

fn untouched(mem: &GuestMemoryMmap, addr: u64, len: usize) -> bool {
    let mut buf = vec![0u8; len];
    mem.read_slice(&mut buf, GuestAddress(addr)).unwrap();
    buf.iter().all(|b| *b == FILL)
}

struct Rig<'a> {
    mem: &'a GuestMemoryMmap,
    ctrl: DriverQueue<'a>,
    ctrl_q: Queue,
    event: DriverQueue<'a>,
    event_q: Queue,
}

impl<'a> Rig<'a> {
    fn new(mem: &'a GuestMemoryMmap) -> Self {
        let (ctrl, ctrl_q) = DriverQueue::new(mem, CTRL_QUEUE);
        let (event, event_q) = DriverQueue::new(mem, EVENT_QUEUE);
        fill(mem, REPLY, 0x1000);
        fill(mem, EVBUF, 0x1000);
        Rig {
            mem,
            ctrl,
            ctrl_q,
            event,
            event_q,
        }
    }

    fn control(&mut self, dev: &mut Device) -> QueueOutcome {
        process_control_queue(&mut self.ctrl_q, self.mem, dev).unwrap()
    }

    fn events(&mut self, dev: &mut Device) -> QueueOutcome {
        deliver_events(&mut self.event_q, self.mem, dev).unwrap()
    }

    fn put_cmd(&self, bytes: &[u8]) {
        self.mem.write_slice(bytes, GuestAddress(CMD)).unwrap();
    }
}

#[test]
fn identify_round_trip() {
    let mem = memory();
    let mut rig = Rig::new(&mem);
    let (mut dev, _) = device();
    let cmd = cmd_bytes(Command::Identify, 0x1234);
    rig.put_cmd(&cmd);
    rig.ctrl
        .add_chain(0, &[(CMD, 16, false), (REPLY, 256, true)]);

    let out = rig.control(&mut dev);
    assert_eq!(
        out,
        QueueOutcome {
            completed: 1,
            rejected: 0,
            notify: true
        }
    );
    assert_eq!(rig.ctrl.used_idx(), 1);
    assert_eq!(rig.ctrl.used(0), (0, size_of::<IdentifyReply>() as u32));
    let id: IdentifyReply = read(&mem, REPLY);
    assert_eq!(
        id.hdr,
        ReplyHeader {
            status: 0,
            opcode: Opcode::Identify as u32,
            tag: 0x1234
        }
    );
    assert_eq!(id.generation, 2);
    assert_eq!(id.layout_fingerprint, vgpu_hwif::layout::FINGERPRINT);
    // Nothing written past the reply.
    assert!(untouched(
        &mem,
        REPLY + size_of::<IdentifyReply>() as u64,
        64
    ));
    assert_eq!(dev.counters().commands_for(Opcode::Identify), 1);
    assert_eq!(dev.counters().protocol_errors, 0);
}

#[test]
fn ping_event_is_delivered_into_posted_buffer() {
    let mem = memory();
    let mut rig = Rig::new(&mem);
    let (mut dev, clock) = device();
    clock.advance(500);
    rig.put_cmd(&cmd_bytes(Command::Ping { cookie: 0xc0ffee }, 9));
    rig.ctrl
        .add_chain(0, &[(CMD, 24, false), (REPLY, 64, true)]);
    rig.event.add_chain(0, &[(EVBUF, 64, true)]);
    rig.event.add_chain(1, &[(EVBUF + 64, 64, true)]);

    assert_eq!(rig.control(&mut dev).completed, 1);
    let reply: PingReply = read(&mem, REPLY);
    assert_eq!(reply.hdr.status, Status::Ok as u32);
    assert_eq!(reply.cookie, 0xc0ffee);
    assert_eq!(reply.event_seq, 1);
    assert_eq!(rig.ctrl.used(0), (0, size_of::<PingReply>() as u32));

    let out = rig.events(&mut dev);
    assert_eq!(out.completed, 1);
    assert!(out.notify);
    assert_eq!(rig.event.used_idx(), 1);
    assert_eq!(rig.event.used(0), (0, EVENT_RECORD_SIZE as u32));
    let rec: EventRecord = read(&mem, EVBUF);
    assert_eq!(rec.seq, 1);
    assert_eq!(rec.timestamp_ns, 1_500);
    assert_eq!(
        Event::from_record(&rec).unwrap(),
        Event::Ping { cookie: 0xc0ffee }
    );
    // The second buffer stays posted until the next event.
    assert!(untouched(&mem, EVBUF + 64, 64));
    assert_eq!(dev.pending_events(), 0);

    // Nothing pending: a kick on the event queue completes nothing.
    assert_eq!(rig.events(&mut dev).completed, 0);
    assert_eq!(rig.event.used_idx(), 1);
}

#[test]
fn events_wait_for_buffers_and_keep_order() {
    let mem = memory();
    let mut rig = Rig::new(&mem);
    let (mut dev, _) = device();
    for (i, cookie) in [11u64, 22, 33].into_iter().enumerate() {
        rig.put_cmd(&cmd_bytes(Command::Ping { cookie }, i as u64));
        rig.ctrl
            .add_chain((2 * i) as u16, &[(CMD, 24, false), (REPLY, 64, true)]);
        rig.control(&mut dev);
    }
    assert_eq!(dev.pending_events(), 3);
    // No buffers yet: nothing delivered.
    assert_eq!(rig.events(&mut dev).completed, 0);
    rig.event.add_chain(0, &[(EVBUF, 64, true)]);
    rig.event.add_chain(1, &[(EVBUF + 0x100, 128, true)]);
    assert_eq!(rig.events(&mut dev).completed, 2);
    rig.event.add_chain(2, &[(EVBUF + 0x200, 64, true)]);
    assert_eq!(rig.events(&mut dev).completed, 1);
    let got: Vec<(u64, Event)> = [EVBUF, EVBUF + 0x100, EVBUF + 0x200]
        .iter()
        .map(|a| {
            let r: EventRecord = read(&mem, *a);
            (r.seq, Event::from_record(&r).unwrap())
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (1, Event::Ping { cookie: 11 }),
            (2, Event::Ping { cookie: 22 }),
            (3, Event::Ping { cookie: 33 })
        ]
    );
    assert_eq!(rig.event.used(1), (1, 64));
    assert_eq!(dev.counters().events_delivered, 3);
}

#[test]
fn command_split_over_several_descriptors() {
    let mem = memory();
    let mut rig = Rig::new(&mem);
    let (mut dev, _) = device();
    let cmd = cmd_bytes(
        Command::Ping {
            cookie: 0x0102_0304_0506_0708,
        },
        0x77,
    );
    // Scatter the 24 command bytes over three places.
    mem.write_slice(&cmd[..10], GuestAddress(CMD)).unwrap();
    mem.write_slice(&cmd[10..17], GuestAddress(CMD + 0x100))
        .unwrap();
    mem.write_slice(&cmd[17..], GuestAddress(CMD + 0x200))
        .unwrap();
    rig.ctrl.add_chain(
        0,
        &[
            (CMD, 10, false),
            (CMD + 0x100, 7, false),
            (CMD + 0x200, 7, false),
            (REPLY, 20, true),
            (REPLY + 0x100, 100, true),
        ],
    );
    let out = rig.control(&mut dev);
    assert_eq!(out.rejected, 0);
    assert_eq!(rig.ctrl.used(0), (0, 32));
    // The reply is scattered the same way: 20 bytes, then the rest.
    let mut joined = vec![0u8; 32];
    mem.read_slice(&mut joined[..20], GuestAddress(REPLY))
        .unwrap();
    mem.read_slice(&mut joined[20..], GuestAddress(REPLY + 0x100))
        .unwrap();
    let r = PingReply::read_from(&joined).unwrap();
    assert_eq!(r.hdr.tag, 0x77);
    assert_eq!(r.hdr.status, 0);
    assert_eq!(r.cookie, 0x0102_0304_0506_0708);
    assert!(untouched(&mem, REPLY + 20, 16));
}

#[test]
fn oversized_command_over_many_descriptors_is_answered_oversized() {
    let mem = memory();
    let mut rig = Rig::new(&mem);
    let (mut dev, _) = device();
    rig.put_cmd(&cmd_bytes(Command::Identify, 0x55));
    rig.ctrl.add_chain(
        0,
        &[
            (CMD, 2048, false),
            (CMD + 2048, 2048, false),
            (CMD + 4096, 2048, false),
            (REPLY, 128, true),
        ],
    );
    rig.control(&mut dev);
    assert_eq!(rig.ctrl.used(0), (0, 16));
    let h: ReplyHeader = read(&mem, REPLY);
    assert_eq!(
        h,
        ReplyHeader {
            status: Status::Oversized as u32,
            opcode: Opcode::Identify as u32,
            tag: 0x55
        }
    );
    assert_eq!(dev.counters().errors_for(Status::Oversized), 1);
}

#[test]
fn malformed_chains_are_completed_with_zero_and_counted() {
    let ping = cmd_bytes(Command::Ping { cookie: 1 }, 3);
    let cases: &[(&str, &[Part])] = &[
        (
            "writable before readable",
            &[(REPLY, 64, true), (CMD, 24, false)],
        ),
        ("no writable part", &[(CMD, 24, false)]),
        (
            "reply buffer smaller than a header",
            &[(CMD, 24, false), (REPLY, 15, true)],
        ),
        (
            "reply split, still too small",
            &[(CMD, 24, false), (REPLY, 8, true), (REPLY + 8, 7, true)],
        ),
        ("zero-length reply", &[(CMD, 24, false), (REPLY, 0, true)]),
        (
            "readable descriptor outside guest memory",
            &[(OUTSIDE, 24, false), (REPLY, 64, true)],
        ),
        (
            "readable descriptor straddling the end of memory",
            &[(MEM_SIZE - 8, 24, false), (REPLY, 64, true)],
        ),
        (
            "writable descriptor outside guest memory",
            &[(CMD, 24, false), (OUTSIDE, 64, true)],
        ),
        (
            "later writable descriptor outside guest memory",
            &[
                (CMD, 24, false),
                (REPLY, 64, true),
                (u64::MAX - 4, 64, true),
            ],
        ),
        (
            "huge readable length",
            &[(CMD, u32::MAX, false), (REPLY, 64, true)],
        ),
    ];
    for (name, parts) in cases {
        let mem = memory();
        let mut rig = Rig::new(&mem);
        let (mut dev, _) = device();
        rig.put_cmd(&ping);
        rig.ctrl.add_chain(0, parts);
        let out = rig.control(&mut dev);
        assert_eq!(
            out,
            QueueOutcome {
                completed: 1,
                rejected: 1,
                notify: true
            },
            "{name}"
        );
        assert_eq!(rig.ctrl.used(0), (0, 0), "{name}");
        assert!(untouched(&mem, REPLY, 64), "{name}: reply buffer written");
        let c = dev.counters();
        assert_eq!(c.protocol_errors, 1, "{name}");
        assert_eq!(c.replies(), 0, "{name}: command must not execute");
        assert_eq!(dev.pending_events(), 0, "{name}");
    }
}

#[test]
fn reply_buffer_with_room_for_header_only_gets_bad_descriptor() {
    let mem = memory();
    let mut rig = Rig::new(&mem);
    let (mut dev, _) = device();
    rig.put_cmd(&cmd_bytes(Command::Ping { cookie: 5 }, 0xaa));
    rig.ctrl
        .add_chain(0, &[(CMD, 24, false), (REPLY, 16, true)]);
    let out = rig.control(&mut dev);
    assert_eq!(out.rejected, 0);
    assert_eq!(rig.ctrl.used(0), (0, 16));
    let h: ReplyHeader = read(&mem, REPLY);
    assert_eq!(
        h,
        ReplyHeader {
            status: Status::BadDescriptor as u32,
            opcode: Opcode::Ping as u32,
            tag: 0xaa
        }
    );
    assert_eq!(dev.pending_events(), 0, "refused PING raises no event");
    assert!(untouched(&mem, REPLY + 16, 16));
}

#[test]
fn good_chain_after_bad_one_is_served() {
    let mem = memory();
    let mut rig = Rig::new(&mem);
    let (mut dev, _) = device();
    rig.put_cmd(&cmd_bytes(Command::Identify, 1));
    rig.ctrl.add_chain(0, &[(CMD, 16, false)]);
    rig.ctrl
        .add_chain(1, &[(CMD, 16, false), (REPLY, 256, true)]);
    let out = rig.control(&mut dev);
    assert_eq!(out.completed, 2);
    assert_eq!(out.rejected, 1);
    assert_eq!(rig.ctrl.used(0), (0, 0));
    assert_eq!(rig.ctrl.used(1), (1, size_of::<IdentifyReply>() as u32));
}

/// A control pass over a ring that must be found broken: nothing is
/// answered, nothing is counted as a protocol error.
fn assert_broken(rig: &mut Rig, dev: &mut Device, want: fn(&QueueError) -> bool) -> RingBroken {
    let before = dev.counters();
    let broken = process_control_queue(&mut rig.ctrl_q, rig.mem, dev).unwrap_err();
    assert!(want(&broken.error), "{broken:?}");
    assert_eq!(broken.outcome.completed, 0, "{broken:?}");
    assert_eq!(rig.ctrl.used_idx(), 0, "a broken ring gets no used entry");
    assert!(untouched(rig.mem, REPLY, 64), "reply buffer written");
    let after = dev.counters();
    assert_eq!(after.replies(), before.replies(), "a command executed");
    assert_eq!(after.protocol_errors, before.protocol_errors);
    broken
}

#[test]
fn head_index_beyond_queue_breaks_the_ring() {
    let mem = memory();
    let mut rig = Rig::new(&mem);
    let (mut dev, _) = device();
    // Avail ring entry 0 names descriptor 200 in a 16-entry queue.
    rig.ctrl.push_avail(200);
    let b = assert_broken(&mut rig, &mut dev, |e| {
        matches!(
            e,
            QueueError::HeadOutOfRange {
                head: 200,
                size: 16
            }
        )
    });
    assert_eq!(
        b.to_string(),
        "available ring entry names descriptor 200, beyond the queue size 16"
    );
}

#[test]
fn runaway_avail_index_breaks_the_ring() {
    for avail in [17u16, 1000, u16::MAX] {
        let mem = memory();
        let mut rig = Rig::new(&mem);
        let (mut dev, _) = device();
        rig.put_cmd(&cmd_bytes(Command::Identify, 1));
        for i in 0..4 {
            rig.ctrl
                .add_chain(2 * i, &[(CMD, 16, false), (REPLY, 256, true)]);
        }
        rig.ctrl.set_avail_idx(avail);
        let b = assert_broken(&mut rig, &mut dev, |e| {
            matches!(
                e,
                QueueError::AvailIndex {
                    next: 0,
                    size: 16,
                    ..
                }
            )
        });
        assert!(
            b.to_string()
                .starts_with(&format!("available index {avail} is ")),
            "{b}"
        );
    }
    // Exactly a queue's worth is fine.
    let mem = memory();
    let mut rig = Rig::new(&mem);
    let (mut dev, _) = device();
    rig.put_cmd(&cmd_bytes(Command::Identify, 1));
    for i in 0..QSIZE {
        rig.ctrl.add_chain(i, &[(CMD, 16, false)]);
    }
    assert_eq!(rig.control(&mut dev).completed, u32::from(QSIZE));
}

#[test]
fn descriptor_loop_breaks_the_ring() {
    let mem = memory();
    let mut rig = Rig::new(&mem);
    let (mut dev, _) = device();
    rig.put_cmd(&cmd_bytes(Command::Identify, 1));
    // Descriptor 0 -> 1 -> 0 -> ...
    let d0 = SplitDescriptor::new(CMD, 16, VRING_DESC_F_NEXT as u16, 1);
    let d1 = SplitDescriptor::new(
        REPLY,
        64,
        (VRING_DESC_F_NEXT | VRING_DESC_F_WRITE) as u16,
        0,
    );
    rig.ctrl.mock.desc_table().store(0, d0.into()).unwrap();
    rig.ctrl.mock.desc_table().store(1, d1.into()).unwrap();
    rig.ctrl.push_avail(0);
    assert_broken(&mut rig, &mut dev, |e| {
        matches!(e, QueueError::ChainLoop { head: 0, size: 16 })
    });
}

#[test]
fn link_beyond_queue_breaks_the_ring() {
    let mem = memory();
    let mut rig = Rig::new(&mem);
    let (mut dev, _) = device();
    rig.put_cmd(&cmd_bytes(Command::Identify, 1));
    let d0 = SplitDescriptor::new(CMD, 16, VRING_DESC_F_NEXT as u16, 3);
    let d3 = SplitDescriptor::new(
        REPLY,
        64,
        (VRING_DESC_F_NEXT | VRING_DESC_F_WRITE) as u16,
        16,
    );
    rig.ctrl.mock.desc_table().store(0, d0.into()).unwrap();
    rig.ctrl.mock.desc_table().store(3, d3.into()).unwrap();
    rig.ctrl.push_avail(0);
    assert_broken(&mut rig, &mut dev, |e| {
        matches!(
            e,
            QueueError::NextOutOfRange {
                head: 0,
                index: 3,
                next: 16,
                size: 16
            }
        )
    });
}

#[test]
fn chains_before_the_break_are_answered_and_notified() {
    let mem = memory();
    let mut rig = Rig::new(&mem);
    let (mut dev, _) = device();
    rig.put_cmd(&cmd_bytes(Command::Identify, 1));
    rig.ctrl
        .add_chain(0, &[(CMD, 16, false), (REPLY, 256, true)]);
    rig.ctrl.push_avail(99);
    rig.ctrl
        .add_chain(2, &[(CMD, 16, false), (REPLY, 256, true)]);
    let b = process_control_queue(&mut rig.ctrl_q, &mem, &mut dev).unwrap_err();
    assert!(matches!(
        b.error,
        QueueError::HeadOutOfRange { head: 99, .. }
    ));
    assert_eq!(
        b.outcome,
        QueueOutcome {
            completed: 1,
            rejected: 0,
            notify: true
        }
    );
    assert_eq!(rig.ctrl.used_idx(), 1);
    assert_eq!(rig.ctrl.used(0), (0, size_of::<IdentifyReply>() as u32));
}

#[test]
fn a_loop_inside_an_indirect_table_is_a_chain_error_not_a_broken_ring() {
    let mem = memory();
    let mut rig = Rig::new(&mem);
    let (mut dev, _) = device();
    rig.put_cmd(&cmd_bytes(Command::Identify, 1));
    let table = [
        SplitDescriptor::new(CMD, 16, VRING_DESC_F_NEXT as u16, 1),
        SplitDescriptor::new(CMD, 16, VRING_DESC_F_NEXT as u16, 0),
    ];
    for (i, d) in table.iter().enumerate() {
        mem.write_obj(
            RawDescriptor::from(*d),
            GuestAddress(INDIRECT + 16 * i as u64),
        )
        .unwrap();
    }
    let head = SplitDescriptor::new(INDIRECT, 32, VRING_DESC_F_INDIRECT as u16, 0);
    rig.ctrl.mock.desc_table().store(0, head.into()).unwrap();
    rig.ctrl.push_avail(0);
    let out = rig.control(&mut dev);
    assert_eq!(out.rejected, 1);
    assert_eq!(rig.ctrl.used(0), (0, 0));
}

#[test]
fn indirect_descriptor_table_is_followed() {
    let mem = memory();
    let mut rig = Rig::new(&mem);
    let (mut dev, _) = device();
    rig.put_cmd(&cmd_bytes(Command::Identify, 0x1d));
    let table = [
        SplitDescriptor::new(CMD, 16, VRING_DESC_F_NEXT as u16, 1),
        SplitDescriptor::new(REPLY, 256, VRING_DESC_F_WRITE as u16, 0),
    ];
    for (i, d) in table.iter().enumerate() {
        mem.write_obj(
            RawDescriptor::from(*d),
            GuestAddress(INDIRECT + 16 * i as u64),
        )
        .unwrap();
    }
    let head = SplitDescriptor::new(INDIRECT, 32, VRING_DESC_F_INDIRECT as u16, 0);
    rig.ctrl.mock.desc_table().store(0, head.into()).unwrap();
    rig.ctrl.push_avail(0);
    let out = rig.control(&mut dev);
    assert_eq!(out.rejected, 0);
    assert_eq!(rig.ctrl.used(0), (0, size_of::<IdentifyReply>() as u32));
    let id: IdentifyReply = read(&mem, REPLY);
    assert_eq!(id.hdr.tag, 0x1d);
    assert_eq!(id.hdr.status, 0);
}

#[test]
fn bad_event_buffers_are_rejected_and_event_kept() {
    let mem = memory();
    let mut rig = Rig::new(&mem);
    let (mut dev, _) = device();
    rig.put_cmd(&cmd_bytes(Command::Ping { cookie: 42 }, 1));
    rig.ctrl
        .add_chain(0, &[(CMD, 24, false), (REPLY, 64, true)]);
    rig.control(&mut dev);

    rig.event.add_chain(0, &[(EVBUF, 32, true)]);
    rig.event
        .add_chain(1, &[(CMD, 8, false), (EVBUF + 0x100, 64, true)]);
    rig.event.add_chain(3, &[(OUTSIDE, 64, true)]);
    rig.event
        .add_chain(4, &[(EVBUF + 0x200, 40, true), (EVBUF + 0x300, 24, true)]);
    let out = rig.events(&mut dev);
    assert_eq!(out.completed, 4);
    assert_eq!(out.rejected, 3);
    assert_eq!(rig.event.used(0), (0, 0));
    assert_eq!(rig.event.used(1), (1, 0));
    assert_eq!(rig.event.used(2), (3, 0));
    assert_eq!(rig.event.used(3), (4, 64));
    assert!(untouched(&mem, EVBUF, 32));
    assert!(untouched(&mem, EVBUF + 0x100, 64));
    // The record arrives split over the two descriptors.
    let mut joined = [0u8; 64];
    mem.read_slice(&mut joined[..40], GuestAddress(EVBUF + 0x200))
        .unwrap();
    mem.read_slice(&mut joined[40..], GuestAddress(EVBUF + 0x300))
        .unwrap();
    let rec = EventRecord::parse(&joined).unwrap();
    assert_eq!(
        Event::from_record(&rec).unwrap(),
        Event::Ping { cookie: 42 }
    );
    assert_eq!(dev.counters().protocol_errors, 3);
    assert_eq!(dev.pending_events(), 0);
}

#[test]
fn fifo_overflow_is_reported_through_the_queue() {
    let mem = memory();
    let mut rig = Rig::new(&mem);
    let (mut dev, _) = device();
    let ping = cmd_bytes(Command::Ping { cookie: 0 }, 0);
    let total = EVENT_FIFO_DEPTH + 3;
    for _ in 0..total {
        assert_eq!(dev.handle_command(&ping, 64).status(), Some(Status::Ok));
    }
    // Drain with one buffer at a time, reusing descriptor slots.
    let mut seqs = Vec::new();
    let mut lost = None;
    for i in 0..(EVENT_FIFO_DEPTH + 1) {
        rig.event
            .add_chain((i % QSIZE as usize) as u16, &[(EVBUF, 64, true)]);
        assert_eq!(rig.events(&mut dev).completed, 1);
        let rec: EventRecord = read(&mem, EVBUF);
        seqs.push(rec.seq);
        if let Ok(e @ Event::EventsLost { .. }) = Event::from_record(&rec) {
            lost = Some(e);
        }
    }
    assert_eq!(
        lost,
        Some(Event::EventsLost {
            count: 3,
            first_seq: EVENT_FIFO_DEPTH as u64 + 1
        })
    );
    assert!(seqs.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(*seqs.last().unwrap(), total as u64 + 1);
    assert_eq!(dev.pending_events(), 0);
}

#[test]
fn event_idx_suppresses_and_requests_notifications() {
    let mem = memory();
    let mut rig = Rig::new(&mem);
    rig.ctrl_q.set_event_idx(true);
    let (mut dev, _) = device();
    rig.put_cmd(&cmd_bytes(Command::Identify, 1));

    // The driver asks for an interrupt only after used index 3.
    rig.ctrl.set_used_event(2);
    rig.ctrl
        .add_chain(0, &[(CMD, 16, false), (REPLY, 256, true)]);
    let out = rig.control(&mut dev);
    assert_eq!(out.completed, 1);
    assert!(!out.notify, "used_event 2 not crossed by used idx 1");
    rig.ctrl
        .add_chain(2, &[(CMD, 16, false), (REPLY, 256, true)]);
    assert!(!rig.control(&mut dev).notify, "used idx 2");
    rig.ctrl
        .add_chain(4, &[(CMD, 16, false), (REPLY, 256, true)]);
    assert!(
        rig.control(&mut dev).notify,
        "used idx 3 crosses used_event 2"
    );

    // The device asks to be kicked for the next chain: avail_event (after
    // the used ring) equals the next avail index.
    assert_eq!(rig.ctrl.avail_event(), 3);
}

#[test]
fn without_event_idx_every_completion_notifies() {
    let mem = memory();
    let mut rig = Rig::new(&mem);
    let (mut dev, _) = device();
    rig.ctrl.set_used_event(100);
    rig.put_cmd(&cmd_bytes(Command::Identify, 1));
    rig.ctrl
        .add_chain(0, &[(CMD, 16, false), (REPLY, 256, true)]);
    assert!(rig.control(&mut dev).notify);
}

#[test]
fn event_queue_asks_for_a_kick_while_events_wait() {
    let mem = memory();
    let mut rig = Rig::new(&mem);
    rig.event_q.set_event_idx(true);
    let (mut dev, _) = device();
    let ping = cmd_bytes(Command::Ping { cookie: 1 }, 0);
    dev.handle_command(&ping, 64);
    dev.handle_command(&ping, 64);

    // No buffer: nothing used, and the device asks to be kicked when the
    // driver posts buffer 0.
    assert_eq!(rig.events(&mut dev).completed, 0);
    assert_eq!(rig.event.avail_event(), 0);

    rig.event.add_chain(0, &[(EVBUF, 64, true)]);
    let out = rig.events(&mut dev);
    assert_eq!(out.completed, 1);
    assert!(
        out.notify,
        "used_event 0 is crossed by the first completion"
    );
    // One event still waits: kick me for the next buffer.
    assert_eq!(rig.event.avail_event(), 1);
    assert_eq!(dev.pending_events(), 1);
}

#[test]
fn random_chains_never_panic_and_are_always_completed() {
    let mem = memory();
    let mut rig = Rig::new(&mem);
    let (mut dev, _) = device();
    let mut rng = Rng::from_state(0x0123_4567_89ab_cdef);
    let valid = [
        cmd_bytes(Command::Identify, 1),
        cmd_bytes(Command::Ping { cookie: 2 }, 2),
    ];
    const N: u16 = 3000;
    let mut answered = 0u64;
    for i in 0..N {
        // Command area: a valid command, or random bytes.
        match rng.below(3) {
            0 => rig.put_cmd(&valid[0]),
            1 => rig.put_cmd(&valid[1]),
            _ => {
                let junk: Vec<u8> = (0..32).map(|_| rng.next_u64() as u8).collect();
                rig.put_cmd(&junk);
            }
        }
        let parts: Vec<Part> = (0..1 + rng.below(4))
            .map(|_| {
                let addr = match rng.below(6) {
                    0 => CMD,
                    1 => REPLY,
                    2 => MEM_SIZE - rng.below(64),
                    3 => OUTSIDE + rng.below(0x1000),
                    4 => u64::MAX - rng.below(64),
                    _ => rng.below(MEM_SIZE),
                };
                let len = match rng.below(6) {
                    0 => 0,
                    1 => 16,
                    2 => 24,
                    3 => u32::MAX - rng.below(16) as u32,
                    _ => rng.below(0x2000) as u32,
                };
                (addr, len, rng.below(2) == 0)
            })
            .collect();
        // Reuse descriptor slots 0..4 for every chain.
        rig.ctrl.add_chain(0, &parts);
        let before = dev.counters();
        let out = rig.control(&mut dev);
        assert_eq!(out.completed, 1, "chain {i}: {parts:x?}");
        let (id, len) = rig.ctrl.used(i);
        assert_eq!(id, 0);
        let after = dev.counters();
        if out.rejected == 1 {
            assert_eq!(len, 0, "chain {i}");
            assert_eq!(after.protocol_errors, before.protocol_errors + 1);
            assert_eq!(after.replies(), before.replies());
        } else {
            answered += 1;
            assert!(len >= 16, "chain {i}: used length {len}");
            assert_eq!(after.replies(), before.replies() + 1);
        }
        // Event buffers come and go at random too (never more posted than
        // the ring holds).
        let posted = rig.event.avail_idx.wrapping_sub(rig.event.used_idx());
        if rng.below(4) == 0 && posted < QSIZE {
            let ev = [
                (EVBUF, 64, true),
                (
                    rng.below(MEM_SIZE),
                    rng.below(128) as u32,
                    rng.below(2) == 0,
                ),
            ];
            let take = 1 + rng.below(2) as usize;
            rig.event.add_chain((i % 8) * 2, &ev[..take]);
            rig.events(&mut dev);
        }
    }
    assert!(answered > 100, "only {answered} chains were answerable");
    assert!(dev.counters().protocol_errors > 100);
}
