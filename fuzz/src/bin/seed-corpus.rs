//! Writes the seed corpora of the fuzz targets: small, valid inputs that
//! reach deep into each target (a working ring, well-formed page tables,
//! sample modules, served chains), from which the fuzzer mutates.
//!
//! `cargo run --manifest-path fuzz/Cargo.toml --bin seed-corpus -- fuzz/corpus`

use std::path::Path;

use vgpu_fuzz::packets::{DATA_VA, IB_VA, MODULE_VA};
use vgpu_hwif::mmu::{
    huge_entry, leaf_entry, table_entry, CachePolicy, PTE_EXEC, PTE_READ, PTE_WRITE, VRAM_BASE,
};
use vgpu_hwif::packet::{
    Copy2dPacket, DispatchPacket, Packet, FENCE_NO_EVENT, SEM_SIGNAL_ADD, SEM_WAIT_GEQ,
};
use vgpu_hwif::proto::{engine, Command, PRIORITY_NORMAL};

fn write(dir: &Path, target: &str, name: &str, bytes: &[u8]) {
    let d = dir.join(target);
    std::fs::create_dir_all(&d).expect("corpus directory");
    std::fs::write(d.join(name), bytes).expect("seed");
}

fn control(dir: &Path) {
    let cmds = [
        Command::Identify,
        Command::Ping { cookie: 7 },
        Command::ContextCreate {
            ctx_id: 1,
            priority: PRIORITY_NORMAL,
            flags: 0,
            pt_root: 0x1000,
        },
        Command::RingCreate {
            ctx_id: 1,
            engine: engine::COPY,
            size: 4096,
            ring_va: 0x10_0000,
            status_va: 0x20_0000,
        },
        Command::Doorbell {
            ctx_id: 1,
            engine: engine::COPY,
            wptr: 16,
        },
        Command::ContextQuery { ctx_id: 1 },
        Command::TlbInvalidate {
            ctx_id: 1,
            engine_mask: 3,
            va: 0,
            size: 0,
        },
        Command::FaultResume {
            ctx_id: 1,
            action: 0,
            fault_id: 1,
        },
        Command::QueryStats { kind: 0, id: 0 },
        Command::EngineReset {
            engine: engine::COPY,
            hung_ctx: 1,
        },
        Command::RingDestroy {
            ctx_id: 1,
            engine: engine::COPY,
        },
        Command::ContextDestroy {
            ctx_id: 1,
            flags: 1,
        },
        Command::DeviceReset,
        Command::FwStatus,
        Command::FwLoad {
            pa: 0x1000,
            size: 0x800,
            interface: vgpu_hwif::proto::PROTOCOL_VERSION,
        },
        Command::FwStart,
        Command::FwLogRead {
            pos: 0,
            len: 256,
            buf_pa: 0x2000,
        },
        Command::PowerSet {
            state: vgpu_hwif::proto::power_state::D3HOT,
        },
        Command::PowerStatus,
        Command::PowerSet {
            state: vgpu_hwif::proto::power_state::D0,
        },
    ];
    let mut all = Vec::new();
    for (i, c) in cmds.iter().enumerate() {
        let mut b = [0u8; 256];
        let n = c.encode(i as u64, &mut b).expect("encodes");
        let rec = [&[n as u8, 0][..], &b[..n]].concat();
        write(dir, "control", &format!("{i:02}-{:?}", c.opcode()), &rec);
        all.extend_from_slice(&rec);
    }
    write(dir, "control", "all", &all);
}

