//! The physical function's control requests: the host's view and
//! management of a partitioned device's VFs, over the control socket
//! (`vgpu-device --vf ... --control PATH`; `vgpu-pf` is its CLI).
//!
//! | request | does |
//! |---|---|
//! | `vf list` | every VF: partition, weight, frontend, resets, engine use (JSON) |
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

/// The VFs of one physical function, as the control socket sees them.
#[derive(Debug)]
pub struct VfTable {
    pf: Arc<PhysicalFunction>,
    vfs: Vec<Mutex<VfState>>,
}

impl VfTable {
    /// The table of `pf`'s VFs with their sockets (`sockets[i]` for VF
    /// `i + 1`).
    pub fn new(pf: Arc<PhysicalFunction>, sockets: Vec<PathBuf>) -> Self {
        let vfs = sockets
            .into_iter()
            .map(|socket| {
                Mutex::new(VfState {
                    socket,
                    ..VfState::default()
                })
            })
            .collect();
        VfTable { pf, vfs }
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
                "a partitioned device answers vf requests: vf list, vf weight N W, vf reset N, \
                 vf fairness, vf N REQUEST",
            );
        }
        let rest: Vec<&str> = words.collect();
        let reply = match rest.as_slice() {
            ["list"] => Ok(self.list()),
            ["fairness"] => Ok(self.fairness()),
            ["weight", n, w] => number(Some(n), "vf weight N")
                .and_then(|n| Ok((n, number(Some(w), "vf weight N W")?)))
                .and_then(|(n, w)| {
                    if self.with(n, |_| ()).is_none() {
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
        let specs = ["weight=2".parse().unwrap(), "".parse().unwrap()];
        let pf = Arc::new(PhysicalFunction::new(device, &specs).unwrap());
        VfTable::new(pf, vec!["/tmp/a.vf1".into(), "/tmp/a.vf2".into()])
    }

    #[test]
    fn list_weight_and_errors() {
        let t = table();
        let v: serde_json::Value = serde_json::from_str(&t.handle("vf list")).unwrap();
        assert_eq!(v["vfs"][0]["weight"], 2);
        assert_eq!(v["vfs"][1]["vram_offset"], 32 << 20);
        assert_eq!(v["vfs"][1]["contexts"], 32);
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
}
