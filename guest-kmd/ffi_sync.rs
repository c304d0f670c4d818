// SPDX-License-Identifier: GPL-2.0

//! Fences, sync objects, sync_files and reservation objects: the kernel C
//! APIs behind the job queue's dependencies, the sync arrays of `SUBMIT` and
//! `VM_BIND_OPS`, and implicit synchronisation of shared BOs. The pinned
//! kernel has no Rust abstraction for any of them (`dma_fence`,
//! `drm_syncobj`, `sync_file`, `dma_resv`), so this sibling of [`crate::ffi`]
//! wraps the C helpers through the generated bindings, each behind a small
//! safe type shaped like an upstream abstraction would be:
//!
//! * [`Fence`]: a counted reference to any driver's `dma_fence` (from a
//!   syncobj, a sync_file, a reservation object, or one of ours).
//! * [`Dependency`]: a callback on a fence that [`Kick`]s its owner when the
//!   fence signals (`dma_fence_add_callback`), removed when dropped.
//! * [`Syncobj`], [`OutSync`], [`ChainNode`]: a file's sync object looked
//!   up by handle, its fence at a point, and installing a fence (binary:
//!   replace; timeline: a new chain node at a point).
//! * [`implicit_sync`], [`ImplicitUse`]: a GEM object's reservation object:
//!   the fences a job must wait for, and adding the job's fence.

use core::ptr::NonNull;
use kernel::{
    bindings,
    drm::gem::IntoGEMObject,
    prelude::*,
    sync::Arc,
    types::Opaque, //
};

// ---------------------------------------------------------------- fences

/// A counted reference to a `dma_fence` of any driver.
///
/// # Invariants
///
/// `self.0` points to a live `dma_fence` on which this value owns one
/// reference.
pub(crate) struct Fence(NonNull<bindings::dma_fence>);

// SAFETY: a dma_fence is reference counted and internally locked; the
// reference may be used and dropped from any thread.
unsafe impl Send for Fence {}
// SAFETY: every method takes the fence's own lock or reads immutable
// fields.
unsafe impl Sync for Fence {}

impl Fence {
    /// Takes over a reference the caller owns.
    ///
    /// # Safety
    ///
    /// `f` is NULL or a live `dma_fence` on which the caller owns one
    /// reference, which passes to the returned value.
    pub(crate) unsafe fn from_owned(f: *mut bindings::dma_fence) -> Option<Fence> {
        // INVARIANT: the caller passes its reference.
        NonNull::new(f).map(Fence)
    }

    /// Takes a new reference on `f`.
    ///
    /// # Safety
    ///
    /// `f` is a live `dma_fence` (the caller holds a reference for the
    /// duration of the call).
    pub(crate) unsafe fn get(f: NonNull<bindings::dma_fence>) -> Fence {
        // SAFETY: `f` is live (the caller's contract); `dma_fence_get` is
        // `kref_get` on its reference count.
        unsafe { bindings::refcount_inc(&raw mut (*f.as_ptr()).refcount.refcount) };
        // INVARIANT: the reference just taken.
        Fence(f)
    }

    /// The raw fence, for the C calls of this module and [`crate::ffi`].
    pub(crate) fn as_raw(&self) -> *mut bindings::dma_fence {
        self.0.as_ptr()
    }

    /// 0 while pending, 1 when signalled, a negative errno when it
    /// signalled with an error.
    pub(crate) fn status(&self) -> i32 {
        // SAFETY: the fence is live (type invariant);
        // `dma_fence_get_status` takes its lock.
        unsafe { bindings::dma_fence_get_status(self.as_raw()) }
    }

    /// Whether it signalled (with or without an error).
    pub(crate) fn is_signalled(&self) -> bool {
        self.status() != 0
    }

    /// The fence's context and seqno (for debugfs).
    pub(crate) fn id(&self) -> (u64, u64) {
        // SAFETY: `context` and `seqno` are set by `dma_fence_init` and never
        // change afterwards; the fence is live.
        unsafe { ((*self.as_raw()).context, (*self.as_raw()).seqno) }
    }
}

impl Clone for Fence {
    fn clone(&self) -> Fence {
        // SAFETY: this value holds a reference, so the fence is live.
        unsafe { Fence::get(self.0) }
    }
}

impl Drop for Fence {
    fn drop(&mut self) {
        let f = self.as_raw();
        // SAFETY: this value owns one reference (type invariant); releasing
        // it is `dma_fence_put` (inline in C): the last reference goes
        // through the core's release, which frees the fence after an RCU
        // grace period.
        unsafe {
            if bindings::refcount_dec_and_test(&raw mut (*f).refcount.refcount) {
                bindings::dma_fence_release(&raw mut (*f).refcount);
            }
        }
    }
}

// ---------------------------------------------------------------- callbacks

