//! The control processor: executes one command already copied out of guest
//! memory and produces its reply.
//!
//! Every input produces exactly one reply that starts with a
//! [`ReplyHeader`]: decoding errors (truncated, oversized, unknown opcode,
//! non-zero reserved fields) are answered with the matching [`Status`] and
//! echo the opcode and tag when the command had a header. A valid command
//! whose successful reply would not fit in the driver's reply buffer is not
//! executed and is answered [`Status::BadDescriptor`] (the buffer is large
//! enough for a header, which the transport guarantees).
//!
//! Commands act on the GPU model ([`Gpu`]): contexts and rings change
//! under the state lock; what only an engine may do (resets, TLB
//! invalidations) is asked of the engine, and the reply waits until it is
//! done, so that a driver can rely on it when the reply arrives — e.g. no
//! stale translation survives an acknowledged `TLB_INVALIDATE`. A
//! `DOORBELL` only sets the ring's doorbell register; the engine validates
//! and executes the work asynchronously and reports problems as events.

use std::sync::Arc;

use vgpu_hwif::event::{Event, EVENT_RECORD_SIZE};
use vgpu_hwif::layout::FINGERPRINT;
use vgpu_hwif::mmu::va_bits;
use vgpu_hwif::packet::EngineError;
use vgpu_hwif::pod::Pod;
use vgpu_hwif::proto::SanReportReply;
use vgpu_hwif::proto::{
    engine, stats_kind, CaptureReadReply, CaptureReply, Command, CommandHeader, EngineResetReply,
    IdentifyReply, Opcode, PingReply, RasQueryReply, ReplyHeader, Status, TimeReply, CTX_NONE,
    DESTROY_FLAG_FORCE, FAULT_RESUME_ABORT, FAULT_RESUME_RETRY, IDENTIFY_MAGIC, MAX_COMMAND_SIZE,
    MAX_CONTEXTS, MAX_RING_SIZE, MIN_RING_SIZE, PAGE_SIZE_2M, PAGE_SIZE_4K, PROTOCOL_VERSION,
    SAN_MEM_OWN, SAN_MEM_OWN_TABLES, SAN_MEM_RANGES,
};

use super::capture::CaptureError;
use super::capture_ctl as capture;
use super::context::{Context, ContextError};
use super::counters::Counters;
use super::doorbell::{self, WatchError};
use super::gpu::{Gpu, Request, ENGINES};
use super::ras::{RasError, RasTable};
use super::reset::{self, ResetError};
use super::ring::{self, Ring, RingError, RingState};
use super::sanitize::tlb::OwnError;
use super::sanitize_hooks as hooks;
use super::telemetry::Stats;
use crate::config::DeviceConfig;
use vgpu_hwif::proto::WATCH_KEEP_POINTERS;

/// Size of a reply header.
pub const REPLY_HEADER_SIZE: usize = core::mem::size_of::<ReplyHeader>();

/// The largest reply of any command.
pub const MAX_REPLY_SIZE: usize = {
    let mut max = REPLY_HEADER_SIZE;
    let mut i = 0;
    while i < Opcode::ALL.len() {
        let n = Opcode::ALL[i].reply_size();
        if n > max {
            max = n;
        }
        i += 1;
    }
    max
};

/// Engines the device has: the copy engine and the compute engine (bit
/// `i` = engine `i`, see [`vgpu_hwif::proto::engine`]).
pub const ENGINE_MASK: u32 = (1 << engine::COPY) | (1 << engine::COMPUTE);

