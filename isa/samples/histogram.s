// 256-bin histogram of the low byte of n u32 values: bins[v & 255] += 1.
// Each workgroup counts into a private histogram in shared memory with
// shared atomics (grid-stride loop), then adds its non-zero bins to the
// global histogram with global atomics. `bins` must be zeroed beforehand.
// Launch: any grid, any workgroup size.
.kernel histogram
.arg n u32
.arg data ptr
.arg bins ptr
.shared 1024
.workgroup 256
    s2r     r0, %tid.x
    s2r     r1, %ntid.x
    mov     r3, 0
    mov     r4, r0
zero:                               // bins t, t + ntid, ... = 0
    setp.lt.u32 p0, r4, 256
    @!p0 bra zeroed
    shl     r5, r4, 2
    sts.32  [r5], r3
    add     r4, r4, r1
    bra     zero
zeroed:
    bar
    s2r     r6, %gid.x
    s2r     r7, %nwg.x
    mul     r7, r7, r1              // threads in the grid
    ldarg   r8, [n]
    ldarg   d10, [data]
    mov     r9, 4
    mov     r12, 1
count:                              // lanes leave this loop at different times
    setp.lt.u32 p1, r6, r8
    @!p1 bra counted
    mad.wide.u32 d14, r6, r9, d10
    ld.32   r16, [d14]
    and     r16, r16, 255
    shl     r16, r16, 2
    atoms.add r17, [r16], r12
    add     r6, r6, r7
    bra     count
counted:
    bar
    ldarg   d18, [bins]
    mov     r4, r0
flush:
    setp.lt.u32 p2, r4, 256
    @!p2 exit
    shl     r5, r4, 2
    lds.32  r20, [r5]
    mad.wide.u32 d22, r4, r9, d18
    setp.ne.u32 p3, r20, 0
    @p3 atom.add r21, [d22], r20
    add     r4, r4, r1
    bra     flush
.end
