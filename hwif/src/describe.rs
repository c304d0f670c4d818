//! Packets as text, for messages: the device's log and sanitizer reports,
//! the KMD's dmesg lines, the UMD's error text and the tools all print a
//! packet the same way — its name ([`super::packet::opcode_name`]) and its
//! operands as `key=value`.
//!
//! ```text
//! COPY src=0x100000 dst=0x200000 size=4096
//! FENCE va=0x7fff0080 seqno=12 NO_EVENT
//! SEM_WAIT va=0x7fff0088 >= 3
//! ```
//!
//! Page-table entries too ([`PteText`]): `valid, 2 MiB leaf (HUGE), perms
//! rw-, cache 0, address 0x200000`.
//!
//! Everything here writes into a [`core::fmt::Formatter`] and allocates
//! nothing, so the KMD uses it too.

use core::fmt;

use super::mmu::{Pte, PTE_EXEC, PTE_READ, PTE_TABLE_MUST_BE_ZERO, PTE_WRITE};
use super::packet::{
    decode_header, opcode_name, Copy2dPacket, Packet, FENCE_NO_EVENT, SEM_SIGNAL_ADD, SEM_WAIT_EQ,
    SEM_WAIT_GEQ,
};

impl fmt::Display for Packet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.name())?;
        match *self {
            Packet::Nop { words } => write!(f, " words={words}"),
            Packet::Indirect { va, size } => write!(f, " va={va:#x} size={size}"),
            Packet::Fence { va, seqno, flags } => {
                write!(f, " va={va:#x} seqno={seqno}")?;
                if flags & FENCE_NO_EVENT != 0 {
                    write!(f, " NO_EVENT")?;
                }
                Ok(())
            }
            Packet::SemWait { va, value, op } => {
                let rel = match op {
                    SEM_WAIT_GEQ => ">=",
                    SEM_WAIT_EQ => "==",
                    _ => "!=",
                };
                write!(f, " va={va:#x} {rel} {value}")
            }
            Packet::SemSignal { va, value, op } => {
                let rel = if op == SEM_SIGNAL_ADD { "+=" } else { "=" };
                write!(f, " va={va:#x} {rel} {value}")
            }
            Packet::Timestamp { va } => write!(f, " va={va:#x}"),
            Packet::Copy { src, dst, size } => write!(f, " src={src:#x} dst={dst:#x} size={size}"),
            Packet::Copy2d(Copy2dPacket {
                src,
                dst,
                src_pitch,
                dst_pitch,
                width,
                height,
            }) => write!(
                f,
                " src={src:#x} dst={dst:#x} src_pitch={src_pitch} dst_pitch={dst_pitch} width={width} height={height}"
            ),
            Packet::Fill { dst, size, pattern } => {
                write!(f, " dst={dst:#x} size={size} pattern={pattern:#010x}")
            }
            Packet::Dispatch(d) => {
                let [gx, gy, gz] = d.grid;
                let [wx, wy, wz] = d.wg;
                write!(
                    f,
                    " module={:#x}+{} kernel={} args={:#x}+{} grid={gx}x{gy}x{gz} wg={wx}x{wy}x{wz} shared={}",
                    d.module_va, d.module_size, d.kernel, d.args_va, d.args_size, d.shared_size
                )
            }
        }
    }
}

/// A packet's words (header first) decoded for a generation, as text: the
/// packet ([`Packet`]'s `Display`) if it decodes, otherwise what its header
/// says and why it does not (`opcode 0x10 (5 words): BAD_LENGTH`).
#[derive(Clone, Copy, Debug)]
pub struct PacketWords<'a> {
    /// Hardware generation.
    pub generation: u32,
    /// The words, header first (the whole packet, or its beginning).
    pub words: &'a [u32],
}

impl fmt::Display for PacketWords<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(&header) = self.words.first() else {
            return write!(f, "no packet");
        };
        let hdr = match decode_header(self.generation, header) {
            Ok(h) => h,
            Err(e) => return write!(f, "header {header:#010x}: {}", e.name()),
        };
        match self.words.get(..hdr.words as usize) {
            Some(w) => match Packet::decode(hdr, w) {
                Ok(p) => write!(f, "{p}"),
                Err(e) => write!(
                    f,
                    "{} ({} words, header {header:#010x}): {}",
                    opcode_name(hdr.opcode),
                    hdr.words,
                    e.name()
                ),
            },
            None => write!(
                f,
                "{} ({} words, header {header:#010x})",
                opcode_name(hdr.opcode),
                hdr.words
            ),
        }
    }
}

/// A header word as text, for messages that have only the header: `COPY
/// (7 words)`, or the error that header is (`header 0xdeadbeef:
/// BAD_HEADER`); `no header` for 0 where no header was read.
#[derive(Clone, Copy, Debug)]
pub struct HeaderWord {
    /// Hardware generation.
    pub generation: u32,
    /// The header word.
    pub word: u32,
}

impl fmt::Display for HeaderWord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match decode_header(self.generation, self.word) {
            Ok(h) => write!(
                f,
                "{} ({} words, header {:#010x})",
                opcode_name(h.opcode),
                h.words,
                self.word
            ),
            Err(e) => write!(f, "header {:#010x}: {}", self.word, e.name()),
        }
    }
}

/// A page-table entry's bits as the walk reads them at a level, as text:
/// valid or not, its shape (table, 4 KiB leaf, 2 MiB leaf, leaf bits
/// without HUGE), its permissions and cache policy where it has them, its
/// address (a VRAM offset when the location bit is set), and any reserved
/// bits set.
#[derive(Clone, Copy, Debug)]
pub struct PteText {
    /// The entry's level (3 = root).
    pub level: u8,
    /// The entry's bits.
    pub bits: u64,
}

impl fmt::Display for PteText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = Pte::from_bits(self.bits);
        let leafy = self.bits & PTE_TABLE_MUST_BE_ZERO != 0;
        let shape = if p.is_huge() {
            "2 MiB leaf (HUGE)"
        } else if self.level == 0 {
            "4 KiB leaf"
        } else if leafy {
            "leaf bits without HUGE"
        } else {
            "table"
        };
        let valid = if p.is_valid() { "valid" } else { "not valid" };
        write!(f, "{valid}, {shape}")?;
        if self.level == 0 || leafy {
            let flag = |m: u64, c: char| if p.permissions() & m != 0 { c } else { '-' };
            write!(
                f,
                ", perms {}{}{}, cache {}",
                flag(PTE_READ, 'r'),
                flag(PTE_WRITE, 'w'),
                flag(PTE_EXEC, 'x'),
                p.cache_bits()
            )?;
        }
        if p.is_vram() {
            write!(f, ", VRAM offset {:#x}", p.address())?;
        } else {
            write!(f, ", address {:#x}", p.address())?;
        }
        if p.reserved_bits() != 0 {
            write!(f, ", reserved bits {:#x}", p.reserved_bits())?;
        }
        Ok(())
    }
}
