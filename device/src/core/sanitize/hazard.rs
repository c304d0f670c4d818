//! Cross-engine hazards: `SAN-XENGINE-HAZARD`.
//!
//! # Model
//!
//! Each ring (context × engine) has an *epoch*, advanced by every
//! *release* it makes: a `FENCE` or `SEM_SIGNAL` that completes, its ring
//! going idle (a driver may poll the status block), a reset. Each ring
//! also has a *view*: for every other ring, the epoch up to which it has
//! *acquired* that ring's releases. A release stores the ring's clock
//! (its view and its own epoch) with the semaphore's guest-physical
//! address and in the device-wide join of releases; an acquire joins the
//! clock into the view:
//!
//! * a `SEM_WAIT` that completes acquires the clock stored with its
//!   semaphore (the device-wide join if no engine wrote it: the CPU did,
//!   and the CPU may have seen anything released so far);
//! * a doorbell acquires the device-wide join: the driver may have waited
//!   for any fence already written before it published the work.
//!
//! Every copy-engine chunk and kernel access is a *record* on the pages it
//! touched (64-byte granules): ring, epoch, reads and writes. An access
//! conflicts with a record of the *other* engine on an overlapping granule,
//! at least one of the two writing, when the record is not ordered before
//! it: the accessing ring has not acquired a release the recording ring
//! made after the record. Each conflicting pair of packets is reported
//! once.
//!
//! Everything the model cannot see orders conservatively (the device-wide
//! join), so it misses some hazards rather than reporting ordered work.

use std::collections::HashSet;
use std::hash::BuildHasherDefault;

use vgpu_hwif::proto::{engine, MAX_CONTEXTS};

use super::fasthash::{FastHash, FastMap};

/// Rings tracked: one per (context, engine).
pub const RINGS: usize = (MAX_CONTEXTS * engine::COUNT) as usize;
/// Granule of the shadow memory, bytes.
pub const GRANULE: u64 = 64;
/// Records kept per page (inline: no allocation per page).
const RECORDS_PER_PAGE: usize = 6;
/// Pages with records (the shadow is cleared when it is reached).
const MAX_PAGES: usize = 1 << 20;
/// Semaphore locations remembered (beyond: their acquires fall back to
/// the device-wide join, which is conservative).
const MAX_SYNC: usize = 1 << 14;

const PAGE: u64 = 4096;

/// A vector clock over the rings.
type Clock = Box<[u64; RINGS]>;

fn zero_clock() -> Clock {
    Box::new([0; RINGS])
}

fn join(into: &mut [u64; RINGS], from: &[u64; RINGS]) {
    for (a, b) in into.iter_mut().zip(from.iter()) {
        *a = (*a).max(*b);
    }
}

/// The ring index of (`ctx`, `engine`).
pub fn ring_index(ctx: u32, e: u32) -> Option<usize> {
    let i = (ctx as usize)
        .checked_mul(engine::COUNT as usize)?
        .checked_add(e as usize)?;
    (i < RINGS).then_some(i)
}

/// The packet an access belongs to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Origin {
    /// Context.
    pub ctx: u32,
    /// Engine.
    pub engine: u32,
    /// Packet VA.
    pub packet_va: u64,
    /// Packet header.
    pub header: u32,
    /// Device time.
    pub time_ns: u64,
}

#[derive(Clone, Copy, Debug, Default)]
struct Rec {
    ring: usize,
    epoch: u64,
    read: u64,
    write: u64,
    /// VA of the page in the recording context.
    va_page: u64,
    origin: Origin,
}

/// What kind of conflict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A read of bytes the other engine wrote.
    ReadAfterWrite,
    /// A write of bytes the other engine read.
    WriteAfterRead,
    /// A write of bytes the other engine wrote.
    WriteAfterWrite,
}

impl Kind {
    /// `read-after-write` etc.
    pub const fn name(self) -> &'static str {
        match self {
            Kind::ReadAfterWrite => "read-after-write",
            Kind::WriteAfterRead => "write-after-read",
            Kind::WriteAfterWrite => "write-after-write",
        }
    }

    /// The sub-kind number in reports (1, 2, 3).
    pub const fn number(self) -> u32 {
        match self {
            Kind::ReadAfterWrite => 1,
            Kind::WriteAfterRead => 2,
            Kind::WriteAfterWrite => 3,
        }
    }
}

/// A conflict found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conflict {
    /// What kind.
    pub kind: Kind,
    /// First conflicting guest-physical byte (granule aligned).
    pub pa: u64,
    /// The same byte in the earlier access's context.
    pub prior_va: u64,
    /// The earlier access.
    pub prior: Origin,
    /// Whether the earlier access wrote.
    pub prior_wrote: bool,
}

/// The hazard tracker.
#[derive(Debug)]
pub struct Hazards {
    epoch: Vec<u64>,
    view: Vec<Clock>,
    released: Clock,
    sync: FastMap<u64, Clock>,
    shadow: FastMap<u64, Records>,
    reported: HashSet<(u64, u32, u64, u32), BuildHasherDefault<FastHash>>,
}

