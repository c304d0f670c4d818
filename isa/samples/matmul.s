// Tiled matrix multiply, fp32, row-major: C[m x n] = A[m x k] * B[k x n].
// Each 16x16 workgroup computes a 16x16 tile of C, staging 16x16 tiles of A
// and B through shared memory. Any m, n, k: out-of-range elements load as 0.
// C[i][j] accumulates ffma(A[i][kk], B[kk][j], acc) for kk = 0, 1, ...
// Launch: grid = (ceil(n/16), ceil(m/16)), workgroup = (16, 16).
.kernel matmul
.arg m u32
.arg n u32
.arg k u32
.arg a ptr
.arg b ptr
.arg c ptr
.shared 2048                        // As[16][16] at 0, Bs[16][16] at 1024
.workgroup 16 16
    s2r     r0, %tid.x              // tx
    s2r     r1, %tid.y              // ty
    s2r     r2, %gid.x              // col
    s2r     r3, %gid.y              // row
    ldarg   r4, [m]
    ldarg   r5, [n]
    ldarg   r6, [k]
    ldarg   d8, [a]
    ldarg   d10, [b]
    mov     r12, 0.0                // acc
    mov     r13, 0                  // t: first k index of the current tile
    shl     r14, r1, 4
    add     r14, r14, r0
    shl     r14, r14, 2             // (ty*16 + tx) * 4: my slot in a tile
    shl     r15, r1, 6              // ty * 64: row ty of As
    shl     r16, r0, 2              // tx * 4: column tx of Bs
    setp.lt.u32 p0, r3, r4          // row < m
    setp.lt.u32 p1, r2, r5          // col < n
    mov     r17, 4
tile:
    add     r18, r13, r0            // As[ty][tx] = A[row][t + tx]
    setp.lt.u32 p2, r18, r6
    pand    p2, p2, p0
    mov     r19, 0
    mad     r20, r3, r6, r18
    mad.wide.u32 d22, r20, r17, d8
    @p2 ld.32 r19, [d22]
    sts.32  [r14], r19
    add     r18, r13, r1            // Bs[ty][tx] = B[t + ty][col]
    setp.lt.u32 p3, r18, r6
    pand    p3, p3, p1
    mov     r19, 0
    mad     r20, r18, r5, r2
    mad.wide.u32 d22, r20, r17, d10
    @p3 ld.32 r19, [d22]
    sts.32  [r14+1024], r19
    bar
    mov     r24, 0                  // j * 4
    mov     r25, r16                // j * 64 + tx * 4
inner:
    add     r26, r15, r24
    lds.32  r27, [r26]              // As[ty][j]
    lds.32  r28, [r25+1024]         // Bs[j][tx]
    ffma    r12, r27, r28, r12
    add     r24, r24, 4
    add     r25, r25, 64
    setp.lt.u32 p4, r24, 64
    @p4 bra inner
    bar                             // before the next tile overwrites As/Bs
    add     r13, r13, 16
    setp.lt.u32 p5, r13, r6
    @p5 bra tile
    pand    p6, p0, p1
    @!p6 exit
    mad     r20, r3, r5, r2
    ldarg   d22, [c]
    mad.wide.u32 d22, r20, r17, d22
    st.32   [d22], r12
    exit
.end
