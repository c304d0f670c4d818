//! The JIT: kernels compiled to native code with Cranelift.
//!
//! A module is compiled once ([`JitModule::compile`], or through a
//! [`JitCache`] keyed by the module image), and each kernel again for the
//! workgroup shape of a launch when the first launch of that shape starts
//! ([`JitKernel::for_shape`]: thread ids have known lane offsets per
//! shape). A kernel's code is one native function that runs **one warp**
//! on exactly the state the interpreter uses (`exec::Warp`: registers as
//! `[u32; 32]` per register, predicate masks, per-lane PCs, the active
//! group, the clock). The compute unit's scheduler (warp rotation,
//! quantum, budget, cancel flag, barriers) stays the interpreter's
//! (`WorkgroupExec::schedule`); only the inner warp loop is replaced. So
//! the two engines are interchangeable at every `run` call: a workgroup
//! preempted on one resumes on the other.
//!
//! # Code shape
//!
//! The kernel's basic blocks (split after every `bra`, `exit`, `bar`,
//! `trap` and at every branch target) are native blocks (`blocks.rs`). A
//! block runs only if the warp's remaining instruction budget covers all
//! of it; otherwise the generated code returns and the interpreter runs
//! the exact remaining count, so budgets, `%clock`, preemption points and
//! statistics are the interpreter's to the instruction. Each block has a
//! version for any active group and versions for a full warp, which know
//! at compile time which registers are uniform or a uniform value plus
//! per-lane constants (`shape.rs`, `facts.rs`) and compute those as
//! scalars at the block's start (`scalar.rs`). Lane-local instructions
//! (ALU, fp32, conversions, comparisons, `sel`, `mov`, `s2r`, `ldarg`,
//! 64-bit address arithmetic) run in regions over the warp's eight 4-lane
//! chunks with registers in SIMD registers (`lanes.rs`); a region writes
//! back the registers it wrote that are still live (`regflow::live_in`: a
//! value no lane reads again before overwriting it is never stored), so
//! the register file holds every live value between regions. 32-bit
//! global loads and stores go through a software TLB entry per
//! instruction, checked inline, and 32-bit shared-memory accesses are
//! bounds-checked inline: once per half-warp (or warp) for a shaped
//! address (`shaped.rs`), lane by lane otherwise (`memory.rs`). In
//! full-warp code, shaped accesses and the lane-local instructions around
//! them run as one region once every access's conditions (and the absence
//! of overlaps that the chunk order would expose) are checked up front
//! (`fused.rs`).
//! Everything else — other widths, misses, atomics, shuffles, votes,
//! barriers, traps, the rarer ALU operations, and any block whose
//! run-time conditions fail — executes as interpreter steps on the same
//! state (`runtime.rs`), so it has the interpreter's semantics by
//! construction: faults keep their VA, lane and PC, a miss refills the TLB
//! entry from the memory's
//! [`GlobalMemory::direct_page`](crate::mem::GlobalMemory::direct_page).
//! Divergence follows the min-PC rule: a divergent branch or an exit
//! hands the active group to the interpreter's rescheduling, and the
//! generated code continues at the new group's block.

mod analysis;
mod codegen;
mod error;
mod facts;
mod runtime;
mod shape;

use crate::exec::{Fault, NativeCode, Warp, WarpStop, WorkgroupExec};
use crate::inst::Instruction;
use crate::mem::GlobalMemory;
use crate::module::{Kernel, Module};
use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, Mutex};

pub use error::CompileError;

/// Which engine runs kernels.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum JitMode {
    /// The interpreter only.
    Off,
    /// Native code where the host and the kernel allow it, the interpreter
    /// otherwise (the reason logged once per module).
    #[default]
    Auto,
    /// Native code required: tools fail, and the device refuses to start,
    /// where the host cannot run it; a kernel that falls back is logged as
    /// a warning.
    On,
}

impl JitMode {
    /// The name accepted by [`JitMode::from_str`].
    pub const fn name(self) -> &'static str {
        match self {
            JitMode::Off => "off",
            JitMode::Auto => "auto",
            JitMode::On => "on",
        }
    }
}

impl fmt::Display for JitMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A name [`JitMode::from_str`] does not know.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("'{0}' is not off, on or auto")]
pub struct JitModeError(pub String);

