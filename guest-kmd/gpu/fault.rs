// SPDX-License-Identifier: GPL-2.0

//! The events that stop a ring: page faults and engine errors.
//!
//! A replayable fault (contexts created with `VGPU_CTX_CREATE_REPLAYABLE`)
//! on a not-present page of a lazy BO mapping is served: the page is mapped,
//! the context's TLB invalidated for it, and the job resumed (`FAULT_RESUME`
//! retry). Any other fault aborts: the ring stops, the context is marked
//! errored and guilty, its pending jobs fail, and `CTX_QUERY` reports the
//! address, access and reason. An `ENGINE_ERROR` (a malformed packet, a
//! trap, an uncorrectable memory error) errors the context the same way and
//! records the engine-error code.
//!
//! Both run in the event interrupt thread. Serving a fault talks to the
//! device (`TLB_INVALIDATE`, `FAULT_RESUME`), so the state lock is taken to
//! decide, dropped for the commands, and taken again to record; the context
//! is found again by slot and id, in case it went meanwhile.

use super::{
    records::Why,
    ring::{ring_va, Located},
    state::{push_log, ErrorAt, FaultLog, Gpu},
};
use crate::{
    describe::HeaderWord,
    dev_info_ratelimited, dev_warn_ratelimited,
    event::{
        EngineErrorRecord,
        FaultInfo,
        FAULT_FLAG_REPLAYABLE, //
    },
    mmu::{
        Access,
        FaultReason, //
    },
    packet::EngineError,
    proto::{
        Command,
        FAULT_RESUME_ABORT,
        FAULT_RESUME_RETRY, //
    },
    vm::PAGE_4K,
};
use kernel::{
    bindings,
    prelude::*,
    sync::atomic::Relaxed, //
};

/// Where a located packet is, as text: `SUBMIT seqno 5 command buffer 1
/// +0x40`, or `SUBMIT seqno 5, a KMD packet`.
struct Where(Option<Located>);

impl core::fmt::Display for Where {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.0 {
            Some(Located {
                seqno,
                cmd_index: Some(i),
                cmd_offset,
            }) => write!(
                f,
                "SUBMIT seqno {} command buffer {} +{:#x}",
                seqno, i, cmd_offset
            ),
            Some(Located { seqno, .. }) => write!(f, "SUBMIT seqno {}, a KMD packet", seqno),
            None => write!(f, "no pending SUBMIT"),
        }
    }
}

impl Gpu {
    /// A `FAULT` event: serve a replayable fault on a lazy mapping, abort
    /// anything else.
    pub(crate) fn on_fault(&self, va: u64, info: FaultInfo, fault_id: u64, packet_va: u64) {
        let hw = u32::from(info.ctx_id);
        let access = Access::from_u8(info.access).map_or("?", |a| a.name());
        let reason = FaultReason::from_u8(info.reason);
        let replayable = info.flags & FAULT_FLAG_REPLAYABLE != 0;
        // Decide.
        let generation = self.hw.generation();
        let found = {
            let mut g = self.state.lock();
            g.counters.faults += 1;
            g.slot(hw).map(|c| {
                c.faults = c.faults.saturating_add(1);
                let e = usize::from(info.engine);
                let loc = c
                    .rings
                    .get(e)
                    .and_then(|r| r.locate_va(generation, ring_va(c.kmd_va, e), packet_va));
                (c.handle, c.client.clone(), loc)
            })
        };
        let Some((handle, client, loc)) = found else {
            dev_warn_ratelimited!(
                self.pdev(),
                "fault of unknown context slot {} at {:#x}\n",
                hw,
                va
            );
            if replayable {
                let _ = self.cmd(Command::FaultResume {
                    ctx_id: hw,
                    action: FAULT_RESUME_ABORT,
                    fault_id,
                });
            }
            return;
        };
        // Talk to the device, no GPU lock held.
        // LAB(5) BEGIN serve-fault
        let mut served = false;
        if replayable && reason == Some(FaultReason::NotPresent) {
            let faulted = client.vm.lock().fault_in(va);
            // Pages pinned by this fault are declared to the device's
            // sanitizer before the job may touch them (no lock held).
            let page = faulted.map(|(page, declare)| {
                let san = client.vm.lock().san();
                if let (Some(ranges), Some(san)) = (declare, san) {
                    if let Ok(d) = san.declare(ranges) {
                        client.vm.lock().attach(page, d);
                    }
                }
                page
            });
            if let Ok(page) = page {
                served = self
                    .cmd(Command::TlbInvalidate {
                        ctx_id: hw,
                        engine_mask: 0,
                        va: page,
                        size: PAGE_4K,
                    })
                    .is_ok()
                    && self
                        .cmd(Command::FaultResume {
                            ctx_id: hw,
                            action: FAULT_RESUME_RETRY,
                            fault_id,
                        })
                        .is_ok();
            }
        }
        // LAB(5) END serve-fault
        dev_info_ratelimited!(
            self.pdev(),
            "GPU fault: context {} (slot {}) engine {} va {:#x} access {} reason {} level {} at packet {:#x} ({}): {}\n",
            handle,
            hw,
            info.engine,
            va,
            access,
            reason.map_or("?", |r| r.name()),
            info.level,
            packet_va,
            format_args!("{}", Where(loc)),
            if served {
                "mapped lazily, retrying"
            } else {
                "job aborted, context errored"
            }
        );
        if !served && replayable {
            let _ = self.cmd(Command::FaultResume {
                ctx_id: hw,
                action: FAULT_RESUME_ABORT,
                fault_id,
            });
        }
        // Record.
        let mut g = self.state.lock();
        let mut gone = KVec::new();
        if !served {
            // The driver's state as the fault left it, for the devcoredump.
            if let Ok(mem) = self.slots() {
                let why = Why::Fault {
                    va,
                    access: info.access,
                    reason: info.reason,
                    level: info.level,
                };
                self.queue_dump(&mut g, mem, why, hw, usize::from(info.engine), handle);
            }
            if let Some(c) = g.slot_of(hw, handle) {
                c.record_fault(va, u32::from(info.access), u32::from(info.reason));
                c.record_fault_at(ErrorAt {
                    packet_va,
                    header: 0,
                    engine: u32::from(info.engine),
                    depth: u32::from(loc.is_some_and(|l| l.cmd_index.is_some())),
                    seqno: loc.map_or(0, |l| l.seqno),
                    cmd_index: loc.and_then(|l| l.cmd_index),
                    cmd_offset: loc.map_or(0, |l| l.cmd_offset),
                });
                gone = c.fail_ring(usize::from(info.engine), -(bindings::EIO as i32));
            }
            // The context's other queues fail once their rings drained.
            self.pump_wanted.store(true, Relaxed);
        }
        push_log(
            &mut g.faults_log,
            FaultLog {
                hw,
                engine: info.engine,
                va,
                access: info.access,
                reason: info.reason,
                served,
            },
        );
        self.hw.trace.fault(hw, u32::from(info.engine), va, served);
        if let Ok(mem) = self.slots() {
            g.release_failed(mem);
        }
        drop(g);
        drop(gone);
        self.wake();
    }

