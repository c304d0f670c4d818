//! `packets`: the packet decoder and the command processor, on a ring
//! and command buffers laid out by the testkit's page-table builder.
//!
//! Input: byte 0 picks the generation (bit 0), the engine (bit 1: compute)
//! and its compute units (bit 2: two); bytes 1–2 (little-endian) the
//! number of ring words (at most 1024); the rest are little-endian words,
//! that many written to the ring (the doorbell's write pointer covers
//! them) and the others to a 64 KiB command-buffer region an `INDIRECT`
//! can name. Mapped besides: a status block, 1 MiB of data (R W) and a
//! valid module image (R X) a `DISPATCH` can name. The slices are run
//! synchronously on one command processor with a host whose time slice
//! ends after a fixed number of boundary checks, so every input does a
//! bounded amount of work and runs the same way each time.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::OnceLock;

use vgpu_device::core::cp::{CommandProcessor, Host, Job, SliceEnd};
use vgpu_device::core::mmu::{AddressSpace, Mem};
use vgpu_device::core::ring::Cursor;
use vgpu_device::testkit::{PageTables, PhysAlloc};
use vgpu_hwif::event::Event;
use vgpu_hwif::mmu::{PTE_EXEC, PTE_READ, PTE_WRITE};
use vgpu_hwif::packet::MAX_INDIRECT_DEPTH;
use vgpu_hwif::proto::engine;
use vm_memory::{Bytes, GuestAddress};

/// GPU VA of the ring.
pub const RING_VA: u64 = 0x1000_0000;
/// GPU VA of the ring's status block.
pub const STATUS_VA: u64 = 0x2000_0000;
/// GPU VA of the data buffer.
pub const DATA_VA: u64 = 0x3000_0000;
/// GPU VA of the command-buffer region.
pub const IB_VA: u64 = 0x4000_0000;
/// GPU VA of the module image.
pub const MODULE_VA: u64 = 0x5000_0000;
/// Ring size in bytes.
pub const RING_SIZE: u32 = 4096;
const RING_PA: u64 = 0x20_0000;
const STATUS_PA: u64 = 0x21_0000;
const IB_PA: u64 = 0x28_0000;
const MODULE_PA: u64 = 0x29_0000;
const DATA_PA: u64 = 0x30_0000;
const RAM: usize = 6 << 20;
/// Boundary checks after which a slice is over (a dispatch step counts
/// as one: at most 32 768 warp instructions per compute unit).
const CHECKS_PER_SLICE: u32 = 4;
/// Slices per input.
const SLICES: usize = 4;

/// A small valid module: kernel 0 stores its global thread id into the
/// data buffer at the address in its first argument, kernel 1 spins.
pub fn module_image(generation: u32) -> &'static [u8] {
    static IMAGES: [OnceLock<Vec<u8>>; 2] = [OnceLock::new(), OnceLock::new()];
    IMAGES[usize::from(generation >= 2)].get_or_init(|| {
        let src = ".kernel store\n.arg out ptr\n    s2r r0, %gid.x\n    mov r1, 4\n    ldarg d2, [out]\n    mad.wide.u32 d2, r0, r1, d2\n    st.32 [d2], r0\n    exit\n.end\n.kernel spin\nloop:\n    bra loop\n.end\n";
        vgpu_isa::assemble(src, generation)
            .expect("the fuzz module assembles")
            .to_bytes()
            .expect("the fuzz module serialises")
    })
}

/// Counts the boundary checks of a slice; nothing else happens on its own.
#[derive(Default)]
struct FuzzHost {
    now: AtomicU64,
    checks: AtomicU32,
    epoch: AtomicU64,
    events: AtomicU64,
}

impl Host for FuzzHost {
    fn now_ns(&self) -> u64 {
        self.now.fetch_add(1, Ordering::Relaxed)
    }
    fn attention(&self) -> bool {
        false
    }
    fn slice_over(&self) -> bool {
        self.checks.fetch_add(1, Ordering::Relaxed) >= CHECKS_PER_SLICE
    }
    fn sem_epoch(&self) -> u64 {
        self.epoch.load(Ordering::Relaxed)
    }
    fn semaphores_changed(&self) {
        self.epoch.fetch_add(1, Ordering::Relaxed);
    }
    fn post(&self, event: Event) {
        // Every event the engine posts has a record.
        let rec = event.to_record(1, 0);
        assert!(Event::from_record(&rec).is_ok(), "{event:?}");
        self.events.fetch_add(1, Ordering::Relaxed);
    }
}

pub fn run(data: &[u8]) {
    let [cfg, n0, n1, rest @ ..] = data else {
        return;
    };
    let cfg = *cfg;
    let ring_len = usize::from(u16::from_le_bytes([*n0, *n1]));
    let generation = 1 + u32::from(cfg & 1);
    let eng = if cfg & 2 != 0 {
        engine::COMPUTE
    } else {
        engine::COPY
    };
    let units = 1 + usize::from(cfg >> 2 & 1);
    let words = crate::words(rest);
    let ring_words = ring_len.min(words.len()).min(RING_SIZE as usize / 4);
    let (ring, ib) = words.split_at(ring_words);

    let mem = Mem::from_ranges(&[(GuestAddress(0), RAM)]).expect("guest memory");
    let mut pt = PageTables::new(&mem, PhysAlloc::new(0x1000, 0x10_0000)).expect("tables");
    let rx = PTE_READ | PTE_EXEC;
    let rw = PTE_READ | PTE_WRITE;
    pt.map_range(&mem, RING_VA, RING_PA, u64::from(RING_SIZE), rx)
        .expect("map");
    pt.map_4k(&mem, STATUS_VA, STATUS_PA, rw).expect("map");
    pt.map_range(&mem, DATA_VA, DATA_PA, 1 << 20, rw)
        .expect("map");
    pt.map_range(&mem, IB_VA, IB_PA, 64 << 10, rx).expect("map");
    let image = module_image(generation);
    pt.map_range(&mem, MODULE_VA, MODULE_PA, image.len() as u64, rx)
        .expect("map");
    mem.write_slice(image, GuestAddress(MODULE_PA))
        .expect("image");
    let put = |pa: u64, w: &[u32]| {
        let bytes: Vec<u8> = w.iter().flat_map(|w| w.to_le_bytes()).collect();
        mem.write_slice(&bytes, GuestAddress(pa)).expect("write");
    };
    put(RING_PA, ring);
    put(IB_PA, &ib[..ib.len().min(16 << 10)]);

    let mut job = Job {
        ctx: 1,
        engine: eng,
        priority: 1,
        replayable: false,
        space: AddressSpace {
            asid: 1,
            root: pt.root(),
            va_bits: vgpu_hwif::mmu::va_bits(generation),
        },
        ring_va: RING_VA,
        ring_size: RING_SIZE,
        status_va: STATUS_VA,
        status_broken: false,
        wptr: 4 * ring_words as u32,
        cursor: Cursor::default(),
    };
    let mut cp = CommandProcessor::new(eng, generation, false);
    if eng == engine::COMPUTE {
        cp.set_compute_units(units);
    }
    let host = FuzzHost::default();
    for _ in 0..SLICES {
        host.checks.store(0, Ordering::Relaxed);
        let out = cp.run_slice(&host, &mem, &mut job);
        assert!(job.cursor.depth <= MAX_INDIRECT_DEPTH);
        assert!(
            job.wptr.wrapping_sub(job.cursor.rptr) <= job.wptr,
            "the read pointer never passes the write pointer"
        );
        match out.end {
            SliceEnd::Yield | SliceEnd::Interrupted => {}
            _ => break,
        }
    }
}
