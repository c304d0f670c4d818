//! Cranelift IR for one kernel: the code generator's state ([`Gen`]), the
//! warp's scalar state in SSA variables, dispatch, exits and interpreter
//! steps. `Gen`'s methods are spread over the files below this one by
//! concern: the blocks and their branches (`blocks.rs`), per-lane
//! instructions (`lanes.rs`), the scalar pass (`scalar.rs`), memory
//! (`memory.rs`, `shaped.rs`, `fused.rs`), carried registers (`carry.rs`)
//! and going on to the next warp (`chain.rs`). The analyses they read
//! (`analysis.rs`, `facts.rs`, `shape.rs`) sit beside `codegen/` and know
//! nothing of it.

mod blocks;
mod carry;
mod chain;
mod fused;
mod lanes;
mod memory;
mod scalar;
mod shaped;

use super::analysis;
use super::facts::{self, BlockFacts};
use super::runtime::{self, status, REG_BYTES};
use super::shape::Specials;
use super::{CompileError, Native};
use crate::exec::{Warp, QUANTUM};
use crate::inst::*;
use crate::module::Kernel;
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::types::{I32, I32X4, I64, I8X16};
use cranelift_codegen::ir::{
    self, AbiParam, AliasRegion, AliasRegionData, ConstantData, Endianness, InstBuilder,
    JumpTableData, MemFlagsData, Signature, Value,
};
use cranelift_codegen::settings::{self, Configurable};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Variable};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{default_libcall_names, Linkage, Module as _};
use std::collections::HashMap;
use std::mem::offset_of;

/// Chunks of 4 lanes in a warp.
const CHUNKS: usize = WARP_SIZE / 4;

/// What a load or store reaches. Every access is non-trapping (every
/// address is valid, see `runtime.rs`); each kind is its own alias region
/// (they are distinct allocations), so that Cranelift may forward a stored
/// register to a later load of it and keep loads of one kind across stores
/// of another. A helper call is a fence for all of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mem {
    /// The scalar fields of `Ctx` that do not change during a call
    /// (pointers, launch geometry): loaded once, anywhere.
    CtxFixed,
    /// The fields of `Ctx` the generated code writes.
    Ctx,
    /// The scalar fields of the warp.
    Warp,
    /// The register file.
    Regs,
    /// Thread ids, kernel arguments and the constant table: read-only for
    /// the whole call, but loaded where used (hoisted to the function's
    /// entry, vectors would be spilled there on every call).
    Fixed,
    /// The software TLB entries (refilled by helpers).
    Tlb,
    /// Shared memory.
    Shared,
    /// Global memory through a TLB entry.
    Global,
}

const MEM_KINDS: usize = 8;

/// Offset of a `Ctx` field.
macro_rules! cx {
    ($f:ident) => {
        std::mem::offset_of!($crate::jit::runtime::Ctx, $f) as i32
    };
}
use cx;

/// Compiles kernel `k` of `module`; never panics (a failure of the code
/// generator is a fallback reason).
pub(crate) fn compile_kernel(
    code: &[Instruction],
    k: &Kernel,
    wg: Option<[u32; 3]>,
) -> Result<Native, CompileError> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| compile(code, k, wg))) {
        Ok(r) => r,
        Err(_) => Err(CompileError::Panicked),
    }
}

