//! Tests of the shared hardware interface: decoding rules, round trips, and
//! the layout table against its checked-in copy.
use vgpu_hwif::event::{Event, EventRecord, EVENT_RECORD_SIZE};
use vgpu_hwif::layout::{self, FINGERPRINT};
use vgpu_hwif::packet::Copy2dPacket;
use vgpu_hwif::pod::Pod;
use vgpu_hwif::proto::*;

fn hdr(opcode: u32, flags: u32, tag: u64) -> Vec<u8> {
    CommandHeader { opcode, flags, tag }.as_bytes().to_vec()
}

#[test]
fn decode_valid_commands_round_trip() {
    for cmd in [
        Command::Identify,
        Command::Ping {
            cookie: 0xdead_beef,
        },
    ] {
        let mut buf = [0u8; 64];
        let n = cmd.encode(77, &mut buf).unwrap();
        assert_eq!(n, cmd.opcode().command_size());
        let (h, r) = Command::decode(&buf[..n]);
        assert_eq!(h.unwrap().tag, 77);
        assert_eq!(r, Ok(cmd));
    }
}

#[test]
fn decode_error_table() {
    let ping = Opcode::Ping as u32;
    let ident = Opcode::Identify as u32;
    let mut ping_ok = hdr(ping, 0, 5);
    ping_ok.extend_from_slice(&7u64.to_le_bytes());
    let cases: Vec<(&str, Vec<u8>, Status)> = vec![
        ("empty", vec![], Status::Truncated),
        ("short header", vec![1, 0, 0, 0, 0, 0, 0], Status::Truncated),
        ("header-only ping", hdr(ping, 0, 1), Status::Truncated),
        (
            "ping + 1 byte",
            [ping_ok.clone(), vec![0]].concat(),
            Status::Oversized,
        ),
        (
            "identify + 8",
            [hdr(ident, 0, 1), vec![0; 8]].concat(),
            Status::Oversized,
        ),
        (
            "over max size",
            [hdr(ident, 0, 1), vec![0; MAX_COMMAND_SIZE]].concat(),
            Status::Oversized,
        ),
        ("unknown opcode", hdr(0x7777, 0, 1), Status::UnknownOpcode),
        ("opcode zero", hdr(0, 0, 1), Status::UnknownOpcode),
        ("flags set", hdr(ident, 1, 1), Status::ReservedNonZero),
    ];
    for (name, bytes, want) in cases {
        let (_, r) = Command::decode(&bytes);
        assert_eq!(r.map_err(|e| e.status()), Err(want), "{name}");
    }
}

#[test]
fn reply_header_echoes_command() {
    let h = CommandHeader {
        opcode: 2,
        flags: 0,
        tag: 99,
    };
    let r = ReplyHeader::for_command(Some(&h), Status::Busy);
    assert_eq!((r.status, r.opcode, r.tag), (Status::Busy as u32, 2, 99));
    let r = ReplyHeader::for_command(None, Status::Truncated);
    assert_eq!((r.opcode, r.tag), (0, 0));
}

#[test]
fn status_and_opcode_numbers_round_trip() {
    for v in 0..16 {
        if let Some(s) = Status::from_u32(v) {
            assert_eq!(s as u32, v);
        }
    }
    for op in Opcode::ALL {
        assert_eq!(Opcode::from_u32(op as u32), Some(op));
        assert!(op.reply_size() >= core::mem::size_of::<ReplyHeader>());
    }
}

#[test]
fn event_records_round_trip() {
    for ev in [
        Event::Ping { cookie: 3 },
        Event::EventsLost {
            count: 9,
            first_seq: 100,
        },
        Event::EccError {
            ctx_id: 3,
            engine: 1,
            va: 0x7000,
            packet_va: 0x1_0040,
            pa: 0x12_3000,
        },
    ] {
        let rec = ev.to_record(42, 1000);
        let bytes = rec.as_bytes();
        assert_eq!(bytes.len(), EVENT_RECORD_SIZE);
        let back = EventRecord::parse(bytes).unwrap();
        assert_eq!(back.seq, 42);
        assert_eq!(Event::from_record(&back), Ok(ev));
    }
    assert!(EventRecord::parse(&[0; 63]).is_err());
    let mut rec = Event::Ping { cookie: 0 }.to_record(1, 1);
    rec.kind = 999;
    assert!(Event::from_record(&rec).is_err());
}

