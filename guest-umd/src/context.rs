//! Contexts: one open render node (its own GPU address space), the memory
//! pools and command-buffer pool, the streams, and the sticky lost state.

use std::fmt;
use std::fs::File;
use std::io::Write;
use std::sync::{Arc, Mutex, Weak};

use crate::cmdbuf::{CmdPool, CmdPoolStats, DumpRecord, DUMP_MAGIC};
use crate::config::Config;
use crate::fence::SyncPoint;
use crate::kmd::{Kmd, KmdError};
use crate::memory::{Block, MemError, Pool, PoolStats, VaAllocator};
use crate::{uapi, Device, Error, Identity, Result};

/// Why a context stopped working (sticky: every later call reports it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LostReason {
    /// This context's work faulted on a GPU address.
    PageFault {
        /// Faulting GPU VA.
        va: u64,
        /// `VGPU_ACCESS_*`.
        access: u32,
        /// hwif `mmu::FaultReason` number.
        reason: u32,
    },
    /// This context's work hung and was reset.
    Hang {
        /// Hangs the context caused.
        hangs: u32,
    },
    /// Banned after too many hangs.
    Banned,
    /// A reset caused by another context destroyed this context's work.
    Innocent,
    /// The engine stopped the ring (bad packet, an operation the device
    /// does not support, a kernel `TRAP`).
    EngineError {
        /// hwif `packet::EngineError` number from `CTX_QUERY` (0: unknown).
        code: u32,
    },
    /// The device is wedged or broken (`EIO` with no context state).
    Wedged,
    /// The device was removed (`ENODEV`).
    Removed,
}

impl fmt::Display for LostReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            LostReason::PageFault { va, access, reason } => write!(
                f,
                "context reset (guilty): GPU page fault, {} at {va:#x} (fault reason {reason})",
                match access {
                    uapi::ACCESS_READ => "read",
                    uapi::ACCESS_WRITE => "write",
                    uapi::ACCESS_EXECUTE => "execute",
                    uapi::ACCESS_ATOMIC => "atomic",
                    _ => "access",
                }
            ),
            LostReason::Hang { hangs } => {
                write!(f, "context reset (guilty): GPU hang ({hangs} so far)")
            }
            LostReason::Banned => write!(f, "context banned after repeated hangs"),
            LostReason::Innocent => write!(
                f,
                "context reset (innocent): another context's reset lost this work"
            ),
            LostReason::EngineError { code } => {
                write!(f, "context errored: the engine rejected a command")?;
                match vgpu_hwif::packet::EngineError::from_u32(code) {
                    Some(e) => write!(f, ": {} (engine error {code})", e.name()),
                    None if code != 0 => write!(f, " (engine error {code})"),
                    None => Ok(()),
                }
            }
            LostReason::Wedged => write!(f, "device lost: wedged"),
            LostReason::Removed => write!(f, "device lost: removed"),
        }
    }
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
        let Ok(q) = self.kmd.ctx_query(ctx) else {
            return LostReason::Wedged;
        };
        if q.state & uapi::CTX_STATE_BANNED != 0 {
            LostReason::Banned
        } else if q.state & uapi::CTX_STATE_FAULTED != 0 {
            LostReason::PageFault {
                va: q.fault_va,
                access: q.fault_access,
                reason: q.fault_reason,
            }
        } else if q.reset_status == uapi::CTX_RESET_GUILTY && q.hangs > 0 {
            LostReason::Hang { hangs: q.hangs }
        } else if q.reset_status == uapi::CTX_RESET_INNOCENT {
            LostReason::Innocent
        } else if q.state & uapi::CTX_STATE_ERRORED != 0 {
            LostReason::EngineError {
                code: q.engine_error,
            }
        } else {
            LostReason::Wedged
        }
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

/// GPU memory. Dropping it (or [`Buffer::free`]) returns it to the pool,
/// which reuses it only after the work submitted so far completed.
pub struct Buffer {
    pub(crate) ctx: Arc<CtxInner>,
    pub(crate) block: Option<Block>,
    pub(crate) size: u64,
    pub(crate) kind: MemKind,
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

    fn release(&mut self, call: &'static str) -> Result<()> {
        let Some(b) = self.block.take() else {
            return Ok(());
        };
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
        })
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
    use super::LostReason;

    #[test]
    fn engine_error_is_named() {
        let s = LostReason::EngineError { code: 6 }.to_string();
        assert!(s.ends_with(": BAD_OPERAND (engine error 6)"), "{s}");
        let s = LostReason::EngineError { code: 99 }.to_string();
        assert!(s.ends_with(" (engine error 99)"), "{s}");
        let s = LostReason::EngineError { code: 0 }.to_string();
        assert!(s.ends_with("rejected a command"), "{s}");
    }
}
