//! One warp's state and the lane-wise operations on it.

use super::{Lanes, FULL};
use crate::inst::*;
use crate::math;
use crate::mem::lanes;

/// One warp's state; native code (the JIT's) reads and writes the same
/// fields, so either engine can continue the other's work.
pub(crate) struct Warp {
    pub(crate) regs: Vec<Lanes>,
    pub(crate) preds: [u32; NUM_PREDS],
    /// PC of the lanes in `active`.
    pub(crate) pc: u32,
    pub(crate) active: u32,
    /// PC of every live lane not in `active` (the other entries are
    /// stale: nothing reads them).
    pub(crate) lane_pc: Lanes,
    /// Lanes that have not exited.
    pub(crate) live: u32,
    /// Lanes waiting at a barrier (their `lane_pc` is the barrier).
    pub(crate) blocked: u32,
    /// Lowest `lane_pc` of the runnable lanes outside `active`.
    pub(crate) next_min: u32,
    pub(crate) clock: u64,
}

impl Warp {
    /// Restarts the warp at `entry` with lanes `live`, the registers of
    /// `zero` cleared (the others keep the previous workgroup's values,
    /// which the kernel overwrites before reading).
    pub(super) fn reset(&mut self, live: u32, entry: u32, zero: u64) {
        let n = self.regs.len();
        if n == 0 || (zero == 0 && n < 64) {
            // Nothing to clear (and no call of `memset`, whose cost for
            // nothing showed in profiles).
        } else if n >= 64 || zero == (1u64 << n) - 1 {
            self.regs.as_flattened_mut().fill(0);
        } else {
            let mut z = zero;
            while z != 0 {
                let r = z.trailing_zeros() as usize;
                if let Some(reg) = self.regs.get_mut(r) {
                    *reg = [0; WARP_SIZE];
                }
                z &= z - 1;
            }
        }
        self.preds = [0; NUM_PREDS];
        self.preds[Pred::TRUE.0 as usize] = FULL;
        self.pc = entry;
        self.active = live;
        // `lane_pc` is left as it is: it holds the pcs of live lanes
        // outside `active`, and there are none (every reader, and every
        // rescheduling, writes or skips the active lanes' entries).
        self.live = live;
        self.blocked = 0;
        self.next_min = u32::MAX;
        self.clock = 0;
    }

    /// Recomputes the active group after PCs changed (min-PC rule).
    pub(crate) fn reschedule(&mut self) {
        if self.active != 0 {
            let mk = expand(self.active);
            for (l, pc) in self.lane_pc.iter_mut().enumerate() {
                *pc = (self.pc & mk[l]) | (*pc & !mk[l]);
            }
        }
        let runnable = self.live & !self.blocked;
        if runnable == 0 {
            self.active = 0;
            self.next_min = u32::MAX;
            return;
        }
        let mut min = u32::MAX;
        for l in lanes(runnable) {
            min = min.min(self.lane_pc[l]);
        }
        let mut active = 0;
        let mut next = u32::MAX;
        for l in lanes(runnable) {
            if self.lane_pc[l] == min {
                active |= 1 << l;
            } else {
                next = next.min(self.lane_pc[l]);
            }
        }
        self.pc = min;
        self.active = active;
        self.next_min = next;
    }

    #[inline(always)]
    pub(super) fn src(&self, b: Src) -> Lanes {
        match b {
            Src::Reg(r) => self.regs[r.0 as usize],
            Src::Imm(v) => [v; WARP_SIZE],
        }
    }

    #[inline(always)]
    pub(super) fn write(&mut self, d: Reg, v: &Lanes, m: u32) {
        blend(&mut self.regs[d.0 as usize], v, m);
    }

    #[inline(always)]
    pub(super) fn set_pred(&mut self, p: Pred, v: u32, m: u32) {
        if p != Pred::TRUE {
            let r = &mut self.preds[p.0 as usize & 7];
            *r = (*r & !m) | (v & m);
        }
    }

    #[inline(always)]
    pub(super) fn pred(&self, p: Pred, neg: bool) -> u32 {
        let v = self.preds[p.0 as usize & 7];
        if neg {
            !v
        } else {
            v
        }
    }

