// SPDX-License-Identifier: GPL-2.0

//! The firmware: the image the driver loads into the device at probe, and
//! again whenever the device is back in its boot state (after
//! `DEVICE_RESET` and after a PCI function reset). The image format and
//! the boot commands: docs/hardware.md, section 15.
//!
//! # The handshake
//!
//! ```text
//!  IDENTIFY (generation) ─▶ request_firmware("vgpu/gen<N>.fw" or the `firmware` parameter)
//!    ─▶ image copied into DMA memory (kept for the reloads)
//!    ─▶ FW_LOAD ─▶ LOADED ─▶ FW_START ─▶ FW_STATUS every 100 µs .. fw_boot_timeout_ms ─▶ RUNNING
//!         │                                   │
//!         ▼ FAILED: the device's boot error   ▼ FAILED / still BOOTING: ETIMEDOUT or the error
//!    ─▶ version check against [`SUPPORTED`]
//! ```
//!
//! A refused image leaves the driver loaded and the device unbound, with
//! one dmesg line that names the image, the device's error and its code.
//! Names are relative to /lib/firmware; the driver refuses an absolute
//! name or one with a `..` component before it asks the loader.
//!
//! # Lock order
//!
//! [`FwState`] is taken with no other driver lock held except the reset
//! ladder's (`Gpu::ops`); a boot sends its commands with it held (the
//! control path takes only its own locks below it). The debugfs view sends
//! its status command without it and reads the log with it held but
//! without waiting at a function reset's gate.

use super::{
    control::Reply,
    virtqueue::DmaBytes,
    Hw, //
};
use crate::{
    ffi::monotonic_ns,
    firmware::{
        fw_state,
        FwError,
        FW_MAX_SIZE, //
    },
    params,
    pod::Pod,
    proto::{
        Command,
        FwLogReadReply,
        FwStatusReply,
        IdentifyReply,
        FEATURE_VIRTUAL_FUNCTION,
        PROTOCOL_VERSION, //
    },
};
use core::fmt::{self, Write};
use kernel::{
    device::{Bound, Device},
    prelude::*,
    time::{delay::fsleep, Delta},
};

/// Firmware versions this driver runs with, per generation: (generation,
/// major, lowest minor). An image of another major, or an older minor, is
/// refused after it booted (its interface may still match the device's).
pub(crate) const SUPPORTED: [(u32, u32, u32); 2] = [(1, 1, 0), (2, 2, 0)];

/// Longest image name (the `firmware` parameter), in bytes.
const NAME_MAX: usize = 64;

/// Boots tried before the driver gives up ([`Hw::boot_firmware`]).
const BOOT_ATTEMPTS: u32 = 3;

/// Whether a failed boot is tried again, and how.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Retry {
    /// No: the image or the driver is wrong, or the device does not
    /// answer.
    No,
    /// Load and start again (the boot failed).
    Reload,
    /// Reset the device first (the boot hangs).
    AfterReset,
}

/// Why a boot failed, as dmesg says it.
enum BootFailure {
    /// No image was fetched.
    NoImage,
    /// A boot command failed with this errno.
    Command(i32),
    /// The device refused the image: its boot error.
    Refused(u32),
    /// The image failed while booting: its boot error.
    DidNotBoot(u32),
    /// Still in this state after this many ms.
    Stuck(u32, u32),
    /// Version, generation, and what the driver supports for it.
    Version(u32, u32, (u32, u32, u32)),
    /// A virtual function whose firmware (the host's) is in this state,
    /// not running.
    NotRunning(u32),
}

