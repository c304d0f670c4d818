//! The compute unit: executes one workgroup of a kernel.
//!
//! Registers are stored structure-of-arrays, one `[u32; 32]` per register per
//! warp, and every instruction operates on all 32 lanes at once under the
//! execution mask. Divergence follows the minimum-PC rule of `docs/isa.md`:
//! each lane has its own PC and a warp always issues the instruction at the
//! lowest PC among its runnable lanes, with every lane at that PC active.

use crate::inst::*;
use crate::math;
use crate::mem::{lanes, Access, GlobalMemory, LaneFault, MemFault, MemFaultReason};
use crate::module::{Module, MAX_SHARED_BYTES, MAX_WORKGROUP_THREADS};
use std::fmt;
use std::ops::Deref;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use thiserror::Error;

type Lanes = [u32; WARP_SIZE];
const FULL: u32 = u32::MAX;

/// Warp instructions a warp runs before the scheduler moves to the next warp
/// and checks the cancel flag.
pub const QUANTUM: u64 = 1024;

/// A kernel launch: which kernel, the grid, the workgroup size and the
/// argument buffer. Built with [`Launch::new`], which validates it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launch {
    kernel: usize,
    grid: [u32; 3],
    wg_size: [u32; 3],
    args: Vec<u8>,
    /// Shared memory per workgroup in bytes (at least the kernel's).
    shared_bytes: u32,
}

/// Why a launch was refused.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum LaunchError {
    #[error("no kernel named {0:?}")]
    NoSuchKernel(String),
    #[error("no kernel {0} (the module has {1})")]
    NoSuchKernelIndex(u32, usize),
    #[error("shared memory {0} bytes exceeds {MAX_SHARED_BYTES}")]
    SharedTooLarge(u32),
    #[error("workgroup size {0:?} is invalid (each ≥ 1, product ≤ {MAX_WORKGROUP_THREADS})")]
    BadWorkgroupSize([u32; 3]),
    #[error("grid {0:?} is invalid (each dimension ≥ 1, at most 2^64 − 1 workgroups)")]
    BadGrid([u32; 3]),
    #[error("argument buffer has {have} bytes, the kernel needs {need}")]
    ArgsTooShort { need: u32, have: usize },
}

impl Launch {
    /// A launch of kernel `name` over `grid` workgroups of `wg_size` threads.
    pub fn new(
        module: &Module,
        name: &str,
        grid: [u32; 3],
        wg_size: [u32; 3],
        args: Vec<u8>,
    ) -> Result<Launch, LaunchError> {
        let kernel = module
            .kernel_index(name)
            .ok_or_else(|| LaunchError::NoSuchKernel(name.to_string()))?;
        Self::by_index(module, kernel as u32, grid, wg_size, args, 0)
    }

    /// A launch of the kernel at `index` in the module's kernel table, with
    /// at least `min_shared` bytes of shared memory per workgroup (the
    /// kernel's declared size if larger): what a `DISPATCH` packet names.
    pub fn by_index(
        module: &Module,
        index: u32,
        grid: [u32; 3],
        wg_size: [u32; 3],
        args: Vec<u8>,
        min_shared: u32,
    ) -> Result<Launch, LaunchError> {
        let kernel = index as usize;
        let k = module
            .kernels()
            .get(kernel)
            .ok_or(LaunchError::NoSuchKernelIndex(
                index,
                module.kernels().len(),
            ))?;
        let shared_bytes = k.shared_bytes.max(min_shared);
        if shared_bytes > MAX_SHARED_BYTES {
            return Err(LaunchError::SharedTooLarge(shared_bytes));
        }
        // Three u32 factors can exceed 64 bits (2^31 · 2^31 · 4 = 2^64
        // wraps to 0): the products are checked.
        let threads = checked_product(wg_size);
        if wg_size.contains(&0) || threads.is_none_or(|t| t > MAX_WORKGROUP_THREADS as u64) {
            return Err(LaunchError::BadWorkgroupSize(wg_size));
        }
        if grid.contains(&0) || checked_product(grid).is_none() {
            return Err(LaunchError::BadGrid(grid));
        }
        if args.len() < k.arg_size as usize {
            return Err(LaunchError::ArgsTooShort {
                need: k.arg_size,
                have: args.len(),
            });
        }
        Ok(Launch {
            kernel,
            grid,
            wg_size,
            args,
            shared_bytes,
        })
    }
    pub fn kernel_index(&self) -> usize {
        self.kernel
    }
    pub fn grid(&self) -> [u32; 3] {
        self.grid
    }
    pub fn wg_size(&self) -> [u32; 3] {
        self.wg_size
    }
    pub fn args(&self) -> &[u8] {
        &self.args
    }
    /// Shared memory per workgroup in bytes.
    pub fn shared_bytes(&self) -> u32 {
        self.shared_bytes
    }
    /// Number of workgroups in the grid (it fits 64 bits: checked when the
    /// launch was made).
    pub fn workgroups(&self) -> u64 {
        checked_product(self.grid).unwrap_or(u64::MAX)
    }
    /// The workgroup id of linear index `i` (x fastest).
    pub fn workgroup_id(&self, i: u64) -> [u32; 3] {
        let [gx, gy, _] = self.grid.map(u64::from);
        // One division at most in 1- and 2-D grids (a 64-bit division
        // costs tens of cycles, and this runs once per workgroup).
        if i < gx {
            return [i as u32, 0, 0];
        }
        let (q, x) = (i / gx, i % gx);
        if q < gy {
            return [x as u32, q as u32, 0];
        }
        [x as u32, (q % gy) as u32, (q / gy) as u32]
    }
    /// Threads per workgroup (at most `MAX_WORKGROUP_THREADS`: checked when
    /// the launch was made).
    pub fn threads_per_workgroup(&self) -> u32 {
        checked_product(self.wg_size)
            .and_then(|t| u32::try_from(t).ok())
            .unwrap_or(u32::MAX)
    }
}