impl FromStr for JitMode {
    type Err = JitModeError;
    fn from_str(s: &str) -> Result<Self, JitModeError> {
        match s {
            "off" => Ok(JitMode::Off),
            "auto" => Ok(JitMode::Auto),
            "on" => Ok(JitMode::On),
            _ => Err(JitModeError(s.to_owned())),
        }
    }
}

/// Most instructions in a kernel the JIT compiles; longer kernels run on
/// the interpreter (compile time grows with the kernel, and a guest picks
/// the kernel).
pub const MAX_KERNEL_LEN: u32 = 4096;

/// Why the host cannot run native code, or `Ok`.
pub fn host_support() -> Result<(), &'static str> {
    runtime::host_support()
}

/// One kernel's native code, shared by every execution of it: code for
/// any workgroup shape, and code specialised for the shape of a launch
/// (compiled when a launch of that shape first runs, see
/// [`JitKernel::for_shape`]).
pub struct JitKernel {
    /// The code this value runs.
    native: Arc<Native>,
    /// The workgroup shape `native` is specialised for, if any.
    shape: Option<[u32; 3]>,
    /// The kernel's first instruction and length.
    start: u32,
    len: u32,
    /// Registers per thread the code was compiled for.
    regs: u32,
    /// Bit `pc - start`: a basic block starts at `pc`.
    block_starts: Arc<[u64]>,
    /// Global memory instructions inlined (one TLB entry each).
    sites: usize,
    /// What specialised code is compiled from, and what was compiled.
    source: Arc<Source>,
}

/// A kernel's instructions and the code specialised for each workgroup
/// shape so far. It holds the compiled code, not [`JitKernel`]s, which
/// hold it: no reference cycle keeps a kernel's code alive after the
/// module's last user dropped it.
struct Source {
    code: Arc<[Instruction]>,
    kernel: Kernel,
    shaped: Mutex<Vec<([u32; 3], Arc<Native>)>>,
}

/// Specialised variants kept per kernel (a guest picks the shapes).
const MAX_SHAPES: usize = 16;

/// One compiled function.
pub(crate) struct Native {
    /// The compiled function (`runtime::KernelFn`).
    entry: runtime::KernelFn,
    /// Keeps the code alive.
    _code: runtime::CodeMemory,
    /// The vector constants the code loads (`Ctx::consts`).
    consts: Box<[runtime::Vector]>,
    /// Runs of instructions with memory accesses compiled as one region
    /// (`fused.rs`), for tests.
    #[cfg_attr(not(test), allow(dead_code))]
    fused_runs: usize,
    /// Loops whose registers stay in SSA values across the back edge
    /// (`carry.rs`), for tests.
    #[cfg_attr(not(test), allow(dead_code))]
    carried_loops: usize,
    /// Jumps passing shaped registers to a hot version without writing
    /// them to the register file (`carry.rs`), for tests.
    #[cfg_attr(not(test), allow(dead_code))]
    shaped_edges: usize,
}

/// The software TLB of one execution: a direct page per inlined global
/// memory instruction, valid while the memory's `direct_epoch` stays the
/// one recorded (for one call when it is 0).
#[derive(Debug, Default)]
pub(crate) struct Pages {
    epoch: u64,
    tlb: Vec<runtime::Tlb>,
    /// The warps' pointers for the generated code (rebuilt by each call,
    /// kept for its allocation).
    chain: Vec<runtime::Chain>,
}

// SAFETY: the entries are addresses, dereferenced only by generated code
// on the thread that runs the execution, and only while the memory's epoch
// still vouches for them; that does not depend on the thread (the pages
// are shared memory, valid for every thread).
unsafe impl Send for Pages {}
// SAFETY: a shared reference gives no access through the addresses.
unsafe impl Sync for Pages {}

impl Pages {
    fn for_kernel(k: &JitKernel) -> Pages {
        Pages {
            epoch: 0,
            tlb: vec![runtime::Tlb::EMPTY; k.sites],
            chain: Vec::new(),
        }
    }
}

/// A kernel's code as one execution runs it: the code and the
/// execution's software TLB.
struct Runner {
    kernel: Arc<JitKernel>,
    pages: Pages,
}

