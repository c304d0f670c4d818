//! The injector's hooks: where the device's blocks ask it whether a fault
//! fires (see the table in the module documentation) — the command
//! processor before each step of a packet and after it, the engine at a
//! TLB invalidation, the control processor before a command, resets and
//! fences — and what each class does when it fires.

use std::time::Duration;

use vgpu_hwif::event::{Event, ECC_PA_UNKNOWN};
use vgpu_hwif::mmu::{Access, FaultReason, LEVEL_NONE};
use vgpu_hwif::packet::opcode_name;
use vgpu_hwif::proto::{Opcode, Status};

use super::{Class, Injector, Trigger};
use crate::core::copy_engine::CopyOp;
use crate::core::dma::GpuMemory;
use crate::core::mmu::{MmuFault, PageMapping};
use crate::core::ring::{InFlight, Op};

/// Exit status of the device process when a `crash` fault fires.
pub const CRASH_EXIT_STATUS: i32 = 70;

/// Where an engine-side opportunity arises: what the command processor
/// tells the injector about the ring whose packet is in flight (the packet
/// itself is the `InFlight`). The injector needs nothing else of the
/// processor's state, so it depends on the ring's types only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Site {
    /// The ring's context.
    pub ctx: u32,
    /// The engine.
    pub engine: u32,
    /// Packets the ring completed before this one: with the packet's VA it
    /// names one packet, counted once however many steps it takes.
    pub ring_packets: u64,
}

/// What the command processor does with an in-flight packet's step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepVerdict {
    /// Execute normally.
    Go,
    /// Do not execute; end the slice with the packet still in flight.
    Hold,
    /// Retire the packet without executing it.
    Skip,
    /// The packet faults.
    Fault(MmuFault),
    /// The firmware went down (`fw-crash` or `fw-hang`): the host tells
    /// the firmware block; the packet holds.
    FirmwareDown(Class),
}

fn filter_matches(t: &Trigger, ctx: u32, engine: u32, name: &str) -> bool {
    t.ctx.is_none_or(|c| c == ctx)
        && t.engine.is_none_or(|e| e == engine)
        && t.packet.as_deref().is_none_or(|p| p == name)
}

