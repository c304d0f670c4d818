//! Which registers have a [`Shape`] when a full warp starts a block.
//!
//! Two kinds of facts, for two versions of a block's full-warp code:
//!
//! * **Invariant facts** hold at *every* full-warp entry, however the
//!   warp got there (from the scheduler, after the interpreter ran, after
//!   divergence and reconvergence). They come from reaching definitions
//!   lane by lane: a lane's register holds what the last instruction that
//!   lane executed wrote to it. If every path to the block reaches the
//!   same definition, and that definition computes a warp-invariant value
//!   (arguments, thread ids, constants, and invariant registers), every
//!   lane holds that definition's value for that lane, whose shape is
//!   known. The *cold* version of a block assumes these.
//! * **Chain facts** hold for a warp that stayed full and took every fast
//!   path since the kernel's start: a loop counter is uniform, an address
//!   advanced by a constant keeps its lane offsets. They are a forward
//!   analysis over every edge (a barrier leaves the warp's registers
//!   alone), dropping known constants at loop heads. The *hot* version of
//!   a block assumes them; native code enters it directly where its own
//!   facts imply them, and otherwise (from the dispatch, from a cold
//!   version) only after checking the missing ones in the register file
//!   (`blocks.rs`). A wrong guess costs a check, never a result.

use super::analysis::{self, Blocks, Kind};
use super::shape::{self, Fact, NoWrap, Shape, Specials};
use crate::inst::*;
use std::collections::HashMap;
use std::rc::Rc;

/// The facts of every block (indices of `Blocks::list`).
pub(crate) struct BlockFacts {
    /// At any full-warp entry.
    pub(crate) cold: Vec<Vec<Fact>>,
    /// At an entry from native full-warp code, for blocks that have such
    /// entries.
    pub(crate) hot: Vec<Option<Vec<Fact>>>,
}

/// What running instruction `inst` on a full warp does to the register
/// facts `f`: the shapes of its results, or `None` when they are not
/// shaped (or it writes no register), and the run-time conditions the
/// shapes need. Guarded instructions write only some lanes: not shaped.
pub(crate) fn step(
    inst: &Instruction,
    f: &[Fact],
    sp: &Specials,
    fma: bool,
) -> Option<(Vec<Shape>, Vec<NoWrap>)> {
    if inst.guard != Guard::ALWAYS || analysis::kind(inst, fma) != Kind::Lane {
        return None;
    }
    let (d, n) = analysis::writes(&inst.op);
    let r = shape::transfer(&inst.op, |r| f.get(r as usize).cloned().flatten(), sp)?;
    (r.0.len() == n as usize && (d as usize + n as usize) <= f.len()).then_some(r)
}

/// Applies `step` to `f`.
fn apply(inst: &Instruction, f: &mut [Fact], sp: &Specials, fma: bool) {
    let (d, n) = analysis::writes(&inst.op);
    let shapes = step(inst, f, sp, fma).map(|(s, _)| s);
    for i in 0..n as usize {
        if let Some(slot) = f.get_mut(d as usize + i) {
            *slot = shapes.as_ref().and_then(|s| s.get(i)).cloned().map(Rc::new);
        }
    }
}

/// The facts after block `(s, e)` ran on a full warp from facts `f`.
fn through(
    code: &[Instruction],
    (s, e): (u32, u32),
    f: &[Fact],
    sp: &Specials,
    fma: bool,
) -> Vec<Fact> {
    let mut f = f.to_vec();
    for pc in s..e {
        if let Some(inst) = code.get(pc as usize) {
            apply(inst, &mut f, sp, fma);
        }
    }
    f
}

/// Successors of block `(s, e)`: where the warp may continue after it
/// (`hot`: whether full-warp native code continues there directly).
pub(crate) fn successors(
    code: &[Instruction],
    (s, e): (u32, u32),
    (start, end): (u32, u32),
) -> Vec<(u32, bool)> {
    let _ = s;
    let Some(last) = e.checked_sub(1).and_then(|pc| code.get(pc as usize)) else {
        return Vec::new();
    };
    let guarded = last.guard != Guard::ALWAYS;
    let pc = e - 1;
    let mut v = Vec::new();
    match last.op {
        Op::Bra { offset } => {
            let t = pc as i64 + offset as i64;
            if (start as i64..end as i64).contains(&t) {
                v.push((t as u32, true));
            }
            if guarded {
                v.push((e, true));
            }
        }
        Op::Exit | Op::Trap { .. } => {
            if guarded {
                v.push((e, !matches!(last.op, Op::Trap { .. })));
            }
        }
        Op::Bar => v.push((e, false)),
        _ => v.push((e, true)),
    }
    v.retain(|&(t, _)| (start..end).contains(&t));
    v
}

/// Where each register's value last came from, lane by lane.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reach {
    Unreached,
    /// The instruction at this pc (or `ENTRY`: the zeroed register file).
    One(u32),
    Many,
}

const ENTRY: u32 = u32::MAX;

fn meet(a: Reach, b: Reach) -> Reach {
    match (a, b) {
        (Reach::Unreached, x) | (x, Reach::Unreached) => x,
        (Reach::One(x), Reach::One(y)) if x == y => a,
        _ => Reach::Many,
    }
}

