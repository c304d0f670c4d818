//! The scalar pass of a block's full-warp version: at the block's start,
//! before any of its effects, it computes the values of lanes 0 and 16 of
//! every shaped result (see `shape.rs`), the predicates of comparisons and
//! predicate operations that are the same in each half-warp, and the
//! run-time conditions the shapes rely on. The vector code of the block
//! then only computes what is not shaped; a shaped register is written to
//! the register file as `splat(base) + k` where its region ends.

use super::{Gen, Mem, CHUNKS};
use crate::inst::*;
use crate::jit::analysis;
use crate::jit::facts;
use crate::jit::runtime::{Ctx, REG_BYTES};
use crate::jit::shape::{Fact, NoWrap, Probe, Shape};
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::types::{F32, I32, I32X4, I64, I8};
use cranelift_codegen::ir::{InstBuilder, Value};
use std::mem::offset_of;
use std::rc::Rc;

/// A shaped register: its shape and the values of lanes 0 and 16.
#[derive(Clone, Debug)]
pub(super) struct Sv {
    pub(super) shape: Rc<Shape>,
    pub(super) base: [Value; 2],
}

/// How the vector code runs an instruction of a full-warp block.
#[derive(Clone, Debug)]
pub(super) enum Plan {
    /// Computed lane by lane.
    Vector,
    /// Its results are these shaped values.
    Shaped(Vec<Sv>),
    /// A predicate write: the new mask.
    Pred(Value),
}

/// What the scalar pass found for a block.
pub(super) struct Pass {
    /// Per instruction.
    pub(super) plans: Vec<Plan>,
    /// Per instruction: the shaped registers before it (those the block
    /// reads have their bases computed).
    pub(super) before: Vec<Rc<Vec<Option<Sv>>>>,
    /// The register facts after the block.
    pub(super) after: Vec<Fact>,
    /// True (an `i8`) when a run-time condition of the shapes fails.
    pub(super) fail: Option<Value>,
}

impl Gen<'_, '_> {
    /// Runs the scalar pass over `insts` (a block starting at `pc0`, clock
    /// `clock` at its start) from the register facts `facts`.
    pub(super) fn scalar_pass(
        &mut self,
        insts: &[Instruction],
        clock: Value,
        facts: &[Fact],
    ) -> Pass {
        let nregs = facts.len();
        // Registers whose bases the block may need: those read before an
        // unguarded write.
        let read = analysis::read_first(insts, nregs);
        let mut cur: Vec<Option<Sv>> = (0..nregs)
            .map(|r| {
                let s = facts[r].as_ref()?;
                if !read[r] {
                    return None;
                }
                // A shaped parameter of the hot version (`carry.rs`).
                let param = self.ssa.carry.as_ref().and_then(|c| c.shaped(r as u8));
                Some(match param {
                    Some(sv) => sv.clone(),
                    None => self.entry_sv(r as u8, s),
                })
            })
            .collect();
        let mut f: Vec<Fact> = facts.to_vec();
        let mut preds: [Option<Value>; 7] =
            std::array::from_fn(|p| Some(self.b.use_var(self.warp.v_preds[p])));
        let mut plans = Vec::with_capacity(insts.len());
        let mut before = Vec::with_capacity(insts.len());
        let mut state = Rc::new(cur.clone());
        let mut fail: Option<Value> = None;
        for (i, inst) in insts.iter().enumerate() {
            before.push(Rc::clone(&state));
            let step = facts::step(inst, &f, &self.k.sp, self.k.fma);
            let (d, n) = analysis::writes(&inst.op);
            let mut plan = Plan::Vector;
            if let Some((shapes, guards)) = step {
                let bases = self.probe(inst, &cur, clock, i as i64);
                if let Some(bases) = bases {
                    let svs: Vec<Sv> = shapes
                        .into_iter()
                        .zip(bases)
                        .map(|(s, base)| Sv {
                            shape: Rc::new(s),
                            base,
                        })
                        .collect();
                    for g in &guards {
                        let c = self.no_wrap(g, &cur, &svs);
                        fail = Some(match fail {
                            Some(x) => self.b.ins().bor(x, c),
                            None => c,
                        });
                    }
                    plan = Plan::Shaped(svs);
                }
            }
            // Predicate writes whose value is known per half.
            if let Some(m) = self.scalar_pred(inst, &cur, &preds) {
                plan = Plan::Pred(m);
            }
            // What the instruction leaves behind.
            match &plan {
                Plan::Shaped(svs) => {
                    for (k, sv) in svs.iter().enumerate() {
                        cur[d as usize + k] = Some(sv.clone());
                        f[d as usize + k] = Some(Rc::clone(&sv.shape));
                    }
                }
                _ => {
                    for k in 0..n as usize {
                        if let Some(x) = cur.get_mut(d as usize + k) {
                            *x = None;
                        }
                        if let Some(x) = f.get_mut(d as usize + k) {
                            *x = None;
                        }
                    }
                }
            }
            if let Some(p) = analysis::pred_written(&inst.op) {
                preds[p as usize] = match &plan {
                    Plan::Pred(m) => Some(*m),
                    _ => None,
                };
            }
            if n > 0 {
                state = Rc::new(cur.clone());
            }
            plans.push(plan);
        }
        Pass {
            plans,
            before,
            after: f,
            fail,
        }
    }

