//! Allocation-failure sweeps: `/proc/thread-self/fail-nth` over every N.
//!
//! For each call (an ioctl after its set-up, opening or closing the node,
//! binding or unbinding the driver through sysfs) and N = 1, 2, …: a fresh
//! set-up, N written to this thread's `fail-nth` (the N-th fault-injection
//! point the thread passes then fails: a slab allocation (failslab), a page
//! allocation (fail_page_alloc) or a user copy (fail_usercopy)), the call,
//! the counter read back, everything closed. The call may fail (with the
//! errno of what failed) or cope; afterwards every object count of debugfs
//! `objects` must be back to its value before the sweep and dmesg must have
//! no splat. The sweep of a call ends at the first N the call does not
//! reach: that run had no injected failure and must succeed. After each
//! call's sweep kmemleak scans (objects older than 5 s) and must report
//! nothing. Needs the debug kernel (images/build --debug).

use std::cell::Cell;
use std::fs;
use std::os::fd::RawFd;
use std::rc::Rc;
use std::time::{Duration, Instant};

use vgpu_umd::uapi;

use crate::failprobe;
use crate::guard::Arena;
use crate::sys::{self, rname, Ret};
use crate::worker::DevInfo;

#[derive(clap::Args)]
pub struct Args {
    /// Calls to sweep (default: all): open, close, get_param, ping,
    /// gem_create, gem_create_2m, gem_close, mmap_offset, vm_bind,
    /// vm_bind_2m, vm_bind_lazy, vm_unbind, ctx_create, ctx_destroy,
    /// ctx_destroy_busy, ctx_query, submit, wait, fence_export,
    /// query_stats.
    #[arg(long, value_delimiter = ',')]
    ops: Vec<String>,
    /// Also sweep the driver's probe (sysfs bind) and remove (unbind).
    #[arg(long)]
    probe: bool,
    /// Only probe and remove (and --module), no ioctl.
    #[arg(long)]
    probe_only: bool,
    /// Also sweep module load: vgpu is unloaded and this file loaded again
    /// with `finit_module` from the armed thread (its init and the probe it
    /// runs), e.g. /lib/modules/vgpu.ko.
    #[arg(long, value_name = "KO")]
    module: Option<String>,
    /// Parameters of the module loads (--module).
    #[arg(long, default_value = "")]
    module_params: String,
    /// Safety stop: the largest N tried for one call.
    #[arg(long, default_value_t = 20000)]
    pub max_n: u32,
    /// No kmemleak scans.
    #[arg(long)]
    pub no_kmemleak: bool,
    /// Print every case (N, the answer).
    #[arg(long)]
    pub each: bool,
}

const IOCTL_OPS: &[&str] = &[
    "open",
    "close",
    "get_param",
    "ping",
    "gem_create",
    "gem_create_2m",
    "gem_close",
    "mmap_offset",
    "vm_bind",
    "vm_bind_2m",
    "vm_bind_lazy",
    "vm_unbind",
    "ctx_create",
    "ctx_destroy",
    "ctx_destroy_busy",
    "ctx_query",
    "submit",
    "wait",
    "fence_export",
    "query_stats",
    "host_map",
    "host_unmap",
];

/// dmesg lines that are splats (a fault injected makes the kernel print
/// allocation warnings with stack traces: those are not splats).
const SPLATS: &[&str] = &[
    "WARNING:",
    "BUG:",
    "Oops",
    "UBSAN:",
    "refcount_t:",
    "general protection",
    "kernel BUG",
    "ODEBUG:",
    "DMA-API:",
    "INFO: task",
    "possible circular locking",
    "Kernel panic",
    "rcu: INFO",
    "list_add corruption",
    "list_del corruption",
];

/// New kernel messages since the last read (`/dev/kmsg`, non-blocking).
pub struct Kmsg(RawFd);

