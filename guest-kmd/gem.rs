// SPDX-License-Identifier: GPL-2.0

//! Buffer objects: GEM objects backed by shmem pages.
//!
//! Pages are allocated on first use: a CPU fault through an mmap of the
//! object, a `VM_BIND` of a non-lazy object, or a GPU fault on a lazy one.
//! [`segments`] pins the pages and DMA-maps them (the shmem helper keeps the
//! mapping until the object is freed, or until unbind:
//! [`BoRegistry::unmap_all`]), so a mapping that holds a reference
//! on the object keeps its pages where the page tables say they are.
//!
//! GEM memory is counted twice ([`MemAccount`]): per device (every object of
//! every file) and per file (objects created through that file). An object
//! is counted from `GEM_CREATE` until it is freed, whether or not its file is
//! still open ([`MemCharge`]). Both accounts have limits: a `GEM_CREATE` that
//! would pass the device's fails with `ENOMEM`, one that would pass the
//! file's with `ENOSPC`, so that GPU memory runs out before the guest's
//! memory does (the OOM killer is not a GPU memory manager).
//!
//! An object placed in VRAM ([`VramPlacement`], `VGPU_GEM_CREATE_VRAM`) is
//! not charged while it is there (device memory), and is charged like any
//! other once it is evicted to system memory. It is
//! still a shmem object, whose pages are never allocated while it is in
//! VRAM: [`segments`] returns its VRAM blocks (device-physical addresses),
//! so binding it maps device memory; its CPU mapping and dma-buf export
//! are [`crate::gem_vram`]'s.
//!
//! The object's `DriverObject` implementation, which names the DRM driver
//! type, is in `drm.rs` with the driver's other associated types.

use crate::vram_mgr::VramAlloc;
use core::ptr::{
    self,
    NonNull, //
};
use kernel::{
    bindings,
    drm::gem::{
        self,
        BaseObject,
        IntoGEMObject, //
    },
    error::from_err_ptr,
    new_mutex,
    prelude::*,
    scatterlist::SGTable,
    sync::{
        aref::ARef,
        atomic::{
            Atomic,
            AtomicFlag,
            Relaxed, //
        },
        Arc,
        Mutex,
        SetOnce, //
    },
    uapi,
};

/// A vgpu buffer object.
pub(crate) type Bo = gem::shmem::Object<VgpuObject>;

/// Buffer objects alive, for debugfs (leak checks).
static LIVE_OBJECTS: Atomic<i64> = Atomic::new(0);

/// VRAM objects now evicted to system memory (see
/// [`VgpuObject::keep_evicted_charge`]).
static EVICTED_OBJECTS: Atomic<i64> = Atomic::new(0);

/// VRAM objects now evicted to system memory: a move back is worth looking
/// for only when there are some.
pub(crate) fn evicted_objects() -> i64 {
    EVICTED_OBJECTS.load(Relaxed)
}

/// The last object id handed out ([`VgpuObject::id`]).
static LAST_ID: Atomic<u64> = Atomic::new(0);

/// Of these, the objects of files (not the driver's own).
static USER_OBJECTS: Atomic<i64> = Atomic::new(0);

/// Buffer objects alive.
pub(crate) fn live_objects() -> i64 {
    LIVE_OBJECTS.load(Relaxed)
}

/// Buffer objects of files alive (0 once every file is closed and its
/// objects freed: a leak check).
pub(crate) fn user_objects() -> i64 {
    USER_OBJECTS.load(Relaxed)
}

/// Counts one live object from creation to drop (`user`: a file's).
struct LiveCount {
    user: bool,
}

impl LiveCount {
    fn new(user: bool) -> LiveCount {
        LIVE_OBJECTS.add(1, Relaxed);
        if user {
            USER_OBJECTS.add(1, Relaxed);
        }
        LiveCount { user }
    }
}

