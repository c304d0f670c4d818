//! The KVM probe behind `vgpu-kvm-probe`: can this host's KVM run the vgpu
//! guest?
//!
//! `/dev/kvm` can exist and still be unable to boot a normal guest kernel
//! (a paravirtualised KVM such as PVM stops it with an emulation failure).
//! The probe answers in milliseconds instead of booting a guest: it checks
//! the KVM API version and the capabilities QEMU needs, then runs a tiny
//! guest ([`guest`]) through real mode, protected mode, CPUID, XSETBV,
//! XSAVE and XRSTOR under a bounded time ([`watchdog`]), and decides from
//! its exits ([`decide`]) how far it got.
//!
//! Each module uses only the modules of its row (checked by
//! `scripts/deps`), top first:
//!
//! | block | may use |
//! |---|---|
//! | `probe` | `decide`, `guest`, `watchdog` |
//! | `watchdog` | `decide` |
//! | `decide` | `guest` |
//! | `guest` | - |

pub mod decide;
pub mod guest;
pub mod probe;
pub mod watchdog;
