// SPDX-License-Identifier: GPL-2.0

//! Devcoredumps: every hang, aborted fault and engine error becomes a file
//! in `/sys/class/devcoredump/devcdN/data` holding the driver's state and
//! the device's capture of the failing context (`hwif/src/coredump.rs`).
//!
//! ```text
//!  failure ─▶ snapshot (state lock) ─▶ pending ─▶ publish (watchdog): CAPTURE_READ chunks,
//!                                                   mappings, text ─▶ dev_coredumpm ─▶ read / cleared
//! ```
//!
//! * A hang: the reset ladder takes the snapshot and asks the device for a
//!   capture (`CAPTURE`) before it resets the engine, so the capture shows
//!   the job still in flight; the dump is written once recovery is over,
//!   so reading the capture never delays it.
//! * A fault or engine error: the interrupt thread takes the snapshot (the
//!   device captured the context by itself before it sent the event); the
//!   next watchdog tick reads the capture and publishes.
//!
//! The first dump is kept until it is read and cleared (written to), as
//! the devcoredump core and xe or msm do: while one is outstanding, later
//! failures are only logged in debugfs `coredumps` (a short history). The
//! capture is read with `CAPTURE_READ` into a DMA buffer allocated at probe,
//! one chunk at a time; [`Gpu::dumping`] serialises those reads and is
//! never held with the state lock.

use super::{
    dump::{
        write_coredump,
        DeviceCapture,
        DumpText,
        MapLine,
        VmLines, //
    },
    records::{
        DumpLog,
        PendingDump,
        Snapshot,
        Why,
        CAPTURE_BUF_BYTES, //
    },
    ring::SlotMemory,
    state::{
        push_log,
        Gpu,
        GpuState, //
    },
};
use crate::{
    dev_info_ratelimited, dev_warn_ratelimited, ffi,
    file::Client,
    proto::{
        CaptureReadReply,
        CaptureReply,
        Command,
        CAPTURE_READ_MAX, //
    },
    time::elapsed_ns,
};
use kernel::{
    alloc::KVVec,
    prelude::*,
    sync::Arc,
    time::{
        Instant,
        Monotonic, //
    },
};

/// The largest device capture the driver reads.
const MAX_CAPTURE: u32 = 32 << 20;
/// Dumps waiting for the watchdog at most (more are logged and dropped).
const MAX_PENDING: usize = 4;

const _: () = assert!(CAPTURE_BUF_BYTES as u32 <= CAPTURE_READ_MAX);

impl Gpu {
    /// Whether a published dump is still unread.
    pub(crate) fn dump_unread(&self) -> bool {
        self.dump_slot.as_ref().is_some_and(|s| s.outstanding())
    }

    /// A snapshot of the failure for the dump, with the context's file
    /// (state lock held).
    fn snapshot(
        g: &GpuState,
        mem: &SlotMemory,
        why: Why,
        hw: u32,
        engine: usize,
        handle: u32,
    ) -> Option<(KBox<Snapshot>, Option<Arc<Client>>)> {
        let snap = Snapshot::take(g, mem, why, hw, engine, handle).ok()?;
        let client = g
            .slots
            .get(hw as usize)
            .and_then(|s| s.as_ref())
            .filter(|c| c.handle == handle)
            .map(|c| c.client.clone());
        Some((KBox::new(snap, GFP_KERNEL).ok()?, client))
    }

    /// A hang was found (reset ladder, [`Gpu::ops`] held, no state lock):
    /// the snapshot and the device's capture, before the reset. `None` with
    /// `coredump=0` or when a dump is still unread.
    pub(crate) fn capture_hang(
        &self,
        mem: &SlotMemory,
        hw: u32,
        engine: usize,
        handle: u32,
    ) -> Option<PendingDump> {
        if !crate::params::coredump() {
            return None;
        }
        if self.dump_unread() {
            self.log_skipped(Why::Hang, hw, handle, engine);
            return None;
        }
        let (snap, client) = {
            let g = self.state.lock();
            Self::snapshot(&g, mem, Why::Hang, hw, engine, handle)?
        };
        let start = Instant::<Monotonic>::now();
        let r = self
            .cmd(Command::Capture {
                ctx_id: hw,
                engine: engine as u32,
                reason: Why::Hang.device_reason(),
            })
            .and_then(|r| r.get::<CaptureReply>());
        let capture_ms = elapsed_ns(&start) / 1_000_000;
        Some(PendingDump {
            snap,
            client,
            capture: r.as_ref().ok().map(|c| c.capture_id),
            capture_ms,
            capture_status: if r.is_ok() { "ok" } else { "capture-failed" },
        })
    }

