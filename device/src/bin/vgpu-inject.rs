//! `vgpu-inject`: talks to a running vgpu-device's fault-injection control
//! socket (`vgpu-device --control PATH`).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

const EXAMPLES: &str = "\
Examples:
  # Which fault classes the device knows:
  vgpu-inject --control /tmp/vgpu-inject.sock list

  # Hang the compute engine at its next packet of context 2:
  vgpu-inject --control /tmp/vgpu-inject.sock arm 'hang:engine=compute,ctx=2'

  # Drop 10% of fence events, seeded, at most 5 times:
  vgpu-inject --control /tmp/vgpu-inject.sock seed 7
  vgpu-inject --control /tmp/vgpu-inject.sock arm 'fence-event-drop:p=0.1,count=5'

  # What is armed, what was injected (with ids and timestamps):
  vgpu-inject --control /tmp/vgpu-inject.sock status
  vgpu-inject --control /tmp/vgpu-inject.sock log

  # Disarm one fault, or all:
  vgpu-inject --control /tmp/vgpu-inject.sock disarm 1
  vgpu-inject --control /tmp/vgpu-inject.sock disarm all

  # Poison the page a copy reads next; list and forget poisoned pages:
  vgpu-inject --control /tmp/vgpu-inject.sock arm 'ecc:engine=copy,packet=COPY'
  vgpu-inject --control /tmp/vgpu-inject.sock poisoned
  vgpu-inject --control /tmp/vgpu-inject.sock unpoison all

  # The driver sanitizer (docs/sanitizer.md): on, its counts, its reports:
  vgpu-inject --control /tmp/vgpu-inject.sock sanitize on
  vgpu-inject --control /tmp/vgpu-inject.sock sanitize status
  vgpu-inject --control /tmp/vgpu-inject.sock sanitize reports

  # Capture device context 3's copy ring now, save it, decode and replay it:
  vgpu-inject --control /tmp/vgpu-inject.sock capture 3 0
  vgpu-inject --control /tmp/vgpu-inject.sock capture-save 0 /tmp/cap.bin
  vgpu-dump /tmp/cap.bin && vgpu-replay /tmp/cap.bin

Each reply is one line of JSON; the exit status is 1 when the device
answers {\"ok\":false,...}.";

/// Arms, disarms and inspects faults of a running vgpu-device.
#[derive(Debug, Parser)]
#[command(name = "vgpu-inject", version, after_help = EXAMPLES)]
struct Cli {
    /// The device's control socket (vgpu-device --control PATH).
    #[arg(long, value_name = "PATH")]
    control: PathBuf,

    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// List the fault classes.
    List,
    /// Arm a fault: CLASS[:key=val,...].
    Arm {
        /// The fault specification.
        spec: String,
    },
    /// Disarm fault ID, or `all`.
    Disarm {
        /// Fault id or `all`.
        id: String,
    },
    /// Armed faults and their counts.
    Status,
    /// The injection log (entries after SINCE).
    Log {
        /// Show entries with a number above this.
        #[arg(default_value_t = 0)]
        since: u64,
    },
    /// Seed the random draws of faults armed afterwards.
    Seed {
        /// The seed.
        n: u64,
    },
    /// Guest-physical pages poisoned by `ecc`.
    Poisoned,
    /// Forget the poison of page PA, or of `all` pages.
    Unpoison {
        /// Guest-physical address (decimal or 0x hex) or `all`.
        pa: String,
    },
    /// The driver sanitizer: `status`, `on [CHECKS]`, `off`, `mode
    /// report|stop`, `reports [SINCE]`.
    Sanitize {
        /// The request and its arguments.
        #[arg(default_value = "status", num_args = 0..)]
        args: Vec<String>,
    },
    /// Capture context CTX on ENGINE now (decode with vgpu-dump, replay
    /// with vgpu-replay).
    Capture {
        /// Device context id.
        ctx: u32,
        /// Engine: 0 copy, 1 compute.
        #[arg(default_value_t = 0)]
        engine: u32,
    },
    /// The captures the device holds.
    Captures,
    /// Write capture ID (0: the newest) to PATH (a path the device can
    /// write).
    CaptureSave {
        /// Capture id, or 0.
        id: u32,
        /// Where.
        path: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let line = match &cli.cmd {
        Cmd::List => "list".to_owned(),
        Cmd::Arm { spec } => format!("arm {spec}"),
        Cmd::Disarm { id } => format!("disarm {id}"),
        Cmd::Status => "status".to_owned(),
        Cmd::Log { since } => format!("log {since}"),
        Cmd::Seed { n } => format!("seed {n}"),
        Cmd::Poisoned => "poisoned".to_owned(),
        Cmd::Unpoison { pa } => format!("unpoison {pa}"),
        Cmd::Sanitize { args } => format!("sanitize {}", args.join(" ")),
        Cmd::Capture { ctx, engine } => format!("capture {ctx} {engine}"),
        Cmd::Captures => "captures".to_owned(),
        Cmd::CaptureSave { id, path } => format!("capture-save {id} {}", path.display()),
    };
    let run = || -> std::io::Result<String> {
        let mut s = UnixStream::connect(&cli.control)?;
        s.write_all(line.as_bytes())?;
        s.write_all(b"\n")?;
        let mut reply = String::new();
        BufReader::new(s).read_line(&mut reply)?;
        Ok(reply)
    };
    match run() {
        Ok(reply) => {
            // SIGPIPE stays ignored (a device that went away must be an
            // error, not a kill): a closed standard output drops the reply.
            let _ = std::io::stdout().write_all(reply.as_bytes());
            if reply.starts_with("{\"ok\":true") {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            let _ = writeln!(
                std::io::stderr(),
                "vgpu-inject: {}: {e}",
                cli.control.display()
            );
            ExitCode::from(2)
        }
    }
}
