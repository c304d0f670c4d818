//! What the code generator knows at compile time about the values of a
//! register across the 32 lanes of a full warp.
//!
//! A [`Shape`] says that lane `l` holds `base[l / 16] + k[l]` (wrapping
//! u32 arithmetic), where the two bases — the values of lanes 0 and 16 —
//! are only known at run time (scalars the generated code computes or
//! loads) and the offsets `k` are compile-time constants. A uniform value
//! (an argument, a loop counter, `%ntid.x`) has `k = 0` and equal bases;
//! `%tid.x` of a workgroup 256 wide has `k[l] = l`; in a 16 × 16
//! workgroup `%tid.y` is uniform in each half-warp. Such a register is
//! computed as one or two scalars instead of eight vectors, and a memory
//! access through it knows its lanes' addresses relative to one scalar.
//!
//! Facts are about the register file of a *full* warp (all 32 lanes
//! active): a warp running with fewer lanes takes the generic code.

use crate::inst::*;
use std::rc::Rc;

/// Lanes of a warp.
const L: usize = WARP_SIZE;

/// Lane `l` holds `base[l / 16] + k[l]`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Shape {
    /// Offsets from the half-warp's base; `k[0] == k[16] == 0`.
    pub(crate) k: [u32; L],
    /// `base[1] - base[0]`, when known at compile time.
    pub(crate) link: Option<u32>,
    /// `base[0]`, when known at compile time.
    pub(crate) known: Option<u32>,
}

/// A register's fact: its shape, or nothing known (`None`).
pub(crate) type Fact = Option<Rc<Shape>>;

impl Shape {
    /// Every lane holds the same value (`known`, if given).
    pub(crate) fn uniform(known: Option<u32>) -> Shape {
        Shape {
            k: [0; L],
            link: Some(0),
            known,
        }
    }

    /// The shape of the lane values `v`, normalised (`k[0] == k[16] ==
    /// 0`), with the bases known if `known`.
    pub(crate) fn of_lanes(v: &[u32; L], known: bool) -> Shape {
        let k = std::array::from_fn(|l| v[l].wrapping_sub(v[l & 16]));
        Shape {
            k,
            link: Some(v[16].wrapping_sub(v[0])),
            known: known.then_some(v[0]),
        }
    }

    /// The lane values, if known at compile time.
    #[cfg(test)]
    pub(crate) fn lanes(&self) -> Option<[u32; L]> {
        let b0 = self.known?;
        let b1 = b0.wrapping_add(self.link?);
        Some(std::array::from_fn(|l| {
            if l < 16 { b0 } else { b1 }.wrapping_add(self.k[l])
        }))
    }

    /// Whether every lane of each half-warp holds the same value.
    pub(crate) fn per_half(&self) -> bool {
        self.k == [0; L]
    }

    /// Whether every lane holds the same value.
    pub(crate) fn is_uniform(&self) -> bool {
        self.per_half() && self.link == Some(0)
    }

    /// The base of half `g` when known at compile time.
    pub(crate) fn known_base(&self, g: usize) -> Option<u32> {
        let b0 = self.known?;
        if g == 0 {
            Some(b0)
        } else {
            Some(b0.wrapping_add(self.link?))
        }
    }

    /// The offsets of every lane from lane 0, as signed numbers, when the
    /// halves' bases are linked at compile time.
    pub(crate) fn whole(&self) -> Option<[i64; L]> {
        let link = self.link? as i32 as i64;
        Some(std::array::from_fn(|l| {
            let k = self.k[l] as i64;
            let v = if l < 16 { k } else { k + link };
            v as u32 as i32 as i64
        }))
    }

    /// Smallest and largest offset of half `g`, as signed numbers.
    pub(crate) fn range(&self, g: usize) -> (i64, i64) {
        let ks = self.k[16 * g..16 * g + 16].iter().map(|&k| k as i32 as i64);
        let (mut lo, mut hi) = (i64::MAX, i64::MIN);
        for k in ks {
            lo = lo.min(k);
            hi = hi.max(k);
        }
        (lo, hi)
    }

