//! Device memory: `GEM_CREATE` placements and their errors on a device
//! with VRAM (and without), the CPU mapping of a visible VRAM object
//! through the aperture, the mapping of an invisible one (it moves to
//! system memory, the GPU's bytes with it), PRIME export refused, visible VRAM filled with pinned objects (`ENOSPC`, the
//! fallback to system memory), VRAM oversubscribed (older objects evicted),
//! and the VRAM manager's accounting in debugfs `vram_mm`.

use std::path::Path;

use vgpu_umd::kmd::Kmd;
use vgpu_umd::uapi::{
    self, param, GEM_CREATE_CPU_ACCESS as CPU, GEM_CREATE_LAZY as LAZY, GEM_CREATE_SYSTEM as SYS,
    GEM_CREATE_VRAM as VRAM,
};

use crate::debugfs::{debugfs, debugfs_path, field};
use crate::node::{copy, fence, fill, open, scratch, Map, MS, PAGE};
use crate::report::T;

const MIB: u64 = 1 << 20;

/// Field `name` of debugfs `vram_mm`'s first line (`None` without
/// debugfs).
pub(crate) fn vram_field(name: &str) -> Option<u64> {
    let text = debugfs("vram_mm");
    let v = field(text.lines().next()?, name)?;
    match v.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => v.parse().ok(),
    }
}

/// `used` of debugfs `vram_mm`, in bytes.
pub(crate) fn vram_used() -> Option<u64> {
    vram_field("used")
}

pub fn test_vram(t: &mut T, path: &Path) {
    let n = open(path);
    let size = n.get_param(param::VRAM_SIZE).unwrap_or(0);
    let visible = n.get_param(param::VRAM_VISIBLE).unwrap_or(0);
    t.err(
        "vram: LAZY | VRAM",
        n.gem_create(PAGE, LAZY | VRAM),
        libc::EINVAL,
    );
    t.err(
        "vram: CPU_ACCESS alone",
        n.gem_create(PAGE, CPU),
        libc::EINVAL,
    );
    if let Some(h) = t.ok("vram: VRAM | SYSTEM", n.gem_create(PAGE, VRAM | SYS)) {
        let _ = n.gem_close(h);
    }
    if size == 0 {
        t.err(
            "vram: VRAM only, device without VRAM",
            n.gem_create(PAGE, VRAM),
            libc::ENXIO,
        );
        return;
    }
    if size <= uapi::GEM_MAX_SIZE {
        // The firmware carve-out makes the whole VRAM size too large.
        t.err(
            "vram: VRAM only, as large as VRAM",
            n.gem_create(size, VRAM),
            libc::E2BIG,
        );
    }
    let before = vram_used();
    let h = t.ok("vram: 16 MiB in VRAM", n.gem_create(16 * MIB, VRAM));
    if let (Some(b), Some(a)) = (before, vram_used()) {
        t.check("vram: vram_mm counts it", a == b + 16 * MIB, || {
            format!("used {b:#x} -> {a:#x}")
        });
    }
    if let Some(h) = h {
        t.err(
            "vram: PRIME export of VRAM",
            n.prime_handle_to_fd(h),
            libc::EOPNOTSUPP,
        );
        let _ = n.gem_close(h);
    }
    if let (Some(b), Some(a)) = (before, vram_used()) {
        t.check("vram: closed, its VRAM given back", a == b, || {
            format!("used {b:#x} -> {a:#x}")
        });
    }
    test_aperture(t, &n, visible);
    test_mmap_migrates(t, &n);
    test_full(t, &n, size, visible);
}

/// Which objects eviction takes: only those with visible bytes for a
/// CPU-access object, the least recently placed first (VRAM empty at the
/// start; `vgpu-kmd-test vram-victims`).
pub fn test_vram_victims(t: &mut T, path: &Path) {
    let n = open(path);
    let visible = n.get_param(param::VRAM_VISIBLE).unwrap_or(0);
    let used = vram_used();
    t.check(
        "vram-victims: VRAM empty at the start",
        used == Some(0),
        || format!("debugfs vram_mm used: {used:?}"),
    );
    test_visible_eviction(t, &n, visible);
    test_lru(t, &n);
}