/// The product of three dimensions, or `None` if it does not fit 64 bits.
pub fn checked_product(d: [u32; 3]) -> Option<u64> {
    d.iter().try_fold(1u64, |n, &v| n.checked_mul(u64::from(v)))
}

/// Limits of one [`WorkgroupExec::run`] call.
#[derive(Clone, Copy, Debug)]
pub struct Limits<'a> {
    /// Warp instructions this call may issue; [`Outcome::Preempted`] when
    /// they are used up.
    pub budget: u64,
    /// Checked at least every [`QUANTUM`] warp instructions;
    /// [`Outcome::Cancelled`] when it is set.
    pub cancel: Option<&'a AtomicBool>,
}

impl Limits<'_> {
    /// No budget and no cancel flag: runs until the workgroup ends.
    pub const UNLIMITED: Limits<'static> = Limits {
        budget: u64::MAX,
        cancel: None,
    };
}

/// A `trap` instruction stopped the workgroup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Trap {
    pub warp: u32,
    pub pc: u32,
    /// Lanes that executed the trap.
    pub mask: u32,
    pub code: u32,
}

/// How a `run` call ended (other than by a fault).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every thread exited.
    Completed,
    /// The budget ran out; call `run` again to continue.
    Preempted,
    /// The cancel flag was seen; the workgroup is abandoned.
    Cancelled,
    /// A `trap` executed; the workgroup is abandoned.
    Trapped(Trap),
}

/// What went wrong in a faulting instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultKind {
    /// A global memory access failed.
    Global(MemFault),
    /// A shared memory access was misaligned or out of bounds.
    Shared(MemFault),
    /// Threads of the workgroup wait at different barriers: `pc` is one of
    /// them, `other_pc` another.
    BarrierDivergence { other_pc: u32 },
    /// The workgroup id is outside the grid.
    BadWorkgroup,
}

/// A fault: the workgroup stops at the faulting instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fault {
    pub warp: u32,
    /// The lowest faulting lane.
    pub lane: u32,
    pub pc: u32,
    pub kind: FaultKind,
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            FaultKind::Global(m) | FaultKind::Shared(m) => {
                let space = if matches!(self.kind, FaultKind::Global(_)) {
                    "global"
                } else {
                    "shared"
                };
                write!(
                    f,
                    "{space} memory fault at pc {} (warp {}, lane {}): {}-byte {} of {:#x}: {:?}",
                    self.pc, self.warp, self.lane, m.size, m.access, m.va, m.reason
                )
            }
            FaultKind::BarrierDivergence { other_pc } => write!(
                f,
                "barrier divergence: warp {} lane {} waits at pc {}, other threads at pc {}",
                self.warp, self.lane, self.pc, other_pc
            ),
            FaultKind::BadWorkgroup => write!(f, "workgroup id outside the grid"),
        }
    }
}

impl std::error::Error for Fault {}

/// Warps of one workgroup that can issue an instruction in the same cycle:
/// the width of [`WorkgroupExec::cycles`]' performance model (a compute unit
/// with four warp schedulers).
pub const ISSUE_WIDTH: u64 = 4;

/// Counters of a workgroup's execution.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Warp instructions issued.
    pub warp_instructions: u64,
    /// Sum over issued instructions of the lanes that executed them.
    pub thread_instructions: u64,
}

