// SPDX-License-Identifier: GPL-2.0

//! The transport: how the driver talks to the device.
//!
//! The bottom of the driver; it knows nothing of the blocks above it:
//!
//! * [`link`]: the PCI function, its virtio transport, the device's state
//!   (running, unbound, broken).
//! * [`virtio`]: PCI vendor capabilities, register blocks, status, features,
//!   queue programming, notify, ISR.
//! * [`virtqueue`]: split virtqueues in coherent DMA memory.
//! * [`control`]: control commands, one in flight, and posted doorbells.
//! * [`events`]: the event queue, sequence tracking, `PING` waiters; GPU
//!   events go up through [`events::EventSink`].
//! * [`irq`]: MSI-X / INTx handlers, calling up through [`irq::IrqTarget`].
//! * [`memory`]: the device's VRAM layout and its CPU-visible aperture.
//!
//! [`Hw`] puts them together: bring-up (features, queues, interrupts,
//! `IDENTIFY`), commands and doorbells, event processing, teardown.

pub(crate) mod control;
pub(crate) mod events;
pub(crate) mod irq;
pub(crate) mod link;
pub(crate) mod memory;
pub(crate) mod virtio;
pub(crate) mod virtqueue;

use crate::{
    errno,
    event::EVENT_RECORD_SIZE,
    ffi::monotonic_ns,
    ktrace::Trace,
    layout,
    proto::{
        Command,
        IdentifyReply,
        TimeReply, //
        IDENTIFY_MAGIC,
        NUM_QUEUES,
        PROTOCOL_MAJOR,
        QUEUE_CONTROL,
        QUEUE_EVENT,
    },
};
use control::{
    Control,
    ControlQueue,
    DoorbellSlot,
    PostedDoorbell,
    Reply,
    CONTROL_QUEUE_MAX, //
};
use events::{
    EventQueue,
    EventSink,
    Events,
    EVENT_QUEUE_MAX, //
};
use irq::{
    IrqMode,
    IrqTarget,
    Registrations, //
};
use kernel::{
    device::Core,
    pci,
    prelude::*,
    sync::{
        aref::ARef,
        Arc,
        MutexGuard,
        SetOnce, //
    },
};
use link::Link;
use virtio::{
    feature,
    status,
    QueueConfig,
    StatusBits,
    Transport, //
};

/// Device silence after which the heartbeat asks it something: 1 s.
pub(crate) const HEARTBEAT_IDLE_NS: u64 = 1_000_000_000;

/// What was negotiated and set up at probe.
#[derive(Clone, Copy)]
pub(crate) struct Setup {
    /// Features the device offered.
    pub(crate) device_features: u64,
    /// Features the driver accepted.
    pub(crate) driver_features: u64,
    /// Control queue size (descriptors).
    pub(crate) control_size: u16,
    /// Event queue size (buffers).
    pub(crate) event_size: u16,
    /// Largest sizes the device allows for the two queues.
    pub(crate) max_sizes: [u16; NUM_QUEUES],
    /// How the device interrupts.
    pub(crate) irq: IrqMode,
}

/// The device as the driver talks to it.
#[pin_data]
pub(crate) struct Hw {
    /// The PCI function, registers and the device's state.
    pub(crate) link: Link,
    /// The control path.
    #[pin]
    pub(crate) control: Control,
    /// The event path.
    #[pin]
    pub(crate) events: Events,
    /// The device's `IDENTIFY` reply, validated.
    pub(crate) identity: SetOnce<IdentifyReply>,
    /// Negotiation results.
    pub(crate) setup: SetOnce<Setup>,
    /// The device's VRAM and aperture, if it has VRAM.
    pub(crate) memory: SetOnce<memory::DeviceMemory>,
    /// The driver's trace buffer ([`crate::ktrace`]): here because every
    /// block reaches the transport.
    #[pin]
    pub(crate) trace: Trace,
}

/// `TIME_QUERY` round trips per clock sync; the shortest is kept.
pub(crate) const SYNC_SAMPLES: u32 = 8;

