//! The vhost-user backend: what QEMU's `vhost-user-gpu-pci` frontend talks
//! to. It negotiates features, serves the virtio-gpu config space, accepts
//! the display socket, and turns queue kicks into work for the virtqueue
//! layer ([`crate::virtq`]).
//!
//! The PCI function QEMU exposes is a virtio-gpu (device id 16); QEMU owns
//! the PCI side and the device id, this backend serves the queues:
//! [`QUEUE_CONTROL`] and [`QUEUE_EVENT`].

use std::io;
use std::os::unix::io::{AsRawFd, RawFd};
use std::sync::Arc;

use vhost::vhost_user::message::{VhostUserProtocolFeatures, VhostUserVirtioFeatures};
use vhost::vhost_user::GpuBackend;
use vhost_user_backend::{VhostUserBackendMut, VringT};
use virtio_bindings::bindings::virtio_config::{VIRTIO_F_RING_RESET, VIRTIO_F_VERSION_1};
use virtio_bindings::bindings::virtio_ring::{
    VIRTIO_RING_F_EVENT_IDX, VIRTIO_RING_F_INDIRECT_DESC,
};
use virtio_queue::QueueT;
use vm_memory::{GuestAddressSpace, GuestMemoryAtomic, GuestMemoryBackend, GuestMemoryMmap};
use vmm_sys_util::epoll::EventSet;
use vmm_sys_util::event::{
    new_event_consumer_and_notifier, EventConsumer, EventFlag, EventNotifier,
};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

use vgpu_hwif::proto::{MAX_QUEUE_SIZE, NUM_QUEUES, QUEUE_CONTROL, QUEUE_EVENT};

use crate::config::DeviceConfig;
use crate::core::counters::Counters;
use crate::core::gpu::Notify;
use crate::core::Device;
use crate::virtq::{self, QueueOutcome, RingBroken};
use crate::vring::GpuVring;

/// The epoll event id of the device's event doorbell: engine threads
/// signal it after posting an event, and the worker thread then delivers
/// pending events (ids `0..=NUM_QUEUES` are the queues and the exit event).
pub const EVENT_WAKE: u16 = NUM_QUEUES as u16 + 1;

/// Wakes the vhost-user worker thread through an eventfd.
struct EventFdNotify(EventFd);

impl Notify for EventFdNotify {
    fn notify(&self) {
        if let Err(e) = self.0.write(1) {
            log::warn!("cannot wake the event delivery: {e}");
        }
    }
}

/// Virtio features the device offers. QEMU's frontend acknowledges
/// `RING_RESET`, `INDIRECT_DESC` and `EVENT_IDX` besides `VERSION_1`, and a
/// backend must offer every bit it is sent.
pub const VIRTIO_FEATURES: u64 = (1 << VIRTIO_F_VERSION_1)
    | (1 << VIRTIO_F_RING_RESET)
    | (1 << VIRTIO_RING_F_INDIRECT_DESC)
    | (1 << VIRTIO_RING_F_EVENT_IDX)
    | VhostUserVirtioFeatures::PROTOCOL_FEATURES.bits();

/// vhost-user protocol features the backend offers: `CONFIG` (QEMU's
/// vhost-user-gpu reads the config space through `GET_CONFIG` and refuses a
/// backend without it), `MQ` (so `GET_QUEUE_NUM` reports both queues),
/// `REPLY_ACK` and `RESET_DEVICE`.
pub fn protocol_features() -> VhostUserProtocolFeatures {
    VhostUserProtocolFeatures::CONFIG
        | VhostUserProtocolFeatures::MQ
        | VhostUserProtocolFeatures::REPLY_ACK
        | VhostUserProtocolFeatures::RESET_DEVICE
}

/// Size of `struct virtio_gpu_config`.
pub const CONFIG_SPACE_SIZE: usize = 16;

/// The virtio-gpu config space (`struct virtio_gpu_config`, little-endian).
/// QEMU substitutes its own `events_read`, `events_clear` and
/// `num_scanouts` before the guest sees them; `num_capsets` is taken from
/// here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GpuConfigSpace {
    /// Pending display events (none are raised: no display engine).
    pub events_read: u32,
    /// Write-to-clear for `events_read`.
    pub events_clear: u32,
    /// Scanouts: 0, the device has no display engine.
    pub num_scanouts: u32,
    /// Capability sets: 0, the device offers no virgl/venus capsets.
    pub num_capsets: u32,
}

