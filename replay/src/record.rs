//! A recorded session (`vgpu-device --record FILE`) run again on the
//! host-side device model, without a VM: the same commands at the same
//! device times, the engines reading the recorded guest memory, and the
//! replay's replies and event records compared with the recorded ones.
//!
//! Commands are issued in the recorded order. Before each, the replay waits
//! until every engine has started as many packets as it had when the
//! command was recorded (and, if it has started exactly that many, until
//! the engine is idle or [`RecordOptions::settle`] has passed), so that the
//! command meets the engines where the recorded one did. Sessions whose
//! engines ran concurrently with the commands that followed can still
//! diverge in timing; the comparison then names the first difference.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use vgpu_device::config::{DeviceConfig, Generation, VramConfig, VramOnReset};
use vgpu_device::core::clock::{Clock, ManualClock};
use vgpu_device::core::doorbell;
use vgpu_device::core::gpu::{GpuConfig, ENGINES};
use vgpu_device::core::inject::Spec;
use vgpu_device::core::mmu::Mem;
use vgpu_device::core::record::{self, kind, le32, le64, Entry};
use vgpu_device::core::Device;
use vgpu_device::inject_ctl::handle_line;
use vgpu_hwif::event::{EventRecord, EVENT_RECORD_SIZE};
use vgpu_hwif::pod::Pod;
use vgpu_hwif::proto::Opcode;
use vm_memory::{GuestAddress, GuestMemoryAtomic};

