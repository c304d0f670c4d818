//! `vgpu-smi`: show the vgpu device's identity and check it answers.
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use vgpu_umd::{fmt_firmware, fmt_page_sizes, fmt_protocol, Device};

#[derive(Parser, Debug)]
#[command(
    name = "vgpu-smi",
    about = "Show the vgpu device's identity and check that it answers",
    after_help = "Examples:\n  vgpu-smi                      identity of the first vgpu device\n  vgpu-smi --ping 10            also run 10 PING round trips\n  vgpu-smi --device /dev/dri/renderD128"
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
}

fn run(args: &Args) -> Result<bool, vgpu_umd::Error> {
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
