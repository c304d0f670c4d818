//! `vgpu-campaign`: fault-injection campaigns against the vgpu stack.
//!
//! Boots a fresh VM per run through `scripts/vm` (or, with `vm = "reuse"`,
//! runs the runs in sequence in one VM, see `reuse.rs`), arms the
//! scenario's fault in the device, runs the workload, and classifies what
//! happened from the guest's output, the kernel log and the device's
//! injection log.
//!
//! Each module uses only the modules of its row (checked by
//! `scripts/deps`), top first: the reports (`report`) and the one-VM
//! mode (`reuse`) over the runner (`run`) over the campaign file
//! (`spec`).
//!
//! | block | may use |
//! |---|---|
//! | `minimize` | `run`, `spec` |
//! | `neighbour` | `run`, `spec` |
//! | `report` | `run`, `spec` |
//! | `reuse` | `run`, `spec` |
//! | `run` | `spec` |
//! | `spec` | - |

/// `println!` that drops its line when standard output is closed (a
/// reader that went away, `vgpu-campaign list | head -1`) instead of
/// panicking. The campaign keeps SIGPIPE ignored, because it writes to its
/// VMs' consoles and must see EPIPE when one dies rather than die itself;
/// its results are in files, so a closed terminal or pipe loses nothing.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

/// `eprintln!` that drops its line when standard error is closed.
macro_rules! errln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

/// `eprint!` that drops its text when standard error is closed.
macro_rules! err {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stderr(), $($arg)*);
    }};
}

mod minimize;
mod neighbour;
mod report;
mod reuse;
mod run;
mod spec;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use report::Results;
use run::Runner;
use spec::{Campaign, Shard};

const EXAMPLES: &str = "\
Examples:
  # The smoke campaign (what CI runs), results in target/campaign/smoke:
  vgpu-campaign run campaigns/smoke.toml --out target/campaign/smoke

  # Every fault class several times:
  vgpu-campaign run campaigns/default.toml --out target/campaign/default

  # Replay one run exactly (seed and scenario from the report):
  vgpu-campaign run campaigns/default.toml --only copy-hang --rep 2 --seed 7

  # One VM for all runs (a fresh one after a run that broke it):
  vgpu-campaign run campaigns/smoke.toml --vm reuse

  # Split across 4 machines, then merge the JSON results:
  vgpu-campaign run campaigns/default.toml --shard 1/4 --out shard1
  vgpu-campaign merge shard*/results.json --out merged

  # Shrink a failing run to what makes it fail (writes minimized.toml
  # and minimized.vgrec):
  vgpu-campaign minimize campaigns/default.toml --only copy-hang --rep 1 --out min

  # What a campaign would run, without running it:
  vgpu-campaign list campaigns/default.toml --shard 2/4

Each output directory gets results.json, junit.xml and report.html; the
last line printed is 'campaign: N passed, N failed' and the exit status is
1 if any run failed its expectations.";

/// Runs fault-injection campaigns against vgpu in QEMU and reports.
#[derive(Debug, Parser)]
#[command(name = "vgpu-campaign", version, about, after_help = EXAMPLES)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

