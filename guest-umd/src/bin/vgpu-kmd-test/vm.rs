//! `VM_BIND` / `VM_UNBIND`: a table of bad arguments, the page tables the
//! KMD builds (walked by debugfs `vms`), lazy BOs, 2 MiB pages. A walk that
//! does not match is explained from the entry where the device's walk
//! stops (debugfs `vms` traces it).

use std::path::Path;

use vgpu_hwif::mmu::{level_index, PTE_ADDR_MASK};
use vgpu_umd::kmd::Kmd;
use vgpu_umd::uapi::{self, param};

use crate::debugfs::{field, object, vm_block, vm_line};
use crate::node::{open, PAGE};
use crate::report::T;

/// Both parts: `vm-4k`, then `vm-2m`.
pub fn test_vm(t: &mut T, path: &Path) {
    test_vm_4k(t, path);
    test_vm_2m(t, path);
}

/// What the parts of [`test_vm_4k`] share: the file, its user VA range
/// and width, a BO of 16 pages and where its first bind goes.
struct Vm<'a> {
    n: &'a Kmd,
    start: u64,
    end: u64,
    bits: u64,
    rw: u32,
    h: u32,
    va: u64,
}

/// Bad arguments, 4 KiB pages at every level of the table, a mapping that
/// outlives its handle, lazy BOs.
pub fn test_vm_4k(t: &mut T, path: &Path) {
    let n = open(path);
    let start = n.get_param(param::VA_START).unwrap_or(0);
    let end = n.get_param(param::VA_END).unwrap_or(0);
    let bits = n.get_param(param::VA_BITS).unwrap_or(0);
    t.check(
        "vm: user VA range inside the VA width",
        start >= PAGE && start < end && bits >= 32 && end < (1u64 << bits),
        || format!("start {start:#x} end {end:#x} bits {bits}"),
    );
    let rw = uapi::VM_BIND_READ | uapi::VM_BIND_WRITE;
    let h = n.gem_create(16 * PAGE, 0).unwrap_or(0);
    let va = start + 0x10_0000;
    let f = Vm {
        n: &n,
        start,
        end,
        bits,
        rw,
        h,
        va,
    };
    bind_and_walk(t, &f);
    bad_binds(t, &f);
    unbind_exact_range(t, &f);
    every_level(t, &f);
    outlives_handle(t, &f);
    lazy(t, &f);
}

/// A bind of 2 pages: debugfs shows it, the walk matches the BO.
fn bind_and_walk(t: &mut T, f: &Vm) {
    let (n, rw, h, va) = (f.n, f.rw, f.h, f.va);
    if t.ok("vm: bind 2 pages rw", n.vm_bind(h, va, 2 * PAGE, rw))
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
            || walk_why(va),
        );
    }
}

/// Bad arguments.
fn bad_binds(t: &mut T, f: &Vm) {
    let (n, end, rw, h, va) = (f.n, f.end, f.rw, f.h, f.va);
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
        t.err(
            &format!("vm: bind {name}"),
            n.vm_bind_range(hh, off, v, s, fl),
            want,
        );
    }
}

/// Unbind needs the exact range.
fn unbind_exact_range(t: &mut T, f: &Vm) {
    let (n, va) = (f.n, f.va);
    t.err("vm: unbind wrong size", n.vm_unbind(va, PAGE), libc::ENOENT);
    t.err(
        "vm: unbind wrong start",
        n.vm_unbind(va + PAGE, PAGE),
        libc::ENOENT,
    );
    t.err(
        "vm: unbind nothing",
        n.vm_unbind(va + 0x100_0000, PAGE),
        libc::ENOENT,
    );
    t.ok("vm: unbind", n.vm_unbind(va, 2 * PAGE));
    t.check(
        "vm: mapping gone from debugfs",
        vm_line(va).is_none(),
        || "still listed".into(),
    );
    t.err("vm: unbind twice", n.vm_unbind(va, 2 * PAGE), libc::ENOENT);
}

