//! Guest test of the KMD's ioctls: happy paths, a table of bad arguments per
//! ioctl, use after close/destroy, the GPU page tables the KMD builds
//! (checked through debugfs `vms`, which walks the real entries), and
//! submission, fences, faults, hangs and resets on the device.
//!
//!   vgpu-kmd-test            the default sections: gem vm submit export
//!                            stats concurrent leaks
//!   vgpu-kmd-test gem vm     only these sections (in the order below,
//!                            whatever the order of the arguments)
//!
//! Sections that run only when named, because they need module parameters
//! or injected faults (see tests/e2e.sh) or leave the device changed:
//!   inflight, watchdog       hangs in flight and nobody waiting
//!   events                   injected fence-event faults
//!   wedged                   the bottom of the reset ladder
//!   unbind                   unbinds and rebinds the driver; the sections
//!                            after it do not run
//!   remap                    rebind a VA to another BO after the GPU used
//!                            it: every page must read the new BO (the
//!                            unbind invalidated the TLB)
//!
//! Prints `ok NAME` / `FAIL NAME: why` per check and a closing
//! `kmd-test: N passed, M failed`; exits 1 if anything failed.

mod concurrent;
mod debugfs;
mod events;
mod export;
mod gem;
mod hang;
mod leaks;
mod node;
mod remap;
mod report;
mod stats;
mod submit;
mod unbind;
mod vm;

use std::path::Path;

use vgpu_umd::Device;

use report::T;

/// A section: its checks on the device whose render node is at the path.
type Section = fn(&mut T, &Path);

/// Every section in the order it runs: its name, whether it runs when no
/// section is named, the test.
const SECTIONS: &[(&str, bool, Section)] = &[
    ("gem", true, gem::test_gem),
    ("vm", true, vm::test_vm),
    ("submit", true, submit::test_submit),
    ("inflight", false, hang::test_hang_inflight),
    ("watchdog", false, hang::test_watchdog),
    ("events", false, events::test_injected_events),
    ("wedged", false, hang::test_wedged),
    ("export", true, export::test_fence_export),
    ("unbind", false, unbind::test_unbind),
    ("remap", false, remap::test_remap),
    ("stats", true, stats::test_stats),
    ("concurrent", true, concurrent::test_concurrent),
    ("leaks", true, |t, path| leaks::test_leaks(t, path, 1000)),
];

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dev = match Device::open_first() {
        Ok(d) => d,
        Err(e) => {
            println!("FAIL open: {e}");
            std::process::exit(1);
        }
    };
    let path = dev.path().to_path_buf();
    let mut dev = Some(dev);
    let mut t = T::default();
    for &(name, by_default, test) in SECTIONS {
        let run = args.iter().any(|a| a == name) || (by_default && args.is_empty());
        if !run {
            continue;
        }
        if name == "unbind" {
            // No file of this process may hold the device while the driver
            // unbinds, and nothing runs on it afterwards.
            drop(dev.take());
            test(&mut t, &path);
            t.finish();
        }
        test(&mut t, &path);
    }
    t.finish();
}
