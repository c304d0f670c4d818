//! `vgpu-kvm-probe` against this machine's /dev/kvm (skipped without one).
//!
//! Under a paravirtualised KVM (`kvm_pvm`, as on the project's build
//! machines) the answer must be "not usable" because of the emulation
//! failure at XSAVE that also stops a stock kernel there; under
//! `kvm_intel`/`kvm_amd` it must be "usable".

use std::path::Path;
use std::process::Command;

use serde_json::Value;

fn kvm_available() -> bool {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .is_ok()
}

fn probe(args: &[&str]) -> (Option<i32>, Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_vgpu-kvm-probe"))
        .arg("--json")
        .args(args)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let v: Value =
        serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("bad JSON '{text}': {e}"));
    (out.status.code(), v)
}

#[test]
fn the_answer_here_is_right_and_quick() {
    if !kvm_available() {
        eprintln!("skipped: /dev/kvm is absent or not read-write for this user");
        return;
    }
    let (rc, v) = probe(&[]);
    eprintln!("vgpu-kvm-probe here: {v}");
    let ms = v["elapsed_ms"].as_f64().unwrap();
    assert!(ms < 1000.0, "took {ms} ms, the probe's own limit is 1000");
    if Path::new("/sys/module/kvm_pvm").exists() {
        assert_eq!(rc, Some(1));
        assert_eq!(v["usable"], false);
        assert_eq!(v["kind"], "emulation-failure");
        assert_eq!(
            v["reason"],
            "KVM emulation failure at XSAVE in the probe guest; \
             /dev/kvm is kvm_pvm, a paravirtualised KVM"
        );
        assert_eq!(v["api_version"], 12);
        assert_eq!(v["missing_capabilities"], serde_json::json!([]));
    } else if ["kvm_intel", "kvm_amd"]
        .iter()
        .any(|m| Path::new("/sys/module").join(m).exists())
    {
        assert_eq!(rc, Some(0), "{v}");
        assert_eq!(v["usable"], true);
        assert_eq!(v["kind"], "usable");
    } else {
        // Another KVM: the answer must still be one of the two.
        assert!(matches!(rc, Some(0) | Some(1)), "{v}");
    }
}

#[test]
fn a_guest_that_never_exits_is_stopped_at_the_timeout() {
    if !kvm_available() {
        eprintln!("skipped: /dev/kvm is absent or not read-write for this user");
        return;
    }
    let (rc, v) = probe(&["--guest", "spin", "--timeout-ms", "100"]);
    eprintln!("vgpu-kvm-probe --guest spin here: {v}");
    assert_eq!(rc, Some(1));
    assert_eq!(v["kind"], "timeout", "{v}");
    assert!(v["reason"]
        .as_str()
        .unwrap()
        .contains("stuck at an endless loop"));
    let ms = v["elapsed_ms"].as_f64().unwrap();
    assert!(
        (100.0..600.0).contains(&ms),
        "stopped after {ms} ms, limit 100"
    );
}

#[test]
fn the_text_output_is_one_line() {
    let out = Command::new(env!("CARGO_BIN_EXE_vgpu-kvm-probe"))
        .args(["--device", "/nonexistent/kvm"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(
        text.starts_with("KVM not usable: no /nonexistent/kvm (KVM not loaded)"),
        "{text}"
    );
    assert!(text.trim_end().ends_with(" ms)"), "{text}");
}
