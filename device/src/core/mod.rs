//! The transport-free device core: everything the device does, driven by
//! plain bytes and explicit calls, with no knowledge of virtqueues or
//! vhost-user.
//!
//! | block | module | state machine |
//! |---|---|---|
//! | control processor | [`control`] | decode → check → execute → one reply |
//! | contexts | [`context`] | free → active → (dying) → free |
//! | rings | [`ring`] | idle / ready / running / sem-wait / fault-stalled / stopped |
//! | doorbells | [`doorbell`], [`watch`] | `DOORBELL` latches a ring's write pointer; the watcher: polling ⇄ sleeping, per watched block translated → read on every pass → fault ends it |
//! | command processor | [`cp`] | fetch → decode → in flight → complete, per packet |
//! | physical memory | [`memory`] | what a device-physical address reaches: guest RAM, VRAM at `VRAM_BASE`; VRAM kept / zeroed / scribbled by a device reset |
//! | MMU and TLBs | [`mmu`], [`dma`] | range check → four-level walk → leaf; per-engine TLB |
//! | copy engine | [`copy_engine`] | transfer progress, one chunk per step |
//! | compute engine | [`compute_engine`] | `DISPATCH`: load (module, arguments, the kernel's native code from the engine's JIT cache) → steps on the compute units → done, or a fault, trap or error; the common packets as on the copy engine |
//! | kernel memory | [`kernel_mem`] | a kernel's global memory per compute unit: `vgpu-isa`'s `PagedMemory` over the MMU |
//! | scheduler | [`scheduler`] | per-engine loop: mailbox → doorbells → select → slice → retire |
//! | resets | [`reset`] | engine reset, device reset |
//! | events | [`events`], [`post`] | numbered FIFO with loss accounting; a post: queued → noted by the capture → starvation checked by the sanitizer → transport woken |
//! | fault injection | [`inject`] | armed → fired (logged) → cleared by reset; told a [`inject::Site`] by the command processor |
//! | poisoned pages | [`poison`] | pages with an uncorrectable ECC error that engine reads fail on |
//! | retired pages | [`ras`] | the driver's retired pages, kept across resets and driver reloads (a RAS EEPROM) |
//! | driver sanitizer | [`sanitize`], [`sanitize_hooks`] | per check family: rings (published → fetched), TLB entries (filled → hit → dropped), pages (declared → given back), fence slots, access epochs, blocked waits; reports numbered and kept |
//! | telemetry | [`telemetry`], [`counters`] | counters and the packet trace |
//! | captures | [`capture`], [`capture_ctl`] | failure or request → frozen context state → kept for `CAPTURE_READ` |
//! | record and replay | [`record`], [`record_ctl`] | what the engines read, versioned per page; replayed in order |
//! | firmware | [`firmware`] | wait-load → loaded → booting → running, or failed; back to wait-load at a device reset; the running image's parameters (slices, packets, features) |
//! | power | [`power`] | D0 ⇄ D3hot / D3cold (down only when idle; back in the boot state), residency and entries |
//! | partitions | [`partition`] | per engine and VF: idle → waiting → owner → idle (the engines' weighted-fair arbiter of a partitioned device) |
//! | time | [`clock`] | device clock |
//! | JSON | [`json`] | one string escaper for replies and reports |
//!
//! [`Device`] ties the blocks together and owns the engine threads; the
//! virtqueue layer ([`crate::virtq`]) feeds it. The byte layouts the blocks
//! decode (packets, page-table entries, commands, events) are `vgpu_hwif`'s.
//!
//! # Blocks
//!
//! Dependencies point one way: each block uses only the blocks of its row
//! (checked by `scripts/deps device/src/lib.rs --scope core`; test modules
//! may use anything). [`gpu`] holds the state the threads share and the
//! blocks below it the parts of that state; the blocks above it act on the
//! whole GPU. Top first:
//!
//! | block | may use |
//! |---|---|
//! | `control` | `capture`, `capture_ctl`, `context`, `counters`, `doorbell`, `firmware`, `gpu`, `inject`, `memory`, `mmu`, `post`, `ras`, `reset`, `ring`, `sanitize`, `sanitize_hooks`, `telemetry`, `crate::config` |
//! | `scheduler` | `capture_ctl`, `compute_engine`, `context`, `cp`, `firmware`, `gpu`, `inject`, `mmu`, `partition`, `post`, `reset`, `ring`, `sanitize_hooks`, `telemetry` |
//! | `doorbell` | `context`, `gpu`, `mmu`, `post`, `ring`, `sanitize_hooks`, `watch` |
//! | `capture_ctl` | `capture`, `cp`, `gpu`, `mmu` |
//! | `reset` | `gpu`, `ring`, `crate::config` |
//! | `sanitize_hooks` | `context`, `cp`, `gpu`, `mmu`, `ring`, `sanitize` |
//! | `post` | `gpu` |
//! | `record_ctl` | `gpu`, `record` |
//! | `gpu` | `capture`, `clock`, `context`, `events`, `firmware`, `inject`, `memory`, `mmu`, `partition`, `power`, `record`, `sanitize`, `telemetry`, `watch`, `crate::config` |
//! | `partition` | `crate::config` |
//! | `capture` | `context`, `copy_engine`, `cp`, `inject`, `mmu`, `ring` |
//! | `cp` | `compute_engine`, `copy_engine`, `dma`, `inject`, `mmu`, `poison`, `record`, `ring`, `sanitize`, `telemetry` |
//! | `context` | `mmu`, `ring`, `telemetry` |
//! | `inject` | `copy_engine`, `dma`, `mmu`, `poison`, `ring`, `sanitize` |
//! | `ring` | `compute_engine`, `copy_engine`, `telemetry` |
//! | `compute_engine` | `dma`, `kernel_mem`, `mmu`, `poison`, `record` |
//! | `copy_engine` | `dma`, `mmu` |
//! | `kernel_mem` | `dma`, `mmu`, `poison` |
//! | `dma` | `mmu`, `poison`, `record` |
//! | `mmu` | `memory`, `record`, `sanitize` |
//! | `record` | `memory`, `crate::config` |
//! | `sanitize` | `json` |
//! | `watch` | - |
//! | `memory` | `crate::config` |
//! | `firmware` | - |
//! | `power` | - |
//! | `json` | - |
//! | `clock` | - |
//! | `counters` | - |
//! | `events` | - |
//! | `poison` | - |
//! | `ras` | - |
//! | `telemetry` | - |

