//! A strict checker of the Chrome trace-event format (the JSON that
//! Perfetto, `chrome://tracing` and DevTools load), applied to any file —
//! the merged timeline, the device's trace, a replay's trace.
//!
//! It enforces the format's document ("Trace Event Format", the JSON object
//! form) and what Perfetto's JSON importer needs to build correct tracks,
//! more strictly than either (an importer skips or repairs what this
//! rejects):
//!
//! * the top level: an object with a `traceEvents` array (or a bare
//!   array), `displayTimeUnit` `ms` or `ns`, no unknown keys;
//! * every event: a known phase, `name` (but `E`), integer `pid` and `tid`,
//!   finite non-negative `ts` (but `M`), `dur` for `X`, `args` an object,
//!   `s` (instant scope) `g`, `p` or `t`, `id` for async and flow events,
//!   `bp` only `e`; metadata events of a known name with their argument;
//! * per thread: `B`/`E` balanced; slices (`X`, and `B`..`E`) properly
//!   nested — a slice that starts inside another ends inside it — with
//!   times taken to the ns both rounded and truncated (importers differ);
//! * async `b`/`e`: each `e` closes an open `b` of the same category and
//!   id, and every `b` is closed;
//! * flows (`s`, `t`, `f`, keyed by category, name and id): one `s` first,
//!   one `f` last, steps in time order, and every step binds to exactly
//!   one slice: a slice of its thread contains its time strictly inside
//!   (or, for an `f` without `bp: "e"`, a slice starts after it).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

/// Why a file could not be checked at all.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// Not JSON.
    #[error("not JSON: {0}")]
    Json(#[from] serde_json::Error),
}

/// What the check found.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Events.
    pub events: usize,
    /// Slices (`X` and `B`..`E`).
    pub slices: usize,
    /// Flows (distinct flow keys).
    pub flows: usize,
    /// Process names by pid, with their slice counts and thread counts.
    pub processes: BTreeMap<i64, (String, usize, usize)>,
    /// Violations of the format (the file fails).
    pub errors: Vec<String>,
}

const TOP_KEYS: [&str; 9] = [
    "traceEvents",
    "displayTimeUnit",
    "otherData",
    "metadata",
    "systemTraceEvents",
    "stackFrames",
    "samples",
    "powerTraceAsString",
    "controllerTraceDataKey",
];

const PHASES: &str = "BEXiICbneSTpFstfPNODMVvRc()";

/// An async event: time, index, phase, (pid, category, id).
type AsyncEv = (f64, usize, char, (i64, String, String));
/// A flow step: time, phase, index, pid, tid, whether it has `bp`.
type FlowStep = (f64, char, usize, i64, i64, bool);
/// Per thread (pid, tid): its slices with times rounded, and truncated.
type Slices = BTreeMap<(i64, i64), (Vec<Iv>, Vec<Iv>)>;
/// Per flow key (category, name, id): its steps.
type Flows = BTreeMap<(String, String, String), Vec<FlowStep>>;

/// An interval on one thread, ns.
#[derive(Clone, Copy)]
struct Iv {
    start: i64,
    end: i64,
    idx: usize,
}

/// A timestamp in ns: `ts` µs rounded, and truncated.
fn ns(v: f64) -> (i64, i64) {
    let x = v * 1000.0;
    (x.round() as i64, x.trunc() as i64)
}

impl Report {
    fn err(&mut self, i: usize, msg: impl std::fmt::Display) {
        if self.errors.len() < 10_000 {
            self.errors.push(format!("event {i}: {msg}"));
        }
    }
}

