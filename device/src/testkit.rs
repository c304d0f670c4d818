//! Driver-side helpers for programming the GPU from a test, a benchmark or
//! a host-side tool: they do in guest memory what a driver does, and show
//! how (see `docs/hardware.md` for the rules they follow).
//!
//! * [`PhysAlloc`] hands out guest-physical memory (page-aligned bump
//!   allocation).
//! * [`PageTables`] builds a context's four-level page tables: map 4 KiB
//!   or 2 MiB pages, unmap, find the address of any entry (to corrupt it on
//!   purpose), translate in software.
//! * [`PacketWriter`] writes packets into a ring (wrapping, tracking the
//!   write pointer to publish with `DOORBELL`) or into a command buffer for
//!   `INDIRECT`, for either generation, padding gen-2 copy-engine packets
//!   to 64 bytes with `NOP`s.
//! * [`Driver`] sends commands and receives events over any
//!   [`Transport`] — [`InProcess`] drives a [`Device`] directly; the
//!   integration tests plug in real virtqueues over vhost-user — and sets
//!   up contexts, rings and buffers the way a kernel driver would.
//!
//! Guest memory is a `vm_memory::GuestMemoryMmap`.
//!
//! # Example: one fence
//!
//! ```
//! use std::time::Duration;
//! use vgpu_device::config::{DeviceConfig, Generation};
//! use vgpu_device::testkit::{Driver, InProcess, PhysAlloc};
//! use vgpu_hwif::event::Event;
//! use vgpu_hwif::mmu::{PTE_READ, PTE_WRITE};
//! use vgpu_hwif::packet::Packet;
//! use vgpu_hwif::proto::engine;
//! use vm_memory::{GuestAddress, GuestMemoryMmap};
//!
//! let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 8 << 20)]).unwrap();
//! let dev = InProcess::new(DeviceConfig::new(Generation::Gen2, 4).unwrap(), &mem);
//! let mut drv = Driver::new(dev, mem, PhysAlloc::new(0x10_0000, 7 << 20)).unwrap();
//! let mut ctx = drv.context(1, 1, 0).unwrap();
//! drv.ring(&mut ctx, engine::COPY).unwrap();
//! drv.buffer(&mut ctx, 0x20_0000, 4096, PTE_READ | PTE_WRITE).unwrap();
//! drv.submit(&mut ctx, engine::COPY, &[Packet::Fence { va: 0x20_0000, seqno: 1, flags: 0 }])
//!     .unwrap();
//! let ev = drv.event(Duration::from_secs(5)).unwrap();
//! assert_eq!(ev, Event::Fence { ctx_id: 1, engine: 0, seqno: 1, va: 0x20_0000 });
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use vgpu_hwif::event::{Event, EventRecord};
use vgpu_hwif::mmu::{level_index, CachePolicy, Pte, LEVELS};
use vgpu_hwif::packet::{
    encode_header, is_copy_engine_packet, Packet, GEN2_ENGINE_PACKET_ALIGN, OP_NOP,
};
use vgpu_hwif::pod::Pod;
use vgpu_hwif::proto::{
    engine, stats_kind, CaptureReadReply, CaptureReply, Command, ContextQueryReply, IdentifyReply,
    ReplyHeader, RingStatus, StatsReply, Status,
};
use vm_memory::{Bytes, GuestAddress, GuestMemoryAtomic, GuestMemoryMmap};

use crate::config::DeviceConfig;
use crate::core::control::MAX_REPLY_SIZE;
use crate::core::gpu::Notify;
use crate::core::Device;

/// Errors of the helpers.
#[derive(Debug, thiserror::Error)]
pub enum KitError {
    /// The allocator's range is used up.
    #[error("out of guest memory: {0:#x} bytes requested")]
    OutOfMemory(u64),
    /// Guest memory could not be written or read.
    #[error("guest memory: {0}")]
    Memory(#[from] vm_memory::GuestMemoryError),
    /// A command buffer is full.
    #[error("command buffer full")]
    BufferFull,
    /// A huge mapping would replace a level-0 table, or a 4 KiB one would
    /// go inside a huge page.
    #[error("mapping conflict at {0:#x}")]
    Conflict(u64),
    /// The device answered a command with this status.
    #[error("command failed: {}", .0.name())]
    Status(Status),
    /// The reply could not be parsed.
    #[error("malformed reply ({0} bytes)")]
    BadReply(usize),
    /// No event arrived in time.
    #[error("no event within {0:?}")]
    Timeout(Duration),
    /// An event record could not be decoded.
    #[error("undecodable event record kind {0}")]
    BadEvent(u32),
}

/// A bump allocator of guest-physical memory.
#[derive(Debug, Clone)]
pub struct PhysAlloc {
    next: u64,
    end: u64,
}

impl PhysAlloc {
    /// Allocates from `base..base + size`.
    pub fn new(base: u64, size: u64) -> Self {
        PhysAlloc {
            next: base,
            end: base + size,
        }
    }

