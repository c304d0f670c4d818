//! The firmware image the driver loads into the device at boot.
//!
//! An image is a header ([`FwHeader`]), a table of sections
//! ([`FwSection`]), then the sections' bytes, little-endian throughout, with
//! a CRC-32 over the whole image (its `crc32` field taken as zero). The
//! device boots only an image whose header, table and CRC check, that names
//! its generation, and whose driver-interface range covers the driver's;
//! each way a check fails has its own error ([`FwError`], whose numbers are
//! the device's boot error codes).
//!
//! What an image carries changes how the device runs: the scheduler's
//! time slices per priority and its preemption timeout
//! ([`section::SCHED`]), the packets the command processor accepts per
//! generation ([`section::PACKETS`]), the heartbeat period
//! ([`section::HEARTBEAT`]), the firmware log's size ([`section::LOG`]),
//! and the features it enables (header `features`, [`feature`]). A section
//! kind the device does not know is skipped, unless it is flagged
//! [`FW_SECTION_REQUIRED`].

use super::pod::pod_struct;

/// `FwHeader::magic`: "VPFW" in a little-endian dump.
pub const FW_MAGIC: u32 = 0x5746_5056;
/// The image format this interface describes.
pub const FW_FORMAT: u32 = 1;
/// Largest image, in bytes.
pub const FW_MAX_SIZE: usize = 64 << 10;
/// The least time between two `FW_STATUS` polls of one boot, µs: the
/// boot ROM answers them on the processor that boots the image, so a
/// driver sleeps at least this long between polls (the sanitizer's
/// `SAN-FW-POLL` names a driver that does not).
pub const FW_POLL_MIN_US: u64 = 100;
/// Most sections an image has.
pub const FW_MAX_SECTIONS: usize = 8;
/// Section flag: a device that does not know the section's kind must
/// refuse the image.
pub const FW_SECTION_REQUIRED: u32 = 1 << 0;

/// Section kinds.
pub mod section {
    /// [`super::FwSched`]: the scheduler's parameters.
    pub const SCHED: u32 = 1;
    /// [`super::FwPackets`]: the packets the command processor accepts.
    pub const PACKETS: u32 = 2;
    /// [`super::FwHeartbeat`]: the heartbeat period.
    pub const HEARTBEAT: u32 = 3;
    /// [`super::FwLog`]: the firmware log's size.
    pub const LOG: u32 = 4;
    /// UTF-8 text: what the image is (its source, its build).
    pub const NOTES: u32 = 5;
}

/// Boot states (`FwStatusReply::state`).
pub mod fw_state {
    /// Powered on: waiting for an image (`FW_LOAD`).
    pub const WAIT_LOAD: u32 = 0;
    /// An image is loaded and checked; `FW_START` boots it.
    pub const LOADED: u32 = 1;
    /// Booting.
    pub const BOOTING: u32 = 2;
    /// Running: every command answers.
    pub const RUNNING: u32 = 3;
    /// A load or boot failed (`error`: the [`super::FwError`] code); a new
    /// `FW_LOAD` may follow.
    pub const FAILED: u32 = 4;
    /// The firmware stopped (`error`: the crash code); only a
    /// `DEVICE_RESET` brings the device back to its boot state.
    pub const CRASHED: u32 = 5;

    /// A state's name.
    pub const fn name(state: u32) -> &'static str {
        match state {
            WAIT_LOAD => "wait-load",
            LOADED => "loaded",
            BOOTING => "booting",
            RUNNING => "running",
            FAILED => "failed",
            CRASHED => "crashed",
            _ => "unknown",
        }
    }
}

/// Crash codes (`FwStatusReply::error` in `CRASHED`, the
/// `FIRMWARE_CRASH` event's code).
pub mod crash {
    /// An exception in the firmware's scheduler.
    pub const EXCEPTION: u32 = 1;
    /// The firmware's own watchdog fired.
    pub const WATCHDOG: u32 = 2;

    /// A code's name.
    pub const fn name(code: u32) -> &'static str {
        match code {
            EXCEPTION => "exception",
            WATCHDOG => "watchdog",
            _ => "unknown",
        }
    }
}

