//! The merged timeline: one Chrome trace-event JSON document on the guest's
//! `CLOCK_MONOTONIC`, a process per layer (each UMD process, `vgpu.ko`,
//! the device), and a flow arrow per job from the UMD's submit through the
//! device's packets to the fence signalled ([`crate::jobs`]).
//!
//! Tracks:
//!
//! * UMD: the program's threads, its spans (API calls, submits, waits,
//!   ioctls).
//! * `vgpu.ko`: the thread of each record (an ioctl's caller, the
//!   interrupt thread, work items), with ioctl and control-command spans
//!   and a short slice per submit, ring write, doorbell, event received,
//!   fence signal, hang, reset, fault and engine error; one track per ring
//!   (`ring slot S copy`) with each job from its ring write to its fence
//!   signal (jobs run in order on a ring, so a job starts at the later of
//!   its write and the previous signal).
//! * The device: a track per engine and context with the packets (spans)
//!   and the fetches, fences, faults, errors and resets (instants); the
//!   control commands received; the events raised (with when they were
//!   delivered).
//!
//! Point records are slices of [`POINT_NS`] (shortened so as never to
//! overlap the next slice of their track), so that flows bind to them.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::clock::{Clock, Pair};
use crate::input::{DevTrace, KmdRec, KmdTrace, UmdTrace};
use crate::jobs::{self, Chain, PID_DEVICE, PID_KMD, POINT_NS, STEPS, TID_CONTROL, TID_EVENTS};

/// First KMD ring track id.
const TID_RINGS: u64 = 1_000_000;

/// Why no timeline could be made.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    /// The device's trace cannot be placed without a clock sync.
    #[error(transparent)]
    Clock(#[from] crate::clock::ClockError),
}

/// What was merged, for the command's summary and the file's metadata.
#[derive(Clone, Debug)]
pub struct Summary {
    /// The clock mapping, when the device's trace was given.
    pub clock: Option<Clock>,
    /// Every job's chain.
    pub chains: Vec<Chain>,
    /// Events written.
    pub events: usize,
    /// Flows written.
    pub flows: usize,
    /// Inputs: device events, KMD records, UMD processes and spans.
    pub inputs: (usize, usize, usize, usize),
}

impl Summary {
    /// Chains with every required step.
    pub fn complete(&self) -> usize {
        self.chains.iter().filter(|c| c.complete()).count()
    }

    /// Complete chains in causal order on the one clock.
    pub fn ordered(&self) -> usize {
        self.chains
            .iter()
            .filter(|c| c.complete() && c.misorder().is_none())
            .count()
    }
}

/// A slice being built.
struct Slice {
    pid: u64,
    tid: u64,
    name: String,
    cat: &'static str,
    start: i64,
    dur: i64,
    point: bool,
    args: Value,
}

/// Microseconds (the format's unit) from ns, exact to the ns.
fn us(ns: i64) -> Value {
    json!(ns as f64 / 1000.0)
}

fn engine_name(e: u64) -> &'static str {
    match e {
        0 => "copy",
        1 => "compute",
        _ => "engine?",
    }
}

