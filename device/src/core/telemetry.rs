//! Telemetry: per-engine and per-context counters (`QUERY_STATS`,
//! `CONTEXT_QUERY`) and the packet trace (`vgpu-device --trace FILE`).
//!
//! Engines count into a per-slice [`Stats`] while they run and add it to
//! the engine's and the context's totals when the slice ends, so counters
//! lag the hardware by at most one time slice.
//!
//! The trace records, per packet, its fetch (an instant), its execution (a
//! span from start to end) and each fence, fault, engine error and reset;
//! each control command from its arrival to its reply (the `control` track:
//! a `DOORBELL` with its context, engine and write pointer) and each event
//! record from its raising to its delivery into a driver buffer (the
//! `events` track, with its sequence number). It is written as a Chrome
//! trace-event JSON file (open it in Perfetto or `chrome://tracing`, or
//! join it with the drivers' traces with `vgpu-timeline`): one process, one
//! track per engine, times in microseconds of device time. It holds at most
//! [`TRACE_LIMIT`] records; later ones are counted in the file's metadata
//! and dropped.

use std::io::{self, Write};

use vgpu_hwif::event::{EngineErrorRecord, Event, EventKind, EventRecord};
use vgpu_hwif::proto::{engine, Command, StatsReply, CTX_NONE};

/// Counters of one engine, one context, or the whole device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Nanoseconds holding an engine.
    pub busy_ns: u64,
    /// Packets completed.
    pub packets: u64,
    /// Bytes copied or filled.
    pub bytes: u64,
    /// Page faults.
    pub faults: u64,
    /// Engine errors.
    pub errors: u64,
    /// Resets (of the engine; of the context: its work dropped by one).
    pub resets: u64,
    /// Fences written.
    pub fences: u64,
    /// TLB hits.
    pub tlb_hits: u64,
    /// TLB misses.
    pub tlb_misses: u64,
    /// Kernel workgroups completed.
    pub workgroups: u64,
    /// Kernel lane operations (instructions times the lanes executing them).
    pub lane_ops: u64,
    /// Modelled time of the kernels' completed workgroups, in compute-unit
    /// cycles (docs/isa.md, "Performance model").
    pub cycles: u64,
}

impl Stats {
    /// Adds `o` to `self` (saturating).
    pub fn add(&mut self, o: &Stats) {
        let pairs = [
            (&mut self.busy_ns, o.busy_ns),
            (&mut self.packets, o.packets),
            (&mut self.bytes, o.bytes),
            (&mut self.faults, o.faults),
            (&mut self.errors, o.errors),
            (&mut self.resets, o.resets),
            (&mut self.fences, o.fences),
            (&mut self.tlb_hits, o.tlb_hits),
            (&mut self.tlb_misses, o.tlb_misses),
            (&mut self.workgroups, o.workgroups),
            (&mut self.lane_ops, o.lane_ops),
            (&mut self.cycles, o.cycles),
        ];
        for (a, b) in pairs {
            *a = a.saturating_add(b);
        }
    }

    /// The `QUERY_STATS` reply body (header left zero).
    pub fn to_reply(&self, kind: u32, id: u32) -> StatsReply {
        StatsReply {
            hdr: vgpu_hwif::proto::ReplyHeader {
                status: 0,
                opcode: 0,
                tag: 0,
            },
            kind,
            id,
            busy_ns: self.busy_ns,
            packets: self.packets,
            bytes: self.bytes,
            faults: self.faults,
            errors: self.errors,
            resets: self.resets,
            fences: self.fences,
            tlb_hits: self.tlb_hits,
            tlb_misses: self.tlb_misses,
            workgroups: self.workgroups,
            lane_ops: self.lane_ops,
            cycles: self.cycles,
        }
    }
}

/// Largest number of trace records kept.
pub const TRACE_LIMIT: usize = 1 << 20;

/// What a trace record marks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceKind {
    /// A packet's words were fetched and decoded (instant).
    Fetch,
    /// A packet executed from `ts` for `dur` (span).
    Packet,
    /// A fence was written (instant; `arg` = seqno).
    Fence,
    /// A page fault (instant; `arg` = faulting VA).
    Fault,
    /// An engine error stopped a ring (instant; `arg` = error code).
    Error,
    /// The engine was reset (instant).
    Reset,
    /// A control command from its arrival (`ts`) to its reply (`dur`);
    /// for a `DOORBELL` `ctx`, `engine` and `arg` = the write pointer.
    Command,
    /// An event record from its raising (`ts`) to its delivery (`dur`):
    /// `arg` = its sequence number, `packet_va` = its value (a fence's
    /// seqno, a fault's VA, an engine error's code).
    Event,
}

/// Track of the control commands in the JSON trace.
pub const TRACK_CONTROL: u32 = 2;
/// Track of the event records in the JSON trace.
pub const TRACK_EVENTS: u32 = 3;

