//! The instruction loop: a warp's instructions until its quantum is used
//! up, it has no runnable lane left, or it traps or faults.

use super::warp::{bin, compare, expand, ffma_lanes, fl, map1, map3, un};
use super::{Fault, FaultKind, Lanes, Trap, Warp, WarpStop, WorkgroupExec, FULL};
use crate::inst::*;
use crate::math;
use crate::mem::{lanes, Access, GlobalMemory, LaneFault, MemFault, MemFaultReason};

impl WorkgroupExec<'_> {
    #[inline(always)]
    fn special(&self, w: usize, warp: &Warp, sr: Special) -> Lanes {
        let [nx, ny, nz] = self.launch.wg_size;
        let [gx, gy, gz] = self.launch.grid;
        let wg = self.wg;
        let tid = &self.tids[w];
        let gid = |d: usize, n: u32| map1(&tid[d], |t| wg[d].wrapping_mul(n).wrapping_add(t));
        match sr {
            Special::TidX => tid[0],
            Special::TidY => tid[1],
            Special::TidZ => tid[2],
            Special::NtidX => [nx; WARP_SIZE],
            Special::NtidY => [ny; WARP_SIZE],
            Special::NtidZ => [nz; WARP_SIZE],
            Special::WgidX => [wg[0]; WARP_SIZE],
            Special::WgidY => [wg[1]; WARP_SIZE],
            Special::WgidZ => [wg[2]; WARP_SIZE],
            Special::NwgX => [gx; WARP_SIZE],
            Special::NwgY => [gy; WARP_SIZE],
            Special::NwgZ => [gz; WARP_SIZE],
            Special::GidX => gid(0, nx),
            Special::GidY => gid(1, ny),
            Special::GidZ => gid(2, nz),
            Special::LaneId => std::array::from_fn(|l| l as u32),
            Special::WarpId => [w as u32; WARP_SIZE],
            Special::NWarps => [self.nwarps as u32; WARP_SIZE],
            Special::Clock => [warp.clock as u32; WARP_SIZE],
            Special::ClockHi => [(warp.clock >> 32) as u32; WARP_SIZE],
        }
    }

    /// The interpreter's warp loop: warp `w` (taken out of `self.warps`)
    /// for at most `quantum` instructions.
    #[inline(never)]
    pub(crate) fn run_warp_inner<M: GlobalMemory + ?Sized>(
        &mut self,
        w: usize,
        warp: &mut Warp,
        code: &[Instruction],
        mem: &M,
        quantum: u64,
    ) -> Result<(u64, WarpStop), Fault> {
        #[cfg(target_arch = "x86_64")]
        {
            if has_avx2_fma() {
                // SAFETY: the CPU has every feature `run_warp_avx2` is
                // compiled for, checked by `has_avx2_fma`.
                return unsafe { self.run_warp_avx2(w, warp, code, mem, quantum) };
            }
        }
        self.run_warp_body::<false, M>(w, warp, code, mem, quantum)
    }

    /// The warp loop compiled for AVX2 and FMA: 8 lanes per vector
    /// instruction. Results are bit-identical to the baseline build.
    ///
    /// # Safety
    /// The CPU must support AVX2, FMA, BMI1, BMI2, POPCNT and LZCNT.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma,bmi1,bmi2,popcnt,lzcnt")]
    unsafe fn run_warp_avx2<M: GlobalMemory + ?Sized>(
        &mut self,
        w: usize,
        warp: &mut Warp,
        code: &[Instruction],
        mem: &M,
        quantum: u64,
    ) -> Result<(u64, WarpStop), Fault> {
        self.run_warp_body::<true, M>(w, warp, code, mem, quantum)
    }

    /// The warp loop. `FMA`: the function is compiled with hardware FMA.
    #[inline(always)]
    fn run_warp_body<const FMA: bool, M: GlobalMemory + ?Sized>(
        &mut self,
        w: usize,
        warp: &mut Warp,
        code: &[Instruction],
        mem: &M,
        quantum: u64,
    ) -> Result<(u64, WarpStop), Fault> {
        let mut used = 0u64;
        let mut thread_insts = 0u64;
        let result = loop {
            if warp.active == 0 {
                break WarpStop::Idle;
            }
            if used == quantum {
                break WarpStop::Quantum;
            }
            let pc = warp.pc;
            let Some(&inst) = code.get(pc as usize) else {
                // Unreachable for validated modules: the last instruction of
                // every kernel is an unconditional exit, bra or trap.
                warp.live &= !warp.active;
                warp.active = 0;
                warp.reschedule();
                continue;
            };
            used += 1;
            let m = warp.active & warp.pred(inst.guard.pred, inst.guard.neg);
            thread_insts += m.count_ones() as u64;
            let mut next = pc.wrapping_add(1);
            if m != 0 {
                match inst.op {
                    Op::Exit | Op::Bar | Op::Trap { .. } | Op::Bra { .. } => {
                        match control(w, warp, inst.op, pc, m, &mut next) {
                            Then::Next => {}
                            Then::Regrouped => {
                                warp.clock += 1;
                                continue;
                            }
                            Then::Trap(t) => {
                                warp.clock += 1;
                                self.stats.warp_instructions += used;
                                self.stats.thread_instructions += thread_insts;
                                return Ok((used, WarpStop::Trap(t)));
                            }
                        }
                    }
                    Op::Ld {
                        space: Space::Global,
                        ..
                    }
                    | Op::St {
                        space: Space::Global,
                        ..
                    }
                    | Op::Atom {
                        space: Space::Global,
                        ..
                    } => global(warp, inst.op, mem, m)
                        .map_err(|(lane, f)| fault(w, pc, lane, FaultKind::Global(f)))?,
                    Op::Ld { .. } | Op::St { .. } | Op::Atom { .. } => self
                        .shared_op(warp, inst.op, m)
                        .map_err(|(lane, f)| fault(w, pc, lane, FaultKind::Shared(f)))?,
                    Op::Shfl { .. } | Op::Vote { .. } | Op::Ballot { .. } => {
                        cross_lane(warp, inst.op, m)
                    }
                    _ => self.alu::<FMA>(w, warp, inst.op, m),
                }
            }
            warp.clock += 1;
            warp.pc = next;
            if next >= warp.next_min {
                warp.reschedule();
            }
        };
        self.stats.warp_instructions += used;
        self.stats.thread_instructions += thread_insts;
        Ok((used, result))
    }

    /// Moves, arithmetic and predicate logic: lane by lane on registers,
    /// under mask `m`.
    #[inline(always)]
    fn alu<const FMA: bool>(&self, w: usize, warp: &mut Warp, op: Op, m: u32) {
        match op {
            Op::Mov { d, b } => {
                let v = warp.src(b);
                warp.write(d, &v, m);
            }
            Op::S2r { d, sr } => {
                let v = self.special(w, warp, sr);
                warp.write(d, &v, m);
            }
            Op::Ldarg { d, wide, offset } => {
                let args = &self.launch.args;
                let word = |o: u32| {
                    let o = o as usize;
                    match args.get(o..o + 4) {
                        Some(b) => u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
                        None => 0,
                    }
                };
                warp.write(d, &[word(offset); WARP_SIZE], m);
                if wide {
                    let hi = [word(offset.wrapping_add(4)); WARP_SIZE];
                    warp.write(Reg(d.0 + 1), &hi, m);
                }
            }
            Op::Sel { d, a, b, p, neg } => {
                let pm = expand(warp.pred(p, neg));
                let av = &warp.regs[a.0 as usize];
                let bv = warp.src(b);
                let v = map3(av, &bv, &pm, |x, y, k| (x & k) | (y & !k));
                warp.write(d, &v, m);
            }
            Op::Bin { op, d, a, b } => {
                let bv = warp.src(b);
                let v = bin(op, &warp.regs[a.0 as usize], &bv);
                warp.write(d, &v, m);
            }
            Op::Un { op, d, a } => {
                let v = un(op, &warp.regs[a.0 as usize]);
                warp.write(d, &v, m);
            }
            Op::Tri { op, d, a, b, c } => {
                let (av, bv, cv) = (
                    &warp.regs[a.0 as usize],
                    &warp.regs[b.0 as usize],
                    &warp.regs[c.0 as usize],
                );
                let v = match op {
                    TriOp::Mad => map3(av, bv, cv, |x, y, z| x.wrapping_mul(y).wrapping_add(z)),
                    TriOp::FFma if FMA => map3(av, bv, cv, |x, y, z| {
                        math::canon(fl(x).mul_add(fl(y), fl(z)))
                    }),
                    TriOp::FFma => ffma_lanes(av, bv, cv),
                };
                warp.write(d, &v, m);
            }
            Op::Add64 { d, a, b } => add64(warp, d, a, b, m),
            Op::MadWide { signed, d, a, b, c } => mad_wide(warp, signed, d, a, b, c, m),
            Op::Setp { cmp, ty, p, a, b } => {
                let bv = warp.src(b);
                let v = compare(cmp, ty, &warp.regs[a.0 as usize], &bv);
                warp.set_pred(p, v, m);
            }
            Op::Plop {
                op,
                p,
                a,
                na,
                b,
                nb,
            } => {
                let (x, y) = (warp.pred(a, na), warp.pred(b, nb));
                let v = match op {
                    PredOp::And => x & y,
                    PredOp::Or => x | y,
                    PredOp::Xor => x ^ y,
                };
                warp.set_pred(p, v, m);
            }
            // `nop`; the other instructions are never passed here.
            _ => {}
        }
    }

    /// A shared-memory load, store or atomic by the lanes of `m`, or the
    /// lowest faulting lane's fault.
    #[inline(always)]
    fn shared_op(&mut self, warp: &mut Warp, op: Op, m: u32) -> Result<(), (u32, MemFault)> {
        match op {
            Op::Ld {
                width,
                d,
                addr,
                offset,
                ..
            } => {
                let shared = &self.shared;
                let size = width.bytes();
                let base = &warp.regs[addr.0 as usize];
                let mut lo = [0u32; WARP_SIZE];
                let mut hi = [0u32; WARP_SIZE];
                if size == 4 {
                    let idx = shared_words(shared, base, offset, m, Access::Read)?;
                    for l in 0..WARP_SIZE {
                        if m >> l & 1 != 0 {
                            lo[l] = shared.get(idx[l] as usize).copied().unwrap_or(0);
                        }
                    }
                    warp.write(d, &lo, m);
                    return Ok(());
                }
                for l in lanes(m) {
                    let a = base[l].wrapping_add(offset as u32);
                    let i =
                        shared_index(shared, a, size, Access::Read).map_err(|f| (l as u32, f))?;
                    let word = shared[i];
                    match size {
                        1 => lo[l] = (word >> ((a & 3) * 8)) & 0xff,
                        2 => lo[l] = (word >> ((a & 2) * 8)) & 0xffff,
                        4 => lo[l] = word,
                        _ => {
                            lo[l] = word;
                            hi[l] = shared[i + 1];
                        }
                    }
                }
                write_loaded(warp, width, d, &lo, &hi, m);
            }
            Op::St {
                width,
                addr,
                offset,
                v,
                ..
            } => {
                let shared = &mut self.shared;
                let size = width.bytes();
                let base = &warp.regs[addr.0 as usize];
                let val = &warp.regs[v.0 as usize];
                if size == 4 {
                    let idx = shared_words(shared, base, offset, m, Access::Write)?;
                    for l in 0..WARP_SIZE {
                        if m >> l & 1 != 0 {
                            if let Some(s) = shared.get_mut(idx[l] as usize) {
                                *s = val[l];
                            }
                        }
                    }
                } else {
                    for l in lanes(m) {
                        let a = base[l].wrapping_add(offset as u32);
                        let i = shared_index(shared, a, size, Access::Write)
                            .map_err(|f| (l as u32, f))?;
                        match size {
                            1 | 2 => {
                                let sh = (a & 3) * 8;
                                let mk = if size == 1 { 0xffu32 } else { 0xffff } << sh;
                                shared[i] = (shared[i] & !mk) | ((val[l] << sh) & mk);
                            }
                            4 => shared[i] = val[l],
                            _ => {
                                shared[i] = val[l];
                                shared[i + 1] = warp.regs[v.0 as usize + 1][l];
                            }
                        }
                    }
                }
            }
            Op::Atom {
                op,
                d,
                addr,
                offset,
                b,
                c,
                ..
            } => {
                let shared = &mut self.shared;
                let base = &warp.regs[addr.0 as usize];
                let (bv, cv) = (&warp.regs[b.0 as usize], &warp.regs[c.0 as usize]);
                let mut old = [0u32; WARP_SIZE];
                for l in lanes(m) {
                    let a = base[l].wrapping_add(offset as u32);
                    let i =
                        shared_index(shared, a, 4, Access::Atomic).map_err(|f| (l as u32, f))?;
                    old[l] = shared[i];
                    shared[i] = op.apply(old[l], bv[l], cv[l]);
                }
                warp.write(d, &old, m);
            }
            _ => {}
        }
        Ok(())
    }
}

