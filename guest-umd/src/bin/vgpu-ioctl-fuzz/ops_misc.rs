//! `GET_PARAM`, `PING`, raw ioctls (any number of the driver's range with
//! any direction, size and content — the pointer fields of the structs that
//! have them aimed at the arena), argument pointers that are bad, the DRM
//! core ioctls a render node allows (`VERSION`, `GET_CAP`, PRIME export and
//! import), and opening and closing files.

use std::mem::offset_of;
use std::sync::atomic::Ordering::Relaxed;

use vgpu_umd::kmd::IoctlArg;
use vgpu_umd::uapi::{self, param};

use crate::expect::Expect;
use crate::guard::{BadPtr, BAD_PTRS, SLOT_BYTES};
use crate::oplog;
use crate::sys;
use crate::worker::{Bo, Shared, Worker};

/// Render-node files the main worker keeps open at most.
pub const MAX_FILES: usize = 4;

/// `_IOC(dir, 'd', nr, size)`.
const fn ioc(dir: u32, nr: u32, size: u32) -> u32 {
    (dir << 30) | (size << 16) | ((b'd' as u32) << 8) | nr
}

impl Worker {
    /// `GET_PARAM`: every parameter, unknown ones, non-zero padding.
    pub fn op_get_param(&mut self, fi: usize) {
        let f = self.files[fi].clone();
        let (p, pad, want) = match self.rng.below(5) {
            0..=2 => (
                self.rng.range(1, u64::from(param::COUNT) - 1) as u32,
                0,
                Expect::VALID,
            ),
            3 => {
                let any = self.rng.u32() | 0x100;
                let p = *self
                    .rng
                    .pick(&[0, param::COUNT, param::COUNT + 1, u32::MAX, any]);
                (p, 0, Expect::BAD)
            }
            _ => (param::GENERATION, self.rng.u32() | 1, Expect::BAD),
        };
        let mut a = uapi::DrmVgpuGetParam {
            param: p,
            pad,
            value: 0,
        };
        let _ = self.call(
            "get_param",
            || format!("param {p:#x} pad {pad:#x}"),
            want,
            |ar| sys::ioctl(f.fd, &mut a, ar),
        );
    }

    /// `PING`: default and short timeouts (1 ns: the event cannot make it).
    pub fn op_ping(&mut self, fi: usize) {
        let f = self.files[fi].clone();
        let timeout_ns = *self.rng.pick(&[0, 1, 1000, 50_000_000, 200_000_000]);
        let mut a = uapi::DrmVgpuPing {
            cookie: self.rng.next(),
            timeout_ns,
            event_seq: self.rng.next(),
            latency_ns: self.rng.next(),
        };
        let cookie = a.cookie;
        let _ = self.call(
            "ping",
            || format!("cookie {cookie:#x} timeout {timeout_ns}"),
            Expect::valid_or(&[libc::EPROTO]),
            |ar| sys::ioctl(f.fd, &mut a, ar),
        );
    }

    /// A raw ioctl: a number of the driver's range (or just past it) with a
    /// random direction and size, random content; the pointer fields of
    /// `SUBMIT`, `WAIT` and `QUERY_STATS` aimed at arena memory or bad
    /// pointers (their counts are limited by the driver: at most 64 or
    /// 256 entries, all within a slot).
    pub fn op_raw(&mut self, fi: usize) {
        let f = self.files[fi].clone();
        let nr = uapi::DRM_COMMAND_BASE + self.rng.range(0, 0x12) as u32;
        let known = self.known_size(nr).unwrap_or(16) as u32;
        let size = match self.rng.below(5) {
            0 => self.rng.range(0, 256) as u32,
            1 => self.rng.range(0, 0x3fff) as u32,
            2 => known + 8,
            3 => known.saturating_sub(8),
            _ => known,
        };
        let dir = self.rng.range(0, 3) as u32;
        let req = ioc(dir, nr, size);
        let mut bytes = vec![0u8; (size as usize).min(SLOT_BYTES)];
        self.rng.fill(&mut bytes);
        self.aim_pointers(nr, &mut bytes);
        // What it creates, the fuzzer does not know: the file's answers
        // are not judged any more.
        f.lock().tainted = true;
        let _ = self.call(
            "raw",
            || format!("req {req:#x} nr {nr:#x} dir {dir} size {size}"),
            Expect::ANY,
            |ar| sys::ioctl_bytes(f.fd, req, &mut bytes, ar),
        );
    }

