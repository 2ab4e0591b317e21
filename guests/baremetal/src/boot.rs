//! Image header, entry points, stacks and the EL1 exception vectors.
//!
//! Entry state (arm64 boot protocol, and PSCI CPU_ON for secondaries): EL1h, MMU
//! and D-cache off, DAIF masked, x0 = device tree address (primary) or the
//! CPU_ON context id (secondary). We never turn the MMU on: every data access is
//! then Device-nGnRnE, which is why the guest avoids unaligned accesses (the
//! target has `+strict-align`) and atomics (exclusives need Normal memory).
//!
//! The code here jumps to three symbols the guest binary defines with
//! [`entry!`](crate::entry): `baremetal_primary`, `baremetal_secondary` and
//! `baremetal_irq`, and prints `BAREMETAL_NAME` if it was loaded at the wrong address.

use core::arch::global_asm;

use fdt::Fdt;

use crate::{dt, println, psci, time};

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
    bl      baremetal_primary
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
    bl      baremetal_secondary
park:
    wfe
    b       park

    /* Loaded elsewhere (a VM whose RAM does not start at 0x40000000): say so on
     * the default PL011 using PC-relative addressing only (the image moved by a
     * multiple of 2 MiB, so adrp still finds the name), then SYSTEM_OFF. */
wrong_address:
    adrp    x1, BAREMETAL_NAME
    add     x1, x1, :lo12:BAREMETAL_NAME
    bl      early_puts
    adr     x1, 3f
    bl      early_puts
    movz    x0, #0x8400, lsl #16
    orr     x0, x0, #8              /* PSCI SYSTEM_OFF */
    hvc     #0
    b       park
3:  .asciz  ": PANIC: not loaded at its link address 0x40080000\r\n"
    .balign 4

    /* Prints the NUL-terminated string at x1. Clobbers x1-x4. */
early_puts:
    movz    x2, #{uart_hi}, lsl #16     /* the guest ABI's PL011 */
0:  ldrb    w3, [x1], #1
    cbz     w3, 1f
