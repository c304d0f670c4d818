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
//! A ring whose own structures are inconsistent — an available index more
//! than the queue size ahead, a head or `next` index beyond the queue, a
//! chain that does not end within the queue size (a loop), a descriptor
//! table or ring outside guest memory — cannot be answered chain by chain:
//! the pass stops with a [`QueueError`] and the caller stops serving the
//! queue until the driver re-initialises it.
//!
//! Notification suppression follows the queue's negotiated mode
//! (`VIRTIO_RING_F_EVENT_IDX` or the flags fields); the returned
//! [`QueueOutcome::notify`] says whether the driver wants an interrupt.

pub mod chain;

use std::sync::atomic::Ordering;

use virtio_queue::{DescriptorChain, Queue, QueueT};
use vm_memory::{Bytes, GuestAddress, GuestMemory};

use vgpu_hwif::event::EVENT_RECORD_SIZE;
use vgpu_hwif::pod::Pod;
use vgpu_hwif::proto::MAX_COMMAND_SIZE;

use crate::core::control::{MAX_REPLY_SIZE, REPLY_HEADER_SIZE};
use crate::core::Device;
use chain::{walk_control, walk_event, ChainError};

/// Protocol errors logged at `warn` level; later ones are logged at
/// `debug` so that a misbehaving guest cannot flood the log.
const WARN_LIMIT: u64 = 16;

/// Errors of the queue itself (not of one chain): the ring is broken.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    /// The queue's rings could not be read or written.
    #[error("virtqueue access failed: {0}")]
    Queue(#[from] virtio_queue::Error),
    /// The available index moved more than a queue's worth past the
    /// device's position (or backwards).
    #[error(
        "available index {avail} is {ahead} entries past the device's position {next}, \
         more than the queue size {size}"
    )]
    AvailIndex {
        /// The driver's available index.
        avail: u16,
        /// The device's next available position.
        next: u16,
        /// `avail - next`, wrapping.
        ahead: u16,
        /// The queue size.
        size: u16,
    },
    /// An available ring entry names a descriptor beyond the queue.
    #[error("available ring entry names descriptor {head}, beyond the queue size {size}")]
    HeadOutOfRange {
        /// The head index.
        head: u16,
        /// The queue size.
        size: u16,
    },
    /// A descriptor links to one beyond the queue.
    #[error(
        "descriptor {index} of the chain at {head} links to descriptor {next}, \
         beyond the queue size {size}"
    )]
    NextOutOfRange {
        /// The chain's head.
        head: u16,
        /// The descriptor with the bad link.
        index: u16,
        /// Its `next` field.
        next: u16,
        /// The queue size.
        size: u16,
    },
    /// A chain does not end within the queue size: its links loop.
    #[error("the chain at descriptor {head} does not end within {size} descriptors (a loop)")]
    ChainLoop {
        /// The chain's head.
        head: u16,
        /// The queue size.
        size: u16,
    },
    /// A descriptor of the table cannot be read.
    #[error("descriptor {index} at {addr:#x} is outside guest memory")]
    DescriptorTable {
        /// The descriptor index.
        index: u16,
        /// Its guest-physical address.
        addr: u64,
    },
}

/// Checks the available index against the device's position: the driver
/// can make at most a queue's worth of chains available.
fn check_avail<M: GuestMemory>(queue: &Queue, mem: &M) -> Result<(), QueueError> {
    let avail = queue.avail_idx(mem, Ordering::Acquire)?.0;
    let next = queue.next_avail();
    let ahead = avail.wrapping_sub(next);
    let size = queue.size();
    if ahead > size {
        return Err(QueueError::AvailIndex {
            avail,
            next,
            ahead,
            size,
        });
    }
    Ok(())
}

/// Follows the links of the chain at `head` through the queue's descriptor
/// table: every index within the queue, and an end within the queue size.
/// An indirect descriptor ends the walk (its table is a buffer of this
/// chain, checked as such by [`chain`]).
fn check_links<M: GuestMemory>(queue: &Queue, mem: &M, head: u16) -> Result<(), QueueError> {
    use virtio_queue::desc::split::Descriptor;
    let size = queue.size();
    if head >= size {
        return Err(QueueError::HeadOutOfRange { head, size });
    }
    let table = queue.desc_table();
    let mut index = head;
    for _ in 0..size {
        let addr = table.checked_add(16 * u64::from(index));
        let desc: Descriptor = addr
            .and_then(|a| mem.read_obj(GuestAddress(a)).ok())
            .ok_or(QueueError::DescriptorTable {
                index,
                addr: addr.unwrap_or(u64::MAX),
            })?;
        if desc.refers_to_indirect_table() || !desc.has_next() {
            return Ok(());
        }
        let next = desc.next();
        if next >= size {
            return Err(QueueError::NextOutOfRange {
                head,
                index,
                next,
                size,
            });
        }
        index = next;
    }
    Err(QueueError::ChainLoop { head, size })
}

