//! The physical function: one device cut into virtual functions
//! (docs/hardware.md section 17). The host decides each VF's partition —
//! its contexts, its VRAM window, its scheduling weight — before its VM
//! starts (`vgpu-device --vf ...`), as xe's PF provisions GGTT, VRAM,
//! contexts and execution quanta per VF (xe_gt_sriov_pf_config.c).
//!
//! [`plan`] checks the VFs asked for against the device and places their
//! VRAM windows one after the other from VRAM offset 0 (the device's own
//! firmware carve-out stays on top). [`PhysicalFunction`] owns what the VFs
//! share (the VRAM memfd, the engines' arbiter) and builds each VF's
//! [`Device`].

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use vgpu_hwif::proto::MAX_CONTEXTS;
use vgpu_hwif::vram::FIRMWARE_RESERVED;

use crate::config::{
    Boot, ConfigError, DeviceConfig, PartitionConfig, VramConfig, MAX_VFS, MAX_WEIGHT,
};
use crate::core::memory::{Vram, VramError};
use crate::core::partition::{Arbiter, Shared};
use crate::core::Device;

const MIB: u64 = 1 << 20;
/// VRAM sizes are multiples of this.
const VRAM_ALIGN: u64 = 2 * MIB;

/// One VF as asked for on the command line:
/// `contexts=N,vram=SIZE,visible=SIZE,weight=W,socket=PATH`, every key
/// optional (the device's share divided evenly, weight 1).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VfSpec {
    /// Contexts (ids `0..contexts`).
    pub contexts: Option<u32>,
    /// VRAM window in bytes.
    pub vram: Option<u64>,
    /// Its CPU-visible part.
    pub visible: Option<u64>,
    /// Scheduling weight, `1..=MAX_WEIGHT`.
    pub weight: Option<u32>,
    /// Its vhost-user socket (default: the device's socket with `.vfN`).
    pub socket: Option<PathBuf>,
}

/// A size as the command line writes it: a number of bytes, or of KiB, MiB
/// or GiB with a `K`, `M` or `G` suffix (either case), checked for
/// overflow.
///
/// # Errors
///
/// Why `s` is not a size, quoting it.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let (digits, shift) = match s.as_bytes().last() {
        Some(b'K' | b'k') => (&s[..s.len() - 1], 10),
        Some(b'M' | b'm') => (&s[..s.len() - 1], 20),
        Some(b'G' | b'g') => (&s[..s.len() - 1], 30),
        _ => (s, 0),
    };
    let n: u64 = digits.parse().map_err(|_| format!("'{s}' is not a size"))?;
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("'{s}' is too large"))
}

impl std::str::FromStr for VfSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<VfSpec, String> {
        let mut spec = VfSpec::default();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| format!("{part:?} is not KEY=VALUE"))?;
            let num = |v: &str| v.parse::<u32>().map_err(|_| format!("bad number {v:?}"));
            match k {
                "contexts" => spec.contexts = Some(num(v)?),
                "vram" => spec.vram = Some(parse_size(v)?),
                "visible" => spec.visible = Some(parse_size(v)?),
                "weight" => spec.weight = Some(num(v)?),
                "socket" => spec.socket = Some(PathBuf::from(v)),
                _ => {
                    return Err(format!(
                        "unknown key {k:?} (contexts, vram, visible, weight, socket)"
                    ))
                }
            }
        }
        Ok(spec)
    }
}

/// The largest power of two not above `n` (0 for 0).
fn prev_power_of_two(n: u64) -> u64 {
    if n == 0 {
        0
    } else {
        1 << (63 - n.leading_zeros())
    }
}

fn bad(vf: u32, why: impl Into<String>) -> ConfigError {
    ConfigError::Partition {
        vf,
        why: why.into(),
    }
}

