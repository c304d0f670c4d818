//! `VM_BIND_OPS` on DRM GPUVM: partial unbind of the middle of a mapping,
//! remap, a map over several mappings (split on both sides) with an unmap in
//! the same call, a 2 MiB page cut by an unmap, and an unmap ordered after a
//! job by a syncobj — each time checking what the device reads at every page
//! (a GPU copy per page, on a context that keeps its TLB warm, so a stale
//! translation would show as the old BO's page) and the page tables debugfs
//! walks; then the bad arguments.

use std::path::Path;
use std::time::Duration;

use vgpu_umd::kmd::Kmd;
use vgpu_umd::uapi::{self, param};

use crate::debugfs::{debugfs, field, vm_line};
use crate::node::{copy, fence, open, sem_wait_eq, Cmds, Map, MS, PAGE};
use crate::report::T;
use crate::syncobj::{in_ms, submit_s, sync};

const PAGES: u64 = 16;

fn map_op(handle: u32, bo_offset: u64, va: u64, size: u64) -> uapi::DrmVgpuVmOp {
    uapi::DrmVgpuVmOp {
        op: uapi::VM_OP_MAP,
        flags: uapi::VM_BIND_READ | uapi::VM_BIND_WRITE,
        handle,
        pad: 0,
        bo_offset,
        va,
        size,
    }
}

fn unmap_op(va: u64, size: u64) -> uapi::DrmVgpuVmOp {
    uapi::DrmVgpuVmOp {
        op: uapi::VM_OP_UNMAP,
        va,
        size,
        ..Default::default()
    }
}

/// A BO of `pages` pages whose page `i` starts with `tag << 48 | i`.
fn tagged(n: &Kmd, pages: u64, tag: u64) -> (u32, Map) {
    let h = n.gem_create(pages * PAGE, 0).unwrap_or(0);
    let m = Map::new(n, h, pages * PAGE).expect("mmap");
    for i in 0..pages {
        m.write((i * PAGE / 8) as usize, tag << 48 | i);
    }
    (h, m)
}

/// What the device reads at VAs: one COPY of a page per job into a
/// destination BO, on a reader context that stays (its TLB warm across the
/// tests) for pages that should be mapped, and on a context of its own for
/// pages that should not (the fault errors it).
struct Reader<'a> {
    n: &'a Kmd,
    cmds: Cmds,
    dst: Map,
    dva: u64,
    ctx: u32,
    slot: usize,
}

impl Reader<'_> {
    /// The first word the device reads at `va` (`None`: it faulted).
    fn read(&mut self, va: u64, expect_mapped: bool) -> Option<u64> {
        let ctx = if expect_mapped {
            self.ctx
        } else {
            self.n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1, 0).ok()?
        };
        self.dst.write(0, 0);
        self.slot = (self.slot + 1) % 60;
        let c = self.cmds.program(self.slot, &[copy(va, self.dva, 64)]);
        let r = self
            .n
            .submit(ctx, 0, &[c], &[])
            .and_then(|s| self.n.wait(&[fence(ctx, 0, s)], true, 5_000 * MS));
        let got = r.is_ok().then(|| self.dst.read(0));
        if !expect_mapped {
            let _ = self.n.ctx_destroy(ctx);
        } else if got.is_none() {
            // The reader faulted: a new one for the next checks.
            let _ = self.n.ctx_destroy(self.ctx);
            self.ctx = self
                .n
                .ctx_create(uapi::CTX_PRIORITY_NORMAL, 1, 0)
                .unwrap_or(0);
        }
        got
    }

    /// Checks every page of `[va, va + want.len() pages)`: `Some(word)` the
    /// device must read, `None` a fault.
    fn expect(&mut self, t: &mut T, what: &str, va: u64, want: &[Option<u64>]) {
        let mut bad = Vec::new();
        for (p, w) in want.iter().enumerate() {
            let got = self.read(va + p as u64 * PAGE, w.is_some());
            if got != *w {
                bad.push(format!("page {p}: read {got:x?}, want {w:x?}"));
            }
        }
        t.check(
            &format!("vmbind: {what}: the device reads what is mapped"),
            bad.is_empty(),
            || bad.join("; "),
        );
    }
}

