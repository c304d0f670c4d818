//! User-mode queues (`VGPU_SUBMIT=user`): a stream submits with no system
//! call. Each engine of the stream gets a queue (`UQ_CREATE`): a ring BO
//! bound READ|EXEC and a doorbell block BO bound READ|WRITE, both mapped
//! into the process. A batch is written into the ring as `INDIRECT`s of its
//! command buffers (after a `SEM_WAIT` for the stream's other engine when
//! ordering needs one); storing the new write pointer into the doorbell
//! block publishes it. Only when the device said it stopped polling
//! (`sleeping`) does the process make a system call (`UQ_KICK`).
//!
//! Ring space comes back as the batches' fences complete: each batch's end
//! pointer is kept with its fence, and a batch that does not fit waits for
//! the oldest ones.

use std::collections::VecDeque;
use std::sync::atomic::{fence, Ordering};
use std::sync::{Arc, Mutex};

use vgpu_hwif::packet::Packet;

use crate::config::Config;
use crate::fence::{wait_all, SyncPoint};
use crate::kmd::{Kmd, KmdError};
use crate::memory::{Bo, MemError, VaAllocator};
use crate::uapi;

/// Bytes of a queue's ring.
pub const RING_BYTES: u64 = 64 << 10;
/// Bytes of the doorbell block's BO (one page; the block is its first 64).
const BELL_BYTES: u64 = 4096;
/// Byte offsets in the doorbell block.
const WPTR: u64 = 0;
const SLEEPING: u64 = 4;

/// Why a queue could not be made or used.
#[derive(Debug, thiserror::Error)]
pub enum UqError {
    /// Its memory.
    #[error(transparent)]
    Mem(#[from] MemError),
    /// A KMD call.
    #[error(transparent)]
    Kmd(#[from] KmdError),
    /// A batch larger than the whole ring.
    #[error("{0} bytes of packets do not fit a {RING_BYTES}-byte ring")]
    TooLarge(u64),
    /// A packet the generation cannot encode.
    #[error("packet {0:?} cannot be encoded")]
    Unencodable(Packet),
}

/// Batches a queue remembers for naming where an error happened.
const LOG_LEN: usize = 256;

/// One batch as a queue submitted it: its seqno and command buffers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct BatchRec {
    pub(crate) seqno: u64,
    /// (GPU VA, bytes) of each command buffer, in `INDIRECT` order.
    pub(crate) cmds: Vec<(u64, u64)>,
}

/// A queue's recent batches, oldest first, shared with the context that
/// explains errors ([`crate::context`]).
pub(crate) type BatchLog = Arc<Mutex<VecDeque<BatchRec>>>;

/// Where `va` lies among the batches of `log`: the oldest batch holding it
/// (the first to run; later ones stop with it), with the command buffer's
/// index and the offset in it.
pub(crate) fn locate(log: &VecDeque<BatchRec>, va: u64) -> Option<(u64, u32, u32)> {
    log.iter().find_map(|b| {
        b.cmds.iter().enumerate().find_map(|(i, &(cva, size))| {
            (va >= cva && va - cva < size).then(|| (b.seqno, i as u32, (va - cva) as u32))
        })
    })
}

/// Counters of a queue.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UqStats {
    /// Batches published through the doorbell block.
    pub published: u64,
    /// `UQ_KICK` calls (the device had stopped polling).
    pub kicks: u64,
    /// Batches that waited for ring space.
    pub waited: u64,
}

/// One engine's user-mode queue.
pub(crate) struct UserQueue {
    kmd: Arc<Kmd>,
    /// The queue's context id.
    pub(crate) ctx_id: u32,
    generation: u32,
    ring: Bo,
    bell: Bo,
    /// Bytes ever written to the ring.
    wptr: u32,
    /// Start pointer of each batch not known complete, with its fence.
    pending: VecDeque<(u32, SyncPoint)>,
    /// Recent batches, for naming where an error happened.
    pub(crate) log: BatchLog,
    pub(crate) stats: UqStats,
}

