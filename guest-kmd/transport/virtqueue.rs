// SPDX-License-Identifier: GPL-2.0

//! Split virtqueues (virtio 1.x, 2.7) in coherent DMA memory.
//!
//! A queue of `size` entries (a power of two) is three separately allocated
//! areas, each handed to the device by its DMA address:
//!
//! * descriptor table: `size` × 16 bytes (`addr`, `len`, `flags`, `next`);
//! * driver (available) ring: `flags`, `idx`, `ring[size]`, `used_event`,
//!   all 16-bit;
//! * device (used) ring: `flags`, `idx` (16-bit each), `ring[size]` of
//!   (`id`, `len`) 32-bit pairs, `avail_event`.
//!
//! All fields are little-endian. The memory is shared with a device that
//! may be buggy or hostile, so it is only ever accessed with single volatile
//! reads and writes of plain integers (`dma_read!`/`dma_write!`); every value
//! read from the device is validated before use.
//!
//! Ordering: ring entries are written before the `idx` that publishes them
//! (`smp_wmb`), and the used ring's `idx` is read before the entries it
//! covers (`smp_rmb`). The device is another agent on a coherent system, so
//! the SMP barriers are the right strength (as with the kernel's
//! `weak_barriers` virtio rings).

use kernel::{
    device::{
        Bound,
        Device, //
    },
    dma::Coherent,
    dma_read, dma_write,
    prelude::*,
    sync::barrier::{
        smp_rmb,
        smp_wmb, //
    },
    transmute::{
        AsBytes,
        FromBytes, //
    },
};

/// Descriptor flag: the chain continues with `next`.
pub(crate) const DESC_F_NEXT: u16 = 1;
/// Descriptor flag: the buffer is device-writable.
pub(crate) const DESC_F_WRITE: u16 = 2;

/// One descriptor, as laid out in the descriptor table.
#[repr(C)]
#[derive(Clone, Copy)]
struct Desc {
    addr: u64,
    len: u32,
    flags: u16,
    next: u16,
}

const _: () = assert!(core::mem::size_of::<Desc>() == 16);

// SAFETY: `Desc` is `repr(C)` and made of integers only, without padding (the
// size assertion above), so all of its bytes are initialised.
unsafe impl AsBytes for Desc {}
// SAFETY: `Desc` is made of integers only: every bit pattern is a valid value.
unsafe impl FromBytes for Desc {}

/// One used-ring entry: which chain the device returned and how many bytes it
/// wrote into it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct UsedElem {
    /// Head descriptor index of the chain (unvalidated).
    pub(crate) id: u32,
    /// Bytes written by the device (unvalidated).
    pub(crate) len: u32,
}

/// A descriptor as the driver wants it written.
pub(crate) struct DescSpec {
    /// DMA address of the buffer.
    pub(crate) addr: u64,
    /// Buffer length in bytes.
    pub(crate) len: u32,
    /// `DESC_F_*` flags.
    pub(crate) flags: u16,
    /// Next descriptor of the chain (with [`DESC_F_NEXT`]).
    pub(crate) next: u16,
}

/// The device returned something the driver never gave it, or more entries
/// than were outstanding: the ring can no longer be trusted.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RingCorrupt;

impl From<RingCorrupt> for Error {
    fn from(_: RingCorrupt) -> Error {
        crate::errno::eproto()
    }
}

/// A split virtqueue owned by the driver.
pub(crate) struct SplitQueue {
    size: u16,
    desc: Coherent<[Desc]>,
    /// `flags`, `idx`, `ring[size]`, `used_event`.
    avail: Coherent<[u16]>,
    /// Word 0: `flags | idx << 16`; words `1 + 2i`, `2 + 2i`: entry `i`;
    /// word `1 + 2 * size`: `avail_event`.
    used: Coherent<[u32]>,
    /// The driver's next available index (published with [`Self::publish`]).
    next_avail: u16,
    /// The next used index the driver has not consumed yet.
    last_used: u16,
    /// Chains made available and not yet returned by the device.
    outstanding: u16,
}

impl SplitQueue {
    /// Allocates a zeroed queue of `size` entries (a power of two).
    pub(crate) fn new(dev: &Device<Bound>, size: u16) -> Result<Self> {
        if size == 0 || !size.is_power_of_two() {
            return Err(EINVAL);
        }
        let n = usize::from(size);
        Ok(SplitQueue {
            size,
            desc: Coherent::zeroed_slice(dev, n, GFP_KERNEL)?,
            avail: Coherent::zeroed_slice(dev, n + 3, GFP_KERNEL)?,
            used: Coherent::zeroed_slice(dev, 2 * n + 2, GFP_KERNEL)?,
            next_avail: 0,
            last_used: 0,
            outstanding: 0,
        })
    }

