//! Binary encoding of instructions: one little-endian 64-bit word each.
//!
//! ```text
//!  bits    field
//!   7:0    opcode
//!  13:8    rd   destination register (or destination predicate in 10:8)
//!  19:14   ra   first source register (or source predicate in 16:14)
//!  22:20   guard predicate index (7 = pt)
//!  23      guard negate
//!  31:24   mod  opcode-specific modifier; bit 31 = I (operand B is imm32)
//!  -- format R (no immediate) --
//!  37:32   rb
//!  43:38   rc
//!  63:44   off20  signed memory offset (memory instructions only)
//!  -- format I (I set, or bra/trap/s2r/ldarg) --
//!  63:32   imm32
//! ```
//! Every bit an instruction does not use must be zero.

use crate::inst::*;
use thiserror::Error;

/// Why an instruction cannot be encoded or a word cannot be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum InstError {
    #[error("unknown opcode {0:#04x}")]
    UnknownOpcode(u8),
    #[error("opcode {opcode:#04x} needs generation {need}, the module is generation {gen}")]
    NotInGeneration { opcode: u8, need: u32, gen: u32 },
    #[error("reserved bits {0:#018x} are set")]
    ReservedBits(u64),
    #[error("modifier {modifier:#04x} is invalid for opcode {opcode:#04x}")]
    BadModifier { opcode: u8, modifier: u8 },
    #[error("register r{0} does not exist (r0..r63)")]
    RegOutOfRange(u8),
    #[error("predicate index {0} does not exist (p0..p6, pt)")]
    BadPredicate(u8),
    #[error("64-bit operand needs an even register pair, got r{0}")]
    OddPair(u8),
    #[error("memory offset {0} does not fit in 20 signed bits")]
    OffsetRange(i32),
    #[error("stores have no sign-extending widths")]
    BadStoreWidth,
    #[error("special register {0} does not exist")]
    BadSpecial(u32),
    #[error("cas is the only atomic with a third operand")]
    UnusedOperand,
}

const I_FLAG: u8 = 0x80;
/// Largest positive memory offset.
pub const OFFSET_MAX: i32 = (1 << 19) - 1;
/// Most negative memory offset.
pub const OFFSET_MIN: i32 = -(1 << 19);

// Opcodes of instructions that are not in a table.
const OP_NOP: u8 = 0x00;
const OP_EXIT: u8 = 0x01;
const OP_BAR: u8 = 0x02;
const OP_TRAP: u8 = 0x03;
const OP_BRA: u8 = 0x04;
const OP_MOV: u8 = 0x08;
const OP_S2R: u8 = 0x09;
const OP_LDARG: u8 = 0x0a;
const OP_SEL: u8 = 0x0b;
const OP_MADWIDE_U: u8 = 0x42;
const OP_MADWIDE_S: u8 = 0x43;
const OP_ADD64: u8 = 0x44;
const OP_SETP: u8 = 0x48;
const OP_LD: u8 = 0x50;
const OP_ST: u8 = 0x51;
const OP_LDS: u8 = 0x52;
const OP_STS: u8 = 0x53;
const OP_ATOM: u8 = 0x54;
const OP_ATOMS: u8 = 0x55;
const OP_BALLOT: u8 = 0x66;

#[derive(Default)]
struct Fields {
    opcode: u8,
    rd: u8,
    ra: u8,
    modifier: u8,
    rb: u8,
    rc: u8,
    off: i32,
    imm: Option<u32>,
}

fn reg(r: Reg) -> Result<u8, InstError> {
    if (r.0 as usize) < NUM_REGS {
        Ok(r.0)
    } else {
        Err(InstError::RegOutOfRange(r.0))
    }
}

fn pair(r: Reg) -> Result<u8, InstError> {
    let v = reg(r)?;
    if v % 2 == 0 {
        Ok(v)
    } else {
        Err(InstError::OddPair(v))
    }
}

fn pred(p: Pred) -> Result<u8, InstError> {
    if (p.0 as usize) < NUM_PREDS {
        Ok(p.0)
    } else {
        Err(InstError::BadPredicate(p.0))
    }
}

fn offset(o: i32) -> Result<i32, InstError> {
    if (OFFSET_MIN..=OFFSET_MAX).contains(&o) {
        Ok(o)
    } else {
        Err(InstError::OffsetRange(o))
    }
}

