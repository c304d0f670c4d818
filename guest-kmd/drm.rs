// SPDX-License-Identifier: GPL-2.0

//! The DRM driver: a render node (`/dev/dri/renderD*`), its ioctl table,
//! and the driver's associated types (the file, the GEM object).
//!
//! The top of the driver: each ioctl checks its argument struct's own
//! fields, looks GEM handles up, and calls the block that does the work:
//!
//! * `GET_PARAM`, `PING`: the device ([`Vgpu::param`], [`Vgpu::ping`]).
//! * `GEM_CREATE`, `GEM_MMAP_OFFSET`: shmem buffer objects ([`crate::gem`]).
//! * `VM_BIND`, `VM_UNBIND`: the file's GPU address space ([`crate::vm`]),
//!   with the TLB invalidation of the GPU block after an unbind;
//!   `VM_BIND_OPS`: checked here into [`crate::vm_ops`] requests, run as a
//!   bind job ([`crate::gpu::bind`]).
//! * `CTX_*`, `SUBMIT`, `WAIT`, `FENCE_EXPORT`: the GPU blocks
//!   ([`crate::gpu`]); `SUBMIT`'s sync objects and implicit-sync BOs are
//!   looked up here.
//! * `QUERY_STATS`: [`crate::stats`].
//! * `SAN_REPORT`: the device sanitizer's reports ([`crate::gpu::sanitizer`]).
//! * `UQ_CREATE`, `UQ_KICK`: user-mode queues ([`crate::gpu::uqctl`]).
//!
//! Every handler runs inside [`traced`] (the table's macro wraps it): its
//! entry and exit are in the driver's trace buffer when that is on.
//!
//! The render node advertises DRM sync objects (binary and timeline), so the
//! generic `DRM_IOCTL_SYNCOBJ_*` ioctls work on it, and PRIME works through
//! the GEM shmem helpers: handles of objects that are not this device's BOs
//! (a foreign dma-buf) are refused by every lookup ([`crate::gem::lookup`]).
//! Dumb buffers (`MODE_CREATE_DUMB`, primary node) are this driver's BOs,
//! charged like `GEM_CREATE`'s.
//!
//! The GPUVM driver type of the address spaces is implemented here too,
//! since it names the driver; its steps are in [`crate::vm_ops`].
//!
//! Argument ranges and errnos are documented in the uAPI header and
//! docs/uapi.md.

use crate::{
    device::{
        Vgpu,
        PING_DEFAULT_TIMEOUT_NS, //
    },
    ffi::ModuleRef,
    ffi_sync::{
        Fence,
        ImplicitUse,
        OutSync,
        Syncobj, //
    },
    file::Client,
    gem::{
        self as vgem,
        Bo,
        BoArgs,
        BoRegistry,
        MemCharge,
        VgpuObject, //
    },
    gpu::submit::JobSyncs,
    hostmem,
    uarray::{
        self,
        USubmitBo,
        USync,
        UVmOp, //
    },
    vm::{
        BindArgs,
        BoPages,
        VmData, //
    },
    vm_ops::{
        PreparedOp,
        StepCtx, //
    },
};
use kernel::{
    device::Core,
    drm::{
        self,
        gem::{
            self,
            BaseObject, //
        },
        gpuvm::{
            DriverGpuVm,
            OpMap,
            OpMapped,
            OpRemap,
            OpRemapped,
            OpUnmap,
            OpUnmapped, //
        },
        ioctl, DeviceContext,
    },
    pci,
    prelude::*,
    sync::{
        aref::ARef,
        Arc, //
    },
    uapi,
};

/// The DRM driver type.
pub(crate) struct VgpuDrm;

/// The DRM device of one vgpu.
pub(crate) type VgpuDrmDevice<Ctx = drm::Registered> = drm::Device<VgpuDrm, Ctx>;

/// Per-DRM-device data.
pub(crate) struct DrmData {
    vgpu: Arc<Vgpu>,
    /// The device's BOs, for sound handle lookups.
    bos: Arc<BoRegistry>,
}

