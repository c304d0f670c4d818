//! The memory the driver declared as GPU memory (`SAN_MEM`), counted per
//! 4 KiB page, and what became of the pages it gave back.
//!
//! A declaration may be tagged with the driver's name for the object the
//! pages belong to and the object's placement generation ([`Tag`]). When
//! tagged pages are given back their tag is kept for a while (a bounded
//! list of *released runs*), so that a later engine access to one of them
//! — a mapping or a cached translation that outlived the pages — can be
//! reported with the object's name ([`Owned::history`]): moved (the object
//! declares pages under a newer generation now: the driver moved it and
//! did not update or invalidate the mapping) or freed.

use std::collections::VecDeque;

use super::fasthash::FastMap;

const PAGE: u64 = 4096;

/// Released runs remembered (the oldest is forgotten first).
pub const MAX_RELEASED: usize = 4096;

/// The driver's tag of a declaration: the object and its generation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tag {
    /// The driver's name for the object (0: untagged).
    pub object: u64,
    /// Its placement generation.
    pub gen: u32,
}

/// One page's declarations.
#[derive(Clone, Copy, Debug, Default)]
struct Declared {
    /// Declarations not given back.
    refs: u32,
    /// Of these, declarations as a page table (`SAN_MEM_OWN_TABLES`).
    tables: u32,
    /// The latest tag it was declared with.
    tag: Tag,
}

/// Tagged pages given back: `pages` pages from page number `first`.
#[derive(Clone, Copy, Debug)]
struct Released {
    first: u64,
    pages: u64,
    tag: Tag,
    time_ns: u64,
}

/// What is known of an undeclared page that a tagged declaration gave back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ObjectHistory {
    /// The object and its generation when it gave the page back.
    pub tag: Tag,
    /// When (device time).
    pub released_ns: u64,
    /// If the object declares pages now: its newest generation and the
    /// lowest such page.
    pub now: Option<(u32, u64)>,
}

impl ObjectHistory {
    /// Whether the object moved since it gave the page back.
    pub fn moved(&self) -> bool {
        self.now.is_some_and(|(gen, _)| gen != self.tag.gen)
    }
}

/// Why a `SAN_MEM` declaration was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OwnError {
    /// A range is not 4 KiB aligned, or wraps.
    #[error("range {pa:#x}+{size:#x} is not 4 KiB aligned or wraps")]
    Misaligned {
        /// Start.
        pa: u64,
        /// Size.
        size: u64,
    },
    /// Pages given back that were not declared.
    #[error("{pages} page(s) from {pa:#x} given back without being declared")]
    NotOwned {
        /// First such page.
        pa: u64,
        /// How many.
        pages: u64,
    },
}

/// Pages the driver declared as GPU memory, and tagged pages it gave back.
#[derive(Debug, Default)]
pub struct Owned {
    pages: FastMap<u64, Declared>,
    /// Pages declared as page tables (and not all given back).
    table_pages: u64,
    released: VecDeque<Released>,
}

impl Owned {
    /// Declares `pa..pa + size` (as page tables if `table`) with `tag`.
    pub fn own(&mut self, pa: u64, size: u64, table: bool, tag: Tag) -> Result<(), OwnError> {
        for p in pages(pa, size)? {
            let d = self.pages.entry(p).or_default();
            d.refs = d.refs.saturating_add(1);
            d.tag = tag;
            if table {
                let first = d.tables == 0;
                d.tables = d.tables.saturating_add(1);
                self.table_pages += u64::from(first);
            }
        }
        Ok(())
    }

    /// Gives `pa..pa + size` back at device time `now_ns`; pages no longer
    /// declared at all are remembered with `tag` (or the tag they were
    /// declared with) when there is one. Pages not declared are counted in
    /// the error (the others are given back).
    pub fn release(&mut self, pa: u64, size: u64, tag: Tag, now_ns: u64) -> Result<(), OwnError> {
        let mut missing: Option<(u64, u64)> = None;
        let mut run: Option<Released> = None;
        for p in pages(pa, size)? {
            let Some(d) = self.pages.get_mut(&p) else {
                let m = missing.get_or_insert((p * PAGE, 0));
                m.1 += 1;
                continue;
            };
            // A page stays a table while it has as many declarations left
            // as it had as a table.
            let was_table = d.tables > 0;
            d.refs = d.refs.saturating_sub(1);
            d.tables = d.tables.min(d.refs);
            if was_table && d.tables == 0 {
                self.table_pages = self.table_pages.saturating_sub(1);
            }
            if d.refs > 0 {
                continue;
            }
            let tag = if tag.object != 0 { tag } else { d.tag };
            self.pages.remove(&p);
            if tag.object == 0 {
                continue;
            }
            match run.as_mut() {
                Some(r) if r.tag == tag && r.first + r.pages == p => r.pages += 1,
                _ => {
                    if let Some(r) = run.take() {
                        self.remember(r);
                    }
                    run = Some(Released {
                        first: p,
                        pages: 1,
                        tag,
                        time_ns: now_ns,
                    });
                }
            }
        }
        if let Some(r) = run {
            self.remember(r);
        }
        match missing {
            Some((pa, pages)) => Err(OwnError::NotOwned { pa, pages }),
            None => Ok(()),
        }
    }