impl Kmsg {
    pub fn open() -> Option<Kmsg> {
        // SAFETY: a NUL-terminated path.
        let fd = unsafe {
            libc::open(
                c"/dev/kmsg".as_ptr(),
                libc::O_RDONLY | libc::O_NONBLOCK | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return None;
        }
        // SAFETY: our own fd; skips the messages already there.
        unsafe { libc::lseek(fd, 0, libc::SEEK_END) };
        Some(Kmsg(fd))
    }

    /// The messages logged since the last call.
    pub fn new_lines(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        let mut buf = vec![0u8; 8192];
        loop {
            // SAFETY: reads one record into a buffer we own.
            let n = unsafe { libc::read(self.0, buf.as_mut_ptr().cast(), buf.len()) };
            if n < 0 {
                let e = std::io::Error::last_os_error().raw_os_error();
                if e == Some(libc::EPIPE) {
                    continue; // records overwritten: read on
                }
                break;
            }
            if n == 0 {
                break;
            }
            let rec = String::from_utf8_lossy(&buf[..n as usize]);
            let msg = rec.split_once(';').map_or(&*rec, |(_, m)| m);
            out.push(msg.trim_end().to_string());
        }
        out
    }
}

impl Drop for Kmsg {
    fn drop(&mut self) {
        sys::close(self.0);
    }
}

/// The splats among `lines`.
pub fn splats(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .filter(|l| SPLATS.iter().any(|s| l.contains(s)))
        .cloned()
        .collect()
}

/// Every `name count` line of debugfs `objects` of the first device.
pub fn objects() -> Vec<(String, i64)> {
    let Ok(dir) = fs::read_dir("/sys/kernel/debug/vgpu") else {
        return Vec::new();
    };
    for e in dir.flatten() {
        if let Ok(s) = fs::read_to_string(e.path().join("objects")) {
            return s
                .lines()
                .filter_map(|l| {
                    let (k, v) = l.split_once(' ')?;
                    Some((k.to_string(), v.trim().parse().ok()?))
                })
                .collect();
        }
    }
    Vec::new()
}

/// The counts that must return to the baseline (live objects; totals and
/// high-water marks only grow).
fn live(objs: &[(String, i64)]) -> Vec<(String, i64)> {
    objs.iter()
        .filter(|(k, _)| !k.ends_with("_total") && !k.ends_with("_max") && !k.starts_with("ever"))
        .cloned()
        .collect()
}

/// Writes `text` to a sysfs/debugfs/proc file; the errno if refused.
pub fn write_file(path: &str, text: &str) -> Result<(), i32> {
    fs::write(path, text).map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))
}

/// This thread's fail-nth counter.
pub struct FailNth(RawFd);

