//! `vgpu-fw`: builds vgpu firmware images from their sources, installs the
//! in-tree ones (and broken ones for tests), and describes any image.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::{Parser, Subcommand};
use vgpu_firmware::source::parse_interface;
use vgpu_firmware::{
    alt_image_for, check, corrupt, describe, image_for, next_major_image_for,
    oldest_minor_image_for, Corruption, Source, GENERATIONS,
};
use vgpu_hwif::limits::PROTOCOL_VERSION;

const EXAMPLES: &str = "\
Examples:
  vgpu-fw build firmware/src/gen2.toml -o gen2.fw      build an image from a source
  vgpu-fw install /lib/firmware/vgpu                   gen1.fw and gen2.fw, as the driver requests them
  vgpu-fw install /tmp/fw --bad                        also test/gen{N}-{corruption}.fw and test/gen{N}-alt.fw
  vgpu-fw info /lib/firmware/vgpu/gen2.fw              header, sections, CRC, and whether a gen-2 device boots it
  vgpu-fw info gen2.fw --gen 1 --interface 0.2         as a generation-1 device with that driver sees it

Exit status: 0 done (info: the image boots), 1 info: the image is refused,
2 bad usage, a source that does not build, or a file that cannot be read or written.";

/// Builds, installs and describes vgpu firmware images
/// (docs/hardware.md section 15).
#[derive(Parser)]
#[command(name = "vgpu-fw", version, after_help = EXAMPLES)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Build an image from a firmware source (TOML: firmware/src/gen2.toml's keys).
    Build {
        /// The source.
        #[arg(value_name = "SRC.toml")]
        src: PathBuf,
        /// Where the image goes.
        #[arg(short, long, value_name = "OUT.fw")]
        output: PathBuf,
    },
    /// Write DIR/gen1.fw and DIR/gen2.fw from the in-tree sources.
    Install {
        /// The directory (made if missing), e.g. /lib/firmware/vgpu.
        dir: PathBuf,
        /// Also write every broken image of each, DIR/test/gen{N}-{corruption}.fw,
        /// a valid alternative one, DIR/test/gen{N}-alt.fw (other slices, patch + 1,
        /// no user-mode queues), and a valid one of the next major version,
        /// DIR/test/gen{N}-next-major.fw (a driver of this major refuses it),
        /// and one of the oldest minor of the major, DIR/test/gen{N}-oldest-minor.fw
        /// (a driver of this major runs it).
        #[arg(long)]
        bad: bool,
    },
    /// Describe an image: its header, its sections, its CRC, and whether a device boots it
    /// (exit status 1 if not).
    Info {
        /// The image.
        file: PathBuf,
        /// The device's generation [default: the one the file's name says, gen{N}…, as the
        /// driver requests vgpu/gen{N}.fw; else the lowest the image names].
        #[arg(long = "gen", value_name = "N", value_parser = parse_generation)]
        generation: Option<u32>,
        /// The driver's interface version [default: this build's PROTOCOL_VERSION].
        #[arg(long, value_name = "MAJOR.MINOR", value_parser = parse_interface_arg)]
        interface: Option<u32>,
    },
}

fn parse_generation(s: &str) -> Result<u32, String> {
    s.parse()
        .ok()
        .filter(|g| GENERATIONS.contains(g))
        .ok_or_else(|| format!("{s:?} is not a generation (1 or 2)"))
}

fn parse_interface_arg(s: &str) -> Result<u32, String> {
    parse_interface(s).map_err(|e| e.to_string())
}

/// A usage or I/O failure: one line, exit status 2.
struct Failure(String);

fn io_failure(path: &Path, e: &std::io::Error) -> Failure {
    Failure(format!("{}: {e}", path.display()))
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), Failure> {
    std::fs::write(path, bytes).map_err(|e| io_failure(path, &e))
}

