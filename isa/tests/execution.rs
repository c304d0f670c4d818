//! Execution control and faults: cancel, budgets and resumption, memory
//! faults with lane/PC/VA, traps, special registers, ALU semantics and
//! atomics under contention across compute units.

mod common;
use common::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use vgpu_isa::mem::PAGE_SIZE;
use vgpu_isa::*;

#[test]
fn infinite_loop_is_cancelled_by_the_flag() {
    let m = sample_module("spin");
    let gpu = Gpu::new();
    let l = launch(&m, "spin", [1, 1, 1], [32, 1, 1], Args::new());
    let cancel = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(50));
            cancel.store(true, Ordering::Relaxed);
        });
        let mut exec = WorkgroupExec::new(&m, &l, [0, 0, 0]).unwrap();
        let limits = Limits {
            budget: u64::MAX,
            cancel: Some(&cancel),
        };
        assert_eq!(exec.run(&gpu.mem, limits), Ok(Outcome::Cancelled));
        let issued = exec.stats().warp_instructions;
        assert!(issued > 1000);
        // A cancelled workgroup stays cancelled and does not run again.
        assert_eq!(
            exec.run(&gpu.mem, Limits::UNLIMITED),
            Ok(Outcome::Cancelled)
        );
        assert_eq!(exec.stats().warp_instructions, issued);
    });
}

#[test]
fn infinite_loop_grid_is_cancelled_on_every_compute_unit() {
    let m = sample_module("spin");
    let gpu = Gpu::new();
    let l = launch(&m, "spin", [8, 1, 1], [64, 1, 1], Args::new());
    let cancel = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(50));
            cancel.store(true, Ordering::Relaxed);
        });
        let r = run_grid(&m, &l, &gpu.mem, 2, Some(&cancel));
        assert_eq!(r.outcome, GridOutcome::Cancelled);
        assert_eq!(r.workgroups_completed, 0);
    });
}

#[test]
fn budget_preempts_and_the_workgroup_resumes() {
    let m = sample_module("spin");
    let gpu = Gpu::new();
    let l = launch(&m, "spin", [1, 1, 1], [64, 1, 1], Args::new());
    let mut exec = WorkgroupExec::new(&m, &l, [0, 0, 0]).unwrap();
    let limits = Limits {
        budget: 1000,
        cancel: None,
    };
    for round in 1..=3u64 {
        assert_eq!(exec.run(&gpu.mem, limits), Ok(Outcome::Preempted));
        assert_eq!(exec.stats().warp_instructions, 1000 * round);
    }

    // A real kernel run in slices of 7 instructions gives the same result
    // as one run.
    let m = sample_module("reduce");
    let mut rng = Rng::new(30);
    let data = rng.u32s(700);
    let mut gpu = Gpu::new();
    let vi = gpu.upload_u32(&data);
    let vp = gpu.alloc(12);
    let args = Args::new()
        .set(&m, "reduce", "n", 700)
        .set(&m, "reduce", "input", vi)
        .set(&m, "reduce", "partial", vp);
    let l = launch(&m, "reduce", [3, 1, 1], [256, 1, 1], args);
    for wg in 0..3 {
        let mut exec = WorkgroupExec::new(&m, &l, [wg, 0, 0]).unwrap();
        let slice = Limits {
            budget: 7,
            cancel: None,
        };
        let mut slices = 0;
        while exec.run(&gpu.mem, slice) == Ok(Outcome::Preempted) {
            slices += 1;
        }
        assert!(slices > 10);
    }
    let want: Vec<u32> = data
        .chunks(256)
        .map(|c| c.iter().fold(0u32, |s, &v| s.wrapping_add(v)))
        .collect();
    assert_eq!(gpu.u32s(vp, 3), want);
}