impl FailNth {
    fn open() -> Result<FailNth, String> {
        // SAFETY: a NUL-terminated path.
        let fd = unsafe {
            libc::open(
                c"/proc/thread-self/fail-nth".as_ptr(),
                libc::O_RDWR | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(
                "no /proc/thread-self/fail-nth: the kernel lacks CONFIG_FAULT_INJECTION".into(),
            );
        }
        Ok(FailNth(fd))
    }

    /// The N-th injection point this thread passes from now on fails.
    /// (Formatted on the stack: nothing of ours allocates while armed.)
    pub fn arm(&self, n: u32) {
        let mut buf = [0u8; 12];
        let mut i = buf.len();
        let mut v = n;
        loop {
            i -= 1;
            buf[i] = b'0' + (v % 10) as u8;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        let s = &buf[i..];
        // SAFETY: writes from a live buffer to our own fd.
        let w = unsafe { libc::pwrite(self.0, s.as_ptr().cast(), s.len(), 0) };
        assert_eq!(w, s.len() as isize, "fail-nth write");
    }

    /// Disarms; whether a failure was injected (the counter reached 0).
    /// Reading the counter is itself a user copy: a counter of 1 makes
    /// that copy fail (EFAULT), which means nothing was injected before.
    pub fn disarm(&self) -> bool {
        let mut buf = [0u8; 16];
        // SAFETY: reads into a local buffer from our own fd.
        let n = unsafe { libc::pread(self.0, buf.as_mut_ptr().cast(), buf.len(), 0) };
        let left: u32 = if n < 0 {
            1
        } else {
            std::str::from_utf8(&buf[..n as usize])
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(1)
        };
        for _ in 0..4 {
            // SAFETY: writes "0" from a static buffer to our own fd.
            let w = unsafe { libc::pwrite(self.0, b"0".as_ptr().cast(), 1, 0) };
            if w == 1 {
                break;
            }
        }
        left == 0
    }
}

/// What one call's set-up made: the file and what to close after.
struct Env {
    fd: RawFd,
    fds: Vec<RawFd>,
    maps: Vec<(usize, usize)>,
    arena: Arena,
    dev: DevInfo,
    /// The call closes `fd` itself (the close sweep).
    fd_taken: bool,
    /// An fd the call made (open, FENCE_EXPORT): closed at teardown.
    out_fd: Rc<Cell<RawFd>>,
}

impl Env {
    fn new(dev: &DevInfo) -> Result<Env, String> {
        let fd = sys::open_node(&dev.node).map_err(|e| format!("open: {}", sys::ename(e)))?;
        Ok(Env {
            fd,
            fds: Vec::new(),
            maps: Vec::new(),
            arena: Arena::new(8),
            dev: dev.clone(),
            fd_taken: false,
            out_fd: Rc::new(Cell::new(-1)),
        })
    }

    fn io<A: vgpu_umd::kmd::IoctlArg + Copy>(
        &mut self,
        what: &str,
        a: &mut A,
    ) -> Result<(), String> {
        sys::ioctl(self.fd, a, &mut self.arena)
            .map_err(|e| format!("set-up {what}: {}", sys::ename(e)))
    }

    fn bo(&mut self, size: u64, flags: u32) -> Result<u32, String> {
        let mut a = uapi::DrmVgpuGemCreate {
            size,
            flags,
            handle: 0,
        };
        self.io("gem_create", &mut a)?;
        Ok(a.handle)
    }

    fn bind(&mut self, handle: u32, va: u64, size: u64, flags: u32) -> Result<(), String> {
        let mut a = uapi::DrmVgpuVmBind {
            handle,
            flags,
            bo_offset: 0,
            va,
            size,
        };
        self.io("vm_bind", &mut a)
    }

    fn ctx(&mut self) -> Result<u32, String> {
        let mut a = uapi::DrmVgpuCtxCreate {
            priority: uapi::CTX_PRIORITY_NORMAL,
            engine_mask: self.dev.engine_mask & 1 | (self.dev.engine_mask & 2),
            flags: 0,
            ctx_id: 0,
        };
        self.io("ctx_create", &mut a)?;
        Ok(a.ctx_id)
    }

    /// A command BO at VA_START with `words` at its start, a data BO
    /// 2 MiB above; returns the command buffer.
    fn program(&mut self, words: &[u32]) -> Result<uapi::DrmVgpuCmd, String> {
        let (cva, dva) = (self.dev.va_start, self.dev.va_start + (2 << 20));
        let c = self.bo(4096, 0)?;
        self.bind(c, cva, 4096, uapi::VM_BIND_READ | uapi::VM_BIND_EXEC)?;
        let d = self.bo(4096, 0)?;
        self.bind(d, dva, 4096, uapi::VM_BIND_READ | uapi::VM_BIND_WRITE)?;
        let mut off = uapi::DrmVgpuGemMmapOffset {
            handle: c,
            ..Default::default()
        };
        self.io("mmap_offset", &mut off)?;
        // SAFETY: a new shared mapping of the command BO, unmapped at
        // teardown; nothing else refers to it.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                self.fd,
                off.offset as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            return Err("set-up mmap failed".into());
        }
        self.maps.push((p as usize, 4096));
        for (i, w) in words.iter().enumerate() {
            // SAFETY: inside the 4 KiB mapping (programs are short).
            unsafe { p.cast::<u32>().add(i).write_volatile(*w) };
        }
        Ok(uapi::DrmVgpuCmd {
            va: cva,
            size: 4 * words.len() as u64,
        })
    }

    /// `len` bytes of anonymous memory, faulted in (so that the armed call
    /// takes no page fault of ours), unmapped at teardown.
    fn anon(&mut self, len: usize) -> Result<u64, String> {
        let p = sys::anon(len, true).ok_or("set-up anonymous mmap failed")?;
        self.maps.push((p, len));
        Ok(p as u64)
    }

    /// A FILL of the data BO, as words.
    fn fill_words(&self) -> Vec<u32> {
        use vgpu_hwif::packet::Packet;
        let mut w = vec![0u32; 64];
        let mut wr =
            vgpu_umd::cmdbuf::Writer::new(self.dev.generation, self.dev.va_start, &mut w, 0);
        wr.push(&Packet::Fill {
            dst: self.dev.va_start + (2 << 20),
            size: 256,
            pattern: 0x5a5a_5a5a,
        })
        .expect("room");
        let n = wr.finish();
        w.truncate(n);
        w
    }

    fn submit(&mut self, ctx: u32, cmd: uapi::DrmVgpuCmd) -> Result<u64, String> {
        let cmds = self.arena.put(as_bytes(&cmd)) as u64;
        let mut a = uapi::DrmVgpuSubmit {
            ctx_id: ctx,
            cmds,
            num_cmds: 1,
            ..Default::default()
        };
        self.io("submit", &mut a)?;
        Ok(a.seqno)
    }

    fn wait(&mut self, ctx: u32, seqno: u64) -> Result<(), String> {
        let f = uapi::DrmVgpuFence {
            ctx_id: ctx,
            engine: 0,
            seqno,
        };
        let fences = self.arena.put(as_bytes(&f)) as u64;
        let mut a = uapi::DrmVgpuWait {
            fences,
            num_fences: 1,
            flags: uapi::WAIT_ALL,
            timeout_ns: 5_000_000_000,
            ..Default::default()
        };
        self.io("wait", &mut a)
    }

    fn teardown(mut self) {
        for (p, len) in self.maps.drain(..) {
            // SAFETY: mappings this set-up made.
            unsafe { libc::munmap(p as *mut libc::c_void, len) };
        }
        for fd in self.fds.drain(..) {
            sys::close(fd);
        }
        if self.out_fd.get() >= 0 {
            sys::close(self.out_fd.get());
        }
        if !self.fd_taken {
            sys::close(self.fd);
        }
    }
}

fn as_bytes<T: Copy>(v: &T) -> &[u8] {
    // SAFETY: uAPI structs of integers: every byte is initialised.
    unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), size_of::<T>()) }
}

