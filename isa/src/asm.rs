//! The assembler: text (see `docs/isa.md`, "Assembly language") to a
//! validated [`Module`].

use crate::encode::{OFFSET_MAX, OFFSET_MIN};
use crate::inst::*;
use crate::module::{is_ident, max_register, ArgInfo, ArgKind, Kernel, Module, ModuleError};
use std::collections::HashMap;
use thiserror::Error;

/// An assembly error.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum AsmError {
    #[error("line {line}: {msg}")]
    Syntax { line: usize, msg: String },
    #[error("{0}")]
    Module(#[from] ModuleError),
}

fn err<T>(line: usize, msg: impl Into<String>) -> Result<T, AsmError> {
    Err(AsmError::Syntax {
        line,
        msg: msg.into(),
    })
}

/// A branch target before labels are resolved.
enum Target {
    Label(String),
    Relative(i32),
}

struct KernelBuilder {
    name: String,
    line: usize,
    code: Vec<(usize, Instruction, Option<Target>)>,
    labels: HashMap<String, u32>,
    regs: Option<u32>,
    shared: u32,
    args: Vec<ArgInfo>,
    arg_size: Option<u32>,
    hint: [u32; 3],
}

/// Assembles `src` into a module of generation `gen`.
pub fn assemble(src: &str, gen: u32) -> Result<Module, AsmError> {
    if !(1..=2).contains(&gen) {
        return Err(ModuleError::BadGeneration(gen).into());
    }
    let mut kernels: Vec<KernelBuilder> = Vec::new();
    let mut open = false;
    for (i, raw) in src.lines().enumerate() {
        let line = i + 1;
        let mut text = raw;
        for c in ["//", ";", "#"] {
            if let Some(p) = text.find(c) {
                text = &text[..p];
            }
        }
        let mut text = text.trim();
        if text.is_empty() {
            continue;
        }
        if text.starts_with('.') {
            let mut parts = text.split_whitespace();
            let dir = parts.next().unwrap_or("");
            let rest: Vec<&str> = parts.collect();
            if dir == ".kernel" {
                let [name] = rest[..] else {
                    return err(line, ".kernel takes one name");
                };
                if !is_ident(name) {
                    return err(line, format!("bad kernel name {name:?}"));
                }
                kernels.push(KernelBuilder {
                    name: name.to_string(),
                    line,
                    code: Vec::new(),
                    labels: HashMap::new(),
                    regs: None,
                    shared: 0,
                    args: Vec::new(),
                    arg_size: None,
                    hint: [0; 3],
                });
                open = true;
                continue;
            }
            let Some(k) = kernels.last_mut().filter(|_| open) else {
                return err(line, format!("{dir} outside a .kernel"));
            };
            match dir {
                ".end" => {
                    if !rest.is_empty() {
                        return err(line, ".end takes no operands");
                    }
                    open = false;
                }
                ".regs" => k.regs = Some(one_number(line, &rest)?),
                ".shared" => k.shared = one_number(line, &rest)?,
                ".argsize" => k.arg_size = Some(one_number(line, &rest)?),
                ".workgroup" => {
                    if rest.is_empty() || rest.len() > 3 {
                        return err(line, ".workgroup takes 1 to 3 sizes");
                    }
                    let mut h = [1u32; 3];
                    for (j, r) in rest.iter().enumerate() {
                        h[j] = number(line, r)?;
                    }
                    k.hint = h;
                }
                ".arg" => {
                    let (name, kind, off) = match rest[..] {
                        [n, k] => (n, k, None),
                        [n, k, o] => (n, k, Some(number(line, o)?)),
                        _ => return err(line, ".arg takes: name kind [offset]"),
                    };
                    if !is_ident(name) {
                        return err(line, format!("bad argument name {name:?}"));
                    }
                    let Some(kind) = ArgKind::from_name(kind) else {
                        return err(
                            line,
                            format!("unknown argument kind {kind:?} (u32 i32 f32 u64 ptr)"),
                        );
                    };
                    let size = kind.size();
                    let offset = match off {
                        Some(o) => o,
                        None => k
                            .args
                            .iter()
                            .map(|a| a.offset + a.size)
                            .max()
                            .unwrap_or(0)
                            .next_multiple_of(size),
                    };
                    k.args.push(ArgInfo {
                        name: name.to_string(),
                        offset,
                        size,
                        kind,
                    });
                }
                _ => return err(line, format!("unknown directive {dir}")),
            }
            continue;
        }
        let Some(k) = kernels.last_mut().filter(|_| open) else {
            return err(line, "instruction outside a .kernel");
        };
        // Labels, possibly several, possibly followed by an instruction.
        while let Some(p) = text.find(':') {
            let (l, rest) = text.split_at(p);
            let l = l.trim();
            if !is_ident(l) {
                break;
            }
            if k.labels
                .insert(l.to_string(), k.code.len() as u32)
                .is_some()
            {
                return err(line, format!("label {l} defined twice"));
            }
            text = rest[1..].trim();
        }
        if text.is_empty() {
            continue;
        }
        let (inst, target) = parse_instruction(line, text, k)?;
        let need = inst.op.min_generation();
        if need > gen {
            let m = text
                .split_whitespace()
                .find(|t| !t.starts_with('@'))
                .unwrap_or(text);
            return err(
                line,
                format!("{m} needs generation {need}, assembling for generation {gen}"),
            );
        }
        k.code.push((line, inst, target));
    }
    let mut code = Vec::new();
    let mut out = Vec::new();
    for k in kernels {
        let entry = code.len() as u32;
        let len = k.code.len() as u32;
        if len == 0 {
            return err(k.line, format!("kernel {} has no instructions", k.name));
        }
        let mut max_reg = 0;
        for (idx, (line, mut inst, target)) in k.code.into_iter().enumerate() {
            if let Some(t) = target {
                let offset = match t {
                    Target::Relative(o) => o,
                    Target::Label(l) => match k.labels.get(&l) {
                        Some(&t) => t as i32 - idx as i32,
                        None => return err(line, format!("undefined label {l}")),
                    },
                };
                inst.op = Op::Bra { offset };
            }
            if let Some(r) = max_register(&inst.op) {
                max_reg = max_reg.max(r + 1);
            }
            code.push(inst);
        }
        let arg_size = k
            .arg_size
            .unwrap_or_else(|| k.args.iter().map(|a| a.offset + a.size).max().unwrap_or(0));
        out.push(Kernel {
            name: k.name,
            entry,
            len,
            regs: k.regs.unwrap_or(max_reg.max(1)),
            shared_bytes: k.shared,
            arg_size,
            args: k.args,
            wg_hint: k.hint,
        });
    }
    Ok(Module::new(gen, code, out)?)
}

