//! Two recorded sessions of the same test compared: the reference
//! driver's and a student's (`vgpu-device --record FILE` each), and the
//! first place where what the drivers made the device do differs, in the
//! device's words.
//!
//! Each record is read into a [`trace::Run`]: the control commands the
//! driver sent (decoded, with their reply status), the packets each engine
//! fetched per ring and the page-table entries the engines' walks read,
//! each in the lane where its order matters (one ring, one context, the
//! device; one ring's packets; one page-table entry). Lanes are compared
//! item by item on keys that leave out what differs between two runs of
//! the same test: guest-physical addresses (an entry's target is compared
//! as "a table", "a data page", "a page-table page"), times, event and
//! fault sequence numbers, context ids (contexts are matched in the order
//! they were created), commands refused with `BUSY` and asked again, a
//! doorbell rung again with the same write pointer, repeated walks of an
//! unchanged entry, and the interleaving of independent rings (each ring's
//! commands are compared in their own order, a reset of their engine
//! included). Of the lanes that differ, the one whose difference comes
//! first in the session (counted in control commands) is reported.

mod command;
pub mod trace;
mod words;

#[cfg(test)]
mod tests;

use std::path::Path;

use trace::{Entry, Lane, Run};

/// Errors reading the records.
#[derive(Debug, thiserror::Error)]
pub enum CompareError {
    /// A file could not be read.
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
    /// A file is not a record.
    #[error("{0}: {1}")]
    Format(String, vgpu_device::core::record::RecordError),
}

/// What one record holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Summary {
    /// Control commands compared.
    pub commands: usize,
    /// Packets fetched.
    pub packets: usize,
    /// Page-table entries walked (changes of an entry count once).
    pub ptes: usize,
    /// Packets and walks logged (0: a record without them).
    pub engine_items: u64,
    /// Where the file ends inside an entry.
    pub truncated: Option<usize>,
}

impl Summary {
    fn of(run: &Run) -> Self {
        let mut s = Summary {
            commands: run.commands.len(),
            engine_items: run.engine_items,
            truncated: run.truncated,
            ..Summary::default()
        };
        for (lane, entries) in &run.lanes {
            match lane {
                Lane::Packets(..) => s.packets += entries.len(),
                Lane::Pte(..) => s.ptes += entries.len(),
                _ => {}
            }
        }
        s
    }
}

/// The first difference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    /// The sentence.
    pub message: String,
    /// The lane, as text.
    pub lane: String,
    /// The student's item of the lane that differs (from 0).
    pub index: usize,
    /// The student's item there (none: the lane ended).
    pub yours: Option<String>,
    /// The reference's item there.
    pub reference: Option<String>,
    /// The last items of the lane that matched, oldest first.
    pub context: Vec<String>,
}

/// The result of a comparison.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Comparison {
    /// The reference's record.
    pub reference: Summary,
    /// The student's record.
    pub student: Summary,
    /// The first difference, if any.
    pub difference: Option<Difference>,
}

impl Comparison {
    /// Whether the two sessions did the same.
    pub fn equal(&self) -> bool {
        self.difference.is_none()
    }

    /// As JSON.
    pub fn to_json(&self) -> serde_json::Value {
        let sum = |s: &Summary| {
            serde_json::json!({
                "commands": s.commands,
                "packets": s.packets,
                "ptes": s.ptes,
                "engine_items": s.engine_items,
                "truncated_at": s.truncated,
            })
        };
        let diff = self.difference.as_ref().map(|d| {
            serde_json::json!({
                "message": d.message,
                "lane": d.lane,
                "index": d.index,
                "yours": d.yours,
                "reference": d.reference,
                "context": d.context,
            })
        });
        serde_json::json!({
            "equal": self.equal(),
            "reference": sum(&self.reference),
            "student": sum(&self.student),
            "difference": diff,
        })
    }
}

/// Where a lane first differs.
#[derive(Debug, Clone, Copy)]
struct LaneDiff<'a> {
    lane: Lane,
    /// Where the reference's and the student's entries differ.
    ri: usize,
    si: usize,
    r: &'a [Entry],
    s: &'a [Entry],
}

/// Where a difference stands in the session: (clock, phase, sub, lane
/// order), the earlier of the two sides.
type Rank = (u64, u8, u32, u8);

fn lane_order(l: &Lane) -> u8 {
    match l {
        Lane::Device => 0,
        Lane::Context(_) => 1,
        Lane::Ring(..) => 2,
        Lane::Pte(..) => 3,
        Lane::Packets(..) => 4,
    }
}