    /// What two facts about the same register on different paths both
    /// say: the same offsets (and bases, where both know them), or
    /// nothing.
    pub(crate) fn meet(a: &Fact, b: &Fact) -> Fact {
        let (x, y) = (a.as_ref()?, b.as_ref()?);
        if Rc::ptr_eq(x, y) || x == y {
            return a.clone();
        }
        if x.k != y.k {
            return None;
        }
        let link = if x.link == y.link { x.link } else { None };
        let known = if x.known == y.known { x.known } else { None };
        Some(Rc::new(Shape {
            k: x.k,
            link,
            known,
        }))
    }

    /// Whether fact `a` says at least what `b` says.
    pub(crate) fn implies(a: &Fact, b: &Fact) -> bool {
        match (a, b) {
            (_, None) => true,
            (None, Some(_)) => false,
            (Some(x), Some(y)) => {
                x.k == y.k
                    && (y.link.is_none() || x.link == y.link)
                    && (y.known.is_none() || x.known == y.known)
            }
        }
    }

    fn map(&self, f: impl Fn(u32) -> u32, link: Option<u32>, known: Option<u32>) -> Shape {
        Shape {
            k: self.k.map(f),
            link,
            known,
        }
    }
}

/// `%tid.x`, `%tid.y`, `%tid.z` of every full warp of a workgroup of
/// `wg` threads: shapes that hold for each of them (bases differ by warp).
pub(crate) fn tid_shapes(wg: [u32; 3]) -> [Fact; 3] {
    let [nx, ny, _] = wg.map(|n| n.max(1));
    let threads = wg.iter().map(|&n| n as u64).product::<u64>();
    let full = (threads / L as u64).min(1024) as u32;
    std::array::from_fn(|d| {
        let mut shape: Option<Shape> = None;
        for w in 0..full {
            let v: [u32; L] = std::array::from_fn(|l| {
                let i = w * L as u32 + l as u32;
                match d {
                    0 => i % nx,
                    1 => (i / nx) % ny,
                    _ => i / (nx * ny),
                }
            });
            let s = Shape::of_lanes(&v, true);
            shape = match shape {
                None => Some(s),
                Some(prev) => {
                    let m = Shape::meet(&Some(Rc::new(prev)), &Some(Rc::new(s)))?;
                    Some((*m).clone())
                }
            };
        }
        shape.map(Rc::new)
    })
}

/// A condition the shapes of an instruction's results rely on, checked at
/// run time on the values of lanes 0 and 16: for both halves `g`, the
/// value plus `min` and plus `max` (as signed numbers if `signed`, else
/// unsigned) lie in the 32-bit range, so that no lane of the half wraps
/// around it. With `whole`, only lane 0's value with `min[0]`, `max[0]`:
/// the offsets of the whole warp from lane 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct NoWrap {
    pub(crate) what: Probe,
    pub(crate) signed: bool,
    pub(crate) whole: bool,
    pub(crate) min: [i64; 2],
    pub(crate) max: [i64; 2],
}

/// Whose lane-0/16 value a [`NoWrap`] checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Probe {
    /// Operand register `r`.
    Reg(u8),
    /// The instruction's (first) result.
    Result,
}

