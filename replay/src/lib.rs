//! `vgpu-replay`: failures and sessions run again on the host-side device
//! model, without a VM.
//!
//! * [`dump`]: a device capture (alone, or inside a devcoredump) rebuilt
//!   into its context and its failing job run again, to the same error
//!   record or hang, optionally packet by packet and with a trace.
//! * [`record`]: a whole recorded session (`vgpu-device --record FILE`)
//!   run again without a VM, its replies and event records compared with
//!   the recorded ones.
//! * [`compare`]: two recorded sessions of the same test (a reference
//!   driver's and a student's) compared, and the first place where what
//!   the drivers made the device do differs, in the device's words.
//!
//! The device core is transport-free: the replay drives its blocks
//! directly (control processor, scheduler steps, command processor).
//!
//! The three are independent: none uses another (checked by
//! `scripts/deps`).
//!
//! | block | may use |
//! |---|---|
//! | `compare` | - |
//! | `dump` | - |
//! | `record` | - |

pub mod compare;
pub mod dump;
pub mod record;
