//! Sanitizer reports: what one finding says, in the device log (one line),
//! as JSON (one line of the `--sanitize-log` file and of the control
//! socket's `sanitize reports`), and as the driver's [`SanReport`].
//!
//! A report names the check (stable id), the context and engine, where the
//! packet is (ring read pointer, indirect depth, the packet's VA and its
//! offset in the ring or the command buffer the ring called), the packet
//! decoded by hwif ([`PacketWords`]), the address and access, the prior
//! access it conflicts with (context, engine, packet, access, time), the
//! check's own details and the hint.

use std::collections::{HashSet, VecDeque};
use std::fmt::Write as _;
use std::io::Write as _;

use vgpu_hwif::describe::PacketWords;
use vgpu_hwif::mmu::Access;
use vgpu_hwif::proto::{engine, CTX_NONE};
use vgpu_hwif::sanitize::{
    Check, SanReport, CHECKS, SAN_FLAG_MOVED, SAN_FLAG_OBJECT, SAN_FLAG_PACKET, SAN_FLAG_PRIOR,
    SAN_FLAG_STOPPED, SAN_HISTORY, SAN_KIND_SHIFT, SAN_PACKET_WORDS,
};

use super::owned::ObjectHistory;
use crate::core::json::json_str;

/// Reports the device keeps (for `SAN_REPORT` and the control socket).
pub const KEPT: usize = 256;

/// Where the offending packet is.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Location {
    /// Ring read pointer of the ring-level packet.
    pub rptr: u32,
    /// Ring size (for the ring offset).
    pub ring_size: u32,
    /// Indirect depth of the packet.
    pub depth: u32,
    /// GPU VA of the packet.
    pub packet_va: u64,
    /// Offset in the ring (depth 0) or the ring-level command buffer.
    pub cmd_offset: u32,
    /// The packet's words as fetched (at most [`SAN_PACKET_WORDS`]).
    pub words: Vec<u32>,
}

/// The access a report is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Touch {
    /// Kind of access.
    pub access: Access,
    /// GPU VA.
    pub va: u64,
    /// Bytes.
    pub size: u64,
    /// Guest-physical address (0 if unknown).
    pub pa: u64,
}

/// The earlier access a report's access conflicts with.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Prior {
    /// Context.
    pub ctx: u32,
    /// Engine.
    pub engine: u32,
    /// GPU VA of its packet (0: none, e.g. a doorbell).
    pub packet_va: u64,
    /// Its packet's header word (0 if none).
    pub header: u32,
    /// Its access, if it was one.
    pub access: Option<Access>,
    /// When (device time).
    pub time_ns: u64,
    /// What it was, as text (a packet, a doorbell, a mapping).
    pub what: String,
}

/// The page-table entry a report is about (`SAN-PT-*`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PteAt {
    /// Level of its table (3 = root).
    pub level: u8,
    /// Its index in the table.
    pub index: u16,
    /// Its guest-physical address.
    pub entry_addr: u64,
    /// Its bits as the walk read them.
    pub value: u64,
}

/// One sanitizer report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    /// The check.
    pub check: Check,
    /// Check-specific sub-kind (0: none).
    pub kind: u32,
    /// Report number (set when recorded; from 1).
    pub seq: u64,
    /// Device time of the finding.
    pub time_ns: u64,
    /// Context.
    pub ctx: Option<u32>,
    /// Engine.
    pub engine: Option<u32>,
    /// The packet, if one was executing.
    pub at: Option<Location>,
    /// The access.
    pub touch: Option<Touch>,
    /// The conflicting earlier access.
    pub prior: Option<Prior>,
    /// The page-table entry (`SAN-PT-*`).
    pub pte: Option<PteAt>,
    /// Check-specific values (docs/sanitizer.md).
    pub detail: [u64; 4],
    /// The ring's last doorbells, oldest first (`SAN-RING-INDEX`).
    pub history: Vec<u32>,
    /// What happened, in words.
    pub message: String,
    /// The ring was stopped for it (stop mode).
    pub stopped: bool,
    /// Hardware generation (to decode the packet).
    pub generation: u32,
    /// The object the accessed page belonged to (tagged declarations).
    pub object: Option<ObjectHistory>,
}

impl Report {
    /// A report of `check` at device time `time_ns` saying `message`.
    pub fn new(check: Check, time_ns: u64, message: impl Into<String>) -> Report {
        Report {
            check,
            kind: 0,
            seq: 0,
            time_ns,
            ctx: None,
            engine: None,
            at: None,
            touch: None,
            prior: None,
            pte: None,
            detail: [0; 4],
            history: Vec::new(),
            message: message.into(),
            stopped: false,
            generation: 1,
            object: None,
        }
    }

