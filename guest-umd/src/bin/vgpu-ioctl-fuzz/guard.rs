//! Memory the kernel reads and writes on the fuzzer's behalf, fenced by
//! `PROT_NONE` guard pages.
//!
//! Every buffer handed to the kernel — an ioctl's argument struct and the
//! arrays its pointers name — lives in an [`Arena`], never on the fuzzer's
//! stack or heap: each slot of data pages is followed by a guard page, and
//! a buffer is placed so that it ends exactly where the guard begins. A
//! kernel that reads or writes more than the buffer holds faults on the
//! guard (`EFAULT`) instead of scribbling over the fuzzer, so a crash
//! always means the stack under test. The bad pointers the fuzzer makes on
//! purpose are also arena addresses (inside a guard, straddling into one,
//! a read-only slot) or addresses no user mapping can have (null, low
//! pages, kernel half, non-canonical).

use std::ptr;

use crate::rng::Rng;

pub const PAGE: usize = 4096;
/// Data pages per slot: room for the largest array an ioctl takes
/// (`QUERY_STATS`: 64 × 144 bytes) with space to spare.
const SLOT_PAGES: usize = 4;
pub const SLOT_BYTES: usize = SLOT_PAGES * PAGE;

/// Slots of data pages, each followed by a guard page; the last slot is
/// read-only.
pub struct Arena {
    base: *mut u8,
    len: usize,
    slots: usize,
    next: usize,
}

// SAFETY: the arena is plain memory owned by one thread at a time (each
// thread of the fuzzer makes its own); moving it to another thread moves
// that ownership.
unsafe impl Send for Arena {}

/// A kind of bad pointer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BadPtr {
    Null,
    /// Inside a guard page.
    Guard,
    /// Starts `room` bytes before a guard: the array runs into it.
    Straddle,
    /// A read-only slot: readable, writes fault.
    ReadOnly,
    /// Below `mmap_min_addr`.
    Low,
    /// The kernel half of the address space.
    Kernel,
    /// Not canonical.
    NonCanonical,
}

pub const BAD_PTRS: [BadPtr; 7] = [
    BadPtr::Null,
    BadPtr::Guard,
    BadPtr::Straddle,
    BadPtr::ReadOnly,
    BadPtr::Low,
    BadPtr::Kernel,
    BadPtr::NonCanonical,
];

