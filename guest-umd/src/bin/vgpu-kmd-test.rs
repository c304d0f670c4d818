//! Guest test of the KMD's ioctls: happy paths, a table of bad arguments per
//! ioctl, use after close/destroy, and the GPU page tables the KMD builds
//! (checked through debugfs `vms`, which walks the real entries).
//!
//!   vgpu-kmd-test            every section
//!   vgpu-kmd-test gem vm     only these sections
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
    let h = t.ok("gem: create 4 KiB", n.gem_create(PAGE, 0)).unwrap_or(0);
    t.check("gem: handle non-zero", h != 0, || "handle 0".into());
    t.err("gem: size 0", n.gem_create(0, 0), libc::EINVAL);
    t.err(
        "gem: size above max",
        n.gem_create(uapi::GEM_MAX_SIZE + 1, 0),
        libc::EINVAL,
    );
    t.err("gem: size u64::MAX", n.gem_create(u64::MAX, 0), libc::EINVAL);
    t.err("gem: unknown flag", n.gem_create(PAGE, 1 << 5), libc::EINVAL);
    t.ok(
        "gem: lazy object",
        n.gem_create(PAGE, uapi::GEM_CREATE_LAZY),
    );
    // 5000 bytes round up to two pages: the second page maps.
    if let Some(h2) = t.ok("gem: create 5000 bytes", n.gem_create(5000, 0)) {
        t.ok("gem: mmap rounded-up size", n.mmap(h2, 2 * PAGE).map(|_| ()));
    }
    t.err("gem: mmap_offset bad handle", n.mmap_offset(0xdead, 0), libc::ENOENT);
    t.err("gem: mmap_offset pad", n.mmap_offset(h, 1), libc::EINVAL);

    // Data written through one mapping is seen through another.
    if let Some(h3) = t.ok("gem: create 64 KiB", n.gem_create(16 * PAGE, 0)) {
        if let Some(m) = t.ok("gem: mmap", n.mmap(h3, 16 * PAGE)) {
            let fresh = (0..16 * 512).all(|i| m.read(i) == 0);
            t.check("gem: new object reads zero", fresh, || "non-zero data".into());
            for i in 0..16 * 512 {
                m.write(i, 0x5eed_0000_0000 + i as u64);
            }
        }
        if let Some(m) = t.ok("gem: mmap again", n.mmap(h3, 16 * PAGE)) {
            let same = (0..16 * 512).all(|i| m.read(i) == 0x5eed_0000_0000 + i as u64);
            t.check("gem: data persists across mappings", same, || "data differs".into());
        }
        t.ok("gem: close handle", n.gem_close(h3));
        t.err("gem: mmap_offset after close", n.mmap_offset(h3, 0), libc::ENOENT);
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

    if t.ok("vm: bind 2 pages rw", n.bind(h, 0, va, 2 * PAGE, rw)).is_some() {
        let l = vm_line(va).unwrap_or_default();
        t.check("vm: debugfs shows the mapping", !l.is_empty(), || "no line".into());
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
        ("overlap first page", h, 0, va - PAGE, 2 * PAGE, rw, libc::EEXIST),
        ("overlap last page", h, 0, va + PAGE, 2 * PAGE, rw, libc::EEXIST),
        ("unaligned va", h, 0, va + 0x10_0000 + 8, PAGE, rw, libc::EINVAL),
        ("unaligned size", h, 0, va + 0x10_0000, PAGE + 1, rw, libc::EINVAL),
        ("unaligned bo offset", h, 8, va + 0x10_0000, PAGE, rw, libc::EINVAL),
        ("size 0", h, 0, va + 0x10_0000, 0, rw, libc::EINVAL),
        ("beyond the bo", h, 15 * PAGE, va + 0x10_0000, 2 * PAGE, rw, libc::EINVAL),
        ("bo offset overflow", h, u64::MAX - PAGE + 1, va + 0x10_0000, PAGE, rw, libc::EINVAL),
        ("below VA_START", h, 0, 0, PAGE, rw, libc::EINVAL),
        ("at VA_END", h, 0, end, PAGE, rw, libc::EINVAL),
        ("crossing VA_END", h, 0, end - PAGE, 2 * PAGE, rw, libc::EINVAL),
        ("va overflow", h, 0, u64::MAX - PAGE + 1, 2 * PAGE, rw, libc::EINVAL),
        ("no permission", h, 0, va + 0x10_0000, PAGE, 0, libc::EINVAL),
        ("unknown flag", h, 0, va + 0x10_0000, PAGE, rw | 8, libc::EINVAL),
        ("bad handle", 0xbad, 0, va + 0x10_0000, PAGE, rw, libc::ENOENT),
    ];
    for &(name, hh, off, v, s, fl, want) in bad {
        t.err(&format!("vm: bind {name}"), n.bind(hh, off, v, s, fl), want);
    }
    // Unbind needs the exact range.
    t.err("vm: unbind wrong size", n.unbind(va, PAGE), libc::ENOENT);
    t.err("vm: unbind wrong start", n.unbind(va + PAGE, PAGE), libc::ENOENT);
    t.err("vm: unbind nothing", n.unbind(va + 0x100_0000, PAGE), libc::ENOENT);
    t.ok("vm: unbind", n.unbind(va, 2 * PAGE));
    t.check("vm: mapping gone from debugfs", vm_line(va).is_none(), || "still listed".into());
    t.err("vm: unbind twice", n.unbind(va, 2 * PAGE), libc::ENOENT);

    // Every level of the table: the top of the user range, and a range
    // crossing a 1 GiB (level-2) and a 512 GiB (level-3, 48-bit only)
    // boundary; permissions as asked.
    let top = end - 4 * PAGE;
    t.ok("vm: bind at the top of the range", n.bind(h, 0, top, 4 * PAGE, uapi::VM_BIND_READ));
    let gb = (start + (1 << 30)) & !((1u64 << 30) - 1);
    t.ok(
        "vm: bind across a 1 GiB boundary",
        n.bind(h, 0, gb - 2 * PAGE, 4 * PAGE, uapi::VM_BIND_READ | uapi::VM_BIND_EXEC),
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
        t.ok("vm: bind across 512 GiB", n.bind(h, 0, tb - 2 * PAGE, 4 * PAGE, rw));
        let l = vm_line(tb - 2 * PAGE).unwrap_or_default();
        t.check(
            "vm: walk ok across 512 GiB",
            field(&l, "check").as_deref() == Some("ok") && field(&l, "walk_4k").as_deref() == Some("4"),
            || l.clone(),
        );
    }

    // A mapping keeps its BO after the handle is closed.
    let h2 = n.gem_create(4 * PAGE, 0).unwrap_or(0);
    let va2 = start + 0x20_0000;
    t.ok("vm: bind second bo", n.bind(h2, PAGE, va2, 2 * PAGE, rw));
    let bos = object("bos");
    t.ok("vm: close bound handle", n.gem_close(h2));
    t.check("vm: bound bo outlives its handle", object("bos") == bos, || {
        format!("bos {} -> {}", bos, object("bos"))
    });
    let l = vm_line(va2).unwrap_or_default();
    t.check(
        "vm: mapping intact after handle close",
        field(&l, "check").as_deref() == Some("ok"),
        || l.clone(),
    );
    t.err("vm: bind closed handle", n.bind(h2, 0, va2 + 0x10_0000, PAGE, rw), libc::ENOENT);
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

    // A larger BO: report how many 2 MiB pages were possible.
    if let Ok(hb) = n.gem_create(4 << 20, 0) {
        let vb = start + (64 << 20);
        t.ok("vm: bind 4 MiB at a 2 MiB boundary", n.bind(hb, 0, vb, 4 << 20, rw));
        let l = vm_line(vb).unwrap_or_default();
        t.check(
            "vm: 4 MiB walk ok",
            field(&l, "check").as_deref() == Some("ok"),
            || l.clone(),
        );
        println!(
            "info 4 MiB bind: pages_4k {} pages_2m {}",
            field(&l, "pages_4k").unwrap_or_default(),
            field(&l, "pages_2m").unwrap_or_default()
        );
    }
}

/// Objects return to zero after create/bind/unbind/close cycles and after
/// closing files with mappings left in place.
fn test_leaks(t: &mut T, path: &PathBuf, cycles: u32) {
    let before = (object("bos"), object("mappings"), object("pt_pool_used"));
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
        t.check(&format!("leaks: {cycles} cycles"), fails == 0, || format!("{fails} failed"));
        t.check("leaks: mappings left bound", object("mappings") >= i64::from(cycles.min(64)), || {
            format!("mappings {}", object("mappings"))
        });
    }
    let after = (object("bos"), object("mappings"), object("pt_pool_used"));
    t.check("leaks: counts back after close", before == after, || {
        format!("bos/mappings/pt_pool_used {before:?} -> {after:?}")
    });
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
    if want("leaks") {
        test_leaks(&mut t, &path, 1000);
    }
    println!("kmd-test: {} passed, {} failed", t.passed, t.failed);
    std::process::exit(i32::from(t.failed != 0));
}
