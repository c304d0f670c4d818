//! Shaped registers passed from a region to the next block's hot version
//! without a trip through the register file (`carry.rs`): each kernel
//! here must compile with such an edge and match the interpreter in every
//! budget slice (lanes leaving at the exit, a divergent branch, the budget
//! tail, a failed run and the one-by-one path must all find the register
//! file up to date).

use super::*;

/// `%gid.x` in a bounds block ending in an exit, as in saxpy: lanes at or
/// past `limit` leave, the others store through an address made from it.
/// The square is computed lane by lane (the others are shaped). The
/// second store goes `offset` bytes further (a large offset takes later
/// lanes off the mapped page: the run fails and its one-by-one path
/// faults).
fn bounds(limit: u32, offset: u32) -> Module {
    assembled(&format!(
        r"
.kernel k
.arg out ptr
.arg other ptr
.workgroup 64
    s2r     r0, %gid.x
    mov     r1, {limit}
    setp.ge.u32 p0, r0, r1
    @p0 exit
    ldarg   d2, [out]
    mov     r4, 4
    mad.wide.u32 d2, r0, r4, d2
    mul     r5, r0, r0
    st.32   [d2], r5
    add     r6, r0, 1
    st.32   [d2+{offset}], r6
    exit
.end
"
    ))
}

/// The same through a branch: lanes below `limit` skip a block, and both
/// ways read `%gid.x` afterwards.
fn branch(limit: u32) -> Module {
    assembled(&format!(
        r"
.kernel k
.arg out ptr
.arg other ptr
.workgroup 64
    s2r     r0, %gid.x
    mov     r1, {limit}
    setp.lt.u32 p0, r0, r1
    @p0 bra low
    ldarg   d2, [out]
    mov     r4, 4
    mad.wide.u32 d2, r0, r4, d2
    mul     r5, r0, r0
    st.32   [d2], r5
    exit
low:
    ldarg   d2, [out]
    mov     r4, 4
    mad.wide.u32 d2, r0, r4, d2
    mul     r5, r0, r0
    add     r5, r5, 7
    st.32   [d2+512], r5
    exit
.end
"
    ))
}

fn check(m: Module, seeds: std::ops::Range<u64>) {
    check_compiled(
        m,
        seeds,
        |n| n.shaped_edges > 0 && n.fused_runs > 0,
        "shaped register passed on to a fused run",
    );
}

/// No lane leaves at the bounds check.
#[test]
fn a_bounds_check_no_lane_fails_passes_gid_on() {
    check(bounds(1000, 512), 0..6);
}

/// Some lanes of a warp leave: the others continue from the register file.
#[test]
fn a_bounds_check_some_lanes_fail_leaves_gid_in_the_register_file() {
    check(bounds(40, 512), 0..6);
    check(bounds(100, 512), 6..10);
}

/// Later lanes store past the mapped page: the run's one-by-one path
/// faults with the interpreter's lane, pc and VA.
#[test]
fn a_run_that_faults_after_a_passed_gid_matches_the_interpreter() {
    check(bounds(1000, 3600), 0..6);
}

/// A branch taken by all lanes, by none, and by some (divergence).
#[test]
fn a_branch_passes_gid_on_each_way() {
    check(branch(1000), 0..4);
    check(branch(0), 4..8);
    check(branch(40), 8..12);
}
