//! Registers kept in SSA values across a loop's back edge.
//!
//! A block that branches back to its own start (an inner loop such as
//! matmul's) runs its full-warp hot version once per iteration, and every
//! iteration would load the registers it carries from the register file
//! and store them back (matmul's accumulator: eight loads and eight stores
//! per iteration). Where the block's body before the branch is one fused
//! run (`fused.rs`), its hot version instead takes the carried registers
//! as parameters of its head: the back edge of a full warp passes the
//! run's results straight on, and the register file is brought up to date
//! only where code that reads it follows — the interpreter's budget tail,
//! a failed run-time condition, the run's one-by-one path, and every way
//! out of the loop (not taken, divergent). So the register file holds
//! every live value whenever anything but the loop's own fast path runs,
//! as everywhere else.
//!
//! Carried: registers live at the loop's start, written in it and not
//! shaped there (shaped registers are scalars already), at most
//! `MAX_CARRIED` of them (each is eight SIMD values).
//!
//! Shaped registers go across edges between blocks the same way. A
//! register-file write-back of a shaped register is eight vector
//! computations and stores (saxpy's `%gid.x` at the end of its bounds
//! block: 30 host instructions per warp), and the next block's scalar
//! pass only reads its lanes 0 and 16 back. So a hot version takes the
//! shaped registers it reads and does not write (`shaped_params`) as
//! parameters of its head (the bases of lanes 0 and 16); a full-warp
//! region that ends right before its block's branch or exit leaves such
//! registers pending instead of writing them (`SsaRegs::pending`), and a jump
//! to a hot head passes them on. Every other way out writes them first
//! (`write_pending`). In the hot version they are written where code that
//! reads the register file follows, as carried registers are, and not at
//! all where they are dead.

use super::scalar::Sv;
use super::{Gen, CHUNKS};
use crate::inst::*;
use crate::jit::analysis::{self, Kind};
use crate::jit::shape::{Fact, Shape};
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::types::{I32, I32X4};
use cranelift_codegen::ir::{Block, BlockArg, InstBuilder, Value};
use std::collections::HashMap;
use std::rc::Rc;

/// Most registers carried (each takes eight vector registers of the host).
const MAX_CARRIED: usize = 2;

/// Most shaped registers a hot version takes as parameters.
const MAX_SHAPED: usize = 4;

/// The carried registers of the loop being emitted and their current
/// values, chunk by chunk; or the shaped registers a hot version took as
/// parameters (`shaped`, with `regs` empty).
pub(super) struct Carry {
    pub(super) regs: Vec<u8>,
    pub(super) vals: Vec<[Value; CHUNKS]>,
    /// The loop's head, whose parameters are the carried values.
    pub(super) head: Block,
    /// Shaped registers not in the register file: the block does not
    /// write them, so these values hold through it.
    pub(super) shaped: Vec<(u8, Sv)>,
}

impl Carry {
    /// Whether this is a loop's carry (vector registers across a back
    /// edge) rather than shaped parameters only.
    pub(super) fn looping(&self) -> bool {
        !self.regs.is_empty()
    }

    /// The shaped value of `r`, if it is a shaped parameter.
    pub(super) fn shaped(&self, r: u8) -> Option<&Sv> {
        self.shaped.iter().find(|(x, _)| *x == r).map(|(_, sv)| sv)
    }
}

/// Registers held in SSA values instead of the register file across an
/// edge: a loop's back edge, or a jump to a hot version.
#[derive(Default)]
pub(super) struct SsaRegs {
    /// Registers kept in SSA values across the back edge of the loop
    /// being emitted.
    pub(super) carry: Option<Carry>,
    /// Per block start: the shaped registers its hot head takes as
    /// parameters.
    pub(super) hot_params: HashMap<u32, Vec<(u8, Rc<Shape>)>>,
    /// Shaped registers the last region left out of the register file,
    /// for the block's branch or exit to pass on or write.
    pub(super) pending: Vec<(u8, Sv)>,
    /// Loops compiled with carried registers.
    pub(super) carried_loops: usize,
    /// Jumps passing a pending shaped register on to a hot version.
    pub(super) shaped_edges: usize,
}

