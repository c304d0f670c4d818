//! Semaphore waits nothing can satisfy: `SAN-WAIT-UNSATISFIABLE`.
//!
//! When a ring has waited in `SEM_WAIT` for
//! [`crate::core::sanitize::SanConfig::wait_grace`], the sanitizer looks at every ring's
//! *queued* work — the packets between each ring's read and write
//! pointers, into the command buffers they call — for a `FENCE` or
//! `SEM_SIGNAL` that writes the semaphore with a value that satisfies the
//! wait (an atomic add might). A writer in a ring that is not itself
//! blocked can run; a writer queued behind another ring's blocked wait can
//! run only if that wait can be satisfied, and so on. The wait is
//! reported when nothing queued writes the semaphore, or when every writer
//! sits behind a wait that leads back to this one (a cycle), with the
//! chain of waits.
//!
//! The scan reads guest memory through software page walks (no TLB) and
//! stops after [`SCAN_BUDGET`] words; a scan that runs out assumes the wait
//! can be satisfied.

use std::collections::HashMap;

use vgpu_hwif::mmu::Access;
use vgpu_hwif::packet::{
    decode_header, Packet, MAX_INDIRECT_DEPTH, SEM_SIGNAL_ADD, SEM_WAIT_EQ, SEM_WAIT_GEQ,
    SEM_WAIT_NEQ,
};

use crate::core::mmu::{read_words, walk, AddressSpace, Mem};

/// Words the scan reads at most, over every ring.
pub const SCAN_BUDGET: usize = 1 << 20;

/// The in-flight operation at a ring's current position.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PendingOp {
    /// A `FENCE` or `SEM_SIGNAL` write not executed yet.
    Write {
        /// Where.
        va: u64,
        /// What.
        value: u64,
    },
    /// A `SEM_SIGNAL` add not executed yet.
    Add {
        /// Where.
        va: u64,
    },
    /// The `SEM_WAIT` the ring is blocked on.
    Wait {
        /// Semaphore.
        va: u64,
        /// Operand.
        value: u64,
        /// `SEM_WAIT_*`.
        op: u32,
    },
    /// Anything else.
    Other,
}

/// One ring as the scan sees it (copied out under the state lock).
#[derive(Clone, Debug)]
pub struct RingView {
    /// Context.
    pub ctx: u32,
    /// Engine.
    pub engine: u32,
    /// Address space.
    pub space: AddressSpace,
    /// Ring VA.
    pub va: u64,
    /// Ring size.
    pub size: u32,
    /// Read pointer.
    pub rptr: u32,
    /// Accepted write pointer.
    pub wptr: u32,
    /// Command buffers being executed, outermost first: (VA, size,
    /// offset of the next packet).
    pub frames: Vec<(u64, u32, u32)>,
    /// The operation in flight at the innermost level, and its length in
    /// words.
    pub pending: Option<(PendingOp, u32)>,
    /// Blocked in `SEM_WAIT` (`pending` is the wait).
    pub blocked: bool,
    /// GPU VA of the blocking packet.
    pub packet_va: u64,
}

/// A queued write of a semaphore.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Writer {
    /// Index of the ring in the views.
    pub ring: usize,
    /// Guest-physical address written.
    pub pa: u64,
    /// Value written (for an add: the operand).
    pub value: u64,
    /// An atomic add.
    pub add: bool,
    /// GPU VA of the packet.
    pub packet_va: u64,
}

/// One link of a wait chain: a blocked ring and the semaphore it waits on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Link {
    /// Context.
    pub ctx: u32,
    /// Engine.
    pub engine: u32,
    /// GPU VA of the `SEM_WAIT`.
    pub packet_va: u64,
    /// Semaphore VA (in that context).
    pub va: u64,
    /// Value waited for and the operation.
    pub value: u64,
    /// `SEM_WAIT_*`.
    pub op: u32,
}

/// Why a wait cannot be satisfied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unsatisfiable {
    /// No queued packet writes the semaphore with a satisfying value.
    NothingQueued {
        /// The semaphore's value now.
        current: u64,
    },
    /// Every writer is behind a wait that leads back here.
    Cycle {
        /// The semaphore's value now.
        current: u64,
        /// The waits, starting with the one analysed.
        chain: Vec<Link>,
    },
}

/// Reads `n` words at `va` of `space` through software walks: all of
/// them or nothing.
fn read_all(mem: &Mem, space: &AddressSpace, va: u64, n: usize) -> Option<Vec<u32>> {
    let words = read_words(mem, space, va, n);
    (words.len() == n).then_some(words)
}

