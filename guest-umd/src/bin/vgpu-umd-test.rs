//! Guest end-to-end test of the UMD API: devices, memory and pools, copies,
//! memsets, batching and chaining, events and cross-stream waits, invalid
//! arguments and use after destroy, concurrency, sticky loss on faults and
//! hangs, and launches (when the device runs DISPATCH).
//!
//!   vgpu-umd-test               every section
//!   vgpu-umd-test copy events   only these sections
//!
//! Prints `ok NAME` / `FAIL NAME: why` / `skip NAME: why` per check and a
//! closing `umd-test: N passed, M failed`; exits 1 if anything failed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use vgpu_hwif::packet::{self, Packet};
use vgpu_umd::{
    devices, Arg, Buffer, Config, Context, Device, Error, Event, LostReason, MemKind, Module,
    ReadPath, Stream, ENGINE_COPY,
};

struct T {
    passed: u32,
    failed: u32,
}

impl T {
    fn check(&mut self, name: &str, ok: bool, why: impl FnOnce() -> String) -> bool {
        if ok {
            self.passed += 1;
            println!("ok {name}");
        } else {
            self.failed += 1;
            println!("FAIL {name}: {}", why());
        }
        ok
    }

    fn ok<V>(&mut self, name: &str, r: vgpu_umd::Result<V>) -> Option<V> {
        match r {
            Ok(v) => {
                self.check(name, true, String::new);
                Some(v)
            }
            Err(e) => {
                self.check(name, false, || e.to_string());
                None
            }
        }
    }

    fn err<V>(&mut self, name: &str, r: vgpu_umd::Result<V>, want: impl Fn(&Error) -> bool) {
        match r {
            Ok(_) => self.check(name, false, || "succeeded".into()),
            Err(e) => {
                let s = e.to_string();
                self.check(name, want(&e), || format!("wrong error: {s}"))
            }
        };
    }
}

