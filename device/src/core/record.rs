//! Record mode: every guest-to-device input of a session in one file, so
//! that the session can run again host-side without a VM
//! (`vgpu-replay --record FILE`).
//!
//! # What is recorded
//!
//! * the device's configuration and the guest memory map it was handed;
//! * every control command with its time, the room of its reply buffer and
//!   how many packets each engine had started by then; its reply (compared
//!   on replay);
//! * the guest memory the engines read: whenever an engine translates a
//!   page for reading (ring fetches, command buffers, copy sources, kernel
//!   modules and arguments, kernel global memory, semaphores) or walks a
//!   page-table page, the 4 KiB page is logged if its contents differ from
//!   the last version logged for that engine, tagged with the engine, the number of packets
//!   that engine had started and the how-many-th read of that page it is
//!   within that packet;
//! * every event record delivered to the driver (compared on replay), and
//!   virtio resets;
//! * what the driver made the engines do, for comparing two sessions
//!   (`vgpu-replay compare`): every packet a command processor fetched
//!   whole (its context, depth, VA and words) and every page-table entry
//!   an engine's walk read (context, VA, level, index, the table and the
//!   entry's bits). Replays do not read them.
//!
//! On replay ([`Recorder::replaying`]) the same tap runs in reverse: before
//! an engine reads a page, the newest version recorded for that engine at
//! or before this read (packet, then read index) is written into the
//! replay's memory — unless the page already holds a version the session
//! recorded later (another engine's), which is never rolled back. Engine
//! writes are not logged: the replay makes them itself.
//!
//! # Format (version 1, little-endian)
//!
//! A file is the 8 bytes `VGPUREC1`, a `u32` version and a `u32` zero, then
//! entries. Each entry is a 24-byte header — `u16` kind, `u16` engine
//! (0xffff: none), `u32` payload length, `u64` device time in ns, `u64` tag
//! (packets the engine had started) — and its payload:
//!
//! | kind | payload |
//! |---|---|
//! | 1 `CONFIG` | UTF-8 `key=value` lines: `generation`, `boot` (`driver` or `preloaded`; records without it predate the firmware and replay preloaded), `compute_units`, `jit`, `inject_seed`, one `inject` per fault armed at startup |
//! | 2 `MEMORY_MAP` | per region: `u64` guest-physical base, `u64` size |
//! | 3 `COMMAND` | `u64` copy packets started, `u64` compute packets started, `u32` reply room, the command bytes |
//! | 4 `REPLY` | the reply bytes of the command before |
//! | 5 `PAGE` | `u64` guest-physical page address, `u32` read index within the tag, 4096 bytes |
//! | 6 `EVENT` | the 64-byte event record delivered |
//! | 7 `RESET` | none (virtio reset) |
//! | 8 `CONTROL` | a request line of the fault-injection control socket |
//! | 9 `WATCHED_DOORBELL` | `u64` copy packets started, `u64` compute packets started, `u32` context, `u32` engine, `u32` write pointer: a change the doorbell watcher saw in a watched block ([`super::watch`]), rung as a doorbell |
//! | 10 `PACKET` | `u32` context, `u32` depth (0: the ring, n: the n-th `INDIRECT` level), `u64` packet VA, its words (header first; the header alone when it does not decode or the packet is longer than the words published): a packet the engine fetched |
//! | 12 `DMA_READ` | `u64` guest-physical address, the bytes: guest memory a control command read (`FW_LOAD`'s image), logged while the command executes; a replay writes them into its memory before it executes the command |
//! | 11 `WALK` | `u32` context, `u32` level, `u64` VA walked, `u64` guest-physical table address, `u32` entry index, `u32` zero, `u64` the entry's bits: one entry an engine's page-table walk read; with engine `0xffff`, one entry of the device's audit of a context's tables at `TLB_INVALIDATE` and `CONTEXT_DESTROY` (every non-zero entry reachable from the root) |
//!
//! Readers skip unknown kinds; a new field or a changed meaning bumps the
//! version.

use std::collections::HashMap;
use std::fs::File;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use vgpu_hwif::mmu::{Pte, PteKind, LEVELS, PAGE_SHIFT};
use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryRegion};

/// Number of engines (a record keeps per-engine packet counts).
const ENGINES: usize = vgpu_hwif::proto::engine::COUNT as usize;
use super::memory::Mem;

