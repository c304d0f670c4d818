//! Contexts and work: `CTX_CREATE`, `CTX_DESTROY`, `CTX_QUERY`, `SUBMIT`
//! (real jobs from random programs in the file's kit, and broken
//! arguments), `WAIT`, `FENCE_EXPORT` (and the sync_file it returns), `SAN_REPORT`,
//! `QUERY_STATS` (its context array placed exactly before a guard page, or
//! short of room, or at a bad pointer).

use vgpu_umd::uapi;

use crate::expect::Expect;
use crate::guard::{BadPtr, BAD_PTRS};
use crate::packets;
use crate::sys;
use crate::worker::{Ctx, FileState, Worker};

/// Contexts per file the fuzzer keeps (the KMD allows 16, the device 64).
const CTXS_PER_FILE: usize = 6;

impl Worker {
    /// A context id this file does not hold now.
    fn stale_ctx(&mut self, st: &FileState) -> u32 {
        for _ in 0..4 {
            let id = match self.rng.below(3) {
                0 if !st.dead_ctxs.is_empty() => *self.rng.pick(&st.dead_ctxs),
                1 => self.rng.edge_u32(),
                _ => self.rng.range(0, 200) as u32,
            };
            if !st.has_ctx(id) {
                return id;
            }
        }
        0
    }

    /// `CTX_CREATE`.
    pub fn op_ctx_create(&mut self, fi: usize) {
        let f = self.files[fi].clone();
        let mask = self.dev.engine_mask;
        let full = f.lock().ctxs.len() >= CTXS_PER_FILE;
        let good_mask = loop {
            let m = self.rng.range(1, 3) as u32 & mask;
            if m != 0 {
                break m;
            }
        };
        let flags = if self.rng.chance(1, 3) {
            uapi::CTX_CREATE_REPLAYABLE
        } else {
            0
        };
        let mut a = uapi::DrmVgpuCtxCreate {
            priority: self.rng.range(0, 3) as u32,
            engine_mask: good_mask,
            flags,
            ctx_id: 0,
        };
        let want = match self.rng.below(8) {
            _ if full => {
                // Enough contexts: only broken requests.
                a.priority = 4 + self.rng.below(1 << 20) as u32;
                Expect::BAD
            }
            0 => {
                a.priority = self.rng.edge_u32().max(4);
                Expect::BAD
            }
            1 => {
                a.engine_mask = if self.rng.chance(1, 2) {
                    0
                } else {
                    self.rng.u32() | !mask
                };
                Expect::BAD
            }
            2 => {
                a.flags = self.rng.u32() | 2;
                Expect::BAD
            }
            _ => Expect::valid_or(&[libc::EOPNOTSUPP]),
        };
        let arg = a;
        let r = self.call(
            "ctx_create",
            || {
                format!(
                    "prio {} mask {:#x} flags {:#x}",
                    arg.priority, arg.engine_mask, arg.flags
                )
            },
            want,
            |ar| sys::ioctl(f.fd, &mut a, ar),
        );
        if r.is_ok() {
            f.lock().ctxs.push(Ctx {
                id: a.ctx_id,
                engines: arg.engine_mask,
                seqno: [0; 2],
                errored: false,
            });
        }
    }

    /// `CTX_DESTROY`: a held context (work may be queued or hung), a stale
    /// one, non-zero padding.
    pub fn op_ctx_destroy(&mut self, fi: usize) {
        let f = self.files[fi].clone();
        let (id, pad, want) = {
            let st = f.lock();
            match self.rng.below(4) {
                0 | 1 if !st.ctxs.is_empty() => (self.rng.pick(&st.ctxs).id, 0, Expect::VALID),
                2 if !st.ctxs.is_empty() => {
                    (self.rng.pick(&st.ctxs).id, self.rng.u32() | 1, Expect::BAD)
                }
                _ => (self.stale_ctx(&st), 0, Expect::BAD),
            }
        };
        let mut a = uapi::DrmVgpuCtxDestroy { ctx_id: id, pad };
        let r = self.call(
            "ctx_destroy",
            || format!("ctx {id} pad {pad:#x}"),
            want,
            |ar| sys::ioctl(f.fd, &mut a, ar),
        );
        if r.is_ok() {
            let mut st = f.lock();
            st.ctxs.retain(|c| c.id != id);
            st.dead_ctxs.push(id);
        }
    }