#[test]
fn layout_matches_checked_in_table() {
    // hwif/layout.txt is the reviewed interface. Changing a shared struct
    // changes this table: update the file (VGPU_BLESS=1) in the same commit,
    // and the KMD, device and UMD all pick the change up from the same source.
    let mut now = String::new();
    layout::write_table(&mut now).unwrap();
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/layout.txt");
    if std::env::var_os("VGPU_BLESS").is_some() {
        std::fs::write(path, &now).unwrap();
    }
    let want = std::fs::read_to_string(path).unwrap();
    assert_eq!(
        now, want,
        "shared layout changed; rerun with VGPU_BLESS=1 if intended"
    );
    assert!(now.contains(&format!("fingerprint {FINGERPRINT:#018x}")));
}

#[test]
fn fingerprint_sees_every_field() {
    let base = layout::fingerprint(layout::TABLE);
    assert_eq!(base, FINGERPRINT);
    // Perturb one field offset in a copy of the table: the fingerprint moves.
    let mut fields: Vec<_> = layout::TABLE[0].fields.to_vec();
    fields[1].offset += 1;
    let leaked: &'static [vgpu_hwif::pod::FieldLayout] = Box::leak(fields.into_boxed_slice());
    let mut t = layout::TABLE.to_vec();
    t[0].fields = leaked;
    assert_ne!(layout::fingerprint(&t), base);
}

#[test]
fn engine_errors_round_trip() {
    use vgpu_hwif::packet::EngineError;
    let mut names = Vec::new();
    for v in 1..=17 {
        let e = EngineError::from_u32(v).unwrap();
        assert_eq!(e as u32, v);
        names.push(e.name());
    }
    assert_eq!(EngineError::from_u32(13), Some(EngineError::PageFault));
    assert_eq!(EngineError::PageFault.name(), "PAGE_FAULT");
    assert_eq!(
        EngineError::from_u32(14),
        Some(EngineError::EccUncorrectable)
    );
    assert_eq!(EngineError::EccUncorrectable.name(), "ECC_UNCORRECTABLE");
    assert_eq!(EngineError::from_u32(15), Some(EngineError::Internal));
    assert_eq!(EngineError::Internal.name(), "INTERNAL");
    assert_eq!(EngineError::from_u32(16), Some(EngineError::Sanitizer));
    assert_eq!(EngineError::Sanitizer.name(), "SANITIZER");
    assert_eq!(EngineError::from_u32(17), Some(EngineError::DoorbellFault));
    assert_eq!(EngineError::DoorbellFault.name(), "DOORBELL_FAULT");
    assert!(EngineError::from_u32(0).is_none() && EngineError::from_u32(18).is_none());
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), 17, "names are distinct");
}

#[test]
fn packets_round_trip_on_both_generations() {
    use vgpu_hwif::packet::{decode_header, EngineError, Packet};
    let packets = [
        Packet::Nop { words: 3 },
        Packet::Indirect {
            va: 0x1234_5678_9abc,
            size: 64,
        },
        Packet::Fence {
            va: 0x10_0000_0008,
            seqno: u64::MAX - 1,
            flags: 1,
        },
        Packet::SemWait {
            va: 8,
            value: 7,
            op: 2,
        },
        Packet::SemSignal {
            va: 16,
            value: 9,
            op: 1,
        },
        Packet::Timestamp { va: 0x40 },
        Packet::Copy {
            src: 1,
            dst: 2,
            size: 1 << 32,
        },
        Packet::Copy2d(Copy2dPacket {
            src: 3,
            dst: 4,
            src_pitch: 100,
            dst_pitch: 200,
            width: 50,
            height: 7,
        }),
        Packet::Fill {
            dst: 5,
            size: 6,
            pattern: 0xdead_beef,
        },
    ];
    for generation in [1, 2] {
        for p in packets {
            let mut w = [0u32; 16];
            let n = p.encode(generation, &mut w).unwrap();
            let h = decode_header(generation, w[0]).unwrap();
            assert_eq!((h.opcode, h.words as usize), (p.opcode(), n));
            assert_eq!(Packet::decode(h, &w[..n]), Ok(p), "gen {generation}");
            // The other generation's decoder refuses the header.
            assert_eq!(
                decode_header(3 - generation, w[0]),
                Err(EngineError::BadHeader)
            );
        }
    }
}

