// SPDX-License-Identifier: GPL-2.0

//! vgpu: the kernel driver of the vgpu virtual GPU.
//!
//! The device is a virtio PCI function (1af4:1050) with a control queue and
//! an event queue (see [`proto`] and [`event`]). This driver implements the
//! virtio-pci modern transport itself and exposes the GPU as a DRM render
//! node.
//!
//! Blocks, from the top down (each imports only blocks below it):
//!
//! * this file: the module, its parameters, the PCI driver (probe, unbind,
//!   function reset).
//! * [`drm`]: the DRM driver, its ioctl table, its file and GEM object types.
//! * [`debugfs`]: `/sys/kernel/debug/vgpu/<pci-name>/`, reading every block.
//! * [`stats`]: the snapshots and counters of `QUERY_STATS`.
//! * [`placement`]: where buffer objects go (VRAM or system memory) and
//!   eviction from VRAM on the copy engine.
//! * [`sleep`], [`d3cold`]: system suspend to RAM and runtime suspension
//!   with VRAM off: VRAM objects saved to their system pages and copied
//!   back.
//! * [`device`]: [`device::Vgpu`], what everything that uses one device
//!   shares; `GET_PARAM`, `PING`, open files, teardown.
//! * [`watchdog`]: a periodic check in process context (a leaf, called back
//!   through a trait).
//! * [`gpu`]: contexts, rings, submission, fences, faults, hangs, resets —
//!   a folder of blocks, the twin of the device's `core/`.
//! * [`file`]: what an open file owns (its address space, its memory).
//! * [`vm`], [`vm_ops`], [`pagetable`], [`gem`], [`gem_vram`], [`vram_mgr`],
//!   [`ptpool`], [`ras`], [`placement`], [`restore`]: GPU
//!   address spaces (on DRM GPUVM) and their map/unmap requests, their page
//!   tables, buffer objects (VRAM objects' CPU mappings), the VRAM manager
//!   (on the kernel's buddy allocator), placement and eviction, evicted objects moved back, the
//!   page-table pool, retired pages; [`sanmem`]: that memory declared to
//!   the device's sanitizer.
//! * [`transport`]: the virtio-pci transport, the control and event queues,
//!   interrupts.
//! * [`ffi`], [`ffi_sync`], [`ffi_gpuvm`], [`params`], [`ratelimit`],
//!   [`uarray`], [`time`], [`errno`]: kernel C APIs behind safe wrappers
//!   (fences, sync objects, reservations, GPUVM lookups), the module parameters,
//!   rate-limited messages, typed user arrays, time and errno helpers.
//! * [`inject`]: named fault-injection points at the driver's own failure
//!   sites (the kernel's `fault_attr` framework, debugfs `vgpu_fail/`).
//!
//! The hardware interface ([`pod`], [`proto`], [`event`], [`mmu`],
//! [`packet`], [`layout`], [`sanitize`], [`describe`]) is the very same
//! source as the `vgpu-hwif` crate
//! used by the device and by userspace, compiled here with the kernel's
//! compiler flags.
//!
//! The rule, checked by `scripts/deps` (scripts/test): each block imports only the blocks
//! its row names, and no two files import each other through a cycle.
//!
//! | block | may use |
//! |---|---|
//! | `debugfs` | `device`, `gem`, `gpu`, `hostmem`, `ktrace`, `layout`, `mmu`, `proto`, `selftest`, `stats`, `transport`, `vram` |
//! | `drm` | `device`, `ffi`, `ffi_gpuvm`, `ffi_sync`, `file`, `gem`, `gem_vram`, `gpu`, `hostmem`, `placement`, `restore`, `stats`, `uarray`, `vm`, `vm_ops` |
//! | `d3cold` | `device`, `gem`, `gpu`, `params`, `ratelimit` |
//! | `sleep` | `device`, `file`, `gem`, `gpu`, `params`, `ratelimit`, `sanmem`, `time` |
//! | `restore` | `device`, `ffi`, `file`, `gem`, `gpu`, `params`, `ratelimit`, `sanmem`, `vram_mgr` |
//! | `placement` | `device`, `file`, `gem`, `gpu`, `params`, `ratelimit`, `sanmem`, `vm`, `vram_mgr` |
//! | `stats` | `device`, `errno`, `ffi`, `file`, `gpu`, `mmu`, `params`, `proto`, `uarray` |
//! | `device` | `errno`, `ffi`, `file`, `gem`, `gpu`, `layout`, `params`, `proto`, `ptpool`, `ras`, `ratelimit`, `sanmem`, `time`, `transport`, `vm`, `vram_mgr`, `watchdog` |
//! | `gpu` | `capture`, `coredump`, `describe`, `errno`, `event`, `ffi`, `ffi_sync`, `file`, `firmware`, `gem`, `hostmem`, `ktrace`, `mmu`, `packet`, `params`, `pod`, `proto`, `ptpool`, `ras`, `ratelimit`, `sanitize`, `time`, `transport`, `uarray`, `vm`, `vm_ops`, `vram`, `vram_mgr` |
//! | `file` | `ffi`, `gem`, `hostmem`, `proto`, `vm`, `vram_mgr` |
//! | `hostmem` | `gem`, `mmu`, `pagetable`, `sanmem`, `vm` |
//! | `vm_ops` | `ffi_gpuvm`, `gem`, `mmu`, `ratelimit`, `sanmem`, `vm` |
//! | `vm` | `ffi_gpuvm`, `gem`, `mmu`, `pagetable`, `ptpool`, `ras`, `ratelimit`, `sanmem` |
//! | `pagetable` | `gem`, `mmu`, `ptpool`, `ras` |
//! | `sanmem` | `gem`, `proto`, `ratelimit`, `sanitize`, `transport` |
//! | `ras` | `gem` |
//! | `transport` | `errno`, `event`, `ffi`, `firmware`, `inject`, `ktrace`, `layout`, `params`, `pod`, `proto`, `ratelimit`, `time`, `vram` |
//! | `gem_vram` | `errno`, `gem` |
//! | `gem` | `ffi`, `inject`, `ratelimit`, `vram_mgr` |
//! | `vram_mgr` | `inject`, `vram` |
//! | `layout` | `event`, `pod`, `proto`, `sanitize` |
//! | `ktrace` | `ffi` |
//! | `proto` | `limits`, `pod`, `reply`, `sanitize` |
//! | `reply` | `limits`, `pod`, `sanitize`, `vram` |
//! | `ratelimit` | `ffi` |
//! | `watchdog` | `ffi` |
//! | `capture` | `mmu`, `pod` |
//! | `describe` | `mmu`, `packet` |
//! | `event` | `pod` |
//! | `ffi` | `ffi_sync` |
//! | `ptpool` | `inject`, `mmu` |
//! | `vram` | `mmu` |
//! | `sanitize` | `pod` |
//! | `firmware` | `pod` |
//! | `coredump` | - |
//! | `errno` | - |
//! | `limits` | - |
//! | `ffi_gpuvm` | - |
//! | `inject` | - |
//! | `ffi_sync` | - |
//! | `mmu` | - |
//! | `packet` | - |
//! | `params` | - |
//! | `pod` | - |
//! | `selftest` | - |
//! | `time` | - |
//! | `uarray` | - |

