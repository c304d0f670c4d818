//! `HOST_MAP` and `HOST_UNMAP`: process memory mapped for the GPU. The
//! argument checks, a device copy into the process's memory and out of a
//! read-only mapping, a write into a read-only mapping faulting, a copy to
//! an unmapped range faulting, and VAs that do not overlap.

use std::path::Path;

use vgpu_umd::kmd::{Kmd, KmdError};
use vgpu_umd::uapi::{self, param};

use crate::debugfs::object;
use crate::node::{copy, fence, open, Cmds, Map, MS, PAGE};
use crate::report::T;

/// Anonymous memory of the test's own, page aligned, unmapped when dropped.
struct Anon {
    ptr: *mut u8,
    len: usize,
}

impl Anon {
    fn new(len: usize, prot: i32) -> Anon {
        // SAFETY: A fresh private anonymous mapping; nothing else refers to
        // it.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(ptr, libc::MAP_FAILED, "mmap");
        Anon {
            ptr: ptr.cast(),
            len,
        }
    }

    fn addr(&self) -> u64 {
        self.ptr as u64
    }

    fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: The mapping is `len` bytes, alive while `self` is, and
        // borrowed through `&mut self`; the device writes into it only
        // between a submit and its fence, while no slice is held.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for Anon {
    fn drop(&mut self) {
        // SAFETY: The mapping made in `new`.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

pub fn test_hostmap(t: &mut T, path: &Path) {
    let pinned = object("host_pinned_pages");
    section(t, path);
    // The file is closed: whatever it left mapped is unpinned once the
    // file's last reference goes (its contexts' teardown may hold it a
    // little longer).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while object("host_pinned_pages") != pinned && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    t.check(
        "hostmap: closing the file unpins its pages",
        object("host_pinned_pages") == pinned,
        || {
            format!(
                "{pinned} pinned pages before, {} after",
                object("host_pinned_pages")
            )
        },
    );
}
const SIZE: u64 = 16 * PAGE;

/// Copy jobs on one context, each from a slot of the command buffers.
struct Copier<'a> {
    n: &'a Kmd,
    cmds: &'a Cmds,
    ctx: u32,
}

impl Copier<'_> {
    /// Submits a copy of `size` bytes from `src` to `dst` at `slot` (the
    /// submit checked as `hostmap: submit WHAT`); the wait for its fence.
    fn run(
        &self,
        t: &mut T,
        slot: usize,
        src: u64,
        dst: u64,
        size: u64,
        what: &str,
    ) -> Option<Result<u32, KmdError>> {
        let (n, ctx) = (self.n, self.ctx);
        let c = self.cmds.program(slot, &[copy(src, dst, size)]);
        t.ok(
            &format!("hostmap: submit {what}"),
            n.submit(ctx, 0, &[c], &[]),
        )
        .map(|s| n.wait(&[fence(ctx, 0, s)], true, 5_000 * MS))
    }
}

fn section(t: &mut T, path: &Path) {
    let n = open(path);
    let start = n.get_param(param::VA_START).unwrap_or(0);
    let va_end = n.get_param(param::VA_END).unwrap_or(0);
    let mut host = Anon::new(
        SIZE as usize + 2 * PAGE as usize,
        libc::PROT_READ | libc::PROT_WRITE,
    );
    let at = host.addr() + PAGE;
    let _ro = arguments(t, &n, at, va_end);

    // A device copy into the process's memory.
    let Some(ctx) = t.ok(
        "hostmap: create copy context",
        n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1 << uapi::ENGINE_COPY, 0),
    ) else {
        return;
    };
    let cmds = Cmds::new(&n, start + 0x100_0000, 4).expect("cmds");
    let hb = n.gem_create(SIZE, 0).unwrap_or(0);
    let bva = start + 0x200_0000;
    let b = Map::new(&n, hb, SIZE).expect("mmap bo");
    let _ = n.vm_bind(hb, bva, SIZE, uapi::VM_BIND_READ | uapi::VM_BIND_WRITE);
    for i in 0..(SIZE / 8) as usize {
        b.write(i, 0x7777_0000_0000_0000 | i as u64);
    }
    host.bytes().fill(0x5a);
    let run = Copier {
        n: &n,
        cmds: &cmds,
        ctx,
    };
    let Some(hva) = t.ok("hostmap: map 16 pages", n.host_map(at, SIZE, 0)) else {
        return;
    };
    copy_into_process(t, &run, &mut host, hva, bva, va_end);
    let mut src = read_only_source(t, &run, hva, bva, &b);
    let Some(ctx2) = t.ok(
        "hostmap: a second copy context",
        n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1 << uapi::ENGINE_COPY, 0),
    ) else {
        return;
    };
    let run2 = Copier {
        n: &n,
        cmds: &cmds,
        ctx: ctx2,
    };
    write_into_read_only(t, &run2, &mut src, bva);
    let Some(ctx3) = unmapped(t, &run, &mut host, hva, bva) else {
        return;
    };
    left_to_close(t, &n, at);
    for c in [ctx, ctx2, ctx3] {
        let _ = n.ctx_destroy(c);
    }
}

