//! Control processor tests: malformed commands, `IDENTIFY`, `PING`, and
//! replies that do not fit.

use super::*;
use crate::config::{DeviceConfig, Generation};
use crate::core::clock::ManualClock;
use crate::core::gpu::GpuConfig;
use vgpu_hwif::event::EventRecord;
use vgpu_hwif::proto::{PingCmd, RasQueryReply};

const ROOM: usize = MAX_REPLY_SIZE;

/// A control processor over a GPU without engine threads (enough for
/// commands that never wait for an engine), and that GPU.
fn gen_with_gpu(g: Generation) -> (ControlProcessor, Arc<Gpu>) {
    let cfg = DeviceConfig::new(g, 4).unwrap();
    let gpu = Arc::new(Gpu::new(
        GpuConfig::for_device(&cfg),
        Arc::new(ManualClock::new(0)),
    ));
    gpu.firmware.preload_builtin(0);
    (ControlProcessor::new(&cfg, gpu.clone()), gpu)
}

fn header(opcode: u32, flags: u32, tag: u64) -> Vec<u8> {
    CommandHeader { opcode, flags, tag }.as_bytes().to_vec()
}

fn ping(tag: u64, cookie: u64) -> Vec<u8> {
    PingCmd {
        hdr: CommandHeader {
            opcode: Opcode::Ping as u32,
            flags: 0,
            tag,
        },
        cookie,
    }
    .as_bytes()
    .to_vec()
}

fn with_extra(mut v: Vec<u8>, n: usize) -> Vec<u8> {
    v.extend(std::iter::repeat_n(0xAB, n));
    v
}

/// Expected reply header for a rejected command.
struct Case {
    name: &'static str,
    bytes: Vec<u8>,
    status: Status,
    opcode: u32,
    tag: u64,
}

#[test]
fn malformed_commands_get_exact_error_replies() {
    let ping_op = Opcode::Ping as u32;
    let id_op = Opcode::Identify as u32;
    let cases = [
        Case {
            name: "empty",
            bytes: vec![],
            status: Status::Truncated,
            opcode: 0,
            tag: 0,
        },
        Case {
            name: "15 bytes",
            bytes: header(ping_op, 0, 0x1111)[..15].to_vec(),
            status: Status::Truncated,
            opcode: 0,
            tag: 0,
        },
        Case {
            name: "1 byte",
            bytes: vec![2],
            status: Status::Truncated,
            opcode: 0,
            tag: 0,
        },
        Case {
            name: "header-only PING",
            bytes: header(ping_op, 0, 0x2222),
            status: Status::Truncated,
            opcode: ping_op,
            tag: 0x2222,
        },
        Case {
            name: "PING missing one byte",
            bytes: ping(0x2323, 5)[..23].to_vec(),
            status: Status::Truncated,
            opcode: ping_op,
            tag: 0x2323,
        },
        Case {
            name: "PING + 1 byte",
            bytes: with_extra(ping(0x3333, 9), 1),
            status: Status::Oversized,
            opcode: ping_op,
            tag: 0x3333,
        },
        Case {
            name: "IDENTIFY + 8 bytes",
            bytes: with_extra(header(id_op, 0, 0x4444), 8),
            status: Status::Oversized,
            opcode: id_op,
            tag: 0x4444,
        },
        Case {
            name: "MAX_COMMAND_SIZE + 1",
            bytes: with_extra(header(id_op, 0, 0x5555), MAX_COMMAND_SIZE + 1 - 16),
            status: Status::Oversized,
            opcode: id_op,
            tag: 0x5555,
        },
        Case {
            name: "MAX_COMMAND_SIZE + 1, unknown opcode",
            bytes: with_extra(header(0xdead, 0, 0x5656), MAX_COMMAND_SIZE + 1 - 16),
            status: Status::Oversized,
            opcode: 0xdead,
            tag: 0x5656,
        },
        Case {
            name: "unknown opcode",
            bytes: header(0x0999, 0, 0x6666),
            status: Status::UnknownOpcode,
            opcode: 0x0999,
            tag: 0x6666,
        },
        Case {
            name: "opcode 0",
            bytes: header(0, 0, 0x6767),
            status: Status::UnknownOpcode,
            opcode: 0,
            tag: 0x6767,
        },
        Case {
            name: "IDENTIFY with flags",
            bytes: header(id_op, 1, 0x7777),
            status: Status::ReservedNonZero,
            opcode: id_op,
            tag: 0x7777,
        },
        Case {
            name: "PING with high flag bit",
            bytes: {
                let mut b = ping(0x8888, 1);
                b[7] = 0x80;
                b
            },
            status: Status::ReservedNonZero,
            opcode: ping_op,
            tag: 0x8888,
        },
    ];
    for case in cases {
        let (mut cp, gpu) = gen_with_gpu(Generation::Gen1);
        let r = cp.process(&case.bytes, ROOM);
        assert_eq!(r.len(), REPLY_HEADER_SIZE, "{}", case.name);
        let h = r.header();
        assert_eq!(
            h,
            ReplyHeader {
                status: case.status as u32,
                opcode: case.opcode,
                tag: case.tag
            },
            "{}",
            case.name
        );
        assert_eq!(
            gpu.events().pending(),
            0,
            "{}: no event on error",
            case.name
        );
        assert_eq!(cp.counters().errors_for(case.status), 1, "{}", case.name);
        assert_eq!(cp.counters().replies(), 1, "{}", case.name);
    }
}

