//! Every sample kernel against a CPU reference on random inputs.

mod common;
use common::*;
use vgpu_isa::{run_grid, GridOutcome, Module};

fn run(module: &Module, gpu: &Gpu, l: &vgpu_isa::Launch, units: usize) {
    let r = run_grid(module, l, &gpu.mem, units, None);
    assert_eq!(r.outcome, GridOutcome::Completed, "{r:?}");
    assert_eq!(r.workgroups_completed, l.workgroups());
}

#[test]
fn vecadd_matches_cpu() {
    let m = sample_module("vecadd");
    let mut rng = Rng::new(1);
    for (i, n) in [1usize, 31, 256, 1000, 4099].into_iter().enumerate() {
        let (a, b) = (rng.f32s(n), rng.f32s(n));
        let mut gpu = Gpu::new();
        let (va, vb, vc) = (
            gpu.upload_f32(&a),
            gpu.upload_f32(&b),
            gpu.alloc(n as u64 * 4),
        );
        let args = Args::new()
            .set(&m, "vecadd", "n", n as u64)
            .set(&m, "vecadd", "a", va)
            .set(&m, "vecadd", "b", vb)
            .set(&m, "vecadd", "c", vc);
        let l = launch(
            &m,
            "vecadd",
            [n.div_ceil(256) as u32, 1, 1],
            [256, 1, 1],
            args,
        );
        run(&m, &gpu, &l, 1 + i % 2);
        let c = gpu.f32s(vc, n);
        for j in 0..n {
            assert_eq!(c[j].to_bits(), (a[j] + b[j]).to_bits(), "n={n} j={j}");
        }
    }
}

#[test]
fn saxpy_matches_cpu() {
    let m = sample_module("saxpy");
    let mut rng = Rng::new(2);
    for n in [7usize, 256, 257, 3000] {
        let (x, y) = (rng.f32s(n), rng.f32s(n));
        let alpha = rng.f32() * 4.0;
        let mut gpu = Gpu::new();
        let (vx, vy) = (gpu.upload_f32(&x), gpu.upload_f32(&y));
        let args = Args::new()
            .set(&m, "saxpy", "n", n as u64)
            .set(&m, "saxpy", "alpha", f(alpha))
            .set(&m, "saxpy", "x", vx)
            .set(&m, "saxpy", "y", vy);
        let l = launch(
            &m,
            "saxpy",
            [n.div_ceil(256) as u32, 1, 1],
            [256, 1, 1],
            args,
        );
        run(&m, &gpu, &l, 2);
        let out = gpu.f32s(vy, n);
        for j in 0..n {
            assert_eq!(
                out[j].to_bits(),
                alpha.mul_add(x[j], y[j]).to_bits(),
                "j={j}"
            );
        }
    }
}

#[test]
fn reduce_matches_cpu() {
    let m = sample_module("reduce");
    let mut rng = Rng::new(3);
    for n in [1usize, 255, 256, 1000, 5000] {
        let data = rng.u32s(n);
        let blocks = n.div_ceil(256);
        let mut gpu = Gpu::new();
        let (vi, vp) = (gpu.upload_u32(&data), gpu.alloc(blocks as u64 * 4));
        let args = Args::new()
            .set(&m, "reduce", "n", n as u64)
            .set(&m, "reduce", "input", vi)
            .set(&m, "reduce", "partial", vp);
        let l = launch(&m, "reduce", [blocks as u32, 1, 1], [256, 1, 1], args);
        run(&m, &gpu, &l, 2);
        let partial = gpu.u32s(vp, blocks);
        for (b, chunk) in data.chunks(256).enumerate() {
            let want = chunk.iter().fold(0u32, |s, &v| s.wrapping_add(v));
            assert_eq!(partial[b], want, "n={n} block {b}");
        }
    }
}

#[test]
fn matmul_matches_cpu() {
    let m = sample_module("matmul");
    let mut rng = Rng::new(4);
    for (rows, cols, inner) in [(16u32, 16u32, 16u32), (17, 33, 5), (40, 23, 37), (1, 1, 1)] {
        let a = rng.f32s((rows * inner) as usize);
        let b = rng.f32s((inner * cols) as usize);
        let mut gpu = Gpu::new();
        let (va, vb) = (gpu.upload_f32(&a), gpu.upload_f32(&b));
        let vc = gpu.alloc((rows * cols) as u64 * 4);
        let args = Args::new()
            .set(&m, "matmul", "m", rows as u64)
            .set(&m, "matmul", "n", cols as u64)
            .set(&m, "matmul", "k", inner as u64)
            .set(&m, "matmul", "a", va)
            .set(&m, "matmul", "b", vb)
            .set(&m, "matmul", "c", vc);
        let grid = [cols.div_ceil(16), rows.div_ceil(16), 1];
        let l = launch(&m, "matmul", grid, [16, 16, 1], args);
        run(&m, &gpu, &l, 2);
        let c = gpu.f32s(vc, (rows * cols) as usize);
        for i in 0..rows as usize {
            for j in 0..cols as usize {
                let mut acc = 0.0f32;
                for kk in 0..inner as usize {
                    acc = a[i * inner as usize + kk].mul_add(b[kk * cols as usize + j], acc);
                }
                assert_eq!(
                    c[i * cols as usize + j].to_bits(),
                    acc.to_bits(),
                    "{rows}x{cols}x{inner} at ({i},{j})"
                );
            }
        }
    }
}