/// The causal pairs of the KMD's events, control commands and doorbells
/// with the device (a command is matched by name, nearest in time on
/// `clock0`). A
/// KMD doorbell is matched to the device's `DOORBELL` of the same context
/// slot, engine and write pointer nearest in time on `clock0` (slots and
/// write pointers repeat when a slot is reused).
fn pairs(kmd: &KmdTrace, dev: Option<&DevTrace>, clock0: &Clock) -> Vec<Pair> {
    let mut p: Vec<Pair> = kmd
        .recs
        .iter()
        .filter(|r| r.kind == "event")
        .filter_map(|r| {
            Some(Pair {
                guest_ns: r.ts,
                device_ns: r.u("device_ns")?,
                device_after: false,
            })
        })
        .collect();
    if let Some(d) = dev {
        // A control command: the device took it between the KMD's send and
        // the reply's arrival (like a TIME_QUERY).
        for r in kmd
            .recs
            .iter()
            .filter(|r| r.kind == "command" && r.num("ret") == Some(0))
        {
            let (Some(name), Some(end)) = (r.text("name"), r.u("end")) else {
                continue;
            };
            // The device's command of that name whose span falls within
            // the KMD's send and reply on clock0 (give or take clock0's
            // error, at most its longest TIME_QUERY round trip), when
            // exactly one does: back-to-back commands of one name (a
            // TIME_QUERY burst, a PING loop) are otherwise paired with a
            // neighbour, a false bound. With none there (a device trace
            // that does not belong to this clock), the first one after the
            // send, whose bounds then show the contradiction.
            let tol = clock0.rtt_ns.1 as f64;
            let after = |e: &&crate::input::DevEvent| {
                e.cat == "command" && e.name == name && clock0.to_guest(e.ts) >= r.ts as f64 - tol
            };
            let mut within = d
                .events
                .iter()
                .filter(after)
                .filter(|e| clock0.to_guest(e.ts + e.dur) <= end as f64 + tol);
            let m = match (within.next(), within.next()) {
                (Some(e), None) => Some(e),
                (Some(_), Some(_)) => None,
                _ => d.events.iter().filter(after).min_by_key(|e| e.ts),
            };
            if let Some(e) = m {
                p.push(Pair {
                    guest_ns: r.ts,
                    device_ns: e.ts,
                    device_after: true,
                });
                p.push(Pair {
                    guest_ns: end,
                    device_ns: e.ts + e.dur,
                    device_after: false,
                });
            }
        }
        for r in kmd
            .recs
            .iter()
            .filter(|r| r.kind == "doorbell" && r.num("ret") == Some(0))
        {
            let m = jobs::nearest_doorbell(&d.events, r, clock0);
            if let Some(e) = m {
                p.push(Pair {
                    guest_ns: r.ts,
                    device_ns: e.ts,
                    device_after: true,
                });
            }
        }
    }
    p
}

/// A KMD record's slice name and arguments.
fn kmd_slice(r: &KmdRec) -> Option<(String, Value)> {
    let f = |k: &str| r.text(k).unwrap_or("?").to_owned();
    // Addresses and raw data words stay hexadecimal text.
    let args: serde_json::Map<String, Value> = r
        .fields
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "pid" | "tid"))
        .map(|(k, v)| {
            let text = k.ends_with("va") || (k.len() == 2 && k.starts_with('d'));
            let val = match r.num(k) {
                Some(n) if !text => json!(n as i64),
                _ => json!(v),
            };
            (k.clone(), val)
        })
        .collect();
    let name = match r.kind.as_str() {
        "submit" => format!("submit ctx {} seqno {}", f("ctx"), f("seqno")),
        "ring_write" => format!("ring write seqno {}", f("seqno")),
        "doorbell" => format!("doorbell slot {} {}", f("hw"), engine_name(r.u("engine")?)),
        "event" => format!("event {} seq {}", f("name"), f("seq")),
        "fence_signal" => format!("fence signal seqno {}", f("seqno")),
        "hang" => format!("hang slot {}", f("hw")),
        "device_reset" => "device reset".to_owned(),
        "fault" => format!("fault {}", f("va")),
        "engine_error" => format!("engine error {}", f("name")),
        _ => return None,
    };
    Some((name, Value::Object(args)))
}

/// Builds the timeline from the KMD's trace and, if given, the device's
/// trace and the UMD's spans.
///
/// # Errors
///
/// [`MergeError::Clock`]: a device trace but no clock-sync sample.
pub fn merge(
    kmd: &KmdTrace,
    dev: Option<&DevTrace>,
    umd: Option<&UmdTrace>,
) -> Result<(Value, Summary), MergeError> {
    let clock = match dev {
        Some(d) => Some(fit_clock(kmd, d)?),
        None => None,
    };
    let mut recs: Vec<KmdRec> = kmd.recs.clone();
    recs.sort_by_key(|r| r.ts);
    let no_umd = UmdTrace::default();
    let umd = umd.unwrap_or(&no_umd);
    let no_dev = DevTrace::default();
    let chains = jobs::chains(
        &recs,
        &dev.unwrap_or(&no_dev).events,
        &umd.spans,
        clock.as_ref(),
    );

    let mut tracks = Tracks::default();
    umd_tracks(&mut tracks, umd);
    kmd_tracks(&mut tracks, &recs, umd);
    ring_tracks(&mut tracks, &chains);
    if let (Some(d), Some(clock)) = (dev, clock.as_ref()) {
        device_tracks(&mut tracks, d, clock);
    }
    fit_points(&mut tracks.slices);

    let mut events = metadata_events(umd, dev.is_some(), &tracks.threads);
    for s in &tracks.slices {
        events.push(
            json!({ "name": s.name, "cat": s.cat, "ph": "X", "pid": s.pid, "tid": s.tid,
                            "ts": us(s.start), "dur": us(s.dur), "args": s.args }),
        );
    }
    events.extend(tracks.instants);
    let flows = flow_events(&mut events, &chains);

    let summary = Summary {
        clock,
        events: events.len(),
        flows,
        inputs: (
            dev.map_or(0, |d| d.events.len()),
            kmd.recs.len(),
            umd.processes.len(),
            umd.spans.len(),
        ),
        chains,
    };
    let doc = document(kmd, dev, &summary, events);
    Ok((doc, summary))
}

