//! Why a firmware source is refused.

use vgpu_hwif::firmware::FwError;

/// Why a firmware source (TOML) does not make an image. Every message is
/// one line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// Not TOML, a key missing or unknown, or a value of the wrong type.
    #[error("line {line}, column {column}: {message}")]
    Toml {
        /// Line of the problem (1-based).
        line: usize,
        /// Column of the problem (1-based).
        column: usize,
        /// What is wrong.
        message: String,
    },
    /// `version` is not `major.minor.patch` with parts 0..=255.
    #[error("version {0:?}: want major.minor.patch, each part 0..=255")]
    Version(String),
    /// An `interface` bound is not `major.minor` with parts 0..=65535.
    #[error("interface version {0:?}: want major.minor, each part 0..=65535")]
    Interface(String),
    /// `interface.min` is above `interface.max`.
    #[error("interface range {min}..={max} is empty: min is above max")]
    InterfaceRange {
        /// The lower bound as written.
        min: String,
        /// The upper bound as written.
        max: String,
    },
    /// `generations` is empty.
    #[error("generations is empty: name at least one")]
    NoGeneration,
    /// A generation the interface does not know.
    #[error("generation {0}: not a vgpu generation (1 or 2)")]
    Generation(u32),
    /// `build` is longer than 16 bytes or not printable ASCII.
    #[error("build {0:?}: want up to 16 printable ASCII characters")]
    Build(String),
    /// A time slice of zero.
    #[error("sched.slice_us.{0} is 0: a slice must be at least 1 µs")]
    ZeroSlice(&'static str),
    /// `packets.genN` is a word other than `"all"`.
    #[error("packets.gen{generation} = {word:?}: want \"all\" or a list of opcode names")]
    PacketWord {
        /// The generation whose set it is.
        generation: u32,
        /// The word written.
        word: String,
    },
    /// An opcode name the generation does not decode.
    #[error("packets.gen{generation}: {name:?} is not an opcode generation {generation} decodes")]
    Opcode {
        /// The generation whose set it is.
        generation: u32,
        /// The name written.
        name: String,
    },
    /// `heartbeat.period_ms` above 10000.
    #[error("heartbeat.period_ms = {0}: want 0..=10000")]
    Heartbeat(u32),
    /// `log.size` not a power of two from 4 KiB to 1 MiB.
    #[error("log.size = {0}: want a power of two from 4096 to 1048576")]
    LogSize(u32),
    /// The image cannot be built (too large, most likely long notes).
    #[error("the image cannot be built: {}", .0.text())]
    Image(FwError),
}

impl Error {
    /// A TOML error as one line, located in `text`.
    pub fn from_toml(e: &toml::de::Error, text: &str) -> Error {
        let at = e.span().map_or(0, |s| s.start).min(text.len());
        let before = text.get(..at).unwrap_or("");
        let line = before.matches('\n').count() + 1;
        let column = before.rfind('\n').map_or(before, |i| &before[i + 1..]);
        Error::Toml {
            line,
            column: column.chars().count() + 1,
            message: e.message().trim().replace('\n', "; "),
        }
    }
}