/// Parses one instruction line on its own (no labels, no argument names).
/// Branch targets must be relative (`.+N`, `.-N`).
pub fn parse_line(text: &str) -> Result<Instruction, AsmError> {
    let k = KernelBuilder {
        name: String::new(),
        line: 1,
        code: Vec::new(),
        labels: HashMap::new(),
        regs: None,
        shared: 0,
        args: Vec::new(),
        arg_size: None,
        hint: [0; 3],
    };
    let (mut inst, target) = parse_instruction(1, text.trim(), &k)?;
    match target {
        Some(Target::Relative(o)) => inst.op = Op::Bra { offset: o },
        Some(Target::Label(l)) => return err(1, format!("undefined label {l}")),
        None => {}
    }
    Ok(inst)
}

fn one_number(line: usize, rest: &[&str]) -> Result<u32, AsmError> {
    match rest {
        [n] => number(line, n),
        _ => err(line, "expected one number"),
    }
}

fn number(line: usize, s: &str) -> Result<u32, AsmError> {
    let v = if let Some(h) = s.strip_prefix("0x") {
        u32::from_str_radix(h, 16).ok()
    } else {
        s.parse::<u32>().ok()
    };
    v.map_or_else(|| err(line, format!("bad number {s:?}")), Ok)
}

/// An integer literal: decimal (optionally negative) or hex, as 32 bits.
fn int_literal(s: &str) -> Option<u32> {
    let (neg, body) = match s.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let v: i64 = if let Some(h) = body.strip_prefix("0x").or_else(|| body.strip_prefix("0X")) {
        i64::from_str_radix(h, 16).ok()?
    } else {
        if body.is_empty() || !body.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        body.parse::<i64>().ok()?
    };
    let v = if neg { -v } else { v };
    if (-(1i64 << 31)..(1i64 << 32)).contains(&v) {
        Some(v as u32)
    } else {
        None
    }
}

