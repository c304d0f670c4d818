//! The KMD under allocation failures: an ioctl run with this thread's
//! fail-nth armed at every N (CONFIG_FAULT_INJECTION, failslab counting
//! `GFP_KERNEL` allocations) until a run sees no injected failure. Each
//! run may fail, but what the driver reports must be true: a call that
//! succeeded did everything it promises.

use std::path::Path;

use vgpu_umd::uapi::{self, param, GEM_CREATE_VRAM as VRAM};

use crate::failthread::{count_sleeping_slab_allocations, FailNth};
use crate::node::{copy, fence, fill, open, Cmds, Map, MS, PAGE};
use crate::report::T;
use crate::vram::{objects_of, place_four, vram_field, vram_used, which};

/// The most fail-nth points a sweep tries before it gives up.
pub const MAX_N: u32 = 200;

/// This thread's fail-nth counter with failslab counting every
/// allocation; a failed check (and `None`) on a kernel without them.
pub fn fail_nth(t: &mut T, section: &str) -> Option<FailNth> {
    let r = count_sleeping_slab_allocations().and_then(|()| FailNth::open());
    match r {
        Ok(f) => Some(f),
        Err(e) => {
            t.check(&format!("{section}: fail-nth"), false, || e);
            None
        }
    }
}

/// Prints how many runs of a sweep failed and checks that it ended: a run
/// passed no injection point (`done`) within [`MAX_N`].
pub fn sweep_end(t: &mut T, section: &str, failed_runs: u32, done: bool) {
    println!("{section}: {failed_runs} runs failed under an allocation failure");
    t.check(
        &format!("{section}: the sweep reached a run without a failure"),
        done,
        || format!("still injecting after {MAX_N} runs"),
    );
}

/// `VM_UNBIND` of a range the copy engine has just read, with the N-th
/// allocation of the call failing, for every N the call reaches. A run may
/// fail (the range then stays bound and is unbound again without a
/// failure, or is gone with its pages kept: `EIO`); once an unbind has
/// succeeded no TLB may still translate the range: the next copy from it faults (`EIO`) and reads
/// nothing. An invalidation that gives up on a failed allocation but
/// reports success lets that copy read the old pages (a stale translation).
pub fn test_unbind_nomem(t: &mut T, path: &Path) {
    let Some(fnth) = fail_nth(t, "unbind-nomem") else {
        return;
    };
    let n = open(path);
    let start = n.get_param(param::VA_START).unwrap_or(0);
    let rw = uapi::VM_BIND_READ | uapi::VM_BIND_WRITE;
    let cmds = Cmds::new(&n, start + 0x100_0000, 4).expect("mmap cmds");
    let (ha, hd) = (
        n.gem_create(PAGE, 0).unwrap_or(0),
        n.gem_create(PAGE, 0).unwrap_or(0),
    );
    let (sva, dva) = (start + 0x200_0000, start + 0x300_0000);
    Map::new(&n, ha, PAGE)
        .expect("mmap a")
        .write(0, 0xa5a5_0000_0000_0001);
    let d = Map::new(&n, hd, PAGE).expect("mmap dst");
    let _ = n.vm_bind(hd, dva, PAGE, rw);
    let mut failed_runs = 0u32;
    let mut stale = Vec::new();
    let mut done = false;
    for k in 1..=MAX_N {
        // A context per run: the copy that must fault leaves it errored.
        let Ok(ctx) = n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1 << uapi::ENGINE_COPY, 0) else {
            t.check("unbind-nomem: create a copy context", false, || {
                format!("run {k}")
            });
            return;
        };
        let copy_once = |slot: usize| {
            let c = cmds.program(slot, &[copy(sva, dva, PAGE)]);
            n.submit(ctx, 0, &[c], &[])
                .and_then(|s| n.wait(&[fence(ctx, 0, s)], true, 5_000 * MS))
        };
        if n.vm_bind(ha, sva, PAGE, rw).is_err() || copy_once(0).is_err() {
            t.check("unbind-nomem: bind and read the range", false, || {
                format!("run {k}")
            });
            return;
        }
        fnth.arm(k);
        let r = n.vm_unbind(sva, PAGE);
        let injected = fnth.disarm();
        // A failed unbind left the mapping (it can be unbound again) or
        // removed it without the invalidation (EIO: the pages stay
        // referenced until the file closes; ENOENT on the retry): only an
        // unbind that succeeded promises that the range faults.
        let unbound = match r {
            Ok(()) => true,
            Err(e) if !injected => {
                t.check(
                    "unbind-nomem: the unbind with no failure injected",
                    false,
                    || format!("run {k}: errno {}", e.errno),
                );
                return;
            }
            Err(_) => {
                failed_runs += 1;
                match n.vm_unbind(sva, PAGE) {
                    Ok(()) => true,
                    Err(e) if e.errno == libc::ENOENT => false,
                    Err(e) => {
                        t.check(
                            "unbind-nomem: a failed unbind can be done again",
                            false,
                            || format!("run {k}: errno {}", e.errno),
                        );
                        return;
                    }
                }
            }
        };
        if unbound {
            d.write(0, 0);
            let faulted = matches!(copy_once(1), Err(e) if e.errno == libc::EIO);
            if !faulted || d.read(0) != 0 {
                stale.push(k);
            }
        }
        let _ = n.ctx_destroy(ctx);
        if !injected {
            done = true;
            break;
        }
    }
    sweep_end(t, "unbind-nomem", failed_runs, done);
    t.check(
        "unbind-nomem: after every successful unbind the range faults, nothing read",
        stale.is_empty(),
        || {
            format!(
                "runs {stale:?}: the copy after the unbind read the old page through a stale \
                 translation (an unbind that reports success must have invalidated every TLB: \
                 a failure on the way, even of an allocation, is a failed invalidation)"
            )
        },
    );
}

