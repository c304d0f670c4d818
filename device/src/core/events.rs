//! The event unit: raises events, numbers them, and holds them until the
//! driver has a buffer posted on the event queue.
//!
//! # State
//!
//! * a FIFO of at most [`EVENT_FIFO_DEPTH`] records waiting for a buffer;
//! * the next sequence number (device-wide, starting at 1, +1 per event,
//!   dropped events and `EVENTS_LOST` records included);
//! * an optional *lost run*: events dropped since the FIFO filled up.
//!
//! # Transitions
//!
//! * [`EventUnit::post`]: the event gets the next sequence number. If a lost
//!   run is pending and the FIFO has room, the run is first closed by
//!   queueing an [`Event::EventsLost`] record. Then, if the FIFO has room,
//!   the event is queued; otherwise it is dropped (the newest event is the
//!   one lost) and added to the lost run.
//! * [`EventUnit::commit_front`]: the driver's buffer received the oldest
//!   record. The slot it frees is used at once to close a pending lost run,
//!   so the `EVENTS_LOST` record is the first thing the driver receives after
//!   the events that were queued before the loss, and comes before any event
//!   raised after it.
//!
//! Records therefore reach the driver in strictly increasing sequence order,
//! and every gap in the sequence is exactly the range
//! `first_seq..first_seq + count` reported by the `EVENTS_LOST` record that
//! follows the gap.

use std::collections::VecDeque;

use vgpu_hwif::event::{Event, EventRecord, EVENT_FIFO_DEPTH};

/// A run of consecutive dropped events, not yet reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct LostRun {
    first_seq: u64,
    count: u64,
}

/// Event statistics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EventCounters {
    /// Events raised, dropped ones and `EVENTS_LOST` records included.
    pub posted: u64,
    /// Records handed to the driver.
    pub delivered: u64,
    /// Events dropped on FIFO overflow.
    pub dropped: u64,
}

/// The event unit (see the module documentation).
#[derive(Debug)]
pub struct EventUnit {
    fifo: VecDeque<EventRecord>,
    next_seq: u64,
    lost: Option<LostRun>,
    counters: EventCounters,
}

/// The first sequence number after start or reset.
pub const FIRST_SEQ: u64 = 1;

impl EventUnit {
    /// An empty unit whose first event will be number [`FIRST_SEQ`].
    pub fn new() -> Self {
        EventUnit {
            fifo: VecDeque::with_capacity(EVENT_FIFO_DEPTH),
            next_seq: FIRST_SEQ,
            lost: None,
            counters: EventCounters::default(),
        }
    }

    /// Back to the power-on state: FIFO empty, numbering restarts at
    /// [`FIRST_SEQ`]. Counters are kept.
    pub fn reset(&mut self) {
        self.fifo.clear();
        self.next_seq = FIRST_SEQ;
        self.lost = None;
    }

    /// Raises `event` at device time `now_ns`; returns its sequence number
    /// (also when the event had to be dropped).
    pub fn post(&mut self, event: Event, now_ns: u64) -> u64 {
        self.close_lost_run(now_ns);
        let seq = self.take_seq();
        self.counters.posted = self.counters.posted.saturating_add(1);
        if self.fifo.len() < EVENT_FIFO_DEPTH {
            self.fifo.push_back(event.to_record(seq, now_ns));
        } else {
            self.counters.dropped = self.counters.dropped.saturating_add(1);
            match &mut self.lost {
                Some(run) => run.count = run.count.saturating_add(1),
                None => {
                    self.lost = Some(LostRun {
                        first_seq: seq,
                        count: 1,
                    })
                }
            }
            log::debug!("event FIFO full: dropped event seq {seq}");
        }
        seq
    }

    /// The oldest record waiting for a driver buffer.
    pub fn front(&self) -> Option<&EventRecord> {
        self.fifo.front()
    }

    /// Records waiting for a driver buffer.
    pub fn pending(&self) -> usize {
        self.fifo.len()
    }

    /// Whether events were dropped and not reported yet.
    pub fn loss_pending(&self) -> bool {
        self.lost.is_some()
    }

    /// The oldest record has been written into a driver buffer: removes it
    /// and returns it. `now_ns` timestamps an `EVENTS_LOST` record if the
    /// freed slot is used for one.
    pub fn commit_front(&mut self, now_ns: u64) -> Option<EventRecord> {
        let rec = self.fifo.pop_front()?;
        self.counters.delivered = self.counters.delivered.saturating_add(1);
        self.close_lost_run(now_ns);
        Some(rec)
    }

    /// Event statistics.
    pub fn counters(&self) -> EventCounters {
        self.counters
    }

    fn take_seq(&mut self) -> u64 {
        let seq = self.next_seq;
        self.next_seq = self.next_seq.wrapping_add(1);
        seq
    }

    /// Queues the `EVENTS_LOST` record of a pending run if there is room.
    fn close_lost_run(&mut self, now_ns: u64) {
        let Some(run) = self.lost else { return };
        if self.fifo.len() >= EVENT_FIFO_DEPTH {
            return;
        }
        self.lost = None;
        let seq = self.take_seq();
        self.counters.posted = self.counters.posted.saturating_add(1);
        let ev = Event::EventsLost {
            count: run.count,
            first_seq: run.first_seq,
        };
        self.fifo.push_back(ev.to_record(seq, now_ns));
        log::debug!(
            "event FIFO: reporting {} lost events from seq {} as seq {seq}",
            run.count,
            run.first_seq
        );
    }
}

impl Default for EventUnit {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vgpu_hwif::event::EventKind;

    fn drain(u: &mut EventUnit, now: u64) -> Vec<EventRecord> {
        let mut out = Vec::new();
        while let Some(r) = u.commit_front(now) {
            out.push(r);
        }
        out
    }

