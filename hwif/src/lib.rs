//! The vgpu hardware interface: the single source of truth for everything that
//! crosses the boundary between the guest driver and the device.
//!
//! This crate is `no_std` and has no dependencies because the guest kernel
//! module compiles the very same source files: `guest-kmd/vgpu.rs` includes
//! each module below with `#[path = "../hwif/src/<module>.rs"]`. Modules refer
//! to each other only through `super::<module>`, so they work in both crates.
//!
//! # Block order
//!
//! Each module (block) uses, in code, only the modules its row names, and
//! the order has no cycle (checked by `scripts/deps`, in `scripts/test`).
//! Documentation links may point anywhere. Top first:
//!
//! | block | may use |
//! |---|---|
//! | `layout` | `pod`, `event`, `proto`, `sanitize` |
//! | `proto` | `pod`, `limits`, `reply`, `sanitize` |
//! | `reply` | `pod`, `limits`, `sanitize`, `vram` |
//! | `sanitize` | `pod` |
//! | `event` | `pod` |
//! | `capture` | `pod`, `mmu` |
//! | `firmware` | `pod` |
//! | `describe` | `mmu`, `packet` |
//! | `vram` | `mmu` |
//! | `packet` | - |
//! | `mmu` | - |
//! | `limits` | - |
//! | `coredump` | - |
//! | `rng` | - |
//! | `pod` | - |
//!
//! # Blocks
//!
//! * [`pod`]: plain-old-data structs with a checked, padding-free layout and
//!   a layout table used to prove that the KMD and userspace agree.
//! * [`limits`]: the transport's queues and ids, the protocol version, the
//!   device's limits.
//! * [`proto`]: the control queue: one table declares every command (opcode,
//!   fields, rules, reply); status codes and replies come from [`reply`],
//!   limits from [`limits`], both re-exported.
//! * [`reply`]: reply status, reply structs, the ring status and doorbell
//!   blocks the device keeps in guest memory.
//! * [`event`]: event records posted on the event queue.
//! * [`mmu`]: the GPU page-table format, access types, fault reasons.
//! * [`vram`]: device memory: its layout, the CPU-visible aperture, what a
//!   device reset does to it.
//! * [`packet`]: ring and command-buffer packets, per generation.
//! * [`sanitize`]: the driver sanitizer's checks, reports and commands.
//! * [`describe`]: packets, engine errors and fault reasons as text, for
//!   messages (the same words on every side).
//! * [`layout`]: the table of every shared struct and its fingerprint.
//! * [`capture`]: the device's capture of a failing context (the file
//!   `CAPTURE_READ` returns).
//! * [`coredump`]: the devcoredump the KMD publishes around a capture.
//! * [`firmware`]: the firmware image the driver loads at boot: its
//!   header, sections and checks.
#![no_std]

pub mod capture;
pub mod coredump;
pub mod describe;
pub mod event;
pub mod firmware;
pub mod layout;
pub mod limits;
pub mod mmu;
pub mod packet;
pub mod pod;
pub mod proto;
pub mod reply;
pub mod rng;
pub mod sanitize;
pub mod vram;
