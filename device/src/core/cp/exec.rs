//! Executing packets: the slice loop, which asks the fault injector before
//! each step of the packet in flight, runs the step (a dispatch on the
//! compute units, anything else through the engine's TLB) and completes
//! the packet (its fence, its trace record), or fetches the next one; and
//! the steps of each operation.

use vgpu_hwif::event::Event;
use vgpu_hwif::mmu::Access;
use vgpu_hwif::packet::{
    opcode_name, EngineError, FENCE_NO_EVENT, SEM_SIGNAL_ADD, SEM_WAIT_EQ, SEM_WAIT_GEQ,
    SEM_WAIT_NEQ,
};

#[cfg(test)]
use super::TestPanic;
use super::{advance, count_packet, drained, CommandProcessor, Host, Job, SliceEnd};
use crate::core::compute_engine::{Dispatch, DispatchOp, LoadError, StepEnd};
use crate::core::copy_engine::Step;
use crate::core::dma::GpuMemory;
use crate::core::inject::{Injector, StepVerdict};
use crate::core::mmu::{self, Mem, MmuFault};
use crate::core::poison::Poison;
use crate::core::ring::{InFlight, Op};
use crate::core::telemetry::{Stats, TraceKind, TraceRecord};

/// Boundaries between two looks at the clock.
const CLOCK_EVERY: u32 = 64;

/// What executing one step of an in-flight operation did.
pub(super) enum Exec {
    Done,
    Progress,
    Blocked(u64),
    Fault(MmuFault),
    KernelFault(MmuFault, u64),
    /// An engine error; with the PC of a kernel instruction, reported in
    /// the event's `header` field instead of the packet header.
    Error(EngineError, Option<u32>),
}

/// What the fault injector made of a step.
enum Injected {
    /// Execute the step.
    Go,
    /// Back to the top of the loop (attention and slice checks first).
    Again,
    /// Held: back to the top of the loop without ending the slice.
    Stall,
    /// The slice ends.
    End(SliceEnd),
}

impl CommandProcessor {
    /// Runs `job`'s packets until the slice ends.
    pub(super) fn run(
        &mut self,
        host: &dyn Host,
        mem: &Mem,
        job: &mut Job,
        stats: &mut Stats,
    ) -> SliceEnd {
        let mut until_clock = CLOCK_EVERY;
        loop {
            if host.attention() {
                // A ring with nothing left was not interrupted: a reset
                // arriving right after its last packet finds the engine idle.
                return if drained(job) {
                    SliceEnd::Idle
                } else {
                    SliceEnd::Interrupted
                };
            }
            until_clock -= 1;
            if until_clock == 0 {
                until_clock = CLOCK_EVERY;
                if host.slice_over() {
                    return SliceEnd::Yield;
                }
            }
            if let Some(mut fl) = job.cursor.pending {
                #[cfg(test)]
                match host.take_test_panic() {
                    Some(TestPanic::Slice) => {
                        panic!("engine {}: panic requested by a test", self.engine)
                    }
                    Some(TestPanic::ComputeUnit) => self.test_panic_unit = true,
                    None => {}
                }
                match self.inject_step(host, mem, job, &mut fl, stats) {
                    Injected::Go => {}
                    Injected::Again => continue,
                    Injected::Stall => {
                        // A held packet owns its engine: no slice end,
                        // except that another virtual function takes a
                        // shared engine back at the end of this one's
                        // slice. The packet stays held for the function's
                        // next turn (its hang lasts until its reset).
                        if host.function_slice_over() {
                            return SliceEnd::Yield;
                        }
                        until_clock = CLOCK_EVERY;
                        continue;
                    }
                    Injected::End(end) => return end,
                }
                let poison = host.injector().map(Injector::poison);
                let r = if let Op::Dispatch(d) = &mut fl.op {
                    // A step is long next to a packet: look at the clock
                    // after each.
                    until_clock = 1;
                    self.dispatch_step(mem, poison, job, d, stats)
                } else {
                    let tap = self.record.as_deref().map(|r| r.tap(self.engine));
                    let mut gm = GpuMemory::new(mem, &mut self.tlb, job.space)
                        .with_poison(poison)
                        .with_tap(tap);
                    execute(host, &mut gm, &mut fl.op, stats)
                };
                job.cursor.pending = Some(fl);
                if self.fetch.track {
                    if let Some(end) = self.san_step(host, mem, job, &fl, &r) {
                        return end;
                    }
                }
                match r {
                    Exec::Progress => {}
                    Exec::Done => {
                        if let Some(inj) = host.injector() {
                            let mut post = Vec::new();
                            let mut gm = GpuMemory::new(mem, &mut self.tlb, job.space);
                            inj.on_done(host.now_ns(), &job.site(), &fl, &mut gm, &mut post);
                            host.post_burst(post);
                        }
                        if let Some(end) = self.complete(host, mem, job, stats) {
                            return end;
                        }
                    }
                    Exec::Blocked(epoch) => return SliceEnd::SemWait { epoch },
                    Exec::Fault(fault) if fault.is_ecc() => {
                        return SliceEnd::Error {
                            code: EngineError::EccUncorrectable,
                            packet_va: fl.packet_va,
                            header: fl.header,
                        }
                    }
                    Exec::KernelFault(fault, lane_pc) if fault.is_ecc() => {
                        // As for other errors of a kernel instruction: its pc.
                        return SliceEnd::Error {
                            code: EngineError::EccUncorrectable,
                            packet_va: fl.packet_va,
                            header: (lane_pc >> 32) as u32,
                        };
                    }
                    Exec::Fault(fault) => {
                        return SliceEnd::Fault {
                            fault,
                            packet_va: fl.packet_va,
                        }
                    }
                    Exec::KernelFault(fault, lane_pc) => {
                        return SliceEnd::KernelFault {
                            fault,
                            packet_va: fl.packet_va,
                            lane_pc,
                        }
                    }
                    Exec::Error(code, pc) => {
                        return SliceEnd::Error {
                            code,
                            packet_va: fl.packet_va,
                            header: pc.unwrap_or(fl.header),
                        }
                    }
                }
                continue;
            }
            if let Some(end) = self.next_packet(host, mem, job, stats) {
                return end;
            }
        }
    }

