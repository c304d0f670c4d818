// SPDX-License-Identifier: GPL-2.0

//! The driver's trace buffer: what the KMD did and when, on the guest's
//! monotonic clock (`ktime_get`, the clock of `CLOCK_MONOTONIC`), so that
//! `vgpu-timeline` can put it on one timeline with the UMD's spans and the
//! device's packet trace (docs/debugging.md, "One timeline").
//!
//! * Off by default. On at load with `trace_records=N`, or at run time with
//!   debugfs `trace_ctl` (`on [N]`, `off`, `clear`, `sync`); read as text
//!   from debugfs `trace` (a snapshot; reading does not consume).
//! * What is recorded: ioctl entry and exit with the return code (`drm.rs`),
//!   `SUBMIT` (context, slot, engine, seqno) and the job written into its
//!   ring (where, so its `FENCE` can be found in the device's trace),
//!   doorbells, control commands (a span with the result), every event
//!   record received (its sequence number and device timestamp), fence
//!   signals, hangs, device resets, page faults and engine errors, and
//!   clock-sync samples: `TIME_QUERY` round trips, the one with the
//!   shortest round trip of a few kept (`Hw::sync_clock`), taken when
//!   tracing starts, on `sync`, and every second while tracing.
//! * A ring of N fixed-size records (64..=262144, default 16384): when full
//!   the oldest is overwritten and counted. Sync samples are kept apart (the
//!   first [`SYNC_FIRST`] and the last [`SYNC_LAST`]) so a long trace keeps
//!   both ends of its clock fit.
//!
//! Cost: while off, a trace point is one relaxed load. While on, one
//! `ktime_get` and a short spinlock hold (the record copied into the ring).
//! Records are appended only in process context (ioctls, interrupt
//! threads, work items): the spinlock is the innermost lock of the driver,
//! nothing is taken under it, and it is never taken in hard interrupt
//! context or under a fence lock.
//!
//! A leaf: it uses only the kernel and [`crate::ffi`]'s clock.

use crate::ffi::{
    current_ids,
    monotonic_ns, //
};
use core::fmt;
use kernel::{
    new_spinlock,
    prelude::*,
    sync::{
        atomic::{
            Atomic,
            Relaxed, //
        },
        SpinLock,
    },
};

/// Records when `on` is written without a size.
pub(crate) const DEFAULT_RECORDS: usize = 16384;
/// Fewest records of a trace buffer.
pub(crate) const MIN_RECORDS: usize = 64;
/// Most records of a trace buffer (about 20 MiB).
pub(crate) const MAX_RECORDS: usize = 262_144;
/// Sync samples kept from the start of the trace.
pub(crate) const SYNC_FIRST: usize = 16;
/// Sync samples kept from the end of the trace.
pub(crate) const SYNC_LAST: usize = 48;
/// While tracing, a clock sync at most this often from the watchdog: 1 s.
pub(crate) const SYNC_PERIOD_NS: u64 = 1_000_000_000;

/// What a record marks.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum What {
    /// An ioctl entered (`name`).
    IoctlEnter,
    /// An ioctl returned (`name`; `a[0]` the return value or -errno).
    IoctlExit,
    /// `SUBMIT` accepted a job: `a` = context handle, slot, engine, seqno;
    /// `flag` whether it waits in the KMD's queue.
    Submit,
    /// A job was written into its ring: `a` = slot, engine, seqno, the
    /// ring's GPU VA; `b` = where it starts (the write pointer: bytes ever
    /// written, its offset in the ring modulo the size), its bytes, the
    /// ring's size.
    RingWrite,
    /// A doorbell was posted: `a` = slot, engine, write pointer, 0 or
    /// -errno.
    Doorbell,
    /// A control command (`name`) from `ts` to `end`; `a[0]` 0 or -errno.
    Command,
    /// An event record arrived: `a` = kind, sequence number, device
    /// timestamp; `b` = its first three data words; `name` the kind.
    Event,
    /// A `FENCE` event was handled: `a` = slot, engine, seqno, the fence
    /// value in memory; `name` the verdict (`new`, `early`, `duplicate`,
    /// `skipped`).
    FenceSignal,
    /// The hang check declared a ring hung: `a` = slot, engine, context
    /// handle.
    Hang,
    /// A device reset ended: `a` = the guilty slot; `flag` whether it
    /// succeeded.
    DeviceReset,
    /// A page fault: `a` = slot, engine, VA; `flag` served (demand paging)
    /// or not.
    Fault,
    /// An engine error: `a` = slot, engine, error code, packet VA; `name`
    /// the error.
    EngineError,
}