/// One warp's state; the JIT's generated code reads and writes the same
/// fields (`crate::jit`), so either engine can continue the other's work.
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
    fn reset(&mut self, live: u32, entry: u32, zero: u64) {
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
    fn src(&self, b: Src) -> Lanes {
        match b {
            Src::Reg(r) => self.regs[r.0 as usize],
            Src::Imm(v) => [v; WARP_SIZE],
        }
    }

    #[inline(always)]
    fn write(&mut self, d: Reg, v: &Lanes, m: u32) {
        blend(&mut self.regs[d.0 as usize], v, m);
    }

    #[inline(always)]
    fn set_pred(&mut self, p: Pred, v: u32, m: u32) {
        if p != Pred::TRUE {
            let r = &mut self.preds[p.0 as usize & 7];
            *r = (*r & !m) | (v & m);
        }
    }

    #[inline(always)]
    fn pred(&self, p: Pred, neg: bool) -> u32 {
        let v = self.preds[p.0 as usize & 7];
        if neg {
            !v
        } else {
            v
        }
    }

    /// 64-bit addresses from the pair `r` plus `offset`.
    #[inline(always)]
    fn addr64(&self, r: Reg, offset: i32) -> [u64; WARP_SIZE] {
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
fn expand(m: u32) -> Lanes {
    let mut out = [0u32; WARP_SIZE];
    for (l, o) in out.iter_mut().enumerate() {
        *o = if m & (1u32 << l) != 0 { FULL } else { 0 };
    }
    out
}

#[inline(always)]
fn blend(dst: &mut Lanes, v: &Lanes, m: u32) {
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
fn map1(a: &Lanes, f: impl Fn(u32) -> u32) -> Lanes {
    let mut out = [0u32; WARP_SIZE];
    for l in 0..WARP_SIZE {
        out[l] = f(a[l]);
    }
    out
}

#[inline(always)]
fn map2(a: &Lanes, b: &Lanes, f: impl Fn(u32, u32) -> u32) -> Lanes {
    let mut out = [0u32; WARP_SIZE];
    for l in 0..WARP_SIZE {
        out[l] = f(a[l], b[l]);
    }
    out
}

#[inline(always)]
fn map3(a: &Lanes, b: &Lanes, c: &Lanes, f: impl Fn(u32, u32, u32) -> u32) -> Lanes {
    let mut out = [0u32; WARP_SIZE];
    for l in 0..WARP_SIZE {
        out[l] = f(a[l], b[l], c[l]);
    }
    out
}

/// Bit `l` of the result is `f(a[l], b[l])`.
#[inline(always)]
fn pack(a: &Lanes, b: &Lanes, f: impl Fn(u32, u32) -> bool) -> u32 {
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
fn fl(x: u32) -> f32 {
    f32::from_bits(x)
}

fn ffma_lanes(a: &Lanes, b: &Lanes, c: &Lanes) -> Lanes {
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
unsafe fn ffma_lanes_fma(a: &Lanes, b: &Lanes, c: &Lanes) -> Lanes {
    map3(a, b, c, |x, y, z| math::canon(fl(x).mul_add(fl(y), fl(z))))
}

#[inline(always)]
fn bin(op: BinOp, a: &Lanes, b: &Lanes) -> Lanes {
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
fn un(op: UnOp, a: &Lanes) -> Lanes {
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
fn compare(cmp: Cmp, ty: CmpType, a: &Lanes, b: &Lanes) -> u32 {
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

/// What running warp `w` from the scheduler did: the warp instructions
/// used, why the last warp run stopped and which warp that was. Native code
/// goes on from a warp left idle to the next one (never past the last)
/// with the quantum the scheduler would give it (the budget left, at most
/// [`QUANTUM`]), unless the budget is used up or the cancel flag is set;
/// so the warps run, the instructions used and the stop are the
/// scheduler's own.
pub(crate) type WarpRun = Result<(u64, WarpStop, usize), Fault>;

pub(crate) enum WarpStop {
    /// Quantum used up; the warp can continue.
    Quantum,
    /// No runnable lanes (all exited or waiting at a barrier).
    Idle,
    Trap(Trap),
}

/// A module or launch a [`WorkgroupExec`] reads: borrowed for the
/// lifetime of the execution, or shared ownership so the execution can be
/// kept (suspended) independently of its creator.
enum Held<'a, T> {
    Borrowed(&'a T),
    Shared(Arc<T>),
}

impl<T> Clone for Held<'_, T> {
    fn clone(&self) -> Self {
        match self {
            Held::Borrowed(r) => Held::Borrowed(r),
            Held::Shared(a) => Held::Shared(Arc::clone(a)),
        }
    }
}

impl<T> Deref for Held<'_, T> {
    type Target = T;
    #[inline(always)]
    fn deref(&self) -> &T {
        match self {
            Held::Borrowed(r) => r,
            Held::Shared(a) => a,
        }
    }
}

/// The state of one workgroup in execution. Reusable for further workgroups
/// of the same launch with [`WorkgroupExec::reset`].
pub struct WorkgroupExec<'a> {
    module: Held<'a, Module>,
    /// The kernel's first instruction.
    entry: u32,
    /// The registers a workgroup starts with cleared: those the kernel may
    /// read before writing them ([`crate::regflow::zeroed_at_entry`]; the
    /// others are never seen before the kernel writes them).
    zero_regs: u64,
    launch: Held<'a, Launch>,
    wg: [u32; 3],
    /// The warps; taken out (empty) while `run` executes them.
    warps: Vec<Warp>,
    /// How many warps the workgroup has.
    nwarps: usize,
    /// Thread ids (x, y, z) of every lane of every warp.
    pub(crate) tids: Vec<[Lanes; 3]>,
    pub(crate) shared: Vec<u32>,
    next_warp: usize,
    done: bool,
    /// How the workgroup ended, once it has.
    finished: Option<Result<Outcome, Fault>>,
    pub(crate) stats: Stats,
    /// Native code of the kernel: warps run it instead of the interpreter.
    #[cfg(feature = "jit")]
    jit: Option<Arc<crate::jit::JitKernel>>,
    /// The JIT's software TLB (direct pages per memory instruction).
    #[cfg(feature = "jit")]
    pub(crate) jit_pages: crate::jit::Pages,
}

impl<'a> WorkgroupExec<'a> {
    /// Prepares workgroup `wg` of `launch`.
    pub fn new(module: &'a Module, launch: &'a Launch, wg: [u32; 3]) -> Result<Self, Fault> {
        Self::build(Held::Borrowed(module), Held::Borrowed(launch), wg)
    }

    /// Like [`WorkgroupExec::new`], holding shared references to the module
    /// and the launch so that the execution state can be kept apart from
    /// them (e.g. a workgroup suspended between two time slices).
    pub fn new_shared(
        module: Arc<Module>,
        launch: Arc<Launch>,
        wg: [u32; 3],
    ) -> Result<WorkgroupExec<'static>, Fault> {
        WorkgroupExec::build(Held::Shared(module), Held::Shared(launch), wg)
    }

    fn build(
        module: Held<'a, Module>,
        launch: Held<'a, Launch>,
        wg: [u32; 3],
    ) -> Result<Self, Fault> {
        let bad = Fault {
            warp: 0,
            lane: 0,
            pc: 0,
            kind: FaultKind::BadWorkgroup,
        };
        let kernel = module.kernels().get(launch.kernel).ok_or(bad)?;
        if launch.args.len() < kernel.arg_size as usize || launch.shared_bytes < kernel.shared_bytes
        {
            return Err(bad);
        }
        let (nregs, entry) = (kernel.regs as usize, kernel.entry);
        let zero_regs =
            crate::regflow::zeroed_at_entry(module.code(), kernel.entry, kernel.len, nregs);
        let shared_words = (launch.shared_bytes as usize).div_ceil(4);
        let threads = launch.threads_per_workgroup() as usize;
        let nwarps = threads.div_ceil(WARP_SIZE);
        let warps = (0..nwarps)
            .map(|_| Warp {
                regs: vec![[0; WARP_SIZE]; nregs],
                preds: [0; NUM_PREDS],
                pc: 0,
                active: 0,
                lane_pc: [0; WARP_SIZE],
                live: 0,
                blocked: 0,
                next_min: u32::MAX,
                clock: 0,
            })
            .collect();
        let [nx, ny, _] = launch.wg_size;
        let tids = (0..nwarps)
            .map(|w| {
                let mut t = [[0u32; WARP_SIZE]; 3];
                for l in 0..WARP_SIZE {
                    let i = (w * WARP_SIZE + l) as u32;
                    t[0][l] = i % nx;
                    t[1][l] = (i / nx) % ny;
                    t[2][l] = i / (nx * ny);
                }
                t
            })
            .collect();
        let mut exec = WorkgroupExec {
            module,
            entry,
            zero_regs,
            launch,
            wg,
            warps,
            nwarps,
            tids,
            shared: vec![0; shared_words],
            next_warp: 0,
            done: false,
            finished: None,
            stats: Stats::default(),
            #[cfg(feature = "jit")]
            jit: None,
            #[cfg(feature = "jit")]
            jit_pages: crate::jit::Pages::default(),
        };
        exec.reset(wg)?;
        Ok(exec)
    }

    /// Restarts this state for workgroup `wg` of the same launch: registers,
    /// predicates and shared memory are zeroed.
    pub fn reset(&mut self, wg: [u32; 3]) -> Result<(), Fault> {
        if (0..3).any(|i| wg[i] >= self.launch.grid[i]) {
            let f = Fault {
                warp: 0,
                lane: 0,
                pc: 0,
                kind: FaultKind::BadWorkgroup,
            };
            self.done = true;
            self.finished = Some(Err(f));
            return Err(f);
        }
        self.wg = wg;
        let threads = self.launch.threads_per_workgroup() as usize;
        // Every warp is full but a last one of `threads % 32` lanes.
        let (full, rest) = (threads / WARP_SIZE, threads % WARP_SIZE);
        for (w, warp) in self.warps.iter_mut().enumerate() {
            let live = if w < full { FULL } else { (1u32 << rest) - 1 };
            warp.reset(live, self.entry, self.zero_regs);
        }
        if !self.shared.is_empty() {
            self.shared.fill(0);
        }
        self.next_warp = 0;
        self.done = false;
        self.finished = None;
        self.stats = Stats::default();
        Ok(())
    }

    /// Runs the warps on `kernel`'s native code (compiled from this
    /// execution's kernel by [`crate::jit::JitModule::compile`]), or on the
    /// interpreter with `None`. Results are the same either way; the state
    /// may be switched between `run` calls. Refused (false) for the code of
    /// another kernel.
    #[cfg(feature = "jit")]
    pub fn set_jit(&mut self, kernel: Option<Arc<crate::jit::JitKernel>>) -> bool {
        if let Some(k) = &kernel {
            let mine = self.module.kernels().get(self.launch.kernel);
            if !mine.is_some_and(|m| k.matches(m)) {
                return false;
            }
        }
        // The code specialised for the launch's workgroup shape.
        let kernel = kernel.map(|k| k.for_shape(self.launch.wg_size));
        self.jit_pages = crate::jit::Pages::for_kernel(kernel.as_deref());
        self.jit = kernel;
        true
    }

    /// Whether the warps run native code.
    #[cfg(feature = "jit")]
    pub fn jit_enabled(&self) -> bool {
        self.jit.is_some()
    }

    /// The warps' states (for the JIT's differential tests).
    #[cfg(all(test, feature = "jit"))]
    pub(crate) fn warps(&self) -> &[Warp] {
        &self.warps
    }

    /// The launch's argument buffer and grid, for the JIT's context.
    #[cfg(feature = "jit")]
    pub(crate) fn launch(&self) -> &Launch {
        &self.launch
    }

    /// The workgroup id and the number of warps (for the JIT's context).
    #[cfg(feature = "jit")]
    pub(crate) fn position(&self) -> ([u32; 3], usize) {
        (self.wg, self.nwarps)
    }

    /// Counters since the last reset.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// The workgroup's modelled time since the last reset, in compute-unit
    /// cycles (docs/isa.md, "Performance model"): each warp issues at most
    /// one instruction per cycle and at most [`ISSUE_WIDTH`] warps issue in
    /// the same cycle, so the workgroup takes the larger of its longest
    /// warp's issued instructions (`%clock`) and all its warps' issued
    /// instructions divided by [`ISSUE_WIDTH`] (rounded up). It counts
    /// issue slots, not host time: the same kernel and launch give the same
    /// cycles on the interpreter and the JIT, on any host, under any load.
    pub fn cycles(&self) -> u64 {
        let (longest, total) = self.warps.iter().fold((0u64, 0u64), |(m, t), w| {
            (m.max(w.clock), t.saturating_add(w.clock))
        });
        longest.max(total.div_ceil(ISSUE_WIDTH))
    }

    /// The workgroup's shared memory, as 32-bit words.
    pub fn shared(&self) -> &[u32] {
        &self.shared
    }

    /// Runs until the workgroup completes, traps, faults, the budget runs out
    /// or the cancel flag is set. After `Preempted`, the next call continues
    /// exactly where this one stopped; after anything else the workgroup is
    /// finished and further calls return the same result without executing.
    pub fn run<M: GlobalMemory + ?Sized>(
        &mut self,
        mem: &M,
        limits: Limits<'_>,
    ) -> Result<Outcome, Fault> {
        if let Some(r) = self.finished {
            return r;
        }
        let r = self.run_until_stop(mem, limits);
        if r != Ok(Outcome::Preempted) {
            self.finished = Some(r);
        }
        r
    }

    fn run_until_stop<M: GlobalMemory + ?Sized>(
        &mut self,
        mem: &M,
        limits: Limits<'_>,
    ) -> Result<Outcome, Fault> {
        if self.done {
            return Ok(Outcome::Completed);
        }
        // The warps are taken out for the whole call (each warp runs on
        // the execution's other state), and put back whatever happens.
        let mut warps = std::mem::take(&mut self.warps);
        let module = self.module.clone();
        let code = module.code();
        #[cfg(feature = "jit")]
        if let Some(k) = self.jit.take() {
            let r = crate::jit::schedule(self, &k, &mut warps, code, mem, limits);
            self.jit = Some(k);
            self.warps = warps;
            return r;
        }
        let r = self.schedule(&mut warps, limits, |e, warps, w, quantum, _| {
            let (used, stop) = e.run_warp_inner(w, &mut warps[w], code, mem, quantum)?;
            Ok((used, stop, w))
        });
        self.warps = warps;
        r
    }

    /// The scheduler: runs `warps` in rotation until the workgroup ends or
    /// `limits` stop it; `run(self, warps, w, quantum, budget)` runs warp
    /// `w` for at most `quantum` instructions (the interpreter, or native
    /// code). Native code may go on to the next warps itself, as this
    /// loop would: see [`WarpRun`].
    #[inline(always)]
    pub(crate) fn schedule(
        &mut self,
        warps: &mut [Warp],
        limits: Limits<'_>,
        mut run: impl FnMut(&mut Self, &mut [Warp], usize, u64, u64) -> WarpRun,
    ) -> Result<Outcome, Fault> {
        let mut budget = limits.budget;
        loop {
            if let Some(c) = limits.cancel {
                if c.load(Ordering::Relaxed) {
                    self.done = true;
                    return Ok(Outcome::Cancelled);
                }
            }
            let mut ran = false;
            // Whether every warp run this round ended with no runnable
            // lane: then none is runnable (only a barrier release makes a
            // warp runnable again), and a round finding that out is
            // skipped.
            let mut all_idle = true;
            let n = warps.len();
            // Warps in rotation from `next_warp` (no division per warp).
            let mut w = if self.next_warp < n {
                self.next_warp
            } else {
                0
            };
            // Warps visited this round (a call may run several in turn).
            let mut visited = 0;
            while visited < n {
                let this = w;
                if warps[this].active == 0 {
                    visited += 1;
                    w = if this + 1 == n { 0 } else { this + 1 };
                    continue;
                }
                if budget == 0 {
                    self.next_warp = this;
                    return Ok(Outcome::Preempted);
                }
                ran = true;
                let quantum = budget.min(QUANTUM);
                let (used, stop, last) = match run(self, warps, this, quantum, budget) {
                    Ok(r) => r,
                    Err(f) => {
                        self.done = true;
                        return Err(f);
                    }
                };
                // `run` went on from `this` to the following warps up to
                // `last` (each idle when left, as this loop would have
                // found them), never past the last warp.
                let last = last.clamp(this, n - 1);
                visited += last - this + 1;
                w = if last + 1 == n { 0 } else { last + 1 };
                budget -= used;
                all_idle &= matches!(stop, WarpStop::Idle);
                if let WarpStop::Trap(t) = stop {
                    self.done = true;
                    return Ok(Outcome::Trapped(t));
                }
                if let Some(c) = limits.cancel {
                    if c.load(Ordering::Relaxed) {
                        self.done = true;
                        return Ok(Outcome::Cancelled);
                    }
                }
            }
            self.next_warp = 0;
            if !ran || all_idle {
                // Nothing runnable: every live lane is at a barrier, or all
                // threads have exited (the usual end of a workgroup, seen
                // here without the release's call).
                if warps.iter().all(|w| w.blocked == 0) || !self.release_barrier(warps)? {
                    self.done = true;
                    return Ok(Outcome::Completed);
                }
            }
        }
    }

    /// Releases a barrier every live thread waits at. Returns false when no
    /// thread is waiting (the workgroup is finished).
    fn release_barrier(&mut self, warps: &mut [Warp]) -> Result<bool, Fault> {
        // The pc of the first waiting lane; when every waiting lane is
        // there (the usual case, checked lane-parallel), release them.
        let first = warps
            .iter()
            .find(|w| w.blocked != 0)
            .map(|w| w.lane_pc[w.blocked.trailing_zeros() as usize]);
        let Some(pc) = first else {
            return Ok(false);
        };
        let elsewhere = |w: &Warp| {
            if w.blocked == FULL {
                // A whole warp waiting (the usual case): one reduction.
                let d = w.lane_pc.iter().fold(0, |a, &p| a | (p ^ pc));
                return if d == 0 { 0 } else { FULL };
            }
            let mut d = [0u8; WARP_SIZE];
            for l in 0..WARP_SIZE {
                d[l] = (w.lane_pc[l] != pc) as u8;
            }
            bits_of(&d) & w.blocked
        };
        if warps.iter().all(|w| elsewhere(w) == 0) {
            for warp in warps.iter_mut() {
                if warp.blocked == FULL {
                    warp.lane_pc = [pc + 1; WARP_SIZE];
                } else {
                    let bk = expand(warp.blocked);
                    for l in 0..WARP_SIZE {
                        warp.lane_pc[l] = ((pc + 1) & bk[l]) | (warp.lane_pc[l] & !bk[l]);
                    }
                }
                if warp.active == 0 && warp.live == warp.blocked {
                    // What rescheduling gives when nothing but the released
                    // lanes can run (always, at a release): all of them, at
                    // the barrier's next instruction.
                    warp.active = warp.blocked;
                    if warp.active != 0 {
                        warp.pc = pc + 1;
                    }
                    warp.next_min = u32::MAX;
                    warp.blocked = 0;
                } else {
                    warp.blocked = 0;
                    warp.reschedule();
                }
            }
            return Ok(true);
        }
        let mut bar: Option<(u32, u32, u32)> = None; // pc, warp, lane
        for (w, warp) in warps.iter().enumerate() {
            for l in lanes(warp.blocked) {
                let pc = warp.lane_pc[l];
                match bar {
                    None => bar = Some((pc, w as u32, l as u32)),
                    Some((p, bw, bl)) if p != pc => {
                        self.done = true;
                        return Err(Fault {
                            warp: bw,
                            lane: bl,
                            pc: p,
                            kind: FaultKind::BarrierDivergence { other_pc: pc },
                        });
                    }
                    Some(_) => {}
                }
            }
        }
        let Some((pc, _, _)) = bar else {
            return Ok(false);
        };
        for warp in warps.iter_mut() {
            for l in lanes(warp.blocked) {
                warp.lane_pc[l] = pc + 1;
            }
            warp.blocked = 0;
            warp.reschedule();
        }
        Ok(true)
    }

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
            let fault = |lane: u32, kind| Fault {
                warp: w as u32,
                lane,
                pc,
                kind,
            };
            if m != 0 {
                match inst.op {
                    Op::Nop => {}
                    Op::Exit => {
                        warp.live &= !m;
                        warp.active &= !m;
                        if warp.active == 0 {
                            warp.reschedule();
                            warp.clock += 1;
                            continue;
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
                            warp.clock += 1;
                            continue;
                        }
                    }
                    Op::Trap { code } => {
                        warp.clock += 1;
                        self.stats.warp_instructions += used;
                        self.stats.thread_instructions += thread_insts;
                        return Ok((
                            used,
                            WarpStop::Trap(Trap {
                                warp: w as u32,
                                pc,
                                mask: m,
                                code,
                            }),
                        ));
                    }
                    Op::Bra { offset } => {
                        let target = (pc as i64 + offset as i64) as u32;
                        if m == warp.active {
                            next = target;
                        } else {
                            // Divergence: the taken lanes go to the target,
                            // the others stay on the fall-through path.
                            for l in lanes(warp.active & !m) {
                                warp.lane_pc[l] = next;
                            }
                            warp.next_min = warp.next_min.min(next);
                            warp.active = m;
                            next = target;
                        }
                    }
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
                            TriOp::Mad => {
                                map3(av, bv, cv, |x, y, z| x.wrapping_mul(y).wrapping_add(z))
                            }
                            TriOp::FFma if FMA => map3(av, bv, cv, |x, y, z| {
                                math::canon(fl(x).mul_add(fl(y), fl(z)))
                            }),
                            TriOp::FFma => ffma_lanes(av, bv, cv),
                        };
                        warp.write(d, &v, m);
                    }
                    Op::Add64 { d, a, b } => {
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
                    Op::MadWide { signed, d, a, b, c } => {
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
                    Op::Ld {
                        space: Space::Global,
                        width,
                        d,
                        addr,
                        offset,
                    } => {
                        let va = warp.addr64(addr, offset);
                        let size = width.bytes() as u8;
                        check_aligned(&va, m, size, Access::Read)
                            .map_err(|(l, f)| fault(l, FaultKind::Global(f)))?;
                        let mut lo = [0u32; WARP_SIZE];
                        let mut hi = [0u32; WARP_SIZE];
                        mem.load_warp(size, &va, m, &mut lo, &mut hi).map_err(
                            |LaneFault { lane, fault: f }| fault(lane, FaultKind::Global(f)),
                        )?;
                        write_loaded(warp, width, d, &lo, &hi, m);
                    }
                    Op::St {
                        space: Space::Global,
                        width,
                        addr,
                        offset,
                        v,
                    } => {
                        let va = warp.addr64(addr, offset);
                        let size = width.bytes() as u8;
                        check_aligned(&va, m, size, Access::Write)
                            .map_err(|(l, f)| fault(l, FaultKind::Global(f)))?;
                        let lo = &warp.regs[v.0 as usize];
                        let hi = if width == Width::B64 {
                            &warp.regs[v.0 as usize + 1]
                        } else {
                            lo
                        };
                        mem.store_warp(size, &va, m, lo, hi).map_err(
                            |LaneFault { lane, fault: f }| fault(lane, FaultKind::Global(f)),
                        )?;
                    }
                    Op::Atom {
                        space: Space::Global,
                        op,
                        d,
                        addr,
                        offset,
                        b,
                        c,
                    } => {
                        let va = warp.addr64(addr, offset);
                        check_aligned(&va, m, 4, Access::Atomic)
                            .map_err(|(l, f)| fault(l, FaultKind::Global(f)))?;
                        let (bv, cv) = (&warp.regs[b.0 as usize], &warp.regs[c.0 as usize]);
                        let mut old = [0u32; WARP_SIZE];
                        for l in lanes(m) {
                            old[l] = mem
                                .atomic32(va[l], op, bv[l], cv[l])
                                .map_err(|f| fault(l as u32, FaultKind::Global(f)))?;
                        }
                        warp.write(d, &old, m);
                    }
                    Op::Ld {
                        space: Space::Shared,
                        width,
                        d,
                        addr,
                        offset,
                    } => {
                        let shared = &self.shared;
                        let size = width.bytes();
                        let base = &warp.regs[addr.0 as usize];
                        let mut lo = [0u32; WARP_SIZE];
                        let mut hi = [0u32; WARP_SIZE];
                        if size == 4 {
                            let idx = shared_words(shared, base, offset, m, Access::Read)
                                .map_err(|(l, f)| fault(l, FaultKind::Shared(f)))?;
                            for l in 0..WARP_SIZE {
                                if m >> l & 1 != 0 {
                                    lo[l] = shared.get(idx[l] as usize).copied().unwrap_or(0);
                                }
                            }
                            warp.write(d, &lo, m);
                            warp.clock += 1;
                            warp.pc = next;
                            if next >= warp.next_min {
                                warp.reschedule();
                            }
                            continue;
                        }
                        for l in lanes(m) {
                            let a = base[l].wrapping_add(offset as u32);
                            let i = shared_index(shared, a, size, Access::Read)
                                .map_err(|f| fault(l as u32, FaultKind::Shared(f)))?;
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
                        space: Space::Shared,
                        width,
                        addr,
                        offset,
                        v,
                    } => {
                        let shared = &mut self.shared;
                        let size = width.bytes();
                        let base = &warp.regs[addr.0 as usize];
                        let val = &warp.regs[v.0 as usize];
                        if size == 4 {
                            let idx = shared_words(shared, base, offset, m, Access::Write)
                                .map_err(|(l, f)| fault(l, FaultKind::Shared(f)))?;
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
                                    .map_err(|f| fault(l as u32, FaultKind::Shared(f)))?;
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
                        space: Space::Shared,
                        op,
                        d,
                        addr,
                        offset,
                        b,
                        c,
                    } => {
                        let shared = &mut self.shared;
                        let base = &warp.regs[addr.0 as usize];
                        let (bv, cv) = (&warp.regs[b.0 as usize], &warp.regs[c.0 as usize]);
                        let mut old = [0u32; WARP_SIZE];
                        for l in lanes(m) {
                            let a = base[l].wrapping_add(offset as u32);
                            let i = shared_index(shared, a, 4, Access::Atomic)
                                .map_err(|f| fault(l as u32, FaultKind::Shared(f)))?;
                            old[l] = shared[i];
                            shared[i] = op.apply(old[l], bv[l], cv[l]);
                        }
                        warp.write(d, &old, m);
                    }
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

/// Runs workgroup `wg` of `launch` to the end (or to the first trap, fault,
/// exhausted budget or cancellation). A `Preempted` workgroup cannot be
/// resumed through this function; use [`WorkgroupExec`] for that.
pub fn run_workgroup<M: GlobalMemory + ?Sized>(
    module: &Module,
    launch: &Launch,
    wg: [u32; 3],
    mem: &M,
    limits: Limits<'_>,
) -> Result<Outcome, Fault> {
    WorkgroupExec::new(module, launch, wg)?.run(mem, limits)
}
