// SPDX-License-Identifier: GPL-2.0

//! KMD-owned rings: their memory, the job list, ring space, and the packets
//! the driver writes.
//!
//! Each device context slot has a coherent DMA block allocated at probe
//! ([`SLOT_BYTES`]: a status page, then one [`RING_SIZE`] ring per engine)
//! that is mapped into the owning file's address space in the KMD range
//! while a context uses the slot: rings read+execute, the status page
//! read+write (the device writes the [`RingStatus`] blocks and the fence
//! values there). [`SlotMemory`] owns those blocks.
//!
//! [`RingSw`] is the driver's side of one ring: the write pointer, the
//! seqnos submitted and completed, the jobs not yet complete (kept to write
//! them again after a reset), the seqno ranges discarded by a failure, and
//! the fences exported as sync_files. Its methods are the ring's state
//! transitions; they do no I/O.
//!
//! A job is `SEM_WAIT` per input fence, `INDIRECT` per command buffer, and a
//! `FENCE` writing the job's seqno to the ring's fence slot
//! ([`build_job`]); packets are encoded by the hardware interface's own
//! encoder ([`Packet::encode`]).

use crate::{
    ffi::{
        new_fence_context,
        ExportedFence, //
    },
    packet::{
        decode_header,
        Packet,
        FENCE_NO_EVENT,
        SEM_WAIT_GEQ, //
    },
    proto::{
        engine,
        RingStatus, //
    },
};
use kernel::{
    bindings,
    device::{
        Bound,
        Device, //
    },
    dma::Coherent,
    prelude::*,
    revocable::Revocable,
    time::{
        Instant,
        Monotonic, //
    },
};

/// Bytes of one ring.
pub(crate) const RING_SIZE: u32 = 16 << 10;
/// Engines a context can select.
pub(crate) const ENGINES: usize = engine::COUNT as usize;
/// Bytes of a device slot's KMD memory: status page + one ring per engine.
pub(crate) const SLOT_BYTES: usize = 4096 + ENGINES * RING_SIZE as usize;
/// KMD VA stride per device slot inside the KMD range.
pub(crate) const SLOT_VA_STRIDE: u64 = 64 << 10;
/// Offset of the fence values in the status page (engine `e` at `+ 8 e`).
pub(crate) const FENCE_SLOT_OFFSET: usize = 128;
/// Bytes of a ring status block; engine `e`'s is at `64 e`.
pub(crate) const STATUS_BLOCK: usize = 64;
/// Failed seqno ranges remembered per ring.
const FAILED_RANGES: usize = 16;
/// Longest packet the driver writes (`FENCE`, `SEM_WAIT`: 6 words).
const MAX_DRIVER_PACKET: usize = 6;

const _: () = assert!(SLOT_BYTES as u64 <= SLOT_VA_STRIDE);
const _: () = assert!(FENCE_SLOT_OFFSET >= ENGINES * STATUS_BLOCK);

/// Where engine `e`'s fence value is, in a slot mapped at `kmd_va`.
pub(crate) const fn fence_va(kmd_va: u64, e: usize) -> u64 {
    kmd_va + (FENCE_SLOT_OFFSET + 8 * e) as u64
}

/// Where engine `e`'s ring is, in a slot mapped at `kmd_va`.
pub(crate) const fn ring_va(kmd_va: u64, e: usize) -> u64 {
    kmd_va + 4096 + (e as u64) * RING_SIZE as u64
}

/// Where engine `e`'s status block is, in a slot mapped at `kmd_va`.
pub(crate) const fn status_va(kmd_va: u64, e: usize) -> u64 {
    kmd_va + (e * STATUS_BLOCK) as u64
}

/// KMD memory of every device slot, allocated at probe and freed at unbind
/// ([`SlotMemory::release`]); afterwards reads return 0 and writes are
/// dropped.
pub(crate) struct SlotMemory {
    slots: Pin<KBox<Revocable<Slots>>>,
}

/// One coherent allocation per slot.
type Slots = KVec<Coherent<[u32]>>;

impl SlotMemory {
    /// Allocates `n` slots.
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn new(dev: &Device<Bound>, n: u32) -> Result<SlotMemory> {
        let mut slots = KVec::new();
        for _ in 0..n {
            slots.push(
                Coherent::<u32>::zeroed_slice(dev, SLOT_BYTES / 4, GFP_KERNEL)?,
                GFP_KERNEL,
            )?;
        }
        Ok(SlotMemory {
            slots: KBox::pin_init(Revocable::new(Ok::<_, Error>(slots)), GFP_KERNEL)?,
        })
    }

