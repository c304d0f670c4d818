//! The firmware commands (`FW_LOAD`, `FW_START`, `FW_STATUS`,
//! `FW_LOG_READ`) and which commands answer before the firmware runs.

use vgpu_hwif::firmware::FW_MAX_SIZE;
use vgpu_hwif::proto::{
    FwLogReadReply, Opcode, ReplyHeader, Status, FEATURE_USER_QUEUES, FW_LOG_READ_MAX,
};
use vm_memory::{Bytes, GuestAddress};

use super::{CommandError, Reply};
use crate::core::firmware::BootOutcome;
use crate::core::gpu::Gpu;
use crate::core::inject::Class;
use crate::core::mmu::in_ram;
use crate::core::post;
use crate::core::sanitize_hooks as hooks;

/// Whether `op` answers while the firmware does not run (the boot ROM's
/// commands).
pub(super) const fn in_boot_state(op: Opcode) -> bool {
    matches!(
        op,
        Opcode::Identify
            | Opcode::Ping
            | Opcode::PowerSet
            | Opcode::PowerStatus
            | Opcode::MemoryLayout
            | Opcode::TimeQuery
            | Opcode::DeviceReset
            | Opcode::FwLoad
            | Opcode::FwStart
            | Opcode::FwStatus
            | Opcode::FwLogRead
            | Opcode::SanReport
    )
}

/// The status `op` gets before it executes from the firmware's state:
/// `NOT_READY` while it does not run, `UNSUPPORTED` for a feature the
/// running image does not enable.
pub(super) fn refusal(gpu: &Gpu, op: Opcode) -> Option<Status> {
    if in_boot_state(op) {
        return None;
    }
    if !gpu.firmware.running(gpu.clock.now_ns()) {
        return Some(Status::NotReady);
    }
    let user_queue = matches!(op, Opcode::DoorbellWatch | Opcode::DoorbellKick);
    let uq = vgpu_hwif::firmware::feature::USER_QUEUES;
    if user_queue && !gpu.firmware.enables(uq) {
        debug_assert_ne!(FEATURE_USER_QUEUES, 0);
        return Some(Status::Unsupported);
    }
    None
}

/// `FW_LOAD`: the image is copied out of guest memory, then checked.
pub(super) fn load(
    gpu: &Gpu,
    pa: u64,
    size: u32,
    interface: u32,
    ok: ReplyHeader,
) -> Result<Reply, CommandError> {
    let now = gpu.clock.now_ns();
    if size as usize > FW_MAX_SIZE {
        gpu.firmware.refuse_size(now, size)?;
        return Ok(Reply::from_pod(&gpu.firmware.status(now, ok)));
    }
    let mem = gpu.memory();
    if size > 0 && !in_ram(&mem, pa, u64::from(size)) {
        return Err(CommandError::Invalid("FW_LOAD image outside guest RAM"));
    }
    let mut image = vec![0u8; size as usize];
    if mem.read_slice(&mut image, GuestAddress(pa)).is_err() {
        return Err(CommandError::Invalid("FW_LOAD image outside guest RAM"));
    }
    if let Some(r) = gpu.record.get() {
        r.dma_read(now, pa, &image);
    }
    gpu.firmware.load(now, image, interface)?;
    Ok(Reply::from_pod(&gpu.firmware.status(now, ok)))
}

/// `FW_START`.
pub(super) fn start(gpu: &Gpu, ok: ReplyHeader) -> Result<Reply, CommandError> {
    let now = gpu.clock.now_ns();
    let outcome = match gpu.inject.on_fw_start(now) {
        Some(Class::FwBootFail) => BootOutcome::Fail,
        Some(Class::FwBootHang) => BootOutcome::Hang,
        _ => BootOutcome::Run,
    };
    gpu.firmware.start(now, outcome)?;
    Ok(Reply::from_pod(&gpu.firmware.status(now, ok)))
}

/// `FW_STATUS`: the boot status; a poll sooner than the boot protocol
/// allows is the sanitizer's `SAN-FW-POLL`.
pub(super) fn status(gpu: &Gpu, ok: ReplyHeader) -> Reply {
    let now = gpu.clock.now_ns();
    if let Some(p) = gpu.firmware.poll(now) {
        if let Some(ev) = hooks::on_fast_poll(gpu, p.boot, p.poll, p.gap_ns) {
            post::event(gpu, ev);
        }
    }
    Reply::from_pod(&gpu.firmware.status(now, ok))
}

/// `FW_LOG_READ`: bytes of the log from `pos` into the driver's buffer.
pub(super) fn log_read(
    gpu: &Gpu,
    pos: u64,
    len: u32,
    buf_pa: u64,
    ok: ReplyHeader,
) -> Result<Reply, CommandError> {
    if len > FW_LOG_READ_MAX {
        return Err(CommandError::Invalid(
            "FW_LOG_READ len above FW_LOG_READ_MAX",
        ));
    }
    let mem = gpu.memory();
    if len > 0 && !in_ram(&mem, buf_pa, u64::from(len)) {
        return Err(CommandError::Invalid(
            "FW_LOG_READ buffer outside guest RAM",
        ));
    }
    let (start, bytes, head) = gpu.firmware.read_log(pos, len as usize);
    if !bytes.is_empty() && mem.write_slice(&bytes, GuestAddress(buf_pa)).is_err() {
        return Err(CommandError::Invalid(
            "FW_LOG_READ buffer outside guest RAM",
        ));
    }
    Ok(Reply::from_pod(&FwLogReadReply {
        hdr: ok,
        start,
        written: u32::try_from(bytes.len()).unwrap_or(u32::MAX),
        reserved: 0,
        head,
    }))
}
