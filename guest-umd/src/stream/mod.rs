//! Streams (ordered queues of GPU work) and events.
//!
//! Files: this one the stream, its state and its life (creation, flush,
//! synchronize, destroy); `submit.rs` batches and their submission;
//! `transfer.rs` copies, fills and writes; `read.rs` device-to-host reads;
//! `event.rs` events and sync-object waits and signals.
//!
//! A stream owns a KMD context with a copy and a compute ring. Work is
//! encoded into command buffers and batched; a batch is submitted when it
//! switches engine, reaches `VGPU_BATCH_OPS` operations, or at a sync point
//! (synchronize, event query/synchronize, a stream waiting on the event,
//! freeing memory). A batch on one engine starts only after the stream's
//! last batch on the other (KMD input fence), so a stream stays ordered.
//! Separate streams are separate device contexts and run concurrently.
//!
//! Each batch ends with a `FENCE` (no event) that writes its seqno into the
//! stream's timeline word, which waits spin on before they block, and
//! signals the stream's timeline sync object (a point per batch): events
//! export their point as a sync_file for other processes and drivers, and
//! streams wait on sync objects ([`Stream::wait`], imported events) in the
//! KMD.

mod event;
mod read;
mod submit;
mod transfer;

pub use event::Event;

use std::fmt;
use std::sync::{Arc, Mutex, Weak};

use vgpu_hwif::packet::Packet;

use crate::cmdbuf::CmdBuf;
use crate::config::SubmitPath;
use crate::context::{Context, CtxInner, PendingWork, UqLog};
use crate::error::{Error, Result};
use crate::fence::SyncPoint;
use crate::memory::Block;
use crate::uapi;
use crate::uq::{UqError, UserQueue};

/// Engine a packet runs on.
pub const ENGINE_COPY: u32 = uapi::ENGINE_COPY;
/// The compute engine.
pub const ENGINE_COMPUTE: u32 = uapi::ENGINE_COMPUTE;

type Notify = Arc<Mutex<Option<SyncPoint>>>;

struct Batch {
    engine: u32,
    bufs: Vec<CmdBuf>,
    ops: u32,
    deferred: Vec<Block>,
    notify: Vec<Notify>,
    in_fences: Vec<uapi::DrmVgpuFence>,
    /// Sync objects the batch waits for in the KMD.
    in_syncs: Vec<uapi::DrmVgpuSync>,
    /// Sync objects the batch signals (besides the stream's timeline).
    out_syncs: Vec<uapi::DrmVgpuSync>,
}

/// Largest piece of a host-to-device write staged at once.
const STAGING_CHUNK: u64 = 4 << 20;
/// Staging bytes of large writes one stream keeps in flight.
const STAGING_IN_FLIGHT: u64 = 16 << 20;

struct StreamState {
    batch: Option<Batch>,
    last: [Option<SyncPoint>; 2],
    next_seq: [u64; 2],
    engine: u32,
    destroyed: bool,
    submits: u64,
    waits: [u64; 3],
    /// The last batch's buffer while it has room: the next batch continues
    /// in it.
    spare: Option<CmdBuf>,
    /// Staging bytes of large writes still in flight, oldest first, with
    /// the batch that frees each.
    staging: std::collections::VecDeque<(u64, SyncPoint)>,
    /// Sync objects the next batch waits for ([`Stream::wait`]).
    next_in_syncs: Vec<uapi::DrmVgpuSync>,
    /// Mapped reads made, and refused (went staged).
    mapped: [u64; 2],
    /// With `VGPU_SUBMIT=user`: the stream's user-mode queue per engine
    /// (no KMD context then).
    uqs: Option<Vec<UserQueue>>,
}

pub(crate) struct StreamShared {
    pub(crate) ctx: Arc<CtxInner>,
    pub(crate) ctx_id: u32,
    timeline: Option<Block>,
    st: Mutex<StreamState>,
}

