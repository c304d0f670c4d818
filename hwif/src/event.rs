//! Event records: what the device tells the driver, unasked.
//!
//! The driver keeps device-writable buffers of [`EVENT_RECORD_SIZE`] bytes
//! posted on the event queue. For each event the device takes one buffer,
//! writes one [`EventRecord`], and returns it on the used ring with an
//! interrupt. Records carry a device-wide sequence number that increases by
//! one per event, so a driver can detect loss.
//!
//! When no buffer is posted the device holds events in an internal FIFO of
//! [`EVENT_FIFO_DEPTH`] records. If that overflows, the newest events are
//! dropped and counted (they still consume sequence numbers). As soon as a
//! FIFO slot frees, the device queues one [`EventKind::EventsLost`] record
//! behind the events that were waiting before the loss and ahead of any event
//! raised after it, so records always arrive in increasing sequence order and
//! every gap is explained by the `EventsLost` record right after it.

use super::pod::{pod_struct, Pod};

/// Size of one event record in bytes.
pub const EVENT_RECORD_SIZE: usize = 64;
/// Events the device holds while the driver has no buffer posted.
pub const EVENT_FIFO_DEPTH: usize = 256;

/// Event kinds. Numbers `9..=0x1f` are reserved for later blocks.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// Answer to a `PING` command. `data[0]` = cookie.
    Ping = 1,
    /// The device's event FIFO overflowed. `data[0]` = number of events
    /// dropped, `data[1]` = sequence number of the first dropped event.
    EventsLost = 2,
    /// A `FENCE` packet wrote its value. `data[0]` = context | engine << 32,
    /// `data[1]` = seqno, `data[2]` = the VA written.
    Fence = 3,
    /// A GPU MMU translation failed. `data[0]` = VA, `data[1]` = packed
    /// [`FaultInfo`], `data[2]` = GPU VA of the packet being executed,
    /// `data[3]` = fault id (for `FAULT_RESUME`), `data[4]` = compute
    /// lane | pc << 32 (`u64::MAX` outside kernels).
    Fault = 4,
    /// An engine stopped a ring on a bad packet or pointer. `data[0]` =
    /// context | engine << 32, `data[1]` = [`super::packet::EngineError`],
    /// `data[2]` = GPU VA of the packet, `data[3]` = ring read pointer |
    /// indirect depth << 32 (8 bits) | the offset in the ring-level command
    /// buffer << 40 (24 bits: of the packet at depth 1, of the `INDIRECT`
    /// leading to it deeper), `data[4]` = the packet's header word.
    EngineError = 5,
    /// A reset finished. `data[0]` = engine ([`super::proto::engine::ALL`]
    /// for a device reset) | context in flight << 32
    /// ([`super::proto::CTX_NONE`] if idle), `data[1]` = that ring's read
    /// pointer.
    ResetDone = 6,
    /// An uncorrectable memory error: the page is poisoned and data read
    /// from it is lost. `data[0]` = context | engine << 32 of the job that
    /// touched it, `data[1]` = GPU VA of the poisoned page (page aligned),
    /// `data[2]` = GPU VA of the packet being executed.
    EccError = 7,
    /// The driver sanitizer found a driver mistake
    /// ([`super::sanitize`]). `data[0]` = context | engine << 32, `data[1]`
    /// = [`super::sanitize::Check`] number | report flags << 32, `data[2]`
    /// = GPU VA of the packet, `data[3]` = the report's number (fetch it
    /// with `SAN_REPORT`), `data[4]` = the VA accessed (0 if none).
    Sanitizer = 8,
    /// The firmware crashed: it stopped, the engines with it; only
    /// `DEVICE_RESET` (then a new boot) brings the device back.
    /// `data[0]` = crash code ([`super::firmware::crash`]), `data[1]` =
    /// context | engine << 32 of the job in flight (`CTX_NONE` |
    /// `engine::ALL` << 32 if none), `data[2]` = GPU VA of its packet.
    FirmwareCrash = 9,
}

impl EventKind {
    /// The kind with this number, if any.
    pub const fn from_u32(v: u32) -> Option<EventKind> {
        match v {
            1 => Some(EventKind::Ping),
            2 => Some(EventKind::EventsLost),
            3 => Some(EventKind::Fence),
            4 => Some(EventKind::Fault),
            5 => Some(EventKind::EngineError),
            6 => Some(EventKind::ResetDone),
            7 => Some(EventKind::EccError),
            8 => Some(EventKind::Sanitizer),
            9 => Some(EventKind::FirmwareCrash),
            _ => None,
        }
    }