impl Hw {
    /// The transport of `pdev`: capabilities found and BARs mapped, no queue
    /// yet.
    ///
    /// # Errors
    ///
    /// `ENODEV` for a device that is not a modern virtio function; the errno
    /// of a failed BAR mapping; `ENOMEM`.
    pub(crate) fn new(pdev: &pci::Device<Core<'_>>, cmd_timeout_ms: u32) -> Result<Arc<Hw>> {
        let transport = Transport::new(pdev)?;
        let pdev: ARef<pci::Device> = pdev.into();
        Arc::pin_init(
            pin_init!(Hw {
                link: Link::new(pdev, transport),
                control <- Control::new(cmd_timeout_ms),
                events <- Events::new(),
                identity: SetOnce::new(),
                setup: SetOnce::new(),
                memory: SetOnce::new(),
                trace <- Trace::new(),
            }),
            GFP_KERNEL,
        )
    }

    /// The PCI function.
    pub(crate) fn pdev(&self) -> &pci::Device {
        &self.link.pdev
    }

    /// Whether the device can be used.
    ///
    /// # Errors
    ///
    /// `ENODEV` once unbound, `EIO` once broken.
    pub(crate) fn check_usable(&self) -> Result {
        self.link.check_usable()
    }

    /// The device's generation (1 before `IDENTIFY`).
    pub(crate) fn generation(&self) -> u32 {
        self.identity.as_ref().map_or(1, |i| i.generation)
    }

    /// Sends a control command and waits for its reply.
    ///
    /// # Errors
    ///
    /// As [`Control::command_locked`].
    pub(crate) fn command(&self, cmd: Command) -> Result<Reply> {
        let (start, name) = (self.trace.start(), cmd.opcode().name());
        let r = self.control.command(&self.link, cmd);
        self.trace.command(start, name, ret_of(&r));
        if r.is_err() && self.link.check_usable().is_err() {
            self.events.wake();
        }
        r
    }

