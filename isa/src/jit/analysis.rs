//! What the code generator needs to know about a kernel: its basic blocks
//! and how each instruction is executed.

use crate::inst::*;
use crate::module::Kernel;

/// How the generated code executes an instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Per lane, in a SIMD region over the warp's chunks.
    Lane,
    /// `ld.32` from global memory: inline TLB check, else an interpreter
    /// step.
    GlobalLoad,
    /// `st.32` to global memory: likewise.
    GlobalStore,
    /// `lds.32`: inline bounds check, else an interpreter step.
    SharedLoad,
    /// `sts.32`: likewise.
    SharedStore,
    /// `bra`: inline when the warp stays together, the interpreter's
    /// divergence otherwise.
    Branch,
    /// `exit`: inline.
    Exit,
    /// One interpreter step (also `bar` and `trap`).
    Interp,
}

/// The inlined global memory instructions of kernel `k` (each has a TLB
/// entry): pc → entry index.
pub(crate) fn sites(code: &[Instruction], k: &Kernel) -> std::collections::HashMap<u32, u32> {
    let mut m = std::collections::HashMap::new();
    for pc in k.entry..k.entry + k.len {
        let global = code.get(pc as usize).is_some_and(|i| {
            // Independent of `fma`: only `ffma` depends on it.
            matches!(kind(i, true), Kind::GlobalLoad | Kind::GlobalStore)
        });
        if global {
            let n = m.len() as u32;
            m.insert(pc, n);
        }
    }
    m
}

/// Whether the instruction ends a basic block.
pub(crate) fn ends_block(op: &Op) -> bool {
    matches!(op, Op::Bra { .. } | Op::Exit | Op::Bar | Op::Trap { .. })
}

/// How `inst` runs; `fma`: the host has fused multiply-add.
pub(crate) fn kind(inst: &Instruction, fma: bool) -> Kind {
    use BinOp::*;
    use UnOp::*;
    match inst.op {
        Op::Nop | Op::Mov { .. } | Op::S2r { .. } | Op::Ldarg { .. } | Op::Sel { .. } => Kind::Lane,
        Op::Bin { op, b, .. } => match op {
            Add | Sub | Mul | MinU | MinS | MaxU | MaxS | And | Or | Xor | FAdd | FSub | FMul
            | FDiv | FMin | FMax => Kind::Lane,
            Shl | ShrU | ShrS if matches!(b, Src::Imm(_)) => Kind::Lane,
            _ => Kind::Interp,
        },
        Op::Un {
            op: Not | FAbs | FNeg | Rcp | Sqrt | CvtF32S32 | CvtS32F32,
            ..
        } => Kind::Lane,
        Op::Tri { op: TriOp::Mad, .. } => Kind::Lane,
        Op::Tri {
            op: TriOp::FFma, ..
        } => {
            if fma {
                Kind::Lane
            } else {
                Kind::Interp
            }
        }
        Op::Add64 { .. } | Op::MadWide { .. } | Op::Setp { .. } | Op::Plop { .. } => Kind::Lane,
        Op::Ld {
            space,
            width: Width::B32,
            ..
        } => match space {
            Space::Global => Kind::GlobalLoad,
            Space::Shared => Kind::SharedLoad,
        },
        Op::St {
            space,
            width: Width::B32,
            ..
        } => match space {
            Space::Global => Kind::GlobalStore,
            Space::Shared => Kind::SharedStore,
        },
        Op::Bra { .. } => Kind::Branch,
        Op::Exit => Kind::Exit,
        _ => Kind::Interp,
    }
}

/// The predicates (`pt` excluded) an instruction reads or writes, as a
/// mask.
pub(crate) fn preds_used(inst: &Instruction) -> u8 {
    let mut m = 0u8;
    let mut add = |p: Pred| {
        if p != Pred::TRUE {
            m |= 1 << (p.0 & 7);
        }
    };
    add(inst.guard.pred);
    match inst.op {
        Op::Sel { p, .. } => add(p),
        Op::Setp { p, .. } => add(p),
        Op::Plop { p, a, b, .. } => {
            add(p);
            add(a);
            add(b);
        }
        Op::Vote { p, src, .. } => {
            add(p);
            add(src);
        }
        Op::Ballot { src, .. } => add(src),
        _ => {}
    }
    m & 0x7f
}

