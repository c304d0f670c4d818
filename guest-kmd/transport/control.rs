// SPDX-License-Identifier: GPL-2.0

//! The control-command path.
//!
//! Commands are serialised by [`Control::serialise`]: one command is in
//! flight at a time. Each command uses one *slot* of the control queue: two
//! descriptors (`2s`: the device-readable command, `2s + 1`: the
//! device-writable reply buffer) and a [`SLOT_BYTES`] area of DMA memory.
//!
//! The submitting thread sleeps on [`Control`]'s condition variable until the
//! control-queue interrupt wakes it, then reaps the used ring itself. A
//! command that times out (or whose caller is interrupted by a signal) is
//! *abandoned*: its slot stays owned by the device until the device returns
//! it, so a late completion can never land in a buffer reused by another
//! command. If the device never returns abandoned slots, the queue runs out
//! of slots and commands fail with `EBUSY`.
//!
//! A reply is copied out of DMA memory once and only the copy is validated:
//! used length, opcode and tag echo, status, exact reply size.
//!
//! Doorbells are *posted* ([`Control::post_doorbell`]): like a doorbell
//! register write on real hardware, the submitter does not wait for the
//! device to take it. The slot stays the device's until the reply comes
//! back; whoever reaps the queue next validates it. A doorbell the device
//! refused is remembered ([`Control::take_failed_doorbells`]) and rung again
//! by the hang check: doorbells are latched write pointers, so ringing again
//! is harmless. A doorbell needs a free slot, and the device may hold every
//! slot for a while: [`Control::reserve_doorbell`] waits for one (the
//! control-queue interrupt wakes it) *before* the caller takes its own
//! locks, so that posting under them never waits.
//!
//! Nothing here knows the blocks above: the device is reached through a
//! [`Link`], and a device found broken is marked there (the caller wakes its
//! own sleepers).

use super::{
    link::Link,
    virtqueue::{
        DescSpec,
        DmaBytes,
        SplitQueue,
        UsedElem,
        DESC_F_NEXT,
        DESC_F_WRITE, //
    },
};
use crate::{
    dev_err_ratelimited, dev_warn_ratelimited, errno,
    pod::Pod,
    proto::{
        Command,
        Opcode,
        ReplyHeader,
        Status,
        MAX_COMMAND_SIZE,
        QUEUE_CONTROL, //
    },
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
    new_condvar, new_mutex,
    prelude::*,
    sync::{
        atomic::{
            Atomic,
            Relaxed, //
        },
        CondVar,
        CondVarTimeoutResult,
        Mutex,
        MutexGuard, //
    },
    time::{
        Instant,
        Monotonic, //
    },
};

/// Bytes reserved for a command in each slot.
pub(crate) const CMD_AREA: usize = 256;
/// Bytes reserved for a reply in each slot (the largest, `SAN_REPORT`'s,
/// is 288).
pub(crate) const REPLY_AREA: usize = 512;
/// DMA bytes per slot.
const SLOT_BYTES: usize = CMD_AREA + REPLY_AREA;
/// Largest control queue this driver sets up (descriptors; two per slot).
pub(crate) const CONTROL_QUEUE_MAX: u16 = 64;
/// Failed posted doorbells remembered for the hang check to ring again.
const FAILED_DOORBELLS: usize = 64;

// Every command and every successful reply fits its area.
const _: () = {
    let mut i = 0;
    while i < Opcode::ALL.len() {
        assert!(Opcode::ALL[i].command_size() <= CMD_AREA);
        assert!(Opcode::ALL[i].reply_size() <= REPLY_AREA);
        i += 1;
    }
    assert!(CMD_AREA <= MAX_COMMAND_SIZE);
};

/// The largest command this driver sends.
pub(crate) const fn largest_command() -> usize {
    let mut max = 0;
    let mut i = 0;
    while i < Opcode::ALL.len() {
        if Opcode::ALL[i].command_size() > max {
            max = Opcode::ALL[i].command_size();
        }
        i += 1;
    }
    max
}

