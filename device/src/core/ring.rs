//! Rings: one per (context, engine), registered with `RING_CREATE`.
//!
//! A ring is a power-of-two buffer of packet words at a GPU VA. The driver
//! writes packets and publishes its write pointer with `DOORBELL`; the
//! engine's command processor consumes packets from the read pointer. Both
//! pointers count bytes ever written/consumed and wrap at 2^32; the ring
//! offset is `ptr % size`.
//!
//! # State machine
//!
//! ```text
//!                      doorbell (valid, new work)
//!   ┌──────┐ ─────────────────────────────────────────▶ ┌───────┐
//!   │ IDLE │                                            │ READY │ ◀──┐ slice over,
//!   └──────┘ ◀─────────── caught up ──────────┐         └───────┘    │ preempted
//!      ▲                                      │       picked │       │
//!      │                                      │              ▼       │
//!      │                                      └────────── RUNNING ───┘
//!      │                                                  │  │  │  ▲
//!      │                      semaphore false             │  │  │  │ re-check: epoch moved
//!      │                 SEM_WAIT ◀───────────────────────┘  │  │  │ or poll interval
//!      │                     └───────────────────────────────┼──┼──┘
//!      │                      replayable fault               │  │
//!      │     READY ◀─ retry ─ FAULT_STALLED ◀────────────────┘  │
//!      │                        │ FAULT_RESUME abort            │ bad packet or pointer,
//!      │                        ▼                               │ non-replayable fault
//!      └── ENGINE_RESET ──── STOPPED ◀──────────────────────────┘
//! ```
//!
//! `ENGINE_RESET` also returns `FAULT_STALLED` rings, and the ring it
//! interrupted, to `IDLE`.
//!
//! (`READY` and `RUNNING` are both reported as `ring_state::RUNNING`.) A
//! `STOPPED` ring ignores doorbells until it is destroyed or its engine is
//! reset. Doorbells are *register writes*: the ring keeps the latest value
//! and the engine validates it against its own read pointer when it next
//! schedules the ring (see [`check_doorbell`]).
//!
//! While a ring is `RUNNING` its [`Cursor`] is owned by the engine thread;
//! the control side changes nothing but the doorbell register.

use std::time::Instant;

use vgpu_hwif::packet::{EngineError, MAX_INDIRECT_DEPTH};
use vgpu_hwif::proto::{engine, ring_state, RingStatus, Status, MAX_RING_SIZE, MIN_RING_SIZE};

use super::compute_engine::DispatchOp;
use super::copy_engine::CopyOp;
use super::telemetry::Stats;

/// An `INDIRECT` command buffer being executed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Frame {
    /// GPU VA of the buffer.
    pub va: u64,
    /// Its size in bytes.
    pub size: u32,
    /// Byte offset of the next packet.
    pub offset: u32,
}

/// A decoded packet whose execution has started but not finished
/// (preempted, blocked on a semaphore or stalled on a fault). It is resumed
/// from this state, never fetched or decoded again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// `FENCE`: write, then event.
    Fence {
        /// Where.
        va: u64,
        /// What.
        seqno: u64,
        /// `FENCE_*` flags.
        flags: u32,
    },
    /// `SEM_WAIT`.
    SemWait {
        /// Semaphore address.
        va: u64,
        /// Operand.
        value: u64,
        /// `SEM_WAIT_*`.
        op: u32,
    },
    /// `SEM_SIGNAL`.
    SemSignal {
        /// Semaphore address.
        va: u64,
        /// Operand.
        value: u64,
        /// `SEM_SIGNAL_*`.
        op: u32,
    },
    /// `TIMESTAMP`.
    Timestamp {
        /// Where.
        va: u64,
    },
    /// A copy-engine transfer and its progress.
    Copy(CopyOp),
    /// A kernel dispatch; its loaded state and progress are kept by the
    /// command processor under the op's token.
    Dispatch(DispatchOp),
}

/// A packet in progress and where it came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InFlight {
    /// The operation and its progress.
    pub op: Op,
    /// GPU VA of the packet's header.
    pub packet_va: u64,
    /// The header word.
    pub header: u32,
    /// Length of the packet in words.
    pub words: u32,
    /// Opcode (for telemetry).
    pub opcode: u8,
    /// Device time the packet started (recorded only when tracing).
    pub started_ns: u64,
}

