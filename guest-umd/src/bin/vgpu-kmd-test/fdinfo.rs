//! DRM fdinfo (`/proc/self/fdinfo/<fd>`, Documentation/gpu/drm-usage-stats.rst):
//! what gputop and nvtop read of a client. The DRM core's keys, one client
//! id per file, engine time that grows with the file's own work only and
//! survives its context, memory that follows its objects.

use std::collections::HashMap;
use std::os::fd::AsRawFd;
use std::path::Path;

use vgpu_umd::kmd::Kmd;
use vgpu_umd::uapi::{self, param};

use crate::node::{fence, fill, open, Cmds, MS};
use crate::report::T;

/// The `key: value` lines of `n`'s fdinfo.
pub fn fdinfo(n: &Kmd) -> HashMap<String, String> {
    let path = format!("/proc/self/fdinfo/{}", n.as_raw_fd());
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

/// The number at the start of `key`'s value (`123 ns`, `4096 KiB`).
pub fn number(info: &HashMap<String, String>, key: &str) -> Option<u64> {
    info.get(key)?.split_whitespace().next()?.parse().ok()
}

/// The fdinfo keys of two files, engine time and memory of one of them
/// across work, a destroyed context and a freed object.
pub fn test_fdinfo(t: &mut T, path: &Path) {
    let n = open(path);
    let n2 = open(path);
    let start = n.get_param(param::VA_START).unwrap_or(0);
    let a = fdinfo(&n);
    let b = fdinfo(&n2);
    t.check(
        "fdinfo: drm-driver vgpu, drm-client-id, drm-pdev",
        a.get("drm-driver").is_some_and(|d| d == "vgpu")
            && number(&a, "drm-client-id").is_some()
            && a.get("drm-pdev").is_some_and(|p| p.len() == 12),
        || format!("{a:?}"),
    );
    t.check(
        "fdinfo: each file its own client id",
        number(&a, "drm-client-id") != number(&b, "drm-client-id"),
        || {
            format!(
                "{:?} and {:?}",
                a.get("drm-client-id"),
                b.get("drm-client-id")
            )
        },
    );
    t.check(
        "fdinfo: both engines at 0 ns before any work, memory in KiB",
        number(&a, "drm-engine-copy") == Some(0)
            && number(&a, "drm-engine-compute") == Some(0)
            && a.get("drm-engine-copy").is_some_and(|v| v.ends_with(" ns"))
            && a.get("drm-total-system")
                .is_some_and(|v| v.ends_with(" KiB")),
        || format!("{a:?}"),
    );

    vram(t, &n);
    let copy_only = 1 << uapi::ENGINE_COPY;
    let Some(ctx) = t.ok(
        "fdinfo: create context",
        n.ctx_create(uapi::CTX_PRIORITY_NORMAL, copy_only, 0),
    ) else {
        return;
    };
    let Ok(cmds) = Cmds::new(&n, start + 0x100_0000, 16) else {
        t.check("fdinfo: mmap cmds", false, || "mmap failed".into());
        return;
    };
    let sys0 = number(&fdinfo(&n), "drm-total-system").unwrap_or(0);
    let size = 4u64 << 20;
    let bo = n.gem_create(size, 0).unwrap_or(0);
    let sys1 = number(&fdinfo(&n), "drm-total-system").unwrap_or(0);
    t.check(
        "fdinfo: a 4 MiB object adds 4096 KiB to drm-total-system",
        sys1 == sys0 + 4096,
        || format!("{sys0} KiB then {sys1} KiB"),
    );
    let dva = start + 0x400_0000;
    let _ = n.vm_bind(bo, dva, size, uapi::VM_BIND_READ | uapi::VM_BIND_WRITE);
    let c: Vec<uapi::DrmVgpuCmd> = (0..3)
        .map(|i| cmds.program(i, &[fill(dva, size, i as u32 + 1)]))
        .collect();
    let mut last = 0;
    for _ in 0..4 {
        if let Ok(s) = n.submit(ctx, 0, &c, &[]) {
            last = s;
        }
    }
    t.ok(
        "fdinfo: work done",
        n.wait(&[fence(ctx, 0, last)], true, 10_000 * MS),
    );
    // The device adds a slice's time when the slice ends, which may be
    // just after its last fence: wait until the time has settled.
    let mut busy = 0;
    for _ in 0..50 {
        let now = number(&fdinfo(&n), "drm-engine-copy").unwrap_or(0);
        if now > 0 && now == busy {
            break;
        }
        busy = now;
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let after = fdinfo(&n);
    t.check(
        "fdinfo: 48 MiB of fills count on drm-engine-copy, none on compute",
        busy > 0 && number(&after, "drm-engine-compute") == Some(0),
        || format!("{after:?}"),
    );
    let other = fdinfo(&n2);
    t.check(
        "fdinfo: the other file's engine time stays 0",
        number(&other, "drm-engine-copy") == Some(0),
        || format!("{other:?}"),
    );
    let _ = n.ctx_destroy(ctx);
    let gone = number(&fdinfo(&n), "drm-engine-copy").unwrap_or(0);
    t.check(
        "fdinfo: engine time kept after the context is destroyed",
        gone >= busy,
        || format!("{busy} ns before, {gone} ns after"),
    );
    let _ = n.vm_unbind(dva, size);
    let _ = n.gem_close(bo);
    // An object is freed once its last mapping has gone (a worker may
    // finish it): at most 3 s.
    let mut sys2 = u64::MAX;
    for _ in 0..150 {
        sys2 = number(&fdinfo(&n), "drm-total-system").unwrap_or(u64::MAX);
        if sys2 == sys0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    t.check(
        "fdinfo: freeing the object gives its 4096 KiB back",
        sys2 == sys0,
        || format!("{sys0} KiB at first, {sys2} KiB after the free"),
    );
}

/// On a device with VRAM: a VRAM-only object counts in `drm-total-vram`
/// (and not in system memory) until it is freed.
fn vram(t: &mut T, n: &Kmd) {
    if n.get_param(param::VRAM_SIZE).unwrap_or(0) == 0 {
        return;
    }
    let before = fdinfo(n);
    let Some(bo) = t.ok(
        "fdinfo: a VRAM object",
        n.gem_create(2 << 20, uapi::GEM_CREATE_VRAM),
    ) else {
        return;
    };
    let with = fdinfo(n);
    t.check(
        "fdinfo: a 2 MiB VRAM object adds 2048 KiB to drm-total-vram and drm-resident-vram only",
        number(&with, "drm-total-vram") == number(&before, "drm-total-vram").map(|v| v + 2048)
            && number(&with, "drm-resident-vram") == number(&with, "drm-total-vram")
            && number(&with, "drm-total-system") == number(&before, "drm-total-system"),
        || format!("before {before:?} with {with:?}"),
    );
    let _ = n.gem_close(bo);
}