/// The next available chain, once the ring's structure around it checks
/// out.
fn next_chain<'m, M: GuestMemory>(
    queue: &mut Queue,
    mem: &'m M,
) -> Result<Option<DescriptorChain<&'m M>>, QueueError> {
    check_avail(queue, mem)?;
    let Some(chain) = queue.pop_descriptor_chain(mem) else {
        return Ok(None);
    };
    check_links(queue, mem, chain.head_index())?;
    Ok(Some(chain))
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

/// Completes chain `head` (checked to be within the queue) with `len`
/// bytes used.
fn complete<M: GuestMemory>(
    queue: &mut Queue,
    mem: &M,
    head: u16,
    len: u32,
) -> Result<(), QueueError> {
    Ok(queue.add_used(mem, head, len)?)
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
) -> Result<QueueOutcome, RingBroken> {
    let mut out = QueueOutcome::default();
    let result = control_pass(queue, mem, device, &mut out);
    finish(queue, mem, out, result)
}

fn control_pass<M: GuestMemory>(
    queue: &mut Queue,
    mem: &M,
    device: &mut Device,
    out: &mut QueueOutcome,
) -> Result<(), QueueError> {
    let mut idle_rounds = 0u32;
    loop {
        queue.disable_notification(mem)?;
        let mut progressed = false;
        while let Some(chain) = next_chain(queue, mem)? {
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
            complete(queue, mem, head, used)?;
            out.completed += 1;
        }
        idle_rounds = if progressed { 0 } else { idle_rounds + 1 };
        // Re-enable notifications; if the driver added chains meanwhile,
        // go round again. A ring that claims chains twice in a row but
        // yields none is broken: stop rather than spin.
        if !queue.enable_notification(mem)? || idle_rounds > 1 {
            return Ok(());
        }
    }
}

/// Writes pending event records into the buffers the driver has posted on
/// the event queue, one record per buffer, oldest first.
pub fn deliver_events<M: GuestMemory>(
    queue: &mut Queue,
    mem: &M,
    device: &mut Device,
) -> Result<QueueOutcome, RingBroken> {
    let mut out = QueueOutcome::default();
    let result = event_pass(queue, mem, device, &mut out);
    finish(queue, mem, out, result)
}

fn event_pass<M: GuestMemory>(
    queue: &mut Queue,
    mem: &M,
    device: &mut Device,
    out: &mut QueueOutcome,
) -> Result<(), QueueError> {
    let mut idle_rounds = 0u32;
    loop {
        let mut progressed = false;
        while let Some(record) = device.next_event() {
            let Some(chain) = next_chain(queue, mem)? else {
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
            complete(queue, mem, head, used)?;
            out.completed += 1;
        }
        idle_rounds = if progressed { 0 } else { idle_rounds + 1 };
        // Ask for a kick when the driver posts more buffers (needed while
        // events wait); if buffers arrived meanwhile and events wait, go
        // round again, unless the ring keeps yielding nothing.
        let more_buffers = queue.enable_notification(mem)?;
        if !more_buffers || device.pending_events() == 0 || idle_rounds > 1 {
            return Ok(());
        }
    }
}

/// A pass that found its ring broken: why, and what it completed before
/// (those chains still want their interrupt).
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct RingBroken {
    /// What is wrong with the ring.
    pub error: QueueError,
    /// What the pass did before it stopped.
    pub outcome: QueueOutcome,
}

/// Whether the driver wants an interrupt for what a pass completed.
fn finish<M: GuestMemory>(
    queue: &mut Queue,
    mem: &M,
    mut out: QueueOutcome,
    result: Result<(), QueueError>,
) -> Result<QueueOutcome, RingBroken> {
    let notify = if out.completed > 0 {
        queue.needs_notification(mem).map_err(QueueError::from)
    } else {
        Ok(false)
    };
    match (result, notify) {
        (Ok(()), Ok(notify)) => {
            out.notify = notify;
            Ok(out)
        }
        (Ok(()), Err(error)) => Err(RingBroken {
            error,
            outcome: out,
        }),
        (Err(error), notify) => {
            // The used ring may be what broke: interrupt if in doubt.
            out.notify = notify.unwrap_or(out.completed > 0);
            Err(RingBroken {
                error,
                outcome: out,
            })
        }
    }
}

#[cfg(test)]
mod tests;
