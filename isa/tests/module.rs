//! The module container: round trips, the malformed-module table, and the
//! generation rules of the loader.

mod common;
use common::*;
use vgpu_isa::module::*;
use vgpu_isa::*;

const SAMPLES: [&str; 8] = [
    "vecadd",
    "saxpy",
    "reduce",
    "matmul",
    "histogram",
    "scan",
    "spin",
    "oob_store",
];

fn rd32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().unwrap())
}
fn wr32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}
/// (offset, size) of the section of `kind`.
fn section(b: &[u8], kind: u32) -> (usize, usize) {
    let n = rd32(b, 20) as usize;
    for i in 0..n {
        let e = HEADER_SIZE + i * SECTION_ENTRY_SIZE;
        if rd32(b, e) == kind {
            return (rd32(b, e + 8) as usize, rd32(b, e + 12) as usize);
        }
    }
    panic!("no section {kind}");
}
fn section_entry(b: &[u8], kind: u32) -> usize {
    (0..rd32(b, 20) as usize)
        .map(|i| HEADER_SIZE + i * SECTION_ENTRY_SIZE)
        .find(|&e| rd32(b, e) == kind)
        .unwrap()
}
/// Offset of field `f` (0..12) of kernel 0.
fn kfield(b: &[u8], f: usize) -> usize {
    section(b, SECTION_KERNELS).0 + 4 * f
}
fn code_word(b: &mut [u8], pc: usize, w: u64) {
    let o = section(b, SECTION_CODE).0 + 8 * pc;
    b[o..o + 8].copy_from_slice(&w.to_le_bytes());
}

#[test]
fn samples_round_trip_through_bytes_and_text() {
    for name in SAMPLES {
        for gen in [1, 2] {
            let m = assemble(&sample(name), gen).unwrap();
            let bytes = m.to_bytes().unwrap();
            assert_eq!(Module::from_bytes(&bytes).as_ref(), Ok(&m), "{name}");
            let text = disassemble(&m);
            let again = assemble(&text, gen).unwrap_or_else(|e| panic!("{name}: {e}\n{text}"));
            assert_eq!(again.to_bytes().unwrap(), bytes, "{name}: text round trip");
        }
    }
}

#[test]
fn metadata_is_recorded() {
    let m = sample_module("matmul");
    let k = m.kernel("matmul").unwrap();
    assert_eq!(k.shared_bytes, 2048);
    assert_eq!(k.wg_hint, [16, 16, 1]);
    assert_eq!(k.regs, 29);
    let names: Vec<(&str, u32, ArgKind)> = k
        .args
        .iter()
        .map(|a| (a.name.as_str(), a.offset, a.kind))
        .collect();
    assert_eq!(
        names,
        [
            ("m", 0, ArgKind::U32),
            ("n", 4, ArgKind::U32),
            ("k", 8, ArgKind::U32),
            ("a", 16, ArgKind::Ptr),
            ("b", 24, ArgKind::Ptr),
            ("c", 32, ArgKind::Ptr)
        ]
    );
    assert_eq!(k.arg_size, 40);
    let scan = sample_module("scan");
    assert_eq!(scan.kernels().len(), 2);
    assert_eq!(scan.kernels()[1].entry, scan.kernels()[0].len);
}

type Mutation = fn(&mut Vec<u8>);
type Check = fn(&ModuleError) -> bool;