pub mod capture;
pub mod capture_ctl;
pub mod clock;
pub mod compute_engine;
pub mod context;
pub mod control;
pub mod copy_engine;
pub mod counters;
pub mod cp;
pub mod dma;
pub mod doorbell;
pub mod events;
pub mod firmware;
pub mod gpu;
pub mod inject;
pub mod json;
pub mod kernel_mem;
pub mod memory;
pub mod mmu;
pub mod partition;
pub mod poison;
pub mod post;
pub mod power;
pub mod ras;
pub mod record;
pub mod record_ctl;
pub mod reset;
pub mod ring;
pub mod sanitize;
pub mod sanitize_hooks;
pub mod scheduler;
pub mod telemetry;
pub mod watch;

use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;

use vgpu_hwif::event::EventRecord;
use vm_memory::GuestMemoryAtomic;

use crate::config::DeviceConfig;
use clock::{Clock, MonotonicClock};
use control::{ControlProcessor, Reply};
use counters::Counters;
use gpu::{Gpu, GpuConfig, Notify, ENGINES};
use mmu::Mem;

/// One device instance: the GPU model and its engine threads.
pub struct Device {
    config: DeviceConfig,
    gpu: Arc<Gpu>,
    control: ControlProcessor,
    threads: Vec<JoinHandle<()>>,
    protocol_errors: u64,
    rings_broken: u64,
}

impl Device {
    /// A device configured as `config`, timed by the host's monotonic clock
    /// from now on.
    pub fn new(config: DeviceConfig) -> Self {
        Self::with_clock(config, Box::new(MonotonicClock::new()))
    }

