//! Kernel benchmarks, interpreter and JIT in the same run: lane-ops/s on an
//! ALU-heavy kernel, saxpy and matmul against plain native Rust loops on the
//! same data, and scaling with compute-unit threads. Run with
//! `cargo run --release -p vgpu-isa --example isa_bench [alu|saxpy|matmul]`.
//! Lines starting with `ratio ` are what `scripts/bench` collects.
//! Single-threaded times are the process's CPU time (on a shared machine
//! wall time mostly measures the other processes); runs on several
//! threads are timed by the wall clock. `ISA_BENCH_JIT_ONLY=1` leaves the
//! interpreter out (for profiling the JIT); `isa_bench saxpy-parts` times
//! saxpy's kernel cut down step by step on the JIT (where a warp's time
//! goes).

use std::hint::black_box;
use std::time::{Duration, Instant};
use vgpu_isa::jit::JitModule;
use vgpu_isa::mem::PAGE_SIZE;
use vgpu_isa::{assemble, run_grid, run_grid_jit, GridOutcome, Launch, Module, SparseMemory};

const ALU: &str = r"
// 64 dependent-free fp32/int operations per iteration, `iters` iterations.
.kernel alu
.arg iters u32
.arg out ptr
    s2r     r0, %gid.x
    cvt.f32.u32 r1, r0
    mov     r2, 1.0001
    mov     r3, 0.5
    mov     r4, r0
    mov     r5, r1
    mov     r6, r1
    mov     r7, r1
    ldarg   r8, [iters]
loop:
    ffma    r1, r1, r2, r3
    ffma    r5, r5, r2, r3
    ffma    r6, r6, r2, r3
    ffma    r7, r7, r2, r3
    fmul    r1, r1, 0.999
    fmul    r5, r5, 0.999
    fadd    r6, r6, -0.25
    fadd    r7, r7, -0.25
    add     r4, r4, 7
    xor     r4, r4, r0
    shl     r9, r4, 3
    add     r4, r4, r9
    fmax    r1, r1, r5
    fmin    r6, r6, r7
    mad     r4, r4, r4, r0
    sub     r8, r8, 1
    setp.ne.u32 p0, r8, 0
    @p0 bra loop
    fadd    r1, r1, r6
    cvt.f32.u32 r4, r4
    fadd    r1, r1, r4
    mov     r10, 4
    ldarg   d12, [out]
    mad.wide.u32 d12, r0, r10, d12
    st.32   [d12], r1
    exit
.end
";

fn args(pairs: &[(u32, u64, bool)], size: usize) -> Vec<u8> {
    let mut v = vec![0u8; size];
    for &(off, val, wide) in pairs {
        let o = off as usize;
        if wide {
            v[o..o + 8].copy_from_slice(&val.to_le_bytes());
        } else {
            v[o..o + 4].copy_from_slice(&(val as u32).to_le_bytes());
        }
    }
    v
}

fn arg_off(m: &Module, k: &str, name: &str) -> u32 {
    m.kernel(k)
        .and_then(|k| k.args.iter().find(|a| a.name == name))
        .map(|a| a.offset)
        .expect("argument")
}

fn sample(name: &str) -> Module {
    assemble(&sample_source(name), 1).expect("assemble")
}

fn sample_source(name: &str) -> String {
    let path = format!("{}/samples/{name}.s", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).expect("sample")
}

/// `n` floats at each of two VAs `x` and `y` (mapped writable, zeroed):
/// the memory and the two VAs.
fn saxpy_memory(n: usize) -> (SparseMemory, u64, u64) {
    let mut mem = SparseMemory::new();
    let (vx, vy) = (
        1u64 << 32,
        (1u64 << 32) + 2 * (n as u64 * 4).next_multiple_of(PAGE_SIZE),
    );
    mem.map(vx, n as u64 * 4, true);
    mem.map(vy, n as u64 * 4, true);
    (mem, vx, vy)
}