    /// Register `r`'s bases at the block's start, from its fact `s`: known
    /// constants, or loaded from lanes 0 and 16 of the register file.
    pub(super) fn entry_sv(&mut self, r: u8, s: &Rc<Shape>) -> Sv {
        let f = self.mf(Mem::Regs);
        let off = r as i32 * REG_BYTES;
        let b0 = match s.known {
            Some(v) => self.c32(v),
            None => {
                let rf = self.regs();
                self.b.ins().load(I32, f, rf, off)
            }
        };
        let b1 = match s.link {
            Some(0) => b0,
            Some(l) => self.b.ins().iadd_imm_s(b0, l as i32 as i64),
            None => {
                let rf = self.regs();
                self.b.ins().load(I32, f, rf, off + 64)
            }
        };
        Sv {
            shape: Rc::clone(s),
            base: [b0, b1],
        }
    }

    /// Whether `g`'s condition fails (an `i8`).
    fn no_wrap(&mut self, g: &NoWrap, cur: &[Option<Sv>], res: &[Sv]) -> Value {
        let base = match g.what {
            Probe::Reg(r) => cur.get(r as usize).cloned().flatten().map(|s| s.base),
            Probe::Result => res.first().map(|s| s.base),
        };
        let Some(base) = base else {
            return self.b.ins().iconst(I8, 1);
        };
        let (lo, hi) = if g.signed {
            (i32::MIN as i64, i32::MAX as i64)
        } else {
            (0, u32::MAX as i64)
        };
        let mut bad: Option<Value> = None;
        for (h, &v) in base.iter().enumerate() {
            let same = base[1] == base[0] && g.min[1] == g.min[0] && g.max[1] == g.max[0];
            if h == 1 && (g.whole || same) {
                break;
            }
            let v = if g.signed {
                self.b.ins().sextend(I64, v)
            } else {
                self.b.ins().uextend(I64, v)
            };
            let a = self.b.ins().iadd_imm_s(v, g.min[h]);
            let b = self.b.ins().iadd_imm_s(v, g.max[h]);
            let c1 = self.b.ins().icmp_imm_s(IntCC::SignedLessThan, a, lo);
            let c2 = self.b.ins().icmp_imm_s(IntCC::SignedGreaterThan, b, hi);
            let c = self.b.ins().bor(c1, c2);
            bad = Some(match bad {
                Some(x) => self.b.ins().bor(x, c),
                None => c,
            });
        }
        bad.unwrap_or_else(|| self.b.ins().iconst(I8, 0))
    }