/// Errors reading or starting a recorded session.
#[derive(Debug, thiserror::Error)]
pub enum RecordReplayError {
    /// The file.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// Its format.
    #[error("{0}")]
    Format(#[from] record::RecordError),
    /// Its configuration.
    #[error("bad CONFIG entry: {0}")]
    Config(String),
    /// Its memory map.
    #[error("memory map: {0}")]
    Memory(String),
}

/// How a recorded session is replayed.
#[derive(Debug, Clone, Copy)]
pub struct RecordOptions {
    /// Longest wait for an engine to reach the recorded packet count
    /// before a command (then the replay notes a divergence and goes on).
    pub catch_up: Duration,
    /// Longest wait for an engine that reached the count to go idle.
    pub settle: Duration,
    /// Write a packet trace.
    pub trace: bool,
}

impl Default for RecordOptions {
    fn default() -> Self {
        RecordOptions {
            catch_up: Duration::from_secs(5),
            settle: Duration::from_millis(50),
            trace: false,
        }
    }
}

/// Commands whose replies carry times or running counters: executed,
/// not compared.
const UNCOMPARED: [Opcode; 4] = [
    Opcode::QueryStats,
    Opcode::ContextQuery,
    Opcode::TimeQuery,
    Opcode::CaptureRead,
];

/// What the replay found.
#[derive(Debug, Default)]
pub struct Report {
    /// Commands replayed.
    pub commands: u64,
    /// Replies compared and equal.
    pub replies_equal: u64,
    /// Replies not compared (times, counters).
    pub replies_uncompared: u64,
    /// Event records recorded.
    pub events_recorded: Vec<EventRecord>,
    /// Event records the replay delivered.
    pub events_replayed: Vec<EventRecord>,
    /// Fault-injection requests replayed, with the replay's replies.
    pub control: Vec<(String, String)>,
    /// Pages of guest memory the record holds.
    pub pages: u64,
    /// Doorbells the watcher took from watched blocks (user-mode queues),
    /// rung again at the same points.
    pub watched_doorbells: u64,
    /// Differences, in the order found.
    pub divergences: Vec<String>,
}

impl Report {
    /// Whether the replay matched the record.
    pub fn matched(&self) -> bool {
        self.divergences.is_empty()
    }
}

/// The fields of an event record that must match (its time does not).
fn event_key(e: &EventRecord) -> (u32, u64, [u64; 5]) {
    (e.kind, e.seq, e.data)
}

/// Text of an event record.
pub fn event_line(e: &EventRecord) -> String {
    match vgpu_hwif::event::Event::from_record(e) {
        Ok(ev) => format!("#{} {ev:?}", e.seq),
        Err(_) => format!("#{} kind {:#x} data {:x?}", e.seq, e.kind, e.data),
    }
}

/// The injector's seed and startup faults of a `CONFIG` entry.
fn injector_of(entries: &[Entry]) -> (u64, Vec<String>) {
    let Some(c) = entries.iter().find(|e| e.kind == kind::CONFIG) else {
        return (0, Vec::new());
    };
    let text = String::from_utf8_lossy(&c.payload);
    let mut seed = 0;
    let mut specs = Vec::new();
    for line in text.lines() {
        match line.split_once('=') {
            Some(("inject_seed", v)) => seed = v.parse().unwrap_or(0),
            Some(("inject", v)) => specs.push(v.to_owned()),
            _ => {}
        }
    }
    (seed, specs)
}

fn config_of(entries: &[Entry]) -> Result<DeviceConfig, RecordReplayError> {
    let c = entries
        .iter()
        .find(|e| e.kind == kind::CONFIG)
        .ok_or_else(|| RecordReplayError::Config("missing".into()))?;
    let text = String::from_utf8_lossy(&c.payload);
    let (mut generation, mut units, mut jit) = (1u32, 4u32, vgpu_device::config::JitMode::Auto);
    // Records from before VRAM: none.
    let (mut vram, mut visible, mut policy) = (0u64, 0u64, "keep".to_owned());
    // Records from before the firmware handshake: a preloaded image.
    let mut boot = vgpu_device::config::Boot::Preloaded;
    for line in text.lines() {
        let bad = || RecordReplayError::Config(line.to_owned());
        match line.split_once('=') {
            Some(("generation", v)) => generation = v.parse().map_err(|_| bad())?,
            Some(("compute_units", v)) => units = v.parse().map_err(|_| bad())?,
            Some(("jit", v)) => jit = v.parse().map_err(|_| bad())?,
            Some(("vram", v)) => vram = v.parse().map_err(|_| bad())?,
            Some(("visible_vram", v)) => visible = v.parse().map_err(|_| bad())?,
            Some(("vram_on_reset", v)) => v.clone_into(&mut policy),
            Some(("boot", v)) => boot = v.parse().map_err(|_| bad())?,
            _ => {}
        }
    }
    let cfg_err = |e: vgpu_device::config::ConfigError| RecordReplayError::Config(e.to_string());
    let g = Generation::from_number(generation).map_err(cfg_err)?;
    let on_reset = VramOnReset::parse(&policy).map_err(cfg_err)?;
    let vram = VramConfig::new(vram, visible, on_reset).map_err(cfg_err)?;
    DeviceConfig::new(g, units)
        .map(|c| c.with_jit(jit).with_vram(vram).with_boot(boot))
        .map_err(cfg_err)
}

/// Guest RAM as the record's memory map describes it (the VRAM in the
/// map is the replay device's own, attached by the device).
fn memory_of(payload: &[u8]) -> Result<Mem, RecordReplayError> {
    let ranges: Vec<(GuestAddress, usize)> = payload
        .chunks_exact(16)
        .map(|r| (GuestAddress(le64(r, 0)), le64(r, 8) as usize))
        .filter(|(a, _)| a.0 < vgpu_hwif::mmu::VRAM_BASE)
        .collect();
    Mem::from_ranges(&ranges).map_err(|e| RecordReplayError::Memory(e.to_string()))
}

/// A recorded session ready to run.
pub struct RecordReplay {
    entries: Vec<Entry>,
    opts: RecordOptions,
    /// The replay's device.
    pub dev: Device,
    clock: ManualClock,
}

impl std::fmt::Debug for RecordReplay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordReplay")
            .field("entries", &self.entries.len())
            .finish_non_exhaustive()
    }
}

impl RecordReplay {
    /// Reads the record at `path`.
    ///
    /// # Errors
    ///
    /// The file cannot be read or is not a record this build reads.
    pub fn open(path: &Path, opts: RecordOptions) -> Result<Self, RecordReplayError> {
        Self::from_bytes(&std::fs::read(path)?, opts)
    }

