//! Contexts: the GPU's address spaces and the unit of scheduling.
//!
//! A context has an id chosen by the driver (`0..MAX_CONTEXTS`, also its
//! ASID: TLB entries are tagged with it), the guest-physical address of its
//! page-table root, a priority, a fault mode, at most one ring per engine,
//! and counters since creation.
//!
//! # State machine
//!
//! ```text
//!            CONTEXT_CREATE                 CONTEXT_DESTROY (no work in flight)
//!   (free) ───────────────▶ ACTIVE ───────────────────────────────────────▶ (free)
//!                             │  CONTEXT_DESTROY with work: BUSY, unless FORCE:
//!                             └─▶ DYING (never scheduled again; engines running it
//!                                 are reset, its TLB entries flushed) ──────▶ (free)
//! ```
//!
//! The state bits `CONTEXT_QUERY` reports are derived from the rings: a
//! stopped ring makes the context `ERRORED`, a stalled one `FAULT_STALLED`,
//! a waiting one `SEM_WAIT`, and any ring with unfinished work `BUSY`.

use vgpu_hwif::proto::{
    ctx_state, engine, ContextQueryReply, ReplyHeader, Status, CTX_FLAG_REPLAYABLE_FAULTS,
    MAX_CONTEXTS, PRIORITY_REALTIME,
};

use super::mmu::AddressSpace;
use super::ring::{Ring, RingState};
use super::telemetry::Stats;

/// Why a context command was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ContextError {
    /// The id is not below `MAX_CONTEXTS`.
    #[error("context id {0} out of range")]
    BadId(u32),
    /// The priority is not a `PRIORITY_*`.
    #[error("priority {0} out of range")]
    BadPriority(u32),
    /// The page-table root is not a 4 KiB aligned device-physical address.
    #[error("page-table root {0:#x} is not a 4 KiB aligned device-physical address (system memory, or VRAM at VRAM_BASE)")]
    BadRoot(u64),
    /// The id is in use.
    #[error("context {0} already exists")]
    Exists(u32),
    /// No context has this id.
    #[error("context {0} does not exist")]
    NotFound(u32),
    /// The context has work in flight.
    #[error("context {0} has work in flight")]
    Busy(u32),
}

impl ContextError {
    /// The reply status.
    pub const fn status(&self) -> Status {
        match self {
            ContextError::BadId(_) | ContextError::BadPriority(_) | ContextError::BadRoot(_) => {
                Status::InvalidArgument
            }
            ContextError::Exists(_) => Status::AlreadyExists,
            ContextError::NotFound(_) => Status::NotFound,
            ContextError::Busy(_) => Status::Busy,
        }
    }
}

/// One context.
#[derive(Clone, Debug)]
pub struct Context {
    /// Id and ASID.
    pub id: u32,
    /// `PRIORITY_*`.
    pub priority: u32,
    /// Faults stall the job until `FAULT_RESUME` instead of stopping the
    /// ring.
    pub replayable: bool,
    /// Guest-physical address of the level-3 page table.
    pub pt_root: u64,
    /// Rings, indexed by engine.
    pub rings: [Option<Ring>; engine::COUNT as usize],
    /// Counters since creation.
    pub stats: Stats,
    /// VA of the last fault.
    pub last_fault_va: u64,
    /// Being destroyed: never scheduled again.
    pub dying: bool,
}

impl Context {
    /// Checks `CONTEXT_CREATE` operands (flags are checked by the decoder)
    /// and builds the context.
    pub fn new(id: u32, priority: u32, flags: u32, pt_root: u64) -> Result<Context, ContextError> {
        if id >= MAX_CONTEXTS {
            return Err(ContextError::BadId(id));
        }
        if priority > PRIORITY_REALTIME {
            return Err(ContextError::BadPriority(priority));
        }
        // A device-physical address: system memory, or VRAM at VRAM_BASE.
        if pt_root & !(vgpu_hwif::mmu::PTE_ADDR_MASK | vgpu_hwif::mmu::VRAM_BASE) != 0 {
            return Err(ContextError::BadRoot(pt_root));
        }
        Ok(Context {
            id,
            priority,
            replayable: flags & CTX_FLAG_REPLAYABLE_FAULTS != 0,
            pt_root,
            rings: [None, None],
            stats: Stats::default(),
            last_fault_va: 0,
            dying: false,
        })
    }

    /// The context's address space for a device of `va_bits`.
    pub fn space(&self, va_bits: u32) -> AddressSpace {
        AddressSpace {
            asid: self.id,
            root: self.pt_root,
            va_bits,
        }
    }

    /// The ring on `engine_no`, if any.
    pub fn ring(&self, engine_no: u32) -> Option<&Ring> {
        self.rings.get(engine_no as usize)?.as_ref()
    }

    /// The ring on `engine_no`, mutably.
    pub fn ring_mut(&mut self, engine_no: u32) -> Option<&mut Ring> {
        self.rings.get_mut(engine_no as usize)?.as_mut()
    }

    /// Whether any ring has unfinished work (or an unseen doorbell).
    pub fn has_work(&self) -> bool {
        self.rings.iter().flatten().any(Ring::busy)
    }

    /// `ctx_state` bits.
    pub fn state_bits(&self) -> u32 {
        let mut bits = 0;
        for r in self.rings.iter().flatten() {
            bits |= match r.state {
                RingState::Stopped { .. } => ctx_state::ERRORED,
                RingState::FaultStalled { .. } => ctx_state::FAULT_STALLED,
                RingState::SemWait { .. } => ctx_state::SEM_WAIT,
                RingState::Running => ctx_state::RUNNING,
                _ => 0,
            };
        }
        if self.has_work() {
            bits |= ctx_state::BUSY;
        }
        bits
    }

