// SPDX-License-Identifier: GPL-2.0

//! The hang watchdog: a periodic timer that runs the hang check even when
//! nobody waits, submits or queries.
//!
//! An hrtimer fires every [`period_ms`] (a tenth of `job_timeout_ms`, at
//! least 20 ms) in interrupt context and queues a work item on the system_long
//! workqueue; the work item runs [`Vgpu::hang_check`] in process context,
//! where it may sleep on control commands and run the reset ladder. A hang is
//! therefore detected at most `job_timeout_ms + period` after its ring last
//! made progress.
//!
//! Stopping (at unbind, before the device is reset) is ordered so nothing
//! runs afterwards: set `stopping`, cancel the timer (waits for a running
//! callback; a stopping callback does not re-arm or queue), then
//! `flush_work` (waits for a queued or running check, which sees `stopping`
//! and returns). The 7.2 workqueue abstraction has no flush, so that one
//! call goes through the C binding.

use kernel::{
    bindings,
    impl_has_hr_timer,
    new_work,
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
        HasWork,
        Work,
        WorkItem, //
    },
};

use crate::device::Vgpu;

/// Watchdog period for the current `job_timeout_ms`.
pub(crate) fn period_ms() -> u32 {
    (crate::param_job_timeout_ms() / 10).max(20)
}

/// The timer and the work item it queues.
#[pin_data]
pub(crate) struct Watchdog {
    #[pin]
    timer: HrTimer<Self>,
    #[pin]
    work: Work<Self>,
    vgpu: Arc<Vgpu>,
    period: Delta,
    /// Set once stopping starts; never cleared.
    stopping: Atomic<bool>,
    /// Timer expiries.
    ticks: Atomic<u64>,
    /// Hang checks run by the work item.
    checks: Atomic<u64>,
}

impl_has_hr_timer! {
    impl HasHrTimer<Self> for Watchdog {
        mode: RelativeMode<Monotonic>, field: self.timer
    }
}

impl_has_work! {
    impl HasWork<Self> for Watchdog { self.work }
}

impl HrTimerCallback for Watchdog {
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

impl WorkItem for Watchdog {
    type Pointer = Arc<Self>;

    fn run(this: Arc<Self>) {
        if this.stopping.load(Relaxed) {
            return;
        }
        this.checks.fetch_add(1, Relaxed);
        this.vgpu.hang_check();
    }
}

/// A running watchdog; [`WatchdogHandle::stop`] (or drop) ends it.
pub(crate) struct WatchdogHandle {
    dog: Arc<Watchdog>,
    timer: Option<ArcHrTimerHandle<Watchdog>>,
}

impl WatchdogHandle {
    /// Starts the watchdog for `vgpu`.
    pub(crate) fn start(vgpu: Arc<Vgpu>) -> Result<Self> {
        let period = Delta::from_millis(i64::from(period_ms()));
        let dog = Arc::pin_init(
            pin_init!(Watchdog {
                timer <- HrTimer::new(),
                work <- new_work!("vgpu::watchdog"),
                vgpu,
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
        let ptr = Arc::as_ptr(&self.dog).cast_mut();
        // SAFETY: `ptr` points to the live `Watchdog` (we hold an `Arc`), so
        // `raw_get_work` yields its initialised `Work` field.
        let work = unsafe { <Watchdog as HasWork<Watchdog>>::raw_get_work(ptr) };
        // SAFETY: `Work::raw_get` needs a pointer to a valid `Work`, which
        // `work` is; `flush_work` only waits on the initialised
        // `work_struct`, which stays alive because we hold an `Arc` to its
        // container. Any queued instance holds its own `Arc` and releases
        // it when it returns, before `flush_work` does.
        unsafe { bindings::flush_work(Work::raw_get(work)) };
    }
}

impl Drop for WatchdogHandle {
    fn drop(&mut self) {
        self.stop();
    }
}
