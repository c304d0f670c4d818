//! A kernel's blocks, each in up to three versions, and the branches and
//! exits between them.
//!
//! Every block has a generic entry (from the dispatch, or from code whose
//! warp may not be full) that checks the budget and then runs the block's
//! *partial* version (any active group: every write blended under the
//! active mask) or, for a full warp, its *cold* full-warp version, which
//! assumes the block's invariant register facts. A block that native
//! full-warp code can reach directly also has a *hot* version assuming
//! the chain facts (`facts.rs`). A full-warp version first runs the
//! scalar pass (`scalar.rs`); if a run-time condition of its shapes fails
//! it returns `GUARD` before any effect and the interpreter runs the
//! block.

use super::scalar::Pass;
use super::{cx, Gen, Mem, CHUNKS};
use crate::exec::Warp;
use crate::inst::*;
use crate::jit::analysis::{self, Kind};
use crate::jit::runtime::{status, REG_BYTES};
use crate::jit::shape::{Fact, Shape};
use crate::jit::CompileError;
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::types::{I32, I32X4};
use cranelift_codegen::ir::{Block, InstBuilder, SigRef, Value};
use std::collections::HashMap;
use std::mem::offset_of;
use std::rc::Rc;

/// The native blocks and where control goes between them.
pub(super) struct Flow {
    /// The generic entry of each block, by its first instruction.
    pub(super) heads: HashMap<u32, Block>,
    /// The entries of the blocks' hot versions (`facts.rs`).
    pub(super) hot_heads: HashMap<u32, Block>,
    /// The jump on the warp's pc to its block.
    pub(super) dispatch: Block,
    /// Where an idle warp goes on to the next one (`emit_chain`).
    pub(super) chain: Block,
    /// The returns to the scheduler: with the warp's state written back,
    /// and after an interpreter step that wrote it.
    pub(super) exit: Block,
    pub(super) exit_nosync: Block,
    /// The helpers control flow calls: an interpreter step, a divergent
    /// branch, rescheduling.
    pub(super) sig_step: SigRef,
    pub(super) sig_diverge: SigRef,
    pub(super) sig_resched: SigRef,
    /// Whether the code being emitted runs a full warp (all 32 lanes
    /// active).
    pub(super) full: bool,
}

impl Gen<'_, '_> {
    /// Emits block `bi` of `blocks.list` in its versions.
    pub(super) fn emit_block(&mut self, bi: usize) -> Result<(), CompileError> {
        let (s, e) = self.k.blocks.list[bi];
        let insts: Vec<Instruction> = (s..e)
            .map(|pc| self.k.code.get(pc as usize).copied())
            .collect::<Option<_>>()
            .ok_or(CompileError::OutsideCode)?;
        let head = *self.flow.heads.get(&s).ok_or(CompileError::NoBlockHead)?;
        self.b.switch_to_block(head);
        self.enter(s, e);
        let active = self.b.use_var(self.warp.v_active);
        let full = self.b.ins().icmp_imm_s(IntCC::Equal, active, -1);
        let (cold, part) = (self.b.create_block(), self.b.create_block());
        let cf = self.k.facts.cold.get(bi).cloned().unwrap_or_default();
        match self.flow.hot_heads.get(&s).copied() {
            Some(hot) => {
                // A full warp from the dispatch or from code that does not
                // know the hot version's facts: check them.
                let check = self.b.create_block();
                self.b.ins().brif(full, check, &[], part, &[]);
                self.b.switch_to_block(check);
                let need = self.hot_facts(bi);
                let missing = missing(&cf, &need);
                if missing.is_empty() {
                    let args = self.hot_args(s, &[]);
                    self.b.ins().jump(hot, &args);
                } else if missing.len() <= MAX_CHECKED {
                    let ok = self.check_shapes(&missing);
                    let args = self.hot_args(s, &[]);
                    self.b.ins().brif(ok, hot, &args, cold, &[]);
                } else {
                    self.b.ins().jump(cold, &[]);
                }
            }
            None => {
                self.b.ins().brif(full, cold, &[], part, &[]);
            }
        }
        self.b.switch_to_block(part);
        self.flow.full = false;
        self.emit_body(&insts, s, None)?;
        self.b.switch_to_block(cold);
        self.flow.full = true;
        self.emit_body(&insts, s, Some(&cf))?;
        if let Some(&h) = self.flow.hot_heads.get(&s) {
            self.b.switch_to_block(h);
            let hf = self.hot_facts(bi);
            let carried = self.carried_regs(&insts, s, &hf);
            if !carried.is_empty() {
                self.enter_carried(s, e, carried);
                self.emit_body(&insts, s, Some(&hf))?;
                self.ssa.carry = None;
            } else {
                self.take_hot_params(s, h);
                self.enter(s, e);
                if hf == cf && self.ssa.carry.is_none() {
                    self.b.ins().jump(cold, &[]);
                } else {
                    self.emit_body(&insts, s, Some(&hf))?;
                }
                self.ssa.carry = None;
            }
        }
        self.flow.full = false;
        Ok(())
    }

