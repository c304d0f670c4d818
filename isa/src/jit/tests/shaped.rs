//! Random programs built like real kernels — thread ids, lane ids and
//! arguments combined into global and shared addresses, loops with
//! uniform counters and inductions, half-warp patterns — so that the
//! full-warp code's shapes (`shape.rs`), scalar pass and shaped memory
//! paths are taken, mixed with what defeats them: divergence, guards,
//! values that wrap (failing their run-time conditions), addresses that
//! fault or leave the TLB entry's page, and interpreter steps in between.

use super::*;

/// Registers whose values stay shaped (thread ids and what is computed
/// from them).
const SHAPED: u8 = 12;

fn bin(op: BinOp, d: u8, a: u8, b: Src) -> Op {
    Op::Bin {
        op,
        d: Reg(d),
        a: Reg(a),
        b,
    }
}

fn imm(v: u32) -> Src {
    Src::Imm(v)
}

/// A register of the shaped pool.
fn sreg(r: &mut Rng) -> u8 {
    r.below(SHAPED as u32) as u8
}

/// An instruction computing a shaped register from shaped ones.
fn shaped_op(r: &mut Rng) -> Op {
    let (d, a, b) = (sreg(r), sreg(r), sreg(r));
    match r.below(12) {
        0 | 1 => bin(BinOp::Add, d, a, Src::Reg(Reg(b))),
        2 => bin(BinOp::Add, d, a, imm(r.below(64))),
        3 => bin(BinOp::Sub, d, a, Src::Reg(Reg(b))),
        4 => bin(BinOp::Mul, d, a, imm(r.pick(&[0, 1, 2, 3, 16, 64]))),
        5 => bin(BinOp::Shl, d, a, imm(r.below(5))),
        6 => Op::Tri {
            op: TriOp::Mad,
            d: Reg(d),
            a: Reg(a),
            b: Reg(b),
            c: Reg(sreg(r)),
        },
        7 => Op::Mov {
            d: Reg(d),
            b: Src::Reg(Reg(a)),
        },
        8 => Op::Mov {
            d: Reg(d),
            b: imm(r.below(100)),
        },
        9 => bin(
            r.pick(&[BinOp::Xor, BinOp::MaxU, BinOp::And]),
            d,
            a,
            Src::Reg(Reg(b)),
        ),
        10 => Op::S2r {
            d: Reg(d),
            sr: r.pick(&Special::ALL),
        },
        _ => bin(BinOp::Shl, d, a, imm(r.below(3))),
    }
}

/// `r20` = a lane's byte offset: a thread id times 4, possibly with a
/// row stride and a loop induction (`r29`).
fn address_offset(r: &mut Rng, v: &mut Vec<Instruction>, in_loop: bool) {
    let s = sreg(r);
    let t = r.pick(&[0u8, 1, 3, 2, s]);
    match r.below(5) {
        0 => v.push(u(bin(BinOp::Shl, 20, t, imm(2)))),
        1 => {
            // row * width + column
            v.push(u(Op::Mov {
                d: Reg(21),
                b: imm(r.pick(&[16, 32, 64])),
            }));
            v.push(u(Op::Tri {
                op: TriOp::Mad,
                d: Reg(20),
                a: Reg(2),
                b: Reg(21),
                c: Reg(t),
            }));
            v.push(u(bin(BinOp::Shl, 20, 20, imm(2))));
        }
        2 => v.push(u(bin(BinOp::Mul, 20, t, imm(r.pick(&[4, 8, 12]))))),
        3 => {
            // A row stride known only at run time (the warp index): the
            // halves' bases are unrelated; sometimes near wrapping.
            v.push(u(Op::Tri {
                op: TriOp::Mad,
                d: Reg(20),
                a: Reg(2),
                b: Reg(5),
                c: Reg(t),
            }));
            v.push(u(bin(BinOp::Shl, 20, 20, imm(2))));
            if r.coin(40) {
                v.push(u(bin(
                    BinOp::Add,
                    20,
                    20,
                    imm(r.pick(&[0xffff_ffc0, 0x7fff_fff0])),
                )));
            }
        }
        _ => {
            // Something that may wrap or run far: run-time checks fail.
            v.push(u(bin(BinOp::Shl, 20, t, imm(2))));
            v.push(u(bin(
                BinOp::Add,
                20,
                20,
                imm(r.pick(&[0xffff_fff0, 0x7fff_fffc, 0xfc00, 0x1_0000 - 64])),
            )));
        }
    }
    if in_loop && r.coin(60) {
        v.push(u(bin(BinOp::Add, 20, 20, Src::Reg(Reg(29)))));
    }
}