    /// `size` bytes aligned to `align` (a power of two).
    pub fn alloc(&mut self, size: u64, align: u64) -> Result<u64, KitError> {
        let at = (self.next + align - 1) & !(align - 1);
        if at + size > self.end {
            return Err(KitError::OutOfMemory(size));
        }
        self.next = at + size;
        Ok(at)
    }

    /// One zeroed 4 KiB page.
    pub fn page(&mut self, mem: &GuestMemoryMmap) -> Result<u64, KitError> {
        let pa = self.alloc(4096, 4096)?;
        mem.write_slice(&[0u8; 4096], GuestAddress(pa))?;
        Ok(pa)
    }
}

/// Reads a 64-bit little-endian value from guest memory.
pub fn read_u64(mem: &GuestMemoryMmap, pa: u64) -> Result<u64, KitError> {
    Ok(u64::from_le(mem.read_obj(GuestAddress(pa))?))
}

/// Writes a 64-bit little-endian value into guest memory.
pub fn write_u64(mem: &GuestMemoryMmap, pa: u64, v: u64) -> Result<(), KitError> {
    Ok(mem.write_obj(v.to_le(), GuestAddress(pa))?)
}

/// A context's page tables in guest memory.
#[derive(Debug)]
pub struct PageTables {
    root: u64,
    /// The memory tables are allocated from: (first byte, bytes).
    pool: (u64, u64),
    /// Table for (level, VA bits above that level's range).
    tables: HashMap<(u32, u64), u64>,
    alloc: PhysAlloc,
}

impl PageTables {
    /// Empty tables; tables are allocated from `alloc` (the root at once).
    pub fn new(mem: &GuestMemoryMmap, mut alloc: PhysAlloc) -> Result<Self, KitError> {
        let pool = (alloc.next, alloc.end.saturating_sub(alloc.next));
        let root = alloc.page(mem)?;
        let mut tables = HashMap::new();
        tables.insert((LEVELS - 1, 0), root);
        Ok(PageTables {
            root,
            pool,
            tables,
            alloc,
        })
    }

    /// Guest-physical address of the root table (for `CONTEXT_CREATE`).
    pub fn root(&self) -> u64 {
        self.root
    }

    /// The memory the tables are allocated from: (first byte, bytes).
    pub fn pool(&self) -> (u64, u64) {
        self.pool
    }

    /// A new zeroed table page from the pool, linked nowhere.
    pub fn new_table(&mut self, mem: &GuestMemoryMmap) -> Result<u64, KitError> {
        self.alloc.page(mem)
    }

    fn key(va: u64, level: u32) -> (u32, u64) {
        (level, va >> (12 + 9 * (level + 1)))
    }

    /// The table of `level` covering `va`, created if missing.
    fn table(&mut self, mem: &GuestMemoryMmap, va: u64, level: u32) -> Result<u64, KitError> {
        if let Some(&t) = self.tables.get(&Self::key(va, level)) {
            return Ok(t);
        }
        let parent = self.table(mem, va, level + 1)?;
        let slot = parent + 8 * level_index(va, level + 1) as u64;
        let old = Pte::from_bits(read_u64(mem, slot)?);
        if old.is_huge() {
            return Err(KitError::Conflict(va));
        }
        let t = self.alloc.page(mem)?;
        write_u64(mem, slot, Pte::table(t).bits())?;
        self.tables.insert(Self::key(va, level), t);
        Ok(t)
    }

    /// Guest-physical address of the entry for `va` at `level` (3 = root),
    /// if its table exists.
    pub fn entry_addr(&self, va: u64, level: u32) -> Option<u64> {
        let t = self.tables.get(&Self::key(va, level))?;
        Some(t + 8 * level_index(va, level) as u64)
    }

    /// Maps the 4 KiB page at `va` to `pa` with `perms`
    /// (`PTE_READ | PTE_WRITE | PTE_EXEC` subset).
    pub fn map_4k(
        &mut self,
        mem: &GuestMemoryMmap,
        va: u64,
        pa: u64,
        perms: u64,
    ) -> Result<(), KitError> {
        let t = self.table(mem, va, 0)?;
        write_u64(
            mem,
            t + 8 * level_index(va, 0) as u64,
            Pte::leaf(pa, perms, CachePolicy::Cached).bits(),
        )
    }