/// The shapes of what a lane-local instruction writes, from its operands'
/// facts (`f(r)`), and the run-time conditions they need; `None` if the
/// results are not shaped. `launch`: the shapes of the special registers
/// of the launch (see [`specials`]).
pub(crate) fn transfer(
    op: &Op,
    f: impl Fn(u8) -> Fact,
    launch: &Specials,
) -> Option<(Vec<Shape>, Vec<NoWrap>)> {
    let sh = |r: Reg| f(r.0);
    let src = |b: Src| match b {
        Src::Reg(r) => f(r.0),
        Src::Imm(v) => Some(Rc::new(Shape::uniform(Some(v)))),
    };
    let one = |s: Option<Shape>| s.map(|s| (vec![s], Vec::new()));
    match *op {
        Op::Nop => None,
        Op::Mov { b, .. } => one(src(b).map(|s| (*s).clone())),
        Op::S2r { sr, .. } => one(launch.get(sr)),
        Op::Ldarg { wide, .. } => {
            let n = 1 + wide as usize;
            Some((vec![Shape::uniform(None); n], Vec::new()))
        }
        Op::Bin { op, a, b, .. } => one(bin(op, &*sh(a)?, &*src(b)?)),
        Op::Un { a, .. } => {
            let a = sh(a)?;
            one(a.per_half().then(|| Shape {
                k: [0; L],
                link: (a.link == Some(0)).then_some(0),
                known: None,
            }))
        }
        Op::Tri { op, a, b, c, .. } => {
            let (a, b, c) = (sh(a)?, sh(b)?, sh(c)?);
            match op {
                TriOp::Mad => one(bin(BinOp::Mul, &a, &b).and_then(|p| bin(BinOp::Add, &p, &c))),
                TriOp::FFma => one(per_half(&[&a, &b, &c])),
            }
        }
        Op::Sel { .. } | Op::Setp { .. } | Op::Plop { .. } => None,
        Op::Add64 { a, b, .. } => {
            let (alo, ahi) = (f(a.0)?, f(a.0 + 1)?);
            let (blo, bhi) = match b {
                Src::Reg(r) => (f(r.0)?, f(r.0 + 1)?),
                Src::Imm(v) => (
                    Rc::new(Shape::uniform(Some(v))),
                    Rc::new(Shape::uniform(Some(((v as i32) >> 31) as u32))),
                ),
            };
            // The whole warp's offsets from lane 0, where the halves are
            // linked: one condition instead of one per half.
            let whole = || {
                let mut guards = Vec::new();
                let da = whole_wide(&alo, &ahi, a.0, &mut guards)?;
                let db = whole_wide(&blo, &bhi, b_reg(b), &mut guards)?;
                split_whole(std::array::from_fn(|l| da[l] + db[l]), guards)
            };
            if let Some(r) = whole() {
                return Some(r);
            }
            let mut guards = Vec::new();
            let da = wide_offsets(&alo, &ahi, a.0, false, &mut guards)?;
            let db = wide_offsets(&blo, &bhi, b_reg(b), false, &mut guards)?;
            let d: [i128; L] = std::array::from_fn(|l| da[l] + db[l]);
            let link = match (alo.link, ahi.link, blo.link, bhi.link) {
                (Some(0), Some(0), Some(0), Some(0)) => Some(0),
                _ => None,
            };
            split(d, link, guards)
        }
        Op::MadWide {
            signed, a, b, c, ..
        } => {
            let (sa, sb) = (sh(a)?, sh(b)?);
            let (clo, chi) = (f(c.0)?, f(c.0 + 1)?);
            let whole = || {
                let (x, xr, y) = if sb.is_uniform() {
                    (&sa, a, &sb)
                } else {
                    (&sb, b, &sa)
                };
                if !y.is_uniform() {
                    return None;
                }
                let mut guards = Vec::new();
                let dx: [i128; L] = if x.is_uniform() {
                    [0; L]
                } else {
                    let yv = y.known?;
                    let yv = if signed {
                        yv as i32 as i128
                    } else {
                        yv as i128
                    };
                    let w = whole_offsets(x, xr.0, signed, &mut guards)?;
                    w.map(|o| o * yv)
                };
                let dc = whole_wide(&clo, &chi, c.0, &mut guards)?;
                split_whole(std::array::from_fn(|l| dx[l] + dc[l]), guards)
            };
            if let Some(r) = whole() {
                return Some(r);
            }
            let mut guards = Vec::new();
            // One factor must be the same in each half (and known where
            // the other varies).
            let (x, xr, y) = if sb.per_half() {
                (sa, a, sb)
            } else {
                (sb, b, sa)
            };
            if !y.per_half() {
                return None;
            }
            let dx = if x.per_half() {
                [0i128; L]
            } else {
                let y0 = y.known_base(0)?;
                let y1 = y.known_base(1)?;
                let k = lane_offsets(&x, xr.0, signed, &mut guards)?;
                std::array::from_fn(|l| {
                    let yv = if l < 16 { y0 } else { y1 };
                    let yv = if signed {
                        yv as i32 as i128
                    } else {
                        yv as i128
                    };
                    k[l] * yv
                })
            };
            let dc = wide_offsets(&clo, &chi, c.0, false, &mut guards)?;
            let d: [i128; L] = std::array::from_fn(|l| dx[l] + dc[l]);
            let link = match (x.link, y.link, clo.link, chi.link) {
                (Some(0), Some(0), Some(0), Some(0)) => Some(0),
                _ => None,
            };
            split(d, link, guards)
        }
        _ => None,
    }
}

