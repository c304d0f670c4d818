//! Several threads submitting and waiting on two files while another
//! binds and unbinds.

use std::path::Path;
use std::sync::Arc;

use vgpu_umd::kmd::Kmd;
use vgpu_umd::uapi::{self, param};

use crate::node::{fence, fill, open, Cmds, MS, PAGE};
use crate::report::T;

/// Several threads submit and wait at once, on contexts of one file and of
/// a second file, while another thread binds and unbinds.
pub fn test_concurrent(t: &mut T, path: &Path) {
    let files: Vec<Arc<Kmd>> = (0..2).map(|_| Arc::new(open(path))).collect();
    let mut jobs = Vec::new();
    let mut keep = Vec::new();
    for (fi, n) in files.iter().enumerate() {
        let start = n.get_param(param::VA_START).unwrap_or(0);
        let (cva, dva) = (start + 0x100_0000, start + 0x200_0000);
        let cmds = Cmds::new(n, cva, 1).expect("mmap");
        let hd = n.gem_create(PAGE, 0).unwrap_or(0);
        let _ = n.vm_bind(hd, dva, PAGE, uapi::VM_BIND_READ | uapi::VM_BIND_WRITE);
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
        let start = n.get_param(param::VA_START).unwrap_or(0);
        let h = n.gem_create(PAGE, 0).unwrap_or(0);
        let mut fails = 0;
        for i in 0..300u64 {
            let va = start + 0x1000_0000 + (i % 8) * PAGE;
            if n.vm_bind(h, va, PAGE, uapi::VM_BIND_READ)
                .and_then(|()| n.vm_unbind(va, PAGE))
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
