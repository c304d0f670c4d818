// SPDX-License-Identifier: GPL-2.0

//! debugfs: `/sys/kernel/debug/vgpu/<pci-name>/`.
//!
//! * `layout`: the layout table of every struct shared with the device, as
//!   compiled into this driver (`layout::write_table`), ending with its
//!   fingerprint.
//! * `status`: device state, negotiated features, queues, interrupts, and
//!   the command and event counters.
//! * `vms`, `objects`: every file's address space (checked by walking its
//!   tables), object counts for leak checks.
//! * `contexts`: every context, its rings and fences, the watchdog's
//!   counters, the fault and reset logs; `queues`: the job queue of every
//!   ring (jobs waiting in the KMD, what the first waits for) and the bind
//!   jobs; `hang_dump`: the last hang;
//!   `coredumps`: the last devcoredumps (published or why not);
//!   `coredump` (write `SLOT ENGINE`): a devcoredump of that ring now;
//!   `stats`: the `QUERY_STATS` summary; `ras`: retired pages and
//!   quarantined objects.
//! * `hangcheck` (write `1`): run the hang check; `reset_device` (write
//!   `1`): the reset ladder's device reset.
//! * `sanitizer`: the device sanitizer's reports (counts, the last ones);
//!   `sanitizer_plant` (write a name): commit one driver bug on purpose.
//! * `trace`: the driver's trace buffer as text ([`crate::ktrace`]);
//!   `trace_ctl` (write `on [N]`, `off`, `clear`, `sync`): start it (N
//!   records), stop it, empty it, take a clock-sync sample.
//! * Test only, in a module built for the debug kernel (KASAN):
//!   `selftest_bug` (write a bug's name): the planted bugs of selftest.rs
//!   that prove the checkers report.
//!
//! It reads every block and is read by none.

use crate::{
    device::Vgpu,
    gpu::hooks::HangCheck,
    layout,
    mmu::{
        Access,
        FaultReason, //
    },
    proto::{
        QUEUE_CONTROL,
        QUEUE_EVENT, //
    },
    transport::virtio::StatusBits,
};
use core::fmt;
use kernel::{
    debugfs::{
        Dir,
        Scope, //
    },
    device::Core,
    pci,
    prelude::*,
    sync::{
        atomic::Relaxed,
        Arc, //
    },
};

kernel::sync::global_lock! {
    // SAFETY: Initialised by `Root::create` in the module initialiser, before
    // any driver is registered and thus before any other use.
    unsafe(uninit) static ROOT: Mutex<Option<Dir>> = None;
}

/// Owns the `vgpu` debugfs directory for the lifetime of the module.
pub(crate) struct Root(());

impl Root {
    /// Creates `/sys/kernel/debug/vgpu`. Must be called once, from the module
    /// initialiser, before the PCI driver is registered.
    pub(crate) fn create() -> Root {
        // SAFETY: Called exactly once, from the module initialiser, before any
        // other use of `ROOT`.
        unsafe { ROOT.init() };
        *ROOT.lock() = Some(Dir::new(c"vgpu"));
        Root(())
    }
}

impl Drop for Root {
    fn drop(&mut self) {
        // The per-device directories (gone by now) each held a reference to
        // the root; this drops the last one.
        drop(ROOT.lock().take());
    }
}

/// A device's directory; removed when dropped.
pub(crate) type DeviceDir = Scope<Arc<Vgpu>>;

