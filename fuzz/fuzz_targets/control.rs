//! Fuzz target `control`: see [`vgpu_fuzz::control`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| vgpu_fuzz::control::run(data));
