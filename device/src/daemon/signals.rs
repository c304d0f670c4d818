//! SIGTERM and SIGINT as events of the control-plane loop: signal-hook's
//! handler writes one byte into a socket pair per signal, and the loop
//! reads the other end. The first signal stops the device through its
//! normal exit path; a second one removes the sockets and leaves at once.
//!
//! Installed before any socket exists, so that a signal from then on is
//! never lost: it waits in its pipe until the loop runs.

use std::io::{self, Read};
use std::os::raw::c_int;
use std::os::unix::io::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use event_manager::{EventOps, EventSet, Events, MutEventSubscriber};
use signal_hook::low_level::{pipe, signal_name};
use signal_hook::SigId;

use super::{SocketFile, StopHandle};

struct Pipe {
    signal: c_int,
    read: UnixStream,
    id: SigId,
}

/// The signals that stop the device.
pub struct SignalSource {
    pipes: Vec<Pipe>,
    received: u32,
    stop: Option<StopHandle>,
    files: Vec<SocketFile>,
    init_error: Option<event_manager::Error>,
}

fn name(signal: c_int) -> String {
    signal_name(signal).map_or_else(|| signal.to_string(), str::to_owned)
}

impl SignalSource {
    /// Catches `signals` from now on.
    ///
    /// # Errors
    /// The socket pair or the handler could not be set up.
    pub fn install(signals: &[c_int]) -> io::Result<SignalSource> {
        let mut pipes = Vec::new();
        for &signal in signals {
            let (read, write) = UnixStream::pair()?;
            read.set_nonblocking(true)?;
            let id = pipe::register(signal, write)?;
            pipes.push(Pipe { signal, read, id });
        }
        Ok(SignalSource {
            pipes,
            received: 0,
            stop: None,
            files: Vec::new(),
            init_error: None,
        })
    }

    /// What the first signal stops, and the socket files a second one
    /// removes before the process leaves.
    pub(super) fn attach(&mut self, stop: StopHandle, files: Vec<SocketFile>) {
        self.stop = Some(stop);
        self.files = files;
    }

    pub(super) fn take_init_error(&mut self) -> Option<event_manager::Error> {
        self.init_error.take()
    }

    fn on_signal(&mut self, signal: c_int) {
        self.received = self.received.saturating_add(1);
        if self.received == 1 {
            log::info!("signal {}: stopping", name(signal));
            if let Some(stop) = &self.stop {
                stop.stop();
            }
        } else {
            // A second signal while stopping: leave at once.
            log::warn!("signal {} again: exiting now", name(signal));
            for f in &self.files {
                f.remove();
            }
            std::process::exit(0);
        }
    }

    /// Bytes waiting in `pipe`: one per delivered signal; and whether
    /// the pipe is closed (it never is while its handler is registered).
    fn drain(pipe: &mut Pipe) -> (u32, bool) {
        let mut n = 0u32;
        let mut buf = [0u8; 16];
        loop {
            match pipe.read.read(&mut buf) {
                Ok(0) => return (n, true),
                Ok(k) => n = n.saturating_add(u32::try_from(k).unwrap_or(u32::MAX)),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return (n, false),
            }
        }
    }

    /// The loop is over and the sockets are gone: from now on a second
    /// signal (counting those already received) ends the process at once,
    /// from the signal handler, whatever the rest of the teardown is doing.
    pub(super) fn exit_on_second(mut self) {
        let pending: u32 = self.pipes.iter_mut().map(|p| Self::drain(p).0).sum();
        self.received = self.received.saturating_add(pending);
        let seen = Arc::new(AtomicBool::new(self.received > 0));
        for p in &self.pipes {
            // Order matters: the handler checks the flag, then sets it.
            let armed = signal_hook::flag::register_conditional_shutdown(p.signal, 0, seen.clone())
                .and_then(|_| signal_hook::flag::register(p.signal, seen.clone()));
            if let Err(e) = armed {
                log::warn!(
                    "signal {}: cannot arm the immediate exit: {e}",
                    name(p.signal)
                );
            }
            signal_hook::low_level::unregister(p.id);
        }
    }
}

impl MutEventSubscriber for SignalSource {
    fn init(&mut self, ops: &mut EventOps) {
        for p in &self.pipes {
            if let Err(e) = ops.add(Events::new(&p.read, EventSet::IN)) {
                self.init_error = Some(e);
                return;
            }
        }
    }

    fn process(&mut self, events: Events, ops: &mut EventOps) {
        let Some(i) = self
            .pipes
            .iter()
            .position(|p| p.read.as_raw_fd() == events.fd())
        else {
            return;
        };
        let Some(pipe) = self.pipes.get_mut(i) else {
            return;
        };
        let signal = pipe.signal;
        let (n, closed) = Self::drain(pipe);
        if closed {
            let _ = ops.remove(events);
        }
        for _ in 0..n {
            self.on_signal(signal);
        }
    }
}
