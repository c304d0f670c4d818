//! Streams (ordered queues of GPU work) and events.
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

use std::fmt;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use vgpu_hwif::packet::{self, Packet};

use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

use crate::cmdbuf::{CmdBuf, CmdError};
use crate::config::{ReadPath, SubmitPath};
use crate::context::{Buffer, Context, CtxInner, PendingWork, UqLog};
use crate::error::{Error, Result};
use crate::fence::{wait_all, SyncPoint, WaitPath};
use crate::kmd::SubmitSyncs;
use crate::memory::Block;
use crate::sync::{self as syncobj, Timeline};
use crate::trace;
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

impl StreamShared {
    fn timeline_sp(&self, engine: u32, seqno: u64, predicted: u64) -> SyncPoint {
        let t = self.timeline.as_ref().expect("live stream");
        SyncPoint {
            kmd: uapi::DrmVgpuFence {
                ctx_id: self.ctx_id,
                engine,
                seqno,
            },
            mem: (seqno == predicted)
                .then(|| (t.bo.clone(), t.offset + 8 * u64::from(engine), seqno)),
            exportable: true,
        }
    }

    /// Submits batch `b` through the stream's user-mode queue of its engine
    /// (`VGPU_SUBMIT=user`): `INDIRECT`s of its command buffers, after a
    /// `SEM_WAIT` on the other engine's timeline word for ordering, written
    /// into the queue's ring and published by its doorbell block. The
    /// batch's seqno is the stream's own (the queue's ring fence).
    fn flush_user(
        &self,
        st: &mut StreamState,
        b: &Batch,
        cmds: &[uapi::DrmVgpuCmd],
        seqno: u64,
        call: &'static str,
    ) -> Result<SyncPoint> {
        let ctx = &*self.ctx;
        if !b.in_syncs.is_empty() || !b.out_syncs.is_empty() {
            return Err(Error::Invalid {
                call,
                what: "a stream on user-mode queues (VGPU_SUBMIT=user) cannot wait for or signal sync objects".into(),
            });
        }
        let t = self.timeline.as_ref().expect("live stream");
        let mut packets = Vec::with_capacity(cmds.len() + 1);
        for f in &b.in_fences {
            packets.push(Packet::SemWait {
                va: t.va() + 8 * u64::from(f.engine),
                value: f.seqno,
                op: packet::SEM_WAIT_GEQ,
            });
        }
        for c in cmds {
            packets.push(Packet::Indirect {
                va: c.va,
                size: c.size as u32,
            });
        }
        let uq = st
            .uqs
            .as_mut()
            .and_then(|q| q.get_mut(b.engine as usize))
            .expect("a queue per engine");
        let sp = SyncPoint {
            kmd: uapi::DrmVgpuFence {
                ctx_id: uq.ctx_id,
                engine: b.engine,
                seqno,
            },
            mem: Some((t.bo.clone(), t.offset + 8 * u64::from(b.engine), seqno)),
            exportable: false,
        };
        let ctx_id = uq.ctx_id;
        let log = cmds.iter().map(|c| (c.va, c.size)).collect();
        uq.submit(&ctx.cfg, &packets, log, sp.clone())
            .map_err(|e| match e {
                UqError::Kmd(k) => ctx.fail(call, ctx_id, k),
                other => Error::Invalid {
                    call,
                    what: other.to_string(),
                },
            })?;
        Ok(sp)
    }

