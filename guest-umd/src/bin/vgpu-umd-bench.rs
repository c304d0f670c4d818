//! UMD benchmarks, each against a raw reference measured in the same run:
//!
//! * no-op submit → fence signalled (user to user) vs a raw `PING` round
//!   trip through the control and event queues; the same on user-mode
//!   queues (`VGPU_SUBMIT=user`: no system call) vs the `SUBMIT` path,
//!   measured in alternating rounds of ten;
//! * batched submissions per second vs the raw echo rate;
//! * host↔device copy bandwidth through the API vs guest `memcpy`; reads
//!   into the caller's memory mapped for the device (`VGPU_READ=mapped`,
//!   the default), straight from the buffer's mapping (`VGPU_READ=direct`)
//!   and staged through the copy engine (`VGPU_READ=staged`);
//! * CPU writes and reads through the VRAM aperture (BAR 2 of the function
//!   next to the GPU, docs/hardware.md section 5.6) vs guest `memcpy`, the
//!   bytes read back checked;
//! * eviction of a VRAM object to system memory (`--evict`: the creation of
//!   a VRAM-only object when VRAM is full, the copy on the copy engine
//!   included) vs the copy engine's raw VRAM→system copy of the same bytes.
//!
//! ```text
//! vgpu-umd-bench [--iters N] [--mib M]
//! vgpu-umd-bench --aperture       only the aperture: write, read back, check
//! vgpu-umd-bench --evict --mib M  only eviction: M MiB (less than the usable VRAM)
//! vgpu-umd-bench --aperture-fill SEED | --aperture-verify SEED
//!                                 write a seeded pattern through the aperture,
//!                                 or say whether it is still there (`aperture:
//!                                 kept` / `aperture: lost, ...`)
//! vgpu-umd-bench --power N       low-power states: the first submission after
//!                                 N runtime suspensions (autosuspend_ms) and N
//!                                 system suspends, the firmware's boot time
//! vgpu-umd-bench --uq-idle SECS   user-mode queues open and idle for SECS
//!                                 between `uq-idle: begin` and `uq-idle: end`
//!                                 (the host measures the device process's
//!                                 CPU meanwhile), then one more submission
//! ```
use std::time::{Duration, Instant};

#[path = "vgpu-umd-bench/power.rs"]
mod power;

use vgpu_hwif::packet::Packet;
use vgpu_umd::{
    Config, Context, Device, MemKind, Placement, ReadPath, Stream, SubmitPath, ENGINE_COPY,
};

/// Longer than the device's default doorbell polling window (2 ms) after
/// a user-mode queue's last activity: once it has passed, the device's
/// watcher sleeps until a kick and uses no CPU.
const POLL_SETTLE: Duration = Duration::from_millis(5);

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
    vgpu_umd::exit_quietly_on_closed_pipe();
    let iters = arg("--iters", 200) as usize;
    let mib = arg("--mib", 16) as usize;
    let dev = Device::open_first()?;
    let idle = arg("--uq-idle", 0);
    if idle > 0 {
        return uq_idle(&dev, idle);
    }
    for (flag, fill) in [("--aperture-fill", true), ("--aperture-verify", false)] {
        if std::env::args().any(|a| a == flag) {
            return aperture_fill_verify(&dev, mib, arg(flag, 1), fill);
        }
    }
    let rounds = arg("--power", 0) as usize;
    if rounds > 0 {
        return power::power_benchmark(&dev, rounds);
    }
    if std::env::args().any(|a| a == "--evict") {
        return evict_benchmark(mib);
    }
    if std::env::args().any(|a| a == "--aperture") {
        let src: Vec<u8> = (0..mib << 20).map(|i| (i * 7 + i / 4096) as u8).collect();
        let mut dst = vec![0u8; src.len()];
        let t = Instant::now();
        dst.copy_from_slice(std::hint::black_box(&src));
        let memcpy = src.len() as f64 / t.elapsed().as_secs_f64();
        return aperture_benchmark(&dev, mib, memcpy, &src);
    }
    // The direct read path for this context (VGPU_READ=direct); the staged
    // one gets a context of its own below.
    let ctx = Context::with_config(
        &dev,
        Config {
            read: ReadPath::Direct,
            ..Config::from_env()?
        },
    )?;
    println!(
        "bench: generation {}, {iters} iterations",
        ctx.identity().generation
    );

    let s = submit_benchmarks(&dev, &ctx, iters)?;
    copy_benchmarks(&dev, &ctx, &s, mib)
}