    /// The start of block `s..e`: the pc, and the exit when the budget does
    /// not cover the block. Leaves the builder in a new block.
    pub(super) fn enter(&mut self, s: u32, e: u32) {
        let spc = self.c32(s);
        self.b.def_var(self.warp.v_pc, spc);
        let rem = self.b.use_var(self.warp.v_remaining);
        let short = self
            .b
            .ins()
            .icmp_imm_s(IntCC::UnsignedLessThan, rem, (e - s) as i64);
        let body = self.b.create_block();
        let tail = self.c32(status::TAIL);
        if self.ssa.carry.is_none() {
            self.b
                .ins()
                .brif(short, self.flow.exit, &[tail.into()], body, &[]);
        } else {
            // The interpreter runs the rest from the register file: the
            // carried registers (`carry.rs`) go there first.
            let flush = self.b.create_block();
            self.b.ins().brif(short, flush, &[], body, &[]);
            self.b.switch_to_block(flush);
            self.flush_carry();
            self.b.ins().jump(self.flow.exit, &[tail.into()]);
        }
        self.b.switch_to_block(body);
    }

    /// One version of the block `insts` starting at `s`: for a full warp
    /// from `facts`, or for any active group (`None`).
    fn emit_body(
        &mut self,
        insts: &[Instruction],
        s: u32,
        facts: Option<&[Fact]>,
    ) -> Result<(), CompileError> {
        let base = self.b.use_var(self.warp.v_clock);
        let pass = facts.map(|f| self.scalar_pass(insts, base, f));
        if let Some(fail) = pass.as_ref().and_then(|p| p.fail) {
            let (ok, bad) = (self.b.create_block(), self.b.create_block());
            self.b.ins().brif(fail, bad, &[], ok, &[]);
            self.b.switch_to_block(bad);
            self.flush_carry();
            let st = self.c32(status::GUARD);
            self.b.ins().jump(self.flow.exit, &[st.into()]);
            self.b.switch_to_block(ok);
        }
        let rem = self.b.use_var(self.warp.v_remaining);
        let rem = self.b.ins().iadd_imm_s(rem, -(insts.len() as i64));
        self.b.def_var(self.warp.v_remaining, rem);
        let kinds: Vec<Kind> = insts
            .iter()
            .map(|i| analysis::kind(i, self.k.fma))
            .collect();
        let inline = kinds
            .iter()
            .filter(|k| matches!(k, Kind::Lane | Kind::Branch | Kind::Exit))
            .count();
        self.add_jwarp(inline as u64);
        let after = pass.as_ref().map(|p| p.after.clone());
        let clock_at = |g: &mut Self, k: usize| g.b.ins().iadd_imm_s(base, k as i64);
        let mut i = 0usize;
        while i < insts.len() {
            let pc = s + i as u32;
            // Carried registers (`carry.rs`) stay in SSA values only
            // through the loop's first run and into its branch back.
            let loop_branch = i + 1 == insts.len() && kinds[i] == Kind::Branch;
            let looping = self.ssa.carry.as_ref().map(|c| c.looping());
            if looping == Some(true) && i != 0 && !loop_branch {
                self.drop_carry();
            }
            // Shaped parameters (`carry.rs`) stay out of the register file
            // through the block's first run only; code that is not a run
            // reads the register file.
            let in_run = matches!(
                kinds[i],
                Kind::Lane
                    | Kind::GlobalLoad
                    | Kind::GlobalStore
                    | Kind::SharedLoad
                    | Kind::SharedStore
            );
            if looping == Some(false) && (i != 0 || !in_run) {
                self.drop_carry_at(pc);
            }
            match kinds[i] {
                Kind::Lane
                | Kind::GlobalLoad
                | Kind::GlobalStore
                | Kind::SharedLoad
                | Kind::SharedStore => {
                    let fused = match pass.as_ref() {
                        Some(p) => self.emit_fused(insts, &kinds, s, i, base, p),
                        None => None,
                    };
                    if fused.is_none() {
                        self.drop_carry();
                    }
                    i = match fused {
                        Some(j) => j,
                        None => self.emit_straight(
                            insts,
                            &kinds,
                            s,
                            (i, insts.len()),
                            base,
                            pass.as_ref(),
                        ),
                    };
                    continue;
                }
                Kind::Interp if self.flow.full && is_full_bar(&insts[i]) => {
                    let clock = clock_at(self, i + 1);
                    self.emit_bar(pc, clock);
                    return Ok(());
                }
                Kind::Interp => {
                    let clock = clock_at(self, i);
                    let control = analysis::ends_block(&insts[i].op);
                    self.step(pc, clock, control, None);
                    if control {
                        return Ok(());
                    }
                }
                Kind::Branch => {
                    let clock = clock_at(self, i + 1);
                    if self.ssa.carry.is_some() && !self.back_edge_keeps_facts(s, after.as_deref())
                    {
                        self.drop_carry();
                    }
                    if self.ssa.carry.is_some() {
                        self.ssa.carried_loops += 1;
                        let m = self.guard_mask(insts[i].guard);
                        self.add_threads(m);
                        let out = after.as_deref();
                        self.carried_branch(m, clock, |g| {
                            g.emit_branch_counted(pc, &insts[i], m, clock, out)
                        });
                    } else {
                        self.emit_branch(pc, &insts[i], clock, after.as_deref());
                    }
                    return Ok(());
                }
                Kind::Exit => {
                    let clock = clock_at(self, i + 1);
                    self.emit_exit(pc, &insts[i], clock, after.as_deref());
                    return Ok(());
                }
            }
            i += 1;
        }
        self.drop_carry();
        let clock = clock_at(self, insts.len());
        let e = s + insts.len() as u32;
        self.goto_next(e, clock, after.as_deref());
        Ok(())
    }

