//! Device-model benchmarks, each against a baseline measured in the same
//! run: the copy engine on 64 MiB through the MMU against host memcpy
//! (2 MiB pages, linear 4 KiB pages, scattered 4 KiB pages), MMU
//! translations per second with and without TLB hits, and NOP packets per
//! second (command processor alone, and the whole device from doorbell to
//! fence event), each also with every driver-sanitizer check on for its
//! cost (the same work, the same run). Run with
//! `cargo run --release -p vgpu-device --example bench [copy|mmu|nop]`.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use vgpu_device::config::{DeviceConfig, Generation};
use vgpu_device::core::cp::{CommandProcessor, Job, SliceEnd, TestHost};
use vgpu_device::core::mmu::{walk, AddressSpace, Mem, Mmu, Tlb};
use vgpu_device::core::ring::Cursor;
use vgpu_device::core::sanitize::{SanConfig, Sanitizer, ALL_CHECKS};
use vgpu_device::testkit::{Driver, InProcess, PacketWriter, PageTables, PhysAlloc};
use vgpu_hwif::event::Event;
use vgpu_hwif::mmu::{Access, PTE_EXEC, PTE_READ, PTE_WRITE};
use vgpu_hwif::packet::Packet;
use vgpu_hwif::proto::engine;
use vgpu_hwif::rng::Rng;
use vm_memory::{Bytes, GuestAddress};

const MIB: u64 = 1 << 20;
const SIZE: u64 = 64 * MIB;
const RAM: u64 = 192 * MIB;
const RUNS: usize = 5;
const RW: u64 = PTE_READ | PTE_WRITE;

const SRC_PA: u64 = 32 * MIB;
const DST_PA: u64 = 96 * MIB;
const SRC_VA: u64 = 0x10_0000_0000;
const DST_VA: u64 = 0x20_0000_0000;
const RING_VA: u64 = 0x1000_0000;
const RING_PA: u64 = 16 * MIB;
const RING_SIZE: u32 = 1 << 20;
const STATUS_VA: u64 = 0x2000_0000;
const STATUS_PA: u64 = 30 * MIB;

fn best<F: FnMut() -> Duration>(mut f: F) -> Duration {
    (0..RUNS).map(|_| f()).min().unwrap_or_default()
}

fn gbps(bytes: u64, d: Duration) -> f64 {
    bytes as f64 / d.as_secs_f64() / 1e9
}

#[derive(Clone, Copy, PartialEq)]
enum Layout {
    Huge,
    Linear4k,
    Scattered4k,
}

/// Guest memory with page tables mapping 64 MiB of source and destination
/// in the given layout, a 1 MiB ring and a status block.
struct Setup {
    mem: Mem,
    root: u64,
}

fn setup(layout: Layout) -> Setup {
    let mem = Mem::from_ranges(&[(GuestAddress(0), RAM as usize)]).unwrap();
    let mut pt = PageTables::new(&mem, PhysAlloc::new(MIB, 14 * MIB)).unwrap();
    pt.map_range(
        &mem,
        RING_VA,
        RING_PA,
        u64::from(RING_SIZE),
        PTE_READ | PTE_EXEC,
    )
    .unwrap();
    pt.map_4k(&mem, STATUS_VA, STATUS_PA, RW).unwrap();
    let pages = SIZE / 4096;
    let mut order: Vec<u64> = (0..pages).collect();
    let mut rng = Rng::from_state(0x9e37_79b9_7f4a_7c15);
    for (va, pa) in [(SRC_VA, SRC_PA), (DST_VA, DST_PA)] {
        match layout {
            Layout::Huge => {
                for i in 0..SIZE >> 21 {
                    pt.map_2m(&mem, va + (i << 21), pa + (i << 21), RW).unwrap();
                }
            }
            Layout::Linear4k => pt.map_range(&mem, va, pa, SIZE, RW).unwrap(),
            Layout::Scattered4k => {
                rng.shuffle(&mut order);
                for (i, p) in order.iter().enumerate() {
                    pt.map_4k(&mem, va + 4096 * i as u64, pa + 4096 * p, RW)
                        .unwrap();
                }
            }
        }
    }
    // Touch every byte once so that no page faults land in a measurement.
    let pattern: Vec<u8> = (0..MIB).map(|i| (i * 131 % 251) as u8).collect();
    for off in (0..SIZE).step_by(MIB as usize) {
        mem.write_slice(&pattern, GuestAddress(SRC_PA + off))
            .unwrap();
        mem.write_slice(&pattern, GuestAddress(DST_PA + off))
            .unwrap();
    }
    Setup {
        root: pt.root(),
        mem,
    }
}

