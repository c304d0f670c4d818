//! Power states: `D0` (running), `D3HOT` (suspended: VRAM kept in
//! self-refresh) and `D3COLD` (off: VRAM lost), with residency and entry
//! counters.
//!
//! ```text
//!  D0 ──POWER_SET D3HOT/D3COLD (no ring has work)──▶ D3x ──POWER_SET D0──▶ D0, in its boot state
//! ```
//!
//! This block keeps the state and the counters; the control processor
//! checks idleness and applies what a state loses (the device's power-on
//! reset, VRAM per the state) before it records the move here. While the
//! device is down only `IDENTIFY`, `PING`, `TIME_QUERY` and the power
//! commands answer.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};

use vgpu_hwif::proto::{power_state, PowerReply, ReplyHeader};

#[derive(Debug, Default)]
struct Core {
    state: u32,
    since_ns: u64,
    vram: u32,
    /// What the power-down did to VRAM, reported at the return to `D0`.
    pending_vram: u32,
    entries: [u64; 2],
    residency_ns: [u64; 3],
    woke_ns: u64,
}

/// The power block.
#[derive(Debug, Default)]
pub struct Power {
    core: Mutex<Core>,
    down: AtomicBool,
}

/// The residency slot of a state.
const fn slot(state: u32) -> usize {
    match state {
        power_state::D3HOT => 1,
        power_state::D3COLD => 2,
        _ => 0,
    }
}

impl Power {
    fn core(&self) -> std::sync::MutexGuard<'_, Core> {
        self.core.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the device is in a low-power state (commands refused).
    pub fn is_down(&self) -> bool {
        self.down.load(Ordering::Acquire)
    }

    /// The state now.
    pub fn state(&self) -> u32 {
        self.core().state
    }

    /// Records a move to `state` at `now_ns`; `vram` is what VRAM kept
    /// when the move is back to `D0`.
    pub fn enter(&self, state: u32, now_ns: u64, vram: u32) {
        let mut c = self.core();
        let spent = now_ns.saturating_sub(c.since_ns);
        let from = slot(c.state);
        if let Some(r) = c.residency_ns.get_mut(from) {
            *r = r.saturating_add(spent);
        }
        c.since_ns = now_ns;
        c.state = state;
        match state {
            power_state::D0 => {
                c.vram = vram;
                c.woke_ns = now_ns;
            }
            s => {
                if let Some(e) = c.entries.get_mut(slot(s) - 1) {
                    *e += 1;
                }
            }
        }
        self.down.store(state != power_state::D0, Ordering::Release);
    }

    /// What the power-down just applied did to VRAM ([`vgpu_hwif::vram::state`]).
    pub fn set_pending_vram(&self, vram: u32) {
        self.core().pending_vram = vram;
    }

    /// What the power-down did to VRAM, for the return to `D0`.
    pub fn take_pending_vram(&self) -> u32 {
        core::mem::take(&mut self.core().pending_vram)
    }

    /// The `POWER_SET` / `POWER_STATUS` reply at `now_ns` (the current
    /// state's residency counted up to now).
    pub fn reply(&self, now_ns: u64, hdr: ReplyHeader) -> PowerReply {
        let c = self.core();
        let mut residency_ns = c.residency_ns;
        if let Some(r) = residency_ns.get_mut(slot(c.state)) {
            *r = r.saturating_add(now_ns.saturating_sub(c.since_ns));
        }
        PowerReply {
            hdr,
            state: c.state,
            vram: c.vram,
            entries: c.entries,
            residency_ns,
            woke_ns: c.woke_ns,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vgpu_hwif::pod::Pod;

    #[test]
    fn residency_and_entries_follow_the_moves() {
        let p = Power::default();
        assert!(!p.is_down());
        p.enter(power_state::D3HOT, 100, 0);
        assert!(p.is_down());
        p.enter(power_state::D0, 350, 1);
        p.enter(power_state::D3COLD, 400, 0);
        let r = p.reply(1000, ReplyHeader::zeroed());
        assert_eq!(r.state, power_state::D3COLD);
        assert_eq!(r.entries, [1, 1]);
        assert_eq!(r.residency_ns, [100 + 50, 250, 600]);
        assert_eq!((r.vram, r.woke_ns), (1, 350));
    }
}
