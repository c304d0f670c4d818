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
//!
//! Errors reply `{"ok":false,"error":"..."}`. A connection may send any
//! number of requests; they are answered in order. The socket itself is
//! served by the device's event loop ([`crate::daemon::ControlServer`]).

use std::io;

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

/// A JSON string literal.
pub fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
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

/// Executes one request line against `gpu`'s injector; returns the reply
/// line (without the newline).
pub fn handle_line(gpu: &Gpu, line: &str) -> String {
    let line = line.trim();
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
        _ => error_reply(format!(
            "unknown request '{verb}' (list, arm, disarm, status, log, seed, poisoned, unpoison)"
        )),
    }
}
