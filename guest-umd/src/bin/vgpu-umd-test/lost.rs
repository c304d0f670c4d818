//! Sections `fault` and `hang`: a context lost to a page fault or a hang,
//! sticky, other contexts unaffected.

use std::sync::atomic::Ordering;

use vgpu_hwif::packet::{self, Packet};
use vgpu_umd::{Context, Error, LostReason, MemKind, Stream, ENGINE_COPY};

use crate::host_u64;
use crate::report::T;

pub fn test_fault(t: &mut T) {
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

pub fn test_hang(t: &mut T) {
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