#[test]
fn identify_gen1_and_gen2() {
    for (g, fw, n, va) in [
        (Generation::Gen1, 0x01_03_00, 1, 40),
        (Generation::Gen2, 0x02_01_00, 2, 48),
    ] {
        let (mut cp, gpu) = gen_with_gpu(g);
        let r = cp.process(&header(Opcode::Identify as u32, 0, 0xabc), ROOM);
        assert_eq!(r.len(), core::mem::size_of::<IdentifyReply>());
        let id = IdentifyReply::read_from(r.as_bytes()).unwrap();
        assert_eq!(
            id,
            IdentifyReply {
                hdr: ReplyHeader {
                    status: 0,
                    opcode: Opcode::Identify as u32,
                    tag: 0xabc
                },
                magic: u32::from_le_bytes(*b"VGPU"),
                protocol_version: PROTOCOL_VERSION,
                firmware_version: fw,
                generation: n,
                page_sizes: (1 << 12) | (1 << 21),
                engine_mask: 0b11,
                va_bits: va,
                max_contexts: 64,
                min_ring_size: 4096,
                max_ring_size: 1 << 20,
                compute_units: 4,
                event_record_size: 64,
                max_command_size: 4096,
                layout_fingerprint: FINGERPRINT,
                features: vgpu_hwif::proto::FEATURE_VRAM
                    | vgpu_hwif::proto::FEATURE_FIRMWARE_RUNNING
                    | vgpu_hwif::proto::FEATURE_USER_QUEUES
                    | vgpu_hwif::proto::FEATURE_PREEMPTION
                    | vgpu_hwif::proto::FEATURE_POWER_STATES,
                function: 0,
                vram_size: 512 << 20,
                visible_vram_size: 128 << 20,
            }
        );
        assert_eq!(gpu.events().pending(), 0);
        assert_eq!(cp.counters().commands_for(Opcode::Identify), 1);
    }
}

#[test]
fn ping_replies_with_event_seq_and_posts_event() {
    let (mut cp, gpu) = gen_with_gpu(Generation::Gen2);
    let r = cp.process(&ping(0x77, 0xfeed_beef), ROOM);
    assert_eq!(
        PingReply::read_from(r.as_bytes()).unwrap(),
        PingReply {
            hdr: ReplyHeader {
                status: 0,
                opcode: Opcode::Ping as u32,
                tag: 0x77
            },
            cookie: 0xfeed_beef,
            event_seq: 1
        }
    );
    assert_eq!(r.len(), core::mem::size_of::<PingReply>());
    let rec: EventRecord = gpu.events().commit_front(0).unwrap();
    assert_eq!(rec.seq, 1);
    assert_eq!(rec.timestamp_ns, 0);
    assert_eq!(
        Event::from_record(&rec).unwrap(),
        Event::Ping {
            cookie: 0xfeed_beef
        }
    );
    let r2 = cp.process(&ping(0x78, 1), ROOM);
    assert_eq!(PingReply::read_from(r2.as_bytes()).unwrap().event_seq, 2);
    assert_eq!(cp.counters().commands_for(Opcode::Ping), 2);
}

#[test]
fn reply_that_does_not_fit_is_refused_without_side_effects() {
    let (mut cp, gpu) = gen_with_gpu(Generation::Gen1);
    let room = core::mem::size_of::<PingReply>() - 1;
    let r = cp.process(&ping(0x99, 3), room);
    assert_eq!(
        r.header(),
        ReplyHeader {
            status: Status::BadDescriptor as u32,
            opcode: Opcode::Ping as u32,
            tag: 0x99
        }
    );
    assert_eq!(r.len(), REPLY_HEADER_SIZE);
    assert_eq!(gpu.events().pending(), 0);
    let r = cp.process(&header(Opcode::Identify as u32, 0, 1), REPLY_HEADER_SIZE);
    assert_eq!(r.status(), Some(Status::BadDescriptor));
    assert_eq!(cp.counters().errors_for(Status::BadDescriptor), 2);
    assert_eq!(cp.counters().commands_for(Opcode::Ping), 0);
}

#[test]
fn max_reply_size_is_the_largest_reply() {
    // SAN_REPORT's reply (a whole sanitizer report) is the largest.
    assert_eq!(MAX_REPLY_SIZE, core::mem::size_of::<SanReportReply>());
    assert!(MAX_REPLY_SIZE >= core::mem::size_of::<RasQueryReply>());
    assert!(MAX_REPLY_SIZE >= core::mem::size_of::<IdentifyReply>());
}