    /// The values of lanes 0 and 16 of the results of `inst` (the `k`-th
    /// instruction of the block), from the shaped operands in `cur`.
    fn probe(
        &mut self,
        inst: &Instruction,
        cur: &[Option<Sv>],
        clock: Value,
        k: i64,
    ) -> Option<Vec<[Value; 2]>> {
        let reg = |r: Reg| cur.get(r.0 as usize).cloned().flatten().map(|s| s.base);
        let per_half = |g: &mut Self, f: &mut dyn FnMut(&mut Self, usize) -> Option<Vec<Value>>| {
            let a = f(g, 0)?;
            let b = f(g, 1)?;
            Some(
                a.into_iter()
                    .zip(b)
                    .map(|(x, y)| [x, y])
                    .collect::<Vec<_>>(),
            )
        };
        match inst.op {
            Op::Mov { b, .. } => {
                let v = self.src_bases(b, cur)?;
                Some(vec![v])
            }
            Op::Ldarg { wide, offset, .. } => {
                let f = self.mf(Mem::Fixed);
                if wide && offset % 8 == 0 {
                    // One 64-bit load, its halves taken so that an address
                    // made from them is the loaded value (`join64`).
                    let w = self.b.ins().load(I64, f, self.mem.args, offset as i32);
                    let [lo, hi] = self.unpair64(w)[..] else {
                        return None;
                    };
                    return Some(vec![[lo, lo], [hi, hi]]);
                }
                let lo = self.b.ins().load(I32, f, self.mem.args, offset as i32);
                let mut v = vec![[lo, lo]];
                if wide {
                    let hi = self.b.ins().load(I32, f, self.mem.args, offset as i32 + 4);
                    v.push([hi, hi]);
                }
                Some(v)
            }
            Op::S2r { sr, .. } => Some(vec![self.special_bases(sr, clock, k)]),
            Op::Bin { op, a, b, .. } if !op.is_float() => {
                let (a, b) = (reg(a)?, self.src_bases(b, cur)?);
                let r = per_half(self, &mut |g, h| Some(vec![g.int_bin(op, a[h], b[h])?]))?;
                Some(r)
            }
            Op::Tri {
                op: TriOp::Mad,
                a,
                b,
                c,
                ..
            } => {
                let (a, b, c) = (reg(a)?, reg(b)?, reg(c)?);
                per_half(self, &mut |g, h| {
                    let p = g.b.ins().imul(a[h], b[h]);
                    Some(vec![g.b.ins().iadd(p, c[h])])
                })
            }
            Op::Add64 { a, b, .. } => {
                let (alo, ahi) = (reg(a)?, reg(Reg(a.0 + 1))?);
                let (blo, bhi) = match b {
                    Src::Reg(r) => (reg(r)?, reg(Reg(r.0 + 1))?),
                    Src::Imm(v) => {
                        let lo = self.c32(v);
                        let hi = self.c32(((v as i32) >> 31) as u32);
                        ([lo, lo], [hi, hi])
                    }
                };
                per_half(self, &mut |g, h| {
                    let x = g.pair64(alo[h], ahi[h]);
                    let y = g.pair64(blo[h], bhi[h]);
                    let s = g.b.ins().iadd(x, y);
                    Some(g.unpair64(s))
                })
            }
            Op::MadWide {
                signed, a, b, c, ..
            } => {
                let (a, b) = (reg(a)?, reg(b)?);
                let (clo, chi) = (reg(c)?, reg(Reg(c.0 + 1))?);
                per_half(self, &mut |g, h| {
                    let ext = |g: &mut Self, v| {
                        if signed {
                            g.b.ins().sextend(I64, v)
                        } else {
                            g.b.ins().uextend(I64, v)
                        }
                    };
                    let x = ext(g, a[h]);
                    let y = ext(g, b[h]);
                    let p = g.b.ins().imul(x, y);
                    let c = g.pair64(clo[h], chi[h]);
                    let s = g.b.ins().iadd(p, c);
                    Some(g.unpair64(s))
                })
            }
            // Floating point and the rest: the vector code on a vector
            // holding the two lanes' operands.
            _ => self.probe_vector(inst, cur),
        }
    }

    fn pair64(&mut self, lo: Value, hi: Value) -> Value {
        self.join64(lo, hi)
    }

    /// The 64-bit value whose low and high words are `lo` and `hi`: the
    /// value they were taken from where they are its halves (`unpair64`),
    /// which Cranelift does not see through, else `hi << 32 | lo`.
    pub(super) fn join64(&mut self, lo: Value, hi: Value) -> Value {
        if let Some(v) = self.halves_of(lo, hi) {
            return v;
        }
        let lo = self.b.ins().uextend(I64, lo);
        let hi = self.b.ins().uextend(I64, hi);
        let hi = self.b.ins().ishl_imm_s(hi, 32);
        self.b.ins().bor(hi, lo)
    }