    /// Submits the pending batch, if any.
    fn flush_locked(&self, st: &mut StreamState, call: &'static str) -> Result<()> {
        let Some(mut b) = st.batch.take() else {
            return Ok(());
        };
        let mut span = trace::span("api", "submit");
        trace::set(&mut span, "ctx", self.ctx_id);
        trace::set(&mut span, "engine", b.engine);
        let ctx = &*self.ctx;
        let gen = ctx.identity.generation;
        let e = b.engine as usize;
        let predicted = st.next_seq[e];
        let tl = self.timeline.as_ref().expect("live stream").va() + 8 * u64::from(b.engine);
        let fence = Packet::Fence {
            va: tl,
            seqno: predicted,
            flags: packet::FENCE_NO_EVENT,
        };
        let last = b.bufs.last_mut().expect("a batch has a buffer");
        if last.push(gen, &fence) == Err(CmdError::Full) {
            let mut nb = ctx
                .cmds
                .lock()
                .unwrap()
                .get()
                .map_err(|source| Error::Mem { call, source })?;
            nb.push(gen, &fence)
                .map_err(|source| Error::Cmd { call, source })?;
            b.bufs.push(nb);
        }
        let cmds: Vec<uapi::DrmVgpuCmd> = b
            .bufs
            .iter_mut()
            .filter(|c| !c.batch_is_empty())
            .map(|c| c.finish(gen))
            .collect();
        if ctx.dump.is_some() {
            let d: Vec<(u64, Vec<u32>)> = b
                .bufs
                .iter_mut()
                .filter(|c| !c.batch_is_empty())
                .map(|c| (c.batch_va(), c.written()))
                .collect();
            ctx.dump(self.ctx_id, b.engine, &d);
        }
        if b.bufs.len() > 1 {
            ctx.cmds.lock().unwrap().stats.chained += 1;
        }
        if let Some(q) = st.uqs.as_ref().and_then(|q| q.get(e)) {
            // On a user-mode queue: its own context id, the stream's seqno.
            trace::set(&mut span, "ctx", q.ctx_id);
            trace::set(&mut span, "seqno", predicted);
            trace::set(&mut span, "cmds", cmds.len() as u64);
            trace::set(&mut span, "user_queue", 1);
            let sp = match self.flush_user(st, &b, &cmds, predicted, call) {
                Ok(sp) => sp,
                Err(err) => {
                    let mut cp = ctx.cmds.lock().unwrap();
                    for c in b.bufs {
                        cp.put(c);
                    }
                    drop(cp);
                    ctx.retired.lock().unwrap().extend(b.deferred);
                    return Err(err);
                }
            };
            st.submits += 1;
            st.next_seq[e] = predicted + 1;
            self.retire_batch(st, b, sp);
            return Ok(());
        }
        // The KMD wants the fences of the sync objects waited for to exist:
        // wait (in the UMD) until their points are submitted.
        if let Err(e) = syncobj::wait_submitted(&ctx.kmd, &b.in_syncs) {
            let mut cp = ctx.cmds.lock().unwrap();
            for c in b.bufs {
                cp.put(c);
            }
            drop(cp);
            ctx.retired.lock().unwrap().extend(b.deferred);
            return Err(ctx.fail(call, self.ctx_id, e));
        }
        // No sync object of the stream's own is signalled per batch (an
        // exported fence and a timeline point per submit that nothing but
        // `Event::export_fd` used): an event exported as a sync_file takes
        // its batch's KMD fence (`FENCE_EXPORT`) instead.
        let syncs = SubmitSyncs {
            ins: &b.in_syncs,
            outs: &b.out_syncs,
            bos: &[],
        };
        let mut tries = 0u32;
        let seqno = loop {
            match ctx
                .kmd
                .submit_syncs(self.ctx_id, b.engine, &cmds, &b.in_fences, syncs)
            {
                Ok(s) => break s,
                Err(err)
                    if (err.errno == libc::EAGAIN || err.errno == libc::EBUSY)
                        && tries < 10_000 =>
                {
                    // Ring full or too many jobs pending: block in the KMD
                    // until half of the pending window retired, so the ring
                    // stays busy while this batch waits for room.
                    tries += 1;
                    match &st.last[e] {
                        Some(sp) => {
                            let mut f = sp.kmd;
                            let back = u64::from(uapi::CTX_MAX_PENDING / 2);
                            f.seqno = f.seqno.saturating_sub(back).max(1);
                            let _ = ctx.kmd.wait(&[f], true, 100_000_000);
                        }
                        None => std::thread::sleep(Duration::from_micros(100)),
                    }
                }
                Err(err) => {
                    let mut cp = ctx.cmds.lock().unwrap();
                    for c in b.bufs {
                        cp.put(c);
                    }
                    drop(cp);
                    ctx.retired.lock().unwrap().extend(b.deferred);
                    return Err(ctx.fail(call, self.ctx_id, err));
                }
            }
        };
        trace::set(&mut span, "seqno", seqno);
        trace::set(&mut span, "cmds", cmds.len() as u64);
        st.submits += 1;
        st.next_seq[e] = seqno + 1;
        let sp = self.timeline_sp(b.engine, seqno, predicted);
        self.retire_batch(st, b, sp);
        Ok(())
    }

    /// A submitted batch's command buffers and deferred frees wait for its
    /// fence `sp`; what was waiting for the batch learns it.
    fn retire_batch(&self, st: &mut StreamState, mut b: Batch, sp: SyncPoint) {
        let ctx = &*self.ctx;
        let e = b.engine as usize;
        {
            let mut cp = ctx.cmds.lock().unwrap();
            let keep = b.bufs.pop().expect("a batch has a buffer");
            for c in b.bufs {
                cp.retire(c, sp.clone());
            }
            // Keep the last buffer for the next batch while a quarter of it
            // is free; its batches are all waited for before it is recycled.
            if keep.room() >= (ctx.cfg.cmdbuf_size / 16) as usize {
                let mut keep = keep;
                keep.uses.push(sp.clone());
                st.spare = Some(keep);
            } else {
                cp.retire(keep, sp.clone());
            }
        }
        {
            let mut pool = ctx.pool.lock().unwrap();
            for d in b.deferred {
                pool.free(d, vec![sp.clone()]);
            }
        }
        for n in b.notify {
            *n.lock().unwrap() = Some(sp.clone());
        }
        if let Some(l) = st.last.get_mut(e) {
            *l = Some(sp);
        }
    }

