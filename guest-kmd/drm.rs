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

use crate::{
    device::PING_DEFAULT_TIMEOUT_NS,
    Vgpu,
};
use kernel::{
    bindings,
    device::Core,
    drm::{
        self,
        gem,
        ioctl, //
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

/// Per-open-file data.
pub(crate) struct VgpuFile {
    _module: ModuleRef,
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

/// Driver data of a GEM object. DRM requires a GEM object type; no ioctl
/// creates buffer objects yet.
#[pin_data]
pub(crate) struct VgpuObject {}

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
    type Object<Ctx: drm::DeviceContext> = gem::Object<VgpuObject, Ctx>;

    const INFO: drm::DriverInfo = INFO;
    const FEAT_RENDER: bool = true;

    kernel::declare_drm_ioctls! {
        (VGPU_GET_PARAM, drm_vgpu_get_param, ioctl::RENDER_ALLOW, VgpuFile::get_param),
        (VGPU_PING, drm_vgpu_ping, ioctl::RENDER_ALLOW, VgpuFile::ping),
    }
}

impl gem::DriverObject for VgpuObject {
    type Driver = VgpuDrm;
    type Args = ();

    fn new<Ctx: drm::DeviceContext>(
        _dev: &VgpuDrmDevice<Ctx>,
        _size: usize,
        _args: (),
    ) -> impl PinInit<Self, Error> {
        try_pin_init!(VgpuObject {})
    }
}

impl drm::file::DriverFile for VgpuFile {
    type Driver = VgpuDrm;

    fn open(_dev: &VgpuDrmDevice) -> Result<Pin<KBox<Self>>> {
        let file = VgpuFile {
            _module: ModuleRef::get()?,
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

/// Creates and registers the device's render node. It is unregistered
/// automatically when the PCI device is unbound.
pub(crate) fn register(pdev: &pci::Device<Core<'_>>, vgpu: &Arc<Vgpu>) -> Result {
    let data = Ok::<_, Error>(DrmData { vgpu: vgpu.clone() });
    let drm = drm::UnregisteredDevice::<VgpuDrm>::new(pdev.as_ref(), data)?;
    drm::Registration::new_foreign_owned(drm, pdev.as_ref(), 0)?;
    Ok(())
}