/// The debugfs `vms` mapping lines of this file in `[from, to)` as
/// (va, size, check).
fn mappings(from: u64, to: u64) -> Vec<(u64, u64, String)> {
    debugfs("vms")
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            if !l.starts_with("map va ") {
                return None;
            }
            let hex = |s: Option<String>| {
                s.and_then(|v| u64::from_str_radix(v.trim_start_matches("0x"), 16).ok())
            };
            let va = hex(field(l, "va"))?;
            let size = hex(field(l, "size"))?;
            (va >= from && va < to).then(|| (va, size, field(l, "check").unwrap_or_default()))
        })
        .collect()
}

/// `Some(tag << 48 | i)`: what page `i` of a [`tagged`] BO starts with.
fn tag(t: u64, i: u64) -> Option<u64> {
    Some(t << 48 | i)
}

/// What the parts of [`test_vmbind`] share: the file, the reader, the VA
/// the 16 pages under test start at and what the device must read at each.
struct Vb<'a> {
    n: &'a Kmd,
    rd: Reader<'a>,
    start: u64,
    /// Where the 16 pages under test start.
    v: u64,
    /// What the device must read at each of the 16 pages.
    want: Vec<Option<u64>>,
    /// The reader's destination BO and where it is bound.
    hd: u32,
    dst_va: u64,
}

pub fn test_vmbind(t: &mut T, path: &Path) {
    let n = open(path);
    let start = n.get_param(param::VA_START).unwrap_or(0);
    let v = start + 0x1000_0000;
    let dst_va = start + 0x1200_0000;
    let cmds = Cmds::new(&n, start + 0x1100_0000, 16).expect("command buffers");
    let hd = n.gem_create(PAGE, 0).unwrap_or(0);
    let _ = n.vm_bind(hd, dst_va, PAGE, uapi::VM_BIND_READ | uapi::VM_BIND_WRITE);
    let dst = Map::new(&n, hd, PAGE).expect("mmap");
    let ctx = n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1, 0).unwrap_or(0);
    let mut f = Vb {
        n: &n,
        rd: Reader {
            n: &n,
            cmds,
            dst,
            dva: dst_va,
            ctx,
            slot: 0,
        },
        start,
        v,
        want: (0..PAGES).map(|i| tag(0xa, i)).collect(),
        hd,
        dst_va,
    };
    let (x, _mx) = tagged(&n, PAGES, 0xa);
    let (y, _my) = tagged(&n, PAGES, 0xb);
    let (z, _mz) = tagged(&n, PAGES, 0xc);

    one_map(t, &mut f, x);
    partial_unbind(t, &mut f);
    remap(t, &mut f, y);
    split_map(t, &mut f, z);
    huge_page_cut(t, &mut f);
    let (jctx, fctx, _sem) = ordered_unmap(t, &mut f);
    bad_arguments(t, &mut f, x);
    let _ = (
        n.ctx_destroy(jctx),
        n.ctx_destroy(fctx),
        n.ctx_destroy(f.rd.ctx),
    );
}

/// One map of BO x over the 16 pages.
fn one_map(t: &mut T, f: &mut Vb, x: u32) {
    let (n, v) = (f.n, f.v);
    t.ok(
        "vmbind: map 16 pages",
        n.vm_bind_ops(&[map_op(x, 0, v, PAGES * PAGE)], &[], &[]),
    );
    f.rd.expect(t, "after the map", v, &f.want);
}

/// Partial unbind of the middle: two mappings remain.
fn partial_unbind(t: &mut T, f: &mut Vb) {
    let (n, v) = (f.n, f.v);
    t.ok(
        "vmbind: unmap pages 4..8",
        n.vm_bind_ops(&[unmap_op(v + 4 * PAGE, 4 * PAGE)], &[], &[]),
    );
    for w in f.want.iter_mut().take(8).skip(4) {
        *w = None;
    }
    let m = mappings(v, v + PAGES * PAGE);
    t.check(
        "vmbind: the mapping split in two around the hole",
        m.len() == 2
            && m[0].0 == v
            && m[0].1 == 4 * PAGE
            && m[1].0 == v + 8 * PAGE
            && m[1].1 == 8 * PAGE
            && m.iter().all(|x| x.2 == "ok"),
        || format!("{m:x?}"),
    );
    f.rd.expect(t, "after the partial unbind", v, &f.want);
}