use kernel::{
    device::Core,
    pci,
    prelude::*,
    sync::Arc, //
};

mod d3cold;
mod debugfs;
mod device;
mod drm;
mod errno;
mod ffi;
mod ffi_gpuvm;
mod ffi_sync;
mod file;
mod gem;
mod gem_vram;
mod gpu;
mod hostmem;
mod inject;
mod ktrace;
mod pagetable;
mod params;
mod placement;
mod ptpool;
mod ras;
mod ratelimit;
mod restore;
mod sanmem;
#[cfg(CONFIG_KASAN)]
mod selftest;
mod sleep;
mod stats;
mod time;
mod transport;
mod uarray;
mod vm;
mod vm_ops;
mod vram_mgr;
mod watchdog;

// The hardware interface, shared with the device and userspace. The files
// refer to each other as `super::<module>`, so they are siblings here. They
// are a library: the driver uses only part of it, and its `pub` items are not
// exported from this module.

/// Plain-old-data shared structs (from `hwif/src/pod.rs`).
#[allow(dead_code, unreachable_pub)]
#[path = "../hwif/src/pod.rs"]
mod pod;

/// The interface's numbers and limits (from `hwif/src/limits.rs`).
#[allow(dead_code, unreachable_pub)]
#[path = "../hwif/src/limits.rs"]
mod limits;

/// Control commands (from `hwif/src/proto.rs`), with the replies and
/// limits re-exported.
#[allow(dead_code, unreachable_pub)]
#[path = "../hwif/src/proto.rs"]
mod proto;

/// Reply status, replies and the ring blocks (from `hwif/src/reply.rs`).
#[allow(dead_code, unreachable_pub)]
#[path = "../hwif/src/reply.rs"]
mod reply;

/// The firmware image format, its checks and the boot states (from
/// `hwif/src/firmware.rs`).
#[allow(dead_code, unreachable_pub)]
#[path = "../hwif/src/firmware.rs"]
mod firmware;

