//! Every sample kernel on the interpreter and on the JIT, on identical
//! random inputs, on one and two compute units: the same outcome (fault
//! and trap details included), statistics and memory, bit for bit.
#![cfg(feature = "jit")]

mod common;
use common::*;
use std::sync::Arc;
use vgpu_isa::jit::{host_support, JitModule};
use vgpu_isa::mem::PAGE_SIZE;
use vgpu_isa::{
    assemble, run_grid, run_grid_jit, GridOutcome, Launch, Limits, Module, Outcome, WorkgroupExec,
};

/// A prepared run: the launch and the buffers to compare afterwards.
struct Setup {
    launch: Launch,
    buffers: Vec<(u64, usize)>,
}

fn up(gpu: &mut Gpu, bufs: &mut Vec<(u64, usize)>, data: &[u32]) -> u64 {
    let va = gpu.upload_u32(data);
    bufs.push((va, data.len()));
    va
}

fn prepare(name: &str, kernel: &str, m: &Module, gpu: &mut Gpu, seed: u64) -> Setup {
    let mut rng = Rng::new(seed);
    let mut b = Vec::new();
    let (args, grid, wg) = match name {
        "vecadd" | "saxpy" => {
            let n = 1000 + rng.range(0, 3000) as usize;
            let x: Vec<u32> = rng.f32s(n).iter().map(|v| v.to_bits()).collect();
            let y: Vec<u32> = rng.f32s(n).iter().map(|v| v.to_bits()).collect();
            let (vx, vy) = (up(gpu, &mut b, &x), up(gpu, &mut b, &y));
            let a = if name == "saxpy" {
                Args::new()
                    .set(m, kernel, "n", n as u64)
                    .set(m, kernel, "alpha", f(1.75))
                    .set(m, kernel, "x", vx)
                    .set(m, kernel, "y", vy)
            } else {
                let vc = up(gpu, &mut b, &vec![0; n]);
                Args::new()
                    .set(m, kernel, "n", n as u64)
                    .set(m, kernel, "a", vx)
                    .set(m, kernel, "b", vy)
                    .set(m, kernel, "c", vc)
            };
            (a, [n.div_ceil(256) as u32, 1, 1], [256, 1, 1])
        }
        "reduce" | "scan" => {
            let n = 700 + rng.range(0, 2000) as usize;
            let data = rng.u32s(n);
            let vi = up(gpu, &mut b, &data);
            let blocks = n.div_ceil(256);
            let vp = up(gpu, &mut b, &vec![0; blocks]);
            let a = if name == "reduce" {
                Args::new()
                    .set(m, kernel, "n", n as u64)
                    .set(m, kernel, "input", vi)
                    .set(m, kernel, "partial", vp)
            } else {
                let vo = up(gpu, &mut b, &vec![0; n]);
                Args::new()
                    .set(m, kernel, "n", n as u64)
                    .set(m, kernel, "input", vi)
                    .set(m, kernel, "output", vo)
                    .set(m, kernel, "sums", vp)
            };
            (a, [blocks as u32, 1, 1], [256, 1, 1])
        }
        "histogram" => {
            let n = 5000;
            let data = rng.u32s(n);
            let vd = up(gpu, &mut b, &data);
            let vb = up(gpu, &mut b, &[0; 256]);
            let a = Args::new()
                .set(m, kernel, "n", n as u64)
                .set(m, kernel, "data", vd)
                .set(m, kernel, "bins", vb);
            (a, [7, 1, 1], [192, 1, 1])
        }
        "matmul" => {
            let (mm, nn, kk) = (40usize, 33usize, 50usize);
            let am: Vec<u32> = rng.f32s(mm * kk).iter().map(|v| v.to_bits()).collect();
            let bm: Vec<u32> = rng.f32s(kk * nn).iter().map(|v| v.to_bits()).collect();
            let (va, vb) = (up(gpu, &mut b, &am), up(gpu, &mut b, &bm));
            let vc = up(gpu, &mut b, &vec![0; mm * nn]);
            let a = Args::new()
                .set(m, kernel, "m", mm as u64)
                .set(m, kernel, "n", nn as u64)
                .set(m, kernel, "k", kk as u64)
                .set(m, kernel, "a", va)
                .set(m, kernel, "b", vb)
                .set(m, kernel, "c", vc);
            (
                a,
                [nn.div_ceil(16) as u32, mm.div_ceil(16) as u32, 1],
                [16, 16, 1],
            )
        }
        "float_atomic_add" => {
            let n = 500 + rng.range(0, 2000) as usize;
            let x: Vec<u32> = (0..n)
                .map(|_| (rng.range(0, 100) as f32).to_bits())
                .collect();
            let vx = up(gpu, &mut b, &x);
            let vs = up(gpu, &mut b, &[0]);
            let a = Args::new()
                .set(m, kernel, "n", n as u64)
                .set(m, kernel, "x", vx)
                .set(m, kernel, "sum", vs);
            (a, [n.div_ceil(64) as u32, 1, 1], [64, 1, 1])
        }
        "oob_store" => {
            let page = gpu.alloc(PAGE_SIZE);
            b.push((page, (PAGE_SIZE / 4) as usize));
            let out = page + PAGE_SIZE - 40 * 4;
            (
                Args::new().set(m, kernel, "out", out),
                [4, 1, 1],
                [64, 1, 1],
            )
        }
        other => panic!("no setup for {other}"),
    };
    Setup {
        launch: Launch::new(m, kernel, grid, wg, args.0).unwrap(),
        buffers: b,
    }
}