    fn known_size(&self, nr: u32) -> Option<usize> {
        Some(match nr - uapi::DRM_COMMAND_BASE {
            uapi::DRM_VGPU_SUBMIT => size_of::<uapi::DrmVgpuSubmit>(),
            uapi::DRM_VGPU_WAIT => size_of::<uapi::DrmVgpuWait>(),
            uapi::DRM_VGPU_QUERY_STATS => size_of::<uapi::DrmVgpuQueryStats>(),
            uapi::DRM_VGPU_VM_BIND => size_of::<uapi::DrmVgpuVmBind>(),
            uapi::DRM_VGPU_FENCE_EXPORT => size_of::<uapi::DrmVgpuFenceExport>(),
            uapi::DRM_VGPU_SAN_REPORT => size_of::<uapi::DrmVgpuSanReport>(),
            _ => return None,
        })
    }

    /// Pointer fields of the structs that carry them, in a raw argument:
    /// arena memory or bad pointers, never the fuzzer's own memory.
    fn aim_pointers(&mut self, nr: u32, bytes: &mut [u8]) {
        let fields: &[usize] = match nr - uapi::DRM_COMMAND_BASE {
            uapi::DRM_VGPU_SUBMIT => &[
                offset_of!(uapi::DrmVgpuSubmit, cmds),
                offset_of!(uapi::DrmVgpuSubmit, in_fences),
            ],
            uapi::DRM_VGPU_WAIT => &[offset_of!(uapi::DrmVgpuWait, fences)],
            uapi::DRM_VGPU_QUERY_STATS => &[offset_of!(uapi::DrmVgpuQueryStats, contexts)],
            _ => &[],
        };
        for &off in fields {
            let Some(field) = bytes.get_mut(off..off + 8) else {
                continue;
            };
            let p = if self.rng.chance(1, 2) {
                let kind = *self.rng.pick(&BAD_PTRS);
                self.arena.bad(kind, 64, &mut self.rng)
            } else {
                self.arena
                    .at_end(self.rng.range(0, SLOT_BYTES as u64) as usize) as u64
            };
            field.copy_from_slice(&p.to_le_bytes());
        }
    }

    /// An ioctl of the driver with a bad argument pointer (the DRM core
    /// copies the struct in or out through it).
    pub fn op_bad_arg(&mut self, fi: usize) {
        let f = self.files[fi].clone();
        let reqs = [
            uapi::DrmVgpuGetParam::REQUEST,
            uapi::DrmVgpuGemCreate::REQUEST,
            uapi::DrmVgpuVmBind::REQUEST,
            uapi::DrmVgpuCtxCreate::REQUEST,
            uapi::DrmVgpuSubmit::REQUEST,
            uapi::DrmVgpuWait::REQUEST,
            uapi::DrmVgpuQueryStats::REQUEST,
            uapi::DrmVgpuFenceExport::REQUEST,
            uapi::DrmVgpuSanReport::REQUEST,
            uapi::DrmGemClose::REQUEST,
        ];
        let req = *self.rng.pick(&reqs);
        let size = (req >> 16) & 0x3fff;
        let kind = *self.rng.pick(
            &BAD_PTRS
                .iter()
                .copied()
                .filter(|&k| k != BadPtr::ReadOnly)
                .collect::<Vec<_>>(),
        );
        let p = self.arena.bad(kind, size as usize, &mut self.rng);
        let _ = self.call(
            "bad_arg",
            || format!("req {req:#x} arg {p:#x} ({kind:?})"),
            Expect::BAD,
            |_| sys::ioctl_ptr(f.fd, req, p),
        );
    }

