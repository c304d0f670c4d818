//! Device-to-host reads, by the path `VGPU_READ` chooses: into the
//! caller's memory mapped for the device ([`crate::hostmap`]), staged
//! through the copy engine, or straight from the buffer's own mapping.

use std::collections::VecDeque;

use vgpu_hwif::packet::Packet;

use super::{Stream, StreamShared, ENGINE_COPY, STAGING_CHUNK, STAGING_IN_FLIGHT};
use crate::config::ReadPath;
use crate::context::Buffer;
use crate::error::{Error, Result};
use crate::fence::SyncPoint;
use crate::hostmap::{self, HostMapping};
use crate::memory::Block;

impl Stream {
    /// Device-to-host copy; returns when `out` holds the data (waits for
    /// the stream's earlier work too).
    ///
    /// By default ([`ReadPath::Mapped`]) the KMD pins and maps `out` itself
    /// for the device and the copy engine writes the bytes straight into it:
    /// one copy, by the device (its faults and memory errors apply). Reads
    /// under [`MAPPED_READ_MIN`](crate::hostmap::MAPPED_READ_MIN), and reads
    /// the KMD refuses to map, go staged: the copy engine moves the bytes
    /// into staging blocks, which the CPU then copies out
    /// (`VGPU_READ=staged` for every read). Every buffer is a mapped BO, so
    /// with `VGPU_READ=direct` this instead waits for the stream's work and
    /// copies straight from the buffer's mapping into `out`: one copy, by
    /// the CPU, and no submission when the stream is idle.
    pub fn read(&self, src: &Buffer, off: u64, out: &mut [u8]) -> Result<()> {
        let call = "Stream::read";
        self.check_buf(call, src, off, out.len() as u64)?;
        if self.s.ctx.cfg.read == ReadPath::Mapped && out.len() as u64 >= hostmap::MAPPED_READ_MIN {
            let mapped = self.s.read_mapped(call, src.va() + off, out)?;
            self.s.st.lock().unwrap().mapped[usize::from(!mapped)] += 1;
            if mapped {
                return Ok(());
            }
        }
        if self.s.ctx.cfg.read == ReadPath::Direct {
            // The fences' memory values are read with acquire ordering, so
            // the device's writes before them are visible here.
            self.s.synchronize(call)?;
            let b = src.block.as_ref().expect("live buffer");
            b.bo.populate_read();
            b.bo.read_blocks(b.offset + off, out);
            return Ok(());
        }
        if out.len() as u64 > STAGING_CHUNK {
            return self.read_chunked(call, src, off, out);
        }
        let ctx = &self.s.ctx;
        let staging = ctx
            .pool
            .lock()
            .unwrap()
            .alloc(out.len() as u64)
            .map_err(|source| Error::Mem { call, source })?;
        let p = Packet::Copy {
            src: src.va() + off,
            dst: staging.va(),
            size: out.len() as u64,
        };
        let r = self
            .s
            .push(call, Some(ENGINE_COPY), &[p], vec![], None)
            .and_then(|()| self.s.synchronize(call));
        if r.is_ok() {
            staging.bo.read(staging.offset, out);
        }
        let fences = self
            .s
            .st
            .lock()
            .unwrap()
            .last
            .iter()
            .flatten()
            .cloned()
            .collect();
        ctx.pool.lock().unwrap().free(staging, fences);
        r.map(|_| ())
    }

