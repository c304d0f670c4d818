//! Per-lane instructions: a region of consecutive lane-local instructions
//! runs chunk by chunk (4 lanes in one SIMD register), all instructions of
//! the region for lanes 0–3, then for lanes 4–7, and so on. Lanes are
//! independent in these instructions (no memory, no cross-lane reads), so
//! this order gives the interpreter's results. Registers and predicates of
//! a chunk stay in SSA values during the region and are written back at its
//! end. A region never reads a guard predicate it writes itself (the caller
//! splits there), so guard masks are computed once at its start.
//!
//! In a block's partial version every write is blended under the
//! instruction's lane mask. In a full-warp version unguarded instructions
//! write whole registers, and what the scalar pass (`scalar.rs`) computed
//! is not computed again: a shaped result is written back as
//! `splat(base) + k`, a shaped operand whose offsets are 0 in a chunk is
//! a splat of its base.

use super::scalar::{Plan, Sv};
use super::{Gen, Mem, CHUNKS};
use crate::inst::*;
use crate::jit::analysis;
use crate::math::CANONICAL_NAN;
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::types::{F32X4, I32, I32X4, I64X2};
use cranelift_codegen::ir::{InstBuilder, MemFlagsData, Value};
use std::collections::HashMap;
use std::mem::offset_of;
use std::rc::Rc;

use crate::jit::runtime::Ctx;

/// What the scalar pass says about a region: the plans of its
/// instructions and the shaped registers at its start.
pub(super) type RegionPlan<'p> = (&'p [Plan], Rc<Vec<Option<Sv>>>);

/// A 32-bit memory instruction of a region whose conditions hold (see
/// `fused.rs`): lane `l` accesses `ptrs[l / 16] + k[l]`.
pub(super) struct RegionMem {
    pub(super) load: bool,
    pub(super) data: u8,
    pub(super) ptrs: [Value; 2],
    pub(super) k: [i64; WARP_SIZE],
    pub(super) flags: MemFlagsData,
}

/// A chunk of a register in a region.
#[derive(Clone, Debug)]
enum Cv {
    Vec(Value),
    /// A shaped value, materialised where needed.
    Shaped(Sv),
}

/// A chunk of a predicate in a region.
#[derive(Clone, Copy, Debug)]
enum Pv {
    /// Lane masks.
    Vec(Value),
    /// The whole predicate, as a scalar mask.
    Mask(Value),
}

/// One chunk's registers and predicates during a region: value, dirty.
#[derive(Default)]
struct Chunk {
    c: usize,
    regs: HashMap<u8, (Cv, bool)>,
    preds: HashMap<u8, (Pv, bool)>,
    masks: HashMap<Value, Value>,
    /// Shaped registers at the region's start (clean in the register file).
    state: Rc<Vec<Option<Sv>>>,
    /// Predicate masks at the region's start.
    pstart: [Option<Value>; 7],
}

/// `i32x4` lanes 0..3 interleaved with `hi`: the 64-bit values of lanes
/// 0, 1 (`LO`) and 2, 3 (`HI`) as `i64x2`.
const ZIP_LO: [u8; 16] = [0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23];
const ZIP_HI: [u8; 16] = [8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31];
/// Low and high halves of two `i64x2` back into `i32x4`.
const UNZIP_LO: [u8; 16] = [0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27];
const UNZIP_HI: [u8; 16] = [4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31];