/// A posted doorbell, as remembered until its reply is reaped.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct PostedDoorbell {
    tag: u64,
    /// Device context id.
    pub(crate) ctx_id: u32,
    /// Engine.
    pub(crate) engine: u32,
}

/// Who owns a slot.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Slot {
    /// The driver.
    Free,
    /// The device; a caller waits for the reply.
    InFlight,
    /// The device; nobody waits (timed out or interrupted).
    Abandoned,
    /// The device; a posted doorbell whose reply the next reaper checks.
    Posted(PostedDoorbell),
    /// The driver; kept for a doorbell a [`DoorbellSlot`] will post.
    Reserved,
    /// The driver again: the device returned it with this used length.
    Done(u32),
}

/// The control virtqueue and its buffers.
pub(crate) struct ControlQueue {
    ring: SplitQueue,
    bufs: DmaBytes,
    slots: KVec<Slot>,
    notify_off: u16,
    /// Posted doorbells the device refused, to ring again.
    failed_doorbells: KVec<PostedDoorbell>,
}

impl ControlQueue {
    /// Allocates a control queue of `size` descriptors (`size / 2` slots).
    pub(crate) fn new(dev: &Device<Bound>, size: u16) -> Result<Self> {
        if size < 2 {
            return Err(EINVAL);
        }
        let nslots = usize::from(size / 2);
        let mut slots = KVec::with_capacity(nslots, GFP_KERNEL)?;
        for _ in 0..nslots {
            slots.push(Slot::Free, GFP_KERNEL)?;
        }
        Ok(ControlQueue {
            ring: SplitQueue::new(dev, size)?,
            bufs: DmaBytes::new(dev, nslots * SLOT_BYTES)?,
            slots,
            notify_off: 0,
            failed_doorbells: KVec::new(),
        })
    }

    /// The ring, for programming its addresses into the device.
    pub(crate) fn ring(&self) -> &SplitQueue {
        &self.ring
    }

    /// Records the queue's `queue_notify_off`.
    pub(crate) fn set_notify_off(&mut self, off: u16) {
        self.notify_off = off;
    }

    /// Number of slots.
    pub(crate) fn slots(&self) -> usize {
        self.slots.len()
    }

    /// Slots the device still owns because their command was abandoned.
    pub(crate) fn abandoned(&self) -> usize {
        self.slots.iter().filter(|s| **s == Slot::Abandoned).count()
    }

    fn free_slot(&self) -> Option<usize> {
        self.slots.iter().position(|s| *s == Slot::Free)
    }

    /// Writes `cmd` into slot `s`, builds its two-descriptor chain and makes
    /// it available (not yet published).
    fn post(&mut self, s: usize, cmd: &[u8]) -> Result {
        let base = s * SLOT_BYTES;
        let head = u16::try_from(2 * s).map_err(|_| EINVAL)?;
        let cmd_len = u32::try_from(cmd.len()).map_err(|_| EINVAL)?;
        self.bufs.write(base, cmd)?;
        self.ring.set_desc(
            head,
            DescSpec {
                addr: self.bufs.dma_addr(base)?,
                len: cmd_len,
                flags: DESC_F_NEXT,
                next: head + 1,
            },
        )?;
        self.ring.set_desc(
            head + 1,
            DescSpec {
                addr: self.bufs.dma_addr(base + CMD_AREA)?,
                len: REPLY_AREA as u32,
                flags: DESC_F_WRITE,
                next: 0,
            },
        )?;
        self.ring.push(head)?;
        self.slots[s] = Slot::InFlight;
        Ok(())
    }

    /// Marks the command in slot `s` as no longer awaited.
    fn abandon(&mut self, s: usize) {
        if let Some(slot) = self.slots.get_mut(s) {
            if *slot == Slot::InFlight {
                *slot = Slot::Abandoned;
            }
        }
    }