impl WorkgroupExec<'_> {
    /// Runs the warps on `kernel`'s native code (compiled from this
    /// execution's kernel by [`JitModule::compile`]), or on the
    /// interpreter with `None`. Results are the same either way; the state
    /// may be switched between `run` calls. Refused (false) for the code of
    /// another kernel.
    pub fn set_jit(&mut self, kernel: Option<Arc<JitKernel>>) -> bool {
        if let Some(k) = &kernel {
            if !self.kernel().is_some_and(|m| k.matches(m)) {
                return false;
            }
        }
        // The code specialised for the launch's workgroup shape.
        let wg = self.launch().wg_size();
        let runner = kernel.map(|k| {
            let kernel = k.for_shape(wg);
            let pages = Pages::for_kernel(&kernel);
            Box::new(Runner { kernel, pages }) as Box<dyn NativeCode>
        });
        self.set_native(runner);
        true
    }
}

impl fmt::Debug for JitKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JitKernel")
            .field("start", &self.start)
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

impl JitKernel {
    /// The code of this kernel specialised for workgroups of `wg` threads:
    /// compiled on the first request for a shape (the kernel's other code
    /// if that fails, or when too many shapes were asked for).
    pub fn for_shape(self: &Arc<Self>, wg: [u32; 3]) -> Arc<JitKernel> {
        if self.shape == Some(wg) {
            return Arc::clone(self);
        }
        let src = &self.source;
        let mut shaped = src
            .shaped
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let with = |native: &Arc<Native>| {
            Arc::new(JitKernel {
                native: Arc::clone(native),
                shape: Some(wg),
                start: self.start,
                len: self.len,
                regs: self.regs,
                block_starts: Arc::clone(&self.block_starts),
                sites: self.sites,
                source: Arc::clone(&self.source),
            })
        };
        if let Some((_, native)) = shaped.iter().find(|(s, _)| *s == wg) {
            return with(native);
        }
        if shaped.len() >= MAX_SHAPES {
            return Arc::clone(self);
        }
        match codegen::compile_kernel(&src.code, &src.kernel, Some(wg)) {
            Ok(native) => {
                let native = Arc::new(native);
                shaped.push((wg, Arc::clone(&native)));
                with(&native)
            }
            Err(why) => {
                log::warn!(
                    "kernel {}: no code for workgroups of {wg:?}: {why}",
                    src.kernel.name
                );
                Arc::clone(self)
            }
        }
    }

    /// Whether this is the code of `k`.
    pub(crate) fn matches(&self, k: &Kernel) -> bool {
        k.entry == self.start && k.len == self.len && k.regs == self.regs
    }

    /// Whether a native block starts at `pc`.
    #[inline]
    pub(crate) fn is_block_start(&self, pc: u32) -> bool {
        let i = pc.wrapping_sub(self.start);
        i < self.len
            && self
                .block_starts
                .get((i / 64) as usize)
                .is_some_and(|w| w >> (i % 64) & 1 != 0)
    }
}

/// A module's native code: per kernel, its code or why it runs on the
/// interpreter.
pub struct JitModule {
    kernels: Vec<Result<Arc<JitKernel>, CompileError>>,
}

impl fmt::Debug for JitModule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JitModule")
            .field("kernels", &self.kernels.len())
            .finish()
    }
}

/// Why a module was not compiled at all.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum JitError {
    /// The host cannot run the generated code.
    #[error("the JIT cannot run on this host: {0}")]
    Unsupported(&'static str),
}

impl JitModule {
    /// Compiles every kernel of `module` (a validated module: the loader
    /// ran first). A kernel the JIT cannot compile keeps the reason and
    /// runs on the interpreter.
    pub fn compile(module: &Module) -> Result<JitModule, JitError> {
        host_support().map_err(JitError::Unsupported)?;
        let code: Arc<[Instruction]> = Arc::from(module.code());
        let kernels = module
            .kernels()
            .iter()
            .map(|k| {
                if k.len > MAX_KERNEL_LEN {
                    return Err(CompileError::TooLong(k.len));
                }
                let native = codegen::compile_kernel(&code, k, None)?;
                let blocks = analysis::blocks(&code, k);
                let sites = analysis::sites(&code, k).len();
                Ok(Arc::new(JitKernel {
                    native: Arc::new(native),
                    shape: None,
                    start: k.entry,
                    len: k.len,
                    regs: k.regs,
                    block_starts: blocks.starts.into(),
                    sites,
                    source: Arc::new(Source {
                        code: Arc::clone(&code),
                        kernel: k.clone(),
                        shaped: Mutex::new(Vec::new()),
                    }),
                }))
            })
            .collect();
        Ok(JitModule { kernels })
    }

