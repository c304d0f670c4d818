//! The render node and the helpers every area shares: ioctl wrappers, CPU
//! mappings, command buffers and packets, scratch buffers.

#![allow(unused_imports)]
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::PathBuf;

use vgpu_umd::uapi::{self, param};
use vgpu_umd::Device;

use crate::debugfs::*;
use crate::report::*;

pub const PAGE: u64 = 4096;

/// An open render node.
pub struct Node {
    pub file: File,
}

impl Node {
    pub fn open(path: &PathBuf) -> Node {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .expect("open render node");
        Node { file }
    }

    pub fn ioctl<A>(&self, req: u32, arg: &mut A) -> Result<(), i32> {
        loop {
            // SAFETY: `req` is the uAPI ioctl whose argument is an `A` (the
            // mirror is checked against the C header), `arg` is a valid,
            // exclusively borrowed `A`.
            let rc = unsafe {
                libc::ioctl(
                    self.file.as_raw_fd(),
                    req as libc::c_ulong,
                    std::ptr::from_mut(arg),
                )
            };
            if rc == 0 {
                return Ok(());
            }
            let e = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
            if e != libc::EINTR {
                return Err(e);
            }
        }
    }

    pub fn param(&self, p: u32) -> Result<u64, i32> {
        let mut a = uapi::DrmVgpuGetParam {
            param: p,
            ..Default::default()
        };
        self.ioctl(uapi::DRM_IOCTL_VGPU_GET_PARAM, &mut a)?;
        Ok(a.value)
    }

    pub fn gem_create(&self, size: u64, flags: u32) -> Result<u32, i32> {
        let mut a = uapi::DrmVgpuGemCreate {
            size,
            flags,
            handle: 0,
        };
        self.ioctl(uapi::DRM_IOCTL_VGPU_GEM_CREATE, &mut a)?;
        Ok(a.handle)
    }

    pub fn gem_close(&self, handle: u32) -> Result<(), i32> {
        let mut a = uapi::DrmGemClose { handle, pad: 0 };
        self.ioctl(uapi::DRM_IOCTL_GEM_CLOSE, &mut a)
    }

    pub fn mmap_offset(&self, handle: u32, pad: u32) -> Result<u64, i32> {
        let mut a = uapi::DrmVgpuGemMmapOffset {
            handle,
            pad,
            offset: 0,
        };
        self.ioctl(uapi::DRM_IOCTL_VGPU_GEM_MMAP_OFFSET, &mut a)?;
        Ok(a.offset)
    }

