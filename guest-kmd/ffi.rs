// SPDX-License-Identifier: GPL-2.0

//! The kernel C APIs this driver needs and the pinned kernel's Rust
//! abstractions do not cover, each behind a small safe wrapper.
//!
//! Everything `unsafe` about them lives here, shaped like an upstream
//! abstraction would be, so that the blocks above call safe functions:
//!
//! * [`ExportedFence`], [`new_fence_context`]: a minimal `dma_fence` and its
//!   export as a `sync_file` fd (no Rust `dma_fence` abstraction exists).
//! * [`flush_work`]: `flush_work()` (the workqueue abstraction has none).
//! * [`send_wedged_uevent`]: DRM's `WEDGED=` uevent on a device's DRM nodes.
//! * [`monotonic_ns`]: `ktime_get()` as nanoseconds; [`total_ram_bytes`]:
//!   `si_meminfo()`; [`current_ids`]: the current thread's process and
//!   thread ids (`task_tgid_nr_ns`, `__task_pid_nr_ns`).
//! * [`ModuleRef`]: a reference on this module (`try_module_get`).
//! * [`find_aperture`]: the CPU-visible VRAM aperture's PCI function next
//!   to the GPU (`pci_get_slot`).
//! * [`publish_coredump`], [`remove_coredump`], [`DumpSlot`]: devcoredumps
//!   (`dev_coredumpm`, `dev_coredump_put`; not in the bindings).
//! * [`keep_shmem_page_forever`]: a shmem page kept out of the allocator
//!   for good (`shmem_read_mapping_page_gfp`; not in the bindings).
//! * [`firmware_param`]: the `firmware` module parameter, a string (the
//!   pinned `module!` macro declares integer parameters only): a
//!   `charp` parameter (`param_ops_charp`) registered the way the macro
//!   registers its own.

use core::ptr::NonNull;
use kernel::{
    alloc::KVVec,
    bindings,
    prelude::*,
    sync::{
        atomic::{
            AtomicFlag,
            Relaxed, //
        },
        Arc,
        SetOnce, //
    },
    workqueue::{
        HasWork,
        Work, //
    },
    ThisModule,
};

/// `include/linux/sync_file.h`, not in the pinned kernel's bindings:
/// `struct sync_file *sync_file_create(struct dma_fence *)`, whose first
/// member is `struct file *file`.
mod sync_file {
    use kernel::bindings;
    extern "C" {
        pub(super) fn sync_file_create(
            fence: *mut bindings::dma_fence,
        ) -> *mut *mut kernel::ffi::c_void;
    }
}

// ---------------------------------------------------------------- dma_fence

/// `get_driver_name` of [`FENCE_OPS`].
///
/// # Safety
///
/// Called by the dma_fence core with a live fence; the returned string is
/// static.
unsafe extern "C" fn driver_name(_f: *mut bindings::dma_fence) -> *const kernel::ffi::c_char {
    c"vgpu".as_char_ptr()
}

/// `get_timeline_name` of [`FENCE_OPS`].
///
/// # Safety
///
/// As [`driver_name`].
unsafe extern "C" fn timeline_name(_f: *mut bindings::dma_fence) -> *const kernel::ffi::c_char {
    c"vgpu-ring".as_char_ptr()
}

/// The fences' operations: names only (jobs' fences, and `VM_BIND_OPS`'
/// bind jobs'). With neither `release` nor `wait`,
/// the core frees a fence with `kfree_rcu` and drops its `ops` pointer when
/// the fence signals, so a signalled fence no longer refers to this module.
static FENCE_OPS: bindings::dma_fence_ops = bindings::dma_fence_ops {
    get_driver_name: Some(driver_name),
    get_timeline_name: Some(timeline_name),
    // SAFETY: every other member is an optional callback; all-zero is
    // `None` for each.
    ..unsafe { core::mem::zeroed() }
};

/// A new dma_fence context (one per ring).
pub(crate) fn new_fence_context() -> u64 {
    // SAFETY: `dma_fence_context_alloc` has no preconditions.
    unsafe { bindings::dma_fence_context_alloc(1) }
}

