//! Fault injection: seeded, replayable faults at the device boundary.
//!
//! An [`Injector`] holds *armed* faults. Each names a [`Class`], a
//! [`Trigger`] (after N matching opportunities, not before a device time,
//! with a probability drawn from a seeded generator, at most `count` times)
//! and filters (context, engine, packet or command name). The device's
//! blocks ask the injector at fixed points:
//!
//! | hook | called by | classes |
//! |---|---|---|
//! | [`Injector::on_step`] | the command processor, before each step of an in-flight packet | hang, fence-never, fence-late, fence-event-drop, event-spurious, mmu-fault, ecc, event-overflow, lost, throttle |
//! | [`Injector::on_done`] | the command processor, when a packet finished executing | dma-corrupt, event-duplicate |
//! | [`Injector::on_invalidate`] | the engine serving a TLB invalidation | stale-tlb (one stale translation) |
//! | [`Injector::on_command`] | the control processor, before executing a command | control-busy, reset-fail, lost |
//! | [`Injector::on_reset`] | engine and device resets | clears hangs (and `lost` on device reset) |
//!
//! Every opportunity that passes a fault's filters counts, whether or not
//! the fault fires, and random draws happen only on such opportunities, so
//! the same seed and the same workload give the same injections. Every
//! injection is logged (id, device time, wall-clock time, where) and kept
//! in [`Injector::log`]; the driver's reactions after an injection (resets,
//! context destroys, fault resumes) are logged as observations so that
//! detection and recovery latencies can be measured on one clock.

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use vgpu_hwif::event::{Event, ECC_PA_UNKNOWN, EVENT_FIFO_DEPTH};
use vgpu_hwif::mmu::{Access, FaultReason, LEVEL_NONE};
use vgpu_hwif::proto::{Opcode, Status};

use vgpu_hwif::packet::{opcode_name, OPCODES};

use super::dma::GpuMemory;
use super::mmu::{MmuFault, PageMapping};
use super::poison::Poison;
use super::ring::{InFlight, Op};

/// Why a fault specification was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum InjectError {
    /// The class name is not one of [`Class::ALL`].
    #[error("unknown fault class '{0}' (see `list`)")]
    UnknownClass(String),
    /// A `key=value` pair names no known key.
    #[error("unknown key '{0}'")]
    UnknownKey(String),
    /// A value does not parse.
    #[error("bad value for '{key}': '{value}'")]
    BadValue {
        /// The key.
        key: String,
        /// Its value.
        value: String,
    },
    /// No armed fault has this id.
    #[error("no armed fault with id {0}")]
    NoSuchFault(u64),
}

/// Exit status of the device process when a `crash` fault fires.
pub const CRASH_EXIT_STATUS: i32 = 70;

/// Fault classes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Class {
    /// The engine stops making progress on the current packet until the
    /// engine or the device is reset.
    Hang,
    /// A `FENCE` is skipped: no value, no status update, no event.
    FenceNever,
    /// A `FENCE` is held for `delay_ms` before it is written.
    FenceLate,
    /// A `FENCE` value is written but its event is not posted.
    FenceEventDrop,
    /// A `FENCE` event is posted twice.
    EventDuplicate,
    /// A `FENCE` event for a value the ring has not written yet.
    EventSpurious,
    /// `bits` bit flips in the destination of a finished copy.
    DmaCorrupt,
    /// The packet faults at `va` (or a random VA) as a not-present page.
    MmuFault,
    /// At the engine's next TLB invalidation one translation of the range
    /// survives; the next access to its page uses the old physical address
    /// once.
    StaleTlb,
    /// A guest-physical page is poisoned (uncorrectable ECC error) and an
    /// `ECC_ERROR` event names it; engine reads of it then fail.
    Ecc,
    /// `events` spurious `PING` events flood the event FIFO.
    EventOverflow,
    /// The device stops: engines make no progress and every command but
    /// `DEVICE_RESET` is answered `DEVICE_LOST`, until a device reset.
    Lost,
    /// The first `attempts` reset commands fail with `DEVICE_LOST`.
    ResetFail,
    /// Every matching packet is held `delay_ms` before it runs.
    Throttle,
    /// A control command is answered `BUSY` without being executed.
    ControlBusy,
    /// The device process dies at the packet (exit status 70), like a
    /// backend that crashed: QEMU keeps the guest running, and nothing
    /// answers the driver any more.
    Crash,
}

impl Class {
    /// Every class.
    pub const ALL: [Class; 16] = [
        Class::Hang,
        Class::FenceNever,
        Class::FenceLate,
        Class::FenceEventDrop,
        Class::EventDuplicate,
        Class::EventSpurious,
        Class::DmaCorrupt,
        Class::MmuFault,
        Class::StaleTlb,
        Class::Ecc,
        Class::EventOverflow,
        Class::Lost,
        Class::ResetFail,
        Class::Throttle,
        Class::ControlBusy,
        Class::Crash,
    ];

