// SPDX-License-Identifier: GPL-2.0

//! The event queue.
//!
//! Every buffer of the event queue is kept posted: buffer `i` is
//! [`EVENT_RECORD_SIZE`] bytes of DMA memory behind descriptor `i`. The
//! interrupt thread ([`Events::process`]) takes each used buffer, copies
//! the record out, reposts the buffer at once, and only then decodes the copy
//! with [`EventRecord::parse`] and [`Event::from_record`].
//!
//! Records carry a device-wide sequence number. The [`Tracker`] checks that
//! it increases by one per record: a jump is a *gap* (events the driver never
//! saw); the device reports events it had to drop with an
//! [`Event::EventsLost`] record.
//!
//! `PING` waiters: `PING`'s reply names the sequence number of the event the
//! device queued for it. A waiter registers that number ([`Events::watch_ping`])
//! and sleeps until the interrupt thread sees the record. A record that
//! arrives before its waiter registered (the event can overtake the reply) is
//! kept in a short history the waiter consults when it registers.

use super::{
    link::Link,
    virtqueue::{
        DescSpec,
        DmaBytes,
        SplitQueue,
        DESC_F_WRITE, //
    },
};
use crate::{
    event::{
        Event,
        EventKind,
        EventRecord,
        EVENT_RECORD_SIZE, //
    },
    ktrace::Trace,
    proto::QUEUE_EVENT,
    time::{
        elapsed_ns,
        ns_to_jiffies, //
    },
};
use kernel::{
    device::{
        Bound,
        Device, //
    },
    new_condvar, new_mutex, pci,
    prelude::*,
    sync::{
        atomic::{
            Atomic,
            Relaxed, //
        },
        CondVar,
        CondVarTimeoutResult,
        Mutex, //
    },
    time::{
        Instant,
        Monotonic, //
    },
};

/// Largest event queue this driver sets up (buffers).
pub(crate) const EVENT_QUEUE_MAX: u16 = 64;
/// `PING` ioctls that can wait at the same time.
const PING_WAITERS: usize = 16;
/// `PING` records remembered for waiters that have not registered yet.
const PING_HISTORY: usize = 16;
/// `EVENTS_LOST` ranges remembered for waiters that have not registered yet.
const LOST_HISTORY: usize = 4;
/// Warnings about lost, skipped or malformed events logged per
/// [`WARN_WINDOW_NS`]; the rest are counted (debugfs `status`) and their
/// number logged when the next window opens.
const WARN_BUDGET: u32 = 16;
/// The warning rate-limit window: 5 s.
const WARN_WINDOW_NS: u64 = 5_000_000_000;

/// The event virtqueue and its buffers.
pub(crate) struct EventQueue {
    ring: SplitQueue,
    bufs: DmaBytes,
    /// `posted[i]`: buffer `i` is owned by the device.
    posted: KVec<bool>,
    notify_off: u16,
}

impl EventQueue {
    /// Allocates an event queue of `size` buffers and makes all of them
    /// available (the device sees them once the queue is enabled).
    pub(crate) fn new(dev: &Device<Bound>, size: u16) -> Result<Self> {
        let n = usize::from(size);
        let mut q = EventQueue {
            ring: SplitQueue::new(dev, size)?,
            bufs: DmaBytes::new(dev, n * EVENT_RECORD_SIZE)?,
            posted: KVec::with_capacity(n, GFP_KERNEL)?,
            notify_off: 0,
        };
        for i in 0..size {
            q.ring.set_desc(
                i,
                DescSpec {
                    addr: q.bufs.dma_addr(usize::from(i) * EVENT_RECORD_SIZE)?,
                    len: EVENT_RECORD_SIZE as u32,
                    flags: DESC_F_WRITE,
                    next: 0,
                },
            )?;
            q.ring.push(i)?;
            q.posted.push(true, GFP_KERNEL)?;
        }
        q.ring.publish()?;
        Ok(q)
    }