    /// A large device-to-host copy in [`STAGING_CHUNK`] pieces with up to
    /// [`STAGING_IN_FLIGHT`] bytes in flight: the copy engine fills the next
    /// pieces while the CPU copies out the oldest one that completed.
    fn read_chunked(
        &self,
        call: &'static str,
        src: &Buffer,
        off: u64,
        out: &mut [u8],
    ) -> Result<()> {
        let ctx = &self.s.ctx;
        let chunk = STAGING_CHUNK as usize;
        let window = (STAGING_IN_FLIGHT / STAGING_CHUNK) as usize;
        let mut pending: std::collections::VecDeque<(usize, Block, SyncPoint)> = Default::default();
        let mut next = 0;
        let mut result = Ok(());
        while result.is_ok() && (next < out.len() || !pending.is_empty()) {
            if next < out.len() && pending.len() < window {
                let n = chunk.min(out.len() - next);
                let staging = match ctx.pool.lock().unwrap().alloc(n as u64) {
                    Ok(b) => b,
                    Err(source) => {
                        result = Err(Error::Mem { call, source });
                        break;
                    }
                };
                let p = Packet::Copy {
                    src: src.va() + off + next as u64,
                    dst: staging.va(),
                    size: n as u64,
                };
                match self.s.submit_copies(call, &[p]) {
                    Ok(sp) => pending.push_back((next, staging, sp)),
                    Err(e) => {
                        ctx.pool.lock().unwrap().free(staging, self.s.last_fences());
                        result = Err(e);
                        break;
                    }
                }
                next += n;
                continue;
            }
            let Some((at, staging, sp)) = pending.pop_front() else {
                break;
            };
            match self.s.wait_point(call, &sp) {
                Ok(()) => {
                    let n = chunk.min(out.len() - at);
                    staging.bo.read(staging.offset, &mut out[at..at + n]);
                    ctx.pool.lock().unwrap().free(staging, vec![]);
                }
                Err(e) => {
                    ctx.pool.lock().unwrap().free(staging, vec![sp]);
                    result = Err(e);
                }
            }
        }
        // On an error, blocks still in flight go back once the stream's
        // work is done.
        for (_, staging, _) in pending {
            ctx.pool.lock().unwrap().free(staging, self.s.last_fences());
        }
        // Like a small read: the stream's earlier work on both engines is
        // done when this returns.
        result.and_then(|()| self.s.synchronize(call).map(|_| ()))
    }
}

impl StreamShared {
    /// Copies `out.len()` bytes from GPU VA `src` into `out` through
    /// mappings of `out` itself ([`hostmap::pieces`]), after the stream's
    /// earlier work: each piece mapped and its copy submitted at once, at
    /// most [`hostmap::IN_FLIGHT`] mapped at a time, a piece unmapped as
    /// soon as its copy is done. `Ok(false)`: the KMD refused a mapping (an
    /// older KMD, its limits, memory it cannot pin); the caller reads the
    /// whole range another way.
    ///
    /// # Errors
    ///
    /// The stream's errors: a copy that faulted, a lost device.
    fn read_mapped(&self, call: &'static str, src: u64, out: &mut [u8]) -> Result<bool> {
        let kmd = &*self.ctx.kmd;
        let mut pending: VecDeque<(HostMapping<'_>, SyncPoint)> = VecDeque::new();
        for piece in hostmap::pieces(out.as_mut_ptr() as u64, out.len() as u64) {
            if pending.len() == hostmap::IN_FLIGHT {
                let (m, sp) = pending.pop_front().expect("a piece in flight");
                self.wait_point(call, &sp)?;
                drop(m);
            }
            let Ok(m) = HostMapping::new(kmd, &piece) else {
                // Memory the KMD cannot pin (a device mapping, a file the
                // kernel will not pin long-term) or its limits: the caller
                // reads the whole range another way, once the pieces in
                // flight are done.
                if let Some((_, sp)) = pending.back() {
                    self.wait_point(call, sp)?;
                }
                return Ok(false);
            };
            let copy = Packet::Copy {
                src: src + piece.at,
                dst: m.gpu_va(&piece),
                size: piece.len,
            };
            let sp = self.submit_copies(call, &[copy])?;
            pending.push_back((m, sp));
        }
        // The pieces complete in order: the last one's fence covers them all.
        if let Some((_, sp)) = pending.back() {
            self.wait_point(call, sp)?;
        }
        Ok(true)
    }
}
