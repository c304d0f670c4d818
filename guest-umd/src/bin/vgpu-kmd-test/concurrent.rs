//! Several threads submitting and waiting on two files while another
//! binds and unbinds.

#![allow(unused_imports)]
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::PathBuf;

use vgpu_umd::uapi::{self, param};
use vgpu_umd::Device;

use crate::debugfs::*;
use crate::node::*;
use crate::report::*;

/// Several threads submit and wait at once, on contexts of one file and of
/// a second file, while another thread binds and unbinds.
pub fn test_concurrent(t: &mut T, path: &PathBuf) {
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