impl fmt::Display for BootFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = |e: u32| FwError::from_u32(e).map_or("unknown error", FwError::text);
        match *self {
            BootFailure::NoImage => write!(f, "no image"),
            BootFailure::NotRunning(state) => write!(
                f,
                "the host's firmware of this virtual function is {}, not running",
                fw_state::name(state)
            ),
            BootFailure::Command(e) => write!(f, "a boot command failed (error {e})"),
            BootFailure::Refused(e) => {
                write!(f, "refused by the device: {} (boot error {e})", text(e))
            }
            BootFailure::DidNotBoot(e) => write!(f, "did not boot: {} (boot error {e})", text(e)),
            BootFailure::Stuck(state, ms) => write!(
                f,
                "did not boot within {ms} ms (state {})",
                fw_state::name(state)
            ),
            BootFailure::Version(v, g, (_, major, minor)) => {
                let (a, b, c) = version(v);
                write!(
                    f,
                    "is version {a}.{b}.{c}; this driver runs generation {g} with {major}.{minor} \
                     or a later {major}.x"
                )
            }
        }
    }
}

impl kernel::fmt::Display for BootFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Bytes of the firmware log debugfs shows (its newest part).
const LOG_VIEW: usize = 16 << 10;

/// What the driver knows of the device's firmware.
pub(crate) struct FwState {
    /// The image's name (under /lib/firmware), NUL-terminated.
    name: [u8; NAME_MAX + 1],
    /// The image, in DMA memory the device reads at `FW_LOAD`: kept for
    /// the reloads after resets.
    image: Option<DmaBytes>,
    /// Its size.
    size: usize,
    /// The generation it was requested for (`IDENTIFY` in the boot
    /// state).
    generation: u32,
    /// The device's buffer for `FW_LOG_READ`.
    log: Option<DmaBytes>,
    /// The status of the last boot.
    last: FwStatusReply,
    /// Driver-measured time of the last boot: `FW_LOAD` to running, ns.
    load_ns: u64,
    /// Boots that reached `RUNNING`, and those that did not.
    boots: u32,
    failures: u32,
}

impl FwState {
    /// Nothing loaded yet.
    pub(crate) fn new() -> Self {
        FwState {
            name: [0; NAME_MAX + 1],
            image: None,
            size: 0,
            generation: 0,
            log: None,
            last: FwStatusReply::zeroed(),
            load_ns: 0,
            boots: 0,
            failures: 0,
        }
    }

    fn name(&self) -> &str {
        let n = self.name.iter().position(|&b| b == 0).unwrap_or(NAME_MAX);
        core::str::from_utf8(self.name.get(..n).unwrap_or(&[])).unwrap_or("?")
    }
}

/// Whether `name` is a firmware name this driver asks for: relative,
/// without `..` components, of the characters image names use.
fn name_ok(name: &[u8]) -> bool {
    !name.is_empty()
        && name.len() <= NAME_MAX
        && name[0] != b'/'
        && !name
            .split(|&b| b == b'/')
            .any(|c| c == b".." || c.is_empty())
        && name
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'/'))
}

/// The errno of a boot error.
fn boot_errno(code: u32) -> Error {
    match FwError::from_u32(code) {
        Some(FwError::Timeout) => ETIMEDOUT,
        _ => ENOEXEC,
    }
}

fn version(v: u32) -> (u32, u32, u32) {
    (v >> 16, (v >> 8) & 0xff, v & 0xff)
}

