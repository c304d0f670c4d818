//! The table of retired pages: the device's RAS "EEPROM".
//!
//! When the driver retires a guest-physical page after an uncorrectable
//! memory error, it records it here (`RAS_RETIRE`), and a driver that loads
//! later reads the table back (`RAS_QUERY`) so the page stays retired across
//! driver reloads and device resets, as a GPU's RAS EEPROM keeps its bad-page
//! list across reboots. The table lives as long as the device process; it is
//! bounded ([`RAS_TABLE_SIZE`] entries) and keeps insertion order; recording
//! a page twice is a no-op.

use vgpu_hwif::proto::{RAS_QUERY_PAGES, RAS_TABLE_SIZE};

/// Why a page could not be recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RasError {
    /// The address is not 4 KiB aligned.
    #[error("page address {0:#x} is not 4 KiB aligned")]
    Unaligned(u64),
    /// The table holds [`RAS_TABLE_SIZE`] pages already.
    #[error("the table of retired pages is full ({RAS_TABLE_SIZE} pages)")]
    Full,
}

/// The retired pages, oldest first.
#[derive(Debug, Default)]
pub struct RasTable {
    pages: Vec<u64>,
}

impl RasTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records `pa`; a page already recorded is accepted again.
    ///
    /// # Errors
    ///
    /// [`RasError::Unaligned`], [`RasError::Full`].
    pub fn retire(&mut self, pa: u64) -> Result<(), RasError> {
        if !pa.is_multiple_of(4096) {
            return Err(RasError::Unaligned(pa));
        }
        if self.pages.contains(&pa) {
            return Ok(());
        }
        if self.pages.len() >= RAS_TABLE_SIZE as usize {
            return Err(RasError::Full);
        }
        self.pages.push(pa);
        Ok(())
    }

    /// Entries in the table.
    pub fn len(&self) -> u32 {
        self.pages.len() as u32
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.pages.is_empty()
    }

    /// Entries `start..` (at most [`RAS_QUERY_PAGES`]), and how many.
    pub fn query(&self, start: u32) -> ([u64; RAS_QUERY_PAGES], u32) {
        let mut out = [0u64; RAS_QUERY_PAGES];
        let from = (start as usize).min(self.pages.len());
        let n = (self.pages.len() - from).min(RAS_QUERY_PAGES);
        out[..n].copy_from_slice(&self.pages[from..from + n]);
        (out, n as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_are_kept_once_in_order_and_read_back_in_pieces() {
        let mut t = RasTable::new();
        assert_eq!(t.retire(0x1001), Err(RasError::Unaligned(0x1001)));
        for i in 0..20u64 {
            t.retire(0x10_0000 + i * 4096).unwrap();
        }
        t.retire(0x10_0000).unwrap();
        assert_eq!(t.len(), 20);
        let (first, n) = t.query(0);
        assert_eq!(n as usize, RAS_QUERY_PAGES);
        assert_eq!(first[0], 0x10_0000);
        let (rest, n) = t.query(RAS_QUERY_PAGES as u32);
        assert_eq!(n, 20 - RAS_QUERY_PAGES as u32);
        assert_eq!(rest[0], 0x10_0000 + RAS_QUERY_PAGES as u64 * 4096);
        assert_eq!(t.query(1000).1, 0);
    }

    #[test]
    fn the_table_is_bounded() {
        let mut t = RasTable::new();
        for i in 0..u64::from(RAS_TABLE_SIZE) {
            t.retire(i * 4096).unwrap();
        }
        assert_eq!(
            t.retire(u64::from(RAS_TABLE_SIZE) * 4096),
            Err(RasError::Full)
        );
        assert_eq!(t.len(), RAS_TABLE_SIZE);
    }
}
