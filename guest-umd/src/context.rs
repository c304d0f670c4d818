//! Contexts: one open render node (its own GPU address space), the memory
//! pools and command-buffer pool, the streams, and the sticky lost state.

use std::fmt;
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Mutex, Weak};

use crate::cmdbuf::{CmdPool, CmdPoolStats, DumpRecord, DUMP_MAGIC};
use crate::config::Config;
use crate::device::{Device, Identity};
use crate::error::{Error, Result};
pub use crate::error::{ErrorPlace, LostReason};
use crate::fence::SyncPoint;
use crate::kmd::{Kmd, KmdError};
use crate::memory::{Block, Bo, MemError, Pool, PoolStats, VaAllocator};
use crate::uapi;

/// A sanitizer report as one line: its id, number, packet, and the check's
/// meaning and hint (hwif's words).
pub fn sanitizer_line(generation: u32, r: &uapi::DrmVgpuSanRecord) -> String {
    use vgpu_hwif::sanitize::Check;
    let mut s = match Check::from_u32(r.check) {
        Some(c) => format!("{} #{}", c.id(), r.seq),
        None => format!("SAN-? ({}) #{}", r.check, r.seq),
    };
    if r.packet_va != 0 {
        s.push_str(&format!(" packet {:#x}", r.packet_va));
        if r.flags & uapi::san::FLAG_PACKET != 0 {
            let n = (r.packet_len as usize).min(uapi::san::PACKET_WORDS);
            s.push_str(&format!(
                " [{}]",
                vgpu_hwif::describe::PacketWords {
                    generation,
                    words: &r.packet[..n]
                }
            ));
        }
    }
    if r.va != 0 {
        s.push_str(&format!(" va {:#x}", r.va));
    }
    if let Some(c) = Check::from_u32(r.check) {
        s.push_str(&format!(": {}", c.meaning()));
    }
    if r.flags & uapi::san::FLAG_OBJECT != 0 {
        let ago_us = r.time_ns.saturating_sub(r.released_ns) / 1000;
        s.push_str(&match r.flags & uapi::san::FLAG_MOVED != 0 {
            true => format!(
                "; the page was bo {}'s (gen {}) until it moved {ago_us} us earlier (now gen {} at {:#x})",
                r.object, r.object_gen, r.object_gen_now, r.object_pa_now
            ),
            false => format!(
                "; the page was bo {}'s (gen {}) until it was given back {ago_us} us earlier (a use after free)",
                r.object, r.object_gen
            ),
        });
    }
    if let Some(c) = Check::from_u32(r.check) {
        s.push_str(&format!("; hint: {}", c.hint()));
    }
    s
}

