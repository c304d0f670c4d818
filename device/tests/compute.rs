//! Kernels on the device over the real vhost-user protocol: the sample
//! kernels are assembled here, placed in guest memory behind page tables
//! and run with `DISPATCH`; results are checked against CPU references.
//! Faults, traps, malformed modules, generations, hangs stopped by an
//! engine reset, and other contexts running while a kernel is in flight.

mod common;

use std::time::{Duration, Instant};

use vm_memory::{Bytes, GuestAddress};

use common::{rig, rig_with, Rig};
use vgpu_device::config::{DeviceConfig, Generation};
use vgpu_device::testkit::GpuContext;
use vgpu_hwif::event::{EngineErrorRecord, Event, FaultInfo};
use vgpu_hwif::mmu::{Access, FaultReason, PTE_EXEC, PTE_READ, PTE_WRITE};
use vgpu_hwif::packet::{DispatchPacket, EngineError, Packet};
use vgpu_hwif::pod::Pod;
use vgpu_hwif::proto::{
    ctx_state, engine, ring_state, Command, EngineResetReply, CTX_FLAG_REPLAYABLE_FAULTS,
    DESTROY_FLAG_FORCE, PRIORITY_HIGH, PRIORITY_NORMAL,
};
use vgpu_isa::{assemble, Module};

const T: Duration = Duration::from_secs(20);
const RW: u64 = PTE_READ | PTE_WRITE;
const RX: u64 = PTE_READ | PTE_EXEC;
const CODE: u64 = 0x10_0000;
const ARGS: u64 = 0x18_0000;
const FENCE: u64 = 0x1f_0000;
/// Data buffers, 1 MiB apart.
const BUF: u64 = 0x100_0000;
const COMPUTE: u32 = engine::COMPUTE;

fn buf(i: u64) -> u64 {
    BUF + (i << 20)
}

fn sample(name: &str, generation: u32) -> Module {
    let path = format!("{}/../isa/samples/{name}.s", env!("CARGO_MANIFEST_DIR"));
    let src = std::fs::read_to_string(path).unwrap();
    assemble(&src, generation).unwrap()
}

/// Writes `bytes` at `va` of `c` through its page tables.
fn write_va(d: &Rig, c: &GpuContext, va: u64, bytes: &[u8]) {
    let mut off = 0;
    while off < bytes.len() {
        let a = va + off as u64;
        let pa = c.pt.translate(&d.mem, a).expect("mapped");
        let n = (4096 - (a % 4096) as usize).min(bytes.len() - off);
        d.mem
            .write_slice(&bytes[off..off + n], GuestAddress(pa))
            .unwrap();
        off += n;
    }
}

fn read_va(d: &Rig, c: &GpuContext, va: u64, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    let mut off = 0;
    while off < len {
        let a = va + off as u64;
        let pa = c.pt.translate(&d.mem, a).expect("mapped");
        let n = (4096 - (a % 4096) as usize).min(len - off);
        d.mem
            .read_slice(&mut out[off..off + n], GuestAddress(pa))
            .unwrap();
        off += n;
    }
    out
}

fn u32s_to_bytes(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|w| w.to_le_bytes()).collect()
}

fn bytes_to_u32s(b: &[u8]) -> Vec<u32> {
    b.chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|w| w.to_le_bytes()).collect()
}

fn to_f32s(b: &[u8]) -> Vec<f32> {
    bytes_to_u32s(b).into_iter().map(f32::from_bits).collect()
}

/// Deterministic pseudo-random numbers (the project's xorshift64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u32 {
        (vgpu_hwif::rng::xorshift64(&mut self.0) >> 16) as u32
    }
    fn f32s(&mut self, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| (self.next() % 2000) as f32 / 100.0 - 10.0)
            .collect()
    }
}

/// A kernel's argument buffer, filled by name.
fn args(m: &Module, kernel: &str, values: &[(&str, u64)]) -> Vec<u8> {
    let k = m.kernel(kernel).unwrap();
    let mut out = vec![0u8; k.arg_size as usize];
    for (name, v) in values {
        let a = k.args.iter().find(|a| a.name == *name).unwrap();
        let off = a.offset as usize;
        let bytes = v.to_le_bytes();
        out[off..off + a.size as usize].copy_from_slice(&bytes[..a.size as usize]);
    }
    out
}

