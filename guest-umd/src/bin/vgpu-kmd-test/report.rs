//! The check reporter: `ok NAME` / `FAIL NAME: why` lines and the counts.

#![allow(unused_imports)]
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::PathBuf;

use vgpu_umd::uapi::{self, param};
use vgpu_umd::Device;

use crate::debugfs::*;
use crate::node::*;

pub struct T {
    pub passed: u32,
    pub failed: u32,
}

impl T {
    pub fn check(&mut self, name: &str, ok: bool, why: impl FnOnce() -> String) {
        if ok {
            self.passed += 1;
            println!("ok {name}");
        } else {
            self.failed += 1;
            println!("FAIL {name}: {}", why());
        }
    }

    /// Checks that `r` is `Ok`.
    pub fn ok<V>(&mut self, name: &str, r: Result<V, i32>) -> Option<V> {
        match r {
            Ok(v) => {
                self.check(name, true, String::new);
                Some(v)
            }
            Err(e) => {
                self.check(name, false, || format!("errno {} ({})", e, errname(e)));
                None
            }
        }
    }

    /// Checks that `r` failed with `want`.
    pub fn err<V>(&mut self, name: &str, r: Result<V, i32>, want: i32) {
        match r {
            Ok(_) => self.check(name, false, || format!("succeeded, want {}", errname(want))),
            Err(e) => self.check(name, e == want, || {
                format!("errno {} ({}), want {}", e, errname(e), errname(want))
            }),
        }
    }
}

pub fn errname(e: i32) -> &'static str {
    match e {
        libc::EINVAL => "EINVAL",
        libc::ENOENT => "ENOENT",
        libc::EEXIST => "EEXIST",
        libc::ENOSPC => "ENOSPC",
        libc::ENOMEM => "ENOMEM",
        libc::EFAULT => "EFAULT",
        libc::EIO => "EIO",
        libc::EBUSY => "EBUSY",
        libc::EAGAIN => "EAGAIN",
        libc::ETIME => "ETIME",
        libc::ENODEV => "ENODEV",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::ETIMEDOUT => "ETIMEDOUT",
        _ => "?",
    }
}
