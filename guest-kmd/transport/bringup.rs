// SPDX-License-Identifier: GPL-2.0

//! Bringing the device up and down: at probe ([`Hw::bring_up`]), at unbind
//! ([`Hw::quiesce`]), and around a PCI function reset ([`Hw::go_offline`]
//! before it, [`Hw::restart`] after it).
//!
//! At probe the device is in its boot state: the driver identifies it, loads
//! its firmware ([`super::firmware`]) and identifies it again.
//!
//! A function reset (FLR, a bus reset: `echo 1 > /sys/bus/pci/devices/*/reset`,
//! VFIO) resets the virtio function, which the device takes as a virtio reset
//! (docs/hardware.md, 11.2): every context and ring gone, VRAM as
//! `--vram-on-reset` says, the firmware back in its boot state (the driver
//! loads it again before it opens the gate). Before it the driver goes
//! *offline*: no new command starts ([`Hw::command`] waits at the gate, up
//! to [`GATE_WAIT_MS`]; anything else sees `EAGAIN`), the command in flight
//! finishes, the device is reset and its queues freed. After it the PCI core has restored the config space (MSI-X
//! included, so the interrupt vectors stay); the driver negotiates the same
//! features again, sets up new queues on the same vectors, checks that
//! `IDENTIFY` still describes the same device, and opens the gate. A broken or
//! lost device that answers again this way is usable again: a function reset
//! is also how a driver recovers one without a rebind.

use super::{
    control::{
        ControlQueue,
        CONTROL_QUEUE_MAX, //
    },
    events::{
        EventQueue,
        EVENT_QUEUE_MAX, //
    },
    irq::{
        self,
        IrqMode,
        IrqTarget,
        Registrations, //
    },
    queue_size,
    virtio::{
        feature,
        status,
        QueueConfig,
        StatusBits, //
    },
    Hw, Setup,
};
use crate::{
    errno,
    event::EVENT_RECORD_SIZE,
    layout,
    proto::{
        Command,
        IdentifyReply,
        IDENTIFY_MAGIC,
        NUM_QUEUES,
        PROTOCOL_MAJOR,
        QUEUE_CONTROL,
        QUEUE_EVENT, //
    },
    time::elapsed_ns, //
};
use kernel::{
    device::Core,
    pci,
    prelude::*,
    sync::{
        Arc,
        CondVarTimeoutResult, //
    },
    time::{
        Instant,
        Monotonic, //
    },
};

/// How long a command waits for the gate to open again during a function
/// reset before it fails with `EAGAIN`: 10 s.
pub(crate) const GATE_WAIT_MS: u64 = 10_000;

/// What feature negotiation settled (the first half of a bring-up).
struct Negotiated {
    offered: u64,
    accepted: u64,
    max_sizes: [u16; NUM_QUEUES],
    control_size: u16,
    event_size: u16,
}

impl Hw {
    /// Brings the device up: reset, features, queues, interrupts (handlers
    /// calling `target`, registered into `irqs`), `DRIVER_OK`, then
    /// `IDENTIFY`, whose reply must match this driver.
    ///
    /// # Errors
    ///
    /// `ENODEV` (not a usable vgpu device), `EPROTO` (protocol, layout or
    /// record size mismatch), `EBUSY` (the device refused an MSI-X vector),
    /// `EIO` (the device did not accept `DRIVER_OK`), or the errno of a
    /// failed register access, allocation or command.
    pub(crate) fn bring_up<T: IrqTarget>(
        &self,
        pdev: &pci::Device<Core<'_>>,
        target: &Arc<T>,
        force_intx: bool,
        irqs: &mut Registrations<T>,
    ) -> Result<IdentifyReply> {
        let n = self.negotiate(pdev)?;
        // Interrupts, then the queues that use them.
        let mode = irq::setup(pdev, target, force_intx, irqs)?;
        self.setup.populate(Setup {
            device_features: n.offered,
            driver_features: n.accepted,
            control_size: n.control_size,
            event_size: n.event_size,
            max_sizes: n.max_sizes,
            irq: mode,
        });
        self.start_queues(pdev, mode, n.control_size, n.event_size)?;
        // The device powers on in its boot state: IDENTIFY names its
        // generation, whose firmware is loaded; the identity kept is the
        // running firmware's.
        let boot = self.identify_checked()?;
        self.fetch_firmware(pdev.as_ref(), boot.generation)?;
        self.boot_firmware(&|c| self.command_ungated(c))?;
        let id = self.identify()?;
        if let Some(m) = self.discover_memory(&id) {
            self.memory.populate(m);
        }
        Ok(id)
    }

