//! Allocation-failure sweeps of the driver's own life cycle: module load
//! (`finit_module` of vgpu.ko: the module's init and the PCI probe it runs
//! in the loading task), probe through sysfs `bind` and remove through
//! `unbind`, each with this thread's fail-nth armed at every N until the
//! call runs without an injected failure. After each case: no splat, a
//! probe that failed left nothing behind (no module, no debugfs
//! directory), a device that is bound serves; after each sweep kmemleak
//! reports nothing.

use std::fs;
use std::time::Instant;

use vgpu_umd::uapi;

use crate::failnth::{kmemleak_after, splats, tally_line, write_file, Args, FailNth, Kmsg, Totals};
use crate::guard::Arena;
use crate::sys::{self, rname, Ret};
use crate::worker::DevInfo;

/// The PCI address of the node's device.
pub fn pci_name(dev: &DevInfo) -> Option<String> {
    let minor = dev.node.file_name()?.to_str()?.to_string();
    let link = fs::read_link(format!("/sys/class/drm/{minor}/device")).ok()?;
    Some(link.file_name()?.to_str()?.to_string())
}

/// Writes `text` to `path` with this thread armed at `n` (the file is
/// opened first, unarmed); the write's result and whether a failure was
/// injected.
fn armed_write(path: &str, text: &str, n: u32, fnth: &FailNth) -> (Ret, bool) {
    let c = format!("{path}\0");
    // SAFETY: a NUL-terminated path.
    let fd = unsafe { libc::open(c.as_ptr().cast(), libc::O_WRONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return (Err(libc::ENOENT), false);
    }
    fnth.arm(n);
    // SAFETY: writes from a live buffer to our own fd.
    let w = unsafe { libc::write(fd, text.as_ptr().cast(), text.len()) };
    let err = std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO);
    let injected = fnth.disarm();
    sys::close(fd);
    (if w < 0 { Err(err) } else { Ok(()) }, injected)
}

/// Makes `/dev/dri/NODE` from sysfs's `dev` (`MAJOR:MINOR`) when it is
/// missing, as udev would from the device's uevent (this guest has none).
/// The kernel registers a device whose devtmpfs node it could not make:
/// `device_add()` ignores `devtmpfs_create_node()`'s `ENOMEM`, which comes
/// from the node name's allocation in the loading task (`drm_devnode()`'s
/// `kasprintf`), the very task whose N-th allocation fails here. Returns
/// whether it made the node.
fn node_from_sysfs(dir: &str, node: &str) -> Result<bool, String> {
    let path = format!("/dev/dri/{node}");
    if std::path::Path::new(&path).exists() {
        return Ok(false);
    }
    let devno = fs::read_to_string(format!("{dir}/{node}/dev"))
        .map_err(|e| format!("{dir}/{node}/dev: {e}"))?;
    let (major, minor) = devno
        .trim()
        .split_once(':')
        .and_then(|(a, b)| Some((a.parse::<u32>().ok()?, b.parse::<u32>().ok()?)))
        .ok_or_else(|| format!("{dir}/{node}/dev: {devno:?} is not MAJOR:MINOR"))?;
    let _ = fs::create_dir_all("/dev/dri");
    let c = format!("{path}\0");
    // SAFETY: a NUL-terminated path; mknod reads nothing else of ours.
    let r = unsafe {
        libc::mknod(
            c.as_ptr().cast(),
            libc::S_IFCHR | 0o666,
            libc::makedev(major, minor),
        )
    };
    if r != 0 {
        return Err(format!("mknod {path}: {}", std::io::Error::last_os_error()));
    }
    Ok(true)
}

/// The device serves: a render node of `pci` answers GET_PARAM and PING.
/// A node devtmpfs dropped is made first (see [`node_from_sysfs`]) and
/// said so.
fn serves(pci: &str) -> Result<(), String> {
    let dir = format!("/sys/bus/pci/devices/{pci}/drm");
    let node = fs::read_dir(&dir)
        .map_err(|e| format!("{dir}: {e}"))?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().to_string())
        .find(|n| n.starts_with("renderD"))
        .ok_or("no render node")?;
    if node_from_sysfs(&dir, &node)? {
        println!(
            "note fail-nth: /dev/dri/{node} was not made (devtmpfs: device_add() ignores the node name's failed allocation); made from sysfs"
        );
    }
    let d = vgpu_umd::Device::open(std::path::Path::new(&format!("/dev/dri/{node}")))
        .map_err(|e| format!("open {node}: {e}"))?;
    d.get_param(uapi::param::GENERATION)
        .map_err(|e| format!("GET_PARAM: {e}"))?;
    let mut arena = Arena::new(3);
    let file = d.into_file();
    let mut p = uapi::DrmVgpuPing {
        cookie: 1,
        ..Default::default()
    };
    use std::os::fd::AsRawFd;
    sys::ioctl(file.as_raw_fd(), &mut p, &mut arena).map_err(|e| format!("PING: {}", sys::ename(e)))
}