fn build(src: &Path, output: &Path) -> Result<(), Failure> {
    let text = std::fs::read_to_string(src).map_err(|e| io_failure(src, &e))?;
    let image = Source::parse(&text)
        .and_then(|s| s.image())
        .map_err(|e| Failure(format!("{}: {e}", src.display())))?;
    write(output, &image)?;
    println!("{}: {} bytes", output.display(), image.len());
    Ok(())
}

/// Writes one image and says what a device of `generation` makes of it.
fn install_one(path: &Path, image: &[u8], generation: u32) -> Result<(), Failure> {
    write(path, image)?;
    let verdict = match check(image, Some(generation), PROTOCOL_VERSION) {
        Ok(()) => format!("boots on generation {generation}"),
        Err(e) => format!(
            "refused by generation {generation}: {} (error {})",
            e.text(),
            e as u32
        ),
    };
    println!("{}: {} bytes, {verdict}", path.display(), image.len());
    Ok(())
}

fn install(dir: &Path, bad: bool) -> Result<(), Failure> {
    std::fs::create_dir_all(dir).map_err(|e| io_failure(dir, &e))?;
    let test = dir.join("test");
    if bad {
        std::fs::create_dir_all(&test).map_err(|e| io_failure(&test, &e))?;
    }
    for g in GENERATIONS {
        let image = image_for(g);
        install_one(&dir.join(format!("gen{g}.fw")), &image, g)?;
        if !bad {
            continue;
        }
        for c in Corruption::ALL {
            let path = test.join(format!("gen{g}-{}.fw", c.name()));
            install_one(&path, &corrupt(&image, c), g)?;
        }
        install_one(&test.join(format!("gen{g}-alt.fw")), &alt_image_for(g), g)?;
        let next = next_major_image_for(g);
        install_one(&test.join(format!("gen{g}-next-major.fw")), &next, g)?;
        let oldest = oldest_minor_image_for(g);
        install_one(&test.join(format!("gen{g}-oldest-minor.fw")), &oldest, g)?;
    }
    Ok(())
}

/// The generation a file's name is for: `gen2.fw`, `gen2-alt.fw` → 2.
fn named_generation(file: &Path) -> Option<u32> {
    let name = file.file_name()?.to_str()?.strip_prefix("gen")?;
    let digits = name.split(|c: char| !c.is_ascii_digit()).next()?;
    parse_generation(digits).ok()
}

fn info(file: &Path, generation: Option<u32>, interface: Option<u32>) -> Result<bool, Failure> {
    let image = std::fs::read(file).map_err(|e| io_failure(file, &e))?;
    let generation = generation.or_else(|| named_generation(file));
    let interface = interface.unwrap_or(PROTOCOL_VERSION);
    print!("{}", describe(&image, generation, interface));
    Ok(check(&image, generation, interface).is_ok())
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e)
            if matches!(
                e.kind(),
                ErrorKind::DisplayHelp
                    | ErrorKind::DisplayVersion
                    | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            ) =>
        {
            // Help on standard output (exit 0), or on standard error when a
            // subcommand is missing (exit 2).
            e.exit()
        }
        Err(e) => {
            // clap's message up to its usage paragraph, on one line,
            // without its "error: " prefix.
            let text = e.to_string();
            let msg: Vec<&str> = text
                .lines()
                .map(str::trim)
                .take_while(|l| !l.is_empty())
                .collect();
            let msg = msg.join(" ");
            let msg = msg.strip_prefix("error: ").unwrap_or(&msg);
            eprintln!("vgpu-fw: {msg} (try --help)");
            return ExitCode::from(2);
        }
    };
    let done = match cli.cmd {
        Cmd::Build { src, output } => build(&src, &output).map(|()| true),
        Cmd::Install { dir, bad } => install(&dir, bad).map(|()| true),
        Cmd::Info {
            file,
            generation,
            interface,
        } => info(&file, generation, interface),
    };
    match done {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(Failure(msg)) => {
            eprintln!("vgpu-fw: {msg}");
            ExitCode::from(2)
        }
    }
}