    /// The class's name in specifications and logs.
    pub const fn name(self) -> &'static str {
        match self {
            Class::Hang => "hang",
            Class::FenceNever => "fence-never",
            Class::FenceLate => "fence-late",
            Class::FenceEventDrop => "fence-event-drop",
            Class::EventDuplicate => "event-duplicate",
            Class::EventSpurious => "event-spurious",
            Class::DmaCorrupt => "dma-corrupt",
            Class::MmuFault => "mmu-fault",
            Class::StaleTlb => "stale-tlb",
            Class::Ecc => "ecc",
            Class::EventOverflow => "event-overflow",
            Class::Lost => "lost",
            Class::ResetFail => "reset-fail",
            Class::Throttle => "throttle",
            Class::ControlBusy => "control-busy",
            Class::Crash => "crash",
        }
    }

    /// One line about the class.
    pub const fn describe(self) -> &'static str {
        match self {
            Class::Hang => "engine stops making progress on the current packet until reset",
            Class::FenceNever => "FENCE skipped: no value, no status update, no event",
            Class::FenceLate => "FENCE held delay_ms (default 500) before it is written",
            Class::FenceEventDrop => "FENCE value written, its event not posted",
            Class::EventDuplicate => "FENCE event posted twice",
            Class::EventSpurious => "FENCE event for a value not written yet",
            Class::DmaCorrupt => "bits (default 1) bit flips in a finished copy's destination",
            Class::MmuFault => "packet faults (not present) at va=ADDR or a random VA",
            Class::StaleTlb => "one translation served once from before a TLB invalidation",
            Class::Ecc => {
                "poisons a page (va=, pa= or the packet's next read): reads fail ECC_UNCORRECTABLE"
            }
            Class::EventOverflow => "events (default 300) spurious PING events flood the FIFO",
            Class::Lost => "device unresponsive (DEVICE_LOST, no progress) until DEVICE_RESET",
            Class::ResetFail => "first attempts (default 1) reset commands fail",
            Class::Throttle => "each matching packet held delay_ms (default 20)",
            Class::ControlBusy => "control command answered BUSY",
            Class::Crash => {
                "the device process exits at the packet (status 70): nothing answers any more"
            }
        }
    }

    /// The class named `s`.
    pub fn from_name(s: &str) -> Option<Class> {
        Class::ALL.into_iter().find(|c| c.name() == s)
    }

    /// Classes whose opportunities are control commands.
    const fn on_control(self) -> bool {
        matches!(self, Class::ControlBusy | Class::ResetFail)
    }

    /// Classes whose opportunities are FENCE packets only.
    const fn fence_only(self) -> bool {
        matches!(
            self,
            Class::FenceNever
                | Class::FenceLate
                | Class::FenceEventDrop
                | Class::EventDuplicate
                | Class::EventSpurious
        )
    }
}

/// When an armed fault fires.
#[derive(Debug, Clone, PartialEq)]
pub struct Trigger {
    /// Fires at the `after`-th matching opportunity or later (1 = first).
    pub after: u64,
    /// Not before this many ms of device time since arming.
    pub at_ms: u64,
    /// Probability per eligible opportunity.
    pub probability: f64,
    /// At most this many injections (0 = unlimited).
    pub count: u64,
    /// Only this context.
    pub ctx: Option<u32>,
    /// Only this engine.
    pub engine: Option<u32>,
    /// Only this packet opcode or control command name (upper case).
    pub packet: Option<String>,
}

impl Default for Trigger {
    fn default() -> Self {
        Trigger {
            after: 1,
            at_ms: 0,
            probability: 1.0,
            count: 1,
            ctx: None,
            engine: None,
            packet: None,
        }
    }
}

/// A fault specification: class, trigger and class parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct Spec {
    /// Class.
    pub class: Class,
    /// Trigger and filters.
    pub trigger: Trigger,
    /// `delay_ms` (fence-late, throttle).
    pub delay_ms: u64,
    /// `va` (mmu-fault: random if `None`; ecc: the page to poison, else
    /// the one the packet reads next).
    pub va: Option<u64>,
    /// `pa` (ecc): the guest-physical page to poison.
    pub pa: Option<u64>,
    /// `bits` (dma-corrupt).
    pub bits: u32,
    /// `attempts` (reset-fail).
    pub attempts: u32,
    /// `events` (event-overflow).
    pub events: u32,
}

/// A decimal or `0x` hexadecimal number for `key`.
pub fn parse_num(key: &str, v: &str) -> Result<u64, InjectError> {
    let bad = || InjectError::BadValue {
        key: key.to_owned(),
        value: v.to_owned(),
    };
    match v.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).map_err(|_| bad()),
        None => v.parse().map_err(|_| bad()),
    }
}