/// The armed call of one sweep case.
type Call = Box<dyn FnMut(&mut Arena) -> Ret>;

/// The armed call of `$a`'s ioctl on `$fd` (`$a` moved into it).
macro_rules! ioctl {
    ($fd:expr, $a:expr) => {{
        let fd = $fd;
        let a = $a;
        Box::new(move |ar: &mut Arena| {
            let mut a = a;
            sys::ioctl(fd, &mut a, ar)
        })
    }};
}

/// Sets up for `op` (unarmed) and returns the call to make armed.
fn prepare(op: &str, env: &mut Env) -> Result<Call, String> {
    if let Some(c) = prepare_file(op, env)? {
        return Ok(c);
    }
    if let Some(c) = prepare_memory(op, env)? {
        return Ok(c);
    }
    match prepare_jobs(op, env)? {
        Some(c) => Ok(c),
        None => Err(format!("no fail-nth case '{op}'")),
    }
}

/// The cases of the render node's file: open and close.
fn prepare_file(op: &str, env: &mut Env) -> Result<Option<Call>, String> {
    let fd = env.fd;
    let va = env.dev.va_start + (16 << 20);
    Ok(Some(match op {
        "open" => {
            // Everything the call needs is made before it is armed: no
            // allocation (and so no page fault of ours) while armed.
            use std::os::unix::ffi::OsStrExt;
            let mut path = env.dev.node.as_os_str().as_bytes().to_vec();
            path.push(0);
            let out = env.out_fd.clone();
            Box::new(move |_| {
                // SAFETY: a NUL-terminated path.
                let fd =
                    unsafe { libc::open(path.as_ptr().cast(), libc::O_RDWR | libc::O_CLOEXEC) };
                if fd < 0 {
                    return Err(std::io::Error::last_os_error()
                        .raw_os_error()
                        .unwrap_or(libc::EIO));
                }
                out.set(fd);
                Ok(())
            })
        }
        "close" => {
            let h = env.bo(64 * 1024, 0)?;
            env.bind(h, va, 64 * 1024, uapi::VM_BIND_READ | uapi::VM_BIND_WRITE)?;
            let ctx = env.ctx()?;
            let words = env.fill_words();
            let cmd = env.program(&words)?;
            env.submit(ctx, cmd)?;
            env.fd_taken = true;
            Box::new(move |_| {
                sys::close(fd);
                Ok(())
            })
        }
        _ => return Ok(None),
    }))
}