impl Gen<'_, '_> {
    /// Emits `insts` (all `Kind::Lane`), the `first`-th instruction of a
    /// block whose clock at entry is `base`: in a full-warp version with
    /// the scalar pass's plans and the shaped registers at the region's
    /// start (`plan`), else for the active group. Of the registers it
    /// writes, those of `r0..r63` not in `live` (the registers live after
    /// it, `regflow::live_in`) are not written back: no lane reads them
    /// again before writing them. `mem[k]`, where given, is how the
    /// memory instruction `insts[k]` accesses memory (full-warp code only).
    pub(super) fn emit_region(
        &mut self,
        insts: &[Instruction],
        first: usize,
        base: Value,
        plan: Option<RegionPlan<'_>>,
        live: u64,
        mem: &[Option<RegionMem>],
    ) {
        let masks: Vec<Value> = insts.iter().map(|i| self.guard_mask(i.guard)).collect();
        let canon = analysis::canon_needed(insts);
        for &m in &masks {
            self.add_threads(m);
        }
        let full = plan.is_some();
        let (plans, state) = match plan {
            Some((p, s)) => (Some(p), s),
            None => (None, Rc::new(Vec::new())),
        };
        let used = self.k.used_preds;
        let pstart: [Option<Value>; 7] = std::array::from_fn(|p| {
            (used >> p & 1 != 0).then(|| self.b.use_var(self.warp.v_preds[p]))
        });
        // Per predicate written: the chunks' bits, or the whole mask.
        let mut pout: HashMap<u8, Value> = HashMap::new();
        for c in 0..CHUNKS {
            let mut ch = Chunk {
                c,
                state: Rc::clone(&state),
                pstart,
                ..Chunk::default()
            };
            // Carried registers (`carry.rs`) start as their SSA values,
            // not yet in the register file.
            if let (true, Some(cy)) = (full, self.ssa.carry.as_ref()) {
                for (i, &r) in cy.regs.iter().enumerate() {
                    ch.regs.insert(r, (Cv::Vec(cy.vals[i][c]), true));
                }
            }
            for (k, inst) in insts.iter().enumerate() {
                if let Some(Some(m)) = mem.get(k) {
                    if m.load {
                        let v = self.chunk_load(&m.ptrs, &m.k, c, m.flags);
                        ch.regs.insert(m.data, (Cv::Vec(v), true));
                    } else {
                        let v = self.reg(&mut ch, m.data);
                        self.chunk_store(&m.ptrs, &m.k, c, m.flags, v);
                    }
                    continue;
                }
                let mv = if full && inst.guard == Guard::ALWAYS {
                    None
                } else {
                    Some(self.chunk_mask(&mut ch, masks[k]))
                };
                match plans.map(|p| &p[k]) {
                    Some(Plan::Shaped(svs)) => {
                        let (d, _) = analysis::writes(&inst.op);
                        for (i, sv) in svs.iter().enumerate() {
                            ch.regs.insert(d + i as u8, (Cv::Shaped(sv.clone()), true));
                        }
                    }
                    Some(Plan::Pred(m)) => {
                        if let Some(p) = analysis::pred_written(&inst.op) {
                            ch.preds.insert(p, (Pv::Mask(*m), true));
                        }
                    }
                    _ => self.lane_op(&mut ch, inst, mv, first + k, base, canon[k]),
                }
            }
            // Carried registers leave as SSA values too.
            if let Some(regs) = full
                .then(|| self.ssa.carry.as_ref().map(|c| c.regs.clone()))
                .flatten()
            {
                for (i, r) in regs.into_iter().enumerate() {
                    let v = self.reg(&mut ch, r);
                    ch.regs.remove(&r);
                    if let Some(cy) = self.ssa.carry.as_mut() {
                        cy.vals[i][c] = v;
                    }
                }
            }
            self.flush(ch, &mut pout, live);
        }
        let mut pout: Vec<_> = pout.into_iter().collect();
        pout.sort_by_key(|(p, _)| *p);
        for (p, v) in pout {
            self.b.def_var(self.warp.v_preds[p as usize], v);
        }
    }

    fn chunk_mask(&mut self, ch: &mut Chunk, m: Value) -> Value {
        if let Some(&v) = ch.masks.get(&m) {
            return v;
        }
        let v = self.mask_vec(m, ch.c);
        ch.masks.insert(m, v);
        v
    }