/// The file's first eight bytes.
pub const MAGIC: [u8; 8] = *b"VGPUREC1";
/// Format version.
pub const VERSION: u32 = 1;
/// Size of an entry header.
pub const ENTRY_HEADER: usize = 24;
/// Page size of `PAGE` entries.
pub const PAGE: usize = 4096;
/// `engine` of entries not tied to one.
pub const NO_ENGINE: u16 = 0xffff;

/// Entries one page-table audit ([`Recorder::tables`]) logs at most.
pub const TABLE_AUDIT_ENTRIES: usize = 8192;
/// Tables one page-table audit reads at most.
pub const TABLE_AUDIT_TABLES: usize = 1024;

/// Entry kinds.
pub mod kind {
    /// Device configuration.
    pub const CONFIG: u16 = 1;
    /// Guest memory map.
    pub const MEMORY_MAP: u16 = 2;
    /// A control command.
    pub const COMMAND: u16 = 3;
    /// Its reply.
    pub const REPLY: u16 = 4;
    /// A page an engine read.
    pub const PAGE: u16 = 5;
    /// An event record delivered.
    pub const EVENT: u16 = 6;
    /// A virtio reset.
    pub const RESET: u16 = 7;
    /// A fault-injection control request.
    pub const CONTROL: u16 = 8;
    /// A doorbell the watcher took from a watched block.
    pub const WATCHED_DOORBELL: u16 = 9;
    /// A packet an engine fetched.
    pub const PACKET: u16 = 10;
    /// A page-table entry an engine's walk read; with engine [`NO_ENGINE`],
    /// one the device read auditing a context's tables ([`Recorder::tables`]).
    pub const WALK: u16 = 11;
    /// Guest memory a control command read (`FW_LOAD`'s image).
    pub const DMA_READ: u16 = 12;
}

/// One entry of a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// A [`kind`].
    pub kind: u16,
    /// Engine, or [`NO_ENGINE`].
    pub engine: u16,
    /// Device time (ns).
    pub time_ns: u64,
    /// Packets the engine had started.
    pub tag: u64,
    /// Payload.
    pub payload: Vec<u8>,
}

/// Errors reading a record.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// Not a record file.
    #[error("not a vgpu record (bad magic)")]
    Magic,
    /// A version this build does not read.
    #[error("record format version {0}, this build reads {VERSION}")]
    Version(u32),
    /// Truncated entry.
    #[error("entry at byte {0} truncated")]
    Truncated(usize),
}

/// One entry of a record, borrowed from the file's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryRef<'a> {
    /// A [`kind`].
    pub kind: u16,
    /// Engine, or [`NO_ENGINE`].
    pub engine: u16,
    /// Device time (ns).
    pub time_ns: u64,
    /// Packets the engine had started.
    pub tag: u64,
    /// Payload.
    pub payload: &'a [u8],
}

/// The entries of a record file, in order, without copying them; an
/// entry the file ends inside is an error (and the last item).
#[derive(Debug, Clone)]
pub struct Entries<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Iterator for Entries<'a> {
    type Item = Result<EntryRef<'a>, RecordError>;

    fn next(&mut self) -> Option<Self::Item> {
        let at = self.at;
        if at >= self.bytes.len() {
            return None;
        }
        let truncated = |s: &mut Self| {
            s.at = s.bytes.len();
            Some(Err(RecordError::Truncated(at)))
        };
        let Some(h) = at
            .checked_add(ENTRY_HEADER)
            .and_then(|end| self.bytes.get(at..end))
        else {
            return truncated(self);
        };
        let len = le32(h, 4) as usize;
        let start = at + ENTRY_HEADER;
        let Some(payload) = start
            .checked_add(len)
            .and_then(|end| self.bytes.get(start..end))
        else {
            return truncated(self);
        };
        self.at = start + len;
        Some(Ok(EntryRef {
            kind: u16::from_le_bytes([h[0], h[1]]),
            engine: u16::from_le_bytes([h[2], h[3]]),
            time_ns: le64(h, 8),
            tag: le64(h, 16),
            payload,
        }))
    }
}

/// The entries of record file `bytes`.
///
/// # Errors
///
/// [`RecordError`] for a file that is not a record of this version.
pub fn entries(bytes: &[u8]) -> Result<Entries<'_>, RecordError> {
    if bytes.len() < 16 || bytes[..8] != MAGIC {
        return Err(RecordError::Magic);
    }
    let version = le32(bytes, 8);
    if version != VERSION {
        return Err(RecordError::Version(version));
    }
    Ok(Entries { bytes, at: 16 })
}

