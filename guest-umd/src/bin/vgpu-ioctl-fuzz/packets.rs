//! Random command buffers for real submissions: packets encoded with
//! hwif's `Packet::encode` (through the UMD's `Writer`, which adds gen 2's
//! alignment), with operands aimed mostly at the file's data BO and
//! sometimes anywhere (its edges, the read-only command BO, unmapped VAs,
//! the KMD's ring and status pages); or raw words (random, or valid headers
//! with random payloads and lengths).

use vgpu_hwif::packet::{self, encode_header, Copy2dPacket, DispatchPacket, Packet, OPCODES};
use vgpu_umd::cmdbuf::Writer;

use crate::rng::Rng;
use crate::worker::{DevInfo, Kit};

/// Words of one program at most.
const MAX_WORDS: usize = 256;

/// A VA for a packet operand: mostly inside the data BO, `align`-aligned.
/// `tame`: always inside it (programs that should complete).
fn target(rng: &mut Rng, kit: &Kit, dev: &DevInfo, align: u64, tame: bool) -> u64 {
    if tame {
        return (kit.data_va + rng.below(kit.data_len / 2)) & !(align - 1);
    }
    let va = match rng.below(20) {
        0..=13 => kit.data_va + rng.below(kit.data_len),
        14 => kit.data_va + kit.data_len - rng.range(1, 64),
        15 => kit.cmd_va + rng.below(kit.cmd_len as u64),
        16 => dev.va_start + rng.below(1 << 30),
        // The KMD's range above the user's: rings and status pages.
        17 => dev.va_end + rng.below(256 << 20),
        18 => rng.edge_u64(),
        _ => kit.data_va + kit.data_len,
    };
    if rng.chance(1, 16) {
        va
    } else {
        va & !(align - 1)
    }
}

/// A transfer size: mostly small; `tame`: within half the data BO.
fn size(rng: &mut Rng, tame: bool) -> u64 {
    if tame {
        return rng.range(1, 4096);
    }
    match rng.below(10) {
        0..=6 => rng.range(1, 4096),
        7 => rng.range(1, 64 * 1024),
        8 => rng.edge_u64() % (packet::MAX_TRANSFER_SIZE + 2),
        _ => *rng.pick(&[0, 1, 4, 8, 64 * 1024, packet::MAX_TRANSFER_SIZE]),
    }
}

/// One random packet.
fn packet(rng: &mut Rng, kit: &Kit, dev: &DevInfo, written: &[(u64, u32)], tame: bool) -> Packet {
    // Tame programs: NOP, FENCE, SEM_SIGNAL, SEM_WAIT that holds,
    // TIMESTAMP, COPY and FILL, all inside the data BO.
    let kind = if tame {
        *rng.pick(&[0, 1, 3, 4, 5, 6, 9])
    } else {
        rng.below(13)
    };
    match kind {
        // (The UMD's writer encodes packets of up to 64 words; longer NOPs
        // come from the raw modes.)
        0 => Packet::Nop {
            words: if !tame && rng.chance(1, 8) {
                rng.edge_u32() % 61
            } else {
                rng.range(1, 16) as u32
            },
        },
        1 | 2 => {
            let any = rng.u32();
            Packet::Fence {
                va: target(rng, kit, dev, 8, tame),
                seqno: rng.edge_u64(),
                flags: if tame {
                    0
                } else {
                    *rng.pick(&[0, packet::FENCE_NO_EVENT, any])
                },
            }
        }
        3 => {
            let any = rng.u32();
            Packet::SemSignal {
                va: target(rng, kit, dev, 8, tame),
                value: rng.range(0, 8),
                op: if tame {
                    packet::SEM_SIGNAL_ADD
                } else {
                    *rng.pick(&[packet::SEM_SIGNAL_WRITE, packet::SEM_SIGNAL_ADD, any])
                },
            }
        }
        4 => {
            // Satisfiable almost always (GEQ 0); now and then one that
            // never is: a hang the driver must recover from.
            let (value, op) = if !tame && rng.chance(1, 40) {
                (u64::MAX, packet::SEM_WAIT_EQ)
            } else {
                (0, packet::SEM_WAIT_GEQ)
            };
            Packet::SemWait {
                va: target(rng, kit, dev, 8, tame),
                value,
                op: if !tame && rng.chance(1, 20) {
                    rng.u32()
                } else {
                    op
                },
            }
        }
        5 => Packet::Timestamp {
            va: target(rng, kit, dev, 8, tame),
        },
        6 | 7 => Packet::Copy {
            src: target(rng, kit, dev, 4, tame),
            dst: target(rng, kit, dev, 4, tame),
            size: size(rng, tame),
        },
        8 => Packet::Copy2d(Copy2dPacket {
            src: target(rng, kit, dev, 4, tame),
            dst: target(rng, kit, dev, 4, tame),
            src_pitch: rng.range(0, 512) as u32,
            dst_pitch: rng.range(0, 512) as u32,
            width: rng.range(0, 256) as u32,
            height: rng.range(0, 64) as u32,
        }),
        9 | 10 => Packet::Fill {
            dst: target(rng, kit, dev, 4, tame),
            size: size(rng, tame),
            pattern: rng.u32(),
        },
        11 => {
            // A program written earlier, or anything.
            let (va, size) = if !written.is_empty() && rng.chance(3, 4) {
                *rng.pick(written)
            } else {
                (target(rng, kit, dev, 4, tame), rng.edge_u32())
            };
            Packet::Indirect { va, size }
        }
        _ => Packet::Dispatch(DispatchPacket {
            module_va: target(rng, kit, dev, 4, tame),
            module_size: rng.range(0, 8192) as u32,
            kernel: rng.range(0, 2) as u32,
            args_va: target(rng, kit, dev, 4, tame),
            args_size: rng.range(0, 256) as u32,
            grid: [rng.edge_u32(), rng.range(1, 4) as u32, 1],
            wg: [rng.range(1, 64) as u32, 1, rng.range(1, 2) as u32],
            shared_size: rng.range(0, 1024) as u32,
        }),
    }
}