impl What {
    const fn name(self) -> &'static str {
        match self {
            What::IoctlEnter => "ioctl_enter",
            What::IoctlExit => "ioctl_exit",
            What::Submit => "submit",
            What::RingWrite => "ring_write",
            What::Doorbell => "doorbell",
            What::Command => "command",
            What::Event => "event",
            What::FenceSignal => "fence_signal",
            What::Hang => "hang",
            What::DeviceReset => "device_reset",
            What::Fault => "fault",
            What::EngineError => "engine_error",
        }
    }
}

/// One record (about 100 bytes).
#[derive(Clone, Copy)]
pub(crate) struct Rec {
    /// Guest monotonic time (ns).
    ts: u64,
    /// End of a span (ns), else 0.
    end: u64,
    what: What,
    /// Thread group and thread of the caller.
    pid: u32,
    tid: u32,
    name: &'static str,
    flag: bool,
    a: [u64; 4],
    b: [u64; 3],
}

/// Where a job was written: its ring's GPU VA and size, the write pointer
/// it starts at (bytes ever written) and its bytes.
#[derive(Clone, Copy)]
pub(crate) struct JobAt {
    pub(crate) ring_va: u64,
    pub(crate) size: u32,
    pub(crate) wptr: u32,
    pub(crate) bytes: usize,
}

/// One clock-sync sample: the device clock read between two guest times.
#[derive(Clone, Copy)]
struct Sync {
    t0: u64,
    t1: u64,
    device_ns: u64,
}

struct Ring {
    recs: KVVec<Rec>,
    /// Capacity (recs never grows past it).
    cap: usize,
    /// Records ever appended since the last clear.
    total: u64,
    syncs: KVec<Sync>,
    /// Sync samples ever taken since the last clear.
    sync_total: u64,
}

impl Ring {
    fn empty() -> Ring {
        Ring {
            recs: KVVec::new(),
            cap: 0,
            total: 0,
            syncs: KVec::new(),
            sync_total: 0,
        }
    }

    fn push(&mut self, r: Rec) {
        if self.cap == 0 {
            return;
        }
        if self.recs.len() < self.cap {
            // Capacity was reserved when tracing started: never allocates.
            let _ = self.recs.push_within_capacity(r);
        } else if let Some(slot) = self.recs.get_mut((self.total % self.cap as u64) as usize) {
            *slot = r;
        }
        self.total += 1;
    }

    fn push_sync(&mut self, s: Sync) {
        if self.syncs.len() < SYNC_FIRST + SYNC_LAST {
            let _ = self.syncs.push_within_capacity(s);
        } else {
            let i =
                SYNC_FIRST + ((self.sync_total - SYNC_FIRST as u64) % SYNC_LAST as u64) as usize;
            if let Some(slot) = self.syncs.get_mut(i) {
                *slot = s;
            }
        }
        self.sync_total += 1;
    }
}

/// The trace buffer of one device.
#[pin_data]
pub(crate) struct Trace {
    on: Atomic<bool>,
    /// When the last clock sync was taken (guest ns).
    last_sync: Atomic<u64>,
    #[pin]
    ring: SpinLock<Ring>,
}

impl Trace {
    /// A trace buffer, off and empty.
    pub(crate) fn new() -> impl PinInit<Self> {
        pin_init!(Trace {
            on: Atomic::new(false),
            last_sync: Atomic::new(0),
            ring <- new_spinlock!(Ring::empty()),
        })
    }

    /// Whether records are taken.
    #[inline]
    pub(crate) fn on(&self) -> bool {
        self.on.load(Relaxed)
    }

    /// The time for a span's start: the clock if tracing, else 0 (not read).
    #[inline]
    pub(crate) fn start(&self) -> u64 {
        if self.on() {
            monotonic_ns()
        } else {
            0
        }
    }

