// SPDX-License-Identifier: GPL-2.0

//! The virtio-pci modern transport.
//!
//! A modern virtio PCI function describes its register blocks with
//! vendor-specific PCI capabilities (capability id 0x09), each naming a BAR,
//! an offset and a length:
//!
//! * common configuration: feature negotiation, device status, and the
//!   per-queue registers behind `queue_select`;
//! * notification: queue `q` is notified by writing `q` (16 bits) at
//!   `queue_notify_off(q) * notify_off_multiplier` inside this block;
//! * ISR status: one byte, read to acknowledge an INTx interrupt (bit 0:
//!   a queue was used, bit 1: the configuration changed);
//! * device configuration: device-specific (optional for this driver).
//!
//! Every register access goes through [`Transport`], which checks the access
//! against the capability's length and returns `ENODEV` once the BAR has been
//! revoked (device unbound) and `EIO` for an access the device's capability
//! layout cannot satisfy.

use kernel::{
    device::Bound,
    devres::Devres,
    io::{
        poll::read_poll_timeout,
        register::FixedRegister,
        Io, //
    },
    pci,
    prelude::*,
    time::Delta, //
};

/// Device status bits (virtio 1.x, 2.1).
pub(crate) mod status {
    /// The driver has noticed the device.
    pub(crate) const ACKNOWLEDGE: u8 = 1;
    /// The driver knows how to drive the device.
    pub(crate) const DRIVER: u8 = 2;
    /// The driver is ready: queues may be used.
    pub(crate) const DRIVER_OK: u8 = 4;
    /// Feature negotiation is complete.
    pub(crate) const FEATURES_OK: u8 = 8;
    /// The device hit an error it cannot recover from without a reset.
    pub(crate) const NEEDS_RESET: u8 = 0x40;
    /// The driver gave up on the device.
    pub(crate) const FAILED: u8 = 0x80;
}

/// Feature bits this driver knows about.
pub(crate) mod feature {
    /// `VIRTIO_F_VERSION_1`: modern (1.x) device. Required.
    pub(crate) const VERSION_1: u64 = 1 << 32;
    /// `VIRTIO_F_ACCESS_PLATFORM`: the device accesses memory through the
    /// platform's DMA translation. Accepted when offered: every address this
    /// driver gives the device is a DMA address from the DMA API.
    pub(crate) const ACCESS_PLATFORM: u64 = 1 << 33;

    /// Every feature this driver implements.
    pub(crate) const SUPPORTED: u64 = VERSION_1 | ACCESS_PLATFORM;
}

/// `VIRTIO_MSI_NO_VECTOR`: no MSI-X vector for this source.
pub(crate) const MSI_NO_VECTOR: u16 = 0xffff;

/// ISR status bit 0: a virtqueue was used.
pub(crate) const ISR_QUEUE: u8 = 1;
/// ISR status bit 1: the device configuration (or status) changed.
pub(crate) const ISR_CONFIG: u8 = 2;

/// Capability `cfg_type` values.
mod cap_type {
    pub(super) const COMMON: u8 = 1;
    pub(super) const NOTIFY: u8 = 2;
    pub(super) const ISR: u8 = 3;
    pub(super) const DEVICE: u8 = 4;
}

/// The common configuration block (`struct virtio_pci_common_cfg`, virtio
/// 1.x 4.1.4.3): register offsets relative to the block, fields per
/// register.
pub(crate) mod common {
    use kernel::io::register;