/// `vgpu-campaign run`'s arguments.
#[derive(Debug, clap::Args)]
struct RunArgs {
    /// The campaign file (TOML).
    campaign: String,
    /// Base seed (replaces the file's; every run's seed derives from it).
    #[arg(long)]
    seed: Option<u64>,
    /// Run only shard I of N (round-robin over the campaign's runs).
    #[arg(long, value_name = "I/N")]
    shard: Option<Shard>,
    /// Run only this scenario.
    #[arg(long, value_name = "NAME")]
    only: Option<String>,
    /// Run only this repetition (with --only).
    #[arg(long, value_name = "N")]
    rep: Option<u64>,
    /// Output directory.
    #[arg(long, default_value = "target/campaign")]
    out: PathBuf,
    /// Do not build the guest and device before the first run.
    #[arg(long)]
    no_build: bool,
    /// `fresh`: boot a VM per run; `reuse`: run the runs in sequence in
    /// one VM (replaced after a run that broke it). Default: the
    /// campaign's `vm` setting, else fresh.
    #[arg(long, value_name = "MODE", value_parser = ["fresh", "reuse"])]
    vm: Option<String>,
    /// Run the device's driver sanitizer (every check, or CHECKS as
    /// for `vgpu-device --sanitize`), overriding the campaign's
    /// `sanitize`; its reports are counted per run and class.
    #[arg(long, value_name = "CHECKS", num_args = 0..=1, default_missing_value = "all")]
    sanitize: Option<String>,
    /// Fail every run with a sanitizer report (the campaign's
    /// `require_no_sanitizer_reports`).
    #[arg(long)]
    require_no_sanitizer_reports: bool,
    /// Record each VM's device session into `session.vgrec` of its log
    /// directory (replay: `vgpu-replay --record FILE`).
    #[arg(long)]
    record: bool,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Run a campaign (or a shard or a part of it).
    Run(RunArgs),
    /// Shrink a failing run to the smallest run that still fails the same
    /// way (the same outcome, its expectations failed): delta debugging over
    /// its device faults, driver faults and workload commands, then the
    /// numbers that size them (a fault's `after`, `count`, `bits`, ...; the
    /// workload's sizes). Each try is a fresh VM with the run's seed.
    /// Writes OUT/minimized.toml (a campaign entry) and OUT/minimized.vgrec
    /// (the minimised run's device session, for `vgpu-replay`).
    Minimize {
        /// The campaign file (TOML).
        campaign: String,
        /// The failing run's scenario.
        #[arg(long, value_name = "NAME")]
        only: String,
        /// Its repetition.
        #[arg(long, value_name = "N", default_value_t = 0)]
        rep: u64,
        /// Base seed (as given to `run`).
        #[arg(long)]
        seed: Option<u64>,
        /// Output directory.
        #[arg(long, default_value = "target/campaign/minimized")]
        out: PathBuf,
        /// Do not build the guest and device before the first run.
        #[arg(long)]
        no_build: bool,
        /// Runs to spend at most (besides the original and the last).
        #[arg(long, default_value_t = 150)]
        max_runs: u32,
    },
    /// List the runs a campaign (or shard) would make.
    List {
        /// The campaign file (TOML).
        campaign: String,
        /// Base seed.
        #[arg(long)]
        seed: Option<u64>,
        /// Only shard I of N.
        #[arg(long, value_name = "I/N")]
        shard: Option<Shard>,
    },
    /// Merge JSON results of shards into one result set and report.
    Merge {
        /// results.json files.
        #[arg(required = true)]
        inputs: Vec<String>,
        /// Output directory.
        #[arg(long, default_value = "target/campaign/merged")]
        out: PathBuf,
        /// Merge whatever shards are given (by default the inputs must be
        /// every shard of one split exactly once: 1/N .. N/N).
        #[arg(long)]
        partial: bool,
    },
    /// Compare two results (say, a merged set of shards with one run of
    /// the whole campaign): the same runs with the same seeds, faults,
    /// outcomes, verdicts and devcoredump counts. Timings are not
    /// compared. Exit status 1 when they differ.
    Compare {
        /// results.json.
        a: String,
        /// results.json.
        b: String,
    },
}

fn summary_lines(r: &Results) {
    errln!(
        "{:<18} {:>4} {:>8} {:>8} {:>9} {:>6} {:>6} {:>7} {:>4} {:>10} {:>10} {:>11}",
        "class",
        "runs",
        "injected",
        "detected",
        "recovered",
        "silent",
        "panics",
        "crashes",
        "env",
        "rec.med ms",
        "rec.max ms",
        "san (runs)"
    );
    let f = |v: Option<f64>| v.map_or("-".to_owned(), |x| format!("{x:.0}"));
    for (class, s) in r.summary() {
        errln!(
            "{:<18} {:>4} {:>8} {:>8} {:>9} {:>6} {:>6} {:>7} {:>4} {:>10} {:>10} {:>11}",
            class,
            s.runs,
            s.injected,
            s.detected,
            s.recovered,
            s.silent,
            s.panics,
            s.crashes,
            s.environment,
            f(s.recover_median_ms),
            f(s.recover_max_ms),
            format!("{} ({})", s.sanitizer_reports, s.sanitizer_runs)
        );
    }
}