    /// `CTX_QUERY`.
    pub fn op_ctx_query(&mut self, fi: usize) {
        let f = self.files[fi].clone();
        let (id, want) = {
            let st = f.lock();
            if !st.ctxs.is_empty() && self.rng.chance(3, 4) {
                (self.rng.pick(&st.ctxs).id, Expect::VALID)
            } else {
                (self.stale_ctx(&st), Expect::BAD)
            }
        };
        let mut a = uapi::DrmVgpuCtxQuery {
            ctx_id: id,
            // Ignored on input: any value.
            engine_error: self.rng.u32(),
            ..Default::default()
        };
        let _ = self.call(
            "ctx_query",
            || format!("ctx {id}"),
            want,
            |ar| sys::ioctl(f.fd, &mut a, ar),
        );
    }

    /// `SAN_REPORT`: a context of the file (answered with a report or
    /// `ENODATA`, whether or not the device sanitizes), a stale one, or a
    /// nonzero `pad`; `after_seq` anywhere, at the edges too.
    pub fn op_san_report(&mut self, fi: usize) {
        let f = self.files[fi].clone();
        let (id, mut want) = {
            let st = f.lock();
            if !st.ctxs.is_empty() && self.rng.chance(3, 4) {
                (
                    self.rng.pick(&st.ctxs).id,
                    Expect::valid_or(&[libc::ENODATA]),
                )
            } else {
                (self.stale_ctx(&st), Expect::BAD)
            }
        };
        let pad = if self.rng.chance(1, 8) {
            want = Expect::BAD;
            self.rng.u32() | 1
        } else {
            0
        };
        let any = self.rng.next();
        let after_seq = *self.rng.pick(&[0, 1, u64::MAX, any]);
        let mut a = uapi::DrmVgpuSanReport {
            ctx_id: id,
            pad,
            after_seq,
            ..Default::default()
        };
        let _ = self.call(
            "san_report",
            || format!("ctx {id} pad {pad:#x} after_seq {after_seq:#x}"),
            want,
            |ar| sys::ioctl(f.fd, &mut a, ar),
        );
    }

    /// A context of the file (mostly one still working) and one of its
    /// engines.
    fn ctx_engine(&mut self, st: &FileState) -> Option<(Ctx, u32)> {
        if st.ctxs.is_empty() {
            return None;
        }
        let healthy: Vec<Ctx> = st.ctxs.iter().filter(|c| !c.errored).copied().collect();
        let c = if !healthy.is_empty() && self.rng.chance(9, 10) {
            *self.rng.pick(&healthy)
        } else {
            *self.rng.pick(&st.ctxs)
        };
        let engines: Vec<u32> = (0..2).filter(|e| c.engines & (1 << e) != 0).collect();
        Some((c, *self.rng.pick(&engines)))
    }

    /// Fences of the file's contexts that were submitted (seqno ≥ 1),
    /// mostly of contexts still working.
    fn submitted_fences(&mut self, st: &FileState, n: usize) -> Vec<uapi::DrmVgpuFence> {
        let healthy = st.ctxs.iter().any(|c| !c.errored && c.seqno != [0; 2]);
        let only_healthy = healthy && self.rng.chance(4, 5);
        let all: Vec<uapi::DrmVgpuFence> = st
            .ctxs
            .iter()
            .filter(|c| !only_healthy || !c.errored)
            .flat_map(|c| {
                (0..2u32)
                    .filter(move |&e| c.seqno[e as usize] > 0)
                    .map(move |e| (c.id, e, c.seqno[e as usize]))
            })
            .map(|(ctx_id, engine, last)| uapi::DrmVgpuFence {
                ctx_id,
                engine,
                seqno: last,
            })
            .collect();
        if all.is_empty() {
            return Vec::new();
        }
        (0..n)
            .map(|_| {
                let mut f = *self.rng.pick(&all);
                f.seqno = self.rng.range(1, f.seqno);
                f
            })
            .collect()
    }

