// Vector add: c[i] = a[i] + b[i] for every i < n (fp32).
// Launch: grid = ceil(n / 256) workgroups of 256 threads.
.kernel vecadd
.arg n u32
.arg a ptr
.arg b ptr
.arg c ptr
.workgroup 256
    s2r     r0, %gid.x              // i = global thread index
    ldarg   r1, [n]
    setp.ge.u32 p0, r0, r1
    @p0 exit                        // threads past the end do nothing
    mov     r1, 4                   // element size
    ldarg   d2, [a]
    mad.wide.u32 d2, r0, r1, d2     // d2 = &a[i]
    ldarg   d4, [b]
    mad.wide.u32 d4, r0, r1, d4     // d4 = &b[i]
    ldarg   d6, [c]
    mad.wide.u32 d6, r0, r1, d6     // d6 = &c[i]
    ld.32   r8, [d2]
    ld.32   r9, [d4]
    fadd    r8, r8, r9
    st.32   [d6], r8
    exit
.end
