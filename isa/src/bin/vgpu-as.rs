//! `vgpu-as`: assemble, disassemble, inspect and run vgpu compute modules.

use clap::{Parser, Subcommand};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use vgpu_isa::mem::PAGE_SIZE;
use vgpu_isa::{
    assemble, disassemble, run_grid, ArgKind, GridOutcome, Launch, Module, SparseMemory,
};

const EXAMPLES: &str = "\
Examples:
  vgpu-as asm isa/samples/saxpy.s -o saxpy.vgpu            assemble for generation 1
  vgpu-as asm kernel.s -o kernel.vgpu --gen 2              generation 2 (shfl, vote)
  vgpu-as dis saxpy.vgpu                                   print assembly
  vgpu-as inspect saxpy.vgpu                               kernels, metadata, sizes
  vgpu-as run isa/samples/saxpy.s --kernel saxpy --grid 4 --wg 256 \\
      --arg n=1000 --arg alpha=2.0 --arg x=f32:1000:iota --arg y=f32:1000:1.0
  vgpu-as run isa/samples/spin.s --kernel spin --timeout-ms 200    cancel a hang
  vgpu-as run isa/samples/matmul.s --kernel matmul --grid 2,2 --wg 16,16 \\
      --arg m=32 --arg n=32 --arg k=32 --arg a=f32:1024:rand --arg b=f32:1024:rand \\
      --arg c=f32:1024 --show 8";

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
    #[command(after_help = "Example:\n  vgpu-as asm isa/samples/vecadd.s -o vecadd.vgpu --gen 1")]
    Asm {
        /// Assembly source.
        input: String,
        /// Output module.
        #[arg(short, long)]
        output: String,
        /// Hardware generation to encode for (1 or 2).
        #[arg(long, default_value_t = 1)]
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
    ///
    /// Scalar arguments are NAME=VALUE. Pointer arguments allocate a buffer:
    /// NAME=TYPE:COUNT[:INIT] with TYPE u32, i32 or f32 and INIT zero (the
    /// default), iota (0, 1, 2, ...), rand (seeded) or a number to fill with.
    /// Buffers are printed after the run.
    #[command(
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
    /// Compute units (host threads).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Cancel the run after this many milliseconds (the device's reset).
    #[arg(long)]
    timeout_ms: Option<u64>,
    /// Elements of each buffer to print (0: all).
    #[arg(long, default_value_t = 16)]
    show: usize,
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
    let mut next_va = 1u64 << 32;
    let mut seed = 0x2545_f491_4f6c_dd1du64;
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
                                seed ^= seed << 13;
                                seed ^= seed >> 7;
                                seed ^= seed << 17;
                                if ty == "f32" {
                                    (seed >> 40) as f64 / (1u64 << 24) as f64
                                } else {
                                    (seed >> 32) as u32 as f64
                                }
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
    let cancel = AtomicBool::new(false);
    let t = std::time::Instant::now();
    let done = AtomicBool::new(false);
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
        let report = run_grid(&module, &launch, &mem, threads, Some(&cancel));
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
            println!("fault in workgroup {workgroup:?}: {fault}")
        }
    }
    println!(
        "{} of {} workgroups, {} warp instructions, {} thread instructions, {:.3} ms",
        report.workgroups_completed,
        launch.workgroups(),
        report.stats.warp_instructions,
        report.stats.thread_instructions,
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

fn main() -> ExitCode {
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
