//! The probe against a real `/dev/kvm`: open it, check the API version and
//! capabilities, build a one-vCPU VM with 64 KiB of memory holding the
//! probe guest ([`crate::guest`]), give the vCPU the host's supported
//! CPUID (as `-cpu host` does) and run it under the watchdog.

use std::ffi::CString;
use std::path::Path;
use std::time::{Duration, Instant};

use kvm_bindings::{kvm_userspace_memory_region, KVM_MAX_CPUID_ENTRIES};
use kvm_ioctls::{Kvm, VcpuExit, VcpuFd, VmFd};
use serde::Serialize;
use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryMmap};

use crate::decide::{
    check_api_version, check_capabilities, open_failed, setup_failed, Exit, Kind, Progress, Verdict,
};
use crate::guest::{self, Program};
use crate::watchdog::{run_bounded, RunOutcome, RunVcpu};

/// What to probe, and how.
#[derive(Debug, Clone)]
pub struct Options {
    /// The KVM device.
    pub device: String,
    /// Longest time the probe guest may run.
    pub timeout: Duration,
    /// The guest program.
    pub program: Program,
}

/// The capabilities QEMU requires of KVM on x86 (its
/// `kvm_required_capabilites` and the x86 list), plus the irqchip and the
/// eventfds the vhost-user device's queues need.
pub const NEEDED_CAPS: [(&str, u32); 11] = [
    ("USER_MEMORY", kvm_bindings::KVM_CAP_USER_MEMORY),
    (
        "DESTROY_MEMORY_REGION_WORKS",
        kvm_bindings::KVM_CAP_DESTROY_MEMORY_REGION_WORKS,
    ),
    (
        "JOIN_MEMORY_REGIONS_WORKS",
        kvm_bindings::KVM_CAP_JOIN_MEMORY_REGIONS_WORKS,
    ),
    (
        "INTERNAL_ERROR_DATA",
        kvm_bindings::KVM_CAP_INTERNAL_ERROR_DATA,
    ),
    ("IOEVENTFD", kvm_bindings::KVM_CAP_IOEVENTFD),
    (
        "IOEVENTFD_ANY_LENGTH",
        kvm_bindings::KVM_CAP_IOEVENTFD_ANY_LENGTH,
    ),
    ("SET_TSS_ADDR", kvm_bindings::KVM_CAP_SET_TSS_ADDR),
    ("EXT_CPUID", kvm_bindings::KVM_CAP_EXT_CPUID),
    ("MP_STATE", kvm_bindings::KVM_CAP_MP_STATE),
    ("IRQCHIP", kvm_bindings::KVM_CAP_IRQCHIP),
    ("IRQFD", kvm_bindings::KVM_CAP_IRQFD),
];

/// Where QEMU puts the TSS Intel's real-mode support needs (3 pages below
/// the BIOS).
const TSS_ADDR: usize = 0xfffb_d000;

/// The probe's full answer (`--json`).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Usable or not, and why.
    #[serde(flatten)]
    pub verdict: Verdict,
    /// Wall time of the whole probe, open to answer.
    pub elapsed_ms: f64,
    /// The device probed.
    pub device: String,
    /// `KVM_GET_API_VERSION`, if the device opened.
    pub api_version: Option<i32>,
    /// Needed capabilities KVM lacks.
    pub missing_capabilities: Vec<String>,
    /// The guest's last progress code.
    pub progress: u8,
    /// `KVM_RUN` calls.
    pub exits: u32,
    /// The KVM module loaded (`kvm_intel`, `kvm_amd`, `kvm_pvm`), if known.
    pub module: Option<String>,
}

/// The KVM vendor module loaded, from /sys/module.
pub fn kvm_module(sys_module: &Path) -> Option<String> {
    ["kvm_pvm", "kvm_intel", "kvm_amd"]
        .into_iter()
        .find(|m| sys_module.join(m).exists())
        .map(str::to_owned)
}

/// A "not usable" verdict under a paravirtualised KVM says so: that is why
/// a stock guest kernel fails there.
pub fn annotate(mut v: Verdict, module: Option<&str>) -> Verdict {
    if !v.usable && module == Some("kvm_pvm") {
        v.reason += "; /dev/kvm is kvm_pvm, a paravirtualised KVM";
    }
    v
}

