//! Driver-side helpers for programming the GPU from a test, a benchmark or
//! a host-side tool: they do in guest memory what a driver does, and show
//! how (see `docs/hardware.md` for the rules they follow).
//!
//! * [`PhysAlloc`] hands out guest-physical memory (page-aligned bump
//!   allocation).
//! * [`PageTables`] builds a context's four-level page tables: map 4 KiB
//!   or 2 MiB pages, unmap, find the address of any entry (to corrupt it on
//!   purpose), translate in software.
//! * [`PacketWriter`] writes packets into a ring (wrapping, tracking the
//!   write pointer to publish with `DOORBELL`) or into a command buffer for
//!   `INDIRECT`, for either generation, padding gen-2 copy-engine packets
//!   to 64 bytes with `NOP`s.
//! * [`Driver`] sends commands and receives events over any
//!   [`Transport`] — [`InProcess`] drives a [`Device`] directly; the
//!   integration tests plug in real virtqueues over vhost-user — and sets
//!   up contexts, rings and buffers the way a kernel driver would.
//!
//! Guest memory is a `vm_memory::GuestMemoryMmap`. The page tables are in
//! `tables.rs`, the packet writer in `packets.rs`, the [`Driver`] and its
//! transports in `driver.rs`.
//!
//! # Example: one fence
//!
//! ```
//! use std::time::Duration;
//! use vgpu_device::config::{DeviceConfig, Generation};
//! use vgpu_device::testkit::{Driver, InProcess, PhysAlloc};
//! use vgpu_hwif::event::Event;
//! use vgpu_hwif::mmu::{PTE_READ, PTE_WRITE};
//! use vgpu_hwif::packet::Packet;
//! use vgpu_hwif::proto::engine;
//! use vm_memory::{GuestAddress, GuestMemoryMmap};
//!
//! let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 8 << 20)]).unwrap();
//! let dev = InProcess::new(DeviceConfig::new(Generation::Gen2, 4).unwrap(), &mem);
//! let mut drv = Driver::new(dev, mem, PhysAlloc::new(0x10_0000, 7 << 20)).unwrap();
//! let mut ctx = drv.context(1, 1, 0).unwrap();
//! drv.ring(&mut ctx, engine::COPY).unwrap();
//! drv.buffer(&mut ctx, 0x20_0000, 4096, PTE_READ | PTE_WRITE).unwrap();
//! drv.submit(&mut ctx, engine::COPY, &[Packet::Fence { va: 0x20_0000, seqno: 1, flags: 0 }])
//!     .unwrap();
//! let ev = drv.event(Duration::from_secs(5)).unwrap();
//! assert_eq!(ev, Event::Fence { ctx_id: 1, engine: 0, seqno: 1, va: 0x20_0000 });
//! ```
//!
//! [`Device`]: crate::core::Device

use std::time::Duration;

use vgpu_hwif::proto::Status;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

mod driver;
mod packets;
mod tables;

pub use driver::{
    ring_va, status_va, Driver, GpuContext, InProcess, RingHandle, Transport, RING_SIZE,
};
pub use packets::PacketWriter;
pub use tables::PageTables;

/// Errors of the helpers.
#[derive(Debug, thiserror::Error)]
pub enum KitError {
    /// The allocator's range is used up.
    #[error("out of guest memory: {0:#x} bytes requested")]
    OutOfMemory(u64),
    /// Guest memory could not be written or read.
    #[error("guest memory: {0}")]
    Memory(#[from] vm_memory::GuestMemoryError),
    /// A command buffer is full.
    #[error("command buffer full")]
    BufferFull,
    /// A huge mapping would replace a level-0 table, or a 4 KiB one would
    /// go inside a huge page.
    #[error("mapping conflict at {0:#x}")]
    Conflict(u64),
    /// The device answered a command with this status.
    #[error("command failed: {}", .0.name())]
    Status(Status),
    /// The reply could not be parsed.
    #[error("malformed reply ({0} bytes)")]
    BadReply(usize),
    /// No event arrived in time.
    #[error("no event within {0:?}")]
    Timeout(Duration),
    /// An event record could not be decoded.
    #[error("undecodable event record kind {0}")]
    BadEvent(u32),
    /// A firmware image did not boot.
    #[error("firmware {}: error {error}", vgpu_hwif::firmware::fw_state::name(*.state))]
    Firmware {
        /// The boot state it ended in.
        state: u32,
        /// Its error code.
        error: u32,
    },
}

/// A bump allocator of guest-physical memory.
#[derive(Debug, Clone)]
pub struct PhysAlloc {
    next: u64,
    end: u64,
}

impl PhysAlloc {
    /// Allocates from `base..base + size`.
    pub fn new(base: u64, size: u64) -> Self {
        PhysAlloc {
            next: base,
            end: base + size,
        }
    }