impl Injector {
    /// Before a step of packet `fl` at `site` at device time `now_ns`.
    /// Events to post are appended to `post`.
    /// `translate` gives the guest-physical address of a VA of the job's
    /// address space (without touching the engine's TLB).
    pub fn on_step(
        &self,
        now_ns: u64,
        site: &Site,
        fl: &mut InFlight,
        translate: &dyn Fn(u64) -> Option<u64>,
        post: &mut Vec<Event>,
    ) -> StepVerdict {
        let mut g = self.lock();
        if Self::idle(&g) {
            return StepVerdict::Go;
        }
        let e = site.engine as usize;
        let key = (site.ctx, fl.packet_va, site.ring_packets);
        let Some(eh) = g.engines.get(e).copied() else {
            return StepVerdict::Go;
        };
        if g.lost || g.fw_down || eh.hung.is_some_and(|h| h.0 == site.ctx) {
            drop(g);
            // Keep a stuck engine from spinning on the host.
            std::thread::sleep(Duration::from_millis(1));
            return StepVerdict::Hold;
        }
        if eh.until_ns != 0 {
            if eh.last == Some(key) && now_ns < eh.until_ns {
                drop(g);
                std::thread::sleep(Duration::from_millis(1));
                return StepVerdict::Hold;
            }
            if let Some(h) = g.engines.get_mut(e) {
                h.until_ns = 0;
            }
            if eh.last == Some(key) {
                // The delay of this packet is over.
                return StepVerdict::Go;
            }
        }
        if eh.last == Some(key) {
            return StepVerdict::Go;
        }
        if let Some(h) = g.engines.get_mut(e) {
            h.last = Some(key);
        }
        let name = opcode_name(fl.opcode);
        let is_fence = matches!(fl.op, Op::Fence { .. });
        let mut verdict = StepVerdict::Go;
        for i in 0..g.armed.len() {
            let spec = g.armed[i].spec.clone();
            let class = spec.class;
            if class.on_control()
                || class == Class::DmaCorrupt
                || class == Class::EventDuplicate
                || (class.fence_only() && !is_fence)
                || !filter_matches(&spec.trigger, site.ctx, site.engine, name)
            {
                continue;
            }
            if class == Class::StaleTlb {
                // Armed per engine: the next invalidation is skipped.
                if g.opportunity(i, now_ns) {
                    let (id, pick) = g
                        .armed
                        .get_mut(i)
                        .map_or((0, 0), |a| (a.id, a.rng.next_u64()));
                    if let Some(h) = g.engines.get_mut(e) {
                        h.stale_tlb = Some((id, pick));
                    }
                }
                continue;
            }
            if verdict != StepVerdict::Go || !g.opportunity(i, now_ns) {
                continue;
            }
            let at = format!("packet={name} packet_va={:#x}", fl.packet_va);
            match class {
                Class::Hang => {
                    if let Some(h) = g.engines.get_mut(e) {
                        h.hung = Some(key);
                    }
                    g.injected(i, now_ns, site.ctx, site.engine, at);
                    verdict = StepVerdict::Hold;
                }
                Class::Lost => {
                    g.lost = true;
                    g.injected(i, now_ns, site.ctx, site.engine, at);
                    verdict = StepVerdict::Hold;
                }
                Class::FwCrash | Class::FwHang => {
                    g.fw_down = true;
                    g.injected(i, now_ns, site.ctx, site.engine, at);
                    verdict = StepVerdict::FirmwareDown(class);
                }
                Class::Crash => {
                    g.injected(i, now_ns, site.ctx, site.engine, at);
                    log::error!(
                        "injected crash: the device process exits now (status {CRASH_EXIT_STATUS})"
                    );
                    std::process::exit(CRASH_EXIT_STATUS);
                }
                Class::FenceLate | Class::Throttle => {
                    if let Some(h) = g.engines.get_mut(e) {
                        h.until_ns = now_ns
                            .saturating_add(spec.delay_ms.saturating_mul(1_000_000))
                            .max(1);
                    }
                    let d = format!("{at} delay_ms={}", spec.delay_ms);
                    g.injected(i, now_ns, site.ctx, site.engine, d);
                    verdict = StepVerdict::Hold;
                }
                Class::FenceNever => {
                    g.injected(i, now_ns, site.ctx, site.engine, at);
                    verdict = StepVerdict::Skip;
                }
                Class::FenceEventDrop => {
                    if let Op::Fence { flags, .. } = &mut fl.op {
                        *flags |= vgpu_hwif::packet::FENCE_NO_EVENT;
                    }
                    g.injected(i, now_ns, site.ctx, site.engine, at);
                }
                Class::EventSpurious => {
                    if let Op::Fence { va, seqno, .. } = fl.op {
                        post.push(Event::Fence {
                            ctx_id: site.ctx,
                            engine: site.engine,
                            seqno,
                            va,
                        });
                        let d = format!("{at} seqno={seqno}");
                        g.injected(i, now_ns, site.ctx, site.engine, d);
                    }
                }
                Class::MmuFault => {
                    let va = spec.va.unwrap_or_else(|| {
                        let r = g.armed.get_mut(i).map_or(0, |a| a.rng.next_u64());
                        // A page-aligned VA in the low 4 GiB above 64 KiB.
                        (0x1_0000 + (r % 0xffff_0000)) & !0xfff
                    });
                    let d = format!("{at} va={va:#x}");
                    g.injected(i, now_ns, site.ctx, site.engine, d);
                    verdict = StepVerdict::Fault(MmuFault {
                        va,
                        access: Access::Read,
                        reason: FaultReason::NotPresent,
                        level: LEVEL_NONE,
                    });
                }
                Class::Ecc => {
                    // The page given, else the one the packet reads next.
                    let va = spec.va.unwrap_or_else(|| next_read(fl));
                    let (va, pa) = match spec.pa {
                        Some(pa) => (ECC_PA_UNKNOWN, Some(pa)),
                        None => (va & !0xfff, translate(va)),
                    };
                    let pa = pa.map(|pa| self.poison.poison(pa));
                    post.push(Event::EccError {
                        ctx_id: site.ctx,
                        engine: site.engine,
                        va,
                        packet_va: fl.packet_va,
                        pa: pa.unwrap_or(ECC_PA_UNKNOWN),
                    });
                    let d = match pa {
                        Some(pa) if spec.pa.is_some() => format!("{at} pa={pa:#x}"),
                        Some(pa) => format!("{at} va={va:#x} pa={pa:#x}"),
                        None => format!("{at} va={va:#x} pa=unmapped"),
                    };
                    g.injected(i, now_ns, site.ctx, site.engine, d);
                }
                Class::EventOverflow => {
                    for n in 0..spec.events {
                        post.push(Event::Ping {
                            cookie: 0xfa17_0000_0000_0000 | u64::from(n),
                        });
                    }
                    let d = format!("{at} events={}", spec.events);
                    g.injected(i, now_ns, site.ctx, site.engine, d);
                }
                _ => {}
            }
        }
        verdict
    }

