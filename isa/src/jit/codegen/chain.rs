//! Going on from warp to warp inside the generated code.
//!
//! When the current warp has no runnable lane (all exited, or all waiting
//! at a barrier) the scheduler would run the next warp of the workgroup
//! with the quantum it has left; the generated code does that itself
//! instead of returning, which saves a return to the scheduler, its loop
//! and the function's entry per warp (a large part of a short kernel's
//! time). It goes on only as the scheduler would and only where the
//! result is the same to the instruction (`exec::WarpRun`):
//!
//! * to the next warp, never past the last one (`Ctx::chain_end`, 0 when
//!   some warp lacks the kernel's registers), and only to a runnable one;
//! * only with budget left (`Ctx::wg_left`); the new warp's quantum is the
//!   scheduler's, `min(left, QUANTUM)`;
//! * never with the cancel flag set (the scheduler checks it after every
//!   warp).
//!
//! Before going on it writes the finished warp's state, adds its own
//! counters to the execution's (`Ctx::stats`) and records them
//! (`Ctx::snap`): a fault in the next warp leaves the counters of the
//! warps before it, as the interpreter's per-warp calls do. The Rust side
//! (`runtime::Run::run`) reads the warp the code stopped on from
//! `Ctx::warp_index`.

use super::{cx, Gen, Mem};
use crate::exec::{Stats, Warp, QUANTUM};
use crate::jit::runtime::{status, Chain};
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::types::{I32, I64};
use cranelift_codegen::ir::InstBuilder;
use std::mem::offset_of;

impl Gen<'_, '_> {
    /// The block an idle warp's dispatch jumps to: the next warp's code,
    /// or a return with `IDLE`.
    pub(super) fn emit_chain(&mut self) {
        self.b.switch_to_block(self.flow.chain);
        let pc = self.b.use_var(self.warp.v_pc);
        let clock = self.b.use_var(self.warp.v_clock);
        self.store_state(pc, clock);
        let idle = self.c32(status::IDLE);
        let fixed = self.mf(Mem::CtxFixed);
        let fc = self.mf(Mem::Ctx);
        let ctx = self.mem.ctx;

        // A next warp to go on to.
        let w = self.b.ins().load(I32, fc, ctx, cx!(warp_index));
        let next = self.b.ins().iadd_imm_s(w, 1);
        let end = self.b.ins().load(I32, fixed, ctx, cx!(chain_end));
        let more = self.b.ins().icmp(IntCC::UnsignedLessThan, next, end);
        let budget_ok = self.b.create_block();
        self.b
            .ins()
            .brif(more, budget_ok, &[], self.flow.exit_nosync, &[idle.into()]);

        // Budget left after this warp.
        self.b.switch_to_block(budget_ok);
        let quantum = self.b.ins().load(I64, fc, ctx, cx!(budget));
        let rem = self.b.use_var(self.warp.v_remaining);
        let used = self.b.ins().isub(quantum, rem);
        let left0 = self.b.ins().load(I64, fc, ctx, cx!(wg_left));
        let left = self.b.ins().isub(left0, used);
        let flag = self.b.create_block();
        self.b
            .ins()
            .brif(left, flag, &[], self.flow.exit_nosync, &[idle.into()]);

        // The cancel flag (an `AtomicBool`: one byte, 0 or 1).
        self.b.switch_to_block(flag);
        let cancel = self.b.ins().load(self.k.ptr, fixed, ctx, cx!(cancel));
        let read_flag = self.b.create_block();
        let find = self.b.create_block();
        self.b.ins().brif(cancel, read_flag, &[], find, &[]);
        self.b.switch_to_block(read_flag);
        let set = self.b.ins().uload8(I32, fc, cancel, 0);
        self.b
            .ins()
            .brif(set, self.flow.exit_nosync, &[idle.into()], find, &[]);

        // The next warp, if it has runnable lanes.
        self.b.switch_to_block(find);
        let table = self.b.ins().load(self.k.ptr, fixed, ctx, cx!(chain));
        let ix = self.b.ins().uextend(self.k.ptr, next);
        let off = self
            .b
            .ins()
            .imul_imm_s(ix, std::mem::size_of::<Chain>() as i64);
        let e = self.b.ins().iadd(table, off);
        let wp = self
            .b
            .ins()
            .load(self.k.ptr, fixed, e, offset_of!(Chain, warp) as i32);
        let fw = self.mf(Mem::Warp);
        let active = self
            .b
            .ins()
            .load(I32, fw, wp, offset_of!(Warp, active) as i32);
        let go = self.b.create_block();
        self.b
            .ins()
            .brif(active, go, &[], self.flow.exit_nosync, &[idle.into()]);

        // Go on: counters, budget, then the new warp's pointers and state.
        self.b.switch_to_block(go);
        let stats = self.b.ins().load(self.k.ptr, fixed, ctx, cx!(stats));
        let counts = self.counts();
        for (i, (field, mine)) in [
            offset_of!(Stats, warp_instructions),
            offset_of!(Stats, thread_instructions),
        ]
        .into_iter()
        .zip(counts)
        .enumerate()
        {
            let old = self.b.ins().load(I64, fc, stats, field as i32);
            let sum = self.b.ins().iadd(old, mine);
            self.b.ins().store(fc, sum, stats, field as i32);
            let snap = cx!(snap) + 8 * i as i32;
            self.b.ins().store(fc, sum, ctx, snap);
        }
        let z = self.c64(0);
        self.b.def_var(self.warp.v_counts, z);
        self.b.ins().store(fc, left, ctx, cx!(wg_left));
        let cap = self.c64(QUANTUM);
        let q = self.b.ins().umin(left, cap);
        self.b.ins().store(fc, q, ctx, cx!(budget));
        self.b.def_var(self.warp.v_remaining, q);
        self.b.ins().store(fc, next, ctx, cx!(warp_index));
        let regs = self
            .b
            .ins()
            .load(self.k.ptr, fixed, e, offset_of!(Chain, regs) as i32);
        let tids = self
            .b
            .ins()
            .load(self.k.ptr, fixed, e, offset_of!(Chain, tids) as i32);
        // The helpers find the warp through `warp` and `warp_index`; the
        // register file and thread ids live on in the variables only.
        self.b.ins().store(fc, wp, ctx, cx!(warp));
        self.b.def_var(self.warp.v_warp, wp);
        self.b.def_var(self.warp.v_regs, regs);
        self.b.def_var(self.warp.v_tids, tids);
        self.load_full();
        // A warp that has not started (the usual next one) goes straight
        // to the kernel's first block: its pc needs no jump table, and
        // `active` is known non-zero.
        match self.flow.heads.get(&self.k.start).copied() {
            Some(first) => {
                let pc = self.b.use_var(self.warp.v_pc);
                let fresh = self
                    .b
                    .ins()
                    .icmp_imm_s(IntCC::Equal, pc, self.k.start as i64);
                self.b
                    .ins()
                    .brif(fresh, first, &[], self.flow.dispatch, &[]);
            }
            None => {
                self.b.ins().jump(self.flow.dispatch, &[]);
            }
        }
    }
}
