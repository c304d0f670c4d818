//! Packet opcode sets: which opcodes each generation decodes, their names,
//! and the bitmaps of the `PACKETS` section (bit `op` of word `op / 32`).

use vgpu_hwif::packet::{opcode_name, payload_words, OPCODES, OP_NOP};

use crate::error::Error;

/// The hardware generations (one in-tree source each).
pub const GENERATIONS: [u32; 2] = [1, 2];

/// An opcode bitmap of the `PACKETS` section.
pub type Bitmap = [u32; 8];

/// Whether a command processor of `generation` decodes `opcode`. Both
/// generations decode every opcode of the interface: they differ in the
/// header's encoding and in alignment, not in the opcodes
/// (`vgpu_hwif::packet::Packet::decode` takes no generation).
pub fn decodes(generation: u32, opcode: u8) -> bool {
    GENERATIONS.contains(&generation) && (opcode == OP_NOP || payload_words(opcode).is_some())
}

/// The opcodes `generation` decodes, in numeric order.
pub fn decoded(generation: u32) -> impl Iterator<Item = u8> {
    OPCODES
        .into_iter()
        .filter(move |&op| decodes(generation, op))
}

/// The bitmap with bit `opcode` set.
pub fn set(map: &mut Bitmap, opcode: u8) {
    map[usize::from(opcode / 32)] |= 1 << (opcode % 32);
}

/// Whether bit `opcode` is set.
pub fn has(map: &Bitmap, opcode: u8) -> bool {
    map[usize::from(opcode / 32)] & (1 << (opcode % 32)) != 0
}

/// The bitmap of every opcode `generation` decodes.
pub fn all(generation: u32) -> Bitmap {
    let mut map = [0; 8];
    decoded(generation).for_each(|op| set(&mut map, op));
    map
}

/// The opcode a name stands for (`COPY_2D`, any case), if `generation`
/// decodes it.
///
/// # Errors
///
/// [`Error::Opcode`] for a name that is no opcode, or one the generation
/// does not decode.
pub fn opcode(generation: u32, name: &str) -> Result<u8, Error> {
    decoded(generation)
        .find(|&op| opcode_name(op).eq_ignore_ascii_case(name))
        .ok_or_else(|| Error::Opcode {
            generation,
            name: name.to_owned(),
        })
}

/// The bitmap of the opcodes named.
///
/// # Errors
///
/// As [`opcode`].
pub fn bitmap<S: AsRef<str>>(generation: u32, names: &[S]) -> Result<Bitmap, Error> {
    let mut map = [0; 8];
    for n in names {
        set(&mut map, opcode(generation, n.as_ref())?);
    }
    Ok(map)
}

/// A bitmap for people: `all (NOP, INDIRECT, …)` when it is every opcode
/// `generation` decodes, else the names of its opcodes (an opcode the
/// interface does not define as `0x42`), or `none`.
pub fn text(generation: u32, map: &Bitmap) -> String {
    let names: Vec<String> = (0..=u8::MAX)
        .filter(|&op| has(map, op))
        .map(|op| match opcode_name(op) {
            "UNKNOWN" => format!("{op:#04x}"),
            name => name.to_owned(),
        })
        .collect();
    if names.is_empty() {
        return "none".to_owned();
    }
    let list = names.join(" ");
    if *map == all(generation) {
        format!("all ({list})")
    } else {
        list
    }
}