/// The VFs' device configurations: `device` (the whole device) cut as
/// `specs` ask, VF `i + 1` from `specs[i]`. A VF powers on with its
/// firmware running (the host's firmware serves it) and its VRAM window
/// keeps the device's reset policy.
///
/// # Errors
/// [`ConfigError::Partition`] for no VF or more than [`MAX_VFS`], contexts
/// or VRAM beyond the device's, a weight out of range, a window or aperture
/// the device's rules refuse.
pub fn plan(device: &DeviceConfig, specs: &[VfSpec]) -> Result<Vec<DeviceConfig>, ConfigError> {
    let n = u32::try_from(specs.len()).unwrap_or(u32::MAX);
    if n == 0 || n > MAX_VFS {
        return Err(bad(
            n,
            format!("a device has 1..={MAX_VFS} virtual functions"),
        ));
    }
    let usable = device.vram.layout.size.saturating_sub(FIRMWARE_RESERVED);
    let even = Defaults {
        contexts: MAX_CONTEXTS / n,
        vram: (usable / u64::from(n)) / VRAM_ALIGN * VRAM_ALIGN,
    };
    let mut out: Vec<DeviceConfig> = Vec::with_capacity(specs.len());
    for (i, spec) in (1u32..).zip(specs) {
        out.push(partition_for(device, &out, i, spec, even)?);
    }
    Ok(out)
}

/// What a VF gets when its spec does not say.
#[derive(Debug, Clone, Copy)]
struct Defaults {
    contexts: u32,
    vram: u64,
}

/// VF `vf`'s configuration as `spec` asks, beside the VFs `others`: its
/// contexts within what they leave of the 64, its VRAM window in the first
/// gap between theirs that holds it (from offset 0, below the device's
/// firmware carve-out).
fn partition_for(
    device: &DeviceConfig,
    others: &[DeviceConfig],
    vf: u32,
    spec: &VfSpec,
    defaults: Defaults,
) -> Result<DeviceConfig, ConfigError> {
    let layout = device.vram.layout;
    let usable = layout.size.saturating_sub(FIRMWARE_RESERVED);
    let used: u32 = others
        .iter()
        .filter_map(|c| c.partition)
        .map(|p| p.contexts)
        .sum();
    let contexts_left = MAX_CONTEXTS.saturating_sub(used);
    let contexts = spec
        .contexts
        .unwrap_or(defaults.contexts.min(contexts_left));
    if contexts == 0 || contexts > contexts_left {
        return Err(bad(
            vf,
            format!("{contexts} contexts: {contexts_left} of {MAX_CONTEXTS} are left"),
        ));
    }
    let weight = spec.weight.unwrap_or(1);
    if !(1..=MAX_WEIGHT).contains(&weight) {
        return Err(bad(
            vf,
            format!("weight {weight} out of range 1..={MAX_WEIGHT}"),
        ));
    }
    // The gaps between the others' windows, lowest first.
    let mut windows: Vec<(u64, u64)> = others
        .iter()
        .filter_map(|c| c.partition.map(|p| (p.vram_offset, c.vram.layout.size)))
        .filter(|&(_, size)| size > 0)
        .collect();
    windows.sort_unstable();
    let mut gaps = Vec::new();
    let mut at = 0u64;
    for (off, size) in &windows {
        if *off > at {
            gaps.push((at, off - at));
        }
        at = at.max(off.saturating_add(*size));
    }
    if usable > at {
        gaps.push((at, usable - at));
    }
    let largest = gaps.iter().map(|g| g.1).max().unwrap_or(0);
    let vram = if layout.size == 0 {
        0
    } else {
        spec.vram
            .unwrap_or(defaults.vram.min(largest / VRAM_ALIGN * VRAM_ALIGN))
    };
    let offset = if vram == 0 {
        0
    } else {
        gaps.iter()
            .find(|g| g.1 >= vram)
            .map(|g| g.0)
            .ok_or_else(|| {
                bad(
                    vf,
                    format!("{} MiB of VRAM: {} MiB are left", vram / MIB, largest / MIB),
                )
            })?
    };
    // The aperture is a PCI BAR: a power of two.
    let visible = match spec.visible {
        Some(v) if v != 0 && !v.is_power_of_two() => {
            return Err(bad(
                vf,
                format!("visible part of {v} bytes: an aperture (a PCI BAR) is a power of two"),
            ));
        }
        Some(v) => v,
        None if vram == 0 => 0,
        None => prev_power_of_two(vram / 4).max(VRAM_ALIGN),
    };
    let vcfg =
        VramConfig::new(vram, visible, device.vram.on_reset).map_err(|e| bad(vf, e.to_string()))?;
    Ok(device
        .with_vram(vcfg)
        .with_boot(Boot::Preloaded)
        .with_partition(PartitionConfig {
            vf,
            contexts,
            vram_offset: offset,
            weight,
        }))
}

