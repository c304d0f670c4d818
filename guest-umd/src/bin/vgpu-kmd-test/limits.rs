//! GEM memory limits (the e2e case loads the driver with
//! `gem_limit_mib=64 file_gem_limit_mib=32`): a file's objects stop at its
//! limit with ENOSPC, all files' at the device's with ENOMEM; refusals are
//! counted, the limits reported in QUERY_STATS; freeing makes room again; a
//! lazy object is charged its whole size when it is created; dumb buffers
//! on the primary node count like any object ([`crate::dumb`]).

use std::path::Path;

use crate::node::open;
use crate::report::T;

const MIB: u64 = 1 << 20;

pub fn test_limits(t: &mut T, path: &Path) {
    let a = open(path);
    let b = open(path);
    let before = a.query_stats(&mut []).unwrap_or_default();
    t.check(
        "limits: QUERY_STATS reports the limits",
        before.mem_limit == 64 * MIB && before.file_mem_limit == 32 * MIB,
        || {
            format!(
                "mem_limit {} file_mem_limit {}",
                before.mem_limit, before.file_mem_limit
            )
        },
    );
    // A lazy object (pages only on GPU faults) is charged its whole size.
    if let Some(l) = t.ok(
        "limits: file A, a lazy object of 32 MiB (its limit)",
        a.gem_create(32 * MIB, vgpu_umd::uapi::GEM_CREATE_LAZY),
    ) {
        t.err(
            "limits: nothing more for file A: ENOSPC",
            a.gem_create(4096, 0),
            libc::ENOSPC,
        );
        t.ok("limits: close the lazy object", a.gem_close(l));
    }
    let a1 = t.ok("limits: file A, 16 MiB", a.gem_create(16 * MIB, 0));
    t.ok(
        "limits: file A, 16 more MiB (its limit)",
        a.gem_create(16 * MIB, 0),
    );
    t.err(
        "limits: file A past its limit: ENOSPC",
        a.gem_create(4096, 0),
        libc::ENOSPC,
    );
    t.ok("limits: file B, 16 MiB", b.gem_create(16 * MIB, 0));
    t.ok(
        "limits: file B, 16 more MiB (the device's limit)",
        b.gem_create(16 * MIB, 0),
    );
    t.err(
        "limits: file B past the device's limit: ENOMEM",
        b.gem_create(4096, 0),
        libc::ENOMEM,
    );
    let after = a.query_stats(&mut []).unwrap_or_default();
    t.check(
        "limits: the refusals are counted",
        after.mem_refused == before.mem_refused + 3 && after.mem_bytes >= 64 * MIB,
        || {
            format!(
                "refused {} -> {}, mem_bytes {}",
                before.mem_refused, after.mem_refused, after.mem_bytes
            )
        },
    );
    if let Some(h) = a1 {
        t.ok("limits: close a 16 MiB object", a.gem_close(h));
        t.ok("limits: the room is there again", a.gem_create(16 * MIB, 0));
    }
    // Every object gone with its file: dumb buffers against the same limits.
    drop((a, b));
    crate::dumb::test_dumb_limits(t, path);
}
