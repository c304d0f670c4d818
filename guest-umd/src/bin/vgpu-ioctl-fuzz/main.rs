//! vgpu-ioctl-fuzz: a seeded, replayable fuzzer of the vgpu render node.
//!
//! Random and structured sequences over every ioctl of the node — GET_PARAM,
//! PING, GEM_CREATE, GEM_MMAP_OFFSET, VM_BIND, VM_UNBIND, CTX_CREATE,
//! CTX_DESTROY, CTX_QUERY, SUBMIT, WAIT, QUERY_STATS, FENCE_EXPORT,
//! SAN_REPORT, DRM's
//! GEM_CLOSE and the core ioctls a render node allows — with handles
//! valid, stale and random, sizes and VAs at the edges, bad user pointers,
//! real submissions of random packets and raw words, waits, several
//! threads on one file while it is closed under them, and forked children.
//! Every buffer the kernel reads or writes sits against a `PROT_NONE` guard
//! page (guard.rs), so a crash means the stack under test, never the
//! fuzzer scribbling over itself.
//!
//! Answers are judged (expect.rs): a well-formed call may fail only for
//! want of resources or a usable device, a broken one must fail with a
//! bad-argument errno. An unexpected answer, a fatal signal or an ioctl
//! that does not return prints the log of the last operations. The exit
//! status is 0 only if every answer was expected.
//!
//! `fail-nth` sweeps allocation failures over probe and each ioctl
//! (failnth.rs); `--replay NAME` runs the regression cases of what the
//! fuzzer found (replay.rs).

mod expect;
mod failnth;
mod failprobe;
mod failthread;
mod guard;
mod oplog;
mod ops_gpu;
mod ops_host;
mod ops_mem;
mod ops_misc;
mod packets;
mod phases;
mod replay;
mod rng;
mod sys;
mod worker;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};

use vgpu_umd::uapi::param;

use crate::rng::Rng;
use crate::worker::{DevInfo, Worker};

#[derive(Parser)]
#[command(
    name = "vgpu-ioctl-fuzz",
    about = "Seeded fuzzer of the vgpu render node's ioctls",
    args_conflicts_with_subcommands = true,
    after_help = "Examples:
  vgpu-ioctl-fuzz --seconds 45                 fuzz for 45 s (the seed is printed)
  vgpu-ioctl-fuzz --calls 100000               fuzz until 100000 ioctls were made
  vgpu-ioctl-fuzz --seed 1234 --iterations 20000
                                               replay a run: same seed, same choices
  vgpu-ioctl-fuzz --seed 1234 --ops submit,wait,vm_bind --no-fork --verbose
                                               a few operations, single-threaded, each logged
  vgpu-ioctl-fuzz --replay query-stats-guard   one regression case (--list-replays)
  vgpu-ioctl-fuzz fail-nth                     allocation-failure sweep over every ioctl
  vgpu-ioctl-fuzz fail-nth --probe --ops gem_create
                                               probe (unbind/bind) and GEM_CREATE only"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    /// Seed of the run (default: from the clock; always printed).
    #[arg(long)]
    seed: Option<u64>,
    /// Stop after this many operations (one operation makes one ioctl or
    /// a few; the same seed and count replay the same choices).
    #[arg(long)]
    iterations: Option<u64>,
    /// Stop once this many ioctls were made.
    #[arg(long)]
    calls: Option<u64>,
    /// Stop after this many seconds (default 30 when neither --iterations
    /// nor --calls is given).
    #[arg(long)]
    seconds: Option<f64>,
    /// Threads of the concurrent phases.
    #[arg(long, default_value_t = 3)]
    threads: usize,
    /// No concurrent phases.
    #[arg(long)]
    no_threads: bool,
    /// No forked children.
    #[arg(long)]
    no_fork: bool,
    /// Only these operations (comma-separated: get_param, ping, gem_create,
    /// gem_close, mmap, vm_bind, vm_unbind, ctx_create, ctx_destroy,
    /// ctx_query, submit, wait, fence_export, fence_fd, query_stats,
    /// san_report, raw, bad_arg, core, file).
    #[arg(long, value_delimiter = ',')]
    ops: Vec<String>,
    /// Render node (default: the first vgpu one).
    #[arg(long)]
    node: Option<PathBuf>,
    /// Seconds without a completed operation before the run is declared
    /// hung (the log is printed, exit status 3).
    #[arg(long, default_value_t = 60)]
    stall_secs: u64,
    /// Print every operation as it is made.
    #[arg(long, short)]
    verbose: bool,
    /// Run one regression case instead of fuzzing.
    #[arg(long)]
    replay: Option<String>,
    /// List the regression cases.
    #[arg(long)]
    list_replays: bool,
}

