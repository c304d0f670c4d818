//! `vgpu-campaign minimize`: shrinks a failing run to the smallest run
//! that still fails the same way, as syzkaller minimises its reproducers.
//!
//! A run is made of parts ([`Parts`]): the device faults of its schedule,
//! the faults inside the driver, the workload's commands (`a && b && c`)
//! and the innocent workload. Minimisation drops parts by delta debugging
//! (Zeller's ddmin over each list: halves, then quarters, ... of the list
//! removed while the run still fails) and then shrinks the numbers that
//! size a run — a fault's trigger (`after`, `count`, `bits`, `delay_ms`,
//! ...) and the workload's numeric arguments (sizes, counts, percentages) —
//! each to the smallest value that still fails (a binary search that
//! assumes smaller values fail less often, checked at the end), until a
//! round changes nothing. "The same way" is the original run's outcome with
//! the run failing its expectations ([`same_failure`]).
//!
//! The search is a pure function over a test closure ([`minimize`]), so
//! that it is tested without VMs; `main.rs` runs each candidate as a fresh
//! VM with the original run's seed.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::run::{record_path, RunResult, Runner};
use crate::spec::{Campaign, RunId, Scenario};

/// Fault parameters that size a run (and the smallest value of each);
/// other keys select what the fault hits and are kept as they are.
const SIZE_KEYS: [(&str, u64); 8] = [
    ("after", 1),
    ("count", 1),
    ("bits", 1),
    ("events", 1),
    ("attempts", 1),
    ("delay_ms", 1),
    ("at_ms", 0),
    ("interval", 1),
];

/// What a candidate run is made of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Parts {
    /// Device fault specifications (`--inject`).
    pub faults: Vec<String>,
    /// Faults inside the driver (`driver_fault`).
    pub driver_faults: Vec<String>,
    /// The workload's commands.
    pub workload: Vec<String>,
    /// How they are joined (` && ` or `; `).
    pub sep: String,
    /// The innocent workload.
    pub innocent: Option<String>,
}

fn split_list(s: Option<&str>) -> Vec<String> {
    s.map(|s| {
        s.split(';')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(str::to_owned)
            .collect()
    })
    .unwrap_or_default()
}

impl Parts {
    /// The parts of scenario `s`.
    pub fn of(s: &Scenario) -> Parts {
        let sep = if s.workload.contains(" && ") {
            " && "
        } else {
            "; "
        };
        Parts {
            faults: split_list(s.fault.as_deref()),
            driver_faults: split_list(s.driver_fault.as_deref()),
            workload: s
                .workload
                .split(sep.trim())
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .map(str::to_owned)
                .collect(),
            sep: sep.to_owned(),
            innocent: s.innocent.clone(),
        }
    }

    /// Scenario `s` made of these parts instead of its own.
    pub fn apply(&self, s: &Scenario) -> Scenario {
        let list = |v: &[String]| (!v.is_empty()).then(|| v.join("; "));
        Scenario {
            fault: list(&self.faults),
            driver_fault: list(&self.driver_faults),
            workload: self.workload.join(&self.sep),
            innocent: self.innocent.clone(),
            ..s.clone()
        }
    }

    /// One line describing the parts.
    pub fn describe(&self) -> String {
        let mut s = format!("workload '{}'", self.workload.join(&self.sep));
        if !self.faults.is_empty() {
            s += &format!(", faults '{}'", self.faults.join("; "));
        }
        if !self.driver_faults.is_empty() {
            s += &format!(", driver faults '{}'", self.driver_faults.join("; "));
        }
        if let Some(i) = &self.innocent {
            s += &format!(", innocent '{i}'");
        }
        s
    }
}

/// Whether a run's result is "the same failure" as the original's: it
/// failed its expectations with the same outcome.
pub fn same_failure(original_outcome: &str, passed: bool, outcome: &str) -> bool {
    !passed && outcome == original_outcome
}