    /// `v` if `lo` is `ireduce(v)` and `hi` is `ireduce(v >> 32)`.
    fn halves_of(&self, lo: Value, hi: Value) -> Option<Value> {
        use cranelift_codegen::ir::{InstructionData as D, Opcode};
        let dfg = &self.b.func.dfg;
        let arg = |v: Value, op: Opcode| match dfg.insts[dfg.value_def(v).inst()?] {
            D::Unary { opcode, arg } if opcode == op => Some(arg),
            _ => None,
        };
        let v = arg(lo, Opcode::Ireduce)?;
        let h = arg(hi, Opcode::Ireduce)?;
        match dfg.insts[dfg.value_def(h).inst()?] {
            D::Binary {
                opcode: Opcode::Ushr,
                args: [x, n],
            } if x == v && self.const_of(n) == Some(32) => Some(v),
            _ => None,
        }
    }

    fn unpair64(&mut self, v: Value) -> Vec<Value> {
        let lo = self.b.ins().ireduce(I32, v);
        let hi = self.b.ins().ushr_imm_s(v, 32);
        let hi = self.b.ins().ireduce(I32, hi);
        vec![lo, hi]
    }

    /// A 32-bit integer operation on scalars (`None`: not one of these).
    fn int_bin(&mut self, op: BinOp, a: Value, b: Value) -> Option<Value> {
        use BinOp::*;
        let i = self.b.ins();
        Some(match op {
            Add => i.iadd(a, b),
            Sub => i.isub(a, b),
            Mul => i.imul(a, b),
            And => i.band(a, b),
            Or => i.bor(a, b),
            Xor => i.bxor(a, b),
            MinU => i.umin(a, b),
            MinS => i.smin(a, b),
            MaxU => i.umax(a, b),
            MaxS => i.smax(a, b),
            Shl | ShrU | ShrS => {
                // Shifts by a register are not lane-local in the code
                // generator's sense (`analysis::kind`); by an immediate:
                let n = self.const_of(b)?;
                let i = self.b.ins();
                match op {
                    Shl if n >= 32 => i.iconst(I32, 0),
                    ShrU if n >= 32 => i.iconst(I32, 0),
                    Shl => i.ishl_imm_s(a, n as i64),
                    ShrU => i.ushr_imm_s(a, n as i64),
                    _ => i.sshr_imm_s(a, n.min(31) as i64),
                }
            }
            _ => return None,
        })
    }

    /// The bases of a source operand.
    fn src_bases(&mut self, b: Src, cur: &[Option<Sv>]) -> Option<[Value; 2]> {
        match b {
            Src::Reg(r) => cur.get(r.0 as usize).cloned().flatten().map(|s| s.base),
            Src::Imm(v) => {
                let c = self.c32(v);
                Some([c, c])
            }
        }
    }

