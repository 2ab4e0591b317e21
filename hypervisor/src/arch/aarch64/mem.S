// memcpy for armhv at EL2. compiler_builtins' generic one, built for a target with
// +strict-align, copies 8 bytes in 4 instructions when source and destination share their
// alignment and in 23 (byte loads and shifts) when they do not; armhv copies frames and disk
// blocks between guests' buffers at any offsets. Once the MMU is on, EL2's RAM is Normal
// memory and alignment checks are off (SCTLR_EL2.M = 1, A = 0), so unaligned pairs are fine:
// 64 bytes in 13 instructions. Before that (early boot), bytes one at a time.
//
// memcpy(x0 = dst, x1 = src, x2 = n) -> x0; the regions do not overlap (C's contract).
// Clobbers x2-x11 and the flags, which the AAPCS64 leaves to the callee.

    .section .text.memcpy, "ax"
    .global memcpy
    .type   memcpy, %function
    .p2align 4
memcpy:
    mov     x3, x0
    mrs     x4, sctlr_el2
    and     x4, x4, #3
    cmp     x4, #1
    b.ne    .Lmemcpy_bytes
    cmp     x2, #64
    b.lo    .Lmemcpy_words
.Lmemcpy_64:
    ldp     x4, x5, [x1]
    ldp     x6, x7, [x1, #16]
    ldp     x8, x9, [x1, #32]
    ldp     x10, x11, [x1, #48]
    add     x1, x1, #64
    sub     x2, x2, #64
    stp     x4, x5, [x3]
    stp     x6, x7, [x3, #16]
    stp     x8, x9, [x3, #32]
    stp     x10, x11, [x3, #48]
    add     x3, x3, #64
    cmp     x2, #64
    b.hs    .Lmemcpy_64
.Lmemcpy_words:
    cmp     x2, #8
    b.lo    .Lmemcpy_bytes
    ldr     x4, [x1], #8
    sub     x2, x2, #8
    str     x4, [x3], #8
    b       .Lmemcpy_words
.Lmemcpy_bytes:
    cbz     x2, .Lmemcpy_done
    ldrb    w4, [x1], #1
    sub     x2, x2, #1
    strb    w4, [x3], #1
    b       .Lmemcpy_bytes
.Lmemcpy_done:
    ret
    .size   memcpy, . - memcpy