fn finish(r: &Results, out: &std::path::Path) -> ExitCode {
    if let Err(e) = r.write_all(out) {
        errln!("vgpu-campaign: {e}");
        return ExitCode::from(2);
    }
    summary_lines(r);
    errln!(
        "results: {}/results.json, junit.xml, report.html",
        out.display()
    );
    let (p, f) = r.counts();
    outln!("campaign: {p} passed, {f} failed");
    if f == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The campaign file `path`, loaded and checked, and the repository that
/// runs it (`scripts/vm`); the exit status (2) once the reason is printed.
fn campaign_and_repo(path: &str) -> Result<(Campaign, PathBuf), ExitCode> {
    let c = Campaign::load(path).map_err(|e| {
        errln!("vgpu-campaign: {e}");
        ExitCode::from(2)
    })?;
    let repo = run::find_repo().ok_or_else(|| {
        errln!("vgpu-campaign: no scripts/vm here or above (set VGPU_REPO)");
        ExitCode::from(2)
    })?;
    Ok((c, repo))
}

/// `vgpu-campaign minimize`.
fn minimize_cmd(
    campaign: &str,
    only: &str,
    rep: u64,
    seed: Option<u64>,
    out: &Path,
    no_build: bool,
    max_runs: u32,
) -> ExitCode {
    let (c, repo) = match campaign_and_repo(campaign) {
        Ok(v) => v,
        Err(code) => return code,
    };
    let runner = Runner {
        repo,
        log_dir: out.join("runs"),
        build: !no_build,
        campaign_path: campaign.to_owned(),
        seed,
        sanitize: c.campaign.sanitize.clone(),
        require_no_sanitizer_reports: c.campaign.require_no_sanitizer_reports,
        record: false,
    };
    let t = minimize::Target {
        only,
        rep,
        seed,
        max_runs,
    };
    let r = minimize::command(&c, &runner, &t, out, &mut |l| errln!("minimize: {l}"));
    match r {
        Ok(m) => {
            for s in &m.steps {
                outln!("step: {s}");
            }
            outln!("from: {}", m.from.describe());
            outln!("to:   {}", m.to.describe());
            outln!(
                "runs: {}; the last run {} the same way",
                m.runs,
                if m.confirmed {
                    "failed"
                } else {
                    "did NOT fail"
                }
            );
            outln!(
                "replay: vgpu-campaign run {} --only {only} --rep {rep}",
                m.campaign.display()
            );
            if let Some(v) = &m.recording {
                outln!("device session: vgpu-replay --record {}", v.display());
            }
            if m.confirmed {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            errln!("vgpu-campaign: {e}");
            ExitCode::from(2)
        }
    }
}

/// `vgpu-campaign run`.
fn run_cmd(args: RunArgs) -> ExitCode {
    let RunArgs {
        campaign,
        seed,
        shard,
        only,
        rep,
        out,
        no_build,
        vm,
        sanitize,
        require_no_sanitizer_reports,
        record,
    } = args;
    let (c, repo) = match campaign_and_repo(&campaign) {
        Ok(v) => v,
        Err(code) => return code,
    };
    if let Some(o) = &only {
        if c.scenario(o).is_none() {
            errln!("vgpu-campaign: no scenario '{o}' in {campaign}");
            return ExitCode::from(2);
        }
    }
    let runs: Vec<_> = c
        .runs(seed)
        .into_iter()
        .filter(|r| shard.is_none_or(|s| s.takes(r.index)))
        .filter(|r| only.as_ref().is_none_or(|o| *o == r.scenario))
        .filter(|r| rep.is_none_or(|n| n == r.rep))
        .collect();
    let runner = Runner {
        repo,
        log_dir: out.join("runs"),
        build: !no_build,
        campaign_path: campaign.clone(),
        seed,
        sanitize: sanitize.or_else(|| c.campaign.sanitize.clone()),
        require_no_sanitizer_reports: require_no_sanitizer_reports
            || c.campaign.require_no_sanitizer_reports,
        record,
    };
    let mut results = Results {
        campaign: c.campaign.name.clone(),
        seed,
        shards: shard
            .map(|s| vec![format!("{}/{}", s.i, s.n)])
            .unwrap_or_default(),
        runs: Vec::new(),
    };
    let total = runs.len();
    let vm = vm.unwrap_or_else(|| c.campaign.vm.clone());
    let mut reuse = (vm == "reuse").then(|| reuse::ReuseRunner::new(&runner));
    let t0 = std::time::Instant::now();
    for (k, id) in runs.iter().enumerate() {
        err!(
            "[{}/{total}] {}#{} (seed {}) ... ",
            k + 1,
            id.scenario,
            id.rep,
            id.seed
        );
        // A run with a neighbour boots its two VMs on one device whatever
        // the mode (a reused VM has a device of its own).
        let with_neighbour = c
            .scenario(&id.scenario)
            .is_some_and(|s| s.neighbour.is_some());
        let result = match reuse.as_mut() {
            _ if with_neighbour => neighbour::run(&runner, &c, id, k == 0),
            Some(rr) => rr.run(&c, id, k == 0),
            None => runner.run(&c, id, k == 0),
        };
        match result {
            Ok(r) => {
                errln!(
                    "{} {} ({:.1} s{}{}{})",
                    if r.passed { "PASS" } else { "FAIL" },
                    r.outcome,
                    r.duration_s,
                    r.detect_ms
                        .map_or(String::new(), |d| format!(", detected in {d:.0} ms")),
                    if r.reasons.is_empty() {
                        String::new()
                    } else {
                        format!("; {}", r.reasons.join("; "))
                    },
                    r.vm_replaced
                        .as_ref()
                        .map_or(String::new(), |w| format!("; new VM: {w}"))
                );
                results.runs.push(r);
            }
            Err(e) => {
                errln!("error: {e}");
                return ExitCode::from(2);
            }
        }
    }
    let boots = match reuse.as_mut() {
        Some(rr) => {
            rr.shutdown();
            rr.boots()
        }
        None => total as u64,
    };
    drop(reuse);
    errln!(
        "{total} runs in {:.0} s ({vm} VMs: {boots} booted)",
        t0.elapsed().as_secs_f64()
    );
    finish(&results, &out)
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::List {
            campaign,
            seed,
            shard,
        } => {
            let c = match Campaign::load(&campaign) {
                Ok(c) => c,
                Err(e) => {
                    errln!("vgpu-campaign: {e}");
                    return ExitCode::from(2);
                }
            };
            for r in c.runs(seed) {
                if shard.is_none_or(|s| s.takes(r.index)) {
                    let s = c.scenario(&r.scenario);
                    let fault = s
                        .and_then(|s| s.fault.clone())
                        .or_else(|| {
                            s.and_then(|s| s.driver_fault.as_ref().map(|d| format!("driver:{d}")))
                        })
                        .unwrap_or_else(|| "none".into());
                    outln!(
                        "{:4} {}#{} seed={} fault={fault}",
                        r.index,
                        r.scenario,
                        r.rep,
                        r.seed
                    );
                }
            }
            ExitCode::SUCCESS
        }
        Cmd::Minimize {
            campaign,
            only,
            rep,
            seed,
            out,
            no_build,
            max_runs,
        } => minimize_cmd(&campaign, &only, rep, seed, &out, no_build, max_runs),
        Cmd::Compare { a, b } => {
            let (ra, rb) = match (Results::read(&a), Results::read(&b)) {
                (Ok(x), Ok(y)) => (x, y),
                (Err(e), _) | (_, Err(e)) => {
                    eprintln!("vgpu-campaign: {e}");
                    return ExitCode::from(2);
                }
            };
            let diff = ra.differences(&rb);
            for d in &diff {
                println!("{d}");
            }
            println!(
                "compare: {} runs, {} difference(s)",
                ra.runs.len().max(rb.runs.len()),
                diff.len()
            );
            if diff.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Cmd::Merge {
            inputs,
            out,
            partial,
        } => {
            let mut parts = Vec::new();
            for p in inputs {
                match Results::read(&p) {
                    Ok(r) => parts.push((p, r)),
                    Err(e) => {
                        errln!("vgpu-campaign: {e}");
                        return ExitCode::from(2);
                    }
                }
            }
            // The runs' devcoredumps, at the same paths under `out`.
            for (p, r) in &parts {
                let from = Path::new(p).parent().unwrap_or(Path::new("."));
                if let Err(e) = r.copy_dumps(from, &out) {
                    eprintln!("vgpu-campaign: {e}");
                    return ExitCode::from(2);
                }
            }
            match Results::merge(parts, !partial) {
                Ok(r) => finish(&r, &out),
                Err(e) => {
                    errln!("vgpu-campaign: {e}");
                    ExitCode::from(2)
                }
            }
        }
        Cmd::Run(args) => run_cmd(args),
    }
}