fn packets(dir: &Path) {
    let fence = |seqno| Packet::Fence {
        va: DATA_VA,
        seqno,
        flags: 0,
    };
    let dispatch = |kernel, grid| {
        Packet::Dispatch(DispatchPacket {
            module_va: MODULE_VA,
            module_size: vgpu_fuzz::packets::module_image(2).len() as u32,
            kernel,
            args_va: DATA_VA + 0x1000,
            args_size: 8,
            grid,
            wg: [32, 1, 1],
            shared_size: 0,
        })
    };
    let copy: Vec<Packet> = vec![
        Packet::Nop { words: 2 },
        Packet::Copy {
            src: DATA_VA,
            dst: DATA_VA + 0x8000,
            size: 0x2345,
        },
        Packet::Copy2d(Copy2dPacket {
            src: DATA_VA,
            dst: DATA_VA + 0x4_0000,
            src_pitch: 100,
            dst_pitch: 300,
            width: 64,
            height: 9,
        }),
        Packet::Fill {
            dst: DATA_VA + 0x1_0000,
            size: 0x1003,
            pattern: 0xa5a5_0f0f,
        },
        Packet::SemSignal {
            va: DATA_VA + 0x100,
            value: 1,
            op: SEM_SIGNAL_ADD,
        },
        Packet::SemWait {
            va: DATA_VA + 0x100,
            value: 1,
            op: SEM_WAIT_GEQ,
        },
        Packet::Timestamp {
            va: DATA_VA + 0x200,
        },
        Packet::Indirect {
            va: IB_VA,
            size: 4 * 6,
        },
        Packet::Fence {
            va: DATA_VA + 8,
            seqno: 2,
            flags: FENCE_NO_EVENT,
        },
        fence(1),
    ];
    let compute: Vec<Packet> = vec![dispatch(0, [4, 1, 1]), fence(3), dispatch(1, [1, 1, 1])];
    for generation in [1u32, 2] {
        for (eng, name, list) in [(0u8, "copy", &copy), (2, "compute", &compute)] {
            for units in [0u8, 4] {
                let cfg = (generation as u8 - 1) | eng | units;
                let mut words = Vec::new();
                for p in list.iter() {
                    // Gen 2 wants the copy packets 64-byte aligned.
                    if generation >= 2 && vgpu_hwif::packet::is_copy_engine_packet(p.opcode()) {
                        while words.len() % 16 != 0 {
                            words.push(vgpu_hwif::packet::encode_header(2, 0, 1));
                        }
                    }
                    let mut w = [0u32; 32];
                    let n = p.encode(generation, &mut w).expect("encodes");
                    words.extend_from_slice(&w[..n]);
                }
                // The command buffer the INDIRECT names: one FENCE.
                let mut ib = [0u32; 8];
                let n = fence(9).encode(generation, &mut ib).expect("encodes");
                let mut bytes = vec![cfg];
                bytes.extend_from_slice(&(words.len() as u16).to_le_bytes());
                for w in words.iter().chain(&ib[..n]) {
                    bytes.extend_from_slice(&w.to_le_bytes());
                }
                write(
                    dir,
                    "packets",
                    &format!("gen{generation}-{name}-units{}", 1 + units / 4),
                    &bytes,
                );
            }
        }
    }
}