    pub fn mmap(&self, handle: u32, size: u64) -> Result<Map, i32> {
        let off = self.mmap_offset(handle, 0)?;
        // SAFETY: A fresh shared mapping of the render node at the BO's fake
        // offset; nothing else refers to the returned range.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                size as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                self.file.as_raw_fd(),
                off as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
        }
        Ok(Map {
            ptr: p.cast(),
            len: size as usize,
        })
    }

    pub fn bind(
        &self,
        handle: u32,
        bo_offset: u64,
        va: u64,
        size: u64,
        flags: u32,
    ) -> Result<(), i32> {
        let mut a = uapi::DrmVgpuVmBind {
            handle,
            flags,
            bo_offset,
            va,
            size,
        };
        self.ioctl(uapi::DRM_IOCTL_VGPU_VM_BIND, &mut a)
    }

    pub fn unbind(&self, va: u64, size: u64) -> Result<(), i32> {
        let mut a = uapi::DrmVgpuVmUnbind { va, size };
        self.ioctl(uapi::DRM_IOCTL_VGPU_VM_UNBIND, &mut a)
    }

    pub fn ctx_create(&self, priority: u32, engine_mask: u32, flags: u32) -> Result<u32, i32> {
        let mut a = uapi::DrmVgpuCtxCreate {
            priority,
            engine_mask,
            flags,
            ctx_id: 0,
        };
        self.ioctl(uapi::DRM_IOCTL_VGPU_CTX_CREATE, &mut a)?;
        Ok(a.ctx_id)
    }

    pub fn ctx_destroy(&self, ctx_id: u32) -> Result<(), i32> {
        let mut a = uapi::DrmVgpuCtxDestroy { ctx_id, pad: 0 };
        self.ioctl(uapi::DRM_IOCTL_VGPU_CTX_DESTROY, &mut a)
    }

    pub fn ctx_query(&self, ctx_id: u32) -> Result<uapi::DrmVgpuCtxQuery, i32> {
        let mut a = uapi::DrmVgpuCtxQuery {
            ctx_id,
            ..Default::default()
        };
        self.ioctl(uapi::DRM_IOCTL_VGPU_CTX_QUERY, &mut a)?;
        Ok(a)
    }

    pub fn query_stats(&self, a: &mut uapi::DrmVgpuQueryStats) -> Result<(), i32> {
        self.ioctl(uapi::DRM_IOCTL_VGPU_QUERY_STATS, a)
    }

    /// A `QUERY_STATS` with room for every context.
    pub fn stats(&self) -> Result<(uapi::DrmVgpuQueryStats, Vec<uapi::DrmVgpuCtxStats>), i32> {
        let mut v = vec![uapi::DrmVgpuCtxStats::default(); uapi::STATS_MAX_CONTEXTS as usize];
        let mut a = uapi::DrmVgpuQueryStats {
            num_contexts: uapi::STATS_MAX_CONTEXTS,
            contexts: v.as_mut_ptr() as u64,
            ..Default::default()
        };
        self.query_stats(&mut a)?;
        v.truncate(a.num_contexts.min(uapi::STATS_MAX_CONTEXTS) as usize);
        Ok((a, v))
    }

    pub fn submit_raw(&self, a: &mut uapi::DrmVgpuSubmit) -> Result<u64, i32> {
        self.ioctl(uapi::DRM_IOCTL_VGPU_SUBMIT, a)?;
        Ok(a.seqno)
    }

    pub fn submit(
        &self,
        ctx: u32,
        engine: u32,
        cmds: &[uapi::DrmVgpuCmd],
        fences: &[uapi::DrmVgpuFence],
    ) -> Result<u64, i32> {
        let mut a = uapi::DrmVgpuSubmit {
            ctx_id: ctx,
            engine,
            cmds: cmds.as_ptr() as u64,
            num_cmds: cmds.len() as u32,
            num_in_fences: fences.len() as u32,
            in_fences: fences.as_ptr() as u64,
            ..Default::default()
        };
        self.submit_raw(&mut a)
    }

    pub fn wait(
        &self,
        fences: &[uapi::DrmVgpuFence],
        all: bool,
        timeout_ns: u64,
    ) -> Result<u32, i32> {
        let mut a = uapi::DrmVgpuWait {
            fences: fences.as_ptr() as u64,
            num_fences: fences.len() as u32,
            flags: if all { uapi::WAIT_ALL } else { 0 },
            timeout_ns,
            ..Default::default()
        };
        self.ioctl(uapi::DRM_IOCTL_VGPU_WAIT, &mut a)?;
        Ok(a.first_signaled)
    }
}

pub fn fence(ctx_id: u32, engine: u32, seqno: u64) -> uapi::DrmVgpuFence {
    uapi::DrmVgpuFence {
        ctx_id,
        engine,
        seqno,
    }
}

/// A command-buffer BO: programs at 256-byte slots (64-byte aligned, as gen
/// 2 engine packets require).
pub struct Cmds {
    pub map: Map,
    pub va: u64,
    pub generation: u32,
}

