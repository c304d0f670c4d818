//! `virtq`: the virtqueue layer's chain parsing, with the descriptor
//! table and available ring made of the input's bytes.
//!
//! Input: 256 bytes of descriptor table (16 descriptors), the available
//! ring's index (2 bytes) and its 16 entries (32 bytes), then the contents
//! of a 64 KiB buffer area at 0x1_0000 where descriptors may point
//! (anything else they name is outside guest memory or in the queue's own
//! pages). The same table and ring serve as the control queue and, after
//! it, the event queue (whose used rings are apart), so chains are walked
//! as commands with replies and as event buffers, with every malformation
//! a driver can write: loops, readable after writable, indirect tables,
//! addresses and lengths anywhere. The device must complete or reject
//! each chain without panicking, and report sane counts.

use virtio_queue::{Queue, QueueT};
use vm_memory::{Bytes, GuestAddress};

use vgpu_device::config::{Boot, DeviceConfig, Generation};
use vgpu_device::core::clock::ManualClock;
use vgpu_device::core::mmu::Mem;
use vgpu_device::core::Device;
use vgpu_device::virtq::{deliver_events, process_control_queue};

const QSIZE: u16 = 16;
const DESC: u64 = 0x0;
const AVAIL: u64 = 0x1000;
const CTRL_USED: u64 = 0x2000;
const EVENT_USED: u64 = 0x3000;
/// Where the buffer area starts.
pub const BUFFERS: u64 = 0x1_0000;

fn queue(used: u64) -> Queue {
    let mut q = Queue::new(QSIZE).expect("queue");
    q.set_size(QSIZE);
    q.try_set_desc_table_address(GuestAddress(DESC))
        .expect("aligned");
    q.try_set_avail_ring_address(GuestAddress(AVAIL))
        .expect("aligned");
    q.try_set_used_ring_address(GuestAddress(used))
        .expect("aligned");
    q.set_ready(true);
    q
}

pub fn run(data: &[u8]) {
    let (table, rest) = data.split_at(data.len().min(16 * usize::from(QSIZE)));
    let (avail, buffers) = rest.split_at(rest.len().min(2 + 2 * usize::from(QSIZE)));
    let mem = Mem::from_ranges(&[(GuestAddress(0), 0x2_0000)]).expect("guest memory");
    mem.write_slice(table, GuestAddress(DESC)).expect("table");
    // flags = 0, then idx and the ring entries.
    mem.write_slice(avail, GuestAddress(AVAIL + 2))
        .expect("ring");
    mem.write_slice(
        &buffers[..buffers.len().min(0x1_0000)],
        GuestAddress(BUFFERS),
    )
    .expect("buffers");
    let mut dev = Device::with_clock(
        // Running at once: the inputs reach every command (the boot
        // commands still answer; a reset boots the image again).
        DeviceConfig::new(Generation::Gen2, 1)
            .expect("valid configuration")
            .with_boot(Boot::Preloaded),
        Box::new(ManualClock::new(1)),
    );
    let mut control = queue(CTRL_USED);
    let mut events = queue(EVENT_USED);
    for _ in 0..2 {
        if let Ok(out) = process_control_queue(&mut control, &mem, &mut dev) {
            assert!(out.rejected <= out.completed);
            assert!(out.completed <= 2 * u32::from(u16::MAX));
        }
        if let Ok(out) = deliver_events(&mut events, &mem, &mut dev) {
            assert!(out.rejected <= out.completed);
        }
    }
}