/// Parses a whole record file into its entries.
///
/// # Errors
///
/// [`RecordError`] for a file that is not a record of this version or ends
/// inside an entry.
pub fn parse(bytes: &[u8]) -> Result<Vec<Entry>, RecordError> {
    entries(bytes)?
        .map(|e| {
            e.map(|e| Entry {
                kind: e.kind,
                engine: e.engine,
                time_ns: e.time_ns,
                tag: e.tag,
                payload: e.payload.to_vec(),
            })
        })
        .collect()
}

/// Little-endian `u64` at `o` of `p` (0 past the end).
pub fn le64(p: &[u8], o: usize) -> u64 {
    p.get(o..o + 8).map_or(0, |b| {
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        u64::from_le_bytes(a)
    })
}

/// Little-endian `u32` at `o` of `p` (0 past the end).
pub fn le32(p: &[u8], o: usize) -> u32 {
    p.get(o..o + 4)
        .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// The `CONFIG` text of a device configured as `cfg` whose injector was
/// seeded with `seed` and armed with `specs` (their text) at startup.
pub fn config_text(cfg: &crate::config::DeviceConfig, seed: u64, specs: &[String]) -> String {
    let mut s = format!(
        "generation={}\nboot={}\ncompute_units={}\njit={}\nvram={}\nvisible_vram={}\nvram_on_reset={}\ninject_seed={seed}\n",
        cfg.generation.number(),
        cfg.boot.name(),
        cfg.compute_units,
        cfg.jit,
        cfg.vram.layout.size,
        cfg.vram.layout.visible,
        cfg.vram.on_reset.name(),
    );
    for spec in specs {
        s.push_str("inject=");
        s.push_str(spec);
        s.push('\n');
    }
    s
}

/// The versions of one page read by one engine within one packet, by read
/// index, and how far the replay has got.
#[derive(Debug, Default)]
struct Versions {
    /// (packets started, read index, place in the record, contents), in
    /// read-point order.
    list: Vec<(u64, u32, usize, Box<[u8]>)>,
    /// Versions applied so far.
    applied: usize,
}

#[derive(Debug)]
enum Mode {
    Recording {
        out: BufWriter<File>,
        /// Hash of the last contents logged for each (engine, page): per
        /// engine, because on replay each engine is served only its own
        /// entries.
        shadow: HashMap<(u16, u64), u64>,
        error: Option<io::Error>,
    },
    Replaying {
        /// Per engine and page.
        pages: HashMap<(u16, u64), Versions>,
        /// Per page, the place in the record of the version last written
        /// into the replay's memory.
        written: HashMap<u64, usize>,
    },
}

#[derive(Debug)]
struct Inner {
    mode: Mode,
    /// Reads of a page within the current tag, per (engine, page).
    reads: HashMap<(u16, u64), (u64, u32)>,
    /// Bytes written.
    bytes: u64,
    /// Pages logged.
    pages: u64,
}

/// The recorder (or, on replay, the source of the recorded memory).
#[derive(Debug)]
pub struct Recorder {
    inner: Mutex<Inner>,
    packets: [AtomicU64; ENGINES],
    /// Recording (not serving a replay): packets and walks are logged.
    recording: bool,
}

/// An engine's handle on the recorder (what its memory accesses carry).
#[derive(Debug, Clone, Copy)]
pub struct Tap<'a> {
    rec: &'a Recorder,
    engine: u16,
}

impl Tap<'_> {
    /// Engine `engine`'s translation of the page holding `pa` for a read.
    pub fn read(&self, mem: &Mem, pa: u64) {
        self.rec.touch(mem, self.engine, pa & !(PAGE as u64 - 1));
    }

    /// Engine `engine`'s walk for `va` in context `ctx` read entry `index`
    /// (bits `pte`) of the level-`level` table at `table`.
    pub fn walked(&self, ctx: u32, va: u64, level: u32, table: u64, index: usize, pte: u64) {
        if !self.rec.recording {
            return;
        }
        let tag = self.rec.packets(usize::from(self.engine));
        self.rec.log(
            kind::WALK,
            self.engine,
            0,
            tag,
            &[
                &ctx.to_le_bytes(),
                &level.to_le_bytes(),
                &va.to_le_bytes(),
                &table.to_le_bytes(),
                &(index as u32).to_le_bytes(),
                &0u32.to_le_bytes(),
                &pte.to_le_bytes(),
            ],
        );
    }
}

fn page_of(mem: &Mem, pa: u64) -> Option<Box<[u8]>> {
    let mut buf = vec![0u8; PAGE].into_boxed_slice();
    mem.read_slice(&mut buf, GuestAddress(pa)).ok()?;
    Some(buf)
}