    /// Maps the 2 MiB page at `va` to `pa`.
    pub fn map_2m(
        &mut self,
        mem: &GuestMemoryMmap,
        va: u64,
        pa: u64,
        perms: u64,
    ) -> Result<(), KitError> {
        if self.tables.contains_key(&Self::key(va, 0)) {
            return Err(KitError::Conflict(va));
        }
        let t = self.table(mem, va, 1)?;
        write_u64(
            mem,
            t + 8 * level_index(va, 1) as u64,
            Pte::huge(pa, perms, CachePolicy::Cached).bits(),
        )
    }

    /// Maps `len` bytes (rounded up to pages) of contiguous physical
    /// memory at `pa` to `va` with 4 KiB pages.
    pub fn map_range(
        &mut self,
        mem: &GuestMemoryMmap,
        va: u64,
        pa: u64,
        len: u64,
        perms: u64,
    ) -> Result<(), KitError> {
        let mut off = 0;
        while off < len {
            self.map_4k(mem, va + off, pa + off, perms)?;
            off += 4096;
        }
        Ok(())
    }

    /// Clears the leaf entry of `va` (4 KiB or 2 MiB), if mapped.
    pub fn unmap(&mut self, mem: &GuestMemoryMmap, va: u64) -> Result<(), KitError> {
        for level in [0, 1] {
            if let Some(slot) = self.entry_addr(va, level) {
                let e = Pte::from_bits(read_u64(mem, slot)?);
                if level == 0 || e.is_huge() {
                    write_u64(mem, slot, 0)?;
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// Overwrites the entry for `va` at `level` with `value` (for tests of
    /// malformed tables). Returns the entry's address.
    pub fn set_entry(
        &mut self,
        mem: &GuestMemoryMmap,
        va: u64,
        level: u32,
        value: u64,
    ) -> Result<u64, KitError> {
        let t = self.table(mem, va, level)?;
        let slot = t + 8 * level_index(va, level) as u64;
        write_u64(mem, slot, value)?;
        Ok(slot)
    }

    /// Translates `va` in software (valid entries only, no checks beyond
    /// that): what a correct walk returns.
    pub fn translate(&self, mem: &GuestMemoryMmap, va: u64) -> Option<u64> {
        let mut table = self.root;
        for level in (0..LEVELS).rev() {
            let e = Pte::from_bits(read_u64(mem, table + 8 * level_index(va, level) as u64).ok()?);
            if !e.is_valid() {
                return None;
            }
            let addr = e.address();
            if level == 0 {
                return Some(addr | (va & 0xfff));
            }
            if level == 1 && e.is_huge() {
                return Some(addr | (va & 0x1f_ffff));
            }
            table = addr;
        }
        None
    }
}

/// Writes packets into a ring or a command buffer that is contiguous in
/// guest-physical memory at `pa` and mapped at GPU VA `va`.
#[derive(Debug, Clone)]
pub struct PacketWriter {
    pa: u64,
    va: u64,
    size: u32,
    ring: bool,
    generation: u32,
    wptr: u32,
}

impl PacketWriter {
    /// A ring of `size` bytes (a power of two).
    pub fn ring(pa: u64, va: u64, size: u32, generation: u32) -> Self {
        PacketWriter {
            pa,
            va,
            size,
            ring: true,
            generation,
            wptr: 0,
        }
    }

    /// A command buffer of at most `size` bytes.
    pub fn buffer(pa: u64, va: u64, size: u32, generation: u32) -> Self {
        PacketWriter {
            pa,
            va,
            size,
            ring: false,
            generation,
            wptr: 0,
        }
    }

    /// Bytes written so far: the ring's write pointer to publish with
    /// `DOORBELL`, or the command buffer's size for `INDIRECT`.
    pub fn wptr(&self) -> u32 {
        self.wptr
    }

    /// Continues at write pointer `wptr` (e.g. after an engine reset moved
    /// the read pointer there).
    pub fn set_wptr(&mut self, wptr: u32) {
        self.wptr = wptr;
    }

    /// GPU VA of the next word.
    pub fn next_va(&self) -> u64 {
        self.va + u64::from(self.offset(self.wptr))
    }

    /// GPU VA of the buffer.
    pub fn va(&self) -> u64 {
        self.va
    }

    fn offset(&self, ptr: u32) -> u32 {
        if self.ring {
            ptr & (self.size - 1)
        } else {
            ptr
        }
    }

    /// Writes raw words (wrapping in a ring).
    pub fn words(&mut self, mem: &GuestMemoryMmap, words: &[u32]) -> Result<u64, KitError> {
        let at = self.next_va();
        if !self.ring && (self.wptr as usize + 4 * words.len()) > self.size as usize {
            return Err(KitError::BufferFull);
        }
        for w in words {
            let off = self.offset(self.wptr);
            mem.write_obj(w.to_le(), GuestAddress(self.pa + u64::from(off)))?;
            self.wptr = self.wptr.wrapping_add(4);
        }
        Ok(at)
    }

    /// A `NOP` of `words` words.
    pub fn nop(&mut self, mem: &GuestMemoryMmap, words: u32) -> Result<u64, KitError> {
        let mut w = vec![0u32; words as usize];
        if let Some(h) = w.first_mut() {
            *h = encode_header(self.generation, OP_NOP, words);
        }
        self.words(mem, &w)
    }

    /// Writes `p` encoded for the writer's generation (on gen 2, copy-engine
    /// packets are first aligned to 64 bytes with a `NOP`). Returns the
    /// packet's GPU VA.
    pub fn packet(&mut self, mem: &GuestMemoryMmap, p: &Packet) -> Result<u64, KitError> {
        if let Packet::Nop { words } = *p {
            return self.nop(mem, words.clamp(1, vgpu_hwif::packet::MAX_PACKET_WORDS));
        }
        if self.generation >= 2 && is_copy_engine_packet(p.opcode()) {
            let misalign = self.next_va() % GEN2_ENGINE_PACKET_ALIGN;
            if misalign != 0 {
                self.nop(mem, ((GEN2_ENGINE_PACKET_ALIGN - misalign) / 4) as u32)?;
            }
        }
        let mut buf = [0u32; 16];
        let n = p.encode(self.generation, &mut buf).unwrap_or(0);
        self.words(mem, buf.get(..n).unwrap_or(&[]))
    }
}

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
    /// Identifies the device; GPU objects are allocated from `alloc`.
    pub fn new(transport: T, mem: GuestMemoryMmap, alloc: PhysAlloc) -> Result<Self, KitError> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use vgpu_hwif::mmu::{PTE_READ, PTE_WRITE};
    use vgpu_hwif::packet::{decode_header, OP_COPY};

    fn mem() -> GuestMemoryMmap {
        GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x80_0000)]).unwrap()
    }

