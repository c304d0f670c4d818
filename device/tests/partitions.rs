//! One device cut into virtual functions, without QEMU: each VF a device
//! of its own over its own guest memory (an in-process frontend each),
//! sharing the engines and the VRAM memfd. What a VF sees of its partition
//! (IDENTIFY, its contexts, no power states), that its VRAM window is its
//! own, that a reset of one leaves the other's work running, that a hung
//! VF gives a shared engine back at the end of each of its slices, that a
//! VF's kernel compiling does not hold the engine, and that busy VFs share
//! an engine by weight.

use std::time::{Duration, Instant};

use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use vgpu_device::config::{DeviceConfig, Generation, VramConfig, VramOnReset};
use vgpu_device::core::inject::Spec;
use vgpu_device::pf::{PhysicalFunction, VfSpec};
use vgpu_device::testkit::{Driver, GpuContext, InProcess, PhysAlloc};
use vgpu_hwif::event::Event;
use vgpu_hwif::mmu::{Access, FaultReason, PTE_EXEC, PTE_READ, PTE_WRITE};
use vgpu_hwif::packet::{DispatchPacket, Packet};
use vgpu_hwif::proto::{
    engine, Command, Status, FEATURE_POWER_STATES, FEATURE_VIRTUAL_FUNCTION, PRIORITY_NORMAL,
};
use vgpu_hwif::vram;
use vgpu_isa::{assemble, Module};

const T: Duration = Duration::from_secs(20);
const MIB: u64 = 1 << 20;
const RAM: u64 = 64 * MIB;
const RW: u64 = PTE_READ | PTE_WRITE;
const SYS: u64 = 0x100_0000;
const VR: u64 = 0x200_0000;
const FENCE: u64 = 0x1f_0000;

type Rig = Driver<InProcess>;

fn pf(specs: &[&str]) -> PhysicalFunction {
    let device = DeviceConfig::new(Generation::Gen2, 2)
        .unwrap()
        .with_vram(VramConfig::new(130 * MIB, 32 * MIB, VramOnReset::Zero).unwrap());
    let specs: Vec<VfSpec> = specs.iter().map(|s| s.parse().unwrap()).collect();
    PhysicalFunction::new(device, &specs).unwrap()
}

fn vf(pf: &PhysicalFunction, n: u32) -> Rig {
    let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), RAM as usize)]).unwrap();
    let dev = InProcess::with_device(pf.device(n).unwrap(), &mem);
    Driver::new(dev, mem, PhysAlloc::new(MIB, RAM - MIB)).unwrap()
}

fn context(d: &mut Rig, id: u32) -> GpuContext {
    let mut c = d.context(id, PRIORITY_NORMAL, 0).unwrap();
    d.ring(&mut c, engine::COPY).unwrap();
    d.buffer(&mut c, FENCE, 4096, RW).unwrap();
    c
}

fn fence(seqno: u64) -> Packet {
    Packet::Fence {
        va: FENCE,
        seqno,
        flags: 0,
    }
}

fn run(d: &mut Rig, c: &mut GpuContext, packets: &[Packet], seqno: u64) {
    let mut all = packets.to_vec();
    all.push(fence(seqno));
    d.submit(c, engine::COPY, &all).unwrap();
    match d.event(T).unwrap() {
        Event::Fence { seqno: s, .. } if s == seqno => {}
        other => panic!("fence {seqno}: {other:?}"),
    }
}