/// Remap the hole with another BO (y).
fn remap(t: &mut T, f: &mut Vb, y: u32) {
    let (n, v) = (f.n, f.v);
    t.ok(
        "vmbind: map BO y into the hole",
        n.vm_bind_ops(&[map_op(y, 4 * PAGE, v + 4 * PAGE, 4 * PAGE)], &[], &[]),
    );
    for (i, w) in f.want.iter_mut().enumerate().take(8).skip(4) {
        *w = tag(0xb, i as u64);
    }
    f.rd.expect(t, "after the remap", v, &f.want);
}

/// Several operations in one call: a map of BO z over parts of x and y
/// (both split) and an unmap of the last two pages.
fn split_map(t: &mut T, f: &mut Vb, z: u32) {
    let (n, v) = (f.n, f.v);
    t.ok(
        "vmbind: map z over pages 2..6 and unmap 14..16 in one call",
        n.vm_bind_ops(
            &[
                map_op(z, 0, v + 2 * PAGE, 4 * PAGE),
                unmap_op(v + 14 * PAGE, 2 * PAGE),
            ],
            &[],
            &[],
        ),
    );
    for (i, w) in f.want.iter_mut().enumerate().take(6).skip(2) {
        *w = tag(0xc, i as u64 - 2);
    }
    f.want[14] = None;
    f.want[15] = None;
    let m = mappings(v, v + PAGES * PAGE);
    let ranges: Vec<(u64, u64)> = m.iter().map(|x| ((x.0 - v) / PAGE, x.1 / PAGE)).collect();
    t.check(
        "vmbind: x[0,2) z[2,6) y[6,8) x[8,14)",
        ranges == [(0, 2), (2, 4), (6, 2), (8, 6)] && m.iter().all(|x| x.2 == "ok"),
        || format!("{ranges:?} {m:x?}"),
    );
    f.rd.expect(t, "after the split map", v, &f.want);
}

/// A 2 MiB page cut by an unmap of one 4 KiB page inside it.
fn huge_page_cut(t: &mut T, f: &mut Vb) {
    let n = f.n;
    let huge = n.get_param(param::PAGE_SIZES).unwrap_or(0) & (2 << 20) != 0;
    let vh = (f.start + 0x1400_0000).next_multiple_of(2 << 20);
    let (h, mh) = tagged(n, 1024, 0xd);
    t.ok(
        "vmbind: map 4 MiB at a 2 MiB boundary",
        n.vm_bind_ops(&[map_op(h, 0, vh, 4 << 20)], &[], &[]),
    );
    let l = vm_line(vh).unwrap_or_default();
    t.check(
        "vmbind: 2 MiB pages where the device has them",
        field(&l, "pages_2m").as_deref() == Some(if huge { "2" } else { "0" }),
        || l.clone(),
    );
    let cut = vh + (1 << 20);
    f.rd.expect(
        t,
        "inside the 2 MiB page",
        cut - PAGE,
        &[tag(0xd, 255), tag(0xd, 256), tag(0xd, 257)],
    );
    t.ok(
        "vmbind: unmap one 4 KiB page inside the 2 MiB page",
        n.vm_bind_ops(&[unmap_op(cut, PAGE)], &[], &[]),
    );
    let m = mappings(vh, vh + (4 << 20));
    t.check(
        "vmbind: the 2 MiB page split, the rest kept",
        m.len() == 2
            && m[0] == (vh, 1 << 20, "ok".to_string())
            && m[1] == (cut + PAGE, (3 << 20) - PAGE, "ok".to_string()),
        || format!("{m:x?}"),
    );
    let l = vm_line(cut + PAGE).unwrap_or_default();
    t.check(
        "vmbind: the second 2 MiB page stays whole",
        !huge || field(&l, "pages_2m").as_deref() == Some("1"),
        || l.clone(),
    );
    f.rd.expect(
        t,
        "around the cut page",
        cut - PAGE,
        &[tag(0xd, 255), None, tag(0xd, 257)],
    );
    drop(mh);
}