/// One fence of a ring's job, exported as sync_files, with the ring's
/// reference.
///
/// The owner signals it when the job completes (status 1) or fails (an
/// errno); dropping one that has not signalled cancels it (`-ECANCELED`)
/// first, so every path that discards a ring leaves only signalled fences.
/// Module unload waits for an RCU grace period (the core's `ops` readers are
/// RCU readers) after the last ring is gone.
pub(crate) struct ExportedFence {
    /// The fence's seqno on its ring.
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
    ///
    /// # Errors
    ///
    /// `ENOMEM` when the fence cannot be allocated.
    pub(crate) fn new(context: u64, seqno: u64) -> Result<Self> {
        // SAFETY: `dma_fence` is a plain C struct for which all-zero is a
        // valid (uninitialised-state) value; `dma_fence_init` sets it up.
        let b = KBox::new(
            unsafe { core::mem::zeroed::<bindings::dma_fence>() },
            GFP_KERNEL,
        )?;
        let raw = KBox::into_raw(b);
        // SAFETY:
        // - `raw` is a `kmalloc`ed, exclusively owned `dma_fence` at the start
        //   of its allocation, so the core's `kfree_rcu` frees exactly it;
        // - `FENCE_OPS` is static and has both required callbacks;
        // - a NULL lock selects the fence's inline lock.
        unsafe { bindings::dma_fence_init(raw, &FENCE_OPS, core::ptr::null_mut(), context, seqno) };
        Ok(ExportedFence {
            seqno,
            signalled: false,
            // SAFETY: `KBox::into_raw` never returns NULL.
            f: unsafe { NonNull::new_unchecked(raw) },
        })
    }

