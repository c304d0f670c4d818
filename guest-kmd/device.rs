// SPDX-License-Identifier: GPL-2.0

//! The device: what everything that uses one vgpu shares, and the
//! operations that are the device's own (`GET_PARAM`, `PING`, open files,
//! teardown).
//!
//! [`Vgpu`] is reference-counted: the PCI binding, the interrupt handlers,
//! the watchdog, debugfs and the DRM device each hold it, and the DRM device
//! may outlive the binding (an open render node). Everything that touches
//! the hardware therefore checks that the device is still bound: BAR
//! accesses are revoked at unbind (`ENODEV`), and the rings are freed at
//! unbind, right after the device has been reset.
//!
//! It composes the blocks below it: the transport ([`Hw`]), the GPU
//! ([`Gpu`]), the page-table pool, the memory account and the open files'
//! [`Client`]s; it is the target of their callbacks (interrupts, the
//! watchdog).

use crate::{
    errno,
    file::Client,
    gem::MemAccount,
    gpu::Gpu,
    layout,
    proto::{
        Command,
        PingReply, //
    },
    ptpool::PtPool,
    transport::{irq::IrqTarget, link::Link, Hw},
    vm::{
        self,
        Vm, //
    },
    watchdog::{
        Periodic,
        WatchdogHandle, //
    },
};
use kernel::{
    device::{
        Bound,
        Device, //
    },
    new_mutex,
    prelude::*,
    sync::{
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
    /// The transport.
    pub(crate) hw: Arc<Hw>,
    /// Contexts, rings, fences, faults, resets.
    #[pin]
    pub(crate) gpu: Gpu,
    /// Page-table memory, allocated at probe.
    pub(crate) pt_pool: SetOnce<Arc<PtPool>>,
    /// GEM objects of every file.
    pub(crate) mem: Arc<MemAccount>,
    /// Open render-node files.
    #[pin]
    pub(crate) clients: Mutex<KVec<Arc<Client>>>,
    /// Clients of closed files whose contexts the device did not let go:
    /// their page tables stay until the device is unbound.
    #[pin]
    zombies: Mutex<KVec<Arc<Client>>>,
    /// The periodic hang check, from probe until shutdown.
    #[pin]
    watchdog: Mutex<Option<WatchdogHandle<Vgpu>>>,
}

impl Vgpu {
    /// The device state around transport `hw`.
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn new(hw: Arc<Hw>) -> Result<Arc<Vgpu>> {
        let mem = MemAccount::new()?;
        Arc::pin_init(
            pin_init!(Vgpu {
                gpu <- Gpu::new(hw.clone()),
                hw,
                pt_pool: SetOnce::new(),
                mem,
                clients <- new_mutex!(KVec::new()),
                zombies <- new_mutex!(KVec::new()),
                watchdog <- new_mutex!(None),
            }),
            GFP_KERNEL,
        )
    }

    /// Allocates what the device's `IDENTIFY` sized: page-table memory and
    /// the GPU's context slots (probe).
    ///
    /// # Errors
    ///
    /// `ENODEV` before `IDENTIFY`, `ENOMEM`.
    pub(crate) fn init_memory(&self, dev: &Device<Bound>) -> Result {
        let id = self.hw.identity.as_ref().ok_or(ENODEV)?;
        self.pt_pool
            .populate(PtPool::new(dev, crate::params::pt_pool_kib())?);
        let nslots = id.max_contexts.min(crate::proto::MAX_CONTEXTS);
        self.gpu.init(dev, nslots)
    }

    /// Starts the hang watchdog.
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn start_watchdog(self: &Arc<Self>) -> Result {
        let w = WatchdogHandle::start(self.clone(), crate::gpu::reset::check_period_ms())?;
        *self.watchdog.lock() = Some(w);
        Ok(())
    }

    /// The watchdog's (timer expiries, checks run, period in ms), while it runs.
    pub(crate) fn watchdog_counts(&self) -> Option<(u64, u64, i64)> {
        self.watchdog.lock().as_ref().map(|w| w.counts())
    }

    /// `ENODEV` once unbound, `EIO` once broken.
    pub(crate) fn check_usable(&self) -> Result {
        self.hw.check_usable()
    }

    /// A new, empty GPU address space in the device's format.
    ///
    /// # Errors
    ///
    /// `ENODEV` before probe finished, `ENOMEM`.
    pub(crate) fn new_vm(&self) -> Result<Vm> {
        let id = self.hw.identity.as_ref().ok_or(ENODEV)?;
        let pool = self.pt_pool.as_ref().ok_or(ENODEV)?.clone();
        let huge = id.page_sizes & vm::PAGE_2M != 0;
        Vm::new(pool, id.va_bits.min(crate::proto::VA_BITS), huge)
    }

    /// A file opens: its client, listed for debugfs.
    ///
    /// # Errors
    ///
    /// `ENODEV`/`EIO` (device gone or broken), `ENOMEM`.
    pub(crate) fn open_client(&self) -> Result<Arc<Client>> {
        self.check_usable()?;
        let client = Client::new(self.new_vm()?)?;
        self.clients.lock().push(client.clone(), GFP_KERNEL)?;
        Ok(client)
    }

    /// A file closes: its contexts are destroyed, then its client goes (or,
    /// if a context could not be destroyed, is kept with its page tables).
    pub(crate) fn close_client(&self, c: &Arc<Client>) {
        let clean = self.gpu.destroy_client(c);
        {
            let mut list = self.clients.lock();
            if let Some(i) = list.iter().position(|x| Arc::ptr_eq(x, c)) {
                let _ = list.remove(i);
            }
        }
        if !clean {
            let _ = self.zombies.lock().push(c.clone(), GFP_KERNEL);
        }
    }

    /// Quiesces the device and frees its rings. Idempotent.
    ///
    /// Marked unbound first (no new hang check starts), the watchdog stops
    /// (waiting for a running check), then the transport resets the device
    /// and frees its queues, then every exported fence is cancelled and
    /// every sleeper woken.
    pub(crate) fn shutdown(&self) {
        if self.hw.link.set_unbound() {
            return;
        }
        let watchdog = self.watchdog.lock().take();
        if let Some(mut w) = watchdog {
            w.stop();
        }
        self.hw.quiesce();
        self.gpu.cancel_exported();
        self.gpu.wake();
    }

    /// The value of a `VGPU_PARAM_*` parameter.
    ///
    /// Values are cached from probe, so they stay readable when the device
    /// broke.
    ///
    /// # Errors
    ///
    /// `EINVAL` (unknown parameter), `ENODEV` once unbound.
    pub(crate) fn param(&self, param: u32) -> Result<u64> {
        if self.hw.link.is_unbound() {
            return Err(ENODEV);
        }
        let id = self.hw.identity.as_ref().ok_or(ENODEV)?;
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
            uapi::VGPU_PARAM_DEVICE_ID => self.hw.pdev().device_id().into(),
            uapi::VGPU_PARAM_EVENTS_RECEIVED => self.hw.events.received(),
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
    ///
    /// # Errors
    ///
    /// `ETIMEDOUT` (command or event), `EIO` (event lost, device broken),
    /// `EPROTO` (reply or event contradicts the command), `EBUSY` (no free
    /// command slot, or too many pings waiting), `ERESTARTSYS`, `ENODEV`.
    pub(crate) fn ping(&self, cookie: u64, timeout_ns: u64) -> Result<PingResult> {
        let hw = &self.hw;
        let serial = hw.serialise();
        let start = Instant::<Monotonic>::now();
        let reply = hw.command_locked(&serial, Command::Ping { cookie })?;
        let r: PingReply = reply.get()?;
        if r.cookie != cookie || r.event_seq == 0 {
            dev_err!(
                hw.pdev(),
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
        let watch = hw.events.watch_ping(r.event_seq)?;
        drop(serial);

        let (ev_cookie, at) = watch.wait(|| hw.check_usable(), &start, timeout_ns)?;
        if ev_cookie != cookie {
            dev_err!(
                hw.pdev(),
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

impl IrqTarget for Vgpu {
    fn link(&self) -> &Link {
        &self.hw.link
    }

    fn config_changed(&self) {
        if self.hw.config_changed() {
            self.gpu.wake();
        }
    }

    fn control_used(&self) {
        self.hw.control.wake();
    }

    fn events_used(&self) {
        self.hw.process_events(&self.gpu);
    }
}

impl Periodic for Vgpu {
    fn tick(&self) {
        self.gpu.hang_check();
    }
}
