//! Each fault class through the whole model (in-process driver), and the
//! trigger rules.

use std::sync::Arc;
use std::time::{Duration, Instant};

use vgpu_hwif::event::{EngineErrorRecord, Event};
use vgpu_hwif::mmu::{PTE_READ, PTE_WRITE};
use vgpu_hwif::packet::{DispatchPacket, Packet};
use vgpu_hwif::proto::{engine, Command, Status};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use super::*;
use crate::config::{DeviceConfig, Generation};
use crate::core::gpu::Gpu;
use crate::core::Device;
use crate::testkit::{read_u64, Driver, GpuContext, InProcess, PhysAlloc};

const T: Duration = Duration::from_secs(5);
const QUIET: Duration = Duration::from_millis(150);
const DATA: u64 = 0x20_0000;

struct Rig {
    d: Driver<InProcess>,
    c: GpuContext,
    pa: u64,
    gpu: Arc<Gpu>,
    mem: GuestMemoryMmap,
}

fn rig(specs: &[&str]) -> Rig {
    let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 32 << 20)]).unwrap();
    let dev = Device::new(DeviceConfig::new(Generation::Gen2, 4).unwrap());
    let gpu = dev.gpu().clone();
    gpu.inject.set_seed(1);
    for s in specs {
        gpu.inject.arm(Spec::parse(s).unwrap(), 0);
    }
    let mut d = Driver::new(
        InProcess::with_device(dev, &mem),
        mem.clone(),
        PhysAlloc::new(0x10_0000, 30 << 20),
    )
    .unwrap();
    let mut c = d.context(1, 1, 0).unwrap();
    d.ring(&mut c, engine::COPY).unwrap();
    let pa = d
        .buffer(&mut c, DATA, 0x1_0000, PTE_READ | PTE_WRITE)
        .unwrap();
    Rig { d, c, pa, gpu, mem }
}

fn fence(va: u64, seqno: u64) -> Packet {
    Packet::Fence {
        va,
        seqno,
        flags: 0,
    }
}

/// Events until none arrives for `QUIET`.
fn events(d: &mut Driver<InProcess>) -> Vec<Event> {
    let mut out = Vec::new();
    while let Ok(e) = d.event(QUIET) {
        out.push(e);
    }
    out
}

fn fences(ev: &[Event]) -> Vec<u64> {
    ev.iter()
        .filter_map(|e| match e {
            Event::Fence { seqno, .. } => Some(*seqno),
            _ => None,
        })
        .collect()
}

fn injected(gpu: &Gpu) -> Vec<LogEntry> {
    gpu.inject
        .log(0)
        .into_iter()
        .filter(|e| e.kind == "inject")
        .collect()
}

#[test]
fn specs_parse_render_and_reject() {
    let s = Spec::parse("hang:engine=copy,packet=fence,after=3,p=0.5,count=2,ctx=4").unwrap();
    assert_eq!(s.class, Class::Hang);
    assert_eq!(s.trigger.engine, Some(0));
    assert_eq!(s.trigger.packet.as_deref(), Some("FENCE"));
    assert_eq!((s.trigger.after, s.trigger.count), (3, 2));
    assert_eq!(Spec::parse(&s.render()).unwrap(), s);
    assert_eq!(
        Spec::parse("reset-fail:attempts=3").unwrap().trigger.count,
        3
    );
    assert!(matches!(
        Spec::parse("melt"),
        Err(InjectError::UnknownClass(_))
    ));
    assert!(matches!(
        Spec::parse("hang:bogus=1"),
        Err(InjectError::UnknownKey(_))
    ));
    assert!(matches!(
        Spec::parse("hang:p=2"),
        Err(InjectError::BadValue { .. })
    ));
    // Packet and command names are hwif's; a misspelt one is refused
    // rather than never matching.
    assert_eq!(
        Spec::parse("hang:packet=copy_2d").unwrap().trigger.packet,
        Some("COPY_2D".to_owned())
    );
    assert_eq!(
        Spec::parse("control-busy:packet=doorbell")
            .unwrap()
            .trigger
            .packet,
        Some("DOORBELL".to_owned())
    );
    assert!(matches!(
        Spec::parse("hang:packet=COPY2D"),
        Err(InjectError::BadValue { .. })
    ));
    for c in Class::ALL {
        assert_eq!(Class::from_name(c.name()), Some(c));
    }
}

