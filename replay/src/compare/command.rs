//! Control commands as text: in the device's words with a run's own
//! context ids, and as keys with contexts named by the order they were
//! created.

use vgpu_hwif::proto::{engine, Command, Opcode, CTX_NONE};

/// Commands whose replies or fields carry state, times, counters or
/// guest-physical addresses only, or that the driver sends as timing
/// demands: not compared.
pub const IGNORED: [Opcode; 13] = [
    Opcode::Identify,
    Opcode::Ping,
    Opcode::ContextQuery,
    Opcode::QueryStats,
    Opcode::RasQuery,
    Opcode::CaptureRead,
    Opcode::TimeQuery,
    Opcode::SanMem,
    Opcode::SanReport,
    Opcode::DoorbellKick,
    Opcode::FwStatus,
    Opcode::FwLogRead,
    Opcode::PowerStatus,
];

/// An engine's name.
pub fn engine_name(e: u32) -> String {
    match e {
        engine::COPY => "copy".into(),
        engine::COMPUTE => "compute".into(),
        _ => format!("{e}"),
    }
}

fn ctx_text(c: u32) -> String {
    if c == CTX_NONE {
        "none".into()
    } else {
        c.to_string()
    }
}

/// A command in the device's words with this run's ids, and the same with
/// slots (the key, without the status).
pub fn command_texts(c: &Command, slot: &dyn Fn(u32) -> String) -> (String, String) {
    let e = |e: u32| engine_name(e);
    match *c {
        Command::ContextCreate {
            ctx_id,
            priority,
            flags,
            ..
        } => (
            format!("CONTEXT_CREATE ctx {ctx_id} priority {priority} flags {flags:#x}"),
            format!("CONTEXT_CREATE priority {priority} flags {flags:#x}"),
        ),
        Command::ContextDestroy { ctx_id, flags } => (
            format!("CONTEXT_DESTROY ctx {ctx_id} flags {flags:#x}"),
            format!("CONTEXT_DESTROY ctx {} flags {flags:#x}", slot(ctx_id)),
        ),
        Command::RingCreate {
            ctx_id,
            engine,
            size,
            ring_va,
            status_va,
        } => {
            let rest = format!(
                "engine {} size {size:#x} ring_va {ring_va:#x} status_va {status_va:#x}",
                e(engine)
            );
            (
                format!("RING_CREATE ctx {ctx_id} {rest}"),
                format!("RING_CREATE ctx {} {rest}", slot(ctx_id)),
            )
        }
        Command::RingDestroy { ctx_id, engine } => (
            format!("RING_DESTROY ctx {ctx_id} engine {}", e(engine)),
            format!("RING_DESTROY ctx {} engine {}", slot(ctx_id), e(engine)),
        ),
        Command::Doorbell {
            ctx_id,
            engine,
            wptr,
        } => (
            format!("DOORBELL ctx {ctx_id} engine {} wptr {wptr:#x}", e(engine)),
            format!(
                "DOORBELL ctx {} engine {} wptr {wptr:#x}",
                slot(ctx_id),
                e(engine)
            ),
        ),
        Command::DoorbellWatch {
            ctx_id,
            engine,
            doorbell_va,
            start,
            flags,
        } => {
            let rest = format!(
                "engine {} doorbell_va {doorbell_va:#x} start {start:#x} flags {flags:#x}",
                e(engine)
            );
            (
                format!("DOORBELL_WATCH ctx {ctx_id} {rest}"),
                format!("DOORBELL_WATCH ctx {} {rest}", slot(ctx_id)),
            )
        }
        Command::TlbInvalidate {
            ctx_id,
            engine_mask,
            va,
            size,
        } => {
            let rest = format!("engine_mask {engine_mask:#x} va {va:#x} size {size:#x}");
            (
                format!("TLB_INVALIDATE ctx {ctx_id} {rest}"),
                format!("TLB_INVALIDATE ctx {} {rest}", slot(ctx_id)),
            )
        }
        Command::FaultResume { ctx_id, action, .. } => {
            let a = if action == vgpu_hwif::proto::FAULT_RESUME_ABORT {
                "abort".to_owned()
            } else if action == vgpu_hwif::proto::FAULT_RESUME_RETRY {
                "retry".to_owned()
            } else {
                format!("{action}")
            };
            (
                format!("FAULT_RESUME ctx {ctx_id} action {a}"),
                format!("FAULT_RESUME ctx {} action {a}", slot(ctx_id)),
            )
        }
        Command::EngineReset { engine, hung_ctx } => (
            format!(
                "ENGINE_RESET engine {} hung_ctx {}",
                e(engine),
                ctx_text(hung_ctx)
            ),
            format!(
                "ENGINE_RESET engine {} hung_ctx {}",
                e(engine),
                if hung_ctx == CTX_NONE {
                    "none".into()
                } else {
                    slot(hung_ctx)
                }
            ),
        ),
        Command::Capture {
            ctx_id,
            engine,
            reason,
        } => (
            format!("CAPTURE ctx {ctx_id} engine {} reason {reason}", e(engine)),
            format!(
                "CAPTURE ctx {} engine {} reason {reason}",
                slot(ctx_id),
                e(engine)
            ),
        ),
        ref other => {
            let n = other.opcode().name().to_owned();
            (n.clone(), n)
        }
    }
}

/// A command's context and engine (for the lanes).
pub fn command_target(c: &Command) -> (Option<u32>, Option<u32>) {
    match *c {
        Command::ContextCreate { ctx_id, .. }
        | Command::ContextDestroy { ctx_id, .. }
        | Command::FaultResume { ctx_id, .. } => (Some(ctx_id), None),
        Command::RingCreate { ctx_id, engine, .. }
        | Command::RingDestroy { ctx_id, engine }
        | Command::Doorbell { ctx_id, engine, .. }
        | Command::DoorbellWatch { ctx_id, engine, .. }
        | Command::Capture { ctx_id, engine, .. } => (Some(ctx_id), Some(engine)),
        Command::TlbInvalidate { ctx_id, .. } => (Some(ctx_id), None),
        Command::EngineReset { engine, hung_ctx } => {
            ((hung_ctx != CTX_NONE).then_some(hung_ctx), Some(engine))
        }
        _ => (None, None),
    }
}
