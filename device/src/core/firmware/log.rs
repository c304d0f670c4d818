//! The firmware log: a ring of text lines the driver reads with
//! `FW_LOG_READ`, addressed by position (bytes ever written), so that a
//! reader that fell behind learns what it lost.

use std::collections::VecDeque;

/// The log ring.
#[derive(Debug)]
pub struct LogRing {
    bytes: VecDeque<u8>,
    size: usize,
    head: u64,
}

impl LogRing {
    /// An empty log keeping the newest `size` bytes.
    pub fn new(size: usize) -> Self {
        LogRing {
            bytes: VecDeque::with_capacity(size),
            size: size.max(1),
            head: 0,
        }
    }

    /// Bytes ever written.
    pub fn head(&self) -> u64 {
        self.head
    }

    /// Bytes kept.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Keeps the newest `size` bytes from now on (what is kept survives
    /// as far as it fits).
    pub fn resize(&mut self, size: usize) {
        self.size = size.max(1);
        while self.bytes.len() > self.size {
            self.bytes.pop_front();
        }
    }

    /// Appends `line` and a newline.
    pub fn push_line(&mut self, line: &str) {
        for &b in line.as_bytes().iter().chain(b"\n") {
            if self.bytes.len() == self.size {
                self.bytes.pop_front();
            }
            self.bytes.push_back(b);
            self.head = self.head.saturating_add(1);
        }
    }

    /// Up to `len` bytes from position `pos` (or from the oldest byte kept
    /// when `pos` was overwritten): the position of the first byte
    /// returned and the bytes.
    pub fn read(&self, pos: u64, len: usize) -> (u64, Vec<u8>) {
        let oldest = self.head - self.bytes.len() as u64;
        let start = pos.clamp(oldest, self.head);
        // PANIC: `start - oldest` ≤ `bytes.len()` by the clamp.
        let skip = (start - oldest) as usize;
        let out = self.bytes.iter().skip(skip).take(len).copied().collect();
        (start, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reader_that_fell_behind_starts_at_the_oldest_byte_kept() {
        let mut log = LogRing::new(16);
        log.push_line("0123456789"); // 11 bytes
        log.push_line("abcdefghij"); // 22 in all: 6 lost
        assert_eq!(log.head(), 22);
        let (start, bytes) = log.read(0, 100);
        assert_eq!(start, 6);
        assert_eq!(bytes, b"6789\nabcdefghij\n");
        let (start, bytes) = log.read(20, 100);
        assert_eq!((start, bytes.as_slice()), (20, &b"j\n"[..]));
        let (start, bytes) = log.read(99, 100);
        assert_eq!((start, bytes.len()), (22, 0));
        log.resize(4);
        assert_eq!(log.read(0, 100), (18, b"hij\n".to_vec()));
    }
}
