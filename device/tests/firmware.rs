//! The firmware boot without QEMU: the boot state (only the boot commands
//! answer), load → start → running through the testkit, every way an
//! image is refused with its error code and log line, the reset back to
//! the boot state, and images that make the device behave differently
//! (no user-mode queues, a packet table without `FENCE`).

use std::time::Duration;

use vm_memory::{GuestAddress, GuestMemoryMmap};

use vgpu_device::config::{Boot, DeviceConfig, Generation};
use vgpu_device::testkit::{Driver, InProcess, KitError, PhysAlloc};
use vgpu_firmware::{alt_image_for, corrupt, image_for, Corruption, Source};
use vgpu_hwif::event::{EngineErrorRecord, Event};
use vgpu_hwif::firmware::{fw_state, FwError};
use vgpu_hwif::mmu::{PTE_READ, PTE_WRITE};
use vgpu_hwif::packet::{EngineError, Packet};
use vgpu_hwif::pod::Pod;
use vgpu_hwif::proto::{
    engine, Command, FwStatusReply, Status, FEATURE_FIRMWARE_RUNNING, FEATURE_USER_QUEUES,
    FW_LOG_READ_MAX, PROTOCOL_VERSION,
};

const T: Duration = Duration::from_secs(20);
const RAM: u64 = 64 << 20;
const MIB: u64 = 1 << 20;
const DATA: u64 = 0x10_0000;

type Rig = Driver<InProcess>;

fn device(generation: u32, boot: Boot) -> Rig {
    let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), RAM as usize)]).unwrap();
    let g = Generation::from_number(generation).unwrap();
    let cfg = DeviceConfig::new(g, 2).unwrap().with_boot(boot);
    let dev = InProcess::new(cfg, &mem);
    Driver::unbooted(dev, mem, PhysAlloc::new(MIB, RAM - MIB)).unwrap()
}

fn status(d: &mut Rig) -> FwStatusReply {
    d.firmware_status().unwrap()
}

/// A fence (seqno 7) on the copy engine of a fresh context `id`.
fn submit_fence(d: &mut Rig, id: u32) {
    let mut c = d.context(id, 1, 0).unwrap();
    d.ring(&mut c, engine::COPY).unwrap();
    d.buffer(&mut c, DATA, 0x1000, PTE_READ | PTE_WRITE)
        .unwrap();
    d.submit(
        &mut c,
        engine::COPY,
        &[Packet::Fence {
            va: DATA,
            seqno: 7,
            flags: 0,
        }],
    )
    .unwrap();
}

/// [`submit_fence`], then its event (a device reset's `RESET_DONE` before
/// it skipped).
fn fence_event(d: &mut Rig, id: u32) -> Event {
    submit_fence(d, id);
    loop {
        match d.event(T).unwrap() {
            Event::ResetDone { .. } => continue,
            ev => return ev,
        }
    }
}

#[test]
fn in_the_boot_state_only_the_boot_commands_answer() {
    for g in [1, 2] {
        let mut d = device(g, Boot::Driver);
        assert_eq!(d.identity.firmware_version, 0);
        assert_eq!(d.identity.features & FEATURE_FIRMWARE_RUNNING, 0);
        assert_eq!(d.identity.generation, g);
        assert_eq!(status(&mut d).state, fw_state::WAIT_LOAD);
        for cmd in [
            Command::ContextQuery { ctx_id: 0 },
            Command::QueryStats { kind: 0, id: 0 },
            Command::DoorbellKick,
            Command::RasQuery { start: 0 },
        ] {
            assert_eq!(d.status(cmd), Status::NotReady, "{cmd:?}");
        }
        assert_eq!(d.status(Command::Ping { cookie: 3 }), Status::Ok);
        assert_eq!(d.status(Command::TimeQuery), Status::Ok);
        assert_eq!(d.status(Command::MemoryLayout), Status::Ok);
        // Nothing to start.
        assert_eq!(d.status(Command::FwStart), Status::NotReady);
    }
}

