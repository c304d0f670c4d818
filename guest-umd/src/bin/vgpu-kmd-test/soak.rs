//! The hang soak (`hang-soak`, run by `scripts/soak hangs`): many injected
//! hangs in one boot, each on a context of its own, with an innocent
//! context's work on the same engine around every one.
//!
//! The device hangs every `FILL` (copy engine) or every `DISPATCH`
//! (compute engine): `--inject hang:engine=copy,packet=FILL,count=0` or
//! `hang:engine=compute,packet=DISPATCH,count=0`. Each round a new context
//! submits one such packet while the innocent context submits a
//! `SEM_SIGNAL` of the round's number (and on the copy engine a `COPY`,
//! checked); the hung job must fail (`EIO`), its context be found guilty
//! with one hang, the innocent job complete with its value and bytes. A
//! round whose hung job is not failed within 30 s is a silent hang; a
//! device the ladder wedged ends the soak (what the ladder says). Counts,
//! per-round times and the driver's reset counters are printed; env
//! `VGPU_SOAK_ENGINE` (`copy`, `compute`) and `VGPU_SOAK_HANGS` (default
//! 100) choose the soak.

use std::path::Path;
use std::time::{Duration, Instant};

use vgpu_hwif::packet::{self, Packet};
use vgpu_umd::uapi;

use crate::debugfs::{debugfs, summary_field};
use crate::node::{copy, fence, fill, open, Cmds, Map, MS, PAGE};
use crate::report::{errname, errno, T};

/// One thread that exits at once (its `DISPATCH` hangs before it runs).
const NOTHING: &str = "\
.kernel nothing
.workgroup 1
    exit
.end
";

/// What the rounds found.
#[derive(Default)]
struct Tally {
    detected: u64,
    guilty: u64,
    innocent_ok: u64,
    silent: u64,
    other: Vec<String>,
    times: Vec<Duration>,
}

/// A driver counter from debugfs `contexts`' first line.
fn counter(name: &str) -> u64 {
    summary_field(&debugfs("contexts"), name)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

pub fn test_hang_soak(t: &mut T, path: &Path) {
    let compute = std::env::var("VGPU_SOAK_ENGINE").is_ok_and(|e| e == "compute");
    let rounds: u64 = std::env::var("VGPU_SOAK_HANGS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let engine = if compute {
        uapi::ENGINE_COMPUTE
    } else {
        uapi::ENGINE_COPY
    };
    let name = if compute { "compute" } else { "copy" };
    let n = open(path);
    let start = n.get_param(uapi::param::VA_START).unwrap_or(0);
    let rw = uapi::VM_BIND_READ | uapi::VM_BIND_WRITE;
    let cmds = Cmds::new(&n, start + 0x100_0000, 16).expect("command buffer");
    let (sva, dva, mva) = (start + 0x200_0000, start + 0x300_0000, start + 0x400_0000);
    let mut maps = Vec::new();
    for va in [sva, dva, mva] {
        let h = n.gem_create(PAGE, 0).expect("gem");
        n.vm_bind(h, va, PAGE, rw).expect("bind");
        maps.push(Map::new(&n, h, PAGE).expect("map"));
    }
    let module = match cmds.module(14 * 16, NOTHING) {
        Ok(m) => m,
        Err(e) => return t.check("soak: assemble the kernel", false, || e),
    };
    let Some(innocent) = t.ok(
        "soak: the innocent context",
        n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1 << engine, 0),
    ) else {
        return;
    };
    let (engine_resets, device_resets) = (counter("engine_resets"), counter("device_resets"));
    let mut tally = Tally::default();
    let begin = Instant::now();
    for round in 0..rounds {
        if !soak_round(
            &n,
            &cmds,
            &maps,
            (innocent, engine, round),
            &module,
            (sva, dva, mva),
            &mut tally,
        ) {
            break;
        }
        let done = round + 1;
        if done % 25 == 0 || done == rounds {
            let left = begin.elapsed().as_secs_f64() / done as f64 * (rounds - done) as f64;
            eprintln!(
                "soak: {name}: {done}/{rounds} hangs, {} detected, {} silent, ETA {left:.0} s",
                tally.detected, tally.silent
            );
        }
    }
    let wedged = counter("wedged") == 1;
    let resets = (
        counter("engine_resets") - engine_resets,
        counter("device_resets") - device_resets,
    );
    tally.times.sort();
    let median = tally
        .times
        .get(tally.times.len() / 2)
        .copied()
        .unwrap_or_default();
    let max = tally.times.last().copied().unwrap_or_default();
    println!(
        "soak-hangs: engine {name}: {rounds} injected, {} detected (EIO), {} guilty with one hang, {} innocent jobs intact, {} silent, wedged {}, engine resets {}, device resets {}, hang to EIO median {:.0} ms max {:.0} ms, {:.0} s",
        tally.detected,
        tally.guilty,
        tally.innocent_ok,
        tally.silent,
        u8::from(wedged),
        resets.0,
        resets.1,
        median.as_secs_f64() * 1e3,
        max.as_secs_f64() * 1e3,
        begin.elapsed().as_secs_f64()
    );
    t.check(
        "soak: every injected hang detected and its context found guilty, no silent hang",
        tally.detected == rounds && tally.guilty == rounds && tally.silent == 0,
        || tally.other.join("; "),
    );
    t.check(
        "soak: one engine reset per hang, none for the innocent context waiting behind it",
        resets == (tally.detected, 0),
        || {
            format!(
                "{} engine resets, {} device resets for {} hangs",
                resets.0, resets.1, tally.detected
            )
        },
    );
    t.check(
        "soak: every innocent job completed with its value and bytes",
        tally.innocent_ok == rounds,
        || tally.other.join("; "),
    );
    let _ = n.ctx_destroy(innocent);
}