/// Where a ring's command processor stands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cursor {
    /// Read pointer: the ring-level packet being executed (an `INDIRECT`
    /// while `depth > 0`), or the next one.
    pub rptr: u32,
    /// `INDIRECT` buffers being executed, outermost first.
    pub frames: [Frame; MAX_INDIRECT_DEPTH as usize],
    /// Number of valid `frames`: the current indirect depth.
    pub depth: u32,
    /// The packet in progress at the innermost level, if any.
    pub pending: Option<InFlight>,
    /// Seqno of the last `FENCE` executed.
    pub last_fence: u64,
    /// Packets completed on this ring.
    pub packets: u64,
}

impl Cursor {
    /// A cursor at read pointer `rptr` with nothing in progress, keeping
    /// the fence and packet history.
    pub fn restart_at(&self, rptr: u32) -> Cursor {
        Cursor {
            rptr,
            last_fence: self.last_fence,
            packets: self.packets,
            ..Cursor::default()
        }
    }

    /// The innermost frame, if executing an `INDIRECT` buffer.
    pub fn frame(&self) -> Option<&Frame> {
        self.frames.get(self.depth.checked_sub(1)? as usize)
    }

    /// The innermost frame, mutably.
    pub fn frame_mut(&mut self) -> Option<&mut Frame> {
        self.frames.get_mut(self.depth.checked_sub(1)? as usize)
    }

    /// Whether nothing is in progress at any level.
    pub fn at_packet_boundary(&self) -> bool {
        self.depth == 0 && self.pending.is_none()
    }
}

/// Ring states (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RingState {
    /// Caught up: `rptr == wptr`.
    Idle,
    /// Has work and waits for its engine.
    Ready,
    /// Executing on its engine (the cursor is out with the engine).
    Running,
    /// Blocked on `SEM_WAIT`; re-checked when the semaphore epoch moves on
    /// from `epoch` or after the poll interval since `since`.
    SemWait {
        /// The semaphore epoch read before the semaphore was.
        epoch: u64,
        /// When the ring blocked.
        since: Instant,
    },
    /// Stalled on replayable fault `fault_id`.
    FaultStalled {
        /// Id to name in `FAULT_RESUME`.
        fault_id: u64,
    },
    /// Stopped by an engine error or a non-replayable fault.
    Stopped {
        /// `EngineError` number.
        error: u32,
        /// Read pointer of the ring-level packet that stopped it.
        error_rptr: u32,
    },
}

impl RingState {
    /// The `ring_state` number the driver sees.
    pub const fn hw_state(&self) -> u32 {
        match self {
            RingState::Idle => ring_state::IDLE,
            RingState::Ready | RingState::Running => ring_state::RUNNING,
            RingState::SemWait { .. } => ring_state::SEM_WAIT,
            RingState::FaultStalled { .. } => ring_state::FAULT_STALLED,
            RingState::Stopped { .. } => ring_state::STOPPED,
        }
    }

    /// Whether the ring holds work it has not finished (and so keeps its
    /// context busy).
    pub const fn has_work(&self) -> bool {
        matches!(
            self,
            RingState::Ready
                | RingState::Running
                | RingState::SemWait { .. }
                | RingState::FaultStalled { .. }
        )
    }
}

/// One registered ring.
#[derive(Clone, Debug)]
pub struct Ring {
    /// Engine.
    pub engine: u32,
    /// Ring GPU VA (4 KiB aligned).
    pub va: u64,
    /// Size in bytes (a power of two).
    pub size: u32,
    /// Status block GPU VA (64-byte aligned).
    pub status_va: u64,
    /// Accepted write pointer.
    pub wptr: u32,
    /// The latest doorbell value not yet seen by the engine.
    pub doorbell: Option<u32>,
    /// State.
    pub state: RingState,
    /// Command processor position (stale while `Running`).
    pub cursor: Cursor,
    /// The status block must be rewritten.
    pub status_dirty: bool,
    /// Writing the status block faulted: no further writes are attempted.
    pub status_broken: bool,
    /// The watched doorbell block at this VA could not be accessed: the
    /// engine stops the ring with `DOORBELL_FAULT` when it next looks.
    pub doorbell_fault: Option<u64>,
    /// Counters of the context's work on this engine since the ring was
    /// created (`QUERY_STATS` `CONTEXT_ENGINE`); the context's own
    /// counters are the sum over its rings.
    pub stats: Stats,
}

impl Ring {
    /// A new, idle ring at read and write pointer 0.
    pub fn new(engine: u32, va: u64, size: u32, status_va: u64) -> Ring {
        Ring {
            engine,
            va,
            size,
            status_va,
            wptr: 0,
            doorbell: None,
            state: RingState::Idle,
            cursor: Cursor::default(),
            status_dirty: true,
            status_broken: false,
            doorbell_fault: None,
            stats: Stats::default(),
        }
    }

