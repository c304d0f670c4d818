//! Results: the JSON file, JUnit XML, the HTML report and the summary per
//! fault class.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::run::RunResult;
use crate::spec::{ENVIRONMENT, OUTCOMES};

/// Why results could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// File access failed.
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
    /// A results file does not parse.
    #[error("{0}: {1}")]
    Json(String, serde_json::Error),
    /// Shards of different campaigns or seeds.
    #[error("cannot merge {0}: {1}")]
    Mismatch(String, String),
    /// The shards given are not every shard of one split exactly once.
    #[error("incomplete shard set: {0} (merge --partial merges them anyway)")]
    Incomplete(String),
}

/// A results file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Results {
    /// Campaign name.
    pub campaign: String,
    /// The `--seed` given (None: the file's seeds).
    pub seed: Option<u64>,
    /// Shards merged into this file, as `i/n` (empty: the whole campaign).
    pub shards: Vec<String>,
    /// Runs in campaign order.
    pub runs: Vec<RunResult>,
}

/// Per-class numbers.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ClassSummary {
    /// Runs.
    pub runs: u64,
    /// Runs in which the fault was injected.
    pub injected: u64,
    /// Detected (recovered or not).
    pub detected: u64,
    /// Detected and recovered.
    pub recovered: u64,
    /// Injected and not detected.
    pub silent: u64,
    /// Guest panics.
    pub panics: u64,
    /// Device crashes.
    pub crashes: u64,
    /// Runs the host could not carry out (QEMU failed, setup failure).
    #[serde(default)]
    pub environment: u64,
    /// Runs that met their expectations.
    pub passed: u64,
    /// Median recovery latency (ms).
    pub recover_median_ms: Option<f64>,
    /// Maximum recovery latency (ms).
    pub recover_max_ms: Option<f64>,
    /// Median detection latency (ms).
    pub detect_median_ms: Option<f64>,
    /// Device sanitizer reports over the class's runs.
    #[serde(default)]
    pub sanitizer_reports: u64,
    /// Runs with at least one sanitizer report.
    #[serde(default)]
    pub sanitizer_runs: u64,
}

