//! Runs with a neighbour: the scenario's VM and a well-behaved one share
//! one device as two virtual functions (`scripts/vms`, docs/hardware.md
//! section 17). The scenario's faults are armed on the first function's
//! injector only (`vgpu-pf vf 1 seed N`, `vgpu-pf vf 1 arm SPEC`, before
//! the VMs boot); its VM runs the usual guest script and is classified as
//! a fresh run is. The neighbour's VM runs the scenario's `neighbour`
//! command; the run fails unless that command exits 0 and the host's view
//! shows its function with no reset, no fault and no engine wait longer
//! than `neighbour_wait_ms`: a faulting, hanging or flooding VM costs the
//! others at most their share of time, never their results.

use std::path::Path;
use std::time::Instant;

use crate::run::{
    environment_reason, fault_specs, guest_script, Evidence, NeighbourResult, RunError, RunResult,
    Runner, ENVIRONMENT_STATUSES,
};
use crate::spec::{Campaign, RunId, Scenario, ENVIRONMENT, NEIGHBOUR_WAIT_MS};

/// The line the neighbour's script prints with its command's status.
const STATUS: &str = "campaign-neighbour=";

/// The neighbour VM's script: its command, then its status.
pub fn neighbour_script(command: &str) -> String {
    format!("( {command} ); echo {STATUS}$?")
}

/// `scripts/vms`'s `vmN: exit status S` lines: S of VM `n` (1-based).
pub fn vm_status(vms_out: &str, n: u32) -> Option<i32> {
    let prefix = format!("vm{n}: exit status ");
    vms_out
        .lines()
        .find_map(|l| l.strip_prefix(&prefix).and_then(|v| v.trim().parse().ok()))
}

/// One function's row of the host's `vgpu-pf list` (as `scripts/vms`
/// prints it, each line after `host: `): (resets, faults, longest engine
/// wait in ms).
pub fn host_row(host_log: &str, vf: u32) -> Option<(u64, u64, f64)> {
    host_log.lines().find_map(|l| {
        // vf ctx vram_MiB vis_MiB weight vm resets faults copy_ms comp_ms max_wait socket
        let w: Vec<&str> = l.strip_prefix("host:")?.split_whitespace().collect();
        if w.len() < 11 || w[0].parse::<u32>().ok()? != vf {
            return None;
        }
        Some((
            w[6].parse().ok()?,
            w[7].parse().ok()?,
            w[10].strip_suffix("ms")?.parse().ok()?,
        ))
    })
}

/// What the neighbour saw, from its output, its launcher status and the
/// host's view.
pub fn neighbour_result(out: &str, vm_status: i32, host_log: &str) -> NeighbourResult {
    let status = out
        .lines()
        .find_map(|l| l.strip_prefix(STATUS).and_then(|v| v.trim().parse().ok()));
    let row = host_row(host_log, 2);
    NeighbourResult {
        status,
        vm_status,
        wait_ms: row.map(|r| r.2),
        resets: row.map(|r| r.0),
        faults: row.map(|r| r.1),
    }
}

/// Fails `r` (adding why) when its neighbour did not come through
/// untouched: its command failed or never reported, its function was
/// reset or faulted, or it waited longer than the scenario allows.
pub fn judge_neighbour(s: &Scenario, r: &mut RunResult, n: NeighbourResult, vm_log: &str) {
    let limit = s.neighbour_wait_ms.unwrap_or(NEIGHBOUR_WAIT_MS) as f64;
    let mut why = Vec::new();
    if ENVIRONMENT_STATUSES.contains(&n.vm_status) {
        why.push(format!(
            "the neighbour's VM: {}",
            environment_reason(n.vm_status, vm_log)
        ));
        if r.outcome != "device-crash" {
            r.outcome = ENVIRONMENT.to_owned();
        }
    } else if n.status != Some(0) {
        why.push(format!(
            "the neighbour's command: status {:?} (its VM: {})",
            n.status, n.vm_status
        ));
    }
    match (n.resets, n.faults, n.wait_ms) {
        (Some(resets), Some(faults), Some(wait)) => {
            if resets != 0 || faults != 0 {
                why.push(format!(
                    "the neighbour's function saw {resets} resets and {faults} faults"
                ));
            }
            if wait > limit {
                why.push(format!(
                    "the neighbour waited {wait:.1} ms for an engine, limit {limit:.0} ms"
                ));
            }
        }
        _ => why.push("no host view of the neighbour's function".to_owned()),
    }
    if !why.is_empty() {
        r.passed = false;
        r.reasons.extend(why);
    }
    r.neighbour = Some(n);
}

