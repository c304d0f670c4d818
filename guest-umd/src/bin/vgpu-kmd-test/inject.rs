//! The driver's own fault-injection points (guest-kmd/inject.rs, knobs in
//! /sys/kernel/debug/vgpu_fail/<point>/): each injected failure reaches
//! userspace as its documented errno, or as the documented fallback; the
//! failure is logged; the same call succeeds once the point is quiet; no
//! object, mapping, page table or context is left behind. Only this process
//! fails (`task-filter` and /proc/self/make-it-fail): the driver's own
//! threads run on undisturbed.

use std::path::Path;

use vgpu_umd::kmd::Kmd;
use vgpu_umd::uapi::{self, param, GEM_CREATE_SYSTEM as SYS, GEM_CREATE_VRAM as VRAM};

use crate::debugfs::{debugfs, object, summary_field};
use crate::node::{fence, fill, open, Cmds, Map, MS, PAGE};
use crate::report::T;
use crate::vram::vram_used;

const ROOT: &str = "/sys/kernel/debug/vgpu_fail";
const POINTS: [&str; 4] = ["vram_alloc", "bo_pages", "pt_alloc", "control_cmd"];
const MIB: u64 = 1 << 20;

fn knob(point: &str, name: &str, value: &str) -> std::io::Result<()> {
    std::fs::write(format!("{ROOT}/{point}/{name}"), value)
}

/// Arms `point`: every `interval`-th call it sees fails, `times` times
/// (-1: no limit), for this process only.
fn arm(point: &str, interval: u32, times: i32) -> std::io::Result<()> {
    knob(point, "task-filter", "Y")?;
    knob(point, "verbose", "1")?;
    knob(point, "interval", &interval.to_string())?;
    knob(point, "times", &times.to_string())?;
    knob(point, "probability", "100")
}

fn disarm(point: &str) -> std::io::Result<()> {
    knob(point, "probability", "0")?;
    knob(point, "interval", "1")?;
    knob(point, "times", "1")
}

/// Failures injected at `point` so far (the framework's log lines).
fn injected(point: &str) -> usize {
    let out = std::process::Command::new("dmesg")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let needle = format!("name {point}, interval");
    out.lines().filter(|l| l.contains(&needle)).count()
}

/// The live counts the points must leave as they were.
fn counts() -> [i64; 5] {
    [
        object("user_bos"),
        object("mappings"),
        object("vm_tables"),
        object("pt_pool_used"),
        object("contexts"),
    ]
}

pub fn test_inject(t: &mut T, path: &Path) {
    for p in POINTS {
        t.check(
            &format!("inject: knobs of {p}"),
            Path::new(&format!("{ROOT}/{p}/probability")).exists(),
            || format!("no {ROOT}/{p}/ (debugfs not mounted?)"),
        );
    }
    t.ok(
        "inject: this process may fail (make-it-fail)",
        std::fs::write("/proc/self/make-it-fail", "1"),
    );
    {
        // First, on a file of its own: an eviction makes the driver's own
        // copy context (kept), which the counts below must not see.
        let n = open(path);
        if n.get_param(param::VRAM_SIZE).unwrap_or(0) > 0 {
            vram_alloc(t, &n);
        }
    }
    let _ = disarm("vram_alloc");
    t.check(
        "inject: every object of the vram_alloc file freed",
        object("user_bos") == 0,
        || format!("user_bos {}", object("user_bos")),
    );
    let before = counts();
    {
        let n = open(path);
        bo_pages(t, &n);
        pt_alloc(t, &n);
        control_cmd(t, &n);
    }
    for p in POINTS {
        let _ = disarm(p);
    }
    let after = counts();
    t.check(
        "inject: objects, mappings, tables and contexts back to their counts",
        after == before,
        || {
            format!(
                "user_bos, mappings, vm_tables, pt_pool_used, contexts: {before:?} -> {after:?}"
            )
        },
    );
}

