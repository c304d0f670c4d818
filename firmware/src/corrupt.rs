//! Broken images for tests: one [`Corruption`] per way the device refuses
//! an image, each breaking exactly one thing, so that a device of the
//! image's generation, with a driver of interface
//! `vgpu_hwif::limits::PROTOCOL_VERSION`, refuses it with exactly
//! [`Corruption::expected`].

use core::mem::offset_of;

use vgpu_hwif::firmware::{
    build, FwError, FwHeader, FW_MAX_SECTIONS, FW_MAX_SIZE, FW_SECTION_REQUIRED,
};
use vgpu_hwif::limits::PROTOCOL_VERSION;

use crate::raw;

/// A section kind no device knows ([`Corruption::UnknownSection`]).
pub const UNKNOWN_KIND: u32 = 99;

/// A way to break an image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Corruption {
    /// Cut to half its length.
    Truncated,
    /// The magic's first byte changed (CRC fixed).
    BadMagic,
    /// `format` one past the known one (CRC fixed).
    BadFormat,
    /// A byte of the first section flipped, the CRC left as it was.
    BadChecksum,
    /// The first section's offset past the end of the image (CRC fixed).
    BadSection,
    /// A `REQUIRED` section of kind [`UNKNOWN_KIND`] added (CRC fixed).
    UnknownSection,
    /// `generations` naming only the other generation (CRC fixed).
    WrongGeneration,
    /// "Too new": the interface range moved above the driver's version
    /// (and above the image's own range; CRC fixed).
    VersionMismatch,
    /// Zeros appended to one byte past 64 KiB (`image_size` and CRC
    /// fixed: only the size is wrong).
    TooLarge,
}

impl Corruption {
    /// Every corruption, in the order of the device's error codes.
    pub const ALL: [Corruption; 9] = [
        Corruption::Truncated,
        Corruption::BadMagic,
        Corruption::BadFormat,
        Corruption::BadChecksum,
        Corruption::BadSection,
        Corruption::UnknownSection,
        Corruption::WrongGeneration,
        Corruption::VersionMismatch,
        Corruption::TooLarge,
    ];

    /// Its name, kebab-case (`bad-checksum`): the test image's file name
    /// is `gen{N}-{name}.fw`.
    pub const fn name(self) -> &'static str {
        match self {
            Corruption::Truncated => "truncated",
            Corruption::BadMagic => "bad-magic",
            Corruption::BadFormat => "bad-format",
            Corruption::BadChecksum => "bad-checksum",
            Corruption::BadSection => "bad-section",
            Corruption::UnknownSection => "unknown-section",
            Corruption::WrongGeneration => "wrong-generation",
            Corruption::VersionMismatch => "version-mismatch",
            Corruption::TooLarge => "too-large",
        }
    }

    /// The corruption of this name.
    pub fn from_name(name: &str) -> Option<Corruption> {
        Corruption::ALL.into_iter().find(|c| c.name() == name)
    }

    /// The error a device of the image's generation refuses the broken
    /// image with (driver interface `PROTOCOL_VERSION`).
    pub const fn expected(self) -> FwError {
        match self {
            Corruption::Truncated => FwError::Truncated,
            Corruption::BadMagic => FwError::BadMagic,
            Corruption::BadFormat => FwError::BadFormat,
            Corruption::BadChecksum => FwError::BadChecksum,
            Corruption::BadSection => FwError::BadSection,
            Corruption::UnknownSection => FwError::UnknownSection,
            Corruption::WrongGeneration => FwError::WrongGeneration,
            Corruption::VersionMismatch => FwError::VersionMismatch,
            Corruption::TooLarge => FwError::TooLarge,
        }
    }

    /// What it does to the image, in a few words.
    pub const fn what(self) -> &'static str {
        match self {
            Corruption::Truncated => "cut to half its length",
            Corruption::BadMagic => "magic changed",
            Corruption::BadFormat => "format one past the known one",
            Corruption::BadChecksum => "a section byte flipped, CRC not fixed",
            Corruption::BadSection => "a section's offset past the end",
            Corruption::UnknownSection => "a required section of kind 99",
            Corruption::WrongGeneration => "built for the other generation",
            Corruption::VersionMismatch => "serves only a newer driver interface",
            Corruption::TooLarge => "padded past 64 KiB",
        }
    }
}