/// Sets rb or the immediate for a B operand; `pair_b` requires an even pair.
fn src_b(f: &mut Fields, b: Src, pair_b: bool) -> Result<(), InstError> {
    match b {
        Src::Reg(r) => f.rb = if pair_b { pair(r)? } else { reg(r)? },
        Src::Imm(v) => {
            f.modifier |= I_FLAG;
            f.imm = Some(v);
        }
    }
    Ok(())
}

fn fields(inst: &Instruction) -> Result<Fields, InstError> {
    let mut f = Fields::default();
    match inst.op {
        Op::Nop => f.opcode = OP_NOP,
        Op::Exit => f.opcode = OP_EXIT,
        Op::Bar => f.opcode = OP_BAR,
        Op::Trap { code } => {
            f.opcode = OP_TRAP;
            f.imm = Some(code);
        }
        Op::Bra { offset } => {
            f.opcode = OP_BRA;
            f.imm = Some(offset as u32);
        }
        Op::Mov { d, b } => {
            f.opcode = OP_MOV;
            f.rd = reg(d)?;
            src_b(&mut f, b, false)?;
        }
        Op::S2r { d, sr } => {
            f.opcode = OP_S2R;
            f.rd = reg(d)?;
            f.imm = Some(sr as u32);
        }
        Op::Ldarg { d, wide, offset } => {
            f.opcode = OP_LDARG;
            f.rd = if wide { pair(d)? } else { reg(d)? };
            f.modifier = wide as u8;
            f.imm = Some(offset);
        }
        Op::Sel { d, a, b, p, neg } => {
            f.opcode = OP_SEL;
            f.rd = reg(d)?;
            f.ra = reg(a)?;
            f.modifier = pred(p)? | (neg as u8) << 3;
            src_b(&mut f, b, false)?;
        }
        Op::Bin { op, d, a, b } => {
            f.opcode = op.opcode();
            f.rd = reg(d)?;
            f.ra = reg(a)?;
            src_b(&mut f, b, false)?;
        }
        Op::Un { op, d, a } => {
            f.opcode = op.opcode();
            f.rd = reg(d)?;
            f.ra = reg(a)?;
        }
        Op::Tri { op, d, a, b, c } => {
            f.opcode = op.opcode();
            f.rd = reg(d)?;
            f.ra = reg(a)?;
            f.rb = reg(b)?;
            f.rc = reg(c)?;
        }
        Op::Add64 { d, a, b } => {
            f.opcode = OP_ADD64;
            f.rd = pair(d)?;
            f.ra = pair(a)?;
            src_b(&mut f, b, true)?;
        }
        Op::MadWide { signed, d, a, b, c } => {
            f.opcode = if signed { OP_MADWIDE_S } else { OP_MADWIDE_U };
            f.rd = pair(d)?;
            f.ra = reg(a)?;
            f.rb = reg(b)?;
            f.rc = pair(c)?;
        }
        Op::Setp { cmp, ty, p, a, b } => {
            f.opcode = OP_SETP;
            f.rd = pred(p)?;
            f.ra = reg(a)?;
            f.modifier = cmp as u8 | (ty as u8) << 3;
            src_b(&mut f, b, false)?;
        }
        Op::Plop {
            op,
            p,
            a,
            na,
            b,
            nb,
        } => {
            f.opcode = op.opcode();
            f.rd = pred(p)?;
            f.ra = pred(a)?;
            f.rb = pred(b)?;
            f.modifier = na as u8 | (nb as u8) << 1;
        }
        Op::Ld {
            space,
            width,
            d,
            addr,
            offset: o,
        } => {
            f.opcode = if space == Space::Global {
                OP_LD
            } else {
                OP_LDS
            };
            f.rd = if width == Width::B64 {
                pair(d)?
            } else {
                reg(d)?
            };
            f.ra = if space == Space::Global {
                pair(addr)?
            } else {
                reg(addr)?
            };
            f.modifier = width as u8;
            f.off = offset(o)?;
        }
        Op::St {
            space,
            width,
            addr,
            offset: o,
            v,
        } => {
            if !width.valid_for_store() {
                return Err(InstError::BadStoreWidth);
            }
            f.opcode = if space == Space::Global {
                OP_ST
            } else {
                OP_STS
            };
            f.rb = if width == Width::B64 {
                pair(v)?
            } else {
                reg(v)?
            };
            f.ra = if space == Space::Global {
                pair(addr)?
            } else {
                reg(addr)?
            };
            f.modifier = width as u8;
            f.off = offset(o)?;
        }
        Op::Atom {
            space,
            op,
            d,
            addr,
            offset: o,
            b,
            c,
        } => {
            f.opcode = if space == Space::Global {
                OP_ATOM
            } else {
                OP_ATOMS
            };
            f.rd = reg(d)?;
            f.ra = if space == Space::Global {
                pair(addr)?
            } else {
                reg(addr)?
            };
            f.rb = reg(b)?;
            f.rc = reg(c)?;
            if op != AtomOp::Cas && c.0 != 0 {
                return Err(InstError::UnusedOperand);
            }
            f.modifier = op as u8;
            f.off = offset(o)?;
        }
        Op::Shfl { mode, d, a, b } => {
            f.opcode = mode.opcode();
            f.rd = reg(d)?;
            f.ra = reg(a)?;
            src_b(&mut f, b, false)?;
        }
        Op::Vote { mode, p, src, neg } => {
            f.opcode = mode.opcode();
            f.rd = pred(p)?;
            f.ra = pred(src)?;
            f.modifier = neg as u8;
        }
        Op::Ballot { d, src, neg } => {
            f.opcode = OP_BALLOT;
            f.rd = reg(d)?;
            f.ra = pred(src)?;
            f.modifier = neg as u8;
        }
    }
    Ok(f)
}