    /// Whether the facts `out` at the end of the block starting at `s`
    /// imply its hot version's (a back edge may go straight to it).
    fn back_edge_keeps_facts(&self, s: u32, out: Option<&[Fact]>) -> bool {
        let Some(out) = out else { return false };
        let Some(bi) = self.k.blocks.list.iter().position(|b| b.0 == s) else {
            return false;
        };
        missing(out, &self.hot_facts(bi)).is_empty()
    }

    /// The facts block `bi`'s hot version assumes (none if it has none).
    pub(super) fn hot_facts(&self, bi: usize) -> Vec<Fact> {
        self.k
            .facts
            .hot
            .get(bi)
            .cloned()
            .flatten()
            .unwrap_or_default()
    }

    /// Emits the instruction at index `i` of the block `insts` starting at
    /// `s` (a lane-local one, with the lane-local ones after it before
    /// index `end`, as one region; or a memory instruction) the way it
    /// runs on its own; returns the index after what it emitted.
    pub(super) fn emit_straight(
        &mut self,
        insts: &[Instruction],
        kinds: &[Kind],
        s: u32,
        (i, end): (usize, usize),
        base: Value,
        pass: Option<&Pass>,
    ) -> usize {
        let pc = s + i as u32;
        match kinds[i] {
            Kind::GlobalLoad | Kind::GlobalStore => {
                let clock = self.b.ins().iadd_imm_s(base, i as i64);
                let a = address(&insts[i].op);
                let sv = |r: u8| pass.and_then(|p| p.before[i].get(r as usize).cloned().flatten());
                let done = match (sv(a), sv(a.wrapping_add(1))) {
                    (Some(lo), Some(hi)) => self.emit_global_shaped(pc, &insts[i], clock, &lo, &hi),
                    _ => false,
                };
                if !done {
                    self.emit_global(pc, &insts[i], clock);
                }
                i + 1
            }
            Kind::SharedLoad | Kind::SharedStore => {
                let clock = self.b.ins().iadd_imm_s(base, i as i64);
                let a = address(&insts[i].op);
                let sv = pass.and_then(|p| p.before[i].get(a as usize).cloned().flatten());
                let done = match sv {
                    Some(sv) => self.emit_shared_shaped(pc, &insts[i], clock, &sv),
                    None => false,
                };
                if !done {
                    self.emit_shared(pc, &insts[i], clock);
                }
                i + 1
            }
            _ => {
                let j = region_end(insts, kinds, i, end);
                let plan = pass.map(|p| (&p.plans[i..j], Rc::clone(&p.before[i])));
                let mut live = self.live_at(s + j as u32);
                // Right before the block's branch or exit (not in a run's
                // one-by-one path, which ends before it): shaped results
                // stay pending for a hot version to take (`carry.rs`).
                let last = end == insts.len()
                    && j + 1 == insts.len()
                    && matches!(kinds[j], Kind::Exit | Kind::Branch);
                let mut pending = Vec::new();
                if let (true, true, true, Some(p)) =
                    (last, self.flow.full, self.ssa.carry.is_none(), pass)
                {
                    for (r, sv) in p.before[j].iter().enumerate().take(64) {
                        let Some(sv) = sv else { continue };
                        let bit = 1u64 << r;
                        let written = insts[i..j]
                            .iter()
                            .any(|x| analysis::writes_reg(&x.op, r as u8));
                        if written && live & bit != 0 && sv.shape.known.is_none() {
                            live &= !bit;
                            pending.push((r as u8, sv.clone()));
                        }
                    }
                }
                self.emit_region(&insts[i..j], i, base, plan, live, &[]);
                self.ssa.pending = pending;
                j
            }
        }
    }

