//! The library's errors: [`Error`], each naming the API call that failed,
//! and what it carries: why a context was lost ([`LostReason`], where
//! ([`ErrorPlace`])), and why a launch was refused ([`LaunchError`]).

use std::fmt;
use std::path::PathBuf;

use crate::cmdbuf::CmdError;
use crate::config::ConfigError;
use crate::ioctl::KmdError;
use crate::memory::MemError;
use crate::uapi;

/// Errors of the UMD.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No render node belongs to the vgpu driver.
    #[error("no vgpu render node found under /dev/dri (is vgpu.ko loaded?)")]
    NoDevice,
    /// Opening a node failed.
    #[error("open {path}: {source}")]
    Open {
        /// The node.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// An ioctl failed.
    #[error("{call}: {source}")]
    Ioctl {
        /// The API call that failed.
        call: &'static str,
        /// The OS error (errno) the KMD returned.
        source: std::io::Error,
    },
    /// A tunable is malformed.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The KMD refused a request of an API call.
    #[error("{call} (context {ctx}): {source}")]
    Kmd {
        /// The API call.
        call: &'static str,
        /// The KMD context involved (0: none).
        ctx: u32,
        /// The ioctl and errno.
        source: KmdError,
    },
    /// Memory could not be allocated or accessed.
    #[error("{call}: {source}")]
    Mem {
        /// The API call.
        call: &'static str,
        /// Why.
        source: MemError,
    },
    /// A packet could not be encoded.
    #[error("{call}: {source}")]
    Cmd {
        /// The API call.
        call: &'static str,
        /// Why.
        source: CmdError,
    },
    /// A module or launch problem.
    #[error("{call}: {source}")]
    Launch {
        /// The API call.
        call: &'static str,
        /// Why.
        source: LaunchError,
    },
    /// An invalid argument or object state.
    #[error("{call}: invalid argument: {what}")]
    Invalid {
        /// The API call.
        call: &'static str,
        /// What is wrong.
        what: String,
    },
    /// The context was lost (sticky): a fault, hang, reset or device loss.
    #[error("{call} (context {ctx}): {reason}")]
    Lost {
        /// The API call.
        call: &'static str,
        /// The KMD context whose work was lost.
        ctx: u32,
        /// The device's reason.
        reason: LostReason,
    },
}

/// Result type of the UMD.
pub type Result<T> = std::result::Result<T, Error>;

/// Where an error happened: the packet, decoded, and where it sits in
/// what was submitted (from `CTX_QUERY`'s `error_*`), with the device
/// sanitizer's latest report about the context, if it runs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ErrorPlace {
    /// GPU VA of the packet.
    pub packet_va: u64,
    /// Its header word (0 if none was read).
    pub header: u32,
    /// Engine (`ENGINE_*`).
    pub engine: u32,
    /// The SUBMIT (fence seqno) that held it (0: unknown).
    pub seqno: u64,
    /// Index of its command buffer in that SUBMIT (`None`: a KMD packet).
    pub cmd_index: Option<u32>,
    /// Its byte offset in that command buffer.
    pub cmd_offset: u32,
    /// Indirect depth (0: the ring, 1: the submitted buffer, 2+: nested).
    pub depth: u32,
    /// The packet as text (hwif's), read back from the command buffer when
    /// the UMD still holds it, else its header decoded.
    pub packet: String,
    /// The device sanitizer's latest report about this context, one line.
    pub sanitizer: Option<String>,
}

impl fmt::Display for ErrorPlace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "at packet {:#x} [{}] on the {} engine",
            self.packet_va,
            self.packet,
            if self.engine == uapi::ENGINE_COMPUTE {
                "compute"
            } else {
                "copy"
            }
        )?;
        if self.seqno != 0 {
            write!(f, ", SUBMIT seqno {}", self.seqno)?;
        }
        match self.cmd_index {
            Some(i) if self.depth <= 1 => {
                write!(f, ", command buffer {i} +{:#x}", self.cmd_offset)?
            }
            Some(i) => write!(
                f,
                ", command buffer {i} +{:#x} (INDIRECT to a buffer nested {} deep)",
                self.cmd_offset, self.depth
            )?,
            None if self.packet_va != 0 => write!(f, ", a packet the KMD wrote")?,
            None => {}
        }
        if let Some(s) = &self.sanitizer {
            write!(f, "; sanitizer: {s}")?;
        }
        Ok(())
    }
}

