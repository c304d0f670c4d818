//! The command processor's side of the driver sanitizer: its hooks at a
//! fetch, after each step of a packet, at a packet's completion, at the end
//! of a command buffer and of a slice, and when the engine serves an
//! invalidation. Each turns raw findings (the TLBs', the fetcher's, the
//! shared checks') into reports naming the packet being executed, and in
//! stop mode ends the slice with the engine error `SANITIZER`.
//!
//! Every hook runs only while the sanitizer is enabled (the fetcher's
//! `track` flag, set per slice).

use vgpu_hwif::event::Event;
use vgpu_hwif::mmu::Access;
use vgpu_hwif::packet::EngineError;
use vgpu_hwif::sanitize::{ring_index, Check, SAN_PACKET_WORDS};

use super::{CommandProcessor, Exec, Host, Job, SliceEnd, Stream};
use crate::core::dma::GpuMemory;
use crate::core::inject::Injector;
use crate::core::mmu::read_words;
use crate::core::mmu::Mem;
use crate::core::ring::{InFlight, Op};
use crate::core::sanitize::cmdbuf::Page;
use crate::core::sanitize::fence::{LastFence, Verdict};
use crate::core::sanitize::hazard::{ring_index as hz_ring, Origin};
use crate::core::sanitize::report::{engine_name, Location, Prior, Report, Touch};
use crate::core::sanitize::tlb::{Finding, Role};
use crate::core::sanitize::{pt, Sanitizer, TLB_CHECKS};

/// Reads the 64-bit leaf entry at `pa` (0 if unreadable).
fn read_pte(mem: &Mem, pa: u64) -> u64 {
    use vm_memory::Bytes;
    mem.read_obj::<u64>(vm_memory::GuestAddress(pa))
        .map(u64::from_le)
        .unwrap_or(0)
}

impl CommandProcessor {
    fn sanitizer(&self) -> Option<&Sanitizer> {
        self.san.as_deref().filter(|s| s.enabled())
    }

    /// Start of a slice: installs or removes the TLB checks, notes the
    /// time, and matches the recorded command buffers with the job's.
    /// Returns whether the sanitizer is on for this slice.
    pub(super) fn san_begin(&mut self, host: &dyn Host, job: &Job) -> bool {
        let Some(san) = self.san.clone().filter(|s| s.enabled()) else {
            if self.fetch.track {
                self.fetch.track = false;
                self.tlb.set_san(None);
                for t in &mut self.cu_tlbs {
                    t.set_san(None);
                }
            }
            return false;
        };
        self.fetch.track = true;
        let checks = san.checks();
        let engine = self.engine;
        let now = host.now_ns();
        let mut tlbs: Vec<&mut crate::core::mmu::Tlb> = vec![&mut self.tlb];
        tlbs.extend(self.cu_tlbs.iter_mut());
        for t in tlbs {
            let want = checks & TLB_CHECKS;
            let have = t.san_mut().map(|s| s.checks);
            if have != Some(want) {
                t.set_san(san.tlb_san(engine));
            }
            if let Some(s) = t.san_mut() {
                s.now_ns = now;
                s.findings.clear();
                s.accesses.clear();
            }
        }
        self.san_sync_frames(job);
        true
    }

    /// Records the job's command buffers (after an `INDIRECT` or at a
    /// slice start).
    pub(super) fn san_sync_frames(&mut self, job: &Job) {
        let frames: Vec<(u64, u32)> = job
            .cursor
            .frames
            .iter()
            .take(job.cursor.depth as usize)
            .map(|f| (f.va, f.size))
            .collect();
        self.san_frames.sync(job.ctx, &frames);
    }