/// Event records (from `hwif/src/event.rs`).
///
/// `Event::to_record(&self)` is the device's encoder; its name follows the
/// hwif crate's conventions, hence `wrong_self_convention`.
#[allow(dead_code, unreachable_pub, clippy::wrong_self_convention)]
#[path = "../hwif/src/event.rs"]
mod event;

/// The GPU MMU page-table format (from `hwif/src/mmu.rs`).
#[allow(dead_code, unreachable_pub)]
#[path = "../hwif/src/mmu.rs"]
mod mmu;

/// Device memory: its layout and reset states (from
/// `hwif/src/vram.rs`).
#[allow(dead_code, unreachable_pub)]
#[path = "../hwif/src/vram.rs"]
mod vram;

/// Ring and command-buffer packets (from `hwif/src/packet.rs`).
///
/// Its `COPY_2D` size check widens with `as` casts, which the kernel's
/// `cast_lossless` lint flags.
#[allow(dead_code, unreachable_pub, clippy::cast_lossless)]
#[path = "../hwif/src/packet.rs"]
mod packet;

/// The device capture's format (from `hwif/src/capture.rs`): its reasons.
#[allow(dead_code, unreachable_pub)]
#[path = "../hwif/src/capture.rs"]
mod capture;

/// The devcoredump's format (from `hwif/src/coredump.rs`).
#[allow(dead_code, unreachable_pub)]
#[path = "../hwif/src/coredump.rs"]
mod coredump;

/// The layout table and its fingerprint (from `hwif/src/layout.rs`).
#[allow(dead_code, unreachable_pub)]
#[path = "../hwif/src/layout.rs"]
mod layout;

/// The driver sanitizer's checks, reports and commands (from
/// `hwif/src/sanitize.rs`).
#[allow(dead_code, unreachable_pub)]
#[path = "../hwif/src/sanitize.rs"]
mod sanitize;

/// Packets, engine errors and fault reasons as text (from
/// `hwif/src/describe.rs`).
#[allow(dead_code, unreachable_pub)]
#[path = "../hwif/src/describe.rs"]
mod describe;

use device::Vgpu;
use transport::{irq::Registrations, Hw};

module! {
    type: VgpuModule,
    name: "vgpu",
    authors: ["The vgpu authors"],
    description: "vgpu virtual GPU driver (virtio-pci transport, DRM render node)",
    license: "GPL",
    params: {
        cmd_timeout_ms: u32 {
            default: 2000,
            description: "Control command timeout in milliseconds (1..=60000)",
        },
        pt_pool_kib: u32 {
            default: 8192,
            description: "Page-table memory per device in KiB, in 2 MiB chunks (2048..=262144)",
        },
        job_timeout_ms: u32 {
            default: 5000,
            description: "A ring that completes no job for this long is hung (100..=600000 ms)",
        },
        ban_hangs: u32 {
            default: 3,
            description: "Hangs within ban_window_ms after which a context is banned (1..=1000)",
        },
        ban_window_ms: u32 {
            default: 60000,
            description: "Window in which ban_hangs hangs ban a context (ms, 1000..=3600000)",
        },
        gem_limit_mib: u32 {
            default: 0,
            description: "GEM memory of all files in MiB (0: half of the guest's RAM); GEM_CREATE past it fails with ENOMEM",
        },
        file_gem_limit_mib: u32 {
            default: 0,
            description: "GEM memory per open file in MiB (0: the device's limit); GEM_CREATE past it fails with ENOSPC",
        },
        ras_max_pages: u32 {
            default: 16,
            description: "Pages retired after uncorrectable ECC errors at which the device is declared bad (1..=256)",
        },
        force_intx: u32 {
            default: 0,
            description: "Non-zero: use the legacy INTx interrupt even if MSI-X is available",
        },
        coredump: u32 {
            default: 1,
            description: "Non-zero: a devcoredump for every hang, aborted fault and engine error (0: none, and no device capture at a hang)",
        },
        fw_boot_timeout_ms: u32 {
            default: 1000,
            description: "How long the driver waits for the firmware to boot, in ms (10..=60000); the image itself: parameter firmware",
        },
        autosuspend_ms: u32 {
            default: 0,
            description: "Suspend an idle device (no job, no user-mode queue) after this many ms (0: never; 10..=600000); it resumes at the next use",
        },
        vram_d3cold_threshold_mib: u32 {
            default: 0,
            description: "A runtime suspension powers VRAM off (D3cold, its objects saved to system memory) when VRAM objects use at most this many MiB and none is CPU-mapped; D3hot otherwise (0: always D3hot)",
        },
        trace_records: u32 {
            default: 0,
            description: "Non-zero: trace the driver from probe into a buffer of this many records (64..=262144; debugfs trace, trace_ctl)",
        },
    },
}