    /// An array of `items` placed for the kernel: exactly before a guard
    /// page, or (when `bad`) at a bad pointer; its address.
    fn place<T: Copy>(&mut self, items: &[T], bad: Option<BadPtr>) -> u64 {
        let len = std::mem::size_of_val(items);
        match bad {
            Some(kind) => self.arena.bad(kind, len, &mut self.rng),
            None => {
                // SAFETY: `T` is a uAPI struct of integers: its bytes are
                // initialised.
                let bytes = unsafe { std::slice::from_raw_parts(items.as_ptr().cast::<u8>(), len) };
                self.arena.put(bytes) as u64
            }
        }
    }

    /// `SUBMIT`: a real job (1..4 random programs, input fences of the
    /// file's own contexts), or one argument broken.
    pub fn op_submit(&mut self, fi: usize) {
        let Some(mut kit) = self.ensure_kit(fi) else {
            return;
        };
        let f = self.files[fi].clone();
        let (ctx, engine, fences) = {
            let st = f.lock();
            let Some((c, e)) = self.ctx_engine(&st) else {
                drop(st);
                return self.op_ctx_create(fi);
            };
            let n = if self.rng.chance(1, 3) {
                self.rng.range(1, 3) as usize
            } else {
                0
            };
            (c, e, self.submitted_fences(&st, n))
        };
        // The programs, written into the command BO.
        let mut cmds = Vec::new();
        let mut written: Vec<(u64, u32)> = Vec::new();
        // Half of the jobs are tame: they complete and can be waited for.
        let tame = self.rng.chance(1, 2);
        for _ in 0..self.rng.range(1, 4) {
            let slot_words = 256;
            let slots = kit.cmd_len / (4 * slot_words);
            let slot = kit.next % slots;
            kit.next += 1;
            let va = kit.cmd_va + (slot * 4 * slot_words) as u64;
            let words = packets::program(&mut self.rng, &kit, &self.dev, va, &written, tame);
            let p = (kit.cmd_map + slot * 4 * slot_words) as *mut u32;
            for (i, w) in words.iter().enumerate() {
                // SAFETY: inside the kit's mapping of the command BO (a
                // program has at most `slot_words` words).
                unsafe { p.add(i).write_volatile(*w) };
            }
            let size = 4 * words.len() as u64;
            written.push((va, size as u32));
            cmds.push(uapi::DrmVgpuCmd { va, size });
        }
        f.lock().kit = Some(kit);
        let mut a = uapi::DrmVgpuSubmit {
            ctx_id: ctx.id,
            engine,
            cmds: 0,
            num_cmds: cmds.len() as u32,
            num_in_fences: fences.len() as u32,
            in_fences: 0,
            flags: if self.rng.chance(1, 4) {
                uapi::SUBMIT_BUSY_IS_EBUSY
            } else {
                0
            },
            pad: 0,
            seqno: 0,
            // No sync objects or BOs: the fields after `seqno` stay zero.
            ..Default::default()
        };
        let mut bad_cmds = None;
        let mut bad_fences = None;
        let mut fences = fences;
        match self.rng.below(24) {
            0 => a.num_cmds = *self.rng.pick(&[0, uapi::SUBMIT_MAX_CMDS + 1, u32::MAX]),
            1 => a.num_in_fences = *self.rng.pick(&[uapi::SUBMIT_MAX_IN_FENCES + 1, u32::MAX]),
            2 => bad_cmds = Some(*self.rng.pick(&BAD_PTRS)),
            3 if !fences.is_empty() => bad_fences = Some(*self.rng.pick(&BAD_PTRS)),
            4 => {
                // A command buffer against the rules: misaligned, sizes,
                // outside any READ|EXEC mapping (the data BO is RW).
                let c = &mut cmds[0];
                match self.rng.below(6) {
                    0 => c.va += 4,
                    1 => c.size = 0,
                    2 => c.size += 4,
                    3 => c.size = (1 << 20) + 8,
                    4 => c.va = kit.data_va,
                    _ => c.va = kit.cmd_va + kit.cmd_len as u64 - 8,
                }
            }
            5 if !fences.is_empty() => {
                // A seqno past what was submitted, a context not held, an
                // engine without a ring.
                let g = &mut fences[0];
                match self.rng.below(3) {
                    0 => g.seqno = g.seqno + 1000 + self.rng.below(1 << 40),
                    1 => {
                        let st = f.lock();
                        g.ctx_id = self.stale_ctx(&st);
                    }
                    _ => g.engine = 2 + self.rng.below(100) as u32,
                }
            }
            6 => a.engine = 2 + self.rng.edge_u32().min(u32::MAX - 2),
            7 => a.flags = self.rng.u32() | 2,
            8 => a.pad = self.rng.u32() | 1,
            9 => {
                let st = f.lock();
                a.ctx_id = self.stale_ctx(&st);
            }
            10 if ctx.engines != 3 && self.dev.engine_mask == 3 => a.engine = 1 - engine,
            _ => {}
        }
        // Well formed only if every rule holds, whatever was broken above.
        let valid = {
            let st = f.lock();
            let cmd_map = st
                .maps
                .iter()
                .any(|m| m.va == kit.cmd_va && m.size == kit.cmd_len as u64);
            let cmds_ok = cmds.iter().all(|c| {
                c.va % 8 == 0
                    && c.size > 0
                    && c.size % 8 == 0
                    && c.size <= 1 << 20
                    && c.va >= kit.cmd_va
                    && c.va + c.size <= kit.cmd_va + kit.cmd_len as u64
            });
            let fences_ok = fences.iter().all(|g| {
                st.ctxs.iter().any(|c| {
                    c.id == g.ctx_id
                        && g.engine < 2
                        && c.engines & (1 << g.engine) != 0
                        && g.seqno >= 1
                        && g.seqno <= c.seqno[g.engine as usize]
                })
            });
            let ctx_ok = st
                .ctxs
                .iter()
                .any(|c| c.id == a.ctx_id && a.engine < 2 && c.engines & (1 << a.engine) != 0);
            cmd_map
                && cmds_ok
                && fences_ok
                && ctx_ok
                && a.flags & !uapi::SUBMIT_FLAGS == 0
                && a.pad == 0
                && a.num_cmds as usize == cmds.len()
                && a.num_in_fences as usize == fences.len()
                && bad_cmds.is_none()
                && bad_fences.is_none()
        };
        let mut want = if valid { Expect::VALID } else { Expect::BAD };
        // The arrays: exactly as many entries as the counts say, ending at
        // a guard page (more than that, for counts out of range, would be
        // refused before they are read).
        a.cmds = self.place(&cmds, bad_cmds);
        a.in_fences = if fences.is_empty() && self.rng.chance(1, 2) {
            0
        } else {
            self.place(&fences, bad_fences)
        };
        // Null or empty arrays whose count is zero are fine.
        if bad_fences.is_some() && a.num_in_fences == 0 {
            want = Expect::ANY;
        }
        let arg = a;
        let r = self.call(
            "submit",
            || {
                format!(
                    "ctx {} e{} cmds {:#x}x{} fences {:#x}x{} flags {:#x} pad {:#x} first {:#x}+{:#x}",
                    arg.ctx_id,
                    arg.engine,
                    arg.cmds,
                    arg.num_cmds,
                    arg.in_fences,
                    arg.num_in_fences,
                    arg.flags,
                    arg.pad,
                    cmds[0].va,
                    cmds[0].size
                )
            },
            want,
            |ar| sys::ioctl(f.fd, &mut a, ar),
        );
        if r.is_ok() {
            let mut st = f.lock();
            if let Some(c) = st.ctxs.iter_mut().find(|c| c.id == arg.ctx_id) {
                let e = arg.engine as usize;
                c.seqno[e] = c.seqno[e].max(a.seqno);
            }
        }
        if r == Err(libc::EIO) && valid {
            let stopped = {
                let mut st = f.lock();
                st.ctxs
                    .iter_mut()
                    .find(|c| c.id == arg.ctx_id)
                    .map(|c| c.errored = true)
                    .is_some()
            };
            // A stopped context is mostly replaced, so that jobs keep
            // running; some stay, to be waited on and destroyed later.
            if stopped && self.rng.chance(2, 3) {
                self.destroy_ctx(fi, arg.ctx_id);
                self.op_ctx_create(fi);
            }
        }
    }

