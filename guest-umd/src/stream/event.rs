//! Events (markers in a stream: query, synchronize, device timestamps,
//! cross-stream waits, sync_file export and import) and a stream's waits
//! for and signals of sync objects ([`Timeline`] points, imported events).

use std::fmt;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use vgpu_hwif::packet::{self, Packet};

use super::{Notify, Stream, StreamShared};
use crate::context::{Context, CtxInner, PendingWork};
use crate::error::{Error, Result};
use crate::fence::{wait_all, SyncPoint};
use crate::memory::Block;
use crate::sync::{self as syncobj, Timeline};
use crate::uapi;

impl Stream {
    /// Records `ev` at the current end of the stream.
    pub fn record(&self, ev: &Event) -> Result<()> {
        let call = "Event::record";
        if ev.imported.is_some() {
            return Err(Error::Invalid {
                call,
                what: "an imported event cannot be recorded".into(),
            });
        }
        if !Arc::ptr_eq(&ev.ctx, &self.s.ctx) {
            return Err(Error::Invalid {
                call,
                what: "event belongs to another context".into(),
            });
        }
        let mut r = ev.rec.lock().unwrap();
        let slot = ev.slot.as_ref().expect("live event");
        let value = r.as_ref().map_or(1, |x| x.value + 1);
        let notify: Notify = Arc::new(Mutex::new(None));
        let packets = [
            Packet::Timestamp { va: slot.va() + 8 },
            Packet::SemSignal {
                va: slot.va(),
                value,
                op: packet::SEM_SIGNAL_WRITE,
            },
        ];
        self.s
            .push(call, None, &packets, vec![], Some(notify.clone()))?;
        *r = Some(Recorded {
            stream: self.s.clone(),
            value,
            sp: notify,
        });
        Ok(())
    }

    /// Makes later work of this stream wait until `ev` completed (a
    /// semaphore wait on the device for an event recorded in this context;
    /// for an imported event, a sync-object wait in the KMD; the CPU does
    /// not block).
    pub fn wait_event(&self, ev: &Event) -> Result<()> {
        let call = "Stream::wait_event";
        if let Some(h) = ev.imported {
            return self.wait_sync(call, h, 0, &ev.ctx);
        }
        let (va, value) = ev.submitted(call)?;
        let p = Packet::SemWait {
            va,
            value,
            op: packet::SEM_WAIT_GEQ,
        };
        self.s.push(call, None, &[p], vec![], None)
    }

    /// Signals `point` of `tl` when the work queued on this stream so far
    /// completed (with its error if it failed). Submits the stream's work.
    pub fn signal(&self, tl: &Timeline, point: u64) -> Result<()> {
        let call = "Stream::signal";
        self.same_ctx(call, &tl.ctx)?;
        // A batch to carry the signal (a NOP when nothing is pending).
        self.s
            .push(call, None, &[Packet::Nop { words: 1 }], vec![], None)?;
        let mut st = self.s.st.lock().unwrap();
        if let Some(b) = st.batch.as_mut() {
            b.out_syncs.push(uapi::DrmVgpuSync {
                handle: tl.handle,
                flags: 0,
                point,
            });
        }
        self.s.flush_locked(&mut st, call)
    }

    /// Makes the stream's later work wait until `point` of `tl` signalled:
    /// the KMD holds the next batch (the CPU does not block, except until
    /// the point is submitted, if it is not yet). Submits the work queued
    /// before it.
    pub fn wait(&self, tl: &Timeline, point: u64) -> Result<()> {
        self.wait_sync("Stream::wait", tl.handle, point, &tl.ctx)
    }

    fn same_ctx(&self, call: &'static str, ctx: &Arc<CtxInner>) -> Result<()> {
        if !Arc::ptr_eq(ctx, &self.s.ctx) {
            return Err(Error::Invalid {
                call,
                what: "the sync object belongs to another context".into(),
            });
        }
        Ok(())
    }

    fn wait_sync(
        &self,
        call: &'static str,
        handle: u32,
        point: u64,
        ctx: &Arc<CtxInner>,
    ) -> Result<()> {
        self.same_ctx(call, ctx)?;
        self.s.ctx.check(call)?;
        let mut st = self.s.st.lock().unwrap();
        self.s.flush_locked(&mut st, call)?;
        st.next_in_syncs.push(uapi::DrmVgpuSync {
            handle,
            flags: 0,
            point,
        });
        Ok(())
    }
}