#[test]
fn each_vf_sees_its_partition_and_not_the_hosts_power_states() {
    let pf = pf(&["contexts=8,vram=64M,visible=16M", "contexts=24,vram=32M"]);
    let mut d1 = vf(&pf, 1);
    let mut d2 = vf(&pf, 2);
    for (d, n, contexts, vram) in [(&d1, 1, 8, 64 * MIB), (&d2, 2, 24, 32 * MIB)] {
        let id = d.identity;
        assert_eq!(id.function, n);
        assert_ne!(id.features & FEATURE_VIRTUAL_FUNCTION, 0);
        assert_eq!(id.features & FEATURE_POWER_STATES, 0, "power is the host's");
        assert_eq!(id.max_contexts, contexts);
        assert_eq!(id.vram_size, vram);
    }
    assert_eq!(d1.identity.visible_vram_size, 16 * MIB);
    assert_eq!(
        d2.identity.visible_vram_size,
        8 * MIB,
        "a quarter by default"
    );
    // Context 7 is VF 1's last; 8 is not its own, but is VF 2's.
    context(&mut d1, 7);
    let (st, _) = d1.try_command(Command::ContextCreate {
        ctx_id: 8,
        priority: PRIORITY_NORMAL,
        flags: 0,
        pt_root: 0,
    });
    assert_eq!(st, Status::InvalidArgument);
    context(&mut d2, 8);
    let (st, _) = d2.try_command(Command::PowerSet { state: 1 });
    assert_eq!(st, Status::Unsupported);
}

#[test]
fn a_vfs_vram_window_is_its_own() {
    let pf = pf(&["vram=64M", "vram=64M"]);
    let mut d1 = vf(&pf, 1);
    let mut d2 = vf(&pf, 2);
    let mut c1 = context(&mut d1, 1);
    let mut c2 = context(&mut d2, 1);
    // Both write a page at their own VRAM offset 1 MiB.
    for (d, c, byte) in [(&mut d1, &mut c1, 0x11u8), (&mut d2, &mut c2, 0x22)] {
        let pa = d.buffer(c, SYS, 4096, RW).unwrap();
        d.mem.write_slice(&[byte; 4096], GuestAddress(pa)).unwrap();
        c.pt.map_4k(&d.mem, VR, vram::dpa(MIB), RW).unwrap();
        run(
            d,
            c,
            &[Packet::Copy {
                src: SYS,
                dst: VR,
                size: 4096,
            }],
            1,
        );
    }
    // Read back through each VF: each finds its own byte.
    for (d, c, byte) in [(&mut d1, &mut c1, 0x11u8), (&mut d2, &mut c2, 0x22)] {
        run(
            d,
            c,
            &[Packet::Fill {
                dst: SYS,
                size: 4096,
                pattern: 0,
            }],
            2,
        );
        run(
            d,
            c,
            &[Packet::Copy {
                src: VR,
                dst: SYS,
                size: 4096,
            }],
            3,
        );
        let pa = c.pt.translate(&d.mem, SYS).unwrap();
        let mut back = [0u8; 16];
        d.mem.read_slice(&mut back, GuestAddress(pa)).unwrap();
        assert_eq!(back, [byte; 16], "VF sees its own VRAM");
    }
    // VF 2's page is at 64 MiB + 1 MiB of the device's VRAM.
    let whole = pf.shared().vram.clone().unwrap();
    let mut b = [0u8; 1];
    std::os::unix::fs::FileExt::read_exact_at(&*whole, &mut b, 65 * MIB).unwrap();
    assert_eq!(b[0], 0x22);
    // Past its window (64 MiB less the carve-out) VF 1 faults: VF 2's
    // VRAM is not reachable.
    c1.pt
        .map_4k(&d1.mem, VR + 0x1000, vram::dpa(64 * MIB + MIB), RW)
        .unwrap();
    d1.submit(
        &mut c1,
        engine::COPY,
        &[
            Packet::Copy {
                src: VR + 0x1000,
                dst: SYS,
                size: 4096,
            },
            fence(4),
        ],
    )
    .unwrap();
    match d1.event(T).unwrap() {
        Event::Fault { va, info, .. } => assert_eq!(
            (va, info.access, info.reason),
            (
                VR + 0x1000,
                Access::Read as u8,
                FaultReason::BadPhysical as u8
            )
        ),
        other => panic!("expected a fault, got {other:?}"),
    }
}