/// Latency and rate of submissions: a raw `PING` echo, a no-op batch
/// submitted and waited for through `SUBMIT` and on user-mode queues, and
/// bursts of them. Returns the `SUBMIT` path's stream.
fn submit_benchmarks(
    dev: &Device,
    ctx: &Context,
    iters: usize,
) -> Result<Stream, Box<dyn std::error::Error>> {
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

    // No-op submit (one NOP + the batch's FENCE) and wait, user to user:
    // through SUBMIT, and on user-mode queues, one of each per iteration.
    let s = Stream::new(ctx)?;
    let uctx = Context::with_config(
        dev,
        Config {
            submit: SubmitPath::User,
            ..ctx.config().clone()
        },
    )?;
    let us = Stream::new(&uctx)?;
    let nop = [Packet::Nop { words: 1 }];
    let once = |s: &Stream| -> Result<Duration, vgpu_umd::Error> {
        let t = Instant::now();
        s.push_packets(ENGINE_COPY, &nop)?;
        s.synchronize().map(|_| t.elapsed())
    };
    for _ in 0..10 {
        once(&s)?;
        once(&us)?;
    }
    // Rounds of ten of each, alternating: both paths see the same drift of
    // the guest's speed, and a user-mode queue's submissions follow each
    // other as an application's would (the device keeps polling between
    // them rather than sleeping after every one). After a user-queue round
    // the benchmark waits until the device has stopped polling (its window
    // is 2 ms by default, `vgpu-device --doorbell-poll-us`), so the SUBMIT
    // rounds do not share the host's cores with the polling thread; the
    // first user-queue batch of the next round then finds the device asleep
    // and kicks it, as an application's first submission after a pause does.
    let (mut noops, mut unoops) = (Vec::new(), Vec::new());
    for _ in 0..iters.div_ceil(10) {
        for _ in 0..10 {
            noops.push(once(&s)?);
        }
        for _ in 0..10 {
            unoops.push(once(&us)?);
        }
        std::thread::sleep(POLL_SETTLE);
    }
    let noop = median(noops);
    let unoop = median(unoops);
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

    let ust = us.stats();
    println!(
        "bench: user-queue noop submit->fence median {:.1} us, SUBMIT path median {:.1} us, ratio {:.2} (kicks {} of {} batches)",
        unoop.as_secs_f64() * 1e6,
        noop.as_secs_f64() * 1e6,
        unoop.as_secs_f64() / noop.as_secs_f64(),
        ust.kicks,
        ust.submits
    );

    // Submissions per second: one no-op batch per flush, waited for at the end.
    let n = iters * 4;
    let burst = |s: &Stream| -> Result<f64, vgpu_umd::Error> {
        let t = Instant::now();
        for _ in 0..n {
            s.push_packets(ENGINE_COPY, &nop)?;
            s.flush()?;
        }
        s.synchronize()?;
        Ok(n as f64 / t.elapsed().as_secs_f64())
    };
    let rate = burst(&s)?;
    let urate = burst(&us)?;
    let echo_rate = 1.0 / ping.as_secs_f64();
    println!(
        "bench: submissions {:.0}/s, raw echo {:.0}/s, ratio {:.2}",
        rate,
        echo_rate,
        rate / echo_rate
    );
    println!(
        "bench: user-queue submissions {:.0}/s, SUBMIT path {:.0}/s, ratio {:.2}",
        urate,
        rate,
        urate / rate
    );
    Ok(s)
}