/// Work a context's users queue before submitting it (a stream's pending
/// batch): what freeing an object must flush first. The streams implement
/// it, so the context holds them without depending on their module.
pub(crate) trait PendingWork: Send + Sync {
    /// Submits what is pending and returns the latest fences of the work
    /// submitted so far.
    fn flush_all(&self, ctx: &CtxInner, call: &'static str) -> Result<Vec<SyncPoint>>;
}

pub(crate) struct CtxInner {
    pub(crate) kmd: Arc<Kmd>,
    pub(crate) cfg: Config,
    pub(crate) identity: Identity,
    pub(crate) pool: Mutex<Pool<SyncPoint>>,
    pub(crate) code_pool: Mutex<Pool<SyncPoint>>,
    pub(crate) cmds: Mutex<CmdPool>,
    pub(crate) lost: Mutex<Option<(u32, LostReason)>>,
    pub(crate) streams: Mutex<Vec<Weak<dyn PendingWork>>>,
    pub(crate) dump: Option<Mutex<File>>,
    /// Timeline slots of destroyed streams: never reused, so a stale fence
    /// can never read another user's value.
    pub(crate) retired: Mutex<Vec<Block>>,
    /// The address space's VA allocator (shared with the pools).
    pub(crate) vas: Arc<Mutex<VaAllocator>>,
    /// The batch logs of the streams' user-mode queues (`VGPU_SUBMIT=user`):
    /// the KMD does not see their batches, so errors are placed from these.
    pub(crate) uq_logs: Mutex<Vec<UqLog>>,
}

/// One user-mode queue's batch log, and the stream (`group`: the id of its
/// first queue) it belongs to.
pub(crate) struct UqLog {
    pub(crate) group: u32,
    pub(crate) ctx: u32,
    pub(crate) log: std::sync::Weak<Mutex<std::collections::VecDeque<crate::uq::BatchRec>>>,
}

impl CtxInner {
    /// Fails with the sticky state if the context is lost.
    pub(crate) fn check(&self, call: &'static str) -> Result<()> {
        match &*self.lost.lock().unwrap() {
            Some((ctx, reason)) => Err(Error::Lost {
                call,
                ctx: *ctx,
                reason: reason.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Turns a KMD error on `ctx` into the API error, recording a loss.
    pub(crate) fn fail(&self, call: &'static str, ctx: u32, e: KmdError) -> Error {
        let reason = match e.errno {
            libc::ENODEV => Some(LostReason::Removed),
            libc::EIO => Some(self.reason_of(ctx)),
            _ => None,
        };
        match reason {
            Some(reason) => {
                let mut l = self.lost.lock().unwrap();
                let (ctx, reason) = l.get_or_insert((ctx, reason)).clone();
                Error::Lost { call, ctx, reason }
            }
            None => Error::Kmd {
                call,
                ctx,
                source: e,
            },
        }
    }

    fn reason_of(&self, ctx: u32) -> LostReason {
        let ctx = self.failed_queue(ctx);
        let Ok(q) = self.kmd.ctx_query(ctx) else {
            // No context to ask (none yet, or gone): the device's state.
            return match self.kmd.query_stats(&mut []) {
                Ok(s) if s.lost != 0 => LostReason::DeviceLost,
                _ => LostReason::Wedged,
            };
        };
        if q.state & uapi::CTX_STATE_DEVICE_LOST != 0 {
            LostReason::DeviceLost
        } else if q.state & uapi::CTX_STATE_BANNED != 0 {
            LostReason::Banned
        } else if q.state & uapi::CTX_STATE_FAULTED != 0 {
            LostReason::PageFault {
                va: q.fault_va,
                access: q.fault_access,
                reason: q.fault_reason,
                at: self.place_of(ctx, &q),
            }
        } else if q.reset_status == uapi::CTX_RESET_GUILTY && q.hangs > 0 {
            LostReason::Hang { hangs: q.hangs }
        } else if q.reset_status == uapi::CTX_RESET_INNOCENT {
            LostReason::Innocent
        } else if q.state & uapi::CTX_STATE_ERRORED != 0 {
            LostReason::EngineError {
                code: q.engine_error,
                at: self.place_of(ctx, &q),
            }
        } else {
            LostReason::Wedged
        }
    }

    /// A stream on user-mode queues fails through whichever of its queues
    /// failed: `ctx`, unless it is a queue that did not and a queue of the
    /// same stream did.
    fn failed_queue(&self, ctx: u32) -> u32 {
        let bad = uapi::CTX_STATE_ERRORED | uapi::CTX_STATE_BANNED;
        let group = {
            let logs = self.uq_logs.lock().unwrap();
            match logs.iter().find(|l| l.ctx == ctx) {
                Some(l) => l.group,
                None => return ctx,
            }
        };
        if self.kmd.ctx_query(ctx).is_ok_and(|q| q.state & bad != 0) {
            return ctx;
        }
        let siblings: Vec<u32> = self
            .uq_logs
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.group == group && l.ctx != ctx)
            .map(|l| l.ctx)
            .collect();
        siblings
            .into_iter()
            .find(|&s| self.kmd.ctx_query(s).is_ok_and(|q| q.state & bad != 0))
            .unwrap_or(ctx)
    }

    /// Where the error `q` describes happened, with the packet read back
    /// from the command buffer (if the pool still has it and the header
    /// matches) and the sanitizer's latest report about `ctx`.
    fn place_of(&self, ctx: u32, q: &uapi::DrmVgpuCtxQuery) -> Option<Box<ErrorPlace>> {
        if q.error_packet_va == 0 {
            return None;
        }
        let generation = self.identity.generation;
        let words = self
            .cmds
            .lock()
            .unwrap()
            .read_at(q.error_packet_va, vgpu_hwif::sanitize::SAN_PACKET_WORDS)
            .filter(|w| w.first() == Some(&q.error_header) && q.error_header != 0);
        let packet = match words {
            Some(w) => vgpu_hwif::describe::PacketWords {
                generation,
                words: &w,
            }
            .to_string(),
            None if q.error_header != 0 => vgpu_hwif::describe::HeaderWord {
                generation,
                word: q.error_header,
            }
            .to_string(),
            None => "header not read".to_owned(),
        };
        let sanitizer = if q.san_reports > 0 {
            self.kmd
                .san_report(ctx, q.san_last_seq.saturating_sub(1))
                .ok()
                .flatten()
                .map(|r| sanitizer_line(generation, &r))
        } else {
            None
        };
        // A user-mode queue's batches are the UMD's own: it places the
        // packet in them (the KMD cannot).
        let (mut seqno, mut cmd_index, mut cmd_offset) = (
            q.error_seqno,
            (q.error_cmd_index != uapi::CMD_INDEX_NONE).then_some(q.error_cmd_index),
            q.error_cmd_offset,
        );
        if q.state & uapi::CTX_STATE_USER_QUEUE != 0 && seqno == 0 {
            let log = self
                .uq_logs
                .lock()
                .unwrap()
                .iter()
                .find(|l| l.ctx == ctx)
                .and_then(|l| l.log.upgrade());
            if let Some((s, i, off)) =
                log.and_then(|l| crate::uq::locate(&l.lock().unwrap(), q.error_packet_va))
            {
                (seqno, cmd_index, cmd_offset) = (s, Some(i), off);
            }
        }
        Some(Box::new(ErrorPlace {
            packet_va: q.error_packet_va,
            header: q.error_header,
            engine: q.error_engine,
            seqno,
            cmd_index,
            cmd_offset,
            depth: q.error_depth,
            packet,
            sanitizer,
        }))
    }

    /// Writes submitted buffers to the dump file, if any.
    pub(crate) fn dump(&self, ctx_id: u32, engine: u32, bufs: &[(u64, Vec<u32>)]) {
        let Some(f) = &self.dump else { return };
        let mut f = f.lock().unwrap();
        for (index, (va, words)) in bufs.iter().enumerate() {
            let r = DumpRecord {
                generation: self.identity.generation,
                ctx_id,
                engine,
                index: index as u32,
                va: *va,
                words: words.clone(),
            };
            let _ = r.write_to(&mut *f);
        }
        let _ = f.flush();
    }

    /// Submits every stream's pending batch and returns the latest fence of
    /// every stream (what a freed object must wait for).
    pub(crate) fn quiesce_fences(&self, call: &'static str) -> Result<Vec<SyncPoint>> {
        let streams: Vec<Arc<dyn PendingWork>> = {
            let mut v = self.streams.lock().unwrap();
            v.retain(|w| w.strong_count() > 0);
            v.iter().filter_map(Weak::upgrade).collect()
        };
        let mut out = Vec::new();
        for s in streams {
            out.extend(s.flush_all(self, call)?);
        }
        Ok(out)
    }
}

/// A GPU context: one open render node with its own GPU address space.
/// Cheap to clone; all clones are the same context. `Send + Sync`.
#[derive(Clone)]
pub struct Context {
    pub(crate) inner: Arc<CtxInner>,
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("generation", &self.inner.identity.generation)
            .finish()
    }
}

/// Where a buffer lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemKind {
    /// Only the GPU accesses it; the CPU reaches it through copies.
    DeviceLocal,
    /// Mapped for the CPU as well ([`Buffer::host`]).
    HostVisible,
}

/// Where a buffer's memory is, on a device with VRAM (device memory); on
/// one without, every placement that allows system memory is system memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Guest RAM, which the GPU reaches over the bus.
    System,
    /// VRAM only: the allocation fails when VRAM is full or absent.
    Vram,
    /// VRAM when there is room, system memory otherwise.
    VramPreferred,
}

impl Placement {
    /// The `VGPU_GEM_CREATE_*` flags of this placement for a buffer of
    /// `kind` (a host-visible VRAM buffer is in the CPU-visible part).
    pub fn gem_flags(self, kind: MemKind) -> u32 {
        let cpu = if kind == MemKind::HostVisible {
            uapi::GEM_CREATE_CPU_ACCESS
        } else {
            0
        };
        match self {
            Placement::System => 0,
            Placement::Vram => uapi::GEM_CREATE_VRAM | cpu,
            Placement::VramPreferred => uapi::GEM_CREATE_VRAM | uapi::GEM_CREATE_SYSTEM | cpu,
        }
    }
}

/// GPU memory. Dropping it (or [`Buffer::free`]) returns it to the pool,
/// which reuses it only after the work submitted so far completed.
pub struct Buffer {
    pub(crate) ctx: Arc<CtxInner>,
    pub(crate) block: Option<Block>,
    pub(crate) size: u64,
    pub(crate) kind: MemKind,
    /// A BO of its own that other processes may hold ([`Context::alloc_shared`],
    /// [`Context::import_buffer`]): never returned to the pool.
    pub(crate) shared: bool,
}

impl fmt::Debug for Buffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Buffer")
            .field("va", &self.va())
            .field("size", &self.size)
            .field("kind", &self.kind)
            .finish()
    }
}

