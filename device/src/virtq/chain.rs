//! Walking descriptor chains safely: every descriptor is checked against
//! guest memory before it is used, readable parts are copied into a bounded
//! host buffer, and writable parts are remembered only as far as a reply
//! needs.

use virtio_queue::DescriptorChain;
use vm_memory::{Bytes, GuestAddress, GuestMemory, GuestMemoryError, Permissions};

/// Why a descriptor chain cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum ChainError {
    /// The chain has no descriptor (bad head index or unreadable table).
    #[error("descriptor chain is empty or its descriptor table is unreadable")]
    Empty,
    /// A device-readable descriptor follows a device-writable one.
    #[error("readable descriptor after a writable one")]
    ReadableAfterWritable,
    /// A buffer that must be device-writable only has a readable part.
    #[error("event buffer has a device-readable descriptor")]
    ReadableInEventBuffer,
    /// A descriptor points outside guest memory.
    #[error("descriptor {addr:#x}+{len:#x} is outside guest memory")]
    OutsideGuestMemory {
        /// Guest physical address.
        addr: u64,
        /// Length.
        len: u32,
    },
    /// The chain has no device-writable part.
    #[error("no device-writable part")]
    NoWritable,
    /// The device-writable part is too small.
    #[error("device-writable part of {got} bytes is smaller than {need}")]
    WritableTooSmall {
        /// Bytes available.
        got: u64,
        /// Bytes required.
        need: usize,
    },
    /// Guest memory could not be accessed.
    #[error("guest memory access failed: {0}")]
    Memory(#[from] GuestMemoryError),
}

/// One device-writable descriptor.
#[derive(Debug, Clone, Copy)]
struct Segment {
    addr: GuestAddress,
    len: u32,
}

/// The device-writable part of a chain: total size, and the first segments
/// up to a byte limit (so a chain of many tiny descriptors cannot make the
/// device allocate without bound).
#[derive(Debug)]
pub struct WritablePart {
    segments: Vec<Segment>,
    recorded: u64,
    limit: u64,
    total: u64,
}

impl WritablePart {
    fn new(limit: usize) -> Self {
        WritablePart {
            segments: Vec::new(),
            recorded: 0,
            limit: limit as u64,
            total: 0,
        }
    }

    fn push(&mut self, addr: GuestAddress, len: u32) {
        self.total = self.total.saturating_add(u64::from(len));
        if len == 0 || self.recorded >= self.limit {
            return;
        }
        self.segments.push(Segment { addr, len });
        self.recorded = self.recorded.saturating_add(u64::from(len));
    }

    /// Total bytes of the writable part.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Writes `bytes` across the segments. `bytes` must not be longer than
    /// the limit the part was walked with; a longer input is cut there.
    pub fn write<M: GuestMemory + ?Sized>(
        &self,
        mem: &M,
        bytes: &[u8],
    ) -> Result<usize, ChainError> {
        let mut done = 0usize;
        for seg in &self.segments {
            let Some(rest) = bytes.get(done..) else { break };
            if rest.is_empty() {
                break;
            }
            let n = rest.len().min(seg.len as usize);
            let chunk = rest.get(..n).unwrap_or(&[]);
            mem.write_slice(chunk, seg.addr)?;
            done += n;
        }
        Ok(done)
    }
}

fn check_range<M: GuestMemory + ?Sized>(
    mem: &M,
    addr: GuestAddress,
    len: u32,
    access: Permissions,
) -> Result<(), ChainError> {
    if len == 0 || mem.check_range(addr, len as usize, access) {
        Ok(())
    } else {
        Err(ChainError::OutsideGuestMemory { addr: addr.0, len })
    }
}

/// A walked control chain.
#[derive(Debug)]
pub struct ControlChain {
    /// Bytes copied into the command buffer (at most its length).
    pub command_len: usize,
    /// The reply buffer.
    pub writable: WritablePart,
}

/// Walks a control chain: the readable part is copied into `command` (as
/// much as fits: a longer command is detected by the caller from a full
/// buffer), the writable part is recorded up to `reply_limit` bytes and
/// must hold at least `min_reply` bytes.
pub fn walk_control<M>(
    chain: DescriptorChain<&M>,
    command: &mut [u8],
    reply_limit: usize,
    min_reply: usize,
) -> Result<ControlChain, ChainError>
where
    M: GuestMemory + ?Sized,
{
    let mem = chain.memory();
    let mut copied = 0usize;
    let mut writable = WritablePart::new(reply_limit);
    let mut in_writable = false;
    let mut descriptors = 0usize;
    for desc in chain.clone() {
        descriptors += 1;
        if desc.is_write_only() {
            check_range(mem, desc.addr(), desc.len(), Permissions::Write)?;
            in_writable = true;
            writable.push(desc.addr(), desc.len());
        } else {
            if in_writable {
                return Err(ChainError::ReadableAfterWritable);
            }
            check_range(mem, desc.addr(), desc.len(), Permissions::Read)?;
            let room = command.len().saturating_sub(copied);
            let n = room.min(desc.len() as usize);
            if n > 0 {
                let dst = command
                    .get_mut(copied..copied + n)
                    .ok_or(ChainError::Empty)?;
                mem.read_slice(dst, desc.addr())?;
                copied += n;
            }
        }
    }
    if descriptors == 0 {
        return Err(ChainError::Empty);
    }
    if writable.total() == 0 {
        return Err(ChainError::NoWritable);
    }
    if writable.total() < min_reply as u64 {
        return Err(ChainError::WritableTooSmall {
            got: writable.total(),
            need: min_reply,
        });
    }
    Ok(ControlChain {
        command_len: copied,
        writable,
    })
}

/// Walks an event buffer chain: device-writable only, at least `need`
/// bytes.
pub fn walk_event<M>(chain: DescriptorChain<&M>, need: usize) -> Result<WritablePart, ChainError>
where
    M: GuestMemory + ?Sized,
{
    let mem = chain.memory();
    let mut writable = WritablePart::new(need);
    let mut descriptors = 0usize;
    for desc in chain.clone() {
        descriptors += 1;
        if !desc.is_write_only() {
            return Err(ChainError::ReadableInEventBuffer);
        }
        check_range(mem, desc.addr(), desc.len(), Permissions::Write)?;
        writable.push(desc.addr(), desc.len());
    }
    if descriptors == 0 {
        return Err(ChainError::Empty);
    }
    if writable.total() == 0 {
        return Err(ChainError::NoWritable);
    }
    if writable.total() < need as u64 {
        return Err(ChainError::WritableTooSmall {
            got: writable.total(),
            need,
        });
    }
    Ok(writable)
}
