//! `vgpu-dump`: decode a command-buffer dump written with `VGPU_DUMP`,
//! packet by packet.
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use vgpu_umd::cmdbuf::{disassemble, DumpRecord};

#[derive(Parser, Debug)]
#[command(
    name = "vgpu-dump",
    about = "Decode command buffers dumped by the UMD (VGPU_DUMP=1 or VGPU_DUMP=path)",
    after_help = "Examples:\n  VGPU_DUMP=/tmp/d vgpu-samples copy && vgpu-dump /tmp/d\n  vgpu-dump --engine 1 /tmp/d      compute-engine buffers only"
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
}

fn main() -> ExitCode {
    let a = Args::parse();
    let bytes = match std::fs::read(&a.file) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("vgpu-dump: {}: {e}", a.file.display());
            return ExitCode::from(2);
        }
    };
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