fn pattern(n: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

fn host_u64(b: &Buffer, off: u64) -> &AtomicU64 {
    let p = b.host_ptr().expect("host-visible");
    // SAFETY: `off` is 8-byte aligned within the live host-visible buffer,
    // which outlives the returned reference's uses in this test.
    unsafe { &*p.add(off as usize).cast::<AtomicU64>() }
}

fn test_device(t: &mut T) {
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

fn test_memory(t: &mut T, ctx: &Context) {
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

fn test_copy(t: &mut T, ctx: &Context) {
    let Some(s) = t.ok("copy: stream", Stream::new(ctx)) else {
        return;
    };
    // Large writes go in staged pieces with a bounded amount in flight:
    // three writes of 10 MiB + 3 bytes at an odd offset, each read back.
    let size = (10 << 20) + 3;
    let big = ctx.alloc(size as u64 + 5, MemKind::DeviceLocal).unwrap();
    for round in 0..3u32 {
        let data = pattern(size, 0x51 + round);
        t.ok(
            &format!("copy: staged write #{round}"),
            s.write(&big, 5, &data),
        );
        let mut back = vec![0u8; size];
        t.ok(
            &format!("copy: staged read #{round}"),
            s.read(&big, 5, &mut back),
        );
        t.check(&format!("copy: staged data #{round}"), back == data, || {
            let i = back.iter().zip(&data).position(|(a, b)| a != b);
            format!("first difference at {i:?}")
        });
    }
    for size in [1usize, 8, 100, 4096, 70_000, 1 << 20] {
        let src = ctx.alloc(size as u64, MemKind::DeviceLocal).unwrap();
        let dst = ctx.alloc(size as u64, MemKind::DeviceLocal).unwrap();
        let data = pattern(size, size as u32 + 7);
        t.ok(&format!("copy: h2d {size}"), s.write(&src, 0, &data));
        t.ok(
            &format!("copy: d2d {size}"),
            s.copy(&dst, 0, &src, 0, size as u64),
        );
        let mut back = vec![0u8; size];
        t.ok(&format!("copy: d2h {size}"), s.read(&dst, 0, &mut back));
        t.check(&format!("copy: data {size}"), back == data, || {
            let i = back
                .iter()
                .zip(&data)
                .position(|(a, b)| a != b)
                .unwrap_or(0);
            format!("first difference at byte {i}")
        });
    }
    // memset with offsets, then a partial read.
    let b = ctx.alloc(10_000, MemKind::HostVisible).unwrap();
    t.ok("copy: memset", s.memset(&b, 0, 0x5a, 10_000));
    t.ok("copy: memset middle", s.memset(&b, 1001, 0xa5, 3));
    t.ok("copy: memset32", s.memset32(&b, 2000, 0x0403_0201, 6));
    t.ok("copy: synchronize", s.synchronize());
    let mut v = vec![0u8; 10_000];
    b.read(0, &mut v).unwrap();
    let ok = v[..1001].iter().all(|&x| x == 0x5a)
        && v[1001..1004] == [0xa5; 3]
        && v[1004..2000].iter().all(|&x| x == 0x5a)
        && v[2000..2006] == [1, 2, 3, 4, 1, 2]
        && v[2006..].iter().all(|&x| x == 0x5a);
    t.check("copy: memset contents", ok, || {
        format!("{:x?}", &v[995..1010])
    });
    // Async d2h into host-visible memory.
    let dev = ctx.alloc(4096, MemKind::DeviceLocal).unwrap();
    s.write(&dev, 0, &pattern(4096, 3)).unwrap();
    s.copy(&b, 0, &dev, 0, 4096).unwrap();
    s.synchronize().unwrap();
    let mut w = vec![0u8; 4096];
    b.read(0, &mut w).unwrap();
    t.check(
        "copy: async d2h into host-visible",
        w == pattern(4096, 3),
        String::new,
    );
    t.err("copy: zero length", s.copy(&dev, 0, &b, 0, 0), |e| {
        matches!(e, Error::Invalid { .. })
    });
    t.err("copy: out of range", s.copy(&dev, 4000, &b, 0, 200), |e| {
        matches!(e, Error::Mem { .. })
    });
    let other = Context::new().unwrap();
    let ob = other.alloc(4096, MemKind::DeviceLocal).unwrap();
    t.err(
        "copy: buffer of another context",
        s.copy(&ob, 0, &dev, 0, 16),
        |e| e.to_string().contains("another context"),
    );
}

/// The three read paths: into the caller's own memory mapped for the
/// device (the default; reads of 64 KiB and more), staged through the copy
/// engine (`VGPU_READ=staged`; one COPY per piece) and straight from the
/// buffer's mapping (`VGPU_READ=direct`; waits for the stream's work,
/// submits nothing itself). Each reads what a pending device copy wrote, at
/// odd offsets and sizes, small and large, into the middle of a larger
/// vector whose other bytes must not change.
fn test_read_paths(t: &mut T, dev: &Device) {
    for path in [ReadPath::Mapped, ReadPath::Direct, ReadPath::Staged] {
        let name = format!("{path:?}").to_lowercase();
        let cfg = Config {
            read: path,
            ..Config::default()
        };
        let Some(ctx) = t.ok(
            &format!("read {name}: context"),
            Context::with_config(dev, cfg),
        ) else {
            return;
        };
        let s = Stream::new(&ctx).unwrap();
        if path == ReadPath::Mapped {
            read_into_unpinnable(t, &ctx, &s);
        }
        // The last sizes need several host mappings (`hostmap::PIECE` each,
        // more than are in flight at once); the VM's memory allows the
        // largest only written straight into its buffer.
        for size in [1usize, 4093, 70_001, (9 << 20) + 5, (32 << 20) + 5] {
            let big = size > 16 << 20;
            if big && path != ReadPath::Mapped {
                continue;
            }
            let b = ctx.alloc(size as u64 + 3, MemKind::DeviceLocal).unwrap();
            let data = pattern(size, size as u32 ^ 0x77);
            if big {
                s.write(&b, 3, &data).unwrap();
            } else {
                let a = ctx.alloc(size as u64 + 3, MemKind::DeviceLocal).unwrap();
                s.write(&a, 1, &data).unwrap();
                // Not synchronized: the read must wait for this copy.
                s.copy(&b, 3, &a, 1, size as u64).unwrap();
            }
            let mut whole = vec![0xa5u8; size + 7 + 4099];
            let before = s.stats();
            t.ok(
                &format!("read {name}: {size}"),
                s.read(&b, 3, &mut whole[7..7 + size]),
            );
            let back = &whole[7..7 + size];
            t.check(&format!("read {name}: data {size}"), back == data, || {
                let i = back.iter().zip(&data).position(|(x, y)| x != y);
                format!("first difference at {i:?}")
            });
            t.check(
                &format!("read {name}: bytes around the destination {size}"),
                whole[..7]
                    .iter()
                    .chain(&whole[7 + size..])
                    .all(|&x| x == 0xa5),
                String::new,
            );
            let after = s.stats();
            let mapped =
                path == ReadPath::Mapped && size as u64 >= vgpu_umd::hostmap::MAPPED_READ_MIN;
            t.check(
                &format!("read {name}: through a mapping of the destination {size}"),
                after.mapped_reads - before.mapped_reads == u64::from(mapped)
                    && after.mapped_refused == before.mapped_refused,
                || format!("{before:?} -> {after:?}"),
            );
            drop(whole);
            if big {
                continue;
            }
            // A synchronized stream: the direct read submits nothing, the
            // others at least one COPY batch.
            let mut back = vec![0u8; size];
            let before_idle = s.stats().submits;
            t.ok(
                &format!("read {name}: again {size}"),
                s.read(&b, 3, &mut back),
            );
            let extra = s.stats().submits - before_idle;
            t.check(
                &format!("read {name}: submits of an idle read {size}"),
                (extra == 0) == (path == ReadPath::Direct),
                || format!("{extra} submits"),
            );
            t.check(
                &format!("read {name}: data again {size}"),
                back == data,
                String::new,
            );
        }
    }
}

/// A destination the KMD cannot pin — another buffer's CPU mapping, device
/// memory mapped into the process — makes the mapped read go staged, with
/// the same result.
fn read_into_unpinnable(t: &mut T, ctx: &Context, s: &Stream) {
    let size = 256 << 10;
    let b = ctx.alloc(size as u64, MemKind::DeviceLocal).unwrap();
    let h = ctx.alloc(size as u64, MemKind::HostVisible).unwrap();
    let data = pattern(size, 0x99);
    s.write(&b, 0, &data).unwrap();
    let p = h.host_ptr().unwrap();
    // SAFETY: `h` is a live host-visible buffer of `size` bytes, mapped at
    // `p`, and nothing else touches it while the slice is used.
    let dst = unsafe { std::slice::from_raw_parts_mut(p, size) };
    let before = s.stats();
    t.ok(
        "read mapped: into a buffer's CPU mapping",
        s.read(&b, 0, dst),
    );
    t.check(
        "read mapped: data in a buffer's CPU mapping",
        dst[..] == data[..],
        String::new,
    );
    let after = s.stats();
    t.check(
        "read mapped: a destination the KMD cannot pin goes staged",
        after.mapped_refused == before.mapped_refused + 1
            && after.mapped_reads == before.mapped_reads,
        || format!("{before:?} -> {after:?}"),
    );
}

fn test_batching(t: &mut T, ctx: &Context) {
    let s = Stream::new(ctx).unwrap();
    let b = ctx.alloc(4 * 2000, MemKind::HostVisible).unwrap();
    for i in 0..2000u32 {
        s.memset32(&b, 4 * u64::from(i), i, 4).unwrap();
    }
    t.ok("batch: 2000 memsets", s.synchronize());
    let mut v = vec![0u8; 8000];
    b.read(0, &mut v).unwrap();
    let ok = (0..2000u32).all(|i| v[4 * i as usize..4 * i as usize + 4] == i.to_le_bytes());
    t.check("batch: contents", ok, String::new);
    let st = s.stats();
    let want = 2000 / u64::from(ctx.config().batch_ops);
    t.check(
        "batch: batched into few submits",
        st.submits <= want + 2,
        || format!("{} submits", st.submits),
    );
    let cs = ctx.cmdbuf_stats();
    println!(
        "info batch: {} submits, cmdbufs created {} chained {}",
        st.submits, cs.created, cs.chained
    );
    t.check(
        "batch: command buffers recycled",
        cs.created < st.submits.max(2) + 2,
        || format!("{cs:?}"),
    );
}

/// `VGPU_CMDBUF_MAX=2` with small buffers: many batches in flight never
/// create a third buffer; taking one waits for the oldest, and every result
/// is right.
fn test_cmdbuf_cap(t: &mut T, dev: &Device) {
    let cfg = vgpu_umd::Config {
        cmdbuf_size: 4096,
        cmdbuf_max: 2,
        batch_ops: 16,
        ..vgpu_umd::Config::default()
    };
    let Some(ctx) = t.ok("cmdbuf cap: context", Context::with_config(dev, cfg)) else {
        return;
    };
    let s = Stream::new(&ctx).unwrap();
    let b = ctx.alloc(4 * 1000, MemKind::HostVisible).unwrap();
    for i in 0..1000u32 {
        s.memset32(&b, 4 * u64::from(i), i ^ 0x5a5a, 4).unwrap();
    }
    t.ok("cmdbuf cap: 1000 memsets", s.synchronize());
    let mut v = vec![0u8; 4000];
    b.read(0, &mut v).unwrap();
    let ok =
        (0..1000u32).all(|i| v[4 * i as usize..4 * i as usize + 4] == (i ^ 0x5a5a).to_le_bytes());
    t.check("cmdbuf cap: contents", ok, String::new);
    let cs = ctx.cmdbuf_stats();
    println!(
        "info cmdbuf cap: {} submits, created {} waited {}",
        s.stats().submits,
        cs.created,
        cs.waited
    );
    t.check(
        "cmdbuf cap: never more than 2 buffers",
        cs.created <= 2 && s.stats().submits > 2,
        || format!("{cs:?}"),
    );
}

fn test_events(t: &mut T, ctx: &Context) {
    let s = Stream::new(ctx).unwrap();
    let e0 = Event::new(ctx).unwrap();
    let e1 = Event::new(ctx).unwrap();
    t.err("event: query unrecorded", e0.query(), |e| {
        e.to_string().contains("never recorded")
    });
    t.err("event: wait on unrecorded", s.wait_event(&e0), |e| {
        e.to_string().contains("never recorded")
    });
    let b = ctx.alloc(4 << 20, MemKind::DeviceLocal).unwrap();
    t.ok("event: record start", s.record(&e0));
    s.memset(&b, 0, 1, 4 << 20).unwrap();
    t.ok("event: record end", s.record(&e1));
    t.ok("event: synchronize", e1.synchronize());
    t.check(
        "event: query after sync",
        e1.query().unwrap_or(false),
        String::new,
    );
    match e1.elapsed_since(&e0) {
        Ok(d) => t.check(
            "event: elapsed > 0 for a 4 MiB fill",
            d > Duration::ZERO && d < Duration::from_secs(60),
            || format!("{d:?}"),
        ),
        Err(e) => t.check("event: elapsed", false, || e.to_string()),
    };
    // Re-record: the event tracks its latest record.
    s.record(&e0).unwrap();
    t.ok("event: re-record synchronize", e0.synchronize());

    // Cross-stream: s1 blocks on a semaphore the CPU releases; s2 waits on
    // s1's event, so s2's fill must not happen before the release.
    let sem = ctx.alloc(64, MemKind::HostVisible).unwrap();
    host_u64(&sem, 0).store(0, Ordering::SeqCst);
    let s1 = Stream::new(ctx).unwrap();
    let s2 = Stream::new(ctx).unwrap();
    let out = ctx.alloc(64, MemKind::HostVisible).unwrap();
    out.write(0, &[0; 64]).unwrap();
    let gate = Event::new(ctx).unwrap();
    s1.push_packets(
        ENGINE_COPY,
        &[Packet::SemWait {
            va: sem.va(),
            value: 1,
            op: packet::SEM_WAIT_GEQ,
        }],
    )
    .unwrap();
    s1.record(&gate).unwrap();
    t.ok("event: stream waits on event", s2.wait_event(&gate));
    s2.memset32(&out, 0, 0x1234_5678, 4).unwrap();
    let done = Event::new(ctx).unwrap();
    s2.record(&done).unwrap();
    s2.flush().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    t.check(
        "event: waiter held back",
        !done.query().unwrap_or(true),
        || "s2 ran before s1's event".into(),
    );
    let mut w = [0u8; 4];
    out.read(0, &mut w).unwrap();
    t.check("event: waiter's write not done", w == [0; 4], || {
        format!("{w:x?}")
    });
    t.check(
        "event: gate not complete",
        !gate.query().unwrap_or(true),
        String::new,
    );
    host_u64(&sem, 0).store(1, Ordering::SeqCst);
    t.ok("event: waiter completes after release", done.synchronize());
    out.read(0, &mut w).unwrap();
    t.check(
        "event: waiter's write landed",
        w == 0x1234_5678u32.to_le_bytes(),
        || format!("{w:x?}"),
    );
}

fn test_pool_reuse(t: &mut T, ctx: &Context) {
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

fn test_invalid(t: &mut T, ctx: &Context) {
    let s = Stream::new(ctx).unwrap();
    let b = ctx.alloc(64, MemKind::DeviceLocal).unwrap();
    t.ok("invalid: destroy", s.destroy());
    t.err("invalid: use after destroy", s.memset(&b, 0, 0, 64), |e| {
        e.to_string().contains("destroyed")
    });
    t.err("invalid: destroy twice", s.destroy(), |e| {
        e.to_string().contains("already destroyed")
    });
    t.err(
        "invalid: push on bad engine",
        Stream::new(ctx).unwrap().push_packets(7, &[]),
        |e| matches!(e, Error::Invalid { .. }),
    );
    t.err(
        "invalid: module garbage",
        Module::load(ctx, b"not a module"),
        |e| e.to_string().contains("invalid module"),
    );
    t.err(
        "invalid: assembly error",
        Module::assemble(ctx, ".kernel k\n bogus r0\n.end\n"),
        |e| e.to_string().contains("invalid module"),
    );
    let m = Module::assemble(ctx, include_str!("../../../isa/samples/saxpy.s")).unwrap();
    t.err("invalid: no such kernel", m.kernel("nope"), |e| {
        e.to_string().contains("no kernel named \"nope\"")
    });
    let k = m.kernel("saxpy").unwrap();
    let s = Stream::new(ctx).unwrap();
    t.err(
        "invalid: launch wrong arg count",
        s.launch(&k, [1, 1, 1], None, &[Arg::U32(1)]),
        |e| e.to_string().contains("1 arguments given, 4 expected"),
    );
    t.err(
        "invalid: launch wrong arg type",
        s.launch(
            &k,
            [1, 1, 1],
            None,
            &[Arg::F32(1.0), Arg::F32(1.0), Arg::Ptr(0), Arg::Ptr(0)],
        ),
        |e| e.to_string().contains("argument 0 (n) is u32, got f32"),
    );
    t.err(
        "invalid: launch zero grid",
        s.launch(
            &k,
            [0, 1, 1],
            None,
            &[Arg::U32(1), Arg::F32(1.0), Arg::Ptr(0), Arg::Ptr(0)],
        ),
        |e| e.to_string().contains("bad launch shape"),
    );
    t.err(
        "invalid: launch huge workgroup",
        s.launch(
            &k,
            [1, 1, 1],
            Some([1024, 2, 1]),
            &[Arg::U32(1), Arg::F32(1.0), Arg::Ptr(0), Arg::Ptr(0)],
        ),
        |e| e.to_string().contains("threads"),
    );
    t.check(
        "invalid: context still usable",
        ctx.status().is_none(),
        || format!("{:?}", ctx.status()),
    );
}

fn test_concurrency(t: &mut T, ctx: &Context) {
    let threads: Vec<_> = (0..4u32)
        .map(|i| {
            let ctx = ctx.clone();
            std::thread::spawn(move || -> Result<(), String> {
                let s = Stream::new(&ctx).map_err(|e| e.to_string())?;
                for j in 0..25u32 {
                    let n = 1000 + 997 * j as usize;
                    let a = ctx
                        .alloc(n as u64, MemKind::DeviceLocal)
                        .map_err(|e| e.to_string())?;
                    let b = ctx
                        .alloc(n as u64, MemKind::DeviceLocal)
                        .map_err(|e| e.to_string())?;
                    let data = pattern(n, i * 100 + j);
                    s.write(&a, 0, &data).map_err(|e| e.to_string())?;
                    s.copy(&b, 0, &a, 0, n as u64).map_err(|e| e.to_string())?;
                    let mut back = vec![0; n];
                    s.read(&b, 0, &mut back).map_err(|e| e.to_string())?;
                    if back != data {
                        return Err(format!("thread {i} iteration {j}: data differs"));
                    }
                }
                Ok(())
            })
        })
        .collect();
    for (i, h) in threads.into_iter().enumerate() {
        let r = h.join().unwrap_or_else(|_| Err("panicked".into()));
        t.check(&format!("concurrency: thread {i}"), r.is_ok(), || {
            r.unwrap_err()
        });
    }
    // Two streams of one thread interleaved.
    let s1 = Stream::new(ctx).unwrap();
    let s2 = Stream::new(ctx).unwrap();
    let a = ctx.alloc(1 << 20, MemKind::HostVisible).unwrap();
    let b = ctx.alloc(1 << 20, MemKind::HostVisible).unwrap();
    for i in 0..16u64 {
        s1.memset32(&a, i * 65536, i as u32, 65536).unwrap();
        s2.memset32(&b, i * 65536, 100 + i as u32, 65536).unwrap();
    }
    t.ok("concurrency: context synchronize", ctx.synchronize());
    let mut va = vec![0u8; 1 << 20];
    let mut vb = vec![0u8; 1 << 20];
    a.read(0, &mut va).unwrap();
    b.read(0, &mut vb).unwrap();
    let ok = (0..16usize).all(|i| {
        va[i * 65536..i * 65536 + 4] == (i as u32).to_le_bytes()
            && vb[i * 65536 + 65532..i * 65536 + 65536] == (100 + i as u32).to_le_bytes()
    });
    t.check("concurrency: two streams' results", ok, String::new);
}

fn test_fault(t: &mut T) {
    let ctx = Context::new().unwrap();
    let s = Stream::new(&ctx).unwrap();
    let b = ctx.alloc(4096, MemKind::DeviceLocal).unwrap();
    // The first 64 KiB of the VM are never mapped.
    s.push_packets(
        ENGINE_COPY,
        &[Packet::Fill {
            dst: 0x1000,
            size: 64,
            pattern: 0,
        }],
    )
    .unwrap();
    let r = s.synchronize();
    match &r {
        Err(Error::Lost {
            reason: LostReason::PageFault { va, .. },
            ..
        }) => t.check(
            "fault: page fault reported with its address",
            *va == 0x1000,
            || format!("va {va:#x}"),
        ),
        _ => t.check("fault: page fault reported", false, || format!("{r:?}")),
    };
    if let Err(e) = &r {
        println!("info fault: {e}");
        t.check(
            "fault: message names the call and context",
            e.to_string().starts_with("Stream::synchronize (context "),
            || e.to_string(),
        );
    }
    t.err(
        "fault: sticky on alloc",
        ctx.alloc(64, MemKind::DeviceLocal),
        |e| matches!(e, Error::Lost { .. }),
    );
    t.err("fault: sticky on memset", s.memset(&b, 0, 0, 64), |e| {
        matches!(e, Error::Lost { .. })
    });
    t.check(
        "fault: status",
        matches!(ctx.status(), Some((_, LostReason::PageFault { .. }))),
        || format!("{:?}", ctx.status()),
    );
    // Another context is unaffected.
    let other = Context::new().unwrap();
    let s2 = Stream::new(&other).unwrap();
    let ob = other.alloc(64, MemKind::HostVisible).unwrap();
    s2.memset(&ob, 0, 9, 64).unwrap();
    t.ok("fault: other context unaffected", s2.synchronize());
}

fn test_hang(t: &mut T) {
    let ctx = Context::new().unwrap();
    let s = Stream::new(&ctx).unwrap();
    let sem = ctx.alloc(64, MemKind::HostVisible).unwrap();
    host_u64(&sem, 0).store(0, Ordering::SeqCst);
    s.push_packets(
        ENGINE_COPY,
        &[Packet::SemWait {
            va: sem.va(),
            value: 1,
            op: packet::SEM_WAIT_EQ,
        }],
    )
    .unwrap();
    let r = s.synchronize();
    t.check(
        "hang: reset reported as a hang",
        matches!(
            r,
            Err(Error::Lost {
                reason: LostReason::Hang { .. },
                ..
            })
        ),
        || format!("{r:?}"),
    );
    if let Err(e) = &r {
        println!("info hang: {e}");
    }
    t.err("hang: sticky", Stream::new(&ctx), |e| {
        matches!(e, Error::Lost { .. })
    });
}

/// saxpy through the API, verified against the CPU; then a kernel that
/// traps the launch arguments it was given.
fn test_launch(t: &mut T) {
    let ctx = Context::new().unwrap();
    let Some(m) = t.ok(
        "launch: assemble+load saxpy",
        Module::assemble(&ctx, include_str!("../../../isa/samples/saxpy.s")),
    ) else {
        return;
    };
    let k = m.kernel("saxpy").unwrap();
    let s = Stream::new(&ctx).unwrap();
    let n = 1000u32;
    let x: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
    let y: Vec<f32> = (0..n).map(|i| 1000.0 - i as f32).collect();
    let bytes = |v: &[f32]| v.iter().flat_map(|f| f.to_le_bytes()).collect::<Vec<u8>>();
    let bx = ctx.alloc(4 * u64::from(n), MemKind::DeviceLocal).unwrap();
    let by = ctx.alloc(4 * u64::from(n), MemKind::DeviceLocal).unwrap();
    s.write(&bx, 0, &bytes(&x)).unwrap();
    s.write(&by, 0, &bytes(&y)).unwrap();
    t.ok(
        "launch: enqueue saxpy",
        s.launch(
            &k,
            [n.div_ceil(256), 1, 1],
            None,
            &[Arg::U32(n), Arg::F32(2.0), Arg::buf(&bx), Arg::buf(&by)],
        ),
    );
    let mut out = vec![0u8; 4 * n as usize];
    match s.read(&by, 0, &mut out) {
        Ok(()) => {
            let ok = (0..n as usize).all(|i| {
                let got = f32::from_le_bytes(out[4 * i..4 * i + 4].try_into().unwrap());
                got == 2.0f32.mul_add(x[i], y[i])
            });
            t.check("launch: saxpy result", ok, String::new);
        }
        Err(e) => {
            t.check("launch: saxpy", false, || e.to_string());
        }
    }
    // Kernels without arguments, and several launches batched in one stream.
    let m = Module::assemble(
        &ctx,
        ".kernel fill7\n.arg out ptr\n.workgroup 64\n    s2r r0, %gid.x\n    mov r1, 4\n    ldarg d2, [out]\n    mad.wide.u32 d2, r0, r1, d2\n    mov r6, 7\n    st.32 [d2], r6\n    exit\n.end\n",
    );
    if let Some(m) = t.ok("launch: assemble a second module", m) {
        let k = m.kernel("fill7").unwrap();
        let b = ctx.alloc(4 * 640, MemKind::HostVisible).unwrap();
        for i in 0..10u64 {
            let sub = ctx.alloc(4 * 64, MemKind::DeviceLocal).unwrap();
            s.launch(&k, [1, 1, 1], None, &[Arg::buf(&sub)]).unwrap();
            s.copy(&b, 4 * 64 * i, &sub, 0, 4 * 64).unwrap();
        }
        t.ok(
            "launch: ten launches interleaved with copies",
            s.synchronize(),
        );
        let mut v = vec![0u8; 4 * 640];
        b.read(0, &mut v).unwrap();
        t.check(
            "launch: every launch ran before its copy",
            v.chunks(4).all(|c| c == 7u32.to_le_bytes()),
            String::new,
        );
    }
}

/// `Device::stats`: the stream's KMD context is listed with this process's
/// pid, memory follows an allocation, fences and counters follow work; an
/// engine error is named in the error message.
fn test_stats(t: &mut T) {
    let Ok(dev) = Device::open_first() else {
        t.check("stats: open device", false, || "no device".into());
        return;
    };
    let ctx = Context::new().unwrap();
    let s = Stream::new(&ctx).unwrap();
    let kctx = s.kmd_context();
    let Some(s0) = t.ok("stats: sample", dev.stats()) else {
        return;
    };
    let me = s0.contexts.iter().find(|c| c.ctx_id == kctx).copied();
    // On user-mode queues (VGPU_SUBMIT=user) the stream's context is its
    // copy engine's queue, and the KMD sees no SUBMIT: only the ring's
    // completed fences.
    let user = ctx.config().submit == vgpu_umd::SubmitPath::User;
    let engines = if user { 1 } else { 3 };
    t.check(
        "stats: the stream's context is listed with our pid",
        me.is_some_and(|c| {
            c.pid == std::process::id()
                && c.engines == engines
                && (c.state & vgpu_umd::uapi::CTX_STATE_USER_QUEUE != 0) == user
        }),
        || format!("context {kctx}: {me:?}"),
    );
    let big = 4u64 << 20;
    let b = ctx.alloc(big, MemKind::DeviceLocal).unwrap();
    let s1 = dev.stats().unwrap_or_default();
    t.check(
        "stats: memory grows with an allocation",
        s1.mem_bytes >= s0.mem_bytes + big,
        || format!("{} -> {}", s0.mem_bytes, s1.mem_bytes),
    );
    for i in 0..8u8 {
        s.memset(&b, 0, i, big).unwrap();
    }
    t.ok("stats: work", s.synchronize());
    // The stream's own timeline fence (which synchronize waits for) comes
    // before the KMD's job fence: poll until the KMD saw the job complete.
    let find = |s: &vgpu_umd::Stats| {
        s.contexts
            .iter()
            .find(|c| c.ctx_id == kctx)
            .copied()
            .unwrap_or_default()
    };
    let c1 = find(&s1);
    let mut s2 = dev.stats().unwrap_or_default();
    for _ in 0..100 {
        let c = find(&s2);
        let settled = if user {
            c.completed[0] > c1.completed[0]
        } else {
            c.submitted[0] > 0 && c.completed[0] == c.submitted[0]
        };
        if settled {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
        s2 = dev.stats().unwrap_or_default();
    }
    let c2 = find(&s2);
    t.check(
        "stats: fences and counters follow the work",
        (user || c2.submitted[0] > c1.submitted[0])
            && c2.completed[0] > c1.completed[0]
            && (user || c2.completed[0] == c2.submitted[0])
            && c2.counters.bytes > c1.counters.bytes
            && c2.counters.busy_ns > c1.counters.busy_ns,
        || format!("before {c1:?} after {c2:?}"),
    );
    t.check(
        "stats: utilisation between samples is within 0..=100",
        (0.0..=100.0).contains(&s2.engine_utilisation(&s1, 0))
            && (0.0..=100.0).contains(&s2.ctx_utilisation(&s1, kctx)),
        String::new,
    );

    // An engine error (FILL of 0 bytes) is named in the message.
    let ctx = Context::new().unwrap();
    let s = Stream::new(&ctx).unwrap();
    let b = ctx.alloc(4096, MemKind::DeviceLocal).unwrap();
    let r = s
        .push_packets(
            ENGINE_COPY,
            &[Packet::Fill {
                dst: b.va(),
                size: 0,
                pattern: 0,
            }],
        )
        .and_then(|()| s.synchronize());
    if let Err(e) = &r {
        println!("info engine error: {e}");
    }
    t.check(
        "stats: engine error code in the lost reason",
        matches!(
            &r,
            Err(e @ Error::Lost {
                reason: LostReason::EngineError { code: 6, .. },
                ..
            }) if e.to_string().contains("BAD_OPERAND")
        ),
        || format!("{r:?}"),
    );
    // ... and names its packet: read back from the command buffer and
    // decoded, with the SUBMIT and the offset in the buffer it was in.
    t.check(
        "stats: the engine error names its packet and where it was submitted",
        matches!(
            &r,
            Err(e @ Error::Lost {
                reason: LostReason::EngineError { at: Some(p), .. },
                ..
            }) if p.packet.starts_with("FILL")
                && p.packet_va != 0
                && p.seqno != 0
                && p.cmd_index.is_some()
                && p.depth == 1
                && e.to_string().contains(&format!("at packet {:#x} [FILL", p.packet_va))
                && e.to_string().contains(", command buffer ")
        ),
        || format!("{r:?}"),
    );
}

fn main() {
    vgpu_umd::exit_quietly_on_closed_pipe();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let want = |s: &str| args.is_empty() || args.iter().any(|a| a == s);
    let mut t = T {
        passed: 0,
        failed: 0,
    };
    if want("device") {
        test_device(&mut t);
    }
    let ctx = match Context::new() {
        Ok(c) => c,
        Err(e) => {
            println!("FAIL context: {e}");
            std::process::exit(1);
        }
    };
    println!("info generation {}", ctx.identity().generation);
    if want("memory") {
        test_memory(&mut t, &ctx);
    }
    if want("copy") {
        test_copy(&mut t, &ctx);
        test_read_paths(&mut t, &Device::open_first().expect("device"));
    }
    if want("batch") {
        test_batching(&mut t, &ctx);
        test_cmdbuf_cap(&mut t, &Device::open_first().expect("device"));
    }
    if want("events") {
        test_events(&mut t, &ctx);
    }
    if want("pool") {
        test_pool_reuse(&mut t, &ctx);
    }
    if want("invalid") {
        test_invalid(&mut t, &ctx);
    }
    if want("concurrency") {
        test_concurrency(&mut t, &ctx);
    }
    if want("launch") {
        test_launch(&mut t);
    }
    if want("fault") {
        test_fault(&mut t);
    }
    if want("hang") {
        test_hang(&mut t);
    }
    if want("stats") {
        test_stats(&mut t);
    }
    println!("umd-test: {} passed, {} failed", t.passed, t.failed);
    std::process::exit(i32::from(t.failed > 0));
}
