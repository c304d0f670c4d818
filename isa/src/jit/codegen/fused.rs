//! Memory instructions inside lane-local regions (full-warp code).
//!
//! A run of a block's instructions that are lane-local or shaped 32-bit
//! memory accesses (`shaped.rs`) runs as one region (`lanes.rs`): chunk
//! by chunk, loaded words go straight into the SIMD values that use them
//! and stored ones come from them, with no trip through the register
//! file. Every condition of every access in the run is checked before any
//! of them: all lanes run it, its addresses are in range and aligned, its
//! spans lie in its TLB entry's page (global memory) or in shared memory.
//! Running four lanes at a time reorders accesses across instructions, so
//! the run also requires that no store overlaps another access of the run
//! in host memory (two VAs of one page included), unless both access the
//! same addresses with one word per lane: then each word still sees its
//! accesses in program order. If anything fails, the run's instructions
//! execute one by one as everywhere else (TLB refills, interpreter steps,
//! faults with their VA, lane and PC).

use super::blocks::address;
use super::lanes::RegionMem;
use super::scalar::Pass;
use super::shaped::{global_shaped_ok, shared_shaped_ok, Access};
use super::{Gen, Mem};
use crate::inst::*;
use crate::jit::analysis::Kind;
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::types::I8;
use cranelift_codegen::ir::{InstBuilder, Value};
use std::rc::Rc;

/// Most memory instructions in one run (each pair with a store costs a
/// check at the run's start).
const MAX_ACCESSES: usize = 6;

impl Gen<'_, '_> {
    /// Emits the run starting at index `i` of the block `insts` (at `s`,
    /// clock `base` at its start) if it has a memory instruction and at
    /// least two instructions; returns the index after it, or `None`
    /// (nothing emitted).
    pub(super) fn emit_fused(
        &mut self,
        insts: &[Instruction],
        kinds: &[Kind],
        s: u32,
        i: usize,
        base: Value,
        pass: &Pass,
    ) -> Option<usize> {
        let j = self.run_end(insts, kinds, i, pass);
        let accesses = (i..j).filter(|&x| kinds[x] != Kind::Lane).count();
        if accesses == 0 || j - i < 2 {
            return None;
        }
        // The conditions, in the order of the instructions.
        let mut acc: Vec<Option<Access>> = Vec::with_capacity(j - i);
        for x in i..j {
            let sv = |r: u8| pass.before[x].get(r as usize).cloned().flatten();
            let a = address(&insts[x].op);
            let pc = s + x as u32;
            acc.push(match kinds[x] {
                Kind::GlobalLoad | Kind::GlobalStore => match (sv(a), sv(a.wrapping_add(1))) {
                    (Some(lo), Some(hi)) => self.global_access(pc, &insts[x], &lo, &hi),
                    _ => None,
                },
                Kind::SharedLoad | Kind::SharedStore => {
                    sv(a).and_then(|v| self.shared_access(&insts[x], &v))
                }
                _ => None,
            });
        }
        if (i..j).any(|x| kinds[x] != Kind::Lane && acc[x - i].is_none()) {
            return None;
        }
        // With carried registers (`carry.rs`) the join takes their values.
        let (fast, slow, cont) = (
            self.b.create_block(),
            self.b.create_block(),
            self.carry_join(),
        );
        // Conditions no TLB refill changes.
        let mut bad = self.b.ins().iconst(I8, 0);
        for a in acc.iter().flatten() {
            bad = self.b.ins().bor(bad, a.bad);
        }
        let tlb = self.b.create_block();
        self.b.ins().brif(bad, slow, &[], tlb, &[]);
        // Spans outside their TLB entries' pages (a new page, every 32
        // warps for consecutive words in 4 KiB pages): refill those entries
        // and look again, rather than run the instructions one by one.
        self.b.switch_to_block(tlb);
        let global: Vec<&Access> = acc.iter().flatten().filter(|a| a.tlb.is_some()).collect();
        let misses: Vec<Value> = global.iter().map(|a| self.access_miss(a)).collect();
        let any = misses
            .iter()
            .fold(self.b.ins().iconst(I8, 0), |x, &m| self.b.ins().bor(x, m));
        let (refill, again, spans_ok) = (
            self.b.create_block(),
            self.b.create_block(),
            self.b.create_block(),
        );
        self.b.ins().brif(any, refill, &[], spans_ok, &[]);
        self.b.switch_to_block(refill);
        for (a, &m) in global.iter().zip(&misses) {
            let (call, next) = (self.b.create_block(), self.b.create_block());
            self.b.ins().brif(m, call, &[], next, &[]);
            self.b.switch_to_block(call);
            self.refill_access(a);
            self.b.ins().jump(next, &[]);
            self.b.switch_to_block(next);
        }
        self.b.ins().jump(again, &[]);
        self.b.switch_to_block(again);
        let mut still = self.b.ins().iconst(I8, 0);
        for a in &global {
            let m = self.access_miss(a);
            still = self.b.ins().bor(still, m);
        }
        self.b.ins().brif(still, slow, &[], spans_ok, &[]);
        // No store overlapping another access in host memory.
        self.b.switch_to_block(spans_ok);
        let ptrs: Vec<Option<[Value; 2]>> = acc
            .iter()
            .map(|a| a.as_ref().map(|a| self.access_ptrs(a)))
            .collect();
        let mut clash = self.b.ins().iconst(I8, 0);
        for (x, a) in acc.iter().enumerate() {
            for (y, b) in acc.iter().enumerate().skip(x + 1) {
                let (Some(a), Some(b)) = (a, b) else { continue };
                if (a.load && b.load) || a.tlb.is_some() != b.tlb.is_some() {
                    continue;
                }
                let (Some(pa), Some(pb)) = (ptrs[x], ptrs[y]) else {
                    continue;
                };
                if a.origin == b.origin && a.k == b.k && a.distinct() && b.distinct() {
                    // The same addresses, a word per lane, known here.
                    continue;
                }
                let c = self.overlap(a, pa, b, pb);
                clash = self.b.ins().bor(clash, c);
            }
        }
        self.b.ins().brif(clash, slow, &[], fast, &[]);

        self.mem.fused_runs += 1;
        self.b.switch_to_block(fast);
        let carried_in = self.ssa.carry.as_ref().map(|c| c.vals.clone());
        let mem: Vec<Option<RegionMem>> = acc
            .iter()
            .zip(&ptrs)
            .map(|(a, p)| {
                let (a, p) = (a.as_ref()?, (*p)?);
                let kind = if a.tlb.is_some() {
                    Mem::Global
                } else {
                    Mem::Shared
                };
                Some(RegionMem {
                    load: a.load,
                    data: a.data,
                    ptrs: p,
                    k: a.k,
                    flags: self.mf(kind),
                })
            })
            .collect();
        let plan = (&pass.plans[i..j], Rc::clone(&pass.before[i]));
        let live = self.live_at(s + j as u32);
        self.emit_region(&insts[i..j], i, base, Some(plan), live, &mem);
        self.add_jwarp(accesses as u64);
        let args: Vec<_> = self.carry_args().into_iter().map(Into::into).collect();
        self.b.ins().jump(cont, &args);

        // One by one, on the register file: carried values go there first
        // and are read back after.
        self.b.switch_to_block(slow);
        if let (Some(cy), Some(v)) = (self.ssa.carry.as_mut(), carried_in) {
            cy.vals = v;
        }
        self.flush_carry();
        let carry = self.ssa.carry.take();
        let mut x = i;
        while x < j {
            x = self.emit_straight(insts, kinds, s, (x, j), base, Some(pass));
        }
        self.ssa.carry = carry;
        self.reload_carry();
        let args: Vec<_> = self.carry_args().into_iter().map(Into::into).collect();
        self.b.ins().jump(cont, &args);
        self.b.switch_to_block(cont);
        self.take_join_params(cont);
        Some(j)
    }

