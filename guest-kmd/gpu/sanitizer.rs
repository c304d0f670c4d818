// SPDX-License-Identifier: GPL-2.0

//! The device's driver sanitizer, seen from the driver: its reports, and
//! the bugs this driver can plant on purpose to be caught.
//!
//! With `vgpu-device --sanitize` the device reports each mistake it sees
//! the driver make (hwif `sanitize`, docs/sanitizer.md) as a `SANITIZER`
//! event naming the report. [`Gpu::on_sanitizer`] fetches the whole report
//! (`SAN_REPORT`, in the event thread, no GPU lock held), prints it
//! (rate-limited: a guest program can cause them), keeps the last
//! [`SAN_KEEP`] for debugfs `sanitizer` and for `DRM_IOCTL_VGPU_SAN_REPORT`,
//! and counts them per context (`CTX_QUERY`).
//!
//! # Planted bugs
//!
//! Writing a name to debugfs `sanitizer_plant` makes the driver commit one
//! mistake, once — what the sanitizer must catch, and what teaching labs
//! start from ([`Plant`](super::sanlog::Plant)):
//!
//! * `doorbell-early`: the next `SUBMIT` posts its doorbell *before* it
//!   writes the job's packets (1 ms later): `SAN-RING-UNPUBLISHED`;
//! * `skip-tlb-invalidate`: the next `VM_UNBIND` clears the entries and
//!   drops the mapping without `TLB_INVALIDATE`: the next GPU access
//!   through a cached translation is `SAN-TLB-STALE`;
//! * `fence-backwards`: the next `SUBMIT` whose seqno is 2 or more writes
//!   its fence slot with seqno − 2 before the real fence:
//!   `SAN-FENCE-REGRESS`.
//!
//! `none` clears a planted bug not yet committed.

use super::{
    sanlog::{
        Plant,
        SanEntry,
        SAN_KEEP, //
    },
    state::{Gpu, GpuState},
};
use crate::{
    describe::{
        PacketWords,
        PteText, //
    },
    dev_info_ratelimited, dev_warn_ratelimited,
    mmu::Access,
    pod::Pod,
    proto::{
        engine,
        Command,
        SanReportReply,
        CTX_NONE, //
    },
    sanitize::{
        Check,
        SanReport,
        SAN_FLAG_MOVED,
        SAN_FLAG_OBJECT,
        SAN_FLAG_PACKET,
        SAN_FLAG_PRIOR,
        SAN_FLAG_STOPPED,
        SAN_HISTORY,
        SAN_PACKET_WORDS, //
    },
};
use core::fmt;
use kernel::{prelude::*, sync::Arc, uapi};

fn engine_name(e: u32) -> &'static str {
    match e {
        engine::COPY => "copy",
        engine::COMPUTE => "compute",
        _ => "-",
    }
}

/// One report as text (dmesg and debugfs).
struct Line<'a> {
    e: &'a SanEntry,
    generation: u32,
}

