//! Device memory (VRAM) without QEMU: the location bit in page-table
//! entries, copies between system memory and VRAM on both generations,
//! page tables and kernels in VRAM, the firmware's carve-out refused, the
//! layout `MEMORY_LAYOUT` reports, and what each `--vram-on-reset` policy
//! does to VRAM on `DEVICE_RESET` (and says in the reply).

use std::time::Duration;

use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use vgpu_device::config::{DeviceConfig, Generation, VramConfig, VramOnReset};
use vgpu_device::testkit::{Driver, GpuContext, InProcess, PageTables, PhysAlloc};
use vgpu_hwif::event::Event;
use vgpu_hwif::mmu::{Access, FaultReason, PTE_EXEC, PTE_READ, PTE_WRITE, VRAM_BASE};
use vgpu_hwif::packet::{DispatchPacket, Packet};
use vgpu_hwif::pod::Pod;
use vgpu_hwif::proto::{
    engine, Command, DeviceResetReply, MemoryLayoutReply, FEATURE_VRAM, PRIORITY_NORMAL,
};
use vgpu_hwif::vram::{self, kind, state, FIRMWARE_RESERVED};

const T: Duration = Duration::from_secs(20);
const RAM: u64 = 96 << 20;
const RW: u64 = PTE_READ | PTE_WRITE;
const MIB: u64 = 1 << 20;
/// VA ranges of the tests.
const SYS: u64 = 0x100_0000;
const VR: u64 = 0x200_0000;
const VR2: u64 = 0x400_0000;
const FENCE: u64 = 0x1f_0000;

type Rig = Driver<InProcess>;

fn rig_with(generation: u32, vram: VramConfig) -> Rig {
    let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), RAM as usize)]).unwrap();
    let g = Generation::from_number(generation).unwrap();
    let cfg = DeviceConfig::new(g, 2).unwrap().with_vram(vram);
    let dev = InProcess::new(cfg, &mem);
    Driver::new(dev, mem, PhysAlloc::new(MIB, RAM - MIB)).unwrap()
}

fn rig(generation: u32, on_reset: VramOnReset) -> Rig {
    rig_with(
        generation,
        VramConfig::new(64 * MIB, 16 * MIB, on_reset).unwrap(),
    )
}

/// The device's view of memory: guest RAM and VRAM at `VRAM_BASE`.
fn device_mem(d: &Rig) -> GuestMemoryMmap {
    (*d.transport.device.gpu().memory()).clone()
}

fn fence(seqno: u64) -> Packet {
    Packet::Fence {
        va: FENCE,
        seqno,
        flags: 0,
    }
}

fn context(d: &mut Rig, e: u32) -> GpuContext {
    let mut c = d.context(1, PRIORITY_NORMAL, 0).unwrap();
    d.ring(&mut c, e).unwrap();
    d.buffer(&mut c, FENCE, 4096, RW).unwrap();
    c
}

fn run(d: &mut Rig, c: &mut GpuContext, e: u32, packets: &[Packet], seqno: u64) {
    let mut all = packets.to_vec();
    all.push(fence(seqno));
    d.submit(c, e, &all).unwrap();
    assert_eq!(
        d.event(T).unwrap(),
        Event::Fence {
            ctx_id: c.id,
            engine: e,
            seqno,
            va: FENCE
        }
    );
}

