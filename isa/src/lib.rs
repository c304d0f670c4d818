//! The vgpu instruction set.