    /// The native code of kernel `index`, or why it has none.
    pub fn kernel(&self, index: usize) -> Result<&Arc<JitKernel>, &CompileError> {
        match self.kernels.get(index) {
            Some(Ok(k)) => Ok(k),
            Some(Err(why)) => Err(why),
            None => Err(&CompileError::NoSuchKernel),
        }
    }

    /// Kernels that fall back to the interpreter: (index, reason).
    pub fn fallbacks(&self) -> impl Iterator<Item = (usize, &CompileError)> {
        self.kernels
            .iter()
            .enumerate()
            .filter_map(|(i, k)| k.as_ref().err().map(|e| (i, e)))
    }
}

/// Compiled modules by image, bounded: what a device keeps so that a module
/// dispatched again is not compiled again. Entries are matched on the
/// whole image (a hash only picks the bucket), so no image can reach
/// another's code.
#[derive(Debug)]
pub struct JitCache {
    inner: Mutex<CacheInner>,
    capacity: usize,
}

/// A module image and its compiled code.
type CacheEntry = (Arc<[u8]>, Arc<JitModule>);

#[derive(Debug, Default)]
struct CacheInner {
    by_hash: HashMap<u64, Vec<CacheEntry>>,
    /// Insertion order, for eviction.
    order: std::collections::VecDeque<(u64, Arc<[u8]>)>,
    /// Modules being compiled on threads of their own (image, result).
    pending: Vec<(Arc<[u8]>, Arc<Compiling>)>,
    compiled: u64,
}

/// A module compiled on a thread of its own
/// ([`JitCache::get_or_start`]): its result once there.
#[derive(Debug, Default)]
pub struct Compiling {
    done: std::sync::OnceLock<Result<Arc<JitModule>, JitError>>,
}

impl Compiling {
    /// The compiled module (or why it was not), once the compilation
    /// finished.
    pub fn result(&self) -> Option<&Result<Arc<JitModule>, JitError>> {
        self.done.get()
    }
}

/// What [`JitCache::get_or_start`] found.
#[derive(Debug)]
pub enum Lookup {
    /// The module's code.
    Ready(Arc<JitModule>),
    /// Its compilation runs; the kernels run on the interpreter meanwhile.
    Compiling(Arc<Compiling>),
    /// [`MAX_COMPILING`] other modules are being compiled: this one runs
    /// on the interpreter, and is compiled when asked for again later.
    Busy,
}

/// Compilations a cache runs at once: a guest that dispatches ever new
/// modules cannot make the device start threads without bound.
pub const MAX_COMPILING: usize = 2;

impl JitCache {
    /// A cache of at most `capacity` modules.
    pub fn new(capacity: usize) -> JitCache {
        JitCache {
            inner: Mutex::new(CacheInner::default()),
            capacity: capacity.max(1),
        }
    }