    /// Packet `fl` at `site` finished executing (before its fence, if any,
    /// is completed). `gm` is the memory of the ring's context.
    pub fn on_done(
        &self,
        now_ns: u64,
        site: &Site,
        fl: &InFlight,
        gm: &mut GpuMemory<'_>,
        post: &mut Vec<Event>,
    ) {
        let mut g = self.lock();
        if g.armed.is_empty() {
            return;
        }
        let name = opcode_name(fl.opcode);
        for i in 0..g.armed.len() {
            let spec = g.armed[i].spec.clone();
            let applies = match (spec.class, &fl.op) {
                (Class::DmaCorrupt, Op::Copy(_)) => true,
                (Class::EventDuplicate, Op::Fence { flags, .. }) => {
                    flags & vgpu_hwif::packet::FENCE_NO_EVENT == 0
                }
                _ => false,
            };
            if !applies
                || !filter_matches(&spec.trigger, site.ctx, site.engine, name)
                || !g.opportunity(i, now_ns)
            {
                continue;
            }
            let at = format!("packet={name} packet_va={:#x}", fl.packet_va);
            match fl.op {
                Op::Copy(c) => {
                    let (dst, size) = copy_destination(&c);
                    let mut flips = Vec::new();
                    for _ in 0..spec.bits {
                        let r = g.armed.get_mut(i).map_or(0, |a| a.rng.next_u64());
                        let off = if size == 0 { 0 } else { (r >> 8) % size };
                        let bit = r & 7;
                        let va = dst.wrapping_add(off);
                        let word = va & !7;
                        let mask = 1u64 << ((va & 7) * 8 + bit);
                        if let Ok(v) = gm.read_u64(word, Access::Read) {
                            if gm.write_u64(word, v ^ mask).is_ok() {
                                flips.push(format!("{va:#x}.{bit}"));
                            }
                        }
                    }
                    let d = format!("{at} flips={}", flips.join("+"));
                    g.injected(i, now_ns, site.ctx, site.engine, d);
                }
                Op::Fence { va, seqno, .. } => {
                    post.push(Event::Fence {
                        ctx_id: site.ctx,
                        engine: site.engine,
                        seqno,
                        va,
                    });
                    let d = format!("{at} seqno={seqno}");
                    g.injected(i, now_ns, site.ctx, site.engine, d);
                }
                _ => {}
            }
        }
    }