/// Creates the device's directory, named after its PCI device. `None` if
/// the root directory does not exist.
pub(crate) fn create(
    pdev: &pci::Device<Core<'_>>,
    vgpu: &Arc<Vgpu>,
) -> Result<Option<Pin<KBox<DeviceDir>>>> {
    let root = ROOT.lock();
    let Some(root) = root.as_ref() else {
        return Ok(None);
    };
    let scope = root.scope(
        Ok::<_, Error>(vgpu.clone()),
        pdev.as_ref().name(),
        |v, dir| {
            dir.read_callback_file(c"layout", v, &show_layout);
            dir.read_callback_file(c"status", v, &show_status);
            dir.read_callback_file(c"firmware", v, &show_firmware);
            dir.read_callback_file(c"power", v, &show_power);
            dir.read_callback_file(c"vms", v, &show_vms);
            dir.read_callback_file(c"objects", v, &show_objects);
            dir.read_callback_file(c"contexts", v, &show_contexts);
            dir.read_callback_file(c"queues", v, &show_queues);
            dir.write_only_callback_file(c"hangcheck", v, &write_hangcheck);
            dir.write_only_callback_file(c"reset_device", v, &write_reset_device);
            dir.read_callback_file(c"hang_dump", v, &show_hang_dump);
            dir.read_callback_file(c"coredumps", v, &show_coredumps);
            dir.write_only_callback_file(c"coredump", v, &write_coredump);
            dir.read_callback_file(c"stats", v, &show_stats);
            dir.read_callback_file(c"ras", v, &show_ras);
            dir.read_callback_file(c"vram", v, &show_vram);
            dir.read_callback_file(c"vram_mm", v, &show_vram_mm);
            dir.read_callback_file(c"sanitizer", v, &show_sanitizer);
            dir.write_only_callback_file(c"sanitizer_plant", v, &write_sanitizer_plant);
            dir.read_callback_file(c"trace", v, &show_trace);
            dir.write_only_callback_file(c"trace_ctl", v, &write_trace_ctl);
            // Test only: the debug kernel's planted bugs (selftest.rs).
            #[cfg(CONFIG_KASAN)]
            dir.write_only_callback_file(c"selftest_bug", v, &write_selftest_bug);
        },
    );
    Ok(Some(KBox::pin_init(scope, GFP_KERNEL)?))
}

/// Every open file's GPU address space, checked by walking its tables.
fn show_firmware(v: &Arc<Vgpu>, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    v.hw.show_firmware(f)
}

fn show_power(v: &Arc<Vgpu>, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    v.gpu.show_power(f)
}

fn show_vms(v: &Arc<Vgpu>, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    let clients = v.clients.lock();
    for c in clients.iter() {
        write!(f, "client {} ", c.id)?;
        c.vm.lock().dump(f)?;
    }
    Ok(())
}

/// Object counts, for leak checks.
fn show_objects(v: &Arc<Vgpu>, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    let clients = v.clients.lock();
    let (mut maps, mut tables, mut hosts) = (0, 0, 0);
    for c in clients.iter() {
        hosts += c.host.lock().count();
        let vm = c.vm.lock();
        maps += vm.mapping_count();
        tables += vm.table_count();
    }
    writeln!(f, "clients {}", clients.len())?;
    writeln!(f, "contexts {}", v.gpu.context_count())?;
    writeln!(f, "bos {}", crate::gem::live_objects())?;
    writeln!(f, "user_bos {}", crate::gem::user_objects())?;
    writeln!(f, "mappings {}", maps)?;
    writeln!(f, "vm_tables {}", tables)?;
    writeln!(f, "host_maps {}", hosts)?;
    writeln!(f, "host_pinned_pages {}", crate::hostmem::pinned_pages())?;
    if let Some(p) = v.pt_pool.as_ref() {
        let (total, free) = p.usage();
        writeln!(f, "pt_pool_used {}", total - free)?;
        writeln!(f, "pt_pool_total {}", total)?;
    }
    Ok(())
}

/// The job queues and the bind jobs.
fn show_queues(v: &Arc<Vgpu>, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    v.gpu.show_queues(f)
}

