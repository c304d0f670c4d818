//! `include/vgpu.h` against the Rust side of the C ABI: the header compiles
//! cleanly as C11 and C++, and every struct size, field offset and constant
//! the C compiler computes equals the Rust definition.

use std::mem::{offset_of, size_of};
use std::path::PathBuf;
use std::process::Command;

use vgpu_umd::capi::{self, lost, VgpuArg, VgpuContextState, VgpuDeviceProperties};

const PROBE: &str = r#"
#include <stdio.h>
#include <stddef.h>
#include "vgpu.h"
#define S(t) printf("sizeof %s %zu\n", #t, sizeof(t))
#define O(t, f) printf("offsetof %s.%s %zu\n", #t, #f, offsetof(t, f))
#define C(c) printf("const %s %llu\n", #c, (unsigned long long)(c))
int main(void) {
    S(vgpu_arg); O(vgpu_arg, kind); O(vgpu_arg, pad); O(vgpu_arg, v);
    S(vgpu_device_properties); O(vgpu_device_properties, generation); O(vgpu_device_properties, compute_units);
    O(vgpu_device_properties, engine_mask); O(vgpu_device_properties, page_sizes); O(vgpu_device_properties, va_bits);
    O(vgpu_device_properties, max_contexts); O(vgpu_device_properties, protocol_version);
    O(vgpu_device_properties, firmware_version); O(vgpu_device_properties, device_id); O(vgpu_device_properties, pad);
    S(vgpu_device_stats); O(vgpu_device_stats, sample_ns); O(vgpu_device_stats, engine_busy_ns); O(vgpu_device_stats, mem_bytes); O(vgpu_device_stats, mem_objects); O(vgpu_device_stats, pt_bytes); O(vgpu_device_stats, engine_resets); O(vgpu_device_stats, device_resets); O(vgpu_device_stats, hangs); O(vgpu_device_stats, faults); O(vgpu_device_stats, wedged); O(vgpu_device_stats, num_contexts);
    S(vgpu_context_state); O(vgpu_context_state, reason); O(vgpu_context_state, kmd_context);
    O(vgpu_context_state, fault_va); O(vgpu_context_state, fault_access); O(vgpu_context_state, hangs);
    S(vgpu_status); S(vgpu_context_t);
    C(VGPU_SUCCESS); C(VGPU_ERROR_INVALID_ARGUMENT); C(VGPU_ERROR_INVALID_HANDLE); C(VGPU_ERROR_NO_DEVICE);
    C(VGPU_ERROR_OUT_OF_MEMORY); C(VGPU_ERROR_NOT_FOUND); C(VGPU_ERROR_NOT_READY); C(VGPU_ERROR_INVALID_MODULE);
    C(VGPU_ERROR_CONTEXT_LOST); C(VGPU_ERROR_DEVICE_LOST); C(VGPU_ERROR_KMD); C(VGPU_ERROR_CONFIG);
    C(VGPU_LOST_NONE); C(VGPU_LOST_PAGE_FAULT); C(VGPU_LOST_HANG); C(VGPU_LOST_BANNED); C(VGPU_LOST_INNOCENT);
    C(VGPU_LOST_ENGINE_ERROR); C(VGPU_LOST_WEDGED); C(VGPU_LOST_REMOVED);
    C(VGPU_MEM_DEVICE_LOCAL); C(VGPU_MEM_HOST_VISIBLE);
    C(VGPU_PLACEMENT_SYSTEM); C(VGPU_PLACEMENT_VRAM); C(VGPU_PLACEMENT_VRAM_PREFERRED);
    C(VGPU_ARG_U32); C(VGPU_ARG_I32); C(VGPU_ARG_F32); C(VGPU_ARG_U64); C(VGPU_ARG_PTR);
    /* The union's members alias the low bytes (little endian). */
    vgpu_arg a = {0}; a.v.f32 = 2.5f; C(a.v.u64);
    return 0;
}
"#;

fn include_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("include")
}