    /// A device timed by `clock`.
    pub fn with_clock(config: DeviceConfig, clock: Box<dyn Clock>) -> Self {
        Self::with_model(config, GpuConfig::for_device(&config), Arc::from(clock))
    }

    /// A device whose model uses `model` (scheduling parameters) and
    /// `clock`.
    pub fn with_model(config: DeviceConfig, model: GpuConfig, clock: Arc<dyn Clock>) -> Self {
        Self::build(config, Arc::new(Gpu::new(model, clock)))
    }

    /// Virtual function `config.partition` of a partitioned device: its
    /// VRAM window and its engine time come from `shared`.
    pub fn virtual_function(config: DeviceConfig, shared: &partition::Shared) -> Self {
        let model = GpuConfig::for_device(&config);
        let clock: Arc<dyn Clock> = Arc::new(MonotonicClock::new());
        Self::build(
            config,
            Arc::new(Gpu::with_shared(model, clock, Some(shared))),
        )
    }

    fn build(config: DeviceConfig, gpu: Arc<Gpu>) -> Self {
        if config.boot == crate::config::Boot::Preloaded {
            gpu.firmware.preload_builtin(gpu.clock.now_ns());
        }
        let mut threads = Vec::with_capacity(ENGINES);
        for e in 0..ENGINES {
            let g = gpu.clone();
            let name = if e == 0 { "vgpu-copy" } else { "vgpu-compute" };
            match std::thread::Builder::new()
                .name(name.to_owned())
                .spawn(move || scheduler::engine_main(g, e))
            {
                Ok(t) => threads.push(t),
                Err(err) => {
                    // An engine without a thread never answers: commands
                    // that need it report DEVICE_LOST.
                    log::error!("cannot start the {name} thread: {err}");
                    if let Some(a) = gpu.alive.get(e) {
                        a.store(false, Ordering::Release);
                    }
                }
            }
        }
        let g = gpu.clone();
        match std::thread::Builder::new()
            .name("vgpu-doorbells".to_owned())
            .spawn(move || doorbell::watcher_main(g))
        {
            Ok(t) => threads.push(t),
            // Without it, watched doorbells are never seen: DOORBELL still
            // works.
            Err(err) => log::error!("cannot start the doorbell watcher thread: {err}"),
        }
        Device {
            config,
            control: ControlProcessor::new(&config, gpu.clone()),
            gpu,
            threads,
            protocol_errors: 0,
            rings_broken: 0,
        }
    }

    /// The device's configuration.
    pub fn config(&self) -> &DeviceConfig {
        &self.config
    }

    /// The GPU model (for inspection).
    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    /// Record mode: logs every guest-to-device input of the session from
    /// now on into a new file at `path` (see [`record`]).
    ///
    /// # Errors
    ///
    /// The file cannot be created, or the device already records or
    /// replays.
    pub fn start_recording(&self, path: &std::path::Path) -> io::Result<()> {
        record_ctl::start(&self.gpu, path, &record::config_text(&self.config, 0, &[]))
    }

    /// Replay of a record: the engines read the recorded memory (see
    /// [`record::Recorder::replaying`]).
    ///
    /// # Errors
    ///
    /// The device already records or replays.
    pub fn start_replay(&self, entries: &[record::Entry]) -> io::Result<()> {
        record_ctl::replay(&self.gpu, entries)
    }

    /// The session's recorder, if recording or replaying.
    pub fn recorder(&self) -> Option<&record::Recorder> {
        self.gpu.record.get().map(|r| &**r)
    }

    fn record_memory_map(&self, mem: &Mem) {
        if let Some(r) = self.gpu.record.get() {
            r.memory_map(self.gpu.clock.now_ns(), mem);
        }
    }

    /// Uses `mem` as guest memory (the vhost-user memory table); the
    /// engines see it with the device's VRAM attached
    /// ([`memory::Vram::attach`]).
    pub fn set_memory(&self, mem: GuestMemoryAtomic<Mem>) {
        use vm_memory::GuestAddressSpace;
        let all = self.gpu.vram.attach(&mem.memory());
        self.record_memory_map(&all);
        self.gpu.set_memory(GuestMemoryAtomic::new(all));
    }

