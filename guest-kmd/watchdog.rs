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
//! commands and run the reset ladder. A hang is therefore detected at most
//! `job_timeout_ms + period` after its ring last made progress.
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
    /// One check, in process context (may sleep).
    fn tick(&self);
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
        ctx.forward_now(this.period);
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
        this.target.tick();
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
            }),
            GFP_KERNEL,
        )?;
        let timer = Some(dog.clone().start(period));
        Ok(WatchdogHandle { dog, timer })
    }

    /// (timer expiries, hang checks run, period in ms) for debugfs.
    pub(crate) fn counts(&self) -> (u64, u64, i64) {
        (
            self.dog.ticks.load(Relaxed),
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
