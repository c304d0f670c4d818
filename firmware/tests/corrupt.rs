//! Each corruption breaks exactly one thing: a device of the image's
//! generation refuses it with exactly the corruption's error, and where the
//! CRC was made right again, undoing that one thing makes it boot.

use vgpu_firmware::corrupt::UNKNOWN_KIND;
use vgpu_firmware::{
    alt_image_for, check, corrupt, describe, image_for, verdict, Corruption, GENERATIONS,
};
use vgpu_hwif::firmware::{image_crc, parse, FwError, FW_MAX_SIZE, FW_SECTION_REQUIRED};
use vgpu_hwif::limits::PROTOCOL_VERSION;

#[test]
fn each_corruption_gives_its_error() {
    for g in GENERATIONS {
        for image in [image_for(g), alt_image_for(g)] {
            for c in Corruption::ALL {
                let bad = corrupt(&image, c);
                assert_ne!(bad, image, "{}", c.name());
                assert_eq!(
                    parse(&bad, g, PROTOCOL_VERSION).map(drop),
                    Err(c.expected()),
                    "gen{g} {}",
                    c.name()
                );
                assert_eq!(check(&bad, Some(g), PROTOCOL_VERSION), Err(c.expected()));
                if c != Corruption::WrongGeneration {
                    // The generation the header names is the image's own.
                    assert_eq!(check(&bad, None, PROTOCOL_VERSION), Err(c.expected()));
                }
            }
        }
    }
}

#[test]
fn corruptions_are_named_and_cover_every_load_error() {
    let names: Vec<&str> = Corruption::ALL.iter().map(|c| c.name()).collect();
    assert_eq!(
        names,
        [
            "truncated",
            "bad-magic",
            "bad-format",
            "bad-checksum",
            "bad-section",
            "unknown-section",
            "wrong-generation",
            "version-mismatch",
            "too-large"
        ]
    );
    for c in Corruption::ALL {
        assert_eq!(Corruption::from_name(c.name()), Some(c));
        assert!(!c.what().is_empty());
    }
    // Every error an image can cause (all but the boot timeout), once.
    let errors: Vec<FwError> = Corruption::ALL.iter().map(|c| c.expected()).collect();
    let want: Vec<FwError> = FwError::ALL
        .into_iter()
        .filter(|e| *e != FwError::Timeout)
        .collect();
    assert_eq!(errors, want);
}

#[test]
fn only_one_thing_is_broken() {
    let pv = PROTOCOL_VERSION;
    for g in GENERATIONS {
        let image = image_for(g);
        let other = 3 - g;
        let bad = |c| corrupt(&image, c);
        // The CRC was fixed: these check out up to their one fault.
        for c in [
            Corruption::BadMagic,
            Corruption::BadFormat,
            Corruption::BadSection,
            Corruption::UnknownSection,
            Corruption::WrongGeneration,
            Corruption::VersionMismatch,
            Corruption::TooLarge,
        ] {
            let b = bad(c);
            assert_eq!(
                image_crc(&b),
                u32::from_le_bytes(b[36..40].try_into().unwrap()),
                "{}",
                c.name()
            );
        }
        // The CRC was not fixed: only it is wrong.
        let b = bad(Corruption::BadChecksum);
        assert_eq!(b.len(), image.len());
        assert_eq!(b.iter().zip(&image).filter(|(x, y)| x != y).count(), 1);
        // Truncated: a prefix of the image.
        let b = bad(Corruption::Truncated);
        assert!(b.len() < image.len() && image.starts_with(&b));
        // The other generation boots it.
        assert!(parse(&bad(Corruption::WrongGeneration), other, pv).is_ok());
        // A newer driver boots it.
        let b = bad(Corruption::VersionMismatch);
        let fw = parse(&b, g, pv + 1).unwrap();
        assert!(fw.header.interface_min > pv);
        // The image's sections plus an unknown required one.
        let b = bad(Corruption::UnknownSection);
        let n = u32::from_le_bytes(b[28..32].try_into().unwrap()) as usize;
        let last = 64 + (n - 1) * 32;
        assert_eq!(
            u32::from_le_bytes(b[last..last + 4].try_into().unwrap()),
            UNKNOWN_KIND
        );
        assert_eq!(
            u32::from_le_bytes(b[last + 4..last + 8].try_into().unwrap()),
            FW_SECTION_REQUIRED
        );
        // Too large: the image, then zeros, one byte past the limit.
        let b = bad(Corruption::TooLarge);
        assert_eq!(b.len(), FW_MAX_SIZE + 1);
        assert!(b[image.len()..].iter().all(|&x| x == 0));
    }
}

#[test]
fn corrupting_garbage_does_not_panic() {
    for bytes in [&[][..], &[1, 2, 3], &[0xff; 100], &image_for(2)[..70]] {
        for c in Corruption::ALL {
            let _ = corrupt(bytes, c);
        }
        let _ = describe(bytes, None, PROTOCOL_VERSION);
    }
}

#[test]
fn describe_shows_the_header_sections_and_verdict() {
    let image = image_for(2);
    let d = describe(&image, None, PROTOCOL_VERSION);
    for want in [
        "version:     2.1.0",
        "generations: 2",
        "features:    user-queues, preemption",
        "interface:   0.2 ..= 0.2",
        "build:       \"vgpu-gen2-2.1.0\"",
        "crc32:",
        "(ok)",
        "sched [required]",
        "slices low 1000 µs, normal 2000 µs, high 4000 µs",
        "policy priority",
        "gen1: all (NOP INDIRECT",
        "heartbeat at",
        "period 100 ms",
        "16384 bytes",
        "notes at",
        "verdict:     ok",
    ] {
        assert!(d.contains(want), "{want:?} not in\n{d}");
    }
    // A refused image: the verdict names the error's text and code.
    let bad = corrupt(&image, Corruption::BadChecksum);
    let d = describe(&bad, None, PROTOCOL_VERSION);
    assert!(d.contains("WRONG: the bytes give"), "{d}");
    assert!(
        d.contains("refused") && d.contains("checksum mismatch (error 4"),
        "{d}"
    );
    // As another generation's device sees it.
    let v = verdict(&image, Some(1), PROTOCOL_VERSION);
    assert!(
        v.contains("image not built for this GPU generation (error 7"),
        "{v}"
    );
    // A section outside the image.
    let d = describe(
        &corrupt(&image, Corruption::BadSection),
        None,
        PROTOCOL_VERSION,
    );
    assert!(d.contains("OUTSIDE the image"), "{d}");
    let d = describe(
        &corrupt(&image, Corruption::UnknownSection),
        None,
        PROTOCOL_VERSION,
    );
    assert!(
        d.contains("kind 99 [required]") && d.contains("unknown kind"),
        "{d}"
    );
    let d = describe(&image[..10], None, PROTOCOL_VERSION);
    assert!(
        d.contains("header:      missing") && d.contains("image truncated (error 1"),
        "{d}"
    );
}