/// The slices, instants and thread names of the tracks being built.
#[derive(Default)]
struct Tracks {
    slices: Vec<Slice>,
    instants: Vec<Value>,
    threads: BTreeMap<(u64, u64), String>,
}

/// The device clock on the guest's: fit to the `TIME_QUERY` samples, then to the causal pairs.
fn fit_clock(kmd: &KmdTrace, dev: &DevTrace) -> Result<Clock, MergeError> {
    let syncs: Vec<(u64, u64, u64)> = kmd
        .syncs
        .iter()
        .map(|s| (s.t0, s.t1, s.device_ns))
        .collect();
    let clock0 = Clock::fit(&syncs, &[])?;
    Ok(Clock::fit(&syncs, &pairs(kmd, Some(dev), &clock0))?)
}

/// The UMD's tracks: a thread per program thread, a slice per span.
fn umd_tracks(tracks: &mut Tracks, umd: &UmdTrace) {
    for s in &umd.spans {
        let args: serde_json::Map<String, Value> = s
            .args
            .iter()
            .map(|(k, v)| (k.clone(), json!(*v as i64)))
            .collect();
        tracks
            .threads
            .entry((s.pid, s.tid))
            .or_insert_with(|| format!("thread {}", s.tid));
        tracks.slices.push(Slice {
            pid: s.pid,
            tid: s.tid,
            name: s.name.clone(),
            cat: match s.cat.as_str() {
                "ioctl" => "ioctl",
                "wait" => "wait",
                _ => "api",
            },
            start: s.ts as i64,
            dur: s.dur as i64,
            point: false,
            args: Value::Object(args),
        });
    }
}

/// The KMD's threads (named): ioctl spans, control commands and point records.
fn kmd_tracks(tracks: &mut Tracks, recs: &[KmdRec], umd: &UmdTrace) {
    let slices = &mut tracks.slices;
    let mut open: BTreeMap<u64, Vec<&KmdRec>> = BTreeMap::new();
    // Per thread: its process, whether it made ioctls, what it recorded.
    let mut kthreads: BTreeMap<u64, (u64, bool, Vec<&str>)> = BTreeMap::new();
    for r in recs {
        let tid = r.u("tid").unwrap_or(0);
        let e = kthreads
            .entry(tid)
            .or_insert((r.u("pid").unwrap_or(0), false, Vec::new()));
        if !e.2.contains(&r.kind.as_str()) {
            e.2.push(&r.kind);
        }
        match r.kind.as_str() {
            "ioctl_enter" => {
                e.1 = true;
                open.entry(tid).or_default().push(r);
            }
            "ioctl_exit" => {
                let stack = open.entry(tid).or_default();
                if let Some(pos) = stack.iter().rposition(|o| o.text("name") == r.text("name")) {
                    let enter = stack.remove(pos);
                    stack.truncate(pos);
                    slices.push(Slice {
                        pid: PID_KMD,
                        tid,
                        name: r.text("name").unwrap_or("?").to_owned(),
                        cat: "ioctl",
                        start: enter.ts as i64,
                        dur: (r.ts - enter.ts) as i64,
                        point: false,
                        args: json!({ "ret": r.num("ret").map(|v| v as i64) }),
                    });
                }
            }
            "command" => {
                let end = r.u("end").unwrap_or(r.ts);
                slices.push(Slice {
                    pid: PID_KMD,
                    tid,
                    name: format!("cmd {}", r.text("name").unwrap_or("?")),
                    cat: "command",
                    start: r.ts as i64,
                    dur: end.saturating_sub(r.ts) as i64,
                    point: false,
                    args: json!({ "ret": r.num("ret").map(|v| v as i64) }),
                });
            }
            _ => {
                if let Some((name, args)) = kmd_slice(r) {
                    slices.push(Slice {
                        pid: PID_KMD,
                        tid,
                        name,
                        cat: "kmd",
                        start: r.ts as i64,
                        dur: POINT_NS,
                        point: true,
                        args,
                    });
                }
            }
        }
    }
    for (tid, (pid, ioctls, kinds)) in &kthreads {
        let name = match umd.processes.get(pid) {
            Some(p) => format!("{p} (pid {pid}) tid {tid}"),
            None if *ioctls => format!("pid {pid} tid {tid}"),
            None => format!("kernel thread {tid}: {}", kinds.join(", ")),
        };
        tracks.threads.insert((PID_KMD, *tid), name);
    }
}