/// Contexts, rings, fences, and the fault and reset logs.
fn show_contexts(v: &Arc<Vgpu>, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    let Ok(mem) = v.gpu.slots() else {
        return Ok(());
    };
    // Before the state lock: stopping the watchdog waits for a hang check,
    // which takes the state lock.
    let watchdog = v.watchdog_counts();
    let g = v.gpu.state.lock();
    let k = &g.counters;
    writeln!(
        f,
        "wedged {} fences_signalled {} faults {} hangs {} engine_resets {} device_resets {} missed_fence_events {} early_fence_events {} duplicate_fence_events {} skipped_fence_events {} doorbells_rung_again {} firmware_failures {}",
        u8::from(g.wedged),
        k.fences_signalled,
        k.faults,
        k.hangs,
        k.engine_resets,
        k.device_resets,
        k.missed_fence_events,
        k.early_fence_events,
        k.duplicate_fence_events,
        k.skipped_fence_events,
        k.doorbells_rung_again,
        k.firmware_failures
    )?;
    if let Some((ticks, early, checks, period)) = watchdog {
        writeln!(
            f,
            "watchdog period_ms {} ticks {} early {} checks {}",
            period, ticks, early, checks
        )?;
    }
    for (i, s) in g.slots.iter().enumerate() {
        let Some(c) = s else { continue };
        writeln!(
            f,
            "ctx {} client {} handle {} prio {} flags {:#x} root {:#x} errored {} banned {} reset {} hangs {} faults {} fault_va {:#x} fault_access {}",
            i, c.client.id, c.handle, c.priority, c.flags, c.pt_root, u8::from(c.errored), u8::from(c.banned),
            c.reset_status, c.hangs, c.faults, c.fault_va, c.fault_access
        )?;
        for (e, r) in c.rings.iter().enumerate() {
            if !r.present {
                continue;
            }
            let st = mem.status(i as u32, e);
            writeln!(
                f,
                "  ring {} wptr {:#x} rptr {:#x} state {} error {} last_fence {} fence_slot {} completed {} next_seqno {} pending {} size {:#x}",
                e, r.wptr, st.rptr, st.state, st.error, st.last_fence, mem.fence_value(i as u32, e),
                r.completed, r.next_seqno, r.jobs.len(), crate::gpu::ring::RING_SIZE
            )?;
        }
    }
    for l in g.faults_log.iter() {
        writeln!(
            f,
            "fault ctx {} engine {} va {:#x} access {} reason {} {}",
            l.hw,
            l.engine,
            l.va,
            Access::from_u8(l.access).map_or("?", |a| a.name()),
            FaultReason::from_u8(l.reason).map_or("?", |r| r.name()),
            if l.served { "served" } else { "aborted" }
        )?;
    }
    for l in g.resets_log.iter() {
        writeln!(
            f,
            "reset {} ctx {} engine {:#x} {} in {} ms",
            l.kind,
            l.hw,
            l.engine,
            if l.ok { "ok" } else { "failed" },
            l.ms
        )?;
    }
    Ok(())
}

/// The last hang: ring pointers, fences, ring contents around the read
/// pointer, context and device state.
fn show_hang_dump(v: &Arc<Vgpu>, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    let g = v.gpu.state.lock();
    match g.last_hang.as_ref() {
        Some(d) => d.show(f),
        None => writeln!(f, "no hang"),
    }
}

/// The last devcoredumps: what, where, sizes, times, published or not.
fn show_coredumps(v: &Arc<Vgpu>, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    let g = v.gpu.state.lock();
    writeln!(
        f,
        "coredumps {} pending {} unread {}",
        g.dumps_seq,
        g.pending_dumps.len() + g.publishing_dumps as usize,
        u8::from(v.gpu.dump_unread())
    )?;
    for d in g.dumps_log.iter() {
        writeln!(
            f,
            "dump {} {} slot {} ctx {} engine {} capture {} capture_bytes {} bytes {} capture_ms {} read_ms {} build_ms {} {}",
            d.seq,
            d.why,
            d.hw,
            d.handle,
            d.engine,
            d.capture,
            d.capture_bytes,
            d.total_bytes,
            d.capture_ms,
            d.read_ms,
            d.build_ms,
            d.outcome
        )?;
    }
    Ok(())
}

/// `SLOT ENGINE` (decimal): a devcoredump of that context's ring now.
fn write_coredump(v: &Arc<Vgpu>, r: &mut kernel::uaccess::UserSliceReader) -> Result {
    let mut buf = [0u8; 16];
    let n = r.len().min(buf.len());
    r.read_slice(&mut buf[..n])?;
    let text = core::str::from_utf8(&buf[..n]).map_err(|_| EINVAL)?;
    let mut words = text.split_whitespace();
    let mut num = || -> Result<u32> {
        words
            .next()
            .and_then(|w| w.parse::<u32>().ok())
            .ok_or(EINVAL)
    };
    let (slot, engine) = (num()?, num()?);
    if engine as usize >= crate::gpu::ring::ENGINES {
        return Err(EINVAL);
    }
    v.gpu.dump_now(slot, engine as usize)
}

