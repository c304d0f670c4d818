//! Decoding devcoredumps and device captures: what `vgpu-dump` prints and
//! `vgpu-replay` rebuilds from.
//!
//! A devcoredump (`/sys/class/devcoredump/devcdN/data`, written by the KMD,
//! format in `vgpu_hwif::coredump`) holds the driver's records and the
//! device's capture (`vgpu_hwif::capture`) in base64; a raw capture (the
//! device's control socket writes them) is accepted too. [`CoreDump::parse`]
//! reads either; [`Decoded`] is the capture turned into what a developer
//! reads: the rings' packets around the read pointer by name with their
//! fields, command buffers followed through `INDIRECT`, the failing packet
//! marked, the fault's page-table walk level by level, mappings, TLB,
//! events and the injector's log. [`render_text`] and [`render_json`] print
//! it the way umr or aubinator print real rings.

use std::fmt::Write as _;

use serde_json::{json, Map, Value};
use vgpu_hwif::capture::{
    self, memory, reason, section, Capture, CaptureContext, CaptureHeader, CaptureInFlight,
    CaptureMapping, CaptureRing, CaptureTlbEntry, WalkEnd,
};
use vgpu_hwif::coredump::{self as cd, base64_decode};
use vgpu_hwif::event::{Event, EventRecord};
use vgpu_hwif::mmu::{Access, FaultReason, Pte, PteKind, PTE_EXEC, PTE_READ, PTE_WRITE};
use vgpu_hwif::packet::{decode_header, EngineError, Packet, MAX_INDIRECT_DEPTH};
use vgpu_hwif::proto::{engine, ring_state};

use crate::cmdbuf::describe;

/// Why a file could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum DumpError {
    /// Neither a devcoredump nor a capture.
    #[error("not a vgpu devcoredump or capture")]
    NotADump,
    /// The capture's base64 is broken.
    #[error("device capture: bad base64 ({0:?})")]
    Base64(vgpu_hwif::coredump::Base64Error),
    /// The capture's header is wrong.
    #[error("device capture: {}", .0.name())]
    Capture(capture::CaptureError),
    /// The dump has no device capture.
    #[error("the dump holds no device capture ({0})")]
    NoCapture(String),
}

/// A devcoredump or a capture, parsed.
#[derive(Debug, Clone, Default)]
pub struct CoreDump {
    /// Format version (0 for a raw capture).
    pub version: u32,
    /// The driver's sections and their record lines, in order.
    pub sections: Vec<(String, Vec<String>)>,
    /// The device capture's bytes.
    pub capture: Option<Vec<u8>>,
    /// The dump ended with its end marker.
    pub complete: bool,
}

impl CoreDump {
    /// Parses a devcoredump's text or a raw capture.
    ///
    /// # Errors
    ///
    /// [`DumpError::NotADump`], [`DumpError::Base64`].
    pub fn parse(bytes: &[u8]) -> Result<CoreDump, DumpError> {
        if bytes.starts_with(&capture::MAGIC.to_le_bytes()) {
            return Ok(CoreDump {
                capture: Some(bytes.to_vec()),
                complete: true,
                ..CoreDump::default()
            });
        }
        let text = String::from_utf8_lossy(bytes);
        let mut lines = text.lines();
        let first = lines.next().unwrap_or("");
        let version = first
            .strip_prefix(cd::BANNER)
            .and_then(|v| v.trim().parse::<u32>().ok())
            .ok_or(DumpError::NotADump)?;
        let mut d = CoreDump {
            version,
            ..CoreDump::default()
        };
        let mut current: Option<String> = None;
        let mut b64 = Vec::new();
        for line in lines {
            if let Some(name) = cd::section_name(line) {
                if name == cd::section::END {
                    d.complete = true;
                    break;
                }
                current = Some(name.to_owned());
                if name != cd::section::CAPTURE {
                    d.sections.push((name.to_owned(), Vec::new()));
                }
                continue;
            }
            match current.as_deref() {
                Some(cd::section::CAPTURE) => b64.extend_from_slice(line.trim().as_bytes()),
                Some(_) => {
                    if let Some((_, recs)) = d.sections.last_mut() {
                        if !line.is_empty() {
                            recs.push(line.to_owned());
                        }
                    }
                }
                None => {}
            }
        }
        if !b64.is_empty() {
            let mut out = vec![0u8; b64.len() / 4 * 3];
            let n = base64_decode(&b64, &mut out).map_err(DumpError::Base64)?;
            out.truncate(n);
            d.capture = Some(out);
        }
        Ok(d)
    }