/// Checks `text`.
///
/// # Errors
///
/// [`CheckError::Json`] when it is not JSON at all (every other problem is
/// in the report).
pub fn check(text: &str) -> Result<Report, CheckError> {
    let doc: Value = serde_json::from_str(text)?;
    let mut r = Report::default();
    let empty = vec![];
    let events = top_level(&mut r, &doc).unwrap_or(&empty);
    r.events = events.len();
    let mut seen = Seen::default();
    // Events sorted by time (stable), as importers process them.
    let mut order: Vec<usize> = (0..events.len()).collect();
    let ts_of = |e: &Value| e.get("ts").and_then(Value::as_f64).unwrap_or(0.0);
    order.sort_by(|&a, &b| ts_of(&events[a]).total_cmp(&ts_of(&events[b])));
    for &i in &order {
        let Some(ev) = fields(&mut r, i, &events[i]) else {
            continue;
        };
        if ev.ph != 'M' {
            seen.threads.insert((ev.pid, ev.tid));
        }
        seen.phase(&mut r, i, ev);
    }
    for ((pid, tid), open) in &seen.open_b {
        for (_, i) in open {
            r.err(*i, format!("B never ended on thread {pid}/{tid}"));
        }
    }
    nesting(&mut r, &mut seen.slices);
    async_pairing(&mut r, &seen.async_ev);
    flow_binding(&mut r, &seen.flows, &seen.slices);
    for (pid, tid) in &seen.threads {
        let e = r
            .processes
            .entry(*pid)
            .or_insert_with(|| (seen.names.get(pid).cloned().unwrap_or_default(), 0, 0));
        e.2 += 1;
        e.1 += seen.slices.get(&(*pid, *tid)).map_or(0, |s| s.0.len());
    }
    Ok(r)
}

/// Checks the top level's keys; its events, if it has an array of them.
fn top_level<'a>(r: &mut Report, doc: &'a Value) -> Option<&'a Vec<Value>> {
    match doc {
        Value::Array(a) => Some(a),
        Value::Object(o) => {
            for k in o.keys() {
                if !TOP_KEYS.contains(&k.as_str()) {
                    r.errors.push(format!("unknown top-level key '{k}'"));
                }
            }
            if let Some(u) = o.get("displayTimeUnit") {
                if u != "ms" && u != "ns" {
                    r.errors
                        .push(format!("displayTimeUnit {u} is neither \"ms\" nor \"ns\""));
                }
            }
            if o.get("otherData").is_some_and(|v| !v.is_object()) {
                r.errors.push("otherData is not an object".into());
            }
            match o.get("traceEvents") {
                Some(Value::Array(a)) => Some(a),
                _ => {
                    r.errors.push("no traceEvents array".into());
                    None
                }
            }
        }
        _ => {
            r.errors
                .push("the top level is neither an object nor an array".into());
            None
        }
    }
}

/// What the events leave for the checks across events, per thread, async key and flow.
#[derive(Default)]
struct Seen {
    slices: Slices,
    open_b: BTreeMap<(i64, i64), Vec<(f64, usize)>>,
    async_ev: Vec<AsyncEv>,
    flows: Flows,
    threads: BTreeSet<(i64, i64)>,
    names: BTreeMap<i64, String>,
}

/// An event's fields common to every phase, once they are valid.
struct Fields<'a> {
    o: &'a serde_json::Map<String, Value>,
    ph: char,
    name: String,
    pid: i64,
    tid: i64,
    ts: f64,
    cat: String,
    /// `id`, when present: `None` if not a string or an integer.
    id: Option<Option<String>>,
}

/// Checks event `i`'s fields common to every phase; `None` if it cannot be checked further.
fn fields<'a>(r: &mut Report, i: usize, e: &'a Value) -> Option<Fields<'a>> {
    let Some(o) = e.as_object() else {
        r.err(i, "not an object");
        return None;
    };
    let ph = match o.get("ph").and_then(Value::as_str) {
        Some(p) if p.chars().count() == 1 && PHASES.contains(p) => p.chars().next().unwrap_or('?'),
        Some(p) => {
            r.err(i, format!("unknown phase '{p}'"));
            return None;
        }
        None => {
            r.err(i, "no ph");
            return None;
        }
    };
    let name = o.get("name");
    match name {
        Some(Value::String(_)) => {}
        None if ph == 'E' => {}
        _ => r.err(i, "name missing or not a string"),
    }
    let name = name.and_then(Value::as_str).unwrap_or("").to_owned();
    if o.get("cat").is_some_and(|c| !c.is_string()) {
        r.err(i, "cat is not a string");
    }
    let (Some(pid), Some(tid)) = (
        o.get("pid").and_then(Value::as_i64),
        o.get("tid").and_then(Value::as_i64),
    ) else {
        r.err(i, "pid or tid missing or not an integer");
        return None;
    };
    if o.get("args").is_some_and(|a| !a.is_object()) {
        r.err(i, "args is not an object");
    }
    let ts = o.get("ts").and_then(Value::as_f64);
    if ph != 'M' {
        match ts {
            Some(t) if t.is_finite() && t >= 0.0 => {}
            _ => {
                r.err(i, "ts missing, negative or not a number");
                return None;
            }
        }
    }
    let ts = ts.unwrap_or(0.0);
    let cat = o
        .get("cat")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let id = o.get("id").map(|v| match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) if n.is_u64() || n.is_i64() => Some(n.to_string()),
        _ => None,
    });
    if let Some(b) = o.get("bp") {
        if b != "e" {
            r.err(i, format!("bp {b} is not \"e\""));
        }
    }
    Some(Fields {
        o,
        ph,
        name,
        pid,
        tid,
        ts,
        cat,
        id,
    })
}

