//! The numbers of the interface: the transport's queues and ids, the
//! protocol version, and the device's limits that commands and replies are
//! checked against.

/// Virtqueue index of the control queue.
pub const QUEUE_CONTROL: u16 = 0;
/// Virtqueue index of the event queue.
pub const QUEUE_EVENT: u16 = 1;
/// Number of virtqueues.
pub const NUM_QUEUES: usize = 2;
/// Largest queue size the device accepts for either queue.
pub const MAX_QUEUE_SIZE: u16 = 1024;

/// The virtio device id (virtio-gpu).
pub const VIRTIO_DEVICE_ID: u32 = 16;
/// PCI vendor id of virtio devices.
pub const PCI_VENDOR_ID: u16 = 0x1af4;
/// PCI device id of a modern virtio-gpu function (0x1040 + 16).
pub const PCI_DEVICE_ID: u16 = 0x1050;

/// Largest command the device accepts, in bytes.
pub const MAX_COMMAND_SIZE: usize = 4096;

/// `"VGPU"` in little-endian: the first field of the identify data.
pub const IDENTIFY_MAGIC: u32 = u32::from_le_bytes(*b"VGPU");
/// Protocol major version: incompatible changes bump it.
pub const PROTOCOL_MAJOR: u16 = 0;
/// Protocol minor version: compatible additions bump it.
pub const PROTOCOL_MINOR: u16 = 2;
/// `(major << 16) | minor`.
pub const PROTOCOL_VERSION: u32 = ((PROTOCOL_MAJOR as u32) << 16) | PROTOCOL_MINOR as u32;

/// The widest GPU virtual address of any generation, in bits. A device
/// reports its own width in [`super::reply::IdentifyReply::va_bits`]
/// ([`super::mmu::va_bits`]: 40 bits on gen 1, 48 on gen 2).
pub const VA_BITS: u32 = 48;
/// 4 KiB pages.
pub const PAGE_SIZE_4K: u64 = 1 << 12;
/// 2 MiB pages.
pub const PAGE_SIZE_2M: u64 = 1 << 21;
/// Number of GPU contexts the device supports.
pub const MAX_CONTEXTS: u32 = 64;
/// Smallest ring buffer, in bytes (a power of two).
pub const MIN_RING_SIZE: u32 = 4096;
/// Largest ring buffer, in bytes (a power of two).
pub const MAX_RING_SIZE: u32 = 1 << 20;

/// Hardware generations (`vgpu-device --gen N`).
pub const GENERATIONS: [u32; 2] = [1, 2];

/// Engines. Bit `i` of [`super::reply::IdentifyReply::engine_mask`] set: engine `i` is
/// present.
pub mod engine {
    /// Copy / DMA engine: `COPY`, `COPY_2D`, `FILL` and the common packets.
    pub const COPY: u32 = 0;
    /// Compute engine: `DISPATCH` and the common packets.
    pub const COMPUTE: u32 = 1;
    /// Number of engines.
    pub const COUNT: u32 = 2;
    /// "Every engine" / "the whole device" in reset events.
    pub const ALL: u32 = 0xffff_ffff;
}

/// `IDENTIFY` feature: the driver sanitizer is on (some check runs; the
/// device posts `SANITIZER` events).
pub const FEATURE_SANITIZER: u32 = 1 << 0;
/// `IDENTIFY` feature: the sanitizer checks DMA ownership or page tables;
/// a driver that wants them checked declares the pages it owns with
/// `SAN_MEM` (its page tables with `SAN_MEM_OWN_TABLES`).
pub const FEATURE_SAN_DMA: u32 = 1 << 1;
/// `IDENTIFY.features` bit: the device has VRAM (`vram_size > 0`) and
/// answers `MEMORY_LAYOUT` ([`super::vram`]).
pub const FEATURE_VRAM: u32 = 1 << 2;
/// `IDENTIFY` feature: the running firmware enables user-mode queues
/// (`DOORBELL_WATCH`, `DOORBELL_KICK`; without it they answer
/// `UNSUPPORTED`).
pub const FEATURE_USER_QUEUES: u32 = 1 << 3;
/// `IDENTIFY` feature: the running firmware time-slices an engine between
/// its contexts (without it a ring keeps its engine until it runs out of
/// work, blocks or stops).
pub const FEATURE_PREEMPTION: u32 = 1 << 4;
/// `IDENTIFY` feature: the firmware runs (the device left its boot state).
pub const FEATURE_FIRMWARE_RUNNING: u32 = 1 << 5;
/// `IDENTIFY` feature: the device has power states (`POWER_SET`).
pub const FEATURE_POWER_STATES: u32 = 1 << 6;
/// `IDENTIFY` feature: the device is a virtual function of a partitioned
/// GPU (`function` is its number): it sees its share of contexts and its
/// VRAM window; power states and the firmware's crash log are the host's
/// (docs/hardware.md section 17).
pub const FEATURE_VIRTUAL_FUNCTION: u32 = 1 << 7;

/// Ranges one `SAN_MEM` command carries (the command fits the 256 bytes of
/// a control slot's command area).
pub const SAN_MEM_RANGES: usize = 13;

/// "No context" in replies and events.
pub const CTX_NONE: u32 = 0xffff_ffff;

/// Entries of the device's table of retired pages.
pub const RAS_TABLE_SIZE: u32 = 256;
/// Largest chunk one `CAPTURE_READ` copies.
pub const CAPTURE_READ_MAX: u32 = 1 << 20;

/// Entries one `RAS_QUERY` reply carries.
pub const RAS_QUERY_PAGES: usize = 16;
