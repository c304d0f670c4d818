//! Buffer objects and the GPU address space: `GEM_CREATE`, DRM's
//! `GEM_CLOSE`, `GEM_MMAP_OFFSET` (and CPU mappings of BOs), `VM_BIND`,
//! `VM_UNBIND`, each with well-formed arguments or with one broken on
//! purpose (stale and random handles, sizes, offsets and VAs at the edges
//! of the BO and of the user range, unknown flags, non-zero padding).

use vgpu_umd::uapi;

use crate::expect::Expect;
use crate::sys;
use crate::worker::{Bo, FileState, Kit, Mapping, Worker, KIT_CMD_BYTES, KIT_DATA_BYTES};

const PAGE: u64 = 4096;

impl Worker {
    /// A handle that this file does not hold now.
    pub fn stale_handle(&mut self, st: &FileState) -> u32 {
        for _ in 0..4 {
            let h = match self.rng.below(3) {
                0 if !st.closed.is_empty() => *self.rng.pick(&st.closed),
                1 => self.rng.edge_u32(),
                _ => self.rng.range(0, 64) as u32,
            };
            if !st.has_handle(h) {
                return h;
            }
        }
        u32::MAX
    }

    /// `GEM_CREATE`.
    pub fn op_gem_create(&mut self, fi: usize) {
        let f = self.files[fi].clone();
        let (size, flags, want) = match self.rng.below(10) {
            // Well formed: mostly small, some 2 MiB and larger.
            0..=5 => {
                let size = match self.rng.below(10) {
                    0..=5 => self.rng.range(1, 64 * 1024),
                    6 | 7 => self.rng.range(1, 16) * PAGE,
                    8 => (2 << 20) * self.rng.range(1, 4),
                    _ => *self.rng.pick(&[
                        1,
                        PAGE - 1,
                        PAGE,
                        PAGE + 1,
                        (2 << 20) - PAGE,
                        (2 << 20) + PAGE,
                        64 << 20,
                        uapi::GEM_MAX_SIZE,
                    ]),
                };
                let flags = if self.rng.chance(1, 4) {
                    uapi::GEM_CREATE_LAZY
                } else {
                    0
                };
                (size, flags, Expect::VALID)
            }
            // Sizes past the edges.
            6..=8 => {
                let size = *self.rng.pick(&[
                    0,
                    uapi::GEM_MAX_SIZE + 1,
                    uapi::GEM_MAX_SIZE + PAGE,
                    u64::MAX,
                    u64::MAX - PAGE + 2,
                    1 << 63,
                    1 << 40,
                ]);
                (size, 0, Expect::BAD)
            }
            // Unknown flags.
            _ => {
                // At least one bit outside the known ones, any known ones.
                let flags = (self.rng.u32() | 1 << 16) & !0xffff
                    | (self.rng.u32() & uapi::GEM_CREATE_FLAGS);
                (PAGE, flags, Expect::BAD)
            }
        };
        let mut a = uapi::DrmVgpuGemCreate {
            size,
            flags,
            handle: 0,
        };
        let r = self.call(
            "gem_create",
            || format!("size {size:#x} flags {flags:#x}"),
            want,
            |ar| sys::ioctl(f.fd, &mut a, ar),
        );
        if r.is_ok() {
            let mut st = f.lock();
            st.closed.retain(|&h| h != a.handle);
            st.bos.push(Bo {
                handle: a.handle,
                size: size.next_multiple_of(PAGE),
            });
        }
    }

    /// DRM's `GEM_CLOSE`: a held handle (its mappings stay), with non-zero
    /// padding (which the DRM core ignores), a stale one.
    pub fn op_gem_close(&mut self, fi: usize) {
        let f = self.files[fi].clone();
        let (handle, pad, want) = {
            let st = f.lock();
            match self.rng.below(6) {
                0..=3 if !st.bos.is_empty() => {
                    let b = *self.rng.pick(&st.bos);
                    (b.handle, 0, Expect::VALID)
                }
                // DRM's GEM_CLOSE does not look at its padding: closed.
                4 if !st.bos.is_empty() => {
                    let b = *self.rng.pick(&st.bos);
                    (b.handle, self.rng.u32() | 1, Expect::VALID)
                }
                _ => (self.stale_handle(&st), 0, Expect::BAD),
            }
        };
        let mut a = uapi::DrmGemClose { handle, pad };
        let r = self.call(
            "gem_close",
            || format!("handle {handle} pad {pad:#x}"),
            want,
            |ar| sys::ioctl(f.fd, &mut a, ar),
        );
        if r.is_ok() {
            let mut st = f.lock();
            st.bos.retain(|b| b.handle != handle);
            st.closed.push(handle);
        }
    }

