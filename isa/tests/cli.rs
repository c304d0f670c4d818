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

/// `vgpu-as dis big.s | head -1`: the reader leaves after one line and
/// vgpu-as ends quietly (killed by SIGPIPE at its next write, as other
/// tools are) instead of panicking with "failed printing to stdout".
#[test]
fn a_closed_pipe_ends_the_tool_quietly() {
    use std::os::unix::process::ExitStatusExt;
    use std::process::Stdio;
    let dir = std::env::temp_dir().join(format!("vgpu-as-pipe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // About 600 KiB of disassembly: far more than a pipe holds.
    let mut src = String::from(".kernel big\n");
    for _ in 0..20_000 {
        src.push_str("    add r0, r0, 1\n");
    }
    src.push_str("    exit\n.end\n");
    let file = dir.join("big.s");
    std::fs::write(&file, src).unwrap();
    let mut tool = Command::new(env!("CARGO_BIN_EXE_vgpu-as"))
        .arg("dis")
        .arg(&file)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let head = Command::new("head")
        .arg("-1")
        .stdin(tool.stdout.take().unwrap())
        .output()
        .unwrap();
    let out = tool.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(String::from_utf8_lossy(&head.stdout).lines().count(), 1);
    assert!(
        out.status.success() || out.status.signal() == Some(SIGPIPE),
        "{:?}: {err}",
        out.status
    );
    assert!(
        !err.contains("panicked") && !err.contains("Broken pipe"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

fn vecadd(extra: &[&str], n: &str) -> (bool, String, String) {
    let sample = concat!(env!("CARGO_MANIFEST_DIR"), "/samples/vecadd.s");
    let mut args = vec![
        "run",
        sample,
        "--kernel",
        "vecadd",
        "--arg",
        n,
        "--arg",
        "a=f32:64:iota",
        "--arg",
        "b=f32:64:1",
        "--arg",
        "c=f32:64",
    ];
    args.extend_from_slice(extra);
    vgpu_as(&args)
}

/// An overrun by one element (n = 65 over buffers of 64) stays inside the
/// buffers' 64 KiB pages: the default run completes, `--strict-bounds`
/// reports the first access past the end and names the buffer.
#[test]
fn strict_bounds_reports_an_overrun_by_one_element() {
    for jit in ["off", "auto"] {
        let (ok, out, err) = vecadd(&["--jit", jit], "n=64");
        assert!(ok, "{err}");
        assert!(out.starts_with("completed"), "{out}");

        let (ok, out, err) = vecadd(&["--jit", jit], "n=65");
        assert!(ok, "the default is page-granular: {out}{err}");
        assert!(out.starts_with("completed"), "{out}");

        let (ok, out, err) = vecadd(&["--jit", jit, "--strict-bounds"], "n=64");
        assert!(ok, "in bounds under --strict-bounds: {out}{err}");

        let (ok, out, _) = vecadd(&["--jit", jit, "--strict-bounds"], "n=65");
        assert!(!ok, "{out}");
        let first = out.lines().next().unwrap();
        assert!(first.starts_with("fault in workgroup [0, 0, 0]"), "{out}");
        // Lane 64 is lane 0 of warp 2; it reads a[64] first.
        assert!(first.contains("warp 2, lane 0"), "{out}");
        assert!(first.contains("read of 0x100000100: OutOfBounds"), "{out}");
        assert!(
            out.contains(
                "strict bounds: 0x100000100 is 0 bytes past the end of buffer a \
                 (256 bytes at 0x100000000, element 64 of 64)"
            ),
            "{out}"
        );
    }
}

/// `rand` follows `--seed`: the same seed gives the same buffers, another
/// seed others; values are in the documented ranges; seed 0 is refused.
#[test]
fn rand_is_seeded_and_in_range() {
    let sample = concat!(env!("CARGO_MANIFEST_DIR"), "/samples/vecadd.s");
    let run = |seed: Option<&str>| {
        let mut args = vec![
            "run",
            sample,
            "--kernel",
            "vecadd",
            "--arg",
            "n=0",
            "--arg",
            "a=f32:200:rand",
            "--arg",
            "b=i32:200:rand",
            "--show",
            "0",
        ];
        if let Some(s) = seed {
            args.extend_from_slice(&["--seed", s]);
        }
        let (ok, out, err) = vgpu_as(&args);
        assert!(ok, "{err}");
        // The buffers (line 2 has the run's time).
        out.lines().skip(2).collect::<Vec<_>>().join("\n")
    };
    let default = run(None);
    assert_eq!(default, run(Some("0x2545f4914f6cdd1d")));
    let other = run(Some("42"));
    assert_eq!(other, run(Some("42")));
    assert_ne!(default, other);
    let values = |out: &str, name: &str| -> Vec<f64> {
        let line = out.lines().find(|l| l.starts_with(name)).unwrap();
        let list = &line[line.find('[').unwrap() + 1..line.rfind(']').unwrap()];
        list.split(", ").map(|v| v.parse().unwrap()).collect()
    };
    let f = values(&other, "a @ 0x100000000: ");
    assert_eq!(f.len(), 200);
    assert!(f.iter().all(|&v| (0.0..1.0).contains(&v)), "{f:?}");
    // The second buffer: one 64 KiB page for the first and a guard page.
    let i = values(&other, "b @ 0x100020000: ");
    assert!(
        i.iter().any(|&v| v < 0.0) && i.iter().any(|&v| v > 2.0e9),
        "{i:?}"
    );
    assert!(
        i.iter().all(|&v| v != i32::MAX as f64),
        "no saturation: {i:?}"
    );

    let (ok, _, err) = vgpu_as(&["run", sample, "--kernel", "vecadd", "--seed", "0"]);
    assert!(!ok);
    assert!(err.contains("non-zero"), "{err}");
}

/// `asm` and `run` default to the same generation (2): a kernel with
/// warp instructions assembles without `--gen`, and `--gen 1` refuses it.
#[test]
fn asm_defaults_to_generation_2_like_run() {
    let dir = std::env::temp_dir().join(format!("vgpu-as-gen-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("vote.s");
    std::fs::write(&src, ".kernel k\n    vote.ballot r0, pt\n    exit\n.end\n").unwrap();
    let out = dir.join("vote.vgpu");
    let (src, out) = (src.to_str().unwrap(), out.to_str().unwrap());
    let (ok, _, err) = vgpu_as(&["asm", src, "-o", out]);
    assert!(ok, "{err}");
    let (ok, text, _) = vgpu_as(&["inspect", out]);
    assert!(ok && text.contains("generation   2"), "{text}");
    let (ok, _, _) = vgpu_as(&["asm", src, "-o", out, "--gen", "1"]);
    assert!(!ok);
    let saxpy = concat!(env!("CARGO_MANIFEST_DIR"), "/samples/saxpy.s");
    let (ok, _, err) = vgpu_as(&["asm", saxpy, "-o", out, "--gen", "1"]);
    assert!(ok, "{err}");
    let (ok, text, _) = vgpu_as(&["inspect", out]);
    assert!(ok && text.contains("generation   1"), "{text}");
    std::fs::remove_dir_all(&dir).ok();
}

/// SIGPIPE's number on Linux.
const SIGPIPE: i32 = 13;