    /// The end of the run starting at index `i`: lane-local instructions
    /// (up to one whose guard predicate the run writes, as in a region)
    /// and shaped 32-bit memory instructions, at most `MAX_ACCESSES` of
    /// them.
    fn run_end(&self, insts: &[Instruction], kinds: &[Kind], i: usize, pass: &Pass) -> usize {
        let mut j = i;
        let mut written = 0u8;
        let mut accesses = 0;
        while j < insts.len() {
            let inst = &insts[j];
            let g = inst.guard.pred;
            if g != Pred::TRUE && written >> g.0 & 1 != 0 {
                break;
            }
            let sv = |r: u8| pass.before[j].get(r as usize).cloned().flatten();
            let a = address(&inst.op);
            let ok = match kinds[j] {
                Kind::Lane => true,
                Kind::GlobalLoad | Kind::GlobalStore => {
                    accesses < MAX_ACCESSES
                        && match (sv(a), sv(a.wrapping_add(1))) {
                            (Some(lo), Some(hi)) => global_shaped_ok(inst, &lo, &hi),
                            _ => false,
                        }
                }
                Kind::SharedLoad | Kind::SharedStore => {
                    accesses < MAX_ACCESSES && sv(a).is_some_and(|v| shared_shaped_ok(inst, &v))
                }
                _ => false,
            };
            if !ok {
                break;
            }
            if kinds[j] == Kind::Lane {
                if let Some(p) = crate::jit::analysis::pred_written(&inst.op) {
                    written |= 1 << p;
                }
            } else {
                accesses += 1;
            }
            j += 1;
        }
        j
    }

    /// Whether accesses `a` (host pointers `pa`) and `b` (`pb`), one of
    /// them a store, may not run four lanes at a time side by side (an
    /// `i8`): their spans overlap, unless they are the same addresses with
    /// a word per lane.
    fn overlap(&mut self, a: &Access, pa: [Value; 2], b: &Access, pb: [Value; 2]) -> Value {
        let mut clash = self.b.ins().iconst(I8, 0);
        for ga in 0..a.halves {
            for gb in 0..b.halves {
                let (a0, a1) = a.range[ga];
                let (b0, b1) = b.range[gb];
                // Spans [sa, sa + la) and [sb, sb + lb) overlap when
                // d = sb - sa lies in (-lb, la): d + lb - 1 < la + lb - 1,
                // unsigned (no span reaches the top of the address space).
                let (la, lb) = (a1 + 4 - a0, b1 + 4 - b0);
                let d = self.b.ins().isub(pb[gb], pa[ga]);
                let x = self.b.ins().iadd_imm_s(d, b0 - a0 + lb - 1);
                let o = self
                    .b
                    .ins()
                    .icmp_imm_s(IntCC::UnsignedLessThan, x, la + lb - 1);
                clash = self.b.ins().bor(clash, o);
            }
        }
        if a.k == b.k && a.distinct() && b.distinct() {
            // The same addresses: fine.
            let same = self.b.ins().icmp(IntCC::Equal, pa[0], pb[0]);
            let one = self.b.ins().iconst(I8, 1);
            let differ = self.b.ins().bxor(same, one);
            clash = self.b.ins().band(clash, differ);
        }
        clash
    }
}