    /// Signals the fence: success (`errno` 0), or the job failed with
    /// `errno` (< 0). Only the first call has an effect.
    pub(crate) fn signal(&mut self, errno: i32) {
        if core::mem::replace(&mut self.signalled, true) {
            return;
        }
        let f = self.f.as_ptr();
        // SAFETY:
        // - we hold a reference, so `f` is live;
        // - only this value signals the fence and it has not yet, so setting
        //   the error before signalling is what `dma_fence_set_error` allows.
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

    /// A reference to the fence, for sync objects, reservation objects and
    /// dependencies ([`crate::ffi_sync`]).
    pub(crate) fn fence(&self) -> crate::ffi_sync::Fence {
        // SAFETY: we hold a reference, so the fence is live.
        unsafe { crate::ffi_sync::Fence::get(self.f) }
    }

    /// A sync_file for this fence, installed as a new close-on-exec fd of
    /// the calling process. The fd is installed last, after everything that
    /// can fail.
    ///
    /// # Errors
    ///
    /// `EMFILE` (no free fd), `ENOMEM`.
    pub(crate) fn export_fd(&self) -> Result<i32> {
        // SAFETY: `get_unused_fd_flags` has no preconditions; a negative
        // value is an errno.
        let fd = unsafe { bindings::get_unused_fd_flags(bindings::O_CLOEXEC) };
        if fd < 0 {
            return Err(Error::from_errno(fd));
        }
        // SAFETY: we hold a reference to the live fence; `sync_file_create`
        // takes its own.
        let sf = unsafe { sync_file::sync_file_create(self.f.as_ptr()) };
        if sf.is_null() {
            // SAFETY: `fd` was reserved above and not installed.
            unsafe { bindings::put_unused_fd(fd as u32) };
            return Err(ENOMEM);
        }
        // SAFETY:
        // - `sf` points to a live `struct sync_file`, whose first member is
        //   its `struct file *`, holding the one reference we hand to the fd
        //   table;
        // - `fd` is reserved and not yet installed.
        unsafe { bindings::fd_install(fd as u32, (*sf).cast::<bindings::file>()) };
        Ok(fd)
    }
}

impl Drop for ExportedFence {
    fn drop(&mut self) {
        self.signal(-(bindings::ECANCELED as i32));
        let f = self.f.as_ptr();
        // SAFETY: this value owns one reference; releasing it is
        // `dma_fence_put` (an inline function in C): the last reference goes
        // through the core's release, which frees the fence after an RCU
        // grace period.
        unsafe {
            if bindings::refcount_dec_and_test(&raw mut (*f).refcount.refcount) {
                bindings::dma_fence_release(&raw mut (*f).refcount);
            }
        }
    }
}

// ---------------------------------------------------------------- workqueue

/// Waits until `this`'s work item is neither queued nor running
/// (`flush_work`).
///
/// Must not be called from that work item.
pub(crate) fn flush_work<T: HasWork<T>>(this: &Arc<T>) {
    let ptr = Arc::as_ptr(this).cast_mut();
    // SAFETY: `ptr` points to a live `T` (we hold an `Arc`), so
    // `raw_get_work` yields its initialised `Work` field.
    let work = unsafe { <T as HasWork<T>>::raw_get_work(ptr) };
    // SAFETY:
    // - `Work::raw_get` needs a pointer to a valid `Work`, which `work` is;
    // - `flush_work` only waits on the initialised `work_struct`, which stays
    //   alive because we hold an `Arc` to its container; a queued instance
    //   holds its own `Arc` and releases it when it returns, before
    //   `flush_work` does.
    unsafe { bindings::flush_work(Work::raw_get(work)) };
}

// ---------------------------------------------------------------- uevents

/// Sends DRM's `WEDGED=rebind` uevent (`KOBJ_CHANGE`) on every DRM device
/// node (`card*`, `renderD*`) among `parent`'s children.
pub(crate) fn send_wedged_uevent(parent: &kernel::device::Device) {
    // `Device` is a transparent wrapper of `struct device`.
    let raw = core::ptr::from_ref(parent)
        .cast::<bindings::device>()
        .cast_mut();
    // SAFETY: `raw` is a live `struct device` (borrowed for the call);
    // `device_for_each_child` holds each child while it calls
    // `wedged_uevent`, which takes no data.
    unsafe { bindings::device_for_each_child(raw, core::ptr::null_mut(), Some(wedged_uevent)) };
}

/// Sends `WEDGED=rebind` on a DRM device node (`card*`, `renderD*`).
///
/// # Safety
///
/// `dev` is a live `struct device` (as `device_for_each_child` passes).
unsafe extern "C" fn wedged_uevent(
    dev: *mut bindings::device,
    _data: *mut kernel::ffi::c_void,
) -> kernel::ffi::c_int {
    // SAFETY: the caller passes a live device; its kobject name is a
    // NUL-terminated string or NULL.
    let name = unsafe { (*dev).kobj.name };
    if name.is_null() {
        return 0;
    }
    // SAFETY: `name` is non-NULL and NUL-terminated (see above).
    let name = unsafe { kernel::str::CStr::from_char_ptr(name) };
    let n = name.to_bytes();
    if n.starts_with(b"card") || n.starts_with(b"renderD") {
        let mut env: [*mut kernel::ffi::c_char; 2] = [
            c"WEDGED=rebind".as_char_ptr().cast_mut(),
            core::ptr::null_mut(),
        ];
        // SAFETY:
        // - `dev` is live (see above);
        // - `env` is a NULL-terminated array of C strings that outlives the
        //   call (the kernel copies them).
        unsafe {
            bindings::kobject_uevent_env(
                &raw mut (*dev).kobj,
                bindings::kobject_action_KOBJ_CHANGE,
                env.as_mut_ptr(),
            )
        };
    }
    0
}

// ---------------------------------------------------------------- aperture

/// PCI ids of the aperture function: QEMU's `ivshmem-plain`.
const APERTURE_VENDOR: u16 = 0x1af4;
const APERTURE_DEVICE: u16 = 0x1110;
/// The BAR of the aperture function that maps VRAM.
const APERTURE_BAR: usize = 2;

/// Where the CPU-visible VRAM aperture is: BAR 2 of the `ivshmem-plain`
/// function 1 on the GPU's own slot (docs/hardware.md, "Device memory").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ApertureBar {
    /// Bus address of the BAR.
    pub(crate) start: u64,
    /// Its length in bytes.
    pub(crate) len: u64,
    /// The function's devfn.
    pub(crate) devfn: u32,
}