/// Per-open-file data: the device, what the file owns on the GPU, and a
/// reference on this module.
pub(crate) struct VgpuFile {
    vgpu: Arc<Vgpu>,
    client: Arc<Client>,
    _module: ModuleRef,
}

impl Drop for VgpuFile {
    fn drop(&mut self) {
        // Its contexts are destroyed on the device: wake it (a device that
        // cannot be woken is wedged, and the close goes on without it).
        let awake = self.vgpu.gpu.pm_get(&*self.vgpu);
        self.vgpu.close_client(&self.client);
        drop(awake);
    }
}

const INFO: drm::DriverInfo = drm::DriverInfo {
    major: 0,
    minor: 1,
    patchlevel: 0,
    name: c"vgpu",
    desc: c"vgpu virtual GPU",
};

/// `declare_drm_ioctls!` with every handler wrapped in [`traced`]: entry
/// and exit, with the return code, in the driver's trace buffer.
macro_rules! traced_drm_ioctls {
    ($(($cmd:ident, $struct:ident, $flags:expr, $func:expr)),* $(,)?) => {
        kernel::declare_drm_ioctls! {
            $(($cmd, $struct, $flags, |dev, args, file| {
                traced(dev, ::core::stringify!($cmd), || $func(dev, args, file))
            })),*
        }
    };
}

/// Runs ioctl handler `f`, traced as `name` when the driver's trace is on
/// (one relaxed load otherwise).
fn traced<T: Copy + TryInto<i64>>(
    dev: &VgpuDrmDevice,
    name: &'static str,
    f: impl FnOnce() -> Result<T>,
) -> Result<T> {
    // Runtime power management: an ioctl that may talk to the device
    // wakes it first (one atomic load when it is up).
    let _awake = if matches!(
        name,
        "VGPU_GET_PARAM" | "VGPU_WAIT" | "VGPU_SAN_REPORT" | "VGPU_FENCE_EXPORT" | "VGPU_PING"
    ) {
        None
    } else {
        Some(dev.vgpu.gpu.pm_get(&*dev.vgpu)?)
    };
    let trace = &dev.vgpu.hw.trace;
    if !trace.on() {
        return f();
    }
    trace.ioctl_enter(name);
    let r = f();
    let ret = match &r {
        Ok(v) => (*v).try_into().unwrap_or(i64::MAX),
        Err(e) => i64::from(e.to_errno()),
    };
    trace.ioctl_exit(name, ret);
    r
}

#[vtable]
impl drm::Driver for VgpuDrm {
    type Data = DrmData;
    type File = VgpuFile;
    type Object<Ctx: drm::DeviceContext> = gem::shmem::Object<VgpuObject, Ctx>;

    const INFO: drm::DriverInfo = INFO;
    const FEAT_RENDER: bool = true;
    const FEAT_SYNCOBJ: bool = true;
    const FEAT_SYNCOBJ_TIMELINE: bool = true;

    /// `DRM_IOCTL_MODE_CREATE_DUMB` (primary node only): vgpu has no
    /// display, but a dumb buffer is still memory a client can fill and map,
    /// so it is an ordinary system-memory BO of this driver, charged to the
    /// GEM limits like `GEM_CREATE`'s (docs/uapi.md, "Dumb buffers").
    ///
    /// # Errors
    ///
    /// As `GEM_CREATE` ([`VgpuFile::create_bo`]): `EINVAL` for a buffer
    /// over `VGPU_GEM_MAX_SIZE`, `ENOMEM`/`ENOSPC` at the device's or the
    /// file's GEM limit.
    fn dumb_create(
        dev: &VgpuDrmDevice,
        file: &File,
        args: &mut kernel::bindings::drm_mode_create_dumb,
    ) -> Result {
        // DRM checked that width, height and bpp are non-zero and that the
        // size fits in 32 bits; checked again here all the same.
        let cpp = args.bpp.div_ceil(8);
        let pitch = cpp.checked_mul(args.width).ok_or(EINVAL)?;
        let size = u64::from(pitch)
            .checked_mul(u64::from(args.height))
            .filter(|&s| s > 0)
            .ok_or(EINVAL)?
            .next_multiple_of(crate::vm::PAGE_4K);
        let handle = VgpuFile::create_bo(dev, size, 0, file)?;
        args.handle = handle;
        args.pitch = pitch;
        args.size = size;
        Ok(())
    }