fn mmu(dir: &Path) {
    // Root at page 0 of region 0, tables at pages 1..3, data pages in
    // region 1, a huge page at 4 MiB.
    let mut ram = vec![0u8; 0x8000 + 0x8000];
    let mut put = |pa: usize, e: u64| ram[pa..pa + 8].copy_from_slice(&e.to_le_bytes());
    let va: u64 = 0x12_3456_7000;
    let idx = |va: u64, l: u32| ((va >> (12 + 9 * l)) & 0x1ff) as usize;
    put(8 * idx(va, 3), table_entry(0x1000));
    put(0x1000 + 8 * idx(va, 2), table_entry(0x2000));
    put(0x2000 + 8 * idx(va, 1), table_entry(0x3000));
    // The region-1 pages as seen in the input: offset 0x8000 of `ram`.
    for i in 0..8u64 {
        let perms = [PTE_READ, PTE_READ | PTE_WRITE, PTE_READ | PTE_EXEC, 0][i as usize % 4];
        put(
            0x3000 + 8 * (idx(va, 0) + i as usize),
            leaf_entry(0x1_0000 + 0x1000 * i, perms, CachePolicy::Cached),
        );
    }
    // A page in VRAM, which this guest RAM does not have: a bad address.
    put(
        0x3000 + 8 * (idx(va, 0) + 8),
        leaf_entry(VRAM_BASE + 0x1000, PTE_READ, CachePolicy::Cached),
    );
    let huge_va = va + (1 << 21);
    put(
        0x2000 + 8 * idx(huge_va, 1),
        huge_entry(0x40_0000, PTE_READ | PTE_WRITE, CachePolicy::Uncached),
    );
    let vas = [
        va,
        va + 0x1234,
        va + 0x3000,
        va + 0x7fff,
        va + 0x8010,
        huge_va + 0x1_2345,
        va + (1 << 30),
        1 << 47,
    ];
    for (name, cfg) in [("48", 1u8), ("40", 0)] {
        let mut bytes = vec![cfg, 0, vas.len() as u8];
        for v in vas {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        bytes.extend_from_slice(&ram);
        write(dir, "mmu", &format!("tables-va{name}"), &bytes);
    }
}

fn isa(dir: &Path, samples: &Path) {
    let mut names: Vec<_> = std::fs::read_dir(samples)
        .expect("isa/samples")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "s"))
        .collect();
    names.sort();
    for path in names {
        let src = std::fs::read_to_string(&path).expect("sample");
        let stem = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("sample");
        for generation in [1u32, 2] {
            let Ok(m) = vgpu_isa::assemble(&src, generation) else {
                continue;
            };
            let image = m.to_bytes().expect("serialises");
            write(
                dir,
                "isa_module",
                &format!("{stem}-gen{generation}"),
                &image,
            );
            // The code as an isa_exec program: 64 threads, 1 KiB shared,
            // arguments pointing into the mapped pages.
            let mut bytes = vec![(generation as u8 - 1) | (31 << 1), 16];
            let mut args = [0u8; 64];
            for (i, a) in [0x1_0000u64, 0x1_8000, 0x2_0000, 0x3_0000]
                .iter()
                .enumerate()
            {
                args[8 * i..8 * i + 8].copy_from_slice(&a.to_le_bytes());
            }
            args[32..36].copy_from_slice(&64u32.to_le_bytes());
            bytes.extend_from_slice(&args);
            for inst in m.code() {
                bytes.extend_from_slice(&vgpu_isa::encode(inst).expect("encodes").to_le_bytes());
            }
            write(dir, "isa_exec", &format!("{stem}-gen{generation}"), &bytes);
        }
    }
}

fn virtq(dir: &Path) {
    use vgpu_fuzz::virtq::BUFFERS;
    let desc = |addr: u64, len: u32, flags: u16, next: u16| {
        let mut d = Vec::with_capacity(16);
        d.extend_from_slice(&addr.to_le_bytes());
        d.extend_from_slice(&len.to_le_bytes());
        d.extend_from_slice(&flags.to_le_bytes());
        d.extend_from_slice(&next.to_le_bytes());
        d
    };
    const NEXT: u16 = 1;
    const WRITE: u16 = 2;
    let mut table = Vec::new();
    // Chain 0: an IDENTIFY command, then a reply buffer.
    table.extend(desc(BUFFERS, 16, NEXT, 1));
    table.extend(desc(BUFFERS + 0x100, 256, WRITE, 0));
    // Chain 2: a PING split over two descriptors, then a reply.
    table.extend(desc(BUFFERS + 0x200, 8, NEXT, 3));
    table.extend(desc(BUFFERS + 0x208, 16, NEXT, 4));
    table.extend(desc(BUFFERS + 0x300, 64, WRITE, 0));
    // Chain 5: an event buffer.
    table.extend(desc(BUFFERS + 0x400, 64, WRITE, 0));
    table.resize(256, 0);
    let mut avail = Vec::new();
    avail.extend_from_slice(&3u16.to_le_bytes());
    for head in [0u16, 2, 5] {
        avail.extend_from_slice(&head.to_le_bytes());
    }
    avail.resize(34, 0);
    let mut buffers = vec![0u8; 0x500];
    let mut b = [0u8; 64];
    let n = Command::Identify.encode(1, &mut b).expect("encodes");
    buffers[..n].copy_from_slice(&b[..n]);
    let n = Command::Ping { cookie: 5 }
        .encode(2, &mut b)
        .expect("encodes");
    buffers[0x200..0x208].copy_from_slice(&b[..8]);
    buffers[0x208..0x208 + n - 8].copy_from_slice(&b[8..n]);
    write(
        dir,
        "virtq",
        "identify-ping-event",
        &[table, avail, buffers].concat(),
    );
}

fn main() {
    let out = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "fuzz/corpus".to_owned());
    let out = Path::new(&out);
    let samples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../isa/samples");
    control(out);
    packets(out);
    mmu(out);
    isa(out, &samples);
    virtq(out);
    println!("seed corpora written under {}", out.display());
}
