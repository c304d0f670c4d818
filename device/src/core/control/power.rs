//! `POWER_SET` and `POWER_STATUS`, and which commands answer while the
//! device is in a low-power state.

use vgpu_hwif::proto::{power_state, Opcode, ReplyHeader, Status};

use super::{CommandError, Reply};
use crate::config::VramOnReset;
use crate::core::gpu::Gpu;
use crate::core::inject::Class;
use crate::core::reset;
use crate::core::ring::RingState;

/// The status `op` gets while the device is down: `NOT_READY` for all but
/// `IDENTIFY`, `PING`, `TIME_QUERY` and the power commands.
pub(super) fn refusal(gpu: &Gpu, op: Opcode) -> Option<Status> {
    let allowed = matches!(
        op,
        Opcode::Identify
            | Opcode::Ping
            | Opcode::TimeQuery
            | Opcode::PowerSet
            | Opcode::PowerStatus
    );
    (gpu.power.is_down() && !allowed).then_some(Status::NotReady)
}

/// Whether any ring has work the engines have not finished.
fn busy(gpu: &Gpu) -> bool {
    let st = gpu.lock();
    let busy = st.contexts.iter().any(|c| {
        c.rings.iter().flatten().any(|r| {
            matches!(
                r.state,
                RingState::Ready
                    | RingState::Running
                    | RingState::SemWait { .. }
                    | RingState::FaultStalled { .. }
            )
        })
    });
    busy
}

/// `POWER_SET`.
pub(super) fn set(gpu: &Gpu, target: u32, ok: ReplyHeader) -> Result<Reply, CommandError> {
    let now = gpu.clock.now_ns();
    let from = gpu.power.state();
    let known = matches!(
        target,
        power_state::D0 | power_state::D3HOT | power_state::D3COLD
    );
    if !known {
        return Err(CommandError::Invalid(
            "POWER_SET state is not D0, D3HOT or D3COLD",
        ));
    }
    if target == from {
        return Ok(Reply::from_pod(&gpu.power.reply(now, ok)));
    }
    let down = target != power_state::D0;
    if down && from != power_state::D0 {
        return Err(CommandError::Invalid(
            "POWER_SET between two low-power states",
        ));
    }
    let fault = gpu
        .inject
        .on_power_set(now, down, target == power_state::D3HOT);
    match fault {
        Some(Class::PmEnterFail) => return Err(CommandError::PowerRefused(Status::Busy)),
        Some(Class::PmExitFail) => return Err(CommandError::PowerRefused(Status::DeviceLost)),
        _ => {}
    }
    if down {
        if busy(gpu) {
            return Err(CommandError::PowerRefused(Status::Busy));
        }
        // Contexts, rings, TLBs and the firmware go; VRAM as the state
        // says (a D3hot an injected fault makes lose it anyway).
        let vram = match (target, fault) {
            (power_state::D3HOT, Some(Class::PmVramLost)) => VramOnReset::Garbage,
            (power_state::D3HOT, _) => VramOnReset::Keep,
            _ => VramOnReset::Garbage,
        };
        let kept = reset::reset_device_with(gpu, false, Some(vram))?;
        gpu.power.enter(target, now, 0);
        gpu.power.set_pending_vram(kept);
        log::info!(
            "power: {} -> {}",
            power_state::name(from),
            power_state::name(target)
        );
    } else {
        let vram = gpu.power.take_pending_vram();
        gpu.power.enter(power_state::D0, now, vram);
        log::info!(
            "power: {} -> D0 (VRAM {})",
            power_state::name(from),
            vgpu_hwif::vram::state::name(vram)
        );
    }
    Ok(Reply::from_pod(&gpu.power.reply(now, ok)))
}
