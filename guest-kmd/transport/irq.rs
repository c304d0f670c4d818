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
//!
//! The handlers call the driver back through [`IrqTarget`]: this block knows
//! only the [`Link`] (to acknowledge and count) and what each line serves.

use super::{
    link::Link,
    virtio::{
        ISR_CONFIG,
        ISR_QUEUE,
        MSI_NO_VECTOR, //
    },
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

/// What the interrupt threads call: implemented by the driver's device.
pub(crate) trait IrqTarget: Send + Sync + 'static {
    /// The link whose ISR the INTx handler reads and whose counters count.
    fn link(&self) -> &Link;
    /// The configuration may have changed (device status).
    fn config_changed(&self);
    /// The control queue may have completed commands.
    fn control_used(&self);
    /// The event queue may hold records.
    fn events_used(&self);
}

/// One registered handler.
pub(crate) struct Handler<T: IrqTarget> {
    target: Arc<T>,
    role: Role,
    /// Index into the link's interrupt counters.
    index: usize,
}

impl<T: IrqTarget> irq::ThreadedHandler for Handler<T> {
    fn handle(&self, _dev: &Device<Bound>) -> ThreadedIrqReturn {
        let link = self.target.link();
        if let Role::Intx = self.role {
            // Reading the ISR acknowledges the interrupt and deasserts the
            // line; zero means another device on the shared line.
            match link.transport.read_isr() {
                Ok(isr) if isr != 0 => {
                    if isr & ISR_CONFIG != 0 {
                        link.config_pending.store(true, Relaxed);
                    }
                    if isr & ISR_QUEUE != 0 {
                        link.queue_pending.store(true, Relaxed);
                    }
                }
                _ => return ThreadedIrqReturn::None,
            }
        }
        link.count_irq(self.index);
        ThreadedIrqReturn::WakeThread
    }

    fn handle_threaded(&self, _dev: &Device<Bound>) -> IrqReturn {
        let t = &self.target;
        match self.role {
            Role::ConfigAndControl => {
                t.config_changed();
                t.control_used();
            }
            Role::Events => t.events_used(),
            Role::All => {
                t.config_changed();
                t.control_used();
                t.events_used();
            }
            Role::Intx => {
                let link = t.link();
                if link.config_pending.xchg(false, Relaxed) {
                    t.config_changed();
                }
                if link.queue_pending.xchg(false, Relaxed) {
                    t.control_used();
                    t.events_used();
                }
            }
        }
        IrqReturn::Handled
    }
}

/// Registered interrupt handlers; freed (after waiting for running handlers)
/// when dropped.
pub(crate) type Registrations<T> = KVec<Pin<KBox<ThreadedRegistration<Handler<T>>>>>;

/// Allocates interrupt vectors and registers the handlers into `regs`.
///
/// # Errors
///
/// The errno of a failed vector allocation or registration.
pub(crate) fn setup<T: IrqTarget>(
    pdev: &pci::Device<Core<'_>>,
    vgpu: &Arc<T>,
    force_intx: bool,
    regs: &mut Registrations<T>,
) -> Result<IrqMode> {
    let msix = pci::IrqTypes::default().with(pci::IrqType::MsiX);
    if !force_intx {
        if let Ok(v) = pdev.alloc_irq_vectors(2, 2, msix) {
            register(
                pdev,
                *v.start(),
                vgpu,
                Role::ConfigAndControl,
                0,
                irq::Flags::TRIGGER_NONE,
                regs,
            )?;
            register(
                pdev,
                *v.end(),
                vgpu,
                Role::Events,
                1,
                irq::Flags::TRIGGER_NONE,
                regs,
            )?;
            return Ok(IrqMode::MsixSplit);
        }
        if let Ok(v) = pdev.alloc_irq_vectors(1, 1, msix) {
            register(
                pdev,
                *v.start(),
                vgpu,
                Role::All,
                0,
                irq::Flags::TRIGGER_NONE,
                regs,
            )?;
            return Ok(IrqMode::MsixShared);
        }
        dev_info!(pdev, "MSI-X unavailable, using INTx\n");
    }
    let intx = pci::IrqTypes::default().with(pci::IrqType::Intx);
    let v = pdev.alloc_irq_vectors(1, 1, intx)?;
    register(
        pdev,
        *v.start(),
        vgpu,
        Role::Intx,
        0,
        irq::Flags::SHARED,
        regs,
    )?;
    Ok(IrqMode::Intx)
}

fn register<'a, T: IrqTarget>(
    pdev: &'a pci::Device<Core<'_>>,
    vector: pci::IrqVector<'a>,
    vgpu: &Arc<T>,
    role: Role,
    index: usize,
    flags: irq::Flags,
    regs: &mut Registrations<T>,
) -> Result {
    let handler = Handler {
        target: vgpu.clone(),
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