/// Copy bandwidth of `mib` MiB: host to device, and device to host by each
/// read path (direct, staged, mapped), against the guest's memcpy.
fn copy_benchmarks(
    dev: &Device,
    ctx: &Context,
    s: &Stream,
    mib: usize,
) -> Result<(), Box<dyn std::error::Error>> {
    // Copy bandwidth. Under TCG on a shared host the guest's speed varies
    // from second to second, so memcpy and every copy path are measured
    // interleaved in the same rounds and each keeps its best round.
    let bytes = mib << 20;
    let src = vec![0x5au8; bytes];
    let mut dst = vec![0u8; bytes];
    // One untimed pass first, so the baseline does not include faulting in
    // `dst`'s pages (the staging blocks the UMD reuses are warm too).
    dst.copy_from_slice(std::hint::black_box(&src));
    let b = ctx.alloc(bytes as u64, MemKind::DeviceLocal)?;
    s.write(&b, 0, &src)?;
    s.synchronize()?;
    // Device to host, straight from the buffer's mapping (the direct
    // path): the first read of a buffer also maps its pages into the
    // process, so it is reported apart, like memcpy's untimed first pass.
    dst.fill(0);
    let t = Instant::now();
    s.read(&b, 0, &mut dst)?;
    let first = bytes as f64 / t.elapsed().as_secs_f64();
    if dst != src {
        return Err("device-to-host read returned wrong data".into());
    }
    // The same reads through the copy engine and staging memory
    // (VGPU_READ=staged): a context of its own.
    let staged_ctx = Context::with_config(
        dev,
        Config {
            read: ReadPath::Staged,
            ..ctx.config().clone()
        },
    )?;
    let ss = Stream::new(&staged_ctx)?;
    let sb = staged_ctx.alloc(bytes as u64, MemKind::DeviceLocal)?;
    ss.write(&sb, 0, &src)?;
    ss.read(&sb, 0, &mut dst)?;
    // And by the copy engine straight into `dst`, mapped for the device
    // (VGPU_READ=mapped, the default).
    let mapped_ctx = Context::with_config(
        dev,
        Config {
            read: ReadPath::Mapped,
            ..ctx.config().clone()
        },
    )?;
    let ms = Stream::new(&mapped_ctx)?;
    let mb = mapped_ctx.alloc(bytes as u64, MemKind::DeviceLocal)?;
    ms.write(&mb, 0, &src)?;
    ms.read(&mb, 0, &mut dst)?;
    let rate =
        |f: &mut dyn FnMut() -> Result<(), vgpu_umd::Error>| -> Result<f64, vgpu_umd::Error> {
            let t = Instant::now();
            f()?;
            Ok(bytes as f64 / t.elapsed().as_secs_f64())
        };
    let (mut memcpy, mut h2d, mut d2h, mut staged, mut mapped) = (0f64, 0f64, 0f64, 0f64, 0f64);
    // Under TCG, `memcpy` between two anonymous buffers ran at 343–1 519
    // MiB/s depending on which buffer was the source (`src`, filled by
    // `vec!`, or a copy of it): the baseline is the faster of the two.
    let src2 = src.clone();
    for _ in 0..5 {
        for from in [&src, &src2] {
            memcpy = memcpy.max(rate(&mut || {
                dst.copy_from_slice(std::hint::black_box(from));
                Ok(())
            })?);
        }
        h2d = h2d.max(rate(&mut || {
            s.write(&b, 0, &src)?;
            s.synchronize()
        })?);
        dst.fill(0);
        d2h = d2h.max(rate(&mut || s.read(&b, 0, &mut dst))?);
        if dst != src {
            return Err("device-to-host read returned wrong data".into());
        }
        dst.fill(0);
        staged = staged.max(rate(&mut || ss.read(&sb, 0, &mut dst))?);
        if dst != src {
            return Err("staged device-to-host read returned wrong data".into());
        }
        dst.fill(0);
        mapped = mapped.max(rate(&mut || ms.read(&mb, 0, &mut dst))?);
        if dst != src {
            return Err("mapped device-to-host read returned wrong data".into());
        }
    }
    if ms.stats().mapped_reads < 6 {
        return Err(format!("mapped reads went staged: {:?}", ms.stats()).into());
    }
    aperture_benchmark(dev, mib, memcpy, &src)?;
    let mib_s = |r: f64| r / 1048576.0;
    println!(
        "bench: {mib} MiB copies: H2D {:.0} MiB/s ({:.2}x memcpy), D2H direct {:.0} MiB/s ({:.2}x memcpy), guest memcpy {:.0} MiB/s",
        mib_s(h2d),
        h2d / memcpy,
        mib_s(d2h),
        d2h / memcpy,
        mib_s(memcpy)
    );
    println!(
        "bench: {mib} MiB D2H: first read of the buffer {:.0} MiB/s ({:.2}x memcpy), staged through the copy engine {:.0} MiB/s ({:.2}x memcpy)",
        mib_s(first),
        first / memcpy,
        mib_s(staged),
        staged / memcpy
    );
    println!(
        "bench: {mib} MiB D2H into the caller's memory mapped for the device {:.0} MiB/s ({:.2}x memcpy)",
        mib_s(mapped),
        mapped / memcpy
    );
    Ok(())
}