2:  ldr     w4, [x2, #0x18]         /* UARTFR */
    tbnz    w4, #5, 2b              /* TXFF */
    str     w3, [x2]                /* UARTDR */
    b       0b
1:  ret

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
     * exception (a probe) or an IRQ at EL1 with SP_EL1 can be expected;
     * everything else is reported and ends the run. */
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
    .balign 0x80
    b       el1_irq
    .irp kind, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15
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

    /* IRQ at EL1h. It can interrupt any Rust code that runs with IRQs
     * unmasked, so it saves all that the AAPCS64 handler may
     * clobber: x0-x18, x29, x30, the whole of every SIMD register (only the
     * low halves of v8-v15 are callee-saved), FPCR, FPSR, ELR and SPSR.
     * Frame: x-registers and system registers at 0..207, q0-q31 at 208. */
el1_irq:
    sub     sp, sp, #{irq_frame}
    stp     x0, x1, [sp, #0]
    stp     x2, x3, [sp, #16]
    stp     x4, x5, [sp, #32]
    stp     x6, x7, [sp, #48]
    stp     x8, x9, [sp, #64]
    stp     x10, x11, [sp, #80]
    stp     x12, x13, [sp, #96]
    stp     x14, x15, [sp, #112]
    stp     x16, x17, [sp, #128]
    stp     x18, x29, [sp, #144]
    mrs     x0, elr_el1
    mrs     x1, spsr_el1
    stp     x30, x0, [sp, #160]
    mrs     x2, fpcr
    mrs     x3, fpsr
    stp     x1, x2, [sp, #176]
    str     x3, [sp, #192]
    add     x0, sp, #208
    stp     q0, q1, [x0], #32
    stp     q2, q3, [x0], #32
    stp     q4, q5, [x0], #32
    stp     q6, q7, [x0], #32
    stp     q8, q9, [x0], #32
    stp     q10, q11, [x0], #32
    stp     q12, q13, [x0], #32
    stp     q14, q15, [x0], #32
    stp     q16, q17, [x0], #32
    stp     q18, q19, [x0], #32
    stp     q20, q21, [x0], #32
    stp     q22, q23, [x0], #32
    stp     q24, q25, [x0], #32
    stp     q26, q27, [x0], #32
    stp     q28, q29, [x0], #32
    stp     q30, q31, [x0], #32
    bl      baremetal_irq
    add     x0, sp, #208
    ldp     q0, q1, [x0], #32
    ldp     q2, q3, [x0], #32
    ldp     q4, q5, [x0], #32
    ldp     q6, q7, [x0], #32
    ldp     q8, q9, [x0], #32
    ldp     q10, q11, [x0], #32
    ldp     q12, q13, [x0], #32
    ldp     q14, q15, [x0], #32
    ldp     q16, q17, [x0], #32
    ldp     q18, q19, [x0], #32
    ldp     q20, q21, [x0], #32
    ldp     q22, q23, [x0], #32
    ldp     q24, q25, [x0], #32
    ldp     q26, q27, [x0], #32
    ldp     q28, q29, [x0], #32
    ldp     q30, q31, [x0], #32
    ldr     x3, [sp, #192]
    ldp     x1, x2, [sp, #176]
    msr     fpsr, x3
    msr     fpcr, x2
    msr     spsr_el1, x1
    ldp     x30, x0, [sp, #160]
    msr     elr_el1, x0
    ldp     x18, x29, [sp, #144]
    ldp     x16, x17, [sp, #128]
    ldp     x14, x15, [sp, #112]
    ldp     x12, x13, [sp, #96]
    ldp     x10, x11, [sp, #80]
    ldp     x8, x9, [sp, #64]
    ldp     x6, x7, [sp, #48]
    ldp     x4, x5, [sp, #32]
    ldp     x2, x3, [sp, #16]
    ldp     x0, x1, [sp, #0]
    add     sp, sp, #{irq_frame}
    eret
"#,
    unexpected_exception = sym unexpected_exception,
    irq_frame = const IRQ_FRAME,
    probe = sym PROBE,
    stacks = sym STACKS,
    max_cpus = const MAX_CPUS,
    stack_size = const STACK_SIZE,
    uart_hi = const guest_abi::map::UART_BASE.0 >> 16,
);

// `early_puts` builds the UART's address from its bits [31:16].
const _: () = assert!(guest_abi::map::UART_BASE.0 & !0xffff_0000 == 0);

/// Bytes `el1_irq` saves: 26 x-register slots, then 32 q-registers.
const IRQ_FRAME: usize = 208 + 32 * 16;

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

/// The program's name as a NUL-terminated array, for the `BAREMETAL_NAME` that
/// [`entry!`](crate::entry) defines (`N` = the name's length + 1).
pub const fn nul_terminated<const N: usize>(name: &str) -> [u8; N] {
    let bytes = name.as_bytes();
    assert!(bytes.len() + 1 == N, "N must be the name's length + 1");
    let mut out = [0; N];
    let mut i = 0;
    while i < bytes.len() {
        out[i] = bytes[i];
        i += 1;
    }
    out
}

/// The primary CPU's start (from [`entry!`](crate::entry)): vectors, stack slot 0,
/// the event stream, and the device tree at `dt_addr`, its NOPs removed.
pub fn primary_init(name: &'static str, dt_addr: u64) -> Fdt<'static> {
    crate::NAME.set(name);
    install_vectors();
    set_cpu_slot(0);
    time::enable_event_stream();
    if dt_addr == 0 {
        panic!("no device tree (x0 = 0): boot as an Image or raw binary, not as an ELF");
    }
    // SAFETY: the boot protocol hands us a device tree at `dt_addr`, in RAM
    // that is ours; nothing else uses it.
    let blob = match unsafe { dt::blob(dt_addr) } {
        Ok(blob) => blob,
        Err(e) => panic!("bad device tree at {dt_addr:#x}: {e}"),
    };
    dt::strip_nops(blob);
    match Fdt::new(blob) {
        Ok(fdt) => fdt,
        Err(e) => panic!("bad device tree at {dt_addr:#x}: {e:?}"),
    }
}

/// A secondary CPU's start (from [`entry!`](crate::entry)): vectors, its stack
/// slot (the PSCI CPU_ON context id) and the event stream.
pub fn secondary_init(slot: usize) {
    install_vectors();
    set_cpu_slot(slot);
    time::enable_event_stream();
}

unsafe extern "C" {
    /// PSCI CPU_ON entry point above; the context id is the stack slot
    /// (0 parks the CPU at once).
    fn secondary_entry();
}

/// The entry point to give PSCI CPU_ON for a secondary CPU.
pub fn secondary_entry_point() -> u64 {
    secondary_entry as *const () as u64
}

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

/// Records this CPU's stack slot (0 for the boot CPU) in TPIDR_EL1, where
/// the IRQ handler finds it.
pub fn set_cpu_slot(slot: usize) {
    // SAFETY: TPIDR_EL1 is a scratch register nothing else uses.
    unsafe { core::arch::asm!("msr tpidr_el1, {v}", v = in(reg) slot, options(nomem, nostack)) };
}

/// This CPU's stack slot (see `set_cpu_slot`).
pub fn cpu_slot() -> usize {
    let slot: usize;
    // SAFETY: reading TPIDR_EL1 has no side effects.
    unsafe { core::arch::asm!("mrs {v}, tpidr_el1", v = out(reg) slot, options(nomem, nostack)) };
    slot.min(MAX_CPUS - 1)
}

/// The syndrome of an access that aborted.
#[derive(Clone, Copy)]
pub struct Abort {
    pub esr: u64,
    pub far: u64,
}

/// Runs `access` (one instruction that may fault: a load or store, see
/// `read32`/`write32`, or a system-register access a hypervisor may refuse) with a
/// probe armed: a synchronous exception it causes is recorded and skipped. Only
/// the first fault is caught: `access` must fault at most once.
pub fn probe(access: impl FnOnce()) -> Result<(), Abort> {
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
        "{}: PANIC: unexpected exception {name} esr={esr:#x} elr={elr:#x} far={far:#x}",
        crate::name()
    );
    psci::system_off();
}
