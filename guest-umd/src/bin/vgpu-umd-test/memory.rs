//! Sections `device`, `memory` and `pool`: the device's identity, buffers
//! of every size class and their pool, a block reused only after the fence
//! of the work that used it.

use std::sync::atomic::Ordering;

use vgpu_hwif::packet::{self, Packet};
use vgpu_umd::{devices, Context, Error, MemKind, Stream, ENGINE_COPY};

use crate::report::T;
use crate::{host_u64, pattern};

pub fn test_device(t: &mut T) {
    let devs = devices();
    t.check("device: enumerate", !devs.is_empty(), || {
        "no vgpu device".into()
    });
    if let Some(d) = devs.first() {
        if let Some(id) = t.ok("device: identity", d.identity()) {
            t.check(
                "device: generation",
                id.generation == 1 || id.generation == 2,
                || format!("{}", id.generation),
            );
            t.check("device: engines", id.engine_mask & 3 == 3, || {
                format!("{:#x}", id.engine_mask)
            });
        }
    }
}

pub fn test_memory(t: &mut T, ctx: &Context) {
    for size in [
        1u64,
        100,
        1023,
        1024,
        4096,
        5000,
        64 << 10,
        (64 << 10) + 1,
        3 << 20,
    ] {
        let Some(b) = t.ok(
            &format!("mem: alloc {size}"),
            ctx.alloc(size, MemKind::HostVisible),
        ) else {
            continue;
        };
        let data = pattern(size as usize, size as u32);
        t.ok(&format!("mem: host write {size}"), b.write(0, &data));
        let mut back = vec![0u8; size as usize];
        t.ok(&format!("mem: host read {size}"), b.read(0, &mut back));
        t.check(
            &format!("mem: host round trip {size}"),
            back == data,
            || "data differs".into(),
        );
        t.check(&format!("mem: va aligned {size}"), b.va() % 64 == 0, || {
            format!("{:#x}", b.va())
        });
    }
    t.err("mem: alloc 0", ctx.alloc(0, MemKind::DeviceLocal), |e| {
        matches!(e, Error::Mem { .. })
    });
    t.err(
        "mem: alloc 2 GiB",
        ctx.alloc(2 << 30, MemKind::DeviceLocal),
        |e| matches!(e, Error::Mem { .. }),
    );
    let d = ctx.alloc(4096, MemKind::DeviceLocal).unwrap();
    t.err("mem: device-local has no host pointer", d.host_ptr(), |e| {
        e.to_string().contains("device-local")
    });
    let h = ctx.alloc(100, MemKind::HostVisible).unwrap();
    t.err("mem: write past end", h.write(90, &[0; 20]), |e| {
        e.to_string().contains("outside a buffer of 100")
    });
    let s = ctx.pool_stats();
    t.check(
        "mem: stats count live blocks",
        s.classes.iter().map(|c| c.live).sum::<u64>() >= 2,
        || format!("{s:?}"),
    );
    let a = ctx.alloc(64 << 10, MemKind::DeviceLocal).unwrap();
    let b = ctx.alloc(64 << 10, MemKind::DeviceLocal).unwrap();
    t.check("mem: distinct buffers", a.va() != b.va(), String::new);
    t.ok("mem: free", a.free());
}

pub fn test_pool_reuse(t: &mut T, ctx: &Context) {
    let s = Stream::new(ctx).unwrap();
    let sem = ctx.alloc(64, MemKind::HostVisible).unwrap();
    host_u64(&sem, 0).store(0, Ordering::SeqCst);
    for size in [512u64, 16 << 10, 256 << 10] {
        host_u64(&sem, 0).store(0, Ordering::SeqCst);
        let a = ctx.alloc(size, MemKind::DeviceLocal).unwrap();
        let a_va = a.va();
        // Work using `a` that cannot finish until the CPU says so.
        s.push_packets(
            ENGINE_COPY,
            &[Packet::SemWait {
                va: sem.va(),
                value: 1,
                op: packet::SEM_WAIT_GEQ,
            }],
        )
        .unwrap();
        s.memset(&a, 0, 7, size).unwrap();
        drop(a);
        let mut held = Vec::new();
        let mut early = false;
        for _ in 0..8 {
            let b = ctx.alloc(size, MemKind::DeviceLocal).unwrap();
            early |= b.va() == a_va;
            held.push(b);
        }
        t.check(
            &format!("pool: {size}-byte block in use not reused"),
            !early,
            || format!("{a_va:#x} handed out"),
        );
        drop(held);
        host_u64(&sem, 0).store(1, Ordering::SeqCst);
        s.synchronize().unwrap();
        let mut reused = false;
        let mut keep = Vec::new();
        for _ in 0..16 {
            let b = ctx.alloc(size, MemKind::DeviceLocal).unwrap();
            reused |= b.va() == a_va;
            keep.push(b);
        }
        t.check(
            &format!("pool: {size}-byte block reused after its fence"),
            reused,
            || format!("{a_va:#x} never handed out"),
        );
    }
    let st = ctx.pool_stats();
    println!(
        "info pool: small live {} reused {} frag {:.2}; medium live {} reused {}; large live {} cached {} reused {}",
        st.classes[0].live,
        st.classes[0].reused,
        st.classes[0].fragmentation(),
        st.classes[1].live,
        st.classes[1].reused,
        st.classes[2].live,
        st.classes[2].cached,
        st.classes[2].reused
    );
    t.check(
        "pool: stats show reuse",
        st.classes.iter().all(|c| c.reused > 0),
        || format!("{st:?}"),
    );
}
