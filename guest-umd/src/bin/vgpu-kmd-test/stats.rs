//! `QUERY_STATS` (and `CTX_QUERY`'s engine error): bad arguments, memory
//! accounting, every file's contexts, counters growing with work.

use std::path::Path;

use vgpu_umd::kmd::{Kmd, KmdError};
use vgpu_umd::uapi::{self, param};

use crate::node::{encode, fence, fill, open, Cmds, MS};
use crate::report::T;

/// The device's counters once its GEM object count has stayed the same
/// for 100 ms (at most 3 s).
fn settled(n: &Kmd) -> Option<uapi::DrmVgpuQueryStats> {
    let start = std::time::Instant::now();
    let (mut last, _) = stats(n).ok()?;
    let mut same = 0;
    while same < 5 && start.elapsed() < std::time::Duration::from_secs(3) {
        std::thread::sleep(std::time::Duration::from_millis(20));
        let (now, _) = stats(n).ok()?;
        same = if now.mem_objects == last.mem_objects {
            same + 1
        } else {
            0
        };
        last = now;
    }
    Some(last)
}

/// A `QUERY_STATS` with room for every context: the summary and the
/// contexts listed.
fn stats(n: &Kmd) -> Result<(uapi::DrmVgpuQueryStats, Vec<uapi::DrmVgpuCtxStats>), KmdError> {
    let mut v = vec![uapi::DrmVgpuCtxStats::default(); uapi::STATS_MAX_CONTEXTS as usize];
    let a = n.query_stats(&mut v)?;
    v.truncate(a.num_contexts.min(uapi::STATS_MAX_CONTEXTS) as usize);
    Ok((a, v))
}

/// `QUERY_STATS`: bad arguments, memory accounting against the BOs created
/// and freed, every file's contexts listed, counters and fence progress
/// growing while a context runs work, and the engine error of a stopped
/// context (also in `CTX_QUERY`).
pub fn test_stats(t: &mut T, path: &Path) {
    let n = open(path);
    let start = n.get_param(param::VA_START).unwrap_or(0);
    let rw = uapi::VM_BIND_READ | uapi::VM_BIND_WRITE;
    let copy_only = 1 << uapi::ENGINE_COPY;

    let Some(ctx) = t.ok(
        "stats: create context",
        n.ctx_create(uapi::CTX_PRIORITY_HIGH, copy_only, 0),
    ) else {
        return;
    };
    bad_arguments(t, &n);
    let Some((s0, mine)) = every_file(t, &n, path, ctx, copy_only) else {
        return;
    };
    memory(t, &n, ctx, s0, mine);

    // Work: FILLs of 4 MiB on the context; its counters and fences grow.
    // (The device adds work to its counters at the end of each scheduling
    // slice, so they may not yet include all of it when the last fence
    // signals: only growth is checked.)
    let Ok(cmds) = Cmds::new(&n, start + 0x100_0000, 16) else {
        t.check("stats: mmap cmds", false, || "mmap failed".into());
        return;
    };
    let size = 4u64 << 20;
    let hd = n.gem_create(size, 0).unwrap_or(0);
    let dva = start + 0x400_0000;
    let _ = n.vm_bind(hd, dva, size, rw);
    work(t, &n, ctx, &cmds, dva, size);
    engine_error(t, &n, ctx, &cmds, dva);
    let _ = n.ctx_destroy(ctx);
}
/// Bad arguments. (The array has room for every context there can be, so
/// none of them lets the kernel write past it.)
fn bad_arguments(t: &mut T, n: &Kmd) {
    let mut v = vec![uapi::DrmVgpuCtxStats::default(); uapi::STATS_MAX_CONTEXTS as usize];
    let good = uapi::DrmVgpuQueryStats {
        num_contexts: 2,
        contexts: v.as_mut_ptr() as u64,
        ..Default::default()
    };
    for (name, a, want) in [
        (
            "flags 1",
            uapi::DrmVgpuQueryStats { flags: 1, ..good },
            libc::EINVAL,
        ),
        (
            "pad 1",
            uapi::DrmVgpuQueryStats { pad: 1, ..good },
            libc::EINVAL,
        ),
        (
            "num_contexts above max",
            uapi::DrmVgpuQueryStats {
                num_contexts: uapi::STATS_MAX_CONTEXTS + 1,
                ..good
            },
            libc::EINVAL,
        ),
        (
            "num_contexts u32::MAX",
            uapi::DrmVgpuQueryStats {
                num_contexts: u32::MAX,
                ..good
            },
            libc::EINVAL,
        ),
        (
            "contexts pointer bad",
            uapi::DrmVgpuQueryStats {
                contexts: 0x10,
                ..good
            },
            libc::EFAULT,
        ),
        (
            "contexts pointer null",
            uapi::DrmVgpuQueryStats {
                contexts: 0,
                ..good
            },
            libc::EFAULT,
        ),
        (
            "contexts pointer kernel",
            uapi::DrmVgpuQueryStats {
                contexts: 0xffff_8000_0000_0000,
                ..good
            },
            libc::EFAULT,
        ),
    ] {
        let mut a = a;
        // SAFETY: `contexts` is `v`, exclusively borrowed, with room for
        // every context that can exist (the most the KMD writes whatever
        // `num_contexts` says), or an address the kernel cannot write.
        let r = unsafe { n.ioctl_raw(&mut a) };
        t.err(&format!("stats: {name}"), r, want);
    }
    if let Some(a) = t.ok("stats: num_contexts 0, no array", n.query_stats(&mut [])) {
        t.check("stats: count without array", a.num_contexts >= 1, || {
            format!("num_contexts {}", a.num_contexts)
        });
        t.check("stats: not wedged", a.wedged == 0, || "wedged".into());
        t.check("stats: sample time set", a.sample_ns > 0, || "0".into());
    }
}

