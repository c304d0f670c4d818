//! The operation mix, and the two phases that break the single-threaded
//! order: several threads on the same files while one of them closes a file
//! under the others, and a forked child working on the files it inherited
//! (and on one of its own that its exit closes).

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::expect::Tally;
use crate::oplog;
use crate::sys;
use crate::worker::Worker;

/// The operations and their weights.
pub const OPS: &[(&str, u32)] = &[
    ("get_param", 3),
    ("ping", 1),
    ("gem_create", 10),
    ("gem_close", 6),
    ("mmap", 4),
    ("vm_bind", 12),
    ("vm_unbind", 7),
    ("ctx_create", 4),
    ("ctx_destroy", 2),
    ("ctx_query", 3),
    ("submit", 16),
    ("wait", 8),
    ("fence_export", 4),
    ("fence_fd", 3),
    ("query_stats", 3),
    ("san_report", 2),
    ("host_map", 3),
    ("raw", 3),
    ("bad_arg", 2),
    ("core", 2),
    ("file", 1),
];

/// Whether `name` is an operation.
pub fn is_op(name: &str) -> bool {
    OPS.iter().any(|(n, _)| *n == name)
}

impl Worker {
    /// One operation chosen by weight among `allowed` (all if empty).
    pub fn run_one(&mut self, allowed: &[String]) {
        let weights: Vec<u32> = OPS
            .iter()
            .map(|(n, w)| {
                if allowed.is_empty() || allowed.iter().any(|a| a == n) {
                    *w
                } else {
                    0
                }
            })
            .collect();
        let op = OPS[self.rng.weighted(&weights)].0;
        if op == "file" {
            return self.op_file();
        }
        if op == "fence_fd" {
            return self.op_fence_fd();
        }
        let fi = match self.pick_file() {
            Some(fi) => fi,
            None if self.manages_files => match self.open_file() {
                Some(fi) => fi,
                None => return,
            },
            None => return,
        };
        self.cur_tainted = self.files[fi].lock().tainted;
        match op {
            "get_param" => self.op_get_param(fi),
            "ping" => self.op_ping(fi),
            "gem_create" => self.op_gem_create(fi),
            "gem_close" => self.op_gem_close(fi),
            "mmap" => self.op_mmap(fi),
            "vm_bind" => self.op_vm_bind(fi),
            "vm_unbind" => self.op_vm_unbind(fi),
            "ctx_create" => self.op_ctx_create(fi),
            "ctx_destroy" => self.op_ctx_destroy(fi),
            "ctx_query" => self.op_ctx_query(fi),
            "submit" => self.op_submit(fi),
            "wait" => self.op_wait(fi),
            "fence_export" => self.op_fence_export(fi),
            "query_stats" => self.op_query_stats(fi),
            "san_report" => self.op_san_report(fi),
            "host_map" => self.op_host_map(fi),
            "raw" => self.op_raw(fi),
            "bad_arg" => self.op_bad_arg(fi),
            "core" => self.op_core(fi),
            _ => unreachable!("operation {op}"),
        }
        self.cur_tainted = false;
    }

    /// Files with a kit and a context or two, for a phase.
    fn phase_files(&mut self, n: usize) -> Vec<Arc<crate::worker::Shared>> {
        let keep = std::mem::take(&mut self.files);
        let manages = std::mem::replace(&mut self.manages_files, true);
        for _ in 0..n {
            if let Some(fi) = self.open_file() {
                self.ensure_kit(fi);
                self.op_ctx_create(fi);
                self.op_ctx_create(fi);
                self.op_gem_create(fi);
            }
        }
        self.manages_files = manages;
        std::mem::replace(&mut self.files, keep)
    }