    /// Lanes 0 and 16 of special register `sr`.
    fn special_bases(&mut self, sr: Special, clock: Value, k: i64) -> [Value; 2] {
        use Special::*;
        let d = |x: Special| sr as usize - x as usize;
        let fx = self.mf(Mem::Fixed);
        let ctx_u32 = |g: &mut Self, off: usize| {
            let f = g.mf(Mem::CtxFixed);
            g.b.ins().load(I32, f, g.mem.ctx, off as i32)
        };
        let tid = |g: &mut Self, d: usize| -> [Value; 2] {
            let tids = g.tids();
            let t0 = g.b.ins().load(I32, fx, tids, (d * 128) as i32);
            let t1 = g.b.ins().load(I32, fx, tids, (d * 128 + 64) as i32);
            [t0, t1]
        };
        let one = |v: Value| [v, v];
        match sr {
            TidX | TidY | TidZ => tid(self, d(TidX)),
            GidX | GidY | GidZ => {
                let d = d(GidX);
                let wg = ctx_u32(self, offset_of!(Ctx, wg) + 4 * d);
                let n = ctx_u32(self, offset_of!(Ctx, ntid) + 4 * d);
                let first = self.b.ins().imul(wg, n);
                let t = tid(self, d);
                [
                    self.b.ins().iadd(first, t[0]),
                    self.b.ins().iadd(first, t[1]),
                ]
            }
            NtidX | NtidY | NtidZ => one(ctx_u32(self, offset_of!(Ctx, ntid) + 4 * d(NtidX))),
            WgidX | WgidY | WgidZ => one(ctx_u32(self, offset_of!(Ctx, wg) + 4 * d(WgidX))),
            NwgX | NwgY | NwgZ => one(ctx_u32(self, offset_of!(Ctx, nwg) + 4 * d(NwgX))),
            LaneId => [self.c32(0), self.c32(16)],
            WarpId => one(self.warp_index()),
            NWarps => one(ctx_u32(self, offset_of!(Ctx, nwarps))),
            Clock | ClockHi => {
                let c = self.b.ins().iadd_imm_s(clock, k);
                let c = if sr == ClockHi {
                    self.b.ins().ushr_imm_s(c, 32)
                } else {
                    c
                };
                one(self.b.ins().ireduce(I32, c))
            }
        }
    }

    /// Lanes 0 and 16 of the results of a lane-local instruction whose
    /// register operands are shaped: its vector code applied to a vector
    /// holding the operands of lane 0 (lane 0 of the vector) and lane 16
    /// (lane 1).
    fn probe_vector(&mut self, inst: &Instruction, cur: &[Option<Sv>]) -> Option<Vec<[Value; 2]>> {
        let (d, n) = analysis::writes(&inst.op);
        let mut regs = Vec::new();
        for (r, _) in analysis::reads(&inst.op) {
            let b = cur.get(r as usize).cloned().flatten()?.base;
            let v = self.b.ins().splat(I32X4, b[0]);
            let v = self.b.ins().insertlane(v, b[1], 1);
            regs.push((r, v));
        }
        let out = self.lane_probe(inst, &regs)?;
        let _ = d;
        Some(
            out.into_iter()
                .take(n as usize)
                .map(|v| {
                    [
                        self.b.ins().extractlane(v, 0),
                        self.b.ins().extractlane(v, 1),
                    ]
                })
                .collect(),
        )
    }

    /// The new mask of a predicate write whose operands are the same in
    /// each half-warp (shaped with `k = 0`) or are known masks.
    fn scalar_pred(
        &mut self,
        inst: &Instruction,
        cur: &[Option<Sv>],
        preds: &[Option<Value>; 7],
    ) -> Option<Value> {
        let pv = |p: Pred, neg: bool, g: &mut Self| -> Option<Value> {
            let v = if p == Pred::TRUE {
                g.c32(u32::MAX)
            } else {
                preds[(p.0 as usize).min(6)]?
            };
            Some(if neg { g.b.ins().bnot(v) } else { v })
        };
        let new = match inst.op {
            Op::Setp { cmp, ty, p, a, b } if p != Pred::TRUE => {
                let a = cur.get(a.0 as usize).cloned().flatten()?;
                let bb = self.src_bases(b, cur)?;
                let b_ok = match b {
                    Src::Reg(r) => cur.get(r.0 as usize).cloned().flatten()?.shape.per_half(),
                    Src::Imm(_) => true,
                };
                if !b_ok {
                    return None;
                }
                if !a.shape.per_half() {
                    if ty == CmpType::F32 {
                        return None;
                    }
                    return Some(self.range_compare(cmp, ty == CmpType::S32, &a, bb))
                        .and_then(|m| self.guarded_pred(inst, m, preds));
                }
                let mut halves = [None; 2];
                for h in 0..2 {
                    if h == 1 && a.base[1] == a.base[0] && bb[1] == bb[0] {
                        halves[1] = halves[0];
                        break;
                    }
                    halves[h] = Some(self.compare(cmp, ty, a.base[h], bb[h]));
                }
                let (c0, c1) = (halves[0]?, halves[1]?);
                let lo = self.c32(0xffff);
                let hi = self.c32(0xffff_0000);
                let z = self.c32(0);
                let m0 = self.b.ins().select(c0, lo, z);
                let m1 = self.b.ins().select(c1, hi, z);
                self.b.ins().bor(m0, m1)
            }
            Op::Plop {
                op,
                p,
                a,
                na,
                b,
                nb,
            } if p != Pred::TRUE => {
                let x = pv(a, na, self)?;
                let y = pv(b, nb, self)?;
                match op {
                    PredOp::And => self.b.ins().band(x, y),
                    PredOp::Or => self.b.ins().bor(x, y),
                    PredOp::Xor => self.b.ins().bxor(x, y),
                }
            }
            _ => return None,
        };
        self.guarded_pred(inst, new, preds)
    }

