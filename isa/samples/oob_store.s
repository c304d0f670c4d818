// A bug on purpose: out[i] = i with no bounds check. Threads past the end of
// the mapping fault with their lane, warp, PC and the faulting address.
.kernel oob_store
.arg out ptr
.workgroup 64
    s2r     r0, %gid.x
    mov     r1, 4
    ldarg   d2, [out]
    mad.wide.u32 d2, r0, r1, d2     // &out[i]
    st.32   [d2], r0                // faults once &out[i] leaves the mapping
    exit
.end
