//! `vgpu-device`: the vgpu virtual GPU as a vhost-user backend process for
//! QEMU's `vhost-user-gpu-pci`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use signal_hook::consts::{SIGINT, SIGTERM};

use vgpu_device::config::{DeviceConfig, Generation, COMPUTE_UNITS_RANGE, DEFAULT_COMPUTE_UNITS};
use vgpu_device::core::inject::Spec;
use vgpu_device::daemon::{Daemon, SignalSource};

const EXAMPLES: &str = "\
Examples:
  # Serve a generation 2 device on /tmp/vgpu.sock:
  vgpu-device --socket /tmp/vgpu.sock --gen 2

  # Then attach it to QEMU (guest memory must be shared):
  qemu-system-x86_64 -machine q35,memory-backend=mem \\
      -object memory-backend-memfd,id=mem,size=1G,share=on \\
      -chardev socket,id=vgpu,path=/tmp/vgpu.sock \\
      -device vhost-user-gpu-pci,chardev=vgpu,edid=off ...

  # Log every command:
  RUST_LOG=debug vgpu-device --socket /tmp/vgpu.sock

  # Record a timeline of every packet; open it in https://ui.perfetto.dev:
  vgpu-device --socket /tmp/vgpu.sock --trace /tmp/vgpu-trace.json

  # Hang the copy engine on the 3rd FENCE, reproducibly, and accept more
  # faults at run time through a control socket (see vgpu-inject --help):
  vgpu-device --socket /tmp/vgpu.sock --inject 'hang:engine=copy,packet=FENCE,after=3' \
      --inject-seed 42 --control /tmp/vgpu-inject.sock

The process serves one QEMU connection and exits 0 when QEMU disconnects,
or on SIGTERM/SIGINT; the socket file is removed on exit.";

/// The vgpu virtual GPU, served to QEMU as a vhost-user backend.
#[derive(Debug, Parser)]
#[command(name = "vgpu-device", version, about, after_help = EXAMPLES)]
struct Cli {
    /// Path of the vhost-user socket to listen on (a stale socket there is
    /// replaced).
    #[arg(long, value_name = "PATH")]
    socket: PathBuf,

    /// Hardware generation: 1 or 2.
    #[arg(long = "gen", value_name = "N", default_value = "1", value_parser = parse_generation)]
    generation: Generation,

    /// Compute units of the compute engine (reported by IDENTIFY).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_COMPUTE_UNITS,
          value_parser = clap::value_parser!(u32).range(
              i64::from(*COMPUTE_UNITS_RANGE.start())..=i64::from(*COMPUTE_UNITS_RANGE.end())))]
    compute_units: u32,

    /// Record every packet's fetch, execution, fences, faults, errors and
    /// resets, and write them as a Chrome/Perfetto trace (JSON) to FILE
    /// when the device exits.
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,

    /// Arm a fault at startup: CLASS[:key=val,...] (repeatable). Keys:
    /// after, at_ms, p, count, ctx, engine, packet, delay_ms, va, pa, bits,
    /// attempts, events. Classes: see `vgpu-inject list` or
    /// docs/fault-injection.md.
    #[arg(long, value_name = "SPEC", value_parser = parse_spec)]
    inject: Vec<Spec>,

    /// Seed of the fault injector's random draws.
    #[arg(long, value_name = "N", default_value_t = 0)]
    inject_seed: u64,

    /// Serve the fault-injection control socket at PATH.
    #[arg(long, value_name = "PATH")]
    control: Option<PathBuf>,

    /// Log level: error, warn, info, debug or trace (overrides RUST_LOG).
    #[arg(long, value_name = "LEVEL")]
    log_level: Option<log::LevelFilter>,
}

fn parse_spec(s: &str) -> Result<Spec, String> {
    Spec::parse(s).map_err(|e| e.to_string())
}

fn parse_generation(s: &str) -> Result<Generation, String> {
    let n: u32 = s.parse().map_err(|_| format!("'{s}' is not a number"))?;
    Generation::from_number(n).map_err(|e| e.to_string())
}

fn write_trace(
    path: &std::path::Path,
    backend: &std::sync::RwLock<vgpu_device::backend::VgpuBackend>,
) -> std::io::Result<()> {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    backend
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .write_trace(&mut out)?;
    std::io::Write::flush(&mut out)
}

fn main() -> ExitCode {
    let cli = Cli::parse();

    let mut logger =
        env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"));
    if let Some(level) = cli.log_level {
        logger.filter_level(level);
    }
    logger.init();

    // Before any socket exists: a signal from then on stops the device
    // through its normal exit path, which removes the sockets (a signal
    // that arrives before the event loop runs waits for it).
    let signals = match SignalSource::install(&[SIGTERM, SIGINT]) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("vgpu-device: cannot install signal handlers: {e}");
            return ExitCode::FAILURE;
        }
    };

    let config = match DeviceConfig::new(cli.generation, cli.compute_units) {
        Ok(c) => c.with_trace(cli.trace.is_some()),
        Err(e) => {
            eprintln!("vgpu-device: {e}");
            return ExitCode::from(2);
        }
    };

    let mut daemon = match Daemon::bind(&cli.socket, config) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("vgpu-device: {e}");
            return ExitCode::FAILURE;
        }
    };

    let gpu = daemon
        .backend()
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .gpu();
    gpu.inject.set_seed(cli.inject_seed);
    for spec in cli.inject.iter().cloned() {
        gpu.inject.arm(spec, gpu.clock.now_ns());
    }
    if let Some(path) = cli.control.as_ref() {
        if let Err(e) = daemon.serve_control(path) {
            eprintln!("vgpu-device: {e}");
            return ExitCode::FAILURE;
        }
    }
    daemon.handle_signals(signals);
    let backend = daemon.backend();

    eprintln!(
        "vgpu-device: listening on {} ({})",
        cli.socket.display(),
        config.generation
    );

    let result = daemon.run();
    if let Some(path) = cli.trace.as_ref() {
        if let Err(e) = write_trace(path, &backend) {
            eprintln!(
                "vgpu-device: cannot write the trace to {}: {e}",
                path.display()
            );
        } else {
            log::info!("trace written to {}", path.display());
        }
    }
    match result {
        Ok(summary) => {
            log::info!(
                "exiting: {:?}{}",
                summary.reason,
                if summary.served {
                    ""
                } else {
                    " (no frontend served)"
                }
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("vgpu-device: {e}");
            ExitCode::FAILURE
        }
    }
}
