//! One job's way through the stack, found in the three traces: the UMD's
//! submit, the KMD's `SUBMIT`, the job written into its ring, the doorbell,
//! the device receiving that doorbell, the job's first packet and its
//! `FENCE` packet on the engine, the `FENCE` event raised, the KMD's
//! interrupt thread receiving it, and the fence signalled — each a moment
//! on one slice of one track, joined by a flow arrow in the timeline.

use std::collections::BTreeMap;

use crate::clock::Clock;
use crate::input::{DevEvent, KmdRec, UmdSpan};

/// The pid of the KMD's process in the timeline (beyond any guest pid).
pub const PID_KMD: u64 = 4_194_305;
/// The pid of the device's process in the timeline.
pub const PID_DEVICE: u64 = 4_194_306;
/// Device track of the control commands.
pub const TID_CONTROL: u64 = 2;
/// Device track of the event records.
pub const TID_EVENTS: u64 = 3;
/// Duration of a point record's slice (ns): long enough for a flow to bind
/// to it (the timeline shortens it where it would overlap the next slice).
pub const POINT_NS: i64 = 2;

/// The device track of the packets of context `ctx` on `engine`.
pub fn packet_tid(engine: u64, ctx: u64) -> u64 {
    (engine + 1) * 1000 + ctx
}

/// A moment of a job on one slice: the slice's track, its start and
/// duration (guest ns).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Point {
    /// Which step of the chain ([`STEPS`]).
    pub step: usize,
    /// Track.
    pub pid: u64,
    /// Track.
    pub tid: u64,
    /// The slice's start (guest ns).
    pub start: i64,
    /// The slice's duration (ns).
    pub dur: i64,
}

/// The steps of a chain, in causal order.
pub const STEPS: [&str; 10] = [
    "umd submit",
    "kmd submit",
    "ring write",
    "kmd doorbell",
    "device doorbell",
    "first packet",
    "fence packet",
    "fence event",
    "kmd event",
    "fence signal",
];

/// Steps every complete chain has (the UMD's is optional: a job may come
/// from a program that does not trace).
pub const REQUIRED: [usize; 9] = [1, 2, 3, 4, 5, 6, 7, 8, 9];

/// One job's chain.
#[derive(Clone, Debug, PartialEq)]
pub struct Chain {
    /// Context slot (the device's context id).
    pub hw: u64,
    /// Engine.
    pub engine: u64,
    /// KMD seqno.
    pub seqno: u64,
    /// Context handle of the submitting file.
    pub ctx: Option<u64>,
    /// The points found, in step order.
    pub points: Vec<Point>,
}

impl Chain {
    /// Whether every required step was found.
    pub fn complete(&self) -> bool {
        REQUIRED
            .iter()
            .all(|s| self.points.iter().any(|p| p.step == *s))
    }

    /// The first pair of consecutive steps out of order on the one clock
    /// (a later step starting before an earlier one), if any.
    pub fn misorder(&self) -> Option<(usize, usize, i64)> {
        self.points
            .windows(2)
            .find(|w| w[1].start < w[0].start)
            .map(|w| (w[0].step, w[1].step, w[0].start - w[1].start))
    }

    /// The chain's name in the timeline.
    pub fn name(&self) -> String {
        format!(
            "job slot {} engine {} seqno {}",
            self.hw, self.engine, self.seqno
        )
    }
}

/// A KMD point slice: guest ns and the track of the record.
fn kmd_point(step: usize, r: &KmdRec) -> Point {
    Point {
        step,
        pid: PID_KMD,
        tid: r.u("tid").unwrap_or(0),
        start: r.ts as i64,
        dur: POINT_NS,
    }
}

/// A device slice as a point on the one clock.
fn dev_point(step: usize, clock: &Clock, tid: u64, e: &DevEvent) -> Point {
    let start = clock.to_guest(e.ts).round() as i64;
    let end = clock.to_guest(e.ts + e.dur).round() as i64;
    Point {
        step,
        pid: PID_DEVICE,
        tid,
        start,
        dur: (end - start).max(POINT_NS),
    }
}

/// Whether write pointer `wptr` publishes the job written `bytes` bytes
/// from `at` (all in bytes ever written, modulo 2^32).
fn covers(wptr: u64, at: u64, bytes: u64) -> bool {
    let d = wptr.wrapping_sub(at) & 0xffff_ffff;
    d >= bytes && d < 1 << 31
}

/// The device's `DOORBELL` command matching KMD doorbell record `r` (same
/// slot, engine and write pointer), the nearest in time on `clock`.
pub fn nearest_doorbell<'a>(
    dev: &'a [DevEvent],
    r: &KmdRec,
    clock: &Clock,
) -> Option<&'a DevEvent> {
    dev.iter()
        .filter(|e| {
            e.cat == "command"
                && e.name == "DOORBELL"
                && e.arg("ctx") == r.u("hw")
                && e.arg("engine") == r.u("engine")
                && e.arg("wptr") == r.u("wptr")
        })
        .min_by(|a, b| {
            let d = |e: &DevEvent| (clock.to_guest(e.ts) - r.ts as f64).abs();
            d(a).total_cmp(&d(b))
        })
}

