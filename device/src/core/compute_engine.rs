//! The compute engine: `DISPATCH` runs a kernel of the vgpu ISA on the
//! engine's compute units; the common packets (`NOP`, `INDIRECT`, `FENCE`,
//! `SEM_WAIT`, `SEM_SIGNAL`, `TIMESTAMP`) go through the same command
//! processor as on the copy engine, and the copy engine's packets are
//! refused with `WRONG_ENGINE`.
//!
//! # A dispatch
//!
//! 1. **Load** (first step): the module image is read through the MMU with
//!    execute access into device memory, validated for the device's
//!    generation by [`Module::load`], and the argument buffer is read with
//!    read access. A translation fault here is an ordinary packet fault
//!    (replayable contexts stall and retry the load). An invalid module, a
//!    kernel index outside its kernel table, an argument buffer shorter than
//!    the kernel's arguments, or a grid of more than 2^64 − 1 workgroups is
//!    the engine error `BAD_OPERAND`; nothing executes.
//! 2. **Run**: the workgroups (linear index, x fastest) are handed out in
//!    order to the compute units. Each [`Dispatch::step`] lets every unit
//!    execute at most [`STEP_BUDGET`] warp instructions — finishing its
//!    workgroup and taking the next ones, or stopping inside a workgroup —
//!    and returns, so the command processor can check for resets,
//!    invalidations, preemption and the end of its time slice between
//!    steps. A workgroup stopped inside keeps its whole state (registers,
//!    shared memory, PCs, barriers) and continues exactly there at the next
//!    step, possibly after other contexts ran; an engine reset discards it.
//!    An infinite loop therefore keeps the engine busy but stays preemptible
//!    and resettable; there is no watchdog.
//! 3. **End**: when every workgroup completed, the packet completes.
//!
//! The loaded state (module, launch, workgroups in progress) is kept by the
//! command processor, named by a token in the ring's cursor.
//!
//! # Compute units
//!
//! With N compute units, a step runs on N host threads, each with its own
//! TLB over the context's address space (flushed and invalidated with the
//! engine's). They share global memory: plain loads and stores of
//! naturally aligned values never tear, atomics are atomic across units.
//! Race-free kernels give the same results for any N.
//!
//! # Stops
//!
//! * A global memory access that fails translation posts a `FAULT` event
//!   with the lane and PC (`lane | pc << 32`) and stops the ring
//!   (`PAGE_FAULT`). Kernel faults are never replayable, whatever the
//!   context's fault mode: a workgroup cannot be resumed in the middle of a
//!   faulting instruction and re-running it is only correct for idempotent
//!   kernels.
//! * `TRAP` is the engine error `TRAP`; the event's `header` field holds
//!   the PC of the trap instruction.
//! * A misaligned global access is the engine error `MISALIGNED`, a
//!   shared-memory access out of the workgroup's allocation or misaligned,
//!   and threads waiting at different barriers, are `BAD_OPERAND`; the
//!   event's `header` holds the PC.
//!
//! The first stop in workgroup order among those the units met in the same
//! step is reported; the other units abandon their workgroups.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use vgpu_hwif::mmu::Access;
use vgpu_hwif::packet::{DispatchPacket, EngineError, Packet};
use vgpu_isa::jit::{Compiling, JitCache, JitKernel, JitMode, Lookup};
use vgpu_isa::{Fault, FaultKind, Launch, Limits, MemFaultReason, Module, Outcome, WorkgroupExec};

use super::dma::GpuMemory;
use super::kernel_mem::KernelMemory;
use super::mmu::{AddressSpace, Mem, MmuFault, Tlb};
use super::poison::Poison;

/// Warp instructions each compute unit executes per step at most.
pub const STEP_BUDGET: u64 = 1 << 15;

/// Compiled modules a compute engine keeps (see [`JitCache`]).
pub const JIT_CACHE_MODULES: usize = 32;

/// How a compute engine runs kernels: the mode and its cache of compiled
/// modules (keyed by module image, so a module dispatched again is not
/// compiled again).
#[derive(Debug)]
pub struct KernelEngine {
    /// `--jit`.
    pub mode: JitMode,
    /// Compiled modules.
    pub cache: JitCache,
}

