//! `vgpu-device`: the vgpu virtual GPU as a vhost-user backend process for
//! QEMU's `vhost-user-gpu-pci`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use signal_hook::consts::{SIGINT, SIGTERM};

use vgpu_device::config::{
    DeviceConfig, Generation, JitMode, VramConfig, VramOnReset, COMPUTE_UNITS_RANGE,
    DEFAULT_COMPUTE_UNITS,
};
use vgpu_device::core::inject::Spec;
use vgpu_device::daemon::{Daemon, PfDaemon, SignalSource};
use vgpu_device::pf::{parse_size, PhysicalFunction, VfSpec};

const EXAMPLES: &str = "\
Examples:
  # Serve a generation 2 device on /tmp/vgpu.sock:
  vgpu-device --socket /tmp/vgpu.sock --gen 2

  # Then attach it to QEMU (guest memory must be shared):
  qemu-system-x86_64 -machine q35,memory-backend=mem \\
      -object memory-backend-memfd,id=mem,size=1G,share=on \\
      -chardev socket,id=vgpu,path=/tmp/vgpu.sock \\
      -device vhost-user-gpu-pci,chardev=vgpu,edid=off ...

  # A discrete GPU with 1 GiB of VRAM, 256 MiB of it CPU-visible through the
  # aperture QEMU maps from /tmp/vgpu.vram (docs/hardware.md, Device memory):
  vgpu-device --socket /tmp/vgpu.sock --vram 1G --visible-vram 256M \
      --vram-link /tmp/vgpu.vram
  qemu-system-x86_64 ... \
      -device pcie-root-port,id=gpu-port,bus=pcie.0,addr=4.0,chassis=1,slot=1,hotplug=off \
      -device vhost-user-gpu-pci,chardev=vgpu,bus=gpu-port,addr=0.0,multifunction=on \
      -object memory-backend-file,id=vram,mem-path=/tmp/vgpu.vram,share=on,size=256M \
      -device ivshmem-plain,memdev=vram,bus=gpu-port,addr=0.1

  # Kernels on the interpreter only (the default, auto, compiles them to
  # native code where the host allows):
  vgpu-device --socket /tmp/vgpu.sock --jit off

  # One GPU shared by two VMs (SR-IOV style, docs/hardware.md section 17):
  # VF 1 and VF 2 on /tmp/vgpu.sock.vf1 and .vf2, VF 2 with 3x the engine
  # time of VF 1 when both are busy; the host manages them with vgpu-pf:
  vgpu-device --socket /tmp/vgpu.sock --vf contexts=16,vram=128M --vf weight=3 \
      --control /tmp/vgpu-pf.sock
  vgpu-pf --control /tmp/vgpu-pf.sock list

  # Log every command:
  RUST_LOG=debug vgpu-device --socket /tmp/vgpu.sock

  # Record a timeline of every packet; open it in https://ui.perfetto.dev:
  vgpu-device --socket /tmp/vgpu.sock --trace /tmp/vgpu-trace.json

  # Hang the copy engine on the 3rd FENCE, reproducibly, and accept more
  # faults at run time through a control socket (see vgpu-inject --help):
  vgpu-device --socket /tmp/vgpu.sock --inject 'hang:engine=copy,packet=FENCE,after=3' \
      --inject-seed 42 --control /tmp/vgpu-inject.sock

  # Check the driver's side of the hardware contract (docs/sanitizer.md):
  # every check, reports in the log and as JSON lines, rings stopped:
  vgpu-device --socket /tmp/vgpu.sock --sanitize --sanitize-log /tmp/san.jsonl
  vgpu-device --socket /tmp/vgpu.sock --sanitize=ring,tlb --sanitize-mode stop

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

    /// How kernels run: off (the interpreter), on (native code, required:
    /// the device refuses to start on a host the JIT cannot run on) or
    /// auto (native code where the host and the kernel allow it).
    #[arg(long, value_name = "MODE", default_value = "auto")]
    jit: JitMode,

    /// How long the doorbell watcher (user-mode queues: DOORBELL_WATCH)
    /// keeps polling the watched doorbell blocks after the last activity,
    /// in microseconds, before it sleeps until a DOORBELL_KICK. Longer:
    /// fewer kicks under bursty submission, more CPU spent after the last
    /// one; an idle device costs nothing either way.
    #[arg(long, value_name = "US", default_value_t = 2000,
          value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    doorbell_poll_us: u64,

    /// Device memory (VRAM): SIZE bytes with a K, M or G suffix, a multiple
    /// of 2 MiB and at least 4 MiB, or 0 for none (an integrated GPU). A
    /// memfd of this process, never guest RAM; the top 2 MiB are the
    /// firmware's (docs/hardware.md, "Device memory").
    #[arg(long, value_name = "SIZE", default_value = "512M", value_parser = parse_size)]
    vram: u64,

    /// The CPU-visible part of VRAM (the aperture, from offset 0), a
    /// multiple of 2 MiB.
    #[arg(long, value_name = "SIZE", default_value = "128M", value_parser = parse_size)]
    visible_vram: u64,

    /// What DEVICE_RESET does to VRAM: keep, zero, or garbage (the pages
    /// the GPU touched hold garbage, as after a discrete GPU's deep reset).
    /// The reset's reply says which.
    #[arg(long, value_name = "POLICY", default_value = "garbage",
          value_parser = ["keep", "zero", "garbage"])]
    vram_on_reset: String,

    /// How the device powers on: driver (in its boot state: only IDENTIFY,
    /// PING, MEMORY_LAYOUT, TIME_QUERY, DEVICE_RESET and the FW_* commands
    /// answer until the driver loads and starts a firmware image) or
    /// preloaded (running the in-tree image of its generation at once, and
    /// after every reset: for drivers that predate the handshake).
    #[arg(long, value_name = "MODE", default_value = "driver",
          value_parser = ["driver", "preloaded"])]
    boot: String,

    /// Make PATH a link to the VRAM memfd, for QEMU's aperture:
    /// `-object memory-backend-file,id=vram,mem-path=PATH,share=on,size=VISIBLE
    /// -device ivshmem-plain,memdev=vram,addr=SLOT.1` (scripts/vm does it).
    #[arg(long, value_name = "PATH")]
    vram_link: Option<PathBuf>,

    /// Record every packet's fetch, execution, fences, faults, errors and
    /// resets, and write them as a Chrome/Perfetto trace (JSON) to FILE
    /// when the device exits.
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,

    /// Record every guest-to-device input (commands, doorbells, the guest
    /// memory the engines read, fault-injection requests) with times into
    /// FILE, for `vgpu-replay --record FILE`; also every packet the
    /// engines fetch and every page-table entry they walk, for
    /// `vgpu-replay compare REFERENCE YOURS`.
    #[arg(long, value_name = "FILE")]
    record: Option<PathBuf>,

    /// Arm a fault at startup: CLASS[:key=val,...] (repeatable). Keys:
    /// after, at_ms, p, count, ctx, engine, packet, delay_ms, va, pa, bits,
    /// attempts, events. Classes: see `vgpu-inject list` or
    /// docs/fault-injection.md.
    #[arg(long, value_name = "SPEC", value_parser = parse_spec)]
    inject: Vec<Spec>,

    /// The `--inject` arguments as given (recorded with `--record`).
    #[arg(skip)]
    inject_text: Vec<String>,

    /// Seed of the fault injector's random draws.
    #[arg(long, value_name = "N", default_value_t = 0)]
    inject_seed: u64,

    /// Serve the fault-injection control socket at PATH.
    #[arg(long, value_name = "PATH")]
    control: Option<PathBuf>,

    /// Turn the driver sanitizer on: every check, or a comma-separated list
    /// of check ids (SAN-TLB-STALE or tlb-stale), families (ring, tlb,
    /// fence, hazard, wait, dma, teardown, pt, firmware), `all`, and `-NAME` to leave
    /// one out. Also switchable on the control socket (`sanitize on|off`).
    #[arg(long, value_name = "CHECKS", num_args = 0..=1, default_missing_value = "all",
          value_parser = parse_checks)]
    sanitize: Option<u32>,

    /// What a sanitizer finding does: `report` (log, JSON line, event to
    /// the driver) or `stop` (also stops the ring with the engine error
    /// SANITIZER).
    #[arg(long, value_name = "MODE", default_value = "report", value_parser = ["report", "stop"])]
    sanitize_mode: String,

    /// Append every sanitizer report to FILE as one JSON object per line.
    #[arg(long, value_name = "FILE")]
    sanitize_log: Option<PathBuf>,

    /// How long the engine lets a doorbell age before it fetches the words
    /// it published (SAN-RING-UNPUBLISHED: x86 hides missing barriers, so
    /// the device fetches late on purpose).
    #[arg(long, value_name = "US", default_value_t = vgpu_device::core::sanitize::DEFAULT_FETCH_DELAY.as_micros() as u64)]
    sanitize_fetch_delay_us: u64,

    /// How long a ring waits on a semaphore before the sanitizer looks for
    /// queued work that can satisfy it (SAN-WAIT-UNSATISFIABLE).
    #[arg(long, value_name = "MS", default_value_t = vgpu_device::core::sanitize::DEFAULT_WAIT_GRACE.as_millis() as u64)]
    sanitize_wait_grace_ms: u64,

    /// Serve the device as a GPU partitioned into virtual functions, one per
    /// `--vf` (repeatable, at most 8), each for its own VM on its own
    /// socket: `contexts=N,vram=SIZE,visible=SIZE,weight=W,socket=PATH`,
    /// every key optional (an even share, weight 1, socket
    /// `SOCKET.vfN`). `--control` is then the host's management socket
    /// (`vgpu-pf`); docs/hardware.md section 17.
    #[arg(long = "vf", value_name = "SPEC", value_parser = parse_vf)]
    vfs: Vec<VfSpec>,

    /// Log level: error, warn, info, debug or trace (overrides RUST_LOG).
    #[arg(long, value_name = "LEVEL")]
    log_level: Option<log::LevelFilter>,
}

