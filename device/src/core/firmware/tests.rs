//! The boot state machine with images built here.

use super::*;
use vgpu_hwif::firmware::{build, section, words_bytes, FW_FORMAT, FW_MAGIC, FW_SECTION_REQUIRED};
use vgpu_hwif::pod::Pod;
use vgpu_hwif::proto::{ReplyHeader, PRIORITY_REALTIME};

const IFACE: u32 = vgpu_hwif::proto::PROTOCOL_VERSION;

fn image(
    generation: u32,
    features: u32,
    slices: [u32; 3],
    policy: u32,
    gen_packets: [u32; 8],
) -> Vec<u8> {
    let h = FwHeader {
        magic: FW_MAGIC,
        format: FW_FORMAT,
        version: 0x02_01_00,
        generations: 1 << (generation - 1),
        features,
        interface_min: IFACE,
        interface_max: IFACE,
        section_count: 0,
        image_size: 0,
        crc32: 0,
        build: [u32::from_le_bytes(*b"test"), 0, 0, 0],
        reserved: [0; 2],
    };
    let mut sched = [0u8; 24];
    words_bytes(
        [slices[0], slices[1], slices[2], 5000, policy, 0],
        &mut sched,
    );
    let mut packets = [0u8; 64];
    let mut words = [u32::MAX; 16];
    let at = if generation == 1 { 0 } else { 8 };
    words[at..at + 8].copy_from_slice(&gen_packets);
    words_bytes(words, &mut packets);
    let mut hb = [0u8; 8];
    words_bytes([10, 0], &mut hb);
    let mut out = vec![0u8; 4096];
    let n = build(
        &mut out,
        &h,
        &[
            (section::SCHED, FW_SECTION_REQUIRED, &sched),
            (section::PACKETS, FW_SECTION_REQUIRED, &packets),
            (section::HEARTBEAT, 0, &hb),
        ],
    )
    .unwrap();
    out.truncate(n);
    out
}

fn good(generation: u32) -> Vec<u8> {
    image(
        generation,
        feature::ALL,
        [1000, 2000, 4000],
        0,
        [u32::MAX; 8],
    )
}

fn st(fw: &Firmware, now: u64) -> FwStatusReply {
    fw.status(now, ReplyHeader::zeroed())
}

#[test]
fn boots_through_load_start_and_the_boot_time() {
    let fw = Firmware::new(2, IFACE);
    assert_eq!(st(&fw, 0).state, fw_state::WAIT_LOAD);
    assert!(!fw.running(0));
    assert_eq!(
        fw.start(0, BootOutcome::Run),
        Err(FwCommandError::NothingLoaded)
    );
    let img = good(2);
    fw.load(1000, img.clone(), IFACE).unwrap();
    let s = st(&fw, 1000);
    assert_eq!(
        (s.state, s.error, s.version),
        (fw_state::LOADED, 0, 0x02_01_00)
    );
    fw.start(2000, BootOutcome::Run).unwrap();
    assert_eq!(st(&fw, 2000).state, fw_state::BOOTING);
    assert!(!fw.running(2000));
    assert_eq!(fw.load(2000, img.clone(), IFACE), Err(FwCommandError::Busy));
    let boot_ns = (BOOT_BASE_US + BOOT_US_PER_KIB * (img.len() as u64).div_ceil(1024)) * 1000;
    assert!(!fw.running(2000 + boot_ns - 1));
    assert!(fw.running(2000 + boot_ns));
    let s = st(&fw, 2000 + boot_ns + 25_000_000);
    assert_eq!(s.state, fw_state::RUNNING);
    assert_eq!(u64::from(s.boot_us) * 1000, boot_ns);
    assert_eq!((s.heartbeat_ms, s.heartbeats, s.boots), (10, 2, 1));
    assert_eq!(fw.load(0, img, IFACE), Err(FwCommandError::Busy));
    // A device reset: back to the boot state, the image gone.
    fw.power_on(99);
    let s = st(&fw, 100);
    assert_eq!(
        (s.state, s.version, s.heartbeats),
        (fw_state::WAIT_LOAD, 0, 0)
    );
    assert!(!fw.running(100));
    let (_, log, _) = fw.read_log(0, 1 << 16);
    let log = String::from_utf8(log).unwrap();
    assert!(log.contains("image 2.1.0 build test loaded"), "{log}");
    assert!(log.contains("firmware 2.1.0 running"), "{log}");
    assert_eq!(log.matches("power on").count(), 2, "{log}");
}

#[test]
fn each_broken_image_fails_with_its_error_and_a_log_line_and_a_good_one_loads_after() {
    let fw = Firmware::new(2, IFACE);
    let g = good(2);
    let mut bad_crc = g.clone();
    let last = bad_crc.len() - 1;
    bad_crc[last] ^= 1;
    let mut bad_magic = g.clone();
    bad_magic[0] ^= 1;
    let cases: [(Vec<u8>, u32, FwError); 5] = [
        (g[..40].to_vec(), IFACE, FwError::Truncated),
        (bad_magic, IFACE, FwError::BadMagic),
        (bad_crc, IFACE, FwError::BadChecksum),
        (good(1), IFACE, FwError::WrongGeneration),
        (g.clone(), IFACE + 1, FwError::VersionMismatch),
    ];
    for (img, iface, want) in cases {
        fw.load(0, img, iface).unwrap();
        let s = st(&fw, 0);
        assert_eq!(
            (s.state, s.error),
            (fw_state::FAILED, want as u32),
            "{want:?}"
        );
        assert!(!fw.running(0));
        assert_eq!(
            fw.start(0, BootOutcome::Run),
            Err(FwCommandError::NothingLoaded)
        );
    }
    fw.refuse_size(0, 1 << 20).unwrap();
    assert_eq!(st(&fw, 0).error, FwError::TooLarge as u32);
    let (_, log, _) = fw.read_log(0, 1 << 16);
    let log = String::from_utf8(log).unwrap();
    for e in [
        FwError::BadMagic,
        FwError::BadChecksum,
        FwError::WrongGeneration,
        FwError::TooLarge,
    ] {
        assert!(log.contains(e.text()), "{e:?} not in {log}");
    }
    fw.load(0, g, IFACE).unwrap();
    assert_eq!(st(&fw, 0).state, fw_state::LOADED);
}

