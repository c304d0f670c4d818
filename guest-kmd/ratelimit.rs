// SPDX-License-Identifier: GPL-2.0

//! Rate-limited kernel messages, for everything a guest program can
//! trigger (the Rust `dev_*!` macros have no rate-limited form).
//!
//! Each call site of [`dev_warn_ratelimited!`] (and its `info`/`err`
//! siblings, [`pr_warn_ratelimited!`], [`pr_err_ratelimited!`]) owns a
//! [`RateLimit`]: at most [`BURST`] messages per [`INTERVAL_NS`] window,
//! like the kernel's `DEFAULT_RATELIMIT_*`; the first message of the next
//! window says how many were suppressed.
//!
//! What stays plain: messages of probe and unbind (once per bind), and
//! those a state change prints once (the device declared broken or lost,
//! wedged by too many retired pages, a page retired). The event queue's
//! warnings (`transport/events.rs`) share one budget per device instead,
//! with their suppressed count in debugfs `status`.

use crate::ffi::monotonic_ns;
use kernel::sync::atomic::{
    Atomic,
    Relaxed, //
};

/// Messages per window and call site.
pub(crate) const BURST: u32 = 10;
/// The window: 5 s.
pub(crate) const INTERVAL_NS: u64 = 5_000_000_000;

/// The state of one call site.
pub(crate) struct RateLimit {
    window_start: Atomic<u64>,
    printed: Atomic<u32>,
    suppressed: Atomic<u32>,
}

impl RateLimit {
    /// A limiter whose first window opens at its first message.
    pub(crate) const fn new() -> RateLimit {
        RateLimit {
            window_start: Atomic::new(0),
            printed: Atomic::new(0),
            suppressed: Atomic::new(0),
        }
    }

    /// Whether a message may be printed now: `Some(n)` with the number of
    /// messages suppressed since the last one printed, `None` to drop it.
    /// Concurrent callers may let a message or two more through; that is
    /// all the precision a log limit needs.
    pub(crate) fn allow(&self) -> Option<u32> {
        let now = monotonic_ns();
        let start = self.window_start.load(Relaxed);
        if start == 0 || now.saturating_sub(start) >= INTERVAL_NS {
            self.window_start.store(now.max(1), Relaxed);
            self.printed.store(1, Relaxed);
            return Some(self.suppressed.xchg(0, Relaxed));
        }
        if self.printed.fetch_add(1, Relaxed) < BURST {
            Some(self.suppressed.xchg(0, Relaxed))
        } else {
            self.suppressed.add(1, Relaxed);
            None
        }
    }
}

/// `dev_warn!`, at most [`BURST`] per 5 s from this call site.
#[macro_export]
macro_rules! dev_warn_ratelimited {
    ($dev:expr, $($arg:tt)*) => {
        $crate::ratelimited!(dev_warn, $dev, $($arg)*)
    };
}

/// `dev_info!`, at most [`BURST`] per 5 s from this call site.
#[macro_export]
macro_rules! dev_info_ratelimited {
    ($dev:expr, $($arg:tt)*) => {
        $crate::ratelimited!(dev_info, $dev, $($arg)*)
    };
}

/// `dev_err!`, at most [`BURST`] per 5 s from this call site.
#[macro_export]
macro_rules! dev_err_ratelimited {
    ($dev:expr, $($arg:tt)*) => {
        $crate::ratelimited!(dev_err, $dev, $($arg)*)
    };
}

/// `pr_err!`, at most [`BURST`] per 5 s from this call site.
#[macro_export]
macro_rules! pr_err_ratelimited {
    ($($arg:tt)*) => {{
        static LIMIT: $crate::ratelimit::RateLimit = $crate::ratelimit::RateLimit::new();
        if let Some(suppressed) = LIMIT.allow() {
            if suppressed > 0 {
                kernel::pr_err!("vgpu: {} similar messages suppressed\n", suppressed);
            }
            kernel::pr_err!($($arg)*);
        }
    }};
}

/// `pr_warn!`, at most [`BURST`] per 5 s from this call site.
#[macro_export]
macro_rules! pr_warn_ratelimited {
    ($($arg:tt)*) => {{
        static LIMIT: $crate::ratelimit::RateLimit = $crate::ratelimit::RateLimit::new();
        if let Some(suppressed) = LIMIT.allow() {
            if suppressed > 0 {
                kernel::pr_warn!("vgpu: {} similar messages suppressed\n", suppressed);
            }
            kernel::pr_warn!($($arg)*);
        }
    }};
}

/// The common body of the `dev_*_ratelimited!` macros.
#[macro_export]
#[doc(hidden)]
macro_rules! ratelimited {
    ($mac:ident, $dev:expr, $($arg:tt)*) => {{
        static LIMIT: $crate::ratelimit::RateLimit = $crate::ratelimit::RateLimit::new();
        if let Some(suppressed) = LIMIT.allow() {
            if suppressed > 0 {
                kernel::$mac!($dev, "{} similar messages suppressed\n", suppressed);
            }
            kernel::$mac!($dev, $($arg)*);
        }
    }};
}
