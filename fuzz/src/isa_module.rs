//! `isa_module`: the ISA's instruction decoder and module loader.
//!
//! Input: a module image as `vgpu-as` writes it (docs/isa.md §9), or any
//! bytes. The loader must refuse or accept it without panicking, for the
//! device's check of both generations too (`Module::load`). An accepted
//! module serialises to bytes that load as the same module, and its
//! disassembly assembles to a module with the same kernels (metadata and
//! code; code outside every kernel, which nothing can execute, is not
//! disassembled, and kernels sharing code get a copy each). Every 8-byte word of the
//! input is also decoded for both generations: a word that decodes
//! encodes to a word that decodes to the same instruction.

use vgpu_isa::{assemble, decode, disassemble, encode, Instruction, Kernel, Module};

/// Each kernel as it runs: its metadata (wherever its code starts) and its
/// code.
fn kernels(m: &Module) -> Vec<(Kernel, &[Instruction])> {
    m.kernels()
        .iter()
        .map(|k| {
            let code = &m.code()[k.entry as usize..(k.entry + k.len) as usize];
            (
                Kernel {
                    entry: 0,
                    ..k.clone()
                },
                code,
            )
        })
        .collect()
}

pub fn run(data: &[u8]) {
    for generation in [1, 2] {
        let _ = Module::load(data, generation);
    }
    if let Ok(m) = Module::from_bytes(data) {
        let bytes = m.to_bytes().expect("a loaded module serialises");
        assert_eq!(
            Module::from_bytes(&bytes).as_ref(),
            Ok(&m),
            "bytes round trip"
        );
        let text = disassemble(&m);
        match assemble(&text, m.generation()) {
            Ok(again) => assert_eq!(kernels(&again), kernels(&m), "text round trip:\n{text}"),
            Err(e) => panic!("the disassembly does not assemble: {e}\n{text}"),
        }
    }
    for chunk in data.chunks_exact(8) {
        let word = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
        for generation in [1, 2] {
            if let Ok(inst) = decode(word, generation) {
                let again = encode(&inst).expect("a decoded instruction encodes");
                assert_eq!(decode(again, generation), Ok(inst), "{word:#018x}");
            }
        }
    }
}
