// SPDX-License-Identifier: GPL-2.0

//! Error codes the kernel crate does not name.

use kernel::{bindings, error::Error};

/// `EPROTO`: the device broke the protocol (malformed reply or ring).
pub(crate) fn eproto() -> Error {
    Error::from_errno(-(bindings::EPROTO as i32))
}

/// `ETIME`: a fence wait timed out.
pub(crate) fn etime() -> Error {
    Error::from_errno(-(bindings::ETIME as i32))
}

/// `EOPNOTSUPP`: the device does not implement the command.
pub(crate) fn eopnotsupp() -> Error {
    Error::from_errno(-(bindings::EOPNOTSUPP as i32))
}

/// `ENODATA`: nothing to return (no such sanitizer report).
pub(crate) fn enodata() -> Error {
    Error::from_errno(-(bindings::ENODATA as i32))
}
