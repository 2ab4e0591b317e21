//! The guest's EL1 system-register state (`vmm::arch::El1State`) in the hardware.
//!
//! These registers are not touched on a trap: while the same vCPU keeps the CPU they stay live
//! in the hardware. They are saved and restored only when the CPU switches to another vCPU.

use vmm::arch::El1State;

macro_rules! save_restore {
    ($($reg:ident),* $(,)?) => {
        /// Copies the live hardware registers into `state`.
        pub fn save(state: &mut El1State) {
            $(
                // SAFETY: reading an EL1 system register at EL2 has no side effects.
                unsafe {
                    core::arch::asm!(concat!("mrs {}, ", stringify!($reg)), out(reg) state.$reg,
                        options(nomem, nostack, preserves_flags));
                }
            )*
            if super::cpu::has_ras() {
                // SAFETY: VDISR_EL2 exists (FEAT_RAS); reading it has no side effects.
                unsafe {
                    core::arch::asm!("mrs {}, s3_4_c12_c1_1", out(reg) state.vdisr_el2,
                        options(nomem, nostack, preserves_flags));
                }
            }
            if has_sme() {
                // SAFETY: TPIDR2_EL0 exists (FEAT_SME); reading it has no side effects.
                unsafe {
                    core::arch::asm!("mrs {}, s3_3_c13_c0_5", out(reg) state.tpidr2_el0,
                        options(nomem, nostack, preserves_flags));
                }
            }
        }

        /// Loads `state` into the hardware. Takes effect for the guest at the next `eret`.
        pub fn restore(state: &El1State) {
            $(
                // SAFETY: armhv runs at EL2 with its own translation regime (TTBR0_EL2,
                // SCTLR_EL2...), so EL1 registers only affect the guest about to run.
                unsafe {
                    core::arch::asm!(concat!("msr ", stringify!($reg), ", {}"), in(reg) state.$reg,
                        options(nomem, nostack, preserves_flags));
                }
            )*
            if super::cpu::has_ras() {
                // SAFETY: VDISR_EL2 exists (FEAT_RAS) and only holds what the guest about to
                // run reads as DISR_EL1.
                unsafe {
                    core::arch::asm!("msr s3_4_c12_c1_1, {}", in(reg) state.vdisr_el2,
                        options(nomem, nostack, preserves_flags));
                }
            }
            if has_sme() {
                // SAFETY: TPIDR2_EL0 exists (FEAT_SME); armhv does not use it, only the
                // guest about to run reads it.
                unsafe {
                    core::arch::asm!("msr s3_3_c13_c0_5, {}", in(reg) state.tpidr2_el0,
                        options(nomem, nostack, preserves_flags));
                }
            }
        }
    };
}

vmm::el1_registers!(save_restore);

/// Whether the CPU implements SME (ID_AA64PFR1_EL1.SME, bits [27:24]), read once.
fn has_sme() -> bool {
    use core::sync::atomic::{AtomicU8, Ordering};
    const UNKNOWN: u8 = 2;
    static SME: AtomicU8 = AtomicU8::new(UNKNOWN);
    match SME.load(Ordering::Relaxed) {
        UNKNOWN => {
            let pfr1 = super::id_regs::read(trap::id_regs::IdReg::IdAa64Pfr1);
            let sme = (pfr1 >> 24) & 0xf != 0;
            SME.store(sme as u8, Ordering::Relaxed);
            sme
        }
        known => known == 1,
    }
}

/// Writes the registers that make an injected exception visible to the guest, on the live
/// hardware (the vCPU is loaded while its exits are handled).
pub fn write_live_fault(esr: u64, far: u64, elr: u64, spsr: u64) {
    // SAFETY: these EL1 registers belong to the guest currently loaded on this CPU; writing
    // them is how an exception is injected (ARM ARM D1.10).
    unsafe {
        core::arch::asm!(
            "msr esr_el1, {esr}",
            "msr far_el1, {far}",
            "msr elr_el1, {elr}",
            "msr spsr_el1, {spsr}",
            esr = in(reg) esr, far = in(reg) far, elr = in(reg) elr, spsr = in(reg) spsr,
            options(nomem, nostack, preserves_flags)
        );
    }
}

/// The live SCTLR_EL1 of the loaded guest.
pub fn live_sctlr() -> u64 {
    let v: u64;
    // SAFETY: reading SCTLR_EL1 has no side effects.
    unsafe { core::arch::asm!("mrs {}, sctlr_el1", out(reg) v, options(nomem, nostack)) };
    v
}

/// The live VBAR_EL1 of the loaded guest.
pub fn live_vbar() -> u64 {
    let v: u64;
    // SAFETY: reading VBAR_EL1 has no side effects.
    unsafe { core::arch::asm!("mrs {}, vbar_el1", out(reg) v, options(nomem, nostack)) };
    v
}
