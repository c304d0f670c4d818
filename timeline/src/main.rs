//! `vgpu-timeline`: the device's, the KMD's and the UMD's traces of one
//! session on one clock, in one Chrome/Perfetto file; and a strict checker
//! of the trace-event format.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use vgpu_timeline::check::check;
use vgpu_timeline::input::{between_markers, parse_device, parse_kmd, parse_umd};
use vgpu_timeline::jobs::{self, STEPS};
use vgpu_timeline::merge::{merge, Summary};

const EXAMPLES: &str = "\
Examples:
  # Everything in one command (boots a VM, runs the workload, writes the
  # merged file and checks it):
  scripts/timeline --out timeline.json 'vgpu-samples copy; vgpu-samples vecadd'

  # By hand: the device's trace, the KMD's (debugfs trace), the UMD's
  # (VGPU_TRACE=FILE) merged, then checked:
  vgpu-timeline merge --device dev.json --kmd kmd.txt --umd umd.jsonl -o timeline.json
  vgpu-timeline check timeline.json

  # The guest's traces printed on its console between markers
  # (=== vgpu-kmd-trace begin/end ===, === vgpu-umd-trace begin/end ===):
  vgpu-timeline merge --device dev.json --console console.log -o timeline.json

Open the result at https://ui.perfetto.dev (or chrome://tracing).

Exit status: merge: 0 written, 2 an input could not be read or merged;
check: 0 the file passes, 1 it does not, 2 it could not be read.";

/// The KMD trace's markers on a console.
pub const KMD_MARKERS: (&str, &str) =
    ("=== vgpu-kmd-trace begin ===", "=== vgpu-kmd-trace end ===");
/// The UMD trace's markers on a console.
pub const UMD_MARKERS: (&str, &str) =
    ("=== vgpu-umd-trace begin ===", "=== vgpu-umd-trace end ===");

/// One timeline of a vgpu session from the device's, the KMD's and the
/// UMD's traces.
#[derive(Debug, Parser)]
#[command(name = "vgpu-timeline", version, about, after_help = EXAMPLES)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Merge the traces into one Chrome/Perfetto JSON file on the guest's
    /// clock.
    Merge {
        /// The device's trace (vgpu-device --trace FILE).
        #[arg(long, value_name = "FILE")]
        device: Option<PathBuf>,
        /// The KMD's trace (debugfs vgpu/*/trace).
        #[arg(long, value_name = "FILE", required_unless_present = "console")]
        kmd: Option<PathBuf>,
        /// The UMD's spans (VGPU_TRACE=FILE); repeatable.
        #[arg(long, value_name = "FILE")]
        umd: Vec<PathBuf>,
        /// A console log holding the KMD's and the UMD's traces between
        /// their markers.
        #[arg(long, value_name = "FILE")]
        console: Option<PathBuf>,
        /// Output file.
        #[arg(short, long, value_name = "FILE")]
        out: PathBuf,
    },
    /// Check a file against the trace-event format (strict).
    Check {
        /// A Chrome/Perfetto trace-event JSON file.
        file: PathBuf,
    },
}

fn read(p: &Path) -> Result<String, String> {
    std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))
}

fn main() -> ExitCode {
    match Cli::parse().cmd {
        Cmd::Merge {
            device,
            kmd,
            umd,
            console,
            out,
        } => match run_merge(
            device.as_deref(),
            kmd.as_deref(),
            &umd,
            console.as_deref(),
            &out,
        ) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("vgpu-timeline: {e}");
                ExitCode::from(2)
            }
        },
        Cmd::Check { file } => run_check(&file),
    }
}

