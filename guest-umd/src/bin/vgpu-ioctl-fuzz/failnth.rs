//! Allocation-failure sweeps: `/proc/thread-self/fail-nth` over every N.
//!
//! For each call (an ioctl after its set-up, opening or closing the node,
//! binding or unbinding the driver through sysfs) and N = 1, 2, …: a fresh
//! set-up, N written to this thread's `fail-nth` (the N-th fault-injection
//! point the thread passes then fails: a slab allocation (failslab), a page
//! allocation (fail_page_alloc) or a user copy (fail_usercopy)), the call,
//! the counter read back, everything closed. The call may fail (with the
//! errno of what failed) or cope; afterwards every object count of debugfs
//! `objects` must be back to its value before the sweep and dmesg must have
//! no splat. The sweep of a call ends at the first N the call does not
//! reach: that run had no injected failure and must succeed. After each
//! call's sweep kmemleak scans (objects older than 5 s) and must report
//! nothing. Needs the debug kernel (images/build --debug).

mod cases;

use std::fs;
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use crate::failprobe;
pub use crate::failthread::FailNth;
use crate::sys::{self, rname};
use crate::worker::DevInfo;

use cases::{prepare, Env};

#[derive(clap::Args)]
pub struct Args {
    /// Calls to sweep (default: all): open, close, get_param, ping,
    /// gem_create, gem_create_2m, gem_close, mmap_offset, vm_bind,
    /// vm_bind_2m, vm_bind_lazy, vm_unbind, ctx_create, ctx_destroy,
    /// ctx_destroy_busy, ctx_query, submit, wait, fence_export,
    /// query_stats.
    #[arg(long, value_delimiter = ',')]
    ops: Vec<String>,
    /// Also sweep the driver's probe (sysfs bind) and remove (unbind).
    #[arg(long)]
    probe: bool,
    /// Only probe and remove (and --module), no ioctl.
    #[arg(long)]
    probe_only: bool,
    /// Also sweep module load: vgpu is unloaded and this file loaded again
    /// with `finit_module` from the armed thread (its init and the probe it
    /// runs), e.g. /lib/modules/vgpu.ko.
    #[arg(long, value_name = "KO")]
    module: Option<String>,
    /// Parameters of the module loads (--module).
    #[arg(long, default_value = "")]
    module_params: String,
    /// Safety stop: the largest N tried for one call.
    #[arg(long, default_value_t = 20000)]
    pub max_n: u32,
    /// No kmemleak scans.
    #[arg(long)]
    pub no_kmemleak: bool,
    /// Print every case (N, the answer).
    #[arg(long)]
    pub each: bool,
}

const IOCTL_OPS: &[&str] = &[
    "open",
    "close",
    "get_param",
    "ping",
    "gem_create",
    "gem_create_2m",
    "gem_close",
    "mmap_offset",
    "vm_bind",
    "vm_bind_2m",
    "vm_bind_lazy",
    "vm_unbind",
    "ctx_create",
    "ctx_destroy",
    "ctx_destroy_busy",
    "ctx_query",
    "submit",
    "wait",
    "fence_export",
    "query_stats",
    "host_map",
    "host_unmap",
];

/// dmesg lines that are splats (a fault injected makes the kernel print
/// allocation warnings with stack traces: those are not splats).
const SPLATS: &[&str] = &[
    "WARNING:",
    "BUG:",
    "Oops",
    "UBSAN:",
    "refcount_t:",
    "general protection",
    "kernel BUG",
    "ODEBUG:",
    "DMA-API:",
    "INFO: task",
    "possible circular locking",
    "Kernel panic",
    "rcu: INFO",
    "list_add corruption",
    "list_del corruption",
];

/// New kernel messages since the last read (`/dev/kmsg`, non-blocking).
pub struct Kmsg(RawFd);