    /// Where the job stands, for a report: the packet in flight, or the
    /// next one.
    fn san_loc(&self, mem: &Mem, job: &Job, fl: Option<&InFlight>) -> Location {
        let (stream, pos) = Stream::of(job);
        let packet_va = fl.map_or_else(|| stream.va(pos).0, |f| f.packet_va);
        let words = match &self.san_packet {
            Some((c, va, w)) if *c == job.ctx && *va == packet_va => w.clone(),
            _ => read_words(
                mem,
                &job.space,
                packet_va,
                (fl.map_or(1, |f| f.words) as usize).min(SAN_PACKET_WORDS),
            ),
        };
        Location {
            rptr: job.cursor.rptr,
            ring_size: job.ring_size,
            depth: job.cursor.depth,
            packet_va,
            cmd_offset: job.cursor.frames.first().map_or(0, |f| {
                if job.cursor.depth > 0 {
                    f.offset
                } else {
                    0
                }
            }),
            words,
        }
    }

    /// Emits `r` and posts its event; returns the slice end if the ring
    /// must stop for it.
    fn san_emit(&self, host: &dyn Host, mut r: Report, fl: Option<&InFlight>) -> Option<SliceEnd> {
        let san = self.sanitizer()?;
        let stop = san.stop_mode() && r.at.is_some();
        r.stopped = stop;
        let inj = host.injector();
        let ev = match inj {
            Some(i) => san.emit(r, i),
            None => san.emit(r, &Injector::new()),
        };
        host.post(ev?);
        stop.then(|| SliceEnd::Error {
            code: EngineError::Sanitizer,
            packet_va: fl.map_or(0, |f| f.packet_va),
            header: fl.map_or(0, |f| f.header),
        })
    }

    /// Turns a TLB finding into a report.
    fn finding_report(&self, f: &Finding, job_ctx: u32, now: u64) -> Option<Report> {
        let e = self.engine;
        let r = match *f {
            Finding::Stale {
                asid,
                va,
                pa,
                pte_pa,
                cached,
                now: entry,
                access,
                filled_ns,
            } => {
                let mut r = Report::new(
                    Check::TlbStale,
                    now,
                    format!(
                        "TLB hit for va {va:#x} used page {pa:#x}, but its leaf entry at {pte_pa:#x} now holds {entry:#x} (cached {cached:#x}): the entry changed and no TLB_INVALIDATE covered it"
                    ),
                )
                .on(asid, e);
                r.touch = Some(Touch {
                    access,
                    va,
                    size: 0,
                    pa: pa | (va & 0xfff),
                });
                r.prior = Some(Prior {
                    ctx: asid,
                    engine: e,
                    access: None,
                    time_ns: filled_ns,
                    what: format!("walk that cached va {va:#x} -> {pa:#x}"),
                    ..Prior::default()
                });
                r.detail = [pte_pa, cached, entry, filled_ns];
                r
            }
            Finding::Unowned {
                asid,
                va,
                pa,
                access,
                table,
            } => {
                let what = match table {
                    Some(l) => format!("the level-{l} page table at {pa:#x}"),
                    None => format!("page {pa:#x}"),
                };
                let mut r = Report::new(
                    Check::DmaUnowned,
                    now,
                    format!(
                        "a {} of va {va:#x} reached {what}, which the driver has not declared as GPU memory (SAN_MEM) or already gave back",
                        access.name().to_ascii_lowercase()
                    ),
                )
                .on(asid, e);
                r.touch = Some(Touch {
                    access,
                    va,
                    size: 0,
                    pa,
                });
                r.detail = [pa, table.map_or(0xff, u64::from), 0, 0];
                r
            }
            Finding::InvOrder {
                asid,
                va,
                pa,
                table,
                reuse,
                filled_ns,
            } => {
                let role = match reuse.role {
                    Role::Data => "a data page".to_owned(),
                    Role::Table(l) => format!("a level-{l} page table"),
                };
                let what = if table {
                    "its leaf page table"
                } else {
                    "its page"
                };
                let mut r = Report::new(
                    Check::TlbInvOrder,
                    now,
                    format!(
                        "TLB_INVALIDATE of va {va:#x} (page {pa:#x}) came after {what} had been reused: a walk of ctx {} used it as {role} for va {:#x} while this TLB still held the old translation",
                        reuse.asid, reuse.va
                    ),
                )
                .on(asid, e);
                r.touch = Some(Touch {
                    access: Access::Read,
                    va,
                    size: 4096,
                    pa,
                });
                r.prior = Some(Prior {
                    ctx: reuse.asid,
                    engine: reuse.engine,
                    access: Some(Access::Read),
                    time_ns: reuse.time_ns,
                    what: format!("walk using the page as {role} for va {:#x}", reuse.va),
                    ..Prior::default()
                });
                r.detail = [pa, reuse.va, filled_ns, u64::from(table)];
                r
            }
            Finding::Pt(ref p) => pt::report(p, e, now),
        };
        let _ = job_ctx;
        Some(r)
    }

