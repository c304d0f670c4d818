//! System suspend to RAM (`echo mem > /sys/power/state`; scripts/vm wakes
//! the guest through QEMU's QMP socket): cycles in which a context, its
//! VM_BINDs and VRAM contents survive, a job queued behind an unsignalled
//! fence runs after the resume, and a job waiting on the CPU refuses the
//! suspend.
//!
//! Each cycle: the CPU writes a new pattern to a system source; the GPU
//! copies it to an object in VRAM (not CPU-visible) and the CPU writes the
//! pattern's complement to a CPU-visible VRAM object (through the
//! aperture); a copy from the VRAM object to a system destination is
//! submitted behind a sw_sync fence, so it is queued across the suspend;
//! the guest suspends and is woken; then the fence signals, the copy runs
//! and the destination must hold the cycle's pattern (the VRAM object kept
//! its bytes, the queued job ran), the visible object its complement, and
//! the device's reset log one more reset of kind `sleep`. Another file's
//! user-mode queue has a copy in flight as the suspend starts (it finishes
//! first) and takes a new one after the resume (the queue survived).
//! One more cycle runs in the kernel's suspend test mode (`pm_test`
//! `devices`): every driver suspends and resumes but the machine does not
//! sleep, so the device keeps its power; the same checks hold.

use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::{Duration, Instant};

use vgpu_umd::uapi::{self, param, GEM_CREATE_CPU_ACCESS as CPU, GEM_CREATE_VRAM as VRAM};

use crate::debugfs::{debugfs, summary_field};
use crate::node::{copy, fence, open, sem_wait_eq, Cmds, Map, MS, PAGE};
use crate::queue::SwSync;
use crate::report::T;
use crate::syncobj::{submit_s, sync};
use crate::uqueue::{create_queue, fence_packet, Queue};
use vgpu_umd::kmd::Kmd;

/// Cycles of the test (`VGPU_SUSPEND_CYCLES` overrides).
const CYCLES: u64 = 20;

/// Suspends the guest to RAM; returns when it has been woken.
fn suspend() -> std::io::Result<()> {
    std::fs::write("/sys/power/state", "mem")
}

/// debugfs `contexts`' count of device resets.
fn device_resets() -> Option<u64> {
    summary_field(&debugfs("contexts"), "device_resets").and_then(|v| v.parse().ok())
}