    /// The same report for context `ctx` on engine `e`.
    pub fn on(mut self, ctx: u32, e: u32) -> Report {
        self.ctx = Some(ctx);
        self.engine = Some(e);
        self
    }

    /// With sub-kind `kind`.
    pub fn kind(mut self, kind: u32) -> Report {
        self.kind = kind;
        self
    }

    /// With `h`, the object the accessed page belonged to: its name and
    /// its move are added to the message.
    pub fn object(mut self, h: ObjectHistory) -> Report {
        let (object, gen) = (h.tag.object, h.tag.gen);
        let what = match h.now {
            Some((now, pa)) if h.moved() => format!(
                "; that page was object {object}'s (generation {gen}) until the object moved {:.3} ms before (now generation {now}, at pa {pa:#x}{}): its mapping was not updated, or the TLB not invalidated, after the move",
                self.time_ns.saturating_sub(h.released_ns) as f64 / 1e6,
                if pa >= vgpu_hwif::mmu::VRAM_BASE { ", VRAM" } else { ", system memory" }
            ),
            _ => format!(
                "; that page was object {object}'s (generation {gen}) until the driver gave it back {:.3} ms before, and the object holds no declared pages now: a use after free through the GPU",
                self.time_ns.saturating_sub(h.released_ns) as f64 / 1e6
            ),
        };
        self.message.push_str(&what);
        self.object = Some(h);
        self
    }

    /// The packet, decoded by hwif, if the report has its words.
    pub fn packet_text(&self) -> Option<String> {
        let at = self.at.as_ref()?;
        if at.words.is_empty() {
            return None;
        }
        Some(
            PacketWords {
                generation: self.generation,
                words: &at.words,
            }
            .to_string(),
        )
    }

    /// The report as one line of text (the device log's form).
    pub fn line(&self) -> String {
        let mut s = format!("{} #{}", self.check.id(), self.seq);
        if let Some(c) = self.ctx {
            let _ = write!(s, " ctx {c}");
        }
        if let Some(e) = self.engine {
            let _ = write!(s, " {}", engine_name(e));
        }
        if let Some(at) = &self.at {
            if at.depth == 0 {
                let _ = write!(
                    s,
                    " ring+{:#x} (rptr {:#x})",
                    ring_offset(at.rptr, at.ring_size),
                    at.rptr
                );
            } else {
                let _ = write!(
                    s,
                    " rptr {:#x} depth {} cmdbuf+{:#x}",
                    at.rptr, at.depth, at.cmd_offset
                );
            }
            let _ = write!(s, " packet {:#x}", at.packet_va);
            if let Some(p) = self.packet_text() {
                let _ = write!(s, " [{p}]");
            }
        }
        let _ = write!(s, ": {}", self.message);
        if let Some(t) = &self.touch {
            let _ = write!(s, "; {}", t.access.name().to_ascii_lowercase());
            if t.size != 0 {
                let _ = write!(s, " of {} bytes", t.size);
            }
            let _ = write!(s, " at va {:#x}", t.va);
            if t.pa != 0 {
                let _ = write!(s, " (pa {:#x})", t.pa);
            }
        }
        if let Some(p) = &self.prior {
            let _ = write!(s, "; prior: ctx {} {}", p.ctx, engine_name(p.engine));
            if !p.what.is_empty() {
                let _ = write!(s, " {}", p.what);
            }
            if p.packet_va != 0 {
                let _ = write!(s, " at packet {:#x}", p.packet_va);
            }
            if let Some(a) = p.access {
                let _ = write!(s, " ({})", a.name().to_ascii_lowercase());
            }
            let ago = self.time_ns.saturating_sub(p.time_ns);
            let _ = write!(s, ", {:.3} ms earlier", ago as f64 / 1e6);
        }
        if !self.history.is_empty() {
            let h: Vec<String> = self.history.iter().map(|w| format!("{w:#x}")).collect();
            let _ = write!(s, "; last doorbells [{}]", h.join(", "));
        }
        if self.stopped {
            s.push_str("; ring stopped");
        }
        let _ = write!(s, "; hint: {}", self.check.hint());
        s
    }