    traced_drm_ioctls! {
        (VGPU_GET_PARAM, drm_vgpu_get_param, ioctl::RENDER_ALLOW, VgpuFile::get_param),
        (VGPU_PING, drm_vgpu_ping, ioctl::RENDER_ALLOW, VgpuFile::ping),
        (VGPU_GEM_CREATE, drm_vgpu_gem_create, ioctl::RENDER_ALLOW, VgpuFile::gem_create),
        (VGPU_GEM_MMAP_OFFSET, drm_vgpu_gem_mmap_offset, ioctl::RENDER_ALLOW, VgpuFile::gem_mmap_offset),
        (VGPU_VM_BIND, drm_vgpu_vm_bind, ioctl::RENDER_ALLOW, VgpuFile::vm_bind),
        (VGPU_VM_UNBIND, drm_vgpu_vm_unbind, ioctl::RENDER_ALLOW, VgpuFile::vm_unbind),
        (VGPU_CTX_CREATE, drm_vgpu_ctx_create, ioctl::RENDER_ALLOW, VgpuFile::ctx_create),
        (VGPU_CTX_DESTROY, drm_vgpu_ctx_destroy, ioctl::RENDER_ALLOW, VgpuFile::ctx_destroy),
        (VGPU_CTX_QUERY, drm_vgpu_ctx_query, ioctl::RENDER_ALLOW, VgpuFile::ctx_query),
        (VGPU_SUBMIT, drm_vgpu_submit, ioctl::RENDER_ALLOW, VgpuFile::submit),
        (VGPU_WAIT, drm_vgpu_wait, ioctl::RENDER_ALLOW, VgpuFile::wait),
        (VGPU_QUERY_STATS, drm_vgpu_query_stats, ioctl::RENDER_ALLOW, VgpuFile::query_stats),
        (VGPU_FENCE_EXPORT, drm_vgpu_fence_export, ioctl::RENDER_ALLOW, VgpuFile::fence_export),
        (VGPU_VM_BIND_OPS, drm_vgpu_vm_bind_ops, ioctl::RENDER_ALLOW, VgpuFile::vm_bind_ops),
        (VGPU_SAN_REPORT, drm_vgpu_san_report, ioctl::RENDER_ALLOW, VgpuFile::san_report),
        (VGPU_UQ_CREATE, drm_vgpu_uq_create, ioctl::RENDER_ALLOW, VgpuFile::uq_create),
        (VGPU_UQ_KICK, drm_vgpu_uq_kick, ioctl::RENDER_ALLOW, VgpuFile::uq_kick),
        (VGPU_HOST_MAP, drm_vgpu_host_map, ioctl::RENDER_ALLOW, VgpuFile::host_map),
        (VGPU_HOST_UNMAP, drm_vgpu_host_unmap, ioctl::RENDER_ALLOW, VgpuFile::host_unmap),
    }
}

impl drm::file::DriverFile for VgpuFile {
    type Driver = VgpuDrm;

    fn open(dev: &VgpuDrmDevice) -> Result<Pin<KBox<Self>>> {
        let module = ModuleRef::get()?;
        let vgpu = dev.vgpu.clone();
        let client = vgpu.open_client(dev)?;
        let file = VgpuFile {
            vgpu,
            client,
            _module: module,
        };
        Ok(KBox::new(file, GFP_KERNEL)?.into())
    }

    fn show_fdinfo(&self, _dev: &VgpuDrmDevice, p: &mut drm::file::FdinfoPrinter<'_>) {
        crate::stats::show_fdinfo(&self.vgpu, &self.client, p);
    }
}

