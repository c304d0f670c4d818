//! The GPU: state shared by the control processor (on the vhost-user
//! thread) and the engine threads, and the mailbox through which the
//! control side asks an engine for things only the engine may do.
//!
//! # Threads and locks
//!
//! * The **control side** (the thread serving the control queue) executes
//!   commands: it reads and changes [`GpuState`] under its mutex, never
//!   touches an engine's TLB or a running ring's cursor, and asks engines
//!   for resets and TLB invalidations through their mailbox, waiting for the
//!   answer.
//! * Each **engine thread** (`scheduler::engine_main`) owns its TLB and
//!   its command processor. It takes the state lock only between time
//!   slices (to pick a ring, retire it, serve its mailbox) and never while
//!   it executes packets; it finds requests at every packet or chunk
//!   boundary through its `attention` flag.
//! * The **event unit** has its own mutex, always taken after the state
//!   lock if both are held. Whoever posts an event (`super::post`) wakes
//!   the transport through the [`Notify`] hook so the record is delivered.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::Duration;

use vgpu_hwif::event::EventRecord;
use vgpu_hwif::proto::engine;
use vm_memory::{GuestAddressSpace, GuestMemoryAtomic, GuestMemoryLoadGuard};

use super::capture::CaptureUnit;
use super::clock::Clock;
use super::context::ContextTable;
use super::events::EventUnit;
use super::inject::Injector;
use super::mmu::Mem;
use super::sanitize::Sanitizer;
use super::telemetry::{Stats, Trace};

/// Number of engines.
pub const ENGINES: usize = engine::COUNT as usize;

/// How the transport learns that an event was posted.
pub trait Notify: Send + Sync {
    /// Called after an event was queued (from any thread).
    fn notify(&self);
}

/// Scheduling parameters and the identity of the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuConfig {
    /// Hardware generation (1 or 2).
    pub generation: u32,
    /// VA width of the generation.
    pub va_bits: u32,
    /// Compute units (reported in `IDENTIFY`).
    pub compute_units: u32,
    /// Longest time between two checks of a ring waiting on a semaphore.
    pub sem_poll: Duration,
    /// Record a packet trace.
    pub trace: bool,
    /// Which engine runs kernels.
    pub jit: vgpu_isa::jit::JitMode,
    /// How long the doorbell watcher polls after the last activity.
    pub doorbell_poll: Duration,
    /// Device memory.
    pub vram: crate::config::VramConfig,
    /// The VF's partition when the device is a virtual function.
    pub partition: Option<crate::config::PartitionConfig>,
}

impl GpuConfig {
    /// The model of a device configured as `cfg`, with the default
    /// semaphore poll interval.
    pub fn for_device(cfg: &crate::config::DeviceConfig) -> Self {
        let generation = cfg.generation.number();
        GpuConfig {
            generation,
            va_bits: vgpu_hwif::mmu::va_bits(generation),
            compute_units: cfg.compute_units,
            sem_poll: SEM_POLL,
            trace: cfg.trace,
            jit: cfg.jit,
            doorbell_poll: cfg.doorbell_poll,
            vram: cfg.vram,
            partition: cfg.partition,
        }
    }
}

/// Time slice before a firmware image runs (then the image's).
pub const TIME_SLICE: Duration = Duration::from_nanos(super::firmware::ROM_SLICE_NS);
/// Default semaphore poll interval.
pub const SEM_POLL: Duration = Duration::from_millis(1);

/// Something only an engine thread may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// Reset the engine. With `only_ctx`, only if the engine was executing
    /// that context when it stopped (a forced context destroy). `silent`
    /// resets (part of a device reset) post no event and count nowhere.
    Reset {
        /// Reset only if this context is in flight.
        only_ctx: Option<u32>,
        /// Also clear this context's ring on the engine, whatever its
        /// state (the ring the driver found hung).
        hung_ctx: Option<u32>,
        /// No `RESET_DONE` event, no counters.
        silent: bool,
    },
    /// Capture context `ctx` (its ring on this engine, this engine's
    /// TLBs) for `reason` (see `capture`).
    Capture {
        /// Context.
        ctx: u32,
        /// `vgpu_hwif::capture::reason`.
        reason: u32,
    },
    /// Drop TLB entries of `asid` overlapping `va..va + size` (0 = all).
    Invalidate {
        /// Address space.
        asid: u32,
        /// Start.
        va: u64,
        /// Size, 0 = everything.
        size: u64,
    },
}

/// What a reset found in flight: context and its ring's read pointer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResetReport {
    /// Context whose ring was executing, or `CTX_NONE`.
    pub ctx_id: u32,
    /// That ring's read pointer where the engine stopped (0 if none).
    pub rptr: u32,
}

