//! A fast hasher for the sanitizer's integer-keyed maps.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A fast hasher for the sanitizer's integer-keyed maps (page numbers,
/// addresses): a multiply-rotate in the style of FxHash. The keys are the
/// guest's, but the maps are bounded, so a poor distribution costs time,
/// never memory.
#[derive(Clone, Copy, Debug, Default)]
pub struct FastHash(u64);

const SEED: u64 = 0x517c_c1b7_2722_0a95;

impl Hasher for FastHash {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(SEED);
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
}

/// A map with [`FastHash`].
pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHash>>;
