//! The project's seeded pseudo-random generators, one of each kind, shared
//! by the device's fault injector, the tools and the tests. The injector's
//! sequence is part of what a seed replays (campaigns, recorded sessions):
//! it never changes.

/// The golden-ratio increment of SplitMix64.
const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;

/// SplitMix64's output function of a state.
const fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// xorshift64*, seeded through SplitMix64 (the fault injector's).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed` (any value; the state is never 0).
    pub const fn new(seed: u64) -> Rng {
        Rng(mix(seed.wrapping_add(GOLDEN)) | 1)
    }

    /// A generator whose state is `state` as it is (0 becomes 1).
    pub const fn from_state(state: u64) -> Rng {
        Rng(if state == 0 { 1 } else { state })
    }

    /// The next 64 bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A value in `0..n` (`n` > 0), by remainder.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// A value in `[0, 1)` with 53 random bits.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Shuffles `v` (Fisher-Yates).
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            v.swap(i, j);
        }
    }
}

/// SplitMix64 (the ioctl fuzzer's and the ISA tests').
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator starting at state `seed`.
    pub const fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    /// The next 64 bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(GOLDEN);
        mix(self.0)
    }

    /// A generator for a thread or a child, derived from this one.
    pub fn fork(&mut self, salt: u64) -> SplitMix64 {
        SplitMix64(self.next_u64() ^ salt.wrapping_mul(GOLDEN))
    }

    /// Uniform in `0..n` (`n` > 0), by a 128-bit multiply.
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }
}

/// One step of xorshift64 (shifts 13, 7, 17) on `state`, returning the new
/// state: `vgpu-as`'s `rand` buffers (a documented sequence).
pub fn xorshift64(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_injector_sequence_is_pinned() {
        let mut r = Rng::new(1);
        assert_eq!(
            [r.next_u64(), r.next_u64(), r.next_u64()],
            [
                0x4b46_a55d_f361_1b9b,
                0xd7e1_f141_0e76_3ef4,
                0x5f14_ec66_975f_9b06
            ]
        );
    }

    #[test]
    fn the_xorshift64_sequence_is_pinned() {
        let mut s = 0x2545_f491_4f6c_dd1du64;
        assert_eq!(
            [xorshift64(&mut s), xorshift64(&mut s)],
            [0x7f6c_280b_eaa8_e3e7, 0xe471_1987_1cf9_abe0]
        );
    }

    #[test]
    fn shuffles_keep_every_element_and_below_stays_in_range() {
        let mut r = Rng::new(7);
        let mut v: [u32; 16] = core::array::from_fn(|i| i as u32);
        r.shuffle(&mut v);
        let mut sorted = v;
        sorted.sort_unstable();
        assert_eq!(sorted, core::array::from_fn(|i| i as u32));
        let mut s = SplitMix64::new(3);
        assert!((0..1000).all(|_| s.range(5, 9) >= 5 && s.range(5, 9) <= 9));
    }
}