impl gem::DriverObject for VgpuObject {
    type Driver = VgpuDrm;
    type Args = BoArgs;

    fn new<Ctx: DeviceContext>(
        _dev: &VgpuDrmDevice<Ctx>,
        _size: usize,
        args: BoArgs,
    ) -> impl PinInit<Self, Error> {
        VgpuObject::init(args)
    }
}

/// The arguments of an ioctl handler.
type File = drm::File<VgpuFile>;

impl VgpuFile {
    /// `DRM_IOCTL_VGPU_GET_PARAM`.
    fn get_param(
        dev: &VgpuDrmDevice,
        args: &mut uapi::drm_vgpu_get_param,
        _file: &File,
    ) -> Result<u32> {
        if args.pad != 0 {
            return Err(EINVAL);
        }
        args.value = dev.vgpu.param(args.param)?;
        Ok(0)
    }

    /// `DRM_IOCTL_VGPU_PING`.
    fn ping(dev: &VgpuDrmDevice, args: &mut uapi::drm_vgpu_ping, _file: &File) -> Result<u32> {
        let timeout_ns = match args.timeout_ns {
            0 => PING_DEFAULT_TIMEOUT_NS,
            t => t,
        };
        let r = dev.vgpu.ping(args.cookie, timeout_ns)?;
        args.event_seq = r.seq;
        args.latency_ns = r.latency_ns;
        Ok(0)
    }

    /// `DRM_IOCTL_VGPU_GEM_CREATE`.
    fn gem_create(
        dev: &VgpuDrmDevice,
        args: &mut uapi::drm_vgpu_gem_create,
        file: &File,
    ) -> Result<u32> {
        if args.flags & !uapi::VGPU_GEM_CREATE_FLAGS != 0 {
            return Err(EINVAL);
        }
        args.handle = Self::create_bo(dev, args.size, args.flags, file)?;
        Ok(0)
    }

    /// Creates a BO of `size` bytes (rounded up to 4 KiB) placed and
    /// charged as `flags` say (`GEM_CREATE`, and dumb buffers with no
    /// flags); returns its handle in `file`.
    ///
    /// # Errors
    ///
    /// `EINVAL` (size 0 or over `VGPU_GEM_MAX_SIZE`), `ENOMEM` (the device's
    /// GEM limit, or no memory), `ENOSPC` (the file's GEM limit), the
    /// placement's errnos (docs/uapi.md), `ENODEV`/`EIO` for a device that
    /// is gone or broken.
    fn create_bo(dev: &VgpuDrmDevice, size: u64, flags: u32, file: &File) -> Result<u32> {
        if size == 0 || size > u64::from(uapi::VGPU_GEM_MAX_SIZE) {
            return Err(EINVAL);
        }
        dev.vgpu.check_usable()?;
        let size =
            usize::try_from(size.next_multiple_of(crate::vm::PAGE_4K)).map_err(|_| EINVAL)?;
        let config = gem::shmem::ObjectConfig {
            map_wc: false,
            parent_resv_obj: None,
        };
        let vram = dev
            .vgpu
            .place(dev, size as u64, flags, &file.inner().client.vram)?;
        // System memory is guest memory, counted against the GEM limits;
        // VRAM is the device's.
        let charge = match vram {
            Some(_) => None,
            None => Some(MemCharge::new(
                size,
                dev.vgpu.mem.clone(),
                file.inner().client.mem.clone(),
            )?),
        };
        let in_vram = vram.is_some();
        let bo = Bo::new(
            dev,
            size,
            config,
            BoArgs {
                flags,
                charge,
                vram,
                owner: file.inner().client.id,
            },
        )?;
        // SAFETY: `bo` was just created: it has no handle yet, so no other
        // thread and no GPUVM can reach it.
        unsafe { crate::ffi_gpuvm::gem_gpuva_init(&*bo) };
        if in_vram {
            // SAFETY: As above.
            unsafe { crate::gem_vram::install(&bo) };
        }
        dev.bos.add(&bo)?;
        bo.create_handle(file)
    }

