// SPDX-License-Identifier: GPL-2.0

//! Records of the GPU block's failures, no I/O and no locks: what the state
//! keeps (the fault and reset logs, the counters, the last hang dump, the
//! devcoredumps waiting and written) and what a snapshot of it holds. The
//! state (`state.rs`) stores them; the dump blocks (`dump.rs`,
//! `coredump.rs`) make and write them.

use super::ring::{
    RingSw,
    SlotMemory,
    ENGINES,
    RING_SIZE, //
};
use crate::{capture::reason, file::Client, proto::RingStatus, time::elapsed_ns};
use core::fmt;
use kernel::{
    prelude::*,
    sync::Arc, //
};

/// A logged fault.
#[derive(Clone, Copy)]
pub(crate) struct FaultLog {
    pub(crate) hw: u32,
    pub(crate) engine: u8,
    pub(crate) va: u64,
    pub(crate) access: u8,
    pub(crate) reason: u8,
    pub(crate) served: bool,
}

/// A logged reset.
#[derive(Clone, Copy)]
pub(crate) struct ResetLog {
    pub(crate) hw: u32,
    pub(crate) engine: u32,
    pub(crate) kind: &'static str,
    pub(crate) ok: bool,
    pub(crate) ms: u64,
}

/// Device-wide counters of the GPU block.
#[derive(Clone, Copy, Default)]
pub(crate) struct GpuCounters {
    pub(crate) fences_signalled: u64,
    /// Fence values found written with no `FENCE` event (lost interrupts).
    pub(crate) missed_fence_events: u64,
    /// `FENCE` events ahead of the fence value in memory (not believed).
    pub(crate) early_fence_events: u64,
    /// `FENCE` events for seqnos already announced.
    pub(crate) duplicate_fence_events: u64,
    /// Seqnos jumped over by `FENCE` events (lost interrupts or fences
    /// never written, seen when a later fence's event arrives).
    pub(crate) skipped_fence_events: u64,
    /// Refused posted doorbells rung again.
    pub(crate) doorbells_rung_again: u64,
    pub(crate) faults: u64,
    pub(crate) hangs: u64,
    pub(crate) engine_resets: u64,
    pub(crate) device_resets: u64,
    /// Firmware crashes and missed heartbeats recovered (or that wedged
    /// the device).
    pub(crate) firmware_failures: u64,
}

/// Bytes of the buffer the device writes capture chunks into.
pub(crate) const CAPTURE_BUF_BYTES: usize = 64 << 10;
/// A dump waiting to be written.
pub(crate) struct PendingDump {
    pub(crate) snap: KBox<Snapshot>,
    /// The failing context's file (for its mappings).
    pub(crate) client: Option<Arc<Client>>,
    /// The capture `CAPTURE` returned (hangs), else the newest of the
    /// context is read.
    pub(crate) capture: Option<u32>,
    pub(crate) capture_ms: u64,
    pub(crate) capture_status: &'static str,
}

/// One dump in the history (debugfs `coredumps`).
#[derive(Clone, Copy)]
pub(crate) struct DumpLog {
    pub(crate) seq: u64,
    pub(crate) why: &'static str,
    pub(crate) hw: u32,
    pub(crate) handle: u32,
    pub(crate) engine: usize,
    pub(crate) capture: u32,
    pub(crate) capture_bytes: usize,
    pub(crate) total_bytes: usize,
    pub(crate) capture_ms: u64,
    pub(crate) read_ms: u64,
    pub(crate) build_ms: u64,
    pub(crate) outcome: &'static str,
}

/// Words of ring contents a hang dump keeps (around the read pointer).
pub(crate) const DUMP_WORDS: usize = 32;

/// Which context and ring hung.
pub(crate) struct HangSite {
    /// Device slot.
    pub(crate) hw: u32,
    /// Engine.
    pub(crate) engine: usize,
    /// The id userspace knows the context by.
    pub(crate) handle: u32,
    /// The owning file's client id.
    pub(crate) client: u64,
    /// The context's page-table root.
    pub(crate) pt_root: u64,
}

/// What a hang looked like when it was detected.
pub(crate) struct HangDump {
    site: HangSite,
    status: RingStatus,
    wptr: u32,
    completed: u64,
    next_seqno: u64,
    pending: usize,
    /// Ring offset of `words[0]`.
    from: u32,
    words: [u32; DUMP_WORDS],
    /// Device context state bits (`CONTEXT_QUERY`), if it answered.
    hw_state: Option<u32>,
    /// Nanoseconds since the ring last completed a job.
    stalled_ns: u64,
}