/// How the warp loop goes on after a control-flow instruction.
enum Then {
    /// With the instruction at `next`.
    Next,
    /// With the new active group: the warp has none left here and was
    /// rescheduled.
    Regrouped,
    /// It stops: the warp trapped.
    Trap(Trap),
}

/// `exit`, `bar`, `trap` and `bra` by the lanes of `m` at `pc`; a branch
/// sets `next`.
#[inline(always)]
fn control(w: usize, warp: &mut Warp, op: Op, pc: u32, m: u32, next: &mut u32) -> Then {
    match op {
        Op::Exit => {
            warp.live &= !m;
            warp.active &= !m;
            if warp.active == 0 {
                warp.reschedule();
                return Then::Regrouped;
            }
        }
        Op::Bar => {
            warp.blocked |= m;
            for l in lanes(m) {
                warp.lane_pc[l] = pc;
            }
            warp.active &= !m;
            if warp.active == 0 {
                warp.reschedule();
                return Then::Regrouped;
            }
        }
        Op::Trap { code } => {
            return Then::Trap(Trap {
                warp: w as u32,
                pc,
                mask: m,
                code,
            })
        }
        Op::Bra { offset } => {
            let target = (pc as i64 + offset as i64) as u32;
            if m != warp.active {
                // Divergence: the taken lanes go to the target, the others
                // stay on the fall-through path.
                for l in lanes(warp.active & !m) {
                    warp.lane_pc[l] = *next;
                }
                warp.next_min = warp.next_min.min(*next);
                warp.active = m;
            }
            *next = target;
        }
        _ => {}
    }
    Then::Next
}

