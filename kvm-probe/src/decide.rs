//! The probe's decisions, as pure functions of what KVM answered: the API
//! version, the capabilities, and each exit of the probe guest's vCPU.
//! Nothing here touches /dev/kvm, so every path is tested directly.

use serde::Serialize;

use crate::guest::{code, PROGRESS_PORT};

/// The only KVM API version there has ever been (`KVM_GET_API_VERSION`).
pub const KVM_API_VERSION: i32 = 12;

/// `KVM_INTERNAL_ERROR_EMULATION`: KVM met an instruction it could not
/// emulate.
pub const SUBERROR_EMULATION: u32 = 1;

/// Why KVM can or cannot be used; the stable, machine-readable part of a
/// [`Verdict`] (`kind` in `--json`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// The probe guest ran to the end.
    Usable,
    /// `/dev/kvm` does not exist.
    NoDevice,
    /// `/dev/kvm` exists but cannot be opened read-write.
    NoPermission,
    /// `KVM_GET_API_VERSION` is not 12.
    ApiVersion,
    /// Capabilities QEMU needs are missing.
    MissingCapabilities,
    /// An ioctl setting up the VM or vCPU failed.
    Setup,
    /// `KVM_EXIT_INTERNAL_ERROR` with the emulation suberror.
    EmulationFailure,
    /// `KVM_EXIT_INTERNAL_ERROR`, another suberror.
    InternalError,
    /// `KVM_EXIT_FAIL_ENTRY`: the hardware refused to enter the guest.
    FailEntry,
    /// `KVM_EXIT_SHUTDOWN`: the guest took an exception it could not
    /// handle (a triple fault).
    Shutdown,
    /// No result before the timeout.
    Timeout,
    /// `KVM_RUN` itself failed.
    RunFailed,
    /// An exit the probe guest never causes.
    UnexpectedExit,
    /// The guest ran but XRSTOR did not restore what XSAVE saved.
    WrongResult,
}

/// The probe's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Verdict {
    /// Whether the vgpu guest can be run under this KVM.
    pub usable: bool,
    /// Why, in one category.
    pub kind: Kind,
    /// Why, in words (one line).
    pub reason: String,
}

impl Verdict {
    /// A "not usable" verdict.
    pub fn no(kind: Kind, reason: impl Into<String>) -> Self {
        Verdict {
            usable: false,
            kind,
            reason: reason.into(),
        }
    }

    fn yes(reason: impl Into<String>) -> Self {
        Verdict {
            usable: true,
            kind: Kind::Usable,
            reason: reason.into(),
        }
    }
}

/// How far the guest got: the last progress code it wrote (0: none yet).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Progress(pub u8);

impl Progress {
    /// What the guest was doing after this progress code, i.e. where a
    /// failure now happened.
    pub fn next_step(self) -> &'static str {
        match self.0 {
            0 => "its first instruction (real mode)",
            code::REAL_MODE => "the switch to protected mode (LGDT, CR0.PE, far jump)",
            code::PROTECTED => "CPUID",
            code::CPUID => "setting CR4.OSXSAVE",
            code::OSXSAVE => "XSETBV",
            code::XSETBV => "XSAVE",
            code::XSAVE => "XRSTOR",
            code::XRSTOR => "the check of the restored state",
            code::SPINNING => "an endless loop (the spin guest)",
            _ => "its end",
        }
    }
}

/// One exit of the vCPU, reduced to what the decision needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exit {
    /// `OUT` to `port` with `data`.
    IoOut { port: u16, data: Vec<u8> },
    /// `IN` from `port`.
    IoIn { port: u16 },
    /// An access to guest-physical memory that is not RAM.
    Mmio { addr: u64, write: bool },
    /// `HLT`.
    Hlt,
    /// `KVM_EXIT_SHUTDOWN`.
    Shutdown,
    /// `KVM_EXIT_FAIL_ENTRY` with the hardware's reason.
    FailEntry { reason: u64 },
    /// `KVM_EXIT_INTERNAL_ERROR` with its suberror and data words.
    InternalError { suberror: u32, data: Vec<u64> },
    /// `KVM_RUN` returned `EINTR` (a signal, e.g. the timeout's) or
    /// `KVM_EXIT_INTR`.
    Interrupted,
    /// `KVM_RUN` failed with this errno.
    RunError { errno: i32 },
    /// Anything else, by name.
    Other(String),
}

