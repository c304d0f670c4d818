// SPDX-License-Identifier: GPL-2.0

//! Dumps of failures, no I/O.
//!
//! * [`HangDump`]: what a hung ring looked like when the hang was detected
//!   (debugfs `hang_dump`): copied out of the ring memory and the driver's
//!   ring state; the caller asks the device for its view first.
//! * [`Snapshot`] (both are defined with the other records the state keeps,
//!   in `records.rs`, so that the state does not depend on this block): the
//!   driver's own state at a failure (every context,
//!   its rings, the jobs and fences in flight, the reset and fault logs),
//!   copied under the state lock, and [`write_coredump`], which writes it
//!   with the failing context's mappings and the device's capture as the
//!   devcoredump text (`hwif/src/coredump.rs` defines the format).

pub(crate) use super::records::{
    HangDump,
    HangSite, //
};
use super::{
    records::{
        CtxLine,
        JobLine,
        RingLine,
        Snapshot,
        Why,
        MAX_JOBS, //
    },
    ring::SlotMemory,
    state::GpuState,
};
use crate::{
    coredump::{
        base64_encode,
        sanitize,
        section,
        BANNER,
        BASE64_LINE_BYTES,
        VERSION, //
    },
    mmu::{
        Access,
        FaultReason,
        PTE_EXEC,
        PTE_READ,
        PTE_WRITE, //
    },
    packet::EngineError,
    time::elapsed_ns,
};
use core::fmt::{
    self,
    Write, //
};
use kernel::{alloc::KVVec, prelude::*};

impl Snapshot {
    /// Copies the state of every context (state lock held).
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn take(
        g: &GpuState,
        mem: &SlotMemory,
        why: Why,
        hw: u32,
        engine: usize,
        handle: u32,
    ) -> Result<Snapshot> {
        let mut s = Snapshot {
            why,
            hw,
            engine,
            handle,
            time_ns: crate::ffi::monotonic_ns(),
            ctxs: KVec::new(),
            jobs: KVec::new(),
            jobs_cut: false,
            resets: KVec::new(),
            faults: KVec::new(),
            counters: g.counters,
        };
        for (i, slot) in g.slots.iter().enumerate() {
            let Some(c) = slot else { continue };
            let i = i as u32;
            let ring = |e: usize| {
                let r = &c.rings[e];
                RingLine {
                    present: r.present,
                    wptr: r.wptr,
                    completed: r.completed,
                    next_seqno: r.next_seqno,
                    evt_seqno: r.evt_seqno,
                    done_upto: r.done_upto,
                    pending: r.jobs.len(),
                    exported: r.exported.len(),
                    stalled_ms: elapsed_ns(&r.progress_at) / 1_000_000,
                    status: mem.status(i, e),
                }
            };
            let state = if c.destroying {
                "destroying"
            } else if c.banned {
                "banned"
            } else if c.errored {
                "errored"
            } else {
                "live"
            };
            s.ctxs.push(
                CtxLine {
                    hw: i,
                    handle: c.handle,
                    client: c.client.id,
                    pid: c.pid,
                    priority: c.priority,
                    engines: c.engine_mask,
                    flags: c.flags,
                    pt_root: c.pt_root,
                    kmd_va: c.kmd_va,
                    state,
                    reset: c.reset_status,
                    hangs: c.hangs,
                    faults: c.faults,
                    engine_error: c.engine_error,
                    fault_va: c.fault_va,
                    rings: [ring(0), ring(1)],
                },
                GFP_KERNEL,
            )?;
            for (e, r) in c.rings.iter().enumerate() {
                for j in r.jobs.iter() {
                    if s.jobs.len() >= MAX_JOBS {
                        s.jobs_cut = true;
                        break;
                    }
                    s.jobs.push(
                        JobLine {
                            hw: i,
                            engine: e,
                            seqno: j.seqno,
                            words: j.words.len(),
                        },
                        GFP_KERNEL,
                    )?;
                }
            }
        }
        for r in g.resets_log.iter() {
            s.resets.push(*r, GFP_KERNEL)?;
        }
        for f in g.faults_log.iter() {
            s.faults.push(*f, GFP_KERNEL)?;
        }
        Ok(s)
    }
}

