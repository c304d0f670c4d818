//! Compute modules (`vgpu-as` output), kernel lookup, argument packing and
//! launches (`DISPATCH` on the compute engine).

use std::fmt;
use std::sync::Arc;

use vgpu_hwif::packet::{self, DispatchPacket, Packet};
use vgpu_isa::module::{ArgKind, Kernel as KernelInfo, Module as IsaModule};

use crate::context::{Buffer, Context, CtxInner};
pub use crate::error::LaunchError;
use crate::error::{Error, Result};
use crate::memory::Block;
use crate::stream::Stream;

/// A typed kernel argument.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Arg {
    /// `u32`.
    U32(u32),
    /// `i32`.
    I32(i32),
    /// `f32`.
    F32(f32),
    /// `u64`.
    U64(u64),
    /// A GPU address (`ptr`).
    Ptr(u64),
}

impl Arg {
    /// The address of `b` as a `ptr` argument.
    pub fn buf(b: &Buffer) -> Arg {
        Arg::Ptr(b.va())
    }

    fn kind(&self) -> ArgKind {
        match self {
            Arg::U32(_) => ArgKind::U32,
            Arg::I32(_) => ArgKind::I32,
            Arg::F32(_) => ArgKind::F32,
            Arg::U64(_) => ArgKind::U64,
            Arg::Ptr(_) => ArgKind::Ptr,
        }
    }

    fn bytes(&self) -> Vec<u8> {
        match *self {
            Arg::U32(v) => v.to_le_bytes().to_vec(),
            Arg::I32(v) => v.to_le_bytes().to_vec(),
            Arg::F32(v) => v.to_le_bytes().to_vec(),
            Arg::U64(v) | Arg::Ptr(v) => v.to_le_bytes().to_vec(),
        }
    }

    /// Parses `text` as the kind `kind` (`u32`, `i32`, `f32`, `u64`, `ptr`).
    pub fn parse(kind: &str, text: &str) -> Option<Arg> {
        let int = |t: &str| -> Option<u64> {
            t.strip_prefix("0x")
                .map_or_else(|| t.parse().ok(), |h| u64::from_str_radix(h, 16).ok())
        };
        Some(match kind {
            "u32" => Arg::U32(u32::try_from(int(text)?).ok()?),
            "i32" => Arg::I32(text.parse().ok()?),
            "f32" => Arg::F32(text.parse().ok()?),
            "u64" => Arg::U64(int(text)?),
            "ptr" => Arg::Ptr(int(text)?),
            _ => return None,
        })
    }
}

/// Packs `args` into the argument buffer of `k` per its layout: every
/// argument at its declared offset, types checked.
pub fn pack_args(k: &KernelInfo, args: &[Arg]) -> std::result::Result<Vec<u8>, LaunchError> {
    // LAB(7) BEGIN pack-args
    if args.len() != k.args.len() {
        return Err(LaunchError::ArgCount {
            kernel: k.name.clone(),
            given: args.len(),
            expected: k.args.len(),
        });
    }
    let mut out = vec![0u8; k.arg_size as usize];
    for (i, (a, info)) in args.iter().zip(&k.args).enumerate() {
        // A u64 may stand for a pointer (an address computed by the caller).
        let ok = a.kind() == info.kind || (info.kind == ArgKind::Ptr && a.kind() == ArgKind::U64);
        if !ok {
            return Err(LaunchError::ArgType {
                kernel: k.name.clone(),
                index: i,
                name: info.name.clone(),
                expected: info.kind.name(),
                given: a.kind().name(),
            });
        }
        let b = a.bytes();
        let o = info.offset as usize;
        out[o..o + b.len()].copy_from_slice(&b);
    }
    Ok(out)
    // LAB(7) END pack-args
}

/// Checks a grid and workgroup shape.
pub fn check_shape(
    grid: [u32; 3],
    wg: [u32; 3],
    shared: u32,
) -> std::result::Result<(), LaunchError> {
    if grid.contains(&0) || wg.contains(&0) {
        return Err(LaunchError::Shape(format!(
            "grid {grid:?} and workgroup {wg:?} must be >= 1"
        )));
    }
    let threads = u64::from(wg[0]) * u64::from(wg[1]) * u64::from(wg[2]);
    if threads > u64::from(packet::MAX_WORKGROUP_THREADS) {
        return Err(LaunchError::Shape(format!(
            "workgroup {wg:?} has {threads} threads (at most {})",
            packet::MAX_WORKGROUP_THREADS
        )));
    }
    if shared > packet::MAX_SHARED_SIZE {
        return Err(LaunchError::Shape(format!(
            "shared memory {shared} > {}",
            packet::MAX_SHARED_SIZE
        )));
    }
    Ok(())
}

