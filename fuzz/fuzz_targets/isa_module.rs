//! Fuzz target `isa_module`: see [`vgpu_fuzz::isa_module`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| vgpu_fuzz::isa_module::run(data));