/// A global-memory load, store or atomic by the lanes of `m`, or the
/// lowest faulting lane's fault.
#[inline(always)]
fn global<M: GlobalMemory + ?Sized>(
    warp: &mut Warp,
    op: Op,
    mem: &M,
    m: u32,
) -> Result<(), (u32, MemFault)> {
    let lane_fault = |LaneFault { lane, fault }| (lane, fault);
    match op {
        Op::Ld {
            width,
            d,
            addr,
            offset,
            ..
        } => {
            let va = warp.addr64(addr, offset);
            let size = width.bytes() as u8;
            check_aligned(&va, m, size, Access::Read)?;
            let mut lo = [0u32; WARP_SIZE];
            let mut hi = [0u32; WARP_SIZE];
            mem.load_warp(size, &va, m, &mut lo, &mut hi)
                .map_err(lane_fault)?;
            write_loaded(warp, width, d, &lo, &hi, m);
        }
        Op::St {
            width,
            addr,
            offset,
            v,
            ..
        } => {
            let va = warp.addr64(addr, offset);
            let size = width.bytes() as u8;
            check_aligned(&va, m, size, Access::Write)?;
            let lo = &warp.regs[v.0 as usize];
            let hi = if width == Width::B64 {
                &warp.regs[v.0 as usize + 1]
            } else {
                lo
            };
            mem.store_warp(size, &va, m, lo, hi).map_err(lane_fault)?;
        }
        Op::Atom {
            op,
            d,
            addr,
            offset,
            b,
            c,
            ..
        } => {
            let va = warp.addr64(addr, offset);
            check_aligned(&va, m, 4, Access::Atomic)?;
            let (bv, cv) = (&warp.regs[b.0 as usize], &warp.regs[c.0 as usize]);
            let mut old = [0u32; WARP_SIZE];
            for l in lanes(m) {
                old[l] = mem
                    .atomic32(va[l], op, bv[l], cv[l])
                    .map_err(|f| (l as u32, f))?;
            }
            warp.write(d, &old, m);
        }
        _ => {}
    }
    Ok(())
}

