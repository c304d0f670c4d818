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
//!
//! Files: this one the dump and the decoded capture's types; `decode.rs`
//! the capture decoded (rings, command buffers, the fault's walk);
//! `text.rs` and `json.rs` the two renderings.

mod decode;
mod json;
mod text;

use std::fmt::Write as _;

pub use decode::{decode, read_va};
pub use json::render_json;
pub use text::{render_text, Options};

use vgpu_hwif::capture::{
    self, section, Capture, CaptureContext, CaptureHeader, CaptureInFlight, CaptureMapping,
    CaptureRing, CaptureTlbEntry,
};
use vgpu_hwif::coredump::{self as cd, base64_decode};
use vgpu_hwif::event::{EngineErrorRecord, Event, EventRecord};
use vgpu_hwif::mmu::{Access, FaultReason, PTE_EXEC, PTE_READ, PTE_WRITE};
use vgpu_hwif::packet::{EngineError, Packet};
use vgpu_hwif::proto::{engine, ring_state};

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
        Ok(Event::EngineError(EngineErrorRecord {
            ctx_id,
            engine,
            code,
            packet_va,
            rptr,
            depth,
            header,
            cmd_offset: _,
        })) => format!(
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
