//! A kernel launch and its validation.

use crate::module::{checked_product, Module, MAX_SHARED_BYTES, MAX_WORKGROUP_THREADS};
use thiserror::Error;

/// A kernel launch: which kernel, the grid, the workgroup size and the
/// argument buffer. Built with [`Launch::new`], which validates it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launch {
    pub(super) kernel: usize,
    pub(super) grid: [u32; 3],
    pub(super) wg_size: [u32; 3],
    pub(super) args: Vec<u8>,
    /// Shared memory per workgroup in bytes (at least the kernel's).
    pub(super) shared_bytes: u32,
}

/// Why a launch was refused.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum LaunchError {
    #[error("no kernel named {0:?}")]
    NoSuchKernel(String),
    #[error("no kernel {0} (the module has {1})")]
    NoSuchKernelIndex(u32, usize),
    #[error("shared memory {0} bytes exceeds {MAX_SHARED_BYTES}")]
    SharedTooLarge(u32),
    #[error("workgroup size {0:?} is invalid (each ≥ 1, product ≤ {MAX_WORKGROUP_THREADS})")]
    BadWorkgroupSize([u32; 3]),
    #[error("grid {0:?} is invalid (each dimension ≥ 1, at most 2^64 − 1 workgroups)")]
    BadGrid([u32; 3]),
    #[error("argument buffer has {have} bytes, the kernel needs {need}")]
    ArgsTooShort { need: u32, have: usize },
}

impl Launch {
    /// A launch of kernel `name` over `grid` workgroups of `wg_size` threads.
    pub fn new(
        module: &Module,
        name: &str,
        grid: [u32; 3],
        wg_size: [u32; 3],
        args: Vec<u8>,
    ) -> Result<Launch, LaunchError> {
        let kernel = module
            .kernel_index(name)
            .ok_or_else(|| LaunchError::NoSuchKernel(name.to_string()))?;
        Self::by_index(module, kernel as u32, grid, wg_size, args, 0)
    }

    /// A launch of the kernel at `index` in the module's kernel table, with
    /// at least `min_shared` bytes of shared memory per workgroup (the
    /// kernel's declared size if larger): what a `DISPATCH` packet names.
    pub fn by_index(
        module: &Module,
        index: u32,
        grid: [u32; 3],
        wg_size: [u32; 3],
        args: Vec<u8>,
        min_shared: u32,
    ) -> Result<Launch, LaunchError> {
        let kernel = index as usize;
        let k = module
            .kernels()
            .get(kernel)
            .ok_or(LaunchError::NoSuchKernelIndex(
                index,
                module.kernels().len(),
            ))?;
        let shared_bytes = k.shared_bytes.max(min_shared);
        if shared_bytes > MAX_SHARED_BYTES {
            return Err(LaunchError::SharedTooLarge(shared_bytes));
        }
        // Three u32 factors can exceed 64 bits (2^31 · 2^31 · 4 = 2^64
        // wraps to 0): the products are checked.
        let threads = checked_product(wg_size);
        if wg_size.contains(&0) || threads.is_none_or(|t| t > MAX_WORKGROUP_THREADS as u64) {
            return Err(LaunchError::BadWorkgroupSize(wg_size));
        }
        if grid.contains(&0) || checked_product(grid).is_none() {
            return Err(LaunchError::BadGrid(grid));
        }
        if args.len() < k.arg_size as usize {
            return Err(LaunchError::ArgsTooShort {
                need: k.arg_size,
                have: args.len(),
            });
        }
        Ok(Launch {
            kernel,
            grid,
            wg_size,
            args,
            shared_bytes,
        })
    }
    pub fn kernel_index(&self) -> usize {
        self.kernel
    }
    pub fn grid(&self) -> [u32; 3] {
        self.grid
    }
    pub fn wg_size(&self) -> [u32; 3] {
        self.wg_size
    }
    pub fn args(&self) -> &[u8] {
        &self.args
    }
    /// Shared memory per workgroup in bytes.
    pub fn shared_bytes(&self) -> u32 {
        self.shared_bytes
    }
    /// Number of workgroups in the grid (it fits 64 bits: checked when the
    /// launch was made).
    pub fn workgroups(&self) -> u64 {
        checked_product(self.grid).unwrap_or(u64::MAX)
    }
    /// The workgroup id of linear index `i` (x fastest).
    pub fn workgroup_id(&self, i: u64) -> [u32; 3] {
        let [gx, gy, _] = self.grid.map(u64::from);
        // One division at most in 1- and 2-D grids (a 64-bit division
        // costs tens of cycles, and this runs once per workgroup).
        if i < gx {
            return [i as u32, 0, 0];
        }
        let (q, x) = (i / gx, i % gx);
        if q < gy {
            return [x as u32, q as u32, 0];
        }
        [x as u32, (q % gy) as u32, (q / gy) as u32]
    }
    /// Threads per workgroup (at most `MAX_WORKGROUP_THREADS`: checked when
    /// the launch was made).
    pub fn threads_per_workgroup(&self) -> u32 {
        checked_product(self.wg_size)
            .and_then(|t| u32::try_from(t).ok())
            .unwrap_or(u32::MAX)
    }
}
