//! Guest test of the KMD's ioctls: happy paths, a table of bad arguments per
//! ioctl, use after close/destroy, and the GPU page tables the KMD builds
//! (checked through debugfs `vms`, which walks the real entries).
//!
//!   vgpu-kmd-test            every section
//!   vgpu-kmd-test gem vm     only these sections
//!   vgpu-kmd-test remap      (only when named) rebind a VA to another BO
//!                            after the GPU used it: every page must read
//!                            the new BO (the unbind invalidated the TLB)
//!
//! Prints `ok NAME` / `FAIL NAME: why` per check and a closing
//! `kmd-test: N passed, M failed`; exits 1 if anything failed.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::PathBuf;

use vgpu_umd::uapi::{self, param};
use vgpu_umd::Device;

const PAGE: u64 = 4096;

struct T {
    passed: u32,
    failed: u32,
}

impl T {
    fn check(&mut self, name: &str, ok: bool, why: impl FnOnce() -> String) {
        if ok {
            self.passed += 1;
            println!("ok {name}");
        } else {
            self.failed += 1;
            println!("FAIL {name}: {}", why());
        }
    }

    /// Checks that `r` is `Ok`.
    fn ok<V>(&mut self, name: &str, r: Result<V, i32>) -> Option<V> {
        match r {
            Ok(v) => {
                self.check(name, true, String::new);
                Some(v)
            }
            Err(e) => {
                self.check(name, false, || format!("errno {} ({})", e, errname(e)));
                None
            }
        }
    }

    /// Checks that `r` failed with `want`.
    fn err<V>(&mut self, name: &str, r: Result<V, i32>, want: i32) {
        match r {
            Ok(_) => self.check(name, false, || format!("succeeded, want {}", errname(want))),
            Err(e) => self.check(name, e == want, || {
                format!("errno {} ({}), want {}", e, errname(e), errname(want))
            }),
        }
    }
}

fn errname(e: i32) -> &'static str {
    match e {
        libc::EINVAL => "EINVAL",
        libc::ENOENT => "ENOENT",
        libc::EEXIST => "EEXIST",
        libc::ENOSPC => "ENOSPC",
        libc::ENOMEM => "ENOMEM",
        libc::EFAULT => "EFAULT",
        libc::EIO => "EIO",
        libc::EBUSY => "EBUSY",
        libc::EAGAIN => "EAGAIN",
        libc::ETIME => "ETIME",
        libc::ENODEV => "ENODEV",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::ETIMEDOUT => "ETIMEDOUT",
        _ => "?",
    }
}

/// An open render node.
struct Node {
    file: File,
}

impl Node {
    fn open(path: &PathBuf) -> Node {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .expect("open render node");
        Node { file }
    }

