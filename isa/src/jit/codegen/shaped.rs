//! Memory instructions of full-warp code whose address register is shaped
//! (`shape.rs`): lane `l`'s address is a half-warp's scalar plus the
//! compile-time offset `k[l]`, so one check of each half's span replaces
//! the check of every lane, and the access moves a chunk of four lanes as
//! one vector (consecutive words), one word (the same word: a broadcast on
//! loads, the last lane's value on stores) or word by word, as the offsets
//! dictate. When a run-time check fails the instruction is an interpreter
//! step, as in the generic paths (`memory.rs`).

use super::memory::mem_operands;
use super::scalar::Sv;
use super::{cx, Gen, Mem, CHUNKS};
use crate::inst::*;
use crate::jit::runtime::Tlb;
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::types::{I32, I32X4, I64, I8};
use cranelift_codegen::ir::{InstBuilder, MemFlagsData, Value};
use std::mem::offset_of;

/// Lanes per half-warp.
const HALF: usize = WARP_SIZE / 2;

/// The offsets of a shape as signed numbers, and each half's range.
/// The lane offsets of `s` and how many bases they are relative to: one
/// (lane 0's, for every lane) where `one` allows and the halves are
/// linked, else each half's. With each group's range.
fn offsets(s: &Sv, one: bool) -> ([i64; WARP_SIZE], [(i64, i64); 2], usize) {
    if let Some(w) = s.shape.whole().filter(|_| one) {
        let r = (
            w.iter().copied().min().unwrap_or(0),
            w.iter().copied().max().unwrap_or(0),
        );
        return (w, [r, r], 1);
    }
    let k = s.shape.k.map(|k| k as i32 as i64);
    let range = |g: usize| {
        let h = &k[HALF * g..HALF * g + HALF];
        (
            h.iter().copied().min().unwrap_or(0),
            h.iter().copied().max().unwrap_or(0),
        )
    };
    let (r0, r1) = (range(0), range(1));
    let halves = if s.base[0] == s.base[1] && r0 == r1 {
        1
    } else {
        2
    };
    (k, [r0, r1], halves)
}

/// A shaped 32-bit access of full-warp code whose run-time conditions
/// have been computed (`Gen::global_access`, `Gen::shared_access`).
pub(super) struct Access {
    pub(super) load: bool,
    /// The data register.
    pub(super) data: u8,
    /// Lane `l`'s address is `start[l / 16] + k[l]` (`start[0]` for every
    /// lane if `halves` is 1).
    pub(super) k: [i64; WARP_SIZE],
    pub(super) halves: usize,
    /// Each half's smallest and largest `k`.
    pub(super) range: [(i64, i64); 2],
    /// Each half's start: a VA (global) or a byte offset in shared memory
    /// (an `i64`).
    pub(super) start: [Value; 2],
    /// True (an `i8`) when the access cannot be inline: not every lane
    /// runs it, or an address is out of range or unaligned.
    pub(super) bad: Value,
    /// The guard's lane mask.
    pub(super) mask: Value,
    /// Global accesses: the TLB entry's offset in the table and the tag
    /// of a refill.
    pub(super) tlb: Option<(i32, u32)>,
    /// Where the addresses come from: the address registers' lane-0 and
    /// lane-16 values (low and high words) and the offset. Two accesses
    /// with the same origin and offsets `k` reach the same addresses.
    pub(super) origin: ([Value; 4], i32),
}

impl Access {
    /// The first lane address of each half (`start + min k`).
    fn firsts(&self, g: &mut Gen<'_, '_>) -> Vec<Value> {
        (0..self.halves)
            .map(|h| g.b.ins().iadd_imm_s(self.start[h], self.range[h].0))
            .collect()
    }

    /// Whether every lane has its own word (so that running the access
    /// four lanes at a time next to another access of the same addresses
    /// keeps each word's order of accesses).
    pub(super) fn distinct(&self) -> bool {
        if self.halves != 1 {
            return false;
        }
        let mut k = self.k;
        k.sort_unstable();
        k.windows(2).all(|w| w[0] != w[1])
    }
}

/// Whether `global_access` takes `inst` with the address pair `lo`, `hi`.
pub(super) fn global_shaped_ok(inst: &Instruction, lo: &Sv, hi: &Sv) -> bool {
    let (k, range, _) = offsets(lo, hi.shape.is_uniform());
    matches!(mem_operands(&inst.op), Some((.., Width::B32)))
        && hi.shape.per_half()
        && k.iter().all(|&x| x & 3 == 0)
        && range.iter().all(|&(a, b)| b - a <= 124)
}

