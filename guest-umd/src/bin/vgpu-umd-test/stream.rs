//! Sections `batch`, `events` and `concurrency`: batching and the command
//! buffers' cap, events and cross-stream waits, streams of several threads
//! and interleaved streams of one.

use std::sync::atomic::Ordering;
use std::time::Duration;

use vgpu_hwif::packet::{self, Packet};
use vgpu_umd::{Context, Device, Event, MemKind, Stream, ENGINE_COPY};

use crate::report::T;
use crate::{host_u64, pattern};

pub fn test_batching(t: &mut T, ctx: &Context) {
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
pub fn test_cmdbuf_cap(t: &mut T, dev: &Device) {
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

pub fn test_events(t: &mut T, ctx: &Context) {
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

pub fn test_concurrency(t: &mut T, ctx: &Context) {
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