/// The cases of parameters, BOs, address spaces and host mappings.
fn prepare_memory(op: &str, env: &mut Env) -> Result<Option<Call>, String> {
    let fd = env.fd;
    let va = env.dev.va_start + (16 << 20);
    Ok(Some(match op {
        "get_param" => ioctl!(
            fd,
            uapi::DrmVgpuGetParam {
                param: uapi::param::GENERATION,
                ..Default::default()
            }
        ),
        "ping" => ioctl!(
            fd,
            uapi::DrmVgpuPing {
                cookie: 7,
                ..Default::default()
            }
        ),
        "gem_create" => ioctl!(
            fd,
            uapi::DrmVgpuGemCreate {
                size: 64 * 1024,
                ..Default::default()
            }
        ),
        "gem_create_2m" => ioctl!(
            fd,
            uapi::DrmVgpuGemCreate {
                size: 4 << 20,
                ..Default::default()
            }
        ),
        "gem_close" => {
            let h = env.bo(64 * 1024, 0)?;
            env.bind(h, va, 64 * 1024, uapi::VM_BIND_READ)?;
            ioctl!(fd, uapi::DrmGemClose { handle: h, pad: 0 })
        }
        "mmap_offset" => {
            let h = env.bo(64 * 1024, 0)?;
            ioctl!(
                fd,
                uapi::DrmVgpuGemMmapOffset {
                    handle: h,
                    ..Default::default()
                }
            )
        }
        "vm_bind" | "vm_bind_2m" | "vm_bind_lazy" => {
            let (size, flags) = match op {
                "vm_bind" => (64 * 1024, 0),
                "vm_bind_2m" => (4 << 20, 0),
                _ => (64 * 1024, uapi::GEM_CREATE_LAZY),
            };
            let h = env.bo(size, flags)?;
            ioctl!(
                fd,
                uapi::DrmVgpuVmBind {
                    handle: h,
                    flags: uapi::VM_BIND_READ | uapi::VM_BIND_WRITE,
                    bo_offset: 0,
                    va,
                    size,
                }
            )
        }
        "vm_unbind" => {
            let h = env.bo(64 * 1024, 0)?;
            env.bind(h, va, 64 * 1024, uapi::VM_BIND_READ | uapi::VM_BIND_WRITE)?;
            // A context, so that the unbind invalidates its TLBs.
            env.ctx()?;
            ioctl!(
                fd,
                uapi::DrmVgpuVmUnbind {
                    va,
                    size: 64 * 1024
                }
            )
        }
        "host_map" => {
            let addr = env.anon(64 * 1024)?;
            ioctl!(
                fd,
                uapi::DrmVgpuHostMap {
                    addr,
                    size: 64 * 1024,
                    ..Default::default()
                }
            )
        }
        "host_unmap" => {
            let addr = env.anon(64 * 1024)?;
            let mut a = uapi::DrmVgpuHostMap {
                addr,
                size: 64 * 1024,
                ..Default::default()
            };
            env.io("host_map", &mut a)?;
            // A context, so that the unmap invalidates its TLBs.
            env.ctx()?;
            ioctl!(fd, uapi::DrmVgpuHostUnmap { gpu_va: a.gpu_va })
        }
        _ => return Ok(None),
    }))
}

