//! The [`Driver`]: commands and events over a [`Transport`] (the
//! in-process one, [`InProcess`], drives a [`Device`] directly), and the
//! contexts, rings and buffers it sets up as a kernel driver would.

use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use vgpu_hwif::event::{Event, EventRecord};
use vgpu_hwif::firmware::fw_state;
use vgpu_hwif::packet::Packet;
use vgpu_hwif::pod::Pod;
use vgpu_hwif::proto::{
    engine, stats_kind, CaptureReadReply, CaptureReply, Command, ContextQueryReply, FwLogReadReply,
    FwStatusReply, IdentifyReply, ReplyHeader, RingStatus, StatsReply, Status,
    FEATURE_FIRMWARE_RUNNING, PROTOCOL_VERSION,
};
use vm_memory::{Bytes, GuestAddress, GuestMemoryAtomic, GuestMemoryMmap};

use super::{KitError, PacketWriter, PageTables, PhysAlloc};
use crate::config::DeviceConfig;
use crate::core::control::MAX_REPLY_SIZE;
use crate::core::gpu::Notify;
use crate::core::Device;

/// How a [`Driver`] reaches the device.
pub trait Transport {
    /// Sends one command (its bytes); returns the reply's bytes.
    fn command(&mut self, cmd: &[u8]) -> Vec<u8>;
    /// The next event record, waiting at most `timeout`.
    fn event(&mut self, timeout: Duration) -> Option<EventRecord>;
}

/// Signals a condition variable whenever the device posts an event.
#[derive(Debug, Default)]
struct EventSignal {
    posted: Mutex<u64>,
    cv: Condvar,
}

impl Notify for EventSignal {
    fn notify(&self) {
        *self.posted.lock().unwrap_or_else(PoisonError::into_inner) += 1;
        self.cv.notify_all();
    }
}

/// A [`Device`] driven directly, without virtqueues: commands go to
/// `handle_command`, events are taken from its event unit.
pub struct InProcess {
    /// The device.
    pub device: Device,
    signal: Arc<EventSignal>,
}

impl InProcess {
    /// A device configured as `config` whose guest memory is `mem`.
    pub fn new(config: DeviceConfig, mem: &GuestMemoryMmap) -> Self {
        Self::with_device(Device::new(config), mem)
    }

    /// Drives `device` over guest memory `mem`.
    pub fn with_device(device: Device, mem: &GuestMemoryMmap) -> Self {
        let signal = Arc::new(EventSignal::default());
        device.set_memory(GuestMemoryAtomic::new(mem.clone()));
        device.set_notifier(signal.clone());
        InProcess { device, signal }
    }
}

impl Transport for InProcess {
    fn command(&mut self, cmd: &[u8]) -> Vec<u8> {
        self.device
            .handle_command(cmd, MAX_REPLY_SIZE)
            .as_bytes()
            .to_vec()
    }

