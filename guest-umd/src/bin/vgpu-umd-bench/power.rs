//! `--power N`: what a low-power state costs the next submission, against
//! the same no-op submission on an awake device and the raw `PING` echo,
//! all in one run:
//!
//! * runtime `D3hot` (vgpu.ko `autosuspend_ms` set): the benchmark waits
//!   until the driver has suspended the device (`VGPU_PARAM_PM_STATE`,
//!   which does not wake it), then times a no-op submit -> fence, which
//!   pays for the resume (power-up, firmware boot, contexts created again);
//!   with `vram_d3cold_threshold_mib` set too, a CPU-mapped VRAM buffer
//!   held meanwhile keeps these suspensions in D3hot;
//! * runtime `D3cold` (`vram_d3cold_threshold_mib` set): the same with
//!   16 MiB of GPU-only VRAM buffers, which the driver saves before the
//!   power goes and copies back at the resume, before the submission goes
//!   on (debugfs `power`, `last_restore_us`: the copy back alone);
//! * system suspend to RAM (`echo mem > /sys/power/state`, woken by the
//!   launcher): the driver's resume time (debugfs `power`,
//!   `last_system_resume_us`: power-on to VRAM restored) and the first
//!   no-op submit -> fence after the write returns;
//! * the firmware's load and boot (debugfs `firmware`, as measured by the
//!   driver at the last boot).

use std::time::{Duration, Instant};

use vgpu_hwif::packet::Packet;
use vgpu_umd::uapi::param;
use vgpu_umd::{Context, Device, MemKind, Placement, Stream, ENGINE_COPY};

use super::median;

/// A debugfs file of the first vgpu device (`None` without debugfs).
fn debugfs(name: &str) -> Option<String> {
    let dir = std::fs::read_dir("/sys/kernel/debug/vgpu")
        .ok()?
        .flatten()
        .next()?;
    std::fs::read_to_string(dir.path().join(name)).ok()
}

/// The number after word `name` in `text`.
fn field(text: &str, name: &str) -> Option<u64> {
    let w: Vec<&str> = text.split_whitespace().collect();
    let i = w.iter().position(|x| *x == name)?;
    w.get(i + 1)?.trim_end_matches(';').parse().ok()
}

