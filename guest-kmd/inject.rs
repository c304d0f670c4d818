// SPDX-License-Identifier: GPL-2.0

//! Named fault-injection points at the driver's own failure sites, on the
//! kernel's fault-injection framework (`lib/fault-inject.c`,
//! Documentation/fault-injection/fault-injection.rst).
//!
//! xe drives its error paths with `fail_function` on functions marked
//! `ALLOW_ERROR_INJECTION`; Rust module functions cannot carry that mark,
//! so each point here is a `struct fault_attr` of the driver's own, tested
//! with `should_fail()` at the site where the failure would happen, which
//! then fails as the real failure would. Each point has the framework's
//! standard knobs in `/sys/kernel/debug/vgpu_fail/<point>/`
//! (`probability`, `interval`, `times`, `space`, `verbose`, `task-filter`,
//! ...): `echo 100 > probability; echo 3 > interval; echo 1 > times` fails
//! the third call from then on, once; every failure is logged
//! (`FAULT_INJECTION: forcing a failure. name <point>`, with a stack trace
//! at `verbose` 2; the points start at 1, one line). The points that fail
//! as an allocation would (`ENOMEM`) also count, like `failslab`, for a
//! thread's `/proc/<pid>/fail-nth`, so the allocation-failure sweeps cover
//! them; the others (a full VRAM, a failed command) fire only when armed
//! through their knobs, so that a sweep keeps meaning "an allocation
//! failed".
//!
//! | point | where | the failure | fail-nth |
//! |---|---|---|---|
//! | `vram_alloc` | the VRAM manager's allocation | `ENOSPC`, as if VRAM were full: a VRAM-preferred object falls back to system memory, a VRAM-only one evicts (or fails `ENOSPC`) | no |
//! | `bo_pages` | pinning and DMA-mapping an object's pages (bind, eviction) | `ENOMEM` | yes |
//! | `pt_alloc` | a page-table page from the pool | `ENOMEM` | yes |
//! | `control_cmd` | any control command, before it is sent | `EIO`, as a command the device failed | no |
//!
//! Nothing is injected until a point is armed (probability 0) or, for
//! those that count for it, a thread arms `fail-nth`.

use core::ptr;
use kernel::{
    bindings,
    error::from_err_ptr,
    prelude::*,
    sync::atomic::{
        Acquire,
        AtomicFlag,
        Release, //
    },
    types::Opaque,
};

/// A fault-injection point of the driver.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Point {
    /// The VRAM manager's allocation fails as if VRAM were full.
    VramAlloc = 0,
    /// Pinning and DMA-mapping an object's pages fails.
    BoPages = 1,
    /// The page-table pool has no page.
    PtAlloc = 2,
    /// A control command fails before it is sent.
    ControlCmd = 3,
}

/// Number of points.
const COUNT: usize = 4;

impl Point {
    /// Every point, in number order.
    const ALL: [Point; COUNT] = [
        Point::VramAlloc,
        Point::BoPages,
        Point::PtAlloc,
        Point::ControlCmd,
    ];

    /// Whether it counts for `fail-nth` (it fails as an allocation would).
    const fn counts_for_fail_nth(self) -> bool {
        matches!(self, Point::BoPages | Point::PtAlloc)
    }

    /// Its debugfs directory's name.
    const fn name(self) -> &'static CStr {
        match self {
            Point::VramAlloc => c"vram_alloc",
            Point::BoPages => c"bo_pages",
            Point::PtAlloc => c"pt_alloc",
            Point::ControlCmd => c"control_cmd",
        }
    }
}

/// The points' `fault_attr`s.
struct Attrs([Opaque<bindings::fault_attr>; COUNT]);

// SAFETY: A `fault_attr` is made to be shared by every CPU (failslab's is
// one global): `should_fail()` updates its counters with atomics, or with
// plain increments the framework documents as approximate, and its knobs
// are written through debugfs at any time. The attrs are only reached
// through the C functions, after [`Points::create`] initialised them.
unsafe impl Sync for Attrs {}

static ATTRS: Attrs = Attrs([const { Opaque::uninit() }; COUNT]);

/// Set once the attrs are initialised: before, no point fails.
static READY: AtomicFlag = AtomicFlag::new(false);

/// Whether point `p` fails now (`should_fail()` on its attr). The caller
/// then fails the way the real failure would.
pub(crate) fn should_fail(p: Point) -> bool {
    if !READY.load(Acquire) {
        return false;
    }
    // PANIC: `p as usize` < COUNT: the discriminants are 0..COUNT.
    let attr = ATTRS.0[p as usize].get();
    // SAFETY: `attr` was initialised by `fault_attr_init` before `READY`
    // was set, and lives for the module's lifetime (a static). The
    // probability is a word debugfs may write at any time: read once,
    // volatile, as `should_fail` itself reads it.
    let armed = unsafe { ptr::read_volatile(&raw const (*attr).probability) } != 0;
    if !armed && !p.counts_for_fail_nth() {
        return false;
    }
    // SAFETY: As above.
    unsafe { bindings::should_fail(attr, 1) }
}

/// The points' debugfs directory; removed when dropped (module exit).
pub(crate) struct Points {
    dir: *mut bindings::dentry,
}

// SAFETY: `dir` is only passed to `debugfs_remove`, from any thread.
unsafe impl Send for Points {}
// SAFETY: `Points` offers no method that uses `dir` through `&self`.
unsafe impl Sync for Points {}

impl Points {
    /// Initialises every point (nothing injected) and creates its knobs in
    /// `/sys/kernel/debug/vgpu_fail/`. Called once, from the module
    /// initialiser; without debugfs the points still count for `fail-nth`.
    pub(crate) fn create() -> Points {
        for a in ATTRS.0.iter() {
            // SAFETY: `a` is a static attr no one uses yet (`READY` is
            // not set, and this runs once, in the module initialiser).
            unsafe {
                bindings::fault_attr_init(a.get());
                // One line per failure, no stack trace (set `verbose` to 2
                // for one).
                (*a.get()).verbose = 1;
            }
        }
        READY.store(true, Release);
        // SAFETY: A name and no parent: a directory at the debugfs root
        // (an error pointer if debugfs is not there).
        let dir =
            unsafe { bindings::debugfs_create_dir(c"vgpu_fail".as_char_ptr(), ptr::null_mut()) };
        let Ok(dir) = from_err_ptr(dir) else {
            return Points {
                dir: ptr::null_mut(),
            };
        };
        for p in Point::ALL {
            // PANIC: `p as usize` < COUNT.
            let attr = ATTRS.0[p as usize].get();
            // SAFETY: `dir` is the live directory made above; `attr` is
            // initialised and static; the name is a static string. The
            // files go with `dir` (recursively) before the module's
            // memory does.
            let made =
                unsafe { bindings::fault_create_debugfs_attr(p.name().as_char_ptr(), dir, attr) };
            if from_err_ptr(made).is_err() {
                pr_warn!(
                    "vgpu: no debugfs knobs for injection point {:?}\n",
                    p.name()
                );
            }
        }
        Points { dir }
    }
}

impl Drop for Points {
    fn drop(&mut self) {
        if !self.dir.is_null() {
            // SAFETY: `dir` was made by `debugfs_create_dir` and is removed
            // once, here.
            unsafe { bindings::debugfs_remove(self.dir) };
        }
    }
}