impl Kmsg {
    pub fn open() -> Option<Kmsg> {
        // SAFETY: a NUL-terminated path.
        let fd = unsafe {
            libc::open(
                c"/dev/kmsg".as_ptr(),
                libc::O_RDONLY | libc::O_NONBLOCK | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return None;
        }
        // SAFETY: our own fd; skips the messages already there.
        unsafe { libc::lseek(fd, 0, libc::SEEK_END) };
        Some(Kmsg(fd))
    }

    /// The messages logged since the last call.
    pub fn new_lines(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        let mut buf = vec![0u8; 8192];
        loop {
            // SAFETY: reads one record into a buffer we own.
            let n = unsafe { libc::read(self.0, buf.as_mut_ptr().cast(), buf.len()) };
            if n < 0 {
                let e = std::io::Error::last_os_error().raw_os_error();
                if e == Some(libc::EPIPE) {
                    continue; // records overwritten: read on
                }
                break;
            }
            if n == 0 {
                break;
            }
            let rec = String::from_utf8_lossy(&buf[..n as usize]);
            let msg = rec.split_once(';').map_or(&*rec, |(_, m)| m);
            out.push(msg.trim_end().to_string());
        }
        out
    }
}

impl Drop for Kmsg {
    fn drop(&mut self) {
        sys::close(self.0);
    }
}

/// The splats among `lines`.
pub fn splats(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .filter(|l| SPLATS.iter().any(|s| l.contains(s)))
        .cloned()
        .collect()
}

/// Every `name count` line of debugfs `objects` of the first device.
pub fn objects() -> Vec<(String, i64)> {
    let Ok(dir) = fs::read_dir("/sys/kernel/debug/vgpu") else {
        return Vec::new();
    };
    for e in dir.flatten() {
        if let Ok(s) = fs::read_to_string(e.path().join("objects")) {
            return s
                .lines()
                .filter_map(|l| {
                    let (k, v) = l.split_once(' ')?;
                    Some((k.to_string(), v.trim().parse().ok()?))
                })
                .collect();
        }
    }
    Vec::new()
}

/// The counts that must return to the baseline (live objects; totals and
/// high-water marks only grow).
fn live(objs: &[(String, i64)]) -> Vec<(String, i64)> {
    objs.iter()
        .filter(|(k, _)| !k.ends_with("_total") && !k.ends_with("_max") && !k.starts_with("ever"))
        .cloned()
        .collect()
}

/// Writes `text` to a sysfs/debugfs/proc file; the errno if refused.
pub fn write_file(path: &str, text: &str) -> Result<(), i32> {
    fs::write(path, text).map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))
}

/// What the sweeps found.
#[derive(Default)]
pub struct Totals {
    pub cases: u64,
    pub splats: u64,
    pub leaks: u64,
    pub kmemleaks: u64,
    pub failures: u64,
}

/// Makes every allocation count for fail-nth: failslab and fail_page_alloc
/// skip sleeping allocations (and fail_page_alloc order-0 and highmem ones,
/// shmem's pages) unless told otherwise; no report per injected failure.
fn configure() -> Result<(), String> {
    crate::failthread::count_sleeping_slab_allocations()
        .map_err(|e| format!("{e} (a kernel with FAULT_INJECTION_DEBUG_FS?)"))?;
    let knobs: &[(&str, &[(&str, &str)])] = &[
        (
            "fail_page_alloc",
            &[
                ("ignore-gfp-wait", "N"),
                ("ignore-gfp-highmem", "N"),
                ("min-order", "0"),
                ("verbose", "0"),
            ],
        ),
        ("fail_usercopy", &[("verbose", "0")]),
    ];
    for (dir, settings) in knobs {
        for (k, v) in settings.iter() {
            let path = format!("/sys/kernel/debug/{dir}/{k}");
            write_file(&path, v).map_err(|e| {
                format!(
                    "{path}: {} (a debug kernel with FAULT_INJECTION_DEBUG_FS?)",
                    sys::ename(e)
                )
            })?;
        }
    }
    Ok(())
}

/// kmemleak: scan (objects must be older than 5 s to be reported: wait
/// first), read the report, clear it. `None` without kmemleak.
fn kmemleak_scan(wait: bool) -> Option<Vec<String>> {
    const K: &str = "/sys/kernel/debug/kmemleak";
    if !std::path::Path::new(K).exists() {
        return None;
    }
    if wait {
        std::thread::sleep(Duration::from_secs(6));
    }
    write_file(K, "scan").ok()?;
    let report = fs::read_to_string(K).unwrap_or_default();
    let _ = write_file(K, "clear");
    Some(report.lines().map(str::to_string).collect())
}