    /// Applies one used-ring entry, or `Err` if the device returned a chain
    /// it does not own.
    fn complete(&mut self, e: UsedElem, stats: &ControlStats) -> Result<(), ()> {
        let id = usize::try_from(e.id).map_err(|_| ())?;
        if id % 2 != 0 {
            return Err(());
        }
        let s = id / 2;
        let slot = self.slots.get_mut(s).ok_or(())?;
        match *slot {
            Slot::InFlight => {
                *slot = Slot::Done(e.len);
            }
            Slot::Abandoned => {
                *slot = Slot::Free;
                stats.late.add(1, Relaxed);
            }
            Slot::Posted(p) => {
                *slot = Slot::Free;
                self.check_posted(s, e.len, p, stats);
            }
            Slot::Free | Slot::Done(_) | Slot::Reserved => return Err(()),
        }
        Ok(())
    }

    /// Validates the reply of posted doorbell `p` (slot `s`); remembers a
    /// refused one for the hang check to ring again.
    fn check_posted(&mut self, s: usize, used_len: u32, p: PostedDoorbell, stats: &ControlStats) {
        let mut bytes = [0u8; REPLY_AREA];
        let len = usize::try_from(used_len)
            .unwrap_or(usize::MAX)
            .min(REPLY_AREA);
        let hdr = self
            .bufs
            .read(s * SLOT_BYTES + CMD_AREA, &mut bytes[..len])
            .ok()
            .and_then(|()| ReplyHeader::read_from(&bytes[..len]));
        let ok = match hdr {
            Some(h) if h.opcode == Opcode::Doorbell as u32 && h.tag == p.tag => {
                h.status == Status::Ok as u32
            }
            _ => {
                stats.protocol_errors.add(1, Relaxed);
                false
            }
        };
        if ok {
            stats.ok.add(1, Relaxed);
        } else {
            stats.failed.add(1, Relaxed);
            stats.posted_failed.add(1, Relaxed);
            let known = self
                .failed_doorbells
                .iter()
                .any(|f| f.ctx_id == p.ctx_id && f.engine == p.engine);
            if !known && self.failed_doorbells.len() < FAILED_DOORBELLS {
                let _ = self.failed_doorbells.push(p, GFP_KERNEL);
            }
        }
    }

    /// Consumes every used entry. Fails (with the reason) if the device
    /// returned something it does not own: the ring is unusable then.
    fn reap(&mut self, stats: &ControlStats) -> Result<(), &'static str> {
        loop {
            let e = match self.ring.pop_used() {
                Ok(Some(e)) => e,
                Ok(None) => return Ok(()),
                Err(_) => return Err("control queue: used index beyond the posted commands"),
            };
            if self.complete(e, stats).is_err() {
                return Err("control queue: device returned a descriptor it does not own");
            }
        }
    }

    /// Copies the reply of the completed slot `s` out of DMA memory and frees
    /// the slot.
    fn take_reply(&mut self, s: usize, used_len: u32) -> Result<Reply> {
        let mut reply = Reply {
            bytes: [0; REPLY_AREA],
            used_len: usize::try_from(used_len).unwrap_or(usize::MAX),
        };
        let n = reply.used_len.min(REPLY_AREA);
        self.bufs
            .read(s * SLOT_BYTES + CMD_AREA, &mut reply.bytes[..n])?;
        self.slots[s] = Slot::Free;
        Ok(reply)
    }
}

