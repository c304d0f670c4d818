// SPDX-License-Identifier: GPL-2.0

//! The device: shared state, probe bring-up, teardown, and the operations
//! the render node exposes.
//!
//! [`Vgpu`] is reference-counted: the PCI binding, the interrupt handlers,
//! debugfs and the DRM device each hold it, and the DRM device may outlive
//! the binding (an open render node). Everything that touches the hardware
//! therefore checks that the device is still bound: BAR accesses are revoked
//! at unbind (`ENODEV`), and the rings are freed at unbind, right after the
//! device has been reset.

use crate::{
    control::{
        self,
        Control,
        ControlQueue,
        CONTROL_QUEUE_MAX, //
    },
    debugfs,
    drm::{
        self,
        Client, //
    },
    event::EVENT_RECORD_SIZE,
    events::{
        EventQueue,
        Events,
        EVENT_QUEUE_MAX, //
    },
    errno,
    gpu::{
        GpuState,
        SlotMemory, //
    },
    irq::{
        self,
        IrqMode, //
    },
    layout,
    ptpool::PtPool,
    watchdog::WatchdogHandle,
    proto::{
        Command,
        IdentifyReply,
        PingReply,
        IDENTIFY_MAGIC,
        NUM_QUEUES,
        PROTOCOL_MAJOR,
        QUEUE_CONTROL,
        QUEUE_EVENT, //
    },
    virtio::{
        feature,
        status,
        QueueConfig,
        StatusBits,
        Transport, //
    },
    vm::{
        self,
        Vm, //
    },
};
use kernel::{
    device::Core,
    dma::{
        Device as _,
        DmaMask, //
    },
    new_mutex,
    pci,
    prelude::*,
    sync::{
        atomic::{
            Atomic,
            AtomicFlag,
            Relaxed, //
        },
        aref::ARef,
        Arc,
        Mutex,
        SetOnce, //
    },
    time::{
        Instant,
        Monotonic, //
    },
    uapi,
};

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

/// The result of a `PING` round trip.
pub(crate) struct PingResult {
    /// Sequence number of the `PING` event record.
    pub(crate) seq: u64,
    /// Nanoseconds from sending the command to receiving the event.
    pub(crate) latency_ns: u64,
}

/// Default `PING` timeout (the uAPI's "0 means 1 s").
pub(crate) const PING_DEFAULT_TIMEOUT_NS: u64 = 1_000_000_000;

/// State shared by everything that uses one device.
#[pin_data]
pub(crate) struct Vgpu {
    pub(crate) pdev: ARef<pci::Device>,
    pub(crate) transport: Transport,
    #[pin]
    pub(crate) control: Control,
    #[pin]
    pub(crate) events: Events,
    /// The device's `IDENTIFY` reply, validated.
    pub(crate) identity: SetOnce<IdentifyReply>,
    /// Negotiation results.
    pub(crate) setup: SetOnce<Setup>,
    /// Set once `DRIVER_OK` has been written.
    running: AtomicFlag,
    /// Set when teardown starts; never cleared.
    unbound: AtomicFlag,
    /// Set when the device broke (`NEEDS_RESET`, ring corruption); never
    /// cleared: the device needs a rebind.
    broken: AtomicFlag,
    /// The INTx hard handler saw the configuration-change ISR bit.
    pub(crate) config_pending: AtomicFlag,
    /// The INTx hard handler saw the queue ISR bit.
    pub(crate) queue_pending: AtomicFlag,
    /// Interrupts per line (index: see [`irq`]).
    irq_count: [Atomic<u64>; 2],
    /// Configuration-change checks run.
    config_checks: Atomic<u64>,
    /// Page-table memory, allocated at probe.
    pub(crate) pt_pool: SetOnce<Arc<PtPool>>,
    /// Open render-node files.
    #[pin]
    pub(crate) clients: Mutex<KVec<Arc<Client>>>,
    /// Clients of closed files whose contexts the device did not let go:
    /// their page tables stay until the device is unbound.
    #[pin]
    zombies: Mutex<KVec<Arc<Client>>>,
    /// Rings and status pages of every device context slot.
    pub(crate) slot_mem: SetOnce<SlotMemory>,
    /// Contexts, rings, fences, faults, resets.
    #[pin]
    pub(crate) gpu: GpuState,
    /// The periodic hang check, from probe until shutdown.
    #[pin]
    watchdog: Mutex<Option<WatchdogHandle>>,
    /// GEM objects of every file (set when the render node is registered).
    pub(crate) mem: SetOnce<Arc<crate::stats::MemAccount>>,
}