/// Errors of the physical function.
#[derive(Debug, thiserror::Error)]
pub enum PfError {
    /// The partitions asked for.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The device's VRAM could not be made.
    #[error(transparent)]
    Vram(#[from] VramError),
}

/// The physical function: the device's shared parts and its VFs'
/// configurations (slot `vf - 1`; VFs come and go while the device runs).
#[derive(Debug)]
pub struct PhysicalFunction {
    device: DeviceConfig,
    vfs: Mutex<Vec<Option<DeviceConfig>>>,
    shared: Shared,
    /// The whole device's VRAM (kept for the memfd's lifetime).
    vram: Vram,
}

impl PhysicalFunction {
    /// `device` cut into the VFs `specs` ask for.
    ///
    /// # Errors
    /// [`PfError`] if [`plan`] refuses the VFs or the VRAM memfd cannot be
    /// made.
    pub fn new(device: DeviceConfig, specs: &[VfSpec]) -> Result<PhysicalFunction, PfError> {
        let planned = plan(&device, specs)?;
        let vram = Vram::new(device.vram)?;
        let arbiter = Arc::new(Arbiter::new());
        for cfg in &planned {
            if let Some(p) = cfg.partition {
                arbiter
                    .set_weight(p.vf, p.weight)
                    .map_err(|e| bad(p.vf, e.to_string()))?;
            }
        }
        let file = match vram.file() {
            Some(f) => Some(Arc::new(f.try_clone().map_err(|source| {
                VramError::Memfd {
                    size: device.vram.layout.size,
                    source,
                }
            })?)),
            None => None,
        };
        let mut vfs = vec![None; MAX_VFS as usize];
        for (slot, cfg) in vfs.iter_mut().zip(planned) {
            *slot = Some(cfg);
        }
        Ok(PhysicalFunction {
            device,
            vfs: Mutex::new(vfs),
            shared: Shared {
                arbiter,
                vram: file,
            },
            vram,
        })
    }

    fn slots(&self) -> std::sync::MutexGuard<'_, Vec<Option<DeviceConfig>>> {
        self.vfs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The VFs' configurations, lowest VF first.
    pub fn configs(&self) -> Vec<DeviceConfig> {
        self.slots().iter().flatten().copied().collect()
    }

    /// VF `vf`'s configuration, if it exists.
    pub fn config(&self, vf: u32) -> Option<DeviceConfig> {
        let i = usize::try_from(vf.checked_sub(1)?).ok()?;
        self.slots().get(i).copied().flatten()
    }