/// Counters of the control path.
pub(crate) struct ControlStats {
    /// Commands made available to the device.
    pub(crate) sent: Atomic<u64>,
    /// Commands that completed with status OK.
    pub(crate) ok: Atomic<u64>,
    /// Commands that completed with an error status.
    pub(crate) failed: Atomic<u64>,
    /// Commands abandoned because the device did not answer in time.
    pub(crate) timeouts: Atomic<u64>,
    /// Commands abandoned because the caller got a signal.
    pub(crate) interrupted: Atomic<u64>,
    /// Abandoned commands the device completed later.
    pub(crate) late: Atomic<u64>,
    /// Replies that broke the protocol.
    pub(crate) protocol_errors: Atomic<u64>,
    /// Doorbells posted without waiting for the reply.
    pub(crate) posted: Atomic<u64>,
    /// Posted doorbells the device refused (rung again later).
    pub(crate) posted_failed: Atomic<u64>,
}

/// The control path: serialisation, the queue, and its wake-up.
#[pin_data]
pub(crate) struct Control {
    /// Held for the whole of a command.
    #[pin]
    serial: Mutex<()>,
    /// The queue; `None` before bring-up and after teardown.
    #[pin]
    state: Mutex<ControlState>,
    /// Signalled by the control-queue interrupt.
    #[pin]
    completed: CondVar,
    timeout_ms: u32,
    pub(crate) stats: ControlStats,
}

/// State behind [`Control`]'s queue lock.
pub(crate) struct ControlState {
    queue: Option<ControlQueue>,
    next_tag: u64,
}

impl Control {
    /// A control path without a queue; commands wait `timeout_ms` at most.
    pub(crate) fn new(timeout_ms: u32) -> impl PinInit<Self> {
        pin_init!(Control {
            serial <- new_mutex!(()),
            state <- new_mutex!(ControlState { queue: None, next_tag: 1 }),
            completed <- new_condvar!(),
            timeout_ms,
            stats: ControlStats {
                sent: Atomic::new(0),
                ok: Atomic::new(0),
                failed: Atomic::new(0),
                timeouts: Atomic::new(0),
                interrupted: Atomic::new(0),
                late: Atomic::new(0),
                protocol_errors: Atomic::new(0),
                posted: Atomic::new(0),
                posted_failed: Atomic::new(0),
            },
        })
    }

    /// Takes the command lock: no other command runs until it is dropped.
    pub(crate) fn serialise(&self) -> MutexGuard<'_, ()> {
        self.serial.lock()
    }

    /// Hands the (programmed) queue to the control path.
    pub(crate) fn install(&self, q: ControlQueue) {
        self.state.lock().queue = Some(q);
    }

    /// Takes the queue away (teardown). Waiters see `ENODEV`.
    pub(crate) fn take_queue(&self) -> Option<ControlQueue> {
        self.state.lock().queue.take()
    }

    /// Wakes the command waiter (control-queue interrupt).
    pub(crate) fn wake(&self) {
        // Taking the lock orders this wake-up after a waiter's check of the
        // used ring, so the wake-up cannot fall between check and sleep.
        drop(self.state.lock());
        self.completed.notify_all();
    }

    /// The command timeout in milliseconds.
    pub(crate) fn timeout_ms(&self) -> u32 {
        self.timeout_ms
    }

    /// Runs `f` on the queue, if there is one.
    pub(crate) fn with_queue<R>(&self, f: impl FnOnce(&ControlQueue) -> R) -> Option<R> {
        self.state.lock().queue.as_ref().map(f)
    }
}

