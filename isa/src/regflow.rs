//! Which registers each instruction reads and writes, and which registers
//! a kernel may read before writing them: the ones a workgroup must start
//! with zeroed ([`zeroed_at_entry`]). Shared by the interpreter (its
//! workgroup reset) and the JIT (its analyses).

use crate::inst::*;

/// How an instruction reads a register.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Read {
    /// As bits.
    Bits,
    /// As an fp32 operand whose NaN payload does not matter (every NaN
    /// gives the same result).
    Float,
}

/// The registers `op` reads, with how.
pub(crate) fn reads(op: &Op) -> Vec<(u8, Read)> {
    use Read::*;
    let src = |b: Src, how| match b {
        Src::Reg(r) => Some((r.0, how)),
        Src::Imm(_) => None,
    };
    let pair = |r: Reg| [(r.0, Bits), (r.0.wrapping_add(1), Bits)];
    let mut v = Vec::with_capacity(4);
    match *op {
        Op::Nop | Op::Exit | Op::Bar | Op::Trap { .. } | Op::Bra { .. } => {}
        Op::S2r { .. } | Op::Ldarg { .. } | Op::Plop { .. } => {}
        Op::Vote { .. } | Op::Ballot { .. } => {}
        Op::Mov { b, .. } => v.extend(src(b, Bits)),
        Op::Sel { a, b, .. } => {
            v.push((a.0, Bits));
            v.extend(src(b, Bits));
        }
        Op::Bin { op, a, b, .. } => {
            let how = if op.is_float() { Float } else { Bits };
            v.push((a.0, how));
            v.extend(src(b, how));
        }
        Op::Un { op, a, .. } => {
            let how = match op {
                UnOp::Rcp | UnOp::Sqrt | UnOp::CvtS32F32 => Float,
                _ => Bits,
            };
            v.push((a.0, how));
        }
        Op::Tri { op, a, b, c, .. } => {
            let how = if op == TriOp::FFma { Float } else { Bits };
            v.extend([(a.0, how), (b.0, how), (c.0, how)]);
        }
        Op::Add64 { a, b, .. } => {
            v.extend(pair(a));
            if let Src::Reg(r) = b {
                v.extend(pair(r));
            }
        }
        Op::MadWide { a, b, c, .. } => {
            v.extend([(a.0, Bits), (b.0, Bits)]);
            v.extend(pair(c));
        }
        Op::Setp { ty, a, b, .. } => {
            let how = if ty == CmpType::F32 { Float } else { Bits };
            v.push((a.0, how));
            v.extend(src(b, how));
        }
        Op::Ld { space, addr, .. } => match space {
            Space::Global => v.extend(pair(addr)),
            Space::Shared => v.push((addr.0, Bits)),
        },
        Op::St {
            space,
            width,
            addr,
            v: val,
            ..
        } => {
            match space {
                Space::Global => v.extend(pair(addr)),
                Space::Shared => v.push((addr.0, Bits)),
            }
            if width == Width::B64 {
                v.extend(pair(val));
            } else {
                v.push((val.0, Bits));
            }
        }
        Op::Atom {
            space, addr, b, c, ..
        } => {
            match space {
                Space::Global => v.extend(pair(addr)),
                Space::Shared => v.push((addr.0, Bits)),
            }
            v.extend([(b.0, Bits), (c.0, Bits)]);
        }
        Op::Shfl { a, b, .. } => {
            v.push((a.0, Bits));
            v.extend(src(b, Bits));
        }
    }
    v
}

/// The registers `op` writes: the first and how many (0, 1 or 2).
pub(crate) fn writes(op: &Op) -> (u8, u8) {
    match *op {
        Op::Mov { d, .. }
        | Op::S2r { d, .. }
        | Op::Sel { d, .. }
        | Op::Bin { d, .. }
        | Op::Un { d, .. }
        | Op::Tri { d, .. }
        | Op::Atom { d, .. }
        | Op::Shfl { d, .. }
        | Op::Ballot { d, .. } => (d.0, 1),
        Op::Ldarg { d, wide, .. } => (d.0, 1 + wide as u8),
        Op::Add64 { d, .. } | Op::MadWide { d, .. } => (d.0, 2),
        Op::Ld { d, width, .. } => (d.0, 1 + (width == Width::B64) as u8),
        _ => (0, 0),
    }
}

/// Registers of a kernel (instructions `entry..entry + len` of `code`, `nregs`
/// registers) that a workgroup must start with zeroed: those a lane may read
/// before writing them, on some path from the entry (a guarded write does
/// not count as writing), and every register a shuffle reads (it reads other
/// lanes', written or not). The others are written before any read, so
/// their starting values are never seen and need not be cleared. All of
/// them if the kernel's branches leave it.
pub(crate) fn zeroed_at_entry(code: &[Instruction], entry: u32, len: u32, nregs: usize) -> u64 {
    match live_in(code, entry, len, nregs) {
        Some(l) => l.first().copied().unwrap_or(0),
        None => every(nregs),
    }
}