/// Why a context stopped working (sticky: every later call reports it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LostReason {
    /// This context's work faulted on a GPU address.
    PageFault {
        /// Faulting GPU VA.
        va: u64,
        /// `VGPU_ACCESS_*`.
        access: u32,
        /// hwif `mmu::FaultReason` number.
        reason: u32,
        /// The packet that faulted.
        at: Option<Box<ErrorPlace>>,
    },
    /// This context's work hung and was reset.
    Hang {
        /// Hangs the context caused.
        hangs: u32,
    },
    /// Banned after too many hangs.
    Banned,
    /// A reset caused by another context destroyed this context's work.
    Innocent,
    /// The engine stopped the ring (bad packet, an operation the device
    /// does not support, a kernel `TRAP`).
    EngineError {
        /// hwif `packet::EngineError` number from `CTX_QUERY` (0: unknown).
        code: u32,
        /// The packet the engine stopped at.
        at: Option<Box<ErrorPlace>>,
    },
    /// The device is wedged or broken (`EIO` with no context state).
    Wedged,
    /// The device stopped answering and the driver declared it lost.
    DeviceLost,
    /// The device was removed (`ENODEV`).
    Removed,
}

impl fmt::Display for LostReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            LostReason::PageFault {
                va,
                access,
                reason,
                ref at,
            } => {
                write!(
                    f,
                    "context reset (guilty): GPU page fault, {} at {va:#x} ({}, fault reason {reason})",
                    match access {
                        uapi::ACCESS_READ => "read",
                        uapi::ACCESS_WRITE => "write",
                        uapi::ACCESS_EXECUTE => "execute",
                        uapi::ACCESS_ATOMIC => "atomic",
                        _ => "access",
                    },
                    vgpu_hwif::mmu::FaultReason::from_u8(reason as u8).map_or("?", |r| r.name())
                )?;
                match at {
                    Some(p) => write!(f, ", {p}"),
                    None => Ok(()),
                }
            }
            LostReason::Hang { hangs } => {
                write!(f, "context reset (guilty): GPU hang ({hangs} so far)")
            }
            LostReason::Banned => write!(f, "context banned after repeated hangs"),
            LostReason::Innocent => write!(
                f,
                "context reset (innocent): another context's reset lost this work"
            ),
            LostReason::EngineError { code, ref at } => {
                write!(f, "context errored: the engine rejected a command")?;
                match vgpu_hwif::packet::EngineError::from_u32(code) {
                    Some(e) => write!(f, ": {} (engine error {code})", e.name())?,
                    None if code != 0 => write!(f, " (engine error {code})")?,
                    None => {}
                }
                match at {
                    Some(p) => write!(f, " {p}"),
                    None => Ok(()),
                }
            }
            LostReason::Wedged => write!(f, "device lost: wedged"),
            LostReason::DeviceLost => write!(f, "device lost: it stopped answering"),
            LostReason::Removed => write!(f, "device lost: removed"),
        }
    }
}

/// Launch and module errors.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum LaunchError {
    /// The image is not a valid module for this device.
    #[error("invalid module: {0}")]
    BadModule(String),
    /// No kernel of that name.
    #[error("no kernel named {0:?} in the module")]
    NoKernel(String),
    /// Wrong number of arguments.
    #[error("kernel {kernel}: {given} arguments given, {expected} expected")]
    ArgCount {
        /// Kernel.
        kernel: String,
        /// Given.
        given: usize,
        /// Expected.
        expected: usize,
    },
    /// An argument of the wrong type.
    #[error("kernel {kernel}: argument {index} ({name}) is {expected}, got {given}")]
    ArgType {
        /// Kernel.
        kernel: String,
        /// Position.
        index: usize,
        /// Name in the module.
        name: String,
        /// Declared kind.
        expected: &'static str,
        /// Given kind.
        given: &'static str,
    },
    /// Grid or workgroup size out of range.
    #[error("bad launch shape: {0}")]
    Shape(String),
}