impl Arena {
    /// `slots` data slots (at least 3) and a read-only one, touched once so
    /// that no later access by the kernel or the fuzzer allocates a page
    /// (the fail-nth sweeps count allocations).
    pub fn new(slots: usize) -> Arena {
        let slots = slots.max(3) + 1;
        let len = PAGE + slots * (SLOT_BYTES + PAGE);
        // SAFETY: a fresh anonymous private mapping; no Rust object refers
        // to it yet.
        let base = unsafe {
            libc::mmap(
                ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert!(base != libc::MAP_FAILED, "arena mmap failed");
        let base = base.cast::<u8>();
        // SAFETY: `base..base + len` is the mapping made above.
        unsafe { ptr::write_bytes(base, 0, len) };
        let a = Arena {
            base,
            len,
            slots,
            next: 0,
        };
        for g in 0..=slots {
            a.protect(a.guard(g), PAGE, libc::PROT_NONE);
        }
        a.protect(a.slot_start(slots - 1), SLOT_BYTES, libc::PROT_READ);
        a
    }

    fn protect(&self, at: *mut u8, len: usize, prot: i32) {
        // SAFETY: `at..at + len` lies inside this arena's mapping (callers
        // pass guard pages and slots), which nothing else uses.
        let rc = unsafe { libc::mprotect(at.cast(), len, prot) };
        assert_eq!(rc, 0, "arena mprotect failed");
    }

    /// Guard page `g` (0: before slot 0; `g`: after slot `g - 1`).
    fn guard(&self, g: usize) -> *mut u8 {
        self.base.wrapping_add(g * (SLOT_BYTES + PAGE))
    }

    fn slot_start(&self, s: usize) -> *mut u8 {
        self.guard(s).wrapping_add(PAGE)
    }

    /// One past the last byte of slot `s`: its guard page.
    fn slot_end(&self, s: usize) -> *mut u8 {
        self.guard(s + 1)
    }

    fn take_slot(&mut self) -> usize {
        // The read-only slot is never handed out for writing.
        let s = self.next % (self.slots - 1);
        self.next += 1;
        s
    }

    /// `len` bytes ending exactly at a guard page (`len` ≤ a slot; larger
    /// requests start at the slot's first byte and run into the guard).
    pub fn at_end(&mut self, len: usize) -> *mut u8 {
        let s = self.take_slot();
        self.slot_end(s).wrapping_sub(len.min(SLOT_BYTES))
    }

    /// `bytes` copied to the end of a slot; the address.
    pub fn put(&mut self, bytes: &[u8]) -> *mut u8 {
        let p = self.at_end(bytes.len());
        let n = bytes.len().min(SLOT_BYTES);
        // SAFETY: `p..p + n` is inside a writable slot (at_end).
        unsafe { ptr::copy_nonoverlapping(bytes.as_ptr(), p, n) };
        p
    }

    /// A bad pointer of `kind` for an array of `len` bytes.
    pub fn bad(&mut self, kind: BadPtr, len: usize, rng: &mut Rng) -> u64 {
        match kind {
            BadPtr::Null => 0,
            BadPtr::Guard => {
                let g = rng.below(self.slots as u64 + 1) as usize;
                self.guard(g) as u64 + rng.below(PAGE as u64)
            }
            BadPtr::Straddle => {
                // Room for less than the array: at least one byte short.
                let room = if len <= 1 {
                    0
                } else {
                    rng.below(len.min(SLOT_BYTES) as u64) as usize
                };
                let s = self.take_slot();
                self.slot_end(s) as u64 - room as u64
            }
            BadPtr::ReadOnly => {
                let s = self.slots - 1;
                let room = len.min(SLOT_BYTES);
                self.slot_end(s) as u64 - room as u64
            }
            BadPtr::Low => rng.below(0x1000) & !7,
            BadPtr::Kernel => 0xffff_8880_0000_0000 + (rng.below(1 << 30) & !7),
            BadPtr::NonCanonical => 0x8000_0000_0000_0000 | (rng.next() & 0x7fff_ffff_fff8),
        }
    }

    /// Whether `[p, p + len)` lies inside this arena (guards included).
    #[cfg(test)]
    pub fn contains(&self, p: u64, len: usize) -> bool {
        let b = self.base as u64;
        p >= b && p.saturating_add(len as u64) <= b + self.len as u64
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping `new` made; nothing refers to
        // it once the arena is dropped.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether the kernel can read `p` (a `write(2)` from it to a pipe).
    fn readable(p: *const u8) -> bool {
        let mut fds = [0; 2];
        // SAFETY: a pipe for the probe; closed below.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: the kernel checks the address; it never faults us.
        let n = unsafe { libc::write(fds[1], p.cast(), 1) };
        // SAFETY: the pipe's own descriptors.
        unsafe {
            libc::close(fds[0]);
            libc::close(fds[1]);
        }
        n == 1
    }

    /// Whether the kernel can write `p` (a `read(2)` into it from a pipe).
    fn writable(p: *mut u8) -> bool {
        let mut fds = [0; 2];
        // SAFETY: a pipe for the probe; closed below.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: one byte from a local into the pipe.
        unsafe { libc::write(fds[1], [1u8].as_ptr().cast(), 1) };
        // SAFETY: the kernel checks the address; it never faults us.
        let n = unsafe { libc::read(fds[0], p.cast(), 1) };
        // SAFETY: the pipe's own descriptors.
        unsafe {
            libc::close(fds[0]);
            libc::close(fds[1]);
        }
        n == 1
    }

    #[test]
    fn buffers_end_at_a_guard_page() {
        let mut a = Arena::new(4);
        for len in [1, 8, 144, 4096, SLOT_BYTES] {
            let p = a.at_end(len);
            assert!(writable(p));
            assert!(writable(p.wrapping_add(len - 1)));
            assert!(
                !readable(p.wrapping_add(len)),
                "byte after a {len}-byte buffer"
            );
        }
        let p = a.put(&[7u8; 24]);
        // SAFETY: the 24 bytes just copied.
        assert_eq!(unsafe { *p.add(23) }, 7);
    }

    #[test]
    fn bad_pointers_fault_or_stay_inside_the_arena() {
        let mut a = Arena::new(4);
        let mut r = Rng::new(3);
        for _ in 0..200 {
            for kind in BAD_PTRS {
                let p = a.bad(kind, 144 * 8, &mut r);
                match kind {
                    BadPtr::Guard => {
                        assert!(a.contains(p, 1));
                        assert!(!readable(p as *const u8));
                    }
                    BadPtr::Straddle => {
                        assert!(a.contains(p, 1));
                        assert!(!readable((p + 144 * 8 - 1) as *const u8));
                    }
                    BadPtr::ReadOnly => {
                        assert!(readable(p as *const u8));
                        assert!(!writable(p as *mut u8));
                    }
                    _ => assert!(!readable(p as *const u8), "{kind:?} {p:#x}"),
                }
            }
        }
    }
}