    /// Starts tracing into a buffer of `records` records (clamped to
    /// [`MIN_RECORDS`]..=[`MAX_RECORDS`]); a buffer of that size already
    /// there is kept with its records, another size starts empty.
    ///
    /// # Errors
    ///
    /// `ENOMEM`: no buffer (tracing stays as it was).
    pub(crate) fn enable(&self, records: usize) -> Result {
        let cap = records.clamp(MIN_RECORDS, MAX_RECORDS);
        if self.ring.lock().cap != cap {
            let recs = KVVec::with_capacity(cap, GFP_KERNEL)?;
            let syncs = KVec::with_capacity(SYNC_FIRST + SYNC_LAST, GFP_KERNEL)?;
            let old = core::mem::replace(
                &mut *self.ring.lock(),
                Ring {
                    recs,
                    cap,
                    total: 0,
                    syncs,
                    sync_total: 0,
                },
            );
            // Freed outside the spinlock.
            drop(old);
        }
        self.on.store(true, Relaxed);
        Ok(())
    }

    /// Stops tracing; the records stay readable.
    pub(crate) fn disable(&self) {
        self.on.store(false, Relaxed);
    }

    /// Forgets every record and sync sample (the buffer stays).
    pub(crate) fn clear(&self) {
        let mut r = self.ring.lock();
        r.recs.clear();
        r.total = 0;
        r.syncs.clear();
        r.sync_total = 0;
    }

    /// Whether a clock sync is due (tracing, and none for
    /// [`SYNC_PERIOD_NS`]).
    pub(crate) fn sync_due(&self) -> bool {
        self.on() && monotonic_ns().saturating_sub(self.last_sync.load(Relaxed)) >= SYNC_PERIOD_NS
    }

    /// Keeps a clock-sync sample: the device clock read `device_ns`
    /// between guest times `t0` and `t1`.
    pub(crate) fn sync(&self, t0: u64, t1: u64, device_ns: u64) {
        self.last_sync.store(t1, Relaxed);
        if self.on() {
            self.ring.lock().push_sync(Sync { t0, t1, device_ns });
        }
    }

    fn push(&self, what: What, name: &'static str, flag: bool, a: [u64; 4], b: [u64; 3], ts: u64) {
        let (pid, tid) = current_ids();
        let end = if what == What::Command {
            monotonic_ns()
        } else {
            0
        };
        let ts = if ts == 0 { monotonic_ns() } else { ts };
        let r = Rec {
            ts,
            end,
            what,
            pid,
            tid,
            name,
            flag,
            a,
            b,
        };
        self.ring.lock().push(r);
    }

    /// An ioctl entered.
    #[inline]
    pub(crate) fn ioctl_enter(&self, name: &'static str) {
        if self.on() {
            self.push(What::IoctlEnter, name, false, [0; 4], [0; 3], 0);
        }
    }

    /// An ioctl returned `ret` (the value, or -errno).
    #[inline]
    pub(crate) fn ioctl_exit(&self, name: &'static str, ret: i64) {
        if self.on() {
            self.push(
                What::IoctlExit,
                name,
                false,
                [ret as u64, 0, 0, 0],
                [0; 3],
                0,
            );
        }
    }

    /// `SUBMIT` accepted job `seqno` of context `handle` (slot `hw`) on
    /// `engine`; `queued`: it waits in the KMD.
    #[inline]
    pub(crate) fn submit(&self, handle: u32, hw: u32, engine: usize, seqno: u64, queued: bool) {
        if self.on() {
            let a = [u64::from(handle), u64::from(hw), engine as u64, seqno];
            self.push(What::Submit, "", queued, a, [0; 3], 0);
        }
    }

    /// Job `seqno` was written into ring (`hw`, `engine`) where `at` says.
    #[inline]
    pub(crate) fn ring_write(&self, hw: u32, engine: usize, seqno: u64, at: JobAt) {
        if self.on() {
            let a = [u64::from(hw), engine as u64, seqno, at.ring_va];
            let b = [u64::from(at.wptr), at.bytes as u64, u64::from(at.size)];
            self.push(What::RingWrite, "", false, a, b, 0);
        }
    }

