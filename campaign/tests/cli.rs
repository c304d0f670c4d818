//! The `vgpu-campaign` command line without a VM.

use std::process::{Command, Stdio};

/// `vgpu-campaign list` into a pipe whose reader has gone (as after
/// `| head -1`): the lines are dropped, the listing ends normally, and
/// nothing panics. (The campaign keeps SIGPIPE ignored: it must see EPIPE
/// from a dead VM's console, not die of it.)
#[test]
fn listing_into_a_closed_pipe_is_quiet() {
    let campaign = concat!(env!("CARGO_MANIFEST_DIR"), "/../campaigns/default.toml");
    let (reader, writer) = std::io::pipe().unwrap();
    // Closed before the tool starts: its every write fails with EPIPE.
    drop(reader);
    let out = Command::new(env!("CARGO_BIN_EXE_vgpu-campaign"))
        .args(["list", campaign])
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}: {err}", out.status);
    assert!(!err.contains("panicked"), "{err}");
    // The same listing into a live pipe has lines (so the one above had
    // something to drop).
    let live = Command::new(env!("CARGO_BIN_EXE_vgpu-campaign"))
        .args(["list", campaign])
        .output()
        .unwrap();
    assert!(live.status.success());
    assert!(String::from_utf8_lossy(&live.stdout).lines().count() > 10);
}