/// Four VRAM objects of different sizes (`u` = usable / 16: 4u, 3u, 5u and
/// the rest but 2u + 1 MiB) placed in that order, the oldest at a higher
/// kernel address than the younger ones, so that an order other than
/// placement order, such as the registry's address order, picks another.
/// Their handles, sizes and `u`; `None` (a failed check if placing failed)
/// when VRAM is not empty or too small.
pub(crate) fn place_four(t: &mut T, n: &Kmd, section: &str) -> Option<(Vec<u32>, [u64; 4], u64)> {
    let (Some(usable), Some(0)) = (vram_field("usable"), vram_used()) else {
        return None;
    };
    // Free after the four: 2u + 1 MiB.
    let u = (usable / 16) & !(MIB - 1);
    if u < 2 * MIB {
        return None;
    }
    let mut sizes = [4 * u, 3 * u, 5 * u, usable - 14 * u - MIB];
    sizes[3] &= !(MIB - 1);
    let distinct = (0..4).all(|i| (0..i).all(|j| sizes[i] != sizes[j]));
    if !distinct || sizes[3] == 0 {
        return None;
    }
    // Small system objects first; the oldest VRAM object after them; then
    // the small ones freed, so that the younger VRAM objects reuse their
    // (lower) slots.
    let small: Vec<u32> = (0..16).filter_map(|_| n.gem_create(PAGE, 0).ok()).collect();
    let mut held = Vec::new();
    for (i, &size) in sizes.iter().enumerate() {
        if i == 1 {
            for &h in &small {
                let _ = n.gem_close(h);
            }
        }
        match n.gem_create(size, VRAM) {
            Ok(h) => held.push(h),
            Err(e) => {
                t.check(&format!("{section}: four objects placed"), false, || {
                    format!("object {i} of {} MiB: {e}", size >> 20)
                });
                for h in held {
                    let _ = n.gem_close(h);
                }
                return None;
            }
        }
    }
    Some((held, sizes, u))
}

/// Which of [`place_four`]'s objects `evicted` bytes are, for a message.
pub(crate) fn which(sizes: &[u64; 4], evicted: u64) -> String {
    objects_of(sizes, evicted).map_or(format!("{} MiB in all", evicted >> 20), |set| {
        set.iter()
            .map(|&i| format!("object {i} ({} MiB)", sizes[i] >> 20))
            .collect::<Vec<_>>()
            .join(" and ")
    })
}

/// The objects of [`place_four`] whose sizes add up to `bytes` (the sizes
/// are chosen so that at most one set does), if any do.
pub(crate) fn objects_of(sizes: &[u64; 4], bytes: u64) -> Option<Vec<usize>> {
    let set = |m: usize| (0..4).filter(move |i| m >> i & 1 == 1);
    (1..16usize)
        .find(|&m| set(m).map(|i| sizes[i]).sum::<u64>() == bytes)
        .map(|m| set(m).collect())
}

/// The least recently placed object is evicted first: [`place_four`]'s
/// objects nearly fill VRAM, and one more needs the room of any one of
/// them; it must be the oldest's.
fn test_lru(t: &mut T, n: &Kmd) {
    let Some((mut held, sizes, u)) = place_four(t, n, "vram-victims") else {
        return;
    };
    let before = vram_used().unwrap_or(0);
    let more = 3 * u;
    let r = n.gem_create(more, VRAM);
    let after = vram_used().unwrap_or(0);
    let evicted = (before + more).saturating_sub(after);
    t.check(
        "vram-victims: the least recently placed object is evicted first",
        r.is_ok() && evicted == sizes[0],
        || {
            format!(
                "objects of {:?} MiB placed in that order; one of {} MiB more needed the room \
                 of one of them: GEM_CREATE {}, evicted {}, want object 0 (the oldest, {} \
                 MiB): victims go least recently placed first (their allocations' stamps), \
                 whatever order the objects are visited in",
                sizes.map(|s| s >> 20),
                more >> 20,
                match &r {
                    Ok(_) => "succeeded".to_string(),
                    Err(e) => crate::report::errname(e.errno).to_string(),
                },
                which(&sizes, evicted),
                sizes[0] >> 20
            )
        },
    );
    if let Ok(h) = r {
        held.push(h);
    }
    for h in held {
        let _ = n.gem_close(h);
    }
}

