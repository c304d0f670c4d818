//! The vhost-user session as a subscriber of the control-plane loop: it
//! waits for the one frontend on the listening socket, hands the accepted
//! connection to vhost-user-backend (whose request thread and vring worker
//! thread then serve it), and reports when the session ends.
//!
//! ```text
//!   Listening ──accept──▶ Serving ──session thread ended──▶ Ended
//!       │                    │ stop: shut the connection down
//!       └──stop──────────────┴──────────────────────────────▶ Ended
//! ```
//!
//! vhost-user-backend reports the end of a session only through the
//! blocking `VhostUserDaemon::wait`, so one small thread waits there and
//! rings an eventfd that this subscriber watches.

use std::os::unix::io::AsRawFd;
use std::sync::{Arc, PoisonError, RwLock};
use std::thread::JoinHandle;

use event_manager::{EventOps, EventSet, Events, MutEventSubscriber};
use vhost::vhost_user::{Error as VhostUserError, Listener};
use vhost_user_backend::{Error as DaemonLibError, ShutdownHandle, VhostUserDaemon};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

use super::{DaemonError, ExitReason, StopHandle};
use crate::backend::VgpuBackend;

type Backend = Arc<RwLock<VgpuBackend>>;

/// How the session ended: why, and whether a frontend was served.
pub(super) type Outcome = Result<(ExitReason, bool), DaemonError>;

enum State {
    /// Waiting for the frontend.
    Listening {
        listener: Listener,
        daemon: VhostUserDaemon<Backend>,
    },
    /// vhost-user-backend's threads serve the frontend. The listener is
    /// kept so that the socket file lives as long as the session, as a
    /// frontend expects, and watched: a second frontend is accepted and
    /// closed at once with a log line (one device serves one VM), instead
    /// of waiting unanswered in the backlog.
    Serving {
        listener: Listener,
        shutdown: Option<ShutdownHandle>,
        ended: EventFd,
        waiter: JoinHandle<Result<(), DaemonLibError>>,
    },
    /// Over; the listener is gone (and with it the socket file).
    Ended,
}

/// The vhost-user listener and session.
pub(super) struct Session {
    state: State,
    stop: StopHandle,
    backend: Backend,
    outcome: Option<Outcome>,
}

impl Session {
    pub(super) fn new(
        listener: Listener,
        daemon: VhostUserDaemon<Backend>,
        stop: StopHandle,
        backend: Backend,
    ) -> Self {
        Session {
            state: State::Listening { listener, daemon },
            stop,
            backend,
            outcome: None,
        }
    }

    /// Whether a frontend is being served.
    pub(super) fn serving(&self) -> bool {
        matches!(self.state, State::Serving { .. })
    }

    /// The outcome once the session has ended (taken once).
    pub(super) fn take_outcome(&mut self) -> Option<Outcome> {
        self.outcome.take()
    }

    fn end(&mut self, outcome: Outcome) {
        self.state = State::Ended;
        self.outcome = Some(outcome);
    }

    fn on_stop(&mut self, ops: &mut EventOps) {
        let _ = self.stop.0.wake.read();
        if !self.stop.is_requested() {
            return;
        }
        match &self.state {
            State::Listening { listener, .. } => {
                let _ = ops.remove(Events::new(listener, EventSet::IN));
                log::info!("stop requested before a frontend connected");
                self.end(Ok((ExitReason::Stopped, false)));
            }
            State::Serving { shutdown, .. } => {
                // The request thread sees its connection close and ends;
                // `ended` then fires.
                if let Some(h) = shutdown {
                    h.shutdown();
                }
            }
            State::Ended => {}
        }
    }

