//! A firmware source: the TOML the tree keeps for each generation
//! (`firmware/src/gen1.toml`, `gen2.toml`), checked and turned into an
//! image (the format of docs/hardware.md section 15).
//!
//! ```toml
//! version = "2.1.0"                          # header.version
//! generations = [2]                          # header.generations
//! features = ["user-queues", "preemption"]   # header.features
//! interface = { min = "0.2", max = "0.2" }   # header.interface_min, _max
//! build = "vgpu-gen2-2.1.0"                  # header.build
//! notes = "free text"                        # NOTES (optional)
//! [sched]                                    # SCHED, required
//! slice_us = { low = 1000, normal = 2000, high = 4000 }
//! preempt_timeout_us = 10000
//! policy = "priority"                        # or "round-robin"
//! [packets]                                  # PACKETS, required
//! gen1 = "all"                               # or a list of opcode names
//! gen2 = ["NOP", "FENCE"]
//! [heartbeat]                                # HEARTBEAT (optional)
//! period_ms = 100
//! [log]                                      # LOG (optional)
//! size = 16384
//! ```

use serde::{Deserialize, Serialize};
use vgpu_hwif::firmware::{
    build, section, words_bytes, FwHeader, FW_FORMAT, FW_MAGIC, FW_MAX_SIZE, FW_SECTION_REQUIRED,
};

use crate::error::Error;
use crate::packets::GENERATIONS;
use crate::raw;

mod parts;

pub use parts::{Feature, Heartbeat, Interface, Log, PacketSet, Packets, Policy, Sched, Slices};

/// Longest heartbeat period, ms.
pub const MAX_HEARTBEAT_MS: u32 = 10_000;
/// Smallest firmware log, bytes.
pub const MIN_LOG_SIZE: u32 = 4 << 10;
/// Largest firmware log, bytes.
pub const MAX_LOG_SIZE: u32 = 1 << 20;

/// A firmware source, as its TOML reads. Every key is required but
/// `notes`, `heartbeat` and `log`; an unknown key is an error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Source {
    /// The firmware's version, `major.minor.patch` (each 0..=255).
    pub version: String,
    /// The generations the image runs on.
    pub generations: Vec<u32>,
    /// The features it enables.
    pub features: Vec<Feature>,
    /// The driver-interface versions it serves.
    pub interface: Interface,
    /// The build id: up to 16 printable ASCII characters.
    pub build: String,
    /// Text for the `NOTES` section.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notes: Option<String>,
    /// The `SCHED` section.
    pub sched: Sched,
    /// The `PACKETS` section.
    pub packets: Packets,
    /// The `HEARTBEAT` section.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat: Option<Heartbeat>,
    /// The `LOG` section.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<Log>,
}

/// `"major.minor.patch"` as `(major << 16) | (minor << 8) | patch`.
///
/// # Errors
///
/// [`Error::Version`] unless three decimal parts of 0..=255.
pub fn parse_version(s: &str) -> Result<u32, Error> {
    let parts = decimal_parts(s, 3, u32::from(u8::MAX)).ok_or_else(|| Error::Version(s.into()))?;
    Ok((parts[0] << 16) | (parts[1] << 8) | parts[2])
}

/// `"major.minor"` as `(major << 16) | minor` (`limits::PROTOCOL_VERSION`'s
/// form).
///
/// # Errors
///
/// [`Error::Interface`] unless two decimal parts of 0..=65535.
pub fn parse_interface(s: &str) -> Result<u32, Error> {
    let parts =
        decimal_parts(s, 2, u32::from(u16::MAX)).ok_or_else(|| Error::Interface(s.into()))?;
    Ok((parts[0] << 16) | parts[1])
}

fn decimal_parts(s: &str, n: usize, max: u32) -> Option<Vec<u32>> {
    let parts: Vec<u32> = s
        .split('.')
        .map(|p| {
            let digits = !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit());
            digits
                .then(|| p.parse().ok())
                .flatten()
                .filter(|&v| v <= max)
        })
        .collect::<Option<_>>()?;
    (parts.len() == n).then_some(parts)
}

/// A section of an image being built: kind, flags, bytes.
type Section = (u32, u32, Vec<u8>);

impl Source {
    /// Reads and checks a source.
    ///
    /// # Errors
    ///
    /// [`Error::Toml`] for TOML that is not a source (a key missing or
    /// unknown, a value of the wrong type), else the first value out of
    /// range (see [`Source::image`]).
    pub fn parse(text: &str) -> Result<Source, Error> {
        let src: Source = toml::from_str(text).map_err(|e| Error::from_toml(&e, text))?;
        src.image()?;
        Ok(src)
    }

    /// The `generations` mask (bit `g - 1` for generation `g`).
    ///
    /// # Errors
    ///
    /// [`Error::NoGeneration`], [`Error::Generation`].
    pub fn generation_mask(&self) -> Result<u32, Error> {
        if self.generations.is_empty() {
            return Err(Error::NoGeneration);
        }
        self.generations.iter().try_fold(0, |m, &g| {
            if GENERATIONS.contains(&g) {
                Ok(m | (1 << (g - 1)))
            } else {
                Err(Error::Generation(g))
            }
        })
    }