    /// Number of entries.
    pub(crate) fn size(&self) -> u16 {
        self.size
    }

    /// DMA address of the descriptor table.
    pub(crate) fn desc_addr(&self) -> u64 {
        self.desc.dma_handle()
    }

    /// DMA address of the driver (available) ring.
    pub(crate) fn driver_addr(&self) -> u64 {
        self.avail.dma_handle()
    }

    /// DMA address of the device (used) ring.
    pub(crate) fn device_addr(&self) -> u64 {
        self.used.dma_handle()
    }

    /// Chains made available and not returned yet.
    pub(crate) fn outstanding(&self) -> u16 {
        self.outstanding
    }

    /// Writes descriptor `i`. The caller must own descriptor `i` (not part
    /// of an outstanding chain).
    pub(crate) fn set_desc(&self, i: u16, d: DescSpec) -> Result {
        let raw = Desc {
            addr: d.addr.to_le(),
            len: d.len.to_le(),
            flags: d.flags.to_le(),
            next: d.next.to_le(),
        };
        dma_write!(self.desc, [try: usize::from(i)], raw);
        Ok(())
    }

    /// Makes the chain starting at descriptor `head` available. It becomes
    /// visible to the device with the next [`Self::publish`].
    pub(crate) fn push(&mut self, head: u16) -> Result {
        if head >= self.size || self.outstanding >= self.size {
            return Err(EINVAL);
        }
        let slot = usize::from(self.next_avail & (self.size - 1));
        dma_write!(self.avail, [try: 2 + slot], head.to_le());
        self.next_avail = self.next_avail.wrapping_add(1);
        self.outstanding += 1;
        Ok(())
    }

    /// Publishes every chain pushed so far by writing the available index.
    /// The caller then notifies the device.
    pub(crate) fn publish(&self) -> Result {
        // Descriptors and ring entries must be visible before the index.
        smp_wmb();
        dma_write!(self.avail, [try: 1], self.next_avail.to_le());
        Ok(())
    }

    /// Takes the next entry the device has returned, if any.
    ///
    /// Fails with [`RingCorrupt`] if the device's used index claims more
    /// returned chains than are outstanding; the ring is unusable then.
    pub(crate) fn pop_used(&mut self) -> Result<Option<UsedElem>, RingCorrupt> {
        let word = u32::from_le(self.used_word(0)?);
        let used_idx = (word >> 16) as u16;
        let pending = used_idx.wrapping_sub(self.last_used);
        if pending == 0 {
            return Ok(None);
        }
        if pending > self.outstanding {
            return Err(RingCorrupt);
        }
        // Read the entries only after the index that covers them.
        smp_rmb();
        let slot = usize::from(self.last_used & (self.size - 1));
        let id = u32::from_le(self.used_word(1 + 2 * slot)?);
        let len = u32::from_le(self.used_word(2 + 2 * slot)?);
        self.last_used = self.last_used.wrapping_add(1);
        self.outstanding -= 1;
        Ok(Some(UsedElem { id, len }))
    }

    fn used_word(&self, i: usize) -> Result<u32, RingCorrupt> {
        let read = || -> Result<u32> { Ok(dma_read!(self.used, [try: i])) };
        read().map_err(|_| RingCorrupt)
    }
}

/// A device-visible byte buffer area (command, reply and event buffers).
pub(crate) struct DmaBytes {
    mem: Coherent<[u8]>,
}

impl DmaBytes {
    /// Allocates `len` zeroed bytes.
    pub(crate) fn new(dev: &Device<Bound>, len: usize) -> Result<Self> {
        Ok(DmaBytes {
            mem: Coherent::zeroed_slice(dev, len, GFP_KERNEL)?,
        })
    }

    /// DMA address of byte `off`.
    pub(crate) fn dma_addr(&self, off: usize) -> Result<u64> {
        if off >= self.mem.len() {
            return Err(EINVAL);
        }
        Ok(self.mem.dma_handle() + off as u64)
    }

    /// Copies `src` into the area at `off`.
    pub(crate) fn write(&self, off: usize, src: &[u8]) -> Result {
        for (i, b) in src.iter().enumerate() {
            dma_write!(self.mem, [try: off + i], *b);
        }
        Ok(())
    }

    /// Copies `dst.len()` bytes at `off` out of the area. The device may
    /// still write concurrently (if it misbehaves); `dst` then holds some
    /// mix of bytes, which the caller validates like any device data.
    pub(crate) fn read(&self, off: usize, dst: &mut [u8]) -> Result {
        for (i, b) in dst.iter_mut().enumerate() {
            *b = dma_read!(self.mem, [try: off + i]);
        }
        Ok(())
    }
}