fn compile(code: &[Instruction], k: &Kernel, wg: Option<[u32; 3]>) -> Result<Native, CompileError> {
    let mut fb = settings::builder();
    let set = |fb: &mut settings::Builder, name: &'static str, v: &str| {
        fb.set(name, v).map_err(|e| CompileError::Setting {
            name,
            reason: e.to_string(),
        })
    };
    set(&mut fb, "opt_level", "speed")?;
    set(&mut fb, "use_colocated_libcalls", "false")?;
    set(&mut fb, "is_pic", "false")?;
    // The differential tests check the generated code's behaviour; the IR
    // verifier would only add compile time.
    set(&mut fb, "enable_verifier", "false")?;
    let isa = cranelift_native::builder()
        .map_err(|e| CompileError::HostIsa(e.to_string()))?
        .finish(settings::Flags::new(fb))
        .map_err(|e| CompileError::HostIsa(e.to_string()))?;
    let fma = cfg!(target_arch = "aarch64")
        || isa
            .isa_flags()
            .iter()
            .any(|f| f.name == "has_fma" && f.as_bool() == Some(true));
    let mut jm = JITModule::new(JITBuilder::with_isa(isa, default_libcall_names()));
    let mut cctx = jm.make_context();
    let ptr = jm.target_config().pointer_type();
    let call_conv = jm.target_config().default_call_conv;
    cctx.func.signature.params.push(AbiParam::new(ptr));
    cctx.func.signature.returns.push(AbiParam::new(I32));
    let blocks = analysis::blocks(code, k);
    let sp = Specials::new(wg);
    let nregs = k.regs as usize;
    let facts = facts::analyse(code, (k.entry, k.len), nregs, &blocks, &sp, fma);
    let info = KernelInfo {
        code,
        start: k.entry,
        len: k.len,
        blocks: &blocks,
        live: crate::regflow::live_in(code, k.entry, k.len, nregs)
            .unwrap_or_else(|| vec![u64::MAX; k.len as usize]),
        used_preds: (k.entry..k.entry + k.len)
            .filter_map(|pc| code.get(pc as usize))
            .fold(0, |m, i| m | analysis::preds_used(i)),
        sp,
        facts,
        ptr,
        fma,
    };
    let mut fctx = FunctionBuilderContext::new();
    let frontend = jm.target_config();
    let consts;
    let fused_runs;
    let carried_loops;
    let shaped_edges;
    {
        let b = FunctionBuilder::new(&mut cctx.func, &mut fctx);
        let mut g = Gen::new(b, info, analysis::sites(code, k), call_conv);
        g.emit()?;
        consts = std::mem::take(&mut g.mem.consts);
        fused_runs = g.mem.fused_runs;
        carried_loops = g.ssa.carried_loops;
        shaped_edges = g.ssa.shaped_edges;
        g.b.seal_all_blocks();
        g.b.finalize(frontend);
    }
    let id = jm
        .declare_function("kernel", Linkage::Local, &cctx.func.signature)
        .map_err(|e| CompileError::Declare(e.to_string()))?;
    // For work on the code generator: the machine code of every compile
    // on standard error.
    cctx.set_disasm(std::env::var_os("VGPU_JIT_DISASM").is_some());
    jm.define_function(id, &mut cctx)
        .map_err(|e| CompileError::Compile(e.to_string()))?;
    if let Some(v) = cctx.compiled_code().and_then(|c| c.vcode.as_ref()) {
        eprintln!("{v}");
    }
    let code_len = cctx.compiled_code().map_or(0, |c| c.code_buffer().len());
    jm.clear_context(&mut cctx);
    jm.finalize_definitions()
        .map_err(|e| CompileError::Finalize(e.to_string()))?;
    let code = jm.get_finalized_function(id);
    // SAFETY: `code` is the finalized function just defined with the
    // signature `(ptr) -> i32` under the host's default C calling
    // convention, which is `KernelFn`.
    let entry = unsafe { std::mem::transmute::<*const u8, runtime::KernelFn>(code) };
    if std::env::var_os("VGPU_JIT_PERFMAP").is_some() {
        perf_map(code, code_len, &k.name, wg);
    }
    Ok(Native {
        entry,
        _code: runtime::CodeMemory::new(jm),
        consts: consts.into_iter().map(runtime::Vector).collect(),
        fused_runs,
        carried_loops,
        shaped_edges,
    })
}