    /// Asks the fault injector about the next step of `fl`. A held packet
    /// keeps the engine busy (the slice goes on until a mailbox request
    /// interrupts it, as a stuck engine would); a skipped packet is retired without executing; an injected
    /// fault ends the slice.
    fn inject_step(
        &mut self,
        host: &dyn Host,
        mem: &Mem,
        job: &mut Job,
        fl: &mut InFlight,
        stats: &mut Stats,
    ) -> Injected {
        let Some(inj) = host.injector() else {
            return Injected::Go;
        };
        let mut post = Vec::new();
        // A walk that leaves the TLB as it is: the injector's own look-up.
        let space = job.space;
        let translate = |va: u64| {
            mmu::walk(mem, &space, va, Access::Read)
                .ok()
                .map(|m| m.pa(va))
        };
        let verdict = inj.on_step(host.now_ns(), &job.site(), fl, &translate, &mut post);
        host.post_burst(post);
        match verdict {
            StepVerdict::Go => Injected::Go,
            StepVerdict::Hold => Injected::Stall,
            StepVerdict::FirmwareDown(class) => {
                host.firmware_down(class, job.ctx, job.engine, fl.packet_va);
                Injected::Stall
            }
            StepVerdict::Skip => {
                job.cursor.pending = None;
                advance(job, fl.words);
                count_packet(job, stats);
                Injected::Again
            }
            StepVerdict::Fault(fault) => Injected::End(SliceEnd::Fault {
                fault,
                packet_va: fl.packet_va,
            }),
        }
    }

    /// The in-flight packet finished: advance past it, count it, and for a
    /// fence update the status block and post the event.
    fn complete(
        &mut self,
        host: &dyn Host,
        mem: &Mem,
        job: &mut Job,
        stats: &mut Stats,
    ) -> Option<SliceEnd> {
        let fl = job.cursor.pending?;
        // Before the cursor moves past the packet: its reports name it.
        if self.fetch.track {
            if let Some(end) = self.san_complete(host, mem, job, &fl) {
                job.cursor.pending = None;
                advance(job, fl.words);
                count_packet(job, stats);
                return Some(end);
            }
        }
        job.cursor.pending = None;
        advance(job, fl.words);
        count_packet(job, stats);
        let now = self.trace_clock(host);
        if self.trace.is_some() {
            let base = self.trace_base(
                TraceKind::Packet,
                opcode_name(fl.opcode),
                job,
                fl.started_ns,
            );
            self.record(TraceRecord {
                dur_ns: now.saturating_sub(fl.started_ns),
                packet_va: fl.packet_va,
                ..base
            });
        }
        if let Op::Fence { va, seqno, flags } = fl.op {
            job.cursor.last_fence = seqno;
            if let Some(inj) = host.injector() {
                inj.on_fence(host.now_ns(), job.ctx, job.engine, seqno);
            }
            stats.fences += 1;
            self.record_instant(TraceKind::Fence, "fence", job, now, fl.packet_va, seqno);
            if !job.status_broken {
                let status = job.status();
                if let Err(f) = self.write_status(mem, job.space, job.status_va, &status) {
                    return Some(SliceEnd::StatusFault(f));
                }
            }
            if flags & FENCE_NO_EVENT == 0 {
                host.post(Event::Fence {
                    ctx_id: job.ctx,
                    engine: job.engine,
                    seqno,
                    va,
                });
            }
            host.semaphores_changed();
        }
        if matches!(fl.op, Op::SemSignal { .. }) {
            host.semaphores_changed();
        }
        None
    }

