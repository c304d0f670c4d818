//! Tunables, read once from the environment when a [`crate::Context`] is
//! created. Every field has a documented default (see `docs/umd.md`), so a
//! hypothesis can be tested without rebuilding.

use std::path::PathBuf;

/// A malformed environment variable.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    /// Not a number (with an optional K/M/G suffix for sizes).
    #[error("environment variable {var}={value:?}: not a number")]
    NotANumber {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
    },
    /// Outside the accepted range.
    #[error("environment variable {var}={value}: must be in {min}..={max}")]
    OutOfRange {
        /// The variable.
        var: &'static str,
        /// The parsed value.
        value: u64,
        /// Smallest accepted value.
        min: u64,
        /// Largest accepted value.
        max: u64,
    },
    /// Not one of the accepted words.
    #[error("environment variable {var}={value:?}: must be one of {choices}")]
    NotAChoice {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
        /// The accepted words, separated by `|`.
        choices: &'static str,
    },
}

/// How [`crate::Stream::read`] moves device memory into the caller's bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReadPath {
    /// The CPU copies straight from the buffer's own mapping once the
    /// stream's work is done: one copy, by the CPU.
    Direct,
    /// The copy engine moves the data into host-visible staging blocks, the
    /// CPU copies them out: two copies, but every byte is read by the
    /// device (its faults and memory errors included).
    Staged,
    /// The caller's memory is pinned and mapped for the device (`HOST_MAP`)
    /// and the copy engine writes straight into it: one copy, by the
    /// device, and the device reads every byte. The default; reads smaller
    /// than [`crate::hostmap::MAPPED_READ_MIN`] go staged (pinning and
    /// mapping cost more than copying them), and so does a read the KMD
    /// refuses to map.
    #[default]
    Mapped,
}

/// How streams submit their batches.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SubmitPath {
    /// A `SUBMIT` ioctl per batch; the KMD writes its ring. Every stream
    /// feature works this way (sync objects, sync_file export, implicit
    /// synchronisation).
    #[default]
    Ioctl,
    /// User-mode queues: the stream writes its batches into rings of its
    /// own and publishes them through doorbell blocks, with no system call
    /// (`crate::uq`). Streams cannot then wait for or signal sync objects,
    /// nor export their events as sync_files.
    User,
}

/// The UMD's tunables.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// `VGPU_CMDBUF_SIZE` (default 128 KiB, 4 KiB..=1 MiB, rounded up to
    /// 4 KiB): bytes of one command buffer. A batch that fills one chains
    /// into the next (another command-buffer entry of the same SUBMIT).
    pub cmdbuf_size: u64,
    /// `VGPU_CMDBUF_MAX` (default 64, 2..=4096): command buffers a context
    /// keeps at most. When every one is in flight, taking another waits for
    /// the fence of the one submitted longest ago instead of allocating.
    pub cmdbuf_max: u32,
    /// `VGPU_BATCH_OPS` (default 256, 1..=65536): operations a stream batches
    /// before it submits on its own; sync points submit earlier.
    pub batch_ops: u32,
    /// `VGPU_SPIN_US` (default 200, 0..=1000000): a fence wait first spins on
    /// the fence's memory for this long (0: it does not look at it at all).
    pub spin_us: u64,
    /// `VGPU_POLL_US` (default 2000, 0..=10000000): then polls with
    /// exponential backoff sleeps for this long.
    pub poll_us: u64,
    /// `VGPU_POLL_MAX_SLEEP_US` (default 100, 1..=100000): longest single
    /// backoff sleep.
    pub poll_max_sleep_us: u64,
    /// `VGPU_POOL_CACHE` (default 64 MiB, 0..=16 GiB): bytes of freed large
    /// (> 64 KiB) buffers kept for reuse; beyond it they are released.
    pub pool_cache: u64,
    /// `VGPU_DUMP`: `1` dumps every submitted command buffer to
    /// `/tmp/vgpu-dump.<pid>`, any other non-empty value names the file.
    /// `0` or unset: off.
    pub dump: Option<PathBuf>,
    /// `VGPU_READ` (default `mapped`, or `staged`, `direct`): the path of
    /// device-to-host reads ([`ReadPath`]).
    pub read: ReadPath,
    /// `VGPU_SUBMIT` (default `ioctl`, or `user`): how streams submit
    /// ([`SubmitPath`]).
    pub submit: SubmitPath,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            cmdbuf_size: 128 << 10,
            cmdbuf_max: 64,
            batch_ops: 256,
            spin_us: 200,
            poll_us: 2000,
            poll_max_sleep_us: 100,
            pool_cache: 64 << 20,
            dump: None,
            read: ReadPath::Mapped,
            submit: SubmitPath::Ioctl,
        }
    }
}