/// For profiling generated code (`VGPU_JIT_PERFMAP=1`): names the code in
/// `/tmp/perf-PID.map`, which `perf report` reads, and writes its bytes to
/// `/tmp/vgpu-jit-PID-ADDR.bin` for `objdump -D -b binary -m i386:x86-64
/// --adjust-vma=ADDR`.
fn perf_map(code: *const u8, len: usize, name: &str, wg: Option<[u32; 3]>) {
    use std::io::Write;
    let pid = std::process::id();
    let shape = wg.map_or_else(
        || "any".to_string(),
        |w| format!("{}x{}x{}", w[0], w[1], w[2]),
    );
    let line = format!("{:x} {len:x} vgpu-jit:{name}:{shape}\n", code as usize);
    let map = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(format!("/tmp/perf-{pid}.map"));
    if let Ok(mut f) = map {
        let _ = f.write_all(line.as_bytes());
    }
    // SAFETY: `code` points at the `len` bytes of a finalized function,
    // which stay mapped while the module that owns them lives (past this
    // call).
    let bytes = unsafe { std::slice::from_raw_parts(code, len) };
    let _ = std::fs::write(
        format!("/tmp/vgpu-jit-{pid}-{:x}.bin", code as usize),
        bytes,
    );
}

// The thread-instruction word of `WarpVars::v_counts` holds a call's count.
const _: () = assert!(QUANTUM * WARP_SIZE as u64 <= u32::MAX as u64);

/// The code generator's state for one kernel, by concern. Its methods
/// are spread over the files below this one.
struct Gen<'a, 'b> {
    b: FunctionBuilder<'b>,
    /// The kernel and the host, known before any code is emitted.
    k: KernelInfo<'a>,
    /// The current warp's scalar state in SSA variables.
    warp: WarpVars,
    /// Where loads and stores go: the context, the kernel's pointers,
    /// alias regions, TLB sites, the constant table (`memory.rs`).
    mem: memory::Memory,
    /// The native blocks and the jumps between them (`blocks.rs`).
    flow: blocks::Flow,
    /// Registers held in SSA values instead of the register file across
    /// an edge (`carry.rs`).
    ssa: carry::SsaRegs,
}

/// What the code generator knows of the kernel and the host before it
/// emits anything.
struct KernelInfo<'a> {
    code: &'a [Instruction],
    /// The kernel's first instruction and its length.
    start: u32,
    len: u32,
    blocks: &'a analysis::Blocks,
    /// Per instruction of the kernel: the registers live before it
    /// (`regflow::live_in`; all if unknown).
    live: Vec<u64>,
    /// Bit `p`: the kernel uses predicate `p` (the others never change
    /// and are neither loaded nor written back).
    used_preds: u8,
    /// The shapes of the special registers (the launch's workgroup shape).
    sp: Specials,
    /// Register facts at block starts.
    facts: BlockFacts,
    /// The host's pointer type.
    ptr: ir::Type,
    /// Whether the host has fused multiply-add.
    fma: bool,
}

/// The current warp's state in SSA variables, stored to the warp where
/// the interpreter or the scheduler takes over.
struct WarpVars {
    /// The current warp's register file, state and thread ids (the code
    /// goes on from warp to warp: `emit_chain`).
    v_regs: Variable,
    v_warp: Variable,
    v_tids: Variable,
    v_active: Variable,
    v_next_min: Variable,
    v_clock: Variable,
    v_pc: Variable,
    v_remaining: Variable,
    /// The current warp's counters in this call: warp instructions run
    /// inline in the low word, thread instructions in the high word (one
    /// add per block for both; a warp runs at most `QUANTUM` instructions
    /// per call, so neither word overflows).
    v_counts: Variable,
    v_preds: [Variable; 7],
}