impl KernelEngine {
    /// An engine running kernels as `mode` says.
    pub fn new(mode: JitMode) -> KernelEngine {
        KernelEngine {
            mode,
            cache: JitCache::new(JIT_CACHE_MODULES),
        }
    }

    /// The native code of kernel `index` of `module` (loaded from
    /// `image`), if this engine runs it on the JIT. Under `auto` a module
    /// not compiled yet is compiled on a thread of its own while its
    /// workgroups start on the interpreter (the code is taken up at a
    /// later step, for the workgroups that start then): an engine never
    /// spends its time slice compiling. Under `on` the engine waits for
    /// the code (every workgroup runs natively).
    fn code(&self, image: &[u8], module: &Arc<Module>, index: u32) -> KernelCode {
        let looked_up = match self.mode {
            JitMode::Off => return KernelCode::Ready(None),
            JitMode::On => self.cache.get(image, module, self.mode).map(Lookup::Ready),
            JitMode::Auto => self.cache.get_or_start(image, module, self.mode),
        };
        match looked_up {
            Ok(Lookup::Ready(m)) => KernelCode::Ready(m.kernel(index as usize).ok().cloned()),
            Ok(Lookup::Compiling(c)) => KernelCode::Compiling(c, index),
            Ok(Lookup::Busy) => KernelCode::Ready(None),
            Err(e) => {
                log::warn!("kernels run on the interpreter: {e}");
                KernelCode::Ready(None)
            }
        }
    }
}

/// A dispatch's native code: there (or none: the interpreter), or being
/// compiled (kernel index).
enum KernelCode {
    Ready(Option<Arc<JitKernel>>),
    Compiling(Arc<Compiling>, u32),
}

/// `DISPATCH` in a ring cursor: the packet's operands, and the token of
/// its loaded state in the command processor (0 before it is loaded).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DispatchOp {
    /// The packet's operands, as decoded and validated by `hwif`.
    pub packet: DispatchPacket,
    /// The loaded state's token; 0 until loaded.
    pub token: u64,
}

impl DispatchOp {
    /// The operation of a `DISPATCH` packet, not loaded yet.
    pub const fn new(packet: DispatchPacket) -> DispatchOp {
        DispatchOp { packet, token: 0 }
    }
}

/// Why a dispatch could not be loaded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoadError {
    /// Reading the module or the arguments faulted.
    Fault(MmuFault),
    /// The module, kernel, arguments or grid are invalid.
    Invalid(EngineError),
}

/// How a step ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepEnd {
    /// Workgroups remain.
    Progress,
    /// Every workgroup completed.
    Done,
    /// A kernel stopped with an engine error; `pc` of the instruction.
    Error {
        /// The error.
        code: EngineError,
        /// PC of the instruction.
        pc: u32,
    },
    /// A global access faulted.
    Fault {
        /// The translation fault.
        fault: MmuFault,
        /// `lane | pc << 32` (lane = thread index in the workgroup).
        lane_pc: u64,
    },
    /// A compute unit failed internally (a device bug caught as a panic):
    /// the dispatch cannot go on.
    Internal,
}

/// Counters of one step.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StepStats {
    /// Workgroups completed.
    pub workgroups: u64,
    /// Warp instructions issued.
    pub warp_instructions: u64,
    /// Lane operations: instructions times the lanes that executed them.
    pub lane_ops: u64,
    /// Modelled time of the workgroups completed, in compute-unit cycles
    /// (`WorkgroupExec::cycles`).
    pub cycles: u64,
}

/// One compute unit's workgroup in progress.
#[derive(Default)]
struct Slot {
    /// Reused for successive workgroups.
    exec: Option<WorkgroupExec<'static>>,
    /// Linear index of the workgroup in progress.
    current: Option<u64>,
    /// `exec` runs native code.
    native: bool,
}

