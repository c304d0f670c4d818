//! The C header `include/uapi/drm/vgpu_drm.h` is the source of truth for the
//! uAPI: this test compiles a C program against it and checks every size,
//! offset, parameter and ioctl number of the Rust mirror against it.
use std::mem::{offset_of, size_of};
use std::path::PathBuf;
use std::process::Command;

use vgpu_umd::uapi::{self, param, DrmVgpuGetParam, DrmVgpuPing};

const PROBE: &str = r#"
#include <stdio.h>
#include <stddef.h>
#include "vgpu_drm.h"
#define P(name, expr) printf("%s %llu\n", name, (unsigned long long)(expr))
int main(void) {
    P("sizeof.get_param", sizeof(struct drm_vgpu_get_param));
    P("get_param.param", offsetof(struct drm_vgpu_get_param, param));
    P("get_param.pad", offsetof(struct drm_vgpu_get_param, pad));
    P("get_param.value", offsetof(struct drm_vgpu_get_param, value));
    P("sizeof.ping", sizeof(struct drm_vgpu_ping));
    P("ping.cookie", offsetof(struct drm_vgpu_ping, cookie));
    P("ping.timeout_ns", offsetof(struct drm_vgpu_ping, timeout_ns));
    P("ping.event_seq", offsetof(struct drm_vgpu_ping, event_seq));
    P("ping.latency_ns", offsetof(struct drm_vgpu_ping, latency_ns));
    P("DRM_IOCTL_VGPU_GET_PARAM", (unsigned int)DRM_IOCTL_VGPU_GET_PARAM);
    P("DRM_IOCTL_VGPU_PING", (unsigned int)DRM_IOCTL_VGPU_PING);
    P("DRM_IOCTL_VERSION", (unsigned int)DRM_IOCTL_VERSION);
    P("sizeof.drm_version", sizeof(struct drm_version));
    P("VGPU_PARAM_GENERATION", VGPU_PARAM_GENERATION);
    P("VGPU_PARAM_PROTOCOL_VERSION", VGPU_PARAM_PROTOCOL_VERSION);
    P("VGPU_PARAM_FIRMWARE_VERSION", VGPU_PARAM_FIRMWARE_VERSION);
    P("VGPU_PARAM_ENGINE_MASK", VGPU_PARAM_ENGINE_MASK);
    P("VGPU_PARAM_VA_BITS", VGPU_PARAM_VA_BITS);
    P("VGPU_PARAM_PAGE_SIZES", VGPU_PARAM_PAGE_SIZES);
    P("VGPU_PARAM_MAX_CONTEXTS", VGPU_PARAM_MAX_CONTEXTS);
    P("VGPU_PARAM_MAX_RING_SIZE", VGPU_PARAM_MAX_RING_SIZE);
    P("VGPU_PARAM_MIN_RING_SIZE", VGPU_PARAM_MIN_RING_SIZE);
    P("VGPU_PARAM_COMPUTE_UNITS", VGPU_PARAM_COMPUTE_UNITS);
    P("VGPU_PARAM_DEVICE_ID", VGPU_PARAM_DEVICE_ID);
    P("VGPU_PARAM_EVENTS_RECEIVED", VGPU_PARAM_EVENTS_RECEIVED);
    P("VGPU_PARAM_HWIF_FINGERPRINT", VGPU_PARAM_HWIF_FINGERPRINT);
    P("VGPU_PARAM_DEVICE_FINGERPRINT", VGPU_PARAM_DEVICE_FINGERPRINT);
    P("VGPU_PARAM_COUNT", VGPU_PARAM_COUNT);
    return 0;
}
"#;

fn c_values() -> Vec<(String, u64)> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("uapi-probe");
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("probe.c");
    let exe = dir.join("probe");
    std::fs::write(&src, PROBE).unwrap();
    // drm.h: from libdrm-dev (scripts/setup-host installs it).
    let out = Command::new("cc")
        .args(["-Wall", "-Werror", "-std=c11", "-o"])
        .arg(&exe)
        .arg(&src)
        .arg(format!("-I{}", root.join("include/uapi/drm").display()))
        .arg("-I/usr/include/libdrm")
        .output()
        .expect("run cc");
    assert!(
        out.status.success(),
        "compiling against vgpu_drm.h failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().expect("run probe");
    assert!(run.status.success());
    String::from_utf8(run.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let (k, v) = l.split_once(' ').unwrap();
            (k.to_string(), v.parse().unwrap())
        })
        .collect()
}