#[test]
fn reseeding_replays_the_draws_of_a_fresh_injector() {
    let draws = |inj: &Injector| {
        inj.arm(Spec::parse("throttle:p=0.5,count=0").unwrap(), 0);
        let mut g = inj.lock();
        let a = g.armed.last_mut().unwrap();
        (0..16).map(|_| a.rng.next_u64()).collect::<Vec<_>>()
    };
    let fresh = Injector::new();
    fresh.set_seed(9);
    let want = draws(&fresh);
    let reused = Injector::new();
    reused.set_seed(3);
    draws(&reused);
    reused.disarm(0).unwrap();
    reused.set_seed(9);
    assert_eq!(draws(&reused), want);
}

#[test]
fn a_recreated_context_replaying_the_same_ring_is_counted_again() {
    let mut r = rig(&["event-spurious:p=0,count=0"]);
    r.d.submit(&mut r.c, engine::COPY, &[fence(DATA, 1)])
        .unwrap();
    assert_eq!(fences(&events(&mut r.d)), vec![1]);
    assert_eq!(r.gpu.inject.status()[0].seen, 1);
    let destroy = Command::ContextDestroy {
        ctx_id: 1,
        flags: 0,
    };
    assert_eq!(r.d.status(destroy), Status::Ok);
    // Same id, same ring VA, same first packet: a new opportunity.
    let mut c = r.d.context(1, 1, 0).unwrap();
    r.d.ring(&mut c, engine::COPY).unwrap();
    r.d.buffer(&mut c, DATA, 0x1000, PTE_READ | PTE_WRITE)
        .unwrap();
    r.d.submit(&mut c, engine::COPY, &[fence(DATA, 1)]).unwrap();
    assert_eq!(fences(&events(&mut r.d)), vec![1]);
    assert_eq!(r.gpu.inject.status()[0].seen, 2);
}

#[test]
fn same_seed_same_injections() {
    let pattern = |seed: u64| {
        let mut g = Inner {
            seed,
            ..Inner::default()
        };
        g.armed.push(Armed {
            id: 1,
            spec: Spec::parse("throttle:p=0.3,count=0,after=2").unwrap(),
            armed_ns: 0,
            seen: 0,
            fired: 0,
            rng: Rng::new(seed),
        });
        (0..200).map(|_| g.opportunity(0, 0)).collect::<Vec<_>>()
    };
    let a = pattern(7);
    assert_eq!(a, pattern(7));
    assert_ne!(a, pattern(8));
    assert!(!a[0], "after=2: the first opportunity never fires");
    let n = a.iter().filter(|&&f| f).count();
    assert!((30..90).contains(&n), "{n} of 200 at p=0.3");
}

#[test]
fn count_limits_injections() {
    let mut r = rig(&["fence-event-drop:count=2"]);
    let packets: Vec<Packet> = (1..=4).map(|i| fence(DATA + 8 * i, i)).collect();
    r.d.submit(&mut r.c, engine::COPY, &packets).unwrap();
    assert_eq!(fences(&events(&mut r.d)), vec![3, 4]);
    assert_eq!(injected(&r.gpu).len(), 2);
}

#[test]
fn hang_holds_the_ring_until_engine_reset() {
    let mut r = rig(&["hang:packet=FENCE,after=2"]);
    r.d.submit(
        &mut r.c,
        engine::COPY,
        &[fence(DATA, 1), fence(DATA + 8, 2)],
    )
    .unwrap();
    assert_eq!(fences(&events(&mut r.d)), vec![1]);
    assert_eq!(read_u64(&r.mem, r.pa + 8).unwrap(), 0);
    assert_eq!(
        r.d.status(Command::EngineReset {
            engine: 0,
            hung_ctx: vgpu_hwif::proto::CTX_NONE
        }),
        Status::Ok
    );
    let log = r.gpu.inject.log(0);
    assert!(log.iter().any(|e| e.what == "ENGINE_RESET"), "{log:?}");
    assert!(log.iter().any(|e| e.what == "engine-reset-done"), "{log:?}");
    // The engine serves again.
    r.d.submit(&mut r.c, engine::COPY, &[fence(DATA + 16, 3)])
        .unwrap();
    let ev = events(&mut r.d);
    assert!(fences(&ev).contains(&3), "{ev:?}");
}

