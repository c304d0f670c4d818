//! Kernels on the device model against native Rust loops on the same data,
//! measured in the same run: saxpy and matmul dispatched with `DISPATCH`
//! (module fetched and validated, global memory through the MMU and the
//! compute units' TLBs, 4 KiB pages), from doorbell to fence event, on 1..N
//! compute units, with kernels on the interpreter (`--jit off`) and on the
//! JIT (`--jit on`) in the same run, and on the most units again with every
//! driver-sanitizer check on (`--sanitize`) for its cost. Run with
//! `cargo run --release -p vgpu-device --example compute_bench [saxpy|matmul]`.
//! Lines starting with `ratio ` are what `scripts/bench` collects.

use std::time::{Duration, Instant};

use vgpu_device::config::{DeviceConfig, Generation, JitMode};
use vgpu_device::core::mmu::Mem;
use vgpu_device::core::sanitize::{SanConfig, ALL_CHECKS};
use vgpu_device::testkit::{Driver, GpuContext, InProcess, PhysAlloc};
use vgpu_hwif::event::Event;
use vgpu_hwif::mmu::{PTE_EXEC, PTE_READ, PTE_WRITE};
use vgpu_hwif::packet::{DispatchPacket, Packet};
use vgpu_hwif::proto::engine;
use vgpu_isa::{assemble, run_grid, Launch, Module, SparseMemory};
use vm_memory::{Bytes, GuestAddress};

const MIB: u64 = 1 << 20;
const RUNS: usize = 5;
const CODE: u64 = 0x10_0000;
const ARGS: u64 = 0x18_0000;
const FENCE: u64 = 0x1f_0000;
const BUF: [u64; 3] = [0x10_0000_0000, 0x20_0000_0000, 0x30_0000_0000];

fn best<F: FnMut() -> Duration>(mut f: F) -> Duration {
    (0..RUNS).map(|_| f()).min().unwrap_or_default()
}

fn sample(name: &str) -> Module {
    let path = format!("{}/../isa/samples/{name}.s", env!("CARGO_MANIFEST_DIR"));
    assemble(&std::fs::read_to_string(path).unwrap(), 2).unwrap()
}

fn args(m: &Module, kernel: &str, values: &[(&str, u64)]) -> Vec<u8> {
    let k = m.kernel(kernel).unwrap();
    let mut out = vec![0u8; k.arg_size as usize];
    for (name, v) in values {
        let a = k.args.iter().find(|a| a.name == *name).unwrap();
        let off = a.offset as usize;
        out[off..off + a.size as usize].copy_from_slice(&v.to_le_bytes()[..a.size as usize]);
    }
    out
}

/// The engines measured: the interpreter, and the JIT where the host has
/// one.
fn engines() -> Vec<(&'static str, JitMode)> {
    let mut v = vec![("interpreter", JitMode::Off)];
    match vgpu_isa::jit::host_support() {
        Ok(()) => v.push(("jit", JitMode::On)),
        Err(e) => println!("jit: not measured: {e}"),
    }
    v
}

/// For the run with every sanitizer check on (`drv` has them on): prints
/// its time against `without` (the same units, checks off) and asserts it
/// found nothing; returns whether `drv` was that run.
fn sanitized(
    drv: &Driver<InProcess>,
    what: &str,
    engine: &str,
    units: u32,
    d: Duration,
    without: Duration,
) -> bool {
    let san = &drv.transport.device.gpu().sanitizer;
    if !san.enabled() {
        return false;
    }
    println!(
        "{what}: device, {engine}, {units} compute unit(s), --sanitize (every check): {:.2} ms, {:.2}x the time without",
        d.as_secs_f64() * 1e3,
        d.as_secs_f64() / without.as_secs_f64()
    );
    assert_eq!(san.counts().1, 0, "no finding");
    true
}