/// A loaded dispatch and its progress.
pub struct Dispatch {
    module: Arc<Module>,
    launch: Arc<Launch>,
    /// The kernel's native code, when it runs on the JIT.
    code: Option<Arc<JitKernel>>,
    /// Its compilation, until it finished (kernel index).
    compiling: Option<(Arc<Compiling>, u32)>,
    total: u64,
    next: u64,
    slots: Vec<Slot>,
    /// Tests: the last compute unit panics at the next step.
    #[cfg(test)]
    pub(crate) test_panic: bool,
}

impl std::fmt::Debug for Dispatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dispatch")
            .field("total", &self.total)
            .field("next", &self.next)
            .finish_non_exhaustive()
    }
}

/// Reads `size` bytes at `va` with `access`.
fn fetch(gm: &mut GpuMemory<'_>, va: u64, size: u32, access: Access) -> Result<Vec<u8>, MmuFault> {
    let mut words = vec![0u32; size.div_ceil(4) as usize];
    let (_, fault) = gm.read_words(va, &mut words, access);
    if let Some(f) = fault {
        return Err(f);
    }
    let mut bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    bytes.truncate(size as usize);
    Ok(bytes)
}

/// A stop met by one unit: workgroup index and what happened.
type Stop = (u64, StepEnd);

impl Dispatch {
    /// Fetches and validates the module and arguments of `op` for a
    /// generation-`generation` device with `units` compute units; the
    /// kernel runs on `engine`'s JIT if it has one for it (compiled after
    /// validation: nothing of an invalid module reaches the JIT).
    pub fn load(
        op: &DispatchOp,
        gm: &mut GpuMemory<'_>,
        generation: u32,
        units: usize,
        engine: &KernelEngine,
    ) -> Result<Dispatch, LoadError> {
        let p = &op.packet;
        let image =
            fetch(gm, p.module_va, p.module_size, Access::Execute).map_err(LoadError::Fault)?;
        let args = if p.args_size == 0 {
            Vec::new()
        } else {
            fetch(gm, p.args_va, p.args_size, Access::Read).map_err(LoadError::Fault)?
        };
        let bad = LoadError::Invalid(EngineError::BadOperand);
        let module = Module::load(&image, generation).map_err(|_| bad)?;
        let total = p.workgroups().ok_or(bad)?;
        let launch = Launch::by_index(&module, p.kernel, p.grid, p.wg, args, p.shared_size)
            .map_err(|_| bad)?;
        let module = Arc::new(module);
        let (code, compiling) = match engine.code(&image, &module, p.kernel) {
            KernelCode::Ready(code) => (code, None),
            KernelCode::Compiling(c, i) => (None, Some((c, i))),
        };
        Ok(Dispatch {
            module,
            launch: Arc::new(launch),
            code,
            compiling,
            total,
            next: 0,
            slots: (0..units.max(1)).map(|_| Slot::default()).collect(),
            #[cfg(test)]
            test_panic: false,
        })
    }

    /// Workgroups in the grid.
    pub fn workgroups(&self) -> u64 {
        self.total
    }

    /// Workgroups handed out to compute units so far.
    pub fn started(&self) -> u64 {
        self.next
    }