struct Recorded {
    stream: Arc<StreamShared>,
    value: u64,
    sp: Notify,
}

/// A marker in a stream: query, synchronize, elapsed time between two
/// events from the device's timestamps, and cross-stream waits. Exported
/// as a sync_file fd ([`Event::export_fd`]) it orders another process's (or
/// another driver's) work after it; an event imported from a sync_file
/// ([`Event::import_fd`]) is a fence streams and the host wait for.
pub struct Event {
    ctx: Arc<CtxInner>,
    slot: Option<Block>,
    rec: Mutex<Option<Recorded>>,
    /// An imported event: a binary syncobj holding the imported fence.
    imported: Option<u32>,
}

impl fmt::Debug for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Event")
            .field("va", &self.slot.as_ref().map(Block::va))
            .finish()
    }
}

impl Event {
    /// A new, unrecorded event.
    pub fn new(ctx: &Context) -> Result<Event> {
        let call = "Event::new";
        ctx.inner.check(call)?;
        let slot = ctx
            .inner
            .pool
            .lock()
            .unwrap()
            .alloc(16)
            .map_err(|source| Error::Mem { call, source })?;
        slot.bo.write(slot.offset, &[0u8; 16]);
        Ok(Event {
            ctx: ctx.inner.clone(),
            slot: Some(slot),
            rec: Mutex::new(None),
            imported: None,
        })
    }

    /// An event that completes when the sync_file `fd` signals (another
    /// process's event, another driver's fence); the fd stays the
    /// caller's. It cannot be recorded; streams wait on it
    /// ([`Stream::wait_event`]) in the KMD.
    pub fn import_fd(ctx: &Context, fd: BorrowedFd<'_>) -> Result<Event> {
        let call = "Event::import_fd";
        ctx.inner.check(call)?;
        let kmd = &ctx.inner.kmd;
        let fail = |source| Error::Kmd {
            call,
            ctx: 0,
            source,
        };
        let h = kmd.syncobj_create(0).map_err(fail)?;
        if let Err(e) = kmd.syncobj_fd_to_handle(
            fd.as_raw_fd(),
            h,
            uapi::SYNCOBJ_FD_TO_HANDLE_IMPORT_SYNC_FILE,
        ) {
            let _ = kmd.syncobj_destroy(h);
            return Err(fail(e));
        }
        Ok(Event {
            ctx: ctx.inner.clone(),
            slot: None,
            rec: Mutex::new(None),
            imported: Some(h),
        })
    }

    /// The recorded work's completion as a sync_file fd (close-on-exec):
    /// it signals when the work before the record completed, with an error
    /// status if it failed. Submits the batch holding the record.
    pub fn export_fd(&self) -> Result<OwnedFd> {
        let call = "Event::export_fd";
        let fail = |source| Error::Kmd {
            call,
            ctx: 0,
            source,
        };
        if let Some(h) = self.imported {
            return syncobj::export_sync_file(&self.ctx.kmd, h, 0).map_err(fail);
        }
        self.submitted(call)?;
        let sp = self.sync_point().expect("submitted");
        if !sp.exportable {
            return Err(Error::Invalid {
                call,
                what: "the event's batch went to a user-mode queue, which has no KMD fence".into(),
            });
        }
        self.ctx.kmd.fence_export(sp.kmd).map_err(fail)
    }

    /// An imported event: whether its fence signalled (blocking up to
    /// `deadline`), and with what status.
    fn imported_state(&self, call: &'static str, h: u32, deadline: i64) -> Result<bool> {
        match self
            .ctx
            .kmd
            .syncobj_wait(&[h], deadline, uapi::SYNCOBJ_WAIT_ALL)
        {
            Ok(_) => {}
            Err(e) if e.errno == libc::ETIME || e.errno == libc::ETIMEDOUT => return Ok(false),
            Err(source) => {
                return Err(Error::Kmd {
                    call,
                    ctx: 0,
                    source,
                })
            }
        }
        let fd = syncobj::export_sync_file(&self.ctx.kmd, h, 0).map_err(|source| Error::Kmd {
            call,
            ctx: 0,
            source,
        })?;
        match syncobj::sync_file_status(fd.as_raw_fd()) {
            s if s < 0 => Err(Error::Kmd {
                call,
                ctx: 0,
                source: crate::kmd::KmdError {
                    call: "SYNC_IOC_FILE_INFO",
                    errno: -s,
                },
            }),
            _ => Ok(true),
        }
    }