/// An in-process device with `units` compute units, a context with a
/// compute ring, and three `buf_bytes` buffers mapped with 4 KiB pages;
/// returns the driver, the context and the buffers' guest-physical
/// addresses.
fn device(
    units: u32,
    jit: JitMode,
    buf_bytes: u64,
    san: bool,
) -> (Driver<InProcess>, GpuContext, [u64; 3]) {
    let ram = 3 * buf_bytes + 64 * MIB;
    let mem = Mem::from_ranges(&[(GuestAddress(0), ram as usize)]).unwrap();
    let cfg = DeviceConfig::new(Generation::Gen2, units)
        .unwrap()
        .with_jit(jit);
    let dev = InProcess::new(cfg, &mem);
    if san {
        dev.device.gpu().sanitizer.configure(&SanConfig {
            checks: ALL_CHECKS,
            ..SanConfig::default()
        });
    }
    let mut drv = Driver::new(dev, mem, PhysAlloc::new(MIB, ram - MIB)).unwrap();
    let mut c = drv.context(1, 1, 0).unwrap();
    drv.ring(&mut c, engine::COMPUTE).unwrap();
    drv.buffer(&mut c, CODE, 0x4_0000, PTE_READ | PTE_EXEC)
        .unwrap();
    drv.buffer(&mut c, ARGS, 0x1000, PTE_READ).unwrap();
    drv.buffer(&mut c, FENCE, 0x1000, PTE_READ | PTE_WRITE)
        .unwrap();
    let mut pas = [0; 3];
    for (pa, va) in pas.iter_mut().zip(BUF) {
        *pa = drv
            .buffer(&mut c, va, buf_bytes, PTE_READ | PTE_WRITE)
            .unwrap();
    }
    (drv, c, pas)
}