fn job(root: u64, wptr: u32, rptr: u32) -> Job {
    Job {
        ctx: 1,
        engine: engine::COPY,
        priority: 1,
        replayable: false,
        space: AddressSpace {
            asid: 1,
            root,
            va_bits: 48,
        },
        ring_va: RING_VA,
        ring_size: RING_SIZE,
        status_va: STATUS_VA,
        status_broken: false,
        wptr,
        cursor: Cursor {
            rptr,
            ..Cursor::default()
        },
    }
}

/// Runs one COPY of 64 MiB on the command processor; returns its time.
fn engine_copy(
    s: &Setup,
    cp: &mut CommandProcessor,
    host: &TestHost,
    ring: &mut PacketWriter,
) -> Duration {
    let rptr = ring.wptr();
    ring.packet(
        &s.mem,
        &Packet::Copy {
            src: SRC_VA,
            dst: DST_VA,
            size: SIZE,
        },
    )
    .unwrap();
    let mut j = job(s.root, ring.wptr(), rptr);
    let t = Instant::now();
    let out = cp.run_slice(host, &s.mem, &mut j);
    let d = t.elapsed();
    assert_eq!(out.end, SliceEnd::Idle);
    assert_eq!(out.stats.bytes, SIZE);
    d
}

fn bench_copy() {
    let mut host_src = vec![1u8; SIZE as usize];
    let mut host_dst = vec![2u8; SIZE as usize];
    for (i, b) in host_src.iter_mut().enumerate() {
        *b = (i % 253) as u8;
    }
    let memcpy = best(|| {
        let t = Instant::now();
        host_dst.copy_from_slice(black_box(&host_src));
        black_box(&host_dst);
        t.elapsed()
    });
    println!(
        "copy: host memcpy 64 MiB: {:.2} ms ({:.2} GB/s)",
        memcpy.as_secs_f64() * 1e3,
        gbps(SIZE, memcpy)
    );
    // Page-by-page memcpy in the scattered order, the best a scattered
    // layout allows.
    let mut order: Vec<usize> = (0..(SIZE / 4096) as usize).collect();
    Rng::from_state(7).shuffle(&mut order);
    let scattered_memcpy = best(|| {
        let t = Instant::now();
        for (i, &p) in order.iter().enumerate() {
            host_dst[i * 4096..(i + 1) * 4096].copy_from_slice(&host_src[p * 4096..(p + 1) * 4096]);
        }
        black_box(&host_dst);
        t.elapsed()
    });
    drop((host_src, host_dst));
    for (layout, name) in [
        (Layout::Huge, "2 MiB pages"),
        (Layout::Linear4k, "4 KiB pages, linear"),
        (Layout::Scattered4k, "4 KiB pages, scattered"),
    ] {
        let s = setup(layout);
        let mut cp = CommandProcessor::new(engine::COPY, 2, false);
        let host = TestHost::default();
        let mut ring = PacketWriter::ring(RING_PA, RING_VA, RING_SIZE, 2);
        let d = best(|| engine_copy(&s, &mut cp, &host, &mut ring));
        let tlb = cp.tlb.stats();
        // The same with every sanitizer check on.
        let mut cps = CommandProcessor::new(engine::COPY, 2, false);
        let san = sanitizer();
        cps.set_sanitizer(san.clone());
        let ds = best(|| engine_copy(&s, &mut cps, &host, &mut ring));
        assert_eq!(san.counts().1, 0, "no finding");
        println!(
            "copy: copy engine 64 MiB, {name}: {:.2} ms ({:.2} GB/s), ratio to memcpy {:.2}x (TLB {} hits, {} misses over {} runs)",
            d.as_secs_f64() * 1e3,
            gbps(SIZE, d),
            memcpy.as_secs_f64() / d.as_secs_f64(),
            tlb.hits,
            tlb.misses,
            RUNS
        );
        println!(
            "copy: copy engine 64 MiB, {name}, --sanitize (every check): {:.2} ms ({:.2} GB/s), {:.2}x the time without",
            ds.as_secs_f64() * 1e3,
            gbps(SIZE, ds),
            ds.as_secs_f64() / d.as_secs_f64()
        );
        if layout == Layout::Scattered4k {
            println!(
                "copy: host page-by-page memcpy in scattered order: {:.2} ms; copy engine ratio to it {:.2}x",
                scattered_memcpy.as_secs_f64() * 1e3,
                scattered_memcpy.as_secs_f64() / d.as_secs_f64()
            );
        }
    }
}

