//! The vgpu user-mode driver.