    /// Submits the batch holding the record, if needed; the semaphore word
    /// and the value it reaches.
    fn submitted(&self, call: &'static str) -> Result<(u64, u64)> {
        self.ctx.check(call)?;
        if self.imported.is_some() {
            return Err(Error::Invalid {
                call,
                what: "an imported event has no record".into(),
            });
        }
        let r = self.rec.lock().unwrap();
        let Some(rec) = r.as_ref() else {
            return Err(Error::Invalid {
                call,
                what: "the event was never recorded".into(),
            });
        };
        if rec.sp.lock().unwrap().is_none() {
            rec.stream.flush_all(&self.ctx, call)?;
        }
        Ok((self.slot.as_ref().expect("live event").va(), rec.value))
    }

    fn sync_point(&self) -> Option<SyncPoint> {
        self.rec
            .lock()
            .unwrap()
            .as_ref()
            .and_then(|r| r.sp.lock().unwrap().clone())
    }

    /// Whether the work before the record completed (never blocks).
    pub fn query(&self) -> Result<bool> {
        let call = "Event::query";
        if let Some(h) = self.imported {
            return self.imported_state(call, h, 0);
        }
        let (_, value) = self.submitted(call)?;
        let slot = self.slot.as_ref().expect("live event");
        if slot.bo.read_u64(slot.offset) >= value {
            return Ok(true);
        }
        let sp = self.sync_point().expect("submitted");
        match self.ctx.kmd.wait(&[sp.kmd], true, 0) {
            Ok(_) => Ok(true),
            Err(e) if e.errno == libc::ETIME || e.errno == libc::ETIMEDOUT => Ok(false),
            Err(e) => Err(self.ctx.fail(call, sp.kmd.ctx_id, e)),
        }
    }

    /// Waits until the work before the record completed.
    pub fn synchronize(&self) -> Result<()> {
        let call = "Event::synchronize";
        if let Some(h) = self.imported {
            return self.imported_state(call, h, i64::MAX).map(|_| ());
        }
        self.submitted(call)?;
        let sp = self.sync_point().expect("submitted");
        wait_all(
            &self.ctx.kmd,
            &self.ctx.cfg,
            std::slice::from_ref(&sp),
            None,
        )
        .map_err(|e| self.ctx.fail(call, sp.kmd.ctx_id, e))?;
        Ok(())
    }

    /// The device time at which the event completed (ns since device start).
    pub fn timestamp_ns(&self) -> Result<u64> {
        let call = "Event::timestamp";
        if !self.query()? {
            return Err(Error::Invalid {
                call,
                what: "the event has not completed".into(),
            });
        }
        let slot = self.slot.as_ref().expect("live event");
        Ok(slot.bo.read_u64(slot.offset + 8))
    }

    /// Device time from `start` to `self`, both completed.
    pub fn elapsed_since(&self, start: &Event) -> Result<Duration> {
        let a = start.timestamp_ns()?;
        let b = self.timestamp_ns()?;
        Ok(Duration::from_nanos(b.saturating_sub(a)))
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        if let Some(h) = self.imported {
            let _ = self.ctx.kmd.syncobj_destroy(h);
        }
        let Some(slot) = self.slot.take() else { return };
        let rec = self.rec.lock().unwrap().take();
        let after = match rec {
            None => vec![],
            Some(r) => {
                if r.sp.lock().unwrap().is_none() {
                    let _ = r.stream.flush_all(&self.ctx, "Event::drop");
                }
                let sp = r.sp.lock().unwrap().clone();
                match sp {
                    Some(sp) => vec![sp],
                    None => {
                        // The record never reached the device.
                        self.ctx.retired.lock().unwrap().push(slot);
                        return;
                    }
                }
            }
        };
        self.ctx.pool.lock().unwrap().free(slot, after);
    }
}
