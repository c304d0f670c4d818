//! The campaign file (TOML) and its expansion into an ordered list of runs.

use serde::{Deserialize, Serialize};

/// Why a campaign file was refused.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    /// The file could not be read.
    #[error("cannot read {0}: {1}")]
    Read(String, std::io::Error),
    /// The TOML does not parse or has unknown fields.
    #[error("{0}: {1}")]
    Parse(String, toml::de::Error),
    /// A value is out of range.
    #[error("scenario '{0}': {1}")]
    Invalid(String, String),
}

/// Outcome classes of one run (what a scenario may `expect`).
pub const OUTCOMES: [&str; 6] = [
    "detected-recovered",
    "detected-not-recovered",
    "silent",
    "guest-panic",
    "device-crash",
    "not-injected",
];

/// The outcome of a run the host could not carry out (QEMU failed, nothing
/// built, a QEMU too old for the accelerator): neither a guest nor a device
/// outcome, and never expected, so such a run always fails.
pub const ENVIRONMENT: &str = "environment";

/// Campaign-wide settings (`[campaign]`).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// Name shown in reports.
    pub name: String,
    /// Base seed (`--seed` overrides).
    #[serde(default = "one")]
    pub seed: u64,
    /// Device generation.
    #[serde(default = "two")]
    pub generation: u32,
    /// VM timeout per run, in seconds.
    #[serde(default = "sixty")]
    pub timeout_s: u64,
    /// vgpu.ko parameters.
    #[serde(default)]
    pub kmd_args: String,
    /// Guest command run after the workload to check that the device
    /// still serves.
    #[serde(default = "health")]
    pub health: String,
    /// How runs use VMs: `fresh` (a VM booted per run) or `reuse` (one VM
    /// and device serve the runs in sequence; replaced after a run that
    /// broke it). `--vm` overrides.
    #[serde(default = "fresh")]
    pub vm: String,
    /// Run the device's driver sanitizer (`vgpu-device --sanitize=CHECKS`;
    /// `"all"` for every check). Its reports are counted per run and class.
    /// `--sanitize` overrides.
    #[serde(default)]
    pub sanitize: Option<String>,
    /// A run with any sanitizer report fails (the driver broke a rule).
    #[serde(default)]
    pub require_no_sanitizer_reports: bool,
}

/// VM modes (`[campaign] vm`, `--vm`).
pub const VM_MODES: [&str; 2] = ["fresh", "reuse"];

fn fresh() -> String {
    "fresh".to_owned()
}

fn one() -> u64 {
    1
}
fn two() -> u32 {
    2
}
fn sixty() -> u64 {
    60
}
fn health() -> String {
    "vgpu-samples copy 65536".to_owned()
}

/// One scenario (`[[scenario]]`).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Unique name.
    pub name: String,
    /// Guest command of the (possibly guilty) workload.
    pub workload: String,
    /// Guest command run at the same time in another process (its
    /// contexts are innocent); its exit status must be 0.
    #[serde(default)]
    pub innocent: Option<String>,
    /// Fault specification for `vgpu-device --inject` (none: baseline);
    /// several are separated by `;`.
    #[serde(default)]
    pub fault: Option<String>,
    /// The class the scenario counts under (default: the first fault's).
    #[serde(default)]
    pub class: Option<String>,
    /// Runs of this scenario (seeds differ per run).
    #[serde(default = "one")]
    pub repeat: u64,
    /// Accepted outcomes (see [`OUTCOMES`]).
    pub expect: Vec<String>,
    /// Detection must happen within this many ms of the injection (when
    /// the device saw the driver react).
    #[serde(default)]
    pub detect_within_ms: Option<u64>,
    /// The workload's exit status: "ok", "error" or "any" (default).
    #[serde(default)]
    pub workload_status: Option<String>,
    /// Overrides the campaign's vgpu.ko parameters.
    #[serde(default)]
    pub kmd_args: Option<String>,
    /// Extra `vgpu-device` arguments, separated by spaces (e.g.
    /// `"--vram=64M --visible-vram=16M --vram-on-reset=garbage"`).
    #[serde(default)]
    pub device_args: Option<String>,
    /// A guest command run at the same time in a second VM, on a second
    /// virtual function of the same device (`scripts/vms`): a well-behaved
    /// neighbour. The scenario's faults are armed on the first function
    /// only; the neighbour must exit 0 with no reset or fault of its own
    /// and wait at most `neighbour_wait_ms` for an engine.
    #[serde(default)]
    pub neighbour: Option<String>,
    /// The neighbour's longest wait for an engine, in ms (default
    /// [`NEIGHBOUR_WAIT_MS`]).
    #[serde(default)]
    pub neighbour_wait_ms: Option<u64>,
    /// Faults injected inside the driver (guest-kmd/inject.rs), for the
    /// workload's processes only: `point[:knob=value,...]`, several
    /// separated by `;` (see [`driver_faults`]).
    #[serde(default)]
    pub driver_fault: Option<String>,
}

