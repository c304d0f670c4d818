//! The driver sanitizer, host side: for every check a planted driver bug —
//! the testkit `Driver` programming the device the wrong way — and the
//! exact report it gets (id and fields, through the `SANITIZER` event and
//! `SAN_REPORT`), and the same scenario done right, which gets none.

use std::time::{Duration, Instant};

use vgpu_device::config::{DeviceConfig, Generation};
use vgpu_device::core::sanitize::{SanConfig, Sanitizer, ALL_CHECKS};
use vgpu_device::testkit::{write_u64, Driver, GpuContext, InProcess, PacketWriter, PhysAlloc};
use vgpu_hwif::event::{EngineErrorRecord, Event};
use vgpu_hwif::mmu::{Access, Pte, PTE_EXEC, PTE_READ, PTE_WRITE};
use vgpu_hwif::packet::{
    encode_header, DispatchPacket, EngineError, Packet, OP_FENCE, SEM_SIGNAL_WRITE, SEM_WAIT_GEQ,
};
use vgpu_hwif::proto::{engine, ring_state, Command, Status, DESTROY_FLAG_FORCE, PRIORITY_HIGH};
use vgpu_hwif::sanitize::{
    ring_index, teardown, wait, Check, SanReport, SAN_FLAG_MOVED, SAN_FLAG_OBJECT, SAN_FLAG_PACKET,
    SAN_FLAG_PRIOR, SAN_FLAG_STOPPED, SAN_KIND_SHIFT,
};
use vm_memory::{GuestAddress, GuestMemoryMmap};

const T: Duration = Duration::from_secs(10);
const RW: u64 = PTE_READ | PTE_WRITE;
const RX: u64 = PTE_READ | PTE_EXEC;
const COPY: u32 = engine::COPY;
const COMPUTE: u32 = engine::COMPUTE;
/// Guest RAM and the range the driver allocates from.
const RAM: u64 = 96 << 20;
const ALLOC: u64 = 0x10_0000;
/// Buffers.
const SRC: u64 = 0x20_0000;
const DST: u64 = 0x30_0000;
const SEM: u64 = 0x40_0000;
const CB: u64 = 0x50_0000;
const FILL: u64 = 0x60_0000;
const CODE: u64 = 0x70_0000;
const ARGS: u64 = 0x78_0000;
const BUF: u64 = 0x80_0000;

type D = Driver<InProcess>;

fn rig_with(cfg: SanConfig) -> D {
    let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), RAM as usize)]).unwrap();
    let dev = InProcess::new(DeviceConfig::new(Generation::Gen1, 2).unwrap(), &mem);
    dev.device.gpu().sanitizer.configure(&cfg);
    Driver::new(dev, mem, PhysAlloc::new(ALLOC, RAM - ALLOC)).unwrap()
}

fn cfg() -> SanConfig {
    SanConfig {
        checks: ALL_CHECKS,
        stop: false,
        fetch_delay: Duration::from_millis(30),
        wait_grace: Duration::from_millis(60),
        starve: Duration::from_millis(200),
    }
}

fn rig() -> D {
    rig_with(cfg())
}

fn san(d: &D) -> &Sanitizer {
    &d.transport.device.gpu().sanitizer
}

/// Reports made so far.
fn reports(d: &D) -> u64 {
    san(d).counts().1
}

/// Events until the next `SANITIZER` one; returns it, its report, and
/// the other events seen before it.
fn next_report(d: &mut D) -> (Event, SanReport, Vec<Event>) {
    let mut others = Vec::new();
    loop {
        let ev = d.event(T).expect("a sanitizer report");
        if let Event::Sanitizer { seq, .. } = ev {
            let r = d.san_report(seq).unwrap();
            // VGPU_SAN_PRINT=1: the report as the device logs it (the
            // examples in docs/sanitizer.md come from here).
            if std::env::var_os("VGPU_SAN_PRINT").is_some() {
                if let Some(rep) = san(d).log().get(seq) {
                    eprintln!("sanitizer: {}", rep.line());
                }
            }
            return (ev, r, others);
        }
        others.push(ev);
    }
}

fn kind(r: &SanReport) -> u32 {
    r.flags >> SAN_KIND_SHIFT & 0xff
}

/// Events until a `FENCE` with `seqno` on (`ctx`, `e`).
fn wait_fence(d: &mut D, ctx: u32, e: u32, seqno: u64) -> Vec<Event> {
    let mut seen = Vec::new();
    loop {
        let ev = d
            .event(T)
            .unwrap_or_else(|e| panic!("fence {seqno}: {e}; saw {seen:?}"));
        if let Event::Fence {
            ctx_id,
            engine,
            seqno: s,
            ..
        } = ev
        {
            if (ctx_id, engine, s) == (ctx, e, seqno) {
                return seen;
            }
        }
        seen.push(ev);
    }
}

fn fence(va: u64, seqno: u64) -> Packet {
    Packet::Fence {
        va,
        seqno,
        flags: 0,
    }
}

fn ctx_with(d: &mut D, id: u32, engines: &[u32]) -> GpuContext {
    let mut c = d.context(id, 1, 0).unwrap();
    for &e in engines {
        d.ring(&mut c, e).unwrap();
    }
    d.buffer(&mut c, SEM, 0x1000, RW).unwrap();
    c
}

fn words_of(p: &Packet) -> Vec<u32> {
    let mut w = [0u32; 16];
    let n = p.encode(1, &mut w).unwrap();
    w[..n].to_vec()
}

// --- SAN-RING-UNPUBLISHED ------------------------------------------------

#[test]
fn ring_doorbell_before_the_packet_write_is_reported() {
    let mut d = rig();
    let mut c = ctx_with(&mut d, 1, &[COPY]);
    let f = fence(SEM, 1);
    let mut w: PacketWriter = c.ring(COPY).unwrap().writer.clone();
    // The bug: DOORBELL first, the packet after.
    d.doorbell(1, COPY, 24).unwrap();
    w.packet(&d.mem, &f).unwrap();
    let (ev, r, _) = next_report(&mut d);
    assert!(matches!(
        ev,
        Event::Sanitizer {
            check: 1,
            ctx_id: 1,
            engine: 0,
            ..
        }
    ));
    assert_eq!(r.check(), Some(Check::RingUnpublished));
    assert_eq!((r.ctx_id, r.engine, r.rptr, r.depth), (1, COPY, 0, 0));
    let header = encode_header(1, OP_FENCE, 6);
    assert_eq!(r.detail[0], 0, "the first word changed");
    assert_eq!(
        r.detail[1],
        u64::from(header) << 32,
        "0 at the doorbell, the header when fetched"
    );
    assert_eq!(r.detail[2], 24, "the doorbell that published it");
    assert_eq!(
        r.packet_words(),
        words_of(&f).as_slice(),
        "the packet as fetched"
    );
    assert_eq!(r.access, Access::Execute as u32);
    assert_ne!(r.flags & SAN_FLAG_PRIOR, 0);
    // Report only: the ring went on with what it fetched.
    wait_fence(&mut d, 1, COPY, 1);
    assert_eq!(reports(&d), 1);
}