/// Room in visible VRAM made by evicting only objects that hold visible
/// bytes: the part the CPU cannot see is filled first (objects are placed
/// top down), then one object spills into the visible part; a CPU-access
/// object that needs that room evicts the spilled object, and only it
/// (evicting the older, invisible ones would free nothing it can use).
fn test_visible_eviction(t: &mut T, n: &Kmd, visible: u64) {
    let (Some(usable), Some(0)) = (vram_field("usable"), vram_used()) else {
        return;
    };
    if visible < 8 * MIB || usable < visible + 8 * MIB {
        return;
    }
    let invisible = usable - visible;
    let half = (invisible / 2) & !(MIB - 1);
    let mut held = Vec::new();
    for i in 0..2 {
        match n.gem_create(half, VRAM) {
            Ok(h) => held.push(h),
            Err(e) => {
                t.check("vram-victims: the invisible part filled", false, || {
                    format!("object {i} of {} MiB: {e}", half >> 20)
                });
                return;
            }
        }
    }
    // Spills over the rest of the invisible part into the visible one.
    let spill = visible / 2;
    let cpu = visible * 3 / 4;
    let before = vram_field("evictions").unwrap_or(0);
    let r = n.gem_create(spill, VRAM).and_then(|h| {
        held.push(h);
        n.gem_create(cpu, VRAM | CPU)
    });
    let evicted = vram_field("evictions").unwrap_or(0) - before;
    t.check(
        "vram-victims: a visible allocation evicts only objects with visible bytes",
        r.is_ok() && evicted == 1,
        || {
            format!(
                "two objects of {} MiB fill the part of VRAM the CPU cannot see, one of {} MiB \
                 spills into the visible part; a CPU-access object of {} MiB then needs visible \
                 room: GEM_CREATE {}, {evicted} evictions (want 1: the spilled object; for \
                 Region::Visible only objects with visible bytes are victims, for Region::Any \
                 every object in VRAM)",
                half >> 20,
                spill >> 20,
                cpu >> 20,
                match &r {
                    Ok(_) => "succeeded".to_string(),
                    Err(e) => crate::report::errname(e.errno).to_string(),
                }
            )
        },
    );
    if let Ok(h) = r {
        held.push(h);
    }
    for h in held {
        let _ = n.gem_close(h);
    }
}

const COPY: u32 = uapi::ENGINE_COPY;
const RW: u32 = uapi::VM_BIND_READ | uapi::VM_BIND_WRITE;
const LEN: u64 = 64 << 10;

/// A job filling `len` bytes at `va` with `word` on context `c`, waited
/// for; whether it completed.
fn gpu_fill(n: &Kmd, cmds: &crate::node::Cmds, c: u32, slot: usize, va: u64, word: u32) -> bool {
    let cmd = cmds.program(slot, &[fill(va, LEN, word)]);
    n.submit(c, COPY, &[cmd], &[])
        .and_then(|s| n.wait(&[fence(c, COPY, s)], true, 10_000 * MS))
        .is_ok()
}

/// Whether every word of the mapping is `word` twice.
fn all_words(m: &Map, word: u32) -> usize {
    let w = u64::from(word) << 32 | u64::from(word);
    (0..(LEN / 8) as usize).filter(|&i| m.read(i) != w).count()
}

