/*
 * Entry points. The primary CPU arrives from the loader at EL2 with the MMU off and x0 = the
 * physical address of the device tree (arm64 Image boot protocol). Secondary CPUs arrive from
 * the firmware's PSCI CPU_ON with x0 = their logical CPU index (the context_id we passed).
 *
 * armhv runs wherever it was loaded (docs/boards.md): this code uses PC-relative addresses
 * only (adr, adrp + :lo12:), and the primary CPU applies armhv's R_AARCH64_RELATIVE
 * relocations (the absolute addresses in its data: vtables, pointers in statics, the GOT)
 * with the load offset before any Rust code runs, as Linux's arm64 early boot and U-Boot do
 * for themselves. Secondary CPUs start after that, at the address the relocated code computed.
 */
.equ STACK_SIZE, 0x10000
/* ELF64 r_info of a relative relocation: type R_AARCH64_RELATIVE (1027), symbol 0. */
.equ R_AARCH64_RELATIVE, 1027

/* x = the run-time address of `sym`, within 4 GiB of here. */
.macro adr_l reg, sym
    adrp    \reg, \sym
    add     \reg, \reg, :lo12:\sym
.endm

.section .text.head, "ax"
.global _start
_start:
    /* arm64 Image header (Documentation/arch/arm64/booting.rst) */
    b       primary_entry           /* code0 */
    .long   0                       /* code1 */
    .quad   0x80000                 /* text_offset: from a 2 MiB-aligned base */
    .quad   __hyp_end - _start      /* image_size: with bss and stacks; xtask adds the package */
    .quad   0xa                     /* flags: little-endian, 4 KiB pages, 2 MiB-aligned base anywhere */
    .quad   0, 0, 0                 /* reserved */
    .ascii  "ARM\x64"               /* magic */
    .long   0                       /* reserved (PE header offset) */

primary_entry:
    mov     x19, x0
    mrs     x1, CurrentEL
    cmp     x1, #(2 << 2)
    b.ne    .Lnot_el2

    /* x20 = the load offset: where armhv runs minus where it was linked (0 with -kernel). */
    adr     x20, _start
    ldr     x1, .Llink_addr
    sub     x20, x20, x1
    adr_l   x9, __hyp_start
    adr_l   x10, __hyp_end

    /*
     * Relocate: each Elf64_Rela is r_offset (a link-time address), r_info, r_addend; write
     * r_addend + offset at r_offset + offset. Applied even when the offset is 0: the linker
     * leaves the places zero (no --apply-dynamic-relocs). Anything but a relative relocation
     * inside the image means a build that cannot run here: park.
     */
    adr_l   x2, __rela_start
    adr_l   x3, __rela_end
1:  cmp     x2, x3
    b.hs    2f
    ldp     x4, x5, [x2], #16
    ldr     x6, [x2], #8
    cmp     x5, #R_AARCH64_RELATIVE
    b.ne    .Lbad_relocation
    add     x4, x4, x20
    cmp     x4, x9
    b.lo    .Lbad_relocation
    cmp     x4, x10
    b.hs    .Lbad_relocation
    add     x6, x6, x20
    str     x6, [x4]
    b       1b
2:
    adr_l   x1, __bss_start
    adr_l   x2, __bss_end
3:  cmp     x1, x2
    b.hs    4f
    stp     xzr, xzr, [x1], #16
    b       3b
4:
    /*
     * The stores above went to memory with the MMU (and so the data cache) off. Invalidate the
     * image's lines to the point of coherency, so that no line the loader left in a cache
     * (clean, per the boot protocol, or a dirty one over bss and stacks) hides them once the
     * caches are on. A plain invalidate (DC IVAC) loses nothing of armhv's: nothing has been
     * written through the cache yet. The range is page-aligned (linker.ld).
     */
    mrs     x1, ctr_el0
    ubfx    x1, x1, #16, #4         /* CTR_EL0.DminLine: log2 of the line in words */
    mov     x2, #4
    lsl     x2, x2, x1
    mov     x1, x9
5:  dc      ivac, x1
    add     x1, x1, x2
    cmp     x1, x10
    b.lo    5b
    dsb     sy

    adr_l   x1, __stacks_start
    add     sp, x1, #STACK_SIZE
    adr_l   x1, el2_vectors
    msr     vbar_el2, x1
    isb
    mov     x0, x19
    mov     x1, x20                 /* primary_main(dtb, load offset) */
    mov     x2, #0                  /* CPU index 0 */
    msr     tpidr_el2, x2
    bl      primary_main
    b       .Lpark

/* The link address, from the linker script: an absolute symbol, so no relocation applies. */
.balign 8
.Llink_addr:
    .quad   __hyp_link_addr

.global secondary_entry
secondary_entry:
    mov     x19, x0
    adr_l   x1, __stacks_start
    add     x2, x19, #1
    mov     x3, #STACK_SIZE
    madd    x1, x2, x3, x1
    mov     sp, x1
    adr_l   x1, el2_vectors
    msr     vbar_el2, x1
    isb
    msr     tpidr_el2, x19
    mov     x0, x19
    bl      secondary_main
    b       .Lpark

/* Nothing can be printed this early: park. A debugger shows the reason in the label. */
.Lnot_el2:
.Lbad_relocation:
.Lpark:
    wfe
    b       .Lpark