    /// The record lines of section `name`.
    pub fn records(&self, name: &str) -> &[String] {
        self.sections
            .iter()
            .find(|(n, _)| n == name)
            .map_or(&[], |(_, r)| r.as_slice())
    }

    /// Field `key` of the first record of kind `kind` in section `sec`.
    pub fn field(&self, sec: &str, kind: &str, key: &str) -> Option<&str> {
        self.records(sec)
            .iter()
            .find(|l| cd::kind(l) == kind)
            .and_then(|l| cd::field(l, key))
    }

    /// The capture, checked.
    ///
    /// # Errors
    ///
    /// [`DumpError::NoCapture`] (with the device record's status),
    /// [`DumpError::Capture`].
    pub fn capture(&self) -> Result<Capture<'_>, DumpError> {
        let bytes = self.capture.as_deref().ok_or_else(|| {
            DumpError::NoCapture(
                self.field(cd::section::DEVICE, "device", "status")
                    .unwrap_or("no device record")
                    .to_owned(),
            )
        })?;
        Capture::parse(bytes).map_err(DumpError::Capture)
    }
}

/// The engine's name.
pub fn engine_name(e: u32) -> &'static str {
    match e {
        engine::COPY => "copy",
        engine::COMPUTE => "compute",
        _ => "?",
    }
}

/// The ring state's name.
pub fn state_name(s: u32) -> &'static str {
    match s {
        ring_state::IDLE => "IDLE",
        ring_state::RUNNING => "RUNNING",
        ring_state::SEM_WAIT => "SEM_WAIT",
        ring_state::FAULT_STALLED => "FAULT_STALLED",
        ring_state::STOPPED => "STOPPED",
        _ => "?",
    }
}

fn perms_text(p: u64) -> String {
    [(PTE_READ, 'r'), (PTE_WRITE, 'w'), (PTE_EXEC, 'x')]
        .iter()
        .map(|&(b, c)| if p & b != 0 { c } else { '-' })
        .collect()
}

/// An event record as text.
pub fn event_text(rec: &EventRecord) -> String {
    match Event::from_record(rec) {
        Ok(Event::Fault {
            va,
            info,
            packet_va,
            fault_id,
            lane_pc,
        }) => {
            let mut s = format!(
                "FAULT ctx {} {} engine: {} of {va:#x} {} at level {}, packet {packet_va:#x}, fault id {fault_id}{}",
                info.ctx_id,
                engine_name(info.engine.into()),
                Access::from_u8(info.access).map_or("?", |a| a.name()),
                FaultReason::from_u8(info.reason).map_or("?", |r| r.name()),
                if info.level == vgpu_hwif::mmu::LEVEL_NONE {
                    "-".to_owned()
                } else {
                    info.level.to_string()
                },
                if info.flags & vgpu_hwif::event::FAULT_FLAG_REPLAYABLE != 0 {
                    " (replayable, stalled)"
                } else {
                    ""
                }
            );
            if lane_pc != u64::MAX {
                let _ = write!(s, ", thread {} pc {}", lane_pc & 0xffff_ffff, lane_pc >> 32);
            }
            s
        }
        Ok(Event::EngineError {
            ctx_id,
            engine,
            code,
            packet_va,
            rptr,
            depth,
            header,
            cmd_offset: _,
        }) => format!(
            "ENGINE_ERROR ctx {ctx_id} {} engine: {} at packet {packet_va:#x}, rptr {rptr:#x} depth {depth}, {} {header:#010x}",
            engine_name(engine),
            EngineError::from_u32(code).map_or("?", |c| c.name()),
            if code == EngineError::Trap as u32 { "pc" } else { "header" }
        ),
        Ok(ev) => format!("{} {ev:?}", ev.kind().name()),
        Err(_) => format!("kind {} {:x?}", rec.kind, rec.data),
    }
}

/// One packet line of a listing.
#[derive(Debug, Clone)]
pub struct PacketLine {
    /// `INDIRECT` depth (0: the ring).
    pub depth: u32,
    /// GPU VA.
    pub va: u64,
    /// Its name (`COPY`, …) or what is wrong with it.
    pub name: String,
    /// Name and fields as text.
    pub text: String,
    /// The decoded packet.
    pub packet: Option<Packet>,
    /// It is the failing packet.
    pub failing: bool,
    /// It is the ring's read pointer (the ring-level packet in progress or
    /// next).
    pub at_rptr: bool,
    /// Packets left out here (elision).
    pub skipped: usize,
}