/// Features an image enables (`FwHeader::features`).
pub mod feature {
    /// User-mode queues (`UQ_*` commands, doorbell polling).
    pub const USER_QUEUES: u32 = 1 << 0;
    /// Time-sliced preemption between contexts of an engine.
    pub const PREEMPTION: u32 = 1 << 1;
    /// Every feature this interface knows.
    pub const ALL: u32 = USER_QUEUES | PREEMPTION;
}

pod_struct! {
    /// The image header (64 bytes, at offset 0).
    pub struct FwHeader {
        /// [`FW_MAGIC`].
        pub magic: u32,
        /// [`FW_FORMAT`].
        pub format: u32,
        /// The firmware's version, `(major << 16) | (minor << 8) | patch`
        /// (what `IDENTIFY` reports once it runs).
        pub version: u32,
        /// Generations it runs on: bit `g - 1` for generation `g`.
        pub generations: u32,
        /// [`feature`] bits it enables.
        pub features: u32,
        /// The driver-interface versions it serves (`limits::PROTOCOL_VERSION`
        /// of the driver): `interface_min..=interface_max`.
        pub interface_min: u32,
        pub interface_max: u32,
        /// Entries of the section table (at most [`FW_MAX_SECTIONS`]),
        /// right after the header.
        pub section_count: u32,
        /// Bytes of the whole image.
        pub image_size: u32,
        /// CRC-32 (ISO-HDLC, as zlib's) of the image with this field zero.
        pub crc32: u32,
        /// A build id (free-form, shown in the firmware log).
        pub build: [u32; 4],
        /// Zero.
        pub reserved: [u32; 2],
    }

    /// One section table entry (32 bytes).
    pub struct FwSection {
        /// [`section`] kind.
        pub kind: u32,
        /// [`FW_SECTION_REQUIRED`].
        pub flags: u32,
        /// Offset of its bytes in the image.
        pub offset: u32,
        /// Their size.
        pub size: u32,
        /// Where the device keeps it in its firmware region (an offset
        /// into the VRAM carve-out; 0: where the device likes).
        pub load: u64,
        /// Zero.
        pub reserved: u64,
    }

    /// [`section::SCHED`]: the scheduler.
    pub struct FwSched {
        /// Time slice per priority (low, normal, high), in µs.
        pub slice_us: [u32; 3],
        /// How long a context may run past its slice before it is
        /// preempted by force, in µs.
        pub preempt_timeout_us: u32,
        /// 0: strict priority, then round robin; 1: round robin only.
        pub policy: u32,
        /// Zero.
        pub reserved: u32,
    }

    /// [`section::PACKETS`]: per generation, the packet opcodes the command
    /// processor accepts (a bit per opcode); others fail as illegal.
    pub struct FwPackets {
        /// Generation 1's opcodes, bit `op` of word `op / 32`.
        pub gen1: [u32; 8],
        /// Generation 2's.
        pub gen2: [u32; 8],
    }

    /// [`section::HEARTBEAT`].
    pub struct FwHeartbeat {
        /// Period of the firmware's heartbeat in ms (0: none).
        pub period_ms: u32,
        /// Zero.
        pub reserved: u32,
    }

    /// [`section::LOG`].
    pub struct FwLog {
        /// Bytes of the firmware log (a ring the driver reads).
        pub size: u32,
        /// Zero.
        pub reserved: u32,
    }
}

const _: () = assert!(core::mem::size_of::<FwHeader>() == 64);
const _: () = assert!(core::mem::size_of::<FwSection>() == 32);

/// Why the device refuses an image. The number is the boot error code the
/// device reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum FwError {
    /// Shorter than its header, its table, or what its header says.
    Truncated = 1,
    /// Not [`FW_MAGIC`].
    BadMagic = 2,
    /// A format this device does not know.
    BadFormat = 3,
    /// The CRC does not match.
    BadChecksum = 4,
    /// A section lies outside the image, overlaps the table, a section is
    /// too small for its kind, the table is too long, or a reserved field
    /// is not zero.
    BadSection = 5,
    /// A required section of a kind the device does not know.
    UnknownSection = 6,
    /// The image does not run on this generation.
    WrongGeneration = 7,
    /// The driver's interface version is outside the image's range.
    VersionMismatch = 8,
    /// Larger than [`FW_MAX_SIZE`].
    TooLarge = 9,
    /// The image was not started in time (the device's boot timeout).
    Timeout = 10,
}

