//! `vgpu-dump`: decode a devcoredump (`/sys/class/devcoredump/devcdN/data`),
//! a device capture, or a command-buffer dump written with `VGPU_DUMP`,
//! packet by packet.
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use vgpu_umd::cmdbuf::{disassemble, DumpRecord};
use vgpu_umd::coredump::{render_json, render_text, CoreDump, Options};

#[derive(Parser, Debug)]
#[command(
    name = "vgpu-dump",
    about = "Decode a vgpu devcoredump or device capture (rings, the failing packet, the fault's walk), or command buffers dumped by the UMD (VGPU_DUMP=1 or VGPU_DUMP=path)",
    after_help = "Examples:\n  vgpu-dump /sys/class/devcoredump/devcd1/data      decode the driver's dump of a hang, fault or engine error\n  vgpu-dump --json devcd.txt | jq .capture.failing_packet\n  vgpu-dump --all capture.bin                        a raw capture (vgpu-inject capture-save), everything\n  VGPU_DUMP=/tmp/d vgpu-samples copy && vgpu-dump /tmp/d\n  vgpu-dump --engine 1 /tmp/d      compute-engine buffers only"
)]
struct Args {
    /// The dump file.
    file: PathBuf,
    /// Only buffers of this KMD context.
    #[arg(long)]
    ctx: Option<u32>,
    /// Only buffers of this engine (0 copy, 1 compute).
    #[arg(long)]
    engine: Option<u32>,
    /// Print the raw words as well.
    #[arg(long)]
    raw: bool,
    /// Devcoredumps: print JSON.
    #[arg(long)]
    json: bool,
    /// Devcoredumps: also every TLB entry, event and memory range.
    #[arg(long)]
    all: bool,
}

fn main() -> ExitCode {
    vgpu_umd::exit_quietly_on_closed_pipe();
    let a = Args::parse();
    let bytes = match std::fs::read(&a.file) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("vgpu-dump: {}: {e}", a.file.display());
            return ExitCode::from(2);
        }
    };
    if bytes.starts_with(vgpu_hwif::coredump::BANNER.as_bytes())
        || bytes.starts_with(&vgpu_hwif::capture::MAGIC.to_le_bytes())
    {
        return match CoreDump::parse(&bytes) {
            Ok(d) => {
                if a.json {
                    println!("{:#}", render_json(&d));
                } else {
                    print!("{}", render_text(&d, &Options { all: a.all }));
                }
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("vgpu-dump: {}: {e}", a.file.display());
                ExitCode::from(2)
            }
        };
    }
    let recs = match DumpRecord::parse_all(&bytes) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("vgpu-dump: {}: {e}", a.file.display());
            return ExitCode::from(2);
        }
    };
    let mut shown = 0;
    for (i, r) in recs.iter().enumerate() {
        if a.ctx.is_some_and(|c| c != r.ctx_id) || a.engine.is_some_and(|e| e != r.engine) {
            continue;
        }
        shown += 1;
        println!(
            "cmdbuf {i}: gen {} ctx {} engine {} part {} va {:#x} {} bytes",
            r.generation,
            r.ctx_id,
            if r.engine == 0 { "copy" } else { "compute" },
            r.index,
            r.va,
            4 * r.words.len()
        );
        for l in disassemble(r.generation, r.va, &r.words) {
            println!("  {l}");
        }
        if a.raw {
            for (j, w) in r.words.chunks(8).enumerate() {
                let s: Vec<String> = w.iter().map(|x| format!("{x:08x}")).collect();
                println!("  +{:04x}: {}", 32 * j, s.join(" "));
            }
        }
    }
    println!("vgpu-dump: {shown} of {} command buffers", recs.len());
    ExitCode::SUCCESS
}
