//! One session's record read as what its driver made the device do: the
//! control commands it sent, the packets each engine fetched per ring and
//! the page-table entries the engines walked, each sorted into the lane
//! (the stream of one ring, one context, one page-table entry) where its
//! order matters, with a key free of what legitimately differs between two
//! runs of the same test (physical addresses, times, sequence numbers,
//! context ids, the interleaving of independent rings, retries).

use std::collections::{BTreeMap, HashMap, HashSet};

use vgpu_device::core::record::{self, kind, le32, le64, EntryRef};
use vgpu_hwif::describe::PacketWords;
use vgpu_hwif::mmu::{
    FaultReason, Pte, PteKind, LEVELS, PAGE_SHIFT, PTE_ADDR_MASK, PTE_EXEC, PTE_READ, PTE_WRITE,
};
use vgpu_hwif::proto::{engine, Command, Opcode, Status};

pub use super::command::engine_name;
use super::command::{command_target, command_texts, IGNORED};

/// At most this many words of a packet are kept (the longest packet is
/// shorter).
const MAX_PACKET_WORDS: usize = 64;

/// A context as both runs can name it: the how-many-th context the driver
/// created (ids may differ between runs), or the raw id of one it never
/// created.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Slot {
    /// The n-th accepted `CONTEXT_CREATE` of the session.
    Created(u32),
    /// An id no accepted `CONTEXT_CREATE` named.
    Raw(u32),
}

/// Where an item's order matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Lane {
    /// Commands about the whole device: contexts created and destroyed,
    /// engine and device resets.
    Device,
    /// Commands about one context (fault answers).
    Context(Slot),
    /// Commands about one ring: its creation, doorbells, invalidations of
    /// its engine's TLB, resets of its engine, its destruction.
    Ring(Slot, u32),
    /// Page-table entries one engine walked for one context: by level and
    /// the VA range the entry maps (its index path).
    Pte(Slot, u32, u32, u64),
    /// Packets one engine fetched from one ring (and the command buffers
    /// it calls).
    Packets(Slot, u32),
}

/// A page-table entry as the device decoded it, without its address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PteView {
    /// The entry's bits (shown, never compared).
    pub bits: u64,
    /// What the walk made of it (compared).
    pub meaning: String,
    /// Whether V is set.
    pub valid: bool,
}

/// What an item is.
#[derive(Debug, Clone)]
pub enum What {
    /// A control command the device accepted or refused (not `BUSY`).
    Command {
        /// Its opcode (none: not one the device knows).
        opcode: Option<Opcode>,
        /// As text, with this run's ids.
        text: String,
        /// The reply's status (none: no reply recorded).
        status: Option<Status>,
        /// Its context id, engine.
        ctx: Option<u32>,
        /// Its engine.
        engine: Option<u32>,
    },
    /// A packet an engine fetched.
    Packet {
        /// Context id.
        ctx: u32,
        /// Engine.
        engine: u32,
        /// 0: the ring; n: inside n `INDIRECT`s.
        depth: u32,
        /// Its VA.
        va: u64,
        /// Decoded, as text.
        text: String,
    },
    /// A page-table entry a walk read.
    Pte {
        /// Context id.
        ctx: u32,
        /// Engine.
        engine: u32,
        /// The VA walked (its page).
        va: u64,
        /// Level (3: root).
        level: u32,
        /// Index in its table.
        index: u32,
        /// The entry.
        view: PteView,
    },
}

/// One item of a run.
#[derive(Debug, Clone)]
pub struct Item {
    /// What it is.
    pub what: What,
    /// Compared commands before it (a command: its own number, from 1);
    /// with `phase` and `sub`, where the item stands in the session.
    pub clock: u64,
    /// 0: a command; 1: something the engines did after it.
    pub phase: u8,
    /// Its place among the engines' items after the same command.
    pub sub: u32,
}

/// One lane entry: the item and what is compared.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Index into [`Run::items`].
    pub item: usize,
    /// The normalised key.
    pub key: String,
}

