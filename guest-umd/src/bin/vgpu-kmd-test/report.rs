//! The check reporter: one `ok NAME` / `FAIL NAME: why` line per check and
//! the closing `kmd-test: N passed, M failed` with the exit status.

use std::fmt::Display;

use vgpu_umd::kmd::{errno_name, KmdError};

/// Counts the checks and prints each.
#[derive(Default)]
pub struct T {
    passed: u32,
    failed: u32,
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
    pub fn ok<V, E: Display>(&mut self, name: &str, r: Result<V, E>) -> Option<V> {
        match r {
            Ok(v) => {
                self.check(name, true, String::new);
                Some(v)
            }
            Err(e) => {
                self.check(name, false, || e.to_string());
                None
            }
        }
    }

    /// Checks that `r` failed with `want`.
    pub fn err<V>(&mut self, name: &str, r: Result<V, KmdError>, want: i32) {
        match r {
            Ok(_) => self.check(name, false, || format!("succeeded, want {}", errname(want))),
            Err(e) => self.check(name, e.errno == want, || {
                format!(
                    "errno {} ({}), want {}",
                    e.errno,
                    errname(e.errno),
                    errname(want)
                )
            }),
        }
    }

    /// Prints the summary and exits: 0 if every check passed, else 1.
    pub fn finish(&self) -> ! {
        println!("kmd-test: {} passed, {} failed", self.passed, self.failed);
        std::process::exit(i32::from(self.failed != 0));
    }
}

/// `"EINVAL"`, `"?"` for an errno the KMD does not return.
pub fn errname(e: i32) -> &'static str {
    errno_name(e).unwrap_or("?")
}

/// The errno of a failed call; `None` if it succeeded.
pub fn errno<V>(r: &Result<V, KmdError>) -> Option<i32> {
    r.as_ref().err().map(|e| e.errno)
}
