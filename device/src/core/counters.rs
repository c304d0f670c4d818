//! Device statistics: what the device did and what it refused.

use std::fmt;

use vgpu_hwif::proto::{Opcode, Status};

/// Number of opcodes.
pub const OPCODE_COUNT: usize = Opcode::ALL.len();

/// Number of status codes (status numbers are dense from 0).
pub const STATUS_COUNT: usize = {
    let mut n = 0u32;
    while Status::from_u32(n).is_some() {
        n += 1;
    }
    n as usize
};

/// The index of `op` in per-opcode tables.
pub fn opcode_index(op: Opcode) -> usize {
    // `Opcode::ALL` lists every opcode, so the search always succeeds; the
    // fallback keeps this total without a panic path.
    Opcode::ALL
        .iter()
        .position(|o| *o == op)
        .unwrap_or(OPCODE_COUNT)
}

/// A snapshot of the device's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counters {
    /// Commands executed successfully, by opcode (indexed by
    /// [`opcode_index`]).
    pub commands: [u64; OPCODE_COUNT],
    /// Error replies, by status number.
    pub errors: [u64; STATUS_COUNT],
    /// Events raised (including those later dropped).
    pub events_posted: u64,
    /// Event records written into driver buffers.
    pub events_delivered: u64,
    /// Events dropped because the event FIFO was full.
    pub events_dropped: u64,
    /// Descriptor chains that could not be served (malformed chains,
    /// addresses outside guest memory, buffers too small), completed with
    /// used length 0.
    pub protocol_errors: u64,
    /// Virtqueues found broken (ring structures inconsistent: available
    /// index, descriptor links) and stopped until the driver reset them.
    pub rings_broken: u64,
}

impl Counters {
    /// Commands of `op` executed successfully.
    pub fn commands_for(&self, op: Opcode) -> u64 {
        self.commands.get(opcode_index(op)).copied().unwrap_or(0)
    }

    /// Error replies with `status`.
    pub fn errors_for(&self, status: Status) -> u64 {
        self.errors.get(status as usize).copied().unwrap_or(0)
    }

    /// All commands answered, successful or not.
    pub fn replies(&self) -> u64 {
        self.commands
            .iter()
            .chain(&self.errors)
            .fold(0u64, |n, &c| n.saturating_add(c))
    }

    pub(crate) fn count_command(&mut self, op: Opcode) {
        if let Some(c) = self.commands.get_mut(opcode_index(op)) {
            *c = c.saturating_add(1);
        }
    }

    pub(crate) fn count_error(&mut self, status: Status) {
        if let Some(c) = self.errors.get_mut(status as usize) {
            *c = c.saturating_add(1);
        }
    }
}

impl fmt::Display for Counters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "commands:")?;
        for op in Opcode::ALL {
            write!(f, " {}={}", op.name(), self.commands_for(op))?;
        }
        write!(f, "; errors:")?;
        let mut any = false;
        for n in 0..STATUS_COUNT as u32 {
            if let Some(s) = Status::from_u32(n) {
                let c = self.errors_for(s);
                if c != 0 {
                    write!(f, " {}={}", s.name(), c)?;
                    any = true;
                }
            }
        }
        if !any {
            write!(f, " none")?;
        }
        write!(
            f,
            "; events: posted={} delivered={} dropped={}; protocol_errors={} rings_broken={}",
            self.events_posted,
            self.events_delivered,
            self.events_dropped,
            self.protocol_errors,
            self.rings_broken
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_count_covers_every_status() {
        assert_eq!(STATUS_COUNT, Status::Unsupported as usize + 1);
        assert!(Status::from_u32(STATUS_COUNT as u32).is_none());
    }

    #[test]
    fn counts_and_display() {
        let mut c = Counters::default();
        c.count_command(Opcode::Ping);
        c.count_command(Opcode::Ping);
        c.count_error(Status::Truncated);
        assert_eq!(c.commands_for(Opcode::Ping), 2);
        assert_eq!(c.commands_for(Opcode::Identify), 0);
        assert_eq!(c.errors_for(Status::Truncated), 1);
        assert_eq!(c.replies(), 3);
        let s = c.to_string();
        assert!(s.contains("PING=2"), "{s}");
        assert!(s.contains("TRUNCATED=1"), "{s}");
    }
}