    /// The report as one line of JSON.
    pub fn json(&self) -> String {
        let mut s = format!(
            "{{\"seq\":{},\"check\":{},\"kind\":{},\"time_ns\":{},\"ctx\":{},\"engine\":{}",
            self.seq,
            json_str(self.check.id()),
            self.kind,
            self.time_ns,
            opt(self.ctx),
            self.engine
                .map_or("null".to_owned(), |e| json_str(engine_name(e))),
        );
        if let Some(at) = &self.at {
            let words: Vec<String> = at.words.iter().map(u32::to_string).collect();
            let _ = write!(
                s,
                ",\"rptr\":{},\"depth\":{},\"packet_va\":{},\"cmd_offset\":{},\"packet\":{},\"packet_words\":[{}]",
                at.rptr,
                at.depth,
                at.packet_va,
                if at.depth == 0 {
                    ring_offset(at.rptr, at.ring_size)
                } else {
                    at.cmd_offset
                },
                self.packet_text()
                    .map_or("null".to_owned(), |p| json_str(&p)),
                words.join(",")
            );
        }
        if let Some(t) = &self.touch {
            let _ = write!(
                s,
                ",\"access\":{},\"va\":{},\"size\":{},\"pa\":{}",
                json_str(&t.access.name().to_ascii_lowercase()),
                t.va,
                t.size,
                t.pa
            );
        }
        if let Some(p) = &self.prior {
            let _ = write!(
                s,
                ",\"prior\":{{\"ctx\":{},\"engine\":{},\"packet_va\":{},\"header\":{},\"access\":{},\"time_ns\":{},\"what\":{}}}",
                p.ctx,
                json_str(engine_name(p.engine)),
                p.packet_va,
                p.header,
                p.access
                    .map_or("null".to_owned(), |a| json_str(&a.name().to_ascii_lowercase())),
                p.time_ns,
                json_str(&p.what)
            );
        }
        if let Some(e) = &self.pte {
            let _ = write!(
                s,
                ",\"level\":{},\"entry\":{},\"entry_addr\":{},\"value\":{}",
                e.level, e.index, e.entry_addr, e.value
            );
        }
        if let Some(h) = &self.object {
            let (gen_now, pa_now) = h.now.unwrap_or((h.tag.gen, 0));
            let _ = write!(
                s,
                ",\"object\":{{\"id\":{},\"gen\":{},\"gen_now\":{},\"pa_now\":{},\"moved\":{},\"released_ns\":{}}}",
                h.tag.object,
                h.tag.gen,
                gen_now,
                pa_now,
                h.moved(),
                h.released_ns
            );
        }
        let detail: Vec<String> = self.detail.iter().map(u64::to_string).collect();
        let history: Vec<String> = self.history.iter().map(u32::to_string).collect();
        let _ = write!(
            s,
            ",\"detail\":[{}],\"history\":[{}],\"message\":{},\"hint\":{},\"stopped\":{}}}",
            detail.join(","),
            history.join(","),
            json_str(&self.message),
            json_str(self.check.hint()),
            self.stopped
        );
        s
    }

    /// The report as the driver receives it.
    pub fn to_hwif(&self) -> SanReport {
        let mut flags = self.kind << SAN_KIND_SHIFT;
        if self.stopped {
            flags |= SAN_FLAG_STOPPED;
        }
        let mut r = SanReport {
            check: self.check as u32,
            flags,
            seq: self.seq,
            time_ns: self.time_ns,
            ctx_id: self.ctx.unwrap_or(CTX_NONE),
            engine: self.engine.unwrap_or(engine::ALL),
            rptr: 0,
            depth: 0,
            packet_va: 0,
            cmd_offset: 0,
            packet_len: 0,
            packet: [0; SAN_PACKET_WORDS],
            access: 0,
            va: 0,
            size: 0,
            pa: 0,
            prior_ctx: CTX_NONE,
            prior_engine: engine::ALL,
            prior_packet_va: 0,
            prior_header: 0,
            prior_access: 0,
            prior_time_ns: 0,
            detail: self.detail,
            history: [0; SAN_HISTORY],
            object: 0,
            object_gen: 0,
            object_gen_now: 0,
            object_pa_now: 0,
            released_ns: 0,
        };
        if let Some(h) = &self.object {
            r.flags |= SAN_FLAG_OBJECT;
            if h.moved() {
                r.flags |= SAN_FLAG_MOVED;
            }
            r.object = h.tag.object;
            r.object_gen = h.tag.gen;
            (r.object_gen_now, r.object_pa_now) = h.now.unwrap_or((h.tag.gen, 0));
            r.released_ns = h.released_ns;
        }
        if let Some(at) = &self.at {
            r.rptr = at.rptr;
            r.depth = at.depth;
            r.packet_va = at.packet_va;
            r.cmd_offset = if at.depth == 0 {
                ring_offset(at.rptr, at.ring_size)
            } else {
                at.cmd_offset
            };
            for (d, w) in r.packet.iter_mut().zip(&at.words) {
                *d = *w;
            }
            r.packet_len = at.words.len().min(SAN_PACKET_WORDS) as u32;
            if r.packet_len > 0 {
                r.flags |= SAN_FLAG_PACKET;
            }
        }
        if let Some(t) = &self.touch {
            r.access = t.access as u32;
            r.va = t.va;
            r.size = t.size;
            r.pa = t.pa;
        }
        if let Some(p) = &self.prior {
            r.flags |= SAN_FLAG_PRIOR;
            r.prior_ctx = p.ctx;
            r.prior_engine = p.engine;
            r.prior_packet_va = p.packet_va;
            r.prior_header = p.header;
            r.prior_access = p.access.map_or(0, |a| a as u32);
            r.prior_time_ns = p.time_ns;
        }
        for (d, w) in r.history.iter_mut().zip(&self.history) {
            *d = *w;
        }
        r
    }
}

