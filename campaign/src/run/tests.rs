use super::*;

fn scenario(fault: Option<&str>, innocent: bool) -> Scenario {
    Scenario {
        name: "s".into(),
        workload: "w".into(),
        innocent: innocent.then(|| "i".into()),
        fault: fault.map(Into::into),
        class: None,
        repeat: 1,
        expect: vec!["detected-recovered".into()],
        detect_within_ms: Some(3000),
        workload_status: None,
        kmd_args: None,
        device_args: None,
        driver_fault: None,
        neighbour: None,
        neighbour_wait_ms: None,
    }
}

const DEVICE: &str = "\
[WARN vgpu_device::core::inject] inject: id=1 fault=1 class=hang ctx=1 engine=0 device_ns=5 wall_ns=1000000000 packet=FENCE
[WARN vgpu_device::core::inject] inject-observe: id=2 what=ENGINE_RESET ctx=-1 engine=0 device_ns=9 wall_ns=2000000000
[WARN vgpu_device::core::inject] inject-observe: id=3 what=fence ctx=2 engine=0 device_ns=9 wall_ns=2500000000 seqno=4
";

#[test]
fn sanitizer_reports_are_counted_and_can_fail_a_run() {
    let log = "[WARN vgpu_device::core::sanitize::report] sanitizer: SAN-TLB-STALE #1 ctx 1 copy: x\n\
               [WARN vgpu_device::core::sanitize::report] sanitizer: SAN-TLB-STALE #2 ctx 1 copy: y\n\
               [WARN vgpu_device::core::sanitize::report] sanitizer: SAN-FENCE-REGRESS #3 ctx 2 copy: z\n\
               [INFO vgpu_device::core::sanitize] sanitizer: checks SAN-RING-INDEX\n";
    let d = parse_device_log(log);
    assert_eq!(
        d.sanitizer.into_iter().collect::<Vec<_>>(),
        vec![
            ("SAN-FENCE-REGRESS".to_owned(), 1),
            ("SAN-TLB-STALE".to_owned(), 2)
        ]
    );
    let mut s = scenario(None, false);
    s.expect = vec!["not-injected".into()];
    let mut runner = Runner {
        repo: ".".into(),
        log_dir: ".".into(),
        build: false,
        campaign_path: "c.toml".into(),
        seed: None,
        sanitize: Some("all".into()),
        require_no_sanitizer_reports: false,
        record: false,
    };
    let id = RunId {
        index: 0,
        scenario: "s".into(),
        rep: 0,
        seed: 1,
    };
    let ev = Evidence {
        vm_status: 0,
        guest: "campaign-workload=0\ncampaign-health=0\n".into(),
        device_log: log.into(),
        ..Evidence::default()
    };
    let r = runner.result(&s, &id, &ev, "fresh");
    assert_eq!(r.sanitizer.values().sum::<u64>(), 3);
    assert!(r.passed, "counted only: {:?}", r.reasons);
    runner.require_no_sanitizer_reports = true;
    let r = runner.result(&s, &id, &ev, "fresh");
    assert!(!r.passed);
    assert!(
        r.reasons.iter().any(|x| x.contains("SAN-TLB-STALE x2")),
        "{:?}",
        r.reasons
    );
}

#[test]
fn hang_detected_and_recovered_with_latencies() {
    let s = scenario(Some("hang"), true);
    let g = parse_guest(
        "x\ncampaign-workload=1\ncampaign-innocent=0\ncampaign-health=0\ndmesg: vgpu 0000:00:03.0: hang: context 1 engine 0\n",
    );
    let d = parse_device_log(DEVICE);
    assert_eq!(d.injections, vec![1_000_000_000]);
    let (o, by, det, rec, _) = classify(&s, 0, "", &g, &d);
    assert_eq!(o, "detected-recovered");
    assert!(by.contains(&"device-saw-engine_reset".to_owned()));
    assert!(by.contains(&"kmd-hang-check".to_owned()));
    assert_eq!((det, rec), (Some(1000.0), Some(1500.0)));
}

#[test]
fn outcomes_from_evidence() {
    let s = scenario(Some("fence-event-drop"), false);
    let ok = parse_guest("campaign-workload=0\ncampaign-health=0\n");
    let inj = parse_device_log(DEVICE.lines().next().unwrap());
    assert_eq!(classify(&s, 0, "", &ok, &inj).0, "silent");
    assert_eq!(classify(&s, 125, "", &ok, &inj).0, "guest-panic");
    assert_eq!(classify(&s, 134, "", &ok, &inj).0, "device-crash");
    assert_eq!(
        classify(&s, 0, "", &ok, &DeviceLog::default()).0,
        "not-injected"
    );
    let bad = parse_guest(
        "campaign-workload=1\ncampaign-health=1\ndmesg: vgpu: device wedged: recovery failed\n",
    );
    assert_eq!(classify(&s, 0, "", &bad, &inj).0, "detected-not-recovered");
}