#[derive(Subcommand)]
enum Cmd {
    /// Allocation-failure sweeps through /proc/thread-self/fail-nth over
    /// every N until the call succeeds without an injected failure (needs
    /// the debug kernel: CONFIG_FAULT_INJECTION, failslab, fail_page_alloc,
    /// fail_usercopy); after each case the objects must be back to their
    /// counts and dmesg clean.
    FailNth(failnth::Args),
}

/// The first vgpu render node (or `node`), and what it says about itself.
fn discover(node: Option<PathBuf>) -> Result<DevInfo, String> {
    let dev = match node {
        Some(p) => vgpu_umd::Device::open(&p).map_err(|e| format!("{}: {e}", p.display()))?,
        None => vgpu_umd::Device::open_first().map_err(|e| format!("no vgpu render node: {e}"))?,
    };
    let get = |p| dev.get_param(p).map_err(|e| format!("GET_PARAM {p}: {e}"));
    Ok(DevInfo {
        node: dev.path().to_path_buf(),
        generation: get(param::GENERATION)? as u32,
        engine_mask: get(param::ENGINE_MASK)? as u32,
        va_start: get(param::VA_START)?,
        va_end: get(param::VA_END)?,
    })
}

fn main() {
    let cli = Cli::parse();
    if cli.list_replays {
        for (name, what) in replay::CASES {
            println!("{name:<24} {what}");
        }
        return;
    }
    for op in &cli.ops {
        if !phases::is_op(op) {
            eprintln!("vgpu-ioctl-fuzz: unknown operation '{op}' (see --help)");
            std::process::exit(2);
        }
    }
    let dev = match discover(cli.node.clone()) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("vgpu-ioctl-fuzz: {e}");
            std::process::exit(2);
        }
    };
    oplog::install_signal_handlers();
    oplog::ECHO.store(cli.verbose, std::sync::atomic::Ordering::Relaxed);
    if let Some(Cmd::FailNth(args)) = cli.cmd {
        std::process::exit(failnth::run(&dev, &args));
    }
    oplog::start_watchdog(Duration::from_secs(cli.stall_secs));
    if let Some(name) = &cli.replay {
        std::process::exit(replay::run(name, &dev));
    }
    let seed = cli.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    println!(
        "ioctl-fuzz: seed {seed} node {} gen {} engines {:#x} (the same choices again: --seed {seed} with this run's options)",
        dev.node.display(),
        dev.generation,
        dev.engine_mask
    );
    std::process::exit(fuzz(&cli, dev, seed));
}