    /// Reset, `ACKNOWLEDGE`, `DRIVER`, the features (`VERSION_1` required,
    /// nothing beyond what this driver implements accepted), `FEATURES_OK`,
    /// and the queue sizes.
    ///
    /// # Errors
    ///
    /// `ENODEV` (no `VERSION_1`, features refused, too few or unusable
    /// queues), or the errno of a register access.
    fn negotiate(&self, pdev: &pci::Device<Core<'_>>) -> Result<Negotiated> {
        let t = &self.link.transport;

        t.reset().inspect_err(|e| {
            dev_err!(
                pdev,
                "device reset did not complete: error {}\n",
                e.to_errno()
            )
        })?;
        t.add_status(status::ACKNOWLEDGE)?;
        t.add_status(status::DRIVER)?;

        let offered = t.device_features()?;
        if offered & feature::VERSION_1 == 0 {
            dev_err!(
                pdev,
                "device does not offer VIRTIO_F_VERSION_1 (features {:#x})\n",
                offered
            );
            return Err(ENODEV);
        }
        let accepted = offered & feature::SUPPORTED;
        t.set_driver_features(accepted)?;
        t.add_status(status::FEATURES_OK)?;
        let st = t.status()?;
        if st & status::FEATURES_OK == 0 {
            dev_err!(
                pdev,
                "device rejected features {:#x} (status {})\n",
                accepted,
                StatusBits(st)
            );
            return Err(ENODEV);
        }

        let nq = t.num_queues()?;
        if usize::from(nq) < NUM_QUEUES {
            dev_err!(
                pdev,
                "device has {} virtqueues, {} needed\n",
                nq,
                NUM_QUEUES
            );
            return Err(ENODEV);
        }
        let max_sizes = [
            t.queue_max_size(QUEUE_CONTROL)?,
            t.queue_max_size(QUEUE_EVENT)?,
        ];
        let (Some(control_size), Some(event_size)) = (
            queue_size(max_sizes[0], CONTROL_QUEUE_MAX, 2),
            queue_size(max_sizes[1], EVENT_QUEUE_MAX, 1),
        ) else {
            dev_err!(
                pdev,
                "unusable queue sizes: control {}, event {}\n",
                max_sizes[0],
                max_sizes[1]
            );
            return Err(ENODEV);
        };
        Ok(Negotiated {
            offered,
            accepted,
            max_sizes,
            control_size,
            event_size,
        })
    }

    /// New queues on the vectors of `mode`, `DRIVER_OK`, the event queue's
    /// buffers offered.
    ///
    /// # Errors
    ///
    /// `EBUSY` (the device refused an MSI-X vector), `EIO` (the device did
    /// not accept `DRIVER_OK`), `ENOMEM`, or the errno of a register access.
    fn start_queues(
        &self,
        pdev: &pci::Device<Core<'_>>,
        mode: IrqMode,
        control_size: u16,
        event_size: u16,
    ) -> Result {
        let t = &self.link.transport;
        let mut ctrl = ControlQueue::new(pdev.as_ref(), control_size)?;
        let mut evq = EventQueue::new(pdev.as_ref(), event_size)?;
        let busy = |what: &'static str| {
            move |e: &Error| {
                dev_err!(
                    pdev,
                    "device refused the MSI-X vector for {}: error {}\n",
                    what,
                    e.to_errno()
                )
            }
        };
        if mode != IrqMode::Intx {
            t.set_config_vector(mode.config_vector())
                .inspect_err(busy("configuration changes"))?;
        }
        let off = t
            .setup_queue(
                QUEUE_CONTROL,
                &QueueConfig {
                    size: control_size,
                    vector: mode.control_vector(),
                    desc: ctrl.ring().desc_addr(),
                    driver: ctrl.ring().driver_addr(),
                    device: ctrl.ring().device_addr(),
                },
            )
            .inspect_err(busy("the control queue"))?;
        ctrl.set_notify_off(off);
        let off = t
            .setup_queue(
                QUEUE_EVENT,
                &QueueConfig {
                    size: event_size,
                    vector: mode.event_vector(),
                    desc: evq.ring().desc_addr(),
                    driver: evq.ring().driver_addr(),
                    device: evq.ring().device_addr(),
                },
            )
            .inspect_err(busy("the event queue"))?;
        evq.set_notify_off(off);
        self.control.install(ctrl);
        self.events.install(evq);