    /// 64-bit addresses from the pair `r` plus `offset`.
    #[inline(always)]
    pub(super) fn addr64(&self, r: Reg, offset: i32) -> [u64; WARP_SIZE] {
        let lo = &self.regs[r.0 as usize];
        let hi = &self.regs[r.0 as usize + 1];
        let mut va = [0u64; WARP_SIZE];
        for l in 0..WARP_SIZE {
            va[l] = (lo[l] as u64 | (hi[l] as u64) << 32).wrapping_add(offset as i64 as u64);
        }
        va
    }
}

/// All-ones in the lanes of `m`.
#[inline(always)]
pub(super) fn expand(m: u32) -> Lanes {
    let mut out = [0u32; WARP_SIZE];
    for (l, o) in out.iter_mut().enumerate() {
        *o = if m & (1u32 << l) != 0 { FULL } else { 0 };
    }
    out
}

#[inline(always)]
pub(super) fn blend(dst: &mut Lanes, v: &Lanes, m: u32) {
    if m == FULL {
        *dst = *v;
    } else {
        let mk = expand(m);
        for l in 0..WARP_SIZE {
            dst[l] = (v[l] & mk[l]) | (dst[l] & !mk[l]);
        }
    }
}

#[inline(always)]
pub(super) fn map1(a: &Lanes, f: impl Fn(u32) -> u32) -> Lanes {
    let mut out = [0u32; WARP_SIZE];
    for l in 0..WARP_SIZE {
        out[l] = f(a[l]);
    }
    out
}

#[inline(always)]
pub(super) fn map2(a: &Lanes, b: &Lanes, f: impl Fn(u32, u32) -> u32) -> Lanes {
    let mut out = [0u32; WARP_SIZE];
    for l in 0..WARP_SIZE {
        out[l] = f(a[l], b[l]);
    }
    out
}

#[inline(always)]
pub(super) fn map3(a: &Lanes, b: &Lanes, c: &Lanes, f: impl Fn(u32, u32, u32) -> u32) -> Lanes {
    let mut out = [0u32; WARP_SIZE];
    for l in 0..WARP_SIZE {
        out[l] = f(a[l], b[l], c[l]);
    }
    out
}

/// Bit `l` of the result is `f(a[l], b[l])`.
#[inline(always)]
pub(super) fn pack(a: &Lanes, b: &Lanes, f: impl Fn(u32, u32) -> bool) -> u32 {
    let mut bytes = [0u8; WARP_SIZE];
    for l in 0..WARP_SIZE {
        bytes[l] = f(a[l], b[l]) as u8;
    }
    bits_of(&bytes)
}

/// Packs 32 bytes that are each 0 or 1 into a bit mask (bit l = byte l).
#[inline(always)]
pub(crate) fn bits_of(bytes: &[u8; WARP_SIZE]) -> u32 {
    let mut m = 0u32;
    for (i, chunk) in bytes.chunks_exact(8).enumerate() {
        let mut w = [0u8; 8];
        w.copy_from_slice(chunk);
        // Multiplying gathers byte i's low bit into bit 56 + i.
        let g = u64::from_le_bytes(w).wrapping_mul(0x0102_0408_1020_4080) >> 56;
        m |= (g as u32) << (8 * i);
    }
    m
}

#[inline(always)]
pub(super) fn fl(x: u32) -> f32 {
    f32::from_bits(x)
}

pub(super) fn ffma_lanes(a: &Lanes, b: &Lanes, c: &Lanes) -> Lanes {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("fma") {
            // SAFETY: the CPU supports FMA, checked on the line above.
            return unsafe { ffma_lanes_fma(a, b, c) };
        }
    }
    map3(a, b, c, |x, y, z| {
        math::canon(math::fma(fl(x), fl(y), fl(z)))
    })
}

/// # Safety
/// The CPU must support FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "fma")]
pub(super) unsafe fn ffma_lanes_fma(a: &Lanes, b: &Lanes, c: &Lanes) -> Lanes {
    map3(a, b, c, |x, y, z| math::canon(fl(x).mul_add(fl(y), fl(z))))
}