impl Buffer {
    /// GPU virtual address (what kernels and copies use).
    pub fn va(&self) -> u64 {
        self.block.as_ref().map_or(0, Block::va)
    }

    /// Size in bytes as requested.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Where it lives.
    pub fn kind(&self) -> MemKind {
        self.kind
    }

    pub(crate) fn check_range(&self, offset: u64, len: u64) -> std::result::Result<(), MemError> {
        if offset.checked_add(len).is_none_or(|e| e > self.size) {
            return Err(MemError::OutOfRange {
                offset,
                len,
                size: self.size,
            });
        }
        Ok(())
    }

    /// CPU pointer to the first byte of a host-visible buffer.
    pub fn host_ptr(&self) -> Result<*mut u8> {
        if self.kind != MemKind::HostVisible {
            return Err(Error::Mem {
                call: "Buffer::host_ptr",
                source: MemError::NotHostVisible,
            });
        }
        let b = self.block.as_ref().expect("live buffer");
        Ok(b.bo.ptr(b.offset))
    }

    /// Writes `data` at `offset` through the CPU mapping (host-visible only;
    /// the caller orders it against GPU work with a synchronize).
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<()> {
        let call = "Buffer::write";
        self.host_ptr()?;
        self.check_range(offset, data.len() as u64)
            .map_err(|source| Error::Mem { call, source })?;
        let b = self.block.as_ref().expect("live buffer");
        b.bo.write(b.offset + offset, data);
        Ok(())
    }