/// Parses `123`, `4K`, `2M`, `1G` (binary multiples), or `0x..`.
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mul) = match s.chars().last()? {
        'k' | 'K' => (&s[..s.len() - 1], 1u64 << 10),
        'm' | 'M' => (&s[..s.len() - 1], 1 << 20),
        'g' | 'G' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    let v = if let Some(h) = num.strip_prefix("0x") {
        u64::from_str_radix(h, 16).ok()?
    } else {
        num.parse::<u64>().ok()?
    };
    v.checked_mul(mul)
}

impl Config {
    /// Reads the process environment.
    pub fn from_env() -> Result<Config, ConfigError> {
        Config::from_lookup(|k| std::env::var(k).ok())
    }

    /// Reads variables through `get` (the environment, or a test's map).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let d = Config::default();
        let num = |var: &'static str, def: u64, min: u64, max: u64| -> Result<u64, ConfigError> {
            let Some(raw) = get(var).filter(|v| !v.trim().is_empty()) else {
                return Ok(def);
            };
            let value = parse_size(&raw).ok_or(ConfigError::NotANumber { var, value: raw })?;
            if value < min || value > max {
                return Err(ConfigError::OutOfRange {
                    var,
                    value,
                    min,
                    max,
                });
            }
            Ok(value)
        };
        let cmdbuf_size =
            num("VGPU_CMDBUF_SIZE", d.cmdbuf_size, 4 << 10, 1 << 20)?.div_ceil(4096) * 4096;
        let dump = match get("VGPU_DUMP").as_deref().map(str::trim) {
            None | Some("") | Some("0") => None,
            Some("1") => Some(PathBuf::from(format!(
                "/tmp/vgpu-dump.{}",
                std::process::id()
            ))),
            Some(p) => Some(PathBuf::from(p)),
        };
        let read = match get("VGPU_READ").as_deref().map(str::trim) {
            None | Some("") | Some("mapped") => ReadPath::Mapped,
            Some("staged") => ReadPath::Staged,
            Some("direct") => ReadPath::Direct,
            Some(v) => {
                return Err(ConfigError::NotAChoice {
                    var: "VGPU_READ",
                    value: v.to_string(),
                    choices: "mapped|staged|direct",
                })
            }
        };
        let submit = match get("VGPU_SUBMIT").as_deref().map(str::trim) {
            None | Some("") | Some("ioctl") => SubmitPath::Ioctl,
            Some("user") => SubmitPath::User,
            Some(v) => {
                return Err(ConfigError::NotAChoice {
                    var: "VGPU_SUBMIT",
                    value: v.to_string(),
                    choices: "ioctl|user",
                })
            }
        };
        Ok(Config {
            cmdbuf_size,
            cmdbuf_max: num("VGPU_CMDBUF_MAX", u64::from(d.cmdbuf_max), 2, 4096)? as u32,
            batch_ops: num("VGPU_BATCH_OPS", u64::from(d.batch_ops), 1, 65536)? as u32,
            spin_us: num("VGPU_SPIN_US", d.spin_us, 0, 1_000_000)?,
            poll_us: num("VGPU_POLL_US", d.poll_us, 0, 10_000_000)?,
            poll_max_sleep_us: num("VGPU_POLL_MAX_SLEEP_US", d.poll_max_sleep_us, 1, 100_000)?,
            pool_cache: num("VGPU_POOL_CACHE", d.pool_cache, 0, 16 << 30)?,
            dump,
            read,
            submit,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn cfg(pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_lookup(|k| m.get(k).cloned())
    }

    #[test]
    fn defaults_when_unset() {
        assert_eq!(cfg(&[]).unwrap(), Config::default());
        assert_eq!(cfg(&[("VGPU_SPIN_US", " ")]).unwrap(), Config::default());
    }

    #[test]
    fn sizes_and_suffixes() {
        assert_eq!(parse_size("64K"), Some(65536));
        assert_eq!(parse_size("2m"), Some(2 << 20));
        assert_eq!(parse_size("0x10"), Some(16));
        assert_eq!(parse_size("x"), None);
        assert_eq!(parse_size(""), None);
        let c = cfg(&[("VGPU_CMDBUF_SIZE", "65K"), ("VGPU_SPIN_US", "0")]).unwrap();
        assert_eq!(c.cmdbuf_size, 68 << 10, "rounded up to 4 KiB");
        assert_eq!(c.spin_us, 0);
    }

    #[test]
    fn rejects_bad_values() {
        assert_eq!(
            cfg(&[("VGPU_CMDBUF_SIZE", "1K")]),
            Err(ConfigError::OutOfRange {
                var: "VGPU_CMDBUF_SIZE",
                value: 1024,
                min: 4096,
                max: 1 << 20
            })
        );
        assert!(matches!(
            cfg(&[("VGPU_BATCH_OPS", "many")]),
            Err(ConfigError::NotANumber {
                var: "VGPU_BATCH_OPS",
                ..
            })
        ));
        let e = cfg(&[("VGPU_BATCH_OPS", "0")]).unwrap_err().to_string();
        assert!(e.contains("VGPU_BATCH_OPS=0"), "{e}");
    }

    #[test]
    fn dump_path() {
        assert_eq!(cfg(&[("VGPU_DUMP", "0")]).unwrap().dump, None);
        assert_eq!(
            cfg(&[("VGPU_DUMP", "/tmp/x")]).unwrap().dump,
            Some(PathBuf::from("/tmp/x"))
        );
        assert!(cfg(&[("VGPU_DUMP", "1")]).unwrap().dump.is_some());
    }

    #[test]
    fn read_path() {
        assert_eq!(cfg(&[]).unwrap().read, ReadPath::Mapped);
        assert_eq!(
            cfg(&[("VGPU_READ", "mapped")]).unwrap().read,
            ReadPath::Mapped
        );
        assert_eq!(
            cfg(&[("VGPU_READ", "staged")]).unwrap().read,
            ReadPath::Staged
        );
        assert_eq!(
            cfg(&[("VGPU_READ", " direct ")]).unwrap().read,
            ReadPath::Direct
        );
        let e = cfg(&[("VGPU_READ", "dma")]).unwrap_err();
        assert!(matches!(
            e,
            ConfigError::NotAChoice {
                var: "VGPU_READ",
                ..
            }
        ));
        assert!(e.to_string().contains("mapped|staged|direct"), "{e}");
    }

    #[test]
    fn submit_path() {
        assert_eq!(cfg(&[]).unwrap().submit, SubmitPath::Ioctl);
        assert_eq!(
            cfg(&[("VGPU_SUBMIT", "user")]).unwrap().submit,
            SubmitPath::User
        );
        assert!(matches!(
            cfg(&[("VGPU_SUBMIT", "ring")]),
            Err(ConfigError::NotAChoice {
                var: "VGPU_SUBMIT",
                ..
            })
        ));
    }
}
