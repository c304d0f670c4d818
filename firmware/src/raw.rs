//! An image's bytes read and patched without checking them (what the
//! dump and the corruptions need, on images the device would refuse), and
//! the textual forms of versions and build ids.

use core::mem::{offset_of, size_of};

use vgpu_hwif::firmware::{image_crc, FwHeader, FwSection, FW_MAX_SECTIONS};

/// Bytes of the header.
pub const HEADER_SIZE: usize = size_of::<FwHeader>();
/// Bytes of a section table entry.
pub const ENTRY_SIZE: usize = size_of::<FwSection>();

/// The little-endian word at `at`, if the bytes are there.
pub fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    let w = b.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from(u32_at(b, at)?) | (u64::from(u32_at(b, at.checked_add(4)?)?) << 32))
}

/// Writes the little-endian word `v` at `at` (nothing if it does not fit).
pub fn put_u32(b: &mut [u8], at: usize, v: u32) {
    if let Some(w) = at.checked_add(4).and_then(|end| b.get_mut(at..end)) {
        w.copy_from_slice(&v.to_le_bytes());
    }
}

/// Makes the header's `crc32` right for the image's bytes.
pub fn fix_crc(image: &mut [u8]) {
    let crc = image_crc(image);
    put_u32(image, offset_of!(FwHeader, crc32), crc);
}

/// The header as it is in the bytes, unchecked, if they are long enough.
pub fn header(image: &[u8]) -> Option<FwHeader> {
    vgpu_hwif::firmware::read_header(image)
}

/// Byte offset of table entry `i`.
pub const fn entry_at(i: usize) -> usize {
    HEADER_SIZE + i * ENTRY_SIZE
}

/// The table entries the header counts (at most [`FW_MAX_SECTIONS`]) that
/// lie within the bytes, unchecked.
pub fn entries(image: &[u8], header: &FwHeader) -> Vec<FwSection> {
    let n = (header.section_count as usize).min(FW_MAX_SECTIONS);
    (0..n)
        .map_while(|i| {
            let at = entry_at(i);
            Some(FwSection {
                kind: u32_at(image, at)?,
                flags: u32_at(image, at + 4)?,
                offset: u32_at(image, at + 8)?,
                size: u32_at(image, at + 12)?,
                load: u64_at(image, at + 16)?,
                reserved: u64_at(image, at + 24)?,
            })
        })
        .collect()
}

/// A section's bytes, if they lie within the image.
pub fn bytes<'a>(image: &'a [u8], s: &FwSection) -> Option<&'a [u8]> {
    let start = s.offset as usize;
    image.get(start..start.checked_add(s.size as usize)?)
}

/// The lowest generation a `generations` mask names.
pub fn lowest_generation(generations: u32) -> Option<u32> {
    (generations != 0).then(|| generations.trailing_zeros() + 1)
}

/// A firmware version: `major.minor.patch`.
pub fn version_text(v: u32) -> String {
    format!("{}.{}.{}", v >> 16, (v >> 8) & 0xff, v & 0xff)
}

/// A driver-interface version: `major.minor`.
pub fn interface_text(v: u32) -> String {
    format!("{}.{}", v >> 16, v & 0xffff)
}

/// A build id's bytes (little-endian words), up to the first zero.
pub fn build_bytes(build: &[u32; 4]) -> Vec<u8> {
    let mut b: Vec<u8> = build.iter().flat_map(|w| w.to_le_bytes()).collect();
    if let Some(end) = b.iter().position(|&c| c == 0) {
        b.truncate(end);
    }
    b
}

/// The words of a build id of up to 16 bytes (zero padded; longer ids are
/// cut).
pub fn build_words(id: &[u8]) -> [u32; 4] {
    let mut b = [0u8; 16];
    let n = id.len().min(16);
    b[..n].copy_from_slice(&id[..n]);
    core::array::from_fn(|i| {
        u32::from_le_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]])
    })
}
