//! Power states without QEMU: down only when idle, what answers while
//! down, the boot state and VRAM after the return to D0 (kept by D3hot,
//! lost by D3cold), the counters, and the injected power failures.

use std::time::Duration;

use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use vgpu_device::config::{DeviceConfig, Generation, VramConfig, VramOnReset};
use vgpu_device::core::inject::Spec;
use vgpu_device::testkit::{Driver, InProcess, KitError, PhysAlloc};
use vgpu_hwif::firmware::fw_state;
use vgpu_hwif::mmu::{PTE_READ, PTE_WRITE, VRAM_BASE};
use vgpu_hwif::packet::{Packet, SEM_WAIT_GEQ};
use vgpu_hwif::pod::Pod;
use vgpu_hwif::proto::{engine, power_state, Command, PowerReply, Status, FEATURE_POWER_STATES};
use vgpu_hwif::vram::state;

const T: Duration = Duration::from_secs(20);
const RAM: u64 = 64 << 20;
const MIB: u64 = 1 << 20;
const DATA: u64 = 0x10_0000;

type Rig = Driver<InProcess>;

fn rig() -> Rig {
    let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), RAM as usize)]).unwrap();
    // VRAM kept by a device reset: what D3cold loses is the power state's doing.
    let vram = VramConfig::new(16 * MIB, 8 * MIB, VramOnReset::Keep).unwrap();
    let cfg = DeviceConfig::new(Generation::Gen2, 2)
        .unwrap()
        .with_vram(vram);
    Driver::new(
        InProcess::new(cfg, &mem),
        mem,
        PhysAlloc::new(MIB, RAM - MIB),
    )
    .unwrap()
}

fn power(d: &mut Rig, state: u32) -> Result<PowerReply, KitError> {
    let r = d.command(Command::PowerSet { state })?;
    Ok(PowerReply::read_from(&r).unwrap())
}

fn vram_word(d: &Rig) -> u64 {
    let mem = d.transport.device.gpu().memory();
    mem.read_obj(GuestAddress(VRAM_BASE + 0x1000)).unwrap()
}

fn set_vram_word(d: &Rig, v: u64) {
    let mem = d.transport.device.gpu().memory();
    mem.write_obj(v, GuestAddress(VRAM_BASE + 0x1000)).unwrap();
}

#[test]
fn down_only_when_idle_and_back_in_the_boot_state_with_vram_kept() {
    let mut d = rig();
    assert_ne!(d.identity.features & FEATURE_POWER_STATES, 0);
    let mut c = d.context(1, 1, 0).unwrap();
    d.ring(&mut c, engine::COPY).unwrap();
    let pa = d
        .buffer(&mut c, DATA, 0x1000, PTE_READ | PTE_WRITE)
        .unwrap();
    // A ring blocked on a semaphore has work: no power-down.
    d.submit(
        &mut c,
        engine::COPY,
        &[Packet::SemWait {
            va: DATA,
            value: 1,
            op: SEM_WAIT_GEQ,
        }],
    )
    .unwrap();
    d.settle(&c, engine::COPY, T).unwrap();
    assert_eq!(
        d.status(Command::PowerSet {
            state: power_state::D3HOT
        }),
        Status::Busy
    );
    // The semaphore released: the ring runs dry.
    d.mem.write_obj(1u64, GuestAddress(pa)).unwrap();
    d.wait_status(&c, engine::COPY, T, |s| s.rptr == s.wptr && s.state == 0)
        .unwrap();
    set_vram_word(&d, 0x5eed_cafe);
    let r = power(&mut d, power_state::D3HOT).unwrap();
    assert_eq!(r.state, power_state::D3HOT);
    assert_eq!(r.entries, [1, 0]);
    // Down: only the power commands, IDENTIFY, PING and TIME_QUERY answer.
    assert_eq!(
        d.status(Command::ContextQuery { ctx_id: 1 }),
        Status::NotReady
    );
    assert_eq!(d.status(Command::FwStatus), Status::NotReady);
    assert_eq!(d.status(Command::Identify), Status::Ok);
    assert_eq!(d.status(Command::PowerStatus), Status::Ok);
    std::thread::sleep(Duration::from_millis(20));
    let r = power(&mut d, power_state::D0).unwrap();
    assert_eq!((r.state, r.vram), (power_state::D0, state::KEPT));
    assert!(r.residency_ns[1] >= 20_000_000, "{:?}", r.residency_ns);
    assert!(r.woke_ns > 0);
    assert_eq!(vram_word(&d), 0x5eed_cafe);
    // Back in the boot state: the firmware again, then contexts again.
    assert_eq!(d.firmware_status().unwrap().state, fw_state::WAIT_LOAD);
    assert_eq!(
        d.status(Command::ContextQuery { ctx_id: 1 }),
        Status::NotReady
    );
    d.boot_default_firmware().unwrap();
    assert_eq!(
        d.status(Command::ContextQuery { ctx_id: 1 }),
        Status::NotFound
    );
}

#[test]
fn d3cold_loses_vram_and_says_so() {
    let mut d = rig();
    set_vram_word(&d, 0x1234_5678);
    power(&mut d, power_state::D3COLD).unwrap();
    let r = power(&mut d, power_state::D0).unwrap();
    assert_eq!(
        (r.state, r.vram, r.entries),
        (power_state::D0, state::GARBAGE, [0, 1])
    );
    assert_ne!(vram_word(&d), 0x1234_5678);
    // A state that is no power state, and one low state to another.
    assert_eq!(
        d.status(Command::PowerSet { state: 7 }),
        Status::InvalidArgument
    );
    power(&mut d, power_state::D3HOT).unwrap();
    assert_eq!(
        d.status(Command::PowerSet {
            state: power_state::D3COLD
        }),
        Status::InvalidArgument
    );
}

#[test]
fn injected_power_failures() {
    let mut d = rig();
    let gpu = d.transport.device.gpu().clone();
    gpu.inject.arm(Spec::parse("pm-enter-fail").unwrap(), 0);
    let down = Command::PowerSet {
        state: power_state::D3HOT,
    };
    assert_eq!(d.status(down), Status::Busy);
    assert_eq!(
        PowerReply::read_from(&d.command(Command::PowerStatus).unwrap())
            .unwrap()
            .state,
        power_state::D0
    );
    gpu.inject.arm(Spec::parse("pm-exit-fail").unwrap(), 0);
    assert_eq!(d.status(down), Status::Ok);
    assert_eq!(
        d.status(Command::PowerSet {
            state: power_state::D0
        }),
        Status::DeviceLost
    );
    assert_eq!(
        power(&mut d, power_state::D0).unwrap().state,
        power_state::D0
    );
    // A D3hot that loses VRAM anyway.
    set_vram_word(&d, 77);
    gpu.inject.arm(Spec::parse("pm-vram-lost").unwrap(), 0);
    power(&mut d, power_state::D3HOT).unwrap();
    assert_eq!(power(&mut d, power_state::D0).unwrap().vram, state::GARBAGE);
    assert_ne!(vram_word(&d), 77);
}
