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

/// Event kinds. Numbers `3..=0x1f` are reserved for the GPU blocks (fences,
/// faults, engine errors, resets).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// Answer to a `PING` command. `data[0]` = cookie.
    Ping = 1,
    /// The device's event FIFO overflowed. `data[0]` = number of events
    /// dropped, `data[1]` = sequence number of the first dropped event.
    EventsLost = 2,
}

impl EventKind {
    /// The kind with this number, if any.
    pub const fn from_u32(v: u32) -> Option<EventKind> {
        match v {
            1 => Some(EventKind::Ping),
            2 => Some(EventKind::EventsLost),
            _ => None,
        }
    }

    /// A short upper-case name.
    pub const fn name(self) -> &'static str {
        match self {
            EventKind::Ping => "PING",
            EventKind::EventsLost => "EVENTS_LOST",
        }
    }
}

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
}

/// Why an event record could not be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventDecodeError {
    /// Fewer than [`EVENT_RECORD_SIZE`] bytes.
    Short(usize),
    /// Unknown kind number.
    UnknownKind(u32),
}

impl Event {
    /// The kind of this event.
    pub const fn kind(&self) -> EventKind {
        match self {
            Event::Ping { .. } => EventKind::Ping,
            Event::EventsLost { .. } => EventKind::EventsLost,
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
