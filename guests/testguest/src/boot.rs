//! Image header, entry points and the EL1 exception vectors.
//!
//! Entry state (arm64 boot protocol, and PSCI CPU_ON for secondaries): EL1h, MMU
//! and D-cache off, DAIF masked, x0 = device tree address (primary) or the
//! CPU_ON context id (secondary). We never turn the MMU on: every data access is
//! then Device-nGnRnE, which is why the guest avoids unaligned accesses (the
//! target has `+strict-align`) and atomics (exclusives need Normal memory).

use core::arch::global_asm;

use crate::{println, psci};

/// Most CPUs the guest can run on; each gets one stack.
pub const MAX_CPUS: usize = 8;
const STACK_SIZE: usize = 16 * 1024;

global_asm!(
    r#"
    .section .text.head, "ax"
    .global _start
_start:
    /* arm64 Image header (Documentation/arch/arm64/booting.rst). */
    b       primary_entry           /* code0 */
    .long   0                       /* code1 */
    .quad   0x80000                 /* text_offset from a 2 MiB aligned RAM base */
    .quad   __image_size            /* image_size: the whole image, .bss included */
    /* flags = 0x2: bit 0 = 0 little-endian, bits 1-2 = 1 4 KiB pages, bit 3 = 0
     * "place near the base of DRAM": the image is linked at 0x40080000, it is not
     * position independent, so it does not claim it can sit anywhere. */
    .quad   0x2
    .quad   0, 0, 0                 /* res2..res4 */
    .ascii  "ARM\x64"               /* magic */
    .long   0                       /* res5 */

primary_entry:
    mov     x19, x0                 /* device tree address */
    /* Absolute addresses in .rodata assume the link address: refuse anything else. */
    adr     x1, _start
    ldr     x2, =_start
    cmp     x1, x2
    b.ne    wrong_address
    bl      enable_fp
    adrp    x1, __bss_start
    add     x1, x1, :lo12:__bss_start
    adrp    x2, __bss_end
    add     x2, x2, :lo12:__bss_end
0:  cmp     x1, x2
    b.hs    1f
    stp     xzr, xzr, [x1], #16
    b       0b
1:  mov     x0, #0                  /* stack slot 0 */
    bl      set_stack
    mov     x0, x19
    bl      {primary_main}
    b       park

    /* PSCI CPU_ON entry; x0 = context id = stack slot, 1..MAX_CPUS-1. */
    .global secondary_entry
secondary_entry:
    cbz     x0, park
    cmp     x0, #{max_cpus}
    b.hs    park
    mov     x19, x0
    bl      enable_fp
    mov     x0, x19
    bl      set_stack
    mov     x0, x19
    bl      {secondary_main}
park:
    wfe
    b       park

    /* Loaded elsewhere (a VM whose RAM does not start at 0x40000000): say so on
     * the default PL011 using PC-relative addressing only, then SYSTEM_OFF. */
wrong_address:
    adr     x1, 3f
    movz    x2, #0x0900, lsl #16
0:  ldrb    w3, [x1], #1
    cbz     w3, 2f
1:  ldr     w4, [x2, #0x18]         /* UARTFR */
    tbnz    w4, #5, 1b              /* TXFF */
    str     w3, [x2]                /* UARTDR */
    b       0b
2:  movz    x0, #0x8400, lsl #16
    orr     x0, x0, #8              /* PSCI SYSTEM_OFF */
    hvc     #0
    b       park
3:  .asciz  "testguest: PANIC: not loaded at its link address 0x40080000\r\n"
    .balign 4

    /* SP = top of stack slot x0. Clobbers x1. */
set_stack:
    add     x0, x0, #1
    mov     x1, #{stack_size}
    mul     x0, x0, x1
    adrp    x1, {stacks}
    add     x1, x1, :lo12:{stacks}
    add     x0, x0, x1
    mov     sp, x0
    ret

    /* CPACR_EL1.FPEN = 0b11: the compiler uses FP/SIMD registers (memcpy, fmt). */
enable_fp:
    mrs     x1, cpacr_el1
    orr     x1, x1, #(3 << 20)
    msr     cpacr_el1, x1
    isb
    ret
    .ltorg

    /* VBAR_EL1: 16 entries of 0x80 bytes, 2 KiB aligned. Only a synchronous
     * exception at EL1 with SP_EL1 can be expected (a probe); everything else is
     * reported and ends the run. */
    .section .text.vectors, "ax"
    .balign 0x800
    .global vectors
vectors:
    .irp kind, 0, 1, 2, 3
    .balign 0x80
    mov     x0, #\kind
    b       unexpected
    .endr
    .balign 0x80
    b       el1_sync
    .irp kind, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15
    .balign 0x80
    mov     x0, #\kind
    b       unexpected
    .endr

el1_sync:
    stp     x0, x1, [sp, #-16]!
    adrp    x0, {probe}
    add     x0, x0, :lo12:{probe}
    ldr     x1, [x0, #0]            /* Probe.armed */
    cbz     x1, 2f
    str     xzr, [x0, #0]           /* one probe, one fault */
    mrs     x1, esr_el1
    str     x1, [x0, #8]
    mrs     x1, far_el1
    str     x1, [x0, #16]
    mov     x1, #1
    str     x1, [x0, #24]           /* Probe.faulted */
    mrs     x1, elr_el1
    add     x1, x1, #4              /* skip the faulting load or store */
    msr     elr_el1, x1
    ldp     x0, x1, [sp], #16
    eret
2:  ldp     x0, x1, [sp], #16
    mov     x0, #4
unexpected:
    mrs     x1, esr_el1
    mrs     x2, elr_el1
    mrs     x3, far_el1
    bl      {unexpected_exception}
    b       .
"#,
    primary_main = sym crate::primary_main,
    secondary_main = sym crate::secondary_main,
    unexpected_exception = sym unexpected_exception,
    probe = sym PROBE,
    stacks = sym STACKS,
    max_cpus = const MAX_CPUS,
    stack_size = const STACK_SIZE,
);

#[repr(C, align(16))]
struct Stacks([u8; MAX_CPUS * STACK_SIZE]);

// Only touched through `sp` by the entry code above.
static mut STACKS: Stacks = Stacks([0; MAX_CPUS * STACK_SIZE]);

/// What the synchronous handler records while a probe is armed. Field offsets
/// are used by `el1_sync` above.
#[repr(C)]
struct Probe {
    armed: u64,
    esr: u64,
    far: u64,
    faulted: u64,
}

// Written by the exception handler and by `probe` (one CPU at a time).
static mut PROBE: Probe = Probe { armed: 0, esr: 0, far: 0, faulted: 0 };

/// Points VBAR_EL1 at our vector table (per CPU).
pub fn install_vectors() {
    // SAFETY: `vectors` is a valid, 2 KiB aligned EL1 vector table that stays
    // mapped (the MMU is off); the handlers preserve the interrupted context.
    unsafe {
        core::arch::asm!(
            "adr {t}, vectors",
            "msr vbar_el1, {t}",
            "isb",
            t = out(reg) _,
            options(nostack),
        );
    }
}

/// The syndrome of an access that aborted.
#[derive(Clone, Copy)]
pub struct Abort {
    pub esr: u64,
    pub far: u64,
}

/// Runs `access` (one load or store instruction, see `read32`/`write32`) with a
/// probe armed: a synchronous exception it causes is recorded and skipped.
fn probe(access: impl FnOnce()) -> Result<(), Abort> {
    let p = &raw mut PROBE;
    // SAFETY: PROBE is only shared with this CPU's exception handler; volatile
    // accesses keep the compiler from caching it across the probed access.
    unsafe {
        (&raw mut (*p).faulted).write_volatile(0);
        (&raw mut (*p).armed).write_volatile(1);
    }
    access();
    // SAFETY: as above.
    unsafe {
        (&raw mut (*p).armed).write_volatile(0);
        if (&raw const (*p).faulted).read_volatile() == 0 {
            return Ok(());
        }
        Err(Abort {
            esr: (&raw const (*p).esr).read_volatile(),
            far: (&raw const (*p).far).read_volatile(),
        })
    }
}

/// Reads 32 bits at `addr`, turning a synchronous abort into `Err`.
pub fn read32(addr: u64) -> Result<u32, Abort> {
    let mut value: u32 = 0;
    probe(|| {
        // SAFETY: one `ldr`; if it faults the handler skips it and `value`
        // keeps whatever the register held. The address is not Rust memory.
        unsafe {
            core::arch::asm!("ldr {v:w}, [{a}]", a = in(reg) addr, v = inout(reg) value, options(nostack));
        }
    })?;
    Ok(value)
}

/// Writes 32 bits at `addr`, turning a synchronous abort into `Err`.
pub fn write32(addr: u64, value: u32) -> Result<(), Abort> {
    probe(|| {
        // SAFETY: one `str`, skipped by the handler if it faults. The address
        // is not Rust memory, so no Rust object changes behind our back.
        unsafe {
            core::arch::asm!("str {v:w}, [{a}]", a = in(reg) addr, v = in(reg) value, options(nostack));
        }
    })
}

const VECTOR_NAMES: [&str; 16] = [
    "sync/EL1t",
    "irq/EL1t",
    "fiq/EL1t",
    "serror/EL1t",
    "sync/EL1h",
    "irq/EL1h",
    "fiq/EL1h",
    "serror/EL1h",
    "sync/EL0-64",
    "irq/EL0-64",
    "fiq/EL0-64",
    "serror/EL0-64",
    "sync/EL0-32",
    "irq/EL0-32",
    "fiq/EL0-32",
    "serror/EL0-32",
];

extern "C" fn unexpected_exception(kind: u64, esr: u64, elr: u64, far: u64) -> ! {
    let name = VECTOR_NAMES.get(kind as usize).copied().unwrap_or("?");
    println!(
        "testguest: PANIC: unexpected exception {name} esr={esr:#x} elr={elr:#x} far={far:#x}"
    );
    psci::system_off();
}
