//! The sanitizer's hooks on the shared GPU state: what the control
//! processor calls at a doorbell, a destroy or a context's creation, and
//! what the scheduler calls around taking doorbells and retiring a slice.
//! Each does nothing (one relaxed load) when its checks are off; each is
//! called with the GPU state lock held and returns the events to post.

use vgpu_hwif::event::{EngineErrorRecord, Event};
use vgpu_hwif::firmware::FW_POLL_MIN_US;
use vgpu_hwif::mmu::Access;
use vgpu_hwif::packet::EngineError;
use vgpu_hwif::proto::CTX_NONE;
use vgpu_hwif::sanitize::{ring_index, teardown, wait as wait_kind, Check, SAN_PACKET_WORDS};

mod wait;

use super::context::Context;
use super::cp::SliceEnd;
use super::gpu::{Gpu, GpuState};
use super::mmu::{read_words, walk, Mem};
use super::ring::{check_doorbell, Op, Ring, RingState};
use super::sanitize::report::{Location, Prior, Report, Touch};
use super::sanitize::ring::RingSan;
use super::sanitize::WaitTrack;
use wait::{PendingOp, RingView, Unsatisfiable};

/// How long after the driver was told a ring stopped a doorbell on it is
/// a mistake (before that it may have crossed the event).
pub const STOPPED_GRACE_NS: u64 = 100_000_000;

/// Reads the words of ring pointers `from..to` of `r` in `c`'s address
/// space through software walks (`None` for a word that does not
/// translate).
fn ring_words(
    mem: &Mem,
    c: &Context,
    r: &Ring,
    va_bits: u32,
    from: u32,
    n: u32,
) -> Vec<Option<u32>> {
    use vm_memory::Bytes;
    let space = c.space(va_bits);
    let total = (n / 4) as usize;
    let mut out = Vec::with_capacity(total);
    let mut buf = Vec::new();
    // One walk per page (and per wrap of the ring), not per word.
    while out.len() < total {
        let ptr = from.wrapping_add(4 * out.len() as u32);
        let va = r.va_of(ptr);
        let to_wrap = ((r.size - (ptr & (r.size - 1))) / 4) as usize;
        let Ok(m) = walk(mem, &space, va, Access::Execute) else {
            out.push(None);
            continue;
        };
        let run = to_wrap
            .min((m.bytes_left(va) / 4) as usize)
            .min(total - out.len())
            .max(1);
        buf.resize(run * 4, 0);
        if mem
            .read_slice(&mut buf, vm_memory::GuestAddress(m.pa(va)))
            .is_ok()
        {
            out.extend(
                buf.chunks_exact(4)
                    .map(|w| Some(u32::from_le_bytes([w[0], w[1], w[2], w[3]]))),
            );
        } else {
            out.extend(std::iter::repeat_n(None, run));
        }
    }
    out
}

fn ring_loc(r: &Ring) -> Location {
    Location {
        rptr: r.cursor.rptr,
        ring_size: r.size,
        depth: 0,
        packet_va: r.va_of(r.cursor.rptr),
        cmd_offset: 0,
        words: Vec::new(),
    }
}