pub fn test_suspend(t: &mut T, path: &Path) {
    let states = std::fs::read_to_string("/sys/power/state").unwrap_or_default();
    let can = states.split_whitespace().any(|s| s == "mem");
    t.check(
        "suspend: the guest can suspend to RAM (mem in /sys/power/state)",
        can,
        || format!("/sys/power/state: {states:?}"),
    );
    if !can {
        return;
    }
    let cycles = std::env::var("VGPU_SUSPEND_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(CYCLES);
    let n = open(path);
    let start = n.get_param(param::VA_START).unwrap_or(0);
    let has_vram = n.get_param(param::VRAM_SIZE).unwrap_or(0) > 0;
    let visible = n.get_param(param::VRAM_VISIBLE).unwrap_or(0) > 0;
    let rw = uapi::VM_BIND_READ | uapi::VM_BIND_WRITE;
    let Some(sw) = SwSync::new() else {
        t.check(
            "suspend: sw_sync (debugfs sync/sw_sync)",
            false,
            String::new,
        );
        return;
    };
    let Some(ctx) = t.ok(
        "suspend: a copy context",
        n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1 << uapi::ENGINE_COPY, 0),
    ) else {
        return;
    };
    let cmds = Cmds::new(&n, start + 0x100_0000, 16).expect("cmds");
    let size = 64 * PAGE;
    let (Some(src), Some(mid), Some(dst)) = (
        t.ok("suspend: source", n.gem_create(size, 0)),
        t.ok(
            "suspend: an object in VRAM",
            n.gem_create(size, if has_vram { VRAM } else { 0 }),
        ),
        t.ok("suspend: destination", n.gem_create(size, 0)),
    ) else {
        return;
    };
    let vis = if has_vram && visible {
        t.ok(
            "suspend: a CPU-visible VRAM object",
            n.gem_create(size, VRAM | CPU),
        )
    } else {
        None
    };
    let (sva, mva, dva) = (start + 0x200_0000, start + 0x300_0000, start + 0x400_0000);
    for (h, va) in [(src, sva), (mid, mva), (dst, dva)] {
        t.ok("suspend: bind", n.vm_bind(h, va, size, rw));
    }
    let (Some(s), Some(d)) = (
        t.ok("suspend: map the source", Map::new(&n, src, size)),
        t.ok("suspend: map the destination", Map::new(&n, dst, size)),
    ) else {
        return;
    };
    let v = vis.and_then(|h| t.ok("suspend: map the visible object", Map::new(&n, h, size)));
    let mut rig = Rig {
        n: &n,
        ctx,
        cmds: &cmds,
        sw,
        s,
        d,
        v,
        uq: UserQueue::new(t, path),
        vas: (sva, mva, dva),
        size,
    };
    let resets0 = device_resets().unwrap_or(0);
    let mut bad = Vec::new();
    let mut resume = Vec::new();
    let mut first_fence = Vec::new();
    for cycle in 1..=cycles {
        match rig.cycle(cycle) {
            Ok((r, f)) => {
                resume.push(r);
                first_fence.push(f);
            }
            Err(e) => {
                bad.push(format!("cycle {cycle}: {e}"));
                break;
            }
        }
    }
    t.check(
        &format!("suspend: {cycles} suspend/resume cycles, VRAM contents and the queued copy checked each time"),
        bad.is_empty(),
        || bad.join("; "),
    );
    // The kernel's suspend test mode: every driver's suspend and resume
    // run, the machine never sleeps (the device keeps its power): the
    // same cycle must hold.
    let tested = pm_test_devices(true)
        .map_err(|e| e.to_string())
        .and_then(|()| {
            let r = rig.cycle(cycles + 1);
            let _ = pm_test_devices(false);
            r
        });
    t.check(
        "suspend: a cycle in the kernel's test mode (pm_test devices: no power loss) holds too",
        tested.is_ok(),
        || format!("{tested:?}"),
    );
    let cycles = cycles + u64::from(tested.is_ok());
    let resets = device_resets().unwrap_or(0);
    let log = debugfs("contexts");
    let sleeps = log
        .lines()
        .filter(|l| l.starts_with("reset sleep ") && l.contains(" ok in "))
        .count();
    t.check(
        "suspend: one device reset of kind sleep per cycle, every one ok",
        bad.is_empty() && resets == resets0 + cycles && sleeps as u64 >= cycles.min(8),
        || format!("device_resets {resets0} -> {resets}, {sleeps} sleep lines in the reset log"),
    );
    let ctxq = n.ctx_query(ctx);
    t.check(
        "suspend: the context is innocent and not errored",
        matches!(&ctxq, Ok(q) if q.reset_status == uapi::CTX_RESET_NONE || q.reset_status == uapi::CTX_RESET_INNOCENT),
        || format!("{ctxq:?}"),
    );
    refused(t, &n, ctx, &cmds, start + 0x500_0000);
    print_times(&mut resume, &mut first_fence);
    let _ = n.ctx_destroy(ctx);
}

/// `/sys/power/pm_test`: `devices` (suspend and resume the devices, do
/// not sleep; no delay between) or back to `none`.
fn pm_test_devices(on: bool) -> std::io::Result<()> {
    if on {
        std::fs::write("/sys/module/suspend/parameters/pm_test_delay", "0")?;
    }
    std::fs::write("/sys/power/pm_test", if on { "devices" } else { "none" })
}

/// What each cycle of [`test_suspend`] uses.
struct Rig<'a> {
    n: &'a Kmd,
    ctx: u32,
    cmds: &'a Cmds,
    sw: SwSync,
    s: Map,
    d: Map,
    v: Option<Map>,
    uq: Option<UserQueue>,
    /// Where the source, the VRAM object and the destination are bound.
    vas: (u64, u64, u64),
    size: u64,
}