/// What to do after an exit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Run the vCPU again; the guest is at this progress code.
    Continue(Progress),
    /// The answer.
    Done(Verdict),
}

/// Checks `KVM_GET_API_VERSION`.
pub fn check_api_version(v: i32) -> Result<(), Verdict> {
    if v == KVM_API_VERSION {
        Ok(())
    } else {
        Err(Verdict::no(
            Kind::ApiVersion,
            format!("KVM API version {v}, QEMU needs {KVM_API_VERSION}"),
        ))
    }
}

/// Checks capabilities: `caps` pairs each needed capability's name with
/// whether `KVM_CHECK_EXTENSION` reported it.
pub fn check_capabilities(caps: &[(&str, bool)]) -> Result<(), Verdict> {
    let missing: Vec<&str> = caps.iter().filter(|c| !c.1).map(|c| c.0).collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(Verdict::no(
            Kind::MissingCapabilities,
            format!("KVM lacks {}", missing.join(", ")),
        ))
    }
}

/// The verdict for an `open("/dev/kvm")` that failed with `errno`.
pub fn open_failed(path: &str, errno: i32) -> Verdict {
    match errno {
        libc::ENOENT | libc::ENODEV | libc::ENXIO => {
            Verdict::no(Kind::NoDevice, format!("no {path} (KVM not loaded)"))
        }
        libc::EACCES | libc::EPERM => Verdict::no(
            Kind::NoPermission,
            format!("no permission to open {path} read-write (join its group, usually kvm)"),
        ),
        e => Verdict::no(
            Kind::NoDevice,
            format!("cannot open {path}: {}", errno_name(e)),
        ),
    }
}

/// The verdict for a setup ioctl `what` that failed with `errno`.
pub fn setup_failed(what: &str, errno: i32) -> Verdict {
    Verdict::no(Kind::Setup, format!("{what} failed: {}", errno_name(errno)))
}

fn errno_name(e: i32) -> String {
    std::io::Error::from_raw_os_error(e).to_string()
}

/// Decides what one exit means. `at` is the guest's progress so far;
/// `timed_out` says the deadline has passed (the timeout's signal
/// interrupts `KVM_RUN`, which then returns `EINTR`).
pub fn on_exit(at: Progress, exit: &Exit, timed_out: bool) -> Step {
    let step = at.next_step();
    let v = match exit {
        Exit::IoOut { port, data } if *port == PROGRESS_PORT && data.len() == 1 => {
            return progress_code(at, data[0]);
        }
        Exit::Interrupted | Exit::RunError { errno: libc::EINTR } if !timed_out => {
            // A stray signal: carry on.
            return Step::Continue(at);
        }
        Exit::Interrupted | Exit::RunError { errno: libc::EINTR } => Verdict::no(
            Kind::Timeout,
            format!("the probe guest did not finish in time (stuck at {step})"),
        ),
        Exit::InternalError { suberror, .. } if *suberror == SUBERROR_EMULATION => Verdict::no(
            Kind::EmulationFailure,
            format!("KVM emulation failure at {step} in the probe guest"),
        ),
        Exit::InternalError { suberror, data } => Verdict::no(
            Kind::InternalError,
            format!(
                "KVM internal error (suberror {suberror}{}) at {step} in the probe guest",
                data.first()
                    .map_or(String::new(), |d| format!(", data {d:#x}"))
            ),
        ),
        Exit::FailEntry { reason } => Verdict::no(
            Kind::FailEntry,
            format!("KVM could not enter the probe guest (hardware reason {reason:#x}) at {step}"),
        ),
        Exit::Shutdown => Verdict::no(
            Kind::Shutdown,
            format!("the probe guest took a fault (triple fault, shutdown) at {step}"),
        ),
        Exit::RunError { errno } => Verdict::no(
            Kind::RunFailed,
            format!("KVM_RUN failed at {step}: {}", errno_name(*errno)),
        ),
        Exit::Hlt => Verdict::no(
            Kind::UnexpectedExit,
            format!("the probe guest halted early, at {step}"),
        ),
        Exit::IoOut { port, .. } | Exit::IoIn { port } => Verdict::no(
            Kind::UnexpectedExit,
            format!("the probe guest accessed port {port:#x} at {step}"),
        ),
        Exit::Mmio { addr, write } => Verdict::no(
            Kind::UnexpectedExit,
            format!(
                "the probe guest {} unmapped address {addr:#x} at {step}",
                if *write { "wrote" } else { "read" }
            ),
        ),
        Exit::Other(name) => Verdict::no(
            Kind::UnexpectedExit,
            format!("unexpected exit {name} at {step} in the probe guest"),
        ),
    };
    Step::Done(v)
}