/// Probe (sysfs bind) and remove (unbind) with this thread armed.
pub fn sweep_probe(dev: &DevInfo, args: &Args, fnth: &FailNth, kmsg: &mut Kmsg, t: &mut Totals) {
    let Some(pci) = pci_name(dev) else {
        println!(
            "FAIL fail-nth probe: no PCI device behind {}",
            dev.node.display()
        );
        t.failures += 1;
        return;
    };
    let drv = "/sys/bus/pci/drivers/vgpu";
    let bound = || std::path::Path::new(&format!("{drv}/{pci}")).exists();
    for (what, path) in [
        ("remove", format!("{drv}/unbind")),
        ("probe", format!("{drv}/bind")),
    ] {
        let start = Instant::now();
        let mut answers = std::collections::BTreeMap::new();
        let (mut cases, mut splat_n, mut end) = (0u64, 0u64, None);
        for n in 1..=args.max_n {
            // remove: from a bound device; probe: from an unbound one.
            if what == "remove" && !bound() {
                let _ = write_file(&format!("{drv}/bind"), &pci);
            }
            if what == "probe" && bound() {
                let _ = write_file(&format!("{drv}/unbind"), &pci);
            }
            let (r, injected) = armed_write(&path, &pci, n, fnth);
            cases += 1;
            *answers.entry(rname(r)).or_insert(0u64) += 1;
            let lines = kmsg.new_lines();
            if !splats(&lines).is_empty() {
                splat_n += 1;
                println!("FAIL fail-nth {what} N={n} ({}): splat in dmesg:", rname(r));
                for l in lines.iter().take(60) {
                    println!("  | {l}");
                }
            }
            // What must hold after the case: a probe that failed left no
            // debugfs directory; a bound device serves.
            if !bound() {
                if std::path::Path::new(&format!("/sys/kernel/debug/vgpu/{pci}")).exists() {
                    println!(
                        "FAIL fail-nth {what} N={n}: unbound, but its debugfs directory is left"
                    );
                    t.failures += 1;
                }
                if what == "remove" {
                    let _ = write_file(&format!("{drv}/bind"), &pci);
                }
            }
            if bound() {
                if let Err(e) = serves(&pci) {
                    println!(
                        "FAIL fail-nth {what} N={n} ({}): bound but not serving: {e}",
                        rname(r)
                    );
                    t.failures += 1;
                }
            }
            if args.each {
                println!(
                    "case {what} N={n}: {}{}",
                    rname(r),
                    if injected { "" } else { " (nothing injected)" }
                );
            }
            if !injected {
                if r.is_err() {
                    println!(
                        "FAIL fail-nth {what}: without an injected failure: {}",
                        rname(r)
                    );
                    t.failures += 1;
                }
                end = Some(n);
                break;
            }
        }
        if !bound() {
            let _ = write_file(&format!("{drv}/bind"), &pci);
        }
        let km = kmemleak_after(what, args, t);
        if end.is_none() {
            println!("FAIL fail-nth {what}: still injecting at N={}", args.max_n);
            t.failures += 1;
        }
        println!(
            "fail-nth {what}: {cases} cases (N=1..{}), {:.1} s; answers {}; {splat_n} splats, {km}",
            end.unwrap_or(args.max_n),
            start.elapsed().as_secs_f64(),
            tally_line(&answers),
        );
        t.cases += cases;
        t.splats += splat_n;
    }
}

/// Whether module `vgpu` is loaded.
fn loaded() -> bool {
    std::path::Path::new("/sys/module/vgpu").exists()
}

/// Unloads vgpu (unarmed); the errno if it stays.
fn unload() -> Ret {
    // SAFETY: a NUL-terminated module name; O_NONBLOCK: fail rather than
    // wait for its users.
    let rc = unsafe { libc::syscall(libc::SYS_delete_module, c"vgpu".as_ptr(), libc::O_NONBLOCK) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO))
    }
}

