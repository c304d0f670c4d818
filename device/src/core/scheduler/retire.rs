//! After a slice: [`retire`] puts the job's ring back (its cursor, its
//! new state, the counters) and turns how the slice ended into the
//! events that report it; the ring's status block is written first, so
//! that the driver finds it current when the events arrive. Status blocks
//! that went dirty while their ring was idle are written by
//! [`flush_status`] on each pass of the engine loop.

use std::time::Instant;

use vgpu_hwif::event::{EngineErrorRecord, Event, FaultInfo, FAULT_FLAG_REPLAYABLE};
use vgpu_hwif::packet::EngineError;

use crate::core::context::Context;
use crate::core::cp::{CommandProcessor, Job, SliceEnd, SliceOutput};
use crate::core::gpu::{Gpu, GpuState};
use crate::core::mmu::{Mem, MmuFault};
use crate::core::ring::{Cursor, RingState};
use crate::core::telemetry::{Stats, TraceKind};

/// Where the cursor's packet is in the command buffer the ring called: at
/// depth 1 the packet's own offset, deeper the offset of the `INDIRECT`
/// that leads to it, 0 in the ring itself (`ENGINE_ERROR`'s `cmd_offset`).
pub fn cmd_offset(c: &Cursor) -> u32 {
    if c.depth == 0 {
        0
    } else {
        c.frames.first().map_or(0, |f| f.offset)
    }
}

/// The `FAULT` event of `fault`.
pub fn fault_event(
    ctx: u32,
    e: u32,
    fault: &MmuFault,
    packet_va: u64,
    fault_id: u64,
    stalled: bool,
) -> Event {
    Event::Fault {
        va: fault.va,
        info: FaultInfo {
            ctx_id: ctx as u8,
            engine: e as u8,
            access: fault.access as u8,
            reason: fault.reason as u8,
            level: fault.level,
            flags: if stalled { FAULT_FLAG_REPLAYABLE } else { 0 },
        },
        packet_va,
        fault_id,
        lane_pc: u64::MAX,
    }
}

fn next_id(next: &mut u64) -> u64 {
    let id = *next;
    *next = next.wrapping_add(1).max(1);
    id
}

/// Writes ring `r`'s status block if it is dirty. A fault stops the ring
/// (whatever the context's fault mode), disables further status writes
/// and posts a `FAULT` event.
#[allow(clippy::too_many_arguments)]
fn write_status(
    cp: &mut CommandProcessor,
    mem: &Mem,
    c: &mut Context,
    e: u32,
    va_bits: u32,
    next_fault_id: &mut u64,
    engine_stats: &mut Stats,
    events: &mut Vec<Event>,
) {
    let space = c.space(va_bits);
    let id = c.id;
    let Some(r) = c.ring_mut(e) else { return };
    if !r.status_dirty || r.state == RingState::Running {
        return;
    }
    r.status_dirty = false;
    if r.status_broken {
        return;
    }
    let Err(f) = cp.write_status(mem, space, r.status_va, &r.status()) else {
        return;
    };
    let rptr = r.cursor.rptr;
    r.status_broken = true;
    if !matches!(r.state, RingState::Stopped { .. }) {
        r.state = RingState::Stopped {
            error: EngineError::PageFault as u32,
            error_rptr: rptr,
        };
    }
    let packet_va = r.va_of(rptr);
    r.stats.faults += 1;
    c.stats.faults += 1;
    c.last_fault_va = f.va;
    engine_stats.faults += 1;
    events.push(fault_event(
        id,
        e,
        &f,
        packet_va,
        next_id(next_fault_id),
        false,
    ));
}

/// Writes every dirty status block of engine `e`'s idle rings.
pub fn flush_status(
    st: &mut GpuState,
    e: u32,
    va_bits: u32,
    cp: &mut CommandProcessor,
    mem: &Mem,
    events: &mut Vec<Event>,
) {
    let GpuState {
        contexts,
        engines,
        next_fault_id,
        ..
    } = st;
    let Some(es) = engines.get_mut(e as usize) else {
        return;
    };
    for c in contexts.iter_mut() {
        if c.ring(e).is_some_and(|r| r.status_dirty) {
            write_status(cp, mem, c, e, va_bits, next_fault_id, &mut es.stats, events);
        }
    }
}

