//! Fuzz target `virtq`: see [`vgpu_fuzz::virtq`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| vgpu_fuzz::virtq::run(data));