/// Loads `path` with `params` (the file opened first, unarmed), this
/// thread armed at `n` (`0`: not armed); the result and whether a failure
/// was injected.
fn load(path: &str, params: &str, n: u32, fnth: &FailNth) -> (Ret, bool) {
    let c = format!("{path}\0");
    // SAFETY: a NUL-terminated path.
    let fd = unsafe { libc::open(c.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return (Err(libc::ENOENT), false);
    }
    let p = format!("{params}\0");
    if n > 0 {
        fnth.arm(n);
    }
    // SAFETY: `fd` is the module file opened above, `p` a NUL-terminated
    // parameter string that outlives the call.
    let rc = unsafe { libc::syscall(libc::SYS_finit_module, fd, p.as_ptr(), 0) };
    let err = std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO);
    let injected = n > 0 && fnth.disarm();
    sys::close(fd);
    (if rc == 0 { Ok(()) } else { Err(err) }, injected)
}

/// Module load (`finit_module` of `path`) with this thread armed, from an
/// unloaded module each time; the module is loaded again (unarmed) at the
/// end.
pub fn sweep_module(
    dev: &DevInfo,
    path: &str,
    params: &str,
    args: &Args,
    fnth: &FailNth,
    kmsg: &mut Kmsg,
    t: &mut Totals,
) {
    let Some(pci) = pci_name(dev) else {
        println!(
            "FAIL fail-nth insmod: no PCI device behind {}",
            dev.node.display()
        );
        t.failures += 1;
        return;
    };
    let bound = || std::path::Path::new(&format!("/sys/bus/pci/drivers/vgpu/{pci}")).exists();
    let start = Instant::now();
    let mut answers = std::collections::BTreeMap::new();
    let (mut cases, mut splat_n, mut end) = (0u64, 0u64, None);
    for n in 1..=args.max_n {
        if loaded() {
            if let Err(e) = unload() {
                println!(
                    "FAIL fail-nth insmod N={n}: vgpu cannot be unloaded: {}",
                    sys::ename(e)
                );
                t.failures += 1;
                return;
            }
        }
        let (r, injected) = load(path, params, n, fnth);
        cases += 1;
        *answers.entry(rname(r)).or_insert(0u64) += 1;
        let lines = kmsg.new_lines();
        if !splats(&lines).is_empty() {
            splat_n += 1;
            println!("FAIL fail-nth insmod N={n} ({}): splat in dmesg:", rname(r));
            for l in lines.iter().take(60) {
                println!("  | {l}");
            }
        }
        // A load that failed left no module; a module whose probe failed
        // is loaded but unbound, with no debugfs directory; a bound device
        // serves.
        if r.is_err() && loaded() {
            println!(
                "FAIL fail-nth insmod N={n} ({}): failed, but the module is loaded",
                rname(r)
            );
            t.failures += 1;
        }
        if !bound() && std::path::Path::new(&format!("/sys/kernel/debug/vgpu/{pci}")).exists() {
            println!("FAIL fail-nth insmod N={n}: unbound, but its debugfs directory is left");
            t.failures += 1;
        }
        if bound() {
            if let Err(e) = serves(&pci) {
                println!(
                    "FAIL fail-nth insmod N={n} ({}): bound but not serving: {e}",
                    rname(r)
                );
                t.failures += 1;
            }
        }
        if args.each {
            println!(
                "case insmod N={n}: {}{}{}",
                rname(r),
                if bound() { ", bound" } else { ", unbound" },
                if injected { "" } else { " (nothing injected)" }
            );
        }
        if !injected {
            if r.is_err() || !bound() {
                println!(
                    "FAIL fail-nth insmod: without an injected failure: {}{}",
                    rname(r),
                    if bound() { "" } else { ", device not bound" }
                );
                t.failures += 1;
            }
            end = Some(n);
            break;
        }
    }
    if !loaded() {
        let _ = load(path, params, 0, fnth);
    }
    if !bound() {
        let _ = write_file("/sys/bus/pci/drivers/vgpu/bind", &pci);
    }
    let km = kmemleak_after("insmod", args, t);
    if end.is_none() {
        println!("FAIL fail-nth insmod: still injecting at N={}", args.max_n);
        t.failures += 1;
    }
    println!(
        "fail-nth insmod: {cases} cases (N=1..{}), {:.1} s; answers {}; {splat_n} splats, {km}",
        end.unwrap_or(args.max_n),
        start.elapsed().as_secs_f64(),
        tally_line(&answers),
    );
    t.cases += cases;
    t.splats += splat_n;
}
