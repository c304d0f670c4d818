//! One fuzzing thread (or forked child): its generator, its guarded arena,
//! the render-node files it may use and what it knows of them, and the one
//! place every call goes through ([`Worker::call`]: log, judge, count).

use std::os::fd::RawFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::expect::{Expect, Tally};
use crate::guard::Arena;
use crate::oplog;
use crate::rng::Rng;
use crate::sys::{self, rname, Ret};

/// What the device said at the start (GET_PARAM).
#[derive(Clone, Debug)]
pub struct DevInfo {
    pub node: PathBuf,
    pub generation: u32,
    pub engine_mask: u32,
    pub va_start: u64,
    pub va_end: u64,
}

/// A BO the fuzzer created and has not closed.
#[derive(Clone, Copy, Debug)]
pub struct Bo {
    pub handle: u32,
    pub size: u64,
}

/// A mapping the fuzzer made and has not removed.
#[derive(Clone, Copy, Debug)]
pub struct Mapping {
    pub va: u64,
    pub size: u64,
}

/// A context and the last seqno submitted on each of its engines.
#[derive(Clone, Copy, Debug)]
pub struct Ctx {
    pub id: u32,
    pub engines: u32,
    pub seqno: [u64; 2],
    /// A submit answered EIO: stopped by a fault or an engine error, or
    /// banned (its fences are still there to wait for).
    pub errored: bool,
}

/// The submission kit of a file: a command BO bound READ|EXEC and mapped
/// for the CPU (programs are written into it) and a data BO bound
/// READ|WRITE that the programs' packets aim at.
#[derive(Clone, Copy, Debug)]
pub struct Kit {
    pub cmd_va: u64,
    pub cmd_map: usize,
    pub cmd_len: usize,
    pub data_va: u64,
    pub data_len: u64,
    /// Where the next program goes (a ring over the command BO).
    pub next: usize,
}

/// Size of the kit's BOs.
pub const KIT_CMD_BYTES: usize = 64 * 1024;
pub const KIT_DATA_BYTES: u64 = 64 * 1024;

/// What the fuzzer knows of one file.
#[derive(Default, Debug)]
pub struct FileState {
    pub bos: Vec<Bo>,
    /// Handles closed (candidates for stale use; check `bos` first: DRM
    /// hands closed numbers out again).
    pub closed: Vec<u32>,
    pub maps: Vec<Mapping>,
    pub ctxs: Vec<Ctx>,
    /// Destroyed context ids (never handed out again).
    pub dead_ctxs: Vec<u32>,
    pub kit: Option<Kit>,
    /// GPU VAs of host mappings (`HOST_MAP`).
    pub hosts: Vec<u64>,
    /// The VA allocator's cursor.
    pub next_va: u64,
    /// Raw ioctls may have made objects the fuzzer does not know: answers
    /// on this file are not judged.
    pub tainted: bool,
}

impl FileState {
    pub fn has_handle(&self, h: u32) -> bool {
        self.bos.iter().any(|b| b.handle == h)
    }

    pub fn has_ctx(&self, id: u32) -> bool {
        self.ctxs.iter().any(|c| c.id == id)
    }

    /// Whether `[va, va + size)` meets a mapping.
    pub fn overlaps(&self, va: u64, size: u64) -> bool {
        let end = va.saturating_add(size);
        self.maps
            .iter()
            .any(|m| va < m.va.saturating_add(m.size) && m.va < end)
    }
}

/// A render-node file shared by the workers of a phase.
pub struct Shared {
    pub fd: RawFd,
    /// Closed by a worker on purpose (concurrent close): never close again.
    pub closed: AtomicBool,
    pub st: Mutex<FileState>,
}

impl Shared {
    pub fn new(fd: RawFd, va_start: u64) -> Arc<Shared> {
        Arc::new(Shared {
            fd,
            closed: AtomicBool::new(false),
            st: Mutex::new(FileState {
                next_va: va_start + (16 << 20),
                ..Default::default()
            }),
        })
    }