/// Every level of the table: the top of the user range, and a range
/// crossing a 1 GiB (level-2) and a 512 GiB (level-3, 48-bit only)
/// boundary; permissions as asked.
fn every_level(t: &mut T, f: &Vm) {
    let (n, start, end, bits, rw, h) = (f.n, f.start, f.end, f.bits, f.rw, f.h);
    let top = end - 4 * PAGE;
    t.ok(
        "vm: bind at the top of the range",
        n.vm_bind(h, top, 4 * PAGE, uapi::VM_BIND_READ),
    );
    let gb = (start + (1 << 30)) & !((1u64 << 30) - 1);
    t.ok(
        "vm: bind across a 1 GiB boundary",
        n.vm_bind(
            h,
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
            || walk_why(v),
        );
    }
    if bits > 39 {
        let tb = 1u64 << 39;
        t.ok(
            "vm: bind across 512 GiB",
            n.vm_bind(h, tb - 2 * PAGE, 4 * PAGE, rw),
        );
        let l = vm_line(tb - 2 * PAGE).unwrap_or_default();
        t.check(
            "vm: walk ok across 512 GiB",
            field(&l, "check").as_deref() == Some("ok")
                && field(&l, "walk_4k").as_deref() == Some("4"),
            || walk_why(tb - 2 * PAGE),
        );
        // A page in an untouched 512 GiB region (level-3 entry 2) needs
        // three new tables (levels 2, 1 and 0), and the address space's
        // table count (debugfs `objects`: vm_tables, this process alone)
        // says so.
        let fresh = 2u64 << 39;
        if fresh + PAGE <= end {
            let before = object("vm_tables");
            t.ok(
                "vm: bind in a fresh 512 GiB region",
                n.vm_bind(h, fresh, PAGE, rw),
            );
            let after = object("vm_tables");
            t.check(
                "vm: three new tables counted for it",
                before >= 0 && after - before == 3,
                || {
                    format!(
                        "debugfs objects: vm_tables {before} before the bind, {after} after: a page \
                         under an empty level-3 entry needs tables at levels 2, 1 and 0, each \
                         counted once"
                    )
                },
            );
        }
    }
}

/// A mapping keeps its BO after the handle is closed.
fn outlives_handle(t: &mut T, f: &Vm) {
    let (n, start, rw) = (f.n, f.start, f.rw);
    let h2 = n.gem_create(4 * PAGE, 0).unwrap_or(0);
    let va2 = start + 0x20_0000;
    t.ok(
        "vm: bind second bo",
        n.vm_bind_range(h2, PAGE, va2, 2 * PAGE, rw),
    );
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
        || walk_why(va2),
    );
    t.err(
        "vm: bind closed handle",
        n.vm_bind(h2, va2 + 0x10_0000, PAGE, rw),
        libc::ENOENT,
    );
    t.ok("vm: unbind last reference", n.vm_unbind(va2, 2 * PAGE));
    t.check("vm: bo freed at unbind", object("bos") == bos - 1, || {
        format!("bos {} -> {}", bos, object("bos"))
    });
}

/// Lazy BOs: nothing is mapped until the GPU faults.
fn lazy(t: &mut T, f: &Vm) {
    let (n, start, rw) = (f.n, f.start, f.rw);
    let hl = n.gem_create(8 * PAGE, uapi::GEM_CREATE_LAZY).unwrap_or(0);
    let val = start + 0x40_0000;
    t.ok("vm: bind lazy bo", n.vm_bind(hl, val, 8 * PAGE, rw));
    let l = vm_line(val).unwrap_or_default();
    t.check(
        "vm: lazy mapping has no entries",
        field(&l, "lazy").as_deref() == Some("1")
            && field(&l, "walk_4k").as_deref() == Some("0")
            && field(&l, "check").as_deref() == Some("ok"),
        || walk_why(val),
    );
}

