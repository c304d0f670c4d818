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

use std::collections::VecDeque;

use crate::error::Result;
use crate::fence::SyncPoint;
use crate::kmd::Kmd;
use crate::stream::StreamShared;
use vgpu_hwif::packet::Packet;

/// Reads smaller than this go staged: pinning and mapping a few pages and
/// invalidating them afterwards cost more than copying them twice.
pub const MAPPED_READ_MIN: u64 = 64 << 10;

/// Bytes of one mapping; the last one of a read takes up to a quarter more
/// (within `VGPU_HOST_MAP_MAX_SIZE`).
pub const PIECE: u64 = 8 << 20;

/// Pieces mapped at once (within the KMD's per-file total).
const IN_FLIGHT: usize = 3;

const PAGE: u64 = 4096;

/// A range of this process's memory mapped for the device; unmapped when
/// dropped.
struct HostMapping<'k> {
    kmd: &'k Kmd,
    va: u64,
}

impl Drop for HostMapping<'_> {
    fn drop(&mut self) {
        // An error (EIO: an invalidation failed) leaves the pages pinned
        // in the KMD until the file is closed; nothing else to do here.
        let _ = self.kmd.host_unmap(self.va);
    }
}

/// Copies `out.len()` bytes from GPU VA `src` into `out` through mappings
/// of `out` itself, after the stream's earlier work. `Ok(false)`: the KMD
/// refused a mapping (an older KMD, its limits, memory it cannot pin); the
/// caller reads the whole range another way.
///
/// # Errors
///
/// The stream's errors: a copy that faulted, a lost device.
pub(crate) fn read_mapped(
    s: &StreamShared,
    call: &'static str,
    src: u64,
    out: &mut [u8],
) -> Result<bool> {
    let kmd: &Kmd = &s.ctx.kmd;
    let base = out.as_mut_ptr() as u64;
    let len = out.len() as u64;
    let mut pending: VecDeque<(HostMapping<'_>, SyncPoint)> = VecDeque::new();
    let mut at = 0;
    while at < len {
        if pending.len() == IN_FLIGHT {
            let (m, sp) = pending.pop_front().expect("a piece in flight");
            s.wait_point(call, &sp)?;
            drop(m);
        }
        let addr = base + at;
        let page = addr & !(PAGE - 1);
        let mut n = (len - at).min(PIECE - (addr - page));
        if len - at - n < PIECE / 4 {
            // No short last piece: it would cost a whole mapping, submission
            // and unmapping for a few pages.
            n = len - at;
        }
        let size = (addr + n).next_multiple_of(PAGE) - page;
        let va = match kmd.host_map(page, size, 0) {
            Ok(va) => va,
            Err(_) => {
                // Memory the KMD cannot pin (a device mapping, a file the
                // kernel will not pin long-term) or its limits: the caller
                // reads the whole range another way, once the pieces in
                // flight are done.
                if let Some((_, sp)) = pending.back() {
                    s.wait_point(call, sp)?;
                }
                return Ok(false);
            }
        };
        let m = HostMapping { kmd, va };
        let copy = Packet::Copy {
            src: src + at,
            dst: va + (addr - page),
            size: n,
        };
        let sp = s.submit_copies(call, &[copy])?;
        pending.push_back((m, sp));
        at += n;
    }
    // The pieces complete in order: the last one's fence covers them all.
    if let Some((_, sp)) = pending.back() {
        s.wait_point(call, sp)?;
    }
    Ok(true)
}
