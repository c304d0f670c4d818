//! The disassembler: instructions and modules back to assembly text that
//! [`crate::assemble`] accepts.

use crate::inst::*;
use crate::module::Module;
use std::collections::BTreeSet;
use std::fmt::Write;

fn int(v: u32) -> String {
    let s = v as i32;
    if (-65536..=65536).contains(&s) {
        s.to_string()
    } else {
        format!("{v:#x}")
    }
}

fn float(v: u32) -> String {
    let f = f32::from_bits(v);
    if f.is_nan() {
        format!("{v:#x}")
    } else {
        format!("{f:?}")
    }
}

fn src(b: Src, is_float: bool) -> String {
    match b {
        Src::Reg(r) => r.to_string(),
        Src::Imm(v) if is_float => float(v),
        Src::Imm(v) => int(v),
    }
}

fn pair(r: Reg) -> String {
    format!("d{}", r.0)
}

fn npred(p: Pred, neg: bool) -> String {
    if neg {
        format!("!{p}")
    } else {
        p.to_string()
    }
}

fn mem(base: String, off: i32) -> String {
    match off {
        0 => format!("[{base}]"),
        o if o > 0 => format!("[{base}+{o}]"),
        o => format!("[{base}{o}]"),
    }
}

fn addr(space: Space, r: Reg, off: i32) -> String {
    match space {
        Space::Global => mem(pair(r), off),
        Space::Shared => mem(r.to_string(), off),
    }
}

fn format_inst(inst: &Instruction, branch: &dyn Fn(i32) -> String) -> String {
    let mut s = String::new();
    if inst.guard != Guard::ALWAYS {
        let _ = write!(s, "@{} ", npred(inst.guard.pred, inst.guard.neg));
    }
    let body = match inst.op {
        Op::Nop => "nop".to_string(),
        Op::Exit => "exit".to_string(),
        Op::Bar => "bar".to_string(),
        Op::Trap { code } => format!("trap {}", int(code)),
        Op::Bra { offset } => format!("bra {}", branch(offset)),
        Op::Mov { d, b } => format!("mov {d}, {}", src(b, false)),
        Op::S2r { d, sr } => format!("s2r {d}, {}", sr.name()),
        Op::Ldarg { d, wide, offset } => {
            let d = if wide { pair(d) } else { d.to_string() };
            format!("ldarg {d}, [{offset}]")
        }
        Op::Sel { d, a, b, p, neg } => {
            format!("sel {d}, {a}, {}, {}", src(b, false), npred(p, neg))
        }
        Op::Bin { op, d, a, b } => {
            format!("{} {d}, {a}, {}", op.mnemonic(), src(b, op.is_float()))
        }
        Op::Un { op, d, a } => format!("{} {d}, {a}", op.mnemonic()),
        Op::Tri { op, d, a, b, c } => format!("{} {d}, {a}, {b}, {c}", op.mnemonic()),
        Op::Add64 { d, a, b } => {
            let b = match b {
                Src::Reg(r) => pair(r),
                Src::Imm(v) => int(v),
            };
            format!("add.64 {}, {}, {b}", pair(d), pair(a))
        }
        Op::MadWide { signed, d, a, b, c } => format!(
            "mad.wide.{} {}, {a}, {b}, {}",
            if signed { "s32" } else { "u32" },
            pair(d),
            pair(c)
        ),
        Op::Setp { cmp, ty, p, a, b } => format!(
            "setp.{}.{} {p}, {a}, {}",
            cmp.name(),
            ty.name(),
            src(b, ty == CmpType::F32)
        ),
        Op::Plop {
            op,
            p,
            a,
            na,
            b,
            nb,
        } => format!("{} {p}, {}, {}", op.mnemonic(), npred(a, na), npred(b, nb)),
        Op::Ld {
            space,
            width,
            d,
            addr: r,
            offset,
        } => {
            let m = if space == Space::Global { "ld" } else { "lds" };
            let d = if width == Width::B64 {
                pair(d)
            } else {
                d.to_string()
            };
            format!("{m}.{} {d}, {}", width.load_name(), addr(space, r, offset))
        }
        Op::St {
            space,
            width,
            addr: r,
            offset,
            v,
        } => {
            let m = if space == Space::Global { "st" } else { "sts" };
            let v = if width == Width::B64 {
                pair(v)
            } else {
                v.to_string()
            };
            format!("{m}.{} {}, {v}", width.store_name(), addr(space, r, offset))
        }
        Op::Atom {
            space,
            op,
            d,
            addr: r,
            offset,
            b,
            c,
        } => {
            let m = if space == Space::Global {
                "atom"
            } else {
                "atoms"
            };
            let mut t = format!("{m}.{} {d}, {}, {b}", op.name(), addr(space, r, offset));
            if op == AtomOp::Cas {
                let _ = write!(t, ", {c}");
            }
            t
        }
        Op::Shfl { mode, d, a, b } => format!("{} {d}, {a}, {}", mode.mnemonic(), src(b, false)),
        Op::Vote { mode, p, src, neg } => {
            format!("{} {p}, {}", mode.mnemonic(), npred(src, neg))
        }
        Op::Ballot { d, src, neg } => format!("vote.ballot {d}, {}", npred(src, neg)),
    };
    s.push_str(&body);
    s
}

/// One instruction; branch targets are relative (`bra .+3`).
pub fn disassemble_instruction(inst: &Instruction) -> String {
    format_inst(inst, &|o| {
        if o >= 0 {
            format!(".+{o}")
        } else {
            format!(".{o}")
        }
    })
}

/// A whole module as assembly. For modules whose kernels tile the code
/// section in order (what the assembler produces), assembling the output
/// gives back the identical module.
pub fn disassemble(module: &Module) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "// vgpu module, generation {} ({} instructions)",
        module.generation(),
        module.code().len()
    );
    for k in module.kernels() {
        let _ = writeln!(out, "\n.kernel {}", k.name);
        let _ = writeln!(out, ".regs {}", k.regs);
        if k.shared_bytes != 0 {
            let _ = writeln!(out, ".shared {}", k.shared_bytes);
        }
        for a in &k.args {
            let _ = writeln!(out, ".arg {} {} {}", a.name, a.kind.name(), a.offset);
        }
        let _ = writeln!(out, ".argsize {}", k.arg_size);
        if k.wg_hint != [0, 0, 0] {
            let [x, y, z] = k.wg_hint;
            let _ = writeln!(out, ".workgroup {x} {y} {z}");
        }
        let start = k.entry as usize;
        let end = start + k.len as usize;
        let Some(code) = module.code().get(start..end) else {
            continue;
        };
        let targets: BTreeSet<i64> = code
            .iter()
            .enumerate()
            .filter_map(|(i, inst)| match inst.op {
                Op::Bra { offset } => Some(i as i64 + offset as i64),
                _ => None,
            })
            .collect();
        for (i, inst) in code.iter().enumerate() {
            if targets.contains(&(i as i64)) {
                let _ = writeln!(out, "L{}:", start + i);
            }
            let text = format_inst(inst, &|o| {
                format!("L{}", start as i64 + i as i64 + o as i64)
            });
            let _ = writeln!(out, "    {text:<40} // {:4}", start + i);
        }
        let _ = writeln!(out, ".end");
    }
    out
}
