//! `vgpu-as`: assemble, disassemble, inspect and run vgpu compute modules.

use clap::{Parser, Subcommand};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use vgpu_isa::bounds::{BufferBounds, BufferRange};
use vgpu_isa::mem::PAGE_SIZE;
use vgpu_isa::{
    assemble, disassemble, run_grid, ArgKind, FaultKind, GlobalMemory, GridOutcome, GridReport,
    Launch, Module, SparseMemory,
};
#[cfg(feature = "jit")]
use vgpu_isa::{
    jit::{JitMode, JitModule},
    run_grid_jit,
};

const EXAMPLES: &str = "\
Examples:
  vgpu-as asm isa/samples/saxpy.s -o saxpy.vgpu            assemble for generation 2
  vgpu-as asm kernel.s -o kernel.vgpu --gen 1              for a generation-1 device
  vgpu-as dis saxpy.vgpu                                   print assembly
  vgpu-as inspect saxpy.vgpu                               kernels, metadata, sizes
  vgpu-as run isa/samples/saxpy.s --kernel saxpy --grid 4 --wg 256 \\
      --arg n=1000 --arg alpha=2.0 --arg x=f32:1000:iota --arg y=f32:1000:1.0
  vgpu-as run isa/samples/spin.s --kernel spin --timeout-ms 200    cancel a hang
  vgpu-as run isa/samples/saxpy.s --kernel saxpy --grid 4096 --wg 256 --jit off \
      --arg n=1048576 --arg alpha=2.0 --arg x=f32:1048576:iota --arg y=f32:1048576   interpreter only
  vgpu-as run isa/samples/matmul.s --kernel matmul --grid 2,2 --wg 16,16 \\
      --arg m=32 --arg n=32 --arg k=32 --arg a=f32:1024:rand --arg b=f32:1024:rand \\
      --arg c=f32:1024 --show 8
  vgpu-as run isa/samples/vecadd.s --kernel vecadd --strict-bounds \\
      --arg n=65 --arg a=f32:64:iota --arg b=f32:64:1 --arg c=f32:64    overrun reported";

/// The first buffer's GPU VA in `vgpu-as run`.
const FIRST_BUFFER_VA: u64 = 1 << 32;
/// The xorshift64 state `rand` buffers start from without `--seed`.
const DEFAULT_SEED: u64 = 0x2545_f491_4f6c_dd1d;

const RUN_HELP: &str = "\
Run a kernel on the host interpreter (or the JIT, --jit) over buffers the tool
allocates, then print the outcome and the buffers.

Arguments (--arg, repeatable, one per kernel argument by its .arg name):
  NAME=VALUE             a scalar: u32/i32/u64 decimal or 0x hex, f32 a float
  NAME=TYPE:COUNT[:INIT] a ptr argument: a new buffer of COUNT 4-byte elements,
                         TYPE u32, i32 or f32, INIT one of
                           zero   all 0 (the default)
                           iota   0, 1, 2, ... (as TYPE)
                           rand   pseudo-random, seeded (below)
                           NUMBER every element that value (as TYPE)
  Arguments not given are 0 (pointers: VA 0, unmapped).

rand: xorshift64 (shifts 13, 7, 17) from the state --seed (default
  0x2545f4914f6cdd1d, must be non-zero), one step per element, continuing
  across buffers in the order of the --arg options, so a run is reproducible.
  f32 elements are k / 2^24 for k = the state's top 24 bits: [0, 1) in steps of
  2^-24; u32 elements are the state's top 32 bits (0 ..= 4294967295); i32
  elements the same bits as two's complement (-2147483648 ..= 2147483647).

Buffer placement (GPU VAs): the first buffer at 0x100000000, each further one
  at the next 64 KiB boundary after the previous buffer's end plus one unmapped
  64 KiB guard page, in --arg order. Buffers are mapped read-write in 64 KiB
  pages, so by default an access past a buffer's end faults only beyond its
  last page (in the guard page); inside the page it reads zeros or writes
  bytes nobody reads. --strict-bounds makes every global access that is not
  wholly inside one buffer a fault (OutOfBounds), with the buffer it overran.

Output (stdout):
  line 1   completed | cancelled | trap CODE in workgroup [X, Y, Z], warp W, pc P,
           lanes MASK | fault in workgroup [X, Y, Z]: <fault>
  line 2   D of N workgroups, W warp instructions, T thread instructions, C cycles
           (modelled GPU time, docs/isa.md §15), MS ms (host time)
  then     NAME @ VA: [v0, v1, ...] per buffer, in --arg order, the first --show
           elements (' ...' if there are more); f32 as shortest round-trip
           decimals, u32/i32 as decimal integers
  strict-bounds faults add a 'strict bounds:' line after line 1.