    /// Appends packets for `engine`, chaining command buffers as they fill.
    pub(crate) fn push(
        &self,
        call: &'static str,
        engine: Option<u32>,
        packets: &[Packet],
        deferred: Vec<Block>,
        notify: Option<Notify>,
    ) -> Result<()> {
        let mut span = trace::span("api", call);
        self.ctx.check(call)?;
        let ctx = &*self.ctx;
        let gen = ctx.identity.generation;
        let mut st = self.st.lock().unwrap();
        if st.destroyed {
            return Err(Error::Invalid {
                call,
                what: "the stream was destroyed".into(),
            });
        }
        let engine = engine.unwrap_or(st.batch.as_ref().map_or(st.engine, |b| b.engine));
        trace::set(&mut span, "ctx", self.ctx_id);
        trace::set(&mut span, "engine", engine);
        trace::set(&mut span, "packets", packets.len() as u64);
        if st.batch.as_ref().is_some_and(|b| b.engine != engine) {
            self.flush_locked(&mut st, call)?;
        }
        if st.batch.is_none() {
            let spare = st.spare.take().map(|mut b| {
                b.start = b.len;
                b
            });
            let buf = match spare {
                Some(b) => b,
                None => ctx
                    .cmds
                    .lock()
                    .unwrap()
                    .get()
                    .map_err(|source| Error::Mem { call, source })?,
            };
            // LAB(7) BEGIN cross-engine
            let other = 1 - engine as usize;
            let in_fences = st.last[other]
                .as_ref()
                .filter(|sp| sp.mem_signalled() != Some(true))
                .map(|sp| vec![sp.kmd])
                .unwrap_or_default();
            // LAB(7) END cross-engine
            let in_syncs = std::mem::take(&mut st.next_in_syncs);
            st.batch = Some(Batch {
                engine,
                bufs: vec![buf],
                ops: 0,
                deferred: Vec::new(),
                notify: Vec::new(),
                in_fences,
                in_syncs,
                out_syncs: Vec::new(),
            });
        }
        st.engine = engine;
        for p in packets {
            let b = st.batch.as_mut().expect("batch");
            match b.bufs.last_mut().expect("buffer").push(gen, p) {
                Ok(()) => continue,
                Err(CmdError::Full) => {}
                Err(source) => return Err(Error::Cmd { call, source }),
            }
            // Leave room for the closing FENCE: chain into a new buffer, or
            // submit when the SUBMIT has no room for another one.
            if b.bufs.len() as u32 >= uapi::SUBMIT_MAX_CMDS - 1 {
                self.flush_locked(&mut st, call)?;
                let buf = ctx
                    .cmds
                    .lock()
                    .unwrap()
                    .get()
                    .map_err(|source| Error::Mem { call, source })?;
                st.batch = Some(Batch {
                    engine,
                    bufs: vec![buf],
                    ops: 0,
                    deferred: Vec::new(),
                    notify: Vec::new(),
                    in_fences: Vec::new(),
                    in_syncs: Vec::new(),
                    out_syncs: Vec::new(),
                });
            } else {
                let buf = ctx
                    .cmds
                    .lock()
                    .unwrap()
                    .get()
                    .map_err(|source| Error::Mem { call, source })?;
                b.bufs.push(buf);
            }
            let b = st.batch.as_mut().expect("batch");
            b.bufs
                .last_mut()
                .expect("buffer")
                .push(gen, p)
                .map_err(|source| Error::Cmd { call, source })?;
        }
        let b = st.batch.as_mut().expect("batch");
        b.ops += 1;
        b.deferred.extend(deferred);
        b.notify.extend(notify);
        if b.ops >= ctx.cfg.batch_ops {
            self.flush_locked(&mut st, call)?;
        }
        Ok(())
    }

    /// The stream's latest sync point per engine.
    fn last_fences(&self) -> Vec<SyncPoint> {
        self.st
            .lock()
            .unwrap()
            .last
            .iter()
            .flatten()
            .cloned()
            .collect()
    }