    /// `DRM_IOCTL_VGPU_GEM_MMAP_OFFSET`.
    fn gem_mmap_offset(
        dev: &VgpuDrmDevice,
        args: &mut uapi::drm_vgpu_gem_mmap_offset,
        file: &File,
    ) -> Result<u32> {
        if args.pad != 0 {
            return Err(EINVAL);
        }
        dev.vgpu.check_usable()?;
        let bo = vgem::lookup(file, args.handle, &dev.bos)?;
        if bo.is_vram_object() {
            // Once in system memory, it stays there: its CPU mapping shows
            // those pages (crate::restore).
            bo.mark_cpu_mapped();
        }
        let invisible = bo
            .vram()
            .as_ref()
            .is_some_and(|v| v.aperture.is_none() || !v.alloc.is_visible());
        if invisible {
            // Device memory the CPU cannot see: the object moves to system
            // memory, whose pages the mapping shows.
            dev.vgpu.migrate_to_system(dev, &bo)?;
        }
        args.offset = bo.create_mmap_offset()?;
        Ok(0)
    }

    /// `DRM_IOCTL_VGPU_VM_BIND`.
    fn vm_bind(dev: &VgpuDrmDevice, args: &mut uapi::drm_vgpu_vm_bind, file: &File) -> Result<u32> {
        dev.vgpu.check_usable()?;
        let bo = vgem::lookup(file, args.handle, &dev.bos)?;
        if dev.vgpu.gpu.binds_queued(&file.inner().client) {
            return Err(EBUSY);
        }
        // Declared to the device's sanitizer before the entries are
        // written, with no lock held (the pages are pinned for it).
        let decl = dev.vgpu.declare_pages(&bo, args.bo_offset, args.size)?;
        let a = BindArgs {
            handle: args.handle,
            flags: args.flags,
            bo_offset: args.bo_offset,
            va: args.va,
            size: args.size,
        };
        file.inner().client.vm.lock().bind(a, bo, decl)?;
        Ok(0)
    }

    /// `DRM_IOCTL_VGPU_VM_UNBIND`.
    fn vm_unbind(
        dev: &VgpuDrmDevice,
        args: &mut uapi::drm_vgpu_vm_unbind,
        file: &File,
    ) -> Result<u32> {
        dev.vgpu.check_usable()?;
        let client = &file.inner().client;
        if dev.vgpu.gpu.binds_queued(client) {
            return Err(EBUSY);
        }
        let m = client.vm.lock().unbind(args.va, args.size)?;
        if dev.vgpu.gpu.planted_skip_invalidate() {
            // The planted bug (debugfs `sanitizer_plant`): the pages go
            // with the device's TLBs still holding them.
            drop(m);
            return Ok(0);
        }
        // The entries are clear; the object's pages go only once no
        // context of this file can translate to them any more.
        if dev
            .vgpu
            .gpu
            .invalidate_after_unbind(client, args.va, args.size)
        {
            drop(m);
            Ok(0)
        } else {
            client.vm.lock().retire(m);
            Err(EIO)
        }
    }

    /// `DRM_IOCTL_VGPU_CTX_CREATE`.
    fn ctx_create(
        dev: &VgpuDrmDevice,
        args: &mut uapi::drm_vgpu_ctx_create,
        file: &File,
    ) -> Result<u32> {
        args.ctx_id = dev.vgpu.gpu.ctx_create(
            &file.inner().client,
            args.priority,
            args.engine_mask,
            args.flags,
        )?;
        Ok(0)
    }

    /// `DRM_IOCTL_VGPU_CTX_DESTROY`.
    fn ctx_destroy(
        dev: &VgpuDrmDevice,
        args: &mut uapi::drm_vgpu_ctx_destroy,
        file: &File,
    ) -> Result<u32> {
        if args.pad != 0 {
            return Err(EINVAL);
        }
        dev.vgpu
            .gpu
            .ctx_destroy(&file.inner().client, args.ctx_id)?;
        Ok(0)
    }