/// `DOORBELL { ctx, e, wptr }` was received (before the ring's register is
/// set). `found` is whether the context exists.
pub fn on_doorbell(gpu: &Gpu, st: &mut GpuState, ctx: u32, e: u32, wptr: u32) -> Vec<Event> {
    let san = &gpu.sanitizer;
    let mut out = Vec::new();
    if !san.enabled() {
        return out;
    }
    let now = gpu.clock.now_ns();
    let Ok(c) = st.contexts.get(ctx) else {
        let destroyed = san.state().destroyed.get(ctx as usize).copied() == Some(true);
        if san.on(Check::Teardown)
            && destroyed
            && san.first_time(ctx, (11, u64::from(ctx), u64::from(wptr)))
        {
            let r = Report::new(
                Check::Teardown,
                now,
                format!("DOORBELL (wptr {wptr:#x}) for context {ctx}, which was destroyed"),
            )
            .on(ctx, e)
            .kind(teardown::DOORBELL_DESTROYED);
            out.extend(san.emit(r, &gpu.inject));
        }
        return out;
    };
    let Some(r) = c.ring(e) else {
        return out;
    };
    if let RingState::Stopped { error, error_rptr } = r.state {
        let seen = san
            .state()
            .rings
            .get(&(ctx, e))
            .and_then(|s| s.stop_seen_ns);
        if san.on(Check::Teardown)
            && seen.is_some_and(|t| now.saturating_sub(t) >= STOPPED_GRACE_NS)
            && san.first_time(
                ctx,
                (
                    11,
                    u64::from(ctx) << 32 | u64::from(e),
                    u64::from(error_rptr),
                ),
            )
        {
            let mut rep = Report::new(
                Check::Teardown,
                now,
                format!(
                    "DOORBELL (wptr {wptr:#x}) on a ring stopped by {} at rptr {error_rptr:#x}: the doorbell is ignored until the engine is reset",
                    EngineError::from_u32(error).map_or("an error", |x| x.name())
                ),
            )
            .on(ctx, e)
            .kind(teardown::DOORBELL_STOPPED);
            rep.at = Some(ring_loc(r));
            out.extend(san.emit(rep, &gpu.inject));
        }
        return out;
    }
    let mem = gpu.memory();
    let (size, rptr, running) = (r.size, r.cursor.rptr, r.state == RingState::Running);
    let mut report = None;
    {
        let mut sst = san.state();
        let rs = sst.rings.entry((ctx, e)).or_default();
        if !running {
            rs.drop_before(rptr);
        }
        rs.note_doorbell(wptr, now);
        if san.on(Check::RingIndex) && rs.overruns(wptr, size) {
            rs.overrun_reported = Some(wptr);
            let mut rep = Report::new(
                Check::RingIndex,
                now,
                format!(
                    "DOORBELL wptr {wptr:#x} publishes {} bytes ahead of ring pointer {:#x}, whose packets the engine has not read yet: the new packets overwrote them (ring of {size} bytes)",
                    wptr.wrapping_sub(rs.snap_start),
                    rs.snap_start
                ),
            )
            .on(ctx, e)
            .kind(ring_index::OVERRUN);
            rep.history = rs.history_ptrs();
            rep.detail = [
                u64::from(wptr),
                u64::from(rs.snap_start),
                u64::from(rptr),
                u64::from(size),
            ];
            let mut loc = ring_loc(r);
            loc.rptr = rs.snap_start;
            loc.packet_va = r.va_of(rs.snap_start);
            rep.at = Some(loc);
            report = Some(rep);
        } else if san.on(Check::RingUnpublished) && wptr.is_multiple_of(4) {
            let (start, n) = rs.new_range(wptr, rptr);
            if n > 0 && n <= size {
                let words = ring_words(&mem, c, r, gpu.cfg.va_bits, start, n);
                rs.push_words(start, &words, (wptr, now));
            }
        }
        if san.on(Check::XengineHazard) {
            if let Some(i) = super::sanitize::hazard::ring_index(ctx, e) {
                sst.hazards.acquire_all(i);
            }
        }
    }
    if let Some(rep) = report {
        out.extend(san.emit(rep, &gpu.inject));
    }
    out
}