    /// Appends copy-engine packets and submits them at once; returns the
    /// batch's sync point.
    pub(crate) fn submit_copies(
        &self,
        call: &'static str,
        packets: &[Packet],
    ) -> Result<SyncPoint> {
        self.push(call, Some(ENGINE_COPY), packets, vec![], None)?;
        let mut st = self.st.lock().unwrap();
        self.flush_locked(&mut st, call)?;
        st.last[ENGINE_COPY as usize].clone().ok_or(Error::Invalid {
            call,
            what: "the copy left no fence".into(),
        })
    }

    /// Waits for one sync point of this stream.
    pub(crate) fn wait_point(&self, call: &'static str, sp: &SyncPoint) -> Result<()> {
        wait_all(&self.ctx.kmd, &self.ctx.cfg, std::slice::from_ref(sp), None)
            .map(|_| ())
            .map_err(|e| self.ctx.fail(call, self.ctx_id, e))
    }

    pub(crate) fn synchronize(&self, call: &'static str) -> Result<WaitPath> {
        let _span = trace::span("api", call);
        self.ctx.check(call)?;
        let sps = self.flush_all(&self.ctx, call)?;
        let r = wait_all(&self.ctx.kmd, &self.ctx.cfg, &sps, None)
            .map_err(|e| self.ctx.fail(call, self.ctx_id, e))?;
        self.st.lock().unwrap().waits[r as usize] += 1;
        Ok(r)
    }
}

impl PendingWork for StreamShared {
    /// Submits the pending batch and returns the stream's latest fences.
    fn flush_all(&self, _ctx: &CtxInner, call: &'static str) -> Result<Vec<SyncPoint>> {
        let mut st = self.st.lock().unwrap();
        self.flush_locked(&mut st, call)?;
        Ok(st.last.iter().flatten().cloned().collect())
    }
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

    fn check_buf(&self, call: &'static str, b: &Buffer, off: u64, len: u64) -> Result<()> {
        if !Arc::ptr_eq(&b.ctx, &self.s.ctx) {
            return Err(Error::Invalid {
                call,
                what: "buffer belongs to another context".into(),
            });
        }
        if len == 0 {
            return Err(Error::Invalid {
                call,
                what: "zero length".into(),
            });
        }
        b.check_range(off, len)
            .map_err(|source| Error::Mem { call, source })
    }

    /// Sets `len` bytes at `off` to `value` (asynchronous).
    pub fn memset(&self, buf: &Buffer, off: u64, value: u8, len: u64) -> Result<()> {
        self.memset32(buf, off, u32::from_ne_bytes([value; 4]), len)
    }

    /// Repeats the 32-bit little-endian `pattern` over `len` bytes.
    pub fn memset32(&self, buf: &Buffer, off: u64, pattern: u32, len: u64) -> Result<()> {
        let call = "Stream::memset";
        self.check_buf(call, buf, off, len)?;
        let p = Packet::Fill {
            dst: buf.va() + off,
            size: len,
            pattern,
        };
        self.s.push(call, Some(ENGINE_COPY), &[p], vec![], None)
    }

    /// Device-to-device copy of `len` bytes (asynchronous).
    pub fn copy(
        &self,
        dst: &Buffer,
        dst_off: u64,
        src: &Buffer,
        src_off: u64,
        len: u64,
    ) -> Result<()> {
        let call = "Stream::copy";
        self.check_buf(call, dst, dst_off, len)?;
        self.check_buf(call, src, src_off, len)?;
        let p = Packet::Copy {
            src: src.va() + src_off,
            dst: dst.va() + dst_off,
            size: len,
        };
        self.s.push(call, Some(ENGINE_COPY), &[p], vec![], None)
    }

    /// Host-to-device copy (asynchronous: `data` is staged at once, so it
    /// may be reused as soon as this returns).
    pub fn write(&self, dst: &Buffer, off: u64, data: &[u8]) -> Result<()> {
        let call = "Stream::write";
        self.check_buf(call, dst, off, data.len() as u64)?;
        if data.len() as u64 > STAGING_CHUNK {
            return self.write_chunked(call, dst, off, data);
        }
        let ctx = &self.s.ctx;
        let staging = ctx
            .pool
            .lock()
            .unwrap()
            .alloc(data.len() as u64)
            .map_err(|source| Error::Mem { call, source })?;
        staging.bo.write(staging.offset, data);
        let p = Packet::Copy {
            src: staging.va(),
            dst: dst.va() + off,
            size: data.len() as u64,
        };
        self.s
            .push(call, Some(ENGINE_COPY), &[p], vec![staging], None)
    }

