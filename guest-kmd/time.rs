// SPDX-License-Identifier: GPL-2.0

//! Time helpers shared by every block: durations in nanoseconds, jiffies
//! for sleeping waits.

use kernel::time::{
    msecs_to_jiffies,
    Instant,
    Jiffies,
    Monotonic, //
};

/// Converts a duration in nanoseconds to jiffies, rounding up.
pub(crate) fn ns_to_jiffies(ns: u64) -> Jiffies {
    let ms = ns.div_ceil(1_000_000);
    msecs_to_jiffies(u32::try_from(ms).unwrap_or(u32::MAX))
}

/// Nanoseconds elapsed since `start` (0 if the clock went backwards).
pub(crate) fn elapsed_ns(start: &Instant<Monotonic>) -> u64 {
    u64::try_from(start.elapsed().as_nanos()).unwrap_or(0)
}