impl HangDump {
    /// Captures ring `site.engine` of slot `site.hw`: pointers, fences and
    /// the ring words around the read pointer.
    pub(crate) fn capture(
        mem: &SlotMemory,
        site: HangSite,
        r: &RingSw,
        hw_state: Option<u32>,
    ) -> HangDump {
        let status = mem.status(site.hw, site.engine);
        let from = status.rptr.wrapping_sub(8 * 4) % RING_SIZE;
        let mut words = [0u32; DUMP_WORDS];
        for (i, w) in words.iter_mut().enumerate() {
            *w = mem.ring_word(site.hw, site.engine, from as usize / 4 + i);
        }
        HangDump {
            status,
            wptr: r.wptr,
            completed: r.completed,
            next_seqno: r.next_seqno,
            pending: r.jobs.len(),
            from,
            words,
            hw_state,
            stalled_ns: elapsed_ns(&r.progress_at),
            site,
        }
    }

    /// Prints the dump (debugfs `hang_dump`).
    pub(crate) fn show(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.site;
        writeln!(
            f,
            "hang ctx {} (client {} handle {}) engine {} pt_root {:#x} stalled {} ms",
            s.hw,
            s.client,
            s.handle,
            s.engine,
            s.pt_root,
            self.stalled_ns / 1_000_000
        )?;
        let st = &self.status;
        writeln!(
            f,
            "ring rptr {:#x} wptr {:#x} state {} error {} error_rptr {:#x} last_fence {} packets {}",
            st.rptr, self.wptr, st.state, st.error, st.error_rptr, st.last_fence, st.packets
        )?;
        writeln!(
            f,
            "fences completed {} next {} pending {} device_state {}",
            self.completed,
            self.next_seqno,
            self.pending,
            self.hw_state.map_or(-1, i64::from)
        )?;
        for (i, chunk) in self.words.chunks(4).enumerate() {
            let off = (self.from + (i * 16) as u32) % RING_SIZE;
            write!(f, "{:05x}:", off)?;
            for w in chunk {
                write!(f, " {:08x}", w)?;
            }
            let at = st.rptr % RING_SIZE;
            if (off..off + 16).contains(&at) {
                write!(f, "  <- rptr")?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

/// Why a devcoredump is taken.
#[derive(Clone, Copy)]
pub(crate) enum Why {
    /// The hang check found the ring hung.
    Hang,
    /// An aborted page fault stopped the ring.
    Fault {
        /// Faulting VA.
        va: u64,
        /// `Access` number.
        access: u8,
        /// `FaultReason` number.
        reason: u8,
        /// Walk level.
        level: u8,
    },
    /// An engine error stopped the ring.
    EngineError {
        /// `EngineError` code.
        code: u32,
    },
    /// Asked for through debugfs.
    Manual,
}

impl Why {
    /// The name in the dump (the capture reason's name).
    pub(crate) fn name(&self) -> &'static str {
        reason::name(self.device_reason())
    }

    /// The device capture reason that matches.
    pub(crate) fn device_reason(&self) -> u32 {
        match self {
            Why::Hang => reason::HANG,
            Why::Fault { .. } => reason::FAULT,
            Why::EngineError { .. } => reason::ENGINE_ERROR,
            Why::Manual => reason::DRIVER,
        }
    }
}

/// A ring as the snapshot keeps it.
pub(crate) struct RingLine {
    pub(crate) present: bool,
    pub(crate) wptr: u32,
    pub(crate) completed: u64,
    pub(crate) next_seqno: u64,
    pub(crate) evt_seqno: u64,
    pub(crate) done_upto: u64,
    pub(crate) pending: usize,
    pub(crate) exported: usize,
    pub(crate) stalled_ms: u64,
    pub(crate) status: RingStatus,
}

/// A context as the snapshot keeps it.
pub(crate) struct CtxLine {
    pub(crate) hw: u32,
    pub(crate) handle: u32,
    pub(crate) client: u64,
    pub(crate) pid: u32,
    pub(crate) priority: u32,
    pub(crate) engines: u32,
    pub(crate) flags: u32,
    pub(crate) pt_root: u64,
    pub(crate) kmd_va: u64,
    pub(crate) state: &'static str,
    pub(crate) reset: u32,
    pub(crate) hangs: u32,
    pub(crate) faults: u32,
    pub(crate) engine_error: u32,
    pub(crate) fault_va: u64,
    pub(crate) rings: [RingLine; ENGINES],
}

/// A job in flight.
pub(crate) struct JobLine {
    pub(crate) hw: u32,
    pub(crate) engine: usize,
    pub(crate) seqno: u64,
    pub(crate) words: usize,
}

/// Jobs listed at most.
pub(crate) const MAX_JOBS: usize = 256;

/// The driver's state at a failure, copied under the state lock.
pub(crate) struct Snapshot {
    /// Why.
    pub(crate) why: Why,
    /// The failing context's slot, engine and id.
    pub(crate) hw: u32,
    pub(crate) engine: usize,
    pub(crate) handle: u32,
    /// Guest monotonic time of the failure (ns).
    pub(crate) time_ns: u64,
    pub(crate) ctxs: KVec<CtxLine>,
    pub(crate) jobs: KVec<JobLine>,
    pub(crate) jobs_cut: bool,
    pub(crate) resets: KVec<ResetLog>,
    pub(crate) faults: KVec<FaultLog>,
    pub(crate) counters: GpuCounters,
}
