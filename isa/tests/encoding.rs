//! Property tests of the encoding and the text syntax: random instructions
//! round-trip through encode/decode and through disassemble/assemble, and
//! random words either decode to something that re-encodes to the same word
//! or are rejected.

mod common;
use common::Rng;
use vgpu_isa::asm::parse_line;
use vgpu_isa::*;

fn reg(r: &mut Rng) -> Reg {
    Reg(r.range(0, 64) as u8)
}
fn pair(r: &mut Rng) -> Reg {
    Reg(r.range(0, 32) as u8 * 2)
}
fn pred(r: &mut Rng) -> Pred {
    Pred(r.range(0, 8) as u8)
}
fn coin(r: &mut Rng) -> bool {
    r.next_u32() & 1 == 1
}
fn imm(r: &mut Rng) -> u32 {
    match r.range(0, 4) {
        0 => r.range(0, 100),
        1 => (r.range(0, 100) as i32 - 50) as u32,
        2 => r.next_u32(),
        _ => [
            0x7fc0_0000,
            0xff80_0000,
            0x8000_0000,
            0x7fff_ffff,
            0x0000_0001,
        ][r.range(0, 5) as usize],
    }
}
fn src(r: &mut Rng) -> Src {
    if coin(r) {
        Src::Reg(reg(r))
    } else {
        Src::Imm(imm(r))
    }
}
fn offset(r: &mut Rng) -> i32 {
    match r.range(0, 3) {
        0 => 0,
        1 => r.range(0, 64) as i32 * 4 - 128,
        _ => r.range(0, 1 << 20) as i32 - (1 << 19),
    }
}
fn space(r: &mut Rng) -> Space {
    if coin(r) {
        Space::Global
    } else {
        Space::Shared
    }
}
fn addr(r: &mut Rng, s: Space) -> Reg {
    if s == Space::Global {
        pair(r)
    } else {
        reg(r)
    }
}

/// A random valid instruction (any generation).
pub fn random_instruction(r: &mut Rng) -> Instruction {
    let guard = if coin(r) {
        Guard::ALWAYS
    } else {
        Guard {
            pred: pred(r),
            neg: coin(r),
        }
    };
    let op = match r.range(0, 22) {
        0 => [Op::Nop, Op::Exit, Op::Bar][r.range(0, 3) as usize],
        1 => Op::Trap { code: imm(r) },
        2 => Op::Bra {
            offset: imm(r) as i32,
        },
        3 => Op::Mov {
            d: reg(r),
            b: src(r),
        },
        4 => Op::S2r {
            d: reg(r),
            sr: Special::ALL[r.range(0, Special::ALL.len() as u32) as usize],
        },
        5 => {
            let wide = coin(r);
            Op::Ldarg {
                d: if wide { pair(r) } else { reg(r) },
                wide,
                offset: r.range(0, 1024) * 4,
            }
        }
        6 => Op::Sel {
            d: reg(r),
            a: reg(r),
            b: src(r),
            p: pred(r),
            neg: coin(r),
        },
        7 | 8 => Op::Bin {
            op: BinOp::ALL[r.range(0, BinOp::ALL.len() as u32) as usize],
            d: reg(r),
            a: reg(r),
            b: src(r),
        },
        9 => Op::Un {
            op: UnOp::ALL[r.range(0, UnOp::ALL.len() as u32) as usize],
            d: reg(r),
            a: reg(r),
        },
        10 => Op::Tri {
            op: TriOp::ALL[r.range(0, 2) as usize],
            d: reg(r),
            a: reg(r),
            b: reg(r),
            c: reg(r),
        },
        11 => Op::Add64 {
            d: pair(r),
            a: pair(r),
            b: if coin(r) {
                Src::Reg(pair(r))
            } else {
                Src::Imm(imm(r))
            },
        },
        12 => Op::MadWide {
            signed: coin(r),
            d: pair(r),
            a: reg(r),
            b: reg(r),
            c: pair(r),
        },
        13 => Op::Setp {
            cmp: Cmp::ALL[r.range(0, 6) as usize],
            ty: CmpType::ALL[r.range(0, 3) as usize],
            p: pred(r),
            a: reg(r),
            b: src(r),
        },
        14 => Op::Plop {
            op: PredOp::ALL[r.range(0, 3) as usize],
            p: pred(r),
            a: pred(r),
            na: coin(r),
            b: pred(r),
            nb: coin(r),
        },
        15 => {
            let s = space(r);
            let width = Width::ALL[r.range(0, 6) as usize];
            Op::Ld {
                space: s,
                width,
                d: if width == Width::B64 { pair(r) } else { reg(r) },
                addr: addr(r, s),
                offset: offset(r),
            }
        }
        16 => {
            let s = space(r);
            let width = [Width::U8, Width::U16, Width::B32, Width::B64][r.range(0, 4) as usize];
            Op::St {
                space: s,
                width,
                addr: addr(r, s),
                offset: offset(r),
                v: if width == Width::B64 { pair(r) } else { reg(r) },
            }
        }
        17 => {
            let s = space(r);
            let op = AtomOp::ALL[r.range(0, 10) as usize];
            Op::Atom {
                space: s,
                op,
                d: reg(r),
                addr: addr(r, s),
                offset: offset(r),
                b: reg(r),
                c: if op == AtomOp::Cas { reg(r) } else { Reg(0) },
            }
        }
        18 => Op::Shfl {
            mode: ShflMode::ALL[r.range(0, 4) as usize],
            d: reg(r),
            a: reg(r),
            b: src(r),
        },
        19 => Op::Vote {
            mode: VoteMode::ALL[r.range(0, 2) as usize],
            p: pred(r),
            src: pred(r),
            neg: coin(r),
        },
        20 => Op::Ballot {
            d: reg(r),
            src: pred(r),
            neg: coin(r),
        },
        _ => Op::Bin {
            op: BinOp::FMul,
            d: reg(r),
            a: reg(r),
            b: Src::Imm(r.f32().to_bits()),
        },
    };
    Instruction { guard, op }
}