    /// Runs one step on the compute units, compute unit `i` translating
    /// through `tlbs[i]` (there must be one TLB per unit); loads and
    /// atomics touching a page of `poison` fail with an ECC error.
    pub fn step(
        &mut self,
        mem: &Mem,
        space: AddressSpace,
        tlbs: &mut [Tlb],
        poison: Option<&Poison>,
        tap: Option<super::record::Tap<'_>>,
    ) -> (StepEnd, StepStats) {
        // Native code compiled since the last step: for the workgroups
        // that start from now on.
        if let Some((c, i)) = &self.compiling {
            if let Some(r) = c.result() {
                self.code = r
                    .as_ref()
                    .ok()
                    .and_then(|m| m.kernel(*i as usize).ok().cloned());
                self.compiling = None;
            }
        }
        let next = AtomicU64::new(self.next);
        let stop = AtomicBool::new(false);
        let stops: Mutex<Vec<Stop>> = Mutex::new(Vec::new());
        let total = self.total;
        let (module, launch, code) = (&self.module, &self.launch, &self.code);
        #[cfg(test)]
        let panic_unit = std::mem::take(&mut self.test_panic).then_some(self.slots.len() - 1);
        // A unit that panics (a device bug) is caught here: the step ends
        // with an internal error and the other units are told to stop.
        let work = |unit: usize, slot: &mut Slot, tlb: &mut Tlb| -> Option<StepStats> {
            let run = || {
                #[cfg(test)]
                if panic_unit == Some(unit) {
                    panic!("compute unit {unit}: panic requested by a test");
                }
                let km = KernelMemory::new(
                    GpuMemory::new(mem, tlb, space)
                        .with_poison(poison)
                        .with_tap(tap),
                    mem,
                );
                let kernel = Kernel {
                    module,
                    launch,
                    code,
                };
                run_unit(slot, &km, &kernel, total, &next, &stop, &stops)
            };
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)) {
                Ok(st) => Some(st),
                Err(payload) => {
                    stop.store(true, Ordering::Relaxed);
                    log::error!(
                        "compute unit {unit}: internal error: {}",
                        panic_message(payload.as_ref())
                    );
                    None
                }
            }
        };
        let mut stats = StepStats::default();
        let mut failed = false;
        if self.slots.len() == 1 {
            if let (Some(slot), Some(tlb)) = (self.slots.first_mut(), tlbs.first_mut()) {
                match work(0, slot, tlb) {
                    Some(st) => stats = st,
                    None => failed = true,
                }
            }
        } else {
            std::thread::scope(|s| {
                let work = &work;
                let handles: Vec<_> = self
                    .slots
                    .iter_mut()
                    .zip(tlbs.iter_mut())
                    .enumerate()
                    .map(|(unit, (slot, tlb))| s.spawn(move || work(unit, slot, tlb)))
                    .collect();
                for h in handles {
                    match h.join() {
                        Ok(Some(st)) => {
                            stats.workgroups += st.workgroups;
                            stats.warp_instructions += st.warp_instructions;
                            stats.lane_ops += st.lane_ops;
                            stats.cycles += st.cycles;
                        }
                        Ok(None) | Err(_) => failed = true,
                    }
                }
            });
        }
        if failed {
            // The units' state is not to be trusted: the dispatch ends.
            return (StepEnd::Internal, stats);
        }
        self.next = next.into_inner().min(total);
        let stops = stops.into_inner().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, end)) = stops.iter().min_by_key(|(i, _)| *i) {
            return (*end, stats);
        }
        let busy = self.slots.iter().any(|s| s.current.is_some());
        if self.next >= total && !busy {
            (StepEnd::Done, stats)
        } else {
            (StepEnd::Progress, stats)
        }
    }
}

/// The text of a panic's payload, for the log.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

/// What a kernel fault becomes.
fn fault_end(f: &Fault, mmu: Option<MmuFault>) -> StepEnd {
    let pc = f.pc;
    match f.kind {
        FaultKind::Global(m) if m.reason != MemFaultReason::Misaligned => match mmu {
            Some(fault) => StepEnd::Fault {
                fault,
                lane_pc: u64::from(f.warp * 32 + f.lane) | u64::from(pc) << 32,
            },
            None => StepEnd::Error {
                code: EngineError::BadOperand,
                pc,
            },
        },
        FaultKind::Global(_) => StepEnd::Error {
            code: EngineError::Misaligned,
            pc,
        },
        FaultKind::Shared(_) | FaultKind::BarrierDivergence { .. } | FaultKind::BadWorkgroup => {
            StepEnd::Error {
                code: EngineError::BadOperand,
                pc,
            }
        }
    }
}

/// What a compute unit runs: the module, the launch and the kernel's
/// native code, if any.
struct Kernel<'a> {
    module: &'a Arc<Module>,
    launch: &'a Arc<Launch>,
    code: &'a Option<Arc<JitKernel>>,
}

