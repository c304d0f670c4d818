//! The three inputs of a timeline, parsed:
//!
//! * the KMD's trace (debugfs `trace` of `vgpu.ko`, text: a `#` header,
//!   then `<guest ns> <kind> key=value ...` per record, `sync` samples
//!   first; `guest-kmd/ktrace.rs`);
//! * the UMD's spans (`VGPU_TRACE=FILE`, JSON lines: a `{"process":..}`
//!   line per process, then one span per line; `guest-umd/src/trace.rs`);
//! * the device's packet trace (`vgpu-device --trace FILE`, Chrome
//!   trace-event JSON in microseconds of device time;
//!   `device/src/core/telemetry.rs`).
//!
//! Each may come from a console log: text between markers is cut out by
//! [`between_markers`].

use std::collections::BTreeMap;

/// Why an input could not be read.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// Not a KMD trace (no `# vgpu-kmd-trace` header).
    #[error("{what}: not a vgpu KMD trace (no '# vgpu-kmd-trace' header)")]
    NotKmdTrace {
        /// The input.
        what: String,
    },
    /// A line that does not parse.
    #[error("{what}:{line}: {why}")]
    BadLine {
        /// The input.
        what: String,
        /// Line number (1-based).
        line: usize,
        /// What is wrong.
        why: String,
    },
    /// Not JSON, or not the shape expected.
    #[error("{what}: {why}")]
    BadJson {
        /// The input.
        what: String,
        /// What is wrong.
        why: String,
    },
}

/// One KMD record: its guest time, kind and fields.
#[derive(Clone, Debug, PartialEq)]
pub struct KmdRec {
    /// Guest `CLOCK_MONOTONIC` ns.
    pub ts: u64,
    /// `ioctl_enter`, `submit`, `doorbell`, ...
    pub kind: String,
    /// `key=value` fields, as text.
    pub fields: BTreeMap<String, String>,
}

impl KmdRec {
    /// Field `key` as text.
    pub fn text(&self, key: &str) -> Option<&str> {
        self.fields.get(key).map(String::as_str)
    }

    /// Field `key` as a number (decimal, `0x` hex, or negative).
    pub fn num(&self, key: &str) -> Option<i128> {
        let v = self.fields.get(key)?;
        match v.strip_prefix("0x") {
            Some(h) => i128::from_str_radix(h, 16).ok(),
            None => v.parse().ok(),
        }
    }

    /// Field `key` as an unsigned number.
    pub fn u(&self, key: &str) -> Option<u64> {
        self.num(key).and_then(|v| u64::try_from(v).ok())
    }
}

/// A clock-sync sample: the device clock read between two guest times.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sync {
    /// Guest ns before the `TIME_QUERY`.
    pub t0: u64,
    /// Guest ns after its reply.
    pub t1: u64,
    /// The device clock it returned.
    pub device_ns: u64,
}

/// The KMD's trace.
#[derive(Clone, Debug, Default)]
pub struct KmdTrace {
    /// Records, in file order.
    pub recs: Vec<KmdRec>,
    /// Clock-sync samples.
    pub syncs: Vec<Sync>,
    /// Records the ring overwrote before the read.
    pub overwritten: u64,
}

/// Parses the KMD's trace text.
///
/// # Errors
///
/// [`InputError::NotKmdTrace`] without the header, [`InputError::BadLine`]
/// for a record that does not parse.
pub fn parse_kmd(what: &str, text: &str) -> Result<KmdTrace, InputError> {
    let mut t = KmdTrace::default();
    let mut header = false;
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if let Some(h) = line.strip_prefix("# vgpu-kmd-trace ") {
            header = true;
            let w: Vec<&str> = h.split_whitespace().collect();
            if let Some(p) = w.iter().position(|x| *x == "overwritten") {
                t.overwritten = w.get(p + 1).and_then(|v| v.parse().ok()).unwrap_or(0);
            }
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        let bad = |why: &str| InputError::BadLine {
            what: what.into(),
            line: i + 1,
            why: why.into(),
        };
        let mut words = line.split_whitespace();
        let ts = words
            .next()
            .and_then(|w| w.parse::<u64>().ok())
            .ok_or_else(|| bad("no time"))?;
        let kind = words.next().ok_or_else(|| bad("no kind"))?.to_owned();
        let mut fields = BTreeMap::new();
        for w in words {
            let (k, v) = w
                .split_once('=')
                .ok_or_else(|| bad(&format!("'{w}' is not key=value")))?;
            fields.insert(k.to_owned(), v.to_owned());
        }
        let rec = KmdRec { ts, kind, fields };
        if rec.kind == "sync" {
            let (Some(t1), Some(d)) = (rec.u("end"), rec.u("device_ns")) else {
                return Err(bad("sync without end= and device_ns="));
            };
            t.syncs.push(Sync {
                t0: ts,
                t1,
                device_ns: d,
            });
        } else {
            t.recs.push(rec);
        }
    }
    if !header {
        return Err(InputError::NotKmdTrace { what: what.into() });
    }
    Ok(t)
}