    /// Makes `path` a link to the VRAM memfd for QEMU's aperture (see
    /// [`memory::Vram::publish`]).
    ///
    /// # Errors
    ///
    /// The link cannot be made, or the device has no VRAM.
    pub fn publish_vram(&self, path: &std::path::Path) -> Result<(), memory::VramError> {
        self.gpu.vram.publish(path)
    }

    /// Installs the hook called whenever an event is posted.
    pub fn set_notifier(&self, n: Arc<dyn Notify>) {
        self.gpu.set_notifier(Some(n));
    }

    /// Records a context's page tables as the driver left them when `bytes`
    /// is a command after which they are complete (`TLB_INVALIDATE`,
    /// `CONTEXT_DESTROY`): see [`record::Recorder::tables`].
    fn audit_tables(&self, r: &record::Recorder, bytes: &[u8]) {
        use vgpu_hwif::proto::Command;
        let ctx = match vgpu_hwif::proto::Command::decode(bytes).1 {
            Ok(Command::TlbInvalidate { ctx_id, .. } | Command::ContextDestroy { ctx_id, .. }) => {
                ctx_id
            }
            _ => return,
        };
        let root = self.gpu.lock().contexts.get(ctx).map(|c| c.pt_root);
        if let Ok(root) = root {
            r.tables(&self.gpu.memory(), ctx, root);
        }
    }

    /// Executes one command (bytes copied out of guest memory) whose reply
    /// buffer holds `reply_room` bytes.
    pub fn handle_command(&mut self, bytes: &[u8], reply_room: usize) -> Reply {
        let traced = self.gpu.trace.as_ref().map(|_| self.gpu.clock.now_ns());
        let reply = match self.gpu.record.get() {
            None => self.control.process(bytes, reply_room),
            Some(r) => {
                r.command(self.gpu.clock.now_ns(), bytes, reply_room);
                self.audit_tables(r, bytes);
                let reply = self.control.process(bytes, reply_room);
                let t = self.gpu.clock.now_ns();
                r.log(
                    record::kind::REPLY,
                    record::NO_ENGINE,
                    t,
                    0,
                    &[reply.as_bytes()],
                );
                reply
            }
        };
        if let (Some(t0), Some(trace)) = (traced, self.gpu.trace.as_ref()) {
            let rec = telemetry::command_record(bytes, t0, self.gpu.clock.now_ns());
            unpoison(trace.lock()).extend(&[rec]);
        }
        reply
    }

    /// The oldest event record waiting for a driver buffer.
    pub fn next_event(&self) -> Option<EventRecord> {
        self.gpu.front_event()
    }

    /// The record returned by [`Device::next_event`] was written into a
    /// driver buffer.
    pub fn event_delivered(&mut self) -> Option<EventRecord> {
        let now = self.gpu.clock.now_ns();
        let rec = self.gpu.events().commit_front(now);
        if let (true, Some(r)) = (self.gpu.sanitizer.enabled(), rec.as_ref()) {
            if let Ok(ev) = vgpu_hwif::event::Event::from_record(r) {
                sanitize_hooks::on_event_delivered(&self.gpu, &ev);
            }
        }
        if let (Some(t), Some(e)) = (self.gpu.trace.as_ref(), rec.as_ref()) {
            unpoison(t.lock()).extend(&[telemetry::event_record(e, now)]);
        }
        if let (Some(r), Some(e)) = (self.gpu.record.get(), rec.as_ref()) {
            use vgpu_hwif::pod::Pod;
            r.log(
                record::kind::EVENT,
                record::NO_ENGINE,
                now,
                0,
                &[e.as_bytes()],
            );
        }
        rec
    }

    /// Event records waiting for a driver buffer.
    pub fn pending_events(&self) -> usize {
        self.gpu.events().pending()
    }

    /// Records a descriptor chain that could not be served.
    pub fn count_protocol_error(&mut self) {
        self.protocol_errors = self.protocol_errors.saturating_add(1);
    }

    /// Records a virtqueue found broken (its ring structures inconsistent)
    /// and stopped.
    pub fn count_ring_broken(&mut self) {
        self.rings_broken = self.rings_broken.saturating_add(1);
    }