/// The module: the PCI driver registration, the debugfs root directory and
/// the fault-injection points' knobs.
///
/// Fields drop in declaration order: the driver is unregistered (every
/// device unbound) before the debugfs root goes away.
#[pin_data]
struct VgpuModule {
    #[pin]
    _driver: kernel::driver::Registration<pci::Adapter<VgpuPciDriver>>,
    _debugfs: debugfs::Root,
    _inject: inject::Points,
}

impl kernel::InPlaceModule for VgpuModule {
    fn init(module: &'static kernel::ThisModule) -> impl PinInit<Self, Error> {
        ffi::set_this_module(module);
        params::set(params::Params {
            cmd_timeout_ms: *module_parameters::cmd_timeout_ms.value(),
            pt_pool_kib: *module_parameters::pt_pool_kib.value(),
            job_timeout_ms: *module_parameters::job_timeout_ms.value(),
            ban_hangs: *module_parameters::ban_hangs.value(),
            ban_window_ms: *module_parameters::ban_window_ms.value(),
            force_intx: *module_parameters::force_intx.value(),
            gem_limit_mib: *module_parameters::gem_limit_mib.value(),
            file_gem_limit_mib: *module_parameters::file_gem_limit_mib.value(),
            ras_max_pages: *module_parameters::ras_max_pages.value(),
            coredump: *module_parameters::coredump.value(),
            trace_records: *module_parameters::trace_records.value(),
            fw_boot_timeout_ms: *module_parameters::fw_boot_timeout_ms.value(),
            autosuspend_ms: *module_parameters::autosuspend_ms.value(),
            vram_d3cold_threshold_mib: *module_parameters::vram_d3cold_threshold_mib.value(),
        });
        try_pin_init!(Self {
            _inject: inject::Points::create(),
            _debugfs: debugfs::Root::create(),
            _driver <- kernel::driver::Registration::new(
                <Self as kernel::ModuleMetadata>::NAME,
                module,
            ),
        })
    }
}

/// The PCI driver.
struct VgpuPciDriver;

// The kernel's vendor constant is the vendor id the hardware interface names.
const _: () = assert!(pci::Vendor::REDHAT_QUMRANET.as_raw() == proto::PCI_VENDOR_ID);

kernel::pci_device_table!(
    PCI_TABLE,
    MODULE_PCI_TABLE,
    <VgpuPciDriver as pci::Driver>::IdInfo,
    [(
        pci::DeviceId::from_id(pci::Vendor::REDHAT_QUMRANET, proto::PCI_DEVICE_ID as u32),
        ()
    )]
);

impl pci::Driver for VgpuPciDriver {
    type IdInfo = ();
    type Data<'bound> = Binding;
    const ID_TABLE: pci::IdTable<Self::IdInfo> = &PCI_TABLE;

    fn probe<'bound>(
        pdev: &'bound pci::Device<Core<'_>>,
        _info: &'bound Self::IdInfo,
    ) -> impl PinInit<Self::Data<'bound>, Error> + 'bound {
        Binding::probe(pdev)
    }

    fn unbind<'bound>(pdev: &'bound pci::Device<Core<'_>>, this: Pin<&Self::Data<'bound>>) {
        // Quiesce the device (status 0) and free its rings while the BARs
        // and interrupt vectors are still there; the interrupt handlers go
        // when the binding is dropped, the render node and the BAR mappings
        // after that (device-managed resources).
        let vgpu: &Arc<Vgpu> = this.vgpu();
        vgpu.shutdown();
        // Files still open keep their BOs; the device's DMA mappings of
        // them go now (their pages stay until the BOs are freed).
        let unmapped = this.bos.unmap_all();
        if unmapped > 0 {
            dev_info!(pdev, "{} buffer mappings released at unbind\n", unmapped);
        }
        // An unread devcoredump goes with the binding.
        ffi::remove_coredump(pdev.as_ref());
        dev_info!(pdev, "device quiesced and unbound\n");
    }

    fn reset_prepare<'bound>(_pdev: &'bound pci::Device<Core<'_>>, this: Pin<&Self::Data<'bound>>) {
        this.vgpu().function_reset_prepare();
    }

    fn reset_done<'bound>(pdev: &'bound pci::Device<Core<'_>>, this: Pin<&Self::Data<'bound>>) {
        this.vgpu().function_reset_done(pdev);
    }

    fn suspend<'bound>(
        pdev: &'bound pci::Device<Core<'_>>,
        this: Pin<&Self::Data<'bound>>,
    ) -> Result {
        this.vgpu().system_suspend(pdev)
    }

    fn resume<'bound>(
        pdev: &'bound pci::Device<Core<'_>>,
        this: Pin<&Self::Data<'bound>>,
    ) -> Result {
        this.vgpu().system_resume(pdev)
    }
}

