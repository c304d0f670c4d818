//! Measured precision of the fp32 approximation instructions, against the
//! bounds stated in docs/isa.md (section "Transcendental instructions"):
//! rcp and sqrt are correctly rounded (0.5 ulp), rsqrt, exp2 and log2 are
//! within 1 ulp. Each is checked directly on many inputs and through the
//! interpreter on a sample of them.

mod common;
use common::*;
use vgpu_isa::*;

/// Distance of `got` from the exact value `want` in units of the f32 ulp at
/// `want`.
fn ulp_error(got: f32, want: f64) -> f64 {
    if want.is_nan() {
        return if got.is_nan() { 0.0 } else { f64::INFINITY };
    }
    if want.is_infinite() || got.is_infinite() {
        // Overflow: an exact value beyond f32::MAX + ulp/2 rounds to infinity.
        let rounds_to_inf = want.abs() >= f32::MAX as f64 * (1.0 + 2f64.powi(-25));
        let same_sign = (got > 0.0) == (want > 0.0);
        return if got.is_infinite() && rounds_to_inf && same_sign {
            0.0
        } else {
            f64::INFINITY
        };
    }
    let a = want.abs();
    let ulp = if a < f32::MIN_POSITIVE as f64 {
        2f64.powi(-149)
    } else {
        2f64.powi(a.log2().floor() as i32 - 23)
    };
    (got as f64 - want).abs() / ulp
}

struct Case {
    name: &'static str,
    op: UnOp,
    f: fn(f32) -> f32,
    exact: fn(f64) -> f64,
    bound: f64,
    input: fn(&mut Rng) -> f32,
}

fn positive(r: &mut Rng) -> f32 {
    // Every binade of positive floats, including subnormals.
    f32::from_bits(r.range(1, 0x7f80_0000))
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "rcp",
            op: UnOp::Rcp,
            f: |x| 1.0 / x,
            exact: |x| 1.0 / x,
            bound: 0.5,
            input: |r| {
                if r.range(0, 2) == 0 {
                    positive(r)
                } else {
                    -positive(r)
                }
            },
        },
        Case {
            name: "sqrt",
            op: UnOp::Sqrt,
            f: f32::sqrt,
            exact: f64::sqrt,
            bound: 0.5,
            input: positive,
        },
        Case {
            name: "rsqrt",
            op: UnOp::Rsqrt,
            f: math::rsqrt,
            exact: |x| 1.0 / x.sqrt(),
            bound: 1.0,
            input: positive,
        },
        Case {
            name: "exp2",
            op: UnOp::Exp2,
            f: math::exp2,
            exact: f64::exp2,
            bound: 1.0,
            input: |r| (r.f32() * 160.0).clamp(-149.9, 127.9),
        },
        Case {
            name: "log2",
            op: UnOp::Log2,
            f: math::log2,
            exact: f64::log2,
            bound: 1.0,
            input: positive,
        },
    ]
}

#[test]
fn measured_precision_is_within_the_documented_bounds() {
    let mut rng = Rng::new(40);
    for c in cases() {
        let mut worst = (0.0f64, 0.0f32);
        for i in 0..200_000 {
            let x = if i < 1000 && c.name == "log2" {
                // Near 1, where log2 is tiny.
                1.0 + (i as f32 - 500.0) * f32::EPSILON
            } else {
                (c.input)(&mut rng)
            };
            let e = ulp_error((c.f)(x), (c.exact)(x as f64));
            if e > worst.0 {
                worst = (e, x);
            }
        }
        println!(
            "{}: max error {:.3} ulp (at {:e})",
            c.name, worst.0, worst.1
        );
        assert!(
            worst.0 <= c.bound,
            "{}: {} ulp at {:e} exceeds {}",
            c.name,
            worst.0,
            worst.1,
            c.bound
        );
    }
}

#[test]
fn special_values() {
    let nan = f32::NAN;
    let inf = f32::INFINITY;
    assert_eq!(math::exp2(-inf), 0.0);
    assert_eq!(math::exp2(inf), inf);
    assert_eq!(math::exp2(128.0), inf);
    assert_eq!(math::exp2(-150.0), 0.0);
    assert_eq!(math::exp2(-149.0), f32::from_bits(1));
    assert_eq!(math::exp2(0.0), 1.0);
    assert_eq!(math::exp2(10.0), 1024.0);
    assert!(math::exp2(nan).is_nan());
    assert_eq!(math::log2(0.0), -inf);
    assert_eq!(math::log2(-0.0), -inf);
    assert_eq!(math::log2(inf), inf);
    assert_eq!(math::log2(1.0), 0.0);
    assert_eq!(math::log2(f32::from_bits(1)), -149.0);
    assert!(math::log2(-1.0).is_nan());
    assert_eq!(math::rsqrt(0.0), inf);
    assert_eq!(math::rsqrt(-0.0), -inf);
    assert_eq!(math::rsqrt(inf), 0.0);
    assert_eq!(math::rsqrt(4.0), 0.5);
    assert!(math::rsqrt(-1.0).is_nan());
}

#[test]
fn the_interpreter_computes_the_same_values() {
    let mut rng = Rng::new(41);
    let n = 256usize;
    for c in cases() {
        let xs: Vec<f32> = (0..n).map(|_| (c.input)(&mut rng)).collect();
        let src = format!(
            "
.kernel k
.arg x ptr
    s2r     r0, %tid.x
    mov     r1, 4
    ldarg   d2, [x]
    mad.wide.u32 d2, r0, r1, d2
    ld.32   r4, [d2]
    {} r4, r4
    st.32   [d2], r4
    exit
.end",
            c.op.mnemonic()
        );
        let m = assemble(&src, 1).unwrap();
        let mut gpu = Gpu::new();
        let vx = gpu.upload_f32(&xs);
        let l = launch(
            &m,
            "k",
            [1, 1, 1],
            [n as u32, 1, 1],
            Args::new().set(&m, "k", "x", vx),
        );
        assert_eq!(
            run_workgroup(&m, &l, [0, 0, 0], &gpu.mem, Limits::UNLIMITED),
            Ok(Outcome::Completed)
        );
        let out = gpu.f32s(vx, n);
        for i in 0..n {
            assert_eq!(
                out[i].to_bits(),
                math::canon((c.f)(xs[i])),
                "{} {:e}",
                c.name,
                xs[i]
            );
            assert!(ulp_error(out[i], (c.exact)(xs[i] as f64)) <= c.bound);
        }
    }
}
