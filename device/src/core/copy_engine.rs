//! The copy engine: `COPY`, `COPY_2D` and `FILL` as DMA through the MMU.
//!
//! A transfer is a [`CopyOp`] carrying its own progress. Each
//! [`CopyOp::step`] moves one chunk — at most
//! [`MAX_CHUNK`](super::dma::MAX_CHUNK) bytes and never across a source or
//! destination page boundary, so each chunk costs one translation per side —
//! and returns. Between chunks the command processor checks for
//! preemption, resets and the end of its time slice, so a long transfer can
//! be interrupted and resumed exactly where it stopped. A fault leaves the
//! progress at the first byte not transferred: a replayed transfer (after
//! `FAULT_RESUME` retry) continues from there.
//!
//! If the source and destination of a `COPY` overlap, the destination's
//! contents are unspecified.
//!
//! ```text
//!   from_packet ──▶ [done < total] ──step──▶ [done < total] ─ … ─▶ Done
//!                        │                       │
//!                        └──── fault ◀───────────┘   (progress kept)
//! ```

use vgpu_hwif::packet::{Copy2dPacket, EngineError, Packet};

use super::dma::GpuMemory;
use super::mmu::MmuFault;

/// A copy-engine transfer and its progress.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyOp {
    /// `COPY`.
    Linear {
        /// Source VA.
        src: u64,
        /// Destination VA.
        dst: u64,
        /// Total bytes.
        size: u64,
        /// Bytes done.
        done: u64,
    },
    /// `COPY_2D`.
    TwoD {
        /// The packet.
        packet: Copy2dPacket,
        /// Current row.
        row: u32,
        /// Bytes done in the current row.
        col: u32,
    },
    /// `FILL`.
    Fill {
        /// Destination VA.
        dst: u64,
        /// Total bytes.
        size: u64,
        /// 4-byte pattern.
        pattern: u32,
        /// Bytes done.
        done: u64,
    },
}

/// What one step did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Moved this many bytes; more remain.
    Progress(u64),
    /// Moved this many bytes; the transfer is complete.
    Done(u64),
}

/// Why a copy-engine address computation left the 64-bit VA space: the
/// access faults as out of range at the VA where it wrapped.
fn wrapped(base: u64, off: u64) -> u64 {
    base.wrapping_add(off)
}

impl CopyOp {
    /// The transfer of a copy-engine packet, or `None` for other packets.
    pub fn from_packet(p: &Packet) -> Option<CopyOp> {
        Some(match *p {
            Packet::Copy { src, dst, size } => CopyOp::Linear {
                src,
                dst,
                size,
                done: 0,
            },
            Packet::Copy2d(packet) => CopyOp::TwoD {
                packet,
                row: 0,
                col: 0,
            },
            Packet::Fill { dst, size, pattern } => CopyOp::Fill {
                dst,
                size,
                pattern,
                done: 0,
            },
            _ => return None,
        })
    }

    /// Total bytes the transfer moves.
    pub fn total(&self) -> u64 {
        match *self {
            CopyOp::Linear { size, .. } | CopyOp::Fill { size, .. } => size,
            CopyOp::TwoD { packet, .. } => packet.total(),
        }
    }

    /// Moves one chunk.
    pub fn step(&mut self, gm: &mut GpuMemory<'_>) -> Result<Step, MmuFault> {
        match self {
            CopyOp::Linear {
                src,
                dst,
                size,
                done,
            } => {
                let left = *size - *done;
                let n = gm.copy_chunk(wrapped(*src, *done), wrapped(*dst, *done), left)?;
                *done += n;
                Ok(if *done >= *size {
                    Step::Done(n)
                } else {
                    Step::Progress(n)
                })
            }
            CopyOp::Fill {
                dst,
                size,
                pattern,
                done,
            } => {
                let left = *size - *done;
                let n = gm.fill_chunk(wrapped(*dst, *done), left, *pattern, *done)?;
                *done += n;
                Ok(if *done >= *size {
                    Step::Done(n)
                } else {
                    Step::Progress(n)
                })
            }
            CopyOp::TwoD {
                packet: p,
                row,
                col,
            } => {
                let s = wrapped(
                    p.src,
                    u64::from(*row) * u64::from(p.src_pitch) + u64::from(*col),
                );
                let d = wrapped(
                    p.dst,
                    u64::from(*row) * u64::from(p.dst_pitch) + u64::from(*col),
                );
                let n = gm.copy_chunk(s, d, u64::from(p.width - *col))?;
                // n ≤ width - col < 2^32.
                *col += n as u32;
                if *col >= p.width {
                    *col = 0;
                    *row += 1;
                }
                Ok(if *row >= p.height {
                    Step::Done(n)
                } else {
                    Step::Progress(n)
                })
            }
        }
    }
}

