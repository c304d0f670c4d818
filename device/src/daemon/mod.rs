//! The device process's control plane: one [`EventManager`] loop on the
//! thread that calls [`Daemon::run`], with a subscriber per source, each a
//! small type with its own state:
//!
//! | subscriber | watches | does |
//! |---|---|---|
//! | [`session`] | the vhost-user listener, the stop doorbell, the session's end | accepts the one frontend, hands the connection to vhost-user-backend, ends the loop when the frontend leaves or a stop is asked |
//! | [`ControlServer`] | the control socket, its connections, an idle timer | the fault-injection requests (`--control`) |
//! | [`SignalSource`] | one pipe per signal | SIGTERM/SIGINT: the first stops, a second removes the sockets and leaves at once |
//!
//! The data plane stays on vhost-user-backend's threads: its request
//! thread serves the vhost-user messages and its vring worker thread the
//! queue kicks and the engines' event doorbell (that worker owns the
//! vrings, so the doorbell is registered with its epoll loop, not here).
//!
//! The socket files are removed on every way out: with their subscribers
//! when the loop ends, or by the signal subscriber before it exits.

pub(crate) mod control;
mod pf;
mod session;
mod signals;

use std::cell::RefCell;
use std::fs;
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use event_manager::{EventManager, EventSet, MutEventSubscriber, SubscriberOps};
use vhost::vhost_user::{Error as VhostUserError, Listener};
use vhost_user_backend::VhostUserDaemon;
use vm_memory::{GuestMemoryAtomic, GuestMemoryMmap};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

pub use control::{ControlServer, IDLE_TIMEOUT, MAX_CONNECTIONS, MAX_REQUEST};
pub use pf::{PfDaemon, PfSummary};
pub use signals::SignalSource;