impl FwError {
    /// Every error, in number order.
    pub const ALL: [FwError; 10] = [
        FwError::Truncated,
        FwError::BadMagic,
        FwError::BadFormat,
        FwError::BadChecksum,
        FwError::BadSection,
        FwError::UnknownSection,
        FwError::WrongGeneration,
        FwError::VersionMismatch,
        FwError::TooLarge,
        FwError::Timeout,
    ];

    /// The error with this code.
    pub const fn from_u32(v: u32) -> Option<FwError> {
        if v == 0 || v as usize > Self::ALL.len() {
            return None;
        }
        Some(Self::ALL[v as usize - 1])
    }

    /// What it means, in a few words (the driver's dmesg line).
    pub const fn text(self) -> &'static str {
        match self {
            FwError::Truncated => "image truncated",
            FwError::BadMagic => "not a vgpu firmware image (bad magic)",
            FwError::BadFormat => "unknown image format",
            FwError::BadChecksum => "checksum mismatch",
            FwError::BadSection => "malformed section table",
            FwError::UnknownSection => "required section of an unknown kind",
            FwError::WrongGeneration => "image not built for this GPU generation",
            FwError::VersionMismatch => "image does not serve this driver's interface version",
            FwError::TooLarge => "image too large",
            FwError::Timeout => "boot timed out",
        }
    }
}

/// CRC-32 (ISO-HDLC: reflected, polynomial 0xEDB88320, as zlib's) of
/// `data` continuing from `crc` (0 to start).
pub fn crc32(crc: u32, data: &[u8]) -> u32 {
    let mut c = !crc;
    for &b in data {
        c ^= u32::from(b);
        for _ in 0..8 {
            c = (c >> 1) ^ (0xedb8_8320 & (c & 1).wrapping_neg());
        }
    }
    !c
}

/// The CRC of an image: its bytes with the header's `crc32` field as zero.
pub fn image_crc(image: &[u8]) -> u32 {
    let at = core::mem::offset_of!(FwHeader, crc32);
    let (Some(before), Some(after)) = (image.get(..at), image.get(at + 4..)) else {
        return 0;
    };
    let c = crc32(0, before);
    let c = crc32(c, &[0; 4]);
    crc32(c, after)
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    let w = b.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from(u32_at(b, at)?) | (u64::from(u32_at(b, at + 4)?) << 32))
}

/// A checked image: its header and its sections' entries.
#[derive(Clone, Copy, Debug)]
pub struct FwImage<'a> {
    /// The header.
    pub header: FwHeader,
    bytes: &'a [u8],
    table: [FwSection; FW_MAX_SECTIONS],
}

impl<'a> FwImage<'a> {
    /// The sections, in table order, with their bytes.
    pub fn sections(&self) -> impl Iterator<Item = (FwSection, &'a [u8])> + '_ {
        let n = (self.header.section_count as usize).min(FW_MAX_SECTIONS);
        self.table.iter().take(n).filter_map(|s| {
            let start = s.offset as usize;
            Some((
                *s,
                self.bytes.get(start..start.checked_add(s.size as usize)?)?,
            ))
        })
    }

    /// The first section of `kind`'s bytes.
    pub fn section(&self, kind: u32) -> Option<&'a [u8]> {
        self.sections()
            .find(|(s, _)| s.kind == kind)
            .map(|(_, b)| b)
    }

    /// The scheduler section, read.
    pub fn sched(&self) -> Option<FwSched> {
        let b = self.section(section::SCHED)?;
        let w = |i: usize| u32_at(b, 4 * i);
        Some(FwSched {
            slice_us: [w(0)?, w(1)?, w(2)?],
            preempt_timeout_us: w(3)?,
            policy: w(4)?,
            reserved: w(5)?,
        })
    }

    /// The packet section, read.
    pub fn packets(&self) -> Option<FwPackets> {
        let b = self.section(section::PACKETS)?;
        let mut p = FwPackets {
            gen1: [0; 8],
            gen2: [0; 8],
        };
        for i in 0..8 {
            p.gen1[i] = u32_at(b, 4 * i)?;
            p.gen2[i] = u32_at(b, 32 + 4 * i)?;
        }
        Some(p)
    }