/// A VRAM object the GPU filled, then mapped by the CPU: `GEM_MMAP_OFFSET`
/// moves it to system memory (an eviction, which debugfs counts) and the
/// CPU reads what the GPU wrote; the GPU writes it again at the same VA
/// (its mapping was rewritten) and the CPU sees that too.
fn test_mmap_migrates(t: &mut T, n: &Kmd) {
    let s = scratch(n, 0x300_0000, 1);
    let va = s.start + 0x500_0000;
    let Some(h) = t.ok("vram: 64 KiB in VRAM for the GPU", n.gem_create(LEN, VRAM)) else {
        return;
    };
    t.ok("vram: bind it", n.vm_bind(h, va, LEN, RW));
    let Some(c) = t.ok(
        "vram: a copy context",
        n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1 << COPY, 0),
    ) else {
        return;
    };
    t.check(
        "vram: the GPU fills VRAM",
        gpu_fill(n, &s.cmds, c, 0, va, 0xc0ff_ee11),
        || "the job failed".into(),
    );
    let before = vram_field("evictions");
    let Some(m) = t.ok(
        "vram: mmap of VRAM the CPU cannot see (moves it to system memory)",
        Map::new(n, h, LEN),
    ) else {
        return;
    };
    let bad = all_words(&m, 0xc0ff_ee11);
    t.check("vram: the CPU reads what the GPU wrote", bad == 0, || {
        format!("{bad} of {} words differ", LEN / 8)
    });
    if let (Some(b), Some(a)) = (before, vram_field("evictions")) {
        t.check("vram: the move counted as an eviction", a == b + 1, || {
            format!("evictions {b} -> {a}")
        });
    }
    t.check(
        "vram: the GPU writes it again at the same VA",
        gpu_fill(n, &s.cmds, c, 1, va, 0x1234_5678),
        || "the job failed".into(),
    );
    let bad = all_words(&m, 0x1234_5678);
    t.check("vram: the CPU sees the GPU's new words", bad == 0, || {
        format!("{bad} of {} words differ", LEN / 8)
    });
    drop(m);
    let _ = n.ctx_destroy(c);
    let _ = n.vm_unbind(va, LEN);
    let _ = n.gem_close(h);
}

/// A device reset (debugfs `reset_device`) with VRAM in use: with the
/// device's reset policy losing VRAM (garbage, zero), the context of the
/// file whose object was in VRAM reports `VGPU_CTX_RESET_VRAM_LOST` and
/// takes no more jobs (`EIO`), the object cannot be bound again (`EIO`),
/// while another file's context (no VRAM objects) works on; with `keep`,
/// nothing is lost.
pub fn test_vram_lost(t: &mut T, path: &Path) {
    let n = open(path);
    let other = open(path);
    let policy = debugfs("vram");
    let keeps = policy.contains("reset_policy KEPT");
    let s = scratch(&n, 0x300_0000, 1);
    let o = scratch(&other, 0x300_0000, LEN / PAGE);
    let va = s.start + 0x500_0000;
    let (Some(h), Some(c), Some(d)) = (
        t.ok("vram-lost: an object in VRAM", n.gem_create(LEN, VRAM)),
        t.ok(
            "vram-lost: its file's context",
            n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1 << COPY, 0),
        ),
        t.ok(
            "vram-lost: another file's context",
            other.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1 << COPY, 0),
        ),
    ) else {
        return;
    };
    t.ok("vram-lost: bind it", n.vm_bind(h, va, LEN, RW));
    t.check(
        "vram-lost: the GPU fills it",
        gpu_fill(&n, &s.cmds, c, 0, va, 7),
        || "the job failed".into(),
    );
    let reset = std::fs::write(debugfs_path("reset_device"), "1");
    t.ok("vram-lost: device reset", reset);
    let status = n.ctx_query(c).map(|q| q.reset_status).unwrap_or(u32::MAX);
    let other_status = other
        .ctx_query(d)
        .map(|q| q.reset_status)
        .unwrap_or(u32::MAX);
    t.check(
        "vram-lost: the other file's context is not told VRAM was lost",
        other_status != uapi::CTX_RESET_VRAM_LOST,
        || format!("reset_status {other_status}"),
    );
    t.check(
        "vram-lost: the other file's context works on",
        gpu_fill(&other, &o.cmds, d, 0, o.dva, 9),
        || "its job failed".into(),
    );
    if keeps {
        t.check(
            "vram-lost: kept, nothing lost",
            status != uapi::CTX_RESET_VRAM_LOST,
            || format!("reset_status {status}"),
        );
        t.check(
            "vram-lost: kept, the context works on",
            gpu_fill(&n, &s.cmds, c, 1, va, 8),
            || "its job failed".into(),
        );
        return;
    }
    t.check(
        "vram-lost: its context reports VRAM lost",
        status == uapi::CTX_RESET_VRAM_LOST,
        || format!("reset_status {status}"),
    );
    let cmd = s.cmds.program(1, &[fill(va, LEN, 8)]);
    t.err(
        "vram-lost: its context takes no more jobs",
        n.submit(c, COPY, &[cmd], &[]),
        libc::EIO,
    );
    t.err(
        "vram-lost: the lost object cannot be bound again",
        n.vm_bind(h, va + 0x10_0000, LEN, RW),
        libc::EIO,
    );
    let text = debugfs("vram_mm");
    t.check(
        "vram-lost: vram_mm marks the object lost",
        text.contains(" lost"),
        || text.lines().take(3).collect::<Vec<_>>().join(" | "),
    );
}

