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
//! number of requests; the server handles one connection at a time.

use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;

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
    /// The server thread could not start.
    #[error("cannot start the control thread: {0}")]
    Thread(io::Error),
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

fn err(e: impl std::fmt::Display) -> String {
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
            Err(e) => err(e),
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
                Err(e) => err(e),
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
                Err(e) => err(e),
            }
        }
        "seed" => match arg.parse::<u64>() {
            Ok(n) => {
                inj.set_seed(n);
                "{\"ok\":true}".to_owned()
            }
            Err(_) => err(InjectError::BadValue {
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
                Err(e) => err(e),
            }
        }
        _ => err(format!(
            "unknown request '{verb}' (list, arm, disarm, status, log, seed, poisoned, unpoison)"
        )),
    }
}

fn serve_client(gpu: &Gpu, stream: UnixStream) -> io::Result<()> {
    let mut out = stream.try_clone()?;
    for line in BufReader::new(stream).lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let reply = handle_line(gpu, &line);
        out.write_all(reply.as_bytes())?;
        out.write_all(b"\n")?;
    }
    Ok(())
}

/// The control socket's file: removed when this is dropped (the device
/// exiting), unless something else has replaced it meanwhile.
#[derive(Debug)]
pub struct ControlSocket {
    path: PathBuf,
    id: Option<(u64, u64)>,
}

fn file_id(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

impl ControlSocket {
    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Removes the socket file now if it is still the one bound.
    pub fn remove(&self) {
        if self.id.is_some() && file_id(&self.path) == self.id {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

impl Drop for ControlSocket {
    fn drop(&mut self) {
        self.remove();
    }
}

/// Listens on `path` (a stale socket there is replaced) and serves
/// requests on a thread for the life of the process. The socket file is
/// removed when the returned handle is dropped.
pub fn spawn(path: &Path, gpu: Arc<Gpu>) -> Result<ControlSocket, ControlError> {
    let _ = std::fs::remove_file(path);
    let listener = UnixListener::bind(path).map_err(|source| ControlError::Bind {
        path: path.display().to_string(),
        source,
    })?;
    let guard = ControlSocket {
        path: path.to_path_buf(),
        id: file_id(path),
    };
    std::thread::Builder::new()
        .name("vgpu-inject-ctl".to_owned())
        .spawn(move || {
            for stream in listener.incoming() {
                match stream {
                    Ok(s) => {
                        if let Err(e) = serve_client(&gpu, s) {
                            log::debug!("inject control client: {e}");
                        }
                    }
                    Err(e) => log::warn!("inject control socket: {e}"),
                }
            }
        })
        .map_err(ControlError::Thread)?;
    Ok(guard)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{DeviceConfig, Generation};
    use crate::core::Device;

    #[test]
    fn the_socket_file_goes_with_its_handle_but_not_a_replacement() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ctl.sock");
        let gpu = Device::new(DeviceConfig::new(Generation::Gen2, 1).unwrap())
            .gpu()
            .clone();
        let guard = spawn(&path, gpu.clone()).unwrap();
        let mut c = UnixStream::connect(&path).unwrap();
        c.write_all(b"status\n").unwrap();
        let mut line = String::new();
        BufReader::new(&c).read_line(&mut line).unwrap();
        assert!(line.starts_with("{\"ok\":true"), "{line}");
        drop(guard);
        assert!(!path.exists());
        // A socket bound again at the path by someone else stays.
        let guard = spawn(&path, gpu).unwrap();
        std::fs::remove_file(&path).unwrap();
        let _other = UnixListener::bind(&path).unwrap();
        drop(guard);
        assert!(path.exists());
    }
}