impl GpuConfigSpace {
    /// The config space as the frontend reads it.
    pub fn to_bytes(self) -> [u8; CONFIG_SPACE_SIZE] {
        let mut b = [0u8; CONFIG_SPACE_SIZE];
        for (i, v) in [
            self.events_read,
            self.events_clear,
            self.num_scanouts,
            self.num_capsets,
        ]
        .into_iter()
        .enumerate()
        {
            b[i * 4..i * 4 + 4].copy_from_slice(&v.to_le_bytes());
        }
        b
    }

    /// `len` bytes at `offset`, or `None` if the range leaves the space.
    pub fn read(self, offset: u32, len: u32) -> Option<Vec<u8>> {
        let start = usize::try_from(offset).ok()?;
        let end = start.checked_add(usize::try_from(len).ok()?)?;
        self.to_bytes().get(start..end).map(<[u8]>::to_vec)
    }

    /// Applies a driver write of `data` at `offset`: only `events_clear`
    /// is writable, and writing it clears those bits of `events_read`.
    /// Returns `false` (and changes nothing) if the range leaves the space.
    pub fn write(&mut self, offset: u32, data: &[u8]) -> bool {
        let mut bytes = self.to_bytes();
        let target = usize::try_from(offset)
            .ok()
            .and_then(|start| Some(start..start.checked_add(data.len())?))
            .and_then(|range| bytes.get_mut(range));
        let Some(target) = target else {
            return false;
        };
        target.copy_from_slice(data);
        let [_, _, _, _, c0, c1, c2, c3, ..] = bytes;
        self.events_read &= !u32::from_le_bytes([c0, c1, c2, c3]);
        self.events_clear = 0;
        true
    }
}

type Memory = GuestMemoryAtomic<GuestMemoryMmap>;

/// The vhost-user backend of one device.
pub struct VgpuBackend {
    device: Device,
    config_space: GpuConfigSpace,
    mem: Option<Memory>,
    acked_features: u64,
    event_idx: bool,
    gpu_socket: Option<GpuBackend>,
    exit: (EventConsumer, EventNotifier),
    wake: EventFd,
}

impl VgpuBackend {
    /// A backend for a device configured as `config`.
    pub fn new(config: DeviceConfig) -> io::Result<Self> {
        Self::with_device(Device::new(config))
    }

    /// A backend serving `device`.
    pub fn with_device(device: Device) -> io::Result<Self> {
        let wake = EventFd::new(EFD_NONBLOCK)?;
        device.set_notifier(Arc::new(EventFdNotify(wake.try_clone()?)));
        Ok(VgpuBackend {
            device,
            config_space: GpuConfigSpace::default(),
            mem: None,
            acked_features: 0,
            event_idx: false,
            gpu_socket: None,
            exit: new_event_consumer_and_notifier(EventFlag::NONBLOCK)?,
            wake,
        })
    }

    /// The eventfd the engines signal when they post events; register it
    /// with the worker's epoll handler as [`EVENT_WAKE`].
    pub fn wake_fd(&self) -> RawFd {
        self.wake.as_raw_fd()
    }

    /// Writes the device's packet trace (Chrome trace-event JSON).
    pub fn write_trace(&self, out: &mut dyn io::Write) -> io::Result<()> {
        self.device.write_trace(out)
    }

    /// The GPU model (for the fault-injection control socket).
    pub fn gpu(&self) -> Arc<crate::core::gpu::Gpu> {
        self.device.gpu().clone()
    }

    /// The device's counters.
    pub fn counters(&self) -> Counters {
        self.device.counters()
    }

    /// Virtio features the frontend acknowledged.
    pub fn acked_features(&self) -> u64 {
        self.acked_features
    }

    /// Whether `VIRTIO_RING_F_EVENT_IDX` is in use.
    pub fn event_idx(&self) -> bool {
        self.event_idx
    }

    /// Whether the frontend handed over its display socket.
    pub fn has_gpu_socket(&self) -> bool {
        self.gpu_socket.is_some()
    }

    /// Stops the worker thread's event loop.
    pub fn notify_exit(&self) {
        if let Err(e) = self.exit.1.notify() {
            log::warn!("cannot signal the worker thread to exit: {e}");
        }
    }