fn pattern(len: usize, seed: u32) -> Vec<u8> {
    (0..len as u32)
        .map(|i| (i.wrapping_add(seed).wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect()
}

#[test]
fn the_copy_engine_moves_between_system_memory_and_vram_on_both_generations() {
    for generation in [1, 2] {
        let mut d = rig(generation, VramOnReset::Keep);
        assert_ne!(d.identity.features & FEATURE_VRAM, 0);
        assert_eq!(d.identity.vram_size, 64 * MIB);
        let mut c = context(&mut d, engine::COPY);
        // 64 KiB of system memory, 64 KiB of VRAM in 4 KiB pages (mapped in
        // reverse order) and one 2 MiB VRAM page.
        d.buffer(&mut c, SYS, 0x1_0000, RW).unwrap();
        for i in 0..16u64 {
            let dpa = vram::dpa(MIB + 4096 * (15 - i));
            c.pt.map_4k(&d.mem, VR + 4096 * i, dpa, RW).unwrap();
        }
        c.pt.map_2m(&d.mem, VR2, vram::dpa(4 * MIB), RW).unwrap();
        let src = pattern(0x1_0000, generation);
        let sys_pa = c.pt.translate(&d.mem, SYS).unwrap();
        d.mem.write_slice(&src, GuestAddress(sys_pa)).unwrap();
        run(
            &mut d,
            &mut c,
            engine::COPY,
            &[
                // system -> VRAM, VRAM -> VRAM (into the huge page), VRAM
                // -> system over the original.
                Packet::Copy {
                    src: SYS,
                    dst: VR,
                    size: 0x1_0000,
                },
                Packet::Copy {
                    src: VR,
                    dst: VR2 + 0x1000,
                    size: 0x1_0000,
                },
                Packet::Fill {
                    dst: SYS,
                    size: 0x1_0000,
                    pattern: 0,
                },
                Packet::Copy {
                    src: VR2 + 0x1000,
                    dst: SYS,
                    size: 0x1_0000,
                },
            ],
            1,
        );
        let mut back = vec![0u8; 0x1_0000];
        d.mem.read_slice(&mut back, GuestAddress(sys_pa)).unwrap();
        assert_eq!(back, src, "gen {generation}: the round trip through VRAM");
        // The bytes are where the page tables said: VRAM offset 1 MiB +
        // 15 pages holds the first page.
        let m = device_mem(&d);
        let mut first = vec![0u8; 4096];
        m.read_slice(&mut first, GuestAddress(vram::dpa(MIB + 15 * 4096)))
            .unwrap();
        assert_eq!(first, src[..4096]);
        let mut huge = vec![0u8; 16];
        m.read_slice(&mut huge, GuestAddress(vram::dpa(4 * MIB + 0x1000)))
            .unwrap();
        assert_eq!(huge, src[..16]);
    }
}

#[test]
fn page_tables_and_a_kernel_in_vram() {
    let mut d = rig(2, VramConfig::default().on_reset);
    let m = device_mem(&d);
    // Every table in VRAM: the root's address is a VRAM DPA.
    let mut pt = PageTables::new(&m, PhysAlloc::new(vram::dpa(8 * MIB), 4 * MIB)).unwrap();
    let ring_pa = vram::dpa(16 * MIB);
    let fence_pa = vram::dpa(17 * MIB);
    let code_pa = vram::dpa(18 * MIB);
    let data_pa = vram::dpa(20 * MIB);
    let ring_va = vgpu_device::testkit::ring_va(engine::COMPUTE);
    let status_va = vgpu_device::testkit::status_va(engine::COMPUTE);
    pt.map_range(&m, ring_va, ring_pa, 16 * 1024, PTE_READ | PTE_EXEC)
        .unwrap();
    pt.map_range(&m, status_va, ring_pa + 0x8000, 4096, RW)
        .unwrap();
    pt.map_4k(&m, FENCE, fence_pa, RW).unwrap();
    pt.map_range(&m, 0x10_0000, code_pa, 0x4_0000, PTE_READ | PTE_EXEC)
        .unwrap();
    pt.map_2m(&m, VR2, data_pa, RW).unwrap();
    d.command(Command::ContextCreate {
        ctx_id: 3,
        priority: PRIORITY_NORMAL,
        flags: 0,
        pt_root: pt.root(),
    })
    .unwrap();
    d.command(Command::RingCreate {
        ctx_id: 3,
        engine: engine::COMPUTE,
        size: 16 * 1024,
        ring_va,
        status_va,
    })
    .unwrap();
    // vecadd over 1000 floats in VRAM, module and arguments in VRAM too.
    let src = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../isa/samples/vecadd.s"
    ))
    .unwrap();
    let module = vgpu_isa::assemble(&src, 2).unwrap();
    let image = module.to_bytes().unwrap();
    m.write_slice(&image, GuestAddress(code_pa)).unwrap();
    let n = 1000u64;
    let (a, b, out) = (VR2, VR2 + 0x1_0000, VR2 + 0x2_0000);
    for i in 0..n {
        m.write_obj((i as f32).to_bits(), GuestAddress(data_pa + 4 * i))
            .unwrap();
        m.write_obj((2.5f32).to_bits(), GuestAddress(data_pa + 0x1_0000 + 4 * i))
            .unwrap();
    }
    let k = module.kernel("vecadd").unwrap();
    let mut argv = vec![0u8; k.arg_size as usize];
    for (name, v) in [("n", n), ("a", a), ("b", b), ("c", out)] {
        let arg = k.args.iter().find(|x| x.name == name).unwrap();
        let off = arg.offset as usize;
        argv[off..off + arg.size as usize].copy_from_slice(&v.to_le_bytes()[..arg.size as usize]);
    }
    let args_off = 0x3_0000u64;
    m.write_slice(&argv, GuestAddress(code_pa + args_off))
        .unwrap();
    let mut writer = vgpu_device::testkit::PacketWriter::ring(ring_pa, ring_va, 16 * 1024, 2);
    for p in [
        Packet::Dispatch(DispatchPacket {
            module_va: 0x10_0000,
            module_size: image.len() as u32,
            kernel: module.kernel_index("vecadd").unwrap() as u32,
            args_va: 0x10_0000 + args_off,
            args_size: argv.len() as u32,
            grid: [4, 1, 1],
            wg: [256, 1, 1],
            shared_size: 0,
        }),
        fence(9),
    ] {
        writer.packet(&m, &p).unwrap();
    }
    d.doorbell(3, engine::COMPUTE, writer.wptr()).unwrap();
    assert_eq!(
        d.event(T).unwrap(),
        Event::Fence {
            ctx_id: 3,
            engine: engine::COMPUTE,
            seqno: 9,
            va: FENCE
        }
    );
    for i in [0u64, 1, 500, 999] {
        let v: u32 = m
            .read_obj(GuestAddress(data_pa + 0x2_0000 + 4 * i))
            .unwrap();
        assert_eq!(f32::from_bits(v), i as f32 + 2.5, "element {i}");
    }
    assert_eq!(m.read_obj::<u64>(GuestAddress(fence_pa)).unwrap(), 9);
}

