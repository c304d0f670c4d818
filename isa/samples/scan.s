// Exclusive prefix sum (u32, wrapping) in three launches:
//   1. scan_blocks(n, input, output, sums): each workgroup of 256 threads
//      scans its 256 elements (Hillis-Steele, double-buffered in shared
//      memory), writes the exclusive scan to output and its total to
//      sums[workgroup id].
//   2. scan_blocks(nblocks, sums, offsets, scratch) with one workgroup:
//      the exclusive scan of the block totals (nblocks <= 256).
//   3. add_offsets(n, output, offsets): output[i] += offsets[i / 256].
.kernel scan_blocks
.arg n u32
.arg input ptr
.arg output ptr
.arg sums ptr
.shared 2048                        // two buffers of 256 u32
.workgroup 256
    s2r     r0, %tid.x
    s2r     r1, %gid.x
    s2r     r2, %ntid.x
    ldarg   r3, [n]
    mov     r4, 4
    mov     r5, 0                   // x = input[i], 0 past the end
    setp.lt.u32 p0, r1, r3
    ldarg   d6, [input]
    mad.wide.u32 d6, r1, r4, d6
    @p0 ld.32 r5, [d6]
    shl     r8, r0, 2
    sts.32  [r8], r5
    bar
    mov     r9, 1                   // distance
    mov     r10, 0                  // source buffer
    mov     r11, 1024               // destination buffer
    mov     r12, r5                 // inclusive sum so far
step:
    setp.ge.u32 p1, r0, r9
    sub     r13, r0, r9
    shl     r13, r13, 2
    add     r13, r13, r10
    @p1 lds.32 r14, [r13]
    @p1 add r12, r12, r14
    add     r15, r8, r11
    sts.32  [r15], r12
    bar
    mov     r16, r10                // swap the buffers
    mov     r10, r11
    mov     r11, r16
    shl     r9, r9, 1
    setp.lt.u32 p2, r9, r2
    @p2 bra step
    sub     r17, r12, r5            // exclusive = inclusive - x
    ldarg   d18, [output]
    mad.wide.u32 d18, r1, r4, d18
    @p0 st.32 [d18], r17
    sub     r20, r2, 1
    setp.eq.u32 p3, r0, r20
    @!p3 exit                       // the last thread has the block total
    s2r     r21, %wgid.x
    ldarg   d22, [sums]
    mad.wide.u32 d22, r21, r4, d22
    st.32   [d22], r12
    exit
.end

.kernel add_offsets
.arg n u32
.arg data ptr
.arg offsets ptr
.workgroup 256
    s2r     r0, %gid.x
    ldarg   r1, [n]
    setp.ge.u32 p0, r0, r1
    @p0 exit
    s2r     r2, %wgid.x
    mov     r3, 4
    ldarg   d4, [offsets]
    mad.wide.u32 d4, r2, r3, d4
    ld.32   r6, [d4]
    ldarg   d8, [data]
    mad.wide.u32 d8, r0, r3, d8
    ld.32   r10, [d8]
    add     r10, r10, r6
    st.32   [d8], r10
    exit
.end