    /// After a step of `fl`: the TLBs' findings and the step's accesses.
    pub(super) fn san_step(
        &mut self,
        host: &dyn Host,
        mem: &Mem,
        job: &mut Job,
        fl: &InFlight,
        r: &Exec,
    ) -> Option<SliceEnd> {
        let now = host.now_ns();
        let mut findings = Vec::new();
        let mut accesses = Vec::new();
        // Runs after every step: no allocation unless a TLB has something.
        for t in std::iter::once(&mut self.tlb).chain(self.cu_tlbs.iter_mut()) {
            if let Some(s) = t.san_mut() {
                findings.append(&mut s.findings);
                accesses.append(&mut s.accesses);
                s.now_ns = now;
            }
        }
        let mut end = None;
        for f in findings {
            if !self.sanitizer()?.first_time(f.asid(), f.key()) {
                continue;
            }
            if let Some(mut rep) = self.finding_report(&f, job.ctx, now) {
                rep.at = Some(self.san_loc(mem, job, Some(fl)));
                end = end.or(self.san_emit(host, rep, Some(fl)));
            }
        }
        let san = self.san.clone()?;
        if !accesses.is_empty() && san.on(Check::XengineHazard) {
            let ring = hz_ring(job.ctx, job.engine);
            let origin = Origin {
                ctx: job.ctx,
                engine: job.engine,
                packet_va: fl.packet_va,
                header: fl.header,
                time_ns: now,
            };
            let conflicts: Vec<_> = {
                let mut st = san.state();
                accesses
                    .iter()
                    .filter_map(|a| {
                        let c = st
                            .hazards
                            .access(ring?, origin, a.va, a.pa, a.len, a.write)?;
                        Some((*a, c))
                    })
                    .collect()
            };
            for (a, c) in conflicts {
                let mine = if a.write { "writes" } else { "reads" };
                let theirs = if c.prior_wrote { "wrote" } else { "read" };
                let mut rep = Report::new(
                    Check::XengineHazard,
                    now,
                    format!(
                        "{}: the {} engine {mine} bytes at pa {:#x} that the {} engine {theirs} (ctx {}, packet {:#x}, va {:#x}), with no semaphore or fence ordering the two jobs",
                        c.kind.name(),
                        engine_name(job.engine),
                        c.pa,
                        engine_name(c.prior.engine),
                        c.prior.ctx,
                        c.prior.packet_va,
                        c.prior_va
                    ),
                )
                .on(job.ctx, job.engine)
                .kind(c.kind.number());
                rep.at = Some(self.san_loc(mem, job, Some(fl)));
                rep.touch = Some(Touch {
                    access: if a.write { Access::Write } else { Access::Read },
                    va: a.va + (c.pa - a.pa.min(c.pa)),
                    size: a.len,
                    pa: c.pa,
                });
                rep.prior = Some(Prior {
                    ctx: c.prior.ctx,
                    engine: c.prior.engine,
                    packet_va: c.prior.packet_va,
                    header: c.prior.header,
                    access: Some(if c.prior_wrote {
                        Access::Write
                    } else {
                        Access::Read
                    }),
                    time_ns: c.prior.time_ns,
                    what: vgpu_hwif::describe::HeaderWord {
                        generation: san.generation(),
                        word: c.prior.header,
                    }
                    .to_string(),
                });
                rep.detail = [c.pa, c.prior_va, a.va, u64::from(c.kind.number())];
                end = end.or(self.san_emit(host, rep, Some(fl)));
            }
        }
        // A completed SEM_WAIT acquires its semaphore's releases.
        if let (Exec::Done, Op::SemWait { va, .. }) = (r, fl.op) {
            if san.on(Check::XengineHazard) {
                if let (Some(ring), Some(pa)) =
                    (hz_ring(job.ctx, job.engine), self.san_pa(mem, job, va))
                {
                    san.state().hazards.acquire(ring, pa);
                }
            }
        }
        end
    }