    pub fn lock(&self) -> MutexGuard<'_, FileState> {
        // A worker that panicked mid-operation leaves state that is still
        // just a list of numbers.
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        let st = self.lock();
        if let Some(k) = st.kit {
            // SAFETY: the kit's CPU mapping, made by `mmap` for this file;
            // no reference into it outlives the file.
            unsafe { libc::munmap(k.cmd_map as *mut libc::c_void, k.cmd_len) };
        }
        drop(st);
        if !self.closed.load(Relaxed) {
            sys::close(self.fd);
        }
    }
}

/// One fuzzing thread.
pub struct Worker {
    pub id: u32,
    pub rng: Rng,
    pub arena: Arena,
    pub dev: DevInfo,
    pub files: Vec<Arc<Shared>>,
    pub tally: Tally,
    /// Accept any answer (the state is shared with other workers).
    pub relaxed: bool,
    /// May open and close files (the main worker outside phases).
    pub manages_files: bool,
    /// sync_file and dma-buf fds this worker holds.
    pub fds: Vec<RawFd>,
    /// CPU mappings of BOs this worker made: (address, length).
    pub maps: Vec<(usize, usize)>,
    /// The operation in progress is on a tainted file (not judged).
    pub cur_tainted: bool,
    /// Unexpected answers printed so far (the first few are).
    reported: u32,
}

impl Worker {
    pub fn new(id: u32, rng: Rng, dev: DevInfo) -> Worker {
        Worker {
            id,
            rng,
            arena: Arena::new(8),
            dev,
            files: Vec::new(),
            tally: Tally::default(),
            relaxed: false,
            manages_files: false,
            fds: Vec::new(),
            maps: Vec::new(),
            cur_tainted: false,
            reported: 0,
        }
    }

    /// Logs `op desc`, runs `f`, logs and judges its answer against `want`
    /// (anything goes when relaxed), counts it.
    pub fn call(
        &mut self,
        op: &'static str,
        desc: impl FnOnce() -> String,
        want: Expect,
        f: impl FnOnce(&mut Arena) -> Ret,
    ) -> Ret {
        let desc = desc();
        oplog::log(self.id, &format!("{op} {desc}"));
        let r = f(&mut self.arena);
        oplog::log(self.id, &format!("  -> {}", rname(r)));
        oplog::DONE.fetch_add(1, Relaxed);
        self.tally.add(op, r);
        if !self.relaxed && !self.cur_tainted && !want.allows(r) {
            self.tally.unexpected += 1;
            self.reported += 1;
            if self.reported <= 5 {
                println!("UNEXPECTED t{} {op} {desc} -> {}", self.id, rname(r));
                oplog::dump(format!("unexpected answer to {op}").as_bytes());
            }
        }
        r
    }

    /// A file to use: its index in `files`, or `None` if there is none.
    pub fn pick_file(&mut self) -> Option<usize> {
        if self.files.is_empty() {
            None
        } else {
            Some(self.rng.below(self.files.len() as u64) as usize)
        }
    }

    /// A VA range of `size` bytes (aligned to `align`) that meets no
    /// mapping of `st`, from the file's cursor in the user range.
    pub fn alloc_va(&mut self, st: &mut FileState, size: u64, align: u64) -> Option<u64> {
        let lo = self.dev.va_start + (16 << 20);
        // Mostly inside the first 4 GiB of the range, so the page-table
        // pool is not spread over the whole address space.
        let hi = (lo + (4 << 30)).min(self.dev.va_end);
        for _ in 0..8 {
            let mut va = st.next_va.next_multiple_of(align);
            if va.checked_add(size).is_none_or(|e| e > hi) {
                va = lo.next_multiple_of(align);
            }
            let gap = self.rng.below(4) * 0x1000;
            st.next_va = va + size + gap;
            if va + size <= hi && !st.overlaps(va, size) {
                return Some(va);
            }
        }
        None
    }

    /// Closes every fd and CPU mapping this worker holds.
    pub fn release(&mut self) {
        for fd in self.fds.drain(..) {
            sys::close(fd);
        }
        for (p, len) in self.maps.drain(..) {
            // SAFETY: a mapping this worker made with `mmap` and still owns.
            unsafe { libc::munmap(p as *mut libc::c_void, len) };
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.release();
    }
}