impl Drop for LiveCount {
    fn drop(&mut self) {
        LIVE_OBJECTS.add(-1, Relaxed);
        if self.user {
            USER_OBJECTS.add(-1, Relaxed);
        }
    }
}

/// Bytes and number of GEM objects alive, against a limit.
pub(crate) struct MemAccount {
    bytes: Atomic<u64>,
    objects: Atomic<u64>,
    /// Most bytes this account may hold.
    limit: u64,
    /// Objects refused at this account's limit (the device's account counts
    /// every refusal, its own and its files').
    refused: Atomic<u64>,
}

impl MemAccount {
    /// A new, empty account of at most `limit` bytes.
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn new(limit: u64) -> Result<Arc<MemAccount>> {
        Ok(Arc::new(
            MemAccount {
                bytes: Atomic::new(0),
                objects: Atomic::new(0),
                limit,
                refused: Atomic::new(0),
            },
            GFP_KERNEL,
        )?)
    }

    /// (bytes, objects).
    pub(crate) fn get(&self) -> (u64, u64) {
        (self.bytes.load(Relaxed), self.objects.load(Relaxed))
    }

    /// The limit in bytes.
    pub(crate) fn limit(&self) -> u64 {
        self.limit
    }

    /// Objects refused at the limit so far.
    pub(crate) fn refused(&self) -> u64 {
        self.refused.load(Relaxed)
    }

    /// Adds `size` bytes and one object unless that passes the limit.
    fn charge(&self, size: u64) -> bool {
        let before = self.bytes.fetch_add(size, Relaxed);
        if before
            .checked_add(size)
            .is_none_or(|after| after > self.limit)
        {
            self.bytes.fetch_sub(size, Relaxed);
            return false;
        }
        self.objects.fetch_add(1u64, Relaxed);
        true
    }

    fn uncharge(&self, size: u64) {
        self.bytes.fetch_sub(size, Relaxed);
        self.objects.fetch_sub(1u64, Relaxed);
    }
}

/// What one object is charged: held by the object from creation to free.
pub(crate) struct MemCharge {
    size: u64,
    accounts: [Arc<MemAccount>; 2],
}

impl MemCharge {
    /// Charges `size` bytes and one object to the device's and the file's
    /// accounts, within their limits.
    ///
    /// # Errors
    ///
    /// `ENOMEM` when the device's GEM memory would pass its limit
    /// (`gem_limit_mib`), `ENOSPC` when the file's would (`file_gem_limit_mib`).
    pub(crate) fn new(
        size: usize,
        device: Arc<MemAccount>,
        file: Arc<MemAccount>,
    ) -> Result<MemCharge> {
        let size = size as u64;
        if !device.charge(size) {
            device.refused.add(1u64, Relaxed);
            return Err(ENOMEM);
        }
        if !file.charge(size) {
            device.uncharge(size);
            device.refused.add(1u64, Relaxed);
            file.refused.add(1u64, Relaxed);
            return Err(ENOSPC);
        }
        Ok(MemCharge {
            size,
            accounts: [device, file],
        })
    }
}

impl Drop for MemCharge {
    fn drop(&mut self) {
        for a in self.accounts.iter() {
            a.uncharge(self.size);
        }
    }
}

/// The GEM objects of one device that are [`Bo`]s, by address.
///
/// A file's GEM handles can name objects this driver did not create as
/// [`Bo`]s: a dma-buf of another driver imported through PRIME (the shmem
/// helper makes a plain shmem object of it). Looking a
/// handle up as a `Bo` is only sound for the objects listed here
/// ([`lookup`]). An object is listed once created and unlisted when it is
/// freed, before its memory goes.
#[pin_data]
pub(crate) struct BoRegistry {
    #[pin]
    objects: Mutex<KVec<usize>>,
}

impl BoRegistry {
    /// An empty registry.
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn new() -> Result<Arc<BoRegistry>> {
        Arc::pin_init(
            pin_init!(BoRegistry {
                objects <- new_mutex!(KVec::new()),
            }),
            GFP_KERNEL,
        )
    }