    register! {
        /// Selects which 32 bits of the device's features `DEVICE_FEATURE`
        /// shows (0: bits 31..0, 1: bits 63..32).
        pub(crate) DEVICE_FEATURE_SELECT(u32) @ 0x00 {
            /// The 32-bit half.
            31:0 select;
        }
        /// 32 bits of the features the device offers.
        pub(crate) DEVICE_FEATURE(u32) @ 0x04 {
            /// The feature bits of the selected half.
            31:0 bits;
        }
        /// Selects which 32 bits of the driver's features `DRIVER_FEATURE`
        /// takes.
        pub(crate) DRIVER_FEATURE_SELECT(u32) @ 0x08 {
            /// The 32-bit half.
            31:0 select;
        }
        /// 32 bits of the features the driver accepts.
        pub(crate) DRIVER_FEATURE(u32) @ 0x0c {
            /// The feature bits of the selected half.
            31:0 bits;
        }
        /// MSI-X vector for configuration changes; reads back
        /// `MSI_NO_VECTOR` if the device could not take it.
        pub(crate) MSIX_CONFIG(u16) @ 0x10 {
            /// The vector.
            15:0 vector;
        }
        /// Number of virtqueues the device has.
        pub(crate) NUM_QUEUES(u16) @ 0x12 {
            /// The count.
            15:0 count;
        }
        /// Device status (virtio 1.x 2.1); writing 0 resets the device,
        /// which reads 0 back once the reset is complete.
        pub(crate) DEVICE_STATUS(u8) @ 0x14 {
            /// The driver gave up on the device.
            7:7 failed => bool;
            /// The device hit an error it cannot recover from without a
            /// reset.
            6:6 needs_reset => bool;
            /// Feature negotiation is complete.
            3:3 features_ok => bool;
            /// The driver is ready: queues may be used.
            2:2 driver_ok => bool;
            /// The driver knows how to drive the device.
            1:1 driver => bool;
            /// The driver has noticed the device.
            0:0 acknowledge => bool;
        }
        /// Selects the queue the `QUEUE_*` registers refer to.
        pub(crate) QUEUE_SELECT(u16) @ 0x16 {
            /// Queue index.
            15:0 queue;
        }
        /// Queue size in descriptors; after a reset, the largest the
        /// device allows (0: the queue does not exist).
        pub(crate) QUEUE_SIZE(u16) @ 0x18 {
            /// Descriptors (a power of two).
            15:0 size;
        }
        /// MSI-X vector of the queue; reads back `MSI_NO_VECTOR` if the
        /// device could not take it.
        pub(crate) QUEUE_MSIX_VECTOR(u16) @ 0x1a {
            /// The vector.
            15:0 vector;
        }
        /// Queue enable; a freshly reset device has every queue disabled.
        pub(crate) QUEUE_ENABLE(u16) @ 0x1c {
            /// The queue is in use.
            0:0 enabled => bool;
        }
        /// Where the queue's doorbell is in the notification area, in
        /// units of `notify_off_multiplier`.
        pub(crate) QUEUE_NOTIFY_OFF(u16) @ 0x1e {
            /// The offset.
            15:0 offset;
        }
        /// DMA address of the descriptor table, low 32 bits (the high
        /// half at `+ 4`).
        pub(crate) QUEUE_DESC(u32) @ 0x20 {
            /// Address bits 31..0.
            31:0 addr_lo;
        }
        /// DMA address of the driver (available) ring, low 32 bits (the
        /// high half at `+ 4`).
        pub(crate) QUEUE_DRIVER(u32) @ 0x28 {
            /// Address bits 31..0.
            31:0 addr_lo;
        }
        /// DMA address of the device (used) ring, low 32 bits (the high
        /// half at `+ 4`).
        pub(crate) QUEUE_DEVICE(u32) @ 0x30 {
            /// Address bits 31..0.
            31:0 addr_lo;
        }
    }

    /// Size of the block up to and including `queue_device`.
    pub(crate) const LEN: usize = 0x38;

    // The status bits the driver composes are the register's fields.
    const _: () = {
        use super::status;
        assert!(DEVICE_STATUS::FAILED_MASK == status::FAILED);
        assert!(DEVICE_STATUS::NEEDS_RESET_MASK == status::NEEDS_RESET);
        assert!(DEVICE_STATUS::FEATURES_OK_MASK == status::FEATURES_OK);
        assert!(DEVICE_STATUS::DRIVER_OK_MASK == status::DRIVER_OK);
        assert!(DEVICE_STATUS::DRIVER_MASK == status::DRIVER);
        assert!(DEVICE_STATUS::ACKNOWLEDGE_MASK == status::ACKNOWLEDGE);
    };
}