/// The aperture's PCI function next to `dev`'s (function 1 of its slot),
/// if it is QEMU's `ivshmem-plain`.
fn aperture_dir(dev: &Device) -> Option<std::path::PathBuf> {
    let node = dev.path().file_name()?.to_str()?.to_owned();
    let gpu = std::fs::canonicalize(format!("/sys/class/drm/{node}/device")).ok()?;
    let name = gpu.file_name()?.to_str()?;
    let dir = gpu.with_file_name(format!("{}.1", name.rsplit_once('.')?.0));
    let id = |f: &str| std::fs::read_to_string(dir.join(f)).ok();
    (id("vendor")?.trim() == "0x1af4" && id("device")?.trim() == "0x1110").then_some(dir)
}

/// The first `len` bytes of the VRAM aperture, mapped shared.
struct ApertureMap {
    ptr: *mut libc::c_void,
    len: usize,
}

impl ApertureMap {
    /// Maps `len` bytes of `dev`'s aperture; `None` without one.
    fn new(dev: &Device, len: usize) -> Result<Option<ApertureMap>, Box<dyn std::error::Error>> {
        use std::os::fd::AsRawFd;
        let Some(dir) = aperture_dir(dev) else {
            return Ok(None);
        };
        // Memory decoding on: the function has no driver of its own.
        std::fs::write(dir.join("enable"), "1")?;
        let open = |name: &str| {
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(dir.join(name))
        };
        let f = open("resource2_wc").or_else(|_| open("resource2"))?;
        if (f.metadata()?.len() as usize) < len {
            return Err(format!("the aperture is smaller than {len} bytes").into());
        }
        // SAFETY: a shared mapping of `len` bytes of the BAR file, checked
        // above to be at least that long; unmapped on drop.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error().into());
        }
        Ok(Some(ApertureMap { ptr, len }))
    }

    /// The mapped bytes.
    fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: `ptr` maps `len` readable and writable bytes until drop;
        // the `&mut self` borrow makes this the only slice of them.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.cast::<u8>(), self.len) }
    }
}

impl Drop for ApertureMap {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, not used after this.
        unsafe { libc::munmap(self.ptr, self.len) };
    }
}

/// The pattern `--aperture-fill SEED` writes.
fn aperture_pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| (vgpu_hwif::rng::xorshift64(&mut x) >> 24) as u8)
        .collect()
}

/// `--aperture-fill SEED` (write the pattern) or `--aperture-verify SEED`
/// (say whether the aperture still holds it: `aperture: kept`, or `aperture:
/// lost, N of M bytes differ, M zero`), over `mib` MiB.
fn aperture_fill_verify(
    dev: &Device,
    mib: usize,
    seed: u64,
    fill: bool,
) -> Result<(), Box<dyn std::error::Error>> {
    let want = aperture_pattern(mib << 20, seed);
    let Some(mut map) = ApertureMap::new(dev, want.len())? else {
        return Err("no VRAM aperture next to the GPU".into());
    };
    let bar = map.bytes();
    if fill {
        bar.copy_from_slice(&want);
        println!("aperture: filled {mib} MiB");
        return Ok(());
    }
    let differ = bar.iter().zip(&want).filter(|(a, b)| a != b).count();
    let zero = bar.iter().filter(|&&b| b == 0).count();
    if differ == 0 {
        println!("aperture: kept");
    } else {
        println!(
            "aperture: lost, {differ} of {} bytes differ, {zero} zero",
            want.len()
        );
    }
    Ok(())
}