#[test]
fn each_generation_boots_its_image_and_then_works() {
    for g in [1, 2] {
        let mut d = device(g, Boot::Driver);
        let st = d.boot_firmware(&image_for(g)).unwrap();
        assert_eq!(st.state, fw_state::RUNNING);
        assert!(st.boot_us > 0, "boot time {}", st.boot_us);
        assert_eq!(st.boots, 1);
        let want = if g == 1 { 0x01_03_00 } else { 0x02_01_00 };
        assert_eq!(d.identity.firmware_version, want);
        assert_ne!(d.identity.features & FEATURE_FIRMWARE_RUNNING, 0);
        // A running image is not replaced without a reset.
        assert_eq!(
            d.load_firmware(&image_for(g)).unwrap_err().to_string(),
            KitError::Status(Status::Busy).to_string()
        );
        assert!(matches!(
            fence_event(&mut d, 3),
            Event::Fence { seqno: 7, .. }
        ));
        let log = d.firmware_log().unwrap();
        assert!(log.contains("boot rom: power on"), "{log}");
        assert!(log.contains(&format!("build vgpu-gen{g}-")), "{log}");
        assert!(log.contains("running"), "{log}");
    }
}

#[test]
fn every_broken_image_is_refused_with_its_error_and_a_good_one_boots_after() {
    for g in [1, 2] {
        let mut d = device(g, Boot::Driver);
        let good = image_for(g);
        for c in Corruption::ALL {
            let st = d.load_firmware(&corrupt(&good, c)).unwrap();
            let want = c.expected();
            assert_eq!(
                (st.state, st.error),
                (fw_state::FAILED, want as u32),
                "gen {g} {}",
                c.name()
            );
            assert_eq!(d.status(Command::FwStart), Status::NotReady);
            assert_eq!(
                d.status(Command::ContextQuery { ctx_id: 0 }),
                Status::NotReady
            );
        }
        // The driver's interface outside the image's range.
        let st = d.load_firmware_as(&good, PROTOCOL_VERSION + 1).unwrap();
        assert_eq!(st.error, FwError::VersionMismatch as u32);
        let log = d.firmware_log().unwrap();
        for c in Corruption::ALL {
            assert!(
                log.contains(c.expected().text()),
                "{} not in {log}",
                c.name()
            );
        }
        d.boot_firmware(&good).unwrap();
        assert!(matches!(fence_event(&mut d, 1), Event::Fence { .. }));
    }
}

#[test]
fn an_image_outside_guest_memory_or_a_log_read_too_long_is_an_invalid_argument() {
    let mut d = device(2, Boot::Driver);
    let bad = Command::FwLoad {
        pa: RAM - 0x100,
        size: 0x1000,
        interface: PROTOCOL_VERSION,
    };
    assert_eq!(d.status(bad), Status::InvalidArgument);
    assert_eq!(status(&mut d).state, fw_state::WAIT_LOAD);
    let read = Command::FwLogRead {
        pos: 0,
        len: FW_LOG_READ_MAX + 1,
        buf_pa: MIB,
    };
    assert_eq!(d.status(read), Status::InvalidArgument);
}

#[test]
fn a_device_reset_returns_to_the_boot_state_and_the_image_boots_again() {
    let mut d = device(2, Boot::Driver);
    d.boot_firmware(&image_for(2)).unwrap();
    d.command(Command::DeviceReset).unwrap();
    assert_eq!(status(&mut d).state, fw_state::WAIT_LOAD);
    assert_eq!(
        d.status(Command::ContextQuery { ctx_id: 0 }),
        Status::NotReady
    );
    let st = d.boot_firmware(&image_for(2)).unwrap();
    assert_eq!(st.boots, 2);
    assert!(matches!(fence_event(&mut d, 2), Event::Fence { .. }));
}

#[test]
fn a_preloaded_device_runs_at_power_on_and_after_a_reset() {
    let mut d = device(1, Boot::Preloaded);
    assert_ne!(d.identity.features & FEATURE_FIRMWARE_RUNNING, 0);
    assert_eq!(d.identity.firmware_version, 0x01_03_00);
    d.command(Command::DeviceReset).unwrap();
    assert_eq!(status(&mut d).state, fw_state::RUNNING);
    assert!(matches!(fence_event(&mut d, 4), Event::Fence { .. }));
}

