//! `vgpu-replay`: run a captured failure again on the host-side device
//! model.

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use vgpu_replay::dump::{matches, Expected, Outcome, Replay, ReplayOptions};
use vgpu_replay::record::{RecordOptions, RecordReplay};
use vgpu_umd::coredump::{engine_name, event_text, CoreDump};

const EXAMPLES: &str = "\
Examples:
  # The guest's devcoredump of a fault, hang or engine error, copied out:
  vgpu-replay devcd1.txt

  # The same, packet by packet (Enter: next packet, c: continue to the end):
  vgpu-replay --step devcd1.txt

  # With a Perfetto trace of the replay (open at https://ui.perfetto.dev):
  vgpu-replay --trace replay.json devcd1.txt

  # A raw capture the device wrote (vgpu-inject capture-save):
  vgpu-replay capture-3.bin

  # A whole session recorded by vgpu-device --record, run again without a
  # VM; its replies and event records compared with the recorded ones:
  vgpu-replay --record session.vgrec

  # Two sessions of the same test recorded by vgpu-device --record (the
  # reference driver's, then yours): the first place where what the
  # drivers made the device do differs (commands, packets, page-table
  # entries), in the device's words:
  vgpu-replay compare reference.vgrec yours.vgrec
  vgpu-replay compare --json --context 5 reference.vgrec yours.vgrec

Exit status: 0 the replay reproduced the original error record (or hang on
the same packet; for --record: the same replies and event records; for
compare: no difference), 1 it did not (compare: they differ), 2 the file
could not be replayed (compare: not a record).";

/// Rebuilds the failing context of a vgpu devcoredump or device capture on
/// the host-side device model and runs its job again.
#[derive(Debug, Parser)]
#[command(
    name = "vgpu-replay",
    version,
    about,
    after_help = EXAMPLES,
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Sub>,

    /// A devcoredump (/sys/class/devcoredump/devcdN/data, copied) or a raw
    /// device capture.
    #[arg(required_unless_present = "record")]
    dump: Option<PathBuf>,

    /// Replay the whole session recorded in FILE (vgpu-device --record).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["dump", "step"])]
    record: Option<PathBuf>,

    /// With --record: print every event record of the replay.
    #[arg(long, requires = "record")]
    events: bool,

    /// Write the replay's packet trace (Chrome/Perfetto JSON) to FILE.
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,

    /// Run packet by packet, printing each (waits for Enter on a
    /// terminal).
    #[arg(long)]
    step: bool,

    /// No progress for this long is a hang (ms).
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    hang_ms: u64,
}

/// Subcommands.
#[derive(Debug, clap::Subcommand)]
enum Sub {
    /// Compare two recorded sessions of the same test (the reference
    /// driver's and yours, each recorded with vgpu-device --record): print
    /// the first place where the control commands, the packets an engine
    /// fetched from a ring or the page-table entries it walked differ.
    /// Exit status 0: no difference, 1: they differ, 2: a file is not a
    /// record.
    Compare {
        /// The reference driver's record.
        reference: PathBuf,
        /// The record of the driver under test.
        yours: PathBuf,
        /// Print the result as one JSON object.
        #[arg(long)]
        json: bool,
        /// How many matching items before the difference to print.
        #[arg(long, value_name = "N", default_value_t = 3)]
        context: usize,
    },
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let cli = Cli::parse();
    if let Some(Sub::Compare {
        reference,
        yours,
        json,
        context,
    }) = &cli.command
    {
        return compare(reference, yours, *json, *context);
    }
    if let Some(path) = cli.record.as_ref() {
        return replay_record(&cli, path);
    }
    let Some(path) = cli.dump.as_ref() else {
        return ExitCode::from(2);
    };
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("vgpu-replay: {}: {e}", path.display());
            return ExitCode::from(2);
        }
    };
    let dump = match CoreDump::parse(&bytes) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("vgpu-replay: {}: {e}", path.display());
            return ExitCode::from(2);
        }
    };
    let cap = match dump.capture() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("vgpu-replay: {}: {e}", path.display());
            return ExitCode::from(2);
        }
    };
    let h = cap.header;
    let opts = ReplayOptions {
        trace: cli.trace.is_some(),
        hang: Duration::from_millis(cli.hang_ms),
    };
    let mut r = match Replay::rebuild(&cap, opts) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("vgpu-replay: {}: {e}", path.display());
            return ExitCode::from(2);
        }
    };
    println!(
        "capture {}: {} of context {} on the {} engine (gen {}, {} compute units)",
        h.capture_id,
        vgpu_hwif::capture::reason::name(h.reason),
        h.ctx_id,
        engine_name(h.engine),
        h.generation,
        h.compute_units
    );
    let want = match &r.expected {
        Expected::Error(e) => event_text(e),
        Expected::Hang { packet_va, rptr } => {
            format!("hang holding packet {packet_va:#x} (ring rptr {rptr:#x})")
        }
        Expected::Unknown => "nothing recorded (on-demand capture)".to_owned(),
    };
    println!("original: {want}");
    for s in &r.rearmed {
        println!("injector: armed again: {s}");
    }
    let outcome = if cli.step { step(&mut r) } else { r.run() };
    println!("replay:   {}", outcome.text());
    if let Some(p) = cli.trace.as_ref() {
        let written = std::fs::File::create(p).and_then(|f| {
            let mut w = std::io::BufWriter::new(f);
            r.write_trace(&mut w)?;
            w.flush()
        });
        match written {
            Ok(()) => println!("trace: {}", p.display()),
            Err(e) => eprintln!("vgpu-replay: {}: {e}", p.display()),
        }
    }
    if matches!(r.expected, Expected::Unknown) {
        println!("result: ran (nothing to compare with)");
        return ExitCode::SUCCESS;
    }
    if matches(&r.expected, &outcome) {
        println!(
            "result: reproduced ({})",
            match outcome {
                Outcome::Hang { .. } => "hang on the same packet",
                _ => "same error record",
            }
        );
        ExitCode::SUCCESS
    } else {
        println!("result: NOT reproduced");
        ExitCode::from(1)
    }
}