/// What a [`Dependency`] tells its owner. Called from the fence's
/// signalling path: any context, interrupts off, the fence's lock held. It
/// must only note the event and queue work.
pub(crate) trait Kick: Send + Sync + 'static {
    /// A fence this owner depends on signalled.
    fn kick(this: &Arc<Self>);
}

/// The callback registration: the `dma_fence_cb` first (the callback gets
/// a pointer to it).
#[repr(C)]
struct DepInner<T: Kick> {
    cb: Opaque<bindings::dma_fence_cb>,
    target: Arc<T>,
}

// SAFETY: the `dma_fence_cb` is only touched by the dma_fence core (which
// links it into a fence's callback list and calls it, under the fence's
// lock) and by `Dependency`'s drop (removing it, under the same lock); the
// target is `Send + Sync` (`Kick`).
unsafe impl<T: Kick> Send for DepInner<T> {}
// SAFETY: as above; shared references only read `target`.
unsafe impl<T: Kick> Sync for DepInner<T> {}

/// A fence something waits for, with a callback that kicks the waiter when
/// the fence signals.
///
/// Dropping it removes the callback; `dma_fence_remove_callback` takes the
/// fence's lock, under which callbacks run, so once it returns the callback
/// has either been removed or finished.
pub(crate) struct Dependency<T: Kick> {
    fence: Fence,
    /// The registration, while the callback is armed. Boxed: the fence's
    /// callback list points into it.
    armed: Option<KBox<DepInner<T>>>,
}

/// The fence callback: kicks the target.
///
/// # Safety
///
/// Called by the dma_fence core with the `cb` field of a live `DepInner<T>`
/// registered by [`Dependency::new`]; the registration outlives the call
/// (see [`Dependency`]'s drop).
unsafe extern "C" fn dep_signalled<T: Kick>(
    _f: *mut bindings::dma_fence,
    cb: *mut bindings::dma_fence_cb,
) {
    // SAFETY: `cb` is the first field of a `#[repr(C)]` `DepInner<T>`
    // (`Opaque` is transparent), which is live (the function's contract).
    let inner = unsafe { &*cb.cast::<DepInner<T>>() };
    T::kick(&inner.target);
}

impl<T: Kick> Dependency<T> {
    /// Waits for `fence`: `target` is kicked when it signals (at once, from
    /// this call, never; if it has signalled already, no callback is
    /// registered and [`Dependency::is_signalled`] says so).
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn new(fence: Fence, target: Arc<T>) -> Result<Dependency<T>> {
        let inner = KBox::new(
            DepInner {
                cb: Opaque::zeroed(),
                target,
            },
            GFP_KERNEL,
        )?;
        // SAFETY:
        // - the fence is live (we hold a reference);
        // - `inner.cb` is a zeroed `dma_fence_cb` in a heap allocation that
        //   stays where it is until `Drop` removed the callback (or the
        //   callback was never registered);
        // - `dep_signalled::<T>` expects exactly this layout.
        let rc = unsafe {
            bindings::dma_fence_add_callback(
                fence.as_raw(),
                inner.cb.get(),
                Some(dep_signalled::<T>),
            )
        };
        // 0: registered; -ENOENT: already signalled (not registered).
        Ok(Dependency {
            fence,
            armed: (rc == 0).then_some(inner),
        })
    }

    /// Whether the fence signalled.
    pub(crate) fn is_signalled(&self) -> bool {
        self.fence.is_signalled()
    }

    /// The fence.
    pub(crate) fn fence(&self) -> &Fence {
        &self.fence
    }
}

impl<T: Kick> Drop for Dependency<T> {
    fn drop(&mut self) {
        if let Some(inner) = self.armed.take() {
            // SAFETY: `inner.cb` was registered on this fence by `new` (it
            // is armed); removing a callback that already ran is allowed
            // (returns false). The fence's lock serialises this with a
            // running callback, so after the call nothing refers to
            // `inner`, which is then freed.
            unsafe { bindings::dma_fence_remove_callback(self.fence.as_raw(), inner.cb.get()) };
            drop(inner);
        }
    }
}

// ---------------------------------------------------------------- syncobjs

/// A DRM sync object of a file, looked up by handle.
///
/// # Invariants
///
/// `self.0` points to a live `drm_syncobj` on which this value owns one
/// reference.
pub(crate) struct Syncobj(NonNull<bindings::drm_syncobj>);

// SAFETY: sync objects are reference counted and internally locked.
unsafe impl Send for Syncobj {}
// SAFETY: as above.
unsafe impl Sync for Syncobj {}

/// A `struct drm_file`, as the kernel's `drm::File` wraps it
/// (`#[repr(transparent)]` over `Opaque<drm_file>`).
fn raw_file<F: kernel::drm::file::DriverFile>(
    file: &kernel::drm::File<F>,
) -> *mut bindings::drm_file {
    core::ptr::from_ref(file)
        .cast::<bindings::drm_file>()
        .cast_mut()
}