fn bench_mmu() {
    let s = setup(Layout::Scattered4k);
    let space = AddressSpace {
        asid: 1,
        root: s.root,
        va_bits: 48,
    };
    // Hits: 1024 pages, all resident after the first pass.
    let hot: Vec<u64> = (0..1024u64).map(|i| SRC_VA + 4096 * i + 8).collect();
    let mut tlb = Tlb::new();
    let mut mmu = Mmu {
        mem: &s.mem,
        tlb: &mut tlb,
        space,
        tap: None,
    };
    for &va in &hot {
        mmu.translate(va, Access::Read).unwrap();
    }
    let rounds = 2000;
    let hit = best(|| {
        let t = Instant::now();
        let mut acc = 0u64;
        for _ in 0..rounds {
            for &va in &hot {
                acc ^= mmu
                    .translate(black_box(va), Access::Read)
                    .map_or(0, |m| m.pa(va));
            }
        }
        black_box(acc);
        t.elapsed()
    });
    let n_hit = rounds as u64 * hot.len() as u64;
    // Misses: every page of 64 MiB in a shuffled order, TLB flushed, so
    // every translation is a four-level walk (and an insertion).
    let mut cold: Vec<u64> = (0..SIZE / 4096).map(|i| SRC_VA + 4096 * i).collect();
    Rng::from_state(3).shuffle(&mut cold);
    let miss = best(|| {
        mmu.tlb.flush();
        let t = Instant::now();
        let mut acc = 0u64;
        for &va in &cold {
            acc ^= mmu
                .translate(black_box(va), Access::Read)
                .map_or(0, |m| m.pa(va));
        }
        black_box(acc);
        t.elapsed()
    });
    let walk_only = best(|| {
        let t = Instant::now();
        let mut acc = 0u64;
        for &va in &cold {
            acc ^= walk(&s.mem, &space, black_box(va), Access::Read).map_or(0, |m| m.pa(va));
        }
        black_box(acc);
        t.elapsed()
    });
    let rate = |n: u64, d: Duration| n as f64 / d.as_secs_f64() / 1e6;
    println!(
        "mmu: TLB hits: {:.1} M translations/s ({:.1} ns each)",
        rate(n_hit, hit),
        hit.as_nanos() as f64 / n_hit as f64
    );
    println!(
        "mmu: TLB misses (4-level walk + fill): {:.1} M translations/s ({:.1} ns each); walk alone {:.1} M/s",
        rate(cold.len() as u64, miss),
        miss.as_nanos() as f64 / cold.len() as f64,
        rate(cold.len() as u64, walk_only)
    );
}

/// A sanitizer with every check on.
fn sanitizer() -> Arc<Sanitizer> {
    let s = Arc::new(Sanitizer::new(2));
    s.configure(&SanConfig {
        checks: ALL_CHECKS,
        ..SanConfig::default()
    });
    s
}