    /// Reads into `out` from `offset` through the CPU mapping.
    pub fn read(&self, offset: u64, out: &mut [u8]) -> Result<()> {
        let call = "Buffer::read";
        self.host_ptr()?;
        self.check_range(offset, out.len() as u64)
            .map_err(|source| Error::Mem { call, source })?;
        let b = self.block.as_ref().expect("live buffer");
        b.bo.read(b.offset + offset, out);
        Ok(())
    }

    /// Frees the buffer now (the same as dropping it), reporting errors.
    pub fn free(mut self) -> Result<()> {
        self.release("Buffer::free")
    }

    /// The buffer as a dma-buf fd (close-on-exec) another process imports
    /// with [`Context::import_buffer`] (or another driver): only for
    /// buffers of [`Context::alloc_shared`] or imported ones, whose BO is
    /// theirs alone.
    pub fn export_fd(&self) -> Result<OwnedFd> {
        let call = "Buffer::export_fd";
        if !self.shared {
            return Err(Error::Invalid {
                call,
                what: "only buffers from Context::alloc_shared or import_buffer can be exported"
                    .into(),
            });
        }
        let b = self.block.as_ref().expect("live buffer");
        self.ctx
            .kmd
            .prime_handle_to_fd(b.bo.handle())
            .map_err(|source| Error::Kmd {
                call,
                ctx: 0,
                source,
            })
    }