    /// A doorbell of ring (`hw`, `engine`) at `wptr`, posted from `start`
    /// ([`Trace::start`]: the record's time is before the device could
    /// see it) with result `ret` (0 or -errno).
    #[inline]
    pub(crate) fn doorbell(&self, start: u64, hw: u32, engine: u32, wptr: u32, ret: i64) {
        if self.on() && start != 0 {
            let a = [
                u64::from(hw),
                u64::from(engine),
                u64::from(wptr),
                ret as u64,
            ];
            self.push(What::Doorbell, "", false, a, [0; 3], start);
        }
    }

    /// Control command `name`, sent at `start` ([`Trace::start`]), ended
    /// now with `ret` (0 or -errno).
    #[inline]
    pub(crate) fn command(&self, start: u64, name: &'static str, ret: i64) {
        if self.on() && start != 0 {
            self.push(
                What::Command,
                name,
                false,
                [ret as u64, 0, 0, 0],
                [0; 3],
                start,
            );
        }
    }

    /// Event record `seq` of kind `kind` (`name`), raised at device time
    /// `device_ns`, arrived at `at` with data words `data`.
    #[inline]
    pub(crate) fn event(
        &self,
        at: u64,
        kind: u32,
        name: &'static str,
        seq: u64,
        device_ns: u64,
        data: [u64; 3],
    ) {
        if self.on() {
            let a = [u64::from(kind), seq, device_ns, 0];
            self.push(What::Event, name, false, a, data, at);
        }
    }

    /// A `FENCE` event of ring (`hw`, `engine`) for `seqno` was judged
    /// `verdict`, the fence value in memory being `value`.
    #[inline]
    pub(crate) fn fence_signal(
        &self,
        hw: u32,
        engine: u32,
        seqno: u64,
        value: u64,
        verdict: &'static str,
    ) {
        if self.on() {
            let a = [u64::from(hw), u64::from(engine), seqno, value];
            self.push(What::FenceSignal, verdict, false, a, [0; 3], 0);
        }
    }

    /// Ring (`hw`, `engine`) of context `handle` was declared hung.
    #[inline]
    pub(crate) fn hang(&self, hw: u32, engine: usize, handle: u32) {
        if self.on() {
            let a = [u64::from(hw), engine as u64, u64::from(handle), 0];
            self.push(What::Hang, "", false, a, [0; 3], 0);
        }
    }

    /// A device reset with guilty slot `hw` ended, `ok` or not.
    #[inline]
    pub(crate) fn device_reset(&self, hw: u32, ok: bool) {
        if self.on() {
            self.push(
                What::DeviceReset,
                "",
                ok,
                [u64::from(hw), 0, 0, 0],
                [0; 3],
                0,
            );
        }
    }

    /// A page fault of ring (`hw`, `engine`) at `va`, `served` or not.
    #[inline]
    pub(crate) fn fault(&self, hw: u32, engine: u32, va: u64, served: bool) {
        if self.on() {
            let a = [u64::from(hw), u64::from(engine), va, 0];
            self.push(What::Fault, "", served, a, [0; 3], 0);
        }
    }

    /// Engine error `code` (`name`) of ring (`hw`, `engine`) at packet
    /// `packet_va`.
    #[inline]
    pub(crate) fn engine_error(
        &self,
        hw: u32,
        engine: u32,
        code: u32,
        name: &'static str,
        packet_va: u64,
    ) {
        if self.on() {
            let a = [u64::from(hw), u64::from(engine), u64::from(code), packet_va];
            self.push(What::EngineError, name, false, a, [0; 3], 0);
        }
    }