/// Register widths of the common configuration block.
trait Width: Copy {
    /// Bytes.
    const BYTES: usize;
    /// Reads the register at absolute offset `at` of `b`.
    fn read(b: &pci::Bar<'static>, at: usize) -> Result<Self>;
    /// Writes `v` at absolute offset `at` of `b`.
    fn write(b: &pci::Bar<'static>, at: usize, v: Self) -> Result;
}

impl Width for u8 {
    const BYTES: usize = 1;
    fn read(b: &pci::Bar<'static>, at: usize) -> Result<Self> {
        b.try_read8(at)
    }
    fn write(b: &pci::Bar<'static>, at: usize, v: Self) -> Result {
        b.try_write8(v, at)
    }
}

impl Width for u16 {
    const BYTES: usize = 2;
    fn read(b: &pci::Bar<'static>, at: usize) -> Result<Self> {
        b.try_read16(at)
    }
    fn write(b: &pci::Bar<'static>, at: usize, v: Self) -> Result {
        b.try_write16(v, at)
    }
}

impl Width for u32 {
    const BYTES: usize = 4;
    fn read(b: &pci::Bar<'static>, at: usize) -> Result<Self> {
        b.try_read32(at)
    }
    fn write(b: &pci::Bar<'static>, at: usize, v: Self) -> Result {
        b.try_write32(v, at)
    }
}

/// Standard PCI configuration-space registers used to walk capabilities.
mod pcicfg {
    pub(super) const STATUS: usize = 0x06;
    pub(super) const STATUS_CAP_LIST: u16 = 0x10;
    pub(super) const CAPABILITY_LIST: usize = 0x34;
    pub(super) const BAR0: usize = 0x10;
    pub(super) const BAR_SPACE_IO: u32 = 0x1;
    pub(super) const CAP_ID_VNDR: u8 = 0x09;
    /// Upper bound on list entries, guards against a looping list.
    pub(super) const CAP_TTL: usize = 48;
    pub(super) const NUM_STD_BARS: u8 = 6;
}

/// Offsets inside a `struct virtio_pci_cap`.
mod vcap {
    pub(super) const LEN: usize = 2;
    pub(super) const CFG_TYPE: usize = 3;
    pub(super) const BAR: usize = 4;
    pub(super) const OFFSET: usize = 8;
    pub(super) const LENGTH: usize = 12;
    /// `struct virtio_pci_notify_cap::notify_off_multiplier`.
    pub(super) const NOTIFY_OFF_MULTIPLIER: usize = 16;
    /// Size of `struct virtio_pci_cap`.
    pub(super) const SIZE: u8 = 16;
    /// Size of `struct virtio_pci_notify_cap`.
    pub(super) const NOTIFY_SIZE: u8 = 20;
}

/// A register block: a range of one BAR.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Region {
    /// BAR index.
    pub(crate) bar: u8,
    /// Offset of the block inside the BAR.
    pub(crate) offset: usize,
    /// Length of the block in bytes.
    pub(crate) len: usize,
}

/// The register blocks the device's capabilities describe.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Caps {
    /// Common configuration.
    pub(crate) common: Region,
    /// Notification area.
    pub(crate) notify: Region,
    /// `notify_off_multiplier` of the notification capability.
    pub(crate) notify_off_multiplier: u32,
    /// ISR status byte.
    pub(crate) isr: Region,
    /// Device-specific configuration, if the device has one.
    pub(crate) device: Option<Region>,
}