#[inline(always)]
pub(super) fn bin(op: BinOp, a: &Lanes, b: &Lanes) -> Lanes {
    use BinOp::*;
    match op {
        Add => map2(a, b, u32::wrapping_add),
        Sub => map2(a, b, u32::wrapping_sub),
        Mul => map2(a, b, u32::wrapping_mul),
        MulHiU => map2(a, b, |x, y| ((x as u64 * y as u64) >> 32) as u32),
        MulHiS => map2(a, b, |x, y| {
            ((x as i32 as i64 * y as i32 as i64) >> 32) as u32
        }),
        DivU => map2(a, b, |x, y| x.checked_div(y).unwrap_or(u32::MAX)),
        DivS => map2(a, b, |x, y| {
            if y == 0 {
                u32::MAX
            } else {
                (x as i32).wrapping_div(y as i32) as u32
            }
        }),
        RemU => map2(a, b, |x, y| x.checked_rem(y).unwrap_or(x)),
        RemS => map2(a, b, |x, y| {
            if y == 0 {
                x
            } else {
                (x as i32).wrapping_rem(y as i32) as u32
            }
        }),
        MinU => map2(a, b, u32::min),
        MinS => map2(a, b, |x, y| (x as i32).min(y as i32) as u32),
        MaxU => map2(a, b, u32::max),
        MaxS => map2(a, b, |x, y| (x as i32).max(y as i32) as u32),
        And => map2(a, b, |x, y| x & y),
        Or => map2(a, b, |x, y| x | y),
        Xor => map2(a, b, |x, y| x ^ y),
        Shl => map2(a, b, |x, y| if y < 32 { x << y } else { 0 }),
        ShrU => map2(a, b, |x, y| if y < 32 { x >> y } else { 0 }),
        ShrS => map2(a, b, |x, y| ((x as i32) >> y.min(31)) as u32),
        FAdd => map2(a, b, |x, y| math::canon(fl(x) + fl(y))),
        FSub => map2(a, b, |x, y| math::canon(fl(x) - fl(y))),
        FMul => map2(a, b, |x, y| math::canon(fl(x) * fl(y))),
        FDiv => map2(a, b, |x, y| math::canon(fl(x) / fl(y))),
        FMin => map2(a, b, |x, y| math::fmin(fl(x), fl(y))),
        FMax => map2(a, b, |x, y| math::fmax(fl(x), fl(y))),
    }
}

#[inline(always)]
pub(super) fn un(op: UnOp, a: &Lanes) -> Lanes {
    use UnOp::*;
    match op {
        Not => map1(a, |x| !x),
        Popc => map1(a, u32::count_ones),
        Clz => map1(a, u32::leading_zeros),
        FAbs => map1(a, |x| x & 0x7fff_ffff),
        FNeg => map1(a, |x| x ^ 0x8000_0000),
        Rcp => map1(a, |x| math::canon(1.0 / fl(x))),
        Sqrt => map1(a, |x| math::canon(fl(x).sqrt())),
        Rsqrt => map1(a, |x| math::canon(math::rsqrt(fl(x)))),
        Exp2 => map1(a, |x| math::canon(math::exp2(fl(x)))),
        Log2 => map1(a, |x| math::canon(math::log2(fl(x)))),
        CvtF32S32 => map1(a, |x| (x as i32 as f32).to_bits()),
        CvtF32U32 => map1(a, |x| (x as f32).to_bits()),
        CvtS32F32 => map1(a, |x| fl(x) as i32 as u32),
        CvtU32F32 => map1(a, |x| fl(x) as u32),
    }
}

#[inline(always)]
pub(super) fn compare(cmp: Cmp, ty: CmpType, a: &Lanes, b: &Lanes) -> u32 {
    macro_rules! by_cmp {
        ($conv:expr) => {{
            let c = $conv;
            match cmp {
                Cmp::Eq => pack(a, b, |x, y| c(x) == c(y)),
                Cmp::Ne => pack(a, b, |x, y| c(x) != c(y)),
                Cmp::Lt => pack(a, b, |x, y| c(x) < c(y)),
                Cmp::Le => pack(a, b, |x, y| c(x) <= c(y)),
                Cmp::Gt => pack(a, b, |x, y| c(x) > c(y)),
                Cmp::Ge => pack(a, b, |x, y| c(x) >= c(y)),
            }
        }};
    }
    match ty {
        CmpType::U32 => by_cmp!(|x: u32| x),
        CmpType::S32 => by_cmp!(|x: u32| x as i32),
        CmpType::F32 => by_cmp!(fl),
    }
}