    /// The heartbeat period in ms, if the image has one.
    pub fn heartbeat_ms(&self) -> Option<u32> {
        u32_at(self.section(section::HEARTBEAT)?, 0)
    }

    /// The firmware log's size, if the image sets one.
    pub fn log_size(&self) -> Option<u32> {
        u32_at(self.section(section::LOG)?, 0)
    }
}

/// The smallest size of each known section kind (0: any).
const fn min_size(kind: u32) -> Option<usize> {
    match kind {
        section::SCHED => Some(core::mem::size_of::<FwSched>()),
        section::PACKETS => Some(core::mem::size_of::<FwPackets>()),
        section::HEARTBEAT => Some(core::mem::size_of::<FwHeartbeat>()),
        section::LOG => Some(core::mem::size_of::<FwLog>()),
        section::NOTES => Some(0),
        _ => None,
    }
}

/// The header as the bytes hold it, unchecked; `None` when they are
/// shorter than a header.
pub fn read_header(image: &[u8]) -> Option<FwHeader> {
    if image.len() < core::mem::size_of::<FwHeader>() {
        return None;
    }
    let w = |i: usize| u32_at(image, 4 * i).unwrap_or(0);
    Some(FwHeader {
        magic: w(0),
        format: w(1),
        version: w(2),
        generations: w(3),
        features: w(4),
        interface_min: w(5),
        interface_max: w(6),
        section_count: w(7),
        image_size: w(8),
        crc32: w(9),
        build: [w(10), w(11), w(12), w(13)],
        reserved: [w(14), w(15)],
    })
}

/// Checks `image` as the device of `generation` does for a driver of
/// interface version `interface`, in this order: size, magic, format, CRC,
/// table, generation, version.
///
/// # Errors
///
/// The first check that fails ([`FwError`]).
pub fn parse(image: &[u8], generation: u32, interface: u32) -> Result<FwImage<'_>, FwError> {
    let hs = core::mem::size_of::<FwHeader>();
    if image.len() > FW_MAX_SIZE {
        return Err(FwError::TooLarge);
    }
    if image.len() < hs {
        return Err(FwError::Truncated);
    }
    let Some(header) = read_header(image) else {
        return Err(FwError::Truncated);
    };
    if header.magic != FW_MAGIC {
        return Err(FwError::BadMagic);
    }
    if header.format != FW_FORMAT {
        return Err(FwError::BadFormat);
    }
    if header.image_size as usize != image.len() {
        return Err(FwError::Truncated);
    }
    if image_crc(image) != header.crc32 {
        return Err(FwError::BadChecksum);
    }
    let n = header.section_count as usize;
    let ss = core::mem::size_of::<FwSection>();
    let table_end = n
        .checked_mul(ss)
        .and_then(|t| t.checked_add(hs))
        .ok_or(FwError::BadSection)?;
    if n > FW_MAX_SECTIONS || header.reserved != [0, 0] {
        return Err(FwError::BadSection);
    }
    if table_end > image.len() {
        return Err(FwError::Truncated);
    }
    let mut table = [FwSection {
        kind: 0,
        flags: 0,
        offset: 0,
        size: 0,
        load: 0,
        reserved: 0,
    }; FW_MAX_SECTIONS];
    for (i, t) in table.iter_mut().enumerate().take(n) {
        let at = hs + i * ss;
        let e = FwSection {
            kind: u32_at(image, at).ok_or(FwError::Truncated)?,
            flags: u32_at(image, at + 4).ok_or(FwError::Truncated)?,
            offset: u32_at(image, at + 8).ok_or(FwError::Truncated)?,
            size: u32_at(image, at + 12).ok_or(FwError::Truncated)?,
            load: u64_at(image, at + 16).ok_or(FwError::Truncated)?,
            reserved: u64_at(image, at + 24).ok_or(FwError::Truncated)?,
        };
        let start = e.offset as usize;
        let end = start
            .checked_add(e.size as usize)
            .ok_or(FwError::BadSection)?;
        if e.reserved != 0
            || e.flags & !FW_SECTION_REQUIRED != 0
            || start < table_end
            || end > image.len()
        {
            return Err(FwError::BadSection);
        }
        match min_size(e.kind) {
            Some(m) if (e.size as usize) < m => return Err(FwError::BadSection),
            Some(_) => {}
            None if e.flags & FW_SECTION_REQUIRED != 0 => return Err(FwError::UnknownSection),
            None => {}
        }
        *t = e;
    }
    let gen_bit = generation
        .checked_sub(1)
        .filter(|g| *g < 32)
        .map_or(0, |g| 1u32 << g);
    if header.generations & gen_bit == 0 {
        return Err(FwError::WrongGeneration);
    }
    if interface < header.interface_min || interface > header.interface_max {
        return Err(FwError::VersionMismatch);
    }
    Ok(FwImage {
        header,
        bytes: image,
        table,
    })
}