#[test]
fn ring_packets_written_before_the_doorbell_are_clean() {
    let mut d = rig();
    let mut c = ctx_with(&mut d, 1, &[COPY]);
    for s in 1..=3 {
        d.submit(&mut c, COPY, &[Packet::Nop { words: 3 }, fence(SEM, s)])
            .unwrap();
        wait_fence(&mut d, 1, COPY, s);
    }
    assert_eq!(reports(&d), 0);
}

#[test]
fn ring_word_changed_on_a_later_page_of_a_wrapping_ring_is_reported() {
    // A 4-page ring; the second job wraps past the ring's end and covers
    // pages 3, 0 and 1: the doorbell's snapshot spans pages and the wrap.
    let mut d = rig();
    let mut c = d.context(1, 1, 0).unwrap();
    d.ring_of_size(&mut c, COPY, 0x4000).unwrap();
    d.buffer(&mut c, SEM, 0x1000, RW).unwrap();
    let nops = [Packet::Nop { words: 1024 }; 3];
    let mut job = nops.to_vec();
    job.push(fence(SEM, 1));
    d.submit(&mut c, COPY, &job).unwrap();
    wait_fence(&mut d, 1, COPY, 1);
    assert_eq!(reports(&d), 0);
    let mut w: PacketWriter = c.ring(COPY).unwrap().writer.clone();
    assert_eq!(w.wptr(), 3 * 4096 + 24);
    w.nop(&d.mem, 1024).unwrap();
    w.nop(&d.mem, 1024).unwrap();
    w.packet(&d.mem, &fence(SEM, 2)).unwrap();
    d.doorbell(1, COPY, w.wptr()).unwrap();
    // The bug: a published word (in the second NOP, on ring page 1)
    // changes after the doorbell.
    let changed = 4 * 4096 + 4100;
    let mut late = w.clone();
    late.set_wptr(changed);
    late.words(&d.mem, &[0xdead_beef]).unwrap();
    let (_, r, _) = next_report(&mut d);
    assert_eq!(r.check(), Some(Check::RingUnpublished));
    assert_eq!(r.detail[0], u64::from(changed), "the word that changed");
    assert_eq!(
        r.detail[1],
        0xdead_beef_u64 << 32,
        "0 published, then the new word"
    );
    wait_fence(&mut d, 1, COPY, 2);
    assert_eq!(reports(&d), 1, "no other word of the three pages differs");
}

// --- SAN-RING-INDEX --------------------------------------------------------

#[test]
fn ring_write_pointer_backwards_is_reported_with_the_last_doorbells() {
    let mut d = rig();
    let mut c = ctx_with(&mut d, 1, &[COPY]);
    d.submit(&mut c, COPY, &[fence(SEM, 1)]).unwrap();
    wait_fence(&mut d, 1, COPY, 1);
    d.doorbell(1, COPY, 16).unwrap();
    let (_, r, _) = next_report(&mut d);
    assert_eq!(r.check(), Some(Check::RingIndex));
    assert_eq!(kind(&r), ring_index::BACKWARDS);
    assert_eq!(
        r.detail,
        [16, 24, 24, 16384],
        "new, accepted wptr, rptr, size"
    );
    assert_eq!(
        &r.history[..2],
        &[24, 16],
        "the last doorbells, oldest first"
    );
    let ev = d.event(T).unwrap();
    assert!(
        matches!(ev, Event::EngineError(EngineErrorRecord { code, .. }) if code == EngineError::BadPointer as u32),
        "{ev:?}"
    );
}

#[test]
fn ring_doorbell_inside_a_packet_is_reported() {
    let mut d = rig();
    let mut c = ctx_with(&mut d, 2, &[COPY]);
    let mut w = c.ring(COPY).unwrap().writer.clone();
    w.packet(&d.mem, &fence(SEM, 1)).unwrap();
    d.doorbell(2, COPY, 12).unwrap();
    let (_, r, _) = next_report(&mut d);
    assert_eq!(
        (r.check(), kind(&r)),
        (Some(Check::RingIndex), ring_index::MID_PACKET)
    );
    assert_eq!(
        r.detail,
        [12, 0, 6, 12],
        "wptr, rptr, packet words, bytes available"
    );
    assert_eq!(r.packet_words(), &[encode_header(1, OP_FENCE, 6)]);
    let ev = d.event(T).unwrap();
    assert!(
        matches!(ev, Event::EngineError(EngineErrorRecord { code, .. }) if code == EngineError::Truncated as u32)
    );
}

#[test]
fn ring_overrun_of_unread_packets_is_reported() {
    let mut d = rig();
    let mut c = ctx_with(&mut d, 3, &[COPY]);
    // The ring blocks on a semaphore with 12 KiB published; the engine has
    // read 8 KiB of it (its prefetch). A doorbell a whole ring further on
    // says the driver overwrote packets the engine has not read.
    let mut packets = vec![sem_wait(SEM, 1)];
    packets.extend((0..3).map(|_| Packet::Nop { words: 1024 }));
    d.submit(&mut c, COPY, &packets).unwrap();
    d.wait_status(&c, COPY, T, |s| s.state == ring_state::SEM_WAIT)
        .unwrap();
    let new = 8192 + 16384 + 64;
    d.doorbell(3, COPY, new).unwrap();
    let (_, r, _) = next_report(&mut d);
    assert_eq!(
        (r.check(), kind(&r)),
        (Some(Check::RingIndex), ring_index::OVERRUN)
    );
    assert_eq!(
        r.detail,
        [u64::from(new), 8192, 0, 16384],
        "wptr, oldest unread, rptr, size"
    );
    assert_eq!(r.history[..2], [24 + 3 * 4096, new]);
    // The engine then refuses the pointer; no second report.
    let ev = d.event(T).unwrap();
    assert!(
        matches!(ev, Event::EngineError(EngineErrorRecord { code, .. }) if code == EngineError::RingOverflow as u32)
    );
    assert_eq!(reports(&d), 1);
}

