//! `vgpu-smi`: the vgpu device's identity and status: per-engine and
//! per-context utilisation (two `QUERY_STATS` samples an interval apart),
//! memory in use, faults, resets, hangs, fence progress of every context of
//! every process; `--watch` refreshes, `--json` prints one object per view
//! for scripts; `--status` adds the KMD's debugfs view (rings, fault and
//! reset logs).
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use vgpu_umd::uapi::{self, param, DrmVgpuCounters};
use vgpu_umd::{fmt_firmware, fmt_page_sizes, fmt_protocol, Device, Identity, Stats};

#[derive(Parser, Debug)]
#[command(
    name = "vgpu-smi",
    about = "Show the vgpu device's identity and status: utilisation, contexts, memory, faults, resets",
    after_help = "Examples:\n  \
        vgpu-smi                        identity, engine and context utilisation over 200 ms\n  \
        vgpu-smi --interval 1000        utilisation sampled over one second\n  \
        vgpu-smi --watch 1 --count 5    refresh every second, five times\n  \
        vgpu-smi --json                 one JSON object (with --watch: one per line)\n  \
        vgpu-smi --ping 10              also run 10 PING round trips\n  \
        vgpu-smi --status               also the driver's debugfs view (rings, fault and reset logs)\n  \
        vgpu-smi --device /dev/dri/renderD128\n\n\
        Utilisation is the growth of the device's busy time of an engine (or a\n\
        context) between two samples, over the time between them."
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
    /// Sampling interval for utilisation, in milliseconds (0: no
    /// utilisation, one sample).
    #[arg(long, value_name = "MS", default_value_t = 200)]
    interval: u64,
    /// Also show the driver's debugfs view: rings, fence values, fault and
    /// reset logs, memory objects (needs root and debugfs).
    #[arg(long)]
    status: bool,
    /// Refresh every SECS seconds (utilisation over the time since the
    /// previous view).
    #[arg(long, value_name = "SECS")]
    watch: Option<f64>,
    /// With --watch: stop after this many views (0: forever).
    #[arg(long, default_value_t = 0)]
    count: u32,
    /// Print JSON instead of text (identity and status; one object per line).
    #[arg(long)]
    json: bool,
    /// Only the identity (and pings): no status.
    #[arg(long, conflicts_with_all = ["watch", "json"])]
    identity: bool,
}

/// The debugfs directory of the device behind `dev` (by PCI name).
fn debugfs_dir(dev: &Device) -> Option<PathBuf> {
    let node = dev.path().file_name()?.to_str()?.to_owned();
    let pci = std::fs::read_link(format!("/sys/class/drm/{node}/device")).ok()?;
    let d = PathBuf::from("/sys/kernel/debug/vgpu").join(pci.file_name()?);
    d.is_dir().then_some(d)
}

/// The KMD's debugfs view.
fn show_debugfs(dev: &Device) -> bool {
    let Some(dir) = debugfs_dir(dev) else {
        println!("driver state: unavailable (debugfs not mounted, or not root)");
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

const ENGINE_NAMES: [&str; uapi::STATS_ENGINES] = ["copy", "compute"];

fn bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

fn priority_name(p: u32) -> &'static str {
    match p {
        uapi::CTX_PRIORITY_LOW => "low",
        uapi::CTX_PRIORITY_NORMAL => "normal",
        uapi::CTX_PRIORITY_HIGH => "high",
        uapi::CTX_PRIORITY_REALTIME => "realtime",
        _ => "?",
    }
}

fn engines_name(mask: u32) -> String {
    let v: Vec<&str> = ENGINE_NAMES
        .iter()
        .enumerate()
        .filter(|(e, _)| mask & (1 << e) != 0)
        .map(|(_, n)| *n)
        .collect();
    if v.is_empty() {
        "-".into()
    } else {
        v.join("+")
    }
}

fn state_name(state: u32) -> String {
    let mut v = Vec::new();
    if state & uapi::CTX_STATE_ERRORED != 0 {
        v.push("errored");
    }
    if state & uapi::CTX_STATE_BANNED != 0 {
        v.push("banned");
    }
    if state & uapi::CTX_STATE_FAULTED != 0 {
        v.push("faulted");
    }
    if v.is_empty() {
        "ok".into()
    } else {
        v.join("+")
    }
}

fn reset_name(r: u32) -> &'static str {
    match r {
        uapi::CTX_RESET_NONE => "none",
        uapi::CTX_RESET_GUILTY => "guilty",
        uapi::CTX_RESET_INNOCENT => "innocent",
        uapi::CTX_RESET_VRAM_LOST => "vram-lost",
        _ => "?",
    }
}