#[test]
fn fence_never_skips_value_and_event() {
    let mut r = rig(&["fence-never"]);
    r.d.submit(
        &mut r.c,
        engine::COPY,
        &[fence(DATA, 1), fence(DATA + 8, 2)],
    )
    .unwrap();
    assert_eq!(fences(&events(&mut r.d)), vec![2]);
    assert_eq!(read_u64(&r.mem, r.pa).unwrap(), 0);
    assert_eq!(read_u64(&r.mem, r.pa + 8).unwrap(), 2);
}

#[test]
fn fence_late_and_throttle_delay() {
    for spec in ["fence-late:delay_ms=200", "throttle:delay_ms=200"] {
        let mut r = rig(&[spec]);
        let t0 = Instant::now();
        r.d.submit(&mut r.c, engine::COPY, &[fence(DATA, 1)])
            .unwrap();
        assert!(matches!(
            r.d.event(T).unwrap(),
            Event::Fence { seqno: 1, .. }
        ));
        assert!(t0.elapsed() >= Duration::from_millis(200), "{spec}");
        assert_eq!(injected(&r.gpu).len(), 1, "{spec}");
    }
}

#[test]
fn fence_event_drop_writes_the_value() {
    let mut r = rig(&["fence-event-drop"]);
    r.d.submit(&mut r.c, engine::COPY, &[fence(DATA, 5)])
        .unwrap();
    assert_eq!(fences(&events(&mut r.d)), Vec::<u64>::new());
    assert_eq!(read_u64(&r.mem, r.pa).unwrap(), 5);
}

#[test]
fn duplicate_and_spurious_events() {
    let mut r = rig(&["event-duplicate"]);
    r.d.submit(&mut r.c, engine::COPY, &[fence(DATA, 5)])
        .unwrap();
    assert_eq!(fences(&events(&mut r.d)), vec![5, 5]);
    let mut r = rig(&["event-spurious"]);
    r.d.submit(&mut r.c, engine::COPY, &[fence(DATA, 6)])
        .unwrap();
    assert_eq!(fences(&events(&mut r.d)), vec![6, 6]);
}

#[test]
fn dma_corruption_flips_bits_in_the_destination() {
    let mut r = rig(&["dma-corrupt:bits=1"]);
    r.d.submit(
        &mut r.c,
        engine::COPY,
        &[
            Packet::Fill {
                dst: DATA,
                size: 4096,
                pattern: 0x5a5a_5a5a,
            },
            fence(DATA + 8192, 1),
        ],
    )
    .unwrap();
    assert_eq!(fences(&events(&mut r.d)), vec![1]);
    let mut buf = vec![0u8; 4096];
    r.mem.read_slice(&mut buf, GuestAddress(r.pa)).unwrap();
    let flipped: u32 = buf.iter().map(|b| (b ^ 0x5a).count_ones()).sum();
    assert_eq!(flipped, 1);
}

#[test]
fn mmu_fault_at_a_chosen_va() {
    let mut r = rig(&["mmu-fault:va=0x7770000"]);
    r.d.submit(&mut r.c, engine::COPY, &[fence(DATA, 1)])
        .unwrap();
    let ev = events(&mut r.d);
    assert!(
        ev.iter()
            .any(|e| matches!(e, Event::Fault { va: 0x777_0000, .. })),
        "{ev:?}"
    );
}

/// Copies `pages` pages from `DATA` to `dst` and waits for fence `seqno`.
fn copy_pages(r: &mut Rig, dst: u64, pages: u64, seqno: u64) {
    let copy = Packet::Copy {
        src: DATA,
        dst,
        size: pages * 4096,
    };
    r.d.submit(&mut r.c, engine::COPY, &[copy, fence(DATA + 0xf000, seqno)])
        .unwrap();
    assert!(fences(&events(&mut r.d)).contains(&seqno));
}

/// The first byte of each 4 KiB page of `pages` pages at `pa`.
fn page_marks(mem: &GuestMemoryMmap, pa: u64, pages: u64) -> Vec<u8> {
    (0..pages)
        .map(|i| mem.read_obj::<u8>(GuestAddress(pa + i * 4096)).unwrap())
        .collect()
}

