//! The firmware: the boot ROM's state machine that loads, checks and
//! starts an image, and the parameters of the running image that the rest
//! of the device runs with.
//!
//! # States
//!
//! ```text
//!  power on ─▶ WAIT_LOAD ─FW_LOAD ok─▶ LOADED ─FW_START─▶ BOOTING ─(boot time)─▶ RUNNING
//!                 │  ▲                   │                   │                      │
//!          FW_LOAD bad  └─── FW_LOAD ────┤            boot watchdog           crash (later)
//!                 ▼                      ▼                   ▼                      ▼
//!               FAILED ◀─────────────────┴──────────── FAILED(TIMEOUT)          CRASHED
//!  DEVICE_RESET / virtio reset: back to power on (WAIT_LOAD), from any state
//! ```
//!
//! * `FW_LOAD` is accepted in `WAIT_LOAD`, `LOADED` and `FAILED`; the
//!   image is copied out of guest memory first, then checked
//!   ([`vgpu_hwif::firmware::parse`]). `BUSY` while booting or running.
//! * Booting takes [`BOOT_BASE_US`] plus [`BOOT_US_PER_KIB`] per KiB of the
//!   image in device time; the state moves on when it is next read. An
//!   injected fault makes a boot fail (`FAILED`, `TIMEOUT`) or hang
//!   ([`BootOutcome`]).
//! * Only a running firmware serves the other commands (the control
//!   processor asks [`Firmware::running`]); the engines run with its
//!   parameters: time slices per priority and the policy, the packet
//!   opcodes the command processor accepts, the features (user-mode
//!   queues, time-sliced preemption).
//! * With [`BootMode::Preloaded`] the device powers on running a given
//!   image, as if its boot ROM had loaded one from flash: for tools and
//!   drivers that predate the handshake.
//!
//! Every transition writes a line into the firmware log ([`log`]).
//!
//! The hot-path parameters live in atomics so that engines read them
//! without the firmware lock; the lock is taken only by commands.

pub mod log;

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use vgpu_hwif::firmware::{
    feature, fw_state, parse, FwError, FwHeader, FwImage, FwPackets, FwSched, FW_MAX_SIZE,
    FW_POLL_MIN_US,
};
use vgpu_hwif::proto::{
    FwStatusReply, ReplyHeader, FEATURE_FIRMWARE_RUNNING, FEATURE_PREEMPTION, FEATURE_USER_QUEUES,
    PRIORITY_HIGH, PRIORITY_LOW, PRIORITY_NORMAL,
};

use log::LogRing;

/// Boot time of any image, µs.
pub const BOOT_BASE_US: u64 = 800;
/// Boot time per KiB of image, µs.
pub const BOOT_US_PER_KIB: u64 = 20;
/// The log's size before an image sets one (the boot ROM's log).
pub const ROM_LOG_SIZE: usize = 4096;

/// How the device powers on.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum BootMode {
    /// In its boot state, waiting for the driver's image.
    #[default]
    Driver,
    /// Running this image at once (it must be valid for the device).
    Preloaded(Vec<u8>),
}

/// The engines' parameters while no image runs (the boot ROM's): every
/// packet, 2 ms slices, priorities. No work reaches the engines then
/// (commands other than the boot ones are refused); they matter only to
/// models driven without the control processor.
pub const ROM_SLICE_NS: u64 = 2_000_000;

/// Why a firmware command was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FwCommandError {
    /// `FW_LOAD` while an image boots or runs.
    #[error("an image is booting or running: reset the device first")]
    Busy,
    /// `FW_START` without a loaded image.
    #[error("no image is loaded")]
    NothingLoaded,
}

/// The running image's parameters.
#[derive(Debug, Clone, Copy)]
struct Params {
    header: FwHeader,
    sched: FwSched,
    packets: [u32; 8],
    heartbeat_ms: u32,
    log_size: u32,
}