    /// A short upper-case name.
    pub const fn name(self) -> &'static str {
        match self {
            EventKind::Ping => "PING",
            EventKind::EventsLost => "EVENTS_LOST",
            EventKind::Fence => "FENCE",
            EventKind::Fault => "FAULT",
            EventKind::EngineError => "ENGINE_ERROR",
            EventKind::ResetDone => "RESET_DONE",
            EventKind::EccError => "ECC_ERROR",
            EventKind::Sanitizer => "SANITIZER",
            EventKind::FirmwareCrash => "FIRMWARE_CRASH",
        }
    }
}

/// `pa` of an [`Event::EccError`] whose page has no known guest-physical
/// address.
pub const ECC_PA_UNKNOWN: u64 = u64::MAX;

pod_struct! {
    /// One event record, exactly [`EVENT_RECORD_SIZE`] bytes.
    pub struct EventRecord {
        /// An [`EventKind`].
        pub kind: u32,
        /// Zero.
        pub flags: u32,
        /// Device-wide sequence number, starting at 1, +1 per event.
        pub seq: u64,
        /// Device time in nanoseconds when the event was raised.
        pub timestamp_ns: u64,
        /// Kind-specific payload (see [`EventKind`]).
        pub data: [u64; 5],
    }
}

const _: () = assert!(core::mem::size_of::<EventRecord>() == EVENT_RECORD_SIZE);

/// The second word of a fault record, unpacked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FaultInfo {
    /// Context.
    pub ctx_id: u8,
    /// Engine.
    pub engine: u8,
    /// [`super::mmu::Access`] number.
    pub access: u8,
    /// [`super::mmu::FaultReason`] number.
    pub reason: u8,
    /// Page-table level where the walk failed (3 = root, 0 = leaf table),
    /// or [`super::mmu::LEVEL_NONE`].
    pub level: u8,
    /// [`FAULT_FLAG_REPLAYABLE`] if the job is stalled awaiting
    /// `FAULT_RESUME`.
    pub flags: u8,
}

/// Fault flag: the faulting job is stalled and waits for `FAULT_RESUME`.
pub const FAULT_FLAG_REPLAYABLE: u8 = 1 << 0;

impl FaultInfo {
    /// Packs into a record word: ctx, engine, access, reason, level, flags
    /// in bytes 0..=5.
    pub fn pack(&self) -> u64 {
        u64::from(self.ctx_id)
            | u64::from(self.engine) << 8
            | u64::from(self.access) << 16
            | u64::from(self.reason) << 24
            | u64::from(self.level) << 32
            | u64::from(self.flags) << 40
    }

    /// Unpacks a record word.
    pub const fn unpack(w: u64) -> FaultInfo {
        FaultInfo {
            ctx_id: w as u8,
            engine: (w >> 8) as u8,
            access: (w >> 16) as u8,
            reason: (w >> 24) as u8,
            level: (w >> 32) as u8,
            flags: (w >> 40) as u8,
        }
    }
}