    /// `DRM_IOCTL_VGPU_CTX_QUERY`.
    fn ctx_query(
        dev: &VgpuDrmDevice,
        args: &mut uapi::drm_vgpu_ctx_query,
        file: &File,
    ) -> Result<u32> {
        let q = dev.vgpu.gpu.ctx_query(&file.inner().client, args.ctx_id)?;
        args.reset_status = q.reset_status;
        args.state = q.state;
        args.fault_access = q.fault_access;
        args.fault_va = q.fault_va;
        args.fault_reason = q.fault_reason;
        args.hangs = q.hangs;
        args.faults = q.faults;
        args.engine_error = q.engine_error;
        let at = q.error_at.unwrap_or_default();
        args.error_packet_va = at.packet_va;
        args.error_seqno = at.seqno;
        args.error_header = at.header;
        args.error_engine = at.engine;
        args.error_cmd_index = at.cmd_index.unwrap_or(uapi::VGPU_CMD_INDEX_NONE);
        args.error_cmd_offset = at.cmd_offset;
        args.error_depth = at.depth;
        args.san_reports = q.san_reports;
        args.san_last_seq = q.san_last_seq;
        Ok(0)
    }

    /// `DRM_IOCTL_VGPU_UQ_CREATE`.
    fn uq_create(
        dev: &VgpuDrmDevice,
        args: &mut uapi::drm_vgpu_uq_create,
        file: &File,
    ) -> Result<u32> {
        args.ctx_id = dev.vgpu.gpu.uq_create(&file.inner().client, args)?;
        Ok(0)
    }

    /// `DRM_IOCTL_VGPU_HOST_MAP`.
    fn host_map(
        dev: &VgpuDrmDevice,
        args: &mut uapi::drm_vgpu_host_map,
        file: &File,
    ) -> Result<u32> {
        let vgpu = &dev.vgpu;
        vgpu.check_usable()?;
        let client = &file.inner().client;
        let ma = hostmem::MapArgs {
            dev: vgpu.gpu.pdev().as_ref(),
            device_mem: vgpu.mem.clone(),
            file_mem: client.mem.clone(),
            host: &client.host,
            vm: &client.vm,
        };
        args.gpu_va = hostmem::map(ma, args)?;
        Ok(0)
    }

    /// `DRM_IOCTL_VGPU_HOST_UNMAP`.
    fn host_unmap(
        dev: &VgpuDrmDevice,
        args: &mut uapi::drm_vgpu_host_unmap,
        file: &File,
    ) -> Result<u32> {
        let client = &file.inner().client;
        let m = hostmem::unmap(&client.host, &client.vm, args.gpu_va)?;
        let (va, size) = m.range();
        // The entries are clear; the pages go only once no context of this
        // file can translate to them any more.
        if dev.vgpu.gpu.invalidate_after_unbind(client, va, size) {
            drop(m);
            Ok(0)
        } else {
            client.host.lock().retire(m);
            Err(EIO)
        }
    }

    /// `DRM_IOCTL_VGPU_UQ_KICK`.
    fn uq_kick(dev: &VgpuDrmDevice, args: &mut uapi::drm_vgpu_uq_kick, file: &File) -> Result<u32> {
        dev.vgpu.gpu.uq_kick(&file.inner().client, args)?;
        Ok(0)
    }

    /// `DRM_IOCTL_VGPU_SAN_REPORT`.
    fn san_report(
        dev: &VgpuDrmDevice,
        args: &mut uapi::drm_vgpu_san_report,
        file: &File,
    ) -> Result<u32> {
        dev.vgpu.gpu.san_report(&file.inner().client, args)?;
        Ok(0)
    }

    /// `DRM_IOCTL_VGPU_FENCE_EXPORT`.
    fn fence_export(
        dev: &VgpuDrmDevice,
        args: &mut uapi::drm_vgpu_fence_export,
        file: &File,
    ) -> Result<u32> {
        dev.vgpu.gpu.fence_export(&file.inner().client, args)?;
        Ok(0)
    }