#[test]
fn a_vm_the_host_could_not_run_is_an_environment_failure() {
    let s = scenario(Some("hang"), false);
    let nothing = GuestOutput::default();
    // QEMU refused the device at start: scripts/vm exits 123.
    let log = "\
vm: KVM not used: KVM emulation failure at XSAVE in the probe guest
vm: qemu-system-x86_64 -machine q35,memory-backend=mem -device vhost-user-gpu-pci,chardev=vgpu,edid=off
qemu-system-x86_64: -device vhost-user-gpu-pci,chardev=vgpu,edid=off: vhost initialization failed: requires kvm
vm: QEMU failed to start (exit status 1)
";
    let (o, by, _, _, notes) = classify(&s, 123, log, &nothing, &DeviceLog::default());
    assert_eq!(o, ENVIRONMENT);
    assert!(by.is_empty());
    assert_eq!(
        notes,
        vec![
            "the host could not run the VM: QEMU failed (scripts/vm status 123): \
             qemu-system-x86_64: -device vhost-user-gpu-pci,chardev=vgpu,edid=off: \
             vhost initialization failed: requires kvm / vm: QEMU failed to start (exit status 1)"
                .to_owned()
        ]
    );
    // A QEMU too old for TCG is refused before boot: 127.
    let log = "vm: QEMU 7.2.22 cannot run vgpu under TCG: ... run scripts/setup-host ...\n";
    let (o, _, _, _, notes) = classify(&s, 127, log, &nothing, &DeviceLog::default());
    assert_eq!(o, ENVIRONMENT);
    assert!(notes[0].starts_with(
        "the host could not run the VM: setup failure (scripts/vm status 127): vm: QEMU 7.2.22"
    ));
    // Neither is a guest panic, a device crash or "not injected"; a
    // device that panicked is still a device crash.
    let panicked = parse_device_log("thread 'main' panicked at src/x.rs:1:1");
    assert_eq!(
        classify(&s, 123, log, &nothing, &panicked).0,
        "device-crash"
    );
    assert_eq!(
        classify(&s, 125, "", &nothing, &DeviceLog::default()).0,
        "guest-panic"
    );
    // Never expected: the run fails.
    let runner = Runner {
        repo: ".".into(),
        log_dir: ".".into(),
        build: false,
        campaign_path: "c.toml".into(),
        seed: None,
        sanitize: None,
        require_no_sanitizer_reports: false,
        record: false,
    };
    let id = RunId {
        index: 0,
        scenario: "s".into(),
        rep: 0,
        seed: 1,
    };
    let ev = Evidence {
        vm_status: 123,
        vm_log: "qemu-system-x86_64: boom\n".into(),
        ..Evidence::default()
    };
    let r = runner.result(&s, &id, &ev, "fresh");
    assert_eq!(r.outcome, ENVIRONMENT);
    assert!(!r.passed);
    assert!(r
        .reasons
        .iter()
        .any(|x| x.ends_with("status 123): qemu-system-x86_64: boom")));
}

#[test]
fn a_dump_kind_is_what_a_seeded_campaign_reproduces() {
    let d = "VGPU DEVCOREDUMP 1\n[dump]\ndump seq=4 reason=fault slot=2 ctx=9 engine=1 time_ns=5\n[device]\ndevice capture=3 size=10 status=ok capture_ms=1\n[end]\n";
    assert_eq!(dump_kind(d), "fault engine=1 capture=ok");
    let lost = "VGPU DEVCOREDUMP 1\n[dump]\ndump seq=1 reason=hang slot=0 engine=0\n[device]\ndevice capture=0 status=lost\n";
    assert_eq!(dump_kind(lost), "hang engine=0 capture=lost");
    assert_eq!(dump_kind("garbage"), "? engine=? capture=none");
}

