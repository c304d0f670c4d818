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
//!   with the TLB invalidation of the GPU block after an unbind.
//! * `CTX_*`, `SUBMIT`, `WAIT`, `FENCE_EXPORT`: the GPU blocks
//!   ([`crate::gpu`]).
//! * `QUERY_STATS`: [`crate::stats`].
//!
//! Argument ranges and errnos are documented in the uAPI header and
//! docs/uapi.md.

use crate::{
    device::{
        Vgpu,
        PING_DEFAULT_TIMEOUT_NS, //
    },
    ffi::ModuleRef,
    file::Client,
    gem::{
        Bo,
        BoArgs,
        MemCharge,
        VgpuObject, //
    },
    vm::BindArgs,
};
use kernel::{
    device::Core,
    drm::{
        self,
        gem::{
            self,
            BaseObject, //
        },
        ioctl, DeviceContext,
    },
    pci,
    prelude::*,
    sync::Arc,
    uapi,
};

/// The DRM driver type.
pub(crate) struct VgpuDrm;

/// The DRM device of one vgpu.
pub(crate) type VgpuDrmDevice<Ctx = drm::Registered> = drm::Device<VgpuDrm, Ctx>;

/// Per-DRM-device data.
pub(crate) struct DrmData {
    vgpu: Arc<Vgpu>,
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
        self.vgpu.close_client(&self.client);
    }
}

const INFO: drm::DriverInfo = drm::DriverInfo {
    major: 0,
    minor: 1,
    patchlevel: 0,
    name: c"vgpu",
    desc: c"vgpu virtual GPU",
};

#[vtable]
impl drm::Driver for VgpuDrm {
    type Data = DrmData;
    type File = VgpuFile;
    type Object<Ctx: drm::DeviceContext> = gem::shmem::Object<VgpuObject, Ctx>;

    const INFO: drm::DriverInfo = INFO;
    const FEAT_RENDER: bool = true;

    kernel::declare_drm_ioctls! {
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
    }
}

impl drm::file::DriverFile for VgpuFile {
    type Driver = VgpuDrm;

    fn open(dev: &VgpuDrmDevice) -> Result<Pin<KBox<Self>>> {
        let module = ModuleRef::get()?;
        let vgpu = dev.vgpu.clone();
        let client = vgpu.open_client()?;
        let file = VgpuFile {
            vgpu,
            client,
            _module: module,
        };
        Ok(KBox::new(file, GFP_KERNEL)?.into())
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
        if args.flags & !uapi::VGPU_GEM_CREATE_FLAGS != 0
            || args.size == 0
            || args.size > u64::from(uapi::VGPU_GEM_MAX_SIZE)
        {
            return Err(EINVAL);
        }
        dev.vgpu.check_usable()?;
        let size =
            usize::try_from(args.size.next_multiple_of(crate::vm::PAGE_4K)).map_err(|_| EINVAL)?;
        let config = gem::shmem::ObjectConfig {
            map_wc: false,
            parent_resv_obj: None,
        };
        let charge = MemCharge::new(size, dev.vgpu.mem.clone(), file.inner().client.mem.clone());
        let bo = Bo::new(
            dev,
            size,
            config,
            BoArgs {
                flags: args.flags,
                charge,
            },
        )?;
        args.handle = bo.create_handle(file)?;
        Ok(0)
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
        let bo = Bo::lookup_handle(file, args.handle)?;
        args.offset = bo.create_mmap_offset()?;
        Ok(0)
    }

    /// `DRM_IOCTL_VGPU_VM_BIND`.
    fn vm_bind(dev: &VgpuDrmDevice, args: &mut uapi::drm_vgpu_vm_bind, file: &File) -> Result<u32> {
        dev.vgpu.check_usable()?;
        let bo = Bo::lookup_handle(file, args.handle)?;
        let a = BindArgs {
            handle: args.handle,
            flags: args.flags,
            bo_offset: args.bo_offset,
            va: args.va,
            size: args.size,
        };
        file.inner().client.vm.lock().bind(a, bo)?;
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
        let m = client.vm.lock().unbind(args.va, args.size)?;
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
        dev.vgpu.gpu.submit(&file.inner().client, args)?;
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
/// automatically when the PCI device is unbound.
///
/// # Errors
///
/// The errno of a failed allocation or registration.
pub(crate) fn register(pdev: &pci::Device<Core<'_>>, vgpu: &Arc<Vgpu>) -> Result {
    let data = Ok::<_, Error>(DrmData { vgpu: vgpu.clone() });
    let drm = drm::UnregisteredDevice::<VgpuDrm>::new(pdev.as_ref(), data)?;
    drm::Registration::new_foreign_owned(drm, pdev.as_ref(), 0)?;
    Ok(())
}