    /// The ring, for programming its addresses into the device.
    pub(crate) fn ring(&self) -> &SplitQueue {
        &self.ring
    }

    /// Records the queue's `queue_notify_off`.
    pub(crate) fn set_notify_off(&mut self, off: u16) {
        self.notify_off = off;
    }

    /// Buffers currently owned by the device.
    pub(crate) fn posted(&self) -> usize {
        self.posted.iter().filter(|p| **p).count()
    }
}

/// Counters of the event path, kept under the event lock.
#[derive(Clone, Copy, Default)]
pub(crate) struct EventStats {
    /// Well-formed records consumed (any kind).
    pub(crate) received: u64,
    /// Sequence number of the first record seen (0: none yet).
    pub(crate) first_seq: u64,
    /// Sequence number of the newest record seen (0: none yet).
    pub(crate) last_seq: u64,
    /// Times the sequence number jumped forward by more than one.
    pub(crate) seq_gaps: u64,
    /// Sequence numbers skipped by those jumps.
    pub(crate) seq_missing: u64,
    /// Records whose sequence number did not increase.
    pub(crate) seq_backwards: u64,
    /// `EVENTS_LOST` records.
    pub(crate) lost_records: u64,
    /// Events the device reported as dropped.
    pub(crate) lost_events: u64,
    /// `PING` records.
    pub(crate) pings: u64,
    /// `PING` records no waiter claimed (late, or for a cancelled ioctl).
    pub(crate) pings_unclaimed: u64,
    /// Records of a kind this driver does not know.
    pub(crate) unknown_kind: u64,
    /// `ECC_ERROR` records (uncorrectable memory errors).
    pub(crate) ecc_errors: u64,
    /// Records of a known kind this driver does not act on yet.
    pub(crate) unhandled: u64,
    /// Buffers returned with a used length that cannot hold a record.
    pub(crate) malformed: u64,
}

/// What became of an awaited `PING` record.
#[derive(Clone, Copy)]
enum Outcome {
    Pending,
    Arrived { cookie: u64, at: Instant<Monotonic> },
    Lost,
}

/// A registered `PING` waiter.
#[derive(Clone, Copy)]
struct Waiter {
    seq: u64,
    outcome: Outcome,
}

/// A `PING` record no waiter had registered for when it arrived.
#[derive(Clone, Copy)]
struct SeenPing {
    seq: u64,
    cookie: u64,
    at: Instant<Monotonic>,
}

/// Sequence tracking, counters and `PING` waiters.
pub(crate) struct Tracker {
    stats: EventStats,
    waiters: [Option<Waiter>; PING_WAITERS],
    history: [Option<SeenPing>; PING_HISTORY],
    history_next: usize,
    lost: [Option<(u64, u64)>; LOST_HISTORY],
    lost_next: usize,
    /// Warnings left in the current rate-limit window, and when it began.
    warn_budget: u32,
    warn_window: Instant<Monotonic>,
    /// Warnings suppressed since the last one printed.
    warn_suppressed: u64,
    /// A `DEVICE_RESET` was sent: the device numbers events from 1 again,
    /// so a record numbered 1 starts a new sequence.
    restart_pending: bool,
}

impl Tracker {
    fn new() -> Self {
        Tracker {
            stats: EventStats::default(),
            waiters: [None; PING_WAITERS],
            history: [None; PING_HISTORY],
            history_next: 0,
            lost: [None; LOST_HISTORY],
            lost_next: 0,
            warn_budget: WARN_BUDGET,
            warn_window: Instant::now(),
            warn_suppressed: 0,
            restart_pending: false,
        }
    }

