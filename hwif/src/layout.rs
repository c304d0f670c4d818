//! The layout table of every struct shared with the device, and its
//! fingerprint.
//!
//! The KMD compiles this same file in the kernel, with the kernel's compiler
//! flags, and reports both the fingerprint (`VGPU_PARAM_HWIF_FINGERPRINT`) and
//! the full table (debugfs `vgpu/layout`). Userspace and the device compute
//! theirs from the hwif crate. Equal fingerprints prove that every struct has
//! the same size, alignment and field offsets on both sides; the tests compare
//! them, and the device reports its own in `IDENTIFY`.

use super::event::EventRecord;
use super::pod::{Pod, StructLayout};
use super::proto::{
    CaptureCmd, CaptureReadCmd, CaptureReadReply, CaptureReply, CommandHeader, ContextCreateCmd,
    ContextDestroyCmd, ContextQueryCmd, ContextQueryReply, DeviceResetReply, DoorbellBlock,
    DoorbellCmd, DoorbellWatchCmd, EngineResetCmd, EngineResetReply, FaultResumeCmd, FwLoadCmd,
    FwLogReadCmd, FwLogReadReply, FwStatusReply, IdentifyReply, MemoryLayoutReply, PingCmd,
    PingReply, PowerReply, PowerSetCmd, QueryStatsCmd, RasQueryCmd, RasQueryReply, RasRetireCmd,
    ReplyHeader, RingCreateCmd, RingDestroyCmd, RingStatus, SanMemCmd, SanReportCmd,
    SanReportReply, StatsReply, TimeReply, TlbInvalidateCmd,
};
use super::sanitize::{SanRange, SanReport};

/// Every shared struct.
pub const TABLE: &[StructLayout] = &[
    CommandHeader::LAYOUT,
    ReplyHeader::LAYOUT,
    PingCmd::LAYOUT,
    PingReply::LAYOUT,
    IdentifyReply::LAYOUT,
    EventRecord::LAYOUT,
    ContextCreateCmd::LAYOUT,
    ContextDestroyCmd::LAYOUT,
    ContextQueryCmd::LAYOUT,
    ContextQueryReply::LAYOUT,
    RingCreateCmd::LAYOUT,
    RingDestroyCmd::LAYOUT,
    DoorbellCmd::LAYOUT,
    DoorbellWatchCmd::LAYOUT,
    DoorbellBlock::LAYOUT,
    TlbInvalidateCmd::LAYOUT,
    FaultResumeCmd::LAYOUT,
    EngineResetCmd::LAYOUT,
    EngineResetReply::LAYOUT,
    QueryStatsCmd::LAYOUT,
    StatsReply::LAYOUT,
    RingStatus::LAYOUT,
    RasRetireCmd::LAYOUT,
    RasQueryCmd::LAYOUT,
    RasQueryReply::LAYOUT,
    SanRange::LAYOUT,
    SanReport::LAYOUT,
    SanMemCmd::LAYOUT,
    SanReportCmd::LAYOUT,
    SanReportReply::LAYOUT,
    CaptureCmd::LAYOUT,
    CaptureReply::LAYOUT,
    CaptureReadCmd::LAYOUT,
    CaptureReadReply::LAYOUT,
    TimeReply::LAYOUT,
    MemoryLayoutReply::LAYOUT,
    DeviceResetReply::LAYOUT,
    FwLoadCmd::LAYOUT,
    FwStatusReply::LAYOUT,
    FwLogReadCmd::LAYOUT,
    FwLogReadReply::LAYOUT,
    PowerSetCmd::LAYOUT,
    PowerReply::LAYOUT,
];

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

const fn fnv_bytes(mut h: u64, b: &[u8]) -> u64 {
    let mut i = 0;
    while i < b.len() {
        h ^= b[i] as u64;
        h = h.wrapping_mul(FNV_PRIME);
        i += 1;
    }
    h
}

const fn fnv_usize(h: u64, v: usize) -> u64 {
    fnv_bytes(h, &(v as u64).to_le_bytes())
}

/// FNV-1a over every struct's name, size, alignment, and every field's name,
/// offset and size.
pub const fn fingerprint(table: &[StructLayout]) -> u64 {
    let mut h = FNV_OFFSET;
    let mut s = 0;
    while s < table.len() {
        let st = &table[s];
        h = fnv_bytes(h, st.name.as_bytes());
        h = fnv_usize(h, st.size);
        h = fnv_usize(h, st.align);
        let mut f = 0;
        while f < st.fields.len() {
            let fl = &st.fields[f];
            h = fnv_bytes(h, fl.name.as_bytes());
            h = fnv_usize(h, fl.offset);
            h = fnv_usize(h, fl.size);
            f += 1;
        }
        s += 1;
    }
    h
}

/// The fingerprint of [`TABLE`] as compiled here.
pub const FINGERPRINT: u64 = fingerprint(TABLE);

/// Writes the table, one line per field: `Struct.field offset size`, after a
/// line `Struct size=N align=A` per struct.
pub fn write_table(out: &mut dyn core::fmt::Write) -> core::fmt::Result {
    for st in TABLE {
        writeln!(out, "{} size={} align={}", st.name, st.size, st.align)?;
        for f in st.fields {
            writeln!(out, "{}.{} {} {}", st.name, f.name, f.offset, f.size)?;
        }
    }
    writeln!(out, "fingerprint {:#018x}", FINGERPRINT)
}
