//! `vgpu-smi`: the vgpu device's identity, and its state as the KMD exposes
//! it (GET_PARAM, debugfs `status`, `objects`, `contexts`: engines, contexts
//! with their rings, fences, faults and resets, memory objects); `--watch`
//! repeats the state view.
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use vgpu_umd::{fmt_firmware, fmt_page_sizes, fmt_protocol, Device};

#[derive(Parser, Debug)]
#[command(
    name = "vgpu-smi",
    about = "Show the vgpu device's identity and check that it answers",
    after_help = "Examples:\n  vgpu-smi                      identity of the first vgpu device\n  vgpu-smi --ping 10            also run 10 PING round trips\n  vgpu-smi --status             engines, contexts, fences, faults, resets, memory\n  vgpu-smi --watch 1 --count 5  the state every second, five times\n  vgpu-smi --device /dev/dri/renderD128"
)]
struct Args {
    /// Render node to open (default: the first one driven by vgpu).
    #[arg(long)]
    device: Option<PathBuf>,
    /// Run this many PING round trips through the control and event queues.
    #[arg(long, default_value_t = 0)]
    ping: u32,
    /// Timeout of one PING, in milliseconds.
    #[arg(long, default_value_t = 2000)]
    ping_timeout_ms: u64,
    /// Also show the driver's state: engines, contexts (rings, fence
    /// progress, faults, resets), memory objects.
    #[arg(long)]
    status: bool,
    /// Show the state every SECS seconds (implies --status).
    #[arg(long, value_name = "SECS")]
    watch: Option<f64>,
    /// With --watch: stop after this many views (0: forever).
    #[arg(long, default_value_t = 0)]
    count: u32,
}

/// The debugfs directory of the device behind `dev` (by PCI name).
fn debugfs_dir(dev: &Device) -> Option<PathBuf> {
    let node = dev.path().file_name()?.to_str()?.to_owned();
    let pci = std::fs::read_link(format!("/sys/class/drm/{node}/device")).ok()?;
    let d = PathBuf::from("/sys/kernel/debug/vgpu").join(pci.file_name()?);
    d.is_dir().then_some(d)
}

/// One view of the driver's state.
fn show_state(dev: &Device) -> bool {
    let events = dev.get_param(vgpu_umd::uapi::param::EVENTS_RECEIVED);
    match events {
        Ok(n) => println!("  events received   {n}"),
        Err(e) => {
            println!("  events received   unavailable: {e}");
            return false;
        }
    }
    let Some(dir) = debugfs_dir(dev) else {
        println!("  driver state      unavailable (debugfs not mounted, or not root)");
        return true;
    };
    for (file, title) in [
        ("status", "device"),
        ("objects", "memory objects"),
        ("contexts", "engines and contexts"),
    ] {
        match std::fs::read_to_string(dir.join(file)) {
            Ok(text) => {
                println!("{title} ({}):", dir.join(file).display());
                for l in text.lines() {
                    println!("  {l}");
                }
            }
            Err(e) => println!("{title}: {e}"),
        }
    }
    true
}

fn run(args: &Args) -> Result<bool, vgpu_umd::Error> {
    let started = std::time::Instant::now();
    let dev = match &args.device {
        Some(p) => Device::open(p)?,
        None => Device::open_first()?,
    };
    let id = dev.identity()?;
    let own = vgpu_hwif::layout::FINGERPRINT;
    println!("vgpu device {}", dev.path().display());
    println!("  generation        {}", id.generation);
    println!("  pci device id     {:#06x}", id.device_id);
    println!("  protocol          {}", fmt_protocol(id.protocol_version));
    println!("  firmware          {}", fmt_firmware(id.firmware_version));
    println!("  engines           {:#x}", id.engine_mask);
    println!("  compute units     {}", id.compute_units);
    println!("  va bits           {}", id.va_bits);
    println!("  page sizes        {}", fmt_page_sizes(id.page_sizes));
    println!("  contexts          {}", id.max_contexts);
    println!(
        "  ring size         {}..{} bytes",
        id.min_ring_size, id.max_ring_size
    );
    let agree = id.kmd_fingerprint == own && id.device_fingerprint == own;
    println!(
        "  hwif layout       umd {own:#018x} kmd {:#018x} device {:#018x} ({})",
        id.kmd_fingerprint,
        id.device_fingerprint,
        if agree { "match" } else { "MISMATCH" }
    );
    let mut ok = agree;
    for i in 0..args.ping {
        let cookie = 0x5049_4e47_0000_0000 | u64::from(i);
        match dev.ping(cookie, Duration::from_millis(args.ping_timeout_ms)) {
            Ok(p) => println!(
                "  ping {i}: event seq {} latency {} us",
                p.event_seq,
                p.latency.as_micros()
            ),
            Err(e) => {
                println!("  ping {i}: FAILED: {e}");
                ok = false;
            }
        }
    }
    if args.status || args.watch.is_some() {
        ok &= show_state(&dev);
    }
    if let Some(secs) = args.watch {
        let mut n = 1;
        while args.count == 0 || n < args.count {
            std::thread::sleep(Duration::from_secs_f64(secs.max(0.05)));
            println!("--- {:?} since start", std::time::Instant::now() - started);
            ok &= show_state(&dev);
            n += 1;
        }
    }
    Ok(ok)
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("vgpu-smi: {e}");
            ExitCode::from(2)
        }
    }
}