fn run_merge(
    device: Option<&Path>,
    kmd: Option<&Path>,
    umd: &[PathBuf],
    console: Option<&Path>,
    out: &Path,
) -> Result<(), String> {
    let console_text = console.map(read).transpose()?;
    let kmd_text = match (kmd, console_text.as_deref()) {
        (Some(p), _) => read(p)?,
        (None, Some(c)) => between_markers(c, KMD_MARKERS.0, KMD_MARKERS.1)
            .ok_or("the console has no KMD trace between its markers")?,
        (None, None) => return Err("no KMD trace (--kmd or --console)".into()),
    };
    let kmd = parse_kmd("KMD trace", &kmd_text).map_err(|e| e.to_string())?;
    let mut umd_text = String::new();
    for p in umd {
        umd_text += &read(p)?;
    }
    if let Some(u) = console_text
        .as_deref()
        .and_then(|c| between_markers(c, UMD_MARKERS.0, UMD_MARKERS.1))
    {
        umd_text += &u;
    }
    let umd = parse_umd("UMD trace", &umd_text).map_err(|e| e.to_string())?;
    let dev = device
        .map(|p| {
            read(p)
                .and_then(|t| parse_device(&p.display().to_string(), &t).map_err(|e| e.to_string()))
        })
        .transpose()?;
    let (doc, s) = merge(&kmd, dev.as_ref(), Some(&umd)).map_err(|e| e.to_string())?;
    let text = serde_json::to_string(&doc).map_err(|e| e.to_string())?;
    std::fs::write(out, text).map_err(|e| format!("{}: {e}", out.display()))?;
    print_summary(&s, out);
    Ok(())
}

fn print_summary(s: &Summary, out: &Path) {
    let (d, k, p, u) = s.inputs;
    println!("inputs: device {d} events, kmd {k} records, umd {p} processes {u} spans");
    if let Some(c) = &s.clock {
        let quality = match (c.uncertainty_ns, c.conflict_ns) {
            (Some(u), _) => format!("consistent, +-{:.1} us", u / 1000.0),
            (_, Some(x)) => format!(
                "INCONSISTENT by {:.1} us (least-squares offset used)",
                x / 1000.0
            ),
            _ => String::new(),
        };
        println!(
            "clock: device_ns = {:.9} * guest_ns + {:.0}; {} TIME_QUERY samples (round trips {}..{} us), {} causal pairs; {quality}; TIME_QUERY fit alone {:+.1} us from it",
            c.slope,
            c.offset,
            c.samples,
            c.rtt_ns.0 / 1000,
            c.rtt_ns.1 / 1000,
            c.pairs,
            (c.fit_offset - c.offset) / 1000.0
        );
    }
    println!(
        "jobs: {} written to rings, {} with the whole chain (submit .. fence signal), {} of them ordered on the one clock",
        s.chains.len(),
        s.complete(),
        s.ordered()
    );
    for c in s.chains.iter().filter(|c| c.complete()) {
        if let Some((a, b, ns)) = c.misorder() {
            println!(
                "misordered: {}: {} {ns} ns before {}",
                c.name(),
                STEPS[b],
                STEPS[a]
            );
        }
    }
    if let Some(c) = s
        .chains
        .iter()
        .find(|c| c.complete() && c.misorder().is_none())
    {
        let t0 = c.points.first().map_or(0, |p| p.start);
        let steps: Vec<String> = c
            .points
            .iter()
            .map(|p| format!("{} +{:.1}", STEPS[p.step], (p.start - t0) as f64 / 1000.0))
            .collect();
        println!("example: {}: {} (us)", c.name(), steps.join(", "));
    }
    let medians = jobs::step_medians(&s.chains);
    if !medians.is_empty() {
        let parts: Vec<String> = medians
            .iter()
            .map(|&(a, b, ns, n)| {
                format!(
                    "{} -> {} {:.1} ({n})",
                    STEPS[a],
                    STEPS[b],
                    ns as f64 / 1000.0
                )
            })
            .collect();
        println!("median step times (us, jobs): {}", parts.join(", "));
    }
    println!(
        "wrote {}: {} events, {} flows",
        out.display(),
        s.events,
        s.flows
    );
}

fn run_check(file: &Path) -> ExitCode {
    let text = match read(file) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("vgpu-timeline: {e}");
            return ExitCode::from(2);
        }
    };
    let r = match check(&text) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("vgpu-timeline: {}: {e}", file.display());
            return ExitCode::from(2);
        }
    };
    for (pid, (name, slices, threads)) in &r.processes {
        println!("process {pid} '{name}': {threads} tracks, {slices} slices");
    }
    for e in r.errors.iter().take(20) {
        println!("error: {e}");
    }
    println!(
        "check: {} events, {} slices, {} flows, {} errors",
        r.events,
        r.slices,
        r.flows,
        r.errors.len()
    );
    if r.errors.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