/// Finds the aperture function next to `gpu` (`pci_get_slot` on function
/// 1 of the GPU's slot, matched by its ids); `None` without one, or with a
/// BAR the PCI core did not assign.
pub(crate) fn find_aperture(gpu: &kernel::device::Device) -> Option<ApertureBar> {
    // `Device` is a transparent wrapper of `struct device`.
    let dev = core::ptr::from_ref(gpu)
        .cast::<bindings::device>()
        .cast_mut();
    // SAFETY: `gpu` is the `struct device` embedded in the GPU's live
    // `struct pci_dev` (the driver is bound to a PCI function), so the
    // containing struct is valid for the call.
    let pdev = unsafe { kernel::container_of!(dev, bindings::pci_dev, dev) };
    // SAFETY: `pdev` is live (see above); `bus` and `devfn` are set at
    // enumeration and never change while the function exists.
    let (bus, devfn) = unsafe { ((*pdev).bus, (*pdev).devfn) };
    let want = (devfn & !7) | 1;
    // SAFETY: `bus` is the live bus of a live function; `pci_get_slot`
    // returns a referenced `pci_dev` or NULL.
    let other = unsafe { bindings::pci_get_slot(bus, want) };
    if other.is_null() {
        return None;
    }
    // SAFETY: `other` is a live, referenced `pci_dev`: its ids and
    // resources are read under that reference, dropped right after.
    let found = unsafe {
        let ok = (*other).vendor == APERTURE_VENDOR && (*other).device == APERTURE_DEVICE;
        let r = (*other).resource.get(APERTURE_BAR).copied();
        bindings::pci_dev_put(other);
        (ok, r)
    };
    let (true, Some(r)) = found else {
        return None;
    };
    let len = r.end.checked_sub(r.start)?.checked_add(1)?;
    (r.start != 0).then_some(ApertureBar {
        start: r.start,
        len,
        devfn: want,
    })
}

// ---------------------------------------------------------------- time

/// The guest's RAM in bytes (`si_meminfo`).
pub(crate) fn total_ram_bytes() -> u64 {
    // SAFETY: `sysinfo` is a plain C struct; all-zero is a valid value for
    // `si_meminfo` to fill.
    let mut info: bindings::sysinfo = unsafe { core::mem::zeroed() };
    // SAFETY: `info` is a live, writable `sysinfo` for the duration of the
    // call; `si_meminfo` only writes its fields.
    unsafe { bindings::si_meminfo(&mut info) };
    (info.totalram as u64).saturating_mul(u64::from(info.mem_unit))
}

/// The guest's monotonic clock (`ktime_get`), in nanoseconds.
pub(crate) fn monotonic_ns() -> u64 {
    // SAFETY: `ktime_get` may be called from any context but NMI.
    u64::try_from(unsafe { bindings::ktime_get() }).unwrap_or(0)
}

/// The current task's thread group and thread ids, as the guest's
/// processes see them (`getpid`, `gettid` in the initial namespace).
///
/// The thread id goes through `__task_pid_nr_ns` rather than the Rust
/// `Task::pid`, which reads the `pid` field through the generated
/// `task_struct` layout (it read 0 on the pinned kernel).
pub(crate) fn current_ids() -> (u32, u32) {
    let t = kernel::current!();
    let tgid = t.tgid_nr_ns(None);
    // SAFETY: `t` is the running task, alive for the call;
    // `__task_pid_nr_ns` accepts any live task and, with a null namespace,
    // uses the caller's active one.
    let tid = unsafe {
        bindings::__task_pid_nr_ns(
            t.as_ptr(),
            bindings::pid_type_PIDTYPE_PID,
            core::ptr::null_mut(),
        )
    };
    (
        u32::try_from(tgid).unwrap_or(0),
        u32::try_from(tid).unwrap_or(0),
    )
}

// ---------------------------------------------------------------- modules

/// The storage of the `firmware` parameter: the kernel's `charp`
/// parameter code writes a `kstrdup`ed string pointer here while the
/// module loads (before its initialiser runs) and frees it when the module
/// unloads.
struct CharpParam(core::cell::UnsafeCell<*mut kernel::ffi::c_char>);