    /// Lists `bo` (just created).
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn add(self: &Arc<Self>, bo: &Bo) -> Result {
        let addr = bo.as_raw() as usize;
        {
            let mut l = self.objects.lock();
            l.reserve(1, GFP_KERNEL)?;
            let i = l.partition_point(|&a| a < addr);
            // Room was reserved above.
            let _ = l.insert_within_capacity(i, addr);
        }
        let _ = bo.registered.populate((self.clone(), addr));
        Ok(())
    }

    fn remove(&self, addr: usize) {
        let mut l = self.objects.lock();
        let i = l.partition_point(|&a| a < addr);
        if l.get(i) == Some(&addr) {
            let _ = l.remove(i);
        }
    }

    fn contains(&self, addr: usize) -> bool {
        self.objects.lock().binary_search(&addr).is_ok()
    }

    /// Releases the DMA mapping of every listed object (at unbind, once
    /// the device is quiesced and reads no memory): the DMA API must see no
    /// mapping of a device whose driver is gone. Pages stay pinned until the
    /// object is freed, so CPU mmaps keep working. Ioctls are refused with
    /// `ENODEV` once the render node is unplugged, right after unbind; an
    /// ioctl that raced the unbind can map an object again, and that mapping
    /// goes when the object is freed. Returns how many mappings were
    /// released.
    ///
    /// Each object is visited holding a reference taken under the registry
    /// lock (objects already being freed are skipped: their release unmaps
    /// them), so the reservation lock is never taken under the registry's.
    pub(crate) fn unmap_all(&self) -> usize {
        let mut released = 0;
        self.visit(|bo| {
            let raw = bo.as_raw();
            // SAFETY:
            // - `raw` is a live object: `visit` holds a reference.
            // - It is one of this driver's shmem objects (only those are
            //   listed), never an import, so its `sgt` is the helper's own
            //   mapping, which `__drm_gem_shmem_free_sgt_locked` unmaps,
            //   frees and clears under the reservation lock; the pages
            //   reference it held is dropped when the object is freed, as
            //   for an object never unmapped (`drm_gem_shmem_release`).
            // - `dma_resv_lock` without an acquire context cannot fail.
            unsafe {
                let shmem = kernel::container_of!(raw, bindings::drm_gem_shmem_object, base);
                let resv = (*raw).resv;
                let _ = bindings::dma_resv_lock(resv, core::ptr::null_mut());
                if !(*shmem).sgt.is_null() {
                    bindings::__drm_gem_shmem_free_sgt_locked(shmem);
                    released += 1;
                }
                bindings::dma_resv_unlock(resv);
            }
        });
        released
    }

    /// Calls `f` on every listed object, in address order, each holding a
    /// reference taken under the registry lock (objects already being
    /// freed are skipped); `f` runs without the registry lock, so it may
    /// take the reservation lock. The reference is dropped after `f`
    /// (freeing the object unlists it, which takes the registry lock).
    pub(crate) fn visit(&self, mut f: impl FnMut(&Bo)) {
        let mut next = 0usize;
        loop {
            let found = {
                let l = self.objects.lock();
                let start = l.partition_point(|&a| a < next);
                let mut found = None;
                for &addr in l.iter().skip(start) {
                    next = addr.saturating_add(1);
                    // SAFETY: A listed address is a live object: it is
                    // unlisted (under this lock, held here) before its
                    // memory goes.
                    if unsafe { get_unless_zero(addr as *mut bindings::drm_gem_object) } {
                        found = Some(addr);
                        break;
                    }
                }
                found
            };
            let Some(addr) = found else {
                return;
            };
            // SAFETY: The registry lists `addr`: a `Bo` of this driver,
            // held alive by the reference taken above, which passes to the
            // `ARef` (dropped at the end of this iteration).
            let bo: ARef<Bo> = unsafe {
                ARef::from_raw(NonNull::from(<Bo as IntoGEMObject>::from_raw(
                    addr as *mut bindings::drm_gem_object,
                )))
            };
            f(&bo);
            drop(bo);
            if next == usize::MAX {
                return;
            }
        }
    }
}