/// The scanner of one ring's queued work.
struct Scan<'a> {
    mem: &'a Mem,
    generation: u32,
    budget: &'a mut usize,
    out: Vec<Writer>,
    ring: usize,
    space: AddressSpace,
    exhausted: bool,
}

impl Scan<'_> {
    fn pa(&self, va: u64) -> Option<u64> {
        walk(self.mem, &self.space, va, Access::Read)
            .ok()
            .map(|m| m.pa(va))
    }

    fn writer(&mut self, va: u64, value: u64, add: bool, packet_va: u64) {
        if let Some(pa) = self.pa(va) {
            self.out.push(Writer {
                ring: self.ring,
                pa,
                value,
                add,
                packet_va,
            });
        }
    }

    /// Scans `words` of packets at `va` (a buffer at indirect `depth`).
    fn stream(&mut self, va: u64, words: &[u32], depth: u32) {
        let mut i = 0usize;
        while i < words.len() {
            let Ok(hdr) = decode_header(self.generation, words[i]) else {
                return;
            };
            let end = i + hdr.words as usize;
            let Some(w) = words.get(i..end) else {
                return;
            };
            let pva = va.wrapping_add(4 * i as u64);
            match Packet::decode(hdr, w) {
                Ok(Packet::Fence { va: f, seqno, .. }) => self.writer(f, seqno, false, pva),
                Ok(Packet::SemSignal { va: s, value, op }) => {
                    self.writer(s, value, op == SEM_SIGNAL_ADD, pva)
                }
                Ok(Packet::Indirect { va: b, size }) if depth < MAX_INDIRECT_DEPTH => {
                    self.buffer(b, size, 0, depth + 1)
                }
                Ok(_) => {}
                Err(_) => return,
            }
            i = end;
        }
    }

    /// Scans a command buffer from `offset`.
    fn buffer(&mut self, va: u64, size: u32, offset: u32, depth: u32) {
        if self.exhausted {
            return;
        }
        let n = (size.saturating_sub(offset) / 4) as usize;
        if n > *self.budget {
            self.exhausted = true;
            return;
        }
        *self.budget -= n;
        let start = va.wrapping_add(u64::from(offset));
        if let Some(w) = read_all(self.mem, &self.space, start, n) {
            self.stream(start, &w, depth);
        }
    }

    /// Scans ring words from `from` to `to` (ring pointers).
    fn ring(&mut self, v: &RingView, from: u32, to: u32) {
        let n = (to.wrapping_sub(from) / 4) as usize;
        if n == 0 || n > v.size as usize / 4 {
            return;
        }
        if n > *self.budget {
            self.exhausted = true;
            return;
        }
        *self.budget -= n;
        let mut words = Vec::with_capacity(n);
        let mut p = from;
        while words.len() < n {
            let off = p & (v.size - 1);
            let run = ((v.size - off) / 4) as usize;
            let take = run.min(n - words.len());
            match read_all(self.mem, &self.space, v.va + u64::from(off), take) {
                Some(w) => words.extend(w),
                None => return,
            }
            p = p.wrapping_add(4 * take as u32);
        }
        self.stream(v.va + u64::from(from & (v.size - 1)), &words, 0);
    }
}

/// Every queued semaphore writer of every ring, and whether the scan ran
/// out of budget.
fn writers(mem: &Mem, generation: u32, views: &[RingView]) -> (Vec<Writer>, bool) {
    let mut budget = SCAN_BUDGET;
    let mut all = Vec::new();
    let mut exhausted = false;
    for (i, v) in views.iter().enumerate() {
        let mut s = Scan {
            mem,
            generation,
            budget: &mut budget,
            out: Vec::new(),
            ring: i,
            space: v.space,
            exhausted: false,
        };
        let pending_words = match v.pending {
            Some((op, words)) => {
                match op {
                    PendingOp::Write { va, value } => s.writer(va, value, false, v.packet_va),
                    PendingOp::Add { va } => s.writer(va, 1, true, v.packet_va),
                    PendingOp::Wait { .. } | PendingOp::Other => {}
                }
                4 * words
            }
            None => 0,
        };
        let depth = v.frames.len() as u32;
        let mut ring_from = v.rptr.wrapping_add(pending_words);
        if let Some(&(va, size, off)) = v.frames.last() {
            s.buffer(va, size, off.saturating_add(pending_words), depth);
            for &(va, size, off) in v.frames.iter().rev().skip(1) {
                // After the INDIRECT (4 words) that called the inner buffer.
                s.buffer(va, size, off.saturating_add(16), depth);
            }
            ring_from = v.rptr.wrapping_add(16);
        }
        s.ring(v, ring_from, v.wptr);
        exhausted |= s.exhausted;
        all.extend(s.out);
    }
    (all, exhausted)
}