/// Finds every job's chain. `kmd` in time order; `dev` the device's
/// events; `umd` the UMD's spans.
pub fn chains(
    kmd: &[KmdRec],
    dev: &[DevEvent],
    umd: &[UmdSpan],
    clock: Option<&Clock>,
) -> Vec<Chain> {
    fn by<'a>(kmd: &'a [KmdRec], k: &'static str) -> impl Iterator<Item = &'a KmdRec> {
        kmd.iter().filter(move |r| r.kind == k)
    }
    let by_kind = |k: &'static str| by(kmd, k);
    let submits: Vec<&KmdRec> = by_kind("submit").collect();
    let doorbells: Vec<&KmdRec> = by_kind("doorbell")
        .filter(|r| r.num("ret") == Some(0))
        .collect();
    let signals: Vec<&KmdRec> = by_kind("fence_signal").collect();
    let events: BTreeMap<u64, &KmdRec> = by_kind("event")
        .filter_map(|r| Some((r.u("seq")?, r)))
        .collect();
    // Device events by track, in time order.
    let mut tracks: BTreeMap<(u64, u64), Vec<&DevEvent>> = BTreeMap::new();
    let mut dev_fence_events = Vec::new();
    for e in dev {
        match e.cat.as_str() {
            "packet" if e.ph == "X" => {
                let ctx = e.arg("ctx").unwrap_or(u64::MAX);
                tracks.entry((e.tid, ctx)).or_default().push(e);
            }
            "event" if e.name == "FENCE" => dev_fence_events.push(e),
            _ => {}
        }
    }
    for t in tracks.values_mut() {
        t.sort_by_key(|e| e.ts);
    }
    let mut out = Vec::new();
    // The previous job's FENCE on each ring (device ns): this job's
    // packets come after it.
    let mut prev_fence: BTreeMap<(u64, u64), u64> = BTreeMap::new();
    for w in by_kind("ring_write") {
        let (Some(hw), Some(engine), Some(seqno)) = (w.u("hw"), w.u("engine"), w.u("seqno")) else {
            continue;
        };
        let (ring_va, at, bytes, size) = (
            w.u("ring_va").unwrap_or(0),
            w.u("at").unwrap_or(0),
            w.u("bytes").unwrap_or(0),
            w.u("size").unwrap_or(1).max(1),
        );
        let mut c = Chain {
            hw,
            engine,
            seqno,
            ctx: None,
            points: Vec::new(),
        };
        // Its SUBMIT: the last one of this ring and seqno before the write
        // (a slot reused by another context starts its seqnos again).
        let sub = submits.iter().rev().find(|s| {
            s.ts <= w.ts
                && s.u("hw") == Some(hw)
                && s.u("engine") == Some(engine)
                && s.u("seqno") == Some(seqno)
        });
        if let Some(s) = sub {
            c.ctx = s.u("ctx");
            let pid = s.u("pid");
            // 0. The UMD span that submitted it (same process, context,
            // engine and seqno).
            if let Some(u) = umd.iter().find(|u| {
                u.cat == "api"
                    && u.name == "submit"
                    && Some(u.pid) == pid
                    && u.arg("ctx").map(|v| v as u64) == c.ctx
                    && u.arg("engine") == Some(i128::from(engine))
                    && u.arg("seqno") == Some(i128::from(seqno))
            }) {
                c.points.push(Point {
                    step: 0,
                    pid: u.pid,
                    tid: u.tid,
                    start: u.ts as i64,
                    dur: u.dur as i64,
                });
            }
            c.points.push(kmd_point(1, s));
        }
        c.points.push(kmd_point(2, w));
        let db = doorbells.iter().find(|d| {
            d.ts >= w.ts
                && d.u("hw") == Some(hw)
                && d.u("engine") == Some(engine)
                && d.u("wptr").is_some_and(|p| covers(p, at, bytes))
        });
        if let Some(d) = db {
            c.points.push(kmd_point(3, d));
        }
        if let Some(clock) = clock {
            // 4. The device received that doorbell.
            if let Some(dd) = db.and_then(|d| nearest_doorbell(dev, d, clock)) {
                c.points.push(dev_point(4, clock, TID_CONTROL, dd));
            }
            // 6. Its FENCE: the KMD's packet, inside the job's bytes of the
            // ring, writing this seqno.
            let off = at % size;
            let in_job = |va: u64| {
                va.checked_sub(ring_va)
                    .is_some_and(|o| o < size && (o + size - off) % size < bytes)
            };
            let track = tracks.get(&(engine, hw));
            let after = prev_fence.get(&(hw, engine)).copied().unwrap_or(0);
            let fence = track.and_then(|t| {
                t.iter().find(|e| {
                    e.name == "FENCE" && e.ts >= after && e.arg("packet_va").is_some_and(in_job)
                })
            });
            if let (Some(t), Some(f)) = (track, fence) {
                // 5. The job's first packet: the first after the previous
                // job's FENCE.
                if let Some(first) = t
                    .iter()
                    .find(|e| e.ts >= after && e.ts <= f.ts && e.ts != f.ts)
                {
                    c.points
                        .push(dev_point(5, clock, packet_tid(engine, hw), first));
                }
                c.points
                    .push(dev_point(6, clock, packet_tid(engine, hw), f));
                prev_fence.insert((hw, engine), f.ts + f.dur);
                // 7. The FENCE event it raised.
                if let Some(ev) = dev_fence_events.iter().find(|e| {
                    e.arg("ctx") == Some(hw)
                        && e.arg("engine") == Some(engine)
                        && e.arg("value") == Some(seqno)
                        && e.ts >= f.ts
                }) {
                    let mut p = dev_point(7, clock, TID_EVENTS, ev);
                    p.dur = POINT_NS;
                    c.points.push(p);
                    // 8. The KMD received it (same sequence number).
                    if let Some(k) = ev.arg("seq").and_then(|s| events.get(&s)) {
                        c.points.push(kmd_point(8, k));
                    }
                }
            }
        }
        // 9. The fence signalled (the first signal covering the seqno).
        if let Some(s) = signals.iter().find(|s| {
            s.ts >= w.ts
                && s.u("hw") == Some(hw)
                && s.u("engine") == Some(engine)
                && s.u("seqno").is_some_and(|v| v >= seqno)
                && s.u("value").is_some_and(|v| v >= seqno)
        }) {
            c.points.push(kmd_point(9, s));
        }
        out.push(c);
    }
    out
}