impl Hw {
    /// Finds the image for a device of `generation` (the `firmware`
    /// parameter, else `vgpu/gen<N>.fw`) and copies it into DMA memory
    /// kept for every boot.
    ///
    /// # Errors
    ///
    /// `EINVAL` for a name the driver does not ask for (absolute, with
    /// `..`, too long); the loader's errno (`ENOENT`: no such file);
    /// `EFBIG` for an image above 64 KiB; `ENOMEM`.
    pub(crate) fn fetch_firmware(&self, dev: &Device<Bound>, generation: u32) -> Result {
        let mut name = [0u8; NAME_MAX + 1];
        match crate::ffi::firmware_param() {
            Some(p) => {
                let b = p.to_bytes();
                if !name_ok(b) {
                    dev_err!(
                        dev,
                        "firmware: image name {:?} refused: a name relative to /lib/firmware \
                         of letters, digits, '.', '_', '-' and '/', without '..'\n",
                        p
                    );
                    return Err(EINVAL);
                }
                name[..b.len()].copy_from_slice(b);
            }
            None => {
                let mut w = NameBuf(&mut name, 0);
                write!(w, "vgpu/gen{generation}.fw").map_err(|_| EINVAL)?;
            }
        }
        let n = name.iter().position(|&b| b == 0).unwrap_or(NAME_MAX);
        let cname = CStr::from_bytes_with_nul(&name[..=n]).map_err(|_| EINVAL)?;
        let fw = kernel::firmware::Firmware::request(cname, dev).inspect_err(|e| {
            dev_err!(
                dev,
                "firmware: {} not loaded from /lib/firmware (error {})\n",
                cname,
                e.to_errno()
            )
        })?;
        let data = fw.data();
        if data.len() > FW_MAX_SIZE || data.is_empty() {
            dev_err!(
                dev,
                "firmware: {} is {} bytes; an image is 1..={} bytes\n",
                cname,
                data.len(),
                FW_MAX_SIZE
            );
            return Err(EFBIG);
        }
        let image = DmaBytes::new(dev, data.len())?;
        image.write(0, data)?;
        let log = DmaBytes::new(dev, LOG_VIEW)?;
        let mut st = self.firmware.lock();
        st.name = name;
        st.size = data.len();
        st.generation = generation;
        st.image = Some(image);
        st.log = Some(log);
        Ok(())
    }

    /// Loads and starts the image fetched by [`Hw::fetch_firmware`],
    /// waits until it runs and checks its version; `send` sends a command
    /// (gated or not, as the caller's path needs). A boot that fails or
    /// hangs is tried again, [`BOOT_ATTEMPTS`] times in all (a hung one
    /// after a `DEVICE_RESET`); a refused image is not.
    ///
    /// # Errors
    ///
    /// `ENODEV` without an image; `ENOEXEC` when the device refuses the
    /// image (its boot error is in dmesg) or the driver does not support
    /// its version; `ETIMEDOUT` when no attempt ran within
    /// `fw_boot_timeout_ms` or the device's boots timed out; the errno of a
    /// command.
    pub(crate) fn boot_firmware(&self, send: &dyn Fn(Command) -> Result<Reply>) -> Result {
        let pdev = self.pdev();
        let mut st = self.firmware.lock();
        let mut attempt = 1;
        loop {
            let t0 = monotonic_ns();
            let r = self.boot_once(&mut st, send);
            let (errno, retry, why) = match r {
                Ok(()) => {
                    st.load_ns = monotonic_ns().saturating_sub(t0);
                    st.boots += 1;
                    return Ok(());
                }
                Err(f) => f,
            };
            st.failures += 1;
            if retry == Retry::No || attempt == BOOT_ATTEMPTS {
                dev_err!(pdev, "firmware: {} {}\n", st.name(), why);
                return Err(errno);
            }
            dev_warn!(
                pdev,
                "firmware: {} {} (attempt {} of {}, trying again)\n",
                st.name(),
                why,
                attempt,
                BOOT_ATTEMPTS
            );
            if retry == Retry::AfterReset {
                // A hung boot ends only with a reset: event numbering
                // restarts with it.
                self.events.expect_restart();
                send(Command::DeviceReset)?;
            }
            attempt += 1;
        }
    }

    /// One boot: the handshake, then the version check.
    fn boot_once(&self, st: &mut FwState, send: &dyn Fn(Command) -> Result<Reply>) -> Outcome {
        let status = |c| -> Outcome<FwStatusReply> {
            send(c)
                .and_then(|r| r.get())
                .map_err(|e| (e, Retry::No, BootFailure::Command(e.to_errno())))
        };
        // A virtual function's firmware is the host's (the physical
        // function boots it, as xe's VFs find the GuC running): the driver
        // checks that it runs and its version, and loads nothing.
        let id: Option<IdentifyReply> = send(Command::Identify).and_then(|r| r.get()).ok();
        if id.is_some_and(|id| id.features & FEATURE_VIRTUAL_FUNCTION != 0) {
            let r = status(Command::FwStatus)?;
            st.last = r;
            if r.state != fw_state::RUNNING {
                return Err((EIO, Retry::No, BootFailure::NotRunning(r.state)));
            }
            return check_version(r, st.generation);
        }
        let (pa, size) = match st.image.as_ref() {
            Some(img) => (
                img.dma_addr(0)
                    .map_err(|e| (e, Retry::No, BootFailure::NoImage))?,
                st.size,
            ),
            None => return Err((ENODEV, Retry::No, BootFailure::NoImage)),
        };
        let r = handshake(st, pa, size, &status)?;
        check_version(r, st.generation)
    }