/// Per-engine shared state (under the state lock).
#[derive(Debug, Default)]
pub struct EngineState {
    /// Context (and its priority) whose ring the engine is executing.
    pub current: Option<(u32, u32)>,
    /// The context whose slice the engine cut short to serve its mailbox;
    /// a reset served right after treats its ring as the one in flight.
    pub interrupted: Option<u32>,
    /// Pending requests with their ids.
    pub requests: VecDeque<(u64, Request)>,
    /// Next request id (ids start at 1).
    pub next_request: u64,
    /// Every request with an id up to this one has been served.
    pub completed: u64,
    /// Results of served reset requests, by id (kept until collected).
    pub reset_reports: Vec<(u64, ResetReport)>,
    /// Counters since power-on.
    pub stats: Stats,
    /// Context picked last (round-robin position).
    pub rr_last: u32,
}

/// Everything the control side and the engines share.
#[derive(Debug)]
pub struct GpuState {
    /// Contexts and their rings.
    pub contexts: ContextTable,
    /// Engines.
    pub engines: [EngineState; ENGINES],
    /// Next fault id (from 1).
    pub next_fault_id: u64,
    /// Device resets since power-on (virtio resets included).
    pub device_resets: u64,
}

impl GpuState {
    /// The power-on state.
    pub fn new() -> Self {
        GpuState {
            contexts: ContextTable::new(),
            engines: Default::default(),
            next_fault_id: 1,
            device_resets: 0,
        }
    }

    /// Allocates a fault id.
    pub fn fault_id(&mut self) -> u64 {
        let id = self.next_fault_id;
        self.next_fault_id = self.next_fault_id.wrapping_add(1).max(1);
        id
    }
}

impl Default for GpuState {
    fn default() -> Self {
        Self::new()
    }
}

/// The shared GPU.
pub struct Gpu {
    /// Configuration.
    pub cfg: GpuConfig,
    /// Device clock.
    pub clock: Arc<dyn Clock>,
    state: Mutex<GpuState>,
    /// Wakes engine `e` (paired with the state lock).
    pub wake: [Condvar; ENGINES],
    /// Signals served requests (paired with the state lock).
    pub done: Condvar,
    /// Set when engine `e` must stop at its next boundary.
    pub attention: [AtomicBool; ENGINES],
    /// Cleared when engine `e`'s thread ends.
    pub alive: [AtomicBool; ENGINES],
    /// Bumped whenever a semaphore may have changed.
    pub sem_epoch: AtomicU64,
    /// Set to end the engine threads.
    pub shutdown: AtomicBool,
    events: Mutex<EventUnit>,
    notifier: RwLock<Option<Arc<dyn Notify>>>,
    mem: Mutex<GuestMemoryAtomic<Mem>>,
    /// The packet trace, if recording.
    pub trace: Option<Mutex<Trace>>,
    /// The fault injector.
    pub inject: Injector,
    /// The driver sanitizer (off unless configured).
    pub sanitizer: Arc<Sanitizer>,
    /// Tests: a panic to provoke in engine `e` (see `cp::TestPanic`).
    #[cfg(test)]
    pub test_panic: Mutex<[Option<super::cp::TestPanic>; ENGINES]>,
    /// Captures of failing contexts.
    pub capture: CaptureUnit,
    /// The session's record (record mode) or the recorded memory a replay
    /// serves; set before the first command.
    pub record: std::sync::OnceLock<Arc<super::record::Recorder>>,
    /// Watched doorbell blocks (user-mode queues).
    pub watch: super::watch::Watcher,
    /// Device memory (VRAM).
    pub vram: super::memory::Vram,
    /// The firmware: boot state and the running image's parameters.
    pub firmware: super::firmware::Firmware,
    /// Power states.
    pub power: super::power::Power,
    /// The VF's partition and the arbiter of the engines it shares (none:
    /// the whole device).
    pub partition: Option<super::partition::Partition>,
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpu")
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}

fn unpoison<T>(r: Result<T, PoisonError<T>>) -> T {
    r.unwrap_or_else(PoisonError::into_inner)
}

impl Gpu {
    /// A powered-on GPU without guest memory.
    pub fn new(cfg: GpuConfig, clock: Arc<dyn Clock>) -> Self {
        Self::with_shared(cfg, clock, None)
    }

