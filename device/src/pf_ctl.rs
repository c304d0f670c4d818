//! The physical function's control requests: the host's view and
//! management of a partitioned device's VFs, over the control socket
//! (`vgpu-device --vf ... --control PATH`; `vgpu-pf` is its CLI).
//!
//! | request | does |
//! |---|---|
//! | `vf list` | every VF: partition, weight, frontend, resets, engine use (JSON) |
//! | `vf create SPEC` | a new VF while the device runs (`contexts=N,vram=SIZE,visible=SIZE,weight=W,socket=PATH`): its socket appears for its VM |
//! | `vf destroy N` | VF `N` removed: its VM, if one is attached, is disconnected; its contexts and VRAM window go back to the device |
//! | `vf weight N W` | VF `N`'s scheduling weight from its next turn on |
//! | `vf reset N` | a function-level reset of VF `N` (the host's FLR): its work is dropped, its driver hears `RESET_DONE`, the other VFs run on |
//! | `vf fairness` | per engine: each VF's share of the engine time against its weight's share |
//! | `vf N REQUEST` | a fault-injection or sanitizer request (`vgpu-inject`) to VF `N` |
//!
//! Every reply is one JSON line with `"ok"`.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use crate::core::gpu::Gpu;
use crate::core::json::json_str;
use crate::inject_ctl::{error_reply, handle_line, Requests};
use crate::pf::PhysicalFunction;

const ENGINE_NAMES: [&str; 2] = ["copy", "compute"];

/// One VF as the host sees it.
#[derive(Debug, Default)]
pub struct VfState {
    /// Its device while one exists (replaced after each frontend).
    pub gpu: Option<Arc<Gpu>>,
    /// Its vhost-user socket.
    pub socket: PathBuf,
    /// A frontend (a VM) is connected.
    pub connected: bool,
    /// Frontends served so far.
    pub frontends: u64,
    /// Function-level resets the host asked for.
    pub flrs: u64,
}

/// A VF created or destroyed on the control socket, for the daemon's loop
/// to start or end its socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// VF `n` exists now: serve its socket.
    Created(u32),
    /// VF `n` is gone: end its session.
    Destroyed(u32),
}

/// The VFs of one physical function, as the control socket sees them.
#[derive(Debug)]
pub struct VfTable {
    pf: Arc<PhysicalFunction>,
    /// Default sockets are `BASE.vfN`.
    socket_base: PathBuf,
    /// Slot `vf - 1` of every possible VF.
    vfs: Vec<Mutex<VfState>>,
    changes: Mutex<Vec<Change>>,
    wake: vmm_sys_util::eventfd::EventFd,
}

impl VfTable {
    /// The table of `pf`'s VFs with their sockets (`sockets[i]` for VF
    /// `i + 1`); VFs created later default to `socket_base.vfN`.
    ///
    /// # Errors
    /// The wake-up eventfd cannot be made.
    pub fn new(
        pf: Arc<PhysicalFunction>,
        sockets: Vec<PathBuf>,
        socket_base: PathBuf,
    ) -> std::io::Result<Self> {
        let mut sockets = sockets.into_iter();
        let vfs = (0..crate::config::MAX_VFS)
            .map(|_| {
                Mutex::new(VfState {
                    socket: sockets.next().unwrap_or_default(),
                    ..VfState::default()
                })
            })
            .collect();
        Ok(VfTable {
            pf,
            socket_base,
            vfs,
            changes: Mutex::new(Vec::new()),
            wake: vmm_sys_util::eventfd::EventFd::new(vmm_sys_util::eventfd::EFD_NONBLOCK)?,
        })
    }

    /// The eventfd rung when a VF was created or destroyed.
    pub fn wake_fd(&self) -> &vmm_sys_util::eventfd::EventFd {
        &self.wake
    }

    /// The VFs created and destroyed since the last call, in order.
    pub fn take_changes(&self) -> Vec<Change> {
        let _ = self.wake.read();
        std::mem::take(&mut *self.changes.lock().unwrap_or_else(PoisonError::into_inner))
    }

    fn changed(&self, c: Change) {
        self.changes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(c);
        if let Err(e) = self.wake.write(1) {
            log::warn!("cannot wake the device's loop: {e}");
        }
    }