/// CPU writes and reads of `src` through the VRAM aperture, as ratios to
/// `memcpy` (bytes per second); the bytes read back must be those written.
fn aperture_benchmark(
    dev: &Device,
    mib: usize,
    memcpy: f64,
    src: &[u8],
) -> Result<(), Box<dyn std::error::Error>> {
    let Some(mut map) = ApertureMap::new(dev, src.len())? else {
        println!("bench: no VRAM aperture next to the GPU: aperture not measured");
        return Ok(());
    };
    let bar = map.bytes();
    let len = src.len();
    let mut back = vec![0u8; len];
    let (mut write, mut read) = (0f64, 0f64);
    for _ in 0..3 {
        let t = Instant::now();
        bar.copy_from_slice(std::hint::black_box(src));
        write = write.max(len as f64 / t.elapsed().as_secs_f64());
        back.fill(0);
        let t = Instant::now();
        back.copy_from_slice(std::hint::black_box(&*bar));
        read = read.max(len as f64 / t.elapsed().as_secs_f64());
        if back != src {
            return Err("bytes read through the aperture differ from those written".into());
        }
    }
    let mib_s = |r: f64| r / 1048576.0;
    println!(
        "bench: {mib} MiB through the VRAM aperture: CPU write {:.0} MiB/s ({:.2}x memcpy), CPU read {:.0} MiB/s ({:.2}x memcpy)",
        mib_s(write),
        write / memcpy,
        mib_s(read),
        read / memcpy
    );
    Ok(())
}

/// User-mode queues open and idle: two streams' queues (four rings) do
/// some work, then nothing for `secs` seconds between two marker lines, then
/// one more batch (the device has stopped polling by then: a kick).
fn uq_idle(dev: &Device, secs: u64) -> Result<(), Box<dyn std::error::Error>> {
    let ctx = Context::with_config(
        dev,
        Config {
            submit: SubmitPath::User,
            ..Config::from_env()?
        },
    )?;
    let streams = [Stream::new(&ctx)?, Stream::new(&ctx)?];
    let nop = [Packet::Nop { words: 1 }];
    for s in &streams {
        for _ in 0..20 {
            s.push_packets(ENGINE_COPY, &nop)?;
            s.synchronize()?;
        }
    }
    println!("uq-idle: begin {secs} s, 4 user-mode queues open");
    std::thread::sleep(Duration::from_secs(secs));
    println!("uq-idle: end");
    let before = streams[0].stats().kicks;
    streams[0].push_packets(ENGINE_COPY, &nop)?;
    streams[0].synchronize()?;
    println!(
        "uq-idle: a submission after the idle time ran ({} kick)",
        streams[0].stats().kicks - before
    );
    Ok(())
}

