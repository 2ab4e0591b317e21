//! The few CPU instructions and registers the guests use directly.

use core::arch::asm;

/// Affinity fields of MPIDR_EL1: Aff3 (bits 39:32) and Aff2..Aff0 (bits 23:0).
pub const MPIDR_AFF_MASK: u64 = 0xff_00ff_ffff;

/// The exception level we run at (CurrentEL.EL).
pub fn current_el() -> u64 {
    let el: u64;
    // SAFETY: reading CurrentEL has no side effects.
    unsafe { asm!("mrs {v}, CurrentEL", v = out(reg) el, options(nomem, nostack)) };
    (el >> 2) & 3
}

/// MPIDR_EL1, whole.
pub fn mpidr() -> u64 {
    let v: u64;
    // SAFETY: reading MPIDR_EL1 has no side effects.
    unsafe { asm!("mrs {v}, mpidr_el1", v = out(reg) v, options(nomem, nostack)) };
    v
}

/// This CPU's affinity (MPIDR_EL1's affinity fields), as the device tree's cpu nodes give it.
pub fn affinity() -> u64 {
    mpidr() & MPIDR_AFF_MASK
}

/// Waits for an event: another CPU's `sev`, or the event stream (about 1 ms).
pub fn wfe() {
    // SAFETY: `wfe` only waits for an event (or the event stream).
    unsafe { asm!("wfe", options(nomem, nostack)) };
}

/// `yield`: a hint that this CPU is spinning. QEMU's TCG runs another vCPU at
/// once (needed under `-icount`, where all vCPUs share one host thread); on
/// hardware it costs about nothing and, unlike `wfe`, it is never trapped.
pub fn yield_now() {
    // SAFETY: `yield` is a hint with no architectural effect.
    unsafe { asm!("yield", options(nomem, nostack)) };
}

/// Waits until our earlier memory accesses are complete and visible (`dsb sy`).
pub fn dsb() {
    // SAFETY: a barrier has no memory-safety effect.
    unsafe { asm!("dsb sy", options(nostack)) };
}

/// Makes our stores visible (`dsb sy`), then wakes the CPUs waiting in `wfe`.
pub fn dsb_sev() {
    // SAFETY: barriers and an event have no memory-safety effect.
    unsafe { asm!("dsb sy", "sev", options(nostack)) };
}

/// Unmasks IRQs (PSTATE.I = 0): the IRQ vector may run from the next instruction on.
pub fn irqs_on() {
    // SAFETY: the IRQ vector saves and restores everything it touches; the
    // handler may change globals, hence no `nomem`.
    unsafe { asm!("msr daifclr, #2", "isb", options(nostack)) };
}

/// Masks IRQs (PSTATE.I = 1).
pub fn irqs_off() {
    // SAFETY: masking interrupts has no memory effect.
    unsafe { asm!("msr daifset, #2", options(nostack)) };
}