fn global_op(r: &mut Rng, v: &mut Vec<Instruction>, in_loop: bool) {
    address_offset(r, v, in_loop);
    let base = if r.coin(60) { 24 } else { 26 };
    if r.coin(50) {
        v.push(u(Op::Mov {
            d: Reg(21),
            b: imm(0),
        }));
        v.push(u(Op::Add64 {
            d: Reg(22),
            a: Reg(base),
            b: Src::Reg(Reg(20)),
        }));
    } else {
        v.push(u(Op::Mov {
            d: Reg(21),
            b: imm(r.pick(&[1, 4, 4, 8])),
        }));
        v.push(u(Op::MadWide {
            signed: r.coin(20),
            d: Reg(22),
            a: Reg(20),
            b: Reg(21),
            c: Reg(base),
        }));
    }
    let offset = r.pick(&[0, 0, 0, 4, -4, 64, 0x1_0000 - 128, 0x1_0000]);
    let data = 12 + r.below(8) as u8;
    let op = if r.coin(55) {
        Op::Ld {
            space: Space::Global,
            width: Width::B32,
            d: Reg(data),
            addr: Reg(22),
            offset,
        }
    } else {
        Op::St {
            space: Space::Global,
            width: Width::B32,
            addr: Reg(22),
            offset,
            v: Reg(if r.coin(50) { data } else { sreg(r) }),
        }
    };
    v.push(maybe_guarded(r, op));
}

fn shared_op(r: &mut Rng, v: &mut Vec<Instruction>, in_loop: bool) {
    address_offset(r, v, in_loop);
    let offset = r.pick(&[0, 0, 4, -4, 512, 1024]);
    let data = 12 + r.below(8) as u8;
    let op = if r.coin(50) {
        Op::Ld {
            space: Space::Shared,
            width: Width::B32,
            d: Reg(data),
            addr: Reg(20),
            offset,
        }
    } else {
        Op::St {
            space: Space::Shared,
            width: Width::B32,
            addr: Reg(20),
            offset,
            v: Reg(if r.coin(50) { data } else { sreg(r) }),
        }
    };
    v.push(maybe_guarded(r, op));
}

fn maybe_guarded(r: &mut Rng, op: Op) -> Instruction {
    if r.coin(80) {
        u(op)
    } else {
        Instruction {
            guard: Guard {
                pred: Pred(r.below(6) as u8),
                neg: r.coin(50),
            },
            op,
        }
    }
}

/// Work on loaded values and predicates.
fn other_op(r: &mut Rng, v: &mut Vec<Instruction>) {
    let mut t = || 12 + r.below(8) as u8;
    let (d, a, b) = (t(), t(), t());
    match r.below(8) {
        0 => v.push(u(Op::Tri {
            op: TriOp::FFma,
            d: Reg(d),
            a: Reg(a),
            b: Reg(b),
            c: Reg(d),
        })),
        1 => v.push(u(bin(r.pick(BinOp::ALL), d, a, Src::Reg(Reg(b))))),
        // A comparison of lane-dependent values: divergent.
        2 => v.push(u(Op::Setp {
            cmp: r.pick(&Cmp::ALL),
            ty: CmpType::U32,
            p: Pred(r.below(6) as u8),
            a: Reg(r.pick(&[1, 0, a])),
            b: imm(r.below(40)),
        })),
        // A comparison of uniform values.
        3 => v.push(u(Op::Setp {
            cmp: r.pick(&Cmp::ALL),
            ty: r.pick(&CmpType::ALL),
            p: Pred(r.below(6) as u8),
            a: Reg(r.pick(&[4, 5, 29, 28])),
            b: imm(r.below(8)),
        })),
        4 => v.push(u(Op::Plop {
            op: r.pick(&PredOp::ALL),
            p: Pred(r.below(6) as u8),
            a: Pred(r.below(7) as u8),
            na: r.coin(30),
            b: Pred(r.below(7) as u8),
            nb: r.coin(30),
        })),
        5 => {
            let op = shaped_op(r);
            v.push(maybe_guarded(r, op));
        }
        6 => v.push(u(Op::Sel {
            d: Reg(d),
            a: Reg(a),
            b: Src::Reg(Reg(sreg(r))),
            p: Pred(r.below(6) as u8),
            neg: false,
        })),
        _ => v.push(u(bin(BinOp::DivU, d, a, Src::Reg(Reg(sreg(r)))))),
    }
}