    #[test]
    fn page_tables_translate_what_they_map() {
        let m = mem();
        let mut pt = PageTables::new(&m, PhysAlloc::new(0x1000, 0x10_0000)).unwrap();
        pt.map_4k(&m, 0x7f_0000_1000, 0x20_3000, PTE_READ).unwrap();
        pt.map_2m(&m, 0x40_0000, 0x60_0000, PTE_READ | PTE_WRITE)
            .unwrap();
        assert_eq!(pt.translate(&m, 0x7f_0000_1234), Some(0x20_3234));
        assert_eq!(pt.translate(&m, 0x45_6789), Some(0x65_6789));
        assert_eq!(pt.translate(&m, 0x7f_0000_2000), None);
        assert!(matches!(
            pt.map_4k(&m, 0x40_1000, 0, PTE_READ),
            Err(KitError::Conflict(_))
        ));
        pt.unmap(&m, 0x40_0000).unwrap();
        assert_eq!(pt.translate(&m, 0x45_6789), None);
        let slot = pt.entry_addr(0x7f_0000_1000, 0).unwrap();
        assert_eq!(
            Pte::from_bits(read_u64(&m, slot).unwrap()).address(),
            0x20_3000
        );
    }

    #[test]
    fn ring_writer_wraps_and_pads_gen2_copies() {
        let m = mem();
        let mut w = PacketWriter::ring(0x1_0000, 0x100_0000, 4096, 2);
        w.set_wptr(4096 - 8);
        let va = w
            .packet(
                &m,
                &Packet::Copy {
                    src: 1,
                    dst: 2,
                    size: 3,
                },
            )
            .unwrap();
        // 8 bytes of NOP to the ring's end, then the packet at offset 0.
        assert_eq!(va, 0x100_0000);
        assert_eq!(w.wptr(), 4096 + 28);
        let hdr: u32 = m.read_obj(GuestAddress(0x1_0000)).unwrap();
        assert_eq!(decode_header(2, hdr).unwrap().opcode, OP_COPY);
        let nop: u32 = m.read_obj(GuestAddress(0x1_0000 + 4088)).unwrap();
        assert_eq!(decode_header(2, nop).unwrap().words, 2);
        let mut b = PacketWriter::buffer(0x2_0000, 0x200_0000, 8, 1);
        assert!(b.nop(&m, 2).is_ok());
        assert!(matches!(b.nop(&m, 1), Err(KitError::BufferFull)));
    }
}
