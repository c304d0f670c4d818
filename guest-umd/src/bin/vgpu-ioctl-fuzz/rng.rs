//! The fuzzer's random numbers: SplitMix64, seeded, so a seed replays the
//! same sequence of choices (what the kernel answers can still steer a run
//! differently: a call that fails leaves no object to use later).

use vgpu_hwif::rng::SplitMix64;

/// A seeded generator: the project's SplitMix64 (`vgpu_hwif::rng`) with
/// the fuzzer's choices on top.
#[derive(Clone, Debug)]
pub struct Rng(SplitMix64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(SplitMix64::new(seed))
    }

    /// A generator for a thread or a child process, derived from this one.
    pub fn fork(&mut self, salt: u64) -> Rng {
        Rng(self.0.fork(salt))
    }

    pub fn next(&mut self) -> u64 {
        self.0.next_u64()
    }

    pub fn u32(&mut self) -> u32 {
        self.next() as u32
    }

    /// Uniform in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        debug_assert!(n > 0);
        self.0.below(n)
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        self.0.range(lo, hi)
    }

    /// True with probability `num`/`den`.
    pub fn chance(&mut self, num: u64, den: u64) -> bool {
        self.below(den) < num
    }

    /// One element of a non-empty slice.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }

    /// An index chosen by weight.
    pub fn weighted(&mut self, weights: &[u32]) -> usize {
        let total: u64 = weights.iter().map(|&w| u64::from(w)).sum();
        let mut x = self.below(total);
        for (i, &w) in weights.iter().enumerate() {
            if x < u64::from(w) {
                return i;
            }
            x -= u64::from(w);
        }
        weights.len() - 1
    }

    /// A value that tends to sit at an edge: 0, 1, powers of two and their
    /// neighbours, the type's maximum, or anything.
    pub fn edge_u64(&mut self) -> u64 {
        match self.below(8) {
            0 => *self.pick(&[0, 1, 2, u64::MAX, u64::MAX - 1, i64::MAX as u64, 1 << 63]),
            1..=3 => {
                let p = 1u64 << self.below(64);
                match self.below(3) {
                    0 => p,
                    1 => p.wrapping_sub(1),
                    _ => p.wrapping_add(1),
                }
            }
            4 => self.below(4096),
            5 => u64::MAX - self.below(8192),
            _ => self.next(),
        }
    }

    /// [`Rng::edge_u64`] for 32 bits.
    pub fn edge_u32(&mut self) -> u32 {
        match self.below(6) {
            0 => *self.pick(&[0, 1, 2, u32::MAX, u32::MAX - 1, i32::MAX as u32, 1 << 31]),
            1 | 2 => {
                let p = 1u32 << self.below(32);
                match self.below(3) {
                    0 => p,
                    1 => p.wrapping_sub(1),
                    _ => p.wrapping_add(1),
                }
            }
            3 => self.below(64) as u32,
            _ => self.u32(),
        }
    }

    /// Bytes of random content.
    pub fn fill(&mut self, out: &mut [u8]) {
        for chunk in out.chunks_mut(8) {
            let v = self.next().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_replays_its_sequence() {
        let a: Vec<u64> = (0..8).scan(Rng::new(7), |r, _| Some(r.next())).collect();
        let b: Vec<u64> = (0..8).scan(Rng::new(7), |r, _| Some(r.next())).collect();
        let c: Vec<u64> = (0..8).scan(Rng::new(8), |r, _| Some(r.next())).collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn bounded_choices_stay_in_bounds() {
        let mut r = Rng::new(1);
        for _ in 0..10_000 {
            assert!(r.below(3) < 3);
            let v = r.range(5, 9);
            assert!((5..=9).contains(&v));
            assert!(r.weighted(&[0, 3, 0, 1]) % 2 == 1);
        }
        let mut seen = [false; 3];
        for _ in 0..1000 {
            seen[r.below(3) as usize] = true;
        }
        assert_eq!(seen, [true; 3]);
    }
}