fn opt(v: Option<u32>) -> String {
    v.map_or("null".to_owned(), |v| v.to_string())
}

/// The ring offset of pointer `ptr` in a ring of `size` bytes.
pub fn ring_offset(ptr: u32, size: u32) -> u32 {
    if size.is_power_of_two() {
        ptr & (size - 1)
    } else {
        ptr
    }
}

/// `copy`, `compute`, or the number.
pub fn engine_name(e: u32) -> &'static str {
    match e {
        engine::COPY => "copy",
        engine::COMPUTE => "compute",
        engine::ALL => "device",
        _ => "engine?",
    }
}

/// Reports kept, counted and written out.
#[derive(Debug, Default)]
pub struct ReportLog {
    kept: VecDeque<Report>,
    next_seq: u64,
    counts: [u64; CHECKS],
    suppressed: u64,
    /// Findings reported, by context: (context, key).
    seen: HashSet<(u32, (u32, u64, u64))>,
    file: Option<std::io::BufWriter<std::fs::File>>,
}

/// Distinct findings remembered to report each once.
const SEEN: usize = 1 << 16;

impl ReportLog {
    /// No reports.
    pub fn new() -> Self {
        ReportLog {
            next_seq: 1,
            ..Default::default()
        }
    }

    /// Writes every report to `file` as JSON lines from now on.
    pub fn set_file(&mut self, file: std::fs::File) {
        self.file = Some(std::io::BufWriter::new(file));
    }

    /// Whether a finding about context `ctx` with this key is new (and
    /// remembers it). Keys are (check, two check-specific values).
    pub fn first_time(&mut self, ctx: u32, key: (u32, u64, u64)) -> bool {
        if self.seen.len() >= SEEN {
            self.seen.clear();
        }
        self.seen.insert((ctx, key))
    }

    /// Forgets the findings about context `ctx` (destroyed: a context
    /// created later in its slot makes its own mistakes, and is told of
    /// each once).
    pub fn forget_context(&mut self, ctx: u32) {
        self.seen.retain(|&(c, _)| c != ctx);
    }

    /// Numbers, logs, writes and keeps `r`; returns it with its number.
    pub fn record(&mut self, mut r: Report) -> Report {
        r.seq = self.next_seq;
        self.next_seq += 1;
        if let Some(n) = self.counts.get_mut(r.check as usize - 1) {
            *n += 1;
        }
        log::warn!("sanitizer: {}", r.line());
        if let Some(f) = self.file.as_mut() {
            let ok = writeln!(f, "{}", r.json()).and_then(|()| f.flush());
            if let Err(e) = ok {
                log::error!("sanitizer: cannot write the report file: {e}");
                self.file = None;
            }
        }
        if self.kept.len() >= KEPT {
            self.kept.pop_front();
        }
        self.kept.push_back(r.clone());
        r
    }

    /// Counts a finding not reported because an injected fault explains it.
    pub fn suppress(&mut self, r: &Report) {
        self.suppressed += 1;
        log::debug!(
            "sanitizer: {} on ctx {:?} not reported: a fault was injected there",
            r.check.id(),
            r.ctx
        );
    }

    /// Report `seq`, if still kept.
    pub fn get(&self, seq: u64) -> Option<&Report> {
        self.kept.iter().find(|r| r.seq == seq)
    }