/// The trace record of command `bytes`, arrived at `t0` and answered at
/// `t1` (device ns).
pub fn command_record(bytes: &[u8], t0: u64, t1: u64) -> TraceRecord {
    let (name, ctx, engine, arg) = match Command::decode(bytes).1 {
        Ok(Command::Doorbell {
            ctx_id,
            engine,
            wptr,
        }) => ("DOORBELL", ctx_id, engine, u64::from(wptr)),
        Ok(c) => (c.opcode().name(), CTX_NONE, 0, 0),
        Err(_) => ("malformed", CTX_NONE, 0, 0),
    };
    TraceRecord {
        kind: TraceKind::Command,
        name,
        engine,
        ctx,
        ts_ns: t0,
        dur_ns: t1.saturating_sub(t0),
        packet_va: 0,
        arg,
    }
}

/// The trace record of event record `rec`, delivered at `delivered_ns`.
pub fn event_record(rec: &EventRecord, delivered_ns: u64) -> TraceRecord {
    let name = EventKind::from_u32(rec.kind).map_or("?", EventKind::name);
    let (ctx, engine, value) = match Event::from_record(rec) {
        Ok(Event::Fence {
            ctx_id,
            engine,
            seqno,
            ..
        }) => (ctx_id, engine, seqno),
        Ok(Event::EngineError(EngineErrorRecord {
            ctx_id,
            engine,
            code,
            ..
        })) => (ctx_id, engine, u64::from(code)),
        Ok(Event::Fault { va, info, .. }) => (u32::from(info.ctx_id), u32::from(info.engine), va),
        _ => (CTX_NONE, 0, rec.data[0]),
    };
    TraceRecord {
        kind: TraceKind::Event,
        name,
        engine,
        ctx,
        ts_ns: rec.timestamp_ns,
        dur_ns: delivered_ns.saturating_sub(rec.timestamp_ns),
        packet_va: value,
        arg: rec.seq,
    }
}

/// One trace record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceRecord {
    /// Kind.
    pub kind: TraceKind,
    /// Packet or record name.
    pub name: &'static str,
    /// Engine.
    pub engine: u32,
    /// Context.
    pub ctx: u32,
    /// Device time (ns).
    pub ts_ns: u64,
    /// Duration (ns) for spans.
    pub dur_ns: u64,
    /// GPU VA of the packet.
    pub packet_va: u64,
    /// Kind-specific value.
    pub arg: u64,
}

/// The trace buffer.
#[derive(Debug, Default)]
pub struct Trace {
    records: Vec<TraceRecord>,
    dropped: u64,
}

impl Trace {
    /// An empty trace.
    pub fn new() -> Self {
        Trace::default()
    }

    /// Appends records, dropping (and counting) those beyond
    /// [`TRACE_LIMIT`].
    pub fn extend(&mut self, recs: &[TraceRecord]) {
        let room = TRACE_LIMIT.saturating_sub(self.records.len());
        let take = recs.len().min(room);
        self.records
            .extend_from_slice(recs.get(..take).unwrap_or(&[]));
        self.dropped = self.dropped.saturating_add((recs.len() - take) as u64);
    }

    /// Records kept.
    pub fn records(&self) -> &[TraceRecord] {
        &self.records
    }