    /// A record in memory.
    ///
    /// # Errors
    ///
    /// As [`RecordReplay::open`].
    pub fn from_bytes(bytes: &[u8], opts: RecordOptions) -> Result<Self, RecordReplayError> {
        let entries = record::parse(bytes)?;
        let config = config_of(&entries)?.with_trace(opts.trace);
        let clock = ManualClock::new(0);
        let dev = Device::with_model(
            config,
            GpuConfig::for_device(&config),
            Arc::new(clock.clone()) as Arc<dyn Clock>,
        );
        dev.start_replay(&entries)?;
        let (seed, specs) = injector_of(&entries);
        let gpu = dev.gpu();
        gpu.inject.set_seed(seed);
        for text in &specs {
            let spec = Spec::parse(text)
                .map_err(|e| RecordReplayError::Config(format!("inject={text}: {e}")))?;
            gpu.inject.arm(spec, 0);
        }
        Ok(RecordReplay {
            entries,
            opts,
            dev,
            clock,
        })
    }

    /// The device configuration of the record.
    pub fn config(&self) -> &DeviceConfig {
        self.dev.config()
    }

    fn set_time(&self, t: u64) {
        let now = self.clock.now_ns();
        if t > now {
            self.clock.advance(t - now);
        }
    }

    /// Writes the guest memory the next command read (`DMA_READ` entries
    /// up to its reply) into the replay's memory before it executes.
    fn dma_reads(&self, after: &[Entry]) {
        let mem = self.dev.gpu().memory();
        for e in after
            .iter()
            .take_while(|e| e.kind != kind::REPLY && e.kind != kind::COMMAND)
            .filter(|e| e.kind == kind::DMA_READ)
        {
            let pa = le64(&e.payload, 0);
            let bytes = e.payload.get(8..).unwrap_or(&[]);
            if vm_memory::Bytes::write_slice(&*mem, bytes, vm_memory::GuestAddress(pa)).is_err() {
                log::warn!("replay: recorded DMA read at {pa:#x} is not in guest memory");
            }
        }
    }

    fn drain_events(&mut self, out: &mut Vec<EventRecord>) {
        while self.dev.next_event().is_some() {
            if let Some(r) = self.dev.event_delivered() {
                out.push(r);
            }
        }
    }

    fn packets(&self, e: usize) -> u64 {
        self.dev.recorder().map_or(0, |r| r.packets(e))
    }

    fn engine_idle(&self, e: usize) -> bool {
        self.dev
            .gpu()
            .lock()
            .engines
            .get(e)
            .is_none_or(|s| s.current.is_none())
    }

