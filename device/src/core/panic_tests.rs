//! An engine that panics (a device bug) contains it: the ring it was
//! executing stops with `ENGINE_ERROR INTERNAL`, the engine reinitialises
//! itself and keeps serving other contexts. The panics are provoked
//! through a test-only hook (`cp::TestPanic`).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use vgpu_hwif::event::{EngineErrorRecord, Event};
use vgpu_hwif::mmu::{PTE_EXEC, PTE_READ, PTE_WRITE};
use vgpu_hwif::packet::{DispatchPacket, EngineError, Packet};
use vgpu_hwif::proto::{engine, ring_state, Command, CTX_NONE};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use super::cp::TestPanic;
use super::gpu::Gpu;
use super::Device;
use crate::config::{DeviceConfig, Generation};
use crate::testkit::{Driver, GpuContext, InProcess, PhysAlloc};

const T: Duration = Duration::from_secs(5);
const DATA: u64 = 0x20_0000;
const CODE: u64 = 0x100_0000;
const OUT: u64 = 0x118_0000;

struct Rig {
    d: Driver<InProcess>,
    gpu: Arc<Gpu>,
    mem: GuestMemoryMmap,
}

fn rig(units: u32) -> Rig {
    let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 64 << 20)]).unwrap();
    let dev = Device::new(DeviceConfig::new(Generation::Gen2, units).unwrap());
    let gpu = dev.gpu().clone();
    let d = Driver::new(
        InProcess::with_device(dev, &mem),
        mem.clone(),
        PhysAlloc::new(0x10_0000, 62 << 20),
    )
    .unwrap();
    Rig { d, gpu, mem }
}

/// Context `id` with a ring on each engine, a data buffer, and a kernel
/// that stores its global thread id at `OUT` (64 threads).
fn context(r: &mut Rig, id: u32) -> (GpuContext, Packet, u64) {
    let mut c = r.d.context(id, 1, 0).unwrap();
    r.d.ring(&mut c, engine::COPY).unwrap();
    r.d.ring(&mut c, engine::COMPUTE).unwrap();
    r.d.buffer(&mut c, DATA, 0x1000, PTE_READ | PTE_WRITE)
        .unwrap();
    let code_pa =
        r.d.buffer(&mut c, CODE, 0x1_0000, PTE_READ | PTE_EXEC)
            .unwrap();
    let out_pa =
        r.d.buffer(&mut c, OUT, 0x1000, PTE_READ | PTE_WRITE)
            .unwrap();
    let m = vgpu_isa::assemble(
        ".kernel k\n    s2r r0, %gid.x\n    mov r1, 4\n    mov r2, 0x1180000\n    mov r3, 0\n    mad.wide.u32 d2, r0, r1, d2\n    st.32 [d2], r0\n    exit\n.end\n",
        2,
    )
    .unwrap();
    let image = m.to_bytes().unwrap();
    r.mem.write_slice(&image, GuestAddress(code_pa)).unwrap();
    let dispatch = Packet::Dispatch(DispatchPacket {
        module_va: CODE,
        module_size: image.len() as u32,
        kernel: 0,
        args_va: 0,
        args_size: 0,
        grid: [2, 1, 1],
        wg: [32, 1, 1],
        shared_size: 0,
    });
    (c, dispatch, out_pa)
}

fn fence(seqno: u64) -> Packet {
    Packet::Fence {
        va: DATA,
        seqno,
        flags: 0,
    }
}

fn arm(r: &Rig, e: u32, p: TestPanic) {
    r.gpu.test_panic.lock().unwrap()[e as usize] = Some(p);
}

/// The next event must be `ENGINE_ERROR INTERNAL` for `ctx` on `e`.
fn expect_internal(r: &mut Rig, ctx: u32, e: u32) {
    match r.d.event(T).unwrap() {
        Event::EngineError(EngineErrorRecord {
            ctx_id,
            engine,
            code,
            ..
        }) => assert_eq!(
            (ctx_id, engine, code),
            (ctx, e, EngineError::Internal as u32)
        ),
        ev => panic!("expected ENGINE_ERROR INTERNAL, got {ev:?}"),
    }
}

fn expect_fence(r: &mut Rig, ctx: u32, seq: u64) {
    match r.d.event(T).unwrap() {
        Event::Fence { ctx_id, seqno, .. } => assert_eq!((ctx_id, seqno), (ctx, seq)),
        ev => panic!("expected FENCE {seq} of context {ctx}, got {ev:?}"),
    }
}

#[test]
fn a_panic_in_the_command_processor_stops_one_ring_and_the_engine_serves_on() {
    let mut r = rig(1);
    let (mut a, _, _) = context(&mut r, 1);
    let (mut b, _, _) = context(&mut r, 2);
    arm(&r, engine::COPY, TestPanic::Slice);
    r.d.submit(&mut a, engine::COPY, &[fence(1)]).unwrap();
    expect_internal(&mut r, 1, engine::COPY);
    let s = r.d.settle(&a, engine::COPY, T).unwrap();
    assert_eq!(
        (s.state, s.error),
        (ring_state::STOPPED, EngineError::Internal as u32)
    );
    // The engine thread lives and serves another context at once.
    assert!(r.gpu.alive[engine::COPY as usize].load(Ordering::Acquire));
    r.d.submit(&mut b, engine::COPY, &[fence(7)]).unwrap();
    expect_fence(&mut r, 2, 7);
    // The stopped ring recovers as after any engine error.
    r.d.command(Command::EngineReset {
        engine: engine::COPY,
        hung_ctx: CTX_NONE,
    })
    .unwrap();
    assert!(matches!(r.d.event(T).unwrap(), Event::ResetDone { .. }));
    r.d.submit(&mut a, engine::COPY, &[fence(2)]).unwrap();
    expect_fence(&mut r, 1, 2);
}

#[test]
fn a_panic_in_a_compute_unit_ends_the_dispatch_with_an_internal_error() {
    // One unit runs inline on the engine thread, two on their own threads.
    for units in [1, 2] {
        let mut r = rig(units);
        let (mut a, dispatch, _) = context(&mut r, 1);
        let (mut b, dispatch_b, out_b) = context(&mut r, 2);
        arm(&r, engine::COMPUTE, TestPanic::ComputeUnit);
        r.d.submit(&mut a, engine::COMPUTE, &[dispatch, fence(1)])
            .unwrap();
        expect_internal(&mut r, 1, engine::COMPUTE);
        assert_eq!(
            r.d.settle(&a, engine::COMPUTE, T).unwrap().error,
            EngineError::Internal as u32,
            "{units} units"
        );
        // The next dispatch, of another context, runs to completion on
        // every unit.
        r.d.submit(&mut b, engine::COMPUTE, &[dispatch_b, fence(3)])
            .unwrap();
        expect_fence(&mut r, 2, 3);
        for t in 0..64u64 {
            let v: u32 = r.mem.read_obj(GuestAddress(out_b + 4 * t)).unwrap();
            assert_eq!(u64::from(v), t, "{units} units, thread {t}");
        }
        assert!(r.gpu.alive[engine::COMPUTE as usize].load(Ordering::Acquire));
    }
}