/// A random kernel of the kind described in the module comment.
pub(super) fn program(r: &mut Rng) -> Vec<Instruction> {
    let mut v = prologue();
    v.extend([
        u(Op::S2r {
            d: Reg(2),
            sr: Special::TidY,
        }),
        u(Op::S2r {
            d: Reg(3),
            sr: Special::GidX,
        }),
        u(Op::S2r {
            d: Reg(4),
            sr: Special::NtidX,
        }),
        u(Op::S2r {
            d: Reg(5),
            sr: Special::WarpId,
        }),
    ]);
    let mut in_loop: Option<usize> = None;
    let mut forward: Vec<(usize, u32)> = Vec::new();
    let n = 15 + r.below(45);
    for _ in 0..n {
        match r.below(20) {
            0..=3 => v.push(u(shaped_op(r))),
            4..=7 => global_op(r, &mut v, in_loop.is_some()),
            8..=10 => shared_op(r, &mut v, in_loop.is_some()),
            11..=13 => other_op(r, &mut v),
            14 => match in_loop {
                None => {
                    v.push(u(Op::Mov {
                        d: Reg(28),
                        b: imm(1 + r.below(5)),
                    }));
                    v.push(u(Op::Mov {
                        d: Reg(29),
                        b: imm(r.pick(&[0, 4, 64])),
                    }));
                    in_loop = Some(v.len());
                }
                Some(start) => {
                    v.push(u(bin(BinOp::Add, 29, 29, imm(r.pick(&[4, 16, 64])))));
                    v.push(u(bin(BinOp::Sub, 28, 28, imm(1))));
                    v.push(u(Op::Setp {
                        cmp: Cmp::Ne,
                        ty: CmpType::U32,
                        p: Pred(6),
                        a: Reg(28),
                        b: imm(0),
                    }));
                    let here = v.len() as i32;
                    v.push(Instruction {
                        guard: Guard {
                            pred: Pred(6),
                            neg: false,
                        },
                        op: Op::Bra {
                            offset: start as i32 - here,
                        },
                    });
                    in_loop = None;
                }
            },
            15 => {
                forward.push((v.len(), 1 + r.below(6)));
                v.push(maybe_guarded(r, Op::Bra { offset: 0 }));
            }
            16 if in_loop.is_none() => v.push(u(Op::Bar)),
            17 if r.coin(30) => v.push(Instruction {
                guard: Guard {
                    pred: Pred(r.below(6) as u8),
                    neg: r.coin(50),
                },
                op: Op::Exit,
            }),
            _ => v.push(u(shaped_op(r))),
        }
    }
    v.push(u(Op::Exit));
    let last = v.len() - 1;
    for (i, k) in forward {
        let t = (i + k as usize).min(last);
        v[i].op = Op::Bra {
            offset: (t - i) as i32,
        };
    }
    v
}

fn check_shaped(seed: u64) {
    let mut r = Rng::new(seed ^ 0x5eed_5a9e);
    let code = program(&mut r);
    let m = module_of(1 + r.below(2), code, 1024);
    let wg = r.pick(&[
        [16, 16, 1],
        [256, 1, 1],
        [32, 1, 1],
        [64, 2, 1],
        [8, 4, 1],
        [48, 2, 1],
        [96, 1, 1],
        [16, 4, 2],
        [37, 1, 1],
        [32, 3, 1],
    ]);
    check_module(m, wg, &mut r, seed);
}

#[test]
fn shaped_programs_match_the_interpreter() {
    if crate::jit::host_support().is_err() {
        return;
    }
    let first = env("VGPU_JIT_DIFF_SEED", 1);
    for seed in first..first + env("VGPU_JIT_DIFF_CASES", 100) {
        check_shaped(seed);
    }
}

/// A longer seeded run: `cargo test -p vgpu-isa --release -- --ignored`.
#[test]
#[ignore]
fn many_shaped_programs_match_the_interpreter() {
    if crate::jit::host_support().is_err() {
        return;
    }
    let first = env("VGPU_JIT_DIFF_SEED", 1_000_000);
    for seed in first..first + env("VGPU_JIT_DIFF_CASES", 5000) {
        check_shaped(seed);
    }
}