#[test]
fn random_instructions_round_trip_through_the_encoding() {
    let mut r = Rng::new(10);
    for _ in 0..20_000 {
        let inst = random_instruction(&mut r);
        let w = encode(&inst).unwrap_or_else(|e| panic!("{inst:?}: {e}"));
        assert_eq!(decode(w, 2), Ok(inst), "word {w:#018x}");
        let g1 = decode(w, 1);
        if inst.op.min_generation() == 2 {
            assert!(
                matches!(
                    g1,
                    Err(InstError::NotInGeneration {
                        need: 2,
                        gen: 1,
                        ..
                    })
                ),
                "{inst:?} decoded in generation 1: {g1:?}"
            );
        } else {
            assert_eq!(g1, Ok(inst));
        }
    }
}

#[test]
fn random_instructions_round_trip_through_the_text_syntax() {
    let mut r = Rng::new(11);
    for _ in 0..20_000 {
        let inst = random_instruction(&mut r);
        let text = disassemble_instruction(&inst);
        let back = parse_line(&text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
        assert_eq!(back, inst, "{text}");
    }
}

#[test]
fn random_words_decode_exactly_or_are_rejected() {
    let mut r = Rng::new(12);
    let mut accepted = 0;
    for i in 0..200_000u32 {
        // Mix fully random words with random fields on valid opcodes.
        let mut w = r.next_u64();
        if i % 2 == 0 {
            w &= !0xff;
            w |= [0x10u64, 0x36, 0x41, 0x48, 0x50, 0x54, 0x0b, 0x04][(i / 2 % 8) as usize];
            w &= !(0xffu64 << 24) | (r.range(0, 256) as u64 & 0x8f) << 24;
        }
        if let Ok(inst) = decode(w, 2) {
            accepted += 1;
            assert_eq!(encode(&inst), Ok(w), "{inst:?}");
        }
    }
    assert!(
        accepted > 1000,
        "the generator should hit valid words ({accepted})"
    );
}

#[test]
fn specific_decode_errors_are_precise() {
    let exit = encode(&Instruction::new(Op::Exit)).unwrap();
    assert_eq!(decode(0xff, 1), Err(InstError::UnknownOpcode(0xff)));
    assert_eq!(
        decode(exit | 1 << 40, 1),
        Err(InstError::ReservedBits(1 << 40))
    );
    // ld.64 into an odd register.
    let ld = 0x50 | 3 << 8 | 2 << 14 | 7 << 20 | 5 << 24;
    assert_eq!(decode(ld, 1), Err(InstError::OddPair(3)));
    // setp with destination predicate index 9.
    let setp = 0x48 | 9 << 8 | 7 << 20;
    assert_eq!(decode(setp, 1), Err(InstError::BadPredicate(9)));
    // s2r of special register 99.
    let s2r = 0x09 | 7 << 20 | 99u64 << 32;
    assert_eq!(decode(s2r, 1), Err(InstError::BadSpecial(99)));
    // ld with width 7.
    let ldw = 0x50 | 2 << 14 | 7 << 20 | 7 << 24;
    assert!(matches!(
        decode(ldw, 1),
        Err(InstError::BadModifier {
            opcode: 0x50,
            modifier: 7
        })
    ));
    // A sign-extending store.
    let st = 0x51 | 2 << 14 | 7 << 20 | 1 << 24;
    assert!(matches!(decode(st, 1), Err(InstError::BadModifier { .. })));
    // shfl in generation 1.
    let shfl = 0x60 | 7 << 20;
    assert_eq!(
        decode(shfl, 1),
        Err(InstError::NotInGeneration {
            opcode: 0x60,
            need: 2,
            gen: 1
        })
    );
    assert!(decode(shfl, 2).is_ok());
}

#[test]
fn assembler_errors_name_the_line() {
    let cases = [
        (
            ".kernel k\n    add r1, r2\n    exit\n",
            2,
            "takes 3 operands",
        ),
        (".kernel k\n    add r64, r2, r3\n    exit\n", 2, "r0..r63"),
        (".kernel k\n    ld.32 r1, [d3]\n    exit\n", 2, "pair"),
        (".kernel k\n    bra nowhere\n", 2, "undefined label"),
        (
            ".kernel k\n    frob r1\n    exit\n",
            2,
            "unknown instruction",
        ),
        (
            ".kernel k\n    ld.32 r1, [d2+600000]\n    exit\n",
            2,
            "memory offset",
        ),
        ("    exit\n", 1, "outside a .kernel"),
        (".kernel k\nx:\nx:\n    exit\n", 3, "defined twice"),
        (
            ".kernel k\n    ldarg r1, [nope]\n    exit\n",
            2,
            "unknown argument",
        ),
        (
            ".kernel k\n    shfl.idx r1, r2, 3\n    exit\n",
            2,
            "needs generation 2",
        ),
    ];
    for (src, line, what) in cases {
        match assemble(src, 1) {
            Err(AsmError::Syntax { line: l, msg }) => {
                assert_eq!(l, line, "{src:?}: {msg}");
                assert!(msg.contains(what), "{src:?}: {msg}");
            }
            other => panic!("{src:?}: {other:?}"),
        }
    }
    // Module-level problems come back as module errors.
    let e = assemble(".kernel k\n    nop\n", 1).unwrap_err();
    assert!(
        matches!(e, AsmError::Module(ModuleError::FallsOffEnd { .. })),
        "{e}"
    );
}

#[test]
fn assembler_survives_mangled_sources() {
    let mut r = Rng::new(13);
    let sources: Vec<String> = ["vecadd", "matmul", "histogram", "scan"]
        .iter()
        .map(|n| common::sample(n))
        .collect();
    let junk = [
        "[", "]", ",", ":", "@", "!", "d", "r99", "0x", "-", ".", "%", "é", "\n", " ", "+",
    ];
    let mut ok = 0;
    for i in 0..2000 {
        let mut s: Vec<char> = sources[i % sources.len()].chars().collect();
        for _ in 0..r.range(1, 6) {
            if s.is_empty() {
                break;
            }
            let at = r.range(0, s.len() as u32) as usize;
            match r.range(0, 3) {
                0 => {
                    s.remove(at);
                }
                1 => {
                    let j = junk[r.range(0, junk.len() as u32) as usize];
                    for (k, c) in j.chars().enumerate() {
                        s.insert(at + k, c);
                    }
                }
                _ => {
                    let other = r.range(0, s.len() as u32) as usize;
                    s.swap(at, other)
                }
            }
        }
        let text: String = s.into_iter().collect();
        if let Ok(m) = assemble(&text, 2) {
            ok += 1;
            // Whatever assembles must survive the binary round trip.
            let b = m.to_bytes().unwrap();
            assert_eq!(Module::from_bytes(&b).unwrap(), m);
        }
    }
    assert!(ok < 2000, "mangling must break some sources");
}
