//! Shared helpers for the integration tests: a seeded RNG, buffer
//! allocation in a `SparseMemory`, argument packing and sample loading.
#![allow(dead_code)]

use vgpu_isa::{assemble, Launch, Module, SparseMemory};

/// SplitMix64: small, seeded, deterministic.
pub struct Rng(vgpu_hwif::rng::SplitMix64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(vgpu_hwif::rng::SplitMix64::new(seed))
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }
    pub fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }
    /// Uniform in `lo..hi`.
    pub fn range(&mut self, lo: u32, hi: u32) -> u32 {
        lo + (self.next_u64() % (hi - lo) as u64) as u32
    }
    /// Uniform in [-1, 1).
    pub fn f32(&mut self) -> f32 {
        (self.next_u32() >> 8) as f32 / (1u32 << 23) as f32 - 1.0
    }
    pub fn f32s(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.f32()).collect()
    }
    pub fn u32s(&mut self, n: usize) -> Vec<u32> {
        (0..n).map(|_| self.next_u32()).collect()
    }
}

pub fn sample(name: &str) -> String {
    let path = format!("{}/samples/{name}.s", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

pub fn sample_module(name: &str) -> Module {
    assemble(&sample(name), 1).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// GPU memory with a bump allocator for buffers.
pub struct Gpu {
    pub mem: SparseMemory,
    next: u64,
}

impl Gpu {
    pub fn new() -> Gpu {
        Gpu {
            mem: SparseMemory::new(),
            next: 0x1_0000_0000,
        }
    }
    /// Maps a zeroed buffer of `bytes` and returns its address. Buffers are
    /// page-aligned and separated by an unmapped page.
    pub fn alloc(&mut self, bytes: u64) -> u64 {
        let va = self.next;
        let bytes = bytes.max(4);
        self.mem.map(va, bytes, true);
        self.next =
            (va + bytes).next_multiple_of(vgpu_isa::mem::PAGE_SIZE) + vgpu_isa::mem::PAGE_SIZE;
        va
    }
    pub fn upload_u32(&mut self, data: &[u32]) -> u64 {
        let va = self.alloc(data.len() as u64 * 4);
        self.mem.write_u32s(va, data).unwrap();
        va
    }
    pub fn upload_f32(&mut self, data: &[f32]) -> u64 {
        let va = self.alloc(data.len() as u64 * 4);
        self.mem.write_f32s(va, data).unwrap();
        va
    }
    pub fn u32s(&self, va: u64, n: usize) -> Vec<u32> {
        self.mem.read_u32s(va, n).unwrap()
    }
    pub fn f32s(&self, va: u64, n: usize) -> Vec<f32> {
        self.mem.read_f32s(va, n).unwrap()
    }
}

/// Argument buffer builder following a kernel's layout.
pub struct Args(pub Vec<u8>);

impl Args {
    pub fn new() -> Args {
        Args(Vec::new())
    }
    fn at(&mut self, off: usize, bytes: &[u8]) {
        if self.0.len() < off + bytes.len() {
            self.0.resize(off + bytes.len(), 0);
        }
        self.0[off..off + bytes.len()].copy_from_slice(bytes);
    }
    /// Sets argument `name` of `kernel` in `module`.
    pub fn set(mut self, module: &Module, kernel: &str, name: &str, value: u64) -> Args {
        let k = module.kernel(kernel).expect("kernel");
        let a = k.args.iter().find(|a| a.name == name).expect("argument");
        let off = a.offset as usize;
        if a.size == 8 {
            self.at(off, &value.to_le_bytes());
        } else {
            self.at(off, &(value as u32).to_le_bytes());
        }
        if self.0.len() < k.arg_size as usize {
            self.0.resize(k.arg_size as usize, 0);
        }
        self
    }
}

pub fn launch(module: &Module, kernel: &str, grid: [u32; 3], wg: [u32; 3], args: Args) -> Launch {
    Launch::new(module, kernel, grid, wg, args.0).expect("launch")
}

pub fn f(x: f32) -> u64 {
    x.to_bits() as u64
}