/// `vram_alloc`: ENOSPC as if VRAM were full.
fn vram_alloc(t: &mut T, n: &Kmd) {
    let p = "vram_alloc";
    let seen = injected(p);
    let used = vram_used().unwrap_or(0);
    t.ok("inject: arm vram_alloc (next call, once)", arm(p, 1, 1));
    let h = t.ok(
        "inject: VRAM | SYSTEM with vram_alloc failing is created",
        n.gem_create(MIB, VRAM | SYS),
    );
    t.check(
        "inject: ... in system memory (the fallback), the failure logged",
        vram_used() == Some(used) && injected(p) == seen + 1,
        || {
            format!(
                "vram used {used:#x} -> {:?}, injected {}",
                vram_used(),
                injected(p) - seen
            )
        },
    );
    if let Some(h) = h {
        let _ = n.gem_close(h);
    }
    // The third request from now fails (interval 3): the third object falls
    // back to system memory, the first two are in VRAM.
    t.ok(
        "inject: arm vram_alloc (every third call, once)",
        arm(p, 3, 1),
    );
    let mut grew = Vec::new();
    let mut hs = Vec::new();
    for _ in 0..3 {
        let u = vram_used().unwrap_or(0);
        if let Ok(h) = n.gem_create(MIB, VRAM | SYS) {
            hs.push(h);
        }
        grew.push(vram_used().unwrap_or(0) > u);
    }
    t.check(
        "inject: the third VRAM allocation fails (interval 3): only it lands in system memory",
        hs.len() == 3 && grew == [true, true, false],
        || format!("{} created, in VRAM: {grew:?}", hs.len()),
    );
    for h in hs {
        let _ = n.gem_close(h);
    }
    // VRAM only, one failure: the driver evicts, then allocates again.
    t.ok("inject: arm vram_alloc (next call, once)", arm(p, 1, 1));
    let used = vram_used().unwrap_or(0);
    if let Some(h) = t.ok(
        "inject: VRAM only with one vram_alloc failure is created on the retry",
        n.gem_create(MIB, VRAM),
    ) {
        t.check(
            "inject: ... in VRAM",
            vram_used() == Some(used + MIB),
            || format!("vram used {used:#x} -> {:?}", vram_used()),
        );
        let _ = n.gem_close(h);
    }
    // VRAM only, every call failing: the other VRAM object is evicted
    // trying to make room (its words intact), then ENOSPC.
    let start = n.get_param(param::VA_START).unwrap_or(0);
    let Ok(ctx) = n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1 << uapi::ENGINE_COPY, 0) else {
        t.check("inject: context", false, || "CTX_CREATE failed".into());
        return;
    };
    let cmds = Cmds::new(n, start + 0x100_0000, 4).expect("cmds");
    let size = 64 * PAGE;
    if let Some(x) = t.ok("inject: a VRAM object", n.gem_create(size, VRAM)) {
        let va = start + 0x400_0000;
        let _ = n.vm_bind(x, va, size, uapi::VM_BIND_READ | uapi::VM_BIND_WRITE);
        let c = cmds.program(0, &[fill(va, size, 0x5a5a_5a5a)]);
        let r = n
            .submit(ctx, 0, &[c], &[])
            .and_then(|s| n.wait(&[fence(ctx, 0, s)], true, 10_000 * MS));
        t.ok("inject: the GPU fills it", r);
        t.ok("inject: arm vram_alloc (every call)", arm(p, 1, -1));
        t.err(
            "inject: VRAM only with every vram_alloc failing",
            n.gem_create(MIB, VRAM),
            libc::ENOSPC,
        );
        let _ = disarm(p);
        let evicted = debugfs("vram_mm").lines().any(|l| l.ends_with(": system"));
        let words = Map::new(n, x, size)
            .map(|m| (0..(size / 8) as usize).all(|i| m.read(i) == 0x5a5a_5a5a_5a5a_5a5a));
        t.check(
            "inject: the other object was evicted trying to make room, its words intact",
            evicted && matches!(words, Ok(true)),
            || format!("evicted {evicted}, words {words:?}"),
        );
        let _ = n.vm_unbind(va, size);
        let _ = n.gem_close(x);
    }
    let _ = n.ctx_destroy(ctx);
    if let Some(h) = t.ok(
        "inject: quiet again, VRAM only works",
        n.gem_create(MIB, VRAM),
    ) {
        let _ = n.gem_close(h);
    }
}