/// `image` broken in the way `c` says. `image` is meant to be a valid
/// image (one this crate built); any other bytes are broken as well as
/// they can be, without panicking.
pub fn corrupt(image: &[u8], c: Corruption) -> Vec<u8> {
    let mut out = image.to_vec();
    let header = raw::header(image);
    let entries = header.map(|h| raw::entries(image, &h)).unwrap_or_default();
    match c {
        Corruption::Truncated => {
            out.truncate(image.len() / 2);
            return out;
        }
        Corruption::BadMagic => {
            if let Some(b) = out.first_mut() {
                *b ^= 0xff;
            }
        }
        Corruption::BadFormat => {
            let format = header.map_or(0, |h| h.format);
            raw::put_u32(
                &mut out,
                offset_of!(FwHeader, format),
                format.wrapping_add(1),
            );
        }
        Corruption::BadChecksum => {
            // The first section's first byte, or the last byte.
            let at = entries
                .first()
                .filter(|s| s.size > 0 && (s.offset as usize) < out.len())
                .map_or(out.len().saturating_sub(1), |s| s.offset as usize);
            if let Some(b) = out.get_mut(at) {
                *b ^= 0x5a;
            }
            return out;
        }
        Corruption::BadSection => {
            let past = u32::try_from(out.len() + 16).unwrap_or(u32::MAX);
            raw::put_u32(&mut out, raw::entry_at(0) + 8, past);
            if entries.first().is_some_and(|s| s.size == 0) {
                raw::put_u32(&mut out, raw::entry_at(0) + 12, 16);
            }
        }
        Corruption::UnknownSection => {
            if let Some(rebuilt) = header.and_then(|h| with_unknown(image, &h)) {
                return rebuilt;
            }
        }
        Corruption::WrongGeneration => {
            let g = header.map_or(1, |h| h.generations);
            let other = if g & 1 != 0 { 0b10 } else { 0b01 };
            raw::put_u32(&mut out, offset_of!(FwHeader, generations), other);
        }
        Corruption::VersionMismatch => {
            let max = header.map_or(0, |h| h.interface_max);
            let newer = max.max(PROTOCOL_VERSION).saturating_add(1);
            raw::put_u32(&mut out, offset_of!(FwHeader, interface_min), newer);
            raw::put_u32(&mut out, offset_of!(FwHeader, interface_max), newer);
        }
        Corruption::TooLarge => {
            out.resize(out.len().max(FW_MAX_SIZE + 1), 0);
            let size = u32::try_from(out.len()).unwrap_or(u32::MAX);
            raw::put_u32(&mut out, offset_of!(FwHeader, image_size), size);
        }
    }
    raw::fix_crc(&mut out);
    out
}

/// The image rebuilt with a `REQUIRED` section of [`UNKNOWN_KIND`] after
/// its own, if its table reads and has room.
fn with_unknown(image: &[u8], header: &FwHeader) -> Option<Vec<u8>> {
    let entries = raw::entries(image, header);
    if entries.len() != header.section_count as usize || entries.len() >= FW_MAX_SECTIONS {
        return None;
    }
    let mut sections = entries
        .iter()
        .map(|s| Some((s.kind, s.flags, raw::bytes(image, s)?)))
        .collect::<Option<Vec<_>>>()?;
    sections.push((
        UNKNOWN_KIND,
        FW_SECTION_REQUIRED,
        b"a section kind no device knows",
    ));
    let mut out = vec![0; FW_MAX_SIZE];
    let n = build(&mut out, header, &sections).ok()?;
    out.truncate(n);
    Some(out)
}