fn hash(b: &[u8]) -> u64 {
    let mut h = DefaultHasher::new();
    b.hash(&mut h);
    h.finish()
}

impl Recorder {
    /// Records into a new file at `path`, starting with `config` (the
    /// `CONFIG` payload).
    ///
    /// # Errors
    ///
    /// The file cannot be created or written.
    pub fn create(path: &Path, config: &str) -> io::Result<Self> {
        let mut out = BufWriter::new(File::create(path)?);
        out.write_all(&MAGIC)?;
        out.write_all(&VERSION.to_le_bytes())?;
        out.write_all(&0u32.to_le_bytes())?;
        let r = Recorder {
            inner: Mutex::new(Inner {
                mode: Mode::Recording {
                    out,
                    shadow: HashMap::new(),
                    error: None,
                },
                reads: HashMap::new(),
                bytes: 16,
                pages: 0,
            }),
            packets: Default::default(),
            recording: true,
        };
        r.log(kind::CONFIG, NO_ENGINE, 0, 0, &[config.as_bytes()]);
        Ok(r)
    }

    /// Serves the `PAGE` entries of `entries` to the engines of a replay.
    pub fn replaying(entries: &[Entry]) -> Self {
        let mut pages: HashMap<(u16, u64), Versions> = HashMap::new();
        for (place, e) in entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.kind == kind::PAGE)
        {
            let pa = le64(&e.payload, 0);
            let index = le32(&e.payload, 8);
            if let Some(data) = e.payload.get(12..12 + PAGE) {
                pages.entry((e.engine, pa)).or_default().list.push((
                    e.tag,
                    index,
                    place,
                    data.into(),
                ));
            }
        }
        for v in pages.values_mut() {
            // Stable: versions of one read point keep the record's order.
            v.list.sort_by_key(|&(tag, index, _, _)| (tag, index));
        }
        Recorder {
            inner: Mutex::new(Inner {
                mode: Mode::Replaying {
                    pages,
                    written: HashMap::new(),
                },
                reads: HashMap::new(),
                bytes: 0,
                pages: 0,
            }),
            packets: Default::default(),
            recording: false,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Engine `engine`'s handle.
    pub fn tap(&self, engine: u32) -> Tap<'_> {
        Tap {
            rec: self,
            engine: engine as u16,
        }
    }