/// The KMD's rings: each job from its ring write (or the previous signal) to its fence signal.
fn ring_tracks(tracks: &mut Tracks, chains: &[Chain]) {
    let mut last_end: BTreeMap<(u64, u64), i64> = BTreeMap::new();
    for c in chains {
        let (Some(w), Some(s)) = (
            c.points.iter().find(|p| p.step == 2),
            c.points.iter().find(|p| p.step == 9),
        ) else {
            continue;
        };
        let tid = TID_RINGS + c.hw * 16 + c.engine;
        let start = w
            .start
            .max(last_end.get(&(c.hw, c.engine)).copied().unwrap_or(0));
        last_end.insert((c.hw, c.engine), s.start);
        tracks.threads.insert(
            (PID_KMD, tid),
            format!("ring slot {} {}", c.hw, engine_name(c.engine)),
        );
        tracks.slices.push(Slice {
            pid: PID_KMD,
            tid,
            name: format!("job {}", c.seqno),
            cat: "job",
            start,
            dur: (s.start - start).max(0),
            point: false,
            args: json!({ "ctx": c.ctx, "slot": c.hw, "engine": c.engine, "seqno": c.seqno }),
        });
    }
}

/// The device's tracks on the guest clock: commands, events, a track per engine and context.
fn device_tracks(tracks: &mut Tracks, d: &DevTrace, clock: &Clock) {
    let threads = &mut tracks.threads;
    threads.insert(
        (PID_DEVICE, TID_CONTROL),
        "control (commands received)".into(),
    );
    threads.insert((PID_DEVICE, TID_EVENTS), "events (raised)".into());
    let g = |t: u64| clock.to_guest(t).round() as i64;
    for e in &d.events {
        let ctx = e.arg("ctx").unwrap_or(u64::MAX);
        let (tid, args) = match e.cat.as_str() {
            "command" => (
                TID_CONTROL,
                json!({ "ctx": e.arg("ctx"), "engine": e.arg("engine"), "wptr": e.arg("wptr") }),
            ),
            "event" => (
                TID_EVENTS,
                json!({ "ctx": e.arg("ctx"), "engine": e.arg("engine"), "seq": e.arg("seq"), "value": e.arg("value"),
                        "delivered_after_us": e.dur as f64 / 1000.0 }),
            ),
            _ => {
                let tid = jobs::packet_tid(e.tid, ctx);
                threads
                    .entry((PID_DEVICE, tid))
                    .or_insert_with(|| format!("{} engine ctx {}", engine_name(e.tid), ctx));
                (
                    tid,
                    json!({ "ctx": ctx, "packet_va": format!("{:#x}", e.arg("packet_va").unwrap_or(0)), "arg": e.arg("arg") }),
                )
            }
        };
        if e.ph == "X" {
            let (start, end) = (g(e.ts), g(e.ts + e.dur));
            let point = e.cat == "event";
            tracks.slices.push(Slice {
                pid: PID_DEVICE,
                tid,
                name: e.name.clone(),
                cat: if point { "event" } else { "device" },
                start,
                dur: if point {
                    POINT_NS
                } else {
                    (end - start).max(0)
                },
                point,
                args,
            });
        } else {
            tracks.instants.push(json!({ "name": e.name, "cat": e.cat, "ph": "i", "s": "t", "pid": PID_DEVICE, "tid": tid,
                                         "ts": us(g(e.ts)), "args": args }));
        }
    }
}

/// Sorts the slices by track and shortens the points so that they nest (see [`POINT_NS`]).
fn fit_points(slices: &mut [Slice]) {
    // Point slices never overlap the next slice of their track (nor end
    // after their parent): their slices nest.
    slices.sort_by_key(|s| (s.pid, s.tid, s.start, -s.dur));
    for i in 0..slices.len() {
        if !slices[i].point {
            continue;
        }
        let (pid, tid, start) = (slices[i].pid, slices[i].tid, slices[i].start);
        let mut limit = start + POINT_NS;
        if let Some(n) = slices[i + 1..]
            .iter()
            .take_while(|n| (n.pid, n.tid) == (pid, tid))
            .find(|n| n.start > start)
        {
            limit = limit.min(n.start);
        }
        // The innermost earlier slice that contains the start.
        if let Some(p) = slices[..i]
            .iter()
            .rev()
            .take_while(|p| (p.pid, p.tid) == (pid, tid))
            .find(|p| p.start <= start && p.start + p.dur > start)
        {
            limit = limit.min(p.start + p.dur);
        }
        slices[i].dur = (limit - start).max(0);
    }
}

