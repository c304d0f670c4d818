//! The parts of a source: its tables and its enumerated values.

use serde::{Deserialize, Serialize};
use vgpu_hwif::firmware::feature;

use crate::error::Error;
use crate::packets::{self, Bitmap};

/// A feature an image enables (`vgpu_hwif::firmware::feature`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Feature {
    /// `user-queues`: user-mode queues (`DOORBELL_WATCH`).
    UserQueues,
    /// `preemption`: time-sliced preemption.
    Preemption,
}

impl Feature {
    /// Its bit in the header's `features`.
    pub const fn bit(self) -> u32 {
        match self {
            Feature::UserQueues => feature::USER_QUEUES,
            Feature::Preemption => feature::PREEMPTION,
        }
    }

    /// Its name in a source.
    pub const fn name(self) -> &'static str {
        match self {
            Feature::UserQueues => "user-queues",
            Feature::Preemption => "preemption",
        }
    }

    /// Every feature.
    pub const ALL: [Feature; 2] = [Feature::UserQueues, Feature::Preemption];
}

/// The driver-interface versions an image serves, `"major.minor"` each.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Interface {
    /// The oldest.
    pub min: String,
    /// The newest.
    pub max: String,
}

/// The scheduler's parameters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sched {
    /// The time slice of each priority, µs (each at least 1).
    pub slice_us: Slices,
    /// How long a context may run past its slice before it is preempted
    /// by force, µs.
    pub preempt_timeout_us: u32,
    /// How the scheduler picks the next context.
    pub policy: Policy,
}

/// A time slice per priority, µs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Slices {
    /// Low priority.
    pub low: u32,
    /// Normal priority.
    pub normal: u32,
    /// High priority.
    pub high: u32,
}

/// The scheduling policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    /// `priority` (0): strict priority, then round robin.
    Priority,
    /// `round-robin` (1): round robin only.
    RoundRobin,
}

impl Policy {
    /// Its value in the `SCHED` section.
    pub const fn value(self) -> u32 {
        match self {
            Policy::Priority => 0,
            Policy::RoundRobin => 1,
        }
    }
}

/// The packets each generation's command processor accepts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Packets {
    /// Generation 1's.
    pub gen1: PacketSet,
    /// Generation 2's.
    pub gen2: PacketSet,
}

/// A set of packet opcodes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum PacketSet {
    /// A word: only `"all"`, every opcode the generation decodes.
    Word(String),
    /// Opcode names (`"COPY_2D"`, any case).
    List(Vec<String>),
}

impl PacketSet {
    /// `"all"`.
    pub fn all() -> PacketSet {
        PacketSet::Word("all".to_owned())
    }

    /// Its bitmap for `generation`.
    ///
    /// # Errors
    ///
    /// [`Error::PacketWord`] for a word other than `all`,
    /// [`Error::Opcode`] for a name `generation` does not decode.
    pub fn bitmap(&self, generation: u32) -> Result<Bitmap, Error> {
        match self {
            PacketSet::Word(w) if w == "all" => Ok(packets::all(generation)),
            PacketSet::Word(w) => Err(Error::PacketWord {
                generation,
                word: w.clone(),
            }),
            PacketSet::List(names) => packets::bitmap(generation, names),
        }
    }
}

/// The `HEARTBEAT` section.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Heartbeat {
    /// Period, ms (0: none; at most [`super::MAX_HEARTBEAT_MS`]).
    pub period_ms: u32,
}

/// The `LOG` section.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Log {
    /// Bytes of the firmware log: a power of two from [`super::MIN_LOG_SIZE`] to
    /// [`super::MAX_LOG_SIZE`].
    pub size: u32,
}