    /// Takes the command lock: no other command runs until it is dropped.
    pub(crate) fn serialise(&self) -> MutexGuard<'_, ()> {
        self.control.serialise()
    }

    /// [`Hw::command`] with the command lock held by the caller.
    ///
    /// # Errors
    ///
    /// As [`Control::command_locked`].
    pub(crate) fn command_locked(
        &self,
        serial: &MutexGuard<'_, ()>,
        cmd: Command,
    ) -> Result<Reply> {
        let (start, name) = (self.trace.start(), cmd.opcode().name());
        let r = self.control.command_locked(&self.link, serial, cmd);
        self.trace.command(start, name, ret_of(&r));
        r
    }

    /// Reserves a control slot for one posted doorbell (may wait).
    ///
    /// # Errors
    ///
    /// As [`Control::reserve_doorbell`].
    pub(crate) fn reserve_doorbell(&self) -> Result<DoorbellSlot<'_>> {
        self.control.reserve_doorbell(&self.link)
    }

    /// Posts a doorbell in a reserved slot (never waits).
    ///
    /// # Errors
    ///
    /// As [`Control::post_doorbell`].
    pub(crate) fn post_doorbell(
        &self,
        slot: DoorbellSlot<'_>,
        ctx_id: u32,
        engine: u32,
        wptr: u32,
    ) -> Result {
        let start = self.trace.start();
        let r = self
            .control
            .post_doorbell(&self.link, slot, ctx_id, engine, wptr);
        self.trace.doorbell(start, ctx_id, engine, wptr, ret_of(&r));
        r
    }

    /// A clock-sync sample for the trace: [`SYNC_SAMPLES`] `TIME_QUERY`
    /// round trips, the device clock of the shortest kept with the guest
    /// times around it ([`Trace::sync`]). The device's reading lies within
    /// them, so the round trip bounds the error of the correlation.
    ///
    /// # Errors
    ///
    /// As [`Hw::command`] (the samples taken before a failure are kept).
    pub(crate) fn sync_clock(&self) -> Result {
        let mut best: Option<(u64, u64, u64)> = None;
        let mut res = Ok(());
        for _ in 0..SYNC_SAMPLES {
            let t0 = monotonic_ns();
            let r = self
                .control
                .command(&self.link, Command::TimeQuery)
                .and_then(|r| r.get::<TimeReply>());
            let t1 = monotonic_ns();
            match r {
                Ok(reply) => {
                    if best.is_none_or(|(a, b, _)| t1 - t0 < b - a) {
                        best = Some((t0, t1, reply.device_ns));
                    }
                }
                Err(e) => {
                    res = Err(e);
                    break;
                }
            }
        }
        if let Some((t0, t1, d)) = best {
            self.trace.sync(t0, t1, d);
        }
        res
    }

    /// The heartbeat: when the device has answered nothing for
    /// [`HEARTBEAT_IDLE_NS`], one `IDENTIFY` (its reply is all that is
    /// wanted). A dead device thus times out [`link::LOST_AFTER`] of them
    /// and is declared lost even when nobody else talks to it: detection
    /// takes at most the idle time, plus `LOST_AFTER` command timeouts, plus
    /// the caller's period. Returns whether the device is lost.
    pub(crate) fn heartbeat(&self) -> bool {
        if self.link.check_usable().is_ok() && self.link.silent_ns() >= HEARTBEAT_IDLE_NS {
            let _ = self.command(Command::Identify);
        }
        self.link.is_lost()
    }

    /// Posted doorbells the device refused since the last call.
    pub(crate) fn take_failed_doorbells(&self) -> KVec<PostedDoorbell> {
        self.control.take_failed_doorbells()
    }

    /// Processes the event queue (event interrupt thread).
    pub(crate) fn process_events(&self, sink: &impl EventSink) {
        self.events.process(&self.link, sink, &self.trace);
    }

    /// Re-checks the device status; returns whether the device just broke
    /// (the transport's sleepers are woken; the caller wakes its own).
    pub(crate) fn config_changed(&self) -> bool {
        let broke = self.link.config_changed();
        if broke {
            self.wake();
        }
        broke
    }

    /// Wakes the transport's sleepers so they re-check the device state.
    pub(crate) fn wake(&self) {
        self.control.wake();
        self.events.wake();
    }

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

        // Features: VERSION_1 is required, nothing beyond what this driver
        // implements is accepted.
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

        // Queues.
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
        let mut ctrl = ControlQueue::new(pdev.as_ref(), control_size)?;
        let mut evq = EventQueue::new(pdev.as_ref(), event_size)?;

        // Interrupts, then the queues that use them.
        let mode = irq::setup(pdev, target, force_intx, irqs)?;
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
        self.setup.populate(Setup {
            device_features: offered,
            driver_features: accepted,
            control_size,
            event_size,
            max_sizes,
            irq: mode,
        });

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
        self.events.kick(&self.link)?;
        let id = self.identify()?;
        if let Some(m) = self.discover_memory(&id) {
            self.memory.populate(m);
        }
        Ok(id)
    }

    /// Sends `IDENTIFY`, validates the reply against this driver and stores
    /// it.
    ///
    /// # Errors
    ///
    /// `ENODEV` (not a vgpu device), `EPROTO` (incompatible protocol,
    /// layout, record size or command size), or the command's errno.
    fn identify(&self) -> Result<IdentifyReply> {
        let pdev = self.pdev();
        let reply = self
            .command(Command::Identify)
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
        if usize::try_from(id.max_command_size).unwrap_or(0) < control::largest_command() {
            dev_err!(
                pdev,
                "device accepts commands of at most {} bytes, this driver needs {}\n",
                id.max_command_size,
                control::largest_command()
            );
            return Err(errno::eproto());
        }
        if !(32..=crate::proto::VA_BITS).contains(&id.va_bits) {
            dev_err!(pdev, "device reports {}-bit GPU addresses\n", id.va_bits);
            return Err(errno::eproto());
        }
        self.identity.populate(id);
        Ok(id)
    }

    /// Quiesces the device (the caller has marked the link unbound):
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
                    "device reset failed (error {}): leaking its queue memory\n",
                    e.to_errno()
                );
                core::mem::forget(ctrl);
                core::mem::forget(events);
            }
        }
        self.wake();
    }
}

/// Largest power of two `<= min(max, want)`, if at least `min`.
fn queue_size(max: u16, want: u16, min: u16) -> Option<u16> {
    let cap = max.min(want);
    if cap == 0 {
        return None;
    }
    let size = 1u16 << (15 - cap.leading_zeros());
    (size >= min).then_some(size)
}

/// A result as the trace records it: 0 or -errno.
fn ret_of<T>(r: &Result<T>) -> i64 {
    match r {
        Ok(_) => 0,
        Err(e) => i64::from(e.to_errno()),
    }
}