/// The metadata events: the processes' names and sort indices, then the threads' names.
fn metadata_events(
    umd: &UmdTrace,
    with_device: bool,
    threads: &BTreeMap<(u64, u64), String>,
) -> Vec<Value> {
    let mut events: Vec<Value> = Vec::new();
    let mut sort_index = BTreeMap::new();
    for pid in umd.processes.keys().chain(umd.spans.iter().map(|s| &s.pid)) {
        let name = format!(
            "UMD {} (pid {pid})",
            umd.processes.get(pid).map_or("?", String::as_str)
        );
        sort_index.entry(*pid).or_insert((0, name));
    }
    sort_index.insert(PID_KMD, (1, "vgpu.ko (guest kernel)".into()));
    if with_device {
        sort_index.insert(
            PID_DEVICE,
            (2, "vgpu device (device time on the guest clock)".into()),
        );
    }
    for (pid, (i, name)) in &sort_index {
        events.push(json!({ "name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": { "name": name } }));
        events.push(json!({ "name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0, "args": { "sort_index": i } }));
    }
    for ((pid, tid), name) in threads {
        events.push(json!({ "name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": { "name": name } }));
    }
    events
}

/// Appends a flow per job in causal order, through its points; returns how many.
fn flow_events(events: &mut Vec<Value>, chains: &[Chain]) -> usize {
    // Flows: one per chain, through the points whose slice can hold a step
    // strictly inside (at least 2 ns long), from the first to the last.
    let mut flows = 0;
    // Only chains in causal order on the one clock get an arrow (the
    // others are listed in the metadata with where they break).
    for (id, c) in chains.iter().enumerate() {
        let pts: Vec<_> = c.points.iter().filter(|p| p.dur >= 2).collect();
        if pts.len() < 2 || c.misorder().is_some() {
            continue;
        }
        flows += 1;
        let name = c.name();
        for (i, p) in pts.iter().enumerate() {
            let ph = match i {
                0 => "s",
                i if i == pts.len() - 1 => "f",
                _ => "t",
            };
            let mut ev = json!({ "name": name, "cat": "job", "ph": ph, "id": id, "pid": p.pid, "tid": p.tid,
                                 "ts": us(p.start + 1), "args": { "step": STEPS[p.step] } });
            if ph == "f" {
                ev["bp"] = json!("e");
            }
            events.push(ev);
        }
    }
    flows
}

/// The timeline document: the events and `otherData` (the clock, the jobs, what was lost).
fn document(
    kmd: &KmdTrace,
    dev: Option<&DevTrace>,
    summary: &Summary,
    events: Vec<Value>,
) -> Value {
    let clock_json = summary.clock.as_ref().map(|c| {
        json!({ "model": "device_ns = slope * guest_ns + offset_ns", "slope": c.slope, "offset_ns": c.offset,
                "uncertainty_ns": c.uncertainty_ns, "conflict_ns": c.conflict_ns, "fit_offset_ns": c.fit_offset,
                "time_query_samples": c.samples, "rtt_ns": [c.rtt_ns.0, c.rtt_ns.1], "causal_pairs": c.pairs })
    });
    let jobs_json: Vec<Value> = summary
        .chains
        .iter()
        .map(|c| {
            json!({ "slot": c.hw, "engine": c.engine, "seqno": c.seqno, "ctx": c.ctx, "complete": c.complete(),
                    "misorder": c.misorder().map(|(a, b, ns)| format!("{} {ns} ns after {}", STEPS[a], STEPS[b])),
                    "steps": c.points.iter().map(|p| json!([STEPS[p.step], p.start])).collect::<Vec<_>>() })
        })
        .collect();
    // No displayTimeUnit: some Perfetto versions read it as the unit of
    // `ts`, which the format says is always microseconds.
    json!({
        "otherData": {
            "generator": "vgpu-timeline",
            "clock": "guest CLOCK_MONOTONIC (us); device time mapped onto it",
            "device_clock": clock_json,
            "kmd_overwritten": kmd.overwritten,
            "device_dropped": dev.map_or(0, |d| d.dropped),
            "jobs": jobs_json,
        },
        "traceEvents": events,
    })
}