fn is_hex(s: &str) -> bool {
    let b = s.strip_prefix('-').unwrap_or(s);
    b.starts_with("0x") || b.starts_with("0X")
}

fn float_literal(s: &str) -> Option<u32> {
    if ["inf", "-inf", "+inf"].contains(&s) {
        return s.parse::<f32>().ok().map(f32::to_bits);
    }
    let t = s.strip_suffix('f').unwrap_or(s);
    let numeric = t.bytes().any(|b| b.is_ascii_digit())
        && t.bytes()
            .all(|b| b.is_ascii_digit() || b"+-.eE".contains(&b));
    if !numeric {
        return None;
    }
    t.parse::<f32>().ok().map(f32::to_bits)
}

/// How to read an immediate operand.
#[derive(Clone, Copy, PartialEq)]
enum ImmKind {
    /// Integers only.
    Int,
    /// Floats; decimal integers are converted to float, hex is raw bits.
    Float,
    /// Either: integers as integers, floats as their bits.
    Any,
}

struct Ops<'a> {
    line: usize,
    mnemonic: &'a str,
    ops: Vec<&'a str>,
}

impl<'a> Ops<'a> {
    fn count(&self, n: usize) -> Result<(), AsmError> {
        if self.ops.len() == n {
            Ok(())
        } else {
            err(
                self.line,
                format!(
                    "{} takes {} operand{}, got {}",
                    self.mnemonic,
                    n,
                    if n == 1 { "" } else { "s" },
                    self.ops.len()
                ),
            )
        }
    }
    fn e<T>(&self, msg: impl Into<String>) -> Result<T, AsmError> {
        err(self.line, msg)
    }
    fn reg(&self, i: usize) -> Result<Reg, AsmError> {
        let s = self.ops[i];
        match s.strip_prefix('r').and_then(|n| n.parse::<u8>().ok()) {
            Some(n) if (n as usize) < NUM_REGS && !s[1..].starts_with('+') => Ok(Reg(n)),
            _ => self.e(format!("expected a register r0..r63, got {s:?}")),
        }
    }
    fn pair(&self, i: usize) -> Result<Reg, AsmError> {
        let s = self.ops[i];
        match s.strip_prefix('d').and_then(|n| n.parse::<u8>().ok()) {
            Some(n) if (n as usize) < NUM_REGS && n % 2 == 0 && !s[1..].starts_with('+') => {
                Ok(Reg(n))
            }
            _ => self.e(format!(
                "expected a register pair d0, d2, .. d62, got {s:?}"
            )),
        }
    }
    fn pred_of(&self, s: &str) -> Result<Pred, AsmError> {
        if s == "pt" {
            return Ok(Pred::TRUE);
        }
        match s.strip_prefix('p').and_then(|n| n.parse::<u8>().ok()) {
            Some(n) if n < 7 && !s[1..].starts_with('+') => Ok(Pred(n)),
            _ => self.e(format!("expected a predicate p0..p6 or pt, got {s:?}")),
        }
    }
    fn pred(&self, i: usize) -> Result<Pred, AsmError> {
        self.pred_of(self.ops[i])
    }
    fn npred(&self, i: usize) -> Result<(Pred, bool), AsmError> {
        let s = self.ops[i];
        match s.strip_prefix('!') {
            Some(r) => Ok((self.pred_of(r.trim())?, true)),
            None => Ok((self.pred_of(s)?, false)),
        }
    }
    fn imm(&self, s: &str, kind: ImmKind) -> Result<u32, AsmError> {
        let v = match kind {
            ImmKind::Int => int_literal(s),
            ImmKind::Float => {
                if is_hex(s) {
                    int_literal(s)
                } else if let Ok(i) = s.parse::<i64>() {
                    Some((i as f32).to_bits())
                } else {
                    float_literal(s)
                }
            }
            ImmKind::Any => int_literal(s).or_else(|| float_literal(s)),
        };
        v.map_or_else(
            || {
                self.e(match kind {
                    ImmKind::Int => format!("expected a register or an integer, got {s:?}"),
                    _ => format!("expected a register or a number, got {s:?}"),
                })
            },
            Ok,
        )
    }
    fn src(&self, i: usize, kind: ImmKind) -> Result<Src, AsmError> {
        let s = self.ops[i];
        if s.starts_with('r') {
            return Ok(Src::Reg(self.reg(i)?));
        }
        Ok(Src::Imm(self.imm(s, kind)?))
    }
    fn src_pair(&self, i: usize) -> Result<Src, AsmError> {
        let s = self.ops[i];
        if s.starts_with('d') {
            return Ok(Src::Reg(self.pair(i)?));
        }
        Ok(Src::Imm(self.imm(s, ImmKind::Int)?))
    }
    /// `[base]`, `[base+off]`, `[base-off]`.
    fn mem(&self, i: usize, global: bool) -> Result<(Reg, i32), AsmError> {
        let s = self.ops[i];
        let Some(inner) = s.strip_prefix('[').and_then(|r| r.strip_suffix(']')) else {
            return self.e(format!("expected a memory operand [..], got {s:?}"));
        };
        let inner = inner.trim();
        let (base, off) = match inner.find(['+', '-']) {
            Some(p) => {
                let (b, o) = inner.split_at(p);
                let o = o.replace(' ', "");
                let v = match o.strip_prefix('+') {
                    Some(x) => x.parse::<i64>().ok().or_else(|| {
                        x.strip_prefix("0x")
                            .and_then(|h| i64::from_str_radix(h, 16).ok())
                    }),
                    None => o.parse::<i64>().ok().or_else(|| {
                        o.strip_prefix("-0x")
                            .and_then(|h| i64::from_str_radix(h, 16).ok())
                            .map(|v| -v)
                    }),
                };
                match v {
                    Some(v) if (OFFSET_MIN as i64..=OFFSET_MAX as i64).contains(&v) => {
                        (b.trim(), v as i32)
                    }
                    _ => {
                        return self.e(format!(
                            "memory offset {o:?} is not an integer in {OFFSET_MIN}..={OFFSET_MAX}"
                        ))
                    }
                }
            }
            None => (inner, 0),
        };
        let tmp = Ops {
            line: self.line,
            mnemonic: self.mnemonic,
            ops: vec![base],
        };
        let r = if global { tmp.pair(0)? } else { tmp.reg(0)? };
        Ok((r, off))
    }
    fn special(&self, i: usize) -> Result<Special, AsmError> {
        let s = self.ops[i];
        Special::ALL
            .into_iter()
            .find(|sr| sr.name() == s)
            .map_or_else(|| self.e(format!("unknown special register {s:?}")), Ok)
    }
}