/// A page's records, oldest first, inline.
#[derive(Clone, Copy, Debug, Default)]
struct Records {
    recs: [Option<Rec>; RECORDS_PER_PAGE],
}

impl Records {
    fn iter(&self) -> impl Iterator<Item = &Rec> {
        self.recs.iter().flatten()
    }

    fn iter_mut(&mut self) -> impl Iterator<Item = &mut Rec> {
        self.recs.iter_mut().flatten()
    }

    /// Adds `r`, dropping the oldest when full.
    fn push(&mut self, r: Rec) {
        if let Some(slot) = self.recs.iter_mut().find(|s| s.is_none()) {
            *slot = Some(r);
            return;
        }
        self.recs.rotate_left(1);
        if let Some(last) = self.recs.last_mut() {
            *last = Some(r);
        }
    }
}

impl Default for Hazards {
    fn default() -> Self {
        Self::new()
    }
}

fn mask(pa: u64, len: u64) -> u64 {
    let off = pa % PAGE;
    let last = (off + len.max(1) - 1).min(PAGE - 1);
    let (a, b) = (off / GRANULE, last / GRANULE);
    let width = b - a + 1;
    let bits = if width >= 64 {
        u64::MAX
    } else {
        (1u64 << width) - 1
    };
    bits << a
}

impl Hazards {
    /// Nothing recorded.
    pub fn new() -> Self {
        Hazards {
            epoch: vec![1; RINGS],
            view: (0..RINGS).map(|_| zero_clock()).collect(),
            released: zero_clock(),
            sync: FastMap::default(),
            shadow: FastMap::default(),
            reported: HashSet::default(),
        }
    }

    fn clock_of(&self, r: usize) -> Clock {
        let mut c = self.view.get(r).cloned().unwrap_or_else(zero_clock);
        if let (Some(slot), Some(&e)) = (c.get_mut(r), self.epoch.get(r)) {
            *slot = e;
        }
        c
    }

    /// Ring `r` released: at semaphore `pa` if given (a `FENCE` or
    /// `SEM_SIGNAL`), else only into the device-wide join (idle, reset).
    pub fn release(&mut self, r: usize, pa: Option<u64>) {
        let Some(e) = self.epoch.get_mut(r) else {
            return;
        };
        *e += 1;
        let c = self.clock_of(r);
        join(&mut self.released, &c);
        if let Some(pa) = pa {
            if self.sync.len() < MAX_SYNC || self.sync.contains_key(&pa) {
                let s = self.sync.entry(pa).or_insert_with(zero_clock);
                join(s, &c);
            }
        }
    }

    /// Ring `r` completed a `SEM_WAIT` on `pa`.
    pub fn acquire(&mut self, r: usize, pa: u64) {
        let from = self.sync.get(&pa).unwrap_or(&self.released).clone();
        if let Some(v) = self.view.get_mut(r) {
            join(v, &from);
        }
    }

    /// Ring `r` got a doorbell: it acquires everything released so far.
    pub fn acquire_all(&mut self, r: usize) {
        let from = self.released.clone();
        if let Some(v) = self.view.get_mut(r) {
            join(v, &from);
        }
    }

    /// Whether a record is ordered before ring `r`'s current point.
    fn ordered(&self, rec: &Rec, r: usize) -> bool {
        rec.ring == r
            || self
                .view
                .get(r)
                .and_then(|v| v.get(rec.ring))
                .is_some_and(|&seen| rec.epoch < seen)
    }

    /// Ring `r` (of `o.engine`) accessed `len` bytes (within one page) at
    /// guest-physical `pa`, GPU VA `va`. Returns a conflict with the other
    /// engine not reported before.
    pub fn access(
        &mut self,
        r: usize,
        o: Origin,
        va: u64,
        pa: u64,
        len: u64,
        write: bool,
    ) -> Option<Conflict> {
        if r >= RINGS || len == 0 {
            return None;
        }
        let page = pa / PAGE;
        let m = mask(pa, len);
        let epoch = self.epoch.get(r).copied().unwrap_or(0);
        let mut found = None;
        if let Some(recs) = self.shadow.get(&page) {
            for rec in recs.iter() {
                if rec.origin.engine == o.engine || self.ordered(rec, r) {
                    continue;
                }
                let (hit, kind) = if write && rec.write & m != 0 {
                    (rec.write & m, Kind::WriteAfterWrite)
                } else if write && rec.read & m != 0 {
                    (rec.read & m, Kind::WriteAfterRead)
                } else if !write && rec.write & m != 0 {
                    (rec.write & m, Kind::ReadAfterWrite)
                } else {
                    continue;
                };
                let g = u64::from(hit.trailing_zeros()) * GRANULE;
                found = Some(Conflict {
                    kind,
                    pa: page * PAGE + g,
                    prior_va: rec.va_page + g,
                    prior: rec.origin,
                    prior_wrote: kind != Kind::WriteAfterRead,
                });
                break;
            }
        }
        if self.shadow.len() >= MAX_PAGES && !self.shadow.contains_key(&page) {
            self.shadow.clear();
        }
        let recs = self.shadow.entry(page).or_default();
        let mine = recs
            .iter_mut()
            .find(|x| x.ring == r && x.epoch == epoch && x.origin.packet_va == o.packet_va);
        if let Some(x) = mine {
            if write {
                x.write |= m;
            } else {
                x.read |= m;
            }
        } else {
            recs.push(Rec {
                ring: r,
                epoch,
                read: if write { 0 } else { m },
                write: if write { m } else { 0 },
                va_page: va & !(PAGE - 1),
                origin: o,
            });
        }
        let c = found?;
        let key = (o.packet_va, o.ctx, c.prior.packet_va, c.prior.ctx);
        self.reported.insert(key).then_some(c)
    }