/// A devcoredump being written: text into vmalloc'ed memory.
pub(crate) struct DumpText {
    /// The bytes so far.
    pub(crate) bytes: KVVec<u8>,
}

impl Write for DumpText {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.bytes
            .extend_from_slice(s.as_bytes(), GFP_KERNEL)
            .map_err(|_| fmt::Error)
    }
}

/// A field value written as the format allows (no spaces, no `=`).
struct Word<'a>(&'a [u8]);

impl fmt::Display for Word<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for &c in self.0 {
            f.write_char(char::from(sanitize(c)))?;
        }
        if self.0.is_empty() {
            f.write_char('-')?;
        }
        Ok(())
    }
}

fn perms(p: u64) -> [u8; 3] {
    [
        if p & PTE_READ != 0 { b'r' } else { b'-' },
        if p & PTE_WRITE != 0 { b'w' } else { b'-' },
        if p & PTE_EXEC != 0 { b'x' } else { b'-' },
    ]
}

/// One mapping of the failing context's address space, for the dump.
pub(crate) struct MapLine {
    pub(crate) va: u64,
    pub(crate) size: u64,
    pub(crate) handle: u32,
    pub(crate) bo_offset: u64,
    pub(crate) perms: u64,
    pub(crate) lazy: bool,
}

/// The failing context's address space, for the dump.
pub(crate) struct VmLines {
    pub(crate) client: u64,
    pub(crate) root: u64,
    pub(crate) maps: KVec<MapLine>,
}

/// What the device gave for the dump.
pub(crate) struct DeviceCapture {
    /// Capture id, size, status text, how long reading it took.
    pub(crate) id: u32,
    pub(crate) status: &'static str,
    pub(crate) capture_ms: u64,
    pub(crate) read_ms: u64,
    /// The capture (empty if none).
    pub(crate) bytes: KVVec<u8>,
}

