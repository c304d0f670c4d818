//! The cases of the fail-nth sweeps over the render node's ioctls: for
//! each call, the set-up it needs (made unarmed: a file, BOs, mappings,
//! contexts, jobs) and the call itself, made armed; the teardown.

use std::cell::Cell;
use std::os::fd::RawFd;
use std::rc::Rc;

use vgpu_umd::uapi;

use crate::guard::Arena;
use crate::sys::{self, Ret};
use crate::worker::DevInfo;

/// What one call's set-up made: the file and what to close after.
pub(super) struct Env {
    fd: RawFd,
    fds: Vec<RawFd>,
    maps: Vec<(usize, usize)>,
    pub(super) arena: Arena,
    dev: DevInfo,
    /// The call closes `fd` itself (the close sweep).
    fd_taken: bool,
    /// An fd the call made (open, FENCE_EXPORT): closed at teardown.
    out_fd: Rc<Cell<RawFd>>,
}

impl Env {
    pub(super) fn new(dev: &DevInfo) -> Result<Env, String> {
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

    pub(super) fn teardown(mut self) {
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
pub(super) type Call = Box<dyn FnMut(&mut Arena) -> Ret>;

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
pub(super) fn prepare(op: &str, env: &mut Env) -> Result<Call, String> {
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