Exit status: 0 completed; 2 cancelled, trapped or faulted; 1 an input error (a
  bad --arg value, an unreadable or invalid module, no such kernel); options
  the parser rejects exit 2 with a usage message on stderr.";

#[derive(Parser)]
#[command(
    name = "vgpu-as",
    version,
    about = "Assembler, disassembler and host runner for the vgpu compute ISA (docs/isa.md)",
    after_help = EXAMPLES
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Assemble a source file into a module.
    ///
    /// The module records the generation it was built for (default 2, the
    /// same as `run`): a generation-2 device runs modules of either
    /// generation; a generation-1 device (`vgpu-device --gen 1`, the
    /// device's default) needs `--gen 1`, which refuses shfl and vote.
    #[command(
        after_help = "Examples:\n  vgpu-as asm isa/samples/vecadd.s -o vecadd.vgpu          generation 2\n  vgpu-as asm isa/samples/vecadd.s -o vecadd.vgpu --gen 1  for a generation-1 device"
    )]
    Asm {
        /// Assembly source.
        input: String,
        /// Output module.
        #[arg(short, long)]
        output: String,
        /// Hardware generation to encode for (1 or 2).
        #[arg(long, default_value_t = 2)]
        gen: u32,
    },
    /// Print a module as assembly (re-assembles to the same module).
    #[command(after_help = "Example:\n  vgpu-as dis vecadd.vgpu > vecadd.s")]
    Dis {
        /// Module file.
        input: String,
    },
    /// Print a module's kernels, metadata and sizes.
    #[command(after_help = "Example:\n  vgpu-as inspect vecadd.vgpu")]
    Inspect {
        /// Module file.
        input: String,
    },
    /// Run a kernel on the host interpreter.
    #[command(
        long_about = RUN_HELP,
        after_help = "Example:\n  vgpu-as run isa/samples/vecadd.s --kernel vecadd --grid 1 --wg 256 \\\n      --arg n=200 --arg a=f32:200:iota --arg b=f32:200:1.5 --arg c=f32:200"
    )]
    Run(RunArgs),
}

#[derive(clap::Args)]
struct RunArgs {
    /// Module file or assembly source (.s).
    input: String,
    /// Kernel to run.
    #[arg(long)]
    kernel: String,
    /// Workgroups: X[,Y[,Z]].
    #[arg(long, default_value = "1")]
    grid: String,
    /// Workgroup size: X[,Y[,Z]] (default: the kernel's hint, else 64).
    #[arg(long)]
    wg: Option<String>,
    /// Kernel argument, repeatable (see above).
    #[arg(long = "arg")]
    args: Vec<String>,
    /// Generation for assembling a .s input and of the simulated device.
    #[arg(long, default_value_t = 2)]
    gen: u32,
    /// Initial xorshift64 state of `rand` buffers (non-zero; decimal or 0x hex).
    #[arg(long, value_parser = parse_seed, default_value = "0x2545f4914f6cdd1d")]
    seed: u64,
    /// Fault on any global access not wholly inside one buffer, even inside
    /// the buffer's last 64 KiB page (for teaching; see above).
    #[arg(long)]
    strict_bounds: bool,
    /// Compute units (host threads).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Cancel the run after this many milliseconds (the device's reset).
    #[arg(long)]
    timeout_ms: Option<u64>,
    /// Elements of each buffer to print (0: all).
    #[arg(long, default_value_t = 16)]
    show: usize,
    /// Engine: off (interpreter), on (native code, an error where the host
    /// or the kernel cannot use it) or auto (native code where possible).
    #[cfg(feature = "jit")]
    #[arg(long, value_name = "MODE", default_value = "auto")]
    jit: JitMode,
}

fn read_module(path: &str, gen: u32) -> Result<Module, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{path}: {e}"))?;
    if bytes.starts_with(&vgpu_isa::module::MAGIC) {
        Module::load(&bytes, gen).map_err(|e| format!("{path}: {e}"))
    } else {
        let src =
            String::from_utf8(bytes).map_err(|_| format!("{path}: not a module or UTF-8 text"))?;
        assemble(&src, gen).map_err(|e| format!("{path}: {e}"))
    }
}

fn parse_seed(s: &str) -> Result<u64, String> {
    match parse_number(s) {
        Some(0) => Err("the seed must be non-zero (xorshift64 stays at 0)".into()),
        Some(v) => Ok(v),
        None => Err(format!("bad seed {s:?}")),
    }
}