    /// A large host-to-device copy in [`STAGING_CHUNK`] pieces, each
    /// submitted at once, with at most [`STAGING_IN_FLIGHT`] bytes of staging
    /// in flight: beyond, the piece waits for the oldest piece's batch, whose
    /// staging block (already faulted in) the pool then hands out again. The
    /// CPU fills one piece while the copy engine moves the previous one.
    fn write_chunked(&self, call: &'static str, dst: &Buffer, off: u64, data: &[u8]) -> Result<()> {
        let ctx = &self.s.ctx;
        for (i, piece) in data.chunks(STAGING_CHUNK as usize).enumerate() {
            let n = piece.len() as u64;
            loop {
                let oldest = {
                    let mut st = self.s.st.lock().unwrap();
                    let busy: u64 = st.staging.iter().map(|(b, _)| b).sum();
                    if busy + n <= STAGING_IN_FLIGHT {
                        break;
                    }
                    match st.staging.pop_front() {
                        Some((_, sp)) => sp,
                        None => break,
                    }
                };
                wait_all(&ctx.kmd, &ctx.cfg, &[oldest], None)
                    .map_err(|e| ctx.fail(call, self.s.ctx_id, e))?;
            }
            let staging = ctx
                .pool
                .lock()
                .unwrap()
                .alloc(n)
                .map_err(|source| Error::Mem { call, source })?;
            staging.bo.write(staging.offset, piece);
            let p = Packet::Copy {
                src: staging.va(),
                dst: dst.va() + off + i as u64 * STAGING_CHUNK,
                size: n,
            };
            self.s
                .push(call, Some(ENGINE_COPY), &[p], vec![staging], None)?;
            let mut st = self.s.st.lock().unwrap();
            self.s.flush_locked(&mut st, call)?;
            if let Some(sp) = st.last[ENGINE_COPY as usize].clone() {
                st.staging.push_back((n, sp));
            }
        }
        Ok(())
    }

    /// Device-to-host copy; returns when `out` holds the data (waits for
    /// the stream's earlier work too).
    ///
    /// By default ([`ReadPath::Mapped`]) the KMD pins and maps `out` itself
    /// for the device and the copy engine writes the bytes straight into it:
    /// one copy, by the device (its faults and memory errors apply). Reads
    /// under [`MAPPED_READ_MIN`](crate::hostmap::MAPPED_READ_MIN), and reads
    /// the KMD refuses to map, go staged: the copy engine moves the bytes
    /// into staging blocks, which the CPU then copies out
    /// (`VGPU_READ=staged` for every read). Every buffer is a mapped BO, so
    /// with `VGPU_READ=direct` this instead waits for the stream's work and
    /// copies straight from the buffer's mapping into `out`: one copy, by
    /// the CPU, and no submission when the stream is idle.
    pub fn read(&self, src: &Buffer, off: u64, out: &mut [u8]) -> Result<()> {
        let call = "Stream::read";
        self.check_buf(call, src, off, out.len() as u64)?;
        if self.s.ctx.cfg.read == ReadPath::Mapped
            && out.len() as u64 >= crate::hostmap::MAPPED_READ_MIN
        {
            let mapped = crate::hostmap::read_mapped(&self.s, call, src.va() + off, out)?;
            self.s.st.lock().unwrap().mapped[usize::from(!mapped)] += 1;
            if mapped {
                return Ok(());
            }
        }
        if self.s.ctx.cfg.read == ReadPath::Direct {
            // The fences' memory values are read with acquire ordering, so
            // the device's writes before them are visible here.
            self.s.synchronize(call)?;
            let b = src.block.as_ref().expect("live buffer");
            b.bo.populate_read();
            b.bo.read_blocks(b.offset + off, out);
            return Ok(());
        }
        if out.len() as u64 > STAGING_CHUNK {
            return self.read_chunked(call, src, off, out);
        }
        let ctx = &self.s.ctx;
        let staging = ctx
            .pool
            .lock()
            .unwrap()
            .alloc(out.len() as u64)
            .map_err(|source| Error::Mem { call, source })?;
        let p = Packet::Copy {
            src: src.va() + off,
            dst: staging.va(),
            size: out.len() as u64,
        };
        let r = self
            .s
            .push(call, Some(ENGINE_COPY), &[p], vec![], None)
            .and_then(|()| self.s.synchronize(call));
        if r.is_ok() {
            staging.bo.read(staging.offset, out);
        }
        let fences = self
            .s
            .st
            .lock()
            .unwrap()
            .last
            .iter()
            .flatten()
            .cloned()
            .collect();
        ctx.pool.lock().unwrap().free(staging, fences);
        r.map(|_| ())
    }

