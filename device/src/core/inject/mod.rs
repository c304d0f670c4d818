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
//! | [`Injector::on_reply`] | the control processor, after a command executed | reply-corrupt |
//! | [`Injector::on_command_event`] | the control processor, when a command posts an event (`PING`) | event-corrupt |
//! | [`Injector::on_reset`] | engine and device resets | clears hangs (and `lost` on device reset) |
//!
//! Every opportunity that passes a fault's filters counts, whether or not
//! the fault fires, and random draws happen only on such opportunities, so
//! the same seed and the same workload give the same injections. Every
//! injection is logged (id, device time, wall-clock time, where) and kept
//! in [`Injector::log`]; the driver's reactions after an injection (resets,
//! context destroys, fault resumes) are logged as observations so that
//! detection and recovery latencies can be measured on one clock.
//!
//! `spec.rs` holds what a fault is (its class, its trigger, the
//! `CLASS:key=value,…` syntax); this file the injector's armed faults and
//! log; `hooks.rs` the hooks the blocks call.

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use vgpu_hwif::event::Event;

use super::poison::Poison;

mod hooks;
mod spec;

pub use hooks::{Site, StepVerdict, CRASH_EXIT_STATUS};

pub use spec::{parse_num, Class, InjectError, Spec, Trigger};
/// The injector's seeded generator (its sequence is what a seed replays).
use vgpu_hwif::rng::Rng;

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
    /// The firmware crashed or hangs (`fw-crash`, `fw-hang`): engines make
    /// no progress until a device reset.
    fw_down: bool,
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
            && !g.fw_down
            && g.engines
                .iter()
                .all(|e| e.hung.is_none() && e.until_ns == 0)
            && g.pending_events.is_empty()
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