    /// Waits until every engine started `want[e]` packets (and settled);
    /// returns the engines that did not catch up, with their counts.
    fn catch_up(
        &mut self,
        want: [u64; ENGINES],
        events: &mut Vec<EventRecord>,
    ) -> Vec<(usize, u64)> {
        let start = Instant::now();
        loop {
            self.drain_events(events);
            let behind: Vec<(usize, u64)> = (0..ENGINES)
                .map(|e| (e, self.packets(e)))
                .filter(|&(e, got)| got < want[e])
                .collect();
            if behind.is_empty() || start.elapsed() >= self.opts.catch_up {
                let settled = Instant::now();
                while behind.is_empty()
                    && settled.elapsed() < self.opts.settle
                    && (0..ENGINES).any(|e| self.packets(e) == want[e] && !self.engine_idle(e))
                {
                    std::thread::sleep(Duration::from_micros(200));
                }
                self.drain_events(events);
                return behind;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// Runs the whole session and compares it with the record.
    pub fn run(&mut self) -> Report {
        let mut rep = Report::default();
        let entries = std::mem::take(&mut self.entries);
        let mut replayed = Vec::new();
        let mut last_reply: Option<(Opcode, Vec<u8>, usize)> = None;
        let mut final_packets = [0u64; ENGINES];
        for (i, e) in entries.iter().enumerate() {
            match e.kind {
                kind::MEMORY_MAP => match memory_of(&e.payload) {
                    Ok(m) => self.dev.set_memory(GuestMemoryAtomic::new(m)),
                    Err(err) => rep.divergences.push(format!("memory map: {err}")),
                },
                kind::COMMAND => {
                    let want = [le64(&e.payload, 0), le64(&e.payload, 8)];
                    let room = le32(&e.payload, 16) as usize;
                    let bytes = e.payload.get(20..).unwrap_or(&[]);
                    let n = rep.commands;
                    for (eng, got) in self.catch_up(want, &mut replayed) {
                        rep.divergences.push(format!(
                            "before command {n}: engine {eng} started {got} packets, the record {}",
                            want[eng]
                        ));
                    }
                    self.set_time(e.time_ns);
                    self.dma_reads(entries.get(i + 1..).unwrap_or(&[]));
                    let reply = self.dev.handle_command(bytes, room);
                    let op = Opcode::from_u32(le32(bytes, 0));
                    rep.commands += 1;
                    last_reply = op.map(|o| (o, reply.as_bytes().to_vec(), n as usize));
                    if op.is_none() {
                        last_reply = Some((Opcode::Ping, reply.as_bytes().to_vec(), n as usize));
                    }
                }
                kind::REPLY => {
                    if let Some((op, got, n)) = last_reply.take() {
                        if UNCOMPARED.contains(&op) {
                            rep.replies_uncompared += 1;
                        } else if got == e.payload {
                            rep.replies_equal += 1;
                        } else {
                            rep.divergences.push(format!(
                                "command {n} ({op:?}): reply {got:02x?}, the record {:02x?}",
                                e.payload
                            ));
                        }
                    }
                }
                kind::EVENT => {
                    if let Some(r) =
                        EventRecord::read_from(&e.payload[..e.payload.len().min(EVENT_RECORD_SIZE)])
                    {
                        rep.events_recorded.push(r);
                    }
                }
                kind::PAGE => {
                    rep.pages += 1;
                    if let Some(p) = final_packets.get_mut(usize::from(e.engine)) {
                        *p = (*p).max(e.tag);
                    }
                }
                kind::WATCHED_DOORBELL => {
                    let want = [le64(&e.payload, 0), le64(&e.payload, 8)];
                    let (ctx, eng, wptr) = (
                        le32(&e.payload, 16),
                        le32(&e.payload, 20),
                        le32(&e.payload, 24),
                    );
                    let n = rep.watched_doorbells;
                    for (en, got) in self.catch_up(want, &mut replayed) {
                        rep.divergences.push(format!(
                            "before watched doorbell {n}: engine {en} started {got} packets, the record {}",
                            want[en]
                        ));
                    }
                    self.set_time(e.time_ns);
                    if let Err(err) = doorbell::ring_doorbell(self.dev.gpu(), ctx, eng, wptr) {
                        rep.divergences.push(format!(
                            "watched doorbell {n} (context {ctx} engine {eng} wptr {wptr:#x}): {err}"
                        ));
                    }
                    rep.watched_doorbells += 1;
                }
                kind::RESET => self.dev.reset(),
                kind::CONTROL => {
                    self.set_time(e.time_ns);
                    let line = String::from_utf8_lossy(&e.payload);
                    let reply = handle_line(self.dev.gpu(), &line);
                    rep.control.push((line.into_owned(), reply));
                }
                _ => {}
            }
        }
        // The engines' last packets, then the events still to come.
        for (eng, got) in self.catch_up(final_packets, &mut replayed) {
            rep.divergences.push(format!(
                "at the end: engine {eng} started {got} packets, the record at least {}",
                final_packets[eng]
            ));
        }
        let start = Instant::now();
        while replayed.len() < rep.events_recorded.len() && start.elapsed() < self.opts.catch_up {
            self.drain_events(&mut replayed);
            std::thread::sleep(Duration::from_micros(200));
        }
        std::thread::sleep(self.opts.settle);
        self.drain_events(&mut replayed);
        rep.events_replayed = replayed;
        compare_events(&mut rep);
        self.entries = entries;
        rep
    }

    /// Writes the replay's packet trace (Chrome/Perfetto JSON).
    ///
    /// # Errors
    ///
    /// Writing fails.
    pub fn write_trace(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        self.dev.write_trace(out)
    }
}

fn compare_events(rep: &mut Report) {
    let (a, b) = (&rep.events_recorded, &rep.events_replayed);
    if let Some(i) = (0..a.len().min(b.len())).find(|&i| event_key(&a[i]) != event_key(&b[i])) {
        let msg = format!(
            "event {i}: replay {}, the record {}",
            event_line(&b[i]),
            event_line(&a[i])
        );
        rep.divergences.push(msg);
    } else if a.len() != b.len() {
        let (more, which) = if a.len() > b.len() {
            (&a[b.len()], "the record has more, next")
        } else {
            (&b[a.len()], "the replay has more, next")
        };
        let msg = format!(
            "events: the record {}, the replay {}; {which} {}",
            a.len(),
            b.len(),
            event_line(more)
        );
        rep.divergences.push(msg);
    }
}
