//! Guest test of the KMD's ioctls: happy paths, a table of bad arguments per
//! ioctl, use after close/destroy, the GPU page tables the KMD builds
//! (checked through debugfs `vms`, which walks the real entries), and
//! submission, fences, faults, hangs and resets on the device.
//!
//!   vgpu-kmd-test            the default sections: gem vm submit export
//!                            hostmap stats fdinfo concurrent leaks
//!   vgpu-kmd-test gem vm     only these sections (in the order below,
//!                            whatever the order of the arguments)
//!
//! Sections that run only when named, because they need module parameters
//! or injected faults (see tests/e2e.sh) or leave the device changed, or
//! because they are part of another (for the labs: one test, one section):
//!   vm-4k, vm-2m             the two halves of `vm`: 4 KiB pages at every
//!                            level, bad arguments, lazy BOs; 2 MiB pages
//!   inflight                 a hang in flight: the guilty context
//!                            (job_timeout_ms=1000 pt_pool_kib=16384)
//!   inflight-innocent        an innocent job in flight cut off by another
//!                            context's reset, written again and completed
//!   inflight-compute         the same with a compute dispatch in flight:
//!                            written again on the compute ring and rung
//!   inflight-uq              the same with a user-mode queue in flight: it
//!                            restarts at the reported read pointer, innocent
//!   watchdog                 a hang nobody waits on
//!   progress                 a ring busy past the job timeout is not hung;
//!                            one that stops is (job_timeout_ms=1000)
//!   reset-compute            a hang on the compute engine: that engine reset
//!   reset-uq                 user-mode queues around an engine reset: an
//!                            innocent one resumed, a hung one errored
//!   reset-device             the engine reset refused (--inject
//!                            reset-fail): a device reset, counted and logged
//!   flr                      PCI function-level reset through sysfs: the job
//!                            in flight runs again, new work runs, counted
//!   events                   injected fence-event faults
//!   wedged                   the bottom of the reset ladder
//!   lost                     the device process dies under a job (an
//!                            injected crash): the device declared lost
//!   limits                   GEM limits (gem_limit_mib=64 file_gem_limit_mib=32),
//!                            dumb buffers on the primary node included
//!   ras                      ECC page retirement (two injected ecc faults,
//!                            ras_max_pages=2)
//!   unbind                   unbinds and rebinds the driver; the sections
//!                            after it do not run
//!   coredump                 a devcoredump of an injected hang, a fault and
//!                            a malformed packet, each printed and cleared
//!                            (--inject hang:engine=copy,packet=COPY,count=2)
//!   coredump-off             the same hang with coredump=0: no dump
//!   remap                    rebind a VA to another BO after the GPU used
//!                            it: every page must read the new BO (the
//!                            unbind invalidated the TLB)
//!   remap-compute            the same through the compute engine's TLB
//!   unmapped                 unbind and close a BO the GPU read: the next
//!                            copy from its range faults (EIO), none of it read
//!   unbind-nomem             the same unbind with its N-th allocation failing
//!                            for every N (fail-nth): a successful unbind
//!                            leaves no stale translation
//!   syncobj                  DRM sync objects: waits, timelines, transfers,
//!                            sync_files, jobs signalling and waiting
//!   syncobj-hang             a job's out-syncobj carries -EIO after an
//!                            injected hang (--inject hang:engine=copy)
//!   queue                    the KMD job queue: another file's fence, 1,000
//!                            jobs on a small ring, a dependency that never
//!                            signals (sw_sync) cancelled at teardown
//!   vmbind                   VM_BIND_OPS on GPUVM: partial unbind, remap,
//!                            split maps, 2 MiB pages cut, ordered unmap
//!   prime                    dma-buf sharing between files and processes,
//!                            implicit sync, a foreign dma-buf refused
//!   vram-ecc                 an uncorrectable error in a VRAM page (--inject
//!                            ecc:engine=copy,packet=COPY,after=2): the job
//!                            fails, the object is quarantined, after a
//!                            rebind the page is out of the VRAM allocator
//!   vram-victims             which objects eviction takes: visible ones
//!                            for a CPU-access object, oldest first
//!   vram-alloc               where the VRAM manager places objects: top
//!                            down without CPU access, the visible part
//!                            with it; vram_mm's and fdinfo's accounting
//!   victims-nomem            eviction with its N-th allocation failing for
//!                            every N (fail-nth): a success took the two
//!                            least recently placed objects
//!   move-nomem               the same with bound objects: each reads its
//!                            words through the GPU after every run
//!   vram-move-refused        a move whose TLB invalidation the device
//!                            refuses (--inject control-busy:packet=
//!                            TLB_INVALIDATE,count=1) is abandoned
//!   vram-restore             an evicted object moves back to VRAM at its
//!                            file's next SUBMIT once there is room, intact
//!   vram-san-moved           an eviction planted without invalidation
//!   pm-pause                 50 pauses past autosuspend_ms, each round's copy checked
//!   hang-soak                VGPU_SOAK_HANGS injected hangs (default 100) on
//!                            VGPU_SOAK_ENGINE (copy, compute), each on a new
//!                            context beside an innocent one (scripts/soak)
//!   suspend                  20 system suspend/resume cycles (VGPU_SUSPEND_CYCLES):
//!                            VRAM contents and a queued copy checked each time; a
//!                            job waiting for the CPU refuses the suspend (EBUSY)
//!                            (move-no-invalidate): the device's sanitizer
//!                            names the moved object and its move
//!   inject                   the driver's fault-injection points
//!                            (debugfs vgpu_fail/): vram_alloc, bo_pages,
//!                            pt_alloc, control_cmd each fail cleanly
//!   sanitizer                bugs planted in the KMD (debugfs
//!                            `sanitizer_plant`) each caught by the
//!                            device's sanitizer (vgpu-device --sanitize)
//!   uq                       user-mode queues: UQ_CREATE's checks, work
//!                            published through the doorbell block, the
//!                            device's sleep and UQ_KICK, WAIT, a fault, a
//!                            doorbell block unbound (DOORBELL_FAULT)
//!   uq-hang                  a hung user-mode queue reset and suspended,
//!                            an innocent one restarted by a device reset
//!                            (job_timeout_ms=1000)
//!
//! Prints `ok NAME` / `FAIL NAME: why` per check and a closing
//! `kmd-test: N passed, M failed`; exits 1 if anything failed.