    fn destroy_ctx(&mut self, fi: usize, id: u32) {
        let f = self.files[fi].clone();
        let mut a = uapi::DrmVgpuCtxDestroy { ctx_id: id, pad: 0 };
        let r = self.call(
            "ctx_destroy",
            || format!("ctx {id} (stopped)"),
            Expect::VALID,
            |ar| sys::ioctl(f.fd, &mut a, ar),
        );
        if r.is_ok() {
            let mut st = f.lock();
            st.ctxs.retain(|c| c.id != id);
            st.dead_ctxs.push(id);
        }
    }

    /// `WAIT`: fences of the file's contexts (all or any, timeouts from 0
    /// to a few ms), or broken arguments.
    pub fn op_wait(&mut self, fi: usize) {
        let f = self.files[fi].clone();
        let n = match self.rng.below(8) {
            0 => 256,
            1 => self.rng.range(1, 64) as usize,
            _ => self.rng.range(1, 4) as usize,
        };
        let (mut fences, st_ctxs) = {
            let st = f.lock();
            (self.submitted_fences(&st, n), st.ctxs.clone())
        };
        let mut want = Expect::valid_or(&[libc::ETIME]);
        if fences.is_empty() {
            fences.push(uapi::DrmVgpuFence {
                ctx_id: self.rng.range(0, 100) as u32,
                engine: 0,
                seqno: 1,
            });
            want = Expect::bad_or(&[libc::ETIME]);
            if st_ctxs.iter().any(|c| c.id == fences[0].ctx_id) {
                want = Expect::ANY;
            }
        }
        let mut a = uapi::DrmVgpuWait {
            fences: 0,
            num_fences: fences.len() as u32,
            flags: if self.rng.chance(1, 2) {
                uapi::WAIT_ALL
            } else {
                0
            },
            timeout_ns: match self.rng.below(6) {
                0 | 1 => 0,
                2..=4 => self.rng.below(2_000_000),
                _ => self.rng.range(2_000_000, 20_000_000),
            },
            first_signaled: 0,
            pad: 0,
        };
        let mut bad = None;
        match self.rng.below(10) {
            0 => {
                a.num_fences = *self.rng.pick(&[0, uapi::WAIT_MAX_FENCES + 1, u32::MAX]);
                want = Expect::BAD;
            }
            1 => {
                bad = Some(*self.rng.pick(&BAD_PTRS));
                want = Expect::BAD;
            }
            2 => {
                a.flags = self.rng.u32() | 2;
                want = Expect::BAD;
            }
            3 => {
                a.pad = self.rng.u32() | 1;
                want = Expect::BAD;
            }
            4 => {
                let g = &mut fences[0];
                match self.rng.below(2) {
                    0 => g.seqno += 1000 + self.rng.below(1 << 40),
                    _ => g.engine = 2 + self.rng.below(1000) as u32,
                }
                want = Expect::bad_or(&[libc::ETIME]);
            }
            _ => {}
        }
        a.fences = self.place(&fences, bad);
        let arg = a;
        let _ = self.call(
            "wait",
            || {
                format!(
                    "fences {:#x}x{} flags {:#x} timeout {} pad {:#x} first {}/{}/{}",
                    arg.fences,
                    arg.num_fences,
                    arg.flags,
                    arg.timeout_ns,
                    arg.pad,
                    fences[0].ctx_id,
                    fences[0].engine,
                    fences[0].seqno
                )
            },
            want,
            |ar| sys::ioctl(f.fd, &mut a, ar),
        );
    }