fn bench_nop() {
    // Command processor alone: a 1 MiB ring full of 1-word NOPs, without
    // and with the sanitizer.
    let s = setup(Layout::Huge);
    let mut cp = CommandProcessor::new(engine::COPY, 2, false);
    let mut cps = CommandProcessor::new(engine::COPY, 2, false);
    cps.set_sanitizer(sanitizer());
    let host = TestHost::default();
    let mut ring = PacketWriter::ring(RING_PA, RING_VA, RING_SIZE, 2);
    let n = u64::from(RING_SIZE / 4);
    let mut cp_run = |cp: &mut CommandProcessor| {
        best(|| {
            let rptr = ring.wptr();
            for _ in 0..n {
                ring.nop(&s.mem, 1).unwrap();
            }
            let mut j = job(s.root, ring.wptr(), rptr);
            let t = Instant::now();
            let out = cp.run_slice(&host, &s.mem, &mut j);
            let d = t.elapsed();
            assert_eq!((out.end, out.stats.packets), (SliceEnd::Idle, n));
            d
        })
    };
    let d = cp_run(&mut cp);
    let ds = cp_run(&mut cps);
    println!(
        "nop: command processor: {:.1} M NOP packets/s ({} per run, {:.2} ms)",
        n as f64 / d.as_secs_f64() / 1e6,
        n,
        d.as_secs_f64() * 1e3
    );
    println!(
        "nop: command processor, --sanitize (every check): {:.1} M NOP packets/s, {:.2}x the time without",
        n as f64 / ds.as_secs_f64() / 1e6,
        ds.as_secs_f64() / d.as_secs_f64()
    );
    nop_device(n, None);
    let base = nop_device(n, None);
    let with = nop_device(n, Some(SanConfig::default().fetch_delay));
    let no_delay = nop_device(n, Some(std::time::Duration::ZERO));
    println!(
        "nop: whole device, --sanitize (every check): {:.2}x the time without; with the fetch delay at 0 (checks only) {:.2}x",
        with.as_secs_f64() / base.as_secs_f64(),
        no_delay.as_secs_f64() / base.as_secs_f64()
    );
}

/// Whole device: doorbell, engine thread, time slices, fence event, with
/// the sanitizer on (and this fetch delay) or off. A 1 MiB ring is filled
/// before the clock starts (NOPs, then a fence).
fn nop_device(n: u64, san: Option<std::time::Duration>) -> Duration {
    let mem = Mem::from_ranges(&[(GuestAddress(0), 64 << 20)]).unwrap();
    let dev = InProcess::new(DeviceConfig::new(Generation::Gen2, 4).unwrap(), &mem);
    if let Some(delay) = san {
        dev.device.gpu().sanitizer.configure(&SanConfig {
            checks: ALL_CHECKS,
            fetch_delay: delay,
            ..SanConfig::default()
        });
    }
    let mut drv = Driver::new(dev, mem, PhysAlloc::new(MIB, 63 * MIB)).unwrap();
    let mut ctx = drv.context(1, 1, 0).unwrap();
    drv.ring_of_size(&mut ctx, engine::COPY, RING_SIZE).unwrap();
    drv.buffer(&mut ctx, 0x20_0000, 4096, RW).unwrap();
    let nops = n - 6;
    let mut seq = 0;
    let d = best(|| {
        seq += 1;
        let ring = &mut ctx.ring(engine::COPY).unwrap().writer;
        for _ in 0..nops {
            ring.nop(&drv.mem, 1).unwrap();
        }
        ring.packet(
            &drv.mem,
            &Packet::Fence {
                va: 0x20_0000,
                seqno: seq,
                flags: 0,
            },
        )
        .unwrap();
        let wptr = ring.wptr();
        let t = Instant::now();
        drv.doorbell(1, engine::COPY, wptr).unwrap();
        match drv.event(Duration::from_secs(10)).unwrap() {
            Event::Fence { seqno, .. } if seqno == seq => {}
            other => panic!("{other:?}"),
        }
        t.elapsed()
    });
    if san.is_none() {
        println!(
            "nop: whole device (doorbell to fence event, {} packets per doorbell): {:.1} M packets/s ({:.2} ms)",
            nops + 1,
            (nops + 1) as f64 / d.as_secs_f64() / 1e6,
            d.as_secs_f64() * 1e3
        );
    } else {
        assert_eq!(
            drv.transport.device.gpu().sanitizer.counts().1,
            0,
            "no finding"
        );
    }
    d
}

fn main() {
    let which = std::env::args().nth(1).unwrap_or_default();
    println!(
        "host: {} cores; best of {RUNS} runs per line",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    if which.is_empty() || which == "copy" {
        bench_copy();
    }
    if which.is_empty() || which == "mmu" {
        bench_mmu();
    }
    if which.is_empty() || which == "nop" {
        bench_nop();
    }
}