impl Spec {
    /// Parses `CLASS[:key=val,...]`. Keys: `after`, `at_ms`, `p`, `count`,
    /// `ctx`, `engine` (`copy`, `compute` or a number), `packet`,
    /// `delay_ms`, `va`, `pa`, `bits`, `attempts`, `events`.
    pub fn parse(s: &str) -> Result<Spec, InjectError> {
        let s = s.trim();
        let (name, rest) = s.split_once(':').unwrap_or((s, ""));
        let class =
            Class::from_name(name).ok_or_else(|| InjectError::UnknownClass(name.to_owned()))?;
        let mut spec = Spec {
            class,
            trigger: Trigger::default(),
            delay_ms: if class == Class::Throttle { 20 } else { 500 },
            va: None,
            pa: None,
            bits: 1,
            attempts: 1,
            events: (EVENT_FIFO_DEPTH + 44) as u32,
        };
        if class == Class::ResetFail {
            spec.trigger.count = 0;
        }
        for kv in rest.split(',').filter(|kv| !kv.trim().is_empty()) {
            let (k, v) = kv.split_once('=').ok_or_else(|| InjectError::BadValue {
                key: kv.to_owned(),
                value: String::new(),
            })?;
            let (k, v) = (k.trim(), v.trim());
            let small = |n: u64| {
                u32::try_from(n).map_err(|_| InjectError::BadValue {
                    key: k.to_owned(),
                    value: v.to_owned(),
                })
            };
            let t = &mut spec.trigger;
            match k {
                "after" => t.after = parse_num(k, v)?.max(1),
                "at_ms" => t.at_ms = parse_num(k, v)?,
                "p" => {
                    t.probability = v
                        .parse::<f64>()
                        .ok()
                        .filter(|p| (0.0..=1.0).contains(p))
                        .ok_or_else(|| InjectError::BadValue {
                            key: k.to_owned(),
                            value: v.to_owned(),
                        })?
                }
                "count" => t.count = parse_num(k, v)?,
                "ctx" => t.ctx = Some(small(parse_num(k, v)?)?),
                "engine" => {
                    t.engine = Some(match v {
                        "copy" => 0,
                        "compute" => 1,
                        _ => small(parse_num(k, v)?)?,
                    })
                }
                "packet" => {
                    let name = v.to_ascii_uppercase();
                    let known = OPCODES.iter().any(|&op| opcode_name(op) == name)
                        || Opcode::ALL.iter().any(|op| op.name() == name);
                    if !known {
                        return Err(InjectError::BadValue {
                            key: k.to_owned(),
                            value: v.to_owned(),
                        });
                    }
                    t.packet = Some(name);
                }
                "delay_ms" => spec.delay_ms = parse_num(k, v)?,
                "va" => spec.va = Some(parse_num(k, v)?),
                "pa" => spec.pa = Some(parse_num(k, v)?),
                "bits" => spec.bits = small(parse_num(k, v)?)?.clamp(1, 64),
                "attempts" => spec.attempts = small(parse_num(k, v)?)?,
                "events" => spec.events = small(parse_num(k, v)?)?.min(65536),
                _ => return Err(InjectError::UnknownKey(k.to_owned())),
            }
        }
        if class == Class::ResetFail && spec.trigger.count == 0 {
            spec.trigger.count = u64::from(spec.attempts);
        }
        Ok(spec)
    }

    /// The specification in `parse` syntax.
    pub fn render(&self) -> String {
        let t = &self.trigger;
        let mut s = format!(
            "{}:after={},at_ms={},p={},count={}",
            self.class.name(),
            t.after,
            t.at_ms,
            t.probability,
            t.count
        );
        if let Some(c) = t.ctx {
            s += &format!(",ctx={c}");
        }
        if let Some(e) = t.engine {
            s += &format!(",engine={e}");
        }
        if let Some(p) = &t.packet {
            s += &format!(",packet={p}");
        }
        match self.class {
            Class::FenceLate | Class::Throttle => s += &format!(",delay_ms={}", self.delay_ms),
            Class::MmuFault | Class::Ecc => {
                if let Some(va) = self.va {
                    s += &format!(",va={va:#x}");
                }
                if let Some(pa) = self.pa {
                    s += &format!(",pa={pa:#x}");
                }
            }
            Class::DmaCorrupt => s += &format!(",bits={}", self.bits),
            Class::ResetFail => s += &format!(",attempts={}", self.attempts),
            Class::EventOverflow => s += &format!(",events={}", self.events),
            _ => {}
        }
        s
    }
}

/// xorshift64*: the injector's deterministic generator.
#[derive(Debug, Clone)]
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        // splitmix64 of the seed, never 0.
        let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        Rng((z ^ (z >> 31)) | 1)
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// One armed fault.
#[derive(Debug, Clone)]
struct Armed {
    id: u64,
    spec: Spec,
    armed_ns: u64,
    seen: u64,
    fired: u64,
    rng: Rng,
}

