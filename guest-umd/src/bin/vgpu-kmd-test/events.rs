//! Fence interrupts that go wrong, injected by the device: dropped,
//! duplicated, early and skipped fence events, a refused doorbell.

use std::path::Path;

use vgpu_umd::uapi;

use crate::debugfs::{debugfs, summary_field};
use crate::node::{fence, fill, open, scratch, Map, Scratch, MS, PAGE};
use crate::report::T;

/// Fence interrupts that go wrong, injected by the device (run with
/// `--inject fence-event-drop:after=1,count=1 --inject
/// event-duplicate:after=1,count=1 --inject event-spurious:after=3,count=1
/// --inject control-busy:packet=DOORBELL,after=4,count=1 --inject
/// fence-never:after=5,count=1`;
/// duplicates count only FENCE packets that post an event, so each class
/// hits its own job):
/// the KMD trusts the fence value in memory, reports a lost interrupt while
/// the ring lives on, does not believe or double-count the others, and
/// rings a refused doorbell again.
pub fn test_injected_events(t: &mut T, path: &Path) {
    let n = open(path);
    let Scratch {
        cmds,
        data: hd,
        dva,
        ..
    } = scratch(&n, 0x300_0000, 1);
    let c = n.ctx_create(uapi::CTX_PRIORITY_NORMAL, 1, 0).unwrap_or(0);
    let counter = |name: &str| {
        summary_field(&debugfs("contexts"), name)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(u64::MAX)
    };
    let job = |i: usize| {
        let cmd = cmds.program(i, &[fill(dva + 64 * i as u64, 8, i as u32)]);
        n.submit(c, 0, &[cmd], &[])
    };
    // 1: the interrupt is dropped. WAIT still completes (the value is in
    // memory); with the ring alive the watchdog reports the lost interrupt.
    let s1 = job(1).unwrap_or(0);
    let t0 = std::time::Instant::now();
    t.ok(
        "events: fence with a dropped interrupt completes",
        n.wait(&[fence(c, 0, s1)], true, 5_000 * MS),
    );
    println!(
        "info events: dropped-interrupt fence waited {:?}",
        t0.elapsed()
    );
    let mut missed = 0;
    while t0.elapsed() < std::time::Duration::from_secs(5) {
        missed = counter("missed_fence_events");
        if missed == 1 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    println!(
        "info events: lost interrupt reported after {:?}",
        t0.elapsed()
    );
    t.check("events: lost interrupt reported", missed == 1, || {
        debugfs("contexts")
    });
    // 2: the event comes twice: counted once, noted as a duplicate.
    let signalled = counter("fences_signalled");
    let s2 = job(2).unwrap_or(0);
    t.ok(
        "events: duplicated event's fence completes",
        n.wait(&[fence(c, 0, s2)], true, 5_000 * MS),
    );
    std::thread::sleep(std::time::Duration::from_millis(100));
    t.check(
        "events: duplicate not counted twice",
        counter("duplicate_fence_events") == 1 && counter("fences_signalled") == signalled + 1,
        || debugfs("contexts"),
    );
    // 3: an event before the value is written: never believed ahead of
    // memory (seen as early, or as a duplicate once the value landed).
    let s3 = job(3).unwrap_or(0);
    t.ok(
        "events: early event's fence completes",
        n.wait(&[fence(c, 0, s3)], true, 5_000 * MS),
    );
    std::thread::sleep(std::time::Duration::from_millis(100));
    let odd = counter("early_fence_events") + counter("duplicate_fence_events");
    t.check("events: early event not believed twice", odd == 2, || {
        debugfs("contexts")
    });
    // 4: the device answers the (posted) doorbell BUSY: SUBMIT already
    // returned; the hang check rings it again and the job runs.
    let again = counter("doorbells_rung_again");
    let t4 = std::time::Instant::now();
    let s4 = job(4);
    t.check(
        "events: submit with a refused doorbell succeeds",
        s4.is_ok(),
        || format!("{s4:?}"),
    );
    t.ok(
        "events: job behind a refused doorbell completes",
        n.wait(&[fence(c, 0, s4.unwrap_or(0))], true, 10_000 * MS),
    );
    println!(
        "info events: refused doorbell's job completed after {:?}",
        t4.elapsed()
    );
    t.check(
        "events: refused doorbell rung again once",
        counter("doorbells_rung_again") == again + 1,
        || debugfs("contexts"),
    );
    // 5 and 6: job 5's fence is never written; job 6's event jumps over
    // it: reported as skipped, and job 5 counts as complete (the later
    // fence value covers it).
    let skipped = counter("skipped_fence_events");
    let s5 = job(5).unwrap_or(0);
    let s6 = job(6).unwrap_or(0);
    t.ok(
        "events: both jobs complete",
        n.wait(&[fence(c, 0, s5), fence(c, 0, s6)], true, 5_000 * MS),
    );
    std::thread::sleep(std::time::Duration::from_millis(100));
    t.check(
        "events: the unannounced fence is reported as skipped",
        counter("skipped_fence_events") == skipped + 1,
        || debugfs("contexts"),
    );
    // The data of every job landed.
    let m = Map::new(&n, hd, PAGE).expect("mmap");
    let ok = (1..=6u64).all(|i| m.read(8 * i as usize) == i | (i << 32));
    t.check("events: every job's data landed", ok, || {
        format!(
            "{:#x} {:#x} {:#x} {:#x}",
            m.read(8),
            m.read(16),
            m.read(24),
            m.read(32)
        )
    });
    t.check("events: no hang", counter("hangs") == 0, || {
        debugfs("contexts")
    });
}