#[test]
fn devcoredumps_are_taken_out_of_the_guest_output() {
    let g = parse_guest(&format!(
        "x\ncampaign-workload=1\n{DUMP_BEGIN}\nVGPU DEVCOREDUMP 1\n[dump]\ndump reason=hang\n[end]\n{DUMP_END}\ncampaign-health=0\n"
    ));
    assert_eq!(
        g.dumps,
        vec!["VGPU DEVCOREDUMP 1\n[dump]\ndump reason=hang\n[end]\n"]
    );
    assert_eq!(g.output, vec!["x"]);
    assert_eq!((g.workload, g.health), (Some(1), Some(0)));
    let dir = tempfile::tempdir().unwrap();
    let runner = Runner {
        repo: dir.path().to_owned(),
        log_dir: dir.path().join("runs"),
        build: false,
        campaign_path: "c.toml".into(),
        seed: None,
        sanitize: None,
        require_no_sanitizer_reports: false,
        record: false,
    };
    let id = RunId {
        index: 3,
        scenario: "hang".into(),
        rep: 1,
        seed: 9,
    };
    let ev = Evidence {
        guest: format!("campaign-workload=1\n{DUMP_BEGIN}\nVGPU DEVCOREDUMP 1\n{DUMP_END}\ncampaign-health=0\n"),
        ..Evidence::default()
    };
    let r = runner.result(&scenario(Some("hang"), false), &id, &ev, "fresh");
    assert_eq!(r.dumps.len(), 1);
    assert_eq!(r.dumps, vec!["runs/0003-hang-1/devcoredump-1.txt"]);
    assert_eq!(
        std::fs::read_to_string(dir.path().join(&r.dumps[0])).unwrap(),
        "VGPU DEVCOREDUMP 1\n"
    );
    assert_eq!(
        r.dump_replays,
        vec![format!("vgpu-replay '{}'", r.dumps[0])]
    );
}

#[test]
fn script_runs_workload_innocent_health_and_dmesg() {
    let sh = guest_script(&scenario(None, true), "h");
    assert!(sh
        .starts_with("( w ) >/tmp/workload.log 2>&1 & WP=$!; sleep 0.3; ( i ) >/tmp/innocent.log"));
    assert!(sh.contains("( h ) >/dev/null 2>&1; echo campaign-health=$?"));
    assert!(sh.contains("cat \"$d\"; echo campaign-devcoredump-end; echo 1 > \"$d\""));
}

#[test]
fn driver_faults_are_armed_for_the_workload_only_and_judged_by_leaks_and_splats() {
    let mut s = scenario(None, false);
    s.driver_fault = Some("vram_alloc:interval=3".into());
    let sh = guest_script(&s, "h");
    let d = "/sys/kernel/debug/vgpu_fail/vram_alloc";
    assert!(sh.starts_with(&format!(
        "echo Y > {d}/task-filter; echo 1 > {d}/verbose; echo 3 > {d}/interval; echo 1 > {d}/times; echo 0 > {d}/space; echo 100 > {d}/probability; "
    )));
    assert!(sh.contains("( echo 1 > /proc/self/make-it-fail; w ); echo campaign-workload=$?; "));
    let disarm = sh.find(&format!("echo 0 > {d}/probability")).unwrap();
    assert!(
        disarm < sh.find("( h )").unwrap(),
        "disarmed before the health check"
    );
    assert!(sh.contains("campaign-user-bos=") && sh.contains("campaign-splats="));

    // Injected (the framework's log line), handled, nothing left.
    let ok = parse_guest(
        "campaign-workload=0\ncampaign-driver-fault=vram_alloc\ncampaign-user-bos=0\ncampaign-splats=0\ncampaign-health=0\n",
    );
    assert_eq!(ok.driver_faults, vec!["vram_alloc".to_owned()]);
    let (outcome, by, detect_ms, ..) = classify(&s, 0, "", &ok, &DeviceLog::default());
    assert_eq!(outcome, "detected-recovered");
    assert_eq!(by, vec!["driver-failed-vram_alloc".to_owned()]);
    assert_eq!(detect_ms, None, "no device time for a driver fault");
    // A leaked object or a kernel warning: not recovered.
    for bad in ["campaign-user-bos=2", "campaign-splats=1"] {
        let g = parse_guest(&format!(
            "campaign-workload=0\ncampaign-driver-fault=vram_alloc\n{bad}\ncampaign-health=0\n"
        ));
        let (outcome, _, _, _, notes) = classify(&s, 0, "", &g, &DeviceLog::default());
        assert_eq!(outcome, "detected-not-recovered", "{bad}: {notes:?}");
    }
    // The point never failed: not injected.
    let none = parse_guest("campaign-workload=0\ncampaign-user-bos=0\ncampaign-health=0\n");
    assert_eq!(
        classify(&s, 0, "", &none, &DeviceLog::default()).0,
        "not-injected"
    );
}

#[test]
fn driver_fault_specs_are_checked() {
    use crate::spec::driver_faults;
    let f = driver_faults("bo_pages; control_cmd:times=-1,probability=50").unwrap();
    assert_eq!(f.len(), 2);
    assert_eq!(f[1].knobs.last(), Some(&("probability".to_owned(), 50)));
    assert_eq!(f[1].knobs[1], ("times".to_owned(), -1));
    for bad in [
        "nope",
        "bo_pages:interval=0",
        "bo_pages:color=3",
        "bo_pages:times=x",
        "pt_alloc:interval",
    ] {
        assert!(driver_faults(bad).is_err(), "{bad}");
    }
}