impl<'a, 'b> Gen<'a, 'b> {
    fn new(
        mut b: FunctionBuilder<'b>,
        k: KernelInfo<'a>,
        sites: HashMap<u32, u32>,
        cc: cranelift_codegen::isa::CallConv,
    ) -> Self {
        let ptr = k.ptr;
        let mut sig = |params: &[ir::Type], ret: Option<ir::Type>| {
            let mut s = Signature::new(cc);
            s.params.extend(params.iter().map(|&t| AbiParam::new(t)));
            s.returns.extend(ret.map(AbiParam::new));
            b.import_signature(s)
        };
        let sig_step = sig(&[ptr], Some(I32));
        let sig_mem = sig(&[ptr, I32], Some(I32));
        let sig_diverge = sig(&[ptr, I32], None);
        let sig_resched = sig(&[ptr], None);
        let sig_refill = sig(&[ptr, I32, I64], Some(I32));
        let entry = b.create_block();
        b.append_block_params_for_function_params(entry);
        b.switch_to_block(entry);
        let ctx = b.block_params(entry)[0];
        let regions = std::array::from_fn(|i| {
            b.func.dfg.alias_regions.insert(AliasRegionData {
                user_id: i as u32,
                description: "vgpu".into(),
            })
        });
        let fixed = mem_flags(&regions, Mem::CtxFixed);
        let ld = |b: &mut FunctionBuilder, off| b.ins().load(ptr, fixed, ctx, off);
        // The warp's pointers change when the code goes on to the next warp.
        let per_warp = mem_flags(&regions, Mem::Ctx);
        let regs = b.ins().load(ptr, per_warp, ctx, cx!(regs));
        let warp = b.ins().load(ptr, per_warp, ctx, cx!(warp));
        let tids = b.ins().load(ptr, per_warp, ctx, cx!(tids));
        let args = ld(&mut b, cx!(args));
        let shared = ld(&mut b, cx!(shared));
        let cbase = ld(&mut b, cx!(consts));
        let v_regs = b.declare_var(ptr);
        let v_warp = b.declare_var(ptr);
        let v_tids = b.declare_var(ptr);
        b.def_var(v_regs, regs);
        b.def_var(v_warp, warp);
        b.def_var(v_tids, tids);
        let warp = WarpVars {
            v_regs,
            v_warp,
            v_tids,
            v_active: b.declare_var(I32),
            v_next_min: b.declare_var(I32),
            v_clock: b.declare_var(I64),
            v_pc: b.declare_var(I32),
            v_remaining: b.declare_var(I64),
            v_counts: b.declare_var(I64),
            v_preds: std::array::from_fn(|_| b.declare_var(I32)),
        };
        let mut heads = HashMap::new();
        for &(s, _) in &k.blocks.list {
            heads.insert(s, b.create_block());
        }
        let dispatch = b.create_block();
        let chain = b.create_block();
        let exit = b.create_block();
        b.append_block_param(exit, I32);
        let exit_nosync = b.create_block();
        b.append_block_param(exit_nosync, I32);
        let (v_remaining, v_counts) = (warp.v_remaining, warp.v_counts);
        let mut g = Gen {
            b,
            k,
            warp,
            mem: memory::Memory {
                ctx,
                args,
                shared,
                cbase,
                regions,
                sites,
                consts: Vec::new(),
                const_ix: HashMap::new(),
                sig_mem,
                sig_refill,
                fused_runs: 0,
            },
            flow: blocks::Flow {
                heads,
                hot_heads: HashMap::new(),
                dispatch,
                chain,
                exit,
                exit_nosync,
                sig_step,
                sig_diverge,
                sig_resched,
                full: false,
            },
            ssa: carry::SsaRegs::default(),
        };
        g.load_full();
        let f = g.mf(Mem::Ctx);
        let rem = g.b.ins().load(I64, f, ctx, cx!(budget));
        g.b.def_var(v_remaining, rem);
        let z = g.b.ins().iconst(I64, 0);
        g.b.def_var(v_counts, z);
        g.b.ins().jump(dispatch, &[]);
        g
    }