    /// The header the image starts with (its `section_count`,
    /// `image_size` and `crc32` zero: [`build`] fills them in).
    ///
    /// # Errors
    ///
    /// A version, generation, interface range or build id out of range.
    pub fn header(&self) -> Result<FwHeader, Error> {
        let version = parse_version(&self.version)?;
        let generations = self.generation_mask()?;
        let interface_min = parse_interface(&self.interface.min)?;
        let interface_max = parse_interface(&self.interface.max)?;
        if interface_min > interface_max {
            return Err(Error::InterfaceRange {
                min: self.interface.min.clone(),
                max: self.interface.max.clone(),
            });
        }
        let b = self.build.as_bytes();
        if b.len() > 16 || !b.iter().all(|&c| c.is_ascii_graphic() || c == b' ') {
            return Err(Error::Build(self.build.clone()));
        }
        Ok(FwHeader {
            magic: FW_MAGIC,
            format: FW_FORMAT,
            version,
            generations,
            features: self.features.iter().fold(0, |m, f| m | f.bit()),
            interface_min,
            interface_max,
            section_count: 0,
            image_size: 0,
            crc32: 0,
            build: raw::build_words(b),
            reserved: [0; 2],
        })
    }

    /// The sections, in image order: `SCHED` and `PACKETS` (both flagged
    /// `REQUIRED`), then `HEARTBEAT`, `LOG` and `NOTES` if the source has
    /// them.
    ///
    /// # Errors
    ///
    /// A zero slice, an opcode set that does not read, a heartbeat or log
    /// size out of range.
    pub fn sections(&self) -> Result<Vec<Section>, Error> {
        let s = &self.sched;
        for (name, v) in [
            ("low", s.slice_us.low),
            ("normal", s.slice_us.normal),
            ("high", s.slice_us.high),
        ] {
            if v == 0 {
                return Err(Error::ZeroSlice(name));
            }
        }
        let mut sched = vec![0; 24];
        words_bytes(
            [
                s.slice_us.low,
                s.slice_us.normal,
                s.slice_us.high,
                s.preempt_timeout_us,
                s.policy.value(),
                0,
            ],
            &mut sched,
        );
        let (g1, g2) = (self.packets.gen1.bitmap(1)?, self.packets.gen2.bitmap(2)?);
        let mut words = [0u32; 16];
        words[..8].copy_from_slice(&g1);
        words[8..].copy_from_slice(&g2);
        let mut pk = vec![0; 64];
        words_bytes(words, &mut pk);
        let mut out: Vec<Section> = vec![
            (section::SCHED, FW_SECTION_REQUIRED, sched),
            (section::PACKETS, FW_SECTION_REQUIRED, pk),
        ];
        if let Some(h) = self.heartbeat {
            if h.period_ms > MAX_HEARTBEAT_MS {
                return Err(Error::Heartbeat(h.period_ms));
            }
            let mut b = vec![0; 8];
            words_bytes([h.period_ms, 0], &mut b);
            out.push((section::HEARTBEAT, 0, b));
        }
        if let Some(l) = self.log {
            if !l.size.is_power_of_two() || !(MIN_LOG_SIZE..=MAX_LOG_SIZE).contains(&l.size) {
                return Err(Error::LogSize(l.size));
            }
            let mut b = vec![0; 8];
            words_bytes([l.size, 0], &mut b);
            out.push((section::LOG, 0, b));
        }
        if let Some(n) = &self.notes {
            out.push((section::NOTES, 0, n.as_bytes().to_vec()));
        }
        Ok(out)
    }

    /// The image (`vgpu_hwif::firmware::build` of [`Source::header`] and
    /// [`Source::sections`]).
    ///
    /// # Errors
    ///
    /// Any value out of range, [`Error::Image`] for an image over 64 KiB.
    pub fn image(&self) -> Result<Vec<u8>, Error> {
        let header = self.header()?;
        let sections = self.sections()?;
        let table: Vec<(u32, u32, &[u8])> =
            sections.iter().map(|(k, f, b)| (*k, *f, &b[..])).collect();
        let mut out = vec![0; FW_MAX_SIZE];
        let n = build(&mut out, &header, &table).map_err(Error::Image)?;
        out.truncate(n);
        Ok(out)
    }

    /// An alternative source for tests that load another image and must
    /// see the device behave otherwise: every slice halved (1 µs becomes
    /// 2), the version's patch plus one, user-mode queues disabled, build
    /// id `gen{N}-{version}-alt` (`gen{N}-alt` if that is too long).
    ///
    /// # Errors
    ///
    /// A version that does not read or whose patch is 255, a generation
    /// out of range.
    pub fn alternative(&self) -> Result<Source, Error> {
        let v = parse_version(&self.version)?;
        let (major, minor, patch) = (v >> 16, (v >> 8) & 0xff, v & 0xff);
        let version = format!("{major}.{minor}.{}", patch + 1);
        parse_version(&version)?;
        let mask = self.generation_mask()?;
        let g = raw::lowest_generation(mask).unwrap_or(1);
        let mut build = format!("gen{g}-{version}-alt");
        if build.len() > 16 {
            build = format!("gen{g}-alt");
        }
        let half = |s: u32| if s > 1 { s / 2 } else { 2 };
        let mut alt = self.clone();
        alt.version = version;
        alt.sched.slice_us = Slices {
            low: half(self.sched.slice_us.low),
            normal: half(self.sched.slice_us.normal),
            high: half(self.sched.slice_us.high),
        };
        alt.features.retain(|f| *f != Feature::UserQueues);
        alt.notes = Some(format!(
            "alternative image for tests ({}): slices halved, no user-mode queues",
            self.build
        ));
        alt.build = build;
        Ok(alt)
    }
}
