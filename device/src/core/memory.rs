//! The device's physical memory: what a physical address the engines,
//! the MMU's walks and the recorder use reaches (today the guest's RAM,
//! through the vhost-user memory table).

use vm_memory::{GuestAddress, GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion};

/// Guest memory as the device sees it.
pub type Mem = GuestMemoryMmap;

/// Whether `len` bytes at guest-physical `pa` lie inside one RAM region.
pub fn in_ram(mem: &Mem, pa: u64, len: u64) -> bool {
    let Some(last) = len.checked_sub(1).and_then(|n| pa.checked_add(n)) else {
        return false;
    };
    mem.find_region(GuestAddress(pa))
        .is_some_and(|r| last <= r.last_addr().0)
}