    fn emit(&mut self) -> Result<(), CompileError> {
        for i in 0..self.k.blocks.list.len() {
            let s = self.k.blocks.list[i].0;
            // A block with no chain facts of its own still gets a hot
            // version if it takes shaped registers as parameters.
            if self.k.facts.hot.get(i).is_some_and(Option::is_none) {
                let cold = self.k.facts.cold.get(i).cloned().unwrap_or_default();
                if !self.shaped_params(i, &cold).is_empty() {
                    self.k.facts.hot[i] = Some(cold);
                }
            }
            if self.k.facts.hot.get(i).is_some_and(Option::is_some) {
                let h = self.b.create_block();
                self.flow.hot_heads.insert(s, h);
                let hot = self.hot_facts(i);
                let params = self.shaped_params(i, &hot);
                if !params.is_empty() {
                    self.ssa.hot_params.insert(s, params);
                    self.add_hot_params(s, h);
                }
            }
        }
        self.emit_dispatch();
        self.emit_chain();
        self.emit_exits();
        for i in 0..self.k.blocks.list.len() {
            self.emit_block(i)?;
        }
        Ok(())
    }

    // --- small helpers -------------------------------------------------

    /// The current warp's register file.
    fn regs(&mut self) -> Value {
        self.b.use_var(self.warp.v_regs)
    }

    /// The current warp's index (changes when the code goes on to the next
    /// warp, unlike the launch's geometry).
    fn warp_index(&mut self) -> Value {
        let f = self.mf(Mem::Ctx);
        self.b.ins().load(I32, f, self.mem.ctx, cx!(warp_index))
    }

    /// The current warp's thread ids.
    fn tids(&mut self) -> Value {
        self.b.use_var(self.warp.v_tids)
    }

    /// The registers (of `r0..r63`) live before the instruction at `pc`.
    fn live_at(&self, pc: u32) -> u64 {
        pc.checked_sub(self.k.start)
            .and_then(|i| self.k.live.get(i as usize))
            .copied()
            .unwrap_or(u64::MAX)
    }

    fn c32(&mut self, v: u32) -> Value {
        self.b.ins().iconst(I32, v as i64)
    }

    fn c64(&mut self, v: u64) -> Value {
        self.b.ins().iconst(I64, v as i64)
    }

    /// Flags of an access of kind `m`.
    fn mf(&self, m: Mem) -> MemFlagsData {
        mem_flags(&self.mem.regions, m)
    }

    /// A 4 × u32 constant vector, loaded from the constant table where it
    /// is used (a `vconst` would be hoisted to the function's entry and
    /// spilled there, on every call).
    fn vconst(&mut self, v: [u32; 4]) -> Value {
        let n = self.mem.consts.len() as u32;
        let i = *self.mem.const_ix.entry(v).or_insert(n);
        if i == n {
            self.mem.consts.push(v);
        }
        let f = self.mf(Mem::Fixed).with_aligned();
        self.b.ins().load(I32X4, f, self.mem.cbase, 16 * i as i32)
    }

    fn vsplat(&mut self, v: u32) -> Value {
        self.vconst([v; 4])
    }

    /// Reinterprets a vector (little-endian lanes).
    fn cast(&mut self, ty: ir::Type, v: Value) -> Value {
        if self.b.func.dfg.value_type(v) == ty {
            return v;
        }
        let f = MemFlagsData::new().with_endianness(Endianness::Little);
        self.b.ins().bitcast(ty, f, v)
    }

    /// Byte shuffle of two vectors viewed as 16 bytes each.
    fn shuffle(&mut self, ty: ir::Type, a: Value, b: Value, mask: [u8; 16]) -> Value {
        let a = self.cast(I8X16, a);
        let b = self.cast(I8X16, b);
        let imm = self
            .b
            .func
            .dfg
            .immediates
            .push(ConstantData::from(&mask[..]));
        let r = self.b.ins().shuffle(a, b, imm);
        self.cast(ty, r)
    }

    /// Register `r`, lanes `4c..4c + 4`, from the register file.
    fn load_reg(&mut self, r: u8, c: usize) -> Value {
        let off = r as i32 * REG_BYTES + 16 * c as i32;
        let f = self.mf(Mem::Regs);
        let regs = self.regs();
        self.b.ins().load(I32X4, f, regs, off)
    }

