//! Submission: packets appended to the stream's batch (chaining command
//! buffers as they fill), the batch closed by its `FENCE` and submitted —
//! a `SUBMIT` after the other engine's last batch, or written into the
//! stream's user-mode queue — and what waits for it retired with its fence.

use std::time::Duration;

use vgpu_hwif::packet::{self, Packet};

use super::{Batch, Notify, StreamShared, StreamState, ENGINE_COPY};
use crate::cmdbuf::CmdError;
use crate::context::{CtxInner, PendingWork};
use crate::error::{Error, Result};
use crate::fence::{wait_all, SyncPoint, WaitPath};
use crate::kmd::SubmitSyncs;
use crate::memory::Block;
use crate::sync as syncobj;
use crate::trace;
use crate::uapi;
use crate::uq::UqError;

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
    pub(super) fn flush_locked(&self, st: &mut StreamState, call: &'static str) -> Result<()> {
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
    pub(super) fn last_fences(&self) -> Vec<SyncPoint> {
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
