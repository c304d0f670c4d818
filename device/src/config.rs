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

    /// The firmware version this generation ships,
    /// `(major << 16) | (minor << 8) | patch`.
    pub const fn firmware_version(self) -> u32 {
        match self {
            // 1.3.0
            Generation::Gen1 => firmware_version(1, 3, 0),
            // 2.0.1
            Generation::Gen2 => firmware_version(2, 0, 1),
        }
    }
}

impl std::fmt::Display for Generation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "gen {}", self.number())
    }
}

/// Packs a firmware version as reported in `IDENTIFY`.
pub const fn firmware_version(major: u8, minor: u8, patch: u8) -> u32 {
    ((major as u32) << 16) | ((minor as u32) << 8) | patch as u32
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
        })
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
        assert_ne!(
            Generation::Gen1.firmware_version(),
            Generation::Gen2.firmware_version()
        );
        assert_eq!(Generation::Gen1.firmware_version(), 0x01_03_00);
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
