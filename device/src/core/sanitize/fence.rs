//! Fence slots: `SAN-FENCE-REGRESS` and `SAN-FENCE-WRAP`.
//!
//! Every value a `FENCE` packet writes is remembered per (context, VA):
//! a slot's values must only grow. A smaller value is a regression, unless
//! the previous value was at the top of a 32- or 64-bit counter and the
//! new one near zero (the driver's counter wrapped); a value within
//! [`WRAP_MARGIN`] of 2^64 is a counter about to wrap. A context's slots
//! are forgotten when the context is created or destroyed (a new context
//! starts its seqnos again).

use std::collections::HashMap;

/// How close to the top of a counter a value must be to count as about to
/// wrap.
pub const WRAP_MARGIN: u64 = 1 << 20;

/// Fence slots remembered (a bound on memory; the table is cleared when it
/// is full).
const MAX_SLOTS: usize = 1 << 16;

/// The last fence written to a slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LastFence {
    /// The value.
    pub value: u64,
    /// Engine that wrote it.
    pub engine: u32,
    /// Its packet's VA.
    pub packet_va: u64,
    /// Its packet's header.
    pub header: u32,
    /// When.
    pub time_ns: u64,
}

/// What a fence write was found to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// In order.
    Ok,
    /// Smaller than the last value.
    Regress(LastFence),
    /// The counter wrapped (from the top of 32 or 64 bits to near zero).
    Wrapped(LastFence),
    /// The value is within [`WRAP_MARGIN`] of 2^64.
    AboutToWrap,
}

/// Every fence slot's last value.
#[derive(Debug, Default)]
pub struct Fences {
    slots: HashMap<(u32, u64), LastFence>,
}

impl Fences {
    /// A fence write of `f.value` to (`ctx`, `va`): its verdict, and it is
    /// remembered.
    pub fn write(&mut self, ctx: u32, va: u64, f: LastFence) -> Verdict {
        if self.slots.len() >= MAX_SLOTS {
            self.slots.clear();
        }
        let prev = self.slots.insert((ctx, va), f);
        let near_top = |v: u64, bits: u32| {
            let top = if bits == 64 {
                u64::MAX
            } else {
                (1u64 << bits) - 1
            };
            v <= top && top - v < WRAP_MARGIN
        };
        match prev {
            Some(p) if f.value < p.value => {
                let wrapped =
                    (near_top(p.value, 32) || near_top(p.value, 64)) && f.value < WRAP_MARGIN;
                if wrapped {
                    Verdict::Wrapped(p)
                } else {
                    Verdict::Regress(p)
                }
            }
            _ if near_top(f.value, 64) => Verdict::AboutToWrap,
            _ => Verdict::Ok,
        }
    }

    /// Forgets context `ctx`'s slots.
    pub fn forget(&mut self, ctx: u32) {
        self.slots.retain(|(c, _), _| *c != ctx);
    }

    /// Forgets every slot.
    pub fn clear(&mut self) {
        self.slots.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(value: u64) -> LastFence {
        LastFence {
            value,
            engine: 0,
            packet_va: 0x40,
            header: 0x602,
            time_ns: value,
        }
    }

    #[test]
    fn values_must_grow_per_slot() {
        let mut t = Fences::default();
        assert_eq!(t.write(1, 0x80, f(1)), Verdict::Ok);
        assert_eq!(t.write(1, 0x80, f(2)), Verdict::Ok);
        assert_eq!(
            t.write(1, 0x80, f(2)),
            Verdict::Ok,
            "equal is not a regression"
        );
        assert_eq!(t.write(2, 0x80, f(1)), Verdict::Ok, "another context");
        assert_eq!(t.write(1, 0x88, f(1)), Verdict::Ok, "another slot");
        assert_eq!(t.write(1, 0x80, f(1)), Verdict::Regress(f(2)));
        t.forget(1);
        assert_eq!(t.write(1, 0x80, f(0)), Verdict::Ok);
    }

    #[test]
    fn wraps_are_told_apart() {
        let mut t = Fences::default();
        assert_eq!(t.write(1, 0, f(0xffff_fff0)), Verdict::Ok);
        assert_eq!(t.write(1, 0, f(3)), Verdict::Wrapped(f(0xffff_fff0)));
        assert_eq!(t.write(1, 8, f(u64::MAX - 5)), Verdict::AboutToWrap);
        assert_eq!(t.write(1, 8, f(1)), Verdict::Wrapped(f(u64::MAX - 5)));
        assert_eq!(t.write(1, 16, f(1 << 40)), Verdict::Ok);
        assert_eq!(t.write(1, 16, f(5)), Verdict::Regress(f(1 << 40)));
    }
}
