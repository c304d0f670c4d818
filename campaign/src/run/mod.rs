//! Running one scenario run in a fresh VM and classifying what happened
//! (for runs in a reused VM see [`crate::reuse`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::spec::{driver_faults, Campaign, DriverFault, RunId, Scenario, ENVIRONMENT};

/// Why a run could not be carried out (as opposed to a fault outcome).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// `scripts/vm` could not be started or its logs written.
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
}

/// The result of one run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunResult {
    /// Which run.
    #[serde(flatten)]
    pub id: RunId,
    /// The fault specification, if any.
    pub fault: Option<String>,
    /// The fault class (`none` for a baseline).
    pub class: String,
    /// The outcome (see [`crate::spec::OUTCOMES`]).
    pub outcome: String,
    /// Whether the outcome met the scenario's expectations.
    pub passed: bool,
    /// Why it did not, or notes.
    pub reasons: Vec<String>,
    /// `scripts/vm` exit status.
    pub vm_status: i32,
    /// The workload's exit status.
    pub workload_status: Option<i32>,
    /// The innocent workload's exit status.
    pub innocent_status: Option<i32>,
    /// The health check's exit status.
    pub health_status: Option<i32>,
    /// Injections the device logged.
    pub injections: u64,
    /// What detected the fault (driver reactions at the device, kernel
    /// messages, the application).
    pub detected_by: Vec<String>,
    /// First injection to the driver's first reaction seen by the device.
    pub detect_ms: Option<f64>,
    /// First injection to the device completing a fence after that
    /// reaction.
    pub recover_ms: Option<f64>,
    /// Wall time of the run.
    pub duration_s: f64,
    /// Command that replays this run.
    pub replay: String,
    /// The devcoredumps the driver published during the run, copied out
    /// of the guest: paths relative to the campaign's output directory
    /// (`runs/NNNN-scenario-rep/devcoredump-N.txt`).
    #[serde(default)]
    pub dumps: Vec<String>,
    /// For each dump, the command that runs its failing job again on the
    /// host (`vgpu-replay`, from the output directory).
    #[serde(default)]
    pub dump_replays: Vec<String>,
    /// What each dump is, as far as a seeded campaign reproduces it: its
    /// reason, engine and whether it holds the device's capture
    /// (`hang engine=0 capture=ok`; [`dump_kind`]).
    #[serde(default)]
    pub dump_kinds: Vec<String>,
    /// How its VM was used: `fresh` (booted for this run) or `reuse`
    /// (one VM serving runs in sequence).
    #[serde(default = "fresh")]
    pub vm: String,
    /// Reuse mode: which VM of the campaign (1 = the first booted).
    #[serde(default)]
    pub vm_boot: u64,
    /// Reuse mode: why the VM was replaced by a fresh one after this run.
    #[serde(default)]
    pub vm_replaced: Option<String>,
    /// The device sanitizer's reports during the run, per check id.
    #[serde(default)]
    pub sanitizer: BTreeMap<String, u64>,
    /// The well-behaved VM beside the run's on the same device, for a
    /// scenario with a `neighbour` (see `crate::neighbour`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub neighbour: Option<NeighbourResult>,
}

/// What the neighbour VM of a run saw (its virtual function, from its
/// output and the host's view).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NeighbourResult {
    /// The neighbour's command's exit status (`None`: it never reported).
    pub status: Option<i32>,
    /// Its VM's launcher status (`scripts/vm`'s codes).
    pub vm_status: i32,
    /// Its function's longest wait for an engine, in ms (the host's
    /// `vgpu-pf list`).
    pub wait_ms: Option<f64>,
    /// Resets of its function (engine, device or host FLR).
    pub resets: Option<u64>,
    /// Faults of its function.
    pub faults: Option<u64>,
}

fn fresh() -> String {
    "fresh".to_owned()
}

/// `scripts/vm` exit statuses that say the host could not run the VM: 123
/// QEMU failed (it refused its command line or the device, or exited with
/// an error of its own), 127 setup failure (nothing built, no QEMU, a QEMU
/// too old for TCG).
pub const ENVIRONMENT_STATUSES: [i32; 2] = [123, 127];

