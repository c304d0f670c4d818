//! An image for people: its header, each section decoded, whether its CRC
//! holds, and whether a device would boot it.

use std::fmt::Write as _;

use vgpu_hwif::firmware::{
    feature, image_crc, parse, section, FwError, FwSection, FW_FORMAT, FW_MAGIC, FW_MAX_SIZE,
    FW_SECTION_REQUIRED,
};

use crate::packets::{self, Bitmap};
use crate::raw::{self, interface_text, version_text};

/// The generation whose device judges `image`: `generation` if given,
/// else the lowest one the image's header names, else 1.
pub fn device_generation(image: &[u8], generation: Option<u32>) -> u32 {
    generation
        .or_else(|| raw::header(image).and_then(|h| raw::lowest_generation(h.generations)))
        .unwrap_or(1)
}

/// Whether a device of `generation` ([`device_generation`]) boots `image`
/// for a driver of interface version `interface`.
///
/// # Errors
///
/// The error the device refuses it with.
pub fn check(image: &[u8], generation: Option<u32>, interface: u32) -> Result<(), FwError> {
    parse(image, device_generation(image, generation), interface).map(drop)
}

/// The verdict as one line: `boots` or `refused: …` with the error's text
/// and code.
pub fn verdict(image: &[u8], generation: Option<u32>, interface: u32) -> String {
    let g = device_generation(image, generation);
    let who = format!(
        "a generation {g} device, driver interface {}",
        interface_text(interface)
    );
    match check(image, generation, interface) {
        Ok(()) => format!("ok: {who} boots it"),
        Err(e) => format!("refused by {who}: {} (error {} {e:?})", e.text(), e as u32),
    }
}

fn mark(ok: bool) -> &'static str {
    if ok {
        "ok"
    } else {
        "WRONG"
    }
}

fn kind_name(kind: u32) -> Option<&'static str> {
    Some(match kind {
        section::SCHED => "sched",
        section::PACKETS => "packets",
        section::HEARTBEAT => "heartbeat",
        section::LOG => "log",
        section::NOTES => "notes",
        _ => return None,
    })
}

fn features_text(f: u32) -> String {
    let mut names: Vec<String> = Vec::new();
    if f & feature::USER_QUEUES != 0 {
        names.push("user-queues".into());
    }
    if f & feature::PREEMPTION != 0 {
        names.push("preemption".into());
    }
    if f & !feature::ALL != 0 {
        names.push(format!("unknown bits {:#x}", f & !feature::ALL));
    }
    if names.is_empty() {
        names.push("none".into());
    }
    names.join(", ")
}

fn generations_text(mask: u32) -> String {
    let gens: Vec<String> = (0..32)
        .filter(|b| mask & (1 << b) != 0)
        .map(|b| (b + 1).to_string())
        .collect();
    if gens.is_empty() {
        "none".into()
    } else {
        gens.join(", ")
    }
}

/// One section's contents, decoded by kind.
fn section_text(s: &FwSection, b: &[u8]) -> String {
    let w = |i: usize| raw::u32_at(b, 4 * i).unwrap_or(0);
    match s.kind {
        section::SCHED if b.len() >= 24 => {
            let policy = match w(4) {
                0 => "priority".to_owned(),
                1 => "round-robin".to_owned(),
                p => format!("unknown ({p})"),
            };
            format!(
                "slices low {} µs, normal {} µs, high {} µs; preempt timeout {} µs; policy {policy}",
                w(0),
                w(1),
                w(2),
                w(3)
            )
        }
        section::PACKETS if b.len() >= 64 => {
            let g1: Bitmap = core::array::from_fn(w);
            let g2: Bitmap = core::array::from_fn(|i| w(8 + i));
            format!(
                "gen1: {}; gen2: {}",
                packets::text(1, &g1),
                packets::text(2, &g2)
            )
        }
        section::HEARTBEAT if b.len() >= 8 => match w(0) {
            0 => "no heartbeat".to_owned(),
            ms => format!("period {ms} ms"),
        },
        section::LOG if b.len() >= 8 => format!("{} bytes", w(0)),
        section::NOTES => format!("{:?}", String::from_utf8_lossy(b)),
        k if kind_name(k).is_some() => "too small for its kind".to_owned(),
        _ => {
            let hex: Vec<String> = b.iter().take(16).map(|x| format!("{x:02x}")).collect();
            let more = if b.len() > 16 { " …" } else { "" };
            format!("unknown kind: {}{more}", hex.join(" "))
        }
    }
}

