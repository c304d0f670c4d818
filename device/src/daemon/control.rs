//! The fault-injection control socket as a subscriber of the control-plane
//! loop: it accepts connections, reads each one's request lines as they
//! arrive and answers them in order (the protocol is
//! [`crate::inject_ctl`]'s).
//!
//! Limits, so that no client can make the device allocate without bound
//! or hold the socket: a request line is at most [`MAX_REQUEST`] bytes (a
//! longer one is answered with an error and the connection closed); a
//! connection's next request is read only once the previous reply has
//! been taken by the client; at most [`MAX_CONNECTIONS`] connections are
//! open at once (more are closed as they arrive); a connection idle for
//! the idle timeout ([`IDLE_TIMEOUT`] by default) is closed.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::os::unix::io::{AsRawFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use event_manager::{EventOps, EventSet, Events, MutEventSubscriber};
use vmm_sys_util::timerfd::TimerFd;

use super::SocketFile;
use crate::core::gpu::Gpu;
use crate::inject_ctl::{self, ControlError, Requests};

/// Longest request line, without its newline.
pub const MAX_REQUEST: usize = 4096;
/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 16;
/// A connection with nothing sent or received for this long is closed.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Reads from one connection per wake-up, so that a client streaming
/// requests cannot keep the loop from its other sources.
const READS_PER_WAKE: u32 = 16;

/// What a connection waits for next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Wait(EventSet),
    Close,
}

/// One client: bytes read but not yet answered, and the reply being sent.
struct Connection {
    stream: UnixStream,
    input: Vec<u8>,
    output: Vec<u8>,
    sent: usize,
    eof: bool,
    closing: bool,
    interest: EventSet,
    active: Instant,
}

impl Connection {
    fn new(stream: UnixStream) -> Self {
        Connection {
            stream,
            input: Vec::new(),
            output: Vec::new(),
            sent: 0,
            eof: false,
            closing: false,
            interest: EventSet::IN,
            active: Instant::now(),
        }
    }

    fn answer(&mut self, gpu: &dyn Requests, line: &[u8]) {
        let reply = match std::str::from_utf8(line) {
            Ok(l) if l.trim().is_empty() => return,
            Ok(l) => gpu.handle(l),
            Err(_) => inject_ctl::error_reply("request is not UTF-8"),
        };
        self.output.extend_from_slice(reply.as_bytes());
        self.output.push(b'\n');
    }

    /// Moves the connection as far as it can go without blocking: sends
    /// the pending reply, answers the next buffered request, reads more.
    fn pump(&mut self, gpu: &dyn Requests) -> Step {
        let mut reads = 0u32;
        loop {
            while let Some(rest) = self.output.get(self.sent..).filter(|r| !r.is_empty()) {
                match self.stream.write(rest) {
                    Ok(0) => return Step::Close,
                    Ok(n) => {
                        self.sent += n;
                        self.active = Instant::now();
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        return Step::Wait(EventSet::OUT)
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => return Step::Close,
                }
            }
            self.output.clear();
            self.sent = 0;
            if self.closing {
                return Step::Close;
            }
            if let Some(end) = self.input.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.input.drain(..=end).collect();
                self.answer(gpu, line.get(..end).unwrap_or(&[]));
                continue;
            }
            if self.input.len() > MAX_REQUEST {
                let e = format!("request longer than {MAX_REQUEST} bytes");
                self.output = inject_ctl::error_reply(&e).into_bytes();
                self.output.push(b'\n');
                self.closing = true;
                continue;
            }
            if self.eof {
                // A last request without its newline is still answered.
                let line = std::mem::take(&mut self.input);
                self.answer(gpu, &line);
                self.closing = true;
                continue;
            }
            if reads == READS_PER_WAKE {
                return Step::Wait(EventSet::IN);
            }
            reads += 1;
            // No complete line is buffered, so the input stays within one
            // request and its newline.
            let mut buf = [0u8; MAX_REQUEST + 1];
            let room = (MAX_REQUEST + 1).saturating_sub(self.input.len()).max(1);
            match self.stream.read(buf.get_mut(..room).unwrap_or(&mut [])) {
                Ok(0) => self.eof = true,
                Ok(n) => {
                    self.input.extend_from_slice(buf.get(..n).unwrap_or(&[]));
                    self.active = Instant::now();
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Step::Wait(EventSet::IN),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Step::Close,
            }
        }
    }
}

/// The control socket's listener and its connections.
pub struct ControlServer {
    listener: UnixListener,
    file: SocketFile,
    gpu: Arc<dyn Requests>,
    conns: HashMap<RawFd, Connection>,
    idle: TimerFd,
    idle_timeout: Duration,
    ticking: bool,
    init_error: Option<event_manager::Error>,
}

impl ControlServer {
    /// Listens on `path` (a stale socket there is replaced) for `gpu`'s
    /// fault injector. The socket file is removed when the server is
    /// dropped, unless something else has replaced it meanwhile.
    ///
    /// # Errors
    /// The socket cannot be bound, or the idle timer created.
    pub fn bind(path: &Path, gpu: Arc<Gpu>) -> Result<ControlServer, ControlError> {
        Self::bind_for(path, gpu)
    }