fn dims(s: &str) -> Result<[u32; 3], String> {
    let v: Vec<u32> = s
        .split(',')
        .map(|p| {
            p.trim()
                .parse::<u32>()
                .map_err(|_| format!("bad size {s:?}"))
        })
        .collect::<Result<_, _>>()?;
    match v[..] {
        [x] => Ok([x, 1, 1]),
        [x, y] => Ok([x, y, 1]),
        [x, y, z] => Ok([x, y, z]),
        _ => Err(format!("bad size {s:?}: X[,Y[,Z]]")),
    }
}

struct Buffer {
    name: String,
    ty: String,
    va: u64,
    count: usize,
}

fn parse_number(s: &str) -> Option<u64> {
    if let Some(h) = s.strip_prefix("0x") {
        return u64::from_str_radix(h, 16).ok();
    }
    if let Ok(v) = s.parse::<i64>() {
        return Some(v as u64);
    }
    s.parse::<u64>().ok()
}

/// The native code to run the kernel with, per `--jit`.
#[cfg(feature = "jit")]
fn engine(r: &RunArgs, module: &Module, kernel: usize) -> Result<Option<JitModule>, String> {
    if r.jit == JitMode::Off {
        return Ok(None);
    }
    let m = match JitModule::compile(module) {
        Ok(m) => m,
        Err(e) if r.jit == JitMode::On => return Err(format!("--jit on: {e}")),
        Err(e) => {
            eprintln!("note: running on the interpreter: {e}");
            return Ok(None);
        }
    };
    if let Err(why) = m.kernel(kernel) {
        if r.jit == JitMode::On {
            return Err(format!("--jit on: kernel {}: {why}", r.kernel));
        }
        eprintln!("note: kernel {} runs on the interpreter: {why}", r.kernel);
        return Ok(None);
    }
    Ok(Some(m))
}

#[cfg(not(feature = "jit"))]
fn engine(_: &RunArgs, _: &Module, _: usize) -> Result<Option<()>, String> {
    Ok(None)
}

