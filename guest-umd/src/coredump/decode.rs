//! A capture decoded into what a developer reads: the rings' packets
//! around the read pointer, command buffers followed through `INDIRECT`,
//! the failing packet, the fault's page-table walk level by level.

use vgpu_hwif::capture::{self, reason, Capture, CaptureRing, WalkEnd};
use vgpu_hwif::mmu::{Pte, PteKind};
use vgpu_hwif::packet::{decode_header, Packet, MAX_INDIRECT_DEPTH};

use super::*;
use crate::cmdbuf::describe;

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
        Some(
            Event::Fault { packet_va, .. }
            | Event::EngineError(EngineErrorRecord { packet_va, .. }),
        ) => Some(packet_va),
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

pub(super) fn progress_text(p: &Packet, pr: &[u64; 4]) -> String {
    match p {
        Packet::Copy { .. } | Packet::Fill { .. } => format!("{}/{} bytes done", pr[0], pr[1]),
        Packet::Copy2d { .. } => format!("row {}/{} byte {}/{}", pr[0], pr[2], pr[1], pr[3]),
        Packet::Dispatch(_) => format!("{}/{} workgroups started", pr[0], pr[1]),
        _ => "started".to_owned(),
    }
}