/// Eviction under allocation failures: [`place_four`]'s objects, then one
/// that needs the room of the two oldest (7u: the 2u + 1 MiB free and
/// objects 0 and 1), created with its N-th allocation failing, for every
/// N the call reaches (fail-nth). A run may fail; a run that succeeds with
/// no failed move (a move that fails passes on to the next victim: debugfs
/// `vram_mm` `moves_failed`) must have evicted objects 0 and 1 and nothing
/// else. A victim list that lost an object to a failed allocation, and went
/// on, evicts object 2 instead.
pub fn test_victims_nomem(t: &mut T, path: &Path) {
    let Some(fnth) = fail_nth(t, "victims-nomem") else {
        return;
    };
    let n = open(path);
    let (mut failed, mut wrong) = (0u32, Vec::new());
    let mut done = false;
    for k in 1..=MAX_N {
        let Some((mut held, sizes, u)) = place_four(t, &n, "victims-nomem") else {
            t.check("victims-nomem: VRAM empty and large enough", false, || {
                format!("run {k}: used {:?}", vram_used())
            });
            return;
        };
        let before = vram_used().unwrap_or(0);
        let moves_failed = vram_field("moves_failed");
        let more = 7 * u;
        fnth.arm(k);
        let r = n.gem_create(more, VRAM);
        let injected = fnth.disarm();
        match r {
            // A move that failed (counted) passes on to the next victim.
            Ok(h) if vram_field("moves_failed") != moves_failed => held.push(h),
            Ok(h) => {
                let evicted = (before + more).saturating_sub(vram_used().unwrap_or(0));
                if evicted != sizes[0] + sizes[1] {
                    wrong.push(format!("run {k}: evicted {}", which(&sizes, evicted)));
                }
                held.push(h);
            }
            // The run without an injected failure must succeed.
            Err(e) if !injected => wrong.push(format!(
                "run {k}, with no failure injected: GEM_CREATE {}",
                crate::report::errname(e.errno)
            )),
            Err(_) => failed += 1,
        }
        for h in held {
            let _ = n.gem_close(h);
        }
        if !injected {
            done = true;
            break;
        }
    }
    sweep_end(t, "victims-nomem", failed, done);
    t.check(
        "victims-nomem: every eviction took the two least recently placed objects",
        wrong.is_empty(),
        || {
            format!(
                "{}; want objects 0 and 1: a victim list that could not be built whole must \
                 fail the allocation (ENOMEM), not evict from what it has",
                wrong.join("; ")
            )
        },
    );
}

