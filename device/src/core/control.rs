//! The control processor: executes one command already copied out of guest
//! memory and produces its reply.
//!
//! Every input produces exactly one reply that starts with a
//! [`ReplyHeader`]: decoding errors (truncated, oversized, unknown opcode,
//! non-zero reserved fields) are answered with the matching [`Status`] and
//! echo the opcode and tag when the command had a header. A valid command
//! whose successful reply would not fit in the driver's reply buffer is not
//! executed and is answered [`Status::BadDescriptor`] (the buffer is large
//! enough for a header, which the transport guarantees).

use vgpu_hwif::event::{Event, EVENT_RECORD_SIZE};
use vgpu_hwif::layout::FINGERPRINT;
use vgpu_hwif::pod::Pod;
use vgpu_hwif::proto::{
    Command, CommandHeader, IdentifyReply, Opcode, PingReply, ReplyHeader, Status, IDENTIFY_MAGIC,
    MAX_COMMAND_SIZE, MAX_CONTEXTS, MAX_RING_SIZE, MIN_RING_SIZE, PAGE_SIZE_2M, PAGE_SIZE_4K,
    PROTOCOL_VERSION, VA_BITS,
};

use super::counters::Counters;
use super::events::EventUnit;
use crate::config::DeviceConfig;

/// Size of a reply header.
pub const REPLY_HEADER_SIZE: usize = core::mem::size_of::<ReplyHeader>();

/// The largest reply of any command.
pub const MAX_REPLY_SIZE: usize = {
    let mut max = REPLY_HEADER_SIZE;
    let mut i = 0;
    while i < Opcode::ALL.len() {
        let n = Opcode::ALL[i].reply_size();
        if n > max {
            max = n;
        }
        i += 1;
    }
    max
};

/// Engines the device models: none yet (bit `i` = engine `i`, see
/// [`vgpu_hwif::proto::engine`]).
pub const ENGINE_MASK: u32 = 0;

/// One reply, at most [`MAX_REPLY_SIZE`] bytes.
#[derive(Clone, Copy)]
pub struct Reply {
    bytes: [u8; MAX_REPLY_SIZE],
    len: usize,
}

impl Reply {
    fn from_pod<T: Pod>(value: &T) -> Reply {
        let mut bytes = [0u8; MAX_REPLY_SIZE];
        // Every reply struct fits by construction of MAX_REPLY_SIZE; a
        // struct that did not would produce an empty reply, which the
        // transport treats as unanswerable rather than overflowing.
        let len = value.write_to(&mut bytes).unwrap_or(0);
        Reply { bytes, len }
    }

    fn error(cmd: Option<&CommandHeader>, status: Status) -> Reply {
        Reply::from_pod(&ReplyHeader::for_command(cmd, status))
    }

    /// The reply's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        self.bytes.get(..self.len).unwrap_or(&[])
    }

    /// The reply's length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the reply is empty (never the case for replies built here).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The reply's header.
    pub fn header(&self) -> ReplyHeader {
        ReplyHeader::read_from(self.as_bytes()).unwrap_or_else(ReplyHeader::zeroed)
    }

    /// The reply's status, if it is a known one.
    pub fn status(&self) -> Option<Status> {
        Status::from_u32(self.header().status)
    }
}

impl core::fmt::Debug for Reply {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Reply")
            .field("header", &self.header())
            .field("len", &self.len)
            .finish()
    }
}

/// The control processor.
#[derive(Debug)]
pub struct ControlProcessor {
    identity: IdentifyReply,
    counters: Counters,
}

impl ControlProcessor {
    /// A processor for a device configured as `config`.
    pub fn new(config: &DeviceConfig) -> Self {
        ControlProcessor {
            identity: identity(config),
            counters: Counters::default(),
        }
    }

    /// Decodes and executes `bytes` (a command copied out of guest memory;
    /// the transport passes at most `MAX_COMMAND_SIZE + 1` bytes so that an
    /// oversized command is recognised). `reply_room` is the size of the
    /// driver's reply buffer. `PING` raises its event in `events` at device
    /// time `now_ns`.
    pub fn process(
        &mut self,
        bytes: &[u8],
        reply_room: usize,
        events: &mut EventUnit,
        now_ns: u64,
    ) -> Reply {
        let (hdr, decoded) = Command::decode(bytes);
        let cmd = match decoded {
            Ok(cmd) => cmd,
            Err(e) => {
                let status = e.status();
                self.counters.count_error(status);
                log::debug!(
                    "control: {} bytes rejected: {:?} -> {}",
                    bytes.len(),
                    e,
                    status.name()
                );
                return Reply::error(hdr.as_ref(), status);
            }
        };
        // `decode` returns a header with every successful command.
        let Some(hdr) = hdr else {
            self.counters.count_error(Status::Truncated);
            return Reply::error(None, Status::Truncated);
        };
        let op = cmd.opcode();
        if op.reply_size() > reply_room {
            self.counters.count_error(Status::BadDescriptor);
            log::debug!(
                "control: {} tag {:#x}: reply buffer of {} bytes cannot hold {} bytes",
                op.name(),
                hdr.tag,
                reply_room,
                op.reply_size()
            );
            return Reply::error(Some(&hdr), Status::BadDescriptor);
        }
        let ok = ReplyHeader::for_command(Some(&hdr), Status::Ok);
        let reply = match cmd {
            Command::Identify => Reply::from_pod(&IdentifyReply {
                hdr: ok,
                ..self.identity
            }),
            Command::Ping { cookie } => {
                let event_seq = events.post(Event::Ping { cookie }, now_ns);
                Reply::from_pod(&PingReply {
                    hdr: ok,
                    cookie,
                    event_seq,
                })
            }
            // The GPU blocks (contexts, rings, MMU, resets, telemetry) are
            // not modelled by this core yet: refuse rather than pretend.
            _ => {
                log::debug!("control: {} tag {:#x} -> not modelled", op.name(), hdr.tag);
                return Reply::error(Some(&hdr), Status::UnknownOpcode);
            }
        };
        self.counters.count_command(op);
        log::debug!("control: {} tag {:#x} -> OK", op.name(), hdr.tag);
        reply
    }