    /// `FENCE_EXPORT`: a submitted fence (the fd kept, closed later), or a
    /// broken one.
    pub fn op_fence_export(&mut self, fi: usize) {
        let f = self.files[fi].clone();
        let (fence, want, flags) = {
            let st = f.lock();
            let mut fences = self.submitted_fences(&st, 1);
            let ce = self.ctx_engine(&st);
            match (self.rng.below(6), fences.pop(), ce) {
                (0..=2, Some(g), _) => (g, Expect::valid_or(&[libc::EMFILE]), 0),
                (3, Some(g), _) => (g, Expect::BAD, self.rng.u32() | 1),
                (4, _, Some((c, e))) => {
                    let seqno = if self.rng.chance(1, 2) {
                        0
                    } else {
                        c.seqno[e as usize] + 1 + self.rng.below(1000)
                    };
                    (
                        uapi::DrmVgpuFence {
                            ctx_id: c.id,
                            engine: e,
                            seqno,
                        },
                        Expect::BAD,
                        0,
                    )
                }
                _ => (
                    uapi::DrmVgpuFence {
                        ctx_id: self.stale_ctx(&st),
                        engine: self.rng.range(0, 3) as u32,
                        seqno: self.rng.range(1, 10),
                    },
                    Expect::BAD,
                    0,
                ),
            }
        };
        let mut a = uapi::DrmVgpuFenceExport {
            fence,
            flags,
            fd: -1,
        };
        let r = self.call(
            "fence_export",
            || {
                format!(
                    "ctx {} e{} seqno {} flags {flags:#x}",
                    fence.ctx_id, fence.engine, fence.seqno
                )
            },
            want,
            |ar| sys::ioctl(f.fd, &mut a, ar),
        );
        if r.is_ok() && a.fd >= 0 {
            self.fds.push(a.fd);
        }
    }

