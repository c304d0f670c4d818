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
//!
//! `execute` is one `match` over the commands; the longer ones are carried
//! out by the files of this module, one per group: `contexts.rs` (contexts
//! and their stalled faults), `rings.rs`, `memory.rs` (TLB invalidations,
//! retired pages) and `debug.rs` (statistics, captures, the sanitizer's
//! commands).

use std::sync::Arc;

use vgpu_hwif::event::{Event, EVENT_RECORD_SIZE};
use vgpu_hwif::layout::FINGERPRINT;
use vgpu_hwif::mmu::va_bits;
use vgpu_hwif::pod::Pod;
use vgpu_hwif::proto::SanReportReply;
use vgpu_hwif::proto::{
    engine, Command, CommandHeader, DeviceResetReply, EngineResetReply, IdentifyReply,
    MemoryLayoutReply, Opcode, PingReply, ReplyHeader, Status, TimeReply, CTX_NONE,
    DESTROY_FLAG_FORCE, FEATURE_VRAM, IDENTIFY_MAGIC, MAX_COMMAND_SIZE, MAX_CONTEXTS,
    MAX_RING_SIZE, MIN_RING_SIZE, PAGE_SIZE_2M, PAGE_SIZE_4K, PROTOCOL_VERSION,
};

use super::capture::CaptureError;
use super::context::ContextError;
use super::counters::Counters;
use super::doorbell::{self, WatchError};
use super::firmware::FwCommandError;
use super::gpu::Gpu;
use super::post;
use super::ras::{RasError, RasTable};
use super::reset::{self, ResetError};
use super::ring::RingError;
use super::sanitize::owned::Tag;
use crate::config::DeviceConfig;
use vgpu_hwif::proto::WATCH_KEEP_POINTERS;

mod contexts;
mod debug;
mod firmware;
mod memory;
mod power;
mod rings;
#[cfg(test)]
mod tests;