fn median(v: &mut [f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

impl Results {
    /// Numbers per fault class.
    pub fn summary(&self) -> BTreeMap<String, ClassSummary> {
        let mut m: BTreeMap<String, (ClassSummary, Vec<f64>, Vec<f64>)> = BTreeMap::new();
        for r in &self.runs {
            let (s, rec, det) = m.entry(r.class.clone()).or_default();
            s.runs += 1;
            if r.injections > 0 {
                s.injected += 1;
            }
            match r.outcome.as_str() {
                "detected-recovered" => {
                    s.detected += 1;
                    s.recovered += 1;
                }
                "detected-not-recovered" => s.detected += 1,
                "silent" => s.silent += 1,
                "guest-panic" => s.panics += 1,
                "device-crash" => s.crashes += 1,
                ENVIRONMENT => s.environment += 1,
                _ => {}
            }
            if r.passed {
                s.passed += 1;
            }
            let n: u64 = r.sanitizer.values().sum();
            s.sanitizer_reports += n;
            if n > 0 {
                s.sanitizer_runs += 1;
            }
            if let Some(x) = r.recover_ms {
                rec.push(x);
            }
            if let Some(x) = r.detect_ms {
                det.push(x);
            }
        }
        m.into_iter()
            .map(|(k, (mut s, mut rec, mut det))| {
                s.recover_median_ms = median(&mut rec);
                s.recover_max_ms = rec.iter().copied().reduce(f64::max);
                s.detect_median_ms = median(&mut det);
                (k, s)
            })
            .collect()
    }

    /// Passed and failed runs.
    pub fn counts(&self) -> (usize, usize) {
        let p = self.runs.iter().filter(|r| r.passed).count();
        (p, self.runs.len() - p)
    }

    /// Reads a results file.
    pub fn read(path: &str) -> Result<Results, ReportError> {
        let text = std::fs::read_to_string(path).map_err(|e| ReportError::Io(path.into(), e))?;
        serde_json::from_str(&text).map_err(|e| ReportError::Json(path.into(), e))
    }

    /// Merges shard results of one campaign.
    ///
    /// With `complete`, the parts must be every shard of one split
    /// exactly once (see [`check_shard_set`]).
    pub fn merge(parts: Vec<(String, Results)>, complete: bool) -> Result<Results, ReportError> {
        if complete {
            check_shard_set(&parts).map_err(ReportError::Incomplete)?;
        }
        let mut it = parts.into_iter();
        let Some((_, mut all)) = it.next() else {
            return Err(ReportError::Mismatch("nothing".into(), "no input".into()));
        };
        for (path, r) in it {
            if r.campaign != all.campaign || r.seed != all.seed {
                return Err(ReportError::Mismatch(
                    path,
                    format!(
                        "campaign {} seed {:?} vs {} seed {:?}",
                        r.campaign, r.seed, all.campaign, all.seed
                    ),
                ));
            }
            all.shards.extend(r.shards);
            all.runs.extend(r.runs);
        }
        all.runs.sort_by_key(|r| r.id.index);
        all.runs.dedup_by_key(|r| r.id.index);
        all.shards.sort();
        Ok(all)
    }

    /// How `other` differs from these results in what a seeded campaign
    /// must reproduce wherever it runs: the campaign, the seed, the runs
    /// (index, scenario, repetition, seed, fault, class), their outcomes,
    /// verdicts and how many devcoredumps each left. One line per
    /// difference.
    pub fn differences(&self, other: &Results) -> Vec<String> {
        let mut d = vec![];
        if (&self.campaign, self.seed) != (&other.campaign, other.seed) {
            d.push(format!(
                "campaign {} seed {:?} vs {} seed {:?}",
                self.campaign, self.seed, other.campaign, other.seed
            ));
        }
        // Dumps: where they are, their replay commands and what they are.
        let key = |r: &RunResult| {
            (
                r.id.clone(),
                r.fault.clone(),
                r.class.clone(),
                r.outcome.clone(),
                r.passed,
                (
                    r.dumps.clone(),
                    r.dump_replays.clone(),
                    r.dump_kinds.clone(),
                ),
                r.replay.clone(),
            )
        };
        let by_index = |rs: &[RunResult]| -> std::collections::BTreeMap<u64, RunResult> {
            rs.iter().map(|r| (r.id.index, r.clone())).collect()
        };
        let (a, b) = (by_index(&self.runs), by_index(&other.runs));
        for i in a.keys().chain(b.keys().filter(|k| !a.contains_key(k))) {
            match (a.get(i), b.get(i)) {
                (Some(x), Some(y)) if key(x) == key(y) => {}
                (Some(x), Some(y)) => d.push(format!(
                    "run {i}: {}#{} seed {} {} passed={} dumps=[{}] vs {}#{} seed {} {} passed={} dumps=[{}]{}",
                    x.id.scenario,
                    x.id.rep,
                    x.id.seed,
                    x.outcome,
                    x.passed,
                    x.dump_kinds.join(", "),
                    y.id.scenario,
                    y.id.rep,
                    y.id.seed,
                    y.outcome,
                    y.passed,
                    y.dump_kinds.join(", "),
                    if x.replay == y.replay && x.dump_replays == y.dump_replays {
                        ""
                    } else {
                        "; replay commands differ"
                    }
                )),
                (Some(x), None) => d.push(format!("run {i} ({}) only in the first", x.id.scenario)),
                (None, Some(y)) => d.push(format!("run {i} ({}) only in the second", y.id.scenario)),
                (None, None) => {}
            }
        }
        d
    }

    /// Copies the runs' devcoredumps (paths relative to the output
    /// directory) from output directory `from` to `to`, at the same paths:
    /// what `merge` does with each shard's.
    pub fn copy_dumps(
        &self,
        from: &std::path::Path,
        to: &std::path::Path,
    ) -> Result<(), ReportError> {
        for d in self.runs.iter().flat_map(|r| &r.dumps) {
            let (src, dst) = (from.join(d), to.join(d));
            dst.parent()
                .map_or(Ok(()), std::fs::create_dir_all)
                .and_then(|()| std::fs::copy(&src, &dst).map(drop))
                .map_err(|e| ReportError::Io(src.display().to_string(), e))?;
        }
        Ok(())
    }

    /// Writes `results.json`, `junit.xml` and `report.html` into `dir`.
    pub fn write_all(&self, dir: &std::path::Path) -> Result<(), ReportError> {
        std::fs::create_dir_all(dir).map_err(|e| ReportError::Io(dir.display().to_string(), e))?;
        let w = |name: &str, text: String| {
            let p = dir.join(name);
            std::fs::write(&p, text).map_err(|e| ReportError::Io(p.display().to_string(), e))
        };
        let json = serde_json::to_string_pretty(self)
            .map_err(|e| ReportError::Json("results".into(), e))?;
        w("results.json", json)?;
        w("junit.xml", self.junit())?;
        w("report.html", self.html())?;
        Ok(())
    }

    /// JUnit XML: one test suite per fault class, one test case per run.
    pub fn junit(&self) -> String {
        let mut by: BTreeMap<&str, Vec<&RunResult>> = BTreeMap::new();
        for r in &self.runs {
            by.entry(r.class.as_str()).or_default().push(r);
        }
        let (p, f) = self.counts();
        let mut x = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
        let _ = writeln!(
            x,
            "<testsuites name=\"{}\" tests=\"{}\" failures=\"{}\">",
            esc(&self.campaign),
            p + f,
            f
        );
        for (class, runs) in by {
            let fails = runs.iter().filter(|r| !r.passed).count();
            let time: f64 = runs.iter().map(|r| r.duration_s).sum();
            let _ = writeln!(
                x,
                "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{fails}\" time=\"{time:.1}\">",
                esc(class),
                runs.len()
            );
            for r in runs {
                let _ = write!(
                    x,
                    "    <testcase classname=\"{}.{}\" name=\"{}#{} seed={}\" time=\"{:.1}\">",
                    esc(&self.campaign),
                    esc(class),
                    esc(&r.id.scenario),
                    r.id.rep,
                    r.id.seed,
                    r.duration_s
                );
                if !r.passed {
                    let _ = write!(
                        x,
                        "<failure message=\"{}\">{}\nreplay: {}{}</failure>",
                        esc(&r.outcome),
                        esc(&r.reasons.join("; ")),
                        esc(&r.replay),
                        esc(&r
                            .dump_replays
                            .iter()
                            .map(|d| format!("\ndevcoredump: {d}"))
                            .collect::<String>())
                    );
                }
                let _ = writeln!(
                    x,
                    "<system-out>outcome={} detected_by={} detect_ms={:?} recover_ms={:?}</system-out></testcase>",
                    esc(&r.outcome),
                    esc(&r.detected_by.join(",")),
                    r.detect_ms,
                    r.recover_ms
                );
            }
            x += "  </testsuite>\n";
        }
        x += "</testsuites>\n";
        x
    }

    /// The HTML report: summary per class, latency chart, every run.
    pub fn html(&self) -> String {
        let sum = self.summary();
        let (p, f) = self.counts();
        let mut h = String::new();
        let _ = write!(
            h,
            "<!doctype html><html><head><meta charset=\"utf-8\"><title>vgpu campaign {0}</title>\
             <style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse;margin:1em 0}}\
             td,th{{border:1px solid #bbb;padding:3px 8px;text-align:right}}td:first-child,th:first-child{{text-align:left}}\
             .fail{{background:#fdd}}.pass{{background:#dfd}}</style></head><body>\
             <h1>Fault-injection campaign: {0}</h1><p>{1} runs: {2} passed, {3} failed. Seed: {4}. Shards: {5}.</p>",
            esc(&self.campaign),
            p + f,
            p,
            f,
            self.seed.map_or("from the campaign file".to_owned(), |s| s.to_string()),
            if self.shards.is_empty() { "whole campaign".to_owned() } else { esc(&self.shards.join(", ")) }
        );
        h += "<h2>Per fault class</h2><table><tr><th>class</th><th>runs</th><th>injected</th><th>detected</th>\
              <th>recovered</th><th>silent</th><th>guest panics</th><th>device crashes</th><th>environment</th><th>passed</th>\
              <th>detect median ms</th><th>recover median ms</th><th>recover max ms</th><th>sanitizer reports (runs)</th></tr>";
        let opt = |v: Option<f64>| v.map_or("–".to_owned(), |x| format!("{x:.0}"));
        for (class, s) in &sum {
            let cls = if s.passed == s.runs { "pass" } else { "fail" };
            let _ = write!(
                h,
                "<tr class=\"{cls}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{} ({})</td></tr>",
                esc(class), s.runs, s.injected, s.detected, s.recovered, s.silent, s.panics, s.crashes, s.environment, s.passed,
                opt(s.detect_median_ms), opt(s.recover_median_ms), opt(s.recover_max_ms), s.sanitizer_reports, s.sanitizer_runs
            );
        }
        h += "</table>";
        h += &self.chart();
        h += "<h2>Outcomes</h2><table><tr><th>class</th>";
        for o in OUTCOMES.iter().chain([&ENVIRONMENT]) {
            let _ = write!(h, "<th>{o}</th>");
        }
        h += "</tr>";
        for class in sum.keys() {
            let _ = write!(h, "<tr><td>{}</td>", esc(class));
            for o in OUTCOMES.iter().chain([&ENVIRONMENT]) {
                let n = self
                    .runs
                    .iter()
                    .filter(|r| &r.class == class && r.outcome == *o)
                    .count();
                let _ = write!(h, "<td>{n}</td>");
            }
            h += "</tr>";
        }
        h += "</table><h2>Runs</h2><table><tr><th>#</th><th>scenario</th><th>fault</th><th>seed</th><th>outcome</th>\
              <th>detected by</th><th>detect ms</th><th>recover ms</th><th>workload</th><th>innocent</th><th>health</th>\
              <th>s</th><th>notes / replay</th></tr>";
        for r in &self.runs {
            let st = |v: Option<i32>| v.map_or("–".to_owned(), |x| x.to_string());
            let _ = write!(
                h,
                "<tr class=\"{}\"><td>{}</td><td>{}#{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
                 <td>{}</td><td>{}</td><td>{}</td><td>{:.1}</td><td style=\"text-align:left\">{}<br><code>{}</code></td></tr>",
                if r.passed { "pass" } else { "fail" },
                r.id.index,
                esc(&r.id.scenario),
                r.id.rep,
                esc(r.fault.as_deref().unwrap_or("none")),
                r.id.seed,
                esc(&r.outcome),
                esc(&r.detected_by.join(", ")),
                opt(r.detect_ms),
                opt(r.recover_ms),
                st(r.workload_status),
                st(r.innocent_status),
                st(r.health_status),
                r.duration_s,
                esc(&r
                    .reasons
                    .iter()
                    .cloned()
                    .chain(r.vm_replaced.iter().map(|w| format!("VM {} replaced: {w}", r.vm_boot)))
                    .collect::<Vec<_>>()
                    .join("; ")),
                esc(&r.replay)
                    + &r
                        .dump_replays
                        .iter()
                        .map(|d| format!("</code><br>devcoredump: <code>{}", esc(d)))
                        .collect::<String>()
            );
        }
        h += "</table></body></html>\n";
        h
    }

    /// An inline SVG bar chart of median and maximum recovery latency
    /// per class.
    fn chart(&self) -> String {
        let sum = self.summary();
        let rows: Vec<(&String, f64, f64, f64)> = sum
            .iter()
            .filter_map(|(c, s)| {
                Some((
                    c,
                    s.detect_median_ms.unwrap_or(0.0),
                    s.recover_median_ms?,
                    s.recover_max_ms.unwrap_or(0.0),
                ))
            })
            .collect();
        let mut h = String::from("<h2>Latency per class (ms)</h2>");
        if rows.is_empty() {
            h += "<p>No run measured a recovery latency.</p>";
            return h;
        }
        let max = rows.iter().map(|r| r.3.max(r.2)).fold(1.0, f64::max);
        let (w, bar, left) = (560.0, 14.0, 140.0);
        let height = rows.len() as f64 * (3.0 * bar + 10.0) + 30.0;
        let _ = write!(
            h,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{height}\" font-size=\"11\">",
            w + left + 60.0
        );
        for (i, (c, det, med, mx)) in rows.iter().enumerate() {
            let y = i as f64 * (3.0 * bar + 10.0) + 5.0;
            let _ = write!(h, "<text x=\"0\" y=\"{}\">{}</text>", y + bar * 1.5, esc(c));
            for (k, (v, colour, label)) in [
                (det, "#9ad", "detect median"),
                (med, "#4a4", "recover median"),
                (mx, "#c84", "recover max"),
            ]
            .iter()
            .enumerate()
            {
                let len = (*v / max * w).max(1.0);
                let yy = y + k as f64 * bar;
                let _ = write!(
                    h,
                    "<rect x=\"{left}\" y=\"{yy}\" width=\"{len:.1}\" height=\"{}\" fill=\"{colour}\"><title>{label}: {v:.0} ms</title></rect>\
                     <text x=\"{:.1}\" y=\"{:.1}\">{v:.0}</text>",
                    bar - 2.0,
                    left + len + 4.0,
                    yy + bar - 4.0
                );
            }
        }
        h += "</svg><p>Blue: detection median; green: recovery median; orange: recovery maximum.</p>";
        h
    }
}

/// XML/HTML escape.
pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Checks that `parts` are every shard of one split exactly once: each
/// part names shards `i/N` of the same N, together `1/N` to `N/N` with
/// none twice, and no run is in two parts. A whole-campaign result (no
/// shard) counts only alone.
pub fn check_shard_set(parts: &[(String, Results)]) -> Result<(), String> {
    let mut n_all: Option<u64> = None;
    let mut seen: std::collections::BTreeMap<u64, &str> = Default::default();
    for (path, r) in parts {
        if r.shards.is_empty() {
            if parts.len() == 1 {
                return Ok(());
            }
            return Err(format!("{path} holds the whole campaign, not a shard"));
        }
        for s in &r.shards {
            let (i, n) = s
                .split_once('/')
                .and_then(|(i, n)| Some((i.parse::<u64>().ok()?, n.parse::<u64>().ok()?)))
                .filter(|&(i, n)| (1..=n).contains(&i))
                .ok_or_else(|| format!("{path}: shard {s:?} is not I/N"))?;
            match n_all {
                Some(m) if m != n => {
                    return Err(format!(
                        "{path}: shard {s} of a split in {n}, others in {m}"
                    ))
                }
                _ => n_all = Some(n),
            }
            if let Some(first) = seen.insert(i, path) {
                return Err(format!("shard {i}/{n} twice: {first} and {path}"));
            }
        }
    }
    let n = n_all.unwrap_or(0);
    let missing: Vec<String> = (1..=n)
        .filter(|i| !seen.contains_key(i))
        .map(|i| format!("{i}/{n}"))
        .collect();
    if !missing.is_empty() {
        return Err(format!("shard {} missing", missing.join(", ")));
    }
    let mut runs: std::collections::BTreeMap<u64, &str> = Default::default();
    for (path, r) in parts {
        for run in &r.runs {
            if let Some(first) = runs.insert(run.id.index, path) {
                if first != path {
                    return Err(format!(
                        "run {} in two shards: {first} and {path}",
                        run.id.index
                    ));
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::RunId;

    fn run(index: u64, class: &str, outcome: &str, rec: Option<f64>, passed: bool) -> RunResult {
        RunResult {
            id: RunId {
                index,
                scenario: format!("{class}-s"),
                rep: 0,
                seed: 7,
            },
            fault: Some(class.into()),
            class: class.into(),
            outcome: outcome.into(),
            passed,
            reasons: vec![],
            vm_status: 0,
            workload_status: Some(0),
            innocent_status: None,
            health_status: Some(0),
            injections: 1,
            detected_by: vec![],
            detect_ms: rec.map(|r| r / 2.0),
            recover_ms: rec,
            duration_s: 8.0,
            replay: "r".into(),
            sanitizer: Default::default(),
            neighbour: None,
            dumps: vec![],
            dump_replays: vec![],
            dump_kinds: vec![],
            vm: "fresh".into(),
            vm_boot: 0,
            vm_replaced: None,
        }
    }

    #[test]
    fn summary_merge_and_outputs() {
        let a = Results {
            campaign: "c".into(),
            seed: None,
            shards: vec!["1/2".into()],
            runs: vec![
                run(0, "hang", "detected-recovered", Some(1000.0), true),
                run(2, "hang", "detected-recovered", Some(3000.0), true),
            ],
        };
        let b = Results {
            shards: vec!["2/2".into()],
            runs: vec![
                run(1, "hang", "detected-recovered", Some(2000.0), true),
                run(3, "fence-event-drop", "silent", None, false),
                run(4, "fence-event-drop", ENVIRONMENT, None, false),
            ],
            ..a.clone()
        };
        let mut b = b;
        b.runs[0].dumps = vec!["runs/0001-hang-1/devcoredump-1.txt".into()];
        b.runs[0].dump_replays = vec!["vgpu-replay runs/0001-hang-1/devcoredump-1.txt".into()];
        b.runs[0].dump_kinds = vec!["hang engine=0 capture=ok".into()];
        let (shard, merged) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let d = shard.path().join("runs/0001-hang-1");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("devcoredump-1.txt"), "VGPU DEVCOREDUMP 1\n").unwrap();
        b.copy_dumps(shard.path(), merged.path()).unwrap();
        assert_eq!(
            std::fs::read_to_string(merged.path().join("runs/0001-hang-1/devcoredump-1.txt"))
                .unwrap(),
            "VGPU DEVCOREDUMP 1\n"
        );
        let whole = Results {
            shards: vec![],
            runs: a.runs.iter().chain(&b.runs).cloned().collect(),
            ..a.clone()
        };
        let m =
            Results::merge(vec![("a".into(), a.clone()), ("b".into(), b.clone())], true).unwrap();
        assert_eq!(m.differences(&whole), Vec::<String>::new());
        let mut other = whole.clone();
        other.runs[1].outcome = "silent".into();
        other.runs[2].dumps.clear();
        other.runs[2].dump_replays.clear();
        other.runs[2].dump_kinds.clear();
        other.runs.pop();
        let diff = m.differences(&other);
        assert_eq!(diff.len(), 3, "{diff:?}");
        assert!(
            diff[0].starts_with("run 1: ")
                && diff[0].ends_with(
                    " dumps=[hang engine=0 capture=ok] vs hang-s#0 seed 7 detected-recovered passed=true dumps=[]; replay commands differ"
                ),
            "{diff:?}"
        );
        // The same number of dumps, but another kind, or another replay.
        let mut kind = whole.clone();
        kind.runs[2].dump_kinds = vec!["fault engine=0 capture=ok".into()];
        assert_eq!(m.differences(&kind).len(), 1);
        let mut replay = whole.clone();
        replay.runs[0].replay = "other".into();
        let d = m.differences(&replay);
        assert!(
            d.len() == 1 && d[0].ends_with("; replay commands differ"),
            "{d:?}"
        );
        assert!(
            diff[1].starts_with("run 2: ") && diff[1].contains(" vs hang-s#0 seed 7 silent "),
            "{diff:?}"
        );
        assert!(
            diff[2].starts_with("run 4 ") && diff[2].ends_with("only in the first"),
            "{diff:?}"
        );
        assert_eq!(
            m.runs.iter().map(|r| r.id.index).collect::<Vec<_>>(),
            vec![0, 1, 2, 3, 4]
        );
        let s = m.summary();
        assert_eq!(s["hang"].recover_median_ms, Some(2000.0));
        assert_eq!(s["hang"].recover_max_ms, Some(3000.0));
        assert_eq!(s["fence-event-drop"].silent, 1);
        assert_eq!(s["fence-event-drop"].environment, 1);
        assert_eq!(s["hang"].environment, 0);
        assert_eq!(m.counts(), (3, 2));
        let j = m.junit();
        assert!(j.contains("tests=\"5\" failures=\"2\""));
        assert!(j.contains("<failure"));
        let h = m.html();
        assert!(h.contains("<svg") && h.contains("fence-event-drop"));
        assert!(h.contains("<th>environment</th>"));
        let other = Results {
            campaign: "d".into(),
            ..m.clone()
        };
        assert!(Results::merge(vec![("m".into(), m), ("o".into(), other)], false).is_err());
        // Every shard exactly once, or the merge says which.
        let shard_err = |parts: Vec<(&str, &Results)>| {
            let parts: Vec<(String, Results)> = parts
                .into_iter()
                .map(|(p, r)| (p.to_string(), r.clone()))
                .collect();
            match Results::merge(parts, true) {
                Err(ReportError::Incomplete(e)) => e,
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(shard_err(vec![("a", &a)]), "shard 2/2 missing");
        assert_eq!(
            shard_err(vec![("a", &a), ("a2", &a), ("b", &b)]),
            "shard 1/2 twice: a and a2"
        );
        let c = Results {
            shards: vec!["3/3".into()],
            ..b.clone()
        };
        assert_eq!(
            shard_err(vec![("a", &a), ("c", &c)]),
            "c: shard 3/3 of a split in 3, others in 2"
        );
        let mut b_overlap = b.clone();
        b_overlap.runs.push(a.runs[0].clone());
        assert_eq!(
            shard_err(vec![("a", &a), ("b", &b_overlap)]),
            "run 0 in two shards: a and b"
        );
        assert_eq!(
            shard_err(vec![("w", &whole), ("b", &b)]),
            "w holds the whole campaign, not a shard"
        );
        assert!(Results::merge(vec![("a".into(), a.clone())], false).is_ok());
        assert!(Results::merge(vec![("w".into(), whole.clone())], true).is_ok());
    }
}