    /// The DRM core's ioctls a render node allows: `VERSION` (its string
    /// buffers in the arena or bad), `GET_CAP`, `PRIME_HANDLE_TO_FD` and
    /// `PRIME_FD_TO_HANDLE` (the imported handle is recorded).
    pub fn op_core(&mut self, fi: usize) {
        let f = self.files[fi].clone();
        match self.rng.below(4) {
            0 => {
                // struct drm_version: three ints, then (length, pointer)
                // for name, date and description.
                let mut bytes = [0u8; size_of::<uapi::DrmVersion>()];
                let mut lens = [0usize; 3];
                let fields = [
                    (
                        offset_of!(uapi::DrmVersion, name_len),
                        offset_of!(uapi::DrmVersion, name),
                    ),
                    (
                        offset_of!(uapi::DrmVersion, date_len),
                        offset_of!(uapi::DrmVersion, date),
                    ),
                    (
                        offset_of!(uapi::DrmVersion, desc_len),
                        offset_of!(uapi::DrmVersion, desc),
                    ),
                ];
                for (i, (len_at, ptr_at)) in fields.into_iter().enumerate() {
                    let n = self.rng.range(0, 64) as usize;
                    lens[i] = n;
                    let p = if self.rng.chance(1, 4) {
                        let kind = *self.rng.pick(&BAD_PTRS);
                        self.arena.bad(kind, n, &mut self.rng)
                    } else {
                        self.arena.at_end(n) as u64
                    };
                    bytes[len_at..len_at + 8].copy_from_slice(&(n as u64).to_le_bytes());
                    bytes[ptr_at..ptr_at + 8].copy_from_slice(&p.to_le_bytes());
                }
                let _ = self.call(
                    "drm_version",
                    || format!("lens {lens:?}"),
                    Expect::valid_or(&[libc::EFAULT]),
                    |ar| sys::ioctl_bytes(f.fd, uapi::DRM_IOCTL_VERSION, &mut bytes, ar),
                );
            }
            1 => {
                let mut cap = [0u8; 16];
                let which = self.rng.range(0, 0x20);
                cap[..8].copy_from_slice(&which.to_le_bytes());
                let _ = self.call(
                    "drm_get_cap",
                    || format!("cap {which:#x}"),
                    Expect::ANY,
                    |ar| sys::ioctl_bytes(f.fd, ioc(3, 0x0c, 16), &mut cap, ar),
                );
            }
            _ => self.prime(fi),
        }
    }

    /// PRIME: a BO exported as a dma-buf fd and imported back.
    fn prime(&mut self, fi: usize) {
        let f = self.files[fi].clone();
        let bo = {
            let st = f.lock();
            if st.bos.is_empty() {
                return;
            }
            *self.rng.pick(&st.bos)
        };
        // struct drm_prime_handle { u32 handle; u32 flags; s32 fd; }
        // What the import creates need not be the same handle.
        f.lock().tainted = true;
        let mut h = [0u8; 12];
        h[..4].copy_from_slice(&bo.handle.to_le_bytes());
        h[4..8].copy_from_slice(&(libc::O_CLOEXEC as u32).to_le_bytes());
        let r = self.call(
            "prime_export",
            || format!("handle {}", bo.handle),
            Expect::ANY,
            |ar| sys::ioctl_bytes(f.fd, ioc(3, 0x2d, 12), &mut h, ar),
        );
        if r.is_err() {
            return;
        }
        let fd = i32::from_le_bytes(h[8..12].try_into().unwrap());
        self.fds.push(fd);
        let mut h = [0u8; 12];
        h[8..12].copy_from_slice(&fd.to_le_bytes());
        let r = self.call(
            "prime_import",
            || format!("fd {fd}"),
            Expect::ANY,
            |ar| sys::ioctl_bytes(f.fd, ioc(3, 0x2e, 12), &mut h, ar),
        );
        if r.is_ok() {
            let handle = u32::from_le_bytes(h[..4].try_into().unwrap());
            let mut st = f.lock();
            if !st.has_handle(handle) {
                st.closed.retain(|&c| c != handle);
                st.bos.push(Bo { handle, ..bo });
            }
        }
    }

    /// Opens a file, or closes one with everything it holds (contexts with
    /// work queued, mappings, exported fences stay open).
    pub fn op_file(&mut self) {
        if !self.manages_files {
            return;
        }
        if self.files.len() < MAX_FILES && (self.files.is_empty() || self.rng.chance(1, 2)) {
            self.open_file();
        } else if !self.files.is_empty() {
            let i = self.rng.below(self.files.len() as u64) as usize;
            let f = self.files.swap_remove(i);
            let fd = f.fd;
            oplog::log(self.id, &format!("close_file fd {fd}"));
            // The last reference: the file closes here.
            drop(f);
            oplog::DONE.fetch_add(1, Relaxed);
        }
    }

    pub fn open_file(&mut self) -> Option<usize> {
        let node = self.dev.node.clone();
        let mut fd = -1;
        self.call(
            "open",
            || format!("{}", node.display()),
            Expect::valid_or(&[libc::EMFILE]),
            |_| {
                fd = sys::open_node(&node)?;
                Ok(())
            },
        )
        .ok()?;
        self.files.push(Shared::new(fd, self.dev.va_start));
        Some(self.files.len() - 1)
    }
}