/// A decoded event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// [`EventKind::Ping`].
    Ping {
        /// The `PING` command's cookie.
        cookie: u64,
    },
    /// [`EventKind::EventsLost`].
    EventsLost {
        /// How many events were dropped.
        count: u64,
        /// The sequence number of the first dropped event.
        first_seq: u64,
    },
    /// [`EventKind::Fence`].
    Fence {
        /// Context.
        ctx_id: u32,
        /// Engine.
        engine: u32,
        /// The value written.
        seqno: u64,
        /// Where it was written.
        va: u64,
    },
    /// [`EventKind::Fault`].
    Fault {
        /// Faulting VA.
        va: u64,
        /// Who, how, why.
        info: FaultInfo,
        /// VA of the packet being executed.
        packet_va: u64,
        /// Id to name in `FAULT_RESUME`.
        fault_id: u64,
        /// Compute lane | pc << 32, or `u64::MAX`.
        lane_pc: u64,
    },
    /// [`EventKind::EngineError`].
    EngineError(EngineErrorRecord),
    /// [`EventKind::ResetDone`].
    ResetDone {
        /// Engine, or [`super::proto::engine::ALL`] for the device.
        engine: u32,
        /// Context in flight, or [`super::proto::CTX_NONE`].
        ctx_id: u32,
        /// That ring's read pointer.
        rptr: u32,
    },
    /// [`EventKind::EccError`].
    EccError {
        /// Context of the job that touched the page.
        ctx_id: u32,
        /// Engine.
        engine: u32,
        /// GPU VA of the poisoned page.
        va: u64,
        /// VA of the packet being executed.
        packet_va: u64,
        /// Guest-physical address of the poisoned 4 KiB page
        /// ([`ECC_PA_UNKNOWN`] if the VA did not translate).
        pa: u64,
    },
    /// [`EventKind::Sanitizer`].
    Sanitizer {
        /// Context (`CTX_NONE` if none).
        ctx_id: u32,
        /// Engine (`engine::ALL` if none).
        engine: u32,
        /// [`super::sanitize::Check`] number.
        check: u32,
        /// The report's `SAN_FLAG_*` bits and sub-kind.
        flags: u32,
        /// VA of the packet (0 if none).
        packet_va: u64,
        /// The report's number.
        seq: u64,
        /// The VA accessed (0 if none).
        va: u64,
    },
    /// [`EventKind::FirmwareCrash`].
    FirmwareCrash {
        /// The crash code.
        code: u32,
        /// Context of the job in flight (`CTX_NONE` if none).
        ctx_id: u32,
        /// Its engine (`engine::ALL` if none).
        engine: u32,
        /// VA of its packet (0 if none).
        packet_va: u64,
    },
}

/// The payload of an [`EventKind::EngineError`] record: which ring an
/// engine stopped, why, and where the packet is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EngineErrorRecord {
    /// Context.
    pub ctx_id: u32,
    /// Engine.
    pub engine: u32,
    /// [`super::packet::EngineError`] number.
    pub code: u32,
    /// VA of the offending packet.
    pub packet_va: u64,
    /// Ring read pointer of the ring-level packet.
    pub rptr: u32,
    /// Indirect depth (0 = the ring itself; 8 bits in the record).
    pub depth: u32,
    /// At depth 1, the packet's byte offset in the command buffer the
    /// ring's `INDIRECT` called; deeper, the offset there of the
    /// `INDIRECT` that leads to it (0 at depth 0; 24 bits in the record).
    pub cmd_offset: u32,
    /// The packet's header word (0 if none was read).
    pub header: u32,
}

impl EngineErrorRecord {
    /// The record's `data` words.
    pub fn to_data(&self) -> [u64; 5] {
        [
            pair(self.ctx_id, self.engine),
            u64::from(self.code),
            self.packet_va,
            u64::from(self.rptr)
                | u64::from(self.depth & 0xff) << 32
                | u64::from(self.cmd_offset & 0xff_ffff) << 40,
            u64::from(self.header),
        ]
    }

    /// Decodes a record's `data` words.
    pub const fn from_data(d: &[u64; 5]) -> EngineErrorRecord {
        EngineErrorRecord {
            ctx_id: d[0] as u32,
            engine: (d[0] >> 32) as u32,
            code: d[1] as u32,
            packet_va: d[2],
            rptr: d[3] as u32,
            depth: ((d[3] >> 32) & 0xff) as u32,
            cmd_offset: (d[3] >> 40) as u32,
            header: d[4] as u32,
        }
    }
}

/// Why an event record could not be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventDecodeError {
    /// Fewer than [`EVENT_RECORD_SIZE`] bytes.
    Short(usize),
    /// Unknown kind number.
    UnknownKind(u32),
}

fn pair(lo: u32, hi: u32) -> u64 {
    u64::from(lo) | u64::from(hi) << 32
}

impl Event {
    /// The kind of this event.
    pub const fn kind(&self) -> EventKind {
        match self {
            Event::Ping { .. } => EventKind::Ping,
            Event::EventsLost { .. } => EventKind::EventsLost,
            Event::Fence { .. } => EventKind::Fence,
            Event::Fault { .. } => EventKind::Fault,
            Event::EngineError { .. } => EventKind::EngineError,
            Event::ResetDone { .. } => EventKind::ResetDone,
            Event::EccError { .. } => EventKind::EccError,
            Event::Sanitizer { .. } => EventKind::Sanitizer,
            Event::FirmwareCrash { .. } => EventKind::FirmwareCrash,
        }
    }