    fn release(&mut self, call: &'static str) -> Result<()> {
        let Some(b) = self.block.take() else {
            return Ok(());
        };
        if self.shared {
            // Its own BO: unmapped once this context's work is done (other
            // processes keep their own mappings of it).
            let fences = self.ctx.quiesce_fences(call)?;
            let r = crate::fence::wait_all(&self.ctx.kmd, &self.ctx.cfg, &fences, None);
            match r {
                Ok(_) => drop(b),
                Err(_) => self.ctx.retired.lock().unwrap().push(b),
            }
            return Ok(());
        }
        let fences = match self.ctx.quiesce_fences(call) {
            Ok(f) => f,
            Err(e) => {
                // Lost: nothing will run any more; the block is reusable
                // only once the KMD retired the jobs, so it is not reused.
                self.ctx.retired.lock().unwrap().push(b);
                return Err(e);
            }
        };
        self.ctx.pool.lock().unwrap().free(b, fences);
        Ok(())
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        let _ = self.release("Buffer::drop");
    }
}

impl Context {
    /// A context on the first vgpu device, configured from the environment.
    pub fn new() -> Result<Context> {
        Context::on(&Device::open_first()?)
    }

    /// A context on `dev`'s render node (a new open file, hence a new GPU
    /// address space), configured from the environment.
    pub fn on(dev: &Device) -> Result<Context> {
        let cfg = Config::from_env()?;
        Context::with_config(dev, cfg)
    }

    /// A context with explicit tunables.
    pub fn with_config(dev: &Device, cfg: Config) -> Result<Context> {
        let identity = dev.identity()?;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(dev.path())
            .map_err(|source| Error::Open {
                path: dev.path().to_owned(),
                source,
            })?;
        let kmd = Arc::new(Kmd::new(file));
        let call = "Context::new";
        let p = |param| {
            kmd.get_param(param).map_err(|source| Error::Kmd {
                call,
                ctx: 0,
                source,
            })
        };
        let vas = Arc::new(Mutex::new(VaAllocator::new(
            p(uapi::param::VA_START)?,
            p(uapi::param::VA_END)?,
        )));
        let dump = match &cfg.dump {
            Some(path) => {
                let mut f = File::create(path).map_err(|source| Error::Open {
                    path: path.clone(),
                    source,
                })?;
                f.write_all(DUMP_MAGIC).map_err(|source| Error::Open {
                    path: path.clone(),
                    source,
                })?;
                Some(Mutex::new(f))
            }
            None => None,
        };
        let rw = uapi::VM_BIND_READ | uapi::VM_BIND_WRITE;
        let rx = uapi::VM_BIND_READ | uapi::VM_BIND_EXEC;
        Ok(Context {
            inner: Arc::new(CtxInner {
                pool: Mutex::new(Pool::new(kmd.clone(), vas.clone(), rw, cfg.pool_cache)),
                code_pool: Mutex::new(Pool::new(kmd.clone(), vas.clone(), rx, 0)),
                cmds: Mutex::new(CmdPool::new(kmd.clone(), vas.clone(), &cfg)),
                kmd,
                cfg,
                identity,
                lost: Mutex::new(None),
                streams: Mutex::new(Vec::new()),
                dump,
                retired: Mutex::new(Vec::new()),
                vas,
                uq_logs: Mutex::new(Vec::new()),
            }),
        })
    }

    /// The device's identity (IDENTIFY).
    pub fn identity(&self) -> &Identity {
        &self.inner.identity
    }

    /// The tunables in effect.
    pub fn config(&self) -> &Config {
        &self.inner.cfg
    }

    /// The sticky lost state: `None` while the context works.
    pub fn status(&self) -> Option<(u32, LostReason)> {
        self.inner.lost.lock().unwrap().clone()
    }