impl Caps {
    /// Walks the PCI capability list and collects the first usable virtio
    /// capability of each type.
    fn find(pdev: &pci::Device<Bound>) -> Result<Caps> {
        let cfg = pdev.config_space();
        let pci_status = cfg.try_read16(pcicfg::STATUS)?;
        if pci_status & pcicfg::STATUS_CAP_LIST == 0 {
            dev_err!(pdev, "no PCI capability list: not a modern virtio device\n");
            return Err(ENODEV);
        }

        let mut common = None;
        let mut notify = None;
        let mut isr = None;
        let mut device = None;

        let mut pos = usize::from(cfg.try_read8(pcicfg::CAPABILITY_LIST)? & !3);
        let mut ttl = pcicfg::CAP_TTL;
        while pos != 0 {
            if ttl == 0 || pos < 0x40 {
                dev_err!(pdev, "malformed PCI capability list\n");
                return Err(ENODEV);
            }
            ttl -= 1;
            let id = cfg.try_read8(pos)?;
            let next = usize::from(cfg.try_read8(pos + 1)? & !3);
            if id == pcicfg::CAP_ID_VNDR {
                Self::parse_one(pdev, pos, &mut common, &mut notify, &mut isr, &mut device)?;
            }
            pos = next;
        }

        let (Some(common), Some((notify, notify_off_multiplier)), Some(isr)) =
            (common, notify, isr)
        else {
            dev_err!(
                pdev,
                "missing virtio capability (common: {}, notify: {}, isr: {})\n",
                common.is_some(),
                notify.is_some(),
                isr.is_some()
            );
            return Err(ENODEV);
        };
        Ok(Caps {
            common,
            notify,
            notify_off_multiplier,
            isr,
            device,
        })
    }

    /// Parses the vendor capability at `pos`; fills the slot of its type if
    /// still empty and the capability is usable.
    fn parse_one(
        pdev: &pci::Device<Bound>,
        pos: usize,
        common: &mut Option<Region>,
        notify: &mut Option<(Region, u32)>,
        isr: &mut Option<Region>,
        device: &mut Option<Region>,
    ) -> Result {
        let cfg = pdev.config_space();
        let cap_len = cfg.try_read8(pos + vcap::LEN)?;
        if cap_len < vcap::SIZE {
            return Ok(());
        }
        let cfg_type = cfg.try_read8(pos + vcap::CFG_TYPE)?;
        let bar = cfg.try_read8(pos + vcap::BAR)?;
        // Reserved BAR values mark capabilities this driver must ignore.
        if bar >= pcicfg::NUM_STD_BARS {
            return Ok(());
        }
        let offset = cfg.try_read32(pos + vcap::OFFSET)?;
        let length = cfg.try_read32(pos + vcap::LENGTH)?;

        let (min_len, taken) = match cfg_type {
            cap_type::COMMON => (common::LEN, common.is_some()),
            cap_type::NOTIFY => (2, notify.is_some()),
            cap_type::ISR => (1, isr.is_some()),
            cap_type::DEVICE => (1, device.is_some()),
            _ => return Ok(()),
        };
        if taken {
            return Ok(());
        }

        let region = match Self::check_region(pdev, bar, offset, length, min_len) {
            Ok(r) => r,
            Err(_) => {
                dev_warn!(
                    pdev,
                    "ignoring virtio capability type {} at {:#x}: BAR {} {:#x}+{:#x} unusable\n",
                    cfg_type,
                    pos,
                    bar,
                    offset,
                    length
                );
                return Ok(());
            }
        };

        match cfg_type {
            cap_type::COMMON => *common = Some(region),
            cap_type::NOTIFY => {
                if cap_len < vcap::NOTIFY_SIZE {
                    dev_warn!(
                        pdev,
                        "ignoring short virtio notify capability at {:#x}\n",
                        pos
                    );
                    return Ok(());
                }
                let mult = cfg.try_read32(pos + vcap::NOTIFY_OFF_MULTIPLIER)?;
                *notify = Some((region, mult));
            }
            cap_type::ISR => *isr = Some(region),
            _ => *device = Some(region),
        }
        Ok(())
    }

    /// Checks that `offset..offset + length` lies in memory BAR `bar` and is
    /// at least `min_len` long.
    fn check_region(
        pdev: &pci::Device<Bound>,
        bar: u8,
        offset: u32,
        length: u32,
        min_len: usize,
    ) -> Result<Region> {
        let bar_len = pdev.resource_len(u32::from(bar))?;
        if bar_len == 0 {
            return Err(ENODEV);
        }
        // This driver accesses registers with MMIO only: reject I/O BARs.
        let bar_reg = pdev
            .config_space()
            .try_read32(pcicfg::BAR0 + 4 * usize::from(bar))?;
        if bar_reg & pcicfg::BAR_SPACE_IO != 0 {
            return Err(ENODEV);
        }
        let offset = usize::try_from(offset).map_err(|_| EINVAL)?;
        let len = usize::try_from(length).map_err(|_| EINVAL)?;
        let bar_len = usize::try_from(bar_len).map_err(|_| EINVAL)?;
        let end = offset.checked_add(len).ok_or(EINVAL)?;
        if len < min_len || end > bar_len {
            return Err(EINVAL);
        }
        Ok(Region { bar, offset, len })
    }
}

