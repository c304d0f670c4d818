//! `vgpu-run`: load a module and launch one of its kernels with arguments
//! from the command line.
//!
//! Arguments are `kind:value`: `u32:10`, `i32:-1`, `f32:2.5`, `u64:0x10`,
//! or a buffer: `buf:SIZE` (zeroed), `buf:SIZE:fill=BYTE`, `buf:SIZE:iota`
//! (u32 0, 1, 2 …), `buf:SIZE:f32=1.5` (every f32), passed as its address.
//! After the launch every buffer argument is printed (`--show N` words): as
//! floats for a buffer given as `f32=`, as hex words otherwise.
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use vgpu_umd::{Arg, Buffer, Context, MemKind, Module, Stream};

#[derive(Parser, Debug)]
#[command(
    name = "vgpu-run",
    about = "Load a module (vgpu-as output, or .s source) and launch a kernel",
    after_help = "Examples:\n  vgpu-run saxpy.s saxpy --grid 4 u32:1000 f32:2 buf:4000:f32=1 buf:4000:f32=10\n  vgpu-run --list vecadd.vgpu\n  vgpu-run sample:saxpy saxpy --grid 4 u32:1000 f32:2 buf:4000 buf:4000 --for-ms 5000   # a busy client for gputop\n  vgpu-run sample:saxpy saxpy --grid 64 u32:16384 f32:2 buf:65536 buf:65536 --for-ms 5000 --depth 4   # the engine never idle"
)]
struct Args {
    /// Module file: a `vgpu-as` image, or assembly source (`.s`); or
    /// `sample:NAME` for a built-in copy of `isa/samples/NAME.s`.
    module: PathBuf,
    /// Kernel name.
    kernel: Option<String>,
    /// Arguments, `kind:value` (see --help).
    args: Vec<String>,
    /// Workgroups, `X[,Y[,Z]]`.
    #[arg(long, default_value = "1")]
    grid: String,
    /// Threads per workgroup, `X[,Y[,Z]]` (default: the kernel's hint).
    #[arg(long)]
    wg: Option<String>,
    /// Words of each buffer argument to print afterwards.
    #[arg(long, default_value_t = 16)]
    show: usize,
    /// List the module's kernels and their arguments.
    #[arg(long)]
    list: bool,
    /// Launch the kernel again and again, one after the other, until this
    /// many ms have passed (at least once): one long-lived busy client.
    /// Prints how many launches ran, and the latency of each batch (its
    /// launches to the end of its wait): median, p90, p99 and max.
    #[arg(long, default_value_t = 0)]
    for_ms: u64,
    /// With --for-ms: launches queued before each wait (1: each launch
    /// waits for the one before; more keep the engine busy without a gap).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    depth: u32,
}

fn dims(s: &str) -> Result<[u32; 3], String> {
    let v: Vec<u32> = s
        .split(',')
        .map(|x| x.trim().parse::<u32>().map_err(|e| format!("{s:?}: {e}")))
        .collect::<Result<_, _>>()?;
    if v.is_empty() || v.len() > 3 {
        return Err(format!("{s:?}: one to three sizes"));
    }
    Ok([v[0], *v.get(1).unwrap_or(&1), *v.get(2).unwrap_or(&1)])
}

fn buffer(ctx: &Context, s: &Stream, spec: &str) -> Result<Buffer, String> {
    let mut parts = spec.splitn(2, ':');
    let size: u64 = parts
        .next()
        .unwrap_or("")
        .parse()
        .map_err(|_| format!("buf:{spec}: bad size"))?;
    let b = ctx
        .alloc(size, MemKind::HostVisible)
        .map_err(|e| e.to_string())?;
    let init = parts.next().unwrap_or("fill=0");
    let bytes: Vec<u8> = if let Some(v) = init.strip_prefix("fill=") {
        let v: u8 = v
            .parse()
            .map_err(|_| format!("buf:{spec}: bad fill byte"))?;
        vec![v; size as usize]
    } else if init == "iota" {
        (0..size / 4)
            .flat_map(|i| (i as u32).to_le_bytes())
            .collect()
    } else if let Some(v) = init.strip_prefix("f32=") {
        let v: f32 = v.parse().map_err(|_| format!("buf:{spec}: bad f32"))?;
        (0..size / 4).flat_map(|_| v.to_le_bytes()).collect()
    } else {
        return Err(format!("buf:{spec}: unknown initialiser {init:?}"));
    };
    s.write(&b, 0, &bytes).map_err(|e| e.to_string())?;
    Ok(b)
}