    /// Register `r`'s lanes of chunk `c` from the shaped value `sv`.
    pub(super) fn materialize(&mut self, sv: &Sv, c: usize) -> Value {
        let g = c / (CHUNKS / 2);
        let k: [u32; 4] = std::array::from_fn(|i| sv.shape.k[4 * c + i]);
        if let Some(b) = sv.shape.known_base(g) {
            // A constant: from the table, where it is used (an operand
            // the host instruction can read from memory).
            return self.vconst(k.map(|k| k.wrapping_add(b)));
        }
        let b = self.b.ins().splat(I32X4, sv.base[g]);
        if k == [0; 4] {
            return b;
        }
        let kv = self.vconst(k);
        self.b.ins().iadd(b, kv)
    }

    /// Writes the chunk's dirty registers that are `live` back and collects
    /// its predicate bits in `pout`.
    fn flush(&mut self, ch: Chunk, pout: &mut HashMap<u8, Value>, live: u64) {
        let c = ch.c;
        let mut regs: Vec<_> = ch
            .regs
            .into_iter()
            .filter(|(r, (_, d))| *d && (*r >= 64 || live >> r & 1 != 0))
            .collect();
        regs.sort_by_key(|(r, _)| *r);
        for (r, (v, _)) in regs {
            let v = match v {
                Cv::Vec(v) => v,
                Cv::Shaped(sv) => self.materialize(&sv, c),
            };
            self.store_reg(r, c, v);
        }
        let mut preds: Vec<_> = ch.preds.into_iter().filter(|(_, (_, d))| *d).collect();
        preds.sort_by_key(|(p, _)| *p);
        for (p, (v, _)) in preds {
            match v {
                Pv::Mask(m) => {
                    pout.insert(p, m);
                }
                Pv::Vec(v) => {
                    let bits = self.b.ins().vhigh_bits(I32, v);
                    let bits = self.b.ins().ishl_imm_s(bits, (4 * c) as i64);
                    let new = match pout.get(&p) {
                        Some(&acc) => self.b.ins().bor(acc, bits),
                        None => bits,
                    };
                    pout.insert(p, new);
                }
            }
        }
    }

    fn reg(&mut self, ch: &mut Chunk, r: u8) -> Value {
        match ch.regs.get(&r).cloned() {
            Some((Cv::Vec(v), _)) => return v,
            Some((Cv::Shaped(sv), dirty)) => {
                let v = self.materialize(&sv, ch.c);
                ch.regs.insert(r, (Cv::Vec(v), dirty));
                return v;
            }
            None => {}
        }
        let shaped = ch.state.get(r as usize).cloned().flatten();
        // A shaped parameter (`carry.rs`) is not in the register file.
        let param = self.ssa.carry.as_ref().and_then(|c| c.shaped(r).cloned());
        let v = match (shaped, param) {
            (_, Some(sv)) => self.materialize(&sv, ch.c),
            (Some(sv), None) if (0..4).all(|i| sv.shape.k[4 * ch.c + i] == 0) => {
                self.materialize(&sv, ch.c)
            }
            _ => self.load_reg(r, ch.c),
        };
        ch.regs.insert(r, (Cv::Vec(v), false));
        v
    }

    /// Writes `v` to register `r` in the lanes of `mv` (all lanes: `None`).
    fn set_reg(&mut self, ch: &mut Chunk, r: u8, v: Value, mv: Option<Value>) {
        let new = match mv {
            Some(mv) => {
                let old = self.reg(ch, r);
                self.b.ins().bitselect(mv, v, old)
            }
            None => v,
        };
        ch.regs.insert(r, (Cv::Vec(new), true));
    }

    fn src(&mut self, ch: &mut Chunk, b: Src) -> Value {
        match b {
            Src::Reg(r) => self.reg(ch, r.0),
            Src::Imm(v) => self.vsplat(v),
        }
    }