    /// A large device-to-host copy in [`STAGING_CHUNK`] pieces with up to
    /// [`STAGING_IN_FLIGHT`] bytes in flight: the copy engine fills the next
    /// pieces while the CPU copies out the oldest one that completed.
    fn read_chunked(
        &self,
        call: &'static str,
        src: &Buffer,
        off: u64,
        out: &mut [u8],
    ) -> Result<()> {
        let ctx = &self.s.ctx;
        let chunk = STAGING_CHUNK as usize;
        let window = (STAGING_IN_FLIGHT / STAGING_CHUNK) as usize;
        let mut pending: std::collections::VecDeque<(usize, Block, SyncPoint)> = Default::default();
        let mut next = 0;
        let mut result = Ok(());
        while result.is_ok() && (next < out.len() || !pending.is_empty()) {
            if next < out.len() && pending.len() < window {
                let n = chunk.min(out.len() - next);
                let staging = match ctx.pool.lock().unwrap().alloc(n as u64) {
                    Ok(b) => b,
                    Err(source) => {
                        result = Err(Error::Mem { call, source });
                        break;
                    }
                };
                let p = Packet::Copy {
                    src: src.va() + off + next as u64,
                    dst: staging.va(),
                    size: n as u64,
                };
                match self.s.submit_copies(call, &[p]) {
                    Ok(sp) => pending.push_back((next, staging, sp)),
                    Err(e) => {
                        ctx.pool.lock().unwrap().free(staging, self.s.last_fences());
                        result = Err(e);
                        break;
                    }
                }
                next += n;
                continue;
            }
            let Some((at, staging, sp)) = pending.pop_front() else {
                break;
            };
            match self.s.wait_point(call, &sp) {
                Ok(()) => {
                    let n = chunk.min(out.len() - at);
                    staging.bo.read(staging.offset, &mut out[at..at + n]);
                    ctx.pool.lock().unwrap().free(staging, vec![]);
                }
                Err(e) => {
                    ctx.pool.lock().unwrap().free(staging, vec![sp]);
                    result = Err(e);
                }
            }
        }
        // On an error, blocks still in flight go back once the stream's
        // work is done.
        for (_, staging, _) in pending {
            ctx.pool.lock().unwrap().free(staging, self.s.last_fences());
        }
        // Like a small read: the stream's earlier work on both engines is
        // done when this returns.
        result.and_then(|()| self.s.synchronize(call).map(|_| ()))
    }

    /// Records `ev` at the current end of the stream.
    pub fn record(&self, ev: &Event) -> Result<()> {
        let call = "Event::record";
        if ev.imported.is_some() {
            return Err(Error::Invalid {
                call,
                what: "an imported event cannot be recorded".into(),
            });
        }
        if !Arc::ptr_eq(&ev.ctx, &self.s.ctx) {
            return Err(Error::Invalid {
                call,
                what: "event belongs to another context".into(),
            });
        }
        let mut r = ev.rec.lock().unwrap();
        let slot = ev.slot.as_ref().expect("live event");
        let value = r.as_ref().map_or(1, |x| x.value + 1);
        let notify: Notify = Arc::new(Mutex::new(None));
        let packets = [
            Packet::Timestamp { va: slot.va() + 8 },
            Packet::SemSignal {
                va: slot.va(),
                value,
                op: packet::SEM_SIGNAL_WRITE,
            },
        ];
        self.s
            .push(call, None, &packets, vec![], Some(notify.clone()))?;
        *r = Some(Recorded {
            stream: self.s.clone(),
            value,
            sp: notify,
        });
        Ok(())
    }

    /// Makes later work of this stream wait until `ev` completed (a
    /// semaphore wait on the device for an event recorded in this context;
    /// for an imported event, a sync-object wait in the KMD; the CPU does
    /// not block).
    pub fn wait_event(&self, ev: &Event) -> Result<()> {
        let call = "Stream::wait_event";
        if let Some(h) = ev.imported {
            return self.wait_sync(call, h, 0, &ev.ctx);
        }
        let (va, value) = ev.submitted(call)?;
        let p = Packet::SemWait {
            va,
            value,
            op: packet::SEM_WAIT_GEQ,
        };
        self.s.push(call, None, &[p], vec![], None)
    }

    /// Signals `point` of `tl` when the work queued on this stream so far
    /// completed (with its error if it failed). Submits the stream's work.
    pub fn signal(&self, tl: &Timeline, point: u64) -> Result<()> {
        let call = "Stream::signal";
        self.same_ctx(call, &tl.ctx)?;
        // A batch to carry the signal (a NOP when nothing is pending).
        self.s
            .push(call, None, &[Packet::Nop { words: 1 }], vec![], None)?;
        let mut st = self.s.st.lock().unwrap();
        if let Some(b) = st.batch.as_mut() {
            b.out_syncs.push(uapi::DrmVgpuSync {
                handle: tl.handle,
                flags: 0,
                point,
            });
        }
        self.s.flush_locked(&mut st, call)
    }

