//! A VA rebound to another BO after the GPU used it reads the new BO (the
//! unbind invalidated the TLB).

use std::path::Path;

use vgpu_umd::uapi::{self, param};

use crate::node::{copy, fence, open, Cmds, Map, MS, PAGE};
use crate::report::T;

/// A VA the GPU has read is unbound and bound to another BO; the next GPU
/// copy from it must read the new BO on every page (the unbind's TLB
/// invalidation). A stale translation shows up as a page of the old BO.
///
/// The range spans three 64-byte lines of leaf entries (8 pages each): a
/// TLB miss caches its whole line, so the first access after the remap
/// refreshes the translations of pages 0..8 even if the unbind invalidated
/// only its first page; pages 8.. are read through what the TLB still
/// holds.
pub fn test_remap(t: &mut T, path: &Path) {
    const PAGES: u64 = 20;
    let n = open(path);
    let start = n.get_param(param::VA_START).unwrap_or(0);
    let rw = uapi::VM_BIND_READ | uapi::VM_BIND_WRITE;
    let Some(ctx) = t.ok(
        "remap: create copy context",
        n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1 << uapi::ENGINE_COPY, 0),
    ) else {
        return;
    };
    let cmds = Cmds::new(&n, start + 0x100_0000, 16).expect("mmap cmds");
    let size = PAGES * PAGE;
    let (ha, hb, hd) = (
        n.gem_create(size, 0).unwrap_or(0),
        n.gem_create(size, 0).unwrap_or(0),
        n.gem_create(size, 0).unwrap_or(0),
    );
    let (sva, dva) = (start + 0x200_0000, start + 0x300_0000);
    let a = Map::new(&n, ha, size).expect("mmap a");
    let b = Map::new(&n, hb, size).expect("mmap b");
    let d = Map::new(&n, hd, size).expect("mmap dst");
    for i in 0..(size / 8) as usize {
        a.write(i, 0xaaaa_0000_0000_0000 | i as u64);
        b.write(i, 0xbbbb_0000_0000_0000 | i as u64);
    }
    let _ = n.vm_bind(hd, dva, size, rw);
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
    t.ok("remap: bind a", n.vm_bind(ha, sva, size, rw));
    copy_once(t, 0, "copy from a");
    let got = pages_from(0xaaaa_0000_0000_0000);
    t.check(
        "remap: every page read from a",
        got.len() == PAGES as usize,
        || format!("pages from a: {got:?}"),
    );
    t.ok("remap: unbind a", n.vm_unbind(sva, size));
    t.ok("remap: bind b at the same va", n.vm_bind(hb, sva, size, rw));
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

/// One thread copies the 32-bit word at `src` to `dst`: a read through the
/// compute engine's own TLB.
const PEEK: &str = "\
.kernel peek
.arg src ptr
.arg dst ptr
.workgroup 1
    ldarg   d2, [src]
    ldarg   d4, [dst]
    ld.32   r8, [d2]
    st.32   [d4], r8
    exit
.end
";

/// [`test_remap`] through the compute engine: a kernel reads a VA, the VA
/// is unbound and bound to another BO, and the next kernel must read the
/// new BO. The compute engine caches translations in a TLB of its own, so
/// an invalidation that names only the copy engine leaves it stale.
pub fn test_remap_compute(t: &mut T, path: &Path) {
    let n = open(path);
    let start = n.get_param(param::VA_START).unwrap_or(0);
    let rw = uapi::VM_BIND_READ | uapi::VM_BIND_WRITE;
    let Some(ctx) = t.ok(
        "remap-compute: create compute context",
        n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1 << uapi::ENGINE_COMPUTE, 0),
    ) else {
        return;
    };
    let cmds = Cmds::new(&n, start + 0x100_0000, 16).expect("mmap cmds");
    let module = match cmds.module(1024, PEEK) {
        Ok(m) => m,
        Err(e) => {
            t.check("remap-compute: assemble the peek kernel", false, || e);
            return;
        }
    };
    let (ha, hb, hd) = (
        n.gem_create(PAGE, 0).unwrap_or(0),
        n.gem_create(PAGE, 0).unwrap_or(0),
        n.gem_create(PAGE, 0).unwrap_or(0),
    );
    let (sva, dva) = (start + 0x200_0000, start + 0x300_0000);
    let a = Map::new(&n, ha, PAGE).expect("mmap a");
    let b = Map::new(&n, hb, PAGE).expect("mmap b");
    let d = Map::new(&n, hd, PAGE).expect("mmap dst");
    a.write(0, 0xaaaa_aaaa);
    b.write(0, 0xbbbb_bbbb);
    let _ = n.vm_bind(hd, dva, PAGE, rw);
    // The arguments at 0x100 in dst's page: src, then dst (the page's
    // first word, where the word read lands).
    d.write(32, sva);
    d.write(33, dva);
    let program = cmds.program(0, &[module.dispatch(dva + 0x100, 16)]);
    let peek = |t: &mut T, what: &str| -> u64 {
        d.write(0, 0);
        if let Some(s) = t.ok(
            &format!("remap-compute: dispatch {what}"),
            n.submit(ctx, uapi::ENGINE_COMPUTE, &[program], &[]),
        ) {
            t.ok(
                &format!("remap-compute: wait {what}"),
                n.wait(&[fence(ctx, uapi::ENGINE_COMPUTE, s)], true, 5_000 * MS),
            );
        }
        d.read(0)
    };
    t.ok("remap-compute: bind a", n.vm_bind(ha, sva, PAGE, rw));
    let got = peek(t, "a read of a");
    t.check(
        "remap-compute: the kernel reads a",
        got == 0xaaaa_aaaa,
        || format!("read {got:#x}"),
    );
    t.ok("remap-compute: unbind a", n.vm_unbind(sva, PAGE));
    t.ok(
        "remap-compute: bind b at the same va",
        n.vm_bind(hb, sva, PAGE, rw),
    );
    let got = peek(t, "a read after the remap");
    t.check(
        "remap-compute: the kernel reads b after the remap",
        got == 0xbbbb_bbbb,
        || {
            format!(
                "read {got:#x}{}",
                if got == 0xaaaa_aaaa {
                    ": the old BO's word, through a stale translation in the compute engine's \
                     TLB (the unbind's invalidation must cover every engine: engine_mask 0)"
                } else {
                    ""
                }
            )
        },
    );
    let _ = n.ctx_destroy(ctx);
}