    fn store_reg(&mut self, r: u8, c: usize, v: Value) {
        let off = r as i32 * REG_BYTES + 16 * c as i32;
        let f = self.mf(Mem::Regs);
        let regs = self.regs();
        self.b.ins().store(f, v, regs, off);
    }

    /// All-ones in the lanes `4c..4c + 4` whose bit is set in the scalar
    /// mask `m`.
    fn mask_vec(&mut self, m: Value, c: usize) -> Value {
        let bits: [u32; 4] = std::array::from_fn(|l| 1u32 << (4 * c + l));
        let s = self.b.ins().splat(I32X4, m);
        let k = self.vconst(bits);
        let x = self.b.ins().band(s, k);
        self.b.ins().icmp(IntCC::Equal, x, k)
    }

    /// The scalar mask of guard `g` within the active group.
    fn guard_mask(&mut self, g: Guard) -> Value {
        let active = if self.flow.full {
            self.c32(u32::MAX)
        } else {
            self.b.use_var(self.warp.v_active)
        };
        if g.pred == Pred::TRUE {
            if g.neg {
                return self.c32(0);
            }
            return active;
        }
        let p = self
            .b
            .use_var(self.warp.v_preds[(g.pred.0 as usize).min(6)]);
        let p = if g.neg { self.b.ins().bnot(p) } else { p };
        self.b.ins().band(active, p)
    }

    /// Counts the lanes of `m` as thread instructions (the high word of
    /// the counters, `v_counts`).
    fn add_threads(&mut self, m: Value) {
        let t = self.b.use_var(self.warp.v_counts);
        let t = match self.const_of(m) {
            Some(c) => self.b.ins().iadd_imm_s(t, (c.count_ones() as i64) << 32),
            None => {
                let n = self.b.ins().popcnt(m);
                let n = self.b.ins().uextend(I64, n);
                let n = self.b.ins().ishl_imm_s(n, 32);
                self.b.ins().iadd(t, n)
            }
        };
        self.b.def_var(self.warp.v_counts, t);
    }

    /// The value of an `iconst`.
    fn const_of(&self, v: Value) -> Option<u32> {
        let dfg = &self.b.func.dfg;
        let inst = dfg.value_def(v).inst()?;
        match dfg.insts[inst] {
            ir::InstructionData::UnaryImm { imm, .. } => Some(imm.bits() as u32),
            _ => None,
        }
    }

    /// Counts `n` warp instructions (the low word of `v_counts`).
    fn add_jwarp(&mut self, n: u64) {
        if n == 0 {
            return;
        }
        let t = self.b.use_var(self.warp.v_counts);
        let t = self.b.ins().iadd_imm_s(t, n as i64);
        self.b.def_var(self.warp.v_counts, t);
    }

    /// The warp and thread instructions counted in `v_counts`.
    fn counts(&mut self) -> [Value; 2] {
        let t = self.b.use_var(self.warp.v_counts);
        let w = self.b.ins().band_imm_s(t, u32::MAX as i64);
        let th = self.b.ins().ushr_imm_s(t, 32);
        [w, th]
    }

    fn warp_field(&mut self, ty: ir::Type, off: usize) -> Value {
        let f = self.mf(Mem::Warp);
        let w = self.b.use_var(self.warp.v_warp);
        self.b.ins().load(ty, f, w, off as i32)
    }

    fn set_warp_field(&mut self, off: usize, v: Value) {
        let f = self.mf(Mem::Warp);
        let w = self.b.use_var(self.warp.v_warp);
        self.b.ins().store(f, v, w, off as i32);
    }

    // --- the warp's scalar state ---------------------------------------

    /// Active group, next_min and predicates from the warp (after an
    /// interpreter step).
    fn reload(&mut self) {
        let a = self.warp_field(I32, offset_of!(Warp, active));
        self.b.def_var(self.warp.v_active, a);
        let n = self.warp_field(I32, offset_of!(Warp, next_min));
        self.b.def_var(self.warp.v_next_min, n);
        for p in 0..7 {
            if self.k.used_preds >> p & 1 != 0 {
                let v = self.warp_field(I32, offset_of!(Warp, preds) + 4 * p);
                self.b.def_var(self.warp.v_preds[p], v);
            }
        }
    }