/// Takes a reference on GEM object `obj` unless its last one is gone (it is
/// being freed). Returns whether it took one.
///
/// # Safety
///
/// `obj` points to a `drm_gem_object` whose memory stays valid for the call.
unsafe fn get_unless_zero(obj: *mut bindings::drm_gem_object) -> bool {
    // SAFETY: `obj` is valid (the caller's guarantee); the kref's counter is
    // only ever accessed atomically (refcount_t).
    let count = unsafe { Atomic::<i32>::from_ptr(&raw mut (*obj).refcount.refcount.refs.counter) };
    let mut old = count.load(Relaxed);
    loop {
        // 0: being freed; negative: saturated (refcount_t's overflow
        // state), left alone.
        let Some(new) = (old > 0).then(|| old.checked_add(1)).flatten() else {
            return false;
        };
        match count.cmpxchg(old, new, Relaxed) {
            Ok(_) => return true,
            Err(now) => old = now,
        }
    }
}

/// The [`Bo`] behind GEM handle `handle` of `file`.
///
/// # Errors
///
/// `ENOENT` (no such handle), `EINVAL` (the handle names an object that is
/// not one of this device's BOs: an imported foreign dma-buf).
pub(crate) fn lookup<F: kernel::drm::file::DriverFile>(
    file: &kernel::drm::File<F>,
    handle: u32,
    registry: &BoRegistry,
) -> Result<ARef<Bo>> {
    // `drm::File` is a transparent wrapper of `struct drm_file`.
    let raw_file = core::ptr::from_ref(file)
        .cast::<bindings::drm_file>()
        .cast_mut();
    // SAFETY: `raw_file` is an open DRM file (borrowed for the call); the
    // lookup takes a reference on the object it returns.
    let obj = unsafe { bindings::drm_gem_object_lookup(raw_file, handle) };
    if obj.is_null() {
        return Err(ENOENT);
    }
    if !registry.contains(obj as usize) {
        // SAFETY: drops the reference the lookup took.
        unsafe { bindings::drm_gem_object_put(obj) };
        return Err(EINVAL);
    }
    // SAFETY: the registry lists `obj`: it is a live `Bo` (it is listed
    // until its memory is freed, and we hold a reference, so it is not
    // being freed); the reference the lookup took passes to the `ARef`.
    Ok(unsafe { ARef::from_raw(NonNull::from(<Bo as IntoGEMObject>::from_raw(obj))) })
}

