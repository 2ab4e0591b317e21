//! Entering a guest and coming back: the fast path every trap takes.
//!
//! `enter` runs the vCPU until its next exception to EL2. Only the general-purpose registers,
//! ELR_EL2 and SPSR_EL2 move through memory on that path (vectors.S, whose offsets into
//! `GuestRegs` the monitor's layout assertions fix); everything else is the monitor's business
//! when the CPU changes hands.

use vmm::arch::{ExitKind, GuestRegs};

unsafe extern "C" {
    fn __guest_enter(regs: *mut GuestRegs) -> u64;
}

/// Runs the guest until it traps to EL2.
#[inline]
pub fn enter(regs: &mut GuestRegs) -> ExitKind {
    // SAFETY: the vCPU's Stage-2 tables, HCR_EL2 and EL1 state are loaded on this CPU (the
    // monitor's `run::load`), so the guest can only reach what its VM was given. __guest_enter
    // preserves the AAPCS callee-saved registers and returns here on the next trap.
    let kind = unsafe { __guest_enter(regs) };
    // An SError still pending from this guest is this guest's, whatever else made it exit.
    if kind != 3 && super::cpu::take_pending_serror() {
        return ExitKind::SError;
    }
    match kind {
        0 => ExitKind::Sync,
        1 => ExitKind::Irq,
        2 => ExitKind::Fiq,
        3 => ExitKind::SError,
        _ => ExitKind::AArch32,
    }
}
