//! One timeline of a vgpu session: the device's packet trace
//! (`vgpu-device --trace`), the KMD's trace (debugfs `trace` of
//! `vgpu.ko`) and the UMD's spans (`VGPU_TRACE=FILE`) joined on the
//! guest's `CLOCK_MONOTONIC` into one Chrome/Perfetto trace-event JSON
//! file, with a flow per job from the application's submit through the
//! device's packets to the fence signalled; and a strict checker of that
//! format. See docs/debugging.md, "One timeline".
//!
//! * [`input`]: the three inputs parsed (and cut out of a console log);
//! * [`clock`]: the device clock mapped onto the guest's;
//! * [`jobs`]: each job's chain of moments across the layers;
//! * [`merge`]: the timeline document;
//! * [`check`]: the format checker.
//!
//! Each module uses only the modules of its row (checked by
//! `scripts/deps`), top first:
//!
//! | block | may use |
//! |---|---|
//! | `merge` | `clock`, `input`, `jobs` |
//! | `jobs` | `clock`, `input` |
//! | `check` | - |
//! | `clock` | - |
//! | `input` | - |

pub mod check;
pub mod clock;
pub mod input;
pub mod jobs;
pub mod merge;