    fn on_connection(&mut self, ops: &mut EventOps) {
        let State::Listening {
            mut listener,
            mut daemon,
        } = std::mem::replace(&mut self.state, State::Ended)
        else {
            return;
        };
        if let Err(e) = daemon.start(&mut listener) {
            let _ = ops.remove(Events::new(&listener, EventSet::IN));
            self.end(Err(DaemonError::Session(e.to_string())));
            return;
        }
        log::info!("frontend connected");
        let shutdown = daemon.shutdown_handle();
        let started = EventFd::new(EFD_NONBLOCK).and_then(|ended| {
            let ring = ended.try_clone()?;
            let waiter = std::thread::Builder::new()
                .name("vgpu-session".to_owned())
                .spawn(move || {
                    let result = daemon.wait();
                    if let Err(e) = ring.write(1) {
                        log::error!("cannot report the end of the session: {e}");
                    }
                    result
                })?;
            Ok((ended, waiter))
        });
        let (ended, waiter) = match started {
            Ok(v) => v,
            Err(e) => {
                if let Some(h) = &shutdown {
                    h.shutdown();
                }
                self.end(Err(DaemonError::Session(format!(
                    "cannot watch the session: {e}"
                ))));
                return;
            }
        };
        if let Err(e) = ops.add(Events::new(&ended, EventSet::IN)) {
            if let Some(h) = &shutdown {
                h.shutdown();
            }
            self.end(Err(DaemonError::EventLoop(e)));
            return;
        }
        if self.stop.is_requested() {
            if let Some(h) = &shutdown {
                h.shutdown();
            }
        }
        self.state = State::Serving {
            listener,
            shutdown,
            ended,
            waiter,
        };
    }

    fn on_session_end(&mut self, ops: &mut EventOps) {
        let State::Serving {
            ended,
            waiter,
            listener,
            ..
        } = std::mem::replace(&mut self.state, State::Ended)
        else {
            return;
        };
        let _ = ops.remove(Events::new(&ended, EventSet::IN));
        let _ = ops.remove(Events::new(&listener, EventSet::IN));
        let result = waiter.join();
        // The vring worker thread's loop ends too.
        self.backend
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .notify_exit();
        let reason = if self.stop.is_requested() {
            ExitReason::Stopped
        } else {
            ExitReason::Disconnected
        };
        self.end(match result {
            Ok(
                Ok(())
                | Err(DaemonLibError::HandleRequest(
                    VhostUserError::Disconnected | VhostUserError::PartialMessage,
                )),
            ) => Ok((reason, true)),
            Ok(Err(e)) => Err(DaemonError::Session(e.to_string())),
            Err(_) => Err(DaemonError::Session(
                "the session thread panicked".to_owned(),
            )),
        });
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // Only if the loop itself failed: leave no session behind.
        if let State::Serving {
            shutdown: Some(h), ..
        } = &self.state
        {
            h.shutdown();
        }
    }
}

impl MutEventSubscriber for Session {
    fn init(&mut self, ops: &mut EventOps) {
        let State::Listening { listener, .. } = &self.state else {
            return;
        };
        let registered = ops
            .add(Events::new(listener, EventSet::IN))
            .and_then(|()| ops.add(Events::new(&self.stop.0.wake, EventSet::IN)));
        if let Err(e) = registered {
            self.end(Err(DaemonError::EventLoop(e)));
        }
    }

    fn process(&mut self, events: Events, ops: &mut EventOps) {
        let fd = events.fd();
        if fd == self.stop.0.wake.as_raw_fd() {
            self.on_stop(ops);
            return;
        }
        match &self.state {
            State::Listening { listener, .. } if fd == listener.as_raw_fd() => {
                self.on_connection(ops);
            }
            State::Serving { ended, .. } if fd == ended.as_raw_fd() => self.on_session_end(ops),
            State::Serving { listener, .. } if fd == listener.as_raw_fd() => {
                // A second frontend: closed at once (its QEMU reports the
                // backend disconnected).
                match listener.accept() {
                    Ok(Some(conn)) => {
                        drop(conn);
                        log::warn!("a second frontend connected while one is served: refused (one VM per device)");
                    }
                    Ok(None) => {}
                    Err(e) => log::warn!("second frontend: {e}"),
                }
            }
            _ => log::warn!("session: event on an unexpected fd {fd}"),
        }
    }
}