/// A neighbour's longest wait for an engine unless its scenario says:
/// two of the device's 2 ms time slices per engine and a margin for a
/// busy host.
pub const NEIGHBOUR_WAIT_MS: u64 = 200;

/// The driver's fault-injection points (guest-kmd/inject.rs; knobs in
/// `/sys/kernel/debug/vgpu_fail/<point>/`).
pub const DRIVER_POINTS: [&str; 4] = ["vram_alloc", "bo_pages", "pt_alloc", "control_cmd"];

/// Knobs a driver fault may set (the kernel's fault_attr knobs).
const DRIVER_KNOBS: [&str; 4] = ["interval", "times", "probability", "space"];

/// One fault inside the driver: its point and its knobs (defaults:
/// `probability=100`, `interval=1`, `times=1`: the first call fails, once).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverFault {
    /// The point.
    pub point: String,
    /// Knob values, in the order they are written (`probability` last).
    pub knobs: Vec<(String, i64)>,
}

/// Parses a scenario's `driver_fault`.
pub fn driver_faults(spec: &str) -> Result<Vec<DriverFault>, String> {
    let mut out = Vec::new();
    for one in spec.split(';').map(str::trim).filter(|s| !s.is_empty()) {
        let (point, args) = one.split_once(':').unwrap_or((one, ""));
        if !DRIVER_POINTS.contains(&point) {
            return Err(format!(
                "unknown driver point '{point}' (one of {})",
                DRIVER_POINTS.join(", ")
            ));
        }
        let mut knobs: Vec<(String, i64)> = vec![
            ("interval".into(), 1),
            ("times".into(), 1),
            ("space".into(), 0),
        ];
        let mut probability = 100;
        for kv in args.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| format!("'{kv}' is not knob=value"))?;
            let v: i64 = v
                .parse()
                .map_err(|_| format!("'{kv}': the value is not a number"))?;
            match k {
                "probability" if (0..=100).contains(&v) => probability = v,
                "interval" if v >= 1 => knobs[0].1 = v,
                "times" if v >= -1 && v != 0 => knobs[1].1 = v,
                "space" if v >= 0 => knobs[2].1 = v,
                _ if DRIVER_KNOBS.contains(&k) => return Err(format!("'{kv}': out of range")),
                _ => {
                    return Err(format!(
                        "unknown knob '{k}' (one of {})",
                        DRIVER_KNOBS.join(", ")
                    ))
                }
            }
        }
        knobs.push(("probability".into(), probability));
        out.push(DriverFault {
            point: point.to_owned(),
            knobs,
        });
    }
    Ok(out)
}

/// What a VM is booted with for a scenario: the vgpu.ko parameters and the
/// extra `vgpu-device` arguments. A reused VM serves only runs of the same.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VmConfig {
    /// vgpu.ko parameters (`scripts/vm --kmd-args`).
    pub kmd: String,
    /// `vgpu-device` arguments (each a `scripts/vm --device-arg`).
    pub device: Vec<String>,
}