    /// Something done with a sync_file or dma-buf fd this worker holds:
    /// `poll(2)` it, `SYNC_IOC_FILE_INFO` (no fence array), or close it.
    pub fn op_fence_fd(&mut self) {
        if self.fds.is_empty() {
            return;
        }
        let i = self.rng.below(self.fds.len() as u64) as usize;
        let fd = self.fds[i];
        match self.rng.below(3) {
            0 => {
                let timeout = self.rng.range(0, 2) as i32;
                let _ = self.call(
                    "fence_poll",
                    || format!("fd {fd} timeout {timeout}"),
                    Expect::ANY,
                    |_| {
                        let mut p = libc::pollfd {
                            fd,
                            events: libc::POLLIN,
                            revents: 0,
                        };
                        // SAFETY: one pollfd on the stack, read and written
                        // by the kernel for the call.
                        let rc = unsafe { libc::poll(&mut p, 1, timeout) };
                        if rc < 0 {
                            Err(libc::EINTR)
                        } else {
                            Ok(())
                        }
                    },
                );
            }
            1 => {
                // struct sync_file_info, num_fences 0: the kernel fills
                // num_fences and the status only.
                let mut info = [0u8; 56];
                let req = (3u32 << 30) | (56 << 16) | (u32::from(b'>') << 8) | 4;
                let _ = self.call(
                    "sync_file_info",
                    || format!("fd {fd}"),
                    Expect::ANY,
                    |ar| sys::ioctl_bytes(fd, req, &mut info, ar),
                );
            }
            _ => {
                self.fds.swap_remove(i);
                sys::close(fd);
            }
        }
        while self.fds.len() > 64 {
            sys::close(self.fds.swap_remove(0));
        }
    }

    /// `QUERY_STATS`: the context array exactly before a guard page, short
    /// of room (it runs into the guard), at a bad pointer, or absent; counts
    /// and flags at and past the edges.
    pub fn op_query_stats(&mut self, fi: usize) {
        let f = self.files[fi].clone();
        let entry = size_of::<uapi::DrmVgpuCtxStats>();
        let cap = match self.rng.below(4) {
            0 => 0,
            1 => uapi::STATS_MAX_CONTEXTS,
            _ => self.rng.range(1, 16) as u32,
        };
        let mut a = uapi::DrmVgpuQueryStats {
            num_contexts: cap,
            ..Default::default()
        };
        let mut want = Expect::VALID;
        match self.rng.below(10) {
            0 => {
                a.num_contexts = uapi::STATS_MAX_CONTEXTS + 1 + self.rng.below(1 << 31) as u32;
                want = Expect::BAD;
            }
            1 => {
                a.flags = self.rng.u32() | 1;
                want = Expect::BAD;
            }
            2 => {
                a.pad = self.rng.u32() | 1;
                want = Expect::BAD;
            }
            3 | 4 if cap > 0 => {
                // Written only if a context exists: EFAULT or success.
                let kind = *self.rng.pick(&BAD_PTRS);
                a.contexts = self.arena.bad(kind, cap as usize * entry, &mut self.rng);
                want = Expect::valid_or(&[libc::EFAULT]);
            }
            _ => {}
        }
        if a.contexts == 0 && cap > 0 {
            a.contexts = self.arena.at_end(cap as usize * entry) as u64;
        }
        let arg = a;
        let _ = self.call(
            "query_stats",
            || {
                format!(
                    "contexts {:#x}x{} flags {:#x} pad {:#x}",
                    arg.contexts, arg.num_contexts, arg.flags, arg.pad
                )
            },
            want,
            |ar| sys::ioctl(f.fd, &mut a, ar),
        );
    }
}