#[test]
fn ring_valid_doorbells_are_clean() {
    let mut d = rig();
    let mut c = ctx_with(&mut d, 1, &[COPY]);
    // Wrap the ring several times with whole packets.
    for s in 1..=900u64 {
        d.submit(&mut c, COPY, &[Packet::Nop { words: 4 }, fence(SEM, s)])
            .unwrap();
        if s % 100 == 0 {
            wait_fence(&mut d, 1, COPY, s);
        }
    }
    let _ = d.settle(&c, COPY, T).unwrap();
    assert_eq!(reports(&d), 0);
}

// --- SAN-TLB-STALE ---------------------------------------------------------

/// A context with a copy ring, SRC and DST of a page each; one copy done
/// (the TLB holds SRC and DST).
fn copied_once(d: &mut D, id: u32) -> (GpuContext, u64) {
    let mut c = ctx_with(d, id, &[COPY]);
    let src_pa = d.buffer(&mut c, SRC, 0x1000, RW).unwrap();
    d.buffer(&mut c, DST, 0x1000, RW).unwrap();
    copy(d, &mut c, 1);
    (c, src_pa)
}

/// Copies SRC to DST and waits for its fence: the events seen before it.
fn copy(d: &mut D, c: &mut GpuContext, seqno: u64) -> Vec<Event> {
    d.submit(
        c,
        COPY,
        &[
            Packet::Copy {
                src: SRC,
                dst: DST,
                size: 64,
            },
            fence(SEM, seqno),
        ],
    )
    .unwrap();
    wait_fence(d, c.id, COPY, seqno)
}

#[test]
fn tlb_entry_changed_without_invalidation_is_reported() {
    let mut d = rig();
    let (mut c, old_pa) = copied_once(&mut d, 1);
    let new_pa = d.alloc.page(&d.mem).unwrap();
    let slot = c.pt.entry_addr(SRC, 0).unwrap();
    let old = Pte::leaf(old_pa, RW, vgpu_hwif::mmu::CachePolicy::Cached).bits();
    // The bug: the entry changes, no TLB_INVALIDATE.
    c.pt.map_4k(&d.mem, SRC, new_pa, RW).unwrap();
    let new = Pte::leaf(new_pa, RW, vgpu_hwif::mmu::CachePolicy::Cached).bits();
    d.submit(
        &mut c,
        COPY,
        &[Packet::Copy {
            src: SRC,
            dst: DST,
            size: 64,
        }],
    )
    .unwrap();
    let (_, r, _) = next_report(&mut d);
    assert_eq!(r.check(), Some(Check::TlbStale));
    assert_eq!((r.ctx_id, r.engine), (1, COPY));
    assert_eq!(
        (r.access, r.va, r.pa),
        (Access::Read as u32, SRC, old_pa),
        "the stale page"
    );
    assert_eq!(
        &r.detail[..3],
        &[slot, old, new],
        "entry address, cached, now"
    );
    assert_ne!(r.flags & SAN_FLAG_PACKET, 0);
    let p = Packet::Copy {
        src: SRC,
        dst: DST,
        size: 64,
    };
    assert_eq!(
        r.packet_words(),
        words_of(&p).as_slice(),
        "the COPY that hit"
    );
}

/// Each finding is reported once per context, and a context created later
/// in the slot is a new context: the same mistake, made again by it (a
/// student's driver run test after test), is reported again.
#[test]
fn tlb_stale_finding_is_reported_once_per_context_and_again_for_a_new_context() {
    let mut d = rig();
    // Remaps SRC without TLB_INVALIDATE, copies from it: the reports made.
    let stale_copy = |d: &mut D, c: &mut GpuContext, seqno: u64| -> Vec<SanReport> {
        let new_pa = d.alloc.page(&d.mem).unwrap();
        c.pt.map_4k(&d.mem, SRC, new_pa, RW).unwrap();
        copy(d, c, seqno)
            .into_iter()
            .filter_map(|ev| match ev {
                Event::Sanitizer { seq, .. } => Some(d.san_report(seq).unwrap()),
                _ => None,
            })
            .collect()
    };
    let stale = |r: &[SanReport]| -> Vec<(Option<Check>, u32, u64)> {
        r.iter().map(|r| (r.check(), r.ctx_id, r.va)).collect()
    };
    let (mut c, _) = copied_once(&mut d, 1);
    let r = stale_copy(&mut d, &mut c, 2);
    assert_eq!(stale(&r), [(Some(Check::TlbStale), 1, SRC)]);
    // The same page again in the same context: already told.
    let r = stale_copy(&mut d, &mut c, 3);
    assert_eq!(stale(&r), [], "one report per finding of a context");
    // The fence is written before the engine lets go of the ring: a
    // destroy right after it may still be refused as busy.
    let destroyed = (0..200).any(|_| {
        let r = d.command(Command::ContextDestroy {
            ctx_id: 1,
            flags: 0,
        });
        r.is_ok() || {
            std::thread::sleep(std::time::Duration::from_millis(10));
            false
        }
    });
    assert!(destroyed, "context 1 destroyed once idle");
    let (mut c, _) = copied_once(&mut d, 1);
    let r = stale_copy(&mut d, &mut c, 2);
    assert_eq!(
        stale(&r),
        [(Some(Check::TlbStale), 1, SRC)],
        "the new context's own mistake"
    );
}

#[test]
fn tlb_entry_changed_and_invalidated_is_clean() {
    let mut d = rig();
    let (mut c, _) = copied_once(&mut d, 1);
    let new_pa = d.alloc.page(&d.mem).unwrap();
    c.pt.map_4k(&d.mem, SRC, new_pa, RW).unwrap();
    d.command(Command::TlbInvalidate {
        ctx_id: 1,
        engine_mask: 0,
        va: SRC,
        size: 0x1000,
    })
    .unwrap();
    copy(&mut d, &mut c, 2);
    assert_eq!(reports(&d), 0);
}