    /// Allocates `size` bytes of GPU memory.
    pub fn alloc(&self, size: u64, kind: MemKind) -> Result<Buffer> {
        let call = "Context::alloc";
        self.inner.check(call)?;
        let block = self
            .inner
            .pool
            .lock()
            .unwrap()
            .alloc(size)
            .map_err(|source| Error::Mem { call, source })?;
        Ok(Buffer {
            ctx: self.inner.clone(),
            block: Some(block),
            size,
            kind,
            shared: false,
        })
    }

    /// Allocates `size` bytes in a BO of their own, which can be exported
    /// to another process ([`Buffer::export_fd`]).
    pub fn alloc_shared(&self, size: u64, kind: MemKind) -> Result<Buffer> {
        let call = "Context::alloc_shared";
        self.inner.check(call)?;
        let bo = Bo::new(
            &self.inner.kmd,
            &self.inner.vas,
            size,
            uapi::VM_BIND_READ | uapi::VM_BIND_WRITE,
        )
        .map_err(|source| Error::Mem { call, source })?;
        Ok(self.shared_buffer(bo, size, kind))
    }

    /// Allocates `size` bytes in a BO of their own placed as `placement`
    /// says (device memory on a device with VRAM). A
    /// [`MemKind::DeviceLocal`] VRAM buffer has no CPU mapping (reach it
    /// with copies); a [`MemKind::HostVisible`] one is in the CPU-visible
    /// part of VRAM, mapped through the aperture. Buffers in VRAM cannot be
    /// exported ([`Buffer::export_fd`] fails).
    pub fn alloc_placed(&self, size: u64, kind: MemKind, placement: Placement) -> Result<Buffer> {
        let call = "Context::alloc_placed";
        self.inner.check(call)?;
        let bo = Bo::with_flags(
            &self.inner.kmd,
            &self.inner.vas,
            size,
            placement.gem_flags(kind),
            uapi::VM_BIND_READ | uapi::VM_BIND_WRITE,
        )
        .map_err(|source| Error::Mem { call, source })?;
        Ok(self.shared_buffer(bo, size, kind))
    }

    /// A buffer another process exported ([`Buffer::export_fd`]: a dma-buf
    /// fd of this device; the fd stays the caller's), mapped into this
    /// context's address space (and for the CPU).
    pub fn import_buffer(&self, fd: BorrowedFd<'_>, kind: MemKind) -> Result<Buffer> {
        let call = "Context::import_buffer";
        self.inner.check(call)?;
        // A dma-buf's size is its end.
        // SAFETY: lseek on a borrowed fd changes only its file offset.
        let end = unsafe { libc::lseek(fd.as_raw_fd(), 0, libc::SEEK_END) };
        if end <= 0 {
            return Err(Error::Invalid {
                call,
                what: "the fd is not a dma-buf".into(),
            });
        }
        let size = end as u64;
        let handle = self
            .inner
            .kmd
            .prime_fd_to_handle(fd.as_raw_fd())
            .map_err(|source| Error::Kmd {
                call,
                ctx: 0,
                source,
            })?;
        let bo = Bo::from_handle(
            &self.inner.kmd,
            &self.inner.vas,
            handle,
            size.next_multiple_of(4096),
            uapi::VM_BIND_READ | uapi::VM_BIND_WRITE,
        )
        .map_err(|source| Error::Mem { call, source })?;
        Ok(self.shared_buffer(bo, size, kind))
    }

    fn shared_buffer(&self, bo: Bo, size: u64, kind: MemKind) -> Buffer {
        Buffer {
            ctx: self.inner.clone(),
            block: Some(Block {
                bo: Arc::new(bo),
                offset: 0,
                reserved: size.next_multiple_of(4096),
                requested: size,
                class: crate::memory::SizeClass::of(size),
            }),
            size,
            kind,
            shared: true,
        }
    }

    /// Memory-pool statistics (per size class).
    pub fn pool_stats(&self) -> PoolStats {
        let mut p = self.inner.pool.lock().unwrap();
        p.reclaim();
        p.stats()
    }

