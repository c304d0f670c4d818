//! The guest tools that run without a GPU (`vgpu-dump` on a dump file).

use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};

use vgpu_hwif::packet::Packet;
use vgpu_umd::cmdbuf::{DumpRecord, DUMP_MAGIC};

/// SIGPIPE's number on Linux.
const SIGPIPE: i32 = 13;

/// `vgpu-dump` into a pipe whose reader has gone (as after `| head -1`):
/// the kernel ends the tool with SIGPIPE at its first write, quietly, as
/// it ends other tools, instead of a "failed printing to stdout" panic.
#[test]
fn dump_into_a_closed_pipe_ends_quietly() {
    let dir = std::env::temp_dir().join(format!("vgpu-dump-pipe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("dump");
    let mut bytes = DUMP_MAGIC.to_vec();
    for index in 0..4 {
        let mut words = [0u32; 3];
        let n = Packet::Timestamp { va: 8 }.encode(2, &mut words).unwrap();
        DumpRecord {
            generation: 2,
            ctx_id: 1,
            engine: 0,
            index,
            va: 0x10_0000,
            words: words[..n].to_vec(),
        }
        .write_to(&mut bytes)
        .unwrap();
    }
    std::fs::write(&file, bytes).unwrap();
    let run = |stdout: Stdio| {
        Command::new(env!("CARGO_BIN_EXE_vgpu-dump"))
            .arg(&file)
            .stdout(stdout)
            .stderr(Stdio::piped())
            .output()
            .unwrap()
    };
    let live = run(Stdio::piped());
    assert!(live.status.success());
    assert!(String::from_utf8_lossy(&live.stdout).starts_with("cmdbuf 0: gen 2 ctx 1 engine copy"));
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = run(Stdio::from(writer));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.signal(),
        Some(SIGPIPE),
        "{:?}: {err}",
        out.status
    );
    assert!(err.is_empty(), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}
