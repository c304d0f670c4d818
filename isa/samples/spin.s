// An infinite loop: the workgroup never finishes. Only the device (a cancel
// or reset) stops it; there is no watchdog in the compute unit.
.kernel spin
.workgroup 32
    mov     r0, 0
forever:
    add     r0, r0, 1
    bra     forever
.end
