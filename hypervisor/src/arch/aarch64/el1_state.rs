//! The guest's EL1 system-register state.
//!
//! These registers are not touched on a trap: while the same vCPU keeps the CPU they stay live
//! in the hardware. They are saved and restored only when the CPU switches to another vCPU.

macro_rules! el1_state {
    ($($reg:ident),* $(,)?) => {
        /// EL1 (and EL0) system registers of one vCPU, named as in the ARM ARM.
        #[derive(Clone, Default, Debug)]
        #[allow(non_snake_case)]
        pub struct El1State {
            $(pub $reg: u64,)*
            /// VDISR_EL2: with HCR_EL2.AMO set, the guest's DISR_EL1 (FEAT_RAS). Only on
            /// CPUs that have it.
            pub vdisr_el2: u64,
        }

        impl El1State {
            /// Copies the live hardware registers into `self`.
            pub fn save(&mut self) {
                $(
                    // SAFETY: reading an EL1 system register at EL2 has no side effects.
                    unsafe {
                        core::arch::asm!(concat!("mrs {}, ", stringify!($reg)), out(reg) self.$reg,
                            options(nomem, nostack, preserves_flags));
                    }
                )*
                if super::cpu::has_ras() {
                    // SAFETY: VDISR_EL2 exists (FEAT_RAS); reading it has no side effects.
                    unsafe {
                        core::arch::asm!("mrs {}, s3_4_c12_c1_1", out(reg) self.vdisr_el2,
                            options(nomem, nostack, preserves_flags));
                    }
                }
            }

            /// Loads `self` into the hardware. Takes effect for the guest at the next `eret`.
            pub fn restore(&self) {
                $(
                    // SAFETY: armhv runs at EL2 with its own translation regime (TTBR0_EL2,
                    // SCTLR_EL2...), so EL1 registers only affect the guest about to run.
                    unsafe {
                        core::arch::asm!(concat!("msr ", stringify!($reg), ", {}"), in(reg) self.$reg,
                            options(nomem, nostack, preserves_flags));
                    }
                )*
                if super::cpu::has_ras() {
                    // SAFETY: VDISR_EL2 exists (FEAT_RAS) and only holds what the guest about
                    // to run reads as DISR_EL1.
                    unsafe {
                        core::arch::asm!("msr s3_4_c12_c1_1, {}", in(reg) self.vdisr_el2,
                            options(nomem, nostack, preserves_flags));
                    }
                }
            }
        }
    };
}

el1_state!(
    sctlr_el1,
    cpacr_el1,
    ttbr0_el1,
    ttbr1_el1,
    tcr_el1,
    mair_el1,
    amair_el1,
    vbar_el1,
    contextidr_el1,
    esr_el1,
    far_el1,
    afsr0_el1,
    afsr1_el1,
    par_el1,
    elr_el1,
    spsr_el1,
    sp_el0,
    sp_el1,
    tpidr_el0,
    tpidrro_el0,
    tpidr_el1,
    cntkctl_el1,
    csselr_el1,
    mdscr_el1,
    cntv_ctl_el0,
    cntv_cval_el0,
    vmpidr_el2,
);

/// SCTLR_EL1 at reset with the MMU, caches and alignment checks off (RES1 bits set).
pub const SCTLR_EL1_RESET: u64 = 0x30d0_0800;

impl El1State {
    /// The architectural state a vCPU starts with: MMU off, nothing enabled.
    pub fn reset(vcpu_affinity: u64) -> Self {
        Self {
            sctlr_el1: SCTLR_EL1_RESET,
            // MPIDR_EL1 as the guest reads it: bit 31 RES1, Aff0 = vCPU index.
            vmpidr_el2: (1 << 31) | vcpu_affinity,
            ..Self::default()
        }
    }

    /// Writes the two registers that make an injected exception visible to the guest, on the
    /// live hardware (the vCPU is loaded while its exits are handled).
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
}