/// The cases of contexts, submissions, waits, fences and statistics.
fn prepare_jobs(op: &str, env: &mut Env) -> Result<Option<Call>, String> {
    let fd = env.fd;
    Ok(Some(match op {
        "ctx_create" => ioctl!(
            fd,
            uapi::DrmVgpuCtxCreate {
                priority: uapi::CTX_PRIORITY_NORMAL,
                engine_mask: env.dev.engine_mask,
                ..Default::default()
            }
        ),
        "ctx_destroy" => {
            let ctx = env.ctx()?;
            ioctl!(
                fd,
                uapi::DrmVgpuCtxDestroy {
                    ctx_id: ctx,
                    pad: 0
                }
            )
        }
        "ctx_destroy_busy" => {
            // A job that waits forever (SEM_WAIT on a word never written):
            // destroying cancels it and forces the device.
            use vgpu_hwif::packet::{Packet, SEM_WAIT_EQ};
            let ctx = env.ctx()?;
            let mut w = vec![0u32; 64];
            let mut wr =
                vgpu_umd::cmdbuf::Writer::new(env.dev.generation, env.dev.va_start, &mut w, 0);
            wr.push(&Packet::SemWait {
                va: env.dev.va_start + (2 << 20),
                value: 0xdead_beef,
                op: SEM_WAIT_EQ,
            })
            .expect("room");
            let n = wr.finish();
            w.truncate(n);
            let cmd = env.program(&w)?;
            env.submit(ctx, cmd)?;
            ioctl!(
                fd,
                uapi::DrmVgpuCtxDestroy {
                    ctx_id: ctx,
                    pad: 0
                }
            )
        }
        "ctx_query" => {
            let ctx = env.ctx()?;
            ioctl!(
                fd,
                uapi::DrmVgpuCtxQuery {
                    ctx_id: ctx,
                    ..Default::default()
                }
            )
        }
        "submit" => {
            let ctx = env.ctx()?;
            let words = env.fill_words();
            let cmd = env.program(&words)?;
            let s = env.submit(ctx, cmd)?;
            let cmds = env.arena.put(as_bytes(&cmd)) as u64;
            let f = uapi::DrmVgpuFence {
                ctx_id: ctx,
                engine: 0,
                seqno: s,
            };
            let in_fences = env.arena.put(as_bytes(&f)) as u64;
            ioctl!(
                fd,
                uapi::DrmVgpuSubmit {
                    ctx_id: ctx,
                    cmds,
                    num_cmds: 1,
                    in_fences,
                    num_in_fences: 1,
                    ..Default::default()
                }
            )
        }
        "wait" | "fence_export" => {
            let ctx = env.ctx()?;
            let words = env.fill_words();
            let cmd = env.program(&words)?;
            let s = env.submit(ctx, cmd)?;
            let f = uapi::DrmVgpuFence {
                ctx_id: ctx,
                engine: 0,
                seqno: s,
            };
            if op == "wait" {
                let fences = env.arena.put(as_bytes(&f)) as u64;
                ioctl!(
                    fd,
                    uapi::DrmVgpuWait {
                        fences,
                        num_fences: 1,
                        flags: uapi::WAIT_ALL,
                        timeout_ns: 5_000_000_000,
                        ..Default::default()
                    }
                )
            } else {
                env.wait(ctx, s)?;
                let out = env.out_fd.clone();
                Box::new(move |ar: &mut Arena| {
                    let mut a = uapi::DrmVgpuFenceExport {
                        fence: f,
                        flags: 0,
                        fd: -1,
                    };
                    let r = sys::ioctl(fd, &mut a, ar);
                    if r.is_ok() {
                        out.set(a.fd);
                    }
                    r
                })
            }
        }
        "query_stats" => {
            env.ctx()?;
            let contexts = env.arena.at_end(64 * size_of::<uapi::DrmVgpuCtxStats>()) as u64;
            ioctl!(
                fd,
                uapi::DrmVgpuQueryStats {
                    num_contexts: 64,
                    contexts,
                    ..Default::default()
                }
            )
        }
        _ => return Ok(None),
    }))
}

/// What the sweeps found.
#[derive(Default)]
pub struct Totals {
    pub cases: u64,
    pub splats: u64,
    pub leaks: u64,
    pub kmemleaks: u64,
    pub failures: u64,
}

/// Makes every allocation count for fail-nth: failslab and fail_page_alloc
/// skip sleeping allocations (and fail_page_alloc order-0 and highmem ones,
/// shmem's pages) unless told otherwise; no report per injected failure.
fn configure() -> Result<(), String> {
    let knobs: &[(&str, &[(&str, &str)])] = &[
        ("failslab", &[("ignore-gfp-wait", "N"), ("verbose", "0")]),
        (
            "fail_page_alloc",
            &[
                ("ignore-gfp-wait", "N"),
                ("ignore-gfp-highmem", "N"),
                ("min-order", "0"),
                ("verbose", "0"),
            ],
        ),
        ("fail_usercopy", &[("verbose", "0")]),
    ];
    for (dir, settings) in knobs {
        for (k, v) in settings.iter() {
            let path = format!("/sys/kernel/debug/{dir}/{k}");
            write_file(&path, v).map_err(|e| {
                format!(
                    "{path}: {} (a debug kernel with FAULT_INJECTION_DEBUG_FS?)",
                    sys::ename(e)
                )
            })?;
        }
    }
    Ok(())
}

