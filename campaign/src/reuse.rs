//! Runs in a reused VM (`vm = "reuse"`): one `scripts/vm serve` — one
//! guest and one device process — runs the campaign's runs in sequence.
//!
//! The guest's init, in serve mode, reads `VGPU-CMD <id> <base64>` lines
//! from its console (QEMU's stdin, written here) and prints each command's
//! output between `VGPU-CMD-BEGIN <id>` and `VGPU-CMD-END <id> <status>`.
//! Before each run the device's injector is reset through its control
//! socket (`disarm all`, `unpoison all`), seeded with the run's seed and
//! armed with the run's faults; after it, disarmed. A run is classified
//! from its own slices: the console between its markers (the guest script
//! reads the kernel log with `dmesg -c`, so only messages since the last
//! run), and the device log written while it ran.
//!
//! A run that leaves the VM in doubt — no end marker (guest panic, timeout,
//! QEMU gone), the device gone or lost, a failed health check, a wedged
//! driver — is followed by a fresh VM for the remaining runs; the result
//! says so (`vm_replaced`). A run whose `kmd_args` or `device_args` differ
//! from the VM's also gets a fresh VM.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use crate::run::{
    fault_specs, guest_script, parse_guest, Evidence, RunError, RunResult, Runner,
    ENVIRONMENT_STATUSES,
};
use crate::spec::{Campaign, RunId, VmConfig};

/// Printed by the guest when it is ready for the first command.
const READY: &str = "VGPU-SERVE-READY";