fn reach_step(inst: &Instruction, pc: u32, r: &mut [Reach]) {
    let (d, n) = analysis::writes(&inst.op);
    for i in 0..n as usize {
        if let Some(slot) = r.get_mut(d as usize + i) {
            *slot = if inst.guard == Guard::ALWAYS {
                Reach::One(pc)
            } else {
                meet(*slot, Reach::One(pc))
            };
        }
    }
}

/// Analyses kernel `(start, len)` of `code` with `nregs` registers.
pub(crate) fn analyse(
    code: &[Instruction],
    (start, len): (u32, u32),
    nregs: usize,
    blocks: &Blocks,
    sp: &Specials,
    fma: bool,
) -> BlockFacts {
    let end = start + len;
    let index: HashMap<u32, usize> = blocks
        .list
        .iter()
        .enumerate()
        .map(|(i, b)| (b.0, i))
        .collect();
    let succ: Vec<Vec<(usize, bool)>> = blocks
        .list
        .iter()
        .map(|&b| {
            successors(code, b, (start, end))
                .into_iter()
                .filter_map(|(t, hot)| index.get(&t).map(|&i| (i, hot)))
                .collect()
        })
        .collect();
    let reach_in = reaching(code, blocks, &succ, nregs);
    let cold = invariant_facts(code, blocks, &reach_in, nregs, sp);
    let spec = chain_facts(code, blocks, &succ, nregs, sp, fma);
    // Only facts about registers a block may read before writing them are
    // worth assuming (and checking on entry).
    let live = liveness(code, blocks, &succ, nregs);
    let hot: Vec<Option<Vec<Fact>>> = match spec {
        // No fixed point within the bound: no hot versions.
        None => vec![None; blocks.list.len()],
        Some(spec) => spec
            .into_iter()
            .zip(&cold)
            .zip(&live)
            .map(|((s, c), &live)| {
                let mut f = s?;
                for (r, (x, c)) in f.iter_mut().zip(c).enumerate() {
                    if live >> r & 1 == 0 {
                        *x = c.clone();
                    } else if Shape::implies(c, x) {
                        // Both hold: the stronger.
                        *x = c.clone();
                    }
                }
                (f != *c).then_some(f)
            })
            .collect(),
    };
    BlockFacts { cold, hot }
}

/// Reaching definitions: per block, per register, the definitions that
/// reach the block's start.
fn reaching(
    code: &[Instruction],
    blocks: &Blocks,
    succ: &[Vec<(usize, bool)>],
    nregs: usize,
) -> Vec<Vec<Reach>> {
    let n = blocks.list.len();
    let mut reach_in = vec![vec![Reach::Unreached; nregs]; n];
    if n > 0 {
        reach_in[0] = vec![Reach::One(ENTRY); nregs];
    }
    let reach_out = |b: usize, r: &[Reach]| {
        let mut r = r.to_vec();
        let (s, e) = blocks.list[b];
        for pc in s..e {
            if let Some(inst) = code.get(pc as usize) {
                reach_step(inst, pc, &mut r);
            }
        }
        r
    };
    let mut changed = true;
    while changed {
        changed = false;
        for b in 0..n {
            if reach_in[b].iter().all(|&r| r == Reach::Unreached) {
                continue;
            }
            let out = reach_out(b, &reach_in[b]);
            for &(t, _) in &succ[b] {
                let new: Vec<Reach> = reach_in[t]
                    .iter()
                    .zip(&out)
                    .map(|(&x, &y)| meet(x, y))
                    .collect();
                if new != reach_in[t] {
                    reach_in[t] = new;
                    changed = true;
                }
            }
        }
    }
    reach_in
}

