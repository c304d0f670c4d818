//! The device process of a partitioned GPU (`vgpu-device --vf ...`): one
//! vhost-user socket per virtual function, each served as the single
//! device's socket is ([`Session`]), all on one control-plane loop, and the
//! physical function's control socket ([`VfTable`]).
//!
//! A VF's session ends when its VM goes (QEMU closes the connection,
//! mid-job or not): its device is dropped — its engine threads stop and
//! leave the engines' arbiter — and a fresh device in its power-on state
//! listens on the same socket for the VF's next VM. The other VFs are not
//! touched. The loop ends on a stop (a signal, [`StopHandle::stop`]).
//!
//! ```text
//!   per VF:  Listening ──frontend──▶ Serving ──frontend gone──▶ (new device) Listening
//!                 └────────────── stop ─────────────┴──────▶ Ended
//! ```

use std::cell::RefCell;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::{Arc, RwLock};

use event_manager::{
    EventManager, EventOps, EventSet, Events, MutEventSubscriber, SubscriberId, SubscriberOps,
};

use super::session::Session;
use super::{
    listen, session_for, ControlServer, DaemonError, ExitReason, SignalSource, SocketFile,
    StopHandle, Subscriber,
};
use crate::backend::VgpuBackend;
use crate::pf::PhysicalFunction;
use crate::pf_ctl::{Change, VfTable};

/// How a partitioned device's run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PfSummary {
    /// Frontends served, all VFs together.
    pub frontends: u64,
}

/// A bound, not yet running partitioned device.
pub struct PfDaemon {
    table: Arc<VfTable>,
    stop: StopHandle,
    control: Option<ControlServer>,
    signals: Option<SignalSource>,
}

/// One VF's current session.
struct Slot {
    vf: u32,
    socket: PathBuf,
    session: Option<(Rc<RefCell<Session>>, SubscriberId)>,
    stop: Option<StopHandle>,
    /// The host destroyed the VF: its session ends and is not renewed.
    destroyed: bool,
}

/// Wakes the loop when the control socket created or destroyed a VF.
struct ChangeWatch(Arc<VfTable>);

impl MutEventSubscriber for ChangeWatch {
    fn init(&mut self, ops: &mut EventOps) {
        if let Err(e) = ops.add(Events::new(self.0.wake_fd(), EventSet::IN)) {
            log::error!("cannot watch for new virtual functions: {e}");
        }
    }

    // The loop takes the changes after `run` returns.
    fn process(&mut self, _events: Events, _ops: &mut EventOps) {}
}

/// Passes the daemon's stop on to every VF's session.
struct StopFanout {
    stop: StopHandle,
    targets: Rc<RefCell<Vec<StopHandle>>>,
}

impl MutEventSubscriber for StopFanout {
    fn init(&mut self, ops: &mut EventOps) {
        if let Err(e) = ops.add(Events::new(&self.stop.0.wake, EventSet::IN)) {
            log::error!("cannot watch the stop doorbell: {e}");
        }
    }

    fn process(&mut self, _events: Events, _ops: &mut EventOps) {
        let _ = self.stop.0.wake.read();
        if self.stop.is_requested() {
            for t in self.targets.borrow().iter() {
                t.stop();
            }
        }
    }
}

impl PfDaemon {
    /// The VFs of `pf`, VF `i + 1` served on `sockets[i]`; VFs created
    /// later on the control socket default to `socket_base.vfN`.
    ///
    /// # Errors
    /// [`DaemonError::Session`] if the sockets do not match the VFs.
    pub fn new(
        pf: PhysicalFunction,
        sockets: Vec<PathBuf>,
        socket_base: PathBuf,
    ) -> Result<PfDaemon, DaemonError> {
        if sockets.len() != pf.configs().len() {
            return Err(DaemonError::Session(format!(
                "{} sockets for {} virtual functions",
                sockets.len(),
                pf.configs().len()
            )));
        }
        let table =
            VfTable::new(Arc::new(pf), sockets, socket_base).map_err(DaemonError::Backend)?;
        Ok(PfDaemon {
            table: Arc::new(table),
            stop: StopHandle::new()?,
            control: None,
            signals: None,
        })
    }

    /// Serves the physical function's control socket at `path`
    /// ([`crate::pf_ctl`]).
    ///
    /// # Errors
    /// The socket cannot be bound.
    pub fn serve_control(&mut self, path: &std::path::Path) -> Result<(), DaemonError> {
        self.control = Some(ControlServer::bind_for(path, self.table.clone())?);
        Ok(())
    }

    /// Lets `signals` stop the daemon (see [`super::Daemon::handle_signals`]).
    pub fn handle_signals(&mut self, signals: SignalSource) {
        self.signals = Some(signals);
    }

    /// A handle that stops this daemon.
    pub fn stop_handle(&self) -> StopHandle {
        self.stop.clone()
    }

    /// The VFs as the host sees them.
    pub fn table(&self) -> Arc<VfTable> {
        self.table.clone()
    }

    /// VF `vf`'s slot, no session started yet, on the socket its table
    /// entry names.
    fn slot(&self, vf: u32) -> Slot {
        Slot {
            vf,
            socket: self
                .table
                .with(vf, |s| s.socket.clone())
                .unwrap_or_default(),
            session: None,
            stop: None,
            destroyed: false,
        }
    }

