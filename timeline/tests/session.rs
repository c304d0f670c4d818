//! A real session (tests/e2e.sh timeline: `vgpu-samples copy` and `vecadd`
//! in the VM, its device trace and its console with the KMD's and the UMD's
//! traces) merged again: the layers, the clock, every job's chain, the
//! format check; and the same session with the device's clock shifted,
//! which the causal bounds must catch.

use vgpu_timeline::check::check;
use vgpu_timeline::input::{
    between_markers, parse_device, parse_kmd, parse_umd, DevTrace, KmdTrace, UmdTrace,
};
use vgpu_timeline::merge::merge;

fn session() -> (KmdTrace, DevTrace, UmdTrace) {
    traces(
        include_str!("data/session-console.log"),
        include_str!("data/session-device.json"),
    )
}

fn traces(console: &str, device: &str) -> (KmdTrace, DevTrace, UmdTrace) {
    let kmd = between_markers(
        console,
        "=== vgpu-kmd-trace begin ===",
        "=== vgpu-kmd-trace end ===",
    )
    .unwrap();
    let umd = between_markers(
        console,
        "=== vgpu-umd-trace begin ===",
        "=== vgpu-umd-trace end ===",
    )
    .unwrap();
    (
        parse_kmd("kmd", &kmd).unwrap(),
        parse_device("device", device).unwrap(),
        parse_umd("umd", &umd).unwrap(),
    )
}

#[test]
fn a_real_session_merges_into_one_checked_timeline() {
    let (kmd, dev, umd) = session();
    let (doc, s) = merge(&kmd, Some(&dev), Some(&umd)).unwrap();
    let c = s.clock.as_ref().unwrap();
    assert!(c.uncertainty_ns.is_some_and(|u| u < 200_000.0), "{c:?}");
    assert_eq!(c.conflict_ns, None);
    assert_eq!(s.chains.len(), 4);
    assert_eq!((s.complete(), s.ordered()), (4, 4));
    // Both programs' submits are found: each chain starts in the UMD.
    assert!(
        s.chains.iter().all(|c| c.points[0].step == 0),
        "{:?}",
        s.chains
    );
    assert_eq!(s.flows, 4);
    let r = check(&doc.to_string()).unwrap();
    assert!(
        r.errors.is_empty(),
        "{:?}",
        &r.errors[..r.errors.len().min(5)]
    );
    let names: Vec<&str> = r.processes.values().map(|p| p.0.as_str()).collect();
    assert_eq!(
        names
            .iter()
            .filter(|n| n.starts_with("UMD vgpu-samples"))
            .count(),
        2,
        "{names:?}"
    );
    assert!(names.iter().any(|n| n.starts_with("vgpu.ko")), "{names:?}");
    assert!(
        names.iter().any(|n| n.starts_with("vgpu device")),
        "{names:?}"
    );
    assert!(r.processes.values().all(|p| p.1 > 0), "{:?}", r.processes);
}

#[test]
fn a_device_clock_off_by_5_ms_contradicts_the_causal_pairs() {
    let (kmd, mut dev, umd) = session();
    for e in &mut dev.events {
        e.ts += 5_000_000;
    }
    let (doc, s) = merge(&kmd, Some(&dev), Some(&umd)).unwrap();
    let c = s.clock.as_ref().unwrap();
    assert!(c.conflict_ns.is_some_and(|x| x > 1_000_000.0), "{c:?}");
    // Jobs whose device steps now come before their doorbells get no
    // arrow, and the file still passes the check.
    assert!(s.ordered() < s.complete(), "{} ordered", s.ordered());
    assert_eq!(s.flows, s.ordered());
    assert!(check(&doc.to_string()).unwrap().errors.is_empty());
}

#[test]
fn without_the_device_trace_the_drivers_still_merge() {
    let (kmd, _, umd) = session();
    let (doc, s) = merge(&kmd, None, Some(&umd)).unwrap();
    assert!(s.clock.is_none());
    assert_eq!(s.complete(), 0);
    assert!(check(&doc.to_string()).unwrap().errors.is_empty());
}

/// Another run of the same case, in which the KMD's clock-sync burst of
/// `TIME_QUERY` commands, tens of microseconds apart, lay closer together
/// than the first clock's error: matching each command to the nearest
/// device command of its name paired one with its neighbour's, a false
/// bound 31 us past the others. A command is now matched only to a device
/// command within its send and reply.
#[test]
fn a_burst_of_same_named_commands_gives_no_false_bound() {
    let (kmd, dev, umd) = traces(
        include_str!("data/burst-console.log"),
        include_str!("data/burst-device.json"),
    );
    let (doc, s) = merge(&kmd, Some(&dev), Some(&umd)).unwrap();
    let c = s.clock.as_ref().unwrap();
    assert_eq!(c.conflict_ns, None, "{c:?}");
    assert_eq!((s.complete(), s.ordered()), (4, 4));
    assert!(check(&doc.to_string()).unwrap().errors.is_empty());
}