/// What the PCI driver keeps per bound device.
///
/// Dropped after [`pci::Driver::unbind`] has run [`Vgpu::shutdown`]: the
/// interrupt handlers are freed first (waiting for running ones), then the
/// debugfs directory. A binding can also be dropped without an unbind: when
/// the PCI core fails to store it after a successful [`Binding::probe`] (an
/// allocation failure), the probe fails and nothing calls `unbind`; its
/// `Drop` then shuts the device down itself, or the watchdog, which holds
/// the device state, would keep firing after the module is gone.
struct Binding {
    vgpu: Arc<Vgpu>,
    /// The render node's BOs, whose DMA mappings go at unbind.
    bos: Arc<gem::BoRegistry>,
    _irqs: Registrations<Vgpu>,
    _debugfs: Option<Pin<KBox<debugfs::DeviceDir>>>,
}

impl Drop for Binding {
    fn drop(&mut self) {
        // Idempotent: after an unbind, both find nothing left to do. Before
        // the fields go: the device is quiesced before its interrupt
        // handlers are freed.
        self.vgpu.shutdown();
        self.bos.unmap_all();
    }
}

impl Binding {
    /// The shared device state.
    fn vgpu(&self) -> &Arc<Vgpu> {
        &self.vgpu
    }

    /// Brings the device up and registers its render node: transport
    /// (features, queues, interrupts, `IDENTIFY`), memory sized by the
    /// device, the watchdog, debugfs, then the render node.
    fn probe(pdev: &pci::Device<Core<'_>>) -> Result<Binding> {
        pdev.enable_device_mem()?;
        pdev.set_master();
        // SAFETY: Nothing has allocated or mapped DMA memory for this device
        // yet, and nothing else runs on it during probe.
        unsafe {
            kernel::dma::Device::dma_set_mask_and_coherent(pdev, kernel::dma::DmaMask::new::<64>())?
        };
        // The device takes segments of any length (a BO's 2 MiB folios are
        // mapped as single segments); the PCI default claims 64 KiB, which
        // the DMA API's debugging reports for every such mapping.
        // SAFETY: As above: no DMA allocation or mapping yet, nothing else
        // runs on the device during probe.
        unsafe { kernel::dma::Device::dma_set_max_seg_size(pdev, u32::MAX) };

        let hw = Hw::new(pdev, params::cmd_timeout_ms())?;
        let vgpu = Vgpu::new(hw)?;
        let mut irqs = Registrations::new();
        let up = (|| {
            let id = vgpu
                .hw
                .bring_up(pdev, &vgpu, params::force_intx(), &mut irqs)?;
            vgpu.init_memory(pdev.as_ref())?;
            vgpu.start_trace();
            vgpu.start_watchdog()?;
            let dir = debugfs::create(pdev, &vgpu)?;
            let bos = drm::register(pdev, &vgpu)?;
            Ok::<_, Error>((id, dir, bos))
        })();
        match up {
            Ok((id, debugfs, bos)) => {
                let s = vgpu.hw.setup.as_ref();
                dev_info!(
                    pdev,
                    "vgpu gen {}, protocol {}.{}, firmware {}.{}.{}: engines {:#x}, {} compute units, \
                     {}-bit VA, page sizes {:#x}, {} contexts, rings {}..{} bytes; {}, queues {}+{}\n",
                    id.generation,
                    id.protocol_version >> 16,
                    id.protocol_version & 0xffff,
                    id.firmware_version >> 16,
                    (id.firmware_version >> 8) & 0xff,
                    id.firmware_version & 0xff,
                    id.engine_mask,
                    id.compute_units,
                    id.va_bits,
                    id.page_sizes,
                    id.max_contexts,
                    id.min_ring_size,
                    id.max_ring_size,
                    s.map_or("?", |s| s.irq.name()),
                    s.map_or(0, |s| s.control_size),
                    s.map_or(0, |s| s.event_size)
                );
                Ok(Binding {
                    vgpu,
                    bos,
                    _irqs: irqs,
                    _debugfs: debugfs,
                })
            }
            Err(e) => {
                // Reset before the interrupt handlers and the rings go.
                vgpu.shutdown();
                drop(irqs);
                Err(e)
            }
        }
    }
}