/// `--record FILE`: the whole session again, compared with the record.
fn replay_record(cli: &Cli, path: &std::path::Path) -> ExitCode {
    let opts = RecordOptions {
        trace: cli.trace.is_some(),
        ..RecordOptions::default()
    };
    let mut r = match RecordReplay::open(path, opts) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("vgpu-replay: {}: {e}", path.display());
            return ExitCode::from(2);
        }
    };
    let c = *r.config();
    println!(
        "record {}: gen {}, {} compute units, jit {}",
        path.display(),
        c.generation.number(),
        c.compute_units,
        c.jit
    );
    let t0 = std::time::Instant::now();
    let rep = r.run();
    println!(
        "replayed {} commands ({} replies equal, {} not compared: times and counters), {} watched doorbells, {} guest pages, {} injector requests in {:.2} s",
        rep.commands,
        rep.replies_equal,
        rep.replies_uncompared,
        rep.watched_doorbells,
        rep.pages,
        rep.control.len(),
        t0.elapsed().as_secs_f64()
    );
    println!(
        "events: {} recorded, {} replayed",
        rep.events_recorded.len(),
        rep.events_replayed.len()
    );
    if cli.events {
        for e in &rep.events_replayed {
            println!("  {}", vgpu_replay::record::event_line(e));
        }
    }
    if let Some(p) = cli.trace.as_ref() {
        let written = std::fs::File::create(p).and_then(|f| {
            let mut w = std::io::BufWriter::new(f);
            r.write_trace(&mut w)?;
            w.flush()
        });
        match written {
            Ok(()) => println!("trace: {}", p.display()),
            Err(e) => eprintln!("vgpu-replay: {}: {e}", p.display()),
        }
    }
    if rep.matched() {
        println!("result: reproduced (same replies, same event records)");
        ExitCode::SUCCESS
    } else {
        for d in &rep.divergences {
            println!("divergence: {d}");
        }
        println!(
            "result: NOT reproduced ({} divergences)",
            rep.divergences.len()
        );
        ExitCode::from(1)
    }
}

/// `compare REFERENCE YOURS`: the first difference.
fn compare(
    reference: &std::path::Path,
    yours: &std::path::Path,
    json: bool,
    context: usize,
) -> ExitCode {
    let c = match vgpu_replay::compare::compare_files(reference, yours, context) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("vgpu-replay: {e}");
            return ExitCode::from(2);
        }
    };
    if json {
        println!("{}", c.to_json());
    } else {
        for (name, path, s) in [
            ("reference", reference, &c.reference),
            ("yours", yours, &c.student),
        ] {
            let cut = s.truncated.map_or(String::new(), |at| {
                format!(" (file cut short at byte {at})")
            });
            println!(
                "{name:9} {}: {} commands, {} packets, {} page-table entries{cut}",
                path.display(),
                s.commands,
                s.packets,
                s.ptes
            );
            if s.engine_items == 0 && s.commands > 0 {
                println!("          (no packets or walks recorded: a device older than this comparison?)");
            }
        }
        match &c.difference {
            None => println!("result: same (no difference)"),
            Some(d) => {
                println!("first difference ({}, item {}):", d.lane, d.index + 1);
                println!("  {}", d.message);
                if !d.context.is_empty() {
                    println!("  before it, both:");
                    for line in &d.context {
                        println!("    {line}");
                    }
                }
                println!("result: DIFFERENT");
            }
        }
    }
    if c.equal() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// Runs packet by packet; on a terminal, waits for Enter between packets
/// (`c` runs to the end).
fn step(r: &mut Replay) -> Outcome {
    let interactive = std::io::stdin().is_terminal();
    let mut go = !interactive;
    let mut n = 0u64;
    loop {
        let next = next_packet_va(r);
        let (line, outcome) = r.step();
        n += 1;
        let text = next.map_or(String::new(), |va| {
            format!("{va:#014x}  {}  ", r.packet_text(va))
        });
        println!("step {n:5}: {text}-> {line}");
        if let Some(o) = outcome {
            return o;
        }
        if !go {
            print!("[Enter: next, c: continue] ");
            let _ = std::io::stdout().flush();
            let mut s = String::new();
            if std::io::stdin().lock().read_line(&mut s).is_err() || s.trim() == "c" {
                go = true;
            }
        }
    }
}

/// The VA of the packet the replayed ring executes next (or in flight).
fn next_packet_va(r: &Replay) -> Option<u64> {
    let c = r.cursor()?;
    if let Some(p) = c.pending {
        return Some(p.packet_va);
    }
    if let Some(f) = c.frame() {
        return Some(f.va + u64::from(f.offset));
    }
    let st = r.gpu.lock();
    let ring = st.contexts.get(r.ctx).ok()?.ring(r.engine)?.clone();
    Some(ring.va_of(c.rptr))
}
