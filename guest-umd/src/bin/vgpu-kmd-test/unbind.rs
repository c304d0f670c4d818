//! Unbinding the PCI driver under a sleeping waiter, and binding it again.

use std::path::Path;

use vgpu_umd::uapi::{self, param};
use vgpu_umd::Device;

use crate::node::{fence, open, sem_wait_eq, Cmds, MS, PAGE};
use crate::report::{errno, T};

/// Unbinds the PCI driver while a WAIT sleeps on a job that never
/// finishes, checks the waiter and later ioctls get ENODEV, closes the file
/// with the context still alive, and binds the driver again.
pub fn test_unbind(t: &mut T, path: &Path) {
    let n = open(path);
    let start = n.get_param(param::VA_START).unwrap_or(0);
    let (cva, semva) = (start + 0x100_0000, start + 0x200_0000);
    let cmds = Cmds::new(&n, cva, 1).expect("mmap");
    let hsem = n.gem_create(PAGE, 0).unwrap_or(0);
    let _ = n.vm_bind(hsem, semva, PAGE, uapi::VM_BIND_READ | uapi::VM_BIND_WRITE);
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
        errno(&r) == Some(libc::ENODEV),
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
                d.ping(7, std::time::Duration::from_secs(2)).map(|_| ()),
            );
        }
        Err(_) => t.check("unbind: render node after rebind", false, || {
            "no node".into()
        }),
    }
}