/// How a boot ends (a fault may make it fail or hang).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BootOutcome {
    /// The image runs.
    #[default]
    Run,
    /// It fails with boot error `TIMEOUT` after its boot time.
    Fail,
    /// It never finishes booting.
    Hang,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    WaitLoad,
    Loaded,
    Booting {
        ready_ns: u64,
        boot_us: u32,
        outcome: BootOutcome,
    },
    Running {
        since_ns: u64,
        boot_us: u32,
        /// Hung (`fw-hang`) since: heartbeats stop counting.
        hung_ns: Option<u64>,
    },
    Failed(FwError),
    Crashed {
        code: u32,
        since_ns: u64,
        at_ns: u64,
        boot_us: u32,
    },
}

/// `FW_STATUS` polls of one boot.
#[derive(Debug, Clone, Copy, Default)]
struct Polls {
    /// The boot they belong to (`Core::boots`).
    boot: u32,
    /// Polls so far.
    count: u32,
    /// The previous poll's device time.
    last_ns: Option<u64>,
}

/// A `FW_STATUS` poll sooner than [`FW_POLL_MIN_US`] after the previous
/// one of the same boot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FastPoll {
    /// The boot (1 = the first since the device started).
    pub boot: u32,
    /// The poll's number within the boot (from 1).
    pub poll: u32,
    /// Time since the previous poll, ns.
    pub gap_ns: u64,
}

#[derive(Debug)]
struct Core {
    state: State,
    params: Option<Params>,
    image: Vec<u8>,
    log: LogRing,
    boots: u32,
    mode: BootMode,
    polls: Polls,
}

/// The firmware block.
#[derive(Debug)]
pub struct Firmware {
    generation: u32,
    interface: u32,
    core: Mutex<Core>,
    running: AtomicBool,
    features: AtomicU32,
    slice_ns: [AtomicU64; 3],
    round_robin: AtomicBool,
    packets: [AtomicU32; 8],
}

fn version_text(v: u32) -> String {
    format!("{}.{}.{}", v >> 16, (v >> 8) & 0xff, v & 0xff)
}

fn build_text(build: &[u32; 4]) -> String {
    let bytes: Vec<u8> = build.iter().flat_map(|w| w.to_le_bytes()).collect();
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    bytes[..end]
        .iter()
        .map(|&b| if b.is_ascii_graphic() { b as char } else { '?' })
        .collect()
}

impl Firmware {
    /// The firmware block of a device of `generation`, powered on in its
    /// boot state (`interface`: the driver interface a preloaded image
    /// must serve, see [`Firmware::set_mode`]).
    pub fn new(generation: u32, interface: u32) -> Self {
        let fw = Firmware {
            generation,
            interface,
            core: Mutex::new(Core {
                state: State::WaitLoad,
                params: None,
                image: Vec::new(),
                log: LogRing::new(ROM_LOG_SIZE),
                boots: 0,
                mode: BootMode::Driver,
                polls: Polls::default(),
            }),
            running: AtomicBool::new(false),
            features: AtomicU32::new(0),
            slice_ns: Default::default(),
            round_robin: AtomicBool::new(false),
            packets: Default::default(),
        };
        fw.power_on(0);
        fw
    }

    /// Powers on again as `mode` from now on (device construction).
    pub fn set_mode(&self, mode: BootMode, now_ns: u64) {
        self.core().mode = mode;
        self.power_on(now_ns);
    }

    /// Powers on again running the in-tree image of its generation
    /// (`--boot preloaded`, and tools that rebuild a device from a capture).
    pub fn preload_builtin(&self, now_ns: u64) {
        let image = vgpu_firmware::image_for(self.generation);
        self.set_mode(BootMode::Preloaded(image), now_ns);
    }