/// A context with a compute ring, code and argument buffers, a fence page
/// and `bufs` 1 MiB data buffers.
fn setup(d: &mut Rig, id: u32, priority: u32, flags: u32, bufs: u64) -> GpuContext {
    let mut c = d.context(id, priority, flags).unwrap();
    d.ring(&mut c, COMPUTE).unwrap();
    d.buffer(&mut c, CODE, 0x4_0000, RX).unwrap();
    d.buffer(&mut c, ARGS, 0x1000, PTE_READ).unwrap();
    d.buffer(&mut c, FENCE, 0x1000, RW).unwrap();
    for i in 0..bufs {
        d.buffer(&mut c, buf(i), 1 << 20, RW).unwrap();
    }
    c
}

/// The `DISPATCH` of kernel `kernel` of `m` (placed at [`CODE`]) with
/// `argv` (placed at [`ARGS`]).
fn dispatch(
    d: &Rig,
    c: &GpuContext,
    m: &Module,
    kernel: &str,
    argv: &[u8],
    grid: [u32; 3],
    wg: [u32; 3],
) -> Packet {
    let image = m.to_bytes().unwrap();
    write_va(d, c, CODE, &image);
    write_va(d, c, ARGS, argv);
    Packet::Dispatch(DispatchPacket {
        module_va: CODE,
        module_size: image.len() as u32,
        kernel: m.kernel_index(kernel).unwrap() as u32,
        args_va: ARGS,
        args_size: argv.len() as u32,
        grid,
        wg,
        shared_size: 0,
    })
}

fn fence(seqno: u64) -> Packet {
    Packet::Fence {
        va: FENCE,
        seqno,
        flags: 0,
    }
}

/// Submits `p` then a fence on the compute ring and waits for the fence.
fn run(d: &mut Rig, c: &mut GpuContext, p: Packet, seqno: u64) {
    d.submit(c, COMPUTE, &[p, fence(seqno)]).unwrap();
    assert_eq!(
        d.event(T).unwrap(),
        Event::Fence {
            ctx_id: c.id,
            engine: COMPUTE,
            seqno,
            va: FENCE
        }
    );
}