    /// Listens on `path` for the requests `handler` answers.
    ///
    /// # Errors
    /// The socket cannot be bound, or the idle timer created.
    pub fn bind_for(
        path: &Path,
        handler: Arc<dyn Requests>,
    ) -> Result<ControlServer, ControlError> {
        let gpu = handler;
        let bind_err = |source| ControlError::Bind {
            path: path.display().to_string(),
            source,
        };
        let _ = std::fs::remove_file(path);
        let listener = UnixListener::bind(path).map_err(bind_err)?;
        let file = SocketFile::bound(path);
        listener.set_nonblocking(true).map_err(bind_err)?;
        let idle = TimerFd::new().map_err(|e| ControlError::Timer(e.into()))?;
        Ok(ControlServer {
            listener,
            file,
            gpu,
            conns: HashMap::new(),
            idle,
            idle_timeout: IDLE_TIMEOUT,
            ticking: false,
            init_error: None,
        })
    }

    /// Closes connections idle for `timeout` instead of [`IDLE_TIMEOUT`].
    pub fn with_idle_timeout(mut self, timeout: Duration) -> Self {
        self.idle_timeout = timeout;
        self
    }

    /// The socket file.
    pub fn file(&self) -> &SocketFile {
        &self.file
    }

    pub(super) fn take_init_error(&mut self) -> Option<event_manager::Error> {
        self.init_error.take()
    }

    /// The idle check runs while connections are open, four times per
    /// timeout.
    fn update_timer(&mut self, ops: &mut EventOps) {
        let want = !self.conns.is_empty();
        if want == self.ticking {
            return;
        }
        let result = if want {
            let tick = (self.idle_timeout / 4).max(Duration::from_millis(1));
            self.idle
                .reset(tick, Some(tick))
                .map_err(io::Error::from)
                .and_then(|()| {
                    ops.add(Events::new(&self.idle, EventSet::IN))
                        .map_err(|e| io::Error::other(e.to_string()))
                })
        } else {
            let _ = ops.remove(Events::new(&self.idle, EventSet::IN));
            self.idle.clear().map_err(io::Error::from)
        };
        match result {
            Ok(()) => self.ticking = want,
            Err(e) => log::warn!("inject control: idle timer: {e}"),
        }
    }

    fn close(&mut self, fd: RawFd, ops: &mut EventOps) {
        if let Some(c) = self.conns.remove(&fd) {
            let _ = ops.remove(Events::new(&c.stream, c.interest));
        }
    }