fn dispatch() -> vgpu_hwif::packet::DispatchPacket {
    vgpu_hwif::packet::DispatchPacket {
        module_va: 0x40_0000,
        module_size: 512,
        kernel: 1,
        args_va: 0x1_0050_0000,
        args_size: 24,
        grid: [4, 3, 2],
        wg: [256, 2, 2],
        shared_size: 1024,
    }
}

#[test]
fn dispatch_round_trips_through_its_struct() {
    use vgpu_hwif::packet::{decode_header, Packet, DISPATCH_PAYLOAD_WORDS};
    let p = Packet::Dispatch(dispatch());
    for generation in [1, 2] {
        let mut w = [0u32; 16];
        let n = p.encode(generation, &mut w).unwrap();
        assert_eq!(n, 1 + DISPATCH_PAYLOAD_WORDS);
        assert_eq!(n, p.words());
        let h = decode_header(generation, w[0]).unwrap();
        assert_eq!(Packet::decode(h, &w[..n]), Ok(p));
        // The payload layout is the documented one.
        assert_eq!(
            &w[1..n],
            &[
                0x40_0000,
                0,
                512,
                1,
                0x0050_0000,
                1,
                24,
                4,
                3,
                2,
                256,
                2,
                2,
                1024
            ]
        );
    }
    // Too short a buffer: nothing written.
    let mut short = [7u32; 14];
    assert_eq!(p.encode(2, &mut short), None);
    assert_eq!(short, [7; 14]);
}

#[test]
fn dispatch_operands_are_checked_without_wrapping() {
    use vgpu_hwif::packet::{DispatchPacket, EngineError};
    let bad = |f: fn(&mut DispatchPacket)| {
        let mut d = dispatch();
        f(&mut d);
        DispatchPacket::decode(&d.payload())
    };
    assert_eq!(
        DispatchPacket::decode(&dispatch().payload()),
        Ok(dispatch())
    );
    // 2^31 × 2^31 × 4 = 2^64 wraps to 0 in 64-bit arithmetic: refused.
    assert_eq!(
        bad(|d| d.wg = [1 << 31, 1 << 31, 4]),
        Err(EngineError::BadOperand)
    );
    assert_eq!(bad(|d| d.wg = [u32::MAX; 3]), Err(EngineError::BadOperand));
    assert_eq!(bad(|d| d.wg = [1025, 1, 1]), Err(EngineError::BadOperand));
    assert_eq!(
        bad(|d| d.wg = [32, 32, 1]),
        Ok(DispatchPacket {
            wg: [32, 32, 1],
            ..dispatch()
        })
    );
    assert_eq!(bad(|d| d.grid[1] = 0), Err(EngineError::BadOperand));
    assert_eq!(bad(|d| d.module_size = 0), Err(EngineError::BadOperand));
    assert_eq!(bad(|d| d.args_size = 4097), Err(EngineError::BadOperand));
    assert_eq!(bad(|d| d.shared_size = 65537), Err(EngineError::BadOperand));
    assert_eq!(bad(|d| d.module_va |= 2), Err(EngineError::Misaligned));
    assert_eq!(bad(|d| d.args_va |= 1), Err(EngineError::Misaligned));
    // An unaligned argument VA does not matter without arguments.
    assert!(bad(|d| {
        d.args_va |= 1;
        d.args_size = 0;
    })
    .is_ok());
    // A grid whose workgroup count does not fit 64 bits decodes (the
    // device refuses it when it loads the dispatch) and says so.
    let huge = DispatchPacket {
        grid: [u32::MAX; 3],
        ..dispatch()
    };
    assert_eq!(DispatchPacket::decode(&huge.payload()), Ok(huge));
    assert_eq!(huge.workgroups(), None);
    assert_eq!(dispatch().workgroups(), Some(24));
    assert_eq!(dispatch().workgroup_threads(), Some(1024));
    assert_eq!(
        DispatchPacket::decode(&[0; 13]),
        Err(EngineError::BadLength)
    );
}

