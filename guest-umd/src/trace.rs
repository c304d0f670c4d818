//! UMD spans for the one timeline: with `VGPU_TRACE=FILE` in the
//! environment, the library records what the application asked of it —
//! work queued (`Stream::copy`, `Stream::launch`, ...), batches flushed to
//! the KMD (with the job's context, engine and seqno), waits (how they
//! ended and for which fence), and every ioctl with its result — on
//! `CLOCK_MONOTONIC`, the clock of the KMD's trace. `vgpu-timeline merge`
//! joins them with the KMD's trace and the device's (docs/debugging.md,
//! "One timeline").
//!
//! Records are kept in memory and appended to FILE as JSON lines when the
//! process exits (an `atexit` handler; a process killed by a signal loses
//! them) or every [`FLUSH_EVERY`] records, each flush one `write` to a file
//! opened with `O_APPEND`, so several processes can share one file. The
//! first line of each process names it:
//! `{"process":"vgpu-samples","pid":12}`; each span is
//! `{"ts":NS,"dur":NS,"cat":"api","name":"Stream::copy","pid":12,"tid":12,"args":{...}}`.
//!
//! Without the variable a span costs one load of an initialised
//! `OnceLock` and a branch.

use std::fmt::Write as _;
use std::fs::OpenOptions;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

/// Records kept in memory before they are appended to the file.
pub const FLUSH_EVERY: usize = 4096;