/// Driver data of a buffer object.
#[pin_data(PinnedDrop)]
pub(crate) struct VgpuObject {
    flags: u32,
    /// One of its pages was retired after an uncorrectable memory error: it
    /// is never mapped for the GPU again.
    bad: AtomicFlag,
    /// The registry listing it, and its address there.
    registered: SetOnce<(Arc<BoRegistry>, usize)>,
    _live: LiveCount,
    /// None for the driver's own objects (an address space's reservation
    /// object) and for VRAM objects, which are not guest memory.
    _charge: Option<MemCharge>,
    /// What a VRAM object is charged while it is evicted to system memory
    /// (guest memory then); taken when it moves back.
    #[pin]
    evicted_charge: Mutex<Option<MemCharge>>,
    /// The CPU asked to map it (`GEM_MMAP_OFFSET`): a VRAM object that is
    /// in system memory stays there (its CPU mapping shows those pages).
    cpu_mapped: AtomicFlag,
    /// The object's device memory while it is in VRAM (its shmem pages are
    /// then not allocated, see [`crate::gem_vram`]); `None` in system
    /// memory: created there, or evicted ([`crate::placement`]). Taken
    /// inside an address space's lock, never around one.
    #[pin]
    vram: Mutex<Option<VramPlacement>>,
    /// Created in VRAM (its object operations are [`crate::gem_vram`]'s).
    vram_object: bool,
    /// A move is in progress (one at a time per object).
    moving: AtomicFlag,
    /// Its VRAM contents were lost in a device reset: never mapped for
    /// the GPU again.
    lost: AtomicFlag,
    /// Its VRAM contents are saved in its system pages across a system
    /// sleep ([`crate::sleep`]): not lost with VRAM, restored at resume.
    saved: AtomicFlag,
    /// Times it was evicted from VRAM.
    evictions: Atomic<u32>,
    /// Its placement generation: moves so far (VRAM to system memory and
    /// back). With [`VgpuObject::id`] it tags the object's pages declared
    /// to the device's sanitizer ([`crate::sanmem::Tag::of`]).
    gen: Atomic<u32>,
    /// The driver's name for the object: unique for the module's lifetime,
    /// from 1 (debugfs `vram_mm`, sanitizer reports).
    id: u64,
    /// [`crate::file::Client::id`] of the file that created it (0: the
    /// driver's own).
    owner: u64,
}

/// Where a VRAM object is.
pub(crate) struct VramPlacement {
    /// Its blocks.
    pub(crate) alloc: VramAlloc,
    /// The CPU-physical address of VRAM offset 0 in the aperture, when the
    /// device has one (the object is CPU-mappable when it is all below the
    /// visible size: [`VramAlloc::is_visible`]).
    pub(crate) aperture: Option<u64>,
}

#[pinned_drop]
impl PinnedDrop for VgpuObject {
    fn drop(self: Pin<&mut Self>) {
        if let Some((r, addr)) = self.registered.as_ref() {
            r.remove(*addr);
        }
        if self.evicted_charge.lock().is_some() {
            EVICTED_OBJECTS.add(-1, Relaxed);
        }
    }
}

impl VgpuObject {
    /// The driver data of a new object (`DriverObject::new`).
    pub(crate) fn init(args: BoArgs) -> impl PinInit<Self, Error> {
        try_pin_init!(VgpuObject {
            flags: args.flags,
            bad: AtomicFlag::new(false),
            registered: SetOnce::new(),
            _live: LiveCount::new(args.owner != 0),
            _charge: args.charge,
            evicted_charge <- new_mutex!(None),
            cpu_mapped: AtomicFlag::new(false),
            vram_object: args.vram.is_some(),
            vram <- new_mutex!(args.vram),
            moving: AtomicFlag::new(false),
            lost: AtomicFlag::new(false),
            saved: AtomicFlag::new(false),
            evictions: Atomic::new(0),
            gen: Atomic::new(0),
            id: LAST_ID.fetch_add(1, Relaxed) + 1,
            owner: args.owner,
        })
    }

