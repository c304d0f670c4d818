//! Differential tests: random valid kernels run on the interpreter and on
//! the JIT in lock step, in random budget slices; after every `run` call
//! the outcome (faults with warp, lane, pc, VA and reason; traps),
//! the statistics, every warp's whole state (registers, predicates, pcs,
//! active group, live and blocked lanes, clock) and shared memory must be
//! equal, and global memory at the end. A third execution switches engine
//! at every slice (either engine resumes the other's state).
//!
//! `VGPU_JIT_DIFF_CASES=N` runs N programs instead of the quick default
//! (`VGPU_JIT_DIFF_SEED` picks the first seed).

use super::JitModule;
use crate::exec::{Launch, Limits, WorkgroupExec};
use crate::inst::*;
use crate::mem::{SparseMemory, PAGE_SIZE};
use crate::module::{Kernel, Module};
use std::sync::Arc;

mod carry;
mod chain;
mod fused;
mod params;
mod shaped;

struct Rng(vgpu_hwif::rng::SplitMix64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(vgpu_hwif::rng::SplitMix64::new(seed))
    }
    fn next(&mut self) -> u64 {
        self.0.next_u64()
    }
    fn below(&mut self, n: u32) -> u32 {
        (self.next() % n as u64) as u32
    }
    fn coin(&mut self, p_percent: u32) -> bool {
        self.below(100) < p_percent
    }
    fn pick<T: Copy>(&mut self, v: &[T]) -> T {
        v[self.below(v.len() as u32) as usize]
    }
}

const RW: u64 = 0x1_0000_0000;
const RO: u64 = RW + PAGE_SIZE;
/// Two writable pages across a 4 GiB boundary: addresses whose low words
/// wrap from lane to lane.
const WRAP: u64 = 0x2_0000_0000 - PAGE_SIZE;
/// Registers the random body writes; r20..r23 are address temporaries,
/// r24..r27 the buffer pairs, r28 the loop counter.
const BODY_REGS: u32 = 20;
const LOOP: u8 = 28;

fn reg(r: &mut Rng) -> Reg {
    Reg(r.below(BODY_REGS) as u8)
}
fn pair(r: &mut Rng) -> Reg {
    Reg(16 + 2 * r.below(2) as u8)
}
fn pred(r: &mut Rng) -> Pred {
    Pred(r.below(8) as u8)
}
fn imm(r: &mut Rng) -> u32 {
    match r.below(5) {
        0 => r.below(40),
        1 => (r.below(64) as i32 - 32) as u32,
        2 => r.next() as u32,
        3 => r.pick(&[
            0x7fc0_0000,
            0xff80_0000,
            0x8000_0000,
            0x7fff_ffff,
            0x3f80_0000,
        ]),
        _ => (r.below(2000) as f32 * 0.37 - 300.0).to_bits(),
    }
}
fn src(r: &mut Rng) -> Src {
    if r.coin(50) {
        Src::Reg(reg(r))
    } else {
        Src::Imm(imm(r))
    }
}
fn guard(r: &mut Rng) -> Guard {
    if r.coin(70) {
        Guard::ALWAYS
    } else {
        Guard {
            pred: Pred(r.below(7) as u8),
            neg: r.coin(50),
        }
    }
}
fn g(op: Op, r: &mut Rng) -> Instruction {
    Instruction {
        guard: guard(r),
        op,
    }
}
fn u(op: Op) -> Instruction {
    Instruction::new(op)
}

/// The start every random kernel shares: the two buffer addresses in
/// r24:r25 and r26:r27, `%tid.x` in r0 and the lane in r1.
fn prologue() -> Vec<Instruction> {
    vec![
        u(Op::Ldarg {
            d: Reg(24),
            wide: true,
            offset: 0,
        }),
        u(Op::Ldarg {
            d: Reg(26),
            wide: true,
            offset: 8,
        }),
        u(Op::S2r {
            d: Reg(0),
            sr: Special::TidX,
        }),
        u(Op::S2r {
            d: Reg(1),
            sr: Special::LaneId,
        }),
    ]
}