/// The samples of `isa/samples`, built in.
const SAMPLES: &[(&str, &str)] = &[
    ("vecadd", include_str!("../../../isa/samples/vecadd.s")),
    ("saxpy", include_str!("../../../isa/samples/saxpy.s")),
    ("reduce", include_str!("../../../isa/samples/reduce.s")),
    ("matmul", include_str!("../../../isa/samples/matmul.s")),
    (
        "histogram",
        include_str!("../../../isa/samples/histogram.s"),
    ),
    ("scan", include_str!("../../../isa/samples/scan.s")),
    ("spin", include_str!("../../../isa/samples/spin.s")),
    (
        "oob_store",
        include_str!("../../../isa/samples/oob_store.s"),
    ),
];

fn run(a: &Args) -> Result<(), String> {
    let ctx = Context::new().map_err(|e| e.to_string())?;
    let path = a.module.to_string_lossy();
    let bytes = match path.strip_prefix("sample:") {
        Some(name) => SAMPLES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, src)| src.as_bytes().to_vec())
            .ok_or(format!("no built-in sample {name:?}"))?,
        None => std::fs::read(&a.module).map_err(|e| format!("{}: {e}", a.module.display()))?,
    };
    let m = if bytes.starts_with(b"VGPUMOD") {
        Module::load(&ctx, &bytes)
    } else {
        Module::assemble(&ctx, &String::from_utf8_lossy(&bytes))
    }
    .map_err(|e| e.to_string())?;
    if a.list || a.kernel.is_none() {
        for name in m.kernel_names() {
            let k = m.kernel(&name).map_err(|e| e.to_string())?;
            let args: Vec<String> = k
                .info()
                .args
                .iter()
                .map(|x| format!("{}:{}", x.name, x.kind.name()))
                .collect();
            println!(
                "{name}({}) workgroup {:?}",
                args.join(", "),
                k.info().wg_hint
            );
        }
        return Ok(());
    }
    let k = m
        .kernel(a.kernel.as_deref().unwrap_or_default())
        .map_err(|e| e.to_string())?;
    let s = Stream::new(&ctx).map_err(|e| e.to_string())?;
    let mut bufs = Vec::new();
    let mut args = Vec::new();
    for (i, text) in a.args.iter().enumerate() {
        let (kind, value) = text
            .split_once(':')
            .ok_or(format!("argument {i}: {text:?} is not kind:value"))?;
        if kind == "buf" {
            let b = buffer(&ctx, &s, value)?;
            args.push(Arg::buf(&b));
            bufs.push((i, b, value.contains(":f32=")));
        } else {
            args.push(
                Arg::parse(kind, value)
                    .ok_or(format!("argument {i}: cannot parse {value:?} as {kind}"))?,
            );
        }
    }
    let grid = dims(&a.grid)?;
    let wg = a.wg.as_deref().map(dims).transpose()?;
    let t = std::time::Instant::now();
    let mut launches = 0u64;
    // Each batch's time, from its first launch to the end of its wait.
    let mut batches: Vec<u64> = Vec::new();
    loop {
        let b = std::time::Instant::now();
        for _ in 0..a.depth {
            s.launch(&k, grid, wg, &args).map_err(|e| e.to_string())?;
            launches += 1;
        }
        s.synchronize().map_err(|e| e.to_string())?;
        batches.push(b.elapsed().as_micros() as u64);
        if t.elapsed().as_millis() as u64 >= a.for_ms {
            break;
        }
    }
    match launches {
        1 => println!("{}: grid {grid:?} done in {:?}", k.info().name, t.elapsed()),
        n => println!(
            "{}: grid {grid:?} done {n} times in {:?}",
            k.info().name,
            t.elapsed()
        ),
    }
    if batches.len() > 1 {
        batches.sort_unstable();
        let at = |q: usize| batches[(batches.len() - 1) * q / 100];
        println!(
            "{}: latency of {} batches of {} (launch to wait's end): median {} us, p90 {} us, p99 {} us, max {} us",
            k.info().name,
            batches.len(),
            a.depth,
            at(50),
            at(90),
            at(99),
            at(100)
        );
    }
    for (i, b, floats) in bufs {
        let n = (b.size() as usize / 4).min(a.show);
        let mut v = vec![0u8; 4 * n];
        b.read(0, &mut v).map_err(|e| e.to_string())?;
        let words: Vec<String> = v
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .map(|w| {
                if floats {
                    format!("{}", f32::from_bits(w))
                } else {
                    format!("{w:#x}")
                }
            })
            .collect();
        let kind = if floats { ", f32" } else { "" };
        println!("arg {i} ({} bytes{kind}): {}", b.size(), words.join(" "));
    }
    Ok(())
}

fn main() -> ExitCode {
    vgpu_umd::exit_quietly_on_closed_pipe();
    let a = Args::parse();
    match run(&a) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("vgpu-run: {e}");
            ExitCode::from(1)
        }
    }
}
