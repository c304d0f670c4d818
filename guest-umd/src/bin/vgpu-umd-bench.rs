//! UMD benchmarks, each against a raw reference measured in the same run:
//!
//! * no-op submit → fence signalled (user to user) vs a raw `PING` round
//!   trip through the control and event queues;
//! * batched submissions per second vs the raw echo rate;
//! * host↔device copy bandwidth through the API vs guest `memcpy`.
//!
//!   vgpu-umd-bench [--iters N] [--mib M]
use std::time::{Duration, Instant};

use vgpu_hwif::packet::Packet;
use vgpu_umd::{Context, Device, MemKind, Stream, ENGINE_COPY};

fn arg(name: &str, default: u64) -> u64 {
    let a: Vec<String> = std::env::args().collect();
    a.iter()
        .position(|x| x == name)
        .and_then(|i| a.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let iters = arg("--iters", 200) as usize;
    let mib = arg("--mib", 16) as usize;
    let dev = Device::open_first()?;
    let ctx = Context::new()?;
    println!(
        "bench: generation {}, {iters} iterations",
        ctx.identity().generation
    );

    // Raw echo: PING through the control queue, answered on the event queue.
    for _ in 0..10 {
        dev.ping(1, Duration::ZERO)?;
    }
    let pings: Vec<Duration> = (0..iters)
        .map(|i| {
            let t = Instant::now();
            dev.ping(i as u64, Duration::ZERO).map(|_| t.elapsed())
        })
        .collect::<Result<_, _>>()?;
    let ping = median(pings);

    // No-op submit (one NOP + the batch's FENCE) and wait, user to user.
    let s = Stream::new(&ctx)?;
    let nop = [Packet::Nop { words: 1 }];
    for _ in 0..10 {
        s.push_packets(ENGINE_COPY, &nop)?;
        s.synchronize()?;
    }
    let noops: Vec<Duration> = (0..iters)
        .map(|_| {
            let t = Instant::now();
            s.push_packets(ENGINE_COPY, &nop)?;
            s.synchronize().map(|_| t.elapsed())
        })
        .collect::<Result<_, _>>()?;
    let noop = median(noops);
    let st = s.stats();
    println!(
        "bench: noop submit->fence median {:.1} us, raw PING echo median {:.1} us, ratio {:.2} (waits: spin {} poll {} block {})",
        noop.as_secs_f64() * 1e6,
        ping.as_secs_f64() * 1e6,
        noop.as_secs_f64() / ping.as_secs_f64(),
        st.waits[0],
        st.waits[1],
        st.waits[2]
    );

    // Submissions per second: one no-op batch per flush, waited for at the end.
    let n = iters * 4;
    let t = Instant::now();
    for _ in 0..n {
        s.push_packets(ENGINE_COPY, &nop)?;
        s.flush()?;
    }
    s.synchronize()?;
    let rate = n as f64 / t.elapsed().as_secs_f64();
    let echo_rate = 1.0 / ping.as_secs_f64();
    println!(
        "bench: submissions {:.0}/s, raw echo {:.0}/s, ratio {:.2}",
        rate,
        echo_rate,
        rate / echo_rate
    );

    // Copy bandwidth.
    let bytes = mib << 20;
    let src = vec![0x5au8; bytes];
    let mut dst = vec![0u8; bytes];
    // One untimed pass first, so the baseline does not include faulting in
    // `dst`'s pages (the staging blocks the UMD reuses are warm too).
    dst.copy_from_slice(std::hint::black_box(&src));
    let t = Instant::now();
    for _ in 0..4 {
        dst.copy_from_slice(std::hint::black_box(&src));
    }
    let memcpy = 4.0 * bytes as f64 / t.elapsed().as_secs_f64();
    let b = ctx.alloc(bytes as u64, MemKind::DeviceLocal)?;
    s.write(&b, 0, &src)?;
    s.synchronize()?;
    let t = Instant::now();
    for _ in 0..4 {
        s.write(&b, 0, &src)?;
    }
    s.synchronize()?;
    let h2d = 4.0 * bytes as f64 / t.elapsed().as_secs_f64();
    let t = Instant::now();
    for _ in 0..4 {
        s.read(&b, 0, &mut dst)?;
    }
    let d2h = 4.0 * bytes as f64 / t.elapsed().as_secs_f64();
    if dst != src {
        return Err("device-to-host copy returned wrong data".into());
    }
    println!(
        "bench: {mib} MiB copies: H2D {:.0} MiB/s ({:.2}x memcpy), D2H {:.0} MiB/s ({:.2}x memcpy), guest memcpy {:.0} MiB/s",
        h2d / 1048576.0,
        h2d / memcpy,
        d2h / 1048576.0,
        d2h / memcpy,
        memcpy / 1048576.0
    );
    Ok(())
}