    /// One step of a dispatch of `job`'s ring: loads it first if needed.
    fn dispatch_step(
        &mut self,
        mem: &Mem,
        poison: Option<&Poison>,
        job: &Job,
        op: &mut DispatchOp,
        stats: &mut Stats,
    ) -> Exec {
        let ctx = job.ctx;
        let found = self
            .dispatches
            .iter()
            .position(|(c, t, _)| *c == ctx && *t == op.token && op.token != 0);
        let idx = match found {
            Some(i) => i,
            None => {
                let tap = self.record.as_deref().map(|r| r.tap(self.engine));
                let mut gm = GpuMemory::new(mem, &mut self.tlb, job.space)
                    .with_poison(poison)
                    .with_tap(tap);
                let units = self.cu_tlbs.len();
                let d = match Dispatch::load(op, &mut gm, self.generation, units, &self.kernels) {
                    Ok(d) => d,
                    Err(LoadError::Fault(f)) => return Exec::Fault(f),
                    Err(LoadError::Invalid(code)) => return Exec::Error(code, None),
                };
                op.token = self.next_token;
                self.next_token = self.next_token.wrapping_add(1).max(1);
                self.dispatches.retain(|(c, _, _)| *c != ctx);
                self.dispatches.push((ctx, op.token, d));
                self.dispatches.len() - 1
            }
        };
        let Some((_, _, d)) = self.dispatches.get_mut(idx) else {
            return Exec::Error(EngineError::BadOperand, None);
        };
        #[cfg(test)]
        {
            d.test_panic = std::mem::take(&mut self.test_panic_unit);
        }
        let tap = self.record.as_deref().map(|r| r.tap(self.engine));
        let (end, st) = d.step(mem, job.space, &mut self.cu_tlbs, poison, tap);
        stats.workgroups += st.workgroups;
        stats.lane_ops += st.lane_ops;
        stats.cycles += st.cycles;
        let r = match end {
            StepEnd::Progress => return Exec::Progress,
            StepEnd::Done => Exec::Done,
            StepEnd::Error { code, pc } => Exec::Error(code, Some(pc)),
            StepEnd::Fault { fault, lane_pc } => Exec::KernelFault(fault, lane_pc),
            StepEnd::Internal => {
                // The units start again from nothing.
                for t in &mut self.cu_tlbs {
                    t.flush();
                }
                Exec::Error(EngineError::Internal, None)
            }
        };
        self.dispatches.swap_remove(idx);
        r
    }
}

/// Whether a `SEM_WAIT` with `op` and operand `value` is satisfied by the
/// semaphore value `cur`.
pub fn sem_satisfied(op: u32, cur: u64, value: u64) -> bool {
    match op {
        SEM_WAIT_GEQ => cur >= value,
        SEM_WAIT_EQ => cur == value,
        SEM_WAIT_NEQ => cur != value,
        _ => false,
    }
}

/// One step of an in-flight operation.
fn execute(host: &dyn Host, gm: &mut GpuMemory<'_>, op: &mut Op, stats: &mut Stats) -> Exec {
    let r = match op {
        Op::Fence { va, seqno, .. } => gm.write_u64(*va, *seqno).map(|()| Exec::Done),
        Op::Timestamp { va } => gm.write_u64(*va, host.now_ns()).map(|()| Exec::Done),
        Op::SemSignal { va, value, op } => {
            if *op == SEM_SIGNAL_ADD {
                gm.atomic_add_u64(*va, *value).map(|_| Exec::Done)
            } else {
                gm.write_u64(*va, *value).map(|()| Exec::Done)
            }
        }
        Op::SemWait { va, value, op } => {
            let epoch = host.sem_epoch();
            gm.read_u64(*va, Access::Read).map(|cur| {
                if sem_satisfied(*op, cur, *value) {
                    Exec::Done
                } else {
                    Exec::Blocked(epoch)
                }
            })
        }
        // Run by `CommandProcessor::dispatch_step`.
        Op::Dispatch(_) => Ok(Exec::Done),
        Op::Copy(c) => c.step(gm).map(|s| match s {
            Step::Progress(n) => {
                stats.bytes += n;
                Exec::Progress
            }
            Step::Done(n) => {
                stats.bytes += n;
                Exec::Done
            }
        }),
    };
    r.unwrap_or_else(Exec::Fault)
}