/// Why a valid command could not be executed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CommandError {
    /// A context operand or state.
    #[error(transparent)]
    Context(#[from] ContextError),
    /// A ring operand or state.
    #[error(transparent)]
    Ring(#[from] RingError),
    /// A reset failed.
    #[error(transparent)]
    Reset(#[from] ResetError),
    /// An operand is out of range.
    #[error("{0}")]
    Invalid(&'static str),
    /// The table of retired pages refused the page.
    #[error(transparent)]
    Ras(#[from] RasError),
    /// A capture could not be taken or read.
    #[error(transparent)]
    Capture(#[from] CaptureError),
    /// No stalled fault of that context has that id.
    #[error("context {ctx} has no stalled fault {fault_id}")]
    NoSuchFault {
        /// Context.
        ctx: u32,
        /// Fault id.
        fault_id: u64,
    },
    /// The sanitizer keeps no report with that number.
    #[error("no sanitizer report {0}")]
    NoSuchReport(u64),
    /// Pages given back that were not declared.
    #[error("pages given back that were not declared")]
    NotDeclared,
    /// A doorbell or a doorbell watch was refused.
    #[error(transparent)]
    Watch(#[from] WatchError),
}

impl CommandError {
    /// The reply status.
    pub const fn status(&self) -> Status {
        match self {
            CommandError::Context(e) => e.status(),
            CommandError::Ring(e) => e.status(),
            CommandError::Watch(WatchError::Context(e)) => e.status(),
            CommandError::Watch(WatchError::Ring(e)) => e.status(),
            CommandError::Watch(WatchError::BadVa(_) | WatchError::StartWithoutBlock) => {
                Status::InvalidArgument
            }
            CommandError::Watch(WatchError::NotIdle(..)) => Status::Busy,
            CommandError::Reset(ResetError::BadEngine(_)) | CommandError::Invalid(_) => {
                Status::InvalidArgument
            }
            CommandError::Reset(ResetError::EngineLost(_)) => Status::DeviceLost,
            CommandError::NoSuchFault { .. }
            | CommandError::NoSuchReport(_)
            | CommandError::NotDeclared => Status::NotFound,
            CommandError::Ras(RasError::Unaligned(_)) => Status::InvalidArgument,
            CommandError::Ras(RasError::Full) => Status::Busy,
            CommandError::Capture(e) => e.status(),
        }
    }
}

/// One reply, at most [`MAX_REPLY_SIZE`] bytes.
#[derive(Clone, Copy)]
pub struct Reply {
    bytes: [u8; MAX_REPLY_SIZE],
    len: usize,
}

impl Reply {
    fn from_pod<T: Pod>(value: &T) -> Reply {
        let mut bytes = [0u8; MAX_REPLY_SIZE];
        // Every reply struct fits by construction of MAX_REPLY_SIZE; a
        // struct that did not would produce an empty reply, which the
        // transport treats as unanswerable rather than overflowing.
        let len = value.write_to(&mut bytes).unwrap_or(0);
        Reply { bytes, len }
    }

    fn error(cmd: Option<&CommandHeader>, status: Status) -> Reply {
        Reply::from_pod(&ReplyHeader::for_command(cmd, status))
    }

    /// The reply's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        self.bytes.get(..self.len).unwrap_or(&[])
    }

    /// The reply's length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the reply is empty (never the case for replies built here).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The reply's header.
    pub fn header(&self) -> ReplyHeader {
        ReplyHeader::read_from(self.as_bytes()).unwrap_or_else(ReplyHeader::zeroed)
    }

    /// The reply's status, if it is a known one.
    pub fn status(&self) -> Option<Status> {
        Status::from_u32(self.header().status)
    }
}

impl core::fmt::Debug for Reply {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Reply")
            .field("header", &self.header())
            .field("len", &self.len)
            .finish()
    }
}

/// The control processor.
#[derive(Debug)]
pub struct ControlProcessor {
    identity: IdentifyReply,
    counters: Counters,
    gpu: Arc<Gpu>,
    /// Retired pages: outlives resets and drivers.
    ras: RasTable,
}

impl ControlProcessor {
    /// A processor for a device configured as `config`, acting on `gpu`.
    pub fn new(config: &DeviceConfig, gpu: Arc<Gpu>) -> Self {
        ControlProcessor {
            identity: identity(config),
            counters: Counters::default(),
            gpu,
            ras: RasTable::new(),
        }
    }

    /// Decodes and executes `bytes` (a command copied out of guest memory;
    /// the transport passes at most `MAX_COMMAND_SIZE + 1` bytes so that an
    /// oversized command is recognised). `reply_room` is the size of the
    /// driver's reply buffer.
    pub fn process(&mut self, bytes: &[u8], reply_room: usize) -> Reply {
        let (hdr, decoded) = Command::decode(bytes);
        let cmd = match decoded {
            Ok(cmd) => cmd,
            Err(e) => {
                let status = e.status();
                self.counters.count_error(status);
                log::debug!(
                    "control: {} bytes rejected: {:?} -> {}",
                    bytes.len(),
                    e,
                    status.name()
                );
                return Reply::error(hdr.as_ref(), status);
            }
        };
        // `decode` returns a header with every successful command.
        let Some(hdr) = hdr else {
            self.counters.count_error(Status::Truncated);
            return Reply::error(None, Status::Truncated);
        };
        let op = cmd.opcode();
        if op.reply_size() > reply_room {
            self.counters.count_error(Status::BadDescriptor);
            log::debug!(
                "control: {} tag {:#x}: reply buffer of {} bytes cannot hold {} bytes",
                op.name(),
                hdr.tag,
                reply_room,
                op.reply_size()
            );
            return Reply::error(Some(&hdr), Status::BadDescriptor);
        }
        let (ctx, eng) = command_target(&cmd);
        if let Some(status) = self
            .gpu
            .inject
            .on_command(self.gpu.clock.now_ns(), op, ctx, eng)
        {
            self.counters.count_error(status);
            log::debug!(
                "control: {} tag {:#x} -> {} (injected)",
                op.name(),
                hdr.tag,
                status.name()
            );
            return Reply::error(Some(&hdr), status);
        }
        match self.execute(cmd, ReplyHeader::for_command(Some(&hdr), Status::Ok)) {
            Ok(reply) => {
                self.counters.count_command(op);
                log::debug!("control: {} tag {:#x} -> OK", op.name(), hdr.tag);
                reply
            }
            Err(e) => {
                let status = e.status();
                self.counters.count_error(status);
                log::debug!(
                    "control: {} tag {:#x} -> {}: {e}",
                    op.name(),
                    hdr.tag,
                    status.name()
                );
                Reply::error(Some(&hdr), status)
            }
        }
    }

    fn execute(&mut self, cmd: Command, ok: ReplyHeader) -> Result<Reply, CommandError> {
        let gpu = &*self.gpu;
        let header_only = Reply::from_pod(&ok);
        match cmd {
            Command::Identify => Ok(Reply::from_pod(&IdentifyReply {
                hdr: ok,
                features: gpu.sanitizer.features(),
                ..self.identity
            })),
            Command::Ping { cookie } => {
                let event_seq = gpu.post(Event::Ping { cookie });
                Ok(Reply::from_pod(&PingReply {
                    hdr: ok,
                    cookie,
                    event_seq,
                }))
            }
            Command::ContextCreate {
                ctx_id,
                priority,
                flags,
                pt_root,
            } => {
                let ctx = Context::new(ctx_id, priority, flags, pt_root)?;
                gpu.lock().contexts.insert(ctx)?;
                if gpu.sanitizer.enabled() {
                    gpu.sanitizer
                        .context_changed(ctx_id, true, gpu.clock.now_ns());
                }
                Ok(header_only)
            }
            Command::ContextDestroy { ctx_id, flags } => {
                let r = destroy_context(gpu, ctx_id, flags & DESTROY_FLAG_FORCE != 0);
                match r {
                    Err(CommandError::Context(ContextError::Busy(_)))
                        if gpu.sanitizer.enabled() =>
                    {
                        let st = gpu.lock();
                        let mut evs = Vec::new();
                        for e in 0..engine::COUNT {
                            evs.extend(hooks::on_destroy_refused(gpu, &st, ctx_id, e, false));
                        }
                        drop(st);
                        evs.into_iter().for_each(|ev| {
                            gpu.post(ev);
                        });
                    }
                    Ok(()) if gpu.sanitizer.enabled() => {
                        gpu.sanitizer
                            .context_changed(ctx_id, false, gpu.clock.now_ns());
                    }
                    _ => {}
                }
                r?;
                Ok(header_only)
            }
            Command::ContextQuery { ctx_id } => {
                let st = gpu.lock();
                Ok(Reply::from_pod(&st.contexts.get(ctx_id)?.query(ok)))
            }
            Command::RingCreate {
                ctx_id,
                engine: e,
                size,
                ring_va,
                status_va,
            } => {
                let mut st = gpu.lock();
                let ctx = st.contexts.get_mut(ctx_id)?;
                ring::check_create(e, size, ring_va, status_va, gpu.cfg.va_bits)?;
                let slot = ctx
                    .rings
                    .get_mut(e as usize)
                    .ok_or(RingError::BadEngine(e))?;
                if slot.is_some() {
                    return Err(RingError::Exists(ctx_id, e).into());
                }
                *slot = Some(Ring::new(e, ring_va, size, status_va));
                if gpu.sanitizer.enabled() {
                    gpu.sanitizer.state().rings.remove(&(ctx_id, e));
                }
                // The engine writes the initial status block.
                gpu.wake_engine(e as usize);
                Ok(header_only)
            }
            Command::RingDestroy { ctx_id, engine: e } => {
                let mut st = gpu.lock();
                let ctx = st.contexts.get_mut(ctx_id)?;
                if e >= engine::COUNT {
                    return Err(RingError::BadEngine(e).into());
                }
                let slot = ctx
                    .rings
                    .get_mut(e as usize)
                    .ok_or(RingError::BadEngine(e))?;
                match slot {
                    None => Err(RingError::NotFound(ctx_id, e).into()),
                    Some(r) if r.busy() => {
                        let evs = hooks::on_destroy_refused(gpu, &st, ctx_id, e, true);
                        drop(st);
                        evs.into_iter().for_each(|ev| {
                            gpu.post(ev);
                        });
                        Err(RingError::Busy(ctx_id, e).into())
                    }
                    Some(_) => {
                        *slot = None;
                        drop(st);
                        gpu.watch.forget(ctx_id, Some(e));
                        Ok(header_only)
                    }
                }
            }
            Command::Doorbell {
                ctx_id,
                engine: e,
                wptr,
            } => {
                doorbell::ring_doorbell(gpu, ctx_id, e, wptr)?;
                Ok(header_only)
            }
            Command::DoorbellWatch {
                ctx_id,
                engine: e,
                doorbell_va,
                start,
                flags,
            } => {
                let keep = flags & WATCH_KEEP_POINTERS != 0;
                doorbell::watch(gpu, ctx_id, e, doorbell_va, start, keep)?;
                Ok(header_only)
            }
            Command::DoorbellKick => {
                gpu.watch.kick();
                Ok(header_only)
            }
            Command::TlbInvalidate {
                ctx_id,
                engine_mask,
                va,
                size,
            } => {
                let all = (1u32 << engine::COUNT) - 1;
                if engine_mask & !all != 0 {
                    return Err(CommandError::Invalid("engine mask names a missing engine"));
                }
                if va.checked_add(size).is_none() {
                    return Err(CommandError::Invalid("invalidation range wraps"));
                }
                let mask = if engine_mask == 0 { all } else { engine_mask };
                // The watcher's translations are TLB entries of every
                // engine (its lock is never taken under the state lock).
                gpu.watch.invalidate(ctx_id, va, size);
                let mut st = gpu.lock();
                st.contexts.get(ctx_id)?;
                let mut ids = [0u64; ENGINES];
                for (e, id) in ids.iter_mut().enumerate() {
                    if mask & (1 << e) != 0 {
                        *id = gpu.submit(
                            &mut st,
                            e,
                            Request::Invalidate {
                                asid: ctx_id,
                                va,
                                size,
                            },
                        );
                    }
                }
                for (e, id) in ids.into_iter().enumerate() {
                    let (g, alive) = gpu.wait_served(st, e, id);
                    st = g;
                    if !alive {
                        return Err(ResetError::EngineLost(e).into());
                    }
                }
                Ok(header_only)
            }
            Command::FaultResume {
                ctx_id,
                action,
                fault_id,
            } => {
                if action != FAULT_RESUME_RETRY && action != FAULT_RESUME_ABORT {
                    return Err(CommandError::Invalid("unknown FAULT_RESUME action"));
                }
                let mut st = gpu.lock();
                let current: Vec<Option<u32>> = st
                    .engines
                    .iter()
                    .map(|es| es.current.map(|(_, p)| p))
                    .collect();
                let ctx = st.contexts.get_mut(ctx_id)?;
                let priority = ctx.priority;
                let found = ctx.rings.iter_mut().flatten().find(
                    |r| matches!(r.state, RingState::FaultStalled { fault_id: f } if f == fault_id),
                );
                let Some(r) = found else {
                    return Err(CommandError::NoSuchFault {
                        ctx: ctx_id,
                        fault_id,
                    });
                };
                let e = r.engine as usize;
                if action == FAULT_RESUME_RETRY {
                    r.state = RingState::Ready;
                    if current
                        .get(e)
                        .copied()
                        .flatten()
                        .is_some_and(|p| priority > p)
                    {
                        gpu.poke(e);
                    }
                } else {
                    r.state = RingState::Stopped {
                        error: EngineError::PageFault as u32,
                        error_rptr: r.cursor.rptr,
                    };
                }
                r.status_dirty = true;
                gpu.wake_engine(e);
                Ok(header_only)
            }
            Command::EngineReset {
                engine: e,
                hung_ctx,
            } => {
                let hung = (hung_ctx != CTX_NONE).then_some(hung_ctx);
                if hung.is_some_and(|id| id >= MAX_CONTEXTS) {
                    return Err(CommandError::Invalid("hung_ctx is not a context id"));
                }
                let report = reset::reset_engine(gpu, e, hung)?;
                Ok(Reply::from_pod(&EngineResetReply {
                    hdr: ok,
                    engine: e,
                    ctx_id: report.ctx_id,
                    rptr: report.rptr,
                    reserved: 0,
                }))
            }
            Command::DeviceReset => {
                reset::reset_device(gpu, true)?;
                Ok(header_only)
            }
            Command::QueryStats { kind, id } => {
                let st = gpu.lock();
                let stats = match kind {
                    stats_kind::ENGINE => {
                        st.engines
                            .get(id as usize)
                            .ok_or(CommandError::Invalid("no such engine"))?
                            .stats
                    }
                    stats_kind::CONTEXT => st.contexts.get(id)?.stats,
                    stats_kind::DEVICE => {
                        if id != 0 {
                            return Err(CommandError::Invalid("device stats take id 0"));
                        }
                        let mut total = Stats::default();
                        for es in &st.engines {
                            total.add(&es.stats);
                        }
                        total.resets = total.resets.saturating_add(st.device_resets);
                        total
                    }
                    _ => return Err(CommandError::Invalid("unknown stats kind")),
                };
                let mut reply = stats.to_reply(kind, id);
                reply.hdr = ok;
                Ok(Reply::from_pod(&reply))
            }
            Command::RasRetire { pa } => {
                self.ras.retire(pa)?;
                log::warn!(
                    "page {pa:#x} retired by the driver ({} retired)",
                    self.ras.len()
                );
                Ok(header_only)
            }
            Command::Capture {
                ctx_id,
                engine: e,
                reason,
            } => {
                let c = capture::request(gpu, ctx_id, e, reason)?;
                Ok(Reply::from_pod(&CaptureReply {
                    hdr: ok,
                    capture_id: c.id,
                    size: u32::try_from(c.bytes.len()).unwrap_or(u32::MAX),
                }))
            }
            Command::CaptureRead {
                capture_id,
                ctx_id,
                offset,
                len,
                buf_pa,
            } => {
                let (c, written) =
                    capture::read_into(gpu, capture_id, ctx_id, offset, len, buf_pa)?;
                Ok(Reply::from_pod(&CaptureReadReply {
                    hdr: ok,
                    capture_id: c.id,
                    size: u32::try_from(c.bytes.len()).unwrap_or(u32::MAX),
                    written,
                    reason: c.reason,
                    ctx_id: c.ctx,
                    engine: c.engine,
                }))
            }
            Command::TimeQuery => Ok(Reply::from_pod(&TimeReply {
                hdr: ok,
                device_ns: gpu.clock.now_ns(),
            })),
            Command::RasQuery { start } => {
                let (pages, count) = self.ras.query(start);
                Ok(Reply::from_pod(&RasQueryReply {
                    hdr: ok,
                    total: self.ras.len(),
                    count,
                    pages,
                }))
            }
            Command::SanMem { op, count, ranges } => {
                if count == 0 || count as usize > SAN_MEM_RANGES {
                    return Err(CommandError::Invalid("SAN_MEM count out of range"));
                }
                let mem = gpu.memory();
                for r in ranges.iter().take(count as usize) {
                    if r.size == 0 || !crate::core::mmu::in_ram(&mem, r.pa, r.size) {
                        return Err(CommandError::Invalid("SAN_MEM range outside guest RAM"));
                    }
                }
                for r in ranges.iter().take(count as usize) {
                    let shared = &gpu.sanitizer.shared;
                    let res = match op {
                        SAN_MEM_OWN => shared.own(r.pa, r.size),
                        SAN_MEM_OWN_TABLES => shared.own_tables(r.pa, r.size),
                        _ => shared.release(r.pa, r.size),
                    };
                    match res {
                        Ok(()) => {}
                        Err(e @ OwnError::Misaligned { .. }) => {
                            log::debug!("SAN_MEM: {e}");
                            return Err(CommandError::Invalid("SAN_MEM range not 4 KiB aligned"));
                        }
                        Err(e @ OwnError::NotOwned { .. }) => {
                            log::warn!("sanitizer: SAN_MEM release: {e}");
                            return Err(CommandError::NotDeclared);
                        }
                    }
                }
                Ok(header_only)
            }
            Command::SanReport { seq } => {
                let log = gpu.sanitizer.log();
                let r = log.get(seq).ok_or(CommandError::NoSuchReport(seq))?;
                Ok(Reply::from_pod(&SanReportReply {
                    hdr: ok,
                    report: r.to_hwif(),
                }))
            }
        }
    }

    /// Commands and error replies so far (the event and protocol fields are
    /// not kept here and read 0).
    pub fn counters(&self) -> Counters {
        self.counters
    }
}

/// The context and engine a command names (`u32::MAX` for none), for
/// fault-injection filters.
fn command_target(cmd: &Command) -> (u32, u32) {
    match *cmd {
        Command::ContextCreate { ctx_id, .. }
        | Command::ContextDestroy { ctx_id, .. }
        | Command::ContextQuery { ctx_id }
        | Command::TlbInvalidate { ctx_id, .. }
        | Command::FaultResume { ctx_id, .. } => (ctx_id, u32::MAX),
        Command::RingCreate { ctx_id, engine, .. }
        | Command::RingDestroy { ctx_id, engine }
        | Command::Doorbell { ctx_id, engine, .. }
        | Command::DoorbellWatch { ctx_id, engine, .. } => (ctx_id, engine),
        Command::EngineReset { engine, .. } => (u32::MAX, engine),
        _ => (u32::MAX, u32::MAX),
    }
}

/// `CONTEXT_DESTROY`: refuses a context with work in flight unless
/// `force`; a forced destroy first resets every engine executing the
/// context. The context's TLB entries are flushed on every engine.
pub fn destroy_context(gpu: &Gpu, id: u32, force: bool) -> Result<(), CommandError> {
    let mut st = gpu.lock();
    let ctx = st.contexts.get_mut(id)?;
    if ctx.has_work() && !force {
        return Err(ContextError::Busy(id).into());
    }
    ctx.dying = true;
    let mut waits = Vec::with_capacity(2 * ENGINES);
    for e in 0..ENGINES {
        let running = st
            .engines
            .get(e)
            .and_then(|es| es.current)
            .is_some_and(|(c, _)| c == id);
        if running {
            let rid = gpu.submit(
                &mut st,
                e,
                Request::Reset {
                    only_ctx: Some(id),
                    hung_ctx: None,
                    silent: false,
                },
            );
            waits.push((e, rid));
        }
        let rid = gpu.submit(
            &mut st,
            e,
            Request::Invalidate {
                asid: id,
                va: 0,
                size: 0,
            },
        );
        waits.push((e, rid));
    }
    let mut lost = None;
    for (e, rid) in waits {
        let (g, alive) = gpu.wait_served(st, e, rid);
        st = g;
        if !alive {
            lost = Some(e);
        }
        if let Some(es) = st.engines.get_mut(e) {
            es.reset_reports.retain(|(r, _)| *r != rid);
        }
    }
    st.contexts.remove(id);
    drop(st);
    gpu.watch.forget(id, None);
    match lost {
        Some(e) => Err(ResetError::EngineLost(e).into()),
        None => Ok(()),
    }
}

/// The identify data of a device configured as `config` (header zeroed).
pub fn identity(config: &DeviceConfig) -> IdentifyReply {
    IdentifyReply {
        hdr: ReplyHeader::zeroed(),
        magic: IDENTIFY_MAGIC,
        protocol_version: PROTOCOL_VERSION,
        firmware_version: config.generation.firmware_version(),
        generation: config.generation.number(),
        page_sizes: PAGE_SIZE_4K | PAGE_SIZE_2M,
        engine_mask: ENGINE_MASK,
        va_bits: va_bits(config.generation.number()),
        max_contexts: MAX_CONTEXTS,
        min_ring_size: MIN_RING_SIZE,
        max_ring_size: MAX_RING_SIZE,
        compute_units: config.compute_units,
        event_record_size: EVENT_RECORD_SIZE as u32,
        max_command_size: MAX_COMMAND_SIZE as u32,
        layout_fingerprint: FINGERPRINT,
        features: 0,
        reserved: [0; 3],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{DeviceConfig, Generation};
    use crate::core::clock::ManualClock;
    use crate::core::gpu::GpuConfig;
    use vgpu_hwif::event::EventRecord;
    use vgpu_hwif::proto::PingCmd;

    const ROOM: usize = MAX_REPLY_SIZE;

    /// A control processor over a GPU without engine threads (enough for
    /// commands that never wait for an engine), and that GPU.
    fn gen_with_gpu(g: Generation) -> (ControlProcessor, Arc<Gpu>) {
        let cfg = DeviceConfig::new(g, 4).unwrap();
        let gpu = Arc::new(Gpu::new(
            GpuConfig::for_device(&cfg),
            Arc::new(ManualClock::new(0)),
        ));
        (ControlProcessor::new(&cfg, gpu.clone()), gpu)
    }

    fn header(opcode: u32, flags: u32, tag: u64) -> Vec<u8> {
        CommandHeader { opcode, flags, tag }.as_bytes().to_vec()
    }

    fn ping(tag: u64, cookie: u64) -> Vec<u8> {
        PingCmd {
            hdr: CommandHeader {
                opcode: Opcode::Ping as u32,
                flags: 0,
                tag,
            },
            cookie,
        }
        .as_bytes()
        .to_vec()
    }

    fn with_extra(mut v: Vec<u8>, n: usize) -> Vec<u8> {
        v.extend(std::iter::repeat_n(0xAB, n));
        v
    }

    /// Expected reply header for a rejected command.
    struct Case {
        name: &'static str,
        bytes: Vec<u8>,
        status: Status,
        opcode: u32,
        tag: u64,
    }

    #[test]
    fn malformed_commands_get_exact_error_replies() {
        let ping_op = Opcode::Ping as u32;
        let id_op = Opcode::Identify as u32;
        let cases = [
            Case {
                name: "empty",
                bytes: vec![],
                status: Status::Truncated,
                opcode: 0,
                tag: 0,
            },
            Case {
                name: "15 bytes",
                bytes: header(ping_op, 0, 0x1111)[..15].to_vec(),
                status: Status::Truncated,
                opcode: 0,
                tag: 0,
            },
            Case {
                name: "1 byte",
                bytes: vec![2],
                status: Status::Truncated,
                opcode: 0,
                tag: 0,
            },
            Case {
                name: "header-only PING",
                bytes: header(ping_op, 0, 0x2222),
                status: Status::Truncated,
                opcode: ping_op,
                tag: 0x2222,
            },
            Case {
                name: "PING missing one byte",
                bytes: ping(0x2323, 5)[..23].to_vec(),
                status: Status::Truncated,
                opcode: ping_op,
                tag: 0x2323,
            },
            Case {
                name: "PING + 1 byte",
                bytes: with_extra(ping(0x3333, 9), 1),
                status: Status::Oversized,
                opcode: ping_op,
                tag: 0x3333,
            },
            Case {
                name: "IDENTIFY + 8 bytes",
                bytes: with_extra(header(id_op, 0, 0x4444), 8),
                status: Status::Oversized,
                opcode: id_op,
                tag: 0x4444,
            },
            Case {
                name: "MAX_COMMAND_SIZE + 1",
                bytes: with_extra(header(id_op, 0, 0x5555), MAX_COMMAND_SIZE + 1 - 16),
                status: Status::Oversized,
                opcode: id_op,
                tag: 0x5555,
            },
            Case {
                name: "MAX_COMMAND_SIZE + 1, unknown opcode",
                bytes: with_extra(header(0xdead, 0, 0x5656), MAX_COMMAND_SIZE + 1 - 16),
                status: Status::Oversized,
                opcode: 0xdead,
                tag: 0x5656,
            },
            Case {
                name: "unknown opcode",
                bytes: header(0x0999, 0, 0x6666),
                status: Status::UnknownOpcode,
                opcode: 0x0999,
                tag: 0x6666,
            },
            Case {
                name: "opcode 0",
                bytes: header(0, 0, 0x6767),
                status: Status::UnknownOpcode,
                opcode: 0,
                tag: 0x6767,
            },
            Case {
                name: "IDENTIFY with flags",
                bytes: header(id_op, 1, 0x7777),
                status: Status::ReservedNonZero,
                opcode: id_op,
                tag: 0x7777,
            },
            Case {
                name: "PING with high flag bit",
                bytes: {
                    let mut b = ping(0x8888, 1);
                    b[7] = 0x80;
                    b
                },
                status: Status::ReservedNonZero,
                opcode: ping_op,
                tag: 0x8888,
            },
        ];
        for case in cases {
            let (mut cp, gpu) = gen_with_gpu(Generation::Gen1);
            let r = cp.process(&case.bytes, ROOM);
            assert_eq!(r.len(), REPLY_HEADER_SIZE, "{}", case.name);
            let h = r.header();
            assert_eq!(
                h,
                ReplyHeader {
                    status: case.status as u32,
                    opcode: case.opcode,
                    tag: case.tag
                },
                "{}",
                case.name
            );
            assert_eq!(
                gpu.events().pending(),
                0,
                "{}: no event on error",
                case.name
            );
            assert_eq!(cp.counters().errors_for(case.status), 1, "{}", case.name);
            assert_eq!(cp.counters().replies(), 1, "{}", case.name);
        }
    }

    #[test]
    fn identify_gen1_and_gen2() {
        for (g, fw, n, va) in [
            (Generation::Gen1, 0x01_03_00, 1, 40),
            (Generation::Gen2, 0x02_00_01, 2, 48),
        ] {
            let (mut cp, gpu) = gen_with_gpu(g);
            let r = cp.process(&header(Opcode::Identify as u32, 0, 0xabc), ROOM);
            assert_eq!(r.len(), core::mem::size_of::<IdentifyReply>());
            let id = IdentifyReply::read_from(r.as_bytes()).unwrap();
            assert_eq!(
                id,
                IdentifyReply {
                    hdr: ReplyHeader {
                        status: 0,
                        opcode: Opcode::Identify as u32,
                        tag: 0xabc
                    },
                    magic: u32::from_le_bytes(*b"VGPU"),
                    protocol_version: PROTOCOL_VERSION,
                    firmware_version: fw,
                    generation: n,
                    page_sizes: (1 << 12) | (1 << 21),
                    engine_mask: 0b11,
                    va_bits: va,
                    max_contexts: 64,
                    min_ring_size: 4096,
                    max_ring_size: 1 << 20,
                    compute_units: 4,
                    event_record_size: 64,
                    max_command_size: 4096,
                    layout_fingerprint: FINGERPRINT,
                    features: 0,
                    reserved: [0; 3],
                }
            );
            assert_eq!(gpu.events().pending(), 0);
            assert_eq!(cp.counters().commands_for(Opcode::Identify), 1);
        }
    }

    #[test]
    fn ping_replies_with_event_seq_and_posts_event() {
        let (mut cp, gpu) = gen_with_gpu(Generation::Gen2);
        let r = cp.process(&ping(0x77, 0xfeed_beef), ROOM);
        assert_eq!(
            PingReply::read_from(r.as_bytes()).unwrap(),
            PingReply {
                hdr: ReplyHeader {
                    status: 0,
                    opcode: Opcode::Ping as u32,
                    tag: 0x77
                },
                cookie: 0xfeed_beef,
                event_seq: 1
            }
        );
        assert_eq!(r.len(), core::mem::size_of::<PingReply>());
        let rec: EventRecord = gpu.events().commit_front(0).unwrap();
        assert_eq!(rec.seq, 1);
        assert_eq!(rec.timestamp_ns, 0);
        assert_eq!(
            Event::from_record(&rec).unwrap(),
            Event::Ping {
                cookie: 0xfeed_beef
            }
        );
        let r2 = cp.process(&ping(0x78, 1), ROOM);
        assert_eq!(PingReply::read_from(r2.as_bytes()).unwrap().event_seq, 2);
        assert_eq!(cp.counters().commands_for(Opcode::Ping), 2);
    }

    #[test]
    fn reply_that_does_not_fit_is_refused_without_side_effects() {
        let (mut cp, gpu) = gen_with_gpu(Generation::Gen1);
        let room = core::mem::size_of::<PingReply>() - 1;
        let r = cp.process(&ping(0x99, 3), room);
        assert_eq!(
            r.header(),
            ReplyHeader {
                status: Status::BadDescriptor as u32,
                opcode: Opcode::Ping as u32,
                tag: 0x99
            }
        );
        assert_eq!(r.len(), REPLY_HEADER_SIZE);
        assert_eq!(gpu.events().pending(), 0);
        let r = cp.process(&header(Opcode::Identify as u32, 0, 1), REPLY_HEADER_SIZE);
        assert_eq!(r.status(), Some(Status::BadDescriptor));
        assert_eq!(cp.counters().errors_for(Status::BadDescriptor), 2);
        assert_eq!(cp.counters().commands_for(Opcode::Ping), 0);
    }

    #[test]
    fn max_reply_size_is_the_largest_reply() {
        // SAN_REPORT's reply (a whole sanitizer report) is the largest.
        assert_eq!(MAX_REPLY_SIZE, core::mem::size_of::<SanReportReply>());
        assert!(MAX_REPLY_SIZE >= core::mem::size_of::<RasQueryReply>());
        assert!(MAX_REPLY_SIZE >= core::mem::size_of::<IdentifyReply>());
    }
}