#[test]
fn samples_match_the_cpu_on_four_compute_units() {
    let mut d = rig(2, 48);
    let mut c = setup(&mut d, 1, PRIORITY_NORMAL, 0, 4);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut seq = 0;
    let mut next = || {
        seq += 1;
        seq
    };

    // vecadd, n not a multiple of the workgroup size.
    let m = sample("vecadd", 2);
    let n = 1000usize;
    let (a, b) = (rng.f32s(n), rng.f32s(n));
    write_va(&d, &c, buf(0), &f32s(&a));
    write_va(&d, &c, buf(1), &f32s(&b));
    let argv = args(
        &m,
        "vecadd",
        &[("n", n as u64), ("a", buf(0)), ("b", buf(1)), ("c", buf(2))],
    );
    let p = dispatch(&d, &c, &m, "vecadd", &argv, [4, 1, 1], [256, 1, 1]);
    run(&mut d, &mut c, p, next());
    let got = to_f32s(&read_va(&d, &c, buf(2), 4 * n + 4));
    for i in 0..n {
        assert_eq!(got[i].to_bits(), (a[i] + b[i]).to_bits(), "vecadd {i}");
    }
    assert_eq!(got[n], 0.0, "threads past n store nothing");

    // saxpy
    let m = sample("saxpy", 2);
    let n = 777usize;
    let (x, y) = (rng.f32s(n), rng.f32s(n));
    let alpha = 1.75f32;
    write_va(&d, &c, buf(0), &f32s(&x));
    write_va(&d, &c, buf(1), &f32s(&y));
    let argv = args(
        &m,
        "saxpy",
        &[
            ("n", n as u64),
            ("alpha", u64::from(alpha.to_bits())),
            ("x", buf(0)),
            ("y", buf(1)),
        ],
    );
    let p = dispatch(&d, &c, &m, "saxpy", &argv, [4, 1, 1], [256, 1, 1]);
    run(&mut d, &mut c, p, next());
    let got = to_f32s(&read_va(&d, &c, buf(1), 4 * n));
    for i in 0..n {
        assert_eq!(got[i].to_bits(), alpha.mul_add(x[i], y[i]).to_bits());
    }

    // reduce: one partial sum per workgroup of 256.
    let m = sample("reduce", 2);
    let n = 1000usize;
    let data: Vec<u32> = (0..n).map(|_| rng.next()).collect();
    write_va(&d, &c, buf(0), &u32s_to_bytes(&data));
    let argv = args(
        &m,
        "reduce",
        &[("n", n as u64), ("input", buf(0)), ("partial", buf(3))],
    );
    let p = dispatch(&d, &c, &m, "reduce", &argv, [4, 1, 1], [256, 1, 1]);
    run(&mut d, &mut c, p, next());
    let got = bytes_to_u32s(&read_va(&d, &c, buf(3), 16));
    for (i, chunk) in data.chunks(256).enumerate() {
        assert_eq!(got[i], chunk.iter().fold(0u32, |s, &v| s.wrapping_add(v)));
    }

    // histogram: global atomics from every compute unit into 256 bins.
    let m = sample("histogram", 2);
    let n = 5000usize;
    let data: Vec<u32> = (0..n).map(|_| rng.next()).collect();
    write_va(&d, &c, buf(0), &u32s_to_bytes(&data));
    write_va(&d, &c, buf(1), &[0u8; 1024]);
    let argv = args(
        &m,
        "histogram",
        &[("n", n as u64), ("data", buf(0)), ("bins", buf(1))],
    );
    let p = dispatch(&d, &c, &m, "histogram", &argv, [8, 1, 1], [128, 1, 1]);
    run(&mut d, &mut c, p, next());
    let mut want = vec![0u32; 256];
    for v in &data {
        want[(v & 255) as usize] += 1;
    }
    assert_eq!(bytes_to_u32s(&read_va(&d, &c, buf(1), 1024)), want);

    // matmul: tiles of 16 x 16, sizes not multiples of the tile.
    let m = sample("matmul", 2);
    let (rows, cols, inner) = (40usize, 23usize, 37usize);
    let a = rng.f32s(rows * inner);
    let b = rng.f32s(inner * cols);
    write_va(&d, &c, buf(0), &f32s(&a));
    write_va(&d, &c, buf(1), &f32s(&b));
    let argv = args(
        &m,
        "matmul",
        &[
            ("m", rows as u64),
            ("n", cols as u64),
            ("k", inner as u64),
            ("a", buf(0)),
            ("b", buf(1)),
            ("c", buf(2)),
        ],
    );
    let grid = [cols.div_ceil(16) as u32, rows.div_ceil(16) as u32, 1];
    let p = dispatch(&d, &c, &m, "matmul", &argv, grid, [16, 16, 1]);
    run(&mut d, &mut c, p, next());
    let got = to_f32s(&read_va(&d, &c, buf(2), 4 * rows * cols));
    for i in 0..rows {
        for j in 0..cols {
            let mut acc = 0.0f32;
            for k in 0..inner {
                acc = a[i * inner + k].mul_add(b[k * cols + j], acc);
            }
            assert_eq!(got[i * cols + j].to_bits(), acc.to_bits(), "({i},{j})");
        }
    }
    let s = d.settle(&c, COMPUTE, T).unwrap();
    assert_eq!((s.state, s.packets), (ring_state::IDLE, 10));
}