/// The vCPU and everything its guest needs, owned by the vCPU thread.
/// Field order is drop order: the vCPU, then the VM, then its memory.
struct KvmVcpu {
    vcpu: VcpuFd,
    _vm: VmFd,
    _mem: GuestMemoryMmap,
}

impl RunVcpu for KvmVcpu {
    fn run(&mut self) -> Exit {
        let exit = match self.vcpu.run() {
            Ok(VcpuExit::IoOut(port, data)) => Exit::IoOut {
                port,
                data: data.to_vec(),
            },
            Ok(VcpuExit::IoIn(port, _)) => Exit::IoIn { port },
            Ok(VcpuExit::MmioRead(addr, _)) => Exit::Mmio { addr, write: false },
            Ok(VcpuExit::MmioWrite(addr, _)) => Exit::Mmio { addr, write: true },
            Ok(VcpuExit::Hlt) => Exit::Hlt,
            Ok(VcpuExit::Shutdown) => Exit::Shutdown,
            Ok(VcpuExit::FailEntry(reason, _)) => Exit::FailEntry { reason },
            Ok(VcpuExit::Intr) => Exit::Interrupted,
            Ok(VcpuExit::InternalError) => Exit::InternalError {
                suberror: 0,
                data: Vec::new(),
            },
            Ok(other) => Exit::Other(format!("{other:?}")),
            Err(e) if e.errno() == libc::EINTR => Exit::Interrupted,
            Err(e) => Exit::RunError { errno: e.errno() },
        };
        if let Exit::InternalError { .. } = exit {
            let run = self.vcpu.get_kvm_run();
            // SAFETY: the exit reason is KVM_EXIT_INTERNAL_ERROR, so the
            // kernel filled the union's `internal` member; it is plain
            // integers, valid for any bit pattern.
            let internal = unsafe { run.__bindgen_anon_1.internal };
            let n = (internal.ndata as usize).min(internal.data.len());
            return Exit::InternalError {
                suberror: internal.suberror,
                data: internal.data[..n].to_vec(),
            };
        }
        exit
    }
}

fn errno_of(e: &kvm_ioctls::Error) -> i32 {
    e.errno()
}

/// Opens the device and sets up the VM; the vCPU ready to run.
fn setup(opts: &Options, report: &mut Report) -> Result<KvmVcpu, Verdict> {
    let path = CString::new(opts.device.as_str())
        .map_err(|_| Verdict::no(Kind::NoDevice, "the device path has a NUL byte"))?;
    let kvm = Kvm::new_with_path(&path).map_err(|e| open_failed(&opts.device, errno_of(&e)))?;
    let api = kvm.get_api_version();
    report.api_version = Some(api);
    check_api_version(api)?;
    let caps: Vec<(&str, bool)> = NEEDED_CAPS
        .iter()
        .map(|&(name, cap)| (name, kvm.check_extension_raw(cap.into()) > 0))
        .collect();
    report.missing_capabilities = caps
        .iter()
        .filter(|c| !c.1)
        .map(|c| c.0.to_owned())
        .collect();
    check_capabilities(&caps)?;

    let vm = kvm
        .create_vm()
        .map_err(|e| setup_failed("KVM_CREATE_VM", errno_of(&e)))?;
    vm.set_tss_address(TSS_ADDR)
        .map_err(|e| setup_failed("KVM_SET_TSS_ADDR", errno_of(&e)))?;
    let mem = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), guest::MEM_SIZE)])
        .map_err(|e| Verdict::no(Kind::Setup, format!("guest memory: {e}")))?;
    let (gdt, desc) = guest::gdt();
    let code = guest::program(opts.program);
    for (addr, bytes) in [
        (guest::GDT_ADDR, &gdt[..]),
        (guest::GDT_DESC_ADDR, &desc[..]),
        (guest::CODE_ADDR, &code[..]),
    ] {
        mem.write_slice(bytes, GuestAddress(addr))
            .map_err(|e| Verdict::no(Kind::Setup, format!("guest memory: {e}")))?;
    }
    let host = mem
        .get_host_address(GuestAddress(0))
        .map_err(|e| Verdict::no(Kind::Setup, format!("guest memory: {e}")))?;
    let region = kvm_userspace_memory_region {
        slot: 0,
        guest_phys_addr: 0,
        memory_size: guest::MEM_SIZE as u64,
        userspace_addr: host as u64,
        flags: 0,
    };
    // SAFETY:
    // - `host` is the start of `mem`'s single mapping of MEM_SIZE bytes;
    // - `mem` moves into the same `KvmVcpu` as the VM and is dropped after
    //   it, so the mapping outlives every use the VM can make of it.
    unsafe { vm.set_user_memory_region(region) }
        .map_err(|e| setup_failed("KVM_SET_USER_MEMORY_REGION", errno_of(&e)))?;

    let vcpu = vm
        .create_vcpu(0)
        .map_err(|e| setup_failed("KVM_CREATE_VCPU", errno_of(&e)))?;
    let cpuid = kvm
        .get_supported_cpuid(KVM_MAX_CPUID_ENTRIES)
        .map_err(|e| setup_failed("KVM_GET_SUPPORTED_CPUID", errno_of(&e)))?;
    vcpu.set_cpuid2(&cpuid)
        .map_err(|e| setup_failed("KVM_SET_CPUID2", errno_of(&e)))?;
    let mut sregs = vcpu
        .get_sregs()
        .map_err(|e| setup_failed("KVM_GET_SREGS", errno_of(&e)))?;
    sregs.cs.base = 0;
    sregs.cs.selector = 0;
    vcpu.set_sregs(&sregs)
        .map_err(|e| setup_failed("KVM_SET_SREGS", errno_of(&e)))?;
    let mut regs = vcpu
        .get_regs()
        .map_err(|e| setup_failed("KVM_GET_REGS", errno_of(&e)))?;
    regs.rip = guest::CODE_ADDR;
    regs.rflags = 2;
    vcpu.set_regs(&regs)
        .map_err(|e| setup_failed("KVM_SET_REGS", errno_of(&e)))?;
    Ok(KvmVcpu {
        vcpu,
        _vm: vm,
        _mem: mem,
    })
}

