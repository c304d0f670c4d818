//! The compute engine.
//!
//! It runs the common packets (`NOP`, `INDIRECT`, `FENCE`, `SEM_WAIT`,
//! `SEM_SIGNAL`, `TIMESTAMP`) through the same command processor as the
//! copy engine. `DISPATCH` (opcode `0x20`) is reserved: this device answers
//! it with the engine error `UNSUPPORTED`, and the copy engine's packets
//! with `WRONG_ENGINE`.
//!
//! Kernels will run here as a resumable operation like a copy-engine
//! transfer: one workgroup (or a bounded number of instructions) per step,
//! between which the command processor checks preemption, resets and its
//! time slice; their global memory is the context's address space through
//! [`super::dma::GpuMemory`].

use vgpu_hwif::packet::{EngineError, Packet};

/// Checks that the compute engine executes `p`.
pub fn check_packet(p: &Packet) -> Result<(), EngineError> {
    match p {
        Packet::Copy { .. } | Packet::Copy2d { .. } | Packet::Fill { .. } => {
            Err(EngineError::WrongEngine)
        }
        Packet::Dispatch { .. } => Err(EngineError::Unsupported),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compute_engine_packets() {
        assert_eq!(
            check_packet(&Packet::Dispatch {
                module_va: 0,
                module_size: 4,
                kernel: 0,
                args_va: 0,
                args_size: 0,
                grid: [1; 3],
                wg: [1; 3],
                shared_size: 0,
            }),
            Err(EngineError::Unsupported)
        );
        for p in [
            Packet::Copy {
                src: 0,
                dst: 0,
                size: 1,
            },
            Packet::Fill {
                dst: 0,
                size: 4,
                pattern: 0,
            },
            Packet::Copy2d {
                src: 0,
                dst: 0,
                src_pitch: 1,
                dst_pitch: 1,
                width: 1,
                height: 1,
            },
        ] {
            assert_eq!(check_packet(&p), Err(EngineError::WrongEngine));
        }
        assert_eq!(check_packet(&Packet::Timestamp { va: 0 }), Ok(()));
    }
}