/// How waiting for a command ended.
enum Wait {
    /// The device returned the slot with this used length.
    Replied(u32),
    Failed(Error),
    Broken(&'static str),
    TimedOut,
}

/// A reply copied out of DMA memory.
pub(crate) struct Reply {
    bytes: [u8; REPLY_AREA],
    /// The used length the device reported.
    used_len: usize,
}

impl Reply {
    /// Decodes the reply as `T`. The reply has been validated to be exactly
    /// the size of its opcode's reply.
    pub(crate) fn get<T: Pod>(&self) -> Result<T> {
        let len = self.used_len.min(REPLY_AREA);
        T::read_from(&self.bytes[..len]).ok_or_else(errno::eproto)
    }
}

/// Converts a reply status other than OK to an errno.
fn status_errno(s: Status) -> Error {
    match s {
        Status::UnknownOpcode => errno::eopnotsupp(),
        Status::Truncated
        | Status::Oversized
        | Status::InvalidArgument
        | Status::ReservedNonZero => EINVAL,
        Status::Busy => EBUSY,
        Status::BadDescriptor => EIO,
        Status::DeviceLost => ENODEV,
        Status::NotFound => ENOENT,
        Status::AlreadyExists => EEXIST,
        // The firmware does not run (booting, crashed, or after a reset
        // before the driver loaded it again).
        Status::NotReady => EAGAIN,
        // The running firmware does not enable the feature.
        Status::Unsupported => errno::eopnotsupp(),
        // Not an error; callers never pass it.
        Status::Ok => EINVAL,
    }
}

/// A control slot reserved for one posted doorbell
/// ([`Control::reserve_doorbell`]); given back if it is dropped unused.
pub(crate) struct DoorbellSlot<'a> {
    control: &'a Control,
    slot: usize,
}

impl Drop for DoorbellSlot<'_> {
    fn drop(&mut self) {
        let mut guard = self.control.state.lock();
        if let Some(q) = guard.queue.as_mut() {
            if let Some(s) = q.slots.get_mut(self.slot) {
                if *s == Slot::Reserved {
                    *s = Slot::Free;
                }
            }
        }
        drop(guard);
        // Someone may wait for a slot.
        self.control.completed.notify_all();
    }
}