#[test]
fn stale_tlb_serves_one_old_translation_once() {
    let mut r = rig(&["stale-tlb"]);
    const PAGES: u64 = 4;
    const DST: u64 = 0x80_0000;
    let dst_pa =
        r.d.buffer(&mut r.c, DST, PAGES * 4096, PTE_READ | PTE_WRITE)
            .unwrap();
    // Old pages: 0x10 + i; new pages (same VAs, after the remap): 0xa0 + i.
    let fresh =
        r.d.buffer(&mut r.c, 0x100_0000, PAGES * 4096, PTE_READ | PTE_WRITE)
            .unwrap();
    let mut new_pa = Vec::new();
    for i in 0..PAGES {
        r.mem
            .write_slice(&[0x10 + i as u8; 4096], GuestAddress(r.pa + i * 4096))
            .unwrap();
        let pa = fresh + i * 4096;
        r.mem
            .write_slice(&[0xa0 + i as u8; 4096], GuestAddress(pa))
            .unwrap();
        new_pa.push(pa);
    }
    // Caches the translations of the old pages.
    copy_pages(&mut r, DST, PAGES, 1);
    assert_eq!(
        page_marks(&r.mem, dst_pa, PAGES),
        vec![0x10, 0x11, 0x12, 0x13]
    );
    for (i, pa) in new_pa.iter().enumerate() {
        r.c.pt
            .map_4k(&r.mem, DATA + i as u64 * 4096, *pa, PTE_READ | PTE_WRITE)
            .unwrap();
    }
    let inv = Command::TlbInvalidate {
        ctx_id: 1,
        engine_mask: 0,
        va: DATA,
        size: PAGES * 4096,
    };
    assert_eq!(r.d.status(inv), Status::Ok);
    let log = injected(&r.gpu);
    assert_eq!(log.len(), 1, "{log:?}");
    assert_eq!(log[0].what, "stale-tlb");
    assert_eq!(log[0].ctx, 1);
    let va = u64::from_str_radix(
        log[0]
            .detail
            .split_whitespace()
            .find_map(|w| w.strip_prefix("va=0x"))
            .unwrap(),
        16,
    )
    .unwrap();
    let k = (va - DATA) / 4096;
    assert!(k < PAGES, "{}", log[0].detail);
    assert!(
        log[0]
            .detail
            .contains(&format!("stale_pa={:#x}", r.pa + k * 4096)),
        "{}",
        log[0].detail
    );
    // First access after the invalidation: page k is read from the old
    // page, every other page from its new one.
    copy_pages(&mut r, DST, PAGES, 2);
    let want: Vec<u8> = (0..PAGES)
        .map(|i| {
            if i == k {
                0x10 + i as u8
            } else {
                0xa0 + i as u8
            }
        })
        .collect();
    assert_eq!(page_marks(&r.mem, dst_pa, PAGES), want);
    // Second access: the stale translation is gone.
    copy_pages(&mut r, DST, PAGES, 3);
    assert_eq!(
        page_marks(&r.mem, dst_pa, PAGES),
        vec![0xa0, 0xa1, 0xa2, 0xa3]
    );
    // count=1: later invalidations are complete.
    assert_eq!(r.d.status(inv), Status::Ok);
    assert_eq!(injected(&r.gpu).len(), 1);
}

#[test]
fn stale_tlb_choice_follows_the_seed() {
    let mut tlb = crate::core::mmu::Tlb::new();
    for i in 0..8u64 {
        tlb.insert(
            1,
            crate::core::mmu::PageMapping {
                va_base: DATA + i * 4096,
                pa_base: 0x40_0000 + i * 4096,
                shift: 12,
                perms: PTE_READ,
                cache: 0,
            },
        );
    }
    let order = tlb.cached_in(1, DATA, 8 * 4096);
    assert_eq!(order.len(), 8);
    let kept = tlb.invalidate_keep_one(1, DATA, 8 * 4096, 11).unwrap();
    assert_eq!(kept, order[11 % 8]);
    assert!(tlb.cached_in(1, DATA, 8 * 4096).is_empty());
    // Nothing cached in the range: nothing kept.
    assert_eq!(tlb.invalidate_keep_one(1, 0x1000_0000, 4096, 3), None);
}

const ECC: u32 = vgpu_hwif::packet::EngineError::EccUncorrectable as u32;

fn engine_errors(ev: &[Event]) -> Vec<u32> {
    ev.iter()
        .filter_map(|e| match e {
            Event::EngineError(EngineErrorRecord { code, .. }) => Some(*code),
            _ => None,
        })
        .collect()
}

/// A second buffer of the rig's context, filled with `byte`.
fn dst_buffer(r: &mut Rig, va: u64, byte: u8) -> u64 {
    let pa =
        r.d.buffer(&mut r.c, va, 0x4000, PTE_READ | PTE_WRITE)
            .unwrap();
    r.mem
        .write_slice(&[byte; 0x4000], GuestAddress(pa))
        .unwrap();
    pa
}