/// The mapped register blocks of one device.
///
/// # Concurrency
///
/// Single registers may be accessed from any context. Sequences that go
/// through `queue_select` ([`Transport::setup_queue`],
/// [`Transport::queue_max_size`]) are only used while probing, before any
/// other user of the device exists.
pub(crate) struct Transport {
    bars: [Option<Devres<pci::Bar<'static>>>; pcicfg::NUM_STD_BARS as usize],
    caps: Caps,
}

impl Transport {
    /// Finds the capabilities and maps the BARs they point into.
    pub(crate) fn new(pdev: &pci::Device<Bound>) -> Result<Self> {
        let caps = Caps::find(pdev)?;
        let mut bars: [Option<Devres<pci::Bar<'static>>>; pcicfg::NUM_STD_BARS as usize] =
            [const { None }; pcicfg::NUM_STD_BARS as usize];
        let regions = [
            Some(caps.common),
            Some(caps.notify),
            Some(caps.isr),
            caps.device,
        ];
        for r in regions.into_iter().flatten() {
            let slot = &mut bars[usize::from(r.bar)];
            if slot.is_none() {
                let bar = pdev
                    .iomap_region(u32::from(r.bar), c"vgpu")
                    .inspect_err(|e| {
                        dev_err!(pdev, "cannot map BAR {}: error {}\n", r.bar, e.to_errno());
                    })?;
                *slot = Some(bar.into_devres()?);
            }
        }
        Ok(Transport { bars, caps })
    }

    /// The register blocks.
    pub(crate) fn caps(&self) -> &Caps {
        &self.caps
    }

    /// Runs `f` on the mapped BAR of `r` with the absolute offset of byte
    /// `off` of `r`, after checking that `size` bytes at `off` lie in `r`.
    fn with_reg<R>(
        &self,
        r: &Region,
        off: usize,
        size: usize,
        f: impl FnOnce(&pci::Bar<'static>, usize) -> Result<R>,
    ) -> Result<R> {
        let end = off.checked_add(size).ok_or(EIO)?;
        if end > r.len {
            return Err(EIO);
        }
        let bar = self.bars[usize::from(r.bar)].as_ref().ok_or(ENODEV)?;
        let abs = r.offset + off;
        // `None`: the BAR has been revoked because the device was unbound.
        match bar.try_access_with(|b| f(b, abs)) {
            None => Err(ENODEV),
            Some(Ok(v)) => Ok(v),
            // The BAR is mapped but does not hold the register: the device's
            // capability layout is inconsistent.
            Some(Err(_)) => Err(EIO),
        }
    }

    /// Reads register `R` of the common configuration block.
    fn read_common<R>(&self) -> Result<R>
    where
        R: FixedRegister,
        R::Storage: Width,
    {
        let raw = self.with_reg(
            &self.caps.common,
            R::OFFSET,
            <R::Storage as Width>::BYTES,
            <R::Storage as Width>::read,
        )?;
        Ok(raw.into())
    }

    /// Writes register `R` of the common configuration block.
    fn write_common<R>(&self, v: R) -> Result
    where
        R: FixedRegister,
        R::Storage: Width,
    {
        let raw: R::Storage = v.into();
        self.with_reg(
            &self.caps.common,
            R::OFFSET,
            <R::Storage as Width>::BYTES,
            |b, a| <R::Storage as Width>::write(b, a, raw),
        )
    }

    /// Writes a 64-bit queue address as two 32-bit halves, low half first,
    /// at the offset of register `R` and the next word.
    fn write_common_addr<R: FixedRegister>(&self, v: u64) -> Result {
        let c = &self.caps.common;
        self.with_reg(c, R::OFFSET, 4, |b, a| b.try_write32(v as u32, a))?;
        self.with_reg(c, R::OFFSET + 4, 4, |b, a| {
            b.try_write32((v >> 32) as u32, a)
        })
    }

    /// The device status byte.
    pub(crate) fn status(&self) -> Result<u8> {
        Ok(self.read_common::<common::DEVICE_STATUS>()?.into_raw())
    }

    /// Sets status bits (the status byte only accumulates bits until reset).
    pub(crate) fn add_status(&self, bits: u8) -> Result {
        let cur = self.status()?;
        self.write_common(common::DEVICE_STATUS::from_raw(cur | bits))
    }

    /// Resets the device: writes status 0 and waits (up to one second) until
    /// the device reads back 0. Once this returns `Ok`, the device no longer
    /// uses the rings, the interrupt vectors or any other state the driver
    /// gave it.
    pub(crate) fn reset(&self) -> Result {
        self.write_common(common::DEVICE_STATUS::from_raw(0))?;
        read_poll_timeout(
            || self.status(),
            |s| *s == 0,
            Delta::from_millis(1),
            Delta::from_secs(1),
        )?;
        Ok(())
    }

    /// The 64 feature bits the device offers.
    pub(crate) fn device_features(&self) -> Result<u64> {
        use common::{DEVICE_FEATURE, DEVICE_FEATURE_SELECT};
        self.write_common(DEVICE_FEATURE_SELECT::zeroed().with_select(0u32))?;
        let lo = self.read_common::<DEVICE_FEATURE>()?.bits().get();
        self.write_common(DEVICE_FEATURE_SELECT::zeroed().with_select(1u32))?;
        let hi = self.read_common::<DEVICE_FEATURE>()?.bits().get();
        Ok(u64::from(lo) | (u64::from(hi) << 32))
    }

    /// Writes the feature bits the driver accepts.
    pub(crate) fn set_driver_features(&self, features: u64) -> Result {
        use common::{DRIVER_FEATURE, DRIVER_FEATURE_SELECT};
        self.write_common(DRIVER_FEATURE_SELECT::zeroed().with_select(0u32))?;
        self.write_common(DRIVER_FEATURE::zeroed().with_bits(features as u32))?;
        self.write_common(DRIVER_FEATURE_SELECT::zeroed().with_select(1u32))?;
        self.write_common(DRIVER_FEATURE::zeroed().with_bits((features >> 32) as u32))
    }

    /// Number of virtqueues the device has.
    pub(crate) fn num_queues(&self) -> Result<u16> {
        Ok(self.read_common::<common::NUM_QUEUES>()?.count().get())
    }

    /// Selects queue `q` for the `QUEUE_*` registers.
    fn select_queue(&self, q: u16) -> Result {
        self.write_common(common::QUEUE_SELECT::zeroed().with_queue(q))
    }

    /// Largest size of queue `q` (0: the queue does not exist).
    pub(crate) fn queue_max_size(&self, q: u16) -> Result<u16> {
        self.select_queue(q)?;
        Ok(self.read_common::<common::QUEUE_SIZE>()?.size().get())
    }

    /// Routes configuration-change interrupts to MSI-X `vector`
    /// ([`MSI_NO_VECTOR`]: none). Fails with `EBUSY` if the device could not
    /// take the vector.
    pub(crate) fn set_config_vector(&self, vector: u16) -> Result {
        use common::MSIX_CONFIG;
        self.write_common(MSIX_CONFIG::zeroed().with_vector(vector))?;
        if self.read_common::<MSIX_CONFIG>()?.vector().get() != vector {
            return Err(EBUSY);
        }
        Ok(())
    }

    /// Programs queue `q` (size, MSI-X vector, ring addresses) and enables
    /// it. Returns the queue's `queue_notify_off`, checked against the
    /// notification area.
    pub(crate) fn setup_queue(&self, q: u16, cfg: &QueueConfig) -> Result<u16> {
        use common::{
            QUEUE_DESC, QUEUE_DEVICE, QUEUE_DRIVER, QUEUE_ENABLE, QUEUE_MSIX_VECTOR,
            QUEUE_NOTIFY_OFF, QUEUE_SIZE,
        };
        self.select_queue(q)?;
        if self.read_common::<QUEUE_ENABLE>()?.enabled() {
            // A freshly reset device has every queue disabled.
            return Err(EBUSY);
        }
        self.write_common(QUEUE_SIZE::zeroed().with_size(cfg.size))?;
        self.write_common(QUEUE_MSIX_VECTOR::zeroed().with_vector(cfg.vector))?;
        if self.read_common::<QUEUE_MSIX_VECTOR>()?.vector().get() != cfg.vector {
            return Err(EBUSY);
        }
        self.write_common_addr::<QUEUE_DESC>(cfg.desc)?;
        self.write_common_addr::<QUEUE_DRIVER>(cfg.driver)?;
        self.write_common_addr::<QUEUE_DEVICE>(cfg.device)?;
        let notify_off = self.read_common::<QUEUE_NOTIFY_OFF>()?.offset().get();
        self.notify_offset(notify_off)?;
        self.write_common(QUEUE_ENABLE::zeroed().with_enabled(true))?;
        Ok(notify_off)
    }

    /// Byte offset, inside the notification area, of the doorbell of a
    /// queue with `queue_notify_off` = `notify_off`.
    fn notify_offset(&self, notify_off: u16) -> Result<usize> {
        let off = u64::from(notify_off) * u64::from(self.caps.notify_off_multiplier);
        let off = usize::try_from(off).map_err(|_| EIO)?;
        if off.checked_add(2).ok_or(EIO)? > self.caps.notify.len {
            return Err(EIO);
        }
        Ok(off)
    }

    /// Notifies the device that queue `q` (with `queue_notify_off` =
    /// `notify_off`) has new buffers.
    pub(crate) fn notify(&self, q: u16, notify_off: u16) -> Result {
        let off = self.notify_offset(notify_off)?;
        self.with_reg(&self.caps.notify, off, 2, |b, a| b.try_write16(q, a))
    }

    /// Reads (and thereby clears) the ISR status byte. This also deasserts
    /// the INTx line.
    pub(crate) fn read_isr(&self) -> Result<u8> {
        self.with_reg(&self.caps.isr, 0, 1, |b, a| b.try_read8(a))
    }
}

/// Everything [`Transport::setup_queue`] programs for one queue.
pub(crate) struct QueueConfig {
    /// Number of descriptors (a power of two).
    pub(crate) size: u16,
    /// MSI-X vector for the queue's interrupts, or [`MSI_NO_VECTOR`].
    pub(crate) vector: u16,
    /// DMA address of the descriptor table.
    pub(crate) desc: u64,
    /// DMA address of the driver (available) ring.
    pub(crate) driver: u64,
    /// DMA address of the device (used) ring.
    pub(crate) device: u64,
}

/// Formats a status byte as `ACKNOWLEDGE|DRIVER|...`.
pub(crate) struct StatusBits(pub(crate) u8);

impl core::fmt::Display for StatusBits {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        const NAMES: [(u8, &str); 6] = [
            (status::ACKNOWLEDGE, "ACKNOWLEDGE"),
            (status::DRIVER, "DRIVER"),
            (status::FEATURES_OK, "FEATURES_OK"),
            (status::DRIVER_OK, "DRIVER_OK"),
            (status::NEEDS_RESET, "NEEDS_RESET"),
            (status::FAILED, "FAILED"),
        ];
        write!(f, "{:#04x}", self.0)?;
        let mut sep = " (";
        for (bit, name) in NAMES {
            if self.0 & bit != 0 {
                write!(f, "{sep}{name}")?;
                sep = "|";
            }
        }
        if sep == "|" {
            write!(f, ")")?;
        }
        Ok(())
    }
}

impl kernel::fmt::Display for StatusBits {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        core::fmt::Display::fmt(self, f)
    }
}