    /// Rate limit for event warnings: [`WARN_BUDGET`] per
    /// [`WARN_WINDOW_NS`]; the first warning of a new window says how many
    /// were suppressed.
    fn may_warn(&mut self, pdev: &pci::Device) -> bool {
        if u64::try_from(self.warn_window.elapsed().as_nanos()).unwrap_or(0) >= WARN_WINDOW_NS {
            self.warn_window = Instant::now();
            self.warn_budget = WARN_BUDGET;
            if self.warn_suppressed != 0 {
                dev_warn!(pdev, "{} event warnings suppressed\n", self.warn_suppressed);
                self.warn_suppressed = 0;
            }
        }
        if self.warn_budget == 0 {
            self.warn_suppressed += 1;
            return false;
        }
        self.warn_budget -= 1;
        true
    }

    /// Accounts one record copy. Returns whether a waiter's state changed.
    /// GPU events (fences, faults, engine errors, resets) go to `gpu` for
    /// the caller to hand to the GPU blocks once the event lock is released.
    fn record(
        &mut self,
        pdev: &pci::Device,
        bytes: &[u8],
        now: Instant<Monotonic>,
        gpu: &mut KVec<Event>,
    ) -> bool {
        let rec = match EventRecord::parse(bytes) {
            Ok(r) => r,
            Err(e) => {
                self.stats.malformed += 1;
                if self.may_warn(pdev) {
                    dev_warn!(pdev, "malformed event buffer: {:?}\n", e);
                }
                return false;
            }
        };
        self.stats.received += 1;
        self.track_seq(pdev, rec.seq);

        match Event::from_record(&rec) {
            Ok(Event::Ping { cookie }) => {
                self.stats.pings += 1;
                self.on_ping(rec.seq, cookie, now)
            }
            Ok(Event::EventsLost { count, first_seq }) => {
                self.stats.lost_records += 1;
                self.stats.lost_events = self.stats.lost_events.saturating_add(count);
                if self.may_warn(pdev) {
                    dev_warn!(
                        pdev,
                        "device dropped {} events starting at sequence number {}\n",
                        count,
                        first_seq
                    );
                }
                // Fence records may be among the lost: the GPU blocks
                // re-read the fence values.
                let _ = gpu.push_within_capacity(Event::EventsLost { count, first_seq });
                self.on_lost(first_seq, count)
            }
            // Uncorrectable memory error: counted and logged here; the GPU
            // blocks retire the page.
            Ok(
                ev @ Event::EccError {
                    ctx_id,
                    engine,
                    va,
                    pa,
                    ..
                },
            ) => {
                self.stats.ecc_errors += 1;
                if self.may_warn(pdev) {
                    dev_err!(
                        pdev,
                        "uncorrectable ECC error: context slot {} engine {} page {:#x} (pa {:#x})\n",
                        ctx_id,
                        engine,
                        va,
                        pa
                    );
                }
                if gpu.push_within_capacity(ev).is_err() {
                    self.stats.unhandled += 1;
                }
                false
            }
            // Every other record (fences, faults, engine errors, resets,
            // kinds this driver does not act on) goes to the GPU blocks
            // (the [`EventSink`]). The batch has room for a whole queue.
            Ok(ev) => {
                if gpu.push_within_capacity(ev).is_err() {
                    self.stats.unhandled += 1;
                    if self.may_warn(pdev) {
                        dev_warn!(pdev, "event {}: {:?} not handled\n", rec.seq, ev);
                    }
                }
                false
            }
            Err(e) => {
                self.stats.unknown_kind += 1;
                if self.may_warn(pdev) {
                    dev_warn!(pdev, "event {}: {:?}\n", rec.seq, e);
                }
                false
            }
        }
    }