impl Seen {
    /// Checks event `i`'s rules for its phase and keeps what the later checks need.
    fn phase(&mut self, r: &mut Report, i: usize, ev: Fields<'_>) {
        let Fields {
            o,
            ph,
            name,
            pid,
            tid,
            ts,
            cat,
            id,
        } = ev;
        match ph {
            'M' => self.metadata(r, i, o, &name, pid),
            'X' => match o.get("dur").and_then(Value::as_f64) {
                Some(d) if d.is_finite() && d >= 0.0 => {
                    let (s0, s1) = ns(ts);
                    let (e0, e1) = (ns(ts + d).0, ns(ts).1 + ns(d).1);
                    let t = self.slices.entry((pid, tid)).or_default();
                    t.0.push(Iv {
                        start: s0,
                        end: e0,
                        idx: i,
                    });
                    t.1.push(Iv {
                        start: s1,
                        end: e1,
                        idx: i,
                    });
                }
                _ => r.err(i, "X without a finite non-negative dur"),
            },
            'B' => self.open_b.entry((pid, tid)).or_default().push((ts, i)),
            'E' => match self.open_b.entry((pid, tid)).or_default().pop() {
                Some((b, bi)) => {
                    let t = self.slices.entry((pid, tid)).or_default();
                    let (s, e) = (ns(b), ns(ts));
                    t.0.push(Iv {
                        start: s.0,
                        end: e.0,
                        idx: bi,
                    });
                    t.1.push(Iv {
                        start: s.1,
                        end: e.1,
                        idx: bi,
                    });
                }
                None => r.err(i, "E without an open B on its thread"),
            },
            'i' | 'I' => {
                if let Some(s) = o.get("s") {
                    if !matches!(s.as_str(), Some("g" | "p" | "t")) {
                        r.err(i, format!("instant scope {s} is not g, p or t"));
                    }
                }
            }
            'C' if !o
                .get("args")
                .and_then(Value::as_object)
                .is_some_and(|a| !a.is_empty() && a.values().all(Value::is_number)) =>
            {
                r.err(i, "counter without numeric args");
            }
            'b' | 'e' | 'n' => match id {
                Some(Some(id)) => self.async_ev.push((ts, i, ph, (pid, cat, id))),
                _ => r.err(i, "async event without a string or integer id"),
            },
            's' | 't' | 'f' => match id {
                Some(Some(id)) => {
                    let bp = o.get("bp").is_some();
                    self.flows
                        .entry((cat, name, id))
                        .or_default()
                        .push((ts, ph, i, pid, tid, bp));
                }
                _ => r.err(i, "flow event without a string or integer id"),
            },
            _ => {}
        }
    }

    /// Checks a metadata event (`M`): a known name with its argument; keeps process names.
    fn metadata(
        &mut self,
        r: &mut Report,
        i: usize,
        o: &serde_json::Map<String, Value>,
        name: &str,
        pid: i64,
    ) {
        let want = match name {
            "process_name" | "thread_name" => "name",
            "process_sort_index" | "thread_sort_index" => "sort_index",
            "process_labels" => "labels",
            other => {
                r.err(i, format!("unknown metadata '{other}'"));
                return;
            }
        };
        let a = o.get("args").and_then(|a| a.get(want));
        let ok = if want == "sort_index" {
            a.is_some_and(Value::is_i64)
        } else {
            a.is_some_and(Value::is_string)
        };
        if !ok {
            r.err(i, format!("{name} without a valid args.{want}"));
        }
        if name == "process_name" {
            self.names
                .insert(pid, a.and_then(Value::as_str).unwrap_or("").to_owned());
        }
    }
}

