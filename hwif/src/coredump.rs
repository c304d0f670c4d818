//! The devcoredump `vgpu.ko` publishes on a hang, a fault or an engine
//! error (`/sys/class/devcoredump/devcdN/data`): the driver's own state
//! and the device's capture ([`super::capture`]) in one text file that
//! `cat` shows and `vgpu-dump` decodes.
//!
//! # Format
//!
//! ```text
//! VGPU DEVCOREDUMP 1
//! [dump]
//! dump reason=hang slot=3 ctx=4 engine=0 ...
//! [contexts]
//! ctx slot=3 handle=4 ...
//! [jobs]
//! job slot=3 engine=0 seqno=5 ...
//! ...
//! [device-capture]
//! VkdQVUNBUDEBAAAAUAAAA...            (base64, 76 characters a line)
//! [end]
//! ```
//!
//! A line `[name]` opens a section ([`section`]). Every other line is a
//! record: a kind, then `key=value` fields separated by single spaces;
//! values hold no spaces and no `=` (the writer replaces them,
//! [`sanitize`]). The `device-capture` section is the capture in base64
//! ([`base64_encode`]), absent if the device could not give one (the
//! `device` record says why). Readers ignore sections and keys they do not
//! know. Nothing here allocates.

/// The first line's words.
pub const BANNER: &str = "VGPU DEVCOREDUMP";
/// The format version (after the banner).
pub const VERSION: u32 = 1;

/// Section names.
pub mod section {
    /// One `dump` record: why, which context and engine, when, the driver.
    pub const DUMP: &str = "dump";
    /// `ctx` records: every context the driver holds.
    pub const CONTEXTS: &str = "contexts";
    /// `job` records: the jobs in flight and their fences.
    pub const JOBS: &str = "jobs";
    /// `map` records: the failing context's GPU address space.
    pub const VM: &str = "vm";
    /// `reset` records: the reset history.
    pub const RESETS: &str = "resets";
    /// `fault` records: the fault history.
    pub const FAULTS: &str = "faults";
    /// One `device` record: the capture's id, size, status.
    pub const DEVICE: &str = "device";
    /// The device capture, base64.
    pub const CAPTURE: &str = "device-capture";
    /// The end marker (a dump without it was cut short).
    pub const END: &str = "end";
}

/// Bytes of capture per base64 line (76 characters).
pub const BASE64_LINE_BYTES: usize = 57;

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// The byte a field value holds for `c`: printable ASCII other than space
/// and `=` as is, anything else `_`.
pub const fn sanitize(c: u8) -> u8 {
    if c > b' ' && c < 0x7f && c != b'=' {
        c
    } else {
        b'_'
    }
}

/// The section a line opens (`[name]`), if it is a section line.
pub fn section_name(line: &str) -> Option<&str> {
    line.strip_prefix('[')?.strip_suffix(']')
}

/// The record kind of a line (its first word).
pub fn kind(line: &str) -> &str {
    line.split(' ').next().unwrap_or("")
}

/// The `key=value` fields of a record line.
pub fn fields(line: &str) -> impl Iterator<Item = (&str, &str)> {
    line.split(' ').skip(1).filter_map(|f| f.split_once('='))
}

/// The value of field `key` of a record line.
pub fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    fields(line).find(|(k, _)| *k == key).map(|(_, v)| v)
}

/// Characters of base64 for `n` bytes.
pub const fn base64_len(n: usize) -> usize {
    n.div_ceil(3) * 4
}

/// Encodes `src` as padded base64 into `out` (at least
/// [`base64_len`]`(src.len())` bytes); returns the characters written, or
/// `None` if `out` is too small.
pub fn base64_encode(src: &[u8], out: &mut [u8]) -> Option<usize> {
    let need = base64_len(src.len());
    let out = out.get_mut(..need)?;
    for (chunk, o) in src.chunks(3).zip(out.chunks_mut(4)) {
        let b = [
            chunk.first().copied().unwrap_or(0),
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        let c = |i: u32| ALPHABET[((n >> (18 - 6 * i)) & 63) as usize];
        let enc = [
            c(0),
            c(1),
            if chunk.len() > 1 { c(2) } else { b'=' },
            if chunk.len() > 2 { c(3) } else { b'=' },
        ];
        o.copy_from_slice(&enc);
    }
    Some(need)
}

/// Why base64 text could not be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Base64Error {
    /// A character outside the alphabet (whitespace is skipped).
    BadChar(u8),
    /// The text does not end on a whole group.
    Length,
    /// The output buffer is too small.
    Full,
}

fn value(c: u8) -> Option<u32> {
    let v = match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => return None,
    };
    Some(u32::from(v))
}

/// Decodes base64 `text` (whitespace ignored, `=` padding) into `out`;
/// returns the bytes written.
pub fn base64_decode(text: &[u8], out: &mut [u8]) -> Result<usize, Base64Error> {
    let mut group = [0u32; 4];
    let mut have = 0usize;
    let mut pad = 0usize;
    let mut n = 0usize;
    for &c in text {
        if c.is_ascii_whitespace() {
            continue;
        }
        let v = if c == b'=' {
            pad += 1;
            0
        } else if pad > 0 {
            return Err(Base64Error::BadChar(c));
        } else {
            value(c).ok_or(Base64Error::BadChar(c))?
        };
        if let Some(g) = group.get_mut(have) {
            *g = v;
        }
        have += 1;
        if have == 4 {
            let w = group[0] << 18 | group[1] << 12 | group[2] << 6 | group[3];
            let bytes = [(w >> 16) as u8, (w >> 8) as u8, w as u8];
            let take = 3 - pad.min(2);
            let dst = out.get_mut(n..n + take).ok_or(Base64Error::Full)?;
            dst.copy_from_slice(bytes.get(..take).unwrap_or(&[]));
            n += take;
            have = 0;
            if pad > 0 {
                pad = 3; // nothing may follow the padding but whitespace
            }
        }
    }
    if have != 0 {
        return Err(Base64Error::Length);
    }
    Ok(n)
}
