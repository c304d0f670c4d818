//! The `vgpu-as` command line: asm, dis, inspect and run.

use std::process::Command;

fn vgpu_as(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_vgpu-as"))
        .args(args)
        .output()
        .expect("run vgpu-as");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn asm_dis_inspect_run() {
    let dir = std::env::temp_dir().join(format!("vgpu-as-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let sample = concat!(env!("CARGO_MANIFEST_DIR"), "/samples/saxpy.s");
    let bin = dir.join("saxpy.vgpu");
    let bin_s = bin.to_str().unwrap();
    let (ok, _, err) = vgpu_as(&["asm", sample, "-o", bin_s, "--gen", "2"]);
    assert!(ok, "{err}");

    let (ok, text, _) = vgpu_as(&["inspect", bin_s]);
    assert!(ok);
    assert!(text.contains("generation   2"), "{text}");
    assert!(text.contains("kernel saxpy"), "{text}");
    assert!(text.contains("ptr  x"), "{text}");

    let (ok, dis, _) = vgpu_as(&["dis", bin_s]);
    assert!(ok);
    let src2 = dir.join("again.s");
    std::fs::write(&src2, &dis).unwrap();
    let bin2 = dir.join("again.vgpu");
    let (ok, _, err) = vgpu_as(&[
        "asm",
        src2.to_str().unwrap(),
        "-o",
        bin2.to_str().unwrap(),
        "--gen",
        "2",
    ]);
    assert!(ok, "{err}");
    assert_eq!(std::fs::read(&bin).unwrap(), std::fs::read(&bin2).unwrap());

    let (ok, out, err) = vgpu_as(&[
        "run",
        bin_s,
        "--kernel",
        "saxpy",
        "--grid",
        "1",
        "--arg",
        "n=5",
        "--arg",
        "alpha=2",
        "--arg",
        "x=f32:5:iota",
        "--arg",
        "y=f32:5:1",
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("completed"), "{out}");
    assert!(out.contains("y @ 0x"), "{out}");
    assert!(out.contains("[1, 3, 5, 7, 9]"), "{out}");

    // A corrupt module is rejected with the loader's error.
    let mut bytes = std::fs::read(&bin).unwrap();
    bytes[0] = b'X';
    let bad = dir.join("bad.vgpu");
    std::fs::write(&bad, &bytes).unwrap();
    let (ok, _, err) = vgpu_as(&["inspect", bad.to_str().unwrap()]);
    assert!(!ok);
    assert!(err.contains("bad magic"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