/// Checks that the copy engine executes `p`: the common packets and its
/// own transfers; `DISPATCH` belongs to the compute engine.
pub fn check_packet(p: &Packet) -> Result<(), EngineError> {
    match p {
        Packet::Dispatch(_) => Err(EngineError::WrongEngine),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::mmu::{AddressSpace, Mem, Tlb};
    use vgpu_hwif::mmu::{
        huge_entry, table_entry, Access, CachePolicy, FaultReason, PTE_READ, PTE_WRITE,
    };
    use vm_memory::{Bytes, GuestAddress};

    /// 4 MiB of RAM, VA 0..2 MiB identity-mapped by one huge page.
    fn setup() -> (Mem, AddressSpace) {
        let mem = Mem::from_ranges(&[(GuestAddress(0), 0x40_0000)]).unwrap();
        mem.write_obj(table_entry(0x2000), GuestAddress(0x1000))
            .unwrap();
        mem.write_obj(table_entry(0x3000), GuestAddress(0x2000))
            .unwrap();
        mem.write_obj(
            huge_entry(0x20_0000, PTE_READ | PTE_WRITE, CachePolicy::Cached),
            GuestAddress(0x3000),
        )
        .unwrap();
        (
            mem,
            AddressSpace {
                asid: 0,
                root: 0x1000,
                va_bits: 40,
            },
        )
    }

    fn run(op: &mut CopyOp, gm: &mut GpuMemory<'_>) -> Result<Vec<u64>, MmuFault> {
        let mut steps = Vec::new();
        loop {
            match op.step(gm)? {
                Step::Progress(n) => steps.push(n),
                Step::Done(n) => {
                    steps.push(n);
                    return Ok(steps);
                }
            }
        }
    }

    #[test]
    fn copy_2d_moves_rows_between_pitches() {
        let (mem, space) = setup();
        let mut tlb = Tlb::new();
        let mut gm = GpuMemory::new(&mem, &mut tlb, space);
        let src: Vec<u8> = (0..64u8).collect();
        mem.write_slice(&src, GuestAddress(0x20_0000)).unwrap();
        let mut op = CopyOp::from_packet(&Packet::Copy2d(Copy2dPacket {
            src: 0,
            dst: 0x1000,
            src_pitch: 16,
            dst_pitch: 32,
            width: 5,
            height: 4,
        }))
        .unwrap();
        assert_eq!(op.total(), 20);
        assert_eq!(run(&mut op, &mut gm).unwrap(), vec![5, 5, 5, 5]);
        let mut out = [0u8; 128];
        mem.read_slice(&mut out, GuestAddress(0x20_1000)).unwrap();
        for r in 0..4 {
            assert_eq!(&out[r * 32..r * 32 + 5], &src[r * 16..r * 16 + 5]);
            assert!(out[r * 32 + 5..r * 32 + 32].iter().all(|&b| b == 0));
        }
    }

    #[test]
    fn long_copy_is_chunked_and_a_fault_keeps_progress() {
        let (mem, space) = setup();
        let mut tlb = Tlb::new();
        let mut gm = GpuMemory::new(&mem, &mut tlb, space);
        // 200 KiB: 64 + 64 + 64 + 8 KiB chunks inside one huge page.
        let mut op = CopyOp::Linear {
            src: 0,
            dst: 0x10_0000,
            size: 200 * 1024,
            done: 0,
        };
        assert_eq!(
            run(&mut op, &mut gm).unwrap(),
            vec![65536, 65536, 65536, 8192]
        );
        // A fill running off the mapped 2 MiB stops at its end.
        let mut fill = CopyOp::Fill {
            dst: 0x1f_f000,
            size: 0x2000,
            pattern: 7,
            done: 0,
        };
        let f = run(&mut fill, &mut gm).unwrap_err();
        assert_eq!(
            (f.va, f.access, f.reason),
            (0x20_0000, Access::Write, FaultReason::NotPresent)
        );
        assert_eq!(
            fill,
            CopyOp::Fill {
                dst: 0x1f_f000,
                size: 0x2000,
                pattern: 7,
                done: 0x1000
            }
        );
        // A destination that wraps the 64-bit space faults as out of range.
        let mut wrap = CopyOp::Linear {
            src: 0,
            dst: u64::MAX - 3,
            size: 8,
            done: 0,
        };
        assert_eq!(
            run(&mut wrap, &mut gm).unwrap_err().reason,
            FaultReason::OutOfRange
        );
    }

    #[test]
    fn only_copy_packets_become_transfers() {
        assert!(CopyOp::from_packet(&Packet::Nop { words: 1 }).is_none());
    }
}