    /// Frees the slots' memory (at unbind, once the device is quiesced: it
    /// reads no ring any more). Waits for accesses in flight (an RCU grace
    /// period).
    pub(crate) fn release(&self) {
        self.slots.revoke();
    }

    /// Runs `f` on slot `hw`'s memory; `None` once released or for a slot
    /// that does not exist. `f` runs in an RCU read-side section: it must
    /// not sleep.
    fn with_slot<R>(&self, hw: u32, f: impl FnOnce(&Coherent<[u32]>) -> R) -> Option<R> {
        let i = usize::try_from(hw).ok()?;
        self.slots.try_access_with(|s| s.get(i).map(f)).flatten()
    }

    /// Word `word` of slot `hw` (0 outside the slot).
    pub(crate) fn read_u32(&self, hw: u32, word: usize) -> u32 {
        self.with_slot(hw, |m| {
            if word >= m.len() {
                return 0;
            }
            // SAFETY: `word < len` is checked, so the pointer is inside the
            // allocation, which the access keeps alive; the device may write
            // the word concurrently: a volatile read is the kernel's
            // READ_ONCE.
            let v = unsafe { m.as_ptr().cast::<u32>().add(word).read_volatile() };
            u32::from_le(v)
        })
        .unwrap_or(0)
    }

    fn write_u32(&self, hw: u32, word: usize, v: u32) {
        self.with_slot(hw, |m| {
            if word < m.len() {
                // SAFETY: in bounds (checked) and alive (the access);
                // WRITE_ONCE semantics for memory the device reads.
                unsafe {
                    m.as_mut_ptr()
                        .cast::<u32>()
                        .add(word)
                        .write_volatile(v.to_le())
                }
            }
        });
    }

    /// Writes an 8-byte aligned u64 in one store.
    fn write_u64(&self, hw: u32, byte: usize, v: u64) {
        self.with_slot(hw, |m| {
            if byte % 8 == 0 && byte / 4 + 1 < m.len() {
                // SAFETY:
                // - in bounds (checked), alive (the access) and 8-byte
                //   aligned (the allocation is page aligned and
                //   `byte % 8 == 0`);
                // - one volatile store, so the device never reads a torn value.
                unsafe {
                    m.as_mut_ptr()
                        .cast::<u8>()
                        .add(byte)
                        .cast::<u64>()
                        .write_volatile(v.to_le())
                }
            }
        });
    }

    fn read_u64(&self, hw: u32, byte: usize) -> u64 {
        let lo = u64::from(self.read_u32(hw, byte / 4));
        let hi = u64::from(self.read_u32(hw, byte / 4 + 1));
        lo | hi << 32
    }

    /// Clears slot `hw` (a new context).
    pub(crate) fn zero(&self, hw: u32) {
        for w in 0..SLOT_BYTES / 4 {
            self.write_u32(hw, w, 0);
        }
    }

    /// Clears engine `e`'s ring status block of slot `hw` (a re-created
    /// ring starts at 0).
    pub(crate) fn zero_status(&self, hw: u32, e: usize) {
        for w in 0..STATUS_BLOCK / 4 {
            self.write_u32(hw, (e * STATUS_BLOCK) / 4 + w, 0);
        }
    }

    /// The slot whose memory holds guest-physical address `pa`, if any.
    pub(crate) fn slot_at(&self, pa: u64) -> Option<u32> {
        self.slots
            .try_access_with(|s| {
                s.iter().position(|m| {
                    pa.checked_sub(m.dma_handle())
                        .is_some_and(|off| off < SLOT_BYTES as u64)
                })
            })
            .flatten()
            .and_then(|i| u32::try_from(i).ok())
    }

    /// DMA (guest-physical) address of slot `hw` (0 once released).
    pub(crate) fn addr(&self, hw: u32) -> u64 {
        self.with_slot(hw, |m| m.dma_handle()).unwrap_or(0)
    }

    /// The ring status block of engine `e`.
    pub(crate) fn status(&self, hw: u32, e: usize) -> RingStatus {
        let b = e * STATUS_BLOCK;
        RingStatus {
            rptr: self.read_u32(hw, b / 4),
            state: self.read_u32(hw, b / 4 + 1),
            last_fence: self.read_u64(hw, b + 8),
            packets: self.read_u64(hw, b + 16),
            error: self.read_u32(hw, b / 4 + 6),
            error_rptr: self.read_u32(hw, b / 4 + 7),
            wptr: self.read_u32(hw, b / 4 + 8),
            reserved0: 0,
            reserved: [0; 3],
        }
    }

