//! Captures: the device freezes a context's state at the moment of a
//! failure and keeps it for the driver and the tools.
//!
//! # When
//!
//! | trigger | who | reason |
//! |---|---|---|
//! | a ring stops on a page fault (not a replayable one that stalls) | the engine, right after it retired the slice, before the event is posted | `FAULT` |
//! | a ring stops on an engine error (malformed packet, trap, ECC) | the same | `ENGINE_ERROR` |
//! | `CAPTURE` | the driver, when it declares a hang, before it resets | `HANG`, `DRIVER` |
//! | the control socket's `capture CTX ENGINE` | the host | `ON_DEMAND` |
//!
//! The triggers and `CAPTURE_READ` are [`super::capture_ctl`]'s; this
//! block builds captures ([`build`]) and keeps them. A requested capture
//! goes through the engine's mailbox (`Request::Capture`): only the engine thread may look at its TLBs and
//! its loaded dispatches, and a hung engine still serves its mailbox at
//! every boundary. The capture itself ([`build`]) is bounded by
//! [`CaptureLimits`] and costs no more than copying that much memory; its
//! header records how long it took.
//!
//! # State
//!
//! ```text
//!   failure / request ─▶ build ─▶ stored (id n) ─▶ … ─▶ dropped when `keep` newer ones exist
//!                                   ▲ CAPTURE_READ (chunks into a driver buffer)
//! ```
//!
//! Captures outlive engine and device resets (the driver reads them after
//! it recovered); the store keeps the newest [`CaptureLimits::keep`].

pub mod build;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use vgpu_hwif::event::EventRecord;
use vgpu_hwif::proto::Status;

use super::context::ContextError;

/// Events kept for the next capture.
pub const RECENT_EVENTS: usize = 32;

/// How much a capture may hold, and how many are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CaptureLimits {
    /// Bytes of guest memory (rings, tables, command buffers, operands,
    /// data) per capture.
    pub memory: u64,
    /// Page-table pages walked per capture.
    pub tables: usize,
    /// Captures kept (the oldest is dropped).
    pub keep: usize,
    /// Capture by itself when a ring stops on a fault or engine error.
    pub auto: bool,
}

impl Default for CaptureLimits {
    fn default() -> Self {
        CaptureLimits {
            memory: 2 << 20,
            tables: 1024,
            keep: 8,
            auto: true,
        }
    }
}

/// One capture held by the device.
#[derive(Debug, Clone)]
pub struct Stored {
    /// Id (from 1).
    pub id: u32,
    /// Context.
    pub ctx: u32,
    /// Engine.
    pub engine: u32,
    /// `reason::*`.
    pub reason: u32,
    /// The capture file.
    pub bytes: Arc<Vec<u8>>,
}

/// Why a capture could not be taken or read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CaptureError {
    /// The context does not exist.
    #[error(transparent)]
    Context(#[from] ContextError),
    /// No such engine.
    #[error("engine {0} does not exist")]
    BadEngine(u32),
    /// Not a reason a driver may give.
    #[error("capture reason {0} is not one a driver gives")]
    BadReason(u32),
    /// No capture with that id (or none of that context).
    #[error("no such capture")]
    NotFound,
    /// The driver's buffer is not in guest RAM, or too long.
    #[error("capture buffer {pa:#x}+{len:#x} is not in guest RAM or longer than the limit")]
    BadBuffer {
        /// Its address.
        pa: u64,
        /// Its length.
        len: u32,
    },
    /// The engine does not answer.
    #[error("engine {0} does not answer")]
    EngineLost(usize),
}

impl CaptureError {
    /// The reply status.
    pub const fn status(&self) -> Status {
        match self {
            CaptureError::Context(e) => e.status(),
            CaptureError::BadEngine(_)
            | CaptureError::BadReason(_)
            | CaptureError::BadBuffer { .. } => Status::InvalidArgument,
            CaptureError::NotFound => Status::NotFound,
            CaptureError::EngineLost(_) => Status::DeviceLost,
        }
    }
}

#[derive(Debug, Default)]
struct Inner {
    limits: CaptureLimits,
    captures: VecDeque<Stored>,
    next_id: u32,
    recent: VecDeque<EventRecord>,
    /// (engine, request id, capture id) of served capture requests.
    results: Vec<(usize, u64, Option<u32>)>,
}

/// The device's captures (see the module documentation).
#[derive(Debug, Default)]
pub struct CaptureUnit {
    inner: Mutex<Inner>,
}

impl CaptureUnit {
    /// No captures, default limits.
    pub fn new() -> Self {
        CaptureUnit::default()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Uses `limits` from now on.
    pub fn set_limits(&self, limits: CaptureLimits) {
        self.lock().limits = limits;
    }

    /// The limits.
    pub fn limits(&self) -> CaptureLimits {
        self.lock().limits
    }

    /// An event was posted (kept for the next capture).
    pub fn note_event(&self, rec: &EventRecord) {
        let mut g = self.lock();
        if g.recent.len() >= RECENT_EVENTS {
            g.recent.pop_front();
        }
        g.recent.push_back(*rec);
    }

    /// The captures held, oldest first.
    pub fn list(&self) -> Vec<Stored> {
        self.lock().captures.iter().cloned().collect()
    }

    /// Capture `id`.
    pub fn get(&self, id: u32) -> Option<Stored> {
        self.lock().captures.iter().find(|c| c.id == id).cloned()
    }

    /// The newest capture of `ctx` (any context for `None`).
    pub fn newest(&self, ctx: Option<u32>) -> Option<Stored> {
        self.lock()
            .captures
            .iter()
            .rev()
            .find(|c| ctx.is_none_or(|x| x == c.ctx))
            .cloned()
    }

    /// The capture engine `engine` took for request `req` (once).
    pub fn take_result(&self, engine: usize, req: u64) -> Option<u32> {
        let mut g = self.lock();
        let i = g
            .results
            .iter()
            .position(|(e, r, _)| *e == engine && *r == req)?;
        g.results.swap_remove(i).2
    }

    /// Starts a capture: its id, the limits it is built under and the
    /// events posted last.
    pub fn begin(&self) -> (u32, CaptureLimits, Vec<EventRecord>) {
        let mut g = self.lock();
        g.next_id = g.next_id.wrapping_add(1).max(1);
        (g.next_id, g.limits, g.recent.iter().copied().collect())
    }

    /// Keeps capture `stored` (the oldest dropped beyond the limit).
    pub fn keep(&self, stored: Stored) {
        let mut g = self.lock();
        while g.captures.len() >= g.limits.keep.max(1) {
            g.captures.pop_front();
        }
        g.captures.push_back(stored);
    }

    /// Engine `engine` served capture request `req` with capture `id`.
    pub fn served(&self, engine: usize, req: u64, id: Option<u32>) {
        let mut g = self.lock();
        // Results nobody collected (the requester gave up) do not pile up.
        if g.results.len() >= 16 {
            g.results.remove(0);
        }
        g.results.push((engine, req, id));
    }
}

#[cfg(test)]
mod tests;
