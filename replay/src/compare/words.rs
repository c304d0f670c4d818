//! The first difference in words: what the student's driver made the
//! device do, and what the reference's did there.

use vgpu_hwif::proto::{Opcode, Status};

use super::trace::{engine_name, Entry, Item, Lane, Run, Slot, What};
use super::{Difference, LaneDiff, Rank};

/// The engine of the entries of the device's page-table audit.
const AUDIT: u32 = vgpu_device::core::record::NO_ENGINE as u32;

fn item<'a>(run: &'a Run, e: Option<&Entry>) -> Option<&'a Item> {
    e.and_then(|e| run.items.get(e.item))
}

fn status_text(s: Option<Status>) -> String {
    match s {
        Some(s) if s != Status::Ok => format!(" (the device refused it: {})", s.name()),
        _ => String::new(),
    }
}

/// An item as one line.
pub fn item_text(i: &Item) -> String {
    match &i.what {
        What::Command { text, status, .. } => format!("{text}{}", status_text(*status)),
        What::Packet {
            ctx,
            engine,
            depth,
            va,
            text,
        } => {
            let d = if *depth > 0 {
                format!(" (command buffer depth {depth})")
            } else {
                String::new()
            };
            format!(
                "{} engine, ctx {ctx}: packet at VA {va:#x}{d}: {text}",
                engine_name(*engine)
            )
        }
        What::Pte {
            ctx,
            va,
            level,
            index,
            view,
            ..
        } => format!(
            "ctx {ctx} PTE for VA {va:#x} at level {level} (entry {index}): {:#x} ({})",
            view.bits, view.meaning
        ),
    }
}

/// The context id a lane's items use in `run`.
fn lane_ctx(run: &Run, lane: &Lane) -> Option<u32> {
    let entries = run.lanes.get(lane)?;
    entries
        .iter()
        .find_map(|e| match &run.items.get(e.item)?.what {
            What::Command {
                ctx, opcode: op, ..
            } if !matches!(op, Some(Opcode::EngineReset | Opcode::DeviceReset)) => *ctx,
            What::Packet { ctx, .. } | What::Pte { ctx, .. } => Some(*ctx),
            _ => None,
        })
}

fn slot_text(s: &Slot) -> String {
    match s {
        Slot::Created(n) => format!("context #{n} created"),
        Slot::Raw(id) => format!("ctx {id} (never created)"),
    }
}

/// A lane as text, with the student's ids where it has them.
fn lane_text(rr: &Run, sr: &Run, lane: &Lane) -> String {
    let ctx = |slot: &Slot| {
        lane_ctx(sr, lane)
            .or_else(|| lane_ctx(rr, lane))
            .map_or_else(|| slot_text(slot), |c| format!("ctx {c}"))
    };
    match lane {
        Lane::Device => "the device".into(),
        Lane::Context(s) => ctx(s),
        Lane::Ring(s, e) | Lane::Packets(s, e) => {
            format!("{}'s {} ring", ctx(s), engine_name(*e))
        }
        Lane::Pte(s, e, level, _) if *e == AUDIT => format!(
            "{}'s page tables as the driver left them (level {level})",
            ctx(s)
        ),
        Lane::Pte(s, e, level, _) => format!(
            "{}'s page tables (level {level}, {} engine)",
            ctx(s),
            engine_name(*e)
        ),
    }
}

/// Two commands at the same point of the session.
fn commands(s: &Item, r: &Item) -> String {
    let (
        What::Command {
            opcode: so,
            ctx: sc,
            engine: se,
            ..
        },
        What::Command {
            opcode: ro,
            ctx: rc,
            engine: re,
            ..
        },
    ) = (&s.what, &r.what)
    else {
        return format!(
            "your driver sent {}; the reference sent {}",
            item_text(s),
            item_text(r)
        );
    };
    let (st, rt) = (item_text(s), item_text(r));
    if *so == Some(Opcode::Doorbell) && *ro == Some(Opcode::Doorbell) {
        if sc == rc && se != re {
            let (se, re) = (se.unwrap_or(0), re.unwrap_or(0));
            return format!(
                "your driver rang the {} engine's doorbell ({st}); the reference rang the {} engine's ({rt})",
                engine_name(se),
                engine_name(re)
            );
        }
        if se == re && sc != rc {
            return format!(
                "your driver rang ctx {}'s doorbell ({st}); the reference rang ctx {}'s ({rt})",
                sc.unwrap_or(0),
                rc.unwrap_or(0)
            );
        }
    }
    format!("your driver sent {st}; the reference sent {rt}")
}