#[test]
fn ecc_poisons_the_copy_source_and_the_copy_stops() {
    let mut r = rig(&["ecc:packet=COPY"]);
    const DST: u64 = 0x80_0000;
    let dst_pa = dst_buffer(&mut r, DST, 0x77);
    r.mem
        .write_slice(&[0x5a; 4096], GuestAddress(r.pa))
        .unwrap();
    let copy = Packet::Copy {
        src: DATA,
        dst: DST,
        size: 4096,
    };
    r.d.submit(&mut r.c, engine::COPY, &[copy, fence(DATA + 0x8000, 1)])
        .unwrap();
    let ev = events(&mut r.d);
    assert!(
        ev.iter().any(|e| matches!(
            e,
            Event::EccError { ctx_id: 1, engine: 0, va: DATA, pa, .. } if *pa == r.pa
        )),
        "{ev:?}"
    );
    assert_eq!(engine_errors(&ev), vec![ECC], "{ev:?}");
    assert_eq!(fences(&ev), Vec::<u64>::new(), "the ring stopped");
    let mut got = vec![0u8; 4096];
    r.mem.read_slice(&mut got, GuestAddress(dst_pa)).unwrap();
    assert!(got.iter().all(|&b| b == 0x77), "destination untouched");
    assert_eq!(r.gpu.inject.poison().pages(), vec![r.pa]);
    let log = injected(&r.gpu);
    assert!(
        log[0]
            .detail
            .contains(&format!("va={DATA:#x} pa={:#x}", r.pa)),
        "{}",
        log[0].detail
    );
    // Memory is not reset with the device.
    assert_eq!(r.d.status(Command::DeviceReset), Status::Ok);
    assert_eq!(r.gpu.inject.poison().pages(), vec![r.pa]);
}

#[test]
fn a_full_page_write_scrubs_the_poison_a_partial_one_does_not() {
    let mut r = rig(&[]);
    const DST: u64 = 0x80_0000;
    let dst_pa = dst_buffer(&mut r, DST, 0x77);
    let poison = r.gpu.inject.poison();
    poison.poison(r.pa);
    poison.poison(r.pa + 0x1000);
    let fill = |va: u64, size: u64| Packet::Fill {
        dst: va,
        size,
        pattern: 0x1122_3344,
    };
    let copy = |src: u64| Packet::Copy {
        src,
        dst: DST,
        size: 4096,
    };
    // Page 0: a full-page fill scrubs it, the copy then reads the fill.
    r.d.submit(
        &mut r.c,
        engine::COPY,
        &[fill(DATA, 4096), copy(DATA), fence(DATA + 0x8000, 1)],
    )
    .unwrap();
    let ev = events(&mut r.d);
    assert_eq!(
        (fences(&ev), engine_errors(&ev)),
        (vec![1], vec![]),
        "{ev:?}"
    );
    assert_eq!(read_u64(&r.mem, dst_pa).unwrap(), 0x1122_3344_1122_3344);
    assert_eq!(r.gpu.inject.poison().pages(), vec![r.pa + 0x1000]);
    // Page 1: half a page written, still poisoned.
    r.d.submit(
        &mut r.c,
        engine::COPY,
        &[
            fill(DATA + 0x1000, 2048),
            copy(DATA + 0x1000),
            fence(DATA + 0x8000, 2),
        ],
    )
    .unwrap();
    let ev = events(&mut r.d);
    assert_eq!(
        (fences(&ev), engine_errors(&ev)),
        (vec![], vec![ECC]),
        "{ev:?}"
    );
    assert_eq!(r.gpu.inject.poison().pages(), vec![r.pa + 0x1000]);
}