mod concurrent;
mod coredump;
mod debugfs;
mod dumb;
mod events;
mod export;
#[path = "../vgpu-ioctl-fuzz/failthread.rs"]
mod failthread;
mod fdinfo;
mod flr;
mod gem;
mod hang;
mod hostmap;
mod inject;
mod innocent;
mod leaks;
mod limits;
mod lost;
mod node;
mod nomem;
mod pm;
mod prime;
mod queue;
mod ras;
mod remap;
mod report;
mod reset;
mod restore;
mod san_moved;
mod sanitizer;
mod sleep;
mod soak;
mod stats;
mod submit;
mod syncobj;
mod unbind;
mod uqueue;
mod vm;
mod vmbind;
mod vram;
mod vram_alloc;
mod vram_ecc;

use std::path::Path;

use vgpu_umd::Device;

use report::T;

/// A section: its checks on the device whose render node is at the path.
type Section = fn(&mut T, &Path);

/// Every section in the order it runs: its name, whether it runs when no
/// section is named, the test.
const SECTIONS: &[(&str, bool, Section)] = &[
    ("gem", true, gem::test_gem),
    ("vm", true, vm::test_vm),
    ("vm-4k", false, vm::test_vm_4k),
    ("vm-2m", false, vm::test_vm_2m),
    ("submit", true, submit::test_submit),
    ("inflight", false, hang::test_hang_inflight),
    ("inflight-innocent", false, hang::test_hang_innocent),
    ("inflight-compute", false, innocent::test_innocent_compute),
    ("inflight-uq", false, innocent::test_innocent_uq),
    ("watchdog", false, hang::test_watchdog),
    ("progress", false, hang::test_progress),
    ("reset-compute", false, reset::test_reset_compute),
    ("reset-uq", false, reset::test_reset_uq),
    ("reset-device", false, reset::test_reset_device),
    ("flr", false, flr::test_flr),
    ("events", false, events::test_injected_events),
    ("wedged", false, hang::test_wedged),
    ("lost", false, lost::test_device_lost),
    ("limits", false, limits::test_limits),
    ("ras", false, ras::test_ras),
    ("coredump", false, coredump::test_coredump),
    ("coredump-off", false, coredump::test_coredump_off),
    ("export", true, export::test_fence_export),
    ("hostmap", true, hostmap::test_hostmap),
    ("unbind", false, unbind::test_unbind),
    ("remap", false, remap::test_remap),
    ("remap-compute", false, remap::test_remap_compute),
    ("unbind-refused", false, remap::test_unbind_refused),
    ("unmapped", false, remap::test_unmapped),
    ("unbind-nomem", false, nomem::test_unbind_nomem),
    ("syncobj", false, syncobj::test_syncobj),
    ("syncobj-hang", false, syncobj::test_syncobj_hang),
    ("queue", false, queue::test_queue),
    ("vmbind", false, vmbind::test_vmbind),
    ("prime", false, prime::test_prime),
    ("vram", false, vram::test_vram),
    ("vram-lost", false, vram::test_vram_lost),
    ("vram-ecc", false, vram_ecc::test_vram_ecc),
    ("vram-charge", false, vram::test_vram_charge),
    ("vram-victims", false, vram::test_vram_victims),
    ("vram-alloc", false, vram_alloc::test_vram_alloc),
    ("victims-nomem", false, nomem::test_victims_nomem),
    ("move-nomem", false, nomem::test_move_nomem),
    ("vram-move-refused", false, vram::test_vram_move_refused),
    ("vram-restore", false, restore::test_vram_restore),
    ("vram-san-moved", false, san_moved::test_vram_san_moved),
    ("inject", false, inject::test_inject),
    ("pm-pause", false, pm::test_pm_pause),
    ("suspend", false, sleep::test_suspend),
    ("hang-soak", false, soak::test_hang_soak),
    ("sanitizer", false, sanitizer::test_sanitizer),
    ("uq", false, uqueue::test_uq),
    ("uq-hang", false, uqueue::test_uq_hang),
    ("stats", true, stats::test_stats),
    ("fdinfo", true, fdinfo::test_fdinfo),
    ("concurrent", true, concurrent::test_concurrent),
    ("leaks", true, |t, path| leaks::test_leaks(t, path, 1000)),
];

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dev = match Device::open_first() {
        Ok(d) => d,
        Err(e) => {
            println!("FAIL open: {e}");
            std::process::exit(1);
        }
    };
    let path = dev.path().to_path_buf();
    let mut dev = Some(dev);
    let mut t = T::default();
    for &(name, by_default, test) in SECTIONS {
        let run = args.iter().any(|a| a == name) || (by_default && args.is_empty());
        if !run {
            continue;
        }
        if name == "unbind" {
            // No file of this process may hold the device while the driver
            // unbinds, and nothing runs on it afterwards.
            drop(dev.take());
            test(&mut t, &path);
            t.finish();
        }
        test(&mut t, &path);
    }
    t.finish();
}
