// SAXPY: y[i] = alpha * x[i] + y[i] for every i < n (fp32, fused multiply-add).
// Launch: grid = ceil(n / 256) workgroups of 256 threads.
.kernel saxpy
.arg n u32
.arg alpha f32
.arg x ptr
.arg y ptr
.workgroup 256
    s2r     r0, %gid.x
    ldarg   r1, [n]
    setp.ge.u32 p0, r0, r1
    @p0 exit
    ldarg   r1, [alpha]
    mov     r7, 4
    ldarg   d2, [x]
    mad.wide.u32 d2, r0, r7, d2     // &x[i]
    ldarg   d4, [y]
    mad.wide.u32 d4, r0, r7, d4     // &y[i]
    ld.32   r8, [d2]
    ld.32   r9, [d4]
    ffma    r9, r1, r8, r9          // alpha * x + y, one rounding
    st.32   [d4], r9
    exit
.end