#[test]
fn out_of_bounds_store_reports_lane_warp_pc_and_address() {
    let m = sample_module("oob_store");
    let mut gpu = Gpu::new();
    let page = gpu.alloc(PAGE_SIZE);
    // out[i] is mapped for i < 40: thread 40 (warp 1, lane 8) faults.
    let out = page + PAGE_SIZE - 40 * 4;
    let args = Args::new().set(&m, "oob_store", "out", out);
    let l = launch(&m, "oob_store", [4, 1, 1], [64, 1, 1], args);
    let store_pc = m
        .code()
        .iter()
        .position(|i| matches!(i.op, Op::St { .. }))
        .unwrap() as u32;
    // Through a trait object, as a device with several memory back-ends would.
    let mem: &dyn GlobalMemory = &gpu.mem;
    let f = run_workgroup(&m, &l, [0, 0, 0], mem, Limits::UNLIMITED).unwrap_err();
    assert_eq!((f.warp, f.lane, f.pc), (1, 8, store_pc));
    assert_eq!(
        f.kind,
        FaultKind::Global(MemFault {
            va: page + PAGE_SIZE,
            access: Access::Write,
            size: 4,
            reason: MemFaultReason::NotMapped,
        })
    );
    // Warp 0 (threads 0..31) stored before the fault.
    assert_eq!(gpu.u32s(out, 32), (0..32).collect::<Vec<u32>>());
    // Asking for a workgroup outside the grid is refused.
    assert_eq!(
        WorkgroupExec::new(&m, &l, [4, 0, 0]).err().map(|f| f.kind),
        Some(FaultKind::BadWorkgroup)
    );
    // The grid runner reports the same fault with the workgroup.
    let r = run_grid(&m, &l, &gpu.mem, 2, None);
    match r.outcome {
        GridOutcome::Faulted { fault, .. } => assert_eq!(fault.pc, store_pc),
        o => panic!("{o:?}"),
    }
}

fn run_src(src: &str, gpu: &Gpu, wg: [u32; 3], args: Args) -> Result<Outcome, Fault> {
    let m = assemble(src, 2).unwrap_or_else(|e| panic!("{e}"));
    let k = m.kernels()[0].name.clone();
    let l = launch(&m, &k, [1, 1, 1], wg, args);
    run_workgroup(&m, &l, [0, 0, 0], &gpu.mem, Limits::UNLIMITED)
}

#[test]
fn read_only_pages_misalignment_and_shared_bounds_fault() {
    let mut gpu = Gpu::new();
    let ro = 0x7_0000_0000u64;
    gpu.mem.map(ro, PAGE_SIZE, false);
    let src = "
.kernel k
.arg p ptr
    ldarg   d0, [p]
    s2r     r2, %laneid
    st.32   [d0+8], r2
    exit
.end";
    let args = |m: &Module| Args::new().set(m, "k", "p", ro);
    let m = assemble(src, 2).unwrap();
    let f = run_src(src, &gpu, [32, 1, 1], args(&m)).unwrap_err();
    assert_eq!(
        f.kind,
        FaultKind::Global(MemFault {
            va: ro + 8,
            access: Access::Write,
            size: 4,
            reason: MemFaultReason::Permission
        })
    );
    assert_eq!((f.lane, f.pc), (0, 2));

    // Lane 5 loads from a misaligned address.
    let src = "
.kernel k
.arg p ptr
    ldarg   d0, [p]
    s2r     r2, %laneid
    setp.eq.u32 p0, r2, 5
    @p0 add.64 d0, d0, 2
    ld.32   r3, [d0]
    exit
.end";
    let f = run_src(src, &gpu, [32, 1, 1], args(&m)).unwrap_err();
    assert_eq!((f.lane, f.pc), (5, 4));
    assert!(matches!(
        f.kind,
        FaultKind::Global(MemFault { va, reason: MemFaultReason::Misaligned, access: Access::Read, .. }) if va == ro + 2
    ));

    // Shared memory: 64 bytes, lane 16 writes at offset 64.
    let src = "
.kernel k
.shared 64
    s2r     r0, %laneid
    shl     r1, r0, 2
    sts.32  [r1], r0
    exit
.end";
    let f = run_src(src, &gpu, [32, 1, 1], Args::new()).unwrap_err();
    assert_eq!(
        f,
        Fault {
            warp: 0,
            lane: 16,
            pc: 2,
            kind: FaultKind::Shared(MemFault {
                va: 64,
                access: Access::Write,
                size: 4,
                reason: MemFaultReason::OutOfBounds
            })
        }
    );
}