/// An armed fault as shown by [`Injector::status`].
#[derive(Debug, Clone, PartialEq)]
pub struct ArmedStatus {
    /// Id (for `disarm`).
    pub id: u64,
    /// Specification.
    pub spec: String,
    /// Matching opportunities seen.
    pub seen: u64,
    /// Injections so far.
    pub fired: u64,
}

/// One log entry: an injection or an observed driver reaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogEntry {
    /// Entry number (from 1).
    pub seq: u64,
    /// Id of the armed fault (0 for observations).
    pub fault: u64,
    /// `inject` or `observe`.
    pub kind: &'static str,
    /// Class name, or the observed command.
    pub what: String,
    /// Device time.
    pub device_ns: u64,
    /// Host wall-clock time (ns since the Unix epoch).
    pub wall_ns: u64,
    /// Context, or `u32::MAX`.
    pub ctx: u32,
    /// Engine, or `u32::MAX`.
    pub engine: u32,
    /// Details.
    pub detail: String,
}

/// Where an engine-side opportunity arises: what the command processor
/// tells the injector about the ring whose packet is in flight (the packet
/// itself is the `InFlight`). The injector needs nothing else of the
/// processor's state, so it depends on the ring's types only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Site {
    /// The ring's context.
    pub ctx: u32,
    /// The engine.
    pub engine: u32,
    /// Packets the ring completed before this one: with the packet's VA it
    /// names one packet, counted once however many steps it takes.
    pub ring_packets: u64,
}

/// What the command processor does with an in-flight packet's step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepVerdict {
    /// Execute normally.
    Go,
    /// Do not execute; end the slice with the packet still in flight.
    Hold,
    /// Retire the packet without executing it.
    Skip,
    /// The packet faults.
    Fault(MmuFault),
}

/// Per-engine state of held and hung packets.
#[derive(Debug, Clone, Copy, Default)]
struct EngineHold {
    /// The packet (context, VA, ring packet count) seen last, to count
    /// each packet once.
    last: Option<(u32, u64, u64)>,
    /// Hung on this packet until reset.
    hung: Option<(u32, u64, u64)>,
    /// Held until this device time.
    until_ns: u64,
    /// The next invalidation keeps one translation stale: (armed fault
    /// id, random draw choosing which).
    stale_tlb: Option<(u64, u64)>,
}

#[derive(Debug, Default)]
struct Inner {
    seed: u64,
    next_id: u64,
    /// Faults armed since the seed was last set.
    armed_since_seed: u64,
    armed: Vec<Armed>,
    engines: [EngineHold; 2],
    lost: bool,
    log: VecDeque<LogEntry>,
    next_log: u64,
    /// Observations left to log after the last injection.
    observe: u32,
    /// The driver reacted (reset, destroy, resume) since the last
    /// injection.
    reacted: bool,
    pending_events: Vec<Event>,
}

/// Entries kept in the log.
pub const LOG_DEPTH: usize = 4096;
/// Driver reactions logged after each injection.
const OBSERVATIONS: u32 = 32;

/// The injector (see the module documentation).
#[derive(Debug, Default)]
pub struct Injector {
    inner: Mutex<Inner>,
    /// Pages poisoned by `ecc` (the memory's state: not cleared by
    /// resets or `disarm`).
    poison: Poison,
}

fn wall_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

fn filter_matches(t: &Trigger, ctx: u32, engine: u32, name: &str) -> bool {
    t.ctx.is_none_or(|c| c == ctx)
        && t.engine.is_none_or(|e| e == engine)
        && t.packet.as_deref().is_none_or(|p| p == name)
}

impl Inner {
    /// Counts an opportunity for fault `i`; whether it fires.
    fn opportunity(&mut self, i: usize, now_ns: u64) -> bool {
        let Some(a) = self.armed.get_mut(i) else {
            return false;
        };
        if a.spec.trigger.count != 0 && a.fired >= a.spec.trigger.count {
            return false;
        }
        a.seen += 1;
        let t = &a.spec.trigger;
        if a.seen < t.after || now_ns.saturating_sub(a.armed_ns) < t.at_ms.saturating_mul(1_000_000)
        {
            return false;
        }
        if t.probability < 1.0 && a.rng.unit() >= t.probability {
            return false;
        }
        a.fired += 1;
        true
    }

    fn record(&mut self, e: LogEntry) {
        if e.kind == "inject" {
            log::warn!(
                "inject: id={} fault={} class={} ctx={} engine={} device_ns={} wall_ns={} {}",
                e.seq,
                e.fault,
                e.what,
                e.ctx as i64,
                e.engine as i64,
                e.device_ns,
                e.wall_ns,
                e.detail
            );
        } else {
            log::warn!(
                "inject-observe: id={} what={} ctx={} engine={} device_ns={} wall_ns={} {}",
                e.seq,
                e.what,
                e.ctx as i64,
                e.engine as i64,
                e.device_ns,
                e.wall_ns,
                e.detail
            );
        }
        if self.log.len() >= LOG_DEPTH {
            self.log.pop_front();
        }
        self.log.push_back(e);
    }

