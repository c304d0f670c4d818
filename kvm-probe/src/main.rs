//! `vgpu-kvm-probe`: can this host's KVM run the vgpu guest? (see the
//! library's docs). `scripts/vm` uses it to choose between KVM and TCG.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use vgpu_kvm_probe::{guest, probe};

const EXAMPLES: &str = "\
Examples:
  # Usable or not, and why (exit status 0: usable, 1: not usable):
  vgpu-kvm-probe

  # The same as JSON, for scripts:
  vgpu-kvm-probe --json

  # Another device node, a shorter limit:
  vgpu-kvm-probe --device /dev/kvm --timeout-ms 200

  # A guest that never exits: checks that the timeout stops it:
  vgpu-kvm-probe --guest spin --timeout-ms 100

Output: one line, 'KVM usable: WHY (T ms)' or 'KVM not usable: WHY (T ms)'.";

/// Decides in milliseconds whether /dev/kvm can run the vgpu guest.
#[derive(Debug, Parser)]
#[command(name = "vgpu-kvm-probe", version, about, after_help = EXAMPLES)]
struct Cli {
    /// The KVM device node.
    #[arg(long, default_value = "/dev/kvm")]
    device: String,
    /// Longest time the probe guest may run, in milliseconds.
    #[arg(long, default_value_t = 1000, value_name = "MS")]
    timeout_ms: u64,
    /// The probe guest: `xsave` (the walk that decides) or `spin` (never
    /// exits; only the timeout ends it).
    #[arg(long, value_enum, default_value_t = GuestArg::Xsave)]
    guest: GuestArg,
    /// Print the full report as one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum GuestArg {
    Xsave,
    Spin,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let report = probe::probe(&probe::Options {
        device: cli.device,
        timeout: Duration::from_millis(cli.timeout_ms),
        program: match cli.guest {
            GuestArg::Xsave => guest::Program::Xsave,
            GuestArg::Spin => guest::Program::Spin,
        },
    });
    if cli.json {
        match serde_json::to_string(&report) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("vgpu-kvm-probe: {e}");
                return ExitCode::from(2);
            }
        }
    } else {
        println!(
            "KVM {}: {} ({:.1} ms)",
            if report.verdict.usable {
                "usable"
            } else {
                "not usable"
            },
            report.verdict.reason,
            report.elapsed_ms
        );
    }
    if report.verdict.usable {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