    /// Virtio reset: the GPU returns to its power-on state (see
    /// [`reset`]); pending events are discarded and event numbering
    /// restarts. Counters and the clock keep running.
    pub fn reset(&mut self) {
        if let Some(r) = self.gpu.record.get() {
            r.log(
                record::kind::RESET,
                record::NO_ENGINE,
                self.gpu.clock.now_ns(),
                0,
                &[],
            );
        }
        if let Err(e) = reset::reset_device(&self.gpu, false) {
            log::error!("device reset: {e}");
        }
        // The driver went away: its memory declarations with it.
        self.gpu.sanitizer.device_reset(true);
    }

    /// A snapshot of every counter.
    pub fn counters(&self) -> Counters {
        let mut c = self.control.counters();
        let e = self.gpu.events().counters();
        c.events_posted = e.posted;
        c.events_delivered = e.delivered;
        c.events_dropped = e.dropped;
        c.protocol_errors = self.protocol_errors;
        c.rings_broken = self.rings_broken;
        c
    }

    /// Writes the packet trace as Chrome trace-event JSON (an empty trace
    /// if the device was not configured to record one).
    pub fn write_trace(&self, out: &mut dyn io::Write) -> io::Result<()> {
        match self.gpu.trace.as_ref() {
            Some(t) => t
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .write_json(out),
            None => telemetry::Trace::new().write_json(out),
        }
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        if let Some(Err(e)) = self.gpu.record.get().map(|r| r.flush()) {
            log::error!("record: {e}");
        }
        self.gpu.shutdown.store(true, Ordering::Release);
        for e in 0..ENGINES {
            // Under the state lock so that no engine misses the wake-up
            // between its shutdown check and its sleep.
            let st = self.gpu.lock();
            self.gpu.poke(e);
            drop(st);
        }
        self.gpu.watch.shut_down();
        for t in self.threads.drain(..) {
            if t.join().is_err() {
                log::error!("an engine thread panicked");
            }
        }
    }
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device")
            .field("config", &self.config)
            .field("pending_events", &self.pending_events())
            .field("counters", &self.counters())
            .finish()
    }
}

#[cfg(test)]
mod model_tests;

#[cfg(test)]
mod panic_tests;