    /// `size` bytes aligned to `align` (a power of two).
    pub fn alloc(&mut self, size: u64, align: u64) -> Result<u64, KitError> {
        let at = (self.next + align - 1) & !(align - 1);
        if at + size > self.end {
            return Err(KitError::OutOfMemory(size));
        }
        self.next = at + size;
        Ok(at)
    }

    /// One zeroed 4 KiB page.
    pub fn page(&mut self, mem: &GuestMemoryMmap) -> Result<u64, KitError> {
        let pa = self.alloc(4096, 4096)?;
        mem.write_slice(&[0u8; 4096], GuestAddress(pa))?;
        Ok(pa)
    }
}

/// Reads a 64-bit little-endian value from guest memory.
pub fn read_u64(mem: &GuestMemoryMmap, pa: u64) -> Result<u64, KitError> {
    Ok(u64::from_le(mem.read_obj(GuestAddress(pa))?))
}

/// Writes a 64-bit little-endian value into guest memory.
pub fn write_u64(mem: &GuestMemoryMmap, pa: u64, v: u64) -> Result<(), KitError> {
    Ok(mem.write_obj(v.to_le(), GuestAddress(pa))?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use vgpu_hwif::mmu::{Pte, PTE_READ, PTE_WRITE};
    use vgpu_hwif::packet::{decode_header, Packet, OP_COPY};

    fn mem() -> GuestMemoryMmap {
        GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x80_0000)]).unwrap()
    }

    #[test]
    fn page_tables_translate_what_they_map() {
        let m = mem();
        let mut pt = PageTables::new(&m, PhysAlloc::new(0x1000, 0x10_0000)).unwrap();
        pt.map_4k(&m, 0x7f_0000_1000, 0x20_3000, PTE_READ).unwrap();
        pt.map_2m(&m, 0x40_0000, 0x60_0000, PTE_READ | PTE_WRITE)
            .unwrap();
        assert_eq!(pt.translate(&m, 0x7f_0000_1234), Some(0x20_3234));
        assert_eq!(pt.translate(&m, 0x45_6789), Some(0x65_6789));
        assert_eq!(pt.translate(&m, 0x7f_0000_2000), None);
        assert!(matches!(
            pt.map_4k(&m, 0x40_1000, 0, PTE_READ),
            Err(KitError::Conflict(_))
        ));
        pt.unmap(&m, 0x40_0000).unwrap();
        assert_eq!(pt.translate(&m, 0x45_6789), None);
        let slot = pt.entry_addr(0x7f_0000_1000, 0).unwrap();
        assert_eq!(
            Pte::from_bits(read_u64(&m, slot).unwrap()).address(),
            0x20_3000
        );
    }

    #[test]
    fn ring_writer_wraps_and_pads_gen2_copies() {
        let m = mem();
        let mut w = PacketWriter::ring(0x1_0000, 0x100_0000, 4096, 2);
        w.set_wptr(4096 - 8);
        let va = w
            .packet(
                &m,
                &Packet::Copy {
                    src: 1,
                    dst: 2,
                    size: 3,
                },
            )
            .unwrap();
        // 8 bytes of NOP to the ring's end, then the packet at offset 0.
        assert_eq!(va, 0x100_0000);
        assert_eq!(w.wptr(), 4096 + 28);
        let hdr: u32 = m.read_obj(GuestAddress(0x1_0000)).unwrap();
        assert_eq!(decode_header(2, hdr).unwrap().opcode, OP_COPY);
        let nop: u32 = m.read_obj(GuestAddress(0x1_0000 + 4088)).unwrap();
        assert_eq!(decode_header(2, nop).unwrap().words, 2);
        let mut b = PacketWriter::buffer(0x2_0000, 0x200_0000, 8, 1);
        assert!(b.nop(&m, 2).is_ok());
        assert!(matches!(b.nop(&m, 1), Err(KitError::BufferFull)));
    }
}
