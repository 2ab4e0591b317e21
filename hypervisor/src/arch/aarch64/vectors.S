/*
 * The EL2 exception vector table and the world-switch fast path.
 *
 * A trap from a guest saves the guest's general-purpose registers (and ELR/SPSR) into the
 * running vCPU's GuestRegs and returns from __guest_enter to the Rust run loop with the
 * exception kind. Nothing else is saved here: EL1 system registers, FP/SIMD, timer and vGIC
 * state stay live in the hardware while the same vCPU keeps the CPU (see docs/world-switch.md).
 *
 * GuestRegs layout (struct GuestRegs in world_switch.rs): x0..x30 at 8*n, ELR_EL2 at 248,
 * SPSR_EL2 at 256.
 */
.equ REGS_ELR, 248
.equ REGS_STAMPS, 264
.equ REGS_FAST_CALLS, 296

/*
 * Probes for the world-switch breakdown: WS_BREAKDOWN is set to 1 by a `ws-breakdown` build
 * (arch/aarch64/mod.rs), 0 otherwise. `stamp reg, n` clobbers \tmp and needs \reg = GuestRegs.
 */
.macro stamp reg, tmp, n
.if WS_BREAKDOWN
    mrs     \tmp, pmccntr_el0
    str     \tmp, [\reg, #(REGS_STAMPS + 8 * \n)]
.endif
.endm

.equ EXIT_SYNC, 0
.equ EXIT_IRQ, 1
.equ EXIT_FIQ, 2
.equ EXIT_SERROR, 3
.equ EXIT_AARCH32, 4

/* Frame for the hypervisor's own exceptions: x0..x30, ELR, SPSR, ESR, FAR (35 words, 288 bytes). */
.equ HYP_FRAME_SIZE, 288

.macro hyp_exception kind
    .balign 0x80
    sub     sp, sp, #HYP_FRAME_SIZE
    stp     x0, x1, [sp, #0]
    mov     x0, #\kind
    b       hyp_exception_common
.endm

.macro guest_exit kind
    .balign 0x80
    stp     x0, x1, [sp, #-16]!
.if WS_BREAKDOWN
    mrs     x1, pmccntr_el0
    ldr     x0, [sp, #16]
    str     x1, [x0, #REGS_STAMPS]
.endif
.if \kind == EXIT_SYNC && (TRAP_PROBE || WS_BREAKDOWN == 0)
    mrs     x1, esr_el2
    b       guest_sync_fast
.else
    mov     x0, #\kind
    b       guest_exit_common
.endif
.endm

.section .text.vectors, "ax"
.balign 0x800
.global el2_vectors
el2_vectors:
    /* Current EL with SP0: never used by armhv. */
    hyp_exception 0
    hyp_exception 1
    hyp_exception 2
    hyp_exception 3
    /* Current EL with SPx: the hypervisor's own exceptions. */
    hyp_exception 0
    hyp_exception 1
    hyp_exception 2
    hyp_exception 3
    /* Lower EL, AArch64: the guests. */
    guest_exit EXIT_SYNC
    guest_exit EXIT_IRQ
    guest_exit EXIT_FIQ
    guest_exit EXIT_SERROR
    /* Lower EL, AArch32: armhv runs AArch64 guests only (HCR_EL2.RW = 1). */
    guest_exit EXIT_AARCH32
    guest_exit EXIT_AARCH32
    guest_exit EXIT_AARCH32
    guest_exit EXIT_AARCH32

/*
 * u64 __guest_enter(GuestRegs *regs)
 * Saves the host's callee-saved registers and the GuestRegs pointer on the host stack, loads
 * the guest's registers and erets. Returns (via guest_exit_common) the EXIT_* kind.
 */
.section .text, "ax"
.global __guest_enter
__guest_enter:
    stamp   x0, x1, 2
    stp     x29, x30, [sp, #-16]!
    stp     x27, x28, [sp, #-16]!
    stp     x25, x26, [sp, #-16]!
    stp     x23, x24, [sp, #-16]!
    stp     x21, x22, [sp, #-16]!
    stp     x19, x20, [sp, #-16]!
    stp     x0, xzr, [sp, #-16]!

    ldp     x1, x2, [x0, #REGS_ELR]
    msr     elr_el2, x1
    msr     spsr_el2, x2
    ldp     x2, x3, [x0, #16]
    ldp     x4, x5, [x0, #32]
    ldp     x6, x7, [x0, #48]
    ldp     x8, x9, [x0, #64]
    ldp     x10, x11, [x0, #80]
    ldp     x12, x13, [x0, #96]
    ldp     x14, x15, [x0, #112]
    ldp     x16, x17, [x0, #128]
    ldp     x18, x19, [x0, #144]
    ldp     x20, x21, [x0, #160]
    ldp     x22, x23, [x0, #176]
    ldp     x24, x25, [x0, #192]
    ldp     x26, x27, [x0, #208]
    ldp     x28, x29, [x0, #224]
    ldr     x30, [x0, #240]
    stamp   x0, x1, 3
    ldp     x0, x1, [x0]
    eret
    /* No speculation past eret. */
    dsb     nsh
    isb

/*
 * The hypercall fast path: calls whose answer is a constant (FAST_CALL_* below, the run
 * loop's `hypercall::FAST_CALLS`) are answered here without saving the guest's registers or
 * leaving the vector's code. Entered with guest x0/x1 at [sp], the GuestRegs pointer at
 * [sp + 16] and x1 = ESR_EL2.
 *
 * It executes no indirect branch, so the guest's branch history cannot steer it: the
 * Spectre-v2/BHB work of the exit path (which must come before armhv's first indirect
 * branch) is not needed to go back to the same guest, and is the larger part of what the
 * fast path saves. Each call is counted in GuestRegs.fast_calls, which the run loop adds to
 * the VM's exit and hypercall statistics at its next exit.
 */
guest_sync_fast:
.if TRAP_PROBE
    /* The trap probe: `hvc #0x7ea` goes straight back (ELR_EL2 is past the hvc already). */
    movz    x0, #(TRAP_PROBE_ESR & 0xffff)
    movk    x0, #(TRAP_PROBE_ESR >> 16), lsl #16
    cmp     x0, x1
    b.ne    1f
    ldp     x0, x1, [sp], #16
    eret
    dsb     nsh
    isb
1:
.endif
.if WS_BREAKDOWN == 0
    /* `hvc #0` from AArch64 (EC 0x16, IL 1, imm16 0): an SMCCC call through the HVC conduit. */
    movz    x0, #0x5a00, lsl #16
    cmp     x1, x0
    b.ne    guest_sync_slow
    ldr     w1, [sp]
    movz    w0, #(FAST_CALL_NOP >> 16), lsl #16
    cmp     w1, w0
    b.eq    2f
    movz    w0, #(FAST_CALL_PSCI_VERSION >> 16), lsl #16
    cmp     w1, w0
    b.eq    3f
    movz    w0, #(FAST_CALL_SMCCC_VERSION >> 16), lsl #16
    cmp     w1, w0
    b.ne    guest_sync_slow
    movz    x0, #(FAST_CALL_SMCCC_VERSION_ANSWER & 0xffff)
    movk    x0, #(FAST_CALL_SMCCC_VERSION_ANSWER >> 16), lsl #16
    b       4f
2:  mov     x0, #FAST_CALL_NOP_ANSWER
    b       4f
3:  movz    x0, #(FAST_CALL_PSCI_VERSION_ANSWER & 0xffff)
    movk    x0, #(FAST_CALL_PSCI_VERSION_ANSWER >> 16), lsl #16
4:  str     x0, [sp]
    ldr     x1, [sp, #16]
    ldr     x0, [x1, #REGS_FAST_CALLS]
    add     x0, x0, #1
    str     x0, [x1, #REGS_FAST_CALLS]
    ldp     x0, x1, [sp], #16
    eret
    /* No speculation past eret. */
    dsb     nsh
    isb
.endif

/* A synchronous exit for the run loop: guest x0/x1 at [sp]. */
guest_sync_slow:
    mov     x0, #EXIT_SYNC
    b       guest_exit_common

/* Entered with x0 = exit kind, guest x0/x1 at [sp], GuestRegs pointer at [sp + 16]. */
guest_exit_common:
    ldr     x1, [sp, #16]
    stp     x2, x3, [x1, #16]
    stp     x4, x5, [x1, #32]
    stp     x6, x7, [x1, #48]
    stp     x8, x9, [x1, #64]
    stp     x10, x11, [x1, #80]
    stp     x12, x13, [x1, #96]
    stp     x14, x15, [x1, #112]
    stp     x16, x17, [x1, #128]
    stp     x18, x19, [x1, #144]
    stp     x20, x21, [x1, #160]
    stp     x22, x23, [x1, #176]
    stp     x24, x25, [x1, #192]
    stp     x26, x27, [x1, #208]
    stp     x28, x29, [x1, #224]
    str     x30, [x1, #240]
    ldp     x2, x3, [sp], #16
    stp     x2, x3, [x1, #0]
    mrs     x2, elr_el2
    mrs     x3, spsr_el2
    stp     x2, x3, [x1, #REGS_ELR]
    stamp   x1, x2, 1

    /*
     * Spectre-v2/BHB: what this CPU needs before armhv's first indirect branch (the ret
     * below; everything since the vector was a direct branch), as arch/aarch64/speculation.rs
     * set it at boot: SPECTRE_EXIT_WORK[TPIDR_EL2], zero for nothing. The guest's registers
     * are saved, so all but x0 (the exit kind) and sp are free here.
     */
    mrs     x2, tpidr_el2
    adrp    x3, SPECTRE_EXIT_WORK
    add     x3, x3, :lo12:SPECTRE_EXIT_WORK
    ldr     x2, [x3, x2, lsl #3]
    cbnz    x2, spectre_exit_work
spectre_exit_done:

    add     sp, sp, #16
    ldp     x19, x20, [sp], #16
    ldp     x21, x22, [sp], #16
    ldp     x23, x24, [sp], #16
    ldp     x25, x26, [sp], #16
    ldp     x27, x28, [sp], #16
    ldp     x29, x30, [sp], #16
    ret

/*
 * x2 = this CPU's SPECTRE_EXIT_WORK word: bits [63:32] a firmware function to call
 * (WORKAROUND_1 or _3), bit 8 CLRBHB, bits [7:0] the branch loop's iteration count.
 * Clobbers x2-x17 and x19-x20 (the host's, restored from the stack after), which keep the
 * exit kind and the word across the SMC; returns to spectre_exit_done.
 */
spectre_exit_work:
    lsr     x3, x2, #32
    cbz     x3, 1f
    mov     x19, x0
    mov     x20, x2
    mov     w0, w3
    smc     #0
    mov     x0, x19
    mov     x2, x20
1:  ands    x3, x2, #0xff
    b.eq    3f
    /* Enough taken branches to overwrite the whole branch history of this core type. */
2:  b       . + 4
    subs    x3, x3, #1
    b.ne    2b
    dsb     nsh
    isb
3:  tbz     x2, #8, 4f
    hint    #22             /* CLRBHB */
    isb
4:  b       spectre_exit_done

/*
 * u64 __take_guest_serror(void)
 * On a CPU without FEAT_RAS (no ESB), at a guest's exit with a physical SError pending
 * (ISR_EL1.A): unmasks SErrors for one instruction, so that it is taken now, while the exit
 * is still that guest's, and not at the next entry as the next VM's. It is taken at the
 * earliest at the isb and at the latest just after it: the EL2 SError handler
 * (exception.rs) recognizes ELR_EL2 = either label, sets the saved x0 to 1 and returns here.
 * Returns 1 if the SError was taken, 0 if it was not (then it is taken at the next entry).
 */
.global __take_guest_serror
__take_guest_serror:
    mov     x0, #0
    msr     daifclr, #4
.global __serror_window_start
__serror_window_start:
    isb
.global __serror_window_end
__serror_window_end:
    msr     daifset, #4
    ret

/* Entered with x0 = kind, original x0/x1 already stored at [sp]. */
hyp_exception_common:
    stp     x2, x3, [sp, #16]
    stp     x4, x5, [sp, #32]
    stp     x6, x7, [sp, #48]
    stp     x8, x9, [sp, #64]
    stp     x10, x11, [sp, #80]
    stp     x12, x13, [sp, #96]
    stp     x14, x15, [sp, #112]
    stp     x16, x17, [sp, #128]
    stp     x18, x19, [sp, #144]
    stp     x20, x21, [sp, #160]
    stp     x22, x23, [sp, #176]
    stp     x24, x25, [sp, #192]
    stp     x26, x27, [sp, #208]
    stp     x28, x29, [sp, #224]
    str     x30, [sp, #240]
    mrs     x2, elr_el2
    mrs     x3, spsr_el2
    stp     x2, x3, [sp, #248]
    mrs     x2, esr_el2
    mrs     x3, far_el2
    stp     x2, x3, [sp, #264]
    mov     x1, sp
    bl      hyp_exception
    /* hyp_exception returns only for interrupts it handled: restore and return. */
    ldp     x2, x3, [sp, #248]
    msr     elr_el2, x2
    msr     spsr_el2, x3
    ldp     x2, x3, [sp, #16]
    ldp     x4, x5, [sp, #32]
    ldp     x6, x7, [sp, #48]
    ldp     x8, x9, [sp, #64]
    ldp     x10, x11, [sp, #80]
    ldp     x12, x13, [sp, #96]
    ldp     x14, x15, [sp, #112]
    ldp     x16, x17, [sp, #128]
    ldp     x18, x19, [sp, #144]
    ldp     x20, x21, [sp, #160]
    ldp     x22, x23, [sp, #176]
    ldp     x24, x25, [sp, #192]
    ldp     x26, x27, [sp, #208]
    ldp     x28, x29, [sp, #224]
    ldr     x30, [sp, #240]
    ldp     x0, x1, [sp, #0]
    add     sp, sp, #HYP_FRAME_SIZE
    eret
