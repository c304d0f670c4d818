//! Cranelift IR for one kernel: the blocks, the warp's scalar state in SSA
//! variables, budget checks, branches and exits, memory fast paths and
//! interpreter steps. Per-lane instructions are in `lanes.rs`.

use super::analysis::{self, Kind};
use super::runtime::{self, status, Ctx, Tlb, REG_BYTES};
use super::JitKernel;
use crate::exec::Warp;
use crate::inst::*;
use crate::module::{Kernel, Module};
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::types::{I32, I32X4, I64, I8X16};
use cranelift_codegen::ir::{
    self, AbiParam, AliasRegion, AliasRegionData, Block, ConstantData, Endianness, InstBuilder,
    JumpTableData, MemFlagsData, SigRef, Signature, Value,
};
use cranelift_codegen::settings::{self, Configurable};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Variable};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{default_libcall_names, Linkage, Module as _};
use std::collections::HashMap;
use std::mem::offset_of;
use std::sync::Arc;

/// Chunks of 4 lanes in a warp.
pub(super) const CHUNKS: usize = WARP_SIZE / 4;

/// What a load or store reaches. Every access is non-trapping (every
/// address is valid, see `runtime.rs`); each kind is its own alias region
/// (they are distinct allocations), so that Cranelift may forward a stored
/// register to a later load of it and keep loads of one kind across stores
/// of another. A helper call is a fence for all of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mem {
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
        offset_of!(Ctx, $f) as i32
    };
}

/// Compiles kernel `k` of `module`; never panics (a failure of the code
/// generator is a fallback reason).
pub(crate) fn compile_kernel(module: &Module, k: &Kernel) -> Result<JitKernel, String> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| compile(module, k))) {
        Ok(r) => r,
        Err(_) => Err("the code generator failed".to_string()),
    }
}

fn compile(module: &Module, k: &Kernel) -> Result<JitKernel, String> {
    let mut fb = settings::builder();
    let set = |fb: &mut settings::Builder, k: &str, v: &str| {
        fb.set(k, v)
            .map_err(|e| format!("cranelift setting {k}: {e}"))
    };
    set(&mut fb, "opt_level", "speed")?;
    set(&mut fb, "use_colocated_libcalls", "false")?;
    set(&mut fb, "is_pic", "false")?;
    // The differential tests check the generated code's behaviour; the IR
    // verifier would only add compile time.
    set(&mut fb, "enable_verifier", "false")?;
    let isa = cranelift_native::builder()
        .map_err(|e| format!("host ISA: {e}"))?
        .finish(settings::Flags::new(fb))
        .map_err(|e| format!("host ISA: {e}"))?;
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
    let blocks = analysis::blocks(module.code(), k);
    let mut fctx = FunctionBuilderContext::new();
    let frontend = jm.target_config();
    let (sites, consts);
    {
        let b = FunctionBuilder::new(&mut cctx.func, &mut fctx);
        let mut g = Gen::new(b, module.code(), k, &blocks, ptr, call_conv, fma);
        g.emit()?;
        sites = g.sites.len();
        consts = std::mem::take(&mut g.consts);
        g.b.seal_all_blocks();
        g.b.finalize(frontend);
    }
    let id = jm
        .declare_function("kernel", Linkage::Local, &cctx.func.signature)
        .map_err(|e| format!("declare: {e}"))?;
    jm.define_function(id, &mut cctx)
        .map_err(|e| format!("compile: {e}"))?;
    jm.clear_context(&mut cctx);
    jm.finalize_definitions()
        .map_err(|e| format!("finalize: {e}"))?;
    let code = jm.get_finalized_function(id);
    // SAFETY: `code` is the finalized function just defined with the
    // signature `(ptr) -> i32` under the host's default C calling
    // convention, which is `KernelFn`.
    let entry = unsafe { std::mem::transmute::<*const u8, runtime::KernelFn>(code) };
    Ok(JitKernel {
        entry,
        _code: Arc::new(runtime::CodeMemory::new(jm)),
        start: k.entry,
        len: k.len,
        regs: k.regs,
        block_starts: blocks.starts,
        sites,
        consts: consts.into_iter().map(runtime::Vector).collect(),
    })
}

/// The code generator's state for one kernel.
pub(super) struct Gen<'a, 'b> {
    pub(super) b: FunctionBuilder<'b>,
    code: &'a [Instruction],
    start: u32,
    len: u32,
    blocks: &'a analysis::Blocks,
    pub(super) ptr: ir::Type,
    pub(super) fma: bool,
    pub(super) ctx: Value,
    pub(super) regs: Value,
    warp: Value,
    pub(super) tids: Value,
    pub(super) args: Value,
    shared: Value,
    pub(super) v_active: Variable,
    v_next_min: Variable,
    v_clock: Variable,
    v_pc: Variable,
    v_remaining: Variable,
    v_jwarp: Variable,
    pub(super) v_jthreads: Variable,
    pub(super) v_preds: [Variable; 7],
    heads: HashMap<u32, Block>,
    dispatch: Block,
    exit: Block,
    exit_nosync: Block,
    sig_step: SigRef,
    sig_mem: SigRef,
    sig_diverge: SigRef,
    sig_resched: SigRef,
    sig_refill: SigRef,
    /// The TLB entry of each inlined global memory instruction.
    sites: HashMap<u32, u32>,
    /// Alias regions by `Mem` kind.
    regions: [AliasRegion; MEM_KINDS],
    /// The constant table (`Ctx::consts`) and the index of each vector.
    pub(super) consts: Vec<[u32; 4]>,
    const_ix: HashMap<[u32; 4], u32>,
    cbase: Value,
}