/// Every file's contexts: a second file's context is listed too. Returns
/// the first query's summary and `ctx`'s line in it.
fn every_file(
    t: &mut T,
    n: &Kmd,
    path: &Path,
    ctx: u32,
    copy_only: u32,
) -> Option<(uapi::DrmVgpuQueryStats, Option<uapi::DrmVgpuCtxStats>)> {
    let pid = std::process::id();
    let n2 = open(path);
    let ctx2 = n2
        .ctx_create(uapi::CTX_PRIORITY_LOW, copy_only, 0)
        .unwrap_or(0);
    let (s0, c0) = t.ok("stats: query", stats(n))?;
    let mine = c0.iter().find(|c| c.ctx_id == ctx).copied();
    t.check(
        "stats: own context listed with pid, priority, engines",
        mine.is_some_and(|c| {
            c.pid == pid
                && c.priority == uapi::CTX_PRIORITY_HIGH
                && c.engines == copy_only
                && c.state == 0
                && c.reset_status == uapi::CTX_RESET_NONE
                && c.submitted == [0, 0]
        }),
        || format!("{mine:?} (pid {pid})"),
    );
    t.check(
        "stats: other file's context listed",
        c0.iter()
            .any(|c| c.ctx_id == ctx2 && c.pid == pid && c.priority == uapi::CTX_PRIORITY_LOW),
        || format!("{c0:?}"),
    );
    t.check(
        "stats: num_contexts counts every context",
        s0.num_contexts as usize == c0.len() && c0.len() >= 2,
        || format!("num_contexts {} listed {}", s0.num_contexts, c0.len()),
    );
    // Capacity 1: one filled, the count still says how many exist.
    let mut one = [uapi::DrmVgpuCtxStats::default(); 2];
    if let Some(a) = t.ok("stats: capacity 1", n.query_stats(&mut one[..1])) {
        t.check(
            "stats: capacity 1 fills one",
            a.num_contexts >= 2 && one[0].ctx_id != 0 && one[1].ctx_id == 0,
            || format!("num_contexts {} {:?}", a.num_contexts, one),
        );
    }
    let _ = n2.ctx_destroy(ctx2);
    drop(n2);
    if let Ok((_, c)) = stats(n) {
        t.check(
            "stats: destroyed context gone",
            !c.iter().any(|c| c.ctx_id == ctx2),
            || format!("{c:?}"),
        );
    }
    Some((s0, mine))
}

/// Memory: N bytes of BOs, against a baseline taken once the objects of
/// earlier files are gone (a closed file's BOs are freed when its last jobs
/// retire, in the background). `s0` and `mine`: an earlier query and
/// `ctx`'s line in it.
fn memory(
    t: &mut T,
    n: &Kmd,
    ctx: u32,
    s0: uapi::DrmVgpuQueryStats,
    mine: Option<uapi::DrmVgpuCtxStats>,
) {
    let big = 1u64 << 20;
    let base = settled(n).unwrap_or(s0);
    let hs: Vec<u32> = (0..3).filter_map(|_| n.gem_create(big, 0).ok()).collect();
    if let Ok((s1, c1)) = stats(n) {
        let want = base.mem_bytes + 3 * big;
        t.check(
            "stats: mem_bytes grows by the BOs created",
            s1.mem_bytes >= want && s1.mem_objects >= base.mem_objects + 3,
            || {
                format!(
                    "before {} B / {} objects, after {} B / {} objects",
                    base.mem_bytes, base.mem_objects, s1.mem_bytes, s1.mem_objects
                )
            },
        );
        let m0 = mine.map_or(0, |c| c.mem_bytes);
        let m1 = c1
            .iter()
            .find(|c| c.ctx_id == ctx)
            .map_or(0, |c| c.mem_bytes);
        t.check(
            "stats: context's file memory grows",
            m1 >= m0 + 3 * big,
            || format!("before {m0} after {m1}"),
        );
        for h in &hs {
            let _ = n.gem_close(*h);
        }
        if let Ok((s2, _)) = stats(n) {
            t.check(
                "stats: mem_bytes back after free",
                s2.mem_bytes + 3 * big <= s1.mem_bytes && s2.mem_objects + 3 <= s1.mem_objects,
                || format!("with BOs {} B, after free {} B", s1.mem_bytes, s2.mem_bytes),
            );
        }
    }
}