impl Syncobj {
    /// The sync object `handle` of `file`.
    ///
    /// # Errors
    ///
    /// `ENOENT` (no such handle).
    pub(crate) fn find<F: kernel::drm::file::DriverFile>(
        file: &kernel::drm::File<F>,
        handle: u32,
    ) -> Result<Syncobj> {
        // SAFETY: `file` is an open DRM file (borrowed for the call) of a
        // driver with DRIVER_SYNCOBJ; `drm_syncobj_find` takes a reference.
        let s = unsafe { bindings::drm_syncobj_find(raw_file(file), handle) };
        // INVARIANT: the reference `drm_syncobj_find` took.
        NonNull::new(s).map(Syncobj).ok_or(ENOENT)
    }

    /// The fence of `handle` of `file` at `point` (0: its current fence).
    ///
    /// # Errors
    ///
    /// `ENOENT` (no such handle), `EINVAL` (no fence: nothing submitted to
    /// it, or not up to `point`).
    pub(crate) fn fence<F: kernel::drm::file::DriverFile>(
        file: &kernel::drm::File<F>,
        handle: u32,
        point: u64,
    ) -> Result<Fence> {
        let mut f: *mut bindings::dma_fence = core::ptr::null_mut();
        // SAFETY: `file` is an open DRM file; without WAIT_FOR_SUBMIT the
        // helper does not sleep; on success `f` carries a reference.
        let rc =
            unsafe { bindings::drm_syncobj_find_fence(raw_file(file), handle, point, 0, &mut f) };
        if rc < 0 {
            return Err(Error::from_errno(rc));
        }
        // SAFETY: success: `f` is NULL or a fence whose reference we own.
        unsafe { Fence::from_owned(f) }.ok_or(EINVAL)
    }

    /// Installs `fence`: as the syncobj's fence (`point` 0), or as timeline
    /// point `point` with the preallocated `node`.
    pub(crate) fn install(&self, fence: &Fence, point: u64, node: Option<ChainNode>) {
        match (point, node) {
            (0, _) | (_, None) => {
                // SAFETY: both objects are live (we hold references); the
                // helper takes its own reference on the fence.
                unsafe { bindings::drm_syncobj_replace_fence(self.0.as_ptr(), fence.as_raw()) }
            }
            (p, Some(n)) => {
                let chain = KBox::into_raw(n.0).cast::<bindings::dma_fence_chain>();
                // SAFETY:
                // - the syncobj and the fence are live (we hold references);
                // - `chain` is an uninitialised kmalloc'ed `dma_fence_chain`
                //   whose ownership passes to the helper (it initialises it;
                //   the dma_fence core frees it with `kfree_rcu`, which
                //   matches the allocation).
                unsafe {
                    bindings::drm_syncobj_add_point(self.0.as_ptr(), chain, fence.as_raw(), p)
                }
            }
        }
    }
}

impl Drop for Syncobj {
    fn drop(&mut self) {
        let s = self.0.as_ptr();
        // SAFETY: this value owns one reference (type invariant); this is
        // `drm_syncobj_put` (inline in C): `kref_put(&s->refcount,
        // drm_syncobj_free)`.
        unsafe {
            if bindings::refcount_dec_and_test(&raw mut (*s).refcount.refcount) {
                bindings::drm_syncobj_free(&raw mut (*s).refcount);
            }
        }
    }
}

/// An output sync object of a job, ready to receive the job's fence: the
/// object, its point, and for a timeline point the chain node, allocated
/// beforehand so that installing cannot fail.
pub(crate) struct OutSync {
    obj: Syncobj,
    point: u64,
    node: Option<ChainNode>,
}

impl OutSync {
    /// Sync object `handle` of `file` as an output at `point`.
    ///
    /// # Errors
    ///
    /// `ENOENT` (no such handle), `ENOMEM`.
    pub(crate) fn new<F: kernel::drm::file::DriverFile>(
        file: &kernel::drm::File<F>,
        handle: u32,
        point: u64,
    ) -> Result<OutSync> {
        let obj = Syncobj::find(file, handle)?;
        let node = if point != 0 {
            Some(ChainNode::new()?)
        } else {
            None
        };
        Ok(OutSync { obj, point, node })
    }

    /// Installs `fence` (replaces the fence, or adds it at the point).
    pub(crate) fn install(self, fence: &Fence) {
        self.obj.install(fence, self.point, self.node);
    }
}

/// A preallocated timeline point (`dma_fence_chain_alloc`), so that
/// installing a fence at a point cannot fail.
pub(crate) struct ChainNode(KBox<core::mem::MaybeUninit<bindings::dma_fence_chain>>);

