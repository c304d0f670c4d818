// SPDX-License-Identifier: GPL-2.0

//! The link to the device: the PCI function, its virtio transport, and the
//! driver's view of the device's state (running, unbound, broken).
//!
//! Every transport block reaches the device through a [`Link`]; nothing here
//! knows about the blocks above. The state moves one way:
//!
//! ```text
//! initialising ──DRIVER_OK──▶ running ──NEEDS_RESET / FAILED / ring corruption──▶ broken
//!                                │  └──commands unanswered (dead device)──▶ lost (broken too)
//!        └───────────────────────┴──────────────unbind──────────────────────▶ unbound
//! ```
//!
//! A broken device needs a rebind or a PCI function reset after which it
//! answers again ([`super::bringup`]); an unbound one answers `ENODEV`
//! forever. While a function reset has the device down the link is
//! *offline*: calls fail with `EAGAIN`.
//! A *lost* device is a broken one that stopped answering altogether (its
//! process died, or it hangs in its control path): [`LOST_AFTER`]
//! consecutive commands without a reply declare it lost; the driver's
//! heartbeat makes sure a command is sent even when nothing else talks to
//! the device.

use super::virtio::{
    status,
    Transport, //
};
use crate::ffi::{
    monotonic_ns,
    send_wedged_uevent, //
};
use kernel::{
    pci,
    prelude::*,
    sync::{
        aref::ARef,
        atomic::{
            Atomic,
            AtomicFlag,
            Relaxed, //
        },
    },
};

/// Commands in a row without a reply that declare the device lost.
pub(crate) const LOST_AFTER: u32 = 2;

/// The device as the transport blocks reach it.
pub(crate) struct Link {
    /// The PCI function (also used for log messages).
    pub(crate) pdev: ARef<pci::Device>,
    /// Register access.
    pub(crate) transport: Transport,
    /// Set once `DRIVER_OK` has been written.
    running: AtomicFlag,
    /// Set when teardown starts; never cleared.
    unbound: AtomicFlag,
    /// Set when the device broke; cleared only by a function reset after
    /// which the device answers (or a rebind).
    broken: AtomicFlag,
    /// Set (with `broken`) when the device stopped answering; cleared only
    /// by a function reset after which the device answers.
    lost: AtomicFlag,
    /// Set while a PCI function reset has the device down.
    offline: AtomicFlag,
    /// Commands in a row that timed out (0 after any reply).
    unanswered: Atomic<u32>,
    /// When the device last answered a command (monotonic ns).
    last_answer_ns: Atomic<u64>,
    /// The INTx hard handler saw the configuration-change ISR bit.
    pub(crate) config_pending: AtomicFlag,
    /// The INTx hard handler saw the queue ISR bit.
    pub(crate) queue_pending: AtomicFlag,
    /// Interrupts per line (index: see `irq`).
    irq_count: [Atomic<u64>; 2],
    /// Configuration-change checks run.
    config_checks: Atomic<u64>,
}

impl Link {
    /// A link in the initialising state.
    pub(crate) fn new(pdev: ARef<pci::Device>, transport: Transport) -> Link {
        Link {
            pdev,
            transport,
            running: AtomicFlag::new(false),
            unbound: AtomicFlag::new(false),
            broken: AtomicFlag::new(false),
            lost: AtomicFlag::new(false),
            offline: AtomicFlag::new(false),
            unanswered: Atomic::new(0),
            last_answer_ns: Atomic::new(0),
            config_pending: AtomicFlag::new(false),
            queue_pending: AtomicFlag::new(false),
            irq_count: [Atomic::new(0), Atomic::new(0)],
            config_checks: Atomic::new(0),
        }
    }

    /// Whether the device can be used.
    ///
    /// # Errors
    ///
    /// `ENODEV` once unbound, `EIO` once broken, `EAGAIN` while a function
    /// reset has the device down.
    pub(crate) fn check_usable(&self) -> Result {
        if self.unbound.load(Relaxed) {
            return Err(ENODEV);
        }
        if self.broken.load(Relaxed) {
            return Err(EIO);
        }
        if self.offline.load(Relaxed) {
            return Err(EAGAIN);
        }
        Ok(())
    }

    /// A function reset takes the device down (`true`) or has brought it
    /// back (`false`).
    pub(crate) fn set_offline(&self, offline: bool) {
        self.offline.store(offline, Relaxed);
    }