#[test]
fn stop_mode_stops_the_ring_on_a_finding() {
    let mut d = rig_with(SanConfig {
        stop: true,
        ..cfg()
    });
    let (mut c, _) = copied_once(&mut d, 1);
    let new_pa = d.alloc.page(&d.mem).unwrap();
    c.pt.map_4k(&d.mem, SRC, new_pa, RW).unwrap();
    d.submit(
        &mut c,
        COPY,
        &[
            Packet::Copy {
                src: SRC,
                dst: DST,
                size: 64,
            },
            fence(SEM, 2),
        ],
    )
    .unwrap();
    let (ev, r, _) = next_report(&mut d);
    assert!(matches!(ev, Event::Sanitizer { flags, .. } if flags & SAN_FLAG_STOPPED != 0));
    assert_ne!(r.flags & SAN_FLAG_STOPPED, 0);
    let ev = d.event(T).unwrap();
    assert!(
        matches!(ev, Event::EngineError(EngineErrorRecord { code, .. }) if code == EngineError::Sanitizer as u32),
        "{ev:?}"
    );
    let s = d.settle(&c, COPY, T).unwrap();
    assert_eq!(
        (s.state, s.error),
        (ring_state::STOPPED, EngineError::Sanitizer as u32)
    );
}

// --- SAN-TLB-INV-ORDER -----------------------------------------------------

#[test]
fn page_reused_before_its_invalidation_is_reported() {
    let mut d = rig();
    let (mut c1, page) = copied_once(&mut d, 1);
    // The bug: unmap, give the page to another context (which uses it),
    // and only then invalidate.
    c1.pt.unmap(&d.mem, SRC).unwrap();
    let mut c2 = ctx_with(&mut d, 2, &[COPY]);
    const Y: u64 = 0x90_0000;
    c2.pt.map_4k(&d.mem, Y, page, RW).unwrap();
    d.buffer(&mut c2, DST, 0x1000, RW).unwrap();
    d.submit(
        &mut c2,
        COPY,
        &[
            Packet::Copy {
                src: Y,
                dst: DST,
                size: 64,
            },
            fence(SEM, 1),
        ],
    )
    .unwrap();
    wait_fence(&mut d, 2, COPY, 1);
    d.command(Command::TlbInvalidate {
        ctx_id: 1,
        engine_mask: 0,
        va: SRC,
        size: 0x1000,
    })
    .unwrap();
    let (_, r, _) = next_report(&mut d);
    assert_eq!(r.check(), Some(Check::TlbInvOrder));
    assert_eq!((r.ctx_id, r.engine, r.va, r.pa), (1, COPY, SRC, page));
    assert_eq!(
        (r.prior_ctx, r.detail[0], r.detail[1], r.detail[3]),
        (2, page, Y, 0)
    );
}

#[test]
fn page_reused_after_its_invalidation_is_clean() {
    let mut d = rig();
    let (mut c1, page) = copied_once(&mut d, 1);
    c1.pt.unmap(&d.mem, SRC).unwrap();
    d.command(Command::TlbInvalidate {
        ctx_id: 1,
        engine_mask: 0,
        va: SRC,
        size: 0x1000,
    })
    .unwrap();
    let mut c2 = ctx_with(&mut d, 2, &[COPY]);
    c2.pt.map_4k(&d.mem, 0x90_0000, page, RW).unwrap();
    d.buffer(&mut c2, DST, 0x1000, RW).unwrap();
    d.submit(
        &mut c2,
        COPY,
        &[
            Packet::Copy {
                src: 0x90_0000,
                dst: DST,
                size: 64,
            },
            fence(SEM, 1),
        ],
    )
    .unwrap();
    wait_fence(&mut d, 2, COPY, 1);
    assert_eq!(reports(&d), 0);
}

// --- SAN-CMDBUF-UNMAPPED ---------------------------------------------------

/// A context whose copy ring executes a command buffer blocked on SEM.
fn blocked_in_cmdbuf(d: &mut D) -> (GpuContext, u64) {
    let mut c = ctx_with(d, 1, &[COPY]);
    let pa = d.buffer(&mut c, CB, 0x1000, RX).unwrap();
    let mut cb = PacketWriter::buffer(pa, CB, 0x1000, 1);
    cb.packet(
        &d.mem,
        &Packet::SemWait {
            va: SEM,
            value: 1,
            op: SEM_WAIT_GEQ,
        },
    )
    .unwrap();
    cb.packet(&d.mem, &fence(SEM + 8, 7)).unwrap();
    d.submit(
        &mut c,
        COPY,
        &[
            Packet::Indirect {
                va: CB,
                size: cb.wptr(),
            },
            fence(SEM + 8, 8),
        ],
    )
    .unwrap();
    d.wait_status(&c, COPY, T, |s| s.state == ring_state::SEM_WAIT)
        .unwrap();
    (c, pa)
}

#[test]
fn command_buffer_unmapped_while_executing_is_reported() {
    let mut d = rig();
    let (mut c, pa) = blocked_in_cmdbuf(&mut d);
    let slot = c.pt.entry_addr(CB, 0).unwrap();
    let old = Pte::leaf(pa, RX, vgpu_hwif::mmu::CachePolicy::Cached).bits();
    c.pt.unmap(&d.mem, CB).unwrap();
    d.command(Command::TlbInvalidate {
        ctx_id: 1,
        engine_mask: 0,
        va: CB,
        size: 0x1000,
    })
    .unwrap();
    let (_, r, _) = next_report(&mut d);
    assert_eq!(r.check(), Some(Check::CmdbufUnmapped));
    assert_eq!((r.ctx_id, r.engine), (1, COPY));
    assert_eq!((r.access, r.va, r.pa), (Access::Execute as u32, CB, pa));
    assert_eq!(r.detail, [slot, old, 0, CB], "entry, then, now, buffer");
}

#[test]
fn command_buffer_kept_mapped_is_clean() {
    let mut d = rig();
    let (_c, _) = blocked_in_cmdbuf(&mut d);
    let sem_pa = {
        let c = &_c;
        c.pt.translate(&d.mem, SEM).unwrap()
    };
    write_u64(&d.mem, sem_pa, 1).unwrap();
    wait_fence(&mut d, 1, COPY, 8);
    assert_eq!(reports(&d), 0);
}