/// Runs the whole probe.
pub fn probe(opts: &Options) -> Report {
    let t0 = Instant::now();
    let module = kvm_module(Path::new("/sys/module"));
    let mut report = Report {
        verdict: Verdict::no(Kind::Setup, ""),
        elapsed_ms: 0.0,
        device: opts.device.clone(),
        api_version: None,
        missing_capabilities: Vec::new(),
        progress: 0,
        exits: 0,
        module: module.clone(),
    };
    let outcome = match setup(opts, &mut report) {
        Ok(vcpu) => run_bounded(vcpu, opts.timeout),
        Err(verdict) => RunOutcome {
            verdict,
            progress: Progress::default(),
            exits: 0,
        },
    };
    report.verdict = annotate(outcome.verdict, module.as_deref());
    report.progress = outcome.progress.0;
    report.exits = outcome.exits;
    report.elapsed_ms = t0.elapsed().as_secs_f64() * 1e3;
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_module_is_found_in_sys_module() {
        let d = std::env::temp_dir().join(format!("kvm-probe-sysmod-{}", std::process::id()));
        std::fs::create_dir_all(d.join("kvm")).unwrap();
        assert_eq!(kvm_module(&d), None);
        std::fs::create_dir_all(d.join("kvm_amd")).unwrap();
        assert_eq!(kvm_module(&d).as_deref(), Some("kvm_amd"));
        std::fs::create_dir_all(d.join("kvm_pvm")).unwrap();
        assert_eq!(kvm_module(&d).as_deref(), Some("kvm_pvm"));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn only_a_negative_answer_under_pvm_is_annotated() {
        let no = Verdict::no(Kind::EmulationFailure, "x");
        assert!(annotate(no.clone(), Some("kvm_pvm"))
            .reason
            .ends_with("; /dev/kvm is kvm_pvm, a paravirtualised KVM"));
        assert_eq!(annotate(no.clone(), Some("kvm_intel")), no);
        let mut yes = no.clone();
        yes.usable = true;
        assert_eq!(annotate(yes.clone(), Some("kvm_pvm")), yes);
    }

    #[test]
    fn a_missing_device_is_no_device() {
        let r = probe(&Options {
            device: "/nonexistent/kvm".into(),
            timeout: Duration::from_millis(100),
            program: Program::Xsave,
        });
        assert!(!r.verdict.usable);
        assert_eq!(r.verdict.kind, Kind::NoDevice);
        assert_eq!(r.api_version, None);
    }
}