/// `shfl`, `vote` and `ballot`: the instructions that read other lanes.
#[inline(always)]
fn cross_lane(warp: &mut Warp, op: Op, m: u32) {
    match op {
        Op::Shfl { mode, d, a, b } => {
            let av = &warp.regs[a.0 as usize];
            let bv = warp.src(b);
            let mut out = [0u32; WARP_SIZE];
            for l in 0..WARP_SIZE {
                let s = match mode {
                    ShflMode::Idx => (bv[l] & 31) as usize,
                    ShflMode::Up => {
                        if (bv[l] as usize) <= l {
                            l - bv[l] as usize
                        } else {
                            l
                        }
                    }
                    ShflMode::Down => {
                        let s = l as u64 + bv[l] as u64;
                        if s < WARP_SIZE as u64 {
                            s as usize
                        } else {
                            l
                        }
                    }
                    ShflMode::Bfly => l ^ (bv[l] & 31) as usize,
                };
                out[l] = av[s];
            }
            warp.write(d, &out, m);
        }
        Op::Vote { mode, p, src, neg } => {
            let s = warp.pred(src, neg) & m;
            let v = match mode {
                VoteMode::Any => s != 0,
                VoteMode::All => s == m,
            };
            warp.set_pred(p, if v { FULL } else { 0 }, m);
        }
        Op::Ballot { d, src, neg } => {
            let s = warp.pred(src, neg) & m;
            warp.write(d, &[s; WARP_SIZE], m);
        }
        _ => {}
    }
}