/// A command buffer whose ring an engine error stopped half way is no longer
/// executing: the driver may unmap it (as the KMD does when it tears the
/// errored job down), and the invalidation that follows reports nothing.
#[test]
fn command_buffer_of_a_stopped_ring_may_be_unmapped() {
    let mut d = rig();
    let mut c = ctx_with(&mut d, 1, &[COPY]);
    let pa = d.buffer(&mut c, CB, 0x1000, RX).unwrap();
    let mut cb = PacketWriter::buffer(pa, CB, 0x1000, 1);
    cb.packet(&d.mem, &fence(SEM + 8, 7)).unwrap();
    cb.words(&d.mem, &[0xdead_beef]).unwrap();
    d.submit(
        &mut c,
        COPY,
        &[Packet::Indirect {
            va: CB,
            size: cb.wptr(),
        }],
    )
    .unwrap();
    // The buffer's fence, then the error.
    let ev = d.event(T).unwrap();
    assert!(matches!(ev, Event::Fence { seqno: 7, .. }), "{ev:?}");
    let ev = d.event(T).unwrap();
    assert!(matches!(ev, Event::EngineError { .. }), "{ev:?}");
    d.wait_status(&c, COPY, T, |s| s.state == ring_state::STOPPED)
        .unwrap();
    c.pt.unmap(&d.mem, CB).unwrap();
    d.command(Command::TlbInvalidate {
        ctx_id: 1,
        engine_mask: 0,
        va: CB,
        size: 0x1000,
    })
    .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(reports(&d), 0);
}

// --- SAN-FENCE-REGRESS / SAN-FENCE-WRAP -----------------------------------

#[test]
fn fence_written_backwards_is_reported() {
    let mut d = rig();
    let mut c = ctx_with(&mut d, 1, &[COPY]);
    let vas = d
        .submit(&mut c, COPY, &[fence(SEM, 5), fence(SEM, 3)])
        .unwrap();
    let (_, r, _) = next_report(&mut d);
    assert_eq!(r.check(), Some(Check::FenceRegress));
    let sem_pa = c.pt.translate(&d.mem, SEM).unwrap();
    assert_eq!(r.detail, [3, 5, SEM, sem_pa], "new, old, va, pa");
    assert_eq!((r.packet_va, r.prior_packet_va), (vas[1], vas[0]));
    assert_eq!((r.access, r.va), (Access::Write as u32, SEM));
}

#[test]
fn fence_counters_that_wrap_are_reported() {
    let mut d = rig();
    let mut c = ctx_with(&mut d, 1, &[COPY]);
    d.submit(&mut c, COPY, &[fence(SEM, 0xffff_fff0), fence(SEM, 2)])
        .unwrap();
    let (_, r, _) = next_report(&mut d);
    assert_eq!(
        (r.check(), r.detail[0], r.detail[1]),
        (Some(Check::FenceWrap), 2, 0xffff_fff0)
    );
    d.submit(&mut c, COPY, &[fence(SEM + 8, u64::MAX - 10)])
        .unwrap();
    let (_, r, _) = next_report(&mut d);
    assert_eq!(
        (r.check(), r.detail[0]),
        (Some(Check::FenceWrap), u64::MAX - 10)
    );
}

#[test]
fn fences_in_order_are_clean() {
    let mut d = rig();
    let mut c = ctx_with(&mut d, 1, &[COPY]);
    d.submit(&mut c, COPY, &[fence(SEM, 3), fence(SEM, 5), fence(SEM, 5)])
        .unwrap();
    wait_fence(&mut d, 1, COPY, 5);
    wait_fence(&mut d, 1, COPY, 5);
    let _ = d.settle(&c, COPY, T).unwrap();
    // A new context starts its seqnos again.
    d.command(Command::ContextDestroy {
        ctx_id: 1,
        flags: 0,
    })
    .unwrap();
    let mut c = ctx_with(&mut d, 1, &[COPY]);
    d.submit(&mut c, COPY, &[fence(SEM, 1)]).unwrap();
    wait_fence(&mut d, 1, COPY, 1);
    assert_eq!(reports(&d), 0);
}

// --- SAN-XENGINE-HAZARD ----------------------------------------------------