struct ModuleInner {
    ctx: Arc<CtxInner>,
    image: Option<Block>,
    size: u32,
    isa: IsaModule,
}

impl Drop for ModuleInner {
    fn drop(&mut self) {
        let Some(b) = self.image.take() else { return };
        match self.ctx.quiesce_fences("Module::drop") {
            Ok(f) => self.ctx.code_pool.lock().unwrap().free(b, f),
            Err(_) => self.ctx.retired.lock().unwrap().push(b),
        }
    }
}

/// A module loaded into GPU memory (read + execute).
#[derive(Clone)]
pub struct Module {
    m: Arc<ModuleInner>,
}

impl fmt::Debug for Module {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Module")
            .field("kernels", &self.m.isa.kernels().len())
            .finish()
    }
}

/// A kernel of a loaded module.
#[derive(Clone)]
pub struct Kernel {
    module: Module,
    index: u32,
}

impl fmt::Debug for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Kernel")
            .field("name", &self.info().name)
            .finish()
    }
}

impl Module {
    /// Loads a module image (the bytes `vgpu-as` writes).
    pub fn load(ctx: &Context, image: &[u8]) -> Result<Module> {
        let call = "Module::load";
        ctx.inner.check(call)?;
        let gen = ctx.identity().generation;
        let isa = IsaModule::load(image, gen).map_err(|e| Error::Launch {
            call,
            source: LaunchError::BadModule(e.to_string()),
        })?;
        if image.len() as u64 > u64::from(packet::MAX_MODULE_SIZE) {
            return Err(Error::Launch {
                call,
                source: LaunchError::BadModule(format!(
                    "{} bytes > {}",
                    image.len(),
                    packet::MAX_MODULE_SIZE
                )),
            });
        }
        let b = ctx
            .inner
            .code_pool
            .lock()
            .unwrap()
            .alloc(image.len() as u64)
            .map_err(|source| Error::Mem { call, source })?;
        b.bo.write(b.offset, image);
        Ok(Module {
            m: Arc::new(ModuleInner {
                ctx: ctx.inner.clone(),
                image: Some(b),
                size: image.len() as u32,
                isa,
            }),
        })
    }

    /// Assembles `source` (vgpu assembly) for the device and loads it.
    pub fn assemble(ctx: &Context, source: &str) -> Result<Module> {
        let call = "Module::assemble";
        let gen = ctx.identity().generation;
        let m = vgpu_isa::asm::assemble(source, gen).map_err(|e| Error::Launch {
            call,
            source: LaunchError::BadModule(e.to_string()),
        })?;
        let bytes = m.to_bytes().map_err(|e| Error::Launch {
            call,
            source: LaunchError::BadModule(e.to_string()),
        })?;
        Module::load(ctx, &bytes)
    }

    /// Kernel names.
    pub fn kernel_names(&self) -> Vec<String> {
        self.m
            .isa
            .kernels()
            .iter()
            .map(|k| k.name.clone())
            .collect()
    }

    /// Looks a kernel up by name.
    pub fn kernel(&self, name: &str) -> Result<Kernel> {
        let index = self.m.isa.kernel_index(name).ok_or_else(|| Error::Launch {
            call: "Module::kernel",
            source: LaunchError::NoKernel(name.into()),
        })?;
        Ok(Kernel {
            module: self.clone(),
            index: index as u32,
        })
    }

    /// GPU VA of the image.
    pub fn va(&self) -> u64 {
        self.m.image.as_ref().map_or(0, Block::va)
    }
}

impl Kernel {
    /// Metadata: name, argument layout, workgroup hint.
    pub fn info(&self) -> &KernelInfo {
        &self.module.m.isa.kernels()[self.index as usize]
    }

    /// The `DISPATCH` packet for a launch whose arguments are at `args_va`.
    pub fn dispatch_packet(
        &self,
        args_va: u64,
        args_size: u32,
        grid: [u32; 3],
        wg: [u32; 3],
        shared: u32,
    ) -> Packet {
        Packet::Dispatch(DispatchPacket {
            module_va: self.module.va(),
            module_size: self.module.m.size,
            kernel: self.index,
            args_va,
            args_size,
            grid,
            wg,
            shared_size: shared,
        })
    }
}