impl<'a, 'b> Gen<'a, 'b> {
    fn new(
        mut b: FunctionBuilder<'b>,
        code: &'a [Instruction],
        k: &Kernel,
        blocks: &'a analysis::Blocks,
        ptr: ir::Type,
        cc: cranelift_codegen::isa::CallConv,
        fma: bool,
    ) -> Self {
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
        let regs = ld(&mut b, cx!(regs));
        let warp = ld(&mut b, cx!(warp));
        let tids = ld(&mut b, cx!(tids));
        let args = ld(&mut b, cx!(args));
        let shared = ld(&mut b, cx!(shared));
        let cbase = ld(&mut b, cx!(consts));
        let v_active = b.declare_var(I32);
        let v_next_min = b.declare_var(I32);
        let v_clock = b.declare_var(I64);
        let v_pc = b.declare_var(I32);
        let v_remaining = b.declare_var(I64);
        let v_jwarp = b.declare_var(I64);
        let v_jthreads = b.declare_var(I64);
        let v_preds = std::array::from_fn(|_| b.declare_var(I32));
        let mut heads = HashMap::new();
        for &(s, _) in &blocks.list {
            heads.insert(s, b.create_block());
        }
        let dispatch = b.create_block();
        let exit = b.create_block();
        b.append_block_param(exit, I32);
        let exit_nosync = b.create_block();
        b.append_block_param(exit_nosync, I32);
        let mut g = Gen {
            b,
            code,
            start: k.entry,
            len: k.len,
            blocks,
            ptr,
            fma,
            ctx,
            regs,
            warp,
            tids,
            args,
            shared,
            v_active,
            v_next_min,
            v_clock,
            v_pc,
            v_remaining,
            v_jwarp,
            v_jthreads,
            v_preds,
            heads,
            dispatch,
            exit,
            exit_nosync,
            sig_step,
            sig_mem,
            sig_diverge,
            sig_resched,
            sig_refill,
            sites: HashMap::new(),
            regions,
            consts: Vec::new(),
            const_ix: HashMap::new(),
            cbase,
        };
        for pc in k.entry..k.entry + k.len {
            let global = code.get(pc as usize).is_some_and(|i| {
                matches!(analysis::kind(i, fma), Kind::GlobalLoad | Kind::GlobalStore)
            });
            if global {
                let n = g.sites.len() as u32;
                g.sites.insert(pc, n);
            }
        }
        g.load_full();
        let f = g.mf(Mem::Ctx);
        let rem = g.b.ins().load(I64, f, ctx, cx!(budget));
        g.b.def_var(v_remaining, rem);
        let z = g.b.ins().iconst(I64, 0);
        g.b.def_var(v_jwarp, z);
        g.b.def_var(v_jthreads, z);
        g.b.ins().jump(dispatch, &[]);
        g
    }

    fn emit(&mut self) -> Result<(), String> {
        self.emit_dispatch();
        self.emit_exits();
        for &(s, e) in &self.blocks.list {
            self.emit_block(s, e)?;
        }
        Ok(())
    }

    // --- small helpers -------------------------------------------------

    pub(super) fn c32(&mut self, v: u32) -> Value {
        self.b.ins().iconst(I32, v as i64)
    }

    pub(super) fn c64(&mut self, v: u64) -> Value {
        self.b.ins().iconst(I64, v as i64)
    }

    /// Flags of an access of kind `m`.
    pub(super) fn mf(&self, m: Mem) -> MemFlagsData {
        mem_flags(&self.regions, m)
    }

    /// A 4 × u32 constant vector, loaded from the constant table where it
    /// is used (a `vconst` would be hoisted to the function's entry and
    /// spilled there, on every call).
    pub(super) fn vconst(&mut self, v: [u32; 4]) -> Value {
        let n = self.consts.len() as u32;
        let i = *self.const_ix.entry(v).or_insert(n);
        if i == n {
            self.consts.push(v);
        }
        let f = self.mf(Mem::Fixed).with_aligned();
        self.b.ins().load(I32X4, f, self.cbase, 16 * i as i32)
    }

    pub(super) fn vsplat(&mut self, v: u32) -> Value {
        self.vconst([v; 4])
    }