    /// Makes the stream's later work wait until `point` of `tl` signalled:
    /// the KMD holds the next batch (the CPU does not block, except until
    /// the point is submitted, if it is not yet). Submits the work queued
    /// before it.
    pub fn wait(&self, tl: &Timeline, point: u64) -> Result<()> {
        self.wait_sync("Stream::wait", tl.handle, point, &tl.ctx)
    }

    fn same_ctx(&self, call: &'static str, ctx: &Arc<CtxInner>) -> Result<()> {
        if !Arc::ptr_eq(ctx, &self.s.ctx) {
            return Err(Error::Invalid {
                call,
                what: "the sync object belongs to another context".into(),
            });
        }
        Ok(())
    }

    fn wait_sync(
        &self,
        call: &'static str,
        handle: u32,
        point: u64,
        ctx: &Arc<CtxInner>,
    ) -> Result<()> {
        self.same_ctx(call, ctx)?;
        self.s.ctx.check(call)?;
        let mut st = self.s.st.lock().unwrap();
        self.s.flush_locked(&mut st, call)?;
        st.next_in_syncs.push(uapi::DrmVgpuSync {
            handle,
            flags: 0,
            point,
        });
        Ok(())
    }
}

struct Recorded {
    stream: Arc<StreamShared>,
    value: u64,
    sp: Notify,
}

/// A marker in a stream: query, synchronize, elapsed time between two
/// events from the device's timestamps, and cross-stream waits. Exported
/// as a sync_file fd ([`Event::export_fd`]) it orders another process's (or
/// another driver's) work after it; an event imported from a sync_file
/// ([`Event::import_fd`]) is a fence streams and the host wait for.
pub struct Event {
    ctx: Arc<CtxInner>,
    slot: Option<Block>,
    rec: Mutex<Option<Recorded>>,
    /// An imported event: a binary syncobj holding the imported fence.
    imported: Option<u32>,
}

impl fmt::Debug for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Event")
            .field("va", &self.slot.as_ref().map(Block::va))
            .finish()
    }
}

impl Event {
    /// A new, unrecorded event.
    pub fn new(ctx: &Context) -> Result<Event> {
        let call = "Event::new";
        ctx.inner.check(call)?;
        let slot = ctx
            .inner
            .pool
            .lock()
            .unwrap()
            .alloc(16)
            .map_err(|source| Error::Mem { call, source })?;
        slot.bo.write(slot.offset, &[0u8; 16]);
        Ok(Event {
            ctx: ctx.inner.clone(),
            slot: Some(slot),
            rec: Mutex::new(None),
            imported: None,
        })
    }

    /// An event that completes when the sync_file `fd` signals (another
    /// process's event, another driver's fence); the fd stays the
    /// caller's. It cannot be recorded; streams wait on it
    /// ([`Stream::wait_event`]) in the KMD.
    pub fn import_fd(ctx: &Context, fd: BorrowedFd<'_>) -> Result<Event> {
        let call = "Event::import_fd";
        ctx.inner.check(call)?;
        let kmd = &ctx.inner.kmd;
        let fail = |source| Error::Kmd {
            call,
            ctx: 0,
            source,
        };
        let h = kmd.syncobj_create(0).map_err(fail)?;
        if let Err(e) = kmd.syncobj_fd_to_handle(
            fd.as_raw_fd(),
            h,
            uapi::SYNCOBJ_FD_TO_HANDLE_IMPORT_SYNC_FILE,
        ) {
            let _ = kmd.syncobj_destroy(h);
            return Err(fail(e));
        }
        Ok(Event {
            ctx: ctx.inner.clone(),
            slot: None,
            rec: Mutex::new(None),
            imported: Some(h),
        })
    }

    /// The recorded work's completion as a sync_file fd (close-on-exec):
    /// it signals when the work before the record completed, with an error
    /// status if it failed. Submits the batch holding the record.
    pub fn export_fd(&self) -> Result<OwnedFd> {
        let call = "Event::export_fd";
        let fail = |source| Error::Kmd {
            call,
            ctx: 0,
            source,
        };
        if let Some(h) = self.imported {
            return syncobj::export_sync_file(&self.ctx.kmd, h, 0).map_err(fail);
        }
        self.submitted(call)?;
        let sp = self.sync_point().expect("submitted");
        if !sp.exportable {
            return Err(Error::Invalid {
                call,
                what: "the event's batch went to a user-mode queue, which has no KMD fence".into(),
            });
        }
        self.ctx.kmd.fence_export(sp.kmd).map_err(fail)
    }

