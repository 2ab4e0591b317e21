//! The attacker's own exception vectors: every synchronous exception an attack
//! causes is caught and recorded, and the attack goes on after it.
//!
//! - Synchronous, current EL (SP_EL1 or SP_EL0): if a probe is armed, the
//!   syndrome is recorded and execution resumes after the faulting instruction
//!   (or at the return address of a `blr`, for jumps into nowhere); otherwise it
//!   goes to `baremetal`'s handler, which reports it and powers off.
//! - IRQ, current EL: `baremetal`'s IRQ entry (it calls our `entry!` handler).
//! - Anything from EL0 (AArch64 or AArch32): back to the caller of [`run_el0`]
//!   with the syndrome.
//!
//! System-register and system-instruction accesses are built at run time: an
//! `mrs`/`msr`/`sys` word written into a two-instruction stub (then `ret`), so
//! any encoding can be tried, not only those the assembler names.

use core::arch::{asm, global_asm};

use baremetal::console::Global;

global_asm!(
    r#"
    .section .text.hostile_vectors, "ax"
    .balign 0x800
    .global hostile_vectors
hostile_vectors:
    /* current EL with SP_EL0 */
    .balign 0x80
    b       hv_sync
    .balign 0x80
    b       vectors + 0x280
    .balign 0x80
    b       vectors + 0x100
    .balign 0x80
    b       vectors + 0x180
    /* current EL with SP_EL1 */
    .balign 0x80
    b       hv_sync
    .balign 0x80
    b       vectors + 0x280
    .balign 0x80
    b       vectors + 0x300
    .balign 0x80
    b       vectors + 0x380
    /* lower EL, AArch64 and AArch32: all return to run_el0's caller */
    .irp n, 8, 9, 10, 11, 12, 13, 14, 15
    .balign 0x80
    b       hv_el0_return
    .endr

hv_sync:
    stp     x0, x1, [sp, #-16]!
    adrp    x0, {fault}
    add     x0, x0, :lo12:{fault}
    ldr     x1, [x0, #0]            /* armed */
    cbz     x1, 9f
    str     xzr, [x0, #0]           /* one probe, one exception */
    mrs     x1, esr_el1
    str     x1, [x0, #8]
    mrs     x1, far_el1
    str     x1, [x0, #16]
    mrs     x1, elr_el1
    str     x1, [x0, #32]
    mov     x1, #1
    str     x1, [x0, #24]           /* faulted */
    ldr     x1, [x0, #40]           /* resume: 0 after the instruction, 1 at x30 */
    cbz     x1, 1f
    mov     x1, x30
    b       2f
1:  mrs     x1, elr_el1
    add     x1, x1, #4
2:  msr     elr_el1, x1
    mrs     x1, spsr_el1
    bic     x1, x1, #(1 << 20)      /* PSTATE.IL: an illegal return is over */
    msr     spsr_el1, x1
    ldp     x0, x1, [sp], #16
    eret
9:  ldp     x0, x1, [sp], #16
    b       vectors + 0x200

    /* hostile_run_el0(entry, sp_el0, spsr, out): runs at EL0 from `entry`
     * until the first exception, then returns with out[0..4] = ESR_EL1,
     * FAR_EL1, ELR_EL1 and EL0's x0. EL0 never changes SP_EL1, so the
     * exception comes back on this very stack frame. */
    .section .text.hostile_run_el0, "ax"
    .global hostile_run_el0
hostile_run_el0:
    sub     sp, sp, #112
    stp     x19, x20, [sp, #0]
    stp     x21, x22, [sp, #16]
    stp     x23, x24, [sp, #32]
    stp     x25, x26, [sp, #48]
    stp     x27, x28, [sp, #64]
    stp     x29, x30, [sp, #80]
    str     x3, [sp, #96]
    msr     sp_el0, x1
    msr     elr_el1, x0
    msr     spsr_el1, x2
    mov     x0, #0
    mov     x1, #0
    mov     x2, #0
    mov     x3, #0
    isb
    eret
hv_el0_return:
    mov     x9, x0
    ldr     x3, [sp, #96]
    mrs     x0, esr_el1
    str     x0, [x3, #0]
    mrs     x0, far_el1
    str     x0, [x3, #8]
    mrs     x0, elr_el1
    str     x0, [x3, #16]
    str     x9, [x3, #24]
    ldp     x19, x20, [sp, #0]
    ldp     x21, x22, [sp, #16]
    ldp     x23, x24, [sp, #32]
    ldp     x25, x26, [sp, #48]
    ldp     x27, x28, [sp, #64]
    ldp     x29, x30, [sp, #80]
    add     sp, sp, #112
    ret
"#,
    fault = sym FAULT,
);

/// What `hv_sync` records while a probe is armed (field offsets used above).
#[repr(C)]
struct FaultRecord {
    armed: u64,
    esr: u64,
    far: u64,
    faulted: u64,
    elr: u64,
    /// 0: resume after the faulting instruction; 1: at x30.
    resume: u64,
}

// Shared only with this CPU's exception handler; only CPU 0 probes.
static mut FAULT: FaultRecord =
    FaultRecord { armed: 0, esr: 0, far: 0, faulted: 0, elr: 0, resume: 0 };

/// A synchronous exception an attack caused.
#[derive(Clone, Copy)]
pub struct Fault {
    pub esr: u64,
}

/// Points VBAR_EL1 at our vectors (per CPU, after `baremetal`'s init).
pub fn install() {
    // SAFETY: `hostile_vectors` is a 2 KiB aligned EL1 vector table that
    // preserves the interrupted context (or reports and powers off).
    unsafe {
        asm!("adr {t}, hostile_vectors", "msr vbar_el1, {t}", "isb", t = out(reg) _, options(nostack))
    };
}

/// Runs `access` with a probe armed: an exception it causes is recorded and
/// execution continues after the faulting instruction (`at_lr` false) or at
/// x30 (`at_lr` true: a `blr` into an address that faults).
pub fn probe_with(at_lr: bool, access: impl FnOnce()) -> Result<(), Fault> {
    let f = &raw mut FAULT;
    // SAFETY: FAULT is shared only with this CPU's handler; volatile accesses
    // keep the compiler from caching it across the probed access.
    unsafe {
        (&raw mut (*f).faulted).write_volatile(0);
        (&raw mut (*f).resume).write_volatile(u64::from(at_lr));
        (&raw mut (*f).armed).write_volatile(1);
    }
    access();
    // SAFETY: as above.
    unsafe {
        (&raw mut (*f).armed).write_volatile(0);
        if (&raw const (*f).faulted).read_volatile() == 0 {
            return Ok(());
        }
        Err(Fault { esr: (&raw const (*f).esr).read_volatile() })
    }
}

pub fn probe(access: impl FnOnce()) -> Result<(), Fault> {
    probe_with(false, access)
}

/// Access widths for [`load`] and [`store`].
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Width {
    B,
    H,
    W,
    X,
}

impl Width {
    pub fn bytes(self) -> u64 {
        match self {
            Width::B => 1,
            Width::H => 2,
            Width::W => 4,
            Width::X => 8,
        }
    }
}

/// One load of `width` at `addr`, an exception caught.
pub fn load(addr: u64, width: Width) -> Result<u64, Fault> {
    let mut v: u64 = 0;
    probe(|| {
        // SAFETY: one load; if it faults the handler skips it. The address is
        // not Rust memory (or is memory no Rust object lives in).
        unsafe {
            match width {
                Width::B => {
                    asm!("ldrb {v:w}, [{a}]", a = in(reg) addr, v = inout(reg) v, options(nostack))
                }
                Width::H => {
                    asm!("ldrh {v:w}, [{a}]", a = in(reg) addr, v = inout(reg) v, options(nostack))
                }
                Width::W => {
                    asm!("ldr {v:w}, [{a}]", a = in(reg) addr, v = inout(reg) v, options(nostack))
                }
                Width::X => {
                    asm!("ldr {v}, [{a}]", a = in(reg) addr, v = inout(reg) v, options(nostack))
                }
            }
        }
    })?;
    Ok(v)
}

/// One store of `width` at `addr`, an exception caught.
pub fn store(addr: u64, width: Width, v: u64) -> Result<(), Fault> {
    probe(|| {
        // SAFETY: one store, skipped by the handler if it faults; the address
        // is not Rust memory.
        unsafe {
            match width {
                Width::B => {
                    asm!("strb {v:w}, [{a}]", a = in(reg) addr, v = in(reg) v, options(nostack))
                }
                Width::H => {
                    asm!("strh {v:w}, [{a}]", a = in(reg) addr, v = in(reg) v, options(nostack))
                }
                Width::W => {
                    asm!("str {v:w}, [{a}]", a = in(reg) addr, v = in(reg) v, options(nostack))
                }
                Width::X => {
                    asm!("str {v}, [{a}]", a = in(reg) addr, v = in(reg) v, options(nostack))
                }
            }
        }
    })
}

/// Branches (`blr`) to `addr`: an instruction abort comes back here.
pub fn jump(addr: u64) -> Result<(), Fault> {
    probe_with(true, || {
        // SAFETY: the target faults (it is not the VM's RAM) and the handler
        // resumes at x30, after the `blr`; every caller-saved register is
        // declared clobbered in case it did run something.
        unsafe { asm!("blr {a}", a = in(reg) addr, clobber_abi("C"), options(nostack)) }
    })
}

/// A system register or system instruction: op0, op1, CRn, CRm, op2.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct SysReg {
    pub op0: u8,
    pub op1: u8,
    pub crn: u8,
    pub crm: u8,
    pub op2: u8,
}

pub const fn sysreg(op0: u8, op1: u8, crn: u8, crm: u8, op2: u8) -> SysReg {
    SysReg { op0, op1, crn, crm, op2 }
}

impl SysReg {
    /// The instruction fields common to MRS, MSR and SYS (Rt = x0).
    fn fields(self) -> u32 {
        (u32::from(self.op0 & 3) << 19)
            | (u32::from(self.op1 & 7) << 16)
            | (u32::from(self.crn & 15) << 12)
            | (u32::from(self.crm & 15) << 8)
            | (u32::from(self.op2 & 7) << 5)
    }
}

impl core::fmt::Display for SysReg {
    fn fmt(&self, f: &mut core::fmt::Formatter) -> core::fmt::Result {
        write!(f, "s{}_{}_c{}_c{}_{}", self.op0, self.op1, self.crn, self.crm, self.op2)
    }
}

/// `mrs x0, <reg>` / `msr <reg>, x0` / `sys` with L = 1 for reads.
const MSR_BASE: u32 = 0xd500_0000;
const MRS_L: u32 = 1 << 21;
const RET: u32 = 0xd65f_03c0;

#[repr(C, align(64))]
struct Stub([Global<u32>; 2]);

static STUB: Stub = Stub([Global::new(RET), Global::new(RET)]);

fn set_stub(insn: u32) -> u64 {
    STUB.0[0].set(insn);
    STUB.0[1].set(RET);
    let addr = STUB.0.as_ptr() as u64;
    // SAFETY: cache maintenance of our own stub, then a context
    // synchronization, so the new instruction is what executes.
    unsafe {
        asm!(
            "dc cvau, {a}", "dsb ish", "ic ivau, {a}", "dsb ish", "isb",
            a = in(reg) addr, options(nostack)
        )
    };
    addr
}

/// Reads `reg` with MRS (op0 2 or 3), an exception caught.
pub fn read_sysreg(reg: SysReg) -> Result<u64, Fault> {
    let addr = set_stub(MSR_BASE | MRS_L | reg.fields());
    let mut v: u64 = 0;
    probe(|| {
        // SAFETY: the stub is `mrs x0, <reg>; ret`; reading a register at EL1
        // changes no memory (reads with side effects, like ICC_IAR1_EL1, only
        // change interrupt state). Everything the call may clobber is declared.
        unsafe {
            asm!("blr {s}", s = in(reg) addr, inout("x0") v, clobber_abi("C"), options(nostack))
        }
    })?;
    Ok(v)
}

/// Writes `value` to `reg` with MSR, an exception caught. The caller picks
/// registers whose change cannot break the guest.
pub fn write_sysreg(reg: SysReg, value: u64) -> Result<(), Fault> {
    let addr = set_stub(MSR_BASE | reg.fields());
    probe(|| {
        // SAFETY: the stub is `msr <reg>, x0; ret`; see above.
        unsafe {
            asm!("blr {s}", s = in(reg) addr, in("x0") value, clobber_abi("C"), options(nostack))
        }
    })
}

/// A system instruction (op0 = 1: DC, IC, AT, TLBI) with `operand` in x0.
pub fn sys(reg: SysReg, operand: u64) -> Result<(), Fault> {
    write_sysreg(SysReg { op0: 1, ..reg }, operand)
}

/// What a run at EL0 ended with.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct El0Exit {
    pub esr: u64,
    pub far: u64,
    pub elr: u64,
    pub x0: u64,
}

unsafe extern "C" {
    fn hostile_run_el0(entry: u64, sp_el0: u64, spsr: u64, out: *mut El0Exit);
}

/// SPSR for AArch64 EL0t, interrupts masked.
pub const SPSR_EL0T: u64 = 0x3c0;
/// SPSR for AArch32 User mode (A32 state), interrupts masked.
pub const SPSR_USR32: u64 = 0x1d0;

/// Runs the code at `entry` at EL0 (`spsr` picks AArch64 or AArch32) until its
/// first exception; `stack` is its SP.
pub fn run_el0(entry: u64, stack: u64, spsr: u64) -> El0Exit {
    let mut out = El0Exit::default();
    // SAFETY: the code at `entry` ends in an exception (SVC or a fault), which
    // returns here with our callee-saved registers restored; it can touch only
    // what EL0 may (with the MMU off, any of our RAM: the callers give it code
    // that does not write memory).
    unsafe { hostile_run_el0(entry, stack, spsr, &mut out) };
    out
}