    /// `GEM_MMAP_OFFSET`, and sometimes `mmap(2)` of the BO with a few of
    /// its pages touched (kept mapped for a while, or unmapped at once).
    pub fn op_mmap(&mut self, fi: usize) {
        let f = self.files[fi].clone();
        let (bo, pad, want) = {
            let st = f.lock();
            match self.rng.below(5) {
                0..=2 if !st.bos.is_empty() => (Some(*self.rng.pick(&st.bos)), 0, Expect::VALID),
                3 if !st.bos.is_empty() => (
                    Some(*self.rng.pick(&st.bos)),
                    self.rng.u32() | 1,
                    Expect::BAD,
                ),
                _ => (
                    Some(Bo {
                        handle: self.stale_handle(&st),
                        size: PAGE,
                    }),
                    0,
                    Expect::BAD,
                ),
            }
        };
        let Some(bo) = bo else { return };
        let mut a = uapi::DrmVgpuGemMmapOffset {
            handle: bo.handle,
            pad,
            offset: 0,
        };
        let r = self.call(
            "mmap_offset",
            || format!("handle {} pad {pad:#x}", bo.handle),
            want,
            |ar| sys::ioctl(f.fd, &mut a, ar),
        );
        if r.is_err() || !self.rng.chance(1, 2) {
            return;
        }
        // Whole object, or a length past it (refused).
        let len = if self.rng.chance(1, 8) {
            bo.size + PAGE
        } else {
            bo.size
        } as usize;
        let offset = a.offset;
        let fd = f.fd;
        let mut addr = 0usize;
        let want = if len as u64 > bo.size {
            Expect::bad_or(&[])
        } else {
            Expect::valid_or(&[])
        };
        let r = self.call(
            "mmap",
            || format!("handle {} len {len:#x} offset {offset:#x}", bo.handle),
            want,
            |_| {
                // SAFETY: a new shared mapping of the node; nothing refers
                // to the range the kernel picks.
                let p = unsafe {
                    libc::mmap(
                        std::ptr::null_mut(),
                        len,
                        libc::PROT_READ | libc::PROT_WRITE,
                        libc::MAP_SHARED,
                        fd,
                        offset as libc::off_t,
                    )
                };
                if p == libc::MAP_FAILED {
                    Err(std::io::Error::last_os_error()
                        .raw_os_error()
                        .unwrap_or(libc::EIO))
                } else {
                    addr = p as usize;
                    Ok(())
                }
            },
        );
        if r.is_err() {
            return;
        }
        // A few pages touched (at most 8: memory stays bounded).
        let pages = len / PAGE as usize;
        for _ in 0..self.rng.range(0, 8.min(pages as u64)) {
            let pg = self.rng.below(pages as u64) as usize;
            let p = (addr + pg * PAGE as usize) as *mut u64;
            // SAFETY: inside the object's mapping made above (pg < pages,
            // len ≤ the object's size).
            unsafe { p.write_volatile(self.rng.next()) };
        }
        if self.rng.chance(1, 2) {
            self.maps.push((addr, len));
        } else {
            // SAFETY: the mapping made above, no longer used.
            unsafe { libc::munmap(addr as *mut libc::c_void, len) };
        }
        // Keep the number of CPU mappings bounded.
        while self.maps.len() > 16 {
            let (p, l) = self.maps.remove(0);
            // SAFETY: a mapping this worker made and still owns.
            unsafe { libc::munmap(p as *mut libc::c_void, l) };
        }
    }

