//! Runs a vCPU on its own thread with a bounded time: at the deadline the
//! thread is sent a real-time signal (a no-op handler), which makes a
//! blocking `KVM_RUN` return `EINTR`; the signal is repeated until the
//! thread answers, so one that arrives just before `KVM_RUN` is entered is
//! not lost. A vCPU that never exits is thus stopped within a few
//! milliseconds of the deadline.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Once};
use std::thread;
use std::time::{Duration, Instant};

use vmm_sys_util::signal::{register_signal_handler, Killable, SIGRTMIN};

use crate::decide::{on_exit, Exit, Kind, Progress, Step, Verdict};

/// Something that runs until its next exit: a KVM vCPU, or a stand-in in
/// tests.
pub trait RunVcpu: Send + 'static {
    /// Enters the guest and returns why it left.
    fn run(&mut self) -> Exit;
}

/// What a bounded run produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunOutcome {
    /// The answer.
    pub verdict: Verdict,
    /// The guest's last progress code.
    pub progress: Progress,
    /// Exits taken (each `KVM_RUN` return).
    pub exits: u32,
}

/// How long after the deadline a thread that ignores the signal is waited
/// for before the run is given up.
const GIVE_UP_AFTER: Duration = Duration::from_secs(1);
/// Interval between repeated signals.
const KICK_EVERY: Duration = Duration::from_millis(5);

/// The signal that interrupts `KVM_RUN`.
fn kick_signal() -> i32 {
    SIGRTMIN()
}

extern "C" fn on_kick(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // Nothing: the signal exists to make the blocking system call return.
}

fn install_handler() -> Result<(), Verdict> {
    static ONCE: Once = Once::new();
    let mut result = Ok(());
    ONCE.call_once(|| {
        if let Err(e) = register_signal_handler(kick_signal(), on_kick) {
            result = Err(Verdict::no(
                Kind::Setup,
                format!("cannot install the timeout's signal handler: {e}"),
            ));
        }
    });
    result
}

/// Runs `vcpu` until [`on_exit`] decides, or `timeout` passes.
pub fn run_bounded<V: RunVcpu>(mut vcpu: V, timeout: Duration) -> RunOutcome {
    if let Err(verdict) = install_handler() {
        return RunOutcome {
            verdict,
            progress: Progress::default(),
            exits: 0,
        };
    }
    let deadline_passed = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&deadline_passed);
    let (tx, rx) = mpsc::channel();
    let spawned = thread::Builder::new()
        .name("probe-vcpu".into())
        .spawn(move || {
            let mut at = Progress::default();
            let mut exits = 0u32;
            let verdict = loop {
                let exit = if flag.load(Ordering::SeqCst) {
                    // The deadline passed while the guest was outside
                    // KVM_RUN: do not enter it again.
                    Exit::Interrupted
                } else {
                    exits = exits.saturating_add(1);
                    vcpu.run()
                };
                match on_exit(at, &exit, flag.load(Ordering::SeqCst)) {
                    Step::Continue(p) => at = p,
                    Step::Done(v) => break v,
                }
            };
            let _ = tx.send(RunOutcome {
                verdict,
                progress: at,
                exits,
            });
        });
    let handle = match spawned {
        Ok(h) => h,
        Err(e) => {
            return RunOutcome {
                verdict: Verdict::no(Kind::Setup, format!("cannot start the vCPU thread: {e}")),
                progress: Progress::default(),
                exits: 0,
            }
        }
    };
    if let Ok(r) = rx.recv_timeout(timeout) {
        let _ = handle.join();
        return r;
    }
    deadline_passed.store(true, Ordering::SeqCst);
    let stop = Instant::now() + GIVE_UP_AFTER;
    while Instant::now() < stop {
        // The thread is alive until it sends, so its handle is valid.
        let _ = handle.kill(kick_signal());
        if let Ok(r) = rx.recv_timeout(KICK_EVERY) {
            let _ = handle.join();
            return r;
        }
    }
    // The vCPU ignores signals: leave its thread (and the VM it owns)
    // behind; the process is about to exit.
    RunOutcome {
        verdict: Verdict::no(
            Kind::Timeout,
            format!(
                "the probe guest did not finish in {} ms and its vCPU did not stop",
                timeout.as_millis()
            ),
        ),
        progress: Progress::default(),
        exits: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guest::{code, PROGRESS_PORT};

    /// A vCPU that blocks in `pause()` like a guest spinning in `KVM_RUN`:
    /// only a signal brings it back, with `EINTR`.
    struct NeverExits {
        progress_sent: bool,
    }

    impl RunVcpu for NeverExits {
        fn run(&mut self) -> Exit {
            if !self.progress_sent {
                self.progress_sent = true;
                return Exit::IoOut {
                    port: PROGRESS_PORT,
                    data: vec![code::REAL_MODE],
                };
            }
            // SAFETY: pause() has no arguments and only returns after a
            // signal handler ran.
            unsafe { libc::pause() };
            Exit::RunError {
                errno: std::io::Error::last_os_error().raw_os_error().unwrap_or(0),
            }
        }
    }

    /// A vCPU whose guest runs the whole walk.
    struct Completes(u8);

    impl RunVcpu for Completes {
        fn run(&mut self) -> Exit {
            self.0 = if self.0 == code::XRSTOR {
                code::DONE
            } else {
                self.0 + 1
            };
            Exit::IoOut {
                port: PROGRESS_PORT,
                data: vec![self.0],
            }
        }
    }

    #[test]
    fn a_vcpu_that_never_exits_is_stopped_by_the_timeout() {
        let t0 = Instant::now();
        let r = run_bounded(
            NeverExits {
                progress_sent: false,
            },
            Duration::from_millis(100),
        );
        let took = t0.elapsed();
        assert_eq!(r.verdict.kind, Kind::Timeout, "{:?}", r.verdict);
        assert!(!r.verdict.usable);
        assert_eq!(r.progress, Progress(code::REAL_MODE));
        assert!(
            r.verdict
                .reason
                .contains("stuck at the switch to protected mode"),
            "{}",
            r.verdict.reason
        );
        assert!(took >= Duration::from_millis(100), "{took:?}");
        // Bounded: well before the give-up time.
        assert!(took < Duration::from_millis(600), "{took:?}");
    }

    #[test]
    fn a_vcpu_that_finishes_is_not_waited_for() {
        let t0 = Instant::now();
        let r = run_bounded(Completes(0), Duration::from_secs(5));
        assert!(r.verdict.usable, "{:?}", r.verdict);
        assert_eq!(r.exits, u32::from(code::XRSTOR) + 1);
        assert!(t0.elapsed() < Duration::from_secs(1));
    }
}
