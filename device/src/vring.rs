//! The backend's vring: vhost-user-backend's [`VringRwLock`] plus whether
//! the ring is *broken*.
//!
//! A ring is broken when its own structures are inconsistent (see
//! [`crate::virtq::QueueError`]); the device then stops serving it. Every
//! frontend message that (re)configures the ring — `SET_VRING_NUM`,
//! `SET_VRING_ADDR`, `SET_VRING_BASE`, `SET_VRING_ENABLE` off,
//! `GET_VRING_BASE` (stop), and `RESET_DEVICE` (which disables every ring)
//! — reaches the vring through one of the setters below, and each starts a
//! new *epoch*: a ring is broken only in the epoch it broke in, so any of
//! them restores service. A break detected on the old configuration while
//! the frontend reconfigures the ring cannot stick to the new one.

use std::fs::File;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use vhost_user_backend::{VringRwLock, VringStateGuard, VringStateMutGuard, VringT};
use virtio_queue::Error as VirtQueError;
use vm_memory::{GuestMemoryAtomic, GuestMemoryMmap};

type Memory = GuestMemoryAtomic<GuestMemoryMmap>;

#[derive(Debug, Default)]
struct Health {
    /// Configuration epoch, +1 at every ring (re)configuration.
    epoch: AtomicU64,
    /// `epoch + 1` of the epoch the ring broke in; 0 if it never did.
    broken: AtomicU64,
}

/// A vring and its health.
#[derive(Clone)]
pub struct GpuVring {
    inner: VringRwLock<Memory>,
    health: Arc<Health>,
}

impl GpuVring {
    /// The current configuration epoch: read it before looking at the
    /// ring, and pass it to [`GpuVring::mark_broken`].
    pub fn epoch(&self) -> u64 {
        self.health.epoch.load(Ordering::SeqCst)
    }

    /// Whether the ring is broken in its current configuration.
    pub fn is_broken(&self) -> bool {
        self.health.broken.load(Ordering::SeqCst) == self.epoch().wrapping_add(1)
    }

    /// Marks the ring broken in `epoch`; returns whether this is news (the
    /// caller reports it then, once).
    pub fn mark_broken(&self, epoch: u64) -> bool {
        let mark = epoch.wrapping_add(1);
        self.health.broken.swap(mark, Ordering::SeqCst) != mark
    }

    fn reconfigured(&self) {
        self.health.epoch.fetch_add(1, Ordering::SeqCst);
    }
}

impl<'a> VringStateGuard<'a, Memory> for GpuVring {
    type G = <VringRwLock<Memory> as VringStateGuard<'a, Memory>>::G;
}

impl<'a> VringStateMutGuard<'a, Memory> for GpuVring {
    type G = <VringRwLock<Memory> as VringStateMutGuard<'a, Memory>>::G;
}

impl VringT<Memory> for GpuVring {
    fn new(mem: Memory, max_queue_size: u16) -> Result<Self, VirtQueError> {
        Ok(GpuVring {
            inner: VringRwLock::new(mem, max_queue_size)?,
            health: Arc::default(),
        })
    }

    fn get_ref(&self) -> <Self as VringStateGuard<'_, Memory>>::G {
        self.inner.get_ref()
    }

    fn get_mut(&self) -> <Self as VringStateMutGuard<'_, Memory>>::G {
        self.inner.get_mut()
    }

    fn add_used(&self, desc_index: u16, len: u32) -> Result<(), VirtQueError> {
        self.inner.add_used(desc_index, len)
    }

    fn signal_used_queue(&self) -> io::Result<()> {
        self.inner.signal_used_queue()
    }

    fn enable_notification(&self) -> Result<bool, VirtQueError> {
        self.inner.enable_notification()
    }

    fn disable_notification(&self) -> Result<(), VirtQueError> {
        self.inner.disable_notification()
    }

    fn needs_notification(&self) -> Result<bool, VirtQueError> {
        self.inner.needs_notification()
    }

    fn set_enabled(&self, enabled: bool) {
        self.inner.set_enabled(enabled);
        if !enabled {
            self.reconfigured();
        }
    }

    fn set_queue_info(
        &self,
        desc_table: u64,
        avail_ring: u64,
        used_ring: u64,
    ) -> Result<(), VirtQueError> {
        let r = self.inner.set_queue_info(desc_table, avail_ring, used_ring);
        self.reconfigured();
        r
    }

    fn queue_next_avail(&self) -> u16 {
        self.inner.queue_next_avail()
    }

    fn set_queue_next_avail(&self, base: u16) {
        self.inner.set_queue_next_avail(base);
        self.reconfigured();
    }

    fn set_queue_next_used(&self, idx: u16) {
        self.inner.set_queue_next_used(idx);
    }

    fn queue_used_idx(&self) -> Result<u16, VirtQueError> {
        self.inner.queue_used_idx()
    }

    fn set_queue_size(&self, num: u16) {
        self.inner.set_queue_size(num);
        self.reconfigured();
    }

    fn set_queue_event_idx(&self, enabled: bool) {
        self.inner.set_queue_event_idx(enabled);
    }

    fn set_queue_ready(&self, ready: bool) {
        self.inner.set_queue_ready(ready);
        if !ready {
            self.reconfigured();
        }
    }

    fn set_kick(&self, file: Option<File>) {
        self.inner.set_kick(file);
    }

    fn read_kick(&self) -> io::Result<bool> {
        self.inner.read_kick()
    }

    fn set_call(&self, file: Option<File>) {
        self.inner.set_call(file);
    }

    fn set_err(&self, file: Option<File>) {
        self.inner.set_err(file);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vring() -> GpuVring {
        GpuVring::new(GuestMemoryAtomic::new(GuestMemoryMmap::new()), 16).unwrap()
    }

    #[test]
    fn broken_once_until_the_frontend_reconfigures_the_ring() {
        type Reset = fn(&GpuVring);
        let resets: [(&str, Reset); 6] = [
            ("SET_VRING_ENABLE off", |v| v.set_enabled(false)),
            ("GET_VRING_BASE", |v| v.set_queue_ready(false)),
            ("SET_VRING_BASE", |v| v.set_queue_next_avail(0)),
            ("SET_VRING_NUM", |v| v.set_queue_size(8)),
            ("SET_VRING_ADDR", |v| {
                let _ = v.set_queue_info(0, 0x1000, 0x2000);
            }),
            ("RESET_DEVICE", |v| v.set_enabled(false)),
        ];
        for (name, reset) in resets {
            let v = vring();
            assert!(!v.is_broken());
            let e = v.epoch();
            assert!(v.mark_broken(e), "{name}: first report");
            assert!(!v.mark_broken(e), "{name}: reported twice");
            assert!(v.is_broken());
            // Kicks, enabling and doorbell changes are not resets.
            v.set_enabled(true);
            v.set_queue_ready(true);
            v.set_queue_event_idx(true);
            assert!(v.is_broken(), "{name}");
            reset(&v);
            assert!(!v.is_broken(), "{name} did not restore the ring");
            // A break found on the old configuration does not stick.
            let _ = v.mark_broken(e);
            assert!(!v.is_broken(), "{name}: stale break");
            // A new one does, once.
            assert!(v.mark_broken(v.epoch()));
            assert!(v.is_broken());
        }
    }
}