fn run(r: &RunArgs) -> Result<bool, String> {
    let (input, kernel, args, gen, threads, show) = (
        r.input.as_str(),
        r.kernel.as_str(),
        &r.args,
        r.gen,
        r.threads,
        r.show,
    );
    let (grid, wg) = (r.grid.as_str(), r.wg.as_deref());
    let module = read_module(input, gen)?;
    let k = module
        .kernel(kernel)
        .ok_or_else(|| format!("no kernel {kernel:?}"))?;
    let grid = dims(grid)?;
    let wg = match wg {
        Some(w) => dims(w)?,
        None if k.wg_hint != [0, 0, 0] => k.wg_hint,
        None => [64, 1, 1],
    };
    let mut mem = SparseMemory::new();
    let mut argbuf = vec![0u8; k.arg_size as usize];
    let mut buffers = Vec::new();
    let mut next_va = FIRST_BUFFER_VA;
    let mut seed = r.seed;
    debug_assert_ne!(DEFAULT_SEED, 0);
    for a in args {
        let (name, value) = a
            .split_once('=')
            .ok_or_else(|| format!("--arg {a:?}: expected NAME=VALUE"))?;
        let info = k
            .args
            .iter()
            .find(|x| x.name == name)
            .ok_or_else(|| format!("kernel {kernel} has no argument {name:?}"))?;
        let off = info.offset as usize;
        let bits: u64 = match info.kind {
            ArgKind::Ptr => {
                let parts: Vec<&str> = value.split(':').collect();
                let (ty, count, init) = match parts[..] {
                    [t, c] => (t, c, "zero"),
                    [t, c, i] => (t, c, i),
                    _ => return Err(format!("--arg {a:?}: expected NAME=TYPE:COUNT[:INIT]")),
                };
                if !["u32", "i32", "f32"].contains(&ty) {
                    return Err(format!("--arg {a:?}: buffer type must be u32, i32 or f32"));
                }
                let count: usize = count
                    .parse()
                    .map_err(|_| format!("--arg {a:?}: bad count"))?;
                let va = next_va;
                mem.map(va, (count as u64 * 4).max(4), true);
                next_va = (va + count as u64 * 4).next_multiple_of(PAGE_SIZE) + PAGE_SIZE;
                let words: Vec<u32> = (0..count)
                    .map(|i| {
                        let v = match init {
                            "zero" => 0.0,
                            "iota" => i as f64,
                            "rand" => {
                                vgpu_hwif::rng::xorshift64(&mut seed);
                                if ty != "f32" {
                                    // Integers: the top 32 bits, the whole range.
                                    return (seed >> 32) as u32;
                                }
                                (seed >> 40) as f64 / (1u64 << 24) as f64
                            }
                            n => n.parse::<f64>().unwrap_or(f64::NAN),
                        };
                        match ty {
                            "f32" => (v as f32).to_bits(),
                            "i32" => v as i32 as u32,
                            _ => v as u32,
                        }
                    })
                    .collect();
                if !["zero", "iota", "rand"].contains(&init) && init.parse::<f64>().is_err() {
                    return Err(format!("--arg {a:?}: INIT is zero, iota, rand or a number"));
                }
                mem.write_u32s(va, &words).map_err(|e| format!("{e:?}"))?;
                buffers.push(Buffer {
                    name: name.to_string(),
                    ty: ty.to_string(),
                    va,
                    count,
                });
                va
            }
            ArgKind::F32 => value
                .parse::<f32>()
                .map(|f| f.to_bits() as u64)
                .map_err(|_| format!("--arg {a:?}: not a float"))?,
            _ => parse_number(value).ok_or_else(|| format!("--arg {a:?}: not an integer"))?,
        };
        let bytes = bits.to_le_bytes();
        argbuf[off..off + info.size as usize].copy_from_slice(&bytes[..info.size as usize]);
    }
    let launch = Launch::new(&module, kernel, grid, wg, argbuf).map_err(|e| e.to_string())?;
    let jit = engine(r, &module, launch.kernel_index())?;
    let cancel = AtomicBool::new(false);
    let t = std::time::Instant::now();
    let done = AtomicBool::new(false);
    let ranges = buffers
        .iter()
        .map(|b| BufferRange {
            va: b.va,
            len: b.count as u64 * 4,
        })
        .collect();
    let strict = BufferBounds::new(&mem, ranges);
    let report = std::thread::scope(|s| {
        if let Some(ms) = r.timeout_ms {
            let until = std::time::Instant::now() + std::time::Duration::from_millis(ms);
            let (done, cancel) = (&done, &cancel);
            s.spawn(move || {
                while !done.load(Ordering::Relaxed) {
                    if std::time::Instant::now() >= until {
                        cancel.store(true, Ordering::Relaxed);
                        break;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
            });
        }
        let report = if r.strict_bounds {
            run_on(&module, &launch, &strict, threads, &cancel, jit.as_ref())
        } else {
            run_on(&module, &launch, &mem, threads, &cancel, jit.as_ref())
        };
        done.store(true, Ordering::Relaxed);
        report
    });
    let elapsed = t.elapsed();
    let ok = report.outcome == GridOutcome::Completed;
    match report.outcome {
        GridOutcome::Completed => println!("completed"),
        GridOutcome::Cancelled => println!("cancelled"),
        GridOutcome::Trapped { workgroup, trap } => println!(
            "trap {} in workgroup {workgroup:?}, warp {}, pc {}, lanes {:#010x}",
            trap.code, trap.warp, trap.pc, trap.mask
        ),
        GridOutcome::Faulted { workgroup, fault } => {
            println!("fault in workgroup {workgroup:?}: {fault}");
            if let (true, FaultKind::Global(m)) = (r.strict_bounds, fault.kind) {
                println!(
                    "strict bounds: {}",
                    explain_overrun(&buffers, &strict, m.va)
                );
            }
        }
    }
    println!(
        "{} of {} workgroups, {} warp instructions, {} thread instructions, {} cycles, {:.3} ms",
        report.workgroups_completed,
        launch.workgroups(),
        report.stats.warp_instructions,
        report.stats.thread_instructions,
        report.cycles,
        elapsed.as_secs_f64() * 1e3
    );
    for b in &buffers {
        let n = if show == 0 {
            b.count
        } else {
            show.min(b.count)
        };
        let words = mem.read_u32s(b.va, n).map_err(|e| format!("{e:?}"))?;
        let vals: Vec<String> = words
            .iter()
            .map(|&w| match b.ty.as_str() {
                "f32" => format!("{}", f32::from_bits(w)),
                "i32" => format!("{}", w as i32),
                _ => format!("{w}"),
            })
            .collect();
        let more = if n < b.count { " ..." } else { "" };
        println!("{} @ {:#x}: [{}{more}]", b.name, b.va, vals.join(", "));
    }
    Ok(ok)
}

/// Where a strict-bounds fault at `va` lies relative to the buffers.
fn explain_overrun(buffers: &[Buffer], strict: &BufferBounds<'_, SparseMemory>, va: u64) -> String {
    let name = |r: &BufferRange| {
        buffers
            .iter()
            .find(|b| b.va == r.va)
            .map_or("?", |b| b.name.as_str())
    };
    if let Some(r) = strict.buffer_of(va, 1) {
        // The access starts inside a buffer and runs past its end.
        return format!(
            "the access at {va:#x} runs past the end of buffer {} ({} bytes at {:#x})",
            name(r),
            r.len,
            r.va
        );
    }
    match strict.overrun_of(va) {
        Some((r, past)) => format!(
            "{va:#x} is {past} bytes past the end of buffer {} ({} bytes at {:#x}, element {} of {})",
            name(r),
            r.len,
            r.va,
            (va - r.va) / 4,
            r.len / 4
        ),
        None => format!("{va:#x} is before the first buffer ({FIRST_BUFFER_VA:#x})"),
    }
}

#[cfg(feature = "jit")]
type Jit = JitModule;
#[cfg(not(feature = "jit"))]
type Jit = ();

/// The grid on `mem`, with the JIT's code if there is some.
fn run_on<M: GlobalMemory + Sync>(
    module: &Module,
    launch: &Launch,
    mem: &M,
    threads: usize,
    cancel: &AtomicBool,
    jit: Option<&Jit>,
) -> GridReport {
    match jit {
        #[cfg(feature = "jit")]
        Some(j) => run_grid_jit(module, launch, mem, threads, Some(cancel), j),
        _ => run_grid(module, launch, mem, threads, Some(cancel)),
    }
}

/// Restores the default action of `SIGPIPE` (the Rust runtime ignores it),
/// so that a reader that goes away (`vgpu-as disasm m.bin | head`) ends the
/// tool quietly instead of a panic at the next print. vgpu-as writes only
/// to its standard streams and files.
fn exit_quietly_on_closed_pipe() {
    // SAFETY: `signal` with `SIG_DFL` installs no handler, so no code runs
    // in signal context; it only sets the process's disposition of SIGPIPE
    // back to the default, which no Rust code relies on (the runtime
    // ignores SIGPIPE only so that such writes return EPIPE).
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn main() -> ExitCode {
    exit_quietly_on_closed_pipe();
    let cli = Cli::parse();
    let result: Result<bool, String> = match cli.cmd {
        Cmd::Asm { input, output, gen } => (|| {
            let src = std::fs::read_to_string(&input).map_err(|e| format!("{input}: {e}"))?;
            let m = assemble(&src, gen).map_err(|e| format!("{input}: {e}"))?;
            let bytes = m.to_bytes().map_err(|e| e.to_string())?;
            std::fs::write(&output, &bytes).map_err(|e| format!("{output}: {e}"))?;
            Ok(true)
        })(),
        Cmd::Dis { input } => read_module(&input, 2).map(|m| {
            print!("{}", disassemble(&m));
            true
        }),
        Cmd::Inspect { input } => (|| {
            let bytes = std::fs::read(&input).map_err(|e| format!("{input}: {e}"))?;
            let m = Module::from_bytes(&bytes).map_err(|e| format!("{input}: {e}"))?;
            println!("module {input}");
            println!("  generation   {}", m.generation());
            println!("  file size    {} bytes", bytes.len());
            println!(
                "  code         {} instructions ({} bytes)",
                m.code().len(),
                m.code().len() * 8
            );
            println!("  kernels      {}", m.kernels().len());
            for k in m.kernels() {
                println!("\nkernel {}", k.name);
                println!(
                    "  code         [{}, {}) ({} instructions)",
                    k.entry,
                    k.entry + k.len,
                    k.len
                );
                println!("  registers    {}", k.regs);
                println!("  shared       {} bytes", k.shared_bytes);
                let [x, y, z] = k.wg_hint;
                if k.wg_hint == [0, 0, 0] {
                    println!("  workgroup    (no hint)");
                } else {
                    println!("  workgroup    {x} x {y} x {z}");
                }
                println!("  arguments    {} bytes", k.arg_size);
                for a in &k.args {
                    println!("    {:>4}  {:<4} {}", a.offset, a.kind.name(), a.name);
                }
            }
            Ok(true)
        })(),
        Cmd::Run(r) => run(&r),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(2),
        Err(e) => {
            eprintln!("vgpu-as: {e}");
            ExitCode::FAILURE
        }
    }
}
