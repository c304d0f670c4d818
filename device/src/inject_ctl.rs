//! The fault-injection control socket: a Unix stream socket on which each
//! request is one line of text and each reply one line of JSON.
//!
//! | request | reply |
//! |---|---|
//! | `list` | `{"ok":true,"classes":[{"name":..,"about":..},..]}` |
//! | `arm SPEC` | `{"ok":true,"id":N}` (SPEC as for `--inject`) |
//! | `disarm ID` / `disarm all` | `{"ok":true}` |
//! | `status` | `{"ok":true,"seed":N,"lost":B,"armed":[{"id":..,"spec":..,"seen":..,"fired":..}]}` |
//! | `log [SINCE]` | `{"ok":true,"entries":[{"seq":..,"fault":..,"kind":..,"what":..,"device_ns":..,"wall_ns":..,"ctx":..,"engine":..,"detail":..}]}` |
//! | `seed N` | `{"ok":true}` (seeds faults armed afterwards) |
//! | `poisoned` | `{"ok":true,"pages":[PA,..]}` (pages poisoned by `ecc`) |
//! | `unpoison PA` / `unpoison all` | `{"ok":true,"cleared":N}` (forgets poison, as if the memory were replaced: resets do not) |
//! | `sanitize` / `sanitize status` | `{"ok":true,"checks":[ids],"mode":"report","reports":N,"suppressed":N,"by_check":{"SAN-…":N},"owned_pages":N}` |
//! | `sanitize on [CHECKS]` / `sanitize off` | the same (CHECKS as for `--sanitize`) |
//! | `sanitize mode report` / `sanitize mode stop` | the same |
//! | `sanitize reports [SINCE]` | `{"ok":true,"reports":[report JSON,..]}` (kept reports numbered above SINCE) |
//! | `capture CTX [ENGINE]` | `{"ok":true,"id":N,"size":N}` (a capture of the context now, see `core::capture`) |
//! | `captures` | `{"ok":true,"captures":[{"id":..,"ctx":..,"engine":..,"reason":..,"size":..}]}` |
//! | `capture-save ID PATH` | `{"ok":true,"size":N}` (writes capture ID, 0 = the newest, to PATH) |
//!
//! Errors reply `{"ok":false,"error":"..."}`. A connection may send any
//! number of requests; they are answered in order. The socket itself is
//! served by the device's event loop ([`crate::daemon::ControlServer`]).

use crate::core::json::json_str;
use std::io;

use vgpu_hwif::capture::reason;

use crate::core::gpu::Gpu;
use crate::core::inject::{Class, InjectError, Spec};

/// Why the control socket could not start.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// Binding the socket failed.
    #[error("cannot listen on {path}: {source}")]
    Bind {
        /// The path.
        path: String,
        /// The cause.
        source: io::Error,
    },
    /// The idle timer could not be created.
    #[error("cannot create the control socket's timer: {0}")]
    Timer(io::Error),
}

/// The error reply for `e`.
pub fn error_reply(e: impl std::fmt::Display) -> String {
    format!("{{\"ok\":false,\"error\":{}}}", json_str(&e.to_string()))
}

fn id_or_none(v: u32) -> String {
    if v == u32::MAX {
        "null".to_owned()
    } else {
        v.to_string()
    }
}

/// The sanitizer's state as a reply.
fn sanitize_status(gpu: &Gpu) -> String {
    let s = &gpu.sanitizer;
    let ids: Vec<String> = crate::core::sanitize::check_ids(s.checks())
        .into_iter()
        .map(json_str)
        .collect();
    let (counts, total, suppressed) = s.counts();
    let by: Vec<String> = vgpu_hwif::sanitize::Check::ALL
        .iter()
        .zip(counts.iter())
        .map(|(c, n)| format!("{}:{n}", json_str(c.id())))
        .collect();
    format!(
        "{{\"ok\":true,\"checks\":[{}],\"mode\":{},\"reports\":{total},\"suppressed\":{suppressed},\"by_check\":{{{}}},\"owned_pages\":{}}}",
        ids.join(","),
        json_str(if s.stop_mode() { "stop" } else { "report" }),
        by.join(","),
        s.shared.owned_pages()
    )
}