/// The reset a lane's previous item was, if it was one.
fn reset_before(run: &Run, entries: &[Entry], index: usize) -> Option<(String, bool)> {
    let prev = entries.get(index.checked_sub(1)?)?;
    let i = run.items.get(prev.item)?;
    match &i.what {
        What::Command {
            opcode: Some(Opcode::EngineReset | Opcode::DeviceReset),
            ..
        } => Some((item_text(i), prev.key.ends_with("(this ring innocent)"))),
        _ => None,
    }
}

fn after(run: &Run, entries: &[Entry], index: usize) -> String {
    index
        .checked_sub(1)
        .and_then(|p| item(run, entries.get(p)))
        .map_or_else(String::new, |i| format!(" after {}", item_text(i)))
}

fn command_lane(rr: &Run, sr: &Run, d: &LaneDiff<'_>) -> String {
    let (r, s) = (item(rr, d.r.get(d.ri)), item(sr, d.s.get(d.si)));
    let where_ = lane_text(rr, sr, &d.lane);
    let to = match d.lane {
        Lane::Ring(..) => format!("to {where_}"),
        Lane::Context(_) => format!("about {where_}"),
        _ => "to the device".into(),
    };
    // A ring or context destroyed where the reference still used it: the
    // driver sent nothing more before its teardown.
    let teardown = |i: &Item| {
        matches!(
            &i.what,
            What::Command {
                opcode: Some(Opcode::RingDestroy | Opcode::ContextDestroy),
                ..
            }
        )
    };
    let (s, then) = match (s, r) {
        (Some(si), Some(ri)) if si.clock != ri.clock && teardown(si) && !teardown(ri) => (
            None,
            format!(" (its next command for it was {})", item_text(si)),
        ),
        _ => (s, String::new()),
    };
    match (s, r) {
        (Some(s), Some(r)) if s.clock == r.clock => commands(s, r),
        (Some(s), Some(r)) => format!(
            "your driver's next command {to}{} was {}; the reference's was {}",
            after(sr, d.s, d.si),
            item_text(s),
            item_text(r)
        ),
        (None, Some(r)) => match reset_before(sr, d.s, d.si) {
            Some((reset, innocent)) => {
                let again = if innocent
                    && matches!(
                        &r.what,
                        What::Command {
                            opcode: Some(Opcode::Doorbell),
                            ..
                        }
                    ) {
                    " (the innocent ring written again)"
                } else {
                    ""
                };
                format!(
                    "after the reset ({reset}) your driver sent nothing more {to}{then}; the reference sent {}{again}",
                    item_text(r)
                )
            }
            None => format!(
                "your driver sent nothing more {to}{}{then}; the reference sent {}",
                after(sr, d.s, d.si),
                item_text(r)
            ),
        },
        (Some(s), None) => format!(
            "your driver sent {} {to}; the reference sent nothing more there{}",
            item_text(s),
            after(rr, d.r, d.ri)
        ),
        (None, None) => "no difference".into(),
    }
}

fn packet_lane(rr: &Run, sr: &Run, d: &LaneDiff<'_>) -> String {
    let (r, s) = (item(rr, d.r.get(d.ri)), item(sr, d.s.get(d.si)));
    let where_ = lane_text(rr, sr, &d.lane);
    let pk = |i: &Item| match &i.what {
        What::Packet {
            va, text, depth, ..
        } => {
            let d = if *depth > 0 {
                format!(", command buffer depth {depth}")
            } else {
                String::new()
            };
            format!("{text} (VA {va:#x}{d})")
        }
        _ => item_text(i),
    };
    let e = match d.lane {
        Lane::Packets(_, e) => engine_name(e),
        _ => String::new(),
    };
    let prev = |run: &Run, entries: &[Entry], index: usize| {
        index
            .checked_sub(1)
            .and_then(|p| item(run, entries.get(p)))
            .map_or_else(
                || " (its first)".to_owned(),
                |i| format!(" after {}", pk(i)),
            )
    };
    match (s, r) {
        (Some(s), Some(r)) => format!(
            "packet {} of {where_}: the {e} engine fetched {} from your driver's ring; from the reference's: {}",
            d.si + 1,
            pk(s),
            pk(r)
        ),
        (None, Some(r)) => format!(
            "the {e} engine fetched nothing more from your driver's {where_}{}; from the reference's it fetched {}",
            prev(sr, d.s, d.si),
            pk(r)
        ),
        (Some(s), None) => format!(
            "the {e} engine fetched {} from your driver's {where_}; the reference's held nothing more{}",
            pk(s),
            prev(rr, d.r, d.ri)
        ),
        (None, None) => "no difference".into(),
    }
}