    fn ioctl<A>(&self, req: u32, arg: &mut A) -> Result<(), i32> {
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

    fn param(&self, p: u32) -> Result<u64, i32> {
        let mut a = uapi::DrmVgpuGetParam {
            param: p,
            ..Default::default()
        };
        self.ioctl(uapi::DRM_IOCTL_VGPU_GET_PARAM, &mut a)?;
        Ok(a.value)
    }

    fn gem_create(&self, size: u64, flags: u32) -> Result<u32, i32> {
        let mut a = uapi::DrmVgpuGemCreate {
            size,
            flags,
            handle: 0,
        };
        self.ioctl(uapi::DRM_IOCTL_VGPU_GEM_CREATE, &mut a)?;
        Ok(a.handle)
    }

    fn gem_close(&self, handle: u32) -> Result<(), i32> {
        let mut a = uapi::DrmGemClose { handle, pad: 0 };
        self.ioctl(uapi::DRM_IOCTL_GEM_CLOSE, &mut a)
    }

    fn mmap_offset(&self, handle: u32, pad: u32) -> Result<u64, i32> {
        let mut a = uapi::DrmVgpuGemMmapOffset {
            handle,
            pad,
            offset: 0,
        };
        self.ioctl(uapi::DRM_IOCTL_VGPU_GEM_MMAP_OFFSET, &mut a)?;
        Ok(a.offset)
    }

    fn mmap(&self, handle: u32, size: u64) -> Result<Map, i32> {
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

    fn bind(&self, handle: u32, bo_offset: u64, va: u64, size: u64, flags: u32) -> Result<(), i32> {
        let mut a = uapi::DrmVgpuVmBind {
            handle,
            flags,
            bo_offset,
            va,
            size,
        };
        self.ioctl(uapi::DRM_IOCTL_VGPU_VM_BIND, &mut a)
    }

    fn unbind(&self, va: u64, size: u64) -> Result<(), i32> {
        let mut a = uapi::DrmVgpuVmUnbind { va, size };
        self.ioctl(uapi::DRM_IOCTL_VGPU_VM_UNBIND, &mut a)
    }

    fn ctx_create(&self, priority: u32, engine_mask: u32, flags: u32) -> Result<u32, i32> {
        let mut a = uapi::DrmVgpuCtxCreate {
            priority,
            engine_mask,
            flags,
            ctx_id: 0,
        };
        self.ioctl(uapi::DRM_IOCTL_VGPU_CTX_CREATE, &mut a)?;
        Ok(a.ctx_id)
    }

    fn ctx_destroy(&self, ctx_id: u32) -> Result<(), i32> {
        let mut a = uapi::DrmVgpuCtxDestroy { ctx_id, pad: 0 };
        self.ioctl(uapi::DRM_IOCTL_VGPU_CTX_DESTROY, &mut a)
    }

    fn ctx_query(&self, ctx_id: u32) -> Result<uapi::DrmVgpuCtxQuery, i32> {
        let mut a = uapi::DrmVgpuCtxQuery {
            ctx_id,
            ..Default::default()
        };
        self.ioctl(uapi::DRM_IOCTL_VGPU_CTX_QUERY, &mut a)?;
        Ok(a)
    }

    fn query_stats(&self, a: &mut uapi::DrmVgpuQueryStats) -> Result<(), i32> {
        self.ioctl(uapi::DRM_IOCTL_VGPU_QUERY_STATS, a)
    }

    /// A `QUERY_STATS` with room for every context.
    fn stats(&self) -> Result<(uapi::DrmVgpuQueryStats, Vec<uapi::DrmVgpuCtxStats>), i32> {
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

    fn submit_raw(&self, a: &mut uapi::DrmVgpuSubmit) -> Result<u64, i32> {
        self.ioctl(uapi::DRM_IOCTL_VGPU_SUBMIT, a)?;
        Ok(a.seqno)
    }

    fn submit(
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

    fn wait(&self, fences: &[uapi::DrmVgpuFence], all: bool, timeout_ns: u64) -> Result<u32, i32> {
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

fn fence(ctx_id: u32, engine: u32, seqno: u64) -> uapi::DrmVgpuFence {
    uapi::DrmVgpuFence {
        ctx_id,
        engine,
        seqno,
    }
}

/// A command-buffer BO: programs at 256-byte slots (64-byte aligned, as gen
/// 2 engine packets require).
struct Cmds {
    map: Map,
    va: u64,
    generation: u32,
}

impl Cmds {
    /// Writes the packets `(opcode, payload)` at slot `slot`, padded with a
    /// NOP to a multiple of 8 bytes; returns the command buffer.
    fn program(&self, slot: usize, packets: &[(u8, Vec<u32>)]) -> uapi::DrmVgpuCmd {
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

fn lo(v: u64) -> u32 {
    v as u32
}

fn hi(v: u64) -> u32 {
    (v >> 32) as u32
}

fn copy(src: u64, dst: u64, size: u64) -> (u8, Vec<u32>) {
    (
        vgpu_hwif::packet::OP_COPY,
        vec![lo(src), hi(src), lo(dst), hi(dst), lo(size), hi(size)],
    )
}

fn fill(dst: u64, size: u64, pattern: u32) -> (u8, Vec<u32>) {
    (
        vgpu_hwif::packet::OP_FILL,
        vec![lo(dst), hi(dst), lo(size), hi(size), pattern],
    )
}

fn sem_wait_eq(va: u64, value: u64) -> (u8, Vec<u32>) {
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
struct Map {
    ptr: *mut u64,
    len: usize,
}

impl Map {
    fn write(&self, i: usize, v: u64) {
        assert!(i < self.len / 8);
        // SAFETY: In bounds of the live mapping (asserted).
        unsafe { self.ptr.add(i).write_volatile(v) }
    }

    fn read(&self, i: usize) -> u64 {
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

fn debugfs(name: &str) -> String {
    let Ok(dir) = std::fs::read_dir("/sys/kernel/debug/vgpu") else {
        return String::new();
    };
    for e in dir.flatten() {
        if let Ok(s) = std::fs::read_to_string(e.path().join(name)) {
            return s;
        }
    }
    String::new()
}

/// Path of debugfs file `name` of the (first) device.
fn debugfs_path(name: &str) -> PathBuf {
    std::fs::read_dir("/sys/kernel/debug/vgpu")
        .ok()
        .and_then(|d| d.flatten().next())
        .map_or_else(|| PathBuf::from("/nonexistent"), |e| e.path().join(name))
}

/// The debugfs `vms` line of the mapping at `va`, if any.
fn vm_line(va: u64) -> Option<String> {
    let key = format!("map va {:#x} ", va);
    debugfs("vms")
        .lines()
        .find(|l| l.trim_start().starts_with(&key))
        .map(|l| l.trim().to_string())
}

fn field(line: &str, name: &str) -> Option<String> {
    let mut it = line.split_whitespace();
    while let Some(w) = it.next() {
        if w == name {
            return it.next().map(str::to_string);
        }
    }
    None
}

fn objects() -> Vec<(String, i64)> {
    debugfs("objects")
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k.to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

fn object(name: &str) -> i64 {
    objects()
        .into_iter()
        .find(|(k, _)| k == name)
        .map_or(-1, |(_, v)| v)
}

fn test_gem(t: &mut T, path: &PathBuf) {
    let n = Node::open(path);
    let h = t
        .ok("gem: create 4 KiB", n.gem_create(PAGE, 0))
        .unwrap_or(0);
    t.check("gem: handle non-zero", h != 0, || "handle 0".into());
    t.err("gem: size 0", n.gem_create(0, 0), libc::EINVAL);
    t.err(
        "gem: size above max",
        n.gem_create(uapi::GEM_MAX_SIZE + 1, 0),
        libc::EINVAL,
    );
    t.err(
        "gem: size u64::MAX",
        n.gem_create(u64::MAX, 0),
        libc::EINVAL,
    );
    t.err(
        "gem: unknown flag",
        n.gem_create(PAGE, 1 << 5),
        libc::EINVAL,
    );
    t.ok(
        "gem: lazy object",
        n.gem_create(PAGE, uapi::GEM_CREATE_LAZY),
    );
    // 5000 bytes round up to two pages: the second page maps.
    if let Some(h2) = t.ok("gem: create 5000 bytes", n.gem_create(5000, 0)) {
        t.ok(
            "gem: mmap rounded-up size",
            n.mmap(h2, 2 * PAGE).map(|_| ()),
        );
    }
    t.err(
        "gem: mmap_offset bad handle",
        n.mmap_offset(0xdead, 0),
        libc::ENOENT,
    );
    t.err("gem: mmap_offset pad", n.mmap_offset(h, 1), libc::EINVAL);

    // Data written through one mapping is seen through another.
    if let Some(h3) = t.ok("gem: create 64 KiB", n.gem_create(16 * PAGE, 0)) {
        if let Some(m) = t.ok("gem: mmap", n.mmap(h3, 16 * PAGE)) {
            let fresh = (0..16 * 512).all(|i| m.read(i) == 0);
            t.check("gem: new object reads zero", fresh, || {
                "non-zero data".into()
            });
            for i in 0..16 * 512 {
                m.write(i, 0x5eed_0000_0000 + i as u64);
            }
        }
        if let Some(m) = t.ok("gem: mmap again", n.mmap(h3, 16 * PAGE)) {
            let same = (0..16 * 512).all(|i| m.read(i) == 0x5eed_0000_0000 + i as u64);
            t.check("gem: data persists across mappings", same, || {
                "data differs".into()
            });
        }
        t.ok("gem: close handle", n.gem_close(h3));
        t.err(
            "gem: mmap_offset after close",
            n.mmap_offset(h3, 0),
            libc::ENOENT,
        );
        t.err("gem: close twice", n.gem_close(h3), libc::EINVAL);
    }
}

fn test_vm(t: &mut T, path: &PathBuf) {
    let n = Node::open(path);
    let start = n.param(param::VA_START).unwrap_or(0);
    let end = n.param(param::VA_END).unwrap_or(0);
    let bits = n.param(param::VA_BITS).unwrap_or(0);
    t.check(
        "vm: user VA range inside the VA width",
        start >= PAGE && start < end && bits >= 32 && end < (1u64 << bits),
        || format!("start {start:#x} end {end:#x} bits {bits}"),
    );
    let rw = uapi::VM_BIND_READ | uapi::VM_BIND_WRITE;
    let h = n.gem_create(16 * PAGE, 0).unwrap_or(0);
    let va = start + 0x10_0000;

    if t.ok("vm: bind 2 pages rw", n.bind(h, 0, va, 2 * PAGE, rw))
        .is_some()
    {
        let l = vm_line(va).unwrap_or_default();
        t.check("vm: debugfs shows the mapping", !l.is_empty(), || {
            "no line".into()
        });
        t.check(
            "vm: page-table walk matches the BO pages",
            field(&l, "check").as_deref() == Some("ok")
                && field(&l, "walk_4k").as_deref() == Some("2")
                && field(&l, "perms").as_deref() == Some("rw-"),
            || l.clone(),
        );
    }
    // Bad arguments.
    let bad: &[(&str, u32, u64, u64, u64, u32, i32)] = &[
        ("overlap same range", h, 0, va, 2 * PAGE, rw, libc::EEXIST),
        (
            "overlap first page",
            h,
            0,
            va - PAGE,
            2 * PAGE,
            rw,
            libc::EEXIST,
        ),
        (
            "overlap last page",
            h,
            0,
            va + PAGE,
            2 * PAGE,
            rw,
            libc::EEXIST,
        ),
        (
            "unaligned va",
            h,
            0,
            va + 0x10_0000 + 8,
            PAGE,
            rw,
            libc::EINVAL,
        ),
        (
            "unaligned size",
            h,
            0,
            va + 0x10_0000,
            PAGE + 1,
            rw,
            libc::EINVAL,
        ),
        (
            "unaligned bo offset",
            h,
            8,
            va + 0x10_0000,
            PAGE,
            rw,
            libc::EINVAL,
        ),
        ("size 0", h, 0, va + 0x10_0000, 0, rw, libc::EINVAL),
        (
            "beyond the bo",
            h,
            15 * PAGE,
            va + 0x10_0000,
            2 * PAGE,
            rw,
            libc::EINVAL,
        ),
        (
            "bo offset overflow",
            h,
            u64::MAX - PAGE + 1,
            va + 0x10_0000,
            PAGE,
            rw,
            libc::EINVAL,
        ),
        ("below VA_START", h, 0, 0, PAGE, rw, libc::EINVAL),
        ("at VA_END", h, 0, end, PAGE, rw, libc::EINVAL),
        (
            "crossing VA_END",
            h,
            0,
            end - PAGE,
            2 * PAGE,
            rw,
            libc::EINVAL,
        ),
        (
            "va overflow",
            h,
            0,
            u64::MAX - PAGE + 1,
            2 * PAGE,
            rw,
            libc::EINVAL,
        ),
        ("no permission", h, 0, va + 0x10_0000, PAGE, 0, libc::EINVAL),
        (
            "unknown flag",
            h,
            0,
            va + 0x10_0000,
            PAGE,
            rw | 8,
            libc::EINVAL,
        ),
        (
            "bad handle",
            0xbad,
            0,
            va + 0x10_0000,
            PAGE,
            rw,
            libc::ENOENT,
        ),
    ];
    for &(name, hh, off, v, s, fl, want) in bad {
        t.err(&format!("vm: bind {name}"), n.bind(hh, off, v, s, fl), want);
    }
    // Unbind needs the exact range.
    t.err("vm: unbind wrong size", n.unbind(va, PAGE), libc::ENOENT);
    t.err(
        "vm: unbind wrong start",
        n.unbind(va + PAGE, PAGE),
        libc::ENOENT,
    );
    t.err(
        "vm: unbind nothing",
        n.unbind(va + 0x100_0000, PAGE),
        libc::ENOENT,
    );
    t.ok("vm: unbind", n.unbind(va, 2 * PAGE));
    t.check(
        "vm: mapping gone from debugfs",
        vm_line(va).is_none(),
        || "still listed".into(),
    );
    t.err("vm: unbind twice", n.unbind(va, 2 * PAGE), libc::ENOENT);

    // Every level of the table: the top of the user range, and a range
    // crossing a 1 GiB (level-2) and a 512 GiB (level-3, 48-bit only)
    // boundary; permissions as asked.
    let top = end - 4 * PAGE;
    t.ok(
        "vm: bind at the top of the range",
        n.bind(h, 0, top, 4 * PAGE, uapi::VM_BIND_READ),
    );
    let gb = (start + (1 << 30)) & !((1u64 << 30) - 1);
    t.ok(
        "vm: bind across a 1 GiB boundary",
        n.bind(
            h,
            0,
            gb - 2 * PAGE,
            4 * PAGE,
            uapi::VM_BIND_READ | uapi::VM_BIND_EXEC,
        ),
    );
    for (name, v, perms) in [("top", top, "r--"), ("1 GiB", gb - 2 * PAGE, "r-x")] {
        let l = vm_line(v).unwrap_or_default();
        t.check(
            &format!("vm: walk ok at {name}"),
            field(&l, "check").as_deref() == Some("ok")
                && field(&l, "walk_4k").as_deref() == Some("4")
                && field(&l, "perms").as_deref() == Some(perms),
            || l.clone(),
        );
    }
    if bits > 39 {
        let tb = 1u64 << 39;
        t.ok(
            "vm: bind across 512 GiB",
            n.bind(h, 0, tb - 2 * PAGE, 4 * PAGE, rw),
        );
        let l = vm_line(tb - 2 * PAGE).unwrap_or_default();
        t.check(
            "vm: walk ok across 512 GiB",
            field(&l, "check").as_deref() == Some("ok")
                && field(&l, "walk_4k").as_deref() == Some("4"),
            || l.clone(),
        );
    }

    // A mapping keeps its BO after the handle is closed.
    let h2 = n.gem_create(4 * PAGE, 0).unwrap_or(0);
    let va2 = start + 0x20_0000;
    t.ok("vm: bind second bo", n.bind(h2, PAGE, va2, 2 * PAGE, rw));
    let bos = object("bos");
    t.ok("vm: close bound handle", n.gem_close(h2));
    t.check(
        "vm: bound bo outlives its handle",
        object("bos") == bos,
        || format!("bos {} -> {}", bos, object("bos")),
    );
    let l = vm_line(va2).unwrap_or_default();
    t.check(
        "vm: mapping intact after handle close",
        field(&l, "check").as_deref() == Some("ok"),
        || l.clone(),
    );
    t.err(
        "vm: bind closed handle",
        n.bind(h2, 0, va2 + 0x10_0000, PAGE, rw),
        libc::ENOENT,
    );
    t.ok("vm: unbind last reference", n.unbind(va2, 2 * PAGE));
    t.check("vm: bo freed at unbind", object("bos") == bos - 1, || {
        format!("bos {} -> {}", bos, object("bos"))
    });

    // Lazy BOs: nothing is mapped until the GPU faults.
    let hl = n.gem_create(8 * PAGE, uapi::GEM_CREATE_LAZY).unwrap_or(0);
    let val = start + 0x40_0000;
    t.ok("vm: bind lazy bo", n.bind(hl, 0, val, 8 * PAGE, rw));
    let l = vm_line(val).unwrap_or_default();
    t.check(
        "vm: lazy mapping has no entries",
        field(&l, "lazy").as_deref() == Some("1")
            && field(&l, "walk_4k").as_deref() == Some("0")
            && field(&l, "check").as_deref() == Some("ok"),
        || l.clone(),
    );

    // A larger BO: the guest kernel backs shmem with 2 MiB folios where
    // the object is large enough, so a 2 MiB-aligned bind of it maps with
    // 2 MiB GPU pages (when the device offers them); an offset that breaks
    // the alignment falls back to 4 KiB pages.
    if let Ok(hb) = n.gem_create(4 << 20, 0) {
        let huge = n.param(param::PAGE_SIZES).unwrap_or(0) & (2 << 20) != 0;
        let vb = (start + (64 << 20)).next_multiple_of(2 << 20);
        t.ok(
            "vm: bind 4 MiB at a 2 MiB boundary",
            n.bind(hb, 0, vb, 4 << 20, rw),
        );
        let l = vm_line(vb).unwrap_or_default();
        t.check(
            "vm: 4 MiB walk ok",
            field(&l, "check").as_deref() == Some("ok"),
            || l.clone(),
        );
        let (p4, p2) = (field(&l, "pages_4k"), field(&l, "pages_2m"));
        println!(
            "info 4 MiB bind: pages_4k {} pages_2m {}",
            p4.as_deref().unwrap_or_default(),
            p2.as_deref().unwrap_or_default()
        );
        let want = if huge { ("0", "2") } else { ("1024", "0") };
        t.check(
            "vm: 4 MiB at 2 MiB alignment uses 2 MiB pages",
            p4.as_deref() == Some(want.0)
                && p2.as_deref() == Some(want.1)
                && field(&l, "walk_2m").as_deref() == Some(want.1),
            || l.clone(),
        );
        let vo = start + (72 << 20) + PAGE;
        t.ok(
            "vm: bind 2 MiB at a 4 KiB offset",
            n.bind(hb, 0, vo, 2 << 20, rw),
        );
        let l = vm_line(vo).unwrap_or_default();
        t.check(
            "vm: unaligned bind uses 4 KiB pages",
            field(&l, "pages_4k").as_deref() == Some("512")
                && field(&l, "pages_2m").as_deref() == Some("0")
                && field(&l, "check").as_deref() == Some("ok"),
            || l.clone(),
        );
    }
}

/// Objects return to zero after create/bind/unbind/close cycles and after
/// closing files with mappings left in place.
fn test_leaks(t: &mut T, path: &PathBuf, cycles: u32) {
    let before = (
        object("bos"),
        object("mappings"),
        object("pt_pool_used"),
        object("contexts"),
    );
    {
        let n = Node::open(path);
        let start = n.param(param::VA_START).unwrap_or(0);
        let rw = uapi::VM_BIND_READ | uapi::VM_BIND_WRITE;
        let mut fails = 0;
        for i in 0..cycles {
            let va = start + u64::from(i % 64) * (1 << 30);
            // The slot's mapping from 64 cycles ago goes first.
            if i >= 64 && n.unbind(va, PAGE).is_err() {
                fails += 1;
            }
            let r = n.gem_create(2 * PAGE, 0).and_then(|h| {
                n.bind(h, 0, va, 2 * PAGE, rw)?;
                n.unbind(va, 2 * PAGE)?;
                n.bind(h, 0, va, PAGE, rw)?;
                n.gem_close(h)
            });
            if r.is_err() {
                fails += 1;
            }
        }
        t.check(&format!("leaks: {cycles} cycles"), fails == 0, || {
            format!("{fails} failed")
        });
        // Contexts: create, bind, submit, wait, destroy.
        let generation = n.param(param::GENERATION).unwrap_or(1) as u32;
        let t0 = std::time::Instant::now();
        let mut fails = 0;
        for i in 0..cycles {
            let r = (|| -> Result<(), i32> {
                let hc = n.gem_create(PAGE, 0)?;
                let hd = n.gem_create(PAGE, 0)?;
                let cva = start + (100 << 30) + u64::from(i % 64) * (4 << 20);
                let dva = cva + (2 << 20);
                n.bind(hc, 0, cva, PAGE, uapi::VM_BIND_READ | uapi::VM_BIND_EXEC)?;
                n.bind(hd, 0, dva, PAGE, rw)?;
                let cmds = Cmds {
                    map: n.mmap(hc, PAGE)?,
                    va: cva,
                    generation,
                };
                let c = cmds.program(0, &[fill(dva, 64, i)]);
                let ctx = n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1, 0)?;
                let s = n.submit(ctx, 0, &[c], &[])?;
                n.wait(&[fence(ctx, 0, s)], true, 5_000 * MS)?;
                n.ctx_destroy(ctx)?;
                n.unbind(cva, PAGE)?;
                n.unbind(dva, PAGE)?;
                n.gem_close(hc)?;
                n.gem_close(hd)
            })();
            if r.is_err() {
                fails += 1;
            }
        }
        println!("info {cycles} context cycles in {:?}", t0.elapsed());
        t.check(
            &format!("leaks: {cycles} context cycles"),
            fails == 0,
            || format!("{fails} failed"),
        );
        t.check(
            "leaks: mappings left bound",
            object("mappings") >= i64::from(cycles.min(64)),
            || format!("mappings {}", object("mappings")),
        );
    }
    let after = (
        object("bos"),
        object("mappings"),
        object("pt_pool_used"),
        object("contexts"),
    );
    t.check("leaks: counts back after close", before == after, || {
        format!("bos/mappings/pt_pool_used/contexts {before:?} -> {after:?}")
    });
}

const MS: u64 = 1_000_000;

/// Contexts, submission, fences, faults, hangs and resets (needs the device
/// model; run with a short `job_timeout_ms`).
fn test_submit(t: &mut T, path: &PathBuf) {
    let n = Node::open(path);
    let start = n.param(param::VA_START).unwrap_or(0);
    let generation = n.param(param::GENERATION).unwrap_or(1) as u32;
    let rw = uapi::VM_BIND_READ | uapi::VM_BIND_WRITE;
    let rx = uapi::VM_BIND_READ | uapi::VM_BIND_EXEC;
    let copy_only = 1 << uapi::ENGINE_COPY;

    // Context arguments.
    for (name, prio, mask, flags) in [
        ("priority 4", 4, copy_only, 0),
        ("engine mask 0", 1, 0, 0),
        ("engine mask 4", 1, 4, 0),
        ("unknown flag", 1, copy_only, 2),
    ] {
        t.err(
            &format!("ctx: create {name}"),
            n.ctx_create(prio, mask, flags),
            libc::EINVAL,
        );
    }
    let Some(a) = t.ok(
        "ctx: create copy context",
        n.ctx_create(uapi::CTX_PRIORITY_NORMAL, copy_only, 0),
    ) else {
        return;
    };
    let q = n.ctx_query(a).unwrap_or_default();
    t.check(
        "ctx: new context clean",
        q.reset_status == uapi::CTX_RESET_NONE && q.state == 0,
        || format!("{q:?}"),
    );
    t.err("ctx: query unknown", n.ctx_query(0xbad), libc::ENOENT);

    // Memory: cmd buffers (rx), src, dst, semaphore (rw).
    let hc = n.gem_create(16 * PAGE, 0).unwrap_or(0);
    let cva = start + 0x100_0000;
    let _ = n.bind(hc, 0, cva, 16 * PAGE, rx);
    let cmds = Cmds {
        map: n.mmap(hc, 16 * PAGE).expect("mmap cmds"),
        va: cva,
        generation,
    };
    let size = 16 * PAGE;
    let hs = n.gem_create(size, 0).unwrap_or(0);
    let hd = n.gem_create(size, 0).unwrap_or(0);
    let hsem = n.gem_create(PAGE, 0).unwrap_or(0);
    let (sva, dva, semva) = (start + 0x200_0000, start + 0x300_0000, start + 0x400_0000);
    let _ = n.bind(hs, 0, sva, size, rw);
    let _ = n.bind(hd, 0, dva, size, rw);
    let _ = n.bind(hsem, 0, semva, PAGE, rw);
    let src = n.mmap(hs, size).expect("mmap src");
    let dst = n.mmap(hd, size).expect("mmap dst");
    let sem = n.mmap(hsem, PAGE).expect("mmap sem");
    for i in 0..(size / 8) as usize {
        src.write(i, 0xc0de_0000_0000_0000 | i as u64);
    }

    // Copy via SUBMIT and verify.
    let c = cmds.program(0, &[copy(sva, dva, size)]);
    let t0 = std::time::Instant::now();
    if let Some(s1) = t.ok("submit: copy 64 KiB", n.submit(a, 0, &[c], &[])) {
        t.check("submit: first seqno is 1", s1 == 1, || {
            format!("seqno {s1}")
        });
        t.ok(
            "wait: copy fence",
            n.wait(&[fence(a, 0, s1)], true, 5_000 * MS),
        );
        let same =
            (0..(size / 8) as usize).all(|i| dst.read(i) == 0xc0de_0000_0000_0000 | i as u64);
        t.check("submit: copied data matches", same, || "dst differs".into());
        println!("info copy 64 KiB submit-to-signal {:?}", t0.elapsed());
        t.ok(
            "wait: signalled fence again",
            n.wait(&[fence(a, 0, s1)], true, 0),
        );
    }
    // FILL.
    let c = cmds.program(1, &[fill(dva, PAGE, 0xabcd_1234)]);
    if let Ok(s2) = n.submit(a, 0, &[c], &[]) {
        t.ok(
            "wait: fill fence",
            n.wait(&[fence(a, 0, s2)], true, 5_000 * MS),
        );
        t.check(
            "submit: fill wrote the pattern",
            dst.read(0) == 0xabcd_1234_abcd_1234,
            || format!("{:#x}", dst.read(0)),
        );
    }

    // Bad submissions.
    let good = cmds.program(2, &[fill(dva, 64, 1)]);
    let unmapped = uapi::DrmVgpuCmd {
        va: start + 0x7000_0000,
        size: 32,
    };
    let not_exec = uapi::DrmVgpuCmd { va: sva, size: 32 };
    let past_end = uapi::DrmVgpuCmd {
        va: cva + 16 * PAGE - 16,
        size: 32,
    };
    let odd = uapi::DrmVgpuCmd { va: cva, size: 12 };
    t.err(
        "submit: cmd not mapped",
        n.submit(a, 0, &[unmapped], &[]),
        libc::EINVAL,
    );
    t.err(
        "submit: cmd not executable",
        n.submit(a, 0, &[not_exec], &[]),
        libc::EINVAL,
    );
    t.err(
        "submit: cmd past its mapping",
        n.submit(a, 0, &[past_end], &[]),
        libc::EINVAL,
    );
    t.err(
        "submit: cmd size not 8-aligned",
        n.submit(a, 0, &[odd], &[]),
        libc::EINVAL,
    );
    t.err("submit: zero cmds", n.submit(a, 0, &[], &[]), libc::EINVAL);
    let many = vec![good; 65];
    t.err("submit: 65 cmds", n.submit(a, 0, &many, &[]), libc::EINVAL);
    t.err(
        "submit: unknown context",
        n.submit(0xbad, 0, &[good], &[]),
        libc::ENOENT,
    );
    t.err(
        "submit: engine not selected",
        n.submit(a, 1, &[good], &[]),
        libc::EINVAL,
    );
    t.err(
        "submit: engine 7",
        n.submit(a, 7, &[good], &[]),
        libc::EINVAL,
    );
    t.err(
        "submit: in-fence never submitted",
        n.submit(a, 0, &[good], &[fence(a, 0, 1 << 40)]),
        libc::EINVAL,
    );
    t.err(
        "submit: in-fence seqno 0",
        n.submit(a, 0, &[good], &[fence(a, 0, 0)]),
        libc::EINVAL,
    );
    let mut raw = uapi::DrmVgpuSubmit {
        ctx_id: a,
        cmds: &good as *const _ as u64,
        num_cmds: 1,
        flags: 4,
        ..Default::default()
    };
    t.err("submit: unknown flag", n.submit_raw(&mut raw), libc::EINVAL);
    let mut raw = uapi::DrmVgpuSubmit {
        ctx_id: a,
        cmds: 8,
        num_cmds: 1,
        ..Default::default()
    };
    t.err(
        "submit: bad cmds pointer",
        n.submit_raw(&mut raw),
        libc::EFAULT,
    );
    t.err("wait: no fences", n.wait(&[], true, 0), libc::EINVAL);
    t.err(
        "wait: unknown context",
        n.wait(&[fence(0xbad, 0, 1)], true, 0),
        libc::ENOENT,
    );
    t.err(
        "wait: seqno never submitted",
        n.wait(&[fence(a, 0, 1 << 40)], true, 0),
        libc::EINVAL,
    );

    // Cross-context ordering: B's copy waits (input fence) for A's job,
    // which waits on a semaphore the CPU writes later.
    let b = n
        .ctx_create(uapi::CTX_PRIORITY_HIGH, copy_only, 0)
        .unwrap_or(0);
    sem.write(0, 0);
    dst.write(8, 0);
    let ca = cmds.program(3, &[sem_wait_eq(semva, 1)]);
    let cb = cmds.program(4, &[fill(dva + 64, 8, 0x7777_7777)]);
    let sa = n.submit(a, 0, &[ca], &[]).unwrap_or(0);
    let sb = n.submit(b, 0, &[cb], &[fence(a, 0, sa)]);
    if let Some(sb) = t.ok("ordering: submit with an input fence", sb) {
        t.err(
            "ordering: waiter times out while blocked",
            n.wait(&[fence(b, 0, sb)], true, 200 * MS),
            libc::ETIME,
        );
        t.check(
            "ordering: blocked job did not run",
            dst.read(8) == 0,
            || format!("{:#x}", dst.read(8)),
        );
        sem.write(0, 1);
        t.ok(
            "ordering: both complete after the semaphore",
            n.wait(&[fence(a, 0, sa), fence(b, 0, sb)], true, 5_000 * MS),
        );
        t.check(
            "ordering: dependent job ran",
            dst.read(8) == 0x7777_7777_7777_7777,
            || format!("{:#x}", dst.read(8)),
        );
    }

    // Backpressure: jobs queued behind a blocked one until EAGAIN.
    sem.write(0, 0);
    let blk = n
        .submit(a, 0, &[cmds.program(5, &[sem_wait_eq(semva, 2)])], &[])
        .unwrap_or(0);
    let mut queued = 0;
    let mut last = Ok(0);
    let mut seq_last = blk;
    for _ in 0..2000 {
        last = n.submit(a, 0, &[good], &[]);
        match last {
            Ok(s) => {
                queued += 1;
                seq_last = s;
            }
            Err(_) => break,
        }
    }
    t.check(
        "backpressure: ring full gives EAGAIN",
        last == Err(libc::EAGAIN) && queued > 0,
        || format!("{last:?} after {queued}"),
    );
    let mut raw = uapi::DrmVgpuSubmit {
        ctx_id: a,
        cmds: &good as *const _ as u64,
        num_cmds: 1,
        flags: uapi::SUBMIT_BUSY_IS_EBUSY,
        ..Default::default()
    };
    t.err(
        "backpressure: EBUSY on request",
        n.submit_raw(&mut raw),
        libc::EBUSY,
    );
    sem.write(0, 2);
    t.ok(
        "backpressure: queue drains",
        n.wait(&[fence(a, 0, seq_last)], true, 10_000 * MS),
    );
    println!("info backpressure: {queued} jobs queued");
    // Ring space: jobs of 64 command buffers fill the ring long before the
    // pending limit.
    sem.write(0, 0);
    let blk = n
        .submit(a, 0, &[cmds.program(5, &[sem_wait_eq(semva, 4)])], &[])
        .unwrap_or(0);
    let big = vec![good; 64];
    let mut queued = 0;
    let mut last = Ok(0);
    let mut seq_last = blk;
    for _ in 0..100 {
        last = n.submit(a, 0, &big, &[]);
        match last {
            Ok(s) => {
                queued += 1;
                seq_last = s;
            }
            Err(_) => break,
        }
    }
    t.check(
        "backpressure: full ring gives EAGAIN",
        last == Err(libc::EAGAIN) && queued > 0 && queued < 20,
        || format!("{last:?} after {queued}"),
    );
    sem.write(0, 4);
    t.ok(
        "backpressure: full ring drains",
        n.wait(&[fence(a, 0, seq_last)], true, 10_000 * MS),
    );

    // Wait any: one fence of two.
    sem.write(0, 0);
    let s_block = n
        .submit(a, 0, &[cmds.program(6, &[sem_wait_eq(semva, 3)])], &[])
        .unwrap_or(0);
    let s_free = n.submit(b, 0, &[good], &[]).unwrap_or(0);
    let r = n.wait(
        &[fence(a, 0, s_block), fence(b, 0, s_free)],
        false,
        5_000 * MS,
    );
    t.check("wait: any returns the signalled one", r == Ok(1), || {
        format!("{r:?}")
    });
    sem.write(0, 3);
    let _ = n.wait(&[fence(a, 0, s_block)], true, 5_000 * MS);

    // Non-replayable fault: A errors, B unaffected.
    let cf = cmds.program(7, &[copy(start + 0x7000_0000, dva, 64)]);
    if let Ok(sf) = n.submit(a, 0, &[cf], &[]) {
        t.err(
            "fault: faulting job's fence fails",
            n.wait(&[fence(a, 0, sf)], true, 5_000 * MS),
            libc::EIO,
        );
        let q = n.ctx_query(a).unwrap_or_default();
        t.check(
            "fault: context errored, guilty, address and access reported",
            q.state & uapi::CTX_STATE_ERRORED != 0
                && q.state & uapi::CTX_STATE_FAULTED != 0
                && q.reset_status == uapi::CTX_RESET_GUILTY
                && q.fault_va == start + 0x7000_0000
                && q.fault_access == uapi::ACCESS_READ,
            || format!("{q:?}"),
        );
        t.err(
            "fault: errored context refuses submits",
            n.submit(a, 0, &[good], &[]),
            libc::EIO,
        );
        let sb = n.submit(b, 0, &[good], &[]).unwrap_or(0);
        t.ok(
            "fault: other context unaffected",
            n.wait(&[fence(b, 0, sb)], true, 5_000 * MS),
        );
        let q = n.ctx_query(b).unwrap_or_default();
        t.check(
            "fault: other context clean",
            q.state == 0 && q.reset_status == uapi::CTX_RESET_NONE,
            || format!("{q:?}"),
        );
    }

    // A dependent job is released when its input fence fails.
    let x = n
        .ctx_create(uapi::CTX_PRIORITY_NORMAL, copy_only, 0)
        .unwrap_or(0);
    let y = n
        .ctx_create(uapi::CTX_PRIORITY_NORMAL, copy_only, 0)
        .unwrap_or(0);
    sem.write(0, 0);
    let xf = [
        cmds.program(14, &[sem_wait_eq(semva, 6)]),
        cmds.program(15, &[copy(start + 0x7100_0000, dva, 64)]),
    ];
    if let (Ok(sx), Ok(sy)) = (
        n.submit(x, 0, &xf, &[]),
        n.submit(y, 0, &[good], &[fence(x, 0, 1)]),
    ) {
        sem.write(0, 6);
        t.err(
            "deps: failing input fence fails its own waiters",
            n.wait(&[fence(x, 0, sx)], true, 5_000 * MS),
            libc::EIO,
        );
        t.ok(
            "deps: dependent job released when its input fence fails",
            n.wait(&[fence(y, 0, sy)], true, 5_000 * MS),
        );
    }

    // Replayable fault on a lazy BO: mapped on demand, job completes.
    let r = n
        .ctx_create(
            uapi::CTX_PRIORITY_NORMAL,
            copy_only,
            uapi::CTX_CREATE_REPLAYABLE,
        )
        .unwrap_or(0);
    let hl = n.gem_create(4 * PAGE, uapi::GEM_CREATE_LAZY).unwrap_or(0);
    let lva = start + 0x500_0000;
    let _ = n.bind(hl, 0, lva, 4 * PAGE, rw);
    let cl = cmds.program(8, &[copy(sva, lva + PAGE, PAGE)]);
    if let Some(sl) = t.ok(
        "lazy: submit copy into a lazy BO",
        n.submit(r, 0, &[cl], &[]),
    ) {
        t.ok(
            "lazy: job completes after demand paging",
            n.wait(&[fence(r, 0, sl)], true, 10_000 * MS),
        );
        let q = n.ctx_query(r).unwrap_or_default();
        t.check(
            "lazy: fault served, context clean",
            q.faults >= 1 && q.state == 0,
            || format!("{q:?}"),
        );
        let l = vm_line(lva).unwrap_or_default();
        t.check(
            "lazy: one page mapped",
            field(&l, "walk_4k").as_deref() == Some("1")
                && field(&l, "check").as_deref() == Some("ok"),
            || l.clone(),
        );
        if let Ok(m) = n.mmap(hl, 4 * PAGE) {
            t.check("lazy: data landed", m.read(512) == src.read(0), || {
                format!("{:#x}", m.read(512))
            });
        }
    }

    // Hang: a semaphore never written. Timeout, reset, guilty/innocent.
    let h = n
        .ctx_create(uapi::CTX_PRIORITY_NORMAL, copy_only, 0)
        .unwrap_or(0);
    sem.write(1, 0);
    let hang = cmds.program(9, &[sem_wait_eq(semva + 8, 0xdead)]);
    let t0 = std::time::Instant::now();
    // An innocent context with a job still queued (behind a semaphore the
    // CPU releases after the reset) when the device is reset.
    let inno = n
        .ctx_create(uapi::CTX_PRIORITY_NORMAL, copy_only, 0)
        .unwrap_or(0);
    sem.write(3, 0);
    dst.write(16, 0);
    if let Ok(sh) = n.submit(h, 0, &[hang], &[]) {
        let sb = n.submit(b, 0, &[good], &[]).unwrap_or(0);
        t.ok(
            "hang: innocent context's fence signals",
            n.wait(&[fence(b, 0, sb)], true, 5_000 * MS),
        );
        let before = debugfs("contexts");
        let r = n.wait(&[fence(h, 0, sh)], true, 30_000 * MS);
        println!("info hang detected and recovered after {:?}", t0.elapsed());
        // The engine reset names the hung ring, so a ring blocked in
        // SEM_WAIT is cleared without a device reset.
        let after = debugfs("contexts");
        let dev_resets = |s: &str| field(s.lines().next().unwrap_or(""), "device_resets");
        t.check(
            "hang: engine reset clears a ring blocked on a semaphore",
            dev_resets(&after).is_some() && dev_resets(&after) == dev_resets(&before),
            || after.clone(),
        );
        // A job queued (behind a semaphore the CPU releases later) when the
        // device is reset: the ladder's device-reset rung, here with no
        // guilty context, writes it again on the new rings and its context
        // becomes innocent.
        let queued = [
            cmds.program(12, &[sem_wait_eq(semva + 24, 1)]),
            cmds.program(13, &[fill(dva + 128, 8, 0x1111_2222)]),
        ];
        let si = n.submit(inno, 0, &queued, &[]).unwrap_or(0);
        t.err(
            "hang: queued job pending",
            n.wait(&[fence(inno, 0, si)], true, 0),
            libc::ETIME,
        );
        let reset = std::fs::write(debugfs_path("reset_device"), "1");
        t.check("hang: device reset through debugfs", reset.is_ok(), || {
            format!("{reset:?}")
        });
        sem.write(3, 1);
        t.ok(
            "hang: innocent queued job resubmitted and completes",
            n.wait(&[fence(inno, 0, si)], true, 5_000 * MS),
        );
        t.check(
            "hang: resubmitted job ran",
            dst.read(16) == 0x1111_2222_1111_2222,
            || format!("{:#x}", dst.read(16)),
        );
        let q = n.ctx_query(inno).unwrap_or_default();
        t.check(
            "hang: queued context reported innocent",
            q.reset_status == uapi::CTX_RESET_INNOCENT && q.state == 0,
            || format!("{q:?}"),
        );
        t.check(
            "hang: hung job's fence fails with EIO",
            r == Err(libc::EIO),
            || format!("{r:?}"),
        );
        let q = n.ctx_query(h).unwrap_or_default();
        t.check(
            "hang: hung context guilty, 1 hang",
            q.reset_status == uapi::CTX_RESET_GUILTY && q.hangs == 1,
            || format!("{q:?}"),
        );
        let sb = n.submit(b, 0, &[good], &[]).unwrap_or(0);
        t.ok(
            "hang: device works after recovery",
            n.wait(&[fence(b, 0, sb)], true, 5_000 * MS),
        );
        let q = n.ctx_query(b).unwrap_or_default();
        t.check(
            "hang: other context not guilty",
            q.reset_status != uapi::CTX_RESET_GUILTY,
            || format!("{q:?}"),
        );
        // Repeated hangs ban.
        let mut banned = false;
        for _ in 0..4 {
            match n.submit(h, 0, &[hang], &[]) {
                Ok(s) => {
                    let _ = n.wait(&[fence(h, 0, s)], true, 30_000 * MS);
                }
                Err(e) => {
                    banned = e == libc::EIO;
                    break;
                }
            }
        }
        let q = n.ctx_query(h).unwrap_or_default();
        t.check(
            "hang: repeated hangs ban the context",
            banned && q.state & uapi::CTX_STATE_BANNED != 0,
            || format!("{q:?}"),
        );
    }

    // Destroy.
    t.ok("ctx: destroy", n.ctx_destroy(b));
    t.err("ctx: destroy twice", n.ctx_destroy(b), libc::ENOENT);
    t.err(
        "ctx: submit after destroy",
        n.submit(b, 0, &[good], &[]),
        libc::ENOENT,
    );
    t.err(
        "ctx: wait after destroy",
        n.wait(&[fence(b, 0, 1)], true, 0),
        libc::ENOENT,
    );
    t.err("ctx: query after destroy", n.ctx_query(b), libc::ENOENT);
    let mut raw = uapi::DrmVgpuCtxDestroy { ctx_id: a, pad: 1 };
    t.err(
        "ctx: destroy pad",
        n.ioctl(uapi::DRM_IOCTL_VGPU_CTX_DESTROY, &mut raw),
        libc::EINVAL,
    );
    // Destroy with work in flight: blocked job, then destroy (BUSY path).
    let d = n
        .ctx_create(uapi::CTX_PRIORITY_LOW, copy_only, 0)
        .unwrap_or(0);
    sem.write(2, 0);
    if let Ok(sd) = n.submit(
        d,
        0,
        &[cmds.program(10, &[sem_wait_eq(semva + 16, 5)])],
        &[],
    ) {
        t.ok("ctx: destroy with work in flight", n.ctx_destroy(d));
        t.err(
            "ctx: its fence is gone with it",
            n.wait(&[fence(d, 0, sd)], true, 0),
            libc::ENOENT,
        );
    }
    // Unbind a buffer a context uses: the TLB is invalidated.
    t.ok("vm: unbind with live contexts", n.unbind(dva, size));
    // File closes with contexts and work in flight.
    let e = n
        .ctx_create(uapi::CTX_PRIORITY_LOW, copy_only, 0)
        .unwrap_or(0);
    let _ = n.submit(
        e,
        0,
        &[cmds.program(11, &[sem_wait_eq(semva + 24, 9)])],
        &[],
    );
}

/// A hang in flight: FILLs of 4 GiB each (one 2 MiB BO bound 2048 times)
/// keep the copy engine busy past the job timeout; the engine reset
/// recovers without a device reset. Needs `pt_pool_kib=16384`.
fn test_hang_inflight(t: &mut T, path: &PathBuf) {
    let n = Node::open(path);
    let start = n.param(param::VA_START).unwrap_or(0);
    let generation = n.param(param::GENERATION).unwrap_or(1) as u32;
    let rw = uapi::VM_BIND_READ | uapi::VM_BIND_WRITE;
    let hf = n.gem_create(2 << 20, 0).unwrap_or(0);
    let base = start + (1 << 32);
    let mut bound = true;
    for i in 0..2048u64 {
        if n.bind(hf, 0, base + i * (2 << 20), 2 << 20, rw).is_err() {
            bound = false;
            break;
        }
    }
    t.check("inflight: 4 GiB of aliases bound", bound, || {
        "bind failed".into()
    });
    let hc = n.gem_create(16 * PAGE, 0).unwrap_or(0);
    let cva = start + 0x100_0000;
    let _ = n.bind(
        hc,
        0,
        cva,
        16 * PAGE,
        uapi::VM_BIND_READ | uapi::VM_BIND_EXEC,
    );
    let m = n.mmap(hc, 16 * PAGE).expect("mmap");
    // 64 FILLs, each at a 64-byte boundary padded with a NOP.
    let mut words = Vec::new();
    for _ in 0..64 {
        let (op, p) = fill(base, 1 << 32, 0x5a5a_5a5a);
        words.push(vgpu_hwif::packet::encode_header(generation, op, 6));
        words.extend_from_slice(&p);
        words.push(vgpu_hwif::packet::encode_header(
            generation,
            vgpu_hwif::packet::OP_NOP,
            10,
        ));
        words.extend_from_slice(&[0; 9]);
    }
    for (i, pair) in words.chunks(2).enumerate() {
        m.write(i, u64::from(pair[0]) | (u64::from(pair[1]) << 32));
    }
    let big = uapi::DrmVgpuCmd {
        va: cva,
        size: (words.len() * 4) as u64,
    };
    let x = n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1, 0).unwrap_or(0);
    let y = n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1, 0).unwrap_or(0);
    let resets_before = debugfs("contexts");
    let t0 = std::time::Instant::now();
    let Some(sx) = t.ok(
        "inflight: submit 256 GiB of fills",
        n.submit(x, 0, &[big], &[]),
    ) else {
        return;
    };
    let r = n.wait(&[fence(x, 0, sx)], true, 60_000 * MS);
    println!(
        "info in-flight hang detected and recovered after {:?}",
        t0.elapsed()
    );
    t.check(
        "inflight: hung job's fence fails",
        r == Err(libc::EIO),
        || format!("{r:?}"),
    );
    let q = n.ctx_query(x).unwrap_or_default();
    t.check(
        "inflight: context guilty",
        q.reset_status == uapi::CTX_RESET_GUILTY && q.hangs == 1,
        || format!("{q:?}"),
    );
    let after = debugfs("contexts");
    let dev_resets = |s: &str| field(s.lines().next().unwrap_or(""), "device_resets");
    t.check(
        "inflight: engine reset was enough",
        after.contains("reset engine")
            && after.contains(" ok in ")
            && dev_resets(&after) == dev_resets(&resets_before),
        || after.clone(),
    );
    let dump = debugfs("hang_dump");
    t.check(
        "inflight: hang dump captured",
        dump.starts_with("hang ctx") && dump.contains("<- rptr"),
        || dump.clone(),
    );
    // A small FILL on the second page.
    let (op, p) = fill(base, 64, 1);
    let mut small = vec![vgpu_hwif::packet::encode_header(generation, op, 6)];
    small.extend_from_slice(&p);
    small.push(vgpu_hwif::packet::encode_header(
        generation,
        vgpu_hwif::packet::OP_NOP,
        2,
    ));
    small.push(0);
    for (i, pair) in small.chunks(2).enumerate() {
        m.write(512 + i, u64::from(pair[0]) | (u64::from(pair[1]) << 32));
    }
    let small = uapi::DrmVgpuCmd {
        va: cva + PAGE,
        size: 32,
    };
    let sy = n.submit(y, 0, &[small], &[]).unwrap_or(0);
    t.ok(
        "inflight: other context runs",
        n.wait(&[fence(y, 0, sy)], true, 5_000 * MS),
    );
    let sx2 = n.submit(x, 0, &[small], &[]).unwrap_or(0);
    t.ok(
        "inflight: guilty context runs again",
        n.wait(&[fence(x, 0, sx2)], true, 5_000 * MS),
    );

    // An innocent context's job in flight when the engine is reset for
    // another context's hung ring (blocked on a semaphore): the innocent
    // job is cut off, written again by the driver, and completes.
    let put = |page: usize, words: &[u32]| {
        for (i, pair) in words.chunks(2).enumerate() {
            let hi = pair.get(1).copied().unwrap_or(0);
            m.write(page * 512 + i, u64::from(pair[0]) | (u64::from(hi) << 32));
        }
    };
    let busy_job = |fills: usize| {
        let mut w = Vec::new();
        for _ in 0..fills {
            let (op, p) = fill(base, 256 << 20, 0x77);
            w.push(vgpu_hwif::packet::encode_header(generation, op, 6));
            w.extend_from_slice(&p);
            w.push(vgpu_hwif::packet::encode_header(
                generation,
                vgpu_hwif::packet::OP_NOP,
                10,
            ));
            w.extend_from_slice(&[0; 9]);
        }
        w
    };
    let (op, p) = sem_wait_eq(cva + 4 * PAGE, 0xdead);
    let mut wait = vec![vgpu_hwif::packet::encode_header(generation, op, 6)];
    wait.extend_from_slice(&p);
    wait.push(vgpu_hwif::packet::encode_header(
        generation,
        vgpu_hwif::packet::OP_NOP,
        2,
    ));
    wait.push(0);
    put(3, &wait);
    let wait_cmd = uapi::DrmVgpuCmd {
        va: cva + 3 * PAGE,
        size: (wait.len() * 4) as u64,
    };
    let w = n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1, 0).unwrap_or(0);
    let z = n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1, 0).unwrap_or(0);
    // Size the innocent jobs: one 256 MiB fill timed, then jobs of about
    // 150 ms (well inside the job timeout) for about 3 s in all.
    put(2, &busy_job(1));
    let one = uapi::DrmVgpuCmd {
        va: cva + 2 * PAGE,
        size: 64,
    };
    let t1 = std::time::Instant::now();
    let s1 = n.submit(w, 0, &[one], &[]).unwrap_or(0);
    let _ = n.wait(&[fence(w, 0, s1)], true, 10_000 * MS);
    let per_fill = t1.elapsed().max(std::time::Duration::from_millis(1));
    let fills = (150 / per_fill.as_millis().max(1)).clamp(1, 64) as usize;
    let jobs = (3000 / (per_fill.as_millis().max(1) * fills as u128)).clamp(4, 200) as usize;
    println!("info inflight-innocent: 256 MiB fill {per_fill:?}, {jobs} jobs of {fills} fills");
    put(2, &busy_job(fills));
    let job = uapi::DrmVgpuCmd {
        va: cva + 2 * PAGE,
        size: (fills * 64) as u64,
    };
    let mut seqnos = Vec::new();
    for _ in 0..jobs {
        match n.submit(w, 0, &[job], &[]) {
            Ok(s) => seqnos.push(s),
            Err(e) => {
                t.check("inflight-innocent: submit", false, || errname(e).into());
                return;
            }
        }
    }
    let resets_before = debugfs("contexts");
    let sz = n.submit(z, 0, &[wait_cmd], &[]).unwrap_or(0);
    let rz = n.wait(&[fence(z, 0, sz)], true, 30_000 * MS);
    t.check(
        "inflight-innocent: hung ring's fence fails",
        rz == Err(libc::EIO),
        || format!("{rz:?}"),
    );
    let last = *seqnos.last().unwrap_or(&0);
    t.ok(
        "inflight-innocent: every innocent job completes",
        n.wait(&[fence(w, 0, last)], true, 60_000 * MS),
    );
    let qw = n.ctx_query(w).unwrap_or_default();
    t.check(
        "inflight-innocent: in-flight context reported innocent",
        qw.reset_status == uapi::CTX_RESET_INNOCENT && qw.state == 0,
        || format!("{qw:?} {}", debugfs("contexts")),
    );
    let qz = n.ctx_query(z).unwrap_or_default();
    t.check(
        "inflight-innocent: hung context guilty",
        qz.reset_status == uapi::CTX_RESET_GUILTY,
        || format!("{qz:?}"),
    );
    let after = debugfs("contexts");
    t.check(
        "inflight-innocent: engine reset only",
        dev_resets(&after).is_some() && dev_resets(&after) == dev_resets(&resets_before),
        || after.clone(),
    );
}

/// A hang nobody waits on: the watchdog finds and recovers it without any
/// ioctl. Watches debugfs `contexts` (reading it runs no hang check).
fn test_watchdog(t: &mut T, path: &PathBuf) {
    let n = Node::open(path);
    let Scratch { cmds, dva, .. } = scratch(&n, 0x200_0000, 1);
    // The data page stays zero: the semaphore is never released.
    let hang = cmds.program(0, &[sem_wait_eq(dva, 0xdead)]);
    let c = n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1, 0).unwrap_or(0);
    let first = debugfs("contexts");
    let line = |s: &str| s.lines().next().unwrap_or("").to_string();
    let hangs = |s: &str| field(&line(s), "hangs").and_then(|v| v.parse::<u64>().ok());
    let wd = |s: &str| {
        s.lines()
            .find(|l| l.starts_with("watchdog "))
            .map(str::to_string)
            .unwrap_or_default()
    };
    t.check(
        "watchdog: running",
        field(&wd(&first), "period_ms").is_some(),
        || first.clone(),
    );
    let before = hangs(&first);
    let t0 = std::time::Instant::now();
    let Some(seq) = t.ok("watchdog: submit a hang", n.submit(c, 0, &[hang], &[])) else {
        return;
    };
    let mut after = before;
    while t0.elapsed() < std::time::Duration::from_secs(20) {
        std::thread::sleep(std::time::Duration::from_millis(10));
        after = hangs(&debugfs("contexts"));
        if after != before {
            break;
        }
    }
    let detected = t0.elapsed();
    println!("info watchdog: hang detected {detected:?} after submit, no ioctl in between");
    t.check(
        "watchdog: hang detected with nobody waiting",
        before.is_some() && after == before.map(|h| h + 1),
        || format!("{before:?} -> {after:?}"),
    );
    t.err(
        "watchdog: the hung job already failed",
        n.wait(&[fence(c, 0, seq)], true, 0),
        libc::EIO,
    );
    let last = debugfs("contexts");
    t.check(
        "watchdog: checks counted",
        field(&wd(&last), "checks")
            .and_then(|v| v.parse::<u64>().ok())
            .is_some_and(|v| v > 0),
        || wd(&last),
    );
}

/// Fence interrupts that go wrong, injected by the device (run with
/// `--inject fence-event-drop:after=1,count=1 --inject
/// event-duplicate:after=1,count=1 --inject event-spurious:after=3,count=1
/// --inject control-busy:packet=DOORBELL,after=4,count=1 --inject
/// fence-never:after=5,count=1`;
/// duplicates count only FENCE packets that post an event, so each class
/// hits its own job):
/// the KMD trusts the fence value in memory, reports a lost interrupt while
/// the ring lives on, does not believe or double-count the others, and
/// rings a refused doorbell again.
fn test_injected_events(t: &mut T, path: &PathBuf) {
    let n = Node::open(path);
    let Scratch {
        cmds,
        data: hd,
        dva,
        start: _,
    } = scratch(&n, 0x300_0000, 1);
    let c = n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1, 0).unwrap_or(0);
    let counter = |name: &str| {
        field(debugfs("contexts").lines().next().unwrap_or(""), name)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(u64::MAX)
    };
    let job = |i: usize| {
        let cmd = cmds.program(i, &[fill(dva + 64 * i as u64, 8, i as u32)]);
        n.submit(c, 0, &[cmd], &[])
    };
    // 1: the interrupt is dropped. WAIT still completes (the value is in
    // memory); with the ring alive the watchdog reports the lost interrupt.
    let s1 = job(1).unwrap_or(0);
    let t0 = std::time::Instant::now();
    t.ok(
        "events: fence with a dropped interrupt completes",
        n.wait(&[fence(c, 0, s1)], true, 5_000 * MS),
    );
    println!(
        "info events: dropped-interrupt fence waited {:?}",
        t0.elapsed()
    );
    let mut missed = 0;
    while t0.elapsed() < std::time::Duration::from_secs(5) {
        missed = counter("missed_fence_events");
        if missed == 1 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    println!(
        "info events: lost interrupt reported after {:?}",
        t0.elapsed()
    );
    t.check("events: lost interrupt reported", missed == 1, || {
        debugfs("contexts")
    });
    // 2: the event comes twice: counted once, noted as a duplicate.
    let signalled = counter("fences_signalled");
    let s2 = job(2).unwrap_or(0);
    t.ok(
        "events: duplicated event's fence completes",
        n.wait(&[fence(c, 0, s2)], true, 5_000 * MS),
    );
    std::thread::sleep(std::time::Duration::from_millis(100));
    t.check(
        "events: duplicate not counted twice",
        counter("duplicate_fence_events") == 1 && counter("fences_signalled") == signalled + 1,
        || debugfs("contexts"),
    );
    // 3: an event before the value is written: never believed ahead of
    // memory (seen as early, or as a duplicate once the value landed).
    let s3 = job(3).unwrap_or(0);
    t.ok(
        "events: early event's fence completes",
        n.wait(&[fence(c, 0, s3)], true, 5_000 * MS),
    );
    std::thread::sleep(std::time::Duration::from_millis(100));
    let odd = counter("early_fence_events") + counter("duplicate_fence_events");
    t.check("events: early event not believed twice", odd == 2, || {
        debugfs("contexts")
    });
    // 4: the device answers the (posted) doorbell BUSY: SUBMIT already
    // returned; the hang check rings it again and the job runs.
    let again = counter("doorbells_rung_again");
    let t4 = std::time::Instant::now();
    let s4 = job(4);
    t.check(
        "events: submit with a refused doorbell succeeds",
        s4.is_ok(),
        || format!("{s4:?}"),
    );
    t.ok(
        "events: job behind a refused doorbell completes",
        n.wait(&[fence(c, 0, s4.unwrap_or(0))], true, 10_000 * MS),
    );
    println!(
        "info events: refused doorbell's job completed after {:?}",
        t4.elapsed()
    );
    t.check(
        "events: refused doorbell rung again once",
        counter("doorbells_rung_again") == again + 1,
        || debugfs("contexts"),
    );
    // 5 and 6: job 5's fence is never written; job 6's event jumps over
    // it: reported as skipped, and job 5 counts as complete (the later
    // fence value covers it).
    let skipped = counter("skipped_fence_events");
    let s5 = job(5).unwrap_or(0);
    let s6 = job(6).unwrap_or(0);
    t.ok(
        "events: both jobs complete",
        n.wait(&[fence(c, 0, s5), fence(c, 0, s6)], true, 5_000 * MS),
    );
    std::thread::sleep(std::time::Duration::from_millis(100));
    t.check(
        "events: the unannounced fence is reported as skipped",
        counter("skipped_fence_events") == skipped + 1,
        || debugfs("contexts"),
    );
    // The data of every job landed.
    let m = n.mmap(hd, PAGE).expect("mmap");
    let ok = (1..=6u64).all(|i| m.read(8 * i as usize) == i | (i << 32));
    t.check("events: every job's data landed", ok, || {
        format!(
            "{:#x} {:#x} {:#x} {:#x}",
            m.read(8),
            m.read(16),
            m.read(24),
            m.read(32)
        )
    });
    t.check("events: no hang", counter("hangs") == 0, || {
        debugfs("contexts")
    });
}

/// The bottom of the reset ladder (run with `--inject
/// hang:engine=copy,packet=COPY,count=1 --inject reset-fail:attempts=2`, and
/// a uevent helper writing each uevent's environment to /tmp/uevent.<pid>):
/// the engine reset and the device
/// reset both fail, the device is wedged, every waiter and submitter gets
/// EIO, and a WEDGED= uevent goes out on the DRM device nodes.
fn test_wedged(t: &mut T, path: &PathBuf) {
    let n = Node::open(path);
    let Scratch {
        cmds,
        data: _,
        dva,
        start: _,
    } = scratch(&n, 0x400_0000, 4);
    let c = n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1, 0).unwrap_or(0);
    let d = n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1, 0).unwrap_or(0);
    let hang = cmds.program(0, &[copy(dva, dva + 2 * PAGE, PAGE)]);
    let other = cmds.program(1, &[fill(dva + PAGE, 64, 5)]);
    let t0 = std::time::Instant::now();
    let sc = n.submit(c, 0, &[hang], &[]).unwrap_or(0);
    let sd = n.submit(d, 0, &[other], &[]).unwrap_or(0);
    let rc = n.wait(&[fence(c, 0, sc)], true, 60_000 * MS);
    println!("info wedged: hang to wedged {:?}", t0.elapsed());
    t.check(
        "wedged: hung job fails with EIO",
        rc == Err(libc::EIO),
        || format!("{rc:?}"),
    );
    let first = debugfs("contexts");
    let first = first.lines().next().unwrap_or("").to_string();
    t.check(
        "wedged: debugfs says wedged",
        field(&first, "wedged").as_deref() == Some("1"),
        || first.clone(),
    );
    let rd = n.wait(&[fence(d, 0, sd)], true, 0);
    t.check(
        "wedged: the other context's fence reports the loss",
        rd == Ok(0) || rd == Err(libc::EIO),
        || format!("{rd:?}"),
    );
    t.err(
        "wedged: new submissions fail with EIO",
        n.submit(d, 0, &[other], &[]),
        libc::EIO,
    );
    t.err(
        "wedged: new contexts fail with EIO",
        n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1, 0),
        libc::EIO,
    );
    // The helper runs asynchronously: give it a moment.
    // One file per uevent: /tmp/uevent.<pid>, the helper's environment.
    let read_events = || -> Vec<String> {
        std::fs::read_dir("/tmp")
            .map(|d| {
                d.flatten()
                    .filter(|e| e.file_name().to_string_lossy().starts_with("uevent."))
                    .filter_map(|e| std::fs::read_to_string(e.path()).ok())
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut events = Vec::new();
    for _ in 0..100 {
        events = read_events();
        if events.iter().any(|e| e.contains("WEDGED=rebind")) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let ev = events.join("\n");
    let wedged: Vec<&String> = events
        .iter()
        .filter(|e| e.contains("WEDGED=rebind"))
        .collect();
    t.check(
        "wedged: WEDGED=rebind uevent on the DRM nodes",
        !wedged.is_empty()
            && wedged
                .iter()
                .all(|e| e.contains("ACTION=change") && e.contains("SUBSYSTEM=drm")),
        || ev.clone(),
    );
}

/// `struct sync_file_info` (linux/sync_file.h).
#[repr(C)]
#[derive(Default)]
struct SyncFileInfo {
    name: [u8; 32],
    status: i32,
    flags: u32,
    num_fences: u32,
    pad: u32,
    sync_fence_info: u64,
}

/// `SYNC_IOC_FILE_INFO` = `_IOWR('>', 4, struct sync_file_info)`.
const SYNC_IOC_FILE_INFO: u32 =
    (3 << 30) | ((size_of::<SyncFileInfo>() as u32) << 16) | (0x3e << 8) | 4;

/// A sync_file's status: 1 signalled, 0 active, < 0 the error it
/// completed with; `Err(errno)` if the ioctl failed.
fn sync_status(fd: i32) -> Result<i32, i32> {
    let mut info = SyncFileInfo::default();
    // SAFETY: `fd` is a descriptor of this process; `info` is a
    // `sync_file_info` the kernel fills.
    let r = unsafe { libc::ioctl(fd, SYNC_IOC_FILE_INFO as _, &mut info as *mut SyncFileInfo) };
    if r < 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
    }
    Ok(info.status)
}

/// Whether `fd` polls readable within `ms`.
fn poll_ready(fd: i32, ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut p, 1, ms) == 1 && p.revents & libc::POLLIN != 0 }
}

/// `FENCE_EXPORT`: sync_file fds that signal with the job, carry its error,
/// are cancelled when the context or the file goes, and a table of bad
/// arguments.
fn test_fence_export(t: &mut T, path: &PathBuf) {
    let n = Node::open(path);
    let Scratch {
        cmds,
        data: hd,
        dva,
        start,
    } = scratch(&n, 0x500_0000, 1);
    let data = n.mmap(hd, PAGE).expect("mmap");
    let export = |n: &Node, ctx: u32, engine: u32, seqno: u64, flags: u32| {
        let mut a = uapi::DrmVgpuFenceExport {
            fence: fence(ctx, engine, seqno),
            flags,
            fd: -1,
        };
        n.ioctl(uapi::DRM_IOCTL_VGPU_FENCE_EXPORT, &mut a)
            .map(|()| a.fd)
    };
    let close = |fd: i32| {
        // SAFETY: closing a descriptor this test owns.
        unsafe { libc::close(fd) };
    };
    let a = n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1, 0).unwrap_or(0);
    // A job held by a semaphore (in the data BO) the CPU releases later.
    data.write(0, 0);
    // (Gen 2 needs a FILL 64-byte aligned: each packet in its own slot.)
    let held = [
        cmds.program(0, &[sem_wait_eq(dva, 1)]),
        cmds.program(5, &[fill(dva + 64, 8, 0x1234_5678)]),
    ];
    let Some(sa) = t.ok("export: submit held job", n.submit(a, 0, &held, &[])) else {
        return;
    };
    let Some(fa) = t.ok("export: pending fence", export(&n, a, 0, sa, 0)) else {
        return;
    };
    t.check(
        "export: pending fd not ready, status 0",
        !poll_ready(fa, 0) && sync_status(fa) == Ok(0),
        || format!("{:?}", sync_status(fa)),
    );
    // Bad arguments.
    let b = n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1, 0).unwrap_or(0);
    for (name, r, want) in [
        ("flags 1", export(&n, a, 0, sa, 1), libc::EINVAL),
        ("seqno 0", export(&n, a, 0, 0, 0), libc::EINVAL),
        (
            "seqno not submitted",
            export(&n, a, 0, sa + 1, 0),
            libc::EINVAL,
        ),
        (
            "engine without a ring",
            export(&n, a, 1, sa, 0),
            libc::EINVAL,
        ),
        ("engine 7", export(&n, a, 7, sa, 0), libc::EINVAL),
        ("unknown context", export(&n, 0xdead, 0, 1, 0), libc::ENOENT),
        (
            "context of no submits",
            export(&n, b, 0, 1, 0),
            libc::EINVAL,
        ),
    ] {
        t.err(&format!("export: {name}"), r, want);
    }
    // A completed job: a signalled fd.
    let done = cmds.program(1, &[fill(dva + 128, 8, 7)]);
    let sb = n.submit(b, 0, &[done], &[]).unwrap_or(0);
    let _ = n.wait(&[fence(b, 0, sb)], true, 5_000 * MS);
    if let Some(fb) = t.ok("export: completed fence", export(&n, b, 0, sb, 0)) {
        t.check(
            "export: completed fd ready, status 1",
            poll_ready(fb, 0) && sync_status(fb) == Ok(1),
            || format!("{:?}", sync_status(fb)),
        );
        close(fb);
    }
    // Release the semaphore: the pending fd signals with the job.
    data.write(0, 1);
    t.check(
        "export: fd signals when the job completes",
        poll_ready(fa, 5_000) && sync_status(fa) == Ok(1),
        || format!("{:?}", sync_status(fa)),
    );
    t.check(
        "export: the job ran",
        data.read(8) == 0x1234_5678_1234_5678,
        || format!("{:#x}", data.read(8)),
    );
    close(fa);
    // A job that faults (FILL to an unmapped VA): the fd completes with
    // -EIO.
    let c = n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1, 0).unwrap_or(0);
    data.write(0, 0);
    let bad = [
        cmds.program(2, &[sem_wait_eq(dva, 1)]),
        cmds.program(6, &[fill(start + 0x7000_0000, 8, 1)]),
    ];
    let sc = n.submit(c, 0, &bad, &[]).unwrap_or(0);
    if let Some(fc) = t.ok("export: fence of a faulting job", export(&n, c, 0, sc, 0)) {
        data.write(0, 1);
        t.check(
            "export: faulting job's fd completes with EIO",
            poll_ready(fc, 5_000) && sync_status(fc) == Ok(-libc::EIO),
            || format!("{:?}", sync_status(fc)),
        );
        close(fc);
    }
    // Destroying the context cancels its pending fence.
    data.write(0, 0);
    let held = cmds.program(3, &[sem_wait_eq(dva, 2)]);
    let sa2 = n.submit(a, 0, &[held], &[]).unwrap_or(0);
    if let Some(fd) = t.ok("export: another pending fence", export(&n, a, 0, sa2, 0)) {
        let _ = n.ctx_destroy(a);
        t.check(
            "export: context destroy cancels the fd",
            poll_ready(fd, 1_000) && sync_status(fd) == Ok(-libc::ECANCELED),
            || format!("{:?}", sync_status(fd)),
        );
        close(fd);
    }
    // The fd outlives the render node: closing the file cancels the fence,
    // the fd stays usable.
    let held = cmds.program(4, &[sem_wait_eq(dva, 3)]);
    let sb2 = n.submit(b, 0, &[held], &[]).unwrap_or(0);
    let kept = t.ok("export: fence kept past close", export(&n, b, 0, sb2, 0));
    drop(cmds);
    drop(data);
    drop(n);
    if let Some(fd) = kept {
        t.check(
            "export: closing the file cancels the fd, which stays usable",
            poll_ready(fd, 1_000) && sync_status(fd) == Ok(-libc::ECANCELED),
            || format!("{:?}", sync_status(fd)),
        );
        close(fd);
    }
}

/// A 4-page command-buffer BO bound READ|EXEC at `VA_START + at` and a
/// data BO of `data_pages` pages bound READ|WRITE 1 MiB above it.
struct Scratch {
    cmds: Cmds,
    data: u32,
    dva: u64,
    start: u64,
}

fn scratch(n: &Node, at: u64, data_pages: u64) -> Scratch {
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

/// Several threads submit and wait at once, on contexts of one file and of
/// a second file, while another thread binds and unbinds.
fn test_concurrent(t: &mut T, path: &PathBuf) {
    let files: Vec<std::sync::Arc<Node>> = (0..2)
        .map(|_| std::sync::Arc::new(Node::open(path)))
        .collect();
    let mut jobs = Vec::new();
    let mut keep = Vec::new();
    for (fi, n) in files.iter().enumerate() {
        let start = n.param(param::VA_START).unwrap_or(0);
        let generation = n.param(param::GENERATION).unwrap_or(1) as u32;
        let hc = n.gem_create(PAGE, 0).unwrap_or(0);
        let hd = n.gem_create(PAGE, 0).unwrap_or(0);
        let (cva, dva) = (start + 0x100_0000, start + 0x200_0000);
        let _ = n.bind(hc, 0, cva, PAGE, uapi::VM_BIND_READ | uapi::VM_BIND_EXEC);
        let _ = n.bind(hd, 0, dva, PAGE, uapi::VM_BIND_READ | uapi::VM_BIND_WRITE);
        let cmds = Cmds {
            map: n.mmap(hc, PAGE).expect("mmap"),
            va: cva,
            generation,
        };
        for k in 0..3usize {
            let c = cmds.program(k, &[fill(dva + 64 * k as u64, 64, k as u32)]);
            let ctx = n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1, 0).unwrap_or(0);
            let n = n.clone();
            jobs.push(std::thread::spawn(move || {
                let mut fails = 0;
                for _ in 0..300 {
                    let r = n
                        .submit(ctx, 0, &[c], &[])
                        .and_then(|s| n.wait(&[fence(ctx, 0, s)], true, 5_000 * MS));
                    if r.is_err() {
                        fails += 1;
                    }
                }
                (fi, k, fails)
            }));
        }
        keep.push(cmds);
    }
    let n = files[0].clone();
    let binder = std::thread::spawn(move || {
        let start = n.param(param::VA_START).unwrap_or(0);
        let h = n.gem_create(PAGE, 0).unwrap_or(0);
        let mut fails = 0;
        for i in 0..300u64 {
            let va = start + 0x1000_0000 + (i % 8) * PAGE;
            if n.bind(h, 0, va, PAGE, uapi::VM_BIND_READ)
                .and_then(|()| n.unbind(va, PAGE))
                .is_err()
            {
                fails += 1;
            }
        }
        fails
    });
    let mut fails = 0;
    for j in jobs {
        let (_, _, f) = j.join().unwrap_or((0, 0, 300));
        fails += f;
    }
    let bind_fails = binder.join().unwrap_or(300);
    t.check(
        "concurrent: 6 submitters x 300 jobs on 2 files",
        fails == 0,
        || format!("{fails} failed"),
    );
    t.check("concurrent: bind/unbind alongside", bind_fails == 0, || {
        format!("{bind_fails} failed")
    });
}

/// Unbinds the PCI driver while a WAIT sleeps on a job that never
/// finishes, checks the waiter and later ioctls get ENODEV, closes the file
/// with the context still alive, and binds the driver again.
fn test_unbind(t: &mut T, path: &PathBuf) {
    let n = Node::open(path);
    let start = n.param(param::VA_START).unwrap_or(0);
    let generation = n.param(param::GENERATION).unwrap_or(1) as u32;
    let hc = n.gem_create(PAGE, 0).unwrap_or(0);
    let hsem = n.gem_create(PAGE, 0).unwrap_or(0);
    let (cva, semva) = (start + 0x100_0000, start + 0x200_0000);
    let _ = n.bind(hc, 0, cva, PAGE, uapi::VM_BIND_READ | uapi::VM_BIND_EXEC);
    let _ = n.bind(
        hsem,
        0,
        semva,
        PAGE,
        uapi::VM_BIND_READ | uapi::VM_BIND_WRITE,
    );
    let cmds = Cmds {
        map: n.mmap(hc, PAGE).expect("mmap"),
        va: cva,
        generation,
    };
    let ctx = n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1, 0).unwrap_or(0);
    let Some(s) = t.ok(
        "unbind: submit a job that never ends",
        n.submit(ctx, 0, &[cmds.program(0, &[sem_wait_eq(semva, 1)])], &[]),
    ) else {
        return;
    };
    let pci = std::fs::read_dir("/sys/bus/pci/drivers/vgpu")
        .ok()
        .and_then(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .find(|n| n.starts_with("0000:"))
        })
        .unwrap_or_default();
    let pci2 = pci.clone();
    let th = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(300));
        std::fs::write("/sys/bus/pci/drivers/vgpu/unbind", &pci2)
    });
    t.check("unbind: PCI device found", !pci.is_empty(), || {
        "no device under the driver".into()
    });
    let r = n.wait(&[fence(ctx, 0, s)], true, 20_000 * MS);
    t.check(
        "unbind: sleeping waiter wakes with ENODEV",
        r == Err(libc::ENODEV),
        || format!("{r:?}"),
    );
    let unbound = th.join().map(|r| r.is_ok()).unwrap_or(false);
    t.check("unbind: sysfs unbind succeeded", unbound, || {
        "unbind failed".into()
    });
    t.err(
        "unbind: submit after unbind",
        n.submit(ctx, 0, &[cmds.program(1, &[sem_wait_eq(semva, 1)])], &[]),
        libc::ENODEV,
    );
    t.err(
        "unbind: create after unbind",
        n.gem_create(PAGE, 0),
        libc::ENODEV,
    );
    drop(cmds);
    drop(n);
    let bound = std::fs::write("/sys/bus/pci/drivers/vgpu/bind", &pci).is_ok();
    t.check("unbind: driver binds again", bound, || "bind failed".into());
    std::thread::sleep(std::time::Duration::from_millis(200));
    match Device::open_first() {
        Ok(d) => {
            t.ok(
                "unbind: device answers after rebind",
                d.ping(7, std::time::Duration::from_secs(2))
                    .map(|_| ())
                    .map_err(|_| libc::EIO),
            );
        }
        Err(_) => t.check("unbind: render node after rebind", false, || {
            "no node".into()
        }),
    }
}

