//! A multi-compute-unit runner: N host threads pull workgroups from a shared
//! counter and execute them against one shared global memory.

use crate::exec::{Fault, Launch, Limits, Outcome, Stats, Trap, WorkgroupExec};
use crate::mem::GlobalMemory;
use crate::module::Module;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

/// Warp instructions a compute unit runs between checks of the stop flags.
const SLICE: u64 = 1 << 16;

/// Workgroups a compute unit claims at once in a large grid.
const BATCH: u64 = 4;

/// How a grid ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GridOutcome {
    /// Every workgroup completed.
    Completed,
    /// The cancel flag was seen; workgroups still running were abandoned.
    Cancelled,
    /// A workgroup trapped; the grid was stopped.
    Trapped { workgroup: [u32; 3], trap: Trap },
    /// A workgroup faulted; the grid was stopped.
    Faulted { workgroup: [u32; 3], fault: Fault },
}

/// What a grid run did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GridReport {
    pub outcome: GridOutcome,
    /// Workgroups that completed.
    pub workgroups_completed: u64,
    pub stats: Stats,
    /// Modelled time of the completed workgroups: the sum of their
    /// [`WorkgroupExec::cycles`](crate::exec::WorkgroupExec::cycles).
    pub cycles: u64,
}

/// Runs every workgroup of `launch` on `units` compute units (host threads).
/// Workgroups are handed out in linear order (x fastest) from a shared
/// counter (in runs of `BATCH` in large grids). The first trap or fault
/// stops the grid.
pub fn run_grid<M: GlobalMemory + Sync + ?Sized>(
    module: &Module,
    launch: &Launch,
    mem: &M,
    units: usize,
    cancel: Option<&AtomicBool>,
) -> GridReport {
    run_grid_on(module, launch, mem, units, cancel, None)
}

/// [`run_grid`] with the warps on `jit`'s native code (compiled from
/// `module`) where it has the kernel's, on the interpreter otherwise.
#[cfg(feature = "jit")]
pub fn run_grid_jit<M: GlobalMemory + Sync + ?Sized>(
    module: &Module,
    launch: &Launch,
    mem: &M,
    units: usize,
    cancel: Option<&AtomicBool>,
    jit: &crate::jit::JitModule,
) -> GridReport {
    let code = jit.kernel(launch.kernel_index()).ok();
    run_grid_on(module, launch, mem, units, cancel, code)
}

#[cfg(feature = "jit")]
type Code<'a> = Option<&'a std::sync::Arc<crate::jit::JitKernel>>;
#[cfg(not(feature = "jit"))]
type Code<'a> = Option<&'a ()>;

fn run_grid_on<M: GlobalMemory + Sync + ?Sized>(
    module: &Module,
    launch: &Launch,
    mem: &M,
    units: usize,
    cancel: Option<&AtomicBool>,
    code: Code<'_>,
) -> GridReport {
    let total = launch.workgroups();
    let next = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let first: Mutex<Option<GridOutcome>> = Mutex::new(None);
    let completed = AtomicU64::new(0);
    let warp_insts = AtomicU64::new(0);
    let thread_insts = AtomicU64::new(0);
    let cycles = AtomicU64::new(0);
    let record = |o: GridOutcome| {
        let mut g = first.lock().unwrap_or_else(|e| e.into_inner());
        if g.is_none() {
            *g = Some(o);
        }
        stop.store(true, Ordering::Relaxed);
    };
    let cancelled = || cancel.is_some_and(|c| c.load(Ordering::Relaxed));
    // Workgroups a compute unit claims at a time: an atomic add on the
    // shared counter costs about as much as a short warp, so large grids
    // take a few at once (small ones one by one, to spread them).
    let batch = if total >= 64 * units.max(1) as u64 {
        BATCH
    } else {
        1
    };
    std::thread::scope(|s| {
        let mut workers = Vec::with_capacity(units.max(1));
        for _ in 0..units.max(1) {
            workers.push(s.spawn(|| {
                let mut exec: Option<WorkgroupExec<'_>> = None;
                // This thread's counts, added to the grid's once at the end
                // (not per workgroup: the other threads' counters share
                // cache lines).
                let (mut done, mut cyc, mut wi, mut ti) = (0u64, 0u64, 0u64, 0u64);
                // Workgroups claimed from the counter and not run yet.
                let (mut claimed, mut claimed_end) = (0u64, 0u64);
                'work: loop {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    if cancelled() {
                        record(GridOutcome::Cancelled);
                        break;
                    }
                    if claimed == claimed_end {
                        claimed = next.fetch_add(batch, Ordering::Relaxed);
                        claimed_end = claimed.saturating_add(batch).min(total);
                    }
                    let i = claimed;
                    if i >= total {
                        break;
                    }
                    claimed += 1;
                    let wg = launch.workgroup_id(i);
                    let started = match exec.as_mut() {
                        Some(e) => e.reset(wg).map(|_| ()),
                        None => WorkgroupExec::new(module, launch, wg).map(|mut e| {
                            #[cfg(feature = "jit")]
                            e.set_jit(code.cloned());
                            #[cfg(not(feature = "jit"))]
                            let _ = (&mut e, code);
                            exec = Some(e);
                        }),
                    };
                    if let Err(fault) = started {
                        record(GridOutcome::Faulted {
                            workgroup: wg,
                            fault,
                        });
                        break;
                    }
                    let Some(e) = exec.as_mut() else { break };
                    let keep_going = loop {
                        let limits = Limits {
                            budget: SLICE,
                            cancel,
                        };
                        match e.run(mem, limits) {
                            Ok(Outcome::Preempted) => {
                                if stop.load(Ordering::Relaxed) {
                                    break false;
                                }
                            }
                            Ok(Outcome::Completed) => {
                                done += 1;
                                cyc += e.cycles();
                                break true;
                            }
                            Ok(Outcome::Cancelled) => {
                                record(GridOutcome::Cancelled);
                                break false;
                            }
                            Ok(Outcome::Trapped(trap)) => {
                                record(GridOutcome::Trapped {
                                    workgroup: wg,
                                    trap,
                                });
                                break false;
                            }
                            Err(fault) => {
                                record(GridOutcome::Faulted {
                                    workgroup: wg,
                                    fault,
                                });
                                break false;
                            }
                        }
                    };
                    let st = e.stats();
                    wi += st.warp_instructions;
                    ti += st.thread_instructions;
                    if !keep_going {
                        break 'work;
                    }
                }
                completed.fetch_add(done, Ordering::Relaxed);
                cycles.fetch_add(cyc, Ordering::Relaxed);
                warp_insts.fetch_add(wi, Ordering::Relaxed);
                thread_insts.fetch_add(ti, Ordering::Relaxed);
            }));
        }
        // Joined here rather than by the scope: a joined thread has fully
        // exited (its thread-locals destroyed) when the grid returns, where
        // the scope only waits for the closures to return.
        for w in workers {
            if let Err(panic) = w.join() {
                std::panic::resume_unwind(panic);
            }
        }
    });
    let outcome = first
        .into_inner()
        .unwrap_or_else(|e| e.into_inner())
        .unwrap_or(GridOutcome::Completed);
    GridReport {
        outcome,
        workgroups_completed: completed.into_inner(),
        cycles: cycles.into_inner(),
        stats: Stats {
            warp_instructions: warp_insts.into_inner(),
            thread_instructions: thread_insts.into_inner(),
        },
    }
}