    /// A powered-on GPU; a virtual function (`cfg.partition`) takes its
    /// VRAM window and engine time from `shared`.
    pub fn with_shared(
        cfg: GpuConfig,
        clock: Arc<dyn Clock>,
        shared: Option<&super::partition::Shared>,
    ) -> Self {
        let vram = match (cfg.partition, shared.and_then(|s| s.vram.as_deref())) {
            (Some(p), Some(file)) => super::memory::Vram::window(file, p.vram_offset, cfg.vram),
            _ => super::memory::Vram::new(cfg.vram),
        };
        let partition = cfg
            .partition
            .zip(shared)
            .map(|(p, s)| super::partition::Partition {
                cfg: p,
                arbiter: s.arbiter.clone(),
            });
        Gpu {
            cfg,
            clock,
            state: Mutex::new(GpuState::new()),
            wake: Default::default(),
            done: Condvar::new(),
            attention: Default::default(),
            alive: [AtomicBool::new(true), AtomicBool::new(true)],
            sem_epoch: AtomicU64::new(0),
            shutdown: AtomicBool::new(false),
            events: Mutex::new(EventUnit::new()),
            notifier: RwLock::new(None),
            mem: Mutex::new(GuestMemoryAtomic::new(Mem::new())),
            trace: cfg.trace.then(|| Mutex::new(Trace::new())),
            inject: Injector::new(),
            sanitizer: Arc::new(Sanitizer::new(cfg.generation)),
            #[cfg(test)]
            test_panic: Mutex::new([None; ENGINES]),
            capture: CaptureUnit::new(),
            record: std::sync::OnceLock::new(),
            watch: super::watch::Watcher::new(cfg.doorbell_poll),
            vram: vram.unwrap_or_else(|e| {
                log::error!("{e}: the device runs without VRAM");
                super::memory::Vram::none(cfg.vram)
            }),
            firmware: super::firmware::Firmware::new(
                cfg.generation,
                vgpu_hwif::proto::PROTOCOL_VERSION,
            ),
            power: super::power::Power::default(),
            partition,
        }
    }

    /// The contexts the driver may create: ids `0..max_contexts()` (its
    /// partition's share on a virtual function).
    pub fn max_contexts(&self) -> u32 {
        self.cfg
            .partition
            .map_or(vgpu_hwif::proto::MAX_CONTEXTS, |p| p.contexts)
    }

    /// Locks the shared state.
    pub fn lock(&self) -> MutexGuard<'_, GpuState> {
        unpoison(self.state.lock())
    }

    /// Locks the event unit.
    pub fn events(&self) -> MutexGuard<'_, EventUnit> {
        unpoison(self.events.lock())
    }

    /// Installs the transport's notification hook.
    pub fn set_notifier(&self, n: Option<Arc<dyn Notify>>) {
        *unpoison(self.notifier.write()) = n;
    }

    /// Uses `mem` as guest memory from now on.
    pub fn set_memory(&self, mem: GuestMemoryAtomic<Mem>) {
        *unpoison(self.mem.lock()) = mem;
    }

    /// A snapshot of guest memory (kept mapped while held).
    pub fn memory(&self) -> GuestMemoryLoadGuard<Mem> {
        unpoison(self.mem.lock()).memory()
    }

    /// Wakes the transport.
    pub fn kick_transport(&self) {
        if let Some(n) = unpoison(self.notifier.read()).as_ref() {
            n.notify();
        }
    }

    /// The oldest undelivered event record.
    pub fn front_event(&self) -> Option<EventRecord> {
        self.events().front().copied()
    }

    /// Wakes engine `e`'s thread.
    pub fn wake_engine(&self, e: usize) {
        if let Some(cv) = self.wake.get(e) {
            cv.notify_all();
        }
    }

    /// Asks engine `e` to stop at its next packet or chunk boundary and
    /// wakes it.
    pub fn poke(&self, e: usize) {
        if let Some(a) = self.attention.get(e) {
            a.store(true, Ordering::Release);
        }
        self.wake_engine(e);
    }

    /// Something that may satisfy a semaphore happened: rings waiting on
    /// one are re-checked. Takes the state lock briefly so that an engine
    /// about to sleep cannot miss it.
    pub fn semaphores_changed(&self) {
        self.sem_epoch.fetch_add(1, Ordering::AcqRel);
        drop(self.lock());
        for e in 0..ENGINES {
            self.wake_engine(e);
        }
    }

    /// Queues `req` for engine `e` (state lock held), pokes the engine and
    /// returns the request id to wait for.
    pub fn submit(&self, st: &mut GpuState, e: usize, req: Request) -> u64 {
        let Some(es) = st.engines.get_mut(e) else {
            return 0;
        };
        es.next_request += 1;
        let id = es.next_request;
        es.requests.push_back((id, req));
        self.poke(e);
        id
    }

    /// Waits until engine `e` served request `id`. Returns the guard and
    /// whether the engine is alive (a dead engine never answers: the
    /// device is lost).
    pub fn wait_served<'a>(
        &'a self,
        mut st: MutexGuard<'a, GpuState>,
        e: usize,
        id: u64,
    ) -> (MutexGuard<'a, GpuState>, bool) {
        loop {
            let served = st.engines.get(e).is_none_or(|es| es.completed >= id);
            if served {
                return (st, true);
            }
            if !self.alive.get(e).is_some_and(|a| a.load(Ordering::Acquire)) {
                return (st, false);
            }
            st = unpoison(self.done.wait_timeout(st, Duration::from_millis(50))).0;
        }
    }
}