/// A campaign file.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Campaign {
    /// Settings.
    pub campaign: Settings,
    /// Scenarios, in order.
    #[serde(default)]
    pub scenario: Vec<Scenario>,
}

/// One run: a scenario, its repetition and seed, its place in the
/// campaign.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct RunId {
    /// Position in the expanded campaign (from 0).
    pub index: u64,
    /// Scenario name.
    pub scenario: String,
    /// Repetition (from 0).
    pub rep: u64,
    /// Injector seed.
    pub seed: u64,
}

/// FNV-1a of `s`.
fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

impl Campaign {
    /// Reads and checks `path`.
    pub fn load(path: &str) -> Result<Campaign, SpecError> {
        let text = std::fs::read_to_string(path).map_err(|e| SpecError::Read(path.into(), e))?;
        Self::parse(path, &text)
    }

    /// Parses and checks campaign text.
    pub fn parse(path: &str, text: &str) -> Result<Campaign, SpecError> {
        let c: Campaign = toml::from_str(text).map_err(|e| SpecError::Parse(path.into(), e))?;
        if !VM_MODES.contains(&c.campaign.vm.as_str()) {
            return Err(SpecError::Invalid(
                "[campaign]".into(),
                format!("vm '{}' is not fresh or reuse", c.campaign.vm),
            ));
        }
        let mut names = std::collections::HashSet::new();
        for s in &c.scenario {
            if !names.insert(s.name.clone()) {
                return Err(SpecError::Invalid(s.name.clone(), "duplicate name".into()));
            }
            if s.expect.is_empty() {
                return Err(SpecError::Invalid(s.name.clone(), "empty expect".into()));
            }
            for e in &s.expect {
                if !OUTCOMES.contains(&e.as_str()) {
                    return Err(SpecError::Invalid(
                        s.name.clone(),
                        format!("unknown outcome '{e}' (one of {})", OUTCOMES.join(", ")),
                    ));
                }
            }
            if let Some(d) = &s.driver_fault {
                driver_faults(d).map_err(|e| SpecError::Invalid(s.name.clone(), e))?;
            }
            if s.neighbour_wait_ms.is_some() && s.neighbour.is_none() {
                return Err(SpecError::Invalid(
                    s.name.clone(),
                    "neighbour_wait_ms without a neighbour".into(),
                ));
            }
            if let Some(w) = &s.workload_status {
                if !["ok", "error", "any"].contains(&w.as_str()) {
                    return Err(SpecError::Invalid(
                        s.name.clone(),
                        format!("workload_status '{w}' is not ok, error or any"),
                    ));
                }
            }
        }
        Ok(c)
    }

    /// Every run in campaign order; `seed` overrides the file's.
    pub fn runs(&self, seed: Option<u64>) -> Vec<RunId> {
        let base = seed.unwrap_or(self.campaign.seed);
        let mut out = Vec::new();
        for s in &self.scenario {
            for rep in 0..s.repeat {
                out.push(RunId {
                    index: out.len() as u64,
                    scenario: s.name.clone(),
                    rep,
                    seed: base ^ fnv(&format!("{}#{rep}", s.name)),
                });
            }
        }
        out
    }

    /// The scenario named `name`.
    pub fn scenario(&self, name: &str) -> Option<&Scenario> {
        self.scenario.iter().find(|s| s.name == name)
    }

    /// The VM configuration of scenario `s`: its own vgpu.ko parameters or
    /// the campaign's, and its device arguments.
    pub fn vm_config(&self, s: &Scenario) -> VmConfig {
        VmConfig {
            kmd: s
                .kmd_args
                .clone()
                .unwrap_or_else(|| self.campaign.kmd_args.clone()),
            device: s
                .device_args
                .as_deref()
                .unwrap_or("")
                .split_whitespace()
                .map(str::to_owned)
                .collect(),
        }
    }
}