        t.add_status(status::DRIVER_OK)?;
        self.link.set_running(true);
        let st = t.status()?;
        if st & (status::NEEDS_RESET | status::FAILED) != 0 || st & status::DRIVER_OK == 0 {
            dev_err!(
                pdev,
                "device did not accept DRIVER_OK (status {})\n",
                StatusBits(st)
            );
            return Err(EIO);
        }
        self.events.kick(&self.link)
    }

    /// Sends `IDENTIFY`, validates the reply against this driver and stores
    /// it.
    ///
    /// # Errors
    ///
    /// `ENODEV` (not a vgpu device), `EPROTO` (incompatible protocol,
    /// layout, record size or command size), or the command's errno.
    fn identify(&self) -> Result<IdentifyReply> {
        let id = self.identify_checked()?;
        self.identity.populate(id);
        Ok(id)
    }

    /// Sends `IDENTIFY` and validates the reply against this driver.
    ///
    /// # Errors
    ///
    /// As [`Hw::identify`].
    fn identify_checked(&self) -> Result<IdentifyReply> {
        let pdev = self.pdev();
        let reply = self
            .command_ungated(Command::Identify)
            .inspect_err(|e| dev_err!(pdev, "IDENTIFY failed: error {}\n", e.to_errno()))?;
        let id: IdentifyReply = reply.get()?;
        if id.magic != IDENTIFY_MAGIC {
            dev_err!(
                pdev,
                "IDENTIFY: magic {:#010x}, expected {:#010x}: not a vgpu device\n",
                id.magic,
                IDENTIFY_MAGIC
            );
            return Err(ENODEV);
        }
        let major = id.protocol_version >> 16;
        if major != u32::from(PROTOCOL_MAJOR) {
            dev_err!(
                pdev,
                "device speaks protocol {}.{}, this driver {}.x: incompatible\n",
                major,
                id.protocol_version & 0xffff,
                PROTOCOL_MAJOR
            );
            return Err(errno::eproto());
        }
        if id.layout_fingerprint != layout::FINGERPRINT {
            dev_err!(
                pdev,
                "hardware interface mismatch: device layout fingerprint {:#018x}, driver {:#018x}; \
                 build the driver and the device from the same hwif sources\n",
                id.layout_fingerprint,
                layout::FINGERPRINT
            );
            return Err(errno::eproto());
        }
        if usize::try_from(id.event_record_size).ok() != Some(EVENT_RECORD_SIZE) {
            dev_err!(
                pdev,
                "device event records are {} bytes, this driver's {}\n",
                id.event_record_size,
                EVENT_RECORD_SIZE
            );
            return Err(errno::eproto());
        }
        if usize::try_from(id.max_command_size).unwrap_or(0) < super::control::largest_command() {
            dev_err!(
                pdev,
                "device accepts commands of at most {} bytes, this driver needs {}\n",
                id.max_command_size,
                super::control::largest_command()
            );
            return Err(errno::eproto());
        }
        if !(32..=crate::proto::VA_BITS).contains(&id.va_bits) {
            dev_err!(pdev, "device reports {}-bit GPU addresses\n", id.va_bits);
            return Err(errno::eproto());
        }
        Ok(id)
    }

    /// Before a PCI function reset: closes the gate (new commands wait,
    /// see the module documentation), lets the command in flight finish,
    /// resets the device and frees its queues. Returns whether the device
    /// was running (a device already unbound is left alone).
    pub(crate) fn go_offline(&self) -> bool {
        if self.link.is_unbound() {
            return false;
        }
        // New commands wait at the gate; the one in flight (if any) gets
        // its reply or times out; one that passed the gate already finds
        // the link offline once it has the command lock (EAGAIN).
        *self.gate.lock() = true;
        let serial = self.serialise();
        self.link.set_offline(true);
        drop(serial);
        self.quiesce();
        true
    }

    /// After a PCI function reset: the same features, new queues on the
    /// same interrupt vectors, `DRIVER_OK`, and an `IDENTIFY` that must
    /// describe the same device; then the gate opens. A device that was
    /// broken or lost and answers is usable again.
    ///
    /// # Errors
    ///
    /// `ENODEV` (not set up at probe, or the device now offers other
    /// features or is another device), `EPROTO` (as at probe), `EIO`, or
    /// the errno of a register access, allocation or command. The gate
    /// opens either way; after an error the device is broken.
    pub(crate) fn restart(&self, pdev: &pci::Device<Core<'_>>) -> Result {
        let r = self.restart_inner(pdev);
        match &r {
            Ok(()) => self.link.revive(),
            Err(e) => {
                self.link.mark_broken(if e.to_errno() == ENODEV.to_errno() {
                    "function reset: another device answers"
                } else {
                    "function reset: the device did not come back"
                });
            }
        }
        self.link.set_offline(false);
        *self.gate.lock() = false;
        self.gate_open.notify_all();
        self.wake();
        r
    }

    fn restart_inner(&self, pdev: &pci::Device<Core<'_>>) -> Result {
        let (Some(setup), Some(was)) = (self.setup.as_ref(), self.identity.as_ref()) else {
            return Err(ENODEV);
        };
        let n = self.negotiate(pdev)?;
        if n.offered != setup.device_features || n.accepted != setup.driver_features {
            dev_err!(
                pdev,
                "function reset: the device offers features {:#x} (accepted {:#x}), {:#x} ({:#x}) at probe\n",
                n.offered,
                n.accepted,
                setup.device_features,
                setup.driver_features
            );
            return Err(ENODEV);
        }
        // Event numbering restarts at 1, as after `DEVICE_RESET`.
        self.events.expect_restart();
        // The command path's own state (the link just reset) is fresh.
        self.start_queues(pdev, setup.irq, setup.control_size, setup.event_size)?;
        // Only these commands run: the gate stays closed for the others.
        // The device is back in its boot state: the firmware is loaded
        // again.
        self.link.set_offline(false);
        let id = self.identify_checked().and_then(|id| {
            self.boot_firmware(&|c| self.command_ungated(c))
                .map(|()| id)
        });
        self.link.set_offline(true);
        let id = id?;
        if id.generation != was.generation
            || id.max_contexts != was.max_contexts
            || id.vram_size != was.vram_size
            || id.visible_vram_size != was.visible_vram_size
            || id.engine_mask != was.engine_mask
        {
            dev_err!(
                pdev,
                "function reset: IDENTIFY now describes another device (gen {}, {} contexts, VRAM {:#x})\n",
                id.generation,
                id.max_contexts,
                id.vram_size
            );
            return Err(ENODEV);
        }
        Ok(())
    }

    /// Waits while a function reset has the gate closed.
    ///
    /// # Errors
    ///
    /// `EAGAIN` if it stays closed for [`GATE_WAIT_MS`].
    pub(crate) fn wait_online(&self) -> Result {
        let mut closed = self.gate.lock();
        if !*closed {
            return Ok(());
        }
        let start = Instant::<Monotonic>::now();
        while *closed {
            if elapsed_ns(&start) >= GATE_WAIT_MS * 1_000_000 {
                return Err(EAGAIN);
            }
            let r = self
                .gate_open
                .wait_interruptible_timeout(&mut closed, crate::time::ns_to_jiffies(100_000_000));
            if let CondVarTimeoutResult::Signal { .. } = r {
                return Err(ERESTARTSYS);
            }
        }
        Ok(())
    }

    /// Quiesces the device (the caller has marked the link unbound or offline):
    /// status 0, then the queues are freed.
    ///
    /// Once the device reads back status 0 it no longer touches the queues,
    /// so they can be freed; if the reset does not complete, their memory is
    /// leaked instead, so that a device that may still write to it never
    /// writes to freed memory.
    pub(crate) fn quiesce(&self) {
        self.link.set_running(false);
        let reset = self.link.transport.reset();
        let ctrl = self.control.take_queue();
        let events = self.events.take_queue();
        match reset {
            Ok(()) => {
                drop(ctrl);
                drop(events);
            }
            Err(e) => {
                dev_err!(
                    self.pdev(),
                    "device reset did not complete (error {}): leaking its queue memory\n",
                    e.to_errno()
                );
                core::mem::forget(ctrl);
                core::mem::forget(events);
            }
        }
        self.wake();
    }
}
