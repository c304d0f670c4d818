//! `vgpu-pf`: the host's view of a partitioned vgpu device, over its
//! control socket (`vgpu-device --vf ... --control PATH`): every VM's
//! partition, engine use and resets, weights, function-level resets, and
//! fault injection into one VF.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use serde_json::Value;

const EXAMPLES: &str = "\
Examples:
  # A device with two VFs, each for its own VM:
  vgpu-device --socket /tmp/gpu.sock --vf contexts=16,vram=128M --vf weight=3 \\
      --control /tmp/gpu-pf.sock

  # Every VF: partition, VM attached, engine time, waits, resets:
  vgpu-pf --control /tmp/gpu-pf.sock list
  vgpu-pf --control /tmp/gpu-pf.sock --json list

  # A third VF for another VM, and later without it:
  vgpu-pf --control /tmp/gpu-pf.sock create contexts=8,vram=64M,weight=2
  vgpu-pf --control /tmp/gpu-pf.sock destroy 3

  # Give VF 1 twice the engine time of a weight-1 VF:
  vgpu-pf --control /tmp/gpu-pf.sock weight 1 2

  # Each VF's share of each engine against its weight's share:
  vgpu-pf --control /tmp/gpu-pf.sock fairness

  # Reset VF 2 (function-level reset; the other VFs keep running):
  vgpu-pf --control /tmp/gpu-pf.sock reset 2

  # Hang VF 1's copy engine at its next FENCE (any vgpu-inject request):
  vgpu-pf --control /tmp/gpu-pf.sock vf 1 arm hang:engine=copy,packet=FENCE

Exit status: 0 on success, 1 if the device refused the request, 2 if the
socket could not be reached.";

/// The host's view of a partitioned vgpu device.
#[derive(Debug, Parser)]
#[command(name = "vgpu-pf", version, about, after_help = EXAMPLES)]
struct Cli {
    /// The device's control socket (`vgpu-device --control PATH`).
    #[arg(long, value_name = "PATH")]
    control: PathBuf,

    /// Print the device's JSON reply as it is.
    #[arg(long)]
    json: bool,

    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Every VF: partition, VM attached, engine use, resets.
    List,
    /// Creates a VF while the device runs: SPEC is
    /// `contexts=N,vram=SIZE,visible=SIZE,weight=W,socket=PATH`, every key
    /// optional (8 contexts, 64 MiB or the largest window left, weight 1,
    /// socket `SOCKET.vfN`). Prints its number and socket.
    Create {
        /// The partition.
        #[arg(default_value = "")]
        spec: String,
    },
    /// Destroys VF N; a VM attached to it is disconnected.
    Destroy {
        /// The VF.
        n: u32,
    },
    /// Sets VF N's scheduling weight (1..=100).
    Weight {
        /// The VF.
        n: u32,
        /// Its weight.
        w: u32,
    },
    /// A function-level reset of VF N.
    Reset {
        /// The VF.
        n: u32,
    },
    /// Each VF's share of each engine against its weight's share.
    Fairness,
    /// Sends a fault-injection or sanitizer request (see vgpu-inject) to
    /// VF N.
    Vf {
        /// The VF.
        n: u32,
        /// The request, e.g. `arm hang:engine=copy`.
        #[arg(required = true, num_args = 1..)]
        request: Vec<String>,
    },
}

fn ms(ns: &Value) -> f64 {
    ns.as_u64().unwrap_or(0) as f64 / 1e6
}

fn print_list(v: &Value) {
    println!(
        "{:>3} {:>4} {:>9} {:>9} {:>7} {:>6} {:>6} {:>6} {:>11} {:>11} {:>10}  socket",
        "vf",
        "ctx",
        "vram_MiB",
        "vis_MiB",
        "weight",
        "vm",
        "resets",
        "faults",
        "copy_ms",
        "comp_ms",
        "max_wait"
    );
    for f in v["vfs"].as_array().into_iter().flatten() {
        let e = &f["engines"];
        let wait = ms(&e["copy"]["max_wait_ns"]).max(ms(&e["compute"]["max_wait_ns"]));
        let n = |k: &str| f[k].as_u64().unwrap_or(0);
        println!(
            "{:>3} {:>4} {:>9} {:>9} {:>7} {:>6} {:>6} {:>6} {:>11.1} {:>11.1} {:>8.1}ms  {}",
            n("vf"),
            n("contexts"),
            n("vram_size") >> 20,
            n("visible_vram_size") >> 20,
            n("weight"),
            if f["connected"] == true { "yes" } else { "no" },
            n("device_resets"),
            n("faults"),
            ms(&e["copy"]["busy_ns"]),
            ms(&e["compute"]["busy_ns"]),
            wait,
            f["socket"].as_str().unwrap_or("")
        );
    }
}

fn print_fairness(v: &Value) {
    for (name, e) in v["engines"].as_object().into_iter().flatten() {
        println!("{name}: {:.1} ms of engine time", ms(&e["busy_ns"]));
        for f in e["vfs"].as_array().into_iter().flatten() {
            println!(
                "  vf {}: weight {:>3}  {:>9.1} ms  share {:>5.1}%  (weighted share {:>5.1}%)",
                f["vf"].as_u64().unwrap_or(0),
                f["weight"].as_u64().unwrap_or(0),
                ms(&f["busy_ns"]),
                f["share"].as_f64().unwrap_or(0.0) * 100.0,
                f["weighted_share"].as_f64().unwrap_or(0.0) * 100.0
            );
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let line = match &cli.cmd {
        Cmd::List => "vf list".to_owned(),
        Cmd::Create { spec } => format!("vf create {spec}"),
        Cmd::Destroy { n } => format!("vf destroy {n}"),
        Cmd::Weight { n, w } => format!("vf weight {n} {w}"),
        Cmd::Reset { n } => format!("vf reset {n}"),
        Cmd::Fairness => "vf fairness".to_owned(),
        Cmd::Vf { n, request } => format!("vf {n} {}", request.join(" ")),
    };
    let run = || -> std::io::Result<String> {
        let mut s = UnixStream::connect(&cli.control)?;
        s.write_all(line.as_bytes())?;
        s.write_all(b"\n")?;
        let mut reply = String::new();
        BufReader::new(s).read_line(&mut reply)?;
        Ok(reply)
    };
    let reply = match run() {
        Ok(r) => r,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "vgpu-pf: {}: {e}", cli.control.display());
            return ExitCode::from(2);
        }
    };
    let v: Value = serde_json::from_str(&reply).unwrap_or(Value::Null);
    if v["ok"] != true {
        let _ = writeln!(std::io::stderr(), "vgpu-pf: {}", reply.trim());
        return ExitCode::FAILURE;
    }
    match (&cli.cmd, cli.json) {
        (Cmd::List, false) => print_list(&v),
        (Cmd::Fairness, false) => print_fairness(&v),
        (Cmd::Create { .. }, false) => println!(
            "virtual function {} on {}: {} contexts, {} MiB of VRAM at offset {} MiB ({} MiB visible), weight {}",
            v["vf"],
            v["socket"].as_str().unwrap_or(""),
            v["contexts"],
            v["vram_size"].as_u64().unwrap_or(0) >> 20,
            v["vram_offset"].as_u64().unwrap_or(0) >> 20,
            v["visible_vram_size"].as_u64().unwrap_or(0) >> 20,
            v["weight"]
        ),
        _ => {
            let _ = std::io::stdout().write_all(reply.as_bytes());
        }
    }
    ExitCode::SUCCESS
}
