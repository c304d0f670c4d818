//! Static configuration of one device instance: hardware generation and the
//! sizes chosen on the command line.

use vgpu_hwif::proto::GENERATIONS;
pub use vgpu_isa::jit::JitMode;

/// Errors of this module.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The generation number is not one of [`GENERATIONS`].
    #[error("unknown hardware generation {0} (supported: 1, 2)")]
    UnknownGeneration(u32),
    /// The compute unit count is outside [`COMPUTE_UNITS_RANGE`].
    #[error("compute units {0} out of range {min}..={max}", min = COMPUTE_UNITS_RANGE.start(), max = COMPUTE_UNITS_RANGE.end())]
    ComputeUnits(u32),
    /// VRAM or aperture sizes the device refuses.
    #[error("VRAM of {size} bytes with {visible} visible: {why} (VRAM is 0 or at least 4 MiB, both sizes multiples of 2 MiB, the visible part at most VRAM less the firmware's 2 MiB)")]
    Vram {
        /// `--vram`.
        size: u64,
        /// `--visible-vram`.
        visible: u64,
        /// Which rule.
        why: &'static str,
    },
    /// An unknown `--vram-on-reset` policy.
    #[error("unknown VRAM reset policy {0:?} (keep, zero, garbage)")]
    VramPolicy(String),
    /// An unknown `--boot` mode.
    #[error("unknown boot mode {0:?} (driver, preloaded)")]
    Boot(String),
    /// A virtual function's partition the device cannot give.
    #[error("virtual function {vf}: {why}")]
    Partition {
        /// The VF number (from 1).
        vf: u32,
        /// Which rule.
        why: String,
    },
}

/// A virtual function's share of the device (docs/hardware.md section 17):
/// set when the device is one VF of a partitioned GPU, `None` for the
/// whole device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionConfig {
    /// The VF number, from 1 (`IDENTIFY` reports it).
    pub vf: u32,
    /// Contexts it may create: ids `0..contexts`.
    pub contexts: u32,
    /// Where its VRAM window starts in the device's VRAM (its VRAM offset
    /// 0); the window's size is the VF's `vram.layout.size`.
    pub vram_offset: u64,
    /// Its scheduling weight at creation (`1..=MAX_WEIGHT`).
    pub weight: u32,
}

/// Most virtual functions one device serves.
pub const MAX_VFS: u32 = 8;
/// Largest scheduling weight.
pub const MAX_WEIGHT: u32 = 100;

/// How the device powers on (`--boot`; docs/hardware.md section 15).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Boot {
    /// In its boot state: the driver loads and starts a firmware image.
    #[default]
    Driver,
    /// Running the in-tree firmware image of its generation at once, as if
    /// a boot ROM had loaded it (and again after every reset): for tools
    /// and drivers that predate the handshake.
    Preloaded,
}

impl Boot {
    /// Its name on the command line.
    pub const fn name(self) -> &'static str {
        match self {
            Boot::Driver => "driver",
            Boot::Preloaded => "preloaded",
        }
    }
}

impl std::str::FromStr for Boot {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Boot, ConfigError> {
        match s {
            "driver" => Ok(Boot::Driver),
            "preloaded" => Ok(Boot::Preloaded),
            _ => Err(ConfigError::Boot(s.to_owned())),
        }
    }
}

/// What a device reset does to VRAM (`--vram-on-reset`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum VramOnReset {
    /// Contents kept.
    Keep,
    /// Contents lost; VRAM reads as zero.
    Zero,
    /// Contents lost; pages the GPU had touched hold garbage (the default:
    /// what a deep reset of a discrete GPU leaves).
    Garbage,
}

impl VramOnReset {
    /// The policy named `s` (`keep`, `zero`, `garbage`).
    pub fn parse(s: &str) -> Result<VramOnReset, ConfigError> {
        match s {
            "keep" => Ok(VramOnReset::Keep),
            "zero" => Ok(VramOnReset::Zero),
            "garbage" => Ok(VramOnReset::Garbage),
            other => Err(ConfigError::VramPolicy(other.to_owned())),
        }
    }