    /// `VM_BIND`.
    pub fn op_vm_bind(&mut self, fi: usize) {
        let f = self.files[fi].clone();
        let rw = uapi::VM_BIND_READ | uapi::VM_BIND_WRITE;
        let (a, want) = {
            let mut st = f.lock();
            if st.bos.is_empty() {
                return;
            }
            let bo = *self.rng.pick(&st.bos);
            let flags = match self.rng.below(4) {
                0 => rw,
                1 => uapi::VM_BIND_READ | uapi::VM_BIND_EXEC,
                2 => self.rng.range(1, 7) as u32,
                _ => uapi::VM_BIND_READ,
            };
            let pages = bo.size / PAGE;
            let off = self.rng.below(pages) * PAGE;
            let size = self.rng.range(1, pages - off / PAGE) * PAGE;
            // 2 MiB aligned VAs sometimes: the 2 MiB page path.
            let align = if self.rng.chance(1, 3) { 2 << 20 } else { PAGE };
            let va = self.alloc_va(&mut st, size, align);
            let valid = uapi::DrmVgpuVmBind {
                handle: bo.handle,
                flags,
                bo_offset: off,
                va: va.unwrap_or(0),
                size,
            };
            match self.rng.below(12) {
                0..=5 if va.is_some() => (valid, Expect::VALID),
                // An existing mapping's range, or one overlapping it.
                6 if !st.maps.is_empty() => {
                    let m = *self.rng.pick(&st.maps);
                    let va = m.va + self.rng.below(m.size / PAGE) * PAGE;
                    (
                        uapi::DrmVgpuVmBind {
                            va,
                            size: PAGE,
                            bo_offset: 0,
                            ..valid
                        },
                        Expect::bad_or(&[libc::EEXIST]),
                    )
                }
                7 => (
                    uapi::DrmVgpuVmBind {
                        handle: self.stale_handle(&st),
                        ..valid
                    },
                    Expect::BAD,
                ),
                8 => {
                    // Flags: none, or unknown bits.
                    let flags = if self.rng.chance(1, 2) {
                        0
                    } else {
                        self.rng.u32() | 8
                    };
                    (uapi::DrmVgpuVmBind { flags, ..valid }, Expect::BAD)
                }
                9 => {
                    // Sizes and offsets past the BO, unaligned, zero, huge.
                    let (bo_offset, size) = *self.rng.pick(&[
                        (0, 0),
                        (0, bo.size + PAGE),
                        (bo.size, PAGE),
                        (bo.size - PAGE, 2 * PAGE),
                        (1, PAGE),
                        (0, PAGE + 1),
                        (0, !(PAGE - 1)),
                        (!(PAGE - 1), PAGE),
                        (PAGE, u64::MAX - 2 * PAGE + 1),
                    ]);
                    (
                        uapi::DrmVgpuVmBind {
                            bo_offset,
                            size,
                            ..valid
                        },
                        Expect::bad_or(&[libc::EEXIST]),
                    )
                }
                _ => {
                    // VAs at and past the edges of the user range.
                    let (s, e) = (self.dev.va_start, self.dev.va_end);
                    let va = *self.rng.pick(&[
                        0,
                        s - PAGE,
                        s - size.min(s),
                        e,
                        e - PAGE,
                        e + (16 << 20),
                        !(PAGE - 1),
                        (u64::MAX - size + 1) & !(PAGE - 1),
                        s + 1,
                        1 << 63,
                        1u64 << 48,
                    ]);
                    let ok_edge = va >= s && va.checked_add(size).is_some_and(|end| end <= e);
                    let want = if ok_edge && !st.overlaps(va, size) && va.is_multiple_of(PAGE) {
                        Expect::VALID
                    } else {
                        Expect::bad_or(&[libc::EEXIST])
                    };
                    (uapi::DrmVgpuVmBind { va, ..valid }, want)
                }
            }
        };
        let mut arg = a;
        let r = self.call(
            "vm_bind",
            || {
                format!(
                    "handle {} flags {:#x} off {:#x} va {:#x} size {:#x}",
                    a.handle, a.flags, a.bo_offset, a.va, a.size
                )
            },
            want,
            |ar| sys::ioctl(f.fd, &mut arg, ar),
        );
        if r.is_ok() {
            f.lock().maps.push(Mapping {
                va: a.va,
                size: a.size,
            });
        }
        // Bounded: page tables come from a fixed pool.
        let too_many = f.lock().maps.len() > 48;
        if too_many {
            self.op_vm_unbind_exact(fi);
        }
    }

    fn op_vm_unbind_exact(&mut self, fi: usize) {
        let f = self.files[fi].clone();
        let m = {
            let st = f.lock();
            let kit = st.kit;
            let ms: Vec<Mapping> = st
                .maps
                .iter()
                .filter(|m| kit.is_none_or(|k| m.va != k.cmd_va && m.va != k.data_va))
                .copied()
                .collect();
            if ms.is_empty() {
                return;
            }
            *self.rng.pick(&ms)
        };
        self.unbind(fi, m.va, m.size, Expect::VALID);
    }

    /// `VM_UNBIND` of `[va, va + size)`; an exact mapping is always
    /// judged well formed, whatever the caller meant.
    fn unbind(&mut self, fi: usize, va: u64, size: u64, want: Expect) {
        let f = self.files[fi].clone();
        let exact = f.lock().maps.iter().any(|m| m.va == va && m.size == size);
        let want = if exact { Expect::VALID } else { want };
        let mut a = uapi::DrmVgpuVmUnbind { va, size };
        let r = self.call(
            "vm_unbind",
            || format!("va {va:#x} size {size:#x}"),
            want,
            |ar| sys::ioctl(f.fd, &mut a, ar),
        );
        if r.is_ok() || r == Err(libc::EIO) {
            // EIO: unmapped, its pages kept until the file closes.
            f.lock().maps.retain(|m| !(m.va == va && m.size == size));
        }
    }

