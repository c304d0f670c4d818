//! The KMD under allocation failures: an ioctl run with this thread's
//! fail-nth armed at every N (CONFIG_FAULT_INJECTION, failslab counting
//! `GFP_KERNEL` allocations) until a run sees no injected failure. Each
//! run may fail, but what the driver reports must be true: a call that
//! succeeded did everything it promises.

use std::path::Path;

use vgpu_umd::uapi::{self, param};

use crate::failthread::{count_sleeping_slab_allocations, FailNth};
use crate::node::{copy, fence, open, Cmds, Map, MS, PAGE};
use crate::report::T;

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