fn compare(name: &str, kernel: &str, gen: u32, units: usize) {
    let m = assemble(&sample(name), gen).unwrap();
    let jit = JitModule::compile(&m).unwrap();
    assert!(
        jit.fallbacks().next().is_none(),
        "{name}: {:?}",
        jit.fallbacks().collect::<Vec<_>>()
    );
    for seed in 0..3 {
        let (mut ga, mut gb) = (Gpu::new(), Gpu::new());
        let sa = prepare(name, kernel, &m, &mut ga, seed);
        let sb = prepare(name, kernel, &m, &mut gb, seed);
        let ra = run_grid(&m, &sa.launch, &ga.mem, units, None);
        let rb = run_grid_jit(&m, &sb.launch, &gb.mem, units, None, &jit);
        if units == 1 {
            assert_eq!(ra, rb, "{name}/{kernel} seed {seed}");
        } else {
            // Which workgroup faults first may differ between runs on two
            // units; results of completed kernels may not.
            assert_eq!(
                ra.outcome == GridOutcome::Completed,
                rb.outcome == GridOutcome::Completed
            );
        }
        if ra.outcome == GridOutcome::Completed || units == 1 {
            for (&(va, n), &(vb, nb)) in sa.buffers.iter().zip(&sb.buffers) {
                assert_eq!(n, nb);
                assert_eq!(
                    ga.u32s(va, n),
                    gb.u32s(vb, n),
                    "{name}/{kernel} seed {seed}"
                );
            }
        }
    }
}

#[test]
fn samples_are_bit_identical_on_both_engines() {
    if host_support().is_err() {
        return;
    }
    for (name, kernel) in [
        ("vecadd", "vecadd"),
        ("saxpy", "saxpy"),
        ("reduce", "reduce"),
        ("scan", "scan_blocks"),
        ("histogram", "histogram"),
        ("matmul", "matmul"),
        ("oob_store", "oob_store"),
        ("float_atomic_add", "float_atomic_add"),
    ] {
        for gen in [1, 2] {
            compare(name, kernel, gen, 1);
        }
        compare(name, kernel, 2, 2);
    }
}

#[test]
fn the_fault_of_oob_store_keeps_lane_warp_pc_and_address() {
    if host_support().is_err() {
        return;
    }
    let m = sample_module("oob_store");
    let jit = JitModule::compile(&m).unwrap();
    let mut gpu = Gpu::new();
    let s = prepare("oob_store", "oob_store", &m, &mut gpu, 0);
    let r = run_grid_jit(&m, &s.launch, &gpu.mem, 1, None, &jit);
    let GridOutcome::Faulted { workgroup, fault } = r.outcome else {
        panic!("{r:?}")
    };
    assert_eq!((workgroup, fault.warp, fault.lane), ([0, 0, 0], 1, 8));
}

/// An endless kernel stops at the same instruction counts, with the same
/// state, whatever the budget slices and engine.
#[test]
fn an_endless_kernel_is_preempted_at_the_same_points() {
    if host_support().is_err() {
        return;
    }
    let m = Arc::new(sample_module("spin"));
    let jit = JitModule::compile(&m).unwrap();
    let l = Arc::new(Launch::new(&m, "spin", [1, 1, 1], [64, 1, 1], Vec::new()).unwrap());
    let gpu = Gpu::new();
    let mut a = WorkgroupExec::new_shared(Arc::clone(&m), Arc::clone(&l), [0, 0, 0]).unwrap();
    let mut b = WorkgroupExec::new_shared(Arc::clone(&m), Arc::clone(&l), [0, 0, 0]).unwrap();
    assert!(b.set_jit(Some(Arc::clone(jit.kernel(0).unwrap()))));
    for budget in [1, 2, 3, 1000, 1023, 1024, 1025, 7777, 32768] {
        let lim = Limits {
            budget,
            cancel: None,
        };
        assert_eq!(a.run(&gpu.mem, lim), Ok(Outcome::Preempted));
        assert_eq!(b.run(&gpu.mem, lim), Ok(Outcome::Preempted));
        assert_eq!(a.stats(), b.stats());
    }
}
