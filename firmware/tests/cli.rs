//! `vgpu-fw`: install writes the images (and the test ones), info's exit
//! status says whether an image boots, build turns a source into an image,
//! and bad usage or I/O fails with status 2 and one line.

use std::path::Path;
use std::process::{Command, Output};

use vgpu_firmware::{
    alt_image_for, corrupt, image_for, next_major_image_for, oldest_minor_image_for, Corruption,
    GEN2_SOURCE, GENERATIONS,
};

fn vgpu_fw(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vgpu-fw"))
        .args(args)
        .output()
        .unwrap()
}

fn status(o: &Output) -> i32 {
    o.status.code().unwrap()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn install_bad_writes_every_image_and_info_judges_them() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let out = vgpu_fw(&["install", s(d), "--bad"]);
    assert_eq!(status(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let mut want = Vec::new();
    for g in GENERATIONS {
        want.push((d.join(format!("gen{g}.fw")), image_for(g)));
        for c in Corruption::ALL {
            let name = format!("test/gen{g}-{}.fw", c.name());
            want.push((d.join(name), corrupt(&image_for(g), c)));
        }
        want.push((d.join(format!("test/gen{g}-alt.fw")), alt_image_for(g)));
        let next = next_major_image_for(g);
        want.push((d.join(format!("test/gen{g}-next-major.fw")), next));
        let oldest = oldest_minor_image_for(g);
        want.push((d.join(format!("test/gen{g}-oldest-minor.fw")), oldest));
    }
    // One line per file, each naming it.
    assert_eq!(stdout.lines().count(), want.len(), "{stdout}");
    for (path, bytes) in &want {
        assert_eq!(&std::fs::read(path).unwrap(), bytes, "{}", path.display());
        assert!(
            stdout.contains(s(path)),
            "{} not in\n{stdout}",
            path.display()
        );
    }
    // Nothing else.
    assert_eq!(std::fs::read_dir(d).unwrap().count(), 3);
    assert_eq!(std::fs::read_dir(d.join("test")).unwrap().count(), 2 * 12);

    // info: 0 on a good image, 1 on a refused one.
    for g in GENERATIONS {
        let good = vgpu_fw(&["info", s(&d.join(format!("gen{g}.fw")))]);
        assert_eq!(status(&good), 0);
        assert!(String::from_utf8_lossy(&good.stdout).contains("verdict:     ok"));
        let alt = vgpu_fw(&["info", s(&d.join(format!("test/gen{g}-alt.fw")))]);
        assert_eq!(status(&alt), 0);
        // The next major version: a device boots it (the driver refuses it).
        let next = vgpu_fw(&["info", s(&d.join(format!("test/gen{g}-next-major.fw")))]);
        assert_eq!(status(&next), 0);
        assert!(String::from_utf8_lossy(&next.stdout).contains(&format!("{}.0.0", g + 1)));
        let oldest = vgpu_fw(&["info", s(&d.join(format!("test/gen{g}-oldest-minor.fw")))]);
        assert_eq!(status(&oldest), 0);
        assert!(String::from_utf8_lossy(&oldest.stdout).contains(&format!("{g}.0.0")));
        for c in Corruption::ALL {
            let f = d.join(format!("test/gen{g}-{}.fw", c.name()));
            let o = vgpu_fw(&["info", s(&f)]);
            assert_eq!(status(&o), 1, "{}", f.display());
            let text = String::from_utf8_lossy(&o.stdout);
            let e = c.expected();
            assert!(
                text.contains(&format!("{} (error {}", e.text(), e as u32)),
                "{text}"
            );
        }
    }
    // Without --gen, a file not named gen{N}… is judged by the generation
    // its header names: the wrong-generation image boots on generation 2.
    let renamed = d.join("image.fw");
    std::fs::copy(d.join("test/gen1-wrong-generation.fw"), &renamed).unwrap();
    assert_eq!(status(&vgpu_fw(&["info", s(&renamed)])), 0);
    assert_eq!(status(&vgpu_fw(&["info", s(&renamed), "--gen", "1"])), 1);
    // As another generation's device, or a newer driver, sees it.
    let gen2 = d.join("gen2.fw");
    assert_eq!(status(&vgpu_fw(&["info", s(&gen2), "--gen", "1"])), 1);
    assert_eq!(status(&vgpu_fw(&["info", s(&gen2), "--gen", "2"])), 0);
    assert_eq!(
        status(&vgpu_fw(&["info", s(&gen2), "--interface", "0.3"])),
        1
    );
    assert_eq!(
        status(&vgpu_fw(&["info", s(&gen2), "--interface", "0.2"])),
        0
    );
}

#[test]
fn install_without_bad_writes_the_two_images() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("lib/firmware/vgpu");
    let out = vgpu_fw(&["install", s(&d)]);
    assert_eq!(status(&out), 0);
    assert_eq!(String::from_utf8(out.stdout).unwrap().lines().count(), 2);
    for g in GENERATIONS {
        assert_eq!(
            std::fs::read(d.join(format!("gen{g}.fw"))).unwrap(),
            image_for(g)
        );
    }
    assert!(!d.join("test").exists());
}

#[test]
fn build_turns_a_source_into_its_image() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("gen2.toml");
    std::fs::write(&src, GEN2_SOURCE).unwrap();
    let out = dir.path().join("gen2.fw");
    let o = vgpu_fw(&["build", s(&src), "-o", s(&out)]);
    assert_eq!(status(&o), 0, "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(std::fs::read(&out).unwrap(), image_for(2));

    // A broken source: status 2, one line naming the file and the problem.
    std::fs::write(&src, GEN2_SOURCE.replace("normal = 2000", "normal = 0")).unwrap();
    let o = vgpu_fw(&["build", s(&src), "-o", s(&out)]);
    assert_eq!(status(&o), 2);
    let err = String::from_utf8(o.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("gen2.toml") && err.contains("slice_us.normal"),
        "{err}"
    );
}

#[test]
fn usage_and_io_errors_exit_2_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.fw");
    let file = dir.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    for args in [
        vec!["info", s(&missing)],
        vec!["info"],
        vec!["frobnicate"],
        vec!["info", s(&file), "--gen", "3"],
        vec!["info", s(&file), "--interface", "2"],
        vec!["build", s(&missing), "-o", s(&file)],
        vec!["install", s(&file)],
    ] {
        let o = vgpu_fw(&args);
        assert_eq!(status(&o), 2, "{args:?}");
        let err = String::from_utf8(o.stderr).unwrap();
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("vgpu-fw: "), "{err}");
    }
    // Help shows the examples.
    let o = vgpu_fw(&["--help"]);
    assert_eq!(status(&o), 0);
    let help = String::from_utf8(o.stdout).unwrap();
    assert!(help.contains("Examples:") && help.contains("vgpu-fw install /lib/firmware/vgpu"));
}