impl Stream {
    /// Launches `k` over `grid` workgroups of `wg` threads (the kernel's
    /// `.workgroup` hint when `None`) with `args` (asynchronous).
    pub fn launch(
        &self,
        k: &Kernel,
        grid: [u32; 3],
        wg: Option<[u32; 3]>,
        args: &[Arg],
    ) -> Result<()> {
        self.launch_shared(k, grid, wg, 0, args)
    }

    /// [`Stream::launch`] with a minimum shared-memory size per workgroup.
    pub fn launch_shared(
        &self,
        k: &Kernel,
        grid: [u32; 3],
        wg: Option<[u32; 3]>,
        shared: u32,
        args: &[Arg],
    ) -> Result<()> {
        let call = "Stream::launch";
        if !Arc::ptr_eq(&k.module.m.ctx, &self.s_ctx()) {
            return Err(Error::Invalid {
                call,
                what: "kernel belongs to another context".into(),
            });
        }
        let info = k.info();
        let wg = wg.unwrap_or(if info.wg_hint.contains(&0) {
            [64, 1, 1]
        } else {
            info.wg_hint
        });
        check_shape(grid, wg, shared).map_err(|source| Error::Launch { call, source })?;
        let bytes = pack_args(info, args).map_err(|source| Error::Launch { call, source })?;
        let ctx = self.s_ctx();
        let block = if bytes.is_empty() {
            None
        } else {
            let b = ctx
                .pool
                .lock()
                .unwrap()
                .alloc(bytes.len() as u64)
                .map_err(|source| Error::Mem { call, source })?;
            b.bo.write(b.offset, &bytes);
            Some(b)
        };
        let args_va = block.as_ref().map_or(0, Block::va);
        let p = k.dispatch_packet(args_va, bytes.len() as u32, grid, wg, shared);
        self.push_dispatch(call, p, block)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAXPY: &str = include_str!("../../isa/samples/saxpy.s");

    fn saxpy() -> KernelInfo {
        let m = vgpu_isa::asm::assemble(SAXPY, 2).unwrap();
        m.kernel("saxpy").unwrap().clone()
    }

    #[test]
    fn packs_saxpy_arguments_at_their_offsets() {
        let k = saxpy();
        let b = pack_args(
            &k,
            &[
                Arg::U32(7),
                Arg::F32(2.5),
                Arg::Ptr(0x1122_3344_5566),
                Arg::Ptr(0x10_0000),
            ],
        )
        .unwrap();
        assert_eq!(b.len(), k.arg_size as usize);
        for (info, want) in k.args.iter().zip([
            7u32.to_le_bytes().to_vec(),
            2.5f32.to_le_bytes().to_vec(),
            0x1122_3344_5566u64.to_le_bytes().to_vec(),
            0x10_0000u64.to_le_bytes().to_vec(),
        ]) {
            let o = info.offset as usize;
            assert_eq!(&b[o..o + want.len()], &want[..], "argument {}", info.name);
        }
    }

    #[test]
    fn rejects_wrong_arguments() {
        let k = saxpy();
        assert!(matches!(
            pack_args(&k, &[Arg::U32(1)]),
            Err(LaunchError::ArgCount {
                given: 1,
                expected: 4,
                ..
            })
        ));
        let e = pack_args(&k, &[Arg::U32(7), Arg::U32(2), Arg::Ptr(0), Arg::Ptr(0)]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "kernel saxpy: argument 1 (alpha) is f32, got u32"
        );
        // u64 is accepted for a pointer.
        assert!(pack_args(&k, &[Arg::U32(7), Arg::F32(1.0), Arg::U64(8), Arg::Ptr(0)]).is_ok());
    }

    #[test]
    fn shapes() {
        assert!(check_shape([1, 1, 1], [256, 1, 1], 0).is_ok());
        assert!(check_shape([0, 1, 1], [1, 1, 1], 0).is_err());
        assert!(check_shape([1, 1, 1], [32, 32, 2], 0).is_err());
        assert!(check_shape([1, 1, 1], [1, 1, 1], (64 << 10) + 1).is_err());
    }

    #[test]
    fn arg_parsing() {
        assert_eq!(Arg::parse("u32", "0x10"), Some(Arg::U32(16)));
        assert_eq!(Arg::parse("f32", "1.5"), Some(Arg::F32(1.5)));
        assert_eq!(Arg::parse("i32", "-3"), Some(Arg::I32(-3)));
        assert_eq!(Arg::parse("u32", "5000000000"), None);
        assert_eq!(Arg::parse("x", "1"), None);
    }
}