    /// Reinterprets a vector (little-endian lanes).
    pub(super) fn cast(&mut self, ty: ir::Type, v: Value) -> Value {
        if self.b.func.dfg.value_type(v) == ty {
            return v;
        }
        let f = MemFlagsData::new().with_endianness(Endianness::Little);
        self.b.ins().bitcast(ty, f, v)
    }

    /// Byte shuffle of two vectors viewed as 16 bytes each.
    pub(super) fn shuffle(&mut self, ty: ir::Type, a: Value, b: Value, mask: [u8; 16]) -> Value {
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
    pub(super) fn load_reg(&mut self, r: u8, c: usize) -> Value {
        let off = r as i32 * REG_BYTES + 16 * c as i32;
        let f = self.mf(Mem::Regs);
        self.b.ins().load(I32X4, f, self.regs, off)
    }

    pub(super) fn store_reg(&mut self, r: u8, c: usize, v: Value) {
        let off = r as i32 * REG_BYTES + 16 * c as i32;
        let f = self.mf(Mem::Regs);
        self.b.ins().store(f, v, self.regs, off);
    }

    /// All-ones in the lanes `4c..4c + 4` whose bit is set in the scalar
    /// mask `m`.
    pub(super) fn mask_vec(&mut self, m: Value, c: usize) -> Value {
        let bits: [u32; 4] = std::array::from_fn(|l| 1u32 << (4 * c + l));
        let s = self.b.ins().splat(I32X4, m);
        let k = self.vconst(bits);
        let x = self.b.ins().band(s, k);
        self.b.ins().icmp(IntCC::Equal, x, k)
    }

    /// The scalar mask of guard `g` within the active group.
    pub(super) fn guard_mask(&mut self, g: Guard) -> Value {
        let active = self.b.use_var(self.v_active);
        if g.pred == Pred::TRUE {
            if g.neg {
                return self.c32(0);
            }
            return active;
        }
        let p = self.b.use_var(self.v_preds[(g.pred.0 as usize).min(6)]);
        let p = if g.neg { self.b.ins().bnot(p) } else { p };
        self.b.ins().band(active, p)
    }

    pub(super) fn add_threads(&mut self, m: Value) {
        let n = self.b.ins().popcnt(m);
        let n = self.b.ins().uextend(I64, n);
        let t = self.b.use_var(self.v_jthreads);
        let t = self.b.ins().iadd(t, n);
        self.b.def_var(self.v_jthreads, t);
    }

    fn add_jwarp(&mut self, n: u64) {
        if n == 0 {
            return;
        }
        let t = self.b.use_var(self.v_jwarp);
        let t = self.b.ins().iadd_imm_s(t, n as i64);
        self.b.def_var(self.v_jwarp, t);
    }

    fn warp_field(&mut self, ty: ir::Type, off: usize) -> Value {
        let f = self.mf(Mem::Warp);
        self.b.ins().load(ty, f, self.warp, off as i32)
    }

    fn set_warp_field(&mut self, off: usize, v: Value) {
        let f = self.mf(Mem::Warp);
        self.b.ins().store(f, v, self.warp, off as i32);
    }

    // --- the warp's scalar state ---------------------------------------

    /// Active group, next_min and predicates from the warp (after an
    /// interpreter step).
    fn reload(&mut self) {
        let a = self.warp_field(I32, offset_of!(Warp, active));
        self.b.def_var(self.v_active, a);
        let n = self.warp_field(I32, offset_of!(Warp, next_min));
        self.b.def_var(self.v_next_min, n);
        for p in 0..7 {
            let v = self.warp_field(I32, offset_of!(Warp, preds) + 4 * p);
            self.b.def_var(self.v_preds[p], v);
        }
    }

    /// Everything, pc and clock included.
    fn load_full(&mut self) {
        self.reload();
        let pc = self.warp_field(I32, offset_of!(Warp, pc));
        self.b.def_var(self.v_pc, pc);
        let c = self.warp_field(I64, offset_of!(Warp, clock));
        self.b.def_var(self.v_clock, c);
    }

    /// Writes the variables to the warp, with `pc` and `clock`.
    fn store_state(&mut self, pc: Value, clock: Value) {
        self.set_warp_field(offset_of!(Warp, pc), pc);
        self.set_warp_field(offset_of!(Warp, clock), clock);
        let a = self.b.use_var(self.v_active);
        self.set_warp_field(offset_of!(Warp, active), a);
        let n = self.b.use_var(self.v_next_min);
        self.set_warp_field(offset_of!(Warp, next_min), n);
        for p in 0..7 {
            let v = self.b.use_var(self.v_preds[p]);
            self.set_warp_field(offset_of!(Warp, preds) + 4 * p, v);
        }
    }

    fn helper(&mut self, off: i32) -> Value {
        let f = self.mf(Mem::CtxFixed);
        self.b.ins().load(self.ptr, f, self.ctx, off)
    }

    // --- dispatch and exits --------------------------------------------

    fn emit_dispatch(&mut self) {
        self.b.switch_to_block(self.dispatch);
        let active = self.b.use_var(self.v_active);
        let go = self.b.create_block();
        let idle = self.c32(status::IDLE);
        self.b
            .ins()
            .brif(active, go, &[], self.exit, &[idle.into()]);
        self.b.switch_to_block(go);
        let pc = self.b.use_var(self.v_pc);
        let start = self.c32(self.start);
        let idx = self.b.ins().isub(pc, start);
        let mid = self.b.create_block();
        let mut table = Vec::with_capacity(self.len as usize);
        for i in 0..self.len {
            let target = self.heads.get(&(self.start + i)).copied().unwrap_or(mid);
            table.push(self.b.func.dfg.block_call(target, &[]));
        }
        let def = self.b.func.dfg.block_call(mid, &[]);
        let jt = self.b.create_jump_table(JumpTableData::new(def, &table));
        self.b.ins().br_table(idx, jt);
        self.b.switch_to_block(mid);
        let st = self.c32(status::MIDBLOCK);
        self.b.ins().jump(self.exit, &[st.into()]);
    }

    fn write_counters(&mut self) {
        let r = self.b.use_var(self.v_remaining);
        let f = self.mf(Mem::Ctx);
        self.b.ins().store(f, r, self.ctx, cx!(remaining));
        let w = self.b.use_var(self.v_jwarp);
        self.b.ins().store(f, w, self.ctx, cx!(jit_warp));
        let t = self.b.use_var(self.v_jthreads);
        self.b.ins().store(f, t, self.ctx, cx!(jit_threads));
    }

    fn emit_exits(&mut self) {
        self.b.switch_to_block(self.exit);
        let st = self.b.block_params(self.exit)[0];
        let pc = self.b.use_var(self.v_pc);
        let clock = self.b.use_var(self.v_clock);
        self.store_state(pc, clock);
        self.write_counters();
        self.b.ins().return_(&[st]);
        self.b.switch_to_block(self.exit_nosync);
        let st = self.b.block_params(self.exit_nosync)[0];
        self.write_counters();
        self.b.ins().return_(&[st]);
    }

    /// Reschedules (the interpreter's rule) with the warp at `pc`, then
    /// continues wherever the new active group is.
    fn reschedule_and_dispatch(&mut self, pc: Value, clock: Value) {
        self.b.def_var(self.v_pc, pc);
        self.b.def_var(self.v_clock, clock);
        self.store_state(pc, clock);
        let f = self.helper(cx!(reschedule));
        self.b.ins().call_indirect(self.sig_resched, f, &[self.ctx]);
        self.load_full();
        self.b.ins().jump(self.dispatch, &[]);
    }

    /// Moves the active group to `target` (a block start or the kernel's
    /// end): directly to its block, or through rescheduling when it
    /// reaches a waiting group.
    fn goto(&mut self, target: u32, clock: Value) {
        self.b.def_var(self.v_clock, clock);
        let nm = self.b.use_var(self.v_next_min);
        let t = self.c32(target);
        let meet = self.b.ins().icmp(IntCC::UnsignedGreaterThanOrEqual, t, nm);
        let resched = self.b.create_block();
        let direct = self.b.create_block();
        self.b.ins().brif(meet, resched, &[], direct, &[]);
        self.b.switch_to_block(resched);
        self.reschedule_and_dispatch(t, clock);
        self.b.switch_to_block(direct);
        match self.heads.get(&target).copied() {
            Some(h) => {
                self.b.ins().jump(h, &[]);
            }
            None => {
                // Past the kernel's end: unreachable for validated kernels
                // (the last instruction is an unguarded exit, bra or trap);
                // the interpreter handles it as it does.
                self.b.def_var(self.v_pc, t);
                let st = self.c32(status::MIDBLOCK);
                self.b.ins().jump(self.exit, &[st.into()]);
            }
        }
    }

    /// An interpreter step of the instruction at `pc` (clock `clock`).
    /// Continues inline after it unless `last` (the block's last
    /// instruction: the step may have moved or regrouped the warp).
    fn step(&mut self, pc: u32, clock: Value, last: bool, mem: Option<u32>) {
        let pcv = self.c32(pc);
        self.store_state(pcv, clock);
        let r = match mem {
            None => {
                let f = self.helper(cx!(step));
                let call = self.b.ins().call_indirect(self.sig_step, f, &[self.ctx]);
                self.b.inst_results(call)[0]
            }
            Some(slot) => {
                let f = self.helper(cx!(mem_step));
                let s = self.c32(slot);
                let call = self.b.ins().call_indirect(self.sig_mem, f, &[self.ctx, s]);
                self.b.inst_results(call)[0]
            }
        };
        let cont = self.b.create_block();
        self.b
            .ins()
            .brif(r, self.exit_nosync, &[r.into()], cont, &[]);
        self.b.switch_to_block(cont);
        if last {
            self.load_full();
            self.b.ins().jump(self.dispatch, &[]);
        } else {
            self.reload();
        }
    }

    // --- blocks ----------------------------------------------------------

    fn emit_block(&mut self, s: u32, e: u32) -> Result<(), String> {
        let head = *self.heads.get(&s).ok_or("no block head")?;
        self.b.switch_to_block(head);
        let spc = self.c32(s);
        self.b.def_var(self.v_pc, spc);
        let len = (e - s) as u64;
        let rem = self.b.use_var(self.v_remaining);
        let lenv = self.c64(len);
        let short = self.b.ins().icmp(IntCC::UnsignedLessThan, rem, lenv);
        let body = self.b.create_block();
        let tail = self.c32(status::TAIL);
        self.b
            .ins()
            .brif(short, self.exit, &[tail.into()], body, &[]);
        self.b.switch_to_block(body);
        let rem = self.b.ins().isub(rem, lenv);
        self.b.def_var(self.v_remaining, rem);
        let base = self.b.use_var(self.v_clock);
        let insts: Vec<Instruction> = (s..e)
            .map(|pc| self.code.get(pc as usize).copied())
            .collect::<Option<_>>()
            .ok_or("kernel outside the code")?;
        let kinds: Vec<Kind> = insts.iter().map(|i| analysis::kind(i, self.fma)).collect();
        let inline = kinds
            .iter()
            .filter(|k| matches!(k, Kind::Lane | Kind::Branch | Kind::Exit))
            .count();
        self.add_jwarp(inline as u64);
        let clock_at = |g: &mut Self, k: usize| g.b.ins().iadd_imm_s(base, k as i64);
        let mut i = 0usize;
        while i < insts.len() {
            let pc = s + i as u32;
            let last = i + 1 == insts.len();
            match kinds[i] {
                Kind::Lane => {
                    let mut j = i;
                    let mut written = 0u8;
                    while j < insts.len() && kinds[j] == Kind::Lane {
                        let g = insts[j].guard.pred;
                        if g != Pred::TRUE && written >> g.0 & 1 != 0 {
                            break;
                        }
                        if let Some(p) = analysis::pred_written(&insts[j].op) {
                            written |= 1 << p;
                        }
                        j += 1;
                    }
                    self.emit_region(&insts[i..j], i, base);
                    i = j;
                    continue;
                }
                Kind::GlobalLoad | Kind::GlobalStore => {
                    let clock = clock_at(self, i);
                    self.emit_global(pc, &insts[i], clock, last);
                }
                Kind::SharedLoad | Kind::SharedStore => {
                    let clock = clock_at(self, i);
                    self.emit_shared(pc, &insts[i], clock, last);
                }
                Kind::Interp => {
                    let clock = clock_at(self, i);
                    self.step(pc, clock, last || analysis::ends_block(&insts[i].op), None);
                    if last || analysis::ends_block(&insts[i].op) {
                        return Ok(());
                    }
                }
                Kind::Branch => {
                    let clock = clock_at(self, i + 1);
                    self.emit_branch(pc, &insts[i], clock);
                    return Ok(());
                }
                Kind::Exit => {
                    let clock = clock_at(self, i + 1);
                    self.emit_exit(pc, &insts[i], clock);
                    return Ok(());
                }
            }
            i += 1;
        }
        let clock = clock_at(self, insts.len());
        self.goto(e, clock);
        Ok(())
    }

    fn emit_branch(&mut self, pc: u32, inst: &Instruction, clock: Value) {
        let Op::Bra { offset } = inst.op else { return };
        let target = (pc as i64 + offset as i64) as u32;
        let m = self.guard_mask(inst.guard);
        self.add_threads(m);
        if inst.guard == Guard::ALWAYS {
            self.goto(target, clock);
            return;
        }
        let active = self.b.use_var(self.v_active);
        let all = self.b.ins().icmp(IntCC::Equal, m, active);
        let taken = self.b.create_block();
        let not_all = self.b.create_block();
        self.b.ins().brif(all, taken, &[], not_all, &[]);
        self.b.switch_to_block(taken);
        self.goto(target, clock);
        self.b.switch_to_block(not_all);
        let none = self.b.create_block();
        let split = self.b.create_block();
        self.b.ins().brif(m, split, &[], none, &[]);
        self.b.switch_to_block(none);
        self.goto(pc + 1, clock);
        self.b.switch_to_block(split);
        let pcv = self.c32(pc);
        let before = self.b.ins().iadd_imm_s(clock, -1);
        self.store_state(pcv, before);
        let f = self.helper(cx!(diverge));
        self.b
            .ins()
            .call_indirect(self.sig_diverge, f, &[self.ctx, m]);
        self.reload();
        self.goto(target, clock);
    }

    fn emit_exit(&mut self, pc: u32, inst: &Instruction, clock: Value) {
        let m = self.guard_mask(inst.guard);
        self.add_threads(m);
        let fall = self.b.create_block();
        let some = self.b.create_block();
        self.b.ins().brif(m, some, &[], fall, &[]);
        self.b.switch_to_block(some);
        let live = self.warp_field(I32, offset_of!(Warp, live));
        let keep = self.b.ins().bnot(m);
        let live = self.b.ins().band(live, keep);
        self.set_warp_field(offset_of!(Warp, live), live);
        let active = self.b.use_var(self.v_active);
        let active = self.b.ins().band(active, keep);
        self.b.def_var(self.v_active, active);
        let gone = self.b.create_block();
        self.b.ins().brif(active, fall, &[], gone, &[]);
        self.b.switch_to_block(gone);
        // No lane left to run (the usual end of a warp): the interpreter's
        // rescheduling would only clear `next_min`.
        let pcv = self.c32(pc);
        let blocked = self.warp_field(I32, offset_of!(Warp, blocked));
        let runnable = self.b.ins().band_not(live, blocked);
        let (done, resched) = (self.b.create_block(), self.b.create_block());
        self.b.ins().brif(runnable, resched, &[], done, &[]);
        self.b.switch_to_block(done);
        self.b.def_var(self.v_pc, pcv);
        self.b.def_var(self.v_clock, clock);
        let none = self.c32(u32::MAX);
        self.b.def_var(self.v_next_min, none);
        let idle = self.c32(status::IDLE);
        self.b.ins().jump(self.exit, &[idle.into()]);
        self.b.switch_to_block(resched);
        self.reschedule_and_dispatch(pcv, clock);
        self.b.switch_to_block(fall);
        self.goto(pc + 1, clock);
    }

    // --- memory ----------------------------------------------------------

    /// `ld.32` / `st.32` on global memory: a full warp of consecutive,
    /// aligned words inside the TLB entry is moved inline; anything else
    /// is an interpreter step that refills the entry.
    fn emit_global(&mut self, pc: u32, inst: &Instruction, clock: Value, last: bool) {
        let (load, data, addr, offset) = match inst.op {
            Op::Ld {
                d, addr, offset, ..
            } => (true, d, addr, offset),
            Op::St {
                v, addr, offset, ..
            } => (false, v, addr, offset),
            _ => return,
        };
        let m = self.guard_mask(inst.guard);
        let ones = self.c32(u32::MAX);
        let full = self.b.ins().icmp(IntCC::Equal, m, ones);
        let check = self.b.create_block();
        let slow = self.b.create_block();
        let fast = self.b.create_block();
        let cont = self.b.create_block();
        self.b.ins().brif(full, check, &[], slow, &[]);

        self.b.switch_to_block(check);
        let lo_off = addr.0 as i32 * REG_BYTES;
        let f = self.mf(Mem::Regs);
        let lo0 = self.b.ins().load(I32, f, self.regs, lo_off);
        let hi0 = self.b.ins().load(I32, f, self.regs, lo_off + REG_BYTES);
        let slo = self.b.ins().splat(I32X4, lo0);
        let shi = self.b.ins().splat(I32X4, hi0);
        let mut acc: Option<Value> = None;
        for c in 0..CHUNKS {
            let lo = self.load_reg(addr.0, c);
            let hi = self.load_reg(addr.0 + 1, c);
            let k = (16 * c) as u32;
            let iota = self.vconst([k, k + 4, k + 8, k + 12]);
            let want = self.b.ins().iadd(slo, iota);
            let e1 = self.b.ins().icmp(IntCC::Equal, lo, want);
            let e2 = self.b.ins().icmp(IntCC::Equal, hi, shi);
            let e = self.b.ins().band(e1, e2);
            acc = Some(match acc {
                Some(a) => self.b.ins().band(a, e),
                None => e,
            });
        }
        let Some(acc) = acc else { return };
        let ok1 = self.b.ins().vall_true(acc);
        let top = self.c32(u32::MAX - 124);
        let ok2 = self.b.ins().icmp(IntCC::UnsignedLessThanOrEqual, lo0, top);
        let lo64 = self.b.ins().uextend(I64, lo0);
        let hi64 = self.b.ins().uextend(I64, hi0);
        let hi64 = self.b.ins().ishl_imm_s(hi64, 32);
        let reg64 = self.b.ins().bor(hi64, lo64);
        let va0 = self.b.ins().iadd_imm_s(reg64, offset as i64);
        let ok3 =
            self.b
                .ins()
                .icmp_imm_s(IntCC::UnsignedLessThanOrEqual, va0, (u64::MAX - 124) as i64);
        let low = self.b.ins().band_imm_s(va0, 3);
        let ok4 = self.b.ins().icmp_imm_s(IntCC::Equal, low, 0);
        let a = self.b.ins().band(ok1, ok2);
        let bb = self.b.ins().band(ok3, ok4);
        let a = self.b.ins().band(a, bb);
        let (lookup, miss, lookup2) = (
            self.b.create_block(),
            self.b.create_block(),
            self.b.create_block(),
        );
        self.b.append_block_param(fast, I64);
        self.b.ins().brif(a, lookup, &[], slow, &[]);
        // The entry of this instruction: hit, or refill once and retry.
        let site = self.sites.get(&pc).copied().unwrap_or(0);
        let t = site as i32 * std::mem::size_of::<Tlb>() as i32;
        for (blk, on_miss) in [(lookup, miss), (lookup2, slow)] {
            self.b.switch_to_block(blk);
            let tlbs = self.helper(cx!(tlb));
            let f = self.mf(Mem::Tlb);
            let base = self
                .b
                .ins()
                .load(I64, f, tlbs, t + offset_of!(Tlb, base) as i32);
            let limit = self
                .b
                .ins()
                .load(I64, f, tlbs, t + offset_of!(Tlb, limit) as i32);
            let off = self.b.ins().isub(va0, base);
            let hit = self
                .b
                .ins()
                .icmp(IntCC::UnsignedLessThanOrEqual, off, limit);
            self.b.ins().brif(hit, fast, &[off.into()], on_miss, &[]);
        }
        self.b.switch_to_block(miss);
        let f = self.helper(cx!(refill));
        let tag = self.c32(site | if load { 0 } else { 1 << 31 });
        let call = self
            .b
            .ins()
            .call_indirect(self.sig_refill, f, &[self.ctx, tag, va0]);
        let got = self.b.inst_results(call)[0];
        self.b.ins().brif(got, lookup2, &[], slow, &[]);

        self.b.switch_to_block(fast);
        let off = self.b.block_params(fast)[0];
        let tlbs = self.helper(cx!(tlb));
        let f = self.mf(Mem::Tlb);
        let host = self
            .b
            .ins()
            .load(self.ptr, f, tlbs, t + offset_of!(Tlb, host) as i32);
        let f = self.mf(Mem::Global);
        let hp = self.b.ins().iadd(host, off);
        for c in 0..CHUNKS {
            if load {
                let v = self.b.ins().load(I32X4, f, hp, 16 * c as i32);
                self.store_reg(data.0, c, v);
            } else {
                let v = self.load_reg(data.0, c);
                self.b.ins().store(f, v, hp, 16 * c as i32);
            }
        }
        self.add_jwarp(1);
        let n32 = self.c32(u32::MAX);
        self.add_threads(n32);
        self.b.ins().jump(cont, &[]);

        self.b.switch_to_block(slow);
        let site = self.sites.get(&pc).copied().unwrap_or(0);
        self.step(pc, clock, last, Some(site | if load { 0 } else { 1 << 31 }));
        if !last {
            self.b.ins().jump(cont, &[]);
        }
        self.b.switch_to_block(cont);
    }

    /// `lds.32` / `sts.32`: every executing lane's offset checked inline
    /// (aligned, inside shared memory), then lane by lane; a bad lane is an
    /// interpreter step, which reports the fault.
    fn emit_shared(&mut self, pc: u32, inst: &Instruction, clock: Value, last: bool) {
        let (load, data, addr, offset) = match inst.op {
            Op::Ld {
                d, addr, offset, ..
            } => (true, d, addr, offset),
            Op::St {
                v, addr, offset, ..
            } => (false, v, addr, offset),
            _ => return,
        };
        let fsh = self.mf(Mem::Shared);
        let m = self.guard_mask(inst.guard);
        let check = self.b.create_block();
        let slow = self.b.create_block();
        let fast = self.b.create_block();
        let cont = self.b.create_block();
        let nothing = self.b.create_block();
        self.b.ins().brif(m, check, &[], nothing, &[]);
        self.b.switch_to_block(nothing);
        self.add_jwarp(1);
        self.b.ins().jump(cont, &[]);

        self.b.switch_to_block(check);
        let fx = self.mf(Mem::CtxFixed);
        let sb = self.b.ins().load(I64, fx, self.ctx, cx!(shared_bytes));
        let small = self.b.ins().icmp_imm_s(IntCC::UnsignedLessThan, sb, 4);
        let check2 = self.b.create_block();
        self.b.ins().brif(small, slow, &[], check2, &[]);
        self.b.switch_to_block(check2);
        let lim = self.b.ins().iadd_imm_s(sb, -4);
        let lim = self.b.ins().ireduce(I32, lim);
        let slim = self.b.ins().splat(I32X4, lim);
        let soff = self.vsplat(offset as u32);
        let three = self.vsplat(3);
        let zero = self.vsplat(0);
        let mut bad: Option<Value> = None;
        let mut addrs = Vec::with_capacity(CHUNKS);
        let mut masks = Vec::with_capacity(CHUNKS);
        for c in 0..CHUNKS {
            let mv = self.mask_vec(m, c);
            let base = self.load_reg(addr.0, c);
            let a = self.b.ins().iadd(base, soff);
            let low = self.b.ins().band(a, three);
            let b1 = self.b.ins().icmp(IntCC::NotEqual, low, zero);
            let b2 = self.b.ins().icmp(IntCC::UnsignedGreaterThan, a, slim);
            let b = self.b.ins().bor(b1, b2);
            let b = self.b.ins().band(b, mv);
            bad = Some(match bad {
                Some(x) => self.b.ins().bor(x, b),
                None => b,
            });
            addrs.push(self.b.ins().band(a, mv));
            masks.push(mv);
        }
        let Some(bad) = bad else { return };
        let any = self.b.ins().vany_true(bad);
        self.b.ins().brif(any, slow, &[], fast, &[]);

        self.b.switch_to_block(fast);
        // A full warp whose chunks each hold 4 consecutive words (or, for
        // loads, one word): one vector access per chunk.
        let ones = self.c32(u32::MAX);
        let full = self.b.ins().icmp(IntCC::Equal, m, ones);
        let (vector, splat, lanes) = (
            self.b.create_block(),
            self.b.create_block(),
            self.b.create_block(),
        );
        let test = self.b.create_block();
        self.b.ins().brif(full, test, &[], lanes, &[]);
        self.b.switch_to_block(test);
        let iota = self.vconst([0, 4, 8, 12]);
        let (mut cons, mut uni) = (None, None);
        let mut first = Vec::with_capacity(CHUNKS);
        for &a in &addrs {
            let a0 = self.shuffle(
                I32X4,
                a,
                a,
                [0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3],
            );
            let want = self.b.ins().iadd(a0, iota);
            let c = self.b.ins().icmp(IntCC::Equal, a, want);
            let u = self.b.ins().icmp(IntCC::Equal, a, a0);
            cons = Some(cons.map_or(c, |x| self.b.ins().band(x, c)));
            uni = Some(uni.map_or(u, |x| self.b.ins().band(x, u)));
            first.push(a);
        }
        let (Some(cons), Some(uni)) = (cons, uni) else {
            return;
        };
        let cons = self.b.ins().vall_true(cons);
        let uni = self.b.ins().vall_true(uni);
        let not_cons = self.b.create_block();
        self.b.ins().brif(cons, vector, &[], not_cons, &[]);
        self.b.switch_to_block(not_cons);
        if load {
            self.b.ins().brif(uni, splat, &[], lanes, &[]);
        } else {
            self.b.ins().jump(lanes, &[]);
        }
        self.b.switch_to_block(vector);
        for (c, &a) in first.iter().enumerate() {
            let idx = self.b.ins().extractlane(a, 0);
            let idx = self.b.ins().uextend(self.ptr, idx);
            let p = self.b.ins().iadd(self.shared, idx);
            if load {
                let v = self.b.ins().load(I32X4, fsh, p, 0);
                self.store_reg(data.0, c, v);
            } else {
                let v = self.load_reg(data.0, c);
                self.b.ins().store(fsh, v, p, 0);
            }
        }
        self.add_jwarp(1);
        self.add_threads(m);
        self.b.ins().jump(cont, &[]);
        self.b.switch_to_block(splat);
        if load {
            for (c, &a) in first.iter().enumerate() {
                let idx = self.b.ins().extractlane(a, 0);
                let idx = self.b.ins().uextend(self.ptr, idx);
                let p = self.b.ins().iadd(self.shared, idx);
                let w = self.b.ins().load(I32, fsh, p, 0);
                let v = self.b.ins().splat(I32X4, w);
                self.store_reg(data.0, c, v);
            }
            self.add_jwarp(1);
            self.add_threads(m);
        }
        self.b.ins().jump(cont, &[]);

        self.b.switch_to_block(lanes);
        for c in 0..CHUNKS {
            let a = addrs[c];
            if load {
                let mut v = zero;
                for l in 0..4u8 {
                    let idx = self.b.ins().extractlane(a, l);
                    let idx = self.b.ins().uextend(self.ptr, idx);
                    let p = self.b.ins().iadd(self.shared, idx);
                    let w = self.b.ins().load(I32, fsh, p, 0);
                    v = self.b.ins().insertlane(v, w, l);
                }
                let old = self.load_reg(data.0, c);
                let new = self.b.ins().bitselect(masks[c], v, old);
                self.store_reg(data.0, c, new);
            } else {
                let val = self.load_reg(data.0, c);
                for l in 0..4u8 {
                    let idx = self.b.ins().extractlane(a, l);
                    let idx = self.b.ins().uextend(self.ptr, idx);
                    let p = self.b.ins().iadd(self.shared, idx);
                    let old = self.b.ins().load(I32, fsh, p, 0);
                    let x = self.b.ins().extractlane(val, l);
                    let bit = self.b.ins().ushr_imm_s(m, (4 * c + l as usize) as i64);
                    let bit = self.b.ins().band_imm_s(bit, 1);
                    let w = self.b.ins().select(bit, x, old);
                    self.b.ins().store(fsh, w, p, 0);
                }
            }
        }
        self.add_jwarp(1);
        self.add_threads(m);
        self.b.ins().jump(cont, &[]);

        self.b.switch_to_block(slow);
        self.step(pc, clock, last, None);
        if !last {
            self.b.ins().jump(cont, &[]);
        }
        self.b.switch_to_block(cont);
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