    /// Writes the trace as text: a header, the sync samples, then every
    /// record kept, oldest first, one per line (format in
    /// docs/debugging.md). A snapshot: records appended meanwhile are in
    /// the next read.
    pub(crate) fn show(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (cap, len) = {
            let r = self.ring.lock();
            (r.cap, r.recs.len())
        };
        // The copy is allocated outside the spinlock.
        let (Ok(mut recs), Ok(mut syncs)) = (
            KVVec::<Rec>::with_capacity(len.max(1), GFP_KERNEL),
            KVec::<Sync>::with_capacity(SYNC_FIRST + SYNC_LAST, GFP_KERNEL),
        ) else {
            return writeln!(f, "# vgpu-kmd-trace 1 error no memory for a snapshot");
        };
        let (total, sync_total) = {
            let r = self.ring.lock();
            let n = r.recs.len().min(recs.capacity());
            // Oldest first: once the ring wrapped, the oldest is at
            // `total % cap`.
            let start = if r.recs.len() == r.cap && r.cap != 0 {
                (r.total % r.cap as u64) as usize
            } else {
                0
            };
            let (older, newer) = r.recs.split_at(start.min(r.recs.len()));
            for x in Iterator::chain(newer.iter(), older.iter()).take(n) {
                let _ = recs.push_within_capacity(*x);
            }
            // Sync samples in time order: the first ones, then the ring of
            // the last ones from its oldest.
            let (first, last) = r.syncs.split_at(r.syncs.len().min(SYNC_FIRST));
            let oldest = if last.len() == SYNC_LAST {
                (r.sync_total.saturating_sub(SYNC_FIRST as u64) % SYNC_LAST as u64) as usize
            } else {
                0
            };
            let (l_older, l_newer) = last.split_at(oldest.min(last.len()));
            for s in Iterator::chain(Iterator::chain(first.iter(), l_newer), l_older) {
                let _ = syncs.push_within_capacity(*s);
            }
            (r.total, r.sync_total)
        };
        writeln!(
            f,
            "# vgpu-kmd-trace 1 clock monotonic enabled {} capacity {} records {} total {} overwritten {} syncs {}",
            u8::from(self.on()),
            cap,
            recs.len(),
            total,
            total.saturating_sub(recs.len() as u64),
            sync_total
        )?;
        for s in syncs.iter() {
            writeln!(f, "{} sync end={} device_ns={}", s.t0, s.t1, s.device_ns)?;
        }
        for r in recs.iter() {
            write_rec(f, r)?;
        }
        Ok(())
    }
}

fn write_rec(f: &mut fmt::Formatter<'_>, r: &Rec) -> fmt::Result {
    write!(f, "{} {} pid={} tid={}", r.ts, r.what.name(), r.pid, r.tid)?;
    let a = r.a;
    match r.what {
        What::IoctlEnter => write!(f, " name={}", r.name),
        What::IoctlExit => write!(f, " name={} ret={}", r.name, a[0] as i64),
        What::Submit => write!(
            f,
            " ctx={} hw={} engine={} seqno={} queued={}",
            a[0],
            a[1],
            a[2],
            a[3],
            u8::from(r.flag)
        ),
        What::RingWrite => write!(
            f,
            " hw={} engine={} seqno={} ring_va={:#x} at={} bytes={} size={}",
            a[0], a[1], a[2], a[3], r.b[0], r.b[1], r.b[2]
        ),
        What::Doorbell => write!(
            f,
            " hw={} engine={} wptr={} ret={}",
            a[0], a[1], a[2], a[3] as i64
        ),
        What::Command => write!(f, " name={} end={} ret={}", r.name, r.end, a[0] as i64),
        What::Event => write!(
            f,
            " kind={} name={} seq={} device_ns={} d0={:#x} d1={:#x} d2={:#x}",
            a[0], r.name, a[1], a[2], r.b[0], r.b[1], r.b[2]
        ),
        What::FenceSignal => write!(
            f,
            " hw={} engine={} seqno={} value={} verdict={}",
            a[0], a[1], a[2], a[3], r.name
        ),
        What::Hang => write!(f, " hw={} engine={} ctx={}", a[0], a[1], a[2]),
        What::DeviceReset => write!(f, " hw={} ok={}", a[0], u8::from(r.flag)),
        What::Fault => write!(
            f,
            " hw={} engine={} va={:#x} served={}",
            a[0],
            a[1],
            a[2],
            u8::from(r.flag)
        ),
        What::EngineError => write!(
            f,
            " hw={} engine={} code={} name={} packet_va={:#x}",
            a[0], a[1], a[2], r.name, a[3]
        ),
    }?;
    writeln!(f)
}