#[test]
fn a_vf_reset_leaves_the_others_work_running() {
    let pf = pf(&["", ""]);
    let mut d1 = vf(&pf, 1);
    let mut d2 = vf(&pf, 2);
    let mut c1 = context(&mut d1, 1);
    let mut c2 = context(&mut d2, 1);
    let pa = d1.buffer(&mut c1, SYS, 4 * MIB, RW).unwrap();
    d1.buffer(&mut c1, SYS + 4 * MIB, 4 * MIB, RW).unwrap();
    d1.mem.write_slice(&[0x5a; 4096], GuestAddress(pa)).unwrap();
    d2.buffer(&mut c2, SYS, 4096, RW).unwrap();
    // VF 2 resets in the middle of VF 1's stream of copies.
    for seqno in 1..=20u64 {
        let mut p = vec![Packet::Copy {
            src: SYS,
            dst: SYS + 4 * MIB,
            size: 4 * MIB,
        }];
        p.push(fence(seqno));
        d1.submit(&mut c1, engine::COPY, &p).unwrap();
        if seqno == 10 {
            d2.command(Command::DeviceReset).unwrap();
        }
    }
    let mut last = 0;
    while last < 20 {
        match d1.event(T).unwrap() {
            Event::Fence { seqno, .. } => last = seqno,
            other => panic!("VF 1 saw {other:?}"),
        }
    }
    let dst = c1.pt.translate(&d1.mem, SYS + 4 * MIB).unwrap();
    let mut b = [0u8; 8];
    d1.mem.read_slice(&mut b, GuestAddress(dst)).unwrap();
    assert_eq!(b, [0x5a; 8]);
    // VF 2 heard of its own reset, and serves again with new contexts.
    match d2.event(T).unwrap() {
        Event::ResetDone { engine, .. } => assert_eq!(engine, u32::MAX, "the whole VF"),
        other => panic!("VF 2 saw {other:?}"),
    }
    let mut c2 = context(&mut d2, 2);
    d2.buffer(&mut c2, SYS, 4096, RW).unwrap();
    run(
        &mut d2,
        &mut c2,
        &[Packet::Fill {
            dst: SYS,
            size: 4096,
            pattern: 7,
        }],
        1,
    );
}

/// VF 1's copy engine hangs on a copy (an injected hang holds the packet
/// until a reset, which never comes here); VF 2's copies on the shared
/// engine still complete, each within a few of VF 1's slices, while VF 1
/// stays hung and keeps getting (and wasting) its turns.
#[test]
fn a_hung_vf_gives_the_shared_engine_back_each_slice() {
    let pf = pf(&["", ""]);
    let dev1 = pf.device(1).unwrap();
    dev1.gpu()
        .inject
        .arm(Spec::parse("hang:engine=copy,packet=COPY").unwrap(), 0);
    let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), RAM as usize)]).unwrap();
    let mut d1 = Driver::new(
        InProcess::with_device(dev1, &mem),
        mem,
        PhysAlloc::new(MIB, RAM - MIB),
    )
    .unwrap();
    let mut d2 = vf(&pf, 2);
    let mut c1 = context(&mut d1, 1);
    let mut c2 = context(&mut d2, 1);
    d1.buffer(&mut c1, SYS, 8 * MIB, RW).unwrap();
    d2.buffer(&mut c2, SYS, 8 * MIB, RW).unwrap();
    let copy = Packet::Copy {
        src: SYS,
        dst: SYS + 4 * MIB,
        size: 4 * MIB,
    };
    d1.submit(&mut c1, engine::COPY, &[copy, fence(1)]).unwrap();
    // VF 1 holds the engine before VF 2 asks for it.
    std::thread::sleep(Duration::from_millis(50));
    let mut longest = Duration::ZERO;
    for seqno in 1..=20u64 {
        let t0 = Instant::now();
        run(&mut d2, &mut c2, &[copy], seqno);
        longest = longest.max(t0.elapsed());
    }
    let arb = pf.arbiter();
    let (u1, u2) = (arb.usage(0, 1), arb.usage(0, 2));
    eprintln!("VF 2: 20 copies beside a hung VF 1, longest {longest:?}; {u1:?} / {u2:?}");
    assert_eq!(
        d1.ring_status(&c1, engine::COPY).unwrap().last_fence,
        0,
        "VF 1 is still hung"
    );
    assert!(u1.grants > 2, "VF 1 kept its turns: {u1:?}");
    assert!(
        u2.max_wait_ns < 500_000_000,
        "VF 2 waited {} ms for the engine",
        u2.max_wait_ns / 1_000_000
    );
}