#[test]
fn rust_mirror_matches_c_header() {
    let rust: Vec<(&str, u64)> = vec![
        ("sizeof.get_param", size_of::<DrmVgpuGetParam>() as u64),
        ("get_param.param", offset_of!(DrmVgpuGetParam, param) as u64),
        ("get_param.pad", offset_of!(DrmVgpuGetParam, pad) as u64),
        ("get_param.value", offset_of!(DrmVgpuGetParam, value) as u64),
        ("sizeof.ping", size_of::<DrmVgpuPing>() as u64),
        ("ping.cookie", offset_of!(DrmVgpuPing, cookie) as u64),
        (
            "ping.timeout_ns",
            offset_of!(DrmVgpuPing, timeout_ns) as u64,
        ),
        ("ping.event_seq", offset_of!(DrmVgpuPing, event_seq) as u64),
        (
            "ping.latency_ns",
            offset_of!(DrmVgpuPing, latency_ns) as u64,
        ),
        (
            "DRM_IOCTL_VGPU_GET_PARAM",
            u64::from(uapi::DRM_IOCTL_VGPU_GET_PARAM),
        ),
        ("DRM_IOCTL_VGPU_PING", u64::from(uapi::DRM_IOCTL_VGPU_PING)),
        ("DRM_IOCTL_VERSION", u64::from(uapi::DRM_IOCTL_VERSION)),
        ("sizeof.drm_version", size_of::<uapi::DrmVersion>() as u64),
        ("VGPU_PARAM_GENERATION", param::GENERATION.into()),
        (
            "VGPU_PARAM_PROTOCOL_VERSION",
            param::PROTOCOL_VERSION.into(),
        ),
        (
            "VGPU_PARAM_FIRMWARE_VERSION",
            param::FIRMWARE_VERSION.into(),
        ),
        ("VGPU_PARAM_ENGINE_MASK", param::ENGINE_MASK.into()),
        ("VGPU_PARAM_VA_BITS", param::VA_BITS.into()),
        ("VGPU_PARAM_PAGE_SIZES", param::PAGE_SIZES.into()),
        ("VGPU_PARAM_MAX_CONTEXTS", param::MAX_CONTEXTS.into()),
        ("VGPU_PARAM_MAX_RING_SIZE", param::MAX_RING_SIZE.into()),
        ("VGPU_PARAM_MIN_RING_SIZE", param::MIN_RING_SIZE.into()),
        ("VGPU_PARAM_COMPUTE_UNITS", param::COMPUTE_UNITS.into()),
        ("VGPU_PARAM_DEVICE_ID", param::DEVICE_ID.into()),
        ("VGPU_PARAM_EVENTS_RECEIVED", param::EVENTS_RECEIVED.into()),
        (
            "VGPU_PARAM_HWIF_FINGERPRINT",
            param::HWIF_FINGERPRINT.into(),
        ),
        (
            "VGPU_PARAM_DEVICE_FINGERPRINT",
            param::DEVICE_FINGERPRINT.into(),
        ),
        ("VGPU_PARAM_COUNT", param::COUNT.into()),
    ];
    let c = c_values();
    assert_eq!(c.len(), rust.len(), "probe and mirror list differ");
    for ((ck, cv), (rk, rv)) in c.iter().zip(&rust) {
        assert_eq!(ck, rk);
        assert_eq!(cv, rv, "{ck}: C header says {cv}, Rust mirror says {rv}");
    }
}

#[test]
fn every_param_define_in_header_is_mirrored() {
    // A new VGPU_PARAM_* in the header without a mirror entry fails here.
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let h = std::fs::read_to_string(root.join("include/uapi/drm/vgpu_drm.h")).unwrap();
    let n = h
        .lines()
        .filter(|l| l.starts_with("#define VGPU_PARAM_"))
        .count();
    // COUNT is one past the last; params start at 1.
    assert_eq!(n as u32, param::COUNT, "VGPU_PARAM_* defines vs mirror");
}