/// The failing packet and why.
#[derive(Debug, Clone)]
pub struct Failing {
    /// GPU VA.
    pub va: u64,
    /// Depth.
    pub depth: u32,
    /// The decoded packet (from the operation in flight, else from memory).
    pub packet: Option<Packet>,
    /// The packet's name (or `?`).
    pub name: String,
    /// The operation was in flight, with this progress.
    pub in_flight: Option<[u64; 4]>,
    /// What went wrong, as text.
    pub why: String,
}

/// One level of the fault's walk, as text.
#[derive(Debug, Clone)]
pub struct WalkLine {
    /// Level.
    pub level: u32,
    /// Table address.
    pub table: u64,
    /// Index.
    pub index: usize,
    /// The entry, if captured.
    pub pte: Option<u64>,
    /// What the entry says.
    pub meaning: String,
}

/// A capture, decoded.
#[derive(Debug, Clone)]
pub struct Decoded {
    /// Header.
    pub header: CaptureHeader,
    /// Context.
    pub context: Option<CaptureContext>,
    /// Rings.
    pub rings: Vec<CaptureRing>,
    /// The failing or in-flight packet record.
    pub inflight: Option<CaptureInFlight>,
    /// The error the device reported.
    pub error: Option<EventRecord>,
    /// The failing packet.
    pub failing: Option<Failing>,
    /// Packets of the captured ring around its read pointer, command buffers
    /// followed.
    pub listing: Vec<PacketLine>,
    /// The fault's walk.
    pub walk: Vec<WalkLine>,
    /// How the walk ended.
    pub walk_end: Option<String>,
    /// Mapped ranges.
    pub mappings: Vec<CaptureMapping>,
    /// TLB entries.
    pub tlb: Vec<CaptureTlbEntry>,
    /// Recent events.
    pub events: Vec<EventRecord>,
    /// The injector's lines.
    pub inject: Vec<String>,
    /// Memory ranges: (pa, va, size, kind).
    pub memory: Vec<(u64, u64, u64, u32)>,
}

/// Packets shown around the failing one in a command buffer.
const AROUND: usize = 8;
/// Ring packets shown before the read pointer at most.
const BEFORE_WORDS: u32 = 64;
/// Ring packets shown from the read pointer on at most.
const AFTER: usize = 48;

/// Reads `out.len()` bytes at `va` through the captured tables.
pub fn read_va(cap: &Capture<'_>, root: u64, va_bits: u32, va: u64, out: &mut [u8]) -> bool {
    let mut done = 0usize;
    while done < out.len() {
        let at = va.wrapping_add(done as u64);
        let WalkEnd::Leaf { page, shift, .. } = cap.walk(root, at, va_bits).end else {
            return false;
        };
        let size = 1u64 << shift;
        let off = at & (size - 1);
        let n = ((size - off) as usize).min(out.len() - done);
        if !cap.read_pa(page + off, &mut out[done..done + n]) {
            return false;
        }
        done += n;
    }
    true
}

struct Reader<'a> {
    cap: Capture<'a>,
    root: u64,
    va_bits: u32,
    generation: u32,
}

impl Reader<'_> {
    fn word(&self, va: u64) -> Option<u32> {
        let mut b = [0u8; 4];
        read_va(&self.cap, self.root, self.va_bits, va, &mut b).then(|| u32::from_le_bytes(b))
    }

    /// The packet at `va`: its length in words and decoding.
    fn packet(&self, va: u64, avail_words: u32) -> Result<(u32, Packet), String> {
        let h = self.word(va).ok_or_else(|| "not captured".to_owned())?;
        let hdr = decode_header(self.generation, h)
            .map_err(|e| format!("invalid header {h:#010x} ({})", e.name()))?;
        if hdr.words > avail_words {
            return Err(format!(
                "{}-word packet runs past the end (TRUNCATED)",
                hdr.words
            ));
        }
        let words: Option<Vec<u32>> = (0..hdr.words)
            .map(|i| self.word(va + 4 * u64::from(i)))
            .collect();
        let words = words.ok_or_else(|| "not captured".to_owned())?;
        Packet::decode(hdr, &words)
            .map(|p| (hdr.words, p))
            .map_err(|e| {
                format!(
                    "opcode {:#04x}: {} (header {h:#010x})",
                    hdr.opcode,
                    e.name()
                )
            })
    }
}

fn line(
    depth: u32,
    va: u64,
    r: &Result<(u32, Packet), String>,
    failing: Option<u64>,
) -> PacketLine {
    let (name, text, packet) = match r {
        Ok((_, p)) => (p.name().to_owned(), describe(p), Some(*p)),
        Err(e) => ("?".to_owned(), e.clone(), None),
    };
    PacketLine {
        depth,
        va,
        name,
        text,
        packet,
        failing: failing == Some(va),
        at_rptr: false,
        skipped: 0,
    }
}