#[test]
fn malformed_modules_are_rejected_precisely() {
    let base = sample_module("vecadd").to_bytes().unwrap();
    let table: Vec<(&str, Mutation, Check)> = vec![
        (
            "bad magic",
            |b| b[0] = b'X',
            |e| *e == ModuleError::BadMagic,
        ),
        (
            "version",
            |b| b[8] = 2,
            |e| *e == ModuleError::UnsupportedVersion(2),
        ),
        (
            "generation 3",
            |b| b[10] = 3,
            |e| *e == ModuleError::BadGeneration(3),
        ),
        (
            "header flags",
            |b| b[12] = 1,
            |e| matches!(e, ModuleError::BadHeader { field: "flags", .. }),
        ),
        (
            "reserved header",
            |b| b[30] = 1,
            |e| {
                matches!(
                    e,
                    ModuleError::BadHeader {
                        field: "reserved",
                        ..
                    }
                )
            },
        ),
        (
            "truncated header",
            |b| b.truncate(20),
            |e| matches!(e, ModuleError::Truncated { what: "header", .. }),
        ),
        (
            "truncated file",
            |b| {
                let n = b.len() - 8;
                b.truncate(n)
            },
            |e| matches!(e, ModuleError::Truncated { what: "file", .. }),
        ),
        (
            "file size too small",
            |b| {
                let n = b.len() as u32 - 8;
                wr32(b, 16, n)
            },
            |e| {
                matches!(
                    e,
                    ModuleError::BadHeader {
                        field: "file_size",
                        ..
                    }
                )
            },
        ),
        (
            "section table past the end",
            |b| wr32(b, 20, 1000),
            |e| {
                matches!(
                    e,
                    ModuleError::Truncated {
                        what: "section table",
                        ..
                    }
                )
            },
        ),
        (
            "code section past the end",
            |b| {
                let e = section_entry(b, SECTION_CODE);
                wr32(b, e + 12, 1 << 20)
            },
            |e| {
                matches!(
                    e,
                    ModuleError::Truncated {
                        what: "code section",
                        ..
                    }
                )
            },
        ),
        (
            "code section misaligned",
            |b| {
                let e = section_entry(b, SECTION_CODE);
                let off = rd32(b, e + 8);
                let size = rd32(b, e + 12);
                wr32(b, e + 8, off + 4);
                wr32(b, e + 12, size - 8)
            },
            |e| *e == ModuleError::MisalignedCode(100),
        ),
        (
            "code size not a multiple of 8",
            |b| {
                let e = section_entry(b, SECTION_CODE);
                let size = rd32(b, e + 12);
                wr32(b, e + 12, size - 4)
            },
            |e| {
                matches!(
                    e,
                    ModuleError::SectionSize {
                        kind: 1,
                        unit: 8,
                        ..
                    }
                )
            },
        ),
        (
            "unknown section kind",
            |b| {
                let e = section_entry(b, SECTION_ARGS);
                wr32(b, e, 9)
            },
            |e| matches!(e, ModuleError::UnknownSection { kind: 9, .. }),
        ),
        (
            "duplicate section",
            |b| {
                let e = section_entry(b, SECTION_ARGS);
                wr32(b, e, SECTION_CODE)
            },
            |e| *e == ModuleError::DuplicateSection(SECTION_CODE),
        ),
        (
            "missing strings",
            |b| wr32(b, 20, 3),
            |e| *e == ModuleError::MissingSection(SECTION_STRINGS),
        ),
        (
            "unknown opcode",
            |b| code_word(b, 0, 0x00ff_ffff_0070_00ee),
            |e| {
                matches!(
                    e,
                    ModuleError::BadInstruction {
                        pc: 0,
                        err: InstError::UnknownOpcode(0xee),
                        ..
                    }
                )
            },
        ),
        (
            "reserved bits",
            |b| code_word(b, 3, (1u64 << 63) | 0x0070_0001),
            |e| {
                matches!(
                    e,
                    ModuleError::BadInstruction {
                        pc: 3,
                        err: InstError::ReservedBits(_),
                        ..
                    }
                )
            },
        ),
        (
            "generation-2 opcode in a generation-1 module",
            |b| code_word(b, 1, 0x0070_0060),
            |e| {
                matches!(
                    e,
                    ModuleError::BadInstruction {
                        pc: 1,
                        err: InstError::NotInGeneration {
                            need: 2,
                            gen: 1,
                            ..
                        },
                        ..
                    }
                )
            },
        ),
        (
            "kernel entry outside the code",
            |b| {
                let o = kfield(b, 1);
                wr32(b, o, 1000)
            },
            |e| matches!(e, ModuleError::KernelOutsideCode { entry: 1000, .. }),
        ),
        (
            "kernel length past the code",
            |b| {
                let o = kfield(b, 2);
                wr32(b, o, 17)
            },
            |e| matches!(e, ModuleError::KernelOutsideCode { len: 17, .. }),
        ),
        (
            "register count below what the code uses",
            |b| {
                let o = kfield(b, 3);
                wr32(b, o, 4)
            },
            |e| matches!(e, ModuleError::RegisterOutOfRange { regs: 4, .. }),
        ),
        (
            "register count 65",
            |b| {
                let o = kfield(b, 3);
                wr32(b, o, 65)
            },
            |e| matches!(e, ModuleError::BadRegisterCount { regs: 65, .. }),
        ),
        (
            "branch outside the kernel",
            |b| {
                let bra = encode(&Instruction::new(Op::Bra { offset: 100 })).unwrap();
                code_word(b, 15, bra)
            },
            |e| {
                matches!(
                    e,
                    ModuleError::BadBranchTarget {
                        pc: 15,
                        target: 115,
                        ..
                    }
                )
            },
        ),
        (
            "last instruction falls through",
            |b| code_word(b, 15, 0x0070_0000),
            |e| matches!(e, ModuleError::FallsOffEnd { pc: 15, .. }),
        ),
        (
            "shared memory too large",
            |b| {
                let o = kfield(b, 4);
                wr32(b, o, 1 << 20)
            },
            |e| matches!(e, ModuleError::SharedTooLarge { .. }),
        ),
        (
            "ldarg past the argument buffer",
            |b| {
                let o = kfield(b, 5);
                wr32(b, o, 8)
            },
            |e| {
                matches!(
                    e,
                    ModuleError::BadArg { .. } | ModuleError::LdargOutOfRange { .. }
                )
            },
        ),
        (
            "argument table range",
            |b| {
                let o = kfield(b, 7);
                wr32(b, o, 50)
            },
            |e| matches!(e, ModuleError::ArgsOutsideTable { count: 50, .. }),
        ),
        (
            // Found by fuzzing: a name the loader took but the assembler
            // refuses, so the disassembly did not assemble.
            "kernel name that is not an identifier",
            |b| {
                let name = rd32(b, kfield(b, 0)) as usize;
                let (strings, _) = section(b, SECTION_STRINGS);
                b[strings + name + 1] = b'?';
            },
            |e| *e == ModuleError::BadName,
        ),
        (
            "kernel name offset",
            |b| {
                let o = kfield(b, 0);
                wr32(b, o, 100_000)
            },
            |e| *e == ModuleError::BadString(100_000),
        ),
        (
            "workgroup hint over 1024",
            |b| {
                let o = kfield(b, 9);
                wr32(b, o, 8)
            },
            |e| {
                matches!(
                    e,
                    ModuleError::BadWorkgroupHint {
                        hint: [256, 8, 1],
                        ..
                    }
                )
            },
        ),
        (
            "workgroup hint whose product wraps 64 bits to 0",
            |b| {
                // 2^31 · 2^31 · 4 = 2^64.
                for (f, v) in [(8, 1 << 31), (9, 1 << 31), (10, 4)] {
                    let o = kfield(b, f);
                    wr32(b, o, v)
                }
            },
            |e| {
                matches!(
                    e,
                    ModuleError::BadWorkgroupHint {
                        hint: [0x8000_0000, 0x8000_0000, 4],
                        ..
                    }
                )
            },
        ),
        (
            "argument kind",
            |b| {
                let (o, _) = section(b, SECTION_ARGS);
                wr32(b, o + 12, 77)
            },
            |e| {
                matches!(
                    e,
                    ModuleError::BadArg {
                        why: "unknown kind",
                        ..
                    }
                )
            },
        ),
        (
            "argument overlapping another",
            |b| {
                let (o, _) = section(b, SECTION_ARGS);
                wr32(b, o + 16 + 4, 0); // a: offset 0, like n
                wr32(b, o + 16 + 8, 8)
            },
            |e| matches!(e, ModuleError::BadArg { .. }),
        ),
        (
            "odd register pair",
            |b| {
                // ld.32 r8, [d3]
                code_word(b, 11, 0x0470_c850 | 3 << 14)
            },
            |e| {
                matches!(
                    e,
                    ModuleError::BadInstruction {
                        pc: 11,
                        err: InstError::OddPair(3),
                        ..
                    }
                )
            },
        ),
    ];
    assert!(Module::from_bytes(&base).is_ok());
    for (what, mutate, check) in table {
        let mut b = base.clone();
        mutate(&mut b);
        match Module::from_bytes(&b) {
            Ok(_) => panic!("{what}: accepted"),
            Err(e) => assert!(check(&e), "{what}: wrong error {e:?} ({e})"),
        }
    }
}