    fn vring_ready(vring: &GpuVring) -> bool {
        let state = vring.get_ref();
        state.get_queue().ready() && state.is_enabled()
    }

    fn signal(vring: &GpuVring, name: &str) {
        if let Err(e) = vring.signal_used_queue() {
            log::warn!("{name} queue: cannot signal the driver: {e}");
        }
    }

    /// Runs `pass` over the queue of `vring` unless the ring is not ready
    /// or broken; a pass that finds the ring broken stops the queue with
    /// one report.
    fn serve_queue(
        &mut self,
        mem: &GuestMemoryMmap,
        vring: &GpuVring,
        name: &str,
        pass: fn(
            &mut virtio_queue::Queue,
            &GuestMemoryMmap,
            &mut Device,
        ) -> Result<QueueOutcome, RingBroken>,
    ) {
        if !Self::vring_ready(vring) || vring.is_broken() {
            return;
        }
        let (epoch, result) = {
            let mut state = vring.get_mut();
            // Read under the vring's lock: a reconfiguration either
            // happened before this pass or waits for it.
            let epoch = vring.epoch();
            (epoch, pass(state.get_queue_mut(), mem, &mut self.device))
        };
        match result {
            Ok(out) => {
                log::trace!("{name} queue: {out:?}");
                if out.notify {
                    Self::signal(vring, name);
                }
            }
            Err(broken) => {
                if vring.mark_broken(epoch) {
                    self.device.count_ring_broken();
                    log::error!(
                        "{name} queue broken: {}; the device stops serving it until the driver \
                         resets the ring (disables and re-enables it, gives it a new address, \
                         size or base, or resets the device)",
                        broken.error
                    );
                }
                // Chains completed before the break still get their
                // interrupt.
                if broken.outcome.notify {
                    Self::signal(vring, name);
                }
            }
        }
    }

    fn process_control(&mut self, mem: &GuestMemoryMmap, vring: &GpuVring) {
        self.serve_queue(mem, vring, "control", virtq::process_control_queue);
    }

    fn deliver_events(&mut self, mem: &GuestMemoryMmap, vring: &GpuVring) {
        self.serve_queue(mem, vring, "event", virtq::deliver_events);
    }
}

impl VhostUserBackendMut for VgpuBackend {
    type Bitmap = ();
    type Vring = GpuVring;

    fn num_queues(&self) -> usize {
        NUM_QUEUES
    }

    fn max_queue_size(&self) -> usize {
        usize::from(MAX_QUEUE_SIZE)
    }

    fn features(&self) -> u64 {
        VIRTIO_FEATURES
    }

    fn acked_features(&mut self, features: u64) {
        log::info!("SET_FEATURES {features:#x}");
        self.acked_features = features;
    }

    fn protocol_features(&self) -> VhostUserProtocolFeatures {
        protocol_features()
    }

    fn reset_device(&mut self) {
        log::info!("device reset; {}", self.device.counters());
        self.device.reset();
        self.config_space = GpuConfigSpace::default();
        self.acked_features = 0;
        self.event_idx = false;
    }

    fn set_event_idx(&mut self, enabled: bool) {
        self.event_idx = enabled;
    }

    fn get_config(&self, offset: u32, size: u32) -> Vec<u8> {
        match self.config_space.read(offset, size) {
            Some(bytes) => {
                log::debug!("GET_CONFIG offset {offset} size {size}");
                bytes
            }
            None => {
                log::warn!("GET_CONFIG offset {offset} size {size} outside the config space");
                Vec::new()
            }
        }
    }

    fn set_config(&mut self, offset: u32, buf: &[u8]) -> io::Result<()> {
        // An error here would end the whole vhost-user session, so a write
        // outside the config space is ignored rather than refused.
        if self.config_space.write(offset, buf) {
            log::debug!("SET_CONFIG offset {offset} size {}", buf.len());
        } else {
            log::warn!(
                "SET_CONFIG offset {offset} size {} outside the config space, ignored",
                buf.len()
            );
        }
        Ok(())
    }

    fn update_memory(&mut self, mem: Memory) -> io::Result<()> {
        {
            let m = mem.memory();
            let total: u64 = m.iter().map(vm_memory::GuestMemoryRegion::len).sum();
            log::info!(
                "guest memory table: {} region(s), {} MiB",
                m.num_regions(),
                total >> 20
            );
        }
        self.device.set_memory(mem.clone());
        self.mem = Some(mem);
        Ok(())
    }

