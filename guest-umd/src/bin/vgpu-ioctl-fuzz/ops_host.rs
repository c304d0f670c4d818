//! Process memory mapped for the GPU: `HOST_MAP` of the worker's own
//! anonymous memory (read-write or read-only), and with one argument broken
//! on purpose (alignment, size, flags, padding, memory the process does not
//! map or maps read-only); `HOST_UNMAP` of a mapping the file holds, or of
//! a VA that is none.

use vgpu_umd::uapi;

use crate::expect::Expect;
use crate::guard::BadPtr;
use crate::sys;
use crate::worker::Worker;

const PAGE: u64 = 4096;

/// Memory the KMD cannot pin as asked: `EFAULT`, or the memory limits, which
/// it checks before it touches the memory.
const MEMORY_BAD: Expect = Expect::bad_or(&[libc::ENOMEM, libc::ENOSPC]);

impl Worker {
    /// Private anonymous memory of `len` bytes, unmapped at release.
    fn anon(&mut self, len: usize) -> Option<u64> {
        let p = sys::anon(len, false)?;
        self.maps.push((p, len));
        Some(p as u64)
    }

    /// `HOST_MAP` (two in three) or `HOST_UNMAP`.
    pub fn op_host_map(&mut self, fi: usize) {
        let f = self.files[fi].clone();
        if self.rng.chance(1, 3) {
            let (va, want) = {
                let st = f.lock();
                match st.hosts.is_empty() || self.rng.chance(1, 4) {
                    false => (*self.rng.pick(&st.hosts), Expect::VALID),
                    true => (self.rng.below(1 << 48) & !(PAGE - 1), Expect::BAD),
                }
            };
            let known = want == Expect::VALID;
            let mut a = uapi::DrmVgpuHostUnmap { gpu_va: va };
            let r = self.call(
                "host_unmap",
                || format!("va {va:#x}"),
                if known { want } else { Expect::BAD },
                |ar| sys::ioctl(f.fd, &mut a, ar),
            );
            // Gone whatever the answer (EIO leaves it pinned, unmapped).
            if known && r.as_ref().err() != Some(&libc::ENOENT) {
                f.lock().hosts.retain(|&h| h != va);
            }
            return;
        }
        let pages = 1 + self.rng.below(16);
        let size = pages * PAGE;
        let Some(mem) = self.anon(size as usize) else {
            return;
        };
        let ro = if self.rng.chance(1, 4) {
            uapi::HOST_MAP_READ_ONLY
        } else {
            0
        };
        let mut a = uapi::DrmVgpuHostMap {
            addr: mem,
            size,
            flags: ro,
            ..Default::default()
        };
        let mut want = Expect::BAD;
        let what = match self.rng.below(9) {
            0 => {
                a.addr += 1 + self.rng.below(PAGE - 1);
                "address not page aligned"
            }
            1 => {
                a.size = if self.rng.chance(1, 2) {
                    0
                } else {
                    uapi::HOST_MAP_MAX_SIZE + PAGE
                };
                "size 0 or above the limit"
            }
            2 => {
                a.flags |= 2 << self.rng.below(30);
                "unknown flag"
            }
            3 => {
                a.pad = self.rng.u32() | 1;
                "padding"
            }
            4 => {
                a.addr = self.arena.bad(BadPtr::Guard, PAGE as usize, &mut self.rng) & !(PAGE - 1);
                a.size = PAGE;
                want = MEMORY_BAD;
                "a guard page"
            }
            5 => {
                // Readable only: refused for writing, taken read-only.
                want = MEMORY_BAD;
                a.addr = self
                    .arena
                    .bad(BadPtr::ReadOnly, PAGE as usize, &mut self.rng)
                    & !(PAGE - 1);
                a.size = PAGE;
                if ro != 0 {
                    want = Expect::VALID;
                }
                "a read-only page"
            }
            _ => {
                want = Expect::VALID;
                "anonymous memory"
            }
        };
        let desc = format!(
            "{what}: addr {:#x} size {:#x} flags {:#x}",
            a.addr, a.size, a.flags
        );
        let r = self.call("host_map", || desc, want, |ar| sys::ioctl(f.fd, &mut a, ar));
        if r.is_ok() {
            f.lock().hosts.push(a.gpu_va);
        }
    }
}