/// Writes an image into `out`: `header` (its `section_count`,
/// `image_size` and `crc32` are filled in) and `sections` (kind, flags,
/// bytes), each at the next 16-byte boundary after the table. Returns the
/// image's size.
///
/// # Errors
///
/// [`FwError::TooLarge`] if it does not fit `out` or [`FW_MAX_SIZE`],
/// [`FwError::BadSection`] with more than [`FW_MAX_SECTIONS`] sections.
pub fn build(
    out: &mut [u8],
    header: &FwHeader,
    sections: &[(u32, u32, &[u8])],
) -> Result<usize, FwError> {
    if sections.len() > FW_MAX_SECTIONS {
        return Err(FwError::BadSection);
    }
    let hs = core::mem::size_of::<FwHeader>();
    let ss = core::mem::size_of::<FwSection>();
    let mut at = hs + sections.len() * ss;
    let room = out.len().min(FW_MAX_SIZE);
    // Gaps between sections are zero.
    if let Some(o) = out.get_mut(..room) {
        o.fill(0);
    }
    let put = |out: &mut [u8], at: usize, v: &[u8]| -> Result<(), FwError> {
        out.get_mut(at..at + v.len())
            .ok_or(FwError::TooLarge)?
            .copy_from_slice(v);
        Ok(())
    };
    for (i, (kind, flags, bytes)) in sections.iter().enumerate() {
        at = at.next_multiple_of(16);
        let e = hs + i * ss;
        let size = u32::try_from(bytes.len()).map_err(|_| FwError::TooLarge)?;
        let offset = u32::try_from(at).map_err(|_| FwError::TooLarge)?;
        if at + bytes.len() > room {
            return Err(FwError::TooLarge);
        }
        put(out, e, &kind.to_le_bytes())?;
        put(out, e + 4, &flags.to_le_bytes())?;
        put(out, e + 8, &offset.to_le_bytes())?;
        put(out, e + 12, &size.to_le_bytes())?;
        put(out, e + 16, &[0; 16])?;
        put(out, at, bytes)?;
        at += bytes.len();
    }
    let size = at;
    if size > room {
        return Err(FwError::TooLarge);
    }
    let h = FwHeader {
        section_count: sections.len() as u32,
        image_size: size as u32,
        crc32: 0,
        ..*header
    };
    let words = [
        h.magic,
        h.format,
        h.version,
        h.generations,
        h.features,
        h.interface_min,
        h.interface_max,
        h.section_count,
        h.image_size,
        h.crc32,
        h.build[0],
        h.build[1],
        h.build[2],
        h.build[3],
        h.reserved[0],
        h.reserved[1],
    ];
    for (i, w) in words.iter().enumerate() {
        put(out, 4 * i, &w.to_le_bytes())?;
    }
    let crc = image_crc(&out[..size]);
    put(
        out,
        core::mem::offset_of!(FwHeader, crc32),
        &crc.to_le_bytes(),
    )?;
    Ok(size)
}

/// The bytes of a pod section value (little-endian words).
pub fn words_bytes<const N: usize>(words: [u32; N], out: &mut [u8]) -> usize {
    let mut n = 0;
    for (w, dst) in words.iter().zip(out.chunks_exact_mut(4)) {
        dst.copy_from_slice(&w.to_le_bytes());
        n += 4;
    }
    n
}
