//! Divergence and reconvergence (minimum-PC rule), barriers, and the
//! generation-2 warp instructions.

mod common;
use common::*;
use vgpu_isa::{assemble, run_workgroup, FaultKind, Limits, Module, Outcome};

/// Runs kernel `k` of `src` as one workgroup of `threads` threads with
/// arguments `out` and `mask` (each `threads` u32, `out` prefilled with
/// `fill`); returns both buffers.
fn run_one(src: &str, gen: u32, threads: u32, fill: u32) -> (Vec<u32>, Vec<u32>) {
    let m: Module = assemble(src, gen).unwrap_or_else(|e| panic!("{e}"));
    let k = &m.kernels()[0].name.clone();
    let mut gpu = Gpu::new();
    let out = gpu.upload_u32(&vec![fill; threads as usize]);
    let mask = gpu.alloc(threads as u64 * 4);
    let mut args = Args::new().set(&m, k, "out", out);
    if m.kernels()[0].args.iter().any(|a| a.name == "mask") {
        args = args.set(&m, k, "mask", mask);
    }
    let l = launch(&m, k, [1, 1, 1], [threads, 1, 1], args);
    let r = run_workgroup(&m, &l, [0, 0, 0], &gpu.mem, Limits::UNLIMITED);
    assert_eq!(r, Ok(Outcome::Completed));
    (
        gpu.u32s(out, threads as usize),
        gpu.u32s(mask, threads as usize),
    )
}

/// The live-lane mask of thread `t`'s warp in a workgroup of `n` threads.
fn warp_mask(t: u32, n: u32) -> u32 {
    let w = t / 32;
    let lanes = (n - w * 32).min(32);
    if lanes == 32 {
        u32::MAX
    } else {
        (1 << lanes) - 1
    }
}

const STORE: &str = "
    mov     r30, 4
    s2r     r31, %tid.x
    ldarg   d28, [out]
    mad.wide.u32 d28, r31, r30, d28
    st.32   [d28], r2
";

#[test]
fn nested_if_else_reconverges() {
    let src = format!(
        "
.kernel nested
.arg out ptr
.arg mask ptr
    s2r     r0, %tid.x
    and     r1, r0, 1
    setp.eq.u32 p0, r1, 0
    @p0 bra even
    and     r1, r0, 2
    setp.eq.u32 p1, r1, 0
    @p1 bra odd_a
    mul     r2, r0, 3
    bra     odd_end
odd_a:
    add     r2, r0, 100
odd_end:
    bra     join
even:
    rem.u32 r1, r0, 3
    setp.ne.u32 p2, r1, 0
    @p2 bra even_b
    mov     r2, 7
    bra     join
even_b:
    xor     r2, r0, 0x55
join:
    vote.ballot r3, pt              // who is active here?
    add     r2, r2, 1000
{STORE}
    ldarg   d26, [mask]
    mad.wide.u32 d26, r31, r30, d26
    st.32   [d26], r3
    exit
.end"
    );
    for n in [32u32, 45, 100] {
        let (out, mask) = run_one(&src, 2, n, 0);
        for t in 0..n {
            let v = if t & 1 == 1 {
                if t & 2 != 0 {
                    t * 3
                } else {
                    t + 100
                }
            } else if t % 3 == 0 {
                7
            } else {
                t ^ 0x55
            };
            assert_eq!(out[t as usize], v + 1000, "thread {t}");
            assert_eq!(
                mask[t as usize],
                warp_mask(t, n),
                "thread {t}: not reconverged"
            );
        }
    }
}

#[test]
fn loops_with_lane_varying_trip_counts() {
    // Collatz steps of t + 1: a data-dependent loop with if/else inside.
    let src = format!(
        "
.kernel collatz
.arg out ptr
.arg mask ptr
    s2r     r0, %tid.x
    add     r1, r0, 1               // x
    mov     r2, 0                   // steps
loop:
    setp.eq.u32 p0, r1, 1
    @p0 bra done
    and     r3, r1, 1
    setp.eq.u32 p1, r3, 0
    @p1 bra even
    mul     r1, r1, 3
    add     r1, r1, 1
    bra     next
even:
    shr.u32 r1, r1, 1
next:
    add     r2, r2, 1
    bra     loop
done:
    vote.ballot r3, pt
{STORE}
    ldarg   d26, [mask]
    mad.wide.u32 d26, r31, r30, d26
    st.32   [d26], r3
    exit
.end"
    );
    let n = 96;
    let (out, mask) = run_one(&src, 2, n, 0);
    for t in 0..n {
        let (mut x, mut steps) = (t + 1, 0);
        while x != 1 {
            x = if x % 2 == 0 { x / 2 } else { 3 * x + 1 };
            steps += 1;
        }
        assert_eq!(out[t as usize], steps, "thread {t}");
        assert_eq!(
            mask[t as usize],
            warp_mask(t, n),
            "thread {t}: not reconverged after the loop"
        );
    }
}