/// A VA the GPU has read is unbound and bound to another BO; the next GPU
/// copy from it must read the new BO on every page (the unbind's TLB
/// invalidation). A stale translation shows up as a page of the old BO.
fn test_remap(t: &mut T, path: &PathBuf) {
    const PAGES: u64 = 4;
    let n = Node::open(path);
    let start = n.param(param::VA_START).unwrap_or(0);
    let generation = n.param(param::GENERATION).unwrap_or(1) as u32;
    let rw = uapi::VM_BIND_READ | uapi::VM_BIND_WRITE;
    let Some(ctx) = t.ok(
        "remap: create copy context",
        n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1 << uapi::ENGINE_COPY, 0),
    ) else {
        return;
    };
    let hc = n.gem_create(16 * PAGE, 0).unwrap_or(0);
    let cva = start + 0x100_0000;
    let _ = n.bind(
        hc,
        0,
        cva,
        16 * PAGE,
        uapi::VM_BIND_READ | uapi::VM_BIND_EXEC,
    );
    let cmds = Cmds {
        map: n.mmap(hc, 16 * PAGE).expect("mmap cmds"),
        va: cva,
        generation,
    };
    let size = PAGES * PAGE;
    let (ha, hb, hd) = (
        n.gem_create(size, 0).unwrap_or(0),
        n.gem_create(size, 0).unwrap_or(0),
        n.gem_create(size, 0).unwrap_or(0),
    );
    let (sva, dva) = (start + 0x200_0000, start + 0x300_0000);
    let a = n.mmap(ha, size).expect("mmap a");
    let b = n.mmap(hb, size).expect("mmap b");
    let d = n.mmap(hd, size).expect("mmap dst");
    for i in 0..(size / 8) as usize {
        a.write(i, 0xaaaa_0000_0000_0000 | i as u64);
        b.write(i, 0xbbbb_0000_0000_0000 | i as u64);
    }
    let _ = n.bind(hd, 0, dva, size, rw);
    // Which pages of dst came from `want`'s BO.
    let pages_from = |tag: u64| -> Vec<u64> {
        (0..PAGES)
            .filter(|p| {
                let i = (p * PAGE / 8) as usize;
                d.read(i) == tag | i as u64
            })
            .collect()
    };
    let copy_once = |t: &mut T, slot: usize, what: &str| {
        let c = cmds.program(slot, &[copy(sva, dva, size)]);
        if let Some(s) = t.ok(
            &format!("remap: submit {what}"),
            n.submit(ctx, 0, &[c], &[]),
        ) {
            t.ok(
                &format!("remap: wait {what}"),
                n.wait(&[fence(ctx, 0, s)], true, 5_000 * MS),
            );
        }
    };
    t.ok("remap: bind a", n.bind(ha, 0, sva, size, rw));
    copy_once(t, 0, "copy from a");
    let got = pages_from(0xaaaa_0000_0000_0000);
    t.check(
        "remap: every page read from a",
        got.len() == PAGES as usize,
        || format!("pages from a: {got:?}"),
    );
    t.ok("remap: unbind a", n.unbind(sva, size));
    t.ok("remap: bind b at the same va", n.bind(hb, 0, sva, size, rw));
    for round in 1..=2 {
        copy_once(t, round, &format!("copy from b #{round}"));
        let stale = pages_from(0xaaaa_0000_0000_0000);
        let fresh = pages_from(0xbbbb_0000_0000_0000);
        t.check(
            &format!("remap: copy #{round} read every page from b"),
            fresh.len() == PAGES as usize,
            || format!("pages still read from a (stale translation): {stale:?}; from b: {fresh:?}"),
        );
    }
    let _ = n.ctx_destroy(ctx);
}

