//! What the fuzzer accepts as an answer to a call it made, and the tally of
//! what it got.
//!
//! A call the fuzzer knows to be well formed may succeed or fail for want
//! of resources or a usable device; one it broke on purpose (a stale
//! handle, a size at the wrong edge, a bad pointer) must fail, with one of
//! the errnos the uAPI documents for bad arguments. Anything else — a bad
//! argument accepted, an errno the uAPI does not name — is reported with
//! the log of the last operations. Calls whose state the fuzzer cannot
//! know (concurrent phases, raw random arguments) accept any answer: there
//! only a crash, a splat or a hang counts.

use std::collections::BTreeMap;

use crate::sys::{ename, Ret};

/// The answers allowed for one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Expect {
    ok: bool,
    errnos: u128,
}

const fn mask(errs: &[i32]) -> u128 {
    let mut m = 0u128;
    let mut i = 0;
    while i < errs.len() {
        m |= 1u128 << errs[i];
        i += 1;
    }
    m
}

/// The device is unusable (wedged, lost, removed).
const STATE: &[i32] = &[libc::EIO, libc::ENODEV];

impl Expect {
    /// Anything goes.
    pub const ANY: Expect = Expect {
        ok: true,
        errnos: u128::MAX,
    };

    /// A well-formed call: success, or a documented want of resources, a
    /// busy device or an unusable one.
    pub const VALID: Expect = Expect {
        ok: true,
        errnos: mask(STATE)
            | mask(&[
                libc::ENOMEM,
                libc::ENOSPC,
                libc::EAGAIN,
                libc::EBUSY,
                libc::ETIMEDOUT,
                libc::EINTR,
            ]),
    };

    /// A call broken on purpose: one of the bad-argument errnos.
    pub const BAD: Expect = Expect {
        ok: false,
        errnos: mask(STATE) | mask(&[libc::EINVAL, libc::ENOENT, libc::EFAULT]),
    };

    /// [`Expect::VALID`] plus `errs`.
    pub const fn valid_or(errs: &[i32]) -> Expect {
        Expect {
            ok: true,
            errnos: Expect::VALID.errnos | mask(errs),
        }
    }

    /// [`Expect::BAD`] plus `errs`.
    pub const fn bad_or(errs: &[i32]) -> Expect {
        Expect {
            ok: false,
            errnos: Expect::BAD.errnos | mask(errs),
        }
    }

    pub fn allows(&self, r: Ret) -> bool {
        match r {
            Ok(()) => self.ok,
            Err(_) if self.errnos == u128::MAX => true,
            Err(e) => (0..128).contains(&e) && self.errnos & (1u128 << e) != 0,
        }
    }
}

/// Counts of calls and answers per operation.
#[derive(Default)]
pub struct Tally {
    /// op → (calls, ok, errno → count)
    ops: BTreeMap<&'static str, (u64, u64, BTreeMap<i32, u64>)>,
    pub calls: u64,
    pub unexpected: u64,
}

impl Tally {
    pub fn add(&mut self, op: &'static str, r: Ret) {
        self.calls += 1;
        let e = self.ops.entry(op).or_default();
        e.0 += 1;
        match r {
            Ok(()) => e.1 += 1,
            Err(errno) => *e.2.entry(errno).or_default() += 1,
        }
    }

    pub fn merge(&mut self, other: &Tally) {
        self.calls += other.calls;
        self.unexpected += other.unexpected;
        for (op, (n, ok, errs)) in &other.ops {
            let e = self.ops.entry(op).or_default();
            e.0 += n;
            e.1 += ok;
            for (errno, c) in errs {
                *e.2.entry(*errno).or_default() += c;
            }
        }
    }

    /// Calls that succeeded.
    pub fn succeeded(&self) -> u64 {
        self.ops.values().map(|v| v.1).sum()
    }

    /// One line per operation: `op calls ok errno:count ...`.
    pub fn lines(&self) -> Vec<String> {
        self.ops
            .iter()
            .map(|(op, (n, ok, errs))| {
                let mut s = format!("  {op:<16} {n:>8} calls {ok:>8} ok");
                for (e, c) in errs {
                    s.push_str(&format!(" {}:{c}", ename(*e)));
                }
                s
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_judged_by_the_kind_of_call() {
        assert!(Expect::VALID.allows(Ok(())));
        assert!(Expect::VALID.allows(Err(libc::ENOMEM)));
        assert!(!Expect::VALID.allows(Err(libc::EINVAL)));
        assert!(!Expect::BAD.allows(Ok(())));
        assert!(Expect::BAD.allows(Err(libc::EFAULT)));
        assert!(!Expect::BAD.allows(Err(libc::EPERM)));
        assert!(Expect::bad_or(&[libc::EEXIST]).allows(Err(libc::EEXIST)));
        assert!(Expect::ANY.allows(Err(libc::EPERM)));
        assert!(!Expect::BAD.allows(Err(200)));
    }

    #[test]
    fn tallies_add_up() {
        let mut t = Tally::default();
        t.add("gem_create", Ok(()));
        t.add("gem_create", Err(libc::EINVAL));
        let mut u = Tally::default();
        u.add("wait", Ok(()));
        u.merge(&t);
        assert_eq!(u.calls, 3);
        assert_eq!(u.succeeded(), 2);
        assert_eq!(u.lines().len(), 2);
        assert!(u.lines()[0].contains("EINVAL:1"));
    }
}