#[test]
fn a_kernel_load_from_a_poisoned_page_is_an_ecc_engine_error() {
    use vgpu_hwif::mmu::PTE_EXEC;
    let mut r = rig(&[]);
    const CODE: u64 = 0x100_0000;
    const ARGS: u64 = 0x108_0000;
    const IN: u64 = 0x110_0000;
    const OUT: u64 = 0x118_0000;
    r.d.ring(&mut r.c, engine::COMPUTE).unwrap();
    let code_pa =
        r.d.buffer(&mut r.c, CODE, 0x1_0000, PTE_READ | PTE_EXEC)
            .unwrap();
    let args_pa = r.d.buffer(&mut r.c, ARGS, 0x1000, PTE_READ).unwrap();
    let in_pa =
        r.d.buffer(&mut r.c, IN, 0x1000, PTE_READ | PTE_WRITE)
            .unwrap();
    let out_pa =
        r.d.buffer(&mut r.c, OUT, 0x1000, PTE_READ | PTE_WRITE)
            .unwrap();
    let m = vgpu_isa::assemble(
        ".kernel k\n.arg a ptr\n.arg b ptr\n    ldarg d0, [a]\n    ld.32 r2, [d0]\n    ldarg d4, [b]\n    st.32 [d4], r2\n    exit\n.end\n",
        2,
    )
    .unwrap();
    let image = m.to_bytes().unwrap();
    r.mem.write_slice(&image, GuestAddress(code_pa)).unwrap();
    let mut argv = Vec::new();
    argv.extend_from_slice(&IN.to_le_bytes());
    argv.extend_from_slice(&OUT.to_le_bytes());
    r.mem.write_slice(&argv, GuestAddress(args_pa)).unwrap();
    r.mem.write_obj(0xabcd_u32, GuestAddress(in_pa)).unwrap();
    let dispatch = Packet::Dispatch(DispatchPacket {
        module_va: CODE,
        module_size: image.len() as u32,
        kernel: 0,
        args_va: ARGS,
        args_size: argv.len() as u32,
        grid: [1, 1, 1],
        wg: [32, 1, 1],
        shared_size: 0,
    });
    // Unpoisoned: the kernel copies the word.
    r.d.submit(&mut r.c, engine::COMPUTE, &[dispatch, fence(DATA, 1)])
        .unwrap();
    assert_eq!(fences(&events(&mut r.d)), vec![1]);
    assert_eq!(r.mem.read_obj::<u32>(GuestAddress(out_pa)).unwrap(), 0xabcd);
    r.mem.write_obj(0_u32, GuestAddress(out_pa)).unwrap();
    r.gpu.inject.poison().poison(in_pa);
    r.d.submit(&mut r.c, engine::COMPUTE, &[dispatch, fence(DATA, 2)])
        .unwrap();
    let ev = events(&mut r.d);
    assert_eq!(
        (fences(&ev), engine_errors(&ev)),
        (vec![], vec![ECC]),
        "{ev:?}"
    );
    assert_eq!(r.mem.read_obj::<u32>(GuestAddress(out_pa)).unwrap(), 0);
}

#[test]
fn ecc_on_a_fence_poisons_the_ring_page_and_the_next_fetch_fails() {
    let mut r = rig(&["ecc:packet=FENCE"]);
    let vas =
        r.d.submit(&mut r.c, engine::COPY, &[fence(DATA, 1)])
            .unwrap();
    let ev = events(&mut r.d);
    // The fence itself was fetched before the poison: it completes.
    assert_eq!(fences(&ev), vec![1], "{ev:?}");
    assert!(
        ev.iter().any(|e| matches!(
            e,
            Event::EccError { va, packet_va, .. } if *va == vas[0] & !0xfff && *packet_va == vas[0]
        )),
        "{ev:?}"
    );
    r.d.submit(&mut r.c, engine::COPY, &[fence(DATA, 2)])
        .unwrap();
    let ev = events(&mut r.d);
    assert_eq!(
        (fences(&ev), engine_errors(&ev)),
        (vec![], vec![ECC]),
        "{ev:?}"
    );
}

#[test]
fn ecc_at_a_given_pa_and_the_control_socket_lists_and_clears_it() {
    let mut r = rig(&["ecc:pa=0x12345"]);
    r.d.submit(&mut r.c, engine::COPY, &[fence(DATA, 1)])
        .unwrap();
    let ev = events(&mut r.d);
    assert!(
        ev.iter()
            .any(|e| matches!(e, Event::EccError { pa: 0x12000, .. })),
        "{ev:?}"
    );
    let reply = crate::inject_ctl::handle_line(&r.gpu, "poisoned");
    assert_eq!(reply, format!("{{\"ok\":true,\"pages\":[{}]}}", 0x12000));
    let reply = crate::inject_ctl::handle_line(&r.gpu, "unpoison all");
    assert_eq!(reply, "{\"ok\":true,\"cleared\":1}");
    assert!(r.gpu.inject.poison().is_empty());
}

#[test]
fn event_overflow_loses_events() {
    let mut r = rig(&["event-overflow:events=300"]);
    r.d.submit(&mut r.c, engine::COPY, &[fence(DATA, 1)])
        .unwrap();
    std::thread::sleep(QUIET);
    let ev = events(&mut r.d);
    assert!(
        ev.iter().any(|e| matches!(e, Event::EventsLost { .. })),
        "{} events",
        ev.len()
    );
}