/// Delta debugging (ddmin) over `items`: a smallest sublist (1-minimal:
/// removing any one item makes `fails` false) for which `fails` holds,
/// given that it holds for `items`.
pub fn ddmin<T: Clone>(items: &[T], fails: &mut impl FnMut(&[T]) -> bool) -> Vec<T> {
    let mut cur: Vec<T> = items.to_vec();
    if cur.is_empty() || fails(&[]) {
        return Vec::new();
    }
    let mut n = 2usize;
    while cur.len() >= 2 {
        let chunk = cur.len().div_ceil(n);
        let mut reduced = false;
        for start in (0..cur.len()).step_by(chunk) {
            let end = (start + chunk).min(cur.len());
            // The complement of this chunk.
            let rest: Vec<T> = cur[..start].iter().chain(&cur[end..]).cloned().collect();
            if !rest.is_empty() && fails(&rest) {
                cur = rest;
                n = (n - 1).max(2);
                reduced = true;
                break;
            }
        }
        if !reduced {
            if n >= cur.len() {
                break;
            }
            n = (2 * n).min(cur.len());
        }
    }
    cur
}

/// The smallest value in `min..=v` for which `fails` holds (it holds for
/// `v`): `min` first, then a binary search.
pub fn shrink_number(v: u64, min: u64, fails: &mut impl FnMut(u64) -> bool) -> u64 {
    if v <= min {
        return v;
    }
    if fails(min) {
        return min;
    }
    let (mut lo, mut hi) = (min, v);
    // Invariant: `lo` passes, `hi` fails.
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fails(mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    hi
}

/// The numbers of a fault specification that size it: (index of the
/// `key=value` item, key's minimum, value).
fn fault_numbers(spec: &str) -> Vec<(usize, u64, u64)> {
    let Some((_, args)) = spec.split_once(':') else {
        return Vec::new();
    };
    args.split(',')
        .enumerate()
        .filter_map(|(i, kv)| {
            let (k, v) = kv.trim().split_once('=')?;
            let min = SIZE_KEYS.iter().find(|(n, _)| *n == k.trim())?.1;
            let v: u64 = v.trim().parse().ok()?;
            // 0 means "unlimited" for a count: not a size to shrink.
            (v > min).then_some((i, min, v))
        })
        .collect()
}

/// `spec` with item `i`'s value set to `v`.
fn set_fault_number(spec: &str, i: usize, v: u64) -> String {
    let Some((class, args)) = spec.split_once(':') else {
        return spec.to_owned();
    };
    let items: Vec<String> = args
        .split(',')
        .enumerate()
        .map(|(j, kv)| match (j == i, kv.split_once('=')) {
            (true, Some((k, _))) => format!("{}={v}", k.trim()),
            _ => kv.trim().to_owned(),
        })
        .collect();
    format!("{class}:{}", items.join(","))
}

/// The numeric arguments of a workload command: (token index, value).
fn command_numbers(cmd: &str) -> Vec<(usize, u64)> {
    cmd.split_whitespace()
        .enumerate()
        .filter_map(|(i, t)| t.parse::<u64>().ok().filter(|&v| v > 1).map(|v| (i, v)))
        .collect()
}

fn set_command_number(cmd: &str, i: usize, v: u64) -> String {
    cmd.split_whitespace()
        .enumerate()
        .map(|(j, t)| if j == i { v.to_string() } else { t.to_owned() })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Shrinks `start` (which fails) with `fails`; `say` is told each step
/// kept. Rounds until one changes nothing (at most 4).
pub fn minimize(
    start: &Parts,
    fails: &mut impl FnMut(&Parts) -> bool,
    say: &mut impl FnMut(&str),
) -> Parts {
    let mut cur = start.clone();
    for _round in 0..4 {
        let before = cur.clone();
        if cur.innocent.is_some() {
            let t = Parts {
                innocent: None,
                ..cur.clone()
            };
            if fails(&t) {
                say("the innocent workload is not needed");
                cur = t;
            }
        }
        for which in 0..3 {
            let list = match which {
                0 => cur.faults.clone(),
                1 => cur.driver_faults.clone(),
                _ => cur.workload.clone(),
            };
            if list.len() < 2 && which == 2 {
                continue;
            }
            let base = cur.clone();
            let with = |l: &[String]| {
                let mut p = base.clone();
                match which {
                    0 => p.faults = l.to_vec(),
                    1 => p.driver_faults = l.to_vec(),
                    _ => p.workload = l.to_vec(),
                }
                p
            };
            let kept = ddmin(&list, &mut |l: &[String]| {
                // The workload keeps one command at least.
                !(which == 2 && l.is_empty()) && fails(&with(l))
            });
            if kept.len() < list.len() {
                let what = ["device faults", "driver faults", "workload commands"][which];
                say(&format!("{what}: {} of {} kept", kept.len(), list.len()));
                cur = with(&kept);
            }
        }
        // The numbers.
        for fi in 0..cur.faults.len() + cur.driver_faults.len() {
            let driver = fi >= cur.faults.len();
            let k = if driver { fi - cur.faults.len() } else { fi };
            let spec = if driver {
                cur.driver_faults[k].clone()
            } else {
                cur.faults[k].clone()
            };
            let mut spec = spec;
            for (item, min, v) in fault_numbers(&spec) {
                let base = cur.clone();
                let with = |n: u64| {
                    let mut p = base.clone();
                    let s = if driver {
                        &mut p.driver_faults[k]
                    } else {
                        &mut p.faults[k]
                    };
                    *s = set_fault_number(s, item, n);
                    p
                };
                let got = shrink_number(v, min, &mut |n| fails(&with(n)));
                if got < v {
                    let p = with(got);
                    let now = if driver {
                        &p.driver_faults[k]
                    } else {
                        &p.faults[k]
                    };
                    say(&format!("fault '{spec}' -> '{now}'"));
                    spec = now.clone();
                    cur = p;
                }
            }
        }
        for ci in 0..cur.workload.len() {
            let mut cmd = cur.workload[ci].clone();
            for (tok, v) in command_numbers(&cmd) {
                let base = cur.clone();
                let with = |n: u64| {
                    let mut p = base.clone();
                    p.workload[ci] = set_command_number(&p.workload[ci], tok, n);
                    p
                };
                let got = shrink_number(v, 1, &mut |n| fails(&with(n)));
                if got < v {
                    let p = with(got);
                    say(&format!("workload '{cmd}' -> '{}'", p.workload[ci]));
                    cmd = p.workload[ci].clone();
                    cur = p;
                }
            }
        }
        if cur == before {
            break;
        }
    }
    cur
}

/// Why minimisation could not be done.
#[derive(Debug, thiserror::Error)]
pub enum MinimizeError {
    /// No such scenario or repetition.
    #[error("no run {0} in the campaign")]
    NoRun(String),
    /// The run passes: nothing to shrink.
    #[error("run {0} passes its expectations ({1}): nothing to minimise")]
    Passes(String, String),
    /// A run could not be made (QEMU, the build, files).
    #[error("{0}")]
    Run(String),
    /// The output could not be written.
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
    /// The scenario runs beside a neighbour VM on a second virtual
    /// function, whose device sessions are not recorded.
    #[error("scenario {0} runs with a neighbour (two virtual functions), which is not recorded: minimise a copy without its neighbour")]
    Neighbour(String),
}

/// What [`command`] found.
#[derive(Debug)]
pub struct Minimized {
    /// The original run's parts and the minimised ones.
    pub from: Parts,
    pub to: Parts,
    /// Runs made (the original and the final one included).
    pub runs: u32,
    /// The steps kept, in order.
    pub steps: Vec<String>,
    /// Whether the final run (recorded) failed the same way again.
    pub confirmed: bool,
    /// The files written: the campaign entry and the recording.
    pub campaign: PathBuf,
    pub recording: Option<PathBuf>,
}

/// The run to minimise and the runs to spend.
#[derive(Clone, Copy, Debug)]
pub struct Target<'a> {
    /// Its scenario.
    pub only: &'a str,
    /// Its repetition.
    pub rep: u64,
    /// The base seed given to `run`, if any.
    pub seed: Option<u64>,
    /// Runs to spend at most (besides the original and the last).
    pub max_runs: u32,
}

/// Runs run `t.rep` of scenario `t.only` of `c` (seed from `t.seed`), then
/// minimises it with at most `t.max_runs` more runs, each a fresh VM with the
/// run's seed, and writes `out/minimized.toml` (the campaign with the
/// minimised scenario under its own name, so its seed is the run's) and
/// `out/minimized.vgrec` (the device session of the minimised run, for
/// `vgpu-replay`). `progress` is told of every run.
pub fn command(
    c: &Campaign,
    runner: &Runner,
    t: &Target<'_>,
    out: &Path,
    progress: &mut impl FnMut(&str),
) -> Result<Minimized, MinimizeError> {
    let Target {
        only,
        rep,
        seed: base_seed,
        max_runs,
    } = *t;
    let id = c
        .runs(base_seed)
        .into_iter()
        .find(|r| r.scenario == only && r.rep == rep)
        .ok_or_else(|| MinimizeError::NoRun(format!("{only}#{rep}")))?;
    let s = c
        .scenario(only)
        .ok_or_else(|| MinimizeError::NoRun(only.to_owned()))?
        .clone();
    if s.neighbour.is_some() {
        return Err(MinimizeError::Neighbour(only.to_owned()));
    }
    let with = |p: &Parts| Campaign {
        campaign: c.campaign.clone(),
        scenario: vec![p.apply(&s)],
    };
    let mut runs = 0u32;
    let t0 = Instant::now();
    let run = |p: &Parts, record: bool, runs: &mut u32| -> Result<RunResult, MinimizeError> {
        let r = Runner {
            record,
            ..runner.clone()
        };
        let rid = RunId {
            index: u64::from(*runs),
            ..id.clone()
        };
        *runs += 1;
        r.run(&with(p), &rid, *runs == 1)
            .map_err(|e| MinimizeError::Run(e.to_string()))
    };
    let from = Parts::of(&s);
    progress(&format!("run 1 (the original): {}", from.describe()));
    let first = run(&from, false, &mut runs)?;
    if first.passed {
        return Err(MinimizeError::Passes(
            format!("{only}#{rep}"),
            first.outcome,
        ));
    }
    let outcome = first.outcome.clone();
    progress(&format!(
        "fails: {outcome}; minimising (at most {max_runs} runs)"
    ));
    let mut seen: HashMap<String, bool> = HashMap::new();
    let mut steps = Vec::new();
    let to = minimize(
        &from,
        &mut |p| {
            let key = p.describe();
            if let Some(&v) = seen.get(&key) {
                return v;
            }
            if runs > max_runs {
                return false;
            }
            let v = match run(p, false, &mut runs) {
                Ok(r) => {
                    let same = same_failure(&outcome, r.passed, &r.outcome);
                    let elapsed = t0.elapsed().as_secs_f64();
                    progress(&format!(
                        "run {runs} ({elapsed:.0} s, about {:.0} s each): {} -> {}",
                        elapsed / f64::from(runs),
                        key,
                        match (same, r.passed) {
                            (true, _) => format!("same failure ({})", r.outcome),
                            (false, true) => "passes".to_owned(),
                            (false, false) => format!("fails otherwise ({})", r.outcome),
                        }
                    ));
                    same
                }
                Err(e) => {
                    progress(&format!("run {runs}: {e}"));
                    false
                }
            };
            seen.insert(key, v);
            v
        },
        &mut |step| steps.push(step.to_owned()),
    );
    progress(&format!(
        "minimised: {}; a last run, recorded",
        to.describe()
    ));
    let last = run(&to, true, &mut runs)?;
    let confirmed = same_failure(&outcome, last.passed, &last.outcome);
    std::fs::create_dir_all(out).map_err(|e| MinimizeError::Io(out.display().to_string(), e))?;
    let mut file = with(&to);
    file.campaign.seed = base_seed.unwrap_or(c.campaign.seed);
    file.campaign.vm = "fresh".into();
    let toml = toml::to_string(&file).map_err(|e| {
        MinimizeError::Io(
            "minimized.toml".into(),
            std::io::Error::other(e.to_string()),
        )
    })?;
    let campaign = out.join("minimized.toml");
    let head = format!(
        "# Minimised by `vgpu-campaign minimize` from run {only}#{rep} (seed {}): {} runs.\n# Original: {}\n# Failure: outcome {outcome}; expected {:?}.\n",
        id.seed,
        runs,
        from.describe(),
        s.expect
    );
    std::fs::write(&campaign, head + &toml)
        .map_err(|e| MinimizeError::Io(campaign.display().to_string(), e))?;
    let rec = runner
        .run_dir(&RunId {
            index: u64::from(runs - 1),
            ..id.clone()
        })
        .ok()
        .map(|d| record_path(&d))
        .filter(|p| p.is_file());
    let recording = match rec {
        Some(p) => {
            let dst = out.join("minimized.vgrec");
            std::fs::copy(&p, &dst).map_err(|e| MinimizeError::Io(dst.display().to_string(), e))?;
            Some(dst)
        }
        None => None,
    };
    Ok(Minimized {
        from,
        to,
        runs,
        steps,
        confirmed,
        campaign,
        recording,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(faults: &[&str], workload: &[&str]) -> Parts {
        Parts {
            faults: faults.iter().map(|s| s.to_string()).collect(),
            driver_faults: Vec::new(),
            workload: workload.iter().map(|s| s.to_string()).collect(),
            sep: " && ".into(),
            innocent: Some("vgpu-samples vecadd".into()),
        }
    }

    /// A fault parameter's value.
    fn param(f: &str, key: &str) -> Option<u64> {
        f.split_once(':')?
            .1
            .split(',')
            .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('=')?.parse().ok())
    }

    /// The planted failure: a dma-corrupt of 3 bits or more at the 5th
    /// copy or later, in a copy of 4096 bytes or more.
    fn planted(p: &Parts) -> bool {
        let corrupt = p.faults.iter().any(|f| {
            f.starts_with("dma-corrupt")
                && param(f, "bits").is_some_and(|b| b >= 3)
                && param(f, "after").is_some_and(|a| a >= 5)
        });
        let copy = p.workload.iter().any(|c| {
            c.starts_with("vgpu-samples copy")
                && command_numbers(c).first().is_some_and(|&(_, v)| v >= 4096)
        });
        corrupt && copy
    }

    #[test]
    fn a_planted_failure_shrinks_to_its_cause() {
        let start = parts(
            &[
                "hang:engine=copy,after=40",
                "dma-corrupt:after=9,bits=12,packet=COPY",
                "throttle:delay_ms=50,count=20",
            ],
            &[
                "vgpu-samples vecadd",
                "vgpu-samples copy 1048576",
                "vgpu-samples saxpy",
            ],
        );
        assert!(planted(&start));
        let mut tries = 0;
        let mut steps = Vec::new();
        let got = minimize(
            &start,
            &mut |p| {
                tries += 1;
                planted(p)
            },
            &mut |s| steps.push(s.to_owned()),
        );
        assert_eq!(
            got.faults,
            vec!["dma-corrupt:after=5,bits=3,packet=COPY".to_owned()]
        );
        assert_eq!(got.workload, vec!["vgpu-samples copy 4096".to_owned()]);
        assert_eq!(got.innocent, None);
        assert!(planted(&got));
        assert!(tries < 120, "{tries} tries");
        assert!(
            steps.iter().any(|s| s == "device faults: 1 of 3 kept"),
            "{steps:?}"
        );
    }

    #[test]
    fn ddmin_finds_a_one_minimal_pair_and_keeps_what_is_needed() {
        let items: Vec<u32> = (0..16).collect();
        let got = ddmin(&items, &mut |l: &[u32]| l.contains(&3) && l.contains(&11));
        assert_eq!(got, vec![3, 11]);
        // Nothing needed: empty.
        assert!(ddmin(&items, &mut |_: &[u32]| true).is_empty());
    }

    #[test]
    fn numbers_shrink_to_the_threshold() {
        assert_eq!(shrink_number(1000, 1, &mut |v| v >= 37), 37);
        assert_eq!(shrink_number(1000, 1, &mut |_| true), 1);
        assert_eq!(shrink_number(5, 5, &mut |_| true), 5);
        assert_eq!(
            set_fault_number("hang:engine=copy,after=40", 1, 3),
            "hang:engine=copy,after=3"
        );
        assert_eq!(fault_numbers("reset-fail:attempts=1"), vec![]);
        assert_eq!(fault_numbers("x:count=0,after=7"), vec![(1, 1, 7)]);
        assert_eq!(command_numbers("vgpu-samples vram 150"), vec![(2, 150)]);
    }

    #[test]
    fn parts_round_trip_through_a_scenario() {
        let s: Scenario = toml::from_str(
            r#"
name = "s"
workload = "a 10 && b"
fault = "hang; lost:after=2"
driver_fault = "bo_pages"
expect = ["detected-recovered"]
"#,
        )
        .unwrap();
        let p = Parts::of(&s);
        assert_eq!(p.workload, vec!["a 10".to_owned(), "b".to_owned()]);
        assert_eq!(p.faults.len(), 2);
        let back = p.apply(&s);
        assert_eq!(back.workload, "a 10 && b");
        assert_eq!(back.fault.as_deref(), Some("hang; lost:after=2"));
        assert_eq!(back.driver_fault.as_deref(), Some("bo_pages"));
    }
}
