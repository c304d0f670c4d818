//! Temporary probe: CPU copy speeds from BOs in different states.
use std::time::Instant;
use vgpu_umd::{Config, Context, Device, MemKind, ReadPath, Stream};
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dev = Device::open_first()?;
    let ctx = Context::with_config(
        &dev,
        Config {
            read: ReadPath::Direct,
            ..Config::from_env()?
        },
    )?;
    let s = Stream::new(&ctx)?;
    let n = 16usize << 20;
    let src = vec![0x5au8; n];
    let mut dst = vec![0u8; n];
    dst.copy_from_slice(&src);
    let mbs = |t: Instant| n as f64 / t.elapsed().as_secs_f64() / 1048576.0;
    for i in 0..3 {
        let t = Instant::now();
        dst.copy_from_slice(std::hint::black_box(&src));
        println!("memcpy anon->anon #{i}: {:.0} MiB/s", mbs(t));
    }
    let a = ctx.alloc(n as u64, MemKind::DeviceLocal)?;
    s.write(&a, 0, &src)?;
    s.synchronize()?;
    for i in 0..3 {
        let t = Instant::now();
        s.read(&a, 0, &mut dst)?;
        println!("direct read of device-written BO #{i}: {:.0} MiB/s", mbs(t));
    }
    let p = a.host_ptr().ok();
    println!("host ptr {:?}", p.is_some());
    let b = ctx.alloc(n as u64, MemKind::HostVisible)?;
    let bp = b.host_ptr()?;
    unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), bp, n) };
    for i in 0..3 {
        let t = Instant::now();
        unsafe { std::ptr::copy_nonoverlapping(bp, dst.as_mut_ptr(), n) };
        println!("CPU-written BO -> anon #{i}: {:.0} MiB/s", mbs(t));
    }
    for i in 0..3 {
        let t = Instant::now();
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), bp, n) };
        println!("anon -> BO #{i}: {:.0} MiB/s", mbs(t));
    }
    s.write(&b, 0, &src)?;
    s.synchronize()?;
    for i in 0..2 {
        let t = Instant::now();
        unsafe { std::ptr::copy_nonoverlapping(bp, dst.as_mut_ptr(), n) };
        println!(
            "device-rewritten mapped BO -> anon #{i}: {:.0} MiB/s",
            mbs(t)
        );
    }
    // chunks of 1 MiB
    let t = Instant::now();
    for c in 0..16 {
        unsafe {
            std::ptr::copy_nonoverlapping(bp.add(c << 20), dst.as_mut_ptr().add(c << 20), 1 << 20)
        };
    }
    println!("BO -> anon in 1 MiB chunks: {:.0} MiB/s", mbs(t));
    let mut small = vec![0u8; 4 << 20];
    for i in 0..3 {
        let t = Instant::now();
        for c in 0..4 {
            unsafe { std::ptr::copy_nonoverlapping(bp.add(c << 22), small.as_mut_ptr(), 4 << 20) };
        }
        println!("BO -> 4 MiB anon reused #{i}: {:.0} MiB/s", mbs(t));
    }
    for i in 0..3 {
        let t = Instant::now();
        for c in 0..4 {
            small.copy_from_slice(&src[c << 22..(c + 1) << 22]);
        }
        println!("anon -> 4 MiB anon reused #{i}: {:.0} MiB/s", mbs(t));
    }
    Ok(())
}