/// `--evict`: three rounds of: an object of `mib` MiB in VRAM (filled on
/// the copy engine), copied VRAM→system by the copy engine through a
/// stream (timed to completion: the raw rate); VRAM then filled by a second
/// object; a third VRAM-only object of `mib` MiB created, which evicts the
/// first (timed: `GEM_CREATE` with the eviction, and `VM_BIND`). Medians.
fn evict_benchmark(mib: usize) -> Result<(), Box<dyn std::error::Error>> {
    let ctx = Context::new()?;
    let size = ctx.identity().vram_size;
    let len = (mib as u64) << 20;
    let usable = size.saturating_sub(vgpu_hwif::vram::FIRMWARE_RESERVED);
    if size == 0 || len >= usable {
        return Err(format!(
            "--evict: {mib} MiB needs more usable VRAM than that ({} MiB)",
            usable >> 20
        )
        .into());
    }
    let s = Stream::new(&ctx)?;
    let (mut raw, mut evict) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        let a = ctx.alloc_placed(len, MemKind::DeviceLocal, Placement::Vram)?;
        let sys = ctx.alloc_placed(len, MemKind::DeviceLocal, Placement::System)?;
        s.memset32(&a, 0, 0x5a5a_5a5a, len)?;
        s.memset32(&sys, 0, 0, len)?;
        s.synchronize()?;
        let t = Instant::now();
        s.copy(&sys, 0, &a, 0, len)?;
        s.synchronize()?;
        raw.push(t.elapsed());
        drop(sys);
        let fill = ctx.alloc_placed(usable - len, MemKind::DeviceLocal, Placement::Vram)?;
        let t = Instant::now();
        let c = ctx.alloc_placed(len, MemKind::DeviceLocal, Placement::Vram)?;
        evict.push(t.elapsed());
        drop((c, fill, a));
        s.synchronize()?;
    }
    let (raw, evict) = (median(raw), median(evict));
    let pages = median((0..3).map(|_| fresh_pages(len as usize)).collect());
    let rate = |d: Duration| mib as f64 / d.as_secs_f64();
    println!(
        "bench: eviction of {mib} MiB VRAM->system median {:.1} ms ({:.0} MiB/s), raw copy-engine VRAM->system copy median {:.1} ms ({:.0} MiB/s), ratio {:.2}x",
        evict.as_secs_f64() * 1e3,
        rate(evict),
        raw.as_secs_f64() * 1e3,
        rate(raw),
        raw.as_secs_f64() / evict.as_secs_f64()
    );
    println!(
        "bench: the guest's fresh pages: {mib} MiB of a new mapping touched (allocated and zeroed by the guest kernel, as the eviction's system pages are) median {:.1} ms; eviction vs raw copy + fresh pages ratio {:.2}x",
        pages.as_secs_f64() * 1e3,
        (raw + pages).as_secs_f64() / evict.as_secs_f64()
    );
    // The last move's phases, from the KMD (debugfs vram_mm, as root).
    if let Some(p) = last_move_phases() {
        let ms = |us: u64| us as f64 / 1e3;
        println!(
            "bench: eviction phases (last move): pages {:.1} ms, drain {:.1} ms, copy {:.1} ms, remap {:.1} ms; copy phase vs raw copy ratio {:.2}x",
            ms(p[0]),
            ms(p[1]),
            ms(p[2]),
            ms(p[3]),
            raw.as_secs_f64() * 1e6 / p[2].max(1) as f64
        );
    }
    Ok(())
}

/// The time to fault in every page of a new anonymous mapping of `len`
/// bytes: the guest kernel allocating and zeroing them, the work an
/// eviction's system pages cost it before the copy.
fn fresh_pages(len: usize) -> Duration {
    let t = Instant::now();
    let mut v = vec![0u8; len];
    for i in (0..len).step_by(4096) {
        v[i] = 1;
    }
    std::hint::black_box(&v);
    let d = t.elapsed();
    drop(v);
    d
}

/// `pages_us drain_us copy_us remap_us` of debugfs `vram_mm`'s
/// `last_move` line (`None` without debugfs).
fn last_move_phases() -> Option<[u64; 4]> {
    let dir = std::fs::read_dir("/sys/kernel/debug/vgpu")
        .ok()?
        .flatten()
        .next()?;
    let text = std::fs::read_to_string(dir.path().join("vram_mm")).ok()?;
    let line = text.lines().find(|l| l.starts_with("last_move:"))?;
    let w: Vec<&str> = line.split_whitespace().collect();
    let get = |name: &str| -> Option<u64> {
        let i = w.iter().position(|x| *x == name)?;
        w.get(i + 1)?.parse().ok()
    };
    Some([
        get("pages_us")?,
        get("drain_us")?,
        get("copy_us")?,
        get("remap_us")?,
    ])
}
