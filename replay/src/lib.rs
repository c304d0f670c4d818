//! `vgpu-replay`: failures and sessions run again on the host-side device
//! model, without a VM.
//!
//! * [`dump`]: a device capture (alone, or inside a devcoredump) rebuilt
//!   into its context and its failing job run again, to the same error
//!   record or hang, optionally packet by packet and with a trace.
//! * [`record`]: a whole recorded session (`vgpu-device --record FILE`)
//!   run again without a VM, its replies and event records compared with
//!   the recorded ones.
//!
//! The device core is transport-free: the replay drives its blocks
//! directly (control processor, scheduler steps, command processor).

pub mod dump;
pub mod record;