    /// A fault or engine error stopped context `hw` (interrupt thread,
    /// state lock held): queues its dump for the watchdog.
    pub(crate) fn queue_dump(
        &self,
        g: &mut GpuState,
        mem: &SlotMemory,
        why: Why,
        hw: u32,
        engine: usize,
        handle: u32,
    ) {
        if !crate::params::coredump() {
            return;
        }
        if self.dump_unread() || g.pending_dumps.len() >= MAX_PENDING {
            g.dumps_seq += 1;
            let seq = g.dumps_seq;
            push_log(&mut g.dumps_log, skipped(seq, why, hw, handle, engine));
            return;
        }
        let Some((snap, client)) = Self::snapshot(g, mem, why, hw, engine, handle) else {
            return;
        };
        let p = PendingDump {
            snap,
            client,
            capture: None,
            capture_ms: 0,
            capture_status: "ok",
        };
        let _ = g.pending_dumps.push(p, GFP_KERNEL);
    }

    fn log_skipped(&self, why: Why, hw: u32, handle: u32, engine: usize) {
        let mut g = self.state.lock();
        g.dumps_seq += 1;
        let seq = g.dumps_seq;
        push_log(&mut g.dumps_log, skipped(seq, why, hw, handle, engine));
    }

    /// Writes and publishes the queued dumps (watchdog, process context, no
    /// lock held).
    pub(crate) fn publish_dumps(&self) {
        loop {
            let p = {
                let mut g = self.state.lock();
                if g.pending_dumps.is_empty() {
                    return;
                }
                let p = g.pending_dumps.remove(0).ok();
                if p.is_some() {
                    g.publishing_dumps += 1;
                }
                p
            };
            match p {
                Some(p) => {
                    self.publish(p);
                    let mut g = self.state.lock();
                    g.publishing_dumps = g.publishing_dumps.saturating_sub(1);
                }
                None => return,
            }
        }
    }

    /// debugfs `coredump`: a dump of slot `hw`'s ring on `engine` now.
    ///
    /// # Errors
    ///
    /// `ENOENT` (no such context), `EBUSY` (a dump is unread), `ENOMEM`.
    pub(crate) fn dump_now(&self, hw: u32, engine: usize) -> Result {
        let mem = self.slots()?;
        if self.dump_unread() {
            return Err(EBUSY);
        }
        let (snap, client) = {
            let g = self.state.lock();
            let handle = g
                .slots
                .get(hw as usize)
                .and_then(|s| s.as_ref())
                .map(|c| c.handle)
                .ok_or(ENOENT)?;
            Self::snapshot(&g, mem, Why::Manual, hw, engine, handle).ok_or(ENOMEM)?
        };
        let start = Instant::<Monotonic>::now();
        let r = self
            .cmd(Command::Capture {
                ctx_id: hw,
                engine: engine as u32,
                reason: Why::Manual.device_reason(),
            })
            .and_then(|r| r.get::<CaptureReply>());
        self.publish(PendingDump {
            snap,
            client,
            capture: r.as_ref().ok().map(|c| c.capture_id),
            capture_ms: elapsed_ns(&start) / 1_000_000,
            capture_status: if r.is_ok() { "ok" } else { "capture-failed" },
        });
        Ok(())
    }

    /// Reads a device capture: `capture_id`, or the newest of slot `hw`.
    fn read_capture(&self, capture_id: u32, hw: u32) -> Result<(CaptureReadReply, KVVec<u8>)> {
        let g = self.dumping.lock();
        let buf = g.as_ref().ok_or(ENODEV)?;
        let pa = buf.dma_handle();
        let mut out = KVVec::new();
        let mut id = capture_id;
        loop {
            let r: CaptureReadReply = self
                .cmd(Command::CaptureRead {
                    capture_id: id,
                    ctx_id: hw,
                    offset: out.len() as u32,
                    len: CAPTURE_BUF_BYTES as u32,
                    buf_pa: pa,
                })?
                .get()?;
            if r.size > MAX_CAPTURE || r.written as usize > CAPTURE_BUF_BYTES {
                return Err(EFBIG);
            }
            // Later chunks are of the capture the first one named.
            id = r.capture_id;
            if out.is_empty() {
                out.reserve(r.size as usize, GFP_KERNEL)?;
            }
            for w in 0..(r.written as usize).div_ceil(4) {
                // SAFETY: `w < CAPTURE_BUF_BYTES / 4`, the buffer's length in
                // words; the device wrote the words before replying, and a
                // volatile read is how the driver reads device-written memory.
                let v = unsafe { buf.as_ptr().cast::<u32>().add(w).read_volatile() };
                let bytes = u32::from_le(v).to_le_bytes();
                let take = (r.written as usize - 4 * w).min(4);
                out.extend_from_slice(bytes.get(..take).unwrap_or(&[]), GFP_KERNEL)?;
            }
            if r.written == 0 || out.len() >= r.size as usize {
                return Ok((r, out));
            }
        }
    }