fn parse_checks(s: &str) -> Result<u32, String> {
    vgpu_device::core::sanitize::parse_checks(s).map_err(|e| e.to_string())
}

/// The values of every `--inject` on the command line, as written.
fn inject_args() -> Vec<String> {
    let mut out = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == "--inject" {
            out.extend(args.next());
        } else if let Some(v) = a.strip_prefix("--inject=") {
            out.push(v.to_owned());
        }
    }
    out
}

fn parse_vf(s: &str) -> Result<VfSpec, String> {
    s.parse()
}

/// Serves `config` cut into the VFs `cli.vfs` asks for.
fn run_partitioned(cli: &Cli, config: DeviceConfig, signals: SignalSource) -> ExitCode {
    let pf = match PhysicalFunction::new(config, &cli.vfs) {
        Ok(pf) => pf,
        Err(e) => {
            eprintln!("vgpu-device: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(path) = cli.vram_link.as_ref() {
        if let Err(e) = pf.publish_vram(path) {
            eprintln!("vgpu-device: --vram-link: {e}");
            return ExitCode::FAILURE;
        }
    }
    let sockets: Vec<PathBuf> = (1..)
        .zip(&cli.vfs)
        .map(|(n, v)| {
            v.socket
                .clone()
                .unwrap_or_else(|| PathBuf::from(format!("{}.vf{n}", cli.socket.display())))
        })
        .collect();
    for (cfg, socket) in pf.configs().iter().zip(&sockets) {
        if let Some(p) = cfg.partition {
            eprintln!(
                "vgpu-device: virtual function {} on {}: {} contexts, {} MiB of VRAM at offset {} MiB ({} MiB visible), weight {}",
                p.vf,
                socket.display(),
                p.contexts,
                cfg.vram.layout.size >> 20,
                p.vram_offset >> 20,
                cfg.vram.layout.visible >> 20,
                p.weight
            );
        }
    }
    let mut daemon = match PfDaemon::new(pf, sockets, cli.socket.clone()) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("vgpu-device: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(path) = cli.control.as_ref() {
        if let Err(e) = daemon.serve_control(path) {
            eprintln!("vgpu-device: {e}");
            return ExitCode::FAILURE;
        }
    }
    daemon.handle_signals(signals);
    match daemon.run() {
        Ok(summary) => {
            log::info!("exiting: {} frontends served", summary.frontends);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("vgpu-device: {e}");
            ExitCode::FAILURE
        }
    }
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
    let mut cli = Cli::parse();
    cli.inject_text = inject_args();

    let mut logger =
        env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"));
    if let Some(level) = cli.log_level {
        logger.filter_level(level);
    }
    logger.init();

    if cli.jit == JitMode::On {
        if let Err(why) = vgpu_isa::jit::host_support() {
            eprintln!("vgpu-device: --jit on: {why}");
            return ExitCode::from(2);
        }
    }

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

    let vram = VramOnReset::parse(&cli.vram_on_reset)
        .and_then(|p| VramConfig::new(cli.vram, cli.visible_vram, p));
    let config = match vram
        .and_then(|v| DeviceConfig::new(cli.generation, cli.compute_units).map(|c| c.with_vram(v)))
    {
        Ok(c) => c
            .with_trace(cli.trace.is_some())
            .with_jit(cli.jit)
            .with_boot(cli.boot.parse().unwrap_or_default())
            .with_doorbell_poll(std::time::Duration::from_micros(cli.doorbell_poll_us)),
        Err(e) => {
            eprintln!("vgpu-device: {e}");
            return ExitCode::from(2);
        }
    };

    if !cli.vfs.is_empty() {
        return run_partitioned(&cli, config, signals);
    }

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
    let san = vgpu_device::core::sanitize::SanConfig {
        checks: cli.sanitize.unwrap_or(0),
        stop: cli.sanitize_mode == "stop",
        fetch_delay: std::time::Duration::from_micros(cli.sanitize_fetch_delay_us),
        wait_grace: std::time::Duration::from_millis(cli.sanitize_wait_grace_ms),
        starve: vgpu_device::core::sanitize::DEFAULT_STARVE,
    };
    if let Some(path) = cli.sanitize_log.as_ref() {
        match std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            Ok(f) => gpu.sanitizer.log().set_file(f),
            Err(e) => {
                eprintln!("vgpu-device: cannot open {}: {e}", path.display());
                return ExitCode::FAILURE;
            }
        }
    }
    if let Some(path) = cli.vram_link.as_ref() {
        if let Err(e) = gpu.vram.publish(path) {
            eprintln!("vgpu-device: --vram-link: {e}");
            return ExitCode::FAILURE;
        }
    }
    gpu.sanitizer.configure(&san);
    gpu.inject.set_seed(cli.inject_seed);
    for spec in cli.inject.iter().cloned() {
        gpu.inject.arm(spec, gpu.clock.now_ns());
    }
    if let Some(path) = cli.record.as_ref() {
        let text =
            vgpu_device::core::record::config_text(&config, cli.inject_seed, &cli.inject_text);
        if let Err(e) = vgpu_device::core::record_ctl::start(&gpu, path, &text) {
            eprintln!("vgpu-device: --record {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
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
        "vgpu-device: listening on {} ({}, jit {})",
        cli.socket.display(),
        config.generation,
        config.jit
    );

    let result = daemon.run();
    if let Some(r) = gpu.record.get() {
        match r.flush() {
            Ok(()) => {
                let (bytes, pages) = r.size();
                log::info!("record: {bytes} bytes, {pages} pages of guest memory");
            }
            Err(e) => eprintln!("vgpu-device: the record is incomplete: {e}"),
        }
    }
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
