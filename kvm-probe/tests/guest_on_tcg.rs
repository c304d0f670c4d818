//! The probe guest on an x86 that is not KVM: QEMU's TCG with `-cpu max`
//! (which has XSAVE and AVX). Its progress codes go to QEMU's debugcon
//! (port 0xe9) instead of port 0x80, and a small firmware image puts it
//! where the probe does (GDT at 0x500, code at 0x1000, CS = 0). It must
//! walk every step to DONE: a wrong encoding in the guest would make the
//! probe call a working KVM unusable, and this host's KVM cannot show it.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use vgpu_kvm_probe::guest::{self, code, Program};

const ROM_SIZE: usize = 0x10000;
/// Where in the ROM the copy of guest memory 0x500.. lies.
const PAYLOAD: usize = 0x100;

/// A 64 KiB firmware image: at the reset vector a far jump to F000:0000,
/// which copies the payload (guest memory from the GDT to the end of the
/// code) to 0x500 and jumps to 0000:1000 with DS = 0.
fn firmware(port: u8) -> Vec<u8> {
    let (gdt, desc) = guest::gdt();
    let code = guest::program_for_port(Program::Xsave, port);
    let base = guest::GDT_ADDR as usize;
    let mut image = vec![0u8; guest::CODE_ADDR as usize - base + code.len()];
    image[..gdt.len()].copy_from_slice(&gdt);
    let d = guest::GDT_DESC_ADDR as usize - base;
    image[d..d + desc.len()].copy_from_slice(&desc);
    let c = guest::CODE_ADDR as usize - base;
    image[c..].copy_from_slice(&code);

    let mut rom = vec![0u8; ROM_SIZE];
    let len = u16::try_from(image.len()).unwrap();
    let mut pre = vec![
        0xfa, // cli
        0x31,
        0xc0, // xor ax, ax
        0x8e,
        0xc0, // mov es, ax
        0xb8,
        0x00,
        0xf0, // mov ax, 0xf000
        0x8e,
        0xd8, // mov ds, ax
        0xbe,
        PAYLOAD as u8,
        (PAYLOAD >> 8) as u8, // mov si, PAYLOAD
        0xbf,
        base as u8,
        (base >> 8) as u8, // mov di, 0x500
        0xb9,
        len as u8,
        (len >> 8) as u8, // mov cx, len
        0xfc,             // cld
        0xf3,
        0xa4, // rep movsb
        0x31,
        0xc0, // xor ax, ax
        0x8e,
        0xd8, // mov ds, ax
    ];
    pre.extend_from_slice(&[0xea, 0x00, 0x10, 0x00, 0x00]); // jmp far 0000:1000
    assert!(pre.len() <= PAYLOAD);
    rom[..pre.len()].copy_from_slice(&pre);
    rom[PAYLOAD..PAYLOAD + image.len()].copy_from_slice(&image);
    // Reset vector (F000:FFF0): jmp far F000:0000.
    rom[0xfff0..0xfff5].copy_from_slice(&[0xea, 0x00, 0x00, 0x00, 0xf0]);
    rom
}

fn qemu() -> Option<String> {
    let q = "qemu-system-x86_64";
    Command::new(q)
        .arg("--version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|_| q.to_owned())
}

#[test]
fn the_probe_guest_runs_to_done_under_tcg() {
    let Some(q) = qemu() else {
        eprintln!("skipped: no qemu-system-x86_64 in PATH (scripts/setup-host installs it)");
        return;
    };
    let dir = std::env::temp_dir().join(format!("kvm-probe-tcg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let rom = dir.join("probe.rom");
    let out = dir.join("debugcon.bin");
    std::fs::write(&rom, firmware(0xe9)).unwrap();
    let mut child = Command::new(q)
        .args([
            "-machine", "q35", "-accel", "tcg", "-cpu", "max", "-m", "16M",
        ])
        .args(["-display", "none", "-nodefaults", "-no-reboot"])
        .arg("-bios")
        .arg(&rom)
        .arg("-debugcon")
        .arg(format!("file:{}", out.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let finals = [code::DONE, code::DONE_NO_XSAVE, code::RESTORE_MISMATCH];
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut exited = None;
    let codes = loop {
        let codes = std::fs::read(&out).unwrap_or_default();
        if codes.iter().any(|c| finals.contains(c)) || Instant::now() > deadline {
            break codes;
        }
        if let Some(s) = child.try_wait().unwrap() {
            exited = Some(s);
            break std::fs::read(&out).unwrap_or_default();
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let _ = child.kill();
    let o = child.wait_with_output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        codes,
        vec![
            code::REAL_MODE,
            code::PROTECTED,
            code::CPUID,
            code::OSXSAVE,
            code::XSETBV,
            code::XSAVE,
            code::XRSTOR,
            code::DONE
        ],
        "progress codes from the probe guest under TCG (QEMU exited: {exited:?}; stderr: {})",
        String::from_utf8_lossy(&o.stderr)
    );
}