/// One session's driver trace.
#[derive(Debug, Default)]
pub struct Run {
    /// Hardware generation of the device.
    pub generation: u32,
    /// Every item, in the record's order.
    pub items: Vec<Item>,
    /// The lanes.
    pub lanes: BTreeMap<Lane, Vec<Entry>>,
    /// Compared commands by clock (index = clock - 1).
    pub commands: Vec<usize>,
    /// Byte offset where the file ends inside an entry.
    pub truncated: Option<usize>,
    /// Packets and page-table entries the record holds (0: recorded by a
    /// device without them).
    pub engine_items: u64,
}

fn perms_text(p: u64) -> String {
    let b = |bit, c| if p & bit != 0 { c } else { '-' };
    [b(PTE_READ, 'R'), b(PTE_WRITE, 'W'), b(PTE_EXEC, 'X')]
        .iter()
        .collect()
}

/// What the entry `bits` at `level` means, as the walk decodes it, with
/// what its target is (`tables`: pages this run walked as tables so far;
/// `data`: pages mapped as leaves so far; `ram`: the guest memory map).
fn pte_meaning(
    bits: u64,
    level: u32,
    tables: &HashSet<u64>,
    data: &HashSet<u64>,
    ram: &[(u64, u64)],
) -> String {
    let pte = Pte::from_bits(bits);
    let target = pte.address();
    let in_ram = ram.is_empty()
        || ram
            .iter()
            .any(|&(base, size)| target >= base && target - base < size);
    match pte.decode(level) {
        Err(FaultReason::NotPresent) => "not valid".into(),
        Err(_) => format!(
            "valid, malformed (flags {:#x})",
            bits & !PTE_ADDR_MASK & !vgpu_hwif::mmu::PTE_VALID
        ),
        Ok(PteKind::Table(_)) => {
            let what = if !in_ram {
                "outside guest RAM"
            } else if data.contains(&target) {
                "a page also mapped as data"
            } else {
                "a table"
            };
            format!("valid, table -> {what}")
        }
        Ok(PteKind::Leaf(l)) => {
            let size = if l.shift == PAGE_SHIFT {
                "4 KiB"
            } else {
                "2 MiB"
            };
            let what = if !in_ram {
                "outside guest RAM"
            } else if tables.contains(&target) {
                "a page-table page"
            } else {
                "a data page"
            };
            format!(
                "valid, leaf {size} {} {:?} -> {what}",
                perms_text(l.perms),
                l.cache
            )
        }
    }
}

/// What pass one keeps of a command until its reply.
#[derive(Debug)]
struct Pending {
    item: usize,
    cmd: Option<Command>,
    key: String,
}

/// Builds a run from a record's bytes. A file that ends inside an entry
/// gives the run up to there, with `truncated` set.
///
/// # Errors
///
/// The bytes are not a record of a version this build reads.
pub fn read(bytes: &[u8]) -> Result<Run, record::RecordError> {
    let mut b = Builder::default();
    for e in record::entries(bytes)? {
        match e {
            Ok(e) => b.entry(&e),
            Err(record::RecordError::Truncated(at)) => {
                log::warn!("record ends inside the entry at byte {at}");
                b.run.truncated = Some(at);
            }
            Err(other) => return Err(other),
        }
    }
    b.finish_pending(None);
    Ok(b.finish())
}

#[derive(Debug, Default)]
struct Builder {
    run: Run,
    /// Per item, its lanes and keys (pass one).
    lanes: Vec<Vec<(Lane, String)>>,
    /// Whether an item is dropped (a refused-for-retry command, a repeated
    /// doorbell).
    dropped: Vec<bool>,
    /// Context id -> slot.
    slots: HashMap<u32, u32>,
    next_slot: u32,
    /// Live rings (context id, engine).
    rings: HashSet<(u32, u32)>,
    /// Last doorbell accepted per ring.
    last_doorbell: HashMap<(u32, u32), u32>,
    pending: Option<Pending>,
    /// Page-table pages walked, pages mapped as leaves.
    tables: HashSet<u64>,
    data: HashSet<u64>,
    /// Last key per page-table lane (consecutive equal values are one).
    last_pte: HashMap<Lane, String>,
    ram: Vec<(u64, u64)>,
}

impl Builder {
    fn slot(&self, id: u32) -> Slot {
        self.slots
            .get(&id)
            .map_or(Slot::Raw(id), |&s| Slot::Created(s))
    }