#[test]
fn opcode_names_are_hwifs() {
    use vgpu_hwif::packet::{opcode_name, Packet, OPCODES, OP_COPY_2D, OP_DISPATCH};
    assert_eq!(opcode_name(OP_COPY_2D), "COPY_2D");
    assert_eq!(Packet::Dispatch(dispatch()).name(), "DISPATCH");
    assert_eq!(opcode_name(OP_DISPATCH), "DISPATCH");
    assert_eq!(opcode_name(0x7f), "UNKNOWN");
    let mut names: Vec<_> = OPCODES.iter().map(|&o| opcode_name(o)).collect();
    assert!(!names.contains(&"UNKNOWN"));
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), OPCODES.len(), "names are distinct");
    // Every opcode with a fixed length is in the table.
    for op in 0..=255u8 {
        if vgpu_hwif::packet::payload_words(op).is_some() {
            assert!(OPCODES.contains(&op), "{op:#x}");
        }
    }
}

#[test]
fn page_table_entries_build_and_decode_once() {
    use vgpu_hwif::mmu::{
        huge_entry, leaf_entry, table_entry, Access, CachePolicy, FaultReason, Leaf, Pte, PteKind,
        PTE_EXEC, PTE_READ, PTE_WRITE,
    };
    let t = Pte::table(0x1234_5000);
    assert_eq!(t.bits(), table_entry(0x1234_5000));
    assert_eq!(t.decode(3), Ok(PteKind::Table(0x1234_5000)));
    assert_eq!(t.decode(1), Ok(PteKind::Table(0x1234_5000)));
    // A table entry read at level 0 is a leaf with no permissions.
    assert_eq!(
        t.decode(0),
        Ok(PteKind::Leaf(Leaf {
            page: 0x1234_5000,
            shift: 12,
            perms: 0,
            cache: CachePolicy::Cached
        }))
    );
    let l = Pte::leaf(
        0xabc_d000,
        PTE_READ | PTE_WRITE | 1 << 40,
        CachePolicy::Uncached,
    );
    assert_eq!(
        l.bits(),
        leaf_entry(0xabc_d000, PTE_READ | PTE_WRITE, CachePolicy::Uncached)
    );
    assert!(l.is_valid() && !l.is_huge());
    assert_eq!(
        (l.address(), l.permissions()),
        (0xabc_d000, PTE_READ | PTE_WRITE)
    );
    assert_eq!(l.cache_policy(), Some(CachePolicy::Uncached));
    assert!(l.allows(Access::Atomic) && !l.allows(Access::Execute));
    assert_eq!(l.reserved_bits(), 0);
    assert_eq!(
        l.decode(0),
        Ok(PteKind::Leaf(Leaf {
            page: 0xabc_d000,
            shift: 12,
            perms: PTE_READ | PTE_WRITE,
            cache: CachePolicy::Uncached
        }))
    );
    // Leaf bits in a table entry are malformed.
    assert_eq!(l.decode(2), Err(FaultReason::Malformed));
    let h = Pte::huge(0x4020_0000, PTE_READ | PTE_EXEC, CachePolicy::WriteCombined);
    assert_eq!(
        h.bits(),
        huge_entry(0x4020_0000, PTE_READ | PTE_EXEC, CachePolicy::WriteCombined)
    );
    assert!(h.is_huge());
    assert!(matches!(
        h.decode(1),
        Ok(PteKind::Leaf(Leaf { shift: 21, .. }))
    ));
    for level in [0, 2, 3] {
        assert_eq!(
            h.decode(level),
            Err(FaultReason::Malformed),
            "HUGE at {level}"
        );
    }
    // A 2 MiB page that is not 2 MiB aligned.
    let m = Pte::huge(0x4000_1000, PTE_READ, CachePolicy::Cached);
    assert_eq!(m.decode(1), Err(FaultReason::Malformed));
    // Not present wins over everything else.
    assert_eq!(Pte::INVALID.decode(0), Err(FaultReason::NotPresent));
    assert_eq!(Pte::from_bits(!1).decode(2), Err(FaultReason::NotPresent));
    // Reserved bits, cache policy 3, a level past the root.
    assert_eq!(
        Pte::from_bits(l.bits() | 1 << 60).decode(0),
        Err(FaultReason::Malformed)
    );
    assert_eq!(Pte::from_bits(l.bits() | 1 << 60).reserved_bits(), 1 << 60);
    let c3 = Pte::from_bits(l.bits() | 3 << 5);
    assert_eq!(c3.cache_policy(), None);
    assert_eq!(c3.decode(0), Err(FaultReason::Malformed));
    assert_eq!(t.decode(4), Err(FaultReason::Malformed));
}