    /// The policy's name on the command line.
    pub const fn name(self) -> &'static str {
        match self {
            VramOnReset::Keep => "keep",
            VramOnReset::Zero => "zero",
            VramOnReset::Garbage => "garbage",
        }
    }

    /// The [`vgpu_hwif::vram::state`] value a reset with this policy
    /// reports.
    pub const fn state(self) -> u32 {
        match self {
            VramOnReset::Keep => vgpu_hwif::vram::state::KEPT,
            VramOnReset::Zero => vgpu_hwif::vram::state::ZEROED,
            VramOnReset::Garbage => vgpu_hwif::vram::state::GARBAGE,
        }
    }
}

/// The device's memory: VRAM size, its CPU-visible part, and what a device
/// reset does to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VramConfig {
    /// The layout (sizes checked).
    pub layout: vgpu_hwif::vram::Layout,
    /// Device reset policy.
    pub on_reset: VramOnReset,
}

impl VramConfig {
    /// A checked configuration: `size` bytes of VRAM (0: none), `visible`
    /// of them CPU-visible.
    pub fn new(size: u64, visible: u64, on_reset: VramOnReset) -> Result<VramConfig, ConfigError> {
        use vgpu_hwif::vram::{Layout, LayoutError};
        let layout = Layout::new(size, visible).map_err(|e| ConfigError::Vram {
            size,
            visible,
            why: match e {
                LayoutError::TooSmall => "too small",
                LayoutError::Unaligned => "not a multiple of 2 MiB",
                LayoutError::VisibleTooLarge => "visible part larger than usable VRAM",
            },
        })?;
        Ok(VramConfig { layout, on_reset })
    }

    /// No VRAM: an integrated GPU.
    pub fn none() -> VramConfig {
        VramConfig {
            layout: vgpu_hwif::vram::Layout::NONE,
            on_reset: VramOnReset::Keep,
        }
    }
}

impl Default for VramConfig {
    /// 512 MiB, 128 MiB visible, garbage after a device reset.
    fn default() -> Self {
        use vgpu_hwif::vram::{DEFAULT_VISIBLE, DEFAULT_VRAM};
        VramConfig::new(DEFAULT_VRAM, DEFAULT_VISIBLE, VramOnReset::Garbage)
            .unwrap_or_else(|_| VramConfig::none())
    }
}

/// Compute unit counts the device can be configured with.
pub const COMPUTE_UNITS_RANGE: std::ops::RangeInclusive<u32> = 1..=1024;

/// Default number of compute units.
pub const DEFAULT_COMPUTE_UNITS: u32 = 4;

/// Default time the doorbell watcher polls after the last activity.
pub const DEFAULT_DOORBELL_POLL: std::time::Duration = std::time::Duration::from_millis(2);

/// A hardware generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Generation {
    /// Generation 1.
    Gen1,
    /// Generation 2.
    Gen2,
}

impl Generation {
    /// The generation with this number (one of [`GENERATIONS`]).
    pub fn from_number(n: u32) -> Result<Generation, ConfigError> {
        match n {
            1 => Ok(Generation::Gen1),
            2 => Ok(Generation::Gen2),
            other => Err(ConfigError::UnknownGeneration(other)),
        }
    }

    /// The generation number reported in `IDENTIFY`.
    pub const fn number(self) -> u32 {
        match self {
            Generation::Gen1 => GENERATIONS[0],
            Generation::Gen2 => GENERATIONS[1],
        }
    }
}

impl std::fmt::Display for Generation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "gen {}", self.number())
    }
}

/// Everything that distinguishes one device instance from another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceConfig {
    /// Hardware generation.
    pub generation: Generation,
    /// Compute units of the compute engine (reported by `IDENTIFY`).
    pub compute_units: u32,
    /// Record a packet trace (`--trace`).
    pub trace: bool,
    /// Which engine runs kernels (`--jit`).
    pub jit: JitMode,
    /// How long the doorbell watcher polls watched doorbell blocks after
    /// the last activity before it sleeps (`--doorbell-poll-us`).
    pub doorbell_poll: std::time::Duration,
    /// Device memory (`--vram`, `--visible-vram`, `--vram-on-reset`).
    pub vram: VramConfig,
    /// How it powers on (`--boot`).
    pub boot: Boot,
    /// The VF's partition when this device is a virtual function.
    pub partition: Option<PartitionConfig>,
}

