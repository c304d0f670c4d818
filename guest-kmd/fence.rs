// SPDX-License-Identifier: GPL-2.0

//! Exporting fences as sync_file fds (`FENCE_EXPORT`): a minimal dma_fence.
//!
//! The pinned kernel has no Rust `dma_fence` abstraction, so this module
//! uses the C API directly and keeps to the smallest sound subset:
//!
//! * An [`ExportedFence`] is a bare, `kmalloc`ed `struct dma_fence` with the
//!   inline lock and [`OPS`], which has only the two name callbacks: no
//!   `release` (the core frees it with `kfree_rcu`) and no `wait` (the core
//!   waits). With neither, the core drops its `ops` pointer when the fence
//!   signals, so a signalled fence no longer refers to this module at all.
//! * The ring that owns the job keeps one reference in its
//!   [`ExportedFence`] and signals it when the job completes (status 1) or
//!   fails (`-EIO`). Dropping an [`ExportedFence`] that has not signalled
//!   cancels it (`-ECANCELED`) first, so every path that discards a ring —
//!   context destroy, file close, unbind — leaves only signalled fences.
//!   Module unload waits for an RCU grace period (the core's `ops` readers
//!   are RCU readers) after the last ring is gone.
//! * The sync_file holds its own reference; the fd is installed last, after
//!   everything that can fail.

use core::ptr::NonNull;
use kernel::{bindings, prelude::*};

/// `include/linux/sync_file.h`, not in the pinned kernel's bindings:
/// `struct sync_file *sync_file_create(struct dma_fence *)`, whose first
/// member is `struct file *file`.
mod ffi {
    use kernel::bindings;
    extern "C" {
        pub(super) fn sync_file_create(fence: *mut bindings::dma_fence) -> *mut *mut kernel::ffi::c_void;
    }
}

// SAFETY (for the callbacks): the core calls them with a live fence; the
// strings are static.
unsafe extern "C" fn driver_name(_f: *mut bindings::dma_fence) -> *const kernel::ffi::c_char {
    c"vgpu".as_char_ptr()
}

unsafe extern "C" fn timeline_name(_f: *mut bindings::dma_fence) -> *const kernel::ffi::c_char {
    c"vgpu-ring".as_char_ptr()
}

/// The fences' operations: names only (see the module documentation).
static OPS: bindings::dma_fence_ops = bindings::dma_fence_ops {
    get_driver_name: Some(driver_name),
    get_timeline_name: Some(timeline_name),
    // SAFETY: every other member is an optional callback; all-zero is
    // `None` for each.
    ..unsafe { core::mem::zeroed() }
};

/// A new fence context (one per ring).
pub(crate) fn new_context() -> u64 {
    // SAFETY: no preconditions.
    unsafe { bindings::dma_fence_context_alloc(1) }
}

/// One exported fence of a ring's job, with the ring's reference.
pub(crate) struct ExportedFence {
    pub(crate) seqno: u64,
    f: NonNull<bindings::dma_fence>,
    /// This value signalled it (nothing else does).
    signalled: bool,
}

// SAFETY: a dma_fence is reference counted and internally locked; the
// reference this value holds may be used and dropped from any thread.
unsafe impl Send for ExportedFence {}

impl ExportedFence {
    /// A fence for `seqno` of fence context `context`, unsignalled.
    pub(crate) fn new(context: u64, seqno: u64) -> Result<Self> {
        // SAFETY: `dma_fence` is a plain C struct for which all-zero is a
        // valid (uninitialised-state) value; `dma_fence_init` sets it up.
        let b = KBox::new(unsafe { core::mem::zeroed::<bindings::dma_fence>() }, GFP_KERNEL)?;
        let raw = KBox::into_raw(b);
        // SAFETY: `raw` is a `kmalloc`ed, exclusively owned `dma_fence` at
        // the start of its allocation (so the core's `kfree_rcu` frees
        // exactly it); `OPS` is static with both required callbacks; a
        // NULL lock selects the inline lock.
        unsafe { bindings::dma_fence_init(raw, &OPS, core::ptr::null_mut(), context, seqno) };
        Ok(ExportedFence {
            seqno,
            signalled: false,
            // SAFETY: `KBox::into_raw` never returns NULL.
            f: unsafe { NonNull::new_unchecked(raw) },
        })
    }

    /// Signals the fence: success, or the job failed with `errno` (< 0).
    /// Only the first call has an effect.
    pub(crate) fn signal(&mut self, errno: i32) {
        if core::mem::replace(&mut self.signalled, true) {
            return;
        }
        let f = self.f.as_ptr();
        // SAFETY: we hold a reference, so `f` is live. Only this value
        // signals the fence, and it has not yet, so setting the error
        // before signalling is what `dma_fence_set_error` allows.
        unsafe {
            if errno < 0 {
                (*f).error = errno;
            }
            bindings::dma_fence_signal(f);
        }
    }

    /// Whether this value signalled the fence.
    pub(crate) fn is_signalled(&self) -> bool {
        self.signalled
    }

    /// A sync_file for this fence, installed as a new close-on-exec fd of
    /// the calling process.
    pub(crate) fn export_fd(&self) -> Result<i32> {
        // SAFETY: no preconditions; a negative value is an errno.
        let fd = unsafe { bindings::get_unused_fd_flags(bindings::O_CLOEXEC) };
        if fd < 0 {
            return Err(Error::from_errno(fd));
        }
        // SAFETY: we hold a reference to the live fence; `sync_file_create`
        // takes its own.
        let sf = unsafe { ffi::sync_file_create(self.f.as_ptr()) };
        if sf.is_null() {
            // SAFETY: `fd` was reserved above and not installed.
            unsafe { bindings::put_unused_fd(fd as u32) };
            return Err(ENOMEM);
        }
        // SAFETY: `sf` points to a live `struct sync_file`, whose first
        // member is its `struct file *` (holding the one reference we hand
        // to the fd table); `fd` is reserved and not yet installed.
        unsafe { bindings::fd_install(fd as u32, (*sf).cast::<bindings::file>()) };
        Ok(fd)
    }
}

impl Drop for ExportedFence {
    fn drop(&mut self) {
        self.signal(-(bindings::ECANCELED as i32));
        let f = self.f.as_ptr();
        // SAFETY: this value owns one reference; releasing it is
        // `dma_fence_put` (an inline function in C): the last reference
        // goes through the core's release, which frees the fence after an
        // RCU grace period.
        unsafe {
            if bindings::refcount_dec_and_test(&raw mut (*f).refcount.refcount) {
                bindings::dma_fence_release(&raw mut (*f).refcount);
            }
        }
    }
}