impl fmt::Display for Line<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = &self.e.r;
        let id = Check::from_u32(r.check).map_or("SAN-?", |c| c.id());
        write!(f, "{} #{}", id, r.seq)?;
        if r.ctx_id != CTX_NONE {
            write!(f, " context {} (slot {})", self.e.handle, r.ctx_id)?;
        }
        if r.engine != engine::ALL {
            write!(f, " {}", engine_name(r.engine))?;
        }
        if r.packet_va != 0 {
            if r.depth == 0 {
                write!(f, " ring+{:#x}", r.cmd_offset)?;
            } else {
                write!(
                    f,
                    " rptr {:#x} depth {} cmdbuf+{:#x}",
                    r.rptr, r.depth, r.cmd_offset
                )?;
            }
            write!(f, " packet {:#x}", r.packet_va)?;
            if r.flags & SAN_FLAG_PACKET != 0 {
                let n = (r.packet_len as usize).min(SAN_PACKET_WORDS);
                write!(
                    f,
                    " [{}]",
                    PacketWords {
                        generation: self.generation,
                        words: &r.packet[..n],
                    }
                )?;
            }
        }
        if let Some(c) = Check::from_u32(r.check) {
            write!(f, ": {}", c.meaning())?;
        }
        if let Some(a) = Access::from_u8(r.access as u8) {
            write!(f, "; {} va {:#x} pa {:#x}", a.name(), r.va, r.pa)?;
        }
        if Check::from_u32(r.check).is_some_and(|c| c.family() == "pt") {
            // detail: the entry's address, its bits, level, index.
            write!(
                f,
                "; entry {} of level {} at {:#x} holds {:#x} [{}]",
                r.detail[3],
                r.detail[2],
                r.detail[0],
                r.detail[1],
                PteText {
                    level: r.detail[2] as u8,
                    bits: r.detail[1],
                }
            )?;
        }
        if r.check == Check::FwPoll as u32 {
            // detail: the gap, the least allowed (ns), the poll, the boot.
            write!(
                f,
                "; poll {} of boot {} came {} us after the previous one (at least {} us)",
                r.detail[2],
                r.detail[3],
                r.detail[0] / 1000,
                r.detail[1] / 1000
            )?;
        }
        if r.flags & SAN_FLAG_PRIOR != 0 {
            write!(
                f,
                "; prior: context {} (slot {}) {}",
                self.e.prior_handle,
                r.prior_ctx,
                engine_name(r.prior_engine)
            )?;
            if r.prior_packet_va != 0 {
                write!(f, " packet {:#x}", r.prior_packet_va)?;
            }
            write!(
                f,
                " {} us earlier",
                r.time_ns.saturating_sub(r.prior_time_ns) / 1000
            )?;
        }
        if r.flags & SAN_FLAG_OBJECT != 0 {
            let ago_us = r.time_ns.saturating_sub(r.released_ns) / 1000;
            if r.flags & SAN_FLAG_MOVED != 0 {
                write!(
                    f,
                    "; the page was bo {}'s (gen {}) until it moved {} us earlier (now gen {} at {:#x}): a mapping or TLB entry still reaches its old place",
                    r.object, r.object_gen, ago_us, r.object_gen_now, r.object_pa_now
                )?;
            } else {
                write!(
                    f,
                    "; the page was bo {}'s (gen {}) until it was given back {} us earlier: a use after free",
                    r.object, r.object_gen, ago_us
                )?;
            }
        }
        write!(
            f,
            "; detail {:#x} {:#x} {:#x} {:#x}",
            r.detail[0], r.detail[1], r.detail[2], r.detail[3]
        )?;
        if r.history.iter().any(|&w| w != 0) {
            write!(f, "; doorbells")?;
            for w in r.history.iter().take(SAN_HISTORY) {
                write!(f, " {:#x}", w)?;
            }
        }
        if r.flags & SAN_FLAG_STOPPED != 0 {
            write!(f, "; ring stopped")?;
        }
        if let Some(c) = Check::from_u32(r.check) {
            write!(f, "; hint: {}", c.hint())?;
        }
        Ok(())
    }
}

impl Gpu {
    /// A `SANITIZER` event: fetch, record and print report `seq`.
    pub(crate) fn on_sanitizer(
        &self,
        seq: u64,
        ctx_id: u32,
        engine: u32,
        check: u32,
        packet_va: u64,
        va: u64,
    ) {
        // Talk to the device, no GPU lock held.
        let fetched = self
            .cmd(Command::SanReport { seq })
            .and_then(|r| r.get::<SanReportReply>());
        let (r, partial) = match fetched {
            Ok(reply) => (reply.report, false),
            Err(_) => {
                let mut r = SanReport::zeroed();
                r.check = check;
                r.seq = seq;
                r.ctx_id = ctx_id;
                r.engine = engine;
                r.packet_va = packet_va;
                r.va = va;
                (r, true)
            }
        };
        // Record.
        let entry = {
            let mut g = self.state.lock();
            let (handle, client) = match g.slot(r.ctx_id) {
                Some(c) => {
                    c.san_reports = c.san_reports.saturating_add(1);
                    c.san_last_seq = r.seq;
                    (c.handle, c.client.id)
                }
                None => (0, 0),
            };
            let prior_handle = g
                .slot(r.prior_ctx)
                .filter(|c| c.client.id == client)
                .map_or(0, |c| c.handle);
            let e = SanEntry {
                r,
                handle,
                client,
                prior_handle,
            };
            Self::keep(&mut g, e, partial);
            e
        };
        let line = Line {
            e: &entry,
            generation: self.hw.generation(),
        };
        dev_warn_ratelimited!(self.pdev(), "sanitizer: {}\n", format_args!("{}", line));
    }