/// vecadd of `n` floats: reads BUF and BUF + 1 MiB, writes BUF + 2 MiB.
fn vecadd(d: &mut D, c: &mut GpuContext, n: u32) -> Packet {
    let src = std::fs::read_to_string(format!(
        "{}/../isa/samples/vecadd.s",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let m = vgpu_isa::assemble(&src, 1).unwrap();
    let image = m.to_bytes().unwrap();
    let k = m.kernel("vecadd").unwrap();
    let mut argv = vec![0u8; k.arg_size as usize];
    for (name, v) in [
        ("n", u64::from(n)),
        ("a", BUF),
        ("b", BUF + (1 << 20)),
        ("c", BUF + (2 << 20)),
    ] {
        let a = k.args.iter().find(|a| a.name == name).unwrap();
        argv[a.offset as usize..(a.offset + a.size) as usize]
            .copy_from_slice(&v.to_le_bytes()[..a.size as usize]);
    }
    let code_pa = d.buffer(c, CODE, 0x1_0000, RX).unwrap();
    vm_memory::Bytes::write_slice(&d.mem, &image, GuestAddress(code_pa)).unwrap();
    let args_pa = d.buffer(c, ARGS, 0x1000, PTE_READ).unwrap();
    vm_memory::Bytes::write_slice(&d.mem, &argv, GuestAddress(args_pa)).unwrap();
    for i in 0..3 {
        d.buffer(c, BUF + (i << 20), 1 << 20, RW).unwrap();
    }
    Packet::Dispatch(DispatchPacket {
        module_va: CODE,
        module_size: image.len() as u32,
        kernel: m.kernel_index("vecadd").unwrap() as u32,
        args_va: ARGS,
        args_size: argv.len() as u32,
        grid: [n.div_ceil(256), 1, 1],
        wg: [256, 1, 1],
        shared_size: 0,
    })
}

fn fill_a(n: u32) -> Packet {
    Packet::Fill {
        dst: BUF,
        size: u64::from(n) * 4,
        pattern: 0x3f80_0000,
    }
}

#[test]
fn copy_and_kernel_on_the_same_buffer_unordered_is_reported() {
    let mut d = rig();
    let mut c = ctx_with(&mut d, 1, &[COPY, COMPUTE]);
    let k = vecadd(&mut d, &mut c, 4096);
    // The bug: the kernel reads `a` while the copy engine fills it, and
    // nothing orders the two jobs.
    d.submit(&mut c, COMPUTE, &[k, fence(SEM + 8, 1)]).unwrap();
    d.submit(&mut c, COPY, &[fill_a(4096), fence(SEM, 1)])
        .unwrap();
    let (_, r, _) = next_report(&mut d);
    assert_eq!(r.check(), Some(Check::XengineHazard));
    assert!(
        [1, 2].contains(&kind(&r)),
        "read-after-write or write-after-read, by who ran first: {}",
        kind(&r)
    );
    assert_eq!(r.ctx_id, 1);
    assert_ne!(r.engine, r.prior_engine, "across the two engines");
    assert!(
        (BUF..BUF + 4 * 4096).contains(&r.va),
        "on the kernel's `a`: {:#x}",
        r.va
    );
    assert_ne!(r.flags & SAN_FLAG_PRIOR, 0);
}

#[test]
fn copy_then_kernel_ordered_by_a_semaphore_is_clean() {
    let mut d = rig();
    let mut c = ctx_with(&mut d, 1, &[COPY, COMPUTE]);
    let k = vecadd(&mut d, &mut c, 4096);
    d.submit(
        &mut c,
        COMPUTE,
        &[
            Packet::SemWait {
                va: SEM,
                value: 1,
                op: SEM_WAIT_GEQ,
            },
            k,
            fence(SEM + 8, 1),
        ],
    )
    .unwrap();
    d.submit(&mut c, COPY, &[fill_a(4096), fence(SEM, 1)])
        .unwrap();
    wait_fence(&mut d, 1, COMPUTE, 1);
    assert_eq!(reports(&d), 0);
}

// --- SAN-WAIT-UNSATISFIABLE ------------------------------------------------

fn sem_wait(va: u64, value: u64) -> Packet {
    Packet::SemWait {
        va,
        value,
        op: SEM_WAIT_GEQ,
    }
}

fn sem_signal(va: u64, value: u64) -> Packet {
    Packet::SemSignal {
        va,
        value,
        op: SEM_SIGNAL_WRITE,
    }
}

#[test]
fn wait_nothing_queued_can_satisfy_is_reported_at_once() {
    let mut d = rig();
    let mut c = ctx_with(&mut d, 1, &[COPY]);
    let t0 = Instant::now();
    let vas = d
        .submit(&mut c, COPY, &[sem_wait(SEM, 1), fence(SEM + 8, 1)])
        .unwrap();
    let (_, r, _) = next_report(&mut d);
    assert!(
        t0.elapsed() < Duration::from_secs(2),
        "long before a hang timeout"
    );
    assert_eq!(
        (r.check(), kind(&r)),
        (Some(Check::WaitUnsatisfiable), wait::NOTHING_QUEUED)
    );
    assert_eq!((r.ctx_id, r.engine, r.packet_va), (1, COPY, vas[0]));
    assert_eq!((r.access, r.va), (Access::Read as u32, SEM));
    assert_eq!(
        &r.detail[..3],
        &[1, u64::from(SEM_WAIT_GEQ), 0],
        "value, op, current"
    );
    assert_eq!(r.packet_words(), words_of(&sem_wait(SEM, 1)).as_slice());
    // The CPU may still write it: the ring goes on.
    let pa = c.pt.translate(&d.mem, SEM).unwrap();
    write_u64(&d.mem, pa, 1).unwrap();
    wait_fence(&mut d, 1, COPY, 1);
}

#[test]
fn wait_cycle_across_rings_is_reported_with_its_chain() {
    let mut d = rig();
    let mut c = ctx_with(&mut d, 1, &[COPY, COMPUTE]);
    // Copy waits for S1 then signals S2; compute waits for S2 then
    // signals S1: neither can start.
    d.submit(&mut c, COPY, &[sem_wait(SEM, 1), sem_signal(SEM + 8, 1)])
        .unwrap();
    d.submit(&mut c, COMPUTE, &[sem_wait(SEM + 8, 1), sem_signal(SEM, 1)])
        .unwrap();
    let (_, r, _) = next_report(&mut d);
    assert_eq!(
        (r.check(), kind(&r)),
        (Some(Check::WaitUnsatisfiable), wait::CYCLE)
    );
    assert_eq!(r.prior_ctx, 1);
    assert_ne!(r.engine, r.prior_engine, "the chain names the other ring");
    let text = san(&d).log().get(r.seq).unwrap().line();
    assert!(text.contains("cycle of waits"), "{text}");
}

#[test]
fn wait_whose_writer_waits_for_a_hung_engine_is_clean() {
    // The copy engine hangs on context 1's job (an injected fault). Context
    // 2, created after, queues a copy job that signals its compute job's
    // semaphore: the engine cannot take that doorbell while it is hung, but
    // the work is published and runs once the engine is reset.
    let mut d = rig();
    let gpu = d.transport.device.gpu().clone();
    gpu.inject.arm(
        vgpu_device::core::inject::Spec::parse("hang:engine=copy,packet=FILL,ctx=1").unwrap(),
        0,
    );
    let mut hung = ctx_with(&mut d, 1, &[COPY]);
    let fill = Packet::Fill {
        dst: SEM + 0x100,
        size: 64,
        pattern: 7,
    };
    d.submit(&mut hung, COPY, &[fill, fence(SEM, 1)]).unwrap();
    let t0 = Instant::now();
    while !gpu.inject.log(0).iter().any(|e| e.kind == "inject") {
        assert!(t0.elapsed() < T, "the hang was never injected");
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut c = ctx_with(&mut d, 2, &[COPY, COMPUTE]);
    d.submit(&mut c, COMPUTE, &[sem_wait(SEM, 1), fence(SEM + 8, 1)])
        .unwrap();
    d.submit(&mut c, COPY, &[fence(SEM, 1)]).unwrap();
    // Several grace periods: the wait is analysed more than once.
    std::thread::sleep(cfg().wait_grace * 5);
    assert_eq!(reports(&d), 0, "the writer is published behind the hang");
    d.command(Command::EngineReset {
        engine: COPY,
        hung_ctx: 1,
    })
    .unwrap();
    wait_fence(&mut d, 2, COMPUTE, 1);
    assert_eq!(reports(&d), 0);
}

#[test]
fn wait_whose_writer_is_queued_is_clean() {
    let mut d = rig();
    let mut c1 = ctx_with(&mut d, 1, &[COPY]);
    // A high-priority context keeps the copy engine busy; the writer of
    // the semaphore is queued behind it in another context.
    let mut busy = d.context(2, PRIORITY_HIGH, 0).unwrap();
    d.ring(&mut busy, COPY).unwrap();
    d.buffer(&mut busy, FILL, 1 << 20, RW).unwrap();
    d.buffer(&mut busy, SEM, 0x1000, RW).unwrap();
    let mut w = ctx_with(&mut d, 3, &[COPY]);
    w.pt.map_4k(&d.mem, 0xa0_0000, c1.pt.translate(&d.mem, SEM).unwrap(), RW)
        .unwrap();
    d.submit(&mut c1, COPY, &[sem_wait(SEM, 1), fence(SEM + 8, 1)])
        .unwrap();
    let fills: Vec<Packet> = (0..40)
        .map(|_| Packet::Fill {
            dst: FILL,
            size: 1 << 20,
            pattern: 7,
        })
        .collect();
    d.submit(&mut busy, COPY, &fills).unwrap();
    d.submit(&mut w, COPY, &[sem_signal(0xa0_0000, 1)]).unwrap();
    wait_fence(&mut d, 1, COPY, 1);
    assert_eq!(reports(&d), 0);
}

// --- SAN-DMA-UNOWNED -------------------------------------------------------

/// Declares everything the driver allocates from.
fn declare_all(d: &mut D) {
    let ranges: Vec<(u64, u64)> = (ALLOC..RAM)
        .step_by(1 << 20)
        .map(|pa| (pa, (1u64 << 20).min(RAM - pa)))
        .collect();
    d.san_mem(true, &ranges).unwrap();
}

#[test]
fn access_to_pages_given_back_is_reported() {
    let mut d = rig();
    declare_all(&mut d);
    let (mut c, _) = copied_once(&mut d, 1);
    let dst_pa = c.pt.translate(&d.mem, DST).unwrap();
    // The bug: the pages go back while the mapping (and its cached
    // translation) still reaches them.
    d.san_mem(false, &[(dst_pa, 0x1000)]).unwrap();
    d.submit(
        &mut c,
        COPY,
        &[Packet::Copy {
            src: SRC,
            dst: DST,
            size: 64,
        }],
    )
    .unwrap();
    let (_, r, _) = next_report(&mut d);
    assert_eq!(r.check(), Some(Check::DmaUnowned));
    assert_eq!(
        (r.ctx_id, r.access, r.va, r.pa),
        (1, Access::Write as u32, DST, dst_pa)
    );
    assert_eq!(&r.detail[..2], &[dst_pa, 0xff], "the page, not a table");
}

#[test]
fn access_to_a_moved_objects_old_pages_names_the_object_and_the_move() {
    use vgpu_hwif::proto::{SAN_MEM_OWN, SAN_MEM_RELEASE};
    let mut d = rig();
    let (mut c, _) = copied_once(&mut d, 1);
    let dst_pa = c.pt.translate(&d.mem, DST).unwrap();
    // Everything but DST's page declared untagged; DST's page is object
    // 42's, generation 1.
    let ranges: Vec<(u64, u64)> = (ALLOC..RAM)
        .step_by(0x1000)
        .filter(|&pa| pa != dst_pa)
        .fold(Vec::new(), |mut v: Vec<(u64, u64)>, pa| {
            match v.last_mut() {
                Some((p, s)) if *p + *s == pa => *s += 0x1000,
                _ => v.push((pa, 0x1000)),
            }
            v
        });
    d.san_mem(true, &ranges).unwrap();
    d.san_mem_tagged(SAN_MEM_OWN, &[(dst_pa, 0x1000)], 42, 1)
        .unwrap();
    copy(&mut d, &mut c, 2);
    assert_eq!(reports(&d), 0, "declared: clean");
    // The move: the object's new page (one the driver owns) declared as
    // generation 2, the old one given back; the bug is the mapping,
    // never rewritten.
    let new_pa = RAM - 0x1000;
    d.san_mem(false, &[(new_pa, 0x1000)]).unwrap();
    d.san_mem_tagged(SAN_MEM_OWN, &[(new_pa, 0x1000)], 42, 2)
        .unwrap();
    d.san_mem_tagged(SAN_MEM_RELEASE, &[(dst_pa, 0x1000)], 42, 1)
        .unwrap();
    d.submit(
        &mut c,
        COPY,
        &[Packet::Copy {
            src: SRC,
            dst: DST,
            size: 64,
        }],
    )
    .unwrap();
    let (ev, r, _) = next_report(&mut d);
    assert_eq!(r.check(), Some(Check::DmaUnowned));
    assert_eq!((r.va, r.pa), (DST, dst_pa));
    assert_eq!(
        r.flags & (SAN_FLAG_OBJECT | SAN_FLAG_MOVED),
        SAN_FLAG_OBJECT | SAN_FLAG_MOVED
    );
    assert_eq!(
        (r.object, r.object_gen, r.object_gen_now, r.object_pa_now),
        (42, 1, 2, new_pa)
    );
    assert!(r.released_ns > 0 && r.released_ns <= r.time_ns);
    match ev {
        Event::Sanitizer { flags, .. } => assert_ne!(flags & SAN_FLAG_MOVED, 0),
        e => panic!("{e:?}"),
    }
    let text = san(&d).log().get(r.seq).unwrap().line();
    assert!(
        text.contains("object 42's (generation 1) until the object moved")
            && text.contains(&format!("now generation 2, at pa {new_pa:#x}")),
        "{text}"
    );
    // The object freed as well: the same page is then a use after free.
    d.san_mem_tagged(SAN_MEM_RELEASE, &[(new_pa, 0x1000)], 42, 2)
        .unwrap();
    let h = san(&d).shared.history(dst_pa).unwrap();
    assert_eq!((h.tag.object, h.now, h.moved()), (42, None, false));
}

#[test]
fn page_table_outside_declared_memory_is_reported() {
    // With SAN-PT-UNOWNED off, the walk's read of the table is
    // SAN-DMA-UNOWNED; with it on, the entry linking the table is
    // SAN-PT-UNOWNED at the walk (and not both).
    let dma_only = ALL_CHECKS & !vgpu_device::core::sanitize::pt::PT_CHECKS;
    for (checks, want) in [
        (dma_only, Check::DmaUnowned),
        (ALL_CHECKS, Check::PtUnowned),
    ] {
        let mut d = rig_with(SanConfig { checks, ..cfg() });
        declare_all(&mut d);
        let mut c = ctx_with(&mut d, 1, &[COPY]);
        d.buffer(&mut c, SRC, 0x1000, RW).unwrap();
        d.buffer(&mut c, DST, 0x1000, RW).unwrap();
        let l0 = c.pt.entry_addr(SRC, 0).unwrap() & !0xfff;
        d.san_mem(false, &[(l0, 0x1000)]).unwrap();
        copy(&mut d, &mut c, 1);
        assert_eq!(reports(&d), 1);
        let r = d.san_report(1).unwrap();
        assert_eq!(r.check(), Some(want));
        if want == Check::DmaUnowned {
            assert_eq!((r.detail[0], r.detail[1]), (l0, 0), "the level-0 table");
        } else {
            let entry = c.pt.entry_addr(SRC, 1).unwrap();
            assert_eq!((r.detail[0], r.detail[2], r.pa), (entry, 1, l0));
        }
    }
}

#[test]
fn declared_memory_is_clean_and_unbalanced_releases_are_refused() {
    let mut d = rig();
    declare_all(&mut d);
    let (mut c, _) = copied_once(&mut d, 1);
    copy(&mut d, &mut c, 2);
    assert_eq!(reports(&d), 0);
    // Giving back what was not declared, or outside RAM: refused.
    let outside = [(RAM + 0x1000, 0x1000)];
    assert!(d.san_mem(true, &outside).is_err());
    let dst_pa = c.pt.translate(&d.mem, DST).unwrap();
    d.san_mem(false, &[(dst_pa, 0x1000)]).unwrap();
    assert!(d.san_mem(false, &[(dst_pa, 0x1000)]).is_err());
}

// --- SAN-TEARDOWN ----------------------------------------------------------

#[test]
fn doorbell_on_a_destroyed_context_is_reported() {
    let mut d = rig();
    let _c = ctx_with(&mut d, 5, &[COPY]);
    d.command(Command::ContextDestroy {
        ctx_id: 5,
        flags: 0,
    })
    .unwrap();
    assert_eq!(
        d.status(Command::Doorbell {
            ctx_id: 5,
            engine: COPY,
            wptr: 24
        }),
        Status::NotFound
    );
    let (_, r, _) = next_report(&mut d);
    assert_eq!(
        (r.check(), kind(&r), r.ctx_id),
        (Some(Check::Teardown), teardown::DOORBELL_DESTROYED, 5)
    );
}

#[test]
fn doorbell_on_a_stopped_ring_is_reported() {
    let mut d = rig();
    let mut c = ctx_with(&mut d, 6, &[COPY]);
    let mut w = c.ring(COPY).unwrap().writer.clone();
    w.words(&d.mem, &[0xdead_beef]).unwrap();
    d.doorbell(6, COPY, 4).unwrap();
    let ev = d.event(T).unwrap();
    assert!(matches!(ev, Event::EngineError { .. }), "{ev:?}");
    std::thread::sleep(Duration::from_millis(150));
    d.doorbell(6, COPY, 8).unwrap();
    let (_, r, _) = next_report(&mut d);
    assert_eq!(
        (r.check(), kind(&r), r.ctx_id),
        (Some(Check::Teardown), teardown::DOORBELL_STOPPED, 6)
    );
    let _ = &mut c;
}

#[test]
fn destroy_without_force_with_work_in_flight_is_reported() {
    let mut d = rig();
    let mut c = ctx_with(&mut d, 7, &[COPY]);
    d.submit(&mut c, COPY, &[sem_wait(SEM, 1)]).unwrap();
    d.wait_status(&c, COPY, T, |s| s.state == ring_state::SEM_WAIT)
        .unwrap();
    assert_eq!(
        d.status(Command::ContextDestroy {
            ctx_id: 7,
            flags: 0
        }),
        Status::Busy
    );
    let (_, r, _) = next_report(&mut d);
    assert_eq!(
        (r.check(), kind(&r), r.ctx_id),
        (Some(Check::Teardown), teardown::DESTROY_BUSY, 7)
    );
    let n = reports(&d);
    d.command(Command::ContextDestroy {
        ctx_id: 7,
        flags: DESTROY_FLAG_FORCE,
    })
    .unwrap();
    assert_eq!(reports(&d), n, "a forced destroy is how it is done");
}

#[test]
fn event_buffers_not_returned_are_reported() {
    let mut d = rig();
    for cookie in 1..=3 {
        d.command(Command::Ping { cookie }).unwrap();
    }
    std::thread::sleep(Duration::from_millis(250));
    d.command(Command::Ping { cookie: 4 }).unwrap();
    let (_, r, others) = next_report(&mut d);
    assert_eq!(
        (r.check(), kind(&r)),
        (Some(Check::Teardown), teardown::EVENTS_STARVED)
    );
    assert_eq!(r.detail[0], 4, "events waiting");
    assert!(
        r.detail[1] >= 200_000_000,
        "the oldest waited past the limit"
    );
    assert_eq!(others.len(), 4);
}

#[test]
fn orderly_teardown_is_clean() {
    let mut d = rig();
    let mut c = ctx_with(&mut d, 7, &[COPY, COMPUTE]);
    d.submit(&mut c, COPY, &[fence(SEM, 1)]).unwrap();
    wait_fence(&mut d, 7, COPY, 1);
    let _ = d.settle(&c, COPY, T).unwrap();
    d.command(Command::RingDestroy {
        ctx_id: 7,
        engine: COMPUTE,
    })
    .unwrap();
    d.command(Command::ContextDestroy {
        ctx_id: 7,
        flags: 0,
    })
    .unwrap();
    for cookie in 1..=3 {
        d.command(Command::Ping { cookie }).unwrap();
        let _ = d.event(T).unwrap();
    }
    assert_eq!(reports(&d), 0);
}

// --- Off -------------------------------------------------------------------

#[test]
fn off_the_sanitizer_reports_nothing_and_identify_says_so() {
    let mut d = rig_with(SanConfig::default());
    // No sanitizer bit; only the VRAM bit (the default device has VRAM)
    // and the running firmware's.
    let fw = vgpu_hwif::proto::FEATURE_FIRMWARE_RUNNING
        | vgpu_hwif::proto::FEATURE_USER_QUEUES
        | vgpu_hwif::proto::FEATURE_PREEMPTION
        | vgpu_hwif::proto::FEATURE_POWER_STATES;
    assert_eq!(d.identity.features, vgpu_hwif::proto::FEATURE_VRAM | fw);
    let mut c = ctx_with(&mut d, 1, &[COPY]);
    d.submit(&mut c, COPY, &[fence(SEM, 5), fence(SEM, 3)])
        .unwrap();
    wait_fence(&mut d, 1, COPY, 3);
    assert_eq!(reports(&d), 0);
    let d = rig();
    assert_eq!(
        d.identity.features,
        vgpu_hwif::proto::FEATURE_SANITIZER
            | vgpu_hwif::proto::FEATURE_SAN_DMA
            | vgpu_hwif::proto::FEATURE_VRAM
            | fw
    );
}