    /// Continues at `target` with the warp unchanged: in full-warp code
    /// with the register facts `out`, at the target's hot version where it
    /// has one; otherwise at its generic entry.
    fn goto_next(&mut self, target: u32, clock: Value, out: Option<&[Fact]>) {
        // Shaped registers a region left pending go to the hot version as
        // arguments, or to the register file (`carry.rs`).
        let pending = std::mem::take(&mut self.ssa.pending);
        let hot = self.flow.hot_heads.get(&target).copied();
        let (Some(hot), Some(out), true) = (hot, out, self.flow.full) else {
            self.write_pending(&pending);
            self.goto(target, clock);
            return;
        };
        let Some(ti) = self.k.blocks.list.iter().position(|b| b.0 == target) else {
            self.write_pending(&pending);
            self.goto(target, clock);
            return;
        };
        self.b.def_var(self.warp.v_clock, clock);
        let need = self.hot_facts(ti);
        let missing = missing(out, &need);
        if missing.is_empty() {
            let args = self.hot_args(target, &pending);
            self.b.ins().jump(hot, &args);
            return;
        }
        self.write_pending(&pending);
        if missing.len() > MAX_CHECKED {
            self.goto(target, clock);
            return;
        }
        // Entered from code that does not know these facts (a backward
        // edge of a cold version): check them in the register file.
        let ok = self.check_shapes(&missing);
        let args = self.hot_args(target, &[]);
        let cold = self.flow.heads.get(&target).copied();
        match cold {
            Some(c) => {
                self.b.ins().brif(ok, hot, &args, c, &[]);
            }
            None => {
                self.b.ins().jump(hot, &args);
            }
        }
    }

    /// Whether the register file holds values of these shapes (an `i8`).
    fn check_shapes(&mut self, regs: &[(u8, Rc<Shape>)]) -> Value {
        let f = self.mf(Mem::Regs);
        let mut ok: Option<Value> = None;
        let mut and = |g: &mut Self, c: Value| {
            ok = Some(match ok {
                Some(x) => g.b.ins().band(x, c),
                None => c,
            });
        };
        for (r, s) in regs {
            let off = *r as i32 * REG_BYTES;
            let rf = self.regs();
            let b0 = self.b.ins().load(I32, f, rf, off);
            let b1 = self.b.ins().load(I32, f, rf, off + 64);
            if let Some(k) = s.known {
                let c = self.b.ins().icmp_imm_s(IntCC::Equal, b0, k as i32 as i64);
                and(self, c);
            }
            if let Some(l) = s.link {
                let want = self.b.ins().iadd_imm_s(b0, l as i32 as i64);
                let c = self.b.ins().icmp(IntCC::Equal, b1, want);
                and(self, c);
            }
            let s0 = self.b.ins().splat(I32X4, b0);
            let s1 = self.b.ins().splat(I32X4, b1);
            let mut acc: Option<Value> = None;
            for c in 0..CHUNKS {
                let v = self.load_reg(*r, c);
                let k: [u32; 4] = std::array::from_fn(|i| s.k[4 * c + i]);
                let b = if c < CHUNKS / 2 { s0 } else { s1 };
                let want = if k == [0; 4] {
                    b
                } else {
                    let kv = self.vconst(k);
                    self.b.ins().iadd(b, kv)
                };
                let e = self.b.ins().icmp(IntCC::Equal, v, want);
                acc = Some(match acc {
                    Some(a) => self.b.ins().band(a, e),
                    None => e,
                });
            }
            if let Some(acc) = acc {
                let all = self.b.ins().vall_true(acc);
                and(self, all);
            }
        }
        ok.unwrap_or_else(|| self.b.ins().iconst(cranelift_codegen::ir::types::I8, 1))
    }