/// Before the engine takes doorbells: holds back those younger than the
/// fetch delay (returns how long until the youngest is old enough), and
/// reports the ones the engine will refuse (`SAN-RING-INDEX`, with the
/// ring's last doorbells). Call [`after_take_doorbells`] after.
pub fn before_take_doorbells(gpu: &Gpu, st: &mut GpuState, e: u32) -> (Option<u64>, Vec<Event>) {
    let san = &gpu.sanitizer;
    let mut out = Vec::new();
    if !san.enabled() {
        return (None, out);
    }
    let now = gpu.clock.now_ns();
    let delay = san.fetch_delay_ns();
    let mut wait: Option<u64> = None;
    let mut reports = Vec::new();
    {
        let mut sst = san.state();
        for c in st.contexts.iter_mut().filter(|c| !c.dying) {
            let id = c.id;
            let Some(r) = c.ring_mut(e) else { continue };
            if r.state == RingState::Running || matches!(r.state, RingState::Stopped { .. }) {
                continue;
            }
            let rs: &mut RingSan = sst.rings.entry((id, e)).or_default();
            rs.drop_before(r.cursor.rptr);
            let Some(new) = r.doorbell else { continue };
            let age = now.saturating_sub(rs.last_doorbell_ns);
            if delay > 0 && age < delay {
                rs.held = r.doorbell.take();
                let left = delay - age;
                wait = Some(wait.map_or(left, |w| w.min(left)));
                continue;
            }
            if !san.on(Check::RingIndex) {
                continue;
            }
            let Err(code) = check_doorbell(new, r.wptr, r.cursor.rptr, r.size) else {
                continue;
            };
            if rs.overrun_reported == Some(new) {
                continue;
            }
            let (kind, what) = if !new.is_multiple_of(4) {
                (ring_index::MISALIGNED, "is not a multiple of 4".to_owned())
            } else if code == EngineError::BadPointer {
                (
                    ring_index::BACKWARDS,
                    format!("is behind the previous write pointer {:#x}", r.wptr),
                )
            } else {
                (
                    ring_index::PAST_RING,
                    format!(
                        "is {} bytes ahead of the read pointer {:#x}: more than the ring's {} bytes",
                        new.wrapping_sub(r.cursor.rptr),
                        r.cursor.rptr,
                        r.size
                    ),
                )
            };
            let mut rep = Report::new(
                Check::RingIndex,
                now,
                format!(
                    "DOORBELL wptr {new:#x} {what}; the engine stops the ring with {}",
                    code.name()
                ),
            )
            .on(id, e)
            .kind(kind);
            rep.history = rs.history_ptrs();
            rep.detail = [
                u64::from(new),
                u64::from(r.wptr),
                u64::from(r.cursor.rptr),
                u64::from(r.size),
            ];
            rep.at = Some(ring_loc(r));
            reports.push(rep);
        }
    }
    for rep in reports {
        out.extend(san.emit(rep, &gpu.inject));
    }
    (wait, out)
}

/// Gives the doorbells [`before_take_doorbells`] held back to their rings
/// again (unless a newer one arrived meanwhile).
pub fn after_take_doorbells(gpu: &Gpu, st: &mut GpuState, e: u32) {
    let san = &gpu.sanitizer;
    if !san.enabled() {
        return;
    }
    let mut sst = san.state();
    for c in st.contexts.iter_mut() {
        let id = c.id;
        let Some(r) = c.ring_mut(e) else { continue };
        if let Some(rs) = sst.rings.get_mut(&(id, e)) {
            if let Some(h) = rs.held.take() {
                r.doorbell.get_or_insert(h);
            }
        }
    }
}

/// `FW_STATUS` poll `poll` of boot `boot` came `gap_ns` after the
/// previous one, sooner than the boot protocol allows (`SAN-FW-POLL`,
/// once per boot).
pub fn on_fast_poll(gpu: &Gpu, boot: u32, poll: u32, gap_ns: u64) -> Option<Event> {
    let san = &gpu.sanitizer;
    if !san.on(Check::FwPoll) || !san.first_time(CTX_NONE, (16, u64::from(boot), 0)) {
        return None;
    }
    let min_us = FW_POLL_MIN_US;
    let mut r = Report::new(
        Check::FwPoll,
        gpu.clock.now_ns(),
        format!(
            "FW_STATUS poll {} of boot {} came {}.{:03} us after the previous one, while the firmware was booting: the boot protocol asks for at least {min_us} us between polls (the boot ROM answers them on the processor that boots the image); the driver polls without sleeping",
            poll,
            boot,
            gap_ns / 1000,
            gap_ns % 1000
        ),
    );
    r.detail = [gap_ns, min_us * 1000, u64::from(poll), u64::from(boot)];
    san.emit(r, &gpu.inject)
}