/// `i/n` (1-based): which runs a shard takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// This shard (1..=n).
    pub i: u64,
    /// Shards.
    pub n: u64,
}

impl std::str::FromStr for Shard {
    type Err = String;
    fn from_str(s: &str) -> Result<Shard, String> {
        let (i, n) = s.split_once('/').ok_or("shard is I/N, e.g. 2/4")?;
        let i: u64 = i.parse().map_err(|_| format!("bad shard index '{i}'"))?;
        let n: u64 = n.parse().map_err(|_| format!("bad shard count '{n}'"))?;
        if n == 0 || i == 0 || i > n {
            return Err(format!("shard {i}/{n}: need 1 <= I <= N"));
        }
        Ok(Shard { i, n })
    }
}

impl Shard {
    /// Whether run `index` belongs to this shard (round-robin, so every
    /// shard gets a mix of scenarios).
    pub fn takes(&self, index: u64) -> bool {
        index % self.n == self.i - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"
[campaign]
name = "t"
seed = 5
[[scenario]]
name = "a"
workload = "true"
fault = "hang"
repeat = 3
expect = ["detected-recovered"]
[[scenario]]
name = "b"
workload = "true"
expect = ["silent"]
"#;

    #[test]
    fn runs_are_ordered_seeded_and_sharded() {
        let c = Campaign::parse("t", TEXT).unwrap();
        let runs = c.runs(None);
        assert_eq!(runs.len(), 4);
        assert_eq!(runs, c.runs(Some(5)));
        assert_ne!(runs[0].seed, runs[1].seed);
        assert_ne!(runs[0].seed, c.runs(Some(6))[0].seed);
        let shards: Vec<Shard> = ["1/3", "2/3", "3/3"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        for r in &runs {
            assert_eq!(shards.iter().filter(|s| s.takes(r.index)).count(), 1);
        }
        assert!("0/2".parse::<Shard>().is_err());
        assert!("3/2".parse::<Shard>().is_err());
    }

    #[test]
    fn vm_config_per_scenario() {
        let text = TEXT
            .replace("seed = 5", "seed = 5\nkmd_args = \"job_timeout_ms=1000\"")
            .replace(
                "repeat = 3",
                "repeat = 3\ndevice_args = \" --vram=64M  --vram-on-reset=garbage \"\nkmd_args = \"x=1\"",
            );
        let c = Campaign::parse("t", &text).unwrap();
        let a = c.vm_config(c.scenario("a").unwrap());
        let b = c.vm_config(c.scenario("b").unwrap());
        assert_eq!(a.kmd, "x=1");
        assert_eq!(a.device, ["--vram=64M", "--vram-on-reset=garbage"]);
        assert_eq!(b.kmd, "job_timeout_ms=1000");
        assert!(b.device.is_empty());
        assert_ne!(a, b);
    }

    #[test]
    fn bad_files_are_refused() {
        let bad = TEXT.replace("[\"silent\"]", "[\"fine\"]");
        assert!(matches!(
            Campaign::parse("t", &bad),
            Err(SpecError::Invalid(..))
        ));
        let bad = TEXT.replace("seed = 5", "seed = 5\nvm = \"recycle\"");
        assert!(matches!(
            Campaign::parse("t", &bad),
            Err(SpecError::Invalid(..))
        ));
        let reuse = TEXT.replace("seed = 5", "seed = 5\nvm = \"reuse\"");
        assert_eq!(Campaign::parse("t", &reuse).unwrap().campaign.vm, "reuse");
        assert_eq!(Campaign::parse("t", TEXT).unwrap().campaign.vm, "fresh");
        let bad = TEXT.replace("repeat = 3", "repeat = 3\ncolour = 1");
        assert!(matches!(
            Campaign::parse("t", &bad),
            Err(SpecError::Parse(..))
        ));
    }
}