#[test]
fn the_firmware_carve_out_and_addresses_past_vram_fault_bad_physical() {
    let mut d = rig(2, VramOnReset::Keep);
    let mut c = context(&mut d, engine::COPY);
    d.buffer(&mut c, SYS, 4096, RW).unwrap();
    let carve_out = 64 * MIB - FIRMWARE_RESERVED;
    for (i, dpa) in [
        vram::dpa(carve_out),
        vram::dpa(64 * MIB),
        vram::dpa(1 << 40),
    ]
    .into_iter()
    .enumerate()
    {
        let va = VR + 0x10_0000 * i as u64;
        c.pt.map_4k(&d.mem, va, dpa, RW).unwrap();
        d.submit(
            &mut c,
            engine::COPY,
            &[Packet::Copy {
                src: va,
                dst: SYS,
                size: 64,
            }],
        )
        .unwrap();
        match d.event(T).unwrap() {
            Event::Fault { va: f, info, .. } => assert_eq!(
                (f, info.access, info.reason, info.level),
                (va, Access::Read as u8, FaultReason::BadPhysical as u8, 0),
                "{dpa:#x}"
            ),
            other => panic!("{dpa:#x}: {other:?}"),
        }
        // Start over on a fresh context: the ring stopped on the fault.
        d.command(Command::ContextDestroy {
            ctx_id: 1,
            flags: vgpu_hwif::proto::DESTROY_FLAG_FORCE,
        })
        .unwrap();
        c = context(&mut d, engine::COPY);
        d.buffer(&mut c, SYS, 4096, RW).unwrap();
    }
    // A system address can never name VRAM: the address field ends below
    // VRAM_BASE, so the location bit is the only way in.
    assert_eq!(vgpu_hwif::mmu::PTE_ADDR_MASK & VRAM_BASE, 0);
}