/// Lists command buffer `va`/`size` at `depth`, around the failing packet
/// (or `focus`), following nested `INDIRECT`s.
fn list_buffer(
    rd: &Reader<'_>,
    va: u64,
    size: u32,
    depth: u32,
    failing: Option<u64>,
    out: &mut Vec<PacketLine>,
) {
    let mut lines: Vec<(PacketLine, Option<(u64, u32)>)> = Vec::new();
    let mut off = 0u32;
    while off < size && lines.len() < 65536 {
        let at = va + u64::from(off);
        let r = rd.packet(at, (size - off) / 4);
        let nested = match &r {
            Ok((_, Packet::Indirect { va, size })) => Some((*va, *size)),
            _ => None,
        };
        let step = r.as_ref().map(|(w, _)| *w).ok();
        lines.push((line(depth, at, &r, failing), nested));
        match step {
            Some(w) => off += 4 * w,
            None => break,
        }
    }
    let focus = lines
        .iter()
        .position(|(l, _)| l.failing)
        .or_else(|| {
            // The buffer holding the failing packet deeper down.
            lines.iter().position(|(_, n)| {
                n.is_some_and(|(v, s)| failing.is_some_and(|f| f >= v && f < v + u64::from(s)))
            })
        })
        .unwrap_or(0);
    let lo = focus.saturating_sub(AROUND);
    let hi = (focus + AROUND + 1).min(lines.len());
    if lo > 0 {
        out.push(PacketLine {
            depth,
            va,
            name: String::new(),
            text: String::new(),
            packet: None,
            failing: false,
            at_rptr: false,
            skipped: lo,
        });
    }
    for (l, nested) in lines.drain(lo..hi) {
        out.push(l);
        if let Some((nva, nsize)) = nested {
            if depth < MAX_INDIRECT_DEPTH {
                list_buffer(rd, nva, nsize, depth + 1, failing, out);
            }
        }
    }
    let rest = lines.len() - lo;
    if rest > 0 {
        out.push(PacketLine {
            depth,
            va,
            name: String::new(),
            text: String::new(),
            packet: None,
            failing: false,
            at_rptr: false,
            skipped: rest,
        });
    }
}

/// The captured ring's packets around its read pointer.
fn list_ring(rd: &Reader<'_>, r: &CaptureRing, failing: Option<u64>) -> Vec<PacketLine> {
    let mut out = Vec::new();
    let va_of = |p: u32| r.va + u64::from(p & (r.size - 1));
    // A start before rptr from which decoding lands exactly on rptr.
    let mut start = r.rptr;
    for k in (1..=BEFORE_WORDS).rev() {
        let s = r.rptr.wrapping_sub(4 * k);
        let mut p = s;
        let mut ok = true;
        while p != r.rptr && r.rptr.wrapping_sub(p) <= 4 * BEFORE_WORDS {
            match rd.packet(va_of(p), r.rptr.wrapping_sub(p) / 4) {
                Ok((w, _)) => p = p.wrapping_add(4 * w),
                Err(_) => {
                    ok = false;
                    break;
                }
            }
        }
        if ok && p == r.rptr {
            start = s;
            break;
        }
    }
    let mut p = start;
    let mut after = 0;
    loop {
        let before = p != r.rptr && r.rptr.wrapping_sub(p) <= 4 * BEFORE_WORDS;
        if !before && (p == r.wptr || after >= AFTER || r.wptr.wrapping_sub(p) > r.size) {
            break;
        }
        let avail = if before {
            r.rptr.wrapping_sub(p)
        } else {
            r.wptr.wrapping_sub(p)
        } / 4;
        let res = rd.packet(va_of(p), avail.min(1024));
        let mut l = line(0, va_of(p), &res, failing);
        l.at_rptr = p == r.rptr;
        let nested = match &res {
            Ok((_, Packet::Indirect { va, size })) if !before => Some((*va, *size)),
            _ => None,
        };
        out.push(l);
        if let Some((nva, nsize)) = nested {
            list_buffer(rd, nva, nsize, 1, failing, &mut out);
        }
        if !before {
            after += 1;
        }
        match res {
            Ok((w, _)) => p = p.wrapping_add(4 * w),
            Err(_) => break,
        }
    }
    out
}

