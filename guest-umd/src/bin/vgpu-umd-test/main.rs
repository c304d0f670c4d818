//! Guest end-to-end test of the UMD API: devices, memory and pools, copies,
//! memsets, batching and chaining, events and cross-stream waits, invalid
//! arguments and use after destroy, concurrency, sticky loss on faults and
//! hangs, and launches (when the device runs DISPATCH).
//!
//!   vgpu-umd-test               every section
//!   vgpu-umd-test copy events   only these sections
//!   vgpu-umd-test writer        the command-buffer writer alone (no device)
//!
//! Prints `ok NAME` / `FAIL NAME: why` / `skip NAME: why` per check and a
//! closing `umd-test: N passed, M failed`; exits 1 if anything failed.

mod cmdbuf;
mod copy;
mod invalid;
mod launch;
mod lost;
mod memory;
mod report;
mod stats;
mod stream;

use std::sync::atomic::AtomicU64;

use vgpu_umd::{Buffer, Context, Device};

use cmdbuf::test_writer;
use copy::{test_copy, test_read_paths};
use invalid::test_invalid;
use launch::test_launch;
use lost::{test_fault, test_hang};
use memory::{test_device, test_memory, test_pool_reuse};
use report::T;
use stats::test_stats;
use stream::{test_batching, test_cmdbuf_cap, test_concurrency, test_events};

/// `n` pseudo-random bytes, the same for the same `seed`.
pub fn pattern(n: usize, seed: u32) -> Vec<u8> {
    let mut r = vgpu_hwif::rng::Rng::new(u64::from(seed));
    (0..n).map(|_| r.next_u64() as u8).collect()
}

/// The 64-bit word at byte `off` of host-visible buffer `b`, for the CPU's
/// side of a semaphore.
pub fn host_u64(b: &Buffer, off: u64) -> &AtomicU64 {
    let p = b.host_ptr().expect("host-visible");
    // SAFETY: `off` is 8-byte aligned within the live host-visible buffer,
    // which outlives the returned reference's uses in this test.
    unsafe { &*p.add(off as usize).cast::<AtomicU64>() }
}

fn main() {
    vgpu_umd::exit_quietly_on_closed_pipe();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let want = |s: &str| args.is_empty() || args.iter().any(|a| a == s);
    let mut t = T {
        passed: 0,
        failed: 0,
    };
    if want("writer") {
        test_writer(&mut t);
        if args.iter().all(|a| a == "writer") && !args.is_empty() {
            println!("umd-test: {} passed, {} failed", t.passed, t.failed);
            std::process::exit(i32::from(t.failed > 0));
        }
    }
    if want("device") {
        test_device(&mut t);
    }
    let ctx = match Context::new() {
        Ok(c) => c,
        Err(e) => {
            println!("FAIL context: {e}");
            std::process::exit(1);
        }
    };
    println!("info generation {}", ctx.identity().generation);
    if want("memory") {
        test_memory(&mut t, &ctx);
    }
    if want("copy") {
        test_copy(&mut t, &ctx);
        test_read_paths(&mut t, &Device::open_first().expect("device"));
    }
    if want("batch") {
        test_batching(&mut t, &ctx);
        test_cmdbuf_cap(&mut t, &Device::open_first().expect("device"));
    }
    if want("events") {
        test_events(&mut t, &ctx);
    }
    if want("pool") {
        test_pool_reuse(&mut t, &ctx);
    }
    if want("invalid") {
        test_invalid(&mut t, &ctx);
    }
    if want("concurrency") {
        test_concurrency(&mut t, &ctx);
    }
    if want("launch") {
        test_launch(&mut t);
    }
    if want("fault") {
        test_fault(&mut t);
    }
    if want("hang") {
        test_hang(&mut t);
    }
    if want("stats") {
        test_stats(&mut t);
    }
    println!("umd-test: {} passed, {} failed", t.passed, t.failed);
    std::process::exit(i32::from(t.failed > 0));
}