impl ChainNode {
    /// A node for one timeline point.
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn new() -> Result<ChainNode> {
        Ok(ChainNode(KBox::new_uninit(GFP_KERNEL)?))
    }
}

// ---------------------------------------------------------------- reservations

/// How a job uses a GEM object, for implicit synchronisation.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum ImplicitUse {
    /// It reads the object: it waits for the writers.
    Read,
    /// It writes the object: it waits for everyone.
    Write,
}

/// The object's reservation lock, held while this value lives.
struct ResvGuard(*mut bindings::dma_resv);

impl ResvGuard {
    fn lock(resv: *mut bindings::dma_resv) -> Result<ResvGuard> {
        // SAFETY: `resv` is the live reservation object of a GEM object the
        // caller holds; no acquire context: this module takes one
        // reservation lock at a time.
        let rc = unsafe { bindings::dma_resv_lock(resv, core::ptr::null_mut()) };
        if rc < 0 {
            return Err(Error::from_errno(rc));
        }
        Ok(ResvGuard(resv))
    }
}

impl Drop for ResvGuard {
    fn drop(&mut self) {
        // SAFETY: locked by `ResvGuard::lock`.
        unsafe { bindings::dma_resv_unlock(self.0) };
    }
}

/// Implicit synchronisation of one GEM object, under its reservation lock
/// (one object at a time): returns the fences a job using `obj` as `usage`
/// must wait for (the writers' for a read, every implicit fence for a
/// write, merged into one fence; `None` when there are none), then adds
/// `fence` (the job's) as a reader or a writer, so that later users of the
/// object, in this driver or through its dma-buf, wait for the job.
///
/// # Errors
///
/// `ENOMEM`, or the errno of the lock (`EINTR` is not possible: the lock
/// is taken uninterruptibly).
pub(crate) fn implicit_sync<O: IntoGEMObject>(
    obj: &O,
    usage: ImplicitUse,
    fence: &Fence,
) -> Result<Option<Fence>> {
    // SAFETY: `obj` is a live GEM object (borrowed); its `resv` pointer is
    // set at init and valid for the object's lifetime.
    let resv = unsafe { (*obj.as_raw()).resv };
    let _g = ResvGuard::lock(resv)?;
    let (wait_for, add_as) = match usage {
        ImplicitUse::Read => (
            bindings::dma_resv_usage_DMA_RESV_USAGE_WRITE,
            bindings::dma_resv_usage_DMA_RESV_USAGE_READ,
        ),
        ImplicitUse::Write => (
            bindings::dma_resv_usage_DMA_RESV_USAGE_READ,
            bindings::dma_resv_usage_DMA_RESV_USAGE_WRITE,
        ),
    };
    let mut f: *mut bindings::dma_fence = core::ptr::null_mut();
    // SAFETY: we hold the lock; on success `f` is NULL or a new reference.
    let rc = unsafe { bindings::dma_resv_get_singleton(resv, wait_for, &mut f) };
    if rc < 0 {
        return Err(Error::from_errno(rc));
    }
    // SAFETY: success: `f` is NULL or carries a reference we now own.
    let dep = unsafe { Fence::from_owned(f) };
    // SAFETY: we hold the lock.
    let rc = unsafe { bindings::dma_resv_reserve_fences(resv, 1) };
    if rc < 0 {
        return Err(Error::from_errno(rc));
    }
    // SAFETY: we hold the lock and reserved a slot; the helper takes its
    // own reference on the fence.
    unsafe { bindings::dma_resv_add_fence(resv, fence.as_raw(), add_as) };
    Ok(dep)
}

/// Adds `fence` to `obj`'s reservation object as a kernel fence
/// (`DMA_RESV_USAGE_KERNEL`: a move of the object's memory, which every
/// later user, reader or writer, waits for), like TTM's move fences.
///
/// # Errors
///
/// `ENOMEM`, or the errno of the lock.
pub(crate) fn add_kernel_fence<O: IntoGEMObject>(obj: &O, fence: &Fence) -> Result {
    // SAFETY: `obj` is a live GEM object (borrowed); its `resv` pointer is
    // set at init and valid for the object's lifetime.
    let resv = unsafe { (*obj.as_raw()).resv };
    let _g = ResvGuard::lock(resv)?;
    // SAFETY: we hold the lock.
    let rc = unsafe { bindings::dma_resv_reserve_fences(resv, 1) };
    if rc < 0 {
        return Err(Error::from_errno(rc));
    }
    // SAFETY: we hold the lock and reserved a slot; the helper takes its
    // own reference on the fence.
    unsafe {
        bindings::dma_resv_add_fence(
            resv,
            fence.as_raw(),
            bindings::dma_resv_usage_DMA_RESV_USAGE_KERNEL,
        )
    };
    Ok(())
}
