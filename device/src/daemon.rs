//! The daemon: owns the listening socket, serves exactly one frontend
//! connection, and ends when the frontend disconnects or a [`StopHandle`]
//! asks it to. The socket file is removed when the daemon ends.

use std::fs;
use std::io;
use std::os::unix::fs::FileTypeExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use vhost::vhost_user::{Error as VhostUserError, Listener};
use vhost_user_backend::{Error as DaemonLibError, ShutdownHandle, VhostUserDaemon};
use vm_memory::{GuestMemoryAtomic, GuestMemoryMmap};
use vmm_sys_util::epoll::{ControlOperation, Epoll, EpollEvent, EventSet};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

use crate::backend::{VgpuBackend, EVENT_WAKE};
use crate::config::DeviceConfig;
use crate::core::counters::Counters;

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
    /// Waiting for a connection failed.
    #[error("waiting for a connection: {0}")]
    Wait(io::Error),
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
    connection: Mutex<Option<ShutdownHandle>>,
}

/// Asks a running daemon to stop; usable from any thread (for example a
/// signal handling thread).
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
        let conn = self
            .0
            .connection
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(handle) = conn.as_ref() {
            handle.shutdown();
        }
    }

    /// Whether a stop was requested.
    pub fn is_requested(&self) -> bool {
        self.0.requested.load(Ordering::SeqCst)
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

/// A bound, not yet running daemon.
pub struct Daemon {
    socket: PathBuf,
    listener: Listener,
    backend: Arc<RwLock<VgpuBackend>>,
    stop: StopHandle,
}

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
        remove_stale_socket(&socket)?;
        let listener = Listener::new(&socket, false).map_err(|source| DaemonError::Listen {
            path: socket.clone(),
            source,
        })?;
        let wake = EventFd::new(EFD_NONBLOCK).map_err(DaemonError::Backend)?;
        Ok(Daemon {
            socket,
            listener,
            backend: Arc::new(RwLock::new(backend)),
            stop: StopHandle(Arc::new(StopState {
                requested: AtomicBool::new(false),
                wake,
                connection: Mutex::new(None),
            })),
        })
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

    fn counters(&self) -> Counters {
        self.backend
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .counters()
    }

    /// Blocks until a frontend connects or a stop is requested; returns
    /// whether a connection is pending.
    fn wait_for_frontend(&self) -> Result<bool, DaemonError> {
        const LISTENER: u64 = 0;
        const WAKE: u64 = 1;
        let epoll = Epoll::new().map_err(DaemonError::Wait)?;
        epoll
            .ctl(
                ControlOperation::Add,
                self.listener.as_raw_fd(),
                EpollEvent::new(EventSet::IN, LISTENER),
            )
            .map_err(DaemonError::Wait)?;
        epoll
            .ctl(
                ControlOperation::Add,
                self.stop.0.wake.as_raw_fd(),
                EpollEvent::new(EventSet::IN, WAKE),
            )
            .map_err(DaemonError::Wait)?;
        let mut events = [EpollEvent::default(); 2];
        loop {
            if self.stop.is_requested() {
                return Ok(false);
            }
            match epoll.wait(-1, &mut events) {
                Ok(n) => {
                    let ready = events.get(..n).unwrap_or(&[]);
                    if ready.iter().any(|e| e.data() == WAKE) || self.stop.is_requested() {
                        return Ok(false);
                    }
                    if ready.iter().any(|e| e.data() == LISTENER) {
                        return Ok(true);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(DaemonError::Wait(e)),
            }
        }
    }

    /// Serves one frontend until it disconnects or a stop is requested.
    /// The socket file is removed before this returns.
    pub fn run(mut self) -> Result<RunSummary, DaemonError> {
        let mut daemon = VhostUserDaemon::new(
            "vgpu-device".to_owned(),
            self.backend.clone(),
            GuestMemoryAtomic::new(GuestMemoryMmap::new()),
        )
        .map_err(|e| DaemonError::Session(e.to_string()))?;
        // Engine threads post events asynchronously; their doorbell wakes
        // the worker thread, which delivers them.
        let wake_fd = self
            .backend
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .wake_fd();
        let handlers = daemon.get_epoll_handlers();
        let handler = handlers
            .first()
            .ok_or_else(|| DaemonError::Session("no worker thread".to_owned()))?;
        handler
            .register_listener(wake_fd, EventSet::IN, u64::from(EVENT_WAKE))
            .map_err(|e| DaemonError::Session(format!("cannot watch the event doorbell: {e}")))?;

        if !self.wait_for_frontend()? {
            log::info!("stop requested before a frontend connected");
            return Ok(RunSummary {
                reason: ExitReason::Stopped,
                served: false,
                counters: self.counters(),
            });
        }
        daemon
            .start(&mut self.listener)
            .map_err(|e| DaemonError::Session(e.to_string()))?;
        log::info!("frontend connected");
        {
            let mut conn = self
                .stop
                .0
                .connection
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            *conn = daemon.shutdown_handle();
            if self.stop.is_requested() {
                if let Some(h) = conn.as_ref() {
                    h.shutdown();
                }
            }
        }

        let result = daemon.wait();
        self.stop
            .0
            .connection
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        self.backend
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .notify_exit();

        let reason = if self.stop.is_requested() {
            ExitReason::Stopped
        } else {
            ExitReason::Disconnected
        };
        let counters = self.counters();
        match result {
            Ok(())
            | Err(DaemonLibError::HandleRequest(
                VhostUserError::Disconnected | VhostUserError::PartialMessage,
            )) => {
                log::info!("frontend gone ({reason:?}); {counters}");
                Ok(RunSummary {
                    reason,
                    served: true,
                    counters,
                })
            }
            Err(e) => {
                log::error!("vhost-user session failed: {e}; {counters}");
                Err(DaemonError::Session(e.to_string()))
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