    /// The guest-physical address of `va` in the job's space (through the
    /// engine's TLB).
    fn san_pa(&mut self, mem: &Mem, job: &Job, va: u64) -> Option<u64> {
        let mut gm = GpuMemory::new(mem, &mut self.tlb, job.space);
        gm.translate(va, Access::Read).ok().map(|m| m.pa(va))
    }

    /// A packet completed: fences and semaphore signals release, fence
    /// values must grow.
    pub(super) fn san_complete(
        &mut self,
        host: &dyn Host,
        mem: &Mem,
        job: &mut Job,
        fl: &InFlight,
    ) -> Option<SliceEnd> {
        let san = self.san.clone()?;
        let (va, seqno) = match fl.op {
            Op::Fence { va, seqno, .. } => (va, Some(seqno)),
            Op::SemSignal { va, .. } => (va, None),
            _ => return None,
        };
        let pa = self.san_pa(mem, job, va);
        if san.on(Check::XengineHazard) {
            if let Some(ring) = hz_ring(job.ctx, job.engine) {
                san.state().hazards.release(ring, pa);
            }
        }
        let seqno = seqno?;
        if !san.on(Check::FenceRegress) && !san.on(Check::FenceWrap) {
            return None;
        }
        let now = host.now_ns();
        let verdict = san.state().fences.write(
            job.ctx,
            va,
            LastFence {
                value: seqno,
                engine: job.engine,
                packet_va: fl.packet_va,
                header: fl.header,
                time_ns: now,
            },
        );
        let (check, msg, prior) = match verdict {
            Verdict::Ok => return None,
            Verdict::Regress(p) => (
                Check::FenceRegress,
                format!(
                    "FENCE wrote {seqno} to the fence slot at va {va:#x}, which last held {} (written by the {} engine's FENCE at {:#x}): fence values went backwards",
                    p.value,
                    engine_name(p.engine),
                    p.packet_va
                ),
                Some(p),
            ),
            Verdict::Wrapped(p) => (
                Check::FenceWrap,
                format!(
                    "FENCE wrote {seqno} to the fence slot at va {va:#x} after {}: the driver's seqno counter wrapped",
                    p.value
                ),
                Some(p),
            ),
            Verdict::AboutToWrap => (
                Check::FenceWrap,
                format!(
                    "FENCE wrote {seqno} to the fence slot at va {va:#x}: {} seqnos before the 64-bit counter wraps",
                    u64::MAX - seqno
                ),
                None,
            ),
        };
        if !san.on(check)
            || !san.first_time(
                job.ctx,
                (check as u32, u64::from(job.ctx) << 48 ^ va, seqno),
            )
        {
            return None;
        }
        let mut rep = Report::new(check, now, msg).on(job.ctx, job.engine);
        rep.at = Some(self.san_loc(mem, job, Some(fl)));
        rep.touch = Some(Touch {
            access: Access::Write,
            va,
            size: 8,
            pa: pa.unwrap_or(0),
        });
        rep.prior = prior.map(|p| Prior {
            ctx: job.ctx,
            engine: p.engine,
            packet_va: p.packet_va,
            header: p.header,
            access: Some(Access::Write),
            time_ns: p.time_ns,
            what: format!("FENCE of {}", p.value),
        });
        rep.detail = [seqno, prior.map_or(0, |p| p.value), va, pa.unwrap_or(0)];
        self.san_emit(host, rep, Some(fl))
    }