impl LaneDiff<'_> {
    fn rank(&self, rr: &Run, sr: &Run) -> Rank {
        let at = |run: &Run, e: Option<&Entry>| {
            e.and_then(|e| run.items.get(e.item))
                .map(|i| (i.clock, i.phase, i.sub, lane_order(&self.lane)))
        };
        let a = at(rr, self.r.get(self.ri));
        let b = at(sr, self.s.get(self.si));
        match (a, b) {
            (Some(a), Some(b)) => a.min(b),
            (Some(x), None) | (None, Some(x)) => x,
            (None, None) => (u64::MAX, 0, 0, 0),
        }
    }
}

/// A doorbell the device accepted.
fn is_doorbell(e: &Entry) -> bool {
    e.key.starts_with("DOORBELL ") && !e.key.contains(" -> ")
}

/// The end of the run of doorbells starting at `i`.
fn doorbells_end(a: &[Entry], i: usize) -> usize {
    a.iter()
        .skip(i)
        .position(|e| !is_doorbell(e))
        .map_or(a.len(), |n| i + n)
}

/// Where two lanes first differ (the reference's index, the student's).
/// Doorbells of one ring with nothing else between them count as their
/// last (a driver that rang once for two jobs where the other rang twice
/// published the same packets); when those last ones differ, the first
/// doorbell that differs is the difference.
fn first_difference(a: &[Entry], b: &[Entry]) -> Option<(usize, usize)> {
    let (mut i, mut j) = (0, 0);
    loop {
        match (a.get(i), b.get(j)) {
            (None, None) => return None,
            (Some(x), Some(y)) if is_doorbell(x) && is_doorbell(y) => {
                let (ie, je) = (doorbells_end(a, i), doorbells_end(b, j));
                if a[ie - 1].key == b[je - 1].key {
                    (i, j) = (ie, je);
                    continue;
                }
                let same = a[i..ie]
                    .iter()
                    .zip(&b[j..je])
                    .take_while(|(x, y)| x.key == y.key)
                    .count();
                return Some((i + same, j + same));
            }
            (Some(x), Some(y)) if x.key == y.key => (i, j) = (i + 1, j + 1),
            _ => return Some((i, j)),
        }
    }
}

/// Compares two runs; `context` is how many matching items before the
/// difference to show.
pub fn compare_runs(reference: &Run, student: &Run, context: usize) -> Comparison {
    let empty: &[Entry] = &[];
    let mut lanes: Vec<&Lane> = reference.lanes.keys().chain(student.lanes.keys()).collect();
    lanes.sort();
    lanes.dedup();
    let mut diffs: Vec<(Rank, LaneDiff<'_>)> = Vec::new();
    for lane in lanes {
        let r = reference.lanes.get(lane).map_or(empty, Vec::as_slice);
        let s = student.lanes.get(lane).map_or(empty, Vec::as_slice);
        // Which pages the compute engine walks depends on which compute
        // unit (each with its own TLB) took which workgroup: an entry one
        // run's units walked and the other's never needed is no
        // difference; an entry both walked and read differently is.
        let compute_walk =
            matches!(lane, Lane::Pte(_, e, ..) if *e == vgpu_hwif::proto::engine::COMPUTE);
        if compute_walk && (r.is_empty() || s.is_empty()) {
            continue;
        }
        if let Some((ri, si)) = first_difference(r, s) {
            let d = LaneDiff {
                lane: *lane,
                ri,
                si,
                r,
                s,
            };
            diffs.push((d.rank(reference, student), d));
        }
    }
    diffs.sort_by_key(|(rank, _)| *rank);
    let difference = diffs
        .first()
        .map(|(rank, d)| words::describe(reference, student, d, *rank, &diffs, context));
    Comparison {
        reference: Summary::of(reference),
        student: Summary::of(student),
        difference,
    }
}

/// Compares two records in memory.
///
/// # Errors
///
/// Either is not a record.
pub fn compare(
    reference: &[u8],
    student: &[u8],
    context: usize,
) -> Result<Comparison, CompareError> {
    let r = trace::read(reference).map_err(|e| CompareError::Format("reference".into(), e))?;
    let s = trace::read(student).map_err(|e| CompareError::Format("student".into(), e))?;
    Ok(compare_runs(&r, &s, context))
}

/// Compares the records at two paths.
///
/// # Errors
///
/// A file cannot be read or is not a record.
pub fn compare_files(
    reference: &Path,
    student: &Path,
    context: usize,
) -> Result<Comparison, CompareError> {
    let read =
        |p: &Path| std::fs::read(p).map_err(|e| CompareError::Io(p.display().to_string(), e));
    let (rb, sb) = (read(reference)?, read(student)?);
    let name = |p: &Path| p.display().to_string();
    let r = trace::read(&rb).map_err(|e| CompareError::Format(name(reference), e))?;
    let s = trace::read(&sb).map_err(|e| CompareError::Format(name(student), e))?;
    Ok(compare_runs(&r, &s, context))
}