    /// `threads` workers on two fresh files for `ops` operations each;
    /// one of them closes one of the files after a random number of its
    /// operations, while the others go on using it.
    pub fn concurrent_phase(&mut self, threads: usize, ops: u64, allowed: &[String]) {
        let files = self.phase_files(2);
        if files.is_empty() {
            return;
        }
        oplog::log(
            self.id,
            &format!("concurrent phase: {threads} threads x {ops} ops"),
        );
        let closer = self.rng.below(threads as u64) as usize;
        let close_at = self.rng.below(ops.max(1));
        let victim = files[self.rng.below(files.len() as u64) as usize].clone();
        let mut handles = Vec::new();
        for t in 0..threads {
            let mut w = Worker::new(
                self.id * 100 + 1 + t as u32,
                self.rng.fork(t as u64),
                self.dev.clone(),
            );
            w.files = files.clone();
            w.relaxed = true;
            let victim = victim.clone();
            let allowed = allowed.to_vec();
            handles.push(std::thread::spawn(move || {
                for i in 0..ops {
                    if t == closer && i == close_at && !victim.closed.swap(true, Relaxed) {
                        oplog::log(w.id, &format!("close fd {} under the others", victim.fd));
                        sys::close(victim.fd);
                    }
                    w.run_one(&allowed);
                }
                w.release();
                std::mem::take(&mut w.tally)
            }));
        }
        for h in handles {
            match h.join() {
                Ok(t) => self.tally.merge(&t),
                Err(_) => {
                    println!("FAIL a concurrent worker panicked");
                    self.tally.unexpected += 1;
                }
            }
        }
        drop(victim);
        drop(files);
    }

    /// A child process works on the inherited files (answers not judged:
    /// the state is shared) and on a file of its own that its exit closes;
    /// the parent waits (at most 60 s), then closes the files it shared.
    pub fn fork_phase(&mut self, ops: u64, allowed: &[String]) {
        use std::io::Write as _;
        let _ = std::io::stdout().flush();
        oplog::log(self.id, &format!("fork: child runs {ops} ops"));
        // SAFETY: called while this is the only thread that runs fuzzing
        // code (phases are not nested, workers are joined); the child only
        // runs the fuzzer's own code and leaves with _exit.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            self.id += 1000;
            self.relaxed = true;
            self.rng = self.rng.fork(0xc41d);
            for _ in 0..ops / 2 {
                self.run_one(allowed);
            }
            // A file of its own, left open at exit.
            let own = self.phase_files(1);
            self.files = own;
            self.relaxed = false;
            for _ in 0..ops / 2 {
                self.run_one(allowed);
            }
            let code = i32::from(self.tally.unexpected > 0);
            let _ = std::io::stdout().flush();
            // SAFETY: ends the child without running the parent's
            // destructors a second time.
            unsafe { libc::_exit(code) };
        }
        if pid < 0 {
            return;
        }
        let start = Instant::now();
        let mut status = 0;
        loop {
            // SAFETY: waits for our own child; `status` is a local.
            let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
            if r == pid {
                break;
            }
            if start.elapsed() > Duration::from_secs(60) {
                oplog::dump(b"the forked child did not finish in 60 s");
                // SAFETY: our own child.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                    libc::waitpid(pid, &mut status, 0);
                }
                self.tally.unexpected += 1;
                break;
            }
            oplog::DONE.fetch_add(1, Relaxed);
            std::thread::sleep(Duration::from_millis(20));
        }
        if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) != 0 {
            println!("FAIL the forked child saw unexpected answers");
            self.tally.unexpected += 1;
        } else if libc::WIFSIGNALED(status) && libc::WTERMSIG(status) != libc::SIGKILL {
            println!(
                "FAIL the forked child died of signal {}",
                libc::WTERMSIG(status)
            );
            self.tally.unexpected += 1;
        }
        // The child changed the shared files: start over with fresh ones.
        self.files.clear();
    }
}

/// The counts of a finished run, for the summary.
pub fn summary(t: &Tally, secs: f64) -> Vec<String> {
    let mut v = vec![format!(
        "ioctl-fuzz: {} calls in {secs:.1} s ({} succeeded), {} unexpected",
        t.calls,
        t.succeeded(),
        t.unexpected
    )];
    v.extend(t.lines());
    v
}