    /// Reads the capture, writes the dump, publishes it.
    fn publish(&self, p: PendingDump) {
        let s = &p.snap;
        let start = Instant::<Monotonic>::now();
        // The device's capture: the one taken for a hang, else the newest
        // of the context, which must be of this failure's kind and engine.
        let (dev, capture_id) = match self.read_capture(p.capture.unwrap_or(0), s.hw) {
            Ok((r, bytes))
                if p.capture.is_some()
                    || (r.reason == s.why.device_reason() && r.engine as usize == s.engine) =>
            {
                (bytes, r.capture_id)
            }
            Ok(_) => (KVVec::new(), 0),
            Err(_) => (KVVec::new(), 0),
        };
        let read_ms = elapsed_ns(&start) / 1_000_000;
        let status = if capture_id == 0 {
            if p.capture_status == "ok" {
                "none"
            } else {
                p.capture_status
            }
        } else {
            "ok"
        };
        let vm = p.client.as_ref().and_then(|c| {
            let vm = c.vm.lock();
            let mut maps = KVec::new();
            for m in vm.mappings() {
                maps.push(
                    MapLine {
                        va: m.va,
                        size: m.size,
                        handle: m.handle,
                        bo_offset: m.bo_offset,
                        perms: m.perms,
                        lazy: m.lazy,
                    },
                    GFP_KERNEL,
                )
                .ok()?;
            }
            Some(VmLines {
                client: c.id,
                root: vm.root_addr(),
                maps,
            })
        });
        let seq = {
            let mut g = self.state.lock();
            g.dumps_seq += 1;
            g.dumps_seq
        };
        let capture_bytes = dev.len();
        let devcap = DeviceCapture {
            id: capture_id,
            status,
            capture_ms: p.capture_ms,
            read_ms,
            bytes: dev,
        };
        let mut text = DumpText {
            bytes: KVVec::new(),
        };
        let written = write_coredump(
            &mut text,
            seq,
            s,
            self.pdev().as_ref().name().to_bytes(),
            vm.as_ref(),
            &devcap,
        );
        let build_ms = elapsed_ns(&start) / 1_000_000;
        let total = text.bytes.len();
        let outcome = if written.is_err() {
            "failed-out-of-memory"
        } else if self.dump_slot.as_ref().is_some_and(|slot| {
            ffi::publish_coredump(self.pdev().as_ref(), text.bytes, slot.clone()).is_ok()
        }) {
            "published"
        } else {
            "failed"
        };
        dev_info_ratelimited!(
            self.pdev(),
            "devcoredump {}: {} of context {} (slot {}) engine {}: {} bytes (device capture {} of {} bytes, read in {} ms): {}\n",
            seq,
            s.why.name(),
            s.handle,
            s.hw,
            s.engine,
            total,
            capture_id,
            capture_bytes,
            read_ms,
            outcome
        );
        if outcome != "published" {
            dev_warn_ratelimited!(self.pdev(), "devcoredump {} not published\n", seq);
        }
        let mut g = self.state.lock();
        push_log(
            &mut g.dumps_log,
            DumpLog {
                seq,
                why: s.why.name(),
                hw: s.hw,
                handle: s.handle,
                engine: s.engine,
                capture: capture_id,
                capture_bytes,
                total_bytes: total,
                capture_ms: p.capture_ms,
                read_ms,
                build_ms,
                outcome,
            },
        );
    }
}

fn skipped(seq: u64, why: Why, hw: u32, handle: u32, engine: usize) -> DumpLog {
    DumpLog {
        seq,
        why: why.name(),
        hw,
        handle,
        engine,
        capture: 0,
        capture_bytes: 0,
        total_bytes: 0,
        capture_ms: 0,
        read_ms: 0,
        build_ms: 0,
        outcome: "not-published-previous-unread",
    }
}