/// Encodes one instruction into its 64-bit word.
pub fn encode(inst: &Instruction) -> Result<u64, InstError> {
    let f = fields(inst)?;
    let g = pred(inst.guard.pred)?;
    let mut w = f.opcode as u64
        | (f.rd as u64) << 8
        | (f.ra as u64) << 14
        | (g as u64) << 20
        | (inst.guard.neg as u64) << 23
        | (f.modifier as u64) << 24;
    match f.imm {
        Some(imm) => w |= (imm as u64) << 32,
        None => {
            w |= (f.rb as u64) << 32
                | (f.rc as u64) << 38
                | ((f.off as u32 as u64) & 0xf_ffff) << 44;
        }
    }
    Ok(w)
}

fn p3(v: u8) -> Result<Pred, InstError> {
    if v < 8 {
        Ok(Pred(v))
    } else {
        Err(InstError::BadPredicate(v))
    }
}

fn width(opcode: u8, m: u8) -> Result<Width, InstError> {
    Width::ALL
        .get(m as usize)
        .copied()
        .ok_or(InstError::BadModifier {
            opcode,
            modifier: m,
        })
}

/// Decodes one word of a generation-`gen` module.
///
/// The result re-encodes to exactly `word`; a word with any unused bit set
/// is rejected.
pub fn decode(word: u64, gen: u32) -> Result<Instruction, InstError> {
    let opcode = word as u8;
    let rd = (word >> 8) as u8 & 63;
    let ra = (word >> 14) as u8 & 63;
    let guard = Guard {
        pred: Pred((word >> 20) as u8 & 7),
        neg: (word >> 23) & 1 != 0,
    };
    let m = (word >> 24) as u8;
    let rb = (word >> 32) as u8 & 63;
    let rc = (word >> 38) as u8 & 63;
    let off = ((word >> 44) as i32) << 12 >> 12;
    let imm = (word >> 32) as u32;
    let b = if m & I_FLAG != 0 {
        Src::Imm(imm)
    } else {
        Src::Reg(Reg(rb))
    };
    let bad_mod = InstError::BadModifier {
        opcode,
        modifier: m,
    };
    let op = match opcode {
        OP_NOP => Op::Nop,
        OP_EXIT => Op::Exit,
        OP_BAR => Op::Bar,
        OP_TRAP => Op::Trap { code: imm },
        OP_BRA => Op::Bra { offset: imm as i32 },
        OP_MOV => Op::Mov { d: Reg(rd), b },
        OP_S2R => Op::S2r {
            d: Reg(rd),
            sr: Special::from_index(imm).ok_or(InstError::BadSpecial(imm))?,
        },
        OP_LDARG => {
            if m > 1 {
                return Err(bad_mod);
            }
            Op::Ldarg {
                d: Reg(rd),
                wide: m == 1,
                offset: imm,
            }
        }
        OP_SEL => Op::Sel {
            d: Reg(rd),
            a: Reg(ra),
            b,
            p: Pred(m & 7),
            neg: m & 8 != 0,
        },
        OP_MADWIDE_U | OP_MADWIDE_S => Op::MadWide {
            signed: opcode == OP_MADWIDE_S,
            d: Reg(rd),
            a: Reg(ra),
            b: Reg(rb),
            c: Reg(rc),
        },
        OP_ADD64 => Op::Add64 {
            d: Reg(rd),
            a: Reg(ra),
            b,
        },
        OP_SETP => {
            let cmp = *Cmp::ALL.get((m & 7) as usize).ok_or(bad_mod)?;
            let ty = *CmpType::ALL.get(((m >> 3) & 3) as usize).ok_or(bad_mod)?;
            Op::Setp {
                cmp,
                ty,
                p: p3(rd)?,
                a: Reg(ra),
                b,
            }
        }
        0x49..=0x4b => Op::Plop {
            op: PredOp::ALL[(opcode - 0x49) as usize],
            p: p3(rd)?,
            a: p3(ra)?,
            na: m & 1 != 0,
            b: p3(rb)?,
            nb: m & 2 != 0,
        },
        OP_LD | OP_LDS => Op::Ld {
            space: if opcode == OP_LD {
                Space::Global
            } else {
                Space::Shared
            },
            width: width(opcode, m)?,
            d: Reg(rd),
            addr: Reg(ra),
            offset: off,
        },
        OP_ST | OP_STS => {
            let w = width(opcode, m)?;
            if !w.valid_for_store() {
                return Err(bad_mod);
            }
            Op::St {
                space: if opcode == OP_ST {
                    Space::Global
                } else {
                    Space::Shared
                },
                width: w,
                addr: Reg(ra),
                offset: off,
                v: Reg(rb),
            }
        }
        OP_ATOM | OP_ATOMS => Op::Atom {
            space: if opcode == OP_ATOM {
                Space::Global
            } else {
                Space::Shared
            },
            op: *AtomOp::ALL.get(m as usize).ok_or(bad_mod)?,
            d: Reg(rd),
            addr: Reg(ra),
            offset: off,
            b: Reg(rb),
            c: Reg(rc),
        },
        OP_BALLOT => Op::Ballot {
            d: Reg(rd),
            src: p3(ra)?,
            neg: m & 1 != 0,
        },
        _ => {
            if let Some(op) = BinOp::from_opcode(opcode) {
                Op::Bin {
                    op,
                    d: Reg(rd),
                    a: Reg(ra),
                    b,
                }
            } else if let Some(op) = UnOp::from_opcode(opcode) {
                Op::Un {
                    op,
                    d: Reg(rd),
                    a: Reg(ra),
                }
            } else if let Some(op) = TriOp::from_opcode(opcode) {
                Op::Tri {
                    op,
                    d: Reg(rd),
                    a: Reg(ra),
                    b: Reg(rb),
                    c: Reg(rc),
                }
            } else if let Some(mode) = ShflMode::from_opcode(opcode) {
                Op::Shfl {
                    mode,
                    d: Reg(rd),
                    a: Reg(ra),
                    b,
                }
            } else if let Some(mode) = VoteMode::from_opcode(opcode) {
                Op::Vote {
                    mode,
                    p: p3(rd)?,
                    src: p3(ra)?,
                    neg: m & 1 != 0,
                }
            } else {
                return Err(InstError::UnknownOpcode(opcode));
            }
        }
    };
    let need = op.min_generation();
    if need > gen {
        return Err(InstError::NotInGeneration { opcode, need, gen });
    }
    let inst = Instruction { guard, op };
    // Field-level checks (pairs, widths) and the reserved-bit check: a valid
    // word is exactly the encoding of what it decodes to.
    let re = encode(&inst)?;
    if re != word {
        return Err(InstError::ReservedBits(re ^ word));
    }
    Ok(inst)
}