/// An unmap ordered after a job by a syncobj: the bind job waits in the
/// KMD for the job's out-syncobj; the legacy ioctls wait their turn
/// (EBUSY); the job reads the old mapping; then the mapping is gone.
/// Returns the held job's and the later job's contexts and the semaphore
/// BO's mapping (kept until the end).
fn ordered_unmap(t: &mut T, f: &mut Vb) -> (u32, u32, Map) {
    let (n, start, v) = (f.n, f.start, f.v);
    let s = n.syncobj_create(0).unwrap_or(0);
    let s2 = n.syncobj_create(0).unwrap_or(0);
    let hs = n.gem_create(PAGE, 0).unwrap_or(0);
    let semva = start + 0x1300_0000;
    let _ = n.vm_bind(hs, semva, PAGE, uapi::VM_BIND_READ | uapi::VM_BIND_WRITE);
    let sem = Map::new(n, hs, PAGE).expect("mmap");
    sem.write(0, 0);
    sem.write(1, 0);
    let jctx = n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1, 0).unwrap_or(0);
    let job = [
        f.rd.cmds.program(61, &[sem_wait_eq(semva, 1)]),
        f.rd.cmds.program(62, &[copy(v, semva + 8, 8)]),
    ];
    let sj = submit_s(n, jctx, &job, &[], &[sync(s, 0)]);
    t.ok("vmbind: a held job reading page 0", sj);
    t.ok(
        "vmbind: unmap page 0 after the job (in-sync), out-sync",
        n.vm_bind_ops(&[unmap_op(v, PAGE)], &[sync(s, 0)], &[sync(s2, 0)]),
    );
    t.check(
        "vmbind: the unmap waits in the bind queue",
        debugfs("queues").contains("binds 1") && !mappings(v, v + PAGE).is_empty(),
        || debugfs("queues"),
    );
    t.err(
        "vmbind: VM_BIND while a bind job is queued",
        n.vm_bind(f.hd, start + 0x1500_0000, PAGE, uapi::VM_BIND_READ),
        libc::EBUSY,
    );
    t.err(
        "vmbind: VM_UNBIND while a bind job is queued",
        n.vm_unbind(f.dst_va, PAGE),
        libc::EBUSY,
    );
    // A job that depends on the bind's out-sync reads after the unmap: it
    // faults (on a context of its own).
    let fctx = n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1, 0).unwrap_or(0);
    let after = [f.rd.cmds.program(63, &[copy(v, semva + 16, 8)])];
    let sf = submit_s(n, fctx, &after, &[sync(s2, 0)], &[]);
    let sf = t.ok("vmbind: a job after the unmap (in-sync on the bind)", sf);
    std::thread::sleep(Duration::from_millis(300));
    t.check(
        "vmbind: neither the held job nor the later one ran yet",
        sem.read(1) == 0 && sem.read(2) == 0,
        || format!("{:#x} {:#x}", sem.read(1), sem.read(2)),
    );
    sem.write(0, 1);
    t.ok(
        "vmbind: the bind job's fence signals",
        n.syncobj_wait(&[s2], in_ms(5_000), uapi::SYNCOBJ_WAIT_ALL),
    );
    t.check(
        "vmbind: the held job read the old mapping",
        sem.read(1) == 0xa << 48,
        || format!("{:#x}", sem.read(1)),
    );
    t.check(
        "vmbind: the mapping is gone after the bind job",
        mappings(v, v + PAGE).is_empty(),
        || format!("{:x?}", mappings(v, v + PAGE)),
    );
    if let Some(s) = sf {
        let r = n.wait(&[fence(fctx, 0, s)], true, 5_000 * MS);
        let q = n
            .ctx_query(fctx)
            .map(|q| (q.state & uapi::CTX_STATE_FAULTED != 0, q.fault_va));
        t.check(
            "vmbind: the later job faulted at the unmapped page (no stale TLB)",
            r.is_err() && q == Ok((true, v)) && sem.read(2) == 0,
            || format!("{r:?} {q:x?} {:#x}", sem.read(2)),
        );
    }
    f.want[0] = None;
    f.rd.expect(t, "after the ordered unmap", v, &f.want);
    t.ok(
        "vmbind: VM_BIND works again once the queue drained",
        n.vm_bind(f.hd, start + 0x1500_0000, PAGE, uapi::VM_BIND_READ),
    );
    (jctx, fctx, sem)
}