fn compile_and_run(out: &str) -> String {
    let dir = std::env::temp_dir().join(format!("vgpu-capi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("probe.c");
    std::fs::write(&src, PROBE).unwrap();
    let exe = dir.join(out);
    let st = Command::new("cc")
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-I"])
        .arg(include_dir())
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .status()
        .expect("run cc");
    assert!(st.success(), "the probe does not compile against vgpu.h");
    let o = Command::new(&exe).output().unwrap();
    assert!(o.status.success());
    String::from_utf8(o.stdout).unwrap()
}

#[test]
fn header_matches_rust() {
    let out = compile_and_run("probe");
    let get = |key: &str| -> u64 {
        out.lines()
            .find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix(' ')))
            .unwrap_or_else(|| panic!("{key} missing from probe output"))
            .parse()
            .unwrap()
    };
    let sz = |t: &str| get(&format!("sizeof {t}")) as usize;
    let off = |t: &str, f: &str| get(&format!("offsetof {t}.{f}")) as usize;
    assert_eq!(sz("vgpu_arg"), size_of::<VgpuArg>());
    assert_eq!(off("vgpu_arg", "kind"), offset_of!(VgpuArg, kind));
    assert_eq!(off("vgpu_arg", "pad"), offset_of!(VgpuArg, pad));
    assert_eq!(off("vgpu_arg", "v"), offset_of!(VgpuArg, bits));
    type P = VgpuDeviceProperties;
    assert_eq!(sz("vgpu_device_properties"), size_of::<P>());
    for (f, o) in [
        ("generation", offset_of!(P, generation)),
        ("compute_units", offset_of!(P, compute_units)),
        ("engine_mask", offset_of!(P, engine_mask)),
        ("page_sizes", offset_of!(P, page_sizes)),
        ("va_bits", offset_of!(P, va_bits)),
        ("max_contexts", offset_of!(P, max_contexts)),
        ("protocol_version", offset_of!(P, protocol_version)),
        ("firmware_version", offset_of!(P, firmware_version)),
        ("device_id", offset_of!(P, device_id)),
        ("pad", offset_of!(P, pad)),
    ] {
        assert_eq!(off("vgpu_device_properties", f), o, "{f}");
    }
    type D = capi::VgpuDeviceStats;
    assert_eq!(sz("vgpu_device_stats"), size_of::<D>());
    for (f, o) in [
        ("sample_ns", offset_of!(D, sample_ns)),
        ("engine_busy_ns", offset_of!(D, engine_busy_ns)),
        ("mem_bytes", offset_of!(D, mem_bytes)),
        ("mem_objects", offset_of!(D, mem_objects)),
        ("pt_bytes", offset_of!(D, pt_bytes)),
        ("engine_resets", offset_of!(D, engine_resets)),
        ("device_resets", offset_of!(D, device_resets)),
        ("hangs", offset_of!(D, hangs)),
        ("faults", offset_of!(D, faults)),
        ("wedged", offset_of!(D, wedged)),
        ("num_contexts", offset_of!(D, num_contexts)),
    ] {
        assert_eq!(off("vgpu_device_stats", f), o, "{f}");
    }
    type S = VgpuContextState;
    assert_eq!(sz("vgpu_context_state"), size_of::<S>());
    for (f, o) in [
        ("reason", offset_of!(S, reason)),
        ("kmd_context", offset_of!(S, kmd_context)),
        ("fault_va", offset_of!(S, fault_va)),
        ("fault_access", offset_of!(S, fault_access)),
        ("hangs", offset_of!(S, hangs)),
    ] {
        assert_eq!(off("vgpu_context_state", f), o, "{f}");
    }
    assert_eq!(sz("vgpu_status"), size_of::<capi::Status>());
    assert_eq!(sz("vgpu_context_t"), 8);
    let c = |n: &str| get(&format!("const {n}"));
    for (n, v) in [
        ("VGPU_SUCCESS", capi::VGPU_SUCCESS),
        (
            "VGPU_ERROR_INVALID_ARGUMENT",
            capi::VGPU_ERROR_INVALID_ARGUMENT,
        ),
        ("VGPU_ERROR_INVALID_HANDLE", capi::VGPU_ERROR_INVALID_HANDLE),
        ("VGPU_ERROR_NO_DEVICE", capi::VGPU_ERROR_NO_DEVICE),
        ("VGPU_ERROR_OUT_OF_MEMORY", capi::VGPU_ERROR_OUT_OF_MEMORY),
        ("VGPU_ERROR_NOT_FOUND", capi::VGPU_ERROR_NOT_FOUND),
        ("VGPU_ERROR_NOT_READY", capi::VGPU_ERROR_NOT_READY),
        ("VGPU_ERROR_INVALID_MODULE", capi::VGPU_ERROR_INVALID_MODULE),
        ("VGPU_ERROR_CONTEXT_LOST", capi::VGPU_ERROR_CONTEXT_LOST),
        ("VGPU_ERROR_DEVICE_LOST", capi::VGPU_ERROR_DEVICE_LOST),
        ("VGPU_ERROR_KMD", capi::VGPU_ERROR_KMD),
        ("VGPU_ERROR_CONFIG", capi::VGPU_ERROR_CONFIG),
        ("VGPU_LOST_NONE", lost::NONE),
        ("VGPU_LOST_PAGE_FAULT", lost::PAGE_FAULT),
        ("VGPU_LOST_HANG", lost::HANG),
        ("VGPU_LOST_BANNED", lost::BANNED),
        ("VGPU_LOST_INNOCENT", lost::INNOCENT),
        ("VGPU_LOST_ENGINE_ERROR", lost::ENGINE_ERROR),
        ("VGPU_LOST_WEDGED", lost::WEDGED),
        ("VGPU_LOST_REMOVED", lost::REMOVED),
        ("VGPU_MEM_DEVICE_LOCAL", 0),
        ("VGPU_MEM_HOST_VISIBLE", 1),
        ("VGPU_PLACEMENT_SYSTEM", 0),
        ("VGPU_PLACEMENT_VRAM", 1),
        ("VGPU_PLACEMENT_VRAM_PREFERRED", 2),
    ] {
        assert_eq!(c(n), u64::from(v), "{n}");
    }
    for k in vgpu_isa::module::ArgKind::ALL {
        assert_eq!(
            c(&format!("VGPU_ARG_{}", k.name().to_uppercase())),
            k as u64,
            "{}",
            k.name()
        );
    }
    assert_eq!(c("a.v.u64"), u64::from(2.5f32.to_bits()), "union aliasing");
}

#[test]
fn header_compiles_as_cxx() {
    let dir = std::env::temp_dir().join(format!("vgpu-capi-cxx-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("probe.cc");
    std::fs::write(
        &src,
        "#include \"vgpu.h\"\nint main() { vgpu_arg a{}; return (int)a.kind; }\n",
    )
    .unwrap();
    let Ok(st) = Command::new("c++")
        .args(["-std=c++17", "-Wall", "-Werror", "-fsyntax-only", "-I"])
        .arg(include_dir())
        .arg(&src)
        .status()
    else {
        eprintln!("no C++ compiler: C++ check skipped");
        return;
    };
    assert!(st.success(), "vgpu.h does not compile as C++");
}
