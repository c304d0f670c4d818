// SPDX-License-Identifier: GPL-2.0

//! The DRM driver: a render node (`/dev/dri/renderD*`) and its ioctls.
//!
//! * `DRM_IOCTL_VGPU_GET_PARAM`: one `VGPU_PARAM_*` value. Device values come
//!   from the `IDENTIFY` reply read at probe; `HWIF_FINGERPRINT` is this
//!   driver's compiled layout fingerprint; `DEVICE_FINGERPRINT` the device's.
//!   `EINVAL` for an unknown parameter or a non-zero `pad`; `ENODEV` once the
//!   device is unbound.
//! * `DRM_IOCTL_VGPU_PING`: a round trip through the control and event
//!   queues (see [`Vgpu::ping`]).
//! * `GEM_CREATE`, `GEM_MMAP_OFFSET`: shmem buffer objects ([`crate::gem`]).
//! * `VM_BIND`, `VM_UNBIND`: the file's GPU address space ([`crate::vm`]).
//!
//! Argument ranges and errnos are documented in the uAPI header.

use crate::{
    device::PING_DEFAULT_TIMEOUT_NS,
    gem::{
        Bo,
        BoArgs,
        VgpuObject, //
    },
    vm::{
        BindArgs,
        Vm, //
    },
    stats::{
        MemAccount,
        MemCharge, //
    },
    Vgpu,
};
use kernel::{
    bindings,
    device::Core,
    drm::{
        self,
        gem::{
            self,
            BaseObject, //
        },
        ioctl, //
    },
    new_mutex,
    pci,
    prelude::*,
    sync::{
        atomic::{
            Atomic,
            Relaxed, //
        },
        Arc,
        Mutex, //
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
}

/// Per-open-file data.
pub(crate) struct VgpuFile {
    vgpu: Arc<Vgpu>,
    client: Arc<Client>,
    _module: ModuleRef,
}

/// What an open file owns on the GPU: its address space (and, listed in
/// the device's client registry, what debugfs shows).
#[pin_data]
pub(crate) struct Client {
    /// A number for debugfs, unique per module load.
    pub(crate) id: u64,
    /// The file's GPU address space.
    #[pin]
    pub(crate) vm: Mutex<Vm>,
    /// GEM objects created through this file.
    pub(crate) mem: Arc<MemAccount>,
}

/// Source of [`Client::id`].
static NEXT_CLIENT: Atomic<u64> = Atomic::new(1);

impl Drop for VgpuFile {
    fn drop(&mut self) {
        self.vgpu.close_client(&self.client);
    }
}

/// A reference on this module, held by every open render-node file.
///
/// The DRM file operations the kernel's Rust DRM abstraction installs have no
/// owner module, so an open file does not pin the module by itself; without
/// this, `rmmod` with a render node open would free code and data the file
/// still uses. With it, `rmmod` fails with `EBUSY` while files are open.
struct ModuleRef(());

impl ModuleRef {
    fn get() -> Result<ModuleRef> {
        // SAFETY: `THIS_MODULE` is this module, which is live while its code
        // runs.
        if unsafe { bindings::try_module_get(crate::THIS_MODULE.as_ptr()) } {
            Ok(ModuleRef(()))
        } else {
            // The module is being unloaded.
            Err(ENODEV)
        }
    }
}

impl Drop for ModuleRef {
    fn drop(&mut self) {
        // SAFETY: Balances the successful `try_module_get` of `ModuleRef::get`.
        unsafe { bindings::module_put(crate::THIS_MODULE.as_ptr()) };
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
        vgpu.check_usable()?;
        let vm = vgpu.new_vm()?;
        let mem = MemAccount::new()?;
        let client = Arc::pin_init(
            pin_init!(Client {
                id: NEXT_CLIENT.fetch_add(1, Relaxed),
                vm <- new_mutex!(vm),
                mem,
            }),
            GFP_KERNEL,
        )?;
        vgpu.add_client(&client)?;
        let file = VgpuFile {
            vgpu,
            client,
            _module: module,
        };
        Ok(KBox::new(file, GFP_KERNEL)?.into())
    }
}

impl VgpuFile {
    /// `DRM_IOCTL_VGPU_GET_PARAM`.
    fn get_param(
        dev: &VgpuDrmDevice,
        args: &mut uapi::drm_vgpu_get_param,
        _file: &drm::File<VgpuFile>,
    ) -> Result<u32> {
        if args.pad != 0 {
            return Err(EINVAL);
        }
        args.value = dev.vgpu.param(args.param)?;
        Ok(0)
    }

    /// `DRM_IOCTL_VGPU_PING`.
    fn ping(
        dev: &VgpuDrmDevice,
        args: &mut uapi::drm_vgpu_ping,
        _file: &drm::File<VgpuFile>,
    ) -> Result<u32> {
        let timeout_ns = match args.timeout_ns {
            0 => PING_DEFAULT_TIMEOUT_NS,
            t => t,
        };
        let r = dev.vgpu.ping(args.cookie, timeout_ns)?;
        args.event_seq = r.seq;
        args.latency_ns = r.latency_ns;
        Ok(0)
    }
}

impl VgpuFile {
    /// `DRM_IOCTL_VGPU_GEM_CREATE`.
    fn gem_create(
        dev: &VgpuDrmDevice,
        args: &mut uapi::drm_vgpu_gem_create,
        file: &drm::File<VgpuFile>,
    ) -> Result<u32> {
        if args.flags & !uapi::VGPU_GEM_CREATE_FLAGS != 0
            || args.size == 0
            || args.size > u64::from(uapi::VGPU_GEM_MAX_SIZE)
        {
            return Err(EINVAL);
        }
        dev.vgpu.check_usable()?;
        let size = usize::try_from(args.size.next_multiple_of(crate::vm::PAGE_4K))
            .map_err(|_| EINVAL)?;
        let config = gem::shmem::ObjectConfig {
            map_wc: false,
            parent_resv_obj: None,
        };
        let charge = MemCharge::new(size, dev.vgpu.mem.as_ref().ok_or(ENODEV)?.clone(), file.inner().client.mem.clone());
        let bo = Bo::new(dev, size, config, BoArgs { flags: args.flags, charge })?;
        args.handle = bo.create_handle(file)?;
        Ok(0)
    }

    /// `DRM_IOCTL_VGPU_GEM_MMAP_OFFSET`.
    fn gem_mmap_offset(
        dev: &VgpuDrmDevice,
        args: &mut uapi::drm_vgpu_gem_mmap_offset,
        file: &drm::File<VgpuFile>,
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
    fn vm_bind(
        dev: &VgpuDrmDevice,
        args: &mut uapi::drm_vgpu_vm_bind,
        file: &drm::File<VgpuFile>,
    ) -> Result<u32> {
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
        file: &drm::File<VgpuFile>,
    ) -> Result<u32> {
        dev.vgpu.check_usable()?;
        let client = &file.inner().client;
        let m = client.vm.lock().unbind(args.va, args.size)?;
        // The entries are clear; the object's pages go only once no
        // context of this file can translate to them any more.
        if dev.vgpu.invalidate_after_unbind(client, args.va, args.size) {
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
        file: &drm::File<VgpuFile>,
    ) -> Result<u32> {
        args.ctx_id = dev.vgpu.ctx_create(
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
        file: &drm::File<VgpuFile>,
    ) -> Result<u32> {
        if args.pad != 0 {
            return Err(EINVAL);
        }
        dev.vgpu.ctx_destroy(&file.inner().client, args.ctx_id)?;
        Ok(0)
    }

    /// `DRM_IOCTL_VGPU_CTX_QUERY`.
    fn ctx_query(
        dev: &VgpuDrmDevice,
        args: &mut uapi::drm_vgpu_ctx_query,
        file: &drm::File<VgpuFile>,
    ) -> Result<u32> {
        let q = dev.vgpu.ctx_query(&file.inner().client, args.ctx_id)?;
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
        file: &drm::File<VgpuFile>,
    ) -> Result<u32> {
        dev.vgpu.fence_export(&file.inner().client, args)?;
        Ok(0)
    }

    /// `DRM_IOCTL_VGPU_SUBMIT`.
    fn submit(
        dev: &VgpuDrmDevice,
        args: &mut uapi::drm_vgpu_submit,
        file: &drm::File<VgpuFile>,
    ) -> Result<u32> {
        dev.vgpu.submit(&file.inner().client, args)?;
        Ok(0)
    }

    /// `DRM_IOCTL_VGPU_QUERY_STATS` ([`crate::stats`]).
    fn query_stats(
        dev: &VgpuDrmDevice,
        args: &mut uapi::drm_vgpu_query_stats,
        _file: &drm::File<VgpuFile>,
    ) -> Result<u32> {
        dev.vgpu.query_stats(args)?;
        Ok(0)
    }

    /// `DRM_IOCTL_VGPU_WAIT`.
    fn wait(
        dev: &VgpuDrmDevice,
        args: &mut uapi::drm_vgpu_wait,
        file: &drm::File<VgpuFile>,
    ) -> Result<u32> {
        dev.vgpu.wait(&file.inner().client, args)?;
        Ok(0)
    }
}

/// Creates and registers the device's render node. It is unregistered
/// automatically when the PCI device is unbound.
pub(crate) fn register(pdev: &pci::Device<Core<'_>>, vgpu: &Arc<Vgpu>) -> Result {
    let _ = vgpu.mem.populate(MemAccount::new()?);
    let data = Ok::<_, Error>(DrmData { vgpu: vgpu.clone() });
    let drm = drm::UnregisteredDevice::<VgpuDrm>::new(pdev.as_ref(), data)?;
    drm::Registration::new_foreign_owned(drm, pdev.as_ref(), 0)?;
    Ok(())
}