/// Puts a job back after its slice: new ring state, counters, status
/// block, and the events the outcome calls for.
pub fn retire(
    gpu: &Gpu,
    st: &mut GpuState,
    cp: &mut CommandProcessor,
    mem: &Mem,
    job: Job,
    out: SliceOutput,
) -> Vec<Event> {
    let e = job.engine;
    let mut events = Vec::new();
    let GpuState {
        contexts,
        engines,
        next_fault_id,
        ..
    } = st;
    let Some(es) = engines.get_mut(e as usize) else {
        return events;
    };
    es.current = None;
    es.interrupted = (out.end == SliceEnd::Interrupted).then_some(job.ctx);
    es.stats.add(&out.stats);
    let Ok(c) = contexts.get_mut(job.ctx) else {
        return events;
    };
    c.stats.add(&out.stats);
    let Some(r) = c.ring_mut(e) else {
        return events;
    };
    r.stats.add(&out.stats);
    r.cursor = job.cursor;
    r.status_dirty = true;
    let rptr = r.cursor.rptr;
    let now_ns = gpu.clock.now_ns();
    match out.end {
        SliceEnd::Idle | SliceEnd::Yield | SliceEnd::Interrupted => {
            r.state = if r.has_packets() {
                RingState::Ready
            } else {
                RingState::Idle
            };
        }
        SliceEnd::SemWait { epoch } => {
            r.state = RingState::SemWait {
                epoch,
                since: Instant::now(),
            };
        }
        SliceEnd::Fault { fault, packet_va } => {
            let id = next_id(next_fault_id);
            r.state = if job.replayable {
                RingState::FaultStalled { fault_id: id }
            } else {
                RingState::Stopped {
                    error: EngineError::PageFault as u32,
                    error_rptr: rptr,
                }
            };
            r.stats.faults += 1;
            c.stats.faults += 1;
            c.last_fault_va = fault.va;
            es.stats.faults += 1;
            cp.record_instant(
                TraceKind::Fault,
                fault.reason.name(),
                &job,
                now_ns,
                packet_va,
                fault.va,
            );
            events.push(fault_event(
                job.ctx,
                e,
                &fault,
                packet_va,
                id,
                job.replayable,
            ));
        }
        SliceEnd::Error {
            code,
            packet_va,
            header,
        } => {
            r.state = RingState::Stopped {
                error: code as u32,
                error_rptr: rptr,
            };
            r.stats.errors += 1;
            c.stats.errors += 1;
            es.stats.errors += 1;
            cp.record_instant(
                TraceKind::Error,
                code.name(),
                &job,
                now_ns,
                packet_va,
                code as u64,
            );
            events.push(Event::EngineError(EngineErrorRecord {
                ctx_id: job.ctx,
                engine: e,
                code: code as u32,
                packet_va,
                rptr,
                depth: job.cursor.depth,
                cmd_offset: cmd_offset(&job.cursor),
                header,
            }));
        }
        SliceEnd::KernelFault {
            fault,
            packet_va,
            lane_pc,
        } => {
            let id = next_id(next_fault_id);
            r.state = RingState::Stopped {
                error: EngineError::PageFault as u32,
                error_rptr: rptr,
            };
            r.stats.faults += 1;
            c.stats.faults += 1;
            c.last_fault_va = fault.va;
            es.stats.faults += 1;
            cp.record_instant(
                TraceKind::Fault,
                fault.reason.name(),
                &job,
                now_ns,
                packet_va,
                fault.va,
            );
            let mut ev = fault_event(job.ctx, e, &fault, packet_va, id, false);
            if let Event::Fault { lane_pc: lp, .. } = &mut ev {
                *lp = lane_pc;
            }
            events.push(ev);
        }
        SliceEnd::StatusFault(fault) => {
            r.status_broken = true;
            r.state = RingState::Stopped {
                error: EngineError::PageFault as u32,
                error_rptr: rptr,
            };
            let packet_va = r.va_of(rptr);
            r.stats.faults += 1;
            c.stats.faults += 1;
            c.last_fault_va = fault.va;
            es.stats.faults += 1;
            events.push(fault_event(
                job.ctx,
                e,
                &fault,
                packet_va,
                next_id(next_fault_id),
                false,
            ));
        }
    }
    // The status block first, then the events that explain it.
    let mut status_events = Vec::new();
    write_status(
        cp,
        mem,
        c,
        e,
        gpu.cfg.va_bits,
        next_fault_id,
        &mut es.stats,
        &mut status_events,
    );
    events.extend(status_events);
    events
}