    /// Everything, pc and clock included.
    fn load_full(&mut self) {
        self.reload();
        let pc = self.warp_field(I32, offset_of!(Warp, pc));
        self.b.def_var(self.warp.v_pc, pc);
        let c = self.warp_field(I64, offset_of!(Warp, clock));
        self.b.def_var(self.warp.v_clock, c);
    }

    /// Writes the variables to the warp, with `pc` and `clock`.
    fn store_state(&mut self, pc: Value, clock: Value) {
        self.set_warp_field(offset_of!(Warp, pc), pc);
        self.set_warp_field(offset_of!(Warp, clock), clock);
        let a = self.b.use_var(self.warp.v_active);
        self.set_warp_field(offset_of!(Warp, active), a);
        let n = self.b.use_var(self.warp.v_next_min);
        self.set_warp_field(offset_of!(Warp, next_min), n);
        for p in 0..7 {
            if self.k.used_preds >> p & 1 != 0 {
                let v = self.b.use_var(self.warp.v_preds[p]);
                self.set_warp_field(offset_of!(Warp, preds) + 4 * p, v);
            }
        }
    }

    fn helper(&mut self, off: i32) -> Value {
        let f = self.mf(Mem::CtxFixed);
        self.b.ins().load(self.k.ptr, f, self.mem.ctx, off)
    }

    // --- dispatch and exits --------------------------------------------

    fn emit_dispatch(&mut self) {
        self.b.switch_to_block(self.flow.dispatch);
        let active = self.b.use_var(self.warp.v_active);
        let go = self.b.create_block();
        self.b.ins().brif(active, go, &[], self.flow.chain, &[]);
        self.b.switch_to_block(go);
        let pc = self.b.use_var(self.warp.v_pc);
        let start = self.c32(self.k.start);
        let idx = self.b.ins().isub(pc, start);
        let mid = self.b.create_block();
        let mut table = Vec::with_capacity(self.k.len as usize);
        for i in 0..self.k.len {
            let target = self
                .flow
                .heads
                .get(&(self.k.start + i))
                .copied()
                .unwrap_or(mid);
            table.push(self.b.func.dfg.block_call(target, &[]));
        }
        let def = self.b.func.dfg.block_call(mid, &[]);
        let jt = self.b.create_jump_table(JumpTableData::new(def, &table));
        self.b.ins().br_table(idx, jt);
        self.b.switch_to_block(mid);
        let st = self.c32(status::MIDBLOCK);
        self.b.ins().jump(self.flow.exit, &[st.into()]);
    }

    fn write_counters(&mut self) {
        let r = self.b.use_var(self.warp.v_remaining);
        let f = self.mf(Mem::Ctx);
        self.b.ins().store(f, r, self.mem.ctx, cx!(remaining));
        let [w, t] = self.counts();
        self.b.ins().store(f, w, self.mem.ctx, cx!(jit_warp));
        self.b.ins().store(f, t, self.mem.ctx, cx!(jit_threads));
    }

    fn emit_exits(&mut self) {
        self.b.switch_to_block(self.flow.exit);
        let st = self.b.block_params(self.flow.exit)[0];
        let pc = self.b.use_var(self.warp.v_pc);
        let clock = self.b.use_var(self.warp.v_clock);
        self.store_state(pc, clock);
        self.write_counters();
        self.b.ins().return_(&[st]);
        self.b.switch_to_block(self.flow.exit_nosync);
        let st = self.b.block_params(self.flow.exit_nosync)[0];
        self.write_counters();
        self.b.ins().return_(&[st]);
    }