/// The argument checks (`at`: 16 pages of the process's memory). Returns
/// the read-only memory used (kept to the end).
fn arguments(t: &mut T, n: &Kmd, at: u64, va_end: u64) -> Anon {
    let bad: &[(&str, u64, u64, u32)] = &[
        ("address not page aligned", at + 8, SIZE, 0),
        ("size not a page multiple", at, SIZE - 8, 0),
        ("size 0", at, 0, 0),
        (
            "size above the limit",
            at,
            uapi::HOST_MAP_MAX_SIZE + PAGE,
            0,
        ),
        ("unknown flag", at, SIZE, 1 << 7),
        ("range wrapping", !(PAGE - 1), 2 * PAGE, 0),
    ];
    for &(what, addr, size, flags) in bad {
        t.err(
            &format!("hostmap: {what}: EINVAL"),
            n.host_map(addr, size, flags),
            libc::EINVAL,
        );
    }
    let ro = Anon::new(SIZE as usize, libc::PROT_READ);
    t.err(
        "hostmap: read-only memory mapped for writing: EFAULT",
        n.host_map(ro.addr(), SIZE, 0),
        libc::EFAULT,
    );
    let gone = Anon::new(SIZE as usize, libc::PROT_READ | libc::PROT_WRITE);
    let gone_at = gone.addr();
    drop(gone);
    t.err(
        "hostmap: memory the process does not map: EFAULT",
        n.host_map(gone_at, SIZE, 0),
        libc::EFAULT,
    );
    t.err(
        "hostmap: HOST_UNMAP of no mapping: ENOENT",
        n.host_unmap(va_end + 0x1234_5000),
        libc::ENOENT,
    );
    ro
}

/// A device copy from the BO at `bva` into the process's memory `host`
/// mapped at `hva`: the bytes copied, nothing around them.
fn copy_into_process(t: &mut T, run: &Copier, host: &mut Anon, hva: u64, bva: u64, va_end: u64) {
    t.check(
        "hostmap: the VA is in the KMD's range, page aligned",
        hva >= va_end && hva.is_multiple_of(PAGE),
        || format!("{hva:#x} (user range ends at {va_end:#x})"),
    );
    if let Some(r) = run.run(t, 0, bva + 8, hva + 3, SIZE - 16, "copy into the process") {
        t.ok("hostmap: copy into the process", r);
    }
    let mem = host.bytes();
    // Byte k of the copy is byte 8 + k of the BO.
    let want = |k: usize| -> u8 {
        let j = k + 8;
        (0x7777_0000_0000_0000u64 | (j / 8) as u64).to_le_bytes()[j % 8]
    };
    let p = PAGE as usize;
    let bad_at = (0..SIZE as usize - 16).find(|&k| mem[p + 3 + k] != want(k));
    t.check(
        "hostmap: the process reads the device's copy",
        bad_at.is_none(),
        || format!("first difference at byte {bad_at:?}"),
    );
    let around = mem[..p + 3]
        .iter()
        .chain(&mem[p + 3 + SIZE as usize - 16..])
        .all(|&x| x == 0x5a);
    t.check(
        "hostmap: bytes outside the copy untouched",
        around,
        String::new,
    );
}