/// A visible VRAM object mapped by the CPU (through the aperture): what
/// one mapping writes, another reads; too large for the visible part:
/// `E2BIG`, or system memory with `SYSTEM`.
fn test_aperture(t: &mut T, n: &Kmd, visible: u64) {
    if visible == 0 {
        t.err(
            "vram: CPU_ACCESS without an aperture",
            n.gem_create(PAGE, VRAM | CPU),
            libc::E2BIG,
        );
        return;
    }
    if visible < uapi::GEM_MAX_SIZE {
        let over = visible + PAGE;
        t.err(
            "vram: CPU_ACCESS larger than the visible part",
            n.gem_create(over, VRAM | CPU),
            libc::E2BIG,
        );
        if let Some(h) = t.ok(
            "vram: CPU_ACCESS larger than visible, VRAM | SYSTEM",
            n.gem_create(over, VRAM | SYS | CPU),
        ) {
            let _ = n.gem_close(h);
        }
    }
    let Some(h) = t.ok("vram: 1 MiB in visible VRAM", n.gem_create(MIB, VRAM | CPU)) else {
        return;
    };
    let (Some(a), Some(b)) = (
        t.ok("vram: mmap visible VRAM", Map::new(n, h, MIB)),
        t.ok("vram: mmap it again", Map::new(n, h, MIB)),
    ) else {
        return;
    };
    let words = (MIB / 8) as usize;
    for i in 0..words {
        a.write(i, (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    }
    let bad = (0..words)
        .filter(|&i| b.read(i) != (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15))
        .count();
    t.check(
        "vram: one aperture mapping sees the other's writes",
        bad == 0,
        || format!("{bad} of {words} words differ"),
    );
    drop((a, b));
    let _ = n.gem_close(h);
}

/// Visible VRAM filled with CPU-access objects (mapped through the
/// aperture: never evicted) until `ENOSPC`, and the fallback to system
/// memory; then VRAM-only objects of twice VRAM's size: every one is
/// created, the older ones evicted to system memory (debugfs counts the
/// evictions); all given back at the end.
fn test_full(t: &mut T, n: &Kmd, size: u64, visible: u64) {
    if visible > 0 {
        const CHUNK: u64 = 4 * MIB;
        let mut held = Vec::new();
        let mut last = Ok(0);
        for _ in 0..=visible / CHUNK {
            last = n.gem_create(CHUNK, VRAM | CPU);
            match &last {
                Ok(h) => held.push(*h),
                Err(_) => break,
            }
        }
        t.check(
            "vram: visible VRAM filled with CPU-access objects",
            held.len() as u64 == visible / CHUNK,
            || format!("{} objects of 4 MiB in {} MiB", held.len(), visible >> 20),
        );
        t.err(
            "vram: visible VRAM full, CPU-access objects not evicted",
            last,
            libc::ENOSPC,
        );
        if let Some(h) = t.ok(
            "vram: visible VRAM full, VRAM | SYSTEM | CPU_ACCESS falls back",
            n.gem_create(CHUNK, VRAM | SYS | CPU),
        ) {
            let _ = n.gem_close(h);
        }
        for h in held {
            let _ = n.gem_close(h);
        }
    }
    const CHUNK: u64 = 32 * MIB;
    let before = vram_field("evictions");
    let want = 2 * size / CHUNK;
    let mut held = Vec::new();
    for i in 0..want {
        match n.gem_create(CHUNK, VRAM) {
            Ok(h) => held.push(h),
            Err(e) => {
                t.check("vram: VRAM only, twice VRAM's size", false, || {
                    format!("object {i} of {want}: {e}")
                });
                break;
            }
        }
    }
    if held.len() as u64 == want {
        t.check("vram: VRAM only, twice VRAM's size", true, String::new);
    }
    if let (Some(b), Some(a)) = (before, vram_field("evictions")) {
        t.check("vram: older objects evicted", a > b, || {
            format!("evictions {b} -> {a}")
        });
    }
    for h in held {
        let _ = n.gem_close(h);
    }
    if let Some(u) = vram_used() {
        t.check("vram: all given back", u == 0, || format!("used {u:#x}"));
    }
}

/// Evicted objects are guest memory, charged to the GEM limits: with a
/// small per-file limit (`file_gem_limit_mib`), VRAM-only objects of 32 MiB
/// are created while VRAM holds them and while the limit leaves room for
/// the ones evicted, then refused with `ENOSPC` (nothing more may be
/// evicted), rather than exhausting guest memory.
pub fn test_vram_charge(t: &mut T, path: &Path) {
    const CHUNK: u64 = 32 * MIB;
    let n = open(path);
    let size = n.get_param(param::VRAM_SIZE).unwrap_or(0);
    let limit = n
        .query_stats(&mut [])
        .map(|s| s.file_mem_limit)
        .unwrap_or(0);
    let usable = size.saturating_sub(2 * MIB);
    let want = usable / CHUNK + limit / CHUNK;
    let mut held = Vec::new();
    let mut last = Ok(0);
    for _ in 0..want + 2 {
        last = n.gem_create(CHUNK, VRAM);
        match &last {
            Ok(h) => held.push(*h),
            Err(_) => break,
        }
    }
    t.check(
        "vram-charge: objects while VRAM and the limit leave room",
        held.len() as u64 == want,
        || {
            format!(
                "{} created, want {want} ({} MiB usable VRAM, {} MiB file limit)",
                held.len(),
                usable >> 20,
                limit >> 20
            )
        },
    );
    t.err("vram-charge: then refused", last, libc::ENOSPC);
    let mem = n
        .query_stats(&mut [])
        .map(|s| s.mem_bytes)
        .unwrap_or(u64::MAX);
    t.check(
        "vram-charge: the evicted ones within the limit",
        mem <= limit,
        || format!("GEM memory {mem:#x}, limit {limit:#x}"),
    );
    for h in held {
        let _ = n.gem_close(h);
    }
}

/// The first `LEN` bytes at `va` copied by the GPU (context `c`) into the
/// scratch data at `s.dva`, read back: how many 8-byte words are not
/// `word` twice (`None`: the copy failed).
fn gpu_read(
    n: &Kmd,
    s: &crate::node::Scratch,
    c: u32,
    slot: usize,
    va: u64,
    word: u32,
) -> Option<usize> {
    let cmd = s.cmds.program(slot, &[copy(va, s.dva, LEN)]);
    n.submit(c, COPY, &[cmd], &[])
        .and_then(|q| n.wait(&[fence(c, COPY, q)], true, 10_000 * MS))
        .ok()?;
    let m = Map::new(n, s.data, LEN).ok()?;
    Some(all_words(&m, word))
}

/// A move whose TLB invalidation the device refuses (the device armed with
/// `--inject control-busy:packet=TLB_INVALIDATE,count=1`; VRAM of 64 MiB):
/// the GPU may still translate the object's VA to its VRAM pages, so the
/// move must be abandoned, the object left where it is, mapped again and
/// intact, and the failed move counted; the next allocation that needs the
/// room moves it for real, and the GPU then reads it from system memory.
pub fn test_vram_move_refused(t: &mut T, path: &Path) {
    const BIG: u64 = 16 * MIB;
    let n = open(path);
    let s = scratch(&n, 0x300_0000, LEN / PAGE);
    let Some(c) = t.ok(
        "vram-move-refused: a copy context",
        n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1 << COPY, 0),
    ) else {
        return;
    };
    // Three objects of 16 MiB, each filled by the GPU (its TLB holds their
    // translations); the oldest, `a`, is the first victim.
    let words = [0xa1, 0xb2, 0xc3];
    let mut held = Vec::new();
    for (i, &w) in words.iter().enumerate() {
        let va = s.start + 0x1000_0000 + i as u64 * BIG;
        let Some(h) = t.ok(
            &format!("vram-move-refused: object {i} in VRAM"),
            n.gem_create(BIG, VRAM),
        ) else {
            return;
        };
        t.ok("vram-move-refused: bind it", n.vm_bind(h, va, BIG, RW));
        t.check(
            "vram-move-refused: the GPU fills it",
            gpu_fill(&n, &s.cmds, c, i, va, w),
            || "the job failed".into(),
        );
        held.push(h);
    }
    let a_va = s.start + 0x1000_0000;
    let failed_before = vram_field("moves_failed").unwrap_or(0);
    // 24 MiB more than VRAM holds: `a` must move, and its invalidation is
    // refused.
    let first = n.gem_create(24 * MIB, VRAM);
    let failed = vram_field("moves_failed").unwrap_or(0) - failed_before;
    t.check(
        "vram-move-refused: the move whose invalidation was refused is abandoned and counted",
        failed == 1,
        || {
            format!(
                "GEM_CREATE that needed the room: {}; debugfs vram_mm moves_failed grew by \
                 {failed}: the device refused the TLB invalidation of the victim's VA, so its \
                 translations to the old VRAM pages may live on in a TLB: the move must stop \
                 there (the object mapped again where it is, Err(EIO)), not copy and free pages \
                 the GPU may still reach",
                match &first {
                    Ok(_) => "succeeded".to_string(),
                    Err(e) => crate::report::errname(e.errno).to_string(),
                }
            )
        },
    );
    if let Ok(h) = first {
        let _ = n.gem_close(h);
    }
    let bad = gpu_read(&n, &s, c, 4, a_va, words[0]);
    t.check(
        "vram-move-refused: the victim is intact where it was",
        bad == Some(0),
        || format!("{bad:?} words of its first 64 KiB differ (None: the GPU's copy failed)"),
    );
    let second = n.gem_create(24 * MIB, VRAM);
    t.check(
        "vram-move-refused: the next allocation moves it",
        second.is_ok(),
        || format!("{second:?}"),
    );
    if let Ok(h) = second {
        let va = s.start + 0x2000_0000;
        let _ = n.vm_bind(h, va, 24 * MIB, RW);
        let _ = gpu_fill(&n, &s.cmds, c, 5, va, 0xd4);
        held.push(h);
    }
    let bad = gpu_read(&n, &s, c, 6, a_va, words[0]);
    t.check(
        "vram-move-refused: the GPU reads the moved object from system memory",
        bad == Some(0),
        || format!("{bad:?} words of its first 64 KiB differ (None: the GPU's copy failed)"),
    );
    for h in held {
        let _ = n.gem_close(h);
    }
}