impl DeviceConfig {
    /// A checked configuration.
    pub fn new(generation: Generation, compute_units: u32) -> Result<DeviceConfig, ConfigError> {
        if !COMPUTE_UNITS_RANGE.contains(&compute_units) {
            return Err(ConfigError::ComputeUnits(compute_units));
        }
        Ok(DeviceConfig {
            generation,
            compute_units,
            trace: false,
            jit: JitMode::Auto,
            doorbell_poll: DEFAULT_DOORBELL_POLL,
            vram: VramConfig::default(),
            boot: Boot::Driver,
            partition: None,
        })
    }

    /// The same configuration, powering on as `boot`.
    pub fn with_boot(self, boot: Boot) -> DeviceConfig {
        DeviceConfig { boot, ..self }
    }

    /// The same configuration with device memory `vram`.
    pub fn with_vram(self, vram: VramConfig) -> DeviceConfig {
        DeviceConfig { vram, ..self }
    }

    /// The same configuration as virtual function `p`'s (its VRAM
    /// configuration is set apart, with [`DeviceConfig::with_vram`]).
    pub fn with_partition(self, p: PartitionConfig) -> DeviceConfig {
        DeviceConfig {
            partition: Some(p),
            ..self
        }
    }

    /// The contexts it may create (all of them for the whole device).
    pub fn max_contexts(&self) -> u32 {
        self.partition
            .map_or(vgpu_hwif::proto::MAX_CONTEXTS, |p| p.contexts)
    }

    /// The same configuration, recording a packet trace if `on`.
    pub fn with_trace(self, on: bool) -> DeviceConfig {
        DeviceConfig { trace: on, ..self }
    }

    /// The same configuration, running kernels as `jit` says.
    pub fn with_jit(self, jit: JitMode) -> DeviceConfig {
        DeviceConfig { jit, ..self }
    }

    /// The same configuration, the doorbell watcher polling for `poll`
    /// after the last activity.
    pub fn with_doorbell_poll(self, poll: std::time::Duration) -> DeviceConfig {
        DeviceConfig {
            doorbell_poll: poll,
            ..self
        }
    }
}

impl Default for DeviceConfig {
    fn default() -> Self {
        DeviceConfig {
            generation: Generation::Gen1,
            compute_units: DEFAULT_COMPUTE_UNITS,
            trace: false,
            jit: JitMode::Auto,
            doorbell_poll: DEFAULT_DOORBELL_POLL,
            vram: VramConfig::default(),
            boot: Boot::Driver,
            partition: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generations_round_trip_and_differ() {
        for n in GENERATIONS {
            assert_eq!(Generation::from_number(n).map(Generation::number), Ok(n));
        }
        assert_eq!(
            Generation::from_number(3),
            Err(ConfigError::UnknownGeneration(3))
        );
        assert_eq!("preloaded".parse::<Boot>(), Ok(Boot::Preloaded));
        assert_eq!(Boot::Driver.name().parse::<Boot>(), Ok(Boot::Driver));
        assert!("rom".parse::<Boot>().is_err());
    }

    #[test]
    fn vram_sizes_and_policies_are_checked() {
        let v = VramConfig::default();
        assert_eq!((v.layout.size, v.layout.visible), (512 << 20, 128 << 20));
        assert_eq!(v.on_reset, VramOnReset::Garbage);
        assert!(VramConfig::new(3 << 20, 0, VramOnReset::Keep).is_err());
        assert!(VramConfig::new(64 << 20, 64 << 20, VramOnReset::Keep).is_err());
        assert_eq!(VramConfig::none().layout.size, 0);
        assert_eq!(VramOnReset::parse("zero"), Ok(VramOnReset::Zero));
        assert!(VramOnReset::parse("lost").is_err());
    }

    #[test]
    fn compute_units_are_checked() {
        assert!(DeviceConfig::new(Generation::Gen2, 1).is_ok());
        assert_eq!(
            DeviceConfig::new(Generation::Gen2, 0),
            Err(ConfigError::ComputeUnits(0))
        );
        assert_eq!(
            DeviceConfig::new(Generation::Gen1, 1025),
            Err(ConfigError::ComputeUnits(1025))
        );
    }
}