/// The fuzzing loop; the exit status.
fn fuzz(cli: &Cli, dev: DevInfo, seed: u64) -> i32 {
    let limit = match (cli.iterations, cli.calls, cli.seconds) {
        (None, None, None) => Some(Duration::from_secs(30)),
        (_, _, s) => s.map(Duration::from_secs_f64),
    };
    let mut rng = Rng::new(seed);
    let mut w = Worker::new(0, rng.fork(0), dev);
    w.manages_files = true;
    w.open_file();
    w.open_file();
    let start = Instant::now();
    let mut last_report = start;
    let mut n = 0u64;
    loop {
        if cli.iterations.is_some_and(|it| n >= it)
            || cli.calls.is_some_and(|c| w.tally.calls >= c)
            || limit.is_some_and(|l| start.elapsed() >= l)
        {
            break;
        }
        n += 1;
        // Phases now and then (their choice comes from the seed too).
        if !cli.no_threads && cli.threads > 1 && n.is_multiple_of(1500) {
            w.concurrent_phase(cli.threads, rng.range(100, 400), &cli.ops);
        } else if !cli.no_fork && n % 2500 == 1250 {
            w.fork_phase(rng.range(100, 400), &cli.ops);
        } else {
            w.run_one(&cli.ops);
        }
        if last_report.elapsed() >= Duration::from_secs(5) {
            last_report = Instant::now();
            println!(
                "ioctl-fuzz: {:.0} s, {} calls, {} unexpected",
                start.elapsed().as_secs_f64(),
                w.tally.calls,
                w.tally.unexpected
            );
        }
    }
    let secs = start.elapsed().as_secs_f64();
    w.release();
    w.files.clear();
    for line in phases::summary(&w.tally, secs) {
        println!("{line}");
    }
    println!("ioctl-fuzz: replay: {}", replay_command(cli, seed, n));
    let serves = still_serves();
    match &serves {
        Ok(what) => println!("ioctl-fuzz: the driver still serves: {what}"),
        Err(e) => println!("ioctl-fuzz: FAIL the driver no longer serves: {e}"),
    }
    if w.tally.unexpected > 0 || serves.is_err() {
        println!("ioctl-fuzz: FAIL (seed {seed})");
        1
    } else {
        println!("ioctl-fuzz: ok (seed {seed})");
        0
    }
}

/// The command that makes the same choices again: this run's seed, its
/// number of operations and the options that shape the mix.
fn replay_command(cli: &Cli, seed: u64, ops: u64) -> String {
    let mut c = format!("vgpu-ioctl-fuzz --seed {seed} --iterations {ops}");
    if cli.no_threads {
        c.push_str(" --no-threads");
    } else if cli.threads != 3 {
        c.push_str(&format!(" --threads {}", cli.threads));
    }
    if cli.no_fork {
        c.push_str(" --no-fork");
    }
    if !cli.ops.is_empty() {
        c.push_str(&format!(" --ops {}", cli.ops.join(",")));
    }
    if let Some(node) = &cli.node {
        c.push_str(&format!(" --node {}", node.display()));
    }
    c
}

/// A normal workload after the fuzzing, through the UMD on a fresh file: a
/// 1 MiB upload, a device copy, a fill and the results read back.
fn still_serves() -> Result<String, String> {
    use vgpu_umd::{Context, MemKind, Stream};
    const N: usize = 1 << 20;
    let ctx = Context::new().map_err(|e| format!("context: {e}"))?;
    let s = Stream::new(&ctx).map_err(|e| format!("stream: {e}"))?;
    let data: Vec<u8> = (0..N).map(|i| (i.wrapping_mul(131) >> 5) as u8).collect();
    let alloc = || ctx.alloc(N as u64, MemKind::DeviceLocal);
    let (a, b, c) = match (alloc(), alloc(), alloc()) {
        (Ok(a), Ok(b), Ok(c)) => (a, b, c),
        _ => return Err("alloc failed".into()),
    };
    s.write(&a, 0, &data).map_err(|e| format!("write: {e}"))?;
    s.copy(&b, 0, &a, 0, N as u64)
        .map_err(|e| format!("copy: {e}"))?;
    s.memset(&c, 0, 0x5a, N as u64)
        .map_err(|e| format!("memset: {e}"))?;
    let mut back = vec![0u8; N];
    s.read(&b, 0, &mut back).map_err(|e| format!("read: {e}"))?;
    if back != data {
        let i = back
            .iter()
            .zip(&data)
            .position(|(x, y)| x != y)
            .unwrap_or(0);
        return Err(format!("copy wrong at byte {i}"));
    }
    s.read(&c, 0, &mut back).map_err(|e| format!("read: {e}"))?;
    if back.iter().any(|&x| x != 0x5a) {
        return Err("memset wrong".into());
    }
    Ok("1 MiB copied and filled, verified".into())
}