    /// Predicate `p` of this chunk's lanes as lane masks (negated if `neg`).
    fn pred(&mut self, ch: &mut Chunk, p: Pred, neg: bool) -> Value {
        let v = if p == Pred::TRUE {
            self.vsplat(u32::MAX)
        } else {
            match ch.preds.get(&p.0).copied() {
                Some((Pv::Vec(v), _)) => v,
                Some((Pv::Mask(m), dirty)) => {
                    let v = self.mask_vec(m, ch.c);
                    // Keep the mask for the write-back.
                    let _ = dirty;
                    v
                }
                None => {
                    let i = (p.0 as usize).min(6);
                    let s = match ch.pstart[i] {
                        Some(s) => s,
                        None => self.b.use_var(self.warp.v_preds[i]),
                    };
                    let v = self.mask_vec(s, ch.c);
                    ch.preds.insert(p.0, (Pv::Vec(v), false));
                    v
                }
            }
        };
        if neg {
            self.b.ins().bnot(v)
        } else {
            v
        }
    }

    fn set_pred(&mut self, ch: &mut Chunk, p: Pred, v: Value, mv: Option<Value>) {
        if p == Pred::TRUE {
            return;
        }
        let new = match mv {
            Some(mv) => {
                let old = self.pred(ch, p, false);
                self.b.ins().bitselect(mv, v, old)
            }
            None => v,
        };
        ch.preds.insert(p.0, (Pv::Vec(new), true));
    }

    /// Lanes 0–3 of the results of `inst` for the operand vectors `regs`
    /// (every register it reads): the scalar pass's way to compute any
    /// lane-local instruction on two lanes.
    pub(super) fn lane_probe(
        &mut self,
        inst: &Instruction,
        regs: &[(u8, Value)],
    ) -> Option<Vec<Value>> {
        let mut ch = Chunk::default();
        for &(r, v) in regs {
            ch.regs.insert(r, (Cv::Vec(v), false));
        }
        let zero = self.c64(0);
        self.lane_op(&mut ch, inst, None, 0, zero, true);
        let (d, n) = analysis::writes(&inst.op);
        (0..n)
            .map(|i| match ch.regs.get(&(d + i)) {
                Some((Cv::Vec(v), true)) => Some(*v),
                _ => None,
            })
            .collect()
    }

    fn ctx_u32(&mut self, off: usize) -> Value {
        let f = self.mf(Mem::CtxFixed);
        self.b.ins().load(I32, f, self.mem.ctx, off as i32)
    }

    fn fl(&mut self, v: Value) -> Value {
        self.cast(F32X4, v)
    }

    /// The bits of an fp32 result, NaN replaced by the canonical NaN if
    /// `canon` (see `analysis::canon_needed`).
    fn canon(&mut self, f: Value, canon: bool) -> Value {
        let bits = self.cast(I32X4, f);
        if !canon {
            return bits;
        }
        let nan = self.b.ins().fcmp(FloatCC::Unordered, f, f);
        if self.ssa.carry.as_ref().is_some_and(|c| c.looping()) {
            // In a loop with carried registers (`carry.rs`) a blend: a
            // branch would join the carried value through a block
            // parameter (a move and a jump per chunk) and split the region
            // into blocks, across which loads are not shared.
            let cn = self.vsplat(CANONICAL_NAN);
            return self.b.ins().bitselect(nan, cn, bits);
        }
        // A branch rather than a blend: results are rarely NaN, and the
        // value then does not wait for the test.
        let any = self.b.ins().vany_true(nan);
        let (slow, join) = (self.b.create_block(), self.b.create_block());
        self.b.append_block_param(join, I32X4);
        self.b.ins().brif(any, slow, &[], join, &[bits.into()]);
        self.b.switch_to_block(slow);
        let cn = self.vsplat(CANONICAL_NAN);
        let r = self.b.ins().bitselect(nan, cn, bits);
        self.b.ins().jump(join, &[r.into()]);
        self.b.switch_to_block(join);
        self.b.block_params(join)[0]
    }