/// A random valid kernel body for generation `gen`.
fn program(r: &mut Rng, gen: u32) -> Vec<Instruction> {
    let mut v = prologue();
    // (index of a forward branch, distance wanted)
    let mut forward: Vec<(usize, u32)> = Vec::new();
    let n = 20 + r.below(60);
    let mut in_loop: Option<usize> = None;
    for _ in 0..n {
        match r.below(30) {
            k @ 0..=16 => {
                let op = lane_local(r, k);
                v.push(g(op, r));
            }
            17..=20 => global_access(r, &mut v),
            21 | 22 => shared_access(r, &mut v),
            23 => {
                forward.push((v.len(), 1 + r.below(8)));
                v.push(g(Op::Bra { offset: 0 }, r));
            }
            24 => loop_step(r, &mut v, &mut in_loop),
            25 => v.push(u(Op::Bar)),
            26 => end(r, &mut v),
            27 if gen >= 2 => {
                let op = cross_lane(r);
                v.push(g(op, r));
            }
            28 if r.coin(20) => {
                // A backward branch that may loop for ever (the budget
                // bounds the test).
                let back = r.below(v.len() as u32 - 3) as i32 + 1;
                v.push(g(Op::Bra { offset: -back }, r));
            }
            _ => v.push(g(
                Op::Bin {
                    op: BinOp::Add,
                    d: reg(r),
                    a: reg(r),
                    b: Src::Imm(imm(r)),
                },
                r,
            )),
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

/// A random lane-local instruction of kind `k` (0..=16 of `program`'s
/// draw).
fn lane_local(r: &mut Rng, k: u32) -> Op {
    match k {
        0..=7 => {
            let op = r.pick(BinOp::ALL);
            Op::Bin {
                op,
                d: reg(r),
                a: reg(r),
                b: src(r),
            }
        }
        8 => {
            let op = r.pick(UnOp::ALL);
            Op::Un {
                op,
                d: reg(r),
                a: reg(r),
            }
        }
        9 => {
            let op = r.pick(TriOp::ALL);
            Op::Tri {
                op,
                d: reg(r),
                a: reg(r),
                b: reg(r),
                c: reg(r),
            }
        }
        10 => {
            if r.coin(50) {
                Op::Add64 {
                    d: pair(r),
                    a: pair(r),
                    b: if r.coin(50) {
                        Src::Reg(pair(r))
                    } else {
                        Src::Imm(imm(r))
                    },
                }
            } else {
                Op::MadWide {
                    signed: r.coin(50),
                    d: pair(r),
                    a: reg(r),
                    b: reg(r),
                    c: pair(r),
                }
            }
        }
        11 => Op::Mov {
            d: reg(r),
            b: src(r),
        },
        12 => {
            let sr = r.pick(&Special::ALL);
            Op::S2r { d: reg(r), sr }
        }
        13 | 14 => Op::Setp {
            cmp: r.pick(&Cmp::ALL),
            ty: r.pick(&CmpType::ALL),
            p: pred(r),
            a: reg(r),
            b: src(r),
        },
        15 => Op::Plop {
            op: r.pick(&PredOp::ALL),
            p: pred(r),
            a: pred(r),
            na: r.coin(50),
            b: pred(r),
            nb: r.coin(50),
        },
        _ => Op::Sel {
            d: reg(r),
            a: reg(r),
            b: src(r),
            p: pred(r),
            neg: r.coin(50),
        },
    }
}

/// A loop's start (its counter set), or, inside one, its end: the
/// counter's decrement and the branch back.
fn loop_step(r: &mut Rng, v: &mut Vec<Instruction>, in_loop: &mut Option<usize>) {
    match *in_loop {
        None => {
            v.push(u(Op::Mov {
                d: Reg(LOOP),
                b: Src::Imm(1 + r.below(4)),
            }));
            *in_loop = Some(v.len());
        }
        Some(start) => {
            v.push(u(Op::Bin {
                op: BinOp::Sub,
                d: Reg(LOOP),
                a: Reg(LOOP),
                b: Src::Imm(1),
            }));
            let p = Pred(r.below(7) as u8);
            v.push(u(Op::Setp {
                cmp: Cmp::Ne,
                ty: CmpType::U32,
                p,
                a: Reg(LOOP),
                b: Src::Imm(0),
            }));
            let here = v.len() as i32;
            v.push(Instruction {
                guard: Guard {
                    pred: p,
                    neg: false,
                },
                op: Op::Bra {
                    offset: start as i32 - here,
                },
            });
            *in_loop = None;
        }
    }
}

/// An `exit`, a guarded `trap` or a `nop`.
fn end(r: &mut Rng, v: &mut Vec<Instruction>) {
    if r.coin(60) {
        v.push(g(Op::Exit, r));
    } else if r.coin(30) {
        v.push(Instruction {
            guard: Guard {
                pred: Pred(r.below(7) as u8),
                neg: r.coin(50),
            },
            op: Op::Trap { code: r.below(9) },
        });
    } else {
        v.push(u(Op::Nop));
    }
}

/// A random `shfl`, `vote` or `ballot`.
fn cross_lane(r: &mut Rng) -> Op {
    match r.below(3) {
        0 => Op::Shfl {
            mode: r.pick(ShflMode::ALL),
            d: reg(r),
            a: reg(r),
            b: src(r),
        },
        1 => Op::Vote {
            mode: r.pick(VoteMode::ALL),
            p: pred(r),
            src: pred(r),
            neg: r.coin(50),
        },
        _ => Op::Ballot {
            d: reg(r),
            src: pred(r),
            neg: r.coin(50),
        },
    }
}

fn global_access(r: &mut Rng, v: &mut Vec<Instruction>) {
    // r20 = offset, r21 = 0, d22 = base + offset.
    let base = if r.coin(80) { Reg(24) } else { Reg(26) };
    let consecutive = r.coin(50);
    let (mask, shift) = if consecutive {
        (0x3f, 2)
    } else {
        (r.pick(&[0xfc, 0x3ffc, 0xff, 0xfffc, 0x1fffc]), 0)
    };
    let from = if consecutive { Reg(1) } else { reg(r) };
    v.push(u(Op::Bin {
        op: BinOp::And,
        d: Reg(20),
        a: from,
        b: Src::Imm(mask),
    }));
    v.push(u(Op::Bin {
        op: BinOp::Shl,
        d: Reg(20),
        a: Reg(20),
        b: Src::Imm(shift),
    }));
    v.push(u(Op::Mov {
        d: Reg(21),
        b: Src::Imm(0),
    }));
    v.push(u(Op::Add64 {
        d: Reg(22),
        a: base,
        b: Src::Reg(Reg(20)),
    }));
    let offset = r.pick(&[0, 0, 0, 4, 8, -4, 64, 4096]);
    let op = match r.below(6) {
        0 | 1 => Op::Ld {
            space: Space::Global,
            width: if r.coin(70) {
                Width::B32
            } else {
                r.pick(&Width::ALL)
            },
            d: if r.coin(80) { reg(r) } else { pair(r) },
            addr: Reg(22),
            offset,
        },
        2 | 3 => Op::St {
            space: Space::Global,
            width: if r.coin(70) {
                Width::B32
            } else {
                r.pick(&[Width::U8, Width::U16, Width::B64])
            },
            addr: Reg(22),
            offset,
            v: if r.coin(80) { reg(r) } else { pair(r) },
        },
        _ => Op::Atom {
            space: Space::Global,
            op: r.pick(&AtomOp::ALL),
            d: reg(r),
            addr: Reg(22),
            offset,
            b: reg(r),
            c: reg(r),
        },
    };
    let op = match op {
        Op::Ld {
            width: Width::B64,
            space,
            addr,
            offset,
            ..
        } => Op::Ld {
            width: Width::B64,
            space,
            addr,
            offset,
            d: pair(r),
        },
        Op::St {
            width: Width::B64,
            space,
            addr,
            offset,
            ..
        } => Op::St {
            width: Width::B64,
            space,
            addr,
            offset,
            v: pair(r),
        },
        o => o,
    };
    v.push(g(fix_atom(op), r));
}

/// `c` of an atomic other than `cas` is `r0`.
fn fix_atom(op: Op) -> Op {
    match op {
        Op::Atom {
            space,
            op,
            d,
            addr,
            offset,
            b,
            ..
        } if op != AtomOp::Cas => Op::Atom {
            space,
            op,
            d,
            addr,
            offset,
            b,
            c: Reg(0),
        },
        o => o,
    }
}

fn shared_access(r: &mut Rng, v: &mut Vec<Instruction>) {
    let mask = r.pick(&[0xfc, 0xfc, 0x3c, 0xff, 0x1fc]);
    let from = if r.coin(40) { Reg(1) } else { reg(r) };
    v.push(u(Op::Bin {
        op: BinOp::And,
        d: Reg(20),
        a: from,
        b: Src::Imm(mask),
    }));
    let offset = r.pick(&[0, 0, 4, -4, 128]);
    let op = match r.below(5) {
        0 | 1 => Op::Ld {
            space: Space::Shared,
            width: if r.coin(70) {
                Width::B32
            } else {
                r.pick(&[Width::U8, Width::S8, Width::U16, Width::S16])
            },
            d: reg(r),
            addr: Reg(20),
            offset,
        },
        2 | 3 => Op::St {
            space: Space::Shared,
            width: if r.coin(70) {
                Width::B32
            } else {
                r.pick(&[Width::U8, Width::U16])
            },
            addr: Reg(20),
            offset,
            v: reg(r),
        },
        _ => Op::Atom {
            space: Space::Shared,
            op: r.pick(&AtomOp::ALL),
            d: reg(r),
            addr: Reg(20),
            offset,
            b: reg(r),
            c: reg(r),
        },
    };
    v.push(g(fix_atom(op), r));
}

/// The module of a random program, through the encoder and the loader.
fn module(r: &mut Rng) -> Module {
    let gen = 1 + r.below(2);
    let code = program(r, gen);
    module_of(gen, code, 256)
}

/// The module of kernel `code` (32 registers, `shared` bytes of shared
/// memory, two 64-bit arguments), through the encoder and the loader.
fn module_of(gen: u32, code: Vec<Instruction>, shared: u32) -> Module {
    let k = Kernel {
        name: "k".into(),
        entry: 0,
        len: code.len() as u32,
        regs: 32,
        shared_bytes: shared,
        arg_size: 16,
        args: Vec::new(),
        wg_hint: [0, 0, 0],
    };
    let m = Module::new(gen, code, vec![k]).expect("a valid module");
    let bytes = m.to_bytes().expect("encodes");
    Module::load(&bytes, 2).expect("loads")
}

fn memory(seed: u64) -> SparseMemory {
    let mut m = SparseMemory::new();
    m.map(RW, PAGE_SIZE, true);
    m.map(RO, PAGE_SIZE, false);
    m.map(WRAP, 2 * PAGE_SIZE, true);
    let mut r = Rng::new(seed);
    let words: Vec<u32> = (0..PAGE_SIZE / 4).map(|_| r.next() as u32).collect();
    m.write_u32s(RW, &words).unwrap();
    m.write_u32s(RO, &words).unwrap();
    m.write_u32s(WRAP, &words).unwrap();
    m.write_u32s(WRAP + PAGE_SIZE, &words).unwrap();
    m
}

/// The state of every warp of `e` and its shared memory. A register's
/// value in a lane is shown only where it can still be seen: the lane has
/// not exited and the register is live at the lane's pc (`live`, from
/// `regflow::live_in` for the kernel starting at `entry`); the JIT does not
/// write back values no lane reads again.
fn dump(e: &WorkgroupExec<'_>, live: &[u64], entry: u32) -> String {
    let mut s = String::new();
    for (i, w) in e.warps().iter().enumerate() {
        s += &format!(
            "warp {i}: pc {} active {:#x} live {:#x} blocked {:#x} next_min {} clock {} preds {:x?}\n lane_pc {:?}\n",
            w.pc, w.active, w.live, w.blocked, w.next_min, w.clock, w.preds, w.lane_pc
        );
        let seen = |l: usize, r: usize| {
            let pc = if w.active >> l & 1 != 0 {
                w.pc
            } else {
                w.lane_pc[l]
            };
            let at = pc
                .checked_sub(entry)
                .and_then(|x| live.get(x as usize))
                .copied()
                .unwrap_or(u64::MAX);
            w.live >> l & 1 != 0 && (r >= 64 || at >> r & 1 != 0)
        };
        for (r, v) in w.regs.iter().enumerate() {
            let shown: Vec<Option<u32>> =
                (0..WARP_SIZE).map(|l| seen(l, r).then_some(v[l])).collect();
            s += &format!(" r{r} {shown:x?}\n");
        }
    }
    s += &format!("shared {:x?}\n", e.shared());
    s
}

fn check_case(seed: u64) {
    let mut r = Rng::new(seed);
    let m = module(&mut r);
    let wg = r.pick(&[
        [32, 1, 1],
        [64, 1, 1],
        [37, 1, 1],
        [8, 4, 2],
        [16, 3, 1],
        [96, 1, 1],
        [1, 1, 1],
    ]);
    check_module(m, wg, &mut r, seed);
}

/// Runs two workgroups of shape `wg` of kernel 0 of `m` on both engines
/// and alternating between them, in random slices (from `r`), comparing
/// everything (see the module comment).
fn check_module(m: Module, wg: [u32; 3], r: &mut Rng, seed: u64) {
    let m = Arc::new(m);
    let jit = JitModule::compile(&m).expect("host supports the JIT");
    let code = Arc::clone(jit.kernel(0).expect("every valid kernel compiles"));
    let mut args = Vec::new();
    args.extend_from_slice(&RW.to_le_bytes());
    let other = match r.below(3) {
        0 => RO,
        1 => RO + PAGE_SIZE,
        // Lanes' addresses cross 4 GiB.
        _ => WRAP + PAGE_SIZE - 64,
    };
    args.extend_from_slice(&other.to_le_bytes());
    let launch = Arc::new(Launch::by_index(&m, 0, [2, 1, 1], wg, args, 0).unwrap());
    let k0 = &m.kernels()[0];
    let entry = k0.entry;
    let live = crate::regflow::live_in(m.code(), k0.entry, k0.len, k0.regs as usize)
        .unwrap_or_else(|| vec![u64::MAX; k0.len as usize]);
    let mem_seed = r.next();
    let (mi, mj, mx) = (memory(mem_seed), memory(mem_seed), memory(mem_seed));
    for wgid in 0..2u32 {
        let mk = || {
            WorkgroupExec::new_shared(Arc::clone(&m), Arc::clone(&launch), [wgid, 0, 0]).unwrap()
        };
        let (mut ei, mut ej, mut ex) = (mk(), mk(), mk());
        assert!(ej.set_jit(Some(Arc::clone(&code))));
        let mut total = 0u64;
        let mut turn = false;
        loop {
            let budget = match r.below(4) {
                0 => 1 + r.below(5) as u64,
                1 => 1 + r.below(100) as u64,
                _ => 1 + r.below(3000) as u64,
            };
            let lim = Limits {
                budget,
                cancel: None,
            };
            let a = ei.run(&mi, lim);
            let b = ej.run(&mj, lim);
            turn = !turn;
            ex.set_jit(turn.then(|| Arc::clone(&code)));
            let c = ex.run(&mx, lim);
            let ctx = || {
                format!(
                    "seed {seed} wg {wgid} after {total}+{budget}:\n{}",
                    crate::disassemble(&m)
                )
            };
            assert_eq!(a, b, "outcome, {}", ctx());
            assert_eq!(a, c, "outcome (engines alternating), {}", ctx());
            assert_eq!(ei.stats(), ej.stats(), "stats, {}", ctx());
            assert_eq!(ei.stats(), ex.stats(), "stats (alternating), {}", ctx());
            let (si, sj, sx) = (
                dump(&ei, &live, entry),
                dump(&ej, &live, entry),
                dump(&ex, &live, entry),
            );
            if si != sj || si != sx {
                let diff: Vec<_> = si
                    .lines()
                    .zip(sj.lines())
                    .filter(|(x, y)| x != y)
                    .take(8)
                    .collect();
                panic!("state differs ({diff:#?}), {}", ctx());
            }
            total += budget;
            if a != Ok(crate::Outcome::Preempted) || total > 6_000 {
                break;
            }
        }
    }
    let all = |m: &SparseMemory| {
        let mut v = m.read_u32s(RW, (PAGE_SIZE / 4) as usize).unwrap();
        v.extend(m.read_u32s(RO, (PAGE_SIZE / 4) as usize).unwrap());
        v.extend(m.read_u32s(WRAP, (2 * PAGE_SIZE / 4) as usize).unwrap());
        v
    };
    assert_eq!(all(&mi), all(&mj), "memory, seed {seed}");
    assert_eq!(all(&mi), all(&mx), "memory (alternating), seed {seed}");
}

/// Checks `m` (kernel 0, workgroups of 64 threads) on both engines with
/// `seeds` (`check_module`), after asserting that its code for that shape
/// has what the test is about (`has`, described by `what`).
fn check_compiled(
    m: Module,
    seeds: std::ops::Range<u64>,
    has: impl Fn(&super::Native) -> bool,
    what: &str,
) {
    if super::host_support().is_err() {
        return;
    }
    let jit = JitModule::compile(&m).expect("compiles");
    let code = Arc::clone(jit.kernel(0).expect("compiles")).for_shape([64, 1, 1]);
    assert!(
        has(&code.native),
        "no {what} in\n{}",
        crate::disassemble(&m)
    );
    for seed in seeds {
        check_module(m.clone(), [64, 1, 1], &mut Rng::new(seed), seed);
    }
}

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn random_programs_match_the_interpreter() {
    if super::host_support().is_err() {
        return;
    }
    let first = env("VGPU_JIT_DIFF_SEED", 1);
    let n = env("VGPU_JIT_DIFF_CASES", 100);
    for seed in first..first + n {
        check_case(seed);
    }
}

/// A workgroup started on the state of a finished one keeps that one's
/// values in the registers its kernel writes before reading them (only the
/// others are cleared: `regflow::zeroed_at_entry`). For random programs, on
/// the interpreter and on the JIT, it must do exactly what it does on a
/// fresh state: same outcome, statistics and memory.
#[test]
fn a_reused_workgroup_state_behaves_like_a_fresh_one() {
    if super::host_support().is_err() {
        return;
    }
    let first = env("VGPU_JIT_DIFF_SEED", 1);
    for seed in first..first + env("VGPU_JIT_DIFF_CASES", 100) {
        let mut r = Rng::new(seed ^ 0x5eed);
        let m = Arc::new(module(&mut r));
        let jit = JitModule::compile(&m).expect("host supports the JIT");
        let code = Arc::clone(jit.kernel(0).expect("every valid kernel compiles"));
        let mut args = Vec::new();
        args.extend_from_slice(&RW.to_le_bytes());
        args.extend_from_slice(&RO.to_le_bytes());
        let wg = r.pick(&[[32, 1, 1], [64, 1, 1], [37, 1, 1]]);
        let launch = Arc::new(Launch::by_index(&m, 0, [2, 1, 1], wg, args, 0).unwrap());
        let lim = Limits {
            budget: 20_000,
            cancel: None,
        };
        let mem_seed = r.next();
        for native in [false, true] {
            let mk = |w: u32| {
                let mut e =
                    WorkgroupExec::new_shared(Arc::clone(&m), Arc::clone(&launch), [w, 0, 0])
                        .unwrap();
                assert!(e.set_jit(native.then(|| Arc::clone(&code))));
                e
            };
            // Workgroup 1 on its own memory, then workgroup 0 on the same
            // state; and workgroup 0 on a fresh state.
            let (scratch, reused_mem, fresh_mem) =
                (memory(mem_seed), memory(mem_seed), memory(mem_seed));
            let mut reused = mk(1);
            let _ = reused.run(&scratch, lim);
            reused.reset([0, 0, 0]).unwrap();
            let a = reused.run(&reused_mem, lim);
            let mut fresh = mk(0);
            let b = fresh.run(&fresh_mem, lim);
            let ctx = || format!("seed {seed} jit {native}:\n{}", crate::disassemble(&m));
            assert_eq!(a, b, "outcome, {}", ctx());
            assert_eq!(reused.stats(), fresh.stats(), "stats, {}", ctx());
            let all = |m: &SparseMemory| m.read_u32s(RW, (PAGE_SIZE / 4) as usize).unwrap();
            assert_eq!(all(&reused_mem), all(&fresh_mem), "memory, {}", ctx());
        }
    }
}

/// A longer seeded run: `cargo test -p vgpu-isa --release -- --ignored`.
#[test]
#[ignore]
fn many_random_programs_match_the_interpreter() {
    if super::host_support().is_err() {
        return;
    }
    let first = env("VGPU_JIT_DIFF_SEED", 1_000_000);
    for seed in first..first + env("VGPU_JIT_DIFF_CASES", 5000) {
        check_case(seed);
    }
}

#[test]
fn every_random_valid_program_compiles() {
    if super::host_support().is_err() {
        return;
    }
    let mut r = Rng::new(77);
    for _ in 0..200 {
        let m = module(&mut r);
        let j = JitModule::compile(&m).unwrap();
        assert!(
            j.kernel(0).is_ok(),
            "{:?}",
            j.fallbacks().collect::<Vec<_>>()
        );
    }
}

/// A kernel's code specialised for workgroup shapes goes with the module:
/// nothing keeps the kernel's source alive once every user dropped it (a
/// cycle through the shape cache leaked it, which the fuzz targets'
/// LeakSanitizer caught).
#[test]
fn shaped_code_is_freed_with_its_module() {
    if super::host_support().is_err() {
        return;
    }
    let mut r = Rng::new(78);
    let m = module(&mut r);
    let j = JitModule::compile(&m).unwrap();
    let k = Arc::clone(j.kernel(0).unwrap());
    let a = k.for_shape([32, 1, 1]);
    let b = k.for_shape([32, 1, 1]);
    assert!(Arc::ptr_eq(&a.native, &b.native), "one compile per shape");
    let c = k.for_shape([7, 2, 1]);
    assert!(!Arc::ptr_eq(&a.native, &c.native));
    let source = Arc::downgrade(&k.source);
    let native = Arc::downgrade(&a.native);
    drop((j, k, a, b, c));
    assert!(
        source.upgrade().is_none(),
        "the kernel's source outlived it"
    );
    assert!(
        native.upgrade().is_none(),
        "shaped code outlived its kernel"
    );
}

/// Assembles `src` (kernel `k`, generation 2) for `check_module`.
fn assembled(src: &str) -> Module {
    let m = crate::assemble(src, 2).expect("assembles");
    let bytes = m.to_bytes().expect("encodes");
    Module::load(&bytes, 2).expect("loads")
}

/// fp32 results whose canonicalisation the code generator leaves out
/// (`analysis::canon_needed`: read only as fp32 operands, then
/// overwritten) next to ones it must keep (read as bits, overwritten
/// under a guard, written back), with NaNs of every origin (payloads,
/// invalid operations), and `fmin`/`fmax` over every pairing of ±0, a
/// NaN and numbers, lane by lane: bit for bit on both engines.
#[test]
fn nan_results_and_left_out_canonicalisations_match_the_interpreter() {
    if super::host_support().is_err() {
        return;
    }
    let m = assembled(
        r"
.kernel k
.arg a ptr
.arg b ptr
    s2r     r1, %laneid
    and     r20, r1, 1
    setp.ne.u32 p1, r20, 0
    and     r20, r1, 2
    setp.ne.u32 p2, r20, 0
    and     r20, r1, 4
    setp.ne.u32 p3, r20, 0
    and     r20, r1, 8
    setp.ne.u32 p4, r20, 0
    mov     r2, 0x7fa00001          // a signalling NaN with a payload
    mov     r3, 0x7f800000          // +inf
    mov     r4, 0.0
    mov     r21, 0x80000000         // -0
    sel     r2, r2, r21, p1         // NaN or -0, by lane
    sel     r4, r4, 1.5, p2
    fadd    r5, r2, 1.0             // left out: read as fp32, overwritten
    fmul    r5, r5, 2.0             // kept: written back
    fmul    r6, r3, r4              // inf * 0: the host's default NaN
    mov     r7, r6                  // kept: read as bits
    fadd    r8, r2, r4
    setp.eq.u32 p0, r8, r8          // kept: compared as bits
    fadd    r9, r2, r4
    @p3 fmul r9, r9, 1.0            // kept: overwritten in some lanes only
    fsub    r10, r2, r4             // left out
    fmin    r11, r10, r4
    fmax    r12, r10, r2
    setp.lt.f32 p5, r10, r4
    mov     r10, 5
    ffma    r13, r2, r4, r3         // left out
    ffma    r13, r13, r4, r4        // kept
    sqrt    r14, r2
    rcp     r15, r2
    cvt.s32.f32 r16, r2
    sub     r17, r3, 1              // the largest finite
    sel     r17, r17, r21, p3
    sel     r18, r2, 0.0, p4
    fmin    r22, r17, r18
    fmax    r23, r17, r18
    fmin    r24, r18, r17
    fmax    r25, r18, r17
    fmin    r26, r2, r2
    fmax    r27, r21, r4
    fmin    r28, r4, r21
    exit
.end
",
    );
    let mut r = Rng::new(5);
    check_module(m, [64, 1, 1], &mut r, 5);
}

#[test]
fn jit_modes_parse_by_name_and_name_what_they_refuse() {
    use super::{JitMode, JitModeError};
    for mode in [JitMode::Off, JitMode::Auto, JitMode::On] {
        assert_eq!(mode.name().parse::<JitMode>(), Ok(mode));
    }
    let e = "fast".parse::<JitMode>().unwrap_err();
    assert_eq!(e, JitModeError("fast".into()));
    assert_eq!(e.to_string(), "'fast' is not off, on or auto");
}

/// `get_or_start` compiles on a thread of its own: the first look-up
/// answers at once with the compilation, the same image asked again joins
/// it (one compilation), and once it finished the module comes from the
/// cache; another image is compiled of its own.
#[test]
fn a_module_is_compiled_once_in_the_background() {
    use super::{JitCache, JitMode, Lookup};
    if super::host_support().is_err() {
        return;
    }
    let mut r = Rng::new(7);
    let m = Arc::new(module(&mut r));
    let image = m.to_bytes().expect("encodes");
    let cache = JitCache::new(4);
    let Ok(Lookup::Compiling(c)) = cache.get_or_start(&image, &m, JitMode::Auto) else {
        panic!("the first look-up compiles in the background");
    };
    match cache.get_or_start(&image, &m, JitMode::Auto) {
        Ok(Lookup::Compiling(c2)) => assert!(Arc::ptr_eq(&c, &c2), "joins the running compilation"),
        Ok(Lookup::Ready(_)) => assert!(c.result().is_some(), "ready only once compiled"),
        Ok(Lookup::Busy) => panic!("one compilation running is below the bound"),
        Err(e) => panic!("{e}"),
    }
    let t0 = std::time::Instant::now();
    while c.result().is_none() {
        assert!(
            t0.elapsed().as_secs() < 60,
            "the compilation never finished"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let Ok(Lookup::Ready(done)) = cache.get_or_start(&image, &m, JitMode::Auto) else {
        panic!("a finished compilation is in the cache");
    };
    assert_eq!(cache.compiled(), 1);
    assert!(Arc::ptr_eq(&done, c.result().unwrap().as_ref().unwrap()));
    let Ok(Lookup::Ready(again)) = cache.get_or_start(&image, &m, JitMode::Auto) else {
        panic!("cached");
    };
    assert!(Arc::ptr_eq(&done, &again));
    // A different module: a compilation of its own.
    let mut code = prologue();
    code.push(u(Op::Exit));
    let other = Arc::new(module_of(2, code, 0));
    let other_image = other.to_bytes().expect("encodes");
    assert_ne!(other_image, image);
    assert!(matches!(
        cache.get_or_start(&other_image, &other, JitMode::Auto),
        Ok(Lookup::Compiling(_))
    ));
}

/// At most `MAX_COMPILING` compilations run at once: a module asked for
/// beyond them runs on the interpreter (`Busy`) and starts no thread.
#[test]
fn compilations_at_once_are_bounded() {
    use super::{JitCache, JitMode, Lookup, MAX_COMPILING};
    if super::host_support().is_err() {
        return;
    }
    let cache = JitCache::new(8);
    let mut r = Rng::new(11);
    let mut started = Vec::new();
    let mut busy = 0;
    for _ in 0..MAX_COMPILING + 3 {
        let m = Arc::new(module(&mut r));
        let image = m.to_bytes().expect("encodes");
        match cache.get_or_start(&image, &m, JitMode::Auto) {
            Ok(Lookup::Compiling(c)) => started.push(c),
            Ok(Lookup::Busy) => busy += 1,
            Ok(Lookup::Ready(_)) => panic!("a module never seen is not ready"),
            Err(e) => panic!("{e}"),
        }
        // Never more running than the bound.
        let running = started.iter().filter(|c| c.result().is_none()).count();
        assert!(running <= MAX_COMPILING, "{running} compilations at once");
    }
    // Busy only when the bound was reached by compilations still running.
    assert!(started.len() >= MAX_COMPILING || busy == 0);
    assert_eq!(started.len() + busy, MAX_COMPILING + 3);
}