fn progress_code(at: Progress, c: u8) -> Step {
    match c {
        code::DONE => Step::Done(Verdict::yes(
            "the probe guest ran real mode, protected mode, CPUID, XSETBV, XSAVE and XRSTOR",
        )),
        code::DONE_NO_XSAVE => Step::Done(Verdict::yes(
            "the probe guest ran real mode, protected mode and CPUID (no XSAVE in CPUID)",
        )),
        code::RESTORE_MISMATCH => Step::Done(Verdict::no(
            Kind::WrongResult,
            "XRSTOR in the probe guest did not restore the state XSAVE saved",
        )),
        c if c > at.0 && c <= code::XRSTOR => Step::Continue(Progress(c)),
        code::SPINNING if at.0 == code::REAL_MODE => Step::Continue(Progress(c)),
        c => Step::Done(Verdict::no(
            Kind::UnexpectedExit,
            format!(
                "the probe guest wrote progress code {c:#x} after {:#x}",
                at.0
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn out(c: u8) -> Exit {
        Exit::IoOut {
            port: PROGRESS_PORT,
            data: vec![c],
        }
    }

    fn done(s: Step) -> Verdict {
        match s {
            Step::Done(v) => v,
            Step::Continue(p) => panic!("expected a verdict, got Continue({p:?})"),
        }
    }

    /// Feeds exits in order as the probe loop does; returns the verdict.
    fn run(exits: &[Exit]) -> Verdict {
        let mut at = Progress::default();
        for e in exits {
            match on_exit(at, e, false) {
                Step::Continue(p) => at = p,
                Step::Done(v) => return v,
            }
        }
        panic!("no verdict after {exits:?}");
    }

    #[test]
    fn api_version_must_be_12() {
        assert!(check_api_version(12).is_ok());
        let v = check_api_version(11).unwrap_err();
        assert_eq!((v.usable, v.kind), (false, Kind::ApiVersion));
        assert_eq!(v.reason, "KVM API version 11, QEMU needs 12");
    }

    #[test]
    fn missing_capabilities_are_named() {
        assert!(check_capabilities(&[("A", true), ("B", true)]).is_ok());
        let v =
            check_capabilities(&[("A", true), ("IOEVENTFD", false), ("IRQFD", false)]).unwrap_err();
        assert_eq!(v.kind, Kind::MissingCapabilities);
        assert_eq!(v.reason, "KVM lacks IOEVENTFD, IRQFD");
    }

    #[test]
    fn open_errors() {
        assert_eq!(open_failed("/dev/kvm", libc::ENOENT).kind, Kind::NoDevice);
        let v = open_failed("/dev/kvm", libc::EACCES);
        assert_eq!(v.kind, Kind::NoPermission);
        assert!(v.reason.contains("group"));
    }

    #[test]
    fn the_full_walk_is_usable() {
        let mut exits: Vec<Exit> = (1..=code::XRSTOR).map(out).collect();
        exits.push(out(code::DONE));
        let v = run(&exits);
        assert!(v.usable);
        assert_eq!(v.kind, Kind::Usable);
        // Without XSAVE in CPUID the guest stops after CPUID: still usable.
        let v = run(&[
            out(code::REAL_MODE),
            out(code::PROTECTED),
            out(code::CPUID),
            out(code::DONE_NO_XSAVE),
        ]);
        assert!(v.usable);
        assert!(v.reason.contains("no XSAVE"));
    }

    #[test]
    fn an_emulation_failure_names_the_instruction() {
        let v = run(&[
            out(code::REAL_MODE),
            out(code::PROTECTED),
            out(code::CPUID),
            out(code::OSXSAVE),
            Exit::InternalError {
                suberror: SUBERROR_EMULATION,
                data: vec![],
            },
        ]);
        assert!(!v.usable);
        assert_eq!(v.kind, Kind::EmulationFailure);
        assert_eq!(
            v.reason,
            "KVM emulation failure at XSETBV in the probe guest"
        );
        let v = done(on_exit(
            Progress::default(),
            &Exit::InternalError {
                suberror: SUBERROR_EMULATION,
                data: vec![],
            },
            false,
        ));
        assert!(
            v.reason.contains("first instruction (real mode)"),
            "{}",
            v.reason
        );
    }

    #[test]
    fn other_internal_errors_fail_entry_and_shutdown() {
        let v = done(on_exit(
            Progress(code::XSETBV),
            &Exit::InternalError {
                suberror: 3,
                data: vec![0x80000b0e],
            },
            false,
        ));
        assert_eq!(v.kind, Kind::InternalError);
        assert_eq!(
            v.reason,
            "KVM internal error (suberror 3, data 0x80000b0e) at XSAVE in the probe guest"
        );
        let v = done(on_exit(
            Progress(code::REAL_MODE),
            &Exit::FailEntry { reason: 0x21 },
            false,
        ));
        assert_eq!(v.kind, Kind::FailEntry);
        assert!(v.reason.contains("hardware reason 0x21"));
        assert!(v.reason.contains("protected mode"));
        let v = done(on_exit(Progress(code::XSAVE), &Exit::Shutdown, false));
        assert_eq!(v.kind, Kind::Shutdown);
        assert!(v.reason.ends_with("at XRSTOR"), "{}", v.reason);
    }

    #[test]
    fn a_signal_before_the_deadline_continues_after_it_times_out() {
        let at = Progress(code::PROTECTED);
        assert_eq!(on_exit(at, &Exit::Interrupted, false), Step::Continue(at));
        assert_eq!(
            on_exit(at, &Exit::RunError { errno: libc::EINTR }, false),
            Step::Continue(at)
        );
        let v = done(on_exit(at, &Exit::Interrupted, true));
        assert_eq!(v.kind, Kind::Timeout);
        assert!(v.reason.contains("stuck at CPUID"), "{}", v.reason);
        let v = done(on_exit(at, &Exit::RunError { errno: libc::EINTR }, true));
        assert_eq!(v.kind, Kind::Timeout);
        // The spin guest announces its loop; its timeout says so.
        let spin = on_exit(Progress(code::REAL_MODE), &out(code::SPINNING), false);
        assert_eq!(spin, Step::Continue(Progress(code::SPINNING)));
        let v = done(on_exit(Progress(code::SPINNING), &Exit::Interrupted, true));
        assert!(
            v.reason.contains("stuck at an endless loop"),
            "{}",
            v.reason
        );
        // Another errno is a failed KVM_RUN, whatever the time.
        let v = done(on_exit(
            at,
            &Exit::RunError {
                errno: libc::EFAULT,
            },
            false,
        ));
        assert_eq!(v.kind, Kind::RunFailed);
    }

    #[test]
    fn progress_must_move_forward_and_other_exits_are_unexpected() {
        let v = done(on_exit(Progress(code::XSAVE), &out(code::CPUID), false));
        assert_eq!(v.kind, Kind::UnexpectedExit);
        let v = done(on_exit(
            Progress(code::XRSTOR),
            &out(code::RESTORE_MISMATCH),
            false,
        ));
        assert_eq!((v.usable, v.kind), (false, Kind::WrongResult));
        for e in [
            Exit::Hlt,
            Exit::IoIn { port: 0x80 },
            Exit::IoOut {
                port: 0x3f8,
                data: vec![b'x'],
            },
            Exit::Mmio {
                addr: 0xfee0_0000,
                write: true,
            },
            Exit::Other("Hypercall".into()),
        ] {
            let v = done(on_exit(Progress(code::CPUID), &e, false));
            assert_eq!((v.usable, v.kind), (false, Kind::UnexpectedExit), "{e:?}");
        }
    }
}