    /// The fence value of engine `e` (what the device's `FENCE` wrote).
    pub(crate) fn fence_value(&self, hw: u32, e: usize) -> u64 {
        self.read_u64(hw, FENCE_SLOT_OFFSET + 8 * e)
    }

    /// Sets the fence value of engine `e` (jobs the driver discarded).
    pub(crate) fn set_fence_value(&self, hw: u32, e: usize, v: u64) {
        self.write_u64(hw, FENCE_SLOT_OFFSET + 8 * e, v);
    }

    /// Word `i` of engine `e`'s ring (modulo the ring size).
    pub(crate) fn ring_word(&self, hw: u32, e: usize, i: usize) -> u32 {
        let base = (4096 + e * RING_SIZE as usize) / 4;
        self.read_u32(hw, base + i % (RING_SIZE as usize / 4))
    }

    /// Copies packet words into ring `e` of slot `hw` at `wptr` (bytes ever
    /// written); returns the new write pointer.
    pub(crate) fn write_ring(&self, hw: u32, e: usize, wptr: u32, words: &[u32]) -> u32 {
        // LAB(1) BEGIN write-ring
        let base = (4096 + e * RING_SIZE as usize) / 4;
        let mut w = wptr;
        for &x in words {
            let off = (w % RING_SIZE) as usize / 4;
            self.write_u32(hw, base + off, x);
            w = w.wrapping_add(4);
        }
        w
        // LAB(1) END write-ring
    }

    /// Whether `bytes` more fit into ring `e` of slot `hw` written up to
    /// `wptr`, given the device's read pointer.
    pub(crate) fn has_room(&self, hw: u32, e: usize, wptr: u32, bytes: u32) -> bool {
        // LAB(1) BEGIN ring-room
        let used = wptr.wrapping_sub(self.status(hw, e).rptr);
        used <= RING_SIZE && RING_SIZE - used >= bytes
        // LAB(1) END ring-room
    }
}

/// How long a written fence value may stay ahead of its `FENCE` event
/// before the interrupt counts as lost.
pub(crate) const MISSED_EVENT_NS: u64 = 200_000_000;

/// One submitted job.
pub(crate) struct Job {
    /// The job's fence seqno.
    pub(crate) seqno: u64,
    /// The packets, kept to write them again after a reset.
    pub(crate) words: KVec<u32>,
    /// The ring pointer its first packet was (last) written at.
    pub(crate) at: u32,
}

/// Where a packet is in the work an application submitted.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Located {
    /// The job's seqno.
    pub(crate) seqno: u64,
    /// Index of the command buffer holding it in the job's SUBMIT
    /// (`None`: a packet the KMD wrote in the ring).
    pub(crate) cmd_index: Option<u32>,
    /// Its offset in that command buffer.
    pub(crate) cmd_offset: u32,
}

impl Job {
    /// The job's packets with their byte offsets in the job, decoded.
    fn packets(&self, generation: u32) -> impl Iterator<Item = (u32, Packet)> + '_ {
        let mut i = 0usize;
        core::iter::from_fn(move || {
            let &h = self.words.get(i)?;
            let hdr = decode_header(generation, h).ok()?;
            let end = i.checked_add(hdr.words as usize)?;
            let p = Packet::decode(hdr, self.words.get(i..end)?).ok()?;
            let at = u32::try_from(4 * i).ok()?;
            i = end;
            Some((at, p))
        })
    }

    /// Where the ring-level packet at ring pointer `rptr` is, for a packet
    /// of `depth` at `cmd_offset` (the device's `ENGINE_ERROR` fields).
    fn locate_rptr(
        &self,
        generation: u32,
        rptr: u32,
        depth: u32,
        cmd_offset: u32,
    ) -> Option<Located> {
        let off = rptr.wrapping_sub(self.at);
        if u64::from(off) >= 4 * self.words.len() as u64 {
            return None;
        }
        let mut index = 0u32;
        for (at, p) in self.packets(generation) {
            let indirect = matches!(p, Packet::Indirect { .. });
            if at == off {
                return Some(Located {
                    seqno: self.seqno,
                    cmd_index: (indirect && depth > 0).then_some(index),
                    cmd_offset: if depth > 0 { cmd_offset } else { 0 },
                });
            }
            if indirect {
                index += 1;
            }
        }
        Some(Located {
            seqno: self.seqno,
            cmd_index: None,
            cmd_offset: 0,
        })
    }

    /// Where the packet at GPU VA `va` is, if in one of this job's command
    /// buffers.
    fn locate_va(&self, generation: u32, va: u64) -> Option<Located> {
        let mut index = 0u32;
        for (_, p) in self.packets(generation) {
            if let Packet::Indirect { va: b, size } = p {
                if va >= b && va - b < u64::from(size) {
                    return Some(Located {
                        seqno: self.seqno,
                        cmd_index: Some(index),
                        cmd_offset: u32::try_from(va - b).unwrap_or(u32::MAX),
                    });
                }
                index += 1;
            }
        }
        None
    }
}