#[test]
fn random_corruption_never_panics() {
    let base = sample_module("histogram").to_bytes().unwrap();
    let mut r = Rng::new(20);
    let mut rejected = 0;
    for _ in 0..3000 {
        let mut b = base.clone();
        for _ in 0..r.range(1, 4) {
            let i = r.range(0, b.len() as u32) as usize;
            b[i] ^= 1 << r.range(0, 8);
        }
        if r.range(0, 10) == 0 {
            let n = r.range(0, b.len() as u32) as usize;
            b.truncate(n);
        }
        match Module::from_bytes(&b) {
            Err(_) => rejected += 1,
            // What loads disassembles to text that assembles to the same
            // kernels.
            Ok(m) => {
                let again = vgpu_isa::assemble(&vgpu_isa::disassemble(&m), m.generation()).unwrap();
                assert_eq!(kernels(&again), kernels(&m));
            }
        }
    }
    assert!(
        rejected > 2000,
        "most corruptions must be caught ({rejected})"
    );
}

#[test]
fn loader_enforces_the_device_generation() {
    let g2 = assemble(&sample("vecadd"), 2).unwrap().to_bytes().unwrap();
    assert_eq!(
        Module::load(&g2, 1),
        Err(ModuleError::GenerationTooNew {
            module: 2,
            device: 1
        })
    );
    assert!(Module::load(&g2, 2).is_ok());
    let g1 = assemble(&sample("vecadd"), 1).unwrap().to_bytes().unwrap();
    assert!(Module::load(&g1, 1).is_ok());
    assert!(
        Module::load(&g1, 2).is_ok(),
        "generation 2 runs generation-1 modules"
    );
    // Building a module in memory validates too.
    let code = vec![Instruction::new(Op::Shfl {
        mode: ShflMode::Idx,
        d: Reg(0),
        a: Reg(0),
        b: Src::Imm(0),
    })];
    let k = Kernel {
        name: "k".into(),
        entry: 0,
        len: 1,
        regs: 1,
        shared_bytes: 0,
        arg_size: 0,
        args: vec![],
        wg_hint: [0; 3],
    };
    assert!(matches!(
        Module::new(1, code, vec![k]),
        Err(ModuleError::BadInstruction {
            err: InstError::NotInGeneration { .. },
            ..
        })
    ));
}