/// Cycle `cycle`'s word `i`.
fn pattern(cycle: u64, i: usize) -> u64 {
    (cycle << 40) ^ (i as u64).wrapping_mul(0x9e37_79b9)
}

impl Rig<'_> {
    /// One cycle (see the module documentation); returns how long
    /// `echo mem` took and the queued copy's fence after it.
    fn cycle(&mut self, cycle: u64) -> Result<(Duration, Duration), String> {
        let (n, ctx, (sva, mva, dva), size) = (self.n, self.ctx, self.vas, self.size);
        let words = (size / 8) as usize;
        for i in 0..words {
            self.s.write(i, pattern(cycle, i));
            self.d.write(i, 0);
        }
        if let Some(v) = &self.v {
            for i in 0..words {
                v.write(i, !pattern(cycle, i));
            }
        }
        let into_vram = self.cmds.program(0, &[copy(sva, mva, size)]);
        n.submit(ctx, 0, &[into_vram], &[])
            .and_then(|q| n.wait(&[fence(ctx, 0, q)], true, 10_000 * MS))
            .map_err(|e| format!("the copy into VRAM: {e}"))?;
        // Queued behind a fence that signals after the resume.
        let gate = n.syncobj_create(0).unwrap_or(0);
        let imported = self.sw.fence(cycle as u32).map(|f| {
            n.syncobj_fd_to_handle(
                f.as_raw_fd(),
                gate,
                uapi::SYNCOBJ_FD_TO_HANDLE_IMPORT_SYNC_FILE,
            )
        });
        if !matches!(imported, Some(Ok(_))) {
            return Err(format!("sw_sync fence: {imported:?}"));
        }
        let out_of_vram = self.cmds.program(1, &[copy(mva, dva, size)]);
        let queued = submit_s(n, ctx, &[out_of_vram], &[sync(gate, 0)], &[])
            .map_err(|e| format!("the queued copy: {e}"))?;
        if let Some(u) = &mut self.uq {
            u.copy(2 * cycle - 1, pattern(cycle, 1));
        }
        let t0 = Instant::now();
        suspend().map_err(|e| format!("echo mem > /sys/power/state: {e}"))?;
        let asleep = t0.elapsed();
        let t1 = Instant::now();
        self.sw.inc(1);
        n.wait(&[fence(ctx, 0, queued)], true, 10_000 * MS)
            .map_err(|e| format!("the queued copy after the resume: {e}"))?;
        let first = t1.elapsed();
        let _ = n.syncobj_destroy(gate);
        if let Some(i) = (0..words).find(|&i| self.d.read(i) != pattern(cycle, i)) {
            return Err(format!(
                "VRAM object word {i} is {:#x}, want {:#x}",
                self.d.read(i),
                pattern(cycle, i)
            ));
        }
        if let Some(u) = &mut self.uq {
            u.check(2 * cycle - 1, pattern(cycle, 1))
                .map_err(|e| format!("the user-mode queue's copy before the suspend: {e}"))?;
            u.copy(2 * cycle, pattern(cycle, 2));
            u.check(2 * cycle, pattern(cycle, 2))
                .map_err(|e| format!("the user-mode queue after the resume: {e}"))?;
        }
        if let Some(v) = &self.v {
            if let Some(i) = (0..words).find(|&i| v.read(i) != !pattern(cycle, i)) {
                return Err(format!(
                    "visible VRAM object word {i} is {:#x}, want {:#x}",
                    v.read(i),
                    !pattern(cycle, i)
                ));
            }
        }
        Ok((asleep, first))
    }
}

/// The cycles' times: `echo mem` (suspend, asleep, resume) and the first
/// fence after each resume.
fn print_times(resume: &mut [Duration], first_fence: &mut [Duration]) {
    if resume.is_empty() || first_fence.is_empty() {
        return;
    }
    resume.sort();
    first_fence.sort();
    println!(
        "info suspend: {} cycles; echo mem returned after median {:?} (max {:?}: suspend, asleep until woken, resume); first fence after the resume median {:?} (max {:?})",
        resume.len(),
        resume[resume.len() / 2],
        resume[resume.len() - 1],
        first_fence[first_fence.len() / 2],
        first_fence[first_fence.len() - 1],
    );
}