    /// The object's VRAM placement (`None`: in system memory), locked.
    pub(crate) fn vram(&self) -> kernel::sync::MutexGuard<'_, Option<VramPlacement>> {
        self.vram.lock()
    }

    /// Whether it was created for CPU access (`VGPU_GEM_CREATE_CPU_ACCESS`):
    /// a VRAM object then stays in visible VRAM.
    pub(crate) fn cpu_access(&self) -> bool {
        self.flags & uapi::VGPU_GEM_CREATE_CPU_ACCESS != 0
    }

    /// Whether it was created in VRAM.
    pub(crate) fn is_vram_object(&self) -> bool {
        self.vram_object
    }

    /// The creating file's client id (0: the driver's own object).
    pub(crate) fn owner(&self) -> u64 {
        self.owner
    }

    /// Claims the object for a move; `false` if one is in progress.
    pub(crate) fn begin_move(&self) -> bool {
        !self.moving.xchg(true, Relaxed)
    }

    /// Ends the move claimed with [`VgpuObject::begin_move`].
    pub(crate) fn end_move(&self) {
        self.moving.store(false, Relaxed);
    }

    /// Marks its contents lost (a device reset lost the VRAM it was in).
    pub(crate) fn mark_lost(&self) {
        self.lost.store(true, Relaxed);
    }

    /// Whether its contents were lost.
    pub(crate) fn is_lost(&self) -> bool {
        self.lost.load(Relaxed)
    }

    /// Marks its VRAM contents saved in its system pages (`true`, at a
    /// system suspend) or restored (`false`, at the resume).
    pub(crate) fn set_saved(&self, saved: bool) {
        self.saved.store(saved, Relaxed);
    }

    /// Whether its VRAM contents are saved in its system pages until a
    /// system resume restores them.
    pub(crate) fn is_saved(&self) -> bool {
        self.saved.load(Relaxed)
    }

    /// Keeps `charge`, the guest memory of the object evicted to system
    /// memory, until it moves back to VRAM or is freed.
    pub(crate) fn keep_evicted_charge(&self, charge: MemCharge) {
        if self.evicted_charge.lock().replace(charge).is_none() {
            EVICTED_OBJECTS.add(1, Relaxed);
        }
    }

    /// Gives back the guest memory of an evicted object that moved back to
    /// VRAM.
    pub(crate) fn drop_evicted_charge(&self) {
        if self.evicted_charge.lock().take().is_some() {
            EVICTED_OBJECTS.add(-1, Relaxed);
        }
    }

    /// Whether it is evicted now (in system memory, charged as such).
    pub(crate) fn is_evicted(&self) -> bool {
        self.evicted_charge.lock().is_some()
    }

    /// Notes that the CPU asked to map it (`GEM_MMAP_OFFSET`).
    pub(crate) fn mark_cpu_mapped(&self) {
        self.cpu_mapped.store(true, Relaxed);
    }

    /// Whether the CPU asked to map it.
    pub(crate) fn cpu_mapped(&self) -> bool {
        self.cpu_mapped.load(Relaxed)
    }

    /// Counts an eviction.
    pub(crate) fn count_eviction(&self) {
        self.evictions.add(1, Relaxed);
    }

    /// Times it was evicted.
    pub(crate) fn evictions(&self) -> u32 {
        self.evictions.load(Relaxed)
    }

    /// Starts the object's next placement generation (it is moving): pages
    /// declared from now on carry the new number.
    pub(crate) fn next_gen(&self) {
        self.gen.add(1, Relaxed);
    }

    /// The driver's name for the object (from 1).
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// Its placement generation (moves so far).
    pub(crate) fn gen(&self) -> u32 {
        self.gen.load(Relaxed)
    }

    /// `VGPU_GEM_CREATE_LAZY`: pages are mapped on GPU faults.
    pub(crate) fn lazy(&self) -> bool {
        self.flags & uapi::VGPU_GEM_CREATE_LAZY != 0
    }

    /// Marks the object bad (one of its pages was retired).
    pub(crate) fn mark_bad(&self) {
        self.bad.store(true, Relaxed);
    }

    /// Whether one of its pages was retired.
    pub(crate) fn is_bad(&self) -> bool {
        self.bad.load(Relaxed)
    }
}

