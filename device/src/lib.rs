//! The vgpu device: a hardware-faithful virtual GPU served to QEMU as a
//! vhost-user backend (`-device vhost-user-gpu-pci`).
//!
//! Layers, from the inside out:
//!
//! * [`core`] — the device itself, transport-free: control processor, event
//!   unit, counters, clock.
//! * [`virtq`] — moves commands, replies and event records between guest
//!   memory and the core over split virtqueues.
//! * [`backend`] — the vhost-user backend (features, config space, queue
//!   kicks); [`vring`] — its vrings, which remember a broken ring until the
//!   frontend resets it.
//! * [`daemon`] — the control-plane event loop: listens on the socket,
//!   serves one frontend, the control socket and the stop signals.
//! * [`config`] — per-instance configuration.
//! * [`inject_ctl`] — the fault-injection control socket.
//! * [`pf`], [`pf_ctl`] — a device partitioned into virtual functions
//!   (their partitions, the host's control requests).
//! * [`testkit`] — driver-side helpers (page tables, packet writers) for
//!   tests, benchmarks and tools.
//!
//! # Blocks
//!
//! Dependencies point one way: each block uses only the blocks of its row
//! (checked by `scripts/deps device/src/lib.rs`; the core's own blocks have
//! their rule in [`core`]). Top first:
//!
//! | block | may use |
//! |---|---|
//! | `daemon` | `backend`, `config`, `core`, `inject_ctl`, `pf`, `pf_ctl` |
//! | `pf_ctl` | `config`, `core`, `inject_ctl`, `pf` |
//! | `pf` | `config`, `core` |
//! | `testkit` | `config`, `core` |
//! | `backend` | `config`, `core`, `virtq`, `vring` |
//! | `inject_ctl` | `core` |
//! | `virtq` | `core` |
//! | `vring` | - |
//! | `core` | `config` |
//! | `config` | - |

pub mod backend;
pub mod config;
pub mod core;
pub mod daemon;
pub mod inject_ctl;
pub mod pf;
pub mod pf_ctl;
pub mod testkit;
pub mod virtq;
pub mod vring;
