//! What a fault is: its [`Class`], its [`Trigger`] and filters, and the
//! specification syntax (`CLASS[:key=val,...]`) that [`Spec::parse`]
//! reads and [`Spec::render`] writes.

use vgpu_hwif::event::EVENT_FIFO_DEPTH;
use vgpu_hwif::packet::{opcode_name, OPCODES};
use vgpu_hwif::proto::Opcode;

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
    /// A control command is executed, and its reply's first payload word
    /// (after the reply header) reaches the driver with its lowest bit
    /// flipped: a corrupted reply the driver must not believe.
    ReplyCorrupt,
    /// A control command that posts an event (`PING`) is executed, and its
    /// event's first payload word reaches the driver with its lowest bit
    /// flipped (the reply is intact): a corrupted event record.
    EventCorrupt,
    /// The device process dies at the packet (exit status 70), like a
    /// backend that crashed: QEMU keeps the guest running, and nothing
    /// answers the driver any more.
    Crash,
    /// At `FW_START` the image boots for its boot time, then fails with
    /// the boot error `TIMEOUT`: the firmware did not come up.
    FwBootFail,
    /// At `FW_START` the image never finishes booting: `BOOTING` until a
    /// reset (the driver's bounded poll gives up).
    FwBootHang,
    /// The firmware crashes at the packet: the engines stop, a
    /// `FIRMWARE_CRASH` event is posted, and every command but the boot
    /// ones answers `NOT_READY` until a `DEVICE_RESET`.
    FwCrash,
    /// The firmware hangs at the packet, silently: the engines stop, its
    /// heartbeats stop counting, commands still answer; until a
    /// `DEVICE_RESET`.
    FwHang,
    /// `POWER_SET` to a low-power state is answered `BUSY` without effect
    /// (the device failed to enter it).
    PmEnterFail,
    /// `POWER_SET` back to `D0` is answered `DEVICE_LOST` without effect
    /// (the device failed to wake; a new attempt may work).
    PmExitFail,
    /// A `D3HOT` loses VRAM anyway: the return to `D0` says `GARBAGE`.
    PmVramLost,
}

impl Class {
    /// Every class.
    pub const ALL: [Class; 25] = [
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
        Class::ReplyCorrupt,
        Class::EventCorrupt,
        Class::Crash,
        Class::FwBootFail,
        Class::FwBootHang,
        Class::FwCrash,
        Class::FwHang,
        Class::PmEnterFail,
        Class::PmExitFail,
        Class::PmVramLost,
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
            Class::ReplyCorrupt => "reply-corrupt",
            Class::EventCorrupt => "event-corrupt",
            Class::Crash => "crash",
            Class::FwBootFail => "fw-boot-fail",
            Class::FwBootHang => "fw-boot-hang",
            Class::FwCrash => "fw-crash",
            Class::FwHang => "fw-hang",
            Class::PmEnterFail => "pm-enter-fail",
            Class::PmExitFail => "pm-exit-fail",
            Class::PmVramLost => "pm-vram-lost",
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
            Class::ReplyCorrupt => {
                "control command executed, its reply's first payload word bit 0 flipped"
            }
            Class::EventCorrupt => {
                "control command executed, the first payload word of the event it posts bit 0 flipped"
            }
            Class::Crash => {
                "the device process exits at the packet (status 70): nothing answers any more"
            }
            Class::FwBootFail => "at FW_START the firmware boots, then fails with boot error TIMEOUT",
            Class::FwBootHang => "at FW_START the firmware never finishes booting (until a reset)",
            Class::FwCrash => {
                "the firmware crashes at the packet: engines stop, FIRMWARE_CRASH event, NOT_READY until DEVICE_RESET"
            }
            Class::FwHang => {
                "the firmware hangs at the packet: engines and heartbeats stop, no event, until DEVICE_RESET"
            }
            Class::PmEnterFail => "POWER_SET to D3hot/D3cold answered BUSY without effect",
            Class::PmExitFail => "POWER_SET back to D0 answered DEVICE_LOST without effect",
            Class::PmVramLost => "a D3hot loses VRAM anyway (the return to D0 says GARBAGE)",
        }
    }

    /// The class named `s`.
    pub fn from_name(s: &str) -> Option<Class> {
        Class::ALL.into_iter().find(|c| c.name() == s)
    }

    /// Classes whose opportunities are control commands.
    pub(super) const fn on_control(self) -> bool {
        matches!(
            self,
            Class::ControlBusy
                | Class::ResetFail
                | Class::ReplyCorrupt
                | Class::EventCorrupt
                | Class::FwBootFail
                | Class::FwBootHang
                | Class::PmEnterFail
                | Class::PmExitFail
                | Class::PmVramLost
        )
    }

    /// Classes whose opportunities are FENCE packets only.
    pub(super) const fn fence_only(self) -> bool {
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
