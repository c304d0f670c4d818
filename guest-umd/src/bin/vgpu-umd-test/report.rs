//! The check reporter: one `ok NAME` / `FAIL NAME: why` line per check;
//! the counts for the closing line.

use vgpu_umd::Error;

pub struct T {
    pub passed: u32,
    pub failed: u32,
}

impl T {
    pub fn check(&mut self, name: &str, ok: bool, why: impl FnOnce() -> String) -> bool {
        if ok {
            self.passed += 1;
            println!("ok {name}");
        } else {
            self.failed += 1;
            println!("FAIL {name}: {}", why());
        }
        ok
    }

    pub fn ok<V>(&mut self, name: &str, r: vgpu_umd::Result<V>) -> Option<V> {
        match r {
            Ok(v) => {
                self.check(name, true, String::new);
                Some(v)
            }
            Err(e) => {
                self.check(name, false, || e.to_string());
                None
            }
        }
    }

    pub fn err<V>(&mut self, name: &str, r: vgpu_umd::Result<V>, want: impl Fn(&Error) -> bool) {
        match r {
            Ok(_) => self.check(name, false, || "succeeded".into()),
            Err(e) => {
                let s = e.to_string();
                self.check(name, want(&e), || format!("wrong error: {s}"))
            }
        };
    }
}