fn walk_lines(cap: &Capture<'_>, root: u64, va: u64, va_bits: u32) -> (Vec<WalkLine>, String) {
    let w = cap.walk(root, va, va_bits);
    let mut lines = Vec::new();
    for s in w.steps.iter().take(w.len) {
        let meaning = match s.pte {
            None => "not captured".to_owned(),
            Some(p) => pte_meaning(p, s.level),
        };
        lines.push(WalkLine {
            level: s.level,
            table: s.table,
            index: s.index,
            pte: s.pte.map(Pte::bits),
            meaning,
        });
    }
    let end = match w.end {
        WalkEnd::Leaf { page, shift, perms } => format!(
            "maps page {page:#x} ({} KiB, {})",
            (1u64 << shift) >> 10,
            perms_text(perms)
        ),
        WalkEnd::Fault(r) => format!(
            "{} at level {}",
            r.name(),
            w.steps.get(w.len.saturating_sub(1)).map_or(0, |s| s.level)
        ),
        WalkEnd::OutOfRange => "OUT_OF_RANGE (before the walk)".to_owned(),
        WalkEnd::Unknown => "table not captured".to_owned(),
    };
    (lines, end)
}

fn pte_meaning(p: Pte, level: u32) -> String {
    if !p.is_valid() {
        return "not present".to_owned();
    }
    match p.decode(level) {
        Ok(PteKind::Table(t)) => format!("table {t:#x}"),
        Ok(PteKind::Leaf(l)) => format!(
            "{} page {:#x} {} {:?}",
            if l.shift == 12 { "4 KiB" } else { "2 MiB" },
            l.page,
            perms_text(l.perms),
            l.cache
        ),
        Err(r) => r.name().to_owned(),
    }
}