/// `add.64`: the 64-bit sum of register pairs (or a sign-extended
/// immediate).
#[inline(always)]
fn add64(warp: &mut Warp, d: Reg, a: Reg, b: Src, m: u32) {
    let (alo, ahi) = (&warp.regs[a.0 as usize], &warp.regs[a.0 as usize + 1]);
    let (blo, bhi) = match b {
        Src::Reg(r) => (warp.regs[r.0 as usize], warp.regs[r.0 as usize + 1]),
        Src::Imm(v) => ([v; WARP_SIZE], [((v as i32) >> 31) as u32; WARP_SIZE]),
    };
    let mut lo = [0u32; WARP_SIZE];
    let mut hi = [0u32; WARP_SIZE];
    for l in 0..WARP_SIZE {
        let s = (alo[l] as u64 | (ahi[l] as u64) << 32)
            .wrapping_add(blo[l] as u64 | (bhi[l] as u64) << 32);
        lo[l] = s as u32;
        hi[l] = (s >> 32) as u32;
    }
    warp.write(d, &lo, m);
    warp.write(Reg(d.0 + 1), &hi, m);
}

/// `mad.wide`: a 32 × 32-bit product plus a 64-bit register pair.
#[inline(always)]
fn mad_wide(warp: &mut Warp, signed: bool, d: Reg, a: Reg, b: Reg, c: Reg, m: u32) {
    let (av, bv) = (&warp.regs[a.0 as usize], &warp.regs[b.0 as usize]);
    let (clo, chi) = (&warp.regs[c.0 as usize], &warp.regs[c.0 as usize + 1]);
    let mut lo = [0u32; WARP_SIZE];
    let mut hi = [0u32; WARP_SIZE];
    for l in 0..WARP_SIZE {
        let p = if signed {
            (av[l] as i32 as i64).wrapping_mul(bv[l] as i32 as i64) as u64
        } else {
            av[l] as u64 * bv[l] as u64
        };
        let s = p.wrapping_add(clo[l] as u64 | (chi[l] as u64) << 32);
        lo[l] = s as u32;
        hi[l] = (s >> 32) as u32;
    }
    warp.write(d, &lo, m);
    warp.write(Reg(d.0 + 1), &hi, m);
}