/// Analyses the wait of `views[target]` (which must be blocked): `None` if
/// something queued can satisfy it.
pub fn analyse(
    mem: &Mem,
    generation: u32,
    views: &[RingView],
    target: usize,
) -> Option<Unsatisfiable> {
    let (ws, exhausted) = writers(mem, generation, views);
    if exhausted {
        return None;
    }
    // Each blocked ring's wait: (pa, value, op), and its current value.
    let mut waits: HashMap<usize, (u64, u64, u32, u64)> = HashMap::new();
    for (i, v) in views.iter().enumerate() {
        if let (true, Some((PendingOp::Wait { va, value, op }, _))) = (v.blocked, v.pending) {
            let Ok(m) = walk(mem, &v.space, va, Access::Read) else {
                continue;
            };
            let pa = m.pa(va);
            let cur = read_u64(mem, pa)?;
            waits.insert(i, (pa, value, op, cur));
        }
    }
    let &(_, _, _, current) = waits.get(&target)?;
    let mut visiting = vec![target];
    let mut cycle = false;
    if can_run(target, &ws, &waits, &mut visiting, &mut cycle) {
        return None;
    }
    if !cycle {
        return Some(Unsatisfiable::NothingQueued { current });
    }
    // The chain: follow, from the target, a writer behind a blocked wait.
    let mut chain = Vec::new();
    let mut at = target;
    for _ in 0..views.len() {
        let Some(v) = views.get(at) else { break };
        let Some(&(pa, value, op, _)) = waits.get(&at) else {
            break;
        };
        let (wva, _) = match v.pending {
            Some((PendingOp::Wait { va, .. }, _)) => (va, ()),
            _ => (0, ()),
        };
        chain.push(Link {
            ctx: v.ctx,
            engine: v.engine,
            packet_va: v.packet_va,
            va: wva,
            value,
            op,
        });
        let next = ws
            .iter()
            .find(|w| w.ring != at && w.pa == pa && satisfies(w, value, op))
            .map(|w| w.ring);
        match next {
            Some(n) if n == target => break,
            Some(n)
                if chain
                    .iter()
                    .all(|l| (l.ctx, l.engine) != (views[n].ctx, views[n].engine)) =>
            {
                at = n
            }
            _ => break,
        }
    }
    Some(Unsatisfiable::Cycle { current, chain })
}

fn read_u64(mem: &Mem, pa: u64) -> Option<u64> {
    use vm_memory::Bytes;
    mem.read_obj::<u64>(vm_memory::GuestAddress(pa))
        .ok()
        .map(u64::from_le)
}

/// Whether a semaphore holding `cur` satisfies a wait for `value` with
/// `op` (the command processor's rule).
fn sem_satisfied(op: u32, cur: u64, value: u64) -> bool {
    match op {
        SEM_WAIT_GEQ => cur >= value,
        SEM_WAIT_EQ => cur == value,
        SEM_WAIT_NEQ => cur != value,
        _ => false,
    }
}

/// Whether writer `w` may satisfy a wait for `value` with `op`.
fn satisfies(w: &Writer, value: u64, op: u32) -> bool {
    w.add || sem_satisfied(op, w.value, value)
}

/// Whether the wait of blocked ring `r` can be satisfied by queued work.
fn can_run(
    r: usize,
    ws: &[Writer],
    waits: &HashMap<usize, (u64, u64, u32, u64)>,
    visiting: &mut Vec<usize>,
    cycle: &mut bool,
) -> bool {
    let Some(&(pa, value, op, cur)) = waits.get(&r) else {
        return true;
    };
    if sem_satisfied(op, cur, value) {
        return true;
    }
    for w in ws.iter().filter(|w| w.ring != r && w.pa == pa) {
        if !satisfies(w, value, op) {
            continue;
        }
        if !waits.contains_key(&w.ring) {
            // Its ring is not blocked: it runs.
            return true;
        }
        if visiting.contains(&w.ring) {
            *cycle = true;
            continue;
        }
        visiting.push(w.ring);
        let ok = can_run(w.ring, ws, waits, visiting, cycle);
        visiting.pop();
        if ok {
            return true;
        }
    }
    false
}