    /// `DRM_IOCTL_VGPU_SUBMIT`.
    fn submit(dev: &VgpuDrmDevice, args: &mut uapi::drm_vgpu_submit, file: &File) -> Result<u32> {
        if args.num_in_syncs > uapi::VGPU_SUBMIT_MAX_SYNCS
            || args.num_out_syncs > uapi::VGPU_SUBMIT_MAX_SYNCS
            || args.num_bos > uapi::VGPU_SUBMIT_MAX_BOS
        {
            return Err(EINVAL);
        }
        let (ins, outs) = read_syncs(
            file,
            args.in_syncs,
            args.num_in_syncs,
            args.out_syncs,
            args.num_out_syncs,
        )?;
        let ubos: KVec<USubmitBo> = uarray::read(args.bos, args.num_bos as usize)?;
        let mut bos = KVec::with_capacity(ubos.len(), GFP_KERNEL)?;
        for b in ubos.iter().map(|b| b.0) {
            let usage = match b.flags {
                uapi::VGPU_SUBMIT_BO_READ => ImplicitUse::Read,
                f if f & !uapi::VGPU_SUBMIT_BO_FLAGS == 0
                    && f & uapi::VGPU_SUBMIT_BO_WRITE != 0 =>
                {
                    ImplicitUse::Write
                }
                _ => return Err(EINVAL),
            };
            let bo: ARef<Bo> = vgem::lookup(file, b.handle, &dev.bos)?;
            bos.push((bo, usage), GFP_KERNEL)?;
        }
        let syncs = JobSyncs { ins, outs, bos };
        // Evicted objects of the file move back to VRAM first where there
        // is room (crate::restore; never fails the submit).
        dev.vgpu.restore_evicted(&file.inner().client);
        dev.vgpu.gpu.submit(&file.inner().client, args, syncs)?;
        Ok(0)
    }

    /// `DRM_IOCTL_VGPU_VM_BIND_OPS`.
    fn vm_bind_ops(
        dev: &VgpuDrmDevice,
        args: &mut uapi::drm_vgpu_vm_bind_ops,
        file: &File,
    ) -> Result<u32> {
        if args.flags != 0
            || args.num_ops == 0
            || args.num_ops > uapi::VGPU_VM_BIND_MAX_OPS
            || args.num_in_syncs > uapi::VGPU_VM_BIND_MAX_SYNCS
            || args.num_out_syncs > uapi::VGPU_VM_BIND_MAX_SYNCS
        {
            return Err(EINVAL);
        }
        dev.vgpu.check_usable()?;
        let uops: KVec<UVmOp> = uarray::read(args.ops, args.num_ops as usize)?;
        let (ins, outs) = read_syncs(
            file,
            args.in_syncs,
            args.num_in_syncs,
            args.out_syncs,
            args.num_out_syncs,
        )?;
        let client = &file.inner().client;
        let mut ops = KVec::with_capacity(uops.len(), GFP_KERNEL)?;
        for o in uops.iter().map(|o| o.0) {
            if o.pad != 0 {
                return Err(EINVAL);
            }
            let op = match o.op {
                uapi::VGPU_VM_OP_MAP => {
                    let bo = vgem::lookup(file, o.handle, &dev.bos)?;
                    // As for VM_BIND: declared with no lock held.
                    let decl = dev.vgpu.declare_pages(&bo, o.bo_offset, o.size)?;
                    let vm = client.vm.lock();
                    PreparedOp::Map(vm.prepare_map(
                        o.handle,
                        o.flags,
                        o.bo_offset,
                        o.va,
                        o.size,
                        bo,
                        decl,
                    )?)
                }
                uapi::VGPU_VM_OP_UNMAP => {
                    if o.flags != 0 || o.handle != 0 || o.bo_offset != 0 {
                        return Err(EINVAL);
                    }
                    client.vm.lock().prepare_unmap(o.va, o.size)?
                }
                _ => return Err(EINVAL),
            };
            ops.push(op, GFP_KERNEL)?;
        }
        dev.vgpu.gpu.vm_bind_ops(client, ops, ins, outs)?;
        Ok(0)
    }