/// What a run left behind, however its VM was run.
#[derive(Debug, Clone, Default)]
pub struct Evidence {
    /// `scripts/vm`'s exit status (fresh) or its equivalent (reuse: the
    /// command's status, 124 timeout, 125 guest died, ≥ 128 device died,
    /// 123/127 from a VM that never booted).
    pub vm_status: i32,
    /// What `scripts/vm` printed on stderr (its own and QEMU's messages).
    pub vm_log: String,
    /// The guest's output of the run.
    pub guest: String,
    /// The device's log during the run.
    pub device_log: String,
    /// Wall time of the run.
    pub duration_s: f64,
}

/// How to run VMs.
#[derive(Debug, Clone)]
pub struct Runner {
    /// Repository root (holds `scripts/vm`).
    pub repo: PathBuf,
    /// Where each run's logs go (`<dir>/<index>-<scenario>-<rep>/`).
    pub log_dir: PathBuf,
    /// Build the guest and device before the first run.
    pub build: bool,
    /// The campaign file's path (for replay commands).
    pub campaign_path: String,
    /// The `--seed` given, if any (for replay commands).
    pub seed: Option<u64>,
    /// `vgpu-device --sanitize=CHECKS` for every VM, if any.
    pub sanitize: Option<String>,
    /// A run with a sanitizer report fails.
    pub require_no_sanitizer_reports: bool,
    /// Record each VM's device session (`vgpu-device --record`) into
    /// `session.vgrec` of its log directory, for `vgpu-replay --record`.
    pub record: bool,
}

/// Kernel messages that show the driver noticed something.
const DMESG_SIGNS: [(&str, &str); 20] = [
    ("hang: context", "kmd-hang-check"),
    ("did not boot", "kmd-firmware-boot"),
    ("firmware crashed", "kmd-firmware-crash"),
    ("runtime suspend refused", "kmd-pm-refused"),
    ("did not wake", "kmd-pm-wake"),
    ("VRAM contents lost", "kmd-vram-lost"),
    ("FENCE events skipped", "kmd-skipped-events"),
    ("missed fence interrupt", "kmd-missed-interrupt"),
    ("duplicate FENCE event", "kmd-duplicate-event"),
    ("ahead of the fence value in memory", "kmd-early-event"),
    ("refused a doorbell", "kmd-doorbell-refused"),
    ("resetting the device", "kmd-device-reset"),
    ("device wedged", "kmd-wedged"),
    ("stopped context", "kmd-engine-error"),
    ("fault", "kmd-fault"),
    ("uncorrectable ECC", "kmd-ecc"),
    ("dropped", "kmd-events-lost"),
    ("event sequence", "kmd-event-sequence"),
    ("bad reply", "kmd-bad-reply"),
    ("failed", "kmd-command-failed"),
];

/// Device-side observations of driver reactions.
/// (`FW_LOAD` after an injection: the driver loads the firmware again.)
const REACTIONS: [&str; 4] = ["ENGINE_RESET", "DEVICE_RESET", "FAULT_RESUME", "FW_LOAD"];

fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
}

/// Parsed `inject:` and `inject-observe:` lines of a device log.
#[derive(Debug, Default, PartialEq)]
pub struct DeviceLog {
    /// Wall-clock ns of each injection.
    pub injections: Vec<u64>,
    /// (what, wall-clock ns) of each observation.
    pub observations: Vec<(String, u64)>,
    /// The device process panicked.
    pub panicked: bool,
    /// Sanitizer reports (`sanitizer: SAN-... #N` lines) per check id.
    pub sanitizer: BTreeMap<String, u64>,
}

/// Reads a device log.
pub fn parse_device_log(text: &str) -> DeviceLog {
    let mut d = DeviceLog::default();
    for line in text.lines() {
        if line.contains("panicked at") {
            d.panicked = true;
        }
        if let Some(i) = line.find("sanitizer: SAN-") {
            let id: String = line[i + "sanitizer: ".len()..]
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || *c == '-')
                .collect();
            if line[i..].contains(" #") {
                *d.sanitizer.entry(id).or_default() += 1;
            }
        }
        if let Some(i) = line.find("inject-observe: ") {
            let l = &line[i..];
            if let (Some(w), Some(t)) = (field(l, "what"), field(l, "wall_ns")) {
                if let Ok(t) = t.parse() {
                    d.observations.push((w.to_owned(), t));
                }
            }
        } else if let Some(i) = line.find("inject: id=") {
            if let Some(t) = field(&line[i..], "wall_ns").and_then(|t| t.parse().ok()) {
                d.injections.push(t);
            }
        }
    }
    d
}