#[test]
fn histogram_matches_cpu_across_compute_units() {
    let m = sample_module("histogram");
    let mut rng = Rng::new(5);
    // (n, workgroups, workgroup size): sizes that are not multiples too.
    for (n, grid, wg) in [
        (5000usize, 4u32, 256u32),
        (1234, 3, 100),
        (20000, 8, 64),
        (1, 1, 32),
    ] {
        let data = rng.u32s(n);
        let mut gpu = Gpu::new();
        let (vd, vb) = (gpu.upload_u32(&data), gpu.alloc(256 * 4));
        let args = Args::new()
            .set(&m, "histogram", "n", n as u64)
            .set(&m, "histogram", "data", vd)
            .set(&m, "histogram", "bins", vb);
        let l = launch(&m, "histogram", [grid, 1, 1], [wg, 1, 1], args);
        run(&m, &gpu, &l, 2);
        let mut want = vec![0u32; 256];
        for v in &data {
            want[(v & 255) as usize] += 1;
        }
        assert_eq!(gpu.u32s(vb, 256), want, "n={n}");
    }
}

#[test]
fn scan_matches_cpu() {
    let m = sample_module("scan");
    let mut rng = Rng::new(6);
    for n in [1usize, 255, 256, 1000, 9000] {
        let data: Vec<u32> = (0..n).map(|_| rng.range(0, 1000)).collect();
        let blocks = n.div_ceil(256);
        let mut gpu = Gpu::new();
        let vin = gpu.upload_u32(&data);
        let vout = gpu.alloc(n as u64 * 4);
        let vsums = gpu.alloc(blocks as u64 * 4);
        let voffs = gpu.alloc(blocks as u64 * 4);
        let vscratch = gpu.alloc(4);
        let k = "scan_blocks";
        let a1 = Args::new()
            .set(&m, k, "n", n as u64)
            .set(&m, k, "input", vin)
            .set(&m, k, "output", vout)
            .set(&m, k, "sums", vsums);
        run(
            &m,
            &gpu,
            &launch(&m, k, [blocks as u32, 1, 1], [256, 1, 1], a1),
            2,
        );
        let a2 = Args::new()
            .set(&m, k, "n", blocks as u64)
            .set(&m, k, "input", vsums)
            .set(&m, k, "output", voffs)
            .set(&m, k, "sums", vscratch);
        run(&m, &gpu, &launch(&m, k, [1, 1, 1], [256, 1, 1], a2), 1);
        let k = "add_offsets";
        let a3 = Args::new()
            .set(&m, k, "n", n as u64)
            .set(&m, k, "data", vout)
            .set(&m, k, "offsets", voffs);
        run(
            &m,
            &gpu,
            &launch(&m, k, [blocks as u32, 1, 1], [256, 1, 1], a3),
            2,
        );
        let mut want = Vec::with_capacity(n);
        let mut s = 0u32;
        for &v in &data {
            want.push(s);
            s = s.wrapping_add(v);
        }
        assert_eq!(gpu.u32s(vout, n), want, "n={n}");
    }
}

/// The compare-and-swap loop of docs/isa.md §4.10: every lane of every
/// workgroup adds into one word, on two compute units.
#[test]
fn float_atomic_add_matches_cpu() {
    let m = sample_module("float_atomic_add");
    let mut rng = Rng::new(7);
    for n in [1usize, 63, 64, 1000, 4099] {
        // Small integers: every partial sum is exact whatever the order.
        let x: Vec<f32> = (0..n).map(|_| rng.range(0, 1000) as f32).collect();
        let mut gpu = Gpu::new();
        let (vx, vs) = (gpu.upload_f32(&x), gpu.upload_f32(&[0.5]));
        let args = Args::new()
            .set(&m, "float_atomic_add", "n", n as u64)
            .set(&m, "float_atomic_add", "x", vx)
            .set(&m, "float_atomic_add", "sum", vs);
        let l = launch(
            &m,
            "float_atomic_add",
            [n.div_ceil(64) as u32, 1, 1],
            [64, 1, 1],
            args,
        );
        run(&m, &gpu, &l, 2);
        let want = x.iter().fold(0.5f32, |s, &v| s + v);
        assert_eq!(gpu.f32s(vs, 1)[0], want, "n={n}");
    }
    // A NaN in the word: the loop compares bits, so it ends (with the
    // canonical NaN every fp32 operation produces).
    let mut gpu = Gpu::new();
    let (vx, vs) = (gpu.upload_f32(&[1.0; 100]), gpu.upload_u32(&[0x7fc0_0000]));
    let args = Args::new()
        .set(&m, "float_atomic_add", "n", 100)
        .set(&m, "float_atomic_add", "x", vx)
        .set(&m, "float_atomic_add", "sum", vs);
    let l = launch(&m, "float_atomic_add", [2, 1, 1], [64, 1, 1], args);
    run(&m, &gpu, &l, 1);
    assert_eq!(gpu.u32s(vs, 1)[0], 0x7fff_ffff);
}