fn split_operands(s: &str) -> Vec<&str> {
    if s.trim().is_empty() {
        return Vec::new();
    }
    s.split(',').map(str::trim).collect()
}

fn parse_instruction(
    line: usize,
    text: &str,
    k: &KernelBuilder,
) -> Result<(Instruction, Option<Target>), AsmError> {
    let mut text = text;
    let mut guard = Guard::ALWAYS;
    if let Some(g) = text.strip_prefix('@') {
        let end = g.find(char::is_whitespace).unwrap_or(g.len());
        let (p, rest) = g.split_at(end);
        let ops = Ops {
            line,
            mnemonic: "@",
            ops: vec![p],
        };
        let (pred, neg) = ops.npred(0)?;
        guard = Guard { pred, neg };
        text = rest.trim_start();
    }
    let end = text.find(char::is_whitespace).unwrap_or(text.len());
    let (mnemonic, rest) = text.split_at(end);
    let o = Ops {
        line,
        mnemonic,
        ops: split_operands(rest),
    };
    if o.ops.iter().any(|s| s.is_empty()) {
        return o.e("empty operand");
    }
    let mut target = None;
    let parts: Vec<&str> = mnemonic.split('.').collect();
    let op = match parts[..] {
        ["nop" | "exit" | "bar" | "trap" | "bra"] => control(&o, &mut target)?,
        ["mov" | "s2r" | "ldarg" | "sel"] => moves(&o, k)?,
        ["add", "64"]
        | ["mad", "wide", "u32" | "s32"]
        | ["setp", _, _]
        | ["pand" | "por" | "pxor"] => arithmetic(&o, &parts)?,
        ["ld" | "lds", _] | ["st" | "sts", _] | ["atom" | "atoms", ..] => memory(&o, &parts)?,
        ["vote", "ballot"] => {
            o.count(2)?;
            let (src, neg) = o.npred(1)?;
            Op::Ballot {
                d: o.reg(0)?,
                src,
                neg,
            }
        }
        _ => by_name(&o)?,
    };
    Ok((Instruction { guard, op }, target))
}