    fn injected(
        &mut self,
        i: usize,
        now_ns: u64,
        ctx: u32,
        engine: u32,
        detail: String,
    ) -> (Class, u64) {
        let (fault, class) = self
            .armed
            .get(i)
            .map_or((0, Class::Hang), |a| (a.id, a.spec.class));
        self.next_log += 1;
        let e = LogEntry {
            seq: self.next_log,
            fault,
            kind: "inject",
            what: class.name().to_owned(),
            device_ns: now_ns,
            wall_ns: wall_ns(),
            ctx,
            engine,
            detail,
        };
        self.record(e);
        self.observe = OBSERVATIONS;
        self.reacted = false;
        (class, fault)
    }

    fn observed(&mut self, now_ns: u64, what: &str, ctx: u32, engine: u32, detail: String) {
        if self.observe == 0 {
            return;
        }
        self.observe -= 1;
        if matches!(
            what,
            "ENGINE_RESET" | "DEVICE_RESET" | "FAULT_RESUME" | "CONTEXT_DESTROY"
        ) {
            self.reacted = true;
        }
        self.next_log += 1;
        let e = LogEntry {
            seq: self.next_log,
            fault: 0,
            kind: "observe",
            what: what.to_owned(),
            device_ns: now_ns,
            wall_ns: wall_ns(),
            ctx,
            engine,
            detail,
        };
        self.record(e);
    }
}

impl Injector {
    /// An injector with nothing armed, seeded with 0.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The poisoned pages engines check their reads against.
    pub fn poison(&self) -> &Poison {
        &self.poison
    }

    /// Seeds the generator of faults armed from now on, and restarts their
    /// arming order: the n-th fault armed after `set_seed(s)` draws the
    /// same numbers whatever was armed before (a reused device replays a
    /// run like a fresh one).
    pub fn set_seed(&self, seed: u64) {
        let mut g = self.lock();
        g.seed = seed;
        g.armed_since_seed = 0;
    }

    /// The seed.
    pub fn seed(&self) -> u64 {
        self.lock().seed
    }