/// Decodes a capture.
pub fn decode(cap: &Capture<'_>) -> Decoded {
    let h = cap.header;
    let context = cap
        .first(section::CONTEXT)
        .and_then(|s| s.one::<CaptureContext>());
    let rings: Vec<CaptureRing> = cap
        .of(section::RING)
        .filter_map(|s| s.one::<CaptureRing>())
        .collect();
    let inflight = cap
        .first(section::INFLIGHT)
        .and_then(|s| s.one::<CaptureInFlight>());
    let error = cap
        .first(section::ERROR)
        .and_then(|s| s.one::<EventRecord>());
    let root = context.map_or(0, |c| c.pt_root);
    let rd = Reader {
        cap: *cap,
        root,
        va_bits: h.va_bits,
        generation: h.generation,
    };
    let ev = error.as_ref().and_then(|e| Event::from_record(e).ok());
    let failing_va = match ev {
        Some(Event::Fault { packet_va, .. } | Event::EngineError { packet_va, .. }) => {
            Some(packet_va)
        }
        _ => inflight.map(|f| f.packet_va),
    };
    let failing = failing_va.map(|va| {
        let fl = inflight.filter(|f| f.packet_va == va);
        let active = fl.filter(|f| f.state == capture::INFLIGHT_ACTIVE);
        let packet = active
            .and_then(|f| {
                let hdr = decode_header(h.generation, f.packet[0]).ok()?;
                Packet::decode(hdr, f.packet.get(..f.words as usize)?).ok()
            })
            .or_else(|| rd.packet(va, 1024).ok().map(|(_, p)| p));
        let why = match ev {
            Some(_) => error.as_ref().map(event_text).unwrap_or_default(),
            None => format!("{} while in flight", reason::name(h.reason)),
        };
        Failing {
            va,
            depth: fl.map_or(0, |f| f.depth),
            name: packet.map_or("?".to_owned(), |p| p.name().to_owned()),
            packet,
            in_flight: active.map(|f| f.progress),
            why,
        }
    });
    let captured = rings
        .iter()
        .find(|r| r.flags & capture::RING_CAPTURED != 0)
        .copied();
    let listing = captured.map_or_else(Vec::new, |r| list_ring(&rd, &r, failing_va));
    let (walk, walk_end) = match ev {
        Some(Event::Fault { va, .. }) => {
            let (l, e) = walk_lines(cap, root, va, h.va_bits);
            (l, Some(e))
        }
        _ => (Vec::new(), None),
    };
    Decoded {
        header: h,
        context,
        rings,
        inflight,
        error,
        failing,
        listing,
        walk,
        walk_end,
        mappings: cap
            .first(section::MAPPING)
            .map(|s| s.records().collect())
            .unwrap_or_default(),
        tlb: cap
            .first(section::TLB)
            .map(|s| s.records().collect())
            .unwrap_or_default(),
        events: cap
            .first(section::EVENTS)
            .map(|s| s.records().collect())
            .unwrap_or_default(),
        inject: cap
            .first(section::INJECT)
            .map(|s| {
                String::from_utf8_lossy(s.data)
                    .lines()
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default(),
        memory: cap
            .of(section::MEMORY)
            .filter_map(|s| s.memory())
            .map(|(m, _)| (m.pa, m.va, m.size, m.what))
            .collect(),
    }
}

fn progress_text(p: &Packet, pr: &[u64; 4]) -> String {
    match p {
        Packet::Copy { .. } | Packet::Fill { .. } => format!("{}/{} bytes done", pr[0], pr[1]),
        Packet::Copy2d { .. } => format!("row {}/{} byte {}/{}", pr[0], pr[2], pr[1], pr[3]),
        Packet::Dispatch(_) => format!("{}/{} workgroups started", pr[0], pr[1]),
        _ => "started".to_owned(),
    }
}

/// What to print.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// Also the memory ranges captured, the TLB, recent events.
    pub all: bool,
}

/// The dump as text.
pub fn render_text(d: &CoreDump, opt: &Options) -> String {
    let mut s = String::new();
    if d.version != 0 {
        let _ = writeln!(
            s,
            "vgpu devcoredump (format {}){}",
            d.version,
            if d.complete { "" } else { " — CUT SHORT" }
        );
        if let Some(l) = d.records(cd::section::DUMP).first() {
            let _ = writeln!(s, "  {l}");
        }
    }
    match d.capture() {
        Ok(cap) => render_capture(&mut s, &decode(&cap), opt),
        Err(e) => {
            let _ = writeln!(s, "device capture: none: {e}");
        }
    }
    if d.version != 0 {
        for (name, recs) in &d.sections {
            if name == cd::section::DUMP {
                continue;
            }
            let _ = writeln!(s, "driver {name}: {} record(s)", recs.len());
            for r in recs {
                let _ = writeln!(s, "  {r}");
            }
        }
    }
    s
}

fn render_capture(s: &mut String, x: &Decoded, opt: &Options) {
    let h = &x.header;
    let _ = writeln!(
        s,
        "device capture {}: {} of context {} on the {} engine, {} bytes, taken in {:.3} ms at device time {:.6} s; gen {}, {}-bit VA, {} compute units{}{}",
        h.capture_id,
        reason::name(h.reason),
        h.ctx_id,
        engine_name(h.engine),
        h.total_size,
        h.capture_ns as f64 / 1e6,
        h.device_ns as f64 / 1e9,
        h.generation,
        h.va_bits,
        h.compute_units,
        if h.flags & capture::FLAG_MEMORY_TRUNCATED != 0 { "; memory budget exhausted" } else { "" },
        if h.flags & capture::FLAG_TABLES_TRUNCATED != 0 { "; table limit reached" } else { "" },
    );
    if let Some(c) = &x.context {
        let _ = writeln!(
            s,
            "context {}: priority {}, {}pt_root {:#x}, state {:#x}, faults {}, errors {}, packets {}, busy {:.3} ms",
            c.ctx_id,
            c.priority,
            if c.flags & 1 != 0 { "replayable faults, " } else { "" },
            c.pt_root,
            c.state,
            c.faults,
            c.errors,
            c.packets,
            c.busy_ns as f64 / 1e6
        );
    }
    for r in &x.rings {
        let _ = write!(
            s,
            "ring {}{}: va {:#x} size {} rptr {:#x} wptr {:#x} {} last_fence {} packets {} depth {}",
            engine_name(r.engine),
            if r.flags & capture::RING_CAPTURED != 0 { " (captured)" } else { "" },
            r.va,
            r.size,
            r.rptr,
            r.wptr,
            state_name(r.state),
            r.last_fence,
            r.packets,
            r.depth
        );
        if r.state == ring_state::STOPPED {
            let _ = write!(
                s,
                " error {} at rptr {:#x}",
                EngineError::from_u32(r.error).map_or("?", |e| e.name()),
                r.error_rptr
            );
        }
        for i in 0..(r.depth as usize).min(4) {
            let _ = write!(
                s,
                " [cmdbuf {:#x}+{:#x} at {:#x}]",
                r.frame_va[i], r.frame_size[i], r.frame_offset[i]
            );
        }
        if r.flags & capture::RING_DOORBELL_PENDING != 0 {
            let _ = write!(s, " doorbell {:#x} pending", r.doorbell);
        }
        if r.flags & capture::RING_RUNNING != 0 {
            let _ = write!(s, " (running: pointers as of its last slice)");
        }
        let _ = writeln!(s);
        let m = &r.status_mem;
        let _ = writeln!(
            s,
            "  status block {:#x}: rptr {:#x} state {} last_fence {} packets {} error {} error_rptr {:#x}",
            r.status_va,
            m[0] & 0xffff_ffff,
            state_name((m[0] >> 32) as u32),
            m[1],
            m[2],
            m[3] & 0xffff_ffff,
            m[3] >> 32
        );
    }
    if let Some(e) = &x.error {
        let _ = writeln!(s, "error: {}", event_text(e));
    }
    if let Some(f) = &x.failing {
        let _ = write!(
            s,
            "failing packet: {} at {:#x} (depth {}): {}",
            f.name,
            f.va,
            f.depth,
            f.packet.map_or("undecodable".to_owned(), |p| describe(&p))
        );
        if let (Some(pr), Some(p)) = (f.in_flight, f.packet) {
            let _ = write!(s, " — in flight, {}", progress_text(&p, &pr));
        }
        let _ = writeln!(s);
    }
    if !x.listing.is_empty() {
        let _ = writeln!(s, "ring packets around rptr (indented: command buffers):");
        for l in &x.listing {
            let pad = "    ".repeat(l.depth as usize);
            if l.skipped > 0 {
                let _ = writeln!(s, "      {pad}... {} packet(s) ...", l.skipped);
                continue;
            }
            let mark = match (l.failing, l.at_rptr) {
                (true, _) => "==>",
                (false, true) => "-->",
                _ => "   ",
            };
            let _ = writeln!(
                s,
                "  {mark} {pad}{:#014x}  {}{}",
                l.va,
                l.text,
                if l.failing { "   <== FAILING" } else { "" }
            );
        }
    }
    if !x.walk.is_empty() {
        let _ = writeln!(s, "fault walk (level by level):");
        for w in &x.walk {
            let _ = writeln!(
                s,
                "  L{} table {:#x}[{:3}] = {}  {}",
                w.level,
                w.table,
                w.index,
                w.pte
                    .map_or("????????????????".to_owned(), |p| format!("{p:#018x}")),
                w.meaning
            );
        }
        if let Some(e) = &x.walk_end {
            let _ = writeln!(s, "  => {e}");
        }
    }
    let _ = writeln!(s, "mappings: {} range(s)", x.mappings.len());
    for m in &x.mappings {
        let _ = writeln!(
            s,
            "  {:#014x}-{:#014x} -> {:#x} {} {}",
            m.va,
            m.va + m.size,
            m.pa,
            perms_text(u64::from(m.perms)),
            if m.level == 1 { "2M" } else { "4K" }
        );
    }
    let _ = writeln!(s, "tlb: {} entr(ies) of the context", x.tlb.len());
    if opt.all {
        for t in &x.tlb {
            let _ = writeln!(
                s,
                "  {} {:#x} -> {:#x} {} {}",
                match t.unit {
                    capture::TLB_ENGINE => "engine".to_owned(),
                    u => format!("cu{u}"),
                },
                t.va_base,
                t.pa_base,
                if t.shift == 12 { "4K" } else { "2M" },
                perms_text(u64::from(t.perms))
            );
        }
    }
    let _ = writeln!(s, "recent events: {}", x.events.len());
    let shown = if opt.all { x.events.len() } else { 8 };
    for e in x.events.iter().rev().take(shown).rev() {
        let _ = writeln!(
            s,
            "  #{} t={:.6} s {}",
            e.seq,
            e.timestamp_ns as f64 / 1e9,
            event_text(e)
        );
    }
    let _ = writeln!(s, "injector:");
    for l in &x.inject {
        let _ = writeln!(s, "  {l}");
    }
    let total: u64 = x.memory.iter().map(|m| m.2).sum();
    let _ = writeln!(
        s,
        "memory captured: {} range(s), {} bytes",
        x.memory.len(),
        total
    );
    if opt.all {
        for (pa, va, size, what) in &x.memory {
            let _ = writeln!(
                s,
                "  {} pa {pa:#x} size {size:#x}{}",
                memory::name(*what),
                if *va == capture::NO_VA {
                    String::new()
                } else {
                    format!(" va {va:#x}")
                }
            );
        }
    }
}

fn hex(v: u64) -> Value {
    Value::String(format!("{v:#x}"))
}

fn fields_of(text: &str) -> Value {
    let mut m = Map::new();
    for tok in text.split(' ').skip(1) {
        if let Some((k, v)) = tok.split_once('=') {
            m.insert(k.to_owned(), Value::String(v.to_owned()));
        }
    }
    Value::Object(m)
}

fn event_json(e: &EventRecord) -> Value {
    json!({
        "seq": e.seq,
        "timestamp_ns": e.timestamp_ns,
        "kind": vgpu_hwif::event::EventKind::from_u32(e.kind).map_or("?", |k| k.name()),
        "data": e.data.iter().map(|d| hex(*d)).collect::<Vec<_>>(),
        "text": event_text(e),
    })
}

/// The dump as JSON.
pub fn render_json(d: &CoreDump) -> Value {
    let mut driver = Map::new();
    for (name, recs) in &d.sections {
        let list: Vec<Value> = recs
            .iter()
            .map(|l| {
                let mut m = Map::new();
                m.insert("kind".into(), Value::String(cd::kind(l).to_owned()));
                for (k, v) in cd::fields(l) {
                    m.insert(k.to_owned(), Value::String(v.to_owned()));
                }
                Value::Object(m)
            })
            .collect();
        driver.insert(name.clone(), Value::Array(list));
    }
    let capture = match d.capture() {
        Ok(cap) => capture_json(&decode(&cap)),
        Err(e) => json!({ "error": e.to_string() }),
    };
    json!({
        "format": if d.version == 0 { "vgpu-capture" } else { "vgpu-devcoredump" },
        "version": d.version,
        "complete": d.complete,
        "driver": Value::Object(driver),
        "capture": capture,
    })
}

fn capture_json(x: &Decoded) -> Value {
    let h = &x.header;
    let failing = x.failing.as_ref().map(|f| {
        json!({
            "va": hex(f.va),
            "depth": f.depth,
            "name": f.name,
            "text": f.packet.map(|p| describe(&p)),
            "fields": f.packet.map(|p| fields_of(&describe(&p))),
            "in_flight": f.in_flight.is_some(),
            "progress": f.in_flight,
            "why": f.why,
        })
    });
    json!({
        "id": h.capture_id,
        "reason": reason::name(h.reason),
        "ctx": h.ctx_id,
        "engine": engine_name(h.engine),
        "generation": h.generation,
        "va_bits": h.va_bits,
        "compute_units": h.compute_units,
        "size": h.total_size,
        "capture_ns": h.capture_ns,
        "device_ns": h.device_ns,
        "memory_truncated": h.flags & capture::FLAG_MEMORY_TRUNCATED != 0,
        "context": x.context.map(|c| json!({
            "id": c.ctx_id, "priority": c.priority, "flags": c.flags, "state": c.state,
            "pt_root": hex(c.pt_root), "faults": c.faults, "errors": c.errors, "packets": c.packets,
        })),
        "rings": x.rings.iter().map(|r| json!({
            "engine": engine_name(r.engine), "va": hex(r.va), "size": r.size,
            "rptr": hex(r.rptr.into()), "wptr": hex(r.wptr.into()), "state": state_name(r.state),
            "error": EngineError::from_u32(r.error).map(|e| e.name()),
            "error_rptr": hex(r.error_rptr.into()), "depth": r.depth, "last_fence": r.last_fence,
            "packets": r.packets, "captured": r.flags & capture::RING_CAPTURED != 0,
            "frames": (0..(r.depth as usize).min(4)).map(|i| json!({
                "va": hex(r.frame_va[i]), "size": r.frame_size[i], "offset": r.frame_offset[i]
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "error": x.error.as_ref().map(event_json),
        "failing_packet": failing,
        "ring_packets": x.listing.iter().filter(|l| l.skipped == 0).map(|l| json!({
            "va": hex(l.va), "depth": l.depth, "name": l.name, "text": l.text,
            "fields": fields_of(&l.text), "failing": l.failing, "at_rptr": l.at_rptr,
        })).collect::<Vec<_>>(),
        "fault_walk": x.walk.iter().map(|w| json!({
            "level": w.level, "table": hex(w.table), "index": w.index,
            "pte": w.pte.map(hex), "meaning": w.meaning,
        })).collect::<Vec<_>>(),
        "fault_walk_end": x.walk_end,
        "mappings": x.mappings.iter().map(|m| json!({
            "va": hex(m.va), "pa": hex(m.pa), "size": m.size,
            "perms": perms_text(u64::from(m.perms)), "page": if m.level == 1 { "2M" } else { "4K" },
        })).collect::<Vec<_>>(),
        "tlb": x.tlb.iter().map(|t| json!({
            "unit": if t.unit == capture::TLB_ENGINE { "engine".to_owned() } else { format!("cu{}", t.unit) },
            "va": hex(t.va_base), "pa": hex(t.pa_base), "shift": t.shift,
            "perms": perms_text(u64::from(t.perms)),
        })).collect::<Vec<_>>(),
        "events": x.events.iter().map(event_json).collect::<Vec<_>>(),
        "inject": x.inject,
        "memory": x.memory.iter().map(|(pa, va, size, what)| json!({
            "pa": hex(*pa), "va": if *va == capture::NO_VA { Value::Null } else { hex(*va) },
            "size": size, "what": memory::name(*what),
        })).collect::<Vec<_>>(),
    })
}