/// FILLs of 4 MiB at `dva` (a BO of `size` bytes) on the context, three
/// command buffers four times: its counters and fences, the engine's and
/// the device's counters grow.
fn work(t: &mut T, n: &Kmd, ctx: u32, cmds: &Cmds, dva: u64, size: u64) {
    let before = stats(n).ok();
    // One packet per command buffer (gen 2 engine packets are 64-byte
    // aligned).
    let c: Vec<uapi::DrmVgpuCmd> = (0..3)
        .map(|i| cmds.program(i, &[fill(dva, size, i as u32 + 1)]))
        .collect();
    let mut last = 0;
    for _ in 0..4 {
        if let Ok(s) = n.submit(ctx, 0, &c, &[]) {
            last = s;
        }
    }
    t.ok(
        "stats: work done",
        n.wait(&[fence(ctx, 0, last)], true, 10_000 * MS),
    );
    if let (Some((b, bc)), Ok((a, ac))) = (before, stats(n)) {
        let cb = bc
            .iter()
            .find(|c| c.ctx_id == ctx)
            .copied()
            .unwrap_or_default();
        let ca = ac
            .iter()
            .find(|c| c.ctx_id == ctx)
            .copied()
            .unwrap_or_default();
        t.check(
            "stats: context busy_ns, packets, bytes grow",
            ca.counters.busy_ns > cb.counters.busy_ns
                && ca.counters.packets > cb.counters.packets
                && ca.counters.bytes > cb.counters.bytes,
            || format!("before {:?} after {:?}", cb.counters, ca.counters),
        );
        t.check(
            "stats: context fences submitted == completed == last seqno",
            ca.submitted[0] == last && ca.completed[0] == last && last == 4,
            || {
                format!(
                    "submitted {:?} completed {:?} last {last}",
                    ca.submitted, ca.completed
                )
            },
        );
        t.check(
            "stats: copy engine busy_ns grows",
            a.engines[0].busy_ns > b.engines[0].busy_ns,
            || format!("{} -> {}", b.engines[0].busy_ns, a.engines[0].busy_ns),
        );
        t.check(
            "stats: device counters grow",
            a.device.busy_ns > b.device.busy_ns && a.device.packets > b.device.packets,
            || format!("before {:?} after {:?}", b.device, a.device),
        );
        t.check(
            "stats: sample time grows",
            a.sample_ns > b.sample_ns,
            || format!("{} -> {}", b.sample_ns, a.sample_ns),
        );
        t.check("stats: page tables in use", a.pt_bytes > 0, || "0".into());
    }
}

/// An engine error (FILL of size 0 at `dva`: BadOperand) stops the context:
/// CTX_QUERY and QUERY_STATS report it.
fn engine_error(t: &mut T, n: &Kmd, ctx: u32, cmds: &Cmds, dva: u64) {
    let bad = cmds.program(3, &[fill(dva, 0, 1)]);
    if let Ok(s) = n.submit(ctx, 0, &[bad], &[]) {
        t.err(
            "stats: engine error fails the job",
            n.wait(&[fence(ctx, 0, s)], true, 10_000 * MS),
            libc::EIO,
        );
    }
    let q = n.ctx_query(ctx).unwrap_or_default();
    t.check(
        "ctx_query: engine_error names the error",
        q.engine_error == uapi::engine_error::BAD_OPERAND && q.state & uapi::CTX_STATE_ERRORED != 0,
        || format!("{q:?}"),
    );
    // ... and names its packet: the FILL at the start of the command buffer
    // the SUBMIT gave, its header word, the SUBMIT's seqno.
    let fill_header = encode(cmds.generation, bad.va, &[fill(dva, 0, 1)])[0];
    t.check(
        "ctx_query: the error names its packet and where it was submitted",
        q.error_packet_va == bad.va
            && q.error_header == fill_header
            && q.error_cmd_index == 0
            && q.error_cmd_offset == 0
            && q.error_depth == 1
            && q.error_engine == uapi::ENGINE_COPY
            && q.error_seqno != 0,
        || format!("{q:?}, want packet {:#x} header {fill_header:#x}", bad.va),
    );
    if let Ok((_, c)) = stats(n) {
        let me = c
            .iter()
            .find(|c| c.ctx_id == ctx)
            .copied()
            .unwrap_or_default();
        t.check(
            "stats: errored context shows state and guilt",
            me.state & uapi::CTX_STATE_ERRORED != 0 && me.reset_status == uapi::CTX_RESET_GUILTY,
            || format!("{me:?}"),
        );
        t.check(
            "stats: errored context names the packet for every file (vgpu-smi)",
            me.engine_error == q.engine_error
                && me.error_packet_va == q.error_packet_va
                && me.error_header == q.error_header
                && me.error_seqno == q.error_seqno
                && me.error_cmd_index == q.error_cmd_index
                && me.error_cmd_offset == q.error_cmd_offset
                && me.error_engine == q.error_engine,
            || format!("{me:?} vs {q:?}"),
        );
    }
}