    /// Reports kept with a number above `since`, oldest first.
    pub fn since(&self, since: u64) -> Vec<Report> {
        self.kept
            .iter()
            .filter(|r| r.seq > since)
            .cloned()
            .collect()
    }

    /// Reports per check (index = check number − 1).
    pub fn counts(&self) -> [u64; CHECKS] {
        self.counts
    }

    /// Findings suppressed because a fault was injected.
    pub fn suppressed(&self) -> u64 {
        self.suppressed
    }

    /// Reports made so far.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vgpu_hwif::packet::{Packet, OP_COPY};

    fn sample() -> Report {
        let mut w = [0u32; 16];
        let p = Packet::Copy {
            src: 0x1000,
            dst: 0x2000,
            size: 64,
        };
        let n = p.encode(1, &mut w).unwrap();
        let mut r = Report::new(Check::TlbStale, 5_000_000, "the leaf entry changed").on(3, 0);
        r.at = Some(Location {
            rptr: 0x1040,
            ring_size: 4096,
            depth: 1,
            packet_va: 0x10_0040,
            cmd_offset: 0x40,
            words: w[..n].to_vec(),
        });
        r.touch = Some(Touch {
            access: Access::Read,
            va: 0x1000,
            size: 64,
            pa: 0x8000,
        });
        r.prior = Some(Prior {
            ctx: 3,
            engine: 0,
            packet_va: 0,
            header: 0,
            access: None,
            time_ns: 4_000_000,
            what: "fill of va 0x1000".into(),
        });
        r
    }

    #[test]
    fn a_report_names_everything() {
        let mut log = ReportLog::new();
        let r = log.record(sample());
        assert_eq!(r.seq, 1);
        let line = r.line();
        assert!(
            line.starts_with(
                "SAN-TLB-STALE #1 ctx 3 copy rptr 0x1040 depth 1 cmdbuf+0x40 packet 0x100040 [COPY src=0x1000 dst=0x2000 size=64]: the leaf entry changed; read of 64 bytes at va 0x1000 (pa 0x8000); prior: ctx 3 copy fill of va 0x1000, 1.000 ms earlier; hint: "
            ),
            "{line}"
        );
        let j = r.json();
        assert!(j.contains("\"check\":\"SAN-TLB-STALE\""), "{j}");
        assert!(
            j.contains("\"packet\":\"COPY src=0x1000 dst=0x2000 size=64\""),
            "{j}"
        );
        assert!(j.contains("\"cmd_offset\":64"), "{j}");
        let h = r.to_hwif();
        assert_eq!((h.check, h.ctx_id, h.engine, h.seq), (3, 3, 0, 1));
        assert_eq!(h.packet_len, 7);
        assert_eq!(h.packet[0] & 0xff, u32::from(OP_COPY));
        assert_eq!(
            h.flags & (SAN_FLAG_PACKET | SAN_FLAG_PRIOR),
            SAN_FLAG_PACKET | SAN_FLAG_PRIOR
        );
        assert_eq!(
            (h.va, h.pa, h.access),
            (0x1000, 0x8000, Access::Read as u32)
        );
        assert_eq!(log.counts()[Check::TlbStale as usize - 1], 1);
        assert_eq!(log.get(1).map(|r| r.seq), Some(1));
        assert!(log.get(2).is_none());
    }

    #[test]
    fn ring_packets_give_their_ring_offset() {
        let mut r = sample();
        if let Some(at) = r.at.as_mut() {
            at.depth = 0;
        }
        let h = r.to_hwif();
        assert_eq!(h.cmd_offset, 0x40, "0x1040 in a 4 KiB ring");
        assert!(
            r.line().contains(" ring+0x40 (rptr 0x1040)"),
            "{}",
            r.line()
        );
    }

    #[test]
    fn the_log_keeps_a_bounded_history() {
        let mut log = ReportLog::new();
        for _ in 0..KEPT + 10 {
            log.record(Report::new(Check::Teardown, 0, "x"));
        }
        assert_eq!(log.since(0).len(), KEPT);
        assert_eq!(log.since(0)[0].seq, 11);
        assert_eq!(log.total(), (KEPT + 10) as u64);
        assert!(log.first_time(2, (1, 2, 3)));
        assert!(!log.first_time(2, (1, 2, 3)));
        assert!(log.first_time(5, (1, 2, 3)));
        log.forget_context(2);
        assert!(log.first_time(2, (1, 2, 3)));
        assert!(!log.first_time(5, (1, 2, 3)));
    }
}
