//! The C ABI declared in `include/vgpu.h`.
//!
//! Objects live in a process-wide handle table: a handle is a 64-bit number
//! whose top byte names the object type, so a stale or mistyped handle is
//! reported (`VGPU_ERROR_INVALID_HANDLE`) instead of dereferenced. Calls copy
//! the object out of the table and release the table's lock before they
//! touch the device, so threads never serialise on it while waiting.

//!
//! Files: this one the status codes and the structs the header declares;
//! `handles.rs` the handle table, the thread's last error and the helpers
//! every call shares; then one file per object: `device.rs` (devices,
//! contexts, status strings), `memory.rs`, `stream.rs` (streams and
//! copies), `event.rs`, `module.rs` (modules and launches),
//! `timeline.rs`.

#[macro_use]
mod handles;
mod device;
mod event;
mod memory;
mod module;
mod stream;
mod timeline;

pub use device::*;
pub use event::*;
pub use memory::*;
pub use module::*;
pub use stream::*;
pub use timeline::*;

/// `vgpu_status`.
pub type Status = u32;

/// `VGPU_SUCCESS`.
pub const VGPU_SUCCESS: Status = 0;

/// `VGPU_ERROR_INVALID_ARGUMENT`.
pub const VGPU_ERROR_INVALID_ARGUMENT: Status = 1;

/// `VGPU_ERROR_INVALID_HANDLE`.
pub const VGPU_ERROR_INVALID_HANDLE: Status = 2;

/// `VGPU_ERROR_NO_DEVICE`.
pub const VGPU_ERROR_NO_DEVICE: Status = 3;

/// `VGPU_ERROR_OUT_OF_MEMORY`.
pub const VGPU_ERROR_OUT_OF_MEMORY: Status = 4;

/// `VGPU_ERROR_NOT_FOUND`.
pub const VGPU_ERROR_NOT_FOUND: Status = 5;

/// `VGPU_ERROR_NOT_READY`.
pub const VGPU_ERROR_NOT_READY: Status = 6;

/// `VGPU_ERROR_INVALID_MODULE`.
pub const VGPU_ERROR_INVALID_MODULE: Status = 7;

/// `VGPU_ERROR_CONTEXT_LOST`.
pub const VGPU_ERROR_CONTEXT_LOST: Status = 8;

/// `VGPU_ERROR_DEVICE_LOST`.
pub const VGPU_ERROR_DEVICE_LOST: Status = 9;

/// `VGPU_ERROR_KMD`.
pub const VGPU_ERROR_KMD: Status = 10;

/// `VGPU_ERROR_CONFIG`.
pub const VGPU_ERROR_CONFIG: Status = 11;

/// `vgpu_lost_reason` values.
pub mod lost {
    /// `VGPU_LOST_NONE`.
    pub const NONE: u32 = 0;
    /// `VGPU_LOST_PAGE_FAULT`.
    pub const PAGE_FAULT: u32 = 1;
    /// `VGPU_LOST_HANG`.
    pub const HANG: u32 = 2;
    /// `VGPU_LOST_BANNED`.
    pub const BANNED: u32 = 3;
    /// `VGPU_LOST_INNOCENT`.
    pub const INNOCENT: u32 = 4;
    /// `VGPU_LOST_ENGINE_ERROR`.
    pub const ENGINE_ERROR: u32 = 5;
    /// `VGPU_LOST_WEDGED`.
    pub const WEDGED: u32 = 6;
    /// `VGPU_LOST_REMOVED`.
    pub const REMOVED: u32 = 7;
    /// `VGPU_LOST_DEVICE_LOST`.
    pub const DEVICE_LOST: u32 = 8;
}

/// `vgpu_arg`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct VgpuArg {
    /// `vgpu_arg_kind`.
    pub kind: u32,
    /// Zero.
    pub pad: u32,
    /// The value's bits (the union, little endian).
    pub bits: u64,
}