    fn create(&self, spec: &str) -> Result<String, String> {
        let spec: crate::pf::VfSpec = spec.parse()?;
        // The loop binds the socket later: refuse at once what it could
        // not bind, before a slot is taken.
        if let Some(sock) = &spec.socket {
            let dir = sock.parent().filter(|d| !d.as_os_str().is_empty());
            if dir.is_some_and(|d| !d.is_dir()) {
                return Err(format!("socket {}: no such directory", sock.display()));
            }
            let taken = self
                .pf
                .configs()
                .iter()
                .filter_map(|c| c.partition)
                .any(|p| self.with(p.vf, |s| s.socket == *sock).unwrap_or(false));
            if taken {
                return Err(format!("socket {} is another VF's", sock.display()));
            }
        }
        let cfg = self.pf.create(&spec).map_err(|e| e.to_string())?;
        let Some(p) = cfg.partition else {
            return Err("the new VF has no partition".into());
        };
        let socket = spec
            .socket
            .clone()
            .unwrap_or_else(|| PathBuf::from(format!("{}.vf{}", self.socket_base.display(), p.vf)));
        self.with(p.vf, |s| {
            *s = VfState {
                socket: socket.clone(),
                ..VfState::default()
            }
        });
        log::info!("virtual function {} created by the host", p.vf);
        self.changed(Change::Created(p.vf));
        Ok(format!(
            "{{\"ok\":true,\"vf\":{},\"socket\":{},\"contexts\":{},\"vram_offset\":{},\"vram_size\":{},\"visible_vram_size\":{},\"weight\":{}}}",
            p.vf,
            json_str(&socket.display().to_string()),
            p.contexts,
            p.vram_offset,
            cfg.vram.layout.size,
            cfg.vram.layout.visible,
            p.weight
        ))
    }

    fn destroy(&self, vf: u32) -> Result<String, String> {
        self.pf.destroy(vf).map_err(|e| e.to_string())?;
        let connected = self.with(vf, |s| s.connected).unwrap_or(false);
        log::warn!(
            "virtual function {vf} destroyed by the host{}",
            if connected { " while its VM runs" } else { "" }
        );
        self.changed(Change::Destroyed(vf));
        Ok(format!(
            "{{\"ok\":true,\"vf\":{vf},\"was_connected\":{connected}}}"
        ))
    }

    /// The physical function.
    pub fn pf(&self) -> &Arc<PhysicalFunction> {
        &self.pf
    }

    /// Changes VF `vf`'s state (1-based); `None` if there is no such VF.
    pub fn with<R>(&self, vf: u32, f: impl FnOnce(&mut VfState) -> R) -> Option<R> {
        let i = usize::try_from(vf.checked_sub(1)?).ok()?;
        let slot = self.vfs.get(i)?;
        Some(f(&mut slot.lock().unwrap_or_else(PoisonError::into_inner)))
    }

    fn gpu(&self, vf: u32) -> Result<Arc<Gpu>, String> {
        self.with(vf, |s| s.gpu.clone())
            .ok_or_else(|| format!("no virtual function {vf} (1..={})", self.vfs.len()))?
            .ok_or_else(|| format!("virtual function {vf} has no device right now"))
    }

    fn list(&self) -> String {
        let mut out = String::from("{\"ok\":true,\"vfs\":[");
        for (i, cfg) in self.pf.configs().iter().enumerate() {
            let Some(p) = cfg.partition else { continue };
            let (socket, connected, frontends, flrs, gpu) = self
                .with(p.vf, |s| {
                    (
                        s.socket.clone(),
                        s.connected,
                        s.frontends,
                        s.flrs,
                        s.gpu.clone(),
                    )
                })
                .unwrap_or_default();
            let (resets, faults) = gpu.as_ref().map_or((0, 0), |g| {
                let st = g.lock();
                (st.device_resets, st.next_fault_id.saturating_sub(1))
            });
            if i > 0 {
                out.push(',');
            }
            let _ = write!(
                out,
                "{{\"vf\":{},\"socket\":{},\"contexts\":{},\"vram_offset\":{},\"vram_size\":{},\
                 \"visible_vram_size\":{},\"weight\":{},\"connected\":{connected},\
                 \"frontends\":{frontends},\"flrs\":{flrs},\"device_resets\":{resets},\
                 \"faults\":{faults},\"engines\":{{",
                p.vf,
                json_str(&socket.display().to_string()),
                p.contexts,
                p.vram_offset,
                cfg.vram.layout.size,
                cfg.vram.layout.visible,
                self.pf.arbiter().weight(p.vf),
            );
            for (e, name) in ENGINE_NAMES.iter().enumerate() {
                let u = self.pf.arbiter().usage(e, p.vf);
                if e > 0 {
                    out.push(',');
                }
                let _ = write!(
                    out,
                    "\"{name}\":{{\"busy_ns\":{},\"waited_ns\":{},\"max_wait_ns\":{},\"grants\":{}}}",
                    u.busy_ns, u.waited_ns, u.max_wait_ns, u.grants
                );
            }
            out.push_str("}}");
        }
        out.push_str("]}");
        out
    }