    fn slot_text(&self, id: u32) -> String {
        match self.slot(id) {
            Slot::Created(s) => format!("#{s}"),
            Slot::Raw(r) => format!("id{r}"),
        }
    }

    fn push(&mut self, what: What, lanes: Vec<(Lane, String)>) -> usize {
        self.run.items.push(Item {
            what,
            clock: 0,
            phase: 1,
            sub: 0,
        });
        self.lanes.push(lanes);
        self.dropped.push(false);
        self.run.items.len() - 1
    }

    fn entry(&mut self, e: &EntryRef<'_>) {
        match e.kind {
            kind::CONFIG => {
                let text = String::from_utf8_lossy(e.payload);
                for line in text.lines() {
                    if let Some(("generation", v)) = line.split_once('=') {
                        self.run.generation = v.parse().unwrap_or(0);
                    }
                }
            }
            kind::MEMORY_MAP => {
                self.ram = e
                    .payload
                    .chunks_exact(16)
                    .map(|r| (le64(r, 0), le64(r, 8)))
                    .collect();
            }
            kind::COMMAND => {
                self.finish_pending(None);
                self.command(e.payload.get(20..).unwrap_or(&[]));
            }
            kind::REPLY => {
                let status = Status::from_u32(le32(e.payload, 0));
                self.finish_pending(Some(status.unwrap_or(Status::BadDescriptor)));
            }
            kind::RESET => {
                self.finish_pending(None);
                self.slots.clear();
                self.rings.clear();
                self.last_doorbell.clear();
            }
            kind::PACKET => self.packet(e),
            kind::WALK => self.walk(e),
            _ => {}
        }
    }

    fn command(&mut self, bytes: &[u8]) {
        let (hdr, decoded) = Command::decode(bytes);
        let opcode = hdr.and_then(|h| Opcode::from_u32(h.opcode));
        if opcode.is_some_and(|o| IGNORED.contains(&o)) {
            return;
        }
        let (text, key, cmd, target) = match decoded {
            Ok(c) => {
                let (t, k) = command_texts(&c, &|id| self.slot_text(id));
                // A host mapping's VA (an unmap's TLB_INVALIDATE) is where
                // that run's window had room: compared by page offset.
                let k = host_window_text(&k, self.run.generation);
                (t, k, Some(c), command_target(&c))
            }
            Err(err) => {
                let t = match opcode {
                    Some(o) => format!("{} (malformed: {err:?})", o.name()),
                    None => format!(
                        "opcode {:#x} (malformed: {err:?})",
                        hdr.map_or(0, |h| h.opcode)
                    ),
                };
                (t.clone(), t, None, (None, None))
            }
        };
        let what = What::Command {
            opcode,
            text,
            status: None,
            ctx: target.0,
            engine: target.1,
        };
        let item = self.push(what, Vec::new());
        self.pending = Some(Pending { item, cmd, key });
    }

    /// The pending command's reply came (`status`), or none will.
    fn finish_pending(&mut self, status: Option<Status>) {
        let Some(p) = self.pending.take() else {
            return;
        };
        if let Some(What::Command { status: s, .. }) =
            self.run.items.get_mut(p.item).map(|i| &mut i.what)
        {
            *s = status;
        }
        // Refused for now: the driver asks again.
        if status == Some(Status::Busy) {
            self.dropped[p.item] = true;
            return;
        }
        let ok = status.is_none_or(|s| s == Status::Ok);
        let key = match status {
            Some(s) if s != Status::Ok => format!("{} -> {}", p.key, s.name()),
            _ => p.key.clone(),
        };
        let mut lanes = Vec::new();
        match p.cmd {
            None => lanes.push((Lane::Device, key)),
            Some(c) => self.command_lanes(&c, ok, &key, p.item, &mut lanes),
        }
        self.lanes[p.item] = lanes;
    }