/// The fault of lane `lane` of warp `w` at `pc`.
#[cold]
fn fault(w: usize, pc: u32, lane: u32, kind: FaultKind) -> Fault {
    Fault {
        warp: w as u32,
        lane,
        pc,
        kind,
    }
}

#[cfg(target_arch = "x86_64")]
fn has_avx2_fma() -> bool {
    use std::sync::OnceLock;
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| {
        std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
            && std::arch::is_x86_feature_detected!("bmi1")
            && std::arch::is_x86_feature_detected!("bmi2")
            && std::arch::is_x86_feature_detected!("popcnt")
            && std::arch::is_x86_feature_detected!("lzcnt")
    })
}

#[inline(always)]
fn check_aligned(
    va: &[u64; WARP_SIZE],
    m: u32,
    size: u8,
    access: Access,
) -> Result<(), (u32, MemFault)> {
    let align = size as u64 - 1;
    let mk = expand(m);
    let mut any = 0u64;
    for l in 0..WARP_SIZE {
        any |= va[l] & align & (mk[l] as u64 | (mk[l] as u64) << 32);
    }
    if any == 0 {
        return Ok(());
    }
    let mut bad = 0u32;
    for l in lanes(m) {
        bad |= ((va[l] & align != 0) as u32) << l;
    }
    let l = bad.trailing_zeros();
    Err((
        l,
        MemFault {
            va: va[l as usize],
            access,
            size,
            reason: MemFaultReason::Misaligned,
        },
    ))
}

/// Word indices of a 32-bit shared access by the lanes of `m`, or the
/// lowest lane's fault.
#[inline(always)]
fn shared_words(
    shared: &[u32],
    base: &Lanes,
    offset: i32,
    m: u32,
    access: Access,
) -> Result<Lanes, (u32, MemFault)> {
    let limit = shared.len() as u64 * 4;
    let mut idx = [0u32; WARP_SIZE];
    let mut bad = 0u32;
    for l in 0..WARP_SIZE {
        let a = base[l].wrapping_add(offset as u32);
        idx[l] = a >> 2;
        bad |= ((a & 3 != 0) as u32 | (a as u64 + 4 > limit) as u32) << l;
    }
    bad &= m;
    if bad == 0 {
        return Ok(idx);
    }
    let l = bad.trailing_zeros();
    let a = base[l as usize].wrapping_add(offset as u32);
    let reason = if a & 3 != 0 {
        MemFaultReason::Misaligned
    } else {
        MemFaultReason::OutOfBounds
    };
    Err((
        l,
        MemFault {
            va: a as u64,
            access,
            size: 4,
            reason,
        },
    ))
}

#[inline(always)]
fn shared_index(shared: &[u32], a: u32, size: u32, access: Access) -> Result<usize, MemFault> {
    let f = |reason| MemFault {
        va: a as u64,
        access,
        size: size as u8,
        reason,
    };
    if !a.is_multiple_of(size) {
        return Err(f(MemFaultReason::Misaligned));
    }
    if a as u64 + size as u64 > shared.len() as u64 * 4 {
        return Err(f(MemFaultReason::OutOfBounds));
    }
    Ok((a / 4) as usize)
}

#[inline(always)]
fn write_loaded(warp: &mut Warp, width: Width, d: Reg, lo: &Lanes, hi: &Lanes, m: u32) {
    match width {
        Width::U8 | Width::U16 | Width::B32 => warp.write(d, lo, m),
        Width::S8 => warp.write(d, &map1(lo, |x| x as u8 as i8 as i32 as u32), m),
        Width::S16 => warp.write(d, &map1(lo, |x| x as u16 as i16 as i32 as u32), m),
        Width::B64 => {
            warp.write(d, lo, m);
            warp.write(Reg(d.0 + 1), hi, m);
        }
    }
}