    /// The debugfs `firmware` file: the image, its boot and the newest
    /// part of the firmware log.
    pub(crate) fn show_firmware(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Commands are sent without the lock (a reload may need it).
        let st = self.firmware.lock();
        let (r, name, size, load_ns, boots, failures) =
            (st.last, st.name, st.size, st.load_ns, st.boots, st.failures);
        drop(st);
        let name_len = name.iter().position(|&b| b == 0).unwrap_or(NAME_MAX);
        let name = core::str::from_utf8(&name[..name_len]).unwrap_or("?");
        let (major, minor, patch) = version(r.version);
        writeln!(f, "image: {} ({} bytes)", name, size)?;
        let build: [u8; 16] = {
            let mut b = [0u8; 16];
            for (i, w) in r.build.iter().enumerate() {
                b[4 * i..4 * i + 4].copy_from_slice(&w.to_le_bytes());
            }
            b
        };
        let bl = build.iter().position(|&b| b == 0).unwrap_or(16);
        writeln!(
            f,
            "version: {}.{}.{} build {}",
            major,
            minor,
            patch,
            core::str::from_utf8(&build[..bl]).unwrap_or("?")
        )?;
        writeln!(f, "features: {:#x}", r.features)?;
        writeln!(
            f,
            "state: {} error {} ({})",
            fw_state::name(r.state),
            r.error,
            FwError::from_u32(r.error).map_or("none", FwError::text)
        )?;
        writeln!(
            f,
            "boot: device {} us, driver load to running {} us; boots {} failures {}",
            r.boot_us,
            load_ns / 1000,
            boots,
            failures
        )?;
        // The live status: heartbeats and the log's head move.
        let now: Option<FwStatusReply> = self.command(Command::FwStatus).and_then(|r| r.get()).ok();
        if let Some(n) = now {
            writeln!(
                f,
                "now: {} heartbeat every {} ms, {} heartbeats; log {} bytes written, {} kept",
                fw_state::name(n.state),
                n.heartbeat_ms,
                n.heartbeats,
                n.log_head,
                n.log_size
            )?;
        }
        writeln!(f, "log:")?;
        // The log buffer is the lock's; the read does not wait at the gate
        // of a function reset (which reloads the firmware under the lock).
        let st = self.firmware.lock();
        let (Some(buf), Some(n)) = (st.log.as_ref(), now) else {
            return writeln!(f, "(unavailable)");
        };
        let pos = n.log_head.saturating_sub(LOG_VIEW as u64);
        let Ok(pa) = buf.dma_addr(0) else {
            return Ok(());
        };
        let r: Option<FwLogReadReply> = self
            .command_ungated(Command::FwLogRead {
                pos,
                len: LOG_VIEW as u32,
                buf_pa: pa,
            })
            .and_then(|r| r.get())
            .ok();
        let Some(r) = r else {
            return writeln!(f, "(read failed)");
        };
        let mut chunk = [0u8; 256];
        let mut done = 0usize;
        let total = (r.written as usize).min(LOG_VIEW);
        while done < total {
            let n = (total - done).min(chunk.len());
            if buf.read(done, &mut chunk[..n]).is_err() {
                break;
            }
            for &b in &chunk[..n] {
                let c = if b == b'\n' || (b' '..=b'~').contains(&b) {
                    b as char
                } else {
                    '?'
                };
                f.write_char(c)?;
            }
            done += n;
        }
        Ok(())
    }
}