#[test]
fn early_exit_of_some_lanes_and_barrier_after_it() {
    // Threads with t % 5 == 0 leave at once; the others pass a barrier
    // (exited threads do not hold it up) and read a neighbour's value.
    let src = "
.kernel early
.arg out ptr
.shared 512
    s2r     r0, %tid.x
    rem.u32 r1, r0, 5
    setp.eq.u32 p0, r1, 0
    @p0 exit
    mul     r2, r0, r0
    shl     r3, r0, 2
    sts.32  [r3], r2
    bar
    add     r4, r0, 1
    rem.u32 r5, r4, 5
    setp.eq.u32 p1, r5, 0           // neighbour exited: read own slot
    @p1 mov r4, r0
    shl     r4, r4, 2
    lds.32  r2, [r4]
    mov     r30, 4
    ldarg   d28, [out]
    mad.wide.u32 d28, r0, r30, d28
    st.32   [d28], r2
    exit
.end";
    let n = 100;
    let (out, _) = run_one(src, 1, n, 0xdead);
    for t in 0..n {
        let want = if t % 5 == 0 {
            0xdead
        } else if (t + 1) % 5 == 0 {
            t * t
        } else {
            (t + 1) * (t + 1)
        };
        assert_eq!(out[t as usize], want, "thread {t}");
    }
}

#[test]
fn barrier_orders_shared_memory_across_warps() {
    // Every thread writes sh[t], then reads sh[(t + 37) % n]: without the
    // barrier, warp 0 would read slots later warps have not written yet.
    let src = |bar: &str| {
        format!(
            "
.kernel exchange
.arg out ptr
.shared 1024
    s2r     r0, %tid.x
    s2r     r1, %ntid.x
    mad     r2, r0, r0, r1
    shl     r3, r0, 2
    sts.32  [r3], r2
    {bar}
    add     r4, r0, 37
    rem.u32 r4, r4, r1
    shl     r4, r4, 2
    lds.32  r2, [r4]
{STORE}
    exit
.end"
        )
    };
    let n = 200;
    let (out, _) = run_one(&src("bar"), 1, n, 0);
    for t in 0..n {
        let s = (t + 37) % n;
        assert_eq!(out[t as usize], s * s + n, "thread {t}");
    }
    // Control: without the barrier the early warps read zeros.
    let (out, _) = run_one(&src("nop"), 1, n, 0);
    assert_eq!(
        out[0], 0,
        "the barrier-free variant should read unwritten memory"
    );
}

#[test]
fn barrier_in_divergent_code_at_one_pc_is_fine() {
    // Lanes reach the same barrier by different paths.
    let src = format!(
        "
.kernel paths
.arg out ptr
.shared 256
    s2r     r0, %tid.x
    mov     r2, 1
    and     r1, r0, 3
    setp.eq.u32 p0, r1, 0
    @p0 bra skip
    mov     r2, 2
skip:
    shl     r3, r0, 2
    sts.32  [r3], r2
    bar
    xor     r4, r0, 1
    shl     r4, r4, 2
    lds.32  r2, [r4]
{STORE}
    exit
.end"
    );
    let (out, _) = run_one(&src, 1, 64, 0);
    for t in 0..64u32 {
        let u = t ^ 1;
        assert_eq!(out[t as usize], if u % 4 == 0 { 1 } else { 2 });
    }
}

#[test]
fn threads_at_different_barriers_fault() {
    let src = "
.kernel split
    s2r     r0, %tid.x
    setp.lt.u32 p0, r0, 16
    @p0 bra low
    bar
    exit
low:
    bar
    exit
.end";
    let m = assemble(src, 1).unwrap();
    let gpu = Gpu::new();
    let l = launch(&m, "split", [1, 1, 1], [32, 1, 1], Args::new());
    let f = run_workgroup(&m, &l, [0, 0, 0], &gpu.mem, Limits::UNLIMITED).unwrap_err();
    // Lane 0 (the lowest waiting lane) is at the barrier at pc 5, lane 16
    // at the one at pc 3.
    assert_eq!(f.kind, FaultKind::BarrierDivergence { other_pc: 3 });
    assert_eq!((f.warp, f.lane, f.pc), (0, 0, 5));
}

#[test]
fn shuffle_and_vote_generation_2() {
    // Butterfly reduction: every lane ends with the warp's sum.
    let src = format!(
        "
.kernel warpsum
.arg out ptr
.arg mask ptr
    s2r     r0, %laneid
    mul     r2, r0, r0
    shfl.bfly r1, r2, 16
    add     r2, r2, r1
    shfl.bfly r1, r2, 8
    add     r2, r2, r1
    shfl.bfly r1, r2, 4
    add     r2, r2, r1
    shfl.bfly r1, r2, 2
    add     r2, r2, r1
    shfl.bfly r1, r2, 1
    add     r2, r2, r1
    setp.lt.u32 p0, r0, 3
    vote.any p1, p0
    vote.all p2, p0
    mov     r3, 0
    @p1 or  r3, r3, 1
    @p2 or  r3, r3, 2
    shfl.up r4, r0, 1               // lane 0 keeps its own value
    shl     r4, r4, 8
    or      r3, r3, r4
{STORE}
    ldarg   d26, [mask]
    mad.wide.u32 d26, r31, r30, d26
    st.32   [d26], r3
    exit
.end"
    );
    let (out, flags) = run_one(&src, 2, 64, 0);
    let total: u32 = (0..32u32).map(|l| l * l).sum();
    for t in 0..64usize {
        assert_eq!(out[t], total, "thread {t}");
        let lane = t as u32 % 32;
        let up = if lane == 0 { 0 } else { lane - 1 };
        assert_eq!(flags[t], 1 | up << 8, "thread {t}");
    }
    // Generation 1 has no warp instructions.
    let e = assemble(&src, 1).unwrap_err().to_string();
    assert!(e.contains("needs generation 2"), "{e}");
}