    /// A function reset brought the device back and it answered: a broken
    /// or lost device is usable again.
    pub(crate) fn revive(&self) {
        self.unanswered.store(0, Relaxed);
        self.last_answer_ns.store(monotonic_ns(), Relaxed);
        if self.broken.xchg(false, Relaxed) {
            self.lost.store(false, Relaxed);
            dev_info!(self.pdev, "function reset: the device answers again\n");
        }
    }

    /// Whether teardown has started.
    pub(crate) fn is_unbound(&self) -> bool {
        self.unbound.load(Relaxed)
    }

    /// Whether the driver declared the device lost.
    pub(crate) fn is_lost(&self) -> bool {
        self.lost.load(Relaxed)
    }

    /// A command got its reply: the device answers.
    pub(crate) fn answered(&self) {
        self.unanswered.store(0, Relaxed);
        self.last_answer_ns.store(monotonic_ns(), Relaxed);
    }

    /// Nanoseconds since the device last answered a command.
    pub(crate) fn silent_ns(&self) -> u64 {
        monotonic_ns().saturating_sub(self.last_answer_ns.load(Relaxed))
    }

    /// A command timed out. After [`LOST_AFTER`] in a row the device is
    /// declared lost; returns whether this call declared it (the caller
    /// wakes its sleepers and tells userspace).
    pub(crate) fn unanswered(&self) -> bool {
        let n = self.unanswered.fetch_add(1, Relaxed).saturating_add(1);
        if n < LOST_AFTER || self.unbound.load(Relaxed) || self.lost.xchg(true, Relaxed) {
            return false;
        }
        self.broken.store(true, Relaxed);
        dev_err!(
            self.pdev,
            "device lost: {} commands in a row unanswered; every call fails with EIO until the driver is rebound\n",
            n
        );
        // As for a wedged device: userspace (a uevent helper) learns that
        // only a rebind can help.
        send_wedged_uevent(self.pdev.as_ref());
        true
    }

    /// A short state name.
    pub(crate) fn state_name(&self) -> &'static str {
        if self.unbound.load(Relaxed) {
            "unbound"
        } else if self.lost.load(Relaxed) {
            "lost (the device stopped answering; rebind the driver to recover)"
        } else if self.broken.load(Relaxed) {
            "broken (a function reset or a rebind may recover it)"
        } else if self.offline.load(Relaxed) {
            "offline (function reset)"
        } else if self.running.load(Relaxed) {
            "running"
        } else {
            "initialising"
        }
    }

    /// `DRIVER_OK` has been written.
    pub(crate) fn set_running(&self, running: bool) {
        self.running.store(running, Relaxed);
    }

    /// Starts teardown; returns whether it had started already.
    pub(crate) fn set_unbound(&self) -> bool {
        self.unbound.xchg(true, Relaxed)
    }

    /// Marks the device unusable (logged once). Returns whether this call
    /// broke it; the caller then wakes the sleepers it knows of.
    pub(crate) fn mark_broken(&self, why: &str) -> bool {
        if self.broken.xchg(true, Relaxed) {
            return false;
        }
        dev_err!(
            self.pdev,
            "{}; the device is unusable until the driver is rebound\n",
            why
        );
        true
    }

    /// Counts an interrupt on line `index`.
    pub(crate) fn count_irq(&self, index: usize) {
        if let Some(c) = self.irq_count.get(index) {
            c.add(1, Relaxed);
        }
    }

    /// Interrupts counted per line.
    pub(crate) fn irq_counts(&self) -> [u64; 2] {
        [
            self.irq_count[0].load(Relaxed),
            self.irq_count[1].load(Relaxed),
        ]
    }

    /// Configuration-change checks run so far.
    pub(crate) fn config_checks(&self) -> u64 {
        self.config_checks.load(Relaxed)
    }

    /// Checks the device status after a configuration-change interrupt (or
    /// a command timeout): a device that needs a reset, failed, or dropped
    /// `DRIVER_OK` on its own is broken. Returns whether this call broke it.
    pub(crate) fn config_changed(&self) -> bool {
        self.config_checks.add(1, Relaxed);
        if !self.running.load(Relaxed) || self.unbound.load(Relaxed) {
            return false;
        }
        let why = match self.transport.status() {
            // Revoked: teardown is in progress.
            Err(_) => return false,
            Ok(s) if s & status::NEEDS_RESET != 0 => "device set NEEDS_RESET",
            Ok(s) if s & status::FAILED != 0 => "device status reads FAILED (device gone?)",
            Ok(s) if s & status::DRIVER_OK == 0 => "device dropped DRIVER_OK (reset by itself)",
            Ok(_) => return false,
        };
        self.mark_broken(why)
    }
}