/// `sanitize ...`.
fn sanitize(gpu: &Gpu, arg: &str) -> String {
    let (sub, rest) = arg.split_once(' ').unwrap_or((arg, ""));
    let rest = rest.trim();
    let s = &gpu.sanitizer;
    match sub {
        "" | "status" => sanitize_status(gpu),
        "on" => match crate::core::sanitize::parse_checks(rest) {
            Ok(mask) => {
                s.set_checks(mask);
                sanitize_status(gpu)
            }
            Err(e) => error_reply(e),
        },
        "off" => {
            s.set_checks(0);
            sanitize_status(gpu)
        }
        "mode" => match rest {
            "report" | "stop" => {
                s.set_stop(rest == "stop");
                sanitize_status(gpu)
            }
            other => error_reply(crate::core::sanitize::SanError::UnknownMode(other.to_owned())),
        },
        "reports" => {
            let since = if rest.is_empty() {
                Ok(0)
            } else {
                rest.parse::<u64>()
            };
            match since {
                Ok(since) => {
                    let r: Vec<String> = s.log().since(since).iter().map(|r| r.json()).collect();
                    format!("{{\"ok\":true,\"reports\":[{}]}}", r.join(","))
                }
                Err(_) => error_reply(InjectError::BadValue {
                    key: "since".to_owned(),
                    value: rest.to_owned(),
                }),
            }
        }
        other => error_reply(format!(
            "unknown sanitize request '{other}' (status, on [CHECKS], off, mode report|stop, reports [SINCE])"
        )),
    }
}

/// What answers the control socket's request lines: one device's fault
/// injector ([`Gpu`]), or the physical function of a partitioned device
/// (`crate::pf_ctl`).
pub trait Requests: Send + Sync {
    /// The reply line (without its newline) to one request line.
    fn handle(&self, line: &str) -> String;
}

impl Requests for Gpu {
    fn handle(&self, line: &str) -> String {
        handle_line(self, line)
    }
}