// SAFETY: The pointer is written only by the module loader before the
// module's code runs (the parameter has permission 0: no sysfs file can
// change it later) and freed after the module's code stopped; in between
// it is only read.
unsafe impl Sync for CharpParam {}

static FIRMWARE_PARAM: CharpParam = CharpParam(core::cell::UnsafeCell::new(core::ptr::null_mut()));

const _: () = {
    #[link_section = "__param"]
    #[used(compiler)]
    static __VGPU_FIRMWARE_PARAM: kernel::module_param::KernelParam =
        kernel::module_param::KernelParam::new(bindings::kernel_param {
            name: kernel::str::as_char_ptr_in_const_context(c"firmware"),
            // `__this_module` is constructed by the kernel at load time and
            // not freed until the module is unloaded; only its address is
            // taken.
            mod_: (&raw const bindings::__this_module).cast_mut(),
            // SAFETY: Only the address of the kernel's `param_ops_charp` is
            // taken; it is a constant table of the kernel.
            ops: unsafe { core::ptr::from_ref(&bindings::param_ops_charp) },
            // Not in sysfs: the value is fixed once the module has loaded.
            perm: 0,
            level: -1,
            flags: 0,
            __bindgen_anon_1: bindings::kernel_param__bindgen_ty_1 {
                arg: FIRMWARE_PARAM.0.get().cast(),
            },
        });
    #[link_section = ".modinfo"]
    #[used(compiler)]
    static __VGPU_FIRMWARE_PARMTYPE: [u8; 24] = *b"parmtype=firmware:charp\0";
    #[link_section = ".modinfo"]
    #[used(compiler)]
    static __VGPU_FIRMWARE_PARM: [u8; 90] =
        *b"parm=firmware:Firmware image to load, relative to /lib/firmware (default: vgpu/gen<N>.fw)\0";
};

/// The `firmware` module parameter, if it was given (and is not empty).
pub(crate) fn firmware_param() -> Option<&'static CStr> {
    // SAFETY: See `CharpParam`: the pointer is not written while the
    // module's code runs.
    let p = unsafe { *FIRMWARE_PARAM.0.get() };
    if p.is_null() {
        return None;
    }
    // SAFETY: The kernel's `charp` parameter code stores a NUL-terminated
    // string it allocated, which lives until the module unloads.
    let s = unsafe { CStr::from_char_ptr(p) };
    (!s.is_empty()).then_some(s)
}

/// This module, recorded when it loads ([`set_this_module`]).
static THIS_MODULE: SetOnce<&'static ThisModule> = SetOnce::new();

/// Records this module (from the module initialiser, before any file can
/// be opened).
pub(crate) fn set_this_module(m: &'static ThisModule) {
    THIS_MODULE.populate(m);
}

/// A reference on this module, held by every open render-node file.
///
/// The DRM file operations the kernel's Rust DRM abstraction installs have no
/// owner module, so an open file does not pin the module by itself; without
/// this, `rmmod` with a render node open would free code and data the file
/// still uses. With it, `rmmod` fails with `EBUSY` while files are open.
pub(crate) struct ModuleRef(());

impl ModuleRef {
    /// Takes a reference on this module.
    ///
    /// # Errors
    ///
    /// `ENODEV` while the module is being unloaded.
    pub(crate) fn get() -> Result<ModuleRef> {
        let m = THIS_MODULE.as_ref().ok_or(ENODEV)?;
        // SAFETY: `m` is this module, which is live while its code runs.
        if unsafe { bindings::try_module_get(m.as_ptr()) } {
            Ok(ModuleRef(()))
        } else {
            Err(ENODEV)
        }
    }
}

impl Drop for ModuleRef {
    fn drop(&mut self) {
        // A `ModuleRef` exists only if `get` found the module.
        if let Some(m) = THIS_MODULE.as_ref() {
            // SAFETY: balances the successful `try_module_get` of
            // `ModuleRef::get` on the same module.
            unsafe { bindings::module_put(m.as_ptr()) };
        }
    }
}

