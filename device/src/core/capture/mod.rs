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
//! A requested capture goes through the engine's mailbox
//! ([`Request::Capture`]): only the engine thread may look at its TLBs and
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

use vgpu_hwif::capture::reason;
use vgpu_hwif::event::{EngineErrorRecord, Event, EventRecord};
use vgpu_hwif::proto::{Status, CAPTURE_READ_MAX, CTX_NONE};
use vm_memory::{Bytes, GuestAddress};

use super::context::ContextError;
use super::cp::{CommandProcessor, Job, SliceEnd};
use super::gpu::{Gpu, GpuState, Request, ENGINES};
use super::mmu::{in_ram, Mem};
use build::{Failure, Frozen};

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

    fn take_result(&self, engine: usize, req: u64) -> Option<u32> {
        let mut g = self.lock();
        let i = g
            .results
            .iter()
            .position(|(e, r, _)| *e == engine && *r == req)?;
        g.results.swap_remove(i).2
    }

    /// Builds and stores a capture; returns it.
    fn take(
        &self,
        gpu: &Gpu,
        st: &GpuState,
        cp: &CommandProcessor,
        mem: &Mem,
        c: Cap,
    ) -> Option<Stored> {
        let (limits, id, recent) = {
            let mut g = self.lock();
            g.next_id = g.next_id.wrapping_add(1).max(1);
            (g.limits, g.next_id, g.recent.iter().copied().collect())
        };
        let ctx = st.contexts.get(c.ctx).ok()?;
        let mut running = [false; 2];
        for (e, r) in running.iter_mut().enumerate() {
            *r = st
                .engines
                .get(e)
                .and_then(|es| es.current)
                .is_some_and(|(x, _)| x == c.ctx);
        }
        let frozen = Frozen {
            id,
            generation: gpu.cfg.generation,
            va_bits: gpu.cfg.va_bits,
            compute_units: gpu.cfg.compute_units,
            engine: c.engine,
            device_ns: gpu.clock.now_ns(),
            ctx,
            running,
            cp,
            failure: c.failure,
            recent,
            inject: &gpu.inject,
        };
        let t0 = std::time::Instant::now();
        let bytes = build::build(&frozen, mem, &limits);
        log::info!(
            "capture {id}: {} of context {} on engine {}: {} bytes in {} us",
            reason::name(c.failure.reason),
            c.ctx,
            c.engine,
            bytes.len(),
            t0.elapsed().as_micros()
        );
        let stored = Stored {
            id,
            ctx: c.ctx,
            engine: c.engine,
            reason: c.failure.reason,
            bytes: Arc::new(bytes),
        };
        let mut g = self.lock();
        while g.captures.len() >= g.limits.keep.max(1) {
            g.captures.pop_front();
        }
        g.captures.push_back(stored.clone());
        Some(stored)
    }
}

/// What to capture.
#[derive(Debug, Clone, Copy)]
struct Cap {
    ctx: u32,
    engine: u32,
    failure: Failure,
}

/// After the scheduler retired `job`'s slice that ended with `end` and
/// produced `events` (engine thread, state lock held): captures the
/// context if its ring stopped.
pub fn on_retire(
    gpu: &Gpu,
    st: &GpuState,
    cp: &CommandProcessor,
    mem: &Mem,
    job: &Job,
    end: &SliceEnd,
    events: &[Event],
) {
    let why = match end {
        SliceEnd::Fault { .. } if job.replayable => return,
        SliceEnd::Fault { .. } | SliceEnd::KernelFault { .. } | SliceEnd::StatusFault(_) => {
            reason::FAULT
        }
        SliceEnd::Error { .. } => reason::ENGINE_ERROR,
        _ => return,
    };
    if !gpu.capture.limits().auto {
        return;
    }
    let error = events.iter().find(|ev| match ev {
        Event::Fault { info, .. } => u32::from(info.ctx_id) == job.ctx,
        Event::EngineError(EngineErrorRecord { ctx_id, .. }) => *ctx_id == job.ctx,
        _ => false,
    });
    let packet_va = match error {
        Some(
            Event::Fault { packet_va, .. }
            | Event::EngineError(EngineErrorRecord { packet_va, .. }),
        ) => Some(*packet_va),
        _ => None,
    };
    let failure = Failure {
        reason: why,
        error: error.map(|ev| ev.to_record(0, gpu.clock.now_ns())),
        packet_va,
    };
    gpu.capture.take(
        gpu,
        st,
        cp,
        mem,
        Cap {
            ctx: job.ctx,
            engine: job.engine,
            failure,
        },
    );
}