/// A command buffer a job executes.
#[derive(Clone, Copy)]
pub(crate) struct CmdBuf {
    /// GPU VA.
    pub(crate) va: u64,
    /// Bytes.
    pub(crate) size: u32,
}

/// The packets of one job: `SEM_WAIT >= value` on each `(va, value)` of
/// `waits`, `INDIRECT` per command buffer, then `FENCE` writing `seqno` at
/// `fence_va` (with an event). With `backwards` (a bug planted for the
/// sanitizer), a `FENCE` of that smaller value without an event comes
/// first.
///
/// # Errors
///
/// `ENOMEM`; `EINVAL` if a packet cannot be encoded.
pub(crate) fn build_job(
    generation: u32,
    waits: &[(u64, u64)],
    cmds: &[CmdBuf],
    fence_va: u64,
    seqno: u64,
    backwards: Option<u64>,
) -> Result<KVec<u32>> {
    let mut words = KVec::with_capacity(
        (waits.len() + cmds.len() + 2) * MAX_DRIVER_PACKET,
        GFP_KERNEL,
    )?;
    let mut put = |p: Packet| -> Result {
        let mut buf = [0u32; MAX_DRIVER_PACKET];
        let n = p.encode(generation, &mut buf).ok_or(EINVAL)?;
        words.extend_from_slice(&buf[..n], GFP_KERNEL)?;
        Ok(())
    };
    for &(va, value) in waits {
        put(Packet::SemWait {
            va,
            value,
            op: SEM_WAIT_GEQ,
        })?;
    }
    for c in cmds {
        put(Packet::Indirect {
            va: c.va,
            size: c.size,
        })?;
    }
    if let Some(v) = backwards {
        put(Packet::Fence {
            va: fence_va,
            seqno: v,
            flags: FENCE_NO_EVENT,
        })?;
    }
    put(Packet::Fence {
        va: fence_va,
        seqno,
        flags: 0,
    })?;
    Ok(words)
}

/// Driver-side state of one ring.
pub(crate) struct RingSw {
    /// The context selected this engine.
    pub(crate) present: bool,
    /// Bytes ever written (the device's wptr).
    pub(crate) wptr: u32,
    /// The seqno the next job gets (seqnos count from 1).
    pub(crate) next_seqno: u64,
    /// Seqnos known complete (events or fence value).
    pub(crate) completed: u64,
    /// Highest seqno a `FENCE` event announced.
    pub(crate) evt_seqno: u64,
    /// A fence value a hang check found ahead of the events (0: none), and
    /// when; events still behind it [`MISSED_EVENT_NS`] later means the
    /// interrupt was lost.
    pub(crate) ahead_of_events: u64,
    pub(crate) ahead_since: Instant<Monotonic>,
    /// Seqnos up to which jobs were discarded or completed.
    pub(crate) done_upto: u64,
    /// Seqno ranges whose jobs failed.
    failed: KVec<(u64, u64)>,
    /// Jobs not known complete, oldest first.
    pub(crate) jobs: KVec<Job>,
    /// When the ring last completed a job (or was last idle).
    pub(crate) progress_at: Instant<Monotonic>,
    /// dma_fence context of the ring's exported fences (0: none yet).
    pub(crate) fence_ctx: u64,
    /// Fences exported (as sync_files, or to sync objects), unsignalled.
    pub(crate) exported: KVec<ExportedFence>,
}