/// The register of a 64-bit source operand (an immediate has none; its
/// offsets are 0, so no condition names it).
fn b_reg(b: Src) -> u8 {
    match b {
        Src::Reg(r) => r.0,
        Src::Imm(_) => 0,
    }
}

/// The shape of `a op b` for 32-bit operands.
fn bin(op: BinOp, a: &Shape, b: &Shape) -> Option<Shape> {
    use BinOp::*;
    let fold = |f: fn(u32, u32) -> u32| match (a.known, b.known) {
        (Some(x), Some(y)) => Some(f(x, y)),
        _ => None,
    };
    let link = |f: fn(u32, u32) -> u32| match (a.link, b.link) {
        (Some(x), Some(y)) => Some(f(x, y)),
        _ => None,
    };
    match op {
        Add => Some(Shape {
            k: std::array::from_fn(|l| a.k[l].wrapping_add(b.k[l])),
            link: link(u32::wrapping_add),
            known: fold(u32::wrapping_add),
        }),
        Sub => Some(Shape {
            k: std::array::from_fn(|l| a.k[l].wrapping_sub(b.k[l])),
            link: link(u32::wrapping_sub),
            known: fold(u32::wrapping_sub),
        }),
        Mul => {
            // (a0 + ka)(b0 + kb) = a0 b0 + a0 kb + b0 ka + ka kb: shaped
            // when the cross terms are constants.
            let (ka, kb) = (a.per_half(), b.per_half());
            let k: [u32; L] = if ka && kb {
                [0; L]
            } else if ka {
                let (x0, x1) = (a.known_base(0)?, a.known_base(1)?);
                std::array::from_fn(|l| b.k[l].wrapping_mul(if l < 16 { x0 } else { x1 }))
            } else if kb {
                let (x0, x1) = (b.known_base(0)?, b.known_base(1)?);
                std::array::from_fn(|l| a.k[l].wrapping_mul(if l < 16 { x0 } else { x1 }))
            } else {
                return None;
            };
            let known = fold(u32::wrapping_mul);
            let by_const = |x: &Shape, c: &Shape| match (x.link, c.is_uniform(), c.known) {
                (Some(l), true, Some(c)) => Some(l.wrapping_mul(c)),
                _ => None,
            };
            let link = match (a.known_base(1), b.known_base(1), known) {
                (Some(x), Some(y), Some(z)) => Some(x.wrapping_mul(y).wrapping_sub(z)),
                _ if a.link == Some(0) && b.link == Some(0) => Some(0),
                _ => by_const(a, b).or_else(|| by_const(b, a)),
            };
            Some(Shape { k, link, known })
        }
        Shl if b.is_uniform() && b.known.is_some_and(|n| n < 32) => {
            let n = b.known.unwrap_or(0);
            Some(a.map(|k| k << n, a.link.map(|x| x << n), a.known.map(|x| x << n)))
        }
        _ => per_half(&[a, b]).map(|mut s| {
            s.known = match op {
                And => fold(|x, y| x & y),
                Or => fold(|x, y| x | y),
                Xor => fold(|x, y| x ^ y),
                _ => None,
            };
            s
        }),
    }
}

/// The result of any lane-local operation whose operands are each the
/// same in every lane of a half-warp: the same within halves too.
fn per_half(ops: &[&Shape]) -> Option<Shape> {
    if !ops.iter().all(|s| s.per_half()) {
        return None;
    }
    let uniform = ops.iter().all(|s| s.link == Some(0));
    Some(Shape {
        k: [0; L],
        link: uniform.then_some(0),
        known: None,
    })
}