/// A human-readable dump of `image`: the header's fields, each section
/// decoded, whether the CRC holds, and the verdict of a device of
/// `generation` ([`device_generation`]) for a driver of interface version
/// `interface` ([`verdict`]). Never panics, whatever the bytes.
pub fn describe(image: &[u8], generation: Option<u32>, interface: u32) -> String {
    let mut o = String::new();
    let size_ok = image.len() <= FW_MAX_SIZE;
    let _ = writeln!(
        o,
        "size:        {} bytes ({} the 64 KiB limit)",
        image.len(),
        if size_ok { "within" } else { "OVER" }
    );
    let Some(h) = raw::header(image) else {
        let _ = writeln!(o, "header:      missing (the header takes 64 bytes)");
        let _ = writeln!(o, "verdict:     {}", verdict(image, generation, interface));
        return o;
    };
    let line = |o: &mut String, name: &str, text: String| {
        let _ = writeln!(o, "{:<13}{text}", format!("{name}:"));
    };
    line(
        &mut o,
        "magic",
        format!("{:#010x} ({})", h.magic, mark(h.magic == FW_MAGIC)),
    );
    line(
        &mut o,
        "format",
        format!("{} ({})", h.format, mark(h.format == FW_FORMAT)),
    );
    line(
        &mut o,
        "version",
        format!("{} ({:#010x})", version_text(h.version), h.version),
    );
    line(
        &mut o,
        "generations",
        format!("{} ({:#x})", generations_text(h.generations), h.generations),
    );
    line(
        &mut o,
        "features",
        format!("{} ({:#x})", features_text(h.features), h.features),
    );
    line(
        &mut o,
        "interface",
        format!(
            "{} ..= {} ({:#x} ..= {:#x})",
            interface_text(h.interface_min),
            interface_text(h.interface_max),
            h.interface_min,
            h.interface_max
        ),
    );
    let build = raw::build_bytes(&h.build);
    line(
        &mut o,
        "build",
        format!("{:?}", String::from_utf8_lossy(&build)),
    );
    line(
        &mut o,
        "image_size",
        format!(
            "{} ({})",
            h.image_size,
            mark(h.image_size as usize == image.len())
        ),
    );
    let crc = image_crc(image);
    let crc_text = if crc == h.crc32 {
        format!("{:#010x} (ok)", h.crc32)
    } else {
        format!("{:#010x} (WRONG: the bytes give {crc:#010x})", h.crc32)
    };
    line(&mut o, "crc32", crc_text);
    if h.reserved != [0, 0] {
        line(
            &mut o,
            "reserved",
            format!("{:?} (WRONG: not zero)", h.reserved),
        );
    }
    let entries = raw::entries(image, &h);
    line(
        &mut o,
        "sections",
        format!("{} ({} in the image)", h.section_count, entries.len()),
    );
    for (i, s) in entries.iter().enumerate() {
        let name = kind_name(s.kind).map_or_else(|| format!("kind {}", s.kind), str::to_owned);
        let mut flags = Vec::new();
        if s.flags & FW_SECTION_REQUIRED != 0 {
            flags.push("required".to_owned());
        }
        if s.flags & !FW_SECTION_REQUIRED != 0 {
            flags.push(format!(
                "unknown flags {:#x}",
                s.flags & !FW_SECTION_REQUIRED
            ));
        }
        if s.reserved != 0 {
            flags.push("reserved not zero".to_owned());
        }
        if s.load != 0 {
            flags.push(format!("load at {:#x}", s.load));
        }
        let flags = if flags.is_empty() {
            String::new()
        } else {
            format!(" [{}]", flags.join(", "))
        };
        let body = raw::bytes(image, s)
            .map_or_else(|| "OUTSIDE the image".to_owned(), |b| section_text(s, b));
        let _ = writeln!(
            o,
            "  [{i}] {name}{flags} at {}, {} bytes: {body}",
            s.offset, s.size
        );
    }
    let _ = writeln!(o, "verdict:     {}", verdict(image, generation, interface));
    o
}
