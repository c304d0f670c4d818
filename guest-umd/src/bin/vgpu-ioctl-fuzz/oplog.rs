//! The log of the last operations, kept in static memory so that it can be
//! printed from anywhere: on a result the fuzzer did not expect, when the
//! stall watchdog fires (an ioctl that never returns), and from the handler
//! of a fatal signal (only `write(2)` there: no allocation, no lock).

use std::cell::UnsafeCell;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// Entries kept.
const ENTRIES: usize = 256;
/// Bytes per entry (longer lines are cut).
const LINE: usize = 200;

struct Ring {
    lines: [UnsafeCell<[u8; LINE]>; ENTRIES],
    lens: [UnsafeCell<u8>; ENTRIES],
}

// SAFETY: entries are plain bytes; a writer owns the entry whose index it
// took from `NEXT` until it wraps around ENTRIES operations later. A reader
// (the dump) may see an entry being rewritten, which only garbles that one
// diagnostic line, never memory outside the ring.
unsafe impl Sync for Ring {}

static RING: Ring = Ring {
    lines: [const { UnsafeCell::new([0; LINE]) }; ENTRIES],
    lens: [const { UnsafeCell::new(0) }; ENTRIES],
};
/// Operations logged so far (the next entry's number).
static NEXT: AtomicU64 = AtomicU64::new(0);
/// Operations completed: what the stall watchdog watches.
pub static DONE: AtomicU64 = AtomicU64::new(0);
/// Print every entry as it is logged (`--verbose`).
pub static ECHO: AtomicBool = AtomicBool::new(false);

/// Logs one line (`#N tT op args -> result`).
pub fn log(thread: u32, line: &str) {
    let n = NEXT.fetch_add(1, Relaxed);
    let mut s = String::with_capacity(LINE);
    let _ = write!(s, "#{n} t{thread} {line}");
    if ECHO.load(Relaxed) {
        println!("{s}");
    }
    let i = (n % ENTRIES as u64) as usize;
    let b = s.as_bytes();
    let len = b.len().min(LINE);
    // SAFETY: entry `i` belongs to this call (see `Ring`); the copy stays
    // inside its LINE bytes.
    unsafe {
        (&mut *RING.lines[i].get())[..len].copy_from_slice(&b[..len]);
        *RING.lens[i].get() = len as u8;
    }
}

/// Writes `b` to stderr with `write(2)` only.
fn raw_write(b: &[u8]) {
    let mut off = 0;
    while off < b.len() {
        // SAFETY: writes from a live slice; fd 2 is stderr.
        let n = unsafe { libc::write(2, b[off..].as_ptr().cast(), b.len() - off) };
        if n <= 0 {
            return;
        }
        off += n as usize;
    }
}

/// Prints the log, oldest entry first (async-signal-safe).
pub fn dump(why: &[u8]) {
    raw_write(b"ioctl-fuzz: ");
    raw_write(why);
    raw_write(b"; the last operations:\n");
    let end = NEXT.load(Relaxed);
    let start = end.saturating_sub(ENTRIES as u64);
    for n in start..end {
        let i = (n % ENTRIES as u64) as usize;
        // SAFETY: reading an entry another thread may be rewriting garbles
        // only this line (see `Ring`); the slice stays inside the entry.
        let line = unsafe {
            let len = usize::from(*RING.lens[i].get());
            &(&*RING.lines[i].get())[..len]
        };
        raw_write(b"  ");
        raw_write(line);
        raw_write(b"\n");
    }
}

extern "C" fn on_fatal_signal(sig: libc::c_int) {
    let why: &[u8] = match sig {
        libc::SIGSEGV => b"SIGSEGV in the fuzzer",
        libc::SIGBUS => b"SIGBUS in the fuzzer",
        libc::SIGILL => b"SIGILL in the fuzzer",
        libc::SIGFPE => b"SIGFPE in the fuzzer",
        _ => b"SIGABRT in the fuzzer",
    };
    dump(why);
    // SAFETY: restores the default action and re-raises, so the process
    // ends with the signal's status.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
}

/// Installs the fatal-signal handlers.
pub fn install_signal_handlers() {
    for sig in [
        libc::SIGSEGV,
        libc::SIGBUS,
        libc::SIGILL,
        libc::SIGFPE,
        libc::SIGABRT,
    ] {
        // SAFETY: the handler only calls async-signal-safe functions
        // (write, signal, raise).
        unsafe { libc::signal(sig, on_fatal_signal as *const () as libc::sighandler_t) };
    }
}

/// Starts the stall watchdog: no operation completed for `limit` means an
/// ioctl that does not return (or a fuzzer bug): the log, then exit 3.
pub fn start_watchdog(limit: Duration) {
    std::thread::spawn(move || {
        let mut last = DONE.load(Relaxed);
        let mut since = std::time::Instant::now();
        loop {
            std::thread::sleep(Duration::from_millis(500));
            let now = DONE.load(Relaxed);
            if now != last {
                last = now;
                since = std::time::Instant::now();
            } else if since.elapsed() >= limit {
                let why = format!("no operation completed for {} s", limit.as_secs());
                dump(why.as_bytes());
                std::process::exit(3);
            }
        }
    });
}