/// What the guest printed.
#[derive(Debug, Default, PartialEq)]
pub struct GuestOutput {
    /// Workload status.
    pub workload: Option<i32>,
    /// Innocent workload status.
    pub innocent: Option<i32>,
    /// Health check status.
    pub health: Option<i32>,
    /// Kernel messages.
    pub dmesg: Vec<String>,
    /// Workload output.
    pub output: Vec<String>,
    /// Devcoredumps printed after the run ([`DUMP_BEGIN`] .. [`DUMP_END`]).
    pub dumps: Vec<String>,
    /// Failures injected inside the driver: the point of each.
    pub driver_faults: Vec<String>,
    /// Buffer objects of files alive after the workload (driver faults:
    /// must be 0, nothing leaked).
    pub user_bos: Option<i64>,
    /// Kernel warnings, BUGs, oopses and sanitizer (KASAN, UBSAN) reports
    /// in the run's messages (driver faults: must be 0).
    pub splats: Option<i64>,
}

/// The line before a devcoredump the guest script prints.
pub const DUMP_BEGIN: &str = "campaign-devcoredump-begin";
/// The line after it.
pub const DUMP_END: &str = "campaign-devcoredump-end";

/// Reads the guest's output.
pub fn parse_guest(text: &str) -> GuestOutput {
    let mut g = GuestOutput::default();
    let mut dump: Option<String> = None;
    for line in text.lines() {
        if let Some(d) = dump.as_mut() {
            if line == DUMP_END {
                g.dumps.extend(dump.take());
            } else {
                d.push_str(line);
                d.push('\n');
            }
            continue;
        }
        if line == DUMP_BEGIN {
            dump = Some(String::new());
            continue;
        }
        let num = |p: &str| line.strip_prefix(p).and_then(|v| v.trim().parse().ok());
        if let Some(v) = num("campaign-workload=") {
            g.workload = Some(v);
        } else if let Some(v) = num("campaign-innocent=") {
            g.innocent = Some(v);
        } else if let Some(v) = num("campaign-health=") {
            g.health = Some(v);
        } else if let Some(p) = line.strip_prefix("campaign-driver-fault=") {
            g.driver_faults.push(p.trim().to_owned());
        } else if let Some(v) = num("campaign-user-bos=") {
            g.user_bos = Some(i64::from(v));
        } else if let Some(v) = num("campaign-splats=") {
            g.splats = Some(i64::from(v));
        } else if let Some(m) = line.strip_prefix("dmesg: ") {
            g.dmesg.push(m.to_owned());
        } else {
            g.output.push(line.to_owned());
        }
    }
    g
}

/// The guest command of a scenario. With an innocent workload, the
/// workload starts first (so its context is the first the driver creates:
/// device context 0 on a fresh VM) and the innocent one 0.3 s later.
pub fn guest_script(s: &Scenario, health: &str) -> String {
    let mut sh = String::new();
    // Faults inside the driver: armed for the workload's processes only
    // (task-filter, make-it-fail), disarmed after it.
    let drv: Vec<DriverFault> = s
        .driver_fault
        .as_deref()
        .map(|d| driver_faults(d).unwrap_or_default())
        .unwrap_or_default();
    for f in &drv {
        let d = format!("/sys/kernel/debug/vgpu_fail/{}", f.point);
        sh += &format!("echo Y > {d}/task-filter; echo 1 > {d}/verbose; ");
        for (k, v) in &f.knobs {
            sh += &format!("echo {v} > {d}/{k}; ");
        }
    }
    let workload = match drv.is_empty() {
        true => s.workload.clone(),
        false => format!("echo 1 > /proc/self/make-it-fail; {}", s.workload),
    };
    match &s.innocent {
        Some(inn) => {
            sh += &format!("( {workload} ) >/tmp/workload.log 2>&1 & WP=$!; sleep 0.3; ");
            sh += &format!("( {inn} ) >/tmp/innocent.log 2>&1; echo campaign-innocent=$?; ");
            sh += "wait $WP; echo campaign-workload=$?; ";
            sh += "sed 's/^/workload: /' /tmp/workload.log; sed 's/^/innocent: /' /tmp/innocent.log; ";
        }
        None => sh += &format!("( {workload} ); echo campaign-workload=$?; "),
    }
    if !drv.is_empty() {
        for f in &drv {
            sh += &format!(
                "echo 0 > /sys/kernel/debug/vgpu_fail/{}/probability; ",
                f.point
            );
        }
        sh +=
            "dmesg | sed -n 's/^.*name \\([a-z_]*\\), interval .*$/campaign-driver-fault=\\1/p'; ";
        sh += "echo campaign-user-bos=$(sed -n 's/^user_bos //p' /sys/kernel/debug/vgpu/*/objects | head -1); ";
        sh += "echo campaign-splats=$(dmesg | grep -c -e 'WARNING:' -e 'BUG:' -e 'Oops' -e 'KASAN' -e 'UBSAN'); ";
    }
    sh += &format!("( {health} ) >/dev/null 2>&1; echo campaign-health=$?; ");
    // The driver's devcoredumps (the first is kept until read): once none
    // is still being written (debugfs `coredumps`: `pending 0`, at most 3
    // s), printed, then cleared, so a reused VM starts the next run
    // without one and a dump written late is not the next run's.
    sh += "f=$(ls /sys/kernel/debug/vgpu/*/coredumps 2>/dev/null | head -1); [ -z \"$f\" ] || for i in $(seq 30); do grep -q ' pending 0 ' \"$f\" && break; sleep 0.1; done; ";
    sh += &format!(
        "for d in /sys/class/devcoredump/devcd*/data; do [ -e \"$d\" ] || continue; echo {DUMP_BEGIN}; cat \"$d\"; echo {DUMP_END}; echo 1 > \"$d\"; done; "
    );
    // `-c`: a reused VM shows each run only the messages since the last.
    sh += "dmesg -c | grep -i vgpu | grep -v -e 'command line' -e vgpurun= -e vgpukmd= | sed 's/^/dmesg: /'; true";
    sh
}