#[test]
fn the_running_image_sets_slices_policy_packets_and_features() {
    let fw = Firmware::new(1, IFACE);
    // Before an image runs: the boot ROM's parameters.
    assert_eq!(
        fw.slice(PRIORITY_LOW),
        Some(Duration::from_nanos(ROM_SLICE_NS))
    );
    assert!(fw.packet_allowed(0x12));
    let mut packets = [u32::MAX; 8];
    packets[0] &= !(1 << 5);
    let img = image(1, feature::USER_QUEUES, [300, 600, 900], 1, packets);
    fw.set_mode(BootMode::Preloaded(img), 0);
    assert!(fw.running(0));
    // No preemption feature: no slices.
    assert_eq!(fw.slice(PRIORITY_NORMAL), None);
    assert!(fw.round_robin());
    assert!(!fw.packet_allowed(5));
    assert!(fw.packet_allowed(6));
    assert!(fw.enables(feature::USER_QUEUES));
    assert_eq!(
        fw.identify(0),
        (FEATURE_FIRMWARE_RUNNING | FEATURE_USER_QUEUES, 0x02_01_00)
    );
    let img = image(1, feature::PREEMPTION, [300, 600, 900], 0, [u32::MAX; 8]);
    fw.set_mode(BootMode::Preloaded(img), 0);
    assert_eq!(fw.slice(PRIORITY_LOW), Some(Duration::from_micros(300)));
    assert_eq!(fw.slice(PRIORITY_HIGH), Some(Duration::from_micros(900)));
    assert_eq!(
        fw.slice(PRIORITY_REALTIME),
        Some(Duration::from_micros(900))
    );
    assert!(!fw.round_robin());
    assert!(!fw.enables(feature::USER_QUEUES));
    // A preloaded device runs its image again after a reset.
    fw.power_on(5);
    assert!(fw.running(5));
    assert_eq!(st(&fw, 5).boots, 3);
}

#[test]
fn a_failed_boot_says_timeout_and_a_hung_one_boots_for_ever_until_power_on() {
    let fw = Firmware::new(2, IFACE);
    fw.load(0, good(2), IFACE).unwrap();
    fw.start(0, BootOutcome::Fail).unwrap();
    assert_eq!(st(&fw, 1000).state, fw_state::BOOTING);
    let s = st(&fw, 1_000_000_000);
    assert_eq!(
        (s.state, s.error),
        (fw_state::FAILED, FwError::Timeout as u32)
    );
    assert!(!fw.running(1_000_000_000));
    // A failed boot may be loaded again.
    fw.load(0, good(2), IFACE).unwrap();
    fw.start(0, BootOutcome::Hang).unwrap();
    assert_eq!(st(&fw, u64::MAX / 2).state, fw_state::BOOTING);
    assert_eq!(fw.load(0, good(2), IFACE), Err(FwCommandError::Busy));
    fw.power_on(1);
    assert_eq!(st(&fw, 2).state, fw_state::WAIT_LOAD);
    let (_, log, _) = fw.read_log(0, 1 << 16);
    assert!(String::from_utf8(log)
        .unwrap()
        .contains("did not come up: boot timed out"));
}

#[test]
fn polls_are_timed_per_boot_and_only_while_it_boots() {
    let fw = Firmware::new(2, IFACE);
    let min = FW_POLL_MIN_US * 1000;
    // Not booting: nothing is timed.
    assert_eq!(fw.poll(0), None);
    assert_eq!(fw.poll(1), None);
    fw.load(0, good(2), IFACE).unwrap();
    fw.start(10_000, BootOutcome::Hang).unwrap();
    // The first poll of a boot has nothing before it; then the gap counts.
    assert_eq!(fw.poll(20_000), None);
    assert_eq!(fw.poll(20_000 + min), None);
    assert_eq!(
        fw.poll(20_000 + 2 * min - 1),
        Some(FastPoll {
            boot: 1,
            poll: 3,
            gap_ns: min - 1
        })
    );
    // A new boot starts the count again.
    fw.power_on(50_000_000);
    fw.load(50_000_000, good(2), IFACE).unwrap();
    fw.start(50_000_000, BootOutcome::Run).unwrap();
    assert_eq!(fw.poll(50_000_001), None);
    assert_eq!(
        fw.poll(50_000_002),
        Some(FastPoll {
            boot: 2,
            poll: 2,
            gap_ns: 1
        })
    );
    // Running: polls are not timed any more.
    let ready = 50_000_000 + 10_000_000;
    assert_eq!(fw.poll(ready), None);
    assert_eq!(fw.poll(ready + 1), None);
}