    /// Modules compiled since the cache was made (misses).
    pub fn compiled(&self) -> u64 {
        self.lock().compiled
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CacheInner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The native code of `module`, loaded from `image`: from the cache,
    /// else compiled (and kernels that fall back logged once, at info
    /// level, or warning under [`JitMode::On`]).
    pub fn get(
        &self,
        image: &[u8],
        module: &Module,
        mode: JitMode,
    ) -> Result<Arc<JitModule>, JitError> {
        let h = fnv1a(image);
        if let Some(m) = self.lock().by_hash.get(&h).and_then(|v| {
            v.iter()
                .find(|(img, _)| img[..] == *image)
                .map(|(_, m)| Arc::clone(m))
        }) {
            return Ok(m);
        }
        let m = Arc::new(JitModule::compile(module)?);
        log_fallbacks(module, &m, mode);
        let mut g = self.lock();
        g.compiled += 1;
        self.insert(&mut g, h, Arc::from(image), Arc::clone(&m));
        Ok(m)
    }

    /// The native code of `module`, loaded from `image`, from the cache;
    /// else its compilation, started on a thread of its own (or the one
    /// already running for that image), so that the caller goes on
    /// without waiting: a compiled module lasts a few ms to a few hundred
    /// of Cranelift, which a device's engine must not spend holding the
    /// engine. A finished compilation enters the cache at the next look-up.
    pub fn get_or_start(
        &self,
        image: &[u8],
        module: &Arc<Module>,
        mode: JitMode,
    ) -> Result<Lookup, JitError> {
        host_support().map_err(JitError::Unsupported)?;
        let h = fnv1a(image);
        let mut g = self.lock();
        if let Some(m) = g.by_hash.get(&h).and_then(|v| {
            v.iter()
                .find(|(img, _)| img[..] == *image)
                .map(|(_, m)| Arc::clone(m))
        }) {
            return Ok(Lookup::Ready(m));
        }
        if let Some(i) = g.pending.iter().position(|(img, _)| img[..] == *image) {
            let c = Arc::clone(&g.pending[i].1);
            let Some(r) = c.result() else {
                return Ok(Lookup::Compiling(c));
            };
            let (img, _) = g.pending.swap_remove(i);
            let m = r.clone()?;
            g.compiled += 1;
            self.insert(&mut g, h, img, Arc::clone(&m));
            return Ok(Lookup::Ready(m));
        }
        // Finished compilations of other images enter the cache.
        let mut i = 0;
        while i < g.pending.len() {
            match g.pending[i].1.result().cloned() {
                None => i += 1,
                Some(r) => {
                    let (img, _) = g.pending.swap_remove(i);
                    if let Ok(m) = r {
                        g.compiled += 1;
                        let ih = fnv1a(&img);
                        self.insert(&mut g, ih, img, m);
                    }
                }
            }
        }
        if g.pending.len() >= MAX_COMPILING {
            return Ok(Lookup::Busy);
        }
        let c = Arc::new(Compiling::default());
        let (done, owned) = (Arc::clone(&c), Arc::clone(module));
        let spawned = std::thread::Builder::new()
            .name("vgpu-jit-compile".into())
            .spawn(move || {
                let r = JitModule::compile(&owned).map(Arc::new);
                if let Ok(m) = &r {
                    log_fallbacks(&owned, m, mode);
                }
                let _ = done.done.set(r);
            });
        match spawned {
            Ok(_) => {
                g.pending.push((Arc::from(image), Arc::clone(&c)));
                Ok(Lookup::Compiling(c))
            }
            // No thread to be had: compiled here after all.
            Err(_) => {
                drop(g);
                self.get(image, module, mode).map(Lookup::Ready)
            }
        }
    }

    /// Adds `m` (compiled from `img`, hashed `h`), evicting the oldest
    /// entries beyond the capacity.
    fn insert(&self, g: &mut CacheInner, h: u64, img: Arc<[u8]>, m: Arc<JitModule>) {
        g.by_hash.entry(h).or_default().push((Arc::clone(&img), m));
        g.order.push_back((h, img));
        while g.order.len() > self.capacity {
            if let Some((oh, oimg)) = g.order.pop_front() {
                if let Some(v) = g.by_hash.get_mut(&oh) {
                    v.retain(|(i, _)| !Arc::ptr_eq(i, &oimg));
                    if v.is_empty() {
                        g.by_hash.remove(&oh);
                    }
                }
            }
        }
    }
}

/// Logs the kernels of a freshly compiled module that run on the
/// interpreter.
pub fn log_fallbacks(module: &Module, m: &JitModule, mode: JitMode) {
    for (i, why) in m.fallbacks() {
        let name = module.kernels().get(i).map_or("?", |k| k.name.as_str());
        if mode == JitMode::On {
            log::warn!("kernel {name}: runs on the interpreter: {why}");
        } else {
            log::info!("kernel {name}: runs on the interpreter: {why}");
        }
    }
}

fn fnv1a(b: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for &x in b {
        h = (h ^ x as u64).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// What the wrapper in `runtime.rs` hands back to the scheduler.
pub(crate) type WarpResult = Result<(u64, WarpStop), Fault>;

// The interpreter entry points the runtime uses, gathered here so the
// runtime's unsafe code names them once.
pub(crate) fn interp<M: GlobalMemory + ?Sized>(
    exec: &mut WorkgroupExec<'_>,
    w: usize,
    warp: &mut Warp,
    code: &[Instruction],
    mem: &M,
    quantum: u64,
) -> WarpResult {
    exec.run_warp_inner(w, warp, code, mem, quantum)
}

#[cfg(test)]
mod tests;