    /// `VM_UNBIND`: an exact mapping, or a range that is not one (part of
    /// a mapping, a larger one, nothing there, edges).
    pub fn op_vm_unbind(&mut self, fi: usize) {
        let f = self.files[fi].clone();
        let (va, size, want) = {
            let st = f.lock();
            let kit = st.kit;
            let m = if st.maps.is_empty() {
                None
            } else {
                Some(*self.rng.pick(&st.maps))
            };
            match (self.rng.below(6), m) {
                // The kit's own mappings stay.
                (0..=2, Some(m)) if kit.is_none_or(|k| m.va != k.cmd_va && m.va != k.data_va) => {
                    (m.va, m.size, Expect::VALID)
                }
                (3, Some(m)) if m.size > PAGE => (m.va, m.size - PAGE, Expect::BAD),
                (4, Some(m)) => (
                    m.va + PAGE * self.rng.range(0, 1),
                    m.size + PAGE,
                    Expect::BAD,
                ),
                _ => {
                    let va = match self.rng.below(3) {
                        0 => self.rng.edge_u64(),
                        1 => self.dev.va_end,
                        _ => self.dev.va_start + self.rng.below(1 << 20) * PAGE,
                    };
                    let size = *self.rng.pick(&[0, PAGE, 1, u64::MAX, 2 << 20]);
                    (va, size, Expect::BAD)
                }
            }
        };
        self.unbind(fi, va, size, want);
    }

    /// Sets up the file's submission kit (once): a command BO bound
    /// READ|EXEC and mapped, a data BO bound READ|WRITE (lazy sometimes).
    /// What is created is recorded at once, so that a kit left half made
    /// leaves no object the fuzzer does not know.
    pub fn ensure_kit(&mut self, fi: usize) -> Option<Kit> {
        let f = self.files[fi].clone();
        if let Some(k) = f.lock().kit {
            return Some(k);
        }
        let fd = f.fd;
        let create = |w: &mut Worker, size: u64, flags: u32| -> Option<u32> {
            let mut a = uapi::DrmVgpuGemCreate {
                size,
                flags,
                handle: 0,
            };
            w.call(
                "gem_create",
                || format!("kit size {size:#x} flags {flags:#x}"),
                Expect::VALID,
                |ar| sys::ioctl(fd, &mut a, ar),
            )
            .ok()?;
            let mut st = f.lock();
            st.closed.retain(|&h| h != a.handle);
            st.bos.push(Bo {
                handle: a.handle,
                size,
            });
            Some(a.handle)
        };
        let bind = |w: &mut Worker, handle: u32, va: u64, size: u64, flags: u32| -> Option<()> {
            let mut a = uapi::DrmVgpuVmBind {
                handle,
                flags,
                bo_offset: 0,
                va,
                size,
            };
            let overlaps = f.lock().overlaps(va, size);
            let want = if overlaps {
                Expect::bad_or(&[libc::EEXIST])
            } else {
                Expect::VALID
            };
            w.call(
                "vm_bind",
                || format!("kit handle {handle} va {va:#x} size {size:#x}"),
                want,
                |ar| sys::ioctl(fd, &mut a, ar),
            )
            .ok()?;
            f.lock().maps.push(Mapping { va, size });
            Some(())
        };
        let cmd = create(self, KIT_CMD_BYTES as u64, 0)?;
        let lazy = if self.rng.chance(1, 4) {
            uapi::GEM_CREATE_LAZY
        } else {
            0
        };
        let data = create(self, KIT_DATA_BYTES, lazy)?;
        let (cmd_va, data_va) = (self.dev.va_start, self.dev.va_start + (2 << 20));
        let rx = uapi::VM_BIND_READ | uapi::VM_BIND_EXEC;
        bind(self, cmd, cmd_va, KIT_CMD_BYTES as u64, rx)?;
        let rw = uapi::VM_BIND_READ | uapi::VM_BIND_WRITE;
        bind(self, data, data_va, KIT_DATA_BYTES, rw)?;
        let mut off = uapi::DrmVgpuGemMmapOffset {
            handle: cmd,
            ..Default::default()
        };
        self.call(
            "mmap_offset",
            || format!("kit handle {cmd}"),
            Expect::VALID,
            |ar| sys::ioctl(fd, &mut off, ar),
        )
        .ok()?;
        // SAFETY: a new shared mapping of the command BO; only the kit
        // refers to it (unmapped when the file's state goes).
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                KIT_CMD_BYTES,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                off.offset as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        let kit = Kit {
            cmd_va,
            cmd_map: p as usize,
            cmd_len: KIT_CMD_BYTES,
            data_va,
            data_len: KIT_DATA_BYTES,
            next: 0,
        };
        f.lock().kit = Some(kit);
        Some(kit)
    }
}