/// The `QUERY_STATS` summary: memory, counters, every context.
fn show_stats(v: &Arc<Vgpu>, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    crate::stats::show(v, f)
}

/// The device sanitizer's reports: counts, then every report kept.
fn show_sanitizer(v: &Arc<Vgpu>, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    v.gpu.show_sanitizer(f)?;
    if let Some(m) = v.san_mem.as_ref().filter(|m| m.on()) {
        let (pages, refused) = m.counts();
        writeln!(f, "declared pages {} refused {}", pages, refused)?;
    }
    Ok(())
}

/// Plants one driver bug for the device's sanitizer to catch:
/// `doorbell-early`, `skip-tlb-invalidate`, `fence-backwards`,
/// `doorbell-mid-packet`, or `none`
/// (see `gpu/sanlog.rs`).
fn write_sanitizer_plant(v: &Arc<Vgpu>, r: &mut kernel::uaccess::UserSliceReader) -> Result {
    let mut buf = [0u8; 32];
    let n = r.len().min(buf.len());
    r.read_slice(&mut buf[..n])?;
    let p = crate::gpu::sanlog::Plant::parse(&buf[..n])?;
    v.gpu.plant(p);
    Ok(())
}

/// The driver's trace buffer, oldest record first.
fn show_trace(v: &Arc<Vgpu>, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    v.hw.trace.show(f)
}

/// `on [N]` (N records, default [`crate::ktrace::DEFAULT_RECORDS`]),
/// `off`, `clear` or `sync`.
fn write_trace_ctl(v: &Arc<Vgpu>, r: &mut kernel::uaccess::UserSliceReader) -> Result {
    let mut buf = [0u8; 32];
    let n = r.len().min(buf.len());
    r.read_slice(&mut buf[..n])?;
    let text = core::str::from_utf8(&buf[..n]).map_err(|_| EINVAL)?;
    let mut words = text.split_whitespace();
    match (words.next(), words.next(), words.next()) {
        (Some("on"), size, None) => {
            let records = match size {
                Some(w) => w.parse::<usize>().map_err(|_| EINVAL)?,
                None => crate::ktrace::DEFAULT_RECORDS,
            };
            v.trace_on(records)
        }
        (Some("off"), None, None) => {
            v.hw.trace.disable();
            Ok(())
        }
        (Some("clear"), None, None) => {
            v.hw.trace.clear();
            Ok(())
        }
        (Some("sync"), None, None) => v.hw.sync_clock(),
        _ => Err(EINVAL),
    }
}

/// Retired pages and quarantined objects.
fn show_ras(v: &Arc<Vgpu>, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    v.retired.show(f)
}

/// Any write runs a hang check now.
fn write_hangcheck(v: &Arc<Vgpu>, _r: &mut kernel::uaccess::UserSliceReader) -> Result {
    v.gpu.hang_check();
    Ok(())
}

/// Writing `1` resets the device the way the reset ladder's second rung
/// does, with no guilty context: every context's unfinished jobs are
/// written again and those contexts report innocent. For exercising the
/// device-reset path without making an engine reset fail.
fn write_reset_device(v: &Arc<Vgpu>, r: &mut kernel::uaccess::UserSliceReader) -> Result {
    let mut buf = [0u8; 2];
    let n = r.len().min(buf.len());
    r.read_slice(&mut buf[..n])?;
    if n == 0 || buf[0] != b'1' {
        return Err(EINVAL);
    }
    v.gpu.reset_device_now()
}

/// Test only (debug kernel): commits the planted bug named by the word
/// written (`uaf`, `oob`, `leak`, `lockdep`, `odebug`; see selftest.rs).
#[cfg(CONFIG_KASAN)]
fn write_selftest_bug(_v: &Arc<Vgpu>, r: &mut kernel::uaccess::UserSliceReader) -> Result {
    let mut buf = [0u8; 16];
    let n = r.len().min(buf.len());
    r.read_slice(&mut buf[..n])?;
    let word = buf[..n].strip_suffix(b"\n").unwrap_or(&buf[..n]);
    crate::selftest::commit(word)
}