    /// The pair `lo:hi` of 4 lanes as two `i64x2` (lanes 0, 1 and 2, 3).
    fn zip(&mut self, lo: Value, hi: Value) -> (Value, Value) {
        let a = self.shuffle(I64X2, lo, hi, ZIP_LO);
        let b = self.shuffle(I64X2, lo, hi, ZIP_HI);
        (a, b)
    }

    fn unzip(&mut self, a: Value, b: Value) -> (Value, Value) {
        let lo = self.shuffle(I32X4, a, b, UNZIP_LO);
        let hi = self.shuffle(I32X4, a, b, UNZIP_HI);
        (lo, hi)
    }

    fn lane_op(
        &mut self,
        ch: &mut Chunk,
        inst: &Instruction,
        mv: Option<Value>,
        k: usize,
        base: Value,
        canon: bool,
    ) {
        match inst.op {
            Op::Nop => {}
            Op::Mov { d, b } => {
                let v = self.src(ch, b);
                self.set_reg(ch, d.0, v, mv);
            }
            Op::S2r { d, sr } => {
                let v = self.special(ch, sr, k, base);
                self.set_reg(ch, d.0, v, mv);
            }
            Op::Ldarg { d, wide, offset } => {
                let f = self.mf(Mem::Fixed);
                let w = self.b.ins().load(I32, f, self.mem.args, offset as i32);
                let v = self.b.ins().splat(I32X4, w);
                self.set_reg(ch, d.0, v, mv);
                if wide {
                    let w = self.b.ins().load(I32, f, self.mem.args, offset as i32 + 4);
                    let v = self.b.ins().splat(I32X4, w);
                    self.set_reg(ch, d.0 + 1, v, mv);
                }
            }
            Op::Sel { d, a, b, p, neg } => {
                let pv = self.pred(ch, p, neg);
                let av = self.reg(ch, a.0);
                let bv = self.src(ch, b);
                let v = self.b.ins().bitselect(pv, av, bv);
                self.set_reg(ch, d.0, v, mv);
            }
            Op::Bin { op, d, a, b } => {
                let av = self.reg(ch, a.0);
                let v = self.bin(ch, op, av, b, canon);
                self.set_reg(ch, d.0, v, mv);
            }
            Op::Un { op, d, a } => {
                let av = self.reg(ch, a.0);
                let v = self.un(op, av, canon);
                self.set_reg(ch, d.0, v, mv);
            }
            Op::Tri { op, d, a, b, c } => {
                let (av, bv, cv) = (self.reg(ch, a.0), self.reg(ch, b.0), self.reg(ch, c.0));
                let v = match op {
                    TriOp::Mad => {
                        let p = self.b.ins().imul(av, bv);
                        self.b.ins().iadd(p, cv)
                    }
                    TriOp::FFma => {
                        let (x, y, z) = (self.fl(av), self.fl(bv), self.fl(cv));
                        let r = self.b.ins().fma(x, y, z);
                        self.canon(r, canon)
                    }
                };
                self.set_reg(ch, d.0, v, mv);
            }
            Op::Add64 { d, a, b } => {
                let (alo, ahi) = (self.reg(ch, a.0), self.reg(ch, a.0 + 1));
                let (blo, bhi) = match b {
                    Src::Reg(r) => (self.reg(ch, r.0), self.reg(ch, r.0 + 1)),
                    Src::Imm(v) => (self.vsplat(v), self.vsplat(((v as i32) >> 31) as u32)),
                };
                let (a0, a1) = self.zip(alo, ahi);
                let (b0, b1) = self.zip(blo, bhi);
                let s0 = self.b.ins().iadd(a0, b0);
                let s1 = self.b.ins().iadd(a1, b1);
                let (lo, hi) = self.unzip(s0, s1);
                self.set_reg(ch, d.0, lo, mv);
                self.set_reg(ch, d.0 + 1, hi, mv);
            }
            Op::MadWide { signed, d, a, b, c } => {
                let (av, bv) = (self.reg(ch, a.0), self.reg(ch, b.0));
                let (clo, chi) = (self.reg(ch, c.0), self.reg(ch, c.0 + 1));
                let (a0, a1, b0, b1) = if signed {
                    (
                        self.b.ins().swiden_low(av),
                        self.b.ins().swiden_high(av),
                        self.b.ins().swiden_low(bv),
                        self.b.ins().swiden_high(bv),
                    )
                } else {
                    (
                        self.b.ins().uwiden_low(av),
                        self.b.ins().uwiden_high(av),
                        self.b.ins().uwiden_low(bv),
                        self.b.ins().uwiden_high(bv),
                    )
                };
                let p0 = self.b.ins().imul(a0, b0);
                let p1 = self.b.ins().imul(a1, b1);
                let (c0, c1) = self.zip(clo, chi);
                let s0 = self.b.ins().iadd(p0, c0);
                let s1 = self.b.ins().iadd(p1, c1);
                let (lo, hi) = self.unzip(s0, s1);
                self.set_reg(ch, d.0, lo, mv);
                self.set_reg(ch, d.0 + 1, hi, mv);
            }
            Op::Setp { cmp, ty, p, a, b } => {
                let av = self.reg(ch, a.0);
                let bv = self.src(ch, b);
                let v = match ty {
                    CmpType::F32 => {
                        let cc = match cmp {
                            Cmp::Eq => FloatCC::Equal,
                            Cmp::Ne => FloatCC::NotEqual,
                            Cmp::Lt => FloatCC::LessThan,
                            Cmp::Le => FloatCC::LessThanOrEqual,
                            Cmp::Gt => FloatCC::GreaterThan,
                            Cmp::Ge => FloatCC::GreaterThanOrEqual,
                        };
                        let (x, y) = (self.fl(av), self.fl(bv));
                        let r = self.b.ins().fcmp(cc, x, y);
                        self.cast(I32X4, r)
                    }
                    _ => {
                        let s = ty == CmpType::S32;
                        let cc = match (cmp, s) {
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
                        };
                        self.b.ins().icmp(cc, av, bv)
                    }
                };
                self.set_pred(ch, p, v, mv);
            }
            Op::Plop {
                op,
                p,
                a,
                na,
                b,
                nb,
            } => {
                let x = self.pred(ch, a, na);
                let y = self.pred(ch, b, nb);
                let v = match op {
                    PredOp::And => self.b.ins().band(x, y),
                    PredOp::Or => self.b.ins().bor(x, y),
                    PredOp::Xor => self.b.ins().bxor(x, y),
                };
                self.set_pred(ch, p, v, mv);
            }
            // Not `Kind::Lane`: never in a region.
            _ => {}
        }
    }