impl Control {
    /// Reserves a slot for one posted doorbell, waiting (up to the command
    /// timeout) while the device holds them all. Call it before taking the
    /// locks under which the doorbell is posted.
    ///
    /// # Errors
    ///
    /// `ENODEV` (unbound, or no queue), `EIO` (broken), `ETIMEDOUT`,
    /// `ERESTARTSYS` (signal).
    pub(crate) fn reserve_doorbell(&self, link: &Link) -> Result<DoorbellSlot<'_>> {
        link.check_usable()?;
        let timeout_ns = u64::from(self.timeout_ms) * 1_000_000;
        let start = Instant::<Monotonic>::now();
        let mut guard = self.state.lock();
        loop {
            let q = guard.queue.as_mut().ok_or(ENODEV)?;
            if let Err(why) = q.reap(&self.stats) {
                drop(guard);
                link.mark_broken(why);
                self.wake();
                return Err(EIO);
            }
            if let Some(slot) = q.free_slot() {
                q.slots[slot] = Slot::Reserved;
                return Ok(DoorbellSlot {
                    control: self,
                    slot,
                });
            }
            link.check_usable()?;
            let spent = elapsed_ns(&start);
            if spent >= timeout_ns {
                self.stats.timeouts.add(1, Relaxed);
                return Err(ETIMEDOUT);
            }
            let res = self
                .completed
                .wait_interruptible_timeout(&mut guard, ns_to_jiffies(timeout_ns - spent));
            if let CondVarTimeoutResult::Signal { .. } = res {
                return Err(ERESTARTSYS);
            }
        }
    }

    /// Rings the doorbell of `ctx_id`'s ring on `engine` at `wptr` in a
    /// reserved slot, without waiting for the device to take it (see the
    /// module documentation). Never sleeps.
    ///
    /// # Errors
    ///
    /// `ENODEV` (unbound, or no queue), `EIO` (broken), `EINVAL` (the slot
    /// belongs to another control path).
    pub(crate) fn post_doorbell(
        &self,
        link: &Link,
        slot: DoorbellSlot<'_>,
        ctx_id: u32,
        engine: u32,
        wptr: u32,
    ) -> Result {
        if !core::ptr::eq(slot.control, self) {
            return Err(EINVAL);
        }
        link.check_usable()?;
        let cmd = Command::Doorbell {
            ctx_id,
            engine,
            wptr,
        };
        let mut guard = self.state.lock();
        let tag = guard.next_tag;
        guard.next_tag = guard.next_tag.wrapping_add(1).max(1);
        let q = guard.queue.as_mut().ok_or(ENODEV)?;
        let s = slot.slot;
        if q.slots.get(s) != Some(&Slot::Reserved) {
            return Err(EINVAL);
        }
        let mut bytes = [0u8; CMD_AREA];
        let len = cmd.encode(tag, &mut bytes).ok_or(EINVAL)?;
        q.post(s, &bytes[..len])?;
        // The slot is the device's now: the reservation must not free it.
        core::mem::forget(slot);
        q.slots[s] = Slot::Posted(PostedDoorbell {
            tag,
            ctx_id,
            engine,
        });
        q.ring.publish()?;
        let notify_off = q.notify_off;
        self.stats.sent.add(1, Relaxed);
        self.stats.posted.add(1, Relaxed);
        link.transport.notify(QUEUE_CONTROL, notify_off)
    }

    /// Posted doorbells the device refused since the last call (each ring
    /// once).
    pub(crate) fn take_failed_doorbells(&self) -> KVec<PostedDoorbell> {
        let mut guard = self.state.lock();
        match guard.queue.as_mut() {
            Some(q) => {
                let _ = q.reap(&self.stats);
                core::mem::take(&mut q.failed_doorbells)
            }
            None => KVec::new(),
        }
    }

    /// Sends `cmd` and waits for its reply.
    ///
    /// # Errors
    ///
    /// As [`Control::command_locked`].
    pub(crate) fn command(&self, link: &Link, cmd: Command) -> Result<Reply> {
        let serial = self.serialise();
        self.command_locked(link, &serial, cmd)
    }

    /// Sends `cmd` and waits for its reply; the caller holds the command
    /// lock ([`Control::serialise`]).
    ///
    /// # Errors
    ///
    /// `ENODEV` (device unbound), `EIO` (device broken), `EBUSY` (no free
    /// slot), `ETIMEDOUT`, `ERESTARTSYS` (signal), `EPROTO` (malformed
    /// reply), `EINVAL` (`serial` is another path's lock), or the errno of
    /// the reply status.
    pub(crate) fn command_locked(
        &self,
        link: &Link,
        serial: &MutexGuard<'_, ()>,
        cmd: Command,
    ) -> Result<Reply> {
        if !core::ptr::eq(serial.lock_ref(), &self.serial) {
            return Err(EINVAL);
        }
        link.check_usable()?;
        let opcode = cmd.opcode();
        let timeout_ns = u64::from(self.timeout_ms) * 1_000_000;
        let start = Instant::<Monotonic>::now();

        let mut guard = self.state.lock();
        let tag = guard.next_tag;
        guard.next_tag = guard.next_tag.wrapping_add(1).max(1);

        let submitted = (|| -> Result<Result<usize, &'static str>> {
            let q = guard.queue.as_mut().ok_or(ENODEV)?;
            if let Err(why) = q.reap(&self.stats) {
                return Ok(Err(why));
            }
            let slot = q.free_slot().ok_or(EBUSY)?;
            let mut bytes = [0u8; CMD_AREA];
            let len = cmd.encode(tag, &mut bytes).ok_or(EINVAL)?;
            q.post(slot, &bytes[..len])?;
            q.ring.publish()?;
            self.stats.sent.add(1, Relaxed);
            if let Err(e) = link.transport.notify(QUEUE_CONTROL, q.notify_off) {
                q.abandon(slot);
                return Err(e);
            }
            Ok(Ok(slot))
        })()?;
        let slot = match submitted {
            Ok(slot) => slot,
            Err(why) => {
                drop(guard);
                link.mark_broken(why);
                self.wake();
                return Err(EIO);
            }
        };

        let outcome = loop {
            {
                let Some(q) = guard.queue.as_mut() else {
                    break Wait::Failed(ENODEV);
                };
                if let Err(why) = q.reap(&self.stats) {
                    q.abandon(slot);
                    break Wait::Broken(why);
                }
                if let Slot::Done(len) = q.slots[slot] {
                    break Wait::Replied(len);
                }
                if let Err(e) = link.check_usable() {
                    q.abandon(slot);
                    break Wait::Failed(e);
                }
                if elapsed_ns(&start) >= timeout_ns {
                    q.abandon(slot);
                    break Wait::TimedOut;
                }
            }
            let remaining = timeout_ns - elapsed_ns(&start).min(timeout_ns);
            let res = self
                .completed
                .wait_interruptible_timeout(&mut guard, ns_to_jiffies(remaining));
            if let CondVarTimeoutResult::Signal { .. } = res {
                if let Some(q) = guard.queue.as_mut() {
                    q.abandon(slot);
                }
                self.stats.interrupted.add(1, Relaxed);
                break Wait::Failed(ERESTARTSYS);
            }
        };
        // Copy the reply out while the slot is still ours.
        let reply = match outcome {
            Wait::Replied(len) => match guard.queue.as_mut() {
                Some(q) => q.take_reply(slot, len).map(Some),
                None => Err(ENODEV),
            },
            _ => Ok(None),
        };
        drop(guard);

        match outcome {
            Wait::Replied(_) => {
                link.answered();
                let reply = reply?.ok_or(ENODEV)?;
                self.check_reply(link, opcode, tag, &reply)?;
                Ok(reply)
            }
            Wait::Failed(e) => Err(e),
            Wait::Broken(why) => {
                link.mark_broken(why);
                self.wake();
                Err(EIO)
            }
            Wait::TimedOut => {
                self.stats.timeouts.add(1, Relaxed);
                dev_warn_ratelimited!(
                    link.pdev,
                    "{} (tag {}) timed out after {} ms\n",
                    opcode.name(),
                    tag,
                    self.timeout_ms
                );
                // A device that stopped answering may have said why; one
                // that keeps not answering is lost.
                link.config_changed();
                if link.unanswered() {
                    self.wake();
                    return Err(EIO);
                }
                Err(ETIMEDOUT)
            }
        }
    }

    /// Validates a reply copy: used length, header echo, status, size.
    fn check_reply(&self, link: &Link, opcode: Opcode, tag: u64, reply: &Reply) -> Result {
        let fail = |what: core::fmt::Arguments<'_>| {
            self.stats.protocol_errors.add(1, Relaxed);
            dev_err_ratelimited!(
                link.pdev,
                "{} (tag {}): bad reply: {}\n",
                opcode.name(),
                tag,
                what
            );
            Err(errno::eproto())
        };
        let len = reply.used_len;
        if len > REPLY_AREA {
            return fail(format_args!(
                "used length {} exceeds the {}-byte buffer",
                len, REPLY_AREA
            ));
        }
        let Some(hdr) = ReplyHeader::read_from(&reply.bytes[..len]) else {
            return fail(format_args!(
                "used length {} is shorter than a reply header",
                len
            ));
        };
        if hdr.opcode != opcode as u32 || hdr.tag != tag {
            return fail(format_args!(
                "echoes opcode {:#x} tag {} instead of {:#x} tag {}",
                hdr.opcode, hdr.tag, opcode as u32, tag
            ));
        }
        match Status::from_u32(hdr.status) {
            None => fail(format_args!("unknown status {}", hdr.status)),
            Some(Status::Ok) => {
                if len != opcode.reply_size() {
                    return fail(format_args!(
                        "{} bytes, expected {}",
                        len,
                        opcode.reply_size()
                    ));
                }
                self.stats.ok.add(1, Relaxed);
                Ok(())
            }
            Some(s) => {
                self.stats.failed.add(1, Relaxed);
                Err(status_errno(s))
            }
        }
    }
}