    fn core(&self) -> std::sync::MutexGuard<'_, Core> {
        self.core.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Back to the power-on state (device reset): the image is gone; a
    /// preloaded device runs its image again.
    pub fn power_on(&self, now_ns: u64) {
        let mut c = self.core();
        self.stop(&mut c);
        c.state = State::WaitLoad;
        c.params = None;
        c.image.clear();
        c.log.resize(ROM_LOG_SIZE);
        let line = format!(
            "{} boot rom: power on, generation {}, waiting for an image",
            stamp(now_ns),
            self.generation
        );
        c.log.push_line(&line);
        if let BootMode::Preloaded(image) = &c.mode {
            let image = image.clone();
            self.load_locked(&mut c, now_ns, image, self.interface);
            if c.state == State::Loaded {
                self.boot_locked(&mut c, now_ns, BootOutcome::Run);
                c.state = State::Running {
                    since_ns: now_ns,
                    boot_us: 0,
                    hung_ns: None,
                };
                self.publish(&mut c, now_ns);
            }
        }
    }

    /// Whether the firmware runs (checked by every command).
    pub fn running(&self, now_ns: u64) -> bool {
        if self.running.load(Ordering::Acquire) {
            return true;
        }
        let mut c = self.core();
        self.advance(&mut c, now_ns);
        matches!(c.state, State::Running { .. })
    }

    /// `FW_LOAD`: checks `image` (already copied out of guest memory) for a
    /// driver of interface version `interface`.
    ///
    /// # Errors
    ///
    /// [`FwCommandError::Busy`] while an image boots or runs. A refused
    /// image is not an error of the command: the state says `FAILED`.
    pub fn load(&self, now_ns: u64, image: Vec<u8>, interface: u32) -> Result<(), FwCommandError> {
        let mut c = self.core();
        self.advance(&mut c, now_ns);
        if matches!(c.state, State::Booting { .. } | State::Running { .. }) {
            return Err(FwCommandError::Busy);
        }
        self.load_locked(&mut c, now_ns, image, interface);
        Ok(())
    }

    /// Refuses an image larger than the firmware region before it is
    /// copied (the size the driver gives).
    pub fn refuse_size(&self, now_ns: u64, size: u32) -> Result<(), FwCommandError> {
        let mut c = self.core();
        self.advance(&mut c, now_ns);
        if matches!(c.state, State::Booting { .. } | State::Running { .. }) {
            return Err(FwCommandError::Busy);
        }
        self.fail(&mut c, now_ns, FwError::TooLarge, size);
        Ok(())
    }

    fn fail(&self, c: &mut Core, now_ns: u64, e: FwError, size: u32) {
        c.state = State::Failed(e);
        c.params = None;
        c.image.clear();
        let line = format!(
            "{} boot rom: image of {size} bytes refused: {} (error {})",
            stamp(now_ns),
            e.text(),
            e as u32
        );
        c.log.push_line(&line);
    }

    fn load_locked(&self, c: &mut Core, now_ns: u64, image: Vec<u8>, interface: u32) {
        let size = u32::try_from(image.len()).unwrap_or(u32::MAX);
        let params = match parse(&image, self.generation, interface) {
            Ok(fw) => params_of(&fw, self.generation),
            Err(e) => return self.fail(c, now_ns, e, size),
        };
        let h = params.header;
        let line = format!(
            "{} boot rom: image {} build {} loaded: {size} bytes, {} sections, features {:#x}, interface {:#x}..={:#x}",
            stamp(now_ns),
            version_text(h.version),
            build_text(&h.build),
            h.section_count,
            h.features,
            h.interface_min,
            h.interface_max
        );
        c.log.push_line(&line);
        c.params = Some(params);
        c.image = image;
        c.state = State::Loaded;
    }

    /// `FW_START`: boots the loaded image, to end as `outcome`.
    ///
    /// # Errors
    ///
    /// [`FwCommandError::NothingLoaded`] unless an image is loaded.
    pub fn start(&self, now_ns: u64, outcome: BootOutcome) -> Result<(), FwCommandError> {
        let mut c = self.core();
        self.advance(&mut c, now_ns);
        if c.state != State::Loaded {
            return Err(FwCommandError::NothingLoaded);
        }
        self.boot_locked(&mut c, now_ns, outcome);
        Ok(())
    }