    fn special(&mut self, ch: &mut Chunk, sr: Special, k: usize, base: Value) -> Value {
        use Special::*;
        let c = ch.c;
        let dim = |x, y, z| match sr {
            s if s == x => 0usize,
            s if s == y => 1,
            s if s == z => 2,
            _ => 0,
        };
        match sr {
            TidX | TidY | TidZ => {
                let d = dim(TidX, TidY, TidZ);
                let f = self.mf(Mem::Fixed);
                let tids = self.tids();
                self.b.ins().load(I32X4, f, tids, (d * 128 + 16 * c) as i32)
            }
            NtidX | NtidY | NtidZ => {
                let d = dim(NtidX, NtidY, NtidZ);
                let v = self.ctx_u32(offset_of!(Ctx, ntid) + 4 * d);
                self.b.ins().splat(I32X4, v)
            }
            WgidX | WgidY | WgidZ => {
                let d = dim(WgidX, WgidY, WgidZ);
                let v = self.ctx_u32(offset_of!(Ctx, wg) + 4 * d);
                self.b.ins().splat(I32X4, v)
            }
            NwgX | NwgY | NwgZ => {
                let d = dim(NwgX, NwgY, NwgZ);
                let v = self.ctx_u32(offset_of!(Ctx, nwg) + 4 * d);
                self.b.ins().splat(I32X4, v)
            }
            GidX | GidY | GidZ => {
                let d = dim(GidX, GidY, GidZ);
                let wg = self.ctx_u32(offset_of!(Ctx, wg) + 4 * d);
                let n = self.ctx_u32(offset_of!(Ctx, ntid) + 4 * d);
                let first = self.b.ins().imul(wg, n);
                let first = self.b.ins().splat(I32X4, first);
                let f = self.mf(Mem::Fixed);
                let tids = self.tids();
                let tid = self.b.ins().load(I32X4, f, tids, (d * 128 + 16 * c) as i32);
                self.b.ins().iadd(first, tid)
            }
            LaneId => {
                let l = (4 * c) as u32;
                self.vconst([l, l + 1, l + 2, l + 3])
            }
            WarpId => {
                let v = self.warp_index();
                self.b.ins().splat(I32X4, v)
            }
            NWarps => {
                let v = self.ctx_u32(offset_of!(Ctx, nwarps));
                self.b.ins().splat(I32X4, v)
            }
            Clock | ClockHi => {
                let clk = self.b.ins().iadd_imm_s(base, k as i64);
                let clk = if sr == ClockHi {
                    self.b.ins().ushr_imm_s(clk, 32)
                } else {
                    clk
                };
                let v = self.b.ins().ireduce(I32, clk);
                self.b.ins().splat(I32X4, v)
            }
        }
    }

