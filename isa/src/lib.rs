//! The vgpu SIMT instruction set: typed instructions, binary encoding,
//! module container and validator, assembler, disassembler, and the
//! interpreter that is the device's compute unit.
//!
//! The reference is `docs/isa.md`.

// Lane loops index several per-lane arrays at once; iterators obscure them.
#![allow(clippy::needless_range_loop)]

pub mod asm;
pub mod bounds;
pub mod disasm;
pub mod encode;
pub mod exec;
pub mod grid;
pub mod inst;
#[cfg(feature = "jit")]
pub mod jit;
pub mod math;
pub mod mem;
pub mod module;
mod regflow;

pub use asm::{assemble, AsmError};
pub use disasm::{disassemble, disassemble_instruction};
pub use encode::{decode, encode, InstError};
pub use exec::{
    run_workgroup, Fault, FaultKind, Launch, LaunchError, Limits, Outcome, Stats, Trap,
    WorkgroupExec, ISSUE_WIDTH,
};
#[cfg(feature = "jit")]
pub use grid::run_grid_jit;
pub use grid::{run_grid, GridOutcome, GridReport};
pub use inst::*;
pub use mem::{
    Access, GlobalMemory, LaneFault, MappedPage, MemFault, MemFaultReason, PagedMemory,
    SparseMemory,
};
pub use module::{ArgInfo, ArgKind, Kernel, Module, ModuleError};