    fn set_gpu_socket(&mut self, gpu_backend: GpuBackend) -> io::Result<()> {
        // The display channel is kept open (the frontend watches it) but the
        // device has no scanouts, so nothing is ever sent on it.
        log::info!("GPU_SET_SOCKET: display channel accepted");
        self.gpu_socket = Some(gpu_backend);
        Ok(())
    }

    fn exit_event(&self, _thread_index: usize) -> Option<(EventConsumer, EventNotifier)> {
        match (self.exit.0.try_clone(), self.exit.1.try_clone()) {
            (Ok(c), Ok(n)) => Some((c, n)),
            (Err(e), _) | (_, Err(e)) => {
                log::error!("cannot clone the exit event: {e}");
                None
            }
        }
    }

    fn stop_vring(&mut self, queue_index: u32) -> io::Result<()> {
        log::debug!("queue {queue_index} stopped");
        Ok(())
    }

    fn handle_event(
        &mut self,
        device_event: u16,
        evset: EventSet,
        vrings: &[GpuVring],
        _thread_id: usize,
    ) -> io::Result<()> {
        if device_event == EVENT_WAKE {
            // Level-triggered: clear the doorbell first (whatever happens
            // next), so that an event posted meanwhile rings it again.
            let _ = self.wake.read();
        }
        if evset != EventSet::IN {
            log::warn!("queue {device_event}: unexpected event set {evset:?}");
            return Ok(());
        }
        let Some(mem) = self.mem.as_ref().map(GuestAddressSpace::memory) else {
            log::warn!("queue {device_event} kicked before the memory table was set");
            return Ok(());
        };
        let (Some(control), Some(event)) = (
            vrings.get(usize::from(QUEUE_CONTROL)),
            vrings.get(usize::from(QUEUE_EVENT)),
        ) else {
            return Err(io::Error::other(
                "backend registered fewer vrings than queues",
            ));
        };
        match device_event {
            QUEUE_CONTROL => {
                self.process_control(&mem, control);
                // Commands may have raised events.
                self.deliver_events(&mem, event);
            }
            QUEUE_EVENT => self.deliver_events(&mem, event),
            EVENT_WAKE => self.deliver_events(&mem, event),
            other => log::warn!("event for unknown queue {other}"),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offered_features() {
        assert_eq!(
            VIRTIO_FEATURES,
            (1 << 32) | (1 << 40) | (1 << 28) | (1 << 29) | (1 << 30)
        );
        let p = protocol_features();
        assert!(p.contains(VhostUserProtocolFeatures::CONFIG));
        assert!(p.contains(VhostUserProtocolFeatures::MQ));
        assert!(!p.contains(VhostUserProtocolFeatures::CONFIGURE_MEM_SLOTS));
    }

    #[test]
    fn config_space_layout_and_ranges() {
        let c = GpuConfigSpace {
            events_read: 0x0102_0304,
            events_clear: 0,
            num_scanouts: 0,
            num_capsets: 7,
        };
        let b = c.to_bytes();
        assert_eq!(&b[0..4], &[4, 3, 2, 1]);
        assert_eq!(&b[12..16], &[7, 0, 0, 0]);
        assert_eq!(c.read(0, 16), Some(b.to_vec()));
        assert_eq!(c.read(12, 4), Some(vec![7, 0, 0, 0]));
        assert_eq!(c.read(12, 5), None);
        assert_eq!(c.read(u32::MAX, 2), None);
        assert_eq!(c.read(0, u32::MAX), None);
    }

    #[test]
    fn events_clear_clears_events_read() {
        let mut c = GpuConfigSpace {
            events_read: 0b111,
            ..Default::default()
        };
        assert!(c.write(4, &0b101u32.to_le_bytes()));
        assert_eq!(c.events_read, 0b010);
        assert_eq!(c.events_clear, 0);
        // Read-only fields are not changed by a full write.
        let mut full = [0xffu8; 16];
        full[4..8].copy_from_slice(&0u32.to_le_bytes());
        assert!(c.write(0, &full));
        assert_eq!(c.events_read, 0b010);
        assert_eq!(c.num_capsets, 0);
        assert!(!c.write(14, &[0; 4]));
        assert!(!c.write(u32::MAX, &[0]));
    }
}