    /// The fetcher read words: ring words are compared with their doorbell
    /// snapshot; command-buffer pages are recorded.
    pub(super) fn san_fetched(&mut self, host: &dyn Host, job: &mut Job) -> Option<SliceEnd> {
        if self.fetch.reads.is_empty() {
            // Served from the prefetch buffer: nothing new was read.
            return None;
        }
        // Taken for the loop and given back empty: its allocation is reused
        // by the next fetch.
        let mut reads = std::mem::take(&mut self.fetch.reads);
        let end = self.san_check_reads(host, job, &reads);
        reads.clear();
        self.fetch.reads = reads;
        end
    }

    fn san_check_reads(
        &mut self,
        host: &dyn Host,
        job: &mut Job,
        reads: &[(u32, usize, usize, u64)],
    ) -> Option<SliceEnd> {
        let san = self.san.clone()?;
        let (stream, _) = Stream::of(job);
        let mut end = None;
        for &(pos, idx, n, va) in reads {
            let Some(words) = self.fetch.buf.get(idx..idx + n) else {
                continue;
            };
            match stream {
                Stream::Ring { .. } => {
                    if !san.on(Check::RingUnpublished) {
                        continue;
                    }
                    let changed = san
                        .state()
                        .rings
                        .get_mut(&(job.ctx, job.engine))
                        .and_then(|r| r.fetched(pos, words));
                    let Some(c) = changed else { continue };
                    let now = host.now_ns();
                    let then = c
                        .then
                        .map_or("unreadable".to_owned(), |w| format!("{w:#010x}"));
                    let mut rep = Report::new(
                        Check::RingUnpublished,
                        now,
                        format!(
                            "ring word at rptr {:#x} (ring+{:#x}) was {then} when DOORBELL {:#x} published it and {:#010x} when the engine fetched it {:.3} ms later: the driver changed published packets (rang before writing them, or without a write barrier)",
                            c.ptr,
                            c.ptr & (job.ring_size - 1),
                            c.doorbell.0,
                            c.now,
                            now.saturating_sub(c.doorbell.1) as f64 / 1e6
                        ),
                    )
                    .on(job.ctx, job.engine);
                    let mut words: Vec<u32> = self
                        .fetch
                        .buf
                        .get(idx..idx + n)
                        .unwrap_or(&[])
                        .iter()
                        .copied()
                        .take(vgpu_hwif::sanitize::SAN_PACKET_WORDS)
                        .collect();
                    // The packet containing the word, if it starts at this read.
                    if pos != job.cursor.rptr {
                        words.clear();
                    }
                    rep.at = Some(Location {
                        rptr: job.cursor.rptr,
                        ring_size: job.ring_size,
                        depth: 0,
                        packet_va: job.ring_va + u64::from(job.cursor.rptr & (job.ring_size - 1)),
                        cmd_offset: 0,
                        words,
                    });
                    rep.touch = Some(Touch {
                        access: Access::Execute,
                        va: job.ring_va + u64::from(c.ptr & (job.ring_size - 1)),
                        size: 4,
                        pa: 0,
                    });
                    rep.prior = Some(Prior {
                        ctx: job.ctx,
                        engine: job.engine,
                        time_ns: c.doorbell.1,
                        what: format!("DOORBELL wptr {:#x}", c.doorbell.0),
                        ..Prior::default()
                    });
                    rep.detail = [
                        u64::from(c.ptr),
                        u64::from(c.then.unwrap_or(0)) | u64::from(c.now) << 32,
                        u64::from(c.doorbell.0),
                        c.doorbell.1,
                    ];
                    end = end.or(self.san_emit(host, rep, None));
                }
                Stream::Buffer { .. } => {
                    if !san.on(Check::CmdbufUnmapped) {
                        continue;
                    }
                    let asid = job.space.asid;
                    let mut v = va & !0xfff;
                    let last = va.saturating_add(4 * n as u64 - 1);
                    while v <= last {
                        if let Some((map, es)) = self.tlb.san_entry(asid, v) {
                            if es.pte_pa != 0 {
                                self.san_frames.fetched(
                                    job.ctx,
                                    job.cursor.depth,
                                    Page {
                                        va: v,
                                        pa: map.pa(v),
                                        pte_pa: es.pte_pa,
                                        pte: es.pte,
                                        reported: false,
                                    },
                                );
                            }
                        }
                        v += 4096;
                    }
                }
            }
        }
        end
    }