    /// An imported event: whether its fence signalled (blocking up to
    /// `deadline`), and with what status.
    fn imported_state(&self, call: &'static str, h: u32, deadline: i64) -> Result<bool> {
        match self
            .ctx
            .kmd
            .syncobj_wait(&[h], deadline, uapi::SYNCOBJ_WAIT_ALL)
        {
            Ok(_) => {}
            Err(e) if e.errno == libc::ETIME || e.errno == libc::ETIMEDOUT => return Ok(false),
            Err(source) => {
                return Err(Error::Kmd {
                    call,
                    ctx: 0,
                    source,
                })
            }
        }
        let fd = syncobj::export_sync_file(&self.ctx.kmd, h, 0).map_err(|source| Error::Kmd {
            call,
            ctx: 0,
            source,
        })?;
        match syncobj::sync_file_status(fd.as_raw_fd()) {
            s if s < 0 => Err(Error::Kmd {
                call,
                ctx: 0,
                source: crate::kmd::KmdError {
                    call: "SYNC_IOC_FILE_INFO",
                    errno: -s,
                },
            }),
            _ => Ok(true),
        }
    }

    /// Submits the batch holding the record, if needed; the semaphore word
    /// and the value it reaches.
    fn submitted(&self, call: &'static str) -> Result<(u64, u64)> {
        self.ctx.check(call)?;
        if self.imported.is_some() {
            return Err(Error::Invalid {
                call,
                what: "an imported event has no record".into(),
            });
        }
        let r = self.rec.lock().unwrap();
        let Some(rec) = r.as_ref() else {
            return Err(Error::Invalid {
                call,
                what: "the event was never recorded".into(),
            });
        };
        if rec.sp.lock().unwrap().is_none() {
            rec.stream.flush_all(&self.ctx, call)?;
        }
        Ok((self.slot.as_ref().expect("live event").va(), rec.value))
    }

    fn sync_point(&self) -> Option<SyncPoint> {
        self.rec
            .lock()
            .unwrap()
            .as_ref()
            .and_then(|r| r.sp.lock().unwrap().clone())
    }

    /// Whether the work before the record completed (never blocks).
    pub fn query(&self) -> Result<bool> {
        let call = "Event::query";
        if let Some(h) = self.imported {
            return self.imported_state(call, h, 0);
        }
        let (_, value) = self.submitted(call)?;
        let slot = self.slot.as_ref().expect("live event");
        if slot.bo.read_u64(slot.offset) >= value {
            return Ok(true);
        }
        let sp = self.sync_point().expect("submitted");
        match self.ctx.kmd.wait(&[sp.kmd], true, 0) {
            Ok(_) => Ok(true),
            Err(e) if e.errno == libc::ETIME || e.errno == libc::ETIMEDOUT => Ok(false),
            Err(e) => Err(self.ctx.fail(call, sp.kmd.ctx_id, e)),
        }
    }

    /// Waits until the work before the record completed.
    pub fn synchronize(&self) -> Result<()> {
        let call = "Event::synchronize";
        if let Some(h) = self.imported {
            return self.imported_state(call, h, i64::MAX).map(|_| ());
        }
        self.submitted(call)?;
        let sp = self.sync_point().expect("submitted");
        wait_all(
            &self.ctx.kmd,
            &self.ctx.cfg,
            std::slice::from_ref(&sp),
            None,
        )
        .map_err(|e| self.ctx.fail(call, sp.kmd.ctx_id, e))?;
        Ok(())
    }

    /// The device time at which the event completed (ns since device start).
    pub fn timestamp_ns(&self) -> Result<u64> {
        let call = "Event::timestamp";
        if !self.query()? {
            return Err(Error::Invalid {
                call,
                what: "the event has not completed".into(),
            });
        }
        let slot = self.slot.as_ref().expect("live event");
        Ok(slot.bo.read_u64(slot.offset + 8))
    }

    /// Device time from `start` to `self`, both completed.
    pub fn elapsed_since(&self, start: &Event) -> Result<Duration> {
        let a = start.timestamp_ns()?;
        let b = self.timestamp_ns()?;
        Ok(Duration::from_nanos(b.saturating_sub(a)))
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        if let Some(h) = self.imported {
            let _ = self.ctx.kmd.syncobj_destroy(h);
        }
        let Some(slot) = self.slot.take() else { return };
        let rec = self.rec.lock().unwrap().take();
        let after = match rec {
            None => vec![],
            Some(r) => {
                if r.sp.lock().unwrap().is_none() {
                    let _ = r.stream.flush_all(&self.ctx, "Event::drop");
                }
                let sp = r.sp.lock().unwrap().clone();
                match sp {
                    Some(sp) => vec![sp],
                    None => {
                        // The record never reached the device.
                        self.ctx.retired.lock().unwrap().push(slot);
                        return;
                    }
                }
            }
        };
        self.ctx.pool.lock().unwrap().free(slot, after);
    }
}
