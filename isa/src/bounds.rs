//! Buffer-exact bounds: a [`GlobalMemory`] that lets an access through only
//! if all its bytes lie inside one of a list of buffers.
//!
//! A paged memory (the device's MMU, [`crate::SparseMemory`]) faults only
//! outside its pages, so an access a few bytes past the end of a buffer but
//! inside the buffer's last page succeeds and reads zeros or writes bytes no
//! one looks at. `vgpu-as run --strict-bounds` wraps its memory in
//! [`BufferBounds`] so that such an overrun is reported as a fault
//! (`OutOfBounds`) at the first lane that makes it.
//!
//! Every access goes through the per-access methods, checked lane by lane:
//! the wrapper offers no direct pages, so the JIT's inline page accesses
//! never bypass it, and faults keep their exact VA, lane and PC.

use crate::inst::AtomOp;
use crate::mem::{Access, GlobalMemory, MemFault, MemFaultReason};

/// One buffer: the GPU VAs `va .. va + len`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BufferRange {
    pub va: u64,
    pub len: u64,
}

impl BufferRange {
    /// Whether `[va, va + size)` lies inside this buffer.
    fn holds(&self, va: u64, size: u8) -> bool {
        va.checked_sub(self.va)
            .is_some_and(|off| u128::from(off) + u128::from(size) <= u128::from(self.len))
    }
}

/// `inner` restricted to `buffers`: an access that does not lie wholly in
/// one buffer faults with [`MemFaultReason::OutOfBounds`] before `inner` is
/// asked.
pub struct BufferBounds<'a, M: GlobalMemory + ?Sized> {
    inner: &'a M,
    buffers: Vec<BufferRange>,
}

impl<'a, M: GlobalMemory + ?Sized> BufferBounds<'a, M> {
    pub fn new(inner: &'a M, buffers: Vec<BufferRange>) -> Self {
        Self { inner, buffers }
    }

    /// The buffer `[va, va + size)` lies in, if any.
    pub fn buffer_of(&self, va: u64, size: u8) -> Option<&BufferRange> {
        self.buffers.iter().find(|b| b.holds(va, size))
    }

    /// The buffer whose end is closest below `va` (the one an overrun at
    /// `va` most likely ran off), with the distance in bytes past its end.
    pub fn overrun_of(&self, va: u64) -> Option<(&BufferRange, u64)> {
        self.buffers
            .iter()
            .filter_map(|b| {
                let end = b.va.checked_add(b.len)?;
                va.checked_sub(end).map(|past| (b, past))
            })
            .min_by_key(|&(_, past)| past)
    }

    fn check(&self, va: u64, size: u8, access: Access) -> Result<(), MemFault> {
        if self.buffer_of(va, size).is_some() {
            Ok(())
        } else {
            Err(MemFault {
                va,
                access,
                size,
                reason: MemFaultReason::OutOfBounds,
            })
        }
    }
}

impl<M: GlobalMemory + ?Sized> GlobalMemory for BufferBounds<'_, M> {
    fn load(&self, va: u64, size: u8) -> Result<u64, MemFault> {
        self.check(va, size, Access::Read)?;
        self.inner.load(va, size)
    }

    fn store(&self, va: u64, size: u8, value: u64) -> Result<(), MemFault> {
        self.check(va, size, Access::Write)?;
        self.inner.store(va, size, value)
    }

    fn atomic32(&self, va: u64, op: AtomOp, b: u32, c: u32) -> Result<u32, MemFault> {
        self.check(va, 4, Access::Atomic)?;
        self.inner.atomic32(va, op, b, c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SparseMemory;

    #[test]
    fn accesses_inside_pass_and_past_the_end_fault() {
        let mut mem = SparseMemory::new();
        mem.map(0x1_0000_0000, 40, true);
        let b = BufferBounds::new(
            &mem,
            vec![BufferRange {
                va: 0x1_0000_0000,
                len: 40,
            }],
        );
        b.store(0x1_0000_0000 + 36, 4, 7).unwrap();
        assert_eq!(b.load(0x1_0000_0000 + 36, 4).unwrap(), 7);
        // One element past the end: inside the mapped page, outside the buffer.
        assert_eq!(mem.load(0x1_0000_0000 + 40, 4).unwrap(), 0);
        let f = b.load(0x1_0000_0000 + 40, 4).unwrap_err();
        assert_eq!(
            (f.va, f.access, f.reason),
            (
                0x1_0000_0000 + 40,
                Access::Read,
                MemFaultReason::OutOfBounds
            )
        );
        // Straddling the end.
        assert!(b.load(0x1_0000_0000 + 32, 8).is_ok());
        assert!(b.load(0x1_0000_0000 + 36, 8).is_err());
        assert!(b.atomic32(0x1_0000_0000 + 40, AtomOp::Add, 1, 0).is_err());
        // Before the start.
        assert!(b.store(0x1_0000_0000 - 4, 4, 0).is_err());
        let (r, past) = b.overrun_of(0x1_0000_0000 + 44).unwrap();
        assert_eq!((r.va, past), (0x1_0000_0000, 4));
        // No VA overflow at the top of the address space.
        let top = BufferBounds::new(
            &mem,
            vec![BufferRange {
                va: u64::MAX - 3,
                len: 4,
            }],
        );
        assert!(top.buffer_of(u64::MAX - 3, 4).is_some());
        assert!(top.buffer_of(u64::MAX - 3, 8).is_none());
    }
}
