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

use super::state::{push_log, FaultLog, Gpu};
use crate::{
    dev_info_ratelimited, dev_warn_ratelimited,
    event::{
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

impl Gpu {
    /// A `FAULT` event: serve a replayable fault on a lazy mapping, abort
    /// anything else.
    pub(crate) fn on_fault(&self, va: u64, info: FaultInfo, fault_id: u64) {
        let hw = u32::from(info.ctx_id);
        let access = Access::from_u8(info.access).map_or("?", |a| a.name());
        let reason = FaultReason::from_u8(info.reason);
        let replayable = info.flags & FAULT_FLAG_REPLAYABLE != 0;
        // Decide.
        let found = {
            let mut g = self.state.lock();
            g.counters.faults += 1;
            g.slot(hw).map(|c| {
                c.faults = c.faults.saturating_add(1);
                (c.handle, c.client.clone())
            })
        };
        let Some((handle, client)) = found else {
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
        let mut served = false;
        if replayable && reason == Some(FaultReason::NotPresent) {
            let page = client.vm.lock().fault_in(va);
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
        dev_info_ratelimited!(
            self.pdev(),
            "GPU fault: context {} (slot {}) engine {} va {:#x} access {} reason {} level {}: {}\n",
            handle,
            hw,
            info.engine,
            va,
            access,
            reason.map_or("?", |r| r.name()),
            info.level,
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
        if !served {
            if let Some(c) = g.slot_of(hw, handle) {
                c.record_fault(va, u32::from(info.access), u32::from(info.reason));
                if let Some(r) = c.rings.get_mut(usize::from(info.engine)) {
                    r.fail_pending();
                }
            }
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
        if let Ok(mem) = self.slots() {
            g.release_failed(mem);
        }
        drop(g);
        self.wake();
    }

    /// An `ENGINE_ERROR` event: the ring stopped on a packet; the context is
    /// errored and guilty, the ring's pending jobs fail.
    pub(crate) fn on_engine_error(&self, ctx_id: u32, engine: u32, code: u32) {
        let name = EngineError::from_u32(code).map_or("?", |c| c.name());
        let mut g = self.state.lock();
        let handle = g.slot(ctx_id).map(|c| {
            c.record_engine_error(code);
            if let Some(r) = c.rings.get_mut(engine as usize) {
                r.fail_pending();
            }
            c.handle
        });
        if let Ok(mem) = self.slots() {
            g.release_failed(mem);
        }
        drop(g);
        match handle {
            Some(h) => dev_warn_ratelimited!(
                self.pdev(),
                "engine {} stopped context {} (slot {}): {}\n",
                engine,
                h,
                ctx_id,
                name
            ),
            None => dev_warn_ratelimited!(
                self.pdev(),
                "engine {} stopped unknown context slot {}: {}\n",
                engine,
                ctx_id,
                name
            ),
        }
        self.wake();
    }
}