#[test]
fn trap_reports_pc_and_lane_mask() {
    let src = "
.kernel k
    s2r     r0, %tid.x
    setp.ge.u32 p0, r0, 40
    @p0 trap 7
    exit
.end";
    let gpu = Gpu::new();
    let o = run_src(src, &gpu, [50, 1, 1], Args::new()).unwrap();
    assert_eq!(
        o,
        Outcome::Trapped(Trap {
            warp: 1,
            pc: 2,
            mask: 0x3ff << 8,
            code: 7
        })
    );
}

#[test]
fn special_registers() {
    let src = "
.kernel k
.arg out ptr
    s2r     r0, %tid.x
    s2r     r1, %tid.y
    s2r     r2, %tid.z
    s2r     r3, %ntid.x
    s2r     r4, %ntid.y
    s2r     r5, %ntid.z
    s2r     r6, %wgid.x
    s2r     r7, %wgid.y
    s2r     r8, %wgid.z
    s2r     r9, %nwg.x
    s2r     r10, %nwg.y
    s2r     r11, %nwg.z
    s2r     r12, %gid.x
    s2r     r13, %gid.y
    s2r     r14, %gid.z
    s2r     r15, %laneid
    s2r     r16, %warpid
    s2r     r17, %nwarps
    s2r     r18, %clock
    // linear index = x + y*nx + z*nx*ny of thread and workgroup
    mad     r20, r2, r4, r1
    mad     r20, r20, r3, r0
    mad     r21, r8, r10, r7
    mad     r21, r21, r9, r6
    s2r     r22, %ntid.x
    mul     r22, r22, r4
    mul     r22, r22, r5
    mad     r20, r21, r22, r20       // global linear thread index
    mov     r23, 80
    ldarg   d24, [out]
    mad.wide.u32 d24, r20, r23, d24
    st.32   [d24], r0
    st.32   [d24+4], r1
    st.32   [d24+8], r2
    st.32   [d24+12], r3
    st.32   [d24+16], r4
    st.32   [d24+20], r5
    st.32   [d24+24], r6
    st.32   [d24+28], r7
    st.32   [d24+32], r8
    st.32   [d24+36], r9
    st.32   [d24+40], r10
    st.32   [d24+44], r11
    st.32   [d24+48], r12
    st.32   [d24+52], r13
    st.32   [d24+56], r14
    st.32   [d24+60], r15
    st.32   [d24+64], r16
    st.32   [d24+68], r17
    st.32   [d24+72], r18
    exit
.end";
    let m = assemble(src, 1).unwrap();
    let (wg, grid) = ([5u32, 3, 2], [2u32, 3, 2]);
    let per = wg.iter().product::<u32>();
    let total = per * grid.iter().product::<u32>();
    let mut gpu = Gpu::new();
    let out = gpu.alloc(total as u64 * 80);
    let l = launch(&m, "k", grid, wg, Args::new().set(&m, "k", "out", out));
    let r = run_grid(&m, &l, &gpu.mem, 2, None);
    assert_eq!(r.outcome, GridOutcome::Completed);
    let v = gpu.u32s(out, total as usize * 20);
    for gz in 0..grid[2] {
        for gy in 0..grid[1] {
            for gx in 0..grid[0] {
                for t in 0..per {
                    let (x, y, z) = (t % wg[0], t / wg[0] % wg[1], t / (wg[0] * wg[1]));
                    let g = (gx + gy * grid[0] + gz * grid[0] * grid[1]) * per + t;
                    let row = &v[g as usize * 20..g as usize * 20 + 20];
                    let want = [
                        x,
                        y,
                        z,
                        wg[0],
                        wg[1],
                        wg[2],
                        gx,
                        gy,
                        gz,
                        grid[0],
                        grid[1],
                        grid[2],
                        gx * wg[0] + x,
                        gy * wg[1] + y,
                        gz * wg[2] + z,
                        t % 32,
                        t / 32,
                        per.div_ceil(32),
                    ];
                    assert_eq!(
                        &row[..18],
                        &want,
                        "thread {t} of workgroup ({gx},{gy},{gz})"
                    );
                    assert_eq!(row[18], 18, "clock counts the warp's earlier instructions");
                }
            }
        }
    }
}

