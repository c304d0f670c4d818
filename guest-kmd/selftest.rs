// SPDX-License-Identifier: GPL-2.0

//! TEST ONLY: deliberate bugs that prove the debug kernel's checkers report
//! what they are meant to.
//!
//! Compiled only into a module built against a kernel with KASAN (the debug
//! guest, `images/build --debug`); never part of a normal build. debugfs
//! `selftest_bug` (root only) takes one word and commits that bug once:
//!
//! * `uaf`: reads a `kmalloc`'d buffer after freeing it (KASAN:
//!   slab-use-after-free);
//! * `oob`: reads one byte past a 16-byte allocation (KASAN:
//!   slab-out-of-bounds);
//! * `leak`: allocates 512 bytes 32 times and drops every pointer
//!   (kmemleak: unreferenced objects, after two scans; kmemleak scans whole
//!   task stacks, and the last pointers may still sit in a stale frame of
//!   the writer's, so one object alone can go unreported);
//! * `lockdep`: takes two mutexes in one order, then in the other (lockdep:
//!   possible circular locking dependency; lockdep then turns itself off
//!   for the rest of the boot, and so does any KASAN or UBSAN report, as
//!   they make lock state unreliable: this goes first);
//! * `odebug`: frees an armed hrtimer (debug objects: free active object;
//!   its fixup cancels the timer, so it never fires on freed memory).
//!
//! UBSAN is proved by the kernel's own `test_ubsan.ko` (Rust code has no
//! UBSAN instrumentation; its integer overflows panic instead).

use kernel::{
    bindings,
    new_mutex,
    prelude::*,
    sync::Mutex, //
};

/// Commits the bug named by `word`.
///
/// # Errors
///
/// `EINVAL` for an unknown word, `ENOMEM`.
pub(crate) fn commit(word: &[u8]) -> Result {
    match word {
        b"uaf" => use_after_free(),
        b"oob" => out_of_bounds(),
        b"leak" => leak(),
        b"lockdep" => lock_inversion(),
        b"odebug" => free_active_timer(),
        _ => Err(EINVAL),
    }
}

fn use_after_free() -> Result {
    let b = KBox::new([0x5au8; 128], GFP_KERNEL)?;
    let p = KBox::into_raw(b);
    // SAFETY: `p` came from `KBox::into_raw` just above and is freed once.
    drop(unsafe { KBox::from_raw(p) });
    // SAFETY: none: this read of freed memory is the bug KASAN must report.
    let v = unsafe { core::ptr::read_volatile(p.cast::<u8>().add(8)) };
    pr_info!("vgpu selftest: read {:#x} after free\n", v);
    Ok(())
}

fn out_of_bounds() -> Result {
    let b = KBox::new([0x5au8; 16], GFP_KERNEL)?;
    let p = b.as_ptr();
    // SAFETY: none: this read one byte past the allocation is the bug
    // KASAN must report.
    let v = unsafe { core::ptr::read_volatile(p.add(16)) };
    pr_info!("vgpu selftest: read {:#x} past the end\n", v);
    Ok(())
}

fn leak() -> Result {
    for _ in 0..LEAKS {
        // Every pointer is lost on purpose.
        let _ = KBox::into_raw(KBox::new([0xa5u8; 512], GFP_KERNEL)?);
    }
    pr_info!("vgpu selftest: leaked {} objects of 512 bytes\n", LEAKS);
    Ok(())
}

/// Objects `leak` loses.
const LEAKS: usize = 32;

fn lock_inversion() -> Result {
    let a = KBox::pin_init(new_mutex!(0u32), GFP_KERNEL)?;
    let b = KBox::pin_init(new_mutex!(0u32), GFP_KERNEL)?;
    let lock_both = |first: &Mutex<u32>, second: &Mutex<u32>| {
        let g1 = first.lock();
        let g2 = second.lock();
        drop(g2);
        drop(g1);
    };
    lock_both(&a, &b);
    // The other order: a deadlock waiting for a second thread.
    lock_both(&b, &a);
    pr_info!("vgpu selftest: locked A then B, then B then A\n");
    Ok(())
}

unsafe extern "C" fn never_fires(_t: *mut bindings::hrtimer) -> bindings::hrtimer_restart {
    bindings::hrtimer_restart_HRTIMER_NORESTART
}

fn free_active_timer() -> Result {
    let t = KBox::new(
        // SAFETY: an all-zero `hrtimer` is what `hrtimer_setup` starts from.
        unsafe { core::mem::zeroed::<bindings::hrtimer>() },
        GFP_KERNEL,
    )?;
    let p = KBox::into_raw(t);
    // SAFETY: `p` is a live, exclusively owned `hrtimer`; armed for 60 s,
    // so it cannot fire before the free below (whose debug-objects fixup
    // cancels it).
    unsafe {
        bindings::hrtimer_setup(
            p,
            Some(never_fires),
            bindings::CLOCK_MONOTONIC as i32,
            bindings::hrtimer_mode_HRTIMER_MODE_REL,
        );
        bindings::hrtimer_start_range_ns(
            p,
            60_000_000_000,
            0,
            bindings::hrtimer_mode_HRTIMER_MODE_REL,
        );
    }
    // SAFETY: none: freeing an armed timer is the bug debug objects must
    // report (the memory itself is a valid `KBox` allocation).
    drop(unsafe { KBox::from_raw(p) });
    pr_info!("vgpu selftest: freed an armed hrtimer\n");
    Ok(())
}