/// A second mapping, read-only: the device reads the process's memory
/// into the BO `b` (at `bva`). Returns that memory (kept to the end).
fn read_only_source(t: &mut T, run: &Copier, hva: u64, bva: u64, b: &Map) -> Anon {
    let n = run.n;
    let mut src = Anon::new(SIZE as usize, libc::PROT_READ | libc::PROT_WRITE);
    src.bytes()
        .iter_mut()
        .enumerate()
        .for_each(|(i, x)| *x = (i * 7) as u8);
    if let Some(rva) = t.ok(
        "hostmap: map read-only",
        n.host_map(src.addr(), SIZE, uapi::HOST_MAP_READ_ONLY),
    ) {
        t.check(
            "hostmap: two mappings do not overlap",
            rva + SIZE <= hva || hva + SIZE <= rva,
            || format!("{rva:#x} and {hva:#x}"),
        );
        if let Some(r) = run.run(t, 1, rva, bva, SIZE, "copy out of the process") {
            t.ok("hostmap: copy out of a read-only mapping", r);
        }
        let ok = (0..(SIZE / 8) as usize).all(|i| {
            let v = b.read(i).to_le_bytes();
            (0..8).all(|k| v[k] == ((i * 8 + k) * 7) as u8)
        });
        t.check("hostmap: the BO holds the process's bytes", ok, String::new);
    }
    src
}

/// A write into a read-only mapping of `src` faults, the memory unchanged.
fn write_into_read_only(t: &mut T, run2: &Copier, src: &mut Anon, bva: u64) {
    let n = run2.n;
    let before = src.bytes()[0];
    if let Ok(rva) = n.host_map(src.addr(), SIZE, uapi::HOST_MAP_READ_ONLY) {
        if let Some(r) = run2.run(t, 2, bva, rva, PAGE, "write into a read-only mapping") {
            t.err(
                "hostmap: a write into a read-only mapping faults",
                r,
                libc::EIO,
            );
        }
        t.check(
            "hostmap: the read-only memory unchanged",
            src.bytes()[0] == before,
            String::new,
        );
        let _ = n.host_unmap(rva);
    }
}

/// Unmapped: the next copy to the range faults, the memory unchanged.
/// Returns the context of that copy (`None`: not created).
fn unmapped(t: &mut T, run: &Copier, host: &mut Anon, hva: u64, bva: u64) -> Option<u32> {
    let (n, cmds) = (run.n, run.cmds);
    t.ok("hostmap: HOST_UNMAP", n.host_unmap(hva));
    host.bytes().fill(0x33);
    let ctx3 = t.ok(
        "hostmap: a third copy context",
        n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1 << uapi::ENGINE_COPY, 0),
    )?;
    let c = cmds.program(3, &[copy(bva, hva, SIZE)]);
    if let Some(s) = t.ok(
        "hostmap: submit a copy to the unmapped range",
        n.submit(ctx3, 0, &[c], &[]),
    ) {
        t.err(
            "hostmap: a copy to an unmapped host range faults",
            n.wait(&[fence(ctx3, 0, s)], true, 5_000 * MS),
            libc::EIO,
        );
    }
    t.check(
        "hostmap: memory given back is not written",
        host.bytes().iter().all(|&x| x == 0x33),
        String::new,
    );
    t.err(
        "hostmap: HOST_UNMAP twice: ENOENT",
        n.host_unmap(hva),
        libc::ENOENT,
    );
    Some(ctx3)
}

/// A mapping left for close to release: its pages counted as pinned.
fn left_to_close(t: &mut T, n: &Kmd, at: u64) {
    let before = object("host_pinned_pages");
    t.ok(
        "hostmap: a mapping left to the file's close",
        n.host_map(at, SIZE, 0),
    );
    t.check(
        "hostmap: its pages counted as pinned",
        object("host_pinned_pages") == before + (SIZE / PAGE) as i64,
        || format!("{before} -> {}", object("host_pinned_pages")),
    );
}