    fn track_seq(&mut self, pdev: &pci::Device, seq: u64) {
        let last = self.stats.last_seq;
        if self.restart_pending && seq == 1 {
            self.restart_pending = false;
            self.stats.last_seq = seq;
            return;
        }
        if last == 0 {
            // The first record this driver instance sees sets the baseline:
            // earlier records belong to a previous user of the device.
            self.stats.first_seq = seq;
            self.stats.last_seq = seq;
            return;
        }
        if seq <= last {
            self.stats.seq_backwards += 1;
            if self.may_warn(pdev) {
                dev_warn!(pdev, "event sequence went from {} to {}\n", last, seq);
            }
            return;
        }
        if seq != last + 1 {
            let missing = seq - last - 1;
            self.stats.seq_gaps += 1;
            self.stats.seq_missing = self.stats.seq_missing.saturating_add(missing);
            if self.may_warn(pdev) {
                dev_warn!(
                    pdev,
                    "event sequence gap: {} -> {} ({} missing)\n",
                    last,
                    seq,
                    missing
                );
            }
        }
        self.stats.last_seq = seq;
    }

    fn on_ping(&mut self, seq: u64, cookie: u64, at: Instant<Monotonic>) -> bool {
        for w in self.waiters.iter_mut().flatten() {
            if w.seq == seq && matches!(w.outcome, Outcome::Pending) {
                w.outcome = Outcome::Arrived { cookie, at };
                return true;
            }
        }
        // Nobody waits for it (yet): remember it for a waiter that is about
        // to register; an entry pushed out unclaimed is counted.
        if self.history[self.history_next].is_some() {
            self.stats.pings_unclaimed += 1;
        }
        self.history[self.history_next] = Some(SeenPing { seq, cookie, at });
        self.history_next = (self.history_next + 1) % PING_HISTORY;
        false
    }

    fn on_lost(&mut self, first: u64, count: u64) -> bool {
        self.lost[self.lost_next] = Some((first, count));
        self.lost_next = (self.lost_next + 1) % LOST_HISTORY;
        let mut changed = false;
        for w in self.waiters.iter_mut().flatten() {
            if matches!(w.outcome, Outcome::Pending) && in_range(w.seq, first, count) {
                w.outcome = Outcome::Lost;
                changed = true;
            }
        }
        changed
    }

    /// Registers a waiter for record `seq`; resolves it at once from the
    /// history if the record (or its loss) was already seen.
    fn register(&mut self, seq: u64) -> Result<usize> {
        let idx = self.waiters.iter().position(Option::is_none).ok_or(EBUSY)?;
        let mut outcome = Outcome::Pending;
        if let Some(h) = self
            .history
            .iter_mut()
            .find(|h| h.is_some_and(|p| p.seq == seq))
        {
            if let Some(p) = h.take() {
                outcome = Outcome::Arrived {
                    cookie: p.cookie,
                    at: p.at,
                };
            }
        } else if self
            .lost
            .iter()
            .flatten()
            .any(|&(first, count)| in_range(seq, first, count))
        {
            outcome = Outcome::Lost;
        }
        self.waiters[idx] = Some(Waiter { seq, outcome });
        Ok(idx)
    }
}

/// Whether `seq` lies in `first .. first + count`.
fn in_range(seq: u64, first: u64, count: u64) -> bool {
    seq >= first && seq - first < count
}

/// State behind the event lock.
pub(crate) struct EventState {
    queue: Option<EventQueue>,
    tracker: Tracker,
}

/// The event path.
#[pin_data]
pub(crate) struct Events {
    #[pin]
    state: Mutex<EventState>,
    /// Signalled when a waiter's record arrives or is lost.
    #[pin]
    arrived: CondVar,
    /// Records consumed, readable without the lock.
    received: Atomic<u64>,
    /// Interrupt-thread runs that found the event queue non-empty.
    batches: Atomic<u64>,
}

impl Events {
    /// An event path without a queue.
    pub(crate) fn new() -> impl PinInit<Self> {
        pin_init!(Events {
            state <- new_mutex!(EventState {
                queue: None,
                tracker: Tracker::new(),
            }),
            arrived <- new_condvar!(),
            received: Atomic::new(0),
            batches: Atomic::new(0),
        })
    }

    /// Hands the (programmed) queue to the event path.
    pub(crate) fn install(&self, q: EventQueue) {
        self.state.lock().queue = Some(q);
    }

