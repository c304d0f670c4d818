//! Runs of lane-local instructions and memory accesses compiled as one
//! region (`fused.rs`): each run here is fused, and must give the
//! interpreter's memory where running four lanes at a time would not —
//! a store read back by other lanes, a store every lane makes to one word,
//! a store read through another VA of the same page — and where it does
//! (a read-modify-write of the same words).

use super::*;
use crate::exec::Outcome;
use crate::mem::{Access, DirectPage, GlobalMemory, MemFault};

const BUF: u64 = 0x10_0000;
const OUT: u64 = 0x20_0000;
/// A second VA of `BUF`'s first page (`Aliased`).
const ALIAS: u64 = 0x30_0000;

/// `SparseMemory` with `ALIAS`'s page mapped onto `BUF`'s.
struct Aliased(SparseMemory);

fn real(va: u64) -> u64 {
    if (ALIAS..ALIAS + PAGE_SIZE).contains(&va) {
        va - ALIAS + BUF
    } else {
        va
    }
}

impl GlobalMemory for Aliased {
    fn load(&self, va: u64, size: u8) -> Result<u64, MemFault> {
        self.0.load(real(va), size)
    }
    fn store(&self, va: u64, size: u8, value: u64) -> Result<(), MemFault> {
        self.0.store(real(va), size, value)
    }
    fn atomic32(&self, va: u64, op: AtomOp, b: u32, c: u32) -> Result<u32, MemFault> {
        self.0.atomic32(real(va), op, b, c)
    }
    fn direct_page(&self, va: u64, access: Access) -> Option<DirectPage> {
        let p = GlobalMemory::direct_page(&self.0, real(va), access)?;
        let va_base = va & !(p.len() - 1);
        // SAFETY: the same host page as `self.0`'s page at `real(va)`,
        // which `self.0` vouches for; this VA reaches exactly those bytes
        // through `load`/`store` above.
        unsafe { DirectPage::new(va_base, p.len(), p.host()) }
    }
    fn direct_epoch(&self) -> u64 {
        GlobalMemory::direct_epoch(&self.0)
    }
}

fn memory() -> Aliased {
    let mut m = SparseMemory::new();
    m.map(BUF, PAGE_SIZE, true);
    m.map(OUT, PAGE_SIZE, true);
    let words: Vec<u32> = (0..PAGE_SIZE as u32 / 4).map(|i| 0x5000_0000 | i).collect();
    m.write_u32s(BUF, &words).unwrap();
    Aliased(m)
}

/// Runs workgroup 0 of kernel `src` (arguments `buf`, `alias`, `out`) with
/// 64 threads on the interpreter and on native code; compares outcomes and
/// memory, and checks that the native code has a fused run.
fn check(src: &str) {
    if super::super::host_support().is_err() {
        return;
    }
    let m = Arc::new(assembled(src));
    let jit = JitModule::compile(&m).expect("compiles");
    let code = Arc::clone(jit.kernel(0).expect("compiles"));
    let shaped = code.for_shape([64, 1, 1]);
    assert!(
        shaped.native.fused_runs > 0,
        "no fused run in\n{}",
        crate::disassemble(&m)
    );
    let mut args = Vec::new();
    for a in [BUF, ALIAS, OUT] {
        args.extend_from_slice(&a.to_le_bytes());
    }
    let launch = Arc::new(Launch::by_index(&m, 0, [1, 1, 1], [64, 1, 1], args, 0).unwrap());
    let run = |native: bool| {
        let mem = memory();
        let mut e =
            WorkgroupExec::new_shared(Arc::clone(&m), Arc::clone(&launch), [0, 0, 0]).unwrap();
        assert!(e.set_jit(native.then(|| Arc::clone(&code))));
        let lim = Limits {
            budget: 100_000,
            cancel: None,
        };
        let outcome = e.run(&mem, lim);
        let words = |va| mem.0.read_u32s(va, (PAGE_SIZE / 4) as usize).unwrap();
        (outcome, words(BUF), words(OUT))
    };
    let (a, b) = (run(false), run(true));
    assert_eq!(a.0, Ok(Outcome::Completed));
    assert_eq!(a, b, "{}", crate::disassemble(&m));
}

/// The start of every kernel: `r0` = thread id, `d2` = &buf[tid],
/// `d4` = &out[tid], `d6` = &alias[tid].
const HEAD: &str = "
.kernel k
.arg buf ptr
.arg alias ptr
.arg out ptr
.workgroup 64
    s2r     r0, %tid.x
    mov     r1, 4
    ldarg   d2, [buf]
    mad.wide.u32 d2, r0, r1, d2
    ldarg   d4, [out]
    mad.wide.u32 d4, r0, r1, d4
    ldarg   d6, [alias]
    mad.wide.u32 d6, r0, r1, d6
    add     r8, r0, 100
";

#[test]
fn a_store_read_back_by_the_next_lane_is_seen() {
    check(&format!(
        "{HEAD}    st.32   [d2], r8\n    ld.32   r9, [d2+4]\n    add     r9, r9, 1\n    st.32   [d4], r9\n    exit\n.end\n"
    ));
}

#[test]
fn every_lane_storing_one_word_leaves_the_last_lanes_value() {
    check(&format!(
        "{HEAD}    ldarg   d10, [buf]\n    st.32   [d10], r8\n    ld.32   r9, [d10]\n    st.32   [d4], r9\n    exit\n.end\n"
    ));
}

#[test]
fn a_store_through_another_va_of_the_page_is_seen() {
    check(&format!(
        "{HEAD}    st.32   [d6], r8\n    ld.32   r9, [d2+4]\n    st.32   [d4], r9\n    exit\n.end\n"
    ));
}

#[test]
fn a_read_modify_write_of_the_same_words_matches() {
    check(&format!(
        "{HEAD}    ld.32   r9, [d2]\n    add     r9, r9, r8\n    st.32   [d2], r9\n    ld.32   r10, [d2]\n    st.32   [d4], r10\n    exit\n.end\n"
    ));
}

#[test]
fn a_load_before_a_store_to_the_words_after_it_sees_the_old_values() {
    check(&format!(
        "{HEAD}    ld.32   r9, [d2]\n    st.32   [d2+4], r8\n    st.32   [d4], r9\n    exit\n.end\n"
    ));
}

#[test]
fn a_read_modify_write_through_another_register_matches() {
    check(&format!(
        "{HEAD}    ldarg   d10, [buf]\n    mad.wide.u32 d10, r0, r1, d10\n    ld.32   r9, [d2]\n    add     r9, r9, r8\n    st.32   [d10], r9\n    ld.32   r11, [d2+4]\n    st.32   [d4], r11\n    exit\n.end\n"
    ));
}
