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
    gem::{
        Bo,
        BoRegistry,
        MemAccount, //
    },
    gpu::{
        hooks::HangCheck,
        migrate::Migrator,
        Gpu, //
    },
    layout,
    proto::{
        Command,
        PingReply, //
    },
    ptpool::PtPool,
    ras::Retired,
    sanmem::{
        Declared,
        SanMem, //
    },
    transport::{irq::IrqTarget, link::Link, Hw},
    vm::{
        self,
        Vm, //
    },
    vram_mgr::VramMgr,
    watchdog::{
        Periodic,
        WatchdogHandle, //
    },
};
use kernel::{
    device::{
        Bound,
        Core,
        Device, //
    },
    drm::gem::BaseObject,
    new_mutex,
    prelude::*,
    sync::{
        aref::ARef,
        atomic::Relaxed,
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

/// What a runtime suspension to D3cold saved ([`crate::d3cold`]).
#[derive(Default)]
pub(crate) struct ColdSave {
    /// The VRAM objects whose contents are in their system pages.
    pub(crate) objects: KVec<ARef<Bo>>,
    /// Each one's placement generation at the save (a move since shows).
    pub(crate) gens: KVec<u32>,
    /// The files whose jobs the save holds back.
    pub(crate) held: KVec<Arc<Client>>,
}

/// State shared by everything that uses one device.
#[pin_data]
pub(crate) struct Vgpu {
    /// The transport.
    pub(crate) hw: Arc<Hw>,
    /// Contexts, rings, queues, fences, faults, resets (reference-counted:
    /// its work item and its fence callbacks hold it).
    pub(crate) gpu: Arc<Gpu>,
    /// Page-table memory, allocated at probe.
    pub(crate) pt_pool: SetOnce<Arc<PtPool>>,
    /// Pages retired after uncorrectable memory errors.
    pub(crate) retired: Arc<Retired>,
    /// What is declared to the device's sanitizer (set at probe).
    pub(crate) san_mem: SetOnce<Arc<SanMem>>,
    /// GEM objects of every file.
    pub(crate) mem: Arc<MemAccount>,
    /// Device memory for objects, on a device with VRAM (set at probe).
    pub(crate) vram: SetOnce<Arc<VramMgr>>,
    /// The device's buffer objects.
    pub(crate) bos: Arc<BoRegistry>,
    /// The driver's copy context for moves, made on the first eviction
    /// (and held for the whole of a move: one at a time).
    #[pin]
    pub(crate) mover: Mutex<Option<Migrator>>,
    /// The VRAM objects whose contents a system suspend saved in their
    /// system pages, restored at the resume ([`crate::sleep`]).
    #[pin]
    pub(crate) saved: Mutex<KVec<ARef<Bo>>>,
    /// Serialises a system sleep and a runtime suspension's VRAM save.
    #[pin]
    pub(crate) power: Mutex<()>,
    /// What a runtime suspension to D3cold saved ([`crate::d3cold`]).
    #[pin]
    pub(crate) cold: Mutex<ColdSave>,
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
        let mem = MemAccount::new(crate::params::gem_limit(crate::ffi::total_ram_bytes()))?;
        let retired = Retired::new()?;
        let bos = BoRegistry::new()?;
        let gpu = Arc::pin_init(Gpu::new(hw.clone()), GFP_KERNEL)?;
        Arc::pin_init(
            pin_init!(Vgpu {
                gpu,
                hw,
                pt_pool: SetOnce::new(),
                retired,
                san_mem: SetOnce::new(),
                mem,
                vram: SetOnce::new(),
                bos,
                mover <- new_mutex!(None),
                saved <- new_mutex!(KVec::new()),
                power <- new_mutex!(()),
                cold <- new_mutex!(ColdSave::default()),
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
        let pool = PtPool::new(dev, crate::params::pt_pool_kib())?;
        self.pt_pool.populate(pool.clone());
        let nslots = id.max_contexts.min(crate::proto::MAX_CONTEXTS);
        self.gpu
            .init(dev, nslots, self.retired.clone(), pool.clone())?;
        // The VRAM manager first: retired VRAM pages in the device's table
        // are taken out of it.
        if let Some(m) = self.hw.memory.as_ref() {
            match VramMgr::new(&m.layout) {
                Ok(mgr) => {
                    self.gpu.vram.populate(mgr.clone());
                    self.vram.populate(mgr);
                }
                Err(e) => dev_err!(
                    self.hw.pdev(),
                    "VRAM manager not started (error {}): objects go to system memory\n",
                    e.to_errno()
                ),
            }
        }
        let earlier = self.gpu.load_retired()?;
        if earlier > 0 {
            dev_warn!(
                self.hw.pdev(),
                "{} pages were retired earlier (the device's table): never used again\n",
                earlier
            );
            self.gpu.check_retired_limit();
        }
        // The driver's own GPU memory, for the device's sanitizer: page
        // tables (as such) and every slot's rings and status page, until
        // unbind.
        let san = SanMem::new(self.hw.clone())?;
        if san.on() {
            let tables = pool.chunk_ranges()?;
            let mut ranges = KVec::new();
            let slots = self.gpu.slots()?;
            for hw in 0..nslots {
                ranges.push(
                    (slots.addr(hw), crate::gpu::ring::SLOT_BYTES as u64),
                    GFP_KERNEL,
                )?;
            }
            san.declare_tables_forever(&tables);
            san.declare_forever(&ranges);
            dev_info!(
                self.hw.pdev(),
                "device sanitizer on: {} ranges of driver memory declared\n",
                tables.len() + ranges.len()
            );
        }
        self.san_mem.populate(san);
        self.gpu.bos.populate(self.bos.clone());
        Ok(())
    }

    /// Declares `size` bytes of `bo` from `offset` to the device's
    /// sanitizer, if it asks for declarations (`None` otherwise, and for a
    /// lazy object, whose pages are declared at its first fault).
    ///
    /// # Errors
    ///
    /// `EINVAL` (range outside the object), `ENOMEM`, or the errno of
    /// pinning the pages.
    pub(crate) fn declare_pages(
        &self,
        bo: &crate::gem::Bo,
        offset: u64,
        size: u64,
    ) -> Result<Option<Arc<Declared>>> {
        let Some(san) = self.san_mem.as_ref().filter(|s| s.on()) else {
            return Ok(None);
        };
        if bo.lazy()
            || offset % vm::PAGE_4K != 0
            || size % vm::PAGE_4K != 0
            || size == 0
            || offset
                .checked_add(size)
                .is_none_or(|e| e > bo.size() as u64)
        {
            // VM_BIND refuses the bad ones itself.
            return Ok(None);
        }
        let segs = crate::gem::segments(bo)?;
        let ranges = crate::sanmem::ranges_of(&segs, offset, size)?;
        san.declare_tagged(ranges, crate::sanmem::Tag::of(bo))
            .map(Some)
    }

    /// Starts the driver's trace at probe when `trace_records` asks for it,
    /// with a first clock sync. A trace that cannot start (no memory, the
    /// sync refused) is reported and the driver runs without it.
    pub(crate) fn start_trace(&self) {
        let n = crate::params::trace_records();
        if n == 0 {
            return;
        }
        if let Err(e) = self.trace_on(n) {
            dev_warn!(
                self.hw.pdev(),
                "trace_records={}: tracing not started (error {})\n",
                n,
                e.to_errno()
            );
        }
    }

    /// Starts (or continues) the driver's trace into `records` records and
    /// takes a clock sync (debugfs `trace_ctl on`).
    ///
    /// # Errors
    ///
    /// `ENOMEM` (no buffer); the errno of a failed `TIME_QUERY` (tracing
    /// is on, without that sample).
    pub(crate) fn trace_on(&self, records: usize) -> Result {
        self.hw.trace.enable(records)?;
        self.hw.sync_clock()
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

    /// The watchdog's (timer expiries, of them early for a due check,
    /// checks run, period in ms), while it runs.
    pub(crate) fn watchdog_counts(&self) -> Option<(u64, u64, u64, i64)> {
        self.watchdog.lock().as_ref().map(|w| w.counts())
    }

    /// `ENODEV` once unbound, `EIO` once broken.
    pub(crate) fn check_usable(&self) -> Result {
        self.hw.check_usable()
    }

    /// A new, empty GPU address space in the device's format, on DRM
    /// device `dev`.
    ///
    /// # Errors
    ///
    /// `ENODEV` before probe finished, `ENOMEM`.
    pub(crate) fn new_vm(&self, dev: &vm::DrmDev) -> Result<Vm> {
        let id = self.hw.identity.as_ref().ok_or(ENODEV)?;
        let pool = self.pt_pool.as_ref().ok_or(ENODEV)?.clone();
        let huge = id.page_sizes & vm::PAGE_2M != 0;
        Vm::new(
            dev,
            pool,
            self.retired.clone(),
            id.va_bits.min(crate::proto::VA_BITS),
            huge,
            self.san_mem.as_ref().cloned(),
        )
    }

    /// A file opens: its client, listed for debugfs. A broken or lost
    /// device can still be opened, so that status tools and libraries can
    /// ask what happened (`QUERY_STATS`, `CTX_QUERY`, `GET_PARAM`); every
    /// call that needs the device fails with `EIO`.
    ///
    /// # Errors
    ///
    /// `ENODEV` (unbound), `ENOMEM`.
    pub(crate) fn open_client(&self, dev: &vm::DrmDev) -> Result<Arc<Client>> {
        if self.hw.link.is_unbound() {
            return Err(ENODEV);
        }
        let client = Client::new(
            self.new_vm(dev)?,
            crate::params::file_gem_limit(self.mem.limit()),
        )?;
        self.clients.lock().push(client.clone(), GFP_KERNEL)?;
        Ok(client)
    }

    /// The driver's copy context goes (at shutdown, while the device still
    /// answers); kept with its page tables if the device did not let it go.
    fn close_mover(&self) {
        let m = self.mover.lock().take();
        if let Some(m) = m {
            self.retire_mover(m);
        }
    }

    /// Destroys the driver's copy context `m` (taken out of
    /// [`Vgpu::mover`]): kept with its page tables if the device did not
    /// let it go.
    pub(crate) fn retire_mover(&self, m: Migrator) {
        if !self.gpu.destroy_client(&m.client) {
            let _ = self.zombies.lock().push(m.client.clone(), GFP_KERNEL);
        }
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

    /// Before a PCI function reset (the PCI core's `reset_prepare`, the
    /// device lock held): the GPU holds submissions off
    /// ([`Gpu::begin_function_reset`]), then the transport goes offline
    /// (the command in flight finishes, the device is reset, its queues
    /// freed). A device being unbound is left alone.
    pub(crate) fn function_reset_prepare(&self) {
        self.quiesce("function reset");
    }

    /// [`Vgpu::function_reset_prepare`] for `what` (named in dmesg): a
    /// function reset or a system suspend.
    pub(crate) fn quiesce(&self, what: &str) {
        if self.hw.link.is_unbound() {
            return;
        }
        dev_info!(self.hw.pdev(), "{}: quiescing the device\n", what);
        self.gpu.begin_function_reset();
        self.hw.go_offline();
    }

    /// After a PCI function reset (`reset_done`): the transport restarted
    /// ([`Hw::restart`]), the sanitizer's declarations made again, then
    /// every context and ring created again with its unfinished jobs
    /// ([`Gpu::finish_function_reset`]). A device that does not come back
    /// is broken and the GPU wedged (as a failed device reset).
    pub(crate) fn function_reset_done(&self, pdev: &kernel::pci::Device<Core<'_>>) {
        self.power_on_again(pdev, "function", "function reset");
    }

    /// The device powered on again after a function reset or a system
    /// sleep (`kind` and `what` name it in the reset log and in dmesg):
    /// see [`Vgpu::function_reset_done`]. Returns whether it serves again.
    pub(crate) fn power_on_again(
        &self,
        pdev: &kernel::pci::Device<Core<'_>>,
        kind: &'static str,
        what: &str,
    ) -> bool {
        if self.hw.link.is_unbound() {
            return false;
        }
        let start = Instant::<Monotonic>::now();
        let up = self.hw.restart(pdev);
        let mut redeclared = 0;
        if up.is_ok() {
            if let Some(san) = self.san_mem.as_ref() {
                redeclared = san.redeclare();
            }
        }
        let ok = self.gpu.finish_function_reset(up.is_ok(), kind);
        let ms = crate::time::elapsed_ns(&start) / 1_000_000;
        match (ok, up) {
            (true, _) => dev_info!(
                pdev,
                "{}: device back in {} ms ({} mappings declared again to the sanitizer)\n",
                what,
                ms,
                redeclared
            ),
            (false, Err(e)) => dev_err!(
                pdev,
                "{}: the device did not come back (error {}): wedged\n",
                what,
                e.to_errno()
            ),
            (false, Ok(())) => dev_err!(pdev, "{}: contexts not restored: wedged\n", what),
        }
        ok
    }

    /// Quiesces the device and frees its rings. Idempotent.
    ///
    /// Marked unbound first (no new hang check starts), the watchdog stops
    /// (waiting for a running check), then the transport resets the device
    /// and frees its queues, then every exported fence is cancelled, the
    /// page-table, ring and capture memory freed ([`PtPool::release`],
    /// [`Gpu::release_dma`]) and every sleeper woken.
    pub(crate) fn shutdown(&self) {
        // The driver's copy context goes while the device still answers.
        self.close_mover();
        if self.hw.link.set_unbound() {
            return;
        }
        let watchdog = self.watchdog.lock().take();
        if let Some(mut w) = watchdog {
            w.stop();
        }
        // What a runtime D3cold or a system sleep saved has no device to
        // go back to (and the references would keep the objects, and
        // through them this device, alive).
        let cold = core::mem::take(&mut *self.cold.lock());
        let slept = core::mem::take(&mut *self.saved.lock());
        for bo in Iterator::chain(cold.objects.iter(), slept.iter()) {
            bo.set_saved(false);
        }
        self.hw.quiesce();
        // The device reaches no memory any more: host mappings give their
        // DMA mappings back with it (their pins stay until their files go).
        for c in Iterator::chain(self.clients.lock().iter(), self.zombies.lock().iter()) {
            c.host.lock().release_dma();
        }
        // Every queued job and bind job cancelled (no fence callback can
        // kick the worker afterwards), then the worker waited for.
        self.gpu.cancel_exported();
        crate::ffi::flush_work(&self.gpu);
        let (kept, lost) = self.retired.release_quarantine();
        if kept + lost > 0 {
            dev_info!(
                self.hw.pdev(),
                "{} retired pages kept out of use after unbind ({} could not be)\n",
                kept,
                lost
            );
        }
        // The device walks no page table any more: the table memory goes
        // with the binding, even while files still own address spaces.
        if let Some(pool) = self.pt_pool.as_ref() {
            pool.release();
        }
        self.gpu.release_dma();
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
            uapi::VGPU_PARAM_VRAM_SIZE => self.hw.memory.as_ref().map_or(0, |m| m.layout.size),
            uapi::VGPU_PARAM_VRAM_VISIBLE => self
                .hw
                .memory
                .as_ref()
                .filter(|m| m.aperture.is_some())
                .map_or(0, |m| m.layout.visible),
            uapi::VGPU_PARAM_VIRTUAL_FUNCTION => id.function.into(),
            p => self.gpu.pm_param(p).ok_or(EINVAL)?,
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
        // LAB(0) BEGIN ping
        let hw = &self.hw;
        let serial = hw.serialise();
        let start = Instant::<Monotonic>::now();
        let reply = hw.command_locked(&serial, Command::Ping { cookie })?;
        let r: PingReply = reply.get()?;
        if r.cookie != cookie || r.event_seq == 0 {
            crate::dev_err_ratelimited!(
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
            crate::dev_err_ratelimited!(
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
        // LAB(0) END ping
    }
}

impl IrqTarget for Vgpu {
    fn link(&self) -> &Link {
        &self.hw.link
    }

    fn config_changed(&self) {
        if self.hw.config_changed() {
            self.gpu.device_gone();
        }
    }

    fn control_used(&self) {
        self.hw.control.wake();
    }

    fn events_used(&self) {
        self.hw.process_events(&*self.gpu);
        // Events that made room on a ring with queued jobs, or failed a
        // context's ring: the scheduler runs in process context.
        self.gpu.kick_if_wanted();
    }
}

impl Periodic for Vgpu {
    fn tick(&self) -> Option<u64> {
        if self.hw.heartbeat() {
            self.gpu.device_gone();
            return None;
        }
        // While tracing, a clock sync every second: the fit follows drift.
        if self.hw.trace.sync_due() {
            let _ = self.hw.sync_clock();
        }
        self.gpu.firmware_check();
        self.gpu.hang_check();
        self.gpu.publish_dumps();
        // Not while a system sleep saves VRAM.
        if let Some(_power) = self.power.try_lock() {
            self.gpu.runtime_suspend_check(self);
        }
        // A safety net: anything ready in the queues goes now.
        self.gpu.pump();
        self.gpu.run_binds();
        Some(self.gpu.hang_due_ns.load(Relaxed)).filter(|&t| t != 0)
    }
}