#[test]
fn memory_layout_reports_the_ranges_and_the_policy() {
    let mut d = rig(1, VramOnReset::Zero);
    let r = d.command(Command::MemoryLayout).unwrap();
    let l = MemoryLayoutReply::read_from(&r).unwrap();
    assert_eq!((l.vram_size, l.visible_vram_size), (64 * MIB, 16 * MIB));
    assert_eq!(l.reset_policy, state::ZEROED);
    let ranges: Vec<_> = (0..l.count as usize).filter_map(|i| l.range(i)).collect();
    assert_eq!(ranges.len(), 3);
    assert_eq!(
        (ranges[0].size, ranges[0].flags),
        (16 * MIB, vram::flags::CPU_VISIBLE)
    );
    assert_eq!(ranges[1].kind, kind::USABLE);
    assert_eq!(ranges[2].kind, kind::RESERVED);
    assert_eq!(ranges[2].end(), 64 * MIB);
    // An integrated GPU: no VRAM, no ranges, no feature bit.
    let mut igpu = rig_with(1, VramConfig::none());
    assert_eq!(igpu.identity.features & FEATURE_VRAM, 0);
    let r = igpu.command(Command::MemoryLayout).unwrap();
    let l = MemoryLayoutReply::read_from(&r).unwrap();
    assert_eq!((l.count, l.vram_size, l.reset_policy), (0, 0, state::NONE));
}

fn reset_and_read(policy: VramOnReset) -> (u32, Vec<u8>) {
    let mut d = rig(2, policy);
    let m = device_mem(&d);
    let page = pattern(4096, 7);
    m.write_slice(&page, GuestAddress(vram::dpa(3 * MIB)))
        .unwrap();
    let r = d.device_reset().unwrap();
    let rep = DeviceResetReply::read_from(&r).unwrap();
    let mut back = vec![0u8; 4096];
    m.read_slice(&mut back, GuestAddress(vram::dpa(3 * MIB)))
        .unwrap();
    let _ = d.event(T); // RESET_DONE
    (rep.vram, back)
}

#[test]
fn a_device_reset_keeps_zeroes_or_scribbles_vram_and_says_which() {
    let page = pattern(4096, 7);
    assert_eq!(
        reset_and_read(VramOnReset::Keep),
        (state::KEPT, page.clone())
    );
    assert_eq!(
        reset_and_read(VramOnReset::Zero),
        (state::ZEROED, vec![0; 4096])
    );
    let (s, back) = reset_and_read(VramOnReset::Garbage);
    assert_eq!(s, state::GARBAGE);
    assert_ne!(back, page);
    assert_ne!(back, vec![0; 4096]);
}

#[test]
fn an_uncorrectable_vram_page_is_named_by_its_dpa_and_reads_of_it_fail() {
    use vgpu_device::core::inject::Spec;
    use vgpu_hwif::packet::EngineError;
    let mut d = rig(2, VramOnReset::Keep);
    let mut c = context(&mut d, engine::COPY);
    d.buffer(&mut c, SYS, 4096, RW).unwrap();
    c.pt.map_4k(&d.mem, VR, vram::dpa(5 * MIB), RW).unwrap();
    // The page the next packet reads: a VRAM page, reported as its DPA.
    d.transport
        .device
        .gpu()
        .inject
        .arm(Spec::parse("ecc:engine=copy,packet=COPY").unwrap(), 0);
    d.submit(
        &mut c,
        engine::COPY,
        &[Packet::Copy {
            src: VR,
            dst: SYS,
            size: 64,
        }],
    )
    .unwrap();
    let mut saw_ecc = false;
    let mut saw_error = false;
    for _ in 0..2 {
        match d.event(T).unwrap() {
            Event::EccError { va, pa, .. } => {
                assert_eq!((va, pa), (VR, vram::dpa(5 * MIB)));
                saw_ecc = true;
            }
            Event::EngineError(r) => {
                assert_eq!(r.code, EngineError::EccUncorrectable as u32, "{r:?}");
                saw_error = true;
            }
            other => panic!("{other:?}"),
        }
    }
    assert!(saw_ecc && saw_error);
}
