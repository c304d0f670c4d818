//! The one path every ioctl of the library takes.
//!
//! [`ioctl`] issues the system call, retries it while a signal interrupts
//! it (`EINTR`), records it as a span of the trace with its result, and
//! turns a refusal into a [`KmdError`]: the ioctl's name and the errno. Every
//! other module reaches the kernel through it: the KMD's ioctls
//! ([`crate::kmd`]), the DRM core's (`DRM_IOCTL_VERSION`, sync objects,
//! PRIME) and the sync_file's (`SYNC_IOC_FILE_INFO`).

use std::os::fd::RawFd;

use crate::trace;

/// An ioctl the kernel refused.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[error("{call}: {}", errno_text(*errno))]
pub struct KmdError {
    /// The ioctl.
    pub call: &'static str,
    /// The errno it returned.
    pub errno: i32,
}

impl KmdError {
    /// The refusal as an OS error (its errno).
    pub fn os_error(&self) -> std::io::Error {
        std::io::Error::from_raw_os_error(self.errno)
    }
}

/// `"EINVAL"`: the symbolic name of the errnos the KMD returns, `None` for
/// others.
pub fn errno_name(e: i32) -> Option<&'static str> {
    Some(match e {
        libc::EINVAL => "EINVAL",
        libc::ENOENT => "ENOENT",
        libc::EIO => "EIO",
        libc::ENODEV => "ENODEV",
        libc::ENOMEM => "ENOMEM",
        libc::ENOSPC => "ENOSPC",
        libc::EEXIST => "EEXIST",
        libc::EAGAIN => "EAGAIN",
        libc::EBUSY => "EBUSY",
        libc::ETIME => "ETIME",
        libc::ETIMEDOUT => "ETIMEDOUT",
        libc::EFAULT => "EFAULT",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::EPROTO => "EPROTO",
        libc::EMFILE => "EMFILE",
        libc::ECANCELED => "ECANCELED",
        libc::ENODATA => "ENODATA",
        _ => return None,
    })
}

/// `"EINVAL (Invalid argument)"`.
pub fn errno_text(e: i32) -> String {
    format!(
        "{} ({})",
        errno_name(e).unwrap_or("errno"),
        std::io::Error::from_raw_os_error(e)
    )
}

/// The errno of the last failed system call (`EIO` if there is none).
pub fn last_errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// Issues ioctl `request` (named `name` in the trace and in errors) on
/// `fd` with `arg`, retried while it is interrupted (`EINTR`); any other
/// failure is the caller's to handle, with its errno.
///
/// # Safety
///
/// - `request` takes exactly one `A`: the size its number encodes is
///   `size_of::<A>()` and `A` is a `repr(C)` struct of integers (and user
///   pointers), so any value the kernel writes into it is a valid `A`;
/// - every pointer inside `arg` that the kernel writes through is valid for
///   those writes, or an address the kernel cannot write (then it answers
///   `EFAULT`). Pointers the ioctl only reads may hold any value.
pub unsafe fn ioctl<A>(
    fd: RawFd,
    request: u32,
    name: &'static str,
    arg: &mut A,
) -> Result<(), KmdError> {
    let mut span = trace::span("ioctl", name);
    loop {
        // SAFETY: `request` takes exactly one `A` and `arg` is a valid,
        // exclusively borrowed `A` for the call; the pointers inside it are
        // valid or unwritable (this function's contract).
        let rc = unsafe { libc::ioctl(fd, request as libc::c_ulong, std::ptr::from_mut(arg)) };
        if rc == 0 {
            trace::set(&mut span, "ret", 0);
            return Ok(());
        }
        let errno = last_errno();
        if errno == libc::EINTR {
            continue;
        }
        trace::set(&mut span, "ret", -errno);
        return Err(KmdError { call: name, errno });
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;

    use super::*;

    #[test]
    fn errno_names() {
        assert_eq!(errno_name(libc::EINVAL), Some("EINVAL"));
        assert_eq!(errno_name(libc::ECANCELED), Some("ECANCELED"));
        assert_eq!(errno_name(libc::EPERM), None);
        assert!(errno_text(libc::ENOENT).starts_with("ENOENT ("));
        assert!(errno_text(libc::EPERM).starts_with("errno ("));
    }

    #[test]
    fn a_refused_ioctl_names_itself_and_its_errno() {
        // Any ioctl on /dev/null is refused (ENOTTY), whatever the request.
        let f = std::fs::File::open("/dev/null").unwrap();
        let mut arg = 0u64;
        // SAFETY: the request takes a u64 (the kernel refuses it before
        // reading anything), and `arg` carries no pointer.
        let e = unsafe { ioctl(f.as_raw_fd(), 0xc008_6400, "PROBE", &mut arg) }.unwrap_err();
        assert_eq!(e.call, "PROBE");
        assert_eq!(e.errno, libc::ENOTTY);
        assert_eq!(e.os_error().raw_os_error(), Some(libc::ENOTTY));
    }
}
