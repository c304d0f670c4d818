//! Capture control: what makes the device capture a context — a ring's
//! failure (after the engine retired its slice), the mailbox request an
//! engine serves, `CAPTURE` and the control socket — and `CAPTURE_READ`,
//! over the GPU's state. The captures themselves are built and kept by
//! [`super::capture`].

use std::sync::Arc;

use vgpu_hwif::capture::reason;
use vgpu_hwif::event::{EngineErrorRecord, Event};
use vgpu_hwif::proto::{CAPTURE_READ_MAX, CTX_NONE};
use vm_memory::{Bytes, GuestAddress};

use super::capture::build::{self, Failure, Frozen};
use super::capture::{CaptureError, Stored};
use super::cp::{CommandProcessor, Job, SliceEnd};
use super::gpu::{Gpu, GpuState, Request, ENGINES};
use super::mmu::{in_ram, Mem};

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
    take(
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
    let id = take(
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
    gpu.capture.served(e as usize, req, id);
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

/// Builds and keeps a capture; returns it.
fn take(gpu: &Gpu, st: &GpuState, cp: &CommandProcessor, mem: &Mem, c: Cap) -> Option<Stored> {
    let (id, limits, recent) = gpu.capture.begin();
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
    gpu.capture.keep(stored.clone());
    Some(stored)
}