    fn bin(&mut self, ch: &mut Chunk, op: BinOp, a: Value, b: Src, canon: bool) -> Value {
        use BinOp::*;
        if let (Shl | ShrU | ShrS, Src::Imm(n)) = (op, b) {
            return match op {
                Shl if n >= 32 => self.vsplat(0),
                ShrU if n >= 32 => self.vsplat(0),
                Shl => self.b.ins().ishl_imm_s(a, n as i64),
                ShrU => self.b.ins().ushr_imm_s(a, n as i64),
                _ => self.b.ins().sshr_imm_s(a, n.min(31) as i64),
            };
        }
        let bv = self.src(ch, b);
        match op {
            Add => self.b.ins().iadd(a, bv),
            Sub => self.b.ins().isub(a, bv),
            Mul => self.b.ins().imul(a, bv),
            MinU => self.b.ins().umin(a, bv),
            MinS => self.b.ins().smin(a, bv),
            MaxU => self.b.ins().umax(a, bv),
            MaxS => self.b.ins().smax(a, bv),
            And => self.b.ins().band(a, bv),
            Or => self.b.ins().bor(a, bv),
            Xor => self.b.ins().bxor(a, bv),
            FAdd | FSub | FMul | FDiv => {
                let (x, y) = (self.fl(a), self.fl(bv));
                let r = match op {
                    FAdd => self.b.ins().fadd(x, y),
                    FSub => self.b.ins().fsub(x, y),
                    FMul => self.b.ins().fmul(x, y),
                    _ => self.b.ins().fdiv(x, y),
                };
                self.canon(r, canon)
            }
            FMin | FMax => self.fminmax(op == FMin, a, bv),
            // Not `Kind::Lane` (division, high multiplies, shifts by a
            // register): never in a region.
            _ => a,
        }
    }