impl Gen<'_, '_> {
    /// The registers the hot version (facts `hot`) of the block `insts`
    /// at `s` carries across its back edge; empty if it is not a loop of
    /// the kind this handles.
    pub(super) fn carried_regs(&self, insts: &[Instruction], s: u32, hot: &[Fact]) -> Vec<u8> {
        let Some((last, body)) = insts.split_last() else {
            return Vec::new();
        };
        let Op::Bra { offset } = last.op else {
            return Vec::new();
        };
        let bra_pc = s + body.len() as u32;
        if (bra_pc as i64 + offset as i64) != s as i64 || body.len() < 2 {
            return Vec::new();
        }
        let lane_or_mem = body.iter().all(|i| {
            matches!(
                analysis::kind(i, self.k.fma),
                Kind::Lane
                    | Kind::SharedLoad
                    | Kind::SharedStore
                    | Kind::GlobalLoad
                    | Kind::GlobalStore
            )
        });
        if !lane_or_mem {
            return Vec::new();
        }
        let live = self.live_at(s);
        let mut regs = Vec::new();
        for i in body {
            let (d, n) = match analysis::kind(i, self.k.fma) {
                Kind::Lane => analysis::writes(&i.op),
                Kind::SharedLoad | Kind::GlobalLoad => match i.op {
                    Op::Ld { d, .. } => (d.0, 1),
                    _ => (0, 0),
                },
                _ => (0, 0),
            };
            for r in d..d.saturating_add(n) {
                let shaped = hot.get(r as usize).is_some_and(Option::is_some);
                if r < 64 && live >> r & 1 != 0 && !shaped && !regs.contains(&r) {
                    regs.push(r);
                }
            }
        }
        if regs.len() > MAX_CARRIED {
            return Vec::new();
        }
        regs.sort_unstable();
        regs
    }

    /// The hot version's head for a loop carrying `regs`: entered with the
    /// register file up to date, it loads them and goes to a head that
    /// takes them as parameters, then checks the budget (writing them back
    /// before the interpreter's tail). Leaves the builder after the check.
    pub(super) fn enter_carried(&mut self, s: u32, e: u32, regs: Vec<u8>) {
        let head = self.b.create_block();
        let mut args = Vec::new();
        for &r in &regs {
            for c in 0..CHUNKS {
                self.b.append_block_param(head, I32X4);
                args.push(self.load_reg(r, c).into());
            }
        }
        self.b.ins().jump(head, &args);
        self.b.switch_to_block(head);
        let p = self.b.block_params(head).to_vec();
        let vals = (0..regs.len())
            .map(|i| std::array::from_fn(|c| p[i * CHUNKS + c]))
            .collect();
        self.ssa.carry = Some(Carry {
            regs,
            vals,
            head,
            shaped: Vec::new(),
        });
        self.enter(s, e);
    }

    /// Writes the carried values to the register file (they are the
    /// interpreter's values of those registers at this point).
    pub(super) fn flush_carry(&mut self) {
        self.flush_carry_live(u64::MAX);
    }

    /// `flush_carry` of the shaped registers in `live` only (the others
    /// are dead where this runs: no lane reads them before writing them).
    fn flush_carry_live(&mut self, live: u64) {
        let Some(cy) = self.ssa.carry.take() else {
            return;
        };
        for (i, &r) in cy.regs.iter().enumerate() {
            for c in 0..CHUNKS {
                self.store_reg(r, c, cy.vals[i][c]);
            }
        }
        let shaped: Vec<(u8, Sv)> = cy
            .shaped
            .iter()
            .filter(|(r, _)| live >> r & 1 != 0)
            .cloned()
            .collect();
        self.write_pending(&shaped);
        self.ssa.carry = Some(cy);
    }

    /// Ends carrying: the register file gets the values, and the code
    /// after this reads them there.
    pub(super) fn drop_carry(&mut self) {
        self.flush_carry();
        self.ssa.carry = None;
    }

    /// `drop_carry` before the instruction at `pc`: shaped registers dead
    /// there are not written.
    pub(super) fn drop_carry_at(&mut self, pc: u32) {
        let live = self.live_at(pc);
        self.flush_carry_live(live);
        self.ssa.carry = None;
    }

    /// Writes the registers the last region left pending (`SsaRegs::pending`)
    /// to the register file: the code after this reads them there.
    pub(super) fn flush_pending(&mut self) {
        let pending = std::mem::take(&mut self.ssa.pending);
        self.write_pending(&pending);
    }

    /// Writes shaped registers to the register file.
    pub(super) fn write_pending(&mut self, regs: &[(u8, Sv)]) {
        for (r, sv) in regs {
            for c in 0..CHUNKS {
                let v = self.materialize(sv, c);
                self.store_reg(*r, c, v);
            }
        }
    }

    /// The shaped registers the hot version of block `bi` (facts `hot`)
    /// takes as parameters: registers shaped in `hot`
    /// with a base not known at compile time, live at its start, read
    /// before any write in it and never written in it (so the values hold
    /// through the whole block); none for a loop with carried registers.
    /// (With parameters the hot version is emitted even where its facts
    /// are the cold version's.)
    pub(super) fn shaped_params(&self, bi: usize, hot: &[Fact]) -> Vec<(u8, Rc<Shape>)> {
        let Some(&(s, e)) = self.k.blocks.list.get(bi) else {
            return Vec::new();
        };
        let Some(insts) = (s..e)
            .map(|pc| self.k.code.get(pc as usize).copied())
            .collect::<Option<Vec<Instruction>>>()
        else {
            return Vec::new();
        };
        if !self.carried_regs(&insts, s, hot).is_empty() {
            return Vec::new();
        }
        let live = self.live_at(s);
        let read = analysis::read_first(&insts, hot.len().min(64));
        let written = |r: u8| insts.iter().any(|i| analysis::writes_reg(&i.op, r));
        let mut params = Vec::new();
        for (r, f) in hot.iter().enumerate().take(64) {
            let Some(sh) = f else { continue };
            let (live, read) = (live >> r & 1 != 0, read.get(r).copied().unwrap_or(false));
            if sh.known.is_none() && live && read && !written(r as u8) {
                params.push((r as u8, Rc::clone(sh)));
            }
        }
        params.truncate(MAX_SHAPED);
        params
    }