    /// An `ENGINE_ERROR` event: the ring stopped on a packet; the context is
    /// errored and guilty, the ring's pending jobs fail. The message names
    /// the packet: its VA, its header decoded, and where it is in what the
    /// application submitted.
    pub(crate) fn on_engine_error(&self, p: &EngineErrorRecord) {
        let (ctx_id, engine, code) = (p.ctx_id, p.engine, p.code);
        let name = EngineError::from_u32(code).map_or("?", |c| c.name());
        self.hw
            .trace
            .engine_error(ctx_id, engine, code, name, p.packet_va);
        let generation = self.hw.generation();
        let mut g = self.state.lock();
        let mut loc = None;
        if let (Ok(mem), Some(h)) = (self.slots(), g.slot(ctx_id).map(|c| c.handle)) {
            let why = Why::EngineError { code };
            self.queue_dump(&mut g, mem, why, ctx_id, engine as usize, h);
        }
        let mut gone = KVec::new();
        let handle = g.slot(ctx_id).map(|c| {
            if let Some(r) = c.rings.get_mut(engine as usize) {
                loc = r.locate(generation, p.rptr, p.depth, p.cmd_offset);
            }
            c.record_engine_error(
                code,
                ErrorAt {
                    packet_va: p.packet_va,
                    header: p.header,
                    engine,
                    depth: p.depth,
                    seqno: loc.map_or(0, |l| l.seqno),
                    cmd_index: loc.and_then(|l| l.cmd_index),
                    cmd_offset: loc.map_or(p.cmd_offset, |l| l.cmd_offset),
                },
            );
            gone = c.fail_ring(engine as usize, -(bindings::EIO as i32));
            c.handle
        });
        self.pump_wanted.store(true, Relaxed);
        if let Ok(mem) = self.slots() {
            g.release_failed(mem);
        }
        drop(g);
        drop(gone);
        let header = HeaderWord {
            generation,
            word: p.header,
        };
        match handle {
            Some(h) => dev_warn_ratelimited!(
                self.pdev(),
                "engine {} stopped context {} (slot {}): {} (engine error {}) at packet {:#x} [{}], ring rptr {:#x} depth {}, {}\n",
                engine,
                h,
                ctx_id,
                name,
                code,
                p.packet_va,
                format_args!("{}", header),
                p.rptr,
                p.depth,
                format_args!("{}", Where(loc))
            ),
            None => dev_warn_ratelimited!(
                self.pdev(),
                "engine {} stopped unknown context slot {}: {} (engine error {}) at packet {:#x} [{}]\n",
                engine,
                ctx_id,
                name,
                code,
                p.packet_va,
                format_args!("{}", header)
            ),
        }
        self.wake();
    }
}