/// The invariant facts at each block's start, from the reaching
/// definitions `reach_in`.
fn invariant_facts(
    code: &[Instruction],
    blocks: &Blocks,
    reach_in: &[Vec<Reach>],
    nregs: usize,
    sp: &Specials,
) -> Vec<Vec<Fact>> {
    // The shapes of invariant definitions: (pc, part) → shape.
    let mut inv: HashMap<(u32, u8), Rc<Shape>> = HashMap::new();
    let zero = Rc::new(Shape::uniform(Some(0)));
    let fact_of = |inv: &HashMap<(u32, u8), Rc<Shape>>, r: Reach, reg: usize| -> Fact {
        match r {
            Reach::One(ENTRY) => Some(Rc::clone(&zero)),
            Reach::One(pc) => {
                // Which part of the definition at `pc` this register is.
                let (d, _) = code
                    .get(pc as usize)
                    .map_or((0, 0), |i| analysis::writes(&i.op));
                inv.get(&(pc, (reg as u8).wrapping_sub(d))).cloned()
            }
            _ => None,
        }
    };
    let mut changed = true;
    let mut rounds = 0;
    while changed && rounds < 64 {
        changed = false;
        rounds += 1;
        for b in 0..blocks.list.len() {
            let mut r = reach_in[b].clone();
            let (s, e) = blocks.list[b];
            for pc in s..e {
                let Some(inst) = code.get(pc as usize) else {
                    break;
                };
                let (d, cnt) = analysis::writes(&inst.op);
                let invariant_op = !matches!(
                    inst.op,
                    Op::S2r {
                        sr: Special::Clock | Special::ClockHi,
                        ..
                    }
                );
                // Any pure lane-local computation of invariant values is
                // invariant, whichever engine runs it; a shape that needs
                // a run-time check is not a fact everywhere.
                if cnt > 0 && invariant_op && !inv.contains_key(&(pc, 0)) {
                    let f: Vec<Fact> = (0..nregs).map(|i| fact_of(&inv, r[i], i)).collect();
                    let t = shape::transfer(&inst.op, |x| f.get(x as usize).cloned().flatten(), sp);
                    if let Some((shapes, guards)) = t {
                        if guards.is_empty()
                            && shapes.len() == cnt as usize
                            && (d as usize + cnt as usize) <= nregs
                        {
                            for (i, s) in shapes.into_iter().enumerate() {
                                inv.insert((pc, i as u8), Rc::new(s));
                            }
                            changed = true;
                        }
                    }
                }
                reach_step(inst, pc, &mut r);
            }
        }
    }
    reach_in
        .iter()
        .map(|r| (0..nregs).map(|i| fact_of(&inv, r[i], i)).collect())
        .collect()
}

/// Chain facts: what a warp that stays full and takes every fast path
/// from the kernel's start carries into each block (the meet over all
/// predecessors; a barrier leaves a warp's registers alone), with the
/// known constants dropped at loop heads. `analyse` joins them with the
/// invariant facts; native code checks them in the register file where
/// it cannot know them (`blocks.rs`). `None`: no fixed point within the
/// bound.
fn chain_facts(
    code: &[Instruction],
    blocks: &Blocks,
    succ: &[Vec<(usize, bool)>],
    nregs: usize,
    sp: &Specials,
    fma: bool,
) -> Option<Vec<Option<Vec<Fact>>>> {
    let n = blocks.list.len();
    let zero = Rc::new(Shape::uniform(Some(0)));
    let mut looped = vec![false; n];
    for (a, s) in succ.iter().enumerate() {
        for &(t, _) in s {
            if blocks.list[t].0 <= blocks.list[a].0 {
                looped[t] = true;
            }
        }
    }
    let mut spec: Vec<Option<Vec<Fact>>> = vec![None; n];
    if n > 0 {
        spec[0] = Some(vec![Some(Rc::clone(&zero)); nregs]);
    }
    let mut changed = true;
    let mut rounds = 0;
    while changed && rounds < 64 {
        changed = false;
        rounds += 1;
        for a in 0..n {
            let Some(f) = spec[a].clone() else { continue };
            let out = through(code, blocks.list[a], &f, sp, fma);
            for &(t, _) in &succ[a] {
                let mut new: Vec<Fact> = match &spec[t] {
                    None => out.clone(),
                    Some(prev) => prev
                        .iter()
                        .zip(&out)
                        .map(|(x, y)| Shape::meet(x, y))
                        .collect(),
                };
                if looped[t] {
                    for x in new.iter_mut() {
                        if let Some(s) = x.as_ref().filter(|s| s.known.is_some()) {
                            let mut s = (**s).clone();
                            s.known = None;
                            *x = Some(Rc::new(s));
                        }
                    }
                }
                if spec[t].as_ref() != Some(&new) {
                    spec[t] = Some(new);
                    changed = true;
                }
            }
        }
    }
    (!changed).then_some(spec)
}

/// Per block: the registers (bit `r`) it or a block after it may read
/// before writing them in every lane.
fn liveness(
    code: &[Instruction],
    blocks: &Blocks,
    succ: &[Vec<(usize, bool)>],
    nregs: usize,
) -> Vec<u64> {
    let n = blocks.list.len();
    let all = if nregs >= 64 {
        u64::MAX
    } else {
        (1u64 << nregs) - 1
    };
    // Per block: read before written, and written (unguarded) at all.
    let (mut uses, mut defs) = (vec![0u64; n], vec![0u64; n]);
    for (b, &(s, e)) in blocks.list.iter().enumerate() {
        for pc in s..e {
            let Some(inst) = code.get(pc as usize) else {
                break;
            };
            for (r, _) in analysis::reads(&inst.op) {
                if r < 64 && defs[b] >> r & 1 == 0 {
                    uses[b] |= 1 << r;
                }
            }
            if inst.guard == Guard::ALWAYS {
                let (d, k) = analysis::writes(&inst.op);
                for r in d..d.saturating_add(k) {
                    if r < 64 {
                        defs[b] |= 1 << r;
                    }
                }
            }
        }
    }
    let mut live = vec![0u64; n];
    let mut changed = true;
    while changed {
        changed = false;
        for b in (0..n).rev() {
            let out = succ[b].iter().fold(0u64, |m, &(t, _)| m | live[t]);
            let new = (uses[b] | (out & !defs[b])) & all;
            if new != live[b] {
                live[b] = new;
                changed = true;
            }
        }
    }
    live
}