/// `vram`: the device's VRAM layout (`MEMORY_LAYOUT`, checked) and the
/// aperture's PCI function, or `none` for a device without VRAM.
fn show_vram(v: &Arc<Vgpu>, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    let Some(m) = v.hw.memory.as_ref() else {
        return writeln!(f, "vram: none");
    };
    writeln!(
        f,
        "vram: size {:#x} visible {:#x} usable {:#x} reset_policy {}",
        m.layout.size,
        m.layout.visible,
        m.layout.usable_bytes(),
        crate::vram::state::name(m.reset_policy)
    )?;
    for (i, r) in m.layout.ranges().iter().enumerate() {
        let kind = match r.kind {
            crate::vram::kind::USABLE => "usable",
            _ => "reserved",
        };
        let visible = if r.flags & crate::vram::flags::CPU_VISIBLE != 0 {
            " cpu-visible"
        } else {
            ""
        };
        writeln!(
            f,
            "range {}: {:#x}..{:#x} {}{}",
            i,
            r.base,
            r.end(),
            kind,
            visible
        )?;
    }
    match m.aperture {
        Some(a) => writeln!(
            f,
            "aperture: function {:02x}.{} bar 2 at {:#x} size {:#x}",
            a.devfn >> 3,
            a.devfn & 7,
            a.start,
            a.len
        ),
        None => writeln!(f, "aperture: none"),
    }
}

/// `vram_mm`: the VRAM manager (free and used bytes, counters) and every
/// VRAM object with its blocks.
fn show_vram_mm(v: &Arc<Vgpu>, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    let Some(mgr) = v.vram.as_ref() else {
        return writeln!(f, "vram_mm: none");
    };
    let c = mgr.counters();
    writeln!(
        f,
        "vram_mm: usable {:#x} free {:#x} used {:#x} visible_used {:#x} allocs {} failed {} evictions {} evicted_bytes {:#x} restores {} restored_bytes {:#x} moves_failed {} losses {} retired {}",
        mgr.usable(),
        mgr.avail(),
        c.used,
        c.visible_used,
        c.allocs,
        c.failed,
        c.evictions,
        c.evicted_bytes,
        c.restores,
        c.restored_bytes,
        c.moves_failed,
        v.gpu.vram_losses.load(kernel::sync::atomic::Relaxed),
        mgr.retired_pages()
    )?;
    let m = mgr.last_move();
    writeln!(
        f,
        "last_move: bytes {:#x} pages_us {} drain_us {} copy_us {} remap_us {}",
        m.bytes, m.pages_us, m.drain_us, m.copy_us, m.remap_us
    )?;
    let mut res = Ok(());
    v.bos.visit(|bo| {
        if !bo.is_vram_object() || res.is_err() {
            return;
        }
        let place = bo.vram();
        let lost = if bo.is_lost() { " lost" } else { "" };
        let Some(p) = place.as_ref() else {
            res = writeln!(
                f,
                "bo {} gen {} evicted {}: system{}",
                bo.id(),
                bo.gen(),
                bo.evictions(),
                lost
            );
            return;
        };
        res = (|| {
            write!(
                f,
                "bo {} gen {} evicted {}: size {:#x} {}:",
                bo.id(),
                bo.gen(),
                bo.evictions(),
                p.alloc.size(),
                if p.alloc.is_visible() {
                    "visible"
                } else {
                    "vram"
                }
            )?;
            for (off, len) in p.alloc.blocks() {
                write!(f, " {:#x}+{:#x}", off, len)?;
            }
            writeln!(f, "{}", lost)
        })();
    });
    res
}

fn show_layout(_vgpu: &Arc<Vgpu>, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    layout::write_table(f)
}