    fn remember(&mut self, r: Released) {
        if self.released.len() == MAX_RELEASED {
            self.released.pop_front();
        }
        self.released.push_back(r);
    }

    /// Forgets every declaration and every released run.
    pub fn clear(&mut self) {
        self.pages.clear();
        self.table_pages = 0;
        self.released.clear();
    }

    /// Pages declared.
    pub fn len(&self) -> usize {
        self.pages.len()
    }

    /// Whether nothing is declared.
    pub fn is_empty(&self) -> bool {
        self.pages.is_empty()
    }

    /// Whether page number `p` is declared.
    pub fn has(&self, p: u64) -> bool {
        self.pages.contains_key(&p)
    }

    /// Whether the page at `pa` is declared as a page table, and whether
    /// any page is.
    pub fn table_page(&self, pa: u64) -> (bool, bool) {
        let is = self.pages.get(&(pa / PAGE)).is_some_and(|d| d.tables > 0);
        (is, self.table_pages > 0)
    }

    /// The object whose tagged declaration last gave back the page at `pa`
    /// (not declared now), and where that object is now. Walks the
    /// released runs (newest first) and, when one matches, the declared
    /// pages: a finding's cost, not an access's.
    pub fn history(&self, pa: u64) -> Option<ObjectHistory> {
        let p = pa / PAGE;
        if self.pages.contains_key(&p) {
            return None;
        }
        let r = self
            .released
            .iter()
            .rev()
            .find(|r| p >= r.first && p - r.first < r.pages)?;
        let now = self
            .pages
            .iter()
            .filter(|(_, d)| d.tag.object == r.tag.object)
            .fold(None, |best: Option<(u32, u64)>, (&page, d)| {
                let cand = (d.tag.gen, page * PAGE);
                Some(match best {
                    Some(b) if (b.0, u64::MAX - b.1) >= (cand.0, u64::MAX - cand.1) => b,
                    _ => cand,
                })
            });
        Some(ObjectHistory {
            tag: r.tag,
            released_ns: r.time_ns,
            now,
        })
    }
}

/// The page numbers of `pa..pa + size` (4 KiB aligned, not wrapping).
fn pages(pa: u64, size: u64) -> Result<std::ops::Range<u64>, OwnError> {
    let bad = OwnError::Misaligned { pa, size };
    if !pa.is_multiple_of(PAGE) || !size.is_multiple_of(PAGE) {
        return Err(bad);
    }
    let end = pa.checked_add(size).ok_or(bad)?;
    Ok(pa / PAGE..end / PAGE)
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Tag = Tag { object: 7, gen: 1 };
    const A2: Tag = Tag { object: 7, gen: 2 };

    #[test]
    fn a_moved_object_is_named_with_where_it_is_now() {
        let mut o = Owned::default();
        o.own(0x10_0000, 0x2000, false, A).unwrap();
        // The move: the new pages declared, then the old ones given back.
        o.own(0x40_0000, 0x2000, false, A2).unwrap();
        o.release(0x10_0000, 0x2000, A, 55).unwrap();
        let h = o.history(0x10_1000).unwrap();
        assert_eq!((h.tag, h.released_ns, h.now), (A, 55, Some((2, 0x40_0000))));
        assert!(h.moved());
        // Declared pages and untouched ones have no history.
        assert!(o.history(0x40_0000).is_none());
        assert!(o.history(0x20_0000).is_none());
    }

    #[test]
    fn a_freed_object_is_named_without_a_location() {
        let mut o = Owned::default();
        o.own(0x10_0000, 0x1000, false, A).unwrap();
        // Released untagged: the declaration's tag is kept.
        o.release(0x10_0000, 0x1000, Tag::default(), 9).unwrap();
        let h = o.history(0x10_0000).unwrap();
        assert_eq!((h.tag, h.now), (A, None));
        assert!(!h.moved());
    }

    #[test]
    fn pages_declared_twice_are_released_on_the_last_give_back_and_runs_are_bounded() {
        let mut o = Owned::default();
        o.own(0x10_0000, 0x1000, false, A).unwrap();
        o.own(0x10_0000, 0x1000, false, A).unwrap();
        o.release(0x10_0000, 0x1000, A, 1).unwrap();
        assert!(o.has(0x100) && o.history(0x10_0000).is_none());
        o.release(0x10_0000, 0x1000, A, 2).unwrap();
        assert_eq!(o.history(0x10_0000).map(|h| h.released_ns), Some(2));
        for i in 0..MAX_RELEASED as u64 + 1 {
            let pa = 0x1000_0000 + i * 0x2000;
            o.own(pa, 0x1000, false, A).unwrap();
            o.release(pa, 0x1000, A, 3).unwrap();
        }
        assert!(
            o.history(0x10_0000).is_none(),
            "the oldest run is forgotten"
        );
        assert_eq!(
            o.release(0x10_0000, 0x1000, A, 4),
            Err(OwnError::NotOwned {
                pa: 0x10_0000,
                pages: 1
            })
        );
    }
}
