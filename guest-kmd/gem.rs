// SPDX-License-Identifier: GPL-2.0

//! Buffer objects: GEM objects backed by shmem pages.
//!
//! Pages are allocated on first use: a CPU fault through an mmap of the
//! object, a `VM_BIND` of a non-lazy object, or a GPU fault on a lazy one.
//! [`segments`] pins the pages and DMA-maps them (the shmem helper keeps the
//! mapping until the object is freed), so a mapping that holds a reference
//! on the object keeps its pages where the page tables say they are.
//!
//! GEM memory is counted twice ([`MemAccount`]): per device (every object of
//! every file) and per file (objects created through that file). An object
//! is counted from `GEM_CREATE` until it is freed, whether or not its file is
//! still open ([`MemCharge`]).
//!
//! The object's `DriverObject` implementation, which names the DRM driver
//! type, is in `drm.rs` with the driver's other associated types.

use kernel::{
    bindings,
    drm::gem::{
        self,
        BaseObject,
        IntoGEMObject, //
    },
    error::from_err_ptr,
    prelude::*,
    scatterlist::SGTable,
    sync::{
        atomic::{
            Atomic,
            Relaxed, //
        },
        Arc,
    },
    uapi,
};

/// A vgpu buffer object.
pub(crate) type Bo = gem::shmem::Object<VgpuObject>;

/// Buffer objects alive, for debugfs (leak checks).
static LIVE_OBJECTS: Atomic<i64> = Atomic::new(0);

/// Buffer objects alive.
pub(crate) fn live_objects() -> i64 {
    LIVE_OBJECTS.load(Relaxed)
}

/// Counts one live object from creation to drop.
struct LiveCount(());

impl LiveCount {
    fn new() -> LiveCount {
        LIVE_OBJECTS.add(1, Relaxed);
        LiveCount(())
    }
}

impl Drop for LiveCount {
    fn drop(&mut self) {
        LIVE_OBJECTS.add(-1, Relaxed);
    }
}

/// Bytes and number of GEM objects alive.
pub(crate) struct MemAccount {
    bytes: Atomic<u64>,
    objects: Atomic<u64>,
}

impl MemAccount {
    /// A new, empty account.
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn new() -> Result<Arc<MemAccount>> {
        Ok(Arc::new(
            MemAccount {
                bytes: Atomic::new(0),
                objects: Atomic::new(0),
            },
            GFP_KERNEL,
        )?)
    }

    /// (bytes, objects).
    pub(crate) fn get(&self) -> (u64, u64) {
        (self.bytes.load(Relaxed), self.objects.load(Relaxed))
    }
}

/// What one object is charged: held by the object from creation to free.
pub(crate) struct MemCharge {
    size: u64,
    accounts: [Arc<MemAccount>; 2],
}

impl MemCharge {
    /// Charges `size` bytes and one object to the device's and the file's
    /// accounts.
    pub(crate) fn new(size: usize, device: Arc<MemAccount>, file: Arc<MemAccount>) -> MemCharge {
        let size = size as u64;
        let accounts = [device, file];
        for a in accounts.iter() {
            a.bytes.fetch_add(size, Relaxed);
            a.objects.fetch_add(1u64, Relaxed);
        }
        MemCharge { size, accounts }
    }
}

impl Drop for MemCharge {
    fn drop(&mut self) {
        for a in self.accounts.iter() {
            a.bytes.fetch_sub(self.size, Relaxed);
            a.objects.fetch_sub(1u64, Relaxed);
        }
    }
}

/// Driver data of a buffer object.
#[pin_data]
pub(crate) struct VgpuObject {
    flags: u32,
    _live: LiveCount,
    _charge: MemCharge,
}

impl VgpuObject {
    /// The driver data of a new object (`DriverObject::new`).
    pub(crate) fn init(args: BoArgs) -> impl PinInit<Self, Error> {
        try_pin_init!(VgpuObject {
            flags: args.flags,
            _live: LiveCount::new(),
            _charge: args.charge,
        })
    }

    /// `VGPU_GEM_CREATE_LAZY`: pages are mapped on GPU faults.
    pub(crate) fn lazy(&self) -> bool {
        self.flags & uapi::VGPU_GEM_CREATE_LAZY != 0
    }
}

/// Creation arguments of a buffer object.
pub(crate) struct BoArgs {
    /// `VGPU_GEM_CREATE_*`.
    pub(crate) flags: u32,
    /// Memory accounting, from creation until the object is freed.
    pub(crate) charge: MemCharge,
}

/// A physically contiguous piece of a buffer object.
#[derive(Clone, Copy)]
pub(crate) struct Seg {
    /// Offset in the object.
    pub(crate) offset: u64,
    /// DMA (guest-physical) address.
    pub(crate) addr: u64,
    /// Bytes.
    pub(crate) len: u64,
}

/// Pins the object's pages, DMA-maps them, and returns them as contiguous
/// segments in object order.
///
/// # Errors
///
/// `ENOMEM` (no pages), `EIO` (the mapping does not cover the object), or
/// the shmem helper's errno.
pub(crate) fn segments(bo: &Bo) -> Result<KVec<Seg>> {
    let raw = bo.as_raw();
    // SAFETY: `Bo` is a shmem object: its `drm_gem_object` is the `base`
    // field of a live `drm_gem_shmem_object`.
    let shmem = unsafe { kernel::container_of!(raw, bindings::drm_gem_shmem_object, base) };
    // SAFETY: `shmem` is valid (above). The helper takes the object's
    // reservation lock itself; the table it returns is owned by the object
    // and stays valid, with its pages pinned, until the object is freed
    // (this driver never purges or evicts objects).
    let sgt = from_err_ptr(unsafe { bindings::drm_gem_shmem_get_pages_sgt(shmem) })?;
    // SAFETY: `sgt` is valid while `bo` is (above), and is not modified
    // after creation.
    let table = unsafe { SGTable::from_raw(sgt) };
    let mut segs = KVec::new();
    let mut offset = 0u64;
    for e in table.iter() {
        let len: u64 = e.dma_len();
        let addr: u64 = e.dma_address();
        match segs.last_mut() {
            Some(Seg {
                addr: a, len: l, ..
            }) if *a + *l == addr => *l += len,
            _ => segs.push(Seg { offset, addr, len }, GFP_KERNEL)?,
        }
        offset += len;
    }
    if usize::try_from(offset).ok() != Some(bo.size()) {
        pr_err!(
            "vgpu: object of {} bytes maps {} bytes\n",
            bo.size(),
            offset
        );
        return Err(EIO);
    }
    Ok(segs)
}

/// The DMA address of byte `offset` of an object, and how many bytes are
/// contiguous from there.
pub(crate) fn addr_at(segs: &[Seg], offset: u64) -> Option<(u64, u64)> {
    let i = segs.partition_point(|s| s.offset + s.len <= offset);
    let s = segs.get(i)?;
    let d = offset.checked_sub(s.offset)?;
    (d < s.len).then(|| (s.addr + d, s.len - d))
}
