// SPDX-License-Identifier: GPL-2.0

//! Interrupts.
//!
//! Preferred: two MSI-X vectors, vector 0 for configuration changes and the
//! control queue, vector 1 for the event queue. Fallbacks: one MSI-X vector
//! for everything, then the legacy INTx line (shared, acknowledged by
//! reading the ISR status byte).
//!
//! Handlers are threaded. The hard handler only acknowledges (INTx) and
//! counts; the work runs in the interrupt thread because it takes sleeping
//! locks shared with process context (the kernel's Rust API has no
//! interrupt-safe spinlock), wakes sleepers, and notifies the device. The
//! work per interrupt is bounded by the queue sizes.

use crate::{
    virtio::{
        ISR_CONFIG,
        ISR_QUEUE,
        MSI_NO_VECTOR, //
    },
    Vgpu,
};
use kernel::{
    device::{
        Bound,
        Core,
        Device, //
    },
    irq::{
        self,
        IrqReturn,
        ThreadedIrqReturn,
        ThreadedRegistration, //
    },
    pci,
    prelude::*,
    sync::{
        atomic::Relaxed,
        Arc, //
    },
};

/// How the device interrupts.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum IrqMode {
    /// MSI-X vector 0: configuration + control queue; vector 1: event queue.
    MsixSplit,
    /// One MSI-X vector for everything.
    MsixShared,
    /// The INTx line.
    Intx,
}

impl IrqMode {
    /// MSI-X vector for configuration changes.
    pub(crate) fn config_vector(self) -> u16 {
        match self {
            IrqMode::MsixSplit | IrqMode::MsixShared => 0,
            IrqMode::Intx => MSI_NO_VECTOR,
        }
    }

    /// MSI-X vector for the control queue.
    pub(crate) fn control_vector(self) -> u16 {
        self.config_vector()
    }

    /// MSI-X vector for the event queue.
    pub(crate) fn event_vector(self) -> u16 {
        match self {
            IrqMode::MsixSplit => 1,
            IrqMode::MsixShared => 0,
            IrqMode::Intx => MSI_NO_VECTOR,
        }
    }

    /// A short description.
    pub(crate) fn name(self) -> &'static str {
        match self {
            IrqMode::MsixSplit => "MSI-X, 2 vectors (config+control, events)",
            IrqMode::MsixShared => "MSI-X, 1 shared vector",
            IrqMode::Intx => "INTx (shared line, ISR acknowledge)",
        }
    }
}

/// What one interrupt line serves.
#[derive(Clone, Copy)]
enum Role {
    ConfigAndControl,
    Events,
    All,
    Intx,
}

/// One registered handler.
pub(crate) struct Handler {
    vgpu: Arc<Vgpu>,
    role: Role,
    /// Index into [`Vgpu::irq_count`].
    index: usize,
}

impl irq::ThreadedHandler for Handler {
    fn handle(&self, _dev: &Device<Bound>) -> ThreadedIrqReturn {
        if let Role::Intx = self.role {
            // Reading the ISR acknowledges the interrupt and deasserts the
            // line; zero means another device on the shared line.
            match self.vgpu.transport.read_isr() {
                Ok(isr) if isr != 0 => {
                    if isr & ISR_CONFIG != 0 {
                        self.vgpu.config_pending.store(true, Relaxed);
                    }
                    if isr & ISR_QUEUE != 0 {
                        self.vgpu.queue_pending.store(true, Relaxed);
                    }
                }
                _ => return ThreadedIrqReturn::None,
            }
        }
        self.vgpu.count_irq(self.index);
        ThreadedIrqReturn::WakeThread
    }

    fn handle_threaded(&self, _dev: &Device<Bound>) -> IrqReturn {
        let v = &self.vgpu;
        match self.role {
            Role::ConfigAndControl => {
                v.config_changed();
                v.control.wake();
            }
            Role::Events => v.process_events(),
            Role::All => {
                v.config_changed();
                v.control.wake();
                v.process_events();
            }
            Role::Intx => {
                if v.config_pending.xchg(false, Relaxed) {
                    v.config_changed();
                }
                if v.queue_pending.xchg(false, Relaxed) {
                    v.control.wake();
                    v.process_events();
                }
            }
        }
        IrqReturn::Handled
    }
}

/// Registered interrupt handlers; freed (after waiting for running handlers)
/// when dropped.
pub(crate) type Registrations = KVec<Pin<KBox<ThreadedRegistration<Handler>>>>;

/// Allocates interrupt vectors and registers the handlers into `regs`.
pub(crate) fn setup(
    pdev: &pci::Device<Core<'_>>,
    vgpu: &Arc<Vgpu>,
    force_intx: bool,
    regs: &mut Registrations,
) -> Result<IrqMode> {
    let msix = pci::IrqTypes::default().with(pci::IrqType::MsiX);
    if !force_intx {
        if let Ok(v) = pdev.alloc_irq_vectors(2, 2, msix) {
            register(pdev, *v.start(), vgpu, Role::ConfigAndControl, 0, irq::Flags::TRIGGER_NONE, regs)?;
            register(pdev, *v.end(), vgpu, Role::Events, 1, irq::Flags::TRIGGER_NONE, regs)?;
            return Ok(IrqMode::MsixSplit);
        }
        if let Ok(v) = pdev.alloc_irq_vectors(1, 1, msix) {
            register(pdev, *v.start(), vgpu, Role::All, 0, irq::Flags::TRIGGER_NONE, regs)?;
            return Ok(IrqMode::MsixShared);
        }
        dev_info!(pdev, "MSI-X unavailable, using INTx\n");
    }
    let intx = pci::IrqTypes::default().with(pci::IrqType::Intx);
    let v = pdev.alloc_irq_vectors(1, 1, intx)?;
    register(pdev, *v.start(), vgpu, Role::Intx, 0, irq::Flags::SHARED, regs)?;
    Ok(IrqMode::Intx)
}

fn register<'a>(
    pdev: &'a pci::Device<Core<'_>>,
    vector: pci::IrqVector<'a>,
    vgpu: &Arc<Vgpu>,
    role: Role,
    index: usize,
    flags: irq::Flags,
    regs: &mut Registrations,
) -> Result {
    let handler = Handler {
        vgpu: vgpu.clone(),
        role,
        index,
    };
    let reg = KBox::pin_init(
        pdev.request_threaded_irq(vector, flags, c"vgpu", Ok::<_, Error>(handler)),
        GFP_KERNEL,
    )?;
    regs.push(reg, GFP_KERNEL)?;
    Ok(())
}