/// 2 MiB pages: a 2 MiB-aligned bind of a large BO maps with 2 MiB leaves
/// at level 1, an unaligned one with 4 KiB pages.
pub fn test_vm_2m(t: &mut T, path: &Path) {
    let n = open(path);
    let start = n.get_param(param::VA_START).unwrap_or(0);
    let rw = uapi::VM_BIND_READ | uapi::VM_BIND_WRITE;
    // A larger BO: the guest kernel backs shmem with 2 MiB folios where
    // the object is large enough, so a 2 MiB-aligned bind of it maps with
    // 2 MiB GPU pages (when the device offers them); an offset that breaks
    // the alignment falls back to 4 KiB pages.
    if let Ok(hb) = n.gem_create(4 << 20, 0) {
        let huge = n.get_param(param::PAGE_SIZES).unwrap_or(0) & (2 << 20) != 0;
        let vb = (start + (64 << 20)).next_multiple_of(2 << 20);
        t.ok(
            "vm: bind 4 MiB at a 2 MiB boundary",
            n.vm_bind(hb, vb, 4 << 20, rw),
        );
        let l = vm_line(vb).unwrap_or_default();
        t.check(
            "vm: 4 MiB walk ok",
            field(&l, "check").as_deref() == Some("ok"),
            || walk_why(vb),
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
            || {
                if field(&l, "check").as_deref() == Some("ok") {
                    format!("want pages_4k {} pages_2m {}: {l}", want.0, want.1)
                } else {
                    walk_why(vb)
                }
            },
        );
        let vo = start + (72 << 20) + PAGE;
        t.ok(
            "vm: bind 2 MiB at a 4 KiB offset",
            n.vm_bind(hb, vo, 2 << 20, rw),
        );
        let l = vm_line(vo).unwrap_or_default();
        t.check(
            "vm: unaligned bind uses 4 KiB pages",
            field(&l, "pages_4k").as_deref() == Some("512")
                && field(&l, "pages_2m").as_deref() == Some("0")
                && field(&l, "check").as_deref() == Some("ok"),
            || {
                if field(&l, "check").as_deref() == Some("ok") {
                    format!("want pages_4k 512 pages_2m 0: {l}")
                } else {
                    walk_why(vo)
                }
            },
        );
    }
}

/// Why the walk of the mapping at `va` does not match its BO, from debugfs
/// `vms`: the first VA that differs, the entry where the device's walk of
/// it stops and what that entry holds; then the lines themselves.
fn walk_why(va: u64) -> String {
    let block = vm_block(va);
    let lines = block.join("; ");
    if block.is_empty() {
        return format!("debugfs vms lists no mapping at {va:#x}");
    }
    let Some(stop) = block.iter().rev().find(|l| l.starts_with("walk ")) else {
        return format!("debugfs vms: {lines}");
    };
    format!("{} (debugfs vms: {lines})", why_stopped(stop))
}