#[test]
fn lost_device_answers_device_lost_until_reset() {
    let mut r = rig(&["lost"]);
    r.d.submit(&mut r.c, engine::COPY, &[fence(DATA, 1)])
        .unwrap();
    assert_eq!(fences(&events(&mut r.d)), Vec::<u64>::new());
    assert_eq!(r.d.status(Command::Ping { cookie: 1 }), Status::DeviceLost);
    assert_eq!(r.d.status(Command::DeviceReset), Status::Ok);
    assert!(!r.gpu.inject.is_lost());
    assert_eq!(r.d.status(Command::Ping { cookie: 2 }), Status::Ok);
}

#[test]
fn reset_fails_its_first_attempts() {
    let mut r = rig(&["reset-fail:attempts=2"]);
    let reset = Command::EngineReset {
        engine: 0,
        hung_ctx: vgpu_hwif::proto::CTX_NONE,
    };
    assert_eq!(r.d.status(reset), Status::DeviceLost);
    assert_eq!(r.d.status(Command::DeviceReset), Status::DeviceLost);
    assert_eq!(r.d.status(reset), Status::Ok);
}

#[test]
fn control_busy_answers_busy() {
    let mut r = rig(&["control-busy:packet=PING"]);
    assert_eq!(r.d.status(Command::Ping { cookie: 1 }), Status::Busy);
    assert_eq!(r.d.status(Command::Ping { cookie: 2 }), Status::Ok);
    assert_eq!(injected(&r.gpu)[0].detail, "command=PING");
}

#[test]
fn reply_corrupt_flips_the_first_payload_bit_of_one_reply() {
    use vgpu_hwif::pod::Pod;
    let mut r = rig(&["reply-corrupt:packet=PING,count=1"]);
    let cookie = 0x5049_4e47_0000_0010u64;
    let ping = |d: &mut Driver<InProcess>| {
        let (st, bytes) = d.try_command(Command::Ping { cookie });
        assert_eq!(st, Status::Ok);
        vgpu_hwif::proto::PingReply::read_from(&bytes).unwrap()
    };
    let first = ping(&mut r.d);
    assert_eq!(
        first.cookie,
        cookie ^ 1,
        "the first reply's cookie is corrupted"
    );
    assert_ne!(first.event_seq, 0, "the command was executed");
    assert_eq!(
        ping(&mut r.d).cookie,
        cookie,
        "count=1: the next reply is intact"
    );
    assert_eq!(injected(&r.gpu)[0].detail, "command=PING");
    // A reply without payload is no opportunity.
    let mut r = rig(&["reply-corrupt:packet=DOORBELL_KICK,count=1"]);
    assert_eq!(r.d.status(Command::DoorbellKick), Status::Ok);
    assert!(injected(&r.gpu).is_empty());
}

#[test]
fn event_corrupt_flips_the_first_payload_bit_of_one_event_not_the_reply() {
    use vgpu_hwif::pod::Pod;
    let mut r = rig(&["event-corrupt:packet=PING,after=2,count=1"]);
    let cookie = 0x5049_4e47_0000_0020u64;
    let ping = |d: &mut Driver<InProcess>| {
        let (st, bytes) = d.try_command(Command::Ping { cookie });
        assert_eq!(st, Status::Ok);
        let reply = vgpu_hwif::proto::PingReply::read_from(&bytes).unwrap();
        let ev = d.event(Duration::from_secs(2)).unwrap();
        (reply.cookie, ev)
    };
    let (reply, ev) = ping(&mut r.d);
    assert_eq!(reply, cookie);
    assert_eq!(
        ev,
        Event::Ping { cookie },
        "after=2: the first event is intact"
    );
    let (reply, ev) = ping(&mut r.d);
    assert_eq!(reply, cookie, "the reply is never corrupted");
    assert_eq!(
        ev,
        Event::Ping { cookie: cookie ^ 1 },
        "the second event's cookie is corrupted"
    );
    let (_, ev) = ping(&mut r.d);
    assert_eq!(
        ev,
        Event::Ping { cookie },
        "count=1: the next event is intact"
    );
    assert_eq!(injected(&r.gpu).len(), 1);
    assert_eq!(injected(&r.gpu)[0].detail, "command=PING");
    // Only commands that post an event: IDENTIFY is no opportunity.
    let mut r = rig(&["event-corrupt:count=1"]);
    assert_eq!(r.d.status(Command::Identify), Status::Ok);
    assert!(injected(&r.gpu).is_empty());
}