    /// A new VF while the device runs, in the lowest free slot, as `spec`
    /// asks (default: 8 contexts, 64 MiB of VRAM or the largest window
    /// left); its history in the arbiter starts afresh.
    ///
    /// # Errors
    /// [`ConfigError::Partition`] when every slot is taken or the device
    /// has not what `spec` asks left.
    pub fn create(&self, spec: &VfSpec) -> Result<DeviceConfig, ConfigError> {
        let mut slots = self.slots();
        let i = slots.iter().position(Option::is_none).ok_or_else(|| {
            bad(
                MAX_VFS + 1,
                format!("all {MAX_VFS} virtual functions exist"),
            )
        })?;
        let vf = u32::try_from(i + 1).unwrap_or(u32::MAX);
        let others: Vec<DeviceConfig> = slots.iter().flatten().copied().collect();
        let defaults = Defaults {
            contexts: 8,
            vram: 64 * MIB,
        };
        let cfg = partition_for(&self.device, &others, vf, spec, defaults)?;
        self.shared.arbiter.forget(vf);
        if let Some(p) = cfg.partition {
            self.shared
                .arbiter
                .set_weight(vf, p.weight)
                .map_err(|e| bad(vf, e.to_string()))?;
        }
        if let Some(slot) = slots.get_mut(i) {
            *slot = Some(cfg);
        }
        Ok(cfg)
    }

    /// Removes VF `vf`: its contexts and VRAM window go back to the device
    /// (its running device, if any, is the caller's to end).
    ///
    /// # Errors
    /// [`ConfigError::Partition`] if there is no such VF.
    pub fn destroy(&self, vf: u32) -> Result<DeviceConfig, ConfigError> {
        let i = vf
            .checked_sub(1)
            .and_then(|i| usize::try_from(i).ok())
            .ok_or_else(|| bad(vf, "no such virtual function"))?;
        self.slots()
            .get_mut(i)
            .and_then(Option::take)
            .ok_or_else(|| bad(vf, "no such virtual function"))
    }

    /// What the VFs share.
    pub fn shared(&self) -> &Shared {
        &self.shared
    }

    /// The engines' arbiter.
    pub fn arbiter(&self) -> &Arc<Arbiter> {
        &self.shared.arbiter
    }

    /// A powered-on device for VF `vf` (from 1), or `None` if there is no
    /// such VF.
    pub fn device(&self, vf: u32) -> Option<Device> {
        let cfg = self.config(vf)?;
        Some(Device::virtual_function(cfg, &self.shared))
    }

