//! The vgpu user-mode driver: the library guest programs use to program the
//! GPU through the KMD's render node (see `docs/umd.md`).
//!
//! * [`Device`]: enumeration ([`devices`]), identity and properties.
//! * [`Context`]: an address space with memory pools ([`Buffer`]), the
//!   command-buffer pool and the sticky lost state ([`LostReason`]).
//! * [`Stream`]: ordered work (copies, memsets, launches), batched into
//!   command buffers; [`Event`]: markers, timing and cross-stream waits;
//!   [`Timeline`]: timeline sync objects shared across streams, processes
//!   and the host (with [`Buffer::export_fd`] / [`Context::import_buffer`]
//!   for the buffers they order).
//! * [`Module`] / [`Kernel`] / [`Arg`]: compute modules and launches.
//! * [`capi`]: the C ABI of `include/vgpu.h`.
//!
//! Blocks, from the top down (each uses only the blocks its row names,
//! and no two files import each other through a cycle): the C ABI
//! ([`capi`]); the objects applications hold ([`module`], [`stream`] — a
//! folder: the stream, submission, transfers, reads, events —, [`sync`],
//! [`context`], [`device`]); the library's errors ([`error`]); the
//! machinery under them (command buffers [`cmdbuf`], user-mode queues
//! [`uq`], fence waits [`fence`], host mappings [`hostmap`], memory pools
//! [`memory`]); the typed KMD calls ([`kmd`]) over the one ioctl path
//! ([`ioctl`]: retry, trace, errno); and the leaves: the uAPI mirror
//! ([`uapi`]), tunables ([`config`]), spans ([`trace`]), status samples
//! ([`stats`]), devcoredump decoding ([`coredump`]).
//!
//! | block | may use |
//! |---|---|
//! | `capi` | `context`, `device`, `error`, `memory`, `module`, `stream`, `sync` |
//! | `module` | `context`, `error`, `memory`, `stream` |
//! | `stream` | `cmdbuf`, `config`, `context`, `error`, `fence`, `hostmap`, `kmd`, `memory`, `sync`, `trace`, `uapi`, `uq` |
//! | `sync` | `context`, `error`, `ioctl`, `kmd`, `uapi` |
//! | `context` | `cmdbuf`, `config`, `device`, `error`, `fence`, `kmd`, `memory`, `uapi`, `uq` |
//! | `device` | `error`, `ioctl`, `stats`, `uapi` |
//! | `coredump` | `cmdbuf` |
//! | `error` | `cmdbuf`, `config`, `ioctl`, `memory`, `uapi` |
//! | `cmdbuf` | `config`, `fence`, `kmd`, `memory`, `uapi` |
//! | `uq` | `config`, `fence`, `kmd`, `memory`, `uapi` |
//! | `fence` | `config`, `kmd`, `memory`, `trace`, `uapi` |
//! | `hostmap` | `kmd` |
//! | `memory` | `kmd`, `uapi` |
//! | `kmd` | `ioctl`, `uapi` |
//! | `ioctl` | `trace` |
//! | `stats` | `uapi` |
//! | `config` | - |
//! | `trace` | - |
//! | `uapi` | - |

#![deny(clippy::undocumented_unsafe_blocks)]

pub mod capi;
pub mod cmdbuf;
pub mod config;
pub mod context;
pub mod coredump;
pub mod device;
pub mod error;
pub mod fence;
pub mod hostmap;
pub mod ioctl;
pub mod kmd;
pub mod memory;
pub mod module;
pub mod stats;
pub mod stream;
pub mod sync;
pub mod trace;
pub mod uapi;
pub mod uq;

pub use config::{Config, ReadPath, SubmitPath};
pub use context::{sanitizer_line, Buffer, Context, MemKind, Placement};
pub use device::{
    devices, driver_name, fmt_firmware, fmt_page_sizes, fmt_protocol, Device, Identity, Pong,
    DRIVER_NAME,
};
pub use error::{Error, ErrorPlace, LaunchError, LostReason, Result};
pub use module::{Arg, Kernel, Module};
pub use stats::Stats;
pub use stream::{Event, Priority, Stream, ENGINE_COMPUTE, ENGINE_COPY};
pub use sync::Timeline;

/// Makes a closed standard output end the calling tool quietly.
///
/// The Rust runtime ignores `SIGPIPE`, so a write to a pipe whose reader
/// is gone (`vgpu-smi | head -3`) fails and `println!` panics. Restoring
/// the default action makes the kernel end the process at that write
/// instead, silently, as it ends other Unix tools. For tools that write
/// only to their standard streams, files and the render node: call it
/// first thing in `main`. Not for a program that writes to sockets or
/// pipes of its own, which would then die when a peer goes away.
pub fn exit_quietly_on_closed_pipe() {
    // SAFETY: `signal` with `SIG_DFL` installs no handler, so no code runs
    // in signal context; it only changes the process's disposition of
    // SIGPIPE back to the default, which no Rust code relies on (the
    // runtime ignores SIGPIPE only so that such writes return EPIPE).
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}