    /// `DRM_IOCTL_VGPU_QUERY_STATS` ([`crate::stats`]).
    fn query_stats(
        dev: &VgpuDrmDevice,
        args: &mut uapi::drm_vgpu_query_stats,
        _file: &File,
    ) -> Result<u32> {
        crate::stats::query_stats(&dev.vgpu, args)?;
        Ok(0)
    }

    /// `DRM_IOCTL_VGPU_WAIT`.
    fn wait(dev: &VgpuDrmDevice, args: &mut uapi::drm_vgpu_wait, file: &File) -> Result<u32> {
        dev.vgpu.gpu.wait(&file.inner().client, args)?;
        Ok(0)
    }
}

/// Creates and registers the device's render node. It is unregistered
/// automatically when the PCI device is unbound. Returns the registry of
/// the device's BOs (their DMA mappings are released at unbind).
///
/// # Errors
///
/// The errno of a failed allocation or registration.
pub(crate) fn register(pdev: &pci::Device<Core<'_>>, vgpu: &Arc<Vgpu>) -> Result<Arc<BoRegistry>> {
    let bos = vgpu.bos.clone();
    let data = Ok::<_, Error>(DrmData {
        vgpu: vgpu.clone(),
        bos: bos.clone(),
    });
    let drm = drm::UnregisteredDevice::<VgpuDrm>::new(pdev.as_ref(), data)?;
    drm::Registration::new_foreign_owned(drm, pdev.as_ref(), 0)?;
    Ok(bos)
}

/// The sync arrays of `SUBMIT` and `VM_BIND_OPS`: the input fences and the
/// outputs, every handle looked up and every timeline point's chain node
/// allocated.
///
/// # Errors
///
/// `EFAULT` (arrays), `EINVAL` (flags not zero; an input with no fence at
/// its point), `ENOENT` (handles), `ENOMEM`.
fn read_syncs(
    file: &File,
    ins: u64,
    n_ins: u32,
    outs: u64,
    n_outs: u32,
) -> Result<(KVec<Fence>, KVec<OutSync>)> {
    let uins: KVec<USync> = uarray::read(ins, n_ins as usize)?;
    let uouts: KVec<USync> = uarray::read(outs, n_outs as usize)?;
    let mut fences = KVec::with_capacity(uins.len(), GFP_KERNEL)?;
    for s in uins.iter().map(|s| s.0) {
        if s.flags != 0 {
            return Err(EINVAL);
        }
        fences.push(Syncobj::fence(file, s.handle, s.point)?, GFP_KERNEL)?;
    }
    let mut out = KVec::with_capacity(uouts.len(), GFP_KERNEL)?;
    for s in uouts.iter().map(|s| s.0) {
        if s.flags != 0 {
            return Err(EINVAL);
        }
        out.push(OutSync::new(file, s.handle, s.point)?, GFP_KERNEL)?;
    }
    Ok((fences, out))
}

impl DriverGpuVm for VmData {
    type Driver = VgpuDrm;
    type Object = Bo;
    type VaData = ARef<Bo>;
    type VmBoData = BoPages;
    type SmContext<'ctx> = StepCtx<'ctx>;

    fn sm_step_map<'op, 'ctx>(
        &mut self,
        op: OpMap<'op, Self>,
        context: &mut StepCtx<'ctx>,
    ) -> Result<OpMapped<'op, Self>> {
        self.step_map(op, context)
    }

    fn sm_step_unmap<'op, 'ctx>(
        &mut self,
        op: OpUnmap<'op, Self>,
        context: &mut StepCtx<'ctx>,
    ) -> Result<OpUnmapped<'op, Self>> {
        self.step_unmap(op, context)
    }

    fn sm_step_remap<'op, 'ctx>(
        &mut self,
        op: OpRemap<'op, Self>,
        context: &mut StepCtx<'ctx>,
    ) -> Result<OpRemapped<'op, Self>> {
        self.step_remap(op, context)
    }
}