/// Checks that each thread's slices nest, with times rounded and truncated (sorts them).
fn nesting(r: &mut Report, slices: &mut Slices) {
    for (k, (a, b)) in slices.iter_mut() {
        for (how, ivs) in [("rounded", &mut *a), ("truncated", &mut *b)] {
            ivs.sort_by_key(|v| (v.start, -v.end));
            let mut stack: Vec<Iv> = vec![];
            for v in ivs.iter() {
                while stack.last().is_some_and(|t| t.end <= v.start) {
                    stack.pop();
                }
                if let Some(t) = stack.last() {
                    if v.end > t.end {
                        let msg = format!(
                            "slice overlaps event {}'s partially on thread {}/{} (times {how} to the ns: {}..{} vs {}..{})",
                            t.idx, k.0, k.1, v.start, v.end, t.start, t.end
                        );
                        r.err(v.idx, msg);
                        continue;
                    }
                }
                stack.push(*v);
            }
        }
        r.slices += a.len();
    }
}

/// Checks that each async `e` closes an open `b` of its key and that every `b` is closed.
fn async_pairing(r: &mut Report, async_ev: &[AsyncEv]) {
    let mut open_async: BTreeMap<(i64, String, String), usize> = BTreeMap::new();
    for (_, i, ph, key) in async_ev {
        match ph {
            'b' => *open_async.entry(key.clone()).or_default() += 1,
            'e' => match open_async.get_mut(key) {
                Some(n) if *n > 0 => *n -= 1,
                _ => r.err(*i, "async e without an open b of its category and id"),
            },
            _ => {}
        }
    }
    for ((pid, cat, id), n) in open_async {
        if n > 0 {
            r.errors.push(format!(
                "{n} async b never ended (pid {pid} cat '{cat}' id {id})"
            ));
        }
    }
}

