//! Replaying a capture: the failing context rebuilt on a host-side device
//! model and its job run again.
//!
//! # Rebuild
//!
//! 1. Guest memory with the capture's RAM layout (anonymous, so only the
//!    pages written cost memory), every captured range at its
//!    guest-physical address: rings, page tables, command buffers,
//!    operands, data.
//! 2. A [`Gpu`] of the capture's generation and compute units, without
//!    engine threads: the context and its rings are created through the
//!    control processor (`CONTEXT_CREATE`, `RING_CREATE`), then the
//!    captured ring's pointers are set the way a debugger sets registers:
//!    its read pointer at the ring-level packet that failed (so a command
//!    buffer runs again from its start), its write pointer, packet count
//!    and last fence as captured. The other rings start idle.
//! 3. The injector gets the capture's seed and poisoned pages, and every
//!    fault it injected into the failing packet is armed again to fire on
//!    that same packet (its position counted by decoding the job). The
//!    next fault id is the captured one, so a `FAULT` record comes out
//!    identical.
//!
//! # Run
//!
//! One engine, single-threaded, through the device's own scheduler steps
//! (`checkout`, `CommandProcessor::run_slice`, `retire`): the same code the
//! engine threads run. It stops at the first `FAULT` or `ENGINE_ERROR` of
//! the context, when the ring drains, or when it makes no progress for the
//! hang timeout (a hang: the packet held in flight, or a semaphore that
//! never comes). [`Replay::step`] runs one packet at a time.

use std::cell::Cell;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use vgpu_device::config::{DeviceConfig, Generation};
use vgpu_device::core::clock::{Clock, MonotonicClock};
use vgpu_device::core::control::{ControlProcessor, MAX_REPLY_SIZE};
use vgpu_device::core::cp::{CommandProcessor, Host, SliceEnd};
use vgpu_device::core::gpu::{Gpu, GpuConfig, SEM_POLL, TIME_SLICE};
use vgpu_device::core::inject::{Injector, Spec};
use vgpu_device::core::mmu::Mem;
use vgpu_device::core::post;
use vgpu_device::core::ring::{Cursor, RingState};
use vgpu_device::core::scheduler;
use vgpu_hwif::capture::{
    self, section, Capture, CaptureContext, CaptureInFlight, CaptureRegion, CaptureRing,
};
use vgpu_hwif::event::{EngineErrorRecord, Event, EventRecord};
use vgpu_hwif::packet::{opcode_name, Packet, MAX_INDIRECT_DEPTH};
use vgpu_hwif::pod::Pod;
use vgpu_hwif::proto::{Command, ReplyHeader, Status};
use vgpu_umd::cmdbuf::describe;
use vgpu_umd::coredump::{event_text, read_va};
use vm_memory::{Bytes, GuestAddress, GuestMemoryAtomic};

/// Why a capture cannot be replayed.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The capture lacks a section replay needs.
    #[error("the capture has no {0} section")]
    Missing(&'static str),
    /// Guest memory could not be set up.
    #[error("guest memory: {0}")]
    Memory(String),
    /// The device refused a command of the rebuild.
    #[error("rebuilding: {0} failed: {1}")]
    Command(&'static str, &'static str),
    /// A fault to arm again does not parse.
    #[error("injector: {0}")]
    Inject(String),
}

/// What the original failure was.
#[derive(Debug, Clone, Copy)]
pub enum Expected {
    /// The error record the device posted.
    Error(EventRecord),
    /// A hang on this packet.
    Hang {
        /// The packet held in flight.
        packet_va: u64,
        /// Its ring read pointer.
        rptr: u32,
    },
    /// Nothing known (an on-demand capture).
    Unknown,
}

/// How a replay ended.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// The context's ring reported this error.
    Error(EventRecord),
    /// No progress for the hang timeout.
    Hang {
        /// The packet in flight (or waited on), if any.
        packet_va: Option<u64>,
        /// Ring read pointer.
        rptr: u32,
        /// The ring waits on a semaphore rather than holding a packet.
        sem_wait: bool,
    },
    /// The ring executed everything up to its write pointer.
    Drained,
}