    fn emit_branch(&mut self, pc: u32, inst: &Instruction, clock: Value, out: Option<&[Fact]>) {
        let m = self.guard_mask(inst.guard);
        self.add_threads(m);
        self.emit_branch_counted(pc, inst, m, clock, out);
    }

    /// A branch whose lanes `m` are counted already.
    fn emit_branch_counted(
        &mut self,
        pc: u32,
        inst: &Instruction,
        m: Value,
        clock: Value,
        out: Option<&[Fact]>,
    ) {
        let Op::Bra { offset } = inst.op else {
            self.flush_pending();
            return;
        };
        let target = (pc as i64 + offset as i64) as u32;
        if inst.guard == Guard::ALWAYS {
            self.goto_next(target, clock, out);
            return;
        }
        // Each way on takes the pending registers (`carry.rs`).
        let pending = std::mem::take(&mut self.ssa.pending);
        let active = self.active();
        let all = self.b.ins().icmp(IntCC::Equal, m, active);
        let taken = self.b.create_block();
        let not_all = self.b.create_block();
        self.b.ins().brif(all, taken, &[], not_all, &[]);
        self.b.switch_to_block(taken);
        self.ssa.pending.clone_from(&pending);
        self.goto_next(target, clock, out);
        self.b.switch_to_block(not_all);
        let none = self.b.create_block();
        let split = self.b.create_block();
        self.b.ins().brif(m, split, &[], none, &[]);
        self.b.switch_to_block(none);
        self.ssa.pending.clone_from(&pending);
        self.goto_next(pc + 1, clock, out);
        self.b.switch_to_block(split);
        self.write_pending(&pending);
        let pcv = self.c32(pc);
        let before = self.b.ins().iadd_imm_s(clock, -1);
        self.store_state(pcv, before);
        let f = self.helper(cx!(diverge));
        self.b
            .ins()
            .call_indirect(self.flow.sig_diverge, f, &[self.mem.ctx, m]);
        self.reload();
        self.goto(target, clock);
    }

    /// `bar` for a full warp, as the interpreter runs it: every lane waits
    /// at `pc` (blocked, its pc there), no lane is left to run (the
    /// rescheduling then finds none: live lanes are all blocked), and the
    /// warp is idle — the code goes on to the next warp (`chain.rs`).
    fn emit_bar(&mut self, pc: u32, clock: Value) {
        let all = self.c32(u32::MAX);
        self.add_threads(all);
        self.add_jwarp(1);
        self.set_warp_field(offset_of!(Warp, blocked), all);
        let pcv = self.c32(pc);
        let pcs = self.b.ins().splat(I32X4, pcv);
        for c in 0..CHUNKS {
            self.set_warp_field(offset_of!(Warp, lane_pc) + 16 * c, pcs);
        }
        let zero = self.c32(0);
        self.b.def_var(self.warp.v_active, zero);
        let none = self.c32(u32::MAX);
        self.b.def_var(self.warp.v_next_min, none);
        self.b.def_var(self.warp.v_pc, pcv);
        self.b.def_var(self.warp.v_clock, clock);
        self.b.ins().jump(self.flow.chain, &[]);
    }

    /// The active group: all lanes in full-warp code.
    fn active(&mut self) -> Value {
        if self.flow.full {
            self.c32(u32::MAX)
        } else {
            self.b.use_var(self.warp.v_active)
        }
    }