/// A range the GPU has read, unbound and its BO closed, faults on the next
/// GPU access: the unbind's invalidation dropped the cached translations,
/// so the engine walks the page table, finds no entry and the job fails
/// (`EIO`) instead of reading pages the driver no longer maps and has
/// given back. A driver that skips the invalidation lets the copy read
/// them (and the sanitizer names it).
pub fn test_unmapped(t: &mut T, path: &Path) {
    const PAGES: u64 = 4;
    let n = open(path);
    let start = n.get_param(param::VA_START).unwrap_or(0);
    let rw = uapi::VM_BIND_READ | uapi::VM_BIND_WRITE;
    let Some(ctx) = t.ok(
        "unmapped: create copy context",
        n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1 << uapi::ENGINE_COPY, 0),
    ) else {
        return;
    };
    let cmds = Cmds::new(&n, start + 0x100_0000, 4).expect("mmap cmds");
    let size = PAGES * PAGE;
    let (hx, hd) = (
        n.gem_create(size, 0).unwrap_or(0),
        n.gem_create(size, 0).unwrap_or(0),
    );
    let (sva, dva) = (start + 0x200_0000, start + 0x300_0000);
    {
        let x = Map::new(&n, hx, size).expect("mmap x");
        for i in 0..(size / 8) as usize {
            x.write(i, 0x5555_0000_0000_0000 | i as u64);
        }
    }
    let d = Map::new(&n, hd, size).expect("mmap dst");
    let _ = n.vm_bind(hd, dva, size, rw);
    t.ok("unmapped: bind x", n.vm_bind(hx, sva, size, rw));
    let run = |t: &mut T, slot: usize| {
        let c = cmds.program(slot, &[copy(sva, dva, size)]);
        t.ok("unmapped: submit", n.submit(ctx, 0, &[c], &[]))
            .map(|s| n.wait(&[fence(ctx, 0, s)], true, 5_000 * MS))
    };
    if let Some(r) = run(t, 0) {
        t.ok("unmapped: copy from x while bound", r);
    }
    t.check(
        "unmapped: the copy read x",
        d.read(0) == 0x5555_0000_0000_0000,
        || format!("{:#x}", d.read(0)),
    );
    for i in 0..(size / 8) as usize {
        d.write(i, 0);
    }
    t.ok("unmapped: unbind x", n.vm_unbind(sva, size));
    t.ok("unmapped: close x", n.gem_close(hx));
    if let Some(r) = run(t, 1) {
        t.err(
            "unmapped: a copy from the unbound range faults",
            r,
            libc::EIO,
        );
    }
    let leaked: Vec<u64> = (0..PAGES)
        .filter(|p| d.read((p * PAGE / 8) as usize) >> 48 == 0x5555)
        .collect();
    t.check(
        "unmapped: nothing of x was read after its unbind",
        leaked.is_empty(),
        || format!("pages of x read through stale translations: {leaked:?}"),
    );
    let _ = n.ctx_destroy(ctx);
}

/// The device refuses the unbind's TLB invalidation (run with the device
/// armed `control-busy:packet=TLB_INVALIDATE,count=1`): the driver cannot
/// know that no context still translates to the pages, so `VM_UNBIND`
/// fails with `EIO` (the pages kept, docs/uapi.md) instead of reporting a
/// success it cannot promise; the next unbind, its invalidation answered,
/// succeeds.
pub fn test_unbind_refused(t: &mut T, path: &Path) {
    let n = open(path);
    let start = n.get_param(param::VA_START).unwrap_or(0);
    let rw = uapi::VM_BIND_READ | uapi::VM_BIND_WRITE;
    let Some(ctx) = t.ok(
        "unbind-refused: create copy context",
        n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1 << uapi::ENGINE_COPY, 0),
    ) else {
        return;
    };
    let cmds = Cmds::new(&n, start + 0x100_0000, 4).expect("mmap cmds");
    let (ha, hb) = (
        n.gem_create(PAGE, 0).unwrap_or(0),
        n.gem_create(PAGE, 0).unwrap_or(0),
    );
    let (ava, bva) = (start + 0x200_0000, start + 0x300_0000);
    t.ok("unbind-refused: bind a", n.vm_bind(ha, ava, PAGE, rw));
    t.ok("unbind-refused: bind b", n.vm_bind(hb, bva, PAGE, rw));
    let c = cmds.program(0, &[copy(ava, bva, PAGE)]);
    if let Some(s) = t.ok("unbind-refused: copy a to b", n.submit(ctx, 0, &[c], &[])) {
        t.ok(
            "unbind-refused: the copy completes",
            n.wait(&[fence(ctx, 0, s)], true, 5_000 * MS),
        );
    }
    t.err(
        "unbind-refused: unbind fails when the device refuses its TLB invalidation",
        n.vm_unbind(ava, PAGE),
        libc::EIO,
    );
    t.ok(
        "unbind-refused: the next unbind succeeds",
        n.vm_unbind(bva, PAGE),
    );
    let _ = n.ctx_destroy(ctx);
}
