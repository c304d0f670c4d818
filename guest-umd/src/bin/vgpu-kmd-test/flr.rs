//! PCI function-level reset through the PCI core
//! (`echo 1 > /sys/bus/pci/devices/<gpu>/reset`, what VFIO and IGT's
//! device_reset do): the driver quiesces the device before it
//! (`reset_prepare`) and brings it back after it (`reset_done`). A job in
//! flight across the reset runs again, its context innocent; new work runs;
//! the reset is counted and logged as a reset of kind `function`
//! (docs/uapi.md, "Function-level reset"). The GPU must sit behind a PCI
//! Express port (`scripts/vm`), where QEMU gives it FLR.

use std::path::Path;
use std::time::{Duration, Instant};

use vgpu_hwif::packet::{self, Packet};
use vgpu_umd::uapi;

use crate::debugfs::{debugfs, summary_field};
use crate::node::{fence, open, pci_name, scratch, sem_wait_eq, Map, Scratch, MS, PAGE};
use crate::report::T;

const COPY: u32 = 0;

/// The PCI core's reset methods of `pci` (`reset_method`).
fn reset_methods(pci: &str) -> String {
    std::fs::read_to_string(format!("/sys/bus/pci/devices/{pci}/reset_method"))
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// The reset log lines of debugfs `contexts` added since `before`.
fn new_resets(before: &str, after: &str) -> Vec<String> {
    let old = before.lines().filter(|l| l.starts_with("reset ")).count();
    after
        .lines()
        .filter(|l| l.starts_with("reset "))
        .skip(old)
        .map(str::to_string)
        .collect()
}

pub fn test_flr(t: &mut T, path: &Path) {
    let Some(pci) = pci_name() else {
        t.check("flr: the GPU's PCI function", false, || {
            "nothing bound to /sys/bus/pci/drivers/vgpu".into()
        });
        return;
    };
    let methods = reset_methods(&pci);
    t.check(
        "flr: the PCI core can reset the GPU by FLR",
        methods.split_whitespace().any(|m| m == "flr"),
        || format!("{pci} reset_method: {methods:?} (not behind a PCI Express port?)"),
    );
    let n = open(path);
    let Scratch {
        cmds, data, dva, ..
    } = scratch(&n, 0x200_0000, 1);
    let Ok(map) = Map::new(&n, data, PAGE) else {
        t.check("flr: map the data page", false, String::new);
        return;
    };
    // A job in flight across the reset: it waits for a value the CPU writes
    // once the device is back.
    let wait = cmds.program(0, &[sem_wait_eq(dva, 0x600d)]);
    let signal = cmds.program(
        1,
        &[Packet::SemSignal {
            va: dva + 8,
            value: 0x1d1e,
            op: packet::SEM_SIGNAL_WRITE,
        }],
    );
    let Some(c) = t.ok(
        "flr: a context",
        n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1 << COPY, 0),
    ) else {
        return;
    };
    let before = debugfs("contexts");
    let Some(s) = t.ok(
        "flr: submit a job that waits for the CPU",
        n.submit(c, COPY, &[wait], &[]),
    ) else {
        return;
    };
    std::thread::sleep(Duration::from_millis(100));
    let t0 = Instant::now();
    let reset = std::fs::write(format!("/sys/bus/pci/devices/{pci}/reset"), "1");
    let took = t0.elapsed();
    t.ok("flr: write 1 to the GPU's sysfs reset", reset);
    println!("flr: the function reset took {} ms", took.as_millis());
    map.write(0, 0x600d);
    t.ok(
        "flr: the job in flight ran again and finished",
        n.wait(&[fence(c, COPY, s)], true, 10_000 * MS),
    );
    let q = n.ctx_query(c).unwrap_or_default();
    t.check(
        "flr: its context is innocent",
        q.reset_status == uapi::CTX_RESET_INNOCENT,
        || format!("{q:?}"),
    );
    let s2 = n.submit(c, COPY, &[signal], &[]).unwrap_or(0);
    let r = n.wait(&[fence(c, COPY, s2)], true, 5_000 * MS);
    t.check(
        "flr: new work runs after the reset",
        r.is_ok() && map.read(1) == 0x1d1e,
        || format!("wait {r:?}, value {:#x}", map.read(1)),
    );
    let after = debugfs("contexts");
    let count = |s: &str| summary_field(s, "device_resets").and_then(|v| v.parse::<u64>().ok());
    let log = new_resets(&before, &after);
    t.check(
        "flr: counted as one device reset, logged as a function reset",
        matches!((count(&before), count(&after)), (Some(b), Some(a)) if a == b + 1)
            && log.len() == 1
            && log[0].contains("function")
            && log[0].contains("ok"),
        || {
            format!(
                "device_resets {:?} -> {:?}, new reset log lines {log:?}",
                count(&before),
                count(&after)
            )
        },
    );
    let status = debugfs("status");
    t.check(
        "flr: the device is running",
        status.lines().any(|l| l == "state: running"),
        || format!("debugfs status: {status}"),
    );
    // A second reset with nothing in flight, and an idle file afterwards.
    t.ok(
        "flr: a second function reset",
        std::fs::write(format!("/sys/bus/pci/devices/{pci}/reset"), "1"),
    );
    let s3 = n.submit(c, COPY, &[signal], &[]).unwrap_or(0);
    t.ok(
        "flr: work runs after the second reset",
        n.wait(&[fence(c, COPY, s3)], true, 5_000 * MS),
    );
}
