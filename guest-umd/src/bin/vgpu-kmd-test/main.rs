//! Guest test of the KMD's ioctls: happy paths, a table of bad arguments per
//! ioctl, use after close/destroy, and the GPU page tables the KMD builds
//! (checked through debugfs `vms`, which walks the real entries).
//!
//!   vgpu-kmd-test            every section
//!   vgpu-kmd-test gem vm     only these sections
//!   vgpu-kmd-test remap      (only when named) rebind a VA to another BO
//!                            after the GPU used it: every page must read
//!                            the new BO (the unbind invalidated the TLB)
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

use concurrent::*;
use events::*;
use export::*;
use gem::*;
use hang::*;
use leaks::*;
use remap::*;
use report::*;
use stats::*;
use submit::*;
use unbind::*;
use vm::*;

use vgpu_umd::Device;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let want = |s: &str| args.is_empty() || args.iter().any(|a| a == s);
    let dev = match Device::open_first() {
        Ok(d) => d,
        Err(e) => {
            println!("FAIL open: {e}");
            std::process::exit(1);
        }
    };
    let path = dev.path().to_path_buf();
    let mut t = T {
        passed: 0,
        failed: 0,
    };
    if want("gem") {
        test_gem(&mut t, &path);
    }
    if want("vm") {
        test_vm(&mut t, &path);
    }
    if want("submit") {
        test_submit(&mut t, &path);
    }
    if args.iter().any(|a| a == "inflight") {
        test_hang_inflight(&mut t, &path);
    }
    if args.iter().any(|a| a == "watchdog") {
        test_watchdog(&mut t, &path);
    }
    if args.iter().any(|a| a == "events") {
        test_injected_events(&mut t, &path);
    }
    if args.iter().any(|a| a == "wedged") {
        test_wedged(&mut t, &path);
    }
    if want("export") {
        test_fence_export(&mut t, &path);
    }
    if args.iter().any(|a| a == "unbind") {
        drop(dev);
        test_unbind(&mut t, &path);
        println!("kmd-test: {} passed, {} failed", t.passed, t.failed);
        std::process::exit(i32::from(t.failed != 0));
    }
    if args.iter().any(|a| a == "remap") {
        test_remap(&mut t, &path);
    }
    if want("stats") {
        test_stats(&mut t, &path);
    }
    if want("concurrent") {
        test_concurrent(&mut t, &path);
    }
    if want("leaks") {
        test_leaks(&mut t, &path, 1000);
    }
    println!("kmd-test: {} passed, {} failed", t.passed, t.failed);
    std::process::exit(i32::from(t.failed != 0));
}
