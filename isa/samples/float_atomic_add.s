// Float atomic add by compare-and-swap: *sum += x[i] for every i < n.
// The ISA's atomics are 32-bit integer operations; there is no float
// atomic add. A float add is built from atom.cas, which compares and swaps
// the word's bits:
//   1. read the current value (old),
//   2. compute new = old + x in a register,
//   3. atom.cas: store new only if the word still holds old's bits; it
//      returns the word it found (seen),
//   4. seen == old: done; otherwise another lane changed the word: retry
//      with old = seen.
// Comparing bits (setp.ne.u32), not floats, makes a NaN sum terminate too
// (NaN != NaN as floats would retry forever).
// Launch: grid = ceil(n / 64) workgroups of 64 threads; *sum starts at the
// initial value. The order of the additions is unspecified, so the result
// is exact only when every partial sum is (e.g. small integers).
.kernel float_atomic_add
.arg n u32
.arg x ptr
.arg sum ptr
.workgroup 64
    s2r     r0, %gid.x
    ldarg   r1, [n]
    setp.ge.u32 p0, r0, r1
    @p0 exit                        // threads past the end do nothing
    mov     r1, 4
    ldarg   d2, [x]
    mad.wide.u32 d2, r0, r1, d2     // d2 = &x[i]
    ld.32   r4, [d2]                // r4 = x[i]
    ldarg   d6, [sum]               // d6 = sum (r6, r7)
    ld.32   r5, [d6]                // r5 = old: a guess of the current value
retry:
    fadd    r8, r5, r4              // r8 = new = old + x[i]
    atom.cas r9, [d6], r5, r8       // if *sum == old { *sum = new }; r9 = seen
    setp.ne.u32 p1, r9, r5          // the swap happened iff seen == old (bits)
    mov     r5, r9                  // old = seen, for the next attempt
    @p1 bra retry
    exit
.end