    /// Reschedules (the interpreter's rule) with the warp at `pc`, then
    /// continues wherever the new active group is.
    fn reschedule_and_dispatch(&mut self, pc: Value, clock: Value) {
        self.b.def_var(self.warp.v_pc, pc);
        self.b.def_var(self.warp.v_clock, clock);
        self.store_state(pc, clock);
        let f = self.helper(cx!(reschedule));
        self.b
            .ins()
            .call_indirect(self.flow.sig_resched, f, &[self.mem.ctx]);
        self.load_full();
        self.b.ins().jump(self.flow.dispatch, &[]);
    }

    /// Moves the active group to `target` (a block start or the kernel's
    /// end): directly to its block, or through rescheduling when it
    /// reaches a waiting group.
    fn goto(&mut self, target: u32, clock: Value) {
        self.flush_pending();
        self.b.def_var(self.warp.v_clock, clock);
        let nm = self.b.use_var(self.warp.v_next_min);
        let t = self.c32(target);
        let meet = self.b.ins().icmp(IntCC::UnsignedGreaterThanOrEqual, t, nm);
        let resched = self.b.create_block();
        let direct = self.b.create_block();
        self.b.ins().brif(meet, resched, &[], direct, &[]);
        self.b.switch_to_block(resched);
        self.reschedule_and_dispatch(t, clock);
        self.b.switch_to_block(direct);
        match self.flow.heads.get(&target).copied() {
            Some(h) => {
                self.b.ins().jump(h, &[]);
            }
            None => {
                // Past the kernel's end: unreachable for validated kernels
                // (the last instruction is an unguarded exit, bra or trap);
                // the interpreter handles it as it does.
                self.b.def_var(self.warp.v_pc, t);
                let st = self.c32(status::MIDBLOCK);
                self.b.ins().jump(self.flow.exit, &[st.into()]);
            }
        }
    }

    /// An interpreter step of the instruction at `pc` (clock `clock`).
    /// Continues inline after it unless it is a `control` instruction
    /// (`bar`, `trap`: the step may have moved or regrouped the warp).
    fn step(&mut self, pc: u32, clock: Value, control: bool, mem: Option<u32>) {
        let pcv = self.c32(pc);
        self.store_state(pcv, clock);
        let r = match mem {
            None => {
                let f = self.helper(cx!(step));
                let call = self
                    .b
                    .ins()
                    .call_indirect(self.flow.sig_step, f, &[self.mem.ctx]);
                self.b.inst_results(call)[0]
            }
            Some(slot) => {
                let f = self.helper(cx!(mem_step));
                let s = self.c32(slot);
                let call = self
                    .b
                    .ins()
                    .call_indirect(self.mem.sig_mem, f, &[self.mem.ctx, s]);
                self.b.inst_results(call)[0]
            }
        };
        let cont = self.b.create_block();
        self.b
            .ins()
            .brif(r, self.flow.exit_nosync, &[r.into()], cont, &[]);
        self.b.switch_to_block(cont);
        if control {
            self.load_full();
            self.b.ins().jump(self.flow.dispatch, &[]);
            return;
        }
        self.reload();
        if self.flow.full {
            // A full warp stays full through a step of anything but a
            // control instruction; should it not, the scheduler decides.
            let active = self.b.use_var(self.warp.v_active);
            let ok = self.b.ins().icmp_imm_s(IntCC::Equal, active, -1);
            let (same, other) = (self.b.create_block(), self.b.create_block());
            self.b.ins().brif(ok, same, &[], other, &[]);
            self.b.switch_to_block(other);
            self.load_full();
            self.b.ins().jump(self.flow.dispatch, &[]);
            self.b.switch_to_block(same);
        }
    }
}

/// The flags of an access of kind `m` given the function's alias regions.
fn mem_flags(regions: &[AliasRegion; MEM_KINDS], m: Mem) -> MemFlagsData {
    let f = MemFlagsData::new()
        .with_notrap()
        .with_alias_region(Some(regions[m as usize]));
    match m {
        Mem::CtxFixed => f.with_readonly().with_can_move(),
        Mem::Fixed => f.with_readonly(),
        _ => f,
    }
}
