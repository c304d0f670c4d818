//! Copies, fills and host-to-device writes: asynchronous work on the copy
//! engine; a write is staged at once, large ones in pieces with a bounded
//! amount of staging in flight.

use std::sync::Arc;

use vgpu_hwif::packet::Packet;

use super::{Stream, ENGINE_COPY, STAGING_CHUNK, STAGING_IN_FLIGHT};
use crate::context::Buffer;
use crate::error::{Error, Result};
use crate::fence::wait_all;

impl Stream {
    pub(super) fn check_buf(
        &self,
        call: &'static str,
        b: &Buffer,
        off: u64,
        len: u64,
    ) -> Result<()> {
        if !Arc::ptr_eq(&b.ctx, &self.s.ctx) {
            return Err(Error::Invalid {
                call,
                what: "buffer belongs to another context".into(),
            });
        }
        if len == 0 {
            return Err(Error::Invalid {
                call,
                what: "zero length".into(),
            });
        }
        b.check_range(off, len)
            .map_err(|source| Error::Mem { call, source })
    }

    /// Sets `len` bytes at `off` to `value` (asynchronous).
    pub fn memset(&self, buf: &Buffer, off: u64, value: u8, len: u64) -> Result<()> {
        self.memset32(buf, off, u32::from_ne_bytes([value; 4]), len)
    }

    /// Repeats the 32-bit little-endian `pattern` over `len` bytes.
    pub fn memset32(&self, buf: &Buffer, off: u64, pattern: u32, len: u64) -> Result<()> {
        let call = "Stream::memset";
        self.check_buf(call, buf, off, len)?;
        let p = Packet::Fill {
            dst: buf.va() + off,
            size: len,
            pattern,
        };
        self.s.push(call, Some(ENGINE_COPY), &[p], vec![], None)
    }

    /// Device-to-device copy of `len` bytes (asynchronous).
    pub fn copy(
        &self,
        dst: &Buffer,
        dst_off: u64,
        src: &Buffer,
        src_off: u64,
        len: u64,
    ) -> Result<()> {
        let call = "Stream::copy";
        self.check_buf(call, dst, dst_off, len)?;
        self.check_buf(call, src, src_off, len)?;
        let p = Packet::Copy {
            src: src.va() + src_off,
            dst: dst.va() + dst_off,
            size: len,
        };
        self.s.push(call, Some(ENGINE_COPY), &[p], vec![], None)
    }

    /// Host-to-device copy (asynchronous: `data` is staged at once, so it
    /// may be reused as soon as this returns).
    pub fn write(&self, dst: &Buffer, off: u64, data: &[u8]) -> Result<()> {
        let call = "Stream::write";
        self.check_buf(call, dst, off, data.len() as u64)?;
        if data.len() as u64 > STAGING_CHUNK {
            return self.write_chunked(call, dst, off, data);
        }
        let ctx = &self.s.ctx;
        let staging = ctx
            .pool
            .lock()
            .unwrap()
            .alloc(data.len() as u64)
            .map_err(|source| Error::Mem { call, source })?;
        staging.bo.write(staging.offset, data);
        let p = Packet::Copy {
            src: staging.va(),
            dst: dst.va() + off,
            size: data.len() as u64,
        };
        self.s
            .push(call, Some(ENGINE_COPY), &[p], vec![staging], None)
    }

    /// A large host-to-device copy in [`STAGING_CHUNK`] pieces, each
    /// submitted at once, with at most [`STAGING_IN_FLIGHT`] bytes of staging
    /// in flight: beyond, the piece waits for the oldest piece's batch, whose
    /// staging block (already faulted in) the pool then hands out again. The
    /// CPU fills one piece while the copy engine moves the previous one.
    fn write_chunked(&self, call: &'static str, dst: &Buffer, off: u64, data: &[u8]) -> Result<()> {
        let ctx = &self.s.ctx;
        for (i, piece) in data.chunks(STAGING_CHUNK as usize).enumerate() {
            let n = piece.len() as u64;
            loop {
                let oldest = {
                    let mut st = self.s.st.lock().unwrap();
                    let busy: u64 = st.staging.iter().map(|(b, _)| b).sum();
                    if busy + n <= STAGING_IN_FLIGHT {
                        break;
                    }
                    match st.staging.pop_front() {
                        Some((_, sp)) => sp,
                        None => break,
                    }
                };
                wait_all(&ctx.kmd, &ctx.cfg, &[oldest], None)
                    .map_err(|e| ctx.fail(call, self.s.ctx_id, e))?;
            }
            let staging = ctx
                .pool
                .lock()
                .unwrap()
                .alloc(n)
                .map_err(|source| Error::Mem { call, source })?;
            staging.bo.write(staging.offset, piece);
            let p = Packet::Copy {
                src: staging.va(),
                dst: dst.va() + off + i as u64 * STAGING_CHUNK,
                size: n,
            };
            self.s
                .push(call, Some(ENGINE_COPY), &[p], vec![staging], None)?;
            let mut st = self.s.st.lock().unwrap();
            self.s.flush_locked(&mut st, call)?;
            if let Some(sp) = st.last[ENGINE_COPY as usize].clone() {
                st.staging.push_back((n, sp));
            }
        }
        Ok(())
    }
}