// ---------------------------------------------------------------- shmem pages

/// `include/linux/shmem_fs.h`, not in the pinned kernel's bindings. The
/// `struct address_space *` and `struct page *` are declared as `void *`
/// (the bindings' structs hold zero-sized members that Rust does not
/// consider FFI-safe; the pointers are only passed on and checked).
mod shmem {
    use kernel::bindings;
    use kernel::ffi::{c_ulong, c_void};

    extern "C" {
        pub(super) fn shmem_read_mapping_page_gfp(
            mapping: *mut c_void,
            index: c_ulong,
            gfp: bindings::gfp_t,
        ) -> *mut c_void;
    }
}

/// Takes one reference on page `index` of the shmem file `filp` and never
/// drops it: when the file goes, the page does not return to the kernel's
/// allocator (a page taken out of use for good, as `memory_failure()`
/// keeps a poisoned one).
///
/// # Safety
///
/// `filp` points at a live shmem file (a shmem GEM object's `filp`).
///
/// # Errors
///
/// `ENOMEM`, `EIO` (a poisoned page), or the errno of reading the page in.
pub(crate) unsafe fn keep_shmem_page_forever(filp: *mut bindings::file, index: usize) -> Result {
    let index = kernel::ffi::c_ulong::try_from(index)?;
    // SAFETY: `filp` is live (the caller's guarantee); a shmem file's
    // `f_mapping` is its inode's page cache, set when it was opened.
    let mapping = unsafe { (*filp).f_mapping };
    // SAFETY: `mapping` is the live file's page cache (above). The call
    // returns the page at `index`, read in if it was swapped out, with a
    // reference taken on its folio, or an error pointer.
    let page =
        unsafe { shmem::shmem_read_mapping_page_gfp(mapping.cast(), index, bindings::GFP_KERNEL) };
    // The reference is kept on purpose: it is never dropped.
    kernel::error::from_err_ptr(page)?;
    Ok(())
}

// ---------------------------------------------------------------- devcoredump

/// `include/linux/devcoredump.h`, not in the pinned kernel's bindings. The
/// `struct device *` and `struct module *` arguments are declared as
/// `void *`: the bindings' structs hold zero-sized members that Rust does
/// not consider FFI-safe, and the functions only pass the pointers on.
mod devcoredump {
    use kernel::bindings;
    use kernel::ffi::{c_char, c_ulong, c_void};

    /// `read` of `dev_coredumpm_timeout`.
    pub(super) type ReadFn =
        unsafe extern "C" fn(*mut c_char, bindings::loff_t, usize, *mut c_void, usize) -> isize;
    /// `free` of `dev_coredumpm_timeout`.
    pub(super) type FreeFn = unsafe extern "C" fn(*mut c_void);

    extern "C" {
        pub(super) fn dev_coredumpm_timeout(
            dev: *mut c_void,
            owner: *mut c_void,
            data: *mut c_void,
            datalen: usize,
            gfp: bindings::gfp_t,
            read: Option<ReadFn>,
            free: Option<FreeFn>,
            timeout: c_ulong,
        );
        pub(super) fn dev_coredump_put(dev: *mut c_void);
    }
}

/// Whether a device's published devcoredump is still unread: set when one
/// is published, cleared when the devcoredump core frees it (it was read
/// and cleared, timed out, or was discarded at once because an older one
/// is unread).
pub(crate) struct DumpSlot {
    outstanding: AtomicFlag,
}

impl DumpSlot {
    /// No dump outstanding.
    pub(crate) fn new() -> DumpSlot {
        DumpSlot {
            outstanding: AtomicFlag::new(false),
        }
    }

    /// Whether a dump is outstanding.
    pub(crate) fn outstanding(&self) -> bool {
        self.outstanding.load(Relaxed)
    }
}

/// What the devcoredump core holds: the text and the slot to clear.
struct DumpData {
    bytes: KVVec<u8>,
    slot: Arc<DumpSlot>,
}

/// How long an unread dump stays: the core's default (five minutes).
const DUMP_TIMEOUT_JIFFIES: u64 = bindings::HZ as u64 * 60 * 5;

