//! `vgpu-replay compare` on sessions recorded from the in-process device:
//! the same work twice is the same (even at other physical addresses,
//! with other context ids and independent rings rung in another order),
//! and each mistake planted in a driver is named.

use std::path::Path;
use std::time::Duration;

use vgpu_device::config::{DeviceConfig, Generation};
use vgpu_device::core::Device;
use vgpu_device::testkit::{Driver, GpuContext, InProcess, PhysAlloc};
use vgpu_hwif::mmu::{PTE_READ, PTE_VALID, PTE_WRITE};
use vgpu_hwif::packet::{Packet, SEM_WAIT_GEQ};
use vgpu_hwif::proto::{engine, Command, DESTROY_FLAG_FORCE};
use vgpu_replay::compare::{compare_files, Comparison};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

/// One mistake a driver makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Plant {
    None,
    /// Rings the copy engine's doorbell for work written to the compute
    /// ring.
    WrongDoorbellEngine,
    /// Clears the valid bit of the level-2 entry mapping the buffer.
    InvalidPte,
    /// Clears the valid bit of the level-2 entry of a buffer no engine
    /// uses (only the device's audit of the tables at `CONTEXT_DESTROY`
    /// sees it).
    UnusedInvalidPte,
    /// Does not ring the innocent ring's doorbell again after the reset.
    NoDoorbellAfterReset,
    /// Resets the compute engine where the copy engine hung.
    WrongResetEngine,
}

/// What may differ between two correct runs.
#[derive(Debug, Clone, Copy)]
struct Layout {
    /// Where the driver's memory starts.
    phys: u64,
    /// Context ids: the two-ring context, the hung one, the innocent one.
    ids: [u32; 3],
    /// Submit to the compute ring before the copy ring.
    compute_first: bool,
}

const REFERENCE: Layout = Layout {
    phys: 0x10_0000,
    ids: [2, 3, 4],
    compute_first: false,
};

/// The buffer's VA in every context.
const BUF: u64 = 0x20_0000;
/// A buffer the first context maps and never uses (entry 1 of its level-2
/// table).
const UNUSED: u64 = 0x4000_0000;

fn wait(d: &Driver<InProcess>, c: &GpuContext, e: u32, plant: Plant) {
    let r = d.settle(c, e, Duration::from_secs(2));
    if plant == Plant::None {
        r.expect("the reference's ring settles");
    }
}

fn submit(
    d: &mut Driver<InProcess>,
    c: &mut GpuContext,
    e: u32,
    bell: u32,
    packets: &[Packet],
) -> u32 {
    let mem = d.mem.clone();
    let ring = c.ring(e).expect("ring");
    for p in packets {
        ring.writer.packet(&mem, p).expect("packet");
    }
    let wptr = ring.writer.wptr();
    d.doorbell(c.id, bell, wptr).expect("doorbell");
    wptr
}

/// Records one session of the test into `path`.
fn session(path: &Path, plant: Plant, l: Layout) {
    use engine::{COMPUTE, COPY};
    let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 32 << 20)]).unwrap();
    let dev = Device::new(DeviceConfig::new(Generation::Gen2, 1).unwrap());
    dev.start_recording(path).unwrap();
    let t = InProcess::with_device(dev, &mem);
    let mut d = Driver::new(t, mem, PhysAlloc::new(l.phys, 16 << 20)).unwrap();
    let [a, b, c] = l.ids;
    let rw = PTE_READ | PTE_WRITE;

    // A context with both rings and a buffer.
    let mut ca = d.context(a, 1, 0).unwrap();
    d.ring(&mut ca, COPY).unwrap();
    d.ring(&mut ca, COMPUTE).unwrap();
    d.buffer(&mut ca, BUF, 0x4000, rw).unwrap();
    d.buffer(&mut ca, UNUSED, 0x1000, rw).unwrap();
    let cleared = match plant {
        Plant::InvalidPte => Some(BUF),
        Plant::UnusedInvalidPte => Some(UNUSED),
        _ => None,
    };
    if let Some(va) = cleared {
        let at = ca.pt.entry_addr(va, 2).unwrap();
        let v: u64 = d.mem.read_obj(GuestAddress(at)).unwrap();
        d.mem.write_obj(v & !PTE_VALID, GuestAddress(at)).unwrap();
    }
    let copy = |d: &mut Driver<InProcess>, ca: &mut GpuContext| {
        submit(
            d,
            ca,
            COPY,
            COPY,
            &[
                Packet::Fill {
                    dst: BUF,
                    size: 4096,
                    pattern: 0x5a5a_5a5a,
                },
                Packet::Fence {
                    va: BUF + 0x3000,
                    seqno: 1,
                    flags: 0,
                },
            ],
        );
        wait(d, ca, COPY, plant);
    };
    let compute = |d: &mut Driver<InProcess>, ca: &mut GpuContext| {
        let bell = if plant == Plant::WrongDoorbellEngine {
            COPY
        } else {
            COMPUTE
        };
        submit(
            d,
            ca,
            COMPUTE,
            bell,
            &[Packet::Fence {
                va: BUF + 0x3008,
                seqno: 1,
                flags: 0,
            }],
        );
        wait(d, ca, COMPUTE, plant);
    };
    if l.compute_first {
        compute(&mut d, &mut ca);
        copy(&mut d, &mut ca);
    } else {
        copy(&mut d, &mut ca);
        compute(&mut d, &mut ca);
    }

    // A context whose copy ring waits forever, and an innocent one.
    let mut cb = d.context(b, 1, 0).unwrap();
    d.ring(&mut cb, COPY).unwrap();
    d.buffer(&mut cb, BUF, 0x1000, rw).unwrap();
    submit(
        &mut d,
        &mut cb,
        COPY,
        COPY,
        &[Packet::SemWait {
            va: BUF,
            value: 1,
            op: SEM_WAIT_GEQ,
        }],
    );
    wait(&d, &cb, COPY, plant);
    let mut cc = d.context(c, 1, 0).unwrap();
    d.ring(&mut cc, COPY).unwrap();
    d.buffer(&mut cc, BUF, 0x1000, rw).unwrap();
    let fence = |seqno| Packet::Fence {
        va: BUF,
        seqno,
        flags: 0,
    };
    submit(&mut d, &mut cc, COPY, COPY, &[fence(1)]);
    wait(&d, &cc, COPY, plant);

    // The hang: reset the copy engine, then write the innocent ring again.
    let reset = if plant == Plant::WrongResetEngine {
        COMPUTE
    } else {
        COPY
    };
    let _ = d.try_command(Command::EngineReset {
        engine: reset,
        hung_ctx: b,
    });
    let ring = cc.ring(COPY).unwrap();
    ring.writer.packet(&d.mem.clone(), &fence(2)).unwrap();
    let wptr = ring.writer.wptr();
    if plant != Plant::NoDoorbellAfterReset {
        d.doorbell(c, COPY, wptr).unwrap();
        wait(&d, &cc, COPY, plant);
    }

    for id in [a, b, c] {
        let _ = d.try_command(Command::ContextDestroy {
            ctx_id: id,
            flags: DESTROY_FLAG_FORCE,
        });
    }
    d.transport.device.recorder().unwrap().flush().unwrap();
}