    /// Command-buffer pool statistics.
    pub fn cmdbuf_stats(&self) -> CmdPoolStats {
        let mut c = self.inner.cmds.lock().unwrap();
        c.reclaim();
        c.stats
    }

    /// Waits for all work of every stream of this context.
    pub fn synchronize(&self) -> Result<()> {
        let call = "Context::synchronize";
        self.inner.check(call)?;
        let f = self.inner.quiesce_fences(call)?;
        crate::fence::wait_all(&self.inner.kmd, &self.inner.cfg, &f, None).map_err(|e| {
            let ctx = f.first().map_or(0, |s| s.kmd.ctx_id);
            self.inner.fail(call, ctx, e)
        })?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{sanitizer_line, ErrorPlace, LostReason};
    use crate::uapi;

    #[test]
    fn errors_name_their_packet() {
        let at = ErrorPlace {
            packet_va: 0x7f00_0040,
            header: 0xa010_0007,
            engine: uapi::ENGINE_COPY,
            seqno: 5,
            cmd_index: Some(1),
            cmd_offset: 0x40,
            depth: 1,
            packet: "COPY src=0x1000 dst=0x2000 size=64".into(),
            sanitizer: Some("SAN-TLB-STALE #3".into()),
        };
        let s = LostReason::EngineError {
            code: 6,
            at: Some(Box::new(at.clone())),
        }
        .to_string();
        assert!(
            s.ends_with(": BAD_OPERAND (engine error 6) at packet 0x7f000040 [COPY src=0x1000 dst=0x2000 size=64] on the copy engine, SUBMIT seqno 5, command buffer 1 +0x40; sanitizer: SAN-TLB-STALE #3"),
            "{s}"
        );
        let kmd = ErrorPlace {
            cmd_index: None,
            sanitizer: None,
            ..at
        };
        assert!(
            kmd.to_string().ends_with(", a packet the KMD wrote"),
            "{kmd}"
        );
        let s = LostReason::PageFault {
            va: 0x1000,
            access: uapi::ACCESS_WRITE,
            reason: uapi::fault_reason::NOT_PRESENT,
            at: None,
        }
        .to_string();
        assert!(
            s.ends_with("write at 0x1000 (NOT_PRESENT, fault reason 1)"),
            "{s}"
        );
        let mut r = uapi::DrmVgpuSanRecord {
            check: uapi::san::FENCE_REGRESS,
            seq: 9,
            packet_va: 0x40,
            ..Default::default()
        };
        let words = [vgpu_hwif::packet::encode_header(
            1,
            vgpu_hwif::packet::OP_NOP,
            1,
        )];
        r.packet[0] = words[0];
        r.packet_len = 1;
        r.flags = uapi::san::FLAG_PACKET;
        let line = sanitizer_line(1, &r);
        assert!(
            line.starts_with("SAN-FENCE-REGRESS #9 packet 0x40 [NOP words=1]: "),
            "{line}"
        );
        let moved = uapi::DrmVgpuSanRecord {
            check: uapi::san::DMA_UNOWNED,
            seq: 3,
            flags: uapi::san::FLAG_OBJECT | uapi::san::FLAG_MOVED,
            time_ns: 5_000_000,
            object: 12,
            object_gen: 1,
            object_gen_now: 2,
            object_pa_now: 0x4000_0000,
            released_ns: 3_000_000,
            ..Default::default()
        };
        let line = sanitizer_line(1, &moved);
        assert!(
            line.contains("; the page was bo 12's (gen 1) until it moved 2000 us earlier (now gen 2 at 0x40000000); hint: "),
            "{line}"
        );
    }

    #[test]
    fn engine_error_is_named() {
        let s = LostReason::EngineError { code: 6, at: None }.to_string();
        assert!(s.ends_with(": BAD_OPERAND (engine error 6)"), "{s}");
        let s = LostReason::EngineError { code: 99, at: None }.to_string();
        assert!(s.ends_with(" (engine error 99)"), "{s}");
        let s = LostReason::EngineError { code: 0, at: None }.to_string();
        assert!(s.ends_with("rejected a command"), "{s}");
    }
}
