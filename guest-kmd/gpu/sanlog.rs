// SPDX-License-Identifier: GPL-2.0

//! What the driver keeps of the device sanitizer's reports, and the bug
//! planted on purpose (no I/O): the data [`super::sanitizer`] fills and
//! the GPU state holds.

use crate::sanitize::{SanReport, CHECKS};
use kernel::prelude::*;

/// Reports kept (debugfs `sanitizer`, `DRM_IOCTL_VGPU_SAN_REPORT`).
pub(crate) const SAN_KEEP: usize = 64;

/// A driver mistake committed on purpose, once (debugfs `sanitizer_plant`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Plant {
    /// The next `SUBMIT` rings before it writes its packets.
    DoorbellEarly,
    /// The next `VM_UNBIND` skips its TLB invalidation.
    SkipTlbInvalidate,
    /// The next `SUBMIT` (seqno ≥ 2) writes its fence slot backwards first.
    FenceBackwards,
    /// The next `SUBMIT` rings with a write pointer one word short of its
    /// packets' end (inside the last packet).
    DoorbellMidPacket,
    /// The next eviction from VRAM neither clears the object's mappings
    /// nor invalidates its owner's TLBs before the copy (it maps the
    /// object onto its new pages after): cached translations keep reaching
    /// the old VRAM, which the device names as the moved object's.
    MoveNoInvalidate,
}

impl Plant {
    /// Every planted bug, with its debugfs name.
    pub(crate) const ALL: [(Plant, &'static str); 5] = [
        (Plant::DoorbellEarly, "doorbell-early"),
        (Plant::SkipTlbInvalidate, "skip-tlb-invalidate"),
        (Plant::FenceBackwards, "fence-backwards"),
        (Plant::DoorbellMidPacket, "doorbell-mid-packet"),
        (Plant::MoveNoInvalidate, "move-no-invalidate"),
    ];

    /// The bug named `s` (`Ok(None)` for `none`).
    ///
    /// # Errors
    ///
    /// `EINVAL` for an unknown name.
    pub(crate) fn parse(s: &[u8]) -> Result<Option<Plant>> {
        let s = s.trim_ascii();
        if s == b"none" {
            return Ok(None);
        }
        Plant::ALL
            .iter()
            .find(|(_, n)| n.as_bytes() == s)
            .map(|&(p, _)| Some(p))
            .ok_or(EINVAL)
    }

    /// Its name.
    pub(crate) fn name(self) -> &'static str {
        Plant::ALL
            .iter()
            .find(|(p, _)| *p == self)
            .map_or("?", |(_, n)| n)
    }
}

/// A report as the driver keeps it.
#[derive(Clone, Copy)]
pub(crate) struct SanEntry {
    /// The device's report.
    pub(crate) r: SanReport,
    /// The context's id (`CTX_CREATE`'s handle), 0 if unknown.
    pub(crate) handle: u32,
    /// The client (file) that owns it, 0 if unknown.
    pub(crate) client: u64,
    /// The prior access's context id, if the same file owns it (else 0).
    pub(crate) prior_handle: u32,
}

/// Reports received, kept and counted.
pub(crate) struct SanLog {
    pub(crate) kept: KVec<SanEntry>,
    pub(crate) total: u64,
    pub(crate) by_check: [u64; CHECKS],
    /// Reports whose `SAN_REPORT` failed (only the event's fields kept).
    pub(crate) partial: u64,
    /// A planted bug not committed yet.
    pub(crate) plant: Option<Plant>,
}

impl SanLog {
    /// No reports.
    pub(crate) fn new() -> SanLog {
        SanLog {
            kept: KVec::new(),
            total: 0,
            by_check: [0; CHECKS],
            partial: 0,
            plant: None,
        }
    }
}

impl SanLog {
    /// Takes the planted bug `p` if it is armed (under the state lock).
    pub(crate) fn take(&mut self, p: Plant) -> bool {
        if self.plant == Some(p) {
            self.plant = None;
            true
        } else {
            false
        }
    }
}