    /// The status block as the device writes it.
    pub fn status(&self) -> RingStatus {
        let (error, error_rptr) = match self.state {
            RingState::Stopped { error, error_rptr } => (error, error_rptr),
            _ => (0, 0),
        };
        RingStatus {
            rptr: self.cursor.rptr,
            state: self.state.hw_state(),
            last_fence: self.cursor.last_fence,
            packets: self.cursor.packets,
            error,
            error_rptr,
            wptr: self.wptr,
            reserved0: 0,
            reserved: [0; 3],
        }
    }

    /// GPU VA of ring pointer `ptr`.
    pub fn va_of(&self, ptr: u32) -> u64 {
        self.va + u64::from(ptr & (self.size - 1))
    }

    /// Whether the cursor has packets or a packet in progress before the
    /// accepted write pointer.
    pub fn has_packets(&self) -> bool {
        self.cursor.rptr != self.wptr || !self.cursor.at_packet_boundary()
    }

    /// Drops all unexecuted work: the read pointer jumps to the write
    /// pointer, nothing is in progress, the ring is idle (engine reset).
    pub fn discard_work(&mut self) {
        self.cursor = self.cursor.restart_at(self.wptr);
        self.doorbell = None;
        self.state = RingState::Idle;
        self.status_dirty = true;
        self.status_broken = false;
    }

    /// A doorbell (the `DOORBELL` command, or a watched block's new
    /// `wptr`): the value is latched for the engine, which checks it the
    /// next time it schedules the ring. A stopped ring ignores it (the
    /// register write is accepted and has no effect). Whether it latched.
    pub fn ring_doorbell(&mut self, wptr: u32) -> bool {
        if matches!(self.state, RingState::Stopped { .. }) {
            return false;
        }
        self.doorbell = Some(wptr);
        true
    }

    /// Whether the ring has work in flight: unfinished packets, or a
    /// doorbell not yet seen by a ring that is not stopped. A busy ring
    /// cannot be destroyed.
    pub fn busy(&self) -> bool {
        self.state.has_work()
            || self.doorbell.is_some() && !matches!(self.state, RingState::Stopped { .. })
    }
}

/// Why a ring command was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RingError {
    /// No such engine.
    #[error("engine {0} does not exist")]
    BadEngine(u32),
    /// The size is not a power of two in range.
    #[error("ring size {0} is not a power of two in {MIN_RING_SIZE}..={MAX_RING_SIZE}")]
    BadSize(u32),
    /// The ring VA is misaligned or the ring leaves the address space.
    #[error("ring VA {0:#x} is not 4 KiB aligned or the ring leaves the address space")]
    BadRingVa(u64),
    /// The status VA is misaligned or outside the address space.
    #[error("status VA {0:#x} is not 64-byte aligned or outside the address space")]
    BadStatusVa(u64),
    /// The (context, engine) already has a ring.
    #[error("context {0} already has a ring on engine {1}")]
    Exists(u32, u32),
    /// The (context, engine) has no ring.
    #[error("context {0} has no ring on engine {1}")]
    NotFound(u32, u32),
    /// The ring has unfinished work.
    #[error("ring of context {0} on engine {1} has work in flight")]
    Busy(u32, u32),
}

impl RingError {
    /// The reply status.
    pub const fn status(&self) -> Status {
        match self {
            RingError::BadEngine(_)
            | RingError::BadSize(_)
            | RingError::BadRingVa(_)
            | RingError::BadStatusVa(_) => Status::InvalidArgument,
            RingError::Exists(..) => Status::AlreadyExists,
            RingError::NotFound(..) => Status::NotFound,
            RingError::Busy(..) => Status::Busy,
        }
    }
}

/// Checks the operands of `RING_CREATE` for an address space of
/// `va_bits` bits.
pub fn check_create(
    engine_no: u32,
    size: u32,
    va: u64,
    status_va: u64,
    va_bits: u32,
) -> Result<(), RingError> {
    if engine_no >= engine::COUNT {
        return Err(RingError::BadEngine(engine_no));
    }
    if !size.is_power_of_two() || !(MIN_RING_SIZE..=MAX_RING_SIZE).contains(&size) {
        return Err(RingError::BadSize(size));
    }
    let limit = 1u64 << va_bits;
    if !va.is_multiple_of(4096)
        || va
            .checked_add(u64::from(size))
            .is_none_or(|end| end > limit)
    {
        return Err(RingError::BadRingVa(va));
    }
    if !status_va.is_multiple_of(64) || status_va >= limit {
        return Err(RingError::BadStatusVa(status_va));
    }
    Ok(())
}