    fn command_lanes(
        &mut self,
        c: &Command,
        ok: bool,
        key: &str,
        item: usize,
        lanes: &mut Vec<(Lane, String)>,
    ) {
        let k = || key.to_owned();
        match *c {
            Command::ContextCreate { ctx_id, .. } => {
                if ok {
                    self.slots.insert(ctx_id, self.next_slot);
                    self.next_slot += 1;
                }
                lanes.push((Lane::Device, k()));
                lanes.push((Lane::Context(self.slot(ctx_id)), k()));
            }
            Command::ContextDestroy { ctx_id, .. } => {
                lanes.push((Lane::Device, k()));
                lanes.push((Lane::Context(self.slot(ctx_id)), k()));
                for e in 0..engine::COUNT {
                    if self.rings.contains(&(ctx_id, e)) {
                        lanes.push((Lane::Ring(self.slot(ctx_id), e), k()));
                    }
                }
                if ok {
                    self.rings.retain(|&(c, _)| c != ctx_id);
                    self.slots.remove(&ctx_id);
                }
            }
            Command::FaultResume { ctx_id, .. } => {
                lanes.push((Lane::Context(self.slot(ctx_id)), k()));
            }
            Command::RingCreate { ctx_id, engine, .. } => {
                if ok {
                    self.rings.insert((ctx_id, engine));
                    self.last_doorbell.remove(&(ctx_id, engine));
                }
                lanes.push((Lane::Ring(self.slot(ctx_id), engine), k()));
            }
            Command::RingDestroy { ctx_id, engine } => {
                if ok {
                    self.rings.remove(&(ctx_id, engine));
                }
                lanes.push((Lane::Ring(self.slot(ctx_id), engine), k()));
            }
            Command::Doorbell {
                ctx_id,
                engine,
                wptr,
            } => {
                // The same write pointer again changes nothing.
                if ok && self.last_doorbell.insert((ctx_id, engine), wptr) == Some(wptr) {
                    self.dropped[item] = true;
                    return;
                }
                lanes.push((Lane::Ring(self.slot(ctx_id), engine), k()));
            }
            Command::DoorbellWatch { ctx_id, engine, .. }
            | Command::Capture { ctx_id, engine, .. } => {
                lanes.push((Lane::Ring(self.slot(ctx_id), engine), k()));
            }
            Command::TlbInvalidate {
                ctx_id,
                engine_mask,
                ..
            } => {
                for e in 0..engine::COUNT {
                    if engine_mask == 0 || engine_mask & (1 << e) != 0 {
                        lanes.push((Lane::Ring(self.slot(ctx_id), e), k()));
                    }
                }
            }
            Command::EngineReset { engine, hung_ctx } => {
                lanes.push((Lane::Device, k()));
                let mut live: Vec<(u32, u32)> = self
                    .rings
                    .iter()
                    .copied()
                    .filter(|&(_, e)| e == engine)
                    .collect();
                live.sort_unstable();
                for (c, e) in live {
                    let role = if c == hung_ctx { "hung" } else { "innocent" };
                    lanes.push((
                        Lane::Ring(self.slot(c), e),
                        format!("{key} (this ring {role})"),
                    ));
                    self.last_doorbell.remove(&(c, e));
                }
            }
            Command::DeviceReset => {
                lanes.push((Lane::Device, k()));
                let mut live: Vec<(u32, u32)> = self.rings.iter().copied().collect();
                live.sort_unstable();
                for (c, e) in live {
                    lanes.push((Lane::Ring(self.slot(c), e), k()));
                }
                if ok {
                    self.slots.clear();
                    self.rings.clear();
                    self.last_doorbell.clear();
                }
            }
            _ => lanes.push((Lane::Device, k())),
        }
    }

    fn packet(&mut self, e: &EntryRef<'_>) {
        let p = e.payload;
        let (ctx, depth, va) = (le32(p, 0), le32(p, 4), le64(p, 8));
        let words: Vec<u32> = p
            .get(16..)
            .unwrap_or(&[])
            .chunks_exact(4)
            .take(MAX_PACKET_WORDS)
            .map(|w| le32(w, 0))
            .collect();
        let text = PacketWords {
            generation: self.run.generation,
            words: &words,
        }
        .to_string();
        let engine = u32::from(e.engine);
        // An operand in the KMD's window of host mappings (a process's own
        // memory, mapped where that run's earlier mappings left room) is
        // compared by its offset in the page, not its VA.
        let norm = host_window_text(&text, self.run.generation);
        let key = if norm == text {
            format!("depth {depth} va {va:#x} {text} {words:x?}")
        } else {
            format!("depth {depth} va {va:#x} {norm}")
        };
        let lane = Lane::Packets(self.slot(ctx), engine);
        self.run.engine_items += 1;
        self.push(
            What::Packet {
                ctx,
                engine,
                depth,
                va,
                text,
            },
            vec![(lane, key)],
        );
    }