/// `nop`, `exit`, `bar`, `trap` and `bra` (whose target is left in
/// `target`).
fn control(o: &Ops, target: &mut Option<Target>) -> Result<Op, AsmError> {
    Ok(match o.mnemonic {
        "nop" => {
            o.count(0)?;
            Op::Nop
        }
        "exit" => {
            o.count(0)?;
            Op::Exit
        }
        "bar" => {
            o.count(0)?;
            Op::Bar
        }
        "trap" => {
            let code = match o.ops.len() {
                0 => 0,
                _ => {
                    o.count(1)?;
                    o.imm(o.ops[0], ImmKind::Int)?
                }
            };
            Op::Trap { code }
        }
        _ => {
            o.count(1)?;
            let t = o.ops[0];
            if let Some(r) = t.strip_prefix('.') {
                let v = r
                    .strip_prefix('+')
                    .unwrap_or(r)
                    .parse::<i32>()
                    .or_else(|_| o.e(format!("bad relative target {t:?}")))?;
                *target = Some(Target::Relative(v));
            } else if is_ident(t) {
                *target = Some(Target::Label(t.to_string()));
            } else {
                return o.e(format!("bad branch target {t:?}"));
            }
            Op::Bra { offset: 0 }
        }
    })
}

/// `mov`, `s2r`, `ldarg` and `sel`.
fn moves(o: &Ops, k: &KernelBuilder) -> Result<Op, AsmError> {
    Ok(match o.mnemonic {
        "mov" => {
            o.count(2)?;
            Op::Mov {
                d: o.reg(0)?,
                b: o.src(1, ImmKind::Any)?,
            }
        }
        "s2r" => {
            o.count(2)?;
            Op::S2r {
                d: o.reg(0)?,
                sr: o.special(1)?,
            }
        }
        "ldarg" => {
            o.count(2)?;
            let wide = o.ops[0].starts_with('d');
            let d = if wide { o.pair(0)? } else { o.reg(0)? };
            let s = o.ops[1];
            let Some(inner) = s.strip_prefix('[').and_then(|r| r.strip_suffix(']')) else {
                return o.e(format!("expected [name] or [offset], got {s:?}"));
            };
            let inner = inner.trim();
            let offset = if let Some(a) = k.args.iter().find(|a| a.name == inner) {
                a.offset
            } else if let Some(v) = int_literal(inner) {
                v
            } else {
                return o.e(format!("unknown argument {inner:?}"));
            };
            Op::Ldarg { d, wide, offset }
        }
        _ => {
            o.count(4)?;
            let (p, neg) = o.npred(3)?;
            Op::Sel {
                d: o.reg(0)?,
                a: o.reg(1)?,
                b: o.src(2, ImmKind::Any)?,
                p,
                neg,
            }
        }
    })
}

/// `add.64`, `mad.wide`, `setp` and the predicate operations.
fn arithmetic(o: &Ops, parts: &[&str]) -> Result<Op, AsmError> {
    Ok(match *parts {
        ["add", "64"] => {
            o.count(3)?;
            Op::Add64 {
                d: o.pair(0)?,
                a: o.pair(1)?,
                b: o.src_pair(2)?,
            }
        }
        ["mad", "wide", t @ ("u32" | "s32")] => {
            o.count(4)?;
            Op::MadWide {
                signed: t == "s32",
                d: o.pair(0)?,
                a: o.reg(1)?,
                b: o.reg(2)?,
                c: o.pair(3)?,
            }
        }
        ["setp", cmp, ty] => {
            o.count(3)?;
            let Some(cmp) = Cmp::ALL.into_iter().find(|c| c.name() == cmp) else {
                return o.e(format!("unknown comparison {cmp:?} (eq ne lt le gt ge)"));
            };
            let Some(ty) = CmpType::ALL.into_iter().find(|t| t.name() == ty) else {
                return o.e(format!("unknown comparison type {ty:?} (u32 s32 f32)"));
            };
            let kind = if ty == CmpType::F32 {
                ImmKind::Float
            } else {
                ImmKind::Int
            };
            Op::Setp {
                cmp,
                ty,
                p: o.pred(0)?,
                a: o.reg(1)?,
                b: o.src(2, kind)?,
            }
        }
        _ => {
            o.count(3)?;
            let op = PredOp::ALL
                .into_iter()
                .find(|p| p.mnemonic() == o.mnemonic)
                .unwrap_or(PredOp::And);
            let (a, na) = o.npred(1)?;
            let (b, nb) = o.npred(2)?;
            Op::Plop {
                op,
                p: o.pred(0)?,
                a,
                na,
                b,
                nb,
            }
        }
    })
}

