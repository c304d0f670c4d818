//! The compute unit: executes one workgroup of a kernel.
//!
//! Registers are stored structure-of-arrays, one `[u32; 32]` per register per
//! warp, and every instruction operates on all 32 lanes at once under the
//! execution mask. Divergence follows the minimum-PC rule of `docs/isa.md`:
//! each lane has its own PC and a warp always issues the instruction at the
//! lowest PC among its runnable lanes, with every lane at that PC active.

use crate::inst::*;
use crate::mem::{lanes, Forward, GlobalMemory, MemFault};
pub use crate::module::checked_product;
use crate::module::Module;
use std::fmt;
use std::ops::Deref;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

mod launch;
mod step;
mod warp;

pub use launch::{Launch, LaunchError};
use warp::expand;
pub(crate) use warp::{bits_of, Warp};

type Lanes = [u32; WARP_SIZE];
const FULL: u32 = u32::MAX;

/// Warp instructions a warp runs before the scheduler moves to the next warp
/// and checks the cancel flag.
pub const QUANTUM: u64 = 1024;

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
    /// Native code of the kernel with its per-execution state: warps run
    /// it instead of the interpreter.
    native: Option<Box<dyn NativeCode>>,
}

/// Native code that runs a workgroup's warps instead of the interpreter,
/// for one [`WorkgroupExec::run`] call, under the interpreter's scheduler
/// ([`WorkgroupExec::schedule`]), with the same results. The JIT
/// implements it; the interpreter knows only this trait.
pub(crate) trait NativeCode: Send {
    /// Runs `warps`, taken out of `exec`, on `code` and `mem` until the
    /// workgroup ends or `limits` stop it.
    fn run(
        &mut self,
        exec: &mut WorkgroupExec<'_>,
        warps: &mut [Warp],
        code: &[Instruction],
        mem: &dyn GlobalMemory,
        limits: Limits<'_>,
    ) -> Result<Outcome, Fault>;
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
            native: None,
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

    /// The kernel this execution runs.
    #[cfg_attr(not(feature = "jit"), allow(dead_code))]
    pub(crate) fn kernel(&self) -> Option<&crate::module::Kernel> {
        self.module.kernels().get(self.launch.kernel)
    }

    /// Runs the warps on `native` instead of the interpreter, or on the
    /// interpreter with `None`.
    #[cfg_attr(not(feature = "jit"), allow(dead_code))]
    pub(crate) fn set_native(&mut self, native: Option<Box<dyn NativeCode>>) {
        self.native = native;
    }

    /// Whether the warps run native code.
    pub fn jit_enabled(&self) -> bool {
        self.native.is_some()
    }

    /// The warps' states (for the JIT's differential tests).
    #[cfg(all(test, feature = "jit"))]
    pub(crate) fn warps(&self) -> &[Warp] {
        &self.warps
    }

    /// The launch's argument buffer and grid, for the JIT's context.
    #[cfg_attr(not(feature = "jit"), allow(dead_code))]
    pub(crate) fn launch(&self) -> &Launch {
        &self.launch
    }

    /// The workgroup id and the number of warps (for the JIT's context).
    #[cfg_attr(not(feature = "jit"), allow(dead_code))]
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
        if let Some(mut native) = self.native.take() {
            let r = native.run(self, &mut warps, code, &Forward(mem), limits);
            self.native = Some(native);
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