/// A non-forced `CONTEXT_DESTROY` or a `RING_DESTROY` of ring (`ctx`, `e`)
/// was refused as busy.
pub fn on_destroy_refused(
    gpu: &Gpu,
    st: &GpuState,
    ctx: u32,
    e: u32,
    ring_only: bool,
) -> Vec<Event> {
    let san = &gpu.sanitizer;
    let mut out = Vec::new();
    if !san.on(Check::Teardown) {
        return out;
    }
    let Some(r) = st.contexts.get(ctx).ok().and_then(|c| c.ring(e)) else {
        return out;
    };
    let now = gpu.clock.now_ns();
    if r.state == RingState::Running {
        san.state()
            .rings
            .entry((ctx, e))
            .or_default()
            .destroy_refused_ns = Some(now);
        return out;
    }
    let pending_doorbell = r.doorbell.is_some_and(|d| d != r.cursor.rptr);
    if r.has_packets() || pending_doorbell {
        out.extend(destroy_report(gpu, ctx, e, r, now, ring_only));
    }
    out
}

fn destroy_report(
    gpu: &Gpu,
    ctx: u32,
    e: u32,
    r: &Ring,
    now: u64,
    ring_only: bool,
) -> Option<Event> {
    let what = if ring_only {
        "RING_DESTROY"
    } else {
        "CONTEXT_DESTROY without FORCE"
    };
    let mut rep = Report::new(
        Check::Teardown,
        now,
        format!(
            "{what} while the ring had {} unexecuted bytes (rptr {:#x}, wptr {:#x}, {:?}): refused BUSY",
            r.doorbell.unwrap_or(r.wptr).wrapping_sub(r.cursor.rptr),
            r.cursor.rptr,
            r.doorbell.unwrap_or(r.wptr),
            r.state.hw_state()
        ),
    )
    .on(ctx, e)
    .kind(teardown::DESTROY_BUSY);
    rep.at = Some(ring_loc(r));
    gpu.sanitizer.emit(rep, &gpu.inject)
}

fn view_of(c: &Context, r: &Ring, va_bits: u32) -> RingView {
    let pending = r.cursor.pending.map(|p| {
        let op = match p.op {
            Op::Fence { va, seqno, .. } => PendingOp::Write { va, value: seqno },
            Op::SemSignal { va, value, op } => {
                if op == vgpu_hwif::packet::SEM_SIGNAL_ADD {
                    PendingOp::Add { va }
                } else {
                    PendingOp::Write { va, value }
                }
            }
            Op::SemWait { va, value, op } => PendingOp::Wait { va, value, op },
            _ => PendingOp::Other,
        };
        (op, p.words)
    });
    // Work published by a doorbell the engine has not taken yet (its
    // engine busy with another ring, e.g. hung on it) is queued too; a
    // doorbell the engine will refuse (backwards, past the ring) is not.
    let rptr = r.cursor.rptr;
    let wptr = r
        .doorbell
        .filter(|&d| {
            let ahead = d.wrapping_sub(rptr);
            ahead <= r.size && ahead >= r.wptr.wrapping_sub(rptr)
        })
        .unwrap_or(r.wptr);
    RingView {
        ctx: c.id,
        engine: r.engine,
        space: c.space(va_bits),
        va: r.va,
        size: r.size,
        rptr,
        wptr,
        frames: r
            .cursor
            .frames
            .iter()
            .take(r.cursor.depth as usize)
            .map(|f| (f.va, f.size, f.offset))
            .collect(),
        pending,
        blocked: matches!(r.state, RingState::SemWait { .. }),
        packet_va: r.cursor.pending.map_or(0, |p| p.packet_va),
    }
}

