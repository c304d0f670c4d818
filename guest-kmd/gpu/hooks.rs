// SPDX-License-Identifier: GPL-2.0

//! Hooks: what a block reaches in a block above it, as a trait the upper
//! block implements on [`Gpu`](super::state::Gpu). The caller names the
//! trait only, so the order of the blocks ([module documentation](super))
//! stays one-way.
//!
//! * [`HangCheck`], implemented by [`super::reset`]: the hang check the
//!   watchdog runs, run at once by the operations whose answer depends on
//!   it (see the trait).
//! * [`UqWatch`], implemented by [`super::uqctl`]: the device's watch of
//!   user-mode queues' doorbells, which the reset ladder stops around its
//!   rungs and starts again.

use kernel::prelude::*;

/// The hang check: a hung ring recovered by the reset ladder, refused
/// doorbells rung again, lost fence interrupts reported.
///
/// The watchdog runs it periodically ([`crate::watchdog`]). The operations
/// below the reset ladder run it themselves, synchronously, where what they
/// answer depends on it: `WAIT`, each time it slept a quarter of the
/// timeout, so a waiter on a hung job gets `EIO` once its ring is reset
/// rather than sleeping until the next watchdog period; `SUBMIT`, before it
/// takes a ring, when a ring's deadline has passed since the last check
/// (before that no ring can be late), so a hung context is reset first and
/// one the check bans refuses the job; `CTX_QUERY`,
/// before it reports, so the hang and the reset status are counted in the
/// answer.
pub(crate) trait HangCheck {
    /// One check (process context; no GPU lock held). Skipped while
    /// another operation holds `Gpu::ops`: the next check looks again.
    fn hang_check(&self);
}

/// The device's watch of user-mode queues' doorbells around resets. The
/// caller holds `Gpu::ops`.
pub(crate) trait UqWatch {
    /// Stops watching the doorbell of every watched queue on `engine`
    /// (`None`: every engine) before a reset, so that no doorbell reaches a
    /// ring while the reset runs. Returns the slots suspended.
    fn suspend_queues(&self, engine: Option<usize>) -> KVec<u32>;

    /// Watches the queues `slots` suspended again, unless errored or
    /// banned: the one the reset reported in flight (`innocent`, its slot
    /// and the read pointer where it stopped) restarts there, the others
    /// keep their pointers.
    fn resume_queues(&self, slots: &[u32], innocent: Option<(u32, u32)>);

    /// Stops watching the doorbells of queues that errored or were banned
    /// (a fault or an engine error reported by an event, which cannot talk
    /// to the device itself): their rings take no more work.
    fn suspend_failed_queues(&self);
}