fn cpu_bin(op: BinOp, a: u32, b: u32) -> u32 {
    let (fa, fb) = (f32::from_bits(a), f32::from_bits(b));
    let canon = |x: f32| if x.is_nan() { 0x7fff_ffff } else { x.to_bits() };
    match op {
        BinOp::Add => a.wrapping_add(b),
        BinOp::Sub => a.wrapping_sub(b),
        BinOp::Mul => a.wrapping_mul(b),
        BinOp::MulHiU => ((a as u64 * b as u64) >> 32) as u32,
        BinOp::MulHiS => ((a as i32 as i64 * b as i32 as i64) >> 32) as u32,
        BinOp::DivU => a.checked_div(b).unwrap_or(u32::MAX),
        BinOp::DivS => match (a as i32, b as i32) {
            (_, 0) => u32::MAX,
            (i32::MIN, -1) => i32::MIN as u32,
            (x, y) => (x / y) as u32,
        },
        BinOp::RemU => {
            if b == 0 {
                a
            } else {
                a % b
            }
        }
        BinOp::RemS => match (a as i32, b as i32) {
            (_, 0) => a,
            (i32::MIN, -1) => 0,
            (x, y) => (x % y) as u32,
        },
        BinOp::MinU => a.min(b),
        BinOp::MinS => (a as i32).min(b as i32) as u32,
        BinOp::MaxU => a.max(b),
        BinOp::MaxS => (a as i32).max(b as i32) as u32,
        BinOp::And => a & b,
        BinOp::Or => a | b,
        BinOp::Xor => a ^ b,
        BinOp::Shl => {
            if b >= 32 {
                0
            } else {
                a << b
            }
        }
        BinOp::ShrU => {
            if b >= 32 {
                0
            } else {
                a >> b
            }
        }
        BinOp::ShrS => ((a as i32) >> b.min(31)) as u32,
        BinOp::FAdd => canon(fa + fb),
        BinOp::FSub => canon(fa - fb),
        BinOp::FMul => canon(fa * fb),
        BinOp::FDiv => canon(fa / fb),
        BinOp::FMin | BinOp::FMax => {
            let min = op == BinOp::FMin;
            match (fa.is_nan(), fb.is_nan()) {
                (true, true) => 0x7fff_ffff,
                (true, false) => b,
                (false, true) => a,
                _ if fa == fb => {
                    if min {
                        a | b
                    } else {
                        a & b
                    }
                }
                _ => {
                    if (fa < fb) == min {
                        a
                    } else {
                        b
                    }
                }
            }
        }
    }
}

fn interesting(r: &mut Rng) -> u32 {
    const SPECIAL: [u32; 14] = [
        0,
        1,
        2,
        31,
        32,
        33,
        0xffff_ffff,
        0x8000_0000,
        0x7fff_ffff,
        0x3f80_0000,
        0x8000_0000,
        0x7f80_0000,
        0xff80_0000,
        0x7fc0_0000,
    ];
    match r.range(0, 3) {
        0 => SPECIAL[r.range(0, SPECIAL.len() as u32) as usize],
        1 => r.f32().to_bits(),
        _ => r.next_u32(),
    }
}