#[test]
fn control_socket_protocol() {
    let r = rig(&[]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ctl.sock");
    let _ctl = crate::daemon::control::TestLoop::start(
        crate::daemon::ControlServer::bind(&path, r.gpu.clone()).unwrap(),
    );
    let mut s = std::os::unix::net::UnixStream::connect(&path).unwrap();
    let mut rd = std::io::BufReader::new(s.try_clone().unwrap());
    let mut ask = |line: &str| {
        use std::io::{BufRead, Write};
        writeln!(s, "{line}").unwrap();
        let mut reply = String::new();
        rd.read_line(&mut reply).unwrap();
        reply
    };
    let list = ask("list");
    assert!(list.contains("\"name\":\"stale-tlb\""), "{list}");
    assert_eq!(ask("seed 9"), "{\"ok\":true}\n");
    assert_eq!(
        ask("arm control-busy:packet=PING"),
        "{\"ok\":true,\"id\":1}\n"
    );
    assert!(ask("arm nope").starts_with("{\"ok\":false"));
    let st = ask("status");
    assert!(
        st.contains("\"seed\":9") && st.contains("control-busy"),
        "{st}"
    );
    let mut d = r.d;
    assert_eq!(d.status(Command::Ping { cookie: 1 }), Status::Busy);
    let log = ask("log");
    assert!(
        log.contains("\"what\":\"control-busy\"") && log.contains("\"wall_ns\":"),
        "{log}"
    );
    assert_eq!(ask("disarm 1"), "{\"ok\":true}\n");
    assert!(ask("disarm 1").starts_with("{\"ok\":false"));
    assert!(ask("status").contains("\"armed\":[]"));
}

/// Times in a specification are milliseconds; their conversion to device
/// nanoseconds saturates instead of overflowing in the engine thread.
#[test]
fn huge_times_in_a_spec_saturate() {
    // Not before the end of time: the fault never fires, the work runs.
    let mut r = rig(&["hang:at_ms=18446744073709551615"]);
    r.d.submit(&mut r.c, engine::COPY, &[fence(DATA, 1)])
        .unwrap();
    assert_eq!(fences(&events(&mut r.d)), vec![1]);
    assert!(injected(&r.gpu).is_empty());
    // Held for as long as the clock goes: the engine stays alive and
    // holds the packet (a reset would end the hold).
    let mut r = rig(&["throttle:delay_ms=18446744073709551615"]);
    r.d.submit(&mut r.c, engine::COPY, &[fence(DATA, 2)])
        .unwrap();
    assert_eq!(fences(&events(&mut r.d)), Vec::<u64>::new());
    assert_eq!(injected(&r.gpu).len(), 1);
    assert!(r.gpu.alive[engine::COPY as usize].load(std::sync::atomic::Ordering::Acquire));
}

#[test]
fn the_control_socket_captures_a_context_on_demand_and_saves_it() {
    let mut r = rig(&[]);
    r.d.submit(&mut r.c, engine::COPY, &[fence(DATA, 1)])
        .unwrap();
    let _ = events(&mut r.d);
    let reply = crate::inject_ctl::handle_line(&r.gpu, "capture 1 0");
    assert!(
        reply.starts_with("{\"ok\":true,\"id\":1,\"size\":"),
        "{reply}"
    );
    let list = crate::inject_ctl::handle_line(&r.gpu, "captures");
    assert!(
        list.contains("{\"id\":1,\"ctx\":1,\"engine\":0,\"reason\":\"on-demand\","),
        "{list}"
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cap.bin");
    let saved =
        crate::inject_ctl::handle_line(&r.gpu, &format!("capture-save 0 {}", path.display()));
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(saved, format!("{{\"ok\":true,\"size\":{}}}", bytes.len()));
    assert_eq!(
        bytes.get(..8),
        Some(&vgpu_hwif::capture::MAGIC.to_le_bytes()[..])
    );
    for bad in [
        "capture",
        "capture 9 0",
        "capture 1 7",
        "capture-save 5 /tmp/x",
        "capture-save 0",
    ] {
        let reply = crate::inject_ctl::handle_line(&r.gpu, bad);
        assert!(
            reply.starts_with("{\"ok\":false,\"error\":"),
            "{bad}: {reply}"
        );
    }
}
