//! Fuzz target `packets`: see [`vgpu_fuzz::packets`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| vgpu_fuzz::packets::run(data));
