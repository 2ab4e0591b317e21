/*
 * Entry points. The primary CPU arrives from the loader at EL2 with the MMU off and x0 = the
 * physical address of the device tree (arm64 Image boot protocol). Secondary CPUs arrive from
 * the firmware's PSCI CPU_ON with x0 = their logical CPU index (the context_id we passed).
 */
.equ STACK_SIZE, 0x10000

.section .text.head, "ax"
.global _start
_start:
    /* arm64 Image header (Documentation/arch/arm64/booting.rst) */
    b       primary_entry           /* code0 */
    .long   0                       /* code1 */
    .quad   0x80000                 /* text_offset: we are linked at RAM base + 0x80000 */
    .quad   __hyp_end - _start      /* image_size: including bss and stacks */
    .quad   0xa                     /* flags: little-endian, 4 KiB pages, 2 MiB-aligned base anywhere */
    .quad   0, 0, 0                 /* reserved */
    .ascii  "ARM\x64"               /* magic */
    .long   0                       /* reserved (PE header offset) */

primary_entry:
    mov     x19, x0
    mrs     x1, CurrentEL
    cmp     x1, #(2 << 2)
    b.ne    .Lnot_el2
    /* Position check: armhv is not position-independent. */
    adr     x1, _start
    ldr     x2, =_start
    cmp     x1, x2
    b.ne    .Lwrong_place

    ldr     x1, =__stacks_start
    add     sp, x1, #STACK_SIZE

    ldr     x1, =__bss_start
    ldr     x2, =__bss_end
1:  cmp     x1, x2
    b.hs    2f
    stp     xzr, xzr, [x1], #16
    b       1b
2:
    ldr     x1, =el2_vectors
    msr     vbar_el2, x1
    isb
    mov     x0, x19
    mov     x1, #0                  /* CPU index 0 */
    msr     tpidr_el2, x1
    bl      primary_main
    b       .Lpark

.global secondary_entry
secondary_entry:
    mov     x19, x0
    ldr     x1, =__stacks_start
    add     x2, x19, #1
    mov     x3, #STACK_SIZE
    madd    x1, x2, x3, x1
    mov     sp, x1
    ldr     x1, =el2_vectors
    msr     vbar_el2, x1
    isb
    msr     tpidr_el2, x19
    mov     x0, x19
    bl      secondary_main
    b       .Lpark

/* Nothing can be printed this early: park. A debugger shows the reason in the label. */
.Lnot_el2:
.Lwrong_place:
.Lpark:
    wfe
    b       .Lpark
