//! The dump as text, the way umr or aubinator print real rings.

use std::fmt::Write as _;

use vgpu_hwif::capture::{self, memory, reason};
use vgpu_hwif::coredump as cd;
use vgpu_hwif::packet::EngineError;
use vgpu_hwif::proto::ring_state;

use super::decode::progress_text;
use super::*;
use crate::cmdbuf::describe;

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
    render_state(s, x);
    render_failure(s, x);
    render_memory(s, x, opt);
}

/// The capture's header, the context and its rings.
fn render_state(s: &mut String, x: &Decoded) {
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
}

/// The error, the failing packet, the packets around it and the fault's
/// walk.
fn render_failure(s: &mut String, x: &Decoded) {
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
}

/// Mappings, TLB, recent events, the injector's log, memory captured.
fn render_memory(s: &mut String, x: &Decoded, opt: &Options) {
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