    /// Reports command-buffer pages of context `ctx` (all with `None`) that
    /// moved.
    fn san_cmdbufs(
        &mut self,
        mem: &Mem,
        now: u64,
        ctx: Option<u32>,
        job: Option<&Job>,
    ) -> Vec<Report> {
        let Some(san) = self.sanitizer() else {
            return Vec::new();
        };
        if !san.on(Check::CmdbufUnmapped) {
            return Vec::new();
        }
        let moved = self.san_frames.check(ctx, |pa| read_pte(mem, pa));
        let e = self.engine;
        moved
            .into_iter()
            .map(|m| {
                let mut rep = Report::new(
                    Check::CmdbufUnmapped,
                    now,
                    format!(
                        "the command buffer at {:#x} ({} bytes, depth {}) is executing, but the leaf entry of its page {:#x} changed from {:#x} to {:#x}: the driver unmapped or remapped it under the engine",
                        m.buffer_va, m.buffer_size, m.depth, m.page.va, m.page.pte, m.now
                    ),
                )
                .on(m.ctx, e);
                if let Some(j) = job.filter(|j| j.ctx == m.ctx) {
                    rep.at = Some(self.san_loc(mem, j, j.cursor.pending.as_ref()));
                }
                rep.touch = Some(Touch {
                    access: Access::Execute,
                    va: m.page.va,
                    size: 4096,
                    pa: m.page.pa,
                });
                rep.detail = [m.page.pte_pa, m.page.pte, m.now, m.buffer_va];
                rep
            })
            .collect()
    }

    /// A command buffer ended.
    pub(super) fn san_frame_end(
        &mut self,
        host: &dyn Host,
        mem: &Mem,
        job: &mut Job,
    ) -> Option<SliceEnd> {
        let reps = self.san_cmdbufs(mem, host.now_ns(), Some(job.ctx), Some(job));
        let mut end = None;
        for rep in reps {
            end = end.or(self.san_emit(host, rep, None));
        }
        let mut frames: Vec<(u64, u32)> = job
            .cursor
            .frames
            .iter()
            .take(job.cursor.depth as usize)
            .map(|f| (f.va, f.size))
            .collect();
        frames.pop();
        self.san_frames.sync(job.ctx, &frames);
        end.map(|e| match e {
            SliceEnd::Error { code, .. } => SliceEnd::Error {
                code,
                packet_va: job.ring_va + u64::from(job.cursor.rptr & (job.ring_size - 1)),
                header: 0,
            },
            other => other,
        })
    }