/// One UMD span.
#[derive(Clone, Debug, PartialEq)]
pub struct UmdSpan {
    /// Guest ns.
    pub ts: u64,
    /// ns.
    pub dur: u64,
    /// `api`, `ioctl`, `wait`.
    pub cat: String,
    /// What.
    pub name: String,
    /// Process and thread.
    pub pid: u64,
    /// Thread.
    pub tid: u64,
    /// Arguments.
    pub args: BTreeMap<String, i128>,
}

impl UmdSpan {
    /// Argument `key`.
    pub fn arg(&self, key: &str) -> Option<i128> {
        self.args.get(key).copied()
    }
}

/// The UMD's spans, of every process in the file.
#[derive(Clone, Debug, Default)]
pub struct UmdTrace {
    /// Process names by pid.
    pub processes: BTreeMap<u64, String>,
    /// Spans.
    pub spans: Vec<UmdSpan>,
}

/// Parses UMD JSON lines.
///
/// # Errors
///
/// [`InputError::BadLine`] for a line that is not a span or process line.
pub fn parse_umd(what: &str, text: &str) -> Result<UmdTrace, InputError> {
    let mut t = UmdTrace::default();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let bad = |why: String| InputError::BadLine {
            what: what.into(),
            line: i + 1,
            why,
        };
        let v: serde_json::Value = serde_json::from_str(line).map_err(|e| bad(e.to_string()))?;
        let u = |k: &str| v.get(k).and_then(serde_json::Value::as_u64);
        let s = |k: &str| v.get(k).and_then(serde_json::Value::as_str);
        if let (Some(p), Some(pid)) = (s("process"), u("pid")) {
            t.processes.insert(pid, p.to_owned());
            continue;
        }
        let (Some(ts), Some(dur), Some(cat), Some(name), Some(pid), Some(tid)) =
            (u("ts"), u("dur"), s("cat"), s("name"), u("pid"), u("tid"))
        else {
            return Err(bad("not a span (ts, dur, cat, name, pid, tid)".into()));
        };
        let mut args = BTreeMap::new();
        if let Some(a) = v.get("args").and_then(serde_json::Value::as_object) {
            for (k, x) in a {
                let n = x
                    .as_i64()
                    .map(i128::from)
                    .or_else(|| x.as_u64().map(i128::from))
                    .ok_or_else(|| bad(format!("argument {k} is not an integer")))?;
                args.insert(k.clone(), n);
            }
        }
        t.spans.push(UmdSpan {
            ts,
            dur,
            cat: cat.into(),
            name: name.into(),
            pid,
            tid,
            args,
        });
    }
    Ok(t)
}

/// One event of the device's trace, in device ns.
#[derive(Clone, Debug, PartialEq)]
pub struct DevEvent {
    /// `X` or `i`.
    pub ph: String,
    /// `packet`, `fetch`, `fence`, `command`, `event`, ...
    pub cat: String,
    /// Packet, command or event name.
    pub name: String,
    /// Track: engine, or the control or events track.
    pub tid: u64,
    /// Device ns.
    pub ts: u64,
    /// Device ns.
    pub dur: u64,
    /// Arguments (numbers; `packet_va` parsed from hex).
    pub args: BTreeMap<String, u64>,
}

impl DevEvent {
    /// Argument `key`.
    pub fn arg(&self, key: &str) -> Option<u64> {
        self.args.get(key).copied()
    }
}

/// The device's trace.
#[derive(Clone, Debug, Default)]
pub struct DevTrace {
    /// Events, in file order (metadata left out).
    pub events: Vec<DevEvent>,
    /// Records the device dropped.
    pub dropped: u64,
}

/// Microseconds with a fraction (the JSON's `ts`/`dur`) to ns.
fn us_to_ns(v: &serde_json::Value) -> Option<u64> {
    let f = v.as_f64()?;
    (f.is_finite() && f >= 0.0).then(|| (f * 1000.0).round() as u64)
}