impl Outcome {
    /// One line about it.
    pub fn text(&self) -> String {
        match self {
            Outcome::Error(e) => event_text(e),
            Outcome::Hang {
                packet_va,
                rptr,
                sem_wait,
            } => format!(
                "hang: no progress, {} packet {} (ring rptr {rptr:#x})",
                if *sem_wait {
                    "waiting on the semaphore of"
                } else {
                    "holding"
                },
                packet_va.map_or("-".to_owned(), |v| format!("{v:#x}"))
            ),
            Outcome::Drained => "the ring drained without a failure".to_owned(),
        }
    }
}

/// Whether `got` reproduces `want`: the same error record (kind and every
/// data word; sequence number and time aside), or a hang on the same
/// packet.
pub fn matches(want: &Expected, got: &Outcome) -> bool {
    match (want, got) {
        (Expected::Error(a), Outcome::Error(b)) => a.kind == b.kind && a.data == b.data,
        (
            Expected::Hang { packet_va, rptr },
            Outcome::Hang {
                packet_va: p,
                rptr: r,
                ..
            },
        ) => *p == Some(*packet_va) && r == rptr,
        _ => false,
    }
}

/// Options of a replay.
#[derive(Debug, Clone, Copy)]
pub struct ReplayOptions {
    /// Record a packet trace.
    pub trace: bool,
    /// No progress for this long is a hang.
    pub hang: Duration,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        ReplayOptions {
            trace: false,
            hang: Duration::from_millis(1000),
        }
    }
}

/// The command processor's view of the replay's one engine.
struct ReplayHost<'a> {
    gpu: &'a Gpu,
    /// Loop iterations left before the slice is interrupted (`None`:
    /// unlimited).
    budget: Cell<Option<u32>>,
    /// The slice ends at this time.
    deadline: Instant,
}

impl Host for ReplayHost<'_> {
    fn now_ns(&self) -> u64 {
        self.gpu.clock.now_ns()
    }
    fn attention(&self) -> bool {
        // A held packet never ends its slice by itself: the deadline
        // interrupts it, as a mailbox request interrupts an engine.
        match self.budget.get() {
            Some(0) => true,
            Some(n) => {
                self.budget.set(Some(n - 1));
                false
            }
            None => Instant::now() >= self.deadline,
        }
    }
    fn slice_over(&self) -> bool {
        Instant::now() >= self.deadline
    }
    fn sem_epoch(&self) -> u64 {
        self.gpu.sem_epoch.load(Ordering::Acquire)
    }
    fn semaphores_changed(&self) {
        self.gpu.sem_epoch.fetch_add(1, Ordering::AcqRel);
    }
    fn post(&self, event: Event) {
        post::event(self.gpu, event);
    }
    fn injector(&self) -> Option<&Injector> {
        Some(&self.gpu.inject)
    }
}

/// A rebuilt context, ready to run.
pub struct Replay {
    /// The model.
    pub gpu: Arc<Gpu>,
    /// Guest memory.
    pub mem: Mem,
    cp: CommandProcessor,
    /// Context.
    pub ctx: u32,
    /// Engine replayed.
    pub engine: u32,
    /// Generation.
    pub generation: u32,
    /// What the original run ended with.
    pub expected: Expected,
    /// Faults armed again, as specifications.
    pub rearmed: Vec<String>,
    /// Events the replay posted.
    pub events: Vec<EventRecord>,
    opts: ReplayOptions,
    last_progress: Instant,
    last_cursor: Option<Cursor>,
}

fn command(cp: &mut ControlProcessor, c: Command, what: &'static str) -> Result<(), ReplayError> {
    let mut bytes = [0u8; 64];
    let n = c.encode(0, &mut bytes).unwrap_or(0);
    let r = cp.process(&bytes[..n], MAX_REPLY_SIZE);
    let h = ReplyHeader::read_from(r.as_bytes()).unwrap_or_else(ReplyHeader::zeroed);
    if h.status == Status::Ok as u32 {
        Ok(())
    } else {
        Err(ReplayError::Command(
            what,
            Status::from_u32(h.status).map_or("?", Status::name),
        ))
    }
}

/// A field `key=value` of an injector log line.
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split(' ')
        .find_map(|t| t.strip_prefix(key)?.strip_prefix('='))
}