fn show_status(v: &Arc<Vgpu>, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    writeln!(
        f,
        "device: {:04x}:{:04x} rev {:#04x}",
        v.hw.pdev().vendor_id().as_raw(),
        v.hw.pdev().device_id(),
        v.hw.pdev().revision_id()
    )?;
    writeln!(f, "state: {}", v.hw.link.state_name())?;
    match v.hw.link.transport.status() {
        Ok(s) => writeln!(f, "device_status: {}", StatusBits(s))?,
        Err(e) => writeln!(f, "device_status: unreadable (error {})", e.to_errno())?,
    }

    let caps = v.hw.link.transport.caps();
    writeln!(
        f,
        "regions: common BAR{}+{:#x}/{:#x}, notify BAR{}+{:#x}/{:#x} (multiplier {}), isr BAR{}+{:#x}",
        caps.common.bar,
        caps.common.offset,
        caps.common.len,
        caps.notify.bar,
        caps.notify.offset,
        caps.notify.len,
        caps.notify_off_multiplier,
        caps.isr.bar,
        caps.isr.offset
    )?;
    match caps.device {
        Some(d) => writeln!(f, "device_cfg: BAR{}+{:#x}/{:#x}", d.bar, d.offset, d.len)?,
        None => writeln!(f, "device_cfg: none")?,
    }

    if let Some(s) = v.hw.setup.as_ref() {
        writeln!(f, "features_offered: {:#018x}", s.device_features)?;
        writeln!(f, "features_negotiated: {:#018x}", s.driver_features)?;
        writeln!(f, "interrupts: {}", s.irq.name())?;
        writeln!(
            f,
            "queue {} (control): size {} (device max {})",
            QUEUE_CONTROL, s.control_size, s.max_sizes[0]
        )?;
        writeln!(
            f,
            "queue {} (event): size {} (device max {})",
            QUEUE_EVENT, s.event_size, s.max_sizes[1]
        )?;
    }
    let irqs = v.hw.link.irq_counts();
    writeln!(
        f,
        "irq_count: line0 {} line1 {} (config checks {})",
        irqs[0],
        irqs[1],
        v.hw.link.config_checks()
    )?;

    let c = &v.hw.control.stats;
    writeln!(
        f,
        "commands: sent {} ok {} failed {} timeouts {} interrupted {} late {} protocol_errors {} posted {} posted_failed {} (timeout {} ms)",
        c.sent.load(Relaxed),
        c.ok.load(Relaxed),
        c.failed.load(Relaxed),
        c.timeouts.load(Relaxed),
        c.interrupted.load(Relaxed),
        c.late.load(Relaxed),
        c.protocol_errors.load(Relaxed),
        c.posted.load(Relaxed),
        c.posted_failed.load(Relaxed),
        v.hw.control.timeout_ms()
    )?;
    if let Some((slots, abandoned, outstanding)) =
        v.hw.control
            .with_queue(|q| (q.slots(), q.abandoned(), q.ring().outstanding()))
    {
        writeln!(
            f,
            "control_slots: {} (abandoned {}, outstanding {})",
            slots, abandoned, outstanding
        )?;
    }

    let (e, q) = v.hw.events.snapshot();
    writeln!(
        f,
        "events: received {} pings {} unclaimed_pings {} unhandled {} unknown_kind {} malformed {} batches {}",
        e.received,
        e.pings,
        e.pings_unclaimed,
        e.unhandled,
        e.unknown_kind,
        e.malformed,
        v.hw.events.batches()
    )?;
    writeln!(
        f,
        "event_seq: first {} last {} gaps {} missing {} backwards {}",
        e.first_seq, e.last_seq, e.seq_gaps, e.seq_missing, e.seq_backwards
    )?;
    writeln!(
        f,
        "events_lost: records {} events {}",
        e.lost_records, e.lost_events
    )?;
    if let Some((size, posted)) = q {
        writeln!(f, "event_buffers: {} posted of {}", posted, size)?;
    }

    if let Some(id) = v.hw.identity.as_ref() {
        writeln!(
            f,
            "identify: generation {} protocol {:#x} firmware {:#x} engines {:#x} fingerprint {:#018x}",
            id.generation,
            id.protocol_version,
            id.firmware_version,
            id.engine_mask,
            id.layout_fingerprint
        )?;
    }
    writeln!(f, "hwif_fingerprint: {:#018x}", layout::FINGERPRINT)
}