impl UserQueue {
    /// A queue of `priority` on `engine`.
    pub(crate) fn new(
        kmd: &Arc<Kmd>,
        vas: &Arc<Mutex<VaAllocator>>,
        generation: u32,
        engine: u32,
        priority: u32,
    ) -> Result<UserQueue, UqError> {
        let ring = Bo::new(
            kmd,
            vas,
            RING_BYTES,
            uapi::VM_BIND_READ | uapi::VM_BIND_EXEC,
        )?;
        let bell = Bo::new(
            kmd,
            vas,
            BELL_BYTES,
            uapi::VM_BIND_READ | uapi::VM_BIND_WRITE,
        )?;
        bell.write(0, &[0u8; 64]);
        let ctx_id = kmd.uq_create(&uapi::DrmVgpuUqCreate {
            priority,
            engine,
            ring_va: ring.va(),
            doorbell_va: bell.va(),
            ring_size: RING_BYTES as u32,
            ..Default::default()
        })?;
        Ok(UserQueue {
            kmd: kmd.clone(),
            ctx_id,
            generation,
            ring,
            bell,
            wptr: 0,
            pending: VecDeque::new(),
            log: Arc::new(Mutex::new(VecDeque::new())),
            stats: UqStats::default(),
        })
    }

    /// The bytes of the ring not yet known free: from the oldest batch not
    /// known complete to the write pointer.
    fn used(&mut self) -> u32 {
        while let Some((_, sp)) = self.pending.front() {
            if sp.mem_signalled() == Some(true) {
                self.pending.pop_front();
            } else {
                break;
            }
        }
        // Batches before the front one all completed: their space is free.
        self.pending
            .front()
            .map_or(0, |(start, _)| self.wptr.wrapping_sub(*start))
    }

    /// Writes `packets` into the ring as one batch whose completion is
    /// `done` (its command buffers `cmds`, for the log), then publishes it:
    /// the doorbell block's `wptr`, and a kick if the device had stopped
    /// polling.
    pub(crate) fn submit(
        &mut self,
        cfg: &Config,
        packets: &[Packet],
        cmds: Vec<(u64, u64)>,
        done: SyncPoint,
    ) -> Result<(), UqError> {
        let mut words = Vec::with_capacity(packets.len() * 16);
        for p in packets {
            let mut tmp = [0u32; 64];
            let n = p
                .encode(self.generation, &mut tmp)
                .ok_or(UqError::Unencodable(*p))?;
            words.extend_from_slice(&tmp[..n]);
        }
        let bytes = 4 * words.len() as u64;
        if bytes > RING_BYTES {
            return Err(UqError::TooLarge(bytes));
        }
        // Room: wait for the oldest batches until the new one fits.
        while u64::from(self.used()) + bytes > RING_BYTES {
            let Some((_, sp)) = self.pending.front().cloned() else {
                break;
            };
            self.stats.waited += 1;
            wait_all(&self.kmd, cfg, &[sp], None)?;
        }
        let start = self.wptr;
        let base = self.ring.ptr(0).cast::<u32>();
        let size_words = (RING_BYTES / 4) as u32;
        let mut at = (self.wptr / 4) % size_words;
        for w in words {
            // SAFETY: the ring's mapping is RING_BYTES bytes and `at` is a
            // word index below RING_BYTES / 4; only this queue writes the
            // ring, and the words written lie in space the device has
            // finished with (the room check above). The write is volatile:
            // the device reads the ring concurrently.
            unsafe { base.add(at as usize).write_volatile(w) };
            at = (at + 1) % size_words;
        }
        self.wptr = self.wptr.wrapping_add(bytes as u32);
        {
            let mut log = self.log.lock().unwrap();
            if log.len() >= LOG_LEN {
                log.pop_front();
            }
            log.push_back(BatchRec {
                seqno: done.kmd.seqno,
                cmds,
            });
        }
        self.pending.push_back((start, done));
        self.publish()
    }

    /// Stores the write pointer into the doorbell block and kicks the
    /// device if it sleeps (docs/hardware.md §6.6: store, full barrier,
    /// load).
    fn publish(&mut self) -> Result<(), UqError> {
        // The packets are visible before the pointer that publishes them.
        fence(Ordering::Release);
        let bell = self.bell.ptr(0);
        // SAFETY: the block's mapping is BELL_BYTES bytes, 4-byte aligned
        // at offsets WPTR and SLEEPING; the device reads `wptr` and writes
        // `sleeping` concurrently, hence the volatile accesses.
        unsafe {
            bell.add(WPTR as usize)
                .cast::<u32>()
                .write_volatile(self.wptr)
        };
        fence(Ordering::SeqCst);
        // SAFETY: as above.
        let sleeping = unsafe { bell.add(SLEEPING as usize).cast::<u32>().read_volatile() };
        self.stats.published += 1;
        if sleeping != 0 {
            self.stats.kicks += 1;
            self.kmd.uq_kick(self.ctx_id)?;
        }
        Ok(())
    }
}

impl Drop for UserQueue {
    fn drop(&mut self) {
        // The context goes first: the device stops reading the ring and the
        // block before their BOs are unbound.
        let _ = self.kmd.ctx_destroy(self.ctx_id);
    }
}