    /// Engine `engine` is asked to invalidate part of its TLB for `asid`:
    /// `invalidate(None)` does it normally; when `stale-tlb` fired on the
    /// engine, `invalidate(Some(pick))` keeps one translation of the range
    /// (chosen by the seeded draw `pick`) stale, and returns it. The
    /// injection is logged with the VA, the stale PA and the context; if
    /// the range held no translation, the next invalidation tries again.
    pub fn on_invalidate(
        &self,
        now_ns: u64,
        engine: u32,
        asid: u32,
        invalidate: impl FnOnce(Option<u64>) -> Option<PageMapping>,
    ) {
        let mut g = self.lock();
        let Some((id, pick)) = g.engines.get(engine as usize).and_then(|h| h.stale_tlb) else {
            drop(g);
            invalidate(None);
            return;
        };
        let Some(map) = invalidate(Some(pick)) else {
            return;
        };
        if let Some(h) = g.engines.get_mut(engine as usize) {
            h.stale_tlb = None;
        }
        let i = g
            .armed
            .iter()
            .position(|a| a.id == id)
            .unwrap_or(usize::MAX);
        let d = format!(
            "va={:#x} stale_pa={:#x} page_size={:#x}",
            map.va_base,
            map.pa_base,
            map.page_size()
        );
        g.injected(i, now_ns, asid, engine, d);
    }

    /// Before the control processor executes `op`: the status to answer
    /// instead, if any. Also logs the driver's reactions to an injection.
    pub fn on_command(&self, now_ns: u64, op: Opcode, ctx: u32, engine: u32) -> Option<Status> {
        let mut g = self.lock();
        if matches!(op, Opcode::ContextCreate | Opcode::ContextDestroy) {
            // A new context with this id may lay its ring out the same way:
            // its first packet is a new opportunity, not the last one seen.
            for h in &mut g.engines {
                if h.hung.is_none() && h.last.is_some_and(|l| l.0 == ctx) {
                    h.last = None;
                }
            }
        }
        if matches!(
            op,
            Opcode::EngineReset
                | Opcode::DeviceReset
                | Opcode::ContextDestroy
                | Opcode::FaultResume
                | Opcode::TlbInvalidate
                | Opcode::ContextCreate
                | Opcode::FwLoad
        ) {
            g.observed(now_ns, op.name(), ctx, engine, String::new());
        }
        let name = op.name();
        for i in 0..g.armed.len() {
            let spec = g.armed[i].spec.clone();
            let applies = match spec.class {
                Class::ControlBusy => true,
                Class::ResetFail => matches!(op, Opcode::EngineReset | Opcode::DeviceReset),
                _ => false,
            };
            if !applies
                || !filter_matches(&spec.trigger, ctx, engine, name)
                || !g.opportunity(i, now_ns)
            {
                continue;
            }
            let status = if spec.class == Class::ControlBusy {
                Status::Busy
            } else {
                Status::DeviceLost
            };
            g.injected(i, now_ns, ctx, engine, format!("command={name}"));
            return Some(status);
        }
        if g.lost && op != Opcode::DeviceReset {
            return Some(Status::DeviceLost);
        }
        None
    }

    /// After command `op` (about `ctx` and `engine`) executed: whether an
    /// armed `reply-corrupt` fault takes it, in which case bit 0 of the
    /// reply's first payload word (`payload`, the bytes after the reply
    /// header) is flipped. A reply without payload is no opportunity.
    pub fn on_reply(
        &self,
        now_ns: u64,
        op: Opcode,
        ctx: u32,
        engine: u32,
        payload: &mut [u8],
    ) -> bool {
        let Some(first) = payload.first_mut() else {
            return false;
        };
        let taken = self.take_control(Class::ReplyCorrupt, now_ns, op, ctx, engine);
        if taken {
            *first ^= 1;
        }
        taken
    }

    /// Command `op` (about `ctx` and `engine`) posts an event: whether an
    /// armed `event-corrupt` fault takes it, in which case the caller flips
    /// bit 0 of the event's first payload word (a `PING` event's cookie).
    pub fn on_command_event(&self, now_ns: u64, op: Opcode, ctx: u32, engine: u32) -> bool {
        self.take_control(Class::EventCorrupt, now_ns, op, ctx, engine)
    }

