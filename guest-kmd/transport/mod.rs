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
//! * [`firmware`]: the firmware image, its boot handshake and its log.
//!
//! [`Hw`] puts them together: commands and doorbells, event processing;
//! [`bringup`]: bring-up (features, queues, interrupts, `IDENTIFY`),
//! teardown, and going offline and back around a PCI function reset.

mod bringup;
pub(crate) mod control;
pub(crate) mod events;
mod firmware;
pub(crate) mod irq;
pub(crate) mod link;
pub(crate) mod memory;
pub(crate) mod virtio;
pub(crate) mod virtqueue;

use crate::{
    ffi::monotonic_ns,
    ktrace::Trace,
    proto::{
        Command,
        IdentifyReply,
        TimeReply, //
        NUM_QUEUES,
    },
};
use control::{
    Control,
    DoorbellSlot,
    PostedDoorbell,
    Reply, //
};
use events::{
    EventSink,
    Events, //
};
use irq::IrqMode;
use kernel::{
    device::Core,
    pci,
    prelude::*,
    sync::{
        aref::ARef,
        new_condvar,
        new_mutex,
        Arc,
        CondVar,
        Mutex,
        MutexGuard,
        SetOnce, //
    },
};
use link::Link;
use virtio::Transport;

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
    /// The firmware image and its boots.
    #[pin]
    pub(crate) firmware: Mutex<firmware::FwState>,
    /// Closed (`true`) while a PCI function reset runs ([`bringup`]):
    /// commands wait for it to open.
    #[pin]
    gate: Mutex<bool>,
    /// Signalled when the gate opens.
    #[pin]
    gate_open: CondVar,
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
                firmware <- new_mutex!(firmware::FwState::new()),
                gate <- new_mutex!(false),
                gate_open <- new_condvar!(),
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

    /// Sends a control command and waits for its reply (first for the
    /// gate, while a function reset runs).
    ///
    /// # Errors
    ///
    /// As [`Control::command_locked`]; `EAGAIN` or `ERESTARTSYS` as
    /// [`Hw::wait_online`].
    pub(crate) fn command(&self, cmd: Command) -> Result<Reply> {
        self.wait_online()?;
        self.command_ungated(cmd)
    }

    /// [`Hw::command`] without waiting at the gate of a function reset.
    ///
    /// # Errors
    ///
    /// As [`Control::command_locked`].
    fn command_ungated(&self, cmd: Command) -> Result<Reply> {
        let (start, name) = (self.trace.start(), cmd.opcode().name());
        let r = match crate::inject::should_fail(crate::inject::Point::ControlCmd) {
            // Not sent: failed as a command the device failed (debugfs
            // vgpu_fail/control_cmd).
            true => Err(EIO),
            false => self.control.command(&self.link, cmd),
        };
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
        self.wait_online()?;
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
        self.wait_online()?;
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
