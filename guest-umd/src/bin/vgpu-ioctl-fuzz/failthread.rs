//! One thread's allocation-failure counter, `/proc/thread-self/fail-nth`
//! (CONFIG_FAULT_INJECTION): written N, the N-th fault-injection point the
//! thread passes from then on fails (a slab allocation with failslab). Used
//! by the ioctl fuzzer's sweeps (vgpu-ioctl-fuzz, which includes this file)
//! and by vgpu-kmd-test's sections that drive the KMD's error paths.

use std::os::fd::RawFd;

/// This thread's fail-nth counter.
pub struct FailNth(RawFd);

impl FailNth {
    /// Opens this thread's counter.
    pub fn open() -> Result<FailNth, String> {
        // SAFETY: a NUL-terminated path.
        let fd = unsafe {
            libc::open(
                c"/proc/thread-self/fail-nth".as_ptr(),
                libc::O_RDWR | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(
                "no /proc/thread-self/fail-nth: the kernel lacks CONFIG_FAULT_INJECTION".into(),
            );
        }
        Ok(FailNth(fd))
    }

    /// The N-th injection point this thread passes from now on fails.
    /// (Formatted on the stack: nothing of ours allocates while armed.)
    pub fn arm(&self, n: u32) {
        let mut buf = [0u8; 12];
        let mut i = buf.len();
        let mut v = n;
        loop {
            i -= 1;
            buf[i] = b'0' + (v % 10) as u8;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        let s = &buf[i..];
        // SAFETY: writes from a live buffer to our own fd.
        let w = unsafe { libc::pwrite(self.0, s.as_ptr().cast(), s.len(), 0) };
        assert_eq!(w, s.len() as isize, "fail-nth write");
    }

    /// Disarms; whether a failure was injected (the counter reached 0).
    /// Reading the counter is itself a user copy: a counter of 1 makes
    /// that copy fail (EFAULT), which means nothing was injected before.
    pub fn disarm(&self) -> bool {
        let mut buf = [0u8; 16];
        // SAFETY: reads into a local buffer from our own fd.
        let n = unsafe { libc::pread(self.0, buf.as_mut_ptr().cast(), buf.len(), 0) };
        let left: u32 = if n < 0 {
            1
        } else {
            std::str::from_utf8(&buf[..n as usize])
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(1)
        };
        for _ in 0..4 {
            // SAFETY: writes "0" from a static buffer to our own fd.
            let w = unsafe { libc::pwrite(self.0, b"0".as_ptr().cast(), 1, 0) };
            if w == 1 {
                break;
            }
        }
        left == 0
    }
}

/// Makes failslab count sleeping allocations too (`GFP_KERNEL`, which it
/// skips by default) and report nothing per injected failure (nor the
/// other points that count for fail-nth).
///
/// # Errors
///
/// The knob that could not be written (a kernel without
/// CONFIG_FAULT_INJECTION_DEBUG_FS, or debugfs not mounted).
pub fn count_sleeping_slab_allocations() -> Result<(), String> {
    for (k, v) in [("ignore-gfp-wait", "N"), ("verbose", "0")] {
        let path = format!("/sys/kernel/debug/failslab/{k}");
        std::fs::write(&path, v).map_err(|e| format!("{path}: {e}"))?;
    }
    // The other points that count for fail-nth: quiet too, or each failure
    // they inject dumps a stack that a splat check takes for a bug (the
    // debug kernel's page-allocation and user-copy points; the driver's
    // own, absent before vgpu.ko is loaded).
    for d in [
        "fail_page_alloc",
        "fail_usercopy",
        "vgpu_fail/bo_pages",
        "vgpu_fail/pt_alloc",
    ] {
        let _ = std::fs::write(format!("/sys/kernel/debug/{d}/verbose"), "0");
    }
    Ok(())
}
