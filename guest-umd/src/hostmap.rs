//! Device-to-host reads straight into the caller's memory (`HOST_MAP`).
//!
//! [`ReadPath::Mapped`](crate::ReadPath::Mapped): the destination's pages
//! are pinned and mapped for the device by the KMD, the copy engine writes
//! the data into them, and the read returns once the last copy's fence
//! signalled: one copy, made by the device, and the CPU never touches the
//! bytes. The destination goes in pieces of at most [`PIECE`] bytes, each
//! mapped and its copy submitted at once, so that the KMD pins and maps the
//! next piece while the device copies the previous one, and unmaps a piece
//! whose copy is done while the device copies the next. At most
//! [`IN_FLIGHT`] pieces are mapped at a time; every mapping is given back
//! (`HOST_UNMAP`) before the read returns, fault or not.
//!
//! This file is the mapping side: which pieces ([`pieces`]) and each
//! piece's mapping ([`HostMapping`]); the read that pipelines them through
//! a stream's copy engine is `Stream::read` (`stream/read.rs`).

use crate::kmd::{Kmd, KmdError};

/// Reads smaller than this go staged: pinning and mapping a few pages and
/// invalidating them afterwards cost more than copying them twice.
pub const MAPPED_READ_MIN: u64 = 64 << 10;

/// Bytes of one mapping; the last one of a read takes up to a quarter more
/// (within `VGPU_HOST_MAP_MAX_SIZE`).
pub const PIECE: u64 = 8 << 20;

/// Pieces mapped at once (within the KMD's per-file total).
pub const IN_FLIGHT: usize = 3;

const PAGE: u64 = 4096;

/// A range of this process's memory mapped for the device; unmapped when
/// dropped.
pub struct HostMapping<'k> {
    kmd: &'k Kmd,
    /// The GPU VA of the first page.
    pub va: u64,
}

impl<'k> HostMapping<'k> {
    /// Has the KMD pin and map `piece`'s pages for the device (`HOST_MAP`).
    /// An error: the KMD refused (an older KMD, its limits, memory it
    /// cannot pin).
    pub fn new(kmd: &'k Kmd, piece: &Piece) -> Result<HostMapping<'k>, KmdError> {
        let va = kmd.host_map(piece.page, piece.map_size, 0)?;
        Ok(HostMapping { kmd, va })
    }

    /// The GPU VA of `piece`'s first byte in this mapping of it.
    pub fn gpu_va(&self, piece: &Piece) -> u64 {
        self.va + (piece.addr - piece.page)
    }
}

impl Drop for HostMapping<'_> {
    fn drop(&mut self) {
        // An error (EIO: an invalidation failed) leaves the pages pinned
        // in the KMD until the file is closed; nothing else to do here.
        let _ = self.kmd.host_unmap(self.va);
    }
}

/// One piece of a read: `len` bytes at byte `at` of the destination, which
/// is process address `addr`, mapped as the pages from `page` on
/// (`map_size` bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    /// Offset in the destination.
    pub at: u64,
    /// Its bytes.
    pub len: u64,
    /// Process address of its first byte.
    pub addr: u64,
    /// The page holding it.
    pub page: u64,
    /// Bytes of the mapping: whole pages covering the piece.
    pub map_size: u64,
}

/// The pieces a destination of `len` bytes at process address `base` is
/// mapped in, in order: each at most [`PIECE`] bytes from its page, except
/// that a last piece under a quarter of that joins the one before (it would
/// cost a whole mapping, submission and unmapping for a few pages).
pub fn pieces(base: u64, len: u64) -> impl Iterator<Item = Piece> {
    let mut at = 0;
    std::iter::from_fn(move || {
        if at >= len {
            return None;
        }
        let addr = base + at;
        let page = addr & !(PAGE - 1);
        let mut n = (len - at).min(PIECE - (addr - page));
        if len - at - n < PIECE / 4 {
            n = len - at;
        }
        let piece = Piece {
            at,
            len: n,
            addr,
            page,
            map_size: (addr + n).next_multiple_of(PAGE) - page,
        };
        at += n;
        Some(piece)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_cover_the_destination_in_page_aligned_mappings() {
        for (base, len) in [
            (0x1000, 1),
            (0x1234, 64 << 10),
            (0x7000_0010, PIECE),
            (0x7000_0010, PIECE + PIECE / 4 - 1),
            (0x7000_0010, PIECE + PIECE / 4),
            (0x7000_0000, 5 * PIECE / 2),
        ] {
            let v: Vec<Piece> = pieces(base, len).collect();
            let mut at = 0;
            for p in &v {
                assert_eq!(p.at, at);
                assert_eq!(p.addr, base + at);
                assert_eq!(p.page % PAGE, 0);
                assert_eq!(p.map_size % PAGE, 0);
                assert!(p.page <= p.addr && p.addr + p.len <= p.page + p.map_size);
                at += p.len;
            }
            assert_eq!(at, len, "{base:#x}+{len:#x}");
            // Only the last piece may pass PIECE, by less than a quarter.
            for p in &v[..v.len() - 1] {
                assert!(p.len <= PIECE - (p.addr - p.page));
            }
            assert!(v.last().unwrap().len < PIECE + PIECE / 4);
        }
        assert_eq!(pieces(0x1000, 0).count(), 0);
        assert_eq!(pieces(0, 5 * PIECE / 2).count(), 3);
    }
}