fn put(drv: &Driver<InProcess>, c: &GpuContext, va: u64, bytes: &[u8]) {
    let pa = c.pt.translate(&drv.mem, va).unwrap();
    drv.mem.write_slice(bytes, GuestAddress(pa)).unwrap();
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[allow(clippy::too_many_arguments)]
/// Runs the dispatch once per run (`prepare` before each, untimed); the
/// best time from doorbell to fence event.
fn time_dispatch(
    drv: &mut Driver<InProcess>,
    c: &mut GpuContext,
    m: &Module,
    kernel: &str,
    argv: &[u8],
    grid: [u32; 3],
    wg: [u32; 3],
    mut prepare: impl FnMut(&Driver<InProcess>),
) -> Duration {
    let image = m.to_bytes().unwrap();
    put(drv, c, CODE, &image);
    put(drv, c, ARGS, argv);
    let p = Packet::Dispatch(DispatchPacket {
        module_va: CODE,
        module_size: image.len() as u32,
        kernel: m.kernel_index(kernel).unwrap() as u32,
        args_va: ARGS,
        args_size: argv.len() as u32,
        grid,
        wg,
        shared_size: 0,
    });
    let mut seq = 0;
    best(|| {
        prepare(drv);
        seq += 1;
        let ring = &mut c.ring(engine::COMPUTE).unwrap().writer;
        ring.packet(&drv.mem, &p).unwrap();
        ring.packet(
            &drv.mem,
            &Packet::Fence {
                va: FENCE,
                seqno: seq,
                flags: 0,
            },
        )
        .unwrap();
        let wptr = ring.wptr();
        let t = Instant::now();
        drv.doorbell(1, engine::COMPUTE, wptr).unwrap();
        match drv.event(Duration::from_secs(60)).unwrap() {
            Event::Fence { seqno, .. } if seqno == seq => {}
            e => panic!("unexpected event {e:?}"),
        }
        t.elapsed()
    })
}

/// Lane operations of a launch, counted by the interpreter on host memory.
fn lane_ops(m: &Module, l: &Launch, map: &[(u64, u64)]) -> u64 {
    let mut mem = SparseMemory::new();
    for &(va, len) in map {
        mem.map(va, len, true);
    }
    run_grid(m, l, &mem, 1, None).stats.thread_instructions
}

fn saxpy(units: &[u32]) {
    let n = 1usize << 22;
    let bytes = 4 * n as u64;
    let m = sample("saxpy");
    let x: Vec<f32> = (0..n).map(|i| (i % 1000) as f32 * 0.5).collect();
    let y0: Vec<f32> = (0..n).map(|i| (i % 777) as f32 * 0.25).collect();
    let alpha = 1.5f32;
    // Native: y = alpha * x + y over the same data, the plain loop the
    // compiler vectorises (unfused: a fused `mul_add` without a target FMA
    // would be a library call and flatter the device).
    let mut y = y0.clone();
    let native = best(|| {
        y.copy_from_slice(&y0);
        let t = Instant::now();
        for (yi, xi) in y.iter_mut().zip(&x) {
            *yi += alpha * *xi;
        }
        std::hint::black_box(&mut y);
        t.elapsed()
    });
    let argv = args(
        &m,
        "saxpy",
        &[
            ("n", n as u64),
            ("alpha", u64::from(alpha.to_bits())),
            ("x", BUF[0]),
            ("y", BUF[1]),
        ],
    );
    let grid = [(n / 256) as u32, 1, 1];
    let launch = Launch::new(&m, "saxpy", grid, [256, 1, 1], argv.clone()).unwrap();
    let ops = lane_ops(&m, &launch, &[(BUF[0], bytes), (BUF[1], bytes)]);
    println!(
        "saxpy n={n}: native {:.2} ms ({:.2} G elem/s); {:.1} M lane-ops per run",
        native.as_secs_f64() * 1e3,
        n as f64 / native.as_secs_f64() / 1e9,
        ops as f64 / 1e6
    );
    let (xb, yb) = (f32_bytes(&x), f32_bytes(&y0));
    let most = units.last().copied().unwrap_or(1);
    for (engine, jit) in engines() {
        let mut first = None;
        let mut last = Duration::ZERO;
        for (&u, san) in units.iter().map(|u| (u, false)).chain([(&most, true)]) {
            let (mut drv, mut c, pas) = device(u, jit, bytes, san);
            drv.mem.write_slice(&xb, GuestAddress(pas[0])).unwrap();
            let d = time_dispatch(
                &mut drv,
                &mut c,
                &m,
                "saxpy",
                &argv,
                grid,
                [256, 1, 1],
                |drv| drv.mem.write_slice(&yb, GuestAddress(pas[1])).unwrap(),
            );
            let mut out = vec![0u8; 4 * 1024];
            drv.mem.read_slice(&mut out, GuestAddress(pas[1])).unwrap();
            for (i, w) in out.chunks_exact(4).enumerate() {
                let got = f32::from_le_bytes([w[0], w[1], w[2], w[3]]);
                assert_eq!(got.to_bits(), alpha.mul_add(x[i], y0[i]).to_bits());
            }
            if sanitized(&drv, "saxpy", engine, u, d, last) {
                continue;
            }
            last = d;
            let base = *first.get_or_insert(d);
            println!(
            "saxpy: device, {engine}, {u} compute unit(s): {:.2} ms, ratio to native {:.3}x, {:.2} G lane-ops/s ({:.2} per unit), speedup over 1 unit {:.2}x",
            d.as_secs_f64() * 1e3,
            native.as_secs_f64() / d.as_secs_f64(),
            ops as f64 / d.as_secs_f64() / 1e9,
            ops as f64 / d.as_secs_f64() / 1e9 / f64::from(u),
            base.as_secs_f64() / d.as_secs_f64()
        );
            if u == 1 {
                println!(
                    "ratio saxpy.{engine}.vs_native {:.4}",
                    native.as_secs_f64() / d.as_secs_f64()
                );
            }
        }
    }
}

fn matmul(units: &[u32]) {
    let s = 256usize;
    let bytes = (4 * s * s) as u64;
    let m = sample("matmul");
    let a: Vec<f32> = (0..s * s).map(|i| (i % 17) as f32 * 0.125).collect();
    let b: Vec<f32> = (0..s * s).map(|i| (i % 13) as f32 * 0.25).collect();
    let mut c_native = vec![0f32; s * s];
    let native = best(|| {
        let t = Instant::now();
        c_native.fill(0.0);
        for i in 0..s {
            for k in 0..s {
                let aik = a[i * s + k];
                let row = &b[k * s..k * s + s];
                let out = &mut c_native[i * s..i * s + s];
                for (o, bv) in out.iter_mut().zip(row) {
                    *o += aik * *bv;
                }
            }
        }
        std::hint::black_box(&mut c_native);
        t.elapsed()
    });
    let flops = 2.0 * (s * s * s) as f64;
    let argv = args(
        &m,
        "matmul",
        &[
            ("m", s as u64),
            ("n", s as u64),
            ("k", s as u64),
            ("a", BUF[0]),
            ("b", BUF[1]),
            ("c", BUF[2]),
        ],
    );
    let grid = [(s / 16) as u32, (s / 16) as u32, 1];
    let launch = Launch::new(&m, "matmul", grid, [16, 16, 1], argv.clone()).unwrap();
    let ops = lane_ops(
        &m,
        &launch,
        &[(BUF[0], bytes), (BUF[1], bytes), (BUF[2], bytes)],
    );
    println!(
        "matmul {s}x{s}x{s}: native {:.2} ms ({:.2} GFLOP/s); {:.1} M lane-ops per run",
        native.as_secs_f64() * 1e3,
        flops / native.as_secs_f64() / 1e9,
        ops as f64 / 1e6
    );
    let most = units.last().copied().unwrap_or(1);
    for (engine, jit) in engines() {
        let mut first = None;
        let mut last = Duration::ZERO;
        for (&u, san) in units.iter().map(|u| (u, false)).chain([(&most, true)]) {
            let (mut drv, mut c, pas) = device(u, jit, bytes, san);
            drv.mem
                .write_slice(&f32_bytes(&a), GuestAddress(pas[0]))
                .unwrap();
            drv.mem
                .write_slice(&f32_bytes(&b), GuestAddress(pas[1]))
                .unwrap();
            let d = time_dispatch(
                &mut drv,
                &mut c,
                &m,
                "matmul",
                &argv,
                grid,
                [16, 16, 1],
                |_| {},
            );
            let mut out = vec![0u8; 4 * s];
            drv.mem.read_slice(&mut out, GuestAddress(pas[2])).unwrap();
            for (j, w) in out.chunks_exact(4).enumerate() {
                let got = f32::from_le_bytes([w[0], w[1], w[2], w[3]]);
                // The kernel accumulates with fused multiply-adds.
                let want = (0..s).fold(0f32, |acc, k| a[k].mul_add(b[k * s + j], acc));
                assert_eq!(got.to_bits(), want.to_bits(), "c[0][{j}]");
            }
            if sanitized(&drv, "matmul", engine, u, d, last) {
                continue;
            }
            last = d;
            let base = *first.get_or_insert(d);
            println!(
            "matmul: device, {engine}, {u} compute unit(s): {:.2} ms ({:.3} GFLOP/s), ratio to native {:.3}x, {:.2} G lane-ops/s ({:.2} per unit), speedup over 1 unit {:.2}x",
            d.as_secs_f64() * 1e3,
            flops / d.as_secs_f64() / 1e9,
            native.as_secs_f64() / d.as_secs_f64(),
            ops as f64 / d.as_secs_f64() / 1e9,
            ops as f64 / d.as_secs_f64() / 1e9 / f64::from(u),
            base.as_secs_f64() / d.as_secs_f64()
        );
            if u == 1 {
                println!(
                    "ratio matmul.{engine}.vs_native {:.4}",
                    native.as_secs_f64() / d.as_secs_f64()
                );
            }
        }
    }
}

fn main() {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32;
    let units: Vec<u32> = (1..=cores.max(1)).collect();
    println!("host: {cores} cores; best of {RUNS} runs per line");
    let which = std::env::args().nth(1);
    if which.as_deref().is_none_or(|w| w == "saxpy") {
        saxpy(&units);
    }
    if which.as_deref().is_none_or(|w| w == "matmul") {
        matmul(&units);
    }
}
