//! Object counts return to zero after create/bind/unbind/close and context
//! cycles and after closing files with mappings left in place.

use std::path::Path;

use vgpu_umd::kmd::KmdError;
use vgpu_umd::uapi::{self, param};

use crate::debugfs::object;
use crate::node::{fence, fill, open, Cmds, MS, PAGE};
use crate::report::T;

/// Objects return to zero after create/bind/unbind/close cycles and after
/// closing files with mappings left in place.
pub fn test_leaks(t: &mut T, path: &Path, cycles: u32) {
    let before = (
        object("bos"),
        object("mappings"),
        object("pt_pool_used"),
        object("contexts"),
    );
    {
        let n = open(path);
        let start = n.get_param(param::VA_START).unwrap_or(0);
        let rw = uapi::VM_BIND_READ | uapi::VM_BIND_WRITE;
        let mut fails = 0;
        for i in 0..cycles {
            let va = start + u64::from(i % 64) * (1 << 30);
            // The slot's mapping from 64 cycles ago goes first.
            if i >= 64 && n.vm_unbind(va, PAGE).is_err() {
                fails += 1;
            }
            let r = n.gem_create(2 * PAGE, 0).and_then(|h| {
                n.vm_bind(h, va, 2 * PAGE, rw)?;
                n.vm_unbind(va, 2 * PAGE)?;
                n.vm_bind(h, va, PAGE, rw)?;
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
        let t0 = std::time::Instant::now();
        let mut fails = 0;
        for i in 0..cycles {
            let r = (|| -> Result<(), KmdError> {
                let cva = start + (100 << 30) + u64::from(i % 64) * (4 << 20);
                let dva = cva + (2 << 20);
                let cmds = Cmds::new(&n, cva, 1)?;
                let hd = n.gem_create(PAGE, 0)?;
                n.vm_bind(hd, dva, PAGE, rw)?;
                let c = cmds.program(0, &[fill(dva, 64, i)]);
                let ctx = n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1, 0)?;
                let s = n.submit(ctx, 0, &[c], &[])?;
                n.wait(&[fence(ctx, 0, s)], true, 5_000 * MS)?;
                n.ctx_destroy(ctx)?;
                n.vm_unbind(cva, PAGE)?;
                n.vm_unbind(dva, PAGE)?;
                n.gem_close(cmds.handle)?;
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
