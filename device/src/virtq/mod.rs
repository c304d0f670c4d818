//! The virtqueue layer: moves bytes between split virtqueues in guest
//! memory and the device core.
//!
//! * Control queue ([`process_control_queue`]): each chain is a readable
//!   command followed by a writable reply buffer. The command is copied out
//!   (at most `MAX_COMMAND_SIZE + 1` bytes, so an oversized command is
//!   recognised without reading it all), executed, and the reply written;
//!   the used length is the reply's length.
//! * Event queue ([`deliver_events`]): each chain is a writable buffer of at
//!   least one event record; the device fills one per pending event, used
//!   length [`EVENT_RECORD_SIZE`].
//!
//! A chain that cannot be served (readable after writable descriptors,
//! descriptors outside guest memory, no or too small a writable part, a
//! readable part in an event buffer) is completed with used length 0 and
//! counted as a protocol error. Guest memory is only touched through
//! bounds-checked accessors, so no chain can make the device read or write
//! outside guest memory.
//!
//! Notification suppression follows the queue's negotiated mode
//! (`VIRTIO_RING_F_EVENT_IDX` or the flags fields); the returned
//! [`QueueOutcome::notify`] says whether the driver wants an interrupt.

pub mod chain;

use virtio_queue::{Queue, QueueT};
use vm_memory::GuestMemory;

use vgpu_hwif::event::EVENT_RECORD_SIZE;
use vgpu_hwif::pod::Pod;
use vgpu_hwif::proto::MAX_COMMAND_SIZE;

use crate::core::control::{MAX_REPLY_SIZE, REPLY_HEADER_SIZE};
use crate::core::Device;
use chain::{walk_control, walk_event, ChainError};

/// Protocol errors logged at `warn` level; later ones are logged at
/// `debug` so that a misbehaving guest cannot flood the log.
const WARN_LIMIT: u64 = 16;

/// Errors of the queue itself (not of one chain).
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    /// The queue's rings could not be read or written.
    #[error("virtqueue access failed: {0}")]
    Queue(#[from] virtio_queue::Error),
}

/// What one processing pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueOutcome {
    /// Chains completed (put on the used ring).
    pub completed: u32,
    /// Of those, chains completed with used length 0 as protocol errors.
    pub rejected: u32,
    /// Whether the driver should be notified (interrupt).
    pub notify: bool,
}

fn protocol_error(device: &mut Device, queue: &str, head: u16, err: &ChainError) {
    device.count_protocol_error();
    let n = device.counters().protocol_errors;
    if n <= WARN_LIMIT {
        log::warn!("{queue} queue: chain {head} rejected: {err}");
        if n == WARN_LIMIT {
            log::warn!("further protocol errors are logged at debug level");
        }
    } else {
        log::debug!("{queue} queue: chain {head} rejected: {err}");
    }
}

/// Completes chain `head` with `len` bytes used. A head the queue refuses
/// (index beyond the queue size, whose chain was already rejected as empty)
/// cannot be put on the used ring at all.
fn complete<M: GuestMemory>(
    queue: &mut Queue,
    mem: &M,
    name: &str,
    head: u16,
    len: u32,
) -> Result<(), QueueError> {
    match queue.add_used(mem, head, len) {
        Ok(()) => Ok(()),
        Err(virtio_queue::Error::InvalidDescriptorIndex) => {
            log::debug!("{name} queue: head index {head} out of range, not completed");
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

/// Serves one control chain; returns the used length.
fn serve_command<M: GuestMemory>(
    chain: virtio_queue::DescriptorChain<&M>,
    device: &mut Device,
) -> Result<u32, ChainError> {
    let mem = chain.memory();
    let mut command = [0u8; MAX_COMMAND_SIZE + 1];
    let walked = walk_control(
        chain.clone(),
        &mut command,
        MAX_REPLY_SIZE,
        REPLY_HEADER_SIZE,
    )?;
    let bytes = command.get(..walked.command_len).unwrap_or(&[]);
    let room = usize::try_from(walked.writable.total()).unwrap_or(usize::MAX);
    let reply = device.handle_command(bytes, room);
    let written = walked.writable.write(mem, reply.as_bytes())?;
    Ok(u32::try_from(written).unwrap_or(0))
}

/// Executes every command the driver has made available on the control
/// queue.
pub fn process_control_queue<M: GuestMemory>(
    queue: &mut Queue,
    mem: &M,
    device: &mut Device,
) -> Result<QueueOutcome, QueueError> {
    let mut out = QueueOutcome::default();
    let mut idle_rounds = 0u32;
    loop {
        queue.disable_notification(mem)?;
        let mut progressed = false;
        while let Some(chain) = queue.pop_descriptor_chain(mem) {
            progressed = true;
            let head = chain.head_index();
            let used = match serve_command(chain, device) {
                Ok(n) => n,
                Err(e) => {
                    protocol_error(device, "control", head, &e);
                    out.rejected += 1;
                    0
                }
            };
            complete(queue, mem, "control", head, used)?;
            out.completed += 1;
        }
        idle_rounds = if progressed { 0 } else { idle_rounds + 1 };
        // Re-enable notifications; if the driver added chains meanwhile,
        // go round again. A ring that claims chains twice in a row but
        // yields none is broken: stop rather than spin.
        if !queue.enable_notification(mem)? || idle_rounds > 1 {
            break;
        }
    }
    if out.completed > 0 {
        out.notify = queue.needs_notification(mem)?;
    }
    Ok(out)
}

/// Writes pending event records into the buffers the driver has posted on
/// the event queue, one record per buffer, oldest first.
pub fn deliver_events<M: GuestMemory>(
    queue: &mut Queue,
    mem: &M,
    device: &mut Device,
) -> Result<QueueOutcome, QueueError> {
    let mut out = QueueOutcome::default();
    let mut idle_rounds = 0u32;
    loop {
        let mut progressed = false;
        while let Some(record) = device.next_event() {
            let Some(chain) = queue.pop_descriptor_chain(mem) else {
                break;
            };
            progressed = true;
            let head = chain.head_index();
            let used = match walk_event(chain, EVENT_RECORD_SIZE)
                .and_then(|w| w.write(mem, record.as_bytes()))
            {
                Ok(n) if n == EVENT_RECORD_SIZE => {
                    device.event_delivered();
                    EVENT_RECORD_SIZE as u32
                }
                Ok(n) => {
                    let e = ChainError::WritableTooSmall {
                        got: n as u64,
                        need: EVENT_RECORD_SIZE,
                    };
                    protocol_error(device, "event", head, &e);
                    out.rejected += 1;
                    0
                }
                Err(e) => {
                    protocol_error(device, "event", head, &e);
                    out.rejected += 1;
                    0
                }
            };
            complete(queue, mem, "event", head, used)?;
            out.completed += 1;
        }
        idle_rounds = if progressed { 0 } else { idle_rounds + 1 };
        // Ask for a kick when the driver posts more buffers (needed while
        // events wait); if buffers arrived meanwhile and events wait, go
        // round again, unless the ring keeps yielding nothing.
        let more_buffers = queue.enable_notification(mem)?;
        if !more_buffers || device.pending_events() == 0 || idle_rounds > 1 {
            break;
        }
    }
    if out.completed > 0 {
        out.notify = queue.needs_notification(mem)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