/// What a boot attempt ends in: its errno, whether to try again, and
/// what dmesg says.
type Outcome<T = ()> = core::result::Result<T, (Error, Retry, BootFailure)>;

/// The boot handshake for the image at `pa` (`size` bytes) in DMA
/// memory: `FW_LOAD`, then `FW_START`, then `FW_STATUS` polled (about
/// every 100 µs) until the firmware runs or fails, at most
/// `fw_boot_timeout_ms`. `status` sends a boot command and returns the
/// boot status it replied. Returns the status of the running firmware;
/// `st.last` keeps every status read.
///
/// # Errors
///
/// The device refused the image (`FW_LOAD` did not leave it `LOADED`):
/// the boot error's errno, not retried, [`BootFailure::Refused`]. The boot
/// failed (`FAILED`): the boot error's errno, retried with a new load
/// when the errno is `ETIMEDOUT`, [`BootFailure::DidNotBoot`]. Still not
/// running at the deadline: `ETIMEDOUT`, retried after a device reset,
/// [`BootFailure::Stuck`]. A command that failed: as `status` says.
fn handshake(
    st: &mut FwState,
    pa: u64,
    size: usize,
    status: &dyn Fn(Command) -> Outcome<FwStatusReply>,
) -> Outcome<FwStatusReply> {
    // LAB(10) BEGIN handshake
    let r = status(Command::FwLoad {
        pa,
        size: size as u32,
        interface: PROTOCOL_VERSION,
    })?;
    st.last = r;
    if r.state != fw_state::LOADED {
        return Err((
            boot_errno(r.error),
            Retry::No,
            BootFailure::Refused(r.error),
        ));
    }
    let t0 = monotonic_ns();
    status(Command::FwStart)?;
    let deadline = t0 + u64::from(params::fw_boot_timeout_ms()) * 1_000_000;
    let r = loop {
        let r = status(Command::FwStatus)?;
        match r.state {
            fw_state::LOADED | fw_state::BOOTING if monotonic_ns() < deadline => {
                fsleep(Delta::from_micros(100));
            }
            _ => break r,
        }
    };
    st.last = r;
    match r.state {
        fw_state::RUNNING => Ok(r),
        fw_state::FAILED => {
            let retry = if boot_errno(r.error) == ETIMEDOUT {
                Retry::Reload
            } else {
                Retry::No
            };
            Err((boot_errno(r.error), retry, BootFailure::DidNotBoot(r.error)))
        }
        state => Err((
            ETIMEDOUT,
            Retry::AfterReset,
            BootFailure::Stuck(state, params::fw_boot_timeout_ms()),
        )),
    }
    // LAB(10) END handshake
}

/// Whether this driver runs the firmware `r` says is running on a device
/// of `generation` ([`SUPPORTED`]: the same major, at least the minor).
///
/// # Errors
///
/// `ENOEXEC`, not retried, [`BootFailure::Version`] (the version, the
/// generation and the [`SUPPORTED`] entry of that generation).
fn check_version(r: FwStatusReply, generation: u32) -> Outcome {
    // LAB(10) BEGIN version
    let (major, minor, _) = version(r.version);
    let ok = SUPPORTED
        .iter()
        .any(|&(g, maj, min)| g == generation && maj == major && minor >= min);
    if !ok {
        let want = SUPPORTED.iter().find(|s| s.0 == generation).copied();
        return Err((
            ENOEXEC,
            Retry::No,
            BootFailure::Version(r.version, generation, want.unwrap_or((0, 0, 0))),
        ));
    }
    Ok(())
    // LAB(10) END version
}

/// A `fmt::Write` into a fixed name buffer (one byte kept for the NUL).
struct NameBuf<'a>(&'a mut [u8; NAME_MAX + 1], usize);

impl Write for NameBuf<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let end = self.1 + s.len();
        if end > NAME_MAX {
            return Err(fmt::Error);
        }
        self.0[self.1..end].copy_from_slice(s.as_bytes());
        self.1 = end;
        Ok(())
    }
}