    /// Engine `engine` starts its next packet.
    pub fn packet_started(&self, engine: u32) {
        if let Some(p) = self.packets.get(engine as usize) {
            p.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Packets engine `engine` has started.
    pub fn packets(&self, engine: usize) -> u64 {
        self.packets
            .get(engine)
            .map_or(0, |p| p.load(Ordering::Acquire))
    }

    fn touch(&self, mem: &Mem, engine: u16, pa: u64) {
        let tag = self.packets(usize::from(engine));
        let mut g = self.lock();
        let inner = &mut *g;
        let r = inner.reads.entry((engine, pa)).or_insert((tag, 0));
        if r.0 != tag {
            *r = (tag, 0);
        }
        let index = r.1;
        r.1 = r.1.saturating_add(1);
        match &mut inner.mode {
            Mode::Recording { shadow, .. } => {
                let Some(data) = page_of(mem, pa) else {
                    return;
                };
                let h = hash(&data);
                if shadow.insert((engine, pa), h) == Some(h) {
                    return;
                }
                inner.pages += 1;
                drop(g);
                self.log(
                    kind::PAGE,
                    engine,
                    0,
                    tag,
                    &[&pa.to_le_bytes(), &index.to_le_bytes(), &data],
                );
            }
            Mode::Replaying { pages, written } => {
                let Some(v) = pages.get_mut(&(engine, pa)) else {
                    return;
                };
                // The newest version recorded at or before this read: the
                // replay's engine may read a page at another packet than
                // the session's did (a prefetch that saw more or fewer
                // published words, a TLB that held or lost the entry), so
                // a version recorded at an earlier packet is still due.
                let mut newest = None;
                while let Some((t, i, place, data)) = v.list.get(v.applied) {
                    if (*t, *i) > (tag, index) {
                        break;
                    }
                    newest = Some((*place, data));
                    v.applied += 1;
                }
                // Engines share the memory: a version another engine was
                // served that the session recorded later (a page table it
                // extended, a semaphore it saw written) is not rolled back
                // by this engine's older one.
                if let Some((place, data)) = newest {
                    if written.get(&pa).is_some_and(|&w| w > place) {
                        return;
                    }
                    written.insert(pa, place);
                    if mem.write_slice(data, GuestAddress(pa)).is_err() {
                        log::warn!("replay: recorded page {pa:#x} is not in guest memory");
                    }
                }
            }
        }
    }

    /// Appends one entry (recording only; the first write error is kept).
    pub fn log(&self, kind: u16, engine: u16, time_ns: u64, tag: u64, parts: &[&[u8]]) {
        let mut g = self.lock();
        let inner = &mut *g;
        let Mode::Recording { out, error, .. } = &mut inner.mode else {
            return;
        };
        if error.is_some() {
            return;
        }
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let mut h = [0u8; ENTRY_HEADER];
        h[0..2].copy_from_slice(&kind.to_le_bytes());
        h[2..4].copy_from_slice(&engine.to_le_bytes());
        h[4..8].copy_from_slice(&(len as u32).to_le_bytes());
        h[8..16].copy_from_slice(&time_ns.to_le_bytes());
        h[16..24].copy_from_slice(&tag.to_le_bytes());
        let mut w = || -> io::Result<()> {
            out.write_all(&h)?;
            for p in parts {
                out.write_all(p)?;
            }
            Ok(())
        };
        match w() {
            Ok(()) => inner.bytes += (ENTRY_HEADER + len) as u64,
            Err(e) => {
                log::error!("record: {e}; recording stops");
                *error = Some(e);
            }
        }
    }

    /// Logs a control command before it executes.
    pub fn command(&self, time_ns: u64, bytes: &[u8], reply_room: usize) {
        let c0 = self.packets(0).to_le_bytes();
        let c1 = self.packets(1).to_le_bytes();
        let room = (reply_room as u32).to_le_bytes();
        self.log(
            kind::COMMAND,
            NO_ENGINE,
            time_ns,
            0,
            &[&c0, &c1, &room, bytes],
        );
    }

    /// Logs a packet engine `engine` fetched for context `ctx` at depth
    /// `depth` (0: the ring) and VA `va`: its words, header first.
    pub fn packet(&self, engine: u32, ctx: u32, depth: u32, va: u64, words: &[u32]) {
        if !self.recording {
            return;
        }
        let mut p = Vec::with_capacity(16 + 4 * words.len());
        p.extend_from_slice(&ctx.to_le_bytes());
        p.extend_from_slice(&depth.to_le_bytes());
        p.extend_from_slice(&va.to_le_bytes());
        for w in words {
            p.extend_from_slice(&w.to_le_bytes());
        }
        let tag = self.packets(engine as usize);
        self.log(kind::PACKET, engine as u16, 0, tag, &[&p]);
    }

    /// Logs a doorbell the watcher took from a watched block, before it
    /// is rung.
    pub fn watched_doorbell(&self, time_ns: u64, ctx: u32, engine: u32, wptr: u32) {
        let c0 = self.packets(0).to_le_bytes();
        let c1 = self.packets(1).to_le_bytes();
        self.log(
            kind::WATCHED_DOORBELL,
            NO_ENGINE,
            time_ns,
            0,
            &[
                &c0,
                &c1,
                &ctx.to_le_bytes(),
                &engine.to_le_bytes(),
                &wptr.to_le_bytes(),
            ],
        );
    }

    /// The page tables of context `ctx` (root `root`) as they are in guest
    /// memory now, logged entry by entry as walks of no engine
    /// ([`NO_ENGINE`]): every non-zero entry of every table reachable from
    /// the root through valid table entries, at most [`TABLE_AUDIT_ENTRIES`]
    /// entries and [`TABLE_AUDIT_TABLES`] tables. What the driver wrote is
    /// then in the record even for mappings no engine used, so that two
    /// drivers' tables can be compared (`vgpu-replay compare`). Called at
    /// the commands after which a driver's tables are complete
    /// (`TLB_INVALIDATE`, `CONTEXT_DESTROY`).
    pub fn tables(&self, mem: &Mem, ctx: u32, root: u64) {
        if !self.recording || root == 0 {
            return;
        }
        // (level, table address, VA the table starts at)
        let mut stack = vec![(LEVELS - 1, root, 0u64)];
        let (mut entries, mut tables) = (0usize, 0usize);
        while let Some((level, table, base)) = stack.pop() {
            tables += 1;
            if tables > TABLE_AUDIT_TABLES {
                break;
            }
            let Some(page) = page_of(mem, table) else {
                continue;
            };
            for (index, raw) in page.chunks_exact(8).enumerate() {
                let bits = u64::from_le_bytes(raw.try_into().unwrap_or([0; 8]));
                if bits == 0 {
                    continue;
                }
                entries += 1;
                if entries > TABLE_AUDIT_ENTRIES {
                    return;
                }
                let shift = PAGE_SHIFT + 9 * level;
                let va = base | ((index as u64) << shift);
                self.log(
                    kind::WALK,
                    NO_ENGINE,
                    0,
                    0,
                    &[
                        &ctx.to_le_bytes(),
                        &level.to_le_bytes(),
                        &va.to_le_bytes(),
                        &table.to_le_bytes(),
                        &(index as u32).to_le_bytes(),
                        &0u32.to_le_bytes(),
                        &bits.to_le_bytes(),
                    ],
                );
                if let (Some(next), Ok(PteKind::Table(child))) =
                    (level.checked_sub(1), Pte::from_bits(bits).decode(level))
                {
                    stack.push((next, child, va));
                }
            }
        }
    }

    /// Whether this recorder serves a replay (the watcher then reads no
    /// block: the record's doorbells are rung instead).
    pub fn is_replay(&self) -> bool {
        matches!(self.lock().mode, Mode::Replaying { .. })
    }

    /// Logs guest memory a control command read at `pa`.
    pub fn dma_read(&self, time_ns: u64, pa: u64, bytes: &[u8]) {
        self.log(
            kind::DMA_READ,
            NO_ENGINE,
            time_ns,
            0,
            &[&pa.to_le_bytes(), bytes],
        );
    }

    /// Logs the guest memory map.
    pub fn memory_map(&self, time_ns: u64, mem: &Mem) {
        let mut p = Vec::new();
        for r in mem.iter() {
            p.extend_from_slice(&r.start_addr().0.to_le_bytes());
            p.extend_from_slice(&r.len().to_le_bytes());
        }
        // A new memory map: every page is new.
        if let Mode::Recording { shadow, .. } = &mut self.lock().mode {
            shadow.clear();
        }
        self.log(kind::MEMORY_MAP, NO_ENGINE, time_ns, 0, &[&p]);
    }

    /// Flushes the file.
    ///
    /// # Errors
    ///
    /// The first write error of the session, or the flush's.
    pub fn flush(&self) -> io::Result<()> {
        let mut g = self.lock();
        if let Mode::Recording { out, error, .. } = &mut g.mode {
            if let Some(e) = error.take() {
                return Err(e);
            }
            out.flush()?;
        }
        Ok(())
    }

    /// Bytes written and pages logged so far.
    pub fn size(&self) -> (u64, u64) {
        let g = self.lock();
        (g.bytes, g.pages)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(engine: u16, tag: u64, pa: u64, index: u32, fill: u8) -> Entry {
        let mut payload = pa.to_le_bytes().to_vec();
        payload.extend(index.to_le_bytes());
        payload.extend([fill; PAGE]);
        Entry {
            kind: kind::PAGE,
            engine,
            time_ns: 0,
            tag,
            payload,
        }
    }

    fn first_byte(mem: &Mem, pa: u64) -> u8 {
        mem.read_obj::<u8>(GuestAddress(pa)).unwrap()
    }

    #[test]
    fn replay_serves_each_engine_its_versions_and_never_rolls_a_page_back() {
        let mem = Mem::from_ranges(&[(GuestAddress(0), 1 << 20)]).unwrap();
        let pa = 0x4000;
        // The session: the compute engine read the page as 1, then the
        // copy engine as 2 (the CPU had rewritten it), then as 3 at its
        // fifth packet.
        let r = Recorder::replaying(&[
            page(1, 0, pa, 0, 1),
            page(0, 2, pa, 0, 2),
            page(0, 5, pa, 0, 3),
        ]);
        // The replay's copy engine gets there first: it is served 2.
        r.packet_started(0);
        r.packet_started(0);
        r.tap(0).read(&mem, pa);
        assert_eq!(first_byte(&mem, pa), 2);
        // The compute engine's older version does not roll it back.
        r.tap(1).read(&mem, pa);
        assert_eq!(first_byte(&mem, pa), 2);
        // A read after the packet of the next version gets it, even at a
        // later packet than the session's read (here the seventh).
        for _ in 0..5 {
            r.packet_started(0);
        }
        r.tap(0).read(&mem, pa);
        assert_eq!(first_byte(&mem, pa), 3);
    }
}
