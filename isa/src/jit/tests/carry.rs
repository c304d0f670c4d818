//! Loops whose registers stay in SSA values across the back edge
//! (`carry.rs`): each kernel here must compile with a carried loop and
//! match the interpreter in every budget slice (the budget tail, a failed
//! run condition, the one-by-one path and every way out of the loop must
//! find the register file up to date).

use super::*;

/// An accumulator over shared memory; `LIMIT` is the loop's bound in
/// bytes, `BOUND` how each lane's bound is made from it.
fn kernel(bound: &str, limit: u32) -> Module {
    assembled(&format!(
        r"
.kernel acc
.arg out ptr
.arg other ptr
.shared 1024
.workgroup 64
    s2r     r0, %tid.x
    shl     r1, r0, 2
    mul     r9, r0, 7
    sts.32  [r1], r9
    sts.32  [r1+256], r0
    bar
    mov     r2, 0
    mov     r3, 0
    mov     r4, {limit}
    {bound}
loop:
    add     r7, r3, r1
    lds.32  r5, [r7]
    add     r2, r2, r5
    xor     r2, r2, r3
    add     r3, r3, 4
    setp.lt.u32 p0, r3, r4
    @p0 bra loop
    ldarg   d10, [out]
    mov     r12, 4
    mad.wide.u32 d10, r0, r12, d10
    st.32   [d10], r2
    exit
.end
"
    ))
}

fn check(m: Module, seeds: std::ops::Range<u64>) {
    check_compiled(m, seeds, |n| n.carried_loops > 0, "carried loop");
}

/// Every lane leaves the loop in the same iteration.
#[test]
fn a_carried_loop_left_by_the_whole_warp_matches_the_interpreter() {
    check(kernel("", 128), 0..6);
}

/// Lanes leave the loop in different iterations (a divergent branch).
#[test]
fn a_carried_loop_left_lane_by_lane_matches_the_interpreter() {
    check(kernel("add r4, r4, r1", 64), 0..6);
}

/// Later iterations read past shared memory: the run's conditions fail
/// and its one-by-one path faults with the interpreter's lane and pc.
#[test]
fn a_carried_loop_whose_run_faults_matches_the_interpreter() {
    check(kernel("", 1024), 0..6);
}
