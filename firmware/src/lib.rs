//! The vgpu firmware images: the sources kept in the tree
//! (`src/gen1.toml`, `src/gen2.toml`, one per hardware generation) turned
//! into images of the format `vgpu_hwif::firmware` defines
//! (docs/hardware.md section 15), a dump of any image, and broken images
//! for tests. The `vgpu-fw` tool builds, installs and inspects them.
//!
//! The kernel driver requests [`file_name`] (`vgpu/gen2.fw`, installed as
//! `/lib/firmware/vgpu/gen2.fw` by `vgpu-fw install /lib/firmware/vgpu`);
//! [`image_for`] is the same image, built in.
//!
//! # Block order
//!
//! Each module (block) uses only the modules its row names (checked by
//! `scripts/deps`): the dump (`describe`) and the corruptions (`corrupt`)
//! read images through `raw`; the sources (`source`) build them from
//! opcode sets (`packets`). Top first:
//!
//! | block | may use |
//! |---|---|
//! | `describe` | `packets`, `raw` |
//! | `corrupt` | `raw` |
//! | `source` | `error`, `packets`, `raw` |
//! | `packets` | `error` |
//! | `raw` | - |
//! | `error` | - |

#![warn(missing_docs)]

pub mod corrupt;
pub mod describe;
pub mod error;
pub mod packets;
mod raw;
pub mod source;

pub use corrupt::{corrupt, Corruption};
pub use describe::{check, describe, verdict};
pub use error::Error;
pub use packets::GENERATIONS;
pub use source::Source;

/// The in-tree source of generation 1.
pub const GEN1_SOURCE: &str = include_str!("gen1.toml");
/// The in-tree source of generation 2.
pub const GEN2_SOURCE: &str = include_str!("gen2.toml");

/// The in-tree source text of `generation`, if it has one.
pub fn source_text(generation: u32) -> Option<&'static str> {
    match generation {
        1 => Some(GEN1_SOURCE),
        2 => Some(GEN2_SOURCE),
        _ => None,
    }
}

/// The in-tree source of `generation`, read.
///
/// # Panics
///
/// For a generation without an in-tree source (see [`GENERATIONS`]), or
/// if the in-tree source is broken (the tests prove it is not).
pub fn source_for(generation: u32) -> Source {
    let text = source_text(generation)
        .unwrap_or_else(|| panic!("no in-tree firmware source for generation {generation}"));
    Source::parse(text)
        .unwrap_or_else(|e| panic!("firmware/src/gen{generation}.toml is broken: {e}"))
}

/// The built-in image of `generation`: its in-tree source, built.
///
/// # Panics
///
/// As [`source_for`].
pub fn image_for(generation: u32) -> Vec<u8> {
    source_for(generation)
        .image()
        .unwrap_or_else(|e| panic!("firmware/src/gen{generation}.toml is broken: {e}"))
}

/// The valid alternative image of `generation` for tests
/// ([`Source::alternative`] of its in-tree source): other slices, the
/// next patch version, no user-mode queues.
///
/// # Panics
///
/// As [`source_for`].
pub fn alt_image_for(generation: u32) -> Vec<u8> {
    source_for(generation)
        .alternative()
        .and_then(|s| s.image())
        .unwrap_or_else(|e| panic!("firmware/src/gen{generation}.toml is broken: {e}"))
}

/// A valid image of `generation` whose version is the next major one
/// (`major + 1`.0.0): a device boots it; a driver that supports only the
/// in-tree major refuses it (a "too new" firmware).
///
/// # Panics
///
/// As [`source_for`].
pub fn next_major_image_for(generation: u32) -> Vec<u8> {
    let mut s = source_for(generation);
    let major = s
        .version
        .split('.')
        .next()
        .and_then(|m| m.parse::<u32>().ok())
        .unwrap_or(0);
    s.version = format!("{}.0.0", major + 1);
    s.build = format!("gen{generation}-next-major");
    s.image()
        .unwrap_or_else(|e| panic!("firmware/src/gen{generation}.toml is broken: {e}"))
}

/// A valid image of `generation` whose version is the oldest of its major
/// (`major.0.0`): a driver that accepts any minor of the in-tree major at
/// or above 0 runs it (a "just old enough" firmware).
///
/// # Panics
///
/// As [`source_for`].
pub fn oldest_minor_image_for(generation: u32) -> Vec<u8> {
    let mut s = source_for(generation);
    let major = s
        .version
        .split('.')
        .next()
        .and_then(|m| m.parse::<u32>().ok())
        .unwrap_or(0);
    s.version = format!("{major}.0.0");
    s.build = format!("gen{generation}-oldest");
    s.image()
        .unwrap_or_else(|e| panic!("firmware/src/gen{generation}.toml is broken: {e}"))
}

/// The name the kernel driver requests the image of `generation` by:
/// `vgpu/gen{N}.fw` (under `/lib/firmware`).
pub fn file_name(generation: u32) -> String {
    format!("vgpu/gen{generation}.fw")
}