impl Cmds {
    /// Writes the packets `(opcode, payload)` at slot `slot`, padded with a
    /// NOP to a multiple of 8 bytes; returns the command buffer.
    pub fn program(&self, slot: usize, packets: &[(u8, Vec<u32>)]) -> uapi::DrmVgpuCmd {
        let mut words = Vec::new();
        for (op, payload) in packets {
            words.push(vgpu_hwif::packet::encode_header(
                self.generation,
                *op,
                payload.len() as u32 + 1,
            ));
            words.extend_from_slice(payload);
        }
        if words.len() % 2 == 1 {
            words.push(vgpu_hwif::packet::encode_header(
                self.generation,
                vgpu_hwif::packet::OP_NOP,
                1,
            ));
        }
        assert!(words.len() <= 64);
        let base = slot * 64;
        for (i, w) in words.iter().enumerate() {
            let q = (base + i) / 2;
            let old = self.map.read(q);
            let v = if (base + i).is_multiple_of(2) {
                (old & !0xffff_ffff) | u64::from(*w)
            } else {
                (old & 0xffff_ffff) | (u64::from(*w) << 32)
            };
            self.map.write(q, v);
        }
        uapi::DrmVgpuCmd {
            va: self.va + (slot * 256) as u64,
            size: (words.len() * 4) as u64,
        }
    }
}

pub fn lo(v: u64) -> u32 {
    v as u32
}

pub fn hi(v: u64) -> u32 {
    (v >> 32) as u32
}

pub fn copy(src: u64, dst: u64, size: u64) -> (u8, Vec<u32>) {
    (
        vgpu_hwif::packet::OP_COPY,
        vec![lo(src), hi(src), lo(dst), hi(dst), lo(size), hi(size)],
    )
}

pub fn fill(dst: u64, size: u64, pattern: u32) -> (u8, Vec<u32>) {
    (
        vgpu_hwif::packet::OP_FILL,
        vec![lo(dst), hi(dst), lo(size), hi(size), pattern],
    )
}

pub fn sem_wait_eq(va: u64, value: u64) -> (u8, Vec<u32>) {
    (
        vgpu_hwif::packet::OP_SEM_WAIT,
        vec![
            lo(va),
            hi(va),
            lo(value),
            hi(value),
            vgpu_hwif::packet::SEM_WAIT_EQ,
        ],
    )
}

/// A CPU mapping of a BO.
pub struct Map {
    pub ptr: *mut u64,
    pub len: usize,
}

impl Map {
    pub fn write(&self, i: usize, v: u64) {
        assert!(i < self.len / 8);
        // SAFETY: In bounds of the live mapping (asserted).
        unsafe { self.ptr.add(i).write_volatile(v) }
    }

    pub fn read(&self, i: usize) -> u64 {
        assert!(i < self.len / 8);
        // SAFETY: In bounds of the live mapping (asserted).
        unsafe { self.ptr.add(i).read_volatile() }
    }
}

impl Drop for Map {
    fn drop(&mut self) {
        // SAFETY: Unmaps exactly the range `mmap` returned.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

pub const MS: u64 = 1_000_000;

/// A 4-page command-buffer BO bound READ|EXEC at `VA_START + at` and a
/// data BO of `data_pages` pages bound READ|WRITE 1 MiB above it.
pub struct Scratch {
    pub cmds: Cmds,
    pub data: u32,
    pub dva: u64,
    pub start: u64,
}

pub fn scratch(n: &Node, at: u64, data_pages: u64) -> Scratch {
    let start = n.param(param::VA_START).unwrap_or(0);
    let generation = n.param(param::GENERATION).unwrap_or(1) as u32;
    let hc = n.gem_create(4 * PAGE, 0).unwrap_or(0);
    let data = n.gem_create(data_pages * PAGE, 0).unwrap_or(0);
    let cva = start + at;
    let dva = cva + 0x10_0000;
    let _ = n.bind(
        hc,
        0,
        cva,
        4 * PAGE,
        uapi::VM_BIND_READ | uapi::VM_BIND_EXEC,
    );
    let _ = n.bind(
        data,
        0,
        dva,
        data_pages * PAGE,
        uapi::VM_BIND_READ | uapi::VM_BIND_WRITE,
    );
    Scratch {
        cmds: Cmds {
            map: n.mmap(hc, 4 * PAGE).expect("mmap"),
            va: cva,
            generation,
        },
        data,
        dva,
        start,
    }
}