impl Vgpu {
    fn new(pdev: ARef<pci::Device>, transport: Transport) -> impl PinInit<Self> {
        pin_init!(Vgpu {
            pdev,
            transport,
            control <- Control::new(crate::param_cmd_timeout_ms()),
            events <- Events::new(),
            identity: SetOnce::new(),
            setup: SetOnce::new(),
            running: AtomicFlag::new(false),
            unbound: AtomicFlag::new(false),
            broken: AtomicFlag::new(false),
            config_pending: AtomicFlag::new(false),
            queue_pending: AtomicFlag::new(false),
            irq_count: [Atomic::new(0), Atomic::new(0)],
            config_checks: Atomic::new(0),
            pt_pool: SetOnce::new(),
            clients <- new_mutex!(KVec::new()),
            zombies <- new_mutex!(KVec::new()),
            slot_mem: SetOnce::new(),
            gpu <- GpuState::new(),
            watchdog <- new_mutex!(None),
            mem: SetOnce::new(),
        })
    }

    /// The watchdog's (timer expiries, checks run, period in ms), while it runs.
    pub(crate) fn watchdog_counts(&self) -> Option<(u64, u64, i64)> {
        self.watchdog.lock().as_ref().map(|w| w.counts())
    }

    /// A new, empty GPU address space in the device's format.
    pub(crate) fn new_vm(&self) -> Result<Vm> {
        let id = self.identity.as_ref().ok_or(ENODEV)?;
        let pool = self.pt_pool.as_ref().ok_or(ENODEV)?.clone();
        let huge = id.page_sizes & vm::PAGE_2M != 0;
        Vm::new(pool, id.va_bits.min(crate::proto::VA_BITS), huge)
    }

    /// Lists an open file's client (for debugfs).
    pub(crate) fn add_client(&self, c: &Arc<Client>) -> Result {
        self.clients.lock().push(c.clone(), GFP_KERNEL)?;
        Ok(())
    }

    /// A file closes: its contexts are destroyed, then its client goes (or,
    /// if a context could not be destroyed, is kept with its page tables).
    pub(crate) fn close_client(&self, c: &Arc<Client>) {
        let clean = self.destroy_client(c);
        self.remove_client(c);
        if !clean {
            let _ = self.zombies.lock().push(c.clone(), GFP_KERNEL);
        }
    }

    /// Forgets a closed file's client.
    pub(crate) fn remove_client(&self, c: &Arc<Client>) {
        let mut list = self.clients.lock();
        if let Some(i) = list.iter().position(|x| Arc::ptr_eq(x, c)) {
            let _ = list.remove(i);
        }
    }

    /// `ENODEV` once unbound, `EIO` once broken.
    pub(crate) fn check_usable(&self) -> Result {
        if self.unbound.load(Relaxed) {
            return Err(ENODEV);
        }
        if self.broken.load(Relaxed) {
            return Err(EIO);
        }
        Ok(())
    }