/// A move out of VRAM under allocation failures: [`place_four`]'s objects,
/// each bound and filled by the GPU with a word of its own, then one more
/// that needs the room of the two oldest, created with its N-th allocation
/// failing, for every N the call reaches (fail-nth). Whatever the call
/// returned, every object must still read its word through the GPU at its
/// VA (first and last page): a move that could not map the object onto its
/// new pages must put it back where it was, mapped there, and say it
/// failed, not leave it unmapped and report a success; and a success
/// counted every object that left VRAM as moved (debugfs `vram_mm`
/// `evictions`: a failed move did not move its object).
pub fn test_move_nomem(t: &mut T, path: &Path) {
    let Some(fnth) = fail_nth(t, "move-nomem") else {
        return;
    };
    let n = open(path);
    let start = n.get_param(param::VA_START).unwrap_or(0);
    let rw = uapi::VM_BIND_READ | uapi::VM_BIND_WRITE;
    let cmds = Cmds::new(&n, start + 0x100_0000, 16).expect("mmap cmds");
    let hd = n.gem_create(PAGE, 0).unwrap_or(0);
    let dva = start + 0x200_0000;
    let _ = n.vm_bind(hd, dva, PAGE, rw);
    let d = Map::new(&n, hd, PAGE).expect("mmap dst");
    let va = |i: usize| start + 0x1000_0000 * (i as u64 + 1);
    let word = |i: usize| 0x5a00_0000 | i as u32;
    let (mut failed, mut lost) = (0u32, Vec::new());
    let mut done = false;
    for k in 1..=MAX_N {
        let Ok(ctx) = n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1 << uapi::ENGINE_COPY, 0) else {
            t.check("move-nomem: create a copy context", false, || {
                format!("run {k}")
            });
            return;
        };
        let run = |slot: usize, packets: &[vgpu_hwif::packet::Packet]| {
            let c = cmds.program(slot, packets);
            n.submit(ctx, 0, &[c], &[])
                .and_then(|s| n.wait(&[fence(ctx, 0, s)], true, 5_000 * MS))
        };
        let Some((mut held, sizes, u)) = place_four(t, &n, "move-nomem") else {
            t.check("move-nomem: VRAM empty and large enough", false, || {
                format!("run {k}: used {:?}", vram_used())
            });
            return;
        };
        for (i, (&h, &size)) in held.iter().zip(sizes.iter()).enumerate() {
            let bound = n.vm_bind(h, va(i), size, rw);
            if bound.is_err() || run(0, &[fill(va(i), size, word(i))]).is_err() {
                t.check("move-nomem: bind and fill the four objects", false, || {
                    format!("run {k}, object {i}: bind {bound:?}")
                });
                return;
            }
        }
        let (used, evictions) = (vram_used().unwrap_or(0), vram_field("evictions"));
        fnth.arm(k);
        let r = n.gem_create(7 * u, VRAM);
        let injected = fnth.disarm();
        match r {
            Ok(h) => {
                // Every object that left VRAM was counted as moved: a move
                // reported failed left its object where it was.
                let gone = (used + 7 * u).saturating_sub(vram_used().unwrap_or(0));
                let moved = vram_field("evictions")
                    .zip(evictions)
                    .map(|(a, b)| a.saturating_sub(b));
                let left = objects_of(&sizes, gone).map(|v| v.len() as u64);
                if moved != left {
                    lost.push(format!(
                        "run {k}: {} left VRAM, {moved:?} moves counted (debugfs vram_mm \
                         evictions): a move that returned an error moved its object anyway",
                        which(&sizes, gone)
                    ));
                }
                held.push(h);
            }
            Err(e) if !injected => lost.push(format!(
                "run {k}, with no failure injected: GEM_CREATE {}",
                crate::report::errname(e.errno)
            )),
            Err(_) => failed += 1,
        }
        // Each object's first and last word, read by the GPU.
        for (i, &size) in sizes.iter().enumerate() {
            for at in [0, size - 4] {
                d.write(0, 0);
                let r = run(1 + i, &[copy(va(i) + at, dva, 4)]);
                let got = d.read(0) as u32;
                if r.is_err() || got != word(i) {
                    lost.push(format!(
                        "run {k}: object {i} at +{at:#x}: {} (read {got:#x})",
                        match r {
                            Ok(_) => "a wrong word".to_string(),
                            Err(e) =>
                                format!("the copy failed: {}", crate::report::errname(e.errno)),
                        }
                    ));
                    break;
                }
            }
        }
        for (i, &size) in sizes.iter().enumerate() {
            let _ = n.vm_unbind(va(i), size);
        }
        for h in held {
            let _ = n.gem_close(h);
        }
        let _ = n.ctx_destroy(ctx);
        if !injected {
            done = true;
            break;
        }
        if !lost.is_empty() {
            break;
        }
    }
    sweep_end(t, "move-nomem", failed, done || !lost.is_empty());
    t.check(
        "move-nomem: every object reads its words through the GPU after each run",
        lost.is_empty(),
        || {
            format!(
                "{}: a move that fails after the copy (mapping the new pages) must leave the \
                 object where it was, in VRAM and mapped there, and return the error",
                lost.join("; ")
            )
        },
    );
}