    #[test]
    fn sequence_numbers_start_at_one_and_increase() {
        let mut u = EventUnit::new();
        assert_eq!(u.post(Event::Ping { cookie: 7 }, 100), 1);
        assert_eq!(u.post(Event::Ping { cookie: 8 }, 200), 2);
        assert_eq!(u.post(Event::Ping { cookie: 9 }, 300), 3);
        assert_eq!(u.pending(), 3);
        let recs = drain(&mut u, 400);
        let seqs: Vec<u64> = recs.iter().map(|r| r.seq).collect();
        assert_eq!(seqs, vec![1, 2, 3]);
        let cookies: Vec<Event> = recs
            .iter()
            .map(|r| Event::from_record(r).unwrap())
            .collect();
        assert_eq!(
            cookies,
            vec![
                Event::Ping { cookie: 7 },
                Event::Ping { cookie: 8 },
                Event::Ping { cookie: 9 }
            ]
        );
        let stamps: Vec<u64> = recs.iter().map(|r| r.timestamp_ns).collect();
        assert_eq!(stamps, vec![100, 200, 300]);
        assert!(recs.iter().all(|r| r.flags == 0));
        assert_eq!(
            u.counters(),
            EventCounters {
                posted: 3,
                delivered: 3,
                dropped: 0
            }
        );
    }

    #[test]
    fn numbering_continues_across_deliveries() {
        let mut u = EventUnit::new();
        u.post(Event::Ping { cookie: 0 }, 0);
        assert_eq!(u.commit_front(1).map(|r| r.seq), Some(1));
        assert!(u.front().is_none());
        assert_eq!(u.post(Event::Ping { cookie: 0 }, 2), 2);
        assert_eq!(u.front().map(|r| r.seq), Some(2));
    }

    #[test]
    fn overflow_drops_newest_and_reports_loss_in_order() {
        let mut u = EventUnit::new();
        let extra = 10u64;
        let total = EVENT_FIFO_DEPTH as u64 + extra;
        for i in 0..total {
            assert_eq!(u.post(Event::Ping { cookie: i }, i), i + 1);
        }
        assert_eq!(u.pending(), EVENT_FIFO_DEPTH);
        assert!(u.loss_pending());
        assert_eq!(u.counters().dropped, extra);

        // First buffer: the oldest event; its slot is used for the report.
        let first = u.commit_front(5000).unwrap();
        assert_eq!(first.seq, 1);
        assert!(!u.loss_pending());
        assert_eq!(u.pending(), EVENT_FIFO_DEPTH);

        // A new event after the loss comes behind the report.
        u.commit_front(5001).unwrap();
        let after = u.post(Event::Ping { cookie: 999 }, 6000);

        let rest = drain(&mut u, 7000);
        // Queued before the loss: seq 2..=256 (the first two went out above,
        // seq 2 in the second commit).
        let kept: Vec<u64> = rest
            .iter()
            .take_while(|r| r.kind == EventKind::Ping as u32 && r.seq <= EVENT_FIFO_DEPTH as u64)
            .map(|r| r.seq)
            .collect();
        assert_eq!(kept, (3..=EVENT_FIFO_DEPTH as u64).collect::<Vec<_>>());
        let lost = &rest[kept.len()];
        assert_eq!(lost.kind, EventKind::EventsLost as u32);
        assert_eq!(lost.seq, total + 1);
        assert_eq!(lost.timestamp_ns, 5000);
        assert_eq!(
            Event::from_record(lost).unwrap(),
            Event::EventsLost {
                count: extra,
                first_seq: EVENT_FIFO_DEPTH as u64 + 1
            }
        );
        let next = &rest[kept.len() + 1];
        assert_eq!(next.seq, after);
        assert_eq!(after, total + 2);
        assert_eq!(
            Event::from_record(next).unwrap(),
            Event::Ping { cookie: 999 }
        );
        assert_eq!(rest.len(), kept.len() + 2);

        // Every delivered record has a larger seq than the one before it.
        let c = u.counters();
        assert_eq!(c.posted, total + 2);
        assert_eq!(c.dropped, extra);
        assert_eq!(c.delivered, total + 2 - extra);
    }

    #[test]
    fn loss_report_waits_for_room_and_counts_every_drop() {
        let mut u = EventUnit::new();
        for i in 0..EVENT_FIFO_DEPTH as u64 {
            u.post(Event::Ping { cookie: i }, 0);
        }
        // Three drops while nothing is delivered: one run.
        let s1 = u.post(Event::Ping { cookie: 1 }, 0);
        u.post(Event::Ping { cookie: 2 }, 0);
        u.post(Event::Ping { cookie: 3 }, 0);
        assert_eq!(u.pending(), EVENT_FIFO_DEPTH);
        let all = drain(&mut u, 1);
        assert_eq!(all.len(), EVENT_FIFO_DEPTH + 1);
        let last = all.last().unwrap();
        assert_eq!(
            Event::from_record(last).unwrap(),
            Event::EventsLost {
                count: 3,
                first_seq: s1
            }
        );
        assert_eq!(last.seq, s1 + 3);
        assert!(all.windows(2).all(|w| w[0].seq < w[1].seq));
    }

    #[test]
    fn reset_restarts_numbering_and_empties_fifo() {
        let mut u = EventUnit::new();
        for i in 0..(EVENT_FIFO_DEPTH as u64 + 2) {
            u.post(Event::Ping { cookie: i }, 0);
        }
        u.reset();
        assert_eq!(u.pending(), 0);
        assert!(!u.loss_pending());
        assert_eq!(u.post(Event::Ping { cookie: 1 }, 0), FIRST_SEQ);
        assert_eq!(u.counters().dropped, 2);
    }
}
