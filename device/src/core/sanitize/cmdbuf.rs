//! Command buffers in execution: `SAN-CMDBUF-UNMAPPED`.
//!
//! While an engine executes an `INDIRECT` command buffer, the buffer's
//! pages must stay mapped where they were when the engine fetched them.
//! The command processor records, per ring and indirect depth, each page
//! of a buffer it fetches from — its VA, page, and where its leaf entry is
//! and what it held ([`Frames::fetched`]) — and checks those entries
//! against memory when the buffer ends, when the ring's slice ends, and
//! when the engine serves a TLB invalidation ([`Frames::check`]). An entry
//! that changed means the driver unmapped or remapped the buffer under the
//! engine. Each page is reported once.
//!
//! This state is the engine's own (one [`Frames`] per command processor).

use std::collections::HashMap;

/// Pages recorded per command buffer (a buffer is at most 1 MiB).
const MAX_PAGES: usize = 256 + 1;

/// A fetched page of a command buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Page {
    /// VA of the page.
    pub va: u64,
    /// Its guest-physical address.
    pub pa: u64,
    /// Where its leaf entry is.
    pub pte_pa: u64,
    /// The leaf entry when fetched.
    pub pte: u64,
    /// Already reported.
    pub reported: bool,
}

/// One command buffer being executed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Frame {
    /// Its VA (as the `INDIRECT` named it).
    pub va: u64,
    /// Its size.
    pub size: u32,
    /// Pages fetched so far.
    pub pages: Vec<Page>,
}

/// A page found changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Moved {
    /// Context.
    pub ctx: u32,
    /// Indirect depth of the buffer (1 = called by the ring).
    pub depth: u32,
    /// The buffer's VA.
    pub buffer_va: u64,
    /// Its size.
    pub buffer_size: u32,
    /// The page.
    pub page: Page,
    /// The leaf entry now.
    pub now: u64,
}

/// The command buffers of every ring an engine executes.
#[derive(Debug, Default)]
pub struct Frames {
    rings: HashMap<u32, Vec<Frame>>,
}

impl Frames {
    /// Keeps the frames of context `ctx` that still match its cursor's
    /// (`frames`: VA and size per depth, outermost first).
    pub fn sync(&mut self, ctx: u32, frames: &[(u64, u32)]) {
        let f = self.rings.entry(ctx).or_default();
        let keep = f
            .iter()
            .zip(frames)
            .take_while(|(a, b)| a.va == b.0 && a.size == b.1)
            .count();
        f.truncate(keep);
        for &(va, size) in frames.iter().skip(keep) {
            f.push(Frame {
                va,
                size,
                pages: Vec::new(),
            });
        }
        if f.is_empty() {
            self.rings.remove(&ctx);
        }
    }

    /// A page of the buffer at `depth` (1-based) of context `ctx` was
    /// fetched.
    pub fn fetched(&mut self, ctx: u32, depth: u32, page: Page) {
        let Some(frame) = self
            .rings
            .get_mut(&ctx)
            .and_then(|f| f.get_mut(depth.checked_sub(1)? as usize))
        else {
            return;
        };
        if frame.pages.iter().any(|p| p.va == page.va) || frame.pages.len() >= MAX_PAGES {
            return;
        }
        frame.pages.push(page);
    }

    /// Checks the recorded pages of context `ctx` (every context with
    /// `None`) against memory: `read` gives a leaf entry's bits now.
    /// Returns the pages that changed (each once).
    pub fn check(&mut self, ctx: Option<u32>, read: impl Fn(u64) -> u64) -> Vec<Moved> {
        let mut out = Vec::new();
        for (&c, frames) in self.rings.iter_mut() {
            if ctx.is_some_and(|x| x != c) {
                continue;
            }
            for (d, f) in frames.iter_mut().enumerate() {
                for p in f.pages.iter_mut().filter(|p| !p.reported) {
                    let now = read(p.pte_pa);
                    if now != p.pte {
                        p.reported = true;
                        out.push(Moved {
                            ctx: c,
                            depth: d as u32 + 1,
                            buffer_va: f.va,
                            buffer_size: f.size,
                            page: *p,
                            now,
                        });
                    }
                }
            }
        }
        out
    }

    /// Forgets context `ctx`'s frames.
    pub fn forget(&mut self, ctx: u32) {
        self.rings.remove(&ctx);
    }

    /// The contexts with recorded buffers.
    pub fn contexts(&self) -> Vec<u32> {
        self.rings.keys().copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_moved_under_a_buffer_are_found_once() {
        let mut f = Frames::default();
        f.sync(3, &[(0x10_0000, 8192)]);
        let page = |va, pte_pa, pte| Page {
            va,
            pa: 0x8000,
            pte_pa,
            pte,
            reported: false,
        };
        f.fetched(3, 1, page(0x10_0000, 0x4000, 0x8003));
        f.fetched(3, 1, page(0x10_1000, 0x4008, 0x9003));
        f.fetched(3, 1, page(0x10_1000, 0x4008, 0x9003));
        let mem = |pa: u64| if pa == 0x4008 { 0 } else { 0x8003 };
        let m = f.check(Some(3), mem);
        assert_eq!(m.len(), 1);
        assert_eq!((m[0].page.va, m[0].now, m[0].depth), (0x10_1000, 0, 1));
        assert!(f.check(None, mem).is_empty(), "reported once");
        // A new buffer at the same depth starts afresh.
        f.sync(3, &[(0x20_0000, 4096)]);
        assert!(f.check(None, |_| 0).is_empty());
        f.sync(3, &[]);
        assert!(f.rings.is_empty());
    }
}