    /// The record for this event with the given sequence number and time.
    pub fn to_record(&self, seq: u64, timestamp_ns: u64) -> EventRecord {
        let mut data = [0u64; 5];
        match *self {
            Event::Ping { cookie } => data[0] = cookie,
            Event::EventsLost { count, first_seq } => {
                data[0] = count;
                data[1] = first_seq;
            }
            Event::Fence {
                ctx_id,
                engine,
                seqno,
                va,
            } => data[..3].copy_from_slice(&[pair(ctx_id, engine), seqno, va]),
            Event::Fault {
                va,
                info,
                packet_va,
                fault_id,
                lane_pc,
            } => data = [va, info.pack(), packet_va, fault_id, lane_pc],
            Event::EngineError(e) => data = e.to_data(),
            Event::ResetDone {
                engine,
                ctx_id,
                rptr,
            } => data[..2].copy_from_slice(&[pair(engine, ctx_id), u64::from(rptr)]),
            Event::EccError {
                ctx_id,
                engine,
                va,
                packet_va,
                pa,
            } => data[..4].copy_from_slice(&[pair(ctx_id, engine), va, packet_va, pa]),
            Event::Sanitizer {
                ctx_id,
                engine,
                check,
                flags,
                packet_va,
                seq,
                va,
            } => data = [pair(ctx_id, engine), pair(check, flags), packet_va, seq, va],
            Event::FirmwareCrash {
                code,
                ctx_id,
                engine,
                packet_va,
            } => data[..3].copy_from_slice(&[u64::from(code), pair(ctx_id, engine), packet_va]),
        }
        EventRecord {
            kind: self.kind() as u32,
            flags: 0,
            seq,
            timestamp_ns,
            data,
        }
    }

    /// Decodes a record's payload.
    pub fn from_record(rec: &EventRecord) -> Result<Event, EventDecodeError> {
        match EventKind::from_u32(rec.kind) {
            Some(EventKind::Ping) => Ok(Event::Ping {
                cookie: rec.data[0],
            }),
            Some(EventKind::EventsLost) => Ok(Event::EventsLost {
                count: rec.data[0],
                first_seq: rec.data[1],
            }),
            Some(EventKind::Fence) => Ok(Event::Fence {
                ctx_id: rec.data[0] as u32,
                engine: (rec.data[0] >> 32) as u32,
                seqno: rec.data[1],
                va: rec.data[2],
            }),
            Some(EventKind::Fault) => Ok(Event::Fault {
                va: rec.data[0],
                info: FaultInfo::unpack(rec.data[1]),
                packet_va: rec.data[2],
                fault_id: rec.data[3],
                lane_pc: rec.data[4],
            }),
            Some(EventKind::EngineError) => {
                Ok(Event::EngineError(EngineErrorRecord::from_data(&rec.data)))
            }
            Some(EventKind::ResetDone) => Ok(Event::ResetDone {
                engine: rec.data[0] as u32,
                ctx_id: (rec.data[0] >> 32) as u32,
                rptr: rec.data[1] as u32,
            }),
            Some(EventKind::EccError) => Ok(Event::EccError {
                ctx_id: rec.data[0] as u32,
                engine: (rec.data[0] >> 32) as u32,
                va: rec.data[1],
                packet_va: rec.data[2],
                pa: rec.data[3],
            }),
            Some(EventKind::Sanitizer) => Ok(Event::Sanitizer {
                ctx_id: rec.data[0] as u32,
                engine: (rec.data[0] >> 32) as u32,
                check: rec.data[1] as u32,
                flags: (rec.data[1] >> 32) as u32,
                packet_va: rec.data[2],
                seq: rec.data[3],
                va: rec.data[4],
            }),
            Some(EventKind::FirmwareCrash) => Ok(Event::FirmwareCrash {
                code: rec.data[0] as u32,
                ctx_id: rec.data[1] as u32,
                engine: (rec.data[1] >> 32) as u32,
                packet_va: rec.data[2],
            }),
            None => Err(EventDecodeError::UnknownKind(rec.kind)),
        }
    }
}

impl EventRecord {
    /// Reads a record from the bytes the device wrote (`len` = used length).
    pub fn parse(bytes: &[u8]) -> Result<EventRecord, EventDecodeError> {
        if bytes.len() < EVENT_RECORD_SIZE {
            return Err(EventDecodeError::Short(bytes.len()));
        }
        EventRecord::read_from(bytes).ok_or(EventDecodeError::Short(bytes.len()))
    }
}