/// The predicate an instruction writes, if any (`pt` excluded).
pub(crate) fn pred_written(op: &Op) -> Option<u8> {
    let p = match *op {
        Op::Setp { p, .. } | Op::Plop { p, .. } | Op::Vote { p, .. } => p,
        _ => return None,
    };
    (p != Pred::TRUE).then_some(p.0)
}

/// The basic blocks of a kernel: `(start, end)` pcs (end exclusive), in
/// order, and a bitmap of the starts relative to the kernel's entry.
pub(crate) struct Blocks {
    pub(crate) list: Vec<(u32, u32)>,
    pub(crate) starts: Vec<u64>,
}

/// Splits kernel `k` of `code` into basic blocks: a block starts at the
/// entry, at every branch target and after every instruction that ends a
/// block. Every pc a warp's waiting lanes can hold is a block start (a
/// lane stops elsewhere only in the active group, after the interpreter
/// was preempted mid-block).
pub(crate) fn blocks(code: &[Instruction], k: &Kernel) -> Blocks {
    let (start, len) = (k.entry, k.len);
    let mut is_start = vec![false; len as usize + 1];
    is_start[0] = true;
    is_start[len as usize] = true;
    for i in 0..len {
        let pc = start + i;
        let Some(inst) = code.get(pc as usize) else {
            break;
        };
        if let Op::Bra { offset } = inst.op {
            let t = pc as i64 + offset as i64 - start as i64;
            if (0..len as i64).contains(&t) {
                is_start[t as usize] = true;
            }
        }
        if ends_block(&inst.op) {
            is_start[i as usize + 1] = true;
        }
    }
    let mut list = Vec::new();
    let mut starts = vec![0u64; (len as usize).div_ceil(64)];
    let mut b = 0u32;
    for i in 1..=len {
        if is_start[i as usize] {
            list.push((start + b, start + i));
            starts[(b / 64) as usize] |= 1 << (b % 64);
            b = i;
        }
    }
    Blocks { list, starts }
}

pub(crate) use crate::regflow::{reads, writes, Read};

/// Per register of `0..nregs`: whether the instructions `insts` (a block,
/// in order) may read it before an unguarded write of it (its value at
/// their start is needed).
pub(crate) fn read_first(insts: &[Instruction], nregs: usize) -> Vec<bool> {
    let mut read = vec![false; nregs];
    let mut written = vec![false; nregs];
    for i in insts {
        for (r, _) in reads(&i.op) {
            let r = r as usize;
            if r < nregs && !written[r] {
                read[r] = true;
            }
        }
        let (d, n) = writes(&i.op);
        if i.guard == Guard::ALWAYS {
            for r in d as usize..(d as usize + n as usize).min(nregs) {
                written[r] = true;
            }
        }
    }
    read
}

/// Whether `op` writes register `r`.
pub(crate) fn writes_reg(op: &Op, r: u8) -> bool {
    let (d, n) = writes(op);
    r.wrapping_sub(d) < n
}

/// For each instruction of a lane-local region: whether its fp32 result
/// must be canonicalised (NaN replaced by the canonical NaN). It need not
/// be when, before the region ends (and the register is written back),
/// the register is only read as a payload-insensitive fp32 operand and
/// then overwritten in every active lane (an unguarded write): such reads
/// give the same result for every NaN, and nothing else sees the value.
pub(crate) fn canon_needed(insts: &[Instruction]) -> Vec<bool> {
    (0..insts.len())
        .map(|k| {
            let (d, n) = writes(&insts[k].op);
            if n != 1 {
                return true;
            }
            for later in &insts[k + 1..] {
                if reads(&later.op)
                    .iter()
                    .any(|&(r, how)| r == d && how == Read::Bits)
                {
                    return true;
                }
                if writes_reg(&later.op, d) {
                    return later.guard != Guard::ALWAYS;
                }
            }
            true
        })
        .collect()
}