/// The process name of `pid` (`/proc/PID/comm`), `-` when gone.
fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "-".into())
}

/// Utilisation (percent) between two samples; `None` without a baseline.
fn util_engine(prev: Option<&Stats>, cur: &Stats, e: usize) -> Option<f64> {
    prev.map(|p| cur.engine_utilisation(p, e))
}

fn pct(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.1}%"))
}

/// Where a context's first error happened, as text (`None`: no error):
/// the error's name, the packet (its header decoded), the SUBMIT and the
/// offset in the command buffer the application gave.
fn error_text(generation: u32, c: &uapi::DrmVgpuCtxStats) -> Option<String> {
    if c.error_packet_va == 0 && c.engine_error == 0 {
        return None;
    }
    let mut t = match vgpu_hwif::packet::EngineError::from_u32(c.engine_error) {
        Some(e) if c.engine_error != 0 => format!("{} (engine error {})", e.name(), c.engine_error),
        _ if c.engine_error != 0 => format!("engine error {}", c.engine_error),
        _ => "GPU page fault".to_owned(),
    };
    if c.error_packet_va != 0 {
        let _ = write!(
            t,
            " at packet {:#x} on {}",
            c.error_packet_va,
            if c.error_engine == uapi::ENGINE_COMPUTE {
                "compute"
            } else {
                "copy"
            }
        );
        if c.error_header != 0 {
            let _ = write!(
                t,
                " [{}]",
                vgpu_hwif::describe::HeaderWord {
                    generation,
                    word: c.error_header
                }
            );
        }
    }
    if c.error_seqno != 0 {
        let _ = write!(t, ", SUBMIT seqno {}", c.error_seqno);
    }
    if c.error_cmd_index != uapi::CMD_INDEX_NONE {
        let _ = write!(
            t,
            ", command buffer {} +{:#x}",
            c.error_cmd_index, c.error_cmd_offset
        );
    } else if c.error_packet_va != 0 {
        t.push_str(", a packet the KMD wrote");
    }
    Some(t)
}

/// The driver's power-management counters (`VGPU_PARAM_PM_*`; `None`
/// from a driver without them).
struct Power {
    /// `VGPU_PARAM_PM_STATE`: 0 active, 1 D3hot, 2 D3cold.
    state: u64,
    suspends: u64,
    /// Of them to D3cold (0 from a driver without the counter).
    d3cold_suspends: u64,
    resumes: u64,
    suspended_ms: u64,
    system_sleeps: u64,
}

impl Power {
    fn read(dev: &Device) -> Option<Power> {
        let g = |p| dev.get_param(p).ok();
        Some(Power {
            state: g(param::PM_STATE)?,
            suspends: g(param::PM_SUSPENDS)?,
            d3cold_suspends: g(param::PM_D3COLD_SUSPENDS).unwrap_or(0),
            resumes: g(param::PM_RESUMES)?,
            suspended_ms: g(param::PM_SUSPENDED_MS)?,
            system_sleeps: g(param::SYSTEM_SLEEPS)?,
        })
    }

    /// The state's name, and the power level's.
    fn names(&self) -> (&'static str, &'static str) {
        match self.state {
            0 => ("active", "D0"),
            1 => ("runtime-suspended", "D3hot"),
            _ => ("runtime-suspended", "D3cold"),
        }
    }

    fn text(&self) -> String {
        let (state, level) = self.names();
        format!(
            "power     {state} ({level})  runtime suspends {} ({} to D3cold)  resumes {}  suspended {} ms  system suspend/resume cycles {}",
            self.suspends,
            self.d3cold_suspends,
            self.resumes,
            self.suspended_ms,
            self.system_sleeps
        )
    }

    fn json(&self) -> String {
        let (state, level) = self.names();
        format!(
            "{{\"state\":{},\"level\":{},\"runtime_suspends\":{},\"d3cold_suspends\":{},\"runtime_resumes\":{},\"suspended_ms\":{},\"system_sleeps\":{}}}",
            json_str(state),
            json_str(level),
            self.suspends,
            self.d3cold_suspends,
            self.resumes,
            self.suspended_ms,
            self.system_sleeps
        )
    }
}