impl Drop for StreamShared {
    fn drop(&mut self) {
        let destroyed = self.st.lock().unwrap().destroyed;
        if !destroyed {
            let _ = self.synchronize("Stream::drop");
            let uqs = self.st.lock().unwrap().uqs.take();
            match uqs {
                Some(q) => drop(q),
                None => {
                    let _ = self.ctx.kmd.ctx_destroy(self.ctx_id);
                }
            }
        }
        if let Some(b) = self.st.lock().unwrap().spare.take() {
            self.ctx.cmds.lock().unwrap().put(b);
        }
        if let Some(t) = self.timeline.take() {
            self.ctx.retired.lock().unwrap().push(t);
        }
    }
}

/// Counters of a stream.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StreamStats {
    /// Batches submitted (SUBMIT ioctls, or with `VGPU_SUBMIT=user`
    /// batches published through a user-mode queue).
    pub submits: u64,
    /// Synchronizes that finished while spinning, polling, blocking.
    pub waits: [u64; 3],
    /// With `VGPU_SUBMIT=user`: `UQ_KICK` system calls (the device had
    /// stopped polling the doorbell block), over both engines.
    pub kicks: u64,
    /// With `VGPU_SUBMIT=user`: batches that waited for ring space.
    pub ring_waits: u64,
    /// Reads made through mappings of the caller's memory
    /// ([`ReadPath::Mapped`]).
    pub mapped_reads: u64,
    /// Reads that went staged because the KMD refused to map the caller's
    /// memory.
    pub mapped_refused: u64,
}

/// An ordered queue of GPU work. Clones share the stream.
#[derive(Clone)]
pub struct Stream {
    pub(crate) s: Arc<StreamShared>,
}

impl fmt::Debug for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stream")
            .field("ctx_id", &self.s.ctx_id)
            .finish()
    }
}

/// Stream priority (the device schedules higher first).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Priority {
    /// Background.
    Low = 0,
    /// Default.
    Normal = 1,
    /// Interactive.
    High = 2,
    /// Highest.
    Realtime = 3,
}

impl Stream {
    /// A stream of normal priority.
    pub fn new(ctx: &Context) -> Result<Stream> {
        Stream::with_priority(ctx, Priority::Normal)
    }

    /// A stream of the given priority.
    pub fn with_priority(ctx: &Context, prio: Priority) -> Result<Stream> {
        let call = "Stream::new";
        let inner = &ctx.inner;
        inner.check(call)?;
        let mask = (inner.identity.engine_mask & 3) as u32;
        // User-mode queues: one per engine, their ids the stream's contexts
        // (the copy engine's names the stream). Else one KMD context.
        let uqs = match inner.cfg.submit {
            SubmitPath::User => {
                let mut v = Vec::new();
                for e in [ENGINE_COPY, ENGINE_COMPUTE] {
                    let q = UserQueue::new(
                        &inner.kmd,
                        &inner.vas,
                        inner.identity.generation,
                        e,
                        prio as u32,
                    )
                    .map_err(|err| match err {
                        UqError::Kmd(k) => inner.fail(call, 0, k),
                        other => Error::Invalid {
                            call,
                            what: other.to_string(),
                        },
                    })?;
                    v.push(q);
                }
                let mut logs = inner.uq_logs.lock().unwrap();
                logs.retain(|l| l.log.strong_count() > 0);
                for q in &v {
                    logs.push(UqLog {
                        group: v[0].ctx_id,
                        ctx: q.ctx_id,
                        log: Arc::downgrade(&q.log),
                    });
                }
                drop(logs);
                Some(v)
            }
            SubmitPath::Ioctl => None,
        };
        let ctx_id = match &uqs {
            Some(q) => q[0].ctx_id,
            None => inner
                .kmd
                .ctx_create(prio as u32, mask, 0)
                .map_err(|e| inner.fail(call, 0, e))?,
        };
        let owns_ctx = uqs.is_none();
        let destroy = move |inner: &CtxInner| {
            if owns_ctx {
                let _ = inner.kmd.ctx_destroy(ctx_id);
            }
        };
        let timeline = match inner.pool.lock().unwrap().alloc(16) {
            Ok(t) => t,
            Err(source) => {
                destroy(inner);
                return Err(Error::Mem { call, source });
            }
        };
        timeline.bo.write(timeline.offset, &[0u8; 16]);
        let s = Arc::new(StreamShared {
            ctx: inner.clone(),
            ctx_id,
            timeline: Some(timeline),
            st: Mutex::new(StreamState {
                batch: None,
                last: [None, None],
                next_seq: [1, 1],
                engine: ENGINE_COPY,
                destroyed: false,
                spare: None,
                staging: std::collections::VecDeque::new(),
                submits: 0,
                waits: [0; 3],
                next_in_syncs: Vec::new(),
                mapped: [0; 2],
                uqs,
            }),
        });
        let weak: Weak<StreamShared> = Arc::downgrade(&s);
        let pending: Weak<dyn PendingWork> = weak;
        inner.streams.lock().unwrap().push(pending);
        Ok(Stream { s })
    }

