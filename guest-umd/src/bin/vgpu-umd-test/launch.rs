//! Section `launch`: kernels launched through the API (when the device
//! runs DISPATCH).

use vgpu_umd::{Arg, Context, MemKind, Module, Stream};

use crate::report::T;

/// saxpy through the API, verified against the CPU; then a kernel that
/// traps the launch arguments it was given.
pub fn test_launch(t: &mut T) {
    let ctx = Context::new().unwrap();
    let Some(m) = t.ok(
        "launch: assemble+load saxpy",
        Module::assemble(&ctx, include_str!("../../../../isa/samples/saxpy.s")),
    ) else {
        return;
    };
    let k = m.kernel("saxpy").unwrap();
    let s = Stream::new(&ctx).unwrap();
    let n = 1000u32;
    let x: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
    let y: Vec<f32> = (0..n).map(|i| 1000.0 - i as f32).collect();
    let bytes = |v: &[f32]| v.iter().flat_map(|f| f.to_le_bytes()).collect::<Vec<u8>>();
    let bx = ctx.alloc(4 * u64::from(n), MemKind::DeviceLocal).unwrap();
    let by = ctx.alloc(4 * u64::from(n), MemKind::DeviceLocal).unwrap();
    s.write(&bx, 0, &bytes(&x)).unwrap();
    s.write(&by, 0, &bytes(&y)).unwrap();
    t.ok(
        "launch: enqueue saxpy",
        s.launch(
            &k,
            [n.div_ceil(256), 1, 1],
            None,
            &[Arg::U32(n), Arg::F32(2.0), Arg::buf(&bx), Arg::buf(&by)],
        ),
    );
    let mut out = vec![0u8; 4 * n as usize];
    match s.read(&by, 0, &mut out) {
        Ok(()) => {
            let ok = (0..n as usize).all(|i| {
                let got = f32::from_le_bytes(out[4 * i..4 * i + 4].try_into().unwrap());
                got == 2.0f32.mul_add(x[i], y[i])
            });
            t.check("launch: saxpy result", ok, String::new);
        }
        Err(e) => {
            t.check("launch: saxpy", false, || e.to_string());
        }
    }
    // Kernels without arguments, and several launches batched in one stream.
    let m = Module::assemble(
        &ctx,
        ".kernel fill7\n.arg out ptr\n.workgroup 64\n    s2r r0, %gid.x\n    mov r1, 4\n    ldarg d2, [out]\n    mad.wide.u32 d2, r0, r1, d2\n    mov r6, 7\n    st.32 [d2], r6\n    exit\n.end\n",
    );
    if let Some(m) = t.ok("launch: assemble a second module", m) {
        let k = m.kernel("fill7").unwrap();
        let b = ctx.alloc(4 * 640, MemKind::HostVisible).unwrap();
        for i in 0..10u64 {
            let sub = ctx.alloc(4 * 64, MemKind::DeviceLocal).unwrap();
            s.launch(&k, [1, 1, 1], None, &[Arg::buf(&sub)]).unwrap();
            s.copy(&b, 4 * 64 * i, &sub, 0, 4 * 64).unwrap();
        }
        t.ok(
            "launch: ten launches interleaved with copies",
            s.synchronize(),
        );
        let mut v = vec![0u8; 4 * 640];
        b.read(0, &mut v).unwrap();
        t.check(
            "launch: every launch ran before its copy",
            v.chunks(4).all(|c| c == 7u32.to_le_bytes()),
            String::new,
        );
    }
}