/// The compute engine's and the context's `cycles` counters are the
/// modelled time of the kernels' workgroups (docs/isa.md §15): the same as
/// the host-side grid of the same launch counts, on one unit or two.
#[test]
fn cycles_counters_are_the_kernels_modelled_time() {
    for units in [1, 2] {
        let mut d = rig_with(DeviceConfig::new(Generation::Gen2, units).unwrap(), 16);
        let mut c = setup(&mut d, 1, PRIORITY_NORMAL, 0, 2);
        let m = sample("reduce", 2);
        let n = 3000u32;
        let data: Vec<u32> = (0..n).map(|i| i.wrapping_mul(2_654_435_761)).collect();
        write_va(&d, &c, buf(0), &u32s_to_bytes(&data));
        let argv = args(
            &m,
            "reduce",
            &[("n", u64::from(n)), ("input", buf(0)), ("partial", buf(1))],
        );
        let grid = [n.div_ceil(256), 1, 1];
        let p = dispatch(&d, &c, &m, "reduce", &argv, grid, [256, 1, 1]);
        run(&mut d, &mut c, p, 1);
        run(&mut d, &mut c, p, 2);
        d.settle(&c, COMPUTE, T).unwrap();

        let mut host = vgpu_isa::mem::SparseMemory::new();
        host.map(buf(0), 1 << 20, true);
        host.map(buf(1), 1 << 20, true);
        let launch = vgpu_isa::Launch::new(&m, "reduce", grid, [256, 1, 1], argv.clone()).unwrap();
        let want = vgpu_isa::run_grid(&m, &launch, &host, 1, None);
        assert_eq!(want.outcome, vgpu_isa::GridOutcome::Completed);
        assert!(want.cycles > 0);

        let deadline = Instant::now() + T;
        let (e, ctx) = loop {
            let e = d.engine_stats(COMPUTE).unwrap();
            let ctx = d
                .stats(vgpu_hwif::proto::stats_kind::CONTEXT, c.id)
                .unwrap();
            if e.packets >= 4 || Instant::now() > deadline {
                break (e, ctx);
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        assert_eq!(e.workgroups, 2 * u64::from(grid[0]), "{units} unit(s)");
        assert_eq!(e.cycles, 2 * want.cycles, "{units} unit(s)");
        assert_eq!(ctx.cycles, 2 * want.cycles, "{units} unit(s)");
        assert_eq!(e.lane_ops, 2 * want.stats.thread_instructions);
    }
}

#[test]
fn histogram_is_the_same_on_one_and_two_compute_units() {
    let mut results = Vec::new();
    for units in [1, 2] {
        let mut d = rig_with(DeviceConfig::new(Generation::Gen2, units).unwrap(), 16);
        let mut c = setup(&mut d, 1, PRIORITY_NORMAL, 0, 2);
        let m = sample("histogram", 2);
        let data: Vec<u32> = (0..20_000u32)
            .map(|i| i.wrapping_mul(2_654_435_761) >> 7)
            .collect();
        write_va(&d, &c, buf(0), &u32s_to_bytes(&data));
        let argv = args(
            &m,
            "histogram",
            &[("n", 20_000), ("data", buf(0)), ("bins", buf(1))],
        );
        let p = dispatch(&d, &c, &m, "histogram", &argv, [16, 1, 1], [64, 1, 1]);
        run(&mut d, &mut c, p, 1);
        let mut want = vec![0u32; 256];
        for v in &data {
            want[(v & 255) as usize] += 1;
        }
        let got = bytes_to_u32s(&read_va(&d, &c, buf(1), 1024));
        assert_eq!(got, want, "{units} compute units");
        results.push(got);
    }
    assert_eq!(results[0], results[1]);
}

/// Waits until the compute ring of `c` is running its first packet.
fn wait_running(d: &mut Rig, c: &GpuContext) {
    let deadline = Instant::now() + T;
    loop {
        if d.stats(vgpu_hwif::proto::stats_kind::CONTEXT, c.id)
            .unwrap()
            .busy_ns
            > 0
        {
            break;
        }
        assert!(Instant::now() < deadline, "the kernel never ran");
        std::thread::sleep(Duration::from_millis(2));
    }
    let s = d.ring_status(c, COMPUTE).unwrap();
    assert_eq!((s.state, s.packets), (ring_state::RUNNING, 0));
}

#[test]
fn an_infinite_loop_runs_until_an_engine_reset_and_others_run_meanwhile() {
    let mut d = rig(2, 32);
    let mut c = setup(&mut d, 1, PRIORITY_NORMAL, 0, 1);
    let spin = sample("spin", 2);
    let p = dispatch(&d, &c, &spin, "spin", &[], [64, 1, 1], [32, 1, 1]);
    d.submit(&mut c, COMPUTE, &[p, fence(1)]).unwrap();
    wait_running(&mut d, &c);

    // A higher-priority context's copy runs on the copy engine, and its
    // fence on the compute engine preempts the kernel between steps.
    let mut h = d.context(2, PRIORITY_HIGH, 0).unwrap();
    d.ring(&mut h, engine::COPY).unwrap();
    d.ring(&mut h, COMPUTE).unwrap();
    d.buffer(&mut h, FENCE, 0x1000, RW).unwrap();
    d.buffer(&mut h, buf(0), 0x2000, RW).unwrap();
    d.submit(
        &mut h,
        engine::COPY,
        &[
            Packet::Fill {
                dst: buf(0),
                size: 0x1000,
                pattern: 0x5a5a_5a5a,
            },
            Packet::Copy {
                src: buf(0),
                dst: buf(0) + 0x1000,
                size: 0x1000,
            },
            fence(7),
        ],
    )
    .unwrap();
    assert_eq!(
        d.event(T).unwrap(),
        Event::Fence {
            ctx_id: 2,
            engine: engine::COPY,
            seqno: 7,
            va: FENCE
        }
    );
    assert_eq!(read_va(&d, &h, buf(0) + 0x1000, 4), vec![0x5a; 4]);
    d.submit(&mut h, COMPUTE, &[fence(8)]).unwrap();
    assert_eq!(
        d.event(T).unwrap(),
        Event::Fence {
            ctx_id: 2,
            engine: COMPUTE,
            seqno: 8,
            va: FENCE
        }
    );
    // The kernel is still running: nothing stops it but a reset.
    std::thread::sleep(Duration::from_millis(50));
    let s = d.ring_status(&c, COMPUTE).unwrap();
    assert_eq!(
        (s.state, s.packets, s.last_fence),
        (ring_state::RUNNING, 0, 0)
    );

    let r = d
        .command(Command::EngineReset {
            engine: COMPUTE,
            hung_ctx: vgpu_hwif::proto::CTX_NONE,
        })
        .unwrap();
    let r = EngineResetReply::read_from(&r).unwrap();
    assert_eq!((r.ctx_id, r.rptr), (1, 0));
    assert_eq!(
        d.event(T).unwrap(),
        Event::ResetDone {
            engine: COMPUTE,
            ctx_id: 1,
            rptr: 0
        }
    );
    let s = d.settle(&c, COMPUTE, T).unwrap();
    assert_eq!(s.state, ring_state::IDLE);
    assert_eq!(s.last_fence, 0, "the fence behind the kernel never ran");

    // The engine keeps serving: a real kernel runs on the same ring.
    let m = sample("vecadd", 2);
    write_va(&d, &c, buf(0), &f32s(&[1.0, 2.0, 3.0]));
    let argv = args(
        &m,
        "vecadd",
        &[("n", 3), ("a", buf(0)), ("b", buf(0)), ("c", buf(0) + 64)],
    );
    let p = dispatch(&d, &c, &m, "vecadd", &argv, [1, 1, 1], [32, 1, 1]);
    run(&mut d, &mut c, p, 2);
    assert_eq!(to_f32s(&read_va(&d, &c, buf(0) + 64, 12)), [2.0, 4.0, 6.0]);
}

#[test]
fn an_out_of_bounds_store_faults_with_the_lane_and_pc() {
    // Non-replayable and replayable contexts alike: kernel faults stop the
    // ring.
    for flags in [0, CTX_FLAG_REPLAYABLE_FAULTS] {
        let mut d = rig(2, 16);
        let mut c = setup(&mut d, 3, PRIORITY_NORMAL, flags, 0);
        let out = 0x70_0000u64;
        d.buffer(&mut c, out, 0x1000, RW).unwrap();
        let m = sample("oob_store", 2);
        let argv = args(&m, "oob_store", &[("out", out)]);
        // 17 workgroups of 64: threads 0..1023 fit the page, workgroup 16
        // runs off its end.
        let p = dispatch(&d, &c, &m, "oob_store", &argv, [17, 1, 1], [64, 1, 1]);
        let vas = d.submit(&mut c, COMPUTE, &[p, fence(1)]).unwrap();
        let store_pc = 4u64;
        let ev = d.event(T).unwrap();
        let Event::Fault {
            va,
            info,
            packet_va,
            fault_id,
            lane_pc,
        } = ev
        else {
            panic!("{ev:?}");
        };
        assert_eq!(
            (va, packet_va, lane_pc),
            (out + 0x1000, vas[0], store_pc << 32)
        );
        assert_eq!(
            info,
            FaultInfo {
                ctx_id: 3,
                engine: COMPUTE as u8,
                access: Access::Write as u8,
                reason: FaultReason::NotPresent as u8,
                level: 0,
                flags: 0,
            }
        );
        assert!(fault_id > 0);
        let s = d.settle(&c, COMPUTE, T).unwrap();
        assert_eq!(
            (s.state, s.error, s.last_fence),
            (ring_state::STOPPED, EngineError::PageFault as u32, 0)
        );
        assert_eq!(d.query(3).unwrap().state, ctx_state::ERRORED);
        // Workgroups still running on other compute units when the fault
        // stops the dispatch are abandoned where they stand, so how much of
        // the page was written depends on timing; what was written is right.
        let got = bytes_to_u32s(&read_va(&d, &c, out, 4096));
        for (i, v) in got.iter().enumerate() {
            assert!(*v == 0 || *v == i as u32, "out[{i}] = {v}");
        }
        assert!(
            got.iter().any(|v| *v != 0),
            "the kernel ran before faulting"
        );
    }
}

#[test]
fn trap_is_an_engine_error_with_the_pc() {
    let mut d = rig(2, 16);
    let mut c = setup(&mut d, 1, PRIORITY_NORMAL, 0, 1);
    let m = assemble(
        ".kernel t\n.arg out ptr\n    ldarg d0, [out]\n    mov r2, 9\n    st.32 [d0], r2\n    trap 5\n.end\n",
        2,
    )
    .unwrap();
    let argv = args(&m, "t", &[("out", buf(0))]);
    let p = dispatch(&d, &c, &m, "t", &argv, [1, 1, 1], [32, 1, 1]);
    let vas = d.submit(&mut c, COMPUTE, &[p, fence(1)]).unwrap();
    assert_eq!(
        d.event(T).unwrap(),
        Event::EngineError(EngineErrorRecord {
            ctx_id: 1,
            engine: COMPUTE,
            code: EngineError::Trap as u32,
            packet_va: vas[0],
            rptr: 0,
            depth: 0,
            cmd_offset: 0,
            header: 3,
        })
    );
    let s = d.settle(&c, COMPUTE, T).unwrap();
    assert_eq!(
        (s.state, s.error),
        (ring_state::STOPPED, EngineError::Trap as u32)
    );
    assert_eq!(bytes_to_u32s(&read_va(&d, &c, buf(0), 4)), [9]);
}

/// Submits `p`, expects `BAD_OPERAND` on it and that `buf(0)` is untouched.
fn refused(d: &mut Rig, c: &mut GpuContext, p: Packet) {
    let vas = d.submit(c, COMPUTE, &[p, fence(1)]).unwrap();
    let ev = d.event(T).unwrap();
    assert!(
        matches!(ev, Event::EngineError(EngineErrorRecord { code, packet_va, .. })
            if code == EngineError::BadOperand as u32 && packet_va == vas[0]),
        "{ev:?}"
    );
    assert_eq!(read_va(d, c, buf(0), 16), [0u8; 16], "nothing executed");
}

#[test]
fn malformed_modules_and_launches_are_refused_before_anything_runs() {
    let m = sample("vecadd", 2);
    let image = m.to_bytes().unwrap();
    let argv = args(
        &m,
        "vecadd",
        &[("n", 4), ("a", buf(0)), ("b", buf(0)), ("c", buf(0))],
    );
    let base = |d: &Rig, c: &GpuContext| dispatch(d, c, &m, "vecadd", &argv, [1, 1, 1], [32, 1, 1]);
    type Mutation = fn(&mut Packet, &mut Vec<u8>);
    let cases: &[(&str, Mutation)] = &[
        ("bad magic", |_, img| img[0] ^= 0xff),
        ("truncated image", |p, _| {
            if let Packet::Dispatch(d) = p {
                d.module_size -= 8;
            }
        }),
        ("corrupted code", |_, img| {
            let n = img.len();
            img[n / 2..n / 2 + 8].fill(0xff);
        }),
        ("kernel index past the table", |p, _| {
            if let Packet::Dispatch(d) = p {
                d.kernel = 1;
            }
        }),
        ("arguments too short", |p, _| {
            if let Packet::Dispatch(d) = p {
                d.args_size = 4;
            }
        }),
        // 2^31 · 2^31 · 4 threads: the product wraps 64 bits to 0.
        ("workgroup product wrapping to 0", |p, _| {
            if let Packet::Dispatch(d) = p {
                d.wg = [1 << 31, 1 << 31, 4];
            }
        }),
        ("more than 2^64 - 1 workgroups", |p, _| {
            if let Packet::Dispatch(d) = p {
                d.grid = [u32::MAX; 3];
            }
        }),
    ];
    for (name, mutate) in cases {
        let mut d = rig(2, 16);
        let mut c = setup(&mut d, 1, PRIORITY_NORMAL, 0, 1);
        let mut p = base(&d, &c);
        let mut img = image.clone();
        mutate(&mut p, &mut img);
        write_va(&d, &c, CODE, &img);
        eprintln!("case: {name}");
        refused(&mut d, &mut c, p);
    }
}

#[test]
fn a_generation_1_device_refuses_a_generation_2_module() {
    let src = ".kernel v\n.arg out ptr\n    s2r r0, %tid.x\n    setp.lt.u32 p0, r0, 4\n    vote.any p1, p0\n    exit\n.end\n";
    let m2 = assemble(src, 2).unwrap();
    assert!(assemble(src, 1).is_err());
    let mut d = rig(1, 16);
    let mut c = setup(&mut d, 1, PRIORITY_NORMAL, 0, 1);
    let argv = args(&m2, "v", &[("out", buf(0))]);
    let p = dispatch(&d, &c, &m2, "v", &argv, [1, 1, 1], [32, 1, 1]);
    refused(&mut d, &mut c, p);
    // A generation-1 module runs there.
    let mut d = rig(1, 16);
    let mut c = setup(&mut d, 1, PRIORITY_NORMAL, 0, 1);
    let m = sample("vecadd", 1);
    write_va(&d, &c, buf(0), &f32s(&[0.5, 1.5]));
    let argv = args(
        &m,
        "vecadd",
        &[("n", 2), ("a", buf(0)), ("b", buf(0)), ("c", buf(0) + 8)],
    );
    let p = dispatch(&d, &c, &m, "vecadd", &argv, [1, 1, 1], [32, 1, 1]);
    run(&mut d, &mut c, p, 1);
    assert_eq!(to_f32s(&read_va(&d, &c, buf(0) + 8, 8)), [1.0, 3.0]);
}

#[test]
fn a_forced_destroy_and_a_device_reset_also_end_an_endless_kernel() {
    let mut d = rig(2, 32);
    let mut c = setup(&mut d, 1, PRIORITY_NORMAL, 0, 0);
    let spin = sample("spin", 2);
    let p = dispatch(&d, &c, &spin, "spin", &[], [8, 1, 1], [64, 1, 1]);
    d.submit(&mut c, COMPUTE, &[p, fence(1)]).unwrap();
    wait_running(&mut d, &c);
    d.command(Command::ContextDestroy {
        ctx_id: 1,
        flags: DESTROY_FLAG_FORCE,
    })
    .unwrap();
    assert_eq!(
        d.event(T).unwrap(),
        Event::ResetDone {
            engine: COMPUTE,
            ctx_id: 1,
            rptr: 0
        }
    );
    // The same id, a new context: its kernel runs on the engine.
    let mut c = setup(&mut d, 1, PRIORITY_NORMAL, 0, 1);
    let m = sample("vecadd", 2);
    write_va(&d, &c, buf(0), &f32s(&[4.0]));
    let argv = args(
        &m,
        "vecadd",
        &[("n", 1), ("a", buf(0)), ("b", buf(0)), ("c", buf(0) + 4)],
    );
    let p = dispatch(&d, &c, &m, "vecadd", &argv, [1, 1, 1], [32, 1, 1]);
    run(&mut d, &mut c, p, 2);
    assert_eq!(to_f32s(&read_va(&d, &c, buf(0) + 4, 4)), [8.0]);
    // Spinning again, then a device reset: everything is gone and the
    // device answers.
    let p = dispatch(&d, &c, &spin, "spin", &[], [8, 1, 1], [64, 1, 1]);
    d.submit(&mut c, COMPUTE, &[p]).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    d.device_reset().unwrap();
    loop {
        if let Event::ResetDone { engine, .. } = d.event(T).unwrap() {
            assert_eq!(engine, engine::ALL);
            break;
        }
    }
    assert_eq!(
        d.status(Command::ContextQuery { ctx_id: 1 }),
        vgpu_hwif::proto::Status::NotFound
    );
}