/// Runs `id` of `c` (whose scenario has a neighbour) on two functions of
/// one device in two fresh VMs.
pub fn run(runner: &Runner, c: &Campaign, id: &RunId, first: bool) -> Result<RunResult, RunError> {
    let s = c
        .scenario(&id.scenario)
        .expect("runs come from the campaign's scenarios");
    let neighbour = s
        .neighbour
        .as_deref()
        .expect("only scenarios with a neighbour run here");
    let dir = runner.run_dir(id)?;
    let mut cmd = runner.launcher("scripts/vms", c, s, &dir, first);
    if let Some(f) = &s.fault {
        // The seed first: each armed fault draws from the injector's seed.
        cmd.arg("--pf").arg(format!("vf 1 seed {}", id.seed));
        for spec in fault_specs(f) {
            cmd.arg("--pf").arg(format!("vf 1 arm {spec}"));
        }
    }
    cmd.arg("run")
        .arg(guest_script(s, &c.campaign.health))
        .arg(neighbour_script(neighbour));
    let t0 = Instant::now();
    let out = cmd
        .output()
        .map_err(|e| RunError::Io("scripts/vms".into(), e))?;
    let duration_s = t0.elapsed().as_secs_f64();
    let write = |name: &str, data: &[u8]| {
        let p = dir.join(name);
        std::fs::write(&p, data).map_err(|e| RunError::Io(p.display().to_string(), e))
    };
    write("vms.log", &out.stdout)?;
    write("vms.err", &out.stderr)?;
    let vms_out = String::from_utf8_lossy(&out.stdout);
    let read = |p: &Path| std::fs::read_to_string(dir.join(p)).unwrap_or_default();
    // scripts/vms refused before any VM ran (127): both "VMs" failed so.
    let vms_status = out.status.code().unwrap_or(128 + 9);
    let status = |n| vm_status(&vms_out, n).unwrap_or(vms_status);
    let mut vm_log = read(Path::new("vm1/err"));
    vm_log.push_str(&String::from_utf8_lossy(&out.stderr));
    let ev = Evidence {
        vm_status: status(1),
        vm_log,
        guest: read(Path::new("vm1/out")),
        device_log: read(Path::new("device.log")),
        duration_s,
    };
    let mut r = runner.result(s, id, &ev, "fresh");
    let n = neighbour_result(
        &read(Path::new("vm2/out")),
        status(2),
        &read(Path::new("host.log")),
    );
    judge_neighbour(s, &mut r, n, &read(Path::new("vm2/err")));
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOST: &str = "\
host: vgpu-pf list
host:  vf  ctx  vram_MiB   vis_MiB  weight     vm resets faults     copy_ms     comp_ms   max_wait  socket
host:   1   32       254        32       1     no      3      1         0.4       950.1      2.0ms  /tmp/v/gpu.sock.vf1
host:   2   32       254        32       1     no      0      0         9.4       182.3      7.3ms  /tmp/v/gpu.sock.vf2
host: vgpu-pf fairness
host:   vf 2: weight   3      182.3 ms  share 100.0%  (weighted share 100.0%)
";

    fn scenario(limit: Option<u64>) -> Scenario {
        let text = format!(
            "[campaign]\nname = \"t\"\n[[scenario]]\nname = \"n\"\nworkload = \"w\"\n\
             neighbour = \"vgpu-samples saxpy\"\nexpect = [\"detected-recovered\"]\n{}",
            limit.map_or(String::new(), |l| format!("neighbour_wait_ms = {l}\n"))
        );
        Campaign::parse("t", &text).unwrap().scenario[0].clone()
    }

    fn passed_run() -> RunResult {
        serde_json::from_value(serde_json::json!({
            "index": 0, "scenario": "n", "rep": 0, "seed": 1, "fault": null, "class": "hang",
            "outcome": "detected-recovered", "passed": true, "reasons": [], "vm_status": 0,
            "workload_status": 1, "innocent_status": null, "health_status": 0, "injections": 1,
            "detected_by": [], "detect_ms": null, "recover_ms": null, "duration_s": 1.0,
            "replay": "r"
        }))
        .unwrap()
    }

    #[test]
    fn the_host_row_and_statuses_are_read() {
        assert_eq!(host_row(HOST, 1), Some((3, 1, 2.0)));
        assert_eq!(host_row(HOST, 2), Some((0, 0, 7.3)));
        assert_eq!(host_row(HOST, 3), None);
        let out = "vm1: ok\nvm1: exit status 0\nvm2: exit status 124\n";
        assert_eq!(vm_status(out, 1), Some(0));
        assert_eq!(vm_status(out, 2), Some(124));
        assert_eq!(vm_status(out, 3), None);
        let n = neighbour_result("saxpy: ok\ncampaign-neighbour=0\n", 0, HOST);
        assert_eq!(n.status, Some(0));
        assert_eq!(n.wait_ms, Some(7.3));
        assert_eq!(n.resets, Some(0));
        assert_eq!(
            neighbour_script("a && b"),
            "( a && b ); echo campaign-neighbour=$?"
        );
    }

    #[test]
    fn an_untouched_neighbour_keeps_the_run_passing() {
        let mut r = passed_run();
        let n = neighbour_result("campaign-neighbour=0", 0, HOST);
        judge_neighbour(&scenario(None), &mut r, n.clone(), "");
        assert!(r.passed, "{:?}", r.reasons);
        assert_eq!(r.neighbour, Some(n));
    }

    #[test]
    fn each_harm_to_the_neighbour_fails_the_run_and_says_which() {
        let cases: [(&str, i32, String, Option<u64>, &str); 6] = [
            (
                "campaign-neighbour=1",
                0,
                HOST.into(),
                None,
                "command: status Some(1)",
            ),
            (
                "",
                124,
                HOST.into(),
                None,
                "command: status None (its VM: 124)",
            ),
            (
                "campaign-neighbour=0",
                0,
                HOST.into(),
                Some(5),
                "waited 7.3 ms for an engine, limit 5 ms",
            ),
            (
                "campaign-neighbour=0",
                0,
                HOST.replace("no      0      0", "no      1      0"),
                None,
                "1 resets and 0 faults",
            ),
            (
                "campaign-neighbour=0",
                0,
                String::new(),
                None,
                "no host view",
            ),
            (
                "",
                123,
                HOST.into(),
                None,
                "the neighbour's VM: the host could not run the VM",
            ),
        ];
        for (out, vm, host, limit, want) in cases {
            let mut r = passed_run();
            judge_neighbour(
                &scenario(limit),
                &mut r,
                neighbour_result(out, vm, &host),
                "",
            );
            assert!(!r.passed, "{want}");
            assert!(
                r.reasons.iter().any(|w| w.contains(want)),
                "{want}: {:?}",
                r.reasons
            );
        }
    }

    #[test]
    fn a_neighbour_vm_that_could_not_run_is_the_environment() {
        let mut r = passed_run();
        judge_neighbour(&scenario(None), &mut r, neighbour_result("", 123, HOST), "");
        assert_eq!(r.outcome, ENVIRONMENT);
    }
}