/// Whether `shared_access` takes `inst` with the address `a`.
pub(super) fn shared_shaped_ok(inst: &Instruction, a: &Sv) -> bool {
    let (k, _, _) = offsets(a, true);
    matches!(mem_operands(&inst.op), Some((.., Width::B32))) && k.iter().all(|&x| x & 3 == 0)
}

impl Gen<'_, '_> {
    /// The conditions of `ld.32`/`st.32` on global memory through the
    /// shaped address pair `lo`, `hi` at `pc`; `None` (nothing emitted)
    /// if the shapes do not allow an inline access.
    pub(super) fn global_access(
        &mut self,
        pc: u32,
        inst: &Instruction,
        lo: &Sv,
        hi: &Sv,
    ) -> Option<Access> {
        let Some((load, data, _, offset, Width::B32)) = mem_operands(&inst.op) else {
            return None;
        };
        let (k, range, halves) = offsets(lo, hi.shape.is_uniform());
        if !hi.shape.per_half()
            || k.iter().any(|&x| x & 3 != 0)
            || range.iter().any(|&(a, b)| b - a > 124)
        {
            return None;
        }
        let halves = if halves == 1 && hi.base[0] != hi.base[1] && !hi.shape.is_uniform() {
            2
        } else {
            halves
        };
        // Every lane (a guard must hold in all of them).
        let m = self.guard_mask(inst.guard);
        let mut bad = self.b.ins().icmp_imm_s(IntCC::NotEqual, m, -1);
        let mut start = Vec::with_capacity(2);
        for g in 0..halves {
            let l = self.b.ins().uextend(I64, lo.base[g]);
            let (kmin, kmax) = range[g];
            let a = self.b.ins().iadd_imm_s(l, kmin);
            let b = self.b.ins().iadd_imm_s(l, kmax);
            let c1 = self.b.ins().icmp_imm_s(IntCC::SignedLessThan, a, 0);
            let c2 = self
                .b
                .ins()
                .icmp_imm_s(IntCC::SignedGreaterThan, b, u32::MAX as i64);
            let v = self.join64(lo.base[g], hi.base[g]);
            let v = self.b.ins().iadd_imm_s(v, offset as i64);
            bad = self.out_or_unaligned(bad, [c1, c2], v);
            start.push(v);
        }
        let site = self.mem.sites.get(&pc).copied().unwrap_or(0);
        let tag = site | if load { 0 } else { 1 << 31 };
        let t = site as i32 * std::mem::size_of::<Tlb>() as i32;
        Some(Access {
            load,
            data: data.0,
            k,
            halves,
            range,
            start: [start[0], start[halves - 1]],
            bad,
            mask: m,
            tlb: Some((t, tag)),
            origin: ([lo.base[0], lo.base[1], hi.base[0], hi.base[1]], offset),
        })
    }

    /// `bad`, or any of the range conditions `out`, or `addr` not a
    /// multiple of 4 (an `i8`).
    fn out_or_unaligned(&mut self, mut bad: Value, out: [Value; 2], addr: Value) -> Value {
        let low = self.b.ins().band_imm_s(addr, 3);
        let c3 = self.b.ins().icmp_imm_s(IntCC::NotEqual, low, 0);
        for c in [out[0], out[1], c3] {
            bad = self.b.ins().bor(bad, c);
        }
        bad
    }

    /// The conditions of `lds.32`/`sts.32` through the shaped address
    /// register `a`; `None` (nothing emitted) if its shape does not allow
    /// an inline access.
    pub(super) fn shared_access(&mut self, inst: &Instruction, a: &Sv) -> Option<Access> {
        let Some((load, data, _, offset, Width::B32)) = mem_operands(&inst.op) else {
            return None;
        };
        let (k, range, halves) = offsets(a, true);
        if k.iter().any(|&x| x & 3 != 0) {
            return None;
        }
        let m = self.guard_mask(inst.guard);
        let mut bad = self.b.ins().icmp_imm_s(IntCC::NotEqual, m, -1);
        let fx = self.mf(Mem::CtxFixed);
        let sb = self.b.ins().load(I64, fx, self.mem.ctx, cx!(shared_bytes));
        let mut start = Vec::with_capacity(2);
        for g in 0..halves {
            // Lane addresses `base + offset + k` as exact numbers: inside
            // shared memory with every lane's word, and aligned.
            let t = self.b.ins().uextend(I64, a.base[g]);
            let t = self.b.ins().iadd_imm_s(t, offset as i64);
            let (kmin, kmax) = range[g];
            let lo = self.b.ins().iadd_imm_s(t, kmin);
            let hi = self.b.ins().iadd_imm_s(t, kmax + 4);
            let c1 = self.b.ins().icmp_imm_s(IntCC::SignedLessThan, lo, 0);
            let c2 = self.b.ins().icmp(IntCC::SignedGreaterThan, hi, sb);
            bad = self.out_or_unaligned(bad, [c1, c2], t);
            start.push(t);
        }
        Some(Access {
            load,
            data: data.0,
            k,
            halves,
            range,
            start: [start[0], start[halves - 1]],
            bad,
            mask: m,
            tlb: None,
            origin: ([a.base[0], a.base[1], a.base[0], a.base[1]], offset),
        })
    }

