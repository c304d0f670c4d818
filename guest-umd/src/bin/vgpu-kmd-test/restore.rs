//! Evicted objects moved back to VRAM (guest-kmd/restore.rs): an object
//! evicted by a larger allocation moves back at its file's next `SUBMIT`
//! once that allocation is gone, its words intact and read by that very
//! job; its guest-memory charge is given back; an object the CPU asked to
//! map stays in system memory; nothing moves back while VRAM has less than
//! its headroom free. Needs a device with VRAM (64 MiB in e2e).

use std::path::Path;
use std::time::Duration;

use vgpu_umd::kmd::Kmd;
use vgpu_umd::uapi::{self, param, GEM_CREATE_VRAM as VRAM};

use crate::debugfs::debugfs;
use crate::node::{copy, fence, fill, open, Cmds, Map, MS, PAGE};
use crate::report::T;
use crate::vram::vram_field;

const MIB: u64 = 1 << 20;
const WORD: u64 = 0x6b6b_6b6b_6b6b_6b6b;

/// debugfs `vram_mm`'s line of object `id` (`bo ID gen G evicted E: ...`).
fn bo_line(id_of: &str) -> Option<String> {
    debugfs("vram_mm")
        .lines()
        .find(|l| l.starts_with(id_of))
        .map(str::to_owned)
}

/// The id debugfs `vram_mm` gives the object that was just evicted (the
/// only `system` line whose eviction count is 1 and which is not in
/// `before`).
fn evicted_ids() -> Vec<String> {
    debugfs("vram_mm")
        .lines()
        .filter(|l| l.starts_with("bo ") && l.ends_with(": system"))
        .filter_map(|l| l.split_whitespace().nth(1).map(|s| format!("bo {s} ")))
        .collect()
}

fn run_job(t: &mut T, n: &Kmd, ctx: u32, cmd: uapi::DrmVgpuCmd, what: &str) {
    let r = n
        .submit(ctx, 0, &[cmd], &[])
        .and_then(|s| n.wait(&[fence(ctx, 0, s)], true, 10_000 * MS));
    t.ok(&format!("vram-restore: {what}"), r);
}

pub fn test_vram_restore(t: &mut T, path: &Path) {
    let n = open(path);
    if n.get_param(param::VRAM_SIZE).unwrap_or(0) == 0 {
        t.check("vram-restore: the device has VRAM", false, || {
            "no VRAM".into()
        });
        return;
    }
    let start = n.get_param(param::VA_START).unwrap_or(0);
    let rw = uapi::VM_BIND_READ | uapi::VM_BIND_WRITE;
    let Some(ctx) = t.ok(
        "vram-restore: a copy context",
        n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1 << uapi::ENGINE_COPY, 0),
    ) else {
        return;
    };
    let cmds = Cmds::new(&n, start + 0x100_0000, 8).expect("cmds");
    let size = 4 * MIB;
    let (Some(a), Some(d)) = (
        t.ok("vram-restore: object A in VRAM", n.gem_create(size, VRAM)),
        t.ok("vram-restore: a system destination", n.gem_create(size, 0)),
    ) else {
        return;
    };
    let (ava, dva) = (start + 0x1000_0000, start + 0x2000_0000);
    t.ok("vram-restore: bind A", n.vm_bind(a, ava, size, rw));
    t.ok(
        "vram-restore: bind the destination",
        n.vm_bind(d, dva, size, rw),
    );
    run_job(
        t,
        &n,
        ctx,
        cmds.program(0, &[fill(ava, size, WORD as u32)]),
        "the GPU fills A",
    );
    // A VRAM object as large as what is free plus a page: A is evicted.
    let before = evicted_ids();
    let free = vram_field("free").unwrap_or(0);
    let big = t.ok(
        "vram-restore: a VRAM object larger than what is free evicts A",
        n.gem_create(free + PAGE, VRAM),
    );
    let new: Vec<String> = evicted_ids()
        .into_iter()
        .filter(|l| !before.contains(l))
        .collect();
    t.check(
        "vram-restore: A is in system memory",
        new.len() == 1,
        || debugfs("vram_mm"),
    );
    let Some(id) = new.first().cloned() else {
        return;
    };
    let mem_evicted = n.query_stats(&mut []).map(|s| s.mem_bytes).unwrap_or(0);
    // While VRAM is full nothing moves back (the headroom).
    std::thread::sleep(Duration::from_millis(150));
    run_job(
        t,
        &n,
        ctx,
        cmds.program(1, &[copy(ava, dva, PAGE)]),
        "a job while VRAM is full",
    );
    t.check(
        "vram-restore: nothing moves back while VRAM is full",
        bo_line(&id).is_some_and(|l| l.ends_with(": system")) && vram_field("restores") == Some(0),
        || debugfs("vram_mm"),
    );
    // The large object goes: at the file's next SUBMIT, A moves back.
    if let Some(b) = big {
        let _ = n.gem_close(b);
    }
    std::thread::sleep(Duration::from_millis(150));
    run_job(
        t,
        &n,
        ctx,
        cmds.program(2, &[copy(ava, dva, size)]),
        "the next job copies A out",
    );
    let line = bo_line(&id).unwrap_or_default();
    t.check(
        "vram-restore: A moved back to VRAM at that SUBMIT (generation 2: out and back)",
        line.starts_with(&format!("{id}gen 2 evicted 1: size {size:#x} "))
            && vram_field("restores") == Some(1)
            && vram_field("restored_bytes") == Some(size),
        || debugfs("vram_mm"),
    );
    let words = Map::new(&n, d, size).map(|m| (0..(size / 8) as usize).all(|i| m.read(i) == WORD));
    t.check(
        "vram-restore: the job read A's words from VRAM, intact",
        matches!(words, Ok(true)),
        || format!("{words:?}"),
    );
    let mem_now = n
        .query_stats(&mut [])
        .map(|s| s.mem_bytes)
        .unwrap_or(u64::MAX);
    t.check(
        "vram-restore: A's guest memory is given back",
        mem_now + size == mem_evicted,
        || format!("GEM memory {mem_evicted:#x} evicted, {mem_now:#x} after"),
    );
    // An object the CPU asked to map stays in system memory.
    if let Some(c) = t.ok("vram-restore: object C in VRAM", n.gem_create(size, VRAM)) {
        let mapped = Map::new(&n, c, size);
        t.check(
            "vram-restore: C mapped by the CPU (moved to system memory for it)",
            mapped.is_ok(),
            || format!("{:?}", mapped.as_ref().err()),
        );
        std::thread::sleep(Duration::from_millis(150));
        run_job(
            t,
            &n,
            ctx,
            cmds.program(3, &[copy(ava, dva, PAGE)]),
            "a job after the CPU mapping",
        );
        t.check(
            "vram-restore: C stays in system memory (its CPU mapping shows those pages)",
            vram_field("restores") == Some(1),
            || debugfs("vram_mm"),
        );
        drop(mapped);
        let _ = n.gem_close(c);
    }
    let _ = n.vm_unbind(ava, size);
    let _ = n.vm_unbind(dva, size);
    let _ = n.gem_close(a);
    let _ = n.gem_close(d);
    let _ = n.ctx_destroy(ctx);
}