    /// The `CONTEXT_QUERY` reply.
    pub fn query(&self, hdr: ReplyHeader) -> ContextQueryReply {
        ContextQueryReply {
            hdr,
            ctx_id: self.id,
            state: self.state_bits(),
            faults: u32::try_from(self.stats.faults).unwrap_or(u32::MAX),
            errors: u32::try_from(self.stats.errors).unwrap_or(u32::MAX),
            last_fault_va: self.last_fault_va,
            busy_ns: self.stats.busy_ns,
            packets: self.stats.packets,
        }
    }
}

/// The context table.
#[derive(Debug)]
pub struct ContextTable {
    slots: Vec<Option<Context>>,
}

impl Default for ContextTable {
    fn default() -> Self {
        Self::new()
    }
}

impl ContextTable {
    /// No contexts.
    pub fn new() -> Self {
        ContextTable {
            slots: vec![None; MAX_CONTEXTS as usize],
        }
    }

    /// Context `id`.
    pub fn get(&self, id: u32) -> Result<&Context, ContextError> {
        self.slots
            .get(id as usize)
            .and_then(Option::as_ref)
            .ok_or(ContextError::NotFound(id))
    }

    /// Context `id`, mutably.
    pub fn get_mut(&mut self, id: u32) -> Result<&mut Context, ContextError> {
        self.slots
            .get_mut(id as usize)
            .and_then(Option::as_mut)
            .ok_or(ContextError::NotFound(id))
    }

    /// Inserts a new context.
    pub fn insert(&mut self, ctx: Context) -> Result<(), ContextError> {
        let id = ctx.id;
        let slot = self
            .slots
            .get_mut(id as usize)
            .ok_or(ContextError::BadId(id))?;
        if slot.is_some() {
            return Err(ContextError::Exists(id));
        }
        *slot = Some(ctx);
        Ok(())
    }

    /// Removes context `id`.
    pub fn remove(&mut self, id: u32) -> Option<Context> {
        self.slots.get_mut(id as usize)?.take()
    }

    /// Every context.
    pub fn iter(&self) -> impl Iterator<Item = &Context> {
        self.slots.iter().flatten()
    }

    /// Every context, mutably.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut Context> {
        self.slots.iter_mut().flatten()
    }

    /// Removes every context.
    pub fn clear(&mut self) {
        self.slots.iter_mut().for_each(|s| *s = None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vgpu_hwif::proto::{PRIORITY_HIGH, PRIORITY_LOW};

    #[test]
    fn create_checks_operands() {
        assert!(Context::new(63, PRIORITY_HIGH, 0, 0x1000).is_ok());
        assert_eq!(
            Context::new(64, 0, 0, 0).unwrap_err(),
            ContextError::BadId(64)
        );
        assert_eq!(
            Context::new(0, 4, 0, 0).unwrap_err(),
            ContextError::BadPriority(4)
        );
        assert_eq!(
            Context::new(0, 0, 0, 0x1001).unwrap_err(),
            ContextError::BadRoot(0x1001)
        );
        // VRAM_BASE (bit 52) names VRAM; bits above it name nothing.
        assert!(Context::new(0, 0, 0, 1 << 52).is_ok());
        assert_eq!(
            Context::new(0, 0, 0, 1 << 53).unwrap_err(),
            ContextError::BadRoot(1 << 53)
        );
        assert!(
            Context::new(0, PRIORITY_LOW, CTX_FLAG_REPLAYABLE_FAULTS, 0)
                .unwrap()
                .replayable
        );
    }

    #[test]
    fn table_holds_64_contexts() {
        let mut t = ContextTable::new();
        for id in 0..MAX_CONTEXTS {
            t.insert(Context::new(id, 1, 0, 0).unwrap()).unwrap();
        }
        assert_eq!(t.iter().count(), 64);
        assert_eq!(
            t.insert(Context::new(5, 1, 0, 0).unwrap()),
            Err(ContextError::Exists(5))
        );
        assert!(t.remove(5).is_some());
        assert_eq!(t.get(5).unwrap_err().status(), Status::NotFound);
        assert_eq!(t.get(1000).unwrap_err(), ContextError::NotFound(1000));
    }

    #[test]
    fn state_bits_come_from_rings() {
        let mut c = Context::new(1, 1, 0, 0).unwrap();
        assert_eq!(c.state_bits(), 0);
        c.rings[0] = Some(Ring::new(0, 0, 4096, 0));
        c.rings[1] = Some(Ring::new(1, 0x1000, 4096, 0x40));
        c.rings[0].as_mut().unwrap().state = RingState::Stopped {
            error: 2,
            error_rptr: 0,
        };
        assert_eq!(c.state_bits(), ctx_state::ERRORED);
        c.rings[1].as_mut().unwrap().state = RingState::FaultStalled { fault_id: 1 };
        assert_eq!(
            c.state_bits(),
            ctx_state::ERRORED | ctx_state::FAULT_STALLED | ctx_state::BUSY
        );
        assert!(c.has_work());
        // Runnable is not running: only the ring the engine executes says
        // RUNNING (a hang check tells the hung ring from one waiting).
        let r = c.rings[1].as_mut().unwrap();
        r.state = RingState::Ready;
        r.wptr = 0x40;
        assert_eq!(c.state_bits() & ctx_state::RUNNING, 0);
        c.rings[1].as_mut().unwrap().state = RingState::Running;
        assert_eq!(
            c.state_bits(),
            ctx_state::ERRORED | ctx_state::RUNNING | ctx_state::BUSY
        );
    }
}
