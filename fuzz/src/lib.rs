//! Fuzz targets for the parts of vgpu that read hostile input: the
//! control-command decoder and control processor, the packet decoder and
//! command processor, the MMU walker and TLB, the ISA decoder, module
//! loader and interpreter, and the virtqueue chain parsing.
//!
//! Each module has a `run(data)` that libFuzzer calls through
//! `fuzz_targets/<name>.rs` (`cargo fuzz run <name>`, or `scripts/fuzz`).
//! A target turns the bytes into an input for the code under test, runs
//! it, and checks what must always hold: no panic (with overflow checks
//! on) and the target's own invariants (round trips, a reference walk).
//! Seeds come from `seed-corpus`; see docs/hardening.md.

pub mod control;
pub mod isa_exec;
pub mod isa_module;
pub mod mmu;
pub mod packets;
pub mod virtq;

/// Little-endian words from `bytes` (a partial last word is dropped).
pub fn words(bytes: &[u8]) -> Vec<u32> {
    bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}
