//! Memory instructions: `ld.32`/`st.32` on global memory through the
//! software TLB, `lds.32`/`sts.32` bounds-checked inline; everything else
//! (and every miss or bad lane) is an interpreter step.

use super::{cx, Gen, Mem, CHUNKS, MEM_KINDS};
use crate::inst::*;
use crate::jit::runtime::{Tlb, REG_BYTES};
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::types::{I32, I32X4, I64};
use cranelift_codegen::ir::{AliasRegion, InstBuilder, SigRef, Type, Value};
use std::collections::HashMap;
use std::mem::offset_of;

/// Where the generated code's loads and stores go.
pub(super) struct Memory {
    /// The call's context (`runtime::Ctx`), the function's parameter.
    pub(super) ctx: Value,
    /// The kernel's arguments and the workgroup's shared memory.
    pub(super) args: Value,
    pub(super) shared: Value,
    /// The constant table (`Ctx::consts`), its vectors and the index of
    /// each.
    pub(super) cbase: Value,
    pub(super) consts: Vec<[u32; 4]>,
    pub(super) const_ix: HashMap<[u32; 4], u32>,
    /// Alias regions by `Mem` kind.
    pub(super) regions: [AliasRegion; MEM_KINDS],
    /// The TLB entry of each inlined global memory instruction.
    pub(super) sites: HashMap<u32, u32>,
    /// The interpreter step of a memory instruction and the TLB refill.
    pub(super) sig_mem: SigRef,
    pub(super) sig_refill: SigRef,
    /// Runs compiled as one region with their memory accesses
    /// (`fused.rs`).
    pub(super) fused_runs: usize,
}

impl Gen<'_, '_> {
    /// Fields of software TLB entry `t` (its byte offset in `ctx.tlb`):
    /// each a byte offset in [`Tlb`] and the type to load, under one load
    /// of the table's address.
    pub(super) fn tlb_fields<const N: usize>(
        &mut self,
        t: i32,
        fields: [(usize, Type); N],
    ) -> [Value; N] {
        let tlbs = self.helper(cx!(tlb));
        let f = self.mf(Mem::Tlb);
        fields.map(|(off, ty)| self.b.ins().load(ty, f, tlbs, t + off as i32))
    }

    /// `ld.32` / `st.32` on global memory: a full warp of consecutive,
    /// aligned words inside the TLB entry is moved inline; anything else
    /// is an interpreter step that refills the entry.
    pub(super) fn emit_global(&mut self, pc: u32, inst: &Instruction, clock: Value) {
        let Some((load, data, addr, offset, _)) = mem_operands(&inst.op) else {
            return;
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
        let rf = self.regs();
        let lo0 = self.b.ins().load(I32, f, rf, lo_off);
        let hi0 = self.b.ins().load(I32, f, rf, lo_off + REG_BYTES);
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
        let site = self.mem.sites.get(&pc).copied().unwrap_or(0);
        let t = site as i32 * std::mem::size_of::<Tlb>() as i32;
        for (blk, on_miss) in [(lookup, miss), (lookup2, slow)] {
            self.b.switch_to_block(blk);
            let [base, limit] = self.tlb_fields(
                t,
                [(offset_of!(Tlb, base), I64), (offset_of!(Tlb, limit), I64)],
            );
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
            .call_indirect(self.mem.sig_refill, f, &[self.mem.ctx, tag, va0]);
        let got = self.b.inst_results(call)[0];
        self.b.ins().brif(got, lookup2, &[], slow, &[]);

        self.b.switch_to_block(fast);
        let off = self.b.block_params(fast)[0];
        let [host] = self.tlb_fields(t, [(offset_of!(Tlb, host), self.k.ptr)]);
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
        let site = self.mem.sites.get(&pc).copied().unwrap_or(0);
        self.step(
            pc,
            clock,
            false,
            Some(site | if load { 0 } else { 1 << 31 }),
        );
        self.b.ins().jump(cont, &[]);
        self.b.switch_to_block(cont);
    }

    /// `lds.32` / `sts.32`: every executing lane's offset checked inline
    /// (aligned, inside shared memory), then lane by lane; a bad lane is an
    /// interpreter step, which reports the fault.
    pub(super) fn emit_shared(&mut self, pc: u32, inst: &Instruction, clock: Value) {
        let Some((load, data, addr, offset, _)) = mem_operands(&inst.op) else {
            return;
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
        let sb = self.b.ins().load(I64, fx, self.mem.ctx, cx!(shared_bytes));
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
            let idx = self.b.ins().uextend(self.k.ptr, idx);
            let p = self.b.ins().iadd(self.mem.shared, idx);
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
                let idx = self.b.ins().uextend(self.k.ptr, idx);
                let p = self.b.ins().iadd(self.mem.shared, idx);
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
                    let idx = self.b.ins().uextend(self.k.ptr, idx);
                    let p = self.b.ins().iadd(self.mem.shared, idx);
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
                    let idx = self.b.ins().uextend(self.k.ptr, idx);
                    let p = self.b.ins().iadd(self.mem.shared, idx);
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
        self.step(pc, clock, false, None);
        self.b.ins().jump(cont, &[]);
        self.b.switch_to_block(cont);
    }
}

/// A memory instruction's operands: (load, the data register, the address
/// register, the offset, the width), or `None` for any other instruction.
pub(super) fn mem_operands(op: &Op) -> Option<(bool, Reg, Reg, i32, Width)> {
    match *op {
        Op::Ld {
            d,
            addr,
            offset,
            width,
            ..
        } => Some((true, d, addr, offset, width)),
        Op::St {
            v,
            addr,
            offset,
            width,
            ..
        } => Some((false, v, addr, offset, width)),
        _ => None,
    }
}