    /// The arguments of a jump to the hot head of block `target`: the
    /// pending value of each of its shaped parameters, or its lanes 0 and
    /// 16 from the register file. Writes the pending registers it does not
    /// take.
    pub(super) fn hot_args(&mut self, target: u32, pending: &[(u8, Sv)]) -> Vec<BlockArg> {
        let params = self
            .ssa
            .hot_params
            .get(&target)
            .cloned()
            .unwrap_or_default();
        let rest: Vec<(u8, Sv)> = pending
            .iter()
            .filter(|(r, _)| !params.iter().any(|(p, _)| p == r))
            .cloned()
            .collect();
        self.write_pending(&rest);
        let mut args = Vec::with_capacity(2 * params.len());
        for (r, sh) in &params {
            let base = match pending.iter().find(|(x, _)| x == r) {
                Some((_, sv)) => {
                    self.ssa.shaped_edges += 1;
                    sv.base
                }
                None => self.entry_sv(*r, sh).base,
            };
            args.extend(base.map(BlockArg::from));
        }
        args
    }

    /// Appends the shaped parameters of block `s`'s hot head `h`.
    pub(super) fn add_hot_params(&mut self, s: u32, h: Block) {
        let n = self.ssa.hot_params.get(&s).map_or(0, Vec::len);
        for _ in 0..2 * n {
            self.b.append_block_param(h, I32);
        }
    }

    /// In the hot head of block `s` (the builder there): its shaped
    /// parameters as the carry.
    pub(super) fn take_hot_params(&mut self, s: u32, h: Block) {
        let params = self.ssa.hot_params.get(&s).cloned().unwrap_or_default();
        if params.is_empty() {
            return;
        }
        let p = self.b.block_params(h).to_vec();
        let shaped = params
            .into_iter()
            .enumerate()
            .map(|(i, (r, shape))| {
                (
                    r,
                    Sv {
                        shape,
                        base: [p[2 * i], p[2 * i + 1]],
                    },
                )
            })
            .collect();
        self.ssa.carry = Some(Carry {
            regs: Vec::new(),
            vals: Vec::new(),
            head: h,
            shaped,
        });
    }

    /// The carried registers loaded from the register file (after code
    /// that updated it).
    pub(super) fn reload_carry(&mut self) {
        let Some(mut cy) = self.ssa.carry.take() else {
            return;
        };
        for (i, &r) in cy.regs.iter().enumerate() {
            for c in 0..CHUNKS {
                cy.vals[i][c] = self.load_reg(r, c);
            }
        }
        self.ssa.carry = Some(cy);
    }

    /// The carried values as block arguments.
    pub(super) fn carry_args(&self) -> Vec<Value> {
        self.ssa
            .carry
            .as_ref()
            .map(|cy| cy.vals.iter().flatten().copied().collect())
            .unwrap_or_default()
    }

    /// A block taking the carried values as parameters (a join), and the
    /// carried values set from them once the builder is in it.
    pub(super) fn carry_join(&mut self) -> Block {
        let b = self.b.create_block();
        if let Some(cy) = &self.ssa.carry {
            for _ in 0..cy.regs.len() * CHUNKS {
                self.b.append_block_param(b, I32X4);
            }
        }
        b
    }

    /// After switching to a `carry_join` block: its parameters are the
    /// carried values.
    pub(super) fn take_join_params(&mut self, b: Block) {
        let p = self.b.block_params(b).to_vec();
        if let Some(cy) = &mut self.ssa.carry {
            for (i, v) in cy.vals.iter_mut().enumerate() {
                *v = std::array::from_fn(|c| p[i * CHUNKS + c]);
            }
        }
    }

    /// The loop's branch back (`inst` at `pc`, lane mask `m` already
    /// counted): a full warp taking it goes to the head with the carried
    /// values; anything else writes them back first and branches as
    /// usual (`rest`).
    pub(super) fn carried_branch(&mut self, m: Value, clock: Value, rest: impl FnOnce(&mut Self)) {
        let Some(head) = self.ssa.carry.as_ref().map(|c| c.head) else {
            rest(self);
            return;
        };
        let all = self.b.ins().icmp_imm_s(IntCC::Equal, m, -1);
        let (back, other) = (self.b.create_block(), self.b.create_block());
        self.b.ins().brif(all, back, &[], other, &[]);
        self.b.switch_to_block(back);
        self.b.def_var(self.warp.v_clock, clock);
        let args: Vec<_> = self.carry_args().into_iter().map(Into::into).collect();
        self.b.ins().jump(head, &args);
        self.b.switch_to_block(other);
        self.drop_carry();
        rest(self);
    }
}
