/*
 * FP/SIMD register file save/restore. armhv itself is built soft-float and never touches these
 * registers, so a guest's FP state stays live in the hardware across traps; it is switched only
 * when another vCPU takes this physical CPU.
 *
 * FpState layout (vmm::arch::FpState): q0..q31 at 16*n, FPSR at 512, FPCR at 520.
 */
.arch_extension fp
.arch_extension simd

.section .text, "ax"
.global __fpsimd_save
__fpsimd_save:
    stp     q0, q1, [x0, #0]
    stp     q2, q3, [x0, #32]
    stp     q4, q5, [x0, #64]
    stp     q6, q7, [x0, #96]
    stp     q8, q9, [x0, #128]
    stp     q10, q11, [x0, #160]
    stp     q12, q13, [x0, #192]
    stp     q14, q15, [x0, #224]
    stp     q16, q17, [x0, #256]
    stp     q18, q19, [x0, #288]
    stp     q20, q21, [x0, #320]
    stp     q22, q23, [x0, #352]
    stp     q24, q25, [x0, #384]
    stp     q26, q27, [x0, #416]
    stp     q28, q29, [x0, #448]
    stp     q30, q31, [x0, #480]
    mrs     x1, fpsr
    mrs     x2, fpcr
    add     x0, x0, #512
    stp     x1, x2, [x0]
    ret

.global __fpsimd_restore
__fpsimd_restore:
    ldp     q0, q1, [x0, #0]
    ldp     q2, q3, [x0, #32]
    ldp     q4, q5, [x0, #64]
    ldp     q6, q7, [x0, #96]
    ldp     q8, q9, [x0, #128]
    ldp     q10, q11, [x0, #160]
    ldp     q12, q13, [x0, #192]
    ldp     q14, q15, [x0, #224]
    ldp     q16, q17, [x0, #256]
    ldp     q18, q19, [x0, #288]
    ldp     q20, q21, [x0, #320]
    ldp     q22, q23, [x0, #352]
    ldp     q24, q25, [x0, #384]
    ldp     q26, q27, [x0, #416]
    ldp     q28, q29, [x0, #448]
    ldp     q30, q31, [x0, #480]
    add     x0, x0, #512
    ldp     x1, x2, [x0]
    msr     fpsr, x1
    msr     fpcr, x2
    ret

/*
 * SVE. The Z registers contain the V registers, so a vCPU that uses SVE has its whole FP state
 * saved and loaded here (vmm::arch::SveState): Z0..Z31 at x0 + n * VL, then P0..P15 and FFR at
 * x0 + 32 * VL + n * VL / 8, all at the vector length x1 + 1 quadwords, written to ZCR_EL2.LEN
 * first (EL2 runs at that length, so the layout is always the machine's, whatever ZCR_EL1 the
 * guest chose); FPSR, FPCR and ZCR_EL1 at x2. CPTR_EL2 must trap neither FP nor SVE.
 * Clobbers x3..x6 and P0 (after it was saved).
 */
.arch_extension sve

.global __sve_save
__sve_save:
    msr     s3_4_c1_c2_0, x1        /* ZCR_EL2 */
    isb
    str     z0, [x0, #0, mul vl]
    str     z1, [x0, #1, mul vl]
    str     z2, [x0, #2, mul vl]
    str     z3, [x0, #3, mul vl]
    str     z4, [x0, #4, mul vl]
    str     z5, [x0, #5, mul vl]
    str     z6, [x0, #6, mul vl]
    str     z7, [x0, #7, mul vl]
    str     z8, [x0, #8, mul vl]
    str     z9, [x0, #9, mul vl]
    str     z10, [x0, #10, mul vl]
    str     z11, [x0, #11, mul vl]
    str     z12, [x0, #12, mul vl]
    str     z13, [x0, #13, mul vl]
    str     z14, [x0, #14, mul vl]
    str     z15, [x0, #15, mul vl]
    str     z16, [x0, #16, mul vl]
    str     z17, [x0, #17, mul vl]
    str     z18, [x0, #18, mul vl]
    str     z19, [x0, #19, mul vl]
    str     z20, [x0, #20, mul vl]
    str     z21, [x0, #21, mul vl]
    str     z22, [x0, #22, mul vl]
    str     z23, [x0, #23, mul vl]
    str     z24, [x0, #24, mul vl]
    str     z25, [x0, #25, mul vl]
    str     z26, [x0, #26, mul vl]
    str     z27, [x0, #27, mul vl]
    str     z28, [x0, #28, mul vl]
    str     z29, [x0, #29, mul vl]
    str     z30, [x0, #30, mul vl]
    str     z31, [x0, #31, mul vl]
    addvl   x3, x0, #16
    addvl   x3, x3, #16
    str     p0, [x3, #0, mul vl]
    str     p1, [x3, #1, mul vl]
    str     p2, [x3, #2, mul vl]
    str     p3, [x3, #3, mul vl]
    str     p4, [x3, #4, mul vl]
    str     p5, [x3, #5, mul vl]
    str     p6, [x3, #6, mul vl]
    str     p7, [x3, #7, mul vl]
    str     p8, [x3, #8, mul vl]
    str     p9, [x3, #9, mul vl]
    str     p10, [x3, #10, mul vl]
    str     p11, [x3, #11, mul vl]
    str     p12, [x3, #12, mul vl]
    str     p13, [x3, #13, mul vl]
    str     p14, [x3, #14, mul vl]
    str     p15, [x3, #15, mul vl]
    rdffr   p0.b
    str     p0, [x3, #16, mul vl]
    mrs     x4, fpsr
    mrs     x5, fpcr
    mrs     x6, s3_0_c1_c2_0        /* ZCR_EL1 */
    stp     x4, x5, [x2]
    str     x6, [x2, #16]
    ret

.global __sve_restore
__sve_restore:
    msr     s3_4_c1_c2_0, x1        /* ZCR_EL2 */
    isb
    ldr     z0, [x0, #0, mul vl]
    ldr     z1, [x0, #1, mul vl]
    ldr     z2, [x0, #2, mul vl]
    ldr     z3, [x0, #3, mul vl]
    ldr     z4, [x0, #4, mul vl]
    ldr     z5, [x0, #5, mul vl]
    ldr     z6, [x0, #6, mul vl]
    ldr     z7, [x0, #7, mul vl]
    ldr     z8, [x0, #8, mul vl]
    ldr     z9, [x0, #9, mul vl]
    ldr     z10, [x0, #10, mul vl]
    ldr     z11, [x0, #11, mul vl]
    ldr     z12, [x0, #12, mul vl]
    ldr     z13, [x0, #13, mul vl]
    ldr     z14, [x0, #14, mul vl]
    ldr     z15, [x0, #15, mul vl]
    ldr     z16, [x0, #16, mul vl]
    ldr     z17, [x0, #17, mul vl]
    ldr     z18, [x0, #18, mul vl]
    ldr     z19, [x0, #19, mul vl]
    ldr     z20, [x0, #20, mul vl]
    ldr     z21, [x0, #21, mul vl]
    ldr     z22, [x0, #22, mul vl]
    ldr     z23, [x0, #23, mul vl]
    ldr     z24, [x0, #24, mul vl]
    ldr     z25, [x0, #25, mul vl]
    ldr     z26, [x0, #26, mul vl]
    ldr     z27, [x0, #27, mul vl]
    ldr     z28, [x0, #28, mul vl]
    ldr     z29, [x0, #29, mul vl]
    ldr     z30, [x0, #30, mul vl]
    ldr     z31, [x0, #31, mul vl]
    addvl   x3, x0, #16
    addvl   x3, x3, #16
    /* FFR goes through P0, which is loaded after it. */
    ldr     p0, [x3, #16, mul vl]
    wrffr   p0.b
    ldr     p0, [x3, #0, mul vl]
    ldr     p1, [x3, #1, mul vl]
    ldr     p2, [x3, #2, mul vl]
    ldr     p3, [x3, #3, mul vl]
    ldr     p4, [x3, #4, mul vl]
    ldr     p5, [x3, #5, mul vl]
    ldr     p6, [x3, #6, mul vl]
    ldr     p7, [x3, #7, mul vl]
    ldr     p8, [x3, #8, mul vl]
    ldr     p9, [x3, #9, mul vl]
    ldr     p10, [x3, #10, mul vl]
    ldr     p11, [x3, #11, mul vl]
    ldr     p12, [x3, #12, mul vl]
    ldr     p13, [x3, #13, mul vl]
    ldr     p14, [x3, #14, mul vl]
    ldr     p15, [x3, #15, mul vl]
    ldp     x4, x5, [x2]
    msr     fpsr, x4
    msr     fpcr, x5
    ldr     x6, [x2, #16]
    msr     s3_0_c1_c2_0, x6        /* ZCR_EL1 */
    ret

/*
 * The vector lengths this CPU supports, as a mask with bit vq - 1 for vq quadwords: each
 * ZCR_EL2.LEN in turn, and RDVL for the length it gives (the longest supported one up to it).
 * Leaves ZCR_EL2.LEN at 15. Clobbers x1..x4.
 */
.global __sve_lengths
__sve_lengths:
    mov     x0, #0
    mov     x1, #0
1:  msr     s3_4_c1_c2_0, x1
    isb
    rdvl    x2, #1
    lsr     x2, x2, #4
    sub     x2, x2, #1
    mov     x3, #1
    lsl     x3, x3, x2
    orr     x0, x0, x3
    add     x1, x1, #1
    cmp     x1, #16
    b.lo    1b
    ret