/// A program of random words: its words (an even number of them).
/// `tame`: only well-formed packets inside the data BO (the job completes,
/// its context lives on).
pub fn program(
    rng: &mut Rng,
    kit: &Kit,
    dev: &DevInfo,
    va: u64,
    written: &[(u64, u32)],
    tame: bool,
) -> Vec<u32> {
    let mut words = vec![0u32; MAX_WORDS];
    let kind = if tame { 0 } else { rng.below(20) };
    let len = match kind {
        // Packets through hwif's encoder: tame ones half of the time, any
        // otherwise.
        0..=13 => {
            let tame = tame || rng.chance(1, 2);
            let mut w = Writer::new(dev.generation, va, &mut words[..MAX_WORDS - 2], 0);
            for _ in 0..rng.range(1, 8) {
                if w.push(&packet(rng, kit, dev, written, tame)).is_err() {
                    break;
                }
            }
            if w.is_empty() {
                let _ = w.push(&Packet::Nop { words: 2 });
            }
            w.finish()
        }
        // Valid headers, random payloads and lengths.
        14..=17 => {
            let mut n = 0;
            while n < MAX_WORDS - 16 && rng.chance(3, 4) {
                let op = if rng.chance(7, 8) {
                    *rng.pick(&OPCODES)
                } else {
                    rng.u32() as u8
                };
                let len = match packet::payload_words(op) {
                    Some(p) if rng.chance(3, 4) => p + 1,
                    _ => rng.range(0, 15) as u32,
                };
                words[n] = encode_header(dev.generation, op, len);
                n += 1;
                for _ in 1..len.min(15) {
                    words[n] = rng.edge_u32();
                    n += 1;
                }
            }
            n.max(2).next_multiple_of(2)
        }
        // Anything.
        _ => {
            let n = rng.range(1, 32) as usize * 2;
            for w in words.iter_mut().take(n) {
                *w = rng.u32();
            }
            n
        }
    };
    words.truncate(len);
    words
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn programs_fit_and_have_an_even_length() {
        let dev = DevInfo {
            node: PathBuf::new(),
            generation: 2,
            engine_mask: 3,
            va_start: 0x1_0000,
            va_end: 1 << 47,
        };
        let kit = Kit {
            cmd_va: 0x1_0000,
            cmd_map: 0,
            cmd_len: 64 * 1024,
            data_va: 0x21_0000,
            data_len: 64 * 1024,
            next: 0,
        };
        let mut rng = Rng::new(5);
        let mut decoded = 0;
        for i in 0..2000 {
            let w = program(
                &mut rng,
                &kit,
                &dev,
                0x1_0000 + 1024 * (i % 64),
                &[],
                i.is_multiple_of(2),
            );
            assert!(!w.is_empty() && w.len() <= MAX_WORDS && w.len().is_multiple_of(2));
            if packet::decode_header(2, w[0]).is_ok() {
                decoded += 1;
            }
        }
        // Most programs start with a packet the device decodes.
        assert!(decoded > 1000, "{decoded}");
    }
}