/// Records the reference's session and the planted one, and compares
/// them; `VGPU_COMPARE_DIR=DIR` keeps the records there (`PLANT-ref.vgrec`,
/// `PLANT-yours.vgrec`) for `vgpu-replay compare`.
fn compared(reference: Layout, yours: Layout, plant: Plant) -> Comparison {
    let tmp = tempfile::tempdir().unwrap();
    let dir =
        std::env::var_os("VGPU_COMPARE_DIR").map_or_else(|| tmp.path().to_owned(), Into::into);
    let name = |side: &str| dir.join(format!("{plant:?}-{}{side}.vgrec", yours.ids[0]));
    let (r, s) = (name("-ref"), name("-yours"));
    session(&r, Plant::None, reference);
    session(&s, plant, yours);
    compare_files(&r, &s, 3).unwrap()
}

fn message(plant: Plant) -> String {
    let c = compared(REFERENCE, REFERENCE, plant);
    let d = c.difference.expect("a difference");
    eprintln!("{plant:?}: {}", d.message);
    d.message
}

#[test]
fn the_same_work_twice_is_the_same() {
    let c = compared(REFERENCE, REFERENCE, Plant::None);
    assert!(c.equal(), "{:?}", c.difference);
    assert!(c.reference.commands >= 15, "{:?}", c.reference);
    assert!(c.reference.packets >= 6, "{:?}", c.reference);
    assert!(c.reference.ptes >= 8, "{:?}", c.reference);
    assert_eq!(c.reference, c.student);
}

#[test]
fn physical_addresses_context_ids_and_independent_rings_do_not_count() {
    let other = Layout {
        phys: 0x38_0000,
        ids: [7, 9, 11],
        compute_first: true,
    };
    let c = compared(REFERENCE, other, Plant::None);
    assert!(c.equal(), "{:?}", c.difference);
}

#[test]
fn a_doorbell_on_the_wrong_engine_is_named() {
    let m = message(Plant::WrongDoorbellEngine);
    assert!(
        m.starts_with(
            "your driver rang the copy engine's doorbell (DOORBELL ctx 2 engine copy wptr 0x18); \
             the reference rang the compute engine's (DOORBELL ctx 2 engine compute wptr 0x18)"
        ),
        "{m}"
    );
}

#[test]
fn a_pte_without_its_valid_bit_is_named() {
    let m = message(Plant::InvalidPte);
    assert!(
        m.starts_with(
            "your PTE for VA 0x200000 at level 2 (entry 0 of its table) has no valid bit: 0x"
        ),
        "{m}"
    );
    assert!(m.contains("; the reference's: 0x"), "{m}");
    assert!(m.ends_with("(valid, table -> a table)"), "{m}");
}

#[test]
fn a_missing_doorbell_after_an_engine_reset_is_named() {
    let m = message(Plant::NoDoorbellAfterReset);
    assert!(
        m.starts_with(
            "after the reset (ENGINE_RESET engine copy hung_ctx 3) your driver sent nothing more \
             to ctx 4's copy ring"
        ),
        "{m}"
    );
    assert!(
        m.contains("the reference sent DOORBELL ctx 4 engine copy wptr 0x"),
        "{m}"
    );
    assert!(m.ends_with("(the innocent ring written again)"), "{m}");
}

#[test]
fn a_reset_of_the_wrong_engine_is_named() {
    let m = message(Plant::WrongResetEngine);
    assert!(
        m.starts_with("your driver sent ENGINE_RESET engine compute hung_ctx 3"),
        "{m}"
    );
    assert!(
        m.ends_with("the reference sent ENGINE_RESET engine copy hung_ctx 3"),
        "{m}"
    );
}

#[test]
fn a_pte_no_engine_walked_is_named_from_the_table_audit() {
    let m = message(Plant::UnusedInvalidPte);
    assert!(
        m.starts_with(
            "your PTE for VA 0x40000000 at level 2 (entry 1 of its table) has no valid bit: 0x"
        ),
        "{m}"
    );
    assert!(m.contains("; the reference's: 0x"), "{m}");
    assert!(m.contains("(valid, table"), "{m}");
}