    fn keep(g: &mut GpuState, e: SanEntry, partial: bool) {
        let log = &mut g.san;
        log.total = log.total.saturating_add(1);
        if let Some(n) = (e.r.check as usize)
            .checked_sub(1)
            .and_then(|i| log.by_check.get_mut(i))
        {
            *n = n.saturating_add(1);
        }
        if partial {
            log.partial = log.partial.saturating_add(1);
        }
        if log.kept.len() >= SAN_KEEP {
            let _ = log.kept.remove(0);
        }
        let _ = log.kept.push(e, GFP_KERNEL);
    }

    /// debugfs `sanitizer`: the counts and every report kept.
    pub(crate) fn show_sanitizer(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let generation = self.hw.generation();
        let g = self.state.lock();
        let s = &g.san;
        writeln!(
            f,
            "reports {} kept {} partial {} planted {}",
            s.total,
            s.kept.len(),
            s.partial,
            s.plant.map_or("none", |p| p.name())
        )?;
        for (c, n) in Check::ALL.iter().zip(s.by_check.iter()) {
            writeln!(f, "{} {}", c.id(), n)?;
        }
        for e in s.kept.iter() {
            writeln!(f, "{}", Line { e, generation })?;
        }
        Ok(())
    }

    /// Plants `p` (debugfs `sanitizer_plant`; `None` clears).
    pub(crate) fn plant(&self, p: Option<Plant>) {
        self.state.lock().san.plant = p;
        if let Some(p) = p {
            dev_info_ratelimited!(
                self.pdev(),
                "sanitizer: planted bug '{}' armed (once)\n",
                p.name()
            );
        }
    }

    /// Whether the planted `skip-tlb-invalidate` is armed (and takes it).
    pub(crate) fn planted_skip_invalidate(&self) -> bool {
        let taken = self.state.lock().san.take(Plant::SkipTlbInvalidate);
        if taken {
            dev_warn_ratelimited!(
                self.pdev(),
                "sanitizer: planted bug: VM_UNBIND without TLB_INVALIDATE\n"
            );
        }
        taken
    }

    /// Whether the planted `move-no-invalidate` is armed (and takes it).
    pub(crate) fn planted_move_no_invalidate(&self) -> bool {
        let taken = self.state.lock().san.take(Plant::MoveNoInvalidate);
        if taken {
            dev_warn_ratelimited!(
                self.pdev(),
                "sanitizer: planted bug: an eviction without clearing the mappings or TLB_INVALIDATE\n"
            );
        }
        taken
    }

    /// `DRM_IOCTL_VGPU_SAN_REPORT`: the oldest kept report about context
    /// `handle` of `client` numbered above `after`.
    ///
    /// # Errors
    ///
    /// `EINVAL` (`pad`), `ENOENT` (no such context of this file),
    /// `ENODATA` (no such report), `ENODEV`.
    pub(crate) fn san_report(
        &self,
        client: &Arc<crate::file::Client>,
        a: &mut uapi::drm_vgpu_san_report,
    ) -> Result {
        if a.pad != 0 {
            return Err(EINVAL);
        }
        let mut g = self.lock()?;
        let (hw, _) = g.find(client, a.ctx_id)?;
        let e = g
            .san
            .kept
            .iter()
            .find(|e| e.r.ctx_id == hw && e.client == client.id && e.r.seq > a.after_seq)
            .copied()
            .ok_or(crate::errno::enodata())?;
        let r = &e.r;
        let o = &mut a.report;
        o.check = r.check;
        o.flags = r.flags;
        o.seq = r.seq;
        o.time_ns = r.time_ns;
        o.ctx_id = e.handle;
        o.engine = r.engine;
        o.rptr = r.rptr;
        o.depth = r.depth;
        o.packet_va = r.packet_va;
        o.cmd_offset = r.cmd_offset;
        o.packet_len = r.packet_len;
        o.packet = r.packet;
        o.access = r.access;
        o.va = r.va;
        o.size = r.size;
        o.pa = r.pa;
        o.prior_ctx = e.prior_handle;
        o.prior_engine = r.prior_engine;
        o.prior_packet_va = r.prior_packet_va;
        o.prior_header = r.prior_header;
        o.prior_access = r.prior_access;
        o.prior_time_ns = r.prior_time_ns;
        o.detail = r.detail;
        o.history = r.history;
        o.object = r.object;
        o.object_gen = r.object_gen;
        o.object_gen_now = r.object_gen_now;
        o.object_pa_now = r.object_pa_now;
        o.released_ns = r.released_ns;
        Ok(())
    }
}