#[test]
fn alu_operations_match_a_cpu_reference() {
    let mut rng = Rng::new(31);
    let n = 256usize;
    let a: Vec<u32> = (0..n).map(|_| interesting(&mut rng)).collect();
    let b: Vec<u32> = (0..n).map(|_| interesting(&mut rng)).collect();
    for &op in BinOp::ALL {
        let src = format!(
            "
.kernel k
.arg a ptr
.arg b ptr
.arg out ptr
    s2r     r0, %tid.x
    mov     r1, 4
    ldarg   d2, [a]
    mad.wide.u32 d2, r0, r1, d2
    ldarg   d4, [b]
    mad.wide.u32 d4, r0, r1, d4
    ldarg   d6, [out]
    mad.wide.u32 d6, r0, r1, d6
    ld.32   r8, [d2]
    ld.32   r9, [d4]
    {} r10, r8, r9
    st.32   [d6], r10
    exit
.end",
            op.mnemonic()
        );
        let m = assemble(&src, 1).unwrap();
        let mut gpu = Gpu::new();
        let (va, vb, vo) = (
            gpu.upload_u32(&a),
            gpu.upload_u32(&b),
            gpu.alloc(n as u64 * 4),
        );
        let args = Args::new()
            .set(&m, "k", "a", va)
            .set(&m, "k", "b", vb)
            .set(&m, "k", "out", vo);
        let l = launch(&m, "k", [1, 1, 1], [n as u32, 1, 1], args);
        assert_eq!(
            run_workgroup(&m, &l, [0, 0, 0], &gpu.mem, Limits::UNLIMITED),
            Ok(Outcome::Completed)
        );
        let out = gpu.u32s(vo, n);
        for i in 0..n {
            assert_eq!(
                out[i],
                cpu_bin(op, a[i], b[i]),
                "{} {:#x} {:#x}",
                op.mnemonic(),
                a[i],
                b[i]
            );
        }
    }
}

#[test]
fn atomics_under_contention_across_compute_units() {
    // Every thread: add 1 to a counter, max its gid, and a CAS-loop add of
    // its gid to a second counter; plus a shared-memory atomic count folded
    // into a third counter by thread 0 of each workgroup.
    let src = "
.kernel k
.arg ctr ptr
.shared 4
    s2r     r0, %gid.x
    s2r     r20, %tid.x
    ldarg   d2, [ctr]
    mov     r4, 1
    atom.add r5, [d2], r4
    atom.max.u32 r5, [d2+4], r0
    mov     r6, 0
    atoms.add r7, [r6], r4
cas:
    ld.32   r8, [d2+8]
    add     r9, r8, r0
    atom.cas r10, [d2+8], r8, r9
    setp.ne.u32 p0, r10, r8
    @p0 bra cas
    bar
    setp.ne.u32 p1, r20, 0
    @p1 exit
    lds.32  r11, [r6]
    atom.add r12, [d2+12], r11
    exit
.end";
    let m = assemble(src, 1).unwrap();
    let (groups, size) = (64u32, 128u32);
    let mut gpu = Gpu::new();
    let ctr = gpu.alloc(16);
    let l = launch(
        &m,
        "k",
        [groups, 1, 1],
        [size, 1, 1],
        Args::new().set(&m, "k", "ctr", ctr),
    );
    let r = run_grid(&m, &l, &gpu.mem, 2, None);
    assert_eq!(r.outcome, GridOutcome::Completed);
    let total = groups * size;
    let sum: u32 = (0..total).sum();
    assert_eq!(gpu.u32s(ctr, 4), vec![total, total - 1, sum, total]);
}