    /// Takes the queue away (teardown).
    pub(crate) fn take_queue(&self) -> Option<EventQueue> {
        self.state.lock().queue.take()
    }

    /// Records consumed so far.
    pub(crate) fn received(&self) -> u64 {
        self.received.load(Relaxed)
    }

    /// Interrupt-thread runs that consumed at least one buffer.
    pub(crate) fn batches(&self) -> u64 {
        self.batches.load(Relaxed)
    }

    /// A snapshot of the counters, and the number of buffers the device
    /// holds (`None` without a queue).
    pub(crate) fn snapshot(&self) -> (EventStats, Option<(u16, usize)>) {
        let st = self.state.lock();
        let q = st.queue.as_ref().map(|q| (q.ring.size(), q.posted()));
        (st.tracker.stats, q)
    }

    /// Wakes every waiter so that it re-checks the device state.
    /// Counts an event record no block acted on.
    pub(crate) fn count_unhandled(&self) {
        self.state.lock().tracker.stats.unhandled += 1;
    }

    /// Announces a `DEVICE_RESET`: event numbering restarts at 1.
    pub(crate) fn expect_restart(&self) {
        self.state.lock().tracker.restart_pending = true;
    }

    pub(crate) fn wake(&self) {
        // Ordered after any waiter's check (see `Control::wake`).
        drop(self.state.lock());
        self.arrived.notify_all();
    }

    /// Starts waiting for the `PING` record with sequence number `seq`.
    /// Fails with `EBUSY` if too many waiters exist.
    pub(crate) fn watch_ping(&self, seq: u64) -> Result<PingWatch<'_>> {
        let slot = self.state.lock().tracker.register(seq)?;
        Ok(PingWatch { events: self, slot })
    }
}

/// A registered `PING` waiter; unregisters when dropped.
pub(crate) struct PingWatch<'a> {
    events: &'a Events,
    slot: usize,
}

impl PingWatch<'_> {
    /// Waits until the record arrives, `timeout_ns` after `start` at the
    /// latest. Returns the record's cookie and arrival time.
    ///
    /// Errors: `ETIMEDOUT`; `EIO` if the device reported the record lost;
    /// `ERESTARTSYS` on a signal; whatever `usable` returns once the device
    /// stops being usable.
    pub(crate) fn wait(
        &self,
        usable: impl Fn() -> Result,
        start: &Instant<Monotonic>,
        timeout_ns: u64,
    ) -> Result<(u64, Instant<Monotonic>)> {
        let mut st = self.events.state.lock();
        loop {
            match st.tracker.waiters[self.slot].map(|w| w.outcome) {
                Some(Outcome::Arrived { cookie, at }) => return Ok((cookie, at)),
                Some(Outcome::Lost) => return Err(EIO),
                Some(Outcome::Pending) => {}
                None => return Err(EINVAL),
            }
            usable()?;
            let elapsed = elapsed_ns(start);
            if elapsed >= timeout_ns {
                return Err(ETIMEDOUT);
            }
            let res = self
                .events
                .arrived
                .wait_interruptible_timeout(&mut st, ns_to_jiffies(timeout_ns - elapsed));
            if let CondVarTimeoutResult::Signal { .. } = res {
                return Err(ERESTARTSYS);
            }
        }
    }
}

impl Drop for PingWatch<'_> {
    fn drop(&mut self) {
        self.events.state.lock().tracker.waiters[self.slot] = None;
    }
}

/// Traces the arrival at `at` of the record copy `bytes` (a malformed one
/// is not traced: the tracker counts it).
fn trace_record(trace: &Trace, at: u64, bytes: &[u8]) {
    if let Ok(r) = EventRecord::parse(bytes) {
        let name = EventKind::from_u32(r.kind).map_or("?", |k| k.name());
        let d = r.data;
        trace.event(at, r.kind, name, r.seq, r.timestamp_ns, [d[0], d[1], d[2]]);
    }
}