/// Where the jobs' time goes: for each pair of consecutive steps, the
/// median time from one to the next (ns) over the complete chains in
/// causal order that have both, and how many had them.
pub fn step_medians(chains: &[Chain]) -> Vec<(usize, usize, i64, usize)> {
    let mut gaps: Vec<((usize, usize), Vec<i64>)> = Vec::new();
    for c in chains
        .iter()
        .filter(|c| c.complete() && c.misorder().is_none())
    {
        for w in c.points.windows(2) {
            let key = (w[0].step, w[1].step);
            let d = w[1].start - w[0].start;
            match gaps.iter_mut().find(|(k, _)| *k == key) {
                Some((_, v)) => v.push(d),
                None => gaps.push((key, vec![d])),
            }
        }
    }
    gaps.sort_by_key(|(k, _)| *k);
    gaps.into_iter()
        .map(|((a, b), mut v)| {
            v.sort_unstable();
            (a, b, v[v.len() / 2], v.len())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doorbells_cover_jobs_across_the_wrap() {
        assert!(covers(0x40, 0x10, 0x30));
        assert!(!covers(0x3f, 0x10, 0x30));
        assert!(covers(0x10, 0xffff_fff0, 0x20));
        assert!(!covers(0x10, 0x20, 0x8));
    }

    #[test]
    fn a_chain_is_complete_and_ordered_or_says_where_not() {
        let p = |step, start| Point {
            step,
            pid: 1,
            tid: 1,
            start,
            dur: 2,
        };
        let mut c = Chain {
            hw: 0,
            engine: 0,
            seqno: 1,
            ctx: Some(1),
            points: (1..10).map(|s| p(s, s as i64 * 10)).collect(),
        };
        assert!(c.complete());
        assert_eq!(c.misorder(), None);
        c.points[5].start = 35;
        assert_eq!(c.misorder(), Some((5, 6, 15)));
        c.points.remove(0);
        assert!(!c.complete());
    }

    #[test]
    fn step_medians_take_ordered_complete_chains() {
        let chain = |seqno, gap: i64| Chain {
            hw: 0,
            engine: 0,
            seqno,
            ctx: Some(1),
            points: (1..10)
                .map(|s| Point {
                    step: s,
                    pid: 1,
                    tid: 1,
                    start: s as i64 * gap,
                    dur: 1,
                })
                .collect(),
        };
        let mut late = chain(4, 10);
        late.points[3].start = 0; // misordered: left out
        let m = step_medians(&[chain(1, 10), chain(2, 30), chain(3, 20), late]);
        assert_eq!(m.len(), 8);
        assert_eq!(m[0], (1, 2, 20, 3));
        assert!(m
            .iter()
            .all(|&(a, b, d, n)| b == a + 1 && d == 20 && n == 3));
    }
}