/// `bo_pages`: ENOMEM pinning and mapping an object's pages.
fn bo_pages(t: &mut T, n: &Kmd) {
    let p = "bo_pages";
    let start = n.get_param(param::VA_START).unwrap_or(0);
    let rw = uapi::VM_BIND_READ | uapi::VM_BIND_WRITE;
    let Some(h) = t.ok("inject: an object", n.gem_create(4 * PAGE, 0)) else {
        return;
    };
    let va = start + 0x800_0000;
    let seen = injected(p);
    t.ok("inject: arm bo_pages (next call, once)", arm(p, 1, 1));
    t.err(
        "inject: VM_BIND with bo_pages failing",
        n.vm_bind(h, va, 4 * PAGE, rw),
        libc::ENOMEM,
    );
    t.check(
        "inject: bo_pages failure logged",
        injected(p) == seen + 1,
        || format!("{} logged", injected(p) - seen),
    );
    t.ok(
        "inject: the same VM_BIND again",
        n.vm_bind(h, va, 4 * PAGE, rw),
    );
    let _ = n.vm_unbind(va, 4 * PAGE);
    let _ = n.gem_close(h);
}

/// `pt_alloc`: ENOMEM for a page-table page.
fn pt_alloc(t: &mut T, n: &Kmd) {
    let p = "pt_alloc";
    let start = n.get_param(param::VA_START).unwrap_or(0);
    let rw = uapi::VM_BIND_READ | uapi::VM_BIND_WRITE;
    let Some(h) = t.ok("inject: an object to map", n.gem_create(PAGE, 0)) else {
        return;
    };
    // A VA of its own 1 GiB: the mapping needs new tables.
    let va = start + (7 << 30);
    let seen = injected(p);
    t.ok("inject: arm pt_alloc (second call, once)", arm(p, 2, 1));
    let r = n.vm_bind(h, va, PAGE, rw);
    let _ = disarm(p);
    t.err("inject: VM_BIND with pt_alloc failing", r, libc::ENOMEM);
    t.check(
        "inject: pt_alloc failure logged",
        injected(p) == seen + 1,
        || format!("{} logged", injected(p) - seen),
    );
    t.ok("inject: the same VM_BIND again", n.vm_bind(h, va, PAGE, rw));
    let _ = n.vm_unbind(va, PAGE);
    let _ = n.gem_close(h);
}

/// `control_cmd`: EIO for a control command, never sent.
fn control_cmd(t: &mut T, n: &Kmd) {
    let p = "control_cmd";
    t.ok("inject: arm control_cmd (next call, once)", arm(p, 1, 1));
    t.err(
        "inject: CTX_CREATE with control_cmd failing",
        n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1 << uapi::ENGINE_COPY, 0),
        libc::EIO,
    );
    let Some(ctx) = t.ok(
        "inject: CTX_CREATE again",
        n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1 << uapi::ENGINE_COPY, 0),
    ) else {
        return;
    };
    let start = n.get_param(param::VA_START).unwrap_or(0);
    let cmds = Cmds::new(n, start + 0x1000_0000, 4).expect("cmds");
    let Some(h) = t.ok("inject: an object to fill", n.gem_create(PAGE, 0)) else {
        return;
    };
    let va = start + 0x1100_0000;
    let _ = n.vm_bind(h, va, PAGE, uapi::VM_BIND_READ | uapi::VM_BIND_WRITE);
    let c = cmds.program(0, &[fill(va, PAGE, 7)]);
    let r = n
        .submit(ctx, 0, &[c], &[])
        .and_then(|s| n.wait(&[fence(ctx, 0, s)], true, 10_000 * MS));
    t.ok("inject: a job on it completes: the device serves", r);
    let status = debugfs("status");
    let resets = summary_field(&debugfs("contexts"), "device_resets");
    t.check(
        "inject: the device is still running, never reset",
        status.lines().any(|l| l == "state: running") && resets.as_deref() == Some("0"),
        || format!("device_resets {resets:?}, {status}"),
    );
    let _ = n.vm_unbind(va, PAGE);
    let _ = n.gem_close(h);
    let _ = n.ctx_destroy(ctx);
}