fn print_text(generation: u32, vram_size: u64, prev: Option<&Stats>, s: &Stats) {
    let dt_ms = prev.map(|p| s.sample_ns.saturating_sub(p.sample_ns) as f64 / 1e6);
    match dt_ms {
        Some(ms) => println!("engines (utilisation over {ms:.0} ms)"),
        None => println!("engines"),
    }
    println!(
        "  {:<8} {:>7} {:>12} {:>10} {:>12} {:>8} {:>7} {:>7} {:>7}",
        "ENGINE", "UTIL", "BUSY_MS", "PACKETS", "BYTES", "FENCES", "FAULTS", "ERRORS", "RESETS"
    );
    let row = |name: &str, util: Option<f64>, k: &DrmVgpuCounters| {
        println!(
            "  {:<8} {:>7} {:>12.1} {:>10} {:>12} {:>8} {:>7} {:>7} {:>7}",
            name,
            pct(util),
            k.busy_ns as f64 / 1e6,
            k.packets,
            k.bytes,
            k.fences,
            k.faults,
            k.errors,
            k.resets
        );
    };
    for (e, name) in ENGINE_NAMES.iter().enumerate() {
        row(name, util_engine(prev, s, e), &s.engines[e]);
    }
    row("device", None, &s.device);
    let k = &s.device;
    println!(
        "kernels   workgroups {}  lane-ops {}  cycles {} (modelled compute-unit time)",
        k.workgroups, k.lane_ops, k.cycles
    );
    println!(
        "memory    gem {} in {} objects (limit {}, per file {}, refused {}), page tables {}",
        bytes(s.mem_bytes),
        s.mem_objects,
        bytes(s.mem_limit),
        bytes(s.file_mem_limit),
        s.mem_refused,
        bytes(s.pt_bytes)
    );
    if vram_size > 0 {
        println!(
            "          vram {} in use of {}, {} evictions to system memory",
            bytes(s.vram_used),
            bytes(vram_size),
            s.vram_evictions
        );
    }
    println!(
        "recovery  faults {}  hangs {}  engine resets {}  device resets {}  retired pages {}  wedged {}  lost {}",
        s.faults,
        s.hangs,
        s.engine_resets,
        s.device_resets,
        s.retired_pages,
        if s.wedged { "YES" } else { "no" },
        if s.lost { "YES" } else { "no" }
    );
    if s.lost {
        println!("          the device stopped answering: the driver declared it lost (rebind the driver)");
    } else if s.wedged {
        println!("          the device is wedged: rebind the driver (device counters not read)");
    }
    let shown = s.contexts.len();
    if s.total_contexts as usize > shown {
        println!(
            "contexts  {} (all processes; {shown} shown)",
            s.total_contexts
        );
    } else {
        println!("contexts  {} (all processes)", s.total_contexts);
    }
    if shown == 0 {
        return;
    }
    println!(
        "  {:>5} {:>6} {:<14} {:<8} {:<12} {:<16} {:<9} {:>7} {:>10} {:>10} {:>13} {:>13} {:>6} {:>5}",
        "CTX",
        "PID",
        "COMMAND",
        "PRIO",
        "ENGINES",
        "STATE",
        "RESET",
        "UTIL",
        "MEM",
        "VRAM",
        "COPY_FENCES",
        "COMP_FENCES",
        "FAULTS",
        "HANGS"
    );
    for c in &s.contexts {
        let fences = |e: usize| {
            if c.engines & (1 << e) == 0 {
                "-".to_string()
            } else {
                format!("{}/{}", c.completed[e], c.submitted[e])
            }
        };
        let mut name = comm(c.pid);
        name.truncate(14);
        println!(
            "  {:>5} {:>6} {:<14} {:<8} {:<12} {:<16} {:<9} {:>7} {:>10} {:>10} {:>13} {:>13} {:>6} {:>5}",
            c.ctx_id,
            c.pid,
            name,
            priority_name(c.priority),
            engines_name(c.engines),
            state_name(c.state),
            reset_name(c.reset_status),
            pct(prev.map(|p| s.ctx_utilisation(p, c.ctx_id))),
            bytes(c.mem_bytes),
            bytes(c.vram_bytes),
            fences(0),
            fences(1),
            c.faults,
            c.hangs
        );
        if let Some(e) = error_text(generation, c) {
            println!("        error: {e}");
        }
        if c.san_reports > 0 {
            println!(
                "        sanitizer: {} report(s) (debugfs sanitizer)",
                c.san_reports
            );
        }
    }
    println!(
        "  (fences: completed/submitted; MEM: GEM memory of the context's file; VRAM: its VRAM)"
    );
}