    /// Commands and error replies so far (the event and protocol fields are
    /// not kept here and read 0).
    pub fn counters(&self) -> Counters {
        self.counters
    }
}

/// The identify data of a device configured as `config` (header zeroed).
pub fn identity(config: &DeviceConfig) -> IdentifyReply {
    IdentifyReply {
        hdr: ReplyHeader::zeroed(),
        magic: IDENTIFY_MAGIC,
        protocol_version: PROTOCOL_VERSION,
        firmware_version: config.generation.firmware_version(),
        generation: config.generation.number(),
        page_sizes: PAGE_SIZE_4K | PAGE_SIZE_2M,
        engine_mask: ENGINE_MASK,
        va_bits: VA_BITS,
        max_contexts: MAX_CONTEXTS,
        min_ring_size: MIN_RING_SIZE,
        max_ring_size: MAX_RING_SIZE,
        // Without a compute engine there are no compute units to report;
        // the configured count takes effect once the engine exists.
        compute_units: if ENGINE_MASK & (1 << vgpu_hwif::proto::engine::COMPUTE) != 0 {
            config.compute_units
        } else {
            0
        },
        event_record_size: EVENT_RECORD_SIZE as u32,
        max_command_size: MAX_COMMAND_SIZE as u32,
        layout_fingerprint: FINGERPRINT,
        reserved: [0; 4],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{DeviceConfig, Generation};
    use vgpu_hwif::event::EventRecord;
    use vgpu_hwif::proto::PingCmd;

    const ROOM: usize = MAX_REPLY_SIZE;

    fn gen(g: Generation) -> ControlProcessor {
        ControlProcessor::new(&DeviceConfig::new(g, 4).unwrap())
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
            let mut cp = gen(Generation::Gen1);
            let mut ev = EventUnit::new();
            let r = cp.process(&case.bytes, ROOM, &mut ev, 0);
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
            assert_eq!(ev.pending(), 0, "{}: no event on error", case.name);
            assert_eq!(cp.counters().errors_for(case.status), 1, "{}", case.name);
            assert_eq!(cp.counters().replies(), 1, "{}", case.name);
        }
    }

    #[test]
    fn identify_gen1_and_gen2() {
        for (g, fw, n) in [
            (Generation::Gen1, 0x01_03_00, 1),
            (Generation::Gen2, 0x02_00_01, 2),
        ] {
            let mut cp = gen(g);
            let mut ev = EventUnit::new();
            let r = cp.process(&header(Opcode::Identify as u32, 0, 0xabc), ROOM, &mut ev, 0);
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
                    engine_mask: 0,
                    va_bits: 48,
                    max_contexts: 64,
                    min_ring_size: 4096,
                    max_ring_size: 1 << 20,
                    compute_units: 0,
                    event_record_size: 64,
                    max_command_size: 4096,
                    layout_fingerprint: FINGERPRINT,
                    reserved: [0; 4],
                }
            );
            assert_eq!(ev.pending(), 0);
            assert_eq!(cp.counters().commands_for(Opcode::Identify), 1);
        }
    }

    #[test]
    fn ping_replies_with_event_seq_and_posts_event() {
        let mut cp = gen(Generation::Gen2);
        let mut ev = EventUnit::new();
        let r = cp.process(&ping(0x77, 0xfeed_beef), ROOM, &mut ev, 1234);
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
        let rec: EventRecord = ev.commit_front(0).unwrap();
        assert_eq!(rec.seq, 1);
        assert_eq!(rec.timestamp_ns, 1234);
        assert_eq!(
            Event::from_record(&rec).unwrap(),
            Event::Ping {
                cookie: 0xfeed_beef
            }
        );
        let r2 = cp.process(&ping(0x78, 1), ROOM, &mut ev, 2000);
        assert_eq!(PingReply::read_from(r2.as_bytes()).unwrap().event_seq, 2);
        assert_eq!(cp.counters().commands_for(Opcode::Ping), 2);
    }

    #[test]
    fn reply_that_does_not_fit_is_refused_without_side_effects() {
        let mut cp = gen(Generation::Gen1);
        let mut ev = EventUnit::new();
        let room = core::mem::size_of::<PingReply>() - 1;
        let r = cp.process(&ping(0x99, 3), room, &mut ev, 0);
        assert_eq!(
            r.header(),
            ReplyHeader {
                status: Status::BadDescriptor as u32,
                opcode: Opcode::Ping as u32,
                tag: 0x99
            }
        );
        assert_eq!(r.len(), REPLY_HEADER_SIZE);
        assert_eq!(ev.pending(), 0);
        let r = cp.process(
            &header(Opcode::Identify as u32, 0, 1),
            REPLY_HEADER_SIZE,
            &mut ev,
            0,
        );
        assert_eq!(r.status(), Some(Status::BadDescriptor));
        assert_eq!(cp.counters().errors_for(Status::BadDescriptor), 2);
        assert_eq!(cp.counters().commands_for(Opcode::Ping), 0);
    }

    #[test]
    fn max_reply_size_is_identify() {
        assert_eq!(MAX_REPLY_SIZE, core::mem::size_of::<IdentifyReply>());
    }
}