    /// Arms `spec` at device time `now_ns`; returns its id.
    pub fn arm(&self, spec: Spec, now_ns: u64) -> u64 {
        let mut g = self.lock();
        g.next_id += 1;
        g.armed_since_seed += 1;
        let id = g.next_id;
        // On a fresh device (seeded before arming) the order is the id.
        let rng = Rng::new(g.seed ^ g.armed_since_seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        log::info!("inject: armed {id}: {}", spec.render());
        g.armed.push(Armed {
            id,
            spec,
            armed_ns: now_ns,
            seen: 0,
            fired: 0,
            rng,
        });
        id
    }

    /// Disarms fault `id` (0: every fault). Faults already injected (a
    /// hung engine, a lost device) stay until reset.
    pub fn disarm(&self, id: u64) -> Result<(), InjectError> {
        let mut g = self.lock();
        // A stale translation not yet chosen is not an injection yet.
        for h in &mut g.engines {
            if h.stale_tlb.is_some_and(|(f, _)| id == 0 || f == id) {
                h.stale_tlb = None;
            }
        }
        if id == 0 {
            g.armed.clear();
            return Ok(());
        }
        let before = g.armed.len();
        g.armed.retain(|a| a.id != id);
        if g.armed.len() == before {
            return Err(InjectError::NoSuchFault(id));
        }
        Ok(())
    }

    /// Armed faults.
    pub fn status(&self) -> Vec<ArmedStatus> {
        self.lock()
            .armed
            .iter()
            .map(|a| ArmedStatus {
                id: a.id,
                spec: a.spec.render(),
                seen: a.seen,
                fired: a.fired,
            })
            .collect()
    }

    /// Whether the device is lost (injected).
    pub fn is_lost(&self) -> bool {
        self.lock().lost
    }

    /// Log entries with a number above `since`.
    pub fn log(&self, since: u64) -> Vec<LogEntry> {
        self.lock()
            .log
            .iter()
            .filter(|e| e.seq > since)
            .cloned()
            .collect()
    }

    /// Whether anything is armed or in effect (the hooks' fast path).
    fn idle(g: &Inner) -> bool {
        g.armed.is_empty()
            && !g.lost
            && g.engines
                .iter()
                .all(|e| e.hung.is_none() && e.until_ns == 0)
            && g.pending_events.is_empty()
    }

    /// Before a step of packet `fl` at `site` at device time `now_ns`.
    /// Events to post are appended to `post`.
    /// `translate` gives the guest-physical address of a VA of the job's
    /// address space (without touching the engine's TLB).
    pub fn on_step(
        &self,
        now_ns: u64,
        site: &Site,
        fl: &mut InFlight,
        translate: &dyn Fn(u64) -> Option<u64>,
        post: &mut Vec<Event>,
    ) -> StepVerdict {
        let mut g = self.lock();
        if Self::idle(&g) {
            return StepVerdict::Go;
        }
        let e = site.engine as usize;
        let key = (site.ctx, fl.packet_va, site.ring_packets);
        let Some(eh) = g.engines.get(e).copied() else {
            return StepVerdict::Go;
        };
        if g.lost || eh.hung.is_some_and(|h| h.0 == site.ctx) {
            drop(g);
            // Keep a stuck engine from spinning on the host.
            std::thread::sleep(Duration::from_millis(1));
            return StepVerdict::Hold;
        }
        if eh.until_ns != 0 {
            if eh.last == Some(key) && now_ns < eh.until_ns {
                drop(g);
                std::thread::sleep(Duration::from_millis(1));
                return StepVerdict::Hold;
            }
            if let Some(h) = g.engines.get_mut(e) {
                h.until_ns = 0;
            }
            if eh.last == Some(key) {
                // The delay of this packet is over.
                return StepVerdict::Go;
            }
        }
        if eh.last == Some(key) {
            return StepVerdict::Go;
        }
        if let Some(h) = g.engines.get_mut(e) {
            h.last = Some(key);
        }
        let name = opcode_name(fl.opcode);
        let is_fence = matches!(fl.op, Op::Fence { .. });
        let mut verdict = StepVerdict::Go;
        for i in 0..g.armed.len() {
            let spec = g.armed[i].spec.clone();
            let class = spec.class;
            if class.on_control()
                || class == Class::DmaCorrupt
                || class == Class::EventDuplicate
                || (class.fence_only() && !is_fence)
                || !filter_matches(&spec.trigger, site.ctx, site.engine, name)
            {
                continue;
            }
            if class == Class::StaleTlb {
                // Armed per engine: the next invalidation is skipped.
                if g.opportunity(i, now_ns) {
                    let (id, pick) = g.armed.get_mut(i).map_or((0, 0), |a| (a.id, a.rng.next()));
                    if let Some(h) = g.engines.get_mut(e) {
                        h.stale_tlb = Some((id, pick));
                    }
                }
                continue;
            }
            if verdict != StepVerdict::Go || !g.opportunity(i, now_ns) {
                continue;
            }
            let at = format!("packet={name} packet_va={:#x}", fl.packet_va);
            match class {
                Class::Hang => {
                    if let Some(h) = g.engines.get_mut(e) {
                        h.hung = Some(key);
                    }
                    g.injected(i, now_ns, site.ctx, site.engine, at);
                    verdict = StepVerdict::Hold;
                }
                Class::Lost => {
                    g.lost = true;
                    g.injected(i, now_ns, site.ctx, site.engine, at);
                    verdict = StepVerdict::Hold;
                }
                Class::Crash => {
                    g.injected(i, now_ns, site.ctx, site.engine, at);
                    log::error!(
                        "injected crash: the device process exits now (status {CRASH_EXIT_STATUS})"
                    );
                    std::process::exit(CRASH_EXIT_STATUS);
                }
                Class::FenceLate | Class::Throttle => {
                    if let Some(h) = g.engines.get_mut(e) {
                        h.until_ns = now_ns
                            .saturating_add(spec.delay_ms.saturating_mul(1_000_000))
                            .max(1);
                    }
                    let d = format!("{at} delay_ms={}", spec.delay_ms);
                    g.injected(i, now_ns, site.ctx, site.engine, d);
                    verdict = StepVerdict::Hold;
                }
                Class::FenceNever => {
                    g.injected(i, now_ns, site.ctx, site.engine, at);
                    verdict = StepVerdict::Skip;
                }
                Class::FenceEventDrop => {
                    if let Op::Fence { flags, .. } = &mut fl.op {
                        *flags |= vgpu_hwif::packet::FENCE_NO_EVENT;
                    }
                    g.injected(i, now_ns, site.ctx, site.engine, at);
                }
                Class::EventSpurious => {
                    if let Op::Fence { va, seqno, .. } = fl.op {
                        post.push(Event::Fence {
                            ctx_id: site.ctx,
                            engine: site.engine,
                            seqno,
                            va,
                        });
                        let d = format!("{at} seqno={seqno}");
                        g.injected(i, now_ns, site.ctx, site.engine, d);
                    }
                }
                Class::MmuFault => {
                    let va = spec.va.unwrap_or_else(|| {
                        let r = g.armed.get_mut(i).map_or(0, |a| a.rng.next());
                        // A page-aligned VA in the low 4 GiB above 64 KiB.
                        (0x1_0000 + (r % 0xffff_0000)) & !0xfff
                    });
                    let d = format!("{at} va={va:#x}");
                    g.injected(i, now_ns, site.ctx, site.engine, d);
                    verdict = StepVerdict::Fault(MmuFault {
                        va,
                        access: Access::Read,
                        reason: FaultReason::NotPresent,
                        level: LEVEL_NONE,
                    });
                }
                Class::Ecc => {
                    // The page given, else the one the packet reads next.
                    let va = spec.va.unwrap_or_else(|| next_read(fl));
                    let (va, pa) = match spec.pa {
                        Some(pa) => (ECC_PA_UNKNOWN, Some(pa)),
                        None => (va & !0xfff, translate(va)),
                    };
                    let pa = pa.map(|pa| self.poison.poison(pa));
                    post.push(Event::EccError {
                        ctx_id: site.ctx,
                        engine: site.engine,
                        va,
                        packet_va: fl.packet_va,
                        pa: pa.unwrap_or(ECC_PA_UNKNOWN),
                    });
                    let d = match pa {
                        Some(pa) if spec.pa.is_some() => format!("{at} pa={pa:#x}"),
                        Some(pa) => format!("{at} va={va:#x} pa={pa:#x}"),
                        None => format!("{at} va={va:#x} pa=unmapped"),
                    };
                    g.injected(i, now_ns, site.ctx, site.engine, d);
                }
                Class::EventOverflow => {
                    for n in 0..spec.events {
                        post.push(Event::Ping {
                            cookie: 0xfa17_0000_0000_0000 | u64::from(n),
                        });
                    }
                    let d = format!("{at} events={}", spec.events);
                    g.injected(i, now_ns, site.ctx, site.engine, d);
                }
                _ => {}
            }
        }
        verdict
    }

    /// Packet `fl` at `site` finished executing (before its fence, if any,
    /// is completed). `gm` is the memory of the ring's context.
    pub fn on_done(
        &self,
        now_ns: u64,
        site: &Site,
        fl: &InFlight,
        gm: &mut GpuMemory<'_>,
        post: &mut Vec<Event>,
    ) {
        let mut g = self.lock();
        if g.armed.is_empty() {
            return;
        }
        let name = opcode_name(fl.opcode);
        for i in 0..g.armed.len() {
            let spec = g.armed[i].spec.clone();
            let applies = match (spec.class, &fl.op) {
                (Class::DmaCorrupt, Op::Copy(_)) => true,
                (Class::EventDuplicate, Op::Fence { flags, .. }) => {
                    flags & vgpu_hwif::packet::FENCE_NO_EVENT == 0
                }
                _ => false,
            };
            if !applies
                || !filter_matches(&spec.trigger, site.ctx, site.engine, name)
                || !g.opportunity(i, now_ns)
            {
                continue;
            }
            let at = format!("packet={name} packet_va={:#x}", fl.packet_va);
            match fl.op {
                Op::Copy(c) => {
                    let (dst, size) = copy_destination(&c);
                    let mut flips = Vec::new();
                    for _ in 0..spec.bits {
                        let r = g.armed.get_mut(i).map_or(0, |a| a.rng.next());
                        let off = if size == 0 { 0 } else { (r >> 8) % size };
                        let bit = r & 7;
                        let va = dst.wrapping_add(off);
                        let word = va & !7;
                        let mask = 1u64 << ((va & 7) * 8 + bit);
                        if let Ok(v) = gm.read_u64(word, Access::Read) {
                            if gm.write_u64(word, v ^ mask).is_ok() {
                                flips.push(format!("{va:#x}.{bit}"));
                            }
                        }
                    }
                    let d = format!("{at} flips={}", flips.join("+"));
                    g.injected(i, now_ns, site.ctx, site.engine, d);
                }
                Op::Fence { va, seqno, .. } => {
                    post.push(Event::Fence {
                        ctx_id: site.ctx,
                        engine: site.engine,
                        seqno,
                        va,
                    });
                    let d = format!("{at} seqno={seqno}");
                    g.injected(i, now_ns, site.ctx, site.engine, d);
                }
                _ => {}
            }
        }
    }

    /// Engine `engine` is asked to invalidate part of its TLB for `asid`:
    /// `invalidate(None)` does it normally; when `stale-tlb` fired on the
    /// engine, `invalidate(Some(pick))` keeps one translation of the range
    /// (chosen by the seeded draw `pick`) stale, and returns it. The
    /// injection is logged with the VA, the stale PA and the context; if
    /// the range held no translation, the next invalidation tries again.
    pub fn on_invalidate(
        &self,
        now_ns: u64,
        engine: u32,
        asid: u32,
        invalidate: impl FnOnce(Option<u64>) -> Option<PageMapping>,
    ) {
        let mut g = self.lock();
        let Some((id, pick)) = g.engines.get(engine as usize).and_then(|h| h.stale_tlb) else {
            drop(g);
            invalidate(None);
            return;
        };
        let Some(map) = invalidate(Some(pick)) else {
            return;
        };
        if let Some(h) = g.engines.get_mut(engine as usize) {
            h.stale_tlb = None;
        }
        let i = g
            .armed
            .iter()
            .position(|a| a.id == id)
            .unwrap_or(usize::MAX);
        let d = format!(
            "va={:#x} stale_pa={:#x} page_size={:#x}",
            map.va_base,
            map.pa_base,
            map.page_size()
        );
        g.injected(i, now_ns, asid, engine, d);
    }

    /// Before the control processor executes `op`: the status to answer
    /// instead, if any. Also logs the driver's reactions to an injection.
    pub fn on_command(&self, now_ns: u64, op: Opcode, ctx: u32, engine: u32) -> Option<Status> {
        let mut g = self.lock();
        if matches!(op, Opcode::ContextCreate | Opcode::ContextDestroy) {
            // A new context with this id may lay its ring out the same way:
            // its first packet is a new opportunity, not the last one seen.
            for h in &mut g.engines {
                if h.hung.is_none() && h.last.is_some_and(|l| l.0 == ctx) {
                    h.last = None;
                }
            }
        }
        if matches!(
            op,
            Opcode::EngineReset
                | Opcode::DeviceReset
                | Opcode::ContextDestroy
                | Opcode::FaultResume
                | Opcode::TlbInvalidate
                | Opcode::ContextCreate
        ) {
            g.observed(now_ns, op.name(), ctx, engine, String::new());
        }
        let name = op.name();
        for i in 0..g.armed.len() {
            let spec = g.armed[i].spec.clone();
            let applies = match spec.class {
                Class::ControlBusy => true,
                Class::ResetFail => matches!(op, Opcode::EngineReset | Opcode::DeviceReset),
                _ => false,
            };
            if !applies
                || !filter_matches(&spec.trigger, ctx, engine, name)
                || !g.opportunity(i, now_ns)
            {
                continue;
            }
            let status = if spec.class == Class::ControlBusy {
                Status::Busy
            } else {
                Status::DeviceLost
            };
            g.injected(i, now_ns, ctx, engine, format!("command={name}"));
            return Some(status);
        }
        if g.lost && op != Opcode::DeviceReset {
            return Some(Status::DeviceLost);
        }
        None
    }

    /// Engine `engine` was reset (`None`: the device): hangs and holds on
    /// it end; a device reset also ends a lost state.
    pub fn on_reset(&self, now_ns: u64, engine: Option<u32>) {
        let mut g = self.lock();
        let was = g.lost || g.engines.iter().any(|e| e.hung.is_some());
        for (i, h) in g.engines.iter_mut().enumerate() {
            if engine.is_none_or(|e| e as usize == i) {
                h.hung = None;
                h.until_ns = 0;
                h.last = None;
            }
        }
        if engine.is_none() {
            g.lost = false;
        }
        if was {
            let what = if engine.is_some() {
                "engine-reset-done"
            } else {
                "device-reset-done"
            };
            g.observed(
                now_ns,
                what,
                u32::MAX,
                engine.unwrap_or(u32::MAX),
                String::new(),
            );
        }
    }

    /// A FENCE completed on `engine` for `ctx` (the device serving again
    /// after an injection).
    pub fn on_fence(&self, now_ns: u64, ctx: u32, engine: u32, seqno: u64) {
        let mut g = self.lock();
        if g.observe == 0 || !g.reacted {
            return;
        }
        g.observed(now_ns, "fence", ctx, engine, format!("seqno={seqno}"));
        // One fence per reaction is enough to show the device serves again.
        g.reacted = false;
    }
}

/// The VA packet `fl` reads next: a copy's source at its progress, a
/// dispatch's module, a semaphore wait's value; else the packet itself
/// (the command processor fetches the following packets from there).
fn next_read(fl: &InFlight) -> u64 {
    use super::copy_engine::CopyOp;
    match fl.op {
        Op::Copy(CopyOp::Linear { src, done, .. }) => src.wrapping_add(done),
        Op::Copy(CopyOp::TwoD { packet, row, col }) => packet
            .src
            .wrapping_add(u64::from(row) * u64::from(packet.src_pitch) + u64::from(col)),
        Op::Dispatch(d) => d.packet.module_va,
        Op::SemWait { va, .. } => va,
        _ => fl.packet_va,
    }
}

/// Destination VA and size of a copy.
fn copy_destination(c: &super::copy_engine::CopyOp) -> (u64, u64) {
    use super::copy_engine::CopyOp;
    match *c {
        CopyOp::Linear { dst, size, .. } | CopyOp::Fill { dst, size, .. } => (dst, size),
        CopyOp::TwoD { packet, .. } => (packet.dst, u64::from(packet.width)),
    }
}

impl crate::core::sanitize::InjectionLog for Injector {
    fn injected_since(&self, ctx: Option<u32>, since_ns: u64) -> bool {
        self.lock().log.iter().any(|e| {
            e.kind == "inject"
                && e.device_ns >= since_ns
                && ctx.is_none_or(|c| e.ctx == c || e.ctx == u32::MAX)
        })
    }
}

#[cfg(test)]
mod tests;
