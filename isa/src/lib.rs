//! The vgpu SIMT instruction set: typed instructions, binary encoding,
//! module container and validator, assembler, disassembler, the
//! interpreter that is the device's compute unit and its JIT.
//!
//! The reference is `docs/isa.md`.
//!
//! # Blocks
//!
//! Each module uses only the modules of its row (and, through them,
//! nothing above itself): the import graph has no cycle. From the top:
//!
//! | block | may use |
//! |-------|---------|
//! | grid | exec, jit, mem, module |
//! | jit | exec, inst, math, mem, module, regflow |
//! | exec | inst, math, mem, module, regflow |
//! | regflow | asm, inst |
//! | asm | encode, inst, module |
//! | disasm | inst, module |
//! | module | encode, inst |
//! | bounds | inst, mem |
//! | mem | inst |
//! | encode | inst |
//! | math | - |
//! | inst | - |
//!
//! * `inst`: the typed instructions, registers and operands; `math`: the
//!   transcendental functions both engines share bit for bit.
//! * `encode`: the binary encoding of an instruction; `mem`: global
//!   memory (the `GlobalMemory` trait, paged memories, direct pages, and
//!   `SparseMemory`, the in-process one, in `mem/sparse.rs`); `bounds`:
//!   buffer-exact bounds over a memory.
//! * `module`: the module container, its loader and validator;
//!   `disasm` and `asm`: text to and from modules (`regflow`'s tests
//!   write their kernels with `asm`).
//! * `regflow`: which registers a kernel reads before writing them, and
//!   which are live where: for the interpreter's reset and the JIT's
//!   write-back.
//! * `exec`: the interpreter, the compute unit (`WorkgroupExec`): warp
//!   state, the scheduler, the instruction loop. Native code plugs in
//!   through its `NativeCode` trait; it does not know the JIT.
//! * `jit`: the Cranelift backend, which implements `NativeCode` and
//!   runs on the interpreter's state (`WorkgroupExec::set_jit`).
//! * `grid`: a whole launch over compute-unit threads, on either engine.

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
