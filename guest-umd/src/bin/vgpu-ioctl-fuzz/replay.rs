//! Regression cases: fixed sequences for what fuzzing found, each checking
//! its answers (`--replay NAME`; `--list-replays`). A case prints
//! `ok`/`FAIL` lines and exits 0 only if every check held.

use vgpu_umd::uapi;

use crate::guard::Arena;
use crate::sys;
use crate::worker::DevInfo;

/// The cases: name, what it checks.
pub const CASES: &[(&str, &str)] = &[(
    "query-stats-guard",
    "QUERY_STATS writes exactly num_contexts entries: an array with room for fewer faults on the guard page (EFAULT), the bytes before it are the entries",
)];

struct Checks {
    failed: u32,
}

impl Checks {
    fn check(&mut self, name: &str, ok: bool, why: impl FnOnce() -> String) {
        if ok {
            println!("ok {name}");
        } else {
            self.failed += 1;
            println!("FAIL {name}: {}", why());
        }
    }
}

/// Runs case `name`; the exit status.
pub fn run(name: &str, dev: &DevInfo) -> i32 {
    let mut c = Checks { failed: 0 };
    match name {
        "query-stats-guard" => query_stats_guard(&mut c, dev),
        _ => {
            eprintln!("vgpu-ioctl-fuzz: no regression case '{name}' (--list-replays)");
            return 2;
        }
    }
    println!(
        "replay {name}: {}",
        if c.failed == 0 { "ok" } else { "FAIL" }
    );
    i32::from(c.failed != 0)
}

/// The out-of-tree fuzzer's crash: QUERY_STATS was given an array that did
/// not hold num_contexts entries, and the driver's documented write of
/// num_contexts × 144 bytes went over the fuzzer's own stack. Against a
/// guard page the same call must end in EFAULT with nothing written past
/// the array's room, and an array of exactly the capacity must be filled.
fn query_stats_guard(c: &mut Checks, dev: &DevInfo) {
    let Ok(fd) = sys::open_node(&dev.node) else {
        c.check("open", false, || "cannot open the node".into());
        return;
    };
    let mut arena = Arena::new(4);
    // Three contexts, so that three entries are to be written.
    let mask = if dev.engine_mask & 1 != 0 {
        1
    } else {
        dev.engine_mask
    };
    for i in 0..3 {
        let mut a = uapi::DrmVgpuCtxCreate {
            priority: uapi::CTX_PRIORITY_NORMAL,
            engine_mask: mask,
            ..Default::default()
        };
        let r = sys::ioctl(fd, &mut a, &mut arena);
        c.check(&format!("ctx_create {i}"), r.is_ok(), || sys::rname(r));
    }
    let entry = size_of::<uapi::DrmVgpuCtxStats>();
    // Exactly three entries' room before the guard: filled.
    let p = arena.at_end(3 * entry);
    let mut q = uapi::DrmVgpuQueryStats {
        num_contexts: 3,
        contexts: p as u64,
        ..Default::default()
    };
    let r = sys::ioctl(fd, &mut q, &mut arena);
    c.check(
        "query_stats: exact room",
        r.is_ok() && q.num_contexts >= 3,
        || format!("{} num_contexts {}", sys::rname(r), q.num_contexts),
    );
    // SAFETY: the three entries before the guard, just written.
    let ids: Vec<u32> = (0..3)
        .map(|i| unsafe { p.add(i * entry).cast::<u32>().read_unaligned() })
        .collect();
    c.check(
        "query_stats: entries written",
        ids.iter().all(|&id| id != 0),
        || format!("ctx ids {ids:?}"),
    );
    // Room for one and a half entries: the second runs into the guard.
    let room = entry + entry / 2;
    let p = arena.at_end(room);
    // SAFETY: the `room` bytes before the guard, arena memory.
    unsafe { std::ptr::write_bytes(p, 0xa5, room) };
    let mut q = uapi::DrmVgpuQueryStats {
        num_contexts: 3,
        contexts: p as u64,
        ..Default::default()
    };
    let r = sys::ioctl(fd, &mut q, &mut arena);
    c.check(
        "query_stats: short of room is EFAULT",
        r == Err(libc::EFAULT),
        || sys::rname(r),
    );
    // SAFETY: as above.
    let first = unsafe { p.cast::<u32>().read_unaligned() };
    c.check(
        "query_stats: the first entry was written",
        first != 0xa5a5_a5a5,
        || format!("first word {first:#x}"),
    );
    // A pointer inside the guard page itself.
    let mut rng = crate::rng::Rng::new(1);
    let bad = arena.bad(crate::guard::BadPtr::Guard, 3 * entry, &mut rng);
    let mut q = uapi::DrmVgpuQueryStats {
        num_contexts: 3,
        contexts: bad,
        ..Default::default()
    };
    let r = sys::ioctl(fd, &mut q, &mut arena);
    c.check(
        "query_stats: array in a guard page is EFAULT",
        r == Err(libc::EFAULT),
        || sys::rname(r),
    );
    sys::close(fd);
}