/// Why the host could not run the VM: `scripts/vm`'s status and the lines
/// of its log that say why (its own `vm:` failure lines and QEMU's errors).
pub fn environment_reason(vm_status: i32, vm_log: &str) -> String {
    let why: Vec<&str> = vm_log
        .lines()
        .map(str::trim)
        .filter(|l| {
            l.starts_with("qemu-system-x86_64: ")
                || (l.starts_with("vm: ") && !l.starts_with("vm: KVM not used"))
        })
        .filter(|l| !l.starts_with("vm: qemu-system-x86_64 ")) // the command line
        .collect();
    let what = if vm_status == 123 {
        "QEMU failed"
    } else {
        "setup failure"
    };
    if why.is_empty() {
        format!("the host could not run the VM: {what} (scripts/vm status {vm_status})")
    } else {
        format!(
            "the host could not run the VM: {what} (scripts/vm status {vm_status}): {}",
            why.join(" / ")
        )
    }
}

fn ms(from: u64, to: u64) -> f64 {
    to.saturating_sub(from) as f64 / 1e6
}

/// Classifies a run from its evidence. Returns (outcome, detected_by,
/// detect_ms, recover_ms, notes).
pub fn classify(
    s: &Scenario,
    vm_status: i32,
    vm_log: &str,
    g: &GuestOutput,
    d: &DeviceLog,
) -> (String, Vec<String>, Option<f64>, Option<f64>, Vec<String>) {
    let mut notes = Vec::new();
    // A fault inside the driver has no device time: it counts from the
    // start (detection latencies are the device's).
    let first = d
        .injections
        .first()
        .copied()
        .or((!g.driver_faults.is_empty()).then_some(0));
    let mut detected_by: Vec<String> = Vec::new();
    for p in &g.driver_faults {
        let tag = format!("driver-failed-{p}");
        if !detected_by.contains(&tag) {
            detected_by.push(tag);
        }
    }
    let mut detect_ms = None;
    let mut recover_ms = None;
    if let Some(t0) = first {
        let mut reacted_at = None;
        // The device's reactions count after a device injection only.
        let observed = if d.injections.is_empty() {
            &[][..]
        } else {
            &d.observations[..]
        };
        for (what, t) in observed {
            if REACTIONS.contains(&what.as_str()) && *t >= t0 {
                if reacted_at.is_none() {
                    reacted_at = Some(*t);
                    detect_ms = Some(ms(t0, *t));
                }
                let tag = format!("device-saw-{}", what.to_ascii_lowercase());
                if !detected_by.contains(&tag) {
                    detected_by.push(tag);
                }
            }
            if what == "fence" && reacted_at.is_some() && recover_ms.is_none() {
                recover_ms = Some(ms(t0, *t));
            }
        }
        for (sign, tag) in DMESG_SIGNS {
            if g.dmesg.iter().any(|l| l.contains(sign)) && !detected_by.iter().any(|t| t == tag) {
                detected_by.push(tag.to_owned());
            }
        }
        // The application was told (an error, not a wrong result).
        let app_error = g.output.iter().any(|l| {
            let l = l.to_ascii_lowercase();
            (l.contains("reset")
                || l.contains("lost")
                || l.contains("fault")
                || l.contains("timed out"))
                && !l.contains("verified")
        });
        if app_error {
            detected_by.push("application-error".to_owned());
        }
    }
    let outcome = if vm_status >= 128 || d.panicked {
        "device-crash"
    } else if ENVIRONMENT_STATUSES.contains(&vm_status) {
        notes.push(environment_reason(vm_status, vm_log));
        ENVIRONMENT
    } else if vm_status == 125 {
        "guest-panic"
    } else if first.is_none() {
        if s.fault.is_some() || s.driver_fault.is_some() {
            notes.push("the trigger never fired".to_owned());
        }
        "not-injected"
    } else if detected_by.is_empty() {
        if g.workload.is_some_and(|w| w != 0) {
            notes.push(
                "the workload failed its own result check; the stack reported nothing".to_owned(),
            );
        }
        "silent"
    } else {
        let health_ok = g.health == Some(0);
        let innocent_ok = s.innocent.is_none() || g.innocent == Some(0);
        if !health_ok {
            notes.push(format!("health check status {:?}", g.health));
        }
        if !innocent_ok {
            notes.push(format!("innocent workload status {:?}", g.innocent));
        }
        // A fault inside the driver must leave no object behind and no
        // kernel splat.
        let leaked = g.user_bos.is_some_and(|n| n != 0);
        let splat = g.splats.is_some_and(|n| n != 0);
        if leaked {
            notes.push(format!(
                "{:?} buffer objects of files left after the workload",
                g.user_bos
            ));
        }
        if splat {
            notes.push(format!("{:?} kernel warnings or reports", g.splats));
        }
        let innocent_ok = innocent_ok && !leaked && !splat;
        if vm_status == 124 {
            notes.push("VM timed out".to_owned());
        }
        if health_ok && innocent_ok && vm_status != 124 {
            "detected-recovered"
        } else {
            "detected-not-recovered"
        }
    };
    if vm_status == 124 && outcome != "detected-not-recovered" {
        notes.push("VM timed out".to_owned());
    }
    (
        outcome.to_owned(),
        detected_by,
        detect_ms,
        recover_ms,
        notes,
    )
}