/// Bad arguments (the map ops with BO x); a refused call changes nothing,
/// an unmap of an empty range is not an error.
fn bad_arguments(t: &mut T, f: &mut Vb, x: u32) {
    let (n, v) = (f.n, f.v);
    // Bad arguments.
    let bad = |t: &mut T, what: &str, op: uapi::DrmVgpuVmOp, want: i32| {
        t.err(
            &format!("vmbind: {what}"),
            n.vm_bind_ops(&[op], &[], &[]),
            want,
        );
    };
    bad(
        t,
        "op 0",
        uapi::DrmVgpuVmOp {
            op: 0,
            ..map_op(x, 0, v, PAGE)
        },
        libc::EINVAL,
    );
    bad(
        t,
        "op 3",
        uapi::DrmVgpuVmOp {
            op: 3,
            ..map_op(x, 0, v, PAGE)
        },
        libc::EINVAL,
    );
    bad(
        t,
        "map: no permission",
        uapi::DrmVgpuVmOp {
            flags: 0,
            ..map_op(x, 0, v, PAGE)
        },
        libc::EINVAL,
    );
    bad(
        t,
        "map: unknown flag",
        uapi::DrmVgpuVmOp {
            flags: 1 << 7,
            ..map_op(x, 0, v, PAGE)
        },
        libc::EINVAL,
    );
    bad(
        t,
        "map: unaligned va",
        map_op(x, 0, v + 8, PAGE),
        libc::EINVAL,
    );
    bad(
        t,
        "map: unaligned offset",
        map_op(x, 8, v, PAGE),
        libc::EINVAL,
    );
    bad(t, "map: size 0", map_op(x, 0, v, 0), libc::EINVAL);
    bad(
        t,
        "map: past the BO",
        map_op(x, PAGE, v, PAGES * PAGE),
        libc::EINVAL,
    );
    bad(
        t,
        "map: below VA_START",
        map_op(x, 0, 0, PAGE),
        libc::EINVAL,
    );
    bad(
        t,
        "map: unknown handle",
        map_op(0xdead, 0, v, PAGE),
        libc::ENOENT,
    );
    bad(
        t,
        "map: pad",
        uapi::DrmVgpuVmOp {
            pad: 1,
            ..map_op(x, 0, v, PAGE)
        },
        libc::EINVAL,
    );
    bad(
        t,
        "unmap: flags",
        uapi::DrmVgpuVmOp {
            flags: 1,
            ..unmap_op(v, PAGE)
        },
        libc::EINVAL,
    );
    bad(
        t,
        "unmap: handle",
        uapi::DrmVgpuVmOp {
            handle: x,
            ..unmap_op(v, PAGE)
        },
        libc::EINVAL,
    );
    bad(t, "unmap: unaligned", unmap_op(v + 1, PAGE), libc::EINVAL);
    t.err(
        "vmbind: no operations",
        n.vm_bind_ops(&[], &[], &[]),
        libc::EINVAL,
    );
    let many = vec![unmap_op(v, PAGE); uapi::VM_BIND_MAX_OPS as usize + 1];
    t.err(
        "vmbind: too many operations",
        n.vm_bind_ops(&many, &[], &[]),
        libc::EINVAL,
    );
    let empty = n.syncobj_create(0).unwrap_or(0);
    t.err(
        "vmbind: in-sync with no fence",
        n.vm_bind_ops(&[unmap_op(v, PAGE)], &[sync(empty, 0)], &[]),
        libc::EINVAL,
    );
    t.err(
        "vmbind: out-sync of an unknown handle",
        n.vm_bind_ops(&[unmap_op(v, PAGE)], &[], &[sync(0xdead, 0)]),
        libc::ENOENT,
    );
    // A failed call changed nothing.
    f.rd.expect(t, "after the refused calls", v, &f.want);
    // Unmapping a range with no mapping is not an error.
    t.ok(
        "vmbind: unmap of an empty range",
        n.vm_bind_ops(&[unmap_op(f.start + 0x1600_0000, PAGE)], &[], &[]),
    );
}