/// Checks each flow's steps: `s`, `t`..., `f` in time order, each bound to a slice.
fn flow_binding(r: &mut Report, flows: &Flows, slices: &Slices) {
    r.flows = flows.len();
    let thread_slices = |pid: i64, tid: i64| slices.get(&(pid, tid)).map(|s| &s.0);
    for ((cat, name, id), steps) in flows {
        let who = format!("flow cat '{cat}' name '{name}' id {id}");
        let kinds: String = steps.iter().map(|s| s.1).collect();
        let well_formed = kinds.starts_with('s')
            && kinds.ends_with('f')
            && kinds.len() >= 2
            && kinds[1..kinds.len() - 1].chars().all(|c| c == 't');
        if !well_formed {
            r.errors.push(format!(
                "{who}: steps '{kinds}' are not s, t..., f in time order"
            ));
            continue;
        }
        for &(ts, ph, i, pid, tid, bp) in steps {
            let at = ns(ts).0;
            let ivs = thread_slices(pid, tid);
            let inside = ivs.is_some_and(|v| v.iter().any(|s| s.start < at && at < s.end));
            let next = ivs.is_some_and(|v| v.iter().any(|s| s.start >= at));
            let binds = if ph == 'f' && !bp { next } else { inside };
            if !binds {
                r.err(
                    i,
                    format!("{who}: the {ph} step binds to no slice of thread {pid}/{tid}"),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(events: &str) -> String {
        format!("{{\"displayTimeUnit\":\"ns\",\"traceEvents\":[{events}]}}")
    }

    #[test]
    fn a_good_trace_passes() {
        let r = check(&doc(
            "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"tid\":0,\"args\":{\"name\":\"p\"}},\
             {\"name\":\"a\",\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":1.000,\"dur\":10.0},\
             {\"name\":\"b\",\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":2.000,\"dur\":3.0},\
             {\"name\":\"c\",\"ph\":\"B\",\"pid\":1,\"tid\":2,\"ts\":1.0},{\"ph\":\"E\",\"pid\":1,\"tid\":2,\"ts\":4.0},\
             {\"name\":\"i\",\"ph\":\"i\",\"s\":\"t\",\"pid\":1,\"tid\":1,\"ts\":3.0},\
             {\"name\":\"j\",\"cat\":\"c\",\"ph\":\"b\",\"id\":1,\"pid\":1,\"tid\":1,\"ts\":3.0},\
             {\"name\":\"j\",\"cat\":\"c\",\"ph\":\"e\",\"id\":1,\"pid\":1,\"tid\":1,\"ts\":5.0},\
             {\"name\":\"f\",\"cat\":\"job\",\"ph\":\"s\",\"id\":7,\"pid\":1,\"tid\":1,\"ts\":2.5},\
             {\"name\":\"f\",\"cat\":\"job\",\"ph\":\"f\",\"bp\":\"e\",\"id\":7,\"pid\":1,\"tid\":2,\"ts\":3.5}",
        ))
        .unwrap();
        assert!(r.errors.is_empty(), "{:?}", r.errors);
        assert_eq!((r.events, r.slices, r.flows), (10, 3, 1));
        assert_eq!(r.processes[&1], ("p".to_owned(), 3, 2));
    }

    #[test]
    fn each_violation_is_reported() {
        let cases = [
            ("{\"name\":\"a\",\"ph\":\"Q\",\"pid\":1,\"tid\":1,\"ts\":1}", "unknown phase"),
            ("{\"name\":\"a\",\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":1}", "X without"),
            ("{\"name\":\"a\",\"ph\":\"X\",\"pid\":\"1\",\"tid\":1,\"ts\":1,\"dur\":1}", "pid or tid"),
            ("{\"name\":\"a\",\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":-1,\"dur\":1}", "ts missing"),
            ("{\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":1,\"dur\":1}", "name missing"),
            ("{\"name\":\"a\",\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":1,\"dur\":5},{\"name\":\"b\",\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":3,\"dur\":5}", "overlaps"),
            ("{\"name\":\"a\",\"ph\":\"B\",\"pid\":1,\"tid\":1,\"ts\":1}", "never ended"),
            ("{\"ph\":\"E\",\"pid\":1,\"tid\":1,\"ts\":1}", "E without"),
            ("{\"name\":\"a\",\"ph\":\"i\",\"s\":\"x\",\"pid\":1,\"tid\":1,\"ts\":1}", "instant scope"),
            ("{\"name\":\"x\",\"ph\":\"M\",\"pid\":1,\"tid\":1}", "unknown metadata"),
            ("{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":1,\"args\":{}}", "without a valid args.name"),
            ("{\"name\":\"a\",\"ph\":\"e\",\"id\":2,\"pid\":1,\"tid\":1,\"ts\":1}", "async e without"),
            ("{\"name\":\"a\",\"ph\":\"b\",\"id\":2,\"pid\":1,\"tid\":1,\"ts\":1}", "never ended (pid 1"),
            ("{\"name\":\"f\",\"ph\":\"s\",\"id\":2,\"pid\":1,\"tid\":1,\"ts\":1}", "are not s, t..., f"),
            (
                "{\"name\":\"a\",\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":1,\"dur\":1},\
                 {\"name\":\"f\",\"ph\":\"s\",\"id\":2,\"pid\":1,\"tid\":1,\"ts\":1.5},\
                 {\"name\":\"f\",\"ph\":\"f\",\"bp\":\"e\",\"id\":2,\"pid\":1,\"tid\":9,\"ts\":2}",
                "binds to no slice",
            ),
            ("{\"name\":\"a\",\"ph\":\"C\",\"pid\":1,\"tid\":1,\"ts\":1,\"args\":{\"v\":\"x\"}}", "counter"),
        ];
        for (events, want) in cases {
            let r = check(&doc(events)).unwrap();
            assert!(
                r.errors.iter().any(|e| e.contains(want)),
                "{events}: want '{want}', got {:?}",
                r.errors
            );
        }
        let r = check("{\"traceEvents\":[],\"bogus\":1,\"displayTimeUnit\":\"s\"}").unwrap();
        assert_eq!(r.errors.len(), 2, "{:?}", r.errors);
        assert!(check("{").is_err());
    }

    #[test]
    fn nesting_is_checked_with_truncated_times_too() {
        // 0.0015 + 0.0015 us: rounded, a ends at 3 ns where b starts
        // (touching); truncated, a's end is 2.
        let r = check(&doc(
            "{\"name\":\"a\",\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":0.0015,\"dur\":0.0015},\
             {\"name\":\"b\",\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":0.003,\"dur\":0.001}",
        ))
        .unwrap();
        assert!(r.errors.is_empty(), "{:?}", r.errors);
    }
}