impl RingSw {
    /// A ring (`present`: the context selected the engine).
    pub(crate) fn new(present: bool) -> RingSw {
        RingSw {
            present,
            wptr: 0,
            next_seqno: 1,
            completed: 0,
            evt_seqno: 0,
            ahead_of_events: 0,
            ahead_since: Instant::now(),
            done_upto: 0,
            failed: KVec::new(),
            jobs: KVec::new(),
            progress_at: Instant::now(),
            fence_ctx: 0,
            exported: KVec::new(),
        }
    }

    /// The fence of job `seqno` on this ring (its fence context made on
    /// first use), with room reserved for it among the exported fences.
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn new_fence(&mut self, seqno: u64) -> Result<ExportedFence> {
        if self.fence_ctx == 0 {
            self.fence_ctx = new_fence_context();
        }
        self.exported.reserve(1, GFP_KERNEL)?;
        ExportedFence::new(self.fence_ctx, seqno)
    }

    /// Drops completed jobs and signals their exported fences; notes
    /// progress.
    pub(crate) fn retire(&mut self, completed: u64) {
        // LAB(2) BEGIN retire
        if completed > self.completed {
            self.completed = completed;
            self.progress_at = Instant::now();
        }
        let c = self.completed;
        self.jobs.retain(|j| j.seqno > c);
        self.exported.retain(|f| {
            if f.seqno <= c {
                f.signal(0);
            }
            !f.is_signalled()
        });
        // LAB(2) END retire
    }

    /// Records the jobs `first..=last` as failed: `WAIT` reports them
    /// failed (`EIO`), their exported fences signal `errno`, and the ring's
    /// fence value counts past them ([`super::state::GpuState::release_failed`]).
    pub(crate) fn fail_range(&mut self, first: u64, last: u64, errno: i32) {
        if first == 0 || last < first {
            return;
        }
        if self.failed.len() >= FAILED_RANGES {
            let _ = self.failed.remove(0);
        }
        let _ = self.failed.push((first, last), GFP_KERNEL);
        self.done_upto = self.done_upto.max(last);
        self.exported.retain(|f| {
            if (first..=last).contains(&f.seqno) {
                f.signal(errno);
            }
            !f.is_signalled()
        });
    }

    /// Discards every pending job on the ring: their fences complete with
    /// an error. Returns how many there were.
    pub(crate) fn fail_pending(&mut self) -> usize {
        let n = self.jobs.len();
        if let (Some(first), Some(last)) = (self.jobs.first(), self.jobs.last()) {
            let r = (first.seqno, last.seqno);
            self.fail_range(r.0, r.1, -(bindings::EIO as i32));
        }
        self.jobs.clear();
        self.progress_at = Instant::now();
        n
    }

    /// `Some(Ok)` signalled, `Some(Err)` completed with an error, `None`
    /// pending.
    pub(crate) fn fence_state(&self, seqno: u64) -> Option<Result> {
        if self.failed.iter().any(|&(a, b)| (a..=b).contains(&seqno)) {
            return Some(Err(EIO));
        }
        (seqno <= self.completed || seqno <= self.done_upto).then_some(Ok(()))
    }

    /// Whether `seqno` names a job submitted on this ring.
    pub(crate) fn submitted(&self, seqno: u64) -> bool {
        self.present && seqno != 0 && seqno < self.next_seqno
    }

    /// Where the packet an `ENGINE_ERROR` names is in the submitted work:
    /// by its ring pointer, its depth and offset (`None`: no pending job
    /// holds it).
    pub(crate) fn locate(
        &self,
        generation: u32,
        rptr: u32,
        depth: u32,
        cmd_offset: u32,
    ) -> Option<Located> {
        self.jobs
            .iter()
            .find_map(|j| j.locate_rptr(generation, rptr, depth, cmd_offset))
    }

    /// Where the packet at GPU VA `va` (a `FAULT`'s packet) is: in a
    /// pending job's command buffer, or in the ring at `ring_va` (a KMD
    /// packet).
    pub(crate) fn locate_va(&self, generation: u32, ring_va: u64, va: u64) -> Option<Located> {
        if va >= ring_va && va - ring_va < u64::from(RING_SIZE) {
            let ptr = (va - ring_va) as u32;
            return self.jobs.iter().find_map(|j| {
                let off = ptr.wrapping_sub(j.at) % RING_SIZE;
                (u64::from(off) < 4 * j.words.len() as u64).then_some(Located {
                    seqno: j.seqno,
                    cmd_index: None,
                    cmd_offset: 0,
                })
            });
        }
        self.jobs.iter().find_map(|j| j.locate_va(generation, va))
    }
}