/// `vgpu_device_stats`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct VgpuDeviceStats {
    /// Guest monotonic clock of the sample, ns.
    pub sample_ns: u64,
    /// Busy time per engine, ns.
    pub engine_busy_ns: [u64; 2],
    /// GEM bytes of all processes.
    pub mem_bytes: u64,
    /// GEM objects.
    pub mem_objects: u64,
    /// Page-table bytes.
    pub pt_bytes: u64,
    /// Engine resets.
    pub engine_resets: u64,
    /// Device resets.
    pub device_resets: u64,
    /// Hangs.
    pub hangs: u64,
    /// Faults.
    pub faults: u64,
    /// 1: wedged.
    pub wedged: u32,
    /// Contexts on the device.
    pub num_contexts: u32,
}

/// `vgpu_device_properties`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct VgpuDeviceProperties {
    /// Generation.
    pub generation: u32,
    /// Compute units.
    pub compute_units: u32,
    /// Engines.
    pub engine_mask: u64,
    /// Page sizes.
    pub page_sizes: u64,
    /// VA bits.
    pub va_bits: u32,
    /// Contexts.
    pub max_contexts: u32,
    /// Protocol.
    pub protocol_version: u32,
    /// Firmware.
    pub firmware_version: u32,
    /// PCI device id.
    pub device_id: u32,
    /// Zero.
    pub pad: u32,
}

/// `vgpu_context_state`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct VgpuContextState {
    /// `vgpu_lost_reason`.
    pub reason: u32,
    /// KMD context.
    pub kmd_context: u32,
    /// Fault VA.
    pub fault_va: u64,
    /// Fault access.
    pub fault_access: u32,
    /// Hangs.
    pub hangs: u32,
}

#[cfg(test)]
mod tests {
    use std::ffi::CStr;

    use super::handles::T_BUFFER;
    use super::*;
    use crate::module::Arg;

    #[test]
    fn stale_and_mistyped_handles_are_rejected() {
        assert_eq!(vgpu_mem_free(0), VGPU_ERROR_INVALID_HANDLE);
        assert_eq!(
            vgpu_stream_synchronize(T_BUFFER << 56 | 1),
            VGPU_ERROR_INVALID_HANDLE
        );
        // SAFETY: reads the thread's NUL-terminated message.
        let msg = unsafe { CStr::from_ptr(vgpu_last_error()) }
            .to_string_lossy()
            .into_owned();
        assert!(
            msg.starts_with("vgpu_stream_synchronize: handle 0x200000000000001"),
            "{msg}"
        );
        let mut x = 0u64;
        // SAFETY: `x` is writable.
        let st = unsafe { vgpu_mem_alloc(12345, 64, 0, &mut x) };
        assert_eq!(st, VGPU_ERROR_INVALID_HANDLE);
        // SAFETY: a null output pointer is allowed and rejected.
        let st = unsafe { vgpu_mem_va(1, std::ptr::null_mut()) };
        assert_eq!(st, VGPU_ERROR_INVALID_ARGUMENT);
    }

    #[test]
    fn c_arguments_convert() {
        let a = [
            VgpuArg {
                kind: 1,
                pad: 0,
                bits: 7,
            },
            VgpuArg {
                kind: 3,
                pad: 0,
                bits: u64::from(2.5f32.to_bits()),
            },
            VgpuArg {
                kind: 2,
                pad: 0,
                bits: u64::from((-3i32) as u32),
            },
            VgpuArg {
                kind: 5,
                pad: 0,
                bits: 0x1234_5678_9abc,
            },
        ];
        assert_eq!(
            convert_args(&a).unwrap(),
            vec![
                Arg::U32(7),
                Arg::F32(2.5),
                Arg::I32(-3),
                Arg::Ptr(0x1234_5678_9abc)
            ]
        );
        assert!(convert_args(&[VgpuArg {
            kind: 9,
            pad: 0,
            bits: 0
        }])
        .is_err());
        assert!(convert_args(&[VgpuArg {
            kind: 1,
            pad: 1,
            bits: 0
        }])
        .is_err());
    }

    #[test]
    fn every_status_has_a_string() {
        for s in 0..=VGPU_ERROR_CONFIG {
            // SAFETY: static NUL-terminated strings.
            let t = unsafe { CStr::from_ptr(vgpu_status_string(s)) };
            assert_ne!(t.to_str().unwrap(), "unknown status", "status {s}");
        }
    }
}