    fn fairness(&self) -> String {
        let arb = self.pf.arbiter();
        let vfs: Vec<u32> = self
            .pf
            .configs()
            .iter()
            .filter_map(|c| c.partition.map(|p| p.vf))
            .collect();
        let mut out = String::from("{\"ok\":true,\"engines\":{");
        for (e, name) in ENGINE_NAMES.iter().enumerate() {
            let used: Vec<(u32, u64)> = vfs.iter().map(|&v| (v, arb.usage(e, v).busy_ns)).collect();
            let total: u64 = used.iter().map(|&(_, b)| b).sum();
            // The weights of the VFs that used the engine at all.
            let weights: u64 = used
                .iter()
                .filter(|&&(_, b)| b > 0)
                .map(|&(v, _)| u64::from(arb.weight(v)))
                .sum();
            if e > 0 {
                out.push(',');
            }
            let _ = write!(out, "\"{name}\":{{\"busy_ns\":{total},\"vfs\":[");
            for (k, &(v, b)) in used.iter().enumerate() {
                let share = if total > 0 {
                    b as f64 / total as f64
                } else {
                    0.0
                };
                let due = if b > 0 && weights > 0 {
                    f64::from(arb.weight(v)) / weights as f64
                } else {
                    0.0
                };
                if k > 0 {
                    out.push(',');
                }
                let _ = write!(
                    out,
                    "{{\"vf\":{v},\"weight\":{},\"busy_ns\":{b},\"share\":{share:.4},\"weighted_share\":{due:.4}}}",
                    arb.weight(v)
                );
            }
            out.push_str("]}");
        }
        out.push_str("}}");
        out
    }

    fn reset(&self, vf: u32) -> String {
        let gpu = match self.gpu(vf) {
            Ok(g) => g,
            Err(e) => return error_reply(e),
        };
        match crate::core::reset::reset_device(&gpu, true) {
            Ok(vram) => {
                self.with(vf, |s| s.flrs += 1);
                log::warn!("virtual function {vf}: function-level reset by the host");
                format!("{{\"ok\":true,\"vf\":{vf},\"vram\":{vram}}}")
            }
            Err(e) => error_reply(format!("virtual function {vf}: {e}")),
        }
    }
}

fn number(s: Option<&str>, what: &str) -> Result<u32, String> {
    s.and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("{what}: a number"))
}

