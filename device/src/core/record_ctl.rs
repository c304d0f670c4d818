//! Record control: a GPU's session made to record into a file, or to
//! replay a record (the engines then read the recorded memory). The
//! record itself is kept by [`super::record`].

use std::io;
use std::path::Path;
use std::sync::Arc;

use super::gpu::Gpu;
use super::record::{Entry, Recorder};

/// Starts recording `gpu`'s session into a new file at `path` whose
/// `CONFIG` is `config` (see [`super::record::config_text`]); the guest
/// memory map, if the GPU has one yet, is its first entry after `CONFIG`.
///
/// # Errors
///
/// The file cannot be created, or the GPU already records or replays.
pub fn start(gpu: &Gpu, path: &Path, config: &str) -> io::Result<()> {
    let r = Recorder::create(path, config)?;
    gpu.record
        .set(Arc::new(r))
        .map_err(|_| io::Error::other("the device already records or replays"))?;
    let mem = gpu.memory();
    if vm_memory::GuestMemoryBackend::num_regions(&*mem) > 0 {
        if let Some(r) = gpu.record.get() {
            r.memory_map(gpu.clock.now_ns(), &mem);
        }
    }
    Ok(())
}

/// Makes `gpu` replay the record `entries`: its engines read the recorded
/// memory (see [`Recorder::replaying`]).
///
/// # Errors
///
/// The GPU already records or replays.
pub fn replay(gpu: &Gpu, entries: &[Entry]) -> io::Result<()> {
    gpu.record
        .set(Arc::new(Recorder::replaying(entries)))
        .map_err(|_| io::Error::other("the device already records or replays"))
}