    /// The mask predicate write `inst` leaves: `new` in the lanes of its
    /// guard, the predicate's old value elsewhere.
    fn guarded_pred(
        &mut self,
        inst: &Instruction,
        new: Value,
        preds: &[Option<Value>; 7],
    ) -> Option<Value> {
        let p = analysis::pred_written(&inst.op)?;
        if inst.guard == Guard::ALWAYS {
            return Some(new);
        }
        // Blend under the guard (the warp is full: the guard's mask).
        let g = inst.guard.pred;
        let m = if g == Pred::TRUE {
            self.c32(u32::MAX)
        } else {
            preds[(g.0 as usize).min(6)]?
        };
        let m = if inst.guard.neg {
            self.b.ins().bnot(m)
        } else {
            m
        };
        let old = preds[p as usize]?;
        let keep = self.b.ins().band_not(old, m);
        let set = self.b.ins().band(new, m);
        Some(self.b.ins().bor(keep, set))
    }

    /// The mask of the integer comparison `a cmp b` for a shaped `a` and
    /// a `b` the same in each half: from the range of each half's lanes
    /// when that decides every lane (no lane wraps, and the range lies on
    /// one side of `b`), else lane by lane.
    fn range_compare(&mut self, cmp: Cmp, signed: bool, a: &Sv, b: [Value; 2]) -> Value {
        let (lo_b, hi_b) = if signed {
            (i32::MIN as i64, i32::MAX as i64)
        } else {
            (0, u32::MAX as i64)
        };
        let ext = |g: &mut Self, v: Value| {
            if signed {
                g.b.ins().sextend(I64, v)
            } else {
                g.b.ins().uextend(I64, v)
            }
        };
        let mut decided: Option<Value> = None;
        let mut mask: Option<Value> = None;
        // Linked halves and a uniform `b`: one range for the whole warp.
        let whole = a.shape.whole().filter(|_| b[0] == b[1]).map(|w| {
            (
                w.iter().copied().min().unwrap_or(0),
                w.iter().copied().max().unwrap_or(0),
            )
        });
        for h in 0..if whole.is_some() { 1 } else { 2 } {
            let (kmin, kmax) = whole.unwrap_or_else(|| a.shape.range(h));
            let base = ext(self, a.base[h]);
            let bv = ext(self, b[h]);
            let lo = self.b.ins().iadd_imm_s(base, kmin);
            let hi = self.b.ins().iadd_imm_s(base, kmax);
            let w1 = self
                .b
                .ins()
                .icmp_imm_s(IntCC::SignedGreaterThanOrEqual, lo, lo_b);
            let w2 = self
                .b
                .ins()
                .icmp_imm_s(IntCC::SignedLessThanOrEqual, hi, hi_b);
            let ok = self.b.ins().band(w1, w2);
            let c = |g: &mut Self, cc, x, y| g.b.ins().icmp(cc, x, y);
            use IntCC::*;
            let (all, none) = match cmp {
                Cmp::Lt => (
                    c(self, SignedLessThan, hi, bv),
                    c(self, SignedGreaterThanOrEqual, lo, bv),
                ),
                Cmp::Le => (
                    c(self, SignedLessThanOrEqual, hi, bv),
                    c(self, SignedGreaterThan, lo, bv),
                ),
                Cmp::Gt => (
                    c(self, SignedGreaterThan, lo, bv),
                    c(self, SignedLessThanOrEqual, hi, bv),
                ),
                Cmp::Ge => (
                    c(self, SignedGreaterThanOrEqual, lo, bv),
                    c(self, SignedLessThan, hi, bv),
                ),
                Cmp::Eq | Cmp::Ne => {
                    // Offsets differ within the half: never all equal.
                    let below = c(self, SignedLessThan, bv, lo);
                    let above = self.b.ins().icmp(IntCC::SignedGreaterThan, bv, hi);
                    let out = self.b.ins().bor(below, above);
                    let f = self.b.ins().iconst(I8, 0);
                    if cmp == Cmp::Eq {
                        (f, out)
                    } else {
                        (out, f)
                    }
                }
            };
            let either = self.b.ins().bor(all, none);
            let d = self.b.ins().band(ok, either);
            decided = Some(match decided {
                Some(x) => self.b.ins().band(x, d),
                None => d,
            });
            let half = self.c32(match (whole, h) {
                (Some(_), _) => u32::MAX,
                (None, 0) => 0xffff,
                (None, _) => 0xffff_0000,
            });
            let z = self.c32(0);
            let m = self.b.ins().select(all, half, z);
            mask = Some(match mask {
                Some(x) => self.b.ins().bor(x, m),
                None => m,
            });
        }
        let (Some(decided), Some(mask)) = (decided, mask) else {
            return self.c32(0);
        };
        let (lanes, join) = (self.b.create_block(), self.b.create_block());
        self.b.append_block_param(join, I32);
        self.b.ins().brif(decided, join, &[mask.into()], lanes, &[]);
        self.b.switch_to_block(lanes);
        let cc = compare_cc(cmp, signed);
        let mut bits: Option<Value> = None;
        for c in 0..CHUNKS {
            let av = self.materialize(a, c);
            let bv = self.b.ins().splat(I32X4, b[c / (CHUNKS / 2)]);
            let r = self.b.ins().icmp(cc, av, bv);
            let m = self.b.ins().vhigh_bits(I32, r);
            let m = self.b.ins().ishl_imm_s(m, 4 * c as i64);
            bits = Some(match bits {
                Some(x) => self.b.ins().bor(x, m),
                None => m,
            });
        }
        let bits = bits.unwrap_or_else(|| self.c32(0));
        self.b.ins().jump(join, &[bits.into()]);
        self.b.switch_to_block(join);
        self.b.block_params(join)[0]
    }