/// Executes one request line against `gpu`'s injector; returns the reply
/// line (without the newline).
pub fn handle_line(gpu: &Gpu, line: &str) -> String {
    let line = line.trim();
    if let Some(r) = gpu.record.get() {
        r.log(
            crate::core::record::kind::CONTROL,
            crate::core::record::NO_ENGINE,
            gpu.clock.now_ns(),
            0,
            &[line.as_bytes()],
        );
    }
    let (verb, arg) = line.split_once(' ').unwrap_or((line, ""));
    let arg = arg.trim();
    let inj = &gpu.inject;
    match verb {
        "list" => {
            let classes: Vec<String> = Class::ALL
                .iter()
                .map(|c| {
                    format!(
                        "{{\"name\":{},\"about\":{}}}",
                        json_str(c.name()),
                        json_str(c.describe())
                    )
                })
                .collect();
            format!("{{\"ok\":true,\"classes\":[{}]}}", classes.join(","))
        }
        "arm" => match Spec::parse(arg) {
            Ok(spec) => {
                let id = inj.arm(spec, gpu.clock.now_ns());
                format!("{{\"ok\":true,\"id\":{id}}}")
            }
            Err(e) => error_reply(e),
        },
        "disarm" => {
            let id = if arg == "all" {
                Ok(0)
            } else {
                arg.parse::<u64>()
                    .ok()
                    .filter(|&n| n != 0)
                    .ok_or(InjectError::BadValue {
                        key: "id".to_owned(),
                        value: arg.to_owned(),
                    })
            };
            match id.and_then(|id| inj.disarm(id)) {
                Ok(()) => "{\"ok\":true}".to_owned(),
                Err(e) => error_reply(e),
            }
        }
        "status" => {
            let armed: Vec<String> = inj
                .status()
                .iter()
                .map(|a| {
                    format!(
                        "{{\"id\":{},\"spec\":{},\"seen\":{},\"fired\":{}}}",
                        a.id,
                        json_str(&a.spec),
                        a.seen,
                        a.fired
                    )
                })
                .collect();
            format!(
                "{{\"ok\":true,\"seed\":{},\"lost\":{},\"armed\":[{}]}}",
                inj.seed(),
                inj.is_lost(),
                armed.join(",")
            )
        }
        "log" => {
            let since = if arg.is_empty() {
                Ok(0)
            } else {
                arg.parse::<u64>().map_err(|_| InjectError::BadValue {
                    key: "since".to_owned(),
                    value: arg.to_owned(),
                })
            };
            match since {
                Ok(since) => {
                    let entries: Vec<String> = inj
                        .log(since)
                        .iter()
                        .map(|e| {
                            format!(
                                "{{\"seq\":{},\"fault\":{},\"kind\":{},\"what\":{},\"device_ns\":{},\"wall_ns\":{},\"ctx\":{},\"engine\":{},\"detail\":{}}}",
                                e.seq,
                                e.fault,
                                json_str(e.kind),
                                json_str(&e.what),
                                e.device_ns,
                                e.wall_ns,
                                id_or_none(e.ctx),
                                id_or_none(e.engine),
                                json_str(&e.detail)
                            )
                        })
                        .collect();
                    format!("{{\"ok\":true,\"entries\":[{}]}}", entries.join(","))
                }
                Err(e) => error_reply(e),
            }
        }
        "seed" => match arg.parse::<u64>() {
            Ok(n) => {
                inj.set_seed(n);
                "{\"ok\":true}".to_owned()
            }
            Err(_) => error_reply(InjectError::BadValue {
                key: "seed".to_owned(),
                value: arg.to_owned(),
            }),
        },
        "poisoned" => {
            let pages: Vec<String> = inj.poison().pages().iter().map(|p| p.to_string()).collect();
            format!("{{\"ok\":true,\"pages\":[{}]}}", pages.join(","))
        }
        "unpoison" => {
            let pa = if arg == "all" {
                Ok(None)
            } else {
                crate::core::inject::parse_num("pa", arg).map(Some)
            };
            match pa {
                Ok(pa) => format!("{{\"ok\":true,\"cleared\":{}}}", inj.poison().clear(pa)),
                Err(e) => error_reply(e),
            }
        }
        "sanitize" => sanitize(gpu, arg),
        "capture" => {
            let mut it = arg.split_whitespace().map(str::parse::<u32>);
            match (it.next(), it.next()) {
                (Some(Ok(ctx)), e) if e.as_ref().is_none_or(|e| e.is_ok()) => {
                    let engine = e.and_then(Result::ok).unwrap_or(0);
                    match crate::core::capture_ctl::request(gpu, ctx, engine, reason::ON_DEMAND) {
                        Ok(c) => format!(
                            "{{\"ok\":true,\"id\":{},\"size\":{}}}",
                            c.id,
                            c.bytes.len()
                        ),
                        Err(e) => error_reply(e),
                    }
                }
                _ => error_reply("usage: capture CTX [ENGINE]"),
            }
        }
        "captures" => {
            let list: Vec<String> = gpu
                .capture
                .list()
                .iter()
                .map(|c| {
                    format!(
                        "{{\"id\":{},\"ctx\":{},\"engine\":{},\"reason\":{},\"size\":{}}}",
                        c.id,
                        c.ctx,
                        c.engine,
                        json_str(reason::name(c.reason)),
                        c.bytes.len()
                    )
                })
                .collect();
            format!("{{\"ok\":true,\"captures\":[{}]}}", list.join(","))
        }
        "capture-save" => {
            let (id, path) = arg.split_once(' ').unwrap_or((arg, ""));
            let c = match id.parse::<u32>() {
                Ok(0) => gpu.capture.newest(None),
                Ok(n) => gpu.capture.get(n),
                Err(_) => return error_reply("usage: capture-save ID PATH"),
            };
            match (c, path.trim()) {
                (_, "") => error_reply("usage: capture-save ID PATH"),
                (None, _) => error_reply("no such capture"),
                (Some(c), p) => match std::fs::write(p, c.bytes.as_slice()) {
                    Ok(()) => format!("{{\"ok\":true,\"size\":{}}}", c.bytes.len()),
                    Err(e) => error_reply(format!("{p}: {e}")),
                },
            }
        }
        _ => error_reply(format!(
            "unknown request '{verb}' (list, arm, disarm, status, log, seed, poisoned, unpoison, sanitize, capture, captures, capture-save)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::clock::ManualClock;
    use crate::core::gpu::GpuConfig;
    use std::sync::Arc;

    fn gpu() -> Gpu {
        let cfg = crate::config::DeviceConfig::default();
        Gpu::new(GpuConfig::for_device(&cfg), Arc::new(ManualClock::new(0)))
    }

    #[test]
    fn the_sanitizer_is_switched_and_read_on_the_socket() {
        let g = gpu();
        let off = handle_line(&g, "sanitize");
        assert!(
            off.starts_with("{\"ok\":true,\"checks\":[],\"mode\":\"report\",\"reports\":0"),
            "{off}"
        );
        let on = handle_line(&g, "sanitize on ring,fence-regress");
        assert!(
            on.contains(
                "\"checks\":[\"SAN-RING-UNPUBLISHED\",\"SAN-RING-INDEX\",\"SAN-FENCE-REGRESS\"]"
            ),
            "{on}"
        );
        assert_eq!(g.sanitizer.checks().count_ones(), 3);
        assert!(handle_line(&g, "sanitize mode stop").contains("\"mode\":\"stop\""));
        assert!(g.sanitizer.stop_mode());
        assert!(handle_line(&g, "sanitize mode loud").starts_with("{\"ok\":false"));
        assert!(handle_line(&g, "sanitize on bogus").starts_with("{\"ok\":false"));
        assert_eq!(
            handle_line(&g, "sanitize reports"),
            "{\"ok\":true,\"reports\":[]}"
        );
        let all = handle_line(&g, "sanitize on");
        assert!(all.contains("\"SAN-TEARDOWN\":0"), "{all}");
        handle_line(&g, "sanitize off");
        assert!(!g.sanitizer.enabled());
    }
}