/// kmemleak after the sweep of `what` (unless --no-kmemleak): what it
/// reports is printed and counted; the summary's words.
pub fn kmemleak_after(what: &str, args: &Args, t: &mut Totals) -> String {
    let Some(report) = (if args.no_kmemleak {
        None
    } else {
        kmemleak_scan(true)
    }) else {
        return "no kmemleak".into();
    };
    let n = report
        .iter()
        .filter(|l| l.contains("unreferenced object"))
        .count();
    if n > 0 {
        println!("FAIL fail-nth {what}: kmemleak reports {n} objects:");
        for l in report.iter().take(80) {
            println!("  | {l}");
        }
    }
    t.kmemleaks += n as u64;
    format!("kmemleak {n}")
}

/// Object counts back to `base` (waiting up to 3 s for deferred frees);
/// the differences if not.
fn settle(base: &[(String, i64)]) -> Option<String> {
    let start = Instant::now();
    loop {
        let now = live(&objects());
        if now == base {
            return None;
        }
        if start.elapsed() > Duration::from_secs(3) {
            let diff: Vec<String> = base
                .iter()
                .zip(&now)
                .filter(|(a, b)| a != b)
                .map(|((k, a), (_, b))| format!("{k} {a} -> {b}"))
                .collect();
            return Some(if diff.is_empty() {
                format!("{base:?} -> {now:?}")
            } else {
                diff.join(", ")
            });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn tally_line(answers: &std::collections::BTreeMap<String, u64>) -> String {
    answers
        .iter()
        .map(|(k, v)| format!("{k}:{v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn sweep_op(op: &str, dev: &DevInfo, args: &Args, fnth: &FailNth, kmsg: &mut Kmsg, t: &mut Totals) {
    let base = live(&objects());
    let start = Instant::now();
    let mut answers = std::collections::BTreeMap::new();
    let (mut cases, mut splat_n, mut leak_n) = (0u64, 0u64, 0u64);
    let mut end = None;
    for n in 1..=args.max_n {
        let mut env = match Env::new(dev) {
            Ok(e) => e,
            Err(e) => {
                println!("FAIL fail-nth {op} N={n}: the driver no longer serves: {e}");
                t.failures += 1;
                return;
            }
        };
        let mut call = match prepare(op, &mut env) {
            Ok(c) => c,
            Err(e) => {
                println!("FAIL fail-nth {op} N={n}: the driver no longer serves: {e}");
                env.teardown();
                t.failures += 1;
                return;
            }
        };
        fnth.arm(n);
        let r = call(&mut env.arena);
        let injected = fnth.disarm();
        drop(call);
        env.teardown();
        cases += 1;
        *answers.entry(rname(r)).or_insert(0u64) += 1;
        let lines = kmsg.new_lines();
        let sp = splats(&lines);
        if !sp.is_empty() {
            splat_n += 1;
            println!("FAIL fail-nth {op} N={n} ({}): splat in dmesg:", rname(r));
            for l in lines.iter().take(60) {
                println!("  | {l}");
            }
        }
        if let Some(diff) = settle(&base) {
            leak_n += 1;
            println!(
                "FAIL fail-nth {op} N={n} ({}): objects not back: {diff}",
                rname(r)
            );
        }
        if args.each {
            println!(
                "case {op} N={n}: {}{}",
                rname(r),
                if injected { "" } else { " (nothing injected)" }
            );
        }
        if !injected {
            if r.is_err() {
                println!(
                    "FAIL fail-nth {op}: without an injected failure the call failed: {}",
                    rname(r)
                );
                t.failures += 1;
            }
            end = Some(n);
            break;
        }
    }
    if end.is_none() {
        println!(
            "FAIL fail-nth {op}: still injecting at N={} (--max-n)",
            args.max_n
        );
        t.failures += 1;
    }
    let km = kmemleak_after(op, args, t);
    println!(
        "fail-nth {op}: {cases} cases (N=1..{}), {:.1} s; answers {}; {splat_n} splats, {leak_n} object leaks, {km}",
        end.unwrap_or(args.max_n),
        start.elapsed().as_secs_f64(),
        tally_line(&answers),
    );
    t.cases += cases;
    t.splats += splat_n;
    t.leaks += leak_n;
}

/// Runs the sweeps; the exit status.
pub fn run(dev: &DevInfo, args: &Args) -> i32 {
    for op in &args.ops {
        if !IOCTL_OPS.contains(&op.as_str()) {
            eprintln!("vgpu-ioctl-fuzz fail-nth: no case '{op}' (see --help)");
            return 2;
        }
    }
    if let Err(e) = configure() {
        eprintln!("vgpu-ioctl-fuzz fail-nth: {e}");
        return 2;
    }
    let fnth = match FailNth::open() {
        Ok(f) => f,
        Err(e) => {
            eprintln!("vgpu-ioctl-fuzz fail-nth: {e}");
            return 2;
        }
    };
    let Some(mut kmsg) = Kmsg::open() else {
        eprintln!("vgpu-ioctl-fuzz fail-nth: cannot read /dev/kmsg");
        return 2;
    };
    // What kmemleak found before the sweeps is not theirs.
    if !args.no_kmemleak {
        kmemleak_scan(false);
    }
    let start = Instant::now();
    let mut t = Totals::default();
    let ops: Vec<&str> = if args.probe_only {
        Vec::new()
    } else if args.ops.is_empty() {
        IOCTL_OPS.to_vec()
    } else {
        args.ops.iter().map(String::as_str).collect()
    };
    for op in ops {
        sweep_op(op, dev, args, &fnth, &mut kmsg, &mut t);
    }
    if args.probe || args.probe_only {
        failprobe::sweep_probe(dev, args, &fnth, &mut kmsg, &mut t);
    }
    if let Some(ko) = &args.module {
        failprobe::sweep_module(dev, ko, &args.module_params, args, &fnth, &mut kmsg, &mut t);
    }
    println!(
        "fail-nth: {} cases in {:.0} s, {} splats, {} object leaks, {} kmemleak reports, {} other failures",
        t.cases,
        start.elapsed().as_secs_f64(),
        t.splats,
        t.leaks,
        t.kmemleaks,
        t.failures
    );
    i32::from(t.splats + t.leaks + t.kmemleaks + t.failures > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn allocation_failures_are_not_splats_but_checker_reports_are() {
        // What an injected failure makes the kernel print.
        let injected = lines(&[
            "vgpu-ioctl-fuzz: vmalloc error: size 8192, page order 0, failed to allocate pages, mode:0xdc0(GFP_KERNEL|__GFP_ZERO)",
            "CPU: 1 UID: 0 PID: 97 Comm: vgpu-ioctl-fuzz Not tainted 7.2.13 #1",
            "Call Trace:",
            " <TASK>",
            " dump_stack_lvl+0x5d/0x80",
            " warn_alloc+0x164/0x190",
        ]);
        assert!(splats(&injected).is_empty());
        for report in [
            "BUG: KASAN: slab-use-after-free in _RNvNtCs1_4vgpu8selftest14use_after_free+0x5c/0x90",
            "WARNING: CPU: 0 PID: 1 at drivers/gpu/drm/drm_gem.c:1000 drm_gem_object_release+0x2b/0x40",
            "UBSAN: shift-out-of-bounds in lib/test_ubsan.c:65:11",
            "ODEBUG: free active (active state 0) object: 00000000a1b2c3d4 object type: hrtimer hint: 0x0",
            "WARNING: possible circular locking dependency detected",
            "refcount_t: underflow; use-after-free.",
        ] {
            let mut l = injected.clone();
            l.push(report.to_string());
            assert_eq!(splats(&l), vec![report.to_string()], "{report}");
        }
    }

    #[test]
    fn only_live_counts_must_come_back() {
        let objs = vec![
            ("contexts".to_string(), 2),
            ("bos_total".to_string(), 40),
            ("bos_max".to_string(), 9),
            ("bos".to_string(), 3),
        ];
        assert_eq!(
            live(&objs),
            vec![("contexts".to_string(), 2), ("bos".to_string(), 3)]
        );
    }
}