#[test]
fn sanitizer_commands_and_events_round_trip() {
    use vgpu_hwif::sanitize::SanRange;
    let mut ranges = [SanRange { pa: 0, size: 0 }; SAN_MEM_RANGES];
    ranges[0] = SanRange {
        pa: 0x10_0000,
        size: 0x2000,
    };
    ranges[1] = SanRange {
        pa: 0x40_0000,
        size: 0x20_0000,
    };
    for cmd in [
        Command::SanMem {
            op: SAN_MEM_OWN,
            count: 2,
            ranges,
            object: 0x1234_5678_9abc,
            gen: 3,
        },
        Command::SanMem {
            op: SAN_MEM_RELEASE,
            count: 2,
            ranges,
            object: 0x1234_5678_9abc,
            gen: 3,
        },
        Command::SanMem {
            op: SAN_MEM_OWN_TABLES,
            count: 2,
            ranges,
            object: 0x1234_5678_9abc,
            gen: 3,
        },
        Command::SanReport { seq: 17 },
    ] {
        let mut buf = [0u8; 256];
        let n = cmd.encode(5, &mut buf).unwrap();
        assert_eq!(n, cmd.opcode().command_size());
        assert_eq!(Command::decode(&buf[..n]).1, Ok(cmd));
    }
    // Unknown operation, and a range past `count`: reserved.
    for (op, count) in [(3, 2), (SAN_MEM_OWN, 1)] {
        let mut buf = [0u8; 256];
        let cmd = Command::SanMem {
            op,
            count,
            ranges,
            object: 0,
            gen: 0,
        };
        let n = cmd.encode(5, &mut buf).unwrap();
        assert_eq!(
            Command::decode(&buf[..n]).1.map_err(|e| e.status()),
            Err(Status::ReservedNonZero)
        );
    }
    assert!(
        Opcode::SanReport.reply_size() <= 512,
        "fits the KMD's reply area"
    );
    let ev = Event::Sanitizer {
        ctx_id: 3,
        engine: 1,
        check: vgpu_hwif::sanitize::Check::TlbStale as u32,
        flags: vgpu_hwif::sanitize::SAN_FLAG_STOPPED,
        packet_va: 0xffff_0040,
        seq: 9,
        va: 0x20_1000,
    };
    let rec = ev.to_record(7, 100);
    assert_eq!(Event::from_record(&rec), Ok(ev));
    assert_eq!(rec.kind, 8);
}

#[test]
fn sanitizer_checks_have_stable_ids() {
    use vgpu_hwif::sanitize::{Check, CHECKS};
    let ids: Vec<&str> = Check::ALL.iter().map(|c| c.id()).collect();
    assert_eq!(
        ids,
        [
            "SAN-RING-UNPUBLISHED",
            "SAN-RING-INDEX",
            "SAN-TLB-STALE",
            "SAN-TLB-INV-ORDER",
            "SAN-CMDBUF-UNMAPPED",
            "SAN-FENCE-REGRESS",
            "SAN-FENCE-WRAP",
            "SAN-XENGINE-HAZARD",
            "SAN-WAIT-UNSATISFIABLE",
            "SAN-DMA-UNOWNED",
            "SAN-TEARDOWN",
            "SAN-PT-INVALID-TABLE",
            "SAN-PT-LEVEL",
            "SAN-PT-ALIGN",
            "SAN-PT-UNOWNED",
            "SAN-FW-POLL",
        ]
    );
    for (i, c) in Check::ALL.into_iter().enumerate() {
        assert_eq!(c as usize, i + 1);
        assert_eq!(Check::from_u32(c as u32), Some(c));
        assert_eq!(Check::from_id(c.id()), Some(c));
        assert_eq!(Check::from_id(&c.id()[4..].to_lowercase()), Some(c));
        assert!(!c.hint().is_empty() && !c.meaning().is_empty());
        assert_eq!(c.bit(), 1 << i);
    }
    assert_eq!(Check::from_u32(0), None);
    assert_eq!(Check::from_u32(CHECKS as u32 + 1), None);
    assert_eq!(Check::from_id("SAN-NOPE"), None);
}

