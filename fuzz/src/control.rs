//! `control`: sequences of control commands through hwif's decoder and
//! the device's control processor.
//!
//! Input: records `[len: u8][room: u8][len bytes]`; `room` picks the
//! reply buffer's size (a small one, or the largest reply). Every record
//! is decoded by `Command::decode` — a command that decodes re-encodes to
//! the same bytes — and executed by a fresh device with 1 MiB of guest
//! memory, whose engines run whatever rings the commands create.

use vgpu_device::config::{Boot, DeviceConfig, Generation};
use vgpu_device::core::clock::ManualClock;
use vgpu_device::core::control::{MAX_REPLY_SIZE, REPLY_HEADER_SIZE};
use vgpu_device::core::mmu::Mem;
use vgpu_device::core::Device;
use vgpu_hwif::pod::Pod;
use vgpu_hwif::proto::{Command, ReplyHeader, MAX_COMMAND_SIZE};
use vm_memory::{GuestAddress, GuestMemoryAtomic};

pub fn run(data: &[u8]) {
    let clock = ManualClock::new(1);
    let mut dev = Device::with_clock(
        // Running at once: the inputs reach every command (the boot
        // commands still answer; a reset boots the image again).
        DeviceConfig::new(Generation::Gen2, 1)
            .expect("valid configuration")
            .with_boot(Boot::Preloaded),
        Box::new(clock.clone()),
    );
    let mem = Mem::from_ranges(&[(GuestAddress(0), 1 << 20)]).expect("guest memory");
    dev.set_memory(GuestMemoryAtomic::new(mem));
    let mut rest = data;
    while let [len, room, tail @ ..] = rest {
        let n = usize::from(*len).min(tail.len());
        let (bytes, next) = tail.split_at(n);
        rest = next;
        let room = if room & 0x80 != 0 {
            REPLY_HEADER_SIZE + usize::from(room & 0x3f)
        } else {
            MAX_REPLY_SIZE
        };
        check_decode(bytes);
        let reply = dev.handle_command(bytes, room);
        let hdr = ReplyHeader::read_from(reply.as_bytes()).expect("every reply has a header");
        assert!(reply.len() >= REPLY_HEADER_SIZE && reply.len() <= MAX_REPLY_SIZE);
        assert!(
            reply.len() <= room.max(REPLY_HEADER_SIZE),
            "reply of {} bytes for {room}",
            reply.len()
        );
        if let Some(h) = vgpu_hwif::proto::CommandHeader::read_from(bytes) {
            assert_eq!((hdr.opcode, hdr.tag), (h.opcode, h.tag), "the reply echoes");
        }
        clock.advance(1_000);
        while dev.next_event().is_some() {
            dev.event_delivered();
        }
    }
}

/// A command that decodes re-encodes to exactly its bytes.
fn check_decode(bytes: &[u8]) {
    let (hdr, cmd) = Command::decode(bytes);
    if let (Some(h), Ok(cmd)) = (hdr, cmd) {
        let mut out = [0u8; MAX_COMMAND_SIZE];
        let n = cmd
            .encode(h.tag, &mut out)
            .expect("a decoded command encodes");
        assert_eq!(&out[..n], bytes, "{cmd:?}");
    }
}
