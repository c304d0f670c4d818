//! Section `invalid`: invalid arguments and use after destroy.

use vgpu_umd::{Arg, Context, Error, MemKind, Module, Stream};

use crate::report::T;

pub fn test_invalid(t: &mut T, ctx: &Context) {
    let s = Stream::new(ctx).unwrap();
    let b = ctx.alloc(64, MemKind::DeviceLocal).unwrap();
    t.ok("invalid: destroy", s.destroy());
    t.err("invalid: use after destroy", s.memset(&b, 0, 0, 64), |e| {
        e.to_string().contains("destroyed")
    });
    t.err("invalid: destroy twice", s.destroy(), |e| {
        e.to_string().contains("already destroyed")
    });
    t.err(
        "invalid: push on bad engine",
        Stream::new(ctx).unwrap().push_packets(7, &[]),
        |e| matches!(e, Error::Invalid { .. }),
    );
    t.err(
        "invalid: module garbage",
        Module::load(ctx, b"not a module"),
        |e| e.to_string().contains("invalid module"),
    );
    t.err(
        "invalid: assembly error",
        Module::assemble(ctx, ".kernel k\n bogus r0\n.end\n"),
        |e| e.to_string().contains("invalid module"),
    );
    let m = Module::assemble(ctx, include_str!("../../../../isa/samples/saxpy.s")).unwrap();
    t.err("invalid: no such kernel", m.kernel("nope"), |e| {
        e.to_string().contains("no kernel named \"nope\"")
    });
    let k = m.kernel("saxpy").unwrap();
    let s = Stream::new(ctx).unwrap();
    t.err(
        "invalid: launch wrong arg count",
        s.launch(&k, [1, 1, 1], None, &[Arg::U32(1)]),
        |e| e.to_string().contains("1 arguments given, 4 expected"),
    );
    t.err(
        "invalid: launch wrong arg type",
        s.launch(
            &k,
            [1, 1, 1],
            None,
            &[Arg::F32(1.0), Arg::F32(1.0), Arg::Ptr(0), Arg::Ptr(0)],
        ),
        |e| e.to_string().contains("argument 0 (n) is u32, got f32"),
    );
    t.err(
        "invalid: launch zero grid",
        s.launch(
            &k,
            [0, 1, 1],
            None,
            &[Arg::U32(1), Arg::F32(1.0), Arg::Ptr(0), Arg::Ptr(0)],
        ),
        |e| e.to_string().contains("bad launch shape"),
    );
    t.err(
        "invalid: launch huge workgroup",
        s.launch(
            &k,
            [1, 1, 1],
            Some([1024, 2, 1]),
            &[Arg::U32(1), Arg::F32(1.0), Arg::Ptr(0), Arg::Ptr(0)],
        ),
        |e| e.to_string().contains("threads"),
    );
    t.check(
        "invalid: context still usable",
        ctx.status().is_none(),
        || format!("{:?}", ctx.status()),
    );
}
