//! System calls of the fuzzer: ioctls whose argument struct lives in the
//! guarded [`Arena`], render-node files, errno names.

use std::os::fd::RawFd;
use std::path::Path;

use vgpu_umd::kmd::{errno_name, IoctlArg};

use crate::guard::Arena;

/// An ioctl's result: `Ok` or the errno.
pub type Ret = Result<(), i32>;

fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// Issues `A`'s ioctl on `fd` with a copy of `arg` placed at the end of an
/// arena slot (so the kernel's copy of exactly `size_of::<A>()` bytes
/// either way can reach nothing else), then copies the struct back.
pub fn ioctl<A: IoctlArg + Copy>(fd: RawFd, arg: &mut A, arena: &mut Arena) -> Ret {
    let size = size_of::<A>();
    let p = arena.at_end(size).cast::<A>();
    // SAFETY: `p..p + size` is writable arena memory (at_end); `A` is a
    // plain integer struct (IoctlArg's contract), copied byte for byte.
    unsafe { p.write_unaligned(*arg) };
    // SAFETY: the kernel reads and writes `size` bytes at `p`, all arena
    // memory; pointers inside `arg` are the caller's choice and name arena
    // memory or addresses no mapping has (see guard.rs).
    let rc = unsafe { libc::ioctl(fd, A::REQUEST as libc::c_ulong, p) };
    let r = if rc == 0 { Ok(()) } else { Err(errno()) };
    // SAFETY: as above; any bit pattern the kernel left is a valid `A`.
    *arg = unsafe { p.read_unaligned() };
    r
}

/// Issues ioctl number `req` with an argument of `bytes` placed at the end
/// of an arena slot (the size `req` encodes need not match: the DRM core
/// copies what the number says, and the slot ends at a guard page).
pub fn ioctl_bytes(fd: RawFd, req: u32, bytes: &mut [u8], arena: &mut Arena) -> Ret {
    let p = arena.put(bytes);
    // SAFETY: `p` is arena memory; the kernel copies at most what `req`
    // encodes (≤ 16 KiB, a slot) from and to it, and faults on the guard
    // page after it.
    let rc = unsafe { libc::ioctl(fd, req as libc::c_ulong, p) };
    let r = if rc == 0 { Ok(()) } else { Err(errno()) };
    let n = bytes.len().min(crate::guard::SLOT_BYTES);
    // SAFETY: reads back the `n` arena bytes written above.
    unsafe { std::ptr::copy_nonoverlapping(p, bytes.as_mut_ptr(), n) };
    r
}

/// Issues ioctl `req` with the argument pointer `arg` as it is (a bad
/// pointer made by the arena: guard, null, kernel, ...).
pub fn ioctl_ptr(fd: RawFd, req: u32, arg: u64) -> Ret {
    // SAFETY: `arg` is an arena address or one no user mapping has; the
    // kernel checks it and answers EFAULT rather than touching our memory.
    let rc = unsafe { libc::ioctl(fd, req as libc::c_ulong, arg as usize) };
    if rc == 0 {
        Ok(())
    } else {
        Err(errno())
    }
}

/// Opens the render node (read/write, close-on-exec).
pub fn open_node(path: &Path) -> Result<RawFd, i32> {
    use std::os::unix::ffi::OsStrExt;
    let mut c = path.as_os_str().as_bytes().to_vec();
    c.push(0);
    // SAFETY: `c` is a NUL-terminated path.
    let fd = unsafe { libc::open(c.as_ptr().cast(), libc::O_RDWR | libc::O_CLOEXEC) };
    if fd < 0 {
        Err(errno())
    } else {
        Ok(fd)
    }
}

/// Closes `fd` (its result is not interesting: a file closed by another
/// thread gives EBADF).
/// A new private anonymous read-write mapping of `len` bytes (faulted in
/// when `populate`); its address, or `None` if mmap failed. The caller
/// unmaps it.
pub fn anon(len: usize, populate: bool) -> Option<usize> {
    let flags =
        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | if populate { libc::MAP_POPULATE } else { 0 };
    // SAFETY: a new mapping at an address the kernel picks; nothing else
    // refers to it.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            flags,
            -1,
            0,
        )
    };
    (p != libc::MAP_FAILED).then_some(p as usize)
}

pub fn close(fd: RawFd) {
    // SAFETY: the caller owns `fd` (or knowingly races another thread's
    // close of the same number: concurrent-close phases).
    unsafe { libc::close(fd) };
}

/// `"EINVAL"`, or the number.
pub fn ename(e: i32) -> String {
    match e {
        libc::ENOTTY => "ENOTTY".into(),
        libc::EBADF => "EBADF".into(),
        libc::EINTR => "EINTR".into(),
        libc::EPERM => "EPERM".into(),
        libc::EACCES => "EACCES".into(),
        libc::E2BIG => "E2BIG".into(),
        libc::ENXIO => "ENXIO".into(),
        libc::EOVERFLOW => "EOVERFLOW".into(),
        libc::ERANGE => "ERANGE".into(),
        _ => errno_name(e).map_or_else(|| format!("errno{e}"), str::to_string),
    }
}

/// `"ok"` or the errno's name.
pub fn rname(r: Ret) -> String {
    match r {
        Ok(()) => "ok".into(),
        Err(e) => ename(e),
    }
}