    /// A ring packet runs past the doorbell's write pointer.
    pub(super) fn san_mid_packet(
        &mut self,
        host: &dyn Host,
        job: &Job,
        header: u32,
        words: u32,
        avail: u32,
    ) {
        let Some(san) = self.san.clone() else { return };
        if !san.on(Check::RingIndex) {
            return;
        }
        let now = host.now_ns();
        let history = san
            .state()
            .rings
            .get(&(job.ctx, job.engine))
            .map(|r| r.history_ptrs())
            .unwrap_or_default();
        let name = vgpu_hwif::describe::HeaderWord {
            generation: san.generation(),
            word: header,
        };
        let mut rep = Report::new(
            Check::RingIndex,
            now,
            format!(
                "the packet at rptr {:#x} ({name}) ends at {:#x}, past the write pointer {:#x}: the doorbell published part of a packet",
                job.cursor.rptr,
                job.cursor.rptr.wrapping_add(4 * words),
                job.wptr
            ),
        )
        .on(job.ctx, job.engine)
        .kind(ring_index::MID_PACKET);
        rep.at = Some(Location {
            rptr: job.cursor.rptr,
            ring_size: job.ring_size,
            depth: 0,
            packet_va: job.ring_va + u64::from(job.cursor.rptr & (job.ring_size - 1)),
            cmd_offset: 0,
            words: vec![header],
        });
        rep.history = history;
        rep.detail = [
            u64::from(job.wptr),
            u64::from(job.cursor.rptr),
            u64::from(words),
            u64::from(avail),
        ];
        // The engine stops the ring with TRUNCATED anyway.
        let _ = self.san_emit(host, rep, None);
    }

    /// The TLBs' findings not drained yet.
    fn san_take_findings(&mut self) -> Vec<Finding> {
        let mut findings = Vec::new();
        for t in std::iter::once(&mut self.tlb).chain(self.cu_tlbs.iter_mut()) {
            if let Some(s) = t.san_mut() {
                findings.append(&mut s.findings);
            }
        }
        findings
    }

    /// End of a slice: command buffers still executing are checked, and
    /// TLB findings made outside a packet's steps (the walks of a packet
    /// fetch) reported.
    pub(super) fn san_end(
        &mut self,
        host: &dyn Host,
        mem: &Mem,
        job: &mut Job,
        end: SliceEnd,
    ) -> SliceEnd {
        let now = host.now_ns();
        let mut reps = Vec::new();
        for f in self.san_take_findings() {
            if self
                .sanitizer()
                .is_some_and(|s| s.first_time(f.asid(), f.key()))
            {
                if let Some(mut rep) = self.finding_report(&f, job.ctx, now) {
                    rep.at = Some(self.san_loc(mem, job, job.cursor.pending.as_ref()));
                    reps.push(rep);
                }
            }
        }
        reps.extend(self.san_cmdbufs(mem, now, Some(job.ctx), Some(job)));
        let mut stop = None;
        for rep in reps {
            let fl = job.cursor.pending;
            stop = stop.or(self.san_emit(host, rep, fl.as_ref()));
        }
        match (end, stop) {
            (SliceEnd::Error { .. } | SliceEnd::Fault { .. } | SliceEnd::KernelFault { .. }, _) => {
                end
            }
            (_, Some(s)) => s,
            _ => end,
        }
    }

    /// After the engine served an invalidation of `asid`: reports the
    /// TLBs' findings (reuse before the invalidation) and command buffers
    /// that moved.
    pub(super) fn san_served(
        &mut self,
        mem: &Mem,
        now: u64,
        inject: &Injector,
        asid: u32,
    ) -> Vec<Event> {
        let findings = self.san_take_findings();
        let mut reps: Vec<Report> = findings
            .iter()
            .filter(|f| {
                self.sanitizer()
                    .is_some_and(|s| s.first_time(f.asid(), f.key()))
            })
            .filter_map(|f| self.finding_report(f, asid, now))
            .collect();
        // Every executing buffer: frames are kept per context, and an
        // address space may be any context's.
        reps.extend(self.san_cmdbufs(mem, now, None, None));
        let Some(san) = self.sanitizer() else {
            return Vec::new();
        };
        reps.into_iter()
            .filter_map(|r| san.emit(r, inject))
            .collect()
    }
}