/// Cycles (docs/isa.md §15): per workgroup the longest warp's issued
/// instructions, or all warps' issued instructions / 4 when that is more;
/// summed over the grid's workgroups.
#[test]
fn cycles_count_the_longest_warp_and_four_issue_slots() {
    let gpu = Gpu::new();
    let cycles = |src: &str, grid: [u32; 3], wg: [u32; 3]| {
        let m = assemble(src, 2).unwrap_or_else(|e| panic!("{e}"));
        let l = launch(&m, "k", grid, wg, Args::new());
        let r = run_grid(&m, &l, &gpu.mem, 1, None);
        assert_eq!(r.outcome, GridOutcome::Completed);
        r.cycles
    };
    // Eleven issued instructions per warp, straight line.
    let straight = ".kernel k\n".to_string() + &"    nop\n".repeat(10) + "    exit\n.end\n";
    // One warp, or two: the longest warp (11) is more than all / 4.
    assert_eq!(cycles(&straight, [1, 1, 1], [32, 1, 1]), 11);
    assert_eq!(cycles(&straight, [1, 1, 1], [64, 1, 1]), 11);
    // Eight warps: 88 issue slots over 4 schedulers take 22 cycles.
    assert_eq!(cycles(&straight, [1, 1, 1], [256, 1, 1]), 22);
    // Five warps: 55 / 4 rounds up to 14.
    assert_eq!(cycles(&straight, [1, 1, 1], [160, 1, 1]), 14);
    // A partial warp costs what a full one does.
    assert_eq!(cycles(&straight, [1, 1, 1], [1, 1, 1]), 11);
    // Summed over workgroups.
    assert_eq!(cycles(&straight, [3, 2, 1], [256, 1, 1]), 6 * 22);
    // Only warp 0 goes on: warps 1..7 issue s2r, setp and exit (3 each);
    // warp 0 also issues the guarded exit with no lane left, 10 nops and
    // exit (14). max(14, ceil(35 / 4) = 9) = 14.
    let one_warp = ".kernel k\n    s2r r0, %tid.x\n    setp.ge.u32 p0, r0, 32\n    @p0 exit\n"
        .to_string()
        + &"    nop\n".repeat(10)
        + "    exit\n.end\n";
    assert_eq!(cycles(&one_warp, [1, 1, 1], [256, 1, 1]), 14);
    // A workgroup that faults adds nothing.
    let faults = ".kernel k\n    mov r2, 0\n    mov r3, 0\n    ld.32 r4, [d2]\n    exit\n.end\n";
    let m = assemble(faults, 2).unwrap();
    let l = launch(&m, "k", [1, 1, 1], [32, 1, 1], Args::new());
    let r = run_grid(&m, &l, &gpu.mem, 1, None);
    assert!(matches!(r.outcome, GridOutcome::Faulted { .. }), "{r:?}");
    assert_eq!(r.cycles, 0);
}

/// A grid large enough for compute units to claim workgroups a few at a
/// time (`grid.rs`): every workgroup still runs exactly once, the last
/// partial run of claims included, on one and on two units.
#[test]
fn a_large_grid_runs_every_workgroup_once() {
    let src = r"
.kernel k
.arg out ptr
.workgroup 32
    s2r     r0, %gid.x
    ldarg   d2, [out]
    mov     r4, 4
    mad.wide.u32 d2, r0, r4, d2
    ld.32   r1, [d2]
    add     r1, r1, r0
    add     r1, r1, 1
    st.32   [d2], r1
    exit
.end";
    let m = assemble(src, 1).unwrap();
    let groups = 1001u32;
    for units in [1, 2] {
        let mut gpu = Gpu::new();
        let out = gpu.alloc(groups as u64 * 32 * 4);
        let l = launch(
            &m,
            "k",
            [groups, 1, 1],
            [32, 1, 1],
            Args::new().set(&m, "k", "out", out),
        );
        let r = run_grid(&m, &l, &gpu.mem, units, None);
        assert_eq!(r.outcome, GridOutcome::Completed);
        assert_eq!(r.workgroups_completed, groups as u64);
        assert_eq!(r.stats.thread_instructions, groups as u64 * 32 * 9);
        let v = gpu.u32s(out, groups as usize * 32);
        for (i, &x) in v.iter().enumerate() {
            assert_eq!(x, i as u32 + 1, "word {i} on {units} unit(s)");
        }
    }
}