    /// Whether an access's spans are not inside its TLB entry's page (an
    /// `i8`; false for shared memory).
    pub(super) fn access_miss(&mut self, a: &Access) -> Value {
        match a.tlb {
            Some((t, _)) => {
                let firsts = a.firsts(self);
                self.span_miss(t, &firsts)
            }
            None => self.b.ins().iconst(I8, 0),
        }
    }

    /// Refills a global access's TLB entry with the page of its first
    /// half's span (the entry is a cache: a failed refill only leaves the
    /// span missing).
    pub(super) fn refill_access(&mut self, a: &Access) {
        let Some((_, tag)) = a.tlb else { return };
        let firsts = a.firsts(self);
        let f = self.helper(cx!(refill));
        let tagv = self.c32(tag);
        self.b
            .ins()
            .call_indirect(self.mem.sig_refill, f, &[self.mem.ctx, tagv, firsts[0]]);
    }

    /// Host pointers of each half's start (`Access::start`) once the
    /// access's conditions hold.
    pub(super) fn access_ptrs(&mut self, a: &Access) -> [Value; 2] {
        match a.tlb {
            Some((t, _)) => {
                let [base, host] = self.tlb_fields(
                    t,
                    [
                        (offset_of!(Tlb, base), I64),
                        (offset_of!(Tlb, host), self.k.ptr),
                    ],
                );
                a.start.map(|v| {
                    let off = self.b.ins().isub(v, base);
                    self.b.ins().iadd(host, off)
                })
            }
            None => a.start.map(|t| {
                let t = if self.k.ptr == I64 {
                    t
                } else {
                    self.b.ins().ireduce(self.k.ptr, t)
                };
                self.b.ins().iadd(self.mem.shared, t)
            }),
        }
    }

    /// `ld.32`/`st.32` on global memory through the shaped address pair
    /// `lo`, `hi`; false (nothing emitted) if the shapes do not allow it.
    pub(super) fn emit_global_shaped(
        &mut self,
        pc: u32,
        inst: &Instruction,
        clock: Value,
        lo: &Sv,
        hi: &Sv,
    ) -> bool {
        let Some(a) = self.global_access(pc, inst, lo, hi) else {
            return false;
        };
        let Some((t, tag)) = a.tlb else { return false };
        let (fast, slow, cont) = (
            self.b.create_block(),
            self.b.create_block(),
            self.b.create_block(),
        );
        let (check, lookup2, miss) = (
            self.b.create_block(),
            self.b.create_block(),
            self.b.create_block(),
        );
        self.b.ins().brif(a.bad, slow, &[], check, &[]);
        // Each half's span lies in the page of the instruction's TLB entry
        // (refilled once, for half 0, on a miss).
        self.b.switch_to_block(check);
        let firsts = a.firsts(self);
        let out = self.span_miss(t, &firsts);
        self.b.ins().brif(out, miss, &[], fast, &[]);
        self.b.switch_to_block(miss);
        let f = self.helper(cx!(refill));
        let tagv = self.c32(tag);
        let call =
            self.b
                .ins()
                .call_indirect(self.mem.sig_refill, f, &[self.mem.ctx, tagv, firsts[0]]);
        let got = self.b.inst_results(call)[0];
        self.b.ins().brif(got, lookup2, &[], slow, &[]);
        self.b.switch_to_block(lookup2);
        let out = self.span_miss(t, &firsts);
        self.b.ins().brif(out, slow, &[], fast, &[]);

        self.b.switch_to_block(fast);
        let ptrs = self.access_ptrs(&a);
        let fg = self.mf(Mem::Global);
        self.chunks(a.load, a.data, &ptrs, &a.k, fg);
        self.add_jwarp(1);
        self.add_threads(a.mask);
        self.b.ins().jump(cont, &[]);

        self.b.switch_to_block(slow);
        self.step(pc, clock, false, Some(tag));
        self.b.ins().jump(cont, &[]);
        self.b.switch_to_block(cont);
        true
    }