/// Loads, stores and atomics, global and shared.
fn memory(o: &Ops, parts: &[&str]) -> Result<Op, AsmError> {
    Ok(match *parts {
        [m @ ("ld" | "lds"), w] => {
            o.count(2)?;
            let Some(width) = Width::ALL.into_iter().find(|x| x.load_name() == w) else {
                return o.e(format!("unknown load width {w:?} (u8 s8 u16 s16 32 64)"));
            };
            let global = m == "ld";
            let d = if width == Width::B64 {
                o.pair(0)?
            } else {
                o.reg(0)?
            };
            let (addr, offset) = o.mem(1, global)?;
            Op::Ld {
                space: if global { Space::Global } else { Space::Shared },
                width,
                d,
                addr,
                offset,
            }
        }
        [m @ ("st" | "sts"), w] => {
            o.count(2)?;
            let Some(width) = [Width::U8, Width::U16, Width::B32, Width::B64]
                .into_iter()
                .find(|x| x.store_name() == w)
            else {
                return o.e(format!("unknown store width {w:?} (8 16 32 64)"));
            };
            let global = m == "st";
            let (addr, offset) = o.mem(0, global)?;
            let v = if width == Width::B64 {
                o.pair(1)?
            } else {
                o.reg(1)?
            };
            Op::St {
                space: if global { Space::Global } else { Space::Shared },
                width,
                addr,
                offset,
                v,
            }
        }
        [m, ..] => {
            let name = o
                .mnemonic
                .strip_prefix(m)
                .and_then(|r| r.strip_prefix('.'))
                .unwrap_or("");
            let Some(op) = AtomOp::ALL.into_iter().find(|a| a.name() == name) else {
                return o.e(format!(
                "unknown atomic {name:?} (add min.u32 min.s32 max.u32 max.s32 exch cas and or xor)"
            ));
            };
            o.count(if op == AtomOp::Cas { 4 } else { 3 })?;
            let global = m == "atom";
            let (addr, offset) = o.mem(1, global)?;
            Op::Atom {
                space: if global { Space::Global } else { Space::Shared },
                op,
                d: o.reg(0)?,
                addr,
                offset,
                b: o.reg(2)?,
                c: if op == AtomOp::Cas { o.reg(3)? } else { Reg(0) },
            }
        }
        _ => return o.e(format!("unknown instruction {:?}", o.mnemonic)),
    })
}

/// The instructions of the operation tables (`BinOp`, `UnOp`, `TriOp`,
/// `ShflMode`, `VoteMode`), by mnemonic.
fn by_name(o: &Ops) -> Result<Op, AsmError> {
    Ok(if let Some(op) = BinOp::from_mnemonic(o.mnemonic) {
        o.count(3)?;
        let kind = if op.is_float() {
            ImmKind::Float
        } else {
            ImmKind::Int
        };
        Op::Bin {
            op,
            d: o.reg(0)?,
            a: o.reg(1)?,
            b: o.src(2, kind)?,
        }
    } else if let Some(op) = UnOp::from_mnemonic(o.mnemonic) {
        o.count(2)?;
        Op::Un {
            op,
            d: o.reg(0)?,
            a: o.reg(1)?,
        }
    } else if let Some(op) = TriOp::from_mnemonic(o.mnemonic) {
        o.count(4)?;
        Op::Tri {
            op,
            d: o.reg(0)?,
            a: o.reg(1)?,
            b: o.reg(2)?,
            c: o.reg(3)?,
        }
    } else if let Some(mode) = ShflMode::from_mnemonic(o.mnemonic) {
        o.count(3)?;
        Op::Shfl {
            mode,
            d: o.reg(0)?,
            a: o.reg(1)?,
            b: o.src(2, ImmKind::Int)?,
        }
    } else if let Some(mode) = VoteMode::from_mnemonic(o.mnemonic) {
        o.count(2)?;
        let (src, neg) = o.npred(1)?;
        Op::Vote {
            mode,
            p: o.pred(0)?,
            src,
            neg,
        }
    } else {
        return o.e(format!("unknown instruction {:?}", o.mnemonic));
    })
}