/// One `walk va X level L index I entry E ...` line of debugfs `vms`, the
/// last of a walk, as a sentence.
fn why_stopped(line: &str) -> String {
    let num = |name: &str| {
        field(line, name).and_then(|v| match v.strip_prefix("0x") {
            Some(h) => u64::from_str_radix(h, 16).ok(),
            None => v.parse().ok(),
        })
    };
    let (Some(va), Some(level), Some(index), Some(entry)) =
        (num("va"), num("level"), num("index"), num("entry"))
    else {
        return format!("unreadable walk line {line:?}");
    };
    let at = format!("level {level} entry {index} (VA {va:#x})");
    let below = level.saturating_sub(1);
    if let Some(page) = num("page") {
        return format!(
            "{at} is a leaf of page {page:#x} ({}, perms {}): not the BO's page, or not the \
             mapping's permissions or size",
            field(line, "size").unwrap_or_default(),
            field(line, "perms").unwrap_or_default()
        );
    }
    let driver = field(line, "driver_table").filter(|d| d != "none");
    let used: Vec<u64> = field(line, "used")
        .unwrap_or_default()
        .split(',')
        .filter_map(|u| u.parse().ok())
        .collect();
    if let Some(pa) = num("table") {
        return format!(
            "{at} points at table {pa:#x}, but the driver's level-{below} table for that slot is {}",
            driver.as_deref().unwrap_or("none")
        );
    }
    if !line.contains(" not-present ") {
        return format!(
            "{at} holds {entry:#x}, which the device rejects as {} at level {level}",
            line.split_whitespace().nth(9).unwrap_or("malformed")
        );
    }
    if entry != 0 {
        let own = driver
            .as_deref()
            .and_then(|d| u64::from_str_radix(d.trim_start_matches("0x"), 16).ok())
            .is_some_and(|d| d == entry & PTE_ADDR_MASK);
        return format!(
            "{at} holds {entry:#x} without the valid bit (bit 0){}: the device's walk stops \
             there (not present); a table entry is Pte::table(address), which sets it",
            if own {
                format!(", the address of the driver's level-{below} table")
            } else {
                String::new()
            }
        );
    }
    // The entry is empty: a table linked at another level's index, a
    // table never linked, or nothing at all.
    let other = used.iter().find_map(|&u| {
        (0..4u32)
            .filter(|&k| u64::from(k) != level)
            .find(|&k| level_index(va, k) as u64 == u)
            .map(|k| (u, k))
    });
    if let Some((u, k)) = other {
        return format!(
            "the table for VA {va:#x} was linked at level {level} index {u} \
             (level_index(va, {k})), expected index {index} (level_index(va, {level})): the \
             device's walk finds entry {index} empty"
        );
    }
    if let Some(d) = driver {
        return format!(
            "{at} is empty, but the driver has a level-{below} table for it at {d}: the new \
             table was never linked into its parent's entry"
        );
    }
    format!(
        "{at} is empty and the driver has no table for it (the table's non-zero entries: {})",
        if used.is_empty() {
            "none".to_string()
        } else {
            format!("{used:?}")
        }
    )
}

#[cfg(test)]
mod tests {
    use super::why_stopped;

    #[test]
    fn a_table_entry_without_its_valid_bit() {
        let l = "walk va 0x110000 level 3 index 0 entry 0x1234000 not-present \
                 driver_table 0x1234000 used 0";
        let w = why_stopped(l);
        assert!(w.starts_with("level 3 entry 0 (VA 0x110000) holds 0x1234000 without the valid bit (bit 0), the address of the driver's level-2 table"), "{w}");
    }

    #[test]
    fn a_table_linked_at_the_next_level_s_index() {
        let l = "walk va 0x110000 level 1 index 0 entry 0x0 not-present driver_table none \
                 used 272";
        let w = why_stopped(l);
        assert!(w.starts_with("the table for VA 0x110000 was linked at level 1 index 272 (level_index(va, 0)), expected index 0 (level_index(va, 1))"), "{w}");
    }

    #[test]
    fn a_table_never_linked() {
        let l = "walk va 0x110000 level 3 index 0 entry 0x0 not-present \
                 driver_table 0x5000 used -";
        let w = why_stopped(l);
        assert!(w.contains("the driver has a level-2 table for it at 0x5000: the new table was never linked into its parent's entry"), "{w}");
    }

    #[test]
    fn a_leaf_and_a_malformed_entry() {
        let l =
            "walk va 0x110000 level 0 index 272 entry 0x9007 leaf page 0x9000 size 4k perms rw-";
        assert!(why_stopped(l).starts_with(
            "level 0 entry 272 (VA 0x110000) is a leaf of page 0x9000 (4k, perms rw-)"
        ));
        let l = "walk va 0x110000 level 2 index 0 entry 0x5003 MALFORMED driver_table none used 0";
        assert!(why_stopped(l)
            .contains("holds 0x5003, which the device rejects as MALFORMED at level 2"));
    }
}