    /// Makes `path` a link to the device's VRAM memfd; a VF's aperture is
    /// its window's first `visible` bytes, at its `vram_offset` in it.
    ///
    /// # Errors
    /// [`VramError::Publish`] if the link cannot be made.
    pub fn publish_vram(&self, path: &std::path::Path) -> Result<(), VramError> {
        self.vram.publish(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Generation, VramOnReset};

    fn device(vram_mib: u64) -> DeviceConfig {
        DeviceConfig::new(Generation::Gen2, 2)
            .unwrap()
            .with_vram(VramConfig::new(vram_mib * MIB, 16 * MIB, VramOnReset::Zero).unwrap())
    }

    #[test]
    fn specs_parse_and_refuse_unknown_keys() {
        let s: VfSpec = "contexts=16,vram=128M,visible=32M,weight=3,socket=/tmp/a.sock"
            .parse()
            .unwrap();
        assert_eq!(s.contexts, Some(16));
        assert_eq!(s.vram, Some(128 * MIB));
        assert_eq!(s.visible, Some(32 * MIB));
        assert_eq!(s.weight, Some(3));
        assert_eq!(s.socket, Some(PathBuf::from("/tmp/a.sock")));
        assert_eq!("".parse::<VfSpec>(), Ok(VfSpec::default()));
        assert!("colour=red".parse::<VfSpec>().is_err());
        assert!("vram=12Q".parse::<VfSpec>().is_err());
        assert!("contexts".parse::<VfSpec>().is_err());
    }

    #[test]
    fn an_even_split_places_windows_one_after_the_other() {
        let vfs = plan(&device(512), &[VfSpec::default(), VfSpec::default()]).unwrap();
        let p: Vec<_> = vfs.iter().map(|c| c.partition.unwrap()).collect();
        assert_eq!((p[0].vf, p[1].vf), (1, 2));
        assert_eq!((p[0].contexts, p[1].contexts), (32, 32));
        // (512 - 2) / 2 = 255 MiB, rounded down to 254.
        assert_eq!(vfs[0].vram.layout.size, 254 * MIB);
        assert_eq!((p[0].vram_offset, p[1].vram_offset), (0, 254 * MIB));
        assert_eq!(vfs[0].boot, Boot::Preloaded);
        assert_eq!(vfs[1].vram.on_reset, VramOnReset::Zero);
        assert_eq!(vfs[0].max_contexts(), 32);
    }

    #[test]
    fn quotas_beyond_the_device_are_refused_by_name() {
        let spec = |s: &str| s.parse::<VfSpec>().unwrap();
        let err = |specs: &[VfSpec]| plan(&device(256), specs).unwrap_err().to_string();
        assert!(err(&[]).contains("1..=8"));
        assert!(err(&vec![VfSpec::default(); 9]).contains("1..=8"));
        let e = err(&[spec("contexts=40"), spec("contexts=40")]);
        assert!(
            e.starts_with("virtual function 2: 40 contexts: 24 of 64"),
            "{e}"
        );
        let e = err(&[spec("vram=200M"), spec("vram=100M")]);
        assert!(
            e.contains("virtual function 2: 100 MiB of VRAM: 54 MiB are left"),
            "{e}"
        );
        assert!(err(&[spec("weight=0")]).contains("weight 0"));
        assert!(err(&[spec("vram=5M")]).contains("2 MiB"));
        assert!(err(&[spec("contexts=0")]).contains("0 contexts"));
        assert!(err(&[spec("vram=64M,visible=6M")]).contains("power of two"));
    }

    #[test]
    fn the_pf_builds_each_vfs_device() {
        let pf = PhysicalFunction::new(
            device(64),
            &["weight=3".parse().unwrap(), VfSpec::default()],
        )
        .unwrap();
        assert_eq!(pf.arbiter().weight(1), 3);
        assert_eq!(pf.arbiter().weight(2), 1);
        let d = pf.device(2).unwrap();
        assert_eq!(d.gpu().max_contexts(), 32);
        assert_eq!(d.gpu().vram.file_base(), 30 * MIB);
        assert!(pf.device(3).is_none());
        assert!(pf.device(0).is_none());
    }

    #[test]
    fn vfs_come_and_go_in_the_gaps_they_leave() {
        let spec = |s: &str| s.parse::<VfSpec>().unwrap();
        let pf = PhysicalFunction::new(
            device(130),
            &[spec("vram=32M,contexts=16"), spec("vram=32M,contexts=16")],
        )
        .unwrap();
        // 128 MiB usable: 32 + 32 taken, 64 left at offset 64 MiB.
        let c = pf.create(&spec("weight=4")).unwrap();
        let p = c.partition.unwrap();
        assert_eq!(
            (p.vf, p.contexts, p.vram_offset, c.vram.layout.size),
            (3, 8, 64 * MIB, 64 * MIB)
        );
        assert_eq!(pf.arbiter().weight(3), 4);
        let e = pf.create(&spec("vram=4M")).unwrap_err().to_string();
        assert!(
            e.contains("virtual function 4: 4 MiB of VRAM: 0 MiB are left"),
            "{e}"
        );
        // VF 1's window is free again and the next VF takes slot 1 and it.
        assert_eq!(pf.destroy(1).unwrap().partition.unwrap().vram_offset, 0);
        assert!(pf.destroy(1).is_err());
        let c = pf.create(&spec("vram=16M,contexts=40")).unwrap();
        assert_eq!(c.partition.unwrap().vf, 1);
        assert_eq!(c.partition.unwrap().vram_offset, 0);
        let e = pf.create(&spec("contexts=1")).unwrap_err().to_string();
        assert!(e.contains("0 of 64 are left"), "{e}");
        assert_eq!(pf.configs().len(), 3);
    }
}