    fn boot_locked(&self, c: &mut Core, now_ns: u64, outcome: BootOutcome) {
        let kib = (c.image.len() as u64).div_ceil(1024);
        let boot_us = BOOT_BASE_US + BOOT_US_PER_KIB * kib;
        c.state = State::Booting {
            ready_ns: now_ns.saturating_add(boot_us * 1000),
            boot_us: u32::try_from(boot_us).unwrap_or(u32::MAX),
            outcome,
        };
        c.boots = c.boots.saturating_add(1);
        let line = format!("{} boot rom: starting the image", stamp(now_ns));
        c.log.push_line(&line);
    }

    /// Moves a boot on whose time has come.
    fn advance(&self, c: &mut Core, now_ns: u64) {
        let State::Booting {
            ready_ns,
            boot_us,
            outcome,
        } = c.state
        else {
            return;
        };
        if now_ns < ready_ns {
            return;
        }
        match outcome {
            BootOutcome::Run => {
                c.state = State::Running {
                    since_ns: ready_ns,
                    boot_us,
                    hung_ns: None,
                };
                self.publish(c, ready_ns);
            }
            BootOutcome::Fail => {
                c.state = State::Failed(FwError::Timeout);
                c.params = None;
                let line = format!(
                    "{} boot rom: the image did not come up: {} (error {})",
                    stamp(ready_ns),
                    FwError::Timeout.text(),
                    FwError::Timeout as u32
                );
                c.log.push_line(&line);
            }
            // Booting for ever (until a reset).
            BootOutcome::Hang => {}
        }
    }

    /// The image runs: its parameters become the device's.
    fn publish(&self, c: &mut Core, now_ns: u64) {
        let Some(p) = c.params else { return };
        let s = p.sched;
        for (slot, us) in self.slice_ns.iter().zip(s.slice_us) {
            slot.store(u64::from(us) * 1000, Ordering::Relaxed);
        }
        self.round_robin.store(s.policy == 1, Ordering::Relaxed);
        for (slot, w) in self.packets.iter().zip(p.packets) {
            slot.store(w, Ordering::Relaxed);
        }
        self.features.store(p.header.features, Ordering::Relaxed);
        c.log.resize(p.log_size as usize);
        let lines =
            [
                format!(
                    "{} firmware {} running (generation {})",
                    stamp(now_ns),
                    version_text(p.header.version),
                    self.generation
                ),
                format!(
                "{} sched: slices {}/{}/{} us (low/normal/high), preempt timeout {} us, policy {}",
                stamp(now_ns),
                s.slice_us[0],
                s.slice_us[1],
                s.slice_us[2],
                s.preempt_timeout_us,
                if s.policy == 1 { "round-robin" } else { "priority" }
            ),
                format!(
                    "{} features:{}{}, heartbeat every {} ms",
                    stamp(now_ns),
                    if p.header.features & feature::USER_QUEUES != 0 {
                        " user-queues"
                    } else {
                        ""
                    },
                    if p.header.features & feature::PREEMPTION != 0 {
                        " preemption"
                    } else {
                        ""
                    },
                    p.heartbeat_ms
                ),
            ];
        for l in &lines {
            c.log.push_line(l);
        }
        self.running.store(true, Ordering::Release);
    }

    /// No image runs: the boot ROM's parameters.
    fn stop(&self, _c: &mut Core) {
        self.running.store(false, Ordering::Release);
        self.features.store(0, Ordering::Relaxed);
        for s in &self.slice_ns {
            s.store(ROM_SLICE_NS, Ordering::Relaxed);
        }
        self.round_robin.store(false, Ordering::Relaxed);
        for w in &self.packets {
            w.store(u32::MAX, Ordering::Relaxed);
        }
    }