/// Waits until the driver has runtime-suspended the device to `state`
/// (`VGPU_PARAM_PM_STATE`: 1 D3hot, 2 D3cold), 5 s at most.
fn wait_suspended(dev: &Device, state: u64) -> bool {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(5) {
        if dev.get_param(param::PM_STATE).unwrap_or(0) == state {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    false
}

pub fn power_benchmark(dev: &Device, rounds: usize) -> Result<(), Box<dyn std::error::Error>> {
    let ctx = Context::new()?;
    let s = Stream::new(&ctx)?;
    let nop = [Packet::Nop { words: 1 }];
    let once = |s: &Stream| -> Result<Duration, vgpu_umd::Error> {
        let t = Instant::now();
        s.push_packets(ENGINE_COPY, &nop)?;
        s.synchronize().map(|_| t.elapsed())
    };
    let awake_samples = |s: &Stream| -> Result<Duration, vgpu_umd::Error> {
        let v = (0..50).map(|_| once(s)).collect::<Result<Vec<_>, _>>()?;
        Ok(median(v))
    };
    for _ in 0..10 {
        once(&s)?;
    }
    let pings = (0..50)
        .map(|i| {
            let t = Instant::now();
            dev.ping(i, Duration::ZERO).map(|_| t.elapsed())
        })
        .collect::<Result<Vec<_>, _>>()?;
    let ping = median(pings);
    let awake = awake_samples(&s)?;
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!(
        "bench: power: PING echo median {:.0} us, no-op submit->fence on an awake device median {:.0} us",
        us(ping),
        us(awake)
    );

    // Runtime D3hot.
    let power = debugfs("power").unwrap_or_default();
    let autosuspend = field(&power, "autosuspend_ms").unwrap_or(0);
    let cold = field(&power, "d3cold_threshold_mib").unwrap_or(0) > 0
        && dev.get_param(param::VRAM_SIZE).unwrap_or(0) > 0;
    if autosuspend == 0 {
        println!("bench: power: runtime suspend not measured (vgpu.ko autosuspend_ms=0)");
    } else {
        // A CPU-mapped VRAM buffer keeps a D3cold-capable driver in D3hot.
        let pin = if cold {
            Some(ctx.alloc_placed(4096, MemKind::HostVisible, Placement::Vram)?)
        } else {
            None
        };
        let mut v = Vec::new();
        for _ in 0..rounds {
            if !wait_suspended(dev, 1) {
                return Err("the device did not runtime-suspend to D3hot within 5 s".into());
            }
            v.push(once(&s)?);
        }
        drop(pin);
        let d3 = median(v);
        println!(
            "bench: power: resume from D3hot (runtime, VRAM kept), no-op submit->fence median {:.0} us over {rounds} suspensions, ratio awake/resumed {:.4}x",
            us(d3),
            us(awake) / us(d3)
        );
    }

    if autosuspend != 0 && cold {
        cold_benchmark(dev, &ctx, &s, rounds, awake)?;
    }

    // System suspend to RAM.
    let can_sleep = std::fs::read_to_string("/sys/power/state")
        .map(|t| t.split_whitespace().any(|w| w == "mem"))
        .unwrap_or(false);
    if !can_sleep {
        println!("bench: power: system suspend not measured (no mem in /sys/power/state)");
    } else {
        let (mut first, mut resume) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            std::fs::write("/sys/power/state", "mem")?;
            first.push(once(&s)?);
            if let Some(r) = debugfs("power").and_then(|p| field(&p, "last_system_resume_us")) {
                resume.push(Duration::from_micros(r));
            }
        }
        let first = median(first);
        let resume = if resume.is_empty() {
            Duration::ZERO
        } else {
            median(resume)
        };
        println!(
            "bench: power: system resume (S3, VRAM saved and restored) median {:.1} ms in the driver, then no-op submit->fence median {:.0} us over {rounds} cycles, ratio awake/first {:.4}x",
            resume.as_secs_f64() * 1e3,
            us(first),
            us(awake) / us(first)
        );
    }

    // The firmware, as the driver measured its last boot.
    if let Some(fw) = debugfs("firmware") {
        let boot = fw.lines().find(|l| l.starts_with("boot:")).unwrap_or("");
        if let (Some(device), Some(driver)) = (field(boot, "device"), field(boot, "running")) {
            println!(
                "bench: power: firmware boot {device} us in the device, driver load to running {driver} us; ratio echo/load {:.4}x",
                us(ping) / driver.max(1) as f64
            );
        }
    }
    Ok(())
}

/// Runtime D3cold with 16 MiB of GPU-only VRAM buffers to save and copy
/// back: the first no-op submit -> fence after each suspension, and the
/// driver's copy back alone.
fn cold_benchmark(
    dev: &Device,
    ctx: &Context,
    s: &Stream,
    rounds: usize,
    awake: Duration,
) -> Result<(), Box<dyn std::error::Error>> {
    const MIB: u64 = 16;
    let _vram = (0..4)
        .map(|_| ctx.alloc_placed(MIB << 18, MemKind::DeviceLocal, Placement::Vram))
        .collect::<Result<Vec<_>, _>>()?;
    let nop = [Packet::Nop { words: 1 }];
    let (mut first, mut restore) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        if !wait_suspended(dev, 2) {
            return Err("the device did not runtime-suspend to D3cold within 5 s".into());
        }
        let t = Instant::now();
        s.push_packets(ENGINE_COPY, &nop)?;
        s.synchronize()?;
        first.push(t.elapsed());
        let power = debugfs("power").unwrap_or_default();
        if field(&power, "last_restored_kib") == Some(MIB << 10) {
            if let Some(us) = field(&power, "last_restore_us") {
                restore.push(Duration::from_micros(us));
            }
        }
    }
    if restore.len() != rounds {
        return Err(format!(
            "{} of {rounds} resumes from D3cold copied {MIB} MiB back",
            restore.len()
        )
        .into());
    }
    let (first, restore) = (median(first), median(restore));
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!(
        "bench: power: resume from D3cold (runtime, {MIB} MiB of VRAM saved and copied back), no-op submit->fence median {:.0} us over {rounds} suspensions, copy back median {:.0} us, ratio awake/resumed {:.4}x",
        us(first),
        us(restore),
        us(awake) / us(first)
    );
    Ok(())
}