/// Serves [`Request::Capture`] `req` on engine `e` (engine thread, state
/// lock held).
pub fn on_request(
    gpu: &Gpu,
    st: &GpuState,
    cp: &CommandProcessor,
    e: u32,
    req: u64,
    ctx: u32,
    why: u32,
) {
    let mem = gpu.memory();
    let failure = Failure {
        reason: why,
        error: None,
        packet_va: None,
    };
    let id = gpu
        .capture
        .take(
            gpu,
            st,
            cp,
            &mem,
            Cap {
                ctx,
                engine: e,
                failure,
            },
        )
        .map(|s| s.id);
    let mut g = gpu.capture.lock();
    // Results nobody collected (the requester gave up) do not pile up.
    if g.results.len() >= 16 {
        g.results.remove(0);
    }
    g.results.push((e as usize, req, id));
}

/// Takes a capture of context `ctx` on `engine` for `why` through the
/// engine's mailbox and waits for it (control side: `CAPTURE`, the control
/// socket).
///
/// # Errors
///
/// [`CaptureError`]: no such context or engine, a reason a driver may not
/// give, the engine lost, the context gone meanwhile.
pub fn request(gpu: &Gpu, ctx: u32, engine: u32, why: u32) -> Result<Stored, CaptureError> {
    if !matches!(why, reason::HANG | reason::DRIVER | reason::ON_DEMAND) {
        return Err(CaptureError::BadReason(why));
    }
    let e = engine as usize;
    if e >= ENGINES {
        return Err(CaptureError::BadEngine(engine));
    }
    let mut st = gpu.lock();
    st.contexts.get(ctx)?;
    let id = gpu.submit(&mut st, e, Request::Capture { ctx, reason: why });
    let (st, alive) = gpu.wait_served(st, e, id);
    drop(st);
    if !alive {
        return Err(CaptureError::EngineLost(e));
    }
    let cid = gpu
        .capture
        .take_result(e, id)
        .ok_or(CaptureError::NotFound)?;
    gpu.capture.get(cid).ok_or(CaptureError::NotFound)
}

/// `CAPTURE_READ`: copies `len` bytes of a capture from `offset` into
/// guest memory at `buf_pa`. `capture_id` 0 names the newest capture of
/// `ctx` (`CTX_NONE`: of any). Returns the capture and the bytes written.
///
/// # Errors
///
/// [`CaptureError::NotFound`], [`CaptureError::BadBuffer`] (outside guest
/// RAM, or more than `CAPTURE_READ_MAX`).
pub fn read_into(
    gpu: &Gpu,
    capture_id: u32,
    ctx: u32,
    offset: u32,
    len: u32,
    buf_pa: u64,
) -> Result<(Stored, u32), CaptureError> {
    let c = if capture_id != 0 {
        gpu.capture.get(capture_id)
    } else {
        gpu.capture.newest((ctx != CTX_NONE).then_some(ctx))
    }
    .ok_or(CaptureError::NotFound)?;
    let bad = CaptureError::BadBuffer { pa: buf_pa, len };
    if len > CAPTURE_READ_MAX {
        return Err(bad);
    }
    let mem = gpu.memory();
    if len > 0 && !in_ram(&mem, buf_pa, u64::from(len)) {
        return Err(bad);
    }
    let start = (offset as usize).min(c.bytes.len());
    let n = (c.bytes.len() - start).min(len as usize);
    let chunk = c.bytes.get(start..start + n).unwrap_or(&[]);
    if n > 0 && mem.write_slice(chunk, GuestAddress(buf_pa)).is_err() {
        return Err(bad);
    }
    Ok((c, n as u32))
}

#[cfg(test)]
mod tests;