/// Creation arguments of a buffer object.
pub(crate) struct BoArgs {
    /// `VGPU_GEM_CREATE_*`.
    pub(crate) flags: u32,
    /// Memory accounting, from creation until the object is freed.
    pub(crate) charge: Option<MemCharge>,
    /// Its device memory, for an object placed in VRAM.
    pub(crate) vram: Option<VramPlacement>,
    /// The creating file's [`crate::file::Client::id`] (0: the driver's).
    pub(crate) owner: u64,
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
/// `ENOMEM` (no pages), `EIO` (the mapping does not cover the object),
/// `ENODEV` (unmapped by an unbind meanwhile), or the shmem helper's errno.
pub(crate) fn segments(bo: &Bo) -> Result<KVec<Seg>> {
    if let Some(v) = bo.vram().as_ref() {
        return vram_segments(&v.alloc);
    }
    shmem_segments(bo)
}

/// [`segments`] of the object's shmem pages, wherever the object is (a
/// VRAM object's pages are allocated by this call: the destination of its
/// eviction).
///
/// # Errors
///
/// As [`segments`].
pub(crate) fn shmem_segments(bo: &Bo) -> Result<KVec<Seg>> {
    if crate::inject::should_fail(crate::inject::Point::BoPages) {
        return Err(ENOMEM);
    }
    let raw = bo.as_raw();
    // SAFETY: `Bo` is a shmem object: its `drm_gem_object` is the `base`
    // field of a live `drm_gem_shmem_object`.
    let shmem = unsafe { kernel::container_of!(raw, bindings::drm_gem_shmem_object, base) };
    // SAFETY: `shmem` is valid (above). The helper takes the object's
    // reservation lock itself and makes the mapping if there is none; the
    // table is owned by the object (this driver never purges objects) and
    // is only freed with it, at unbind ([`BoRegistry::unmap_all`]) or when
    // a VRAM object moves back to VRAM ([`release_system_pages`]), all
    // under the reservation lock.
    from_err_ptr(unsafe { bindings::drm_gem_shmem_get_pages_sgt(shmem) })?;
    // SAFETY: `raw` is valid (above); `dma_resv_lock` without an acquire
    // context cannot fail.
    let resv = unsafe { (*raw).resv };
    // SAFETY: As above.
    let _ = unsafe { bindings::dma_resv_lock(resv, core::ptr::null_mut()) };
    // SAFETY: `shmem` is valid and its `sgt` is read under the reservation
    // lock, which is held until the table has been read.
    let sgt = unsafe { (*shmem).sgt };
    let segs = if sgt.is_null() {
        // Unmapped by an unbind since the call above.
        Err(ENODEV)
    } else {
        // SAFETY: `sgt` is the object's live mapping, not freed or changed
        // while the reservation lock is held.
        read_segments(unsafe { SGTable::from_raw(sgt) })
    };
    // SAFETY: Taken above by this thread.
    unsafe { bindings::dma_resv_unlock(resv) };
    let segs = segs?;
    let mapped = segs.last().map_or(0, |s| s.offset + s.len);
    if usize::try_from(mapped).ok() != Some(bo.size()) {
        crate::pr_err_ratelimited!(
            "vgpu: object of {} bytes maps {} bytes\n",
            bo.size(),
            mapped
        );
        return Err(EIO);
    }
    Ok(segs)
}

/// `fallocate` modes (uapi `linux/falloc.h`, a stable ABI not in the
/// bindings): keep the file size, free the range's pages.
const FALLOC_FL_KEEP_SIZE: i32 = 0x01;
/// See [`FALLOC_FL_KEEP_SIZE`].
const FALLOC_FL_PUNCH_HOLE: i32 = 0x02;

/// Gives back the system pages of a VRAM object that moved back to VRAM:
/// their DMA mapping, the object's reference on them, and the pages
/// themselves (a hole punched in its shmem file, as shmem's purge does).
/// The object's GPU mappings must no longer reach them (rebound onto its
/// VRAM, the TLBs invalidated).
///
/// # Errors
///
/// `EBUSY` when something else holds the pages (a CPU mapping, a vmap, a
/// pin): they stay, mapped; the caller keeps the object where it is.
pub(crate) fn release_system_pages(bo: &Bo) -> Result {
    let raw = bo.as_raw();
    // SAFETY:
    // - `raw` is a live object (`bo` is a reference), one of this driver's
    //   shmem objects, never an import: its `drm_gem_object` is the `base`
    //   of a `drm_gem_shmem_object`, and its `sgt` is the helper's own.
    // - Its page references and mapping are only changed under its
    //   reservation lock, held here from the check to the release: the
    //   mapping's reference is the only one when the use count is 1 (a CPU
    //   mapping or vmap takes another, under the same lock; a pin too).
    // - `dma_resv_lock` without an acquire context cannot fail.
    let released = unsafe {
        let shmem = kernel::container_of!(raw, bindings::drm_gem_shmem_object, base);
        let resv = (*raw).resv;
        let _ = bindings::dma_resv_lock(resv, core::ptr::null_mut());
        let uses = ptr::read_volatile(&raw const (*shmem).pages_use_count.refs.counter);
        let pins = ptr::read_volatile(&raw const (*shmem).pages_pin_count.refs.counter);
        let vmaps = ptr::read_volatile(&raw const (*shmem).vmap_use_count.refs.counter);
        let only_the_mapping = !(*shmem).sgt.is_null() && uses == 1 && pins == 0 && vmaps == 0;
        if only_the_mapping {
            bindings::__drm_gem_shmem_free_sgt_locked(shmem);
            bindings::drm_gem_shmem_put_pages_locked(shmem);
        }
        bindings::dma_resv_unlock(resv);
        only_the_mapping
    };
    if !released {
        return Err(EBUSY);
    }
    // SAFETY: `filp` is the object's shmem file, alive with the object and
    // opened read-write by `shmem_file_setup`; punching a hole in it frees
    // the pages the object no longer references (a later eviction gets
    // fresh, zeroed ones).
    let r = unsafe {
        bindings::vfs_fallocate(
            (*raw).filp,
            FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
            0,
            bo.size() as bindings::loff_t,
        )
    };
    if r != 0 {
        // The pages stay in the file until the object is freed: memory
        // held longer, nothing wrong.
        crate::pr_warn_ratelimited!("vgpu: freeing an object's system pages: error {}\n", r);
    }
    Ok(())
}

/// Takes the system-memory page at guest-physical `pa` of a shmem object
/// out of use for good: one reference on it that is never dropped, so that
/// when the object is freed the page does not go back to the kernel's
/// allocator (as `memory_failure()` keeps a poisoned page). For retired
/// pages ([`crate::ras`]), at most `ras_max_pages` of them. Returns whether
/// the object held the page.
///
/// # Errors
///
/// `ENODEV` or `EIO` (the object's pages cannot be listed: [`segments`]),
/// `ENOMEM`, or the errno of reading the page from the object's shmem file.
pub(crate) fn keep_page_forever(bo: &Bo, pa: u64) -> Result<bool> {
    let segs = shmem_segments(bo)?;
    let Some(offset) = segs
        .iter()
        .find(|s| pa >= s.addr && pa - s.addr < s.len)
        .map(|s| s.offset + (pa - s.addr))
    else {
        return Ok(false);
    };
    let index = usize::try_from(offset / kernel::page::PAGE_SIZE as u64)?;
    // SAFETY: `bo` is a live shmem object (the caller holds a reference):
    // its `filp`, the shmem file holding its pages, is set at creation and
    // released only when the object is freed.
    unsafe { crate::ffi::keep_shmem_page_forever((*bo.as_raw()).filp, index) }?;
    Ok(true)
}

/// A VRAM object's blocks as contiguous segments of device-physical
/// addresses in object order.
///
/// # Errors
///
/// `ENOMEM`.
pub(crate) fn vram_segments(alloc: &VramAlloc) -> Result<KVec<Seg>> {
    let mut segs = KVec::new();
    let mut offset = 0u64;
    for (addr, len) in alloc.dpa_runs()? {
        segs.push(Seg { offset, addr, len }, GFP_KERNEL)?;
        offset += len;
    }
    Ok(segs)
}

/// A mapping's entries as contiguous segments in object order.
///
/// # Errors
///
/// `ENOMEM`.
pub(crate) fn read_segments(table: &SGTable) -> Result<KVec<Seg>> {
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
