//! Readers of the KMD's debugfs files of the first device (`vms`,
//! `objects`, `contexts`, `hang_dump`, ...); empty when debugfs is not
//! mounted.

use std::path::PathBuf;

/// The text of debugfs file `name` of the (first) device.
pub fn debugfs(name: &str) -> String {
    let Ok(dir) = std::fs::read_dir("/sys/kernel/debug/vgpu") else {
        return String::new();
    };
    for e in dir.flatten() {
        if let Ok(s) = std::fs::read_to_string(e.path().join(name)) {
            return s;
        }
    }
    String::new()
}

/// Path of debugfs file `name` of the (first) device.
pub fn debugfs_path(name: &str) -> PathBuf {
    std::fs::read_dir("/sys/kernel/debug/vgpu")
        .ok()
        .and_then(|d| d.flatten().next())
        .map_or_else(|| PathBuf::from("/nonexistent"), |e| e.path().join(name))
}

/// The debugfs `vms` line of the mapping at `va`, if any.
pub fn vm_line(va: u64) -> Option<String> {
    let key = format!("map va {:#x} ", va);
    debugfs("vms")
        .lines()
        .find(|l| l.trim_start().starts_with(&key))
        .map(|l| l.trim().to_string())
}

/// The debugfs `vms` lines of the mapping at `va`: its line, then the
/// `mismatch at va` and `walk va` lines that follow it when its check
/// failed.
pub fn vm_block(va: u64) -> Vec<String> {
    let key = format!("map va {:#x} ", va);
    let text = debugfs("vms");
    let mut lines = text.lines().map(str::trim);
    let Some(first) = lines.find(|l| l.starts_with(&key)) else {
        return Vec::new();
    };
    let mut out = vec![first.to_string()];
    out.extend(
        lines
            .take_while(|l| l.starts_with("mismatch ") || l.starts_with("walk "))
            .map(str::to_string),
    );
    out
}

/// The word after `name` in `line` (`name value` pairs).
pub fn field(line: &str, name: &str) -> Option<String> {
    let mut it = line.split_whitespace();
    while let Some(w) = it.next() {
        if w == name {
            return it.next().map(str::to_string);
        }
    }
    None
}

/// The value of `name` on the first line of a debugfs `contexts` text: the
/// device's summary (resets, hangs, fence-event counters, wedged).
pub fn summary_field(contexts: &str, name: &str) -> Option<String> {
    field(contexts.lines().next().unwrap_or(""), name)
}

/// Every `name count` line of debugfs `objects`.
pub fn objects() -> Vec<(String, i64)> {
    debugfs("objects")
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k.to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

/// One count of debugfs `objects`; -1 if it is missing.
pub fn object(name: &str) -> i64 {
    objects()
        .into_iter()
        .find(|(k, _)| k == name)
        .map_or(-1, |(_, v)| v)
}

/// The environments of the uevents a uevent helper recorded (one file per
/// uevent, /tmp/uevent.<pid>: see tests/e2e.sh), once one contains
/// `needle` or after 2 s (the helper runs asynchronously).
pub fn uevents_with(needle: &str) -> Vec<String> {
    let read = || -> Vec<String> {
        std::fs::read_dir("/tmp")
            .map(|d| {
                d.flatten()
                    .filter(|e| e.file_name().to_string_lossy().starts_with("uevent."))
                    .filter_map(|e| std::fs::read_to_string(e.path()).ok())
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut events = Vec::new();
    for _ in 0..100 {
        events = read();
        if events.iter().any(|e| e.contains(needle)) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    events
}

/// Ring `e` of the context whose handle is `ctx`, as debugfs `contexts`
/// shows it: (wptr, device rptr, ring size, jobs on the ring).
pub fn ring_state(ctx: u32, e: u32) -> Option<(u32, u32, u32, u32)> {
    let text = debugfs("contexts");
    let mut lines = text.lines();
    lines.find(|l| l.starts_with("ctx ") && field(l, "handle") == Some(ctx.to_string()))?;
    let ring = lines
        .take_while(|l| l.starts_with("  "))
        .find(|l| field(l, "ring") == Some(e.to_string()))?;
    let hex = |k: &str| u32::from_str_radix(field(ring, k)?.trim_start_matches("0x"), 16).ok();
    let dec = |k: &str| field(ring, k)?.parse().ok();
    Some((hex("wptr")?, hex("rptr")?, hex("size")?, dec("pending")?))
}
