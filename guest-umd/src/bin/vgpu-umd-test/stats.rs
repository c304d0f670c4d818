//! Section `stats`: `Device::stats` and the engine error in a lost
//! context's message.

use std::time::Duration;

use vgpu_hwif::packet::Packet;
use vgpu_umd::{Context, Device, Error, LostReason, MemKind, Stream, ENGINE_COPY};

use crate::report::T;

/// `Device::stats`: the stream's KMD context is listed with this process's
/// pid, memory follows an allocation, fences and counters follow work; an
/// engine error is named in the error message.
pub fn test_stats(t: &mut T) {
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
