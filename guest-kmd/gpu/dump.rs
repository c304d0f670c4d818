// SPDX-License-Identifier: GPL-2.0

//! The hang dump: what a hung ring looked like when the hang was detected,
//! for debugfs `hang_dump`.
//!
//! [`HangDump::capture`] copies it out of the ring memory and the driver's
//! ring state (no I/O: the caller asks the device for its view of the
//! context first and passes it in); [`HangDump::show`] prints it.

use super::ring::{
    RingSw,
    SlotMemory,
    RING_SIZE, //
};
use crate::{proto::RingStatus, time::elapsed_ns};
use core::fmt;

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
