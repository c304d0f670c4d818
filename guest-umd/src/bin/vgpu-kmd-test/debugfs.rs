//! Readers of the KMD's debugfs files (`vms`, `objects`, `contexts`, ...).

#![allow(unused_imports)]
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::PathBuf;

use vgpu_umd::uapi::{self, param};
use vgpu_umd::Device;

use crate::node::*;
use crate::report::*;

pub fn debugfs(name: &str) -> String {
    let Ok(dir) = std::fs::read_dir("/sys/kernel/debug/vgpu") else {
        return String::new();
    };
    for e in dir.flatten() {
        if let Ok(s) = std::fs::read_to_string(e.path().join(name)) {
            return s;
        }
    }
    String::new()
}

/// Path of debugfs file `name` of the (first) device.
pub fn debugfs_path(name: &str) -> PathBuf {
    std::fs::read_dir("/sys/kernel/debug/vgpu")
        .ok()
        .and_then(|d| d.flatten().next())
        .map_or_else(|| PathBuf::from("/nonexistent"), |e| e.path().join(name))
}

/// The debugfs `vms` line of the mapping at `va`, if any.
pub fn vm_line(va: u64) -> Option<String> {
    let key = format!("map va {:#x} ", va);
    debugfs("vms")
        .lines()
        .find(|l| l.trim_start().starts_with(&key))
        .map(|l| l.trim().to_string())
}

pub fn field(line: &str, name: &str) -> Option<String> {
    let mut it = line.split_whitespace();
    while let Some(w) = it.next() {
        if w == name {
            return it.next().map(str::to_string);
        }
    }
    None
}

pub fn objects() -> Vec<(String, i64)> {
    debugfs("objects")
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k.to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

pub fn object(name: &str) -> i64 {
    objects()
        .into_iter()
        .find(|(k, _)| k == name)
        .map_or(-1, |(_, v)| v)
}
