//! Fuzz target `isa_exec`: see [`vgpu_fuzz::isa_exec`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| vgpu_fuzz::isa_exec::run(data));
