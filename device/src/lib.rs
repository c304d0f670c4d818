//! The vgpu device.