    fn event(&mut self, timeout: Duration) -> Option<EventRecord> {
        let deadline = Instant::now() + timeout;
        let mut posted = self
            .signal
            .posted
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        loop {
            if self.device.next_event().is_some() {
                return self.device.event_delivered();
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            posted = self
                .signal
                .cv
                .wait_timeout(posted, left.min(Duration::from_millis(20)))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

/// GPU VA of engine `e`'s ring in the contexts a [`Driver`] sets up.
pub const fn ring_va(e: u32) -> u64 {
    0x1_0000_0000 + 0x10_0000 * e as u64
}

/// GPU VA of engine `e`'s ring status block.
pub const fn status_va(e: u32) -> u64 {
    0x1_1000_0000 + 0x1000 * e as u64
}

/// Ring size a [`Driver`] uses.
pub const RING_SIZE: u32 = 16 * 1024;

/// Table memory reserved per context.
const TABLE_POOL: u64 = 256 << 10;

/// A ring set up by a [`Driver`].
#[derive(Debug, Clone)]
pub struct RingHandle {
    /// Writes packets at the driver's write pointer.
    pub writer: PacketWriter,
    /// Guest-physical address of the status block.
    pub status_pa: u64,
    /// Guest-physical address of the ring.
    pub pa: u64,
}

/// A context set up by a [`Driver`].
#[derive(Debug)]
pub struct GpuContext {
    /// Id.
    pub id: u32,
    /// Its page tables.
    pub pt: PageTables,
    /// Its rings, by engine.
    pub rings: [Option<RingHandle>; engine::COUNT as usize],
}

impl GpuContext {
    /// The ring of engine `e` (set up with [`Driver::ring`]).
    pub fn ring(&mut self, e: u32) -> Option<&mut RingHandle> {
        self.rings.get_mut(e as usize)?.as_mut()
    }
}

/// The driver side of the device over a [`Transport`].
pub struct Driver<T: Transport> {
    /// The transport.
    pub transport: T,
    /// Guest memory.
    pub mem: GuestMemoryMmap,
    /// Where GPU objects (tables, rings, buffers) are allocated.
    pub alloc: PhysAlloc,
    /// The device's `IDENTIFY` data.
    pub identity: IdentifyReply,
    tag: u64,
}

impl<T: Transport> Driver<T> {
    /// Identifies the device and, if it is in its boot state, boots the
    /// in-tree firmware image of its generation; GPU objects are allocated
    /// from `alloc`.
    pub fn new(transport: T, mem: GuestMemoryMmap, alloc: PhysAlloc) -> Result<Self, KitError> {
        let mut d = Self::unbooted(transport, mem, alloc)?;
        if d.identity.features & FEATURE_FIRMWARE_RUNNING == 0 {
            d.boot_default_firmware()?;
        }
        Ok(d)
    }

    /// Identifies the device and leaves it as it is (in its boot state
    /// unless it runs preloaded).
    pub fn unbooted(
        transport: T,
        mem: GuestMemoryMmap,
        alloc: PhysAlloc,
    ) -> Result<Self, KitError> {
        let mut d = Driver {
            transport,
            mem,
            alloc,
            identity: IdentifyReply::zeroed(),
            tag: 0,
        };
        let r = d.command(Command::Identify)?;
        d.identity = IdentifyReply::read_from(&r).ok_or(KitError::BadReply(r.len()))?;
        Ok(d)
    }

    /// Boots the in-tree firmware image of the device's generation (after a
    /// `DEVICE_RESET`, too).
    pub fn boot_default_firmware(&mut self) -> Result<FwStatusReply, KitError> {
        let image = vgpu_firmware::image_for(self.generation());
        self.boot_firmware(&image)
    }

    /// `FW_LOAD` of `image` (written into guest memory the allocator hands
    /// back afterwards) for this interface version: the boot status.
    pub fn load_firmware(&mut self, image: &[u8]) -> Result<FwStatusReply, KitError> {
        self.load_firmware_as(image, PROTOCOL_VERSION)
    }

    /// `FW_LOAD` of `image` for a driver of interface version `interface`.
    pub fn load_firmware_as(
        &mut self,
        image: &[u8],
        interface: u32,
    ) -> Result<FwStatusReply, KitError> {
        let saved = self.alloc.clone();
        let len = image.len() as u64;
        let pa = self.alloc.alloc(len.max(1), 4096)?;
        self.mem.write_slice(image, GuestAddress(pa))?;
        let r = self.command(Command::FwLoad {
            pa,
            size: u32::try_from(image.len()).unwrap_or(u32::MAX),
            interface,
        });
        self.alloc = saved;
        FwStatusReply::read_from(&r?).ok_or(KitError::BadReply(0))
    }

    /// `DEVICE_RESET`, then the in-tree firmware booted again (the reset
    /// returns the device to its boot state): the reset's reply.
    pub fn device_reset(&mut self) -> Result<Vec<u8>, KitError> {
        let r = self.command(Command::DeviceReset)?;
        self.boot_default_firmware()?;
        Ok(r)
    }

    /// The boot status.
    pub fn firmware_status(&mut self) -> Result<FwStatusReply, KitError> {
        let r = self.command(Command::FwStatus)?;
        FwStatusReply::read_from(&r).ok_or(KitError::BadReply(r.len()))
    }

    /// Loads and starts `image` and waits (at most 2 s) until it runs;
    /// refreshes the identify data.
    pub fn boot_firmware(&mut self, image: &[u8]) -> Result<FwStatusReply, KitError> {
        let st = self.load_firmware(image)?;
        if st.state != fw_state::LOADED {
            return Err(KitError::Firmware {
                state: st.state,
                error: st.error,
            });
        }
        self.command(Command::FwStart)?;
        let t0 = Instant::now();
        loop {
            let st = self.firmware_status()?;
            match st.state {
                fw_state::RUNNING => {
                    let r = self.command(Command::Identify)?;
                    self.identity =
                        IdentifyReply::read_from(&r).ok_or(KitError::BadReply(r.len()))?;
                    return Ok(st);
                }
                fw_state::BOOTING if t0.elapsed() < Duration::from_secs(2) => {
                    std::thread::sleep(Duration::from_micros(200));
                }
                state => {
                    return Err(KitError::Firmware {
                        state,
                        error: st.error,
                    })
                }
            }
        }
    }

    /// The whole firmware log.
    pub fn firmware_log(&mut self) -> Result<String, KitError> {
        let saved = self.alloc.clone();
        let len = vgpu_hwif::proto::FW_LOG_READ_MAX;
        let buf = self.alloc.alloc(u64::from(len), 4096);
        let mut out = Vec::new();
        let mut pos = 0;
        let res = buf.and_then(|buf_pa| loop {
            let r = self.command(Command::FwLogRead { pos, len, buf_pa })?;
            let rep = FwLogReadReply::read_from(&r).ok_or(KitError::BadReply(r.len()))?;
            if rep.written == 0 {
                break Ok(());
            }
            let mut chunk = vec![0u8; rep.written as usize];
            self.mem.read_slice(&mut chunk, GuestAddress(buf_pa))?;
            out.extend_from_slice(&chunk);
            pos = rep.start + u64::from(rep.written);
        });
        self.alloc = saved;
        res.map(|()| String::from_utf8_lossy(&out).into_owned())
    }

    /// The device's generation.
    pub fn generation(&self) -> u32 {
        self.identity.generation
    }

    /// Sends `cmd`; returns the reply's status and bytes.
    pub fn try_command(&mut self, cmd: Command) -> (Status, Vec<u8>) {
        self.tag += 1;
        let mut buf = [0u8; vgpu_hwif::proto::MAX_COMMAND_SIZE];
        let n = cmd.encode(self.tag, &mut buf).unwrap_or(0);
        let reply = self.transport.command(buf.get(..n).unwrap_or(&[]));
        let status = ReplyHeader::read_from(&reply)
            .and_then(|h| Status::from_u32(h.status))
            .unwrap_or(Status::BadDescriptor);
        (status, reply)
    }

    /// Sends `cmd`; the reply's bytes if its status is `OK`.
    pub fn command(&mut self, cmd: Command) -> Result<Vec<u8>, KitError> {
        match self.try_command(cmd) {
            (Status::Ok, r) => Ok(r),
            (s, _) => Err(KitError::Status(s)),
        }
    }

    /// Sends `cmd` and returns only its status.
    pub fn status(&mut self, cmd: Command) -> Status {
        self.try_command(cmd).0
    }

    /// The next event record.
    pub fn event_record(&mut self, timeout: Duration) -> Result<EventRecord, KitError> {
        self.transport
            .event(timeout)
            .ok_or(KitError::Timeout(timeout))
    }

    /// The next event, decoded.
    pub fn event(&mut self, timeout: Duration) -> Result<Event, KitError> {
        let rec = self.event_record(timeout)?;
        Event::from_record(&rec).map_err(|_| KitError::BadEvent(rec.kind))
    }

    /// Creates context `id` with empty page tables.
    pub fn context(&mut self, id: u32, priority: u32, flags: u32) -> Result<GpuContext, KitError> {
        let pool = self.alloc.alloc(TABLE_POOL, 4096)?;
        let pt = PageTables::new(&self.mem, PhysAlloc::new(pool, TABLE_POOL))?;
        self.command(Command::ContextCreate {
            ctx_id: id,
            priority,
            flags,
            pt_root: pt.root(),
        })?;
        Ok(GpuContext {
            id,
            pt,
            rings: [None, None],
        })
    }

    /// Allocates `size` bytes (rounded up to 4 KiB pages, zeroed) and maps
    /// them at `va` with `perms`; returns the guest-physical address.
    pub fn buffer(
        &mut self,
        ctx: &mut GpuContext,
        va: u64,
        size: u64,
        perms: u64,
    ) -> Result<u64, KitError> {
        let size = size.div_ceil(4096) * 4096;
        let pa = self.alloc.alloc(size, 4096)?;
        let zero = [0u8; 4096];
        let mut off = 0;
        while off < size {
            self.mem.write_slice(&zero, GuestAddress(pa + off))?;
            off += 4096;
        }
        ctx.pt.map_range(&self.mem, va, pa, size, perms)?;
        Ok(pa)
    }

    /// Sets up engine `e`'s ring of [`RING_SIZE`] bytes at [`ring_va`]
    /// (`READ | EXEC`) with its status block at [`status_va`] (`READ |
    /// WRITE`), and registers it.
    pub fn ring(&mut self, ctx: &mut GpuContext, e: u32) -> Result<(), KitError> {
        self.ring_of_size(ctx, e, RING_SIZE)
    }

    /// [`Driver::ring`] with a ring of `size` bytes (a power of two,
    /// 4 KiB to 1 MiB).
    pub fn ring_of_size(
        &mut self,
        ctx: &mut GpuContext,
        e: u32,
        size: u32,
    ) -> Result<(), KitError> {
        use vgpu_hwif::mmu::{PTE_EXEC, PTE_READ, PTE_WRITE};
        let pa = self.buffer(ctx, ring_va(e), u64::from(size), PTE_READ | PTE_EXEC)?;
        let status_pa = self.buffer(ctx, status_va(e), 4096, PTE_READ | PTE_WRITE)?;
        self.command(Command::RingCreate {
            ctx_id: ctx.id,
            engine: e,
            size,
            ring_va: ring_va(e),
            status_va: status_va(e),
        })?;
        if let Some(slot) = ctx.rings.get_mut(e as usize) {
            *slot = Some(RingHandle {
                writer: PacketWriter::ring(pa, ring_va(e), size, self.generation()),
                status_pa,
                pa,
            });
        }
        Ok(())
    }

    /// Writes `packets` into engine `e`'s ring and rings the doorbell;
    /// returns the GPU VA of each packet.
    pub fn submit(
        &mut self,
        ctx: &mut GpuContext,
        e: u32,
        packets: &[Packet],
    ) -> Result<Vec<u64>, KitError> {
        let id = ctx.id;
        let ring = ctx.ring(e).ok_or(KitError::Status(Status::NotFound))?;
        let mut vas = Vec::with_capacity(packets.len());
        for p in packets {
            vas.push(ring.writer.packet(&self.mem, p)?);
        }
        let wptr = ring.writer.wptr();
        self.doorbell(id, e, wptr)?;
        Ok(vas)
    }

    /// `DOORBELL`.
    pub fn doorbell(&mut self, ctx_id: u32, e: u32, wptr: u32) -> Result<(), KitError> {
        self.command(Command::Doorbell {
            ctx_id,
            engine: e,
            wptr,
        })
        .map(|_| ())
    }

    /// Reads engine `e`'s ring status block.
    pub fn ring_status(&self, ctx: &GpuContext, e: u32) -> Result<RingStatus, KitError> {
        let pa = ctx
            .rings
            .get(e as usize)
            .and_then(Option::as_ref)
            .ok_or(KitError::Status(Status::NotFound))?
            .status_pa;
        let mut b = [0u8; 64];
        self.mem.read_slice(&mut b, GuestAddress(pa))?;
        RingStatus::read_from(&b).ok_or(KitError::BadReply(64))
    }

    /// Polls engine `e`'s status block until `done` accepts it; returns
    /// it.
    pub fn wait_status(
        &self,
        ctx: &GpuContext,
        e: u32,
        timeout: Duration,
        mut done: impl FnMut(&RingStatus) -> bool,
    ) -> Result<RingStatus, KitError> {
        let deadline = Instant::now() + timeout;
        loop {
            let s = self.ring_status(ctx, e)?;
            if done(&s) {
                return Ok(s);
            }
            if Instant::now() > deadline {
                return Err(KitError::Timeout(timeout));
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// Waits until engine `e`'s ring has settled: idle with its read
    /// pointer at the write pointer written so far, or waiting on a
    /// semaphore, stalled on a fault, or stopped. Returns the status block.
    pub fn settle(
        &self,
        ctx: &GpuContext,
        e: u32,
        timeout: Duration,
    ) -> Result<RingStatus, KitError> {
        use vgpu_hwif::proto::ring_state::{IDLE, RUNNING};
        let wptr = ctx
            .rings
            .get(e as usize)
            .and_then(Option::as_ref)
            .map(|r| r.writer.wptr())
            .ok_or(KitError::Status(Status::NotFound))?;
        self.wait_status(ctx, e, timeout, |s| match s.state {
            IDLE => s.rptr == wptr,
            RUNNING => false,
            _ => true,
        })
    }

    /// `CONTEXT_QUERY`.
    pub fn query(&mut self, ctx_id: u32) -> Result<ContextQueryReply, KitError> {
        let r = self.command(Command::ContextQuery { ctx_id })?;
        ContextQueryReply::read_from(&r).ok_or(KitError::BadReply(r.len()))
    }

    /// `SAN_REPORT`: the sanitizer's report `seq`.
    pub fn san_report(&mut self, seq: u64) -> Result<vgpu_hwif::sanitize::SanReport, KitError> {
        let r = self.command(Command::SanReport { seq })?;
        vgpu_hwif::proto::SanReportReply::read_from(&r)
            .map(|r| r.report)
            .ok_or(KitError::BadReply(r.len()))
    }

    /// `SAN_MEM`: declares (`own`) or gives back guest-physical ranges as
    /// GPU memory, at most [`vgpu_hwif::proto::SAN_MEM_RANGES`] per
    /// command.
    pub fn san_mem(&mut self, own: bool, ranges: &[(u64, u64)]) -> Result<(), KitError> {
        use vgpu_hwif::proto::{SAN_MEM_OWN, SAN_MEM_RELEASE};
        self.san_mem_op(if own { SAN_MEM_OWN } else { SAN_MEM_RELEASE }, ranges)
    }

    /// `SAN_MEM` with operation `op` (`SAN_MEM_OWN_TABLES` declares page
    /// tables), at most [`vgpu_hwif::proto::SAN_MEM_RANGES`] ranges per
    /// command.
    pub fn san_mem_op(&mut self, op: u32, ranges: &[(u64, u64)]) -> Result<(), KitError> {
        self.san_mem_tagged(op, ranges, 0, 0)
    }

    /// `SAN_MEM` with operation `op`, tagged with the driver's name for the
    /// object (`object`, 0: none) and its placement generation.
    pub fn san_mem_tagged(
        &mut self,
        op: u32,
        ranges: &[(u64, u64)],
        object: u64,
        gen: u32,
    ) -> Result<(), KitError> {
        use vgpu_hwif::proto::SAN_MEM_RANGES;
        use vgpu_hwif::sanitize::SanRange;
        for chunk in ranges.chunks(SAN_MEM_RANGES) {
            let mut rs = [SanRange { pa: 0, size: 0 }; SAN_MEM_RANGES];
            for (d, &(pa, size)) in rs.iter_mut().zip(chunk) {
                *d = SanRange { pa, size };
            }
            self.command(Command::SanMem {
                op,
                count: chunk.len() as u32,
                ranges: rs,
                object,
                gen,
            })?;
        }
        Ok(())
    }

    /// `QUERY_STATS` of engine `e`.
    pub fn engine_stats(&mut self, e: u32) -> Result<StatsReply, KitError> {
        self.stats(stats_kind::ENGINE, e)
    }

    /// `QUERY_STATS`.
    pub fn stats(&mut self, kind: u32, id: u32) -> Result<StatsReply, KitError> {
        let r = self.command(Command::QueryStats { kind, id })?;
        StatsReply::read_from(&r).ok_or(KitError::BadReply(r.len()))
    }

    /// `CAPTURE` of context `ctx_id` on engine `e` for `reason`
    /// (`vgpu_hwif::capture::reason`).
    pub fn capture(&mut self, ctx_id: u32, e: u32, reason: u32) -> Result<CaptureReply, KitError> {
        let r = self.command(Command::Capture {
            ctx_id,
            engine: e,
            reason,
        })?;
        CaptureReply::read_from(&r).ok_or(KitError::BadReply(r.len()))
    }

    /// Reads a whole capture as a driver does: `CAPTURE_READ` in chunks of
    /// `chunk` bytes into a buffer in guest memory, copied out after each.
    /// `capture_id` 0 reads the newest capture of `ctx_id`. Returns the
    /// last reply and the bytes.
    pub fn read_capture(
        &mut self,
        capture_id: u32,
        ctx_id: u32,
        chunk: u32,
    ) -> Result<(CaptureReadReply, Vec<u8>), KitError> {
        let buf = self.alloc.alloc(u64::from(chunk), 4096)?;
        let mut out = Vec::new();
        let mut id = capture_id;
        loop {
            let r = self.command(Command::CaptureRead {
                capture_id: id,
                ctx_id,
                offset: out.len() as u32,
                len: chunk,
                buf_pa: buf,
            })?;
            let rep = CaptureReadReply::read_from(&r).ok_or(KitError::BadReply(r.len()))?;
            // Later chunks name the capture the first one found.
            id = rep.capture_id;
            let mut bytes = vec![0u8; rep.written as usize];
            self.mem.read_slice(&mut bytes, GuestAddress(buf))?;
            out.extend_from_slice(&bytes);
            if rep.written == 0 || out.len() >= rep.size as usize {
                return Ok((rep, out));
            }
        }
    }
}
