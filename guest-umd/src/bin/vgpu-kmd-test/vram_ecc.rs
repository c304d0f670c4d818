//! An uncorrectable error in a VRAM page (docs/uapi.md, "Retired pages"):
//! the e2e case starts the device with `--inject
//! ecc:engine=copy,packet=COPY,after=2`, so the second COPY, which reads a
//! VRAM object, finds its first page poisoned. The job fails; the object
//! holding the page is quarantined (never bound again, never evicted) and
//! keeps the page; after a rebind the page, in the device's table, is out
//! of the VRAM allocator.

use std::path::Path;
use std::time::Duration;

use vgpu_umd::uapi::{self, GEM_CREATE_VRAM as VRAM};

use crate::node::{copy, fence, fill, open, pci_name, scratch, MS, PAGE};
use crate::report::{errno, T};
use crate::vram::vram_field;

const COPY: u32 = 0;
const LEN: u64 = 64 << 10;
const MIB: u64 = 1 << 20;
const RW: u32 = uapi::VM_BIND_READ | uapi::VM_BIND_WRITE;

fn dmesg_has(needle: &str) -> bool {
    std::process::Command::new("dmesg")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains(needle))
        .unwrap_or(false)
}

pub fn test_vram_ecc(t: &mut T, path: &Path) {
    {
        let n = open(path);
        let s = scratch(&n, 0x300_0000, LEN / PAGE);
        let va = s.start + 0x500_0000;
        let (Some(h), Some(c)) = (
            t.ok("vram-ecc: an object in VRAM", n.gem_create(LEN, VRAM)),
            t.ok(
                "vram-ecc: a copy context",
                n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1 << COPY, 0),
            ),
        ) else {
            return;
        };
        t.ok("vram-ecc: bind it", n.vm_bind(h, va, LEN, RW));
        // A FILL of the object, a COPY inside system memory (the first
        // COPY), then a COPY out of the object (the second: its source page
        // is poisoned as it starts).
        let jobs = [
            s.cmds.program(0, &[fill(va, LEN, 0x0ecc_0ecc)]),
            s.cmds.program(1, &[copy(s.dva, s.dva + LEN / 2, LEN / 2)]),
            s.cmds.program(2, &[copy(va, s.dva, LEN)]),
        ];
        let mut results = Vec::new();
        for j in jobs {
            let r = n
                .submit(c, COPY, &[j], &[])
                .and_then(|seq| n.wait(&[fence(c, COPY, seq)], true, 10_000 * MS));
            results.push(r);
        }
        t.check(
            "vram-ecc: the fill and the first copy complete",
            results[0].is_ok() && results[1].is_ok(),
            || format!("{:?} {:?}", results[0], results[1]),
        );
        t.check(
            "vram-ecc: the copy out of the poisoned VRAM page fails (EIO)",
            errno(&results[2]) == Some(libc::EIO),
            || format!("{:?}", results[2]),
        );
        std::thread::sleep(Duration::from_millis(200));
        t.check(
            "vram-ecc: the object is quarantined and keeps the page until the next probe",
            dmesg_has("buffer object quarantined, VRAM page kept by its object"),
            || "no such ECC line in dmesg".into(),
        );
        t.err(
            "vram-ecc: the object is never bound again",
            n.vm_bind(h, va + 0x100_0000, LEN, RW),
            libc::EIO,
        );
    }
    let Some(pci) = pci_name() else {
        t.check("vram-ecc: the GPU's PCI function", false, String::new);
        return;
    };
    t.ok(
        "vram-ecc: unbind",
        std::fs::write("/sys/bus/pci/drivers/vgpu/unbind", &pci),
    );
    t.ok(
        "vram-ecc: bind again",
        std::fs::write("/sys/bus/pci/drivers/vgpu/bind", &pci),
    );
    std::thread::sleep(Duration::from_millis(200));
    let (retired, usable, free) = (
        vram_field("retired"),
        vram_field("usable"),
        vram_field("free"),
    );
    t.check(
        "vram-ecc: after the rebind the page is out of the VRAM allocator (vram_mm)",
        retired == Some(1) && matches!((usable, free), (Some(u), Some(f)) if f + PAGE == u),
        || format!("retired {retired:?}, usable {usable:?}, free {free:?}"),
    );
    // Every byte of VRAM but that page can still be had: 1 MiB objects
    // while a whole MiB is free (no eviction needed), then what is left is
    // the rest less the page.
    // The render node of the new binding (its number may have changed).
    let node = std::fs::read_dir(format!("/sys/bus/pci/devices/{pci}/drm"))
        .ok()
        .and_then(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .find(|n| n.starts_with("renderD"))
        })
        .map(|n| Path::new("/dev/dri").join(n));
    let Some(node) = node else {
        t.check(
            "vram-ecc: the render node after the rebind",
            false,
            String::new,
        );
        return;
    };
    let _ = path;
    let n = open(&node);
    let mut handles = Vec::new();
    while vram_field("free").is_some_and(|f| f >= MIB) && handles.len() < 4096 {
        match n.gem_create(MIB, VRAM) {
            Ok(h) => handles.push(h),
            Err(_) => break,
        }
    }
    let (left, evictions) = (vram_field("free"), vram_field("evictions"));
    t.check(
        "vram-ecc: the rest of VRAM is allocated, the page never",
        usable.is_some_and(|u| left == Some((u - PAGE) % MIB)) && evictions == Some(0),
        || {
            format!(
                "{} objects of 1 MiB, free {left:?}, evictions {evictions:?}, usable {usable:?}",
                handles.len()
            )
        },
    );
}