    pub(crate) fn s_ctx(&self) -> Arc<CtxInner> {
        self.s.ctx.clone()
    }

    /// The KMD context id behind the stream (shown by vgpu-smi and in errors).
    pub fn kmd_context(&self) -> u32 {
        self.s.ctx_id
    }

    /// The device sanitizer's reports about this stream's context
    /// (`vgpu-device --sanitize`), oldest first, each as one line of text
    /// ([`crate::context::sanitizer_line`]). Empty when the sanitizer is
    /// off or found nothing.
    pub fn sanitizer_reports(&self) -> Result<Vec<String>> {
        let call = "Stream::sanitizer_reports";
        let ctx = &self.s.ctx;
        let mut out = Vec::new();
        let mut after = 0;
        while let Some(r) =
            ctx.kmd
                .san_report(self.s.ctx_id, after)
                .map_err(|source| Error::Kmd {
                    call,
                    ctx: self.s.ctx_id,
                    source,
                })?
        {
            after = r.seq;
            out.push(crate::context::sanitizer_line(ctx.identity.generation, &r));
        }
        Ok(out)
    }

    /// Counters.
    pub fn stats(&self) -> StreamStats {
        let st = self.s.st.lock().unwrap();
        let q = st.uqs.iter().flatten().map(|q| q.stats);
        StreamStats {
            submits: st.submits,
            waits: st.waits,
            kicks: q.clone().map(|s| s.kicks).sum(),
            ring_waits: q.map(|s| s.waited).sum(),
            mapped_reads: st.mapped[0],
            mapped_refused: st.mapped[1],
        }
    }

    /// Appends raw packets for `engine` (for tools and tests; the packets
    /// are encoded for the device's generation).
    pub fn push_packets(&self, engine: u32, packets: &[Packet]) -> Result<()> {
        if engine > ENGINE_COMPUTE {
            return Err(Error::Invalid {
                call: "Stream::push_packets",
                what: format!("engine {engine}"),
            });
        }
        self.s
            .push("Stream::push_packets", Some(engine), packets, vec![], None)
    }

    pub(crate) fn push_dispatch(
        &self,
        call: &'static str,
        p: Packet,
        args: Option<Block>,
    ) -> Result<()> {
        self.s.push(
            call,
            Some(ENGINE_COMPUTE),
            &[p],
            args.into_iter().collect(),
            None,
        )
    }

    /// Submits the batched work now.
    pub fn flush(&self) -> Result<()> {
        let call = "Stream::flush";
        self.s.ctx.check(call)?;
        self.s.flush_all(&self.s.ctx, call).map(|_| ())
    }

    /// Waits for all work queued so far (adaptive wait).
    pub fn synchronize(&self) -> Result<()> {
        self.s.synchronize("Stream::synchronize").map(|_| ())
    }

    /// Waits for the stream's work, then destroys its device context. Later
    /// calls on any clone fail.
    pub fn destroy(&self) -> Result<()> {
        let call = "Stream::destroy";
        if self.s.st.lock().unwrap().destroyed {
            return Err(Error::Invalid {
                call,
                what: "the stream was already destroyed".into(),
            });
        }
        let r = self.s.synchronize(call);
        let uqs = {
            let mut st = self.s.st.lock().unwrap();
            st.destroyed = true;
            st.uqs.take()
        };
        let d = match uqs {
            // Each queue's context goes with it.
            Some(q) => {
                drop(q);
                Ok(())
            }
            None => self.s.ctx.kmd.ctx_destroy(self.s.ctx_id),
        };
        r?;
        d.map_err(|e| self.s.ctx.fail(call, self.s.ctx_id, e))
    }
}