#[test]
fn another_image_makes_the_device_behave_differently() {
    // The alternative image enables no user-mode queues.
    let mut d = device(2, Boot::Driver);
    d.boot_firmware(&alt_image_for(2)).unwrap();
    assert_eq!(d.identity.features & FEATURE_USER_QUEUES, 0);
    assert_eq!(d.identity.firmware_version, 0x02_01_01);
    assert_eq!(d.status(Command::DoorbellKick), Status::Unsupported);
    // With the in-tree image they answer.
    let mut d = device(2, Boot::Driver);
    d.boot_firmware(&image_for(2)).unwrap();
    assert_ne!(d.identity.features & FEATURE_USER_QUEUES, 0);
    assert_eq!(d.status(Command::DoorbellKick), Status::Ok);
    // A packet table without FENCE: the command processor refuses it.
    let text = vgpu_firmware::GEN2_SOURCE.replace(
        "gen2 = \"all\"",
        "gen2 = [\"NOP\", \"INDIRECT\", \"SEM_WAIT\", \"SEM_SIGNAL\", \"TIMESTAMP\", \"COPY\", \"COPY_2D\", \"FILL\", \"DISPATCH\"]",
    );
    assert_ne!(text, vgpu_firmware::GEN2_SOURCE);
    let image = Source::parse(&text).unwrap().image().unwrap();
    let mut d = device(2, Boot::Driver);
    d.boot_firmware(&image).unwrap();
    match fence_event(&mut d, 5) {
        Event::EngineError(EngineErrorRecord { code, .. }) => {
            assert_eq!(code, EngineError::Unsupported as u32)
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_status_reply_is_what_the_firmware_commands_answer() {
    let mut d = device(2, Boot::Driver);
    let r = d
        .command(Command::FwLoad {
            pa: 0,
            size: 0,
            interface: PROTOCOL_VERSION,
        })
        .unwrap();
    let st = FwStatusReply::read_from(&r).unwrap();
    assert_eq!(
        (st.state, st.error),
        (fw_state::FAILED, FwError::Truncated as u32)
    );
    let too_big = Command::FwLoad {
        pa: 0,
        size: 1 << 20,
        interface: PROTOCOL_VERSION,
    };
    let st = FwStatusReply::read_from(&d.command(too_big).unwrap()).unwrap();
    assert_eq!(st.error, FwError::TooLarge as u32);
}

#[test]
fn injected_boot_failures_fail_or_hang_the_boot_once() {
    use vgpu_device::core::inject::Spec;
    let mut d = device(2, Boot::Driver);
    let gpu = d.transport.device.gpu().clone();
    gpu.inject.arm(Spec::parse("fw-boot-fail").unwrap(), 0);
    match d.boot_firmware(&image_for(2)) {
        Err(KitError::Firmware { state, error }) => {
            assert_eq!((state, error), (fw_state::FAILED, FwError::Timeout as u32))
        }
        other => panic!("{other:?}"),
    }
    // Once: the next boot runs.
    d.boot_firmware(&image_for(2)).unwrap();
    d.command(Command::DeviceReset).unwrap();
    gpu.inject.arm(Spec::parse("fw-boot-hang").unwrap(), 0);
    assert_eq!(
        d.load_firmware(&image_for(2)).unwrap().state,
        fw_state::LOADED
    );
    d.command(Command::FwStart).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(status(&mut d).state, fw_state::BOOTING);
    assert_eq!(
        d.status(Command::ContextQuery { ctx_id: 0 }),
        Status::NotReady
    );
    // Only a reset ends it.
    d.command(Command::DeviceReset).unwrap();
    assert_eq!(status(&mut d).state, fw_state::WAIT_LOAD);
    d.boot_firmware(&image_for(2)).unwrap();
    assert!(matches!(fence_event(&mut d, 6), Event::Fence { .. }));
    let log: Vec<String> = gpu.inject.log(0).iter().map(|l| l.what.clone()).collect();
    assert!(log.iter().any(|c| c == "fw-boot-fail"), "{log:?}");
    assert!(log.iter().any(|c| c == "fw-boot-hang"), "{log:?}");
}

/// Arms `spec`, then a fence on a fresh context `id`'s copy engine.
fn arm_and_fence(d: &mut Rig, spec: &str, id: u32) {
    use vgpu_device::core::inject::Spec;
    d.transport
        .device
        .gpu()
        .inject
        .arm(Spec::parse(spec).unwrap(), 0);
    submit_fence(d, id);
}

#[test]
fn a_firmware_crash_stops_the_device_says_so_and_a_reset_and_boot_bring_it_back() {
    use vgpu_hwif::firmware::crash;
    let mut d = device(2, Boot::Driver);
    d.boot_firmware(&image_for(2)).unwrap();
    arm_and_fence(&mut d, "fw-crash:packet=FENCE", 1);
    match d.event(T).unwrap() {
        Event::FirmwareCrash {
            code,
            ctx_id,
            engine: e,
            ..
        } => assert_eq!((code, ctx_id, e), (crash::EXCEPTION, 1, engine::COPY)),
        other => panic!("{other:?}"),
    }
    let st = status(&mut d);
    assert_eq!((st.state, st.error), (fw_state::CRASHED, crash::EXCEPTION));
    assert_eq!(
        d.status(Command::ContextQuery { ctx_id: 1 }),
        Status::NotReady
    );
    // No fence: the engines stopped with it.
    assert!(d.event(Duration::from_millis(100)).is_err());
    assert!(d.firmware_log().unwrap().contains("CRASH exception"));
    d.device_reset().unwrap();
    assert!(matches!(fence_event(&mut d, 2), Event::Fence { .. }));
}

#[test]
fn a_hung_firmware_stops_its_heartbeats_and_the_engines_but_answers() {
    let mut d = device(2, Boot::Driver);
    d.boot_firmware(&image_for(2)).unwrap();
    arm_and_fence(&mut d, "fw-hang:packet=FENCE", 1);
    assert!(d.event(Duration::from_millis(300)).is_err(), "no fence");
    let a = status(&mut d);
    std::thread::sleep(Duration::from_millis(250));
    let b = status(&mut d);
    // The gen-2 image beats every 100 ms: no beat in 250 ms.
    assert_eq!(a.heartbeats, b.heartbeats);
    assert_eq!(b.state, fw_state::RUNNING);
    assert_eq!(d.status(Command::ContextQuery { ctx_id: 1 }), Status::Ok);
    d.device_reset().unwrap();
    let a = status(&mut d);
    std::thread::sleep(Duration::from_millis(250));
    assert!(status(&mut d).heartbeats >= a.heartbeats + 2);
    assert!(matches!(fence_event(&mut d, 2), Event::Fence { .. }));
}

#[test]
fn polling_a_boot_without_sleeping_is_the_sanitizers_fw_poll_once_per_boot() {
    use vgpu_device::core::inject::Spec;
    use vgpu_device::core::sanitize::{SanConfig, ALL_CHECKS};
    use vgpu_hwif::firmware::FW_POLL_MIN_US;
    use vgpu_hwif::sanitize::Check;
    let mut d = device(2, Boot::Driver);
    let gpu = d.transport.device.gpu().clone();
    gpu.sanitizer.configure(&SanConfig {
        checks: ALL_CHECKS,
        ..SanConfig::default()
    });
    let fw_polls = |gpu: &vgpu_device::core::gpu::Gpu| {
        gpu.sanitizer
            .log()
            .since(0)
            .into_iter()
            .filter(|r| r.check == Check::FwPoll)
            .map(|r| r.detail)
            .collect::<Vec<_>>()
    };
    // A boot that never ends, polled as the protocol asks: no report.
    gpu.inject.arm(Spec::parse("fw-boot-hang").unwrap(), 0);
    d.load_firmware(&image_for(2)).unwrap();
    d.command(Command::FwStart).unwrap();
    for _ in 0..20 {
        assert_eq!(status(&mut d).state, fw_state::BOOTING);
        std::thread::sleep(Duration::from_micros(FW_POLL_MIN_US + 20));
    }
    assert!(fw_polls(&gpu).is_empty(), "{:?}", fw_polls(&gpu));
    // Polled back to back: one report for the boot, with the gap.
    for _ in 0..20 {
        assert_eq!(status(&mut d).state, fw_state::BOOTING);
    }
    let found = fw_polls(&gpu);
    assert_eq!(found.len(), 1, "{found:?}");
    let [gap_ns, min_ns, poll, boot] = found[0];
    assert!(
        gap_ns < min_ns && min_ns == FW_POLL_MIN_US * 1000,
        "{found:?}"
    );
    assert_eq!((poll, boot), (22, 1));
    // The driver hears of it while the image still boots, and fetches it
    // then (SAN_REPORT answers in the boot state).
    let seq = loop {
        if let Event::Sanitizer { seq, .. } = d.event(T).unwrap() {
            break seq;
        }
    };
    let r = d.san_report(seq).unwrap();
    assert_eq!(
        (r.check, r.detail[2], r.detail[3]),
        (Check::FwPoll as u32, 22, 1)
    );
    // The next boot is a boot of its own: polled too fast, reported again.
    d.command(Command::DeviceReset).unwrap();
    d.load_firmware(&image_for(2)).unwrap();
    d.command(Command::FwStart).unwrap();
    status(&mut d);
    status(&mut d);
    assert_eq!(fw_polls(&gpu).len(), 2);
    assert_eq!(fw_polls(&gpu)[1][3], 2);
}