    /// Whether an armed fault of `class` whose filters match command `op`
    /// takes this opportunity (logged as injected).
    /// `POWER_SET` to `target` (`down`: a low-power state): the armed
    /// power fault that takes it, if any (`pm-enter-fail`,
    /// `pm-exit-fail`, or `pm-vram-lost` for a `D3HOT`).
    pub fn on_power_set(&self, now_ns: u64, down: bool, d3hot: bool) -> Option<Class> {
        let classes: &[Class] = match (down, d3hot) {
            (true, true) => &[Class::PmEnterFail, Class::PmVramLost],
            (true, false) => &[Class::PmEnterFail],
            (false, _) => &[Class::PmExitFail],
        };
        classes
            .iter()
            .copied()
            .find(|&c| self.take_control(c, now_ns, Opcode::PowerSet, u32::MAX, u32::MAX))
    }

    /// `FW_START`: how an armed `fw-boot-fail` or `fw-boot-hang` fault
    /// makes this boot end, if one takes it.
    pub fn on_fw_start(&self, now_ns: u64) -> Option<Class> {
        [Class::FwBootHang, Class::FwBootFail]
            .into_iter()
            .find(|&c| self.take_control(c, now_ns, Opcode::FwStart, u32::MAX, u32::MAX))
    }

    fn take_control(&self, class: Class, now_ns: u64, op: Opcode, ctx: u32, engine: u32) -> bool {
        let mut g = self.lock();
        let name = op.name();
        for i in 0..g.armed.len() {
            let spec = g.armed[i].spec.clone();
            if spec.class != class
                || !filter_matches(&spec.trigger, ctx, engine, name)
                || !g.opportunity(i, now_ns)
            {
                continue;
            }
            g.injected(i, now_ns, ctx, engine, format!("command={name}"));
            return true;
        }
        false
    }

    /// Engine `engine` was reset (`None`: the device): hangs and holds on
    /// it end; a device reset also ends a lost state.
    pub fn on_reset(&self, now_ns: u64, engine: Option<u32>) {
        let mut g = self.lock();
        let was = g.lost || g.fw_down || g.engines.iter().any(|e| e.hung.is_some());
        for (i, h) in g.engines.iter_mut().enumerate() {
            if engine.is_none_or(|e| e as usize == i) {
                h.hung = None;
                h.until_ns = 0;
                h.last = None;
            }
        }
        if engine.is_none() {
            g.lost = false;
            g.fw_down = false;
        }
        if was {
            let what = if engine.is_some() {
                "engine-reset-done"
            } else {
                "device-reset-done"
            };
            g.observed(
                now_ns,
                what,
                u32::MAX,
                engine.unwrap_or(u32::MAX),
                String::new(),
            );
        }
    }

    /// A FENCE completed on `engine` for `ctx` (the device serving again
    /// after an injection).
    pub fn on_fence(&self, now_ns: u64, ctx: u32, engine: u32, seqno: u64) {
        let mut g = self.lock();
        if g.observe == 0 || !g.reacted {
            return;
        }
        g.observed(now_ns, "fence", ctx, engine, format!("seqno={seqno}"));
        // One fence per reaction is enough to show the device serves again.
        g.reacted = false;
    }
}

/// The VA packet `fl` reads next: a copy's source at its progress, a
/// dispatch's module, a semaphore wait's value; else the packet itself
/// (the command processor fetches the following packets from there).
fn next_read(fl: &InFlight) -> u64 {
    match fl.op {
        Op::Copy(CopyOp::Linear { src, done, .. }) => src.wrapping_add(done),
        Op::Copy(CopyOp::TwoD { packet, row, col }) => packet
            .src
            .wrapping_add(u64::from(row) * u64::from(packet.src_pitch) + u64::from(col)),
        Op::Dispatch(d) => d.packet.module_va,
        Op::SemWait { va, .. } => va,
        _ => fl.packet_va,
    }
}

/// Destination VA and size of a copy.
fn copy_destination(c: &CopyOp) -> (u64, u64) {
    match *c {
        CopyOp::Linear { dst, size, .. } | CopyOp::Fill { dst, size, .. } => (dst, size),
        CopyOp::TwoD { packet, .. } => (packet.dst, u64::from(packet.width)),
    }
}