#[test]
fn launch_shapes_are_checked_without_wrapping() {
    use vgpu_isa::{Launch, LaunchError};
    let m = sample_module("vecadd");
    let args = vec![0u8; 64];
    let launch = |grid, wg| Launch::by_index(&m, 0, grid, wg, args.clone(), 0);
    // 2^31 · 2^31 · 4 threads wraps to 0 in 64 bits.
    let wrap = [1 << 31, 1 << 31, 4];
    assert_eq!(
        launch([1; 3], wrap).unwrap_err(),
        LaunchError::BadWorkgroupSize(wrap)
    );
    assert_eq!(
        launch([1; 3], [u32::MAX; 3]).unwrap_err(),
        LaunchError::BadWorkgroupSize([u32::MAX; 3])
    );
    // More than 2^64 − 1 workgroups cannot be counted.
    assert_eq!(
        launch([u32::MAX; 3], [64, 1, 1]).unwrap_err(),
        LaunchError::BadGrid([u32::MAX; 3])
    );
    // The largest countable grids are fine.
    let l = launch([u32::MAX, u32::MAX, 1], [32, 32, 1]).unwrap();
    assert_eq!(l.workgroups(), u64::from(u32::MAX) * u64::from(u32::MAX));
    assert_eq!(l.threads_per_workgroup(), 1024);
    assert_eq!(
        l.workgroup_id(l.workgroups() - 1),
        [u32::MAX - 1, u32::MAX - 1, 0]
    );
    // Every linear index maps to x fastest, then y, then z.
    for grid in [[7, 1, 1], [3, 5, 1], [2, 3, 4], [1, 1, 6], [5, 1, 3]] {
        let l = launch(grid, [32, 1, 1]).unwrap();
        let mut i = 0;
        for z in 0..grid[2] {
            for y in 0..grid[1] {
                for x in 0..grid[0] {
                    assert_eq!(l.workgroup_id(i), [x, y, z], "grid {grid:?} index {i}");
                    i += 1;
                }
            }
        }
    }
}

/// Each kernel as it runs: its metadata (wherever its code starts) and its
/// code.
fn kernels(m: &Module) -> Vec<(Kernel, &[Instruction])> {
    m.kernels()
        .iter()
        .map(|k| {
            let code = &m.code()[k.entry as usize..(k.entry + k.len) as usize];
            (
                Kernel {
                    entry: 0,
                    ..k.clone()
                },
                code,
            )
        })
        .collect()
}

/// The disassembler prints each kernel's code: code outside every kernel
/// (which nothing can execute; the loader allows it) is left out, and
/// kernels sharing code each get their copy, so the text assembles to a
/// module with the same kernels, not always the same bytes. (The fuzz
/// target `isa_module` checks this; it first assumed equal modules.)
#[test]
fn disassembly_keeps_every_kernel_not_unreachable_code() {
    let exit = Instruction::new(Op::Exit);
    let nop = Instruction::new(Op::Nop);
    let k = |name: &str, entry| Kernel {
        name: name.into(),
        entry,
        len: 2,
        regs: 1,
        shared_bytes: 0,
        arg_size: 0,
        args: vec![],
        wg_hint: [0; 3],
    };
    // a and c share words 0..2, b has words 2..4, and word 4 belongs to no
    // kernel.
    let code = vec![nop, exit, nop, exit, nop];
    let m = Module::new(2, code, vec![k("a", 0), k("b", 2), k("c", 0)]).unwrap();
    let again = vgpu_isa::assemble(&vgpu_isa::disassemble(&m), 2).unwrap();
    assert_eq!(kernels(&again), kernels(&m));
    assert_eq!(
        again.code().len(),
        6,
        "a, b and c have 2 words each; the 5th word is gone"
    );
}