    /// `a cmp b` on scalars (an `i8`).
    fn compare(&mut self, cmp: Cmp, ty: CmpType, a: Value, b: Value) -> Value {
        if ty == CmpType::F32 {
            let f = cranelift_codegen::ir::MemFlagsData::new();
            let x = self.b.ins().bitcast(F32, f, a);
            let y = self.b.ins().bitcast(F32, f, b);
            let cc = match cmp {
                Cmp::Eq => FloatCC::Equal,
                Cmp::Ne => FloatCC::NotEqual,
                Cmp::Lt => FloatCC::LessThan,
                Cmp::Le => FloatCC::LessThanOrEqual,
                Cmp::Gt => FloatCC::GreaterThan,
                Cmp::Ge => FloatCC::GreaterThanOrEqual,
            };
            return self.b.ins().fcmp(cc, x, y);
        }
        self.b.ins().icmp(compare_cc(cmp, ty == CmpType::S32), a, b)
    }
}

/// The condition code of an integer comparison.
pub(super) fn compare_cc(cmp: Cmp, signed: bool) -> IntCC {
    match (cmp, signed) {
        (Cmp::Eq, _) => IntCC::Equal,
        (Cmp::Ne, _) => IntCC::NotEqual,
        (Cmp::Lt, false) => IntCC::UnsignedLessThan,
        (Cmp::Le, false) => IntCC::UnsignedLessThanOrEqual,
        (Cmp::Gt, false) => IntCC::UnsignedGreaterThan,
        (Cmp::Ge, false) => IntCC::UnsignedGreaterThanOrEqual,
        (Cmp::Lt, true) => IntCC::SignedLessThan,
        (Cmp::Le, true) => IntCC::SignedLessThanOrEqual,
        (Cmp::Gt, true) => IntCC::SignedGreaterThan,
        (Cmp::Ge, true) => IntCC::SignedGreaterThanOrEqual,
    }
}