impl Requests for VfTable {
    fn handle(&self, line: &str) -> String {
        let mut words = line.split_whitespace();
        if words.next() != Some("vf") {
            return error_reply(
                "a partitioned device answers vf requests: vf list, vf create SPEC, vf destroy N, \
                 vf weight N W, vf reset N, vf fairness, vf N REQUEST",
            );
        }
        let rest: Vec<&str> = words.collect();
        let reply = match rest.as_slice() {
            ["list"] => Ok(self.list()),
            ["create", spec @ ..] => self.create(&spec.join(",")),
            ["destroy", n] => number(Some(n), "vf destroy N").and_then(|n| self.destroy(n)),
            ["fairness"] => Ok(self.fairness()),
            ["weight", n, w] => number(Some(n), "vf weight N")
                .and_then(|n| Ok((n, number(Some(w), "vf weight N W")?)))
                .and_then(|(n, w)| {
                    if self.pf.config(n).is_none() {
                        return Err(format!("no virtual function {n}"));
                    }
                    self.pf
                        .arbiter()
                        .set_weight(n, w)
                        .map_err(|e| e.to_string())?;
                    Ok(format!("{{\"ok\":true,\"vf\":{n},\"weight\":{w}}}"))
                }),
            ["reset", n] => number(Some(n), "vf reset N").map(|n| self.reset(n)),
            [n, request @ ..] if n.parse::<u32>().is_ok() && !request.is_empty() => {
                number(Some(n), "vf N")
                    .and_then(|n| self.gpu(n))
                    .map(|g| handle_line(&g, &request.join(" ")))
            }
            _ => Err(format!("unknown vf request '{}'", rest.join(" "))),
        };
        reply.unwrap_or_else(error_reply)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{DeviceConfig, Generation, VramConfig, VramOnReset};

    fn table() -> VfTable {
        let device = DeviceConfig::new(Generation::Gen2, 2)
            .unwrap()
            .with_vram(VramConfig::new(66 << 20, 16 << 20, VramOnReset::Keep).unwrap());
        let specs = [
            "weight=2,contexts=16,vram=16M".parse().unwrap(),
            "contexts=16,vram=16M".parse().unwrap(),
        ];
        let pf = Arc::new(PhysicalFunction::new(device, &specs).unwrap());
        VfTable::new(
            pf,
            vec!["/tmp/a.vf1".into(), "/tmp/a.vf2".into()],
            "/tmp/a".into(),
        )
        .unwrap()
    }

    #[test]
    fn list_weight_and_errors() {
        let t = table();
        let v: serde_json::Value = serde_json::from_str(&t.handle("vf list")).unwrap();
        assert_eq!(v["vfs"][0]["weight"], 2);
        assert_eq!(v["vfs"][1]["vram_offset"], 16 << 20);
        assert_eq!(v["vfs"][1]["contexts"], 16);
        assert_eq!(v["vfs"][1]["socket"], "/tmp/a.vf2");
        assert_eq!(v["vfs"][0]["connected"], false);
        assert!(t.handle("vf weight 2 5").contains("\"ok\":true"));
        assert_eq!(t.pf().arbiter().weight(2), 5);
        for bad in [
            "vf weight 3 1",
            "vf weight 1 0",
            "vf weight x",
            "vf reset 1",
            "vf 9 list",
            "list",
            "vf nonsense",
        ] {
            let r = t.handle(bad);
            assert!(r.contains("\"ok\":false"), "{bad}: {r}");
        }
        let f: serde_json::Value = serde_json::from_str(&t.handle("vf fairness")).unwrap();
        assert_eq!(f["engines"]["copy"]["busy_ns"], 0);
    }

    #[test]
    fn requests_reach_the_vfs_own_injector_and_reset() {
        let t = table();
        let dev = t.pf().device(1).unwrap();
        t.with(1, |s| s.gpu = Some(dev.gpu().clone()));
        let r = t.handle("vf 1 arm hang:engine=copy,packet=FENCE");
        assert!(r.contains("\"ok\":true"), "{r}");
        assert_eq!(dev.gpu().inject.status().len(), 1);
        let r = t.handle("vf 1 disarm all");
        assert!(r.contains("\"ok\":true"), "{r}");
        let before = dev.gpu().lock().device_resets;
        assert!(t.handle("vf reset 1").contains("\"ok\":true"));
        assert_eq!(dev.gpu().lock().device_resets, before + 1);
        let v: serde_json::Value = serde_json::from_str(&t.handle("vf list")).unwrap();
        assert_eq!(v["vfs"][0]["flrs"], 1);
        assert!(t.handle("vf 2 list").contains("no device"));
    }

    #[test]
    fn vfs_created_and_destroyed_are_told_to_the_loop() {
        let t = table();
        let v: serde_json::Value =
            serde_json::from_str(&t.handle("vf create contexts=4,vram=8M weight=3")).unwrap();
        assert_eq!(v["vf"], 3, "{v}");
        assert_eq!(v["socket"], "/tmp/a.vf3");
        assert_eq!(v["vram_offset"], 32 << 20);
        assert_eq!(v["weight"], 3);
        assert!(t.handle("vf create vram=64M").contains("are left"));
        assert!(t.handle("vf create colour=red").contains("\"ok\":false"));
        assert!(t
            .handle("vf create socket=/nonexistent-dir/x.sock")
            .contains("no such directory"));
        assert!(t
            .handle("vf create socket=/tmp/a.vf1")
            .contains("another VF's"));
        let v: serde_json::Value = serde_json::from_str(&t.handle("vf destroy 1")).unwrap();
        assert_eq!(v["was_connected"], false, "{v}");
        assert!(t.handle("vf destroy 1").contains("\"ok\":false"));
        assert_eq!(
            t.take_changes(),
            vec![Change::Created(3), Change::Destroyed(1)]
        );
        assert!(t.take_changes().is_empty());
        let l: serde_json::Value = serde_json::from_str(&t.handle("vf list")).unwrap();
        let vfs: Vec<u64> = l["vfs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["vf"].as_u64().unwrap())
            .collect();
        assert_eq!(vfs, [2, 3]);
    }
}
