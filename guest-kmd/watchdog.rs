// SPDX-License-Identifier: GPL-2.0

//! The watchdog: a periodic timer that runs a check in process context,
//! even when nobody waits, submits or queries. The driver uses it for the
//! hang check.
//!
//! A leaf block: it calls back through [`Periodic`] and knows nothing else.
//! An hrtimer fires every period (for the hang check a tenth of
//! `job_timeout_ms`, at least 20 ms: `gpu::reset::check_period_ms`) in interrupt context and queues a
//! work item on the system_long workqueue; the work item calls
//! [`Periodic::tick`] in process context, where it may sleep on control
//! commands and run the reset ladder. A check says when the next one is
//! due (the earliest ring deadline, [`Periodic::tick`]'s return); the timer
//! wakes for that time when it comes before the next period, so a hang is
//! detected just after its ring has gone `job_timeout_ms` without progress
//! rather than up to a period later.
//!
//! Stopping (at unbind, before the device is reset) is ordered so nothing
//! runs afterwards: set `stopping`, cancel the timer (waits for a running
//! callback; a stopping callback does not re-arm or queue), then
//! `flush_work` (waits for a queued or running check, which sees `stopping`
//! and returns; the 7.2 workqueue abstraction has no flush:
//! [`crate::ffi::flush_work`]).

use kernel::{
    impl_has_hr_timer, new_work,
    prelude::*,
    sync::{
        atomic::{
            ordering::Relaxed,
            Atomic, //
        },
        Arc,
        ArcBorrow, //
    },
    time::{
        hrtimer::{
            ArcHrTimerHandle,
            HrTimer,
            HrTimerCallback,
            HrTimerCallbackContext,
            HrTimerPointer,
            HrTimerRestart,
            RelativeMode, //
        },
        Delta,
        Monotonic, //
    },
    workqueue::{
        self,
        impl_has_work,
        Work,
        WorkItem, //
    },
};

/// What the watchdog runs.
pub(crate) trait Periodic: Send + Sync + 'static {
    /// One check, in process context (may sleep). Returns when the next
    /// check is due ([`crate::ffi::monotonic_ns`] time), if it is due
    /// before the next period.
    fn tick(&self) -> Option<u64>;
}

/// The timer and the work item it queues.
#[pin_data]
pub(crate) struct Watchdog<T: Periodic> {
    #[pin]
    timer: HrTimer<Self>,
    #[pin]
    work: Work<Self>,
    target: Arc<T>,
    period: Delta,
    /// Set once stopping starts; never cleared.
    stopping: Atomic<bool>,
    /// Timer expiries.
    ticks: Atomic<u64>,
    /// Hang checks run by the work item.
    checks: Atomic<u64>,
    /// When the last check said the next one is due (0: at the period).
    due_ns: Atomic<u64>,
    /// Timer expiries set early, for a check's due time.
    early: Atomic<u64>,
}

impl_has_hr_timer! {
    impl{T: Periodic} HasHrTimer<Watchdog<T>> for Watchdog<T> {
        mode: RelativeMode<Monotonic>, field: self.timer
    }
}

impl_has_work! {
    impl{T: Periodic} HasWork<Watchdog<T>> for Watchdog<T> { self.work }
}

impl<T: Periodic> HrTimerCallback for Watchdog<T> {
    type Pointer<'a> = Arc<Self>;

    fn run(this: ArcBorrow<'_, Self>, mut ctx: HrTimerCallbackContext<'_, Self>) -> HrTimerRestart {
        if this.stopping.load(Relaxed) {
            return HrTimerRestart::NoRestart;
        }
        this.ticks.fetch_add(1, Relaxed);
        // Already queued (a check still running or pending): skip this tick.
        let _ = workqueue::system_long().enqueue(Arc::<Self>::from(this));
        // The next expiry: the period, or sooner when a check is due
        // before it (a due time already past is the check just queued).
        let now = crate::ffi::monotonic_ns();
        let period_ns = u64::try_from(this.period.as_nanos()).unwrap_or(u64::MAX);
        let left = this.due_ns.load(Relaxed).saturating_sub(now);
        let next = if left > 0 && left < period_ns {
            this.early.fetch_add(1, Relaxed);
            Delta::from_nanos(i64::try_from(left).unwrap_or(i64::MAX))
        } else {
            this.period
        };
        ctx.forward_now(next);
        HrTimerRestart::Restart
    }
}

impl<T: Periodic> WorkItem for Watchdog<T> {
    type Pointer = Arc<Self>;

    fn run(this: Arc<Self>) {
        if this.stopping.load(Relaxed) {
            return;
        }
        this.checks.fetch_add(1, Relaxed);
        let due = this.target.tick();
        this.due_ns.store(due.unwrap_or(0), Relaxed);
    }
}

/// A running watchdog; [`WatchdogHandle::stop`] (or drop) ends it.
pub(crate) struct WatchdogHandle<T: Periodic> {
    dog: Arc<Watchdog<T>>,
    timer: Option<ArcHrTimerHandle<Watchdog<T>>>,
}

impl<T: Periodic> WatchdogHandle<T> {
    /// Starts a watchdog calling `target` every `period_ms`.
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn start(target: Arc<T>, period_ms: u32) -> Result<Self> {
        let period = Delta::from_millis(i64::from(period_ms));
        let dog = Arc::pin_init(
            pin_init!(Watchdog {
                timer <- HrTimer::new(),
                work <- new_work!("vgpu::watchdog"),
                target,
                period,
                stopping: Atomic::new(false),
                ticks: Atomic::new(0),
                checks: Atomic::new(0),
                due_ns: Atomic::new(0),
                early: Atomic::new(0),
            }),
            GFP_KERNEL,
        )?;
        let timer = Some(dog.clone().start(period));
        Ok(WatchdogHandle { dog, timer })
    }

    /// (timer expiries, of them set early for a due check, hang checks
    /// run, period in ms) for debugfs.
    pub(crate) fn counts(&self) -> (u64, u64, u64, i64) {
        (
            self.dog.ticks.load(Relaxed),
            self.dog.early.load(Relaxed),
            self.dog.checks.load(Relaxed),
            self.dog.period.as_millis(),
        )
    }

    /// Stops the timer and waits until no hang check runs or is queued.
    /// Must not be called from the watchdog's own work item.
    pub(crate) fn stop(&mut self) {
        self.dog.stopping.store(true, Relaxed);
        // Dropping the handle cancels the timer and waits for a running
        // callback; a callback that runs after `stopping` neither re-arms
        // nor queues.
        drop(self.timer.take());
        crate::ffi::flush_work(&self.dog);
    }
}

impl<T: Periodic> Drop for WatchdogHandle<T> {
    fn drop(&mut self) {
        self.stop();
    }
}