/// Writes the devcoredump of `s` (dump number `seq`) with the failing
/// context's address space `vm` and the device capture `dev`.
pub(crate) fn write_coredump(
    out: &mut DumpText,
    seq: u64,
    s: &Snapshot,
    pci: &[u8],
    vm: Option<&VmLines>,
    dev: &DeviceCapture,
) -> fmt::Result {
    writeln!(out, "{BANNER} {VERSION}")?;
    writeln!(out, "[{}]", section::DUMP)?;
    write!(
        out,
        "dump seq={seq} reason={} slot={} ctx={} engine={} device={} time_ns={} job_timeout_ms={}",
        s.why.name(),
        s.hw,
        s.handle,
        s.engine,
        Word(pci),
        s.time_ns,
        crate::params::job_timeout_ms()
    )?;
    match s.why {
        Why::Fault {
            va,
            access,
            reason,
            level,
        } => write!(
            out,
            " fault_va={va:#x} access={} fault_reason={} level={level}",
            Access::from_u8(access).map_or("?", |a| a.name()),
            FaultReason::from_u8(reason).map_or("?", |r| r.name())
        )?,
        Why::EngineError { code } => write!(
            out,
            " error={}",
            EngineError::from_u32(code).map_or("?", |c| c.name())
        )?,
        Why::Hang | Why::Manual => {}
    }
    writeln!(out)?;
    let c = &s.counters;
    writeln!(
        out,
        "counters faults={} hangs={} engine_resets={} device_resets={} fences_signalled={} missed_fence_events={}",
        c.faults, c.hangs, c.engine_resets, c.device_resets, c.fences_signalled, c.missed_fence_events
    )?;
    writeln!(out, "[{}]", section::CONTEXTS)?;
    for x in s.ctxs.iter() {
        writeln!(
            out,
            "ctx slot={} handle={} client={} pid={} priority={} engines={:#x} flags={:#x} pt_root={:#x} kmd_va={:#x} state={} reset={} hangs={} faults={} engine_error={} fault_va={:#x}{}",
            x.hw,
            x.handle,
            x.client,
            x.pid,
            x.priority,
            x.engines,
            x.flags,
            x.pt_root,
            x.kmd_va,
            x.state,
            x.reset,
            x.hangs,
            x.faults,
            x.engine_error,
            x.fault_va,
            if x.hw == s.hw { " failing=1" } else { "" }
        )?;
        for (e, r) in x.rings.iter().enumerate() {
            if !r.present {
                continue;
            }
            writeln!(
                out,
                "ring slot={} engine={} wptr={:#x} completed={} next_seqno={} evt_seqno={} done_upto={} pending={} exported_fences={} stalled_ms={} rptr={:#x} state={} last_fence={} packets={} error={} error_rptr={:#x}",
                x.hw,
                e,
                r.wptr,
                r.completed,
                r.next_seqno,
                r.evt_seqno,
                r.done_upto,
                r.pending,
                r.exported,
                r.stalled_ms,
                r.status.rptr,
                r.status.state,
                r.status.last_fence,
                r.status.packets,
                r.status.error,
                r.status.error_rptr
            )?;
        }
    }
    writeln!(out, "[{}]", section::JOBS)?;
    for j in s.jobs.iter() {
        writeln!(
            out,
            "job slot={} engine={} seqno={} words={} fence=pending",
            j.hw, j.engine, j.seqno, j.words
        )?;
    }
    if s.jobs_cut {
        writeln!(out, "jobs-cut limit={MAX_JOBS}")?;
    }
    writeln!(out, "[{}]", section::VM)?;
    if let Some(vm) = vm {
        writeln!(
            out,
            "vm client={} root={:#x} mappings={}",
            vm.client,
            vm.root,
            vm.maps.len()
        )?;
        for m in vm.maps.iter() {
            writeln!(
                out,
                "map va={:#x} size={:#x} handle={} bo_offset={:#x} perms={} lazy={}",
                m.va,
                m.size,
                m.handle,
                m.bo_offset,
                Word(&perms(m.perms)),
                u8::from(m.lazy)
            )?;
        }
    }
    writeln!(out, "[{}]", section::RESETS)?;
    for r in s.resets.iter() {
        writeln!(
            out,
            "reset slot={} engine={} kind={} ok={} ms={}",
            r.hw as i32,
            r.engine as i32,
            r.kind,
            u8::from(r.ok),
            r.ms
        )?;
    }
    writeln!(out, "[{}]", section::FAULTS)?;
    for f in s.faults.iter() {
        writeln!(
            out,
            "fault slot={} engine={} va={:#x} access={} reason={} served={}",
            f.hw,
            f.engine,
            f.va,
            Access::from_u8(f.access).map_or("?", |a| a.name()),
            FaultReason::from_u8(f.reason).map_or("?", |r| r.name()),
            u8::from(f.served)
        )?;
    }
    writeln!(out, "[{}]", section::DEVICE)?;
    writeln!(
        out,
        "device capture={} size={} status={} capture_ms={} read_ms={}",
        dev.id,
        dev.bytes.len(),
        dev.status,
        dev.capture_ms,
        dev.read_ms
    )?;
    if !dev.bytes.is_empty() {
        writeln!(out, "[{}]", section::CAPTURE)?;
        let mut line = [0u8; 76];
        for chunk in dev.bytes.chunks(BASE64_LINE_BYTES) {
            let n = base64_encode(chunk, &mut line).ok_or(fmt::Error)?;
            // Base64 is ASCII.
            let text =
                core::str::from_utf8(line.get(..n).ok_or(fmt::Error)?).map_err(|_| fmt::Error)?;
            writeln!(out, "{text}")?;
        }
    }
    writeln!(out, "[{}]", section::END)
}