/// Writes `bytes` at `va` of `c` through its page tables.
fn write_va(d: &Rig, c: &GpuContext, va: u64, bytes: &[u8]) {
    for (i, chunk) in bytes.chunks(4096).enumerate() {
        let pa = c.pt.translate(&d.mem, va + 4096 * i as u64).unwrap();
        d.mem.write_slice(chunk, GuestAddress(pa)).unwrap();
    }
}

/// A compute context running sample `name` with arguments `argv` (each a
/// u32 or a buffer VA, in the kernel's order) over `grid`; its `DISPATCH`.
fn kernel_context(
    d: &mut Rig,
    name: &str,
    argv: &[u64],
    grid: [u32; 3],
    wg: [u32; 3],
) -> (GpuContext, Packet) {
    const CODE: u64 = 0x10_0000;
    const ARGS: u64 = 0x18_0000;
    let path = format!("{}/../isa/samples/{name}.s", env!("CARGO_MANIFEST_DIR"));
    let m: Module = assemble(&std::fs::read_to_string(path).unwrap(), 2).unwrap();
    let mut c = d.context(1, PRIORITY_NORMAL, 0).unwrap();
    d.ring(&mut c, engine::COMPUTE).unwrap();
    d.buffer(&mut c, CODE, 0x4_0000, PTE_READ | PTE_EXEC)
        .unwrap();
    d.buffer(&mut c, ARGS, 4096, PTE_READ).unwrap();
    d.buffer(&mut c, FENCE, 4096, RW).unwrap();
    d.buffer(&mut c, SYS, 4 * MIB, RW).unwrap();
    let k = &m.kernels()[0];
    let mut args = vec![0u8; k.arg_size as usize];
    for (a, v) in k.args.iter().zip(argv) {
        let off = a.offset as usize;
        args[off..off + a.size as usize].copy_from_slice(&v.to_le_bytes()[..a.size as usize]);
    }
    let image = m.to_bytes().unwrap();
    write_va(d, &c, CODE, &image);
    write_va(d, &c, ARGS, &args);
    let p = Packet::Dispatch(DispatchPacket {
        module_va: CODE,
        module_size: image.len() as u32,
        kernel: 0,
        args_va: ARGS,
        args_size: args.len() as u32,
        grid,
        wg,
        shared_size: 0,
    });
    (c, p)
}