fn pte_lane(rr: &Run, sr: &Run, d: &LaneDiff<'_>) -> String {
    // An entry's value there: the item, or the last one (unchanged).
    fn value<'a>(run: &'a Run, entries: &[Entry], index: usize) -> Option<&'a Item> {
        item(run, entries.get(index)).or_else(|| item(run, entries.get(index.checked_sub(1)?)))
    }
    let (s, r) = (value(sr, d.s, d.si), value(rr, d.r, d.ri));
    let Some(at) = s.or(r) else {
        return "no difference".into();
    };
    let What::Pte {
        va,
        level,
        index,
        engine,
        ..
    } = &at.what
    else {
        return item_text(at);
    };
    // An entry of the device's audit of the tables (at TLB_INVALIDATE and
    // CONTEXT_DESTROY) rather than of an engine's walk.
    let audit = *engine == AUDIT;
    let view = |i: &Item| match &i.what {
        What::Pte { view, .. } => Some(view.clone()),
        _ => None,
    };
    let sdesc = match s.and_then(view) {
        None if audit => {
            "is not in your page tables (zero, or under an entry that is not a table)".to_owned()
        }
        None => "was never walked by the device".to_owned(),
        Some(v) if !v.valid => format!("has no valid bit: {:#x}", v.bits),
        Some(v) => format!("is {:#x} ({})", v.bits, v.meaning),
    };
    let rdesc = match r.and_then(view) {
        None if audit => "not in its page tables".to_owned(),
        None => "never walked".to_owned(),
        Some(v) => format!("{:#x} ({})", v.bits, v.meaning),
    };
    format!("your PTE for VA {va:#x} at level {level} (entry {index} of its table) {sdesc}; the reference's: {rdesc}")
}

/// The message of the first difference `d` (rank `rank`; `all`: every
/// lane's difference, sorted).
pub(super) fn describe(
    rr: &Run,
    sr: &Run,
    d: &LaneDiff<'_>,
    rank: Rank,
    all: &[(Rank, LaneDiff<'_>)],
    context: usize,
) -> Difference {
    let command_lane_of = |l: &Lane| matches!(l, Lane::Device | Lane::Context(_) | Lane::Ring(..));
    let mut message = None;
    if command_lane_of(&d.lane) && rank.1 == 0 {
        // One command in place of another: the commands at that point of
        // each session, when each stands where its own lane differs.
        let clock = rank.0;
        let at = |run: &Run| {
            usize::try_from(clock)
                .ok()
                .and_then(|c| c.checked_sub(1))
                .and_then(|c| run.commands.get(c))
                .copied()
        };
        let differs_at = |run_is_student: bool, idx: usize| {
            all.iter().any(|(k, x)| {
                k.0 == clock && command_lane_of(&x.lane) && {
                    let (e, at) = if run_is_student {
                        (x.s, x.si)
                    } else {
                        (x.r, x.ri)
                    };
                    e.get(at).is_some_and(|e| e.item == idx)
                }
            })
        };
        if let (Some(si), Some(ri)) = (at(sr), at(rr)) {
            if differs_at(true, si) && differs_at(false, ri) {
                if let (Some(s), Some(r)) = (sr.items.get(si), rr.items.get(ri)) {
                    message = Some((commands(s, r), item_text(s), item_text(r)));
                }
            }
        }
    }
    let (yours, reference) = match &message {
        Some((_, s, r)) => (Some(s.clone()), Some(r.clone())),
        None => (
            item(sr, d.s.get(d.si)).map(item_text),
            item(rr, d.r.get(d.ri)).map(item_text),
        ),
    };
    let message = message.map_or_else(
        || match d.lane {
            Lane::Packets(..) => packet_lane(rr, sr, d),
            Lane::Pte(..) => pte_lane(rr, sr, d),
            _ => command_lane(rr, sr, d),
        },
        |(m, _, _)| m,
    );
    let from = d.si.saturating_sub(context);
    let ctx_lines = (from..d.si)
        .filter_map(|i| item(sr, d.s.get(i)))
        .map(item_text)
        .collect();
    Difference {
        message,
        lane: lane_text(rr, sr, &d.lane),
        index: d.si,
        yours,
        reference,
        context: ctx_lines,
    }
}