#[test]
fn packets_describe_themselves() {
    use vgpu_hwif::describe::{HeaderWord, PacketWords};
    use vgpu_hwif::packet::{encode_header, Packet, FENCE_NO_EVENT, OP_COPY};
    let p = Packet::Copy {
        src: 0x1000,
        dst: 0x2000,
        size: 64,
    };
    assert_eq!(p.to_string(), "COPY src=0x1000 dst=0x2000 size=64");
    let f = Packet::Fence {
        va: 0x80,
        seqno: 3,
        flags: FENCE_NO_EVENT,
    };
    assert_eq!(f.to_string(), "FENCE va=0x80 seqno=3 NO_EVENT");
    let mut w = [0u32; 16];
    let n = p.encode(2, &mut w).unwrap();
    let words = PacketWords {
        generation: 2,
        words: &w[..n],
    };
    assert_eq!(words.to_string(), p.to_string());
    // A COPY header on 5 words: the header decodes, the packet does not.
    let bad = [encode_header(1, OP_COPY, 5), 0, 0, 0, 0];
    assert_eq!(
        PacketWords {
            generation: 1,
            words: &bad
        }
        .to_string(),
        "COPY (5 words, header 0x00000510): BAD_LENGTH"
    );
    assert_eq!(
        HeaderWord {
            generation: 2,
            word: 0xdead_beef
        }
        .to_string(),
        "header 0xdeadbeef: BAD_HEADER"
    );
    assert_eq!(
        HeaderWord {
            generation: 2,
            word: encode_header(2, OP_COPY, 7)
        }
        .to_string(),
        "COPY (7 words, header 0xa0100007)"
    );
}

mod capture_format {
    use vgpu_hwif::capture::{
        self, section, walk, Capture, CaptureHeader, CaptureMemory, SectionHeader, WalkEnd,
    };
    use vgpu_hwif::coredump::{base64_decode, base64_encode, base64_len, field, Base64Error};
    use vgpu_hwif::mmu::{leaf_entry, table_entry, CachePolicy, FaultReason, PTE_READ};
    use vgpu_hwif::pod::Pod;

    fn section(out: &mut Vec<u8>, kind: u32, payload: &[u8]) {
        let h = SectionHeader {
            kind,
            flags: 0,
            size: payload.len() as u64,
        };
        out.extend_from_slice(h.as_bytes());
        out.extend_from_slice(payload);
        out.resize(capture::pad8(out.len()), 0);
    }

    fn build(mem: &[(u64, Vec<u8>)]) -> Vec<u8> {
        let mut out = vec![0u8; core::mem::size_of::<CaptureHeader>()];
        for (pa, bytes) in mem {
            let mut p = CaptureMemory {
                pa: *pa,
                va: capture::NO_VA,
                size: bytes.len() as u64,
                what: capture::memory::TABLE,
                reserved: 0,
            }
            .as_bytes()
            .to_vec();
            p.extend_from_slice(bytes);
            section(&mut out, section::MEMORY, &p);
        }
        section(&mut out, 99, b"unknown kinds are skipped");
        let h = CaptureHeader {
            magic: capture::MAGIC,
            version: capture::VERSION,
            header_size: core::mem::size_of::<CaptureHeader>() as u32,
            total_size: out.len() as u64,
            sections: mem.len() as u32 + 1,
            ..CaptureHeader::zeroed()
        };
        h.write_to(&mut out).unwrap();
        out
    }

    fn page_with(entries: &[(usize, u64)]) -> Vec<u8> {
        let mut p = vec![0u8; 4096];
        for &(i, v) in entries {
            p[8 * i..8 * i + 8].copy_from_slice(&v.to_le_bytes());
        }
        p
    }