/// One compute unit's share of a step.
fn run_unit(
    slot: &mut Slot,
    km: &KernelMemory<'_>,
    kernel: &Kernel<'_>,
    total: u64,
    next: &AtomicU64,
    stop: &AtomicBool,
    stops: &Mutex<Vec<Stop>>,
) -> StepStats {
    let mut st = StepStats::default();
    let record = |i: u64, end: StepEnd| {
        stops
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((i, end));
        stop.store(true, Ordering::Relaxed);
    };
    while st.warp_instructions < STEP_BUDGET && !stop.load(Ordering::Relaxed) {
        let i = match slot.current {
            Some(i) => i,
            None => {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    break;
                }
                let wg = kernel.launch.workgroup_id(i);
                let started = match slot.exec.as_mut() {
                    Some(e) => e.reset(wg).map(|()| {
                        // Code compiled meanwhile runs this workgroup.
                        if kernel.code.is_some() && !slot.native {
                            slot.native = e.set_jit(kernel.code.clone());
                        }
                    }),
                    None => WorkgroupExec::new_shared(
                        Arc::clone(kernel.module),
                        Arc::clone(kernel.launch),
                        wg,
                    )
                    .map(|mut e| {
                        slot.native = kernel.code.is_some() && e.set_jit(kernel.code.clone());
                        slot.exec = Some(e);
                    }),
                };
                if let Err(f) = started {
                    record(i, fault_end(&f, None));
                    break;
                }
                slot.current = Some(i);
                i
            }
        };
        let Some(e) = slot.exec.as_mut() else { break };
        let before = e.stats();
        let r = e.run(
            km,
            Limits {
                budget: STEP_BUDGET - st.warp_instructions,
                cancel: Some(stop),
            },
        );
        let after = e.stats();
        st.warp_instructions += after.warp_instructions - before.warp_instructions;
        st.lane_ops += after.thread_instructions - before.thread_instructions;
        match r {
            Ok(Outcome::Completed) => {
                st.workgroups += 1;
                st.cycles += e.cycles();
                slot.current = None;
            }
            Ok(Outcome::Preempted) => break,
            Ok(Outcome::Cancelled) => {
                slot.current = None;
                break;
            }
            Ok(Outcome::Trapped(t)) => {
                slot.current = None;
                record(
                    i,
                    StepEnd::Error {
                        code: EngineError::Trap,
                        pc: t.pc,
                    },
                );
                break;
            }
            Err(f) => {
                slot.current = None;
                record(i, fault_end(&f, km.take_fault()));
                break;
            }
        }
    }
    st
}

/// Checks that the compute engine executes `p`.
pub fn check_packet(p: &Packet) -> Result<(), EngineError> {
    match p {
        Packet::Copy { .. } | Packet::Copy2d { .. } | Packet::Fill { .. } => {
            Err(EngineError::WrongEngine)
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vgpu_hwif::packet::Copy2dPacket;

    /// Which engine runs which packet: the copy engine refuses
    /// `DISPATCH`, the compute engine the copy packets; both run the rest.
    #[test]
    fn each_engine_runs_its_packets() {
        use super::super::copy_engine;
        let dispatch = Packet::Dispatch(DispatchPacket {
            module_va: 0,
            module_size: 4,
            kernel: 0,
            args_va: 0,
            args_size: 0,
            grid: [1; 3],
            wg: [1; 3],
            shared_size: 0,
        });
        let copy = Packet::Copy {
            src: 0,
            dst: 0,
            size: 1,
        };
        let fill = Packet::Fill {
            dst: 0,
            size: 4,
            pattern: 0,
        };
        let copy_2d = Packet::Copy2d(Copy2dPacket {
            src: 0,
            dst: 0,
            src_pitch: 1,
            dst_pitch: 1,
            width: 1,
            height: 1,
        });
        let wrong = Err(EngineError::WrongEngine);
        for (p, on_copy, on_compute) in [
            (dispatch, wrong, Ok(())),
            (copy, Ok(()), wrong),
            (fill, Ok(()), wrong),
            (copy_2d, Ok(()), wrong),
            (Packet::Timestamp { va: 0 }, Ok(()), Ok(())),
            (Packet::Nop { words: 1 }, Ok(()), Ok(())),
        ] {
            assert_eq!(copy_engine::check_packet(&p), on_copy, "{p:?}");
            assert_eq!(check_packet(&p), on_compute, "{p:?}");
        }
    }
}