    fn accept(&mut self, ops: &mut EventOps) {
        loop {
            let stream = match self.listener.accept() {
                Ok((s, _)) => s,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    log::warn!("inject control socket: {e}");
                    break;
                }
            };
            if self.conns.len() >= MAX_CONNECTIONS {
                log::warn!("inject control: {MAX_CONNECTIONS} connections open, refusing another");
                continue;
            }
            if let Err(e) = stream.set_nonblocking(true) {
                log::warn!("inject control client: {e}");
                continue;
            }
            let c = Connection::new(stream);
            if let Err(e) = ops.add(Events::new(&c.stream, c.interest)) {
                log::warn!("inject control client: {e}");
                continue;
            }
            self.conns.insert(c.stream.as_raw_fd(), c);
        }
    }

    fn serve(&mut self, fd: RawFd, ops: &mut EventOps) {
        let Some(c) = self.conns.get_mut(&fd) else {
            return;
        };
        match c.pump(&*self.gpu) {
            Step::Wait(interest) => {
                if interest != c.interest {
                    c.interest = interest;
                    if let Err(e) = ops.modify(Events::new(&c.stream, interest)) {
                        log::warn!("inject control client: {e}");
                        self.close(fd, ops);
                    }
                }
            }
            Step::Close => self.close(fd, ops),
        }
    }

    fn reap_idle(&mut self, ops: &mut EventOps) {
        let _ = self.idle.wait();
        let now = Instant::now();
        let idle: Vec<RawFd> = self
            .conns
            .iter()
            .filter(|(_, c)| now.saturating_duration_since(c.active) >= self.idle_timeout)
            .map(|(&fd, _)| fd)
            .collect();
        for fd in idle {
            log::debug!(
                "inject control: closing a connection idle for {:?}",
                self.idle_timeout
            );
            self.close(fd, ops);
        }
    }
}

impl MutEventSubscriber for ControlServer {
    fn init(&mut self, ops: &mut EventOps) {
        if let Err(e) = ops.add(Events::new(&self.listener, EventSet::IN)) {
            self.init_error = Some(e);
        }
    }

    fn process(&mut self, events: Events, ops: &mut EventOps) {
        let fd = events.fd();
        if fd == self.listener.as_raw_fd() {
            self.accept(ops);
        } else if fd == self.idle.as_raw_fd() {
            self.reap_idle(ops);
        } else {
            self.serve(fd, ops);
        }
        self.update_timer(ops);
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        self.file.remove();
    }
}

/// A control server on a loop of its own, for tests of the protocol: the
/// loop ends (and the socket file goes) when this is dropped.
#[cfg(test)]
pub(crate) struct TestLoop {
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

#[cfg(test)]
impl TestLoop {
    pub(crate) fn start(server: ControlServer) -> Self {
        use event_manager::{EventManager, SubscriberOps};
        use std::sync::atomic::{AtomicBool, Ordering};
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut em = EventManager::<ControlServer>::new().unwrap();
            em.add_subscriber(server);
            while !flag.load(Ordering::SeqCst) {
                em.run_with_timeout(10).unwrap();
            }
        });
        TestLoop {
            stop,
            thread: Some(thread),
        }
    }
}

#[cfg(test)]
impl Drop for TestLoop {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{DeviceConfig, Generation};
    use crate::core::Device;
    use std::io::{BufRead, BufReader};

    fn gpu() -> Arc<Gpu> {
        Device::new(DeviceConfig::new(Generation::Gen2, 1).unwrap())
            .gpu()
            .clone()
    }

    /// The next reply line; "" once the server closed the connection.
    fn reply(r: &mut impl BufRead) -> String {
        let mut line = String::new();
        r.read_line(&mut line).map(|_| line).unwrap_or_default()
    }