pub use contexts::destroy_context;

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
    /// A firmware command was refused.
    #[error(transparent)]
    Firmware(#[from] FwCommandError),
    /// A power-state change was refused (busy, or a failed transition).
    #[error("power state change refused: {}", .0.name())]
    PowerRefused(Status),
    /// A command a virtual function may not send: what it asks is the
    /// host's (the physical function's) to do.
    #[error("{0} is the host's on a virtual function")]
    HostOnly(&'static str),
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
            CommandError::Firmware(FwCommandError::Busy) => Status::Busy,
            CommandError::Firmware(FwCommandError::NothingLoaded) => Status::NotReady,
            CommandError::PowerRefused(s) => *s,
            CommandError::HostOnly(_) => Status::Unsupported,
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
        let refused = power::refusal(&self.gpu, op).or_else(|| firmware::refusal(&self.gpu, op));
        if let Some(status) = refused {
            self.counters.count_error(status);
            log::debug!(
                "control: {} tag {:#x} -> {}",
                op.name(),
                hdr.tag,
                status.name()
            );
            return Reply::error(Some(&hdr), status);
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
            Ok(mut reply) => {
                let payload = reply.bytes.get_mut(size_of::<ReplyHeader>()..reply.len);
                if let Some(payload) = payload {
                    self.gpu
                        .inject
                        .on_reply(self.gpu.clock.now_ns(), op, ctx, eng, payload);
                }
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
        let (target_ctx, target_engine) = command_target(&cmd);
        match cmd {
            Command::Identify => {
                let vram = gpu.vram.layout();
                let has_vram = if vram.size > 0 { FEATURE_VRAM } else { 0 };
                let (fw_features, firmware_version) = gpu.firmware.identify(gpu.clock.now_ns());
                // A VF's power states are the host's.
                let role = match gpu.partition {
                    Some(_) => vgpu_hwif::proto::FEATURE_VIRTUAL_FUNCTION,
                    None => vgpu_hwif::proto::FEATURE_POWER_STATES,
                };
                Ok(Reply::from_pod(&IdentifyReply {
                    hdr: ok,
                    features: gpu.sanitizer.features() | has_vram | fw_features | role,
                    firmware_version,
                    vram_size: vram.size,
                    visible_vram_size: vram.visible,
                    ..self.identity
                }))
            }
            Command::Ping { cookie } => {
                // An armed `event-corrupt` fault: the event's cookie has
                // bit 0 flipped, the reply's does not.
                let corrupt = gpu.inject.on_command_event(
                    gpu.clock.now_ns(),
                    Opcode::Ping,
                    target_ctx,
                    target_engine,
                );
                let event_seq = post::event(
                    gpu,
                    Event::Ping {
                        cookie: cookie ^ u64::from(corrupt),
                    },
                );
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
                contexts::create(gpu, ctx_id, priority, flags, pt_root)?;
                Ok(header_only)
            }
            Command::ContextDestroy { ctx_id, flags } => {
                contexts::destroy(gpu, ctx_id, flags & DESTROY_FLAG_FORCE != 0)?;
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
                rings::create(gpu, ctx_id, e, size, ring_va, status_va)?;
                Ok(header_only)
            }
            Command::RingDestroy { ctx_id, engine: e } => {
                rings::destroy(gpu, ctx_id, e)?;
                Ok(header_only)
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
                memory::tlb_invalidate(gpu, ctx_id, engine_mask, va, size)?;
                Ok(header_only)
            }
            Command::FaultResume {
                ctx_id,
                action,
                fault_id,
            } => {
                contexts::fault_resume(gpu, ctx_id, action, fault_id)?;
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
                let vram = reset::reset_device(gpu, true)?;
                Ok(Reply::from_pod(&DeviceResetReply {
                    hdr: ok,
                    vram,
                    reserved: 0,
                }))
            }
            Command::MemoryLayout => Ok(Reply::from_pod(&memory_layout(&gpu.vram, ok))),
            Command::QueryStats { kind, id } => debug::query_stats(gpu, kind, id, ok),
            Command::RasRetire { pa } => {
                memory::ras_retire(&mut self.ras, pa)?;
                Ok(header_only)
            }
            Command::Capture {
                ctx_id,
                engine: e,
                reason,
            } => debug::capture(gpu, ctx_id, e, reason, ok),
            Command::CaptureRead {
                capture_id,
                ctx_id,
                offset,
                len,
                buf_pa,
            } => debug::capture_read(gpu, capture_id, ctx_id, offset, len, buf_pa, ok),
            Command::TimeQuery => Ok(Reply::from_pod(&TimeReply {
                hdr: ok,
                device_ns: gpu.clock.now_ns(),
            })),
            Command::RasQuery { start } => Ok(memory::ras_query(&self.ras, start, ok)),
            Command::SanMem {
                op,
                count,
                ranges,
                object,
                gen,
            } => {
                debug::san_mem(gpu, op, count, &ranges, Tag { object, gen })?;
                Ok(header_only)
            }
            Command::FwLoad {
                pa,
                size,
                interface,
            } => firmware::load(gpu, pa, size, interface, ok),
            Command::FwStart => firmware::start(gpu, ok),
            Command::FwStatus => Ok(firmware::status(gpu, ok)),
            Command::FwLogRead { pos, len, buf_pa } => {
                firmware::log_read(gpu, pos, len, buf_pa, ok)
            }
            Command::PowerSet { .. } if gpu.partition.is_some() => {
                Err(CommandError::HostOnly("POWER_SET"))
            }
            Command::PowerSet { state } => power::set(gpu, state, ok),
            Command::PowerStatus => Ok(Reply::from_pod(&gpu.power.reply(gpu.clock.now_ns(), ok))),
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

/// The identify data of a device configured as `config` (header zeroed).
pub fn identity(config: &DeviceConfig) -> IdentifyReply {
    IdentifyReply {
        hdr: ReplyHeader::zeroed(),
        magic: IDENTIFY_MAGIC,
        protocol_version: PROTOCOL_VERSION,
        // The running image's (`IDENTIFY` asks the firmware).
        firmware_version: 0,
        generation: config.generation.number(),
        page_sizes: PAGE_SIZE_4K | PAGE_SIZE_2M,
        engine_mask: ENGINE_MASK,
        va_bits: va_bits(config.generation.number()),
        max_contexts: config.max_contexts(),
        min_ring_size: MIN_RING_SIZE,
        max_ring_size: MAX_RING_SIZE,
        compute_units: config.compute_units,
        event_record_size: EVENT_RECORD_SIZE as u32,
        max_command_size: MAX_COMMAND_SIZE as u32,
        layout_fingerprint: FINGERPRINT,
        features: 0,
        function: config.partition.map_or(0, |p| p.vf),
        vram_size: config.vram.layout.size,
        visible_vram_size: config.vram.layout.visible,
    }
}

/// The `MEMORY_LAYOUT` reply of a device with `vram`.
fn memory_layout(vram: &crate::core::memory::Vram, hdr: ReplyHeader) -> MemoryLayoutReply {
    let l = vram.layout();
    let mut r = MemoryLayoutReply {
        hdr,
        count: 0,
        reset_policy: vram.reset_policy(),
        vram_size: l.size,
        visible_vram_size: l.visible,
        ..MemoryLayoutReply::zeroed()
    };
    for (i, range) in l.ranges().iter().enumerate() {
        let slots = (
            r.base.get_mut(i),
            r.size.get_mut(i),
            r.kind.get_mut(i),
            r.flags.get_mut(i),
        );
        if let (Some(b), Some(s), Some(k), Some(f)) = slots {
            (*b, *s, *k, *f) = (range.base, range.size, range.kind, range.flags);
            r.count += 1;
        }
    }
    r
}
