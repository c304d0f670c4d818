//! ECC page retirement (the e2e case arms the injector's `ecc` class on the
//! first two COPYs and loads the driver with `ras_max_pages=2`): the page a
//! COPY reads is poisoned, the job stops, and the driver retires the page —
//! the object holding it is quarantined and never bound again, and no new
//! object gets the page (every bind after it succeeds: the driver refuses
//! to map a retired page); the device records it; the second retired page
//! reaches `ras_max_pages` and the device is declared bad.

use std::path::Path;
use std::time::Duration;

use vgpu_umd::uapi::{self, param};

use crate::debugfs::{debugfs, field};
use crate::node::{copy, fence, open, Cmds, Map, MS, PAGE};
use crate::report::{errno, T};

/// `retired_pages N` of debugfs `ras`, once it is at least `want` (the
/// event is handled asynchronously) or after 2 s.
fn retired(want: u64) -> u64 {
    let mut n = 0;
    for _ in 0..100 {
        let r = debugfs("ras");
        n = field(r.lines().next().unwrap_or(""), "retired_pages")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        if n >= want {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    n
}

pub fn test_ras(t: &mut T, path: &Path) {
    let n = open(path);
    let start = n.get_param(param::VA_START).unwrap_or(0);
    let rw = uapi::VM_BIND_READ | uapi::VM_BIND_WRITE;
    let cmds = Cmds::new(&n, start + 0x100_0000, 4).expect("command buffer");
    let src = n.gem_create(16 * PAGE, 0).unwrap_or(0);
    let dst = n.gem_create(16 * PAGE, 0).unwrap_or(0);
    let (sva, dva) = (start + 0x200_0000, start + 0x300_0000);
    t.ok("ras: bind the source", n.vm_bind(src, sva, 16 * PAGE, rw));
    t.ok(
        "ras: bind the destination",
        n.vm_bind(dst, dva, 16 * PAGE, rw),
    );
    if let Ok(m) = Map::new(&n, src, 16 * PAGE) {
        for i in 0..16 * 512 {
            m.write(i, i as u64);
        }
    }
    let c = n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1, 0).unwrap_or(0);
    let job = cmds.program(0, &[copy(sva, dva, 16 * PAGE)]);
    let s = n.submit(c, 0, &[job], &[]).unwrap_or(0);
    let r = n.wait(&[fence(c, 0, s)], true, 30_000 * MS);
    t.check(
        "ras: the COPY of a poisoned page fails",
        errno(&r) == Some(libc::EIO),
        || format!("{r:?}"),
    );
    let q = n.ctx_query(c).unwrap_or_default();
    t.check(
        "ras: the engine error is ECC_UNCORRECTABLE",
        q.engine_error == vgpu_hwif::packet::EngineError::EccUncorrectable as u32,
        || format!("{q:?}"),
    );
    t.check("ras: one page retired", retired(1) == 1, || debugfs("ras"));
    let stats = n.query_stats(&mut []).unwrap_or_default();
    t.check(
        "ras: QUERY_STATS counts it",
        stats.retired_pages == 1,
        || format!("{}", stats.retired_pages),
    );
    let report = debugfs("ras");
    t.check(
        "ras: the object holding it is quarantined",
        report.contains("quarantined_objects 1"),
        || report.clone(),
    );
    t.err(
        "ras: the bad object is never bound again",
        n.vm_bind(src, start + 0x400_0000, 16 * PAGE, rw),
        libc::EIO,
    );
    // The application lets the object go; the driver keeps it.
    let _ = n.vm_unbind(sva, 16 * PAGE);
    let _ = n.gem_close(src);
    // Many new objects: had the page gone back to the kernel, one of them
    // would likely get it, and its bind would fail.
    let mut all = true;
    let mut held = Vec::new();
    for i in 0..64u64 {
        let h = n.gem_create(16 * PAGE, 0).unwrap_or(0);
        let ok = n
            .vm_bind(h, start + 0x1000_0000 + i * 16 * PAGE, 16 * PAGE, rw)
            .is_ok();
        all &= ok;
        held.push(h);
    }
    t.check(
        "ras: 64 new objects bind (none got the retired page)",
        all,
        || debugfs("ras"),
    );

    // A second poisoned page reaches ras_max_pages=2: the device is bad.
    let c2 = n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1, 0).unwrap_or(0);
    let job2 = cmds.program(1, &[copy(dva, start + 0x1000_0000, 16 * PAGE)]);
    let s2 = n.submit(c2, 0, &[job2], &[]).unwrap_or(0);
    let _ = n.wait(&[fence(c2, 0, s2)], true, 30_000 * MS);
    t.check("ras: a second page retired", retired(2) == 2, || {
        debugfs("ras")
    });
    let stats = n.query_stats(&mut []).unwrap_or_default();
    t.check(
        "ras: at ras_max_pages the device is declared bad (wedged)",
        stats.wedged == 1 && stats.retired_pages == 2,
        || format!("wedged {} retired {}", stats.wedged, stats.retired_pages),
    );
    t.err(
        "ras: a bad device takes no work",
        n.submit(c2, 0, &[job2], &[]),
        libc::EIO,
    );
}
