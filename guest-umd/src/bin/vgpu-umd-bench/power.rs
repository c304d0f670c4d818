//! `--power N`: what a low-power state costs the next submission, against
//! the same no-op submission on an awake device and the raw `PING` echo,
//! all in one run:
//!
//! * runtime `D3hot` (vgpu.ko `autosuspend_ms` set): the benchmark waits
//!   until the driver has suspended the device (`VGPU_PARAM_PM_STATE`,
//!   which does not wake it), then times a no-op submit -> fence, which
//!   pays for the resume (power-up, firmware boot, contexts created again);
//! * system suspend to RAM (`echo mem > /sys/power/state`, woken by the
//!   launcher): the driver's resume time (debugfs `power`,
//!   `last_system_resume_us`: power-on to VRAM restored) and the first
//!   no-op submit -> fence after the write returns;
//! * the firmware's load and boot (debugfs `firmware`, as measured by the
//!   driver at the last boot).

use std::time::{Duration, Instant};

use vgpu_hwif::packet::Packet;
use vgpu_umd::uapi::param;
use vgpu_umd::{Context, Device, Stream, ENGINE_COPY};

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

/// Waits until the driver has runtime-suspended the device (5 s at most).
fn wait_suspended(dev: &Device) -> bool {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(5) {
        if dev.get_param(param::PM_STATE).unwrap_or(0) == 1 {
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
    let autosuspend = debugfs("power")
        .and_then(|p| field(&p, "autosuspend_ms"))
        .unwrap_or(0);
    if autosuspend == 0 {
        println!("bench: power: runtime suspend not measured (vgpu.ko autosuspend_ms=0)");
    } else {
        let mut v = Vec::new();
        for _ in 0..rounds {
            if !wait_suspended(dev) {
                return Err("the device did not runtime-suspend within 5 s".into());
            }
            v.push(once(&s)?);
        }
        let d3 = median(v);
        println!(
            "bench: power: resume from D3hot (runtime, VRAM kept), no-op submit->fence median {:.0} us over {rounds} suspensions, ratio awake/resumed {:.4}x",
            us(d3),
            us(awake) / us(d3)
        );
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