    /// Forgets everything (device reset).
    pub fn clear(&mut self) {
        *self = Hazards::new();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn o(ctx: u32, e: u32, packet_va: u64) -> Origin {
        Origin {
            ctx,
            engine: e,
            packet_va,
            header: 0,
            time_ns: 0,
        }
    }

    #[test]
    fn unordered_cross_engine_overlap_is_a_hazard() {
        let mut h = Hazards::new();
        let copy = ring_index(1, 0).unwrap();
        let comp = ring_index(2, 1).unwrap();
        assert_eq!(
            h.access(copy, o(1, 0, 0x100), 0x1000, 0x8000, 4096, true),
            None
        );
        let c = h
            .access(comp, o(2, 1, 0x200), 0x5000, 0x8040, 64, false)
            .unwrap();
        assert_eq!(c.kind, Kind::ReadAfterWrite);
        assert_eq!(
            (c.pa, c.prior_va, c.prior.packet_va),
            (0x8040, 0x1040, 0x100)
        );
        // The same pair of packets is reported once.
        assert_eq!(
            h.access(comp, o(2, 1, 0x200), 0x5080, 0x8080, 64, false),
            None
        );
        // Disjoint granules do not conflict.
        let mut h = Hazards::new();
        h.access(copy, o(1, 0, 0x100), 0x1000, 0x8000, 64, true);
        assert_eq!(h.access(comp, o(2, 1, 0x200), 0, 0x8040, 64, true), None);
        // The same engine never conflicts with itself here.
        let copy2 = ring_index(3, 0).unwrap();
        assert_eq!(h.access(copy2, o(3, 0, 0x300), 0, 0x8000, 64, true), None);
    }

    #[test]
    fn a_semaphore_or_a_doorbell_orders_the_jobs() {
        let copy = ring_index(1, 0).unwrap();
        let comp = ring_index(1, 1).unwrap();
        // FENCE at 0x9000 after the write, SEM_WAIT on it before the read.
        let mut h = Hazards::new();
        h.access(copy, o(1, 0, 0x100), 0x1000, 0x8000, 64, true);
        h.release(copy, Some(0x9000));
        h.acquire(comp, 0x9000);
        assert_eq!(
            h.access(comp, o(1, 1, 0x200), 0x1000, 0x8000, 64, false),
            None
        );
        // A wait on a semaphore released *before* the write: still a hazard.
        let mut h = Hazards::new();
        h.release(copy, Some(0xa000));
        h.access(copy, o(1, 0, 0x100), 0x1000, 0x8000, 64, true);
        h.release(copy, Some(0x9000));
        h.acquire(comp, 0xa000);
        assert!(h
            .access(comp, o(1, 1, 0x200), 0x1000, 0x8000, 64, false)
            .is_some());
        // A wait on a location no engine wrote acquires the device-wide
        // join (the CPU may have written it): ordered.
        let mut h = Hazards::new();
        h.access(copy, o(1, 0, 0x100), 0x1000, 0x8000, 64, true);
        h.release(copy, Some(0x9000));
        h.acquire(comp, 0x7000);
        assert_eq!(
            h.access(comp, o(1, 1, 0x200), 0x1000, 0x8000, 64, false),
            None
        );
        // Write-after-read, ordered by a doorbell after the reader's fence.
        let mut h = Hazards::new();
        h.access(comp, o(1, 1, 0x200), 0x1000, 0x8000, 64, false);
        let c = h
            .access(copy, o(1, 0, 0x100), 0x1000, 0x8000, 64, true)
            .unwrap();
        assert_eq!(c.kind, Kind::WriteAfterRead);
        let mut h = Hazards::new();
        h.access(comp, o(1, 1, 0x200), 0x1000, 0x8000, 64, false);
        h.release(comp, Some(0x9100));
        h.acquire_all(copy);
        assert_eq!(
            h.access(copy, o(1, 0, 0x100), 0x1000, 0x8000, 64, true),
            None
        );
    }

    #[test]
    fn masks_cover_granules() {
        assert_eq!(mask(0x1000, 1), 1);
        assert_eq!(mask(0x1040, 64), 2);
        assert_eq!(mask(0x103f, 2), 3);
        assert_eq!(mask(0x1000, 4096), u64::MAX);
        assert_eq!(mask(0x1fc0, 64), 1 << 63);
    }
}
