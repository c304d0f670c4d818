// SPDX-License-Identifier: GPL-2.0

//! The firmware monitor: a firmware that crashed (`CRASHED` in
//! `FW_STATUS`, or its `FIRMWARE_CRASH` event when the status cannot be
//! read; an event whose firmware has since been replaced is dropped) or whose heartbeats stopped
//! (`FW_STATUS`, read by the periodic check) is recovered like the reset
//! ladder's device reset with no guilty context: `DEVICE_RESET`, the
//! firmware booted again, every context created again and its unfinished
//! jobs written again (the firmware failed, not a context). A third
//! failure within [`FAILURE_WINDOW_NS`] wedges the device instead: the
//! firmware keeps failing and only a rebind (or another image) helps.
//!
//! Lock order: [`Gpu::ops`] (held across a recovery), then the state lock
//! briefly; commands are sent with neither state lock held.

use super::state::{FwDown, Gpu};
use crate::{
    ffi::monotonic_ns,
    firmware::{crash, fw_state},
    proto::{Command, FwStatusReply},
};
use kernel::prelude::*;

/// Heartbeat periods without a beat after which the firmware is hung.
const MISSED_BEATS: u64 = 3;
/// The shortest silence taken for a hang, whatever the period: ms.
const MIN_SILENCE_MS: u64 = 500;
/// Failures within this window of which the third wedges the device.
const FAILURE_WINDOW_NS: u64 = 60_000_000_000;

impl Gpu {
    /// `FIRMWARE_CRASH` (event context): noted; the periodic check
    /// recovers it.
    pub(crate) fn on_firmware_crash(&self, code: u32, ctx: u32, engine: u32) {
        crate::dev_err_ratelimited!(
            self.pdev(),
            "firmware crashed: {} (code {}) running context slot {} engine {}; resetting the device\n",
            crash::name(code),
            code,
            ctx,
            engine
        );
        self.state
            .lock()
            .fw_down
            .get_or_insert(FwDown::Crashed(code));
    }

    /// The periodic check: the firmware's status and heartbeats; a
    /// firmware found or noted down is recovered. Skipped while another
    /// operation holds [`Gpu::ops`] or a reset runs.
    pub(crate) fn firmware_check(&self) {
        let Some(_ops) = self.ops.try_lock() else {
            return;
        };
        let Ok(mem) = self.slots() else { return };
        {
            let g = self.state.lock();
            if g.wedged || g.resetting {
                return;
            }
        }
        let now = monotonic_ns();
        let st: Option<FwStatusReply> = self.cmd(Command::FwStatus).and_then(|r| r.get()).ok();
        let mut g = self.state.lock();
        if let Some(st) = st {
            if st.state == fw_state::CRASHED {
                g.fw_down.get_or_insert(FwDown::Crashed(st.error));
            } else if st.state == fw_state::RUNNING && matches!(g.fw_down, Some(FwDown::Crashed(_)))
            {
                // The device is `CRASHED` before it posts the event, and
                // stays so until a reset: a running firmware means the
                // event came from the one a recovery has since replaced.
                g.fw_down = None;
            }
            if st.state == fw_state::RUNNING && st.heartbeat_ms > 0 {
                let (boots, beats, at) = g.fw_beats;
                if st.boots != boots || st.heartbeats != beats || at == 0 {
                    g.fw_beats = (st.boots, st.heartbeats, now);
                }
                let silent_ms = now.saturating_sub(g.fw_beats.2) / 1_000_000;
                let limit = (u64::from(st.heartbeat_ms) * MISSED_BEATS).max(MIN_SILENCE_MS);
                if silent_ms >= limit {
                    g.fw_down.get_or_insert(FwDown::Silent(silent_ms));
                }
            }
        }
        let Some(down) = g.fw_down.take() else {
            return;
        };
        g.counters.firmware_failures += 1;
        // The third failure within the window wedges.
        let recent = g
            .fw_failures
            .iter()
            .filter(|&&t| t != 0 && now.saturating_sub(t) < FAILURE_WINDOW_NS)
            .count();
        g.fw_failures.rotate_left(1);
        g.fw_failures[2] = now;
        g.fw_beats = (0, 0, 0);
        drop(g);
        let wedge = recent >= 2;
        match down {
            FwDown::Silent(ms) => crate::dev_err_ratelimited!(
                self.pdev(),
                "firmware heartbeat missed: none for {} ms; {}\n",
                ms,
                if wedge {
                    "third firmware failure within a minute: giving up"
                } else {
                    "resetting the device"
                }
            ),
            FwDown::Crashed(code) if wedge => crate::dev_err_ratelimited!(
                self.pdev(),
                "firmware crashed again ({}): third firmware failure within a minute: giving up\n",
                crash::name(code)
            ),
            FwDown::Crashed(_) => {}
        }
        if self.reset_for_firmware(mem, wedge) {
            dev_info!(
                self.pdev(),
                "firmware recovered: device reset, firmware booted again\n"
            );
        }
    }
}
