//! The in-tree sources build into images the device accepts, carrying the
//! values the sources write; the alternative images differ and boot too;
//! broken sources are refused with one-line messages.

use vgpu_firmware::source::{Feature, PacketSet, Policy};
use vgpu_firmware::{
    alt_image_for, file_name, image_for, packets, source_for, Error, Source, GEN1_SOURCE,
    GEN2_SOURCE, GENERATIONS,
};
use vgpu_hwif::firmware::{feature, parse, section, FwError, FW_SECTION_REQUIRED};
use vgpu_hwif::limits::PROTOCOL_VERSION;
use vgpu_hwif::packet::{OPCODES, OP_COPY, OP_FENCE, OP_NOP};

#[test]
fn the_in_tree_sources_build_and_boot_on_their_generation() {
    for g in GENERATIONS {
        let image = image_for(g);
        let fw =
            parse(&image, g, PROTOCOL_VERSION).unwrap_or_else(|e| panic!("gen{g}: {}", e.text()));
        assert_eq!(fw.header.generations, 1 << (g - 1), "gen{g}");
        assert_eq!(fw.header.interface_min, PROTOCOL_VERSION);
        assert_eq!(fw.header.interface_max, PROTOCOL_VERSION);
        // Only on its own generation.
        let other = 3 - g;
        assert_eq!(
            parse(&image, other, PROTOCOL_VERSION).map(drop),
            Err(FwError::WrongGeneration)
        );
        // The required sections are flagged so; every known kind is there.
        let kinds: Vec<(u32, u32)> = fw.sections().map(|(s, _)| (s.kind, s.flags)).collect();
        assert_eq!(
            kinds,
            [
                (section::SCHED, FW_SECTION_REQUIRED),
                (section::PACKETS, FW_SECTION_REQUIRED),
                (section::HEARTBEAT, 0),
                (section::LOG, 0),
                (section::NOTES, 0),
            ]
        );
        // "all": every opcode, on both generations.
        let p = fw.packets().unwrap();
        for op in OPCODES {
            assert!(
                packets::has(&p.gen1, op) && packets::has(&p.gen2, op),
                "{op}"
            );
        }
        assert_eq!(p.gen1, packets::all(1));
        assert_eq!(p.gen2, packets::all(2));
        // The built-in image is the source, built; it is stable.
        assert_eq!(image, image_for(g));
        assert_eq!(file_name(g), format!("vgpu/gen{g}.fw"));
    }
}

#[test]
fn the_images_carry_the_sources_values() {
    let g2 = image_for(2);
    let fw = parse(&g2, 2, PROTOCOL_VERSION).unwrap();
    assert_eq!(fw.header.version, 0x02_01_00);
    assert_eq!(
        fw.header.features,
        feature::USER_QUEUES | feature::PREEMPTION
    );
    let s = fw.sched().unwrap();
    assert_eq!(s.slice_us, [1000, 2000, 4000]);
    assert_eq!((s.preempt_timeout_us, s.policy), (10_000, 0));
    assert_eq!(fw.heartbeat_ms(), Some(100));
    assert_eq!(fw.log_size(), Some(16384));
    let build: Vec<u8> = fw
        .header
        .build
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .collect();
    assert_eq!(&build[..], b"vgpu-gen2-2.1.0\0");

    let g1 = image_for(1);
    let fw = parse(&g1, 1, PROTOCOL_VERSION).unwrap();
    assert_eq!(fw.header.version, 0x01_03_00);
    assert_eq!(
        fw.header.features,
        feature::USER_QUEUES | feature::PREEMPTION
    );
    let s = fw.sched().unwrap();
    assert_eq!(s.slice_us, [2000, 4000, 8000]);
    assert_eq!((s.preempt_timeout_us, s.policy), (20_000, 0));
    assert_eq!(fw.heartbeat_ms(), Some(250));
    assert_eq!(fw.log_size(), Some(8192));

    let src = source_for(1);
    assert_eq!(src.features, [Feature::UserQueues, Feature::Preemption]);
    assert_eq!(src.sched.policy, Policy::Priority);
    assert_eq!(src.packets.gen1, PacketSet::all());
}

#[test]
fn the_alternative_images_differ_and_boot() {
    for g in GENERATIONS {
        let (image, alt) = (image_for(g), alt_image_for(g));
        assert_ne!(image, alt);
        let a = parse(&image, g, PROTOCOL_VERSION).unwrap();
        let b = parse(&alt, g, PROTOCOL_VERSION).unwrap();
        assert_eq!(b.header.version, a.header.version + 1, "patch + 1");
        assert_eq!(b.header.features & feature::USER_QUEUES, 0);
        assert_eq!(b.header.features, a.header.features & !feature::USER_QUEUES);
        let (sa, sb) = (a.sched().unwrap(), b.sched().unwrap());
        for i in 0..3 {
            assert_eq!(sb.slice_us[i], sa.slice_us[i] / 2);
        }
        let build: Vec<u8> = b
            .header
            .build
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect();
        let id = String::from_utf8(build).unwrap();
        let id = id.trim_end_matches('\0');
        assert!(
            id.ends_with("-alt") && id.starts_with(&format!("gen{g}-")),
            "{id}"
        );
    }
}

#[test]
fn a_source_reads_back_as_written() {
    for text in [GEN1_SOURCE, GEN2_SOURCE] {
        let src = Source::parse(text).unwrap();
        let again = Source::parse(&toml::to_string(&src).unwrap()).unwrap();
        assert_eq!(again, src);
        assert_eq!(again.image().unwrap(), src.image().unwrap());
    }
}