/// kmemleak: scan (objects must be older than 5 s to be reported: wait
/// first), read the report, clear it. `None` without kmemleak.
fn kmemleak_scan(wait: bool) -> Option<Vec<String>> {
    const K: &str = "/sys/kernel/debug/kmemleak";
    if !std::path::Path::new(K).exists() {
        return None;
    }
    if wait {
        std::thread::sleep(Duration::from_secs(6));
    }
    write_file(K, "scan").ok()?;
    let report = fs::read_to_string(K).unwrap_or_default();
    let _ = write_file(K, "clear");
    Some(report.lines().map(str::to_string).collect())
}

/// kmemleak after the sweep of `what` (unless --no-kmemleak): what it
/// reports is printed and counted; the summary's words.
pub fn kmemleak_after(what: &str, args: &Args, t: &mut Totals) -> String {
    let Some(report) = (if args.no_kmemleak {
        None
    } else {
        kmemleak_scan(true)
    }) else {
        return "no kmemleak".into();
    };
    let n = report
        .iter()
        .filter(|l| l.contains("unreferenced object"))
        .count();
    if n > 0 {
        println!("FAIL fail-nth {what}: kmemleak reports {n} objects:");
        for l in report.iter().take(80) {
            println!("  | {l}");
        }
    }
    t.kmemleaks += n as u64;
    format!("kmemleak {n}")
}