use crate::backend::{VgpuBackend, EVENT_WAKE};
use crate::config::DeviceConfig;
use crate::core::counters::Counters;
use crate::inject_ctl::ControlError;
use session::Session;

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// Something that is not a socket is in the way.
    #[error("{0} exists and is not a socket; refusing to replace it")]
    NotASocket(PathBuf),
    /// A stale socket could not be removed.
    #[error("cannot remove stale socket {path}: {source}")]
    RemoveStale {
        /// The socket path.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The socket could not be created.
    #[error("cannot listen on {path}: {source}")]
    Listen {
        /// The socket path.
        path: PathBuf,
        /// Why.
        source: VhostUserError,
    },
    /// The backend could not be created.
    #[error("cannot create the backend: {0}")]
    Backend(io::Error),
    /// The control socket could not be set up.
    #[error(transparent)]
    Control(#[from] ControlError),
    /// The event loop failed.
    #[error("event loop: {0}")]
    EventLoop(event_manager::Error),
    /// The vhost-user session failed.
    #[error("vhost-user session: {0}")]
    Session(String),
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitReason {
    /// The frontend closed the connection.
    Disconnected,
    /// A stop was requested (before or during the connection).
    Stopped,
}

/// The outcome of [`Daemon::run`].
#[derive(Debug, Clone, Copy)]
pub struct RunSummary {
    /// Why the daemon ended.
    pub reason: ExitReason,
    /// Whether a frontend connected.
    pub served: bool,
    /// The device's counters at the end.
    pub counters: Counters,
}

struct StopState {
    requested: AtomicBool,
    wake: EventFd,
}

/// Asks a running daemon to stop; usable from any thread.
#[derive(Clone)]
pub struct StopHandle(Arc<StopState>);

impl StopHandle {
    /// Requests the stop: a daemon still waiting for its frontend returns at
    /// once, a connected one closes the connection and returns.
    pub fn stop(&self) {
        self.0.requested.store(true, Ordering::SeqCst);
        if let Err(e) = self.0.wake.write(1) {
            log::warn!("cannot wake the daemon: {e}");
        }
    }

    /// Whether a stop was requested.
    pub fn is_requested(&self) -> bool {
        self.0.requested.load(Ordering::SeqCst)
    }
}

/// A socket file this process bound: removed only while it is still the
/// one bound (a file put there by someone else since stays).
#[derive(Debug, Clone)]
pub struct SocketFile {
    path: PathBuf,
    id: Option<(u64, u64)>,
}

fn file_id(path: &Path) -> Option<(u64, u64)> {
    fs::symlink_metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

impl SocketFile {
    /// The file just bound at `path`.
    pub fn bound(path: &Path) -> Self {
        SocketFile {
            path: path.to_owned(),
            id: file_id(path),
        }
    }

    /// The path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Removes the file if it is still the one bound.
    pub fn remove(&self) {
        if self.id.is_some() && file_id(&self.path) == self.id {
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// Removes a stale socket at `path`; anything else in the way is an error.
fn remove_stale_socket(path: &Path) -> Result<(), DaemonError> {
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => {
            log::info!("removing stale socket {}", path.display());
            fs::remove_file(path).map_err(|source| DaemonError::RemoveStale {
                path: path.to_owned(),
                source,
            })
        }
        Ok(_) => Err(DaemonError::NotASocket(path.to_owned())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(DaemonError::RemoveStale {
            path: path.to_owned(),
            source,
        }),
    }
}

/// A session that serves `backend` to the frontend `listener` accepts.
fn session_for(
    listener: Listener,
    backend: Arc<RwLock<VgpuBackend>>,
    stop: StopHandle,
) -> Result<Session, DaemonError> {
    let daemon = VhostUserDaemon::new(
        "vgpu-device".to_owned(),
        backend.clone(),
        GuestMemoryAtomic::new(GuestMemoryMmap::new()),
    )
    .map_err(|e| DaemonError::Session(e.to_string()))?;
    // Engine threads post events asynchronously; their doorbell wakes
    // the worker thread, which delivers them.
    let wake_fd = backend
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .wake_fd();
    daemon
        .get_epoll_handlers()
        .first()
        .ok_or_else(|| DaemonError::Session("no worker thread".to_owned()))?
        .register_listener(wake_fd, EventSet::IN, u64::from(EVENT_WAKE))
        .map_err(|e| DaemonError::Session(format!("cannot watch the event doorbell: {e}")))?;
    Ok(Session::new(listener, daemon, stop, backend))
}

/// Binds `socket` (replacing a stale socket file).
fn listen(socket: &Path) -> Result<Listener, DaemonError> {
    remove_stale_socket(socket)?;
    Listener::new(socket, false).map_err(|source| DaemonError::Listen {
        path: socket.to_owned(),
        source,
    })
}

impl StopHandle {
    /// A handle no stop was asked of yet.
    fn new() -> Result<StopHandle, DaemonError> {
        let wake = EventFd::new(EFD_NONBLOCK).map_err(DaemonError::Backend)?;
        Ok(StopHandle(Arc::new(StopState {
            requested: AtomicBool::new(false),
            wake,
        })))
    }
}

/// A bound, not yet running daemon.
pub struct Daemon {
    socket: PathBuf,
    listener: Listener,
    backend: Arc<RwLock<VgpuBackend>>,
    stop: StopHandle,
    control: Option<ControlServer>,
    signals: Option<SignalSource>,
}

type Subscriber = Rc<RefCell<dyn MutEventSubscriber>>;

impl Daemon {
    /// Listens on `socket` (replacing a stale socket file) for a device
    /// configured as `config`.
    pub fn bind(socket: impl AsRef<Path>, config: DeviceConfig) -> Result<Daemon, DaemonError> {
        let backend = VgpuBackend::new(config).map_err(DaemonError::Backend)?;
        Self::with_backend(socket, backend)
    }

    /// Listens on `socket` for `backend`.
    pub fn with_backend(
        socket: impl AsRef<Path>,
        backend: VgpuBackend,
    ) -> Result<Daemon, DaemonError> {
        let socket = socket.as_ref().to_owned();
        let listener = listen(&socket)?;
        Ok(Daemon {
            socket,
            listener,
            backend: Arc::new(RwLock::new(backend)),
            stop: StopHandle::new()?,
            control: None,
            signals: None,
        })
    }

    /// Serves the fault-injection control socket at `path` while the daemon
    /// runs; the socket exists from now on and is removed when the daemon
    /// ends.
    ///
    /// # Errors
    /// The socket cannot be bound.
    pub fn serve_control(&mut self, path: &Path) -> Result<(), DaemonError> {
        let gpu = self
            .backend
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .gpu();
        self.control = Some(ControlServer::bind(path, gpu)?);
        Ok(())
    }

    /// Lets `signals` stop the daemon: the first one stops it, a second
    /// one removes the sockets and exits the process at once.
    pub fn handle_signals(&mut self, signals: SignalSource) {
        self.signals = Some(signals);
    }

    /// The socket path.
    pub fn socket_path(&self) -> &Path {
        &self.socket
    }

    /// A handle that stops this daemon.
    pub fn stop_handle(&self) -> StopHandle {
        self.stop.clone()
    }

    /// The backend, for inspection while the daemon runs.
    pub fn backend(&self) -> Arc<RwLock<VgpuBackend>> {
        self.backend.clone()
    }

    /// Serves one frontend until it disconnects or a stop is requested.
    /// The socket files are removed before this returns.
    pub fn run(self) -> Result<RunSummary, DaemonError> {
        let Daemon {
            socket,
            listener,
            backend,
            stop,
            control,
            signals,
        } = self;
        let vhost_file = SocketFile::bound(&socket);
        let mut em = EventManager::<Subscriber>::new().map_err(DaemonError::EventLoop)?;
        let session = Rc::new(RefCell::new(session_for(
            listener,
            backend.clone(),
            stop.clone(),
        )?));
        em.add_subscriber(session.clone());
        let mut files = vec![vhost_file];
        let control = control.map(|c| Rc::new(RefCell::new(c)));
        if let Some(c) = &control {
            files.push(c.borrow().file().clone());
            em.add_subscriber(c.clone());
            if let Some(e) = c.borrow_mut().take_init_error() {
                return Err(DaemonError::EventLoop(e));
            }
        }
        let signals = signals.map(|mut s| {
            s.attach(stop.clone(), files);
            Rc::new(RefCell::new(s))
        });
        if let Some(s) = &signals {
            em.add_subscriber(s.clone());
            if let Some(e) = s.borrow_mut().take_init_error() {
                return Err(DaemonError::EventLoop(e));
            }
        }

        let outcome = loop {
            if let Some(outcome) = session.borrow_mut().take_outcome() {
                break outcome;
            }
            if let Err(e) = em.run() {
                break Err(DaemonError::EventLoop(e));
            }
        };
        // The sockets go with their subscribers.
        drop(em);
        drop(session);
        drop(control);
        if let Some(s) = signals.and_then(|s| Rc::try_unwrap(s).ok()) {
            s.into_inner().exit_on_second();
        }

        let counters = backend
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .counters();
        match outcome {
            Ok((reason, served)) => {
                if served {
                    log::info!("frontend gone ({reason:?}); {counters}");
                }
                Ok(RunSummary {
                    reason,
                    served,
                    counters,
                })
            }
            Err(e) => {
                log::error!("{e}; {counters}");
                Err(e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    #[test]
    fn stale_socket_is_replaced_and_removed_after_stop() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("vgpu.sock");
        let _old = UnixListener::bind(&path).unwrap();
        let d = Daemon::bind(&path, DeviceConfig::default()).unwrap();
        assert!(fs::symlink_metadata(&path).unwrap().file_type().is_socket());
        let stop = d.stop_handle();
        let t = std::thread::spawn(move || d.run());
        stop.stop();
        let summary = t.join().unwrap().unwrap();
        assert_eq!(summary.reason, ExitReason::Stopped);
        assert!(!summary.served);
        assert!(!path.exists(), "socket file left behind");
    }

    #[test]
    fn refuses_to_replace_a_regular_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("not-a-socket");
        fs::write(&path, b"keep me").unwrap();
        match Daemon::bind(&path, DeviceConfig::default()) {
            Err(DaemonError::NotASocket(p)) => assert_eq!(p, path),
            Err(e) => panic!("unexpected error {e}"),
            Ok(_) => panic!("bound over a regular file"),
        }
        assert_eq!(fs::read(&path).unwrap(), b"keep me");
    }
}