/// Where the event path hands the records it does not handle itself
/// (fences, faults, engine errors, resets): the GPU blocks above.
pub(crate) trait EventSink {
    /// One decoded record, in arrival order; called without any transport
    /// lock held, in the event interrupt thread (process context).
    fn event(&self, ev: Event);
    /// The device broke while the events were processed: wake every sleeper.
    fn device_broken(&self);
}

impl Events {
    /// Consumes every used event buffer, reposts it, decodes the record
    /// copies and hands GPU events to `sink`; each record that arrived is
    /// traced in `trace`. Runs in the interrupt thread (process context).
    pub(crate) fn process(&self, link: &Link, sink: &impl EventSink, trace: &Trace) {
        let now = Instant::<Monotonic>::now();
        let traced_at = trace.start();
        // GPU events of this batch, handled after the event lock is dropped.
        // Without the allocation they are counted as unhandled.
        let mut gpu =
            KVec::with_capacity(usize::from(EVENT_QUEUE_MAX), GFP_KERNEL).unwrap_or_default();
        let mut guard = self.state.lock();
        let EventState { queue, tracker } = &mut *guard;
        let Some(q) = queue.as_mut() else {
            return;
        };

        let mut consumed = 0u64;
        let mut wake = false;
        let mut corrupt = None;
        loop {
            let e = match q.ring.pop_used() {
                Ok(Some(e)) => e,
                Ok(None) => break,
                Err(_) => {
                    corrupt = Some("event queue: used index beyond the posted buffers");
                    break;
                }
            };
            let id = match usize::try_from(e.id) {
                Ok(id) if id < q.posted.len() && q.posted[id] => id,
                _ => {
                    corrupt = Some("event queue: device returned a buffer it does not own");
                    break;
                }
            };
            q.posted[id] = false;
            consumed += 1;

            let mut rec = [0u8; EVENT_RECORD_SIZE];
            let len = usize::try_from(e.len).unwrap_or(usize::MAX);
            let copied = if len <= EVENT_RECORD_SIZE {
                q.bufs.read(id * EVENT_RECORD_SIZE, &mut rec[..len]).is_ok()
            } else {
                false
            };

            // LAB(0) BEGIN event-repost
            // Give the buffer back before decoding the copy. `id < size`.
            if q.ring.push(id as u16).is_ok() {
                q.posted[id] = true;
            }
            // LAB(0) END event-repost

            if copied && traced_at != 0 {
                trace_record(trace, traced_at, &rec[..len]);
            }
            if copied {
                let before = tracker.stats.received;
                wake |= tracker.record(&link.pdev, &rec[..len], now, &mut gpu);
                if tracker.stats.received != before {
                    self.received.add(1, Relaxed);
                }
            } else {
                tracker.stats.malformed += 1;
            }
        }

        if consumed != 0 {
            self.batches.add(1, Relaxed);
            if q.ring.publish().is_ok() {
                // A failed notify only delays the device's use of the
                // reposted buffers until the next one.
                let _ = link.transport.notify(QUEUE_EVENT, q.notify_off);
            }
        }
        drop(guard);

        for ev in gpu {
            sink.event(ev);
        }

        if let Some(why) = corrupt {
            link.mark_broken(why);
            self.wake();
            sink.device_broken();
        } else if wake {
            self.arrived.notify_all();
        }
    }

    /// Notifies the event queue so the device sees the posted buffers.
    ///
    /// # Errors
    ///
    /// `ENODEV` without a queue (or once unbound), `EIO` when the notify
    /// register is not where the capabilities said.
    pub(crate) fn kick(&self, link: &Link) -> Result {
        let st = self.state.lock();
        let q = st.queue.as_ref().ok_or(ENODEV)?;
        link.transport.notify(QUEUE_EVENT, q.notify_off)
    }
}