/// Object counts back to `base` (waiting up to 3 s for deferred frees);
/// the differences if not.
fn settle(base: &[(String, i64)]) -> Option<String> {
    let start = Instant::now();
    loop {
        let now = live(&objects());
        if now == base {
            return None;
        }
        if start.elapsed() > Duration::from_secs(3) {
            let diff: Vec<String> = base
                .iter()
                .zip(&now)
                .filter(|(a, b)| a != b)
                .map(|((k, a), (_, b))| format!("{k} {a} -> {b}"))
                .collect();
            return Some(if diff.is_empty() {
                format!("{base:?} -> {now:?}")
            } else {
                diff.join(", ")
            });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn tally_line(answers: &std::collections::BTreeMap<String, u64>) -> String {
    answers
        .iter()
        .map(|(k, v)| format!("{k}:{v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn sweep_op(op: &str, dev: &DevInfo, args: &Args, fnth: &FailNth, kmsg: &mut Kmsg, t: &mut Totals) {
    let base = live(&objects());
    let start = Instant::now();
    let mut answers = std::collections::BTreeMap::new();
    let (mut cases, mut splat_n, mut leak_n) = (0u64, 0u64, 0u64);
    let mut end = None;
    for n in 1..=args.max_n {
        let mut env = match Env::new(dev) {
            Ok(e) => e,
            Err(e) => {
                println!("FAIL fail-nth {op} N={n}: the driver no longer serves: {e}");
                t.failures += 1;
                return;
            }
        };
        let mut call = match prepare(op, &mut env) {
            Ok(c) => c,
            Err(e) => {
                println!("FAIL fail-nth {op} N={n}: the driver no longer serves: {e}");
                env.teardown();
                t.failures += 1;
                return;
            }
        };
        fnth.arm(n);
        let r = call(&mut env.arena);
        let injected = fnth.disarm();
        drop(call);
        env.teardown();
        cases += 1;
        *answers.entry(rname(r)).or_insert(0u64) += 1;
        let lines = kmsg.new_lines();
        let sp = splats(&lines);
        if !sp.is_empty() {
            splat_n += 1;
            println!("FAIL fail-nth {op} N={n} ({}): splat in dmesg:", rname(r));
            for l in lines.iter().take(60) {
                println!("  | {l}");
            }
        }
        if let Some(diff) = settle(&base) {
            leak_n += 1;
            println!(
                "FAIL fail-nth {op} N={n} ({}): objects not back: {diff}",
                rname(r)
            );
        }
        if args.each {
            println!(
                "case {op} N={n}: {}{}",
                rname(r),
                if injected { "" } else { " (nothing injected)" }
            );
        }
        if !injected {
            if r.is_err() {
                println!(
                    "FAIL fail-nth {op}: without an injected failure the call failed: {}",
                    rname(r)
                );
                t.failures += 1;
            }
            end = Some(n);
            break;
        }
    }
    if end.is_none() {
        println!(
            "FAIL fail-nth {op}: still injecting at N={} (--max-n)",
            args.max_n
        );
        t.failures += 1;
    }
    let km = kmemleak_after(op, args, t);
    println!(
        "fail-nth {op}: {cases} cases (N=1..{}), {:.1} s; answers {}; {splat_n} splats, {leak_n} object leaks, {km}",
        end.unwrap_or(args.max_n),
        start.elapsed().as_secs_f64(),
        tally_line(&answers),
    );
    t.cases += cases;
    t.splats += splat_n;
    t.leaks += leak_n;
}

/// Runs the sweeps; the exit status.
pub fn run(dev: &DevInfo, args: &Args) -> i32 {
    for op in &args.ops {
        if !IOCTL_OPS.contains(&op.as_str()) {
            eprintln!("vgpu-ioctl-fuzz fail-nth: no case '{op}' (see --help)");
            return 2;
        }
    }
    if let Err(e) = configure() {
        eprintln!("vgpu-ioctl-fuzz fail-nth: {e}");
        return 2;
    }
    let fnth = match FailNth::open() {
        Ok(f) => f,
        Err(e) => {
            eprintln!("vgpu-ioctl-fuzz fail-nth: {e}");
            return 2;
        }
    };
    let Some(mut kmsg) = Kmsg::open() else {
        eprintln!("vgpu-ioctl-fuzz fail-nth: cannot read /dev/kmsg");
        return 2;
    };
    // What kmemleak found before the sweeps is not theirs.
    if !args.no_kmemleak {
        kmemleak_scan(false);
    }
    let start = Instant::now();
    let mut t = Totals::default();
    let ops: Vec<&str> = if args.probe_only {
        Vec::new()
    } else if args.ops.is_empty() {
        IOCTL_OPS.to_vec()
    } else {
        args.ops.iter().map(String::as_str).collect()
    };
    for op in ops {
        sweep_op(op, dev, args, &fnth, &mut kmsg, &mut t);
    }
    if args.probe || args.probe_only {
        failprobe::sweep_probe(dev, args, &fnth, &mut kmsg, &mut t);
    }
    if let Some(ko) = &args.module {
        failprobe::sweep_module(dev, ko, &args.module_params, args, &fnth, &mut kmsg, &mut t);
    }
    println!(
        "fail-nth: {} cases in {:.0} s, {} splats, {} object leaks, {} kmemleak reports, {} other failures",
        t.cases,
        start.elapsed().as_secs_f64(),
        t.splats,
        t.leaks,
        t.kmemleaks,
        t.failures
    );
    i32::from(t.splats + t.leaks + t.kmemleaks + t.failures > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn allocation_failures_are_not_splats_but_checker_reports_are() {
        // What an injected failure makes the kernel print.
        let injected = lines(&[
            "vgpu-ioctl-fuzz: vmalloc error: size 8192, page order 0, failed to allocate pages, mode:0xdc0(GFP_KERNEL|__GFP_ZERO)",
            "CPU: 1 UID: 0 PID: 97 Comm: vgpu-ioctl-fuzz Not tainted 7.2.13 #1",
            "Call Trace:",
            " <TASK>",
            " dump_stack_lvl+0x5d/0x80",
            " warn_alloc+0x164/0x190",
        ]);
        assert!(splats(&injected).is_empty());
        for report in [
            "BUG: KASAN: slab-use-after-free in _RNvNtCs1_4vgpu8selftest14use_after_free+0x5c/0x90",
            "WARNING: CPU: 0 PID: 1 at drivers/gpu/drm/drm_gem.c:1000 drm_gem_object_release+0x2b/0x40",
            "UBSAN: shift-out-of-bounds in lib/test_ubsan.c:65:11",
            "ODEBUG: free active (active state 0) object: 00000000a1b2c3d4 object type: hrtimer hint: 0x0",
            "WARNING: possible circular locking dependency detected",
            "refcount_t: underflow; use-after-free.",
        ] {
            let mut l = injected.clone();
            l.push(report.to_string());
            assert_eq!(splats(&l), vec![report.to_string()], "{report}");
        }
    }

    #[test]
    fn only_live_counts_must_come_back() {
        let objs = vec![
            ("contexts".to_string(), 2),
            ("bos_total".to_string(), 40),
            ("bos_max".to_string(), 9),
            ("bos".to_string(), 3),
        ];
        assert_eq!(
            live(&objs),
            vec![("contexts".to_string(), 2), ("bos".to_string(), 3)]
        );
    }
}
