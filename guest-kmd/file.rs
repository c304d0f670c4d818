// SPDX-License-Identifier: GPL-2.0

//! What an open render-node file owns on the GPU: its address space, its
//! memory account and its bind jobs' fence timeline ([`Client`]).
//!
//! The DRM file object (`drm.rs`) holds one `Client`; the GPU blocks refer
//! to it from every context the file creates (a context runs on its file's
//! address space), and debugfs lists every client.

use crate::{gem::MemAccount, hostmem::HostMaps, proto::engine, vm::Vm, vram_mgr::VramUse};
use kernel::{
    new_mutex,
    prelude::*,
    sync::{
        atomic::{
            Atomic,
            Relaxed, //
        },
        Arc,
        Mutex, //
    },
};

/// What an open file owns on the GPU.
#[pin_data]
pub(crate) struct Client {
    /// A number for debugfs and logs, unique per module load.
    pub(crate) id: u64,
    /// The file's GPU address space.
    #[pin]
    pub(crate) vm: Mutex<Vm>,
    /// GEM objects created through this file.
    pub(crate) mem: Arc<MemAccount>,
    /// VRAM its objects hold.
    pub(crate) vram: Arc<VramUse>,
    /// Process memory mapped for the GPU (`HOST_MAP`); locked before `vm`.
    #[pin]
    pub(crate) host: Mutex<HostMaps>,
    /// dma_fence context of the file's bind jobs (`VM_BIND_OPS`).
    pub(crate) bind_fence_ctx: u64,
    /// The last bind job's seqno.
    bind_seqno: Atomic<u64>,
    /// Moves of its buffer objects in progress: while non-zero its jobs
    /// stay queued ([`Client::gated`]). Changed under the GPU state lock.
    moves: Atomic<u32>,
    /// Engine time of its contexts, for fdinfo. Locked before the GPU
    /// state lock, never inside it.
    #[pin]
    pub(crate) engine_time: Mutex<EngineTime>,
}

/// Engines the device has (`proto::engine::COUNT`).
pub(crate) const ENGINES: usize = engine::COUNT as usize;

/// A client's time on each engine, in nanoseconds, as DRM fdinfo's
/// `drm-engine-<name>` keys report it: it only grows.
///
/// The device counts per context ring (`QUERY_STATS` `CONTEXT_ENGINE`), and
/// a ring's counters go with it (context destroyed, device reset). Each
/// sample adds what a context's counter gained since that context's last
/// sample; a counter below its last sample started again from zero (a
/// reset rebuilt the context) and counts whole. A context is sampled once
/// more when it is destroyed, then forgotten.
pub(crate) struct EngineTime {
    /// Nanoseconds per engine.
    total: [u64; ENGINES],
    /// Each sampled context (by handle) and its counters at the last sample.
    seen: KVec<(u32, [u64; ENGINES])>,
}

impl EngineTime {
    /// Adds context `handle`'s counter `busy_ns` on engine `e`.
    ///
    /// # Errors
    ///
    /// `ENOMEM` when the first sample of a context cannot be kept (nothing
    /// is added then).
    pub(crate) fn sample(&mut self, handle: u32, e: usize, busy_ns: u64) -> Result {
        let i = match self.seen.iter().position(|&(h, _)| h == handle) {
            Some(i) => i,
            None => {
                self.seen.push((handle, [0; ENGINES]), GFP_KERNEL)?;
                self.seen.len() - 1
            }
        };
        // PANIC: `i` is an index of `seen` (found, or the entry just pushed).
        let last = &mut self.seen[i].1;
        let (Some(last), Some(total)) = (last.get_mut(e), self.total.get_mut(e)) else {
            return Ok(());
        };
        let gained = busy_ns.checked_sub(*last).unwrap_or(busy_ns);
        *total = total.saturating_add(gained);
        *last = busy_ns;
        Ok(())
    }

    /// Forgets context `handle` (destroyed: its time stays in the totals).
    pub(crate) fn forget(&mut self, handle: u32) {
        self.seen.retain(|e| e.0 != handle);
    }

    /// Nanoseconds on each engine so far.
    pub(crate) fn totals(&self) -> [u64; ENGINES] {
        self.total
    }
}

/// Source of [`Client::id`].
static NEXT_CLIENT: Atomic<u64> = Atomic::new(1);

impl Client {
    /// A client owning `vm`, whose GEM objects may hold `mem_limit` bytes.
    ///
    /// # Errors
    ///
    /// `ENOMEM`.
    pub(crate) fn new(vm: Vm, mem_limit: u64) -> Result<Arc<Client>> {
        let mem = MemAccount::new(mem_limit)?;
        let vram = VramUse::new()?;
        Arc::pin_init(
            pin_init!(Client {
                id: NEXT_CLIENT.fetch_add(1, Relaxed),
                vm <- new_mutex!(vm),
                mem,
                vram,
                host <- new_mutex!(HostMaps::new()),
                bind_fence_ctx: crate::ffi::new_fence_context(),
                bind_seqno: Atomic::new(0),
                moves: Atomic::new(0),
                engine_time <- new_mutex!(EngineTime {
                    total: [0; ENGINES],
                    seen: KVec::new(),
                }),
            }),
            GFP_KERNEL,
        )
    }
}

impl Client {
    /// The seqno of a new bind job (counting from 1).
    pub(crate) fn next_bind_seqno(&self) -> u64 {
        self.bind_seqno.fetch_add(1, Relaxed) + 1
    }

    /// Whether a move of one of its objects holds its jobs back (read
    /// under the GPU state lock).
    pub(crate) fn gated(&self) -> bool {
        self.moves.load(Relaxed) != 0
    }

    /// One more move in progress (under the GPU state lock).
    pub(crate) fn gate(&self) {
        self.moves.add(1, Relaxed);
    }

    /// One move fewer (under the GPU state lock).
    pub(crate) fn ungate(&self) {
        let _ = self.moves.fetch_sub(1, Relaxed);
    }
}

/// Thread-group id of the calling process, in its own pid namespace.
pub(crate) fn current_tgid() -> u32 {
    u32::try_from(kernel::current!().tgid_nr_ns(None)).unwrap_or(0)
}