/// Checks `outcome` against the scenario's expectations (and, with
/// `clean`, that the sanitizer reported nothing).
fn judge(s: &Scenario, r: &mut RunResult, clean: bool) {
    let mut ok = s.expect.contains(&r.outcome);
    if clean && !r.sanitizer.is_empty() {
        ok = false;
        let list: Vec<String> = r
            .sanitizer
            .iter()
            .map(|(k, n)| format!("{k} x{n}"))
            .collect();
        r.reasons.push(format!(
            "sanitizer reports (the campaign requires none): {}",
            list.join(", ")
        ));
    }
    if !ok {
        r.reasons.push(format!(
            "outcome {} not in expected {:?}",
            r.outcome, s.expect
        ));
    }
    if let (Some(limit), Some(dt)) = (s.detect_within_ms, r.detect_ms) {
        if dt > limit as f64 {
            ok = false;
            r.reasons
                .push(format!("detected after {dt:.0} ms, limit {limit} ms"));
        }
    }
    match s.workload_status.as_deref() {
        Some("ok") if r.workload_status != Some(0) => {
            ok = false;
            r.reasons.push(format!(
                "workload status {:?}, expected 0",
                r.workload_status
            ));
        }
        Some("error") if matches!(r.workload_status, Some(0) | None) => {
            ok = false;
            r.reasons.push(format!(
                "workload status {:?}, expected an error",
                r.workload_status
            ));
        }
        _ => {}
    }
    r.passed = ok;
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// Where a VM whose logs go to `dir` records its device session: an
/// absolute path (the launcher does not run the device in our directory).
pub fn record_path(dir: &Path) -> PathBuf {
    let p = dir.join("session.vgrec");
    std::path::absolute(&p).unwrap_or(p)
}

impl Runner {
    /// The log directory of run `id` (created).
    pub fn run_dir(&self, id: &RunId) -> Result<PathBuf, RunError> {
        let dir = self
            .log_dir
            .join(format!("{:04}-{}-{}", id.index, id.scenario, id.rep));
        std::fs::create_dir_all(&dir).map_err(|e| RunError::Io(dir.display().to_string(), e))?;
        Ok(dir)
    }

    /// Runs `id` of campaign `c` in a fresh VM.
    pub fn run(&self, c: &Campaign, id: &RunId, first: bool) -> Result<RunResult, RunError> {
        let s = c
            .scenario(&id.scenario)
            .expect("runs come from the campaign's scenarios");
        let dir = self.run_dir(id)?;
        let script = guest_script(s, &c.campaign.health);
        let mut cmd = self.launcher("scripts/vm", c, s, &dir, first);
        if self.record {
            cmd.arg("--device-arg")
                .arg(format!("--record={}", record_path(&dir).display()));
        }
        if let Some(f) = &s.fault {
            for spec in fault_specs(f) {
                cmd.arg("--device-arg").arg(format!("--inject={spec}"));
            }
            cmd.arg("--device-arg")
                .arg(format!("--inject-seed={}", id.seed));
        }
        cmd.arg("run").arg(&script);
        let t0 = Instant::now();
        let out = cmd
            .output()
            .map_err(|e| RunError::Io("scripts/vm".into(), e))?;
        let duration_s = t0.elapsed().as_secs_f64();
        let write = |name: &str, data: &[u8]| {
            let p = dir.join(name);
            std::fs::write(&p, data).map_err(|e| RunError::Io(p.display().to_string(), e))
        };
        write("guest.log", &out.stdout)?;
        write("vm.log", &out.stderr)?;
        let ev = Evidence {
            vm_status: out.status.code().unwrap_or(128 + 9),
            vm_log: String::from_utf8_lossy(&out.stderr).into_owned(),
            guest: String::from_utf8_lossy(&out.stdout).into_owned(),
            device_log: std::fs::read_to_string(dir.join("device.log")).unwrap_or_default(),
            duration_s,
        };
        Ok(self.result(s, id, &ev, "fresh"))
    }

    /// The command that boots a run of `s` with its logs in `dir`:
    /// `launcher` (`scripts/vm`, or `scripts/vms`, whose arguments for its
    /// VMs go through `--vm-arg`) with the campaign's generation and
    /// timeout, the build before the first run, the scenario's vgpu.ko and
    /// vgpu-device arguments and the sanitizer; the caller adds its faults
    /// and the guest command.
    pub fn launcher(
        &self,
        launcher: &str,
        c: &Campaign,
        s: &Scenario,
        dir: &Path,
        first: bool,
    ) -> Command {
        let vm = c.vm_config(s);
        let mut cmd = Command::new(self.repo.join(launcher));
        cmd.arg("--gen")
            .arg(c.campaign.generation.to_string())
            .arg("--timeout")
            .arg(c.campaign.timeout_s.to_string())
            .arg("--keep-logs")
            .arg(dir);
        if !(self.build && first) {
            cmd.arg("--no-build");
        }
        if !vm.kmd.is_empty() {
            if launcher == "scripts/vms" {
                cmd.args(["--vm-arg", "--kmd-args", "--vm-arg", &vm.kmd]);
            } else {
                cmd.arg("--kmd-args").arg(&vm.kmd);
            }
        }
        for a in &vm.device {
            cmd.arg("--device-arg").arg(a);
        }
        if let Some(checks) = &self.sanitize {
            cmd.arg("--device-arg").arg(format!("--sanitize={checks}"));
        }
        cmd
    }

    /// Classifies run `id` of scenario `s` from its evidence and judges it
    /// against the scenario's expectations; `vm` is `fresh` or `reuse`.
    pub fn result(&self, s: &Scenario, id: &RunId, ev: &Evidence, vm: &str) -> RunResult {
        let vm_status = ev.vm_status;
        let g = parse_guest(&ev.guest);
        let d = parse_device_log(&ev.device_log);
        let (outcome, detected_by, detect_ms, recover_ms, notes) =
            classify(s, vm_status, &ev.vm_log, &g, &d);
        let class = s.class.clone().unwrap_or_else(|| {
            s.fault
                .as_deref()
                .map_or("none", |f| f.split([':', ';']).next().unwrap_or(f))
                .trim()
                .to_owned()
        });
        let mut replay = format!(
            "vgpu-campaign run {} --only {} --rep {}",
            shell_quote(&self.campaign_path),
            shell_quote(&id.scenario),
            id.rep
        );
        if let Some(seed) = self.seed {
            replay += &format!(" --seed {seed}");
        }
        if vm != "fresh" {
            replay += &format!(" --vm {vm}");
        }
        let (dumps, mut dump_notes) = self.save_dumps(id, &g.dumps);
        let dump_replays = dumps
            .iter()
            .map(|p| format!("vgpu-replay {}", shell_quote(p)))
            .collect();
        let dump_kinds = g.dumps.iter().map(|d| dump_kind(d)).collect();
        let mut r = RunResult {
            id: id.clone(),
            fault: s.fault.clone(),
            class,
            outcome,
            passed: false,
            reasons: notes,
            vm_status,
            workload_status: g.workload,
            innocent_status: g.innocent,
            health_status: g.health,
            injections: (d.injections.len() + g.driver_faults.len()) as u64,
            detected_by,
            detect_ms,
            recover_ms,
            duration_s: ev.duration_s,
            replay,
            dumps,
            dump_replays,
            dump_kinds,
            vm: vm.to_owned(),
            vm_boot: 0,
            vm_replaced: None,
            sanitizer: d.sanitizer.clone(),
            neighbour: None,
        };
        r.reasons.append(&mut dump_notes);
        judge(s, &mut r, self.require_no_sanitizer_reports);
        r
    }

    /// Writes the run's devcoredumps into its log directory
    /// (`devcoredump-N.txt`); returns their paths relative to the output
    /// directory (the log directory's parent) and notes on any that could
    /// not be written.
    fn save_dumps(&self, id: &RunId, dumps: &[String]) -> (Vec<String>, Vec<String>) {
        let mut paths = vec![];
        let mut notes = vec![];
        if dumps.is_empty() {
            return (paths, notes);
        }
        let dir = match self.run_dir(id) {
            Ok(d) => d,
            Err(e) => return (paths, vec![format!("devcoredumps not saved: {e}")]),
        };
        for (i, d) in dumps.iter().enumerate() {
            let p = dir.join(format!("devcoredump-{}.txt", i + 1));
            match std::fs::write(&p, d) {
                Ok(()) => {
                    let base = self.log_dir.parent().unwrap_or(&self.log_dir);
                    let rel = p.strip_prefix(base).unwrap_or(&p);
                    paths.push(rel.display().to_string());
                }
                Err(e) => notes.push(format!("{}: {e}", p.display())),
            }
        }
        (paths, notes)
    }
}

/// What a devcoredump is, in the terms a seeded campaign reproduces (not
/// its sequence number, context slot or times, which depend on what ran
/// before in the VM): the `reason` and `engine` of its `dump` line and the
/// `status` of its device capture (`ok`, or why there is none).
pub fn dump_kind(text: &str) -> String {
    let field = |line: &str, key: &str| -> Option<String> {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(key).map(str::to_owned))
    };
    let dump = text.lines().find(|l| l.starts_with("dump "));
    let device = text.lines().find(|l| l.starts_with("device "));
    format!(
        "{} engine={} capture={}",
        dump.and_then(|l| field(l, "reason="))
            .unwrap_or_else(|| "?".into()),
        dump.and_then(|l| field(l, "engine="))
            .unwrap_or_else(|| "?".into()),
        device
            .and_then(|l| field(l, "status="))
            .unwrap_or_else(|| "none".into())
    )
}

/// The `;`-separated fault specifications of a scenario's `fault`.
pub fn fault_specs(f: &str) -> impl Iterator<Item = &str> {
    f.split(';').map(str::trim).filter(|x| !x.is_empty())
}

/// The repository root: `VGPU_REPO`, else the nearest ancestor of the
/// current directory with `scripts/vm`.
pub fn find_repo() -> Option<PathBuf> {
    if let Some(r) = std::env::var_os("VGPU_REPO") {
        return Some(PathBuf::from(r));
    }
    let mut d = std::env::current_dir().ok()?;
    loop {
        if d.join("scripts/vm").is_file() {
            return Some(d);
        }
        if !d.pop() {
            return None;
        }
    }
}

#[cfg(test)]
mod tests;
