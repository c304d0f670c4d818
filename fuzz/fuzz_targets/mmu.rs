//! Fuzz target `mmu`: see [`vgpu_fuzz::mmu`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| vgpu_fuzz::mmu::run(data));