/// After a slice of ring (`ctx`, `e`) ended with `end` and was retired:
/// releases for the hazard check, the deferred destroy check, and the
/// analysis of a wait that lasted past the grace.
pub fn after_retire(gpu: &Gpu, st: &mut GpuState, ctx: u32, e: u32, end: &SliceEnd) -> Vec<Event> {
    let san = &gpu.sanitizer;
    let mut out = Vec::new();
    if !san.enabled() {
        return out;
    }
    let now = gpu.clock.now_ns();
    if san.on(Check::XengineHazard) && !matches!(end, SliceEnd::SemWait { .. }) {
        if let Some(i) = super::sanitize::hazard::ring_index(ctx, e) {
            san.state().hazards.release(i, None);
        }
    }
    let refused = san
        .state()
        .rings
        .get_mut(&(ctx, e))
        .and_then(|rs| rs.destroy_refused_ns.take());
    if let (Some(_), Some(r)) = (refused, st.contexts.get(ctx).ok().and_then(|c| c.ring(e))) {
        if r.has_packets() {
            out.extend(destroy_report(gpu, ctx, e, r, now, false));
        }
    }
    if !matches!(end, SliceEnd::SemWait { .. }) {
        san.state().waits.remove(&(ctx, e));
        return out;
    }
    if !san.on(Check::WaitUnsatisfiable) {
        return out;
    }
    let Some((packet_va, rptr)) = st
        .contexts
        .get(ctx)
        .ok()
        .and_then(|c| c.ring(e))
        .map(|r| (r.cursor.pending.map_or(0, |p| p.packet_va), r.cursor.rptr))
    else {
        return out;
    };
    let grace = san.wait_grace_ns();
    let due = {
        let mut sst = san.state();
        let w = sst.waits.entry((ctx, e)).or_insert(WaitTrack {
            packet_va,
            rptr,
            since_ns: now,
            analysed_ns: 0,
            reported: false,
        });
        if w.packet_va != packet_va || w.rptr != rptr {
            *w = WaitTrack {
                packet_va,
                rptr,
                since_ns: now,
                analysed_ns: 0,
                reported: false,
            };
        }
        let due = !w.reported
            && now.saturating_sub(w.since_ns) >= grace
            && now.saturating_sub(w.analysed_ns) >= grace;
        if due {
            w.analysed_ns = now;
        }
        due
    };
    if !due {
        return out;
    }
    let va_bits = gpu.cfg.va_bits;
    let views: Vec<RingView> = st
        .contexts
        .iter()
        .filter(|c| !c.dying)
        .flat_map(|c| {
            c.rings
                .iter()
                .flatten()
                .map(move |r| view_of(c, r, va_bits))
        })
        .collect();
    let Some(target) = views.iter().position(|v| v.ctx == ctx && v.engine == e) else {
        return out;
    };
    let mem = gpu.memory();
    let Some(verdict) = wait::analyse(&mem, gpu.cfg.generation, &views, target) else {
        return out;
    };
    if let Some(w) = san.state().waits.get_mut(&(ctx, e)) {
        w.reported = true;
    }
    let v = &views[target];
    let Some((PendingOp::Wait { va, value, op }, words)) = v.pending else {
        return out;
    };
    let rel = match op {
        vgpu_hwif::packet::SEM_WAIT_GEQ => ">=",
        vgpu_hwif::packet::SEM_WAIT_EQ => "==",
        _ => "!=",
    };
    let waited = now.saturating_sub(san.state().waits.get(&(ctx, e)).map_or(now, |w| w.since_ns));
    let (kind, current, message, prior) = match verdict {
        Unsatisfiable::NothingQueued { current } => (
            wait_kind::NOTHING_QUEUED,
            current,
            format!(
                "SEM_WAIT for [{va:#x}] {rel} {value} (the value is {current}) has waited {:.1} ms and no queued FENCE or SEM_SIGNAL of any ring writes that semaphore with a value that satisfies it",
                waited as f64 / 1e6
            ),
            None,
        ),
        Unsatisfiable::Cycle { current, chain } => {
            let steps: Vec<String> = chain
                .iter()
                .map(|l| {
                    format!(
                        "ctx {} {} at packet {:#x} waits for [{:#x}]",
                        l.ctx,
                        super::sanitize::report::engine_name(l.engine),
                        l.packet_va,
                        l.va
                    )
                })
                .collect();
            let prior = chain.get(1).map(|l| Prior {
                ctx: l.ctx,
                engine: l.engine,
                packet_va: l.packet_va,
                header: 0,
                access: Some(Access::Read),
                time_ns: now,
                what: format!("SEM_WAIT for [{:#x}] {} {}", l.va, rel, l.value),
            });
            (
                wait_kind::CYCLE,
                current,
                format!(
                    "SEM_WAIT for [{va:#x}] {rel} {value} (the value is {current}) is in a cycle of waits: {} -> back to the first; every writer of each semaphore is queued behind the next wait",
                    steps.join(" -> ")
                ),
                prior,
            )
        }
    };
    let mut rep = Report::new(Check::WaitUnsatisfiable, now, message)
        .on(ctx, e)
        .kind(kind);
    rep.at = Some(Location {
        rptr: v.rptr,
        ring_size: v.size,
        depth: v.frames.len() as u32,
        packet_va: v.packet_va,
        cmd_offset: v.frames.first().map_or(0, |f| f.2),
        words: read_words(
            &mem,
            &v.space,
            v.packet_va,
            (words as usize).min(SAN_PACKET_WORDS),
        ),
    });
    rep.touch = Some(Touch {
        access: Access::Read,
        va,
        size: 8,
        pa: walk(&mem, &v.space, va, Access::Read).map_or(0, |m| m.pa(va)),
    });
    rep.prior = prior;
    rep.detail = [value, u64::from(op), current, waited];
    let stop = san.stop_mode();
    rep.stopped = stop;
    out.extend(san.emit(rep, &gpu.inject));
    if stop {
        if let Ok(c) = st.contexts.get_mut(ctx) {
            let id = c.id;
            if let Some(r) = c.ring_mut(e) {
                let rptr = r.cursor.rptr;
                let depth = r.cursor.depth;
                let cmd_offset = r.cursor.frames.first().map_or(0, |f| f.offset);
                r.state = RingState::Stopped {
                    error: EngineError::Sanitizer as u32,
                    error_rptr: rptr,
                };
                r.status_dirty = true;
                r.stats.errors += 1;
                c.stats.errors += 1;
                out.push(Event::EngineError(EngineErrorRecord {
                    ctx_id: id,
                    engine: e,
                    code: EngineError::Sanitizer as u32,
                    packet_va,
                    rptr,
                    depth: if depth > 0 { depth } else { 0 },
                    cmd_offset: if depth > 0 { cmd_offset } else { 0 },
                    header: 0,
                }));
            }
        }
    }
    out
}

/// An event record was handed to the driver: notes when it learnt that a
/// ring stopped.
pub fn on_event_delivered(gpu: &Gpu, ev: &Event) {
    let san = &gpu.sanitizer;
    if !san.on(Check::Teardown) {
        return;
    }
    let key = match *ev {
        Event::EngineError(EngineErrorRecord { ctx_id, engine, .. }) => (ctx_id, engine),
        Event::Fault { info, .. } if info.flags & vgpu_hwif::event::FAULT_FLAG_REPLAYABLE == 0 => {
            (u32::from(info.ctx_id), u32::from(info.engine))
        }
        _ => return,
    };
    let now = gpu.clock.now_ns();
    san.state().rings.entry(key).or_default().stop_seen_ns = Some(now);
}