/// Checks a doorbell value against a ring's accepted write pointer
/// `wptr`, its read pointer `rptr` and its size.
///
/// * not a multiple of 4, or behind the accepted write pointer
///   (`new - wptr` negative as a 32-bit signed number): `BAD_POINTER`;
/// * more than `size` bytes ahead of the read pointer: `RING_OVERFLOW`.
///
/// Returns the new write pointer.
pub fn check_doorbell(new: u32, wptr: u32, rptr: u32, size: u32) -> Result<u32, EngineError> {
    if !new.is_multiple_of(4) || (new.wrapping_sub(wptr) as i32) < 0 {
        return Err(EngineError::BadPointer);
    }
    if new.wrapping_sub(rptr) > size {
        return Err(EngineError::RingOverflow);
    }
    Ok(new)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doorbell_rules() {
        let size = 4096;
        assert_eq!(check_doorbell(64, 0, 0, size), Ok(64));
        assert_eq!(check_doorbell(4096, 0, 0, size), Ok(4096), "exactly full");
        assert_eq!(
            check_doorbell(4100, 0, 0, size),
            Err(EngineError::RingOverflow)
        );
        assert_eq!(check_doorbell(4100, 64, 4, size), Ok(4100));
        assert_eq!(check_doorbell(66, 0, 0, size), Err(EngineError::BadPointer));
        assert_eq!(
            check_doorbell(60, 64, 64, size),
            Err(EngineError::BadPointer)
        );
        assert_eq!(check_doorbell(64, 64, 0, size), Ok(64), "same value again");
        // Across the 2^32 wrap.
        let near = u32::MAX - 63; // 0xffff_ffc0
        assert_eq!(check_doorbell(64, near, near, size), Ok(64));
        assert_eq!(
            check_doorbell(near, 64, 64, size),
            Err(EngineError::BadPointer)
        );
        assert_eq!(
            check_doorbell(near.wrapping_add(4100), near, near, size),
            Err(EngineError::RingOverflow)
        );
    }

    #[test]
    fn create_checks() {
        assert_eq!(check_create(0, 4096, 0x1000, 0x40, 40), Ok(()));
        assert_eq!(
            check_create(2, 4096, 0x1000, 0x40, 40),
            Err(RingError::BadEngine(2))
        );
        assert_eq!(
            check_create(1, 4095, 0x1000, 0x40, 40),
            Err(RingError::BadSize(4095))
        );
        assert_eq!(
            check_create(1, 2048, 0x1000, 0x40, 40),
            Err(RingError::BadSize(2048))
        );
        assert_eq!(
            check_create(1, 2 << 20, 0x1000, 0x40, 40),
            Err(RingError::BadSize(2 << 20))
        );
        assert_eq!(
            check_create(0, 4096, 0x1800, 0x40, 40),
            Err(RingError::BadRingVa(0x1800))
        );
        assert_eq!(check_create(0, 4096, (1 << 40) - 4096, 0x40, 40), Ok(()));
        assert_eq!(
            check_create(0, 8192, (1 << 40) - 4096, 0x40, 40),
            Err(RingError::BadRingVa((1 << 40) - 4096))
        );
        assert_eq!(
            check_create(0, 4096, 0x1000, 0x48, 40),
            Err(RingError::BadStatusVa(0x48))
        );
        assert_eq!(
            check_create(0, 4096, 0x1000, 1 << 40, 40),
            Err(RingError::BadStatusVa(1 << 40))
        );
        assert_eq!(check_create(0, 4096, 0x1000, 1 << 40, 48), Ok(()));
        assert_eq!(RingError::Busy(1, 0).status(), Status::Busy);
    }

    #[test]
    fn status_block_follows_state() {
        let mut r = Ring::new(0, 0x10_0000, 4096, 0x20_0000);
        assert_eq!(r.status().state, ring_state::IDLE);
        r.wptr = 128;
        r.cursor.rptr = 64;
        r.cursor.last_fence = 9;
        r.state = RingState::Stopped {
            error: EngineError::BadOpcode as u32,
            error_rptr: 64,
        };
        let s = r.status();
        assert_eq!(
            (s.rptr, s.state, s.last_fence, s.error, s.error_rptr),
            (64, ring_state::STOPPED, 9, 2, 64)
        );
        assert!(r.has_packets());
        r.discard_work();
        assert_eq!(r.cursor.rptr, 128);
        assert_eq!(r.cursor.last_fence, 9);
        assert!(!r.has_packets());
        assert_eq!(r.status().state, ring_state::IDLE);
        assert_eq!(r.va_of(4096 + 8), 0x10_0008);
    }
}