/// The offsets of a 32-bit operand as exact integers relative to its
/// lane-0/16 value, if none of its lanes wraps (a condition recorded in
/// `guards` unless the offsets are all 0).
fn lane_offsets(s: &Shape, r: u8, signed: bool, guards: &mut Vec<NoWrap>) -> Option<[i128; L]> {
    if !s.per_half() {
        guards.push(NoWrap {
            what: Probe::Reg(r),
            signed,
            whole: false,
            min: [s.range(0).0, s.range(1).0],
            max: [s.range(0).1, s.range(1).1],
        });
    }
    Some(std::array::from_fn(|l| s.k[l] as i32 as i128))
}

/// The offsets of the 64-bit pair `lo:hi` relative to its lane-0/16
/// value: the high word must be the same in each half, the low word must
/// not wrap.
fn wide_offsets(
    lo: &Shape,
    hi: &Shape,
    r: u8,
    _signed: bool,
    guards: &mut Vec<NoWrap>,
) -> Option<[i128; L]> {
    if !hi.per_half() {
        return None;
    }
    lane_offsets(lo, r, false, guards)
}

/// The shapes of the low and high words of 64-bit lane values that are
/// their lane-0/16 value plus the exact offsets `d`: the low word's
/// offsets are `d` mod 2^32; the high word is the same in each half if no
/// lane's low word carries or borrows (a condition on the result).
fn split(
    d: [i128; L],
    link: Option<u32>,
    mut guards: Vec<NoWrap>,
) -> Option<(Vec<Shape>, Vec<NoWrap>)> {
    let rel: [i128; L] = std::array::from_fn(|l| d[l] - d[l & 16]);
    if rel.iter().any(|&x| x.unsigned_abs() >= 1 << 40) {
        return None;
    }
    // Equal 64-bit values in lanes 0 and 16 (`link`) stay equal.
    let lo = Shape {
        k: rel.map(|x| x as u32),
        link,
        known: None,
    };
    if rel != [0; L] {
        let range = |g: usize| {
            let it = rel[16 * g..16 * g + 16].iter().map(|&x| x as i64);
            (it.clone().min().unwrap_or(0), it.max().unwrap_or(0))
        };
        guards.push(NoWrap {
            what: Probe::Result,
            signed: false,
            whole: false,
            min: [range(0).0, range(1).0],
            max: [range(0).1, range(1).1],
        });
    }
    let hi = Shape {
        k: [0; L],
        link,
        known: None,
    };
    Some((vec![lo, hi], guards))
}

/// The offsets of every lane of a 32-bit operand from lane 0 as exact
/// integers, if no lane wraps (a condition recorded in `guards` unless
/// they are all 0); `None` if the halves are not linked.
fn whole_offsets(s: &Shape, r: u8, signed: bool, guards: &mut Vec<NoWrap>) -> Option<[i128; L]> {
    let w = s.whole()?;
    if w != [0; L] {
        let (min, max) = (w.iter().copied().min()?, w.iter().copied().max()?);
        guards.push(NoWrap {
            what: Probe::Reg(r),
            signed,
            whole: true,
            min: [min, min],
            max: [max, max],
        });
    }
    Some(w.map(i128::from))
}

/// [`whole_offsets`] of the 64-bit pair `lo:hi`: the high word must be
/// the same in every lane.
fn whole_wide(lo: &Shape, hi: &Shape, r: u8, guards: &mut Vec<NoWrap>) -> Option<[i128; L]> {
    if !hi.is_uniform() {
        return None;
    }
    whole_offsets(lo, r, false, guards)
}

/// [`split`] for offsets `d` from lane 0: the high word is the same in
/// every lane if no lane's low word carries or borrows.
fn split_whole(d: [i128; L], mut guards: Vec<NoWrap>) -> Option<(Vec<Shape>, Vec<NoWrap>)> {
    if d.iter().any(|&x| x.unsigned_abs() >= 1 << 40) {
        return None;
    }
    let lo = Shape {
        k: std::array::from_fn(|l| (d[l] - d[l & 16]) as u32),
        link: Some((d[16] - d[0]) as u32),
        known: None,
    };
    if d != [0; L] {
        let min = d.iter().copied().min()? as i64;
        let max = d.iter().copied().max()? as i64;
        guards.push(NoWrap {
            what: Probe::Result,
            signed: false,
            whole: true,
            min: [min, min],
            max: [max, max],
        });
    }
    Some((vec![lo, Shape::uniform(None)], guards))
}