    /// `lds.32`/`sts.32` through the shaped address register `a`; false
    /// (nothing emitted) if its shape does not allow it.
    pub(super) fn emit_shared_shaped(
        &mut self,
        pc: u32,
        inst: &Instruction,
        clock: Value,
        a: &Sv,
    ) -> bool {
        let Some(a) = self.shared_access(inst, a) else {
            return false;
        };
        let (fast, slow, cont) = (
            self.b.create_block(),
            self.b.create_block(),
            self.b.create_block(),
        );
        self.b.ins().brif(a.bad, slow, &[], fast, &[]);

        self.b.switch_to_block(fast);
        let ptrs = self.access_ptrs(&a);
        let fsh = self.mf(Mem::Shared);
        self.chunks(a.load, a.data, &ptrs, &a.k, fsh);
        self.add_jwarp(1);
        self.add_threads(a.mask);
        self.b.ins().jump(cont, &[]);

        self.b.switch_to_block(slow);
        self.step(pc, clock, false, None);
        self.b.ins().jump(cont, &[]);
        self.b.switch_to_block(cont);
        true
    }

    /// Whether a span starting at one of `firsts` (at most 128 bytes
    /// long) is not inside the page of TLB entry `t` (an `i8`).
    fn span_miss(&mut self, t: i32, firsts: &[Value]) -> Value {
        let [base, limit] = self.tlb_fields(
            t,
            [(offset_of!(Tlb, base), I64), (offset_of!(Tlb, limit), I64)],
        );
        let mut out = self.b.ins().iconst(I8, 0);
        for &fv in firsts {
            let off = self.b.ins().isub(fv, base);
            let o = self.b.ins().icmp(IntCC::UnsignedGreaterThan, off, limit);
            out = self.b.ins().bor(out, o);
        }
        out
    }

    /// Moves register `data` (all lanes) from or to the addresses
    /// `ptrs[l / 16] + k[l]`, in ascending lane order.
    fn chunks(
        &mut self,
        load: bool,
        data: u8,
        ptrs: &[Value; 2],
        k: &[i64; WARP_SIZE],
        f: MemFlagsData,
    ) {
        for c in 0..CHUNKS {
            if load {
                let v = self.chunk_load(ptrs, k, c, f);
                self.store_reg(data, c, v);
            } else {
                let v = self.load_reg(data, c);
                self.chunk_store(ptrs, k, c, f, v);
            }
        }
    }

    /// Lanes `4c..4c + 4` loaded from `ptrs[l / 16] + k[l]`.
    pub(super) fn chunk_load(
        &mut self,
        ptrs: &[Value; 2],
        k: &[i64; WARP_SIZE],
        c: usize,
        f: MemFlagsData,
    ) -> Value {
        let p = ptrs[c / (CHUNKS / 2)];
        let kc: [i64; 4] = std::array::from_fn(|i| k[4 * c + i]);
        let x = kc[0] as i32;
        if (0..4).all(|i| kc[i] == kc[0] + 4 * i as i64) {
            self.b.ins().load(I32X4, f, p, x)
        } else if kc.iter().all(|&v| v == kc[0]) {
            let w = self.b.ins().load(I32, f, p, x);
            self.b.ins().splat(I32X4, w)
        } else {
            let mut v = self.vsplat(0);
            for (i, &o) in kc.iter().enumerate() {
                let w = self.b.ins().load(I32, f, p, o as i32);
                v = self.b.ins().insertlane(v, w, i as u8);
            }
            v
        }
    }

    /// Lanes `4c..4c + 4` of `v` stored to `ptrs[l / 16] + k[l]`, in
    /// ascending lane order.
    pub(super) fn chunk_store(
        &mut self,
        ptrs: &[Value; 2],
        k: &[i64; WARP_SIZE],
        c: usize,
        f: MemFlagsData,
        v: Value,
    ) {
        let p = ptrs[c / (CHUNKS / 2)];
        let kc: [i64; 4] = std::array::from_fn(|i| k[4 * c + i]);
        let x = kc[0] as i32;
        if (0..4).all(|i| kc[i] == kc[0] + 4 * i as i64) {
            self.b.ins().store(f, v, p, x);
        } else if kc.iter().all(|&v| v == kc[0]) {
            let w = self.b.ins().extractlane(v, 3);
            self.b.ins().store(f, w, p, x);
        } else {
            for (i, &o) in kc.iter().enumerate() {
                let w = self.b.ins().extractlane(v, i as u8);
                self.b.ins().store(f, w, p, o as i32);
            }
        }
    }
}