/// One round (see the module documentation); false when the soak cannot
/// go on (the device wedged, or nothing answers).
fn soak_round(
    n: &vgpu_umd::kmd::Kmd,
    cmds: &Cmds,
    maps: &[Map],
    (innocent, engine, round): (u32, u32, u64),
    module: &crate::node::Module,
    (sva, dva, mva): (u64, u64, u64),
    tally: &mut Tally,
) -> bool {
    let compute = engine == uapi::ENGINE_COMPUTE;
    let Ok(g) = n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1 << engine, 0) else {
        tally.other.push(format!("round {round}: no context"));
        return false;
    };
    let slot = (round % 6) as usize;
    let hang = if compute {
        module.dispatch(mva, 0)
    } else {
        fill(mva, 64, round as u32)
    };
    let hung = cmds.program(slot, &[hang]);
    for i in 0..(PAGE / 8) as usize {
        maps[0].write(i, round << 32 | i as u64);
    }
    let signal = Packet::SemSignal {
        va: mva + 0x800,
        value: round + 1,
        op: packet::SEM_SIGNAL_WRITE,
    };
    let good = if compute {
        cmds.program(6 + slot, &[signal])
    } else {
        cmds.program(6 + slot, &[copy(sva, dva, PAGE), signal])
    };
    let t0 = Instant::now();
    let r = n.submit(g, engine, &[hung], &[]).and_then(|sg| {
        let si = n.submit(innocent, engine, &[good], &[])?;
        Ok((sg, si))
    });
    let Ok((sg, si)) = r else {
        tally.other.push(format!("round {round}: submit {r:?}"));
        let _ = n.ctx_destroy(g);
        return false;
    };
    let rg = n.wait(&[fence(g, engine, sg)], true, 30_000 * MS);
    match errno(&rg) {
        Some(libc::EIO) => {
            tally.detected += 1;
            tally.times.push(t0.elapsed());
        }
        Some(libc::ETIME) | Some(libc::ETIMEDOUT) => tally.silent += 1,
        e => tally.other.push(format!(
            "round {round}: hung job {}",
            e.map_or("ok", errname)
        )),
    }
    let q = n.ctx_query(g).unwrap_or_default();
    if q.reset_status == uapi::CTX_RESET_GUILTY && q.hangs == 1 {
        tally.guilty += 1;
    } else {
        tally
            .other
            .push(format!("round {round}: guilty context {q:?}"));
    }
    let ri = n.wait(&[fence(innocent, engine, si)], true, 30_000 * MS);
    let value = maps[2].read(0x800 / 8);
    let bytes =
        compute || (0..(PAGE / 8) as usize).all(|i| maps[1].read(i) == round << 32 | i as u64);
    if ri.is_ok() && value == round + 1 && bytes {
        tally.innocent_ok += 1;
    } else {
        tally.other.push(format!(
            "round {round}: innocent {}, value {value}, bytes {bytes}",
            errno(&ri).map_or("ok", errname)
        ));
    }
    let _ = n.ctx_destroy(g);
    tally.other.truncate(20);
    counter("wedged") != 1
}