    /// A short state name.
    pub(crate) fn state_name(&self) -> &'static str {
        if self.unbound.load(Relaxed) {
            "unbound"
        } else if self.broken.load(Relaxed) {
            "broken (rebind the driver to recover)"
        } else if self.running.load(Relaxed) {
            "running"
        } else {
            "initialising"
        }
    }

    /// Marks the device unusable. Callers wake sleepers afterwards with
    /// [`Self::wake_all`], without holding the control or event lock.
    pub(crate) fn mark_broken(&self, why: &str) {
        if !self.broken.xchg(true, Relaxed) {
            dev_err!(
                self.pdev,
                "{}; the device is unusable until the driver is rebound\n",
                why
            );
        }
    }

    /// Wakes every sleeper so it re-checks the device state.
    pub(crate) fn wake_all(&self) {
        self.control.wake();
        self.events.wake();
        self.gpu.wake();
    }

    pub(crate) fn count_irq(&self, index: usize) {
        if let Some(c) = self.irq_count.get(index) {
            c.add(1, Relaxed);
        }
    }

    /// Interrupts counted per line.
    pub(crate) fn irq_counts(&self) -> [u64; 2] {
        [self.irq_count[0].load(Relaxed), self.irq_count[1].load(Relaxed)]
    }

    /// Configuration-change checks run so far.
    pub(crate) fn config_checks(&self) -> u64 {
        self.config_checks.load(Relaxed)
    }

    /// Checks the device status after a configuration-change interrupt (or
    /// a command timeout): a device that needs a reset, failed, or dropped
    /// `DRIVER_OK` on its own is broken.
    pub(crate) fn config_changed(&self) {
        self.config_checks.add(1, Relaxed);
        if !self.running.load(Relaxed) || self.unbound.load(Relaxed) {
            return;
        }
        let why = match self.transport.status() {
            // Revoked: teardown is in progress.
            Err(_) => return,
            Ok(s) if s & status::NEEDS_RESET != 0 => "device set NEEDS_RESET",
            Ok(s) if s & status::FAILED != 0 => "device status reads FAILED (device gone?)",
            Ok(s) if s & status::DRIVER_OK == 0 => "device dropped DRIVER_OK (reset by itself)",
            Ok(_) => return,
        };
        self.mark_broken(why);
        self.wake_all();
    }

    /// Quiesces the device and frees its rings. Idempotent.
    ///
    /// The reset comes first: once the device reads back status 0 it no
    /// longer touches the rings, so they can be freed. If the reset does not
    /// complete, the ring memory is leaked instead of freed, so that a
    /// device that may still write to it never writes to freed memory.
    pub(crate) fn shutdown(&self) {
        if self.unbound.xchg(true, Relaxed) {
            return;
        }
        // No hang check may run from here on: it would race the reset.
        let watchdog = self.watchdog.lock().take();
        if let Some(mut w) = watchdog {
            w.stop();
        }
        self.running.store(false, Relaxed);
        let reset = self.transport.reset();
        let ctrl = self.control.take_queue();
        let events = self.events.take_queue();
        match reset {
            Ok(()) => {
                drop(ctrl);
                drop(events);
            }
            Err(e) => {
                dev_err!(
                    self.pdev,
                    "device reset failed (error {}): leaking its ring memory\n",
                    e.to_errno()
                );
                core::mem::forget(ctrl);
                core::mem::forget(events);
            }
        }
        self.cancel_exported();
        self.wake_all();
    }

    /// Sends `IDENTIFY`, validates the reply against this driver and stores
    /// it.
    fn identify(&self) -> Result<IdentifyReply> {
        let reply = self
            .command(Command::Identify)
            .inspect_err(|e| dev_err!(self.pdev, "IDENTIFY failed: error {}\n", e.to_errno()))?;
        let id: IdentifyReply = reply.get()?;
        if id.magic != IDENTIFY_MAGIC {
            dev_err!(
                self.pdev,
                "IDENTIFY: magic {:#010x}, expected {:#010x}: not a vgpu device\n",
                id.magic,
                IDENTIFY_MAGIC
            );
            return Err(ENODEV);
        }
        let major = id.protocol_version >> 16;
        if major != u32::from(PROTOCOL_MAJOR) {
            dev_err!(
                self.pdev,
                "device speaks protocol {}.{}, this driver {}.x: incompatible\n",
                major,
                id.protocol_version & 0xffff,
                PROTOCOL_MAJOR
            );
            return Err(errno::eproto());
        }
        if id.layout_fingerprint != layout::FINGERPRINT {
            dev_err!(
                self.pdev,
                "hardware interface mismatch: device layout fingerprint {:#018x}, driver {:#018x}; \
                 build the driver and the device from the same hwif sources\n",
                id.layout_fingerprint,
                layout::FINGERPRINT
            );
            return Err(errno::eproto());
        }
        if usize::try_from(id.event_record_size).ok() != Some(EVENT_RECORD_SIZE) {
            dev_err!(
                self.pdev,
                "device event records are {} bytes, this driver's {}\n",
                id.event_record_size,
                EVENT_RECORD_SIZE
            );
            return Err(errno::eproto());
        }
        if usize::try_from(id.max_command_size).unwrap_or(0) < control::largest_command() {
            dev_err!(
                self.pdev,
                "device accepts commands of at most {} bytes, this driver needs {}\n",
                id.max_command_size,
                control::largest_command()
            );
            return Err(errno::eproto());
        }
        self.identity.populate(id);
        Ok(id)
    }

    /// The value of a `VGPU_PARAM_*` parameter.
    ///
    /// Values are cached from probe, so they stay readable when the device
    /// broke; `ENODEV` once it is unbound.
    pub(crate) fn param(&self, param: u32) -> Result<u64> {
        if self.unbound.load(Relaxed) {
            return Err(ENODEV);
        }
        let id = self.identity.as_ref().ok_or(ENODEV)?;
        let v = match param {
            uapi::VGPU_PARAM_GENERATION => id.generation.into(),
            uapi::VGPU_PARAM_PROTOCOL_VERSION => id.protocol_version.into(),
            uapi::VGPU_PARAM_FIRMWARE_VERSION => id.firmware_version.into(),
            uapi::VGPU_PARAM_ENGINE_MASK => id.engine_mask.into(),
            uapi::VGPU_PARAM_VA_BITS => id.va_bits.into(),
            uapi::VGPU_PARAM_PAGE_SIZES => id.page_sizes,
            uapi::VGPU_PARAM_MAX_CONTEXTS => id.max_contexts.into(),
            uapi::VGPU_PARAM_MAX_RING_SIZE => id.max_ring_size.into(),
            uapi::VGPU_PARAM_MIN_RING_SIZE => id.min_ring_size.into(),
            uapi::VGPU_PARAM_COMPUTE_UNITS => id.compute_units.into(),
            uapi::VGPU_PARAM_DEVICE_ID => self.pdev.device_id().into(),
            uapi::VGPU_PARAM_EVENTS_RECEIVED => self.events.received(),
            uapi::VGPU_PARAM_HWIF_FINGERPRINT => layout::FINGERPRINT,
            uapi::VGPU_PARAM_DEVICE_FINGERPRINT => id.layout_fingerprint,
            uapi::VGPU_PARAM_VA_START => vm::VA_USER_START,
            uapi::VGPU_PARAM_VA_END => vm::va_user_end(id.va_bits.min(crate::proto::VA_BITS)),
            _ => return Err(EINVAL),
        };
        Ok(v)
    }

    /// `PING` round trip: sends `PING(cookie)` and waits for its event,
    /// `timeout_ns` after sending at the latest.
    pub(crate) fn ping(&self, cookie: u64, timeout_ns: u64) -> Result<PingResult> {
        let serial = self.control.serialise();
        let start = Instant::<Monotonic>::now();
        let reply = self.command_locked(&serial, Command::Ping { cookie })?;
        let r: PingReply = reply.get()?;
        if r.cookie != cookie || r.event_seq == 0 {
            dev_err!(
                self.pdev,
                "PING reply: cookie {:#x} (sent {:#x}), event sequence number {}\n",
                r.cookie,
                cookie,
                r.event_seq
            );
            return Err(errno::eproto());
        }
        // Registered before the command lock is released: no other PING can
        // be sent in between, so the only PING records that can arrive
        // before this registration are this one and stale ones.
        let watch = self.events.watch_ping(r.event_seq)?;
        drop(serial);

        let (ev_cookie, at) = watch.wait(|| self.check_usable(), &start, timeout_ns)?;
        if ev_cookie != cookie {
            dev_err!(
                self.pdev,
                "PING event {} carries cookie {:#x}, the command sent {:#x}\n",
                r.event_seq,
                ev_cookie,
                cookie
            );
            return Err(errno::eproto());
        }
        Ok(PingResult {
            seq: r.event_seq,
            latency_ns: u64::try_from((at - start).as_nanos()).unwrap_or(0),
        })
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

/// What the PCI driver keeps per bound device.
///
/// Dropped after [`pci::Driver::unbind`] has run [`Vgpu::shutdown`]:
/// the interrupt handlers are freed first (waiting for running ones), then
/// the debugfs directory.
pub(crate) struct Binding {
    vgpu: Arc<Vgpu>,
    _irqs: irq::Registrations,
    _debugfs: Option<Pin<KBox<debugfs::DeviceDir>>>,
}

impl Binding {
    /// The shared device state.
    pub(crate) fn vgpu(&self) -> &Arc<Vgpu> {
        &self.vgpu
    }

    /// Brings the device up and registers its render node.
    pub(crate) fn probe(pdev: &pci::Device<Core<'_>>) -> Result<Binding> {
        pdev.enable_device_mem()?;
        pdev.set_master();
        // SAFETY: Nothing has allocated or mapped DMA memory for this device
        // yet, and nothing else runs on it during probe.
        unsafe { pdev.dma_set_mask_and_coherent(DmaMask::new::<64>())? };

        let transport = Transport::new(pdev)?;
        let vgpu = Arc::pin_init(Vgpu::new(pdev.into(), transport), GFP_KERNEL)?;
        let mut irqs = irq::Registrations::new();
        match Self::bring_up(pdev, &vgpu, &mut irqs).and_then(|d| {
            let w = WatchdogHandle::start(vgpu.clone())?;
            *vgpu.watchdog.lock() = Some(w);
            Ok(d)
        }) {
            Ok(debugfs) => Ok(Binding {
                vgpu,
                _irqs: irqs,
                _debugfs: debugfs,
            }),
            Err(e) => {
                // Reset before the interrupt handlers and the rings go.
                vgpu.shutdown();
                drop(irqs);
                Err(e)
            }
        }
    }

    fn bring_up(
        pdev: &pci::Device<Core<'_>>,
        vgpu: &Arc<Vgpu>,
        irqs: &mut irq::Registrations,
    ) -> Result<Option<Pin<KBox<debugfs::DeviceDir>>>> {
        let t = &vgpu.transport;

        t.reset()
            .inspect_err(|e| dev_err!(pdev, "device reset did not complete: error {}\n", e.to_errno()))?;
        t.add_status(status::ACKNOWLEDGE)?;
        t.add_status(status::DRIVER)?;

        // Features: VERSION_1 is required, nothing beyond what this driver
        // implements is accepted.
        let offered = t.device_features()?;
        if offered & feature::VERSION_1 == 0 {
            dev_err!(pdev, "device does not offer VIRTIO_F_VERSION_1 (features {:#x})\n", offered);
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
            dev_err!(pdev, "device has {} virtqueues, {} needed\n", nq, NUM_QUEUES);
            return Err(ENODEV);
        }
        let max_sizes = [t.queue_max_size(QUEUE_CONTROL)?, t.queue_max_size(QUEUE_EVENT)?];
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
        let mode = irq::setup(pdev, vgpu, crate::param_force_intx(), irqs)?;
        let busy = |what: &'static str| {
            move |e: &Error| dev_err!(pdev, "device refused the MSI-X vector for {}: error {}\n", what, e.to_errno())
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
        vgpu.control.install(ctrl);
        vgpu.events.install(evq);
        vgpu.setup.populate(Setup {
            device_features: offered,
            driver_features: accepted,
            control_size,
            event_size,
            max_sizes,
            irq: mode,
        });

        t.add_status(status::DRIVER_OK)?;
        vgpu.running.store(true, Relaxed);
        let st = t.status()?;
        if st & (status::NEEDS_RESET | status::FAILED) != 0 || st & status::DRIVER_OK == 0 {
            dev_err!(pdev, "device did not accept DRIVER_OK (status {})\n", StatusBits(st));
            return Err(EIO);
        }
        vgpu.kick_events()?;

        let id = vgpu.identify()?;
        if !(32..=crate::proto::VA_BITS).contains(&id.va_bits) {
            dev_err!(pdev, "device reports {}-bit GPU addresses\n", id.va_bits);
            return Err(errno::eproto());
        }
        vgpu.pt_pool
            .populate(PtPool::new(pdev.as_ref(), crate::param_pt_pool_kib())?);
        let nslots = id.max_contexts.min(crate::proto::MAX_CONTEXTS);
        vgpu.slot_mem.populate(SlotMemory::new(pdev.as_ref(), nslots)?);
        vgpu.init_gpu(nslots)?;

        let dir = debugfs::create(pdev, vgpu)?;
        drm::register(pdev, vgpu)?;

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
            mode.name(),
            control_size,
            event_size
        );
        Ok(dir)
    }
}