/// `read` callback: copies `count` bytes from `offset` of the dump.
///
/// # Safety
///
/// Called by the devcoredump core with `data` as passed to
/// [`publish_coredump`] (a live `DumpData` until `free`) and `buffer`
/// writable for `count` bytes.
unsafe extern "C" fn dump_read(
    buffer: *mut kernel::ffi::c_char,
    offset: bindings::loff_t,
    count: usize,
    data: *mut kernel::ffi::c_void,
    _datalen: usize,
) -> isize {
    // SAFETY: `data` is the `DumpData` leaked by `publish_coredump`, alive
    // until `dump_free` (the core never calls `read` after `free`).
    let d = unsafe { &*data.cast::<DumpData>() };
    let Ok(off) = usize::try_from(offset) else {
        return 0;
    };
    let Some(src) = d.bytes.get(off..) else {
        return 0;
    };
    let n = src.len().min(count);
    // SAFETY: `buffer` is writable for `count >= n` bytes (the core's
    // contract); `src` holds at least `n` bytes; they do not overlap (one is
    // the core's page, the other our vmalloc'ed text).
    unsafe { core::ptr::copy_nonoverlapping(src.as_ptr(), buffer.cast::<u8>(), n) };
    n as isize
}

/// `free` callback: drops the dump and clears its slot.
///
/// # Safety
///
/// Called once by the devcoredump core with the `data` passed to
/// [`publish_coredump`].
unsafe extern "C" fn dump_free(data: *mut kernel::ffi::c_void) {
    // SAFETY: `data` came from `KBox::into_raw` in `publish_coredump` and the
    // core calls `free` exactly once.
    let d = unsafe { KBox::from_raw(data.cast::<DumpData>()) };
    d.slot.outstanding.store(false, Relaxed);
}

/// Publishes `bytes` as `dev`'s devcoredump (`dev_coredumpm`):
/// `/sys/class/devcoredump/devcdN/data` until it is written to (cleared) or
/// five minutes pass. A dump holds a reference on this module while it
/// exists. If an older dump of `dev` is unread the core discards this one
/// at once (the slot is cleared again).
///
/// # Errors
///
/// `ENOMEM`, `ENODEV` (the module is unloading).
pub(crate) fn publish_coredump(
    dev: &kernel::device::Device,
    bytes: KVVec<u8>,
    slot: Arc<DumpSlot>,
) -> Result {
    let m = THIS_MODULE.as_ref().ok_or(ENODEV)?;
    let len = bytes.len();
    slot.outstanding.store(true, Relaxed);
    let data = KBox::new(DumpData { bytes, slot }, GFP_KERNEL)?;
    let raw = KBox::into_raw(data);
    // `Device` is a transparent wrapper of `struct device`.
    let dev = core::ptr::from_ref(dev)
        .cast::<kernel::ffi::c_void>()
        .cast_mut();
    // SAFETY:
    // - `dev` is a live device (borrowed for the call; the core takes its
    //   own reference);
    // - `m` is this module, which holds `dump_read` and `dump_free`; the core
    //   takes a module reference for as long as the dump exists;
    // - `raw` is a `DumpData` the core owns from now on: it passes it to
    //   `dump_read` and, exactly once, to `dump_free` (also if it discards
    //   the dump at once).
    unsafe {
        devcoredump::dev_coredumpm_timeout(
            dev,
            m.as_ptr().cast(),
            raw.cast(),
            len,
            bindings::GFP_KERNEL,
            Some(dump_read),
            Some(dump_free),
            DUMP_TIMEOUT_JIFFIES as kernel::ffi::c_ulong,
        )
    };
    Ok(())
}

/// Removes `dev`'s devcoredump, if any (unbind).
pub(crate) fn remove_coredump(dev: &kernel::device::Device) {
    let dev = core::ptr::from_ref(dev)
        .cast::<kernel::ffi::c_void>()
        .cast_mut();
    // SAFETY: `dev` is a live device for the call; `dev_coredump_put` only
    // deletes the dumps whose failing device it is.
    unsafe { devcoredump::dev_coredump_put(dev) };
}