/// Best of `reps` runs of `f`.
/// CPU time of the whole process (every thread).
fn cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-parameter for the call.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Best of `reps` runs of `f`: the CPU time the process spent (the
/// machine is shared: wall time mostly measures the other processes) for
/// single-threaded runs, wall time for runs on several threads (scaling).
fn best(reps: usize, mut f: impl FnMut()) -> Duration {
    (0..reps)
        .map(|_| {
            let (t, c) = (Instant::now(), cpu_time());
            f();
            if MULTI.load(std::sync::atomic::Ordering::Relaxed) {
                t.elapsed()
            } else {
                cpu_time() - c
            }
        })
        .min()
        .unwrap_or_default()
}

/// Whether the runs measured use more than one thread.
static MULTI: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn on_threads(units: usize) -> usize {
    MULTI.store(units > 1, std::sync::atomic::Ordering::Relaxed);
    units
}

/// The engines measured: the interpreter, and the JIT where the host has
/// one.
fn engines(m: &Module) -> Vec<(&'static str, Option<JitModule>)> {
    let mut v = vec![("interpreter", None)];
    if std::env::var_os("ISA_BENCH_JIT_ONLY").is_some() {
        v.clear();
    }
    match JitModule::compile(m) {
        Ok(j) => v.push(("jit", Some(j))),
        Err(e) => println!("jit: not measured: {e}"),
    }
    v
}

fn grid(m: &Module, l: &Launch, mem: &SparseMemory, units: usize, jit: Option<&JitModule>) -> u64 {
    let r = match jit {
        Some(j) => run_grid_jit(m, l, mem, units, None, j),
        None => run_grid(m, l, mem, units, None),
    };
    assert_eq!(r.outcome, GridOutcome::Completed);
    r.stats.thread_instructions
}

fn main() {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!("host: {cores} cores");
    let only: Option<String> = std::env::args().nth(1);
    let want = |s: &str| only.as_deref().is_none_or(|o| o == s);
    if want("alu") {
        alu(cores);
    }
    if want("saxpy") {
        saxpy(cores);
    }
    if want("matmul") {
        matmul(cores);
    }
    // Only when asked for: an analysis, not a ratio.
    if only.as_deref() == Some("saxpy-parts") {
        saxpy_parts();
    }
}

/// Where a JIT saxpy warp's time goes: saxpy's kernel cut down step by
/// step, each timed on the JIT (1 thread, n = 4 Mi), in ns per warp of 32
/// elements.
fn saxpy_parts() {
    // The sample up to its addresses (`&x[i]`, `&y[i]`), then each body.
    let src = sample_source("saxpy");
    let cut = src.find("    ld.32").expect("saxpy's first load");
    let head = &src[..cut];
    let variants = [
        ("exit only", ".kernel saxpy\n.workgroup 256\n    exit\n.end\n".to_string()),
        ("bounds block", format!("{head}    exit\n.end\n")),
        ("arithmetic, no memory", format!("{head}    mov r8, 1.0\n    mov r9, 2.0\n    ffma r9, r1, r8, r9\n    add r10, r9, 1\n    exit\n.end\n")),
        ("one load stream", format!("{head}    ld.32 r8, [d2]\n    mov r9, 2.0\n    ffma r9, r1, r8, r9\n    add r10, r9, 1\n    exit\n.end\n")),
        ("one store stream", format!("{head}    mov r8, 1.0\n    mov r9, 2.0\n    ffma r9, r1, r8, r9\n    st.32 [d4], r9\n    exit\n.end\n")),
        ("saxpy", src.clone()),
    ];
    let n = 1usize << 22;
    let (mem, vx, vy) = saxpy_memory(n);
    on_threads(1);
    for (name, text) in variants {
        let m = assemble(&text, 1).expect("assemble");
        let off = |a: &str| {
            m.kernel("saxpy")
                .and_then(|k| k.args.iter().find(|x| x.name == a))
                .map(|x| x.offset)
        };
        let a = match (off("n"), off("alpha"), off("x"), off("y")) {
            (Some(o_n), Some(o_a), Some(o_x), Some(o_y)) => args(
                &[
                    (o_n, n as u64, false),
                    (o_a, 1.5f32.to_bits() as u64, false),
                    (o_x, vx, true),
                    (o_y, vy, true),
                ],
                24,
            ),
            _ => Vec::new(),
        };
        let l = Launch::new(&m, "saxpy", [(n / 256) as u32, 1, 1], [256, 1, 1], a).expect("launch");
        let Ok(j) = JitModule::compile(&m) else {
            println!("saxpy-parts: no JIT on this host");
            return;
        };
        let t = best(5, || {
            grid(&m, &l, &mem, 1, Some(&j));
        });
        println!(
            "saxpy-parts: {name}: {:.1} ns per warp",
            t.as_secs_f64() * 1e9 / (n / 32) as f64
        );
    }
}

fn alu(cores: usize) {
    // ALU-heavy kernel.
    let m = assemble(ALU, 1).expect("alu");
    let threads = 256 * 64u32;
    let iters = 1000u64;
    let mut mem = SparseMemory::new();
    let out = 1u64 << 32;
    mem.map(out, threads as u64 * 4, true);
    let a = args(
        &[
            (arg_off(&m, "alu", "iters"), iters, false),
            (arg_off(&m, "alu", "out"), out, true),
        ],
        16,
    );
    let l = Launch::new(&m, "alu", [threads / 256, 1, 1], [256, 1, 1], a).expect("launch");
    let mut ops = 0;
    for (engine, jit) in engines(&m) {
        for units in 1..=cores {
            let t = best(5, || {
                ops = grid(&m, &l, &mem, on_threads(units), jit.as_ref())
            });
            let rate = ops as f64 / t.as_secs_f64();
            println!(
                "alu: {engine}, {units} thread(s): {:.2} G lane-ops/s ({} lane-ops in {:.1} ms), {:.2} G/s per thread",
                rate / 1e9,
                ops,
                t.as_secs_f64() * 1e3,
                rate / 1e9 / units as f64
            );
            if units == 1 {
                println!("ratio alu.{engine}.glane_ops_per_s {:.3}", rate / 1e9);
            }
        }
    }
}

/// SAXPY: interpreter vs native on the same data.
fn saxpy(cores: usize) {
    let m = sample("saxpy");
    let n = 1usize << 22;
    let alpha = 1.5f32;
    let x: Vec<f32> = (0..n).map(|i| (i % 1000) as f32 * 0.001).collect();
    let y0: Vec<f32> = (0..n).map(|i| (i % 777) as f32 * 0.002).collect();
    let (mem, vx, vy) = saxpy_memory(n);
    mem.write_f32s(vx, &x).expect("x");
    mem.write_f32s(vy, &y0).expect("y");
    let a = args(
        &[
            (arg_off(&m, "saxpy", "n"), n as u64, false),
            (arg_off(&m, "saxpy", "alpha"), alpha.to_bits() as u64, false),
            (arg_off(&m, "saxpy", "x"), vx, true),
            (arg_off(&m, "saxpy", "y"), vy, true),
        ],
        24,
    );
    let l = Launch::new(&m, "saxpy", [(n / 256) as u32, 1, 1], [256, 1, 1], a).expect("launch");
    let mut y = y0.clone();
    on_threads(1);
    let native = best(5, || {
        for (yi, xi) in y.iter_mut().zip(&x) {
            *yi += alpha * *xi;
        }
        black_box(&mut y);
    });
    for (engine, jit) in engines(&m) {
        let mut times = Vec::new();
        for units in 1..=cores {
            times.push(best(3, || {
                grid(&m, &l, &mem, on_threads(units), jit.as_ref());
            }));
        }
        let t1 = times[0];
        println!(
            "saxpy n={n}: native {:.2} ms ({:.2} G elem/s), {engine} 1 thread {:.2} ms ({:.3} G elem/s): ratio {:.3}x",
            native.as_secs_f64() * 1e3,
            n as f64 / native.as_secs_f64() / 1e9,
            t1.as_secs_f64() * 1e3,
            n as f64 / t1.as_secs_f64() / 1e9,
            native.as_secs_f64() / t1.as_secs_f64()
        );
        println!(
            "ratio saxpy.{engine}.vs_native {:.4}",
            native.as_secs_f64() / t1.as_secs_f64()
        );
        for (i, t) in times.iter().enumerate() {
            println!(
                "saxpy: {engine}, {} thread(s): {:.2} ms, ratio to native (1 thread) {:.3}x",
                i + 1,
                t.as_secs_f64() * 1e3,
                native.as_secs_f64() / t.as_secs_f64()
            );
        }
    }
}

/// Tiled matmul vs a native i-k-j loop.
fn matmul(cores: usize) {
    let m = sample("matmul");
    let d = 256usize;
    let am: Vec<f32> = (0..d * d).map(|i| ((i * 7) % 13) as f32 * 0.1).collect();
    let bm: Vec<f32> = (0..d * d).map(|i| ((i * 5) % 11) as f32 * 0.1).collect();
    let mut mem = SparseMemory::new();
    let bytes = (d * d * 4) as u64;
    let stride = 2 * bytes.next_multiple_of(PAGE_SIZE);
    let (va, vb, vc) = (1u64 << 32, (1u64 << 32) + stride, (1u64 << 32) + 2 * stride);
    for v in [va, vb, vc] {
        mem.map(v, bytes, true);
    }
    mem.write_f32s(va, &am).expect("a");
    mem.write_f32s(vb, &bm).expect("b");
    let k = "matmul";
    let a = args(
        &[
            (arg_off(&m, k, "m"), d as u64, false),
            (arg_off(&m, k, "n"), d as u64, false),
            (arg_off(&m, k, "k"), d as u64, false),
            (arg_off(&m, k, "a"), va, true),
            (arg_off(&m, k, "b"), vb, true),
            (arg_off(&m, k, "c"), vc, true),
        ],
        48,
    );
    let l =
        Launch::new(&m, k, [(d / 16) as u32, (d / 16) as u32, 1], [16, 16, 1], a).expect("launch");
    let mut c = vec![0f32; d * d];
    on_threads(1);
    let native = best(3, || {
        c.fill(0.0);
        for i in 0..d {
            for kk in 0..d {
                let aik = am[i * d + kk];
                let row = &bm[kk * d..kk * d + d];
                let out = &mut c[i * d..i * d + d];
                for j in 0..d {
                    out[j] += aik * row[j];
                }
            }
        }
        black_box(&mut c);
    });
    let flops = 2.0 * (d * d * d) as f64;
    for (engine, jit) in engines(&m) {
        let mut mm = Vec::new();
        for units in 1..=cores {
            mm.push(best(3, || {
                grid(&m, &l, &mem, on_threads(units), jit.as_ref());
            }));
        }
        println!(
            "matmul {d}x{d}x{d}: native {:.2} ms ({:.2} GFLOP/s), {engine} 1 thread {:.2} ms ({:.3} GFLOP/s): ratio {:.3}x",
            native.as_secs_f64() * 1e3,
            flops / native.as_secs_f64() / 1e9,
            mm[0].as_secs_f64() * 1e3,
            flops / mm[0].as_secs_f64() / 1e9,
            native.as_secs_f64() / mm[0].as_secs_f64()
        );
        println!(
            "ratio matmul.{engine}.vs_native {:.4}",
            native.as_secs_f64() / mm[0].as_secs_f64()
        );
        for (i, t) in mm.iter().enumerate() {
            println!(
                "matmul: {engine}, {} thread(s): {:.2} ms, speedup over 1 thread {:.2}x",
                i + 1,
                t.as_secs_f64() * 1e3,
                mm[0].as_secs_f64() / t.as_secs_f64()
            );
        }
    }
}