    /// A `FW_STATUS` poll at `now_ns`: while an image boots, the poll is
    /// counted, and one that came sooner than [`FW_POLL_MIN_US`] after
    /// the previous poll of the same boot is returned (the boot protocol,
    /// docs/hardware.md: the driver sleeps between polls).
    pub fn poll(&self, now_ns: u64) -> Option<FastPoll> {
        let mut c = self.core();
        self.advance(&mut c, now_ns);
        if !matches!(c.state, State::Booting { .. }) {
            return None;
        }
        let boot = c.boots;
        let p = &mut c.polls;
        if p.boot != boot {
            *p = Polls {
                boot,
                ..Polls::default()
            };
        }
        p.count = p.count.saturating_add(1);
        let gap_ns = now_ns.saturating_sub(p.last_ns.replace(now_ns)?);
        (gap_ns < FW_POLL_MIN_US * 1000).then_some(FastPoll {
            boot,
            poll: p.count,
            gap_ns,
        })
    }

    /// The boot status (`FW_LOAD`, `FW_START`, `FW_STATUS` replies).
    pub fn status(&self, now_ns: u64, hdr: ReplyHeader) -> FwStatusReply {
        let mut c = self.core();
        self.advance(&mut c, now_ns);
        let (state, error, boot_us) = match c.state {
            State::WaitLoad => (fw_state::WAIT_LOAD, 0, 0),
            State::Loaded => (fw_state::LOADED, 0, 0),
            State::Booting { .. } => (fw_state::BOOTING, 0, 0),
            State::Running { boot_us, .. } => (fw_state::RUNNING, 0, boot_us),
            State::Failed(e) => (fw_state::FAILED, e as u32, 0),
            State::Crashed { code, boot_us, .. } => (fw_state::CRASHED, code, boot_us),
        };
        let p = c.params;
        let heartbeat_ms = p.map_or(0, |p| p.heartbeat_ms);
        // Heartbeats count while the firmware runs, and stop when it hangs
        // or crashes.
        let (since, until) = match c.state {
            State::Running {
                since_ns, hung_ns, ..
            } => (since_ns, hung_ns.unwrap_or(now_ns)),
            State::Crashed {
                since_ns, at_ns, ..
            } => (since_ns, at_ns),
            _ => (0, 0),
        };
        let heartbeats = match heartbeat_ms {
            0 => 0,
            ms => until.saturating_sub(since) / (u64::from(ms) * 1_000_000),
        };
        FwStatusReply {
            hdr,
            state,
            error,
            version: p.map_or(0, |p| p.header.version),
            features: p.map_or(0, |p| p.header.features),
            build: p.map_or([0; 4], |p| p.header.build),
            boot_us,
            heartbeat_ms,
            heartbeats,
            log_head: c.log.head(),
            log_size: u32::try_from(c.log.size()).unwrap_or(u32::MAX),
            boots: c.boots,
        }
    }

    /// The running firmware crashes (an injected `fw-crash` at a packet of
    /// `ctx` on `engine`): `CRASHED` with `code` until a power-on.
    pub fn crash(&self, now_ns: u64, code: u32, ctx: u32, engine: u32) {
        let mut c = self.core();
        self.advance(&mut c, now_ns);
        let State::Running {
            since_ns,
            boot_us,
            hung_ns,
        } = c.state
        else {
            return;
        };
        self.stop(&mut c);
        c.state = State::Crashed {
            code,
            since_ns,
            at_ns: hung_ns.unwrap_or(now_ns),
            boot_us,
        };
        let line = format!(
            "{} firmware: CRASH {} (code {code}) running context {ctx} on engine {engine}; \
             the engines stopped; reset the device",
            stamp(now_ns),
            vgpu_hwif::firmware::crash::name(code)
        );
        c.log.push_line(&line);
    }

