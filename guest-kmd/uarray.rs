// SPDX-License-Identifier: GPL-2.0

//! Arrays in user memory read and written as typed structs.
//!
//! The uAPI structs (`kernel::uapi`, generated from our header) are foreign
//! to this crate, so they cannot implement the kernel's `FromBytes`
//! themselves; each array element type gets a transparent wrapper here that
//! does, with the layout checked at compile time.

use kernel::{
    prelude::*,
    transmute::{
        AsBytes,
        FromBytes, //
    },
    uaccess::UserSlice,
    uapi, //
};

/// `struct drm_vgpu_fence` read from user memory.
#[repr(transparent)]
#[derive(Clone, Copy)]
pub(crate) struct UFence(pub(crate) uapi::drm_vgpu_fence);

/// `struct drm_vgpu_cmd` read from user memory.
#[repr(transparent)]
#[derive(Clone, Copy)]
pub(crate) struct UCmd(pub(crate) uapi::drm_vgpu_cmd);

/// `struct drm_vgpu_sync` read from user memory.
#[repr(transparent)]
#[derive(Clone, Copy)]
pub(crate) struct USync(pub(crate) uapi::drm_vgpu_sync);

/// `struct drm_vgpu_submit_bo` read from user memory.
#[repr(transparent)]
#[derive(Clone, Copy)]
pub(crate) struct USubmitBo(pub(crate) uapi::drm_vgpu_submit_bo);

/// `struct drm_vgpu_vm_op` read from user memory.
#[repr(transparent)]
#[derive(Clone, Copy)]
pub(crate) struct UVmOp(pub(crate) uapi::drm_vgpu_vm_op);

/// `struct drm_vgpu_ctx_stats` written to user memory.
#[repr(transparent)]
#[derive(Clone, Copy)]
pub(crate) struct UCtxStats(pub(crate) uapi::drm_vgpu_ctx_stats);

// No padding: every byte belongs to an integer field.
const _: () = assert!(core::mem::size_of::<uapi::drm_vgpu_fence>() == 4 + 4 + 8);
const _: () = assert!(core::mem::size_of::<uapi::drm_vgpu_cmd>() == 8 + 8);
const _: () = assert!(
    core::mem::size_of::<uapi::drm_vgpu_ctx_stats>()
        == 8 * 4 + 8 + 2 * 8 + 2 * 8 + 12 * 8 + 4 * 4 + 2 * 8 + 2 * 4 + 8
);
const _: () = assert!(core::mem::size_of::<uapi::drm_vgpu_sync>() == 4 + 4 + 8);
const _: () = assert!(core::mem::size_of::<uapi::drm_vgpu_submit_bo>() == 4 + 4);
const _: () = assert!(core::mem::size_of::<uapi::drm_vgpu_vm_op>() == 4 * 4 + 3 * 8);

// SAFETY: `drm_vgpu_fence` is `#[repr(C)]` of `u32, u32, u64` with no
// padding (asserted above): every bit pattern is a valid value, and it has
// no interior mutability.
unsafe impl FromBytes for UFence {}
// SAFETY: `drm_vgpu_cmd` is `#[repr(C)]` of two `u64`s (no padding,
// asserted above): every bit pattern is valid; no interior mutability.
unsafe impl FromBytes for UCmd {}
// SAFETY: `drm_vgpu_sync` is `#[repr(C)]` of `u32, u32, u64` (no padding,
// asserted above): every bit pattern is valid; no interior mutability.
unsafe impl FromBytes for USync {}
// SAFETY: `drm_vgpu_submit_bo` is `#[repr(C)]` of two `u32`s (no padding,
// asserted above): every bit pattern is valid; no interior mutability.
unsafe impl FromBytes for USubmitBo {}
// SAFETY: `drm_vgpu_vm_op` is `#[repr(C)]` of four `u32`s and three `u64`s
// (no padding, asserted above): every bit pattern is valid; no interior
// mutability.
unsafe impl FromBytes for UVmOp {}

// SAFETY: `drm_vgpu_ctx_stats` is `#[repr(C)]` of eight `u32`s then `u64`s
// and `u64` arrays (the counters struct is nine `u64`s), then four `u32`s,
// two `u64`s and two `u32`s, with no padding (asserted above): every byte is
// initialised, so it may be viewed as bytes.
unsafe impl AsBytes for UCtxStats {}

/// Reads `n` values of `T` from the user array at `addr`.
///
/// # Errors
///
/// `EFAULT` (bad address), `EINVAL` (size overflow), `ENOMEM`.
pub(crate) fn read<T: FromBytes>(addr: u64, n: usize) -> Result<KVec<T>> {
    let mut out = KVec::with_capacity(n, GFP_KERNEL)?;
    if n == 0 {
        return Ok(out);
    }
    let len = n.checked_mul(core::mem::size_of::<T>()).ok_or(EINVAL)?;
    let ptr = UserPtr::from_addr(usize::try_from(addr).map_err(|_| EFAULT)?);
    let mut r = UserSlice::new(ptr, len).reader();
    for _ in 0..n {
        out.push(r.read::<T>()?, GFP_KERNEL)?;
    }
    Ok(out)
}

/// Writes `items` to the user array at `addr`.
///
/// # Errors
///
/// `EFAULT` (bad address), `EINVAL` (size overflow).
pub(crate) fn write<T: AsBytes>(addr: u64, items: &[T]) -> Result {
    if items.is_empty() {
        return Ok(());
    }
    let len = items
        .len()
        .checked_mul(core::mem::size_of::<T>())
        .ok_or(EINVAL)?;
    let ptr = UserPtr::from_addr(usize::try_from(addr).map_err(|_| EFAULT)?);
    let mut w = UserSlice::new(ptr, len).writer();
    for item in items {
        w.write(item)?;
    }
    Ok(())
}