/// A job on a ring waiting for the CPU (which is frozen during a suspend)
/// refuses the suspend with `EBUSY`; once the CPU lets it go, it finishes
/// and a suspend goes through.
fn refused(t: &mut T, n: &Kmd, ctx: u32, cmds: &Cmds, va: u64) {
    let Some(sem) = t.ok("suspend: a semaphore object", n.gem_create(PAGE, 0)) else {
        return;
    };
    t.ok(
        "suspend: bind it",
        n.vm_bind(sem, va, PAGE, uapi::VM_BIND_READ | uapi::VM_BIND_WRITE),
    );
    let Some(m) = t.ok("suspend: map it", Map::new(n, sem, PAGE)) else {
        return;
    };
    m.write(0, 0);
    let waiting = cmds.program(2, &[sem_wait_eq(va, 1)]);
    let Some(q) = t.ok(
        "suspend: a job waiting for the CPU",
        n.submit(ctx, 0, &[waiting], &[]),
    ) else {
        return;
    };
    std::thread::sleep(Duration::from_millis(200));
    let t0 = Instant::now();
    let r = suspend();
    t.check(
        "suspend: refused with EBUSY while a job waits for the CPU",
        matches!(&r, Err(e) if e.raw_os_error() == Some(libc::EBUSY)),
        || format!("{r:?} after {:?}", t0.elapsed()),
    );
    let dmesg = std::process::Command::new("dmesg")
        .output()
        .map(|o| o.stdout)
        .unwrap_or_default();
    t.check(
        "suspend: dmesg says why",
        String::from_utf8_lossy(&dmesg).contains("system suspend refused: the work of file"),
        String::new,
    );
    m.write(0, 1);
    t.ok(
        "suspend: the job finishes once the CPU writes the semaphore",
        n.wait(&[fence(ctx, 0, q)], true, 10_000 * MS),
    );
    t.ok("suspend: then a suspend goes through", suspend());
}

/// Another file's user-mode queue on the copy engine with a data object:
/// page 0 the source, page 1 the destination, the fence in page 2.
struct UserQueue {
    n: Kmd,
    q: Queue,
    data: Map,
    va: u64,
}

impl UserQueue {
    fn new(t: &mut T, path: &Path) -> Option<Self> {
        let n = open(path);
        let start = n.get_param(param::VA_START).unwrap_or(0);
        let q = t.ok(
            "suspend: a user-mode queue in another file",
            create_queue(&n, start + 0x100_0000, uapi::ENGINE_COPY),
        )?;
        let va = start + 0x300_0000;
        let h = t.ok("suspend: the queue's data", n.gem_create(3 * PAGE, 0))?;
        t.ok(
            "suspend: bind the queue's data",
            n.vm_bind(h, va, 3 * PAGE, uapi::VM_BIND_READ | uapi::VM_BIND_WRITE),
        )?;
        let data = t.ok("suspend: map the queue's data", Map::new(&n, h, 3 * PAGE))?;
        Some(Self { n, q, data, va })
    }

    /// Queues a copy of `value` (written to the source) and fence `seqno`.
    fn copy(&mut self, seqno: u64, value: u64) {
        self.data.write(0, value);
        self.q.write(&[
            copy(self.va, self.va + PAGE, PAGE),
            fence_packet(self.va + 2 * PAGE, seqno),
        ]);
        self.q.submit(&self.n);
    }

    /// Waits (5 s at most) for fence `seqno`; the destination must then
    /// hold `value`.
    fn check(&self, seqno: u64, value: u64) -> Result<(), String> {
        let fence_word = (2 * PAGE / 8) as usize;
        let end = Instant::now() + Duration::from_secs(5);
        while self.data.read(fence_word) < seqno && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(1));
        }
        let (f, got) = (
            self.data.read(fence_word),
            self.data.read((PAGE / 8) as usize),
        );
        if f < seqno {
            Err(format!("fence {f}, want {seqno}"))
        } else if got != value {
            Err(format!("copied {got:#x}, want {value:#x}"))
        } else {
            Ok(())
        }
    }
}
