// SPDX-License-Identifier: GPL-2.0

//! What an open render-node file owns on the GPU: its address space, its
//! memory account and its bind jobs' fence timeline ([`Client`]).
//!
//! The DRM file object (`drm.rs`) holds one `Client`; the GPU blocks refer
//! to it from every context the file creates (a context runs on its file's
//! address space), and debugfs lists every client.

use crate::{gem::MemAccount, hostmem::HostMaps, vm::Vm, vram_mgr::VramUse};
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