#[test]
fn opcode_lists_and_optional_sections() {
    // Without notes, heartbeat and log; gen 2 with a list (any case).
    let optional = ["notes", "[heartbeat]", "period_ms", "[log]", "size"];
    let text: String = edited(r#"gen2 = "all""#, r#"gen2 = ["nop", "FENCE", "COPY"]"#)
        .lines()
        .filter(|l| !optional.iter().any(|o| l.starts_with(o)))
        .map(|l| format!("{l}\n"))
        .collect();
    let image = Source::parse(&text).unwrap().image().unwrap();
    let fw = parse(&image, 2, PROTOCOL_VERSION).unwrap();
    let p = fw.packets().unwrap();
    let mut want = [0u32; 8];
    for op in [OP_NOP, OP_FENCE, OP_COPY] {
        packets::set(&mut want, op);
    }
    assert_eq!(p.gen2, want);
    assert_eq!(p.gen1, packets::all(1));
    assert_eq!(fw.heartbeat_ms(), None);
    assert_eq!(fw.log_size(), None);
    assert_eq!(fw.section(section::NOTES), None);
    assert_eq!(fw.sections().count(), 2);
}

/// The gen-2 source with `from` replaced by `to` (which must occur).
fn edited(from: &str, to: &str) -> String {
    assert!(GEN2_SOURCE.contains(from), "{from}");
    GEN2_SOURCE.replacen(from, to, 1)
}

#[test]
fn broken_sources_are_refused() {
    let refused = |what: &str, text: &str| -> Error {
        let e = Source::parse(text).expect_err(what);
        assert!(!e.to_string().contains('\n'), "{what}: {e}");
        e
    };
    // Unknown keys, at the top and in a table.
    let e = refused("unknown key", &format!("colour = \"red\"\n{GEN2_SOURCE}"));
    assert!(
        matches!(&e, Error::Toml { line: 1, message, .. } if message.contains("colour")),
        "{e}"
    );
    let e = refused(
        "unknown key in sched",
        &edited("policy = ", "quantum = 5\npolicy = "),
    );
    assert!(e.to_string().contains("quantum"), "{e}");
    let e = refused(
        "unknown slice",
        &edited("high = 4000", "high = 4000, idle = 1"),
    );
    assert!(e.to_string().contains("idle"), "{e}");
    // A required key missing.
    let e = refused("no build", &edited("build = \"vgpu-gen2-2.1.0\"", ""));
    assert!(e.to_string().contains("build"), "{e}");
    refused("no sched", &edited("[sched]", "[scheduler]"));
    // Versions.
    for v in [
        "2.1", "2.1.0.0", "2.256.0", "2.x.0", "", "2..0", "+2.1.0", "-1.0.0",
    ] {
        let e = refused(
            v,
            &edited("version = \"2.1.0\"", &format!("version = \"{v}\"")),
        );
        assert_eq!(e, Error::Version(v.into()));
    }
    let e = refused("interface", &edited("min = \"0.2\"", "min = \"0\""));
    assert_eq!(e, Error::Interface("0".into()));
    let e = refused("interface", &edited("max = \"0.2\"", "max = \"0.1\""));
    assert!(matches!(e, Error::InterfaceRange { .. }), "{e}");
    // Slices, log, heartbeat.
    let e = refused("zero slice", &edited("normal = 2000", "normal = 0"));
    assert_eq!(e, Error::ZeroSlice("normal"));
    refused("negative slice", &edited("low = 1000", "low = -1"));
    refused("slice too big", &edited("low = 1000", "low = 4294967296"));
    for size in [16000, 2048, 2 << 20, 0] {
        let e = refused("log", &edited("size = 16384", &format!("size = {size}")));
        assert_eq!(e, Error::LogSize(size));
    }
    assert!(Source::parse(&edited("size = 16384", "size = 4096")).is_ok());
    assert!(Source::parse(&edited("size = 16384", "size = 1048576")).is_ok());
    let e = refused("heartbeat", &edited("period_ms = 100", "period_ms = 10001"));
    assert_eq!(e, Error::Heartbeat(10_001));
    assert!(Source::parse(&edited("period_ms = 100", "period_ms = 0")).is_ok());
    assert!(Source::parse(&edited("period_ms = 100", "period_ms = 10000")).is_ok());
    // Names and ids.
    refused("feature", &edited("\"preemption\"]", "\"warp-drive\"]"));
    refused(
        "policy",
        &edited("policy = \"priority\"", "policy = \"fifo\""),
    );
    let e = refused(
        "opcode",
        &edited("gen2 = \"all\"", "gen2 = [\"NOP\", \"JUMP\"]"),
    );
    assert_eq!(
        e,
        Error::Opcode {
            generation: 2,
            name: "JUMP".into()
        }
    );
    let e = refused("word", &edited("gen1 = \"all\"", "gen1 = \"most\""));
    assert!(matches!(e, Error::PacketWord { generation: 1, .. }), "{e}");
    let e = refused(
        "build",
        &edited("\"vgpu-gen2-2.1.0\"", "\"vgpu-gen2-2.1.0-x\""),
    );
    assert_eq!(e, Error::Build("vgpu-gen2-2.1.0-x".into()));
    refused("build", &edited("\"vgpu-gen2-2.1.0\"", "\"vgpu\\u0000\""));
    assert_eq!(
        refused("gen", &edited("generations = [2]", "generations = [3]")),
        Error::Generation(3)
    );
    assert_eq!(
        refused("gen", &edited("generations = [2]", "generations = []")),
        Error::NoGeneration
    );
    // Notes that do not fit 64 KiB.
    let long = "x".repeat(70_000);
    let e = refused("notes", &edited("notes = \"", &format!("notes = \"{long}")));
    assert_eq!(e, Error::Image(FwError::TooLarge));
    // Not TOML at all.
    let e = refused("garbage", "version = ");
    assert!(matches!(e, Error::Toml { line: 1, .. }), "{e}");
}