/// Bits `0..nregs` (all 64 from 64 registers on).
fn every(nregs: usize) -> u64 {
    if nregs >= 64 {
        u64::MAX
    } else {
        (1u64 << nregs) - 1
    }
}

/// For each instruction of a kernel (as for [`zeroed_at_entry`]), the
/// registers among `r0..r63` that may be read before written from it on,
/// by the lane about to run it: bit `r` clear means no path from there
/// reads the lane's `r` before the lane writes it (a guarded write does not
/// count as writing), so its value can never be seen again. Registers a
/// shuffle reads are live everywhere (another lane may read them at any
/// time); registers from `r64` on have no bit (callers treat them as always
/// live). `None` if the kernel's branches leave it.
pub(crate) fn live_in(
    code: &[Instruction],
    entry: u32,
    len: u32,
    nregs: usize,
) -> Option<Vec<u64>> {
    let every = every(nregs);
    let (s, n) = (entry as usize, len as usize);
    let k = s.checked_add(n).and_then(|e| code.get(s..e))?;
    let bit = |r: u8| if r < 64 { 1u64 << r } else { 0 };
    let mut uses = vec![0u64; n];
    let mut kills = vec![0u64; n];
    let mut succ: Vec<[Option<usize>; 2]> = vec![[None, None]; n];
    let mut always = 0u64;
    for (i, ins) in k.iter().enumerate() {
        for (r, _) in reads(&ins.op) {
            uses[i] |= bit(r);
            if matches!(ins.op, Op::Shfl { .. }) {
                always |= bit(r);
            }
        }
        let (d, c) = writes(&ins.op);
        if ins.guard == Guard::ALWAYS {
            for j in 0..c {
                kills[i] |= bit(d.wrapping_add(j));
            }
        }
        let next = i + 1;
        let guarded = ins.guard != Guard::ALWAYS;
        let targets = match ins.op {
            Op::Bra { offset } => {
                let t = i as i64 + i64::from(offset);
                [Some(t), guarded.then_some(next as i64)]
            }
            Op::Exit | Op::Trap { .. } => [guarded.then_some(next as i64), None],
            _ => [Some(next as i64), None],
        };
        for (slot, t) in succ[i].iter_mut().zip(targets) {
            if let Some(t) = t {
                // A branch or a fall-through out of the kernel (the loader
                // refuses them): no answer.
                *slot = Some(usize::try_from(t).ok().filter(|&t| t < n)?);
            }
        }
    }
    let mut live = vec![0u64; n];
    loop {
        let mut changed = false;
        for i in (0..n).rev() {
            let out = succ[i].iter().flatten().fold(0, |a, &t| a | live[t]);
            let v = (uses[i] | (out & !kills[i]) | always) & every;
            if v != live[i] {
                live[i] = v;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    Some(live)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::asm::assemble;

    fn zeroed(src: &str) -> u64 {
        let m = assemble(src, 2).expect("assembles");
        let k = &m.kernels()[0];
        zeroed_at_entry(m.code(), k.entry, k.len, k.regs as usize)
    }

    #[test]
    fn registers_written_before_any_read_need_no_clearing() {
        let src = ".kernel k\n.arg out ptr\n.workgroup 32\n    s2r r0, %tid.x\n    add r1, r0, 1\n    ldarg d2, [out]\n    st.32 [d2], r1\n    exit\n.end\n";
        assert_eq!(zeroed(src), 0);
    }

    #[test]
    fn reads_before_writes_guarded_writes_loops_and_shuffles_are_cleared() {
        // r5 read first; r6 written only under a guard, then read; r7 read
        // at the loop head before its write in the loop body; r9 shuffled.
        let src = ".kernel k\n.arg out ptr\n.workgroup 32\n    add r1, r5, 1\n    s2r r0, %tid.x\n    setp.lt.u32 p0, r0, 3\n    @p0 mov r6, 1\n    add r2, r6, r1\nloop:\n    add r3, r7, 1\n    mov r7, r3\n    setp.lt.u32 p1, r7, 9\n    @p1 bra loop\n    mov r9, 4\n    shfl.idx r8, r9, 0\n    ldarg d10, [out]\n    st.32 [d10], r8\n    exit\n.end\n";
        let z = zeroed(src);
        for r in [5, 6, 7, 9] {
            assert!(z & (1 << r) != 0, "r{r} must be cleared: {z:#x}");
        }
        for r in [0, 1, 2, 3, 8, 10, 11] {
            assert!(z & (1 << r) == 0, "r{r} is written before any read: {z:#x}");
        }
    }
}