    /// Records dropped.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Writes the Chrome trace-event JSON document.
    pub fn write_json(&self, out: &mut dyn Write) -> io::Result<()> {
        fn us(ns: u64) -> String {
            format!("{}.{:03}", ns / 1000, ns % 1000)
        }
        writeln!(out, "{{\"displayTimeUnit\":\"ns\",")?;
        writeln!(
            out,
            "\"otherData\":{{\"device\":\"vgpu\",\"records\":{},\"dropped\":{}}},",
            self.records.len(),
            self.dropped
        )?;
        writeln!(out, "\"traceEvents\":[")?;
        write!(
            out,
            "{{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"tid\":0,\"args\":{{\"name\":\"vgpu\"}}}}"
        )?;
        for (e, name) in [
            (engine::COPY, "copy engine"),
            (engine::COMPUTE, "compute engine"),
            (TRACK_CONTROL, "control"),
            (TRACK_EVENTS, "events"),
        ] {
            write!(
                out,
                ",\n{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":{e},\"args\":{{\"name\":\"{name}\"}}}}"
            )?;
        }
        for r in &self.records {
            let (ph, cat) = match r.kind {
                TraceKind::Fetch => ("i", "fetch"),
                TraceKind::Packet => ("X", "packet"),
                TraceKind::Fence => ("i", "fence"),
                TraceKind::Fault => ("i", "fault"),
                TraceKind::Error => ("i", "error"),
                TraceKind::Reset => ("i", "reset"),
                TraceKind::Command => ("X", "command"),
                TraceKind::Event => ("X", "event"),
            };
            let tid = match r.kind {
                TraceKind::Command => TRACK_CONTROL,
                TraceKind::Event => TRACK_EVENTS,
                _ => r.engine,
            };
            write!(
                out,
                ",\n{{\"name\":\"{}\",\"cat\":\"{cat}\",\"ph\":\"{ph}\",\"pid\":1,\"tid\":{tid},\"ts\":{}",
                r.name,
                us(r.ts_ns)
            )?;
            if ph == "X" {
                write!(out, ",\"dur\":{}", us(r.dur_ns))?;
            } else {
                write!(out, ",\"s\":\"t\"")?;
            }
            match r.kind {
                TraceKind::Command => write!(
                    out,
                    ",\"args\":{{\"ctx\":{},\"engine\":{},\"wptr\":{}}}}}",
                    r.ctx, r.engine, r.arg
                )?,
                TraceKind::Event => write!(
                    out,
                    ",\"args\":{{\"ctx\":{},\"engine\":{},\"seq\":{},\"value\":{}}}}}",
                    r.ctx, r.engine, r.arg, r.packet_va
                )?,
                _ => write!(
                    out,
                    ",\"args\":{{\"ctx\":{},\"packet_va\":\"{:#x}\",\"arg\":{}}}}}",
                    r.ctx, r.packet_va, r.arg
                )?,
            }
        }
        writeln!(out, "\n]}}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_add_and_reply() {
        let mut a = Stats {
            packets: 2,
            bytes: u64::MAX - 1,
            ..Default::default()
        };
        a.add(&Stats {
            packets: 3,
            bytes: 5,
            fences: 1,
            ..Default::default()
        });
        assert_eq!((a.packets, a.bytes, a.fences), (5, u64::MAX, 1));
        let r = a.to_reply(1, 7);
        assert_eq!((r.kind, r.id, r.packets, r.fences), (1, 7, 5, 1));
    }

    #[test]
    fn trace_is_bounded_and_valid_json_shape() {
        let rec = TraceRecord {
            kind: TraceKind::Packet,
            name: "COPY",
            engine: 0,
            ctx: 3,
            ts_ns: 1_234_567,
            dur_ns: 2_000,
            packet_va: 0x1000,
            arg: 0,
        };
        let mut t = Trace::new();
        t.extend(&[
            rec,
            TraceRecord {
                kind: TraceKind::Fence,
                name: "FENCE",
                arg: 9,
                ..rec
            },
        ]);
        let mut out = Vec::new();
        t.write_json(&mut out).unwrap();
        let s = String::from_utf8(out).unwrap();
        assert!(s.contains("\"name\":\"COPY\",\"cat\":\"packet\",\"ph\":\"X\",\"pid\":1,\"tid\":0,\"ts\":1234.567,\"dur\":2.000"), "{s}");
        assert!(s.contains("\"ph\":\"i\""));
        assert!(s.contains("\"packet_va\":\"0x1000\""));
        assert_eq!(s.matches('{').count(), s.matches('}').count());
        assert!(s.trim_end().ends_with("]}"));
        let db = Command::Doorbell {
            ctx_id: 2,
            engine: 1,
            wptr: 0x40,
        };
        let mut bytes = [0u8; 64];
        let n = db.encode(9, &mut bytes).unwrap();
        let ev = Event::Fence {
            ctx_id: 2,
            engine: 1,
            seqno: 5,
            va: 0x1000,
        }
        .to_record(12, 3_000);
        t.extend(&[
            command_record(&bytes[..n], 1_000, 1_500),
            command_record(&[1, 2], 2_000, 2_000),
            event_record(&ev, 4_250),
        ]);
        let mut out = Vec::new();
        t.write_json(&mut out).unwrap();
        let s = String::from_utf8(out).unwrap();
        assert!(s.contains("{\"name\":\"DOORBELL\",\"cat\":\"command\",\"ph\":\"X\",\"pid\":1,\"tid\":2,\"ts\":1.000,\"dur\":0.500,\"args\":{\"ctx\":2,\"engine\":1,\"wptr\":64}}"), "{s}");
        assert!(
            s.contains("{\"name\":\"malformed\",\"cat\":\"command\""),
            "{s}"
        );
        assert!(s.contains("{\"name\":\"FENCE\",\"cat\":\"event\",\"ph\":\"X\",\"pid\":1,\"tid\":3,\"ts\":3.000,\"dur\":1.250,\"args\":{\"ctx\":2,\"engine\":1,\"seq\":12,\"value\":5}}"), "{s}");
        assert!(
            s.contains("\"args\":{\"name\":\"control\"}")
                && s.contains("\"args\":{\"name\":\"events\"}")
        );
        let many = vec![rec; 1000];
        for _ in 0..(TRACE_LIMIT / 1000 + 1) {
            t.extend(&many);
        }
        assert_eq!(t.records().len(), TRACE_LIMIT);
        assert!(t.dropped() > 0);
    }
}
