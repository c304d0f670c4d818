//! The dump as JSON (`vgpu-dump --json`).

use serde_json::{json, Map, Value};
use vgpu_hwif::capture::{self, memory, reason};
use vgpu_hwif::coredump as cd;

use super::*;
use crate::cmdbuf::describe;

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
