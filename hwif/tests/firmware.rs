//! The firmware image format: what `build` writes `parse` accepts, and
//! each way an image is broken gives its own error.

use vgpu_hwif::firmware::{
    build, crc32, feature, parse, section, words_bytes, FwError, FwHeader, FW_FORMAT, FW_MAGIC,
    FW_MAX_SIZE, FW_SECTION_REQUIRED,
};

fn header() -> FwHeader {
    FwHeader {
        magic: FW_MAGIC,
        format: FW_FORMAT,
        version: 0x02_00_01,
        generations: 0b10,
        features: feature::USER_QUEUES,
        interface_min: 1,
        interface_max: 3,
        section_count: 0,
        image_size: 0,
        crc32: 0,
        build: [1, 2, 3, 4],
        reserved: [0; 2],
    }
}

fn image(h: &FwHeader, extra: &[(u32, u32, &[u8])]) -> Vec<u8> {
    let mut sched = [0u8; 24];
    words_bytes([500, 1000, 2000, 3000, 0, 0], &mut sched);
    let mut hb = [0u8; 8];
    words_bytes([250, 0], &mut hb);
    let mut sections: Vec<(u32, u32, &[u8])> = vec![
        (section::SCHED, FW_SECTION_REQUIRED, &sched),
        (section::HEARTBEAT, 0, &hb),
        (section::NOTES, 0, b"gen2 image, built in tests"),
    ];
    sections.extend_from_slice(extra);
    let mut out = vec![0u8; 4096];
    let n = build(&mut out, h, &sections).unwrap();
    out.truncate(n);
    out
}

#[test]
fn crc32_is_zlibs() {
    assert_eq!(crc32(0, b"123456789"), 0xcbf4_3926);
    assert_eq!(crc32(crc32(0, b"1234"), b"56789"), 0xcbf4_3926);
}

#[test]
fn a_built_image_parses_with_its_sections() {
    let img = image(&header(), &[]);
    let fw = parse(&img, 2, 2).unwrap();
    assert_eq!(fw.header.version, 0x02_00_01);
    assert_eq!(fw.header.section_count, 3);
    assert_eq!(fw.header.image_size as usize, img.len());
    let s = fw.sched().unwrap();
    assert_eq!(
        (s.slice_us, s.preempt_timeout_us),
        ([500, 1000, 2000], 3000)
    );
    assert_eq!(fw.heartbeat_ms(), Some(250));
    assert_eq!(fw.log_size(), None);
    assert_eq!(
        fw.section(section::NOTES),
        Some(&b"gen2 image, built in tests"[..])
    );
    // Sections start 16-byte aligned, after the table.
    assert!(fw
        .sections()
        .all(|(e, _)| e.offset % 16 == 0 && e.offset >= 64 + 3 * 32));
}

#[test]
fn every_broken_image_gets_its_own_error() {
    let good = image(&header(), &[]);
    let case = |what: &str, img: &[u8], generation: u32, interface: u32, want: FwError| {
        assert_eq!(
            parse(img, generation, interface).map(|_| ()),
            Err(want),
            "{what}"
        );
    };
    case("truncated header", &good[..40], 2, 2, FwError::Truncated);
    case(
        "truncated body",
        &good[..good.len() - 1],
        2,
        2,
        FwError::Truncated,
    );
    let mut bad = good.clone();
    bad[0] ^= 1;
    case("magic", &bad, 2, 2, FwError::BadMagic);
    let mut h = header();
    h.format = 9;
    case("format", &image(&h, &[]), 2, 2, FwError::BadFormat);
    let mut bad = good.clone();
    let last = bad.len() - 1;
    bad[last] ^= 0x40;
    case("a flipped bit", &bad, 2, 2, FwError::BadChecksum);
    case(
        "a required section of an unknown kind",
        &image(&header(), &[(99, FW_SECTION_REQUIRED, b"x")]),
        2,
        2,
        FwError::UnknownSection,
    );
    // An unknown kind without the flag is skipped.
    assert!(parse(&image(&header(), &[(99, 0, b"x")]), 2, 2).is_ok());
    case(
        "a section too small for its kind",
        &image(&header(), &[(section::PACKETS, 0, &[0u8; 8])]),
        2,
        2,
        FwError::BadSection,
    );
    case("wrong generation", &good, 1, 2, FwError::WrongGeneration);
    case("driver too old", &good, 2, 0, FwError::VersionMismatch);
    case("driver too new", &good, 2, 4, FwError::VersionMismatch);
    let mut big = good.clone();
    big.resize(FW_MAX_SIZE + 1, 0);
    case("too large", &big, 2, 2, FwError::TooLarge);
    // A section pointing past the image, with the CRC made right again.
    let mut bad = good.clone();
    let size_at = 64 + 12;
    bad[size_at..size_at + 4].copy_from_slice(&4000u32.to_le_bytes());
    let crc = vgpu_hwif::firmware::image_crc(&bad);
    bad[36..40].copy_from_slice(&crc.to_le_bytes());
    case("a section past the end", &bad, 2, 2, FwError::BadSection);
    // Codes are stable and round-trip.
    for e in FwError::ALL {
        assert_eq!(FwError::from_u32(e as u32), Some(e));
        assert!(!e.text().is_empty());
    }
    assert_eq!(FwError::from_u32(0), None);
}