    #[test]
    fn pipelined_requests_are_answered_in_order_and_a_last_line_without_newline_too() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ctl.sock");
        let _l = TestLoop::start(ControlServer::bind(&path, gpu()).unwrap());
        let mut c = UnixStream::connect(&path).unwrap();
        c.write_all(b"seed 5\n\nstatus\nbogus\nstatus").unwrap();
        c.shutdown(std::net::Shutdown::Write).unwrap();
        let mut r = BufReader::new(c);
        assert_eq!(reply(&mut r), "{\"ok\":true}\n");
        assert!(reply(&mut r).contains("\"seed\":5"));
        assert!(reply(&mut r).starts_with("{\"ok\":false,\"error\":\"unknown request"));
        assert!(reply(&mut r).contains("\"seed\":5"));
        assert_eq!(reply(&mut r), "", "closed after the last request");
    }

    #[test]
    fn an_overlong_request_is_refused_and_the_connection_closed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ctl.sock");
        let _l = TestLoop::start(ControlServer::bind(&path, gpu()).unwrap());
        // One byte short of the limit is still a request...
        let mut c = UnixStream::connect(&path).unwrap();
        let mut line = vec![b' '; MAX_REQUEST - 6];
        line.extend_from_slice(b"status\n");
        assert_eq!(line.len(), MAX_REQUEST + 1);
        c.write_all(&line).unwrap();
        let mut r = BufReader::new(c.try_clone().unwrap());
        assert!(reply(&mut r).starts_with("{\"ok\":true"));
        // ... one more is not, and nothing after it is read.
        let mut long = vec![b'x'; MAX_REQUEST + 1];
        long.extend_from_slice(b"\nstatus\n");
        let _ = c.write_all(&long);
        let refused = reply(&mut r);
        assert_eq!(
            refused,
            "{\"ok\":false,\"error\":\"request longer than 4096 bytes\"}\n"
        );
        assert_eq!(reply(&mut r), "", "connection closed");
        // The server still serves others.
        let mut c2 = UnixStream::connect(&path).unwrap();
        c2.write_all(b"status\n").unwrap();
        assert!(reply(&mut BufReader::new(c2)).starts_with("{\"ok\":true"));
    }

    #[test]
    fn connections_are_served_concurrently_limited_and_closed_when_idle() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ctl.sock");
        let server = ControlServer::bind(&path, gpu())
            .unwrap()
            .with_idle_timeout(Duration::from_millis(300));
        let _l = TestLoop::start(server);
        // A client that sent half a request does not hold up the others.
        let mut conns: Vec<UnixStream> = (0..MAX_CONNECTIONS)
            .map(|_| UnixStream::connect(&path).unwrap())
            .collect();
        conns[0].write_all(b"sta").unwrap();
        for c in &mut conns[1..] {
            c.write_all(b"status\n").unwrap();
            assert!(reply(&mut BufReader::new(c.try_clone().unwrap())).starts_with("{\"ok\":true"));
        }
        // All slots taken: one more is closed at once.
        let extra = UnixStream::connect(&path).unwrap();
        extra
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        assert_eq!(reply(&mut BufReader::new(extra)), "");
        // Idle connections are closed after the timeout, the half request
        // unanswered.
        let t0 = Instant::now();
        conns[0]
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        assert_eq!(
            reply(&mut BufReader::new(conns[0].try_clone().unwrap())),
            ""
        );
        let waited = t0.elapsed();
        assert!(waited < Duration::from_secs(4), "closed after {waited:?}");
        // And a new client is served again.
        let mut c = UnixStream::connect(&path).unwrap();
        c.write_all(b"status\n").unwrap();
        assert!(reply(&mut BufReader::new(c)).starts_with("{\"ok\":true"));
    }

    #[test]
    fn the_socket_file_goes_with_the_server_but_not_a_replacement() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ctl.sock");
        let l = TestLoop::start(ControlServer::bind(&path, gpu()).unwrap());
        let mut c = UnixStream::connect(&path).unwrap();
        c.write_all(b"status\n").unwrap();
        assert!(reply(&mut BufReader::new(c)).starts_with("{\"ok\":true"));
        drop(l);
        assert!(!path.exists());
        // A socket bound again at the path by someone else stays.
        let server = ControlServer::bind(&path, gpu()).unwrap();
        std::fs::remove_file(&path).unwrap();
        let _other = UnixListener::bind(&path).unwrap();
        drop(server);
        assert!(path.exists());
    }
}
