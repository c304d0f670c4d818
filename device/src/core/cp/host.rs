//! The command processor's surroundings: the [`Host`] trait (clock,
//! attention and slice flags, semaphores, events, the fault injector) the
//! engine's thread implements, and [`TestHost`] for tests and benchmarks.

use std::time::Instant;

use vgpu_hwif::event::Event;

use crate::core::inject::{Class, Injector};

/// What the command processor needs from its surroundings.
pub trait Host {
    /// Device time in ns.
    fn now_ns(&self) -> u64;
    /// Whether the engine must stop at this boundary.
    fn attention(&self) -> bool;
    /// Whether the time slice is over.
    fn slice_over(&self) -> bool;
    /// Whether another virtual function of a partitioned device waits for
    /// the engine and this function's slice of it is over: the physical
    /// function's scheduler then takes the engine back even from a packet
    /// that holds it (a hang), as a VF's preemption timeout does on
    /// SR-IOV GPUs. Never on a whole device.
    fn function_slice_over(&self) -> bool {
        false
    }
    /// The current semaphore epoch.
    fn sem_epoch(&self) -> u64;
    /// A semaphore or fence value was written.
    fn semaphores_changed(&self);
    /// Posts an event.
    fn post(&self, event: Event);
    /// Posts `events` one after the other, with nothing of the transport
    /// in between where the host can (an injected flood overflows the
    /// event FIFO whatever the driver's buffers).
    fn post_burst(&self, events: Vec<Event>) {
        events.into_iter().for_each(|ev| self.post(ev));
    }
    /// The fault injector took the firmware down (`fw-crash`, `fw-hang`)
    /// at a packet of (`ctx`, `engine`) at `packet_va`.
    fn firmware_down(&self, _class: Class, _ctx: u32, _engine: u32, _packet_va: u64) {}
    /// Whether the running firmware's packet table has `opcode` (every
    /// packet unless the host says otherwise).
    fn packet_allowed(&self, _opcode: u32) -> bool {
        true
    }
    /// The fault injector, if faults may be injected.
    fn injector(&self) -> Option<&Injector> {
        None
    }
    /// Tests: where the engine is to panic next, taken out.
    #[cfg(test)]
    fn take_test_panic(&self) -> Option<TestPanic> {
        None
    }
}

/// Tests: a panic to provoke inside an engine (what a device bug would
/// do), to check that the engine contains it.
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TestPanic {
    /// The command processor panics before its next packet step.
    Slice,
    /// The last compute unit panics at the next dispatch step.
    ComputeUnit,
}

/// A host for tests and benchmarks: a manual clock, an attention flag, a
/// slice that never ends, and a list of posted events.
#[derive(Debug, Default)]
pub struct TestHost {
    /// Device time.
    pub now: std::sync::atomic::AtomicU64,
    /// Attention flag.
    pub attention: std::sync::atomic::AtomicBool,
    /// Semaphore epoch.
    pub epoch: std::sync::atomic::AtomicU64,
    /// Events posted.
    pub events: std::sync::Mutex<Vec<Event>>,
    /// The slice ends at this instant, if set.
    pub deadline: Option<Instant>,
}

impl Host for TestHost {
    fn now_ns(&self) -> u64 {
        self.now.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }
    fn attention(&self) -> bool {
        self.attention.load(std::sync::atomic::Ordering::Relaxed)
    }
    fn slice_over(&self) -> bool {
        self.deadline.is_some_and(|d| Instant::now() >= d)
    }
    fn sem_epoch(&self) -> u64 {
        self.epoch.load(std::sync::atomic::Ordering::Relaxed)
    }
    fn semaphores_changed(&self) {
        self.epoch
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    fn post(&self, event: Event) {
        self.events
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(event);
    }
}