/// `QUERY_STATS`: bad arguments, memory accounting against the BOs created
/// and freed, every file's contexts listed, counters and fence progress
/// growing while a context runs work, and the engine error of a stopped
/// context (also in `CTX_QUERY`).
fn test_stats(t: &mut T, path: &PathBuf) {
    let n = Node::open(path);
    let start = n.param(param::VA_START).unwrap_or(0);
    let generation = n.param(param::GENERATION).unwrap_or(1) as u32;
    let rw = uapi::VM_BIND_READ | uapi::VM_BIND_WRITE;
    let rx = uapi::VM_BIND_READ | uapi::VM_BIND_EXEC;
    let copy_only = 1 << uapi::ENGINE_COPY;
    let pid = std::process::id();

    let Some(ctx) = t.ok(
        "stats: create context",
        n.ctx_create(uapi::CTX_PRIORITY_HIGH, copy_only, 0),
    ) else {
        return;
    };
    // Bad arguments.
    let mut v = vec![uapi::DrmVgpuCtxStats::default(); 2];
    let good = uapi::DrmVgpuQueryStats {
        num_contexts: 2,
        contexts: v.as_mut_ptr() as u64,
        ..Default::default()
    };
    for (name, a, want) in [
        (
            "flags 1",
            uapi::DrmVgpuQueryStats { flags: 1, ..good },
            libc::EINVAL,
        ),
        (
            "pad 1",
            uapi::DrmVgpuQueryStats { pad: 1, ..good },
            libc::EINVAL,
        ),
        (
            "num_contexts above max",
            uapi::DrmVgpuQueryStats {
                num_contexts: uapi::STATS_MAX_CONTEXTS + 1,
                ..good
            },
            libc::EINVAL,
        ),
        (
            "num_contexts u32::MAX",
            uapi::DrmVgpuQueryStats {
                num_contexts: u32::MAX,
                ..good
            },
            libc::EINVAL,
        ),
        (
            "contexts pointer bad",
            uapi::DrmVgpuQueryStats {
                contexts: 0x10,
                ..good
            },
            libc::EFAULT,
        ),
        (
            "contexts pointer null",
            uapi::DrmVgpuQueryStats {
                contexts: 0,
                ..good
            },
            libc::EFAULT,
        ),
        (
            "contexts pointer kernel",
            uapi::DrmVgpuQueryStats {
                contexts: 0xffff_8000_0000_0000,
                ..good
            },
            libc::EFAULT,
        ),
    ] {
        let mut a = a;
        t.err(&format!("stats: {name}"), n.query_stats(&mut a), want);
    }
    let mut a = uapi::DrmVgpuQueryStats::default();
    if t.ok("stats: num_contexts 0, no array", n.query_stats(&mut a))
        .is_some()
    {
        t.check("stats: count without array", a.num_contexts >= 1, || {
            format!("num_contexts {}", a.num_contexts)
        });
        t.check("stats: not wedged", a.wedged == 0, || "wedged".into());
        t.check("stats: sample time set", a.sample_ns > 0, || "0".into());
    }

    // Every file's contexts: a second file's context is listed too.
    let n2 = Node::open(path);
    let ctx2 = n2
        .ctx_create(uapi::CTX_PRIORITY_LOW, copy_only, 0)
        .unwrap_or(0);
    let Some((s0, c0)) = t.ok("stats: query", n.stats()) else {
        return;
    };
    let mine = c0.iter().find(|c| c.ctx_id == ctx).copied();
    t.check(
        "stats: own context listed with pid, priority, engines",
        mine.is_some_and(|c| {
            c.pid == pid
                && c.priority == uapi::CTX_PRIORITY_HIGH
                && c.engines == copy_only
                && c.state == 0
                && c.reset_status == uapi::CTX_RESET_NONE
                && c.submitted == [0, 0]
        }),
        || format!("{mine:?} (pid {pid})"),
    );
    t.check(
        "stats: other file's context listed",
        c0.iter()
            .any(|c| c.ctx_id == ctx2 && c.pid == pid && c.priority == uapi::CTX_PRIORITY_LOW),
        || format!("{c0:?}"),
    );
    t.check(
        "stats: num_contexts counts every context",
        s0.num_contexts as usize == c0.len() && c0.len() >= 2,
        || format!("num_contexts {} listed {}", s0.num_contexts, c0.len()),
    );
    // Capacity 1: one filled, the count still says how many exist.
    let mut one = [uapi::DrmVgpuCtxStats::default(); 2];
    let mut a = uapi::DrmVgpuQueryStats {
        num_contexts: 1,
        contexts: one.as_mut_ptr() as u64,
        ..Default::default()
    };
    if t.ok("stats: capacity 1", n.query_stats(&mut a)).is_some() {
        t.check(
            "stats: capacity 1 fills one",
            a.num_contexts >= 2 && one[0].ctx_id != 0 && one[1].ctx_id == 0,
            || format!("num_contexts {} {:?}", a.num_contexts, one),
        );
    }
    let _ = n2.ctx_destroy(ctx2);
    drop(n2);
    if let Ok((_, c)) = n.stats() {
        t.check(
            "stats: destroyed context gone",
            !c.iter().any(|c| c.ctx_id == ctx2),
            || format!("{c:?}"),
        );
    }

    // Memory: N bytes of BOs.
    let big = 1u64 << 20;
    let hs: Vec<u32> = (0..3).filter_map(|_| n.gem_create(big, 0).ok()).collect();
    if let Ok((s1, c1)) = n.stats() {
        let want = s0.mem_bytes + 3 * big;
        t.check(
            "stats: mem_bytes grows by the BOs created",
            s1.mem_bytes >= want && s1.mem_objects >= s0.mem_objects + 3,
            || {
                format!(
                    "before {} B / {} objects, after {} B / {} objects",
                    s0.mem_bytes, s0.mem_objects, s1.mem_bytes, s1.mem_objects
                )
            },
        );
        let m0 = mine.map_or(0, |c| c.mem_bytes);
        let m1 = c1
            .iter()
            .find(|c| c.ctx_id == ctx)
            .map_or(0, |c| c.mem_bytes);
        t.check(
            "stats: context's file memory grows",
            m1 >= m0 + 3 * big,
            || format!("before {m0} after {m1}"),
        );
        for h in &hs {
            let _ = n.gem_close(*h);
        }
        if let Ok((s2, _)) = n.stats() {
            t.check(
                "stats: mem_bytes back after free",
                s2.mem_bytes + 3 * big <= s1.mem_bytes && s2.mem_objects + 3 <= s1.mem_objects,
                || format!("with BOs {} B, after free {} B", s1.mem_bytes, s2.mem_bytes),
            );
        }
    }

    // Work: FILLs of 4 MiB on the context; its counters and fences grow.
    // (The device adds work to its counters at the end of each scheduling
    // slice, so they may not yet include all of it when the last fence
    // signals: only growth is checked.)
    let hc = n.gem_create(16 * PAGE, 0).unwrap_or(0);
    let cva = start + 0x100_0000;
    let _ = n.bind(hc, 0, cva, 16 * PAGE, rx);
    let Ok(map) = n.mmap(hc, 16 * PAGE) else {
        t.check("stats: mmap cmds", false, || "mmap failed".into());
        return;
    };
    let cmds = Cmds {
        map,
        va: cva,
        generation,
    };
    let size = 4u64 << 20;
    let hd = n.gem_create(size, 0).unwrap_or(0);
    let dva = start + 0x400_0000;
    let _ = n.bind(hd, 0, dva, size, rw);
    let before = n.stats().ok();
    // One packet per command buffer (gen 2 engine packets are 64-byte
    // aligned).
    let c: Vec<uapi::DrmVgpuCmd> = (0..3)
        .map(|i| cmds.program(i, &[fill(dva, size, i as u32 + 1)]))
        .collect();
    let mut last = 0;
    for _ in 0..4 {
        if let Ok(s) = n.submit(ctx, 0, &c, &[]) {
            last = s;
        }
    }
    t.ok(
        "stats: work done",
        n.wait(&[fence(ctx, 0, last)], true, 10_000 * MS),
    );
    if let (Some((b, bc)), Ok((a, ac))) = (before, n.stats()) {
        let cb = bc
            .iter()
            .find(|c| c.ctx_id == ctx)
            .copied()
            .unwrap_or_default();
        let ca = ac
            .iter()
            .find(|c| c.ctx_id == ctx)
            .copied()
            .unwrap_or_default();
        t.check(
            "stats: context busy_ns, packets, bytes grow",
            ca.counters.busy_ns > cb.counters.busy_ns
                && ca.counters.packets > cb.counters.packets
                && ca.counters.bytes > cb.counters.bytes,
            || format!("before {:?} after {:?}", cb.counters, ca.counters),
        );
        t.check(
            "stats: context fences submitted == completed == last seqno",
            ca.submitted[0] == last && ca.completed[0] == last && last == 4,
            || {
                format!(
                    "submitted {:?} completed {:?} last {last}",
                    ca.submitted, ca.completed
                )
            },
        );
        t.check(
            "stats: copy engine busy_ns grows",
            a.engines[0].busy_ns > b.engines[0].busy_ns,
            || format!("{} -> {}", b.engines[0].busy_ns, a.engines[0].busy_ns),
        );
        t.check(
            "stats: device counters grow",
            a.device.busy_ns > b.device.busy_ns && a.device.packets > b.device.packets,
            || format!("before {:?} after {:?}", b.device, a.device),
        );
        t.check(
            "stats: sample time grows",
            a.sample_ns > b.sample_ns,
            || format!("{} -> {}", b.sample_ns, a.sample_ns),
        );
        t.check("stats: page tables in use", a.pt_bytes > 0, || "0".into());
    }

    // An engine error (FILL of size 0: BadOperand) stops the context:
    // CTX_QUERY and QUERY_STATS report it.
    let bad = cmds.program(3, &[fill(dva, 0, 1)]);
    if let Ok(s) = n.submit(ctx, 0, &[bad], &[]) {
        t.err(
            "stats: engine error fails the job",
            n.wait(&[fence(ctx, 0, s)], true, 10_000 * MS),
            libc::EIO,
        );
    }
    let q = n.ctx_query(ctx).unwrap_or_default();
    t.check(
        "ctx_query: engine_error names the error",
        q.engine_error == vgpu_hwif::packet::EngineError::BadOperand as u32
            && q.state & uapi::CTX_STATE_ERRORED != 0,
        || format!("{q:?}"),
    );
    if let Ok((_, c)) = n.stats() {
        let me = c
            .iter()
            .find(|c| c.ctx_id == ctx)
            .copied()
            .unwrap_or_default();
        t.check(
            "stats: errored context shows state and guilt",
            me.state & uapi::CTX_STATE_ERRORED != 0 && me.reset_status == uapi::CTX_RESET_GUILTY,
            || format!("{me:?}"),
        );
    }
    let _ = n.ctx_destroy(ctx);
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let want = |s: &str| args.is_empty() || args.iter().any(|a| a == s);
    let dev = match Device::open_first() {
        Ok(d) => d,
        Err(e) => {
            println!("FAIL open: {e}");
            std::process::exit(1);
        }
    };
    let path = dev.path().to_path_buf();
    let mut t = T {
        passed: 0,
        failed: 0,
    };
    if want("gem") {
        test_gem(&mut t, &path);
    }
    if want("vm") {
        test_vm(&mut t, &path);
    }
    if want("submit") {
        test_submit(&mut t, &path);
    }
    if args.iter().any(|a| a == "inflight") {
        test_hang_inflight(&mut t, &path);
    }
    if args.iter().any(|a| a == "watchdog") {
        test_watchdog(&mut t, &path);
    }
    if args.iter().any(|a| a == "events") {
        test_injected_events(&mut t, &path);
    }
    if args.iter().any(|a| a == "wedged") {
        test_wedged(&mut t, &path);
    }
    if want("export") {
        test_fence_export(&mut t, &path);
    }
    if args.iter().any(|a| a == "unbind") {
        drop(dev);
        test_unbind(&mut t, &path);
        println!("kmd-test: {} passed, {} failed", t.passed, t.failed);
        std::process::exit(i32::from(t.failed != 0));
    }
    if args.iter().any(|a| a == "remap") {
        test_remap(&mut t, &path);
    }
    if want("stats") {
        test_stats(&mut t, &path);
    }
    if want("concurrent") {
        test_concurrent(&mut t, &path);
    }
    if want("leaks") {
        test_leaks(&mut t, &path, 1000);
    }
    println!("kmd-test: {} passed, {} failed", t.passed, t.failed);
    std::process::exit(i32::from(t.failed != 0));
}
