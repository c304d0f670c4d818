//! Section `copy`: writes, copies, memsets and reads through a stream,
//! and the three read paths.

use vgpu_umd::{Config, Context, Device, Error, MemKind, ReadPath, Stream};

use crate::pattern;
use crate::report::T;

pub fn test_copy(t: &mut T, ctx: &Context) {
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
pub fn test_read_paths(t: &mut T, dev: &Device) {
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