/// Standard base64 (what busybox `base64 -d` reads).
pub fn base64(data: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = |i: usize| u32::from(chunk.get(i).copied().unwrap_or(0));
        let n = (b(0) << 16) | (b(1) << 8) | b(2);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(T[(n >> (18 - 6 * i)) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// One request on the device's control socket; the JSON reply if `ok`.
fn control(path: &Path, line: &str) -> Result<serde_json::Value, String> {
    let mut s = UnixStream::connect(path).map_err(|e| format!("control socket: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    writeln!(s, "{line}").map_err(|e| format!("control socket: {e}"))?;
    let mut reply = String::new();
    BufReader::new(&s)
        .read_line(&mut reply)
        .map_err(|e| format!("control socket: {e}"))?;
    let v: serde_json::Value =
        serde_json::from_str(&reply).map_err(|e| format!("control reply '{reply}': {e}"))?;
    if v["ok"] == serde_json::Value::Bool(true) {
        Ok(v)
    } else {
        Err(format!("'{line}': {}", v["error"]))
    }
}

/// What the console showed for one command.
#[derive(Debug, Default, PartialEq)]
pub struct CommandOutput {
    /// Lines between the command's markers.
    pub output: String,
    /// Every console line seen meanwhile.
    pub console: String,
    /// The command's status, if its end marker came.
    pub status: Option<i32>,
    /// The console ended (the VM is gone).
    pub eof: bool,
}

/// Reads console lines for command `id` until its end marker, the end of
/// the console or `deadline`.
pub fn collect(lines: &Receiver<String>, id: u64, deadline: Instant) -> CommandOutput {
    let mut c = CommandOutput::default();
    let begin = format!("VGPU-CMD-BEGIN {id}");
    let mut inside = false;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(l) => {
                c.console.push_str(&l);
                c.console.push('\n');
                if l == begin {
                    inside = true;
                } else if let Some(rest) = l.strip_prefix("VGPU-CMD-END ") {
                    let mut w = rest.split_whitespace();
                    if w.next() == Some(id.to_string().as_str()) {
                        c.status = w.next().and_then(|s| s.parse().ok());
                        return c;
                    }
                } else if inside {
                    c.output.push_str(&l);
                    c.output.push('\n');
                }
            }
            Err(RecvTimeoutError::Timeout) => return c,
            Err(RecvTimeoutError::Disconnected) => {
                c.eof = true;
                return c;
            }
        }
    }
}

/// A VM in serve mode.
struct Vm {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    control: PathBuf,
    device_log: PathBuf,
    console: Option<File>,
    config: VmConfig,
    boot: u64,
    next_cmd: u64,
}

impl Vm {
    /// Boots VM number `boot` (logs in `dir`) and waits for the guest.
    fn boot(
        runner: &Runner,
        c: &Campaign,
        config: &VmConfig,
        boot: u64,
        build: bool,
        dir: &Path,
    ) -> Result<Vm, (String, i32)> {
        let io = |e: std::io::Error| (format!("{}: {e}", dir.display()), 127);
        std::fs::create_dir_all(dir).map_err(io)?;
        let control =
            std::env::temp_dir().join(format!("vgpu-campaign-{}-{boot}.sock", std::process::id()));
        let device_log = dir.join("device.log");
        let mut cmd = Command::new(runner.repo.join("scripts/vm"));
        cmd.arg("--gen")
            .arg(c.campaign.generation.to_string())
            // The runner enforces each run's timeout itself.
            .arg("--timeout")
            .arg("86400")
            .arg("--device-log")
            .arg(&device_log)
            .arg("--device-arg")
            .arg(format!("--control={}", control.display()));
        if let Some(checks) = &runner.sanitize {
            cmd.arg("--device-arg").arg(format!("--sanitize={checks}"));
        }
        if !build {
            cmd.arg("--no-build");
        }
        if runner.record {
            cmd.arg("--device-arg").arg(format!(
                "--record={}",
                crate::run::record_path(dir).display()
            ));
        }
        if !config.kmd.is_empty() {
            cmd.arg("--kmd-args").arg(&config.kmd);
        }
        for a in &config.device {
            cmd.arg("--device-arg").arg(a);
        }
        cmd.arg("serve")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(File::create(dir.join("vm.log")).map_err(io)?);
        let mut child = cmd.spawn().map_err(io)?;
        let stdout = child.stdout.take();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let Some(out) = stdout else { return };
            for line in BufReader::new(out).split(b'\n') {
                let Ok(line) = line else { break };
                let l = String::from_utf8_lossy(&line)
                    .trim_end_matches('\r')
                    .to_owned();
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let mut vm = Vm {
            stdin: child.stdin.take(),
            child,
            lines: rx,
            control,
            device_log,
            console: File::create(dir.join("console.log")).ok(),
            config: config.clone(),
            boot,
            next_cmd: 1,
        };
        // A build before the first boot may take a while.
        let wait = c.campaign.timeout_s.max(60) + if build { 3600 } else { 0 };
        let deadline = Instant::now() + Duration::from_secs(wait);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match vm.lines.recv_timeout(left) {
                Ok(l) => {
                    vm.log_console(&l);
                    if l == READY {
                        return Ok(vm);
                    }
                }
                Err(e) => {
                    let status = vm.stop();
                    return Err((
                        match e {
                            RecvTimeoutError::Timeout => format!("no {READY} within {wait} s"),
                            RecvTimeoutError::Disconnected => {
                                format!("the VM ended while booting (status {status})")
                            }
                        },
                        status,
                    ));
                }
            }
        }
    }

    fn log_console(&mut self, text: &str) {
        if let Some(f) = self.console.as_mut() {
            let _ = writeln!(f, "{text}");
        }
    }

    /// Sends `script` to the guest; returns its command id.
    fn send(&mut self, script: &str) -> Result<u64, String> {
        let id = self.next_cmd;
        self.next_cmd += 1;
        let line = format!("VGPU-CMD {id} {}\n", base64(script.as_bytes()));
        let stdin = self.stdin.as_mut().ok_or("the VM's console is closed")?;
        stdin
            .write_all(line.as_bytes())
            .and_then(|()| stdin.flush())
            .map_err(|e| format!("the VM's console: {e}"))?;
        Ok(id)
    }

    /// `scripts/vm`'s exit status if it exits within `t`.
    fn wait_exit(&mut self, t: Duration) -> Option<i32> {
        let deadline = Instant::now() + t;
        loop {
            if let Ok(Some(s)) = self.child.try_wait() {
                return Some(s.code().unwrap_or(128 + 9));
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Asks the guest to power off, else stops `scripts/vm` (SIGTERM: it
    /// tears QEMU and the device down); returns its exit status.
    fn stop(&mut self) -> i32 {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = stdin.write_all(b"VGPU-QUIT\n");
        }
        if let Some(s) = self.wait_exit(Duration::from_secs(15)) {
            return s;
        }
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        if let Some(s) = self.wait_exit(Duration::from_secs(15)) {
            return s;
        }
        let _ = self.child.kill();
        self.child.wait().ok().and_then(|s| s.code()).unwrap_or(137)
    }
}

/// Bytes of `path` from `from` on.
fn read_from(path: &Path, from: u64) -> String {
    let mut s = Vec::new();
    if let Ok(mut f) = File::open(path) {
        if f.seek(SeekFrom::Start(from)).is_ok() {
            let _ = f.read_to_end(&mut s);
        }
    }
    String::from_utf8_lossy(&s).into_owned()
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

/// Runs a campaign's runs in sequence in reused VMs.
pub struct ReuseRunner<'a> {
    runner: &'a Runner,
    vm: Option<Vm>,
    boots: u64,
}

impl<'a> ReuseRunner<'a> {
    /// No VM yet: the first run boots one.
    pub fn new(runner: &'a Runner) -> Self {
        ReuseRunner {
            runner,
            vm: None,
            boots: 0,
        }
    }

    /// VMs booted so far.
    pub fn boots(&self) -> u64 {
        self.boots
    }

    fn vm_dir(&self, boot: u64) -> PathBuf {
        let base = self.runner.log_dir.parent().unwrap_or(&self.runner.log_dir);
        base.join("vms").join(format!("{boot:02}"))
    }

    /// A VM booted with `config`, booting one if needed (one retry).
    fn ensure_vm(
        &mut self,
        c: &Campaign,
        config: &VmConfig,
        first: bool,
    ) -> Result<(), (String, i32)> {
        if self.vm.as_ref().is_some_and(|v| v.config != *config) {
            self.shutdown();
        }
        if self.vm.is_some() {
            return Ok(());
        }
        let mut last = (String::new(), 0);
        for attempt in 0..2 {
            self.boots += 1;
            let dir = self.vm_dir(self.boots);
            let build = self.runner.build && first && attempt == 0;
            match Vm::boot(self.runner, c, config, self.boots, build, &dir) {
                Ok(vm) => {
                    self.vm = Some(vm);
                    return Ok(());
                }
                Err(e) => {
                    err!("(boot {} failed: {}) ", self.boots, e.0);
                    // The host cannot run a VM: another try would fail the
                    // same way.
                    let env = ENVIRONMENT_STATUSES.contains(&e.1);
                    last = e;
                    if env {
                        break;
                    }
                }
            }
        }
        Err(last)
    }

    /// Resets the injector, seeds it and arms the run's faults.
    fn prepare(vm: &Vm, fault: Option<&str>, seed: u64) -> Result<(), String> {
        control(&vm.control, "disarm all")?;
        control(&vm.control, "unpoison all")?;
        control(&vm.control, &format!("seed {seed}"))?;
        for spec in fault.map(fault_specs).into_iter().flatten() {
            control(&vm.control, &format!("arm {spec}"))?;
        }
        Ok(())
    }

    /// Runs `id` of `c` in the current VM (booting one if there is none).
    pub fn run(&mut self, c: &Campaign, id: &RunId, first: bool) -> Result<RunResult, RunError> {
        let s = c
            .scenario(&id.scenario)
            .expect("runs come from the campaign's scenarios");
        let dir = self.runner.run_dir(id)?;
        let config = c.vm_config(s);
        let t0 = Instant::now();
        // A VM whose device no longer answers is replaced before the run.
        let mut prepared = Err(String::new());
        for _ in 0..2 {
            if let Err((why, status)) = self.ensure_vm(c, &config, first) {
                let env = ENVIRONMENT_STATUSES.contains(&status);
                let ev = Evidence {
                    vm_status: if status >= 128 || env { status } else { 125 },
                    vm_log: std::fs::read_to_string(self.vm_dir(self.boots).join("vm.log"))
                        .unwrap_or_default(),
                    guest: String::new(),
                    device_log: String::new(),
                    duration_s: t0.elapsed().as_secs_f64(),
                };
                let mut r = self.runner.result(s, id, &ev, "reuse");
                r.reasons.push(format!("no VM: {why}"));
                r.passed = false;
                return Ok(r);
            }
            let vm = self.vm.as_ref().expect("ensure_vm set it");
            prepared = Self::prepare(vm, s.fault.as_deref(), id.seed);
            if prepared.is_ok() {
                break;
            }
            self.shutdown();
        }
        let Some(vm) = self.vm.as_mut() else {
            let ev = Evidence {
                vm_status: 128 + 9,
                duration_s: t0.elapsed().as_secs_f64(),
                ..Evidence::default()
            };
            let mut r = self.runner.result(s, id, &ev, "reuse");
            r.reasons.push(format!(
                "the device's control socket: {}",
                prepared.err().unwrap_or_default()
            ));
            r.passed = false;
            return Ok(r);
        };
        let mut notes = Vec::new();
        if let Err(e) = prepared {
            notes.push(format!("arming failed: {e}"));
        }
        let dev_from = file_len(&vm.device_log);
        let script = guest_script(s, &c.campaign.health);
        let t_run = Instant::now();
        let out = match vm.send(&script) {
            Ok(n) => collect(
                &vm.lines,
                n,
                t_run + Duration::from_secs(c.campaign.timeout_s),
            ),
            Err(e) => {
                notes.push(e);
                CommandOutput {
                    eof: true,
                    ..CommandOutput::default()
                }
            }
        };
        vm.log_console(out.console.trim_end_matches('\n'));
        let alive = control(&vm.control, "disarm all").is_ok();
        let lost = alive
            && control(&vm.control, "status")
                .is_ok_and(|v| v["lost"] == serde_json::Value::Bool(true));
        let vm_status = match out.status {
            // The device died under a guest that went on: as scripts/vm
            // reports a device that did not exit cleanly.
            Some(_) if !alive => 128 + 9,
            Some(st) => st,
            None if out.eof => {
                // The VM ended: scripts/vm says whether the device died.
                let code = vm.wait_exit(Duration::from_secs(15)).unwrap_or(125);
                if code >= 128 && code != 143 {
                    code
                } else {
                    125
                }
            }
            None if alive => 124,
            None => 128 + 9,
        };
        let device_log = read_from(&vm.device_log, dev_from);
        let write = |name: &str, data: &str| {
            let p = dir.join(name);
            std::fs::write(&p, data).map_err(|e| RunError::Io(p.display().to_string(), e))
        };
        write("guest.log", &out.output)?;
        write("console.log", &out.console)?;
        write("device.log", &device_log)?;
        let ev = Evidence {
            vm_status,
            vm_log: String::new(),
            guest: out.output.clone(),
            device_log,
            duration_s: t_run.elapsed().as_secs_f64(),
        };
        let mut r = self.runner.result(s, id, &ev, "reuse");
        if !notes.is_empty() {
            r.reasons.extend(notes);
            r.passed = false;
        }
        r.vm_boot = vm.boot;
        let g = parse_guest(&out.output);
        let why = if out.status.is_none() {
            Some(if out.eof {
                "the VM ended"
            } else {
                "no end marker before the timeout"
            })
        } else if !alive {
            Some("the device stopped answering")
        } else if lost {
            Some("the device is lost")
        } else if g.dmesg.iter().any(|l| l.contains("wedged")) {
            Some("the driver wedged the device")
        } else if g.health != Some(0) {
            Some("the health check failed")
        } else {
            None
        };
        if let Some(why) = why {
            r.vm_replaced = Some(why.to_owned());
            self.shutdown();
        }
        Ok(r)
    }

    /// Powers the current VM off.
    pub fn shutdown(&mut self) {
        if let Some(mut vm) = self.vm.take() {
            vm.stop();
            let _ = std::fs::remove_file(&vm.control);
        }
    }
}

impl Drop for ReuseRunner<'_> {
    fn drop(&mut self) {
        self.shutdown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_standard() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
        assert_eq!(base64(&[0xff, 0xfe, 0x00]), "//4A");
    }

    #[test]
    fn a_command_is_cut_from_the_console_by_its_markers() {
        let (tx, rx) = mpsc::channel();
        for l in [
            "VGPU-CMD-END 1 0",
            "noise",
            "VGPU-CMD-BEGIN 2",
            "campaign-workload=1",
            "dmesg: vgpu: hang",
            "VGPU-CMD-END 2 7",
            "after",
        ] {
            tx.send(l.to_owned()).unwrap();
        }
        let far = Instant::now() + Duration::from_secs(5);
        let c = collect(&rx, 2, far);
        assert_eq!(c.status, Some(7));
        assert_eq!(c.output, "campaign-workload=1\ndmesg: vgpu: hang\n");
        assert!(c.console.starts_with("VGPU-CMD-END 1 0\nnoise\n"));
        assert!(!c.eof);
        // The rest: no marker for 3, then the console ends.
        drop(tx);
        let c = collect(&rx, 3, far);
        assert_eq!((c.status, c.eof, c.output.as_str()), (None, true, ""));
        // Nothing arrives: the deadline ends the wait.
        let (_tx, rx) = mpsc::channel::<String>();
        let c = collect(&rx, 1, Instant::now() + Duration::from_millis(50));
        assert_eq!((c.status, c.eof), (None, false));
    }
}
