//! The GICv3 virtual CPU interface control registers (ICH_*_EL2): list registers, the
//! hypervisor control register and the per-vCPU VMCR/active-priority state.
//!
//! Writing them only changes the virtual CPU interface of the guest armhv is about to run on
//! this CPU; reading them has no side effects.

use aarch64_cpu::registers::{
    ICH_AP1R0_EL2, ICH_HCR_EL2, ICH_LR0_EL2, ICH_LR1_EL2, ICH_LR2_EL2, ICH_LR3_EL2, ICH_LR4_EL2,
    ICH_LR5_EL2, ICH_LR6_EL2, ICH_LR7_EL2, ICH_LR8_EL2, ICH_LR9_EL2, ICH_LR10_EL2, ICH_LR11_EL2,
    ICH_LR12_EL2, ICH_LR13_EL2, ICH_LR14_EL2, ICH_LR15_EL2, ICH_VMCR_EL2, ICH_VTR_EL2, Readable,
    Writeable,
};

use vmm::arch::MAX_LRS;

/// ICH_HCR_EL2.En: the virtual CPU interface is on.
pub const HCR_EN: u64 = ICH_HCR_EL2::En::SET.value;
/// ICH_HCR_EL2.UIE, underflow maintenance: at most one LR is valid (so more pending ones can be
/// brought in).
pub const HCR_UIE: u64 = ICH_HCR_EL2::UIE::SET.value;

#[inline]
pub fn write_hcr(v: u64) {
    ICH_HCR_EL2.set(v);
}

#[inline]
pub fn read_vmcr() -> u64 {
    ICH_VMCR_EL2.get()
}

#[inline]
pub fn write_vmcr(v: u64) {
    ICH_VMCR_EL2.set(v);
}

#[inline]
pub fn read_ap1r0() -> u64 {
    ICH_AP1R0_EL2.get()
}

#[inline]
pub fn write_ap1r0(v: u64) {
    ICH_AP1R0_EL2.set(v);
}

/// Number of list registers this CPU implements (ICH_VTR_EL2.ListRegs + 1).
pub fn lr_count() -> usize {
    (ICH_VTR_EL2.read(ICH_VTR_EL2::ListRegs) as usize + 1).min(MAX_LRS)
}

/// Each list register is its own system register: an index needs a match.
macro_rules! lr_access {
    ($($n:literal => $lr:ident),* $(,)?) => {
        /// Reads ICH_LR<n>_EL2 (0 for n >= 16).
        pub fn read_lr(n: usize) -> u64 {
            match n {
                $($n => $lr.get(),)*
                _ => 0,
            }
        }

        /// Writes ICH_LR<n>_EL2 (nothing for n >= 16).
        pub fn write_lr(n: usize, v: u64) {
            match n {
                $($n => $lr.set(v),)*
                _ => {}
            }
        }
    };
}

lr_access!(
    0 => ICH_LR0_EL2,
    1 => ICH_LR1_EL2,
    2 => ICH_LR2_EL2,
    3 => ICH_LR3_EL2,
    4 => ICH_LR4_EL2,
    5 => ICH_LR5_EL2,
    6 => ICH_LR6_EL2,
    7 => ICH_LR7_EL2,
    8 => ICH_LR8_EL2,
    9 => ICH_LR9_EL2,
    10 => ICH_LR10_EL2,
    11 => ICH_LR11_EL2,
    12 => ICH_LR12_EL2,
    13 => ICH_LR13_EL2,
    14 => ICH_LR14_EL2,
    15 => ICH_LR15_EL2,
);