fn json_str(s: &str) -> String {
    let mut o = String::from("\"");
    for ch in s.chars() {
        match ch {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

fn json_counters(k: &DrmVgpuCounters) -> String {
    format!(
        "{{\"busy_ns\":{},\"packets\":{},\"bytes\":{},\"faults\":{},\"errors\":{},\"resets\":{},\"fences\":{},\"tlb_hits\":{},\"tlb_misses\":{},\"workgroups\":{},\"lane_ops\":{},\"cycles\":{}}}",
        k.busy_ns, k.packets, k.bytes, k.faults, k.errors, k.resets, k.fences, k.tlb_hits, k.tlb_misses,
        k.workgroups, k.lane_ops, k.cycles
    )
}

fn json_opt(v: Option<f64>) -> String {
    v.map_or("null".into(), |v| format!("{v:.2}"))
}

fn json_view(dev: &Device, id: &Identity, prev: Option<&Stats>, s: &Stats) -> String {
    let mut o = String::new();
    let _ = write!(
        o,
        "{{\"device\":{},\"generation\":{},\"pci_device_id\":{},\"engine_mask\":{},\"compute_units\":{},\"vram_bytes\":{},\"vram_visible_bytes\":{},\"virtual_function\":{},\"max_contexts\":{},",
        json_str(&dev.path().display().to_string()),
        id.generation,
        id.device_id,
        id.engine_mask,
        id.compute_units,
        id.vram_size,
        id.vram_visible,
        id.virtual_function,
        id.max_contexts
    );
    let interval = prev.map(|p| s.sample_ns.saturating_sub(p.sample_ns));
    let _ = write!(
        o,
        "\"sample_ns\":{},\"interval_ns\":{},\"engines\":[",
        s.sample_ns,
        interval.map_or("null".into(), |v| v.to_string())
    );
    for (e, name) in ENGINE_NAMES.iter().enumerate() {
        if e > 0 {
            o.push(',');
        }
        let _ = write!(
            o,
            "{{\"name\":{},\"utilisation\":{},\"counters\":{}}}",
            json_str(name),
            json_opt(util_engine(prev, s, e)),
            json_counters(&s.engines[e])
        );
    }
    let _ = write!(
        o,
        "],\"device_counters\":{},\"mem_bytes\":{},\"mem_objects\":{},\"mem_limit\":{},\"file_mem_limit\":{},\"mem_refused\":{},\"pt_bytes\":{},\"faults\":{},\"hangs\":{},\"engine_resets\":{},\"device_resets\":{},\"retired_pages\":{},\"wedged\":{},\"lost\":{},\"vram_used\":{},\"vram_evictions\":{},\"num_contexts\":{},\"contexts\":[",
        json_counters(&s.device),
        s.mem_bytes,
        s.mem_objects,
        s.mem_limit,
        s.file_mem_limit,
        s.mem_refused,
        s.pt_bytes,
        s.faults,
        s.hangs,
        s.engine_resets,
        s.device_resets,
        s.retired_pages,
        s.wedged,
        s.lost,
        s.vram_used,
        s.vram_evictions,
        s.total_contexts
    );
    for (i, c) in s.contexts.iter().enumerate() {
        if i > 0 {
            o.push(',');
        }
        let _ = write!(
            o,
            "{{\"ctx_id\":{},\"pid\":{},\"command\":{},\"priority\":{},\"engines\":{},\"state\":{},\"reset_status\":{},\"hangs\":{},\"faults\":{},\"mem_bytes\":{},\"vram_bytes\":{},\"submitted\":[{},{}],\"completed\":[{},{}],\"utilisation\":{},\"counters\":{},\"error\":{},\"san_reports\":{}}}",
            c.ctx_id,
            c.pid,
            json_str(&comm(c.pid)),
            c.priority,
            c.engines,
            c.state,
            c.reset_status,
            c.hangs,
            c.faults,
            c.mem_bytes,
            c.vram_bytes,
            c.submitted[0],
            c.submitted[1],
            c.completed[0],
            c.completed[1],
            json_opt(prev.map(|p| s.ctx_utilisation(p, c.ctx_id))),
            json_counters(&c.counters),
            error_text(id.generation, c).map_or("null".to_owned(), |t| json_str(&t)),
            c.san_reports
        );
    }
    o.push_str("]}");
    o
}

fn print_identity(dev: &Device, id: &Identity) -> bool {
    let own = vgpu_hwif::layout::FINGERPRINT;
    println!("vgpu device {}", dev.path().display());
    println!("  generation        {}", id.generation);
    println!("  pci device id     {:#06x}", id.device_id);
    println!("  protocol          {}", fmt_protocol(id.protocol_version));
    println!("  firmware          {}", fmt_firmware(id.firmware_version));
    println!("  engines           {:#x}", id.engine_mask);
    println!("  compute units     {}", id.compute_units);
    if id.vram_size == 0 {
        println!("  vram              none (integrated)");
    } else {
        println!(
            "  vram              {} MiB, {} MiB CPU-visible",
            id.vram_size >> 20,
            id.vram_visible >> 20
        );
    }
    println!("  va bits           {}", id.va_bits);
    println!("  page sizes        {}", fmt_page_sizes(id.page_sizes));
    if id.virtual_function == 0 {
        println!("  contexts          {}", id.max_contexts);
    } else {
        println!(
            "  partition         virtual function {}: {} contexts, {} MiB of VRAM (the host sets both; power states are the host's)",
            id.virtual_function,
            id.max_contexts,
            id.vram_size >> 20
        );
    }
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
    agree
}

fn run(args: &Args) -> Result<bool, vgpu_umd::Error> {
    let dev = match &args.device {
        Some(p) => Device::open(p)?,
        None => Device::open_first()?,
    };
    let id = dev.identity()?;
    let own = vgpu_hwif::layout::FINGERPRINT;
    let mut ok = id.kmd_fingerprint == own && id.device_fingerprint == own;
    if !args.json {
        ok = print_identity(&dev, &id);
    }
    for i in 0..args.ping {
        let cookie = 0x5049_4e47_0000_0000 | u64::from(i);
        match dev.ping(cookie, Duration::from_millis(args.ping_timeout_ms)) {
            Ok(p) if !args.json => println!(
                "  ping {i}: event seq {} latency {} us",
                p.event_seq,
                p.latency.as_micros()
            ),
            Ok(_) => {}
            Err(e) => {
                eprintln!("  ping {i}: FAILED: {e}");
                ok = false;
            }
        }
    }
    if args.identity {
        return Ok(ok);
    }
    // The first view: a baseline sample `interval` before it.
    let mut prev = if args.interval > 0 {
        let s = dev.stats()?;
        std::thread::sleep(Duration::from_millis(args.interval));
        Some(s)
    } else {
        None
    };
    let mut n = 0u32;
    loop {
        let s = dev.stats()?;
        let power = Power::read(&dev);
        if args.json {
            let view = json_view(&dev, &id, prev.as_ref(), &s);
            match &power {
                // One more member at the end of the object.
                Some(p) => println!("{},\"power\":{}}}", &view[..view.len() - 1], p.json()),
                None => println!("{view}"),
            }
        } else {
            if args.watch.is_some() {
                println!("--- view {}", n + 1);
            }
            print_text(id.generation, id.vram_size, prev.as_ref(), &s);
            if let Some(p) = &power {
                println!("{}", p.text());
            }
            if args.status {
                ok &= show_debugfs(&dev);
            }
        }
        n += 1;
        let Some(secs) = args.watch else { break };
        if args.count != 0 && n >= args.count {
            break;
        }
        prev = Some(s);
        std::thread::sleep(Duration::from_secs_f64(secs.max(0.05)));
    }
    Ok(ok)
}

fn main() -> ExitCode {
    vgpu_umd::exit_quietly_on_closed_pipe();
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

#[cfg(test)]
mod tests {
    use super::error_text;
    use vgpu_umd::uapi;

    #[test]
    fn an_errored_context_names_its_packet() {
        let header = vgpu_hwif::packet::encode_header(2, vgpu_hwif::packet::OP_FILL, 6);
        let c = uapi::DrmVgpuCtxStats {
            engine_error: uapi::engine_error::BAD_OPERAND,
            error_engine: uapi::ENGINE_COPY,
            error_header: header,
            error_cmd_index: 1,
            error_packet_va: 0x7f00_0040,
            error_seqno: 5,
            error_cmd_offset: 0x40,
            ..Default::default()
        };
        let t = error_text(2, &c).unwrap();
        assert!(
            t.starts_with("BAD_OPERAND (engine error 6) at packet 0x7f000040 on copy [FILL"),
            "{t}"
        );
        assert!(
            t.ends_with(", SUBMIT seqno 5, command buffer 1 +0x40"),
            "{t}"
        );
        let kmd = uapi::DrmVgpuCtxStats {
            error_cmd_index: uapi::CMD_INDEX_NONE,
            ..c
        };
        assert!(error_text(2, &kmd)
            .unwrap()
            .ends_with(", a packet the KMD wrote"));
        assert_eq!(error_text(2, &uapi::DrmVgpuCtxStats::default()), None);
    }
}