/// VF 2 keeps the compute engine busy with small kernels while VF 1
/// dispatches a kernel the device has not compiled yet (matmul, tens of
/// ms of Cranelift): the compilation runs off the engine (VF 1's first
/// workgroups on the interpreter), so VF 2 never waits for it; VF 1's
/// result is exact.
#[test]
fn a_vf_compiling_a_kernel_does_not_hold_the_engine() {
    let pf = pf(&["", ""]);
    let mut d1 = vf(&pf, 1);
    let mut d2 = vf(&pf, 2);
    let (a, b, cm) = (SYS, SYS + MIB, SYS + 2 * MIB);
    // VF 2: vecadd of 4096 elements (its module compiled first).
    let (mut c2, add) = kernel_context(
        &mut d2,
        "vecadd",
        &[4096, a, b, cm],
        [16, 1, 1],
        [256, 1, 1],
    );
    d2.submit(&mut c2, engine::COMPUTE, &[add, fence(1)])
        .unwrap();
    assert!(matches!(
        d2.event(T).unwrap(),
        Event::Fence { seqno: 1, .. }
    ));
    std::thread::sleep(Duration::from_millis(500));
    // VF 1: C = A * B, 16 x 16 (A the identity, B counting): one
    // workgroup, so that its interpretation is short next to the compile.
    let n = 16u64;
    let (mut c1, mm) = kernel_context(
        &mut d1,
        "matmul",
        &[n, n, n, a, b, cm],
        [1, 1, 1],
        [16, 16, 1],
    );
    let ident: Vec<u8> = (0..n * n)
        .flat_map(|i| if i / n == i % n { 1.0f32 } else { 0.0 }.to_le_bytes())
        .collect();
    let count: Vec<u8> = (0..n * n).flat_map(|i| (i as f32).to_le_bytes()).collect();
    write_va(&d1, &c1, a, &ident);
    write_va(&d1, &c1, b, &count);
    for seqno in 2..=40u64 {
        d2.submit(&mut c2, engine::COMPUTE, &[add, fence(seqno)])
            .unwrap();
    }
    let t0 = Instant::now();
    d1.submit(&mut c1, engine::COMPUTE, &[mm, fence(1)])
        .unwrap();
    assert!(matches!(
        d1.event(T).unwrap(),
        Event::Fence { seqno: 1, .. }
    ));
    let took = t0.elapsed();
    let mut out = vec![0u8; (4 * n * n) as usize];
    for (i, chunk) in out.chunks_mut(4096).enumerate() {
        let pa = c1.pt.translate(&d1.mem, cm + 4096 * i as u64).unwrap();
        d1.mem.read_slice(chunk, GuestAddress(pa)).unwrap();
    }
    assert_eq!(out, count, "C = I * B = B");
    let mut last = 0;
    while last < 40 {
        match d2.event(T).unwrap() {
            Event::Fence { seqno, .. } => last = seqno,
            other => panic!("VF 2 saw {other:?}"),
        }
    }
    let arb = pf.arbiter();
    let (u1, u2) = (arb.usage(1, 1), arb.usage(1, 2));
    eprintln!("matmul on VF 1 in {took:?} beside 39 vecadds of VF 2: {u1:?} / {u2:?}");
    assert!(
        u2.max_wait_ns < 40_000_000,
        "VF 2 waited {} ms for the compute engine",
        u2.max_wait_ns / 1_000_000
    );
}

/// Both VFs keep the copy engine busy for a second; weights 1 and 3.
#[test]
fn busy_vfs_share_the_copy_engine_by_weight() {
    let pf = pf(&["weight=1", "weight=3"]);
    let mut rigs = [vf(&pf, 1), vf(&pf, 2)];
    let mut ctxs: Vec<GpuContext> = rigs.iter_mut().map(|d| context(d, 1)).collect();
    for (d, c) in rigs.iter_mut().zip(&mut ctxs) {
        d.buffer(c, SYS, 8 * MIB, RW).unwrap();
    }
    let copy = Packet::Copy {
        src: SYS,
        dst: SYS + 4 * MIB,
        size: 4 * MIB,
    };
    let end = Instant::now() + Duration::from_secs(1);
    let mut seqno = [0u64; 2];
    // Keep two jobs queued per VF until the end.
    while Instant::now() < end {
        for (i, (d, c)) in rigs.iter_mut().zip(&mut ctxs).enumerate() {
            while d.ring_status(c, engine::COPY).unwrap().last_fence + 2 > seqno[i] {
                seqno[i] += 1;
                d.submit(c, engine::COPY, &[copy, fence(seqno[i])]).unwrap();
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let arb = pf.arbiter();
    let (u1, u2) = (arb.usage(0, 1), arb.usage(0, 2));
    let ratio = u2.busy_ns as f64 / u1.busy_ns.max(1) as f64;
    eprintln!("weights 1:3 -> engine time {ratio:.2} ({u1:?} / {u2:?})");
    assert!((1.8..5.0).contains(&ratio), "weights 1:3 gave {ratio:.2}");
    assert!(u1.grants > 5 && u2.grants > 5);
}