    fn walk(&mut self, e: &EntryRef<'_>) {
        let p = e.payload;
        let (ctx, level, va, table) = (le32(p, 0), le32(p, 4), le64(p, 8), le64(p, 16));
        let (index, bits) = (le32(p, 24), le64(p, 32));
        self.run.engine_items += 1;
        if level >= LEVELS || in_host_window(va, self.run.generation) {
            // The host-mapping window's pages are wherever that run's
            // earlier host mappings left room: not comparable by VA.
            return;
        }
        self.tables.insert(table);
        let meaning = pte_meaning(bits, level, &self.tables, &self.data, &self.ram);
        if let Ok(PteKind::Leaf(l)) = Pte::from_bits(bits).decode(level) {
            self.data.insert(l.page);
        }
        let engine = u32::from(e.engine);
        let shift = PAGE_SHIFT + 9 * level;
        let lane = Lane::Pte(self.slot(ctx), engine, level, va >> shift);
        if self.last_pte.get(&lane) == Some(&meaning) {
            return;
        }
        self.last_pte.insert(lane, meaning.clone());
        self.push(
            What::Pte {
                ctx,
                engine,
                va: va & !((1u64 << PAGE_SHIFT) - 1),
                level,
                index,
                view: PteView {
                    bits,
                    valid: Pte::from_bits(bits).is_valid(),
                    meaning: meaning.clone(),
                },
            },
            vec![(lane, meaning)],
        );
    }

    /// Pass two: clocks, and the lanes of the items kept.
    fn finish(mut self) -> Run {
        let mut clock = 0u64;
        let mut sub = 0u32;
        for (i, item) in self.run.items.iter_mut().enumerate() {
            if self.dropped[i] || self.lanes[i].is_empty() {
                continue;
            }
            if matches!(item.what, What::Command { .. }) {
                clock += 1;
                sub = 0;
                item.clock = clock;
                item.phase = 0;
                self.run.commands.push(i);
            } else {
                item.clock = clock;
                item.phase = 1;
                item.sub = sub;
                sub = sub.saturating_add(1);
            }
            for (lane, key) in std::mem::take(&mut self.lanes[i]) {
                self.run
                    .lanes
                    .entry(lane)
                    .or_default()
                    .push(Entry { item: i, key });
            }
        }
        self.run
    }
}

/// Where the KMD's window of host mappings starts below the top of the VA
/// space (guest-kmd: the top 256 MiB are the KMD's, the window begins
/// 16 MiB into them).
const HOST_WINDOW_FROM_TOP: u64 = (256 - 16) << 20;

/// [`host_window_text`], for the tests.
#[cfg(test)]
pub fn host_window_text_for_tests(text: &str, generation: u32) -> String {
    host_window_text(text, generation)
}

/// Whether `va` lies in the KMD's window of host mappings.
fn in_host_window(va: u64, generation: u32) -> bool {
    1u64.checked_shl(vgpu_hwif::mmu::va_bits(generation))
        .is_some_and(|top| va >= top.saturating_sub(HOST_WINDOW_FROM_TOP) && va < top)
}

/// `text` with every hexadecimal number that lies in the host-mapping
/// window of a generation-`generation` VA space written as
/// `host-map+OFFSET` (its offset in the page).
fn host_window_text(text: &str, generation: u32) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("0x") {
        out.push_str(&rest[..i]);
        let digits: String = rest[i + 2..]
            .chars()
            .take_while(char::is_ascii_hexdigit)
            .collect();
        let n = u64::from_str_radix(&digits, 16).ok();
        match n {
            Some(v) if in_host_window(v, generation) => {
                out.push_str(&format!("host-map+{:#x}", v & 0xfff))
            }
            _ => {
                out.push_str("0x");
                out.push_str(&digits);
            }
        }
        rest = &rest[i + 2 + digits.len()..];
    }
    out.push_str(rest);
    out
}