    /// The running firmware hangs (an injected `fw-hang`): it says nothing,
    /// its heartbeats stop; it still counts as running.
    pub fn hang(&self, now_ns: u64) {
        let mut c = self.core();
        self.advance(&mut c, now_ns);
        if let State::Running { hung_ns, .. } = &mut c.state {
            hung_ns.get_or_insert(now_ns);
        }
    }

    /// Up to `len` bytes of the log from `pos`: the first position returned,
    /// the bytes, and the log's head.
    pub fn read_log(&self, pos: u64, len: usize) -> (u64, Vec<u8>, u64) {
        let c = self.core();
        let (start, bytes) = c.log.read(pos, len);
        (start, bytes, c.log.head())
    }

    /// The `IDENTIFY` feature bits the firmware contributes, and the
    /// running image's version (0 when none runs).
    pub fn identify(&self, now_ns: u64) -> (u32, u32) {
        if !self.running(now_ns) {
            return (0, 0);
        }
        let f = self.features.load(Ordering::Relaxed);
        let mut bits = FEATURE_FIRMWARE_RUNNING;
        if f & feature::USER_QUEUES != 0 {
            bits |= FEATURE_USER_QUEUES;
        }
        if f & feature::PREEMPTION != 0 {
            bits |= FEATURE_PREEMPTION;
        }
        let version = self.core().params.map_or(0, |p| p.header.version);
        (bits, version)
    }

    /// Whether the running image enables `feature` bits.
    pub fn enables(&self, bits: u32) -> bool {
        self.features.load(Ordering::Relaxed) & bits == bits
    }

    /// The time slice of a context of `priority` (realtime has the high
    /// one); `None` when the running image disables preemption (a ring
    /// keeps its engine until it has nothing to do).
    pub fn slice(&self, priority: u32) -> Option<Duration> {
        if self.running.load(Ordering::Acquire) && !self.enables(feature::PREEMPTION) {
            return None;
        }
        let i = match priority {
            PRIORITY_LOW => 0,
            PRIORITY_NORMAL => 1,
            PRIORITY_HIGH => 2,
            _ => 2,
        };
        let ns = self
            .slice_ns
            .get(i)
            .map_or(0, |s| s.load(Ordering::Relaxed));
        Some(Duration::from_nanos(ns.max(1000)))
    }

    /// Whether the scheduler ignores priorities (round robin only).
    pub fn round_robin(&self) -> bool {
        self.round_robin.load(Ordering::Relaxed)
    }

    /// Whether the command processor accepts packet `opcode`.
    pub fn packet_allowed(&self, opcode: u32) -> bool {
        let word = (opcode / 32) as usize;
        self.packets
            .get(word)
            .is_some_and(|w| w.load(Ordering::Relaxed) & (1 << (opcode % 32)) != 0)
    }

    /// The largest image `FW_LOAD` copies.
    pub const MAX_IMAGE: u32 = FW_MAX_SIZE as u32;
}

fn params_of(fw: &FwImage<'_>, generation: u32) -> Params {
    let all = FwPackets {
        gen1: [u32::MAX; 8],
        gen2: [u32::MAX; 8],
    };
    let p = fw.packets().unwrap_or(all);
    let sched = fw.sched().unwrap_or(FwSched {
        slice_us: [2000; 3],
        preempt_timeout_us: 0,
        policy: 0,
        reserved: 0,
    });
    Params {
        header: fw.header,
        sched,
        packets: if generation == 1 { p.gen1 } else { p.gen2 },
        heartbeat_ms: fw.heartbeat_ms().unwrap_or(0),
        log_size: fw
            .log_size()
            .filter(|s| s.is_power_of_two() && (4096..=1 << 20).contains(s))
            .unwrap_or(ROM_LOG_SIZE as u32),
    }
}

/// A log line's time stamp: device seconds, as the kernel prints them.
fn stamp(now_ns: u64) -> String {
    format!(
        "[{:5}.{:06}]",
        now_ns / 1_000_000_000,
        now_ns % 1_000_000_000 / 1000
    )
}

#[cfg(test)]
mod tests;
