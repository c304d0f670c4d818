//! The command-buffer writer on its own, no device needed: a buffer
//! filled to its last word, one packet more refused as full (not a panic),
//! generation 2's padding of exactly one NOP word before a copy-engine
//! packet, and the 8-byte end.

use vgpu_hwif::packet::{decode_header, Packet, GEN2_ENGINE_PACKET_ALIGN, OP_COPY, OP_NOP};
use vgpu_umd::cmdbuf::{CmdError, Writer};

use crate::report::T;

/// One word's header as (opcode, words), or `None`.
fn header(generation: u32, word: u32) -> Option<(u8, u32)> {
    decode_header(generation, word)
        .ok()
        .map(|h| (h.opcode, h.words))
}

pub fn test_writer(t: &mut T) {
    // Generation 1: four FENCEs fill a buffer of four FENCEs exactly.
    let fence = Packet::Fence {
        va: 0x1000,
        seqno: 1,
        flags: 0,
    };
    let n = fence.words();
    let mut words = vec![0u32; 4 * n];
    let mut w = Writer::new(1, 0x10_0000, &mut words, 0);
    let pushed: Vec<_> = (0..4).map(|_| w.push(&fence)).collect();
    t.check(
        "writer-fills-to-the-last-word",
        pushed.iter().all(Result::is_ok) && w.len() == 4 * n,
        || format!("{pushed:?}, {} of {} words", w.len(), 4 * n),
    );
    let more = w.push(&fence);
    t.check(
        "writer-full",
        more == Err(CmdError::Full) && w.len() == 4 * n,
        || format!("one packet more: {more:?}, {} words", w.len()),
    );

    // Generation 2: the next free word 4 bytes before a 64-byte boundary.
    let base = 0x20_0000u64;
    let at = (GEN2_ENGINE_PACKET_ALIGN / 4 - 1) as usize;
    let copy = Packet::Copy {
        src: 0x1000,
        dst: 0x2000,
        size: 64,
    };
    let mut words = vec![0u32; 64];
    let mut w = Writer::new(2, base, &mut words, at);
    let r = w.push(&copy);
    let len = w.len();
    let ends = w.finish();
    let pad = header(2, words[at]);
    let packet = header(2, words[at + 1]);
    t.check(
        "writer-gen2-one-word-pad",
        r.is_ok()
            && len == at + 1 + copy.words()
            && pad == Some((OP_NOP, 1))
            && packet.map(|p| p.0) == Some(OP_COPY),
        || {
            format!(
                "{r:?}: {len} words, word {at} {pad:?}, word {} {packet:?}",
                at + 1
            )
        },
    );
    t.check(
        "writer-ends-on-8-bytes",
        ends.is_multiple_of(2) && ends >= len,
        || format!("{len} words finished as {ends}"),
    );
}
