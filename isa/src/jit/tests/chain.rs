//! The generated code going on from an idle warp to the next one
//! (`chain.rs`): what the scheduler does between warps must still happen —
//! the cancel flag stops it, a budget used up stops it where the
//! interpreter stops, and a fault in a later warp leaves the counters of
//! the warps before it.

use super::*;
use crate::exec::{Outcome, Stats};
use crate::mem::{Access, DirectPage, GlobalMemory, MemFault};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

const BUF: u64 = 0x10_0000;
const OUT: u64 = 0x20_0000;

/// Every thread loads `buf[tid]` and stores it plus one to `out[tid]`.
const COPY: &str = r"
.kernel copy
.arg buf ptr
.arg out ptr
    s2r     r0, %tid.x
    mov     r1, 4
    ldarg   d2, [buf]
    mad.wide.u32 d2, r0, r1, d2
    ldarg   d4, [out]
    mad.wide.u32 d4, r0, r1, d4
    ld.32   r6, [d2]
    add     r6, r6, 1
    st.32   [d4], r6
    exit
.end
";

/// A memory that sets a flag when the generated code first asks for a
/// page (the first warp's first access), as another thread cancelling the
/// dispatch at that moment would.
struct Cancelling<'f> {
    mem: SparseMemory,
    flag: &'f AtomicBool,
    asked: AtomicU32,
}

impl GlobalMemory for Cancelling<'_> {
    fn load(&self, va: u64, size: u8) -> Result<u64, MemFault> {
        self.mem.load(va, size)
    }
    fn store(&self, va: u64, size: u8, value: u64) -> Result<(), MemFault> {
        self.mem.store(va, size, value)
    }
    fn atomic32(&self, va: u64, op: AtomOp, b: u32, c: u32) -> Result<u32, MemFault> {
        self.mem.atomic32(va, op, b, c)
    }
    fn direct_page(&self, va: u64, access: Access) -> Option<DirectPage> {
        self.asked.fetch_add(1, Ordering::Relaxed);
        self.flag.store(true, Ordering::Relaxed);
        GlobalMemory::direct_page(&self.mem, va, access)
    }
    fn direct_epoch(&self) -> u64 {
        GlobalMemory::direct_epoch(&self.mem)
    }
}

fn memory() -> SparseMemory {
    let mut m = SparseMemory::new();
    m.map(BUF, PAGE_SIZE, true);
    m.map(OUT, PAGE_SIZE, true);
    let words: Vec<u32> = (0..PAGE_SIZE as u32 / 4).map(|i| 0x100 + i).collect();
    m.write_u32s(BUF, &words).unwrap();
    m
}

fn launch(m: &Module, wg: u32, buf: u64) -> Arc<Launch> {
    let mut args = Vec::new();
    for a in [buf, OUT] {
        args.extend_from_slice(&a.to_le_bytes());
    }
    Arc::new(Launch::by_index(m, 0, [1, 1, 1], [wg, 1, 1], args, 0).unwrap())
}

fn native(m: &Arc<Module>, wg: u32) -> Arc<super::super::JitKernel> {
    let jit = JitModule::compile(m).expect("compiles");
    Arc::clone(jit.kernel(0).expect("compiles")).for_shape([wg, 1, 1])
}

/// Four warps; the flag goes up during the first one's first access: the
/// code must not go on to the second warp (the scheduler checks the flag
/// after every warp), so exactly one warp's instructions ran.
#[test]
fn the_cancel_flag_stops_the_code_going_on_to_the_next_warp() {
    if super::super::host_support().is_err() {
        return;
    }
    let m = Arc::new(assembled(COPY));
    let code = native(&m, 128);
    let flag = AtomicBool::new(false);
    let mem = Cancelling {
        mem: memory(),
        flag: &flag,
        asked: AtomicU32::new(0),
    };
    let mut e = WorkgroupExec::new_shared(Arc::clone(&m), launch(&m, 128, BUF), [0; 3]).unwrap();
    assert!(e.set_jit(Some(code)));
    let lim = Limits {
        budget: 100_000,
        cancel: Some(&flag),
    };
    assert_eq!(e.run(&mem, lim), Ok(Outcome::Cancelled));
    assert!(
        mem.asked.load(Ordering::Relaxed) >= 1,
        "the code asked for a page"
    );
    let k = m.kernels()[0].len as u64;
    assert_eq!(
        e.stats(),
        Stats {
            warp_instructions: k,
            thread_instructions: 32 * k,
        },
        "one warp ran"
    );
    let out = mem.mem.read_u32s(OUT, 128).unwrap();
    assert!(out[..32]
        .iter()
        .enumerate()
        .all(|(i, &v)| v == 0x101 + i as u32));
    assert!(out[32..].iter().all(|&v| v == 0), "later warps did not run");
}

/// Budgets of every size over warps that end one after the other: each
/// slice stops where the interpreter's does (outcome, counters, memory).
#[test]
fn budgets_stop_the_code_between_warps_where_the_interpreter_stops() {
    if super::super::host_support().is_err() {
        return;
    }
    let m = Arc::new(assembled(COPY));
    let k = m.kernels()[0].len as u64;
    for wg in [64, 96, 128, 100] {
        let code = native(&m, wg);
        for slice in 1..=3 * k + 1 {
            let run = |jit: bool| {
                let mem = memory();
                let mut e =
                    WorkgroupExec::new_shared(Arc::clone(&m), launch(&m, wg, BUF), [0; 3]).unwrap();
                assert!(e.set_jit(jit.then(|| Arc::clone(&code))));
                let lim = Limits {
                    budget: slice,
                    cancel: None,
                };
                let mut trace = Vec::new();
                loop {
                    let r = e.run(&mem, lim);
                    trace.push((r, e.stats()));
                    if r != Ok(Outcome::Preempted) {
                        break;
                    }
                }
                (trace, mem.read_u32s(OUT, wg as usize).unwrap())
            };
            assert_eq!(run(false), run(true), "workgroup {wg}, slices of {slice}");
        }
    }
}

/// Warp 0 ends, warp 1 faults on its load: the counters are those of warp
/// 0 (a faulting warp's call keeps none), as on the interpreter.
#[test]
fn a_fault_in_a_later_warp_keeps_the_counters_of_the_warps_before() {
    if super::super::host_support().is_err() {
        return;
    }
    let m = Arc::new(assembled(COPY));
    let code = native(&m, 64);
    // `buf` so that warp 1's words (tids 32..63) lie past the mapped page.
    let buf = BUF + PAGE_SIZE - 128;
    let run = |jit: bool| {
        let mem = memory();
        let mut e = WorkgroupExec::new_shared(Arc::clone(&m), launch(&m, 64, buf), [0; 3]).unwrap();
        assert!(e.set_jit(jit.then(|| Arc::clone(&code))));
        let r = e.run(&mem, Limits::UNLIMITED);
        (r, e.stats(), mem.read_u32s(OUT, 64).unwrap())
    };
    let (a, b) = (run(false), run(true));
    assert!(a.0.is_err(), "warp 1 faults: {:?}", a.0);
    assert_eq!(a.1.warp_instructions, m.kernels()[0].len as u64);
    assert_eq!(a, b);
}
