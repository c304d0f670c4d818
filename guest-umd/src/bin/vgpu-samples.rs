//! Sample programs of the UMD API, each verifying its own result.
//!
//!   vgpu-samples vecadd|saxpy|reduce|matmul|histogram|scan [n]
//!   vgpu-samples copy [bytes]      copies and memsets only (copy engine)
//!   vgpu-samples vram [percent]    oversubscribes VRAM (default 200 %) with VRAM-only
//!                                  buffers (older ones evicted), checks every byte;
//!                                  CPU and GPU through the aperture
//!   vgpu-samples vram-preferred [percent]  the same, VRAM-preferred (no eviction:
//!                                  what does not fit goes to system memory)
//!   vgpu-samples fault             a kernel storing out of bounds: page fault
//!   vgpu-samples hang              a kernel that never finishes: context reset
//!   vgpu-samples device-lost       the device goes away under the app
//!
//! Exit status: 0 verified (or, for failure modes, the expected error
//! seen); 1 wrong result or unexpected error.

use std::process::ExitCode;
use vgpu_umd::{
    Arg, Buffer, Context, Error, Event, LostReason, MemKind, Module, Placement, Stream,
};

type R<T> = Result<T, String>;

fn e(err: Error) -> String {
    err.to_string()
}

fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn u32s(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn to_f32(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn to_u32(b: &[u8]) -> Vec<u32> {
    b.chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

struct Gpu {
    ctx: Context,
    s: Stream,
}

impl Gpu {
    fn new() -> R<Gpu> {
        let ctx = Context::new().map_err(e)?;
        let s = Stream::new(&ctx).map_err(e)?;
        Ok(Gpu { ctx, s })
    }

    fn upload(&self, data: &[u8]) -> R<Buffer> {
        let b = self
            .ctx
            .alloc(data.len() as u64, MemKind::DeviceLocal)
            .map_err(e)?;
        self.s.write(&b, 0, data).map_err(e)?;
        Ok(b)
    }

    fn zeros(&self, len: u64) -> R<Buffer> {
        let b = self.ctx.alloc(len, MemKind::DeviceLocal).map_err(e)?;
        self.s.memset(&b, 0, 0, len).map_err(e)?;
        Ok(b)
    }

    fn download(&self, b: &Buffer) -> R<Vec<u8>> {
        let mut v = vec![0u8; b.size() as usize];
        self.s.read(b, 0, &mut v).map_err(e)?;
        Ok(v)
    }

    fn module(&self, src: &str) -> R<Module> {
        Module::assemble(&self.ctx, src).map_err(e)
    }
}

fn compare<T: PartialEq + std::fmt::Debug>(name: &str, got: &[T], want: &[T]) -> R<()> {
    let bad: Vec<usize> = (0..want.len()).filter(|&i| got[i] != want[i]).collect();
    if let Some(&i) = bad.first() {
        return Err(format!(
            "{name}: {} of {} wrong, first [{i}] = {:?}, want {:?}",
            bad.len(),
            want.len(),
            got[i],
            want[i]
        ));
    }
    println!("{name}: ok, {} values verified", want.len());
    Ok(())
}

fn vecadd(n: u32) -> R<()> {
    let g = Gpu::new()?;
    let k = g
        .module(include_str!("../../../isa/samples/vecadd.s"))?
        .kernel("vecadd")
        .map_err(e)?;
    let a: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let b: Vec<f32> = (0..n).map(|i| 0.5 * i as f32 + 1.0).collect();
    let (ba, bb, bc) = (
        g.upload(&f32s(&a))?,
        g.upload(&f32s(&b))?,
        g.zeros(4 * u64::from(n))?,
    );
    g.s.launch(
        &k,
        [n.div_ceil(256), 1, 1],
        None,
        &[Arg::U32(n), Arg::buf(&ba), Arg::buf(&bb), Arg::buf(&bc)],
    )
    .map_err(e)?;
    let want: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
    compare("vecadd", &to_f32(&g.download(&bc)?), &want)
}

fn saxpy(n: u32) -> R<()> {
    let g = Gpu::new()?;
    let k = g
        .module(include_str!("../../../isa/samples/saxpy.s"))?
        .kernel("saxpy")
        .map_err(e)?;
    let alpha = 2.5f32;
    let x: Vec<f32> = (0..n).map(|i| i as f32 * 0.25).collect();
    let y: Vec<f32> = (0..n).map(|i| 1000.0 - i as f32).collect();
    let (bx, by) = (g.upload(&f32s(&x))?, g.upload(&f32s(&y))?);
    g.s.launch(
        &k,
        [n.div_ceil(256), 1, 1],
        None,
        &[Arg::U32(n), Arg::F32(alpha), Arg::buf(&bx), Arg::buf(&by)],
    )
    .map_err(e)?;
    let want: Vec<f32> = x
        .iter()
        .zip(&y)
        .map(|(x, y)| alpha.mul_add(*x, *y))
        .collect();
    compare("saxpy", &to_f32(&g.download(&by)?), &want)
}

fn reduce(n: u32) -> R<()> {
    let g = Gpu::new()?;
    let k = g
        .module(include_str!("../../../isa/samples/reduce.s"))?
        .kernel("reduce")
        .map_err(e)?;
    let v: Vec<u32> = (0..n).map(|i| i.wrapping_mul(2_654_435_761) >> 8).collect();
    let groups = n.div_ceil(256);
    // The input buffer runs to the last workgroup's end; the elements past
    // n hold a canary, so that a kernel that reads past n (a bound off by
    // one) gets a wrong sum instead of zeros.
    let mut padded = v.clone();
    padded.resize(groups as usize * 256, 0x0bad_cafe);
    let (bi, bp) = (g.upload(&u32s(&padded))?, g.zeros(4 * u64::from(groups))?);
    g.s.launch(
        &k,
        [groups, 1, 1],
        None,
        &[Arg::U32(n), Arg::buf(&bi), Arg::buf(&bp)],
    )
    .map_err(e)?;
    let sum = to_u32(&g.download(&bp)?)
        .iter()
        .fold(0u32, |a, b| a.wrapping_add(*b));
    let want = v.iter().fold(0u32, |a, b| a.wrapping_add(*b));
    compare("reduce", &[sum], &[want])
}

fn matmul(n: u32) -> R<()> {
    let g = Gpu::new()?;
    let kern = g
        .module(include_str!("../../../isa/samples/matmul.s"))?
        .kernel("matmul")
        .map_err(e)?;
    let (m, nn, k) = (n, n + 3, n + 1);
    let a: Vec<f32> = (0..m * k).map(|i| (i % 7) as f32 - 3.0).collect();
    let b: Vec<f32> = (0..k * nn).map(|i| (i % 5) as f32 * 0.5).collect();
    let (ba, bb, bc) = (
        g.upload(&f32s(&a))?,
        g.upload(&f32s(&b))?,
        g.zeros(4 * u64::from(m * nn))?,
    );
    g.s.launch(
        &kern,
        [nn.div_ceil(16), m.div_ceil(16), 1],
        None,
        &[
            Arg::U32(m),
            Arg::U32(nn),
            Arg::U32(k),
            Arg::buf(&ba),
            Arg::buf(&bb),
            Arg::buf(&bc),
        ],
    )
    .map_err(e)?;
    let mut want = vec![0f32; (m * nn) as usize];
    for i in 0..m as usize {
        for j in 0..nn as usize {
            let mut acc = 0f32;
            for kk in 0..k as usize {
                acc = a[i * k as usize + kk].mul_add(b[kk * nn as usize + j], acc);
            }
            want[i * nn as usize + j] = acc;
        }
    }
    compare("matmul", &to_f32(&g.download(&bc)?), &want)
}

fn histogram(n: u32) -> R<()> {
    let g = Gpu::new()?;
    let k = g
        .module(include_str!("../../../isa/samples/histogram.s"))?
        .kernel("histogram")
        .map_err(e)?;
    let v: Vec<u32> = (0..n).map(|i| i.wrapping_mul(2_654_435_761) >> 3).collect();
    let (bd, bh) = (g.upload(&u32s(&v))?, g.zeros(256 * 4)?);
    g.s.launch(
        &k,
        [8, 1, 1],
        None,
        &[Arg::U32(n), Arg::buf(&bd), Arg::buf(&bh)],
    )
    .map_err(e)?;
    let mut want = vec![0u32; 256];
    for x in &v {
        want[(x & 255) as usize] += 1;
    }
    compare("histogram", &to_u32(&g.download(&bh)?), &want)
}

fn scan(n: u32) -> R<()> {
    let g = Gpu::new()?;
    let m = g.module(include_str!("../../../isa/samples/scan.s"))?;
    let (kb, ka) = (
        m.kernel("scan_blocks").map_err(e)?,
        m.kernel("add_offsets").map_err(e)?,
    );
    let n = n.min(256 * 256);
    let blocks = n.div_ceil(256);
    let v: Vec<u32> = (0..n).map(|i| i % 13 + 1).collect();
    let bi = g.upload(&u32s(&v))?;
    let (bo, bs, boff, scratch) = (
        g.zeros(4 * u64::from(n))?,
        g.zeros(4 * u64::from(blocks))?,
        g.zeros(4 * u64::from(blocks))?,
        g.zeros(4)?,
    );
    let s = &g.s;
    s.launch(
        &kb,
        [blocks, 1, 1],
        None,
        &[Arg::U32(n), Arg::buf(&bi), Arg::buf(&bo), Arg::buf(&bs)],
    )
    .map_err(e)?;
    s.launch(
        &kb,
        [1, 1, 1],
        None,
        &[
            Arg::U32(blocks),
            Arg::buf(&bs),
            Arg::buf(&boff),
            Arg::buf(&scratch),
        ],
    )
    .map_err(e)?;
    s.launch(
        &ka,
        [blocks, 1, 1],
        None,
        &[Arg::U32(n), Arg::buf(&bo), Arg::buf(&boff)],
    )
    .map_err(e)?;
    let mut want = vec![0u32; n as usize];
    for i in 1..n as usize {
        want[i] = want[i - 1].wrapping_add(v[i - 1]);
    }
    compare("scan", &to_u32(&g.download(&bo)?), &want)
}

fn copy(bytes: u32) -> R<()> {
    let g = Gpu::new()?;
    let n = u64::from(bytes);
    let data: Vec<u8> = (0..bytes)
        .map(|i| (i.wrapping_mul(31) >> 3) as u8)
        .collect();
    let (t0, t1) = (
        Event::new(&g.ctx).map_err(e)?,
        Event::new(&g.ctx).map_err(e)?,
    );
    let a = g.upload(&data)?;
    let b = g.ctx.alloc(n, MemKind::DeviceLocal).map_err(e)?;
    g.s.record(&t0).map_err(e)?;
    g.s.copy(&b, 0, &a, 0, n).map_err(e)?;
    g.s.record(&t1).map_err(e)?;
    let back = g.download(&b)?;
    let dt = t1.elapsed_since(&t0).map_err(e)?;
    println!(
        "copy: {bytes} bytes device to device in {} us of device time",
        dt.as_micros()
    );
    compare("copy", &back, &data)
}

/// The word of buffer `i` in [`vram`].
fn vram_word(i: u64) -> u32 {
    (i as u32).wrapping_mul(0x9e37_79b9) ^ 0x00a5_5a00
}

/// Oversubscribes VRAM: `percent` % of it in 4 MiB buffers placed as
/// `placement` says (VRAM only: the KMD evicts older buffers to system
/// memory to make room; VRAM-preferred: those past what VRAM holds go to
/// system memory), each filled on the copy engine with its own word in its
/// first half and copied by the copy engine over its second half, then
/// every byte of every buffer checked. Then, with a CPU-visible part, a
/// buffer in visible VRAM written by the CPU through the aperture and read
/// by the GPU, and the other way round.
fn vram(percent: u32, placement: Placement) -> R<()> {
    const CHUNK: u64 = 4 << 20;
    let g = Gpu::new()?;
    let (size, visible) = (g.ctx.identity().vram_size, g.ctx.identity().vram_visible);
    // A device without VRAM: the same run over 64 MiB, all system memory.
    let placement = if size == 0 {
        Placement::VramPreferred
    } else {
        placement
    };
    let total = size.max(64 << 20) * u64::from(percent) / 100;
    let n = (total / CHUNK).max(1);
    println!(
        "vram: {n} buffers of {} MiB ({} MiB, {percent} % of {} MiB of VRAM), {placement:?}",
        CHUNK >> 20,
        (n * CHUNK) >> 20,
        size >> 20
    );
    let mut bufs = Vec::new();
    for i in 0..n {
        let b = g
            .ctx
            .alloc_placed(CHUNK, MemKind::DeviceLocal, placement)
            .map_err(|err| format!("buffer {i}: {err}"))?;
        g.s.memset32(&b, 0, vram_word(i), CHUNK / 2).map_err(e)?;
        g.s.copy(&b, CHUNK / 2, &b, 0, CHUNK / 2).map_err(e)?;
        bufs.push(b);
    }
    g.s.synchronize().map_err(e)?;
    let mut back = vec![0u8; CHUNK as usize];
    for (i, b) in bufs.iter().enumerate() {
        g.s.read(b, 0, &mut back).map_err(e)?;
        let want = vram_word(i as u64);
        if let Some(at) = to_u32(&back).iter().position(|&w| w != want) {
            return Err(format!(
                "vram: buffer {i} word {at}: {:#x}, want {want:#x}",
                to_u32(&back)[at]
            ));
        }
    }
    println!("vram: every byte of {} MiB verified", (n * CHUNK) >> 20);
    drop(bufs);
    if visible == 0 {
        println!("vram: no CPU-visible VRAM");
        return Ok(());
    }
    let len = 1u64 << 20;
    let data: Vec<u8> = (0..len as u32)
        .map(|i| (i.wrapping_mul(131) >> 5) as u8)
        .collect();
    let ap = g
        .ctx
        .alloc_placed(len, MemKind::HostVisible, Placement::Vram)
        .map_err(e)?;
    ap.write(0, &data).map_err(e)?;
    let sys = g.ctx.alloc(len, MemKind::DeviceLocal).map_err(e)?;
    g.s.copy(&sys, 0, &ap, 0, len).map_err(e)?;
    compare(
        "vram: CPU writes through the aperture, read by the GPU",
        &g.download(&sys)?,
        &data,
    )?;
    g.s.memset32(&ap, 0, 0xfeed_f00d, len).map_err(e)?;
    g.s.synchronize().map_err(e)?;
    let mut cpu = vec![0u8; len as usize];
    ap.read(0, &mut cpu).map_err(e)?;
    compare(
        "vram: GPU writes read by the CPU through the aperture",
        &to_u32(&cpu),
        &vec![0xfeed_f00d; (len / 4) as usize],
    )?;
    println!(
        "vram: {} KiB through the aperture both ways verified",
        len >> 10
    );
    Ok(())
}

fn fault() -> R<()> {
    let g = Gpu::new()?;
    // isa/samples/oob_store.s: out[i] = i with no bounds check. 64 Ki
    // threads write 256 KiB past a 4 KiB buffer until they leave the mapped
    // range.
    let k = g
        .module(include_str!("../../../isa/samples/oob_store.s"))?
        .kernel("oob_store")
        .map_err(e)?;
    let out = g.ctx.alloc(4096, MemKind::DeviceLocal).map_err(e)?;
    g.s.launch(&k, [1024, 1, 1], None, &[Arg::buf(&out)])
        .map_err(e)?;
    match g.s.synchronize() {
        Err(
            err @ Error::Lost {
                reason: LostReason::PageFault { va, .. },
                ..
            },
        ) if va > out.va() => {
            println!("fault: the application sees: {err}");
            let later = g.ctx.alloc(64, MemKind::DeviceLocal).map(|_| ()).map_err(e);
            println!(
                "fault: and every later call: {}",
                later.err().unwrap_or_default()
            );
            Ok(())
        }
        other => Err(format!(
            "fault: expected a page fault above {:#x}, got {other:?}",
            out.va()
        )),
    }
}

fn hang() -> R<()> {
    let g = Gpu::new()?;
    // isa/samples/spin.s: an infinite loop; the KMD's hang check resets it.
    let k = g
        .module(include_str!("../../../isa/samples/spin.s"))?
        .kernel("spin")
        .map_err(e)?;
    g.s.launch(&k, [1, 1, 1], None, &[]).map_err(e)?;
    match g.s.synchronize() {
        Err(
            err @ Error::Lost {
                reason: LostReason::Hang { .. },
                ..
            },
        ) => {
            println!("hang: the application sees: {err}");
            let later = Stream::new(&g.ctx).map(|_| ()).map_err(e);
            println!(
                "hang: and every later call: {}",
                later.err().unwrap_or_default()
            );
            Ok(())
        }
        other => Err(format!("hang: expected a hang reset, got {other:?}")),
    }
}

fn device_lost() -> R<()> {
    let g = Gpu::new()?;
    let dev =
        std::fs::read_link("/sys/class/drm/renderD128/device").map_err(|err| err.to_string())?;
    let pci = dev
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or("no PCI name")?
        .to_owned();
    let b = g.ctx.alloc(4096, MemKind::DeviceLocal).map_err(e)?;
    g.s.memset(&b, 0, 1, 4096).map_err(e)?;
    g.s.synchronize().map_err(e)?;
    println!("device-lost: unbinding {pci} from the driver");
    std::fs::write("/sys/bus/pci/drivers/vgpu/unbind", &pci).map_err(|err| err.to_string())?;
    let r = g.s.memset(&b, 0, 2, 4096).and_then(|()| g.s.synchronize());
    let rebind = std::fs::write("/sys/bus/pci/drivers/vgpu/bind", &pci);
    match r {
        Err(
            err @ Error::Lost {
                reason: LostReason::Removed,
                ..
            },
        ) => {
            println!("device-lost: the application sees: {err}");
            let later = g.ctx.alloc(64, MemKind::DeviceLocal).map(|_| ()).map_err(e);
            println!(
                "device-lost: and every later call: {}",
                later.err().unwrap_or_default()
            );
            rebind.map_err(|err| format!("rebind: {err}"))?;
            println!(
                "device-lost: rebound; a new context works: {}",
                Gpu::new().is_ok()
            );
            Ok(())
        }
        other => Err(format!(
            "device-lost: expected the device removed, got {other:?}"
        )),
    }
}

fn main() -> ExitCode {
    vgpu_umd::exit_quietly_on_closed_pipe();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n = |d: u32| args.get(1).and_then(|s| s.parse().ok()).unwrap_or(d);
    let r = match args.first().map(String::as_str) {
        Some("vecadd") => vecadd(n(10_000)),
        Some("saxpy") => saxpy(n(10_000)),
        Some("reduce") => reduce(n(10_000)),
        Some("matmul") => matmul(n(40)),
        Some("histogram") => histogram(n(20_000)),
        Some("scan") => scan(n(10_000)),
        Some("copy") => copy(n(1 << 20)),
        Some("vram") => vram(n(200), Placement::Vram),
        Some("vram-preferred") => vram(n(200), Placement::VramPreferred),
        Some("fault") => fault(),
        Some("hang") => hang(),
        Some("device-lost") => device_lost(),
        _ => {
            eprintln!("usage: vgpu-samples vecadd|saxpy|reduce|matmul|histogram|scan|copy|vram|vram-preferred [n] | fault | hang | device-lost");
            return ExitCode::from(2);
        }
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            println!("FAIL {msg}");
            ExitCode::from(1)
        }
    }
}