    fn emit_exit(&mut self, pc: u32, inst: &Instruction, clock: Value, out: Option<&[Fact]>) {
        let m = self.guard_mask(inst.guard);
        self.add_threads(m);
        // Falling through takes the pending registers (`carry.rs`); lanes
        // exiting leave the others on the register file.
        let pending = std::mem::take(&mut self.ssa.pending);
        let fall = self.b.create_block();
        let some = self.b.create_block();
        self.b.ins().brif(m, some, &[], fall, &[]);
        self.b.switch_to_block(fall);
        self.ssa.pending.clone_from(&pending);
        self.goto_next(pc + 1, clock, out);
        self.b.switch_to_block(some);
        self.write_pending(&pending);
        if self.flow.full && inst.guard == Guard::ALWAYS {
            // A full warp leaving (live lanes are the active ones, all of
            // them): nothing is left to run, nothing to read first.
            let zero = self.c32(0);
            self.set_warp_field(offset_of!(Warp, live), zero);
            self.b.def_var(self.warp.v_active, zero);
            self.end_warp(pc, clock);
            return;
        }
        let live = self.warp_field(I32, offset_of!(Warp, live));
        let live = self.b.ins().band_not(live, m);
        self.set_warp_field(offset_of!(Warp, live), live);
        let active = self.active();
        let active = self.b.ins().band_not(active, m);
        self.b.def_var(self.warp.v_active, active);
        let (gone, rest) = (self.b.create_block(), self.b.create_block());
        self.b.ins().brif(active, rest, &[], gone, &[]);
        self.b.switch_to_block(rest);
        self.goto(pc + 1, clock);
        self.b.switch_to_block(gone);
        // No lane left to run (the usual end of a warp): the interpreter's
        // rescheduling would only clear `next_min`.
        let pcv = self.c32(pc);
        let blocked = self.warp_field(I32, offset_of!(Warp, blocked));
        let runnable = self.b.ins().band_not(live, blocked);
        let (done, resched) = (self.b.create_block(), self.b.create_block());
        self.b.ins().brif(runnable, resched, &[], done, &[]);
        self.b.switch_to_block(done);
        self.end_warp(pc, clock);
        self.b.switch_to_block(resched);
        self.reschedule_and_dispatch(pcv, clock);
    }

    /// The warp has no lane left to run after the exit at `pc`: the
    /// interpreter's rescheduling would only clear `next_min`; on to the
    /// next warp, or back to the scheduler.
    fn end_warp(&mut self, pc: u32, clock: Value) {
        let pcv = self.c32(pc);
        self.b.def_var(self.warp.v_pc, pcv);
        self.b.def_var(self.warp.v_clock, clock);
        let none = self.c32(u32::MAX);
        self.b.def_var(self.warp.v_next_min, none);
        self.b.ins().jump(self.flow.chain, &[]);
    }
}

/// The end of the lane-local region starting at index `i` (at most `end`):
/// lane-local instructions, up to one whose guard predicate an earlier one
/// of the region writes.
pub(super) fn region_end(insts: &[Instruction], kinds: &[Kind], i: usize, end: usize) -> usize {
    let mut j = i;
    let mut written = 0u8;
    while j < end && kinds[j] == Kind::Lane {
        let g = insts[j].guard.pred;
        if g != Pred::TRUE && written >> g.0 & 1 != 0 {
            break;
        }
        if let Some(p) = analysis::pred_written(&insts[j].op) {
            written |= 1 << p;
        }
        j += 1;
    }
    j
}

/// The address register of a memory instruction.
pub(super) fn address(op: &Op) -> u8 {
    match *op {
        Op::Ld { addr, .. } | Op::St { addr, .. } | Op::Atom { addr, .. } => addr.0,
        _ => 0,
    }
}

/// Most registers checked on an entry into a hot version (more: the cold
/// version runs).
const MAX_CHECKED: usize = 8;

/// An unguarded `bar` (all active lanes wait).
fn is_full_bar(inst: &Instruction) -> bool {
    matches!(inst.op, Op::Bar) && inst.guard == Guard::ALWAYS
}

/// The facts of `need` that `have` does not imply.
fn missing(have: &[Fact], need: &[Fact]) -> Vec<(u8, Rc<Shape>)> {
    need.iter()
        .enumerate()
        .filter_map(|(r, n)| {
            let h = have.get(r).cloned().flatten();
            (!Shape::implies(&h, n)).then(|| n.clone().map(|s| (r as u8, s)))?
        })
        .collect()
}