/// Parses the device's Chrome trace-event JSON.
///
/// # Errors
///
/// [`InputError::BadJson`].
pub fn parse_device(what: &str, text: &str) -> Result<DevTrace, InputError> {
    let bad = |why: String| InputError::BadJson {
        what: what.into(),
        why,
    };
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
    let evs = v
        .get("traceEvents")
        .and_then(serde_json::Value::as_array)
        .ok_or_else(|| bad("no traceEvents array".into()))?;
    let mut t = DevTrace {
        dropped: v
            .pointer("/otherData/dropped")
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0),
        ..Default::default()
    };
    for (i, e) in evs.iter().enumerate() {
        let s = |k: &str| e.get(k).and_then(serde_json::Value::as_str);
        let ph = s("ph").ok_or_else(|| bad(format!("event {i} has no ph")))?;
        if ph == "M" {
            continue;
        }
        let ts = e
            .get("ts")
            .and_then(us_to_ns)
            .ok_or_else(|| bad(format!("event {i} has no valid ts")))?;
        let mut args = BTreeMap::new();
        if let Some(a) = e.get("args").and_then(serde_json::Value::as_object) {
            for (k, x) in a {
                let n = x.as_u64().or_else(|| {
                    x.as_str()
                        .and_then(|h| h.strip_prefix("0x"))
                        .and_then(|h| u64::from_str_radix(h, 16).ok())
                });
                if let Some(n) = n {
                    args.insert(k.clone(), n);
                }
            }
        }
        t.events.push(DevEvent {
            ph: ph.into(),
            cat: s("cat").unwrap_or("").into(),
            name: s("name").unwrap_or("").into(),
            tid: e
                .get("tid")
                .and_then(serde_json::Value::as_u64)
                .unwrap_or(0),
            ts,
            dur: e.get("dur").and_then(us_to_ns).unwrap_or(0),
            args,
        });
    }
    Ok(t)
}

/// The lines strictly between the first line equal to `begin` and the next
/// line equal to `end` (a console log's section), or `None`.
pub fn between_markers(text: &str, begin: &str, end: &str) -> Option<String> {
    let mut lines = text.lines().map(|l| l.trim_end_matches('\r'));
    lines.by_ref().find(|l| *l == begin)?;
    let mut out = String::new();
    for l in lines {
        if l == end {
            return Some(out);
        }
        out.push_str(l);
        out.push('\n');
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kmd_trace_records_and_syncs() {
        let t = parse_kmd(
            "k",
            "# vgpu-kmd-trace 1 clock monotonic enabled 1 capacity 64 records 2 total 5 overwritten 3 syncs 1\n\
             100 sync end=140 device_ns=9000\n\
             200 submit pid=5 tid=6 ctx=1 hw=0 engine=0 seqno=7 queued=0\n\
             210 ioctl_exit pid=5 tid=6 name=VGPU_SUBMIT ret=-11\n",
        )
        .unwrap();
        assert_eq!(t.overwritten, 3);
        assert_eq!(
            t.syncs,
            vec![Sync {
                t0: 100,
                t1: 140,
                device_ns: 9000
            }]
        );
        assert_eq!(t.recs.len(), 2);
        assert_eq!(
            (t.recs[0].u("seqno"), t.recs[1].num("ret")),
            (Some(7), Some(-11))
        );
        assert!(matches!(
            parse_kmd("k", "12 submit pid=1\n"),
            Err(InputError::NotKmdTrace { .. })
        ));
        assert!(matches!(
            parse_kmd("k", "# vgpu-kmd-trace 1\n12 submit nonsense\n"),
            Err(InputError::BadLine { line: 2, .. })
        ));
    }

    #[test]
    fn umd_lines_and_device_json() {
        let u = parse_umd(
            "u",
            "{\"process\":\"p\",\"pid\":4}\n{\"ts\":10,\"dur\":5,\"cat\":\"api\",\"name\":\"submit\",\"pid\":4,\"tid\":4,\"args\":{\"seqno\":3,\"ret\":-2}}\n",
        )
        .unwrap();
        assert_eq!(u.processes[&4], "p");
        assert_eq!(
            (u.spans[0].arg("seqno"), u.spans[0].arg("ret")),
            (Some(3), Some(-2))
        );
        assert!(parse_umd("u", "{\"ts\":1}\n").is_err());
        let d = parse_device(
            "d",
            "{\"otherData\":{\"dropped\":2},\"traceEvents\":[{\"name\":\"x\",\"ph\":\"M\",\"pid\":1,\"tid\":0},\
             {\"name\":\"COPY\",\"cat\":\"packet\",\"ph\":\"X\",\"pid\":1,\"tid\":0,\"ts\":1.5,\"dur\":0.25,\"args\":{\"ctx\":2,\"packet_va\":\"0x10\"}}]}",
        )
        .unwrap();
        assert_eq!(d.dropped, 2);
        assert_eq!(d.events.len(), 1);
        let e = &d.events[0];
        assert_eq!(
            (e.ts, e.dur, e.arg("ctx"), e.arg("packet_va")),
            (1500, 250, Some(2), Some(16))
        );
    }

    #[test]
    fn sections_of_a_console_log() {
        let log = "a\r\n=== b ===\r\nx\ny\n=== e ===\nz\n";
        assert_eq!(
            between_markers(log, "=== b ===", "=== e ===").as_deref(),
            Some("x\ny\n")
        );
        assert_eq!(between_markers(log, "nope", "=== e ==="), None);
        assert_eq!(
            between_markers("=== b ===\nx\n", "=== b ===", "=== e ==="),
            None
        );
    }
}