/// Why the trace could not be written.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The file could not be opened or written.
    #[error("VGPU_TRACE={path}: {source}")]
    Write {
        /// The file.
        path: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

/// Arguments a span holds.
pub const MAX_ARGS: usize = 6;

/// A finished span as kept until the flush (formatted only then).
#[derive(Clone, Copy)]
struct Rec {
    cat: &'static str,
    name: &'static str,
    start: u64,
    end: u64,
    tid: u32,
    args: [(&'static str, i128); MAX_ARGS],
    nargs: usize,
}

/// The process's tracer.
struct Tracer {
    path: PathBuf,
    pid: u32,
    /// The first line, written by the first flush.
    head: Mutex<Option<String>>,
    recs: Mutex<Vec<Rec>>,
}

static TRACER: OnceLock<Option<Tracer>> = OnceLock::new();

thread_local! {
    static TID: u32 = {
        // SAFETY: `gettid` has no preconditions.
        unsafe { libc::gettid() as u32 }
    };
}

/// `CLOCK_MONOTONIC` in nanoseconds.
pub fn now_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid, writable timespec for the call.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    (t.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(t.tv_nsec as u64)
}

extern "C" fn flush_at_exit() {
    if let Some(t) = TRACER.get().and_then(Option::as_ref) {
        if let Err(e) = t.flush() {
            eprintln!("vgpu-umd: {e}");
        }
    }
}

fn tracer() -> Option<&'static Tracer> {
    TRACER
        .get_or_init(|| {
            let path = std::env::var_os("VGPU_TRACE").filter(|p| !p.is_empty())?;
            let pid = std::process::id();
            let comm = std::fs::read_to_string("/proc/self/comm").unwrap_or_default();
            let head = serde_json::json!({ "process": comm.trim(), "pid": pid });
            // SAFETY: `flush_at_exit` is an `extern "C" fn()` that stays
            // valid for the life of the process (a static function).
            unsafe { libc::atexit(flush_at_exit) };
            Some(Tracer::new(PathBuf::from(path), pid, head.to_string()))
        })
        .as_ref()
}

impl Tracer {
    fn new(path: PathBuf, pid: u32, head: String) -> Tracer {
        Tracer {
            path,
            pid,
            head: Mutex::new(Some(head)),
            recs: Mutex::new(Vec::with_capacity(FLUSH_EVERY)),
        }
    }

    fn push(&self, r: Rec) {
        let full = {
            let mut l = self.recs.lock().unwrap_or_else(|e| e.into_inner());
            l.push(r);
            l.len() >= FLUSH_EVERY
        };
        if full {
            if let Err(e) = self.flush() {
                eprintln!("vgpu-umd: {e}");
            }
        }
    }

    /// Formats the kept records and appends them to the file in one write.
    fn flush(&self) -> Result<(), TraceError> {
        let recs = std::mem::take(&mut *self.recs.lock().unwrap_or_else(|e| e.into_inner()));
        let head = self.head.lock().unwrap_or_else(|e| e.into_inner()).take();
        let mut text = String::new();
        for l in head
            .into_iter()
            .chain(recs.iter().map(|r| r.line(self.pid)))
        {
            text.push_str(&l);
            text.push('\n');
        }
        if text.is_empty() {
            return Ok(());
        }
        let err = |source| TraceError::Write {
            path: self.path.display().to_string(),
            source,
        };
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .map_err(err)?
            .write_all(text.as_bytes())
            .map_err(err)
    }
}

impl Rec {
    /// The record as one JSON line.
    fn line(&self, pid: u32) -> String {
        let mut line = format!(
            "{{\"ts\":{},\"dur\":{},\"cat\":{},\"name\":{},\"pid\":{},\"tid\":{},\"args\":{{",
            self.start,
            self.end.saturating_sub(self.start),
            serde_json::Value::from(self.cat),
            serde_json::Value::from(self.name),
            pid,
            self.tid
        );
        for (i, (k, v)) in self.args[..self.nargs].iter().enumerate() {
            let sep = if i == 0 { "" } else { "," };
            let _ = write!(line, "{sep}{}:{v}", serde_json::Value::from(*k));
        }
        line.push_str("}}");
        line
    }
}

/// One span: from [`span`] to its drop. Costs two clock reads and a push
/// under a mutex; it is formatted when the trace is flushed.
#[must_use = "a span ends when it is dropped"]
pub struct Span {
    rec: Rec,
}

/// Starts a span of category `cat` (`api`, `ioctl`, `wait`) named `name`,
/// if tracing.
#[inline]
pub fn span(cat: &'static str, name: &'static str) -> Option<Span> {
    tracer()?;
    Some(Span {
        rec: Rec {
            cat,
            name,
            start: now_ns(),
            end: 0,
            tid: TID.with(|t| *t),
            args: [("", 0); MAX_ARGS],
            nargs: 0,
        },
    })
}

impl Span {
    /// Sets argument `key` (later values replace earlier ones; past
    /// [`MAX_ARGS`] keys the new ones are dropped).
    pub fn set(&mut self, key: &'static str, value: impl Into<i128>) {
        let v = value.into();
        let r = &mut self.rec;
        if let Some(a) = r.args[..r.nargs].iter_mut().find(|(k, _)| *k == key) {
            a.1 = v;
        } else if r.nargs < MAX_ARGS {
            r.args[r.nargs] = (key, v);
            r.nargs += 1;
        }
    }
}

/// Sets argument `key` of an optional span.
#[inline]
pub fn set(span: &mut Option<Span>, key: &'static str, value: impl Into<i128>) {
    if let Some(s) = span.as_mut() {
        s.set(key, value);
    }
}

impl Drop for Span {
    fn drop(&mut self) {
        let Some(t) = tracer() else { return };
        self.rec.end = now_ns();
        t.push(self.rec);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_are_json_lines_appended_in_one_write_per_flush() {
        let dir = std::env::temp_dir().join(format!("vgpu-umd-trace-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.jsonl");
        let _ = std::fs::remove_file(&path);
        let t = Tracer::new(path.clone(), 12, "{\"process\":\"p\",\"pid\":12}".into());
        let mut s = Some(Span {
            rec: Rec {
                cat: "api",
                name: "Stream::flush",
                start: 1000,
                end: 1500,
                tid: 13,
                args: [("", 0); MAX_ARGS],
                nargs: 0,
            },
        });
        set(&mut s, "ctx", 3u32);
        set(&mut s, "seqno", 7u64);
        set(&mut s, "seqno", 8u64);
        set(&mut s, "ret", -11i32);
        for k in ["a", "b", "c", "d"] {
            set(&mut s, k, 1u8);
        }
        let s = s.unwrap();
        t.push(s.rec);
        std::mem::forget(s);
        t.flush().unwrap();
        // A second flush appends; an empty one writes nothing.
        t.push(Rec {
            cat: "wait",
            name: "x",
            start: 1,
            end: 2,
            tid: 1,
            args: [("", 0); MAX_ARGS],
            nargs: 0,
        });
        t.flush().unwrap();
        t.flush().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert_eq!(lines[0]["process"], "p");
        let l = &lines[1];
        assert_eq!(
            (l["ts"].as_u64(), l["dur"].as_u64()),
            (Some(1000), Some(500))
        );
        assert_eq!(
            (l["name"].as_str(), l["cat"].as_str()),
            (Some("Stream::flush"), Some("api"))
        );
        assert_eq!((l["pid"].as_u64(), l["tid"].as_u64()), (Some(12), Some(13)));
        // Six arguments at most: the last two were dropped.
        assert_eq!(
            l["args"],
            serde_json::json!({"ctx": 3, "seqno": 8, "ret": -11, "a": 1, "b": 1, "c": 1})
        );
        assert_eq!(
            (lines[2]["name"].as_str(), lines[2]["cat"].as_str()),
            (Some("x"), Some("wait"))
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_clock_is_monotonic_nanoseconds() {
        let a = now_ns();
        let b = now_ns();
        assert!(a > 0 && b >= a);
    }
}
