// SPDX-License-Identifier: GPL-2.0

//! Device memory as the device reports it: the VRAM layout
//! (`MEMORY_LAYOUT`, checked before use: the device's answer is input) and
//! the CPU-visible aperture's PCI function next to the GPU.
//!
//! Found once at bring-up, after `IDENTIFY`; a device without
//! `FEATURE_VRAM` has none. A layout that does not describe
//! `0..vram_size` in order, without gaps, is refused with a message and
//! the device is driven as one without VRAM.

use crate::{
    ffi::{find_aperture, ApertureBar},
    proto::{Command, IdentifyReply, MemoryLayoutReply, FEATURE_VRAM},
    vram::{kind, state, Layout, MEM_LAYOUT_RANGES},
};
use kernel::prelude::*;

use super::Hw;

/// The device's VRAM, checked.
#[derive(Clone, Copy, Debug)]
pub(crate) struct DeviceMemory {
    /// Sizes and ranges, as the device reported them.
    pub(crate) layout: Layout,
    /// What a device reset does to VRAM (`vram::state`).
    pub(crate) reset_policy: u32,
    /// The aperture's BAR, if QEMU provides one.
    pub(crate) aperture: Option<ApertureBar>,
}

/// Why a `MEMORY_LAYOUT` reply is refused.
fn check(
    r: &MemoryLayoutReply,
    id: &IdentifyReply,
) -> core::result::Result<DeviceMemory, &'static str> {
    if r.vram_size != id.vram_size || r.visible_vram_size != id.visible_vram_size {
        return Err("sizes differ from IDENTIFY");
    }
    if r.visible_vram_size > r.vram_size {
        return Err("visible part larger than VRAM");
    }
    let count = r.count as usize;
    if count == 0 || count > MEM_LAYOUT_RANGES {
        return Err("range count out of bounds");
    }
    let mut layout = Layout {
        size: r.vram_size,
        visible: r.visible_vram_size,
        count,
        ..Layout::NONE
    };
    let mut next = 0u64;
    for (i, slot) in layout.ranges.iter_mut().enumerate().take(count) {
        let range = r.range(i).ok_or("range missing")?;
        if range.base != next || range.size == 0 {
            return Err("ranges not contiguous from 0");
        }
        if range.kind != kind::USABLE && range.kind != kind::RESERVED {
            return Err("unknown range kind");
        }
        next = range
            .base
            .checked_add(range.size)
            .ok_or("range overflows")?;
        *slot = range;
    }
    if next != r.vram_size {
        return Err("ranges do not end at the VRAM size");
    }
    if !matches!(r.reset_policy, state::KEPT | state::ZEROED | state::GARBAGE) {
        return Err("unknown reset policy");
    }
    Ok(DeviceMemory {
        layout,
        reset_policy: r.reset_policy,
        aperture: None,
    })
}

impl Hw {
    /// Reads the device's VRAM layout and finds the aperture (see the
    /// module documentation); `None` for a device without VRAM or with a
    /// layout refused.
    pub(crate) fn discover_memory(&self, id: &IdentifyReply) -> Option<DeviceMemory> {
        if id.features & FEATURE_VRAM == 0 {
            return None;
        }
        let pdev = self.pdev();
        let reply = self.command(Command::MemoryLayout).ok()?;
        let r: MemoryLayoutReply = reply.get().ok()?;
        let mut m = match check(&r, id) {
            Ok(m) => m,
            Err(why) => {
                dev_err!(pdev, "MEMORY_LAYOUT refused: {}; VRAM not used\n", why);
                return None;
            }
        };
        m.aperture = find_aperture(pdev.as_ref());
        match m.aperture {
            Some(a) if a.len >= m.layout.visible => dev_info!(
                pdev,
                "VRAM {} MiB ({} MiB usable), {} MiB CPU-visible through the aperture at {:#x}\n",
                m.layout.size >> 20,
                m.layout.usable_bytes() >> 20,
                m.layout.visible >> 20,
                a.start
            ),
            Some(a) => {
                dev_warn!(
                    pdev,
                    "aperture BAR of {} bytes is smaller than the visible VRAM ({} bytes): not used\n",
                    a.len,
                    m.layout.visible
                );
                m.aperture = None;
            }
            None => dev_info!(
                pdev,
                "VRAM {} MiB ({} MiB usable), no aperture function: not CPU-visible\n",
                m.layout.size >> 20,
                m.layout.usable_bytes() >> 20
            ),
        }
        Some(m)
    }
}