    /// Starts VF `slot`'s next session: a fresh device listening on its
    /// socket.
    fn start(&self, slot: &mut Slot, em: &mut EventManager<Subscriber>) -> Result<(), DaemonError> {
        let device = self
            .table
            .pf()
            .device(slot.vf)
            .ok_or_else(|| DaemonError::Session(format!("no virtual function {}", slot.vf)))?;
        let backend = VgpuBackend::with_device(device).map_err(DaemonError::Backend)?;
        let gpu = backend.gpu();
        let backend = Arc::new(RwLock::new(backend));
        let stop = StopHandle::new()?;
        let session = session_for(listen(&slot.socket)?, backend, stop.clone())?;
        let session = Rc::new(RefCell::new(session));
        let id = em.add_subscriber(session.clone());
        self.table.with(slot.vf, |s| {
            s.gpu = Some(gpu);
            s.connected = false;
        });
        log::info!(
            "virtual function {}: listening on {}",
            slot.vf,
            slot.socket.display()
        );
        slot.session = Some((session, id));
        slot.stop = Some(stop);
        Ok(())
    }

    /// Serves every VF until a stop; the socket files are removed before
    /// this returns.
    ///
    /// # Errors
    /// A socket cannot be bound or the event loop fails.
    pub fn run(mut self) -> Result<PfSummary, DaemonError> {
        let mut em = EventManager::<Subscriber>::new().map_err(DaemonError::EventLoop)?;
        let targets = Rc::new(RefCell::new(Vec::new()));
        em.add_subscriber(Rc::new(RefCell::new(StopFanout {
            stop: self.stop.clone(),
            targets: targets.clone(),
        })));
        let mut slots: Vec<Slot> = self
            .table
            .pf()
            .configs()
            .iter()
            .filter_map(|c| c.partition.map(|p| p.vf))
            .map(|vf| self.slot(vf))
            .collect();
        em.add_subscriber(Rc::new(RefCell::new(ChangeWatch(self.table.clone()))));
        for slot in &mut slots {
            self.start(slot, &mut em)?;
        }
        let mut files: Vec<SocketFile> =
            slots.iter().map(|s| SocketFile::bound(&s.socket)).collect();
        let control = self.control.take().map(|c| Rc::new(RefCell::new(c)));
        if let Some(c) = &control {
            files.push(c.borrow().file().clone());
            em.add_subscriber(c.clone());
            if let Some(e) = c.borrow_mut().take_init_error() {
                return Err(DaemonError::EventLoop(e));
            }
        }
        let signals = self.signals.take().map(|mut s| {
            s.attach(self.stop.clone(), files);
            Rc::new(RefCell::new(s))
        });
        if let Some(s) = &signals {
            em.add_subscriber(s.clone());
            if let Some(e) = s.borrow_mut().take_init_error() {
                return Err(DaemonError::EventLoop(e));
            }
        }
        let mut frontends = 0u64;
        loop {
            for change in self.table.take_changes() {
                match change {
                    Change::Created(vf) => {
                        let mut slot = self.slot(vf);
                        match self.start(&mut slot, &mut em) {
                            Ok(()) => slots.push(slot),
                            Err(e) => {
                                // Without its socket the VF cannot serve:
                                // its partition goes back to the device.
                                log::error!("virtual function {vf}: {e}; destroyed again");
                                let _ = self.table.pf().destroy(vf);
                            }
                        }
                    }
                    Change::Destroyed(vf) => {
                        for slot in slots.iter_mut().filter(|s| s.vf == vf) {
                            slot.destroyed = true;
                            if let Some(stop) = &slot.stop {
                                stop.stop();
                            }
                        }
                    }
                }
            }
            *targets.borrow_mut() = slots.iter().filter_map(|s| s.stop.clone()).collect();
            for slot in &mut slots {
                let Some((session, id)) = &slot.session else {
                    continue;
                };
                let serving = session.borrow().serving();
                self.table.with(slot.vf, |s| s.connected = serving);
                let Some(outcome) = session.borrow_mut().take_outcome() else {
                    continue;
                };
                let _ = em.remove_subscriber(*id);
                slot.session = None;
                slot.stop = None;
                let served = matches!(outcome, Ok((_, true)));
                self.table.with(slot.vf, |s| {
                    s.gpu = None;
                    s.connected = false;
                    s.frontends += u64::from(served);
                });
                frontends += u64::from(served);
                match outcome {
                    Ok((ExitReason::Disconnected, _)) => {
                        log::info!(
                            "virtual function {}: its VM left; a fresh device serves the next",
                            slot.vf
                        )
                    }
                    Ok((ExitReason::Stopped, _)) => {}
                    Err(e) => log::error!("virtual function {}: {e}", slot.vf),
                }
                if slot.destroyed {
                    log::info!(
                        "virtual function {}: destroyed, its socket removed",
                        slot.vf
                    );
                } else if !self.stop.is_requested() {
                    self.start(slot, &mut em)?;
                }
            }
            slots.retain(|s| !(s.destroyed && s.session.is_none()));
            if self.stop.is_requested() && slots.iter().all(|s| s.session.is_none()) {
                break;
            }
            if self.stop.is_requested() {
                for s in slots.iter().filter_map(|s| s.stop.as_ref()) {
                    s.stop();
                }
            }
            em.run().map_err(DaemonError::EventLoop)?;
        }
        drop(em);
        drop(control);
        if let Some(s) = signals.and_then(|s| Rc::try_unwrap(s).ok()) {
            s.into_inner().exit_on_second();
        }
        Ok(PfSummary { frontends })
    }
}