    #[test]
    fn sections_memory_and_walk_over_a_capture() {
        // VA 0x1234_5000: L3 index 0, L2 0, L1 0x91, L0 0x145.
        let va = 0x1234_5000u64;
        let idx = |l| vgpu_hwif::mmu::level_index(va, l);
        let cap = build(&[
            (0x1000, page_with(&[(idx(3), table_entry(0x2000))])),
            (0x2000, page_with(&[(idx(2), table_entry(0x3000))])),
            (0x3000, page_with(&[(idx(1), table_entry(0x4000))])),
            (
                0x4000,
                page_with(&[(idx(0), leaf_entry(0x8000, PTE_READ, CachePolicy::Cached))]),
            ),
        ]);
        let c = Capture::parse(&cap).unwrap();
        assert_eq!(c.sections().count(), 5);
        assert_eq!(c.of(section::MEMORY).count(), 4);
        let w = c.walk(0x1000, va + 0x10, 48);
        assert_eq!(w.len, 4);
        assert_eq!(
            w.end,
            WalkEnd::Leaf {
                page: 0x8000,
                shift: 12,
                perms: PTE_READ
            }
        );
        assert_eq!(w.steps[0].table, 0x1000);
        assert_eq!(w.steps[3].index, idx(0));
        // The next page is not present at level 0; a table outside the
        // capture is unknown; a VA too wide is out of range.
        let w = c.walk(0x1000, va + 0x1000, 48);
        assert_eq!((w.len, w.end), (4, WalkEnd::Fault(FaultReason::NotPresent)));
        assert_eq!(c.walk(0x9000, va, 48).end, WalkEnd::Unknown);
        assert_eq!(c.walk(0x1000, 1 << 45, 40).end, WalkEnd::OutOfRange);
        // A cycle is malformed.
        let cyc = |pa: u64| {
            Some(if pa & !0xfff == 0x1000 {
                table_entry(0x1000)
            } else {
                0
            })
        };
        assert_eq!(
            walk(cyc, 0x1000, va, 48).end,
            WalkEnd::Fault(FaultReason::Malformed)
        );
        // Reads across two captured ranges, and not past them.
        let mut b = [0u8; 16];
        assert!(c.read_pa(0x1ff8, &mut b));
        assert!(!c.read_pa(0x4ff8, &mut b));
    }

    #[test]
    fn bad_headers_are_refused() {
        let mut cap = build(&[]);
        assert!(Capture::parse(&cap[..10]).is_err());
        cap.push(0);
        assert_eq!(
            Capture::parse(&cap).unwrap_err(),
            capture::CaptureError::Size
        );
        cap.pop();
        cap[0] ^= 1;
        assert_eq!(
            Capture::parse(&cap).unwrap_err(),
            capture::CaptureError::Magic
        );
    }

    #[test]
    fn base64_round_trips_and_rejects_garbage() {
        for n in 0..70usize {
            let src: Vec<u8> = (0..n).map(|i| (i * 37 + 11) as u8).collect();
            let mut enc = vec![0u8; base64_len(n)];
            assert_eq!(base64_encode(&src, &mut enc), Some(enc.len()));
            let mut text = enc.clone();
            if text.len() > 8 {
                text.insert(8, b'\n');
            }
            let mut dec = vec![0u8; n + 3];
            let got = base64_decode(&text, &mut dec).unwrap();
            assert_eq!(&dec[..got], &src[..]);
        }
        let mut enc = [0u8; 8];
        base64_encode(b"vgpu", &mut enc).unwrap();
        assert_eq!(&enc, b"dmdwdQ==");
        let mut out = [0u8; 8];
        assert_eq!(base64_decode(b"dmd", &mut out), Err(Base64Error::Length));
        assert_eq!(
            base64_decode(b"dm*w", &mut out),
            Err(Base64Error::BadChar(b'*'))
        );
        assert_eq!(
            base64_decode(b"dmdwdQ==", &mut out[..2]),
            Err(Base64Error::Full)
        );
        assert_eq!(field("job slot=3 seqno=9", "seqno"), Some("9"));
        assert_eq!(field("job slot=3", "engine"), None);
    }
}