fn num(s: &str) -> Option<u64> {
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

/// Packets of `name` that start (become in flight) before the packet at
/// `target` when the ring runs from its read pointer: counted by decoding
/// the job, following `INDIRECT`s. `None` if `target` is not reached.
fn count_before(
    cap: &Capture<'_>,
    root: u64,
    va_bits: u32,
    generation: u32,
    ring: &CaptureRing,
    target: u64,
    name: &str,
) -> Option<u64> {
    fn walk(
        rd: &dyn Fn(u64, u32) -> Option<(u32, Packet)>,
        va: u64,
        size: u32,
        depth: u32,
        target: u64,
        name: &str,
        n: &mut u64,
    ) -> Option<bool> {
        let mut off = 0u32;
        while off < size {
            let at = va + u64::from(off);
            if at == target {
                return Some(true);
            }
            let (w, p) = rd(at, (size - off) / 4)?;
            let found = match p {
                Packet::Indirect { va, size } if depth < MAX_INDIRECT_DEPTH => {
                    walk(rd, va, size, depth + 1, target, name, n)?
                }
                Packet::Nop { .. } | Packet::Indirect { .. } => false,
                p => {
                    *n += u64::from(p.name() == name);
                    false
                }
            };
            if found {
                return Some(true);
            }
            off += 4 * w;
        }
        Some(false)
    }
    let rd = |va: u64, avail: u32| -> Option<(u32, Packet)> {
        let mut b = [0u8; 4];
        read_va(cap, root, va_bits, va, &mut b).then_some(())?;
        let hdr = vgpu_hwif::packet::decode_header(generation, u32::from_le_bytes(b)).ok()?;
        if hdr.words > avail {
            return None;
        }
        let mut words = vec![0u32; hdr.words as usize];
        for (i, w) in words.iter_mut().enumerate() {
            let mut b = [0u8; 4];
            read_va(cap, root, va_bits, va + 4 * i as u64, &mut b).then_some(())?;
            *w = u32::from_le_bytes(b);
        }
        Packet::decode(hdr, &words).ok().map(|p| (hdr.words, p))
    };
    // The ring from rptr to wptr, as a buffer that may wrap: packet by
    // packet at ring offsets.
    let mut n = 0u64;
    let mut p = ring.rptr;
    while p != ring.wptr {
        let va = ring.va + u64::from(p & (ring.size - 1));
        if va == target {
            return Some(n);
        }
        let (w, pk) = rd(va, ring.wptr.wrapping_sub(p) / 4)?;
        let found = match pk {
            Packet::Indirect { va, size } => walk(&rd, va, size, 1, target, name, &mut n)?,
            Packet::Nop { .. } => false,
            pk => {
                n += u64::from(pk.name() == name);
                false
            }
        };
        if found {
            return Some(n);
        }
        p = p.wrapping_add(4 * w);
    }
    None
}

impl Replay {
    /// Rebuilds the captured context (see the module documentation).
    ///
    /// # Errors
    ///
    /// [`ReplayError`].
    pub fn rebuild(cap: &Capture<'_>, opts: ReplayOptions) -> Result<Replay, ReplayError> {
        let h = cap.header;
        let ctx: CaptureContext = cap
            .first(section::CONTEXT)
            .and_then(|s| s.one())
            .ok_or(ReplayError::Missing("context"))?;
        let rings: Vec<CaptureRing> = cap
            .of(section::RING)
            .filter_map(|s| s.one::<CaptureRing>())
            .collect();
        let ring = *rings
            .iter()
            .find(|r| r.engine == h.engine)
            .ok_or(ReplayError::Missing("ring"))?;
        let regions: Vec<CaptureRegion> = cap
            .first(section::REGIONS)
            .map(|s| s.records().collect())
            .ok_or(ReplayError::Missing("regions"))?;
        let ranges: Vec<(GuestAddress, usize)> = regions
            .iter()
            .map(|r| (GuestAddress(r.pa), r.size as usize))
            .collect();
        let mem = Mem::from_ranges(&ranges).map_err(|e| ReplayError::Memory(e.to_string()))?;
        for s in cap.of(section::MEMORY) {
            if let Some((m, bytes)) = s.memory() {
                mem.write_slice(bytes, GuestAddress(m.pa))
                    .map_err(|e| ReplayError::Memory(format!("{:#x}: {e}", m.pa)))?;
            }
        }
        let generation = Generation::from_number(h.generation)
            .map_err(|e| ReplayError::Memory(e.to_string()))?;
        let dcfg = DeviceConfig::new(generation, h.compute_units.max(1))
            .map_err(|e| ReplayError::Memory(e.to_string()))?
            .with_trace(opts.trace);
        let cfg = GpuConfig {
            sem_poll: SEM_POLL,
            ..GpuConfig::for_device(&dcfg)
        };
        let clock: Arc<dyn Clock> = Arc::new(MonotonicClock::new());
        let gpu = Arc::new(Gpu::new(cfg, clock));
        gpu.set_memory(GuestMemoryAtomic::new(mem.clone()));
        // The capture names no firmware: the in-tree image runs.
        gpu.firmware.preload_builtin(0);
        gpu.capture
            .set_limits(vgpu_device::core::capture::CaptureLimits {
                auto: false,
                ..Default::default()
            });
        let mut control = ControlProcessor::new(&dcfg, gpu.clone());
        command(
            &mut control,
            Command::ContextCreate {
                ctx_id: ctx.ctx_id,
                priority: ctx.priority,
                flags: ctx.flags,
                pt_root: ctx.pt_root,
            },
            "CONTEXT_CREATE",
        )?;
        for r in &rings {
            command(
                &mut control,
                Command::RingCreate {
                    ctx_id: ctx.ctx_id,
                    engine: r.engine,
                    size: r.size,
                    ring_va: r.va,
                    status_va: r.status_va,
                },
                "RING_CREATE",
            )?;
        }
        let inflight: Option<CaptureInFlight> = cap.first(section::INFLIGHT).and_then(|s| s.one());
        let error: Option<EventRecord> = cap.first(section::ERROR).and_then(|s| s.one());
        let expected = match (error, inflight) {
            (Some(e), _) => Expected::Error(e),
            (None, Some(f)) if h.reason == capture::reason::HANG => Expected::Hang {
                packet_va: f.packet_va,
                rptr: f.rptr,
            },
            _ => Expected::Unknown,
        };
        // Pointers as captured; the failing ring starts again at its
        // ring-level packet.
        {
            let mut st = gpu.lock();
            if let Some(Event::Fault { fault_id, .. }) =
                error.and_then(|e| Event::from_record(&e).ok())
            {
                st.next_fault_id = fault_id;
            }
            let c = st
                .contexts
                .get_mut(ctx.ctx_id)
                .map_err(|_| ReplayError::Missing("context"))?;
            for r in &rings {
                let Some(x) = c.ring_mut(r.engine) else {
                    continue;
                };
                let replayed = r.engine == h.engine;
                x.wptr = r.wptr;
                x.cursor = Cursor {
                    rptr: if replayed { r.rptr } else { r.wptr },
                    last_fence: r.last_fence,
                    packets: r.packets,
                    ..Cursor::default()
                };
                x.state = if replayed && x.has_packets() {
                    RingState::Ready
                } else {
                    RingState::Idle
                };
                x.status_dirty = true;
            }
        }
        let rearmed = Self::rearm(cap, &gpu, &ctx, &ring, inflight.as_ref(), error.as_ref())?;
        let mut cp = CommandProcessor::new(h.engine, h.generation, opts.trace);
        if h.engine == vgpu_hwif::proto::engine::COMPUTE {
            cp.set_compute_units(h.compute_units.max(1) as usize);
        }
        Ok(Replay {
            gpu,
            mem,
            cp,
            ctx: ctx.ctx_id,
            engine: h.engine,
            generation: h.generation,
            expected,
            rearmed,
            events: Vec::new(),
            opts,
            last_progress: Instant::now(),
            last_cursor: None,
        })
    }

    /// The injector's seed and poison, and the faults it injected into the
    /// failing packet, armed again for that packet.
    fn rearm(
        cap: &Capture<'_>,
        gpu: &Gpu,
        ctx: &CaptureContext,
        ring: &CaptureRing,
        inflight: Option<&CaptureInFlight>,
        error: Option<&EventRecord>,
    ) -> Result<Vec<String>, ReplayError> {
        let h = cap.header;
        let text = cap
            .first(section::INJECT)
            .map(|s| String::from_utf8_lossy(s.data).into_owned())
            .unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        for l in &lines {
            if let Some(seed) = l.strip_prefix("seed ").and_then(num) {
                gpu.inject.set_seed(seed);
            }
            if let Some(pa) = l.strip_prefix("poisoned ").and_then(num) {
                gpu.inject.poison().poison(pa);
            }
        }
        let failing_va = match error.and_then(|e| Event::from_record(e).ok()) {
            Some(
                Event::Fault { packet_va, .. }
                | Event::EngineError(EngineErrorRecord { packet_va, .. }),
            ) => Some(packet_va),
            _ => inflight.map(|f| f.packet_va),
        };
        let Some(target) = failing_va else {
            return Ok(Vec::new());
        };
        let mut armed = Vec::new();
        for l in lines.iter().filter(|l| l.starts_with("log ")) {
            if field(l, "kind") != Some("inject")
                || field(l, "ctx").and_then(num) != Some(u64::from(ctx.ctx_id))
                || field(l, "engine").and_then(num) != Some(u64::from(h.engine))
                || field(l, "packet_va").and_then(num) != Some(target)
            {
                continue;
            }
            let (Some(id), Some(name)) = (field(l, "fault"), field(l, "packet")) else {
                continue;
            };
            let spec_line = lines
                .iter()
                .find(|a| a.split(' ').nth(1) == Some(id) && a.starts_with("armed "));
            let Some(spec_text) = spec_line.and_then(|a| a.split(' ').nth(2)) else {
                continue;
            };
            let mut spec =
                Spec::parse(spec_text).map_err(|e| ReplayError::Inject(e.to_string()))?;
            let k = count_before(
                cap,
                ctx.pt_root,
                h.va_bits,
                h.generation,
                ring,
                target,
                name,
            )
            .unwrap_or(0);
            spec.trigger.after = k + 1;
            spec.trigger.count = 1;
            spec.trigger.probability = 1.0;
            spec.trigger.at_ms = 0;
            spec.trigger.ctx = Some(ctx.ctx_id);
            spec.trigger.engine = Some(h.engine);
            spec.trigger.packet = Some(name.to_owned());
            if spec.va.is_none() {
                spec.va = field(l, "va").and_then(num);
            }
            armed.push(spec.render());
            gpu.inject.arm(spec, gpu.clock.now_ns());
        }
        Ok(armed)
    }

    /// The replayed ring's cursor.
    pub fn cursor(&self) -> Option<Cursor> {
        let st = self.gpu.lock();
        st.contexts
            .get(self.ctx)
            .ok()
            .and_then(|c| c.ring(self.engine))
            .map(|r| r.cursor)
    }

    /// The ring's state.
    pub fn state(&self) -> Option<RingState> {
        let st = self.gpu.lock();
        st.contexts
            .get(self.ctx)
            .ok()
            .and_then(|c| c.ring(self.engine))
            .map(|r| r.state)
    }

    /// Runs one slice of at most `budget` processor steps (`None`: a
    /// whole time slice); returns how it ended, if the ring ran.
    fn slice(&mut self, budget: Option<u32>) -> Option<SliceEnd> {
        let mut st = self.gpu.lock();
        let cfg = self.gpu.cfg;
        if !st
            .contexts
            .get(self.ctx)
            .ok()
            .and_then(|c| c.ring(self.engine))
            .is_some_and(|r| {
                r.state == RingState::Ready || matches!(r.state, RingState::SemWait { .. })
            })
        {
            return None;
        }
        let mut job = scheduler::checkout(&mut st, self.engine, self.ctx, &cfg)?;
        drop(st);
        let host = ReplayHost {
            gpu: &self.gpu,
            budget: Cell::new(budget),
            deadline: Instant::now() + TIME_SLICE,
        };
        let out = self.cp.run_slice(&host, &self.mem, &mut job);
        let end = out.end;
        let mut st = self.gpu.lock();
        let events = scheduler::retire(&self.gpu, &mut st, &mut self.cp, &self.mem, job, out);
        drop(st);
        if let Some(t) = self.gpu.trace.as_ref() {
            let recs = self.cp.take_trace();
            t.lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .extend(&recs);
        }
        for ev in events {
            post::event(&self.gpu, ev);
        }
        while let Some(rec) = self.gpu.events().commit_front(self.gpu.clock.now_ns()) {
            self.events.push(rec);
        }
        Some(end)
    }

    /// The outcome, if the replay has one now.
    fn outcome(&mut self) -> Option<Outcome> {
        let ctx = self.ctx;
        if let Some(e) = self.events.iter().find(|e| match Event::from_record(e) {
            Ok(Event::Fault { info, .. }) => u32::from(info.ctx_id) == ctx,
            Ok(Event::EngineError(EngineErrorRecord { ctx_id, .. })) => ctx_id == ctx,
            _ => false,
        }) {
            return Some(Outcome::Error(*e));
        }
        let cursor = self.cursor()?;
        let state = self.state()?;
        if state == RingState::Idle {
            return Some(Outcome::Drained);
        }
        if self.last_cursor != Some(cursor) {
            self.last_cursor = Some(cursor);
            self.last_progress = Instant::now();
            return None;
        }
        if self.last_progress.elapsed() >= self.opts.hang {
            return Some(Outcome::Hang {
                packet_va: cursor.pending.map(|p| p.packet_va),
                rptr: cursor.rptr,
                sem_wait: matches!(state, RingState::SemWait { .. }),
            });
        }
        None
    }

    /// Runs until the replay fails, drains or hangs.
    pub fn run(&mut self) -> Outcome {
        loop {
            match self.slice(None) {
                None | Some(SliceEnd::SemWait { .. }) => {
                    std::thread::sleep(Duration::from_micros(200))
                }
                _ => {}
            }
            if let Some(o) = self.outcome() {
                return o;
            }
        }
    }

    /// Runs one packet (or one step of a long one); returns a line about
    /// what ran, and the outcome if the replay ended.
    pub fn step(&mut self) -> (String, Option<Outcome>) {
        let before = self.cursor();
        let t0 = Instant::now();
        loop {
            let end = self.slice(Some(1));
            let after = self.cursor();
            let moved =
                before.map(|c| (c.packets, c.pending)) != after.map(|c| (c.packets, c.pending));
            let o = self.outcome();
            if moved || o.is_some() || end.is_none() || t0.elapsed() >= self.opts.hang {
                let o = o.or_else(|| {
                    (t0.elapsed() >= self.opts.hang)
                        .then(|| self.outcome())
                        .flatten()
                });
                return (self.describe_step(before, after), o);
            }
            if !matches!(end, Some(SliceEnd::Interrupted)) {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
    }

    fn describe_step(&self, before: Option<Cursor>, after: Option<Cursor>) -> String {
        let (Some(b), Some(a)) = (before, after) else {
            return "no ring".to_owned();
        };
        let pending = |c: &Cursor| {
            c.pending
                .map(|p| format!("{} at {:#x} in flight", opcode_name(p.opcode), p.packet_va))
        };
        let done = a.packets.wrapping_sub(b.packets);
        let mut s = format!(
            "packets {} (+{done}) rptr {:#x} depth {}",
            a.packets, a.rptr, a.depth
        );
        if let Some(f) = a.frame() {
            s += &format!(" cmdbuf {:#x}+{:#x}", f.va, f.offset);
        }
        if let Some(p) = pending(&a) {
            s += &format!("; {p}");
        } else if let Some(p) = pending(&b) {
            s += &format!("; {p} done");
        }
        s
    }

    /// The packet at `va` decoded from the rebuilt memory, as text.
    pub fn packet_text(&self, va: u64) -> String {
        let st = self.gpu.lock();
        let space = match st.contexts.get(self.ctx) {
            Ok(c) => c.space(self.gpu.cfg.va_bits),
            Err(_) => return "?".to_owned(),
        };
        drop(st);
        let word = |va: u64| {
            let m =
                vgpu_device::core::mmu::walk(&self.mem, &space, va, vgpu_hwif::mmu::Access::Read)
                    .ok()?;
            self.mem.read_obj::<u32>(GuestAddress(m.pa(va))).ok()
        };
        let Some(h) = word(va) else {
            return "?".to_owned();
        };
        let Ok(hdr) = vgpu_hwif::packet::decode_header(self.generation, h) else {
            return format!("invalid header {h:#010x}");
        };
        let words: Option<Vec<u32>> = (0..hdr.words)
            .map(|i| word(va + 4 * u64::from(i)))
            .collect();
        match words.map(|w| Packet::decode(hdr, &w)) {
            Some(Ok(p)) => describe(&p),
            Some(Err(e)) => format!("opcode {:#04x}: {}", hdr.opcode, e.name()),
            None => "?".to_owned(),
        }
    }

    /// Writes the replay's packet trace (Chrome trace-event JSON).
    ///
    /// # Errors
    ///
    /// I/O errors.
    pub fn write_trace(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        match self.gpu.trace.as_ref() {
            Some(t) => t
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .write_json(out),
            None => vgpu_device::core::telemetry::Trace::new().write_json(out),
        }
    }
}