    /// `math::fmin` / `math::fmax` per lane: a NaN operand is ignored (both
    /// NaN: the canonical NaN), equal values combine their sign bits so
    /// that −0 < +0.
    ///
    /// A NaN operand is first replaced by the other one (`x`, `y`); the
    /// host's `minps`/`maxps` return their second operand when the two are
    /// equal (or unordered: only when both were NaN), so computing both
    /// operand orders and combining the results bitwise (`|` for min, `&`
    /// for max) gives the larger (smaller) value, or the sign-combined one
    /// for equal values. Both NaN: the canonical NaN.
    fn fminmax(&mut self, min: bool, a: Value, b: Value) -> Value {
        let (fa, fb) = (self.fl(a), self.fl(b));
        // `bitselect(x < y, x, y)` is `minps x, y`; `bitselect(y < x, x,
        // y)` is `maxps x, y` (both: `y` when unordered or equal).
        let pick = |g: &mut Self, p: Value, q: Value| {
            let lt = if min {
                g.b.ins().fcmp(FloatCC::LessThan, p, q)
            } else {
                g.b.ins().fcmp(FloatCC::LessThan, q, p)
            };
            let lt = g.cast(F32X4, lt);
            let r = g.b.ins().bitselect(lt, p, q);
            g.cast(I32X4, r)
        };
        let both_orders = |g: &mut Self, x: Value, y: Value| {
            let m1 = pick(g, x, y);
            let m2 = pick(g, y, x);
            if min {
                g.b.ins().bor(m1, m2)
            } else {
                g.b.ins().band(m1, m2)
            }
        };
        // Without a NaN (the usual case) the two orders suffice.
        let (fast, slow, join) = (
            self.b.create_block(),
            self.b.create_block(),
            self.b.create_block(),
        );
        self.b.append_block_param(join, I32X4);
        let un = self.b.ins().fcmp(FloatCC::Unordered, fa, fb);
        let any = self.b.ins().vany_true(un);
        self.b.ins().brif(any, slow, &[], fast, &[]);
        self.b.switch_to_block(fast);
        let r = both_orders(self, fa, fb);
        self.b.ins().jump(join, &[r.into()]);
        self.b.switch_to_block(slow);
        let anan = self.b.ins().fcmp(FloatCC::Unordered, fa, fa);
        let bnan = self.b.ins().fcmp(FloatCC::Unordered, fb, fb);
        let x = self.b.ins().bitselect(bnan, a, b);
        let y = self.b.ins().bitselect(anan, x, a);
        let (fx, fy) = (self.fl(x), self.fl(y));
        let r = both_orders(self, fx, fy);
        let both = self.b.ins().band(anan, bnan);
        let both = self.cast(I32X4, both);
        let cn = self.vsplat(CANONICAL_NAN);
        let r = self.b.ins().bitselect(both, cn, r);
        self.b.ins().jump(join, &[r.into()]);
        self.b.switch_to_block(join);
        self.b.block_params(join)[0]
    }

    fn un(&mut self, op: UnOp, a: Value, canon: bool) -> Value {
        use UnOp::*;
        match op {
            Not => self.b.ins().bnot(a),
            FAbs => {
                let m = self.vsplat(0x7fff_ffff);
                self.b.ins().band(a, m)
            }
            FNeg => {
                let m = self.vsplat(0x8000_0000);
                self.b.ins().bxor(a, m)
            }
            Rcp => {
                let one = self.vsplat(1f32.to_bits());
                let (one, x) = (self.fl(one), self.fl(a));
                let r = self.b.ins().fdiv(one, x);
                self.canon(r, canon)
            }
            Sqrt => {
                let x = self.fl(a);
                let r = self.b.ins().sqrt(x);
                self.canon(r, canon)
            }
            CvtF32S32 => {
                let r = self.b.ins().fcvt_from_sint(F32X4, a);
                self.cast(I32X4, r)
            }
            CvtS32F32 => {
                let x = self.fl(a);
                self.b.ins().fcvt_to_sint_sat(I32X4, x)
            }
            // Not `Kind::Lane`: never in a region.
            _ => a,
        }
    }
}
