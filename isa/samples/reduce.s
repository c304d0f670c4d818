// Sum reduction (u32, wrapping): each workgroup sums its 256 elements of
// `input` (elements past n count as 0) with a tree in shared memory and
// writes the sum to partial[workgroup id]. The host (or a second launch)
// adds the partial sums.
// Launch: grid = ceil(n / 256) workgroups of 256 threads (a power of two).
.kernel reduce
.arg n u32
.arg input ptr
.arg partial ptr
.shared 1024                        // one u32 per thread
.workgroup 256
// LAB(8) BEGIN reduce-body
    s2r     r0, %tid.x
    s2r     r1, %gid.x
    ldarg   r2, [n]
    mov     r3, 0                   // r3 = my running sum
    mov     r10, 4
    setp.lt.u32 p0, r1, r2
    ldarg   d4, [input]
    mad.wide.u32 d4, r1, r10, d4
    @p0 ld.32 r3, [d4]
    shl     r6, r0, 2               // my slot in shared memory
    sts.32  [r6], r3
    bar
    s2r     r7, %ntid.x
    shr.u32 r7, r7, 1               // stride = ntid / 2
step:
    setp.lt.u32 p1, r0, r7          // the lower half adds the upper half
    @p1 shl r8, r7, 2
    @p1 add r8, r8, r6
    @p1 lds.32 r9, [r8]
    @p1 add r3, r3, r9
    @p1 sts.32 [r6], r3
    bar                             // every thread reaches it: uniform loop
    shr.u32 r7, r7, 1
    setp.ne.u32 p2, r7, 0
    @p2 bra step
    setp.eq.u32 p3, r0, 0
    @!p3 exit                       // thread 0 holds the total
    s2r     r11, %wgid.x
    ldarg   d12, [partial]
    mad.wide.u32 d12, r11, r10, d12
    st.32   [d12], r3
    exit
// LAB(8) END reduce-body
.end