fn unpoison<T>(r: Result<T, std::sync::PoisonError<T>>) -> T {
    r.unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::clock::ManualClock;
    use super::control::{MAX_REPLY_SIZE, REPLY_HEADER_SIZE};
    use super::*;
    use crate::config::Generation;
    use vgpu_hwif::event::Event;
    use vgpu_hwif::pod::Pod;
    use vgpu_hwif::proto::{
        CommandHeader, Opcode, PingReply, ReplyHeader, Status, MAX_COMMAND_SIZE,
    };
    use vgpu_hwif::rng::Rng;

    /// The status a well-behaved device must give `bytes`, computed
    /// independently of `Command::decode`.
    fn expected_status(bytes: &[u8]) -> (Status, u32, u64) {
        let Some(h) = CommandHeader::read_from(bytes) else {
            return (Status::Truncated, 0, 0);
        };
        if bytes.len() > MAX_COMMAND_SIZE {
            return (Status::Oversized, h.opcode, h.tag);
        }
        let want = match h.opcode {
            1 => 16,
            2 => 24,
            _ => return (Status::UnknownOpcode, h.opcode, h.tag),
        };
        let status = if bytes.len() < want {
            Status::Truncated
        } else if bytes.len() > want {
            Status::Oversized
        } else if h.flags != 0 {
            Status::ReservedNonZero
        } else {
            Status::Ok
        };
        (status, h.opcode, h.tag)
    }

    #[test]
    fn random_commands_never_panic_and_get_consistent_replies() {
        let clock = ManualClock::new(0);
        let mut dev = Device::with_clock(
            DeviceConfig::new(Generation::Gen2, 4).unwrap(),
            Box::new(clock.clone()),
        );
        let mut rng = Rng::from_state(0x9e37_79b9_7f4a_7c15);
        let mut oks = 0u64;
        let mut pings = 0u64;
        const N: usize = 5000;
        for i in 0..N {
            let len = match rng.below(8) {
                0 => rng.below(16) as usize,
                1 => 16,
                2 => 24,
                3 => MAX_COMMAND_SIZE + rng.below(2) as usize,
                _ => rng.below(64) as usize,
            };
            let mut bytes: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
            // Bias half of the inputs towards valid opcodes and zero flags
            // so that the success paths are exercised too.
            if len >= 16 && rng.below(2) == 0 {
                bytes[..4].copy_from_slice(&(1 + rng.below(2) as u32).to_le_bytes());
                if rng.below(4) != 0 {
                    bytes[4..8].copy_from_slice(&0u32.to_le_bytes());
                }
            }
            let room = if rng.below(10) == 0 {
                REPLY_HEADER_SIZE + rng.below(MAX_REPLY_SIZE as u64) as usize
            } else {
                MAX_REPLY_SIZE
            };
            clock.advance(1 + rng.below(1000));
            let reply = dev.handle_command(&bytes, room);

            let h = ReplyHeader::read_from(reply.as_bytes()).expect("reply has a header");
            let (mut status, opcode, tag) = expected_status(&bytes);
            if status == Status::Ok {
                let op = Opcode::from_u32(opcode).unwrap();
                if op.reply_size() > room {
                    status = Status::BadDescriptor;
                }
            }
            assert_eq!(
                h,
                ReplyHeader {
                    status: status as u32,
                    opcode,
                    tag
                },
                "input {i}: {bytes:02x?}"
            );
            if status == Status::Ok {
                oks += 1;
                let op = Opcode::from_u32(opcode).unwrap();
                assert_eq!(reply.len(), op.reply_size(), "input {i}");
                if op == Opcode::Ping {
                    pings += 1;
                    let p = PingReply::read_from(reply.as_bytes()).unwrap();
                    assert_eq!(p.event_seq, pings, "input {i}");
                    assert_eq!(p.cookie.to_le_bytes(), bytes[16..24], "input {i}");
                }
            } else {
                assert_eq!(reply.len(), REPLY_HEADER_SIZE, "input {i}");
            }
            // Keep the FIFO from overflowing so every ping stays visible.
            while dev.pending_events() > 0 {
                let rec = dev.event_delivered().unwrap();
                assert!(matches!(Event::from_record(&rec), Ok(Event::Ping { .. })));
            }
        }
        let c = dev.counters();
        assert_eq!(c.replies(), N as u64);
        assert_eq!(
            c.commands_for(Opcode::Identify) + c.commands_for(Opcode::Ping),
            oks
        );
        assert_eq!(c.commands_for(Opcode::Ping), pings);
        assert_eq!(c.events_posted, pings);
        assert_eq!(c.events_delivered, pings);
        // The generator must have reached every outcome.
        for s in [
            Status::Ok,
            Status::Truncated,
            Status::Oversized,
            Status::UnknownOpcode,
            Status::ReservedNonZero,
            Status::BadDescriptor,
        ] {
            assert!(
                c.errors_for(s) > 0 || (s == Status::Ok && oks > 0),
                "no {s:?} in {N} inputs"
            );
        }
        assert!(pings > 0);
    }

    #[test]
    fn reset_discards_events_and_restarts_numbering() {
        let mut dev = Device::with_clock(DeviceConfig::default(), Box::new(ManualClock::new(0)));
        let mut cmd = [0u8; 24];
        cmd[..4].copy_from_slice(&(Opcode::Ping as u32).to_le_bytes());
        dev.handle_command(&cmd, MAX_REPLY_SIZE);
        dev.handle_command(&cmd, MAX_REPLY_SIZE);
        assert_eq!(dev.pending_events(), 2);
        dev.reset();
        assert_eq!(dev.pending_events(), 0);
        let r = dev.handle_command(&cmd, MAX_REPLY_SIZE);
        assert_eq!(PingReply::read_from(r.as_bytes()).unwrap().event_seq, 1);
        assert_eq!(dev.counters().commands_for(Opcode::Ping), 3);
    }
}