/// The shapes of the special registers in a launch whose workgroup
/// shape the code is specialised for (or not: `wg` = `None`).
#[derive(Clone, Debug, Default)]
pub(crate) struct Specials {
    tid: [Fact; 3],
    ntid: [Option<u32>; 3],
    nwarps: Option<u32>,
}

impl Specials {
    /// The shapes for workgroups of `wg` threads (`None`: any shape).
    pub(crate) fn new(wg: Option<[u32; 3]>) -> Specials {
        match wg {
            None => Specials::default(),
            Some(wg) => {
                let threads: u32 = wg.iter().product();
                Specials {
                    tid: tid_shapes(wg),
                    ntid: wg.map(Some),
                    nwarps: Some(threads.div_ceil(L as u32)),
                }
            }
        }
    }

    /// The shape of special register `sr` (`%clock` too: uniform).
    pub(crate) fn get(&self, sr: Special) -> Option<Shape> {
        use Special::*;
        let d = |x: Special| sr as usize - x as usize;
        match sr {
            TidX | TidY | TidZ => self.tid[d(TidX)].as_deref().cloned(),
            GidX | GidY | GidZ => self.tid[d(GidX)].as_deref().map(|t| Shape {
                k: t.k,
                link: t.link,
                known: None,
            }),
            NtidX | NtidY | NtidZ => Some(Shape::uniform(self.ntid[d(NtidX)])),
            NWarps => Some(Shape::uniform(self.nwarps)),
            LaneId => Some(Shape::of_lanes(&std::array::from_fn(|l| l as u32), true)),
            WgidX | WgidY | WgidZ | NwgX | NwgY | NwgZ | WarpId | Clock | ClockHi => {
                Some(Shape::uniform(None))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_ids_of_common_workgroup_shapes() {
        let [x, y, z] = tid_shapes([256, 1, 1]);
        let x = x.unwrap();
        let halves: [u32; L] = std::array::from_fn(|l| l as u32 % 16);
        assert_eq!((x.k, x.link, x.known), (halves, Some(16), None));
        assert!(y.unwrap().is_uniform() && z.unwrap().known == Some(0));
        let [x, y, _] = tid_shapes([16, 16, 1]);
        let x = x.unwrap();
        assert_eq!(x.lanes(), Some(std::array::from_fn(|l| l as u32 % 16)));
        let y = y.unwrap();
        assert!(y.per_half() && y.link == Some(1) && y.known.is_none());
        // 48 wide: lane 16 of warp 1 is thread 48 = (0, 1): consecutive in
        // each half, the halves unrelated.
        let x = tid_shapes([48, 2, 1])[0].clone().unwrap();
        assert_eq!((x.k[17], x.link), (1, None));
        assert!(tid_shapes([12, 2, 1])[0].is_none());
        // A single warp: everything known.
        let [x, y, _] = tid_shapes([8, 4, 1]);
        assert!(x.unwrap().lanes().is_some() && y.unwrap().lanes().is_some());
    }

    #[test]
    fn arithmetic_on_shapes() {
        let iota = Shape::of_lanes(&std::array::from_fn(|l| l as u32), false);
        let four = Shape::uniform(Some(4));
        let s = bin(BinOp::Mul, &iota, &four).unwrap();
        assert_eq!(s.k[5], 20);
        let s = bin(BinOp::Shl, &s, &Shape::uniform(Some(1))).unwrap();
        assert_eq!((s.k[17], s.link), (8, Some(128)));
        assert!(bin(BinOp::Mul, &iota, &iota).is_none());
        assert!(bin(BinOp::Xor, &iota, &four).is_none());
        let u = Shape::uniform(None);
        assert!(bin(BinOp::Xor, &u, &four).unwrap().is_uniform());
        let s = bin(BinOp::Add, &iota, &u).unwrap();
        assert_eq!((s.k[3], s.link), (3, Some(16)));
    }
}
